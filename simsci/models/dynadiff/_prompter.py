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

The features of one episode, in this order (:func:`feature_names` lists them):

- **statistics**: per channel mean, std, min, max (over time, and space for fields);
- **derivatives**: fourth-order central finite differences ``dx/dt`` at the K - 4 points
  2..K-3; per channel mean ``|dx/dt|`` and std of ``dx/dt``;
- **estimated rates**: a ridge least-squares fit ``dx/dt ≈ Θ(x) ξ`` with the library
  ``Θ = [1, x_i, x_i x_j (i <= j)]`` (states) or, per field channel c,
  ``[1, u_d, u_d u_e (d <= e), Δu_c]`` with ``Δ`` the periodic 5-point Laplacian in grid
  units. The coefficients ``ξ`` are features, in the monomial basis of the raw state: for
  Lotka-Volterra ``dx/dt = αx - βxy`` they *are* the rates α, β (and γ, δ), for a
  reaction-diffusion field the Laplacian coefficient is ``D_c / dx²``;
- **energy**: mean ``||x||²`` and mean ``||dx/dt||²`` (per grid point for fields, summed
  over channels);
- **spectral**: magnitudes of the rFFT over time of each channel's de-meaned signal (the
  spatial mean for fields), bins 1..n_freq (the signal is zero-padded to ``2 n_freq``
  points when K is short), normalised by their sum (zeros for a signal constant up to
  rounding); for fields also the radially averaged log spatial power spectrum (integer
  wavenumber rings 1..n_freq) of each channel in the first and the last frame.

F = :func:`feature_dim`: ``6D + D L + 2 + D n_freq`` with ``L = 1 + D + D(D+1)/2`` for
states (cubic in D: 42 for D = 2, 177 for D = 5), ``6C + C(L + 1) + 2 + 3C n_freq`` for
fields.

Why these: the derivative-based rate estimates are the dynamics-informed part — two
environments of one system differ in their parameters, and a regression of the observed
velocity on a small library reads those parameters off even from a short, partial orbit
(where statistics of the state only see which part of the orbit was observed). The
temporal spectrum captures the oscillation frequency (set by the rates for oscillators),
the spatial spectrum the length scales of a pattern, statistics and energies the
amplitude and operating point.

Design choices the task left open:

- Features are computed per episode and averaged over the M episodes (so M copies of one
  episode give the features of that episode).
- The rate fit is well conditioned: the library is built on standardised inputs
  ``z = (x - mean) / std`` (per episode), its columns are equilibrated, the ridge is
  ``RIDGE = 1e-8`` times the squared column norm, and the coefficients are mapped back
  exactly to the raw monomial basis (a quadratic polynomial in ``z`` is one in ``x``).
  The ridge is small because a short orbit lies close to a conic, which makes the
  quadratic library nearly collinear (on a Lotka-Volterra context the smallest squared
  singular value is ~1e-5 of the mean): a ridge of 1e-6 already biases the rates by
  ~10%, 1e-8 by ~0.1%. It is solved as a least-squares problem on the ridge-augmented
  matrix (QR, LAPACK ``gels``: not normal equations, so it stays accurate in float32,
  and deterministic on CPU and CUDA). Fields use at most ``MAX_FIT_POINTS``
  (space-time) points per episode, a fixed pseudo-random subset.
- A too-short orbit (much less than half a period) does not determine the rates: the
  fit then returns some member of a nearly flat family. Those features are noisy but
  finite; :class:`Prompter` clamps normalised features to ±CLIP.
- Features are constants of the data: they are computed without autograd, in the
  context's dtype (float16/bfloat16 are computed in float32 and cast back) and on its
  device. :class:`Prompter` casts them to its own parameters' dtype.
- Spectral floors do not depend on dtype: an empty or zero-power ring gets
  ``log(1e-10 * variance + 1e-30)``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch
from torch import nn

#: fewest time points per episode: the fourth-order central stencil (5 points wide) at
#: K - 4 >= 3 times, and a temporal spectrum of at least three non-constant bins
MIN_CONTEXT_STEPS = 7
#: most space-time points of one field episode that enter the rate fit
MAX_FIT_POINTS = 8192
#: ridge strength relative to the squared (equilibrated) column norm; small because a
#: short orbit lies close to a conic, so the quadratic library is nearly collinear
RIDGE = 1e-8
#: normalised features are clamped to +-CLIP before the MLP
CLIP = 10.0


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


def _time_derivative(x: torch.Tensor, dt: float) -> torch.Tensor:
    """Fourth-order central differences at points 2..K-3 of ``x`` ``(N, K, ...)`` ->
    ``(N, K-4, ...)``: ``(x[k-2] - 8x[k-1] + 8x[k+1] - x[k+2]) / (12 dt)``.

    (Second order at the two points next to the ends would be the one inaccurate row of
    the rate fit: on Lotka-Volterra at dt = 0.05 it alone shifts the rates by ~10%.)
    """
    return (x[:, :-4] - 8.0 * x[:, 1:-3] + 8.0 * x[:, 3:-1] - x[:, 4:]) / (12.0 * dt)


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
    """Physical and spectral features ``(B, F)`` of a context, averaged over episodes.

    ``context`` ``(B, M, K, *state_shape)`` or ``(B, K, *state_shape)`` (M = 1), K >=
    :data:`MIN_CONTEXT_STEPS` points ``dt`` apart; ``state_shape`` ``(D,)`` or
    ``(H, W, C)``. F = :func:`feature_dim` ``(state_shape, n_freq)``; the module docstring
    lists the features, :func:`feature_names` names them. Computed without autograd, in
    the context's dtype and on its device.
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

    dx = _time_derivative(x, dt)  # (N, K-4, *S)
    xc = x[:, 2:-2]
    flat = x.reshape(N, -1, C)
    dflat = dx.reshape(N, -1, C)
    parts = [
        flat.mean(1),
        flat.std(1, correction=0),
        flat.amin(1),
        flat.amax(1),
        dflat.abs().mean(1),
        dflat.std(1, correction=0),
    ]

    # estimated rates: dx/dt ≈ Θ(x) ξ on standardised inputs, mapped back to raw monomials
    z, mu, s = _standardise(xc.reshape(N, -1, C))  # statistics of all interior points
    dxdt = dflat
    lapz = _laplacian(z.reshape(xc.shape)).reshape(N, -1, C) if field else None
    if z.shape[1] > MAX_FIT_POINTS:
        gen = torch.Generator().manual_seed(0)
        idx = torch.randperm(z.shape[1], generator=gen)[:MAX_FIT_POINTS].to(x.device)
        z, dxdt = z[:, idx], dxdt[:, idx]
        lapz = lapz[:, idx] if field else None
    theta = _poly_library(z)  # (N, n, L)
    back = _poly_back(mu, s)  # (N, L, L)
    if not field:
        xi = back @ _ridge(theta, dxdt)  # (N, L, D)
        parts.append(xi.transpose(1, 2).reshape(N, -1))
    else:
        A = torch.cat(
            [
                theta.unsqueeze(1).expand(N, C, *theta.shape[1:]),
                lapz.permute(0, 2, 1).unsqueeze(-1),
            ],
            dim=-1,
        )  # (N, C, n, L + 1): target channel c's library ends with lap(z_c)
        xi = _ridge(A, dxdt.permute(0, 2, 1).unsqueeze(-1))[..., 0]  # (N, C, L + 1)
        poly = torch.einsum("nab,ncb->nca", back, xi[..., :-1])
        lap_coef = xi[..., -1:] / s[..., None]  # lap(z_c) = lap(u_c) / s_c
        parts.append(torch.cat([poly, lap_coef], dim=-1).reshape(N, -1))

    parts.append(flat.pow(2).sum(-1).mean(1, keepdim=True))
    parts.append(dflat.pow(2).sum(-1).mean(1, keepdim=True))

    signal = x.mean(dim=(2, 3)) if field else x  # (N, K, C)
    ref = flat.pow(2).mean(1).sqrt()
    parts.append(_temporal_spectrum(signal, ref, n_freq).reshape(N, -1))
    if field:
        rings = _ring_matrix(shape[0], shape[1], n_freq, x)
        for frame in (x[:, 0], x[:, -1]):
            parts.append(_spatial_spectrum(frame, rings).reshape(N, -1))

    feats = torch.cat(parts, dim=-1)
    return feats.reshape(B, M, -1).mean(1).to(out_dtype)


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
