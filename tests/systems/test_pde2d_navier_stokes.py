"""2D incompressible Navier-Stokes (vorticity form): exact solutions, orders, invariants."""

import math

import numpy as np
import pytest
import torch

import simsci.systems as systems
from simsci.errors import SolverError, UnknownNameError
from simsci.systems._steppers import get_stepper

METHODS = ("etdrk4", "cn", "imex", "rk4")


def _ns(**kwargs):
    kwargs.setdefault("resolution", 32)
    return systems.get("navier_stokes_2d", **kwargs)


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def test_registered_interface():
    ns = systems.get("navier_stokes_2d")
    assert ns.kind == "field" and ns.spatial_dims == 2 and ns.pde_order == 2
    assert ns.channel_names == ("w",) and ns.state_shape == (64, 64, 1)
    assert set(ns.methods) >= set(METHODS)  # and any stepper registered later
    assert ns.params == {"nu": 1e-3, "forcing": 0.1}
    c = ns.coords()
    np.testing.assert_allclose(c["x"], np.arange(64) / 64)
    assert set(ns.static()) == {"x", "y"}


@pytest.mark.parametrize(
    ("method", "dt", "tol"),
    [("etdrk4", 1e-2, 1e-12), ("cn", 1e-3, 1e-6), ("imex", 1e-3, 1e-6), ("rk4", 5e-3, 1e-3)],
)
def test_taylor_green_exact_decay(device, method, dt, tol):
    # psi = sin(kx) sin(ky): u.grad(w) = 0, so w(t) = w0 exp(-2 nu k^2 t) exactly
    nu = 0.01
    ns = _ns(resolution=16, nu=nu, forcing=0.0)
    w0 = ns.taylor_green(2, device=device)
    t = torch.tensor([0.0, 0.5, 1.0])
    w = ns.simulate(w0, t, method=method, dt=dt)
    assert w.shape == (2, 3, 16, 16, 1) and w.device == w0.device
    k2 = 2 * (2 * math.pi) ** 2
    for i, ti in enumerate(t.tolist()):
        assert _rel(w[:, i], w0 * math.exp(-nu * k2 * ti)) < tol


def test_taylor_green_rk4_is_fourth_order_in_space(device):
    nu, T = 0.01, 0.5
    errs = []
    for n in (8, 16):
        ns = _ns(resolution=n, nu=nu, forcing=0.0)
        w0 = ns.taylor_green(1, device=device)
        w = ns.simulate(w0, [0.0, T], method="rk4", dt=5e-3)[:, -1]
        errs.append(_rel(w, w0 * math.exp(-nu * 2 * (2 * math.pi) ** 2 * T)))
    assert 3.5 < math.log2(errs[0] / errs[1]) < 4.5


@pytest.mark.parametrize(
    ("method", "dts"),
    [
        ("etdrk4", (0.05, 0.025, 0.0125)),
        ("cn", (0.004, 0.002, 0.001)),
        ("imex", (0.02, 0.01, 0.005)),
        ("rk4", (0.02, 0.01, 0.005)),
    ],
)
def test_temporal_convergence_order(device, method, dts):
    """Each stepper's order as the registry declares it (cn 1, imex 2, etdrk4/rk4 4)."""
    order = get_stepper(method).order
    ns = _ns(resolution=32)
    gen = torch.Generator().manual_seed(1)
    # 5x the FNO field: a strongly nonlinear run (max |u| ~ 0.4)
    w0 = 5.0 * ns.sample_initial(2, generator=gen, device=device)
    t = [0.0, 0.5]
    ref = ns.simulate(w0, t, method=method, dt=dts[-1] / 8)[:, -1]
    errs = [float((ns.simulate(w0, t, method=method, dt=h)[:, -1] - ref).abs().max()) for h in dts]
    slope = np.polyfit(np.log(dts), np.log(errs), 1)[0]
    assert abs(slope - order) < 0.3, (errs, slope)


def test_spectral_methods_agree_on_fno_problem(device):
    ns = _ns(resolution=32)
    w0 = ns.sample_initial(2, generator=torch.Generator().manual_seed(2), device=device)
    t = [0.0, 1.0]
    ref = ns.simulate(w0, t, method="etdrk4", dt=1e-2)[:, -1]
    assert _rel(ns.simulate(w0, t, method="cn", dt=1e-4)[:, -1], ref) < 1e-3
    assert _rel(ns.simulate(w0, t, method="imex", dt=1e-3)[:, -1], ref) < 1e-4
    # the finite-difference baseline converges to the same solution with the grid
    fd = ns.simulate(w0, t, method="rk4", dt=1e-2)[:, -1]
    assert _rel(fd, ref) < 0.05


def test_default_steps_are_accurate(device):
    ns = _ns(resolution=32, nu=1e-4)
    w0 = 5.0 * ns.sample_initial(1, generator=torch.Generator().manual_seed(8), device=device)
    t = [0.0, 0.5]
    ref = ns.simulate(w0, t, method="etdrk4", dt=1e-3)[:, -1]
    assert _rel(ns.simulate(w0, t)[:, -1], ref) < 1e-6  # etdrk4, step 1e-2
    ref_fd = ns.simulate(w0, t, method="rk4", dt=1e-3)[:, -1]
    assert _rel(ns.simulate(w0, t, method="rk4")[:, -1], ref_fd) < 1e-6  # step 1e-2


def test_unforced_energy_and_enstrophy_decay(device):
    ns = _ns(resolution=32, nu=1e-3, forcing=0.0)
    w0 = 5.0 * ns.sample_initial(2, generator=torch.Generator().manual_seed(3), device=device)
    w = ns.simulate(w0, torch.linspace(0, 2, 11), dt=1e-2)
    enstrophy = (w**2).mean(dim=(2, 3, 4))
    energy = torch.stack(
        [0.5 * (ns.velocity(w[:, i]) ** 2).sum(-1).mean(dim=(1, 2)) for i in range(11)], 1
    )
    assert bool((enstrophy.diff(dim=1) < 0).all())
    assert bool((energy.diff(dim=1) < 0).all())
    # dE/dt = -nu <w^2> (means over the torus): the energy balance, by the trapezoid rule
    dE = (energy[:, 1:] - energy[:, :-1]) / 0.2
    rate = -ns.params["nu"] * 0.5 * (enstrophy[:, 1:] + enstrophy[:, :-1])
    np.testing.assert_allclose(dE.cpu().numpy(), rate.cpu().numpy(), rtol=1e-3)


@pytest.mark.parametrize("method", METHODS)
def test_mean_vorticity_is_conserved(device, method):
    ns = _ns(resolution=16)
    w0 = 5.0 * ns.sample_initial(2, generator=torch.Generator().manual_seed(4), device=device)
    w0 = w0 + torch.tensor([0.3, -0.2], device=device).reshape(2, 1, 1, 1)
    w = ns.simulate(w0, [0.0, 0.1, 0.2], method=method, dt=1e-3)
    mean = w.mean(dim=(2, 3, 4))
    torch.testing.assert_close(mean, mean[:, :1].expand(-1, 3), rtol=0, atol=1e-12)
    assert not torch.allclose(w[:, -1], w0)


def test_per_sample_viscosity_matches_separate_runs(device):
    ns = _ns(resolution=16)
    w0 = ns.sample_initial(2, generator=torch.Generator().manual_seed(5), device=device)
    t = [0.0, 0.3]
    both = ns.simulate(w0, t, {"nu": [1e-2, 1e-3], "forcing": [0.1, 0.0]}, dt=1e-2)
    one = ns.simulate(w0[:1], t, {"nu": 1e-2, "forcing": 0.1}, dt=1e-2)
    two = ns.simulate(w0[1:], t, {"nu": 1e-3, "forcing": 0.0}, dt=1e-2)
    torch.testing.assert_close(both, torch.cat([one, two]), rtol=0, atol=1e-13)


def test_drift_is_the_semi_discrete_right_hand_side(device):
    ns = _ns(resolution=16, nu=0.02, forcing=0.1)
    w0 = ns.taylor_green(1, device=device)
    p = ns.params_tensor(1, device=device)
    f = ns.forcing_field(device)[None, :, :, None]
    expected = -0.02 * 2 * (2 * math.pi) ** 2 * w0 + 0.1 * f
    torch.testing.assert_close(ns.drift(0.0, w0, p), expected, rtol=0, atol=1e-10)


def test_initial_vorticity_has_the_fno_covariance(device):
    ns = _ns(resolution=32)
    w0 = ns.sample_initial(400, generator=torch.Generator().manual_seed(6), device=device)
    assert w0.shape == (400, 32, 32, 1) and w0.device.type == device.type
    # Var w(x) = sum_k 7^3 (|k|^2 + 49)^(-2.5) over the grid's modes, zero mean mode
    n = np.fft.fftfreq(32, 1 / 32)
    k2 = (2 * np.pi) ** 2 * (n[:, None] ** 2 + n[None, :] ** 2)
    spec = 7.0**3 * (k2 + 49.0) ** -2.5
    spec[0, 0] = 0.0
    var = float(w0.var())
    assert abs(var / spec.sum() - 1) < 0.05
    assert abs(float(w0.mean(dim=(1, 2, 3)).abs().max())) < 1e-12


def test_float32_runs_in_float32(device):
    ns = _ns(resolution=16)
    w0 = ns.sample_initial(2, device=device, dtype=torch.float32)
    for method in METHODS:
        w = ns.simulate(w0, [0.0, 0.05], method=method, dt=1e-3)
        assert w.dtype == torch.float32 and bool(torch.isfinite(w).all())


# ------------------------------------------------------------------- bad input
def test_nan_in_initial_vorticity_names_the_sample(device):
    ns = _ns(resolution=16)
    w0 = ns.sample_initial(3, device=device)
    w0[2, 4, 5, 0] = float("nan")
    with pytest.raises(ValueError, match="sample 2"):
        ns.simulate(w0, [0.0, 0.1])


@pytest.mark.parametrize("method", ["etdrk4", "cn", "imex"])
def test_non_uniform_grid_is_refused_by_spectral_methods(method):
    ns = _ns(resolution=16)
    x = np.arange(16) / 16
    bent = x + 0.01 * np.sin(2 * np.pi * x)
    with pytest.raises(
        ValueError, match=rf"non-uniform grid given to a spectral solver \('{method}'"
    ):
        ns.simulate(ns.sample_initial(1), [0.0, 0.1], method=method, grid={"x": x, "y": bent})
    # the system's own grid is accepted
    ns.simulate(ns.sample_initial(1), [0.0, 0.01], method=method, grid=ns.coords())


def test_explicit_step_beyond_stability_limit_fails_before_running(device):
    ns = _ns(resolution=32, nu=1e-2)
    w0 = ns.sample_initial(1, device=device)
    limit = ns.stable_dt(None, "rk4", u0=w0)
    assert 0 < limit < math.inf and ns.stable_dt(None, "etdrk4") == math.inf
    # a viscosity 10x larger shrinks the diffusive limit 10x
    assert ns.stable_dt({"nu": 0.1}, "rk4") == pytest.approx(ns.stable_dt(None, "rk4") / 10, 1e-6)
    with pytest.raises(ValueError, match="beyond the stability limit"):
        ns.simulate(w0, [0.0, 100.0], method="rk4", dt=1.5 * limit)
    # strong initial velocity: the advective CFL limit of u0 takes over
    assert ns.stable_dt(None, "rk4", u0=100 * w0) < 0.5 * limit


def test_blow_up_names_trajectory_and_time(device):
    ns = _ns(resolution=16, nu=1e-3)
    w0 = ns.sample_initial(3, generator=torch.Generator().manual_seed(7), device=device)
    w0[1] *= 2000.0  # forward-Euler advection of 'cn' is unstable for this one at dt = 1e-2
    with pytest.raises(SolverError, match="trajectory 1 blew up") as info:
        ns.simulate(w0, torch.linspace(0, 5, 6), method="cn", dt=1e-2)
    assert info.value.samples == [1]
    assert 0 < info.value.time <= 5.0


@pytest.mark.parametrize(
    ("params", "match"),
    [({"nu": 0.0}, "nu"), ({"nu": -1e-3}, "nu"), ({"forcing": -0.1}, "forcing")],
)
def test_parameters_out_of_range_are_refused(params, match):
    with pytest.raises(ValueError, match=match):
        systems.get("navier_stokes_2d", **params)
    ns = _ns(resolution=16)
    with pytest.raises(ValueError, match=match):
        ns.simulate(ns.sample_initial(1), [0.0, 0.1], params)


def test_unknown_method_is_named():
    ns = _ns(resolution=16)
    with pytest.raises(UnknownNameError, match="did you mean 'etdrk4'"):
        ns.simulate(ns.sample_initial(1), [0.0, 0.1], method="etdrk")
