"""The agent contract of the driving world (simsci.driving._lanes, _agents): LaneSet and
its sources, AgentState, the kinematic bicycle in curvature form (step_agents) and the
feasible box."""

import math

import pytest
import torch

from simsci import driving
from simsci.driving import MAX_ACCEL, MAX_BRAKE, MAX_CURVATURE, MAX_CURVATURE_RATE, Traffic

D = torch.float64


def _agents(x, y, theta, v, *, accel=None, kappa=None, length=4.5, width=1.8, valid=None):
    x = torch.as_tensor(x, dtype=D).reshape(1, -1)
    shape = x.shape

    def full(val):
        return torch.as_tensor(val, dtype=D).expand(shape).clone()

    ok = torch.ones(shape, dtype=torch.bool) if valid is None else valid.reshape(shape)
    return driving.AgentState(
        x, full(y), full(theta), full(v), full(0.0 if accel is None else accel),
        full(0.0 if kappa is None else kappa), full(length), full(width), ok,
    )  # fmt: skip


# ------------------------------------------------------------------ the bicycle
def test_bicycle_straight_line_closed_form():
    a, v0, dt, n = 1.5, 3.0, 0.1, 30
    ag = _agents([0.0], 2.0, 0.0, v0, length=4.0)
    ctrl = torch.ones(1, 1, dtype=torch.bool)
    for _ in range(n):
        ag = driving.step_agents(
            ag, torch.full((1, 1), a, dtype=D), torch.zeros(1, 1, dtype=D), ctrl
        )
    # semi-implicit Euler: v_k = v0 + a k dt, x_n = sum_{k=1..n} v_k dt
    x_n = dt * (n * v0 + a * dt * n * (n + 1) / 2)
    assert float(ag.x) == pytest.approx(x_n, abs=1e-12)
    assert float(ag.y) == 2.0 and float(ag.theta) == 0.0
    assert float(ag.v) == pytest.approx(v0 + a * n * dt, abs=1e-12)
    assert float(ag.accel) == pytest.approx(a, abs=1e-12)
    # braking to a stop: the speed stops at 0 and the realised acceleration says so
    ag = driving.step_agents(
        ag, torch.full((1, 1), -1e3, dtype=D), torch.zeros(1, 1, dtype=D), ctrl
    )
    assert float(ag.v) == 0.0 and float(ag.accel) == pytest.approx(-(v0 + a * n * dt) / dt)


def test_bicycle_constant_curvature_circle():
    v, k, dt, n, length = 8.0, 0.1, 0.1, 40, 4.5
    ag = _agents([1.0], -2.0, 0.3, v, kappa=k, length=length)
    ctrl = torch.ones(1, 1, dtype=torch.bool)
    xs, ys, ths = [1.0], [-2.0], [0.3]
    for _ in range(n):
        ag = driving.step_agents(
            ag, torch.zeros(1, 1, dtype=D), torch.full((1, 1), k, dtype=D), ctrl
        )
        xs.append(float(ag.x))
        ys.append(float(ag.y))
        ths.append(float(ag.theta))
    # heading turns by phi = v k dt per step; the centre moves by chords of v dt whose
    # direction turns by phi: the vertices of a regular polygon on a circle of radius
    # R = v dt / (2 sin(phi / 2)) (-> 1/k as dt -> 0)
    phi = v * k * dt
    beta = math.asin(k * 0.3 * length)
    radius = v * dt / (2 * math.sin(phi / 2))
    d1 = 0.3 + phi + beta  # direction of the first chord
    cx = 1.0 + radius * math.cos(d1 - phi / 2 + math.pi / 2)
    cy = -2.0 + radius * math.sin(d1 - phi / 2 + math.pi / 2)
    for i in range(n + 1):
        assert math.hypot(xs[i] - cx, ys[i] - cy) == pytest.approx(radius, abs=1e-9)
        dth = math.remainder(ths[i] - (0.3 + i * phi), 2 * math.pi)
        assert dth == pytest.approx(0.0, abs=1e-12)
    assert radius == pytest.approx(1 / k, rel=phi**2)


def test_step_agents_reproduces_traffic():
    road = driving.straight_road(300.0, lanes=2)
    tr = Traffic([road], 2, seed=0, dtype=D, params=driving.default_params(2, density=30))
    tr.reset()
    tr.step()
    before = driving.AgentState.from_traffic(tr)
    uid = tr.state.uid.clone()
    tr.step()
    st = tr.state
    same = before.valid & st.valid & (st.uid == uid)
    after = driving.step_agents(before, st.accel, st.kappa, same)
    for name in ("x", "y", "theta", "v", "accel", "kappa"):
        err = (getattr(after, name) - getattr(st, name))[same].abs().max()
        assert float(err) < 1e-12, name
    assert int(same.sum()) >= 2


# ------------------------------------------------------------------ lanes
def test_lanes_from_road_and_crop():
    road = driving.straight_road(250.0, lanes=2)
    lanes = driving.lanes_from_road(road, dtype=D)
    L = road.num_lanes
    assert lanes.points.shape == (1, L, driving.LANE_POINTS, 2)
    for lane in range(L):
        p = road.lane_polyline(lane)
        q = lanes.points[0, lane].numpy()
        assert abs(q[0] - p[0]).max() < 1e-12 and abs(q[-1] - p[-1]).max() < 1e-12
        seg = ((q[1:] - q[:-1]) ** 2).sum(-1) ** 0.5
        assert seg.max() - seg.min() < 1e-9
    assert lanes.succ[0].tolist() == road.succ[:, :2].tolist()
    # crop around x = 40: only lanes near it, succ remapped to the kept ones
    crop, source = driving.crop_lanes(lanes, torch.tensor([[40.0, -1.75]], dtype=D), 60.0)
    kept = source[0][source[0] >= 0].tolist()
    assert 0 < len(kept) < L
    for i, lane in enumerate(kept):
        for j, s in enumerate(crop.succ[0, i].tolist()):
            orig = int(lanes.succ[0, lane, j])
            assert s == (kept.index(orig) if orig in kept else -1)


def test_feasible_box_limits():
    # rates around the previous controls, clamped into the absolute limits (never empty)
    kin = torch.tensor(
        [[10.0, 0.0, 0.0, 4.5], [10.0, 3.9, 0.0, 4.5], [30.0, 0.0, 0.05, 4.5]], dtype=D
    )
    lo_a, hi_a, lo_k, hi_k = driving.feasible_box(kin)
    dt = driving.DT
    assert lo_a[0] == pytest.approx(-driving.MAX_JERK * dt) and hi_a[1] == MAX_ACCEL
    assert torch.all(lo_a >= -MAX_BRAKE) and torch.all(lo_a <= hi_a) and torch.all(lo_k <= hi_k)
    assert lo_k[0] == pytest.approx(-MAX_CURVATURE_RATE * dt)
    # at 30 m/s the lateral-acceleration limit binds (8 / 30^2 < 0.25), taken at the
    # highest speed the step can reach (30 + 2.5 dt); the rate window covers that box
    kmax = driving.curvature_limit(torch.tensor([30.0, 1.0], dtype=D))
    assert float(kmax[0]) == pytest.approx(driving.MAX_LATERAL_ACCEL / 900.0)
    assert float(kmax[1]) == MAX_CURVATURE
    k_hi = driving.MAX_LATERAL_ACCEL / (30.0 + driving.MAX_JERK * dt * dt) ** 2
    assert float(hi_k[2]) == pytest.approx(k_hi) and float(lo_k[2]) == -float(hi_k[2])


def test_manoeuvre_index():
    assert [driving.manoeuvre_index(m) for m in driving.MANOEUVRES] == [0, 1, 2, 3]
    assert driving.manoeuvre_index(2) == 2
    with pytest.raises(ValueError, match="unknown manoeuvre 'overtake'"):
        driving.manoeuvre_index("overtake")
    with pytest.raises(ValueError, match="manoeuvre index must lie in"):
        driving.manoeuvre_index(4)


# ------------------------------------------------------------------ bad input
def test_bad_input_rejected():
    ag = _agents([10.0], 0.0, 0.0, 10.0)
    with pytest.raises(ValueError, match="LaneSet.points must have shape"):
        driving.LaneSet(torch.zeros(1, 2, 20, 3), torch.ones(1, 2), torch.ones(1, 2),
                        torch.full((1, 2, 2), -1), torch.ones(1, 2, dtype=torch.bool))  # fmt: skip
    with pytest.raises(ValueError, match="LaneSet.succ must hold lane ids"):
        driving.LaneSet(torch.zeros(1, 2, 20, 2), torch.ones(1, 2), torch.ones(1, 2),
                        torch.full((1, 2, 2), 5), torch.ones(1, 2, dtype=torch.bool))  # fmt: skip
    with pytest.raises(ValueError, match="NaN or inf in 1 valid agents"):
        _agents([float("nan")], 0.0, 0.0, 10.0)
    _agents([float("nan")], 0.0, 0.0, 10.0, valid=torch.tensor([False]))  # padding may be NaN
    with pytest.raises(ValueError, match="AgentState.v must have shape"):
        z, o = torch.zeros(1, 2), torch.ones(1, 2)
        driving.AgentState(z, z, z, torch.zeros(1, 3), o, o, o, o, o > 0)
    with pytest.raises(ValueError, match="manoeuvre must index MANOEUVRES"):
        ag.replace(manoeuvre=torch.tensor([[7]]))
    with pytest.raises(ValueError, match="accel/kappa have NaN"):
        driving.step_agents(ag, torch.full((1, 1), math.nan), torch.zeros(1, 1), ag.valid)
