"""Map fidelity of the tile generator against held-out ground truth.

:func:`tile_metrics` compares generated tiles with ground-truth ones (lane-graph
statistics, agent counts, seams); :func:`evaluate_tile_generator` generates every
outpainting pair of a scene file's episodes (and their first tiles) and measures them,
optionally after the streaming world's own decoding (seams closed, lane graph completed),
i.e. the map as driven. Its own module because it sits above both the generator
(:mod:`._outpaint`) and the world's decoding rules (:mod:`._lanegraph`, :mod:`._world`).
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
import torch

from simsci import data as sdata
from simsci.driving import arc_length, read_scene
from simsci.driving.metrics import compare_lane_stats, frechet_distance, lane_graph_stats
from simsci.models.vectorworld._lanegraph import complete_lanes, points_near
from simsci.models.vectorworld._outpaint import (
    TileGenerator,
    _layout_from,
    close_seams,
    has_ego_lane,
)
from simsci.models.vectorworld._tokens import (
    DIRECTIONS,
    LANE_POINTS,
    TILE_SIZE,
    _direction,
    check_tile,
    episode_tile,
    lane_successors,
    pair_steps,
)
from simsci.models.vectorworld._world import _physical

__all__ = ["evaluate_tile_generator", "scene_pairs", "tile_metrics"]


def _points(tile) -> np.ndarray:
    return np.asarray(tile["points"], np.float64).reshape(-1, LANE_POINTS, 2)


def _graph_stats(tiles, successors):
    """:func:`lane_graph_stats` of ``tiles``, one graph per tile; ``successors``: each
    tile's :func:`lane_successors` edges."""
    pts, ei, batch, off = [], [], [], 0
    for g, (t, edges) in enumerate(zip(tiles, successors)):
        p = _points(t)
        pts.append(p)
        ei.append(edges + off)
        batch.append(np.full(len(p), g, np.int64))
        off += len(p)
    points = np.concatenate(pts) if pts else np.zeros((0, LANE_POINTS, 2))
    edges = np.concatenate(ei) if ei else np.zeros((0, 2), np.int64)
    et = np.ones(len(edges), np.int64)  # succ
    return lane_graph_stats(points, edges, et, batch=np.concatenate(batch), num_graphs=len(tiles))


def _lane_chains(points, edges=None) -> int:
    """The lanes of one tile (n, P, 2) counted as chains: pieces joined one to one (a
    piece with one successor in the tile, whose only predecessor it is; ``edges``: its
    :func:`~._tokens.lane_successors`, computed when None) count once. The data splits a
    road's lane into pieces where its road segments meet, a generated tile draws it
    whole, so the two compare by chains, not by pieces."""
    p = np.asarray(points, np.float64).reshape(-1, LANE_POINTS, 2)
    n = len(p)
    edges = lane_successors(p) if edges is None else edges
    if not n or not len(edges):
        return n
    out_deg = np.bincount(edges[:, 0], minlength=n)
    in_deg = np.bincount(edges[:, 1], minlength=n)
    return n - int(((out_deg[edges[:, 0]] == 1) & (in_deg[edges[:, 1]] == 1)).sum())


def _close_pairs(points, gap: float = 2.5, span: float = 15.0, skip: float = 5.0) -> int:
    """Pairs of lanes of one tile (n, P, 2) that run closer than ``gap`` m to each other
    along at least ``span`` m of one of them, its first and last ``skip`` m left out (so
    a fork or a merge, which meet at an end, does not count): near-duplicate lanes, where
    the data puts neighbouring lanes a lane width (~3.5 m) apart. Lanes are resampled
    every metre."""
    dense = []
    for p in np.asarray(points, np.float64).reshape(-1, LANE_POINTS, 2):
        s = arc_length(p)
        q = np.arange(0.0, s[-1] + 1e-9, 1.0)
        dense.append((np.stack([np.interp(q, s, p[:, 0]), np.interp(q, s, p[:, 1])], -1), q))
    count = 0
    for i in range(len(dense)):
        for j in range(i + 1, len(dense)):
            for (a, qa), (b, _) in ((dense[i], dense[j]), (dense[j], dense[i])):
                inner = a[(qa > skip) & (qa < qa[-1] - skip)]
                if len(inner) < span:
                    continue
                if points_near(inner, b, gap) >= span:
                    count += 1
                    break
    return count


def _angle(a: np.ndarray, b: np.ndarray) -> float:
    """The angle between two vectors (degrees; NaN when either is zero)."""
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na <= 1e-9 or nb <= 1e-9:
        return math.nan
    return math.degrees(math.acos(np.clip(a @ b / (na * nb), -1.0, 1.0)))


def _seam_rows(context, direction, tile, layout, smooth_deg):
    """Per context lane endpoint on the shared edge: (gap m, angle deg, turn deg, lateral
    m) to the nearest complementary endpoint of the new tile's lanes on that edge (inf,
    nan, nan, nan when none). ``angle``: between the two lanes' segments at the seam;
    ``turn`` and ``lateral``: how far the new lane departs from going straight on along
    the context lane's tangent at the seam (its far end's heading against that tangent;
    the largest distance of its points from that line)."""
    step = np.asarray(DIRECTIONS[direction], np.float64)
    axis = 0 if step[0] else 1
    edge = -0.5 * TILE_SIZE * step[axis]
    cp = np.asarray(context["points"], np.float64) - TILE_SIZE * step
    tp = np.asarray(tile["points"], np.float64).reshape(-1, LANE_POINTS, 2)
    rows = []
    for col, tcol in ((-1, 0), (0, -1)):  # context end -> new start; context start -> new end
        on = np.abs(cp[:, col, axis] - edge) <= layout.edge_tol
        t_on = np.abs(tp[:, tcol, axis] - edge) <= layout.seam_tol
        for i in np.flatnonzero(on):
            q = cp[i, col]
            if not t_on.any():
                rows.append((math.inf, math.nan, math.nan, math.nan))
                continue
            d = np.sqrt(((tp[:, tcol] - q) ** 2).sum(-1))
            d = np.where(t_on, d, np.inf)
            j = int(d.argmin())
            c_dir = cp[i, -1] - cp[i, -2] if col == -1 else cp[i, 1] - cp[i, 0]
            t_dir = tp[j, 1] - tp[j, 0] if tcol == 0 else tp[j, -1] - tp[j, -2]
            far = tp[j, -1] - tp[j, -2] if tcol == 0 else tp[j, 1] - tp[j, 0]
            lateral = math.nan
            nc = np.linalg.norm(c_dir)
            if nc > 1e-9:
                rel = tp[j] - q
                lateral = float(np.abs(rel[:, 0] * c_dir[1] - rel[:, 1] * c_dir[0]).max() / nc)
            rows.append((float(d[j]), _angle(c_dir, t_dir), _angle(c_dir, far), lateral))
    return rows


def tile_metrics(
    generated: list,
    truth: list,
    contexts: list | None = None,
    directions: list | None = None,
    *,
    layout=None,
    smooth_deg: float = 15.0,
) -> dict:
    """Map fidelity of generated tiles against ground-truth tiles (both own frames).

    Lane graphs (edges from :func:`lane_successors` on both sides, so they compare
    alike) are summarised by :func:`~simsci.driving.metrics.lane_graph_stats`
    and compared per statistic by
    :func:`~simsci.driving.metrics.compare_lane_stats` (squared Fréchet and MMD²);
    ``lane_stats_distance`` = the mean over statistics of Fréchet² / Var(truth) (scale-free;
    0 = identical Gaussians). ``agent_count_frechet``: Fréchet² of agents per tile.
    Per tile, beside ``lanes_per_tile`` (pieces): ``lane_chains_per_tile``
    (:func:`_lane_chains`), ``lane_m_per_tile`` (centreline metres) and
    ``close_lane_pairs_per_tile`` (near-duplicate lanes, :func:`_close_pairs`); ``truth_*``
    the same of the truth.
    With ``contexts`` / ``directions`` (None entries = first tiles): seam statistics over
    every context lane endpoint on the shared edge: ``seam_gap_median`` (m; inf when the
    new tile has no lane continuing it), ``seam_continued`` (share with a gap <=
    ``seam_tol``), ``seam_smooth`` (share of continued ones whose new lane's first
    segment turns by at most ``smooth_deg`` degrees from the context lane's last one: the
    2nd point continues smoothly), ``seam_angle_median`` (deg), ``seam_turn_median`` /
    ``_p90`` (deg) and ``seam_lateral_median`` / ``_p90`` (m) over continued ones: how far
    the new lane departs from going straight on (:func:`_seam_rows`); the same for the truth as
    ``truth_seam_*``; first tiles: ``ego_lane`` (share with :func:`has_ego_lane`).
    """
    lay = _layout_from(layout)
    if len(generated) != len(truth) or not generated:
        raise ValueError(
            f"generated ({len(generated)}) and truth ({len(truth)}) must be equally long, "
            "non-empty lists of tile dicts"
        )
    gen = [check_tile(t, f"generated[{i}]") for i, t in enumerate(generated)]
    tru = [check_tile(t, f"truth[{i}]") for i, t in enumerate(truth)]
    n_gen = np.array([len(t["points"]) for t in gen])
    n_tru = np.array([len(t["points"]) for t in tru])
    a_gen = np.array([len(t["agents"]) for t in gen], np.float64)
    a_tru = np.array([len(t["agents"]) for t in tru], np.float64)
    out = {
        "tiles": len(gen),
        "with_lanes": float((n_gen > 0).mean()),
        "lanes_per_tile": float(n_gen.mean()),
        "truth_lanes_per_tile": float(n_tru.mean()),
        "agents_per_tile": float(a_gen.mean()),
        "truth_agents_per_tile": float(a_tru.mean()),
    }
    if len(gen) >= 2:
        out["agent_count_frechet"] = frechet_distance(a_tru, a_gen)
    e_gen = [lane_successors(_points(t)) for t in gen]
    e_tru = [lane_successors(_points(t)) for t in tru]
    s_gen, s_tru = _graph_stats(gen, e_gen), _graph_stats(tru, e_tru)
    for prefix, tiles, edges, stats in (("", gen, e_gen, s_gen), ("truth_", tru, e_tru, s_tru)):
        chains = [_lane_chains(t["points"], e) for t, e in zip(tiles, edges)]
        out[f"{prefix}lane_chains_per_tile"] = float(np.mean(chains))
        out[f"{prefix}lane_m_per_tile"] = float(np.sum(stats["length"]) / len(tiles))
        close = [_close_pairs(t["points"]) for t in tiles]
        out[f"{prefix}close_lane_pairs_per_tile"] = float(np.mean(close))
    cmp = compare_lane_stats(s_tru, s_gen)
    out["lane_stats"] = cmp
    norm = []
    for key, row in cmp.items():
        var = float(np.var(np.asarray(s_tru[key], np.float64)))
        if math.isfinite(row["frechet"]) and var > 0:
            norm.append(row["frechet"] / var)
    out["lane_stats_distance"] = float(np.mean(norm)) if norm else math.nan
    if contexts is not None:
        if directions is None or len(contexts) != len(gen) or len(directions) != len(gen):
            raise ValueError("contexts and directions must be given together, one per tile")
        rows = {"gen": [], "truth": []}
        ego = []
        for b, (c, d) in enumerate(zip(contexts, directions)):
            if c is None:
                ego.append(has_ego_lane(gen[b]))
                continue
            c = check_tile(c, f"contexts[{b}]")
            rows["gen"] += _seam_rows(c, int(d), gen[b], lay, smooth_deg)
            rows["truth"] += _seam_rows(c, int(d), tru[b], lay, smooth_deg)
        for name, prefix in (("gen", "seam"), ("truth", "truth_seam")):
            r = np.asarray(rows[name], np.float64).reshape(-1, 4)
            out[f"{prefix}_endpoints"] = len(r)
            if len(r):
                cont = r[:, 0] <= lay.seam_tol
                ang = r[cont, 1]
                for key, col in (("turn", 2), ("lateral", 3)):
                    v = r[cont, col]
                    v = v[np.isfinite(v)]
                    out[f"{prefix}_{key}_median"] = float(np.median(v)) if len(v) else math.nan
                    out[f"{prefix}_{key}_p90"] = float(np.percentile(v, 90)) if len(v) else math.nan
                out[f"{prefix}_gap_median"] = float(np.median(r[:, 0]))
                out[f"{prefix}_continued"] = float(cont.mean())
                out[f"{prefix}_smooth"] = (
                    float((ang[np.isfinite(ang)] <= smooth_deg).mean()) if cont.any() else math.nan
                )
                out[f"{prefix}_angle_median"] = (
                    float(np.nanmedian(ang)) if np.isfinite(ang).any() else math.nan
                )
        if ego:
            out["first_tiles"] = len(ego)
            out["ego_lane"] = float(np.mean(ego))
    return out


def scene_pairs(path, episodes, *, first_tiles: bool = False, max_pairs: int | None = None):
    """The outpainting pairs (tile k -> k+1) of ``episodes`` of a scene file:
    ``(contexts, directions, truths, first_tiles)``, the last each episode's tile 0 (empty
    unless ``first_tiles``). ``max_pairs`` keeps that many pairs, evenly spaced."""
    ds = sdata.open(os.fspath(path))
    ctxs, dirs, truth, firsts = [], [], [], []
    try:
        for i in episodes:
            ep = read_scene(ds, int(i))
            for k in pair_steps(ep)[0]:
                ctxs.append(episode_tile(ep, k))
                dirs.append(_direction(ep, k))
                truth.append(episode_tile(ep, k + 1))
            if first_tiles:
                firsts.append(episode_tile(ep, 0))
    finally:
        ds.close()
    if max_pairs is not None and len(ctxs) > max_pairs:
        keep = sorted(set(np.linspace(0, len(ctxs) - 1, max_pairs).round().astype(int).tolist()))
        ctxs, dirs, truth = ([x[j] for j in keep] for x in (ctxs, dirs, truth))
    return ctxs, dirs, truth, firsts


def evaluate_tile_generator(
    model: TileGenerator,
    path,
    episodes,
    *,
    steps: int = 1,
    mode: str = "meanflow",
    batch_size: int = 64,
    max_pairs: int | None = None,
    first_tiles: bool = True,
    max_first: int | None = None,
    seed: int = 0,
    max_tries: int = 3,
    smooth: bool = True,
    complete: bool = False,
) -> dict:
    """Generate every pair (tile k -> k+1) of ``episodes`` of a scene file from its
    ground-truth context (and, with ``first_tiles``, each episode's tile 0 from no
    context) and compare with the ground truth by :func:`tile_metrics`. ``max_pairs``
    caps the pairs (evenly spaced), ``max_first`` the first tiles. ``complete``: each
    tile first goes through what the streaming world does to it (clipped to its square,
    seams closed against the context, lane graph completed:
    :func:`~._lanegraph.complete_lanes`), so the figures are those of the driven map;
    the completion counts are summed under ``lanes_*``. Returns the metrics plus the
    summed ``generate`` stats (``resampled``, ``empty``, ``no_ego_lane``) and
    ``seconds``."""
    ctxs, dirs, truth, firsts = scene_pairs(
        path, episodes, first_tiles=first_tiles, max_pairs=max_pairs
    )
    if max_first is not None:
        firsts = firsts[:max_first]
    ctxs += [None] * len(firsts)
    dirs += [None] * len(firsts)
    truth += firsts
    gen = torch.Generator(device=model._dtype_device()[1]).manual_seed(seed)
    tiles, totals = [], {"resampled": 0, "empty": 0, "no_ego_lane": 0}
    t0 = time.perf_counter()
    was = model.training
    model.eval()
    try:
        for lo in range(0, len(ctxs), batch_size):
            out, st = model.generate(
                ctxs[lo : lo + batch_size],
                dirs[lo : lo + batch_size],
                steps=steps,
                mode=mode,
                generator=gen,
                max_tries=max_tries,
                smooth=smooth,
                continue_seams=False,  # the network's own seams, as trained
            )
            tiles += out
            for key in totals:
                totals[key] += st[key]
    finally:
        model.train(was)
    if complete:
        done = []
        for tile, ctx, d in zip(tiles, ctxs, dirs):
            near = [] if ctx is None else [(ctx, d)]
            tile = _physical(tile)
            if near:
                tile, _ = close_seams(tile, near, max_lanes=model.layout.max_lanes)
            tile, counts = complete_lanes(tile, near, max_lanes=model.layout.max_lanes)
            for key, value in counts.items():
                totals[f"lanes_{key}"] = totals.get(f"lanes_{key}", 0) + value
            done.append(tile)
        tiles = done
    seconds = time.perf_counter() - t0
    metrics = tile_metrics(tiles, truth, ctxs, dirs, layout=model.layout)
    return {
        **metrics,
        **totals,
        "seconds": seconds,
        "steps": steps,
        "mode": mode,
        "complete": bool(complete),
    }
