"""FixedStepSolver: odeint's fixed-step solve, planned once, equal to it bit for bit."""

import pytest
import torch

from simsci import systems
from simsci.integrate import FIXED_STEP_METHODS, FixedStepSolver, odeint


@pytest.mark.parametrize("method", sorted(FIXED_STEP_METHODS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_equals_odeint_bit_for_bit(method, dtype, device):
    sys_ = systems.get("lorenz63")
    gen = torch.Generator().manual_seed(0)
    y0 = sys_.sample_initial(5, generator=gen).to(device, dtype)
    p = sys_.params_tensor(5).to(device, dtype)
    push = torch.randn(5, 3, generator=gen, dtype=dtype).to(device)

    def field(t, y):
        return sys_.drift(t, y, p) + push

    # intervals split evenly (0.05 / 0.0125), unevenly (0.1 / 0.03 -> 4 steps of 0.025),
    # not at all (step_size None: the output times are the steps), and off zero
    cases = [([0.0, 0.05], 0.0125), ([0.0, 0.1], 0.03), ([0.0, 0.02], None), ([0.3, 0.37], 0.01)]
    for t, h in cases:
        t = torch.tensor(t, dtype=torch.float64)
        solver = FixedStepSolver(method, t, h, dtype=dtype, device=device)
        got = solver(field, y0)
        want = odeint(field, y0, t, method=method, step_size=h, check_finite=False)[:, -1]
        assert torch.equal(got, want), (method, dtype, t.tolist(), h)
        assert got.device == y0.device and got.dtype == dtype


def test_step_count_is_odeints_grid():
    t = torch.tensor([0.0, 0.1], dtype=torch.float64)
    assert FixedStepSolver("rk4", t, 0.03).num_steps == 4
    assert FixedStepSolver("rk4", t, 0.025).num_steps == 4  # exact division: no sliver
    assert FixedStepSolver("euler", t, None).num_steps == 1


def test_gradients_flow_like_odeint():
    y0 = torch.tensor([[1.0, 0.5]], dtype=torch.float64, requires_grad=True)
    k = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)

    def field(t, y):
        return -k * y

    t = torch.tensor([0.0, 0.2], dtype=torch.float64)
    FixedStepSolver("rk4", t, 0.05)(field, y0).sum().backward()
    g_lean = (y0.grad.clone(), k.grad.clone())
    y0.grad, k.grad = None, None
    odeint(field, y0, t, method="rk4", step_size=0.05)[:, -1].sum().backward()
    assert torch.equal(g_lean[0], y0.grad) and torch.equal(g_lean[1], k.grad)


@pytest.mark.parametrize(
    "method, t, h, match",
    [
        ("dopri5", [0.0, 1.0], 0.1, "simsci.odeint"),
        ("explicit_adams", [0.0, 1.0], 0.1, "simsci.odeint"),
        ("rk5", [0.0, 1.0], 0.1, "rk4"),
        ("rk4", [0.0, 1.0], -0.1, "positive"),
        ("rk4", [0.0, 1.0], float("nan"), "positive"),
        ("rk4", [1.0, 0.0], 0.1, "increasing"),
        ("rk4", [0.0], 0.1, "two times"),
    ],
)
def test_bad_configuration_is_refused_at_construction(method, t, h, match):
    with pytest.raises(ValueError, match=match):
        FixedStepSolver(method, torch.tensor(t, dtype=torch.float64), h)


def test_check_runs_odeints_checks_of_y0_and_the_field():
    solver = FixedStepSolver("rk4", torch.tensor([0.0, 0.1], dtype=torch.float64), 0.05)
    good = torch.zeros(2, 3, dtype=torch.float64)
    solver.check(lambda t, y: -y, good)
    with pytest.raises(ValueError, match="finite"):
        solver.check(lambda t, y: -y, torch.full((2, 3), float("nan"), dtype=torch.float64))
    with pytest.raises(ValueError, match="shape and dtype of y"):
        solver.check(lambda t, y: y[:, :2], good)
    with pytest.raises(ValueError, match="shape and dtype of y"):
        solver.check(lambda t, y: y.float(), good)
    with pytest.raises(ValueError, match="built for torch.float64"):
        solver.check(lambda t, y: -y, good.float())
