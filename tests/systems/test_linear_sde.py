"""``linear_sde``: exact Gaussian transitions (statistics against the closed form and a
fine Euler-Maruyama solve), its linear form, and the exact Kalman evidence of a file."""

import math

import numpy as np
import pytest
import torch

import simsci.data
import simsci.systems as systems
from simsci.errors import UnknownNameError
from simsci.models.sdevi import kalman_log_likelihood

F64 = torch.float64


def _closed_form(system, dt: float):
    """F = e^{A dt} and Q = int_0^dt e^{As} L L^T e^{A^T s} ds by Simpson's rule on
    torch.linalg.matrix_exp: independent of the Van Loan exponential the sampler uses."""
    A, _, L, _, _ = system.linear_form()
    s = torch.linspace(0.0, dt, 2001, dtype=F64)
    E = torch.linalg.matrix_exp(A * s[:, None, None])
    integrand = E @ (L @ L.T) @ E.transpose(-1, -2)
    w = torch.ones(2001, dtype=F64)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    Q = (w[:, None, None] * integrand).sum(0) * (dt / 2000) / 3.0
    return torch.linalg.matrix_exp(A * dt), Q


def _moment_errors(z: torch.Tensor, mean: torch.Tensor, cov: torch.Tensor):
    """|empirical - true| / standard error for the mean and each covariance entry."""
    n = z.shape[0]
    se_mean = torch.sqrt(cov.diagonal() / n)
    got_cov = torch.cov(z.T)
    var = cov.diagonal()
    # Var of a sample covariance entry of a Gaussian: (S_ii S_jj + S_ij^2) / n
    se_cov = torch.sqrt((var[:, None] * var[None, :] + cov**2) / n)
    return ((z.mean(0) - mean).abs() / se_mean), ((got_cov - cov).abs() / se_cov)


def test_linear_sde_declares_its_exact_method():
    sys = systems.get("linear_sde")
    assert sys.default_method == "exact" and sys.own_methods == ("exact",)
    assert sys.noise_type == "additive" and sys.state_names == ("x", "v")
    assert sys.params["omega"] == pytest.approx(2 * math.pi / 2.5)
    A, b, L, m0, P0 = sys.linear_form()
    assert A.shape == (2, 2) and b.shape == (2,) and L.shape == (2, 2)
    assert torch.equal(P0, torch.eye(2, dtype=F64)) and not m0.any() and not b.any()
    # the drift is A z and the diffusion L, row by row
    z = sys.sample_initial(4, generator=torch.Generator().manual_seed(0))
    p = sys.params_tensor(4)
    torch.testing.assert_close(sys.drift(0.0, z, p), z @ A.T)
    torch.testing.assert_close(sys.diffusion(0.0, z, p), L.expand(4, 2, 2))
    rows = sys.sample_params(3, generator=torch.Generator().manual_seed(1))
    form = sys.linear_form(rows)
    assert form.A.shape == (3, 2, 2) and form.P0.shape == (3, 2, 2) and form.m0.shape == (3, 2)
    torch.testing.assert_close(form.A[1], sys.linear_form(rows[1]).A)
    assert sys.linear_form({"omega": [1.0, 2.0]}).A.shape == (2, 2, 2)
    assert sys.linear_form({"omega": 3.0}).A[1, 0] == -9.0


def test_exact_step_matches_the_closed_form_statistically():
    sys = systems.get("linear_sde")
    n, dt = 20000, 0.7
    z0 = torch.tensor([1.0, -0.5], dtype=F64)
    z = sys.simulate(z0.expand(n, 2), torch.tensor([0.0, dt]), seed=3)
    assert z.shape == (n, 2, 2) and torch.equal(z[:, 0], z0.expand(n, 2))
    F, Q = _closed_form(sys, dt)
    mean_err, cov_err = _moment_errors(z[:, 1], F @ z0, Q)
    # seeded, so deterministic; 4.5 standard errors would fail a correct sampler rarely
    assert mean_err.max() < 4.5 and cov_err.max() < 4.5, (mean_err, cov_err)
    # the same law from the stationary-looking start z0 = 0: mean 0
    z = sys.simulate(torch.zeros(n, 2, dtype=F64), torch.tensor([0.0, dt]), seed=4)
    mean_err, cov_err = _moment_errors(z[:, 1], torch.zeros(2, dtype=F64), Q)
    assert mean_err.max() < 4.5 and cov_err.max() < 4.5


def test_exact_transition_matches_a_fine_euler_maruyama_solve():
    sys = systems.get("linear_sde", zeta=0.3, sigma_pos=0.2)
    n = 4000
    z0 = torch.tensor([0.5, 1.0], dtype=F64).expand(n, 2)
    t = torch.tensor([0.0, 0.4, 1.0], dtype=F64)
    exact = sys.simulate(z0, t, seed=5)
    em = sys.simulate(z0, t, method="euler", dt=1e-3, seed=6)
    assert em.shape == exact.shape == (n, 3, 2)
    for k in (1, 2):
        F, Q = _closed_form(sys, float(t[k]))
        mean = F @ z0[0]
        for z in (exact[:, k], em[:, k]):
            mean_err, cov_err = _moment_errors(z, mean, Q)
            # Euler-Maruyama's weak bias at dt = 1e-3 is far below one standard error
            assert mean_err.max() < 4.5 and cov_err.max() < 4.5, (k, mean_err, cov_err)


def test_exact_method_on_irregular_and_ragged_grids_without_noise_is_the_flow(device):
    sys = systems.get("linear_sde", sigma_pos=0.0, sigma_vel=0.0)
    z0 = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=F64)
    A = sys.linear_form().A
    t = torch.tensor([[0.0, 0.13, 0.5, 2.2], [0.3, 0.4, 1.9, 5.0]], dtype=F64)
    z = sys.simulate(z0.to(device), t.to(device))  # noise-free: z(t) = e^{A (t - t0)} z0
    assert z.device.type == device.type
    z = z.cpu()
    for b in range(2):
        want = torch.linalg.matrix_exp(A * (t[b] - t[b, 0])[:, None, None]) @ z0[b]
        torch.testing.assert_close(z[b], want, rtol=1e-10, atol=1e-12)
    ragged = sys.simulate(z0, [t[0, :2], t[1]])
    assert [r.shape for r in ragged] == [(2, 2), (4, 2)]
    torch.testing.assert_close(ragged[1], z[1])
    single = sys.simulate(z0, torch.tensor([0.5]))  # one time: the initial states
    assert torch.equal(single[:, 0], z0)
    z32 = sys.simulate(z0.float(), t.float())
    assert z32.dtype == torch.float32
    torch.testing.assert_close(z32, z.float(), rtol=1e-5, atol=1e-5)


def test_exact_paths_are_seeded_and_options_are_checked(tmp_path, device):
    sys = systems.get("linear_sde")
    z0 = sys.sample_initial(5, generator=torch.Generator().manual_seed(0))
    t = torch.linspace(0, 2, 11)
    a, b = sys.simulate(z0, t, seed=1), sys.simulate(z0, t, seed=1)
    assert torch.equal(a, b) and not torch.equal(a, sys.simulate(z0, t, seed=2))
    # the noise is drawn on the CPU: a seed gives the same path on every device
    on_device = sys.simulate(z0.to(device), t.to(device), seed=1)
    torch.testing.assert_close(on_device.cpu(), a, rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="takes no solver options.*'dt'"):
        sys.simulate(z0, t, dt=0.01)
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        sys.simulate(z0, t, seed=-1)
    with pytest.raises(ValueError, match="strictly increasing"):
        sys.simulate(z0, torch.tensor([0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="step_size applies to the integrators"):
        systems.generate("linear_sde", 2, out=tmp_path / "a.h5", step_size=0.01, progress=False)
    with pytest.raises(UnknownNameError, match="did you mean 'exact'"):
        systems.generate("linear_sde", 2, out=tmp_path / "a.h5", method="exakt", progress=False)
    assert not (tmp_path / "a.h5").exists()


@pytest.mark.parametrize("method", ["exact", "euler", "srk"])
def test_generate_with_the_exact_and_the_integrator_methods(method, tmp_path):
    path = systems.generate(
        "linear_sde",
        6,
        t_end=1.0,
        dt=0.1,
        method=method,
        out=tmp_path / "l.h5",
        params="sample",
        progress=False,
    )
    assert simsci.data.check_file(path) == []
    ds = simsci.data.open(path)
    assert ds.meta["method"] == method and len(ds) == 6 and ds[0]["x"].shape == (11, 2)
    assert ds.meta["solver_options"] == ({} if method == "exact" else {"dt": 0.1})
    same = systems.generate(
        "linear_sde",
        6,
        t_end=1.0,
        dt=0.1,
        method=method,
        out=tmp_path / "m.h5",
        params="sample",
        progress=False,
    )
    np.testing.assert_array_equal(simsci.data.open(same)[5]["x"], ds[5]["x"])


def _padded(ds):
    """(y, mask, t, valid) of every episode, each with a leading all-missing row at t = 0
    (the prior (m0, P0) is the state's law at t = 0, before any subsampling)."""
    eps = [ds[i] for i in range(len(ds))]
    n = 1 + max(len(e["t"]) for e in eps)
    B = len(eps)
    y = torch.zeros(B, n, 2, dtype=F64)
    mask = torch.zeros(B, n, 2, dtype=torch.bool)
    t = torch.zeros(B, n, dtype=F64)
    valid = torch.zeros(B, n, dtype=torch.bool)
    for b, e in enumerate(eps):
        k = len(e["t"])
        y[b, 1 : k + 1] = torch.as_tensor(np.nan_to_num(e["x"]))
        mask[b, 1 : k + 1] = torch.as_tensor(e["mask"])
        t[b, 1 : k + 1] = torch.as_tensor(e["t"])
        t[b, k + 1 :] = float(e["t"][-1])
        valid[b, : k + 1] = True
    return y, mask, t, valid


def test_kalman_evidence_of_a_generated_file_peaks_at_the_true_parameters(tmp_path):
    path = systems.generate(
        "linear_sde",
        40,
        t_end=5.0,
        dt=0.1,
        keep=0.5,
        per_channel=True,
        obs_noise=0.2,
        seed=7,
        out=tmp_path / "k.h5",
        progress=False,
    )
    ds = simsci.data.open(path)
    sys = systems.get("linear_sde")
    H, R = sys.observation_model(ds.meta)
    np.testing.assert_allclose(R.numpy(), (0.2 * np.asarray(ds.meta["obs_noise_std"])) ** 2)
    y, mask, t, valid = _padded(ds)

    def evidence(**params):
        A, b, L, m0, P0 = sys.linear_form(params or None)
        return kalman_log_likelihood(y, mask, t, A, b, L, m0, P0, H, R, valid=valid)[0].sum()

    true = evidence()
    assert torch.isfinite(true)
    p = sys.params
    for wrong in (
        {"omega": 1.5 * p["omega"]},
        {"omega": 0.7 * p["omega"]},
        {"zeta": 3.0 * p["zeta"]},
        {"sigma_vel": 2.0 * p["sigma_vel"]},
        {"sigma_vel": 0.5 * p["sigma_vel"]},
    ):
        assert evidence(**wrong) < true - 5.0, wrong
    noiseless = systems.generate("linear_sde", 2, t_end=1.0, out=tmp_path / "c.h5", progress=False)
    with pytest.raises(ValueError, match="no observation noise.*obs_noise > 0"):
        sys.observation_model(simsci.data.open(noiseless).meta)
