"""``simsci train`` and ``simsci evaluate``: ``train`` takes any model of the registry
(simsci.models.REGISTRY) through its entry; ``evaluate`` a checkpoint on a trajectory file."""

from __future__ import annotations

import argparse
import inspect
import json
import textwrap
from pathlib import Path

from simsci.cli._common import (
    HelpFormatter,
    add_deprecated,
    add_device,
    add_max_steps,
    add_no_progress,
    add_out,
    add_param,
    add_seed,
    params,
)

TRAIN_DESCRIPTION = """\
Train a registered model (simsci.models.REGISTRY, listed below): every model goes
through its registry entry, simsci.models.entry(MODEL).train, one code path.

Models of one trajectory file train with the one training loop of simsci.train:
checkpoints in OUT/checkpoints (last.pt, best.pt: the best validation, or the final state
when no evaluation ran), metrics in OUT/metrics.csv and OUT/metrics.jsonl. Validation
uses --val-data, else the file's validation split (split == 1). A file of a kind the
model does not read, or with inf (or NaN where observed) in the fields it reads, is
refused before the model is built. --seed seeds the whole run once, first (same seed,
data, device and thread count: bit-identical results); --max-steps is a budget that
--epochs caps only when given. A killed run continues where it stopped with --resume.
A model may bring its own TrainConfig defaults (gfg: 2000 steps of batches of 256
episodes, lr 3e-3, cosine schedule, evaluation and checkpoint every 200 steps -- or at
the end of a shorter --max-steps --, since its files are often a few short
trajectories); --config and the flags override them. Under torchrun the run is
data-parallel (DDP); --batch-size is per process.

dynadiff trains its generator on a model zoo (--param zoo=ZOO.pt, from `simsci zoo
build`) and the zoo's data (--data: the file, or the folder of `simsci dynadiff data`)
in three stages (--max-steps sets each; or --param autoencoder_steps=N,
decoder_steps=N, diffusion_train_steps=N); it writes OUT/generator.pt, as `simsci
dynadiff train` does. vectorworld trains its tile generator, VAE and ΔSim on a scene
file into the directory OUT (--max-steps sets each; or --param tile_steps=N,
vae_steps=N, npc_steps=N, npc_roads=N; lane_repr=road for road tokens, count_pins=true
for a generator that draws its tiles' lane and vehicle counts from the data's,
seam_frame=true for one that writes each lane continuing a seam in that seam's frame,
tile_more_steps=N for N more tile-generator steps from its best checkpoint).

models (name, what it is, the kinds of file it reads):
@MODELS@

examples:
  simsci train operator --backbone fno --features dno --data data/burgers.h5 --out runs/dno
  simsci train operator --backbone neuralop.fno --data data/burgers.h5 --out runs/nop
  simsci train latent_ode --data data/lorenz.h5 --out runs/lode --window 24 --epochs 20
  simsci train latent_ode --data data/lorenz.h5 --out runs/lode --resume
  simsci train gru_dt --data data/pendulum.h5 --task extrapolation --out runs/gru_extrap
  simsci train cocld --data data/population.h5 --out runs/cocld --epochs 10
  simsci train gfg --data data/circle.h5 --out runs/gfg --epochs 2000 --batch-size 8
  simsci train dynadiff --data data/lv --param zoo=runs/lv/zoo.pt --out runs/lv/gen
  simsci train vectorworld --data data/scenes.h5 --out runs/vw   (tile generator, VAE, ΔSim)
  torchrun --nproc_per_node 2 -m simsci train latent_ode --data data/lorenz.h5 --out runs/ddp
"""

EVALUATE_DESCRIPTION = """\
Evaluate a checkpoint on a trajectory file: the model's validation metrics averaged over
the chosen split (for latent_ode: interpolation MSE on hidden points and the last-value
baseline, both normalised by each channel's std; for event models (cocld, rmtpp, nhp,
thp, poisson_tpp): log-likelihood per event, next-event time RMSE and type accuracy,
and distances between sequences sampled from each sequence's first event and the real
ones; for gfg, --task forecast (rollout error, long-horizon drift off the true
manifold), motifs (regulatory AUROC on gene-network data) or detect (zero-shot AUROC of
real vs corrupted trajectories)).

examples:
  simsci evaluate runs/lode/checkpoints/best.pt --data data/lorenz.h5 --split test
  simsci evaluate runs/gfg/checkpoints/best.pt --data data/circle.h5 --task detect
"""


class TrainHelpFormatter(HelpFormatter):
    """``simsci train --help``: the registry's models listed where the description says
    @MODELS@ (read when the help is shown, so building the parser imports no model)."""

    def _format_text(self, text):
        if "@MODELS@" in text:
            text = text.replace("@MODELS@", registry_listing())
        return super()._format_text(text)


def registry_listing() -> str:
    """One line per registered model: name, summary, the kinds of file it reads (and
    what else it needs)."""
    from simsci import models

    width = max(len(name) for name in models.REGISTRY)
    lines = []
    for e in models.REGISTRY.values():
        needs = f"; needs {e.needs}" if e.needs else ""
        text = f"{e.name:<{width}s}  {e.summary} [{', '.join(e.reads)}{needs}]"
        lines.append(
            textwrap.fill(text, 88, initial_indent="  ", subsequent_indent=" " * (width + 4))
        )
    return "\n".join(lines)


class _Given(argparse._StoreAction):
    """Stores the value and records that it was given on the command line (``args.given``):
    ``simsci train`` lays only the options given over the --config file and the model's
    own defaults."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        namespace.given = {*getattr(namespace, "given", ()), self.dest}


def _track_given(p, *dests: str) -> None:
    for action in p._actions:
        if action.dest in dests and type(action) is argparse._StoreAction:
            action.__class__ = _Given


def add_to(sub) -> None:
    add_train(sub)
    add_evaluate(sub)


def add_train(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train a model",
        description=TRAIN_DESCRIPTION,
        formatter_class=TrainHelpFormatter,
    )
    p.set_defaults(run=run_train, cli_parser=p, given=set())
    p.add_argument("model", help="registry name of the model, e.g. latent_ode (listed above)")
    p.add_argument(
        "--data",
        required=True,
        help="training trajectory file or shard directory (event models: also EasyTPP "
        "data, converted into OUT/data.h5)",
    )
    p.add_argument("--val-data", default=None, help="validation file (default: split 1 of --data)")
    add_out(
        p,
        "dir",
        help="run directory: checkpoints/last.pt, checkpoints/best.pt, metrics.csv, "
        "metrics.jsonl (default: runs/MODEL)",
    )
    p.add_argument("--window", type=int, default=None, help="train on windows of this many steps")
    p.add_argument(
        "--stride", type=int, default=None, help="step between windows (default: window)"
    )
    p.add_argument("--config", default=None, help="JSON file of TrainConfig fields")
    p.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="passes over the training data (default: 10, or unbounded when --max-steps "
        "is given; with both the run stops at the first reached, and says so at the start "
        "when --epochs stops it early)",
    )
    add_max_steps(p, default=None, help="optimisation steps (a budget honoured)")
    add_seed(
        p,
        help="seeds the whole run (data drawn, the model's weights, training): same seed, "
        "data, device and thread count give bit-identical results; given, it overrides "
        "--config",
    )
    p.add_argument(
        "--batch-size", type=int, default=None, help="episodes (or windows) per batch, per process"
    )
    p.add_argument(
        "--lr", type=float, default=None, help="learning rate (default: the model's, else 1e-3)"
    )
    add_device(p, help="given, it overrides --config")
    _track_given(p, "seed", "device")
    p.add_argument("--num-workers", type=int, default=None, help="DataLoader workers")
    add_param(p, what="a keyword argument of the model's constructor")
    add_deprecated(p, "--model-arg", "--param", dest="param", append=True)
    p.add_argument(
        "--task",
        default=None,
        help="series models (latent_ode, gru_dt, latent_sde, ...): interpolation (default), "
        "extrapolation, classification or regression (the last two read the episode field "
        "'label')",
    )
    p.add_argument(
        "--backbone",
        default=None,
        help="operator: fno, deeponet, unet, or neuraloperator's neuralop.fno, neuralop.tfno, "
        'neuralop.uno (pip install "simsci[neuralop]")',
    )
    p.add_argument("--features", default=None, help="operator: none or dno (∂-NO features)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/last.pt")
    add_no_progress(p)


def add_evaluate(sub) -> None:
    e = sub.add_parser(
        "evaluate",
        help="evaluate a checkpoint on a dataset",
        description=EVALUATE_DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    e.set_defaults(run=run_evaluate, cli_parser=e)
    e.add_argument("checkpoint", help="a checkpoint written by simsci train (.pt)")
    e.add_argument("--data", required=True, help="trajectory file or shard directory")
    e.add_argument(
        "--split", default="test", help="train, val, test or all (when the file has splits)"
    )
    e.add_argument("--window", type=int, default=None, help="default: the training window")
    e.add_argument(
        "--stride", type=int, default=None, help="step between windows (default: window)"
    )
    e.add_argument("--batch-size", type=int, default=64, help="windows per evaluation batch")
    add_device(e)
    e.add_argument(
        "--task",
        default=None,
        help="models with several evaluations: gfg forecast (default), motifs or detect",
    )
    add_out(e, "file", help="also write the metrics to this JSON file")


def make_dataset(source, fields, *, split=None, window=None, stride=None):
    """A TrajectoryDataset over the fields of ``fields`` that the data has
    (:func:`simsci.models.trajectory_dataset`, what ``simsci train`` reads)."""
    from simsci.models import trajectory_dataset

    return trajectory_dataset(source, fields, split=split, window=window, stride=stride)


def event_data_path(source) -> str:
    """``source`` itself, or for EasyTPP data (``simsci.data.is_easytpp_source``) a
    trajectory file converted from it into a temporary folder (removed at exit)."""
    import atexit
    import shutil
    import tempfile

    from simsci import data

    if not data.is_easytpp_source(source):
        return str(source)
    folder = tempfile.mkdtemp(prefix="simsci-easytpp-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return str(data.import_easytpp(source, Path(folder) / "data.h5"))


def run_train(args) -> int:
    """``simsci train MODEL``: the registry entry of MODEL trains, for every model alike."""
    from simsci import models

    model_entry = models.entry(args.model)  # an unknown name: the error lists the valid ones
    request = train_request(args)
    summary = model_entry.train(request.pop("data"), request.pop("out"), **request)
    print(json.dumps(summary, indent=2, default=str))
    return 0


def train_request(args) -> dict:
    """The arguments of ``ModelEntry.train`` from the command line: ``data``, ``out``,
    ``config`` (a --config file, then the flags), ``model_args`` (--param, --backbone,
    --features), ``val_data``, ``window``, ``stride``, ``task``, ``resume``. EasyTPP data
    is converted once into OUT/data.h5."""
    from simsci import data

    out = Path(args.out or f"runs/{args.model}")
    config = json.loads(Path(args.config).read_text()) if args.config else {}
    if not isinstance(config, dict):
        raise TypeError(
            f"--config {args.config} must hold a JSON object of TrainConfig fields, got a "
            f"{type(config).__name__}"
        )
    flags = {
        "epochs": args.epochs,
        "max_steps": args.max_steps,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "num_workers": args.num_workers,
    }
    # --device and --seed have defaults (auto, 0: TrainConfig's own); only given ones
    # override the --config file and the model's defaults
    given = getattr(args, "given", set())
    flags.update({k: getattr(args, k) for k in ("device", "seed") if k in given})
    config.update({k: v for k, v in flags.items() if v is not None})
    if args.no_progress:
        config["progress"] = False
    model_args = params(args)
    for key in ("backbone", "features"):
        if getattr(args, key) is not None:
            model_args[key] = getattr(args, key)
    source = args.data
    if data.is_easytpp_source(source):  # EasyTPP files: converted once into the run
        converted = out / "data.h5"
        if not converted.exists():
            out.mkdir(parents=True, exist_ok=True)
            data.import_easytpp(source, converted)
            print(f"converted the EasyTPP data {source} to {converted}")
        source = str(converted)
    return {
        "data": source,
        "out": out,
        "config": config,
        "model_args": model_args,
        "val_data": args.val_data,
        "window": args.window,
        "stride": args.stride,
        "task": args.task,
        "resume": args.resume,
    }


def check_evaluation_data(model, source) -> None:
    """Refuse a file the model cannot read before any work, with the message ``simsci
    train`` gives for it (``ModelEntry.check_data``: the kinds and fields the model needs,
    what the file has); a model outside the registry is not checked here."""
    from simsci import data
    from simsci.models import ModelEntry

    model_entry = ModelEntry.of(model)
    if model_entry is None:
        return
    traj = data.open(source)
    try:
        model_entry.check_data(traj)
    finally:
        traj.close()


def run_evaluate(args) -> int:
    from simsci import train
    from simsci._device import resolve_device
    from simsci._io import check_parent_dir, write_json

    if args.out:  # a report that cannot be written is refused before the work
        check_parent_dir(args.out)
    model = train.load_model(args.checkpoint)
    window = args.window
    if window is None:  # the training window, recorded by `simsci train`
        window = model.checkpoint_extra.get("window")
    split = None if args.split == "all" else args.split
    args.data = event_data_path(args.data)
    check_evaluation_data(model, args.data)
    if hasattr(model, "evaluate_file"):  # field and event models score whole files
        if args.window is not None or args.stride is not None:
            raise ValueError(
                f"{type(model).__name__} is evaluated on whole episodes: drop --window/--stride"
            )
        device = resolve_device(args.device)
        task = {} if args.task is None else {"task": args.task}
        if task and "task" not in inspect.signature(model.evaluate_file).parameters:
            raise ValueError(f"{type(model).__name__} has one evaluation; drop --task {args.task}")
        metrics = model.evaluate_file(args.data, split=split, device=device, **task)
        if "resolutions" not in metrics:  # event models: one figure per metric
            width = max(len(k) for k in metrics)
            for key, value in metrics.items():
                print(f"{key:{width}s}  {value:.6g}")
        for label, r in metrics.get("resolutions", {}).items():
            note = "  (training resolution)" if r["training_resolution"] else ""
            print(
                f"grid {label:>9s}  rel L2 (nRMSE) mean {r['rel_l2_mean']:.4g}  final step "
                f"{r['rel_l2_final_step']:.4g}{note}"
            )
        if args.out:
            write_json(args.out, {"checkpoint": str(args.checkpoint), "data": args.data, **metrics})
        return 0
    if args.task is not None:
        raise ValueError(f"{type(model).__name__} has one evaluation; drop --task {args.task}")
    dataset = make_dataset(
        args.data, type(model).data_fields, split=split, window=window, stride=args.stride
    )
    metrics = train.evaluate(
        model,
        dataset,
        collate_fn=model.collate,
        batch_size=args.batch_size,
        device=resolve_device(args.device),
    )
    width = max(len(k) for k in metrics)
    for key, value in metrics.items():
        print(f"{key:{width}s}  {value:.6g}")
    if args.out:
        write_json(args.out, {"checkpoint": str(args.checkpoint), "data": args.data, **metrics})
    return 0
