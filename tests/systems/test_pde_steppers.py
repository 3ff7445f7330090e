"""The PDE-stepper registry: declared properties, the declared order of every registered
stepper fitted on a problem with a known solution, and a stepper registered in a test."""

import math

import numpy as np
import pytest
import torch

import simsci.systems as systems
from simsci.errors import UnknownNameError
from simsci.systems._pde import PDESystem
from simsci.systems._steppers import PDE_STEPPERS, PDEStepper, get_stepper, register_stepper


class Bernoulli(PDESystem):
    r"""Test problem :math:`u_t = -\lambda u + u^2`, pointwise (every spatial scheme is
    exact on it): a constant field follows the Bernoulli ODE,
    :math:`u(t) = 1 / (1/\lambda + (1/u_0 - 1/\lambda) e^{\lambda t})`. The linear part
    is stiff-able (:math:`\lambda`), the nonlinear part is active. Offers every
    registered stepper, the non-generic ones too."""

    name = "bernoulli_steppers_test"
    param_names = ("lam",)
    default_params = {"lam": 1.0}
    valid_ranges = {"lam": "(0, inf)"}
    default_resolution = (8,)
    extra_steppers = tuple(PDE_STEPPERS)

    def linear_terms(self, p):
        return [(-p[:, 0:1], (0,))]

    def nonlinear_terms(self, t, u, p):
        return [((0,), u * u)]

    @staticmethod
    def exact(u0, t, lam=1.0):
        return 1.0 / (1.0 / lam + (1.0 / u0 - 1.0 / lam) * math.exp(lam * t))


def fitted_order(method, dts=(0.1, 0.05, 0.025), t_end=1.0) -> float:
    """Least-squares slope of log(error at t_end) against log(dt), two samples."""
    system = Bernoulli(resolution=8)
    starts = (0.5, 0.25)
    u0 = torch.tensor(starts, dtype=torch.float64)[:, None, None].expand(-1, 8, 1)
    exact = torch.tensor([Bernoulli.exact(s, t_end) for s in starts], dtype=torch.float64)
    errors = []
    for dt in dts:
        u = system.simulate(u0, [0.0, t_end], method=method, dt=dt)[:, -1]
        errors.append(float((u - exact[:, None, None]).abs().max()))
    return float(np.polyfit(np.log(dts), np.log(errors), 1)[0])


# ------------------------------------------------------------------ the registry
@pytest.mark.parametrize("name", list(PDE_STEPPERS))
def test_every_stepper_declares_its_properties(name):
    stepper = get_stepper(name)
    assert isinstance(stepper, PDEStepper) and stepper.name == name
    assert isinstance(stepper.order, int) and stepper.order >= 1
    assert isinstance(stepper.spectral, bool) and isinstance(stepper.forcing, bool)
    assert stepper.stability and stepper.description and stepper.source
    # the stability rule and the step limit agree
    heat = Bernoulli(resolution=8)
    assert math.isinf(stepper.stable_dt(heat, None, None)) == stepper.unconditionally_stable


@pytest.mark.parametrize("name", list(PDE_STEPPERS))
def test_every_stepper_reaches_its_declared_order(name):
    order = fitted_order(name)
    assert abs(order - get_stepper(name).order) < 0.3, (name, order)


def test_unknown_stepper_lists_the_valid_names():
    with pytest.raises(
        UnknownNameError, match=r"unknown PDE stepper 'etdrk5'; did you mean 'etdrk4'"
    ):
        get_stepper("etdrk5")
    with pytest.raises(UnknownNameError, match="Valid names: " + ", ".join(sorted(PDE_STEPPERS))):
        get_stepper(3)


def test_systems_offer_the_generic_steppers_and_their_extras():
    generic = [n for n, s in PDE_STEPPERS.items() if s.generic]
    assert list(systems.get("burgers", resolution=16).methods) == generic
    assert set(generic) >= {"etdrk4", "imex", "rk4"} and "cn" not in generic
    ns = systems.get("navier_stokes_2d", resolution=16)
    assert list(ns.methods) == [n for n, s in PDE_STEPPERS.items() if s.generic or n == "cn"]
    assert ns.methods["cn"] == get_stepper("cn").description
    assert systems.get("darcy", resolution=9).methods == {
        "cg": systems.SYSTEMS["darcy"].methods["cg"]
    }


@pytest.mark.parametrize("name", list(PDE_STEPPERS))
def test_spectral_steppers_need_an_even_grid_and_forcing_follows_the_declaration(name):
    stepper = get_stepper(name)
    odd = Bernoulli(resolution=9)
    u0 = torch.full((1, 9, 1), 0.5, dtype=torch.float64)
    if stepper.spectral:
        with pytest.raises(ValueError, match="needs an even resolution"):
            odd.simulate(u0, [0.0, 0.1], method=name, dt=0.05)
    else:
        odd.simulate(u0, [0.0, 0.1], method=name, dt=0.05)
    even = Bernoulli(resolution=8)
    f = torch.zeros(1, 8, 1, dtype=torch.float64)
    u0 = u0[:, :8]
    if stepper.forcing:
        plain = even.simulate(u0, [0.0, 0.1], method=name, dt=0.05)
        forced = even.simulate(u0, [0.0, 0.1], method=name, dt=0.05, forcing=f)
        torch.testing.assert_close(forced, plain, atol=1e-15, rtol=0)
    else:
        with pytest.raises(ValueError, match="forcing= is supported by the methods"):
            even.simulate(u0, [0.0, 0.1], method=name, dt=0.05, forcing=f)


def test_register_stepper_checks_the_declarations():
    class Incomplete(PDEStepper):
        name = "incomplete_test"
        order = 2

    with pytest.raises(TypeError, match="spectral must be declared as a bool"):
        register_stepper(Incomplete)

    class Taken(PDEStepper):
        name = "etdrk4"
        order = 1
        spectral = True
        unconditionally_stable = True
        stability = "-"
        description = "-"
        source = "-"

    with pytest.raises(ValueError, match="already registered"):
        register_stepper(Taken)
    assert "incomplete_test" not in PDE_STEPPERS and type(PDE_STEPPERS["etdrk4"]) is not Taken


# ------------------------------------------------------------- a stepper added here
class SpectralEuler(PDEStepper):
    """Toy: pseudo-spectral forward Euler, v <- v + h (L v + N(v) + f)."""

    name = "toy_euler_test"
    order = 1
    spectral = True
    unconditionally_stable = False
    stability = "|1 + h lambda| <= 1 for every eigenvalue lambda (forward Euler's disk)"
    description = "toy: pseudo-spectral forward Euler (order 1)"
    source = "Euler 1768"

    def coefficients(self, system, h, rows, grid):
        return (system.linear_symbol(torch.as_tensor(rows), grid).to(grid.cdtype),)

    def step(self, system, v, t, h, coeffs, p, grid, source, carry):
        (L,) = coeffs
        N = system.nonlinear_hat(t, v, p, grid)
        if source is not None:
            N = N + source
        return v + h * (L * v + N), carry

    def stable_dt(self, system, params, u0):
        lam = system.linearised_symbol(params, u0=u0, kind="spectral").flatten()
        lam = lam[lam.real < 0]  # decaying modes; growing ones are physical
        return float((-2.0 * lam.real / lam.abs() ** 2).min()) if len(lam) else math.inf


@pytest.fixture
def toy():
    register_stepper(SpectralEuler)
    try:
        yield PDE_STEPPERS["toy_euler_test"]
    finally:
        del PDE_STEPPERS["toy_euler_test"]


def test_a_stepper_registered_in_a_test_is_usable_by_a_pde_system(toy, tmp_path):
    heat = systems.get("heat", resolution=16, nu=0.02)
    assert heat.methods["toy_euler_test"] == toy.description
    x = torch.as_tensor(heat.coords()["x"])
    u0 = torch.sin(2 * math.pi * x)[None, :, None]
    decay = math.exp(-0.02 * (2 * math.pi) ** 2 * 0.5)
    errors = []
    for dt in (0.01, 0.005):
        u = heat.simulate(u0, [0.0, 0.5], method="toy_euler_test", dt=dt)[:, -1]
        errors.append(float((u - decay * u0).abs().max()))
    assert 0.9 < math.log2(errors[0] / errors[1]) < 1.1  # first order against the exact decay
    # its declared stability rule: the default step is capped, a larger one refused
    limit = heat.stable_dt(None, "toy_euler_test")
    assert limit == pytest.approx(2.0 / (0.02 * (2 * math.pi * 8) ** 2), rel=1e-12)
    heat.simulate(u0, [0.0, 0.5], method="toy_euler_test")  # default dt: 0.9 x limit
    with pytest.raises(ValueError, match="beyond the stability limit .* 'toy_euler_test'"):
        heat.simulate(u0, [0.0, 0.5], method="toy_euler_test", dt=2 * limit)
    # and by the data generator
    path = systems.generate(
        heat, 2, out=tmp_path / "toy.h5", t_end=0.1, dt=0.05, method="toy_euler_test",
        progress=False,
    )  # fmt: skip
    assert path.exists()
    # the order test that every registered stepper passes
    assert abs(fitted_order("toy_euler_test") - toy.order) < 0.3


# ------------------------------------------------------------------- ssprk3
def _fd_laplacian_symbol(k: int, n: int, length: float = 1.0) -> float:
    """Eigenvalue of the fourth-order centred second difference on the mode k (n points)."""
    theta, dx = 2 * math.pi * k / n, length / n
    return (-math.cos(2 * theta) / 6 + 8 * math.cos(theta) / 3 - 2.5) / dx**2


def test_ssprk3_is_shu_osher_rk3_with_its_stability_region():
    """One step on a Fourier mode of the heat equation multiplies it by the stability
    function R(z) = 1 + z + z^2/2 + z^3/6 of Shu & Osher's scheme (z = h lambda_fd): the
    three stages and their weights are right; the declared limit is R's region."""
    nu, n = 0.02, 16
    heat = systems.get("heat", resolution=n, nu=nu)
    x = torch.as_tensor(heat.coords()["x"])
    for k in (1, 3, 8):
        u0 = torch.cos(2 * math.pi * k * x)[None, :, None]
        lam = nu * _fd_laplacian_symbol(k, n)
        h = 0.05
        z = h * lam
        u1 = heat.simulate(u0, [0.0, h], method="ssprk3", dt=h)[:, -1]
        gain = 1 + z + z * z / 2 + z**3 / 6
        torch.testing.assert_close(u1, gain * u0, atol=1e-12, rtol=1e-12)
    # the limit: the fastest mode (k = n/2, lambda = -16/3 nu/dx^2) on the negative real
    # axis at 2.5127, the root of 1 - r + r^2/2 - r^3/6 = -1
    limit = heat.stable_dt(None, "ssprk3")
    root = float(max(r.real for r in np.roots([1 / 6, -1 / 2, 1, -2]) if abs(r.imag) < 1e-12))
    assert limit == pytest.approx(root / (nu * 16 / 3 * n**2), rel=1e-5)
    assert limit < heat.stable_dt(None, "rk4")  # RK4's region reaches 2.785
    u0 = torch.cos(2 * math.pi * x)[None, :, None]
    with pytest.raises(ValueError, match="beyond the stability limit .* 'ssprk3'"):
        heat.simulate(u0, [0.0, 1.05 * limit], method="ssprk3", dt=1.05 * limit)
    # just inside it the fastest mode does not grow; RK4's step there is inside its own
    u_fast = torch.cos(math.pi * n * x)[None, :, None]
    end = heat.simulate(u_fast, [0.0, 50 * limit], method="ssprk3", dt=0.999 * limit)[:, -1]
    assert float(end.abs().max()) <= 1.0
    # on the imaginary axis (advection's centred differences) the region reaches sqrt(3)
    adv = systems.get("advection", resolution=n, c=1.0)
    dx = 1.0 / n
    thetas = 2 * math.pi * np.arange(n) / n  # the grid's modes
    fastest = float(np.abs(8 * np.sin(thetas) - np.sin(2 * thetas)).max()) / (6 * dx)
    assert adv.stable_dt(None, "ssprk3") == pytest.approx(math.sqrt(3) / fastest, rel=1e-3)


def test_ssprk3_is_third_order_on_the_heat_equation():
    """Against the exact solution of the semi-discrete system (the finite-difference
    decay rate), so the error is the time stepper's alone."""
    nu, n, t_end = 0.01, 16, 0.5  # stability limit 0.18
    heat = systems.get("heat", resolution=n, nu=nu)
    x = torch.as_tensor(heat.coords()["x"])
    u0 = torch.sin(2 * math.pi * 2 * x)[None, :, None]
    exact = math.exp(nu * _fd_laplacian_symbol(2, n) * t_end) * u0
    errors = []
    for dt in (0.1, 0.05, 0.025):
        u = heat.simulate(u0, [0.0, t_end], method="ssprk3", dt=dt)[:, -1]
        errors.append(float((u - exact).abs().max()))
    rates = [math.log2(a / b) for a, b in zip(errors, errors[1:])]
    assert all(2.8 < r < 3.2 for r in rates), (errors, rates)
