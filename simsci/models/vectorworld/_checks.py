"""Input checks at ΔSim's boundary, shared by its modules: tensors and shapes (the same
rules and messages as the contract's own checks in :mod:`simsci.driving`), the
lanes/agents pair a policy reads, counts and roads."""

from __future__ import annotations

import numpy as np
import torch

from simsci.driving import AgentState, LaneSet


def _tensor(x, name: str, *, like=None, dtype=None) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.as_tensor(np.asarray(x))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be a tensor or an array, got {type(x).__name__}") from exc
    if like is not None:
        x = x.to(device=like.device)
    if dtype is not None:
        x = x.to(dtype)
    return x


def _check_shape(t: torch.Tensor, shape: tuple, name: str, what: str) -> None:
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} ({what}), got {tuple(t.shape)}")


def _check_pair(lanes, agents, controlled=None):
    if not isinstance(lanes, LaneSet):
        raise TypeError(f"lanes must be a LaneSet, got {type(lanes).__name__}")
    if not isinstance(agents, AgentState):
        raise TypeError(f"agents must be an AgentState, got {type(agents).__name__}")
    B, V = agents.shape
    if lanes.num_scenes not in (1, B):
        raise ValueError(
            f"lanes have B = {lanes.num_scenes} scenes, agents B = {B}: give one LaneSet "
            "scene per agent scene (or B = 1 shared)"
        )
    if lanes.num_scenes == 1 and B > 1:
        lanes = lanes.expand(B)
    if lanes.points.device != agents.x.device:
        raise ValueError(
            f"lanes are on {lanes.points.device}, agents on {agents.x.device}; move one"
        )
    if controlled is not None:
        c = _tensor(controlled, "controlled", like=agents.x)
        if c.dtype != torch.bool:
            raise TypeError(f"controlled must be a bool tensor, got dtype {c.dtype}")
        _check_shape(c, (B, V), "controlled", "one flag per agent slot")
        controlled = c & agents.valid
    return lanes, controlled


def _int_arg(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _road_list(roads):
    roads = [roads] if hasattr(roads, "points") else list(roads)
    if not roads or not all(hasattr(r, "points") for r in roads):
        raise TypeError("roads must be a RoadNetwork or a non-empty list of them (make_road)")
    return roads
