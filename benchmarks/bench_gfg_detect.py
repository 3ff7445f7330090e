"""GFG zero-shot detection: trajectories scored by their projection residual against a
world model trained on real trajectories only, real vs corrupted (issue 8), with a plain
neural ODE's flow residual as the peer.

Data (``simsci.systems`` lifted flows in R^64, runs/gfg_bench_data, git-ignored): 40
trajectories of 41 regular points each of ``lifted_circle``, ``lifted_rigid_body`` and
``lifted_lorenz63``, split 20/4/16. The world models are trained on the 20 training
trajectories (finite-difference velocities, ``--steps`` full-batch Adam steps, lr 3e-3,
cosine schedule): ``tangent`` (GFG) and ``ambient`` (plain neural ODE).

The 16 test trajectories are the real class; each corruption of them
(``simsci.models.gfg.corrupt``) the other: ``reversed`` (time reversal),
``spliced`` (first half of one, second half of another), ``generated`` (rollouts of a
plain neural ODE trained for 30 steps only), ``wrong_physics`` (the same starts on the
same manifold, every flow parameter x1.5, ``--physics-factor``; a harder run with 1.1
writes gfg_detect_hard_cpu.json). Scores (``simsci.models.gfg.detect_metrics``;
no corrupted example is used to calibrate any of them): GFG's combined residual ``gfg``
(tangent + flow + manifold, each over its median on the training trajectories) and its
parts; the plain model has only the flow residual. Reported: AUROC per corruption,
medians over seeds. Target: >= 0.95 on wrong physics and time reversal.

Usage: ``python benchmarks/bench_gfg_detect.py [--seeds 3] [--steps 1500] [--jobs 2]
[--quick] [--out PATH]``; writes benchmarks/results/gfg_detect_cpu.json.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from _runner import RESULTS, ROOT, map_jobs, quick, seed_jobs, write

DATA = ROOT / "runs" / "gfg_bench_data"
SYSTEMS = ("lifted_circle", "lifted_rigid_body", "lifted_lorenz63")
CORRUPTIONS = ("reversed", "spliced", "generated", "wrong_physics")


def make_data(name: str, seed: int, n: int) -> Path:
    from simsci.datasets import make_dataset

    out = DATA / f"{name}_detect_s{seed}_{n}.h5"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        make_dataset(name, n, out=out, seed=seed, dim=64, steps=40, split=(0.5, 0.1, 0.4))
    return out


def run_one(args) -> dict:
    name, seed, steps, n, physics_factor = args
    from simsci import data
    from simsci.datasets import lifted_from_config
    from simsci.models.gfg import GFG, detect_metrics, episode_arrays

    traj = data.open(make_data(name, seed, n))
    flow = lifted_from_config(traj.meta["manifold"])
    train_eps = episode_arrays(traj, "train")
    test_eps = episode_arrays(traj, "test")
    items = [
        {"t": torch.as_tensor(e["t"]), "x": torch.as_tensor(e["x"]).float()} for e in train_eps
    ]
    rows = {}
    for variant in ("tangent", "ambient"):
        torch.manual_seed(seed)
        model = GFG.from_data(traj, variant=variant, hidden_dim=128)
        batch = model.collate(items)
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
        for _ in range(steps):
            opt.zero_grad()
            model.training_step(batch)["loss"].backward()
            opt.step()
            sched.step()
        model.eval()
        start = time.perf_counter()
        rows[variant] = detect_metrics(
            model, test_eps, train_eps, flow=flow, seed=seed, physics_factor=physics_factor
        )
        rows[variant]["detect_seconds"] = time.perf_counter() - start
        headline = {
            c: rows[variant][f"auroc_{c}_flow" if variant == "ambient" else f"auroc_{c}"]
            for c in CORRUPTIONS
        }
        print(
            f"{name} seed {seed} {variant}: "
            + ", ".join(f"{c} {v:.3f}" for c, v in headline.items()),
            flush=True,
        )
    return {"system": name, "seed": seed, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--physics-factor", type=float, default=1.5, help="wrong physics: parameters x this"
    )
    parser.add_argument("--quick", action="store_true", help="1 seed, 100 steps, 1 system")
    parser.add_argument("--out", default=str(RESULTS / "gfg_detect_cpu.json"))
    args = parser.parse_args()
    systems = SYSTEMS[:1] if args.quick else SYSTEMS
    quick(args, seeds=1, steps=100)
    seeds, steps = args.seeds, args.steps
    n = 20 if args.quick else 40
    jobs = seed_jobs(systems, seeds, steps, n, args.physics_factor)
    start = time.perf_counter()
    runs = map_jobs(run_one, jobs, workers=args.jobs, record_as=("system", "seed"))
    summary = {}
    for name in systems:
        mine = [r["rows"] for r in runs if r["system"] == name and "error" not in r]
        if not mine:
            continue
        entry = {}
        for c in CORRUPTIONS:
            entry[c] = {
                "gfg": statistics.median(m["tangent"][f"auroc_{c}"] for m in mine),
                **{
                    f"gfg_{part}": statistics.median(
                        m["tangent"][f"auroc_{c}_{part}"] for m in mine
                    )
                    for part in ("tangent", "flow", "manifold")
                },
                "plain_flow": statistics.median(m["ambient"][f"auroc_{c}_flow"] for m in mine),
            }
        entry["target_met"] = all(entry[c]["gfg"] >= 0.95 for c in ("wrong_physics", "reversed"))
        summary[name] = entry
    result = {
        "benchmark": "gfg_detect",
        "peer": "plain neural ODE (variant ambient): its flow residual",
        "config": {
            "seeds": seeds,
            "steps": steps,
            "trajectories": n,
            "dim": 64,
            "physics_factor": args.physics_factor,
        },
        "summary": summary,
        "runs": runs,
        "wall_seconds": time.perf_counter() - start,
    }
    write(args.out, result, echo=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
