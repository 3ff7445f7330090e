"""ΔSim, VectorWorld's NPC policy: features, shaping, behaviour cloning, closed loop
(simsci.models.vectorworld._features, _npc, _bc, _npc_eval)."""

import dataclasses
import json
import math

import pytest
import torch

from simsci import driving
from simsci.driving import (
    MAX_ACCEL,
    MAX_BRAKE,
    MAX_CURVATURE,
    MAX_CURVATURE_RATE,
    metrics,
)
from simsci.models import vectorworld as vw
from simsci.models.vectorworld import _bc, _features, _npc
from simsci.train import load_model, save_model

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


def _two_lanes(length=100.0, pieces=2, width=3.5):
    """Straight road along +x: lane 2k at y = 0, lane 2k+1 at y = width (its left
    neighbour), ``pieces`` pieces of ``length`` each, linked by succ."""
    pts, succ = [], []
    t = torch.linspace(0.0, length, driving.LANE_POINTS, dtype=D)
    for k in range(pieces):
        for lat in (0.0, width):
            pts.append(torch.stack([k * length + t, torch.full_like(t, lat)], -1))
            i = len(pts) - 1
            succ.append([i + 2 if k + 1 < pieces else -1, -1])
    n = len(pts)
    return driving.LaneSet(
        torch.stack(pts)[None], torch.full((1, n), width, dtype=D),
        torch.full((1, n), 20.0, dtype=D), torch.tensor(succ)[None],
        torch.ones(1, n, dtype=torch.bool),
    )  # fmt: skip


# ------------------------------------------------------------------ features
def test_features_on_two_straight_lanes():
    lanes = _two_lanes()
    # 0: on lane 0, 0.5 m left of centre, heading 0.1; 1: 30 m ahead on lane 0;
    # 2: beside 0 on lane 1, 10 m ahead; 3: invalid
    ag = _agents(
        [10.0, 40.0, 20.0, 0.0], [0.5, 0.0, 3.5, 0.0], [0.1, 0.0, 0.0, 0.0],
        [10.0, 5.0, 12.0, 0.0], length=4.0, valid=torch.tensor([True, True, True, False]),
    )  # fmt: skip
    f = vw.features(lanes, ag)
    assert f.x.shape == (1, 4, _features.FEATURE_DIM) == (1, 4, len(_features.FEATURE_NAMES))
    assert f.lane.tolist() == [[0, 0, 1, -1]]
    assert float(f.offset[0, 0]) == pytest.approx(0.5, abs=1e-9)
    assert float(f.heading_error[0, 0]) == pytest.approx(0.1, abs=1e-9)
    # neighbours: lane 1 is left of lane 0, nothing right; lane 0 right of lane 1
    assert f.neighbour[0, 0].tolist() == [1, -1]
    assert f.neighbour[0, 2].tolist() == [-1, 0]
    col = {n: i for i, n in enumerate(_features.FEATURE_NAMES)}
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


def test_of_two_agents_each_the_others_leader_the_faster_goes():
    """Two agents at a crossing, each reaching into the other's lane ahead of it: each
    is the other's leader, and both would wait for ever. Acting (``give_way``, what
    ΔSim's step uses), the faster one no longer sees the other as its leader; the slower
    one still does (a tie: the lower slot goes). The features of training data keep
    both."""
    t = torch.linspace(0.0, 100.0, driving.LANE_POINTS, dtype=D)
    east = torch.stack([t, torch.zeros_like(t)], -1)  # y = 0, heading +x
    north = torch.stack([torch.full_like(t, 50.0), t - 50.0], -1)  # x = 50, heading +y
    lanes = driving.LaneSet(
        torch.stack([east, north])[None], torch.full((1, 2), 3.5, dtype=D),
        torch.full((1, 2), 20.0, dtype=D), torch.full((1, 2, 2), -1),
        torch.ones(1, 2, dtype=torch.bool),
    )  # fmt: skip
    for speeds, goes in (([8.0, 6.0], 0), ([6.0, 8.0], 1), ([7.0, 7.0], 0)):
        ag = _agents([47.8, 50.0], [0.0, -2.2], [0.0, math.pi / 2], speeds)
        gap = _features._features(lanes, ag, give_way=True).leader_gap[0, :, 0]
        assert math.isinf(float(gap[goes])) and math.isfinite(float(gap[1 - goes]))
        assert torch.isfinite(vw.features(lanes, ag).leader_gap[0, :, 0]).all()


def _gappy_scenes(accel=0.0, kappa=0.0):
    """Two scenes on :func:`_two_lanes` with invalid slots between and before valid ones
    (as a streamed world leaves them) and different counts: ``(lanes, agents, valid)``."""
    lanes = _two_lanes()
    x = torch.tensor([[0.0, 10.0, 0.0, 40.0, 20.0, 0.0], [0.0, 0.0, 30.0, 0.0, 0.0, 0.0]], dtype=D)
    y = torch.tensor([[0.0, 0.5, 0.0, 0.0, 3.5, 0.0], [0.0, 0.0, 3.5, 0.0, 0.0, 0.0]], dtype=D)
    valid = torch.tensor(
        [[False, True, False, True, True, False], [False] * 2 + [True] + [False] * 3]
    )
    full = torch.full_like(x, 0.0)
    ag = driving.AgentState(
        x, y, full.clone(), full + 8.0, full + accel, full + kappa, full + 4.5, full + 1.8,
        valid,
    )  # fmt: skip
    lanes2 = driving.LaneSet(*(torch.cat([t, t]) for t in (
        lanes.points, lanes.width, lanes.speed_limit, lanes.succ, lanes.valid)))  # fmt: skip
    return lanes2, ag, valid


def test_features_of_packed_agents_are_those_of_all_slots():
    # the valid agents' features are exactly those computed over every slot
    lanes2, ag, valid = _gappy_scenes()
    packed, every = vw.features(lanes2, ag), _features._features(lanes2, ag)
    for field in dataclasses.fields(_features.Features):
        a, b = getattr(packed, field.name)[valid], getattr(every, field.name)[valid]
        assert torch.equal(a, b), field.name
    assert bool((packed.lane[~valid] == -1).all()) and bool((packed.x[~valid] == 0).all())


def test_actions_of_packed_agents_are_those_of_all_slots():
    # ΔSim acts on the valid agents packed; the noise is drawn for every slot and
    # gathered, so each valid agent gets the controls the all-slot computation gives it
    # with the same generator; an empty slot keeps its controls even when "controlled"
    torch.manual_seed(0)
    model = _npc.DeltaSim(hidden=32, depth=1)
    lanes2, ag, valid = _gappy_scenes(accel=0.3, kappa=1e-3)
    controlled = torch.ones_like(valid)
    for greedy in (False, True):
        a, k, m = model.act(
            lanes2, ag, controlled, generator=torch.Generator().manual_seed(3), greedy=greedy,
            shaping=False,
        )  # fmt: skip
        every = _features._features(lanes2, ag)
        ra, rk, rm = model.decode(
            model(every.x), every.kin, _features._shape_info(every), shaping=False,
            generator=torch.Generator().manual_seed(3), greedy=greedy,
        )  # fmt: skip
        assert torch.equal(m[valid], rm[valid])
        torch.testing.assert_close(a[valid], ra[valid].to(D), rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(k[valid], rk[valid].to(D), rtol=1e-6, atol=1e-9)
        assert bool((a[~valid] == 0.3).all()) and bool((k[~valid] == 1e-3).all())
        assert bool((m[~valid] == ag.manoeuvre[~valid]).all())


def test_an_acceleration_cap_bounds_the_controls_and_the_box_still_holds():
    torch.manual_seed(0)
    model = _npc.DeltaSim(hidden=32, depth=1)
    lanes, ag, valid = _gappy_scenes(accel=0.3)
    cap = torch.full(valid.shape, -2.0, dtype=D)
    cap[0, 3] = math.inf  # not capped
    g = torch.Generator().manual_seed(1)
    free, _ = model.step(lanes, ag, valid, generator=g, shaping=False)
    g = torch.Generator().manual_seed(1)
    capped, _ = model.step(lanes, ag, valid, generator=g, shaping=False, accel_cap=cap)
    assert bool((capped.accel[valid] <= torch.minimum(free.accel, cap)[valid] + 1e-12).all())
    assert float(capped.accel[0, 3]) == float(free.accel[0, 3])
    # with shaping the feasible box wins: from 0.3 m/s^2 the jerk limit allows no -2
    shaped, _ = model.step(lanes, ag, valid, shaping=True, accel_cap=cap)
    lo = 0.3 - driving.MAX_JERK * driving.DT
    assert bool((shaped.accel[valid] >= lo - 1e-9).all())


def test_lanes_from_tiles_world_frame_and_links():
    from simsci.driving import cut_lanes, lane_graph

    road = driving.straight_road(200.0, lanes=2)
    poses = torch.tensor([[32.0, 0.0, 0.0], [96.0, 0.0, 0.0]], dtype=D).numpy()
    graph = lane_graph([cut_lanes(road, p) for p in poses], road)
    lanes = driving.lanes_from_tiles(graph, poses, dtype=D)
    assert lanes.points.shape == (1, len(graph["nodes"]["tile"]), driving.LANE_POINTS, 2)
    ys = set(round(float(y), 6) for y in lanes.points[0, :, :, 1].flatten())
    assert ys == {-5.25, -1.75, 1.75, 5.25}
    # an agent at x = 60 on forward lane 0 sees its path across the tile seam to x = 128
    f = vw.features(lanes, _agents([60.0], -1.75, 0.0, 10.0))
    assert int(f.lane[0, 0]) >= 0 and float(f.path_left[0, 0, 0]) == pytest.approx(68.0, abs=1e-6)
    with pytest.raises(TypeError, match="graph must be a scene lane graph"):
        driving.lanes_from_tiles({"nodes": {}}, poses)


# ------------------------------------------------------------------ shaping
def _random_states(n, gen, *, extreme=False):
    lanes = _two_lanes(pieces=3)
    u = lambda lo, hi: lo + (hi - lo) * torch.rand(1, n, generator=gen, dtype=D)  # noqa: E731
    if extreme:  # controls at or beyond the limits
        accel, kappa = u(6.0, 9.5), u(0.2, 0.29) * torch.sign(u(-1, 1))
    else:
        accel, kappa = u(-MAX_BRAKE, MAX_ACCEL), u(-0.05, 0.05)
    ag = driving.AgentState(
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
    model = vw.DeltaSim(hidden=16, depth=1)
    gen = torch.Generator().manual_seed(1)
    for extreme in (False, True):
        lanes, ag = _random_states(64, gen, extreme=extreme)
        a, k, m = model.act(lanes, ag, ag.valid, generator=gen)
        f = vw.features(lanes, ag)
        lo_a, hi_a, lo_k, hi_k = driving.feasible_box(f.kin)
        assert torch.all((a >= lo_a - 1e-12) & (a <= hi_a + 1e-12))
        assert torch.all((k >= lo_k - 1e-12) & (k <= hi_k + 1e-12))
        assert torch.all(a.abs() <= MAX_BRAKE) and torch.all(k.abs() <= MAX_CURVATURE)
        # the rate limits hold wherever the previous control was inside the box
        inside = (ag.accel.abs() <= MAX_ACCEL) & (ag.kappa.abs() < 0.01)
        assert torch.all(((a - ag.accel).abs() <= driving.MAX_JERK * 0.1 + 1e-9)[inside])
        assert torch.all(((k - ag.kappa).abs() <= MAX_CURVATURE_RATE * 0.1 + 1e-9)[inside])
        traj = _roll(model, lanes, ag, 8, True, gen)
        assert int(metrics.infeasible_steps(traj).sum()) == 0


def test_curvature_rate_limited_so_the_slip_keeps_positions_feasible():
    """The slip ``asin(κ l_r)`` moves the centre sideways when κ changes: shaped ΔSim
    (untrained, so its controls jump) keeps every κ inside ``slip_box``, where the path
    turn through the next position stays within MAX_CURVATURE per metre, so the recorded
    positions are feasible too (the stated controls always were); unshaped, they are not."""
    torch.manual_seed(0)
    model = vw.DeltaSim(hidden=16, depth=1)
    gen = torch.Generator().manual_seed(3)
    lanes, ag = _random_states(64, gen)
    ag = dataclasses.replace(ag, v=ag.v * 0.25)  # 0-10 m/s: where the slip dominates
    a, k, _ = model.act(lanes, ag, ag.valid, generator=gen)
    kin = vw.features(lanes, ag).kin
    lo, hi = _npc.slip_box(kin, a)
    assert torch.all((k >= lo - 1e-12) & (k <= hi + 1e-12)) and torch.all(lo <= hi)
    # at the bounds, the turn is the limit times the mean chord (at least 0.1 m)
    v_new = (ag.v + a * 0.1).clamp(min=0)
    lr, chord = 0.3 * ag.length, ((ag.v + v_new) * 0.05).clamp(min=0.1)
    for bound, sign in ((lo, -1), (hi, 1)):
        turn = v_new * bound * 0.1 + torch.asin(bound * lr) - torch.asin(ag.kappa * lr)
        assert torch.allclose(turn, sign * MAX_CURVATURE * chord, atol=1e-7)
    assert torch.all((lo <= ag.kappa) & (ag.kappa <= hi))  # keeping κ is always allowed
    for shaping, ok in ((True, True), (False, False)):
        traj = _roll(model, lanes, ag, 20, shaping, torch.Generator().manual_seed(4))
        moving = traj[..., 2] > 1.0  # >= 0.1 m per step, where positions tell curvature
        path = metrics.path_infeasible_steps(traj, moving)
        assert (int(path.sum()) == 0) == ok
        assert int(metrics.infeasible_steps(traj).sum()) == 0 or not shaping


def test_unshaped_actions_can_be_infeasible():
    torch.manual_seed(0)
    model = vw.DeltaSim(hidden=16, depth=1)
    gen = torch.Generator().manual_seed(2)
    lanes, ag = _random_states(64, gen, extreme=True)
    traj = _roll(model, lanes, ag, 4, False, gen)
    assert int(metrics.infeasible_steps(traj).sum()) > 0


def test_gradients_flow_through_shaping():
    kin = torch.tensor(
        [[20.0, 3.0, 0.0, 4.5], [5.0, -7.9, 0.249, 4.5], [30.0, 0.0, 0.009, 4.5]],
        dtype=D, requires_grad=True,
    )  # fmt: skip
    pen_a, pen_k = _npc.feasibility_penalty(kin)
    assert pen_a.shape == (3, len(_npc.ACCEL_BINS)) and pen_k.shape == (3, len(_npc.KAPPA_BINS))
    # bins inside the box are (nearly) free, bins beyond it cost a lot
    centre_a = _npc.ACCEL_BINS.index(0.0)
    assert float(pen_a[:, centre_a].max().detach()) < 0.2 and float(pen_a[0, -1].detach()) > 100
    logits = torch.zeros(3, len(_npc.KAPPA_BINS), dtype=D) - pen_k
    lp = torch.log_softmax(logits, -1)[:, _npc.KAPPA_BINS.index(0.002)].sum()
    lp = lp + torch.log_softmax(-pen_a, -1)[:, _npc.ACCEL_BINS.index(0.7)].sum()
    lp.backward()
    g = kin.grad
    assert torch.isfinite(g).all()
    assert float(g[:, 1].abs().max()) > 0  # previous acceleration
    assert float(g[:, 2].abs().max()) > 0  # previous curvature
    assert float(g[2, 0].abs()) > 0  # speed, through the lateral-acceleration limit
    # and through a model's shaped logits
    model = vw.DeltaSim(hidden=8, depth=1).double()
    kin2 = kin.detach().clone().requires_grad_(True)
    out = model(torch.randn(3, _features.FEATURE_DIM, dtype=D))
    lm, la, lk = model.shaped(out, kin2, torch.zeros(3, _features.SHAPE_DIM, dtype=D))
    (la.logsumexp(-1).sum() + lk.logsumexp(-1).sum()).backward()
    assert torch.isfinite(kin2.grad).all() and float(kin2.grad.abs().sum()) > 0


def test_manoeuvre_shaping_rules_out_missing_lanes_and_broken_commitment():
    lanes = _two_lanes()
    ag = _agents([10.0, 20.0], [0.0, 3.5], 0.0, 10.0)
    model = vw.DeltaSim(hidden=8, depth=1)
    gen = torch.Generator().manual_seed(0)
    ctrl = ag.valid
    for _ in range(6):  # agent 0 has no right lane, agent 1 no left lane
        _, _, m = model.act(lanes, ag, ctrl, generator=gen)
        assert int(m[0, 0]) != driving.MANOEUVRES.index("right")
        assert int(m[0, 1]) != driving.MANOEUVRES.index("left")
    # a started change to the left is kept until the agent leaves its lane
    ag = ag.replace(manoeuvre=torch.tensor([[1, 0]]), origin=torch.tensor([[0, -1]]))
    for _ in range(4):
        _, _, m = model.act(lanes, ag, ctrl, generator=gen)
        assert int(m[0, 0]) == driving.MANOEUVRES.index("left")
    # forcing a manoeuvre by name
    _, _, m = model.act(lanes, ag, ctrl, force="yield")
    assert m.tolist() == [[3, 3]]
    # gap acceptance: no change left in front of a car 1 m behind, or one closing fast
    for x1, v1 in ((114.5, 10.0), (85.0, 30.0)):  # the follower on the piece before
        ag = _agents([120.0, x1], [0.0, 3.5], 0.0, [10.0, v1])
        f = vw.features(lanes, ag)
        pen = _npc._manoeuvre_penalty(f.kin, _features._shape_info(f), model.beta)
        assert float(pen[0, 0, 1]) > 20 and float(pen[0, 0, 0]) == 0
    ag = _agents([120.0, 85.0], [0.0, 3.5], 0.0, [10.0, 10.0])  # a free gap
    f = vw.features(lanes, ag)
    assert (
        float(_npc._manoeuvre_penalty(f.kin, _features._shape_info(f), model.beta)[0, 0, 1]) < 0.1
    )


# ------------------------------------------------------------------ learning
@pytest.fixture(scope="module")
def tiny_data():
    road = driving.straight_road(400.0, lanes=2)
    params = driving.default_params(2, density=35)
    return vw.collect_bc(road, n_scenes=2, steps=24, seed=0, warmup=3, params=params)


def test_collect_bc_dataset(tiny_data):
    ds = tiny_data
    assert len(ds) > 50
    b = ds.__getitems__([0, 1, 2])
    assert b["x"].shape == (3, _features.FEATURE_DIM) and b["kin"].shape == (3, 4)
    assert set(ds.class_counts()) == set(driving.MANOEUVRES)
    assert ds.info["samples"] == len(ds) and ds.info["dropped_inconsistent"] >= 0
    assert _bc.collate_bc([ds[0], ds[1]])["x"].shape == (2, _features.FEATURE_DIM)
    json.dumps(ds.info)


def test_bc_loss_decreases(tiny_data):
    torch.manual_seed(0)
    model = vw.DeltaSim(hidden=32, depth=2)
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
    model = vw.DeltaSim(hidden=16, depth=2, beta=15.0)
    model.set_normalisation(tiny_data.data["x"])
    json.dumps(model.init_args)
    path = save_model(model, tmp_path / "npc.pt")
    back = load_model(path)
    assert isinstance(back, vw.DeltaSim) and back.init_args == model.init_args
    # checkpoints name the class by its module path: ΔSim stays in ._npc so that the
    # checkpoints written before the module split load unchanged
    assert torch.load(path, weights_only=True)["model"]["import_path"] == (
        "simsci.models.vectorworld._npc:DeltaSim"
    )
    x = tiny_data.data["x"][:5]
    for a, b in zip(model.eval()(x), back(x)):
        assert torch.equal(a, b)
    assert torch.equal(back.feat_std, model.feat_std)


def test_rollout_vs_traffic_smoke():
    road = driving.straight_road(600.0, lanes=2)
    torch.manual_seed(0)
    model = vw.DeltaSim(hidden=16, depth=1)
    r = vw.rollout_vs_traffic(model, road, n_scenes=1, steps=6, seed=0, warmup=3)
    for key in ("ade", "fde", "collision_rate", "offroad_rate", "infeasible_rate", "ms_per_step"):
        assert key in r
    assert r["agents"] >= 1 and r["infeasible_steps"] == 0 and r["gt_infeasible_steps"] == 0


# ------------------------------------------------------------------ bad input
def test_bad_input_rejected():
    # (the contract's own checks, LaneSet / AgentState / step_agents: tests/driving)
    lanes = _two_lanes()
    ag = _agents([10.0], 0.0, 0.0, 10.0)
    model = vw.DeltaSim(hidden=8, depth=1)
    with pytest.raises(ValueError, match="unknown manoeuvre 'overtake'"):
        model.act(lanes, ag, ag.valid, force="overtake")
    with pytest.raises(ValueError, match="controlled must have shape"):
        model.act(lanes, ag, torch.ones(1, 3, dtype=torch.bool))
    two = _agents([10.0, 20.0], 0.0, 0.0, 10.0)
    big = driving.AgentState(
        *(torch.cat([getattr(two, n)] * 3) for n in driving.AgentState.FLOAT_FIELDS),
        torch.ones(3, 2, dtype=torch.bool),
    )
    with pytest.raises(ValueError, match="lanes have B = 2 scenes, agents B = 3"):
        vw.features(_bc._cat_lanes([lanes, lanes]), big)
    with pytest.raises(TypeError, match="lanes must be a LaneSet"):
        vw.features({"points": 1}, ag)
    with pytest.raises(ValueError, match="features must have shape"):
        model(torch.zeros(2, 7))
    with pytest.raises(ValueError, match="manoeuvre labels must index MANOEUVRES"):
        _bc.BCDataset({"x": torch.zeros(1, _features.FEATURE_DIM), "kin": torch.zeros(1, 4),
                       "shape": torch.zeros(1, _features.SHAPE_DIM), "manoeuvre": torch.tensor([4]),
                       "accel": torch.zeros(1), "kappa": torch.zeros(1)})  # fmt: skip
    with pytest.raises(ValueError, match="feature_dim must be FEATURE_DIM"):
        vw.DeltaSim(feature_dim=3)


def test_a_stopped_agent_with_room_ahead_moves_off_as_the_idm_would():
    # lane 0 (limit 20 m/s, ends at x = 200): agent 0 stopped, its leader (agent 1) 85 m
    # ahead; agent 1 stopped 1 m behind agent 2 (bumper gap under the IDM's 2 m); agent 3
    # at 10 m/s (not slow); agent 4 stopped 3 m before the lane's end; slot 5 empty
    lanes = _two_lanes(pieces=2)
    valid = torch.tensor([True, True, True, True, True, False])
    ag = _agents(
        [10.0, 100.0, 105.5, 150.0, 197.0, 0.0], 0.0, 0.0, [0.0, 0.0, 0.0, 10.0, 0.0, 0.0],
        valid=valid,
    )  # fmt: skip
    feats = vw.features(lanes, ag)
    floor = _npc._idm_floor(feats, 1.0)
    s0, T, a_max, b = _npc.IDM_FLOOR
    gap = float(feats.leader_gap[0, 0, 0])
    end = float(feats.path_left[0, 0, 0]) - 0.5 * 4.5
    push = max((s0 / gap) ** 2, (s0 / end) ** 2)
    assert float(floor[0, 0]) == pytest.approx(a_max * (1 - push), rel=1e-9)
    assert float(floor[0, 0]) > 1.0
    for j in (1, 3, 4, 5):  # the IDM would brake; faster than 1 m/s; lane end; no agent
        assert math.isinf(float(floor[0, j])) and float(floor[0, j]) < 0
    # in a step (agents packed, slot 5 empty): an untrained clone moves agent 0 off
    # (within the jerk limit); the cap wins; a forced yield keeps ΔSim's own choice
    torch.manual_seed(0)
    model = _npc.DeltaSim(hidden=32, depth=1)
    new, _ = model.step(lanes, ag, valid[None], idm_floor_below=1.0, greedy=True)
    lim = min(float(floor[0, 0]), driving.MAX_JERK * driving.DT)
    assert float(new.accel[0, 0]) >= lim - 1e-9
    free, _ = model.step(lanes, ag, valid[None], greedy=True)
    assert float(free.accel[0, 0]) < lim  # the clone alone would not (else nothing tested)
    for j in (1, 3, 4):
        assert float(new.accel[0, j]) == float(free.accel[0, j])
    cap = torch.full((1, 6), -1.0, dtype=D)
    capped, _ = model.step(lanes, ag, valid[None], idm_floor_below=1.0, greedy=True, accel_cap=cap)
    alone, _ = model.step(lanes, ag, valid[None], greedy=True, accel_cap=cap)
    assert float(capped.accel[0, 0]) == float(alone.accel[0, 0]) <= 0.0
    yields, _ = model.step(lanes, ag, valid[None], idm_floor_below=1.0, force="yield", greedy=True)
    yields_alone, _ = model.step(lanes, ag, valid[None], force="yield", greedy=True)
    assert torch.equal(yields.accel, yields_alone.accel)
    # a lane change too: the floor's corridor is the lane being left
    lefts, _ = model.step(lanes, ag, valid[None], idm_floor_below=1.0, force="left", greedy=True)
    lefts_alone, _ = model.step(lanes, ag, valid[None], force="left", greedy=True)
    assert torch.equal(lefts.accel, lefts_alone.accel)


def test_the_idm_floor_aims_for_a_slower_limit_ahead_in_time():
    """The floor's desired speed is the lane's limit lowered to sqrt(v_ahead^2 + 2 b d)
    for a slower limit sampled ahead (d from the sample before it): lanes 0 and 1 (20 m/s)
    run into lanes 2 and 3 (5 m/s) at x = 100; from x = 50 the first sample there is 60 m
    ahead, counted from 40 m, so v0 = sqrt(25 + 2 b 40). An agent above that gets no floor,
    one below it the IDM's acceleration towards it, with the end of what the features see
    (100 m along the path) as a standing obstacle. On a road at 20 m/s throughout the aim
    is 20 m/s, but at 19 m/s the IDM could not stop within those 100 m: no floor."""
    lanes = _two_lanes(pieces=3)
    lanes.speed_limit[0, 2:4] = 5.0
    ag = _agents([50.0, 50.0], [0.0, 3.5], 0.0, [15.0, 10.0])  # one on each lane
    feats = vw.features(lanes, ag)
    assert float(feats.path_left[0, 1, 0]) == 100.0  # the features' sight
    floor = _npc._idm_floor(feats, math.inf)
    s0, T, a_max, b = _npc.IDM_FLOOR
    v0 = math.sqrt(5.0**2 + 2 * b * 40.0)
    assert 10.0 < v0 < 15.0
    sight = (float(_npc.idm_desired_gap(torch.tensor(10.0), 0.0)) / (100.0 - 0.5 * 4.5)) ** 2
    assert math.isinf(float(floor[0, 0])) and float(floor[0, 0]) < 0
    assert float(floor[0, 1]) == pytest.approx(a_max * (1 - (10.0 / v0) ** 4 - sight), rel=1e-6)
    fast = _two_lanes(pieces=3)
    quick = _agents([50.0, 50.0], [0.0, 3.5], 0.0, [19.0, 10.0])
    free = _npc._idm_floor(vw.features(fast, quick), math.inf)
    assert math.isinf(float(free[0, 0])) and float(free[0, 0]) < 0
    assert float(free[0, 1]) == pytest.approx(a_max * (1 - (10.0 / 20.0) ** 4 - sight), rel=1e-6)
