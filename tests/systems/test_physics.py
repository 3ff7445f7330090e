"""Physics of the simulated systems: conservation laws, dissipation, limit cycles and the
closed-form moments of the linear SDEs, all through ``System.simulate``."""

import math

import pytest
import torch

import simsci.systems as systems


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


TIGHT = {"method": "dopri5", "rtol": 1e-10, "atol": 1e-12}


def test_rigid_body_conserves_energy_and_angular_momentum(device):
    body = systems.get("rigid_body")
    x0 = body.sample_initial(8, generator=_gen(), device=device)
    p = body.sample_params(8, generator=_gen(1), device=device)
    t = torch.linspace(0.0, 20.0, 201, dtype=torch.float64, device=device)
    xs = body.simulate(x0, t, p, **TIGHT)
    assert xs.shape == (8, 201, 3) and xs.device.type == device.type
    energy = body.energy(xs, p[:, None, :])
    norm2 = (xs * xs).sum(-1)
    assert (energy / energy[:, :1] - 1).abs().max() < 1e-8
    assert (norm2 / norm2[:, :1] - 1).abs().max() < 1e-8
    # ...while the state itself moves a lot (the test could fail)
    assert (xs[:, -1] - xs[:, 0]).norm(dim=-1).min() > 1e-2 or (xs.std(dim=1).max() > 0.1)


def _pendulum_energy(xs, p):
    g, length = p[..., 0], p[..., 1]
    theta, omega = xs[..., 0], xs[..., 1]
    return 0.5 * length**2 * omega**2 + g * length * (1.0 - torch.cos(theta))


def test_damped_pendulum_loses_energy_monotonically(device):
    pend = systems.get("damped_pendulum", damping=0.5)
    x0 = pend.sample_initial(6, generator=_gen(), device=device)
    p = pend.params_tensor(6, device=device)
    t = torch.linspace(0.0, 10.0, 401, dtype=torch.float64, device=device)
    energy = _pendulum_energy(pend.simulate(x0, t, p, **TIGHT), p[:, None, :])
    assert energy.diff(dim=1).max() < 1e-9
    assert torch.all(energy[:, -1] < 0.05 * energy[:, 0])


def test_undamped_pendulum_conserves_energy(device):
    pend = systems.get("damped_pendulum", damping=0.0)
    x0 = pend.sample_initial(6, generator=_gen(2), device=device)
    p = pend.sample_params(6, generator=_gen(3), device=device)
    p[:, 2] = 0.0
    t = torch.linspace(0.0, 10.0, 101, dtype=torch.float64, device=device)
    xs = pend.simulate(x0, t, p, **TIGHT)
    energy = _pendulum_energy(xs, p[:, None, :])
    assert (energy - energy[:, :1]).abs().max() < 1e-8 * energy[:, 0].max()
    assert xs[..., 0].std(dim=1).min() > 0.05  # it swings


def test_duffing_energy_is_conserved_without_damping_and_decays_into_a_well(device):
    duff = systems.get("duffing")
    x0 = duff.sample_initial(8, generator=_gen(), device=device)
    p = duff.sample_params(8, generator=_gen(1), device=device)
    t = torch.linspace(0.0, 10.0, 101, dtype=torch.float64, device=device)
    free = p.clone()
    free[:, 0] = 0.0  # delta = 0: conservative
    xs = duff.simulate(x0, t, free, **TIGHT)
    energy = duff.energy(xs, free[:, None, :])
    assert (energy - energy[:, :1]).abs().max() < 1e-8 * (1.0 + energy.abs().max())
    assert xs[..., 0].std(dim=1).min() > 0.05  # it oscillates
    # damped: dH/dt = -delta v^2 <= 0, and every orbit ends at the bottom of a well,
    # x = +-sqrt(-alpha/beta), H = -alpha^2/(4 beta)
    # the sampled delta (0.1-0.4) times 4, so that 50 time units damp the amplitude by
    # e^(-delta t / 2) <= e^-10 (still underdamped: delta < 2 omega = 2 sqrt(-2 alpha))
    p = p.clone()
    p[:, 0] *= 4.0
    t = torch.linspace(0.0, 50.0, 201, dtype=torch.float64, device=device)
    # rtol 1e-8: the sign of dH/dt is what is checked, and the energy falls by O(1)
    xs = duff.simulate(x0, t, p, method="dopri5", rtol=1e-8, atol=1e-10)
    energy = duff.energy(xs, p[:, None, :])
    assert energy.diff(dim=1).max() < 1e-9
    alpha, beta = p[:, 1], p[:, 2]
    well = torch.sqrt(-alpha / beta)
    assert torch.allclose(xs[:, -1, 0].abs(), well, atol=1e-3)
    assert torch.allclose(energy[:, -1], -(alpha**2) / (4 * beta), atol=1e-5)


def test_duffing_small_oscillation_in_a_well_is_linear(device):
    """Near the sink x* = sqrt(-alpha/beta) the undamped motion is harmonic at
    omega = sqrt(alpha + 3 beta x*^2) = sqrt(-2 alpha): x = x* + eps cos(omega t)."""
    duff = systems.get("duffing", delta=0.0, alpha=-1.0, beta=1.0)
    eps = 1e-4
    x0 = torch.tensor([[1.0 + eps, 0.0]], dtype=torch.float64, device=device)
    t = torch.linspace(0.0, 10.0, 101, dtype=torch.float64, device=device)
    xs = duff.simulate(x0, t, **TIGHT)
    linear = 1.0 + eps * torch.cos(math.sqrt(2.0) * t)
    # the neglected terms are O(eps^2)
    assert (xs[0, :, 0] - linear).abs().max() < 10 * eps**2


def test_double_pendulum_conserves_energy(device):
    pend = systems.get("double_pendulum")
    x0 = pend.sample_initial(4, generator=_gen(), device=device)
    p = pend.sample_params(4, generator=_gen(1), device=device)
    t = torch.linspace(0.0, 5.0, 51, dtype=torch.float64, device=device)
    energy = pend.energy(pend.simulate(x0, t, p, **TIGHT), p[:, None, :])
    assert (energy - energy[:, :1]).abs().max() < 1e-7 * energy.abs().max()


def test_lotka_volterra_first_integral(device):
    lv = systems.get("lotka_volterra")
    x0 = lv.sample_initial(8, generator=_gen(), device=device)
    p = lv.sample_params(8, generator=_gen(1), device=device)
    t = torch.linspace(0.0, 15.0, 151, dtype=torch.float64, device=device)
    xs = lv.simulate(x0, t, p, **TIGHT)
    v = lv.conserved(xs, p[:, None, :])
    assert (v - v[:, :1]).abs().max() < 1e-8
    assert xs.min() > 0  # populations stay positive


def test_van_der_pol_limit_cycle_has_amplitude_two(device):
    vdp = systems.get("van_der_pol", mu=0.1)
    x0 = torch.tensor([[0.5, 0.0], [3.0, 0.0]], dtype=torch.float64, device=device)
    t = torch.linspace(0.0, 120.0, 4801, dtype=torch.float64, device=device)
    xs = vdp.simulate(x0, t, method="dopri5", rtol=1e-9, atol=1e-11)
    last_period = xs[:, t > 120.0 - 2 * math.pi, 0]
    amplitude = last_period.abs().max(dim=1).values
    assert torch.allclose(amplitude, torch.full_like(amplitude, 2.0), atol=0.01)
    early = xs[:, : t.numel() // 60, 0].abs().max(dim=1).values  # first two time units
    assert (early - 2.0).abs().min() > 0.4  # both started well off the cycle


def test_per_sample_parameters_in_one_solve_match_separate_solves(device):
    lorenz = systems.get("lorenz63")
    x0 = lorenz.sample_initial(3, generator=_gen(), device=device)
    rows = lorenz.params_tensor({"rho": [20.0, 28.0, 35.0]}, device=device)
    t = torch.linspace(0.0, 1.0, 11, dtype=torch.float64, device=device)
    batched = lorenz.simulate(x0, t, rows, method="rk4", step_size=0.01)
    for i in range(3):
        single = lorenz.simulate(x0[i : i + 1], t, rows[i], method="rk4", step_size=0.01)
        torch.testing.assert_close(batched[i : i + 1], single, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(batched[0], batched[1])


def test_ornstein_uhlenbeck_moments_match_closed_form(device):
    theta, mu, sigma, x0 = 1.5, 0.5, 0.8, 2.0
    ou = systems.get("ornstein_uhlenbeck", theta=theta, mu=mu, sigma=sigma)
    n = 4000
    start = torch.full((n, 1), x0, dtype=torch.float64, device=device)
    t = torch.tensor([0.0, 0.25, 1.0, 3.0], dtype=torch.float64, device=device)
    xs = ou.simulate(start, t, method="euler", dt=0.005, seed=11)[..., 0]
    assert xs.shape == (n, 4) and xs.device.type == device.type
    tt = t[1:].cpu()
    mean = mu + (x0 - mu) * torch.exp(-theta * tt)
    var = sigma**2 * (1 - torch.exp(-2 * theta * tt)) / (2 * theta)
    got_mean = xs[:, 1:].mean(0).cpu()
    got_var = xs[:, 1:].var(0).cpu()
    # 5 standard errors; Euler-Maruyama's own bias (theta * dt / 2 ~ 0.4 %) is far smaller
    assert torch.all((got_mean - mean).abs() < 5 * torch.sqrt(var / n))
    assert torch.all((got_var / var - 1).abs() < 5 * math.sqrt(2 / n) + 0.01)


def test_geometric_brownian_motion_mean_is_exponential(device):
    mu, sigma = 0.5, 0.2
    gbm = systems.get("geometric_brownian_motion", mu=mu, sigma=sigma)
    n = 20000
    start = torch.ones(n, 1, dtype=torch.float64, device=device)
    t = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64, device=device)
    xs = gbm.simulate(start, t, method="euler", dt=0.01, seed=5)[..., 0].cpu()
    for j, tj in enumerate((0.5, 1.0), start=1):
        expected = math.exp(mu * tj)
        se = math.sqrt(math.exp(2 * mu * tj) * (math.exp(sigma**2 * tj) - 1) / n)
        assert abs(xs[:, j].mean().item() - expected) < 5 * se + 2e-3  # + Euler's bias
        # log S_t is Gaussian with variance sigma^2 t (Ito: the sigma^2/2 correction)
        assert abs(torch.log(xs[:, j]).var().item() / (sigma**2 * tj) - 1) < 0.1
    assert xs.min() > 0


def test_sde_paths_are_seeded(device):
    sl = systems.get("stochastic_lorenz")
    x0 = sl.sample_initial(4, generator=_gen(), device=device)
    t = torch.linspace(0.0, 0.5, 11, dtype=torch.float64, device=device)
    a = sl.simulate(x0, t, method="euler", dt=0.01, seed=1)
    b = sl.simulate(x0, t, method="euler", dt=0.01, seed=1)
    c = sl.simulate(x0, t, method="euler", dt=0.01, seed=2)
    assert torch.equal(a, b) and not torch.allclose(a, c)


def test_stochastic_lorenz_without_noise_is_the_lorenz_flow(device):
    sl = systems.get("stochastic_lorenz", sigma_noise=0.0)
    lorenz = systems.get("lorenz63")
    x0 = lorenz.sample_initial(3, generator=_gen(), device=device)
    t = torch.linspace(0.0, 0.5, 6, dtype=torch.float64, device=device)
    noisy = sl.simulate(x0, t, method="euler", dt=0.001, seed=0)
    # Euler-Maruyama without noise is Euler's method on the same step grid
    euler = lorenz.simulate(x0, t, method="euler", step_size=0.001)
    torch.testing.assert_close(noisy, euler, rtol=1e-9, atol=1e-9)
    exact = lorenz.simulate(x0, t, **TIGHT)
    assert (noisy - exact).abs().max() > 1e-3  # Euler's error is real: the test can fail


def test_simulate_hands_times_to_the_integrator_unchanged(device):
    # simulate passes t through as given: per-sample ragged grids work as in odeint, and a
    # float32 state that would merge two distinct times gets odeint's precision message
    # (not a misleading "sort the times" after a silent cast).
    vdp = systems.get("van_der_pol")
    x0 = vdp.sample_initial(2, generator=_gen(), device=device)
    grids = [
        torch.linspace(0.0, 1.0, 5, dtype=torch.float64),
        torch.linspace(0.5, 2.0, 7, dtype=torch.float64),
    ]
    xs = vdp.simulate(x0, grids, **TIGHT)
    assert [tuple(x.shape) for x in xs] == [(5, 2), (7, 2)]
    assert all(x.device.type == device.type and x.dtype == torch.float64 for x in xs)
    for b, grid in enumerate(grids):
        alone = vdp.simulate(x0[b : b + 1], grid, **TIGHT)[0]
        assert torch.allclose(xs[b], alone, rtol=1e-7, atol=1e-8)
    close = torch.tensor([0.0, 1.0, 1.0 + 1e-9], dtype=torch.float64)
    with pytest.raises(ValueError, match="become equal when cast to torch.float32"):
        vdp.simulate(x0.float(), close)
