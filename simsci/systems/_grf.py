r"""Random initial fields on periodic boxes (1D, 2D, any dimension), shared by all PDEs.

Two samplers, both seeded through a :class:`torch.Generator`, drawn in float64 on the
generator's device (CPU by default, so a seed gives the same fields on every machine)
and then moved to ``device``/``dtype``:

- :func:`gaussian_random_field`: mean-zero Gaussian random fields with covariance
  :math:`\sigma^2(-\Delta + \tau^2 I)^{-\alpha}` on the periodic box
  :math:`[0, L_1) \times \dots \times [0, L_d)`, the parametrisation of the FNO paper
  (Li et al. 2021, "Fourier neural operator for parametric PDEs", ICLR: Burgers
  :math:`\mathcal N(0, 625(-\Delta + 25 I)^{-2})`, Darcy :math:`(-\Delta + 9I)^{-2}`,
  Navier-Stokes :math:`7^{3/2}(-\Delta + 49 I)^{-2.5}`). Smoothness grows with
  ``alpha`` (samples lie in :math:`H^s` for :math:`s < \alpha - d/2`), ``tau`` sets the
  inverse correlation length. ``sigma`` defaults to FNO's
  :math:`\tau^{(2\alpha - d)/2}`; ``std`` instead rescales so that the expected
  pointwise standard deviation is exactly ``std`` (convenient on large boxes such as
  Kuramoto-Sivashinsky's :math:`[0, 32\pi)`).
- :func:`sum_of_sines`: PDEBench-style initial conditions (Takamoto et al. 2022,
  "PDEBench", NeurIPS Datasets and Benchmarks),
  :math:`u(x) = \sum_{i=1}^{W} A_i \sin(k_i \cdot x + \phi_i)` with
  :math:`k_i = 2\pi n_i / L`, integer :math:`n_i \in \{1..n_{max}\}` per axis,
  :math:`A_i \sim U(0, 1)`, :math:`\phi_i \sim U(0, 2\pi)`. (PDEBench additionally
  applies random absolute values and window functions to some samples; not done here.)

Design choice: the GRF is drawn as white noise in physical space, transformed with a
real FFT, coloured by the square root of the covariance spectrum and transformed back.
This gives the exact Hermitian symmetry (self-conjugate modes real, correct variance on
every mode) in any dimension without special-casing the Nyquist planes. The discrete
field is the truncation of the continuum field to the grid's Fourier modes with
:math:`e_k = e^{i k\cdot x}/\sqrt{|D|}` the orthonormal basis of :math:`L^2(D)`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["gaussian_random_field", "sum_of_sines", "grf_spectrum"]


def _as_tuple(value, name: str, ndim: int | None = None, integer: bool = False) -> tuple:
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        items = (value,) if ndim is None else (value,) * ndim
    elif isinstance(value, Sequence) or isinstance(value, np.ndarray):
        items = tuple(value)
    else:
        raise TypeError(f"{name} must be a number or a sequence of numbers, got {value!r}")
    if ndim is not None and len(items) != ndim:
        raise ValueError(f"{name} must have {ndim} entries (one per axis), got {items!r}")
    out = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, float, np.number)):
            raise TypeError(f"{name} entries must be numbers, got {item!r}")
        if integer:
            if int(item) != item or item < 1:
                raise ValueError(f"{name} entries must be positive integers, got {items!r}")
            out.append(int(item))
        else:
            if not (math.isfinite(float(item)) and item > 0):
                raise ValueError(f"{name} entries must be finite and > 0, got {items!r}")
            out.append(float(item))
    return tuple(out)


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer (number of fields), got {n!r}")
    return int(n)


def _wavenumber_squared(resolution, domain, device) -> torch.Tensor:
    """|k|^2 on the rfftn half-spectrum, shape ``(*resolution[:-1], N_last // 2 + 1)``."""
    d = len(resolution)
    total = None
    for axis, (N, L) in enumerate(zip(resolution, domain)):
        if axis == d - 1:
            n = torch.fft.rfftfreq(N, d=1.0 / N, dtype=torch.float64, device=device)
        else:
            n = torch.fft.fftfreq(N, d=1.0 / N, dtype=torch.float64, device=device)
        k2 = (2.0 * math.pi * n / L) ** 2
        shape = [1] * d
        shape[axis] = -1
        k2 = k2.reshape(shape)
        total = k2 if total is None else total + k2
    return total


def grf_spectrum(
    resolution,
    domain=1.0,
    *,
    alpha: float = 2.0,
    tau: float = 3.0,
    sigma: float | None = None,
    std: float | None = None,
    device=None,
) -> torch.Tensor:
    """Square root of the covariance eigenvalues per Fourier coefficient.

    Returns ``s`` of shape ``(*resolution[:-1], N_last // 2 + 1)`` (float64) such that
    the field is :math:`u(x) = \\sum_k s_k \\xi_k e^{i k\\cdot x}` with unit complex
    Gaussians :math:`\\xi_k` (mean zero: ``s_0 = 0``).
    """
    resolution = _as_tuple(resolution, "resolution", integer=True)
    d = len(resolution)
    domain = _as_tuple(domain, "domain", ndim=d)
    for name, value in (("alpha", alpha), ("tau", tau)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
            raise TypeError(f"{name} must be a number, got {value!r}")
    if not (math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be finite and > 0, got {alpha!r}")
    if not (math.isfinite(tau) and tau >= 0):
        raise ValueError(f"tau must be finite and >= 0, got {tau!r}")
    if sigma is not None and std is not None:
        raise ValueError("give sigma (covariance scale) or std (pointwise std), not both")
    volume = math.prod(domain)
    k2 = _wavenumber_squared(resolution, domain, device)
    zero = k2 == 0
    # (|k|^2 + tau^2)^(-alpha/2); the zero mode is removed (mean-zero fields), which
    # also keeps tau = 0 finite.
    s = torch.where(zero, torch.ones_like(k2), k2 + tau * tau) ** (-0.5 * alpha)
    s = torch.where(zero, torch.zeros_like(s), s)
    if std is not None:
        if not (math.isfinite(std) and std > 0):
            raise ValueError(f"std must be finite and > 0, got {std!r}")
        # expected pointwise variance = sum over the full spectrum of s_k^2; the rfft
        # half counts every mode with 0 < k_last < N_last/2 twice.
        N_last = resolution[-1]
        weight = torch.full_like(s, 2.0)
        weight[..., 0] = 1.0
        if N_last % 2 == 0:
            weight[..., -1] = 1.0
        variance = float((weight * s * s).sum())
        if variance <= 0:
            raise ValueError(f"resolution {resolution} has no non-constant Fourier mode")
        return s * (std / math.sqrt(variance))
    if sigma is None:
        sigma = tau ** (0.5 * (2.0 * alpha - d)) if tau > 0 else 1.0
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be finite and > 0, got {sigma!r}")
    return s * (sigma / math.sqrt(volume))


def gaussian_random_field(
    n: int,
    resolution,
    domain=1.0,
    *,
    alpha: float = 2.0,
    tau: float = 3.0,
    sigma: float | None = None,
    std: float | None = None,
    generator: torch.Generator | None = None,
    device=None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    r"""``n`` mean-zero periodic Gaussian random fields, shape ``(n, *resolution)``.

    Covariance :math:`\sigma^2(-\Delta + \tau^2 I)^{-\alpha}` on the box with side
    lengths ``domain`` (a number or one per axis); ``resolution`` an int (1D) or one
    int per axis (grid points, ``x_j = j L / N``). ``std`` (instead of ``sigma``) fixes
    the expected pointwise standard deviation. Random numbers come from ``generator``
    (the global CPU generator when None) on its device, in float64.
    """
    n = _check_n(n)
    resolution = _as_tuple(resolution, "resolution", integer=True)
    d = len(resolution)
    gen_device = generator.device if generator is not None else torch.device("cpu")
    s = grf_spectrum(
        resolution, domain, alpha=alpha, tau=tau, sigma=sigma, std=std, device=gen_device
    )
    noise = torch.randn(
        (n, *resolution), generator=generator, device=gen_device, dtype=torch.float64
    )
    dims = tuple(range(1, d + 1))
    total = math.prod(resolution)
    # white noise has E|w_hat_k|^2 = N; scaling by s_k and sqrt(N) gives coefficients
    # of variance s_k^2 in u = sum_k c_k e^{ikx} (irfftn divides by N).
    field = torch.fft.irfftn(torch.fft.rfftn(noise, dim=dims) * s, s=resolution, dim=dims)
    field = field * math.sqrt(total)
    return field.to(device=device, dtype=dtype)


def sum_of_sines(
    n: int,
    resolution,
    domain=1.0,
    *,
    waves: int = 2,
    n_max: int = 8,
    amplitude: float = 1.0,
    generator: torch.Generator | None = None,
    device=None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    r"""``n`` PDEBench-style fields :math:`\sum_{i=1}^{W} A_i \sin(k_i\cdot x + \phi_i)`.

    ``waves`` = W terms, integer wave numbers uniform in ``1..n_max`` per axis
    (:math:`k_i = 2\pi n_i / L`), :math:`A_i \sim U(0, \mathrm{amplitude})`,
    :math:`\phi_i \sim U(0, 2\pi)`. Shape ``(n, *resolution)``; periodic by construction.
    """
    n = _check_n(n)
    resolution = _as_tuple(resolution, "resolution", integer=True)
    d = len(resolution)
    domain = _as_tuple(domain, "domain", ndim=d)
    for name, value in (("waves", waves), ("n_max", n_max)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not (math.isfinite(amplitude) and amplitude > 0):
        raise ValueError(f"amplitude must be finite and > 0, got {amplitude!r}")
    gen_device = generator.device if generator is not None else torch.device("cpu")
    kw = {"generator": generator, "device": gen_device}
    modes = torch.randint(1, int(n_max) + 1, (n, waves, d), **kw).to(torch.float64)
    amp = amplitude * torch.rand((n, waves), dtype=torch.float64, **kw)
    phase = 2.0 * math.pi * torch.rand((n, waves), dtype=torch.float64, **kw)
    arg = phase.reshape(n, waves, *([1] * d)).clone()
    for axis, (N, L) in enumerate(zip(resolution, domain)):
        x = torch.arange(N, dtype=torch.float64, device=gen_device) * (L / N)
        k = 2.0 * math.pi * modes[:, :, axis] / L
        shape = [1] * d
        shape[axis] = N
        arg = arg + k.reshape(n, waves, *([1] * d)) * x.reshape(shape)
    field = (amp.reshape(n, waves, *([1] * d)) * torch.sin(arg)).sum(dim=1)
    return field.to(device=device, dtype=dtype)
