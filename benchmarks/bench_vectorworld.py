"""VectorWorld against the ground-truth driving world: map fidelity, initialisation,
density, NPC realism, speed.

Claims checked (issue "VectorWorld"), each against held-out scenes of the ground-truth
world (``simsci.driving``) with the driving world's metrics, 3 seeds:

- **Map fidelity** (``map``): every held-out pair (tile k -> k+1) outpainted from its
  ground-truth context, first tiles from none (:func:`evaluate_tile_generator`):
  ``lane_stats_distance`` (mean over lane-graph statistics of Fréchet² / Var(truth)),
  share of tiles with lanes, seam gap at the shared edge (target <= 0.1 m median), share
  of seams continued smoothly; one-step MeanFlow against the 16-step flow sampler of the
  same network, with the tile latency of each on one CPU thread (target >= 10x).
- **The driven map** (``map_complete``, not in the default parts): the one-step map
  as generated and after what the world does to each tile (seams closed, lane graph
  completed: ``evaluate_tile_generator(complete=True)``), on the same samples;
  ``--peer CHECKPOINT`` measures a second generator on those samples in the same run
  (e.g. the lane-group tokens against the lane tokens).
- **The lane-statistics reference** (``halves``, not in the default parts): the
  distance between two halves of the held-out truth (its episodes split at random, so
  an episode's alike tiles stay in one half), each half sampled to the map parts' truth
  size (400 + 100 tiles: pairs' targets and first tiles), over 20 random splits:
  median and 10-90% range. One split is not a
  reference: evenly spaced subsamples of 200, 400 and 1,000 tiles a half gave 0.005,
  0.062 and 0.019 (heavy-tailed statistics), so the target (<= 3x the halves) is judged
  against the median at the compared sample's size.
- **Initialisation validity** (``init``): initial agents sampled by the VAE on held-out
  tiles' lanes, as many as the truth has (:func:`scene_init_metrics`): collision rate
  (target <= 3%), off-road rate, infeasible history steps, speed/history mismatch,
  distribution distances; the same figures of the ground truth beside them.
- **NPC realism** (``npc``): ΔSim from the same Traffic state as the ground truth on
  unseen roads (:func:`rollout_vs_traffic`): ADE/FDE over 5 s, collision and off-road
  rates, kinematic infeasibility with logit shaping (target 0) and without.
- **Rollouts and density** (``rollout``): 1 km closed-loop rollouts with the
  lane-keeping ego on one CPU thread: real-time factor (target >= 10x), generated agents
  per lane-km against the held-out truth's, and per tile the lane metres and vehicles
  of the drive's own tiles against the truth's (a closed-loop map measure: the ``map``
  parts condition on ground-truth contexts), NPC infeasible steps from the stated motion
  and from the positions, seam gaps of the tiles live together and the ego's tile
  coverage (the recorder's, :mod:`simsci.driving.metrics`' definitions), how each
  rollout ended.
- **Reset cost** (``resets``, issue 23 part 5): ``simsci/VectorWorld-v1`` resets,
  seeded (each makes its own opening tiles), unseeded (openings made ahead in a pool) and
  from a warm opening bank of 8, against ``simsci/Driving-v0`` resets in the same process
  (median ms, ratio).

``--checkpoint small`` uses :func:`~simsci.models.vectorworld.small_default` (the model
trained on the fly for tests; cached): the second pass's mechanics (persistent tiles,
closed seams, NPC feasibility, reset pooling) do not need a good model to be measured,
and ``--data`` may then be left out (no truth density). ``--km`` sets the rollouts'
length (default 1 km, 0.3 with ``--quick``).

Usage: ``python benchmarks/bench_vectorworld.py --checkpoint runs/vectorworld --data
runs/scenes2000.h5 [--parts map,init,npc,rollout] [--quick]``. Writes
``benchmarks/results/vectorworld_cpu.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from simsci.bench import code_version, out_path, write_result

RESULTS = Path(__file__).parent / "results"
SEEDS = (0, 1, 2)


def _held_out(path, fraction=0.1):
    from simsci import data as sdata

    ds = sdata.open(path)
    n = len(ds)
    ds.close()
    k = max(1, int(round(n * fraction)))
    return list(range(n - k, n))


def _map_runs(model, data, episodes, quick, label, keys, **kw):
    """``evaluate_tile_generator`` for each of SEEDS (``kw``: its sampler options)."""
    from simsci.models.vectorworld import evaluate_tile_generator

    pairs = 64 if quick else 400
    rows = []
    for seed in SEEDS:
        r = evaluate_tile_generator(
            model.tiles, data, episodes, max_pairs=pairs, max_first=pairs // 4, seed=seed, **kw
        )
        rows.append(r)
        print(f"{label} seed {seed}: " + ", ".join(
            f"{k}={r[k]:.4g}" for k in keys if isinstance(r.get(k), float)
        ))  # fmt: skip
    return {"runs": rows}


def bench_map(model, data, episodes, quick):
    keys = ("lane_stats_distance", "seam_gap_median")
    return {
        name: _map_runs(model, data, episodes, quick, f"map {name}", keys, steps=steps, mode=mode)
        for name, steps, mode in (("one_step", 1, "meanflow"), ("flow_16", 16, "flow"))
    }


def bench_map_complete(model, data, episodes, quick):
    """The one-step map as generated and as the world drives it (lane graph completed:
    ``evaluate_tile_generator(complete=True)``), the same samples (same seeds)."""
    keys = ("lane_stats_distance", "lanes_per_tile", "lane_chains_per_tile", "lane_m_per_tile",
            "seam_turn_median", "seam_lateral_median")  # fmt: skip
    return {
        name: _map_runs(
            model,
            data,
            episodes,
            quick,
            f"map_complete {name}",
            keys,
            steps=1,
            mode="meanflow",
            complete=complete,
        )  # fmt: skip
        for name, complete in (("raw", False), ("completed", True))
    }


def bench_halves(data, episodes, quick, splits: int = 20):
    """``lane_stats_distance`` between two halves of the held-out truth, over ``splits``
    seeded random splits of its episodes (tiles of one episode are alike, so they stay in
    one half), ``size`` tiles drawn from each half (the map parts' truth size)."""
    from simsci.models.vectorworld._evaluate import scene_pairs, tile_metrics

    pairs = 64 if quick else 400
    size = pairs + pairs // 4  # the map parts' truth: pairs' targets and first tiles
    splits = 4 if quick else splits
    per_episode = []  # each episode's (pair targets, first tile), read once
    for e in episodes:
        _, _, truth, firsts = scene_pairs(data, [e], first_tiles=True)
        per_episode.append((truth, firsts))
    rng = np.random.default_rng(0)
    dist, smallest = [], None
    for k in range(splits):
        order = rng.permutation(len(episodes))
        halves = []
        for part in (order[: len(order) // 2], order[len(order) // 2 :]):
            eps = [per_episode[i] for i in sorted(part)]
            tiles = [t for truth, _ in eps for t in truth] + [t for _, f in eps for t in f]
            smallest = len(tiles) if smallest is None else min(smallest, len(tiles))
            if len(tiles) < size:
                raise SystemExit(f"halves: a half has {len(tiles)} tiles, {size} needed")
            halves.append([tiles[j] for j in rng.permutation(len(tiles))[:size]])
        dist.append(float(tile_metrics(*halves)["lane_stats_distance"]))
        print(f"halves split {k}: {dist[-1]:.4f}", flush=True)
    q10, q50, q90 = np.quantile(dist, [0.1, 0.5, 0.9])
    return {
        "tiles_per_half": size,
        "episodes": len(episodes),
        "smallest_half_tiles": smallest,
        "splits": dist,
        "median": float(q50),
        "p10": float(q10),
        "p90": float(q90),
        "target_3x_median": float(3 * q50),
    }


def _contexts(data, episodes, n):
    """``n`` (context tile dict, direction) pairs of held-out episodes."""
    from simsci import data as sdata
    from simsci.driving import read_scene
    from simsci.models.vectorworld._tokens import DIRECTIONS

    ds = sdata.open(data)
    out = []
    try:
        for e in episodes:
            ep = read_scene(ds, e)
            cells = np.asarray(ep["tile_cell"])
            for k in range(len(cells) - 1):
                step = tuple(int(v) for v in cells[k + 1] - cells[k])
                if step not in DIRECTIONS or len(ep["lanes"][k]["points"]) == 0:
                    continue
                a = np.asarray(ep["agents"][k, :, -1], np.float64)
                v = np.asarray(ep["agents_valid"][k], bool).copy()
                v[0] = False
                lanes = ep["lanes"][k]
                out.append(
                    (
                        {
                            "points": np.asarray(lanes["points"], np.float64),
                            "width": np.asarray(lanes["width"], np.float64),
                            "speed_limit": np.asarray(lanes["speed_limit"], np.float64),
                            "kind": np.asarray(lanes["kind"], np.int64),
                            "agents": a[v],
                        },
                        DIRECTIONS.index(step),
                    )
                )
                if len(out) >= n:
                    return out
    finally:
        ds.close()
    return out


def _time_generate(tiles, ctx, dirs, steps, mode, repeats):
    g = torch.Generator().manual_seed(0)
    tiles.generate(ctx, dirs, steps=steps, mode=mode, generator=g, max_tries=1)  # warm up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        tiles.generate(ctx, dirs, steps=steps, mode=mode, generator=g, max_tries=1)
        ts.append((time.perf_counter() - t0) * 1000.0 / len(ctx))
    return statistics.median(ts)


def bench_latency(model, data, episodes, quick):
    pairs = _contexts(data, episodes, 8)
    out = {}
    for batch in (1, 8):
        ctx = [p[0] for p in pairs[:batch]]
        dirs = [p[1] for p in pairs[:batch]]
        one = _time_generate(model.tiles, ctx, dirs, 1, "meanflow", 5 if quick else 20)
        multi = _time_generate(model.tiles, ctx, dirs, 16, "flow", 3 if quick else 10)
        out[f"batch_{batch}"] = {
            "one_step_ms_per_tile": one,
            "flow16_ms_per_tile": multi,
            "speedup": multi / one,
        }
        print(f"latency batch {batch}: one-step {one:.2f} ms, 16-step {multi:.2f} ms, "
              f"{multi / one:.1f}x")  # fmt: skip
    return out


def bench_init(model, data, episodes, quick):
    from simsci.models.vectorworld import scene_init_metrics

    rows = []
    for seed in SEEDS:
        r = scene_init_metrics(
            model.vae, data, episodes, seed=seed, max_tiles=100 if quick else 600
        )
        rows.append(r)
        g = r["generated"]
        print(
            f"init seed {seed}: collision {g['collision_rate']:.4f}, off-road "
            f"{g['offroad_rate']:.4f}, infeasible steps {g['infeasible_step_rate']:.4f}"
        )
    return {"runs": rows}


def bench_npc(model, quick):
    from simsci.driving import make_road
    from simsci.models.vectorworld import rollout_vs_traffic

    rows = []
    for seed in SEEDS:
        road = make_road(seed=50_000 + seed, length=3000.0)
        row = {"road_seed": 50_000 + seed}
        for shaping in (True, False):
            r = rollout_vs_traffic(
                model.npc, road, n_scenes=4 if quick else 16, steps=50, seed=seed,
                shaping=shaping,
            )  # fmt: skip
            row["shaped" if shaping else "unshaped"] = r
            print(f"npc seed {seed} shaping={shaping}: ADE {r['ade']:.2f} FDE {r['fde']:.2f} "
                  f"collision {r['collision_rate']:.3f} off-road {r['offroad_rate']:.3f} "
                  f"infeasible steps {r['infeasible_steps']}")  # fmt: skip
        rows.append(row)
    return {"runs": rows}


def _truth_map(data, episodes):
    """The held-out tiles' non-ego agents per lane-km (the generated density's peer),
    lane metres per tile and agents per tile."""
    from simsci import data as sdata
    from simsci.driving import read_scene

    ds = sdata.open(data)
    agents = lane_km = 0.0
    tiles = 0
    try:
        for e in episodes:
            ep = read_scene(ds, e)
            v = np.asarray(ep["agents_valid"], bool)
            agents += float(v[:, 1:].sum())
            for lanes in ep["lanes"]:
                p = np.asarray(lanes["points"], np.float64)
                lane_km += float(np.linalg.norm(np.diff(p, axis=1), axis=-1).sum()) / 1000.0
                tiles += 1
    finally:
        ds.close()
    return {
        "agents_per_lane_km": agents / max(lane_km, 1e-9),
        "lane_m_per_tile": 1000.0 * lane_km / max(tiles, 1),
        "agents_per_tile": agents / max(tiles, 1),
    }


def bench_rollout(model, data, episodes, quick, km=None, tile_agents="generator"):
    from simsci.envs import vectorworld_rollout as rollout

    km = km if km is not None else (0.3 if quick else 1.0)
    rows = []
    for seed in SEEDS:
        res = rollout(model, km=km, seed=seed, stop_on_failure=False, tile_agents=tile_agents)
        s = res["stats"]
        rows.append(s)
        print(f"rollout seed {seed}: {s['distance_m']:.0f} m, {s['real_time_factor']:.1f}x real "
              f"time, {s['world_tiles']} tiles, density {s['generated_agents_per_lane_km']:.1f}"
              f"/lane-km, NPC infeasible {s['npc_infeasible_steps']} stated, "
              f"{s['npc_path_infeasible_steps']} from positions, "
              f"{s['lane_m_per_tile']:.0f} lane m and {s['agents_per_tile']:.2f} vehicles a "
              f"tile, seam gap median "
              f"{s['seam_gap_median_m']} (p90 {s['seam_gap_p90_m']}), tile coverage "
              f"{s['tile_coverage']:.3f}, ended {s['end_reason']}")  # fmt: skip
    gen = [r["generated_agents_per_lane_km"] for r in rows]
    out = {
        "km": km,
        "runs": rows,
        "real_time_factor_median": statistics.median(r["real_time_factor"] for r in rows),
        "generated_agents_per_lane_km_median": statistics.median(gen),
    }
    for who in ("ego", "npc"):
        out[f"{who}_path_infeasible_fraction"] = [
            r[f"{who}_path_infeasible_steps"] / max(r[f"{who}_path_steps_checked"], 1) for r in rows
        ]
    for key in ("lane_m_per_tile", "agents_per_tile"):  # the drive's own tiles
        out[f"{key}_median"] = statistics.median(r[key] for r in rows)
    if data is not None:
        truth = _truth_map(data, episodes)
        out["truth_agents_per_lane_km"] = truth["agents_per_lane_km"]
        out["density_ratio"] = statistics.median(gen) / max(truth["agents_per_lane_km"], 1e-9)
        for key in ("lane_m_per_tile", "agents_per_tile"):
            out[f"truth_{key}"] = truth[key]
            out[f"{key}_ratio"] = out[f"{key}_median"] / max(truth[key], 1e-9)
    return out


def bench_resets(model, quick, bank: int = 8):
    """Reset time (ms; median, and mean, which carries the pool's batched misses) of
    VectorWorld-v1, seeded and unseeded, with a warm opening bank of ``bank`` (10 x
    ``bank`` resets before the timing, so that every opening has been used), and of
    Driving-v0, interleaved in one process (same load for each)."""
    import gymnasium

    import simsci.envs  # noqa: F401  (registers the environments)

    n = 8 if quick else 40
    vw = gymnasium.make("simsci/VectorWorld-v1", checkpoint=model, max_episode_steps=100)
    vwb = gymnasium.make(
        "simsci/VectorWorld-v1", checkpoint=model, max_episode_steps=100, opening_bank=bank
    )
    drv = gymnasium.make("simsci/Driving-v0", max_episode_steps=100)
    vw.reset(seed=0)
    drv.reset(seed=0)  # first resets: warm-up, not timed
    vwb.reset(seed=0)
    for _ in range(10 * bank):  # each opening used (its look-ahead made) but w.p. ~2e-4
        vwb.reset()
    times = {
        "vectorworld_seeded": [],
        "vectorworld_unseeded": [],
        "vectorworld_bank_warm": [],
        "driving_unseeded": [],
    }

    def timed(key, env, seed):
        t0 = time.perf_counter()
        env.reset(seed=seed)
        times[key].append(1000 * (time.perf_counter() - t0))

    for i in range(n):  # seeded: each reset makes its own openings
        timed("vectorworld_seeded", vw, 1000 + i)
        timed("driving_unseeded", drv, None)
    # unseeded: one chain from a seeded start, so the pool's misses (one per
    # OPENING_POOL resets, which make the next openings in one batch) are included
    vw.reset(seed=0)
    for _ in range(n):
        timed("vectorworld_unseeded", vw, None)
        timed("driving_unseeded", drv, None)
        timed("vectorworld_bank_warm", vwb, None)
    med = {k: statistics.median(v) for k, v in times.items()}
    mean = {k: statistics.fmean(v) for k, v in times.items()}
    for env in (vw, vwb, drv):
        env.close()
    return {
        "resets": n,
        "bank": bank,
        "bank_warm_ratio_to_driving": med["vectorworld_bank_warm"] / med["driving_unseeded"],
        "median_ms": med,
        "mean_ms": mean,
        "ms": times,
        "unseeded_ratio_to_driving": med["vectorworld_unseeded"] / med["driving_unseeded"],
        "seeded_ratio_to_driving": med["vectorworld_seeded"] / med["driving_unseeded"],
    }


def _load(checkpoint):
    """A VectorWorld directory, ``small``, or one part's ``.pt`` (map, latency, npc)."""
    from simsci.models.vectorworld import VectorWorld

    if checkpoint == "small":
        from simsci.models.vectorworld import small_default

        return small_default()
    if str(checkpoint).endswith(".pt"):
        from types import SimpleNamespace

        from simsci.models.vectorworld import DeltaSim
        from simsci.train import load_model

        part = load_model(checkpoint)
        return SimpleNamespace(**{"npc" if isinstance(part, DeltaSim) else "tiles": part})
    return VectorWorld.load(checkpoint)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--checkpoint", required=True, help="VectorWorld directory, or 'small' (small_default)"
    )
    p.add_argument("--data", default=None, help="the scene file it was trained on")
    p.add_argument("--parts", default="map,latency,init,npc,rollout")
    p.add_argument("--km", type=float, default=None, help="rollout length (default 1 km)")
    p.add_argument("--quick", action="store_true")
    p.add_argument(
        "--tile-agents",
        default="generator",
        choices=("generator", "vae"),
        help="rollout: who puts a tile's vehicles (StreamingWorld's tile_agents)",
    )
    p.add_argument("--out", default=None)
    p.add_argument(
        "--peer",
        default=None,
        help="map_complete: a second checkpoint measured on the same samples (same run)",
    )
    args = p.parse_args()
    torch.set_num_threads(1)
    model = _load(args.checkpoint)
    parts = args.parts.split(",")
    if args.data is None and set(parts) - {"rollout", "resets"}:
        raise SystemExit(
            "--data is needed for the parts map, map_complete, halves, latency, init and npc"
        )
    held = _held_out(args.data) if args.data is not None else []
    if args.quick:
        held = held[:20]
    result = {
        "claim": "VectorWorld vs the ground-truth driving world (issue VectorWorld)",
        "checkpoint": os.fspath(args.checkpoint),
        "data": os.fspath(args.data) if args.data is not None else None,
        "held_out_episodes": [held[0], held[-1]] if held else None,
        "seeds": list(SEEDS),
        "code": code_version("simsci/models/vectorworld", "envs/_vectorworld.py"),
        "quick": bool(args.quick),
    }
    t0 = time.perf_counter()
    for part in parts:
        start = time.perf_counter()
        if part == "map":
            result["map"] = bench_map(model, args.data, held, args.quick)
        elif part == "map_complete":
            result["map_complete"] = bench_map_complete(model, args.data, held, args.quick)
            if args.peer is not None:
                result["peer"] = os.fspath(args.peer)
                peer = _load(args.peer)
                result["map_complete_peer"] = bench_map_complete(peer, args.data, held, args.quick)
        elif part == "halves":
            result["halves"] = bench_halves(args.data, held, args.quick)
        elif part == "latency":
            result["latency"] = bench_latency(model, args.data, held, args.quick)
        elif part == "init":
            result["init"] = bench_init(model, args.data, held, args.quick)
        elif part == "npc":
            result["npc"] = bench_npc(model, args.quick)
        elif part == "rollout":
            result["rollout"] = bench_rollout(
                model, args.data, held, args.quick, args.km, args.tile_agents
            )
            result["tile_agents"] = args.tile_agents
        elif part == "resets":
            result["resets"] = bench_resets(model, args.quick)
        else:
            raise SystemExit(f"unknown part {part!r}")
        print(f"[{part}: {time.perf_counter() - start:.0f} s]", flush=True)
    result["wall_s"] = time.perf_counter() - t0
    name = "vectorworld_cpu.json" if len(parts) == 5 else f"vectorworld_{'_'.join(parts)}_cpu.json"
    if args.checkpoint == "small":
        name = name.replace("vectorworld_", "vectorworld_small_")
    out = out_path(args.out, name, RESULTS)
    print(f"wrote {write_result(out, result)}")


if __name__ == "__main__":
    main()
