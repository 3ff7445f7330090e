"""SDEVI (linear): checkpoints, bad input, the ELBO under its own prior."""

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
    empty = {**batch, "x": torch.full_like(batch["x"], float("nan"))}
    with pytest.raises(ValueError, match="no observed value"):
        model.training_step(empty)
    with pytest.raises(ValueError, match="time_scale"):
        SDEVI(2, time_scale=0.0)


def test_model_elbo_never_exceeds_the_exact_evidence_of_its_own_prior(ou_file):
    """For any encoder output, the ELBO is a lower bound on log p(y) under the model's
    (linear-Gaussian) generative model, computed exactly by the Kalman filter."""
    from simsci.models.latent_ode import observed_mask
    from simsci.models.sdevi import kalman_log_likelihood

    torch.manual_seed(0)
    traj = data.open(ou_file)
    model = SDEVI.from_data(traj, latent_dim=3, hidden_dim=8).double()
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
