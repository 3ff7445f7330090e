r"""The SDEVI evidence lower bound: expected log-likelihoods under Gaussian marginals.

With the posterior induced by an LTV SDE (per-interval :math:`A_i, b_i, L_i`, initial
:math:`q(z_1) = \mathcal N(m_1, P_1)`), its marginals :math:`q(z_i) = \mathcal N(m_i,
P_i)` follow from :func:`propagate`, and for a linear decoder :math:`y_i = H z_i +
\varepsilon`, :math:`\varepsilon \sim \mathcal N(0, \mathrm{diag}\,R)` the expected
log-likelihood is exact (:func:`linear_expected_loglik`):

.. math::
    \mathbb E_q \log p(y_{ik} \mid z_i) = -\tfrac12\Big[\frac{(y_{ik} - (Hm_i)_k)^2 +
    (HP_iH^\top)_{kk}}{R_k} + \log 2\pi R_k\Big]

summed over observed entries only; minus :func:`chain_kl` against the prior SDE's chain
over the same times. No path is sampled: the bound is a deterministic function of the
posterior's parameters, so its gradient has no Monte-Carlo noise. It never exceeds the
log evidence (:func:`kalman_log_likelihood` for a linear prior) and equals it when the
posterior is the exact smoothing distribution, which a Gauss–Markov chain can represent.

For a non-linear decoder :math:`g` the expectation has no closed form;
:func:`unscented_expected_loglik` takes it over the :math:`2d` sigma points
:math:`m \pm \sqrt d\,\mathrm{chol}(P)_{:,j}` (weights :math:`1/2d`; the unscented
transform of Julier & Uhlmann with :math:`\kappa = 0`): exact for quadratic :math:`g`,
deterministic, and :math:`2d` decoder calls per time point.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from simsci.integrate import lti_transition
from simsci.models.sdevi._gauss_markov import chain_kl, propagate, safe_cholesky

__all__ = [
    "linear_gaussian_elbo",
    "linear_expected_loglik",
    "unscented_expected_loglik",
    "sigma_points",
    "pad_identity",
]


def linear_expected_loglik(
    y: Tensor, obs: Tensor, means: Tensor, covs: Tensor, H: Tensor, R: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``(E_q log p(y) per episode (B,), predictive mean (B, n, D), its variance)``.

    y, obs (B, n, D) (obs: 0/1 or bool, where y counts); means (B, n, d), covs
    (B, n, d, d); H (D, d); R (D,). The predictive variance is diag(H P Hᵀ) + R.
    """
    obs = obs.bool()
    pred = means @ H.T
    var = ((H @ covs) * H).sum(-1)  # diag(H P H^T): (B, n, D)
    return _gaussian_expected(y, obs, pred, var, R), pred, var + R


def _gaussian_expected(y: Tensor, obs: Tensor, pred: Tensor, var: Tensor, R: Tensor) -> Tensor:
    """sum over observed entries of -1/2 [((y - pred)^2 + var) / R + log 2 pi R], (B,);
    ``torch.where`` (not a product with the mask), so nothing from unobserved entries,
    not even an inf, reaches the value or its gradient."""
    resid = torch.where(obs, y - pred, torch.zeros_like(pred))
    var = torch.where(obs, var, torch.zeros_like(var))
    ell = -0.5 * ((resid**2 + var) / R + torch.log(2 * math.pi * R))
    return torch.where(obs, ell, torch.zeros_like(ell)).sum(dim=(1, 2))


def sigma_points(means: Tensor, covs: Tensor) -> Tensor:
    """The 2d unscented sigma points ``m ± sqrt(d) chol(P)[:, j]``: (2d, ..., d)."""
    d = means.shape[-1]
    chol = safe_cholesky(covs, "posterior marginal covariance")  # (..., d, d)
    cols = math.sqrt(d) * chol.transpose(-1, -2)  # (..., d, d): row j = column j of chol
    offsets = torch.cat([cols, -cols], dim=-2)  # (..., 2d, d)
    return (means[..., None, :] + offsets).movedim(-2, 0)


def unscented_expected_loglik(
    y: Tensor, obs: Tensor, means: Tensor, covs: Tensor, decoder, R: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Like :func:`linear_expected_loglik` for any decoder ``g`` (B, n, d) -> (B, n, D),
    by the unscented transform; the predictive moments are the sigma points' mean and
    spread (+ R)."""
    obs = obs.bool()
    points = sigma_points(means, covs)  # (2d, B, n, d)
    out = decoder(points)  # (2d, B, n, D)
    zero = torch.zeros_like(out[0])
    expected = torch.stack([_gaussian_expected(y, obs, o, zero, R) for o in out]).mean(0)
    pred = out.mean(0)
    var = ((out - pred) ** 2).mean(0)
    return expected, pred, var + R


def pad_identity(trans: tuple, steps: Tensor, diagonal: bool = False):
    """Transitions (F, c, Q) (B, n-1, ...) with the padded intervals (``steps`` False)
    made the identity map with unit noise: a padded step then carries the last marginal
    on unchanged, and nothing there can overflow (an unstable posterior drift over a
    dummy step would reach inf, and inf times a zero mask is NaN). ``diagonal``: F given
    as its diagonal (the complex variant). ``trans`` may also be the affine part (F, c)
    alone (a deterministic step); the result has the same length."""
    F, c, *Q = trans
    d = c.shape[-1]
    eye = torch.eye(d, dtype=c.dtype, device=c.device)
    sv, sm = steps[..., None], steps[..., None, None]
    F = torch.where(sv if diagonal else sm, F, torch.ones_like(F) if diagonal else eye.to(F.dtype))
    c = torch.where(sv, c, torch.zeros_like(c))
    return (F, c, *(torch.where(sm, q, eye.to(q.dtype)) for q in Q))


def linear_gaussian_elbo(
    y: Tensor,
    mask: Tensor,
    t: Tensor,
    posterior: dict,
    prior: dict,
    H: Tensor,
    R: Tensor,
    valid: Tensor | None = None,
) -> tuple[Tensor, dict]:
    """ELBO per episode ``(B,)`` and its parts.

    y, mask (B, n, D); t (B, n). ``posterior``: ``m1`` (B, d), ``P1`` (B, d, d), ``A``
    (B, n-1, d, d), ``b`` (B, n-1, d), ``L`` (B, n-1, d, m). ``prior``: ``A`` (d, d),
    ``b`` (d,), ``L`` (d, m), ``m0`` (d,), ``P0`` (d, d) (the prior at ``t[:, 0]``).
    H (D, d), R (D,). Returns ``(elbo, {"expected_loglik", "kl", "means", "covs"})``.
    """
    B, n, D = y.shape
    valid = torch.ones(B, n, dtype=torch.bool, device=y.device) if valid is None else valid
    obs = mask & valid[..., None]
    steps = valid[:, 1:] & valid[:, :-1]
    dt = torch.where(steps, torch.diff(t, dim=1), torch.ones_like(t[:, 1:]))
    if bool((dt < 0).any()):
        raise ValueError("observation times must not decrease within an episode")
    trans_q = pad_identity(
        lti_transition(posterior["A"], posterior["b"], posterior["L"], dt), steps
    )
    trans_p = pad_identity(lti_transition(prior["A"], prior["b"], prior["L"], dt), steps)
    means, covs = propagate(posterior["m1"], posterior["P1"], *trans_q)
    expected, _, _ = linear_expected_loglik(y, obs, means, covs, H, R)
    kl = chain_kl(
        posterior["m1"],
        posterior["P1"],
        trans_q,
        prior["m0"].expand_as(posterior["m1"]),
        prior["P0"].expand_as(posterior["P1"]),
        trans_p,
        mask=steps,
        marginals=(means, covs),
    )
    return expected - kl, {"expected_loglik": expected, "kl": kl, "means": means, "covs": covs}
