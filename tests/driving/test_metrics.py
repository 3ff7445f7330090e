"""Driving metrics (simsci.driving.metrics): boxes and collisions against a
brute-force polygon test, off-road distances, kinematic feasibility on circles and
brakes, ADE/FDE, density, lane-graph statistics, seam gaps, Fréchet and MMD, bad input,
and the same numbers on the test device."""

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from simsci.driving import metrics as M


def _agent(x, y, heading=0.0, length=4.0, width=2.0, speed=0.0):
    return [x, y, speed, math.cos(heading), math.sin(heading), length, width]


# ------------------------------------------------------------------ boxes
def test_box_corners_axis_aligned_and_rotated():
    c = M.box_corners(np.array([_agent(1.0, 2.0, 0.0, 4.0, 2.0)]))
    np.testing.assert_allclose(c[0], [[3, 1], [3, 3], [-1, 3], [-1, 1]])
    t = M.box_corners(torch.tensor([_agent(0.0, 0.0, math.pi / 2, 4.0, 2.0)], dtype=torch.float64))
    assert isinstance(t, torch.Tensor) and t.shape == (1, 4, 2)
    torch.testing.assert_close(
        t[0], torch.tensor([[1.0, 2], [-1, 2], [-1, -2], [1, -2]], dtype=torch.float64)
    )


def test_boxes_overlap_simple_cases():
    a = np.array(_agent(0.0, 0.0))
    assert M.boxes_overlap(a, np.array(_agent(3.0, 0.0)))  # 1 m of overlap
    assert not M.boxes_overlap(a, np.array(_agent(5.0, 0.0)))  # 1 m apart
    assert not M.boxes_overlap(a, np.array(_agent(4.0, 0.0)))  # edges touch exactly
    assert not M.boxes_overlap(a, np.array(_agent(2.0, 2.0)))  # corners touch
    assert M.boxes_overlap(a, np.array(_agent(0.0, 0.0, 1.0, 1.0, 0.5)))  # contained


def test_rotated_45_degrees_touching_vs_overlapping():
    # axis-aligned 2x2 square; a 2x2 square rotated 45° whose corner touches x = 1
    a = np.array(_agent(0.0, 0.0, 0.0, 2.0, 2.0))
    touch = 1.0 + math.sqrt(2.0)
    assert not M.boxes_overlap(a, np.array(_agent(touch, 0.3, math.pi / 4, 2.0, 2.0)))
    assert M.boxes_overlap(a, np.array(_agent(touch - 1e-9, 0.3, math.pi / 4, 2.0, 2.0)))
    assert not M.boxes_overlap(a, np.array(_agent(touch + 1e-9, 0.3, math.pi / 4, 2.0, 2.0)))
    # and a corner-to-corner near miss along the diagonal that an AABB test would flag
    b = np.array(_agent(1.0 + 1.5 * math.sqrt(2) / 2 + 0.05, 1.2, math.pi / 4, 2.0, 1.0))
    assert not M.boxes_overlap(a, b)


def _brute_overlap(p, q):
    """Interiors of convex polygons p, q (4, 2) intersect (general position): a proper
    edge crossing or a vertex strictly inside the other polygon."""

    def orient(a, b, c):
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])

    def inside(pt, poly):  # poly counter-clockwise
        return all(orient(poly[i], poly[(i + 1) % 4], pt) > 0 for i in range(4))

    for i in range(4):
        a, b = p[i], p[(i + 1) % 4]
        for j in range(4):
            c, d = q[j], q[(j + 1) % 4]
            if orient(a, b, c) * orient(a, b, d) < 0 and orient(c, d, a) * orient(c, d, b) < 0:
                return True
    return any(inside(v, q) for v in p) or any(inside(v, p) for v in q)


def test_sat_matches_brute_force_on_random_boxes():
    rng = np.random.default_rng(1)
    n = 400
    th_a, th_b = rng.uniform(-np.pi, np.pi, (2, n))

    def boxes(th):
        return np.stack(
            [
                rng.uniform(-3, 3, n),
                rng.uniform(-3, 3, n),
                rng.uniform(0, 20, n),
                np.cos(th),
                np.sin(th),
                rng.uniform(0.5, 4.0, n),
                rng.uniform(0.3, 2.0, n),
            ],
            -1,
        )

    a, b = boxes(th_a), boxes(th_b)
    fast = M.boxes_overlap(a, b)
    ca, cb = M.box_corners(a), M.box_corners(b)
    slow = np.array([_brute_overlap(ca[i], cb[i]) for i in range(n)])
    assert 0.2 < slow.mean() < 0.8  # both outcomes well represented
    np.testing.assert_array_equal(fast, slow)
    # all pairs at once by broadcasting, symmetric
    allp = M.boxes_overlap(a[:20, None], b[None, :20])
    assert allp.shape == (20, 20)
    np.testing.assert_array_equal(allp, M.boxes_overlap(b[None, :20], a[:20, None]))


# ------------------------------------------------------------------ collisions
def _scene():
    """T=2, A=4: agents 0 and 1 overlap at step 0 only; 2 is alone; 3 (invalid at both
    steps, NaN padding) would overlap 2."""
    nan = [math.nan] * 7
    step0 = [_agent(0, 0), _agent(3, 0.5), _agent(20, 0), nan]
    step1 = [_agent(0, 0), _agent(10, 0), _agent(20, 0), _agent(20, 0)]
    agents = np.array([step0, step1])
    valid = np.array([[True, True, True, False], [True, True, True, False]])
    return agents, valid


def test_collisions_on_a_hand_made_scene():
    agents, valid = _scene()
    col = M.collisions(agents, valid)
    np.testing.assert_array_equal(col, [[1, 1, 0, 0], [0, 0, 0, 0]])
    assert M.collision_rate(agents, valid) == pytest.approx(2 / 3)
    assert M.collision_rate(agents, valid, per="step") == pytest.approx(2 / 6)
    # making agent 3 valid at step 1 adds a collision with agent 2
    v2 = valid.copy()
    v2[1, 3] = True
    np.testing.assert_array_equal(M.collisions(agents, v2)[1], [0, 0, 1, 1])
    assert M.collision_rate(agents, v2) == pytest.approx(4 / 4)
    # a batch (B, T, A, 7) equals the episodes one by one; per agent pools them
    batch = np.stack([agents, agents[:, [2, 1, 0, 3]]])
    bval = np.stack([valid, valid[:, [2, 1, 0, 3]]])
    col_b = M.collisions(batch, bval)
    np.testing.assert_array_equal(col_b[1], col[:, [2, 1, 0, 3]])
    assert M.collision_rate(batch, bval) == pytest.approx(4 / 6)
    # torch in -> torch out; a single step (A, 7) is T = 1
    rate = M.collision_rate(torch.tensor(agents[0, :3]))
    assert isinstance(rate, torch.Tensor) and rate.ndim == 0
    assert float(rate) == pytest.approx(2 / 3)
    assert math.isnan(M.collision_rate(agents, np.zeros_like(valid)))


def test_collisions_find_boxes_whose_centres_are_far_apart():
    # two long boxes end to end at any heading: centres a box length apart, overlapping
    # by 0.1 m or apart by 0.1 m (the pair test's answer), alone at each step
    rng = np.random.default_rng(3)
    rows, expect = [], []
    for k in range(40):
        gap = -0.1 if k % 2 == 0 else 0.1
        th, length = rng.uniform(-np.pi, np.pi), rng.uniform(5.0, 6.0)
        c, s = np.cos(th), np.sin(th)
        a = [100.0, -50.0, 0.0, c, s, length, 1.8]
        b = [100.0 + (length + gap) * c, -50.0 + (length + gap) * s, 0.0, c, s, length, 1.8]
        rows.append([a, b])
        expect.append(bool(M.boxes_overlap(np.array(a), np.array(b))))
    col = M.collisions(np.array(rows))
    np.testing.assert_array_equal(col, np.repeat(np.array(expect)[:, None], 2, 1))
    assert expect[0::2] == [True] * 20 and expect[1::2] == [False] * 20


def test_collisions_in_blocks_match_all_pairs_per_step():
    rng = np.random.default_rng(7)
    t, a = 1300, 30  # 1.2M pairs: two blocks of steps
    th = rng.uniform(-np.pi, np.pi, (t, a))
    agents = np.stack(
        [
            rng.uniform(-15, 15, (t, a)),
            rng.uniform(-15, 15, (t, a)),
            np.zeros((t, a)),
            np.cos(th),
            np.sin(th),
            np.full((t, a), 4.5),
            np.full((t, a), 2.0),
        ],
        -1,
    )
    valid = rng.random((t, a)) < 0.9
    col = M.collisions(agents, valid)
    for k in (0, 1, 1000, 1299):
        pair = M.boxes_overlap(agents[k][:, None], agents[k][None])
        pair &= valid[k][:, None] & valid[k][None] & ~np.eye(a, dtype=bool)
        np.testing.assert_array_equal(col[k], pair.any(-1))
    assert 0.05 < col.mean() < 0.9


# ------------------------------------------------------------------ off-road
def _straight_lane(length=10.0, n=11):
    x = np.linspace(0.0, length, n)
    return np.stack([x, np.zeros(n)], -1)[None]  # (1, n, 2)


def test_offroad_at_known_distances():
    lanes, widths = _straight_lane(), np.array([4.0])
    pts = [(5, 1.5), (5, 2.5), (5, -2.5), (13, 0), (11.5, 0), (-1, 2)]
    agents = np.array([_agent(x, y) for x, y in pts])
    dist = M.offroad_distance(agents, None, lanes, widths)
    np.testing.assert_allclose(dist, [-0.5, 0.5, 0.5, 1.0, -0.5, math.sqrt(5) - 2], atol=1e-12)
    np.testing.assert_array_equal(M.offroad(agents, None, lanes, widths), [0, 1, 1, 1, 0, 1])
    np.testing.assert_array_equal(
        M.offroad(agents, None, lanes, widths, tolerance=0.6), [0, 0, 0, 1, 0, 0]
    )
    # a second, invalid lane through every point changes nothing; valid, it covers all
    other = np.repeat(np.array(pts, float)[:, None] + [0.1, 0.0], 11, 1)  # padded
    other[:, 0, 0] -= 0.2  # a 0.2 m lane through each point
    both = np.concatenate([lanes, other])
    w2 = np.concatenate([widths, np.full(len(pts), 1.0)])
    lv = np.array([True] + [False] * len(pts))
    np.testing.assert_array_equal(M.offroad(agents, None, both, w2, lv), [0, 1, 1, 1, 0, 1])
    assert not M.offroad(agents, None, both, w2).any()
    # per-point lane_valid: only the first two points of the lane (segment 0..1 m)
    pv = np.zeros((1, 11), bool)
    pv[0, :2] = True
    np.testing.assert_allclose(
        M.offroad_distance(agents[:1], None, lanes, widths, pv), [math.hypot(4, 1.5) - 2]
    )
    # no valid lane at all: everything is off-road (distance inf); invalid agents False
    assert np.isinf(M.offroad_distance(agents, None, lanes, widths, [False])).all()
    valid = np.array([True, False, True, True, True, True])
    off = M.offroad(agents, valid, lanes, widths)
    assert not off[1]
    assert np.isnan(M.offroad_distance(agents, valid, lanes, widths)[1])


def test_offroad_rate_and_per_scene_lanes():
    # (B=2, T=2, A=2): scene 0 has the lane along y=0, scene 1 along y=10
    lane0 = _straight_lane()[0]
    lanes = np.stack([lane0[None], (lane0 + [0, 10])[None]])  # (2, 1, 11, 2)
    widths = np.full((2, 1), 4.0)
    a = np.array([[[_agent(5, 0), _agent(5, 10)], [_agent(5, 0), _agent(5, 3)]]] * 2)
    got = M.offroad(a, None, lanes, widths)
    np.testing.assert_array_equal(got[0], [[0, 1], [0, 1]])
    np.testing.assert_array_equal(got[1], [[1, 0], [1, 1]])
    assert M.offroad_rate(a, None, lanes, widths) == pytest.approx(3 / 4)
    assert M.offroad_rate(a, None, lanes, widths, per="step") == pytest.approx(5 / 8)
    # the same lanes stacked with a lane_batch index (the tile format's nodes/tile)
    stacked = np.concatenate([lanes[0], lanes[1], lanes[1]])
    by_batch = M.offroad(a, None, stacked, np.full(3, 4.0), lane_batch=[0, 1, 1])
    np.testing.assert_array_equal(by_batch, got)


def test_offroad_in_blocks_matches_direct_distances():
    rng = np.random.default_rng(2)
    n, p = 60, 20
    start = rng.uniform(-50, 50, (n, 1, 2))
    steps = rng.normal(0, 1.0, (n, p - 1, 2))
    lanes = np.concatenate([start, start + np.cumsum(steps, 1)], 1)
    widths = rng.uniform(2.5, 4.0, n)
    pts = rng.uniform(-60, 60, (1000, 2))  # 1000 x 1140 pairs: several blocks
    agents = np.concatenate([pts, np.zeros((1000, 1)), np.ones((1000, 1)), np.zeros((1000, 3))], 1)
    got = M.offroad_distance(agents, None, lanes, widths)
    a, b = lanes[:, :-1].reshape(-1, 2), lanes[:, 1:].reshape(-1, 2)
    hw = np.repeat(widths / 2, p - 1)
    for i in range(0, 1000, 97):
        q = pts[i]
        t = np.clip(((q - a) * (b - a)).sum(-1) / ((b - a) ** 2).sum(-1), 0, 1)
        d = np.linalg.norm(q - a - t[:, None] * (b - a), axis=-1) - hw
        assert got[i] == pytest.approx(d.min(), abs=1e-12)


# ------------------------------------------------------------------ feasibility
def _circle(radius, speed=10.0, dt=0.1, steps=30):
    t = np.arange(steps) * dt
    phi = speed * t / radius
    x, y = radius * np.sin(phi), radius * (1 - np.cos(phi))
    one = np.ones(steps)
    return np.stack([x, y, speed * one, np.cos(phi), np.sin(phi), 4.5 * one, 2 * one], -1)


def test_infeasibility_on_circles_brakes_and_turning_in_place():
    traj = np.stack([_circle(5.0), _circle(3.0)])  # (A=2, T=30, 7)
    bad = M.infeasible_steps(traj)
    assert bad.shape == (2, 29) and bad.dtype == np.bool_
    assert not bad[0].any() and bad[1].all()  # kappa 0.2 ok, 0.33 > 0.3
    assert M.infeasibility_rate(traj) == pytest.approx(0.5)
    assert not M.infeasible_steps(traj, max_curvature=0.34).any()
    # straight line braking at 12 m/s^2 for 5 steps, 8 m/s^2 afterwards
    acc = np.array([-12.0] * 5 + [-8.0] * 10)
    v = np.concatenate([[30.0], 30.0 + np.cumsum(acc) * 0.1])
    x = np.concatenate([[0.0], np.cumsum(v[:-1] * 0.1)])
    brake = np.stack([x, 0 * x, v, 1 + 0 * x, 0 * x, 4.5 + 0 * x, 2 + 0 * x], -1)
    np.testing.assert_array_equal(M.infeasible_steps(brake[None])[0], acc < -10.4)
    # turning in place: same position, heading changes by 0.1 rad per step
    spin = np.repeat(brake[:1], 4, 0)
    spin[:, 2] = 0
    th = 0.1 * np.arange(4)
    spin[:, 3], spin[:, 4] = np.cos(th), np.sin(th)
    assert M.infeasible_steps(spin[None]).all()
    still = spin.copy()
    still[:, 3], still[:, 4] = 1.0, 0.0
    assert not M.infeasible_steps(still[None]).any()
    # heading wraps: -179° -> +179° is a 2° turn, not 358°
    wrap = _circle(50.0, speed=10.0, steps=2)
    th2 = np.radians([-179.0, 179.0])
    wrap[:, 3], wrap[:, 4] = np.cos(th2), np.sin(th2)
    assert not M.infeasible_steps(wrap[None], max_curvature=0.04).any()


def test_invalid_frames_are_ignored_by_feasibility():
    traj = _circle(20.0)[None].copy()
    traj[0, 10, :3] = [1e4, 1e4, 500.0]  # a teleport and a speed spike ...
    valid = np.ones((1, 30), bool)
    assert M.infeasible_steps(traj, valid)[0, 9:11].all()
    valid[0, 10] = False  # ... marked invalid: steps 9 -> 10 and 10 -> 11 do not count
    bad = M.infeasible_steps(traj, valid)
    assert not bad.any()
    traj[0, 10] = math.nan  # invalid entries may hold NaN
    assert not M.infeasible_steps(traj, valid).any()
    assert M.infeasibility_rate(traj, valid, per="step") == 0.0
    t = M.infeasibility_rate(torch.tensor(traj), torch.tensor(valid))
    assert isinstance(t, torch.Tensor) and float(t) == 0.0


# ------------------------------------------------------------------ displacement
def test_ade_fde_of_shifted_trajectories_equal_the_shift():
    rng = np.random.default_rng(3)
    target = rng.normal(size=(5, 8, 7))
    pred = target[..., :2] + [3.0, 4.0]  # (A, T, 2) against (A, T, 7)
    ade, fde = M.ade_fde(pred, target)
    assert ade == pytest.approx(5.0) and fde == pytest.approx(5.0)
    # agent-dependent shifts, holes in validity, one agent never valid (NaN padding)
    shift = np.arange(5.0)[:, None, None] * [0.6, 0.8]  # |shift_a| = a
    pred = target[..., :2] + shift
    pred[1, 5:] += 100.0  # wrong after agent 1's last valid step: must not count
    valid = np.ones((5, 8), bool)
    valid[1, 5:] = False
    valid[4] = False
    pred[4] = math.nan
    ade_a, fde_a = M.ade_fde(pred, target, valid, reduction="none")
    np.testing.assert_allclose(ade_a[:4], [0, 1, 2, 3], atol=1e-12)
    np.testing.assert_allclose(fde_a[:4], [0, 1, 2, 3], atol=1e-12)
    assert np.isnan(ade_a[4]) and np.isnan(fde_a[4])
    ade, fde = M.ade_fde(pred, target, valid)
    assert ade == pytest.approx(1.5) and fde == pytest.approx(1.5)
    # final step = the last valid one, not the last one
    pred2 = target[..., :2].copy()
    pred2[:, 7] += [0.0, 2.0]
    v2 = np.ones((5, 8), bool)
    v2[0, 7] = False
    _, fde_a = M.ade_fde(pred2, target, v2, reduction="none")
    np.testing.assert_allclose(fde_a, [0, 2, 2, 2, 2])
    tt = M.ade_fde(torch.tensor(pred2), torch.tensor(target))
    assert isinstance(tt[0], torch.Tensor) and float(tt[1]) == pytest.approx(2.0)


# ------------------------------------------------------------------ density
def test_agents_per_km():
    lane = np.stack([np.linspace(0, 1000, 21), np.zeros(21)], -1)
    lanes = np.stack([lane, lane + [0, 3.5]])  # 2 km of lane
    assert M.agents_per_km(10, lanes) == pytest.approx(5.0)
    assert M.agents_per_km(10, lanes, [True, False]) == pytest.approx(10.0)
    np.testing.assert_allclose(M.lane_lengths(lanes), [1000, 1000])
    padded = np.stack([lanes, lanes])
    got = M.agents_per_km(np.array([10, 4]), padded, np.array([[1, 1], [1, 0]], bool))
    np.testing.assert_allclose(got, [5.0, 4.0])
    by = M.agents_per_km(
        np.array([10.0, 4.0, 1.0]), np.concatenate([lanes, lanes[:1]]), batch=[0, 0, 1]
    )
    np.testing.assert_allclose(by, [5.0, 4.0, math.nan])


# ------------------------------------------------------------------ lane graph
def _graph():
    """Nodes: 0 straight 19 m, 1 a quarter circle of radius 10, 2 straight, 3 beside 0."""
    s = np.stack([np.arange(20.0), np.zeros(20)], -1)
    phi = np.linspace(0, np.pi / 2, 20)
    arc = np.stack([19 + 10 * np.sin(phi), 10 - 10 * np.cos(phi)], -1)
    up = np.stack([np.full(20, 29.0), 10 + np.arange(20.0)], -1)
    pts = np.stack([s, arc, up, s + [0, 3.5]])
    # succ 0->1 (+ its pred 1->0), succ 1->2 stored only as pred 2->1, left 0->3, right 3->0
    ei = np.array([[0, 1], [1, 0], [2, 1], [0, 3], [3, 0]])
    et = np.array([1, 0, 0, 2, 3])
    return pts, ei, et


def test_lane_graph_stats_exact():
    pts, ei, et = _graph()
    st = M.lane_graph_stats(pts, ei, et, 4)
    dphi = (np.pi / 2) / 19
    arc_len = 19 * 2 * 10 * np.sin(dphi / 2)
    np.testing.assert_allclose(st["length"], [19, arc_len, 19, 19])
    np.testing.assert_allclose(st["curvature"], [0, 18 * dphi / arc_len, 0, 0], atol=1e-12)
    np.testing.assert_array_equal(st["in_degree"], [0, 1, 1, 0])
    np.testing.assert_array_equal(st["out_degree"], [1, 1, 0, 0])
    np.testing.assert_array_equal(st["degree"], [1, 2, 1, 0])
    np.testing.assert_array_equal(st["lateral_degree"], [1, 0, 0, 1])
    np.testing.assert_array_equal(st["num_nodes"], [4])
    np.testing.assert_array_equal(st["num_links"], [2])
    np.testing.assert_array_equal(st["num_lateral"], [2])
    # per tile: nodes 0, 3 in tile 0, 1, 2 in tile 1
    sb = M.lane_graph_stats(pts, ei, et, batch=[0, 1, 1, 0])
    np.testing.assert_array_equal(sb["num_nodes"], [2, 2])
    np.testing.assert_array_equal(sb["num_links"], [1, 1])
    np.testing.assert_array_equal(sb["num_lateral"], [2, 0])
    sb3 = M.lane_graph_stats(pts, ei, et, batch=[0, 1, 1, 0], num_graphs=3)  # empty tile 2
    np.testing.assert_array_equal(sb3["num_nodes"], [2, 2, 0])
    assert all(v.ndim == 1 for v in st.values())
    # comparing a graph's statistics with themselves: Fréchet exactly 0
    cmp = M.compare_lane_stats(st, st)
    assert set(cmp) == set(st)
    assert cmp["length"]["frechet"] == pytest.approx(0.0, abs=1e-12)
    assert cmp["length"]["n_a"] == 4 and math.isnan(cmp["num_nodes"]["frechet"])
    assert M.compare_lane_stats(st, {**st, "length": st["length"] + 2})["length"][
        "frechet"
    ] == pytest.approx(4.0)
    with pytest.raises(ValueError, match="missing"):
        M.compare_lane_stats(st, {"length": st["length"]})
    with pytest.raises(ValueError, match=r"\(E, 2\)"):
        M.lane_graph_stats(pts, ei.T, et)
    with pytest.raises(ValueError, match="edge_index values"):
        M.lane_graph_stats(pts, ei + 1, et)
    with pytest.raises(ValueError, match="EDGE_TYPES"):
        M.lane_graph_stats(pts, ei, et + 1)


# ------------------------------------------------------------------ tiles and seams
def test_tile_to_world_round_trip():
    rng = np.random.default_rng(4)
    p = rng.normal(size=(3, 5, 2))
    pose = np.array([100.0, -20.0, 0.7])
    w = M.tile_to_world(p, pose)
    np.testing.assert_allclose(M.world_to_tile(w, pose), p, atol=1e-12)
    np.testing.assert_allclose(
        M.tile_to_world(np.array([1.0, 0.0]), pose), [100 + math.cos(0.7), -20 + math.sin(0.7)]
    )
    t = M.tile_to_world(torch.tensor(p, dtype=torch.float32), torch.tensor(pose))
    assert t.dtype == torch.float64  # float32 tile points with float64 poses


def _split_lanes(theta=0.3, c0=(500.0, -300.0), shift=0.0):
    """A lane along the tile x axis at y=+5 from x=-32 to 96 and an oncoming one at
    y=-5 from 96 to -32 (tile-0 frame), cut at the seam x=32; world-frame pieces."""
    c0 = np.array(c0)
    e = np.array([math.cos(theta), math.sin(theta)])
    pose_a = np.array([*c0, theta])
    pose_b = np.array([*(c0 + 64 * e), theta])
    xa, xb = np.linspace(-32, 32, 20), np.linspace(32, 96, 20)
    fwd_a = np.stack([xa, np.full(20, 5.0)], -1)
    fwd_b = np.stack([xb, np.full(20, 5.0 + shift)], -1)
    onc_b = np.stack([xb[::-1], np.full(20, -5.0 + shift)], -1)
    onc_a = np.stack([xa[::-1], np.full(20, -5.0)], -1)
    # plus a lane of tile a that ends on its outer edge y = 32 (no neighbour there)
    side_a = np.stack([np.full(20, 0.0), np.linspace(0, 32, 20)], -1)
    tile_a = np.stack([fwd_a, onc_a, side_a])
    tile_b = np.stack([fwd_b, onc_b])
    wa = M.tile_to_world(tile_a, pose_a)
    wb = M.tile_to_world(tile_b, pose_a)  # still tile-0 frame coordinates
    return wa, wb, pose_a, pose_b, tile_a, tile_b


def test_seam_gaps_straight_split_and_shift():
    wa, wb, pa, pb, *_ = _split_lanes()
    gaps = M.seam_gaps(wa, wb, pa, pb)
    assert gaps.shape == (2,)  # the forward end and the oncoming start, not the side lane
    np.testing.assert_allclose(gaps, 0.0, atol=1e-9)
    wa, wb, pa, pb, *_ = _split_lanes(shift=0.7)
    np.testing.assert_allclose(M.seam_gaps(wa, wb, pa, pb), [0.7, 0.7], atol=1e-9)
    np.testing.assert_allclose(M.seam_gaps(wa, wb, pa, pb, symmetric=True), [0.7] * 4, atol=1e-9)
    # only complementary endpoints match: with no oncoming lane in b its partner is
    # missing (inf), even though b's forward start lies on the seam
    g = M.seam_gaps(wa, wb[:1], pa, pb)
    assert sorted(g.tolist()) == [pytest.approx(0.7), math.inf]
    # endpoints off the seam by more than the tolerance are not seam endpoints
    assert M.seam_gaps(wa, wb, pa, pb, tolerance=1e-9).shape == (2,)
    short = wa.copy()
    short[0, -1] -= 0.6 * np.array([math.cos(0.3), math.sin(0.3)])  # ends 0.6 m early
    np.testing.assert_allclose(M.seam_gaps(short, wb, pa, pb), [0.7], atol=1e-9)
    with pytest.raises(ValueError, match="edge neighbours"):
        M.seam_gaps(wa, wb, pa, pa + [128 * math.cos(0.3), 128 * math.sin(0.3), 0])
    with pytest.raises(ValueError, match="orientation"):
        M.seam_gaps(wa, wb, pa, pb + [0, 0, 0.1])


def test_episode_seam_gaps_over_an_l_shaped_route():
    # cells (0,0) -> (1,0) -> (1,1): the forward lane turns north in tile 1 into tile 2
    theta, c0 = -1.1, np.array([12.0, 7.0])
    _, _, pa, pb, tile_a, tile_b = _split_lanes(theta, c0)
    e_x, e_y = (
        np.array([math.cos(theta), math.sin(theta)]),
        np.array([-math.sin(theta), math.cos(theta)]),
    )
    poses = np.array([pa, pb, [*(c0 + 64 * e_x + 64 * e_y), theta]])
    in_b = tile_b - [64, 0]  # tile-1 frame
    turn = np.stack([np.linspace(-32, 5, 20), np.full(20, 5.0)], -1)  # enters from -x
    turn[10:] = np.stack([np.full(10, 5.0), np.linspace(5, 32, 10)], -1)  # leaves at +y
    up = np.stack([np.full(20, 5.0), np.linspace(-32, 0, 20)], -1)  # tile 2, from -y
    points = np.concatenate([tile_a, in_b, turn[None], up[None]]).astype(np.float32)
    node_tile = np.array([0, 0, 0, 1, 1, 1, 2])
    gaps = M.episode_seam_gaps(points, node_tile, poses)
    # seam 0|1: forward end + oncoming start; seam 1|2: the turning lane's end
    assert gaps.shape == (3,)
    np.testing.assert_allclose(gaps, 0.0, atol=1e-4)
    # from both sides: tile 1's forward lane and turning lane both start at (-32, 5)
    assert M.episode_seam_gaps(points, node_tile, poses, symmetric=True).shape == (7,)
    points[6] += [0.0, 0.25]
    np.testing.assert_allclose(
        np.sort(M.episode_seam_gaps(points, node_tile, poses)), [0, 0, 0.25], atol=1e-4
    )
    with pytest.raises(ValueError, match="grid"):
        M.episode_seam_gaps(points, node_tile, poses + [[0, 0, 0], [3, 0, 0], [0, 0, 0]])


# ------------------------------------------------------------------ distances
def test_frechet_distance():
    rng = np.random.default_rng(5)
    a = rng.normal(size=(400, 3)) @ rng.normal(size=(3, 3))
    assert M.frechet_distance(a, a) == pytest.approx(0.0, abs=1e-9)
    x = rng.normal(2.0, 1.5, 300)
    assert M.frechet_distance(x, x + 0.7) == pytest.approx(0.49, rel=1e-9)  # squared
    # 1-D closed form: (mu_a - mu_b)^2 + (sigma_a - sigma_b)^2
    y = rng.normal(-1.0, 0.5, 200)
    want = (x.mean() - y.mean()) ** 2 + (x.std(ddof=1) - y.std(ddof=1)) ** 2
    assert M.frechet_distance(x, y) == pytest.approx(want, rel=1e-10)
    # d = 3 against scipy's sqrtm
    b = rng.normal(0.5, 1.0, size=(250, 3))
    ca, cb = np.cov(a.T), np.cov(b.T)
    sq = scipy.linalg.sqrtm(ca @ cb).real
    want = ((a.mean(0) - b.mean(0)) ** 2).sum() + np.trace(ca + cb - 2 * sq)
    assert M.frechet_distance(a, b) == pytest.approx(want, rel=1e-8)
    # rank-deficient: a constant column reduces to the 1-D distance
    a2 = np.stack([x, np.zeros_like(x)], -1)
    b2 = np.stack([y, np.zeros_like(y)], -1)
    assert M.frechet_distance(a2, b2) == pytest.approx(M.frechet_distance(x, y), rel=1e-9)
    assert M.frechet_distance(np.ones(5), np.full(7, 3.0)) == pytest.approx(4.0)
    t = M.frechet_distance(torch.tensor(x, dtype=torch.float32), torch.tensor(x + 1.0))
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
    with pytest.raises(ValueError, match="same dimension"):
        M.frechet_distance(a, x)
    with pytest.raises(ValueError, match="at least 2"):
        M.frechet_distance(x[:1], x)


def test_mmd():
    rng = np.random.default_rng(6)
    a, b = rng.normal(size=(600, 2)), rng.normal(size=(600, 2))
    same = M.mmd(a, b)
    assert abs(same) < 5e-3
    shifted = M.mmd(a, b + [1.0, 0.0])
    assert shifted > 0.1 and shifted > 20 * abs(same)
    assert M.mmd(a, b + 1.0, kernel="laplacian") > 0.05
    assert M.mmd(a, b + 1.0, bandwidth=0.5) > 0.05
    # integer statistics with mostly tied values still get a usable bandwidth
    deg_a = rng.choice([1, 1, 1, 2], 300).astype(float)
    deg_b = rng.choice([1, 2, 2, 2], 300).astype(float)
    assert M.mmd(deg_a, deg_b) > 0.1
    # subsampled (fixed seed): reproducible
    assert M.mmd(a, b + 1, max_samples=100) == M.mmd(a, b + 1, max_samples=100)
    with pytest.raises(ValueError, match="kernel must be one of"):
        M.mmd(a, b, kernel="cosine")


# ------------------------------------------------------------------ bad input
def test_bad_input_is_rejected_with_clear_messages():
    agents, valid = _scene()
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 7\) with AGENT_FEATURES"):
        M.collisions(agents[..., :6], valid)
    with pytest.raises(ValueError, match=r"valid must have shape \(2, 4\)"):
        M.collisions(agents, valid[:, :3])
    with pytest.raises(ValueError, match=r"NaN or inf in 1 valid entries \(first at index"):
        M.collisions(agents, np.ones((2, 4), bool))
    with pytest.raises(TypeError, match="boolean mask"):
        M.collisions(agents, valid.astype(float))
    with pytest.raises(ValueError, match="per must be one of"):
        M.collision_rate(agents, valid, per="episode")
    neg = agents.copy()
    neg[0, 0, 5] = -1.0
    with pytest.raises(ValueError, match="negative length"):
        M.collisions(neg, valid)
    with pytest.raises(ValueError, match="dt must be"):
        M.infeasible_steps(_circle(5.0)[None], dt=0.0)
    with pytest.raises(ValueError, match=r"valid must have shape \(1, 30\)"):
        M.infeasible_steps(_circle(5.0)[None], np.ones((1, 29), bool))
    with pytest.raises(ValueError, match="7"):
        M.infeasible_steps(_circle(5.0)[None, :, :5])
    lanes = _straight_lane()
    with pytest.raises(ValueError, match="widths must have shape"):
        M.offroad(agents, valid, lanes, [4.0, 4.0])
    with pytest.raises(ValueError, match="lanes must be polylines"):
        M.offroad(agents, valid, lanes[0], [4.0])
    bad_lane = lanes.copy()
    bad_lane[0, 3, 0] = math.nan
    with pytest.raises(ValueError, match="lanes has NaN"):
        M.offroad(agents, valid, bad_lane, [4.0])
    with pytest.raises(ValueError, match="pred .* and target .* must agree"):
        M.ade_fde(np.zeros((2, 5, 2)), np.zeros((2, 4, 2)))
    with pytest.raises(ValueError, match="pred has NaN"):
        M.ade_fde(np.full((2, 5, 2), math.nan), np.zeros((2, 5, 2)))


# ------------------------------------------------------------------ device
def test_metrics_follow_the_device(device):
    agents, valid = _scene()
    f32 = dict(device=device, dtype=torch.float32)
    ta = torch.tensor(agents, **f32)
    tv = torch.tensor(valid, device=device)
    col = M.collisions(ta, tv)
    assert col.device.type == device.type
    np.testing.assert_array_equal(col.cpu().numpy(), M.collisions(agents, valid))
    rate = M.collision_rate(ta, tv)
    assert rate.device.type == device.type and rate.dtype == torch.float32
    lanes = torch.tensor(_straight_lane(), **f32)
    d = M.offroad_distance(ta, tv, lanes, torch.tensor([4.0], **f32))
    np.testing.assert_allclose(
        d.cpu().numpy(), M.offroad_distance(agents, valid, _straight_lane(), [4.0]), atol=1e-5
    )
    traj = torch.tensor(np.stack([_circle(5.0), _circle(3.0)]), **f32)
    bad = M.infeasible_steps(traj)
    assert bad.device.type == device.type
    assert not bad[0].any() and bad[1].all()
    ade, fde = M.ade_fde(traj + 1.0, traj)
    assert ade.device.type == device.type and float(ade) == pytest.approx(math.sqrt(2), rel=1e-5)
    x = torch.randn(300, 2, **f32)
    fd = M.frechet_distance(x, x + torch.tensor([3.0, 4.0], **f32))
    assert fd.device.type == device.type and float(fd) == pytest.approx(25.0, rel=1e-5)
    assert float(M.mmd(x, x + 2.0)) > 0.1
    pts, ei, et = _graph()
    st = M.lane_graph_stats(
        torch.tensor(pts, **f32), torch.tensor(ei, device=device), torch.tensor(et, device=device)
    )
    assert st["length"].device.type == device.type
    np.testing.assert_array_equal(st["degree"].cpu().numpy(), [1, 2, 1, 0])


def _arc(radius, speed, steps=30, dt=0.1, heading=None):
    """Agents ``(1, steps, 7)`` on a circle of ``radius`` at ``speed``; ``heading``: a
    fixed stated heading instead of the tangent (a vehicle sliding sideways)."""
    th = speed * np.arange(steps) * dt / radius
    h = th if heading is None else np.full(steps, heading)
    x, y = radius * np.sin(th), radius - radius * np.cos(th)
    return np.stack(
        [x, y, np.full(steps, speed), np.cos(h), np.sin(h), 4.5 + 0 * x, 1.9 + 0 * x], -1
    )[None]


def test_path_feasibility_from_positions():
    assert not M.path_infeasible_steps(_arc(10.0, 5.0)).any()  # 0.1 1/m
    bad = M.path_infeasible_steps(_arc(3.0, 5.0))  # 0.33 1/m
    assert bad.shape == (1, 28) and bad.all() and M.infeasible_steps(_arc(3.0, 5.0)).all()
    # heading stated straight ahead on a tight circle: only the positions give it away
    slide = _arc(2.0, 3.0, heading=0.0)
    assert M.path_infeasible_steps(slide).all() and not M.infeasible_steps(slide).any()
    # 12 m/s^2 along a straight line, stated speed constant: infeasible from positions
    t = np.arange(10) * 0.1
    fast = np.zeros((1, 10, 7))
    fast[0, :, 0], fast[0, :, 2:5] = 6.0 * t**2, [5.0, 1.0, 0.0]
    assert M.path_infeasible_steps(fast).all() and not M.infeasible_steps(fast).any()
    assert not M.path_infeasible_steps(fast, max_accel=12.5).any()
    # crawling (chords under min_distance): curvature not judged from positions
    assert not M.path_infeasible_steps(_arc(0.5, 0.2)).any()
    # a triple needs three valid frames; too short a track gives no triple
    v = np.ones((1, 30), bool)
    v[0, 5] = False
    assert M.path_infeasible_steps(_arc(3.0, 5.0), v)[0, 3:6].sum() == 0
    assert M.path_infeasible_steps(_arc(3.0, 5.0)[:, :2]).shape == (1, 0)


def test_drive_feasibility_counts_agents_by_id():
    """Slots of a drive: the ego (id 0) and a slot that holds vehicle 5, then vehicle 6
    far away: the jump between two vehicles is no step of either."""
    T = 10
    agents = np.zeros((T, 2, 7))
    agents[..., 2:7] = [5.0, 1.0, 0.0, 4.5, 1.9]
    agents[:, 0, 0] = 0.5 * np.arange(T)
    agents[:, 1, 0] = 100.0 + 0.5 * np.arange(T)
    agents[5:, 1, 0] += 300.0
    ids = np.array([[0, 5]] * 5 + [[0, 6]] * 5)
    valid = np.ones((T, 2), bool)
    out = M.drive_feasibility(agents, valid, ids, 0.1)
    assert out["ego"] == {
        "agents": 1,
        "stated_steps": 9,
        "stated_infeasible": 0,
        "stated_agents_infeasible": 0,
        "path_steps": 8,
        "path_infeasible": 0,
        "path_agents_infeasible": 0,
    }
    assert out["npc"]["agents"] == 2 and out["npc"]["stated_steps"] == 8
    assert out["npc"]["path_steps"] == 6 and out["npc"]["path_infeasible"] == 0
    agents[7, 1, 1] = 2.0  # vehicle 6 jumps 2 m sideways for one frame
    out = M.drive_feasibility(agents, valid, ids, 0.1)
    assert out["npc"]["path_infeasible"] == 3 and out["npc"]["path_agents_infeasible"] == 1
    assert out["npc"]["stated_infeasible"] == 0  # its stated heading never turned
    with pytest.raises(ValueError, match="agent_id"):
        M.drive_feasibility(agents, valid, ids[:, :1], 0.1)


def test_drive_seam_gaps_pair_only_tiles_live_together():
    """Cell (0, 0) in two versions: the first, live with (1, 0), meets its lanes; the
    second, live only later and alone, is no seam of (1, 0)'s."""
    x = np.linspace(-32.0, 32.0, 20)
    lane = np.stack([x, np.full(20, 1.75)], -1)
    shifted = lane + [0.0, 0.4]
    points = np.stack([lane, lane, shifted])
    lane_tile = [0, 1, 2]
    tiles = dict(tile_id=[0, 1, 2], tile_cell=[[0, 0], [1, 0], [0, 0]])
    gaps = M.drive_seam_gaps(points, lane_tile, **tiles, first_step=[0, 3, 9], last_step=[8, 8, 12])
    np.testing.assert_array_equal(gaps, [0.0, 0.0])  # both ends of the one seam
    both = M.drive_seam_gaps(
        points, lane_tile, **tiles, first_step=[0, 3, 9], last_step=[8, 12, 12]
    )
    np.testing.assert_allclose(np.sort(both), [0.0, 0.0, 0.4, 0.4])
    # a lane end on the edge with nothing to meet it: inf
    alone = M.drive_seam_gaps(points[:1], [0], [0, 1], [[0, 0], [1, 0]], [0, 0], [1, 1])
    assert list(alone) == [math.inf]
    with pytest.raises(ValueError, match="two cells"):
        M.drive_seam_gaps(points, lane_tile, [0, 0, 2], [[0, 0], [1, 0], [0, 0]], [0] * 3, [1] * 3)


def test_drive_tile_coverage():
    xy = [[0.0, 0.0], [40.0, 0.0], [100.0, 0.0], [100.0, 40.0]]
    cells, first, last = [[0, 0], [1, 0], [2, 0]], [0, 0, 3], [3, 1, 3]
    assert M.drive_tile_coverage(xy, cells, first, last) == 0.5  # t = 0 and 1 only
    assert M.drive_tile_coverage(xy, cells, [0, 0, 2], [3, 1, 3]) == 0.75
    assert math.isnan(M.drive_tile_coverage(np.zeros((0, 2)), cells, first, last))
