"""The lane-keeping driver in the generated world against the driving world (issue 23's
driver target).

Claim checked: with the shipped VectorWorld, at least 90% of 60 s lane-keeping episodes
in ``simsci/VectorWorld-v1`` end without leaving the lanes or colliding, and the mean
distance is within 20% of the same driver's in ``simsci/Driving-v0``.

Setup: :func:`simsci.envs.lane_keeping_policy` (Stanley steering, IDM speed), 32
episodes of 600 steps (60 s) per seed and world, 8 egos at a time, one torch thread;
``simsci/Driving-v0`` with 4 roads of 2 km (as ``bench_vectorworld_ppo.py``), and
``simsci/VectorWorld-v1`` with the shipped default (one-step tiles) with lane-graph
completion (the default, ``complete=True``) and without it (the generator's raw lanes).
Reported per seed: safe (no collision, no off-road: the episode ran its 60 s), the end
reasons and the mean distance; the ratio of mean distances to Driving-v0's.

Usage: ``python benchmarks/bench_vectorworld_driver.py [--seeds 0,1,2] [--episodes 32]
[--quick]``. Writes ``benchmarks/results/vectorworld_driver_cpu.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from simsci.bench import code_version, out_path, write_result

RESULTS = Path(__file__).resolve().parent / "results"
DRIVING = {"route_length": 2000.0, "num_roads": 4}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=None, help="default: the shipped world")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--episodes", type=int, default=32)
    p.add_argument("--quick", action="store_true")
    p.add_argument(
        "--tile-agents",
        default="generator",
        choices=("generator", "vae"),
        help="who puts a tile's vehicles (StreamingWorld's tile_agents)",
    )
    p.add_argument("--out", default=None)
    args = p.parse_args()
    from simsci.envs import evaluate_driving, lane_keeping_policy

    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    episodes, steps = (4, 100) if args.quick else (args.episodes, 600)
    worlds = {
        "driving": ("simsci/Driving-v0", DRIVING),
        "vectorworld": (
            "simsci/VectorWorld-v1",
            {"checkpoint": args.checkpoint, "tile_agents": args.tile_agents},
        ),
        "vectorworld_raw": (
            "simsci/VectorWorld-v1",
            {"checkpoint": args.checkpoint, "complete": False, "tile_agents": args.tile_agents},
        ),
    }
    rows = {name: {} for name in worlds}
    for seed in seeds:
        for name, (env_id, kw) in worlds.items():
            t0 = time.perf_counter()
            res = evaluate_driving(
                lane_keeping_policy, episodes=episodes, num_envs=min(8, episodes), seed=seed,
                env_id=env_id, max_episode_steps=steps, **kw,
            )  # fmt: skip
            res["wall_s"] = round(time.perf_counter() - t0, 1)
            rows[name][seed] = res
            print(name, seed, res, flush=True)
    summary = {}
    for name in ("vectorworld", "vectorworld_raw"):
        ratio = [
            rows[name][s]["mean_distance"] / rows["driving"][s]["mean_distance"] for s in seeds
        ]
        safe = [rows[name][s]["safe"] for s in seeds]
        summary[name] = {
            "safe_per_seed": safe,
            "distance_ratio_per_seed": ratio,
            "safe_target_met": min(safe) >= 0.9,
            "distance_target_met": min(ratio) >= 0.8,
            "median_distance_ratio": statistics.median(ratio),
        }
    result = {
        "claim": "lane keeping in the shipped VectorWorld: >= 90% safe 60 s episodes, "
        "mean distance within 20% of simsci/Driving-v0's",
        "checkpoint": args.checkpoint or "shipped default",
        "tile_agents": args.tile_agents,
        "episodes": episodes,
        "episode_steps": steps,
        "seeds": seeds,
        "results": rows,
        "summary": summary,
        "code": code_version("simsci/models/vectorworld", "envs"),
    }
    out = out_path(args.out, "vectorworld_driver_cpu.json", RESULTS)
    print(f"wrote {write_result(out, result)}")


if __name__ == "__main__":
    main()
