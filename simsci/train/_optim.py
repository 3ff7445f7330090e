"""Optimiser and learning-rate schedule from a TrainConfig (formulas in TrainConfig)."""

from __future__ import annotations

import math

import torch

from simsci.train._config import TrainConfig


def parameter_groups(model: torch.nn.Module) -> list[dict]:
    """The optimiser's parameter groups: ``model.parameter_groups()`` when the model
    defines it (a list of ``{"params": [...], "lr_scale": s, "name": ...}``; group
    learning rate ``config.lr * s``, e.g. the derivative orders of a ∂-NO learning
    faster than the weights), else one group of every parameter. Parameters that do not
    require gradients are dropped; a parameter in two groups is an error."""
    if hasattr(model, "parameter_groups"):
        raw = list(model.parameter_groups())
    else:
        raw = [{"params": list(model.parameters()), "lr_scale": 1.0, "name": "all"}]
    groups, seen = [], set()
    for i, g in enumerate(raw):
        params = [p for p in g["params"] if p.requires_grad]
        for p in params:
            if id(p) in seen:
                raise ValueError(f"parameter group {g.get('name', i)!r} repeats a parameter")
            seen.add(id(p))
        scale = float(g.get("lr_scale", 1.0))
        if not (scale > 0 and math.isfinite(scale)):
            raise ValueError(f"lr_scale of group {g.get('name', i)!r} must be > 0, got {scale}")
        if params:
            groups.append({"params": params, "lr_scale": scale, "name": str(g.get("name", i))})
    missing = [p for p in model.parameters() if p.requires_grad and id(p) not in seen]
    if missing:
        raise ValueError(
            f"{type(model).__name__}.parameter_groups() leaves out {len(missing)} trainable "
            "parameter(s); every parameter must be in one group"
        )
    return groups


def build_optimizer(config: TrainConfig, params) -> torch.optim.Optimizer:
    """An optimiser over ``params``: tensors, or groups from :func:`parameter_groups`."""
    params = list(params)
    if params and isinstance(params[0], dict):
        params = [{**g, "lr": config.lr * g.get("lr_scale", 1.0)} for g in params]
    else:
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
