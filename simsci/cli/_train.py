"""``simsci train`` and ``simsci evaluate``: any registered model on a trajectory file."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from simsci.cli._common import HelpFormatter, key_values

TRAIN_DESCRIPTION = """\
Train a registered model (simsci.models.MODELS) on a trajectory file with the one
training loop of simsci.train: checkpoints in OUT/checkpoints (last.pt, best.pt), metrics
in OUT/metrics.csv and OUT/metrics.jsonl. Validation uses --val-data, else the file's
validation split (split == 1). A killed run continues where it stopped with --resume.
A model may bring its own TrainConfig defaults (gfg: 2000 steps of batches of 256
episodes, lr 3e-3, cosine schedule, evaluation and checkpoint every 200 steps, since its
files are often a few short trajectories); --config and the flags override them.
Under torchrun the run is data-parallel (DDP); --batch-size is per process.

examples:
  simsci train operator --backbone fno --features dno --data data/burgers.h5 --out runs/dno
  simsci train latent_ode --data data/lorenz.h5 --out runs/lode --window 24 --epochs 20
  simsci train latent_ode --data data/lorenz.h5 --out runs/lode --resume
  simsci train gru_dt --data data/pendulum.h5 --task extrapolation --out runs/gru_extrap
  simsci train cocld --data data/population.h5 --out runs/cocld --epochs 10
  simsci train gfg --data data/circle.h5 --out runs/gfg --epochs 2000 --batch-size 8
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


def add_to(sub) -> None:
    p = sub.add_parser(
        "train", help="train a model", description=TRAIN_DESCRIPTION, formatter_class=HelpFormatter
    )
    p.add_argument("model", help="registry name of the model, e.g. latent_ode")
    p.add_argument(
        "--data",
        required=True,
        help="training trajectory file or shard directory (event models: also EasyTPP "
        "data, converted into OUT/data.h5)",
    )
    p.add_argument("--val-data", default=None, help="validation file (default: split 1 of --data)")
    p.add_argument("--out", default=None, help="run directory (default: runs/MODEL)")
    p.add_argument("--window", type=int, default=None, help="train on windows of this many steps")
    p.add_argument(
        "--stride", type=int, default=None, help="step between windows (default: window)"
    )
    p.add_argument("--config", default=None, help="JSON file of TrainConfig fields")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None, help="per process")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--num-workers", type=int, default=None, help="DataLoader workers")
    p.add_argument(
        "--model-arg", action="append", metavar="KEY=VALUE", help="model constructor argument"
    )
    p.add_argument(
        "--task",
        default=None,
        help="series models (latent_ode, gru_dt, latent_sde, ...): interpolation (default), "
        "extrapolation, classification or regression (the last two read the episode field "
        "'label')",
    )
    p.add_argument("--backbone", default=None, help="operator: fno, deeponet or unet")
    p.add_argument("--features", default=None, help="operator: none or dno (∂-NO features)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/last.pt")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(run=run_train)

    e = sub.add_parser(
        "evaluate",
        help="evaluate a checkpoint on a dataset",
        description=EVALUATE_DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    e.add_argument("checkpoint", help="a checkpoint written by simsci train (.pt)")
    e.add_argument("--data", required=True, help="trajectory file or shard directory")
    e.add_argument(
        "--split", default="test", help="train, val, test or all (when the file has splits)"
    )
    e.add_argument("--window", type=int, default=None, help="default: the training window")
    e.add_argument("--stride", type=int, default=None)
    e.add_argument("--batch-size", type=int, default=64)
    e.add_argument("--device", default="auto")
    e.add_argument(
        "--task",
        default=None,
        help="models with several evaluations: gfg forecast (default), motifs or detect",
    )
    e.add_argument("--out", default=None, help="also write the metrics to this JSON file")
    e.set_defaults(run=run_evaluate)


def make_dataset(source, fields, *, split=None, window=None, stride=None):
    """A TrajectoryDataset over the fields of ``fields`` that the data has (step or
    episode fields, e.g. a series model's ``label``).

    ``source`` is a path or an opened ``Trajectories`` (opening checks every rule, so
    open a file once and pass it around). ``split`` is ignored (all episodes) when the
    data carries no split ids.
    """
    from simsci import data

    traj = source if isinstance(source, data.Trajectories) else data.open(source)
    present = tuple(f for f in fields if f in traj.step_fields or f in traj.episode_fields)
    if split is not None and "split" not in traj.episode_fields:
        split = None
    return data.TrajectoryDataset(traj, fields=present, split=split, window=window, stride=stride)


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
    from simsci import data, models, train

    if args.model == "vectorworld":  # three parts, one directory: its own loop driver
        from simsci.cli._vectorworld import run_train as run_vectorworld

        return run_vectorworld(args)
    model_cls = models.MODELS.get(args.model)
    if model_cls is None:
        models.get(args.model)  # raises the unknown-name error with a suggestion
    if args.task is not None:
        from simsci.models._series import SeriesModel

        if not issubclass(model_cls, SeriesModel):
            raise ValueError(
                "--task applies to the models of irregular series (the subclasses of "
                f"SeriesModel, e.g. latent_ode, gru_dt, latent_sde); {args.model!r} has no "
                "tasks: drop --task"
            )
    out = Path(args.out or f"runs/{args.model}")
    # a model's own defaults (``train_defaults``), then the config file, then the flags
    cfg = dict(getattr(model_cls, "train_defaults", {}))
    cfg.update(json.loads(Path(args.config).read_text()) if args.config else {})
    flags = {
        "epochs": args.epochs,
        "max_steps": args.max_steps,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "device": args.device,
        "seed": args.seed,
        "num_workers": args.num_workers,
    }
    cfg.update({k: v for k, v in flags.items() if v is not None})
    if args.no_progress:
        cfg["progress"] = False
    config = train.TrainConfig.from_dict(cfg)

    if data.is_easytpp_source(args.data):  # EasyTPP files: converted once into the run
        converted = out / "data.h5"
        if not converted.exists():
            out.mkdir(parents=True, exist_ok=True)
            data.import_easytpp(args.data, converted)
            print(f"converted the EasyTPP data {args.data} to {converted}")
        args.data = str(converted)
    traj = data.open(args.data)
    fields, window, stride = model_cls.data_fields, args.window, args.stride
    train_set = make_dataset(traj, fields, split="train", window=window, stride=stride)
    val_set = None
    if args.val_data is not None:
        val_set = make_dataset(args.val_data, fields, window=window, stride=stride)
    elif "split" in traj.episode_fields and (traj.column("split") == 1).any():
        val_set = make_dataset(traj, fields, split="val", window=window, stride=stride)
    if args.resume and (out / "checkpoints" / "last.pt").exists():
        model = train.load_model(out / "checkpoints" / "last.pt")
        task = getattr(model, "task", None)
        if args.task is not None and task is not None and args.task != task:
            raise ValueError(
                f"--resume: the run in {out} trains task {task!r}, not --task "
                f"{args.task!r}; drop --task or start a new run with another --out"
            )
    else:
        overrides = key_values(args.model_arg, "--model-arg")
        for key in ("backbone", "features"):
            if getattr(args, key) is not None:
                overrides[key] = getattr(args, key)
        if args.task is not None:
            overrides["task"] = args.task
        model = model_cls.from_data(traj, window=args.window, **overrides)
    trainer = train.Trainer(
        model,
        config,
        train_set,
        val_set,
        out_dir=out,
        collate_fn=model.collate,
        resume=args.resume,
        extra={"window": args.window, "data": str(args.data)},
    )
    summary = trainer.fit()
    print(json.dumps(summary, indent=2, default=str))
    return 0


def run_evaluate(args) -> int:
    from simsci import train
    from simsci._device import resolve_device
    from simsci._io import write_json

    model = train.load_model(args.checkpoint)
    window = args.window
    if window is None:  # the training window, recorded by `simsci train`
        window = model.checkpoint_extra.get("window")
    split = None if args.split == "all" else args.split
    args.data = event_data_path(args.data)
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
