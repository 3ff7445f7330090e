"""Input checks at ΔSim's boundary, shared by its modules: tensors and shapes (the same
rules and messages as the contract's own checks in :mod:`simsci.driving`), the
lanes/agents pair a policy reads, counts and roads."""

from __future__ import annotations

import numpy as np
import torch

from simsci.driving import AgentState, LaneSet
from simsci.driving import check_shape as _check_shape
from simsci.driving import checked_tensor as _tensor


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
