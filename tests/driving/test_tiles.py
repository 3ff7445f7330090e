"""Scene tiles: grid cells, lane cutting, the lane graph, episodes and their files."""

import json

import h5py
import numpy as np
import pytest

from simsci import data as sdata
from simsci.driving._roads import RoadNetwork, make_road, straight_road
from simsci.driving._tiles import (
    AGENT_FEATURES,
    EDGE_TYPES,
    HISTORY,
    LANE_POINTS,
    TILE_SIZE,
    cut_lanes,
    lane_graph,
    read_scene,
    scene_episode,
    tile_cells,
    tile_to_world,
    world_to_tile,
    write_scenes,
)

H = TILE_SIZE / 2


def _road(lanes_xy, *, succ=(), left=(), right=(), width=3.5):
    """A RoadNetwork of hand-made polylines (each resampled at <= 1 m), for geometry that
    make_road / straight_road do not produce on purpose."""
    pts = []
    for xy in lanes_xy:
        xy = np.asarray(xy, float)
        s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(xy, axis=0).T))])
        q = np.linspace(0.0, s[-1], int(np.ceil(s[-1])) + 1)
        pts.append(np.stack([np.interp(q, s, xy[:, 0]), np.interp(q, s, xy[:, 1])], axis=1))
    n, p = len(pts), max(len(a) for a in pts)
    tab = {k: -np.ones((n, 4), np.int64) for k in ("succ", "pred")}
    for a, b in succ:
        tab["succ"][a, (tab["succ"][a] >= 0).sum()] = b
        tab["pred"][b, (tab["pred"][b] >= 0).sum()] = a
    side = {k: -np.ones(n, np.int64) for k in ("left", "right")}
    for k, pairs in (("left", left), ("right", right)):
        for a, b in pairs:
            side[k][a] = b
    return RoadNetwork(
        points=np.stack([np.concatenate([a, np.repeat(a[-1:], p - len(a), 0)]) for a in pts]),
        num_points=np.array([len(a) for a in pts], np.int64),
        length=np.array([np.hypot(*np.diff(a, axis=0).T).sum() for a in pts]),
        width=np.full(n, width),
        speed_limit=np.full(n, 13.9),
        kind=np.zeros(n, np.int64),
        end=np.zeros(n, np.int64),
        priority=np.full(n, 2, np.int64),
        conflict_lanes=np.zeros((0, 2), np.int64),
        conflict_s=np.zeros((0, 2)),
        conflict_xy=np.zeros((0, 2)),
        route=np.array([0], np.int64),
        **tab,
        **side,
    )


def straight():
    """straight_road: 3 lanes each way along x in [0, 400], y = -1.75, -5.25, -8.75 (+x) and
    +1.75, +5.25, +8.75 (-x); the test reads segment breaks from the road itself."""
    return straight_road(400.0, lanes=3, oncoming=True)


def _start(road, lane):
    return road.points[lane, 0]


def _direction(road, lane):
    return np.sign(road.points[lane, road.num_points[lane] - 1, 0] - road.points[lane, 0, 0])


# ------------------------------------------------------------------------ cells
def test_tile_cells_straight_and_rotated():
    x = np.arange(0.0, 201.0)
    cells, first = tile_cells(np.stack([x, np.zeros_like(x)], 1), [0.0, 0.0], 0.0)
    assert cells.tolist() == [[0, 0], [1, 0], [2, 0], [3, 0]]
    assert first.tolist() == [0.0, 32.0, 96.0, 160.0]
    th = 0.7  # the same drive along a rotated grid
    p = np.stack([np.cos(th) * x + 5.0, np.sin(th) * x - 2.0], 1)
    cells_r, first_r = tile_cells(p, [5.0, -2.0], th)
    assert cells_r.tolist() == cells.tolist()
    np.testing.assert_array_equal(first_r, first)


def test_tile_cells_l_shape():
    a = np.stack([np.arange(0.0, 101.0), np.zeros(101)], 1)
    b = np.stack([np.full(100, 100.0), np.arange(1.0, 101.0)], 1)
    cells, first = tile_cells(np.concatenate([a, b]), [0.0, 0.0], 0.0)
    assert cells.tolist() == [[0, 0], [1, 0], [2, 0], [2, 1], [2, 2]]
    assert first.tolist() == [0.0, 32.0, 96.0, 101 + 31.0, 101 + 95.0]


def test_tile_cells_diagonal_jumps_stay_4_connected():
    # through the exact corner (32, 32): x is stepped first
    cells, first = tile_cells([[30.0, 30.0], [34.0, 34.0]], [0.0, 0.0], 0.0)
    assert cells.tolist() == [[0, 0], [1, 0], [1, 1]]
    np.testing.assert_allclose(first, [0.0, 0.5, 1.0])
    # y = 32 is crossed first (u = 1/3), x = 32 later
    cells, first = tile_cells([[30.0, 31.0], [33.0, 34.0]], [0.0, 0.0], 0.0)
    assert cells.tolist() == [[0, 0], [0, 1], [1, 1]]
    np.testing.assert_allclose(first, [0.0, 1 / 3, 1.0])
    # a long jump over many cells: consecutive cells are 4-neighbours, times increase
    cells, first = tile_cells([[0.0, 0.0], [300.0, -170.0], [310.0, -171.0]], [0.0, 0.0], 0.0)
    assert (np.abs(np.diff(cells, axis=0)).sum(axis=1) == 1).all()
    assert cells[-1].tolist() == [5, -3] and (np.diff(first) > 0).all()


def test_tile_cells_revisits_are_not_repeated():
    x = np.concatenate([np.arange(0.0, 41.0), np.arange(40.0, -1.0, -1.0), np.zeros(40)])
    y = np.concatenate([np.zeros(41), np.zeros(41), np.arange(1.0, 41.0)])
    cells, first = tile_cells(np.stack([x, y], 1), [0.0, 0.0], 0.0)
    assert cells.tolist() == [[0, 0], [1, 0], [0, 1]]
    assert first.tolist() == [0.0, 32.0, 82 + 31.0]


def test_frames_round_trip():
    rng = np.random.default_rng(0)
    p = rng.normal(size=(4, 5, 2)) * 50
    pose = np.array([[3.0, -4.0, 0.3], [10.0, 2.0, -2.0], [0.0, 0.0, 0.0], [1e3, 5e2, 3.0]])
    np.testing.assert_allclose(tile_to_world(world_to_tile(p, pose), pose), p, atol=1e-10)
    np.testing.assert_allclose(
        world_to_tile([64.0, 0.0], [0.0, 0.0, np.pi / 2]), [0.0, -64.0], atol=1e-12
    )


# ------------------------------------------------------------------------ lanes
def test_cut_lanes_axis_aligned_exact():
    road = straight()
    pc = cut_lanes(road, [40.0, -1.75, 0.0])  # x in [8, 72]: inside the first 80 m segment
    assert len(pc["lane"]) == 6 and pc["points"].shape == (6, LANE_POINTS, 2)
    assert (np.diff(pc["lane"]) > 0).all()
    for k, lane in enumerate(pc["lane"]):
        y = _start(road, lane)[1] + 1.75
        sign = _direction(road, lane)
        np.testing.assert_array_equal(pc["points"][k, [0, -1], 0], [-32.0 * sign, 32.0 * sign])
        np.testing.assert_allclose(pc["points"][k, :, 1], y, atol=1e-12)
        np.testing.assert_allclose(pc["points"][k, :, 0], sign * np.linspace(-32, 32, LANE_POINTS))
        start = abs(_start(road, lane)[0] - (8.0 if sign > 0 else 72.0))
        np.testing.assert_allclose([pc["s0"][k], pc["s1"][k]], [start, start + 64.0])
    np.testing.assert_array_equal(pc["width"], 3.5)


def test_cut_lanes_rotated_cut_points_and_spacing():
    road = straight()
    pose = np.array([100.0, -2.0, 0.3])
    pc = cut_lanes(road, pose)
    assert len(pc["lane"]) >= 6
    world = tile_to_world(pc["points"], pose)
    for k, lane in enumerate(pc["lane"]):
        x0, y0 = _start(road, lane)
        sign = _direction(road, lane)
        np.testing.assert_allclose(world[k, :, 1], y0, atol=1e-9)  # on the centreline
        np.testing.assert_allclose(
            sign * (world[k, [0, -1], 0] - x0), [pc["s0"][k], pc["s1"][k]], atol=1e-9
        )
        step = np.hypot(*np.diff(pc["points"][k], axis=0).T)
        np.testing.assert_allclose(step, (pc["s1"][k] - pc["s0"][k]) / (LANE_POINTS - 1))
        assert (sign * np.diff(world[k, :, 0]) > 0).all()  # driving direction
        for end, s in ((0, pc["s0"][k]), (-1, pc["s1"][k])):
            on_edge = np.abs(pc["points"][k, end]).max() == H
            at_break = np.isclose(s, 0.0) or np.isclose(s, road.length[lane])
            assert on_edge or at_break  # every end is a boundary cut or a segment break
    # the break at x = 80 lies inside: each lane's piece ends where its successor's starts
    by_lane = dict(zip(pc["lane"].tolist(), range(len(pc["lane"]))))
    pairs = [(a, int(road.succ[a, 0])) for a in by_lane if road.succ[a, 0] in by_lane]
    assert len(pairs) == 6
    for a, b in pairs:
        np.testing.assert_allclose(world[by_lane[a], -1], world[by_lane[b], 0], atol=1e-9)


def test_cut_lanes_seam_pieces_meet_exactly():
    road = straight()
    origin, th = np.array([5.0, -1.0]), 0.3
    poses = [
        np.array([*tile_to_world(TILE_SIZE * np.array(c, float), [*origin, th]), th])
        for c in ((0, 0), (1, 0), (2, 0))
    ]
    pieces = [cut_lanes(road, p) for p in poses]
    n_seams = 0
    for a, b in ((0, 1), (1, 0), (1, 2), (2, 1)):
        wa = tile_to_world(pieces[a]["points"][:, -1], poses[a])
        wb = tile_to_world(pieces[b]["points"][:, 0], poses[b])
        for k in range(len(wa)):
            if np.abs(pieces[a]["points"][k, -1]).max() < H:
                continue  # ends inside (a segment break)
            same = pieces[b]["lane"] == pieces[a]["lane"][k]
            gap = np.hypot(*(wb - wa[k]).T)
            if same.any() and gap[same].min() < 1.0:
                assert gap[same].min() < 1e-9
                n_seams += 1
    assert n_seams >= 6


def test_cut_lanes_leave_and_reenter_gives_two_pieces():
    road = _road([[[-30.0, 0.0], [0.0, 40.0], [30.0, 0.0]]])  # out through the top, back
    pc = cut_lanes(road, [0.0, 0.0, 0.0])
    assert pc["lane"].tolist() == [0, 0]
    np.testing.assert_allclose(pc["points"][0, [0, -1]], [[-30.0, 0.0], [-6.0, 32.0]], atol=1e-9)
    np.testing.assert_allclose(pc["points"][1, [0, -1]], [[6.0, 32.0], [30.0, 0.0]], atol=1e-9)
    assert pc["points"][0, -1, 1] == H and pc["points"][1, 0, 1] == H
    np.testing.assert_allclose(pc["s0"], [0.0, 60.0], atol=1e-9)
    np.testing.assert_allclose(pc["s1"], [40.0, 100.0], atol=1e-9)


def test_cut_lanes_drops_slivers():
    # x - y = c cuts the corner (32, -32): inside for a length sqrt(2) (64 - c)
    def pieces(c):
        return len(cut_lanes(_road([[[20.0, 20.0 - c], [44.0, 44.0 - c]]]), [0, 0, 0])["lane"])

    assert pieces(63.5) == 1 and pieces(63.8) == 0 and pieces(64.5) == 0


# ------------------------------------------------------------------------ graph
def test_lane_graph_edges():
    road = straight()
    poses = [np.array([40.0, 0.0, 0.0]), np.array([104.0, 0.0, 0.0])]  # x in [8, 72], [72, 136]
    pieces = [cut_lanes(road, p) for p in poses]
    g = lane_graph(pieces, road)
    nodes, idx, typ = g["nodes"], g["edges"]["index"], g["edges"]["type"]
    n0, n1 = len(pieces[0]["lane"]), len(pieces[1]["lane"])
    assert (n0, n1) == (6, 12) and g["num_nodes"] == len(nodes["points"]) == 18
    assert nodes["tile"].tolist() == [0] * n0 + [1] * n1
    assert nodes["points"].dtype == np.float32 and nodes["kind"].dtype == np.int64
    lane = np.concatenate([p["lane"] for p in pieces])
    edges = {(EDGE_TYPES[t], int(a), int(b)) for t, (a, b) in zip(typ, idx)}
    succ = {(a, b) for t, a, b in edges if t == "succ"}
    pred = {(a, b) for t, a, b in edges if t == "pred"}
    assert pred == {(b, a) for a, b in succ}
    # 3 + 3 across the seam x = 72 (both directions), 3 + 3 at the breaks x = 80 in tile 1
    seam = {(a, b) for a, b in succ if nodes["tile"][a] != nodes["tile"][b]}
    assert len(succ) == 12 and len(seam) == 6
    for a, b in succ:
        if (a, b) in seam:
            assert lane[a] == lane[b]
        else:
            assert nodes["tile"][a] == nodes["tile"][b] == 1 and lane[b] == road.succ[lane[a], 0]
    left = {(a, b) for t, a, b in edges if t == "left"}
    right = {(a, b) for t, a, b in edges if t == "right"}
    assert right == {(b, a) for a, b in left} and len(left) == 2 * (2 + 4)
    for a, b in left:
        assert nodes["tile"][a] == nodes["tile"][b] and road.left[lane[a]] == lane[b]
    # sorted by (type, src, dst), types in range
    assert np.all(np.diff(typ) >= 0) and typ.max() < len(EDGE_TYPES)


# --------------------------------------------------------------------- episodes
def _drive(n=301, off_road_after=None):
    times = np.arange(n) / 10.0
    agents = np.zeros((n, 4, 7))
    agents[..., 2] = 10.0
    agents[..., 3] = 1.0
    agents[..., 5:] = [4.5, 1.8]
    agents[:, 0, :2] = np.stack([np.arange(n, dtype=float), np.full(n, -1.75)], 1)  # the ego
    agents[:, 1, :2] = np.stack([20.0 + np.arange(n), np.full(n, -5.25)], 1)
    agents[:, 2, :2] = [150.0, -8.75]  # parked from sample 90 on
    agents[:, 3, :2] = [-500.0, 0.0]  # never in a tile
    valid = np.ones((n, 4), bool)
    valid[:90, 2] = False
    if off_road_after is not None:
        m = off_road_after
        agents[m:, 0, 0] = agents[m - 1, 0, 0]
        agents[m:, 0, 1] = -1.75 + np.arange(1, n - m + 1) * 1.0
        agents[m:, 0, 3:5] = [0.0, 1.0]
    return times, agents, valid


def test_scene_episode_end_to_end(tmp_path):
    road = straight()
    times, agents, valid = _drive()
    ep = scene_episode(road, times, agents, valid, params=[1.5, 2.0])
    assert ep["t"].tolist() == [0.0, 3.2, 9.6, 16.0, 22.4, 28.8]
    assert ep["tile_cell"].tolist() == [[k, 0] for k in range(6)]
    np.testing.assert_allclose(ep["tile_pose"], [[64.0 * k, -1.75, 0.0] for k in range(6)])
    a, av, ah = ep["agents"], ep["agents_valid"], ep["agents_history_valid"]
    assert a.shape == (6, 3, HISTORY, 7) and a.dtype == np.float32
    # the ego is agent 0: centre at t_0, on the left seam afterwards
    np.testing.assert_allclose(a[0, 0, -1], [0, 0, 10, 1, 0, 4.5, 1.8], rtol=1e-6)
    np.testing.assert_array_equal(a[1:, 0, -1, :2], [[-32.0, 0.0]] * 5)
    np.testing.assert_allclose(a[1, 0, :, 0], np.arange(-42.0, -31.0))
    assert av[:, :2].all() and av[:, 2].tolist() == [False, False, True, False, False, False]
    np.testing.assert_array_equal(a[2, 2, -1, :2], [150.0 - 128.0, -7.0])
    # history at the start: only the last frame of tile 0 exists; agent 2 appears at 90
    assert ah[0, 0].tolist() == [False] * 10 + [True]
    assert ah[2, 2].tolist() == [False] * 4 + [True] * 7
    assert np.isnan(a[0, 0, :10]).all() and np.isnan(a[0, 2]).all() and not ah[0, 2].any()
    assert ah[1:, :2].all()
    # every tile has lanes; the round trip through a file is exact
    tiles = ep["graphs"]["lanes"]["nodes"]["tile"]
    assert set(tiles.tolist()) == set(range(6))
    path = write_scenes(tmp_path / "s.h5", [ep, ep], meta={"note": "x"}, param_names=["a", "b"])
    back = read_scene(path, 1)
    for key in ("t", "tile_pose", "tile_cell", "agents_valid", "agents_history_valid"):
        np.testing.assert_array_equal(back[key], ep[key])
    np.testing.assert_array_equal(back["agents"], ep["agents"])
    np.testing.assert_array_equal(back["params"], [1.5, 2.0])
    g = ep["graphs"]["lanes"]
    np.testing.assert_array_equal(back["graph"]["edges"]["index"], g["edges"]["index"])
    assert len(back["lanes"]) == 6
    for k, piece in enumerate(back["lanes"]):
        np.testing.assert_array_equal(piece["points"], g["nodes"]["points"][tiles == k])
        assert piece["edge_index"].max() < len(piece["points"])
    with sdata.open(path) as ds:
        assert ds.kind == "scene" and ds.system == "driving"
        assert ds.names("agents") == list(AGENT_FEATURES) and ds.names("params") == ["a", "b"]
        assert ds.meta["tile_size"] == TILE_SIZE and ds.meta["edge_types"] == list(EDGE_TYPES)
        assert read_scene(ds, 0)["t"].tolist() == ep["t"].tolist()


def test_scene_episode_diagonal_cell_interpolates():
    road = _road([[[-100.0, -100.0 + d], [200.0, 200.0 + d]] for d in (-10.0, 0.0, 10.0)])
    n = 120
    times = np.arange(n) / 10.0
    agents = np.zeros((n, 1, 7))
    agents[:, 0, :2] = np.arange(n)[:, None] * np.array([1.0, 1.0]) / np.sqrt(2) * 2.0
    agents[:, 0, 2:] = [20.0, 1.0, 0.0, 4.5, 1.8]  # heading +x: the grid is axis-aligned
    ep = scene_episode(road, times, agents, np.ones((n, 1), bool))
    assert (np.diff(ep["t"]) > 0).all()
    assert (np.abs(np.diff(ep["tile_cell"], axis=0)).sum(axis=1) == 1).all()
    assert ep["agents_history_valid"][:, 0, -1].all()


def test_scene_episode_bridges_a_grazed_corner():
    # the ego (y = x - 1) clips cell (1, 0) by < 1 m where no lane lies; the lane (y = x + 2)
    # passes the corner through (0, 1) instead, which replaces it
    road = _road([[[-30.0, -28.0], [100.0, 102.0]]])
    x = np.arange(-20.0, 80.0, 0.25)
    n = len(x)
    agents = np.zeros((n, 1, 7))
    agents[:, 0, :2] = np.stack([x, x - 1.0], 1)
    agents[:, 0, 2:] = [2.5 * np.sqrt(2), np.sqrt(0.5), np.sqrt(0.5), 4.5, 1.8]
    times = np.arange(n) / 10.0
    assert tile_cells(agents[:, 0, :2], [0.0, 0.0], 0.0)[0].tolist() == [[0, 0], [1, 0], [1, 1]]
    ep = scene_episode(road, times, agents, np.ones((n, 1), bool), origin_pose=[0.0, 0.0, 0.0])
    assert ep["tile_cell"].tolist() == [[0, 0], [0, 1], [1, 1]]
    np.testing.assert_allclose(ep["t"], [0.0, 20.8, 21.2])
    assert ep["agents_valid"][:, 0].all()
    np.testing.assert_allclose(ep["agents"][1, 0, -1, :2], [32.0, -33.0])  # just outside
    assert np.bincount(ep["graphs"]["lanes"]["nodes"]["tile"]).tolist() == [1, 1, 1]


def test_scene_episode_on_a_generated_road():
    road = make_road(seed=3, length=1500.0)
    poly, s = road.route_polyline(), road.route_s()
    d = np.arange(0.0, s[-1], 1.5)
    xy = np.stack([np.interp(d, s, poly[:, 0]), np.interp(d, s, poly[:, 1])], 1)
    heading = np.unwrap(np.arctan2(*np.gradient(xy, axis=0).T[::-1]))
    agents = np.zeros((len(d), 1, 7))
    agents[:, 0] = np.column_stack(
        [xy, np.full(len(d), 15.0), np.cos(heading), np.sin(heading), np.full((len(d), 2), 2.0)]
    )
    ep = scene_episode(road, np.arange(len(d)) / 10.0, agents, np.ones((len(d), 1), bool))
    cells, g = ep["tile_cell"], ep["graphs"]["lanes"]
    assert len(cells) >= 1500 / 64
    for k in range(1, len(cells)):
        assert (np.abs(cells[:k] - cells[k]).sum(axis=1) == 1).any()  # 4-connected growth
    tile = g["nodes"]["tile"]
    assert (np.bincount(tile, minlength=len(cells)) > 0).all()
    world = tile_to_world(g["nodes"]["points"].astype(np.float64), ep["tile_pose"][tile])
    succ = g["edges"]["index"][g["edges"]["type"] == EDGE_TYPES.index("succ")]
    # succ across a seam: src ends on the edge facing dst's tile, dst starts on the other
    pts = g["nodes"]["points"]
    step = cells[tile[succ[:, 1]]] - cells[tile[succ[:, 0]]]
    ax = np.argmax(np.abs(step), axis=1)
    rows = np.arange(len(succ))
    sign = step[rows, ax]
    facing = (np.abs(step).sum(axis=1) == 1) & (pts[succ[:, 0], -1][rows, ax] == H * sign)
    facing &= pts[succ[:, 1], 0][rows, ax] == -H * sign
    assert facing.sum() > 20
    seam = succ[facing]
    gap = np.hypot(*(world[seam[:, 1], 0] - world[seam[:, 0], -1]).T)
    assert gap.max() < 1e-4  # exact up to the float32 tile-frame storage
    gap_all = np.hypot(*(world[succ[:, 1], 0] - world[succ[:, 0], -1]).T)
    assert gap_all.max() < 1.0  # elsewhere at most two dropped slivers (< 0.5 m each)


def test_scene_episode_bad_input():
    road = straight()
    times, agents, valid = _drive()
    with pytest.raises(ValueError, match=r"tile 2 .* off the road network"):
        scene_episode(road, *_drive(off_road_after=80))
    with pytest.raises(ValueError, match="strictly increasing"):
        scene_episode(road, times[::-1], agents, valid)
    with pytest.raises(ValueError, match=r"agents must be real \(Tsim, V, 7\)"):
        scene_episode(road, times, agents[:, :, :6], valid)
    with pytest.raises(ValueError, match=r"valid must be bool \(Tsim, V\)"):
        scene_episode(road, times, agents, valid[:, :3])
    bad = agents.copy()
    bad[5, 1, 0] = np.nan
    with pytest.raises(ValueError, match="NaN/inf where valid is True .* sample 5, slot 1"):
        scene_episode(road, times, bad, valid)
    valid0 = valid.copy()
    valid0[3, 0] = False
    with pytest.raises(ValueError, match="ego .* must be valid at every sample"):
        scene_episode(road, times, agents, valid0)


# ------------------------------------------------------------------------ files
@pytest.fixture
def scene_file(tmp_path):
    ep = scene_episode(straight(), *_drive())
    return write_scenes(tmp_path / "scene.h5", [ep]), ep


def test_read_scene_edge_to_missing_node(scene_file):
    path, ep = scene_file
    with h5py.File(path, "r+") as f:
        f["graphs/lanes/edges/index"][0] = [ep["graphs"]["lanes"]["num_nodes"] + 3, 0]
    with pytest.raises(ValueError, match="episode 0.*refers to a node outside.*graph-edges"):
        read_scene(path, 0)  # the format's own check, at open
    with (
        sdata.open(path, check=False) as ds,
        pytest.raises(
            ValueError, match=r"scene.h5.*episode 0.*points to a missing node.*edge-node"
        ),
    ):
        read_scene(ds, 0)


def test_read_scene_bad_edge_type_and_empty_tile(scene_file):
    path, _ = scene_file
    with h5py.File(path, "r+") as f:
        f["graphs/lanes/edges/type"][0] = 7
    with pytest.raises(ValueError, match="episode 0.*type id 7.*edge-type"):
        read_scene(path, 0)
    with h5py.File(path, "r+") as f:
        f["graphs/lanes/edges/type"][0] = 0
        tile = f["graphs/lanes/nodes/tile"][()]
        f["graphs/lanes/nodes/tile"][tile == 1] = 0
    with pytest.raises(
        ValueError, match=r"episode 0.*tile \(step\) 1 has no lane node.*tile-lanes"
    ):
        read_scene(path, 0)


def test_read_scene_other_layout(scene_file):
    path, _ = scene_file
    with h5py.File(path, "r+") as f:
        meta = json.loads(f.attrs["meta"])
        meta["tile_size"] = 32.0
        f.attrs["meta"] = json.dumps(meta)
    with pytest.raises(ValueError, match=r"scene.h5.*tile layout \{'tile_size': 32.0\} differs"):
        read_scene(path, 0)


def test_write_scenes_rejects_broken_episodes(tmp_path):
    ep = scene_episode(straight(), *_drive())
    bad = {**ep, "agents": ep["agents"][..., :6]}
    with pytest.raises(ValueError, match=r"episode 0.*\(T, A, H, 7\).*agents-features"):
        write_scenes(tmp_path / "a.h5", [bad])
    with pytest.raises(ValueError, match="contradicts the tile layout"):
        write_scenes(tmp_path / "b.h5", [ep], meta={"history": 5})
    assert not (tmp_path / "a.h5").exists() and not (tmp_path / "b.h5").exists()


def test_files_pad_agents_across_episodes(tmp_path):
    road = straight()
    times, agents, valid = _drive()
    wide = scene_episode(road, times, agents, valid)
    narrow = scene_episode(road, times[:100], agents[:100, :1], valid[:100, :1])
    assert narrow["agents"].shape[1] == 1 and wide["agents"].shape[1] == 3
    path = write_scenes(tmp_path / "pad.h5", [narrow, wide])
    back = read_scene(path, 0)
    assert back["agents"].shape == (len(narrow["t"]), 3, HISTORY, 7)
    np.testing.assert_array_equal(back["agents"][:, :1], narrow["agents"])
    assert np.isnan(back["agents"][:, 1:]).all()
    assert not back["agents_valid"][:, 1:].any() and not back["agents_history_valid"][:, 1:].any()


def test_torch_inputs():
    torch = pytest.importorskip("torch")
    road = straight()
    times, agents, valid = _drive(n=80)
    ep = scene_episode(
        road, torch.tensor(times), torch.tensor(agents, dtype=torch.float32), torch.tensor(valid)
    )
    ref = scene_episode(road, times, agents.astype(np.float32), valid)
    np.testing.assert_array_equal(ep["agents"], ref["agents"])
    p = torch.tensor([[1.0, 2.0]], dtype=torch.float32)
    out = tile_to_world(world_to_tile(p, [3.0, 4.0, 0.5]), [3.0, 4.0, 0.5])
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    torch.testing.assert_close(out, p)
