"""Lane-graph completion of generated tiles (simsci.models.vectorworld._lanegraph)."""

import math

import numpy as np
import pytest

from simsci.models.vectorworld._lanegraph import complete_lanes, lane_curvature
from simsci.models.vectorworld._tokens import DIRECTIONS, _end_tangents, lane_successors


def _line(p0, p1, n=20):
    u = np.linspace(0.0, 1.0, n)[:, None]
    return np.asarray(p0, float) + u * (np.asarray(p1, float) - np.asarray(p0, float))


def _tile(*lanes, speed=20.0):
    pts = np.stack(lanes)
    n = len(pts)
    return {
        "points": pts,
        "width": np.full(n, 3.5),
        "speed_limit": np.full(n, speed),
        "kind": np.zeros(n, np.int64),
        "agents": np.zeros((0, 7)),
    }


def test_a_lane_that_stops_inside_the_tile_is_extended_to_its_edge():
    tile = _tile(_line((-32, 0), (0, 0)), _line((5, 8), (32, 8)))
    out, counts = complete_lanes(tile)
    assert counts["extended"] == 1 and counts["extended_back"] == 1 and counts["joined"] == 0
    assert out["points"].shape == (2, 20, 2)  # still the network's two lanes
    np.testing.assert_allclose(out["points"][0, 0], [-32, 0])
    np.testing.assert_allclose(out["points"][0, -1], [32, 0], atol=1e-12)
    np.testing.assert_allclose(out["points"][1, 0], [-32, 8], atol=1e-12)
    # evenly resampled along its new length, still straight
    step = np.hypot(*np.diff(out["points"][0], axis=0).T)
    np.testing.assert_allclose(step, 64 / 19, rtol=1e-9)
    assert tile["points"][0, -1, 0] == 0.0  # the input is not changed


def test_an_end_and_a_start_ahead_of_it_are_joined_smoothly():
    a, b = _line((-32, 0), (-5, 0)), _line((8, 2), (32, 2))
    out, counts = complete_lanes(_tile(a, b))
    assert counts["joined"] == 1 and counts["extended"] == counts["extended_back"] == 0
    joint = out["points"][2]
    np.testing.assert_array_equal(joint[0], a[-1])
    np.testing.assert_array_equal(joint[-1], b[0])
    t_in, t_out = _end_tangents(out["points"])
    assert t_in[2] @ t_out[0] > 0.995 and t_out[2] @ t_in[1] > 0.995  # G1 at both ends
    edges = {tuple(e) for e in lane_successors(out["points"]).tolist()}
    assert {(0, 2), (2, 1)} <= edges
    assert lane_curvature(out["points"][2:3])[0] < 0.13


def test_lanes_already_on_the_edges_are_left_exactly_as_they_are():
    tile = _tile(_line((-32, -2), (32, -2)), _line((32, 2), (-32, 2)))
    out, counts = complete_lanes(tile)
    np.testing.assert_array_equal(out["points"], tile["points"])
    np.testing.assert_array_equal(out["speed_limit"], tile["speed_limit"])
    assert not any(counts.values())


def test_at_a_shared_edge_an_extension_meets_the_neighbours_lane():
    """The east neighbour (direction (-1, 0): the step from its cell to the new one) has
    a lane entering it at y = 3; the new tile's lane stopping at the origin bends onto it
    exactly. With no lane to meet there it turns out through an open edge; with none
    open ahead the end stays (a neighbour is never changed) and is counted."""
    east = DIRECTIONS.index((-1, 0))
    neighbour = _tile(_line((-32, 3), (32, 3)))
    tile = _tile(_line((-32, 0), (0, 0)))
    out, counts = complete_lanes(tile, [(neighbour, east)])
    assert counts["extended"] == 1 and counts["dead_ends"] == 0
    np.testing.assert_array_equal(out["points"][0, -1], [32.0, 3.0])
    oncoming = _tile(_line((32, 3), (-32, 3)))  # it only leaves the neighbour westwards
    empty = {k: v[:0] for k, v in oncoming.items()}
    north, south = DIRECTIONS.index((0, -1)), DIRECTIONS.index((0, 1))
    boxed_in = [(oncoming, east), (empty, north), (empty, south)]
    out, counts = complete_lanes(tile, boxed_in)
    assert counts["dead_ends"] == 1 and counts["extended"] == 0
    np.testing.assert_array_equal(out["points"], tile["points"])
    # with the north edge open it turns out of the tile there, at right angles
    out, counts = complete_lanes(tile, boxed_in[:1] + boxed_in[2:])
    assert counts["extended"] == 1 and counts["dead_ends"] == 0
    end = out["points"][0, -1]
    assert end[1] == pytest.approx(32.0) and abs(end[0]) < 32.0
    t_in, t_out = _end_tangents(out["points"])
    assert t_out[0] @ np.array([0.0, 1.0]) > 0.99
    assert lane_curvature(out["points"])[0] <= 0.2 + 1e-3


def test_curvature_of_an_arc_and_the_speed_it_allows():
    r = 20.0
    phi = np.linspace(0.0, 1.2, 20)
    arc = np.stack([r * np.sin(phi) - 10, r * (1 - np.cos(phi)) - 10], -1)
    assert lane_curvature(arc[None])[0] == pytest.approx(1 / r, rel=1e-3)
    out, counts = complete_lanes(_tile(arc, speed=30.0), max_curvature=1.0, refit=False)
    assert counts["speed_capped"] == 1 and counts["refit"] == 0
    # the cap of the completed lane (the arc, extended straight at both ends)
    kappa = lane_curvature(out["points"])[0]
    assert out["speed_limit"][0] == pytest.approx(math.sqrt(3.0 / kappa), rel=1e-12)
    assert 0.8 * math.sqrt(3.0 * r) < out["speed_limit"][0] <= math.sqrt(3.0 * r) + 1e-9


def test_a_curled_end_extended_to_the_edge_is_refit_as_one_gentle_curve():
    # straight from the west edge for 30 m, then a 35 degree curl in its last 5 m: a
    # straight extension along the curl makes a corner; the refit spreads the turn
    turn = math.radians(35.0)
    head = _line((-32, 0), (-2, 0), 16)
    tail = (-2, 0) + np.outer(np.linspace(0, 5, 5)[1:], [math.cos(turn), math.sin(turn)])
    lane = np.concatenate([head, tail])
    plain, counts = complete_lanes(_tile(lane), refit=False)
    assert counts["extended"] == 1 and counts["refit"] == 0
    out, counts = complete_lanes(_tile(lane))
    assert counts["extended"] == 1 and counts["refit"] == 1
    kink, gentle = lane_curvature(plain["points"])[0], lane_curvature(out["points"])[0]
    assert gentle < 0.5 * kink
    # the same ends, exactly; the start's direction kept (the cubic leaves along +x: its
    # first 3.6 m chord turns 4 degrees, the plain lane's corner 35); within 4 m of it
    np.testing.assert_array_equal(out["points"][0, [0, -1]], plain["points"][0, [0, -1]])
    t_in, _ = _end_tangents(out["points"])
    assert t_in[0] @ np.array([1.0, 0.0]) > math.cos(math.radians(5.0))
    gap = np.hypot(*(out["points"][0][:, None] - plain["points"][0][None]).T).min(0)
    assert gap.max() <= 4.0
    # a gentler lane allows a higher speed
    assert out["speed_limit"][0] > plain["speed_limit"][0]


def _leaves_through_an_edge(p, t, margin=2.0):
    side = np.sign(p) * (np.abs(p) == np.abs(p).max())  # the edge it is nearest
    return abs(np.abs(p).max() - 32.0) <= 0.5 and t @ side >= 0.5 and np.abs(p).min() <= 30


@pytest.mark.parametrize(
    "lane",
    [
        _line((-32, 29.8), (-16, 32.0)),  # a seam stub grazing the top edge
        _line((-32, 0.0), (31.6, 31.7)),  # a lane leaving through the corner
    ],
    ids=["along-an-edge", "into-a-corner"],
)
def test_an_end_on_an_edge_that_leads_nowhere_is_completed(lane):
    # neither leaves the tile through an edge: a neighbour would not continue it
    out, counts = complete_lanes(_tile(lane))
    assert counts["dead_ends"] == 0
    assert counts["extended"] + counts["rerouted"] + counts["joined"] >= 1
    _, t_out = _end_tangents(out["points"])
    assert _leaves_through_an_edge(out["points"][0, -1], t_out[0])
    np.testing.assert_array_equal(out["points"][0, 0], lane[0])  # its start is kept


def test_an_end_that_would_run_beside_a_lane_merges_into_it():
    from simsci.models.vectorworld._evaluate import _close_pairs

    road = _line((-32, 0), (32, 0))
    joining = _line((-32, 4.0), (-10, 3.0))  # heading 2.6 degrees towards the road
    # straight on to the east edge it would run within 2.5 m of the road for ~30 m
    beside, counts = complete_lanes(_tile(road, joining), merge_beside=False)
    assert counts["merged"] == 0 and _close_pairs(beside["points"]) == 1
    out, counts = complete_lanes(_tile(road, joining))
    assert counts["merged"] == 1 and len(out["points"]) == 3  # the road split where it joins
    assert _close_pairs(out["points"]) == 0
    end = out["points"][1, -1]
    assert any(np.hypot(*(end - p[0])) < 1e-9 for p in out["points"][[0, 2]])  # on the road
    np.testing.assert_array_equal(out["points"][1, 0], joining[0])


def test_an_end_turns_away_rather_than_run_beside_an_oncoming_lane():
    """A lane stopping at the origin heads east straight along a westbound lane 1.2 m
    away (as completed tiles' oncoming near-duplicates do): it cannot merge into a lane
    going the other way, so it turns out through an open edge instead of running on
    beside it, where vehicles on the two would meet head on."""
    from simsci.driving import arc_length
    from simsci.models.vectorworld._lanegraph import points_near
    from simsci.models.vectorworld._lanegroups import _resample

    oncoming = _line((32, 1.2), (-32, 1.2))
    stopping = _line((-32, 0), (0, 0))

    def beside_m(lane):  # metres of its completed part (x > 0) within 2.5 m of oncoming
        dense = _resample(lane, int(arc_length(lane)[-1]) + 1)  # 1 m apart
        return points_near(dense[dense[:, 0] > 0.5], _resample(oncoming, 200), 2.5)

    beside, counts = complete_lanes(_tile(oncoming, stopping), avoid_oncoming=False)
    assert counts["turned_away"] == 0
    np.testing.assert_allclose(beside["points"][1, -1], [32, 0], atol=1e-9)  # east edge
    assert beside_m(beside["points"][1]) >= 30
    out, counts = complete_lanes(_tile(oncoming, stopping))
    assert counts["turned_away"] == 1 and counts["merged"] == 0 and counts["dead_ends"] == 0
    assert beside_m(out["points"][1]) < 10
    np.testing.assert_array_equal(out["points"][1, 0], stopping[0])
    end = out["points"][1, -1]
    assert abs(abs(end[0]) - 32) < 1e-6 or abs(abs(end[1]) - 32) < 1e-6  # out of the tile
    # a lane going the same way is merged into, not turned away from (as before)
    _, counts = complete_lanes(_tile(oncoming[::-1].copy(), stopping))
    assert counts["turned_away"] == 0


def test_a_kinked_lane_is_smoothed_between_its_ends():
    lane = _line((-32, 0), (32, 0))
    lane[10, 1] = 3.0  # a spike: ~0.5 1/m
    out, counts = complete_lanes(_tile(lane))
    assert counts["smoothed"] == 1
    np.testing.assert_array_equal(out["points"][0, [0, -1]], lane[[0, -1]])
    assert lane_curvature(out["points"])[0] < 0.01  # from ~0.5


def test_an_empty_tile_is_returned_as_it_is():
    tile = {k: v[:0] for k, v in _tile(_line((0, 0), (1, 0))).items()}
    out, counts = complete_lanes(tile)
    assert out["points"].shape == (0, 20, 2) and not any(counts.values())


def test_a_boxed_in_end_merges_into_a_lane_of_its_tile_which_is_split_there():
    """Neighbours east, north and south (no lane to meet, no open edge ahead): the lane
    stopping at (-10, 6) merges into the through lane at y = 0, which becomes two lanes
    meeting there; every end is linked."""
    east, north, south = (DIRECTIONS.index(d) for d in ((-1, 0), (0, -1), (0, 1)))
    empty = {k: v[:0] for k, v in _tile(_line((0, 0), (1, 0))).items()}
    boxed_in = [(empty, east), (empty, north), (empty, south)]
    through, stub = _line((-32, 0), (32, 0)), _line((-32, 6), (-10, 6))
    out, counts = complete_lanes(_tile(through, stub), boxed_in)
    assert counts["merged"] == 1 and counts["extended"] == 1 and counts["dead_ends"] == 0
    pts = out["points"]
    assert pts.shape == (3, 20, 2) and len(out["speed_limit"]) == 3
    np.testing.assert_array_equal(pts[0, 0], through[0])  # the head keeps the start
    np.testing.assert_array_equal(pts[2, -1], through[-1])  # the tail the end
    np.testing.assert_array_equal(pts[1, -1], pts[2, 0])  # the merge point
    np.testing.assert_array_equal(pts[0, -1], pts[2, 0])
    edges = {tuple(e) for e in lane_successors(pts).tolist()}
    assert {(0, 2), (1, 2)} <= edges
    assert lane_curvature(pts[1:2])[0] <= 0.2 + 1e-3


def test_a_straightened_lane_at_a_corner_does_not_end_on_a_neighbours_edge():
    """A lane continuing the south neighbour's lane from near the south-east corner, too
    sharp to keep (a loop), is straightened along that lane (45 degrees, north-east).
    With the east cell empty the stub crosses the corner to exactly the east edge, where
    the next tile will continue it; with a tile there already (its lane elsewhere on the
    edge) it must not end on that edge, where nothing continues it."""
    south, east = DIRECTIONS.index((0, 1)), DIRECTIONS.index((-1, 0))
    below = _tile(_line((9.0, 12.0), (29.0, 32.0)))  # ends on its top edge heading 45 deg
    phi = np.linspace(0.0, 1.6 * math.pi, 20)[:, None]  # a loop of radius 3 from (29, -32)
    c = np.array([29.0, -32.0]) + 3.0 * np.array([-1.0, 1.0]) / math.sqrt(2.0)
    loop = c + 3.0 * np.hstack([np.cos(phi - 0.75 * math.pi), np.sin(phi - 0.75 * math.pi)])
    loop[0] = [29.0, -32.0]
    tile = _tile(loop)
    out, counts = complete_lanes(tile, [(below, south)])
    assert counts["straightened"] == 1
    np.testing.assert_array_equal(out["points"][0, 0], [29.0, -32.0])
    np.testing.assert_allclose(out["points"][0, -1], [32.0, -29.0], atol=1e-9)
    beside = _tile(_line((-32.0, 20.0), (32.0, 20.0)))  # its lane starts at y = 20 only
    out, counts = complete_lanes(tile, [(below, south), (beside, east)])
    assert counts["straightened"] == 1
    ends = out["points"][:, -1]
    on_east = np.abs(ends[:, 0] - 32.0) <= 0.5
    assert not (on_east & (np.abs(ends[:, 1] - 20.0) > 1e-6)).any(), ends
