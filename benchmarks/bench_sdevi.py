"""SDEVI vs the baselines on irregular time series: interpolation, extrapolation,
regression and classification (issue 6), and SDEVI's ELBO vs the exact evidence.

Every model is trained by the same harness (``simsci.models._series``: the encoder sees
the visible values, the likelihood or loss scores the targets) with the same budget:
``--steps`` Adam steps (150 on the image and BasicMotions sets), batch 32, cosine
schedule, gradient clipping at 10, one CPU thread, then scored on the test split.
Scores: normalised MSE on the hidden (interpolation) or future (extrapolation) values,
with the last-value and episode-mean baselines of the same points; accuracy
(classification); MSE of the standardised label (regression), with the train-split
majority class / label mean as the trivial baseline.

Models (same latent size 8 and width 64 where they have one):

- ``sdevi-linear``, ``sdevi-nonlinear``, ``sdevi-complex`` (``simsci.models.SDEVI``,
  amortised), ``sdevi-exact`` (the linear variant with ``inference="exact"``: the
  Kalman smoother's posterior)
- ``gru_dt`` (GRU-Δt), ``latent_ode`` (ODE-RNN encoder), ``latent_sde`` (torchsde
  latent SDE with path sampling, ``logqp=True``)

Problems (data made by ``simsci.systems`` into runs/sdevi_bench_data, git-ignored):
damped pendulum with 30/50/70% of the points kept per channel (interpolation) and 50%
(extrapolation: observe the first half, predict the second), stochastic Lorenz 50%
(interpolation), pendulum images (24x24, regression of the final angle's sin/cos),
the climate-like set (interpolation), BasicMotions from aeon (classification; skipped
when aeon is not installed). And ``linear-sde``: the exact linear-SDE set, where the
Kalman filter gives log p(y) under the true generating process: SDEVI's ELBO per
observed value against it.

Usage: ``python benchmarks/bench_sdevi.py [--seeds 3] [--steps 200] [--lr 3e-3]
[--jobs 2] [--only PROBLEM ...] [--models NAME ...] [--kwargs JSON --tag TAG]``; writes
``benchmarks/results/sdevi_cpu.json`` after every run (a killed run keeps what it finished;
``--resume`` skips those). ``--kwargs '{"head_dropout": 0.3}'`` passes constructor
arguments to every model run (a variant of the named models); ``--tag`` names the variant
in the results (model ``sdevi-exact[TAG]``), so variants share one ``--out`` file.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from _runner import RESULTS, ROOT, Failure, group, mean_std, quick, run_jobs, show, write

DATA = ROOT / "runs" / "sdevi_bench_data"

MODELS = {
    "sdevi-linear": ("sdevi", {"variant": "linear"}),
    "sdevi-nonlinear": ("sdevi", {"variant": "nonlinear"}),
    "sdevi-complex": ("sdevi", {"variant": "complex", "latent_dim": 4}),  # 4 complex = 8 real
    "sdevi-exact": ("sdevi", {"variant": "linear", "inference": "exact"}),
    "gru_dt": ("gru_dt", {}),
    "latent_ode": ("latent_ode", {"encoder": "odernn"}),
    "latent_sde": ("latent_sde", {}),
}
SIZES = {"latent_dim": 8, "hidden_dim": 64}


def _make(problem: str) -> Path:
    """Build a problem's data file once (seeded, so every run sees the same data)."""
    from simsci import data, datasets, systems

    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"{problem}.h5"
    if path.exists():
        return path
    if problem == "pendulum-images":
        datasets.make_dataset("pendulum_images", 320, out=path, seed=0)
    elif problem.startswith("pendulum-"):
        keep = int(problem.split("-")[1]) / 100
        systems.generate(
            "damped_pendulum", 320, t_end=6.0, dt=0.1, keep=keep, per_channel=True,
            params="sample", out=path, seed=0, progress=False,
        )  # fmt: skip
    elif problem.startswith("lorenz-"):
        keep = int(problem.split("-")[1]) / 100
        systems.generate(
            "stochastic_lorenz", 320, t_end=2.0, dt=0.025, step_size=0.0025, keep=keep,
            per_channel=True, out=path, seed=0, progress=False,
        )  # fmt: skip
    elif problem == "linear-sde":
        systems.generate(
            "linear_sde", 320, t_end=10.0, dt=0.1, keep=0.3, obs_noise=0.1, out=path, seed=0,
            progress=False,
        )  # fmt: skip
    elif problem == "climate":
        datasets.make_dataset("climate", 160, out=path, seed=0)
    elif problem == "basicmotions":
        data.import_aeon("BasicMotions", path, keep=0.5, seed=0)
    else:
        raise ValueError(f"unknown problem {problem!r}")
    return path


#: problem -> (task, data file builder key)
PROBLEMS = {
    "pendulum-30": "interpolation",
    "pendulum-50": "interpolation",
    "pendulum-70": "interpolation",
    "pendulum-50-extrap": "extrapolation",
    "lorenz-50": "interpolation",
    "pendulum-images": "regression",
    "climate": "interpolation",
    "basicmotions": "classification",
}


#: windows of long episodes (climate: 365 days -> 64-step windows, stride 32)
WINDOWS = {"climate": 64}
#: fewer steps where a step is dear (576 pixels; 36 training episodes of 100 points)
STEPS = {"pendulum-images": 150, "basicmotions": 150}


def _sizes(cls) -> dict:
    """The shared sizes a model's constructor takes (GRU-Δt has no latent state)."""
    import inspect

    params = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in SIZES.items() if k in params}


def _data_name(problem: str) -> str:
    return problem.removesuffix("-extrap")


def _trivial_label_scores(traj, task: str) -> dict:
    """Majority class / train-mean label on the test split."""
    label = np.asarray(traj.column("label"))
    split = np.asarray(traj.column("split"))
    train, test = label[split == 0], label[split == 2]
    if task == "classification":
        majority = np.bincount(train.astype(np.int64)).argmax()
        return {"majority_accuracy": float((test == majority).mean())}
    train = train.reshape(len(train), -1).astype(np.float64)
    test = test.reshape(len(test), -1).astype(np.float64)
    std = np.where(train.std(0) > 1e-8, train.std(0), 1.0)
    return {"label_mean_nmse": float((((test - train.mean(0)) / std) ** 2).mean())}


def run_one(spec: dict) -> dict:
    """Train one model on one problem with one seed; test-split scores."""
    from simsci import data, models, train

    problem, model_key, seed, steps = spec["problem"], spec["model"], spec["seed"], spec["steps"]
    task = PROBLEMS.get(problem, "interpolation")
    window = WINDOWS.get(problem)
    traj = data.open(_make(_data_name(problem)))
    name, kwargs = MODELS[model_key.split("[")[0]]
    cls = models.MODELS[name]
    torch.manual_seed(seed)
    kwargs = {**_sizes(cls), **kwargs, **spec.get("kwargs", {})}
    model = cls.from_data(traj, window=window, task=task, **kwargs)
    fields = tuple(f for f in cls.data_fields if f in traj.step_fields or f in traj.episode_fields)
    train_set = data.TrajectoryDataset(
        traj, fields=fields, split="train", window=window, stride=window and window // 2
    )
    test_set = data.TrajectoryDataset(traj, fields=fields, split="test", window=window)
    config = train.TrainConfig(
        max_steps=steps, epochs=100_000, batch_size=32, lr=spec.get("lr", 3e-3),
        schedule="cosine", grad_clip=10.0, seed=seed, device="cpu", progress=False,
        log_every=10**9,
    )  # fmt: skip
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        train.Trainer(model, config, train_set, None, out_dir=tmp, collate_fn=model.collate).fit()
    seconds = time.perf_counter() - start
    scores = train.evaluate(model, test_set, collate_fn=model.collate, batch_size=64)
    out = {**spec, "task": task, "train_s": seconds, **{k: float(v) for k, v in scores.items()}}
    if task in ("classification", "regression"):
        out.update(_trivial_label_scores(traj, task))
    return out


def linear_sde_elbo(seed: int, steps: int) -> dict:
    """SDEVI (linear) on the exact linear-SDE set: its ELBO per observed value on the
    test split vs the exact log evidence under the true process (Kalman filter)."""
    from simsci import data, models, systems, train
    from simsci.models._series import observed_mask
    from simsci.models.sdevi import kalman_log_likelihood, lti_transition

    traj = data.open(_make("linear-sde"))
    torch.manual_seed(seed)
    model = models.SDEVI.from_data(traj, **{**SIZES, "latent_dim": 2})
    train_set = data.TrajectoryDataset(traj, fields=("t", "x"), split="train")
    config = train.TrainConfig(
        max_steps=steps, epochs=100_000, batch_size=32, lr=3e-3, schedule="cosine",
        grad_clip=10.0, seed=seed, device="cpu", progress=False, log_every=10**9,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        train.Trainer(model, config, train_set, None, out_dir=tmp, collate_fn=model.collate).fit()
    model = model.double().eval()
    test = data.TrajectoryDataset(traj, fields=("t", "x"), split="test", dtype=torch.float64)
    batch = model.collate([test[i] for i in range(len(test))])
    observed = observed_mask(batch)
    # the truth: default parameters (one process for the whole file), z(0) ~ N(m0, P0)
    # at t = 0, propagated to each episode's first kept time t0 (batch["t0"])
    system = systems.get("linear_sde")
    A, b, L, m0, P0 = system.linear_form()
    H, R = system.observation_model(traj.meta)
    F, c, Q = lti_transition(A, b, L, batch["t0"])
    m_first = F @ m0 + c
    P_first = F @ P0 @ F.transpose(-1, -2) + Q
    with torch.no_grad():
        # ELBO of the data in data units: log p(x) = log p(xn) - sum_obs log std
        elbo = model.elbo(batch) - (observed * model.data_std.log()).sum((1, 2))
        exact, _, _ = kalman_log_likelihood(
            torch.nan_to_num(batch["x"]), observed, batch["t"], A, b, L, m_first, P_first,
            H, R, valid=batch["valid"],
        )  # fmt: skip
    n = float(observed.sum())
    return {
        "problem": "linear-sde",
        "model": "sdevi-linear",
        "seed": seed,
        "steps": steps,
        "elbo_per_value": float(elbo.sum()) / n,
        "exact_logp_per_value": float(exact.sum()) / n,
        "gap_per_value": float((exact - elbo).sum()) / n,
    }


def _summary(runs: list[dict]) -> dict:
    """mean ± std over seeds per (problem, model) and metric."""
    table = {}
    for (problem, model), rs in group(runs, "problem", "model").items():
        metrics = {}
        for key in rs[0]:
            values = [r[key] for r in rs if isinstance(r.get(key), float)]
            if len(values) == len(rs) and key not in ("seed", "steps", "lr"):
                metrics[key] = mean_std(values)
        table[f"{problem} / {model}"] = {"seeds": len(rs), **metrics}
    return table


#: the score each problem is ranked by (lower is better except accuracy) and its baselines
_HEADLINE = {
    "interpolation": ("interp_mse", ("locf_mse", "mean_mse", "linear_mse")),
    "extrapolation": ("extrap_mse", ("locf_mse", "mean_mse", "linear_mse")),
    "classification": ("accuracy", ("majority_accuracy",)),
    "regression": ("label_nmse", ("label_mean_nmse",)),
}


def markdown_table(result: dict) -> str:
    """The results as a markdown table: one row per problem, mean ± std per model, the
    best model in bold, the trivial baselines last."""
    summary = result["summary"]
    problems = list(dict.fromkeys(key.split(" / ")[0] for key in summary))
    # the models in MODELS' order, a variant (model[TAG]) after its model
    order = list(MODELS)
    models = sorted(
        dict.fromkeys(k.split(" / ", 1)[1] for k in summary),
        key=lambda m: order.index(m.split("[")[0]) if m.split("[")[0] in order else len(order),
    )
    lines = [
        "| problem (score) | " + " | ".join(models) + " | trivial |",
        "|---" * (len(models) + 2) + "|",
    ]
    for problem in problems:
        if problem == "linear-sde":
            continue
        task = PROBLEMS[problem]
        key, baselines = _HEADLINE[task]
        cells, values = [], {}
        for m in models:
            entry = summary.get(f"{problem} / {m}", {}).get(key)
            values[m] = entry["mean"] if entry else None
            cells.append(f"{entry['mean']:.3f} ± {entry['std']:.3f}" if entry else "–")
        known = {m: v for m, v in values.items() if v is not None}
        if known:
            best = (max if task == "classification" else min)(known, key=known.get)
            cells[models.index(best)] = f"**{cells[models.index(best)]}**"
        first = next(v for k, v in summary.items() if k.startswith(f"{problem} / "))
        trivial = ", ".join(
            f"{b.split('_')[0]} {first[b]['mean']:.3f}" for b in baselines if b in first
        )
        lines.append(f"| {problem} ({key}) | " + " | ".join(cells) + f" | {trivial} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam's peak learning rate")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=None, help="problems (default: all)")
    parser.add_argument("--models", nargs="*", default=None, help="models (default: all)")
    parser.add_argument("--out", default=str(RESULTS / "sdevi_cpu.json"))
    parser.add_argument("--resume", action="store_true", help="skip runs already in --out")
    parser.add_argument(
        "--kwargs", type=json.loads, default=None, help="JSON constructor arguments (a variant)"
    )
    parser.add_argument("--tag", default=None, help="the variant's name: model[TAG] in --out")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 1 seed, 10 steps, pendulum-50 only"
    )
    parser.add_argument("--table", action="store_true", help="print --out as markdown, exit")
    args = parser.parse_args()
    if args.table:
        print(markdown_table(json.loads(Path(args.out).read_text())))
        return
    quick(args, seeds=1, steps=10, only=args.only or ["pendulum-50", "linear-sde"])
    problems = args.only or [*PROBLEMS, "linear-sde"]
    if "basicmotions" in problems:
        try:
            import aeon  # noqa: F401
        except ImportError:
            print("aeon is not installed: skipping basicmotions (pip install 'simsci[aeon]')")
            problems = [p for p in problems if p != "basicmotions"]
    for p in {_data_name(p) for p in problems}:
        _make(p)  # once, before the workers start
    out = Path(args.out)
    runs: list[dict] = []
    if args.resume and out.exists():
        runs = json.loads(out.read_text()).get("runs", [])
    done = {(r["problem"], r["model"], r["seed"]) for r in runs}
    tag = f"[{args.tag}]" if args.tag else ""
    specs = [
        {
            "problem": p,
            "model": m + tag,
            "seed": s,
            "steps": min(STEPS.get(p, args.steps), args.steps),
            "lr": args.lr,
            **({"kwargs": args.kwargs} if args.kwargs else {}),
        }
        for p in problems
        if p != "linear-sde"
        for m in (args.models or MODELS)
        for s in range(args.seeds)
        if (p, m + tag, s) not in done
    ]
    elbo_seeds = [s for s in range(args.seeds) if ("linear-sde", "sdevi-linear", s) not in done]

    def save():
        write(
            out,
            {
                "benchmark": "sdevi",
                "steps": args.steps,
                "lr": args.lr,
                "batch_size": 32,
                "summary": _summary(runs),
                "runs": runs,
            },
        )

    tasks = [partial(run_one, spec) for spec in specs]
    if "linear-sde" in problems:
        steps = 5 * args.steps  # the ELBO-vs-exact comparison wants a converged fit
        tasks += [partial(linear_sde_elbo, s, steps) for s in elbo_seeds]
    # always in worker processes (even --jobs 1); a failed run is reported, the rest go on
    for _, result in run_jobs(tasks, workers=args.jobs, in_process=False):
        if isinstance(result, Failure):
            continue
        runs.append(result)
        print(show(result), flush=True)
        save()
    save()


if __name__ == "__main__":
    main()
