"""Every event model on the test device (CPU here; CUDA under ``make gpu-check``): a
training step, likelihood, prediction and thinning keep their tensors on the device."""

import math

import pytest
import torch

from simsci import data, datasets, models
from simsci.cli._train import make_dataset


@pytest.fixture(scope="module")
def population_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("events") / "pop.h5"
    return datasets.make_dataset("population_events", 12, out=path, seed=3)


@pytest.fixture(scope="module")
def mobility_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("events") / "mob.h5"
    return datasets.make_dataset("mobility", 8, out=path, seed=3, days=2)


@pytest.mark.parametrize("name", ["cocld", "rmtpp", "nhp", "thp", "poisson_tpp"])
@pytest.mark.parametrize("which", ["population", "mobility"])
def test_event_model_runs_on_the_device(name, which, device, population_file, mobility_file):
    if device.type == "cpu" and name in ("cocld", "thp", "nhp"):
        # the costly models learn on CPU in test_cocld / test_neural_tpp; this test is
        # about tensors staying on an accelerator (make gpu-check runs it on CUDA)
        pytest.skip("device placement of cocld/thp/nhp is checked under make gpu-check")
    path = population_file if which == "population" else mobility_file
    traj = data.open(path)
    small = {"cocld": {"latent_dim": 4, "hidden": 16, "diffusion_steps": 5}}.get(name, {})
    model = models.MODELS[name].from_data(traj, **small).to(device)
    items = make_dataset(traj, model.data_fields)  # the model's fields the file has
    batch = model.collate([items[i] for i in range(4)])
    batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
    out = model.training_step(batch)
    out["loss"].backward()
    assert out["loss"].device.type == device.type and math.isfinite(float(out["loss"].detach()))
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(g.device.type == device.type for g in grads)
    scores = models.evaluate_events(model, traj, split=None, device=device, seed=1)
    assert math.isfinite(scores["ll_per_event"]) and 0 <= scores["type_accuracy"] <= 1
    assert math.isfinite(scores["gap_w1"])
    if which == "mobility" and name != "poisson_tpp":
        assert "loc_nll" in scores and "location_jsd" in scores
    if name == "cocld":
        start = torch.tensor([0.0, 24.0], dtype=torch.float64)
        seqs = model.generate(start, start + 12.0, 1, max_events=50)
        for seq, t0 in zip(seqs, start.tolist()):
            t = torch.as_tensor(seq["t"])
            assert bool(((t > t0) & (t <= t0 + 12.0)).all())
            assert bool((t[1:] > t[:-1]).all())
