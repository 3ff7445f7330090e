"""Per-sample time grids: one batched solve must agree with solving each sample alone.

The test ODE is time dependent, so a sample started at the wrong time (or drifting before
its start) shows: y' = -k y + sin t, exact
y(t) = (y(s) - p(s)) exp(-k (t - s)) + p(t),  p(t) = (k sin t - cos t) / (k^2 + 1).
"""

import pytest
import torch
import torchdiffeq

from simsci.integrate import _dense, odeint

F64 = torch.float64
K = torch.tensor([0.5, 2.0], dtype=F64)  # two state components with different rates


def forced(t, y):
    return -K.to(y) * y + torch.sin(t)


def forced_exact(y_start, s, t):
    """y_start (D,) at time s (scalar) -> (T, D) at times t (T,)."""
    k = K.to(y_start)
    p = lambda tt: (k * torch.sin(tt)[..., None] - torch.cos(tt)[..., None]) / (k**2 + 1)  # noqa: E731
    return (y_start - p(s)) * torch.exp(-k * (t[:, None] - s)) + p(t)


def _grids(device):
    """Three samples with different starts, ends and irregular times; (B, T)."""
    t = torch.tensor(
        [
            [0.0, 0.3, 0.35, 1.1, 2.0],
            [0.5, 0.7, 1.3, 1.31, 1.6],
            [0.25, 0.9, 1.0, 2.5, 3.0],
        ],
        dtype=F64,
        device=device,
    )
    y0 = torch.tensor([[1.0, -1.0], [0.5, 2.0], [-0.3, 0.1]], dtype=F64, device=device)
    return y0, t


def _separate(y0, t, method, **kwargs):
    """Each sample alone, through plain torchdiffeq."""
    return [
        torchdiffeq.odeint(forced, y0[b : b + 1], t[b], method=method, **kwargs)[:, 0]
        for b in range(y0.shape[0])
    ]


@pytest.mark.parametrize("method", ["dopri5", "rk4"])
def test_per_sample_grid_matches_separate_solves(method, device):
    y0, t = _grids(device)
    if method == "dopri5":
        ours = {"rtol": 1e-9, "atol": 1e-11}
        theirs = {"rtol": 1e-9, "atol": 1e-11}
        tol = 1e-8
    else:
        ours = {"step_size": 0.01}
        theirs = {"options": {"step_size": 0.01}}
        tol = 1e-9
    out = odeint(forced, y0, t, method=method, **ours)
    assert out.shape == (3, 5, 2)
    for b, alone in enumerate(_separate(y0, t, method, **theirs)):
        exact = forced_exact(y0[b], t[b, 0], t[b])
        assert (out[b] - exact).abs().max().item() < tol
        assert (out[b] - alone).abs().max().item() < tol
        assert torch.equal(out[b, 0], y0[b])  # starts exactly at its own y0


def test_shared_grid_equals_identical_rows(device):
    y0, t = _grids(device)
    shared = t[0]
    a = odeint(forced, y0, shared, rtol=1e-9, atol=1e-11)
    b = odeint(forced, y0, shared.expand(3, -1).clone(), rtol=1e-9, atol=1e-11)
    assert a.shape == b.shape == (3, 5, 2)
    assert (a - b).abs().max().item() < 1e-12


@pytest.mark.parametrize("method", ["dopri5", "rk4"])
def test_ragged_grids_return_a_list(method, device):
    y0, _ = _grids(device)
    t = [
        torch.tensor([0.0, 0.4, 1.0], dtype=F64),
        torch.tensor([0.5, 0.6, 0.8, 1.9, 2.2, 2.3], dtype=F64),
        torch.tensor([1.5], dtype=F64),  # a single time: just its initial state
    ]
    kwargs = {"step_size": 0.01} if method == "rk4" else {"rtol": 1e-9, "atol": 1e-11}
    out = odeint(forced, y0, t, method=method, **kwargs)
    assert isinstance(out, list) and [o.shape for o in out] == [(3, 2), (6, 2), (1, 2)]
    for b in range(3):
        tb = t[b].to(device)
        assert out[b].device == y0.device
        assert (out[b] - forced_exact(y0[b], tb[0], tb)).abs().max().item() < 1e-8


def test_lattice_grids_reproduce_separate_fixed_step_solves_exactly(device):
    # All times on a lattice of 1/64 and step_size 1/64: the batched solve takes exactly
    # the steps each separate solve takes, so the results agree to rounding.
    h = 1.0 / 64
    y0, _ = _grids(device)
    t = (
        torch.tensor(
            [[0, 10, 20, 64], [16, 17, 40, 50], [32, 33, 96, 128]], dtype=F64, device=device
        )
        * h
    )
    for method in ("euler", "midpoint", "rk4"):
        out = odeint(forced, y0, t, method=method, step_size=h)
        for b, alone in enumerate(_separate(y0, t, method, options={"step_size": h})):
            assert (out[b] - alone).abs().max().item() < 1e-13, method


def test_dense_path_matches_public_torchdiffeq_path(device, monkeypatch):
    y0, t = _grids(device)
    fast = odeint(forced, y0, t, rtol=1e-8, atol=1e-10)
    monkeypatch.setattr(_dense, "AVAILABLE", False)
    slow = odeint(forced, y0, t, rtol=1e-8, atol=1e-10)
    # Different bookkeeping at the sample ends (frozen per step vs jump times) changes
    # the step sequence slightly; both meet the tolerance.
    assert (fast - slow).abs().max().item() < 1e-7


@pytest.mark.parametrize("method", ["dopri5", "rk4", "euler"])
def test_sample_after_its_end_does_not_blow_up(method, device):
    # y' = y^2 from y = 1 blows up at t = 1; sample 0 only asks up to t = 0.5 while
    # sample 1 (y' = -y) runs to 3. Sample 0 must be frozen after its end.
    def f(t, y):
        return torch.where(torch.arange(2, device=y.device)[:, None] == 0, y**2, -y)

    y0 = torch.ones(2, 1, dtype=F64, device=device)
    t = torch.tensor([[0.0, 0.25, 0.5], [0.0, 1.5, 3.0]], dtype=F64, device=device)
    kwargs = {} if method == "dopri5" else {"step_size": 1e-3}
    out = odeint(f, y0, t, method=method, **kwargs)
    tol = {"dopri5": 1e-5, "rk4": 1e-9, "euler": 1e-2}[method]
    assert abs(out[0, -1, 0].item() - 2.0) < tol  # 1 / (1 - 0.5)
    assert torch.isfinite(out).all()


def test_all_samples_single_time_returns_y0(device):
    y0 = torch.randn(4, 3, dtype=F64, device=device)
    out = odeint(forced, y0, torch.tensor([0.7], dtype=F64))
    assert out.shape == (4, 1, 3) and torch.equal(out[:, 0], y0)


def test_gradient_through_per_sample_grid_reaches_each_sample(device):
    y0, t = _grids(device)
    y = y0.clone().requires_grad_(True)
    out = odeint(forced, y, t, rtol=1e-10, atol=1e-12)
    (grad,) = torch.autograd.grad(out[:, -1].sum(), y)
    # d y_b(t_bend) / d y_b(t_b0) = exp(-k (t_bend - t_b0)) per component
    span = (t[:, -1] - t[:, 0])[:, None]
    assert torch.allclose(grad, torch.exp(-K.to(device) * span), rtol=1e-7)


def test_error_control_is_per_sample_not_diluted_by_the_batch(device):
    # One fast oscillator among 63 resting samples. With a batch-wide RMS norm its error
    # would be allowed to grow ~sqrt(64) = 8x; per-sample control gives it exactly the
    # steps it would take alone.
    omega = torch.zeros(64, 1, dtype=F64, device=device)
    omega[0] = 20.0

    def f(t, y):
        return torch.cat([omega * y[:, 1:], -omega * y[:, :1]], dim=1)

    y0 = torch.ones(64, 2, dtype=F64, device=device)
    t = torch.linspace(0, 3, 7, dtype=F64, device=device)
    out = odeint(f, y0, t, rtol=1e-6, atol=1e-8)

    def f_alone(t, y):
        return torch.cat([20.0 * y[:, 1:], -20.0 * y[:, :1]], dim=1)

    alone = torchdiffeq.odeint(f_alone, y0[:1], t, rtol=1e-6, atol=1e-8)[:, 0]
    assert (out[0] - alone).abs().max().item() < 1e-12
