"""Does the DynaDiff prompter identify the environment? (issue 24, part 2): a linear
probe from the prompter's normalised features to each varied parameter.

Per system and data seed (data under runs/dynadiff_prompt, git-ignored): the protocol's
files (``make_environments``); contexts of ``context_steps`` frames from the training
environments (per episode: its first frames, then ``--windows`` random windows; with M
episodes per context, the episode and M - 1 others of its environment, each its own
window) and, the same way, from the held-out in-domain and out-of-domain environments.
Features: this tree's ``context_features`` ("new": the joint weak-form fit) against the
prompter of git revision ``--old-rev`` ("old": pointwise fourth-order differences, one
fit per episode, averaged), read with ``git show`` so the peer is the code that ran
before. Each set is normalised as :class:`Prompter` does (training mean and std, clamped
to +-10); a ridge probe per set (its strength by 5-fold leave-environments-out
cross-validation on the training contexts) predicts the raw parameters; R² per parameter
on the held-out contexts. M = 1, 2, 4 (the training and test files have 8 episodes per
environment). Target: R² >= 0.9 for every parameter of every ODE system, in-domain,
new features, M = 1 (the protocols' context).

Usage: ``python benchmarks/bench_dynadiff_prompt.py [--systems a,b] [--seeds 3]
[--jobs 1] [--quick] [--out PATH]``; writes benchmarks/results/dynadiff_prompt_cpu.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _runner import RESULTS, ROOT, group, map_jobs, quick, seed_jobs, write

WORK = ROOT / "runs" / "dynadiff_prompt"
ODE = ("lotka_volterra", "glycolytic_oscillator", "damped_pendulum")
PROMPTER = "simsci/models/dynadiff/_prompter.py"
OLD_REV = "03c530b"  # the pointwise-derivative prompter, before issue 24 part 2
EPISODES = (1, 2, 4)
LAMBDAS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
TARGET = 0.9


def old_features(rev: str):
    """``context_features`` of the prompter at git revision ``rev`` (a fresh module)."""
    text = subprocess.run(
        ["git", "show", f"{rev}:{PROMPTER}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "old_prompter.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("old_prompter", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.context_features


def contexts(env, K: int, M: int, windows: int, rng):
    """``(n, M, K, *S)`` contexts and ``(n,)`` environment indices (see the docstring)."""
    import torch

    xs, envs = [], []
    for e, x in enumerate(env.episodes):
        n, T = x.shape[:2]
        for i in range(n):
            for w in range(1 + windows):
                others = rng.permutation([j for j in range(n) if j != i])[: M - 1]
                starts = [0] * M if w == 0 else rng.integers(0, T - K + 1, size=M)
                xs.append(torch.stack([x[j, s : s + K] for j, s in zip([i, *others], starts)]))
                envs.append(e)
    return torch.stack(xs), envs


def normalise(train, test):
    """The prompter's normalisation (training mean, std floored, clamp +-10)."""
    import numpy as np

    mean, std = train.mean(0), train.std(0)
    std = np.maximum(std, 1e-3 * np.abs(mean) + 1e-6)
    return [np.clip((f - mean) / std, -10.0, 10.0) for f in (train, test)]


def ridge(A, y, lam):
    import numpy as np

    A1 = np.c_[A, np.ones(len(A))]
    reg = lam * len(A1) * np.eye(A1.shape[1])
    reg[-1, -1] = 0.0  # the intercept is not penalised
    return np.linalg.solve(A1.T @ A1 + reg, A1.T @ y)


def predict(A, W):
    import numpy as np

    return np.c_[A, np.ones(len(A))] @ W


def probe(train, y, groups, tests, seed: int):
    """Ridge probe, strength by 5-fold leave-environments-out CV; predictions per test set."""
    import numpy as np

    folds = np.array_split(np.random.default_rng(seed).permutation(np.unique(groups)), 5)
    cv = []
    for lam in LAMBDAS:
        err = 0.0
        for fold in folds:
            held = np.isin(groups, fold)
            W = ridge(train[~held], y[~held], lam)
            err += float(((predict(train[held], W) - y[held]) ** 2).sum())
        cv.append(err)
    lam = LAMBDAS[int(np.argmin(cv))]
    W = ridge(train, y, lam)
    return [predict(t, W) for t in tests], lam


def r2(pred, y) -> list[float]:
    return (1 - ((pred - y) ** 2).sum(0) / ((y - y.mean(0)) ** 2).sum(0)).tolist()


def run_one(job) -> dict:
    """One (system, seed): R² per parameter, per feature set, M and held-out split."""
    system, seed, cfg = job
    import numpy as np
    import torch

    from simsci.models import dynadiff as dd

    t_start = time.perf_counter()
    protocol = dd.get_protocol(system)
    paths = dd.make_environments(system, WORK / f"{system}_s{seed}", seed=seed, device="cpu")
    data = {k: dd.load_environments(paths[k], dtype=torch.float64) for k in paths}
    cols = [data["train"].param_names.index(v) for v in protocol.varied]
    K, dt, shape = protocol.context_steps, protocol.dt, data["train"].state_shape
    feature_sets = {"new": dd.context_features, "old": old_features(cfg["old_rev"])}
    out = {"system": system, "seed": seed, "params": list(protocol.varied), "results": []}
    for M in EPISODES:
        if M > min(len(x) for k in ("train", "in_domain") for x in data[k].episodes):
            continue
        rng = np.random.default_rng([seed, M])
        ctx = {}
        for key in ("train", "in_domain", "out_of_domain"):
            x, envs = contexts(data[key], K, M, cfg["windows"], rng)
            ctx[key] = (x, np.asarray(envs), data[key].params[envs][:, cols])
        for name, features in feature_sets.items():
            t0 = time.perf_counter()
            raw = {k: features(v[0], dt, shape).numpy() for k, v in ctx.items()}
            seconds = time.perf_counter() - t0
            train, ind = normalise(raw["train"], raw["in_domain"])
            _, ood = normalise(raw["train"], raw["out_of_domain"])
            y, groups = ctx["train"][2], ctx["train"][1]
            (p_in, p_out), lam = probe(train, y, groups, [ind, ood], seed)
            out["results"].append(
                {"features": name, "M": M, "lambda": lam, "feature_seconds": seconds,
                 "contexts_train": len(y), "contexts_in_domain": len(ind),
                 "in_domain": r2(p_in, ctx["in_domain"][2]),
                 "out_of_domain": r2(p_out, ctx["out_of_domain"][2])}
            )  # fmt: skip
    out["wall_seconds"] = time.perf_counter() - t_start
    for r in out["results"]:
        print(f"{system} seed {seed} {r['features']} M={r['M']}: in-domain R2 "
              f"{[round(v, 3) for v in r['in_domain']]}", flush=True)  # fmt: skip
    return out


def summarise(runs) -> dict:
    """Median R² over seeds per (system, features, M, split, parameter)."""
    rows = [
        {"system": run["system"], "param": p, "features": r["features"], "M": r["M"],
         "in_domain": r["in_domain"][i], "out_of_domain": r["out_of_domain"][i]}
        for run in runs if "error" not in run for r in run["results"]
        for i, p in enumerate(run["params"])
    ]  # fmt: skip
    table = {}
    for (system, param, features, M), rs in group(rows, "system", "param", "features", "M").items():
        entry = table.setdefault(system, {}).setdefault(param, {}).setdefault(features, {})
        entry[f"M={M}"] = {
            which: statistics.median(r[which] for r in rs)
            for which in ("in_domain", "out_of_domain")
        } | {"seeds": len(rs)}
    met = {
        f"{s}/{p}": table[s][p]["new"]["M=1"]["in_domain"] >= TARGET
        for s in table
        if s in ODE
        for p in table[s]
    }
    return {"median_r2": table, "target_met_per_parameter": met, "target_met": all(met.values())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default=",".join(ODE))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--windows", type=int, default=3, help="random windows per episode")
    parser.add_argument("--old-rev", default=OLD_REV, help="git revision of the old prompter")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="Lotka-Volterra, 1 seed")
    parser.add_argument("--out", default=str(RESULTS / "dynadiff_prompt_cpu.json"))
    args = parser.parse_args()
    quick(args, systems="lotka_volterra", seeds=1, windows=1)
    systems = [s for s in args.systems.split(",") if s]
    cfg = {"windows": args.windows, "old_rev": args.old_rev}
    start = time.perf_counter()
    jobs = seed_jobs(systems, args.seeds, cfg)
    runs = map_jobs(run_one, jobs, workers=args.jobs, record_as=("system", "seed"))
    result = {
        "benchmark": "dynadiff_prompt",
        "peer": f"the prompter at git {args.old_rev} (pointwise derivatives, per-episode fit)",
        "config": {
            **cfg,
            "seeds": args.seeds,
            "systems": systems,
            "episodes": list(EPISODES),
            "lambdas": list(LAMBDAS),
            "target": TARGET,
        },  # fmt: skip
        "summary": summarise(runs),
        "runs": runs,
        "wall_seconds": time.perf_counter() - start,
    }
    write(args.out, result, echo=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
