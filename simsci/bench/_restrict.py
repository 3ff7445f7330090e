"""Restriction of fields between grids for the PDE benchmark: exact for band-limited
periodic fields (striding, or the trigonometric interpolant at the coarse points), and
the low-pass filter that makes the benchmark's initial fields band-limited."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["restrict_periodic"]


def _fold_axis(u: torch.Tensor, dim: int, n: int) -> torch.Tensor:
    """Values at ``n`` equispaced points of the trigonometric interpolant along ``dim``."""
    m = u.shape[dim]
    if m == n:
        return u
    if m % n == 0:
        index = torch.arange(0, m, m // n, device=u.device)
        return u.index_select(dim, index)
    coef = torch.fft.fft(u.to(torch.float64), dim=dim) / m
    freq = torch.fft.fftfreq(m, d=1.0 / m, device=u.device).round().to(torch.int64)
    shape = [1] * u.ndim
    shape[dim] = m
    weight = torch.ones(m, dtype=torch.float64, device=u.device)
    if m % 2 == 0:
        # the Nyquist mode of a real interpolant is a cosine: half at +m/2, half at -m/2
        weight[m // 2] = 0.5
    coef = coef * weight.reshape(shape)
    out_shape = list(u.shape)
    out_shape[dim] = n
    folded = torch.zeros(out_shape, dtype=coef.dtype, device=u.device)
    folded.index_add_(dim, torch.remainder(freq, n), coef)
    if m % 2 == 0:
        nyq = coef.narrow(dim, m // 2, 1)
        folded.index_add_(dim, torch.tensor([(m // 2) % n], device=u.device), nyq)
    return (torch.fft.ifft(folded, dim=dim) * n).real.to(u.dtype)


def restrict_periodic(u: torch.Tensor, resolution, dims: Sequence[int]) -> torch.Tensor:
    """Sample a periodic field at a coarser uniform grid (``x_j = j L / N``).

    ``dims``: the grid axes of ``u``; ``resolution``: the target points per axis (an int
    for all axes). Exact striding when the target divides the size; otherwise the values
    of the field's trigonometric interpolant at the target points (Fourier coefficients
    folded modulo the target size, the Nyquist mode split as a cosine), which is exact
    for any band-limited field and equals striding whenever that applies.
    """
    dims = [d % u.ndim for d in dims]
    res = (resolution,) * len(dims) if isinstance(resolution, int) else tuple(resolution)
    if len(res) != len(dims):
        raise ValueError(f"resolution {resolution!r} needs {len(dims)} entries (one per axis)")
    for dim, n in zip(dims, res):
        if n > u.shape[dim]:
            raise ValueError(
                f"cannot restrict {u.shape[dim]} points to {n}: the target must be coarser"
            )
        u = _fold_axis(u, dim, int(n))
    return u


def _band_limit(u: torch.Tensor, dims: Sequence[int], cutoff: Sequence[int]) -> torch.Tensor:
    """Exponential low-pass (order 8, 36) per axis, zero at and above ``cutoff`` modes."""
    v = torch.fft.rfftn(u, dim=dims)
    for axis, (dim, nc) in enumerate(zip(dims, cutoff)):
        m = u.shape[dim]
        if axis == len(dims) - 1:
            freq = torch.fft.rfftfreq(m, d=1.0 / m, dtype=torch.float64)
        else:
            freq = torch.fft.fftfreq(m, d=1.0 / m, dtype=torch.float64)
        ratio = freq.abs() / nc
        sigma = torch.where(ratio < 1, torch.exp(-36.0 * ratio**8), torch.zeros_like(ratio))
        shape = [1] * u.ndim
        shape[dim] = -1
        v = v * sigma.reshape(shape).to(v.device)
    return torch.fft.irfftn(v, s=[u.shape[d] for d in dims], dim=dims)
