"""Counts as conditions: a tile generator whose layout pins every target slot's flag
(``count_pins``), to the truth's in training and to counts drawn from its count model at
sampling (simsci.models.vectorworld._outpaint, "Counts as conditions")."""

import dataclasses

import numpy as np
import pytest
import torch

from simsci.models.vectorworld._outpaint import COUNT_BINS, TileGenerator, TileSamples
from simsci.models.vectorworld._tokens import (
    DIRECTIONS,
    GENERATOR_LAYOUT,
    IS_AGENT,
    IS_LANE,
    episode_tile,
    generation_block,
    generation_pair,
    pair_steps,
)

COUNTED = dataclasses.replace(GENERATOR_LAYOUT, count_pins=True)
L, A = COUNTED.max_lanes, COUNTED.max_agents
M = L + A


@pytest.fixture(scope="module")
def scene(small_scene):
    return small_scene


def _pair(ep):
    k = pair_steps(ep)[0][0]
    d = DIRECTIONS.index(tuple(int(v) for v in ep["tile_cell"][k + 1] - ep["tile_cell"][k]))
    return k, d


def test_training_blocks_pin_the_true_flags(scene):
    ep = scene[1][0]
    k, _ = _pair(ep)
    plain, counted = generation_pair(ep, k, GENERATOR_LAYOUT), generation_pair(ep, k, COUNTED)
    assert np.array_equal(plain["x"], counted["x"])  # the same tokens, more of them pinned
    assert (
        counted["pinned"][M : M + L, IS_LANE].all() and counted["pinned"][M + L :, IS_AGENT].all()
    )
    assert not plain["pinned"][M + plain["n_seam"] + 1 : M + L, IS_LANE].any()
    # the free lanes follow the seam slots, the agents fill the first agent slots
    S, free = counted["n_seam"], counted["matching"]["free"]
    assert counted["x"][M + S : M + S + free, IS_LANE].min() == 1.0
    assert counted["x"][M + S + free : M + L, IS_LANE].max(initial=0.0) == 0.0
    n_agents = counted["counts"]["target"]["agents"]
    assert counted["x"][M + L : M + L + n_agents, IS_AGENT].min(initial=1.0) == 1.0
    assert counted["x"][M + L + n_agents :, IS_AGENT].max(initial=0.0) == 0.0


def test_count_table_counts_every_block_once(scene):
    path, episodes = scene
    samples = TileSamples(path, layout=COUNTED)
    table = samples.count_table()
    assert table.shape == (2, COUNT_BINS, L + 1, A + 1)
    first_tiles = sum(len(ep["lanes"][0]["points"]) > 0 for ep in episodes)
    assert table.sum() == samples.n_pairs + first_tiles
    assert table[1].sum() == first_tiles and table[1, 1:].sum() == 0  # no seams in a first tile
    assert table[..., 1:, :].sum() > 0 and table[..., 1:].sum() > 0  # free lanes and agents


def test_set_count_table_checks_its_input():
    model = TileGenerator(layout=COUNTED.to_dict(), width=16, depth=1, heads=2, freq_dim=8)
    with pytest.raises(ValueError, match="shape"):
        model.set_count_table(np.ones((2, COUNT_BINS, L, A)))
    with pytest.raises(ValueError, match="empty"):
        model.set_count_table(np.zeros((2, COUNT_BINS, L + 1, A + 1)))
    with pytest.raises(ValueError, match="count_pins"):
        TileGenerator(width=16, depth=1, heads=2, freq_dim=8).set_count_table(np.ones(3))


def test_counted_generator_draws_the_counts_it_is_given(scene, train_tiny, device):
    path, episodes = scene
    model = train_tiny(path, "points", count_pins=True).to(device)
    assert model.count_table.sum() > 0  # the training data's counts, saved and loaded
    table = np.zeros((2, COUNT_BINS, L + 1, A + 1))
    table[:, :, 2, 3] = 1.0  # every tile: 2 free lanes and 3 vehicles
    model.set_count_table(table)
    ep = episodes[0]
    k, d = _pair(ep)
    ctx = episode_tile(ep, k)
    gens = [torch.Generator(device).manual_seed(i) for i in range(2)]
    tiles, stats = model.generate([ctx, None], [d, None], generator=gens, max_tries=1)
    seams = generation_block(ctx, d, COUNTED)["n_seam"]
    assert len(tiles[0]["points"]) == seams + 2  # every seam continued, 2 more
    assert len(tiles[1]["points"]) == 1 + 2  # the ego's lane, 2 more
    assert [len(t["agents"]) for t in tiles] == [3, 3]
    again, _ = model.generate(
        [ctx, None], [d, None], max_tries=1,
        generator=[torch.Generator(device).manual_seed(i) for i in range(2)],
    )  # fmt: skip
    assert all(np.array_equal(a["points"], b["points"]) for a, b in zip(tiles, again))
