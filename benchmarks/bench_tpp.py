"""CoCLD vs the temporal point-process baselines and the true process (issue CoCLD).

Claims checked:

- plain Hawkes data (``hawkes``, 1 and 5 marks): CoCLD's test log-likelihood per event
  within 2% of the true process's, and no worse than the best baseline;
- population-coupled data (``population_events``) and check-ins (``mobility``): CoCLD
  best on the log-likelihood and on the generation distances (gap_w1, count_w1,
  mark_jsd, daily_jsd, location_jsd), beside time_rmse, type_accuracy and loc_nll;
- training throughput (events/s, forward + backward + Adam, batch 32) of CoCLD vs the
  Neural Hawkes on the same batches in the same run.

Protocol, identical for every model (``poisson_tpp``, ``rmtpp``, ``nhp``, ``thp``,
``cocld``, each with its registry defaults, ``Model.from_data(file)``; and
``nhp_calendar``, the Neural Hawkes with ``calendar=True``: it reads the calendar
features CoCLD's population latent reads, issue 28):

- data: ``simsci.datasets.make_dataset(name, n, seed=s)`` with n = 600 sequences and the
  builder's 80/10/10 split; seed s is both the data seed and the model's init / data
  order seed (``--seeds`` of them, default 3: s = 0, 1, 2);
- training: :class:`simsci.train.Trainer`, Adam lr 3e-3 (constant), batch 32, gradient
  clipping at 10, ``--steps`` steps (default 300) for every model, validation every
  ``--val-every`` steps (default 50) on the val split, monitored on ``val_loss`` (the
  negative log-likelihood per event; the location term is not in it), the
  best-validation checkpoint (``checkpoints/best.pt``) used for the test;
- test: ``simsci.models.evaluate_events(model, file, split="test", generate=True,
  seed=s)``: ll_per_event (data time units), time_rmse, type_accuracy, loc_nll (models
  with a location head, on mobility), and the generation distances of sequences
  sampled by thinning from each test sequence's first event to its last event time;
- the true process (``TrueProcessTPP``: the generating process with the sequences'
  random effects, an oracle) is scored the same way, untrained: the ceiling (for
  models blind to absolute time: the score stops at the last event, not at the common
  window end of the Hawkes sets; see benchmarks/README.md);
- one CPU thread per run, ``--jobs`` (default 2) runs at once; wall time per run
  (training and scoring) is recorded.

Budget: the full run (4 sets x 3 seeds x 5 models + the truth, 300 steps) took 30 min
on 2 cores; a first pass at 200 steps took 16 min.

Diagnostics beside the scores (not used by the targets): the test log-likelihood with
64 instead of 16 Gauss-Legendre nodes per interval (``ll_per_event_q64``), and CoCLD's
generation distances with the non-default ``population_start`` (``altstart_*``; see
:func:`diagnostics`).

Throughput: ``--throughput-batches`` fixed training batches of 32 per data set (seed 0),
each a ``time_call`` (1 warm-up, ``--throughput-repeat`` timed) of ``training_step`` +
backward + clip + Adam step, NHP and CoCLD alternating batch by batch so that both
see the same machine load; events/s = scored events / the median time, summed over
the batches.

Usage: ``python benchmarks/bench_tpp.py [--seeds 3] [--steps 300] [--jobs 2] [--only
DATASET ...] [--models NAME ...] [--resume]``; writes ``benchmarks/results/tpp.json``
after every run (a killed run keeps what it finished; ``--resume`` skips those);
``--table`` prints the markdown tables of ``--out``; ``--quick``: n = 60, 5 steps, one
seed, hawkes-1 and mobility only (a smoke run).
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import math
import os
import subprocess
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _runner import (  # noqa: E402
    RESULTS,
    ROOT,
    Failure,
    group,
    mean_std,
    quick,
    run_jobs,
    show,
    write,
)

DATA = ROOT / "runs" / "tpp_bench_data"

#: data set key -> (builder, builder kwargs)
DATASETS = {
    "hawkes-1": ("hawkes", {"marks": 1}),
    "hawkes-5": ("hawkes", {"marks": 5}),
    "population": ("population_events", {}),
    "mobility": ("mobility", {}),
}
#: trained models (registry names, or VARIANTS), in table order
MODELS = ("poisson_tpp", "rmtpp", "nhp", "nhp_calendar", "thp", "cocld")
#: bench names of a registry model with non-default arguments: name -> (registry, kwargs)
VARIANTS = {
    # the Neural Hawkes given the calendar features CoCLD's population latent reads
    # (issue 28): how much of CoCLD's lead on the coupled sets is access to calendar time
    "nhp_calendar": ("nhp", {"calendar": True}),
}
TRUTH = "truth"
#: the slowest first, so that two workers finish together
ORDER = ("cocld", "thp", "nhp_calendar", "nhp", TRUTH, "rmtpp", "poisson_tpp")
HAWKES = ("hawkes-1", "hawkes-5")
COUPLED = ("population", "mobility")
GENERATION = ("gap_w1", "count_w1", "mark_jsd", "daily_jsd", "location_jsd")
#: metric -> higher is better
METRICS = {
    "ll_per_event": True,
    "time_rmse": False,
    "type_accuracy": True,
    "loc_nll": False,
    **{g: False for g in GENERATION},
}


def _code_version() -> dict:
    """The commit the run measured, and the uncommitted changes under simsci/."""

    def git(*cmd):
        try:
            return subprocess.run(
                ["git", *cmd], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    diff = git("diff", "HEAD", "--", "simsci")
    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": git("status", "--porcelain", "simsci"),
        "diff": diff if diff is None or len(diff) < 20000 else diff[:20000] + "\n[cut]",
    }


def _threads() -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def data_path(dataset: str, n: int, seed: int) -> Path:
    """Build (once) and return the file of a data set at size n and seed."""
    from simsci import datasets

    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"{dataset}_n{n}_s{seed}.h5"
    if not path.exists():
        name, kwargs = DATASETS[dataset]
        tmp = path.with_suffix(".tmp.h5")
        datasets.make_dataset(name, n, out=tmp, seed=seed, **kwargs)
        tmp.replace(path)
    return path


def _datasets(traj, cls):
    from simsci import data

    fields = tuple(f for f in cls.data_fields if f in traj.step_fields or f in traj.episode_fields)
    return (
        data.TrajectoryDataset(traj, fields=fields, split="train"),
        data.TrajectoryDataset(traj, fields=fields, split="val"),
    )


def run_one(spec: dict) -> dict:
    """Train one model on one data set with one seed (or score the truth); test scores."""
    from simsci import models

    model, traj, out = train_model(spec)
    start = time.perf_counter()
    scores = models.evaluate_events(model, traj, split="test", generate=True, seed=spec["seed"])
    out["eval_s"] = time.perf_counter() - start
    out["wall_s"] = out["train_s"] + out["eval_s"]
    out.update({k: float(v) for k, v in scores.items()})
    out.update(diagnostics(model, traj, spec["seed"]))
    return out


def train_model(spec: dict):
    """The protocol's training of ``spec["model"]`` (the truth: built, untrained):
    ``(model, trajectories, record)``, the record holding ``params``, ``train_s`` and
    the best validation step and loss. Shared with bench_tpp_easytpp.py."""
    _threads()
    from simsci import data, models, train

    dataset, name, seed = spec["dataset"], spec["model"], spec["seed"]
    path = data_path(dataset, spec["n"], seed)
    traj = data.open(path)
    out = {**spec}
    train_s = 0.0
    if name == TRUTH:
        model = models.TrueProcessTPP.from_data(traj)
        out["params"] = 0
    else:
        registry, kwargs = VARIANTS.get(name, (name, {}))
        cls = models.MODELS[registry]
        torch.manual_seed(seed)
        model = cls.from_data(traj, **kwargs)
        out["params"] = sum(p.numel() for p in model.parameters())
        train_set, val_set = _datasets(traj, cls)
        config = train.TrainConfig(
            max_steps=spec["steps"], epochs=100_000, batch_size=32, lr=3e-3,
            schedule="constant", grad_clip=10.0, val_every=spec["val_every"],
            monitor="val_loss", seed=seed, device="cpu", progress=False, log_every=10**9,
        )  # fmt: skip
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            trainer = train.Trainer(
                model, config, train_set, val_set, out_dir=tmp, collate_fn=model.collate
            )
            summary = trainer.fit()
            best = Path(tmp) / "checkpoints" / "best.pt"
            if best.exists():
                model = train.load_model(best)
        train_s = time.perf_counter() - start
        out["best_step"] = summary.get("best_step")
        out["best_val_loss"] = summary.get("best_metric")
    out["train_s"] = train_s
    return model, traj, out


def diagnostics(model, traj, seed: int) -> dict:
    """Checks beside the protocol's scores (not used by the targets):

    - ``ll_per_event_q64``: the test log-likelihood with 64 Gauss-Legendre nodes per
      interval instead of 16 (models integrated by quadrature; CoCLD's path then takes
      65 ODE steps per interval): a likelihood that moves with the grid depends on the
      discretisation, not only on the model;
    - CoCLD: the generation distances with the other setting of ``sample``'s
      ``population_start`` than its default (True: each continuation starts from a draw
      of the diffusion interpolator; False: from the mean ``initial_state``), prefixed
      ``altstart_``; ``population_start_default`` records the default scored above.
    """
    from simsci import models
    from simsci.models._events import gauss_legendre

    out = {}
    start = time.perf_counter()
    uses_quadrature = type(model).log_likelihood_terms is models.EventModel.log_likelihood_terms
    if model.trainable and uses_quadrature:
        nodes, weights = (torch.tensor(v, dtype=torch.float32) for v in gauss_legendre(64))
        old = model.gl_nodes, model.gl_weights
        model.gl_nodes, model.gl_weights = nodes, weights
        try:
            scores = models.evaluate_events(model, traj, split="test", generate=False)
        finally:
            model.gl_nodes, model.gl_weights = old
        out["ll_per_event_q64"] = float(scores["ll_per_event"])
    default = inspect.signature(type(model).sample).parameters.get("population_start")
    if isinstance(model, models.CoCLD) and default is not None:
        alt = not default.default
        model.sample = functools.partial(model.sample, population_start=alt)
        try:
            scores = models.evaluate_events(model, traj, split="test", generate=True, seed=seed)
        finally:
            del model.sample
        out["population_start_default"] = bool(default.default)
        out.update({f"altstart_{k}": float(scores[k]) for k in GENERATION if k in scores})
    out["diagnostics_s"] = time.perf_counter() - start
    return out


def throughput(spec: dict) -> dict:
    """Training events/s of NHP and CoCLD on the same batches (module docstring)."""
    _threads()
    from simsci import data, models
    from simsci.bench import time_call

    traj = data.open(data_path(spec["dataset"], spec["n"], 0))
    nets = {}
    for name in ("nhp", "cocld"):
        cls = models.MODELS[name]
        torch.manual_seed(0)
        model = cls.from_data(traj)
        model.train()
        nets[name] = (model, torch.optim.Adam(model.parameters(), lr=3e-3))
    train_set, _ = _datasets(traj, models.MODELS["cocld"])
    order = np.random.default_rng(0).permutation(len(train_set))
    batches = []
    for b in range(spec["batches"]):
        idx = order[32 * b : 32 * (b + 1)]
        if len(idx) == 0:
            break
        batches.append(nets["cocld"][0].collate([train_set[int(i)] for i in idx]))
    totals = {name: {"events": 0, "seconds": 0.0} for name in nets}
    for batch in batches:
        events = int((batch["valid"][:, 1:]).sum())
        for name, (model, opt) in nets.items():

            def step(model=model, opt=opt, batch=batch):
                opt.zero_grad(set_to_none=True)
                loss = model.training_step(batch)["loss"]
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
                opt.step()

            t = time_call(step, repeat=spec["repeat"], warmup=1)
            totals[name]["events"] += events
            totals[name]["seconds"] += t.median
    out = {"dataset": spec["dataset"], "n": spec["n"], "batches": len(batches), "batch_size": 32}
    for name, tot in totals.items():
        out[f"{name}_events_per_s"] = tot["events"] / tot["seconds"]
        out[f"{name}_ms_per_step"] = 1000 * tot["seconds"] / len(batches)
    out["cocld_vs_nhp"] = out["cocld_events_per_s"] / out["nhp_events_per_s"]
    return out


# ---------------------------------------------------------------- summaries
def _summary(runs: list[dict]) -> dict:
    """mean ± std over seeds per (data set, model) and metric."""
    table = {}
    for (dataset, model), rs in group(runs, "dataset", "model").items():
        metrics = {}
        extra = [k for k in rs[0] if k.startswith("altstart_") or k == "ll_per_event_q64"]
        keys = [*METRICS, *extra, "train_s", "eval_s", "diagnostics_s", "wall_s"]
        for key in [*keys, "params", "best_step"]:
            values = [r[key] for r in rs if isinstance(r.get(key), (int, float))]
            values = [float(v) for v in values if math.isfinite(v)]
            if values and len(values) == len(rs):
                metrics[key] = mean_std(values)
        table[f"{dataset} / {model}"] = {"seeds": len(rs), **metrics}
    return table


def _mean(summary, dataset, model, key):
    entry = summary.get(f"{dataset} / {model}", {}).get(key)
    return None if entry is None else entry["mean"]


def targets(summary: dict) -> dict:
    """The issue's targets, judged on the means over seeds."""
    out = {}
    baselines = [m for m in MODELS if m != "cocld"]
    for d in HAWKES:
        ll = {m: _mean(summary, d, m, "ll_per_event") for m in (*MODELS, TRUTH)}
        if ll["cocld"] is None or ll[TRUTH] is None:
            continue
        gap = ll[TRUTH] - ll["cocld"]
        best = max((m for m in baselines if ll[m] is not None), key=ll.get, default=None)
        out[d] = {
            "ll_gap_to_truth": gap,
            "ll_gap_rel": gap / abs(ll[TRUTH]),
            "within_2pct_of_truth": gap <= 0.02 * abs(ll[TRUTH]),
            "best_baseline": best,
            "ll_vs_best_baseline": None if best is None else ll["cocld"] - ll[best],
            "no_worse_than_best_baseline": best is None or ll["cocld"] >= ll[best],
        }
    for d in COUPLED:
        entry = {}
        for key in ("ll_per_event", *GENERATION):
            vals = {m: _mean(summary, d, m, key) for m in MODELS}
            vals = {m: v for m, v in vals.items() if v is not None}
            if "cocld" not in vals:
                continue
            higher = METRICS[key]
            best = (max if higher else min)(vals, key=vals.get)
            others = {m: v for m, v in vals.items() if m != "cocld"}
            runner = (max if higher else min)(others, key=others.get) if others else None
            entry[key] = {
                "best": best,
                "cocld_best": best == "cocld",
                "cocld": vals["cocld"],
                "best_baseline": runner,
                "best_baseline_value": None if runner is None else others[runner],
            }
        if entry:
            gen = [k for k in GENERATION if k in entry]
            entry["generation_wins"] = f"{sum(entry[k]['cocld_best'] for k in gen)}/{len(gen)}"
            out[d] = entry
    return out


def _cell(entry, key, digits=3):
    e = entry.get(key) if entry else None
    if e is None:
        return "–"
    return f"{e['mean']:.{digits}f} ± {e['std']:.{digits}f}"


def markdown_tables(result: dict) -> str:
    """One table per data set: a row per model, mean ± std over seeds, the best trained
    model in bold per column; then the throughput table."""
    summary = result["summary"]
    lines = []
    for d in DATASETS:
        rows = [m for m in (*MODELS, TRUTH) if f"{d} / {m}" in summary]
        if not rows:
            continue
        keys = [
            k
            for k in METRICS
            if any(k in summary[f"{d} / {m}"] for m in rows)
            and not (d in HAWKES and k in ("daily_jsd", "location_jsd", "loc_nll"))
        ]
        if d == "hawkes-1":
            keys = [k for k in keys if k not in ("type_accuracy", "mark_jsd")]
        seeds = max(summary[f"{d} / {m}"]["seeds"] for m in rows)
        lines += [f"**{d}** ({seeds} seed{'s' * (seeds > 1)})", ""]
        lines.append("| model | " + " | ".join(keys) + " | wall s (train + test) |")
        lines.append("|---" * (len(keys) + 2) + "|")
        best = {}
        for k in keys:
            vals = {m: _mean(summary, d, m, k) for m in rows if m != TRUTH}
            vals = {m: v for m, v in vals.items() if v is not None}
            if vals:
                best[k] = (max if METRICS[k] else min)(vals, key=vals.get)
        for m in rows:
            entry = summary[f"{d} / {m}"]
            cells = []
            for k in keys:
                c = _cell(entry, k)
                cells.append(f"**{c}**" if best.get(k) == m and c != "–" else c)
            wall = entry.get("wall_s", {}).get("mean", float("nan"))
            name = "true process (ceiling)" if m == TRUTH else m
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {wall:.0f} |")
            if m == "cocld" and any(k.startswith("altstart_") for k in entry):
                cells = [_cell(entry, f"altstart_{k}") if k in GENERATION else "" for k in keys]
                alt = not result.get("population_start_default", False)
                lines.append(
                    f"| *cocld, population_start={alt} (diagnostic)* | "
                    + " | ".join(cells)
                    + " | |"
                )
        lines.append("")
    q_rows = []
    for d in DATASETS:
        cells = []
        for m in MODELS:
            e = summary.get(f"{d} / {m}", {})
            if "ll_per_event_q64" in e:
                diff = e["ll_per_event_q64"]["mean"] - e["ll_per_event"]["mean"]
                cells.append(f"{e['ll_per_event_q64']['mean']:.4f} ({diff:+.4f})")
            else:
                cells.append("closed form" if m == "rmtpp" else "–")
        if any(c not in ("–", "closed form") for c in cells):
            q_rows.append(f"| {d} | " + " | ".join(cells) + " |")
    if q_rows:
        lines += [
            "Test ll per event with 64 Gauss-Legendre nodes per interval (change vs 16):",
            "",
            "| data | " + " | ".join(MODELS) + " |",
            "|---" * (len(MODELS) + 1) + "|",
            *q_rows,
            "",
        ]
    tp = result.get("throughput", [])
    if tp:
        lines += [
            "| data (batches of 32) | NHP events/s (ms/step) | CoCLD events/s (ms/step) | "
            "CoCLD / NHP |",
            "|---|---|---|---|",
        ]
        for r in tp:
            lines.append(
                f"| {r['dataset']} ({r['batches']}) | {r['nhp_events_per_s']:,.0f} "
                f"({r['nhp_ms_per_step']:.0f}) | {r['cocld_events_per_s']:,.0f} "
                f"({r['cocld_ms_per_step']:.0f}) | **{r['cocld_vs_nhp']:.2f}×** |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--hawkes-seeds", type=int, default=None, help="seeds of the Hawkes sets (default --seeds)"
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--val-every", type=int, default=50)
    parser.add_argument("--n", type=int, default=600, help="sequences per data set")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=None, help="data sets (default: all)")
    parser.add_argument("--models", nargs="*", default=None, help="models (default: all)")
    parser.add_argument("--no-throughput", action="store_true")
    parser.add_argument("--throughput-batches", type=int, default=4)
    parser.add_argument("--throughput-repeat", type=int, default=3)
    parser.add_argument("--out", default=str(RESULTS / "tpp.json"))
    parser.add_argument("--resume", action="store_true", help="skip runs already in --out")
    parser.add_argument("--quick", action="store_true", help="smoke run: n=60, 5 steps, 1 seed")
    parser.add_argument("--table", action="store_true", help="print --out as markdown, exit")
    args = parser.parse_args()
    if args.table:
        print(markdown_tables(json.loads(Path(args.out).read_text())))
        return
    quick(args, seeds=1, steps=5, val_every=5, n=60, hawkes_seeds=1,
          only=args.only or ["hawkes-1", "mobility"], throughput_batches=1,
          throughput_repeat=1)  # fmt: skip
    _threads()

    datasets = args.only or list(DATASETS)
    names = args.models or [*MODELS, TRUTH]
    hawkes_seeds = args.seeds if args.hawkes_seeds is None else args.hawkes_seeds

    def seeds(d):
        return range(hawkes_seeds if d in HAWKES else args.seeds)

    for d in datasets:
        for s in seeds(d):
            data_path(d, args.n, s)  # once, before the workers start
    out = Path(args.out)
    runs, tput = [], []
    if args.resume and out.exists():
        old = json.loads(out.read_text())
        runs, tput = old.get("runs", []), old.get("throughput", [])
    done = {(r["dataset"], r["model"], r["seed"]) for r in runs}
    specs = [
        {
            "dataset": d,
            "model": m,
            "seed": s,
            "n": args.n,
            "steps": args.steps,
            "val_every": args.val_every,
        }
        for m in ORDER
        if m in names
        for s in range(max(args.seeds, hawkes_seeds))
        for d in datasets
        if s in seeds(d) and (d, m, s) not in done
    ]
    tput_done = {r["dataset"] for r in tput}
    tput_specs = [
        {
            "dataset": d,
            "n": args.n,
            "batches": args.throughput_batches,
            "repeat": args.throughput_repeat,
        }
        for d in datasets
        if not args.no_throughput and d not in tput_done
    ]
    protocol = {
        "n": args.n,
        "split": "80/10/10 (builder)",
        "steps": args.steps,
        "val_every": args.val_every,
        "batch_size": 32,
        "optimizer": "adam",
        "lr": 3e-3,
        "schedule": "constant",
        "grad_clip": 10.0,
        "monitor": "val_loss (-ll per event, best checkpoint used for test)",
        "seeds": args.seeds,
        "hawkes_seeds": hawkes_seeds,
        "seed_meaning": "data seed = init / data-order seed",
        "threads_per_run": 1,
        "jobs": args.jobs,
        "quick": args.quick,
        "code": _code_version(),
    }

    def save():
        summary = _summary(runs)
        write(
            out,
            {
                "benchmark": "tpp",
                "protocol": protocol,
                "summary": summary,
                "targets": targets(summary),
                "population_start_default": next(
                    (
                        r["population_start_default"]
                        for r in runs
                        if "population_start_default" in r
                    ),
                    None,
                ),
                "throughput": tput,
                "runs": runs,
            },
        )

    start = time.perf_counter()
    tasks = [functools.partial(run_one, spec) for spec in specs]
    tasks += [functools.partial(throughput, spec) for spec in tput_specs]
    # always in worker processes (even --jobs 1); a failed run is reported, the rest go on
    for task, result in run_jobs(tasks, workers=args.jobs, in_process=False):
        if isinstance(result, Failure):
            continue
        (runs if task.func is run_one else tput).append(result)
        print(f"[{time.perf_counter() - start:.0f} s]", show(result), flush=True)
        save()
    save()
    print(markdown_tables(json.loads(out.read_text())))


if __name__ == "__main__":
    main()
