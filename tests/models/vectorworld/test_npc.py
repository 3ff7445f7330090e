"""ΔSim, VectorWorld's NPC policy (simsci.models.vectorworld._npc)."""

import json
import math

import pytest
import torch

from simsci import driving
from simsci.driving import metrics
from simsci.driving._traffic import (
    MAX_ACCEL,
    MAX_BRAKE,
    MAX_CURVATURE,
    MAX_CURVATURE_RATE,
    Traffic,
)
from simsci.models.vectorworld import _npc as npc
from simsci.train import load_model, save_model

D = torch.float64


def _agents(x, y, theta, v, *, accel=None, kappa=None, length=4.5, width=1.8, valid=None):
    x = torch.as_tensor(x, dtype=D).reshape(1, -1)
    shape = x.shape

    def full(val):
        return torch.as_tensor(val, dtype=D).expand(shape).clone()

    ok = torch.ones(shape, dtype=torch.bool) if valid is None else valid.reshape(shape)
    return npc.AgentState(
        x, full(y), full(theta), full(v), full(0.0 if accel is None else accel),
        full(0.0 if kappa is None else kappa), full(length), full(width), ok,
    )  # fmt: skip


def _two_lanes(length=100.0, pieces=2, width=3.5):
    """Straight road along +x: lane 2k at y = 0, lane 2k+1 at y = width (its left
    neighbour), ``pieces`` pieces of ``length`` each, linked by succ."""
    pts, succ = [], []
    t = torch.linspace(0.0, length, npc.LANE_POINTS, dtype=D)
    for k in range(pieces):
        for lat in (0.0, width):
            pts.append(torch.stack([k * length + t, torch.full_like(t, lat)], -1))
            i = len(pts) - 1
            succ.append([i + 2 if k + 1 < pieces else -1, -1])
    n = len(pts)
    return npc.LaneSet(
        torch.stack(pts)[None], torch.full((1, n), width, dtype=D),
        torch.full((1, n), 20.0, dtype=D), torch.tensor(succ)[None],
        torch.ones(1, n, dtype=torch.bool),
    )  # fmt: skip


# ------------------------------------------------------------------ the bicycle
def test_bicycle_straight_line_closed_form():
    a, v0, dt, n = 1.5, 3.0, 0.1, 30
    ag = _agents([0.0], 2.0, 0.0, v0, length=4.0)
    ctrl = torch.ones(1, 1, dtype=torch.bool)
    for _ in range(n):
        ag = npc.step_agents(ag, torch.full((1, 1), a, dtype=D), torch.zeros(1, 1, dtype=D), ctrl)
    # semi-implicit Euler: v_k = v0 + a k dt, x_n = sum_{k=1..n} v_k dt
    x_n = dt * (n * v0 + a * dt * n * (n + 1) / 2)
    assert float(ag.x) == pytest.approx(x_n, abs=1e-12)
    assert float(ag.y) == 2.0 and float(ag.theta) == 0.0
    assert float(ag.v) == pytest.approx(v0 + a * n * dt, abs=1e-12)
    assert float(ag.accel) == pytest.approx(a, abs=1e-12)
    # braking to a stop: the speed stops at 0 and the realised acceleration says so
    ag = npc.step_agents(ag, torch.full((1, 1), -1e3, dtype=D), torch.zeros(1, 1, dtype=D), ctrl)
    assert float(ag.v) == 0.0 and float(ag.accel) == pytest.approx(-(v0 + a * n * dt) / dt)


def test_bicycle_constant_curvature_circle():
    v, k, dt, n, length = 8.0, 0.1, 0.1, 40, 4.5
    ag = _agents([1.0], -2.0, 0.3, v, kappa=k, length=length)
    ctrl = torch.ones(1, 1, dtype=torch.bool)
    xs, ys, ths = [1.0], [-2.0], [0.3]
    for _ in range(n):
        ag = npc.step_agents(ag, torch.zeros(1, 1, dtype=D), torch.full((1, 1), k, dtype=D), ctrl)
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
    before = npc.AgentState.from_traffic(tr)
    uid = tr.state.uid.clone()
    tr.step()
    st = tr.state
    same = before.valid & st.valid & (st.uid == uid)
    after = npc.step_agents(before, st.accel, st.kappa, same)
    for name in ("x", "y", "theta", "v", "accel", "kappa"):
        err = (getattr(after, name) - getattr(st, name))[same].abs().max()
        assert float(err) < 1e-12, name
    assert int(same.sum()) >= 2


# ------------------------------------------------------------------ features
def test_features_on_two_straight_lanes():
    lanes = _two_lanes()
    # 0: on lane 0, 0.5 m left of centre, heading 0.1; 1: 30 m ahead on lane 0;
    # 2: beside 0 on lane 1, 10 m ahead; 3: invalid
    ag = _agents(
        [10.0, 40.0, 20.0, 0.0], [0.5, 0.0, 3.5, 0.0], [0.1, 0.0, 0.0, 0.0],
        [10.0, 5.0, 12.0, 0.0], length=4.0, valid=torch.tensor([True, True, True, False]),
    )  # fmt: skip
    f = npc.features(lanes, ag)
    assert f.x.shape == (1, 4, npc.FEATURE_DIM) == (1, 4, len(npc.FEATURE_NAMES))
    assert f.lane.tolist() == [[0, 0, 1, -1]]
    assert float(f.offset[0, 0]) == pytest.approx(0.5, abs=1e-9)
    assert float(f.heading_error[0, 0]) == pytest.approx(0.1, abs=1e-9)
    # neighbours: lane 1 is left of lane 0, nothing right; lane 0 right of lane 1
    assert f.neighbour[0, 0].tolist() == [1, -1]
    assert f.neighbour[0, 2].tolist() == [-1, 0]
    col = {n: i for i, n in enumerate(npc.FEATURE_NAMES)}
    assert float(f.x[0, 0, col["left_avail"]]) == 1.0 and float(f.x[0, 0, col["right_avail"]]) == 0
    # leaders: 30 m ahead in the lane, bumper gap 30 - 4; in the left corridor agent 2
    assert float(f.leader_gap[0, 0, 0]) == pytest.approx(26.0, abs=1e-6)
    assert float(f.leader_dv[0, 0, 0]) == pytest.approx(5.0 - 10.0, abs=1e-6)
    assert float(f.leader_gap[0, 0, 1]) == pytest.approx(10.0 - 4.0, abs=1e-6)
    assert float(f.follower_gap[0, 2, 2]) == pytest.approx(6.0, abs=1e-6)  # 0 behind 2, right
    assert float(f.leader_gap[0, 2, 2]) == pytest.approx(16.0, abs=1e-6)  # 1 ahead, right
    assert math.isinf(float(f.leader_gap[0, 1, 0]))  # nobody ahead of 1
    # the path continues over the successor piece; no path beyond the last one
    assert float(f.path_left[0, 0, 0]) == pytest.approx(100.0)
    assert float(f.path_left[0, 1, 0]) == pytest.approx(100.0)  # capped
    assert torch.all(f.x[0, 3] == 0)  # invalid agents read 0
    # a reference point 8 m ahead in the agent frame: rotate (8, -0.5) by -0.1
    c, s = math.cos(0.1), math.sin(0.1)
    assert float(f.x[0, 0, col["ref_x@8"]]) * 40 == pytest.approx(c * 8 - s * 0.5, abs=1e-6)
    assert float(f.x[0, 0, col["ref_y@8"]]) * 10 == pytest.approx(-s * 8 - c * 0.5, abs=1e-6)


def test_lanes_from_road_and_crop():
    road = driving.straight_road(250.0, lanes=2)
    lanes = npc.lanes_from_road(road, dtype=D)
    L = road.num_lanes
    assert lanes.points.shape == (1, L, npc.LANE_POINTS, 2)
    for lane in range(L):
        p = road.lane_polyline(lane)
        q = lanes.points[0, lane].numpy()
        assert abs(q[0] - p[0]).max() < 1e-12 and abs(q[-1] - p[-1]).max() < 1e-12
        seg = ((q[1:] - q[:-1]) ** 2).sum(-1) ** 0.5
        assert seg.max() - seg.min() < 1e-9
    assert lanes.succ[0].tolist() == road.succ[:, :2].tolist()
    # crop around x = 40: only lanes near it, succ remapped to the kept ones
    crop, source = npc.crop_lanes(lanes, torch.tensor([[40.0, -1.75]], dtype=D), 60.0)
    kept = source[0][source[0] >= 0].tolist()
    assert 0 < len(kept) < L
    for i, lane in enumerate(kept):
        for j, s in enumerate(crop.succ[0, i].tolist()):
            orig = int(lanes.succ[0, lane, j])
            assert s == (kept.index(orig) if orig in kept else -1)


def test_lanes_from_tiles_world_frame_and_links():
    from simsci.driving._tiles import cut_lanes, lane_graph

    road = driving.straight_road(200.0, lanes=2)
    poses = torch.tensor([[32.0, 0.0, 0.0], [96.0, 0.0, 0.0]], dtype=D).numpy()
    graph = lane_graph([cut_lanes(road, p) for p in poses], road)
    lanes = npc.lanes_from_tiles(graph, poses, dtype=D)
    assert lanes.points.shape == (1, len(graph["nodes"]["tile"]), npc.LANE_POINTS, 2)
    ys = set(round(float(y), 6) for y in lanes.points[0, :, :, 1].flatten())
    assert ys == {-5.25, -1.75, 1.75, 5.25}
    # an agent at x = 60 on forward lane 0 sees its path across the tile seam to x = 128
    f = npc.features(lanes, _agents([60.0], -1.75, 0.0, 10.0))
    assert int(f.lane[0, 0]) >= 0 and float(f.path_left[0, 0, 0]) == pytest.approx(68.0, abs=1e-6)
    with pytest.raises(TypeError, match="graph must be a scene lane graph"):
        npc.lanes_from_tiles({"nodes": {}}, poses)


# ------------------------------------------------------------------ shaping
def _random_states(n, gen, *, extreme=False):
    lanes = _two_lanes(pieces=3)
    u = lambda lo, hi: lo + (hi - lo) * torch.rand(1, n, generator=gen, dtype=D)  # noqa: E731
    if extreme:  # controls at or beyond the limits
        accel, kappa = u(6.0, 9.5), u(0.2, 0.29) * torch.sign(u(-1, 1))
    else:
        accel, kappa = u(-MAX_BRAKE, MAX_ACCEL), u(-0.05, 0.05)
    ag = npc.AgentState(
        u(5.0, 150.0), u(-1.0, 4.5), u(-0.2, 0.2), u(0.0, 40.0), accel, kappa,
        u(4.0, 5.0), u(1.7, 2.0), torch.ones(1, n, dtype=torch.bool),
    )  # fmt: skip
    return lanes, ag


def _roll(model, lanes, ag, steps, shaping, gen):
    ctrl = ag.valid.clone()
    frames = [ag.agents()]
    for _ in range(steps):
        ag, _ = model.step(lanes, ag, ctrl, generator=gen, shaping=shaping)
        frames.append(ag.agents())
    return torch.stack(frames, 2)  # B, V, T, 7


def test_shaped_actions_always_feasible():
    torch.manual_seed(0)
    model = npc.DeltaSim(hidden=16, depth=1)
    gen = torch.Generator().manual_seed(1)
    for extreme in (False, True):
        lanes, ag = _random_states(64, gen, extreme=extreme)
        a, k, m = model.act(lanes, ag, ag.valid, generator=gen)
        f = npc.features(lanes, ag)
        lo_a, hi_a, lo_k, hi_k = npc.feasible_box(f.kin)
        assert torch.all((a >= lo_a - 1e-12) & (a <= hi_a + 1e-12))
        assert torch.all((k >= lo_k - 1e-12) & (k <= hi_k + 1e-12))
        assert torch.all(a.abs() <= MAX_BRAKE) and torch.all(k.abs() <= MAX_CURVATURE)
        # the rate limits hold wherever the previous control was inside the box
        inside = (ag.accel.abs() <= MAX_ACCEL) & (ag.kappa.abs() < 0.01)
        assert torch.all(((a - ag.accel).abs() <= npc.MAX_JERK * 0.1 + 1e-9)[inside])
        assert torch.all(((k - ag.kappa).abs() <= MAX_CURVATURE_RATE * 0.1 + 1e-9)[inside])
        traj = _roll(model, lanes, ag, 8, True, gen)
        assert int(metrics.infeasible_steps(traj).sum()) == 0


def test_unshaped_actions_can_be_infeasible():
    torch.manual_seed(0)
    model = npc.DeltaSim(hidden=16, depth=1)
    gen = torch.Generator().manual_seed(2)
    lanes, ag = _random_states(64, gen, extreme=True)
    traj = _roll(model, lanes, ag, 4, False, gen)
    assert int(metrics.infeasible_steps(traj).sum()) > 0


def test_gradients_flow_through_shaping():
    kin = torch.tensor(
        [[20.0, 3.0, 0.0, 4.5], [5.0, -7.9, 0.249, 4.5], [30.0, 0.0, 0.009, 4.5]],
        dtype=D, requires_grad=True,
    )  # fmt: skip
    pen_a, pen_k = npc.feasibility_penalty(kin)
    assert pen_a.shape == (3, len(npc.ACCEL_BINS)) and pen_k.shape == (3, len(npc.KAPPA_BINS))
    # bins inside the box are (nearly) free, bins beyond it cost a lot
    centre_a = npc.ACCEL_BINS.index(0.0)
    assert float(pen_a[:, centre_a].max().detach()) < 0.2 and float(pen_a[0, -1].detach()) > 100
    logits = torch.zeros(3, len(npc.KAPPA_BINS), dtype=D) - pen_k
    lp = torch.log_softmax(logits, -1)[:, npc.KAPPA_BINS.index(0.002)].sum()
    lp = lp + torch.log_softmax(-pen_a, -1)[:, npc.ACCEL_BINS.index(0.7)].sum()
    lp.backward()
    g = kin.grad
    assert torch.isfinite(g).all()
    assert float(g[:, 1].abs().max()) > 0  # previous acceleration
    assert float(g[:, 2].abs().max()) > 0  # previous curvature
    assert float(g[2, 0].abs()) > 0  # speed, through the lateral-acceleration limit
    # and through a model's shaped logits
    model = npc.DeltaSim(hidden=8, depth=1).double()
    kin2 = kin.detach().clone().requires_grad_(True)
    out = model(torch.randn(3, npc.FEATURE_DIM, dtype=D))
    lm, la, lk = model.shaped(out, kin2, torch.zeros(3, npc.SHAPE_DIM, dtype=D))
    (la.logsumexp(-1).sum() + lk.logsumexp(-1).sum()).backward()
    assert torch.isfinite(kin2.grad).all() and float(kin2.grad.abs().sum()) > 0


def test_manoeuvre_shaping_rules_out_missing_lanes_and_broken_commitment():
    lanes = _two_lanes()
    ag = _agents([10.0, 20.0], [0.0, 3.5], 0.0, 10.0)
    model = npc.DeltaSim(hidden=8, depth=1)
    gen = torch.Generator().manual_seed(0)
    ctrl = ag.valid
    for _ in range(6):  # agent 0 has no right lane, agent 1 no left lane
        _, _, m = model.act(lanes, ag, ctrl, generator=gen)
        assert int(m[0, 0]) != npc.MANOEUVRES.index("right")
        assert int(m[0, 1]) != npc.MANOEUVRES.index("left")
    # a started change to the left is kept until the agent leaves its lane
    ag = ag.replace(manoeuvre=torch.tensor([[1, 0]]), origin=torch.tensor([[0, -1]]))
    for _ in range(4):
        _, _, m = model.act(lanes, ag, ctrl, generator=gen)
        assert int(m[0, 0]) == npc.MANOEUVRES.index("left")
    # forcing a manoeuvre by name
    _, _, m = model.act(lanes, ag, ctrl, force="yield")
    assert m.tolist() == [[3, 3]]
    # gap acceptance: no change left in front of a car 1 m behind, or one closing fast
    for x1, v1 in ((114.5, 10.0), (85.0, 30.0)):  # the follower on the piece before
        ag = _agents([120.0, x1], [0.0, 3.5], 0.0, [10.0, v1])
        f = npc.features(lanes, ag)
        pen = npc._manoeuvre_penalty(f.kin, npc._shape_info(f), model.beta)
        assert float(pen[0, 0, 1]) > 20 and float(pen[0, 0, 0]) == 0
    ag = _agents([120.0, 85.0], [0.0, 3.5], 0.0, [10.0, 10.0])  # a free gap
    f = npc.features(lanes, ag)
    assert float(npc._manoeuvre_penalty(f.kin, npc._shape_info(f), model.beta)[0, 0, 1]) < 0.1


# ------------------------------------------------------------------ learning
@pytest.fixture(scope="module")
def tiny_data():
    road = driving.straight_road(400.0, lanes=2)
    params = driving.default_params(2, density=35)
    return npc.collect_bc(road, n_scenes=2, steps=24, seed=0, warmup=3, params=params)


def test_collect_bc_dataset(tiny_data):
    ds = tiny_data
    assert len(ds) > 50
    b = ds.__getitems__([0, 1, 2])
    assert b["x"].shape == (3, npc.FEATURE_DIM) and b["kin"].shape == (3, 4)
    assert set(ds.class_counts()) == set(npc.MANOEUVRES)
    assert ds.info["samples"] == len(ds) and ds.info["dropped_inconsistent"] >= 0
    assert npc.collate_bc([ds[0], ds[1]])["x"].shape == (2, npc.FEATURE_DIM)
    json.dumps(ds.info)


def test_bc_loss_decreases(tiny_data):
    torch.manual_seed(0)
    model = npc.DeltaSim(hidden=32, depth=2)
    model.set_normalisation(tiny_data.data["x"])
    batch = tiny_data.__getitems__(list(range(len(tiny_data))))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        loss = model.training_step(batch)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0]
    with torch.no_grad():
        val = model.validation_step(batch)
    assert 0.5 < float(val["manoeuvre_acc"]) <= 1.0 and float(val["accel_mae"]) < 1.0


def test_save_load_round_trip(tmp_path, tiny_data):
    torch.manual_seed(0)
    model = npc.DeltaSim(hidden=16, depth=2, beta=15.0)
    model.set_normalisation(tiny_data.data["x"])
    json.dumps(model.init_args)
    path = save_model(model, tmp_path / "npc.pt")
    back = load_model(path)
    assert isinstance(back, npc.DeltaSim) and back.init_args == model.init_args
    x = tiny_data.data["x"][:5]
    for a, b in zip(model.eval()(x), back(x)):
        assert torch.equal(a, b)
    assert torch.equal(back.feat_std, model.feat_std)


def test_rollout_vs_traffic_smoke():
    road = driving.straight_road(600.0, lanes=2)
    torch.manual_seed(0)
    model = npc.DeltaSim(hidden=16, depth=1)
    r = npc.rollout_vs_traffic(model, road, n_scenes=1, steps=6, seed=0, warmup=3)
    for key in ("ade", "fde", "collision_rate", "offroad_rate", "infeasible_rate", "ms_per_step"):
        assert key in r
    assert r["agents"] >= 1 and r["infeasible_steps"] == 0 and r["gt_infeasible_steps"] == 0


# ------------------------------------------------------------------ bad input
def test_bad_input_rejected():
    lanes = _two_lanes()
    ag = _agents([10.0], 0.0, 0.0, 10.0)
    with pytest.raises(ValueError, match="LaneSet.points must have shape"):
        npc.LaneSet(torch.zeros(1, 2, 20, 3), torch.ones(1, 2), torch.ones(1, 2),
                    torch.full((1, 2, 2), -1), torch.ones(1, 2, dtype=torch.bool))  # fmt: skip
    with pytest.raises(ValueError, match="LaneSet.succ must hold lane ids"):
        npc.LaneSet(torch.zeros(1, 2, 20, 2), torch.ones(1, 2), torch.ones(1, 2),
                    torch.full((1, 2, 2), 5), torch.ones(1, 2, dtype=torch.bool))  # fmt: skip
    with pytest.raises(ValueError, match="NaN or inf in 1 valid agents"):
        _agents([float("nan")], 0.0, 0.0, 10.0)
    _agents([float("nan")], 0.0, 0.0, 10.0, valid=torch.tensor([False]))  # padding may be NaN
    with pytest.raises(ValueError, match="AgentState.v must have shape"):
        z, o = torch.zeros(1, 2), torch.ones(1, 2)
        npc.AgentState(z, z, z, torch.zeros(1, 3), o, o, o, o, o > 0)
    with pytest.raises(ValueError, match="manoeuvre must index MANOEUVRES"):
        ag.replace(manoeuvre=torch.tensor([[7]]))
    model = npc.DeltaSim(hidden=8, depth=1)
    with pytest.raises(ValueError, match="unknown manoeuvre 'overtake'"):
        model.act(lanes, ag, ag.valid, force="overtake")
    with pytest.raises(ValueError, match="controlled must have shape"):
        model.act(lanes, ag, torch.ones(1, 3, dtype=torch.bool))
    two = _agents([10.0, 20.0], 0.0, 0.0, 10.0)
    big = npc.AgentState(*(torch.cat([getattr(two, n)] * 3) for n in npc.AgentState._FLOATS),
                         torch.ones(3, 2, dtype=torch.bool))  # fmt: skip
    with pytest.raises(ValueError, match="lanes have B = 2 scenes, agents B = 3"):
        npc.features(npc._cat_lanes([lanes, lanes]), big)
    with pytest.raises(TypeError, match="lanes must be a LaneSet"):
        npc.features({"points": 1}, ag)
    with pytest.raises(ValueError, match="features must have shape"):
        model(torch.zeros(2, 7))
    with pytest.raises(ValueError, match="accel/kappa have NaN"):
        npc.step_agents(ag, torch.full((1, 1), math.nan), torch.zeros(1, 1), ag.valid)
    with pytest.raises(ValueError, match="manoeuvre labels must index MANOEUVRES"):
        npc.BCDataset({"x": torch.zeros(1, npc.FEATURE_DIM), "kin": torch.zeros(1, 4),
                       "shape": torch.zeros(1, npc.SHAPE_DIM), "manoeuvre": torch.tensor([4]),
                       "accel": torch.zeros(1), "kappa": torch.zeros(1)})  # fmt: skip
    with pytest.raises(ValueError, match="feature_dim must be FEATURE_DIM"):
        npc.DeltaSim(feature_dim=3)
