"""The tile generator (simsci.models.vectorworld._outpaint)."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from simsci.driving.metrics import drive_seam_gaps as seam_gaps_of_drive
from simsci.driving.metrics import seam_gaps
from simsci.models.vectorworld._evaluate import _close_pairs, _lane_chains, tile_metrics
from simsci.models.vectorworld._lanegraph import lane_curvature
from simsci.models.vectorworld._outpaint import (
    TileGenerator,
    TileSamples,
    close_seams,
    collate_blocks,
    has_ego_lane,
    smooth_lane,
    train_tile_generator,
)
from simsci.models.vectorworld._tokens import (
    DIRECTIONS,
    GENERATOR_LAYOUT,
    IS_AGENT,
    IS_LANE,
    TOKEN_DIM,
    episode_tile,
    generation_block,
    generation_pair,
    pair_steps,
)
from simsci.train import load_model, save_model

TINY = dict(width=16, depth=1, heads=2, freq_dim=8, mlp_ratio=2.0)
M = 34  # GENERATOR_LAYOUT: 24 lanes + 10 agents


@pytest.fixture(scope="module")
def scene(small_scene):
    path, episodes = small_scene
    pairs = []  # (context tile, direction, truth tile)
    for ep in episodes:
        for k in pair_steps(ep)[0]:
            d = DIRECTIONS.index(tuple(int(v) for v in ep["tile_cell"][k + 1] - ep["tile_cell"][k]))
            pairs.append((episode_tile(ep, k), d, episode_tile(ep, k + 1)))
    assert len(pairs) >= 2
    return path, episodes, pairs


class _Fixed(nn.Module):
    """A stand-in network whose samples are ``target`` (velocity ``(z - target) / t``):
    every lane slot a lane along the x axis, every agent slot an agent (the pins fix the
    other flag)."""

    def __init__(self, empty=False, empty_calls=0):
        super().__init__()
        self.empty, self.empty_calls, self.calls = empty, empty_calls, 0

    def forward(self, z, r, t, rel, mask, cond=None, pinned=None):
        self.calls += 1
        target = torch.zeros_like(z)
        if not (self.empty or self.calls <= self.empty_calls):
            line = torch.linspace(-30.0, 30.0, 20, dtype=z.dtype) / 32
            target[..., 0:40:2] = line
            target[..., 46 + 3] = 1.0  # cos
            target[..., 46 + 5 : 46 + 7] = 1.0
            target[..., IS_LANE] = target[..., IS_AGENT] = 1.0
        return (z - target) / t[:, None, None]


def _randomised(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.2 * torch.randn(p.shape, generator=g))
    return model


def test_generate_shapes_and_exact_seams(scene):
    _, _, pairs = scene
    torch.manual_seed(0)
    tg = _randomised(TileGenerator(**TINY))
    ctxs, dirs = [p[0] for p in pairs] + [None], [p[1] for p in pairs] + [None]
    tiles, stats = tg.generate(ctxs, dirs, generator=torch.Generator().manual_seed(1))
    assert len(tiles) == stats["tiles"] == len(ctxs)
    for t in tiles:
        assert set(t) == {"points", "width", "speed_limit", "kind", "agents"}
        n = len(t["points"])
        assert t["points"].shape == (n, 20, 2) and t["points"].dtype == np.float64
        assert t["width"].shape == t["speed_limit"].shape == t["kind"].shape == (n,)
        assert t["kind"].dtype == np.int64 and t["agents"].shape[1] == 7
    # a network that makes every slot a lane: every seam slot gives a lane whose pinned
    # endpoint equals the context's endpoint in the new frame, exactly
    tg.net = _Fixed()
    tiles, stats = tg.generate(ctxs, dirs, steps=3, mode="flow")
    assert stats["resampled"] == stats["empty"] == stats["no_ego_lane"] == 0
    n_rows = 0
    for (ctx, d, _), t, rows in zip(pairs, tiles, stats["seams"]):
        step = np.asarray(DIRECTIONS[d], np.float64)
        cp = np.asarray(ctx["points"], np.float64) - 64.0 * step
        axis = 0 if step[0] else 1
        on = (np.abs(cp[:, -1, axis] + 32 * step[axis]) < 1e-2).sum() + (
            np.abs(cp[:, 0, axis] + 32 * step[axis]) < 1e-2
        ).sum()
        assert len(rows) == on  # one row per context lane on the shared edge
        for c, j, end in rows:
            got = t["points"][j, 0 if end == 0 else -1]
            want = cp[c, -1 if end == 0 else 0]
            assert np.array_equal(got, want)
            n_rows += 1
        assert len(t["points"]) == 24 and len(t["agents"]) == 10
    assert n_rows > 0
    assert has_ego_lane(tiles[-1])  # a first tile: a lane through the origin along +x


def test_seam_frame_continues_each_seam_along_its_lane(scene):
    """A network whose every lane slot is the same straight line along the token's x
    axis: in the tile frame that is a lane along the tile's x axis, wherever the seam
    lies; with ``seam_frame`` it is each seam's own lane going straight on (every point
    on the line through the pin along the context lane's last tangent), exact at the pin."""
    _, _, pairs = scene
    ctxs, dirs = [p[0] for p in pairs], [p[1] for p in pairs]
    worst = {}
    for seam_frame in (False, True):
        tg = TileGenerator(**TINY, layout={**GENERATOR_LAYOUT.to_dict(), "seam_frame": seam_frame})
        tg.net = _Fixed()
        tiles, stats = tg.generate(ctxs, dirs, steps=2, mode="flow", smooth=False)
        off = []
        for (ctx, d, _), t, rows in zip(pairs, tiles, stats["seams"]):
            cp = np.asarray(ctx["points"], np.float64) - 64.0 * np.asarray(DIRECTIONS[d], float)
            for c, j, end in rows:
                pin = cp[c, -1] if end == 0 else cp[c, 0]
                tan = cp[c, -1] - cp[c, -2] if end == 0 else cp[c, 1] - cp[c, 0]
                tan /= np.hypot(*tan)
                rel = t["points"][j] - pin
                assert np.array_equal(t["points"][j, 0 if end == 0 else -1], pin)
                off.append(np.abs(rel[:, 0] * tan[1] - rel[:, 1] * tan[0]).max())
        assert off
        worst[seam_frame] = max(off)
    assert worst[True] < 1e-4  # metres: float32 tokens
    assert worst[False] > 1.0  # the tile frame's line is not the road's


def test_empty_tiles_resampled_and_counted(scene):
    _, _, pairs = scene
    tg = TileGenerator(**TINY)
    ctxs, dirs = [p[0] for p in pairs[:2]] + [None], [p[1] for p in pairs[:2]] + [None]
    tg.net = _Fixed(empty=True)
    tiles, stats = tg.generate(ctxs, dirs, max_tries=3, continue_seams=False)
    assert stats["resampled"] == 6 and tg.net.calls == 3
    # a first tile's ego slot is always a lane (is_lane pinned): here a point at the
    # origin, no lane along +x, so it counts as no_ego_lane, not as empty
    assert stats["empty"] == 2 and stats["no_ego_lane"] == 1
    assert [len(t["points"]) for t in tiles] == [0, 0, 1]
    tg.net = _Fixed(empty_calls=1)  # the first draw is empty, the redraw is not
    tiles, stats = tg.generate(ctxs, dirs, max_tries=3, continue_seams=False)
    assert stats["empty"] == 0 and stats["resampled"] == 3 and tg.net.calls == 2
    assert all(len(t["points"]) == 24 for t in tiles)
    # by default every seam slot of the context is a lane, whatever the network says
    tg.net = _Fixed(empty=True)
    tiles, stats = tg.generate(ctxs, dirs, max_tries=3)
    for ctx, d, tile, rows in zip(ctxs[:2], dirs[:2], tiles, stats["seams"]):
        n_seam = generation_block(ctx, d, tg.layout)["n_seam"]
        assert n_seam > 0 and len(tile["points"]) == n_seam == len({r[1] for r in rows})
    assert stats["empty"] == 0 and stats["no_ego_lane"] == 1  # the first: its ego slot


def test_a_tile_that_continues_nothing_keeps_its_first_draw(scene):
    """A context none of whose lanes reaches the shared edge leads into nothing: its new
    tile is drawn once, lane-less or not (``unled``), while a tile a lane leads into is
    redrawn until it has lanes."""
    _, _, pairs = scene
    x = np.linspace(-20.0, 20.0, 20)
    inner = {
        "points": np.stack([x, np.zeros(20)], -1)[None],  # ends 12 m short of every edge
        "width": np.full(1, 3.5),
        "speed_limit": np.full(1, 15.0),
        "kind": np.zeros(1, np.int64),
        "agents": np.zeros((0, 7)),
    }
    tg = TileGenerator(**TINY)
    assert generation_block(inner, 0, tg.layout)["n_seam"] == 0
    tg.net = _Fixed(empty=True)
    tiles, stats = tg.generate([inner], [0], max_tries=3)
    assert tg.net.calls == 1 and stats["resampled"] == 0
    assert stats["unled"] == 1 and stats["empty"] == 1 and len(tiles[0]["points"]) == 0
    tg.net = _Fixed(empty=True)  # led into (a seam lane) and lane-less: drawn 3 times
    tiles, stats = tg.generate([inner, pairs[0][0]], [0, pairs[0][1]], max_tries=3,
                               continue_seams=False)  # fmt: skip
    assert tg.net.calls == 3 and stats["resampled"] == 2 and stats["unled"] == 1
    assert stats["empty"] == 2


def test_dataset_collate_and_loss_decreases(scene):
    path, episodes, _ = scene
    data = TileSamples(path, p_first=0.25)
    n_pairs = sum(len(pair_steps(ep)[0]) for ep in episodes)
    assert data.n_pairs == n_pairs and data.n_first == round(n_pairs / 3)
    assert len(data) == n_pairs + data.n_first
    assert [e for e, k in data.index[n_pairs:]] == [0, 1][: data.n_first]
    batch = collate_blocks([data[i] for i in range(len(data))])
    B = len(data)
    assert batch["x"].shape == (B, 2 * M, TOKEN_DIM) and batch["rel"].dtype == torch.int64
    assert batch["pinned"].shape == batch["x"].shape and batch["cond"].shape == (B, 5)
    assert (batch["cond"][n_pairs:, 4] == 1).all() and (batch["cond"][:n_pairs, 4] == 0).all()
    first = generation_pair(episodes[0], None)
    np.testing.assert_array_equal(batch["x"][n_pairs].numpy(), first["x"])
    with pytest.raises(IndexError, match="out of range"):
        data[len(data)]
    torch.manual_seed(0)
    tg = TileGenerator(**TINY, jump_ratio=0.25)
    opt = torch.optim.Adam(tg.parameters(), lr=1e-2)

    def val():
        torch.manual_seed(123)
        with torch.no_grad():
            return float(tg.validation_step(batch)["mse"])

    before = val()
    for _ in range(25):
        out = tg.training_step(batch)
        assert set(out) >= {"loss", "mse", "weight"}
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    assert val() < 0.8 * before
    wrong = TileGenerator(**TINY, layout={"max_lanes": 4, "max_agents": 2})
    with pytest.raises(ValueError, match="batch blocks hold 68 tokens"):
        wrong.training_step(batch)


def test_bad_input_rejected(scene):
    _, _, pairs = scene
    tg = TileGenerator(**TINY)
    ctx, d, _ = pairs[0]
    with pytest.raises(ValueError, match=r"contexts\[0\].*\(n, 20, 2\)"):
        tg.generate([dict(ctx, points=ctx["points"][:, :10])], [d])
    bad = dict(ctx, points=np.asarray(ctx["points"], np.float64).copy())
    bad["points"][0, 0, 0] = np.nan
    with pytest.raises(ValueError, match=r"contexts\[0\].*NaN"):
        tg.generate([bad], [d])
    with pytest.raises(ValueError, match=r"direction must be an int in \[0, 4\)"):
        tg.generate([ctx], [7])
    with pytest.raises(ValueError, match="context and direction go together"):
        tg.generate([ctx], [None])
    with pytest.raises(ValueError, match="same length"):
        tg.generate([ctx, ctx], [d])
    with pytest.raises(TypeError, match="must be lists"):
        tg.generate(ctx, d)
    with pytest.raises(ValueError, match="mode must be"):
        tg.generate([ctx], [d], mode="euler")
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        tg.generate([ctx], [d], steps=0)
    with pytest.raises(ValueError, match="p_first must be a number in"):
        TileGenerator(p_first=1.5)
    with pytest.raises(ValueError, match="unknown TokenLayout keys"):
        TileGenerator(layout={"lanes": 3})


def test_save_load_round_trip(scene, tmp_path):
    _, _, pairs = scene
    tg = _randomised(TileGenerator(**TINY, layout={"max_lanes": 12, "max_agents": 4}))
    path = save_model(tg, tmp_path / "tg.pt")
    back = load_model(path)
    assert isinstance(back, TileGenerator) and back.init_args == tg.init_args
    assert back.layout == tg.layout and back.capacity == 32
    ctxs, dirs = [pairs[0][0], None], [pairs[0][1], None]
    a, _ = tg.generate(ctxs, dirs, generator=torch.Generator().manual_seed(0))
    b, _ = back.generate(ctxs, dirs, generator=torch.Generator().manual_seed(0))
    for ta, tb in zip(a, b):
        for key in ta:
            np.testing.assert_array_equal(ta[key], tb[key])
    # the model's dtype is followed
    tiles, _ = back.double().generate(ctxs, dirs, generator=torch.Generator().manual_seed(0))
    assert tiles[0]["points"].dtype == np.float64


def test_train_tile_generator_and_resume(scene, tmp_path):
    path, _, _ = scene
    out = tmp_path / "run"
    kw = dict(batch_size=4, val_fraction=0.5, model_args=TINY, val_every=2, warmup_steps=0)
    s = train_tile_generator(path, out, steps=2, log_every=1, **kw)
    assert s["val_episodes"] == 1 and s["train_items"] > 0 and s["val_items"] > 0
    assert (out / "checkpoints" / "best.pt").is_file()
    model = load_model(out / "checkpoints" / "last.pt")
    assert isinstance(model, TileGenerator) and model.init_args["width"] == 16
    assert model.checkpoint_extra["val_episodes"] == [1, 2]
    with pytest.warns(UserWarning, match="changed settings"):  # the longer cosine horizon
        s2 = train_tile_generator(path, out, steps=4, log_every=1, **kw)  # resumes at step 2
    assert s2["steps"] == 4


def test_tile_metrics(scene):
    _, _, pairs = scene
    ctxs, dirs, truth = [p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs]
    same = tile_metrics(truth, truth, ctxs, dirs)
    assert same["with_lanes"] == 1.0 and same["lane_stats_distance"] < 1e-9
    assert same["seam_gap_median"] == 0.0 and same["seam_continued"] == 1.0
    assert same["seam_smooth"] == 1.0 and same["seam_endpoints"] > 0
    assert same["truth_seam_continued"] == 1.0
    # the seam gaps agree with the driving metrics' seam_gaps (world frame, tile a at 0)
    ctx, d, tgt = pairs[0]
    step = 64.0 * np.asarray(DIRECTIONS[d], np.float64)
    gaps = seam_gaps(ctx["points"], tgt["points"] + step, [0, 0, 0], [*step, 0])
    assert np.isfinite(gaps).all() and np.median(gaps) < 1e-3
    # no lane at all: gaps are inf, nothing continued; shifted lanes are measured
    empty = dict(truth[0], points=np.zeros((0, 20, 2)), width=np.zeros(0))
    empty.update(speed_limit=np.zeros(0), kind=np.zeros(0, np.int64))
    gen = [empty] + truth[1:]
    m = tile_metrics(gen, truth, ctxs, dirs)
    assert m["with_lanes"] == 1 - 1 / len(truth) and m["seam_continued"] < 1.0
    shifted = [dict(t, points=np.asarray(t["points"]) + [0.0, 3.0]) for t in truth]
    m = tile_metrics(shifted, truth, ctxs, dirs)
    assert m["seam_continued"] < 1.0 and m["lane_stats_distance"] < 1e-9
    with pytest.raises(ValueError, match="equally long"):
        tile_metrics(truth[:1], truth)


def test_a_bending_penalty_straightens_noise_and_keeps_lines_and_pins():
    u = np.linspace(0.0, 1.0, 20)[:, None]
    line = np.array([-32.0, 4.0]) + u * np.array([64.0, 6.0])
    for bend in (0.0, 1.0, 100.0):  # a straight, evenly spaced lane is a fixed point
        np.testing.assert_allclose(smooth_lane(line, bend=bend), line, atol=1e-9)
    noisy = line + np.random.default_rng(0).normal(0.0, 1.5, line.shape)
    pin, t = np.array([-32.0, 4.0]), np.array([64.0, 6.0]) / math.hypot(64.0, 6.0)
    plain = smooth_lane(noisy, start=pin, start_tangent=t)
    for bend, factor in ((1.0, 0.8), (10.0, 0.5), (1000.0, 0.05)):
        fit = smooth_lane(noisy, start=pin, start_tangent=t, bend=bend)
        assert lane_curvature(fit[None])[0] < factor * lane_curvature(plain[None])[0]
        np.testing.assert_array_equal(fit[0], pin)  # the pin is kept exactly
        first = (fit[1] - fit[0]) / np.hypot(*(fit[1] - fit[0]))
        assert first @ t > math.cos(math.radians(5.0))  # and leaves along its tangent
    # a true bend (a 30 degree arc of radius 100 m) is kept to within a metre
    phi = np.linspace(0.0, math.radians(30.0), 20)
    arc = 100.0 * np.stack([np.sin(phi), 1.0 - np.cos(phi)], -1) - [26.0, 0.0]
    fit = smooth_lane(arc, start=arc[0], end=arc[-1], bend=1.0)
    assert np.hypot(*(fit - arc).T).max() < 1.0
    with pytest.raises(ValueError, match="bend"):
        smooth_lane(line, bend=-1.0)


def test_near_duplicate_lanes_are_counted_and_forks_are_not():
    u = np.linspace(0.0, 1.0, 20)[:, None]

    def line(p0, p1):
        return np.asarray(p0, float) + u * (np.asarray(p1, float) - np.asarray(p0, float))

    base = line((-32, 0), (32, 0))
    assert _close_pairs(np.stack([base, line((-32, 2.0), (32, 2.0))])) == 1
    assert _close_pairs(np.stack([base, line((32, 1.0), (-32, 1.0))])) == 1  # oncoming
    assert _close_pairs(np.stack([base, line((-32, 3.5), (32, 3.5))])) == 0  # a lane apart
    turn = math.radians(20.0)
    fork = line((-32, 0), (-32 + 60 * math.cos(turn), 60 * math.sin(turn)))
    assert _close_pairs(np.stack([base, fork])) == 0  # they meet only at their start
    short = line((-32, 1.0), (-20, 1.0))  # 12 m beside it: under the 15 m span
    assert _close_pairs(np.stack([base, short])) == 0
    tile = {
        "points": np.stack([base, line((-32, 2.0), (32, 2.0))]),
        "width": np.full(2, 3.5),
        "speed_limit": np.full(2, 13.9),
        "kind": np.zeros(2, np.int64),
        "agents": np.zeros((0, 7)),
    }
    m = tile_metrics([tile], [tile])
    assert m["close_lane_pairs_per_tile"] == m["truth_close_lane_pairs_per_tile"] == 1.0


def test_seam_turn_measures_how_far_a_lane_departs_from_going_straight_on():
    """A context lane ending on the east edge; the new tile's lane continuing it either
    straight on (turn 0 deg, lateral 0 m) or bending through 45 degrees to the left."""
    ctx = _tile_of(_lane((-32.0, 4.0), (32.0, 4.0)))
    straight = _tile_of(_lane((-32.0, 4.0), (32.0, 4.0)))
    u = np.linspace(0.0, 1.0, 20)[:, None]  # a quarter-circle-ish bend: east, then north-east
    arc = np.concatenate([-32.0 + 30.0 * u[:10] / u[9], 4.0 + 0 * u[:10]], 1)
    tail = arc[-1] + np.linspace(0.0, 30.0, 11)[1:, None] * np.sqrt(0.5)
    bent = _tile_of(np.concatenate([arc, tail]))
    m = tile_metrics([bent], [straight], [ctx], [0])
    assert m["truth_seam_turn_median"] < 1e-6 and m["truth_seam_lateral_median"] < 1e-9
    assert abs(m["seam_turn_median"] - 45.0) < 1e-6
    assert abs(m["seam_lateral_median"] - 30.0 * np.sqrt(0.5)) < 1e-9
    assert m["seam_smooth"] == 1.0  # it still leaves the seam smoothly


def test_lanes_are_counted_as_pieces_chains_and_metres():
    """A lane split in two pieces (one to one) is one chain; a fork is not merged."""
    x = np.linspace(-32.0, 0.0, 20)[:, None]
    a = np.hstack([x, np.zeros_like(x)])  # (-32, 0) -> (0, 0)
    b = a + [32.0, 0.0]  # (0, 0) -> (32, 0): a's only successor
    c = a + [0.0, 8.0]  # a separate lane
    assert _lane_chains(np.stack([a, b, c])) == 2 and _lane_chains(np.zeros((0, 20, 2))) == 0
    fork = b.copy()
    fork[:, 1] = np.linspace(0.0, 6.0, 20)  # a second successor of a: a fork, kept apart
    assert _lane_chains(np.stack([a, b, fork])) == 3
    tile = {
        "points": np.stack([a, b, c]),
        "width": np.full(3, 3.5),
        "speed_limit": np.full(3, 20.0),
        "kind": np.zeros(3, np.int64),
        "agents": np.zeros((0, 7)),
    }
    whole = dict(tile, points=np.stack([np.vstack([a[::2], b[1::2]]), c]))
    whole.update(width=np.full(2, 3.5), speed_limit=np.full(2, 20.0), kind=np.zeros(2, np.int64))
    m = tile_metrics([whole], [tile])
    assert m["lanes_per_tile"] == 2 and m["truth_lanes_per_tile"] == 3
    assert m["lane_chains_per_tile"] == m["truth_lane_chains_per_tile"] == 2
    np.testing.assert_allclose(m["truth_lane_m_per_tile"], 96.0)
    np.testing.assert_allclose(m["lane_m_per_tile"], 96.0)


def _through(step, offset: float, reverse: bool = False) -> np.ndarray:
    """A straight lane of a neighbour tile (its own frame) crossing it along ``step`` at a
    perpendicular ``offset``: it ends (or, ``reverse``, starts) on the edge at +32 step."""
    s = np.asarray(step, np.float64)
    u = np.linspace(-32.0, 32.0, 20)[:, None] * s + offset * np.array([-s[1], s[0]])
    return u[::-1] if reverse else u


def test_every_neighbour_pins_its_seam(scene):
    """A new tile with a context and a further neighbour: every lane end of the
    neighbour on the shared edge is the end point of a lane of the new tile, exactly,
    even from an untrained network (the extra slots are pinned lanes)."""
    _, _, pairs = scene
    ctx, d, _ = pairs[0]
    nd = (d + 1) % 4  # another side of the new tile
    step = DIRECTIONS[nd]
    pts = np.stack([_through(step, 5.0), _through(step, -5.0, reverse=True)])
    neighbour = {
        "points": pts,
        "width": np.full(2, 3.5),
        "speed_limit": np.full(2, 13.9),
        "kind": np.zeros(2, np.int64),
        "agents": np.zeros((0, 7)),
    }
    tg = _randomised(TileGenerator(**TINY))
    for net in (tg.net, _Fixed()):
        tg.net = net
        (tile,), _ = tg.generate(
            [ctx], [d], neighbours=[[(neighbour, nd)]], generator=torch.Generator().manual_seed(0)
        )
        shift = 64.0 * np.asarray(step, np.float64)
        got = np.asarray(tile["points"])
        # lane 0 ends on the seam: a new lane starts there; lane 1 starts there: one ends
        assert (got[:, 0] == pts[0, -1] - shift).all(1).any()
        assert (got[:, -1] == pts[1, 0] - shift).all(1).any()
    with pytest.raises(ValueError, match="neighbours"):
        tg.generate([ctx], [d], neighbours=[])


def _lane(a, b):
    return np.linspace(np.asarray(a, float), np.asarray(b, float), 20)


def _tile_of(*lanes) -> dict:
    n = len(lanes)
    return {
        "points": np.stack(lanes) if n else np.zeros((0, 20, 2)),
        "width": np.full(n, 3.5),
        "speed_limit": np.full(n, 13.9),
        "kind": np.zeros(n, np.int64),
        "agents": np.zeros((0, 7)),
    }


def _gaps(tiles_by_cell: dict) -> np.ndarray:
    """The one seam-gap definition over tiles (own frames) live together at one step."""
    cells = list(tiles_by_cell)
    pts = [tiles_by_cell[c]["points"] for c in cells]
    ids = np.arange(len(cells))
    zero = np.zeros(len(cells), np.int64)
    return seam_gaps_of_drive(
        np.concatenate(pts), np.repeat(ids, [len(p) for p in pts]), ids, np.array(cells), zero, zero
    )


def test_close_seams_snaps_trims_and_stubs_every_neighbour():
    """A new cell (1, 1) between its west neighbour (0, 1) (the context) and its south
    one (1, 0): a lane 1.25 m off the west neighbour's lane end is snapped onto it, a lane
    running into the south edge where that tile has no lane is trimmed back, the south
    tile's lane that ends on the edge gets a stub; afterwards every gap is 0."""
    west = _tile_of(_lane((-32, -1.75), (32, -1.75)), _lane((32, 1.75), (-32, 1.75)))
    south = _tile_of(_lane((5, -32), (5, 32)))
    new = _tile_of(
        _lane((-32, -0.5), (32, -0.5)),  # starts 1.25 m off the west lane's end: snapped
        _lane((32, 1.75), (-32, 1.75)),  # meets the west tile's westbound lane exactly
        _lane((-20, 20), (-20, -32)),  # runs into the south edge, nothing there: trimmed
    )
    east, north = DIRECTIONS.index((1, 0)), DIRECTIONS.index((0, 1))
    tiles = {(0, 1): west, (1, 0): south, (1, 1): new}
    before = _gaps(tiles)
    assert np.isinf(before).sum() >= 2 and (before[np.isfinite(before)] > 1.0).any()
    closed, counts = close_seams(new, [(west, east), (south, north)])
    assert counts == {
        "exact": 1, "snapped": 1, "trimmed": 1, "dropped": 0, "stubs": 1, "over_capacity": 0
    }  # fmt: skip
    after = _gaps({**tiles, (1, 1): closed})
    assert len(after) == len(before) and np.all(after <= 1e-9)
    snapped = closed["points"][0]
    assert np.array_equal(snapped[0], [-32.0, -1.75]) and np.array_equal(snapped[-1], [32, -0.5])
    seg = np.diff(snapped, axis=0)
    turn = np.degrees(np.abs(np.diff(np.arctan2(seg[:, 1], seg[:, 0]))))
    # G1 with the west lane (+x) at the seam: the first chord of the cubic within 1 degree
    assert turn.max() < 1.0 and abs(math.degrees(math.atan2(seg[0, 1], seg[0, 0]))) < 1.0
    trimmed = closed["points"][2]
    assert trimmed[-1, 1] == pytest.approx(-31.0) and trimmed[0].tolist() == [-20, 20]
    stub = closed["points"][3]  # continues the south lane north, 16 m
    assert np.array_equal(stub[0], [5.0, -32.0]) and np.allclose(stub[-1], [5.0, -16.0])
    assert closed["kind"].dtype == np.int64 and len(closed["width"]) == 4
    # nothing to do without neighbours, and a lane-count cap drops lanes off the seams
    same, counts = close_seams(new, [])
    assert np.array_equal(same["points"], new["points"]) and not any(counts.values())
    capped, counts = close_seams(new, [(west, east), (south, north)], max_lanes=2)
    assert counts["over_capacity"] == 2 and len(capped["points"]) == 2
