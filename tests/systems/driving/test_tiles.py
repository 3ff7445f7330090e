"""Scene tiles: grid cells, lane cutting, the lane graph, episodes and their files."""

import json
from types import SimpleNamespace

import h5py
import numpy as np
import pytest

from simsci import data as sdata
from simsci.systems.driving._tiles import (
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


def _road(lanes_xy, *, succ=None, left=None, right=None, width=3.5):
    """A RoadNetwork-shaped stand-in from polylines (each resampled at <= 1 m)."""
    pts = []
    for xy in lanes_xy:
        xy = np.asarray(xy, float)
        seg = np.hypot(*np.diff(xy, axis=0).T)
        s = np.concatenate([[0.0], np.cumsum(seg)])
        q = np.linspace(0.0, s[-1], int(np.ceil(s[-1])) + 1)
        pts.append(np.stack([np.interp(q, s, xy[:, 0]), np.interp(q, s, xy[:, 1])], axis=1))
    n = len(pts)
    p = max(len(a) for a in pts)
    points = np.stack([np.concatenate([a, np.repeat(a[-1:], p - len(a), 0)]) for a in pts])
    length = np.array([np.hypot(*np.diff(a, axis=0).T).sum() for a in pts])
    succ_tab = -np.ones((n, 4), np.int64)
    pred_tab = -np.ones((n, 4), np.int64)
    for a, b in succ or []:
        succ_tab[a, (succ_tab[a] >= 0).sum()] = b
        pred_tab[b, (pred_tab[b] >= 0).sum()] = a
    lt = -np.ones(n, np.int64)
    rt = -np.ones(n, np.int64)
    for a, b in left or []:
        lt[a] = b
    for a, b in right or []:
        rt[a] = b
    return SimpleNamespace(
        points=points,
        num_points=np.array([len(a) for a in pts]),
        length=length,
        width=np.full(n, width),
        speed_limit=np.full(n, 13.9),
        kind=np.zeros(n, np.int64),
        end=np.zeros(n, np.int64),
        pred=pred_tab,
        succ=succ_tab,
        left=lt,
        right=rt,
    )


def straight(x0=-100.0, x1=500.0, seg=100.0, lanes=3, width=3.5):
    """Lanes along +x at y = 0, -3.5, -7 (lane j's left is j-1), split every ``seg`` m."""
    edges = np.arange(x0, x1 + 1e-9, seg)
    xy, succ, left, right = [], [], [], []
    for s in range(len(edges) - 1):
        for j in range(lanes):
            lid = s * lanes + j
            xy.append([[edges[s], -width * j], [edges[s + 1], -width * j]])
            if s + 2 < len(edges):
                succ.append((lid, lid + lanes))
            if j > 0:
                left.append((lid, lid - 1))
            if j + 1 < lanes:
                right.append((lid, lid + 1))
    return _road(xy, succ=succ, left=left, right=right, width=width)


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
    pc = cut_lanes(straight(), [0.0, 0.0, 0.0])  # segments [-100, 0] and [0, 100] meet at 0
    assert pc["lane"].tolist() == [0, 1, 2, 3, 4, 5]
    assert pc["points"].shape == (6, LANE_POINTS, 2)
    np.testing.assert_array_equal(pc["s0"], [68, 68, 68, 0, 0, 0])
    np.testing.assert_array_equal(pc["s1"], [100, 100, 100, 32, 32, 32])
    y = -3.5 * np.arange(3)
    np.testing.assert_allclose(pc["points"][:3, 0], np.stack([np.full(3, -32.0), y], 1))
    np.testing.assert_allclose(pc["points"][3:, -1], np.stack([np.full(3, 32.0), y], 1))
    np.testing.assert_allclose(pc["points"][0, :, 0], np.linspace(-32, 0, LANE_POINTS))
    np.testing.assert_array_equal(pc["width"], 3.5)


def test_cut_lanes_rotated_cut_points_and_spacing():
    road = straight()
    pose = np.array([80.0, -2.0, 0.3])
    pc = cut_lanes(road, pose)
    assert len(pc["lane"]) >= 3
    world = tile_to_world(pc["points"], pose)
    for k, lane in enumerate(pc["lane"]):
        j = lane % 3
        np.testing.assert_allclose(world[k, :, 1], -3.5 * j, atol=1e-9)  # on the centreline
        seg_x0 = -100.0 + 100.0 * (lane // 3)
        np.testing.assert_allclose(world[k, [0, -1], 0] - seg_x0, [pc["s0"][k], pc["s1"][k]])
        step = np.hypot(*np.diff(pc["points"][k], axis=0).T)
        np.testing.assert_allclose(step, (pc["s1"][k] - pc["s0"][k]) / (LANE_POINTS - 1))
        assert (np.diff(world[k, :, 0]) > 0).all()  # driving direction
        for end, s in ((0, pc["s0"][k]), (-1, pc["s1"][k])):
            on_edge = np.abs(pc["points"][k, end]).max() == H
            at_break = np.isclose(s % 100.0, 0.0) or np.isclose(s % 100.0, 100.0)
            assert on_edge or at_break  # every end is a boundary cut or a segment break
    # a segment break inside the tile (x = 100): lane 3k+j ends where 3(k+1)+j starts
    by_lane = dict(zip(pc["lane"].tolist(), range(len(pc["lane"]))))
    assert 3 in by_lane and 6 in by_lane
    np.testing.assert_allclose(world[by_lane[3], -1], world[by_lane[6], 0], atol=1e-9)


def test_cut_lanes_seam_pieces_meet_exactly():
    road = straight()
    origin, th = np.array([5.0, -1.0]), 0.3
    poses = [
        np.array([*tile_to_world(TILE_SIZE * np.array(c, float), [*origin, th]), th])
        for c in ((0, 0), (1, 0), (2, 0))
    ]
    pieces = [cut_lanes(road, p) for p in poses]
    n_seams = 0
    for a, b in ((0, 1), (1, 2)):
        wa = tile_to_world(pieces[a]["points"][:, -1], poses[a])
        wb = tile_to_world(pieces[b]["points"][:, 0], poses[b])
        for k in range(len(wa)):
            if pieces[a]["s1"][k] % 100.0 == 0.0 or np.abs(pieces[a]["points"][k, -1]).max() < H:
                continue  # ends at a segment break or inside
            gap = np.hypot(*(wb - wa[k]).T)
            same = pieces[b]["lane"] == pieces[a]["lane"][k]
            if same.any() and gap[same].min() < 1.0:
                assert gap[same].min() < 1e-9
                n_seams += 1
    assert n_seams >= 4


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
    poses = [np.array([30.0, 0.0, 0.0]), np.array([94.0, 0.0, 0.0])]
    pieces = [cut_lanes(road, p) for p in poses]
    g = lane_graph(pieces, road)
    nodes, idx, typ = g["nodes"], g["edges"]["index"], g["edges"]["type"]
    assert g["num_nodes"] == len(nodes["points"]) == len(pieces[0]["lane"]) + len(pieces[1]["lane"])
    assert nodes["tile"].tolist() == [0] * len(pieces[0]["lane"]) + [1] * len(pieces[1]["lane"])
    lane = np.concatenate([p["lane"] for p in pieces])
    edges = {(EDGE_TYPES[t], int(a), int(b)) for t, (a, b) in zip(typ, idx)}
    succ = {(a, b) for t, a, b in edges if t == "succ"}
    pred = {(a, b) for t, a, b in edges if t == "pred"}
    assert pred == {(b, a) for a, b in succ}
    # tile 0 (x in [-2, 62]): lanes 0-2 and 3-5; tile 1 ([62, 126]): lanes 3-5 and 6-8
    assert [lane[a] for a, b in sorted(succ)] == [0, 1, 2, 3, 4, 5, 3, 4, 5]
    for a, b in succ:
        assert lane[b] in (lane[a], lane[a] + 3)
    seam = {(a, b) for a, b in succ if nodes["tile"][a] != nodes["tile"][b]}
    assert {(lane[a], lane[b]) for a, b in seam} == {(3, 3), (4, 4), (5, 5)}
    left = {(a, b) for t, a, b in edges if t == "left"}
    right = {(a, b) for t, a, b in edges if t == "right"}
    assert right == {(b, a) for a, b in left} and len(left) == 2 * 4
    for a, b in left:
        assert nodes["tile"][a] == nodes["tile"][b] and lane[b] == lane[a] - 1
    # sorted by (type, src, dst), types in range
    assert np.all(np.diff(typ) >= 0) and typ.max() < len(EDGE_TYPES)


# --------------------------------------------------------------------- episodes
def _drive(n=301, off_road_after=None):
    times = np.arange(n) / 10.0
    agents = np.zeros((n, 4, 7))
    agents[..., 2] = 10.0
    agents[..., 3] = 1.0
    agents[..., 5:] = [4.5, 1.8]
    agents[:, 0, 0] = np.arange(n, dtype=float)  # ego: 10 m/s along lane 0
    agents[:, 1, :2] = np.stack([20.0 + np.arange(n), np.full(n, -3.5)], 1)
    agents[:, 2, :2] = [150.0, -7.0]  # parked from sample 90 on
    agents[:, 3, :2] = [-500.0, 0.0]  # never in a tile
    valid = np.ones((n, 4), bool)
    valid[:90, 2] = False
    if off_road_after is not None:
        m = off_road_after
        agents[m:, 0, 0] = agents[m - 1, 0, 0]
        agents[m:, 0, 1] = np.arange(1, n - m + 1) * 1.0
        agents[m:, 0, 3:5] = [0.0, 1.0]
    return times, agents, valid


def test_scene_episode_end_to_end(tmp_path):
    road = straight()
    times, agents, valid = _drive()
    ep = scene_episode(road, times, agents, valid, params=[1.5, 2.0])
    assert ep["t"].tolist() == [0.0, 3.2, 9.6, 16.0, 22.4, 28.8]
    assert ep["tile_cell"].tolist() == [[k, 0] for k in range(6)]
    np.testing.assert_allclose(ep["tile_pose"], [[64.0 * k, 0.0, 0.0] for k in range(6)])
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
