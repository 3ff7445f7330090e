"""Kalman log-likelihood of irregular, masked observations against the dense Gaussian."""

import pytest
import torch
from torch.distributions import MultivariateNormal

from simsci.models.sdevi import kalman_log_likelihood, kalman_smoother, lti_transition


def _dense(y, mask, t, A, b, L, m0, P0, H, R):
    n, D = y.shape
    F, c, Q = lti_transition(A, b, L, torch.diff(t))
    mu, cov = [m0], {(0, 0): P0}
    for i in range(n - 1):
        mu.append(F[i] @ mu[-1] + c[i])
        cov[(i + 1, i + 1)] = F[i] @ cov[(i, i)] @ F[i].T + Q[i]
    for j in range(1, n):
        for i in range(j):
            cov[(j, i)] = F[j - 1] @ cov[(j - 1, i)]  # Cov(z_j, z_i) = F Cov(z_{j-1}, z_i)
    big = torch.zeros(n * D, n * D, dtype=y.dtype)
    for i in range(n):
        for j in range(n):
            Cij = cov[(i, j)] if i >= j else cov[(j, i)].T
            big[i * D : (i + 1) * D, j * D : (j + 1) * D] = H @ Cij @ H.T
        big[i * D : (i + 1) * D, i * D : (i + 1) * D] += torch.diag(R)
    mean = torch.cat([H @ m for m in mu])
    keep = mask.reshape(-1)
    return MultivariateNormal(mean[keep], big[keep][:, keep]).log_prob(y.reshape(-1)[keep])


def test_kalman_likelihood_equals_the_dense_gaussian_with_masks():
    torch.manual_seed(0)
    d, D, n = 2, 3, 5
    A = torch.tensor([[-0.3, 1.2], [-1.2, -0.3]], dtype=torch.float64)  # damped oscillator
    b = torch.tensor([0.1, -0.2], dtype=torch.float64)
    L = torch.tensor([[0.5, 0.0], [0.1, 0.4]], dtype=torch.float64)
    H = torch.randn(D, d, dtype=torch.float64)
    R = torch.tensor([0.1, 0.2, 0.05], dtype=torch.float64)
    m0, P0 = torch.zeros(d, dtype=torch.float64), torch.eye(d, dtype=torch.float64)
    t = torch.tensor([0.0, 0.3, 0.35, 1.2, 2.0], dtype=torch.float64)
    y = torch.randn(n, D, dtype=torch.float64)
    mask = torch.tensor(
        [[1, 1, 0], [0, 0, 0], [1, 0, 1], [1, 1, 1], [0, 1, 0]], dtype=torch.bool
    )  # a fully missing step included
    y = torch.where(mask, y, torch.full_like(y, float("nan")))
    ll, means, covs = kalman_log_likelihood(y[None], mask[None], t[None], A, b, L, m0, P0, H, R)
    ref = _dense(torch.nan_to_num(y), mask, t, A, b, L, m0, P0, H, R)
    torch.testing.assert_close(ll[0], ref)
    assert means.shape == (1, n, d) and covs.shape == (1, n, d, d)


def _dense_posterior(y, mask, t, A, b, L, m0, P0, H, R):
    """p(z(t_1..t_n) | observed y) by conditioning the joint Gaussian: means (n, d), the
    diagonal blocks of the covariance (n, d, d)."""
    n, d = t.shape[0], A.shape[0]
    F, c, Q = lti_transition(A, b, L, torch.diff(t))
    mu, marg = [m0], [P0]
    for i in range(n - 1):
        mu.append(F[i] @ mu[-1] + c[i])
        marg.append(F[i] @ marg[-1] @ F[i].T + Q[i])
    Z = torch.zeros(n * d, n * d, dtype=y.dtype)
    for i in range(n):
        Z[i * d : (i + 1) * d, i * d : (i + 1) * d] = marg[i]
        block = marg[i]
        for j in range(i + 1, n):  # Cov(z_j, z_i) = F_{j-1} Cov(z_{j-1}, z_i)
            block = F[j - 1] @ block
            Z[j * d : (j + 1) * d, i * d : (i + 1) * d] = block
            Z[i * d : (i + 1) * d, j * d : (j + 1) * d] = block.T
    Hbig = torch.block_diag(*[H] * n)[mask.reshape(-1)]  # observed rows of y = H z + e
    Rbig = torch.diag(R.repeat(n)[mask.reshape(-1)])
    S = Hbig @ Z @ Hbig.T + Rbig
    K = Z @ Hbig.T @ torch.linalg.inv(S)
    mean = torch.cat(mu) + K @ (y.reshape(-1)[mask.reshape(-1)] - Hbig @ torch.cat(mu))
    cov = Z - K @ Hbig @ Z
    blocks = torch.stack([cov[i * d : (i + 1) * d, i * d : (i + 1) * d] for i in range(n)])
    return mean.reshape(n, d), blocks


def test_smoother_equals_the_dense_gaussian_posterior_at_observed_and_query_rows():
    torch.manual_seed(2)
    d, D, n = 2, 3, 6
    A = torch.tensor([[-0.3, 1.2], [-1.2, -0.3]], dtype=torch.float64)
    b = torch.tensor([0.1, -0.2], dtype=torch.float64)
    L = torch.tensor([[0.5, 0.0], [0.1, 0.4]], dtype=torch.float64)
    H = torch.randn(D, d, dtype=torch.float64)
    R = torch.tensor([0.1, 0.2, 0.05], dtype=torch.float64)
    m0, P0 = torch.zeros(d, dtype=torch.float64), torch.eye(d, dtype=torch.float64)
    t = torch.tensor([0.0, 0.3, 0.35, 1.2, 2.0, 3.1], dtype=torch.float64)
    y = torch.randn(n, D, dtype=torch.float64)
    # row 1 is a query between observations, row 5 a forecast after the last one
    mask = torch.tensor(
        [[1, 1, 0], [0, 0, 0], [1, 0, 1], [1, 1, 1], [0, 1, 0], [0, 0, 0]], dtype=torch.bool
    )
    y = torch.where(mask, y, torch.full_like(y, float("nan")))
    out = kalman_smoother(y[None], mask[None], t[None], A, b, L, m0, P0, H, R)
    mean, cov = _dense_posterior(torch.nan_to_num(y), mask, t, A, b, L, m0, P0, H, R)
    torch.testing.assert_close(out["means"][0], mean)
    torch.testing.assert_close(out["covs"][0], cov)
    torch.testing.assert_close(out["y_mean"][0], mean @ H.T)
    y_var = torch.stack([torch.diag(H @ c @ H.T) for c in cov]) + R
    torch.testing.assert_close(out["y_var"][0], y_var)
    # padding after an episode's end changes none of its rows
    pad = lambda v, fill: torch.cat([v, torch.full_like(v[:1], fill)])[None]  # noqa: E731
    padded = kalman_smoother(
        pad(y, float("nan")), pad(mask, False), pad(t, 3.1), A, b, L, m0, P0, H, R,
        valid=torch.tensor([[True] * n + [False]]),
    )  # fmt: skip
    torch.testing.assert_close(padded["means"][0, :n], out["means"][0])
    torch.testing.assert_close(padded["covs"][0, :n], out["covs"][0])


def test_padded_rows_do_not_change_the_likelihood():
    torch.manual_seed(1)
    A, b, L = -torch.eye(1, dtype=torch.float64), torch.zeros(1), torch.eye(1) * 0.5
    H, R = torch.eye(1, dtype=torch.float64), torch.tensor([0.1], dtype=torch.float64)
    m0, P0 = torch.zeros(1, dtype=torch.float64), torch.eye(1, dtype=torch.float64)
    y = torch.randn(2, 4, 1, dtype=torch.float64)
    t = torch.tensor([[0.0, 0.5, 1.0, 1.5], [0.0, 0.5, 1.0, 1.0]], dtype=torch.float64)
    mask = torch.ones(2, 4, 1, dtype=torch.bool)
    valid = torch.tensor([[True] * 4, [True, True, True, False]])
    ll, _, _ = kalman_log_likelihood(y, mask, t, A, b, L, m0, P0, H, R, valid=valid)
    short, _, _ = kalman_log_likelihood(y[1:, :3], mask[1:, :3], t[1:, :3], A, b, L, m0, P0, H, R)
    torch.testing.assert_close(ll[1], short[0])


def test_bad_input_is_refused():
    A, b, L = -torch.eye(1, dtype=torch.float64), torch.zeros(1), torch.eye(1)
    H, R = torch.eye(1, dtype=torch.float64), torch.tensor([0.1], dtype=torch.float64)
    m0, P0 = torch.zeros(1, dtype=torch.float64), torch.eye(1, dtype=torch.float64)
    y = torch.zeros(1, 3, 1, dtype=torch.float64)
    mask = torch.ones(1, 3, 1, dtype=torch.bool)
    t = torch.tensor([[0.0, 1.0, 0.5]], dtype=torch.float64)
    with pytest.raises(ValueError, match="must not decrease"):
        kalman_log_likelihood(y, mask, t, A, b, L, m0, P0, H, R)
    with pytest.raises(ValueError, match="shape of y"):
        kalman_log_likelihood(y, mask[..., :0], t.sort().values, A, b, L, m0, P0, H, R)
    with pytest.raises(ValueError, match="R must be > 0"):
        kalman_log_likelihood(y, mask, t.sort().values, A, b, L, m0, P0, H, -R)


# the default run: test_sdevi_linear_sde.py::test_elbo_reaches_the_exact_evidence_of_a_
# generated_linear_sde_file (the same bound and gap on a generated file, by L-BFGS)
@pytest.mark.slow
def test_elbo_is_a_lower_bound_that_becomes_tight_at_the_optimum():
    """Free per-interval posterior parameters, fitted by Adam: the ELBO never exceeds the
    Kalman log evidence and closes the gap (the exact smoother is a Gauss-Markov chain)."""
    from simsci.models.sdevi import linear_gaussian_elbo

    torch.manual_seed(0)
    d, D, n = 2, 2, 6
    prior = {
        "A": torch.tensor([[-0.5, 1.0], [-1.0, -0.5]], dtype=torch.float64),
        "b": torch.zeros(d, dtype=torch.float64),
        "L": 0.6 * torch.eye(d, dtype=torch.float64),
        "m0": torch.zeros(d, dtype=torch.float64),
        "P0": torch.eye(d, dtype=torch.float64),
    }
    H = torch.tensor([[1.0, 0.0], [0.5, 1.0]], dtype=torch.float64)
    R = torch.tensor([0.05, 0.1], dtype=torch.float64)
    t = torch.tensor([[0.0, 0.2, 0.7, 0.8, 1.5, 2.0]], dtype=torch.float64)
    y = torch.randn(1, n, D, dtype=torch.float64)
    mask = torch.rand(1, n, D) > 0.3
    logp, _, _ = kalman_log_likelihood(y, mask, t, *[prior[k] for k in "A b L".split()],
                                       prior["m0"], prior["P0"], H, R)  # fmt: skip
    eye = torch.eye(d, dtype=torch.float64)
    params = {
        "m1": torch.zeros(1, d, dtype=torch.float64, requires_grad=True),
        "l1": torch.zeros(1, d, d, dtype=torch.float64, requires_grad=True),
        "A": prior["A"].expand(1, n - 1, d, d).clone().requires_grad_(),
        "b": torch.zeros(1, n - 1, d, dtype=torch.float64, requires_grad=True),
        "L": (0.6 * eye).expand(1, n - 1, d, d).clone().requires_grad_(),
    }
    opt = torch.optim.Adam(params.values(), lr=0.03)

    def elbo():
        l1 = torch.tril(params["l1"], -1) + torch.diag_embed(
            params["l1"].diagonal(dim1=-2, dim2=-1).exp()
        )
        post = {"m1": params["m1"], "P1": l1 @ l1.transpose(-1, -2), "A": params["A"],
                "b": params["b"], "L": params["L"]}  # fmt: skip
        return linear_gaussian_elbo(y, mask, t, post, prior, H, R)[0]

    for _ in range(1500):
        opt.zero_grad()
        value = elbo()
        assert value.item() <= logp.item() + 1e-9  # a lower bound, always
        (-value).sum().backward()
        opt.step()
    gap = (logp - elbo()).item()
    assert 0 <= gap < 0.02 * abs(logp.item()) + 0.05, (gap, logp.item())


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("noise", [1e-2, 1e-4])
def test_float32_filter_keeps_covariances_positive_with_fast_and_slow_modes(seed, noise):
    """A near-constant level (decay 0.01, prior variance 1e4) beside modes decaying 1000x
    faster, dense observations, float32: the plain update P - KHP lost definiteness here
    (the smoother raised, or a smoothed eigenvalue of -0.3), the Joseph form still gave
    -6e-4 at noise 1e-4; the square-root information update keeps every smoothed
    covariance positive definite."""
    torch.manual_seed(seed)
    B, n, D, d = 32, 64, 5, 8
    decay = torch.tensor([0.01, 0.01, 10.8, 10.8, 37.0, 37.0, 127.0, 127.0])
    A = -torch.diag(decay) + 0.1 * torch.randn(d, d)
    for k, w in enumerate([6.3, 21.6, 74.0, 254.0]):
        A[2 * k, 2 * k + 1] += w
        A[2 * k + 1, 2 * k] -= w
    L = torch.diag(torch.sqrt(2 * decay))
    t = torch.cumsum(torch.rand(B, n) * 0.03 + 1e-3, 1)
    H = torch.randn(D, d) / d**0.5
    y, mask = torch.randn(B, n, D), torch.rand(B, n, D) < 0.7
    zeros = torch.zeros(d)
    out = kalman_smoother(
        y, mask, t, A, zeros, L, zeros, 1e4 * torch.eye(d), H, torch.full((D,), noise)
    )
    assert torch.linalg.eigvalsh(out["covs"]).min() > 0
