"""The driving metrics of a scene file, aggregated over its episodes and tiles.

``scene_metrics(path)`` (``simsci driving metrics FILE``) reads tiles with
:func:`read_scene` and applies :mod:`.metrics` per tile: collisions and off-road of the
agents at the tile's time (tile frame, so float32 rounding stays at the millimetre),
kinematic infeasibility of their histories (10 Hz), agents per km of lane, lane-graph
statistics of the episode graph and the gaps at tile seams. It is what VectorWorld's
benchmarks compare between generated and ground-truth worlds; ``lane_stats`` returns
the per-node statistics for the Fréchet / MMD distances.
"""

from __future__ import annotations

import numpy as np

from simsci.driving import metrics

__all__ = ["scene_metrics", "lane_stats"]


def _open(path_or_dataset):
    if isinstance(path_or_dataset, (str, bytes)) or hasattr(path_or_dataset, "__fspath__"):
        import simsci.data

        return simsci.data.open(path_or_dataset)
    return path_or_dataset


def lane_stats(path_or_dataset, *, episodes: int | None = None) -> dict[str, np.ndarray]:
    """Per-node lane statistics pooled over episodes: ``length``, ``curvature``,
    ``degree``, ``lateral_degree`` (1-D arrays, one entry per lane piece)."""
    from simsci.driving._tiles import read_scene

    ds = _open(path_or_dataset)
    n = len(ds) if episodes is None else min(int(episodes), len(ds))
    out: dict[str, list] = {k: [] for k in ("length", "curvature", "degree", "lateral_degree")}
    for i in range(n):
        g = read_scene(ds, i)["graph"]
        st = metrics.lane_graph_stats(
            g["nodes"]["points"], g["edges"]["index"], g["edges"]["type"], g["num_nodes"]
        )
        for k in out:
            out[k].append(np.asarray(st[k], dtype=np.float64))
    return {k: np.concatenate(v) if v else np.zeros(0) for k, v in out.items()}


def scene_metrics(path_or_dataset, *, episodes: int | None = 32) -> dict:
    """Metrics of (up to ``episodes``) episodes of a scene file, as a JSON-able dict."""
    from simsci.driving._tiles import read_scene

    ds = _open(path_or_dataset)
    if len(ds) == 0:
        raise ValueError("the scene file has no episodes")
    n = len(ds) if episodes is None else min(int(episodes), len(ds))
    coll = agents_total = off = 0
    infeasible = pairs = 0
    density, gaps = [], []
    tiles = 0
    for i in range(n):
        ep = read_scene(ds, i)
        agents = np.asarray(ep["agents"], dtype=np.float64)  # T, A, H, 7
        valid = np.asarray(ep["agents_valid"], dtype=bool)  # T, A
        hist = np.asarray(ep["agents_history_valid"], dtype=bool)  # T, A, H
        for k, lanes in enumerate(ep["lanes"]):
            tiles += 1
            now = agents[k, :, -1]
            v = valid[k]
            coll += int(np.asarray(metrics.collisions(now[None], v[None]))[0].sum())
            agents_total += int(v.sum())
            if len(lanes["points"]):
                off += int(
                    np.asarray(metrics.offroad(now, v, lanes["points"], lanes["width"])).sum()
                )
                density.append(float(metrics.agents_per_km(int(v.sum()), lanes["points"])))
            h = hist[k] & v[:, None]
            bad = np.asarray(metrics.infeasible_steps(agents[k], h, 0.1))
            both = h[:, 1:] & h[:, :-1]
            infeasible += int((bad & both).sum())
            pairs += int(both.sum())
        g = ep["graph"]
        gaps.append(
            np.asarray(
                metrics.episode_seam_gaps(g["nodes"]["points"], g["nodes"]["tile"], ep["tile_pose"])
            )
        )
    stats = lane_stats(ds, episodes=n)
    gaps_all = np.concatenate(gaps) if gaps else np.zeros(0)
    matched = gaps_all[np.isfinite(gaps_all)]
    return {
        "episodes": n,
        "tiles": tiles,
        "agents": agents_total,
        "collision_rate": coll / max(agents_total, 1),
        "offroad_rate": off / max(agents_total, 1),
        "infeasible_step_rate": infeasible / max(pairs, 1),
        "history_steps": pairs,
        "agents_per_km_mean": float(np.mean(density)) if density else float("nan"),
        "lane_pieces": int(len(stats["length"])),
        "lane_length_mean_m": float(stats["length"].mean()) if len(stats["length"]) else 0.0,
        "lane_curvature_mean": float(stats["curvature"].mean()) if len(stats["length"]) else 0.0,
        "lane_degree_mean": float(stats["degree"].mean()) if len(stats["length"]) else 0.0,
        "seam_gap_median_m": float(np.median(matched)) if matched.size else float("nan"),
        "seam_gap_p95_m": float(np.percentile(matched, 95)) if matched.size else float("nan"),
        "seam_endpoints_unmatched": int((~np.isfinite(gaps_all)).sum()),
    }
