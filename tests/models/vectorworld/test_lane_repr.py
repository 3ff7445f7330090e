"""The tile tokens' lane representation: 20 points or a cubic Bézier (``lane_repr``)."""

import dataclasses

import numpy as np
import pytest
import torch

from simsci.models.vectorworld._outpaint import TileGenerator
from simsci.models.vectorworld._tokens import (
    BEZIER_SLICE,
    DIRECTIONS,
    GENERATOR_LAYOUT,
    IS_LANE,
    POINTS_SLICE,
    TOKEN_DIM,
    TokenLayout,
    bezier_points,
    ego_lane_index,
    episode_tile,
    fit_bezier,
    generation_block,
    generation_pair,
    outpaint_pair,
    pair_steps,
    tile_tokens,
    tokens_to_tile,
)
from simsci.train import load_model, save_model

BEZIER = dataclasses.replace(GENERATOR_LAYOUT, lane_repr="bezier")
NEW_KEYS = ("lane_repr", "ego_slot")  # TokenLayout fields a saved layout may lack
TINY = dict(width=16, depth=1, heads=2, freq_dim=8, mlp_ratio=2.0)


@pytest.fixture(scope="module")
def scene(small_scene):
    return small_scene


def _lanes(episodes):
    return np.concatenate(
        [np.asarray(lanes["points"], np.float64) for ep in episodes for lanes in ep["lanes"]]
    )


def test_fit_round_trip_on_ground_truth_lanes(scene):
    pts = _lanes(scene[1])
    ctrl = fit_bezier(pts)
    assert ctrl.shape == (len(pts), 4, 2) and ctrl.dtype == np.float64
    back = bezier_points(ctrl)
    assert back.shape == pts.shape
    # end points exact: they are the first and last control points
    assert np.array_equal(ctrl[:, 0], pts[:, 0]) and np.array_equal(ctrl[:, -1], pts[:, -1])
    assert np.array_equal(back[:, 0], pts[:, 0]) and np.array_equal(back[:, -1], pts[:, -1])
    err = np.sqrt(((back - pts) ** 2).sum(-1)).max(1)  # per lane, m
    # the benchmark's 32,563 lanes: max 0.19 m, p95 0.6 mm (benchmarks/README.md)
    assert err.max() < 0.25 and np.median(err) < 0.01


def test_fit_is_exact_on_a_cubic_and_rejects_bad_shapes():
    ctrl = np.array([[[0.0, 0.0], [10.0, 5.0], [20.0, -5.0], [30.0, 2.0]]])
    np.testing.assert_allclose(fit_bezier(bezier_points(ctrl)), ctrl, atol=1e-9)
    with pytest.raises(ValueError, match=r"\(n, 20, 2\)"):
        fit_bezier(np.zeros((3, 10, 2)))


def test_bezier_points_torch_shapes_and_gradients():
    ctrl = torch.randn(3, 5, 4, 2, dtype=torch.float64, requires_grad=True)
    out = bezier_points(ctrl)
    assert out.shape == (3, 5, 20, 2) and out.dtype == torch.float64
    assert torch.equal(out[..., 0, :], ctrl[..., 0, :])
    assert torch.equal(out[..., -1, :], ctrl[..., -1, :])
    np.testing.assert_allclose(out.detach().numpy(), bezier_points(ctrl.detach().numpy()))
    assert torch.autograd.gradcheck(bezier_points, (ctrl[:1, :2],))
    out.sum().backward()
    assert torch.isfinite(ctrl.grad).all() and (ctrl.grad != 0).all()


def test_layout_option_and_old_configs():
    assert TokenLayout().lane_repr == "points" and GENERATOR_LAYOUT.lane_repr == "points"
    old = {k: v for k, v in GENERATOR_LAYOUT.to_dict().items() if k not in NEW_KEYS}
    before = TokenLayout.from_dict(old)  # a config saved before the options
    assert before.lane_repr == "points" and before.ego_slot is False
    assert TokenLayout.from_dict({**old, "lane_repr": "bezier", "ego_slot": True}) == BEZIER
    with pytest.raises(ValueError, match="lane_repr must be one of"):
        TokenLayout(lane_repr="spline")
    with pytest.raises(ValueError, match="ego_slot must be a bool"):
        TokenLayout(ego_slot=1)
    assert BEZIER.last_cols == slice(6, 8) and TokenLayout().last_cols == slice(38, 40)
    assert BEZIER.unused_cols == slice(8, 40) and TokenLayout().unused_cols is None


def test_tokens_round_trip_with_exact_end_points(scene):
    _, episodes = scene
    lay = TokenLayout(lane_repr="bezier")
    for ep in episodes:
        for k, lanes in enumerate(ep["lanes"]):
            tok = tile_tokens(lanes, ep["agents"][k, :, -1], ep["agents_valid"][k], lay)
            nl = tok["counts"]["lanes"]
            assert tok["x"].shape[1] == TOKEN_DIM
            assert (tok["x"][:nl, BEZIER_SLICE.stop : POINTS_SLICE.stop] == 0).all()
            back = tokens_to_tile(tok["x"], layout=lay)
            pts = np.asarray(lanes["points"], np.float64)[tok["lane_index"]]
            assert np.abs(back["points"] - pts).max() < 0.25
            # the file's float32 end points come back bit for bit (scale is a power of 2)
            for col in (0, -1):
                want = pts[:, col].astype(np.float32)
                assert np.array_equal(back["points"][:, col].astype(np.float32), want)
            same = tokens_to_tile(torch.from_numpy(tok["x"]), layout=lay)["points"]
            np.testing.assert_allclose(same.numpy(), back["points"], rtol=1e-6, atol=1e-5)


def test_pins_in_bezier_blocks(scene):
    _, episodes = scene
    ep = episodes[0]
    k = pair_steps(ep)[0][0]
    M = BEZIER.tile_capacity
    L = BEZIER.max_lanes
    blk = generation_pair(ep, k, BEZIER)
    ref = generation_pair(ep, k, GENERATOR_LAYOUT)
    assert blk["x"].shape == ref["x"].shape and blk["n_seam"] == ref["n_seam"] > 0
    assert blk["pinned"][M : M + L, 8:40].all()  # a Bézier lane slot's unused columns
    assert not ref["pinned"][M : M + L, 8:38].any()
    for s in range(blk["n_seam"]):
        cols = slice(0, 2) if blk["seam_end"][s] == 0 else slice(6, 8)
        assert blk["pinned"][M + s, cols].all()
        assert np.array_equal(blk["x"][M + s, cols], (blk["seam_pin"][s] / 32).astype(np.float32))
    # the teacher's pairs pin the seam's end control point to the context's end point
    pair = outpaint_pair(ep, k, BEZIER)
    nc = pair["context_slice"].stop
    for i, j, end in pair["seams"]:
        t_cols, c_cols = (slice(0, 2), slice(6, 8)) if end == 0 else (slice(6, 8), slice(0, 2))
        assert pair["pinned"][j, t_cols].all()
        assert np.array_equal(pair["x"][j, t_cols], pair["x"][i, c_cols])
    assert pair["pinned"][nc:, 8:40][pair["x"][nc:, IS_LANE] == 1].all()


def test_bezier_generator_trains_and_samples(scene, train_tiny):
    path, episodes = scene
    model = train_tiny(path, "bezier")
    assert model.init_args["layout"]["lane_repr"] == "bezier"
    ep = episodes[0]
    ks = pair_steps(ep)[0][:2]
    ctxs = [episode_tile(ep, k) for k in ks] + [None]
    dirs = [
        DIRECTIONS.index(tuple(int(v) for v in ep["tile_cell"][k + 1] - ep["tile_cell"][k]))
        for k in ks
    ] + [None]
    for smooth in (True, False):
        tiles, stats = model.generate(
            ctxs, dirs, generator=torch.Generator().manual_seed(0), smooth=smooth
        )
        assert len(tiles) == 3
        for t, rows, c, d in zip(tiles, stats["seams"], ctxs, dirs):
            n = len(t["points"])
            assert t["points"].shape == (n, 20, 2) and np.isfinite(t["points"]).all()
            assert t["width"].shape == t["kind"].shape == (n,) and t["agents"].shape[1] == 7
            if c is None:
                continue
            cp = np.asarray(c["points"], np.float64) - 64.0 * np.asarray(DIRECTIONS[d])
            for i, j, end in rows:  # seam end points exact after decoding
                got = t["points"][j, 0 if end == 0 else -1]
                assert np.array_equal(got, cp[i, -1 if end == 0 else 0])


def test_points_checkpoint_without_the_option_loads(tmp_path):
    torch.manual_seed(0)
    model = TileGenerator(**TINY)
    assert model.layout.lane_repr == "points"
    path = save_model(model, tmp_path / "tiles.pt")
    ckpt = torch.load(path, weights_only=False)
    for key in NEW_KEYS:  # as written before the options
        del ckpt["model"]["init_args"]["layout"][key]
    torch.save(ckpt, path)
    back = load_model(path)
    assert back.layout == dataclasses.replace(model.layout, ego_slot=False)
    assert back.layout.lane_repr == "points"
    M = back.layout.tile_capacity
    blk = generation_block(None, None, back.layout)  # its first tiles as it was trained
    assert not blk["ego_slot"] and not blk["pinned"][M, IS_LANE]
    for a, b in zip(model.state_dict().values(), back.state_dict().values()):
        assert torch.equal(a, b)
    bez = TileGenerator(**TINY, lane_repr="bezier")
    assert bez.layout == BEZIER and "lane_repr" not in bez.init_args
    assert load_model(save_model(bez, tmp_path / "b.pt")).layout.lane_repr == "bezier"


def test_lane_error_is_in_metres(scene):
    path, episodes = scene
    ep = episodes[0]
    from simsci.models.vectorworld._outpaint import collate_blocks

    for lay in (GENERATOR_LAYOUT, BEZIER):
        torch.manual_seed(0)
        model = TileGenerator(**TINY, layout=lay.to_dict())
        batch = collate_blocks([generation_pair(ep, k, lay) for k in pair_steps(ep)[0][:2]])
        # t = 0: the estimate is the truth itself, whatever the network
        zero = model.lane_error(batch, t=torch.zeros(2))
        assert float(zero) == pytest.approx(0.0, abs=1e-5)
        assert float(model.lane_error(batch)) > 0.1


def test_first_tiles_put_the_ego_lane_in_slot_0(scene):
    _, episodes = scene
    M = GENERATOR_LAYOUT.tile_capacity
    for lay in (GENERATOR_LAYOUT, BEZIER):
        for ep in episodes:
            blk = generation_pair(ep, None, lay)
            assert blk["ego_slot"] and blk["pinned"][M, IS_LANE] and blk["x"][M, IS_LANE] == 1
            lane = tokens_to_tile(blk["x"][M : M + 1], layout=lay)
            assert ego_lane_index(lane["points"], lane["width"]) == 0
            truth = episode_tile(ep, 0)
            want = ego_lane_index(truth["points"], truth["width"])
            assert np.abs(lane["points"][0] - truth["points"][want]).max() < 0.25
            assert blk["counts"]["target"]["lanes"] == len(truth["points"])
            k = pair_steps(ep)[0][0]
            assert not generation_pair(ep, k, lay)["ego_slot"]  # outpainted: no ego slot
        # sampling: the slot is a lane, its geometry left to the network
        blk = generation_block(None, None, lay)
        assert blk["ego_slot"] and blk["pinned"][M, IS_LANE] and blk["known"][M, IS_LANE] == 1
        assert not blk["pinned"][M + 1 : M + lay.max_lanes, IS_LANE].any()
    # a first tile whose truth has no lane along +x through the origin: no ego slot
    truth = episode_tile(episodes[0], 0)
    truth = {**truth, "points": truth["points"] + np.array([0.0, 20.0])}
    truth["points"][..., 1] = np.clip(truth["points"][..., 1], -32, 32)
    if ego_lane_index(truth["points"], truth["width"]) < 0:
        blk = generation_block(None, None, GENERATOR_LAYOUT, target=truth)
        assert not blk["ego_slot"] and not blk["pinned"][M, IS_LANE]
