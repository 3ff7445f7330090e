r"""``SDEVI``: SDE-induced variational inference for irregular time series.

The latent state :math:`z(t)` is inferred at the observation times only, with a
posterior that is the law of an SDE at those times: a Gauss–Markov chain whose
transitions are exact (linear variants) or linearised (non-linear variant) Gaussians.
The ELBO (:mod:`simsci.models.sdevi._elbo`) is a deterministic function of the
posterior's parameters: no path is sampled. Time is in units of ``time_scale``; data
are normalised by the file's statistics.

Three variants (``variant=``), all with the same encoder and tasks:

``"linear"`` (the paper's backbone)
    prior :math:`dz = (A_p z + b_p)\,dt + L_p\,dW`, a learnable stable linear SDE with
    :math:`A_p = -\mathrm{diag}(\mathrm{softplus}(a)) + (W - W^\top)/2` (dissipative plus
    a rotation, so oscillations are representable and the prior never explodes),
    :math:`z(t_1) \sim \mathcal N(0, \mathrm{diag}\,\mathrm{softplus}(p_0))`.
    Posterior: a linear *time-varying* SDE, piecewise constant between consecutive time
    points; per interval the encoder emits :math:`A_i = 3\tanh(\cdot/3)`, :math:`b_i`,
    a lower-triangular :math:`L_i`. Transitions by :func:`lti_transition` (exact).

``"nonlinear"``
    prior drift :math:`f_p(z) = A_p z + b_p + g_\theta(z)` with a tanh MLP
    :math:`g_\theta` (its last layer starts at zero, so training starts from the linear
    prior); posterior drift :math:`f_p(z) + A_i z + b_i` (the encoder's correction).
    The moments :math:`\dot m = f(m)`, :math:`\dot P = JP + PJ^\top + LL^\top` are
    propagated by *local linearisation* (Ozaki 1992): on each of ``substeps`` sub-steps
    per interval the drift is replaced by its first-order expansion at a point
    :math:`r_j` near the posterior mean, :math:`f(z) \approx f(r_j) + J(r_j)(z - r_j)`,
    whose transition is exact (:func:`lti_transition`); the scheme is exact for linear
    drifts and A-stable. The prior's transitions are linearised at the same points, so
    the KL is again the closed form between two Gauss–Markov chains (on the sub-step
    grid, which bounds the KL of the coarser chain from above: the ELBO stays a bound of
    the linearised model). The MLP's Jacobian is analytic
    (:math:`W_2\,\mathrm{diag}(1-\tanh^2)\,W_1`): no autograd inside the forward pass.

    Where the points :math:`r_j` come from (``linearisation=``): ``"sequential"``
    linearises at the propagated mean itself, :math:`r_j = m_j`, one sub-step after the
    other (a Python loop over all sub-steps of the episode). ``"parallel"`` (default)
    starts from an encoder-given reference path, the means of the chain whose drift is
    the linear part only, :math:`(A_p + A_i) z + b_p + b_i` (a parallel scan), and
    linearises ``sweeps`` times: every sub-step at once about the current reference,
    then (all but the last time) the means of that chain by the parallel scan are the
    next reference (a fixed-point sweep). With :math:`k` linearisations the first
    :math:`k` sub-steps are linearised exactly where ``"sequential"`` linearises them,
    and the remainder at a reference that converges to it (the same fixed point), so
    both define the same model in the limit; each costs one batched MLP evaluation, one
    batched transition and one scan instead of a Python step per sub-step (issue 27: the
    non-linear variant was 1.9x the torchsde peer per training step, sequential over the
    intervals). Why a fixed-point sweep and not an encoder head for :math:`r`: a
    reference the encoder may place freely changes the prior's linearisation and so the
    model the ELBO scores; the sweeps tie it to the posterior's own mean. Default
    ``sweeps=1`` (linearise once, at the linear-part path): on pendulum interpolation and
    extrapolation and Lorenz-63 interpolation (200 steps, 3 seeds;
    benchmarks/results/sdevi_nonlinear_linearisation_cpu.json) it scored as the
    sequential scheme (normalised MSE 0.0701 / 0.358 / 0.177 against 0.0704 / 0.359 /
    0.178, which two linearisations matched to four decimals) and trained 2.3-3.5x
    faster.

``"complex"``
    a complex latent :math:`z \in \mathbb C^d` with *diagonal* complex drifts,
    :math:`dz = (\lambda \odot z + \beta)\,dt + L\,dW` (circular complex noise): prior
    :math:`\lambda_p = -\mathrm{softplus}(a) + i\omega` (oscillatory modes with learnable
    frequencies, started spread over ``[0, 2\pi \cdot d/2]`` per unit time), posterior
    :math:`\lambda_i, \beta_i, L_i` per interval from the encoder; the decoder reads
    :math:`y = \mathrm{Re}(Hz) + h_0`. A diagonalisable real linear system is diagonal
    in its complex eigenbasis and the decoder absorbs the change of basis, so nothing is
    lost against a real latent of size :math:`2d`, and the transitions are closed forms
    in :math:`O(d^2)` instead of a matrix exponential. Gradients flow through those closed
    forms by torch's complex autograd (no real-only ODE adjoint is involved).

Encoder (all variants): a bidirectional GRU reads every time point of an episode
(values and masks of the *visible* entries, the gaps to both neighbours) and emits each
interval's posterior parameters from the states at its two ends, and :math:`q(z(t_1))`
from the first. Hidden time points (interpolation, extrapolation targets) stay in the
chain with their values masked out, so the posterior at a target time is the model's
prediction there, with the predictive variance :math:`HP_iH^\top + R` as its uncertainty.
The likelihood scores every observed value (see :mod:`simsci.models._series`).

Inference (``inference=``): ``"amortised"`` (default, every variant) is the encoder
above. ``"exact"`` (linear variant with the linear decoder) finds q in closed form: the
family holds the exact posterior of a linear-Gaussian model, and the Kalman smoother
(:func:`~simsci.models.sdevi.kalman_smoother`) computes it, so q is the optimum of the
ELBO for the current prior and decoder and training is maximum likelihood. With y_v the
values the posterior sees and y_h the hidden ones, :math:`\mathrm{KL}(q \| p) = E_q
\log p(y_v \mid z) - \log p(y_v)` and the ELBO is :math:`\log p(y_v) + E_q \log p(y_h
\mid z)`: the exact log evidence when nothing is hidden. Why: on linear-SDE data the
amortised encoder stays well short of the optimum (interpolation error 2-3x the true
smoother's, noise learned several times too large; benchmarks/bench_sdevi_linear.py),
an amortisation gap the closed form removes where it applies. Its cost is a sequential
pass over the time points (the filter and the smoother), where the amortised chain is a
parallel scan. A head that reads the encoder's summary (``head_inputs``) runs the encoder
for it (trained by the head's loss alone); the default heads of classification do not. Its
prior starts
with time scales spread over the frequency band (:meth:`SDEVI._spread_time_scales`):
there the prior is the whole model, and where it starts decides what a short training
reaches.

Decoders: ``"linear"`` (:math:`y = Hz + h_0 + \varepsilon`, exact expectations) or
``"mlp"`` (a tanh MLP; expectations by the unscented transform); real variants only.

Per-episode heads (classification, regression) read what ``head_inputs`` names
(:data:`HEAD_INPUTS`). Regression's default: the posterior means at the first and last
time point, their average over the episode, and the encoder's two GRU states that have
read the whole episode (the forward one at its end, the backward one at its start). The
encoder is the amortised posterior's own input; without it the head saw only an
8-dimensional latent tuned to reconstruct 576 pixels and regressed the pendulum-image
angle barely better than the label mean (normalised MSE 0.91 vs 1.38; GRU-Δt 0.07); each
mode's energy cost that row accuracy too (0.114 against 0.061).

Classification's default: with ``inference="amortised"`` the same plus each latent
coordinate's log mean energy :math:`\log \overline{E_q |z_k|^2}` (how strongly each mode
moves); with ``inference="exact"`` pooled statistics of the posterior over the episode
only, per coordinate the average, the spread (log standard deviation over time) of its
posterior mean, and the energy. On BasicMotions (36 training episodes, 4 classes;
benchmarks/bench_sdevi.py, 150 steps, 3 seeds, test accuracy;
``results/sdevi_basicmotions_cpu.json``) exact inference at lr 1e-2 reached 0.975 ±
0.025 with those, against 0.642 ± 0.072 with the amortised default and the latent SDE's
0.800 ± 0.050: the GRU summary, which exact inference trains by the head's loss alone,
fitted the 36 episodes (test cross-entropy 1.55 against 0.07); without it, means at the
ends, average and energy: 0.908 ± 0.029; energy alone and spread alone 0.992 ± 0.014
each, but energy alone fell to 0.759 on JapaneseVowels (60 steps, seed 0; the pooled
three 0.938), whose speakers differ in level more than in movement. Amortised inference
keeps the encoder: there it is the posterior's own, trained by the ELBO too, and
JapaneseVowels needs it (about 0.95 with it at 60 steps, 0.55-0.66 with the pooled
inputs or the energy alone), though on BasicMotions (lr 3e-3) the energy alone gave 0.742
± 0.058 against its 0.592 ± 0.052.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from simsci.integrate import expm, lti_transition
from simsci.models._series import SeriesModel, series_data_kwargs
from simsci.models.sdevi._elbo import (
    _gaussian_expected,
    linear_expected_loglik,
    pad_identity,
    unscented_expected_loglik,
)
from simsci.models.sdevi._gauss_markov import chain_kl, propagate, propagate_means

__all__ = ["SDEVI", "VARIANTS", "INFERENCE", "HEAD_INPUTS", "noise_from_data"]

#: the prior's initial damping ratio of each rotation block (decay / frequency)
DAMPING = 0.5
#: the SDEVI variants
VARIANTS = ("linear", "nonlinear", "complex")
#: where the non-linear variant linearises its drift (see the module docstring)
LINEARISATIONS = ("parallel", "sequential")
#: how q is found: by the encoder (any variant) or in closed form (linear-Gaussian only)
INFERENCE = ("amortised", "exact")
_DECODERS = ("linear", "mlp")
#: what a per-episode head may read (``head_inputs=``), in the order it reads them
HEAD_INPUTS = ("ends", "average", "encoder", "spread", "energy")
#: what the heads read before ``head_inputs`` (regression's default still)
LEGACY_HEAD_INPUTS = ("ends", "average", "encoder")
#: the heads' default inputs per (task, inference) (``head_inputs=None``; see the module
#: docstring for the measurements)
_DEFAULT_HEAD_INPUTS = {
    ("classification", "amortised"): (*LEGACY_HEAD_INPUTS, "energy"),
    ("classification", "exact"): ("average", "spread", "energy"),
    ("regression", "amortised"): LEGACY_HEAD_INPUTS,
    ("regression", "exact"): LEGACY_HEAD_INPUTS,
}


def _tril(raw: torch.Tensor, d: int) -> torch.Tensor:
    """(..., d*d) -> lower-triangular (..., d, d) with a softplus-positive diagonal."""
    M = raw.reshape(*raw.shape[:-1], d, d)
    diag = nn.functional.softplus(M.diagonal(dim1=-2, dim2=-1)) + 1e-3
    return torch.tril(M, -1) + torch.diag_embed(diag)


def _spread(band: tuple[float, float], k: int) -> torch.Tensor:
    """k frequencies spaced geometrically over band (one: the geometric mean)."""
    if k <= 0:
        return torch.zeros(0)
    if k == 1:
        return torch.tensor([math.sqrt(band[0] * band[1])])
    return torch.logspace(math.log10(band[0]), math.log10(band[1]), k)


def _ctril(raw_re: torch.Tensor, raw_im: torch.Tensor, d: int) -> torch.Tensor:
    """Complex lower-triangular (..., d, d) with a positive real diagonal."""
    im = raw_im.reshape(*raw_im.shape[:-1], d, d)
    return torch.complex(_tril(raw_re, d), torch.tril(im, -1))


class _DriftMLP(nn.Module):
    """g(z) = W2 tanh(W1 z + b1) + b2 with its Jacobian W2 diag(1 - tanh^2) W1."""

    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.inner = nn.Linear(d, hidden)
        self.outer = nn.Linear(hidden, d)
        nn.init.zeros_(self.outer.weight)  # start from the linear prior
        nn.init.zeros_(self.outer.bias)

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.tanh(self.inner(z))  # (B, h)
        J = torch.einsum("dh,bh,he->bde", self.outer.weight, 1 - a**2, self.inner.weight)
        return self.outer(a), J


def _affine_exp(A: torch.Tensor, b: torch.Tensor, h: torch.Tensor, steps: torch.Tensor):
    """``(F, c)`` of ``dz = (A z + b) dt`` over ``h``: ``exp(h [[A, b], [0, 0]])``'s top
    blocks; A (..., d, d), b (..., d), h and ``steps`` (...). Where ``steps`` is False
    (padding) the identity map (:func:`pad_identity`)."""
    d = A.shape[-1]
    top = torch.cat([A, b[..., None]], -1) * h[..., None, None]
    E = expm(torch.cat([top, torch.zeros_like(top[..., :1, :])], -2))
    return pad_identity((E[..., :d, :d], E[..., :d, d]), steps)


def noise_from_data(trajectories, data_std, max_episodes: int = 64) -> list[float]:
    r"""Each channel's observation-noise variance, estimated from the data, normalised
    by ``data_std`` (D,): a starting value for SDEVI's R.

    Every observed value with an observed neighbour on each side (in its channel) is
    compared with the straight line through them: for :math:`y_j = s(t_j) +
    \varepsilon_j` and weight :math:`w = (t_j - t_{j-1}) / (t_{j+1} - t_{j-1})`, the
    residual :math:`e = y_j - (1 - w) y_{j-1} - w y_{j+1}` has variance :math:`R (1 +
    (1-w)^2 + w^2)` plus the signal's own departure from a line, which short gaps keep
    small. R is the median of :math:`e^2 / (1 + (1-w)^2 + w^2)` over the 0.455 median
    of a :math:`\chi^2_1` (robust to the larger departures at the longest gaps),
    clipped to [1e-4, 1] in normalised units. Rough channels (a velocity driven by
    white noise) are overestimated; training corrects it from there.
    """
    residuals: list[list[float]] = [[] for _ in data_std]
    for i in range(min(len(trajectories), max_episodes)):
        ep = trajectories[i]
        t = np.asarray(ep["t"], dtype=np.float64)
        x = np.asarray(ep["x"], dtype=np.float64).reshape(len(t), -1)
        seen = np.isfinite(x)
        if "mask" in ep:
            seen &= np.asarray(ep["mask"], bool).reshape(x.shape)
        for c in range(x.shape[1]):
            idx = np.flatnonzero(seen[:, c])
            if len(idx) < 3:
                continue
            tp, tj, tn = t[idx[:-2]], t[idx[1:-1]], t[idx[2:]]
            w = (tj - tp) / (tn - tp)
            y = x[idx, c]
            e = y[1:-1] - (1 - w) * y[:-2] - w * y[2:]
            residuals[c].extend((e**2 / (1 + (1 - w) ** 2 + w**2)).tolist())
    out = []
    for c, std in enumerate(data_std):
        r = np.median(residuals[c]) / 0.4549 if residuals[c] else 0.05 * std**2
        out.append(float(np.clip(r / std**2, 1e-4, 1.0)))
    return out


class SDEVI(SeriesModel):
    r"""SDEVI (see the module docstring for the model and its variants).

    Args:
        obs_dim: channels D. latent_dim: d (complex: d complex modes).
        hidden_dim: GRU width. variant: "linear", "nonlinear" or "complex".
        decoder: "linear" or "mlp" (real variants). substeps: local-linearisation
            sub-steps per interval (nonlinear). drift_hidden: width of the drift MLP.
        linearisation: "parallel" (default) or "sequential": where the non-linear
            variant linearises its drift (the module docstring); sweeps: the parallel
            scheme's linearisations (>= 1; default 1: the linear-part path itself).
        frequency_band: (lowest, highest) angular frequency of the prior's initial
            oscillatory modes, in model time units (``from_data``: one period per
            ``time_scale`` up to the Nyquist frequency of the median gap).
        inference: "amortised" (the encoder) or "exact" (the Kalman smoother's
            posterior; linear variant and linear decoder only).
        noise_init: the observation noise variance R to start from, per channel or one
            for all, in normalised units (default 0.05); ``from_data(...,
            noise_init="data")`` estimates it from the data (:func:`noise_from_data`).
        head_inputs: what the per-episode head reads, any of :data:`HEAD_INPUTS`:
            ``"ends"`` the posterior means at the first and last time point,
            ``"average"`` their average over the episode, ``"encoder"`` the encoder's
            two GRU states that have read the whole episode, ``"spread"`` each latent
            coordinate's log standard deviation of the posterior mean over the
            episode, ``"energy"`` each coordinate's log mean energy
            :math:`\log \overline{E_q |z_k|^2}`. None: the default of the task and
            inference (regression: ends, average, encoder; classification: the same
            and energy, or with ``inference="exact"`` average, spread, energy; see the
            module docstring for the measurements). With
            ``inference="exact"`` and no ``"encoder"`` the encoder is not run at all.
        head_samples: train the head on reparameterised draws of the posterior: at
            each time point every latent coordinate is drawn from its Gaussian marginal
            :math:`z_k = m_k + \sqrt{P_{kk}}\,\varepsilon` (complex modes: circular
            noise), and the head's ``ends``/``average``/``spread`` read the draws and
            ``energy`` reads :math:`|z_k|^2`; in evaluation (``model.eval()``) the head
            reads the posterior means and moments. Noise on the head's input, scaled by
            the posterior's own uncertainty, as the latent SDE's sampled path gives. On
            BasicMotions (exact inference) it helped a head on the means at the ends,
            average and energy (0.908 → 0.958) and hurt one on the pooled energy and
            spread (0.975 → 0.808: the draws' own variance swamps the modes' spread),
            so it is off.
        head_dropout: dropout probability on the head's input features (training only).
        label_smoothing: label smoothing of the classification head's cross-entropy.
            Both 0 by default: with the energy and spread as inputs, dropout 0.3 and
            smoothing 0.1 left BasicMotions at 0.975 ± 0.025 (test cross-entropy 0.24
            against 0.07).
        Task arguments (task, hide_fraction, extrapolate_at, labels, normalisation,
        time_scale): see :class:`simsci.models._series.SeriesModel`.
    """

    def __init__(
        self,
        obs_dim: int,
        latent_dim: int = 8,
        hidden_dim: int = 64,
        variant: str = "linear",
        decoder: str = "linear",
        substeps: int = 1,
        drift_hidden: int = 64,
        linearisation: str = "parallel",
        sweeps: int = 1,
        frequency_band: tuple[float, float] | None = None,
        inference: str = "amortised",
        noise_init=None,
        head_inputs=None,
        head_samples: bool = False,
        head_dropout: float = 0.0,
        label_smoothing: float = 0.0,
        **series,
    ):
        super().__init__(obs_dim, **series)
        if variant not in VARIANTS:
            from simsci.errors import unknown_name

            raise unknown_name("SDEVI variant", variant, VARIANTS)
        if decoder not in _DECODERS:
            from simsci.errors import unknown_name

            raise unknown_name("SDEVI decoder", decoder, _DECODERS)
        if variant == "complex" and decoder != "linear":
            raise ValueError("the complex variant has a linear decoder y = Re(Hz) + h0 only")
        if inference not in INFERENCE:
            from simsci.errors import unknown_name

            raise unknown_name("SDEVI inference", inference, INFERENCE)
        if inference == "exact" and (variant, decoder) != ("linear", "linear"):
            raise ValueError(
                "inference='exact' (the Kalman smoother's posterior) needs a linear-Gaussian "
                f"model: variant='linear' and decoder='linear', got {variant!r}, {decoder!r}"
            )
        self.inference = inference
        if head_inputs is not None:
            if isinstance(head_inputs, str):
                head_inputs = (head_inputs,)
            unknown = [h for h in head_inputs if h not in HEAD_INPUTS]
            if unknown or not head_inputs:
                raise ValueError(
                    f"head_inputs must be a non-empty selection of {HEAD_INPUTS}, got "
                    f"{head_inputs!r}"
                )
        if not 0.0 <= head_dropout < 1.0:
            raise ValueError(f"head_dropout must lie in [0, 1), got {head_dropout!r}")
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must lie in [0, 1), got {label_smoothing!r}")
        chosen = head_inputs
        if head_inputs is None:
            chosen = _DEFAULT_HEAD_INPUTS.get((self.task, inference), ())
        self.head_inputs = tuple(h for h in HEAD_INPUTS if h in chosen)  # the reading order
        self.head_samples, self.head_dropout = bool(head_samples), float(head_dropout)
        self.label_smoothing = float(label_smoothing)
        for name, value in (
            ("latent_dim", latent_dim),
            ("hidden_dim", hidden_dim),
            ("substeps", substeps),
            ("drift_hidden", drift_hidden),
            ("sweeps", sweeps),
        ):
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        D, d = self.obs_dim, int(latent_dim)
        self.latent_dim, self.variant, self.decoder_kind = d, variant, decoder
        self.substeps = int(substeps)
        if linearisation not in LINEARISATIONS:
            from simsci.errors import unknown_name

            raise unknown_name("SDEVI linearisation", linearisation, LINEARISATIONS)
        self.linearisation, self.sweeps = linearisation, int(sweeps)
        band = (2 * math.pi, 2 * math.pi * d) if frequency_band is None else frequency_band
        band = (float(band[0]), float(band[1]))
        if not (0 < band[0] <= band[1] and math.isfinite(band[1])):
            raise ValueError(f"frequency_band must be 0 < low <= high, got {frequency_band}")
        self.encoder = nn.GRU(2 * D + 2, hidden_dim, batch_first=True)
        self.encoder_back = nn.GRU(2 * D + 2, hidden_dim, batch_first=True)
        if variant == "complex":
            # per interval: Re/Im of lambda (2d), of beta (2d), of L (2 d^2)
            self.to_interval = nn.Linear(4 * hidden_dim, 4 * d + 2 * d * d)
            self.to_initial = nn.Linear(2 * hidden_dim, 2 * d + 2 * d * d)
            self.prior_a = nn.Parameter(torch.zeros(d))
            # one non-oscillating mode (trends), the rest spread over the band
            omega = torch.cat([torch.zeros(1), _spread(band, d - 1)])
            self.prior_omega = nn.Parameter(omega)
            self.prior_b = nn.Parameter(torch.zeros(2 * d))
            self.H_re = nn.Parameter(torch.randn(D, d) / math.sqrt(d))
            self.H_im = nn.Parameter(torch.randn(D, d) / math.sqrt(d))
            self.h0 = nn.Parameter(torch.zeros(D))
        else:
            self.to_interval = nn.Linear(4 * hidden_dim, d * d + d + d * d)
            self.to_initial = nn.Linear(2 * hidden_dim, d + d * d)
            self.prior_a = nn.Parameter(torch.zeros(d))
            # 2x2 rotation blocks with frequencies spread over the band (an odd last
            # coordinate only decays), plus a little noise to break symmetry
            W = 0.1 * torch.randn(d, d)
            for k, w in enumerate(_spread(band, d // 2)):
                W[2 * k, 2 * k + 1] += w
                W[2 * k + 1, 2 * k] -= w
            # stored in units of the band's geometric-mean frequency, so an Adam step
            # (~lr in parameter units) moves a frequency by ~lr x that scale: stored
            # raw, the modes started at 18 and 52 rad per unit of model time needed
            # thousands of steps at lr 3e-3 to reach a 24 rad/unit oscillation (the
            # linear-SDE benchmark), and the model explained it as noise meanwhile
            self.freq_scale = math.sqrt(band[0] * band[1])
            self.prior_w_unit = nn.Parameter(W / self.freq_scale)
            self.prior_b = nn.Parameter(torch.zeros(d))
            if decoder == "linear":
                self.H = nn.Linear(d, D)
            else:
                self.H = nn.Sequential(
                    nn.Linear(d, drift_hidden), nn.Tanh(), nn.Linear(drift_hidden, D)
                )
        self.drift = _DriftMLP(d, drift_hidden) if variant == "nonlinear" else None
        self.prior_l = nn.Parameter(torch.zeros(d))
        self.prior_p0 = nn.Parameter(torch.zeros(d))
        if inference == "exact":
            self._spread_time_scales(band)
        noise = [0.05] * D if noise_init is None else noise_init
        noise = [float(v) for v in (noise if np.ndim(noise) else [noise] * D)]
        if len(noise) != D or not all(math.isfinite(v) and v > 0 for v in noise):
            raise ValueError(
                f"noise_init must be one positive variance or {D} (normalised units), got "
                f"{noise_init!r}"
            )
        self.log_r = nn.Parameter(torch.tensor(noise).log())
        # see head_inputs and _summary
        width = {
            "ends": 2 * d * (2 if variant == "complex" else 1),
            "average": d * (2 if variant == "complex" else 1),
            "encoder": 2 * int(hidden_dim),
            "spread": d,
            "energy": d,
        }
        self._head_widths, self._head_inputs_default = width, head_inputs is None
        self._build_head(sum(width[h] for h in self.head_inputs), hidden_dim)
        self.init_args = {
            **self.series_args,
            "latent_dim": d,
            "hidden_dim": int(hidden_dim),
            "variant": variant,
            "decoder": decoder,
            "substeps": self.substeps,
            "drift_hidden": int(drift_hidden),
            "linearisation": linearisation,
            "sweeps": self.sweeps,
            "frequency_band": list(band),
            "inference": inference,
            "noise_init": None if noise_init is None else noise,
            "head_inputs": None if head_inputs is None else list(self.head_inputs),
            "head_samples": self.head_samples,
            "head_dropout": self.head_dropout,
            "label_smoothing": self.label_smoothing,
        }

    @property
    def _reads_energy(self) -> bool:
        """Whether the head reads each mode's energy (by default classification only)."""
        return self.head is not None and "energy" in self.head_inputs

    def _spread_time_scales(self, band: tuple[float, float]) -> None:
        r"""Exact inference starts its prior with time scales spread over what the data
        resolve: rotation block k (frequency :math:`\omega_k`) decays at :math:`\zeta\omega_k`,
        :math:`\zeta` = ``DAMPING`` (underdamped, about one visible period per memory),
        an odd last coordinate at the band's lowest frequency; the diffusion gives each
        coordinate a stationary variance of 1 (:math:`\ell^2 = 2\,\mathrm{decay}`,
        the data are normalised) and z(t_1) starts there too.

        Why: every mode used to start at decay 1 and diffusion 0.69 per model time unit
        whatever the data. On climate (64-day windows, anomalies of 1-5 days' memory:
        decays of 13-64 per unit) the Kalman smoother of that prior interpolated no better
        than the window mean after 200 steps (0.616 vs 0.610) and needed 600 to get to
        0.521; started here it reached 0.453 in 200 (benchmarks/README.md, SDEVI). Not for
        the amortised encoder: there the prior enters through the KL only, climate did
        not move (0.650 either way) and pendulum-50 hit a non-finite gradient at step 16
        (the encoder's posterior against fast, strongly diffusing prior modes)."""
        d = self.latent_dim
        freqs = _spread(band, d // 2)
        decay = torch.full((d,), band[0])
        decay[: 2 * len(freqs)] = DAMPING * freqs.repeat_interleave(2)
        ell = torch.sqrt(2 * decay)
        with torch.no_grad():
            self.prior_a.copy_(torch.log(decay - 1e-2))  # decay = exp(a) + 0.01
            self.prior_l.copy_(ell + torch.log(-torch.expm1(-ell)))  # softplus^-1
            self.prior_p0.fill_(math.log(math.expm1(1.0)))  # softplus^-1(1)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # checkpoints from before the scaled parametrisation stored W itself as prior_w
        old, new = prefix + "prior_w", prefix + "prior_w_unit"
        if old in state_dict and new not in state_dict and self.variant != "complex":
            state_dict[new] = state_dict.pop(old) / self.freq_scale
        key = prefix + "head.0.weight"
        if self.head is not None and key in state_dict and self._head_inputs_default:
            # checkpoints from before head_inputs (built with the default) read the
            # encoder's summary too: rebuild the head's first layer for what they read
            have = state_dict[key].shape[1]
            for legacy in (("ends", "average", "encoder", "energy"), LEGACY_HEAD_INPUTS):
                width = sum(self._head_widths[h] for h in legacy)
                if have == width != self.head[0].in_features:
                    old = self.head[0]
                    self.head[0] = nn.Linear(width, old.out_features).to(old.weight)
                    self.head_inputs = legacy
                    self.init_args["head_inputs"] = list(legacy)
                    break
        # classification heads from before the energy features read d fewer inputs (the
        # last ones): zero weights for them give the old head's outputs exactly
        if self._reads_energy and key in state_dict:
            weight, width = state_dict[key], self.head[0].in_features
            if weight.shape[1] == width - self.latent_dim:
                state_dict[key] = torch.cat(
                    [weight, weight.new_zeros(weight.shape[0], self.latent_dim)], 1
                )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @classmethod
    def from_data(cls, trajectories, *, window: int | None = None, task=None, **overrides):
        """A model sized and normalised for a dataset; the prior's initial frequencies
        span what the data can resolve: one period per ``time_scale`` (the window) up to
        the Nyquist frequency of the median gap between time points. Gradient descent
        moves a frequency slowly and through local optima, so where it starts matters."""
        model_args = {k: v for k, v in overrides.items() if k != "frequency_band"}
        kwargs = series_data_kwargs(trajectories, window, cls.__name__, task or "interpolation")
        if isinstance(overrides.get("noise_init"), str):
            if overrides["noise_init"] != "data":
                raise ValueError(
                    f"noise_init must be a variance, a list of them or 'data', got "
                    f"{overrides['noise_init']!r}"
                )
            std = kwargs.get("data_std", [1.0] * kwargs["obs_dim"])
            overrides = {**overrides, "noise_init": noise_from_data(trajectories, std)}
        scale = float({**kwargs, **model_args}.get("time_scale", 1.0))
        gaps = []
        for i in range(min(len(trajectories), 64)):
            t = np.asarray(trajectories[i]["t"], dtype=np.float64)
            gaps.append(np.diff(t if window is None else t[:window]))
        gap = float(np.median(np.concatenate(gaps))) if gaps else 0.0
        if gap > 0 and "frequency_band" not in overrides:
            low, high = 2 * math.pi, math.pi * scale / gap
            overrides = {**overrides, "frequency_band": (low, max(low, high))}
        return cls(**{**kwargs, **overrides})

    # ----------------------------------------------------------------- pieces
    def _dtype(self) -> torch.dtype:
        return self.log_r.dtype  # compute in the parameters' precision

    def prior(self, dtype=None, device=None) -> dict:
        """The prior SDE's parameters (real variants: A, b, L, m0, P0; complex: lam,
        beta, L, m0, P0 with complex entries)."""
        dtype = dtype or self._dtype()
        device = device or self.log_r.device
        d = self.latent_dim
        decay = self.prior_a.exp() + 1e-2  # log-parametrised: relative steps
        L = torch.diag(nn.functional.softplus(self.prior_l) + 1e-3)
        P0 = torch.diag(nn.functional.softplus(self.prior_p0) + 1e-3)
        if self.variant == "complex":
            cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
            return {
                "lam": torch.complex(-decay, self.prior_omega).to(device, cdtype),
                "beta": torch.complex(self.prior_b[:d], self.prior_b[d:]).to(device, cdtype),
                "L": L.to(device, cdtype),
                "m0": torch.zeros(d, dtype=cdtype, device=device),
                "P0": P0.to(device, cdtype),
            }
        W = self.freq_scale * self.prior_w_unit
        return {
            "A": (-torch.diag(decay) + 0.5 * (W - W.T)).to(device, dtype),
            "b": self.prior_b.to(device, dtype),
            "L": L.to(device, dtype),
            "m0": torch.zeros(d, dtype=dtype, device=device),
            "P0": P0.to(device, dtype),
        }

    def encode(self, s: torch.Tensor, xn: torch.Tensor, visible: torch.Tensor, valid) -> dict:
        """Posterior parameters from the visible entries. s (B, n) scaled times, xn
        (B, n, D) normalised, visible (B, n, D) bool, valid (B, n) bool."""
        B, n, _ = xn.shape
        d = self.latent_dim
        gaps = torch.diff(s, dim=1).clamp_min(0)
        prev = torch.cat([torch.zeros_like(s[:, :1]), gaps], 1)
        nxt = torch.cat([gaps, torch.zeros_like(s[:, :1])], 1)
        vis = visible.to(xn.dtype)
        inp = torch.cat([xn * vis, vis, prev[..., None], nxt[..., None]], -1)
        # Two one-directional GRUs on the padded batch instead of a packed bidirectional
        # one (packing cost twice the GRU itself): padding sits after each row's valid
        # steps, so the forward pass is exact as it is, and the backward pass runs over
        # each row reversed within its own length (an involution: the same gather undoes
        # it), so no padding reaches a valid step either way.
        lengths = valid.sum(1).clamp(min=1)
        j = torch.arange(n, device=xn.device)
        rev = torch.where(j < lengths[:, None], lengths[:, None] - 1 - j, j)
        rev = rev[..., None]
        forward, _ = self.encoder(inp)
        backward, _ = self.encoder_back(torch.gather(inp, 1, rev.expand_as(inp)))
        backward = torch.gather(backward, 1, rev.expand_as(backward))
        h = torch.cat([forward, backward], -1)
        # the whole episode as the encoder read it: the forward GRU at the last valid
        # step and the backward GRU at the first (the per-episode heads read it)
        last = (lengths - 1)[:, None, None].expand(-1, 1, forward.shape[-1])
        summary = torch.cat([forward.gather(1, last)[:, 0], backward[:, 0]], -1)
        raw = self.to_interval(torch.cat([h[:, :-1], h[:, 1:]], -1))
        init = self.to_initial(h[:, 0])
        if self.variant == "complex":
            re = 3.0 * torch.tanh(raw[..., :d] / 3.0)
            lam = torch.complex(re, raw[..., d : 2 * d])
            beta = torch.complex(raw[..., 2 * d : 3 * d], raw[..., 3 * d : 4 * d])
            L = _ctril(raw[..., 4 * d : 4 * d + d * d], raw[..., 4 * d + d * d :], d)
            m1 = torch.complex(init[..., :d], init[..., d : 2 * d])
            l1 = _ctril(init[..., 2 * d : 2 * d + d * d], init[..., 2 * d + d * d :], d)
            return {
                "m1": m1, "P1": l1 @ l1.mH, "lam": lam, "beta": beta, "L": L,
                "summary": summary,
            }  # fmt: skip
        A = 3.0 * torch.tanh(raw[..., : d * d].reshape(B, n - 1, d, d) / 3.0)
        b = raw[..., d * d : d * d + d]
        L = _tril(raw[..., d * d + d :], d)
        l1 = _tril(init[..., d:], d)
        return {
            "m1": init[..., :d], "P1": l1 @ l1.transpose(-1, -2), "A": A, "b": b, "L": L,
            "summary": summary,
        }  # fmt: skip

    def _linearised_chains(self, post: dict, prior: dict, dt: torch.Tensor, steps):
        """Non-linear variant: posterior and prior transitions on the sub-step grid by
        local linearisation at the posterior mean; returns the two transition triples
        (B, (n-1) K, ...) and the posterior marginals on the sub-step grid (B, (n-1) K + 1,
        ...), of which every K-th is at an observation time."""
        K = self.substeps
        B, d = post["m1"].shape
        m, P = post["m1"], post["P1"]
        means, covs, trans_q, trans_p = [m], [P], [], []
        A_p, b_p, L_p = prior["A"], prior["b"], prior["L"].expand(B, d, d)
        for i in range(dt.shape[1]):
            h = (dt[:, i] / K).repeat(2)
            pad = steps[:, i].repeat(2)
            L_both = torch.cat([post["L"][:, i], L_p])
            for _ in range(K):
                g, Jg = self.drift(m)
                J_p = A_p + Jg
                f_p = m @ A_p.T + b_p + g
                J_q = J_p + post["A"][:, i]
                f_q = f_p + (post["A"][:, i] @ m[..., None])[..., 0] + post["b"][:, i]
                # f(z) ~ f(m) + J (z - m): the affine drift J z + (f(m) - J m)
                A_both = torch.cat([J_q, J_p])
                b_both = torch.cat([f_q, f_p]) - (A_both @ torch.cat([m, m])[..., None])[..., 0]
                F, c, Q = pad_identity(lti_transition(A_both, b_both, L_both, h), pad)
                trans_q.append((F[:B], c[:B], Q[:B]))
                trans_p.append((F[B:], c[B:], Q[B:]))
                m = (F[:B] @ m[..., None])[..., 0] + c[:B]
                P = F[:B] @ P @ F[:B].transpose(-1, -2) + Q[:B]
                P = 0.5 * (P + P.transpose(-1, -2))
                means.append(m)
                covs.append(P)

        def stack(items):
            if not items:  # one time point per episode: no transition at all
                return (m.new_zeros(B, 0, d, d), m.new_zeros(B, 0, d), m.new_zeros(B, 0, d, d))
            return tuple(torch.stack([it[j] for it in items], 1) for j in range(3))

        return stack(trans_q), stack(trans_p), (torch.stack(means, 1), torch.stack(covs, 1))

    def _linearised_chains_parallel(self, post: dict, prior: dict, dt: torch.Tensor, steps):
        """:meth:`_linearised_chains` by fixed-point sweeps over a reference path (the
        module docstring): every sub-step linearised at once; same outputs and shapes.

        The sweeps move the means only: the mean of a locally linearised step,
        :math:`m' = F m + c`, does not depend on the covariance, so a sweep needs the
        affine part :math:`(F, c)` (one (d+1)-square exponential per sub-step) and a scan
        over the means. The full transitions with their noise (Van Loan's (2d+1)-square
        exponential) are built once, for both chains, at the final reference."""
        K = self.substeps
        m1, P1 = post["m1"], post["P1"]
        B, d = m1.shape
        n = dt.shape[1] * K  # sub-steps per episode
        fine = steps.repeat_interleave(K, dim=1)  # (B, n)
        h = (dt / K).repeat_interleave(K, dim=1)
        A_i, b_i = (post[k].repeat_interleave(K, dim=1) for k in ("A", "b"))
        A_p, b_p = prior["A"], prior["b"]

        def affine(A, b):  # the drift's linearisation at r: J z + (f(r) - J r)
            return _affine_exp(A, b, h, fine)

        def linearised(r):  # both chains' drifts linearised at r (B, n, d)
            g, Jg = self.drift(r.reshape(-1, d))
            g, J_p = g.reshape(B, n, d), A_p + Jg.reshape(B, n, d, d)
            f_p = r @ A_p.T + b_p + g
            J_q = J_p + A_i
            f_q = f_p + (A_i @ r[..., None])[..., 0] + b_i
            minus = (J_q @ r[..., None])[..., 0], (J_p @ r[..., None])[..., 0]
            return (J_q, f_q - minus[0]), (J_p, f_p - minus[1])

        # the reference path: the means of the chain with the linear part of the drift
        ref = propagate_means(m1, *affine(A_p + A_i, b_p + b_i))  # (B, n + 1, d)
        for _ in range(self.sweeps - 1):
            ref = propagate_means(m1, *affine(*linearised(ref[:, :-1])[0]))
        (J_q, bq), (J_p, bp) = linearised(ref[:, :-1])  # each sub-step at its start
        L_p = prior["L"].expand(B, n, d, d)
        F, c, Q = pad_identity(
            lti_transition(
                torch.cat([J_q, J_p]), torch.cat([bq, bp]),
                torch.cat([post["L"].repeat_interleave(K, dim=1), L_p]), h.repeat(2, 1),
            ),
            fine.repeat(2, 1),
        )  # fmt: skip
        trans_q, trans_p = (F[:B], c[:B], Q[:B]), (F[B:], c[B:], Q[B:])
        return trans_q, trans_p, propagate(m1, P1, *trans_q)

    def _posterior_chain(self, batch: dict, visible: torch.Tensor) -> dict:
        """The posterior's marginals at every step and its KL to the prior."""
        dtype = self._dtype()
        x = batch["x"].to(dtype)
        xn = torch.nan_to_num(self.normalise(x))
        s = ((batch["t"] - batch["t"][:, :1]) / self.time_scale).to(dtype)
        valid = batch["valid"]
        if self.inference == "exact":
            return self._exact_chain(xn, s, visible, valid)
        steps = valid[:, 1:] & valid[:, :-1]
        # padded intervals get a dummy step whose transitions are then replaced by the
        # identity (pad_identity) and masked out of the KL
        dt = torch.where(steps, torch.diff(s, dim=1), torch.ones_like(s[:, 1:]))
        post = self.encode(s, xn, visible, valid)
        prior = self.prior(dtype, xn.device)
        B = xn.shape[0]
        if self.variant == "complex":
            # the posterior drift is the prior's plus the encoder's correction, so where
            # no data pulls it away (extrapolation) it follows the learned dynamics
            post["lam"] = prior["lam"] + post["lam"]
            post["beta"] = prior["beta"] + post["beta"]
            from simsci.models.sdevi._complex import (
                complex_chain_kl,
                complex_diag_transition,
                complex_propagate,
            )

            trans_q = complex_diag_transition(post["lam"], post["beta"], post["L"], dt)
            trans_p = complex_diag_transition(prior["lam"], prior["beta"], prior["L"], dt)
            trans_q = pad_identity(trans_q, steps, diagonal=True)
            trans_p = pad_identity(trans_p, steps, diagonal=True)
            means, covs = complex_propagate(post["m1"], post["P1"], *trans_q)
            m0, P0 = prior["m0"].expand_as(post["m1"]), prior["P0"].expand_as(post["P1"])
            kl = complex_chain_kl(
                post["m1"], post["P1"], trans_q, m0, P0, trans_p, mask=steps,
                marginals=(means, covs),
            )  # fmt: skip
        elif self.variant == "nonlinear":
            chains = (
                self._linearised_chains_parallel
                if self.linearisation == "parallel"
                else self._linearised_chains
            )
            trans_q, trans_p, fine_marg = chains(post, prior, dt, steps)
            means, covs = (v[:, :: self.substeps] for v in fine_marg)
            m0, P0 = prior["m0"].expand_as(post["m1"]), prior["P0"].expand_as(post["P1"])
            fine = steps.repeat_interleave(self.substeps, dim=1)
            kl = chain_kl(
                post["m1"], post["P1"], trans_q, m0, P0, trans_p, mask=fine, marginals=fine_marg
            )
        else:
            post["A"] = prior["A"] + post["A"]  # prior drift + correction, as above
            post["b"] = prior["b"] + post["b"]
            trans_q = pad_identity(lti_transition(post["A"], post["b"], post["L"], dt), steps)
            trans_p = pad_identity(lti_transition(prior["A"], prior["b"], prior["L"], dt), steps)
            means, covs = propagate(post["m1"], post["P1"], *trans_q)
            m0, P0 = prior["m0"].expand(B, -1), prior["P0"].expand(B, -1, -1)
            kl = chain_kl(
                post["m1"], post["P1"], trans_q, m0, P0, trans_p, mask=steps,
                marginals=(means, covs),
            )  # fmt: skip
        return {"xn": xn, "means": means, "covs": covs, "kl": kl, "summary": post["summary"]}

    def _exact_chain(self, xn, s, visible, valid) -> dict:
        r"""q = p(z | visible values) under the model itself, by the Kalman smoother.

        Its KL to the prior is :math:`E_q \log p(y_v \mid z) - \log p(y_v)` (q is the
        exact posterior given the visible values y_v), so the ELBO of all observed values
        is :math:`\log p(y_v) + E_q \log p(y_h \mid z)`: the exact log evidence when
        nothing is hidden, plus the closed-form expected log-likelihood of the hidden ones.
        """
        from simsci.models.sdevi._kalman import kalman_smoother

        prior = self.prior(xn.dtype, xn.device)
        W, h0 = self.H.weight, self.H.bias
        R = self.log_r.exp().clamp_min(1e-4)
        out = kalman_smoother(
            xn - h0, visible, s, prior["A"], prior["b"], prior["L"], prior["m0"], prior["P0"],
            W, R, valid=valid,
        )  # fmt: skip
        expected_visible, _, _ = linear_expected_loglik(
            xn - h0, visible & valid[..., None], out["means"], out["covs"], W, R
        )
        kl = expected_visible - out["loglik"]
        summary = None
        if self.head is not None and "encoder" in self.head_inputs:
            summary = self.encode(s, xn, visible, valid)["summary"]
        return {"xn": xn, "means": out["means"], "covs": out["covs"], "kl": kl, "summary": summary}

    def _expected(self, chain: dict, obs: torch.Tensor):
        """(E_q log p(y_obs) (B,), predictive mean, predictive variance), normalised."""
        R = self.log_r.exp().clamp_min(1e-4)
        xn, means, covs = chain["xn"], chain["means"], chain["covs"]
        if self.variant == "complex":
            from simsci.models.sdevi._complex import complex_predictive

            pred, var = complex_predictive(means, covs, torch.complex(self.H_re, self.H_im))
            pred = pred + self.h0
            return _gaussian_expected(xn, obs.bool(), pred, var, R), pred, var + R
        if self.decoder_kind == "linear":
            W, h0 = self.H.weight, self.H.bias
            expected, pred, var = linear_expected_loglik(xn - h0, obs, means, covs, W, R)
            return expected, pred + h0, var
        return unscented_expected_loglik(xn, obs, means, covs, self.H, R)

    # ----------------------------------------------------------------- the harness
    @property
    def hides_in_training(self) -> bool:
        r"""``inference="exact"`` hides nothing: its ELBO of every observed value is the
        exact log evidence, a sum of the one-step predictive log-likelihoods, so it
        trains prediction itself. Hidden values would instead be scored by
        :math:`E_q \log p(y_h \mid z)`, which is maximised by an R that also covers q's
        variance at those points (on linear-SDE data: noise 5x the truth with 30%
        hidden, 1.45x without, after 1500 steps)."""
        return self.inference != "exact"

    def objective(self, batch: dict, visible: torch.Tensor, observed: torch.Tensor) -> dict:
        chain = self._posterior_chain(batch, visible)
        expected, _, _ = self._expected(chain, observed)
        n_obs = observed.sum().clamp(min=1)
        out = {
            "loss": -(expected - chain["kl"]).sum() / n_obs,
            "kl": chain["kl"].sum() / n_obs,
            "expected_loglik": expected.sum() / n_obs,
        }
        if self.head is not None:
            out["features"] = self._summary(chain, batch["valid"])
        return out

    def elbo(self, batch: dict, visible: torch.Tensor | None = None) -> torch.Tensor:
        """The ELBO of every observed value, per episode (B,), normalised units; the
        encoder sees ``visible`` (default: everything observed)."""
        from simsci.models._series import observed_mask

        observed = observed_mask(batch)
        visible = observed if visible is None else visible & observed
        chain = self._posterior_chain(batch, visible)
        return self._expected(chain, observed)[0] - chain["kl"]

    def predict_steps(
        self, batch: dict, visible: torch.Tensor | None = None, variance: bool = False
    ):
        """Posterior predictive mean (and variance) at every step, data units (B, L, D)."""
        from simsci.models._series import observed_mask

        observed = observed_mask(batch)
        visible = observed if visible is None else visible & observed
        chain = self._posterior_chain(batch, visible)
        _, pred, var = self._expected(chain, observed)
        std, mean = self.data_std.to(pred.dtype), self.data_mean.to(pred.dtype)
        out = pred * std + mean
        return (out, var * std**2) if variance else out

    def features(self, batch: dict, visible: torch.Tensor) -> torch.Tensor:
        return self._summary(self._posterior_chain(batch, visible), batch["valid"])

    def _summary(self, chain: dict, valid: torch.Tensor) -> torch.Tensor:
        r"""The head's input (B, F): the parts ``head_inputs`` names, in the order of
        :data:`HEAD_INPUTS` (see the class docstring); with ``head_samples`` in training
        they are read from draws of the posterior marginals, with ``head_dropout`` in
        training some are dropped."""
        means, covs = chain["means"], chain["covs"]
        var = covs.diagonal(dim1=-2, dim2=-1).real  # (B, n, d)
        sampled = self.head_samples and self.training
        if sampled:
            eps = torch.randn_like(var)
            if means.is_complex():  # circular: E|eps|^2 = 1
                eps = torch.complex(eps, torch.randn_like(var)) / math.sqrt(2.0)
            means = means + var.clamp_min(0).sqrt() * eps
        w = valid.to(var.dtype)[..., None]
        count = w.sum(1).clamp(min=1)
        parts = []
        real = torch.cat([means.real, means.imag], -1) if means.is_complex() else means
        if "ends" in self.head_inputs:
            last = (valid.sum(1) - 1).clamp(min=0)
            final = real[torch.arange(real.shape[0], device=real.device), last]
            parts += [real[:, 0], final]
        if "average" in self.head_inputs:
            parts.append((real * w).sum(1) / count)
        if "encoder" in self.head_inputs:
            parts.append(chain["summary"])
        if "spread" in self.head_inputs:
            # log std over the episode of each coordinate's posterior mean (or draw)
            centre = (means * w).sum(1, keepdim=True) / count[:, None]
            spread = ((means - centre).abs() ** 2 * w).sum(1) / count
            parts.append(0.5 * torch.log(spread + 1e-6))
        if "energy" in self.head_inputs:
            # E_q |z_k|^2 averaged over the episode, per mode (log): how strongly each mode
            # moves, which the means at three times and the GRU states do not give
            # directly. Classification only by default: on the pendulum-image regression
            # (the final angle) it cost accuracy (non-linear 0.061 without, 0.114 with)
            second = means.abs() ** 2 + (0.0 if sampled else var)
            parts.append(torch.log((second * w).sum(1) / count + 1e-6))
        out = torch.cat(parts, -1)
        if self.head_dropout > 0:
            out = nn.functional.dropout(out, self.head_dropout, self.training)
        return out

    def _label_loss(self, batch: dict, visible: torch.Tensor, features=None) -> dict:
        if features is None:
            features = self.features(batch, visible)
        out = super()._label_loss(batch, visible, features)  # checks the labels too
        if self.task == "classification" and self.label_smoothing > 0:
            target = batch["label"].long().reshape(-1)
            smooth = nn.functional.cross_entropy(
                self.head(features), target, label_smoothing=self.label_smoothing
            )
            out = {"label_loss": smooth, "label_ce": out["label_loss"].detach()}
        return out
