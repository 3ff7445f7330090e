"""EasyTPP's own models beside simsci's event models, on simsci's event sets (issue 28).

Peer: EasyTPP (``pip install easy-tpp``, version 0.3.0 measured), the temporal
point-process library of Ant Research. Its own implementations of the Neural Hawkes
(NHP), the Transformer Hawkes (THP), the self-attentive Hawkes (SAHP), the attentive
Neural Hawkes (AttNHP) and the neural-ODE TPP (ODETPP) are trained on the same data as
simsci's NHP, THP, RMTPP and CoCLD, in the same run, and scored on the same test
sequences under one convention.

Data: ``bench_tpp.data_path`` (``simsci.datasets.make_dataset``, n = 600, the builder's
80/10/10 split; hawkes-1, hawkes-5, population, mobility), written for EasyTPP by
``simsci.data.export_easytpp`` (``simsci data export easytpp``) into
``runs/tpp_bench_data/easytpp/<set>_s<seed>/{train,dev,test}.pkl``. EasyTPP reads only
times and types: mobility's locations are not given to either side's score here.

**One convention for the log-likelihood** (EasyTPP's): a sequence's first event is
given, events 2..L are scored (log λ_k(t_i) of the observed type, in nats per event,
data time units), the compensator ∫ Σ_k λ_k runs from the first to the **last event**.
simsci's own table (bench_tpp.py) integrates to the observation window's end instead;
its models are re-scored here with the window dropped (``evaluate_events(...,
window=False)``), so every figure of this table is on the last-event convention.
EasyTPP's compensator is a Monte Carlo/Riemann mean of the intensity at
``loss_integral_num_sample_per_step`` evenly spaced points per interval (its
configs: 10-20); the test score uses 256 points (``ll_per_event``; the value at the
model's own setting is ``ll_per_event_native``). simsci's uses 16 Gauss-Legendre nodes.

EasyTPP's protocol (its ``examples/configs/experiment_config.yaml``, ``*_train``
entries): each model's ``model_config`` (sizes, layers, heads, integration points,
thinning settings) and optimiser (Adam, ``learning_rate``, ``batch_size``) as given
there; the training loop is that of its ``TPPRunner`` (loss = its ``loglike_loss``
divided by the batch's event count, one Adam step per batch, validation
log-likelihood after every epoch, the best-validation weights kept), run here by this
script so that prediction (thinning) happens once on the test split instead of after
every epoch (the runner selects on the log-likelihood only, so the choice of weights is
the same). Budget: up to ``--epochs`` (default 100) epochs, stopped after
``--patience`` (default 20) epochs without a better validation log-likelihood or after
the first epoch that ends past ``--time-budget`` seconds of the process's CPU time in
training (default 300 s; CPU time, so that the budget does not shrink when other jobs
share the cores; ``epochs_run`` records where it stopped). With
batch 256 on 480 training sequences that is up to 200 optimiser steps, at least as many
passes over the data as simsci's protocol (300 steps of 32 = 20 epochs). Thinning's
``dtime_max`` (EasyTPP's sampler searches up to max(gap * dtime_max, gap + dtime_max)
past the last event) is set to the largest training gap so that its search window
covers every gap of the data (its config's 5 is in the units of its own data sets).

simsci's side: ``bench_tpp.train_model`` (registry defaults, Adam 3e-3, batch 32, 300
steps, validation every 50, best checkpoint), scored by
``simsci.models.evaluate_events(..., generate=False, window=False)``.
The true process (oracle, untrained) is scored the same way.

Next-event prediction: time RMSE of the predicted gap (data units) and type accuracy
over the scored events; EasyTPP predicts with its own thinning sampler
(``predict_one_step_at_every_event``: the mean of accepted draws and the
intensity-weighted type), simsci with its models' ``predict_next``.

Usage::

    pip install easy-tpp        # or: pip install --target runs/peers/easytpp easy-tpp
    python benchmarks/bench_tpp_easytpp.py [--sets hawkes-1 ...] [--seeds 1]
        [--easytpp NHP THP SAHP AttNHP ODETPP] [--simsci nhp thp rmtpp cocld truth]
        [--epochs 100] [--patience 20] [--jobs 2] [--resume] [--table]

``runs/peers/easytpp`` is put on ``sys.path`` when it exists (EasyTPP installed with
``--target`` beside the project's .venv, which it then leaves unchanged). Writes
``benchmarks/results/tpp_easytpp.json`` after every run. One CPU thread per run.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from pathlib import Path

import bench_tpp
import torch
from _runner import RESULTS, ROOT, Failure, group, mean_std, run_jobs, show, write

PEER_PATH = ROOT / "runs" / "peers" / "easytpp"
EXPORT = bench_tpp.DATA / "easytpp"
SETS = tuple(bench_tpp.DATASETS)
#: EasyTPP model id -> (model_config, trainer settings), from its experiment_config.yaml
EASYTPP = {
    "NHP": ({"hidden_size": 64, "loss_integral_num_sample_per_step": 20}, 256, 1e-3, 500),
    "THP": (
        {"hidden_size": 32, "time_emb_size": 16, "num_layers": 2, "num_heads": 2,
         "loss_integral_num_sample_per_step": 20},
        256, 1e-3, 500,
    ),
    "SAHP": (
        {"hidden_size": 32, "time_emb_size": 16, "num_layers": 2, "num_heads": 2,
         "loss_integral_num_sample_per_step": 20},
        256, 1e-3, 500,
    ),
    "AttNHP": (
        {"hidden_size": 16, "time_emb_size": 4, "num_layers": 2, "num_heads": 2,
         "loss_integral_num_sample_per_step": 10},
        256, 1e-3, 50,
    ),
    "ODETPP": (
        {"hidden_size": 4, "time_emb_size": 4, "num_layers": 1,
         "loss_integral_num_sample_per_step": 20,
         "model_specs": {"ode_num_sample_per_step": 2, "time_factor": 100}},
        32, 1e-1, 50,
    ),
}  # fmt: skip
SIMSCI = ("nhp", "thp", "rmtpp", "cocld", bench_tpp.TRUTH)
#: sequences per prediction chunk (EasyTPP's thinning allocates B x L x num_exp x ...)
PREDICT_CHUNK = 32
#: integration points per interval of the test score
TEST_POINTS = 256


def _easytpp_importable() -> None:
    if PEER_PATH.is_dir() and str(PEER_PATH) not in sys.path:
        sys.path.insert(0, str(PEER_PATH))
    try:
        import easy_tpp  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "EasyTPP is not installed: pip install easy-tpp (or pip install --target "
            f"{PEER_PATH.relative_to(ROOT)} easy-tpp)"
        ) from exc


def export(dataset: str, n: int, seed: int) -> Path:
    """The set's EasyTPP files (written once by simsci.data.export_easytpp)."""
    from simsci import data

    out = EXPORT / f"{dataset}_n{n}_s{seed}"
    if not (out / "test.pkl").exists():
        data.export_easytpp(bench_tpp.data_path(dataset, n, seed), out)
    return out


# ------------------------------------------------------------------ EasyTPP side
def run_easytpp(spec: dict) -> dict:
    bench_tpp._threads()
    _easytpp_importable()
    from importlib.metadata import version

    from easy_tpp import model as etpp_models
    from easy_tpp.config_factory import DataConfig, ModelConfig
    from easy_tpp.config_factory.data_config import DataSpecConfig
    from easy_tpp.preprocess import TPPDataLoader

    from simsci import data

    dataset, name, seed = spec["dataset"], spec["model"], spec["seed"]
    folder = export(dataset, spec["n"], seed)
    with data.open(bench_tpp.data_path(dataset, spec["n"], seed)) as traj:
        traj_k = traj.num_marks
    model_cfg, batch_size, lr, num_exp = EASYTPP[name]
    specs = DataSpecConfig(
        num_event_types=traj_k, pad_token_id=traj_k, padding_side="right",
        truncation_side="right",
    )  # fmt: skip
    files = {s: str(folder / f"{s}.pkl") for s in ("train", "dev", "test")}
    data_config = DataConfig(
        train_dir=files["train"], valid_dir=files["dev"], test_dir=files["test"],
        data_format="pkl", specs=specs,
    )  # fmt: skip
    torch.manual_seed(seed)  # EasyTPP draws from torch's global generator only
    loader = TPPDataLoader(data_config, backend="torch", batch_size=batch_size)
    train = loader.get_loader("train", shuffle=True)
    valid = loader.get_loader("dev", shuffle=False)
    test_loader = TPPDataLoader(data_config, backend="torch", batch_size=PREDICT_CHUNK)
    test = test_loader.get_loader("test", shuffle=False)
    gaps = [g for b in train for g in b["time_delta_seqs"][b["seq_non_pad_mask"]].tolist()]
    thinning = {
        "num_seq": 10, "num_sample": spec.get("num_sample", 1), "num_exp": num_exp,
        "look_ahead_time": 10,
        "patience_counter": 5, "over_sample_rate": 5, "num_samples_boundary": 5,
        "dtime_max": float(max(gaps)), "num_step_gen": 1,
    }  # fmt: skip
    config = ModelConfig(
        **model_cfg, num_event_types=traj_k, num_event_types_pad=traj_k + 1,
        event_pad_index=traj_k, model_id=name, thinning=thinning,
    )  # fmt: skip
    model = getattr(etpp_models, name)(config)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    out = {**spec, "side": "easytpp", "version": version("easy-tpp")}
    out["params"] = sum(p.numel() for p in model.parameters())
    out.update(batch_size=batch_size, lr=lr, dtime_max=thinning["dtime_max"])
    best, best_epoch, best_state, steps = -math.inf, -1, None, 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for epoch in range(spec["epochs"]):
        model.train()
        for batch in train:
            loss, n_events = model.loglike_loss(**batch)
            opt.zero_grad()
            (loss / n_events).backward()
            opt.step()
            steps += 1
        val = _easytpp_ll(model, valid)
        if val > best:
            best, best_epoch = val, epoch
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        elif epoch - best_epoch >= spec["patience"]:
            break
        if time.process_time() - cpu_start > spec["time_budget"]:
            break
    out["train_s"] = time.perf_counter() - start
    out["train_cpu_s"] = time.process_time() - cpu_start
    out.update(epochs_run=epoch + 1, best_epoch=best_epoch, steps=steps, best_val_ll=best)
    model.load_state_dict(best_state)
    start = time.perf_counter()
    out["ll_per_event_native"] = _easytpp_ll(model, test)
    native = model.loss_integral_num_sample_per_step
    model.loss_integral_num_sample_per_step = TEST_POINTS
    out["ll_per_event"] = _easytpp_ll(model, test)
    model.loss_integral_num_sample_per_step = native
    out.update(_easytpp_predict(model, test))
    out["eval_s"] = time.perf_counter() - start
    out["wall_s"] = out["train_s"] + out["eval_s"]
    return out


@torch.no_grad()
def _easytpp_ll(model, loader) -> float:
    """EasyTPP's validation metric: -(sum of loglike_loss) / (events scored)."""
    model.eval()
    total, events = 0.0, 0
    for batch in loader:
        loss, n_events = model.loglike_loss(**batch)
        total += float(loss)
        events += int(n_events)
    return -total / events


@torch.no_grad()
def _easytpp_predict(model, loader) -> dict:
    """Time RMSE and type accuracy of EasyTPP's one-step thinning prediction."""
    model.eval()
    se, hit, n = 0.0, 0.0, 0
    for batch in loader:
        dt, kind = model.predict_one_step_at_every_event(**batch)
        mask = batch["seq_non_pad_mask"][:, 1:]
        true_dt = batch["time_delta_seqs"][:, 1:]
        se += float((((dt - true_dt) ** 2) * mask).sum())
        hit += float(((kind == batch["type_seqs"][:, 1:]) & mask).sum())
        n += int(mask.sum())
    return {"time_rmse": math.sqrt(se / n), "type_accuracy": hit / n, "events": n}


# ------------------------------------------------------------------- simsci side
def run_simsci(spec: dict) -> dict:
    """bench_tpp's training, scored on the last-event convention."""
    from simsci import models

    model, traj, out = bench_tpp.train_model(spec)
    out["side"] = "simsci"
    start = time.perf_counter()
    scores = models.evaluate_events(model, traj, split="test", generate=False, window=False)
    out.update({k: float(v) for k, v in scores.items()})
    out["eval_s"] = time.perf_counter() - start
    out["wall_s"] = out["train_s"] + out["eval_s"]
    return out


# ---------------------------------------------------------------------- summary
def summarise(runs: list[dict]) -> dict:
    keys = ("ll_per_event", "ll_per_event_native", "time_rmse", "type_accuracy", "params",
            "train_s", "wall_s", "epochs_run", "best_epoch")  # fmt: skip
    summary = {}
    for (dataset, side, model), rows in sorted(group(runs, "dataset", "side", "model").items()):
        entry = {"seeds": len(rows)}
        for key in keys:
            values = [r[key] for r in rows if key in r]
            if values:
                entry[key] = mean_std(values)
        summary[f"{dataset} / {side} / {model}"] = entry
    return summary


def markdown(result: dict) -> str:
    lines = []
    summary = result["summary"]
    for dataset in SETS:
        rows = [(k.split(" / ")[1:], v) for k, v in summary.items() if k.startswith(dataset + " /")]
        if not rows:
            continue
        lines += [f"**{dataset}**", "",
                  "| side | model | ll/event (last-event conv.) | ll at own integration | "
                  "time_rmse | type_accuracy | params | train s |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip

        def cell(e, key, digits=3):
            if key not in e:
                return "–"
            m, s = e[key]["mean"], e[key]["std"]
            return f"{m:.{digits}f} ± {s:.{digits}f}" if e["seeds"] > 1 else f"{m:.{digits}f}"

        for (side, model), e in sorted(rows, key=lambda r: (r[0][0] != "easytpp", r[0][1])):
            lines.append(
                f"| {side} | {model} | {cell(e, 'll_per_event')} | "
                f"{cell(e, 'll_per_event_native')} | {cell(e, 'time_rmse')} | "
                f"{cell(e, 'type_accuracy')} | {int(e['params']['mean'])} | "
                f"{e['train_s']['mean']:.0f} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="*", default=list(SETS), choices=SETS)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--n", type=int, default=600)
    parser.add_argument("--easytpp", nargs="*", default=list(EASYTPP), choices=list(EASYTPP))
    parser.add_argument("--simsci", nargs="*", default=list(SIMSCI), choices=list(SIMSCI))
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--patience", type=int, default=20)
    parser.add_argument(
        "--time-budget", type=float, default=300.0, help="EasyTPP training CPU seconds per run"
    )
    parser.add_argument(
        "--num-sample",
        type=int,
        default=1,
        help="EasyTPP thinning draws per prediction (its configs: 1, a single draw)",
    )
    parser.add_argument("--steps", type=int, default=300, help="simsci's training steps")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS / "tpp_easytpp.json"))
    parser.add_argument("--resume", action="store_true", help="skip runs already in --out")
    parser.add_argument("--table", action="store_true", help="print --out as markdown, exit")
    args = parser.parse_args()
    out = Path(args.out)
    if args.table:
        print(markdown(json.loads(out.read_text())))
        return
    _easytpp_importable()
    runs = json.loads(out.read_text())["runs"] if args.resume and out.exists() else []
    done = {(r["dataset"], r["side"], r["model"], r["seed"]) for r in runs}
    tasks = []
    for seed in range(args.seeds):
        for dataset in args.sets:
            export(dataset, args.n, seed)  # before the workers start
            base = {"dataset": dataset, "seed": seed, "n": args.n}
            for name in args.easytpp:
                if (dataset, "easytpp", name, seed) not in done:
                    spec = {**base, "model": name, "epochs": args.epochs,
                            "patience": args.patience, "time_budget": args.time_budget,
                            "num_sample": args.num_sample}  # fmt: skip
                    tasks.append(functools.partial(run_easytpp, spec))
            for name in args.simsci:
                if (dataset, "simsci", name, seed) not in done:
                    spec = {**base, "model": name, "steps": args.steps, "val_every": 50}
                    tasks.append(functools.partial(run_simsci, spec))
    # the slowest first, so that the workers finish together
    rank = ("AttNHP", "cocld", "NHP", "ODETPP", "nhp", "thp", "THP", "SAHP", "rmtpp", "truth")
    tasks.sort(key=lambda task: rank.index(task.args[0]["model"]))
    protocol = {
        "convention": "events 2..L scored given the first; compensator to the last event",
        "test_integration_points_easytpp": TEST_POINTS,
        "easytpp": {
            k: {"model_config": c, "batch_size": b, "lr": lr, "num_exp": e}
            for k, (c, b, lr, e) in EASYTPP.items()
        },  # fmt: skip
        "easytpp_epochs": args.epochs,
        "easytpp_patience": args.patience,
        "easytpp_time_budget_s": args.time_budget,
        "simsci": "bench_tpp protocol: Adam 3e-3, batch 32, 300 steps, best of val every 50",
        "n": args.n,
        "threads_per_run": 1,
        "jobs": args.jobs,
        "code": bench_tpp._code_version(),
    }

    def save():
        write(out, {"benchmark": "tpp_easytpp", "protocol": protocol,
                    "summary": summarise(runs), "runs": runs})  # fmt: skip

    start = time.perf_counter()
    for _, result in run_jobs(tasks, workers=args.jobs, in_process=False):
        if isinstance(result, Failure):
            continue
        runs.append(result)
        print(f"[{time.perf_counter() - start:.0f} s]", show(result), flush=True)
        save()
    save()
    print(markdown(json.loads(out.read_text())))


if __name__ == "__main__":
    main()
