"""The PDESystem base: interface, bad input, blow-ups, stencils, random initial fields."""

import math

import numpy as np
import pytest
import torch

import simsci.systems as systems
from simsci.errors import SolverError, UnknownNameError
from simsci.systems._pde import (
    PDESystem,
    etdrk4_coefficients,
    fd_weights,
    rk4_stable_radius,
)

ONE_D = ["advection", "heat", "burgers", "kdv", "kuramoto_sivashinsky", "allen_cahn"]


# ------------------------------------------------------------------ interface
@pytest.mark.parametrize("name", ONE_D)
def test_registered_with_the_field_interface(name, device):
    system = systems.get(name, resolution=32)
    assert isinstance(system, PDESystem) and system.kind == "field"
    assert system.spatial_dims == 1 and system.periodic
    assert system.state_names == system.channel_names == ("u",)
    assert system.state_shape == (32, 1)
    assert set(system.methods) >= {"etdrk4", "imex", "rk4"}
    assert system.default_method in system.methods
    assert system.pde_order == {"advection": 1, "kdv": 3, "kuramoto_sivashinsky": 4}.get(name, 2)
    x = system.coords()["x"]
    np.testing.assert_allclose(x, np.arange(32) * system.domain[0] / 32)
    assert set(system.static()) == {"x"}
    u0 = system.sample_initial(3, generator=torch.Generator().manual_seed(0), device=device)
    assert u0.shape == (3, 32, 1) and u0.device.type == device.type
    u = system.simulate(u0, [0.0, system.default_save_dt])
    assert u.shape == (3, 2, 32, 1)
    torch.testing.assert_close(u[:, 0], u0, atol=0, rtol=0)
    cfg = system.config()
    again = systems.get(cfg["name"], **cfg["params"], **cfg["options"])
    assert again.resolution == system.resolution and again.domain == system.domain


def test_resolution_domain_and_ic_options():
    ks = systems.get("kuramoto_sivashinsky", resolution=(64,), domain=22.0, nu=1.0)
    assert ks.resolution == (64,) and ks.domain == (22.0,)
    sines = systems.get("burgers", resolution=64, ic="sines")
    u = sines.sample_initial(2, generator=torch.Generator().manual_seed(0))
    assert u.abs().max() <= 2.0  # two waves of amplitude <= 1
    with pytest.raises(ValueError, match="resolution of 'burgers' must be an integer >= 8"):
        systems.get("burgers", resolution=0)
    with pytest.raises(ValueError, match="domain of 'burgers' must be a positive length"):
        systems.get("burgers", domain=-1.0)
    with pytest.raises(UnknownNameError, match="did you mean 'grf'"):
        systems.get("burgers", ic="gfr")


def test_sampling_is_seeded_and_device_independent(device):
    burgers = systems.get("burgers", resolution=64)
    a = burgers.sample_initial(4, generator=torch.Generator().manual_seed(7))
    b = burgers.sample_initial(4, generator=torch.Generator().manual_seed(7), device=device)
    c = burgers.sample_initial(4, generator=torch.Generator().manual_seed(8))
    torch.testing.assert_close(a, b.cpu(), atol=0, rtol=0)
    assert not torch.allclose(a, c)


# ------------------------------------------------------------------ bad input
def test_nan_in_the_initial_condition_names_the_sample(device):
    heat = systems.get("heat", resolution=32)
    u0 = torch.zeros(4, 32, 1, dtype=torch.float64, device=device)
    u0[2, 5, 0] = float("nan")
    with pytest.raises(ValueError, match="initial condition u0 of sample 2 contains NaN"):
        heat.simulate(u0, [0.0, 0.1])


def test_wrong_state_shape():
    heat = systems.get("heat", resolution=32)
    with pytest.raises(ValueError, match=r"state shape \(32, 1\)"):
        heat.simulate(torch.zeros(2, 64, 1), [0.0, 0.1])
    with pytest.raises(ValueError, match="state shape"):
        heat.simulate(torch.zeros(32, 1), [0.0, 0.1])


def test_non_uniform_grid_given_to_a_spectral_solver(device):
    heat = systems.get("heat", resolution=32)
    u0 = torch.zeros(1, 32, 1, dtype=torch.float64, device=device)
    x = np.sort(np.random.default_rng(0).uniform(0, 1, 32))
    for method in ("etdrk4", "imex"):
        with pytest.raises(ValueError, match="a non-uniform grid given to a spectral solver"):
            heat.simulate(u0, [0.0, 0.1], method=method, grid=x)
    with pytest.raises(ValueError, match="uniform finite-difference stencils"):
        heat.simulate(u0, [0.0, 0.1], method="rk4", grid=x)
    with pytest.raises(ValueError, match="includes both end points"):
        heat.simulate(u0, [0.0, 0.1], grid=np.linspace(0, 1, 32))
    with pytest.raises(ValueError, match=r"domain=2"):
        heat.simulate(u0, [0.0, 0.1], grid=np.arange(32) * 2 / 32)
    # the system's own grid (array, tensor or dict) is accepted
    x = heat.coords()["x"]
    for grid in (x, torch.as_tensor(x), {"x": x}):
        heat.simulate(u0, [0.0, 0.1], grid=grid)


def test_rk4_step_beyond_the_stability_limit_fails_before_running(device, monkeypatch):
    heat = systems.get("heat", resolution=64, nu=0.01)
    u0 = heat.sample_initial(2, device=device)
    limit = heat.stable_dt(None, "rk4")

    def never(*args, **kwargs):
        raise AssertionError("the solver ran")

    monkeypatch.setattr(PDESystem, "_run", never)
    with pytest.raises(ValueError, match=r"beyond the stability limit .* Use dt <= ") as info:
        heat.simulate(u0, [0.0, 1.0], method="rk4", dt=2 * limit)
    assert f"{limit:.4g}" in str(info.value)
    # the advective CFL from u0 enters the limit of Burgers
    burgers = systems.get("burgers", resolution=64, nu=1e-3)
    slow = burgers.stable_dt(None, "rk4")
    fast = burgers.stable_dt(None, "rk4", u0=10 * torch.ones(1, 64, 1))
    assert fast < slow
    assert math.isinf(burgers.stable_dt(None, "etdrk4"))


def test_blow_up_names_trajectory_and_time(device):
    """Allen-Cahn's explicit cubic with a huge step diverges for a large initial value
    (the exact solution decays to 1); the error names that trajectory and the time."""
    ac = systems.get("allen_cahn", resolution=16)
    u0 = torch.full((3, 16, 1), 0.5, dtype=torch.float64, device=device)
    u0[1] = 5.0
    with pytest.raises(SolverError, match=r"trajectory 1 blew up .* at t=") as info:
        ac.simulate(u0, [0.0, 5.0, 10.0], method="etdrk4", dt=1.0)
    assert info.value.samples == [1]
    assert 0.0 < info.value.time <= 10.0
    # rk4 run past its limit on purpose: caught as well
    heat = systems.get("heat", resolution=32, nu=0.01)
    limit = heat.stable_dt(None, "rk4")
    noisy = torch.randn(2, 32, 1, dtype=torch.float64, device=device)
    with pytest.raises(SolverError, match="trajectory 0 and 1 more"):
        heat.simulate(
            noisy, [0.0, 4000 * limit], method="rk4", dt=1.5 * limit, check_stability=False
        )


def test_parameters_out_of_range():
    with pytest.raises(ValueError, match=r"parameter 'nu' of system 'burgers' .* \(0, inf\)"):
        systems.get("burgers", nu=0.0)
    burgers = systems.get("burgers", resolution=32)
    u0 = torch.zeros(2, 32, 1, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"parameter 'nu'.*got -0.1 \(in params, row 1"):
        burgers.simulate(u0, [0.0, 0.1], {"nu": [0.1, -0.1]})
    with pytest.raises(UnknownNameError, match="unknown parameter 'mu'"):
        burgers.simulate(u0, [0.0, 0.1], {"mu": 0.1})


def test_unknown_method_and_bad_options():
    burgers = systems.get("burgers", resolution=32)
    u0 = torch.zeros(1, 32, 1, dtype=torch.float64)
    with pytest.raises(UnknownNameError, match="did you mean 'etdrk4'"):
        burgers.simulate(u0, [0.0, 0.1], method="etdrk5")
    with pytest.raises(TypeError, match="unexpected keyword"):
        burgers.simulate(u0, [0.0, 0.1], rtol=1e-3)
    with pytest.raises(ValueError, match="strictly increasing"):
        burgers.simulate(u0, [0.0, 0.1, 0.1])
    with pytest.raises(ValueError, match="dt must be finite and > 0"):
        burgers.simulate(u0, [0.0, 0.1], dt=-1.0)
    odd = systems.get("burgers", resolution=33)
    with pytest.raises(ValueError, match="needs an even resolution"):
        odd.simulate(torch.zeros(1, 33, 1, dtype=torch.float64), [0.0, 0.1])
    # finite differences take odd grids
    odd.simulate(torch.zeros(1, 33, 1, dtype=torch.float64), [0.0, 0.01], method="rk4")


# --------------------------------------------------------------- components
@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_fd_weights_are_fourth_order(order):
    """Stencils are exact on polynomials up to degree order + 3 (fourth-order accurate)."""
    weights = dict(fd_weights(order))
    for degree in range(order + 4):
        stencil = sum(w * j**degree for j, w in weights.items())
        exact = math.factorial(order) if degree == order else 0.0
        assert stencil == pytest.approx(exact, abs=1e-10)
    # and no better: the degree order + 4 moment (the leading error term) is non-zero
    assert abs(sum(w * j ** (order + 4) for j, w in weights.items())) > 1e-3


def test_rk4_stability_radius_on_the_axes():
    assert rk4_stable_radius(np.pi) == pytest.approx(2.785293563, rel=1e-4)
    assert rk4_stable_radius(np.pi / 2) == pytest.approx(2 * math.sqrt(2), rel=1e-3)


def test_etdrk4_coefficients_match_closed_forms():
    """Away from z = 0 the contour means equal the phi-function formulas."""
    L = torch.tensor([-50.0, -3.0, -0.7, 2.0, 5j - 1.0], dtype=torch.complex128)
    h = 0.3
    E, E2, Q, f1, f2, f3 = etdrk4_coefficients(L, h)
    z = h * L
    ez = torch.exp(z)
    torch.testing.assert_close(Q, h * (torch.exp(z / 2) - 1) / z)
    torch.testing.assert_close(f1, h * (-4 - z + ez * (4 - 3 * z + z * z)) / z**3)
    torch.testing.assert_close(f2, h * (2 + z + ez * (z - 2)) / z**3)
    torch.testing.assert_close(f3, h * (-4 - 3 * z - z * z + ez * (4 - z)) / z**3)
    # and the limits at z = 0: Q = h/2, f1 = f3 = h/6, f2 = h/6
    E, E2, Q, f1, f2, f3 = etdrk4_coefficients(torch.zeros(1, dtype=torch.complex128), h)
    for value, limit in ((Q, h / 2), (f1, h / 6), (f2, h / 6), (f3, h / 6)):
        assert abs(complex(value[0]) - limit) < 1e-14


def test_coefficients_are_cached_per_step_and_parameters(device):
    burgers = systems.get("burgers", resolution=32)
    u0 = torch.zeros(2, 32, 1, dtype=torch.float64, device=device)
    burgers.simulate(u0, np.linspace(0, 0.01, 6), dt=1e-3)
    assert len([k for k in burgers._cache if k[0] == "etdrk4"]) == 1  # one h for 5 gaps
    burgers.simulate(u0, np.linspace(0, 0.01, 6), {"nu": [0.01, 0.02]}, dt=1e-3)
    # several rows: one pool for the step, holding each distinct row once
    (pool,) = burgers._pools.values()
    assert len(pool._slot) == 2
    burgers.simulate(u0, np.linspace(0, 0.01, 6), {"nu": [0.02, 0.03]}, dt=1e-3)
    assert len(burgers._pools) == 1 and len(pool._slot) == 3


def _spy_coefficients(monkeypatch, method):
    """Record how many parameter rows each coefficient build of ``method`` computes."""
    stepper = systems.get_stepper(method)
    built = []
    real = type(stepper).coefficients

    def spy(self, system, h, rows, grid):
        built.append(rows.shape[0])
        return real(self, system, h, rows, grid)

    monkeypatch.setattr(type(stepper), "coefficients", spy)
    return built


@pytest.mark.parametrize("method, dt", [("etdrk4", 1e-3), ("imex", 5e-4), ("rk4", 2e-5)])
def test_per_row_coefficients_equal_solving_each_sample_alone(method, dt, device, monkeypatch):
    """Per-sample parameter rows: coefficients are built once per distinct row (only the
    rows not seen before), and every sample's solution is bit for bit the one it gets
    solved alone."""
    burgers = systems.get("burgers", resolution=64)
    gen = torch.Generator().manual_seed(0)
    u0 = burgers.sample_initial(12, generator=gen).to(device)
    f = (0.3 * torch.randn(12, 64, 1, generator=gen, dtype=torch.float64)).to(device)
    nu = torch.empty(12, 1, dtype=torch.float64).uniform_(0.005, 0.05, generator=gen)
    nu[5] = nu[2]  # a repeated row is one row
    built = _spy_coefficients(monkeypatch, method)

    def solve(u, p, force):
        return burgers.simulate(u, [0.0, 0.004], p, method=method, dt=dt, forcing=force)

    batch = solve(u0, nu, f)
    assert built == [11]
    alone = torch.cat([solve(u0[i : i + 1], nu[i : i + 1], f[i : i + 1]) for i in range(12)])
    assert torch.equal(batch, alone)
    built.clear()
    nu[[0, 7]] = torch.tensor([[0.011], [0.012]], dtype=torch.float64)  # two episodes reset
    again = solve(u0, nu, f)
    assert built == [2]
    alone = torch.cat([solve(u0[i : i + 1], nu[i : i + 1], f[i : i + 1]) for i in range(12)])
    assert torch.equal(again, alone)


def test_row_pool_stays_bounded_and_keeps_its_rows(monkeypatch):
    """Past its byte bound a pool keeps only the rows in use (copied, not recomputed):
    the results do not change."""
    from simsci.systems import _pde

    row_bytes = 6 * 33 * 16  # six complex coefficients of 33 modes (N = 64)
    monkeypatch.setattr(_pde, "_POOL_BYTES", 20 * row_bytes)
    burgers = systems.get("burgers", resolution=64)
    gen = torch.Generator().manual_seed(1)
    u0 = burgers.sample_initial(8, generator=gen)
    built = _spy_coefficients(monkeypatch, "etdrk4")
    for k in range(6):
        nu = torch.empty(8, 1, dtype=torch.float64).uniform_(0.005, 0.05, generator=gen)
        nu[:4] = 0.01  # four samples keep their row, four draw new ones
        built.clear()
        out = burgers.simulate(u0, [0.0, 0.002], nu, dt=1e-3)
        assert built == [5 if k == 0 else 4]
        alone = torch.cat([burgers.simulate(u0[i : i + 1], [0.0, 0.002], nu[i : i + 1], dt=1e-3)
                           for i in range(8)])  # fmt: skip
        assert torch.equal(out, alone)
        (pool,) = burgers._pools.values()
        assert pool._capacity * row_bytes <= 20 * row_bytes


def test_etdrk4_without_autograd_is_the_autograd_step_bit_for_bit(device):
    """Without gradients ETDRK4 updates its temporaries in place (fewer passes over a
    large batch): the same numbers as the step autograd records, which still
    differentiates."""
    burgers = systems.get("burgers", resolution=64)
    gen = torch.Generator().manual_seed(2)
    u0 = burgers.sample_initial(4, generator=gen).to(device)
    f = (0.3 * torch.randn(4, 64, 1, generator=gen, dtype=torch.float64)).to(device)
    nu = {"nu": [0.01, 0.02, 0.03, 0.04]}
    with torch.no_grad():
        fast = burgers.simulate(u0, [0.0, 0.01, 0.02], nu, dt=1e-3, forcing=f)
    u = u0.clone().requires_grad_(True)
    taped = burgers.simulate(u, [0.0, 0.01, 0.02], nu, dt=1e-3, forcing=f)
    assert torch.equal(fast, taped.detach())
    taped[:, -1].square().sum().backward()
    assert u.grad is not None and torch.isfinite(u.grad).all() and u.grad.abs().sum() > 0


# ---------------------------------------------------------- random fields
def test_grf_is_seeded_mean_zero_with_the_requested_spectrum(device):
    n, N = 4000, 64
    gen = torch.Generator().manual_seed(0)
    u = systems.gaussian_random_field(n, N, 1.0, alpha=2.0, tau=5.0, sigma=25.0, generator=gen)
    assert u.shape == (n, N) and u.dtype == torch.float64
    torch.testing.assert_close(u.mean(dim=1), torch.zeros(n, dtype=torch.float64), atol=1e-12,
                               rtol=0)  # fmt: skip
    # E|c_k|^2 = sigma^2 ((2 pi k)^2 + tau^2)^(-alpha) for the coefficients of e^{2 pi i k x}
    c = torch.fft.rfft(u, dim=1) / N
    power = (c.abs() ** 2).mean(dim=0)
    k = torch.arange(1, 6, dtype=torch.float64)
    expected = 625.0 * ((2 * math.pi * k) ** 2 + 25.0) ** -2
    torch.testing.assert_close(power[1:6], expected, rtol=0.1, atol=0)
    again = systems.gaussian_random_field(
        3, N, alpha=2.0, tau=5.0, generator=torch.Generator().manual_seed(0), device=device
    )
    first = systems.gaussian_random_field(
        3, N, alpha=2.0, tau=5.0, generator=torch.Generator().manual_seed(0)
    )
    torch.testing.assert_close(again.cpu(), first, atol=0, rtol=0)


def test_grf_std_normalisation_and_2d():
    gen = torch.Generator().manual_seed(1)
    u = systems.gaussian_random_field(2000, (32, 16), (1.0, 2.0), alpha=2.5, tau=7.0, std=0.5,
                                      generator=gen)  # fmt: skip
    assert u.shape == (2000, 32, 16)
    assert float(u.std()) == pytest.approx(0.5, rel=0.03)
    assert float(u.mean(dim=(1, 2)).abs().max()) < 1e-12
    # smoother for larger alpha: smaller mean squared gradient at the same std
    rough = systems.gaussian_random_field(500, 64, alpha=1.0, tau=3.0, std=1.0, generator=gen)
    smooth = systems.gaussian_random_field(500, 64, alpha=3.0, tau=3.0, std=1.0, generator=gen)
    grad = [float(((torch.roll(f, -1, 1) - f) ** 2).mean()) for f in (rough, smooth)]
    assert grad[1] < 0.2 * grad[0]
    with pytest.raises(ValueError, match="not both"):
        systems.gaussian_random_field(1, 16, sigma=1.0, std=1.0)
    with pytest.raises(ValueError, match="alpha must be finite and > 0"):
        systems.gaussian_random_field(1, 16, alpha=0.0)


def test_sum_of_sines_is_periodic_and_bounded():
    gen = torch.Generator().manual_seed(0)
    u = systems.sum_of_sines(50, 64, 2.0, waves=3, n_max=4, generator=gen)
    assert u.shape == (50, 64) and float(u.abs().max()) <= 3.0
    # only wave numbers 1..n_max carry energy
    power = (torch.fft.rfft(u, dim=1).abs() ** 2).mean(0)
    assert float(power[5:].max()) < 1e-20 * float(power[1:5].max())
    assert float(power[0]) < 1e-20 * float(power[1:5].max())  # mean zero on the grid
