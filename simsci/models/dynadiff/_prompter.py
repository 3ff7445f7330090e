"""The dynamics-informed prompter: physical and spectral features of a short context.

DynaDiff generates the weights of a dynamics predictor for a new environment (new
parameters of an ODE/PDE) by diffusion in weight space, conditioned on a *prompt* read
from a few short observation sequences of that environment. This module turns such a
context into that prompt: :func:`context_features` computes a fixed-length vector of
hand-built features and :class:`Prompter` normalises it and maps it through an MLP.

Contexts have shape ``(B, M, K, *state_shape)``: B environments, M >= 1 short episodes
each, K regularly spaced time points ``dt`` apart. ``state_shape`` is ``(D,)`` for ODE
states or ``(H, W, C)`` for 2-D periodic fields. ``(B, K, *state_shape)`` means M = 1:
the caller passes ``state_shape``, so the number of dimensions decides
(``ndim == len(state_shape) + 3`` has an episode axis, ``+ 2`` has none).

The features, in this order (:func:`feature_names` lists them):

- **statistics**: per channel mean, std, min, max (over time, and space for fields);
- **weak derivatives**: per channel mean ``|g|`` and std of ``g_j = -∫ φ_j' x dt``, the
  derivative averaged against each test function ``φ_j`` (below; ``∫ φ_j dt = 1``);
- **estimated rates**: the weak-form regression ``dx/dt = Θ(x) ξ`` fitted jointly over
  the M episodes, with the library ``Θ = [1, x_i, x_i x_j (i <= j)]`` (states) or, per
  field channel c, ``[1, u_d, u_d u_e (d <= e), Δu_c]`` with ``Δ`` the periodic 5-point
  Laplacian in grid units. ``ξ`` is reported in the monomial basis of the raw state: for
  Lotka-Volterra ``dx/dt = αx - βxy`` they *are* the rates α, β (and γ, δ), for a
  reaction-diffusion field the Laplacian coefficient is ``D_c / dx²``;
- **energy**: mean ``||x||²`` and mean ``||g||²`` (per grid point for fields, summed over
  channels);
- **spectral**: magnitudes of the rFFT over time of each channel's de-meaned signal (the
  spatial mean for fields), bins 1..n_freq (the signal is zero-padded to ``2 n_freq``
  points when K is short), normalised by their sum (zeros for a signal constant up to
  rounding); for fields also the radially averaged log spatial power spectrum (integer
  wavenumber rings 1..n_freq) of each channel in the first and the last frame.

F = :func:`feature_dim`: ``6D + D L + 2 + D n_freq`` with ``L = 1 + D + D(D+1)/2`` for
states (cubic in D: 42 for D = 2, 177 for D = 5), ``6C + C(L + 1) + 2 + 3C n_freq`` for
fields. The rates are fitted once per environment from all M episodes; every other
feature is computed per episode and averaged over the M episodes.

**The weak form.** Multiply ``dx/dt = Θ(x) ξ`` by a smooth test function ``φ_j`` that
vanishes at both ends of its window and integrate by parts:

    -∫ φ_j'(t) x(t) dt = ∫ φ_j(t) Θ(x(t)) dt ξ        (one row per j and channel)

No derivative of the data is taken, and the integrals average out noise. The test
functions are bumps ``φ(t) ∝ (s(1 - s))^TEST_ORDER``, ``s = (t - a) / w``, for each width
``w`` in ``TEST_WIDTHS`` (fractions of the window, rounded to whole frames) at every start
frame ``a``: for K = 10, one over the whole window and five over half of it. The rows of
all M episodes of an environment are stacked into one least-squares problem, so the
rates are shared across episodes.

Why jointly: one short arc does not determine a quadratic library. Ten frames of one
orbit lie close to a conic ``q(x) = 0``, and ``ξ + c q`` fits as well as ``ξ`` for any c;
a fit per episode returns an arbitrary member of that family (on the Lotka-Volterra
protocol's training contexts, dt = 0.5 and K = 10, single-episode weak-form rates have
median errors of 2-92% and a 90th percentile up to 36x). Episodes from other initial
states lie on other conics and remove the family: four episodes jointly give α, β, γ, δ
to a median 0.1-0.4% (90th percentile 1-8%); the former pointwise fourth-order
differences, fitted per episode and averaged over four, gave medians of 3-360%.

Why sub-frame quadrature: the integrals are taken on a fine grid, ``SUBSTEPS`` points per
frame interval, after a not-a-knot cubic spline through the frames; the trapezoid rule
there is accurate to high order because ``φ`` vanishes to order TEST_ORDER at its ends
(Euler-Maclaurin). Trapezoid on the frames alone is not enough at coarse frames: on the
Lotka-Volterra protocol (prey falls by up to 6x per frame) it biases β by a median 25%
even on the true two-term model, the spline by 0.7%. A state channel positive in every
frame of the environment (populations, concentrations) is interpolated in log space,
where exponential growth and decay are smooth (on the true two-term model, β's
90th-percentile error 15% -> 6%).

Fields: the weak form is taken in time only, at each grid point of a fixed pseudo-random
subset (at most ``MAX_FIT_POINTS`` rows per episode), and the spline is linear in u (no
log space) so that it commutes with the Laplacian, which is taken on the frames. In
space the 5-point stencil is already the discrete operator of the grid the fields live
on; it is the time axis that is sampled coarsely (Gray-Scott frames are 20 time units
apart), so that is where integration by parts pays.

Design choices the task left open:

- The fit stays well conditioned: the library is built on standardised inputs
  ``z = (x - mean) / std`` (one mean and std per environment, over the fine grid of all
  its episodes), its columns are equilibrated, the ridge is ``RIDGE = 1e-8`` times the
  squared column norm times the number of rows (so M copies of one episode give that
  episode's rates exactly), and the coefficients are mapped back exactly to the raw
  monomial basis (a quadratic polynomial in ``z`` is one in ``x``). The ridge is small
  because the library of a few short orbits is still nearly collinear: a ridge of 1e-6
  already biases the rates by ~10%. It is solved as a least-squares problem on the
  ridge-augmented matrix (QR, LAPACK ``gels``: not normal equations, so it stays
  accurate in float32, and deterministic on CPU and CUDA).
- With M = 1 (or any context whose orbits do not pin the library) the fit returns some
  member of a nearly flat family: those features are noisy but finite, and
  :class:`Prompter` clamps normalised features to ±CLIP. Pass more episodes (M) where
  the rates matter.
- Features are constants of the data: they are computed without autograd, in the
  context's dtype (float16/bfloat16 are computed in float32 and cast back) and on its
  device. :class:`Prompter` casts them to its own parameters' dtype.
- Spectral floors do not depend on dtype: an empty or zero-power ring gets
  ``log(1e-10 * variance + 1e-30)``.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Sequence

import torch
from torch import nn

#: fewest time points per episode: a not-a-knot cubic spline, test functions on windows of
#: three frames or more, and a temporal spectrum of at least three non-constant bins
MIN_CONTEXT_STEPS = 7
#: most space-time points of one field episode that enter the rate fit
MAX_FIT_POINTS = 8192
#: ridge strength relative to the squared (equilibrated) column norm; small because a
#: short orbit lies close to a conic, so the quadratic library is nearly collinear
RIDGE = 1e-8
#: normalised features are clamped to +-CLIP before the MLP
CLIP = 10.0
#: fine-grid points per frame interval on which the weak-form integrals are taken
SUBSTEPS = 8
#: test functions are (s(1 - s))^TEST_ORDER bumps: smooth, zero to this order at the ends
TEST_ORDER = 4
#: widths of the test functions, as fractions of the context window (all translates)
TEST_WIDTHS = (1.0, 0.5)


# ----------------------------------------------------------------------------- checks
def _check_state_shape(state_shape) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in state_shape)
    except TypeError:
        raise TypeError(
            f"state_shape must be a sequence of ints, (D,) for ODE states or (H, W, C) for "
            f"2-D periodic fields; got {state_shape!r}"
        ) from None
    if len(shape) not in (1, 3) or any(s < 1 for s in shape):
        raise ValueError(
            "state_shape must be (D,) for ODE states or (H, W, C) for 2-D periodic fields, "
            f"all positive; got {tuple(state_shape)}"
        )
    if len(shape) == 3 and min(shape[:2]) < 3:
        raise ValueError(
            f"a field's grid must be at least 3 x 3 for the 5-point Laplacian; got state_shape "
            f"{shape} (H, W, C)"
        )
    return shape


def _check_n_freq(n_freq) -> int:
    if isinstance(n_freq, bool) or not isinstance(n_freq, int) or n_freq < 1:
        raise ValueError(f"n_freq must be an int >= 1, got {n_freq!r}")
    return n_freq


def _check_dt(dt) -> float:
    if isinstance(dt, torch.Tensor) and dt.numel() == 1:
        dt = dt.item()
    if isinstance(dt, bool) or not isinstance(dt, numbers.Real):
        raise TypeError(f"dt must be a positive real number (the context's time step), got {dt!r}")
    dt = float(dt)
    if not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be a positive finite time step, got {dt}")
    return dt


def _split_context(context, state_shape: tuple[int, ...]) -> tuple[torch.Tensor, int, int]:
    """``context`` ``(B, M, K, *S)`` or ``(B, K, *S)`` -> ``(B*M, K, *S)``, B, M."""
    if not isinstance(context, torch.Tensor):
        raise TypeError(f"context must be a torch.Tensor, got {type(context).__name__}")
    if not context.is_floating_point():
        raise TypeError(f"context must be a floating-point tensor, got dtype {context.dtype}")
    n = len(state_shape)
    S = ", ".join(map(str, state_shape))
    if (
        context.ndim not in (n + 2, n + 3)
        or tuple(context.shape[context.ndim - n :]) != state_shape
    ):
        raise ValueError(
            f"context must have shape (B, M, K, {S}) or (B, K, {S}) for state shape "
            f"{state_shape}; got {tuple(context.shape)}. Pass contexts of the system the "
            "prompter was built for (state_shape=...)"
        )
    if context.ndim == n + 3:
        B, M, K = context.shape[:3]
    else:
        (B, K), M = context.shape[:2], 1
    if B < 1 or M < 1:
        raise ValueError(
            f"context needs B >= 1 environments and M >= 1 episodes, got shape "
            f"{tuple(context.shape)}"
        )
    if K < MIN_CONTEXT_STEPS:
        raise ValueError(
            "context trajectory too short for the prompter: it needs at least "
            f"{MIN_CONTEXT_STEPS} time points per episode, got {K}; pass a longer context"
        )
    bad = int((~torch.isfinite(context)).sum())
    if bad:
        raise ValueError(
            f"context has {bad} non-finite values (NaN or inf) out of {context.numel()}; the "
            "prompter needs finite observations: drop or repair the diverged episodes"
        )
    return context.reshape(B * M, K, *state_shape), B, M


# ------------------------------------------------------------------------ the library
def _pairs(n: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(n) for j in range(i, n)]


def _poly_library(z: torch.Tensor) -> torch.Tensor:
    """``[1, z_i, z_i z_j (i <= j)]`` of ``z`` ``(N, n, D)`` -> ``(N, n, 1 + D + D(D+1)/2)``."""
    D = z.shape[-1]
    i, j = torch.triu_indices(D, D, device=z.device)
    return torch.cat([torch.ones_like(z[..., :1]), z, z[..., i] * z[..., j]], dim=-1)


def _poly_back(mu: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``T`` ``(N, L, L)`` with ``Θ(z) = Θ(x) T`` for ``z = (x - mu) / s``, so ``ξ_x = T ξ_z``."""
    N, D = mu.shape
    L = 1 + D + D * (D + 1) // 2
    T = mu.new_zeros(N, L, L)
    T[:, 0, 0] = 1.0
    for i in range(D):
        T[:, 1 + i, 1 + i] = 1.0 / s[:, i]
        T[:, 0, 1 + i] = -mu[:, i] / s[:, i]
    for p, (i, j) in enumerate(_pairs(D)):
        col = 1 + D + p
        w = 1.0 / (s[:, i] * s[:, j])
        T[:, col, col] = w  # x_i x_j is column `col` of Θ(x) too
        T[:, 1 + i, col] -= mu[:, j] * w
        T[:, 1 + j, col] -= mu[:, i] * w
        T[:, 0, col] = mu[:, i] * mu[:, j] * w
    return T


def _ridge(A: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Ridge least squares ``min ||A ξ - y||² + λ||E ξ||²`` batched: ``A`` ``(..., n, L)``,
    ``y`` ``(..., n, T)`` -> ``ξ`` ``(..., L, T)``.

    Columns are equilibrated to unit RMS (``E``: their scales), ``λ = RIDGE * n``; solved
    by QR on the augmented matrix ``[A E⁻¹; √λ I]``.
    """
    n, L = A.shape[-2:]
    scale = A.pow(2).mean(-2).sqrt()  # (..., L)
    # a column at rounding level (relative to the largest) carries no signal: drop it
    live = scale > 100.0 * torch.finfo(A.dtype).eps * scale.amax(-1, keepdim=True)
    scale = torch.where(live, scale, torch.ones_like(scale))
    As = torch.where(live.unsqueeze(-2), A / scale.unsqueeze(-2), torch.zeros_like(A))
    eye = torch.eye(L, dtype=A.dtype, device=A.device) * math.sqrt(RIDGE * n)
    A_aug = torch.cat([As, eye.expand(*As.shape[:-2], L, L)], dim=-2)
    y_aug = torch.cat([y, y.new_zeros(*y.shape[:-2], L, y.shape[-1])], dim=-2)
    sol = torch.linalg.lstsq(A_aug, y_aug, driver="gels").solution  # full rank (ridge)
    return sol / scale.unsqueeze(-1)


def _standardise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x`` ``(N, n, D)`` -> ``z = (x - mean) / std``, mean ``(N, D)``, std ``(N, D)``.

    A channel whose std is below ``1e-6`` of the largest channel RMS is constant: its
    ``z`` is 0 (its monomials leave the fit) and its std is reported as 1.
    """
    mu = x.mean(1)
    s = x.std(1, correction=0)
    rms = x.pow(2).mean(1).sqrt().amax(-1, keepdim=True)
    live = s > 1e-6 * rms + 1e-30
    s = torch.where(live, s, torch.ones_like(s))
    z = torch.where(live[:, None], (x - mu[:, None]) / s[:, None], torch.zeros_like(x))
    return z, mu, s


def _laplacian(u: torch.Tensor) -> torch.Tensor:
    """Periodic 5-point Laplacian in grid units over dims (-3, -2) of ``(..., H, W, C)``."""
    return u.roll(1, -3) + u.roll(-1, -3) + u.roll(1, -2) + u.roll(-1, -2) - 4.0 * u


# ----------------------------------------------------------------------- the weak form
@functools.lru_cache(maxsize=32)
def _spline_matrix(K: int) -> torch.Tensor:
    """``(SUBSTEPS (K-1) + 1, K)`` float64: the not-a-knot cubic spline through K frames
    (unit spacing) at SUBSTEPS points per interval, as a linear map of the frames.

    With ``m`` the second derivatives at the frames, ``m[i-1] + 4m[i] + m[i+1] =
    6(y[i-1] - 2y[i] + y[i+1])`` inside, and not-a-knot ends ``m[0] - 2m[1] + m[2] = 0``
    (and mirrored); on ``[i, i+1]`` at ``s``: ``(1-s) y[i] + s y[i+1] +
    ((1-s)³ - (1-s)) m[i] / 6 + (s³ - s) m[i+1] / 6``.
    """
    lhs = torch.zeros(K, K, dtype=torch.float64)
    rhs = torch.zeros(K, K, dtype=torch.float64)
    stencil = torch.tensor([1.0, -2.0, 1.0], dtype=torch.float64)
    for i in range(1, K - 1):
        lhs[i, i - 1 : i + 2] = torch.tensor([1.0, 4.0, 1.0], dtype=torch.float64)
        rhs[i, i - 1 : i + 2] = 6.0 * stencil
    lhs[0, :3], lhs[-1, -3:] = stencil, stencil
    curv = torch.linalg.solve(lhs, rhs)  # (K, K): second derivatives from the frames
    n = SUBSTEPS * (K - 1) + 1
    t = torch.arange(n, dtype=torch.float64) / SUBSTEPS
    i = t.floor().long().clamp(max=K - 2)
    s = (t - i)[:, None]
    rows = torch.arange(n)
    S = ((1 - s) ** 3 - (1 - s)) / 6.0 * curv[i] + (s**3 - s) / 6.0 * curv[i + 1]
    S[rows, i] += 1 - s[:, 0]
    S[rows, i + 1] += s[:, 0]
    return S


@functools.lru_cache(maxsize=32)
def _test_functions(K: int, dt: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Quadrature weights of the test functions on the fine grid: ``phi`` and ``-phi'``,
    each ``(J, SUBSTEPS (K-1) + 1)`` float64.

    One bump ``φ(t) = c (s(1-s))^TEST_ORDER``, ``s = (t - a) / w`` on ``[a, a + w]``, per
    width ``w`` in ``TEST_WIDTHS`` (fractions of the window, whole frames) and per start
    frame; ``c`` makes ``∫φ dt = 1``, so a row reads "a smoothed derivative = a smoothed
    library". ``φ`` vanishes to order TEST_ORDER at both ends: no boundary terms, and the
    trapezoid rule on the fine grid is accurate to high order (Euler-Maclaurin).
    """
    n = SUBSTEPS * (K - 1) + 1
    phis, dphis = [], []
    for w in sorted({max(2, round(f * (K - 1))) for f in TEST_WIDTHS}, reverse=True):
        s = torch.arange(w * SUBSTEPS + 1, dtype=torch.float64) / (w * SUBSTEPS)
        bump = (s * (1 - s)) ** TEST_ORDER
        dbump = TEST_ORDER * (s * (1 - s)) ** (TEST_ORDER - 1) * (1 - 2 * s) / (w * dt)
        for a in range(K - w):
            lo, hi = a * SUBSTEPS, (a + w) * SUBSTEPS + 1
            phi, dphi = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
            phi[lo:hi] = bump / bump.sum()  # trapezoid weight h cancels in c
            dphi[lo:hi] = -dbump / bump.sum()
            phis.append(phi)
            dphis.append(dphi)
    return torch.stack(phis), torch.stack(dphis)


def _interpolate_states(x: torch.Tensor, B: int, M: int) -> torch.Tensor:
    """Frames ``(B*M, K, D)`` -> their spline on the fine grid ``(B*M, n, D)``.

    A channel positive in every frame of the environment's M episodes (a population, a
    concentration) is interpolated in log space: its growth and decay are exponential,
    which a cubic in x misses at coarse frames (on Lotka-Volterra at dt = 0.5 prey falls
    by up to 6x per frame) and a cubic in log x follows. Decided per environment, so M
    copies of one episode interpolate as that episode does.
    """
    D = x.shape[-1]
    spline = _spline_matrix(x.shape[1]).to(x)
    fine = torch.einsum("fk,nkd->nfd", spline, x)
    positive = (x.reshape(B, -1, D).amin(1) > 0).repeat_interleave(M, 0)[:, None]  # (N, 1, D)
    logs = torch.where(positive, x, torch.ones_like(x)).log()
    return torch.where(positive, torch.einsum("fk,nkd->nfd", spline, logs).exp(), fine)


def _state_rates(
    fine: torch.Tensor, dxdt: torch.Tensor, phi: torch.Tensor, B: int, M: int
) -> torch.Tensor:
    """Joint weak-form fit of the M episodes of each environment.

    ``fine`` ``(B*M, n, D)`` states on the fine grid, ``dxdt`` ``(B*M, J, D)`` their weak
    derivatives ``-∫φ_j' x dt``, ``phi`` ``(J, n)`` -> ``ξ`` ``(B, D L)`` in the raw
    monomial basis, target-major (the order of :func:`feature_names`).
    """
    N, n, D = fine.shape
    z, mu, s = _standardise(fine.reshape(B, M * n, D))  # one standardisation per environment
    theta = torch.einsum("jf,nfl->njl", phi, _poly_library(z.reshape(N, n, D)))
    rows = theta.reshape(B, -1, theta.shape[-1])  # (B, M J, L): every episode's rows
    xi = _poly_back(mu, s) @ _ridge(rows, dxdt.reshape(B, -1, D))  # (B, L, D)
    return xi.transpose(1, 2).reshape(B, -1)


def _field_rates(
    x: torch.Tensor, phi: torch.Tensor, dphi: torch.Tensor, B: int, M: int
) -> torch.Tensor:
    """Joint weak-form fit for fields: frames ``x`` ``(B*M, K, H, W, C)`` -> ``(B, C (L + 1))``.

    Weak in time at each grid point of a fixed pseudo-random subset (at most
    ``MAX_FIT_POINTS`` rows per episode); the interpolation is linear in ``u`` so that the
    Laplacian column, taken on the frames, commutes with it.
    """
    N, K, H, W, C = x.shape
    J = phi.shape[0]
    spline = _spline_matrix(K).to(x)
    n_points = min(H * W, max(1, MAX_FIT_POINTS // J))
    idx = torch.arange(H * W)
    if n_points < H * W:
        idx = torch.randperm(H * W, generator=torch.Generator().manual_seed(0))[:n_points]
    idx = idx.to(x.device)
    u = x.reshape(N, K, H * W, C)[:, :, idx]  # (N, K, P, C)
    lap = _laplacian(x).reshape(N, K, H * W, C)[:, :, idx]
    z, mu, s = _standardise(torch.einsum("fk,nkpc->nfpc", spline, u).reshape(B, -1, C))
    theta = _poly_library(z.reshape(N, -1, n_points, C))  # (N, n, P, L)
    lib = torch.einsum("jf,nfpl->njpl", phi, theta).reshape(B, M * J * n_points, -1)
    # ∫φ lap(z_c) = (phi S) lap(u_c) / s_c: a linear spline commutes with the Laplacian
    s_ep = s.repeat_interleave(M, 0)[:, None, None]
    lap_rows = torch.einsum("jk,nkpc->njpc", phi @ spline, lap) / s_ep
    target = torch.einsum("jk,nkpc->njpc", dphi @ spline, u).reshape(B, -1, C)
    A = torch.cat(
        [
            lib.unsqueeze(1).expand(B, C, *lib.shape[1:]),
            lap_rows.reshape(B, -1, C).permute(0, 2, 1).unsqueeze(-1),
        ],
        dim=-1,
    )  # (B, C, n, L + 1): target channel c's library ends with lap(z_c)
    xi = _ridge(A, target.permute(0, 2, 1).unsqueeze(-1))[..., 0]  # (B, C, L + 1)
    poly = torch.einsum("bij,bcj->bci", _poly_back(mu, s), xi[..., :-1])
    lap_coef = xi[..., -1:] / s[..., None]  # lap(z_c) = lap(u_c) / s_c
    return torch.cat([poly, lap_coef], dim=-1).reshape(B, -1)


# ----------------------------------------------------------------------------- spectra
def _temporal_spectrum(signal: torch.Tensor, ref: torch.Tensor, n_freq: int) -> torch.Tensor:
    """``signal`` ``(N, K, C)`` -> normalised rFFT magnitudes of bins 1..n_freq ``(N, C, n_freq)``.

    A signal whose std is below ``1e-5`` of the channel's RMS ``ref`` ``(N, C)`` is
    constant up to rounding and gets zeros (normalising rounding noise would make it up).
    """
    K = signal.shape[1]
    centred = signal - signal.mean(1, keepdim=True)
    live = centred.std(1, correction=0) > 1e-5 * ref + 1e-30  # (N, C)
    centred = torch.where(live[:, None], centred, torch.zeros_like(centred))
    mag = torch.fft.rfft(centred, n=max(K, 2 * n_freq), dim=1).abs()[:, 1 : n_freq + 1]
    mag = mag / (mag.sum(1, keepdim=True) + torch.finfo(mag.dtype).tiny)
    return mag.transpose(1, 2)


def _ring_matrix(H: int, W: int, n_freq: int, like: torch.Tensor) -> torch.Tensor:
    """``(n_freq, H*W)``: row r-1 averages the modes with ``round(|k|) == r`` (integer k)."""
    kx = torch.fft.fftfreq(H, d=1.0 / H, dtype=like.dtype, device=like.device)
    ky = torch.fft.fftfreq(W, d=1.0 / W, dtype=like.dtype, device=like.device)
    ring = torch.sqrt(kx[:, None] ** 2 + ky[None, :] ** 2).round().reshape(-1)
    radii = torch.arange(1, n_freq + 1, dtype=like.dtype, device=like.device)
    member = (ring[None, :] == radii[:, None]).to(like.dtype)
    return member / member.sum(1, keepdim=True).clamp_min(1.0)


def _spatial_spectrum(frame: torch.Tensor, rings: torch.Tensor) -> torch.Tensor:
    """``frame`` ``(N, H, W, C)`` -> ring-averaged log power ``(N, C, n_freq)``."""
    N, H, W, C = frame.shape
    power = torch.fft.fft2(frame, dim=(1, 2)).abs().pow(2) / float(H * W) ** 2
    ring_power = torch.einsum("rp,npc->ncr", rings, power.reshape(N, H * W, C))
    var = frame.reshape(N, H * W, C).var(1, correction=0)  # (N, C)
    return torch.log(ring_power + 1e-10 * var[..., None] + 1e-30)


# ---------------------------------------------------------------------------- features
def feature_dim(state_shape: Sequence[int], n_freq: int = 8) -> int:
    """Length F of the feature vector of :func:`context_features`."""
    return len(feature_names(state_shape, n_freq=n_freq))


def feature_names(state_shape: Sequence[int], n_freq: int = 8) -> list[str]:
    """Names of the F features, in order; channels are ``x0..`` (states) or ``u0..``
    (fields); rate coefficients read ``rate[dx0/dt : x0*x1]``, ``rate[du0/dt : lap(u0)]``."""
    shape = _check_state_shape(state_shape)
    n_freq = _check_n_freq(n_freq)
    field = len(shape) == 3
    C = shape[-1]
    ch = [f"{'u' if field else 'x'}{c}" for c in range(C)]
    names = [f"{stat}[{c}]" for stat in ("mean", "std", "min", "max") for c in ch]
    names += [f"{stat}[d{c}/dt]" for stat in ("mean_abs", "std") for c in ch]
    terms = ["1", *ch, *(f"{ch[i]}*{ch[j]}" for i, j in _pairs(C))]
    for c in ch:
        own = [*terms, f"lap({c})"] if field else terms
        names += [f"rate[d{c}/dt : {term}]" for term in own]
    names += ["mean_sq[x]", "mean_sq[dx/dt]"]
    names += [f"time_fft[{c}][{k}]" for c in ch for k in range(1, n_freq + 1)]
    if field:
        for which in ("first", "last"):
            names += [f"space_logpow_{which}[{c}][{r}]" for c in ch for r in range(1, n_freq + 1)]
    return names


@torch.no_grad()
def context_features(
    context: torch.Tensor, dt: float, state_shape: Sequence[int], *, n_freq: int = 8
) -> torch.Tensor:
    """Physical and spectral features ``(B, F)`` of a context.

    ``context`` ``(B, M, K, *state_shape)`` or ``(B, K, *state_shape)`` (M = 1), K >=
    :data:`MIN_CONTEXT_STEPS` points ``dt`` apart; ``state_shape`` ``(D,)`` or
    ``(H, W, C)``. F = :func:`feature_dim` ``(state_shape, n_freq)``; the module docstring
    lists the features (rates fitted jointly over the M episodes, the rest averaged over
    them), :func:`feature_names` names them. Computed without autograd, in the context's
    dtype and on its device.
    """
    shape = _check_state_shape(state_shape)
    n_freq = _check_n_freq(n_freq)
    dt = _check_dt(dt)
    x, B, M = _split_context(context, shape)
    out_dtype = x.dtype
    if x.dtype not in (torch.float32, torch.float64):
        x = x.to(torch.float32)
    field = len(shape) == 3
    N, K = x.shape[:2]
    C = shape[-1]

    phi, dphi = (w.to(x) for w in _test_functions(K, dt))  # (J, n) each
    if field:
        weak = torch.einsum("jk,nk...->nj...", dphi @ _spline_matrix(K).to(x), x)
        rates = _field_rates(x, phi, dphi, B, M)
    else:
        fine = _interpolate_states(x, B, M)
        weak = torch.einsum("jf,nfd->njd", dphi, fine)  # (N, J, D)
        rates = _state_rates(fine, weak, phi, B, M)

    flat = x.reshape(N, -1, C)
    dflat = weak.reshape(N, -1, C)
    head = [
        flat.mean(1),
        flat.std(1, correction=0),
        flat.amin(1),
        flat.amax(1),
        dflat.abs().mean(1),
        dflat.std(1, correction=0),
    ]
    tail = [flat.pow(2).sum(-1).mean(1, keepdim=True), dflat.pow(2).sum(-1).mean(1, keepdim=True)]
    signal = x.mean(dim=(2, 3)) if field else x  # (N, K, C)
    ref = flat.pow(2).mean(1).sqrt()
    tail.append(_temporal_spectrum(signal, ref, n_freq).reshape(N, -1))
    if field:
        rings = _ring_matrix(shape[0], shape[1], n_freq, x)
        for frame in (x[:, 0], x[:, -1]):
            tail.append(_spatial_spectrum(frame, rings).reshape(N, -1))

    def episode_mean(parts):
        return torch.cat(parts, dim=-1).reshape(B, M, -1).mean(1)

    feats = torch.cat([episode_mean(head), rates, episode_mean(tail)], dim=-1)
    return feats.to(out_dtype)


# ---------------------------------------------------------------------------- prompter
class Prompter(nn.Module):
    """Context ``(B, [M,] K, *state_shape)`` -> prompt ``(B, out_dim)``.

    ``prompt = MLP(clamp((f - feature_mean) / feature_std, ±CLIP))`` with
    ``f = context_features(context, dt, state_shape, n_freq=n_freq)`` and the MLP
    ``Linear-LayerNorm-SiLU-Linear-LayerNorm-SiLU-Linear``. Set the normalisation with
    :meth:`fit_normalization` on the raw features of training contexts (buffers, saved in
    the state dict). Contexts must be on the prompter's time grid (spacing ``dt``).
    """

    def __init__(
        self,
        *,
        state_shape: Sequence[int],
        dt: float,
        out_dim: int = 32,
        hidden: int = 128,
        n_freq: int = 8,
    ):
        super().__init__()
        self.state_shape = _check_state_shape(state_shape)
        self.dt = _check_dt(dt)
        self.n_freq = _check_n_freq(n_freq)
        for key, value in (("out_dim", out_dim), ("hidden", hidden)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be an int >= 1, got {value!r}")
        self.out_dim, self.hidden = out_dim, hidden
        self.feature_dim = feature_dim(self.state_shape, self.n_freq)
        self.register_buffer("feature_mean", torch.zeros(self.feature_dim))
        self.register_buffer("feature_std", torch.ones(self.feature_dim))
        self.net = nn.Sequential(
            nn.Linear(self.feature_dim, hidden),
            nn.LayerNorm(hidden),
            nn.SiLU(),
            nn.Linear(hidden, hidden),
            nn.LayerNorm(hidden),
            nn.SiLU(),
            nn.Linear(hidden, out_dim),
        )
        self.init_args = {
            "state_shape": list(self.state_shape),
            "dt": self.dt,
            "out_dim": out_dim,
            "hidden": hidden,
            "n_freq": self.n_freq,
        }

    def _check_dt_matches(self, dt) -> None:
        if dt is None:
            return
        dt = _check_dt(dt)
        if abs(dt - self.dt) > 1e-6 * self.dt:
            raise ValueError(
                f"the context's time step dt={dt:g} differs from the prompter's dt={self.dt:g}; "
                "rates and spectra are read on the prompter's grid: resample the context onto "
                "it or build a Prompter with this dt"
            )

    def raw_features(self, context: torch.Tensor, *, dt: float | None = None) -> torch.Tensor:
        """Unnormalised :func:`context_features` ``(B, F)`` in the context's dtype; ``dt``
        (optional) is checked against the prompter's."""
        self._check_dt_matches(dt)
        return context_features(context, self.dt, self.state_shape, n_freq=self.n_freq)

    @torch.no_grad()
    def fit_normalization(self, features: torch.Tensor) -> Prompter:
        """Set ``feature_mean``/``feature_std`` from raw features ``(N, F)`` of training
        contexts; std floored at ``1e-3 |mean| + 1e-6``. Returns self."""
        if not isinstance(features, torch.Tensor) or features.ndim != 2:
            raise ValueError(
                f"fit_normalization takes raw features of shape (N, {self.feature_dim}) "
                "(prompter.raw_features(context)), got "
                f"{tuple(features.shape) if isinstance(features, torch.Tensor) else features!r}"
            )
        if features.shape[1] != self.feature_dim or features.shape[0] < 1:
            raise ValueError(
                f"fit_normalization takes raw features of shape (N >= 1, {self.feature_dim}) "
                f"for state shape {self.state_shape} and n_freq={self.n_freq}; got "
                f"{tuple(features.shape)}"
            )
        bad = int((~torch.isfinite(features)).sum())
        if bad:
            raise ValueError(f"features have {bad} non-finite values; fit on finite features")
        f = features.to(dtype=torch.float64)
        mean = f.mean(0)
        std = f.std(0, correction=0)
        std = torch.maximum(std, 1e-3 * mean.abs() + 1e-6)
        self.feature_mean.copy_(mean.to(self.feature_mean))
        self.feature_std.copy_(std.to(self.feature_std))
        return self

    def features(self, context: torch.Tensor, *, dt: float | None = None) -> torch.Tensor:
        """Normalised features, clamped to ±CLIP ``(B, F)``, in the prompter's dtype."""
        f = self.raw_features(context, dt=dt).to(self.feature_mean.dtype)
        return ((f - self.feature_mean) / self.feature_std).clamp(-CLIP, CLIP)

    def forward(self, context: torch.Tensor, *, dt: float | None = None) -> torch.Tensor:
        """The prompt ``(B, out_dim)``."""
        return self.net(self.features(context, dt=dt))
