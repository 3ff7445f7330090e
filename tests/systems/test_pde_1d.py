"""1D periodic PDE solvers: exact solutions, convergence orders, conservation laws."""

import math

import numpy as np
import pytest
import torch

import simsci
import simsci.systems as systems
from simsci.systems._steppers import get_stepper


def _field(values, device, dtype=torch.float64):
    """(N,) or (B, N) array -> (B, N, 1) tensor."""
    u = torch.as_tensor(np.asarray(values), device=device, dtype=dtype)
    return (u[None] if u.ndim == 1 else u)[..., None]


def _order(dts, errors) -> float:
    """Least-squares slope of log(error) against log(dt)."""
    return float(np.polyfit(np.log(dts), np.log(errors), 1)[0])


# ------------------------------------------------------------------- Cole-Hopf
NU = 0.05


def _cole_hopf(x, t, nu=NU):
    """Burgers' exact solution u = -2 nu phi_x / phi with phi a positive heat solution."""
    a1, a2 = 0.6 * np.exp(-nu * 4 * np.pi**2 * t), 0.2 * np.exp(-nu * 16 * np.pi**2 * t)
    phi = 1 + a1 * np.cos(2 * np.pi * x) + a2 * np.sin(4 * np.pi * x)
    phi_x = -2 * np.pi * a1 * np.sin(2 * np.pi * x) + 4 * np.pi * a2 * np.cos(4 * np.pi * x)
    return -2 * nu * phi_x / phi


@pytest.mark.parametrize(
    ("method", "N", "dt", "tol"),
    [("etdrk4", 64, 5e-3, 1e-7), ("imex", 64, 2e-3, 5e-5), ("rk4", 128, 5e-4, 5e-6)],
)
def test_burgers_matches_cole_hopf(device, method, N, dt, tol):
    burgers = systems.get("burgers", resolution=N, nu=NU)
    x = burgers.coords()["x"]
    t = np.linspace(0.0, 0.5, 6)
    u = burgers.simulate(_field(_cole_hopf(x, 0.0), device), t, method=method, dt=dt)
    assert u.shape == (1, 6, N, 1) and u.device.type == device.type
    exact = np.stack([_cole_hopf(x, ti) for ti in t])
    err = np.abs(u[0, :, :, 0].cpu().numpy() - exact).max()
    assert err < tol


SPECTRAL = [
    m
    for m in systems.SYSTEMS["burgers"].methods
    if get_stepper(m).spectral and get_stepper(m).unconditionally_stable
]


@pytest.mark.parametrize("method", SPECTRAL)
def test_spectral_steppers_reach_their_declared_order(device, method):
    """The registry's order (ETDRK4 4, SBDF2 2), fitted from a dt sweep against Cole-Hopf."""
    burgers = systems.get("burgers", resolution=64, nu=NU)
    x = burgers.coords()["x"]
    u0, exact = _field(_cole_hopf(x, 0.0), device), _cole_hopf(x, 0.5)
    dts = np.array([0.02, 0.01, 0.005])
    errs = []
    for dt in dts:
        u = burgers.simulate(u0, [0.0, 0.5], method=method, dt=float(dt))
        errs.append(np.abs(u[0, -1, :, 0].cpu().numpy() - exact).max())
    assert abs(_order(dts, errs) - get_stepper(method).order) < 0.3


def test_etdrk4_fourth_order_on_kuramoto_sivashinsky(device):
    """K&T's example: ETDRK4 errors against a fine-step reference fall as dt^4."""
    ks = systems.get("kuramoto_sivashinsky", resolution=64)
    u0 = ks.kassam_trefethen_ic(device=device)
    t = [0.0, 10.0]
    ref = ks.simulate(u0, t, dt=1 / 64)[0, -1]
    dts = np.array([0.5, 0.25, 0.125])
    errs = [float((ks.simulate(u0, t, dt=float(h))[0, -1] - ref).abs().max()) for h in dts]
    assert 3.6 < _order(dts, errs) < 4.4


def test_rk4_fourth_order_in_time_at_fixed_grid(device):
    burgers = systems.get("burgers", resolution=48, nu=NU)
    u0 = _field(_cole_hopf(burgers.coords()["x"], 0.0), device)
    t = [0.0, 0.1]
    ref = burgers.simulate(u0, t, method="rk4", dt=1.25e-4)[0, -1]
    dts = np.array([4e-3, 2e-3, 1e-3])
    assert dts.max() < burgers.stable_dt(None, "rk4", u0=u0)
    errs = [
        float((burgers.simulate(u0, t, method="rk4", dt=float(h))[0, -1] - ref).abs().max())
        for h in dts
    ]
    assert abs(_order(dts, errs) - get_stepper("rk4").order) < 0.4


# -------------------------------------------------------------- exact solutions
@pytest.mark.parametrize(("method", "tol"), [("etdrk4", 1e-12), ("imex", 1e-4), ("rk4", 1e-4)])
def test_heat_fourier_modes_decay_exactly(device, method, tol):
    heat = systems.get("heat", resolution=64, nu=0.02)
    x = heat.coords()["x"]
    t = np.array([0.0, 0.25, 0.5])
    u0 = np.sin(2 * np.pi * x) + 0.5 * np.cos(6 * np.pi * x)
    u = heat.simulate(_field(u0, device), t, method=method, dt=1e-3)
    for i, ti in enumerate(t):
        exact = np.exp(-0.02 * (2 * np.pi) ** 2 * ti) * np.sin(2 * np.pi * x) + 0.5 * np.exp(
            -0.02 * (6 * np.pi) ** 2 * ti
        ) * np.cos(6 * np.pi * x)
        assert np.abs(u[0, i, :, 0].cpu().numpy() - exact).max() < tol


def test_advection_is_an_exact_shift(device):
    adv = systems.get("advection", resolution=128, c=1.0)
    u0 = adv.sample_initial(3, generator=torch.Generator().manual_seed(1), device=device)
    u = adv.simulate(u0, [0.0, 0.25, 1.0], method="etdrk4", dt=0.05)
    # a quarter period shifts by N/4 points; a full period returns the field
    torch.testing.assert_close(u[:, 1], torch.roll(u0, 32, dims=1), atol=1e-12, rtol=0)
    torch.testing.assert_close(u[:, 2], u0, atol=1e-12, rtol=0)
    # finite differences: a smooth field moves by a quarter period up to O(dx^4)
    x = adv.coords()["x"]
    smooth = _field(np.sin(2 * np.pi * x) + 0.3 * np.cos(4 * np.pi * x), device)
    fd = adv.simulate(smooth, [0.0, 0.25], method="rk4", dt=1e-3)
    torch.testing.assert_close(fd[:, 1], torch.roll(smooth, 32, dims=1), atol=1e-5, rtol=0)


@pytest.mark.parametrize("method", ["etdrk4", "rk4"])
def test_kdv_soliton_travels_at_speed_4k2(device, method):
    kdv = systems.get("kdv", resolution=256)  # u_t + 6 u u_x + u_xxx = 0 on [0, 50)
    x = kdv.coords()["x"]
    k, x0, T = 1.0, 15.0, 2.0

    def soliton(t):
        return 2 * k**2 / np.cosh(k * (x - x0 - 4 * k**2 * t)) ** 2

    u = kdv.simulate(_field(soliton(0.0), device), [0.0, T], method=method, dt=2e-3)
    uT = u[0, -1, :, 0].cpu().numpy()
    tol = 1e-5 if method == "etdrk4" else 2e-2
    assert np.abs(uT - soliton(T)).max() < tol
    # the crest sits at x0 + 4 k^2 T (speed 4k^2, amplitude 2k^2)
    assert abs(x[np.argmax(uT)] - (x0 + 4 * k**2 * T)) <= kdv.domain[0] / 256
    assert abs(uT.max() - 2 * k**2) < 0.02


@pytest.mark.parametrize("method", ["etdrk4", "imex", "rk4"])
def test_allen_cahn_uniform_states_follow_the_logistic_ode(device, method):
    """Constant fields solve u' = u - u^3: u(t) = c e^t / sqrt(1 - c^2 + c^2 e^{2t})."""
    ac = systems.get("allen_cahn", resolution=32)
    c = torch.tensor([-0.5, 0.2, 0.9, 1.0], dtype=torch.float64, device=device)
    u0 = c[:, None, None].expand(4, 32, 1).contiguous()
    t = 2.0
    u = ac.simulate(u0, [0.0, t], method=method, dt=1e-3)[:, -1]
    exact = c * math.exp(t) / torch.sqrt(1 - c**2 + c**2 * math.exp(2 * t))
    tol = 1e-5 if method == "imex" else 1e-10
    torch.testing.assert_close(u[:, :, 0], exact[:, None].expand(4, 32), atol=tol, rtol=0)


def test_allen_cahn_free_energy_decreases(device):
    ac = systems.get("allen_cahn", resolution=128)
    u0 = ac.sample_initial(2, generator=torch.Generator().manual_seed(3), device=device)
    u = ac.simulate(u0, np.linspace(0, 5, 11))[..., 0]
    dx = ac.domain[0] / 128
    ux = (torch.roll(u, -1, dims=-1) - u) / dx
    energy = (0.01 / 2 * ux**2 + (u**2 - 1) ** 2 / 4).sum(-1) * dx
    assert bool((energy[:, 1:] <= energy[:, :-1] + 1e-10).all())
    assert bool((energy[:, -1] < 0.9 * energy[:, 0]).all())


def test_kuramoto_sivashinsky_reference_and_bounded_chaos(device):
    ks = systems.get("kuramoto_sivashinsky", resolution=128)
    u0 = ks.kassam_trefethen_ic(device=device)
    t = np.linspace(0, 150, 31)
    u = ks.simulate(u0, t)  # K&T: h = 1/4
    fine = ks.simulate(u0, [0.0, 30.0], dt=1 / 32)
    assert float((u[0, 6] - fine[0, -1]).abs().max()) < 1e-4
    # chaotic, bounded, mean conserved
    assert float(u.abs().max()) < 5.0
    assert float(u[0, -1].std()) > 0.5
    assert float(u.mean(dim=(2, 3)).abs().max()) < 1e-12


# ------------------------------------------------------------------ invariants
@pytest.mark.parametrize("name", ["advection", "burgers", "kdv", "kuramoto_sivashinsky"])
@pytest.mark.parametrize("method", ["etdrk4", "imex", "rk4"])
def test_mass_is_conserved(device, name, method):
    system = systems.get(name, resolution=64)
    u0 = system.sample_initial(2, generator=torch.Generator().manual_seed(0), device=device)
    u0 = u0 + 0.3  # a non-zero mean to conserve
    t = np.linspace(0, 10 * system.default_save_dt, 3)
    u = system.simulate(u0, t, method=method)
    mass = u.mean(dim=(2, 3))
    torch.testing.assert_close(mass, mass[:, :1].expand_as(mass), atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", ["heat", "burgers"])
@pytest.mark.parametrize("method", ["etdrk4", "imex", "rk4"])
def test_energy_decays(device, name, method):
    system = systems.get(name, resolution=64)
    u0 = system.sample_initial(2, generator=torch.Generator().manual_seed(0), device=device)
    u = system.simulate(u0, np.linspace(0, 0.2, 11), method=method)
    energy = (u**2).mean(dim=(2, 3))
    assert bool((energy[:, 1:] < energy[:, :-1]).all())


# ------------------------------------------------------------- batching, dtypes
def test_per_sample_parameters_match_separate_solves(device):
    burgers = systems.get("burgers", resolution=64)
    u0 = burgers.sample_initial(3, generator=torch.Generator().manual_seed(2), device=device)
    nus = [0.02, 0.05, 0.02]
    t = [0.0, 0.05, 0.1]
    for method in ("etdrk4", "imex", "rk4"):
        together = burgers.simulate(u0, t, {"nu": nus}, method=method, dt=1e-4)
        for i, nu in enumerate(nus):
            alone = burgers.simulate(u0[i : i + 1], t, {"nu": nu}, method=method, dt=1e-4)
            torch.testing.assert_close(together[i : i + 1], alone, atol=1e-12, rtol=0)
    assert not torch.allclose(together[0], together[1])


@pytest.mark.parametrize("method", ["etdrk4", "imex", "rk4"])
def test_float32_follows_the_input(device, method):
    ks = systems.get("kuramoto_sivashinsky", resolution=64)
    u0 = ks.kassam_trefethen_ic(2, device=device)
    t = [0.0, 1.0, 2.0]
    dt = 0.05 if method != "rk4" else None
    u64 = ks.simulate(u0, t, method=method, dt=dt)
    u32 = ks.simulate(u0.float(), t, method=method, dt=dt)
    assert u32.dtype == torch.float32 and u32.device.type == device.type
    torch.testing.assert_close(u32.double(), u64, atol=1e-4, rtol=1e-4)


def test_output_times_are_hit_with_dt_adjusted_down(device):
    heat = systems.get("heat", resolution=32, nu=0.02)
    x = heat.coords()["x"]
    t = np.array([0.0, 0.1, 0.137, 0.5])  # uneven gaps, none a multiple of dt
    u = heat.simulate(_field(np.sin(2 * np.pi * x), device), t, method="imex", dt=1e-3)
    decay = u[0, :, 8, 0].cpu().numpy() / np.sin(2 * np.pi * x[8])  # x[8] = 1/4
    np.testing.assert_allclose(decay, np.exp(-0.02 * 4 * np.pi**2 * t), rtol=1e-5)
    # imex at dt = 1e-3 has an O(dt^2) error; an interval of 0.037 is split into 37 steps
    assert not np.allclose(decay, np.exp(-0.02 * 4 * np.pi**2 * t), rtol=1e-12)


def test_drift_is_the_semi_discrete_right_hand_side(device):
    burgers = systems.get("burgers", resolution=128, nu=NU)
    x = burgers.coords()["x"]
    t, eps = 0.2, 1e-4
    u = _field(_cole_hopf(x, t), device)
    p = burgers.params_tensor(1, device=device)
    f = burgers.drift(t, u, p)
    dudt = (_cole_hopf(x, t + eps) - _cole_hopf(x, t - eps)) / (2 * eps)
    assert np.abs(f[0, :, 0].cpu().numpy() - dudt).max() < 1e-6
    # and it drives simsci.odeint like any vector field
    # and it drives simsci.odeint like any vector field (explicit: step below the
    # spectral diffusive limit 2.78 / (nu k_max^2) = 3.4e-4)
    func = burgers.vector_field(n=1, device=device)
    ode = simsci.odeint(func, u, [t, t + 0.02], method="rk4", step_size=2e-4)
    assert np.abs(ode[0, -1, :, 0].cpu().numpy() - _cole_hopf(x, t + 0.02)).max() < 1e-8


# ---------------------------------------------------------------- stability
def test_rk4_stable_dt_is_the_diffusive_limit_and_it_is_sharp(device):
    heat = systems.get("heat", resolution=32, nu=0.01)
    dx = 1 / 32
    # 4th-order stencil: max |symbol| = (16/3) / dx^2; RK4 reaches -2.7853 on the real axis
    limit = heat.stable_dt(None, "rk4")
    assert limit == pytest.approx(2.785293563 * dx**2 / (0.01 * 16 / 3), rel=1e-4)
    u0 = 1e-3 * torch.randn(1, 32, 1, dtype=torch.float64, device=device)
    t = [0.0, 400 * limit * 0.98]
    ok = heat.simulate(u0, t, method="rk4", dt=0.98 * limit)
    assert float(ok.abs().max()) <= float(u0.abs().max())
    t = [0.0, 400 * limit * 1.05]
    bad = heat.simulate(u0, t, method="rk4", dt=1.05 * limit, check_stability=False)
    assert float(bad[0, -1].abs().max()) > 1e6 * float(u0.abs().max())


def test_gradients_flow_through_the_solvers():
    """float64 gradcheck of the final field with respect to the initial field."""
    burgers = systems.get("burgers", resolution=16, nu=0.05)
    u0 = burgers.sample_initial(1, generator=torch.Generator().manual_seed(0)).requires_grad_()
    for method in ("etdrk4", "imex", "rk4"):

        def final(u, method=method):
            return burgers.simulate(u, [0.0, 3e-3], method=method, dt=1e-3)[:, -1]

        assert torch.autograd.gradcheck(final, (u0,))
