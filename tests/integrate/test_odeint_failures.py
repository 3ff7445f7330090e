"""odeint rejects bad input with clear messages, and reports solver failures by sample."""

import pytest
import torch

from simsci.errors import SolverError, UnknownNameError
from simsci.integrate import odeint

F64 = torch.float64


def decay(t, y):
    return -y


def blow_up_first(t, y):
    """Sample 0: y' = y^2 (from 1, infinite at t = 1); the others decay."""
    first = torch.arange(y.shape[0], device=y.device).view(-1, 1) == 0
    return torch.where(first, y**2, -y)


Y0 = torch.ones(3, 1, dtype=F64)
T = torch.linspace(0, 1, 5, dtype=F64)


def test_unknown_method_suggests_the_closest():
    with pytest.raises(UnknownNameError, match=r"did you mean 'dopri5'\?.*Valid names: .*rk4"):
        odeint(decay, Y0, T, method="dorpi5")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "dopri5", "step_size": 0.1}, "step_size is for fixed-step methods"),
        ({"method": "rk4", "rtol": 1e-3}, "rtol only apply to adaptive methods"),
        ({"method": "euler", "atol": 1e-3, "rtol": 1e-3}, "rtol and atol only apply"),
        ({"method": "rk4", "max_steps": 10}, "max_steps only applies to adaptive"),
        ({"method": "implicit_adams"}, "multistep method .* give step_size"),
        ({"method": "rk4", "step_size": -1.0}, "step_size must be a positive"),
        ({"method": "dopri5", "max_steps": 0}, "max_steps must be a positive integer"),
        ({"method": "dopri5", "rtol": -1.0}, "rtol must be a non-negative"),
    ],
)
def test_options_checked_against_the_method(kwargs, match):
    with pytest.raises(ValueError, match=match):
        odeint(decay, Y0, T, **kwargs)


def test_implicit_adams_accepts_tolerances_for_its_corrector():
    out = odeint(decay, Y0, T, method="implicit_adams", step_size=0.01, rtol=1e-10, atol=1e-12)
    assert torch.allclose(out[0, :, 0], torch.exp(-T), atol=1e-9)


def test_multistep_rejects_different_starts_and_adjoint():
    t = torch.tensor([[0.0, 1.0], [0.5, 1.0], [0.0, 1.0]], dtype=F64)
    with pytest.raises(ValueError, match="all samples must share their first time"):
        odeint(decay, Y0, t, method="explicit_adams", step_size=0.1)
    with pytest.raises(ValueError, match="adjoint=True is not supported with the multistep"):
        odeint(decay, Y0, T, method="explicit_adams", step_size=0.1, adjoint=True)


def test_multistep_allows_different_ends():
    t = torch.tensor([[0.0, 0.5], [0.0, 1.0], [0.0, 0.25]], dtype=F64)
    out = odeint(decay, Y0, t, method="explicit_adams", step_size=0.01)
    assert torch.allclose(out[:, :, 0], torch.exp(-t), atol=1e-8)


def test_non_increasing_times_name_sample_and_index():
    t = torch.tensor([[0.0, 0.5, 1.0], [0.0, 0.7, 0.7], [0.0, 0.2, 0.3]], dtype=F64)
    with pytest.raises(ValueError, match=r"sample 1 has t\[1\] = 0\.7 >= t\[2\] = 0\.7"):
        odeint(decay, Y0, t)
    with pytest.raises(ValueError, match=r"strictly increasing.*t\[0\] = 1\.0 >= t\[1\] = 0\.0"):
        odeint(decay, Y0, torch.tensor([1.0, 0.0], dtype=F64))
    ragged = [torch.tensor([0.0, 1.0]), torch.tensor([0.0]), torch.tensor([2.0, 1.0])]
    with pytest.raises(ValueError, match="sample 2 has t"):
        odeint(decay, Y0, ragged)


def test_times_merged_by_the_cast_to_float32():
    t = torch.tensor([0.0, 1.0, 1.0 + 1e-12], dtype=F64)
    with pytest.raises(ValueError, match="become equal when cast to torch.float32"):
        odeint(decay, torch.ones(2, 1), t)


def test_non_finite_y0_names_the_sample():
    y0 = torch.ones(4, 2, dtype=F64)
    y0[2, 1] = float("nan")
    with pytest.raises(ValueError, match=r"y0 must be finite.*sample\(s\) \[2\]"):
        odeint(decay, y0, T)


@pytest.mark.parametrize(
    "y0, t, error, match",
    [
        (Y0, torch.tensor([0.0, float("inf")], dtype=F64), ValueError, "t must be finite"),
        (Y0, torch.zeros(2, 3, dtype=F64), ValueError, r"per-sample grids for 2 samples.*batch"),
        (Y0, [torch.tensor([0.0, 1.0])] * 2, ValueError, "list of 2 per-sample time grids"),
        (Y0, torch.zeros(3, 2, 2), ValueError, "t must be \\(T,\\)"),
        (Y0, torch.tensor([], dtype=F64), ValueError, "at least one time point"),
        (Y0, torch.tensor([0, 1], dtype=torch.bool), TypeError, "real numbers"),
        (torch.ones(3, 1, dtype=torch.int64), T, TypeError, "float32 or float64"),
        (torch.ones(3, 1, dtype=torch.float16), T, TypeError, "float32 or float64"),
        (torch.ones(0, 1, dtype=F64), T, ValueError, "batch size B >= 1"),
        (torch.tensor(1.0, dtype=F64), T, ValueError, "batch size B >= 1"),
        ([[1.0]], T, TypeError, "must be a torch.Tensor"),
    ],
)
def test_bad_input_rejected(y0, t, error, match):
    with pytest.raises(error, match=match):
        odeint(decay, y0, t)


def test_func_returning_wrong_shape():
    with pytest.raises(ValueError, match=r"func\(t, y\) must return dy/dt with the shape"):
        odeint(lambda t, y: y[:, :1], torch.ones(2, 3, dtype=F64), T)


def test_adjoint_needs_parameters_of_a_plain_function():
    with pytest.raises(ValueError, match="adjoint=True needs the tensors to differentiate"):
        odeint(decay, Y0, T, adjoint=True)


@pytest.mark.parametrize("per_sample", [False, True])
def test_diverging_adaptive_solve_names_sample_and_time(per_sample, device):
    y0 = Y0.to(device)
    t = torch.linspace(0, 2, 9, dtype=F64, device=device)
    if per_sample:
        t = torch.stack([t, t * 0.5, t + 0.5])  # sample 0 still crosses t = 1
    with pytest.raises(SolverError, match=r"underflow.*sample\(s\) \[0\]") as info:
        odeint(blow_up_first, y0, t)
    assert info.value.samples == [0]
    assert abs(info.value.time - 1.0) < 1e-3
    assert "Fix:" in str(info.value)


@pytest.mark.parametrize("method", ["rk4", "euler", "midpoint"])
def test_diverging_fixed_step_solve_names_sample_and_time(method, device):
    t = torch.linspace(0, 2, 21, dtype=F64, device=device)
    with pytest.raises(SolverError, match=r"non-finite.*sample\(s\) \[0\].*smaller step_size") as e:
        odeint(blow_up_first, Y0.to(device), t, method=method, step_size=0.01)
    assert e.value.samples == [0]
    assert 1.0 < e.value.time <= 1.5
    # With the scan switched off the NaN/inf comes back to the caller.
    out = odeint(blow_up_first, Y0.to(device), t, method=method, step_size=0.01, check_finite=False)
    assert not torch.isfinite(out[0]).all() and torch.isfinite(out[1:]).all()


def test_max_steps_exceeded_names_the_fast_sample():
    omega = torch.tensor([[1.0], [50.0], [1.0]], dtype=F64)

    def f(t, y):
        return torch.cat([omega * y[:, 1:], -omega * y[:, :1]], dim=1)

    with pytest.raises(SolverError, match=r"max_steps=20 .* sample\(s\) \[1\]") as info:
        odeint(f, torch.ones(3, 2, dtype=F64), torch.tensor([0.0, 5.0], dtype=F64), max_steps=20)
    assert info.value.samples == [1] and 0.0 <= info.value.time < 5.0


def test_user_exceptions_pass_through_unchanged():
    def broken(t, y):
        raise KeyError("my bug")

    with pytest.raises(KeyError, match="my bug"):
        odeint(broken, Y0, T)
