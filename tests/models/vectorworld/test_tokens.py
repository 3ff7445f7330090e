"""Tile tokens and outpainting pairs (simsci.models.vectorworld._tokens)."""

import json
import shutil

import h5py
import numpy as np
import pytest
import torch

from simsci.driving.metrics import EDGE_TYPES
from simsci.models.vectorworld._dit import (
    EdgeGatedRelationalDiT,
    meanflow_loss,
    sample_one_step,
)
from simsci.models.vectorworld._tokens import (
    DIRECTIONS,
    FIRST_TILE,
    GENERATOR_LAYOUT,
    IS_AGENT,
    IS_LANE,
    RELATIONS,
    TOKEN_DIM,
    TilePairs,
    TokenLayout,
    collate_pairs,
    episode_tile,
    generation_block,
    generation_pair,
    lane_successors,
    outpaint_pair,
    pair_steps,
    tile_tokens,
    to_seam_frame,
    tokens_to_tile,
)

R = {name: i for i, name in enumerate(RELATIONS)}


@pytest.fixture(scope="module")
def scene(scene_file):
    return scene_file(3, 250.0, 1200.0, 3)


def _tiles(episodes):
    for ep in episodes:
        for k in range(len(ep["t"])):
            yield ep, k


def test_round_trip_exact(scene):
    _, episodes = scene
    n = 0
    for ep, k in _tiles(episodes):
        lanes = ep["lanes"][k]
        tok = tile_tokens(lanes, ep["agents"][k, :, -1], ep["agents_valid"][k])
        assert tok["x"].shape == (len(lanes["points"]) + ep["agents_valid"][k].sum(), TOKEN_DIM)
        assert tok["truncated"] == {"lanes": 0, "agents": 0}
        back = tokens_to_tile(tok["x"], tok["mask"])
        np.testing.assert_array_equal(back["points"], lanes["points"])  # / 32 is exact
        np.testing.assert_allclose(back["width"], lanes["width"], rtol=1e-6)
        np.testing.assert_allclose(back["speed_limit"], lanes["speed_limit"], rtol=1e-6)
        np.testing.assert_array_equal(back["kind"], lanes["kind"])
        want = ep["agents"][k, ep["agents_valid"][k], -1]
        np.testing.assert_allclose(back["agents"], want, rtol=1e-6, atol=1e-6)
        n += 1
    assert n >= 10
    # torch in -> torch out on its dtype; generated tokens are classified by their flags
    x = torch.as_tensor(tok["x"]).double()
    x[0, IS_LANE], x[0, IS_AGENT] = 0.3, 0.2  # dropped
    x[-1, 46 + 3 : 46 + 5] *= 3.0  # (cos, sin) renormalised
    back = tokens_to_tile(x)
    assert isinstance(back["agents"], torch.Tensor) and back["agents"].dtype == torch.float64
    assert len(back["points"]) == tok["counts"]["lanes"] - 1
    assert torch.allclose(back["agents"][-1, 3:5].norm(), torch.tensor(1.0, dtype=torch.float64))


def test_relation_matrix(scene):
    _, episodes = scene
    seen = set()
    for ep, k in _tiles(episodes):
        lanes = ep["lanes"][k]
        tok = tile_tokens(lanes, ep["agents"][k, :, -1], ep["agents_valid"][k])
        rel, nl = tok["rel"], tok["counts"]["lanes"]
        N = len(rel)
        assert rel.dtype == np.int64 and rel.min() >= 0 and rel.max() < len(RELATIONS)
        assert (np.diag(rel) == R["self"]).all()
        off = ~np.eye(N, dtype=bool)
        assert not (rel[off] == R["self"]).any()
        np.testing.assert_array_equal(rel == R["succ"], (rel == R["pred"]).T)
        for name in ("left", "right"):
            got = set(zip(*np.nonzero(rel == R[name])))
            e = lanes["edge_index"][lanes["edge_type"] == EDGE_TYPES.index(name)]
            assert got == set(map(tuple, e.tolist()))
        np.testing.assert_array_equal(rel == R["agent_on_lane"], (rel == R["lane_under_agent"]).T)
        assert ((rel[nl:, :nl] == R["agent_on_lane"]).sum(1) <= 1).all()
        assert (rel[nl:, nl:] == rel[nl:, nl:].T).all()  # agent_near symmetric
        assert not np.isin(rel[:nl, :nl], [6, 7, 8, 9, 10]).any()
        seen |= set(np.unique(rel).tolist())
    assert {R["succ"], R["left"], R["agent_on_lane"], R["agent_near"]} <= seen


def test_outpaint_pairs_and_seams(scene):
    _, episodes = scene
    ends, dirs = set(), set()
    for ep in episodes:
        ks, skipped = pair_steps(ep)
        assert skipped == {"not_adjacent": 0, "empty_tile": 0} and ks == list(
            range(len(ep["t"]) - 1)
        )
        for k in ks:
            p = outpaint_pair(ep, k)
            nc, N = p["context_slice"].stop, len(p["x"])
            step = np.asarray(DIRECTIONS[p["direction"]])
            assert (ep["tile_cell"][k + 1] - ep["tile_cell"][k] == step).all()
            assert p["cond"].sum() == 1 and p["cond"][p["direction"]] == 1
            dirs.add(p["direction"])
            assert p["pinned"][:nc].all() and p["pinned"][nc:].sum() == 2 * len(p["seams"])
            np.testing.assert_array_equal(p["known"][p["pinned"]], p["x"][p["pinned"]])
            rel = p["rel"]
            assert (rel == rel.T)[:nc, nc:].all()
            assert np.isin(rel[:nc, nc:], [R["context"], R["seam"]]).all()
            assert (rel[:nc, nc:] == R["seam"]).sum() == len(p["seams"])
            # context tokens = tile k in tile k+1's frame
            ctx_pts = ep["lanes"][k]["points"].astype(np.float64) - 64.0 * step
            np.testing.assert_allclose(
                p["x"][: len(ctx_pts), :40].reshape(-1, 20, 2) * 32, ctx_pts, atol=1e-4
            )
            axis = 0 if step[0] else 1
            tl = ep["lanes"][k + 1]["points"]
            for i, j, end in p["seams"]:
                c_end = ctx_pts[i, -1 if end == 0 else 0]
                cols = slice(0, 2) if end == 0 else slice(38, 40)
                assert p["pinned"][j, cols].all()
                np.testing.assert_allclose(p["known"][j, cols] * 32, c_end, atol=1e-4)
                assert abs(abs(p["known"][j, cols][axis] * 32) - 32) < 1e-3
                assert abs(p["known"][j, cols][axis] * 32 + 32 * step[axis]) < 1e-3  # shared
                t_end = tl[j - nc, 0 if end == 0 else -1]
                assert np.abs(t_end - c_end).max() < 1e-3  # exact seams in the file
                ends.add(int(end))
            # seams are exactly the graph's succ edges across this seam
            g = ep["graph"]
            lc = {n: a for a, n in enumerate(ep["lanes"][k]["node"])}
            lt = {n: nc + a for a, n in enumerate(ep["lanes"][k + 1]["node"])}
            want = set()
            for (s, d), t in zip(g["edges"]["index"].tolist(), g["edges"]["type"].tolist()):
                if t == EDGE_TYPES.index("succ"):
                    if s in lc and d in lt:
                        want.add((lc[s], lt[d], 0))
                    if s in lt and d in lc:
                        want.add((lc[d], lt[s], 1))
            assert set(map(tuple, p["seams"].tolist())) == want
            assert N == nc + p["target_slice"].stop - p["target_slice"].start
    assert ends == {0, 1} and len(dirs) >= 1  # entering and oncoming lanes


def test_dataset_collate_padding(scene):
    path, episodes = scene
    pairs = TilePairs(path)
    assert len(pairs) == sum(len(ep["t"]) - 1 for ep in episodes)
    assert pairs.skipped == {"not_adjacent": 0, "empty_tile": 0}
    sub = TilePairs(path, episodes=[1])
    assert len(sub) == len(episodes[1]["t"]) - 1 and sub[0]["episode"] == 1
    items = [pairs[0], pairs[len(pairs) - 1]]
    b = collate_pairs(items)
    N, M = 2 * (48 + 24), 48 + 24
    assert b["x"].shape == (2, N, TOKEN_DIM) and b["x"].dtype == torch.float32
    assert b["rel"].shape == (2, N, N) and b["rel"].dtype == torch.int64
    assert b["pinned"].shape == b["known"].shape == (2, N, TOKEN_DIM)
    assert b["mask"].shape == (2, N) and b["cond"].shape == (2, 4)
    assert b["target_slice"] == slice(M, N)
    for bi, p in enumerate(items):
        nc = p["context_slice"].stop
        nt = len(p["x"]) - nc
        assert b["mask"][bi].sum() == nc + nt
        assert b["mask"][bi, :nc].all() and b["mask"][bi, M : M + nt].all()
        assert b["target"][bi].sum() == nt and b["target"][bi, M : M + nt].all()
        pad = ~b["mask"][bi]
        assert (b["rel"][bi][pad] == 0).all() and (b["rel"][bi][:, pad] == 0).all()
        assert not b["pinned"][bi][pad].any() and (b["x"][bi][pad] == 0).all()
        np.testing.assert_array_equal(b["x"][bi, M : M + nt].numpy(), p["x"][nc:])
        np.testing.assert_array_equal(b["rel"][bi, :nc, M : M + nt].numpy(), p["rel"][:nc, nc:])


def test_truncation_counts(scene):
    _, episodes = scene
    layout = TokenLayout(max_lanes=4, max_agents=2)
    dropped = 0
    for ep, k in _tiles(episodes):
        lanes = ep["lanes"][k]
        tok = tile_tokens(lanes, ep["agents"][k, :, -1], ep["agents_valid"][k], layout)
        n, a = len(lanes["points"]), int(ep["agents_valid"][k].sum())
        assert tok["counts"] == {"lanes": min(n, 4), "agents": min(a, 2)}
        assert tok["truncated"] == {"lanes": n - min(n, 4), "agents": a - min(a, 2)}
        dropped += tok["truncated"]["lanes"]
        # the kept lanes are the nearest to the centre (densely sampled polylines)
        p = lanes["points"].astype(np.float64)
        u = np.linspace(0, 1, 64)[:, None]
        dense = p[:, :-1, None] + u * (p[:, 1:, None] - p[:, :-1, None])
        dist = np.linalg.norm(dense.reshape(n, -1, 2), axis=-1).min(1)
        kept = np.zeros(n, bool)
        kept[tok["lane_index"]] = True
        if (~kept).any():
            assert dist[kept].max() <= dist[~kept].min() + 1e-2
        back = tokens_to_tile(tok["x"])
        np.testing.assert_array_equal(back["points"], lanes["points"][tok["lane_index"]])
    assert dropped > 0
    p = outpaint_pair(episodes[0], 0, layout)
    assert len(p["x"]) <= layout.pair_capacity == 12
    assert collate_pairs([p])["x"].shape == (1, 12, TOKEN_DIM)
    assert TokenLayout.from_dict(layout.to_dict()) == layout
    with pytest.raises(ValueError, match="unknown TokenLayout keys"):
        TokenLayout.from_dict({"max_lane": 3})
    with pytest.raises(ValueError, match="max_lanes must be an int >= 1"):
        TokenLayout(max_lanes=0)


def test_pairs_feed_dit_and_meanflow(scene):
    _, episodes = scene
    torch.manual_seed(0)
    layout = TokenLayout(max_lanes=16, max_agents=8)
    b = collate_pairs(
        [outpaint_pair(episodes[0], 0, layout), outpaint_pair(episodes[1], 1, layout)]
    )
    net = EdgeGatedRelationalDiT(
        token_dim=TOKEN_DIM, cond_dim=4, num_relations=len(RELATIONS), width=32, depth=1
    )
    loss, stats = meanflow_loss(
        net, b["x"], b["rel"], b["mask"], b["cond"], pinned=b["pinned"],
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert torch.isfinite(loss)
    loss.backward()
    grads = [p.grad for p in net.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    out = sample_one_step(
        net, torch.randn_like(b["x"]), b["rel"], b["mask"], b["cond"], b["pinned"], b["known"]
    )
    assert torch.equal(out[b["pinned"]], b["known"][b["pinned"]])


def test_bad_input_rejected(scene, tmp_path):
    path, episodes = scene
    bad = tmp_path / "bad.h5"
    shutil.copy(path, bad)
    with h5py.File(bad, "r+") as f:
        meta = json.loads(f.attrs["meta"])
        meta.pop("agent_features")
        f.attrs["meta"] = json.dumps(meta)
    with pytest.raises(ValueError, match="meta lacks 'agent_features'"):
        TilePairs(bad)
    with h5py.File(bad, "r+") as f:
        meta["agent_features"] = ["x", "y", "speed", "cos", "sin", "length", "width", "z"]
        f.attrs["meta"] = json.dumps(meta)
    with pytest.raises(ValueError, match="layout"):
        TilePairs(bad)
    ep = episodes[0]
    lanes = dict(ep["lanes"][0], points=ep["lanes"][0]["points"][:, :16])
    with pytest.raises(ValueError, match=r"lane points must be \(n, 20, 2\)"):
        tile_tokens(lanes, ep["agents"][0, :, -1], ep["agents_valid"][0])
    with pytest.raises(ValueError, match=r"agents_now must be \(A, 7\)"):
        tile_tokens(ep["lanes"][0], ep["agents"][0, :, -1, :6], ep["agents_valid"][0])
    with pytest.raises(ValueError, match=r"episode agents must be \(T, A, H, 7\)"):
        outpaint_pair(dict(ep, agents=ep["agents"][..., :6]), 0)
    # a tile with no lane: its pairs are skipped and counted
    empty = {key: v[:0] for key, v in ep["lanes"][2].items()}
    ep2 = dict(ep, lanes=[*ep["lanes"][:2], empty, *ep["lanes"][3:]])
    ks, skipped = pair_steps(ep2)
    assert skipped["empty_tile"] == 2 and 1 not in ks and 2 not in ks
    with pytest.raises(ValueError, match="tile 2 has no lane"):
        outpaint_pair(ep2, 1)
    with pytest.raises(ValueError, match="k must be an int"):
        outpaint_pair(ep, len(ep["t"]) - 1)


# ------------------------------------------------------------------ generation blocks
def test_lane_successors_rule(scene):
    x = np.linspace(0.0, 10.0, 20)
    a = np.stack([x, np.zeros(20)], -1)  # along +x, ends at (10, 0)
    b = a + [10.0, 0.2]  # starts 0.2 m from a's end, same heading: a -> b
    c = a[::-1]  # oncoming: starts at a's end and ends at its start, heading -x
    d = a + [10.6, 0.0]  # 0.6 m gap: too far
    turn = np.stack([10.0 + 5 * np.sin(np.linspace(0, 1.5, 20)), 5 - 5 * np.cos(
        np.linspace(0, 1.5, 20))], -1)  # fmt: skip
    edges = lane_successors(np.stack([a, b, c, d, turn]))
    assert edges.dtype == np.int64 and edges.shape[1] == 2
    assert set(map(tuple, edges.tolist())) == {(0, 1), (0, 4)}
    assert lane_successors(np.zeros((0, 20, 2))).shape == (0, 2)
    # within a tile it reproduces the file's succ edges exactly
    _, episodes = scene
    for ep, k in _tiles(episodes):
        lanes = ep["lanes"][k]
        want = lanes["edge_index"][lanes["edge_type"] == EDGE_TYPES.index("succ")]
        got = lane_successors(lanes["points"])
        assert set(map(tuple, got.tolist())) == set(map(tuple, want.tolist()))
    with pytest.raises(ValueError, match=r"shape \(n, P, 2\)"):
        lane_successors(np.zeros((3, 20)))
    with pytest.raises(ValueError, match="NaN"):
        lane_successors(np.full((1, 20, 2), np.nan))


def test_generation_block_hides_target_and_pins_seams(scene):
    _, episodes = scene
    lay = GENERATOR_LAYOUT
    L, A = lay.max_lanes, lay.max_agents
    M = L + A
    ends, matched = set(), 0
    for ep in episodes:
        for k in pair_steps(ep)[0]:
            b = generation_pair(ep, k)
            step = np.asarray(DIRECTIONS[b["cond"][:4].argmax()])
            assert b["cond"].sum() == 1 and b["cond"][FIRST_TILE] == 0
            rel, nc = b["rel"], b["n_context"]
            assert b["x"].shape == (2 * M, TOKEN_DIM) and rel.shape == (2 * M, 2 * M)
            # fixed target block: every slot real; its internal relations hidden
            assert b["mask"][M:].all() and b["mask"][:nc].all() and not b["mask"][nc:M].any()
            tt = rel[M:, M:]
            assert (np.diag(tt) == R["self"]).all() and (tt[~np.eye(M, dtype=bool)] == 0).all()
            assert np.isin(rel[:nc, M:], [R["context"], R["seam"]]).all()
            np.testing.assert_array_equal(rel[:nc, M:], rel[M:, :nc].T)
            # the ego (agent 0) is in neither tile's tokens
            n_ctx_agents = int(ep["agents_valid"][k].sum()) - 1
            assert b["counts"]["context"]["agents"] == min(n_ctx_agents, A)
            assert b["counts"]["target"]["agents"] == int(ep["agents_valid"][k + 1].sum()) - 1
            others = ep["agents"][k + 1, 1:, -1][ep["agents_valid"][k + 1, 1:]]
            na = len(others)
            back = tokens_to_tile(b["x"][M + L :], layout=lay)["agents"]
            np.testing.assert_allclose(back, others, rtol=1e-6, atol=1e-5)
            assert (b["x"][M + L :, IS_AGENT] == 1).sum() == b["counts"]["target"]["agents"]
            # typed slots: lane slots pin the agent part to 0, agent slots the lane part
            assert b["pinned"][M : M + L, 46:].sum(1).min() == 8
            assert b["pinned"][M + L :, :46].all() and b["pinned"][M + L :, IS_LANE].all()
            assert (b["x"][M : M + L, 46:53] == 0).all()
            assert (b["x"][M : M + L, IS_AGENT] == 0).all()
            assert (b["x"][M + L + na :] == 0).all()  # empty agent slots
            # seam slots: derived from the context alone, pinned to its endpoints
            ctx = ep["lanes"][k]["points"].astype(np.float64) - 64.0 * step
            axis = 0 if step[0] else 1
            on_end = np.abs(ctx[:, -1, axis] + 32 * step[axis]) < 1e-2
            on_start = np.abs(ctx[:, 0, axis] + 32 * step[axis]) < 1e-2
            S = b["n_seam"]
            assert (b["seam_end"][:S] >= 0).all() and (b["seam_end"][S:] == -1).all()
            assert sum(len(c) for c in b["seam_context"]) == on_end.sum() + on_start.sum()
            for s in range(S):
                end = b["seam_end"][s]
                cols = slice(0, 2) if end == 0 else slice(38, 40)
                assert b["pinned"][M + s, cols].all()
                for i in b["seam_context"][s]:
                    assert rel[i, M + s] == R["seam"]
                    np.testing.assert_array_equal(b["seam_pin"][s], ctx[i, -1 if end == 0 else 0])
                np.testing.assert_array_equal(
                    b["x"][M + s, cols].astype(np.float64) * 32, b["seam_pin"][s]
                )
                ends.add(int(end))
            assert (rel[:nc, M:] == R["seam"]).sum() == sum(len(c) for c in b["seam_context"])
            # ground truth fills the slots: a matched seam slot continues the context lane
            for s in range(S):
                if b["x"][M + s, IS_LANE] == 1:
                    matched += 1
            assert b["matching"]["seam_matched"] + b["matching"]["seam_empty"] == S
            n_lanes = len(ep["lanes"][k + 1]["points"])
            assert b["counts"]["target"]["lanes"] == n_lanes == (b["x"][M:, IS_LANE] == 1).sum()
            np.testing.assert_array_equal(b["known"], b["x"])
            # the same block without a target (sampling) has the same relations and pins
            blk = generation_block(episode_tile(ep, k), int(b["cond"][:4].argmax()))
            np.testing.assert_array_equal(blk["rel"], rel)
            np.testing.assert_array_equal(blk["pinned"], b["pinned"])
            np.testing.assert_array_equal(blk["mask"], b["mask"])
            assert (blk["x"][M:][~blk["pinned"][M:]] == 0).all()  # empty slots
    assert ends == {0, 1} and matched > 0
    # first tile: no context, the 5th condition slot
    f = generation_pair(episodes[0], None)
    assert f["cond"][FIRST_TILE] == 1 and f["cond"].sum() == 1 and f["n_seam"] == 0
    assert not f["mask"][:M].any() and f["mask"][M:].all()
    assert f["counts"]["target"]["lanes"] == len(episodes[0]["lanes"][0]["points"])


def test_seam_frame_writes_seam_lanes_in_their_seams_frame(scene):
    """With ``seam_frame`` a seam slot's lane is the tile-frame lane rotated and shifted
    into its seam's frame (pin at 0, x along the lane it continues): the data's roads go
    on smoothly across seams, so every true seam lane leaves its pin along +x."""
    _, episodes = scene
    lay = TokenLayout(**{**GENERATOR_LAYOUT.to_dict(), "seam_frame": True})
    M = lay.max_lanes + lay.max_agents
    # a layout saved before the field existed means the tile frame
    old = {k: v for k, v in GENERATOR_LAYOUT.to_dict().items() if k != "seam_frame"}
    assert TokenLayout.from_dict(old).seam_frame is False
    with pytest.raises(ValueError, match="seam_frame must be a bool"):
        TokenLayout(seam_frame="yes")
    n_lanes, headings = 0, []
    for ep in episodes:
        for k in pair_steps(ep)[0]:
            a, b = generation_pair(ep, k), generation_pair(ep, k, lay)
            for key in ("rel", "mask", "cond", "seam_end", "seam_pin"):
                np.testing.assert_array_equal(a[key], b[key])
            S = b["n_seam"]
            # a seam slot also pins the width of the lane it continues
            attrs = [40]  # WIDTH
            more = b["pinned"] & ~a["pinned"]
            assert more[M : M + S, attrs].all() and more.sum() == S
            src = b["seam_token"]
            np.testing.assert_array_equal(b["x"][M : M + S, attrs], b["x"][src][:, attrs])
            np.testing.assert_array_equal(a["x"][M + S :], b["x"][M + S :])  # other slots
            np.testing.assert_array_equal(b["known"], b["x"])
            for s in range(S):
                end = b["seam_end"][s]
                tangent = b["seam_tangent"][s]
                assert abs(np.hypot(*tangent) - 1) < 1e-12
                pin_cols = slice(0, 2) if end == 0 else slice(38, 40)
                assert (b["x"][M + s, pin_cols] == 0).all()  # the pin is the origin
                if b["x"][M + s, IS_LANE] < 0.5:
                    assert (b["x"][M + s, :40] == 0).all()  # an empty slot has no lane
                    continue
                np.testing.assert_array_equal(b["x"][M + s, attrs], a["x"][M + s, attrs])
                back = to_seam_frame(b["x"][M + s, :40], b["seam_pin"][s], tangent, lay, True)
                want = a["x"][M + s, :40].astype(np.float64)
                want[pin_cols] = b["seam_pin"][s] / 32  # the pinned value, exact
                np.testing.assert_allclose(back, want, atol=1e-6)
                pts = b["x"][M + s, :40].reshape(20, 2).astype(np.float64)
                d = pts[1] - pts[0] if end == 0 else pts[-1] - pts[-2]
                headings.append(np.degrees(np.arctan2(d[1], d[0])))
                n_lanes += 1
    assert n_lanes > 10
    assert np.abs(headings).max() < 5.0  # straight on, whichever way the road runs
    # the frame change is a rotation and a shift: its inverse undoes it
    cols = np.random.default_rng(0).normal(size=40)
    t = np.array([0.6, 0.8])
    there = to_seam_frame(cols, np.array([3.0, -7.0]), t, lay)
    np.testing.assert_allclose(to_seam_frame(there, np.array([3.0, -7.0]), t, lay, True), cols)
    np.testing.assert_allclose(to_seam_frame(np.array([3.0, -7.0]) / 32, [3.0, -7.0], t, lay), 0)


def test_generation_block_bad_input(scene):
    _, episodes = scene
    tile = episode_tile(episodes[0], 0)
    with pytest.raises(ValueError, match="context and direction go together"):
        generation_block(None, 0)
    with pytest.raises(ValueError, match="context and direction go together"):
        generation_block(tile, None)
    for d in (4, -1, 1.0, True):
        with pytest.raises(ValueError, match=r"direction must be an int in \[0, 4\)"):
            generation_block(tile, d)
    with pytest.raises(ValueError, match=r"context\['points'\] must be \(n, 20, 2\)"):
        generation_block(dict(tile, points=tile["points"][:, :19]), 0)
    with pytest.raises(ValueError, match=r"context\['agents'\] has NaN"):
        generation_block(dict(tile, agents=np.full((1, 7), np.nan)), 0)
    with pytest.raises(ValueError, match="lacks"):
        generation_block({"points": tile["points"]}, 0)
    with pytest.raises(TypeError, match="must be a dict"):
        generation_block([1, 2], 0)
