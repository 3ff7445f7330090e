"""Device and dtype helpers: everything follows the input's device and dtype."""

from __future__ import annotations

import torch


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``None``/``"auto"`` -> CUDA when available, else CPU; otherwise a validated device.

    Asking for CUDA on a machine without it is an error that says so, not a crash later.
    """
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(
            f"unknown device {device!r}; use 'cpu', 'cuda', 'cuda:N' or 'auto'"
        ) from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device {device!r} was asked for but torch sees no CUDA device "
            f"(torch {torch.__version__}); use --device cpu or install a CUDA build of torch"
        )
    return dev


def synchronize(device: torch.device | str) -> None:
    """Wait for queued work on ``device`` (no-op on CPU); used before reading a clock."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
