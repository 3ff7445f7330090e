"""sdeint: moments against closed forms, fitted strong orders, per-sample grids against
separate solves on the same Brownian path, reproducibility, and input checking."""

import math

import numpy as np
import pytest
import torch
import torchsde

from simsci.errors import SolverError, UnknownNameError
from simsci.integrate import SDE_METHODS, sdeint

F64 = torch.float64


class OU:
    """Ornstein-Uhlenbeck dX = -theta X dt + sigma dW (Ito, diagonal)."""

    noise_type, sde_type = "diagonal", "ito"

    def __init__(self, theta, sigma):
        self.theta, self.sigma = theta, sigma

    def f(self, t, y):
        return -self.theta * y

    def g(self, t, y):
        return torch.full_like(y, self.sigma)


class GBM:
    """Geometric Brownian motion dY = mu Y dt + sigma Y dW (Ito, diagonal)."""

    noise_type, sde_type = "diagonal", "ito"

    def __init__(self, mu=1.0, sigma=0.8):
        self.mu, self.sigma = mu, sigma

    def f(self, t, y):
        return self.mu * y

    def g(self, t, y):
        return self.sigma * y

    def exact(self, y0, t, w):
        """y0 (B, 1), t (T,), w = W(t) - W(t0) (B, T) -> (B, T, 1)."""
        return y0[:, None, :] * torch.exp(
            (self.mu - self.sigma**2 / 2) * t[None, :, None] + self.sigma * w[..., None]
        )


def test_ornstein_uhlenbeck_mean_and_variance(device):
    theta, sigma, x0, n = 1.0, 0.8, 2.0, 4000
    t = torch.tensor([0.0, 0.5, 1.0, 2.0], dtype=F64, device=device)
    h = 1e-2
    y0 = torch.full((n, 1), x0, dtype=F64, device=device)
    out = sdeint(OU(theta, sigma), y0, t, dt=h, seed=1)[:, :, 0]
    assert out.shape == (n, 4) and out.device == y0.device
    for i, ti in enumerate(t.tolist()):
        mean = x0 * math.exp(-theta * ti)
        var = sigma**2 / (2 * theta) * (1 - math.exp(-2 * theta * ti))
        # Euler-Maruyama's own moments differ by O(h): bound that bias exactly.
        steps = round(ti / h)
        em_mean = x0 * (1 - theta * h) ** steps
        em_var = sigma**2 * h * sum((1 - theta * h) ** (2 * k) for k in range(steps))
        # Statistical tolerance: 5 standard errors of the sample mean / variance.
        se_mean = math.sqrt(var / n) if var > 0 else 0.0
        se_var = var * math.sqrt(2 / (n - 1))
        sample = out[:, i]
        assert abs(sample.mean().item() - mean) <= 5 * se_mean + abs(em_mean - mean) + 1e-12
        assert abs(sample.var().item() - var) <= 5 * se_var + abs(em_var - var) + 1e-12


def _strong_errors(method, steps, levy_area="none"):
    model, n = GBM(), 1000
    bm = torchsde.BrownianInterval(
        t0=0.0, t1=1.0, size=(n, 1), dtype=F64, entropy=7, levy_area_approximation=levy_area
    )
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)
    w = torch.cat([torch.zeros(n, 1, dtype=F64), bm(0.0, 0.5), bm(0.0, 1.0)], dim=1)
    y0 = torch.ones(n, 1, dtype=F64)
    exact = model.exact(y0, t, w)
    errs = []
    for h in steps:
        out = sdeint(model, y0, t, method=method, dt=h, bm=bm)
        errs.append((out - exact).abs().mean(dim=0).max().item())
    return np.polyfit(np.log(steps), np.log(errs), 1)[0], errs


@pytest.mark.parametrize(
    "method, order, levy_area",
    [("euler", 0.5, "none"), ("milstein", 1.0, "none"), ("srk", 1.5, "space-time")],
)
def test_strong_order_on_geometric_brownian_motion(method, order, levy_area):
    steps = [2.0**-k for k in range(3, 8)]
    slope, errs = _strong_errors(method, steps, levy_area)
    assert abs(slope - order) < 0.2, (slope, errs)
    assert SDE_METHODS[method].strong_order("diagonal") == order


class RowBM:
    """Row b of a batched Brownian motion, as a Brownian motion of batch 1."""

    def __init__(self, bm, b):
        self.bm, self.b = bm, b
        self.shape = (1, bm.shape[1])
        self.levy_area_approximation = bm.levy_area_approximation

    def __call__(self, ta, tb=None, return_U=False, return_A=False):
        out = self.bm(ta, tb, return_U=return_U, return_A=return_A)
        if isinstance(out, tuple):
            return tuple(o[self.b : self.b + 1] for o in out)
        return out[self.b : self.b + 1]


class Forced:
    """Time-dependent drift and state-dependent noise, diagonal; Ito or Stratonovich."""

    noise_type = "diagonal"

    def __init__(self, sde_type):
        self.sde_type = sde_type

    def f(self, t, y):
        return -0.5 * y + torch.sin(3 * t)

    def g(self, t, y):
        return 0.3 * torch.cos(y) + 0.1 * t


@pytest.mark.parametrize(
    "method, sde_type",
    [("euler", "ito"), ("milstein", "ito"), ("srk", "ito"), ("reversible_heun", "stratonovich")],
)
def test_per_sample_grids_match_separate_solves_on_the_same_path(method, sde_type, device):
    # Lattice times (multiples of 1/32) and dt = 1/32: each sample takes the same steps in
    # the batch as alone, driven by its own row of the same Brownian motion.
    h = 1.0 / 32
    t = (
        torch.tensor([[0, 3, 10, 32], [8, 9, 20, 40], [16, 30, 31, 64]], dtype=F64, device=device)
        * h
    )
    y0 = torch.tensor([[1.0, -0.5], [0.3, 0.2], [-1.0, 2.0]], dtype=F64, device=device)
    sde = Forced(sde_type)
    levy = SDE_METHODS[method].default_levy_area
    bm = torchsde.BrownianInterval(
        t0=0.0,
        t1=2.0,
        size=(3, 2),
        dtype=F64,
        device=device,
        entropy=3,
        levy_area_approximation=levy,
    )
    out = sdeint(sde, y0, t, method=method, dt=h, bm=bm)
    for b in range(3):
        alone = sdeint(sde, y0[b : b + 1], t[b], method=method, dt=h, bm=RowBM(bm, b))[0]
        assert (out[b] - alone).abs().max().item() < 1e-10
        assert torch.equal(out[b, 0], y0[b])
    # Querying the same Brownian motion again reproduces the solve exactly.
    assert (out[:, -1] - sdeint(sde, y0, t, method=method, dt=h, bm=bm)[:, -1]).abs().max() == 0


def test_ragged_grids_and_noise_before_start(device):
    h = 1.0 / 16
    t = [torch.tensor([0.0, 0.5, 1.0]), torch.tensor([0.75, 1.0]), torch.tensor([0.25])]
    y0 = torch.zeros(3, 1, dtype=F64, device=device)
    sde = (lambda t, y: torch.zeros_like(y), lambda t, y: torch.ones_like(y))  # y = W(t) - W(t0)
    bm = torchsde.BrownianInterval(t0=0.0, t1=1.0, size=(3, 1), dtype=F64, device=device, entropy=5)
    out = sdeint(sde, y0, t, dt=h, bm=bm, noise_type="diagonal")
    assert [o.shape for o in out] == [(3, 1), (2, 1), (1, 1)]
    # Pure noise: sample 1's value at t = 1 is exactly its increment over [0.75, 1].
    assert torch.allclose(out[1][1], bm(0.75, 1.0)[1], atol=1e-12)
    assert torch.allclose(out[0][2], bm(0.0, 1.0)[0], atol=1e-12)
    assert out[2][0].item() == 0.0


def test_seed_reproducibility(device):
    y0 = torch.ones(8, 2, dtype=F64, device=device)
    t = torch.linspace(0, 1, 5, dtype=F64, device=device)
    a = sdeint(OU(1.0, 0.5), y0, t, dt=0.05, seed=11)
    b = sdeint(OU(1.0, 0.5), y0, t, dt=0.05, seed=11)
    c = sdeint(OU(1.0, 0.5), y0, t, dt=0.05, seed=12)
    assert torch.equal(a, b)
    assert (a - c).abs().max().item() > 1e-3
    torch.manual_seed(5)
    d = sdeint(OU(1.0, 0.5), y0, t, dt=0.05)
    torch.manual_seed(5)
    e = sdeint(OU(1.0, 0.5), y0, t, dt=0.05)
    assert torch.equal(d, e)


def test_dtype_and_device_follow_y0(device):
    y0 = torch.ones(4, 3, device=device)  # float32
    out = sdeint(OU(1.0, 0.5), y0, torch.linspace(0, 1, 3, dtype=F64), dt=0.1, seed=0)
    assert out.dtype == torch.float32 and out.device == y0.device and out.shape == (4, 3, 3)


def test_default_dt_resolves_the_smallest_interval():
    # dt=None: a tenth of the smallest gap of any one sample (0.1 here) -> steps of 0.01.
    # Pure drift y' = -y with euler: y(1) = 0.99**100.
    sde = (lambda t, y: -y, lambda t, y: torch.zeros_like(y))
    t = torch.tensor([[0.0, 0.1, 1.0], [0.0, 0.5, 1.0]], dtype=F64)
    out = sdeint(sde, torch.ones(2, 1, dtype=F64), t, noise_type="diagonal", seed=0)
    assert abs(out[0, -1, 0].item() - 0.99**100) < 1e-12


@pytest.mark.parametrize("method", ["srk", "milstein"])
def test_adaptive_stepping_meets_tolerance(method, device):
    model, n = GBM(mu=0.5, sigma=0.3), 200
    bm = torchsde.BrownianInterval(
        t0=0.0, t1=1.0, size=(n, 1), dtype=F64, device=device, entropy=9,
        levy_area_approximation=SDE_METHODS[method].default_levy_area,
    )  # fmt: skip
    t = torch.tensor([0.0, 0.3, 1.0], dtype=F64, device=device)
    y0 = torch.ones(n, 1, dtype=F64, device=device)
    w = torch.cat([torch.zeros(n, 1, dtype=F64, device=device), bm(0.0, 0.3), bm(0.0, 1.0)], 1)
    errors = []
    for tol in (1e-2, 1e-4):
        out = sdeint(model, y0, t, method=method, adaptive=True, dt=0.1, rtol=tol, atol=tol, bm=bm)
        errors.append((out - model.exact(y0, t, w)).abs().max().item())
    # the tolerance bounds the local error, not the maximum over 200 paths of the global
    # one: tightening it 100x cuts that maximum 9-23x over Brownian draws (CPU entropies
    # 1-3 and 9; milstein on CUDA's draw of entropy 9: 0.18 -> 0.0100)
    assert errors[1] < errors[0] / 5 and errors[1] < 2e-2


def test_general_noise_with_euler(device):
    # dY = A dW with A (D=2, M=3) constant: Y(1) - Y(0) = A W(1).
    a = torch.tensor([[1.0, 0.5, 0.0], [0.0, -1.0, 2.0]], dtype=F64, device=device)
    sde = (lambda t, y: torch.zeros_like(y), lambda t, y: a.expand(y.shape[0], 2, 3))
    bm = torchsde.BrownianInterval(t0=0.0, t1=1.0, size=(4, 3), dtype=F64, device=device, entropy=2)
    y0 = torch.zeros(4, 2, dtype=F64, device=device)
    out = sdeint(sde, y0, torch.tensor([0.0, 1.0], dtype=F64), dt=0.1, bm=bm, noise_type="general")
    assert torch.allclose(out[:, -1], bm(0.0, 1.0) @ a.T, atol=1e-12)


@pytest.mark.parametrize(
    "method, noise_type, sde_type, match",
    [
        ("milstein", "general", "ito", r"Compatible methods: euler\."),
        (
            "srk",
            "diagonal",
            "stratonovich",
            "Compatible methods: euler_heun, heun, log_ode, midpoint, milstein, reversible_heun",
        ),
        ("euler", "diagonal", "stratonovich", "supports ito SDEs"),
        ("midpoint", "diagonal", "ito", "Compatible methods: euler, milstein, srk"),
    ],
)
def test_method_noise_incompatibility_listed_before_running(method, noise_type, sde_type, match):
    calls = []

    def f(t, y):
        calls.append(t)
        return y

    with pytest.raises(ValueError, match=match):
        sdeint(
            (f, f), torch.ones(2, 2), torch.tensor([0.0, 1.0]),
            method=method, noise_type=noise_type, sde_type=sde_type, dt=0.1,
        )  # fmt: skip
    assert calls == []


def test_adaptive_euler_with_multiplicative_noise_refused():
    with pytest.raises(
        ValueError, match="does not support adaptive stepping with diagonal noise.*srk"
    ):
        sdeint(GBM(), torch.ones(2, 1), torch.tensor([0.0, 1.0]), adaptive=True)


def test_unknown_sde_method_suggests_the_closest():
    with pytest.raises(UnknownNameError, match="did you mean 'milstein'"):
        sdeint(GBM(), torch.ones(2, 1), torch.tensor([0.0, 1.0]), method="milstien")


@pytest.mark.parametrize(
    "sde, kwargs, error, match",
    [
        ((lambda t, y: y, lambda t, y: y), {}, ValueError, "needs noise_type="),
        (object(), {}, TypeError, "must have methods f"),
        (
            (lambda t, y: y, lambda t, y: y),
            {"noise_type": "weird"},
            ValueError,
            "noise_type must be one of",
        ),
        (
            (lambda t, y: y, lambda t, y: y[..., None]),
            {"noise_type": "diagonal"},
            ValueError,
            r"must return the diffusion of shape \(B, D\)",
        ),
        (
            (lambda t, y: y, lambda t, y: y[..., None].expand(-1, -1, 2)),
            {"noise_type": "scalar"},
            ValueError,
            r"\(B, D, 1\)",
        ),
        (
            (lambda t, y: y[:, :1], lambda t, y: y),
            {"noise_type": "diagonal"},
            ValueError,
            "drift of shape",
        ),
        (GBM(), {"rtol": 1e-3}, ValueError, "only apply with adaptive=True"),
        (GBM(), {"dt": 0.0}, ValueError, "dt must be a positive"),
        (GBM(), {"seed": -1}, ValueError, "seed must be a non-negative int"),
        (GBM(), {"levy_area": "davie", "method": "euler", "seed": 1, "dt": 0.1}, None, None),
        (GBM(), {"levy_area": "none", "method": "srk"}, ValueError, "needs levy_area in"),
    ],
)
def test_bad_sde_input_rejected(sde, kwargs, error, match):
    y0, t = torch.ones(2, 3, dtype=F64), torch.tensor([0.0, 0.5], dtype=F64)
    if error is None:
        assert sdeint(sde, y0, t, **kwargs).shape == (2, 2, 3)
        return
    with pytest.raises(error, match=match):
        sdeint(sde, y0, t, **kwargs)


def test_bm_checks():
    y0, t = torch.ones(2, 3, dtype=F64), torch.tensor([0.0, 0.5], dtype=F64)
    bm = torchsde.BrownianInterval(t0=0.0, t1=1.0, size=(2, 2), dtype=F64)
    with pytest.raises(ValueError, match=r"shape \(B, M\) = \(2, 3\)"):
        sdeint(GBM(), y0, t, bm=bm)
    bm = torchsde.BrownianInterval(t0=0.0, t1=1.0, size=(2, 3), dtype=F64)
    with pytest.raises(ValueError, match="levy_area_approximation in"):
        sdeint(GBM(), y0, t, bm=bm, method="srk")
    with pytest.raises(ValueError, match="with your own bm"):
        sdeint(GBM(), y0, t, bm=bm, seed=3)


def test_sde_y0_and_time_checks():
    with pytest.raises(ValueError, match=r"needs y0 of shape \(B, D\)"):
        sdeint(GBM(), torch.ones(2, 1, 1), torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="sample 1 has t"):
        sdeint(GBM(), torch.ones(2, 1), torch.tensor([[0.0, 1.0], [1.0, 0.5]]))
    with pytest.raises(ValueError, match="y0 must be finite"):
        sdeint(GBM(), torch.tensor([[1.0], [float("inf")]]), torch.tensor([0.0, 1.0]))


def _second_blows_up(t, y):
    """Sample 1 has drift y^2 from y = 1 (infinite at t = 1); the others decay."""
    second = torch.arange(y.shape[0], device=y.device)[:, None] == 1
    return torch.where(second, y**2, -y)


def test_diverging_sde_names_the_sample(device):
    sde = (_second_blows_up, lambda t, y: 1e-3 * torch.ones_like(y))  # tiny noise on all
    t = torch.linspace(0, 2, 11, dtype=F64, device=device)
    y0 = torch.ones(3, 1, dtype=F64, device=device)
    with pytest.raises(SolverError, match=r"sample\(s\) \[1\].*smaller dt") as info:
        sdeint(sde, y0, t, dt=0.01, seed=0, noise_type="diagonal")
    assert info.value.samples == [1] and 1.0 < info.value.time <= 1.6


def test_diverging_adaptive_sde_names_the_sample(device):
    sde = (_second_blows_up, lambda t, y: 1e-3 * torch.ones_like(y))
    t = torch.linspace(0, 2, 11, dtype=F64, device=device)
    y0 = torch.ones(3, 1, dtype=F64, device=device)
    with pytest.raises(SolverError, match=r"underflow.*sample\(s\) \[1\]") as info:
        sdeint(sde, y0, t, method="srk", adaptive=True, dt=0.01, seed=0, noise_type="diagonal")
    assert info.value.samples == [1] and abs(info.value.time - 1.0) < 1e-2
