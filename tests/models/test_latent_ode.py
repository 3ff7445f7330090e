"""The latent ODE baseline: helpers are exact, shapes and gradients hold, it learns."""

import math

import pytest
import torch

from simsci.models import MODELS, LatentODE, get
from simsci.models.latent_ode import hide_time_points, last_observation_carried


def make_batch(B=8, L=12, D=2, device="cpu", dtype=torch.float32, seed=0):
    """Damped oscillations x(t) = a e^{-0.3t}(cos 2t, sin 2t) on per-sample irregular times,
    laid out like union_collate(relative=True) output."""
    g = torch.Generator().manual_seed(seed)
    # irregular times on a 0.05 lattice of [0, 3]: each sample its own subset, so the
    # batch's union grid stays small (fast) while the per-sample grids differ
    lattice = torch.rand(B, 61, generator=g).argsort(dim=1)[:, :L]
    t = torch.sort(lattice.to(torch.float64) * 0.05, dim=1).values
    t = t - t[:, :1]
    amp = 0.5 + torch.rand(B, 1, generator=g, dtype=torch.float64)
    phase = torch.rand(B, 1, generator=g, dtype=torch.float64) * 6
    x = torch.stack(
        [
            amp * torch.exp(-0.3 * t) * torch.cos(2 * t + phase),
            amp * torch.exp(-0.3 * t) * torch.sin(2 * t + phase),
        ],
        -1,
    )[..., :D]
    t = t.to(dtype)
    grid, inverse = torch.unique(t, sorted=True, return_inverse=True)
    return {
        "t": t.to(device),
        "x": x.to(device, dtype),
        "valid": torch.ones(B, L, dtype=torch.bool, device=device),
        "grid": grid.to(device, dtype),
        "index": inverse.to(device),
    }


def test_last_observation_carried_forward_and_backward():
    x = torch.tensor([[[1.0], [2.0], [3.0], [4.0]]])
    vis = torch.tensor([[[True], [False], [True], [False]]])
    assert last_observation_carried(x, vis).flatten().tolist() == [1, 1, 3, 3]
    vis = torch.tensor([[[False], [True], [False], [False]]])
    assert last_observation_carried(x, vis).flatten().tolist() == [2, 2, 2, 2]
    vis = torch.zeros(1, 4, 1, dtype=torch.bool)
    assert torch.isnan(last_observation_carried(x, vis)).all()


def test_hidden_points_are_interior_observed_points():
    observed = torch.ones(64, 10, 3, dtype=torch.bool)
    observed[:, 7:] = False  # padding / unobserved tail
    hidden = hide_time_points(observed, 0.5, torch.Generator().manual_seed(0))
    assert not hidden[:, 0].any() and not hidden[:, 6:].any()
    assert 0.3 < hidden[:, 1:6].float().mean() < 0.7


def test_shapes_dtype_device_and_gradients(device):
    batch = make_batch(device=device)
    model = LatentODE(obs_dim=2, latent_dim=4, hidden_dim=16).to(device)
    out = model.training_step(batch)
    assert out["loss"].shape == () and torch.isfinite(out["loss"])
    out["loss"].backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in model.dynamics.parameters())
    pred = model.predict_steps(batch)
    assert pred.shape == batch["x"].shape and pred.device.type == device.type


def test_missing_channels_are_ignored():
    batch = make_batch()
    batch["mask"] = torch.rand(batch["x"].shape) < 0.5
    batch["x"] = torch.where(batch["mask"], batch["x"], math.nan)
    model = LatentODE(obs_dim=2, latent_dim=4, hidden_dim=16)
    out = model.training_step(batch)
    assert torch.isfinite(out["loss"])


# the default run: test_series_baselines.py::test_learns_interpolation_better_than_last_value
# [latent_ode] (the same model learning damped-pendulum interpolation, half the time)
@pytest.mark.slow
def test_learns_damped_oscillation_better_than_last_value():
    torch.manual_seed(0)
    model = LatentODE(obs_dim=2, latent_dim=4, hidden_dim=32, hide_fraction=0.3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    val = make_batch(B=64, seed=99)
    before = model.validation_step(val)["interp_mse"]
    for step in range(150):
        batch = make_batch(B=32, seed=step)
        loss = model.training_step(batch)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    scores = model.validation_step(val)
    assert scores["interp_mse"] < 0.25 * before
    assert scores["interp_mse"] < scores["locf_mse"]


def test_registry_and_bad_arguments():
    assert MODELS["latent_ode"] is LatentODE
    with pytest.raises(ValueError, match="did you mean 'latent_ode'"):
        get("latent_odee")
    with pytest.raises(ValueError, match="hide_fraction"):
        LatentODE(obs_dim=2, hide_fraction=1.5)
    with pytest.raises(ValueError, match="data_mean and data_std need 3"):
        LatentODE(obs_dim=3, data_mean=[0.0])
