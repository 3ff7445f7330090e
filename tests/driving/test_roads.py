"""The procedural road networks (simsci/driving/_roads.py): the contract checks,
determinism, the route, links and neighbours, every element type, curvature and spacing,
no self-overlap, conflicts, storage round trips, bad input and edited networks."""

import dataclasses
import io
import math
import time

import h5py
import numpy as np
import pytest
from scipy.spatial import cKDTree

from simsci.driving import _geometry as geo
from simsci.driving._roads import (
    LANE_ENDS,
    LANE_KINDS,
    RoadConfig,
    RoadNetwork,
    make_road,
    straight_road,
)

ROAD, JUNCTION, RING, RAMP = (LANE_KINDS.index(k) for k in LANE_KINDS)
CONTINUES, EXIT, LANE_END = (LANE_ENDS.index(e) for e in LANE_ENDS)
SEEDS = range(6)


@pytest.fixture(scope="module")
def nets():
    return {s: make_road(s, 4000.0) for s in SEEDS}


def _graph(net):
    """Undirected pred/succ adjacency."""
    adj = [set() for _ in range(net.num_lanes)]
    for a in range(net.num_lanes):
        for b in net.successors(a).tolist():
            adj[a].add(b)
            adj[b].add(a)
    return adj


def _within(adj, a, hops):
    seen, front = {a}, {a}
    for _ in range(hops):
        front = {c for f in front for c in adj[f]} - seen
        seen |= front
    return seen


def test_validate_passes_on_many_seeds_lengths_and_options():
    for seed, length, opts in [
        (10, 300.0, {}),
        (11, 2000.0, {}),
        (12, 20000.0, {}),
        (13, 3000.0, {"oncoming": False}),
        (14, 3000.0, {"lanes": (3, 3), "p_merge": 0.2, "p_split": 0.2}),
        (15, 3000.0, {"lanes": 1, "lane_width": 3.0, "p_roundabout": 0.3}),
    ]:
        net = make_road(seed, length, **opts)
        assert net.validate() is net
        assert net.route_s()[-1] >= length
        assert net.points.dtype == np.float64 and net.route.dtype == np.int64
        assert net.pred.shape == net.succ.shape == (net.num_lanes, 4)


def test_deterministic_per_seed_and_varied_across_seeds(nets):
    a, b = make_road(3, 4000.0).to_arrays(), nets[3].to_arrays()
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    starts = {tuple(np.round(n.route_polyline()[-1], 3)) for n in nets.values()}
    sizes = {n.num_lanes for n in nets.values()}
    assert len(starts) == len(nets) and len(sizes) > 1


def test_route_is_a_connected_successor_chain_of_the_requested_length(nets):
    for length in (500.0, 20000.0):
        net = make_road(1, length)
        assert net.route_s()[-1] >= length
    for net in nets.values():
        r = net.route
        for a, b in zip(r[:-1], r[1:]):
            assert b in net.successors(a)
        assert len(net.predecessors(r[0])) == 0 and net.end[r[-1]] == EXIT
        poly, s = net.route_polyline(), net.route_s()
        assert poly.shape == (len(s), 2) and s[0] == 0.0 and np.all(np.diff(s) > 0)
        assert np.hypot(*np.diff(poly, axis=0).T).max() <= 1.0 + 1e-9
        # the main road's start lanes are entries, its end lanes exits
        starts = np.hypot(*(net.points[:, 0] - poly[0]).T) < 12
        ends = np.hypot(*(net.points[:, 0] - poly[-1]).T) < 12
        assert all(len(net.predecessors(lane)) == 0 for lane in np.flatnonzero(starts))
        last = net.points[np.arange(net.num_lanes), net.num_points - 1]
        at_end = np.hypot(*(last - poly[-1]).T) < 12
        assert all(net.end[lane] == EXIT for lane in np.flatnonzero(at_end))
        assert np.any(ends)


def test_links_symmetric_and_every_lane_between_an_entry_and_an_end(nets):
    for net in nets.values():
        for a in range(net.num_lanes):
            for b in net.successors(a):
                assert a in net.predecessors(b)
            for b in net.predecessors(a):
                assert a in net.successors(b)
            assert (net.end[a] == CONTINUES) == (len(net.successors(a)) > 0)
        # forward reachability from entries covers every lane; every lane reaches an end
        entries = [a for a in range(net.num_lanes) if len(net.predecessors(a)) == 0]
        seen, stack = set(entries), list(entries)
        while stack:
            for b in net.successors(stack.pop()).tolist():
                if b not in seen:
                    seen.add(b)
                    stack.append(b)
        assert len(seen) == net.num_lanes
        ends = [a for a in range(net.num_lanes) if net.end[a] != CONTINUES]
        seen, stack = set(ends), list(ends)
        while stack:
            for b in net.predecessors(stack.pop()).tolist():
                if b not in seen:
                    seen.add(b)
                    stack.append(b)
        assert len(seen) == net.num_lanes


def test_neighbours_symmetric_one_width_apart_same_heading_on_the_correct_side(nets):
    count = 0
    for net in nets.values():
        for a in range(net.num_lanes):
            b = net.right[a]
            if b < 0:
                continue
            count += 1
            assert net.left[b] == a
            pa, pb = net.lane_polyline(a), net.lane_polyline(b)
            assert abs(net.length[a] - net.length[b]) < 0.1 * net.length[a]
            t = np.linspace(0.0, 1.0, 11)
            gap = np.hypot(
                *(geo.point_at(pa, t * net.length[a]) - geo.point_at(pb, t * net.length[b])).T
            )
            np.testing.assert_allclose(gap, net.width[a], rtol=0.03)
            ha, hb = geo.headings(pa)[[0, -1]], geo.headings(pb)[[0, -1]]
            assert np.abs(geo.wrap_angle(ha - hb)).max() < 0.02
            d = pa[1] - pa[0]
            assert d[0] * (pb[0, 1] - pa[0, 1]) - d[1] * (pb[0, 0] - pa[0, 0]) < 0  # right
        for a in np.flatnonzero(net.left >= 0):
            assert net.right[net.left[a]] == a
    assert count > 100


def _elements(net):
    """Counts of the element types in one network."""
    e = {}
    kinds = np.bincount(net.kind, minlength=4)
    e.update({k: int(kinds[i]) for i, k in enumerate(LANE_KINDS)})
    e["exit"] = int(np.sum(net.end == EXIT))
    e["lane_end"] = int(np.sum((net.end == LANE_END) & (net.kind == ROAD)))
    e["on_ramp"] = sum(1 for a in np.flatnonzero(net.kind == RAMP) if len(net.predecessors(a)) == 0)
    e["off_ramp"] = sum(1 for a in np.flatnonzero(net.kind == RAMP) if net.end[a] == EXIT)
    # a lane add: a road lane splitting into two road lanes, no neighbour while tapering
    e["lane_add"] = sum(
        1
        for a in range(net.num_lanes)
        if net.kind[a] == ROAD
        and len(net.successors(a)) == 2
        and all(net.kind[b] == ROAD for b in net.successors(a))
    )
    merges = sum(
        1
        for k in range(len(net.conflict_lanes))
        if np.allclose(net.conflict_s[k], net.length[net.conflict_lanes[k]])
    )
    e["merge_conflicts"] = merges
    e["crossing_conflicts"] = len(net.conflict_lanes) - merges
    # side-arm entries: road lanes without predecessors leading into connectors
    arms = [
        a
        for a in range(net.num_lanes)
        if net.kind[a] == ROAD
        and len(net.predecessors(a)) == 0
        and all(net.kind[b] == JUNCTION for b in net.successors(a))
        and len(net.successors(a)) > 0
    ]
    ring_arms = [
        a
        for a in arms
        if any(net.kind[c] == RING for b in net.successors(a) for c in net.successors(b))
    ]
    box_arms = [a for a in arms if a not in ring_arms]
    ends = np.array([net.lane_polyline(a)[-1] for a in box_arms]).reshape(-1, 2)
    groups = []  # arms of one intersection end within a box of half size < 20 m
    for p in ends:
        for g in groups:
            if np.hypot(*(g[0] - p)) < 40:
                g.append(p)
                break
        else:
            groups.append([p])
    e["t_junction"] = sum(1 for g in groups if len(g) == 1)
    e["four_way"] = sum(1 for g in groups if len(g) == 2)
    # roundabouts: count entry connectors per ring (connected ring components)
    ring = set(np.flatnonzero(net.kind == RING).tolist())
    arms_per_ring = []
    while ring:
        comp, stack = set(), [ring.pop()]
        while stack:
            a = stack.pop()
            comp.add(a)
            for b in (*net.successors(a).tolist(), *net.predecessors(a).tolist()):
                if b in ring:
                    ring.discard(b)
                    stack.append(b)
        entries = {p for a in comp for p in net.predecessors(a).tolist() if net.kind[p] == JUNCTION}
        arms_per_ring.append(len({net.predecessors(p)[0] for p in entries}))
    e["ring_arms"] = sorted(set(arms_per_ring))
    return e


def test_every_element_type_appears_across_a_handful_of_seeds(nets):
    total = {}
    for net in nets.values():
        for k, v in _elements(net).items():
            total[k] = total.get(k, 0) + v if not isinstance(v, list) else total.get(k, []) + v
    for key in (
        "road",
        "junction",
        "roundabout",
        "ramp",
        "exit",
        "lane_end",
        "on_ramp",
        "off_ramp",
        "lane_add",
        "merge_conflicts",
        "crossing_conflicts",
        "t_junction",
        "four_way",
    ):
        assert total[key] > 0, (key, total)
    assert set(total["ring_arms"]) <= {3, 4} and len(total["ring_arms"]) >= 2  # 3 and 4


def test_curvature_spacing_and_segment_lengths(nets):
    for net in nets.values():
        for a in range(net.num_lanes):
            p = net.lane_polyline(a)
            chord = np.hypot(*np.diff(p, axis=0).T)
            assert chord.max() <= 1.0 + 1e-9
            assert chord.max() / chord.min() < 1.02  # uniform spacing
            assert 5.0 <= net.length[a] <= 100.0 + 1e-9
            if len(p) > 2:
                assert geo.curvature(p).max() <= 0.2
            for b in net.successors(a):  # across the joint too
                q = net.lane_polyline(b)
                assert geo.curvature(np.stack([p[-2], p[-1], q[1]]))[0] <= 0.2
                assert abs(geo.wrap_angle(geo.headings(p)[-1] - geo.headings(q)[0])) < 0.2


def test_main_road_heading_stays_within_80_degrees(nets):
    for net in nets.values():
        h0 = geo.headings(net.lane_polyline(net.route[0]))[0]
        for a in net.route:
            if net.kind[a] == ROAD:
                dev = np.abs(geo.wrap_angle(geo.headings(net.lane_polyline(a)) - h0))
                assert np.degrees(dev).max() <= 80.0


def test_unconnected_lanes_of_different_pieces_do_not_overlap(nets):
    for net in (*nets.values(), make_road(7, 3000.0, oncoming=False)):
        pts = np.concatenate([net.lane_polyline(a) for a in range(net.num_lanes)])
        ids = np.repeat(np.arange(net.num_lanes), net.num_points)
        close = cKDTree(pts).query_pairs(0.8 * net.width.min(), output_type="ndarray")
        pairs = np.unique(np.sort(ids[close], axis=1), axis=0)
        pairs = pairs[pairs[:, 0] != pairs[:, 1]]
        adj = _graph(net)
        conflicts = {tuple(sorted(c)) for c in net.conflict_lanes.tolist()}
        bad = [
            (a, b)
            for a, b in pairs.tolist()
            if b not in _within(adj, a, 2) and (a, b) not in conflicts
        ]
        assert bad == []


def test_conflicts_lie_on_both_lanes_and_are_ordered_by_right_of_way(nets):
    assert sum(len(net.conflict_lanes) for net in nets.values()) > 50
    for net in nets.values():
        for k, (a, b) in enumerate(net.conflict_lanes.tolist()):
            for lane, s in ((a, net.conflict_s[k, 0]), (b, net.conflict_s[k, 1])):
                p = geo.point_at(net.lane_polyline(lane), s)
                assert np.hypot(*(p - net.conflict_xy[k])) < 1e-6
            assert net.priority[a] >= net.priority[b]
            assert net.kind[a] in (JUNCTION, RING) and net.kind[b] in (JUNCTION, RING)
            shared_pred = set(net.predecessors(a).tolist()) & set(net.predecessors(b).tolist())
            assert not shared_pred  # diverging lanes are not conflicts
            if np.allclose(net.conflict_s[k], net.length[[a, b]]):  # a merge
                assert set(net.successors(a).tolist()) & set(net.successors(b).tolist())
            if net.kind[b] == JUNCTION and net.kind[a] == RING:
                assert net.priority[a] == 2 and net.priority[b] == 1  # ring over entry
        # every roundabout entry conflicts with the upstream ring arc
        for c in np.flatnonzero(net.kind == JUNCTION):
            nxt = net.successors(c)
            if len(nxt) and net.kind[nxt[0]] == RING:
                up = [p for p in net.predecessors(nxt[0]) if net.kind[p] == RING]
                assert [up[0], c] in net.conflict_lanes.tolist()


def test_main_left_turn_yields_to_oncoming_straight():
    net = make_road(0, 2000.0, p_intersection=0.5, p_roundabout=0.0, p_curve=0.1)
    found = 0
    for k, (a, b) in enumerate(net.conflict_lanes.tolist()):
        if net.priority[a] == net.priority[b] == 2 and net.conflict_s[k, 0] < net.length[a] - 1:
            ha = geo.headings(net.lane_polyline(a))
            hb = geo.headings(net.lane_polyline(b))
            turn_a, turn_b = geo.wrap_angle(ha[-1] - ha[0]), geo.wrap_angle(hb[-1] - hb[0])
            assert abs(turn_a) < 1e-6 or turn_b > 1.0  # a straight; b turns left
            found += 1
    assert found > 0


def test_speed_limits_follow_the_road_and_curvature(nets):
    cfg = RoadConfig()
    lo, hi = cfg.urban_speed[0], cfg.highway_speed[1]
    for net in nets.values():
        road = net.kind == ROAD
        assert np.all((net.speed_limit[road] >= lo - 1e-9) & (net.speed_limit[road] <= hi))
        for a in np.flatnonzero(~road):
            kmax = geo.curvature(net.lane_polyline(a)).max()
            assert net.speed_limit[a] <= math.sqrt(2.0 / kmax) * 1.01
            assert net.speed_limit[a] <= hi
        ring = net.kind == RING
        assert np.all(net.priority[ring] == 2)


def test_storage_round_trips_exactly(nets, tmp_path):
    net = nets[2]

    def same(other):
        assert isinstance(other, RoadNetwork)
        for k, v in net.to_arrays().items():
            np.testing.assert_array_equal(other.to_arrays()[k], v)
        assert other.seed == net.seed and other.config == net.config
        for f in dataclasses.fields(RoadNetwork):
            if f.name not in ("seed", "config"):
                x = getattr(other, f.name)
                assert x.dtype == getattr(net, f.name).dtype
                np.testing.assert_array_equal(x, getattr(net, f.name))

    same(RoadNetwork.from_arrays(net.to_arrays()))
    buf = io.BytesIO()
    np.savez(buf, **net.to_arrays())
    buf.seek(0)
    with np.load(buf) as z:
        same(RoadNetwork.from_arrays(dict(z)))
    with h5py.File(tmp_path / "road.h5", "w") as f:
        for k, v in net.to_arrays().items():
            f[k] = v
    with h5py.File(tmp_path / "road.h5", "r") as f:
        same(RoadNetwork.from_arrays(f))
    with pytest.raises(ValueError, match="missing"):
        RoadNetwork.from_arrays({"points": net.points})


def test_bad_config_is_rejected_with_a_clear_message():
    with pytest.raises(ValueError, match="length must be a route length"):
        make_road(0, -5.0)
    with pytest.raises(ValueError, match="lanes must satisfy 1 <= low"):
        make_road(0, 1000.0, lanes=0)
    with pytest.raises(ValueError, match="lanes must satisfy"):
        make_road(0, 1000.0, lanes=(3, 2))
    with pytest.raises(TypeError, match="unknown option 'lanse'; did you mean 'lanes'"):
        make_road(0, 1000.0, lanse=2)
    with pytest.raises(TypeError, match="unexpected keyword"):
        RoadConfig(colour="red")
    with pytest.raises(ValueError, match="sum to at most 1"):
        make_road(0, 1000.0, p_intersection=0.9, p_curve=0.5)
    with pytest.raises(ValueError, match="lane_width must be"):
        RoadConfig(lane_width=0.0)
    with pytest.raises(TypeError, match="oncoming must be a bool"):
        RoadConfig(oncoming="yes")
    with pytest.raises(TypeError, match="seed must be an int"):
        make_road(1.5)
    with pytest.raises(ValueError, match="lanes must be an int"):
        straight_road(lanes=0)
    cfg = RoadConfig(length=1500.0, lanes=2)
    assert cfg.lanes == (2, 2)
    net = make_road(4, config=cfg)
    assert net.config["length"] == 1500.0 and net.route_s()[-1] >= 1500.0
    assert make_road(4, 800.0, config=cfg).config["length"] == 800.0


def test_validate_catches_edited_networks(nets):
    net = nets[1]

    def edited(**changes):
        return dataclasses.replace(net, **changes)

    succ = net.succ.copy()
    succ[net.route[0], 0] = net.num_lanes + 5
    with pytest.raises(ValueError, match="dangling lane id"):
        edited(succ=succ).validate()
    pts = net.points.copy()
    pts[3, 2, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        edited(points=pts).validate()
    pred = net.pred.copy()
    lane = int(net.route[1])
    pred[lane] = -1
    with pytest.raises(ValueError, match="symmetric"):
        edited(pred=pred).validate()
    right = net.right.copy()
    a = int(np.flatnonzero(right >= 0)[0])
    right[a] = -1
    with pytest.raises(ValueError, match="neighbours must be symmetric"):
        edited(right=right).validate()
    with pytest.raises(ValueError, match="route goes from lane"):
        edited(route=net.route[::-1].copy()).validate()
    pts = net.points.copy()
    pts[net.route[1], 0] += 0.5
    with pytest.raises(ValueError, match="must start where its predecessor ends|spacing|length"):
        edited(points=pts).validate()
    with pytest.raises(ValueError, match="must be a numpy int64"):
        edited(kind=net.kind.astype(np.int32)).validate()


def test_straight_road_is_a_simple_deterministic_network():
    net = straight_road(length=250.0, lanes=2, oncoming=True)
    net.validate()
    assert net.num_lanes == 3 * 4  # 3 pieces of 83.3 m, 2 + 2 lanes
    np.testing.assert_allclose(net.length, 250.0 / 3)
    assert net.route_s()[-1] == pytest.approx(250.0)
    np.testing.assert_allclose(net.route_polyline()[:, 1], -1.75)
    assert np.all(net.kind == ROAD) and len(net.conflict_lanes) == 0
    fwd = np.flatnonzero(net.points[:, 0, 1] < 0)
    onc = np.flatnonzero(net.points[:, 0, 1] > 0)
    assert np.all(np.diff(net.points[fwd, :2, 0], axis=1) > 0)
    assert np.all(np.diff(net.points[onc, :2, 0], axis=1) < 0)
    assert sorted(np.unique(net.points[fwd, 0, 1]).tolist()) == [-5.25, -1.75]
    inner = fwd[net.points[fwd, 0, 1] == -1.75]
    np.testing.assert_array_equal(net.points[net.right[inner], 0, 1], -5.25)
    assert np.all(net.left[inner] == -1) and np.all(net.left[net.right[inner]] == inner)
    assert (
        np.sum(net.end == EXIT) == 4
        and np.sum([len(net.predecessors(a)) == 0 for a in range(net.num_lanes)]) == 4
    )
    assert net.bounds() == pytest.approx((0.0, -5.25, 250.0, 5.25))
    one = straight_road(length=50.0, lanes=1, oncoming=False)
    assert one.num_lanes == 1 and one.route.tolist() == [0] and one.end[0] == EXIT
    np.testing.assert_array_equal(one.lane_polyline(0)[:, 0], np.linspace(0, 50, 51))


def test_generation_is_fast():
    make_road(0, 1000.0)  # warm up
    t = time.perf_counter()
    make_road(21, 5000.0)
    assert time.perf_counter() - t < 1.0


def test_overlap_check_rejects_and_rolls_back(monkeypatch):
    from simsci.driving import _roads

    b = _roads._Builder(3.5)
    st = b.plain(_roads._State(0.0, 0.0, 0.0, [-1], [-1]), 200.0, 0.0, 20.0, 20.0)
    snap, start = b.snapshot(), len(b.pts)
    across = np.stack([np.full(51, 100.0), np.linspace(-25.0, 25.0, 51)], axis=1)
    b.add_lane(across, 10.0, JUNCTION, 1)  # crosses both directions
    assert not b.clear(start)
    b.rollback(snap)
    b.add_lane(across + [0.0, 40.0], 10.0, JUNCTION, 1)  # well clear of the road
    assert b.clear(start)
    b.rollback(snap)
    assert len(b.pts) == start and b.snapshot() == snap and len(st.fwd) == 1
    # a generator whose junctions all "overlap" falls back to plain road and stays valid
    orig = _roads._Builder.clear

    def no_junctions(self, start):
        return orig(self, start) and all(k != JUNCTION for k in self.kind[start:])

    monkeypatch.setattr(_roads._Builder, "clear", no_junctions)
    net = make_road(0, 3000.0, p_intersection=0.3, p_roundabout=0.3, p_curve=0.1)
    net.validate()
    assert not np.any(net.kind == JUNCTION) and not np.any(net.kind == RING)
    assert net.route_s()[-1] >= 3000.0
