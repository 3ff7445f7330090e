"""SDEVI (linear): learns to interpolate irregular data; shapes, uncertainty, bad input."""

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


def test_sdevi_learns_to_interpolate_better_than_last_value(ou_file, tmp_path):
    torch.manual_seed(0)
    traj = data.open(ou_file)
    model = SDEVI.from_data(traj, latent_dim=4, hidden_dim=32)
    ds = data.TrajectoryDataset(traj, fields=("t", "x"), split="train")
    val = data.TrajectoryDataset(traj, fields=("t", "x"), split="val")
    config = train.TrainConfig(
        max_steps=250, epochs=1000, batch_size=16, lr=1e-2, progress=False, device="cpu"
    )
    train.Trainer(model, config, ds, None, out_dir=tmp_path, collate_fn=model.collate).fit()
    batch = model.collate([val[i] for i in range(len(val))])
    scores = model.eval().validation_step(batch)
    assert scores["interp_mse"] < 0.5 * scores["locf_mse"], scores
    mean, var = model.predict(batch, variance=True)
    assert mean.shape == batch["x"].shape and (var > 0).all()


def test_sdevi_checkpoint_round_trip_and_errors(ou_file, tmp_path):
    traj = data.open(ou_file)
    model = SDEVI.from_data(traj, latent_dim=3, hidden_dim=8)
    path = train.save_model(model, tmp_path / "s.pt")
    again = train.load_model(path)
    ds = data.TrajectoryDataset(traj, fields=("t", "x"))
    batch = model.collate([ds[0], ds[1]])
    torch.testing.assert_close(again.predict(batch), model.eval().predict(batch))
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
