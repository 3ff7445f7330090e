"""odeint against exact solutions: every registered method, fitted convergence orders,
dtype/device handling, and gradients (backprop, adjoint, float64 gradcheck)."""

import math

import numpy as np
import pytest
import torch

from simsci.integrate import ODE_METHODS, odeint

F64 = torch.float64


def oscillator(t, y):
    """Harmonic oscillator x'' = -x as y = (x, v); exact x = x0 cos t + v0 sin t."""
    return torch.stack([y[:, 1], -y[:, 0]], dim=1)


def oscillator_exact(y0, t):
    c, s = torch.cos(t)[None, :], torch.sin(t)[None, :]
    x0, v0 = y0[:, :1], y0[:, 1:]
    return torch.stack([x0 * c + v0 * s, -x0 * s + v0 * c], dim=-1)


# Adaptive methods: (rtol, largest error allowed on the problems below; atol = rtol/100).
# The outputs between steps come from torchdiffeq's 4th-order interpolant, which for the
# lower-order pairs and for dopri8 (long steps) is much less accurate than the steps
# themselves; the bounds are ~5-10x the errors measured with torchdiffeq 0.2.5.
ADAPTIVE = {
    "dopri5": (1e-9, 1e-8),
    "dopri8": (1e-10, 3e-6),
    "bosh3": (1e-7, 3e-4),
    "adaptive_heun": (1e-5, 3e-4),
    "fehlberg2": (1e-5, 3e-2),
}


def _tolerance(name):
    info = ODE_METHODS[name]
    if info.adaptive:
        return ADAPTIVE[name][1]
    return 10.0 * 0.01**info.order  # fixed steps of 0.01: error ~ C * h**order


def _options(name):
    if ODE_METHODS[name].adaptive:
        rtol = ADAPTIVE[name][0]
        return {"rtol": rtol, "atol": rtol / 100}
    return {"step_size": 0.01}


@pytest.mark.parametrize("method", sorted(ODE_METHODS))
def test_exponential_decay_exact(method, device):
    k = torch.tensor([0.5, 1.0, 2.0], dtype=F64, device=device)
    y0 = torch.tensor([[1.0], [2.0], [-3.0]], dtype=F64, device=device)
    t = torch.linspace(0, 2, 9, dtype=F64, device=device)
    out = odeint(lambda t, y: -k[:, None] * y, y0, t, method=method, **_options(method))
    exact = y0[:, None, :] * torch.exp(-k[:, None, None] * t[None, :, None])
    assert out.shape == (3, 9, 1) and out.device == y0.device
    assert (out - exact).abs().max().item() < _tolerance(method)


@pytest.mark.parametrize("method", sorted(ODE_METHODS))
def test_harmonic_oscillator_exact(method, device):
    y0 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.3, -0.7]], dtype=F64, device=device)
    t = torch.linspace(0, 2 * math.pi, 13, dtype=F64, device=device)
    out = odeint(oscillator, y0, t, method=method, **_options(method))
    err = (out - oscillator_exact(y0, t)).abs().max().item()
    assert err < _tolerance(method) * (1 if ODE_METHODS[method].adaptive else 4)


def _fitted_order(method, steps):
    y0 = torch.tensor([[1.0, 0.0], [0.5, 0.5]], dtype=F64)
    t = torch.tensor([0.0, 1.0, 2.0], dtype=F64)
    errs = []
    for h in steps:
        out = odeint(oscillator, y0, t, method=method, step_size=h)
        errs.append((out - oscillator_exact(y0, t)).abs().max().item())
    slope = np.polyfit(np.log(steps), np.log(errs), 1)[0]
    return slope, errs


@pytest.mark.parametrize(
    "method, order",
    [("euler", 1), ("midpoint", 2), ("heun2", 2), ("heun3", 3), ("rk4", 4), ("explicit_adams", 4)],
)
def test_convergence_order_from_step_sweep(method, order):
    steps = [0.1, 0.05, 0.025, 0.0125]
    slope, errs = _fitted_order(method, steps)
    assert errs[-1] < errs[0]
    assert abs(slope - order) < 0.25, (slope, errs)
    assert ODE_METHODS[method].order == order


def test_step_size_none_steps_on_output_grid():
    # euler without step_size steps on t itself: one step per output interval.
    y0 = torch.tensor([[1.0]], dtype=F64)
    t = torch.tensor([0.0, 0.1, 0.3], dtype=F64)
    out = odeint(lambda t, y: -y, y0, t, method="euler")
    assert torch.allclose(out[0, :, 0], torch.tensor([1.0, 0.9, 0.9 * 0.8], dtype=F64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("method", ["dopri5", "rk4"])
def test_dtype_and_device_follow_y0(dtype, method, device):
    y0 = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=dtype, device=device)
    t = torch.linspace(0, 1, 5, dtype=torch.float64)  # CPU float64: moved and cast
    if method == "rk4":
        kwargs = {"step_size": 0.01}
    else:
        kwargs = {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {}
    out = odeint(oscillator, y0, t, method=method, **kwargs)
    assert out.dtype == dtype and out.device == y0.device
    exact = oscillator_exact(y0.double(), t.to(device))
    tol = 1e-5 if dtype == torch.float32 else 1e-8
    assert (out.double() - exact).abs().max().item() < tol


def test_times_seen_by_func_follow_y0(device):
    seen = []

    def f(t, y):
        seen.append((t.dtype, t.device))
        return -y

    y0 = torch.ones(2, 1, device=device)
    odeint(f, y0, torch.linspace(0, 1, 3, dtype=F64))
    # y0.device, not the fixture: a tensor on "cuda" reports "cuda:0"
    assert set(seen) == {(torch.float32, y0.device)}


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor([[-0.5, 1.0], [-1.0, -0.2]], dtype=F64))
        self.c = torch.nn.Parameter(torch.tensor([0.3, -0.1], dtype=F64))

    def forward(self, t, y):
        return y @ self.a.T + torch.sin(t) * self.c


@pytest.mark.parametrize("method", ["dopri5", "rk4"])
@pytest.mark.parametrize("per_sample", [False, True])
def test_adjoint_gradient_equals_backprop(method, per_sample, device):
    func = Linear().to(device)
    y0 = torch.tensor([[1.0, 0.0], [0.5, -0.5], [0.0, 2.0]], dtype=F64, device=device)
    if per_sample:  # different start and end times: masks and jump times in both passes
        t = torch.tensor(
            [[0.0, 0.4, 1.0, 1.5], [0.2, 0.5, 0.9, 2.0], [0.5, 0.7, 1.2, 1.7]],
            dtype=F64,
            device=device,
        )
    else:
        t = torch.linspace(0, 2, 5, dtype=F64, device=device)
    kwargs = {"step_size": 0.05} if method == "rk4" else {"rtol": 1e-10, "atol": 1e-12}
    weights = torch.randn(3, t.shape[-1], 2, dtype=F64, device=device)

    grads = []
    for adjoint in (False, True):
        y = y0.clone().requires_grad_(True)
        out = odeint(func, y, t, method=method, adjoint=adjoint, **kwargs)
        loss = (out * weights).sum()
        grads.append(torch.autograd.grad(loss, (y, func.a, func.c)))
    for g_backprop, g_adjoint in zip(*grads):
        assert torch.allclose(g_backprop, g_adjoint, rtol=1e-6, atol=1e-8)


def test_adjoint_params_explicit_for_plain_function():
    a = torch.tensor(-0.7, dtype=F64, requires_grad=True)
    y0 = torch.ones(2, 1, dtype=F64)
    t = torch.tensor([0.0, 1.0], dtype=F64)
    out = odeint(lambda t, y: a * y, y0, t, adjoint=True, adjoint_params=(a,), rtol=1e-10)
    (grad,) = torch.autograd.grad(out[:, -1].sum(), a)
    # d/da [2 exp(a)] = 2 exp(a) at t = 1
    assert abs(grad.item() - 2 * math.exp(-0.7)) < 1e-7


@pytest.mark.parametrize("method", ["rk4", "dopri5"])
def test_gradcheck_wrt_y0(method, device):
    a = torch.tensor([[-0.3, 1.0], [-1.0, -0.1]], dtype=F64, device=device)
    t = torch.tensor([[0.0, 0.5, 1.0], [0.25, 0.6, 1.0]], dtype=F64, device=device)
    # dopri5 at a tolerance far below gradcheck's finite-difference error, so the
    # y0-dependence of the step-size choice does not show.
    kwargs = {"step_size": 0.1} if method == "rk4" else {"rtol": 1e-12, "atol": 1e-12}

    def solve(y0):
        return odeint(lambda t, y: y @ a.T, y0, t, method=method, **kwargs)

    y0 = torch.tensor([[1.0, -0.5], [0.2, 0.7]], dtype=F64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(solve, (y0,), atol=1e-6)
