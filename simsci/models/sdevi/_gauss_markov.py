r"""Gauss–Markov algebra of linear time-varying SDEs: the core of SDEVI.

A linear SDE held constant over an interval of length :math:`\Delta`,

.. math:: dz = (A z + b)\,dt + L\,dW,

has Gaussian transitions :math:`z(t+\Delta) \mid z(t) \sim \mathcal N(F z + c, Q)` with

.. math::
    F = e^{A\Delta},\qquad c = \int_0^\Delta e^{As} b\,ds,\qquad
    Q = \int_0^\Delta e^{As} L L^\top e^{A^\top s}\,ds,

the solutions of the moment ODEs :math:`\dot m = A m + b`, :math:`\dot P = AP + PA^\top +
LL^\top` over the interval. A posterior (or prior) induced by such an SDE, piecewise
constant between observation times, is a Gauss–Markov chain over the latent states at
those times: no path sampling is needed.

Choices, and why:

- **One matrix exponential per interval** (Van Loan 1978, "Computing integrals
  involving the matrix exponential", IEEE TAC 23): :math:`H = \exp\big(\Delta
  \begin{psmallmatrix}-A & (LL^\top\ 0)\\ 0 & \tilde A\end{psmallmatrix}\big)`
  with :math:`\tilde A = \begin{psmallmatrix}A & b\\ 0 & 0\end{psmallmatrix}^\top`
  has :math:`H_{22} = e^{\Delta\tilde A} = \begin{psmallmatrix}F & c\\ 0 &
  1\end{psmallmatrix}^\top` and :math:`Q = F\,(H_{12})_{:, :d}`: F, c and Q from a
  single :math:`(2d+1)`-square exponential.
  The exponential (:func:`simsci.integrate.expm`, scaling and squaring of a Taylor polynomial) is
  batched, exact to ~1e-11 for any A (also singular or non-diagonalisable, where closed
  forms divide by eigenvalues) and cheap to differentiate; an ODE solve of the moments
  would cost many steps per interval.
- **Marginals by a parallel-prefix scan** (:func:`propagate`): the chain's marginals are
  prefixes of affine Gaussian maps :math:`(F, c, Q)`, an associative composition, so an
  odd/even scan computes all of them in :math:`O(\log n)` sequential steps of batched
  operations; the gradient is the adjoint recursion, itself such a scan. Short chains
  use the plain loop (as fast there).
- **A shared prior is exponentiated once per distinct step**: the prior's transitions
  over a batch of intervals repeat whenever the steps do (times on a grid).
- **Symmetrised covariances with a Cholesky check**: Q and the propagated marginals are
  symmetrised (round-off makes them slightly asymmetric); a covariance whose Cholesky
  factorisation fails even after a relative jitter raises ``ValueError`` naming the
  batch entry, instead of a NaN ELBO later.
- **KL between chains in closed form**: :math:`\mathrm{KL}(q\,\|\,p) = \mathrm{KL}(q_1\|p_1)
  + \sum_i \mathbb E_{q(z_{i-1})}\,\mathrm{KL}\big(q(z_i|z_{i-1})\,\|\,p(z_i|z_{i-1})\big)`
  (the chain rule of KL for Markov chains); each expectation is exact because the
  transition means are affine in :math:`z_{i-1}`:
  :math:`\tfrac12\big[\mathrm{tr}(Q_p^{-1}Q_q) - d + \log\frac{|Q_p|}{|Q_q|} + \mu^\top
  Q_p^{-1}\mu + \mathrm{tr}(\Delta F^\top Q_p^{-1}\Delta F\,P_{i-1})\big]` with
  :math:`\mu = \Delta F m_{i-1} + \Delta c`.

Shapes: states ``(..., d)``, matrices ``(..., d, d)``, any leading batch/time axes.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "propagate",
    "propagate_means",
    "gaussian_kl",
    "chain_kl",
    "safe_cholesky",
]


def _sym(P: Tensor) -> Tensor:
    """The symmetric (Hermitian, for complex P) part of P."""
    return 0.5 * (P + P.mH)


def safe_cholesky(P: Tensor, what: str = "covariance", jitter: float = 1e-9) -> Tensor:
    """Cholesky factor of a symmetric (real) or Hermitian (complex) ``P`` (..., d, d),
    ``P = L L^H``; one retry with a relative diagonal jitter, then a ValueError naming
    the first failing batch entry."""
    L, info = torch.linalg.cholesky_ex(_sym(P))
    if bool((info == 0).all()):
        return L
    d = P.shape[-1]
    diag = P.diagonal(dim1=-2, dim2=-1).real
    scale = diag.abs().mean(-1, keepdim=True).clamp_min(1e-30)
    eye = torch.eye(d, dtype=P.dtype, device=P.device)
    # a relative jitter below the precision's resolution would add nothing: at least
    # 10 ulps of the mean diagonal (float32: 1.2e-6)
    jitter = max(jitter, 10 * torch.finfo(P.real.dtype).eps)
    L, info = torch.linalg.cholesky_ex(_sym(P) + jitter * scale[..., None] * eye)
    if bool((info == 0).all()):
        return L
    bad = torch.nonzero(info.reshape(-1)).flatten()[:5].tolist()
    raise ValueError(
        f"the {what} lost positive definiteness (batch entries {bad} of shape "
        f"{tuple(P.shape[:-2])}, even after a jitter of {jitter:g} x its mean diagonal); "
        "it must be symmetric (Hermitian) positive definite: check the diffusion L "
        "(finite, full rank) and the time steps (finite, > 0)"
    )


#: chains of at most this many transitions are propagated by the plain loop; also the
#: scan's base case. Measured on CPU (batch 32, d 8, float32, one thread): the loop is
#: faster below ~8 transitions, the two are even up to ~60 in the forward pass (the scan
#: does twice the products), and the scan is ahead beyond (1.3x at 512)
_LOOP_MAX = 8


def _apply(F: Tensor, c: Tensor, Q: Tensor, m: Tensor, P: Tensor) -> tuple[Tensor, Tensor]:
    """The marginal ``(F m + c, F P Fᵀ + Q)`` after a transition (any leading axes); not
    symmetrised."""
    return (F @ m[..., None])[..., 0] + c, F @ P @ F.transpose(-1, -2) + Q


def _propagate_loop(m0: Tensor, P0: Tensor, F: Tensor, c: Tensor, Q: Tensor):
    """:func:`propagate` by the sequential recursion, one Python step per interval."""
    means, covs = [m0], [_sym(P0)]
    # unbind, not F[:, i]: the backward of n selects would zero-fill n full-size tensors
    for Fi, ci, Qi in zip(F.unbind(1), c.unbind(1), Q.unbind(1)):
        m, P = _apply(Fi, ci, Qi, means[-1], covs[-1])
        means.append(m)
        covs.append(_sym(P))
    return torch.stack(means, 1), torch.stack(covs, 1)


def _propagate_scan(m0: Tensor, P0: Tensor, F: Tensor, c: Tensor, Q: Tensor):
    """:func:`propagate` by an odd/even parallel-prefix scan: ``O(log n)`` Python steps.

    Elements: the initial marginal ``e_0 = (m0, P0)`` and the transitions ``e_i = (F_i,
    c_i, Q_i)``; the marginal at ``i`` is the prefix ``e_i ∘ … ∘ e_0`` of the affine
    Gaussian maps, ``(F', c', Q') ∘ (F, c, Q) = (F' F, F' c + c', F' Q F'ᵀ + Q')``
    (associative). Up: apply ``e_1`` to ``e_0`` and compose the remaining transitions in
    pairs ``e_{2j+1} ∘ e_{2j}`` (one batched composition): a chain of half the length
    whose marginals, by recursion, are the odd-indexed ones. Down: each even marginal is
    its transition applied to the odd marginal before it (batched). Every prefix holds
    ``e_0``, so no product of ``F``'s is formed on the way down. Work: about twice the
    loop's matrix products, in ``2 log2 n`` sequential steps. The covariances are
    symmetrised once, at the end (the round-off asymmetry of ``log2 n`` levels is
    ~``eps log n``, removed there).
    """
    if F.shape[1] <= _LOOP_MAX:
        return _propagate_loop(m0, P0, F, c, Q)
    means, covs = _scan(m0, _sym(P0), F, c, Q)
    return means, _sym(covs)


def _scan(m0: Tensor, P0: Tensor, F: Tensor, c: Tensor, Q: Tensor) -> tuple[Tensor, Tensor]:
    K = F.shape[1]
    if K <= _LOOP_MAX:
        return _propagate_loop(m0, P0, F, c, Q)
    m1, P1 = _apply(F[:, 0], c[:, 0], Q[:, 0], m0, P0)
    h = (K - 1) // 2  # pairs (e_2, e_3), (e_4, e_5), ...: F indices (1, 2), (3, 4), ...

    # strided views are copied to contiguous ones first: batched matmuls of views whose
    # batch axes do not flatten copy them element by element (several times slower)
    def pairs(x: Tensor) -> list[Tensor]:
        return [v.contiguous() for v in x[:, 1 : 2 * h + 1].unflatten(1, (h, 2)).unbind(2)]

    def evens(x: Tensor) -> Tensor:
        return x[:, 1::2].contiguous()

    (Fe, Fl), (ce, cl), (Qe, Ql) = pairs(F), pairs(c), pairs(Q)
    cp, Qp = _apply(Fl, cl, Ql, ce, Qe)
    mo, Po = _scan(m1, P1, Fl @ Fe, cp, Qp)  # marginals 1, 3, ..., 2h + 1
    ne = K // 2  # marginals 2, 4, ..., 2 ne, by the transitions F[:, 1::2]
    mp, Pp = mo[:, :ne].contiguous(), Po[:, :ne].contiguous()
    me, Pe = _apply(evens(F), evens(c), evens(Q), mp, Pp)

    def merge(first: Tensor, odd: Tensor, even: Tensor) -> Tensor:
        out = first.new_empty(first.shape[0], K + 1, *first.shape[1:])
        out[:, 0], out[:, 1::2], out[:, 2::2] = first, odd, even
        return out

    return merge(m0, mo, me), merge(P0, Po, Pe)


class _Propagate(torch.autograd.Function):
    """:func:`_propagate_scan` with its backward by the adjoint recursion, itself a scan.

    For ``m_{i+1} = F_i m_i + c_i``, ``P_{i+1} = F_i P_i F_iᵀ + Q_i`` and output
    gradients ``g_i``, ``G_i`` (symmetrised), the adjoints ``λ_i = g_i + F_iᵀ λ_{i+1}``,
    ``Λ_i = G_i + F_iᵀ Λ_{i+1} F_i`` are the same kind of chain run backwards (with
    transitions ``(F_iᵀ, g_i, G_i)``), so one more scan gives them all; then ``∂c_i =
    λ_{i+1}``, ``∂Q_i = Λ_{i+1}``, ``∂F_i = λ_{i+1} m_iᵀ + 2 Λ_{i+1} F_i P_i``, ``∂m_0 =
    λ_0``, ``∂P_0 = Λ_0``. Against autograd through the scan: no graph of ``O(n)``
    slices and copies, about half the time. The backward is made of differentiable
    operations, so double backward works too.
    """

    @staticmethod
    def forward(m0, P0, F, c, Q):
        return _propagate_scan(m0, P0, F, c, Q)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[2], *output)

    @staticmethod
    def backward(ctx, g_means, g_covs):
        F, means, covs = ctx.saved_tensors
        g_means = torch.zeros_like(means) if g_means is None else g_means
        G = torch.zeros_like(covs) if g_covs is None else _sym(g_covs)
        Ft = F.transpose(-1, -2).flip(1).contiguous()
        lam, Lam = _scan(g_means[:, -1], G[:, -1], Ft, g_means[:, :-1].flip(1), G[:, :-1].flip(1))
        lam, Lam = lam.flip(1), _sym(Lam.flip(1))
        need = ctx.needs_input_grad
        lam1, Lam1 = lam[:, 1:], Lam[:, 1:]
        dF = None
        if need[2]:
            dF = lam1[..., :, None] * means[:, :-1, None, :] + 2.0 * (Lam1 @ F @ covs[:, :-1])
        return (
            lam[:, 0] if need[0] else None,
            Lam[:, 0] if need[1] else None,
            dF,
            lam1 if need[3] else None,
            Lam1 if need[4] else None,
        )


def propagate(m0: Tensor, P0: Tensor, F: Tensor, c: Tensor, Q: Tensor) -> tuple[Tensor, Tensor]:
    """Marginals of the chain ``z_1 ~ N(m0, P0)``, ``z_{i+1} | z_i ~ N(F_i z_i + c_i, Q_i)``.

    m0 (B, d), P0 (B, d, d); F (B, n-1, d, d), c (B, n-1, d), Q (B, n-1, d, d) ->
    means (B, n, d) and covariances (B, n, d, d) (symmetric).

    By a parallel-prefix scan over the affine Gaussian maps (:func:`_propagate_scan`):
    ``O(log n)`` sequential steps of batched tensor operations instead of ``n``, with
    the gradient by the adjoint scan (:class:`_Propagate`); the loop's values and
    gradients to rounding.
    """
    inputs = (m0, P0, F, c, Q)
    if (
        torch.is_grad_enabled()
        and any(x.requires_grad for x in inputs)
        and not any(x.is_complex() for x in inputs)
    ):
        return _Propagate.apply(*inputs)
    return _propagate_scan(*inputs)


def propagate_means(m0: Tensor, F: Tensor, c: Tensor) -> Tensor:
    """The means alone of :func:`propagate`'s chain: ``m_{i+1} = F_i m_i + c_i``.

    m0 (B, d), F (B, n-1, d, d), c (B, n-1, d) -> means (B, n, d). The affine maps'
    prefix compositions by recursive doubling (Hillis–Steele: after the round with
    offset k every map is composed with the k before it), ``O(log n)`` rounds of one
    batched product each, differentiated by autograd; no covariance is carried.
    """
    for k in (1 << r for r in range(max(0, F.shape[1] - 1).bit_length())):
        # (F_i, c_i) <- (F_i F_{i-k}, F_i c_{i-k} + c_i) for i >= k
        head_F, head_c = F[:, :k], c[:, :k]
        tail_F = F[:, k:] @ F[:, :-k]
        tail_c = (F[:, k:] @ c[:, :-k, :, None])[..., 0] + c[:, k:]
        F, c = torch.cat([head_F, tail_F], 1), torch.cat([head_c, tail_c], 1)
    rest = (F @ m0[:, None, :, None])[..., 0] + c
    return torch.cat([m0[:, None], rest], 1)


def _logdet(Lchol: Tensor) -> Tensor:
    """log det of L L^H from its Cholesky factor (real for complex L too)."""
    return 2.0 * Lchol.diagonal(dim1=-2, dim2=-1).real.log().sum(-1)


def _kl_terms(
    Lp: Tensor, Lq: Tensor, mu: Tensor, dF: Tensor | None = None, P: Tensor | None = None
):
    """``tr(Σp⁻¹ Σq) + μᵀ Σp⁻¹ μ [+ tr(Σp⁻¹ dF P dFᵀ)]`` from the Cholesky factors: one
    triangular solve ``Lp⁻¹ [Lq | μ | dF]`` gives ``tr = ||Lp⁻¹ Lq||²``, ``||Lp⁻¹ μ||²``
    and, with ``G = Lp⁻¹ dF``, ``tr(G P Gᵀ) = sum((G P) * G)``."""
    d = Lq.shape[-1]
    rhs = [Lq, mu[..., None]] if dF is None else [Lq, mu[..., None], dF]
    batch = torch.broadcast_shapes(Lp.shape[:-2], *(r.shape[:-2] for r in rhs))
    rhs = torch.cat([r.expand(*batch, d, r.shape[-1]) for r in rhs], -1)
    X = torch.linalg.solve_triangular(Lp.expand(*batch, d, d), rhs, upper=False)
    if dF is None:
        return X.square().sum((-2, -1))
    X, G = X.split([d + 1, d], -1)
    return X.square().sum((-2, -1)) + ((G @ P) * G).sum((-2, -1))


def gaussian_kl(m_q: Tensor, P_q: Tensor, m_p: Tensor, P_p: Tensor) -> Tensor:
    """KL(N(m_q, P_q) || N(m_p, P_p)) over the last axis; shape (...)."""
    Lq = safe_cholesky(P_q, "posterior covariance")
    Lp = safe_cholesky(P_p, "prior covariance")
    d = m_q.shape[-1]
    return 0.5 * (_kl_terms(Lp, Lq, m_p - m_q) - d + _logdet(Lp) - _logdet(Lq))


def chain_kl(
    m1_q: Tensor,
    P1_q: Tensor,
    trans_q: tuple[Tensor, Tensor, Tensor],
    m1_p: Tensor,
    P1_p: Tensor,
    trans_p: tuple[Tensor, Tensor, Tensor],
    mask: Tensor | None = None,
    marginals: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """KL(q || p) of two Gauss–Markov chains over the same times; shape (B,).

    ``trans_*`` = (F, c, Q) of shapes (B, n-1, d, d), (B, n-1, d), (B, n-1, d, d).
    ``mask`` (B, n-1) bool drops padded transitions (episodes of different lengths).
    ``marginals``: q's marginals ``(means, covs)`` if already computed (by
    :func:`propagate` of the same chain; the ELBO needs them too), else propagated here.
    """
    F_q, c_q, Q_q = trans_q
    F_p, c_p, Q_p = trans_p
    kl = gaussian_kl(m1_q, P1_q, m1_p, P1_p)
    if F_q.shape[1] == 0:
        return kl
    means, covs = propagate(m1_q, P1_q, F_q, c_q, Q_q) if marginals is None else marginals
    m_prev, P_prev = means[:, :-1], covs[:, :-1]
    Lp = safe_cholesky(Q_p, "prior transition covariance")
    Lq = safe_cholesky(Q_q, "posterior transition covariance")
    d = m1_q.shape[-1]
    dF, dc = F_q - F_p, c_q - c_p
    mu = (dF @ m_prev[..., None])[..., 0] + dc
    quad = _kl_terms(Lp, Lq, mu, dF, P_prev)
    step = 0.5 * (quad - d + _logdet(Lp) - _logdet(Lq))
    if mask is not None:
        step = step * mask.to(step.dtype)
    return kl + step.sum(-1)
