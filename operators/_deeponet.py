r"""DeepONet (Lu et al. 2021, "Learning nonlinear operators via DeepONet"), on grids.

.. math::  G(u)_c(y) = \sum_{k=1}^{p} b_{c,k}(u(s_1), \dots, u(s_S))\, t_{c,k}(y) + \beta_c

The branch MLP ``b`` sees the input sampled at a fixed sensor grid ``s`` of ``n_sensors``
points per axis (all input channels, flattened); the trunk MLP ``t`` sees the output
coordinates ``y``; ``p`` basis functions per output channel (the trunk and branch emit
``p * out_channels`` values, split per channel); ``β`` a bias per output channel. The
output is evaluated on the input's grid: ``(B, out_channels, *grid)``.

Choices the task left open:

- **Sensor resampling.** Any input grid is resampled onto the sensor grid by (bi)linear
  interpolation in the grid convention of ``_common``: with ``periodic=True`` sample ``j``
  of ``N`` sits at ``j/N`` and sensor ``i`` of ``S`` at ``i/S``, interpolating with
  wrap-around; with ``periodic=False`` both are vertex grids (``j/(N-1)``, ``i/(S-1)``;
  the same as ``F.interpolate(..., align_corners=True)``). We do not use
  ``align_corners=False``: it assumes cell-centred samples ``(j + 1/2)/N``, which the
  simsci PDE systems do not produce, and would shift the sensors by an
  ``N``-dependent fraction of a cell. With this convention the sensors read the same
  physical points at every resolution, and when ``S`` divides ``N`` (periodic) or
  ``S - 1`` divides ``N - 1`` (vertex) they read grid samples exactly.
- **Trunk input.** With ``periodic=True`` the trunk sees ``(cos 2πx, sin 2πx)`` per
  axis, so every output is periodic by construction (the periodic trunk of Lu et al. 2022,
  "A comprehensive and fair comparison of two neural operators"); otherwise the raw
  coordinate in ``[0, 1]``. The trunk's last layer is activated too (as in Lu et al.
  2021), the branch's is linear.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from simsci.operators._common import (
    Backbone,
    check_dim,
    grid_coordinates,
    make_activation,
    per_axis,
    positive_int,
)

__all__ = ["DeepONet", "resample_linear"]


def _mlp(n_in: int, width: int, depth: int, n_out: int, activation: str, last_act: bool):
    layers: list[nn.Module] = [nn.Linear(n_in, width), make_activation(activation)]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), make_activation(activation)]
    layers.append(nn.Linear(width, n_out))
    if last_act:
        layers.append(make_activation(activation))
    return nn.Sequential(*layers)


def resample_linear(x: Tensor, size: Sequence[int], *, periodic: bool) -> Tensor:
    """Linear interpolation of ``x (B, C, *grid)`` onto ``size`` points per grid axis.

    Periodic: from ``j/N`` to ``i/S`` with wrap-around; otherwise vertex grids
    ``j/(N-1)`` to ``i/(S-1)`` (``S >= 2``). Separable (bilinear in 2-D); differentiable.
    """
    for axis, s in enumerate(size):
        ax = 2 + axis
        n = x.shape[ax]
        if n == s:
            continue
        i = torch.arange(s, device=x.device)
        if periodic:
            # position i/s in units of the input spacing: i*n/s, exact in integers
            num, den = i * n, s
        else:
            num, den = i * (n - 1), max(s - 1, 1)
        lo = torch.div(num, den, rounding_mode="floor")
        frac = ((num - lo * den).to(x.dtype) / den).reshape((s,) + (1,) * (x.ndim - ax - 1))
        hi = (lo + 1) % n if periodic else torch.clamp(lo + 1, max=n - 1)
        x = torch.lerp(x.index_select(ax, lo), x.index_select(ax, hi), frac)
    return x


class DeepONet(Backbone):
    """DeepONet ``(B, in_channels, *grid) -> (B, out_channels, *grid)`` (module docstring).

    Args:
        in_channels, out_channels: field channels.
        dim: 1 or 2 grid axes.
        n_sensors: sensor points per axis (int or per-axis list; >= 2 if not periodic).
        width: hidden width of the branch and trunk MLPs.
        depth: hidden layers of each MLP.
        p: basis functions per output channel.
        activation: ``gelu`` (default), ``relu``, ``silu`` or ``tanh``.
        periodic: grid convention (``j/N`` periodic or ``j/(N-1)`` vertex grid).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        dim: int = 1,
        n_sensors: int | Sequence[int] = 32,
        width: int = 128,
        depth: int = 3,
        p: int = 64,
        activation: str = "gelu",
        periodic: bool = True,
    ):
        super().__init__()
        self.in_channels = positive_int("in_channels", in_channels)
        self.out_channels = positive_int("out_channels", out_channels)
        self.dim = check_dim(dim)
        if not isinstance(periodic, bool):
            raise TypeError(f"periodic must be a bool, got {periodic!r}")
        self.periodic = periodic
        self.n_sensors = per_axis("n_sensors", n_sensors, self.dim, minimum=1 if periodic else 2)
        width = positive_int("width", width)
        depth = positive_int("depth", depth)
        self.p = positive_int("p", p)
        self.init_args = {
            "in_channels": self.in_channels,
            "out_channels": self.out_channels,
            "dim": self.dim,
            "n_sensors": n_sensors if isinstance(n_sensors, int) else list(self.n_sensors),
            "width": width,
            "depth": depth,
            "p": self.p,
            "activation": activation,
            "periodic": periodic,
        }
        n_branch = self.in_channels * math.prod(self.n_sensors)
        n_basis = self.p * self.out_channels
        self.branch = _mlp(n_branch, width, depth, n_basis, activation, last_act=False)
        n_trunk = 2 * self.dim if periodic else self.dim
        self.trunk = _mlp(n_trunk, width, depth, n_basis, activation, last_act=True)
        self.bias = nn.Parameter(torch.zeros(self.out_channels))

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in_channels, *grid) -> (B, out_channels, *grid)``."""
        self._check(x)
        grid = tuple(x.shape[2:])
        if not self.periodic and min(grid) < 2:
            raise ValueError(
                f"DeepONet(periodic=False) needs >= 2 points per axis (a vertex grid "
                f"spans [0, 1]), got grid {grid}"
            )
        b = x.shape[0]
        sensors = resample_linear(x, self.n_sensors, periodic=self.periodic)
        coef = self.branch(sensors.reshape(b, -1)).reshape(b, self.out_channels, self.p)
        coords = grid_coordinates(grid, periodic=self.periodic, dtype=x.dtype, device=x.device)
        coords = coords.reshape(self.dim, -1).T  # (G, dim)
        if self.periodic:
            angle = (2 * math.pi) * coords
            coords = torch.cat([torch.cos(angle), torch.sin(angle)], dim=1)
        basis = self.trunk(coords)  # (G, p * out)
        basis = basis.reshape(-1, self.out_channels, self.p)
        out = torch.einsum("bcp,gcp->bcg", coef, basis) + self.bias[:, None]
        return out.reshape(b, self.out_channels, *grid)
