"""SDEVI (linear): checkpoints, bad input, the ELBO under its own prior."""

import numpy as np
import pytest
import torch

from simsci import data, systems, train
from simsci.models import SDEVI


@pytest.fixture(scope="module")
def ou_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sdevi") / "pendulum.h5"
    systems.generate(
        "damped_pendulum", 96, t_end=6.0, dt=0.1, keep=0.5, out=path, seed=0, progress=False
    )
    return path


# SDEVI learning to interpolate (better than the last value, near the Kalman smoother):
# tests/models/test_predict.py::test_sdevi_learns_and_its_predictions_approach_the_kalman_smoother


def test_sdevi_checkpoint_round_trip_and_errors(ou_file, tmp_path):
    traj = data.open(ou_file)
    model = SDEVI.from_data(traj, latent_dim=3, hidden_dim=8)
    path = train.save_model(model, tmp_path / "s.pt")
    again = train.load_model(path)
    ds = data.TrajectoryDataset(traj, fields=("t", "x"))
    batch = model.collate([ds[0], ds[1]])
    torch.testing.assert_close(again.predict_steps(batch), model.eval().predict_steps(batch))
    # a checkpoint from before the scaled frequencies (W stored as prior_w) loads as it was
    state = model.state_dict()
    state["prior_w"] = state.pop("prior_w_unit") * model.freq_scale
    older = SDEVI.from_data(traj, latent_dim=3, hidden_dim=8)
    older.load_state_dict(state)
    torch.testing.assert_close(older.prior()["A"], model.prior()["A"])
    # a head from before the energy features (d fewer inputs) loads with zero weights
    # for them, so it gives the old head's outputs
    kw = {"latent_dim": 3, "hidden_dim": 8, "task": "classification", "num_classes": 3}
    head_model = SDEVI(model.obs_dim, **kw, head_inputs=["ends", "average", "encoder", "energy"])
    state = head_model.state_dict()
    state["head.0.weight"] = state["head.0.weight"][:, :-3]
    loaded = SDEVI(model.obs_dim, **kw, head_inputs=["ends", "average", "encoder", "energy"])
    loaded.load_state_dict(state)
    weight = loaded.head[0].weight.detach()
    torch.testing.assert_close(weight[:, :-3], state["head.0.weight"])
    assert bool((weight[:, -3:] == 0).all())
    # exact-inference classification checkpoints from before head_inputs (init_args
    # without it: the default) read the encoder: the default model rebuilds its head
    labelled = {**batch, "label": torch.zeros(2, dtype=torch.long)}
    for legacy in (["ends", "average", "encoder"], ["ends", "average", "encoder", "energy"]):
        old = SDEVI(model.obs_dim, **kw, inference="exact", head_inputs=legacy).eval()
        loaded = SDEVI(model.obs_dim, **kw, inference="exact")
        assert loaded.head_inputs == ("average", "spread", "energy")
        loaded.load_state_dict(old.state_dict())
        assert loaded.head_inputs == tuple(legacy)
        assert loaded.init_args["head_inputs"] == legacy
        torch.testing.assert_close(
            loaded.eval().predict_label(labelled), old.predict_label(labelled)
        )
    empty = {**batch, "x": torch.full_like(batch["x"], float("nan"))}
    with pytest.raises(ValueError, match="no observed value"):
        model.training_step(empty)
    with pytest.raises(ValueError, match="time_scale"):
        SDEVI(2, time_scale=0.0)
    with pytest.raises(ValueError, match="needs a linear-Gaussian model"):
        SDEVI(2, variant="nonlinear", inference="exact")
    with pytest.raises(ValueError, match="unknown SDEVI inference"):
        SDEVI(2, inference="smoother")


@pytest.mark.parametrize("inference", ["amortised", "exact"])
def test_model_elbo_never_exceeds_the_exact_evidence_of_its_own_prior(ou_file, inference):
    """For any encoder output, the ELBO is a lower bound on log p(y) under the model's
    (linear-Gaussian) generative model, computed exactly by the Kalman filter; with
    ``inference="exact"`` q is the smoother's posterior and the bound is met."""
    from simsci.models.latent_ode import observed_mask
    from simsci.models.sdevi import kalman_log_likelihood

    torch.manual_seed(0)
    traj = data.open(ou_file)
    model = SDEVI.from_data(traj, latent_dim=3, hidden_dim=8, inference=inference).double()
    ds = data.TrajectoryDataset(traj, fields=("t", "x"), dtype=torch.float64)
    batch = model.collate([ds[i] for i in range(4)])
    observed = observed_mask(batch)
    with torch.no_grad():
        elbo = model.elbo(batch)
        prior = model.prior(torch.float64)
        s = (batch["t"] - batch["t"][:, :1]) / model.time_scale
        xn = torch.nan_to_num(model.normalise(batch["x"]))
        logp, _, _ = kalman_log_likelihood(
            xn - model.H.bias, observed, s, prior["A"], prior["b"], prior["L"],
            prior["m0"], prior["P0"], model.H.weight, model.log_r.exp().clamp_min(1e-4),
            valid=batch["valid"],
        )  # fmt: skip
    assert (elbo <= logp + 1e-6).all(), (elbo, logp)
    if inference == "exact":
        torch.testing.assert_close(elbo, logp)
        # hidden values: log p(y_visible) + E_q log p(y_hidden | z), still below log p(y)
        visible = observed & (torch.rand(observed.shape[:2]) < 0.7)[..., None]
        with torch.no_grad():
            partial = model.elbo(batch, visible)
        assert (partial <= logp + 1e-6).all() and (partial < elbo).all()
        # training hides nothing: its loss is minus the exact log evidence per value
        loss = model.train().training_step(batch)["loss"]
        torch.testing.assert_close(loss, -logp.sum() / observed.sum())


def test_noise_from_data_finds_the_noise_of_a_smooth_signal(tmp_path):
    from simsci.models.sdevi._model import noise_from_data

    rng = np.random.default_rng(0)
    episodes = []
    for _ in range(40):
        t = np.sort(rng.uniform(0, 10, 80))
        clean = np.stack([np.sin(0.7 * t), 3.0 * np.cos(0.4 * t + 1.0)], -1)
        x = clean + rng.normal(size=clean.shape) * np.array([0.1, 0.3])
        mask = rng.random(x.shape) > 0.2  # per-channel gaps
        episodes.append({"t": t, "x": np.where(mask, x, 0.0), "mask": mask})
    std = np.array([0.7, 2.2])
    estimate = np.array(noise_from_data(episodes, std))
    np.testing.assert_allclose(estimate * std**2, [0.1**2, 0.3**2], rtol=0.2)
    model = SDEVI(2, data_std=list(std), noise_init=list(estimate))
    np.testing.assert_allclose(model.log_r.exp().detach().numpy(), estimate, rtol=1e-6)
    assert model.init_args["noise_init"] == pytest.approx(list(estimate))
    with pytest.raises(ValueError, match="noise_init"):
        SDEVI(2, noise_init=[0.1, -1.0])
    # from a file: normalised by the file's statistics
    path = data.write(tmp_path / "sines.h5", episodes, kind="state", system="sines")
    traj = data.open(path)
    from_file = SDEVI.from_data(traj, noise_init="data").init_args["noise_init"]
    std = traj.stats["x"]["std"]
    np.testing.assert_allclose(np.array(from_file) * std**2, [0.1**2, 0.3**2], rtol=0.2)
    with pytest.raises(ValueError, match="'data'"):
        SDEVI.from_data(traj, noise_init="guess")
