"""TrainConfig: every knob of the training loop, validated once at construction.

Choices, and why:

- ``warmup_steps`` belongs to ``schedule="warmup_cosine"`` only (a linear ramp, then a
  cosine decay over the remaining steps). Any other schedule with ``warmup_steps > 0`` is
  an error rather than a silent combination, so a config says exactly one lr curve.
- ``monitor`` must name a validation metric (``"val_" + key`` of ``validation_step``'s
  dict): early stopping and best.pt are decided at evaluations only.
- Numbers are checked for type and range here; whether ``device`` is actually present is
  checked when the Trainer resolves it (a config is portable between machines).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import torch

from simsci.errors import UnknownNameError, unknown_name

OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("constant", "cosine", "step", "warmup_cosine")
MODES = ("min", "max")
#: the number of epochs of a run given neither ``epochs`` nor ``max_steps``
DEFAULT_EPOCHS = 10


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Settings of :class:`simsci.train.Trainer`.

    Steps count optimisation steps (one per batch). Under DDP, ``batch_size`` is per
    process: one step consumes ``batch_size * world_size`` samples.

    The training length: ``max_steps`` is a step budget that is honoured. ``epochs=None``
    (the default) means unbounded epochs when ``max_steps`` is given, and 10 epochs when
    it is not (``TrainConfig().epochs == 10``). With both given the run stops at the
    first reached, and the Trainer warns at the start when ``epochs`` stops it before
    ``max_steps``.

    The learning rate at step s (0-based) of a run of T planned steps
    (``min(epochs * steps_per_epoch, max_steps)``, ``max_steps`` when epochs is None) is
    ``lr * f(s)`` with

    - constant: f = 1
    - cosine: f = (1 + cos(pi * s / T)) / 2
    - step: f = step_gamma ** floor(s / step_every)
    - warmup_cosine (W = warmup_steps): f = (s + 1) / W for s < W, then
      (1 + cos(pi * (s - W) / (T - W))) / 2
    """

    epochs: int | None = None
    max_steps: int | None = None
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.0
    optimizer: str = "adam"
    schedule: str = "constant"
    warmup_steps: int = 0
    step_gamma: float = 0.1
    step_every: int = 1000
    grad_clip: float | None = None
    val_every: int | None = None
    early_stopping: bool = False
    monitor: str = "val_loss"
    mode: str = "min"
    patience: int = 5
    min_delta: float = 0.0
    checkpoint_every: int | None = None
    seed: int = 0
    num_workers: int = 0
    device: str = "auto"
    log_every: int = 50
    progress: bool = True
    tensorboard: bool = False
    deterministic: bool = False
    find_unused_parameters: bool = False

    def __post_init__(self):
        _int(self, "epochs", minimum=1, optional=True)
        _int(self, "max_steps", minimum=1, optional=True)
        if self.epochs is None and self.max_steps is None:
            _set(self, "epochs", DEFAULT_EPOCHS)  # no step budget: 10 epochs
        _int(self, "batch_size", minimum=1)
        _float(self, "lr", positive=True)
        _float(self, "weight_decay")
        _choice(self, "optimizer", OPTIMIZERS)
        _choice(self, "schedule", SCHEDULES)
        _int(self, "warmup_steps", minimum=0)
        if self.schedule == "warmup_cosine" and self.warmup_steps < 1:
            raise ValueError(
                "schedule='warmup_cosine' needs warmup_steps >= 1, got "
                f"{self.warmup_steps}; set warmup_steps or use schedule='cosine'"
            )
        if self.schedule != "warmup_cosine" and self.warmup_steps != 0:
            raise ValueError(
                f"warmup_steps={self.warmup_steps} is only used by schedule='warmup_cosine', "
                f"but schedule={self.schedule!r}; use schedule='warmup_cosine' or "
                "warmup_steps=0"
            )
        _float(self, "step_gamma", positive=True)
        if self.step_gamma > 1:
            raise ValueError(
                f"step_gamma must be in (0, 1] (the lr is multiplied by it every "
                f"step_every steps), got {self.step_gamma}"
            )
        _int(self, "step_every", minimum=1)
        _float(self, "grad_clip", positive=True, optional=True)
        _int(self, "val_every", minimum=1, optional=True)
        _bool(self, "early_stopping")
        if not isinstance(self.monitor, str) or not self.monitor.startswith("val_"):
            raise ValueError(
                "monitor must name a validation metric: 'val_' followed by a key of the "
                f"model's validation_step dict (e.g. 'val_loss'), got {self.monitor!r}"
            )
        _choice(self, "mode", MODES)
        _int(self, "patience", minimum=1)
        _float(self, "min_delta")
        _int(self, "checkpoint_every", minimum=1, optional=True)
        _int(self, "seed", minimum=0)
        if self.seed >= 2**63:
            raise ValueError(f"seed must be below 2**63, got {self.seed}")
        _int(self, "num_workers", minimum=0)
        if not isinstance(self.device, str):
            raise TypeError(
                f"device must be a string ('auto', 'cpu', 'cuda' or 'cuda:N'), "
                f"got {self.device!r} ({type(self.device).__name__})"
            )
        if self.device != "auto":
            try:
                torch.device(self.device)
            except (RuntimeError, TypeError) as exc:
                raise ValueError(
                    f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}"
                ) from exc
        _int(self, "log_every", minimum=1)
        _bool(self, "progress")
        _bool(self, "tensorboard")
        _bool(self, "deterministic")
        _bool(self, "find_unused_parameters")

    @classmethod
    def from_dict(cls, d: Mapping) -> TrainConfig:
        """Build from a plain dict (a JSON config file); unknown keys are errors."""
        if not isinstance(d, Mapping):
            raise TypeError(f"TrainConfig.from_dict expects a dict, got {type(d).__name__}")
        valid = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(str(k) for k in d if k not in valid)
        if unknown:
            err = unknown_name("TrainConfig key", unknown[0], valid)
            others = ", ".join(map(repr, unknown[1:]))
            more = f" Other unknown keys: {others}." if others else ""
            raise UnknownNameError(f"{err}{more}")
        return cls(**dict(d))

    def to_dict(self) -> dict:
        """A plain JSON-able dict; ``TrainConfig.from_dict(c.to_dict()) == c``."""
        return dataclasses.asdict(self)


def _set(cfg, name, value):
    object.__setattr__(cfg, name, value)


def _int(cfg, name, *, minimum, optional=False):
    value = getattr(cfg, name)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        none = " or None" if optional else ""
        raise TypeError(f"{name} must be an integer{none}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _float(cfg, name, *, positive=False, optional=False):
    value = getattr(cfg, name)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        none = " or None" if optional else ""
        raise TypeError(f"{name} must be a number{none}, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        rule = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number {rule}, got {value}")
    _set(cfg, name, value)


def _bool(cfg, name):
    value = getattr(cfg, name)
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")


def _choice(cfg, name, valid):
    value = getattr(cfg, name)
    if value not in valid:
        raise unknown_name(f"{name}", str(value), valid)
