"""Gray-Scott reaction-diffusion: fixed point, mass balance, solver agreement, bad input."""

import math

import numpy as np
import pytest
import torch

import simsci.systems as systems
from simsci.errors import SolverError

METHODS = ("etdrk4", "imex", "rk4")


def _gs(**kwargs):
    kwargs.setdefault("resolution", 32)
    return systems.get("gray_scott", **kwargs)


def _bump(gs, n=2, device=None):
    """Smooth initial states: u = 1 - v/2, v = 1/4 at a periodic Gaussian bump."""
    c = gs.coords()
    x = torch.as_tensor(c["x"])
    y = torch.as_tensor(c["y"])
    lx, ly = gs.domain
    shifts = torch.linspace(0.3, 0.6, n)
    out = []
    for s in shifts.tolist():
        dx = torch.sin(math.pi * (x / lx - s)) ** 2
        dy = torch.sin(math.pi * (y / ly - 0.5)) ** 2
        v = 0.25 * torch.exp(-(dx[:, None] + dy[None, :]) / 0.3)
        out.append(torch.stack([1.0 - 0.5 * v, v], dim=-1))
    return torch.stack(out).to(device)


def test_registered_interface():
    gs = systems.get("gray_scott")
    assert gs.kind == "field" and gs.channel_names == ("u", "v")
    assert gs.state_shape == (128, 128, 2) and gs.domain == (2.5, 2.5)
    assert gs.params == {"F": 0.04, "k": 0.06, "Du": 2e-5, "Dv": 1e-5}
    assert set(gs.methods) >= set(METHODS)  # and any stepper registered later


@pytest.mark.parametrize("method", METHODS)
def test_homogeneous_state_is_a_fixed_point(device, method):
    gs = _gs()
    state = torch.zeros((2, 32, 32, 2), dtype=torch.float64, device=device)
    state[..., 0] = 1.0
    out = gs.simulate(state, [0.0, 20.0, 40.0], method=method, dt=1.0)
    torch.testing.assert_close(out, state[:, None].expand(-1, 3, -1, -1, -1), rtol=0, atol=1e-12)


def test_mass_balance(device):
    # d/dt <u + v> = F (1 - <u>) - (F + k) <v>: diffusion and u v^2 cancel in the sum
    gs = _gs()
    state = gs.sample_initial(2, generator=torch.Generator().manual_seed(0), device=device)
    p = gs.params_tensor({"F": [0.03, 0.05], "k": [0.06, 0.055]}, device=device)
    rate = gs.drift(0.0, state, p).sum(-1).mean(dim=(1, 2))
    torch.testing.assert_close(rate, gs.total_mass_rate(state, p), rtol=1e-10, atol=1e-14)
    t = torch.linspace(0.0, 20.0, 21)
    xs = gs.simulate(state, t, p, dt=1.0)
    mass = xs.sum(-1).mean(dim=(2, 3))  # (B, T)
    rates = torch.stack([gs.total_mass_rate(xs[:, i], p) for i in range(21)], dim=1)
    # Simpson's rule on the recorded rates against the mass change
    w = torch.ones(21, dtype=torch.float64, device=device)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    integral = (rates * w).sum(dim=1) / 3.0
    torch.testing.assert_close(mass[:, -1] - mass[:, 0], integral, rtol=1e-6, atol=1e-9)
    assert float((mass[:, -1] - mass[:, 0]).abs().min()) > 1e-4  # the balance is not trivial


def test_spectral_and_finite_differences_agree(device):
    # a short run from a smooth state (the reaction changes it by ~0.3)
    errs = []
    for n in (16, 32):
        gs = _gs(resolution=n, domain=0.25)
        u0 = _bump(gs, device=device)
        etd = gs.simulate(u0, [0.0, 5.0], method="etdrk4", dt=0.1)[:, -1]
        imex = gs.simulate(u0, [0.0, 5.0], method="imex", dt=0.05)[:, -1]
        fd = gs.simulate(u0, [0.0, 5.0], method="rk4", dt=0.1)[:, -1]
        assert float((etd - u0).abs().max()) > 0.2
        assert float((etd - imex).abs().max()) < 3e-4
        errs.append(float((etd - fd).abs().max()))
    assert errs[1] < 5e-4
    assert math.log2(errs[0] / errs[1]) > 3.5  # fourth-order stencils


def test_etdrk4_is_fourth_order_in_time(device):
    gs = _gs(resolution=16, domain=0.25)
    u0 = _bump(gs, device=device)
    ref = gs.simulate(u0, [0.0, 5.0], dt=1 / 64)[:, -1]
    dts = (0.5, 0.25, 0.125)
    errs = [float((gs.simulate(u0, [0.0, 5.0], dt=h)[:, -1] - ref).abs().max()) for h in dts]
    slope = np.polyfit(np.log(dts), np.log(errs), 1)[0]
    assert 3.6 < slope < 4.5, (errs, slope)


def test_sample_initial_is_seeded_squares(device):
    gs = _gs(resolution=64)
    a = gs.sample_initial(8, generator=torch.Generator().manual_seed(3), device=device)
    b = gs.sample_initial(8, generator=torch.Generator().manual_seed(3), device=device)
    c = gs.sample_initial(8, generator=torch.Generator().manual_seed(4), device=device)
    assert a.shape == (8, 64, 64, 2) and torch.equal(a, b) and not torch.equal(a, c)
    u, v = a[..., 0], a[..., 1]
    inside = v > 0.1
    # u = 1/2, v = 1/4 in the squares and u = 1, v = 0 outside, with 1% noise
    assert bool(((u[inside] - 0.5).abs() <= 0.005 + 1e-12).all())
    assert bool(((v[inside] - 0.25).abs() <= 0.0025 + 1e-12).all())
    assert bool(((u[~inside] - 1.0).abs() <= 0.01 + 1e-12).all()) and bool((v[~inside] == 0).all())
    side = round(0.08 * 64)
    cells = inside.sum(dim=(1, 2))
    assert bool((cells >= side * side).all()) and bool((cells <= 4 * side * side).all())


# ------------------------------------------------------------------- bad input
def test_explicit_step_beyond_stability_limit_fails_before_running(device):
    gs = _gs(resolution=64)
    u0 = gs.sample_initial(1, device=device)
    limit = gs.stable_dt(None, "rk4")
    # RK4's real interval 2.785 over the largest decay rate: D times the 4th-order
    # stencil's 2D symbol 2 * (16/3) / dx^2, plus F (channel u) or F + k (channel v)
    lam = 2 * (16 / 3) / (2.5 / 64) ** 2
    expected = 2.785 / max(2e-5 * lam + 0.04, 1e-5 * lam + 0.1)
    assert limit == pytest.approx(expected, rel=2e-2)
    with pytest.raises(ValueError, match="beyond the stability limit"):
        gs.simulate(u0, [0.0, 1e4], method="rk4", dt=1.2 * limit)


def test_nan_in_initial_state_names_the_sample(device):
    gs = _gs()
    u0 = gs.sample_initial(2, device=device)
    u0[1, 0, 0, 1] = float("inf")
    with pytest.raises(ValueError, match="sample 1"):
        gs.simulate(u0, [0.0, 1.0])


def test_blow_up_names_trajectory(device):
    gs = _gs()
    u0 = gs.sample_initial(2, device=device)
    u0[0, ..., 1] += 50.0  # v^2 u drives this one to overflow with the huge step
    with pytest.raises(SolverError, match="trajectory 0") as info:
        gs.simulate(u0, [0.0, 500.0], method="etdrk4", dt=50.0)
    assert 0 in info.value.samples and info.value.time > 0


@pytest.mark.parametrize(("params", "match"), [({"Du": 0.0}, "Du"), ({"F": -0.01}, "'F'")])
def test_parameters_out_of_range_are_refused(params, match):
    with pytest.raises(ValueError, match=match):
        systems.get("gray_scott", **params)
