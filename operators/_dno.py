r"""∂-NO: learnable fractional derivative features and the wrapper that feeds them to a
backbone (derivative-augmented neural operators).

:class:`DerivativeFeatures` maps a channels-first field ``u`` ``(B, C, *grid)`` (1-D or
2-D) to ``F`` feature channels, one per (input channel ``c``, kind, order ``o``[, axis
``j``]), each with its own learnable order :math:`\beta`:

.. math::

    \text{riesz:}\quad f = s\,\kappa^{-\beta}\,\mathcal F^{-1}\big[|k|^{\beta}\,\hat u\big],
    \qquad
    \text{directional (axis } j\text{):}\quad
    f = s\,\kappa_j^{-\beta}\,\mathcal F^{-1}\big[(i k_j)^{\beta}\,\hat u\big],

with :math:`|k| = \sqrt{k_0^2 + k_1^2}` in 2-D, :math:`k_j = 2\pi n_j / P_j` (``P_j`` the
period of axis ``j``: the domain length ``L_j``, or ``2 L_j`` after the even extension)
and the principal branch :math:`(ik)^\beta = |k|^\beta e^{i\pi\beta\,\mathrm{sign}(k)/2}`.
On :math:`\sin(kx)` (``k > 0``) the directional feature is
:math:`(k/\kappa)^\beta \sin(kx + \pi\beta/2)`: ``beta = 1`` is ``d/dx``, ``beta = 2`` is
``d²/dx²`` (up to :math:`\kappa^{-\beta}`). :class:`DerivativeAugmented` computes
``backbone(cat([x, features(x)], dim=1))``.

Choices the task left open, and why:

- **Normalisation** :math:`\kappa^{-\beta}` with :math:`\kappa` the *fundamental*
  wavenumber of the domain: :math:`\kappa_j = 2\pi/L_j` (directional along ``j``),
  :math:`\kappa = 2\pi/\max_j L_j` (Riesz). In words: the features are the fractional
  derivatives in the coordinate :math:`\xi = 2\pi x / L` in which the domain is
  :math:`[0, 2\pi)`, so a mode of integer wavenumber ``n`` is multiplied by
  :math:`|n|^\beta` (:math:`(in)^\beta`). Without it a change of :math:`\beta` rescales
  the features by :math:`(2\pi n/L)^{\Delta\beta}` (e.g. :math:`(2\pi\cdot 8)^2 \approx
  2500` between ``beta = 0`` and ``2`` for a mode ``n = 8``), which destabilises training.
  With it, the fundamental mode passes with gain 1 for every :math:`\beta` and a mode
  ``n`` with gain :math:`n^\beta`: for the smooth, normalised fields operators see (energy
  in the first few modes) the features stay O(1). The alternative, dividing by the
  Nyquist wavenumber :math:`(\pi N/L)^\beta`, keeps every gain <= 1 but depends on the grid
  size ``N``: a model trained at ``N`` and evaluated at ``2N`` would see its features
  shrink by :math:`2^{-\beta}`. The fundamental is grid-independent, so the features of
  a band-limited field are the same at every resolution (zero-shot super-resolution
  works). Normalised orders compose exactly: :math:`D^a D^b = D^{a+b}` (Riesz).
  The remaining constant (:math:`(2\pi/L)^\beta`) and any sign go into the learnable
  per-feature scale ``s`` (initialised to ``scale_init``: 1 by default, 0 in
  ``OperatorModel``, which starts the features switched off; see there).
- **k = 0.** The mean mode is masked (its feature value is 0 for every
  :math:`\beta`): :math:`0^\beta` is 0 for :math:`\beta > 0` but its derivative in
  :math:`\beta` is :math:`0^\beta \ln 0 =` NaN. The multiplier is computed as
  :math:`\exp(\beta \ln|\nu|)` with a safe base :math:`|\nu| := 1` on the masked mode and
  then multiplied by the 0/1 mask, so the gradient in :math:`\beta` is exactly 0 there.
  Consequence: ``beta = 0`` gives ``u - mean(u)`` (Riesz), not ``u``.
- **Nyquist** (even ``N``): kept for Riesz (a real, even multiplier: the result is
  real). Zeroed for directional features: the Nyquist mode :math:`\cos(\pi N x/L)` is
  its own mirror image (:math:`k_N \equiv -k_N`), so the odd part of :math:`(ik)^\beta`,
  :math:`i\,\mathrm{sign}(k)\sin(\pi\beta/2)|k|^\beta`, has no real representation there
  (for ``beta = 1`` the exact derivative of the sampled Nyquist mode is 0 at every grid
  point); zeroing it is the standard choice for odd derivatives. Note that this makes
  ``beta = 2`` differ from the exact second derivative on the Nyquist mode, and ``beta =
  0`` equals ``u - mean(u) - (Nyquist component)``.
- **Band limit** (``max_modes``): only modes with :math:`|n_j| \le` ``max_modes_j``
  (integer wavenumbers of the original domain) enter the features. A derivative of order
  :math:`\beta` raises mode :math:`n` by :math:`|n|^\beta`, so without a limit the
  features of a finer grid contain new, amplified high modes the network never saw:
  zero-shot super-resolution then fails (seen: heat, trained at 64 points, 0.05 error
  at 64 and 0.83 at 128). With the band limit of the training grid the features of a
  band-limited input are the same at every resolution. ``OperatorModel`` uses a
  quarter of the training grid (half its band; its module docstring gives the
  ablation); None keeps every mode.
- **Feature standardisation.** The gain :math:`|n|^\beta` reaches :math:`10^4` on the
  band of a 128-point grid at :math:`\beta = 2.25` (KdV's start), so unnormalised
  features of a rough field (a steepening shock) are orders of magnitude larger than
  the field: seen on KdV, rollout error 0.31-0.40 with them against 0.093 without
  features. Standardised, their size no longer depends on :math:`\beta` or on the
  roughness of the data, only their shape does, which is what :math:`\beta` should
  choose. Two ways, both followed by the learnable per-feature scale:

  ``normalize="spectrum"`` (``OperatorModel``'s default): :meth:`calibrate` stores the
  training inputs' mean power per retained mode, :math:`P_c(k)`, and each feature is
  divided by the RMS it has under that spectrum, :math:`(\sum_k P_c(k)|\nu(k)|^{2\beta})^{1/2}`
  (Parseval): a smooth function of :math:`\beta` alone, the same in training and
  evaluation and for every batch. So a feature's size still carries the input's
  roughness: an autoregressive rollout whose own errors add high modes shows the
  network larger features, as the training inputs with more high modes did.
  An uncalibrated module calibrates on the first input it sees.

  ``normalize="rms"`` (the default before): the RMS over batch and grid points (the
  batch's in training, with gradient; a running estimate, ``momentum``, in evaluation).
  The network then never sees a feature's size change in training (every batch is
  scaled to 1) but does in evaluation, where the running estimate is fixed.

  Both give an RMS per grid point that is the same at every resolution for
  band-limited features.
- **Range of beta**: :math:`\beta = lo + (hi - lo)\,\sigma(\theta)` with the logit
  :math:`\theta` as the parameter, initialised to
  :math:`\sigma^{-1}((\beta_0 - lo)/(hi - lo))` (``beta_init`` strictly inside the
  range). A clamp would set the gradient to exactly 0 once :math:`\beta` hits a limit,
  freezing it there; the sigmoid keeps :math:`\beta` inside for any :math:`\theta` and
  its gradient :math:`(hi - lo)\sigma(1-\sigma)` shrinks smoothly. (In float32 the sigmoid
  rounds to 1 for :math:`\theta \gtrsim 17`; an optimiser reaches that only after pushing
  far past the limit for a long time.) ``lo >= 0``: negative orders are fractional
  integrals, whose gain :math:`|n|^\beta` is largest on the mean-free low modes; the
  paper's orders lie in :math:`[0, m]`.
- **Non-periodic data** (``periodic=False``): each axis is mirrored to period ``2L``
  before the FFT and the result cropped back to the original ``N`` points. ``"even"``
  (default) mirrors about the end nodes, for the vertex grid :math:`x_j = jL/(N-1)` of the
  simsci Darcy system and the backbones (``[u_0..u_{N-1}, u_{N-2}..u_1]``, ``2N - 2``
  points); ``"even-half"`` mirrors about the cell faces, for cell-centred data
  :math:`x_j = (j + 1/2)L/N` (``[u_0..u_{N-1}, u_{N-1}..u_0]``, ``2N`` points). The even
  extension is continuous, so the periodic wrap adds no jump to ``u`` itself (a jump
  gives O(1) Gibbs errors in the derivative that do not decay with ``N``). Limitation:
  where the one-sided derivative :math:`u'` at a boundary is non-zero the extension has a
  kink there, so its derivative jumps: first-order features converge away from the
  boundary only like O(1/N) on the vertex grid (O(1/N^2) measured with the cell-centred
  mirror, tests/operators/test_dno.py) and oscillate next to it; orders :math:`\beta > 1` see a
  delta-like singularity at the boundary. Fields with :math:`u' = 0` at the boundary
  (Neumann-like, e.g. :math:`\cos(\pi x)`) are differentiated spectrally exactly.
- **Layout** of the ``F`` feature channels: all Riesz features (``c`` outer, ``o``
  inner), then all directional ones (``c``, ``o``, axis ``j``); :attr:`names` lists
  them (``riesz_c0_o0``, ``directional_x1_c0_o0``, ...; ``x0`` is grid axis 0, i.e.
  ``H`` of ``(B, C, H, W)``). ``beta_init`` is a scalar, one value per order
  (``n_orders``) or one per feature (``F``, in this order). With ``n_orders > 1`` give one
  init per order: equal inits start equal features, which only the backbone's weights
  pull apart.
- **dtype**: float32 or float64; the input must have the module's dtype and device (as
  for the backbones: cast with ``.to()``). ``theta`` and ``scale`` are created in torch's
  default dtype, so a module built in float32 and cast with ``.double()`` holds
  ``beta_init`` to float32 precision only (build under a float64 default for exact orders).

:class:`DerivativeAugmented` rebuilds a simsci backbone (one with ``init_args`` and
``in_channels``) with ``in_channels = C + F`` (fresh weights). For any other module it
takes the module as built for ``C + F`` input channels: ``in_channels=C`` is required, a
module declaring ``in_channels`` itself is checked at construction, others at the first
forward (the first layer's RuntimeError becomes a ValueError naming both numbers). Its
``init_args`` holds the backbone's ``module:qualname`` import path and ``init_args``
(with ``in_channels = C``), the features' ``init_args`` and ``beta_lr_scale``, so
``DerivativeAugmented(**m.init_args)`` rebuilds it for simsci backbones; an external
module's constructor arguments are unknown (``"init_args": None``), so such a wrapper
cannot be rebuilt from its ``init_args`` (build the module and pass it).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from simsci.errors import unknown_name
from simsci.operators._common import (
    check_dim,
    check_input,
    count_parameters,
    first_real,
    positive_int,
)
from simsci.train import import_model_class

__all__ = ["DerivativeAugmented", "DerivativeFeatures"]

NORMALIZE = ("none", "rms", "spectrum")
KINDS = ("riesz", "directional")
EXTENSIONS = ("even", "even-half")


# the calibration spectrum's buffers and their shapes for (C, dim, E modes)
_SPECTRUM_BUFFERS = {
    "spectrum_power": lambda C, d, E: (C, E),
    "spectrum_riesz_log": lambda C, d, E: (E,),
    "spectrum_dir_log": lambda C, d, E: (d, E),
    "spectrum_dir_mask": lambda C, d, E: (d, E),
}


def _float_pair(what: str, value) -> tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"{what} must be a pair (lo, hi), got {value!r}")
    lo, hi = (float(v) for v in value)
    if not (math.isfinite(lo) and math.isfinite(hi) and 0.0 <= lo < hi):
        raise ValueError(f"{what} must satisfy 0 <= lo < hi (finite), got {value!r}")
    return lo, hi


def _check_max_modes(max_modes, dim: int) -> tuple[int, ...] | None:
    if max_modes is None:
        return None
    mm = [max_modes] * dim if np.ndim(max_modes) == 0 else list(max_modes)
    if len(mm) != dim or any(int(m) != m or m < 1 for m in mm):
        raise ValueError(f"max_modes must be a positive int or {dim} of them, got {max_modes!r}")
    return tuple(int(m) for m in mm)


def _check_kinds(kinds) -> tuple[str, ...]:
    """The derivative kinds in canonical order (riesz first), so that the feature layout
    does not depend on the order given."""
    if isinstance(kinds, str):
        kinds = (kinds,)
    if not isinstance(kinds, (list, tuple)) or not kinds:
        raise ValueError(f"kinds must be a non-empty list of {KINDS}, got {kinds!r}")
    for k in kinds:
        if k not in KINDS:
            raise unknown_name("derivative kind", k, KINDS)
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"kinds must not repeat a kind, got {list(kinds)}")
    return tuple(k for k in KINDS if k in kinds)


def _check_domain(domain, dim: int) -> tuple[float, ...]:
    """The domain length of each axis (default 1.0)."""
    if domain is None:
        lengths = (1.0,) * dim
    elif isinstance(domain, (list, tuple)):
        if len(domain) != dim:
            raise ValueError(f"domain needs one length per grid axis (dim={dim}), got {domain!r}")
        lengths = tuple(float(v) for v in domain)
    else:
        lengths = (float(domain),) * dim
    if not all(math.isfinite(v) and v > 0 for v in lengths):
        raise ValueError(f"domain lengths must be finite and > 0, got {domain!r}")
    return lengths


def _feature_names(kinds, C: int, n_ord: int, d: int) -> list[str]:
    """The feature channels' names in layout order: riesz (c, o), then directional
    (c, o, axis)."""
    names = []
    if "riesz" in kinds:
        names += [f"riesz_c{c}_o{o}" for c in range(C) for o in range(n_ord)]
    if "directional" in kinds:
        names += [
            f"directional_x{j}_c{c}_o{o}" for c in range(C) for o in range(n_ord) for j in range(d)
        ]
    return names


class DerivativeFeatures(nn.Module):
    r"""Fractional derivative features with learnable orders ``(B, C, *grid) -> (B, F, *grid)``.

    Args:
        in_channels: input channels ``C``.
        dim: grid axes (1 or 2).
        kinds: subset of ``("riesz", "directional")`` (a single name is allowed).
        n_orders: learnable orders per (channel, kind[, axis]).
        beta_init: initial order(s): a scalar, ``n_orders`` values or ``out_channels``
            values; strictly inside ``beta_range``.
        beta_range: ``(lo, hi)`` with ``0 <= lo < hi``; :math:`\beta = lo + (hi-lo)\sigma(\theta)`.
        learn_beta, learn_scale: make the orders / the per-feature scales trainable
            (otherwise buffers).
        scale_init: initial value of every per-feature scale ``s`` (default 1.0). 0.0
            starts the features switched off: a wrapped backbone then computes exactly
            what it computes without them, and the scales (which get a gradient) grow
            where the features help (``OperatorModel``'s default; see its docstring).
        periodic: False mirrors each axis before the FFT (see ``extension``).
        domain: domain length per axis (a number or ``dim`` numbers; default 1.0), used
            for :math:`k = 2\pi n / L` and the normalisation.
        extension: ``"even"`` (vertex grid, mirror about the end nodes) or
            ``"even-half"`` (cell-centred grid, mirror about the faces); non-periodic only.

    ``out_channels = C * n_orders * (riesz + dim * directional)``. See the module
    docstring for the formulas, the normalisation and the feature layout.
    """

    def __init__(
        self,
        in_channels: int,
        dim: int,
        kinds: Sequence[str] | str = KINDS,
        n_orders: int = 1,
        beta_init: float | Sequence[float] = 0.5,
        beta_range: Sequence[float] = (0.0, 2.0),
        learn_beta: bool = True,
        learn_scale: bool = True,
        scale_init: float = 1.0,
        periodic: bool = True,
        domain: float | Sequence[float] | None = None,
        extension: str = "even",
        max_modes: int | Sequence[int] | None = None,
        normalize: str = "none",
        momentum: float = 0.05,
    ):
        super().__init__()
        self.in_channels = positive_int("in_channels", in_channels)
        self.dim = check_dim(dim)
        self.n_orders = positive_int("n_orders", n_orders)
        self.max_modes = _check_max_modes(max_modes, self.dim)
        self.kinds = _check_kinds(kinds)
        for flag, value in (
            ("learn_beta", learn_beta),
            ("learn_scale", learn_scale),
            ("periodic", periodic),
        ):
            if not isinstance(value, bool):
                raise TypeError(f"{flag} must be a bool, got {value!r}")
        self.periodic = periodic
        if extension not in EXTENSIONS:
            raise unknown_name("extension", extension, EXTENSIONS)
        self.extension = extension
        self.domain = lengths = _check_domain(domain, self.dim)
        self.beta_range = _float_pair("beta_range", beta_range)
        if hasattr(beta_init, "tolist"):  # a tensor or numpy array
            beta_init = beta_init.tolist()

        self.names = _feature_names(self.kinds, self.in_channels, self.n_orders, self.dim)
        self.out_channels = len(self.names)

        b0 = self._expand_beta_init(beta_init)
        lo, hi = self.beta_range
        p = (b0 - lo) / (hi - lo)
        theta = torch.log(p) - torch.log1p(-p)
        scale_init = float(scale_init)
        if not math.isfinite(scale_init):
            raise ValueError(f"scale_init must be finite, got {scale_init!r}")
        scale = torch.full((self.out_channels,), scale_init, dtype=torch.get_default_dtype())
        if learn_beta:
            self.theta = nn.Parameter(theta.to(torch.get_default_dtype()))
        else:
            self.register_buffer("theta", theta.to(torch.get_default_dtype()))
        if normalize not in NORMALIZE:
            raise ValueError(f"normalize must be one of {NORMALIZE}, got {normalize!r}")
        if not 0.0 < float(momentum) <= 1.0:
            raise ValueError(f"momentum must lie in (0, 1], got {momentum!r}")
        self.normalize, self.momentum = normalize, float(momentum)
        # running RMS of each feature over samples and grid points (normalize="rms")
        self.register_buffer("running_rms", torch.ones(self.out_channels))
        # the training inputs' mean power per retained mode (normalize="spectrum"; empty
        # until calibrate()): power (C, E), and per mode the Riesz log|nu| and mask (E,),
        # the directional log|nu_j| and mask (dim, E)
        for name, shape in _SPECTRUM_BUFFERS.items():
            self.register_buffer(name, torch.zeros(shape(self.in_channels, self.dim, 0)))
        if learn_scale:
            self.scale = nn.Parameter(scale)
        else:
            self.register_buffer("scale", scale)
        self.init_args = {
            "in_channels": self.in_channels,
            "dim": self.dim,
            "kinds": list(self.kinds),
            "n_orders": self.n_orders,
            "beta_init": b0.tolist() if isinstance(beta_init, (list, tuple)) else float(b0[0]),
            "beta_range": list(self.beta_range),
            "learn_beta": learn_beta,
            "learn_scale": learn_scale,
            "scale_init": scale_init,
            "periodic": periodic,
            "domain": None if domain is None else list(lengths),
            "extension": extension,
            "max_modes": None if max_modes is None else list(self.max_modes),
            "normalize": normalize,
            "momentum": self.momentum,
        }

    def _expand_beta_init(self, beta_init) -> Tensor:
        """``beta_init`` as a float64 tensor ``(F,)`` in feature order, checked in range."""
        F, n_ord = self.out_channels, self.n_orders
        if isinstance(beta_init, (list, tuple)):
            vals = torch.tensor([float(v) for v in beta_init], dtype=torch.float64)
            if vals.numel() == F:
                b0 = vals
            elif vals.numel() == n_ord:
                # order o is the innermost index of riesz features, second-innermost of
                # directional ones: repeat per (channel[, axis]) accordingly
                parts = []
                n_r = self.in_channels if "riesz" in self.kinds else 0
                n_dir = self.in_channels if "directional" in self.kinds else 0
                if n_r:
                    parts.append(vals.repeat(n_r))
                if n_dir:
                    parts.append(vals.repeat_interleave(self.dim).repeat(n_dir))
                b0 = torch.cat(parts)
            else:
                raise ValueError(
                    f"beta_init needs 1, n_orders={n_ord} or out_channels={F} values, got "
                    f"{vals.numel()}: {beta_init!r}"
                )
        else:
            b0 = torch.full((F,), float(beta_init), dtype=torch.float64)
        lo, hi = self.beta_range
        if not bool(((b0 > lo) & (b0 < hi)).all()):
            raise ValueError(
                f"beta_init must lie strictly inside beta_range ({lo}, {hi}) (the sigmoid "
                f"parametrisation reaches the ends only at infinity), got {b0.tolist()}"
            )
        return b0

    # ----------------------------------------------------------------- orders
    @property
    def beta(self) -> Tensor:
        """Current orders ``(F,)`` in feature order (differentiable in ``theta``)."""
        lo, hi = self.beta_range
        return lo + (hi - lo) * torch.sigmoid(self.theta)

    def betas(self) -> dict[str, Tensor]:
        """``{feature name: order}`` as detached 0-d tensors (for logging)."""
        beta = self.beta.detach()
        return {name: beta[i] for i, name in enumerate(self.names)}

    def beta_summary(self) -> dict[str, float]:
        """``{feature name: order}`` as floats."""
        values = self.beta.detach().cpu().tolist()
        return dict(zip(self.names, values))

    # ----------------------------------------------------------------- spectra
    def _extend(self, u: Tensor) -> Tensor:
        for axis in range(2, u.ndim):
            n = u.shape[axis]
            mirror = u.flip(axis)
            if self.extension == "even":
                mirror = mirror.narrow(axis, 1, n - 2)
            u = torch.cat([u, mirror], dim=axis)
        return u

    def _frequencies(self, shape: tuple[int, ...], dtype, device) -> list[Tensor]:
        """Normalised wavenumbers :math:`\\nu_j = k_j / \\kappa_j` per axis, in the
        ``rfftn`` layout, shaped to broadcast over the spectrum."""
        ratio = 1.0 if self.periodic else 2.0  # period P_j / L_j
        out = []
        for j, m in enumerate(shape):
            # integer wavenumbers built from integers (exact, also in float32): rfft keeps
            # 0..m//2 on the last axis; the others run 0..ceil(m/2)-1, then -floor(m/2)..-1
            if j == len(shape) - 1:
                n = torch.arange(m // 2 + 1, device=device)
            else:
                n = torch.arange(m, device=device)
                n = torch.where(n >= (m + 1) // 2, n - m, n)
            n = n.to(dtype)
            view = [1] * len(shape)
            view[j] = n.numel()
            out.append((n / ratio).view(view))
        return out

    def _band(self, nu: list[Tensor]) -> Tensor | None:
        """The 0/1 mask of the modes with |n_j| <= max_modes_j (wavenumbers of the original
        domain; None without a band limit): the same features at every resolution that
        resolves the band."""
        if self.max_modes is None:
            return None
        return math.prod((v.abs() <= m).to(v.dtype) for v, m in zip(nu, self.max_modes))

    def _riesz_log(self, nu: list[Tensor]) -> tuple[Tensor, Tensor]:
        """``log|nu|`` (0 on the mean mode) and the 0/1 mask of the non-zero modes."""
        lmax = max(self.domain)
        sq = sum((v * (lmax / L)) ** 2 for v, L in zip(nu, self.domain))
        mask = sq > 0
        logk = 0.5 * torch.log(torch.where(mask, sq, torch.ones_like(sq)))
        return logk, mask.to(sq.dtype)

    def _directional_log(self, nu: list[Tensor], shape: tuple[int, ...]) -> tuple[Tensor, Tensor]:
        """``log(i nu_j)`` (principal branch; 0 on masked modes) and the 0/1 mask, both
        ``(dim, *K)``: mode ``n_j = 0`` and the Nyquist mode of axis ``j`` masked."""
        ratio = 1.0 if self.periodic else 2.0
        spec_shape = torch.broadcast_shapes(*(v.shape for v in nu))
        logs, masks = [], []
        for v, m in zip(nu, shape):
            mask = v != 0
            if m % 2 == 0:
                mask = mask & (v.abs() != (m // 2) / ratio)
            safe = torch.where(mask, v.abs(), torch.ones_like(v))
            z = torch.complex(torch.log(safe), (0.5 * math.pi) * torch.sign(v) * mask)
            logs.append(z.expand(spec_shape))
            masks.append(mask.to(v.dtype).expand(spec_shape))
        return torch.stack(logs), torch.stack(masks)

    # ----------------------------------------------------------------- forward
    def forward(self, x: Tensor) -> Tensor:
        """``(B, in_channels, *grid) -> (B, out_channels, *grid)``."""
        check_input(
            x,
            name="DerivativeFeatures",
            in_channels=self.in_channels,
            dim=self.dim,
            like=self.theta,
        )
        grid = tuple(x.shape[2:])
        if min(grid) < 2:
            raise ValueError(f"DerivativeFeatures needs >= 2 points per grid axis, got grid {grid}")
        u = x if self.periodic else self._extend(x)
        shape = tuple(u.shape[2:])
        axes = tuple(range(-self.dim, 0))
        C, n_ord, d = self.in_channels, self.n_orders, self.dim
        uhat = torch.fft.rfftn(u, dim=axes)  # (B, C, *K)
        nu = self._frequencies(shape, x.dtype, x.device)
        band = self._band(nu)
        beta = self.beta
        ones = [1] * d
        parts, i = [], 0
        if "riesz" in self.kinds:
            logk, mask = self._riesz_log(nu)
            if band is not None:
                mask = mask * band
            b = beta[i : i + C * n_ord].view(C, n_ord, *ones)
            i += C * n_ord
            mult = torch.exp(b * logk) * mask  # (C, n_ord, *K), exactly 0 on the mean mode
            f = torch.fft.irfftn(uhat[:, :, None] * mult, s=shape, dim=axes)
            parts.append(f.flatten(1, 2))
        if "directional" in self.kinds:
            z, mask = self._directional_log(nu, shape)  # (d, *K)
            if band is not None:
                mask = mask * band
            b = beta[i : i + C * n_ord * d].view(C, n_ord, d, *ones)
            mult = torch.exp(b * z) * mask  # (C, n_ord, d, *K) complex
            f = torch.fft.irfftn(uhat[:, :, None, None] * mult, s=shape, dim=axes)
            parts.append(f.flatten(1, 3))
        out = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
        if not self.periodic:
            for axis, n in enumerate(grid, start=2):
                out = out.narrow(axis, 0, n)
        if self.normalize == "rms":
            out = out / self._rms(out).view(1, -1, *ones)
        elif self.normalize == "spectrum":
            if not self.calibrated:
                self.calibrate(x)  # a standalone module: the first input it sees
            out = out * self._inverse_rms(beta).to(out.dtype).view(1, -1, *ones)
        return out * self.scale.view(1, -1, *ones)

    # ----------------------------------------------------------------- calibration
    @property
    def calibrated(self) -> bool:
        """Whether the training spectrum of ``normalize="spectrum"`` is set."""
        return self.spectrum_power.numel() > 0

    @torch.no_grad()
    def calibrate(self, x: Tensor) -> DerivativeFeatures:
        r"""Store the mean power spectrum of training inputs ``x`` ``(B, C, *grid)``.

        With ``normalize="spectrum"`` each feature is divided by its expected RMS under
        this spectrum, :math:`\big(\sum_k P_c(k)\,|\nu(k)|^{2\beta}\big)^{1/2}`
        (Parseval; :math:`P_c(k)` the mean of :math:`|\hat u_c(k)|^2` over ``x``, band and
        masks as in the features): a function of the orders only, the same in training
        and evaluation and for every batch. Returns the module.
        """
        check_input(
            x,
            name="DerivativeFeatures.calibrate",
            in_channels=self.in_channels,
            dim=self.dim,
            like=self.theta,
        )
        u = x if self.periodic else self._extend(x)
        shape = tuple(u.shape[2:])
        axes = tuple(range(-self.dim, 0))
        dtype = torch.float64
        # coefficients of the orthonormal Fourier basis: the mean square over the grid is
        # the sum of |c_k|^2 over the full spectrum; rfftn keeps one of each conjugate pair
        c = torch.fft.rfftn(u.to(dtype), dim=axes) / math.prod(shape)
        m = shape[-1]
        pair = torch.full((m // 2 + 1,), 2.0, dtype=dtype, device=x.device)
        pair[0] = 1.0
        if m % 2 == 0:
            pair[-1] = 1.0
        power = c.abs().pow(2).mean(0) * pair  # (C, *K)
        nu = self._frequencies(shape, dtype, x.device)
        riesz_log, riesz_mask = self._riesz_log(nu)
        dir_log, dir_mask = self._directional_log(nu, shape)
        band = self._band(nu)
        keep = riesz_mask > 0 if band is None else (riesz_mask * band) > 0
        flat = keep.flatten()
        spectrum = {
            "spectrum_power": power.flatten(1)[:, flat],
            "spectrum_riesz_log": riesz_log.flatten()[flat],
            "spectrum_dir_log": dir_log.real.flatten(1)[:, flat],
            "spectrum_dir_mask": dir_mask.flatten(1)[:, flat],
        }
        for name, value in spectrum.items():
            setattr(self, name, value.to(self.running_rms.dtype))
        return self

    def _inverse_rms(self, beta: Tensor) -> Tensor:
        """``(F,)`` 1 / expected RMS of each feature under the calibration spectrum
        (0 for a feature whose input channel has no power in the band: it is 0 itself)."""
        C, n_ord, d = self.in_channels, self.n_orders, self.dim
        power = self.spectrum_power.to(beta.dtype)  # (C, E)
        parts, i = [], 0
        if "riesz" in self.kinds:
            b = beta[i : i + C * n_ord].view(C, n_ord, 1)
            i += C * n_ord
            gain = torch.exp(2 * b * self.spectrum_riesz_log.to(beta.dtype))  # (C, n_ord, E)
            parts.append((power[:, None] * gain).sum(-1).flatten())
        if "directional" in self.kinds:
            b = beta[i : i + C * n_ord * d].view(C, n_ord, d, 1)
            log, mask = (t.to(beta.dtype) for t in (self.spectrum_dir_log, self.spectrum_dir_mask))
            gain = torch.exp(2 * b * log) * mask  # (C, n_ord, d, E)
            parts.append((power[:, None, None] * gain).sum(-1).flatten())
        ms = torch.cat(parts)
        tiny = torch.finfo(ms.dtype).tiny ** 0.5
        return torch.where(ms > tiny, ms.clamp_min(tiny).rsqrt(), torch.zeros_like(ms))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # the calibration spectrum's length depends on the data: take the stored one's;
        # a checkpoint from before normalize="spectrum" existed has none (kept empty)
        for name in _SPECTRUM_BUFFERS:
            value = state_dict.get(prefix + name)
            if value is None:
                state_dict[prefix + name] = getattr(self, name)
            else:
                setattr(self, name, torch.empty_like(value, device=self.running_rms.device))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _rms(self, out: Tensor) -> Tensor:
        """Per-feature RMS over batch and grid: the batch's in training (with gradient;
        the running estimate follows it), the running estimate in evaluation."""
        if self.training:
            rms = out.detach().pow(2).mean(dim=(0, *range(2, out.ndim))).sqrt()
            with torch.no_grad():
                self.running_rms.lerp_(rms.to(self.running_rms.dtype), self.momentum)
            rms = out.pow(2).mean(dim=(0, *range(2, out.ndim))).sqrt()
        else:
            rms = self.running_rms.to(out.dtype)
        return rms.clamp_min(1e-12)

    def extra_repr(self) -> str:
        return (
            f"in_channels={self.in_channels}, dim={self.dim}, kinds={self.kinds}, "
            f"n_orders={self.n_orders}, out_channels={self.out_channels}, "
            f"beta_range={self.beta_range}, periodic={self.periodic}"
        )


# ------------------------------------------------------------------------ wrapper


def _is_simsci_backbone(module: nn.Module) -> bool:
    return isinstance(getattr(module, "init_args", None), dict) and isinstance(
        getattr(module, "in_channels", None), int
    )


def _follow(module: nn.Module, like: Tensor) -> None:
    """Move ``module`` to ``like``'s device and its real tensors to ``like``'s dtype.
    (``module.to(dtype=float32)`` would also cast complex weights, dropping their
    imaginary parts.)"""
    module.to(device=like.device)
    for t in (*module.parameters(), *module.buffers()):
        if t.is_floating_point() and t.dtype != like.dtype:
            t.data = t.data.to(like.dtype)


def _declared_in_channels(module: nn.Module) -> int | None:
    """The input width the module's first layer declares (``in_channels`` or
    ``in_features`` of the module itself or of its first submodule that has one)."""
    for m in module.modules():
        for attr in ("in_channels", "in_features"):
            v = getattr(m, attr, None)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    return None


class DerivativeAugmented(nn.Module):
    """∂-NO: ``backbone(cat([x, features(x)], dim=1))``, ``x`` of shape ``(B, C, *grid)``.

    Args:
        backbone: a simsci backbone (rebuilt with ``in_channels = C + F``; its ``C`` is
            its ``in_channels``), any other ``nn.Module`` built for ``C + F`` input
            channels (then ``in_channels=C`` is required), or the ``{"import_path",
            "init_args"}`` dict of a wrapper's ``init_args``.
        in_channels: the data channels ``C``. For a simsci backbone already built for
            ``C + F`` channels, passing ``C`` keeps it (and its weights) as it is.
        features: a :class:`DerivativeFeatures`, or a dict of its keywords (``in_channels``
            and ``dim`` default to ``C`` and the backbone's ``dim``); None means ``{}``.
        beta_lr_scale: learning-rate multiplier of the orders' parameter group.

    ``F = features.out_channels``; for an external module, get it beforehand from
    ``DerivativeFeatures(C, dim, ...).out_channels``.
    """

    def __init__(
        self,
        backbone: nn.Module | Mapping,
        *,
        in_channels: int | None = None,
        features: DerivativeFeatures | Mapping | None = None,
        beta_lr_scale: float = 10.0,
    ):
        super().__init__()
        scale = float(beta_lr_scale)
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"beta_lr_scale must be finite and > 0, got {beta_lr_scale!r}")
        self.beta_lr_scale = scale
        if in_channels is not None:
            in_channels = positive_int("in_channels", in_channels)

        if isinstance(backbone, Mapping):
            module, spec = self._build_from_spec(backbone, in_channels, features)
        elif not isinstance(backbone, nn.Module):
            raise TypeError(
                f"backbone must be an nn.Module or the backbone dict of a DerivativeAugmented's "
                f"init_args, got {type(backbone).__name__}"
            )
        elif _is_simsci_backbone(backbone):
            module, spec = self._adopt_simsci(backbone, in_channels, features)
        else:
            module, spec = self._adopt_external(backbone, in_channels, features)
        self.backbone = module
        like = first_real(module)
        if like is not None:
            self.features.to(device=like.device, dtype=like.dtype)
        self.dim = self.features.dim
        self.out_channels = getattr(module, "out_channels", None)
        self.init_args = {
            "backbone": spec,
            "in_channels": self.in_channels,
            "features": dict(self.features.init_args),
            "beta_lr_scale": self.beta_lr_scale,
        }

    # ---------------------------------------------------------------- construction
    def _make_features(self, features, in_channels: int, dim: int | None) -> None:
        if isinstance(features, DerivativeFeatures):
            if features.in_channels != in_channels:
                raise ValueError(
                    f"the features take {features.in_channels} input channels but the data "
                    f"have C={in_channels}; build DerivativeFeatures({in_channels}, ...)"
                )
            if dim is not None and features.dim != dim:
                raise ValueError(f"the features are {features.dim}-D but the backbone is {dim}-D")
            self.features = features
        elif features is None or isinstance(features, Mapping):
            kwargs = dict(features or {})
            valid = [p for p in inspect.signature(DerivativeFeatures).parameters]
            for key in kwargs:
                if key not in valid:
                    raise unknown_name("DerivativeFeatures keyword", key, valid)
            for key, value in (("in_channels", in_channels), ("dim", dim)):
                if value is None:
                    continue
                if key in kwargs and kwargs[key] != value:
                    raise ValueError(
                        f"features[{key!r}]={kwargs[key]!r} contradicts the backbone's "
                        f"{key}={value}; leave it out of features"
                    )
                kwargs[key] = value
            if "dim" not in kwargs:
                raise ValueError(
                    "cannot tell the grid dimension: the backbone has no `dim` (or `n_dim`) "
                    'attribute; pass features={"dim": 1 or 2, ...}'
                )
            self.features = DerivativeFeatures(**kwargs)
        else:
            raise TypeError(
                "features must be a DerivativeFeatures, a dict of its keywords or None, "
                f"got {type(features).__name__}"
            )
        self.in_channels = in_channels

    def _build_from_spec(self, spec: Mapping, in_channels, features):
        if set(spec) != {"import_path", "init_args"}:
            raise ValueError(
                'a backbone dict must have exactly the keys "import_path" and "init_args" '
                f"(the init_args of a DerivativeAugmented), got {sorted(spec)}"
            )
        path, args = spec["import_path"], spec["init_args"]
        if args is None:
            raise ValueError(
                f"the backbone {path} was an external module whose constructor arguments "
                "were not recorded, so it cannot be rebuilt from init_args; build it and "
                "pass the module: DerivativeAugmented(module, in_channels=C, features=...)"
            )
        # the class at module:qualname (the checkpoint convention of simsci.train)
        cls = import_model_class(str(path))
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise TypeError(f"{path} is not an nn.Module class")
        args = dict(args)
        c = int(args.get("in_channels", 0)) if in_channels is None else in_channels
        if args.get("in_channels") != c:
            raise ValueError(
                f"in_channels={in_channels} contradicts the backbone's recorded "
                f"in_channels={args.get('in_channels')!r}"
            )
        dim = self._dim_of(args.get("dim"), features)
        self._make_features(features, c, dim)
        module = cls(**{**args, "in_channels": c + self.features.out_channels})
        return module, {"import_path": str(path), "init_args": args}

    def _adopt_simsci(self, backbone: nn.Module, in_channels, features):
        own = backbone.in_channels
        dim = self._dim_of(getattr(backbone, "dim", None), features)
        c = own if in_channels is None else in_channels
        self._make_features(features, c, dim)
        n_feat = self.features.out_channels
        path = f"{type(backbone).__module__}:{type(backbone).__qualname__}"
        if "in_channels" not in backbone.init_args:
            raise ValueError(
                f"{type(backbone).__name__}.init_args has no 'in_channels'; a simsci "
                "backbone records every constructor argument"
            )
        args = {**backbone.init_args, "in_channels": c}
        if own == c:
            module = type(backbone)(**{**backbone.init_args, "in_channels": c + n_feat})
            like = first_real(backbone)
            if like is not None:
                _follow(module, like)
        elif own == c + n_feat:
            module = backbone  # built for the augmented input already: keep its weights
        else:
            raise ValueError(
                f"{type(backbone).__name__} takes {own} input channels, which is neither the "
                f"data's C={c} (it would be rebuilt for C + F = {c + n_feat}) nor C + F = "
                f"{c} + {n_feat}; pass in_channels=C matching the data"
            )
        return module, {"import_path": path, "init_args": args}

    def _adopt_external(self, backbone: nn.Module, in_channels, features):
        if in_channels is None:
            raise ValueError(
                f"{type(backbone).__name__} is not a simsci backbone (no init_args and "
                "in_channels), so DerivativeAugmented cannot rebuild it: pass "
                "in_channels=C (the data channels) and a module built for C + F input "
                "channels, F = DerivativeFeatures(C, dim, ...).out_channels"
            )
        dim = getattr(backbone, "dim", None)
        if not isinstance(dim, int) or isinstance(dim, bool):
            dim = getattr(backbone, "n_dim", None)  # neuralop's name
        dim = self._dim_of(dim if isinstance(dim, int) else None, features)
        self._make_features(features, in_channels, dim)
        need = in_channels + self.features.out_channels
        declared = getattr(backbone, "in_channels", None)
        if isinstance(declared, int) and not isinstance(declared, bool) and declared != need:
            raise ValueError(self._mismatch_message(backbone, declared))
        path = f"{type(backbone).__module__}:{type(backbone).__qualname__}"
        return backbone, {"import_path": path, "init_args": None}

    @staticmethod
    def _dim_of(dim, features) -> int | None:
        if isinstance(features, DerivativeFeatures):
            return features.dim if dim is None else dim
        if dim is None and isinstance(features, Mapping):
            return features.get("dim")
        return dim

    def _mismatch_message(self, backbone: nn.Module, declared: int | None) -> str:
        c, f = self.in_channels, self.features.out_channels
        expects = (
            f"expects {declared} input channels"
            if declared is not None
            else "does not accept that many input channels"
        )
        return (
            f"backbone {type(backbone).__name__} {expects}, but ∂-NO feeds it C + F = "
            f"{c} + {f} = {c + f} channels (C data channels and F derivative features); "
            f"build it with {c + f} input channels"
        )

    # ---------------------------------------------------------------- forward
    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, *grid) -> backbone output``."""
        z = torch.cat([x, self.features(x)], dim=1)
        if getattr(self, "_fits", False) or _is_simsci_backbone(self.backbone):
            return self.backbone(z)
        try:
            y = self.backbone(z)
        except RuntimeError as err:
            declared = _declared_in_channels(self.backbone)
            if declared == z.shape[1]:
                raise  # the channels fit: some other failure of the module
            raise ValueError(
                self._mismatch_message(self.backbone, declared) + f" (it raised: {err})"
            ) from err
        self._fits = True
        return y

    # ---------------------------------------------------------------- training helpers
    def parameter_groups(self) -> list[dict]:
        """``[{"params": weights, "lr_scale": 1.0, "name": "weights"},
        {"params": orders, "lr_scale": beta_lr_scale, "name": "beta"}]``; the per-feature
        scales are weights. The beta group is empty when the orders are frozen."""
        theta = self.features.theta
        beta = [theta] if isinstance(theta, nn.Parameter) else []
        ids = {id(p) for p in beta}
        weights = [p for p in self.parameters() if id(p) not in ids]
        return [
            {"params": weights, "lr_scale": 1.0, "name": "weights"},
            {"params": beta, "lr_scale": self.beta_lr_scale, "name": "beta"},
        ]

    def num_parameters(self) -> int:
        """Real parameters of backbone and features (complex ones count twice)."""
        return count_parameters(self)

    def betas(self) -> dict[str, Tensor]:
        """The features' orders, ``{name: 0-d tensor}`` (see DerivativeFeatures.betas)."""
        return self.features.betas()

    def beta_summary(self) -> dict[str, float]:
        """The features' orders as floats."""
        return self.features.beta_summary()
