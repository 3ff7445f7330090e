r"""Complex-domain SDEVI: a diagonal complex linear SDE and its circular Gauss–Markov chain.

A real linear system with oscillatory modes is diagonal in its (complex) eigenbasis.
The complex variant keeps the latent in that basis: per interval a diagonal linear SDE

.. math:: dz = (\Lambda z + \beta)\,dt + L\,dW,\qquad \Lambda = \mathrm{diag}(\lambda),

with a circular complex Wiener process :math:`W` (:math:`\mathbb E[dW\,dW^H] = I\,dt`,
:math:`\mathbb E[dW\,dW^\top] = 0`), whose transition over :math:`\Delta` is the proper
(circular) complex Gaussian :math:`z(t+\Delta) \mid z(t) \sim \mathcal{CN}(f \odot z + c,
Q)` with the closed forms

.. math::
    f_j = e^{\lambda_j\Delta},\qquad
    c_j = \beta_j\,\frac{e^{\lambda_j\Delta} - 1}{\lambda_j},\qquad
    Q_{jk} = (LL^H)_{jk}\,\frac{e^{(\lambda_j + \bar\lambda_k)\Delta} - 1}
    {\lambda_j + \bar\lambda_k}.

Observations are real: :math:`y = \mathrm{Re}(Hz) + \varepsilon`, :math:`\varepsilon \sim
\mathcal N(0, \mathrm{diag}\,R)`, :math:`H` complex (D, d).

Choices, and why:

- **Diagonal in the eigenbasis**: a diagonalisable real :math:`A = V\Lambda V^{-1}` is
  diagonal for :math:`z = V^{-1}x`, and the decoder absorbs :math:`V`. The transition is
  then :math:`O(d^2)` closed-form entries per interval (the only dense part is
  :math:`Q`) instead of a :math:`(2d+1)`-square matrix exponential, and the gradient is
  the closed forms differentiated by torch's complex autograd: no ODE, no adjoint.
- **Circular (proper) noise**: with :math:`\mathbb E[dW\,dW^\top] = 0` and a circular
  :math:`q(z_1)` every marginal and transition stays circular, so a Gaussian is its mean
  and Hermitian covariance alone (no pseudo-covariance). The complex chain is exactly a
  real :math:`2d`-dimensional linear SDE, :math:`u + iv = z`, with drift
  :math:`\begin{psmallmatrix}\mathrm{Re}\Lambda & -\mathrm{Im}\Lambda\\
  \mathrm{Im}\Lambda & \mathrm{Re}\Lambda\end{psmallmatrix}`, diffusion
  :math:`\tfrac1{\sqrt2}\begin{psmallmatrix}\mathrm{Re}L & -\mathrm{Im}L\\
  \mathrm{Im}L & \mathrm{Re}L\end{psmallmatrix}` and covariances
  :math:`\tfrac12\begin{psmallmatrix}\mathrm{Re}P & -\mathrm{Im}P\\
  \mathrm{Im}P & \mathrm{Re}P\end{psmallmatrix}`; the tests check every function
  against the real one of that system.
- **A stable** :math:`\varphi_1(x) = (e^x - 1)/x`: a Taylor polynomial of degree 13 for
  :math:`|x| < 1/2` (truncation < 5e-17, and its derivative is well conditioned; the
  quotient's autograd derivative :math:`e^x/x - (e^x-1)/x^2` cancels catastrophically near
  0), ``expm1(x) / x`` elsewhere. :math:`\lambda = 0` (a random walk) is exact.
- **The chain's recursions are elementwise**: :math:`m_{i+1} = f_i \odot m_i + c_i`,
  :math:`P_{i+1} = (f_i f_i^H) \odot P_i + Q_i`, first-order linear recurrences per entry,
  so :func:`complex_propagate` is a parallel-prefix (odd/even) scan of elementwise affine
  maps: ``2 log2 n`` vectorised steps instead of ``n`` sequential ones, no matmuls.
- **KL without a factor 1/2**: a :math:`d`-dim circular :math:`\mathcal{CN}(m, P)` is a
  :math:`2d`-dim real Gaussian with covariance :math:`\tfrac12[\cdot]` above, whose KL
  is :math:`\mathrm{tr}(P_p^{-1}P_q) - d + \log\frac{|P_p|}{|P_q|} + (m_p - m_q)^H
  P_p^{-1}(m_p - m_q)`: each term of the real :math:`2d`-dim KL (trace, dimension,
  log-det ratio, quadratic form) is twice the complex one, which cancels its
  :math:`\tfrac12`. Traces and quadratic forms are squared norms of triangular solves,
  real by construction.
- **Cholesky of Hermitian matrices** with the same policy as :func:`safe_cholesky` (one
  relative jitter, then a ``ValueError`` naming the batch entries). ``safe_cholesky``
  itself must not be used here: it symmetrises with a plain transpose, which zeroes the
  imaginary part of a Hermitian matrix's off-diagonal and factors a different matrix.

Shapes: states ``(..., d)``, matrices ``(..., d, d)``, diagonal transitions ``(..., d)``;
complex64 or complex128 (real inputs are promoted), time steps real.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from simsci.models.sdevi._gauss_markov import _logdet, _sym, safe_cholesky

__all__ = [
    "complex_diag_transition",
    "complex_propagate",
    "complex_gaussian_kl",
    "complex_chain_kl",
    "complex_gaussian_elbo",
    "complex_predictive",
    "complex_cholesky",
]

_PHI_DEGREE = 13  # Taylor degree of phi1 on |x| < _PHI_RADIUS: 0.5^14/15! < 5e-17
_PHI_RADIUS = 0.5


def _as_complex(x: Tensor, name: str, like: Tensor | None = None) -> Tensor:
    """``x`` as a complex tensor (real floating input promoted; complex128 if ``like`` is)."""
    x = torch.as_tensor(x)
    if not (x.is_complex() or x.is_floating_point()):
        raise TypeError(
            f"{name} must be a floating or complex tensor, got dtype {x.dtype}; "
            "pass e.g. torch.complex128 values"
        )
    if not x.is_complex():
        x = x.to(torch.complex128 if x.dtype == torch.float64 else torch.complex64)
    if like is not None and like.dtype != x.dtype:
        x = x.to(torch.promote_types(x.dtype, like.dtype))
    return x


def _common(**tensors: Tensor) -> list[Tensor]:
    """The tensors as complex tensors of one dtype (the widest among them)."""
    zs = [_as_complex(x, name) for name, x in tensors.items()]
    dtype = zs[0].dtype
    for z in zs[1:]:
        dtype = torch.promote_types(dtype, z.dtype)
    return [z.to(dtype) for z in zs]


def _real_dtype(z: Tensor) -> torch.dtype:
    return torch.float64 if z.dtype == torch.complex128 else torch.float32


def _sqnorm(X: Tensor, dims: tuple[int, ...]) -> Tensor:
    """Sum of ``|X|^2`` over ``dims`` (``re^2 + im^2``: differentiable also at 0)."""
    return (X.real.square() + X.imag.square()).sum(dims)


def _phi1(x: Tensor) -> Tensor:
    r""":math:`(e^x - 1)/x` for complex ``x``, with :math:`\varphi_1(0) = 1`."""
    small = x.abs() < _PHI_RADIUS
    xs = torch.where(small, x, torch.zeros_like(x))
    series = torch.ones_like(x) / math.factorial(_PHI_DEGREE + 1)
    for k in range(_PHI_DEGREE, 0, -1):  # Horner on sum_k x^k / (k+1)!
        series = series * xs + 1.0 / math.factorial(k)
    # the unused branch must stay finite (0/0 would poison the gradient through where)
    xl = torch.where(small, torch.ones_like(x), x)
    return torch.where(small, series, torch.expm1(xl) / xl)


#: Hermitian Cholesky with the jitter-then-ValueError policy (one implementation for
#: real and complex matrices)
complex_cholesky = safe_cholesky


def complex_diag_transition(
    lam: Tensor, beta: Tensor, L: Tensor, dt: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    r"""Exact transition ``(f, c, Q)`` of ``dz = (diag(lam) z + beta) dt + L dW`` over ``dt``.

    ``W`` is a circular complex Wiener process (:math:`\mathbb E[dW\,dW^H] = I\,dt`).
    lam (..., d), beta (..., d), L (..., d, m) complex; dt (...) real, ``>= 0``; all
    broadcastable to one batch shape. Returns f (..., d) (the diagonal of
    :math:`e^{\Lambda\Delta}`), c (..., d) and Q (..., d, d) (Hermitian), see the module
    docstring; no division by an eigenvalue (``lam = 0`` gives ``c = beta dt``,
    ``Q = L L^H dt``).
    """
    lam, beta, L = _common(lam=lam, beta=beta, L=L)
    dt = torch.as_tensor(dt)
    if dt.is_complex():
        raise TypeError("dt must be real (time steps), got a complex tensor")
    if bool((dt < 0).any()):
        raise ValueError(
            f"time steps must be >= 0 (times must not decrease), got min dt = "
            f"{float(dt.min()):g}; sort each episode's times"
        )
    dt = dt.to(dtype=_real_dtype(lam), device=lam.device)
    d = lam.shape[-1]
    batch = torch.broadcast_shapes(lam.shape[:-1], beta.shape[:-1], L.shape[:-2], dt.shape)
    lam = lam.expand(*batch, d)
    h = dt.expand(batch)
    x = lam * h[..., None]
    f = torch.exp(x)
    c = beta * h[..., None] * _phi1(x)
    S = L @ L.mH
    xx = x[..., :, None] + x.conj()[..., None, :]  # (lam_j + conj(lam_k)) dt
    Q = _sym(S * h[..., None, None] * _phi1(xx))
    return f, c, Q


_LOOP_MAX = 4  # chains this short (and the scan's base case) run the plain recursion


def _scan_first(a: Tensor, b: Tensor) -> Tensor:
    """States ``s_0 = b_0``, ``s_i = a_i s_{i-1} + b_i`` along the first axis (``a_0``
    ignored), by the odd/even parallel-prefix scan of the affine maps ``s -> a s + b``.

    Up: compose the elements in pairs, ``(a_{2j+1} a_{2j}, a_{2j+1} b_{2j} + b_{2j+1})``
    (the first pair is already the state ``s_1``, as ``a_0`` acts on nothing): a chain of
    half the length whose states are the odd ones. Down: each even state is one step from
    the odd state before it. Work ~2n elementwise products, depth ``2 log2 n``, and
    autograd keeps O(n) tensors (a Hillis–Steele scan would keep ``n log n``).
    """
    n = b.shape[0]
    if n <= _LOOP_MAX + 1:
        states = [b[0]]
        for i in range(1, n):
            states.append(a[i] * states[-1] + b[i])
        return torch.stack(states)
    m, ne = n // 2, (n - 1) // 2
    a_even, a_odd = a[0 : 2 * m : 2], a[1 : 2 * m : 2]
    odd = _scan_first(a_odd * a_even, a_odd * b[0 : 2 * m : 2] + b[1 : 2 * m : 2])
    even = torch.cat([b[:1], a[2 : 2 * ne + 1 : 2] * odd[:ne] + b[2 : 2 * ne + 1 : 2]])
    inner = torch.stack([even[:m], odd], 1).flatten(0, 1)
    return torch.cat([inner, even[m:]])


def _affine_scan(a: Tensor, b: Tensor, dim: int) -> Tensor:
    """States ``s_0 = b_0``, ``s_i = a_i s_{i-1} + b_i`` (i = 1..n-1) along ``dim``.

    ``a`` has n-1 entries along ``dim`` (``a_1..a_{n-1}``), ``b`` has n.
    """
    a = torch.cat([torch.zeros_like(b.narrow(dim, 0, 1)), a], dim)
    return _scan_first(a.movedim(dim, 0), b.movedim(dim, 0)).movedim(0, dim)


def complex_propagate(
    m1: Tensor, P1: Tensor, f: Tensor, c: Tensor, Q: Tensor
) -> tuple[Tensor, Tensor]:
    r"""Marginals of the circular chain ``z_1 ~ CN(m1, P1)``, ``z_{i+1} | z_i ~ CN(f_i z_i
    + c_i, Q_i)``: :math:`m_{i+1} = f_i \odot m_i + c_i`, :math:`P_{i+1} = (f_i f_i^H)
    \odot P_i + Q_i`.

    m1 (..., d), P1 (..., d, d); f, c (..., n-1, d), Q (..., n-1, d, d) -> means
    (..., n, d), covariances (..., n, d, d) (Hermitian). A log-depth scan over time.
    """
    m1, P1, f, c, Q = _common(m1=m1, P1=P1, f=f, c=c, Q=Q)
    batch = torch.broadcast_shapes(m1.shape[:-1], f.shape[:-2], c.shape[:-2], Q.shape[:-3])
    n1, d = f.shape[-2], m1.shape[-1]
    m1 = m1.expand(*batch, d)
    P1 = _sym(P1).expand(*batch, d, d)
    f = f.expand(*batch, n1, d)
    G = f[..., :, None] * f.conj()[..., None, :]  # f f^H: (..., n-1, d, d)
    b_m = torch.cat([m1[..., None, :], c.expand(*batch, n1, d)], -2)
    b_P = torch.cat([P1[..., None, :, :], Q.expand(*batch, n1, d, d)], -3)
    means = _affine_scan(f, b_m, dim=-2)
    covs = _sym(_affine_scan(G, b_P, dim=-3))
    return means, covs


def complex_gaussian_kl(m_q: Tensor, P_q: Tensor, m_p: Tensor, P_p: Tensor) -> Tensor:
    r"""KL(CN(m_q, P_q) || CN(m_p, P_p)) of circular complex Gaussians; real, shape (...).

    :math:`\mathrm{tr}(P_p^{-1}P_q) - d + \log|P_p| - \log|P_q| + (m_p - m_q)^H
    P_p^{-1}(m_p - m_q)` (no 1/2: see the module docstring). m (..., d), P (..., d, d)
    Hermitian positive definite (else ``ValueError``).
    """
    m_q, P_q, m_p, P_p = _common(m_q=m_q, P_q=P_q, m_p=m_p, P_p=P_p)
    Lq = complex_cholesky(P_q, "posterior covariance")
    Lp = complex_cholesky(P_p, "prior covariance")
    d = m_q.shape[-1]
    batch = torch.broadcast_shapes(Lq.shape[:-2], Lp.shape[:-2], m_q.shape[:-1], m_p.shape[:-1])
    Lp = Lp.expand(*batch, d, d)
    trace = _sqnorm(
        torch.linalg.solve_triangular(Lp, Lq.expand(*batch, d, d), upper=False), (-2, -1)
    )
    diff = (m_p - m_q).expand(*batch, d)[..., None]
    maha = _sqnorm(torch.linalg.solve_triangular(Lp, diff, upper=False), (-2, -1))
    return trace - d + _logdet(Lp) - _logdet(Lq) + maha


def complex_chain_kl(
    m1_q: Tensor,
    P1_q: Tensor,
    trans_q: tuple[Tensor, Tensor, Tensor],
    m1_p: Tensor,
    P1_p: Tensor,
    trans_p: tuple[Tensor, Tensor, Tensor],
    mask: Tensor | None = None,
    marginals: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    r"""KL(q || p) of two circular complex Gauss–Markov chains over the same times; (B,).

    The chain rule of KL with each expectation over :math:`q(z_{i-1}) = \mathcal{CN}(m,
    P)` in closed form (the transition means are affine in :math:`z_{i-1}`):
    :math:`\mathrm{tr}(Q_p^{-1}Q_q) - d + \log\frac{|Q_p|}{|Q_q|} + \mu^H Q_p^{-1}\mu +
    \mathrm{tr}(D^H Q_p^{-1} D P)`, :math:`D = \mathrm{diag}(f_q - f_p)`,
    :math:`\mu = (f_q - f_p) \odot m + (c_q - c_p)`.

    m1 (B, d), P1 (B, d, d); ``trans_*`` = (f, c, Q) of shapes (B, n-1, d), (B, n-1, d),
    (B, n-1, d, d) (from :func:`complex_diag_transition`; broadcastable). ``mask``
    (B, n-1) bool drops padded transitions: their terms are exactly 0 (they are replaced
    by equal, unit-noise transitions before any factorisation, so a degenerate padded
    ``Q`` neither raises nor leaks NaN into the gradient). ``marginals``: q's
    ``(means, covs)`` when the caller has propagated them already.
    """
    f_q, c_q, Q_q = trans_q
    f_p, c_p, Q_p = trans_p
    kl = complex_gaussian_kl(m1_q, P1_q, m1_p, P1_p)
    if f_q.shape[-2] == 0:
        return kl
    if marginals is None:
        marginals = complex_propagate(m1_q, P1_q, f_q, c_q, Q_q)
    means, covs = marginals
    m_prev, P_prev = means[..., :-1, :], covs[..., :-1, :, :]
    d = m_prev.shape[-1]
    if mask is not None:
        mv, mm = mask[..., None], mask[..., None, None]
        eye = torch.eye(d, dtype=Q_q.dtype, device=Q_q.device)
        Q_q, Q_p = torch.where(mm, Q_q, eye), torch.where(mm, Q_p, eye)
        f_p, c_p = torch.where(mv, f_p, f_q), torch.where(mv, c_p, c_q)
    Lp = complex_cholesky(Q_p, "prior transition covariance")
    Lq = complex_cholesky(Q_q, "posterior transition covariance")
    batch = torch.broadcast_shapes(Lp.shape[:-2], Lq.shape[:-2], m_prev.shape[:-1])
    Lp = Lp.expand(*batch, d, d)
    eye = torch.eye(d, dtype=Lp.dtype, device=Lp.device).expand(*batch, d, d)
    W = torch.linalg.solve_triangular(Lp, eye, upper=False)  # Lp^{-1}: Q_p^{-1} = W^H W
    df, dc = f_q - f_p, c_q - c_p
    mu = df * m_prev + dc
    trace = _sqnorm(W @ Lq, (-2, -1))
    maha = _sqnorm((W @ mu[..., None])[..., 0], (-1,))
    Y = W * df[..., None, :]  # Lp^{-1} D
    spread = ((Y @ P_prev) * Y.conj()).sum((-2, -1)).real  # tr(D^H Q_p^{-1} D P)
    step = trace - d + _logdet(Lp) - _logdet(Lq) + maha + spread
    if mask is not None:
        step = torch.where(mask, step, torch.zeros_like(step))
    return kl + step.sum(-1)


def complex_predictive(
    means: Tensor, covs: Tensor, H: Tensor, R: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    r"""Mean and variance of :math:`\mathrm{Re}(Hz)` (plus noise ``R`` if given) for
    circular :math:`z \sim \mathcal{CN}(m, P)`: :math:`\mathrm{Re}(Hm)` and
    :math:`\tfrac12 (HPH^H)_{kk} + R_k`.

    means (..., d), covs (..., d, d), H (D, d) complex, R (D,) -> two real (..., D).
    """
    H = _as_complex(H, "H", means)
    mean = (means @ H.transpose(-1, -2)).real
    var = 0.5 * ((H @ covs) * H.conj()).sum(-1).real
    if R is not None:
        var = var + R
    return mean, var


def complex_gaussian_elbo(
    y: Tensor,
    mask: Tensor,
    t: Tensor,
    posterior: dict,
    prior: dict,
    H: Tensor,
    R: Tensor,
    valid: Tensor | None = None,
) -> tuple[Tensor, dict]:
    r"""ELBO per episode ``(B,)`` of the complex latent with ``y = Re(H z) + eps``.

    The expected log-likelihood of each observed entry is exact,

    .. math::
        \mathbb E_q \log p(y_{ik} \mid z_i) = -\tfrac12\Big[\frac{(y_{ik} -
        \mathrm{Re}(Hm_i)_k)^2 + \tfrac12(HP_iH^H)_{kk}}{R_k} + \log 2\pi R_k\Big],

    minus :func:`complex_chain_kl` against the prior SDE's chain over the same times.

    y, mask (B, n, D) (real values; bool); t (B, n). ``posterior``: ``m1`` (B, d), ``P1``
    (B, d, d) Hermitian, ``lam``, ``beta`` (B, n-1, d), ``L`` (B, n-1, d, m) complex.
    ``prior``: ``lam``, ``beta`` (d,), ``L`` (d, m), ``m0`` (d,), ``P0`` (d, d) (the prior
    at ``t[:, 0]``). H (D, d) complex, R (D,) > 0. ``valid`` (B, n) bool marks real time
    points (padding False): a padded interval (``valid[:, i+1]`` False) has ``dt = 0``
    (its marginal carries the last one forward) and adds nothing to the KL; a decreasing
    time between valid points raises ``ValueError``. Returns ``(elbo, {"expected_loglik",
    "kl", "means", "covs"})`` with the posterior marginals (B, n, d), (B, n, d, d).
    """
    if y.is_complex():
        raise TypeError("y must be real (the observations are Re(H z) + noise)")
    B, n, D = y.shape
    valid = torch.ones(B, n, dtype=torch.bool, device=y.device) if valid is None else valid
    obs = mask.bool() & valid[..., None]
    inner = valid[:, 1:]
    dt = torch.diff(t, dim=1)
    dt = torch.where(inner, dt, torch.zeros_like(dt))
    trans_q = complex_diag_transition(posterior["lam"], posterior["beta"], posterior["L"], dt)
    trans_p = complex_diag_transition(prior["lam"], prior["beta"], prior["L"], dt)
    means, covs = complex_propagate(posterior["m1"], posterior["P1"], *trans_q)
    pred, var = complex_predictive(means, covs, H)
    resid = torch.where(obs, y - pred, torch.zeros_like(pred))
    w = obs.to(pred.dtype)
    ell = -0.5 * ((resid**2 + var) / R + torch.log(2 * math.pi * R)) * w
    expected = ell.sum(dim=(1, 2))
    m1 = _as_complex(posterior["m1"], "m1", means)
    P1 = _as_complex(posterior["P1"], "P1", means)
    kl = complex_chain_kl(
        m1,
        P1,
        trans_q,
        _as_complex(prior["m0"], "m0", means).expand_as(m1),
        _as_complex(prior["P0"], "P0", means).expand_as(P1),
        trans_p,
        mask=inner,
    )
    return expected - kl, {"expected_loglik": expected, "kl": kl, "means": means, "covs": covs}
