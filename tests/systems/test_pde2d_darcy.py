"""Steady Darcy flow: manufactured solution, DST reference, batched CG, bad input."""

import math

import numpy as np
import pytest
import scipy.fft
import torch

import simsci.systems as systems
from simsci.errors import SolverError, UnknownNameError


def _darcy(**kwargs):
    kwargs.setdefault("resolution", 33)
    return systems.get("darcy", **kwargs)


def _a_smooth(x, y):
    return 1.0 + x * x + 0.5 * torch.sin(math.pi * x) * torch.cos(2 * math.pi * y)


def _u_exact(x, y):
    return torch.sin(math.pi * x) * torch.sin(2 * math.pi * y) * torch.exp(x)


def _manufactured(darcy, device):
    """(a, u, f) on the node grid with f = -div(a grad u) by automatic differentiation."""
    c = darcy.coords()
    x0 = torch.as_tensor(c["x"], device=device)
    y0 = torch.as_tensor(c["y"], device=device)
    X, Y = torch.meshgrid(x0, y0, indexing="ij")
    X = X.clone().requires_grad_()
    Y = Y.clone().requires_grad_()
    u = _u_exact(X, Y)
    ux, uy = torch.autograd.grad(u.sum(), (X, Y), create_graph=True)
    a = _a_smooth(X, Y)
    div = torch.autograd.grad((a * ux).sum(), X, retain_graph=True)[0]
    div = div + torch.autograd.grad((a * uy).sum(), Y)[0]
    return a.detach(), u.detach(), -div.detach()


def test_registered_interface():
    d = systems.get("darcy")
    assert d.kind == "field" and not d.periodic and d.pde_order == 2
    assert d.channel_names == ("a", "u") and d.state_shape == (128, 128, 2)
    assert d.methods.keys() == {"cg"} and d.params == {"beta": 1.0}
    c = d.coords()
    assert c["x"][0] == 0.0 and c["x"][-1] == 1.0 and len(c["x"]) == 128
    assert d.config()["options"]["face_average"] == "arithmetic"


@pytest.mark.parametrize("average", ["arithmetic", "harmonic"])
def test_manufactured_solution_converges_at_second_order(device, average):
    errs = []
    for n in (17, 33, 65):
        d = _darcy(resolution=n, face_average=average)
        a, u, f = _manufactured(d, device)
        state = torch.stack([a, torch.zeros_like(a)], dim=-1)[None]
        out = d.simulate(state, forcing=f, tol=1e-11)
        assert out.shape == (1, 1, n, n, 2)
        errs.append(float((out[0, 0, ..., 1] - u).abs().max()))
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert bool((np.abs(orders - 2.0) < 0.15).all()), (errs, orders)
    assert errs[-1] < 2e-3


def test_constant_coefficient_matches_the_dst_poisson_solution(device):
    # -a Lap_h u = beta with Dirichlet zeros is diagonalised by the type-I sine transform
    n0, n1, a, beta = 25, 41, 2.5, 3.0
    d = _darcy(resolution=(n0, n1), domain=(1.0, 2.0))
    state = torch.zeros((1, n0, n1, 2), dtype=torch.float64, device=device)
    state[..., 0] = a
    out = d.simulate(state, params={"beta": beta}, tol=1e-12)[0, 0, ..., 1].cpu().numpy()
    h0, h1 = d.spacing
    j = np.arange(1, n0 - 1)[:, None]
    k = np.arange(1, n1 - 1)[None, :]
    lam = (4 / h0**2) * np.sin(np.pi * j / (2 * (n0 - 1))) ** 2 + (4 / h1**2) * np.sin(
        np.pi * k / (2 * (n1 - 1))
    ) ** 2
    f_hat = scipy.fft.dstn(np.full((n0 - 2, n1 - 2), beta), type=1)
    ref = scipy.fft.idstn(f_hat / (a * lam), type=1)
    np.testing.assert_allclose(out[1:-1, 1:-1], ref, rtol=1e-9, atol=1e-12)
    assert np.all(out[0] == 0) and np.all(out[:, -1] == 0)


def test_batched_cg_meets_tolerance_per_sample(device):
    d = _darcy(resolution=33)
    x = d.sample_initial(6, generator=torch.Generator().manual_seed(0), device=device)
    assert set(torch.unique(x[..., 0]).tolist()) == {3.0, 12.0}
    assert bool((x[..., 1] == 0).all())
    p = {"beta": [1.0, 1.0, 10.0, 0.1, 1.0, 100.0]}
    out = d.simulate(x, params=p, tol=1e-9)[:, 0]
    assert bool((d.residual(out, p) <= 1e-9).all())
    # every sample stopped on its own count of iterations
    iters = d.last_iterations
    assert iters.shape == (6,) and int(iters.min()) > 0 and len(set(iters.tolist())) > 1
    torch.testing.assert_close(out[..., 0], x[..., 0], rtol=0, atol=0)
    # batching is exact: one sample alone gives the same solution
    alone = d.simulate(x[2:3], params={"beta": 10.0}, tol=1e-9)[:, 0]
    torch.testing.assert_close(out[2:3], alone, rtol=1e-7, atol=1e-12)
    # the pseudo-time drift is the residual f - A u: below tol * ||f|| at the solution
    rate = d.drift(0.0, out, d.params_tensor(p, device=device))
    f_norm = torch.tensor(p["beta"], dtype=torch.float64, device=device) * 31
    assert bool((torch.linalg.vector_norm(rate[..., 1], dim=(1, 2)) <= 1e-9 * f_norm).all())
    assert float(rate[..., 0].abs().max()) == 0.0


def test_solution_depends_linearly_on_beta(device):
    d = _darcy(resolution=17)
    x = d.sample_initial(1, generator=torch.Generator().manual_seed(1), device=device)
    u1 = d.simulate(x, params={"beta": 1.0}, tol=1e-12)[..., 1]
    u7 = d.simulate(x, params={"beta": 7.0}, tol=1e-12)[..., 1]
    torch.testing.assert_close(u7, 7 * u1, rtol=1e-9, atol=1e-14)
    assert float(u1.min()) >= 0 and float(u1.max()) > 0  # maximum principle for f > 0
    u0 = d.simulate(x, params={"beta": 0.0})[..., 1]
    assert bool((u0 == 0).all()) and int(d.last_iterations[0]) == 0


def test_harmonic_and_arithmetic_faces_agree_for_smooth_coefficients(device):
    d_a = _darcy(resolution=33, face_average="arithmetic")
    d_h = _darcy(resolution=33, face_average="harmonic")
    a, _, f = _manufactured(d_a, device)
    state = torch.stack([a, torch.zeros_like(a)], dim=-1)[None]
    ua = d_a.simulate(state, forcing=f)[..., 1]
    uh = d_h.simulate(state, forcing=f)[..., 1]
    assert 0 < float((ua - uh).abs().max()) < 1e-3


def test_float32(device):
    d = _darcy(resolution=33)
    x = d.sample_initial(2, device=device, dtype=torch.float32)
    out = d.simulate(x)
    assert out.dtype == torch.float32
    assert bool((d.residual(out[:, 0].double()) < 1e-4).all())


# ------------------------------------------------------------------- bad input
def test_negative_or_nan_coefficient_names_the_sample(device):
    d = _darcy(resolution=17)
    x = d.sample_initial(3, device=device)
    bad = x.clone()
    bad[1, 3, 3, 0] = -1.0
    with pytest.raises(ValueError, match="sample 1 has min a = -1"):
        d.simulate(bad)
    bad = x.clone()
    bad[2, 3, 3, 0] = float("nan")
    with pytest.raises(ValueError, match="sample 2"):
        d.simulate(bad)


def test_cg_iteration_limit_names_the_samples(device):
    d = _darcy(resolution=33)
    x = d.sample_initial(3, device=device)
    x[0, ..., 0] = 1.0  # a constant coefficient converges quickly; the others do not
    x[1:, ..., 0] = torch.where(x[1:, ..., 0] > 5, 1e4, 1e-2)
    with pytest.raises(SolverError, match=r"did not converge for sample 1 and 1 more") as info:
        d.simulate(x, max_iter=80)
    assert info.value.samples == [1, 2]


def test_time_axis_and_step_are_refused():
    d = _darcy(resolution=17)
    x = d.sample_initial(1)
    assert d.simulate(x, t=[0.0]).shape == (1, 1, 17, 17, 2)
    with pytest.raises(ValueError, match="steady"):
        d.simulate(x, t=[0.0, 1.0])
    with pytest.raises(ValueError, match="no time step"):
        d.simulate(x, dt=0.1)
    with pytest.raises(TypeError):
        d.simulate(x, tolerance=1e-6)


def test_grid_must_be_the_vertex_grid():
    d = _darcy(resolution=17)
    x = d.sample_initial(1)
    d.simulate(x, grid=d.coords())
    periodic = np.arange(17) / 17
    with pytest.raises(ValueError, match="equispaced nodes from 0 to 1"):
        d.simulate(x, grid={"x": periodic})


def test_bad_options_and_parameters():
    with pytest.raises(UnknownNameError, match="harmonic"):
        systems.get("darcy", face_average="harmonc")
    with pytest.raises(ValueError, match="beta"):
        systems.get("darcy", beta=float("inf"))
    d = _darcy(resolution=17)
    with pytest.raises(ValueError, match="forcing must have shape"):
        d.simulate(d.sample_initial(1), forcing=np.ones((16, 16)))
