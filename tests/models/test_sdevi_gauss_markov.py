"""The Gauss–Markov core of SDEVI against exact solutions and Monte Carlo."""

import math

import pytest
import torch
from torch.distributions import MultivariateNormal, kl_divergence

import simsci
from simsci.models.sdevi import chain_kl, gaussian_kl, lti_transition, propagate


def _stable(d, batch=(), gen=None, dtype=torch.float64):
    M = torch.randn(*batch, d, d, generator=gen, dtype=dtype)
    return M - (d + 1.0) * torch.eye(d, dtype=dtype)  # eigenvalues in the left half-plane


def _spd(d, batch=(), dtype=torch.float64):
    M = torch.randn(*batch, d, d, dtype=dtype)
    return M @ M.transpose(-1, -2) + 0.5 * torch.eye(d, dtype=dtype)


def test_transition_matches_the_moment_odes(device):
    d, dt = 3, 0.37
    A = _stable(d).to(device)
    b = torch.randn(d, dtype=torch.float64, device=device)
    L = torch.randn(d, 2, dtype=torch.float64, device=device)
    m0 = torch.randn(d, dtype=torch.float64, device=device)
    P0 = _spd(d).to(device)
    F, c, Q = lti_transition(A, b, L, torch.tensor(dt))

    def moments(t, y):  # dm = A m + b, dP = A P + P A^T + L L^T (flattened)
        m, P = y[:, :d], y[:, d:].reshape(-1, d, d)
        dP = A @ P + P @ A.T + L @ L.T
        return torch.cat([m @ A.T + b, dP.reshape(-1, d * d)], dim=1)

    y0 = torch.cat([m0, P0.reshape(-1)])[None]
    t = torch.tensor([0.0, dt], dtype=torch.float64)
    yT = simsci.odeint(moments, y0, t, method="dopri5", rtol=1e-12, atol=1e-12)[0, -1]
    # agreement to the ODE solver's accuracy (a wrong F, c or Q is off by O(1))
    torch.testing.assert_close(F @ m0 + c, yT[:d], rtol=1e-7, atol=1e-8)
    torch.testing.assert_close(F @ P0 @ F.T + Q, yT[d:].reshape(d, d), rtol=1e-7, atol=1e-8)


def test_ornstein_uhlenbeck_closed_form_and_singular_drift():
    theta, sigma, dt = 1.7, 0.6, torch.tensor([0.1, 1.0, 5.0], dtype=torch.float64)
    A = torch.full((1, 1), -theta, dtype=torch.float64)
    F, c, Q = lti_transition(A, torch.tensor([theta * 2.0]), torch.full((1, 1), sigma), dt)
    torch.testing.assert_close(F[:, 0, 0], torch.exp(-theta * dt))
    torch.testing.assert_close(c[:, 0], 2.0 * (1 - torch.exp(-theta * dt)))  # mean 2
    var = sigma**2 / (2 * theta) * (1 - torch.exp(-2 * theta * dt))
    torch.testing.assert_close(Q[:, 0, 0], var)
    # A = 0 (Brownian motion with drift): F = 1, c = b dt, Q = sigma^2 dt -- no 1/eigenvalue
    F, c, Q = lti_transition(
        torch.zeros(1, 1, dtype=torch.float64), torch.tensor([0.5]), torch.eye(1) * sigma, dt
    )
    torch.testing.assert_close(c[:, 0], 0.5 * dt)
    torch.testing.assert_close(Q[:, 0, 0], sigma**2 * dt)


def test_gaussian_kl_matches_torch_distributions():
    d = 4
    m_q, m_p = torch.randn(5, d, dtype=torch.float64), torch.randn(5, d, dtype=torch.float64)
    P_q, P_p = _spd(d, (5,)), _spd(d, (5,))
    ref = kl_divergence(MultivariateNormal(m_q, P_q), MultivariateNormal(m_p, P_p))
    torch.testing.assert_close(gaussian_kl(m_q, P_q, m_p, P_p), ref)


def _chain(B, n, d, scale=1.0):
    A = _stable(d, (B, n - 1)) * scale
    b = torch.randn(B, n - 1, d, dtype=torch.float64)
    L = 0.5 * torch.randn(B, n - 1, d, d, dtype=torch.float64)
    L = L + torch.eye(d, dtype=torch.float64)
    dt = torch.rand(B, n - 1, dtype=torch.float64) * 0.5 + 0.05
    return lti_transition(A, b, L, dt)


def test_chain_kl_matches_monte_carlo_and_vanishes_for_equal_chains():
    torch.manual_seed(1)
    B, n, d = 2, 4, 2
    q = _chain(B, n, d)
    p = _chain(B, n, d, scale=0.5)
    m1q, P1q = torch.randn(B, d, dtype=torch.float64), _spd(d, (B,))
    m1p, P1p = torch.randn(B, d, dtype=torch.float64), _spd(d, (B,))
    kl = chain_kl(m1q, P1q, q, m1p, P1p, p)
    # Monte Carlo: E_q[log q(z_1..n) - log p(z_1..n)]
    S = 200_000
    z = MultivariateNormal(m1q, P1q).sample((S,))  # (S, B, d)
    logr = MultivariateNormal(m1q, P1q).log_prob(z) - MultivariateNormal(m1p, P1p).log_prob(z)
    for i in range(n - 1):
        mean_q = (q[0][:, i] @ z[..., None])[..., 0] + q[1][:, i]
        z_next = MultivariateNormal(mean_q, q[2][:, i]).sample()
        mean_p = (p[0][:, i] @ z[..., None])[..., 0] + p[1][:, i]
        logr = logr + MultivariateNormal(mean_q, q[2][:, i]).log_prob(z_next)
        logr = logr - MultivariateNormal(mean_p, p[2][:, i]).log_prob(z_next)
        z = z_next
    mc, se = logr.mean(0), logr.std(0) / math.sqrt(S)
    assert (kl - mc).abs().max() < 5 * se.max() + 1e-3, (kl, mc, se)
    same = chain_kl(m1q, P1q, q, m1q, P1q, q)
    torch.testing.assert_close(same, torch.zeros(B, dtype=torch.float64), atol=1e-9, rtol=0)
    assert (kl > 0).all()


def test_chain_kl_mask_drops_padded_transitions():
    torch.manual_seed(2)
    B, n, d = 1, 5, 2
    q, p = _chain(B, n, d), _chain(B, n, d, 0.3)
    m, P = torch.zeros(B, d, dtype=torch.float64), _spd(d, (B,))
    short = chain_kl(m, P, tuple(x[:, :2] for x in q), m, P, tuple(x[:, :2] for x in p))
    mask = torch.tensor([[True, True, False, False]])
    torch.testing.assert_close(chain_kl(m, P, q, m, P, p, mask=mask), short)


def test_propagate_matches_sequential_sampling_moments():
    torch.manual_seed(3)
    q = _chain(1, 3, 2)
    m0, P0 = torch.zeros(1, 2, dtype=torch.float64), torch.eye(2, dtype=torch.float64)[None]
    means, covs = propagate(m0, P0, *q)
    F, c, Q = q[0][0, 0], q[1][0, 0], q[2][0, 0]
    torch.testing.assert_close(means[0, 1], c)
    torch.testing.assert_close(covs[0, 1], F @ F.T + Q)


def test_bad_covariances_and_times_are_refused():
    A = -torch.eye(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="must be >= 0"):
        lti_transition(A, torch.zeros(2), torch.eye(2), torch.tensor(-0.1))
    bad = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=torch.float64)  # indefinite
    with pytest.raises(ValueError, match="lost positive definiteness"):
        gaussian_kl(torch.zeros(2), bad, torch.zeros(2), torch.eye(2, dtype=torch.float64))


def test_gradients_flow_through_the_transition():
    A = (-torch.eye(2, dtype=torch.float64) * 0.7).requires_grad_()
    L = (torch.eye(2, dtype=torch.float64) * 0.3).requires_grad_()
    b = torch.zeros(2, dtype=torch.float64, requires_grad=True)

    def f(A, b, L):
        F, c, Q = lti_transition(A, b, L, torch.tensor(0.4, dtype=torch.float64))
        return F.sum() + c.sum() + Q.sum()

    assert torch.autograd.gradcheck(f, (A, b, L))


def test_expm_matches_torch_matrix_exp_for_small_and_large_norms():
    from simsci.integrate import expm

    M = (
        torch.randn(6, 5, 5, dtype=torch.float64)
        * torch.tensor([0.01, 0.3, 1, 3, 10, 30.0]).reshape(-1, 1, 1).double()
    )
    torch.testing.assert_close(expm(M), torch.linalg.matrix_exp(M), rtol=1e-9, atol=1e-12)


def test_per_matrix_squarings_give_each_matrix_its_own_exponential():
    """Each matrix of a batch (norms 0.01 to 30, shuffled, leading batch axes) gets what
    it gets alone, for expm and for the (F, c, Q) of lti_transition, in a batch large
    enough to be sorted by squaring count and in a small one (masked rounds)."""
    from simsci.integrate import expm
    from simsci.integrate._linear import _PER_MATRIX_FROM

    g = torch.Generator().manual_seed(0)
    n = 2 * _PER_MATRIX_FROM
    scale = 10 ** (torch.rand(n, generator=g, dtype=torch.float64) * 3.5 - 2)
    M = torch.randn(n, 4, 4, generator=g, dtype=torch.float64) * scale[:, None, None]
    torch.testing.assert_close(
        expm(M.reshape(2, n // 2, 4, 4)).reshape(n, 4, 4),
        torch.linalg.matrix_exp(M),
        rtol=1e-9,
        atol=1e-12,
    )
    A = M - 3 * scale[:, None, None] * torch.eye(4, dtype=torch.float64)  # stable drifts
    b = torch.randn(n, 4, generator=g, dtype=torch.float64)
    L = torch.randn(n, 4, 4, generator=g, dtype=torch.float64)
    dt = torch.rand(n, generator=g, dtype=torch.float64) + 0.05
    together, small = lti_transition(A, b, L, dt), lti_transition(A[:9], b[:9], L[:9], dt[:9])
    for i in (0, 7, n // 2, n - 1):
        alone = lti_transition(A[i : i + 1], b[i : i + 1], L[i : i + 1], dt[i : i + 1])
        for k, (x, y) in enumerate(zip(together, alone)):
            torch.testing.assert_close(x[i : i + 1], y, rtol=1e-10, atol=1e-13)
            if i < 9:
                torch.testing.assert_close(small[k][i : i + 1], y, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 33])
def test_propagate_means_equals_the_means_of_propagate(n):
    from simsci.models.sdevi._gauss_markov import propagate_means

    m0, P0, F, c, Q = _dynamics("rotating", 3, n, 4)
    F.requires_grad_(True)
    means = propagate_means(m0, F, c)
    torch.testing.assert_close(means, _loop(m0, P0, F, c, Q)[0], rtol=1e-10, atol=1e-12)
    if n > 1:
        (grad,) = torch.autograd.grad(means.sum(), F)
        (expected,) = torch.autograd.grad(_loop(m0, P0, F, c, Q)[0].sum(), F)
        torch.testing.assert_close(grad, expected, rtol=1e-9, atol=1e-11)


# --------------------------------------------------------------- the scan against the loop
def _loop(m0, P0, F, c, Q):
    """The plain recursion (the reference the scan must reproduce)."""
    means, covs = [m0], [0.5 * (P0 + P0.transpose(-1, -2))]
    for i in range(F.shape[1]):
        means.append((F[:, i] @ means[-1][..., None])[..., 0] + c[:, i])
        P = F[:, i] @ covs[-1] @ F[:, i].transpose(-1, -2) + Q[:, i]
        covs.append(0.5 * (P + P.transpose(-1, -2)))
    return torch.stack(means, 1), torch.stack(covs, 1)


def _dynamics(kind, B, n, d, dtype=torch.float64, device="cpu"):
    """Transitions of a contracting (eigenvalues well inside the unit disc) or rotating
    (skew-symmetric drift, |eigenvalues of F| ~ 1: nothing forgets) chain."""
    W = torch.randn(B, n - 1, d, d, dtype=torch.float64)
    eye = torch.eye(d, dtype=torch.float64)
    A = 0.5 * W - 1.5 * eye if kind == "contracting" else 2.0 * (W - W.transpose(-1, -2))
    b = torch.randn(B, n - 1, d, dtype=torch.float64)
    L = 0.3 * torch.randn(B, n - 1, d, d, dtype=torch.float64)
    dt = torch.rand(B, n - 1, dtype=torch.float64) * 0.2 + 0.01
    F, c, Q = lti_transition(A, b, L, dt)
    m0 = torch.randn(B, d, dtype=torch.float64)
    M = torch.randn(B, d, d, dtype=torch.float64)
    P0 = M @ M.transpose(-1, -2) + eye
    return [x.to(device=device, dtype=dtype) for x in (m0, P0, F, c, Q)]


def _rel(x, ref):
    return float((x.double() - ref.double()).abs().max() / ref.double().abs().max())


@pytest.mark.parametrize("kind", ["contracting", "rotating"])
def test_propagate_scan_matches_the_loop_in_float64(kind, device):
    # lengths around the loop/scan switch and the scan's odd/even splits, and a long chain
    for n in (1, 2, 8, 9, 10, 11, 12, 17, 33, 64, 1000):
        args = _dynamics(kind, 3, n, 4, device=device)
        means, covs = propagate(*args)
        ref_m, ref_P = _loop(*args)
        assert means.shape == ref_m.shape and covs.shape == ref_P.shape
        assert _rel(means, ref_m) < 1e-10 and _rel(covs, ref_P) < 1e-10, n
        assert torch.equal(covs, covs.transpose(-1, -2))  # symmetrised


@pytest.mark.parametrize("kind", ["contracting", "rotating"])
def test_propagate_scan_is_accurate_in_float32_over_long_chains(kind):
    args64 = _dynamics(kind, 4, 1000, 8)
    ref_m, ref_P = _loop(*args64)
    args32 = [x.float() for x in args64]
    means, covs = propagate(*args32)
    loop_m, loop_P = _loop(*args32)
    # float32 round-off over 1000 steps: the scan is as accurate as the loop
    assert _rel(means, ref_m) < 1e-5 and _rel(covs, ref_P) < 1e-5
    assert _rel(means, ref_m) < 3 * _rel(loop_m, ref_m) + 1e-6
    assert _rel(covs, ref_P) < 3 * _rel(loop_P, ref_P) + 1e-6


def test_propagate_gradients_match_the_loop_and_pass_gradcheck():
    for n in (5, 12, 40):  # the loop branch, and the scan with its adjoint backward
        args = [x.requires_grad_() for x in _dynamics("rotating", 2, n, 3)]
        w_m = torch.randn(2, n, 3, dtype=torch.float64)
        w_P = torch.randn(2, n, 3, 3, dtype=torch.float64)  # not symmetric on purpose

        def loss(fn, args=args, w_m=w_m, w_P=w_P):
            means, covs = fn(*args)
            return (means * w_m).sum() + (covs * w_P).sum()

        got = torch.autograd.grad(loss(propagate), args)
        want = torch.autograd.grad(loss(_loop), args)
        for g, r in zip(got, want):
            assert _rel(g, r) < 1e-10, n
    args = [x.requires_grad_() for x in _dynamics("contracting", 2, 12, 2)]
    assert torch.autograd.gradcheck(propagate, args)
    assert torch.autograd.gradgradcheck(propagate, args)


def test_propagate_gradient_of_one_output_and_of_expanded_inputs():
    m0, P0, F, c, Q = _dynamics("contracting", 3, 20, 2)
    m0 = m0[:1].requires_grad_()
    F = F.requires_grad_()
    # a shared initial state (expanded over the batch) and only the means used
    means, _ = propagate(m0.expand(3, 2), P0, F, c, Q)
    g_m0, g_F = torch.autograd.grad(means.sum(), (m0, F))
    r_m0, r_F = torch.autograd.grad(_loop(m0.expand(3, 2), P0, F, c, Q)[0].sum(), (m0, F))
    assert g_m0.shape == (1, 2)
    assert _rel(g_m0, r_m0) < 1e-10 and _rel(g_F, r_F) < 1e-10


# --------------------------------------------------------------- expm, shared prior, KL
def test_expm_taylor_polynomial_is_exact_for_every_degree():
    from simsci.integrate._linear import _taylor

    X = 0.1 * torch.randn(3, 6, 6, dtype=torch.float64)
    for degree in range(1, 15):
        ref = sum(torch.linalg.matrix_power(X, j) / math.factorial(j) for j in range(degree + 1))
        torch.testing.assert_close(_taylor(X, degree), ref, rtol=0, atol=1e-15)


def test_shared_prior_transitions_are_computed_once_per_distinct_step():
    from simsci.integrate._linear import _lti_transition

    d = 3
    A = (_stable(d) * 0.5).requires_grad_()
    b = torch.randn(d, dtype=torch.float64, requires_grad=True)
    L = torch.randn(d, d, dtype=torch.float64, requires_grad=True)
    dt = torch.tensor([[0.1, 0.2, 0.1], [0.3, 0.1, 0.2]], dtype=torch.float64)  # repeats
    got = lti_transition(A, b, L, dt)
    want = _lti_transition(A, b, L, dt)  # every step exponentiated
    w = [torch.randn_like(x) for x in want]
    for g, r in zip(got, want):
        assert g.shape == r.shape
        torch.testing.assert_close(g, r, rtol=1e-14, atol=1e-15)
    grads = torch.autograd.grad(sum((x * v).sum() for x, v in zip(got, w)), (A, b, L))
    refs = torch.autograd.grad(sum((x * v).sum() for x, v in zip(want, w)), (A, b, L))
    for g, r in zip(grads, refs):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-14)


def test_chain_kl_with_given_marginals_equals_propagating_them():
    torch.manual_seed(4)
    B, n, d = 2, 12, 3
    q, p = _chain(B, n, d), _chain(B, n, d, 0.4)
    m, P = torch.randn(B, d, dtype=torch.float64), _spd(d, (B,))
    marginals = propagate(m, P, *q)
    torch.testing.assert_close(
        chain_kl(m, P, q, m * 0, P, p, marginals=marginals), chain_kl(m, P, q, m * 0, P, p)
    )


def test_chain_kl_matches_the_cholesky_solve_formula():
    # the triangular-solve form of the KL terms against the textbook one
    torch.manual_seed(5)
    B, n, d = 3, 6, 3
    q, p = _chain(B, n, d), _chain(B, n, d, 0.4)
    m1q, P1q = torch.randn(B, d, dtype=torch.float64), _spd(d, (B,))
    m1p, P1p = torch.randn(B, d, dtype=torch.float64), _spd(d, (B,))
    means, covs = _loop(m1q, P1q, *q)
    (F_q, c_q, Q_q), (F_p, c_p, Q_p) = q, p
    Qp_inv = torch.linalg.inv(Q_p)
    dF = F_q - F_p
    mu = (dF @ means[:, :-1, :, None])[..., 0] + c_q - c_p
    trace = (Qp_inv @ Q_q).diagonal(dim1=-2, dim2=-1).sum(-1)
    maha = (mu[..., None, :] @ Qp_inv @ mu[..., None])[..., 0, 0]
    spread = (dF.transpose(-1, -2) @ Qp_inv @ dF @ covs[:, :-1]).diagonal(dim1=-2, dim2=-1)
    logdets = torch.logdet(Q_p) - torch.logdet(Q_q)
    steps = 0.5 * (trace - d + logdets + maha + spread.sum(-1))
    ref = gaussian_kl(m1q, P1q, m1p, P1p) + steps.sum(-1)
    torch.testing.assert_close(chain_kl(m1q, P1q, q, m1p, P1p, p), ref, rtol=1e-10, atol=1e-12)
