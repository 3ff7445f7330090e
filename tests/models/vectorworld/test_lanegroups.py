"""Roads as lane groups (simsci.models.vectorworld._lanegroups) and the ``"road"`` tokens."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from simsci.models.vectorworld._lanegroups import expand_groups, group_lanes
from simsci.models.vectorworld._tokens import (
    COUNT_SLICE,
    DIRECTIONS,
    GENERATOR_LAYOUT,
    IS_LANE,
    ego_lane_index,
    episode_tile,
    generation_pair,
    pair_steps,
    tile_tokens,
    tokens_to_tile,
)

ROAD = dataclasses.replace(GENERATOR_LAYOUT, lane_repr="road")
TINY = dict(width=16, depth=1, heads=2, freq_dim=8, mlp_ratio=2.0)
W = 3.5


def _chord(offset: float, angle: float) -> np.ndarray:
    """A straight lane (20, 2) heading ``angle`` at lateral ``offset`` (left of the line
    through the origin), cut to the 64 m tile."""
    u = np.array([math.cos(angle), math.sin(angle)])
    p0 = offset * np.array([-u[1], u[0]])
    lo, hi = -1e9, 1e9
    for axis in (0, 1):
        if abs(u[axis]) > 1e-12:
            a, b = sorted(((-32 - p0[axis]) / u[axis], (32 - p0[axis]) / u[axis]))
            lo, hi = max(lo, a), min(hi, b)
    return p0 + np.linspace(lo, hi, 20)[:, None] * u


def _tile(lanes) -> dict:
    n = len(lanes)
    return {
        "points": np.stack(lanes),
        "width": np.full(n, W),
        "speed_limit": np.full(n, 13.9),
        "kind": np.zeros(n, np.int64),
        "agents": np.zeros((0, 7)),
    }


def _two_way(angle=0.0, east=3, west=2) -> dict:
    lanes = [_chord(-(k + 0.5) * W, angle) for k in range(east)]  # rightmost first
    lanes += [_chord((k + 0.5) * W, angle)[::-1] for k in range(west)]
    order = [3, 0, 4, 2, 1][: east + west]  # shuffled: grouping must not rely on order
    return _tile([lanes[i] for i in order])


def _matched(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each lane of ``a``: max point distance to the nearest lane of ``b``."""
    d = np.sqrt(((a[:, None] - b[None]) ** 2).sum(-1)).max(-1)
    return d.min(1)


@pytest.mark.parametrize("angle", [0.0, math.radians(30.0), math.radians(-120.0)])
def test_a_two_way_road_is_one_group_and_expands_back(angle):
    tile = _two_way(angle)
    g = group_lanes(tile)
    assert len(g["points"]) == 1 and g["group"].tolist() == [[2, 0, 2]]
    ref = g["points"][0]
    # the reference: the rightmost lane of the direction with more lanes (3 against 2)
    assert np.abs(ref - _chord(-2.5 * W, angle)).max() < 1e-9
    back = expand_groups(g)
    assert len(back["points"]) == 5 and back["lane_group"].tolist() == [0] * 5
    assert np.array_equal(back["points"][0], ref)  # the reference is kept as it was
    assert _matched(tile["points"], back["points"]).max() < 1e-6
    # every lane end lies on the tile's edge, as the originals' do
    ends = back["points"][:, [0, -1]]
    assert np.allclose(np.abs(ends).max(-1), 32.0, atol=1e-9)


def test_a_curved_road_expands_to_its_lanes():
    r0, lanes = 60.0, []
    s = np.linspace(0.0, 1.0, 20)
    for k, sign in ((0, 1), (1, 1), (2, -1)):  # two lanes turning left, one oncoming
        r = r0 - (k + 0.5) * W  # left of a left turn: nearer the centre
        th = -math.pi / 2 + 0.8 * s
        lane = np.stack([r * np.cos(th), r0 + r * np.sin(th)], -1)
        lanes.append(lane if sign > 0 else lane[::-1])
    tile = _tile(lanes)
    g = group_lanes(tile)
    assert g["group"].tolist() == [[1, 0, 1]] and g["source"].tolist() == [0]
    back = expand_groups(g)
    assert _matched(tile["points"], back["points"]).max() < 0.05


def test_ego_lane_is_the_reference_and_odd_lanes_stay_alone():
    tile = _two_way(0.0)
    ego = ego_lane_index(tile["points"] + np.array([0.0, 1.75 * 2]), tile["width"])
    middle = int(np.argmin(np.abs(tile["points"][:, 0, 1] + 1.5 * W)))
    g = group_lanes(tile, ego=middle)
    assert ego >= 0 and g["source"].tolist() == [middle]
    assert g["group"].tolist() == [[1, 1, 2]]
    assert _matched(tile["points"], expand_groups(g)["points"]).max() < 1e-6
    # a crossing lane and a lane two widths off (a gap) are groups of their own
    extra = _tile([_chord(0.0, math.pi / 2), _chord(-4.5 * W, 0.0)])
    both = {k: np.concatenate([tile[k], extra[k]]) for k in ("points", "width", "speed_limit")}
    both.update(kind=np.zeros(7, np.int64), agents=np.zeros((0, 7)))
    g = group_lanes(both)
    assert len(g["points"]) == 3 and sorted(g["group"].sum(1).tolist()) == [0, 0, 4]
    assert len(expand_groups(g)["points"]) == 7


def test_bad_input_is_rejected():
    tile = _two_way()
    with pytest.raises(ValueError, match="ego must index"):
        group_lanes(tile, ego=9)
    with pytest.raises(ValueError, match="lane polylines"):
        group_lanes({**tile, "points": tile["points"][:, :5]})
    g = group_lanes(tile)
    with pytest.raises(ValueError, match="group must be"):
        expand_groups({**g, "group": np.zeros((3, 3), np.int64)})


@pytest.fixture(scope="module")
def scene(small_scene):
    return small_scene


def test_the_data_groups_and_expands_back(scene):
    lanes = groups = close = 0
    for ep in scene[1]:
        for k in range(len(ep["lanes"])):
            tile = episode_tile(ep, k)
            if len(tile["points"]) == 0:
                continue
            g = group_lanes(tile)
            back = expand_groups(g)
            lanes += len(tile["points"])
            groups += len(g["points"])
            close += int((_matched(tile["points"], back["points"]) < 0.3).sum())
    # the data's roads have several lanes; almost every lane is rebuilt from its group
    assert groups < 0.6 * lanes
    assert close >= 0.85 * lanes


def test_road_tokens_carry_the_counts(scene):
    _, episodes = scene
    ep = episodes[0]
    tile = group_lanes(episode_tile(ep, 1))
    lanes = {**tile, "edge_index": np.zeros((0, 2), np.int64), "edge_type": np.zeros(0, np.int64)}
    tok = tile_tokens(lanes, tile["agents"], np.ones(len(tile["agents"]), bool), ROAD)
    nl = tok["counts"]["lanes"]
    back = tokens_to_tile(tok["x"], layout=ROAD)
    assert np.array_equal(back["group"], tile["group"][tok["lane_index"]])
    assert (tok["x"][:nl, COUNT_SLICE.stop : 40] == 0).all()
    M, L = ROAD.tile_capacity, ROAD.max_lanes
    k = pair_steps(ep)[0][0]
    blk = generation_pair(ep, k, ROAD)
    assert blk["pinned"][M : M + L, COUNT_SLICE.stop : 40].all()
    assert not blk["pinned"][M : M + L, COUNT_SLICE].any()  # counts are generated
    assert blk["x"][M : M + L, COUNT_SLICE].max() > 0  # the truth has multi-lane roads
    # a first tile: slot 0 is the ego's lane, the reference of its group
    blk = generation_pair(ep, None, ROAD)
    assert blk["ego_slot"] and blk["x"][M, IS_LANE] == 1
    lane = tokens_to_tile(blk["x"][M : M + 1], layout=ROAD)
    truth = episode_tile(ep, 0)
    want = ego_lane_index(truth["points"], truth["width"])
    assert np.abs(lane["points"][0] - truth["points"][want]).max() < 0.25


def test_road_generator_trains_and_samples_lanes(scene, train_tiny, device):
    path, episodes = scene
    model = train_tiny(path, "road").to(device)
    ep = episodes[0]
    k = pair_steps(ep)[0][0]
    d = DIRECTIONS.index(tuple(int(v) for v in ep["tile_cell"][k + 1] - ep["tile_cell"][k]))
    ctx = episode_tile(ep, k)
    tiles, stats = model.generate(
        [ctx, None], [d, None], generator=torch.Generator().manual_seed(0)
    )
    cp = np.asarray(ctx["points"]) - 64.0 * np.asarray(DIRECTIONS[d])
    for t in tiles:  # lanes, not groups: the world drives on them
        n = len(t["points"])
        assert set(t) == {"points", "width", "speed_limit", "kind", "agents"}
        assert t["points"].shape == (n, 20, 2) and np.isfinite(t["points"]).all()
    for i, j, end in stats["seams"][0]:  # a reference's seam end is exact
        assert np.array_equal(
            tiles[0]["points"][j, 0 if end == 0 else -1], cp[i, -1 if end == 0 else 0]
        )


def test_sampling_pins_a_continued_road_to_the_context_road(scene):
    from simsci.models.vectorworld._outpaint import _force_lanes, _pin_neighbours
    from simsci.models.vectorworld._tokens import WIDTH, generation_block

    ep = scene[1][0]
    k = pair_steps(ep)[0][0]
    d = DIRECTIONS.index(tuple(int(v) for v in ep["tile_cell"][k + 1] - ep["tile_cell"][k]))
    blk = generation_block(episode_tile(ep, k), d, ROAD)
    M, S = ROAD.tile_capacity, blk["n_seam"]
    assert S > 0 and len(blk["seam_token"]) == S
    _force_lanes(blk, ROAD)
    src = np.asarray(blk["seam_token"])
    for cols in (slice(WIDTH, WIDTH + 1), COUNT_SLICE):
        assert blk["pinned"][M : M + S, cols].all()
        assert np.array_equal(blk["known"][M : M + S, cols], blk["x"][src, cols])
    assert not blk["pinned"][M + S : M + ROAD.max_lanes, COUNT_SLICE].any()
    # another neighbour's roads (here: the context again, seen from the other side)
    first = generation_block(None, None, ROAD)
    back = (d + 2) % 4  # the step from the new cell to the context's, reversed
    _pin_neighbours(first, [(episode_tile(ep, k), back)], ROAD)
    n = first["n_seam"]
    assert n > 0 and first["pinned"][M : M + n, COUNT_SLICE].all()
