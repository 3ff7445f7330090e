"""Shared pieces of the simsci backbones: the base class, input checks, grid coordinates.

Every backbone (FNO, DeepONet, UNet) maps a channels-first grid tensor
``(B, in_channels, *grid)`` to ``(B, out_channels, *grid)`` with ``len(grid) == dim``
(1 or 2) and checks its input once, at the boundary, with :func:`check_input`.

Grid convention (shared by the ``periodic`` flag of every backbone and by the simsci
PDE systems): on a periodic axis of ``N`` points sample ``j`` sits at ``x_j = j / N``
(left cell edges, ``[0, 1)``); on a non-periodic axis it sits on the vertex grid
``x_j = j / (N - 1)`` (both boundary nodes included, ``[0, 1]``) as in the Darcy system.

This module is separate from ``_backbones`` (which re-exports its helpers) only because
the backbone modules import it and ``_backbones`` imports them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from simsci.errors import unknown_name

__all__ = [
    "ACTIVATIONS",
    "Backbone",
    "check_finite",
    "check_input",
    "count_parameters",
    "first_real",
    "grid_coordinates",
    "make_activation",
]

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "gelu": nn.GELU,
    "relu": nn.ReLU,
    "silu": nn.SiLU,
    "tanh": nn.Tanh,
}


def make_activation(name: str) -> nn.Module:
    """A fresh activation module by name (``gelu``, ``relu``, ``silu``, ``tanh``)."""
    if not isinstance(name, str):
        raise TypeError(f"activation must be a name (str), got {type(name).__name__} {name!r}")
    cls = ACTIVATIONS.get(name)
    if cls is None:
        raise unknown_name("activation", name, ACTIVATIONS)
    return cls()


def positive_int(what: str, value, *, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``; bools and non-integers are TypeErrors."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int >= {minimum}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{what} must be an int >= {minimum}, got {value}")
    return int(value)


def per_axis(what: str, value, dim: int, *, minimum: int = 1) -> tuple[int, ...]:
    """An int or a length-``dim`` sequence of ints (each >= ``minimum``) as a tuple."""
    if isinstance(value, (list, tuple)):
        if len(value) != dim:
            raise ValueError(
                f"{what} needs one entry per grid axis (dim={dim}), got {len(value)}: {value!r}"
            )
        return tuple(positive_int(f"{what}[{a}]", v, minimum=minimum) for a, v in enumerate(value))
    return (positive_int(what, value, minimum=minimum),) * dim


def check_dim(dim) -> int:
    if isinstance(dim, bool) or dim not in (1, 2):
        raise ValueError(f"dim must be 1 or 2 (spatial dimensions of the grid), got {dim!r}")
    return int(dim)


def check_finite(x: Tensor, what: str = "input") -> None:
    """Raise ValueError naming the first sample (index along axis 0) holding NaN/inf.

    Under ``torch.export`` (``simsci.train.export_model``) the values are unknown while
    tracing and the check passes: an exported program has no checks."""
    finite = torch.isfinite(x.flatten(1)).all(dim=1) if x.ndim > 1 else torch.isfinite(x)
    ok = finite.all().item()
    if not isinstance(ok, bool):  # a symbolic value: torch.export is tracing
        from torch.fx.experimental.symbolic_shapes import guard_or_true

        ok = guard_or_true(ok)
    if not ok:
        bad = torch.nonzero(~finite).flatten().tolist()
        listing = ", ".join(map(str, bad[:10])) + (", ..." if len(bad) > 10 else "")
        raise ValueError(
            f"{what}: sample {bad[0]} holds NaN/inf (bad samples: {listing}); "
            "a backbone needs finite values everywhere (drop or fill those samples)"
        )


def check_input(
    x: Tensor, *, name: str, in_channels: int, dim: int, like: Tensor | None = None
) -> None:
    """Check a backbone input ``(B, in_channels, *grid)``, ``len(grid) == dim``.

    ``like`` (a parameter of the module) fixes the dtype and device the input must have.
    Non-finite values raise ValueError naming the first bad sample.
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} takes a torch.Tensor, got {type(x).__name__}")
    layout = "(B, C, N)" if dim == 1 else "(B, C, H, W)"
    if x.ndim != dim + 2:
        raise ValueError(
            f"{name} (dim={dim}) takes channels-first input {layout}, got shape "
            f"{tuple(x.shape)}; move channels to axis 1 (x.movedim(-1, 1) for channels-last)"
        )
    if x.shape[1] != in_channels:
        raise ValueError(
            f"{name} expects {in_channels} input channels, got {x.shape[1]} "
            f"(input shape {tuple(x.shape)}); build it with in_channels={x.shape[1]} "
            "or fix the input"
        )
    if not x.is_floating_point():
        raise TypeError(f"{name} takes a floating-point input, got {x.dtype}")
    if like is not None:
        if x.dtype != like.dtype:
            raise TypeError(
                f"{name} holds {like.dtype} weights but the input is {x.dtype}; cast one "
                f"to match (module.to({x.dtype}) or x.to({like.dtype}))"
            )
        if x.device != like.device:
            raise ValueError(
                f"{name} lives on {like.device} but the input is on {x.device}; move one "
                f"(module.to({str(x.device)!r}) or x.to({str(like.device)!r}))"
            )
    check_finite(x, what=f"{name} input")


def first_real(module: nn.Module) -> Tensor | None:
    """The module's first real (floating) parameter, else its first real buffer, else
    None: the dtype and device inputs follow (complex weights, e.g. neuraloperator's
    complex64 spectral weights, must not set them)."""
    return next(
        (t for t in (*module.parameters(), *module.buffers()) if t.is_floating_point()), None
    )


def count_parameters(module: nn.Module) -> int:
    """Number of real parameters of ``module``: a complex parameter counts twice (re, im).

    ``p.numel()`` counts a complex entry once, so models that keep complex spectral weights
    (neuraloperator's) would look half their size next to ones that store them as real
    pairs (simsci's FNO).

    >>> count_parameters(nn.Linear(3, 2))
    8
    """
    return sum(p.numel() * (2 if p.is_complex() else 1) for p in module.parameters())


def grid_coordinates(
    grid: tuple[int, ...], *, periodic: bool, dtype: torch.dtype, device
) -> Tensor:
    """Coordinates ``(dim, *grid)`` of the grid points in the module convention.

    Periodic: ``j / N`` in ``[0, 1)``. Non-periodic: ``j / (N - 1)`` in ``[0, 1]``
    (a single-point axis sits at 0).
    """
    axes = []
    for n in grid:
        j = torch.arange(n, dtype=dtype, device=device)
        axes.append(j / n if periodic else j / max(n - 1, 1))
    mesh = torch.meshgrid(*axes, indexing="ij")
    return torch.stack(mesh, dim=0)


class Backbone(nn.Module):
    """Base of the simsci backbones: the contract attributes and :meth:`num_parameters`.

    Subclasses set ``in_channels``, ``out_channels``, ``dim`` and ``init_args`` (the
    JSON-able constructor kwargs: ``type(m)(**m.init_args)`` rebuilds the module).
    """

    in_channels: int
    out_channels: int
    dim: int
    init_args: dict

    def num_parameters(self) -> int:
        """Number of real parameters (:func:`count_parameters`: complex ones count twice)."""
        return count_parameters(self)

    def _check(self, x: Tensor) -> None:
        like = first_real(self)
        check_input(
            x, name=type(self).__name__, in_channels=self.in_channels, dim=self.dim, like=like
        )

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.init_args.items())
