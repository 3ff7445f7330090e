"""Lane representation of VectorWorld's tile tokens: 20 free points against a cubic Bézier.

Claim checked (issue 23, part 3): a smooth low-dimensional lane parametrisation (the 4
control points of a cubic Bézier, ``TokenLayout(lane_repr="bezier")``) makes the tile
distribution easier to learn than the 20 free points per lane (``"points"``), shown as
validation loss against training time at the same budget.

Both runs: the same scene file and held-out episodes (the last 10 %), the same seed, the
same network (:class:`~simsci.models.vectorworld.TileGenerator`, only ``lane_repr``
differs; the token width is the same, a Bézier lane's 32 unused columns are pinned to
0), the same steps, batch and schedule, one CPU thread, one after the other.

- **Fit of the representation**: ground-truth lanes of the file through
  :func:`fit_bezier` / :func:`bezier_points` (end points exact): max, p99, p95 and median
  of each lane's largest point error (m), and the lanes' heading change.
- **Validation loss against time** (``runs[repr]["curve"]``): at every ``--val-every``
  steps the weights are kept and afterwards generate the held-out tiles (every held-out
  pair from its ground-truth context, at most ``--pairs``, and ``--pairs / 4`` first
  tiles; one network call, one draw), compared with the truth by :func:`tile_metrics`:
  ``lane_stats_distance`` (mean over lane-graph statistics of Fréchet² / Var(truth)),
  ``lane_less``, ``lanes_ratio`` (lanes per tile over the truth's), ``ego_lane``;
  ``time_s`` is the Trainer's clock at that step (training and its validation, not
  these sample evaluations). Beside them the Trainer's validation figures:
  ``val_mse_flow`` (the MeanFlow flow-matching error, a mean over a token's unpinned
  features: 47 per lane slot with points, 15 with a Bézier, so not comparable across
  representations) and ``val_lane_rmse_m`` (:meth:`TileGenerator.lane_error`: the lane
  polylines estimated from a noised block against the truth, in metres; not comparable
  either: at one noise level 20 noised points, redundant for a curve of 8 degrees of
  freedom, average their noise out and tell more about the lane than 4 noised control
  points, so it favours the points; ``lane_rmse_by_t`` gives it per noise level for the
  final models).
- **Final samples** (``samples``): the final model, one draw (``tries_1``, no
  resampling: the raw rate of lane-less tiles) and three (``tries_3``, what the world
  does); ``lane_less`` (target <= 2 %), ``lanes_per_tile`` against the truth's (target
  within 15 %), ``lane_stats_distance`` against held-out truth (target <= 3x
  ``truth_halves_distance``, the same distance between two halves of the held-out
  truth), ``ego_lane`` of first tiles, seam figures.

Usage: ``python benchmarks/bench_vectorworld_repr.py [--quick]``; the scene file is built
(seeded) under ``runs/vectorworld_repr/`` when ``--data`` is not given. Writes
``benchmarks/results/vectorworld_repr_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from simsci.bench import code_version, out_path, write_result

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
REPRS = ("points", "bezier")


def build_data(path: Path, episodes: int, seed: int) -> Path:
    from simsci.driving import make_scenes

    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.h5")
        tmp.unlink(missing_ok=True)
        make_scenes(episodes, out=tmp, seed=seed)
        tmp.rename(path)
    return path


def held_out(path, fraction: float = 0.1) -> list[int]:
    """The episodes train_tile_generator holds out (its last ``fraction``)."""
    from simsci import data as sdata

    ds = sdata.open(path)
    n = len(ds)
    ds.close()
    k = max(1, round(fraction * n))
    return list(range(n - k, n))


def fit_error(path) -> dict:
    """How well one cubic Bézier holds the file's ground-truth lanes (all of them)."""
    from simsci import data as sdata
    from simsci.driving import read_scene
    from simsci.models.vectorworld._tokens import bezier_points, fit_bezier

    ds = sdata.open(path)
    try:
        pts = [np.asarray(lanes["points"], np.float64) for i in range(len(ds))
               for lanes in read_scene(ds, i)["lanes"]]  # fmt: skip
    finally:
        ds.close()
    p = np.concatenate(pts)
    err = np.sqrt(((bezier_points(fit_bezier(p)) - p) ** 2).sum(-1)).max(1)  # per lane, m
    d = np.diff(p, axis=1)
    heading = np.unwrap(np.arctan2(d[..., 1], d[..., 0]), axis=1)
    turn = np.degrees(np.abs(heading[:, -1] - heading[:, 0]))
    length = np.sqrt((d**2).sum(-1)).sum(1)
    q = (100, 99, 95, 50)
    return {
        "lanes": len(p),
        "error_m": dict(zip(("max", "p99", "p95", "median"), np.percentile(err, q).tolist())),
        "turn_deg": dict(zip(("max", "p99", "p95", "median"), np.percentile(turn, q).tolist())),
        "length_m": dict(zip(("max", "p99", "p95", "median"), np.percentile(length, q).tolist())),
    }


class _Snapshots:
    """Copies of the model's weights at every evaluation of a training run, taken when
    the Trainer's first validation batch of an evaluation arrives (a validation step
    after a training step), so the sample metrics of each can be measured afterwards
    without the training clock counting them."""

    def __init__(self):
        self.states: list[dict] = []
        self._last = "train"

    def __enter__(self):
        from simsci.models.vectorworld._outpaint import TileGenerator

        self._cls = TileGenerator
        self._train, self._val = TileGenerator.training_step, TileGenerator.validation_step
        snaps = self

        def training_step(model, batch):
            snaps._last = "train"
            return snaps._train(model, batch)

        def validation_step(model, batch):
            if snaps._last == "train":
                snaps.states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
            snaps._last = "val"
            return snaps._val(model, batch)

        TileGenerator.training_step, TileGenerator.validation_step = training_step, validation_step
        return self

    def __exit__(self, *exc):
        self._cls.training_step, self._cls.validation_step = self._train, self._val


def train_one(lane_repr, data, run_dir: Path, episodes, args) -> dict:
    from simsci.models.vectorworld import train_tile_generator
    from simsci.train import load_model

    shutil.rmtree(run_dir, ignore_errors=True)
    t0 = time.perf_counter()
    with _Snapshots() as snaps:
        summary = train_tile_generator(
            data,
            run_dir,
            steps=args.steps,
            batch_size=args.batch_size,
            lr=args.lr,
            seed=args.seed,
            model_args={
                "width": args.width,
                "depth": args.depth,
                "heads": args.heads,
                "lane_repr": lane_repr,
            },
            val_every=args.val_every,
            max_val_items=args.val_items,
            warmup_steps=min(100, args.steps // 10),
            log_every=min(25, args.val_every),
            resume=False,
        )
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keys = ("val_lane_rmse_m", "val_mse_flow", "val_loss")
    curve = [
        {"step": r["step"], "time_s": r["time"], **{k: r[k] for k in keys if k in r}}
        for r in rows
        if r.get("split") == "val"
    ]
    if len(curve) != len(snaps.states):
        raise RuntimeError(f"{len(curve)} evaluations but {len(snaps.states)} snapshots")
    # the validation curve in samples: each evaluation's weights generate the held-out
    # tiles (one draw, as sample_metrics' tries_1), compared with the truth
    model = load_model(run_dir / "checkpoints" / "last.pt")
    for row, state in zip(curve, snaps.states):
        model.load_state_dict(state)
        row.update(_sample_row(model, data, episodes, args, tries=1))
    print(f"{lane_repr}: {args.steps} steps in {wall:.0f} s; lane-stats distance " + ", ".join(
        f"{c['step']} ({c['time_s']:.0f} s) {c['lane_stats_distance']:.2f}" for c in curve
    ), flush=True)  # fmt: skip
    return {
        "lane_repr": lane_repr,
        "wall_s": wall,
        "train_s": summary.get("train_time"),
        "train_items": summary["train_items"],
        "val_items": summary["val_items"],
        "curve": curve,
        "final_lane_rmse_m": curve[-1]["val_lane_rmse_m"] if curve else math.nan,
        "checkpoint": os.fspath(run_dir / "checkpoints" / "last.pt"),
    }


_SAMPLE_KEYS = (
    "tiles", "with_lanes", "lanes_per_tile", "truth_lanes_per_tile", "lane_stats_distance",
    "ego_lane", "first_tiles", "seam_gap_median", "seam_continued", "seam_smooth",
    "truth_seam_continued", "resampled", "empty", "no_ego_lane", "seconds",
)  # fmt: skip


def error_by_time(checkpoint, data, episodes, args, times=(0.1, 0.25, 0.5, 0.75, 0.9)):
    """:meth:`TileGenerator.lane_error` of the final model at fixed noise levels on the
    held-out blocks (the same items and noise for both representations)."""
    from simsci.models.vectorworld._outpaint import TileSamples, collate_blocks
    from simsci.train import load_model

    model = load_model(checkpoint).eval()
    items = TileSamples(data, episodes, model.layout, p_first=model.p_first)
    keep = np.linspace(0, len(items) - 1, min(len(items), args.val_items)).round().astype(int)
    out = {}
    for t in times:
        torch.manual_seed(args.seed)
        sq = n = 0.0
        for lo in range(0, len(keep), 64):
            batch = collate_blocks([items[int(i)] for i in keep[lo : lo + 64]])
            err = float(model.lane_error(batch, t=torch.full((len(batch["x"]),), t)))
            sq, n = sq + err**2 * len(batch["x"]), n + len(batch["x"])
        out[f"t={t:g}"] = math.sqrt(sq / n)
    print("  lane RMSE by noise level: " + ", ".join(f"{k} {v:.3f} m" for k, v in out.items()))
    return out


def _sample_row(model, data, episodes, args, tries: int) -> dict:
    from simsci.models.vectorworld import evaluate_tile_generator

    r = evaluate_tile_generator(
        model, data, episodes, max_pairs=args.pairs, max_first=args.pairs // 4,
        seed=args.seed, max_tries=tries,
    )  # fmt: skip
    row = {k: r[k] for k in _SAMPLE_KEYS if k in r}
    row["lane_less"] = 1.0 - r["with_lanes"]
    row["lanes_ratio"] = r["lanes_per_tile"] / max(r["truth_lanes_per_tile"], 1e-9)
    return row


def _crossings(pts: np.ndarray) -> int:
    """Lane pairs of one tile whose polylines (n, 20, 2) cross (segments intersecting
    away from their end points: a shared seam or junction point is not a crossing)."""
    a0, d1 = pts[:, :-1], np.diff(pts, axis=1)  # (n, S, 2)
    n, count = len(pts), 0
    for i in range(n):
        for j in range(i + 1, n):
            w = a0[j][None] - a0[i][:, None]  # (S, S, 2)
            p, q = d1[i][:, None], d1[j][None]
            den = p[..., 0] * q[..., 1] - p[..., 1] * q[..., 0]
            with np.errstate(divide="ignore", invalid="ignore"):
                s = (w[..., 0] * q[..., 1] - w[..., 1] * q[..., 0]) / den
                t = (w[..., 0] * p[..., 1] - w[..., 1] * p[..., 0]) / den
            inside = (s > 1e-3) & (s < 1 - 1e-3) & (t > 1e-3) & (t < 1 - 1e-3)
            count += bool((inside & (np.abs(den) > 1e-12)).any())
    return count


def tangles(checkpoint, data, episodes, args) -> dict:
    """Crossing lanes ("tangles") in the final model's outpainted tiles (one draw, the
    network's own seams) against the held-out truth: crossing lane pairs per tile, share
    of tiles with one, lane length."""
    from simsci.models.vectorworld._evaluate import scene_pairs
    from simsci.train import load_model

    ctxs, dirs, truth, _ = scene_pairs(data, episodes, max_pairs=args.pairs)
    model = load_model(checkpoint).eval()
    tiles, _ = model.generate(
        ctxs, dirs, generator=torch.Generator().manual_seed(args.seed), max_tries=1,
        continue_seams=False,
    )  # fmt: skip

    def stats(ts):
        cross = np.array([_crossings(np.asarray(t["points"], np.float64)) for t in ts])
        pts = [np.asarray(t["points"], np.float64) for t in ts if len(t["points"])]
        length = np.concatenate([np.sqrt((np.diff(p, axis=1) ** 2).sum(-1)).sum(1) for p in pts])
        return {
            "crossings_per_tile": float(cross.mean()),
            "tiles_with_crossing": float((cross > 0).mean()),
            "lane_length_median_m": float(np.median(length)),
        }

    out = {"generated": stats(tiles), "truth": stats(truth)}
    g, t = out["generated"], out["truth"]
    print(f"  crossings/tile {g['crossings_per_tile']:.2f} (truth {t['crossings_per_tile']:.2f}), "
          f"tiles with one {g['tiles_with_crossing']:.2f} (truth {t['tiles_with_crossing']:.2f})",
          flush=True)  # fmt: skip
    return out


def sample_metrics(checkpoint, data, episodes, args) -> dict:
    from simsci.train import load_model

    model = load_model(checkpoint)
    out = {}
    for tries in (1, 3):
        row = out[f"tries_{tries}"] = _sample_row(model, data, episodes, args, tries)
        print(f"  max_tries={tries}: lane-less {row['lane_less']:.3f}, lanes/tile "
              f"{row['lanes_per_tile']:.2f} (truth {row['truth_lanes_per_tile']:.2f}), lane-stats "
              f"distance {row['lane_stats_distance']:.3f}, ego lane {row.get('ego_lane')}",
              flush=True)  # fmt: skip
    return out


def truth_halves(data, episodes, pairs: int) -> dict:
    """lane_stats_distance between two halves of the held-out truth tiles (the pairs'
    targets, evenly spaced, alternating): the floor a generator is measured against."""
    from simsci import data as sdata
    from simsci.driving import read_scene
    from simsci.models.vectorworld._evaluate import tile_metrics
    from simsci.models.vectorworld._tokens import episode_tile, pair_steps

    ds = sdata.open(data)
    tiles = []
    try:
        for i in episodes:
            ep = read_scene(ds, int(i))
            tiles += [episode_tile(ep, k + 1) for k in pair_steps(ep)[0]]
    finally:
        ds.close()
    if len(tiles) > 2 * pairs:
        keep = np.linspace(0, len(tiles) - 1, 2 * pairs).round().astype(int)
        tiles = [tiles[j] for j in sorted(set(keep.tolist()))]
    a, b = tiles[0::2], tiles[1::2]
    n = min(len(a), len(b))
    m = tile_metrics(a[:n], b[:n])
    return {"tiles_per_half": n, "lane_stats_distance": m["lane_stats_distance"],
            "lanes_per_tile": [m["lanes_per_tile"], m["truth_lanes_per_tile"]]}  # fmt: skip


def summarise(result: dict) -> dict:
    """Both representations side by side: the final samples, the mean of the curve's last
    three evaluations (the sample metrics are noisy), and the training time at which the
    Bézier run first reached the points run's final level."""
    runs = result["runs"]

    def last3(r, key):
        vals = [c[key] for c in runs[r]["curve"][-3:] if c.get(key) is not None]
        return float(np.mean(vals)) if vals else math.nan

    out = {}
    for key in ("lane_stats_distance", "lane_less", "lanes_ratio", "ego_lane"):
        out[key] = {
            r: {"final": runs[r]["samples"]["tries_1"].get(key), "last3": last3(r, key)}
            for r in REPRS
        }
    out["lane_less_3_tries"] = {r: runs[r]["samples"]["tries_3"]["lane_less"] for r in REPRS}
    out["truth_halves_distance"] = result["truth_halves"]["lane_stats_distance"]
    out["crossings_per_tile"] = {
        **{r: runs[r]["tangles"]["generated"]["crossings_per_tile"] for r in REPRS},
        "truth": runs["points"]["tangles"]["truth"]["crossings_per_tile"],
    }
    target = last3("points", "lane_stats_distance")
    reached = [c for c in runs["bezier"]["curve"] if c["lane_stats_distance"] <= target]
    out["bezier_reaches_points_final_distance"] = (
        {"step": reached[0]["step"], "time_s": reached[0]["time_s"]} if reached else None
    )
    out["points_time_s"] = runs["points"]["curve"][-1]["time_s"]
    out["val_lane_rmse_m"] = {r: runs[r]["final_lane_rmse_m"] for r in REPRS}
    out["lane_rmse_by_t"] = {r: runs[r]["lane_rmse_by_t"] for r in REPRS}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="scene file (default: built, seeded)")
    p.add_argument("--episodes", type=int, default=400, help="episodes of the built file")
    p.add_argument("--reprs", default=",".join(REPRS))
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--val-every", type=int, default=100)
    p.add_argument("--val-items", type=int, default=256)
    p.add_argument("--pairs", type=int, default=200, help="held-out pairs sampled at the end")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runs", default=None, help="training runs' folder")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.quick:
        args.episodes, args.steps, args.val_every = 16, 40, 20
        args.val_items, args.pairs, args.width, args.depth = 32, 16, 32, 1
    torch.set_num_threads(1)
    runs = Path(args.runs) if args.runs else ROOT / "runs" / "vectorworld_repr"
    tag = "quick" if args.quick else "full"
    data = Path(args.data) if args.data else runs / f"scenes{args.episodes}-s{args.seed}.h5"
    if not args.data:
        build_data(data, args.episodes, args.seed)
    held = held_out(data)
    result = {
        "claim": "cubic-Bézier lane tokens learn faster than 20 free points (issue 23)",
        "data": os.fspath(data),
        "held_out_episodes": [held[0], held[-1]],
        "config": {k: v for k, v in vars(args).items() if k not in ("out", "runs")},
        "code": code_version("simsci/models/vectorworld", "benchmarks/bench_vectorworld_repr.py"),
        "quick": bool(args.quick),
        "threads": torch.get_num_threads(),
    }
    result["fit"] = fit_error(data)
    f = result["fit"]["error_m"]
    print(f"Bézier fit of {result['fit']['lanes']} lanes: max {f['max']:.4f} m, p99 "
          f"{f['p99']:.4f}, p95 {f['p95']:.4f}", flush=True)  # fmt: skip
    result["truth_halves"] = truth_halves(data, held, args.pairs)
    print(f"truth halves lane-stats distance {result['truth_halves']['lane_stats_distance']:.4f}")
    result["runs"] = {}
    for lane_repr in args.reprs.split(","):
        row = train_one(lane_repr, data, runs / f"{tag}-{lane_repr}-s{args.seed}", held, args)
        row["lane_rmse_by_t"] = error_by_time(row["checkpoint"], data, held, args)
        row["samples"] = sample_metrics(row["checkpoint"], data, held, args)
        row["tangles"] = tangles(row["checkpoint"], data, held, args)
        result["runs"][lane_repr] = row
    if all(r in result["runs"] for r in REPRS):
        result["summary"] = summarise(result)
        print(json.dumps(result["summary"], indent=1))
    name = "vectorworld_repr_quick_cpu.json" if args.quick else "vectorworld_repr_cpu.json"
    out = out_path(args.out, name, RESULTS)
    print(f"wrote {write_result(out, result)}")


if __name__ == "__main__":
    main()
