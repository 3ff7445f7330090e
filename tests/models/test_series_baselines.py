"""SDEVI's baselines in the series harness: GRU-Δt, the latent ODE (GRU and ODE-RNN
encoders) and the torchsde latent SDE. Shapes, gradients, checkpoints, bad input, the
pieces' mathematics, and that each learns interpolation and classification."""

import json
import math

import numpy as np
import pytest
import torch

from simsci import data, systems, train
from simsci.integrate import odeint
from simsci.models import MODELS, GRUDelta, LatentODE, LatentSDE
from simsci.models._series import observed_mask

# tiny widths; the latent SDE steps at the median gap (dt_fraction=1) to stay cheap
TINY = {"latent_dim": 4, "hidden_dim": 16}
SPECS = {
    "gru_dt": (GRUDelta, {"hidden_dim": 16}),
    "latent_ode": (LatentODE, TINY),
    "latent_ode_odernn": (LatentODE, {**TINY, "encoder": "odernn", "encoder_steps": 2}),
    "latent_sde": (LatentSDE, {**TINY, "context_dim": 4, "dt_fraction": 1.0}),
}


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory):
    """48 irregular damped-pendulum episodes (half the points of a 0.1 lattice on [0, 4]),
    read once: (file, training items, held-out items)."""
    path = systems.generate(
        "damped_pendulum", 48, t_end=4.0, dt=0.1, keep=0.5,
        out=tmp_path_factory.mktemp("series") / "pendulum.h5", progress=False,
    )  # fmt: skip
    traj = data.open(path)
    items = {
        split: list(data.TrajectoryDataset(traj, fields=("t", "x"), split=split))
        for split in ("train", "val", "test")
    }
    return traj, items["train"], items["val"] + items["test"]


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """A toy classification set: pendulums of length 0.5 (class 0) and 2.0 (class 1),
    periods 1.4 s and 2.8 s, 40 episodes each."""
    folder = tmp_path_factory.mktemp("labelled")
    source = systems.generate(
        "damped_pendulum", 40, t_end=4.0, dt=0.1, keep=0.5, params={"L": [0.5, 2.0]},
        out=folder / "two_lengths.h5", progress=False,
    )  # fmt: skip
    traj = data.open(source)
    episodes = [dict(traj[i]) for i in range(len(traj))]
    for episode in episodes:
        episode["label"] = np.int64(episode["params"][1] > 1.0)
    path = data.write(folder / "labelled.h5", episodes, kind="state", system="damped_pendulum")
    traj = data.open(path)
    items = {
        split: list(data.TrajectoryDataset(traj, fields=("t", "x", "label"), split=split))
        for split in ("train", "val", "test")
    }
    return traj, items["train"], items["val"] + items["test"]


def build(name, traj, task="interpolation", **extra):
    cls, kwargs = SPECS[name]
    return cls.from_data(traj, task=task, **{**kwargs, **extra})


def fit(model, items, steps, *, batch=16, lr=1e-2, seed=0):
    """Adam on random batches of ``items``; the model is left in eval mode."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        pick = torch.randperm(len(items), generator=gen)[:batch]
        loss = model.training_step(model.collate([items[int(i)] for i in pick]))["loss"]
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
    return model.eval()


# ---------------------------------------------------------------------------- contract
@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("task", ["interpolation", "extrapolation"])
def test_predict_shapes_and_variance(pendulum, name, task):
    traj, items, _ = pendulum
    model = build(name, traj, task).eval()
    batch = model.collate(items[:6])
    mean = model.predict_steps(batch)
    assert mean.shape == batch["x"].shape and torch.isfinite(mean).all()
    mean2, var = model.predict_steps(batch, variance=True)
    assert var.shape == batch["x"].shape and bool((var > 0).all())
    assert torch.allclose(mean, mean2) or name == "latent_sde"  # sampled paths
    scores = model.validation_step(batch)
    prefix = "interp" if task == "interpolation" else "extrap"
    for key in (f"{prefix}_mse", "locf_mse", "mean_mse", "linear_mse", "nll", "coverage95", "loss"):
        assert torch.isfinite(torch.as_tensor(scores[key])), key
    assert model.features(batch, observed_mask(batch)).shape == (6, model.feature_dim)


@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("task", ["interpolation", "extrapolation", "classification"])
def test_gradients_reach_every_parameter(pendulum, labelled, name, task):
    traj, items, _ = labelled if task == "classification" else pendulum
    model = build(name, traj, task)
    out = model.training_step(model.collate(items[:8]))
    assert out["loss"].shape == () and torch.isfinite(out["loss"])
    out["loss"].backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, f"{pname} gets no gradient"
    assert (model.head is not None) == (task == "classification")


@pytest.mark.parametrize("name", SPECS)
def test_runs_on_the_device(pendulum, device, name):
    """A training step and predictions on ``device`` (cuda under make gpu-check)."""
    traj, items, _ = pendulum
    model = build(name, traj, "extrapolation").to(device)
    batch = {k: v.to(device) for k, v in model.collate(items[:4]).items()}
    model.training_step(batch)["loss"].backward()
    mean, var = model.eval().predict_steps(batch, variance=True)
    assert mean.device.type == var.device.type == device.type
    assert torch.isfinite(mean).all() and bool((var > 0).all())


@pytest.mark.parametrize("name", SPECS)
def test_checkpoint_round_trip(pendulum, tmp_path, name):
    traj, items, held = pendulum
    model = fit(build(name, traj, "extrapolation"), items, 2)
    json.dumps(model.init_args)  # a checkpoint stores plain values
    path = train.save_model(model, tmp_path / "model.pt")
    again = train.load_model(path)
    assert type(again) is type(model) and again.init_args == model.init_args
    batch = model.collate(held[:5])
    with torch.no_grad():
        for a, b in zip(
            model.predict_steps(batch, variance=True), again.predict_steps(batch, variance=True)
        ):
            assert torch.equal(a, b)


@pytest.mark.parametrize("name", SPECS)
def test_wrong_channel_count_is_an_error(pendulum, name):
    traj, items, _ = pendulum
    model = build(name, traj)
    batch = model.collate(items[:4])
    batch["x"] = torch.cat([batch["x"], batch["x"][..., :1]], -1)  # 3 channels for 2
    for call in (lambda: model.training_step(batch), lambda: model.predict_steps(batch)):
        with pytest.raises(ValueError, match="obs_dim=2"):
            call()


def test_registry_and_bad_arguments():
    assert MODELS["gru_dt"] is GRUDelta and MODELS["latent_sde"] is LatentSDE
    with pytest.raises(ValueError, match="did you mean 'odernn'"):
        LatentODE(obs_dim=2, encoder="odernnn")
    with pytest.raises(ValueError, match="did you mean 'euler'"):
        LatentSDE(obs_dim=2, method="eulerr")
    with pytest.raises(ValueError, match="dt must be finite"):
        LatentSDE(obs_dim=2, dt=-0.1)
    with pytest.raises(ValueError, match="did you mean 'extrapolation'"):
        GRUDelta(obs_dim=2, task="extrapolate")
    with pytest.raises(ValueError, match="num_classes"):
        GRUDelta(obs_dim=2, task="classification")


# ---------------------------------------------------------------------------- the latent ODE
def test_latent_ode_reads_checkpoints_from_before_the_harness(tmp_path):
    """A LatentODE checkpoint written before the refactor (old init_args, old state dict
    keys) still loads, and its default encoder is the GRU it was trained with."""
    old_args = {
        "obs_dim": 2, "latent_dim": 4, "hidden_dim": 16, "method": "rk4", "step_size": None,
        "time_scale": 1.0, "hide_fraction": 0.3, "kl_weight": 1.0,
        "data_mean": [0.0, 0.0], "data_std": [1.0, 1.0],
    }  # fmt: skip
    old_keys = {
        "data_mean", "data_std", "log_noise", "encoder.weight_ih_l0", "encoder.weight_hh_l0",
        "encoder.bias_ih_l0", "encoder.bias_hh_l0", "to_posterior.weight", "to_posterior.bias",
        "dynamics.net.0.weight", "dynamics.net.0.bias", "dynamics.net.2.weight",
        "dynamics.net.2.bias", "dynamics.net.4.weight", "dynamics.net.4.bias",
        "decoder.0.weight", "decoder.0.bias", "decoder.2.weight", "decoder.2.bias",
    }  # fmt: skip
    model = LatentODE(**old_args)
    assert set(model.state_dict()) == old_keys
    path = train.save_model(model, tmp_path / "old.pt")
    payload = torch.load(path, weights_only=True)
    payload["model"]["init_args"] = old_args
    torch.save(payload, path)
    again = train.load_model(path)
    assert again.encoder_type == "gru" and again.task == "interpolation"


def test_odernn_evolution_is_rk4_of_the_hidden_ode():
    """Between observations the ODE-RNN state follows dh/dt = f(h) over each sample's own
    gap: against a tight dopri5 solve per sample, 4 RK4 steps on gaps <= 0.3 are accurate
    to ~1e-6 (float64); a zero gap leaves h exactly unchanged."""
    torch.manual_seed(0)
    model = LatentODE(obs_dim=2, latent_dim=3, hidden_dim=8, encoder="odernn").double()
    enc = model.encoder
    h = torch.randn(5, 8, dtype=torch.float64)
    gap = torch.tensor([0.0, 0.05, 0.1, 0.2, 0.3], dtype=torch.float64)
    got = enc.evolve(h, gap)
    assert torch.equal(got[0], h[0])
    for b in range(1, 5):
        ref = odeint(
            lambda t, y: enc.field(y), h[b : b + 1], torch.stack([gap[0], gap[b]]),
            method="dopri5", rtol=1e-10, atol=1e-12,
        )[0, -1]  # fmt: skip
        assert torch.allclose(got[b], ref, atol=1e-6), (b, (got[b] - ref).abs().max())


# ---------------------------------------------------------------------------- GRU-Δt
def test_gru_dt_extrapolation_is_causal(pendulum):
    """The extrapolation GRU is causal: predictions up to a step do not change when
    anything after it changes (values or time stamps); the interpolation one reads both
    sides."""
    traj, items, _ = pendulum
    batch = GRUDelta.collate(items[:3])
    k = 7
    later = dict(batch)
    later["x"] = batch["x"].clone()
    later["x"][:, k + 1 :] += 1.0
    later["t"] = batch["t"].clone()
    later["t"][:, k + 1 :] += 0.05
    for task, causal in (("extrapolation", True), ("interpolation", False)):
        model = build("gru_dt", traj, task).eval()
        assert model.bidirectional is not causal
        with torch.no_grad():
            a, b = model.predict_steps(batch), model.predict_steps(later)
        assert torch.equal(a[:, : k + 1], b[:, : k + 1]) is causal


# ---------------------------------------------------------------------------- the latent SDE
def test_latent_sde_context_and_gate_follow_the_visible_points(pendulum):
    """The posterior's correction is on exactly while a visible observation lies ahead
    (grid point u before the episode's last visible one); with it at zero the posterior
    is the prior and the path KL vanishes."""
    traj, items, _ = pendulum
    model = build("latent_sde", traj, "extrapolation")
    batch = model.collate(items[:4])
    observed, visible, _ = model.masks(batch)
    xn = torch.nan_to_num(model.normalise(batch["x"]))
    mu, logvar, ctx, ahead = model.encode(batch, xn, visible)
    U = batch["grid"].numel()
    assert ctx.shape == (4, U, 4) and ahead.shape == (4, U)
    row = visible.any(-1)
    last = torch.where(row, batch["index"], -1).max(1).values  # grid index of last visible
    assert torch.equal(ahead, torch.arange(U)[None, :] < last[:, None])
    torch.nn.init.zeros_(model.sde.correction[-1].weight)
    torch.nn.init.zeros_(model.sde.correction[-1].bias)
    out = model.training_step(batch)
    assert out["kl_path"].abs() < 1e-7 and torch.isfinite(out["loss"])


@pytest.mark.parametrize("method", ["milstein", "srk"])
def test_latent_sde_other_torchsde_methods(pendulum, method):
    traj, items, _ = pendulum
    model = build("latent_sde", traj, method=method)
    batch = model.collate(items[:4])
    out = model.training_step(batch)
    out["loss"].backward()
    assert (
        torch.isfinite(out["loss"]) and model.eval().predict_steps(batch).shape == batch["x"].shape
    )


def test_latent_sde_predictive_spread_shrinks_with_the_diffusion(pendulum):
    """The predictive variance over sampled paths is the decoded spread plus the noise:
    with the diffusion near zero and q(z0) a point, it is the noise alone."""
    traj, items, _ = pendulum
    model = build("latent_sde", traj).eval()
    batch = model.collate(items[:3])
    with torch.no_grad():
        _, wide = model.predict_steps(batch, variance=True)
        model.sde.log_diffusion.fill_(math.log(1e-3))
        model.to_posterior.bias[4:].fill_(-10.0)
        model.to_posterior.weight[4:].zero_()
        _, narrow = model.predict_steps(batch, variance=True)
    noise = (2 * model.log_noise).exp() * model.data_std**2
    assert torch.allclose(narrow, noise.expand_as(narrow), rtol=5e-2)
    assert bool((wide >= narrow - 1e-6).all()) and wide.mean() > 1.2 * narrow.mean()


# ---------------------------------------------------------------------------- learning
# Adam steps of the default run (each test under ~10 s on one thread) and of the slow run
# (make test-all), which asks for a clearer margin. The ODE-RNN's classification (its
# encoder, one observation at a time, is the slowest piece) runs only in the slow run;
# the default run covers it with the GRU-encoder latent ODE and its interpolation.
INTERP_STEPS = {"gru_dt": 40, "latent_ode": 120, "latent_ode_odernn": 80, "latent_sde": 60}
# (steps, learning rate): the latent SDE's sampled paths make noisier gradients
CLASSIFY = {"gru_dt": (80, 1e-2), "latent_ode": (80, 1e-2), "latent_sde": (100, 5e-3)}


def interpolation_scores(pendulum, name, steps):
    traj, items, held = pendulum
    model = fit(build(name, traj, hidden_dim=32), items, steps)
    return model.validation_step(model.collate(held))


# The ODE-RNN encoder's and the latent models' classification runs are slow: the default
# run learns with the same latent ODE (GRU encoder) and the same head (gru_dt's
# classification); test_gradients_reach_every_parameter covers their wiring.
def _default_or_slow(names, slow):
    return [pytest.param(n, marks=[pytest.mark.slow] if n in slow else []) for n in names]


@pytest.mark.parametrize("name", _default_or_slow(SPECS, {"latent_ode_odernn"}))
def test_learns_interpolation_better_than_last_value(pendulum, name):
    scores = interpolation_scores(pendulum, name, INTERP_STEPS[name])
    assert scores["interp_mse"] < 0.85 * scores["locf_mse"], scores


@pytest.mark.slow
@pytest.mark.parametrize("name", SPECS)
def test_learns_interpolation_well(pendulum, name):
    scores = interpolation_scores(pendulum, name, 300)
    assert scores["interp_mse"] < 0.3 * scores["locf_mse"], scores
    assert scores["coverage95"] > 0.6, scores


def classification_scores(labelled, name, steps, lr):
    """The head's loss is one value per episode against a likelihood per observed value
    (about 40 per episode here): label_weight=30 lets it count in a short run."""
    traj, items, held = labelled
    model = build(name, traj, "classification", hidden_dim=32, label_weight=30.0)
    model = fit(model, items, steps, lr=lr)
    return model.validation_step(model.collate(held))


@pytest.mark.parametrize("name", _default_or_slow(CLASSIFY, {"latent_ode", "latent_sde"}))
def test_learns_to_classify_pendulum_lengths(labelled, name):
    scores = classification_scores(labelled, name, *CLASSIFY[name])
    assert scores["accuracy"] >= 0.75, scores  # 16 held-out episodes; chance 0.5


@pytest.mark.slow
@pytest.mark.parametrize("name", SPECS)
def test_classifies_pendulum_lengths_well(labelled, name):
    scores = classification_scores(labelled, name, 200, 5e-3)
    assert scores["accuracy"] >= 0.85, scores  # at most 2 of the 16 held-out wrong


# ---------------------------------------------------------------------------- the CLI
def test_simsci_train_series_baselines_with_a_task(pendulum, labelled, tmp_path, capsys):
    from simsci.cli import main

    for model, source, task in (("gru_dt", pendulum, "extrapolation"),
                                ("latent_sde", labelled, "classification")):  # fmt: skip
        out = tmp_path / model
        code = main([
            "train", model, "--data", str(source[0].path), "--task", task, "--out", str(out),
            "--max-steps", "2", "--batch-size", "8", "--no-progress", "--param",
            "hidden_dim=8",
        ])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        ckpt = train.load_model(out / "checkpoints" / "last.pt")
        assert ckpt.task == task and ckpt.init_args["hidden_dim"] == 8
    code = main(["train", "operator", "--data", str(pendulum[0].path), "--task", "regression"])
    assert code == 2 and "--task" in capsys.readouterr().err


def test_linear_interpolation_baseline_is_exact_on_lines_and_flat_beyond():
    """linear_mse's predictor: exact on a linear signal at irregular times between
    visible points, the nearest visible value beyond them, NaN for a channel never seen."""
    from simsci.models._series import linear_interpolation

    t = torch.tensor([[0.0, 0.3, 1.0, 1.1, 2.5, 4.0]], dtype=torch.float64)
    x = torch.stack([2.0 * t - 1.0, -t, t], dim=-1)  # (1, 6, 3)
    visible = torch.tensor([[0, 1, 0, 1, 1, 0]], dtype=torch.bool)[..., None].repeat(1, 1, 3)
    visible[..., 2] = False  # channel 2 never visible
    out = linear_interpolation(x, visible, t)
    inside = slice(1, 5)
    torch.testing.assert_close(out[0, inside, :2], x[0, inside, :2])  # exact between
    torch.testing.assert_close(out[0, 0, :2], x[0, 1, :2])  # flat before the first
    torch.testing.assert_close(out[0, 5, :2], x[0, 4, :2])  # and after the last
    assert torch.isnan(out[..., 2]).all()
