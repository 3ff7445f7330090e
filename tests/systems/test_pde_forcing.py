"""PDESystem.simulate(..., forcing=f): exact solutions, orders, conservation, bad input."""

import math

import numpy as np
import pytest
import torch

import simsci.systems as systems
from simsci.systems._pde import fd_weights

NU, N, T = 0.1, 32, 0.5
F_MEAN, F_AMP, F_MODE = 0.3, 0.8, 3


def _order(dts, errors) -> float:
    return float(np.polyfit(np.log(dts), np.log(errors), 1)[0])


def _heat_problem(device):
    """Heat equation, u0 = cos(2 pi x) + sin(4 pi x)/2, f = 0.3 + 0.8 sin(6 pi x)."""
    heat = systems.get("heat", resolution=N, nu=NU)
    x = torch.as_tensor(heat.coords()["x"], device=device)
    u0 = torch.cos(2 * math.pi * x) + 0.5 * torch.sin(4 * math.pi * x)
    f = F_MEAN + F_AMP * torch.sin(2 * math.pi * F_MODE * x)
    return heat, x, u0[None, :, None], f[None, :, None]


def _heat_exact(x, lam):
    """u_k(T) = e^{lam_k T} u_k(0) + (e^{lam_k T} - 1)/lam_k f_k; the mean grows as f_0 T.

    ``lam(m)``: the eigenvalue of the (continuous or discrete) operator on mode m.
    """
    u = math.exp(lam(1) * T) * torch.cos(2 * math.pi * x)
    u = u + 0.5 * math.exp(lam(2) * T) * torch.sin(4 * math.pi * x)
    growth = math.expm1(lam(F_MODE) * T) / lam(F_MODE)
    return u + F_AMP * growth * torch.sin(2 * math.pi * F_MODE * x) + F_MEAN * T


def _lam_exact(m):
    return -NU * (2 * math.pi * m) ** 2


def _lam_fd(m):
    """Eigenvalue of nu times the fourth-order centred stencil of d^2/dx^2 on mode m."""
    dx, k = 1.0 / N, 2 * math.pi * m
    return NU * sum(w * math.cos(k * o * dx) for o, w in fd_weights(2)) / dx**2


def test_etdrk4_is_exact_for_heat_with_forcing(device):
    """ETDRK4 integrates a linear PDE with a constant source exactly, at any step."""
    heat, x, u0, f = _heat_problem(device)
    exact = _heat_exact(x, _lam_exact)
    for dt in (T, 0.05):
        u = heat.simulate(u0, [0.0, T], method="etdrk4", dt=dt, forcing=f)[0, -1, :, 0]
        assert (u - exact).abs().max() < 1e-13


def test_imex_reaches_second_order_with_forcing(device):
    heat, x, u0, f = _heat_problem(device)
    exact = _heat_exact(x, _lam_exact)
    dts = [0.02, 0.01, 0.005, 0.0025]
    errors = [
        float(
            (heat.simulate(u0, [0.0, T], method="imex", dt=dt, forcing=f)[0, -1, :, 0] - exact)
            .abs()
            .max()
        )  # fmt: skip
        for dt in dts
    ]
    assert 1.9 < _order(dts, errors) < 2.1


def test_rk4_reaches_fourth_order_with_forcing(device):
    """Against the exact solution of the finite-difference semi-discretisation (time error
    only), and against the PDE's within the O(dx^4) spatial error."""
    heat, x, u0, f = _heat_problem(device)
    semi = _heat_exact(x, _lam_fd)
    dts = [0.005, 0.0025, 0.00125, 0.000625]
    runs = [heat.simulate(u0, [0.0, T], method="rk4", dt=dt, forcing=f)[0, -1, :, 0] for dt in dts]
    errors = [float((u - semi).abs().max()) for u in runs]
    assert 3.8 < _order(dts, errors) < 4.2
    spatial = float((runs[-1] - _heat_exact(x, _lam_exact)).abs().max())
    assert 1e-6 < spatial < 1e-4  # the fourth-order stencil's error at N = 32


@pytest.mark.parametrize("method", ["etdrk4", "imex", "rk4"])
def test_mean_grows_at_the_mean_of_the_forcing_for_burgers(device, method):
    """Burgers' flux-form nonlinearity conserves the mean, so d/dt mean(u) = mean(f)
    exactly (to rounding) whatever the solver does to the rest of the field."""
    burgers = systems.get("burgers", resolution=64, nu=0.05)
    gen = torch.Generator().manual_seed(1)
    u0 = burgers.sample_initial(3, generator=gen, device=device)
    x = torch.as_tensor(burgers.coords()["x"], device=device)
    bump = torch.exp(-0.5 * ((x - 0.3) / 0.05) ** 2)
    f = torch.stack([a * bump for a in (1.0, -0.5, 2.0)])[..., None]
    t = [0.0, 0.1, 0.2]
    u = burgers.simulate(u0, t, method=method, dt=2e-3, forcing=f)
    mean = u.mean(dim=(2, 3))  # (B, T)
    expected = (
        u0.mean(dim=(1, 2))[:, None]
        + torch.tensor(t, device=device, dtype=torch.float64) * f.mean(dim=(1, 2))[:, None]
    )
    torch.testing.assert_close(mean, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["etdrk4", "imex", "rk4"])
def test_zero_forcing_is_bit_for_bit_the_unforced_solve(device, method):
    burgers = systems.get("burgers", resolution=64, nu=0.05)
    u0 = burgers.sample_initial(2, generator=torch.Generator().manual_seed(0), device=device)
    t = [0.0, 0.05, 0.1]
    plain = burgers.simulate(u0, t, method=method, dt=2e-3)
    assert torch.equal(plain, burgers.simulate(u0, t, method=method, dt=2e-3, forcing=None))
    zero = torch.zeros(1, 64, 1, device=device)
    assert torch.equal(plain, burgers.simulate(u0, t, method=method, dt=2e-3, forcing=zero))


def test_per_sample_forcing_equals_separate_solves_and_shared_broadcasts(device):
    ks = systems.get("kuramoto_sivashinsky", resolution=64, domain=22.0)
    u0 = ks.sample_initial(3, generator=torch.Generator().manual_seed(2), device=device)
    x = torch.as_tensor(ks.coords()["x"], device=device)
    f = torch.stack([torch.sin(2 * math.pi * k * x / 22.0) for k in (1, 2, 3)])[..., None]
    batch = ks.simulate(u0, [0.0, 1.0], dt=0.05, forcing=f)
    for i in range(3):
        alone = ks.simulate(u0[i : i + 1], [0.0, 1.0], dt=0.05, forcing=f[i : i + 1])
        torch.testing.assert_close(batch[i], alone[0], rtol=1e-12, atol=1e-12)
    shared = ks.simulate(u0, [0.0, 1.0], dt=0.05, forcing=f[:1])
    expanded = ks.simulate(u0, [0.0, 1.0], dt=0.05, forcing=f[:1].expand(3, -1, -1))
    torch.testing.assert_close(shared, expanded, rtol=0, atol=0)
    assert not torch.allclose(batch[1], shared[1])


@pytest.mark.parametrize("method", ["etdrk4", "imex", "rk4"])
def test_gradient_of_the_mean_with_respect_to_the_forcing(method):
    """mean(u(T)) = mean(u0) + T mean(f), so d mean(u(T)) / d f_j = T / N exactly."""
    heat, _, u0, f = _heat_problem(torch.device("cpu"))
    f = f.clone().requires_grad_(True)
    u = heat.simulate(u0, [0.0, T], method=method, dt=0.005, forcing=f)
    u[:, -1].mean().backward()
    torch.testing.assert_close(f.grad, torch.full_like(f, T / N), rtol=1e-12, atol=1e-15)


def test_forcing_in_2d_navier_stokes_and_unsupported_method():
    ns = systems.get("navier_stokes_2d", resolution=16)
    w0 = ns.sample_initial(2, generator=torch.Generator().manual_seed(0))
    f = torch.full((1, 16, 16, 1), 0.25, dtype=torch.float64)
    w = ns.simulate(w0, [0.0, 0.2], method="etdrk4", dt=0.05, forcing=f)
    # the built-in forcing has zero mean: the mean vorticity grows at mean(f) only
    torch.testing.assert_close(
        w[:, -1].mean(dim=(1, 2, 3)), w0.mean(dim=(1, 2, 3)) + 0.2 * 0.25, rtol=0, atol=1e-12
    )
    with pytest.raises(ValueError, match=r"forcing= is supported by the methods .*'cn'"):
        ns.simulate(w0, [0.0, 0.2], method="cn", forcing=f)


def test_float32_forcing_with_float64_state_is_cast():
    heat, _, u0, f = _heat_problem(torch.device("cpu"))
    a = heat.simulate(u0, [0.0, T], forcing=f.float())
    b = heat.simulate(u0, [0.0, T], forcing=f.float().double())
    assert a.dtype == torch.float64 and torch.equal(a, b)
    c = heat.simulate(u0, [0.0, T], forcing=f.numpy())  # numpy arrays are accepted too
    assert torch.equal(c, heat.simulate(u0, [0.0, T], forcing=f))


@pytest.mark.parametrize(
    ("forcing", "error", "match"),
    [
        (torch.zeros(N, 1), ValueError, r"shape \(2, 32, 1\) .* or \(1, 32, 1\)"),
        (torch.zeros(3, N, 1), ValueError, r"got \(3, 32, 1\)"),
        (torch.zeros(2, N), ValueError, r"shape \(2, 32, 1\)"),
        (torch.zeros(2, N, 1, dtype=torch.complex128), TypeError, "real"),
        (torch.zeros(2, N, 1, dtype=torch.bool), TypeError, "real"),
        (np.array([["a"] * N]), TypeError, "real numbers"),
        (torch.zeros(2, N, 1, device="meta"), ValueError, "forcing is on meta"),
    ],
)
def test_bad_forcing_is_rejected_before_running(forcing, error, match):
    heat = systems.get("heat", resolution=N)
    u0 = torch.zeros(2, N, 1, dtype=torch.float64)
    with pytest.raises(error, match=match):
        heat.simulate(u0, [0.0, 0.1], forcing=forcing)


def test_non_finite_forcing_names_the_sample():
    heat = systems.get("heat", resolution=N)
    u0 = torch.zeros(3, N, 1, dtype=torch.float64)
    f = torch.zeros(3, N, 1, dtype=torch.float64)
    f[2, 5, 0] = math.nan
    f[1, 0, 0] = math.inf
    with pytest.raises(ValueError, match=r"forcing of sample 1 \(and 1 more\) contains NaN"):
        heat.simulate(u0, [0.0, 0.1], forcing=f)
