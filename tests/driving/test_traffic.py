"""Batched IDM/MOBIL traffic: the models' equations, safety, yielding, bad input."""

import math

import numpy as np
import pytest
import torch

from simsci.driving import (
    PARAM_NAMES,
    Traffic,
    default_params,
    make_road,
    metrics,
    sample_params,
    straight_road,
)
from simsci.driving._traffic import DT


def _params(n=1, **kw):
    return default_params(n, **kw)


def _run(tr, steps):
    """Step and stack (T, B, V, 7) agents, valid, uids."""
    frames, valids, uids = [], [], []
    for _ in range(steps):
        tr.step()
        a, v = tr.agents()
        frames.append(a.clone())
        valids.append(v.clone())
        uids.append(tr.state.uid.clone())
    return torch.stack(frames), torch.stack(valids), torch.stack(uids)


def _same_vehicle(valid, uid):
    """(T, B, V) valid and the same vehicle as in the previous frame."""
    same = torch.zeros_like(valid)
    same[1:] = valid[1:] & valid[:-1] & (uid[1:] == uid[:-1])
    return same


def test_free_road_acceleration_is_idm():
    road = straight_road(length=2000.0, lanes=1, oncoming=False, speed_limit=30.0)
    tr = Traffic([road], 1, params=_params(density=0.0), dtype=torch.float64)
    tr.reset()
    v = float(tr.state.v[0, 0])  # 0.8 of the limit
    tr.step()
    p = dict(zip(PARAM_NAMES, default_params(1)[0].tolist()))
    expected = p["max_accel"] * (1 - (v / 30.0) ** 4)
    assert float(tr.state.accel[0, 0]) == pytest.approx(expected, rel=1e-9)
    assert float(tr.state.v[0, 0]) == pytest.approx(v + expected * DT, rel=1e-12)
    # straight lane: no steering, the ego stays on the centre line
    assert abs(float(tr.state.offset[0, 0])) < 1e-9


def test_follower_approaches_idm_equilibrium_gap():
    road = straight_road(length=3000.0, lanes=1, oncoming=False, speed_limit=30.0)
    tr = Traffic([road], 1, params=_params(density=0.0), dtype=torch.float64)
    tr.reset()
    ego_lane = int(tr.state.lane[0, 0])
    # a slow leader 30 m ahead (its desired speed is half the limit)
    slot = tr.place(0, [ego_lane], [40.0], [15.0])
    tr.state.v_factor[0, slot] = 0.5
    tr.state.v[0, 0] = 15.0
    for _ in range(500):
        tr.step()
    st = tr.state
    gap = (st.x[0, slot] - st.x[0, 0]).item() - 0.5 * (st.length[0, 0] + st.length[0, slot]).item()
    v = st.v[0, 0].item()
    p = dict(zip(PARAM_NAMES, default_params(1)[0].tolist()))
    # IDM equilibrium at v: s_e = (s0 + v T) / sqrt(1 - (v / v0)^4)
    s_e = (p["min_gap"] + v * p["time_headway"]) / math.sqrt(1 - (v / 30.0) ** 4)
    assert v == pytest.approx(15.0, abs=0.05)
    assert gap == pytest.approx(s_e, rel=0.02)


def test_generated_traffic_is_collision_free_and_feasible():
    roads = [make_road(seed=s, length=3000.0) for s in (0, 1)]
    n = 4
    tr = Traffic(roads, n, params=sample_params(n, torch.Generator().manual_seed(0)), seed=3)
    tr.reset(nets=torch.tensor([0, 1, 0, 1]), start=torch.tensor([100.0, 400.0, 900.0, 1500.0]))
    a, valid, uid = _run(tr, 250)
    rel = a.clone()
    rel[..., :2] -= a[:, :, :1, :2]  # ego-relative: exact box tests in float32
    assert not bool(metrics.collisions(rel, valid).any())
    # kinematic feasibility of every vehicle that stays in its slot
    same = _same_vehicle(valid, uid)
    traj = rel.permute(1, 2, 0, 3) + 0  # B, V, T, 7
    traj[..., :2] = a.permute(1, 2, 0, 3)[..., :2] - a[0, :, :1, :2].unsqueeze(1)
    ok = same.permute(1, 2, 0)
    bad = metrics.infeasible_steps(traj, ok) & ok[..., 1:] & ok[..., :-1]
    assert not bool(bad.any())
    # traffic is there and moves
    assert float(valid.float().sum(-1).mean()) > 5
    assert float((a[..., 2] * valid).sum() / valid.sum()) > 5.0


def test_mobil_overtakes_a_slow_car():
    road = straight_road(length=3000.0, lanes=2, oncoming=False, speed_limit=30.0)
    tr = Traffic([road], 1, params=_params(density=0.0), dtype=torch.float64)
    tr.reset(start=[100.0])
    tr.state.v_factor[0, 0] = 0.4  # the ego (no lane changes) dawdles at 12 m/s
    lane0 = int(tr.state.lane[0, 0])
    # 40 m behind the ego on the route
    cum = np.concatenate([[0.0], np.cumsum(road.length[road.route])])
    j = int(np.searchsorted(cum, 60.0, side="right") - 1)
    (fast,) = tr.place(0, [road.route[j]], [60.0 - cum[j]], [25.0]).tolist()
    lanes, overlap, passed = [], False, False
    for _ in range(150):
        tr.step()
        st = tr.state
        assert bool(st.valid[0, fast])
        lanes.append(int(st.lane[0, fast]))
        agents, _ = tr.agents()
        overlap |= bool(metrics.boxes_overlap(agents[0, 0], agents[0, fast]))
        passed |= bool(st.x[0, fast] > st.x[0, 0] + 20)
    assert any(road.left[lane0] == lane or road.right[lane0] == lane for lane in lanes)
    assert passed and not overlap


def _junction_case():
    """A network with a crossing conflict between two junction connectors."""
    for seed in range(40):
        road = make_road(seed=seed, length=2000.0)
        for k, (a, b) in enumerate(road.conflict_lanes):
            kind_a, kind_b = road.kind[a], road.kind[b]
            sa, sb = road.conflict_s[k]
            crossing = 2 < sa < road.length[a] - 2 and 2 < sb < road.length[b] - 2
            pa, pb = road.pred[a, 0], road.pred[b, 0]
            if kind_a == kind_b == 1 and crossing and pa >= 0 and pb >= 0 and pa != pb:
                return road, k
    pytest.skip("no crossing conflict found")


def test_minor_lane_yields_at_a_crossing():
    road, k = _junction_case()
    a, b = road.conflict_lanes[k]
    pa, pb = road.pred[a, 0], road.pred[b, 0]
    # the ego near the junction (conflicts are handled near the ego)
    route_s = road.route_s()
    xy = road.conflict_xy[k]
    j = int(np.argmin(np.linalg.norm(road.route_polyline() - xy, axis=1)))
    tr = Traffic([road], 1, params=_params(density=0.0), dtype=torch.float64)
    tr.reset(start=[max(route_s[j] - 150.0, 0.0)])
    # both cars 25 m before their connectors at the same speed: they would meet
    ls = road.length
    d = min(ls[pa], ls[pb], 25.0) - 1.0
    slots = tr.place(0, [pa, pb], [ls[pa] - d, ls[pb] - d], [8.0, 8.0])
    for slot, lane in zip(slots.tolist(), (a, b)):
        tr.state.nxt[0, slot] = torch.tensor([lane, road.succ[lane, 0]])
    tr.state.v_factor[0, slots] = 8.0 / torch.as_tensor(road.speed_limit[[pa, pb]])
    times = {}
    min_v = 99.0
    for step in range(300):
        tr.step()
        st = tr.state
        agents, valid = tr.agents()
        pair = agents[0, slots]
        assert not bool(metrics.boxes_overlap(pair[0], pair[1]))
        for who, lane in ((0, a), (1, b)):
            sl = slots[who]
            if who not in times and int(st.lane[0, sl]) == lane and st.s[0, sl] > 0.5:
                times[who] = step
        min_v = min(min_v, float(st.v[0, slots[1]]))
    assert 0 in times and 1 in times
    assert times[0] < times[1]  # the car with the right of way went first
    assert min_v < 3.0  # the other one slowed down for it


def test_seeded_runs_repeat():
    roads = [make_road(seed=2, length=2000.0)]

    def run():
        tr = Traffic(roads, 2, seed=11)
        tr.reset()
        _run(tr, 30)
        return tr.agents()

    (a1, v1), (a2, v2) = run(), run()
    assert torch.equal(v1, v2)
    assert torch.equal(a1[v1], a2[v2])


def test_float64_and_state_shapes():
    road = straight_road(length=1000.0, lanes=2)
    tr = Traffic([road], 3, dtype=torch.float64, max_vehicles=12)
    tr.reset()
    tr.step()
    agents, valid = tr.agents()
    assert agents.shape == (3, 12, 7) and agents.dtype == torch.float64
    assert valid.shape == (3, 12) and bool(valid[:, 0].all())


def test_bad_input():
    road = straight_road(length=1000.0, lanes=1)
    with pytest.raises(ValueError, match="cannot fit on the road"):
        Traffic([road], 1, params=_params(density=500.0))
    with pytest.raises(ValueError, match="params must have shape"):
        Traffic([road], 2, params=torch.zeros(2, 3))
    bad = _params()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        Traffic([road], 1, params=bad)
    with pytest.raises(ValueError, match="ego must be"):
        Traffic([road], 1, ego="human")
    with pytest.raises(Exception, match="unknown traffic parameter"):
        default_params(1, densty=3)
    tr = Traffic([road], 1, ego="external")
    with pytest.raises(RuntimeError, match="reset"):
        tr.step(torch.zeros(1, 2))
    tr.reset()
    with pytest.raises(ValueError, match="ego_action"):
        tr.step()
    with pytest.raises(ValueError, match="outside the route"):
        tr.reset(start=[5000.0])


def test_traffic_env_and_metrics_follow_the_device(device):
    from simsci.envs import DrivingVectorEnv

    roads = [make_road(seed=4, length=1500.0)]
    tr = Traffic(roads, 4, device=device)
    tr.reset()
    for _ in range(20):
        tr.step()
    agents, valid = tr.agents()
    assert agents.device.type == device.type and agents.dtype == torch.float32
    rel = agents.clone()
    rel[..., :2] -= agents[:, :1, :2]
    rate = metrics.collision_rate(rel[:, None], valid[:, None])
    assert rate.device.type == device.type and float(rate) == 0.0
    env = DrivingVectorEnv(
        3, num_roads=1, route_length=1500.0, device=device, array_backend="torch"
    )
    obs, _ = env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(torch.zeros(3, 2, device=device))
    assert obs["lanes"].device.type == device.type and reward.device.type == device.type


def test_pool_lookups_match_the_polyline_arithmetic():
    """point_at / position_at / tangent_at / point_on read precomputed segment tables:
    the same numbers as interpolating the padded polylines directly."""
    from simsci.driving import RoadPool

    pool = RoadPool([make_road(seed=3, length=1500.0), make_road(seed=4, length=1500.0)])
    g = torch.Generator().manual_seed(0)
    net = torch.randint(pool.N, (200,), generator=g)
    lane = torch.randint(-1, pool.L, (200,), generator=g)
    s = (torch.rand(200, generator=g) * 1.2 - 0.1) * pool.length[net, lane.clamp(min=0)]
    flat = net * pool.L + lane.clamp(min=0)
    u = (s / pool.ds.reshape(-1)[flat]).clamp(min=0)
    i0 = torch.minimum(u.floor().long(), pool.num_points.reshape(-1)[flat] - 2)
    frac = (u - i0.to(u.dtype)).clamp(max=1.0).unsqueeze(-1)
    p0 = pool.points_flat[flat * pool.P + i0]
    seg = pool.points_flat[flat * pool.P + i0 + 1] - p0
    want_xy, want_t = p0 + frac * seg, seg / pool.ds_seg.reshape(-1)[flat].unsqueeze(-1)
    xy, t = pool.point_at(net, lane, s)
    assert torch.equal(xy, want_xy) and torch.equal(t, want_t)
    assert torch.equal(pool.position_at(net, lane, s), want_xy)
    assert torch.equal(pool.tangent_at(net, lane, s), want_t)
    xy, t = pool.point_on(pool.lane_rows(net, lane), s)
    assert torch.equal(xy, want_xy) and torch.equal(t, want_t)


@pytest.mark.parametrize("shape", [(1, 2), (3, 4), (64, 2), (100, 4)])
def test_idm_equilibrium_speed_is_the_plain_bisection(shape):
    """The in-place bisection gives the bits of the expression it replaced."""
    from simsci.driving._traffic import _idm_equilibrium_speed

    g = torch.Generator().manual_seed(1)
    v0 = 5 + 30 * torch.rand(shape, generator=g)
    s0 = 1.5 + torch.rand(shape[0], 1, generator=g)
    T = 0.8 + torch.rand(shape[0], 1, generator=g)
    gap = 40 * torch.rand(shape[0], 1, generator=g)
    lo, hi = torch.zeros_like(v0), v0.clone()
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        s_e = (s0 + mid * T) / torch.sqrt((1 - (mid / v0.clamp(min=1e-6)).pow(4)).clamp(min=1e-9))
        too_fast = s_e > gap.expand_as(v0)
        hi = torch.where(too_fast, mid, hi)
        lo = torch.where(too_fast, lo, mid)
    assert torch.equal(_idm_equilibrium_speed(gap, v0, s0, T), lo)
