r"""Exact inference in linear-Gaussian continuous–discrete state-space models.

For the prior SDE :math:`dz = (Az + b)\,dt + L\,dW` (time-invariant), observations
:math:`y_i = H z(t_i) + \varepsilon_i`, :math:`\varepsilon_i \sim \mathcal N(0,
\mathrm{diag}(R))`, at irregular times with per-channel masks, the Kalman filter over
the exact transitions of :func:`lti_transition` gives the log marginal likelihood
:math:`\log p(y_{1:n})`: the largest value any ELBO can reach, reached by the true
posterior. SDEVI's ELBO is checked against it on linear-SDE data.

The measurement update is in square-root information form: with :math:`P = CC^\top`
and :math:`A = I + C^\top H^\top W H C`, :math:`W = \mathrm{diag}(M/R)` (``M`` the 0/1
mask of observed channels), the update is :math:`m^+ = m + CA^{-1}C^\top H^\top W r`,
:math:`P^+ = CA^{-1}C^\top` and :math:`\log\det S = \sum_{obs} \log R + \log\det A`
(Woodbury and Sylvester). A missing channel has weight 0, so it contributes nothing to
the gain, the quadratic form or the log-determinant: the result equals the likelihood of
the observed entries alone. Why this form: it costs :math:`O(Dd^2)` rather than a
:math:`D \times D` factorisation per step (images: D = 576), and :math:`P^+` is a
product of factors, so float32 keeps it positive definite where :math:`P - KHP` did not.

:func:`kalman_smoother` adds the Rauch–Tung–Striebel backward pass: the exact posterior
marginals :math:`p(z(t_i) \mid y_{1:n})` at every row, observed or not, so a row with
no observation is an exact prediction at that time (interpolation between observations,
forecast after the last). It is the optimum that any model of such data is measured
against.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from simsci.integrate import lti_transition
from simsci.models.sdevi._gauss_markov import safe_cholesky

__all__ = ["kalman_log_likelihood", "kalman_smoother"]


def kalman_log_likelihood(
    y: Tensor,
    mask: Tensor,
    t: Tensor,
    A: Tensor,
    b: Tensor,
    L: Tensor,
    m0: Tensor,
    P0: Tensor,
    H: Tensor,
    R: Tensor,
    valid: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(log p(y), filtered means (B, n, d), filtered covariances (B, n, d, d))``.

    y (B, n, D) (NaN allowed where ``mask`` is False), mask (B, n, D) bool, t (B, n)
    non-decreasing per row (``m0``, ``P0`` are the prior at ``t[:, 0]``); A (d, d),
    b (d,), L (d, m), H (D, d), R (D,) positive; ``valid`` (B, n) bool marks the real
    rows of padded episodes (default: all).
    """
    out = _filter(y, mask, t, A, b, L, m0, P0, H, R, valid)
    return out["loglik"], out["means"], out["covs"]


def _filter(y, mask, t, A, b, L, m0, P0, H, R, valid) -> dict:
    """The Kalman filter of :func:`kalman_log_likelihood`, keeping what the smoother
    reuses: the transitions ``F`` (B, n-1, d, d) and the one-step predictions
    ``m_pred`` (B, n-1, d), ``P_pred`` (B, n-1, d, d) of rows 1..n-1."""
    B, n, D = y.shape
    d = A.shape[-1]
    if mask.shape != y.shape:
        raise ValueError(f"mask must have the shape of y {tuple(y.shape)}, got {tuple(mask.shape)}")
    if bool((R <= 0).any()):
        raise ValueError("observation noise variances R must be > 0")
    valid = torch.ones(B, n, dtype=torch.bool, device=y.device) if valid is None else valid
    obs = mask & valid[..., None]
    dt = torch.diff(t, dim=1)
    if bool((dt[valid[:, 1:]] < 0).any()):
        raise ValueError("observation times must not decrease within an episode")
    F, c, Q = lti_transition(A, b, L, dt.clamp_min(0))  # (B, n-1, ...)
    yz = torch.where(obs, y, torch.zeros_like(y))
    m = m0.expand(B, d).clone()
    P = P0.expand(B, d, d).clone()
    loglik = torch.zeros(B, dtype=y.dtype, device=y.device)
    means, covs, m_preds, P_preds = [], [], [], []
    for i in range(n):
        if i > 0:
            step = valid[:, i][:, None]
            m_pred = (F[:, i - 1] @ m[..., None])[..., 0] + c[:, i - 1]
            P_pred = F[:, i - 1] @ P @ F[:, i - 1].transpose(-1, -2) + Q[:, i - 1]
            m_preds.append(m_pred)
            P_preds.append(P_pred)
            m = torch.where(step, m_pred, m)
            P = torch.where(step[..., None], P_pred, P)
        M = obs[:, i].to(y.dtype)  # (B, D)
        # Measurement update in square-root information form, O(D d^2): with P = C C^T,
        # G = H C and U = diag(sqrt(M / R)) G, A = I + U^T U (d x d, eigenvalues >= 1)
        # gives S^-1 by Woodbury, log det S = sum log R + log det A, and
        # P+ = C A^-1 C^T, a product of factors: positive definite by construction.
        # The D x D innovation covariance is never formed (576 pixels: a 576-square
        # Cholesky per step before).
        r = M * (yz[:, i] - (H @ m[..., None])[..., 0])
        w = M / R  # (B, D): 0 where a channel is not observed
        C = safe_cholesky(P, "filtered covariance")
        G = H @ C  # (B, D, d)
        Gw = G * w[..., None]
        A = torch.eye(d, dtype=y.dtype, device=y.device) + G.transpose(-1, -2) @ Gw
        chol_A = safe_cholesky(A, "information matrix")
        v = Gw.transpose(-1, -2) @ r[..., None]  # C^T H^T R^-1 r, (B, d, 1)
        Ainv_v = torch.cholesky_solve(v, chol_A)
        k = M.sum(-1)
        quad = (w * r * r).sum(-1) - (v.transpose(-1, -2) @ Ainv_v)[..., 0, 0]
        logdet = (M * R.log()).sum(-1)
        logdet = logdet + 2.0 * chol_A.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        loglik = loglik - 0.5 * (quad + logdet + k * math.log(2 * math.pi))
        m = m + (C @ Ainv_v)[..., 0]
        CA = torch.linalg.solve_triangular(chol_A, C.transpose(-1, -2), upper=False)
        P = CA.transpose(-1, -2) @ CA  # C A^-1 C^T = (chol_A^-1 C^T)^T (chol_A^-1 C^T)
        means.append(m)
        covs.append(P)

    def stack(items, like):
        return torch.stack(items, 1) if items else like.new_zeros(B, 0, *like.shape[1:])

    return {
        "loglik": loglik,
        "means": torch.stack(means, 1),
        "covs": torch.stack(covs, 1),
        "F": F,
        "m_pred": stack(m_preds, m),
        "P_pred": stack(P_preds, P),
    }


def kalman_smoother(
    y: Tensor,
    mask: Tensor,
    t: Tensor,
    A: Tensor,
    b: Tensor,
    L: Tensor,
    m0: Tensor,
    P0: Tensor,
    H: Tensor,
    R: Tensor,
    valid: Tensor | None = None,
) -> dict[str, Tensor]:
    r"""Exact posterior marginals of the latent state and of the observations.

    Arguments as :func:`kalman_log_likelihood`. Returns ``means`` (B, n, d) and ``covs``
    (B, n, d, d) of :math:`p(z(t_i) \mid y)`; ``y_mean`` :math:`H m_i` and ``y_var``
    :math:`\mathrm{diag}(H P_i H^\top) + R` (B, n, D), the predictive distribution of a
    new observation at :math:`t_i`; ``loglik`` (B,). Rows with every channel masked are
    predictions at their times. RTS backward pass: with the one-step prediction
    :math:`m^-_{i+1} = F_i m_i + c_i`, :math:`P^-_{i+1} = F_i P_i F_i^\top + Q_i` and the
    gain :math:`G_i = P_i F_i^\top (P^-_{i+1})^{-1}`,
    :math:`m^s_i = m_i + G_i (m^s_{i+1} - m^-_{i+1})`,
    :math:`P^s_i = P_i + G_i (P^s_{i+1} - P^-_{i+1}) G_i^\top`.
    """
    filtered = _filter(y, mask, t, A, b, L, m0, P0, H, R, valid)
    means, covs, F = filtered["means"], filtered["covs"], filtered["F"]
    B, n, d = means.shape
    valid = torch.ones(B, n, dtype=torch.bool, device=y.device) if valid is None else valid
    m_s, P_s = [means[:, -1]], [covs[:, -1]]
    for i in range(n - 2, -1, -1):
        m, P = means[:, i], covs[:, i]
        # the filter's one-step prediction of row i + 1 from row i
        m_pred, P_pred = filtered["m_pred"][:, i], filtered["P_pred"][:, i]
        # G = P F^T (P^-)^{-1}, by a Cholesky solve of the symmetric P^- (G^T = P^-^{-1} F P)
        chol = safe_cholesky(P_pred, "one-step prediction covariance")
        G = torch.cholesky_solve(F[:, i] @ P, chol).transpose(-1, -2)
        m_new = m + (G @ (m_s[-1] - m_pred)[..., None])[..., 0]
        P_new = P + G @ (P_s[-1] - P_pred) @ G.transpose(-1, -2)
        P_new = 0.5 * (P_new + P_new.transpose(-1, -2))
        # the last valid row of a padded episode keeps its filtered marginal
        step = valid[:, i + 1]
        m_s.append(torch.where(step[:, None], m_new, m))
        P_s.append(torch.where(step[:, None, None], P_new, P))
    means = torch.stack(m_s[::-1], 1)
    covs = torch.stack(P_s[::-1], 1)
    y_mean = (H @ means[..., None])[..., 0]
    y_var = torch.einsum("ij,bnjk,ik->bni", H, covs, H) + R
    return {
        "means": means,
        "covs": covs,
        "y_mean": y_mean,
        "y_var": y_var,
        "loglik": filtered["loglik"],
    }
