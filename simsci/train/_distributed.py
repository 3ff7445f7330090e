"""DDP plumbing: detect torchrun, pick the device, start/stop the process group, reduce.

Under torchrun (``WORLD_SIZE > 1`` in the environment) the Trainer starts the default
process group itself (``gloo`` on CPU, ``nccl`` on CUDA; rank, world size and rendezvous
from the ``env://`` variables torchrun sets) unless the caller already started one, and
destroys only a group it started. A CUDA run uses ``cuda:LOCAL_RANK``.
"""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from simsci._device import resolve_device


@dataclasses.dataclass(frozen=True)
class DistInfo:
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    owns_group: bool = False

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from exc


def setup(device_name: str) -> tuple[DistInfo, torch.device]:
    """Start DDP when torchrun asked for it; return the rank info and this rank's device."""
    world = _env_int("WORLD_SIZE", 1)
    if world <= 1 and not (dist.is_available() and dist.is_initialized()):
        return DistInfo(), resolve_device(device_name)
    if not dist.is_available():
        raise RuntimeError(
            f"WORLD_SIZE={world} asks for a distributed run, but this torch build has no "
            "torch.distributed; run without torchrun"
        )
    local = _env_int("LOCAL_RANK", 0)
    device = resolve_device(device_name)
    if device.type == "cuda":
        # one process per GPU: LOCAL_RANK decides which, whatever index the config named
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    owns = False
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        owns = True
    info = DistInfo(dist.get_world_size(), dist.get_rank(), local, owns)
    return info, device


def teardown(info: DistInfo, *, wait: bool) -> None:
    """Destroy the process group we started; ``wait``: first let every rank get here (after
    an error the other ranks may never arrive, so no barrier then)."""
    if info.owns_group and dist.is_initialized():
        if wait:
            dist.barrier()
        dist.destroy_process_group()


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def all_gather(info: DistInfo, obj) -> list:
    """Every rank's ``obj`` (picklable), in rank order."""
    if not info.enabled:
        return [obj]
    out = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def all_reduce_sum(info: DistInfo, values: torch.Tensor) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


class StepModule(nn.Module):
    """Makes ``training_step`` the forward of the module DDP wraps.

    DDP prepares its gradient all-reduce in ``forward``; calling ``model.training_step``
    directly would bypass it, so DDP wraps this module and its forward dispatches.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch):
        return self.model.training_step(batch)


def wrap_ddp(model: nn.Module, device: torch.device, find_unused_parameters: bool):
    return DistributedDataParallel(
        StepModule(model),
        device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=find_unused_parameters,
    )
