"""The Trainer: one loop for every simsci model (contract in the package docstring).

Order of work after optimisation step k (k counts steps done, from 1):
log row (every ``log_every``) -> epoch roll-over -> evaluation (every ``val_every``, or at
the end of each epoch) with best.pt on a new best -> last.pt (every ``checkpoint_every``,
or at each evaluation and epoch end, and always at the end of the run) -> at the end of
the run, best.pt from the final state when no evaluation named a best. A checkpoint
therefore holds everything up to and including step k, and a resumed run continues at
step k + 1 exactly as an uninterrupted run would.

Choices, and why:

- ``resume=True`` continues from ``out_dir/checkpoints/last.pt`` when it exists and
  starts fresh when it does not (dropping any metrics rows of an attempt that died before
  its first checkpoint). The same command then serves the first start and every restart
  of a preemptible job. ``resume=<path>`` insists on that file. ``resume=False`` refuses an
  out_dir that already holds a run, so nothing is silently mixed or overwritten.
- Bit-for-bit resume: data order comes from (seed, epoch, rank) only
  (:mod:`simsci.train._sampler`); the DataLoader gets its own generator; the checkpoint
  stores every rank's python/numpy/torch/CUDA RNG state, the lr schedule position, the
  early-stopping state and the partial log window; validation runs in its own seeded RNG
  context and so never shifts the training random stream.
- Resuming with a different ``batch_size``, ``seed``, ``optimizer``, world size or
  dataset length is an error (the saved position would mean something else). Other
  changed fields are honoured (lr and weight_decay are re-applied) with a warning where
  they change the trajectory; ``epochs``/``max_steps`` may grow to extend a finished run.
- Under DDP each step all-reduces the batch's scalar metrics (weighted by samples), so
  every rank sees the same loss, stops on the same non-finite loss and logs the global
  mean. A final global batch that splits unevenly across ranks has its per-rank loss
  scaled by ``world_size * n_rank / n_global`` before backward, so DDP's gradient average
  equals the gradient of the global batch mean (losses are assumed to be means over the
  batch's samples).
- A run is never evaluated at a step the schedule does not name (no extra evaluation at
  the end), so stopping early via ``max_steps`` and extending later matches a longer run.
"""

from __future__ import annotations

import copy
import gc
import json
import math
import os
import random
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from simsci._device import resolve_device
from simsci._io import write_json
from simsci.errors import unknown_name
from simsci.train import _distributed
from simsci.train._checkpoint import (
    FORMAT_VERSION,
    KIND,
    CheckpointError,
    TrainingError,
    capture_rng,
    isolated_rng,
    load_checkpoint,
    model_import_path,
    restore_rng,
    save_checkpoint,
    seed_all,
    versions,
)
from simsci.train._config import TrainConfig
from simsci.train._metrics import LEAD, MetricsLog, tensorboard_writer_class
from simsci.train._optim import build_optimizer, build_scheduler, lr_factor, parameter_groups
from simsci.train._sampler import EpochBatchSampler, ShardBatchSampler, mix_seed

# fields whose change makes a resumed run continue differently from the saved one
_MUST_MATCH = ("batch_size", "seed", "optimizer")
_CHANGES_TRAJECTORY = (
    "lr", "weight_decay", "schedule", "warmup_steps", "step_gamma", "step_every",
    "grad_clip", "val_every", "early_stopping", "monitor", "mode", "patience", "min_delta",
)  # fmt: skip
_RESERVED = set(LEAD) | {"grad_norm"}


# ----------------------------------------------------------------------- input checks


def check_model(model) -> None:
    """The training contract: an nn.Module with training_step and a JSON-able init_args."""
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be a torch.nn.Module with a training_step(batch) method, got "
            f"{type(model).__name__}"
        )
    name = type(model).__name__
    if not callable(getattr(model, "training_step", None)):
        raise TypeError(
            f"model {name} has no training_step(batch) method; define one that returns a "
            "dict with a scalar tensor 'loss' (see simsci.train's docstring)"
        )
    init_args = getattr(model, "init_args", None)
    if not isinstance(init_args, dict):
        raise TypeError(
            f"model {name} needs an init_args attribute: a dict of its constructor "
            f"arguments (got {type(init_args).__name__}); set self.init_args = dict(...) in "
            "__init__ so a checkpoint can rebuild the model"
        )
    try:
        json.dumps(init_args)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"model {name}.init_args must be JSON-able (numbers, strings, lists, dicts): {exc}"
        ) from exc
    if "<locals>" in type(model).__qualname__:
        warnings.warn(
            f"model class {type(model).__qualname__} is defined inside a function: training "
            "works, but load_model cannot rebuild it from a checkpoint; define it at module "
            "level",
            stacklevel=3,
        )


def _check_dataset(data, what: str) -> None:
    if isinstance(data, IterableDataset):
        raise TypeError(
            f"{what} is an IterableDataset; the trainer needs a map-style Dataset "
            "(__len__ and __getitem__) to order and resume batches deterministically"
        )
    if not (hasattr(data, "__len__") and hasattr(data, "__getitem__")):
        raise TypeError(
            f"{what} must be a map-style torch Dataset (with __len__ and __getitem__), got "
            f"{type(data).__name__}"
        )
    if len(data) == 0:
        raise ValueError(f"{what} is empty (len 0); give it at least one sample")


def move_to_device(obj, device: torch.device):
    """Tensors (inside dicts, lists, tuples, namedtuples) and objects with .to() to device."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, Mapping):
        return {k: move_to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(move_to_device(v, device) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(move_to_device(v, device) for v in obj)
    if not isinstance(obj, (str, bytes)) and callable(getattr(obj, "to", None)):
        return obj.to(device)  # e.g. torch_geometric Data/Batch
    return obj


def scalar_values(out, method: str, *, need_loss: bool) -> dict[str, float]:
    """Check a step's dict and turn its values into floats."""
    if not isinstance(out, Mapping):
        what = " with a scalar tensor 'loss'" if need_loss else ""
        raise TypeError(
            f"{method} must return a dict of scalar metrics{what}, got {type(out).__name__}"
        )
    if need_loss:
        if "loss" not in out:
            raise ValueError(
                f"{method} must return a dict with a scalar tensor 'loss' to minimise; got "
                f"keys {sorted(map(str, out))}"
            )
        loss = out["loss"]
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            what = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise TypeError(
                f"{method}'s 'loss' must be a scalar tensor (one element), got {what}; "
                "reduce it, e.g. with .mean()"
            )
        if not loss.requires_grad:
            raise ValueError(
                f"{method}'s 'loss' does not require grad: it must be computed from the "
                "model's parameters (was it detached, or computed under torch.no_grad?)"
            )
    values = {}
    for key, v in out.items():
        key = str(key)
        if need_loss and key in _RESERVED:
            raise ValueError(
                f"{method} returned a metric named {key!r}, a name the metrics files "
                f"reserve ({', '.join(sorted(_RESERVED))}); rename it"
            )
        if isinstance(v, torch.Tensor):
            if v.numel() != 1:
                raise TypeError(
                    f"{method} returned metric {key!r} of shape {tuple(v.shape)}; every "
                    "value must be a scalar (reduce it, e.g. with .mean())"
                )
            values[key] = float(v.detach())
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            values[key] = float(v)
        else:
            raise TypeError(
                f"{method} returned metric {key!r} of type {type(v).__name__}; values must "
                "be scalar tensors or numbers"
            )
    return values


def _accumulate(model, loader, sizes, device):
    """Sum of (metric * batch size) and of batch sizes per metric over a loader."""
    has_val = callable(getattr(model, "validation_step", None))
    step = model.validation_step if has_val else model.training_step
    method = "validation_step" if has_val else "training_step"
    was_training = model.training
    model.eval()
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    try:
        with torch.no_grad():
            for batch, n in zip(loader, sizes):
                values = scalar_values(step(move_to_device(batch, device)), method, need_loss=False)
                for k, v in values.items():
                    sums[k] = sums.get(k, 0.0) + v * n
                    counts[k] = counts.get(k, 0) + n
    finally:
        model.train(was_training)
    return sums, counts


def evaluate(
    model: nn.Module, dataset, *, collate_fn=None, batch_size: int = 64, device=None, seed: int = 0
) -> dict[str, float]:
    """Validation metrics of ``model`` over ``dataset``: ``validation_step`` (else
    ``training_step``) under ``torch.no_grad`` in eval mode, each metric averaged over
    samples (batch means weighted by batch size).

    ``device``: where to evaluate (the model is moved there); None keeps the model on
    the device its parameters are on (CPU for a model without any), so evaluating never
    moves a model the caller goes on using elsewhere; "auto" picks CUDA when available.
    """
    _check_dataset(dataset, "dataset")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if device is None:
        dev = _model_device(model)
    else:
        dev = device if isinstance(device, torch.device) else resolve_device(device)
    model.to(dev)
    sampler = ShardBatchSampler(len(dataset), batch_size)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate_fn)
    with isolated_rng(seed):
        sums, counts = _accumulate(model, loader, sampler.batch_sizes(), dev)
    return {k: sums[k] / counts[k] for k in sums}


def _model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (or buffer); CPU when it has neither."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def _seed_worker(worker_id: int) -> None:
    # torch seeds each worker with base_seed + worker_id, base_seed drawn from the loader's
    # own generator; numpy and python random follow it
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 (the global RNG is what workers' code uses)


# ---------------------------------------------------------------------------- Trainer


class Trainer:
    """Train ``model`` on ``train_data`` with ``config``; write everything under out_dir.

    Args:
        model: an nn.Module following the contract of :mod:`simsci.train`.
        config: a :class:`TrainConfig`.
        train_data, val_data: map-style Datasets (``val_data`` optional).
        out_dir: run directory: ``checkpoints/last.pt``, ``checkpoints/best.pt``,
            ``metrics.csv``, ``metrics.jsonl``, ``summary.json`` (and ``tensorboard/``).
        collate_fn: the DataLoader's collate function (default: torch's default_collate).
        resume: False (fresh run in an out_dir without a run), True (continue from
            ``out_dir/checkpoints/last.pt`` if it exists, else start fresh), or a
            checkpoint path to continue from.
        extra: a JSON-able dict stored in every checkpoint under ``"extra"`` (e.g. the
            data window a model was trained on).
    """

    def __init__(
        self,
        model: nn.Module,
        config: TrainConfig,
        train_data,
        val_data=None,
        *,
        out_dir,
        collate_fn=None,
        resume=False,
        extra: dict | None = None,
    ):
        if isinstance(config, Mapping):
            raise TypeError("config must be a TrainConfig; build one with TrainConfig.from_dict")
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        check_model(model)
        _check_dataset(train_data, "train_data")
        if val_data is not None:
            _check_dataset(val_data, "val_data")
        if config.early_stopping and val_data is None:
            raise ValueError(
                "early_stopping=True needs val_data (it watches a validation metric); pass "
                "val_data or set early_stopping=False"
            )
        extra = {} if extra is None else extra
        try:
            json.dumps(extra)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"extra must be a JSON-able dict: {exc}") from exc
        if config.tensorboard:
            tensorboard_writer_class()  # fail now, not after the first log step
        self.config = config
        self.model = model
        self.extra = dict(extra)
        self.out_dir = Path(out_dir)
        self.last_path = self.out_dir / "checkpoints" / "last.pt"
        self.best_path = self.out_dir / "checkpoints" / "best.pt"
        resume_path = self._resume_path(resume)

        self.dist, self.device = _distributed.setup(config.device)
        try:
            self._build(train_data, val_data, collate_fn)
            if resume_path is not None:
                self._load(resume_path)
            # every rank has passed its checks before rank 0 writes anything
            _distributed.barrier(self.dist)
        except BaseException:
            self._ddp = None
            _distributed.teardown(self.dist, wait=False)
            raise
        self._fitted = False

    # -------------------------------------------------------------------- setup

    def _resume_path(self, resume) -> Path | None:
        if resume is False or resume is None:
            present = [
                str(p.relative_to(self.out_dir))
                for p in (
                    self.last_path,
                    self.best_path,
                    self.out_dir / "metrics.jsonl",
                    self.out_dir / "metrics.csv",
                )
                if p.exists()
            ]
            if present:
                raise FileExistsError(
                    f"out_dir {str(self.out_dir)!r} already holds a run ({', '.join(present)}); "
                    "pass resume=True to continue it, or use an empty out_dir"
                )
            return None
        if resume is True:
            return self.last_path if self.last_path.is_file() else None
        if isinstance(resume, (str, os.PathLike)):
            path = Path(resume)
            if not path.is_file():
                raise FileNotFoundError(
                    f"resume={str(path)!r}: no such checkpoint file; pass resume=True to use "
                    "out_dir/checkpoints/last.pt when present"
                )
            return path
        raise TypeError(f"resume must be True, False or a checkpoint path, got {resume!r}")

    def _build(self, train_data, val_data, collate_fn) -> None:
        c, d = self.config, self.dist
        self.model.to(self.device)
        self._ddp = (
            _distributed.wrap_ddp(self.model, self.device, c.find_unused_parameters)
            if d.enabled
            else None
        )
        self.train_sampler = EpochBatchSampler(
            len(train_data), c.batch_size, seed=c.seed, world_size=d.world_size, rank=d.rank
        )
        self.steps_per_epoch = self.train_sampler.num_batches
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"train_data has {len(train_data)} samples, fewer than the "
                f"{d.world_size} processes; every process needs at least one sample"
            )
        pin = self.device.type == "cuda"
        self._loader_gen = torch.Generator()
        workers = dict(
            num_workers=c.num_workers,
            pin_memory=pin,
            worker_init_fn=_seed_worker if c.num_workers else None,
        )
        self.train_loader = DataLoader(
            train_data,
            batch_sampler=self.train_sampler,
            collate_fn=collate_fn,
            generator=self._loader_gen,
            **workers,
        )
        self.val_loader = None
        if val_data is not None:
            vs = ShardBatchSampler(
                len(val_data), c.batch_size, world_size=d.world_size, rank=d.rank
            )
            self._val_sizes = vs.batch_sizes()
            self._val_gen = torch.Generator()
            self.val_loader = DataLoader(
                val_data,
                batch_sampler=vs,
                collate_fn=collate_fn,
                generator=self._val_gen,
                **workers,
            )
        self.total_steps = self._planned_steps()
        groups = parameter_groups(self.model)
        self._params = [p for g in groups for p in g["params"]]
        self.optimizer = build_optimizer(c, groups)
        self.scheduler = build_scheduler(c, self.optimizer, self.total_steps)

        if val_data is not None:
            evals = (
                self.total_steps // c.val_every
                if c.val_every is not None
                else self.total_steps // self.steps_per_epoch
            )
            if evals == 0:
                every = (
                    f"val_every={c.val_every}"
                    if c.val_every is not None
                    else f"at each epoch end, {self.steps_per_epoch} steps"
                )
                warnings.warn(
                    f"this run of {self.total_steps} steps never evaluates on its validation "
                    f"data ({every}): set val_every to at most {self.total_steps} steps; "
                    "without an evaluation best.pt holds the run's final state",
                    stacklevel=3,
                )

        self.step = 0
        self.epoch = 0
        self.pos = 0
        self.es = {"best": None, "best_step": None, "bad_evals": 0, "stopped": False}
        self.window = {"sums": {}, "counts": {}}
        self.train_time = 0.0
        self.last_train: dict | None = None
        self.last_val: dict | None = None
        self.resumed_from: str | None = None
        self._rng_state = None

    def _planned_steps(self) -> int:
        """The run's length in steps: ``min(epochs * steps_per_epoch, max_steps)``, or
        ``max_steps`` when epochs is None (unbounded); warns when ``epochs`` ends the run
        before the ``max_steps`` budget."""
        c, spe = self.config, self.steps_per_epoch
        if c.epochs is None:
            return c.max_steps
        by_epochs = c.epochs * spe
        if c.max_steps is None:
            return by_epochs
        if by_epochs < c.max_steps and self.dist.is_main:
            warnings.warn(
                f"epochs={c.epochs} ({spe} steps each) stops this run at step {by_epochs}, "
                f"before max_steps={c.max_steps}; to train {c.max_steps} steps drop epochs "
                f"(with max_steps given, epochs are unbounded by default) or set epochs >= "
                f"{math.ceil(c.max_steps / spe)}",
                stacklevel=4,
            )
        return min(by_epochs, c.max_steps)

    def _load(self, path: Path) -> None:
        c, d = self.config, self.dist
        ckpt = load_checkpoint(path, map_location="cpu")
        where = str(path)
        if ckpt.get("world_size", 1) != d.world_size:
            raise CheckpointError(
                f"{where} was written by a run of {ckpt.get('world_size')} processes; resume "
                f"it with the same number (this run has {d.world_size})"
            )
        mine = model_import_path(self.model)
        theirs = ckpt["model"]["import_path"]
        if theirs != mine:
            raise CheckpointError(
                f"{where} holds a {theirs} model, but the Trainer was given a {mine}; build "
                "the model with simsci.train.load_model(path) or pass the matching class"
            )
        if ckpt["model"].get("init_args") != self.model.init_args:
            warnings.warn(
                f"the model's init_args differ from those in {where}: "
                f"{ckpt['model'].get('init_args')} (checkpoint) vs {self.model.init_args}",
                stacklevel=3,
            )
        saved = ckpt.get("config", {})
        bad = [k for k in _MUST_MATCH if k in saved and saved[k] != getattr(c, k)]
        if bad:
            raise CheckpointError(
                f"cannot resume {where} with a different "
                + ", ".join(f"{k} ({saved[k]!r} -> {getattr(c, k)!r})" for k in bad)
                + ": the saved data position and optimiser state depend on them; resume with "
                "the checkpoint's values or start a new run from load_model(path)"
            )
        if ckpt.get("steps_per_epoch") != self.steps_per_epoch:
            raise CheckpointError(
                f"{where} was written with {ckpt.get('steps_per_epoch')} steps per epoch but "
                f"train_data now gives {self.steps_per_epoch}; resume on the same dataset"
            )
        changed = [k for k in _CHANGES_TRAJECTORY if k in saved and saved[k] != getattr(c, k)]
        if ckpt.get("total_steps") != self.total_steps and c.schedule in (
            "cosine",
            "warmup_cosine",
        ):
            changed.append(f"schedule horizon {ckpt.get('total_steps')} -> {self.total_steps}")
        if changed:
            warnings.warn(
                f"resuming {where} with changed settings ({', '.join(changed)}): the run goes "
                "on with the new values and will not match the run the checkpoint came from",
                stacklevel=3,
            )
        try:
            self.model.load_state_dict(ckpt["model_state"])
        except RuntimeError as exc:
            raise CheckpointError(f"the weights in {where} do not fit the model: {exc}") from exc
        self.optimizer.load_state_dict(ckpt["optimizer_state"])
        self.scheduler.load_state_dict(ckpt["scheduler_state"])
        # the config's lr / weight_decay / schedule horizon rule from here on; with an
        # unchanged config this recomputes exactly the value LambdaLR had set
        factor = lr_factor(c, self.total_steps)(self.scheduler.last_epoch)
        self.scheduler.base_lrs = [
            c.lr * g.get("lr_scale", 1.0) for g in self.optimizer.param_groups
        ]
        for group in self.optimizer.param_groups:
            group["initial_lr"] = c.lr * group.get("lr_scale", 1.0)
            group["lr"] = group["initial_lr"] * factor
            group["weight_decay"] = c.weight_decay
        self.step = int(ckpt["step"])
        self.epoch = int(ckpt["epoch"])
        self.pos = int(ckpt["epoch_position"])
        self.es = dict(ckpt["early_stopping"])
        self.window = copy.deepcopy(ckpt["log_window"])
        self.train_time = float(ckpt.get("train_time", 0.0))
        self.last_train = ckpt.get("last_train")
        self.last_val = ckpt.get("last_val")
        self._rng_state = ckpt["rng"][d.rank]
        self.resumed_from = where

    # ---------------------------------------------------------------------- fit

    def fit(self) -> dict:
        """Train until ``epochs``/``max_steps`` or early stopping; return a summary dict:
        steps, epochs (completed), best metric and step, stopped early, times, paths.
        """
        if self._fitted:
            raise RuntimeError(
                "fit() already ran on this Trainer; build a new Trainer with resume=True to "
                "continue the run"
            )
        self._fitted = True
        c, d = self.config, self.dist
        t_start = time.perf_counter()
        deterministic_before = self._set_deterministic()
        self._log = None
        self._bar = None
        finished = False
        try:
            if d.is_main:
                self.last_path.parent.mkdir(parents=True, exist_ok=True)
                if self.resumed_from is None and self.best_path.exists():
                    self.best_path.unlink()  # left by an attempt that never reached last.pt
                for tmp in self.last_path.parent.glob(".*.pt.tmp-*"):
                    tmp.unlink(missing_ok=True)  # a write cut short by a kill
                self._log = MetricsLog(
                    self.out_dir,
                    keep_until=self.step if self.resumed_from is not None else None,
                    tensorboard=c.tensorboard,
                )
            if self._rng_state is not None:
                restore_rng(self._rng_state)
            else:
                seed_all(c.seed if d.rank == 0 else mix_seed(c.seed, "rank", d.rank))
            if d.is_main and c.progress:
                # tqdm.auto probes for a notebook (IPython) when imported: only with a bar
                from tqdm.auto import tqdm

                self._bar = tqdm(
                    total=self.total_steps,
                    initial=min(self.step, self.total_steps),
                    desc="train",
                    unit="step",
                    dynamic_ncols=True,
                )
            self._t0 = time.perf_counter()
            self._time_before = self.train_time
            self._loop()
            summary = self._summary(time.perf_counter() - t_start)
            if d.is_main:
                write_json(self.out_dir / "summary.json", summary)
            finished = True
        finally:
            if self._bar is not None:
                self._bar.close()
            if self._log is not None:
                self._log.close()
            self._restore_deterministic(deterministic_before)
            if self._ddp is not None:
                # free DDP's reducer (it holds the process group) while the interpreter is
                # alive; left to exit-time collection, gloo's threads can abort the process
                self._ddp = None
                gc.collect()
            _distributed.teardown(self.dist, wait=finished)
        return summary

    def _set_deterministic(self):
        before = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.benchmark,
            torch.backends.cudnn.deterministic,
        )
        if self.config.deterministic:
            # cuBLAS needs a fixed workspace for deterministic matmuls on CUDA >= 10.2
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
            torch.backends.cudnn.benchmark = False
            torch.backends.cudnn.deterministic = True
        return before

    @staticmethod
    def _restore_deterministic(before) -> None:
        enabled, warn_only, benchmark, cudnn_det = before
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.backends.cudnn.benchmark = benchmark
        torch.backends.cudnn.deterministic = cudnn_det

    def _done(self) -> bool:
        c = self.config
        return (
            bool(self.es["stopped"])
            or (c.epochs is not None and self.epoch >= c.epochs)
            or (c.max_steps is not None and self.step >= c.max_steps)
        )

    def _time(self) -> float:
        return self._time_before + (time.perf_counter() - self._t0)

    def _loop(self) -> None:
        c, d = self.config, self.dist
        while not self._done():
            self.train_sampler.set_epoch(self.epoch, self.pos)
            self._loader_gen.manual_seed(mix_seed(c.seed, "loader", self.epoch, d.rank))
            self.model.train()
            for batch in self.train_loader:
                values, lr = self._train_step(batch)
                if self._after_step(values, lr):
                    return

    def _train_step(self, batch):
        c, d = self.config, self.dist
        n_local, n_global = self.train_sampler.sizes(self.pos)
        batch = move_to_device(batch, self.device)
        self.optimizer.zero_grad(set_to_none=True)
        out = self._ddp(batch) if self._ddp is not None else self.model.training_step(batch)
        values = scalar_values(out, "training_step", need_loss=True)
        loss = out["loss"]
        if d.enabled:
            names = list(values)
            vec = torch.tensor(
                [values[k] * n_local for k in names], dtype=torch.float64, device=self.device
            )
            vec = _distributed.all_reduce_sum(d, vec) / n_global
            values = dict(zip(names, vec.tolist()))
        if not math.isfinite(values["loss"]):
            self._fail("loss", values["loss"])
        scale = d.world_size * n_local / n_global
        (loss if scale == 1.0 else loss * scale).backward()
        if c.grad_clip is not None:
            norm = float(torch.nn.utils.clip_grad_norm_(self._params, c.grad_clip))
            if not math.isfinite(norm):
                self._fail("gradient norm", norm)
            values["grad_norm"] = norm
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.optimizer.step()
        self.scheduler.step()
        return values, lr

    def _fail(self, what: str, value: float):
        where = (
            f"the last checkpoint ({self.last_path}) is unchanged"
            if self.last_path.exists()
            else "no checkpoint was written"
        )
        raise TrainingError(
            f"non-finite {what} ({value}) at step {self.step + 1} (epoch {self.epoch}, batch "
            f"{self.pos + 1} of {self.steps_per_epoch}); the parameters were not updated and "
            f"{where}. Lower the lr, set grad_clip, or look for NaN/inf in the data and the "
            "model"
        )

    def _after_step(self, values: dict, lr: float) -> bool:
        c = self.config
        epoch_of_step = self.epoch
        self.step += 1
        self.pos += 1
        sums, counts = self.window["sums"], self.window["counts"]
        for k, v in values.items():
            sums[k] = sums.get(k, 0.0) + v
            counts[k] = counts.get(k, 0) + 1
        if self.step % c.log_every == 0:
            row = {
                "step": self.step,
                "epoch": epoch_of_step,
                "split": "train",
                "lr": lr,
                "time": self._time(),
            }
            row.update({k: sums[k] / counts[k] for k in sums})
            self.last_train = row
            self._write(row)
            self.window = {"sums": {}, "counts": {}}
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{values['loss']:.4g}", refresh=False)
            self._bar.update(1)
        epoch_end = self.pos == self.steps_per_epoch
        if epoch_end:
            self.epoch += 1
            self.pos = 0
        evaluated = False
        if self.val_loader is not None and (
            (c.val_every is not None and self.step % c.val_every == 0)
            or (c.val_every is None and epoch_end)
        ):
            self._evaluate(epoch_of_step, lr)
            evaluated = True
        done = self._done()
        due = (
            self.step % c.checkpoint_every == 0
            if c.checkpoint_every is not None
            else (evaluated or epoch_end)
        )
        if due or done:
            self._save(self.last_path)
        if done and self.es["best"] is None:
            # no validation named a best (none given, none within the run's steps, or
            # only non-finite values): best.pt holds the final state, so it exists
            # whenever a run has ended; a later evaluation with a best replaces it
            self._save(self.best_path)
        return done

    def _write(self, row: dict) -> None:
        if self._log is not None:
            self._log.write(row)

    def _evaluate(self, epoch_of_step: int, lr: float) -> None:
        c, d = self.config, self.dist
        self._val_gen.manual_seed(mix_seed(c.seed, "val-loader", d.rank))
        with isolated_rng(mix_seed(c.seed, "val", self.step, d.rank)):
            sums, counts = _accumulate(self.model, self.val_loader, self._val_sizes, self.device)
        if d.enabled:
            gathered = _distributed.all_gather(d, (sums, counts))
            sums, counts = {}, {}
            for s, n in gathered:
                for k in s:
                    sums[k] = sums.get(k, 0.0) + s[k]
                    counts[k] = counts.get(k, 0) + n[k]
        metrics = {f"val_{k}": sums[k] / counts[k] for k in sums}
        self.last_val = metrics
        self._write(
            {
                "step": self.step,
                "epoch": epoch_of_step,
                "split": "val",
                "lr": lr,
                "time": self._time(),
                **metrics,
            }
        )
        if c.monitor not in metrics:
            raise unknown_name("monitored metric (TrainConfig.monitor)", c.monitor, metrics)
        value = metrics[c.monitor]
        best = self.es["best"]
        if math.isfinite(value) and (
            best is None
            or (c.mode == "min" and value < best - c.min_delta)
            or (c.mode == "max" and value > best + c.min_delta)
        ):
            self.es.update(best=value, best_step=self.step, bad_evals=0)
            self._save(self.best_path)
        else:
            self.es["bad_evals"] += 1
            if c.early_stopping and self.es["bad_evals"] >= c.patience:
                self.es["stopped"] = True

    def _save(self, path: Path) -> None:
        # every rank contributes its RNG state; only rank 0 writes
        rngs = _distributed.all_gather(self.dist, capture_rng())
        if not self.dist.is_main:
            return
        payload = {
            "kind": KIND,
            "format_version": FORMAT_VERSION,
            "model": {
                "import_path": model_import_path(self.model),
                "init_args": copy.deepcopy(self.model.init_args),
            },
            "model_state": self.model.state_dict(),
            "optimizer_state": self.optimizer.state_dict(),
            "scheduler_state": self.scheduler.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "epoch_position": self.pos,
            "steps_per_epoch": self.steps_per_epoch,
            "total_steps": self.total_steps,
            "early_stopping": dict(self.es),
            "log_window": copy.deepcopy(self.window),
            "last_train": self.last_train,
            "last_val": self.last_val,
            "train_time": self._time(),
            "config": self.config.to_dict(),
            "world_size": self.dist.world_size,
            "rng": rngs,
            "versions": versions(),
            "extra": copy.deepcopy(self.extra),
        }
        save_checkpoint(path, payload)

    def _summary(self, wall: float) -> dict:
        c = self.config
        return {
            "steps": self.step,
            "epochs": self.epoch,
            "epoch_position": self.pos,
            "total_steps": self.total_steps,
            "monitor": c.monitor,
            "best_metric": self.es["best"],
            "best_step": self.es["best_step"],
            # best.pt: the best evaluation, or the final state when none named a best
            "best_from": "validation" if self.es["best"] is not None else "final_state",
            "stopped_early": bool(self.es["stopped"]),
            "last_train": self.last_train,
            "last_val": self.last_val,
            "wall_time": wall,
            "train_time": self._time(),
            "world_size": self.dist.world_size,
            "resumed_from": self.resumed_from,
            "paths": {
                "out_dir": str(self.out_dir),
                "last_checkpoint": str(self.last_path),
                "best_checkpoint": str(self.best_path),
                "metrics_csv": str(self.out_dir / "metrics.csv"),
                "metrics_jsonl": str(self.out_dir / "metrics.jsonl"),
                "tensorboard": str(self.out_dir / "tensorboard") if c.tensorboard else None,
            },
        }
