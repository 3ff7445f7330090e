"""Optimiser and learning-rate schedule from a TrainConfig (formulas in TrainConfig)."""

from __future__ import annotations

import math

import torch

from simsci.train._config import TrainConfig


def build_optimizer(config: TrainConfig, params) -> torch.optim.Optimizer:
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters (none with requires_grad)")
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    if config.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    return torch.optim.SGD(params, lr=config.lr, momentum=0.9, weight_decay=config.weight_decay)


def lr_factor(config: TrainConfig, total_steps: int):
    """f(s): the multiplier of ``config.lr`` at 0-based step s of a ``total_steps`` run."""
    kind = config.schedule
    total = max(int(total_steps), 1)
    warm = config.warmup_steps

    def constant(s: int) -> float:
        return 1.0

    def cosine(s: int) -> float:
        return 0.5 * (1.0 + math.cos(math.pi * min(s, total) / total))

    def step(s: int) -> float:
        return config.step_gamma ** (s // config.step_every)

    def warmup_cosine(s: int) -> float:
        if s < warm:
            return (s + 1) / warm
        span = max(total - warm, 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(s - warm, span) / span))

    return {"constant": constant, "cosine": cosine, "step": step, "warmup_cosine": warmup_cosine}[
        kind
    ]


def build_scheduler(config: TrainConfig, optimizer, total_steps: int):
    # a plain function (not a callable object): LambdaLR then keeps it out of state_dict,
    # so a resumed run uses the schedule of its own config
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(config, total_steps))
