"""Tiny models and datasets for the simsci.train tests (importable by subprocess scripts,
so checkpoints can name them: ``trainhelp_models:LinearRegression``)."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def subprocess_env() -> dict:
    """The environment for helper scripts: this simsci and these helpers importable, no
    torchrun variables inherited, one thread per process."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(HERE), env.get("PYTHONPATH")) if p
    )
    env["OMP_NUM_THREADS"] = "1"
    return env


class Regression(Dataset):
    """y = x @ w + b (+ noise), x ~ N(0, I); samples are dicts {"x": (D,), "y": (1,)}."""

    def __init__(self, n: int, dim: int = 3, *, noise: float = 0.0, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.w = torch.tensor([1.5, -2.0, 0.5, 3.0, -1.0, 0.25][:dim])
        self.b = 0.7
        self.x = torch.randn(n, dim, generator=g)
        self.y = (self.x @ self.w + self.b + noise * torch.randn(n, generator=g))[:, None]

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "y": self.y[i]}


class LinearRegression(nn.Module):
    """Deterministic: loss = mean squared error; also reports the mean absolute error."""

    def __init__(self, dim: int = 3):
        super().__init__()
        self.init_args = {"dim": dim}
        self.linear = nn.Linear(dim, 1)

    def forward(self, x):
        return self.linear(x)

    def training_step(self, batch):
        err = self(batch["x"]) - batch["y"]
        return {"loss": err.pow(2).mean(), "mae": err.abs().mean()}


class NoisyNet(nn.Module):
    """Uses every global RNG while training: dropout and noise (torch), python random and
    numpy draws; validation is noisy too. ``interrupt_at`` (not an init arg) raises
    Interrupted on that call of training_step; ``hang_at`` blocks there (to be killed)."""

    def __init__(self, dim: int = 3, hidden: int = 16, p: float = 0.2):
        super().__init__()
        self.init_args = {"dim": dim, "hidden": hidden, "p": p}
        self.net = nn.Sequential(
            nn.Linear(dim, hidden), nn.Tanh(), nn.Dropout(p), nn.Linear(hidden, 1)
        )
        self.interrupt_at = None
        self.hang_at = None
        self.calls = 0

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch):
        self.calls += 1
        if self.interrupt_at is not None and self.calls == self.interrupt_at:
            raise Interrupted(f"interrupted at call {self.calls}")
        if self.hang_at is not None and self.calls == self.hang_at:
            deadline = time.monotonic() + 120  # the test kills us long before
            while time.monotonic() < deadline:
                time.sleep(0.05)
            raise SystemExit("hang_at: nobody killed this process")
        scale = 1.0 + 0.1 * random.random() + 0.1 * float(np.random.rand())  # noqa: NPY002
        target = batch["y"] + 0.05 * scale * torch.randn_like(batch["y"])
        return {"loss": (self(batch["x"]) - target).pow(2).mean(), "scale": scale}

    def validation_step(self, batch):
        err = self(batch["x"]) - batch["y"]
        return {"loss": err.pow(2).mean(), "jitter": float(torch.rand(()))}


class Interrupted(Exception):
    """Stands for a crash in the middle of a run."""


class ScriptedValidation(nn.Module):
    """Validation returns the next value of ``scores`` (one call per evaluation)."""

    def __init__(self, scores: list):
        super().__init__()
        self.init_args = {"scores": list(scores)}
        self.w = nn.Parameter(torch.zeros(1))
        self.evals = 0

    def training_step(self, batch):
        return {"loss": (self.w - 1.0).pow(2).sum() + 0 * batch.sum()}

    def validation_step(self, batch):
        score = self.init_args["scores"][self.evals]
        self.evals += 1
        return {"score": score}


class SumLoss(nn.Module):
    """loss = scale * sum(w): the gradient is ``scale`` in every entry (norm scale*sqrt(n))."""

    def __init__(self, n: int = 4, scale: float = 1000.0):
        super().__init__()
        self.init_args = {"n": n, "scale": scale}
        self.w = nn.Parameter(torch.zeros(n))

    def training_step(self, batch):
        return {"loss": self.init_args["scale"] * self.w.sum() + 0 * batch.sum()}


class NaNAt(nn.Module):
    """A regression whose loss is NaN on call ``at`` of training_step."""

    def __init__(self, at: int = 4):
        super().__init__()
        self.init_args = {"at": at}
        self.linear = nn.Linear(3, 1)
        self.calls = 0

    def training_step(self, batch):
        self.calls += 1
        loss = (self.linear(batch["x"]) - batch["y"]).pow(2).mean()
        if self.calls == self.init_args["at"]:
            loss = loss * float("nan")
        return {"loss": loss}


class NoTrainingStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.init_args = {}
        self.linear = nn.Linear(3, 1)


class NoInitArgs(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def training_step(self, batch):
        return {"loss": self.linear(batch["x"]).mean()}


class NoLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.init_args = {}
        self.linear = nn.Linear(3, 1)

    def training_step(self, batch):
        return {"mse": (self.linear(batch["x"]) - batch["y"]).pow(2).mean()}
