"""SDEVI's variants and tasks: the non-linear variant extrapolates a pendulum, ragged
batches, the per-episode heads, the MLP decoder, and bad input."""

import math

import numpy as np
import pytest
import torch

from simsci import data, systems, train
from simsci.models import SDEVI


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory):
    path = tmp_path_factory.mktemp("sdevi_var") / "pendulum.h5"
    systems.generate(
        "damped_pendulum", 96, t_end=6.0, dt=0.1, keep=0.5, out=path, seed=0, progress=False
    )
    return data.open(path)


def _fit(model, traj, steps, tmp_path, fields=("t", "x")):
    ds = data.TrajectoryDataset(traj, fields=fields, split="train")
    config = train.TrainConfig(
        max_steps=steps, epochs=10_000, batch_size=16, lr=1e-2, progress=False, device="cpu"
    )
    train.Trainer(model, config, ds, None, out_dir=tmp_path, collate_fn=model.collate).fit()
    val = data.TrajectoryDataset(traj, fields=fields, split="val")
    return model.eval().collate([val[i] for i in range(len(val))])


# ~15 s: the suite's 10-minute budget; the complex variant's extrapolation test runs by default
@pytest.mark.slow
def test_nonlinear_sdevi_extrapolates_a_pendulum(pendulum, tmp_path):
    """Observe the first half of each episode, predict the second: the linearised
    neural-drift posterior beats both trivial baselines by far."""
    torch.manual_seed(0)
    model = SDEVI.from_data(
        pendulum, latent_dim=4, hidden_dim=32, variant="nonlinear", task="extrapolation"
    )
    batch = _fit(model, pendulum, 120, tmp_path)
    scores = model.validation_step(batch)
    assert scores["extrap_mse"] < 0.25 * min(scores["locf_mse"], scores["mean_mse"]), scores
    assert 0.5 < scores["coverage95"] <= 1.0


def test_complex_sdevi_extrapolates_a_pendulum(pendulum, tmp_path):
    """Complex oscillatory modes (diagonal complex drifts, closed-form transitions)."""
    torch.manual_seed(0)
    model = SDEVI.from_data(
        pendulum, latent_dim=4, hidden_dim=32, variant="complex", task="extrapolation"
    )
    batch = _fit(model, pendulum, 200, tmp_path)
    scores = model.validation_step(batch)
    assert scores["extrap_mse"] < 0.25 * min(scores["locf_mse"], scores["mean_mse"]), scores
    mean, var = model.predict_steps(batch, variance=True)
    assert mean.dtype == batch["x"].dtype and (var > 0).all()


def test_local_linearisation_is_exact_for_a_linear_drift(pendulum):
    """With the drift MLP at zero the non-linear variant is the linear one: same ELBO
    and predictions from the same weights, for any number of sub-steps."""
    torch.manual_seed(1)
    linear = SDEVI.from_data(pendulum, latent_dim=3, hidden_dim=8).double()
    ds = data.TrajectoryDataset(pendulum, fields=("t", "x"), dtype=torch.float64)
    batch = linear.collate([ds[i] for i in range(3)])
    for substeps in (1, 3):
        nonlinear = SDEVI.from_data(
            pendulum, latent_dim=3, hidden_dim=8, variant="nonlinear", substeps=substeps
        ).double()
        nonlinear.load_state_dict(linear.state_dict(), strict=False)  # drift stays 0
        with torch.no_grad():
            torch.testing.assert_close(nonlinear.predict_steps(batch), linear.predict_steps(batch))
            # the sub-step chain has the same marginals; its KL can only be larger
            gap = nonlinear.elbo(batch) - linear.elbo(batch)
        if substeps == 1:
            torch.testing.assert_close(gap, torch.zeros_like(gap))
        else:
            assert (gap <= 1e-8).all(), gap


def test_parallel_linearisation_converges_to_the_sequential_one(pendulum):
    """The fixed-point sweeps linearise the first k sub-steps where the sequential scheme
    does after k sweeps, so with a non-trivial drift their distance to it shrinks fast
    with the sweeps and vanishes once they cover the episode; gradients flow."""
    torch.manual_seed(3)
    ds = data.TrajectoryDataset(pendulum, fields=("t", "x"), dtype=torch.float64)
    kwargs = dict(latent_dim=3, hidden_dim=8, variant="nonlinear", substeps=2)
    sequential = SDEVI.from_data(pendulum, linearisation="sequential", **kwargs).double()
    with torch.no_grad():
        sequential.drift.outer.weight.normal_(0.0, 0.5)  # a drift that is not linear
    items = [ds[0], {**ds[1], "t": ds[1]["t"][:11], "x": ds[1]["x"][:11]}]  # ragged
    batch = sequential.collate(items)
    with torch.no_grad():
        reference = sequential.elbo(batch)
    n = 2 * (batch["t"].shape[1] - 1)  # sub-steps of the longest episode
    gaps = []
    for sweeps in (1, 2, 3, n):
        model = SDEVI.from_data(pendulum, sweeps=sweeps, **kwargs).double()
        model.load_state_dict(sequential.state_dict())
        with torch.no_grad():
            gaps.append(float((model.elbo(batch) - reference).abs().max()))
    assert gaps[0] > 1e-6, gaps  # one sweep is not the sequential scheme...
    assert gaps[1] < gaps[0] / 10 and gaps[2] < gaps[1] / 10, gaps  # ...but converges to it
    assert gaps[3] < 1e-9, gaps
    model.elbo(batch).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.drift.parameters())
    assert float(model.drift.outer.weight.grad.abs().sum()) > 0


def test_bad_linearisation_settings_are_refused():
    with pytest.raises(ValueError, match="linearisation"):
        SDEVI(2, variant="nonlinear", linearisation="newton")
    with pytest.raises(ValueError, match="sweeps"):
        SDEVI(2, variant="nonlinear", sweeps=0)


def test_ragged_batches_give_the_same_result_as_one_episode_at_a_time(pendulum):
    torch.manual_seed(2)
    for variant in ("linear", "nonlinear", "complex"):
        model = SDEVI.from_data(pendulum, latent_dim=3, hidden_dim=8, variant=variant).double()
        ds = data.TrajectoryDataset(pendulum, fields=("t", "x"), dtype=torch.float64)
        items = [ds[0], ds[1]]
        items[1] = {**items[1], "t": items[1]["t"][:17], "x": items[1]["x"][:17]}
        batch = model.collate(items)
        assert not batch["valid"].all()
        with torch.no_grad():
            both = model.elbo(batch)
            alone = torch.cat([model.elbo(model.collate([it])) for it in items])
        torch.testing.assert_close(both, alone)


def _labelled(tmp_path, pendulum):
    """Two damping regimes of the pendulum as two classes (regression: the damping)."""
    path = tmp_path / "two_regimes.h5"
    systems.generate(
        "damped_pendulum",
        48,
        t_end=6.0,
        dt=0.1,
        keep=0.5,
        out=path,
        seed=3,
        params={"damping": [0.05, 0.8]},
        progress=False,
    )
    src = data.open(path)
    episodes = []
    for i in range(len(src)):
        ep = src[i]
        label = np.int64(ep["params"][2] > 0.4)  # damping, the third parameter
        episodes.append({"t": ep["t"], "x": ep["x"], "label": label, "split": ep["split"]})
    out = tmp_path / "labelled.h5"
    data.write(out, episodes, kind="state", system="damped_pendulum", stats=True)
    return data.open(out)


# the default run: the per-episode head is SeriesModel's, learnt in
# test_series_baselines.py::test_learns_to_classify_pendulum_lengths[gru_dt]; SDEVI's
# features reach it in test_regression_head_and_mlp_decoder_shapes_and_gradients
@pytest.mark.slow
def test_classification_head_tells_damping_regimes_apart(tmp_path, pendulum):
    traj = _labelled(tmp_path, pendulum)
    torch.manual_seed(4)
    model = SDEVI.from_data(traj, latent_dim=4, hidden_dim=32, task="classification")
    assert model.num_classes == 2
    batch = _fit(model, traj, 150, tmp_path / "run", fields=("t", "x", "label"))
    scores = model.validation_step(batch)
    assert scores["accuracy"] >= 0.8, scores
    assert model.predict_label(batch).shape == (len(batch["label"]), 2)


def test_regression_head_and_mlp_decoder_shapes_and_gradients(tmp_path, pendulum):
    traj = _labelled(tmp_path, pendulum)
    model = SDEVI.from_data(
        traj, latent_dim=3, hidden_dim=8, task="regression", decoder="mlp", drift_hidden=8
    )
    ds = data.TrajectoryDataset(traj, fields=("t", "x", "label"))
    batch = model.collate([ds[i] for i in range(4)])
    batch["label"] = batch["label"].float()
    out = model.training_step(batch)
    out["loss"].backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model.predict_label(batch).shape == (4, 1)
    mean, var = model.predict_steps(batch, variance=True)
    assert mean.shape == batch["x"].shape and (var > 0).all()
    path = train.save_model(model, tmp_path / "r.pt")
    torch.testing.assert_close(
        train.load_model(path).predict_label(batch), model.predict_label(batch)
    )


def test_bad_input_is_rejected_with_a_clear_message(pendulum):
    model = SDEVI.from_data(pendulum, latent_dim=3, hidden_dim=8)
    ds = data.TrajectoryDataset(pendulum, fields=("t", "x"))
    batch = model.collate([ds[0], ds[1]])
    with pytest.raises(ValueError, match="channel count"):
        model.training_step({**batch, "x": batch["x"][..., :1]})
    t = batch["t"].clone()
    t[0, 3] = t[0, 2]
    with pytest.raises(ValueError, match="duplicate"):
        model.training_step({**batch, "t": t})
    with pytest.raises(ValueError, match="no observed value"):
        model.training_step({**batch, "x": torch.full_like(batch["x"], math.nan)})
    with pytest.raises(ValueError, match="variant"):
        SDEVI(2, variant="quadratic")
    with pytest.raises(ValueError, match="classification"):
        SDEVI(2, task="classification")
    with pytest.raises(ValueError, match="label"):
        SDEVI.from_data(pendulum, task="regression")
    with pytest.raises(ValueError, match="predict_label"):
        model.predict_label(batch)


def test_an_all_masked_channel_is_ignored_not_fatal(pendulum):
    """A channel with no observed value in an episode adds nothing to the likelihood;
    the loss stays finite and its gradient too."""
    model = SDEVI.from_data(pendulum, latent_dim=3, hidden_dim=8)
    ds = data.TrajectoryDataset(pendulum, fields=("t", "x"))
    batch = model.collate([ds[0], ds[1]])
    x = batch["x"].clone()
    x[0, :, 1] = math.nan
    out = model.training_step({**batch, "x": x})
    out["loss"].backward()
    assert torch.isfinite(out["loss"])
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("variant", ["linear", "nonlinear", "complex", "linear-exact"])
def test_every_variant_runs_on_the_test_device(pendulum, device, variant):
    """Tensors follow the model's device; make gpu-check runs this on CUDA."""
    variant, _, inference = variant.partition("-")
    model = SDEVI.from_data(
        pendulum, latent_dim=3, hidden_dim=8, variant=variant, inference=inference or "amortised"
    ).to(device)
    ds = data.TrajectoryDataset(pendulum, fields=("t", "x"))
    batch = model.collate([ds[0], ds[1], ds[2]])
    batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
    out = model.training_step(batch)
    out["loss"].backward()
    assert out["loss"].device.type == device.type and torch.isfinite(out["loss"])
    mean, var = model.predict_steps(batch, variance=True)
    assert mean.device.type == device.type and torch.isfinite(var).all()
    scores = model.scores(batch)
    assert math.isfinite(float(scores["interp_mse"]))
    # predictions at asked times: a context on the device gives tensors on it
    context = {k: torch.as_tensor(v).to(device) for k, v in ds[0].items() if k in ("t", "x")}
    out = model.predict(context, torch.tensor([0.05, 1.0, 9.0]))
    assert out["mean"].device.type == device.type and torch.isfinite(out["var"]).all()


@pytest.mark.parametrize("variant", ["linear", "nonlinear", "complex"])
def test_padding_stays_finite_under_an_unstable_posterior_drift(pendulum, variant):
    """Padded intervals carry the last marginal on unchanged: an exploding posterior
    drift there must not reach the loss (inf times a zero mask is NaN)."""
    model = SDEVI.from_data(pendulum, latent_dim=4, hidden_dim=8, variant=variant)
    with torch.no_grad():
        model.to_interval.bias.fill_(3.0)  # positive drift corrections everywhere
    ds = data.TrajectoryDataset(pendulum, fields=("t", "x"))
    short = {k: (v[:4] if k in ("t", "x") else v) for k, v in ds[1].items()}
    batch = model.collate([ds[0], short])
    out = model.training_step(batch)
    out["loss"].backward()
    assert torch.isfinite(out["loss"])
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_single_point_episodes_and_hide_fraction_zero(pendulum):
    ds = data.TrajectoryDataset(pendulum, fields=("t", "x"))
    one = {k: (v[:1] if k in ("t", "x") else v) for k, v in ds[0].items()}
    for variant in ("linear", "nonlinear", "complex", "exact"):
        kind = {"variant": "linear", "inference": "exact"} if variant == "exact" else {}
        model = SDEVI.from_data(
            pendulum, latent_dim=2, hidden_dim=8, **(kind or {"variant": variant})
        )
        batch = model.collate([one, one])
        assert torch.isfinite(model.training_step(batch)["loss"])
        assert model.predict_steps(batch).shape == (2, 1, 2)
    model = SDEVI.from_data(pendulum, latent_dim=2, hidden_dim=8, hide_fraction=0.0)
    batch = model.collate([ds[0]])
    observed, visible, target = model.train().masks(batch)
    assert torch.equal(visible, observed) and not target.any()
    assert model.scores(batch)["n_target"] > 0  # scored on hidden points all the same


@pytest.mark.parametrize("variant", ["linear", "complex"])
def test_head_options_shapes_gradients_and_train_eval_behaviour(tmp_path, pendulum, variant):
    """head_inputs picks the head's parts (and its width), head_samples draws the
    posterior only in training, head_dropout drops features only in training,
    label_smoothing changes the classification loss; all round-trip a checkpoint."""
    traj = _labelled(tmp_path, pendulum)
    ds = data.TrajectoryDataset(traj, fields=("t", "x", "label"))
    kw = {"latent_dim": 2, "hidden_dim": 8, "task": "classification", "variant": variant}
    torch.manual_seed(0)
    default = SDEVI.from_data(traj, **kw)
    batch = default.collate([ds[i] for i in range(4)])
    inference = {"inference": "exact"} if variant == "linear" else {}
    torch.manual_seed(0)
    model = SDEVI.from_data(
        traj, **kw, **inference, head_inputs=["energy", "ends"], head_samples=True,
        head_dropout=0.5, label_smoothing=0.2,
    )  # fmt: skip
    assert model.head_inputs == ("ends", "energy")  # the reading order
    width = 2 * 2 * (2 if variant == "complex" else 1) + 2  # d = 2
    assert model.head[0].in_features == width
    # the defaults: regression's head as it was, classification's plus the energy, and
    # under exact inference the pooled statistics only
    assert default.head_inputs == ("ends", "average", "encoder", "energy")
    exact = SDEVI(2, latent_dim=2, task="classification", num_classes=2, inference="exact")
    assert exact.head_inputs == ("average", "spread", "energy")
    assert exact.head[0].in_features == 3 * 2
    assert SDEVI(2, task="regression", label_dim=1).head_inputs == ("ends", "average", "encoder")
    model.train()
    out = model.training_step(batch)
    assert "label_ce" in out and not torch.isclose(out["label_loss"], out["label_ce"])
    out["loss"].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.head.parameters())
    if variant == "linear":  # exact inference without "encoder": the GRUs are not run
        assert model.encoder.weight_ih_l0.grad is None
    visible = torch.ones_like(batch["x"], dtype=torch.bool)
    with torch.no_grad():
        a, b = model.features(batch, visible), model.features(batch, visible)
        assert a.shape == (4, width) and not torch.equal(a, b)  # draws and dropout
        model.head_dropout = 0.0
        a, b = model.features(batch, visible), model.features(batch, visible)
        assert not torch.equal(a, b)  # the draws alone
        model.eval()
        a, b = model.features(batch, visible), model.features(batch, visible)
        assert torch.equal(a, b) and torch.isfinite(a).all()  # the posterior's moments
    path = train.save_model(model, tmp_path / "h.pt")
    again = train.load_model(path)
    assert again.head_inputs == model.head_inputs and again.head_samples
    torch.testing.assert_close(again.predict_label(batch), model.predict_label(batch))
    with pytest.raises(ValueError, match="head_inputs"):
        SDEVI(2, task="classification", num_classes=2, head_inputs=["ends", "velocity"])
    with pytest.raises(ValueError, match="head_dropout"):
        SDEVI(2, head_dropout=1.0)
