"""Complex-domain SDEVI against its real 2d-dimensional equivalent, closed forms and
Monte Carlo.

A circular complex latent z = u + i v with a diagonal drift is a real linear system in
(u, v): drift [[Re Λ, -Im Λ], [Im Λ, Re Λ]], diffusion (1/√2)[[Re L, -Im L], [Im L, Re L]],
covariances ½[[Re P, -Im P], [Im P, Re P]], observations Re(H z) = [Re H, -Im H] (u, v).
"""

import math

import pytest
import torch

from simsci.integrate import lti_transition
from simsci.models.sdevi._complex import (
    _phi1,
    complex_chain_kl,
    complex_cholesky,
    complex_diag_transition,
    complex_gaussian_elbo,
    complex_gaussian_kl,
    complex_predictive,
    complex_propagate,
)
from simsci.models.sdevi._elbo import linear_gaussian_elbo
from simsci.models.sdevi._gauss_markov import chain_kl, gaussian_kl, propagate

C128 = torch.complex128


# ---- the real equivalent -------------------------------------------------------------


def real_vec(z):
    return torch.cat([z.real, z.imag], -1)


def real_mat(M):
    top = torch.cat([M.real, -M.imag], -1)
    bottom = torch.cat([M.imag, M.real], -1)
    return torch.cat([top, bottom], -2)


def real_cov(P):
    return 0.5 * real_mat(P)


def real_trans(f, c, Q):
    return real_mat(torch.diag_embed(f)), real_vec(c), real_cov(Q)


# ---- random complex inputs -----------------------------------------------------------


def randc(*shape):
    return torch.complex(torch.randn(*shape, dtype=torch.float64), torch.randn(*shape).double())


def stable_lam(*shape, omega=3.0):
    decay = 0.2 + torch.rand(*shape, dtype=torch.float64)
    return torch.complex(-decay, omega * torch.randn(*shape, dtype=torch.float64))


def hpd(d, batch=()):
    M = randc(*batch, d, d)
    return M @ M.mH + 0.5 * torch.eye(d, dtype=C128)


def sample_cn(m, P, S):
    """S samples of CN(m, P): m + chol(P) w, w ~ CN(0, I)."""
    Lc = torch.linalg.cholesky(P)
    w = randc(S, *m.shape) / math.sqrt(2)
    return m + (Lc @ w[..., None])[..., 0]


def log_cn(z, m, P):
    """log density of CN(m, P) at z: -d log pi - log|P| - (z-m)^H P^{-1} (z-m)."""
    d = m.shape[-1]
    Lc = torch.linalg.cholesky(P)
    v = torch.linalg.solve_triangular(Lc, (z - m)[..., None], upper=False)[..., 0]
    logdet = 2 * Lc.diagonal(dim1=-2, dim2=-1).real.log().sum(-1)
    return -d * math.log(math.pi) - logdet - (v.abs() ** 2).sum(-1)


def chains(B, n, d, m=2):
    """Posterior-like (per-interval) and prior-like (shared) transitions on one grid."""
    dt = 0.05 + 0.5 * torch.rand(B, n - 1, dtype=torch.float64)
    q = complex_diag_transition(
        stable_lam(B, n - 1, d), randc(B, n - 1, d), randc(B, n - 1, d, m) + torch.eye(d, m), dt
    )
    p = complex_diag_transition(stable_lam(d), randc(d), randc(d, m) + torch.eye(d, m), dt)
    return q, p


def problem(B=2, n=4, d=2, m=2, D=3):
    """A complex ELBO problem: observations, masks, times, posterior and prior."""
    t = torch.cumsum(0.1 + 0.4 * torch.rand(B, n, dtype=torch.float64), 1)
    y = torch.randn(B, n, D, dtype=torch.float64)
    mask = torch.rand(B, n, D) < 0.7
    post = {
        "m1": randc(B, d),
        "P1": hpd(d, (B,)),
        "lam": stable_lam(B, n - 1, d),
        "beta": randc(B, n - 1, d),
        "L": 0.5 * randc(B, n - 1, d, m) + torch.eye(d, m, dtype=C128),
    }
    prior = {
        "lam": stable_lam(d),
        "beta": randc(d),
        "L": 0.5 * randc(d, m) + torch.eye(d, m, dtype=C128),
        "m0": randc(d),
        "P0": hpd(d),
    }
    H = randc(D, d)
    R = 0.3 + torch.rand(D, dtype=torch.float64)
    return y, mask, t, post, prior, H, R


# ---- transitions ---------------------------------------------------------------------


def test_transition_equals_the_real_2d_lti_transition():
    B, d, m = 5, 3, 2
    lam = stable_lam(B, d, omega=4.0)
    beta, L = randc(B, d), randc(B, d, m)
    dt = torch.tensor([0.0, 0.01, 0.3, 1.0, 2.5], dtype=torch.float64)  # |lam dt| up to ~20
    f, c, Q = complex_diag_transition(lam, beta, L, dt)
    assert f.shape == (B, d) and c.shape == (B, d) and Q.shape == (B, d, d)
    torch.testing.assert_close(Q, Q.mH, rtol=0, atol=0)
    A_r = real_mat(torch.diag_embed(lam))
    F_r, c_r, Q_r = lti_transition(A_r, real_vec(beta), real_mat(L) / math.sqrt(2), dt)
    tol = {"rtol": 0, "atol": 1e-10}
    torch.testing.assert_close(real_mat(torch.diag_embed(f)), F_r, **tol)
    torch.testing.assert_close(real_vec(c), c_r, **tol)
    torch.testing.assert_close(real_cov(Q), Q_r, **tol)


def test_transition_small_and_zero_eigenvalue_limit_is_finite_and_exact():
    d, dt = 3, torch.tensor(0.7, dtype=torch.float64)
    beta, L = randc(d), randc(d, 2)
    S = L @ L.mH
    for lam in (
        torch.zeros(d, dtype=C128),
        torch.full((d,), 1e-9, dtype=C128),
        torch.tensor([1e-9 + 1e-9j, -1e-9 + 2e-9j, 0.0], dtype=C128),
    ):
        f, c, Q = complex_diag_transition(lam, beta, L, dt)
        x = lam * dt
        xx = x[:, None] + x.conj()[None, :]
        # the limit dt (1 + x/2 + x^2/6) is exact to O(x^3) ~ 1e-27 here
        torch.testing.assert_close(c, beta * dt * (1 + x / 2 + x**2 / 6), rtol=1e-15, atol=0)
        torch.testing.assert_close(Q, S * dt * (1 + xx / 2 + xx**2 / 6), rtol=1e-15, atol=1e-300)
        torch.testing.assert_close(f, torch.exp(x), rtol=1e-15, atol=0)

    # and the gradient through the limit is finite and right (the quotient's 0/0 branch
    # must not leak NaN through torch.where)
    def g(lam, beta, L):
        return complex_diag_transition(lam, beta, L, dt)

    lam0 = torch.tensor([0.0, 1e-9, -0.7 + 0.2j], dtype=C128, requires_grad=True)
    assert torch.autograd.gradcheck(g, (lam0, beta.requires_grad_(), L.requires_grad_()))


def test_phi1_matches_high_precision_across_the_series_threshold():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    radii = [1e-12, 1e-6, 1e-3, 0.1, 0.4999, 0.5, 0.5001, 0.9, 3.0, 20.0]
    angles = [0.0, 0.7, math.pi / 2, 2.0, math.pi]
    xs = [r * complex(math.cos(a), math.sin(a)) for r in radii for a in angles]
    got = _phi1(torch.tensor(xs, dtype=C128))
    for x, g in zip(xs, got.tolist(), strict=True):
        ref = complex(mpmath.expm1(mpmath.mpc(x)) / mpmath.mpc(x))
        assert abs(g - ref) <= 4e-16 * abs(ref), (x, g, ref)
    assert complex(_phi1(torch.zeros(1, dtype=C128))[0]) == 1.0


# ---- chain marginals and KL -----------------------------------------------------------


def test_propagate_scan_matches_a_loop_and_the_real_propagate():
    for n in (1, 2, 5, 6, 7, 12, 33):  # the loop, and one to three levels of the scan
        B, d = 2, 3
        (f, c, Q), _ = chains(B, max(n, 2), d)
        f, c, Q = f[:, : n - 1], c[:, : n - 1], Q[:, : n - 1]
        m1, P1 = randc(B, d), hpd(d, (B,))
        means, covs = complex_propagate(m1, P1, f, c, Q)
        assert means.shape == (B, n, d) and covs.shape == (B, n, d, d)
        m, P = m1, P1
        for i in range(n - 1):
            torch.testing.assert_close(means[:, i], m, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(covs[:, i], P, rtol=1e-12, atol=1e-12)
            m = f[:, i] * m + c[:, i]
            P = (f[:, i, :, None] * f[:, i, None, :].conj()) * P + Q[:, i]
        torch.testing.assert_close(means[:, -1], m, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(covs[:, -1], P, rtol=1e-12, atol=1e-12)
        means_r, covs_r = propagate(real_vec(m1), real_cov(P1), *real_trans(f, c, Q))
        torch.testing.assert_close(real_vec(means), means_r, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(real_cov(covs), covs_r, rtol=1e-12, atol=1e-12)


def test_gaussian_kl_equals_the_real_2d_kl():
    B, d = 4, 3
    m_q, m_p, P_q, P_p = randc(B, d), randc(B, d), hpd(d, (B,)), hpd(d, (B,))
    kl = complex_gaussian_kl(m_q, P_q, m_p, P_p)
    assert kl.dtype == torch.float64 and kl.shape == (B,)
    ref = gaussian_kl(real_vec(m_q), real_cov(P_q), real_vec(m_p), real_cov(P_p))
    torch.testing.assert_close(kl, ref, rtol=1e-12, atol=1e-12)
    same = complex_gaussian_kl(m_q, P_q, m_q, P_q)
    torch.testing.assert_close(same, torch.zeros(B, dtype=torch.float64), rtol=0, atol=1e-12)


def test_chain_kl_equals_the_real_chain_kl_also_masked():
    B, n, d = 2, 5, 3
    q, p = chains(B, n, d)
    m1q, P1q, m1p, P1p = randc(B, d), hpd(d, (B,)), randc(B, d), hpd(d, (B,))
    kl = complex_chain_kl(m1q, P1q, q, m1p, P1p, p)
    rq, rp = real_trans(*q), real_trans(*p)
    ref = chain_kl(real_vec(m1q), real_cov(P1q), rq, real_vec(m1p), real_cov(P1p), rp)
    torch.testing.assert_close(kl, ref, rtol=1e-11, atol=1e-11)
    mask = torch.tensor([[True, False, True, True], [True, True, False, False]])
    kl_m = complex_chain_kl(m1q, P1q, q, m1p, P1p, p, mask=mask)
    ref_m = chain_kl(real_vec(m1q), real_cov(P1q), rq, real_vec(m1p), real_cov(P1p), rp, mask)
    torch.testing.assert_close(kl_m, ref_m, rtol=1e-11, atol=1e-11)


def test_chain_kl_matches_monte_carlo():
    B, n, d, S = 2, 4, 2, 100_000
    q, p = chains(B, n, d)
    m1q, P1q, m1p, P1p = randc(B, d), hpd(d, (B,)), randc(B, d), hpd(d, (B,))
    kl = complex_chain_kl(m1q, P1q, q, m1p, P1p, p)
    z = sample_cn(m1q, P1q, S)  # (S, B, d)
    logr = log_cn(z, m1q, P1q) - log_cn(z, m1p, P1p)
    for i in range(n - 1):
        mean_q = q[0][:, i] * z + q[1][:, i]
        mean_p = p[0][:, i] * z + p[1][:, i]
        noise = sample_cn(torch.zeros(B, d, dtype=C128), q[2][:, i], S)
        z_next = mean_q + noise
        logr = logr + log_cn(z_next, mean_q, q[2][:, i]) - log_cn(z_next, mean_p, p[2][:, i])
        z = z_next
    mc, se = logr.mean(0), logr.std(0) / math.sqrt(S)
    assert ((kl - mc).abs() < 5 * se).all(), (kl, mc, se)
    assert (kl > 0).all()


# ---- the ELBO ------------------------------------------------------------------------


def test_expected_loglik_matches_monte_carlo_over_posterior_samples():
    y, mask, t, post, prior, H, R = problem(B=2, n=4, d=2, D=3)
    _, parts = complex_gaussian_elbo(y, mask, t, post, prior, H, R)
    S = 50_000
    z = sample_cn(parts["means"], parts["covs"], S)  # (S, B, n, d)
    pred = (z @ H.T).real  # Re(H z): (S, B, n, D)
    ll = -0.5 * ((y - pred) ** 2 / R + torch.log(2 * math.pi * R))
    ll = (ll * mask).sum((-1, -2))  # (S, B)
    mc, se = ll.mean(0), ll.std(0) / math.sqrt(S)
    assert ((parts["expected_loglik"] - mc).abs() < 5 * se).all(), (parts, mc, se)
    # the predictive moments are those of the samples
    mean, var = complex_predictive(parts["means"], parts["covs"], H, R)
    spread = pred.var(0)
    assert ((mean - pred.mean(0)).abs() < 5 * (spread / S).sqrt()).all()
    # the sample variance's relative standard error is sqrt(2 / S) ~ 0.6%
    torch.testing.assert_close(var - R, spread, rtol=5 * math.sqrt(2 / S), atol=0)


def test_elbo_and_its_gradient_equal_the_real_2d_linear_gaussian_elbo():
    y, mask, t, post, prior, H, R = problem(B=2, n=9, d=2, m=2, D=3)  # n = 9: via the scan
    lam = post["lam"].clone().requires_grad_()
    elbo, parts = complex_gaussian_elbo(y, mask, t, {**post, "lam": lam}, prior, H, R)
    (grad,) = torch.autograd.grad(elbo.sum(), lam)

    lam_re = lam.detach().real.clone().requires_grad_()
    lam_im = lam.detach().imag.clone().requires_grad_()
    post_r = {
        "m1": real_vec(post["m1"]),
        "P1": real_cov(post["P1"]),
        "A": real_mat(torch.diag_embed(torch.complex(lam_re, lam_im))),
        "b": real_vec(post["beta"]),
        "L": real_mat(post["L"]) / math.sqrt(2),
    }
    prior_r = {
        "A": real_mat(torch.diag_embed(prior["lam"])),
        "b": real_vec(prior["beta"]),
        "L": real_mat(prior["L"]) / math.sqrt(2),
        "m0": real_vec(prior["m0"]),
        "P0": real_cov(prior["P0"]),
    }
    H_r = torch.cat([H.real, -H.imag], -1)
    elbo_r, parts_r = linear_gaussian_elbo(y, mask, t, post_r, prior_r, H_r, R)
    torch.testing.assert_close(elbo, elbo_r, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(parts["kl"], parts_r["kl"], rtol=1e-10, atol=1e-10)
    g_re, g_im = torch.autograd.grad(elbo_r.sum(), (lam_re, lam_im))
    # torch's complex gradient of a real function is d/dRe + i d/dIm
    torch.testing.assert_close(grad, torch.complex(g_re, g_im), rtol=1e-8, atol=1e-8)


def test_elbo_gradcheck_in_float64():
    y, mask, t, post, prior, H, R = problem(B=1, n=3, d=2, m=1, D=2)

    def f(lam, beta, L):
        elbo, _ = complex_gaussian_elbo(
            y, mask, t, {**post, "lam": lam, "beta": beta, "L": L}, prior, H, R
        )
        return elbo

    args = tuple(post[k].clone().requires_grad_() for k in ("lam", "beta", "L"))
    assert torch.autograd.gradcheck(f, args)


def test_padded_intervals_contribute_nothing_and_leak_no_nan():
    y, mask, t, post, prior, H, R = problem(B=2, n=5, d=2, D=3)
    k = 3  # episode 0 has 3 valid points; padded like union_collate (t = 0, x = NaN)
    valid = torch.ones(2, 5, dtype=torch.bool)
    valid[0, k:] = False
    y_pad, t_pad = y.clone(), t.clone()
    y_pad[0, k:], t_pad[0, k:] = float("nan"), 0.0
    lam = post["lam"].clone().requires_grad_()
    elbo, parts = complex_gaussian_elbo(
        y_pad, mask, t_pad, {**post, "lam": lam}, prior, H, R, valid=valid
    )
    short = {
        kk: (v[:1, : k - 1] if kk in ("lam", "beta", "L") else v[:1]) for kk, v in post.items()
    }
    elbo_short, _ = complex_gaussian_elbo(y[:1, :k], mask[:1, :k], t[:1, :k], short, prior, H, R)
    full, _ = complex_gaussian_elbo(
        y[1:], mask[1:], t[1:], {kk: v[1:] for kk, v in post.items()}, prior, H, R
    )
    torch.testing.assert_close(elbo[0], elbo_short[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(elbo[1], full[0], rtol=1e-12, atol=1e-12)
    # padded points carry the last valid marginal forward (dt = 0)
    torch.testing.assert_close(parts["means"][0, k:], parts["means"][0, k - 1].expand(2, -1))
    (grad,) = torch.autograd.grad(elbo.sum(), lam)
    assert torch.isfinite(grad).all()
    assert (grad[0, k - 1 :] == 0).all()  # padded intervals' parameters get no gradient


def test_complex64_elbo_is_finite_and_close_to_complex128():
    y, mask, t, post, prior, H, R = problem(B=2, n=6, d=3, D=2)
    elbo64, _ = complex_gaussian_elbo(y, mask, t, post, prior, H, R)

    def c64(x):
        return x.to(torch.complex64) if x.is_complex() else x.float()

    elbo32, _ = complex_gaussian_elbo(
        y.float(),
        mask,
        t.float(),
        {k: c64(v) for k, v in post.items()},
        {k: c64(v) for k, v in prior.items()},
        c64(H),
        R.float(),
    )
    assert elbo32.dtype == torch.float32 and torch.isfinite(elbo32).all()
    torch.testing.assert_close(elbo32.double(), elbo64, rtol=1e-3, atol=1e-2)


# ---- bad input -----------------------------------------------------------------------


def test_bad_times_and_covariances_are_refused():
    lam, beta, L = stable_lam(2), randc(2), randc(2, 2)
    with pytest.raises(ValueError, match="must be >= 0"):
        complex_diag_transition(lam, beta, L, torch.tensor([0.1, -0.1], dtype=torch.float64))
    with pytest.raises(TypeError, match="dt must be real"):
        complex_diag_transition(lam, beta, L, torch.tensor(0.1 + 0j))
    y, mask, t, post, prior, H, R = problem(B=1, n=3)
    t_bad = t.clone()
    t_bad[0, 2] = t[0, 0]
    with pytest.raises(ValueError, match="must be >= 0"):
        complex_gaussian_elbo(y, mask, t_bad, post, prior, H, R)
    # Hermitian but indefinite (eigenvalues 3 and -1) although its real part is I: a
    # plain-transpose symmetrisation (as in safe_cholesky) would factor I instead
    bad = torch.tensor([[1, 2j], [-2j, 1]], dtype=C128)
    with pytest.raises(ValueError, match="posterior covariance lost positive definiteness"):
        complex_gaussian_kl(torch.zeros(2), bad, torch.zeros(2), torch.eye(2, dtype=C128))
    with pytest.raises(ValueError, match="lost positive definiteness"):
        complex_gaussian_elbo(y, mask, t, {**post, "P1": bad[None]}, prior, H, R)


def test_complex_cholesky_factors_hermitian_matrices():
    P = hpd(4, (3,))
    Lc = complex_cholesky(P)
    torch.testing.assert_close(Lc @ Lc.mH, P, rtol=1e-12, atol=1e-12)
    assert (Lc.triu(1) == 0).all()
