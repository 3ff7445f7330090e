r"""Fourier neural operator (Li et al. 2021, "Fourier Neural Operator for Parametric
Partial Differential Equations"), 1-D and 2-D, channels first.

The network is ``P ∘ (L_T ∘ ... ∘ L_1) ∘ Q``: a pointwise lifting ``Q`` to ``width``
channels, ``layers`` Fourier layers

.. math::  v \mapsto \sigma\big(\mathcal{F}^{-1}(R \cdot \mathcal{F} v) + W v\big)

(``R`` complex weights on the lowest Fourier modes, ``W`` a pointwise linear map, no
activation after the last layer, as in the paper) and a pointwise projection MLP ``P``.

Choices the task left open:

- **Modes.** ``modes=m`` keeps wavenumbers ``|k| <= m - 1`` per axis: ``k = 0..m-1`` on
  the last (rfft) axis, and ``k = -(m-1)..(m-1)`` (``2m - 1`` of them, symmetric) on the
  first axis in 2-D. The symmetric choice (rather than the ``[:m]`` and ``[-m:]`` slices of
  the reference code) never touches the Nyquist row on a grid of ``2m`` points, so the
  spectral layer is *exactly* resolution-consistent on every grid the module accepts
  (``>= 2 m`` points per axis, checked with a ValueError).
- **Weights stored real.** ``R`` is stored as a real tensor ``(in, out, *modes, 2)`` and
  viewed as complex in ``forward`` (``torch.view_as_complex``), so DDP, every optimiser and
  ``num_parameters`` see plain real parameters.
- **Normalisation.** ``rfft``/``irfft`` with the default ("backward") norm: a band-limited
  function sampled on ``N`` or ``2N`` points gives the same output samples, so the same
  weights serve every resolution.
- **Positional coordinates** (``positional=True``): the grid coordinates (see
  ``_common``: ``j/N`` periodic, ``j/(N-1)`` otherwise) are appended as ``dim`` extra
  input channels before the lifting.
- **Padding** for non-periodic problems (Darcy): after the lifting each axis is
  zero-padded at its end by ``padding`` points (an int) or by ``round(padding * N)``
  points (a float in ``[0, 1)``, a fraction of the axis: resolution-consistent), and the
  padding is cropped before the projection. ``padding=0`` (default) for periodic data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from simsci.operators._common import (
    Backbone,
    check_dim,
    grid_coordinates,
    make_activation,
    per_axis,
    positive_int,
)

__all__ = ["FNO", "SpectralConv"]

_CONV = {1: nn.Conv1d, 2: nn.Conv2d}


def check_modes(grid: Sequence[int], modes: Sequence[int], name: str) -> None:
    """ValueError unless every grid axis has at least ``2 * modes`` points."""
    for axis, (n, m) in enumerate(zip(grid, modes)):
        if n < 2 * m:
            raise ValueError(
                f"{name}: grid of {n} points (axis {axis}) is coarser than the "
                f"2*modes={2 * m} Fourier modes need; use a grid of >= {2 * m} points "
                f"or modes <= {n // 2}"
            )


class SpectralConv(nn.Module):
    r"""Spectral convolution ``(B, in, *grid) -> (B, out, *grid)``, 1-D or 2-D.

    ``y = irfftn(R · rfftn(x) restricted to |k| <= m - 1)``, with ``R`` of shape
    ``(in, out, m)`` (1-D) or ``(in, out, 2 m0 - 1, m1)`` (2-D; first-axis rows ordered
    ``k0 = 0, 1, ..., m0-1, -(m0-1), ..., -1``), stored as the real parameter
    ``weight`` with a trailing axis of size 2 (re, im). ``dim = len(modes)``.
    """

    def __init__(self, in_channels: int, out_channels: int, modes: int | Sequence[int]):
        super().__init__()
        self.in_channels = positive_int("in_channels", in_channels)
        self.out_channels = positive_int("out_channels", out_channels)
        if isinstance(modes, (list, tuple)):
            if len(modes) not in (1, 2):
                raise ValueError(f"modes must have 1 or 2 entries (1-D or 2-D), got {modes!r}")
            self.modes = per_axis("modes", modes, len(modes))
        else:
            self.modes = (positive_int("modes", modes),)
        self.dim = len(self.modes)
        if self.dim == 1:
            shape = (self.modes[0],)
        else:
            shape = (2 * self.modes[0] - 1, self.modes[1])
        # Complex Glorot-like scale: std of |R| is sqrt(2 / (in + out)), split over re/im.
        std = 1.0 / math.sqrt(self.in_channels + self.out_channels)
        self.weight = nn.Parameter(std * torch.randn(in_channels, out_channels, *shape, 2))

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, modes={self.modes}"

    def forward(self, x: Tensor) -> Tensor:
        grid = tuple(x.shape[2:])
        if x.ndim != self.dim + 2 or x.shape[1] != self.in_channels:
            raise ValueError(
                f"SpectralConv ({self.dim}-D, {self.in_channels} channels) takes "
                f"(B, {self.in_channels}, *grid) with {self.dim} grid axes, got {tuple(x.shape)}"
            )
        check_modes(grid, self.modes, "SpectralConv")
        w = torch.view_as_complex(self.weight)
        if self.dim == 1:
            (m,) = self.modes
            xf = torch.fft.rfft(x, dim=-1)
            yf = torch.einsum("bik,iok->bok", xf[..., :m], w)
            yf = F.pad(yf, (0, xf.shape[-1] - m))
            return torch.fft.irfft(yf, n=grid[0], dim=-1)
        m0, m1 = self.modes
        h = grid[0]
        xf = torch.fft.rfft2(x, dim=(-2, -1))
        # rows k0 = 0..m0-1 then k0 = -(m0-1)..-1 (indices h-m0+1..h-1)
        rows = torch.cat([xf[..., :m0, :m1], xf[..., h - m0 + 1 :, :m1]], dim=-2)
        yr = torch.einsum("bixy,ioxy->boxy", rows, w)
        gap = yr.new_zeros(yr.shape[0], yr.shape[1], h - (2 * m0 - 1), m1)
        yf = torch.cat([yr[..., :m0, :], gap, yr[..., m0:, :]], dim=-2)
        yf = F.pad(yf, (0, xf.shape[-1] - m1))
        return torch.fft.irfft2(yf, s=grid, dim=(-2, -1))


class FNO(Backbone):
    """Fourier neural operator ``(B, in_channels, *grid) -> (B, out_channels, *grid)``.

    Args:
        in_channels, out_channels: field channels in and out (coordinates not counted).
        dim: 1 or 2 grid axes.
        width: channels of the Fourier layers.
        modes: Fourier modes kept per axis (int or per-axis list); the grid needs
            ``>= 2 * modes`` points per axis.
        layers: number of Fourier layers.
        lifting_width: None for a linear lifting, else the hidden width of a 2-layer MLP.
        projection_width: hidden width of the 2-layer projection MLP.
        activation: ``gelu`` (default), ``relu``, ``silu`` or ``tanh``.
        padding: zero padding per axis for non-periodic data: int points or a float
            fraction of the axis in ``[0, 1)``; 0 for periodic data.
        positional: append the grid coordinates as ``dim`` extra input channels.
        periodic: coordinate convention (``j/N`` if True, ``j/(N-1)`` if False).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        dim: int = 1,
        width: int = 32,
        modes: int | Sequence[int] = 16,
        layers: int = 4,
        lifting_width: int | None = None,
        projection_width: int = 128,
        activation: str = "gelu",
        padding: int | float = 0,
        positional: bool = True,
        periodic: bool = True,
    ):
        super().__init__()
        self.in_channels = positive_int("in_channels", in_channels)
        self.out_channels = positive_int("out_channels", out_channels)
        self.dim = check_dim(dim)
        width = positive_int("width", width)
        self.modes = per_axis("modes", modes, self.dim)
        layers = positive_int("layers", layers)
        if lifting_width is not None:
            lifting_width = positive_int("lifting_width", lifting_width)
        projection_width = positive_int("projection_width", projection_width)
        if isinstance(padding, bool) or not isinstance(padding, (int, float)):
            raise TypeError(f"padding must be an int or a float, got {padding!r}")
        if isinstance(padding, int) and padding < 0:
            raise ValueError(f"padding (points) must be >= 0, got {padding}")
        if isinstance(padding, float) and not 0.0 <= padding < 1.0:
            raise ValueError(
                f"padding as a float is a fraction of each axis in [0, 1), got {padding}; "
                "pass an int for a number of points"
            )
        for flag, value in (("positional", positional), ("periodic", periodic)):
            if not isinstance(value, bool):
                raise TypeError(f"{flag} must be a bool, got {value!r}")
        self.padding = padding
        self.positional = positional
        self.periodic = periodic
        self.init_args = {
            "in_channels": self.in_channels,
            "out_channels": self.out_channels,
            "dim": self.dim,
            "width": width,
            "modes": modes if isinstance(modes, int) else list(self.modes),
            "layers": layers,
            "lifting_width": lifting_width,
            "projection_width": projection_width,
            "activation": activation,
            "padding": padding,
            "positional": positional,
            "periodic": periodic,
        }
        conv = _CONV[self.dim]
        lift_in = self.in_channels + (self.dim if positional else 0)
        if lifting_width is None:
            self.lifting = conv(lift_in, width, 1)
        else:
            self.lifting = nn.Sequential(
                conv(lift_in, lifting_width, 1),
                make_activation(activation),
                conv(lifting_width, width, 1),
            )
        self.spectral = nn.ModuleList(SpectralConv(width, width, self.modes) for _ in range(layers))
        self.pointwise = nn.ModuleList(conv(width, width, 1) for _ in range(layers))
        self.act = make_activation(activation)
        self.projection = nn.Sequential(
            conv(width, projection_width, 1),
            make_activation(activation),
            conv(projection_width, self.out_channels, 1),
        )

    def _pad_amounts(self, grid: tuple[int, ...]) -> tuple[int, ...]:
        if isinstance(self.padding, float):
            return tuple(round(self.padding * n) for n in grid)
        return (self.padding,) * len(grid)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in_channels, *grid) -> (B, out_channels, *grid)``."""
        self._check(x)
        grid = tuple(x.shape[2:])
        check_modes(grid, self.modes, "FNO")
        if self.positional:
            coords = grid_coordinates(grid, periodic=self.periodic, dtype=x.dtype, device=x.device)
            x = torch.cat([x, coords.expand(x.shape[0], *coords.shape)], dim=1)
        v = self.lifting(x)
        pads = self._pad_amounts(grid)
        if any(pads):
            # F.pad lists the last axis first: (last_lo, last_hi, first_lo, first_hi)
            v = F.pad(v, [p for n in reversed(pads) for p in (0, n)])
        for i, (spec, point) in enumerate(zip(self.spectral, self.pointwise)):
            v = spec(v) + point(v)
            if i < len(self.spectral) - 1:
                v = self.act(v)
        if any(pads):
            v = v[(..., *(slice(0, n) for n in grid))]
        return self.projection(v)
