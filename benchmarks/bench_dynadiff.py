"""DynaDiff vs its baselines on the CoDA/LEADS protocols (issue 9): prediction error on
in-domain and out-of-domain environments, and the time to deploy to a new environment.

Per system and seed (``simsci.models.dynadiff``; data under runs/dynadiff_bench,
git-ignored): the protocol's files (``make_environments``), a zoo (``build_zoo``: pooled
model, then one expert per training environment, ``--zoo-steps`` each), the generator
(``train_generator``: ``--ae-steps`` autoencoder + ``--diffusion-steps`` diffusion
steps), CoDA (``--zoo-steps``), then ``compare_methods`` on the in-domain and the
out-of-domain files: the context is the first ``context_steps`` frames of one episode
of the environment; the error is over full-horizon rollouts of its other episodes from
their first frames (RMSE and MSE in original units, mean over environments).

DynaDiff is reported three times: ``dynadiff`` (generation only: DDIM samples scored on
the context), ``dynadiff_guided`` (the reverse diffusion guided by the context's rollout
error, issue 24; the headline method: no gradient step on any weight) and
``dynadiff_refine`` (the unguided samples' latents refined on the context for 30 Adam
steps). Peers (same run, same experts, contexts and metrics): pooled model, nearest
expert (by context error), zoo average, fine-tuning the pooled model on the context for
100 Adam steps, CoDA (low-rank context vector fitted for 100 steps). Fair settings:
``tune_methods`` picks fine-tuning's and CoDA's learning rates and the guidance scale
and polishing steps by a sweep on the protocol's validation episodes (val.h5: training
environments, episodes no model trained on), the same sweep size for each. Every
method's deployment seconds are reported beside its error. Targets: ``dynadiff_guided``
on average >= 10% below the best baseline's RMSE and best on >= 6 of the 10 rows.

Deploy time: per in-domain environment, guided generation's time against fine-tuning
the pooled model (tuned learning rate) on the context until its error on the
evaluation episodes reaches the guided predictor's (checked every 10 steps, up to
``--max-finetune`` steps; the evaluation time is not counted). Target >= 100x.

Each finished run is appended to runs/dynadiff_bench/runs.jsonl as it completes.

Usage: ``python benchmarks/bench_dynadiff.py [--systems a,b] [--seeds 3] [--jobs 2]
[--quick] [--resume] [--out PATH]``; writes benchmarks/results/dynadiff_cpu.json
(``--resume`` runs only the system/seed pairs not yet in runs.jsonl; ``--from-log``
summarises the log without running anything).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from pathlib import Path

from _runner import (
    RESULTS,
    ROOT,
    map_jobs,
    median_ratio,
    medians,
    quick,
    ratio,
    read_log,
    seed_jobs,
    write,
)

WORK = ROOT / "runs" / "dynadiff_bench"
SYSTEMS = (
    "lotka_volterra",
    "glycolytic_oscillator",
    "damped_pendulum",
    "gray_scott",
    "navier_stokes_2d",
)
ODE = {"lotka_volterra", "glycolytic_oscillator", "damped_pendulum"}
OURS = ("dynadiff", "dynadiff_guided", "dynadiff_refine")


def work_dir(quick: bool) -> Path:
    """The runs' folder (and its runs.jsonl log); quick runs keep out of the full ones'."""
    return WORK.with_name(WORK.name + "_quick") if quick else WORK


def deploy_time(gen, zoo, x, context_steps, target_rmse, max_steps, lr=1e-3):
    """Seconds of fine-tuning (pooled start) on the context until the evaluation RMSE
    reaches ``target_rmse``; (seconds, steps, reached)."""
    import torch

    from simsci.models.dynadiff import _baselines as B
    from simsci.models.dynadiff._predictor import predictor_from_weights, rollout_errors

    ctx, test = x[:1, :context_steps].float(), x[1:].float()
    net = B.functional_template(zoo.spec)
    wins = B.context_windows((ctx - zoo.mean) / zoo.std, int(zoo.record.get("window", 4)))
    flat = B.pooled(zoo).clone().requires_grad_(True)
    opt = torch.optim.Adam([flat], lr=lr)
    seconds, step = 0.0, 0
    while step < max_steps:
        t0 = time.perf_counter()
        for _ in range(10):
            opt.zero_grad()
            loss = B.context_loss(net, B.unflatten_params(flat, zoo.spec), wins)
            loss.backward()
            opt.step()
        seconds += time.perf_counter() - t0
        step += 10
        err = rollout_errors(predictor_from_weights(flat.detach(), zoo), test)["rmse"]
        if err <= target_rmse:
            return seconds, step, True
    return seconds, step, False


def run_one(job) -> dict:
    """One (system, seed); the runner records a failure and logs a finished run."""
    system, seed, cfg = job
    import torch

    warnings.simplefilter("ignore")
    from simsci.models import dynadiff as dd
    from simsci.models.dynadiff._predictor import rollout_errors

    field = system not in ODE
    steps = cfg["pde_steps"] if field else cfg["zoo_steps"]
    work = work_dir(cfg["quick"]) / f"{system}_s{seed}"
    t_start = time.perf_counter()
    paths = dd.make_environments(system, work / "data", seed=seed, quick=cfg["quick"], device="cpu")
    torch.manual_seed(seed)
    zoo = dd.load_zoo(dd.build_zoo(work / "data", work / "zoo.pt", steps=steps, pool_steps=steps,
                                   seed=seed, device="cpu", run_dir=work / "zoo_runs"))  # fmt: skip
    P = dd.get_protocol(system)
    gen = dd.train_generator(
        zoo, paths["train"], work / "gen", autoencoder_steps=cfg["ae_steps"] // (2 if field else 1),
        diffusion_train_steps=cfg["diffusion_steps"] // (2 if field else 1),
        context_steps=P.context_steps, device="cpu", seed=seed,
    )  # fmt: skip
    coda = dd.train_baselines(
        zoo, paths["train"], work / "base", coda_steps=steps, device="cpu", seed=seed
    )
    out = {"system": system, "seed": seed, "zoo_val_rmse_median": float(zoo.val_rmse.median()),
           "experts_per_minute": zoo.record["experts_per_minute"]}  # fmt: skip
    t0 = time.perf_counter()
    tuned = dd.tune_methods(gen, zoo, paths["val"], coda=coda, seed=seed)
    out["tuned"] = {**tuned, "seconds": time.perf_counter() - t0}
    settings = dict(finetune_lr=tuned["finetune"], coda_lr=tuned["coda"],
                    guidance=tuned["guidance"], polish_steps=tuned["polish_steps"])  # fmt: skip
    for which in ("in_domain", "out_of_domain"):
        res = dd.compare_methods(gen, zoo, paths[which], coda=coda, seed=seed, **settings)
        out[which] = res["summary"]
        out[which + "_envs"] = res["environments"]
    # deploy time on the in-domain environments
    env = dd.load_environments(paths["in_domain"])
    deploys = []
    for x in env.episodes:
        t0 = time.perf_counter()
        model, _ = gen.generate(
            x[:1, : P.context_steps].float(), seed=seed, refine_steps=0,
            guidance=tuned["guidance"], polish_steps=tuned["polish_steps"],
        )  # fmt: skip
        t_gen = time.perf_counter() - t0
        target = rollout_errors(model, x[1:].float())["rmse"]
        secs, nsteps, reached = deploy_time(
            gen, zoo, x, P.context_steps, target, cfg["max_finetune"], lr=tuned["finetune"]
        )
        deploys.append({"generate_s": t_gen, "finetune_s": secs, "finetune_steps": nsteps,
                        "reached": reached, "target_rmse": target})  # fmt: skip
    out["deploy"] = deploys
    out["wall_seconds"] = time.perf_counter() - t_start
    rmse = " ".join(f"{k} {v['rmse']:.4g}" for k, v in out["in_domain"].items())
    print(f"{system} seed {seed}: in-domain rmse {rmse}", flush=True)
    return out


def summarise(runs, systems) -> dict:
    summary = {}
    methods = None
    for system in systems:
        mine = [r for r in runs if r["system"] == system and "error" not in r]
        if not mine:
            continue
        row = {"seeds": len(mine)}
        for which in ("in_domain", "out_of_domain"):
            methods = list(mine[0][which])
            row[which] = {
                m: medians((r[which][m] for r in mine), ("rmse", "mse", "seconds")) for m in methods
            }
            base = {m: v["rmse"] for m, v in row[which].items() if not m.startswith("dynadiff")}
            best = min(base, key=base.get)
            row[which]["best_baseline"] = best
            for ours in OURS:
                value = row[which][ours]["rmse"]
                row[which][f"{ours}_rmse_reduction_vs_best"] = 1 - ratio(value, base[best])
                row[which][f"{ours}_best"] = value < base[best]
        dep = [d for r in mine for d in r["deploy"]]
        gen_s = statistics.median(d["generate_s"] for d in dep)
        reached = [d for d in dep if d["reached"]]
        row["deploy"] = {
            "generate_s_median": gen_s,
            "finetune_s_median": statistics.median(d["finetune_s"] for d in dep),
            "speedup_median": median_ratio(
                (d["finetune_s"] for d in dep), (d["generate_s"] for d in dep)
            ),
            "finetune_reached_fraction": len(reached) / len(dep),
        }
        summary[system] = row
    rows = list(summary.values())
    splits = ("in_domain", "out_of_domain")
    for ours in OURS:
        key = f"{ours}_rmse_reduction_vs_best"
        red = [v[w][key] for v in rows for w in splits]
        summary[f"mean_{key}"] = float(sum(red) / len(red)) if red else math.nan
        summary[f"{ours}_best_rows"] = sum(v[w][f"{ours}_best"] for v in rows for w in splits)
    summary["rows"] = 2 * len(rows)
    summary["target_met"] = (
        summary["mean_dynadiff_guided_rmse_reduction_vs_best"] >= 0.10
        and summary["dynadiff_guided_best_rows"] >= 0.6 * summary["rows"]
    )
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--pde-seeds", type=int, default=None, help="seeds for PDE systems")
    parser.add_argument("--zoo-steps", type=int, default=1500)
    parser.add_argument("--pde-steps", type=int, default=300)
    parser.add_argument("--ae-steps", type=int, default=600)
    parser.add_argument("--diffusion-steps", type=int, default=3000)
    parser.add_argument("--max-finetune", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--ode-first", action="store_true", help="run the ODE systems first")
    parser.add_argument("--quick", action="store_true", help="quick protocols, 1 seed, few steps")
    parser.add_argument("--out", default=str(RESULTS / "dynadiff_cpu.json"))
    parser.add_argument(
        "--from-log", action="store_true", help="summarise runs/dynadiff_bench/runs.jsonl only"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="skip the (system, seed) runs already in runs.jsonl; summarise them with the new",
    )
    args = parser.parse_args()
    quick(args, systems="lotka_volterra", seeds=1, zoo_steps=40, pde_steps=10, ae_steps=20,
          diffusion_steps=40, max_finetune=50)  # fmt: skip
    systems = [s for s in args.systems.split(",") if s]
    cfg = dict(zoo_steps=args.zoo_steps, pde_steps=args.pde_steps, ae_steps=args.ae_steps,
               diffusion_steps=args.diffusion_steps, max_finetune=args.max_finetune,
               quick=args.quick)  # fmt: skip
    seeds = args.seeds
    pde_seeds = seeds if args.pde_seeds is None else args.pde_seeds
    # the PDE systems are the long jobs: start them first (--ode-first: the ODE rows first)
    pde_jobs = seed_jobs([s for s in systems if s not in ODE], pde_seeds, cfg)
    ode_jobs = seed_jobs([s for s in systems if s in ODE], seeds, cfg)
    jobs = ode_jobs + pde_jobs if args.ode_first else pde_jobs + ode_jobs
    start = time.perf_counter()
    if args.from_log:  # the runs logged so far (latest run per system and seed)
        logged = read_log(WORK / "runs.jsonl", key=lambda r: (r["system"], r["seed"]))
        runs = [r for r in logged if r["system"] in systems]
    else:  # each finished run is appended to the log as it completes
        log = work_dir(args.quick) / "runs.jsonl"
        done = []
        if args.resume and log.exists():
            done = [
                r
                for r in read_log(log, key=lambda r: (r["system"], r["seed"]))
                if r["system"] in systems and "error" not in r
            ]
            finished = {(r["system"], r["seed"]) for r in done}
            jobs = [j for j in jobs if (j[0], j[1]) not in finished]
        runs = done + map_jobs(
            run_one, jobs, workers=args.jobs, log=log, record_as=("system", "seed")
        )
    result = {
        "benchmark": "dynadiff",
        "peer": "pooled model, nearest expert, zoo average, fine-tuning (100 steps), CoDA "
        "(low-rank context adaptation, 100 steps), learning rates tuned on val.h5: same "
        "experts, data, contexts, metrics",
        "config": {**cfg, "seeds": seeds, "pde_seeds": pde_seeds, "systems": systems},
        "summary": summarise(runs, systems),
        "runs": runs,
        # with --from-log: the runs' own wall times summed (one CPU thread each)
        "wall_seconds": (
            sum(r.get("wall_seconds", 0.0) for r in runs)
            if args.from_log
            else time.perf_counter() - start
        ),
    }
    write(args.out, result, echo=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
