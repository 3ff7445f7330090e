"""GFG motif recovery: signed gene-regulatory interactions read from the Jacobian of a
vector field learned on single-cell-like snapshots (issue 8), against a plain neural ODE
and the true field.

Data (``simsci.systems`` gene networks, runs/gfg_bench_data, git-ignored):
``grn_toggle`` (bistable switch with self-activation and two markers, 4 genes),
``grn_repressilator`` (3 genes), ``grn_random`` (12 genes); 2000 cells each, one
snapshot per cell, Poisson counts noise (``counts_scale`` 50), the true velocities of
the cells as the training target (``v``), split 80/10/10.

Models (``simsci.models.GFG``, width 128, 2 hidden layers, ``--steps`` Adam steps on
minibatches of 512 cells, lr 3e-3, cosine schedule):

- ``tangent`` (GFG, latent dimension G: the slow manifold u ~ u*(s)), read out along the
  learned manifold (d(ds_j/dt)/ds_i; ``simsci.models.gfg.motif_scores``), and
  ``tangent-wide`` (latent dimension 2G - 1: the data are not exactly on the slow
  manifold, cells are caught in transit);
- ``ambient`` (plain neural ODE), read out as d(du_j/dt)/ds_i;
- ``truth``: the true field's d(du_j/dt)/ds_i at the same cells (the ceiling, 1).

Score: AUROC of the signed read-out over ordered gene pairs i != j
(``simsci.datasets.score_network``: activation vs the rest by the score, repression vs
the rest by minus the score, their mean ``auroc_signed``), on the test cells; medians
over seeds. Target: >= 0.9 on toggle switch and repressilator.

Usage: ``python benchmarks/bench_gfg_motifs.py [--seeds 3] [--steps 1500] [--jobs 2]
[--quick] [--out PATH]``; writes benchmarks/results/gfg_motifs_cpu.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from _runner import RESULTS, ROOT, map_jobs, medians, quick, seed_jobs, write

DATA = ROOT / "runs" / "gfg_bench_data"
NETWORKS = ("grn_toggle", "grn_repressilator", "grn_random")
MODELS = ("tangent", "tangent-wide", "ambient")


def make_data(name: str, seed: int, cells: int) -> Path:
    from simsci.datasets import make_dataset

    out = DATA / f"{name}_s{seed}_{cells}.h5"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        make_dataset(name, cells, out=out, seed=seed)
    return out


def run_one(args) -> dict:
    name, seed, steps, cells = args
    from simsci import data
    from simsci.datasets import network_from_config, score_network, true_motif_scores
    from simsci.models.gfg import GFG, episode_arrays, motif_scores

    traj = data.open(make_data(name, seed, cells))
    network = network_from_config(traj.meta["network"])
    adjacency = network.adjacency()
    train_eps = episode_arrays(traj, "train")
    items = [
        {k: torch.as_tensor(e[k]).float() for k in ("x", "v")} | {"t": torch.as_tensor(e["t"])}
        for e in train_eps
    ]
    x_test = torch.as_tensor(np.concatenate([e["x"] for e in episode_arrays(traj, "test")]))
    G = x_test.shape[1] // 2
    out = {"truth": score_network(true_motif_scores(network, x_test.double()), adjacency)}
    for label in MODELS:
        torch.manual_seed(seed)
        variant = "ambient" if label == "ambient" else "tangent"
        extra = {"latent_dim": 2 * G - 1} if label == "tangent-wide" else {}
        model = GFG.from_data(traj, variant=variant, hidden_dim=128, **extra)
        batch = model.collate(items)
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
        gen = torch.Generator().manual_seed(seed)
        start = time.perf_counter()
        for _ in range(steps):
            idx = torch.randint(0, len(batch["x"]), (512,), generator=gen)
            opt.zero_grad()
            model.training_step({k: v[idx] for k, v in batch.items()})["loss"].backward()
            opt.step()
            sched.step()
        seconds = time.perf_counter() - start
        model.eval()
        val = {k: float(v) for k, v in model.validation_step(batch).items()}
        scores = motif_scores(model, x_test.float())
        out[label] = {
            **{k: float(v) for k, v in score_network(scores.numpy(), adjacency).items()},
            "vel_rel": val["vel_rel"],
            "train_seconds": seconds,
        }
        print(
            f"{name} seed {seed} {label:12s} auroc_signed {out[label]['auroc_signed']:.3f} "
            f"sign acc {out[label]['sign_accuracy']:.3f} vel_rel {val['vel_rel']:.3g}",
            flush=True,
        )
    return {"network": name, "seed": seed, "rows": out}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--cells", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="1 seed, 100 steps, 300 cells")
    parser.add_argument("--out", default=str(RESULTS / "gfg_motifs_cpu.json"))
    args = parser.parse_args()
    quick(args, seeds=1, steps=100, cells=300)
    seeds, steps, cells = args.seeds, args.steps, args.cells
    jobs = seed_jobs(NETWORKS, seeds, steps, cells)
    start = time.perf_counter()
    runs = map_jobs(run_one, jobs, workers=args.jobs, record_as=("network", "seed"))
    summary = {}
    for name in NETWORKS:
        mine = [r["rows"] for r in runs if r["network"] == name and "error" not in r]
        if not mine:
            continue
        keys = ("auroc_signed", "auroc_edge", "sign_accuracy")
        summary[name] = {
            label: medians((m[label] for m in mine), keys) for label in ("truth", *MODELS)
        }
        summary[name]["target_met"] = summary[name]["tangent"]["auroc_signed"] >= 0.9
    result = {
        "benchmark": "gfg_motifs",
        "peer": "plain neural ODE (variant ambient), same harness; truth = the true field",
        "config": {"seeds": seeds, "steps": steps, "cells": cells},
        "summary": summary,
        "runs": runs,
        "wall_seconds": time.perf_counter() - start,
    }
    write(args.out, result, echo=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
