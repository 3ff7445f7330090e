"""Predictions at the times a user asks (SeriesModel.predict, simsci predict): SDEVI
against the Kalman smoother (the optimum) on linear-SDE data, the API of every series
model, bad input, the command line."""

import json

import numpy as np
import pytest
import torch

from simsci import data, models, systems, train
from simsci.cli import main
from simsci.models import SDEVI
from simsci.models.sdevi import kalman_smoother

SERIES = ("sdevi", "gru_dt", "latent_ode", "latent_sde", "linear_ode")


def _hold_out(path, out_dir, fraction=0.3, seed=0):
    """Split each episode's time points into a context file and a targets file (the first
    and last point stay in the context, so the targets are interpolation)."""
    traj = data.open(path)
    rng = np.random.default_rng(seed)
    context, targets = [], []
    for ep in traj:
        n = len(ep["t"])
        hide = np.zeros(n, bool)
        hide[1:-1] = rng.random(n - 2) < fraction
        keep = {"params": ep["params"], "split": ep["split"]}
        context.append({"t": ep["t"][~hide], "x": ep["x"][~hide], **keep})
        targets.append({"t": ep["t"][hide], "x": ep["x"][hide], **keep})
    kwargs = {"kind": "state", "system": traj.system, "meta": traj.meta}
    return (
        data.write(out_dir / "context.h5", context, **kwargs),
        data.write(out_dir / "targets.h5", targets, **kwargs),
    )


def _kalman(ctx, tgt, meta):
    """The exact posterior predictive at the targets' times: (mean, var), each (Q, 2)."""
    system = systems.get("linear_sde")
    A, b, L, m0, P0 = system.linear_form()
    H, R = system.observation_model(meta)
    t = np.union1d(np.union1d([0.0], ctx["t"]), tgt["t"])  # the prior holds at t = 0
    y = np.full((len(t), 2), np.nan)
    y[np.searchsorted(t, ctx["t"])] = ctx["x"]
    out = kalman_smoother(
        torch.tensor(y)[None], torch.isfinite(torch.tensor(y))[None], torch.tensor(t)[None],
        A, b, L, m0, P0, H, R,
    )  # fmt: skip
    rows = np.searchsorted(t, tgt["t"])
    return out["y_mean"][0, rows].numpy(), out["y_var"][0, rows].numpy()


@pytest.fixture(scope="module")
def linear(tmp_path_factory):
    """A linear-SDE file held out into context and targets, and SDEVI trained on the
    context's train split (~8 s)."""
    folder = tmp_path_factory.mktemp("predict")
    path = systems.generate(
        "linear_sde", 48, t_end=8.0, dt=0.1, keep=0.5, obs_noise=0.2, out=folder / "lin.h5",
        seed=0, progress=False,
    )  # fmt: skip
    context, targets = _hold_out(path, folder)
    torch.manual_seed(0)
    traj = data.open(context)
    model = SDEVI.from_data(traj, latent_dim=4, hidden_dim=32)
    ds = data.TrajectoryDataset(traj, fields=("t", "x"), split="train")
    config = train.TrainConfig(
        max_steps=120, epochs=1000, batch_size=16, lr=1e-2, progress=False, device="cpu"
    )
    train.Trainer(model, config, ds, None, out_dir=folder / "run", collate_fn=model.collate).fit()
    checkpoint = train.save_model(model.eval(), folder / "sdevi.pt")
    return {"context": context, "targets": targets, "model": model, "checkpoint": checkpoint}


def test_sdevi_learns_and_its_predictions_approach_the_kalman_smoother(linear):
    model, ctx, tgt = linear["model"], data.open(linear["context"]), data.open(linear["targets"])
    test = np.flatnonzero(ctx.column("split") != 0)
    preds = model.predict([ctx[i] for i in test], [tgt[i]["t"] for i in test])
    err, err_kf, err_locf, inside = [], [], [], []
    for i, pred in zip(test, preds):
        c, g = ctx[i], tgt[i]
        mean_kf, _ = _kalman(c, g, ctx.meta)
        err.append((pred["mean"] - g["x"]) ** 2)
        err_kf.append((mean_kf - g["x"]) ** 2)
        err_locf.append((c["x"][np.searchsorted(c["t"], g["t"]) - 1] - g["x"]) ** 2)
        inside.append((pred["mean"] - g["x"]) ** 2 / pred["var"] < 1.96**2)
    mse, mse_kf, mse_locf = (np.concatenate(e).mean() for e in (err, err_kf, err_locf))
    # the smoother is the optimum; SDEVI must learn to beat the last value and come near
    # it (measured: 2.0x the smoother's error, LOCF 6.9x, coverage 0.90, after 120 steps)
    assert mse_kf < mse < 0.6 * mse_locf, (mse, mse_kf, mse_locf)
    assert mse < 4.0 * mse_kf, (mse, mse_kf)
    assert 0.8 <= np.concatenate(inside).mean() <= 1.0
    # a dense grid asked with two times leaves their predictions as they were (the
    # encoder reads every row, so a grid inside one episode moved them by ~2 stds)
    ep, two = ctx[int(test[0])], tgt[int(test[0])]["t"][:2]
    dense = model.predict(ep, np.r_[two, np.linspace(0.0, 8.0, 101) + 0.013])
    np.testing.assert_allclose(dense["mean"][:2], model.predict(ep, two)["mean"], atol=1e-5)
    # the harness's own score agrees: interpolation beats the last value
    val = data.TrajectoryDataset(ctx, fields=("t", "x"), split="val")
    scores = model.validation_step(model.collate([val[i] for i in range(len(val))]))
    assert scores["interp_mse"] < 0.6 * scores["locf_mse"], scores


@pytest.mark.parametrize("name", SERIES)
def test_predict_at_any_times_for_every_series_model(name, linear):
    traj = data.open(linear["context"])
    torch.manual_seed(0)
    model = models.entry(name).cls.from_data(traj).eval()
    ep = traj[0]
    # the context's own times: the batch prediction of the context alone
    own = model.predict(ep)
    batch = model.collate([{"t": torch.as_tensor(ep["t"]), "x": torch.as_tensor(ep["x"])}])
    with torch.no_grad():
        mean, var = model.predict_steps(batch, variance=True)
    np.testing.assert_allclose(own["mean"], mean[0].numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(own["var"], var[0].numpy(), rtol=1e-6, atol=1e-6)
    # before, between and after the observations, in the user's order, repeats kept
    times = [ep["t"][-1] + 1.0, -0.5, 0.5 * (ep["t"][2] + ep["t"][3]), -0.5]
    out = model.predict(ep, times)
    assert isinstance(out["mean"], np.ndarray) and out["mean"].shape == (4, 2)
    np.testing.assert_array_equal(out["t"], times)
    np.testing.assert_array_equal(out["mean"][1], out["mean"][3])
    assert np.isfinite(out["mean"]).all() and (out["var"] > 0).all()
    # what else is asked changes nothing (each query is answered on its own)
    grid = np.linspace(-1.0, 9.0, 51) + 0.013
    if name != "latent_sde":  # sampled paths, as below
        many = model.predict(ep, [*times, *grid])
        np.testing.assert_allclose(many["mean"][:4], out["mean"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(many["var"][:4], out["var"], rtol=1e-5, atol=1e-5)
    assert model.predict(ep, [])["mean"].shape == (0, 2)
    # a list of episodes, one list of times each; tensors in, tensors out
    both = model.predict([traj[0], traj[1]], [times, [0.25]])
    if name != "latent_sde":  # its mean is over sampled paths, whose draws follow the batch
        np.testing.assert_allclose(both[0]["mean"], out["mean"], rtol=1e-5, atol=1e-6)
    assert both[1]["mean"].shape == (1, 2)
    as_tensors = {k: torch.as_tensor(v) for k, v in ep.items()}
    t_out = model.predict(as_tensors, torch.tensor(times))
    assert isinstance(t_out["mean"], torch.Tensor) and t_out["mean"].dtype == torch.float64
    np.testing.assert_allclose(t_out["mean"].numpy(), out["mean"], rtol=1e-6)
    # the batch spelling of before still works, and says what it is now
    with pytest.warns(DeprecationWarning, match="predict_steps"):
        old = model.predict(batch, None, variance=False)
    torch.testing.assert_close(old, mean)


def test_bad_context_and_times_are_refused(linear):
    model = linear["model"]
    ep = data.open(linear["context"])[0]
    t, x = ep["t"], ep["x"]
    cases = [
        ({"t": t}, None, "needs 'x'"),
        ({"t": t, "x": x[:, :1]}, None, r"shape \(len\(t\), 2\)"),
        ({"t": t[::-1], "x": x}, None, "increase strictly"),
        ({"t": t, "x": np.full_like(x, np.nan)}, None, "no observed value"),
        ({"t": t, "x": np.where(x > 0, np.inf, x)}, None, "inf"),
        ({"t": t, "x": x}, [0.5, np.nan], "non-finite"),
        ({"t": t, "x": x}, [[0.5, 1.0]], "1-D"),
        ({"t": t, "x": x, "mask": np.ones(3, bool)}, None, "mask must have the shape"),
    ]
    for context, times, match in cases:
        with pytest.raises(ValueError, match=match):
            model.predict(context, times)
    with pytest.raises(ValueError, match="2 lists for 3 context episodes"):
        model.predict([ep, ep, ep], [[0.5], [1.0]])
    with pytest.raises(TypeError, match="item 1 is a str"):
        model.predict([ep, "x"])
    # a series model written before the rename (predict, no predict_steps) is told why
    with pytest.raises(NotImplementedError, match="must implement predict_steps"):
        models.SeriesModel(2).predict_steps({})


def test_cli_predict_writes_means_and_variances_and_scores_the_at_file(linear, tmp_path, capsys):
    ckpt, ctx_path, tgt_path = linear["checkpoint"], linear["context"], linear["targets"]
    out = tmp_path / "pred.h5"
    argv = ["predict", str(ckpt), "--context", str(ctx_path), "--device", "cpu"]
    assert main([*argv, "--at", str(tgt_path), "--split", "test", "--out", str(out)]) == 0
    scores = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    pred, ctx, tgt = data.open(out), data.open(ctx_path), data.open(tgt_path)
    assert data.check_file(out) == []
    test = np.flatnonzero(ctx.column("split") == 2)
    np.testing.assert_array_equal(pred.column("context_episode"), test)
    assert set(pred.step_fields) == {"t", "x", "x_var"} and pred.meta["predicted_by"]["at"]
    first = linear["model"].predict(ctx[int(test[0])], tgt[int(test[0])]["t"])
    np.testing.assert_allclose(pred[0]["x"], first["mean"], atol=1e-5)  # float32, other batch
    np.testing.assert_allclose(pred[0]["x_var"], first["var"], atol=1e-5)
    err = np.concatenate([(p["x"] - tgt[int(i)]["x"]).ravel() for p, i in zip(pred, test)])
    assert scores["n_values"] == err.size
    assert scores["mse"] == pytest.approx(float((err**2).mean()), rel=1e-6)
    assert 0.8 <= scores["coverage95"] <= 1.0
    # a grid for every episode
    grid = tmp_path / "grid.h5"
    assert main([*argv, "--times", "0:8:17,8.5", "--out", str(grid)]) == 0
    on_grid = data.open(grid)
    assert len(on_grid) == len(ctx) and on_grid[3]["t"].tolist() == [*np.linspace(0, 8, 17), 8.5]


def test_cli_predict_refuses_what_it_cannot_serve(linear, tmp_path, capsys):
    ckpt, ctx_path = str(linear["checkpoint"]), str(linear["context"])
    out = str(tmp_path / "p.h5")
    two = data.write(
        tmp_path / "two.h5", [{"t": np.array([0.5])}] * 2, kind="state", system="times"
    )  # no split field: its episodes pair with the selected context episodes
    n_test = int((data.open(ctx_path).column("split") == 2).sum())
    cases = [
        (["--times", "0:1"], "START:STOP:NUM"),
        (["--times", "a,b"], "not a number"),
        (
            ["--at", str(two), "--split", "test"],
            f"holds 2 episodes and --context {ctx_path} {n_test}",
        ),
    ]
    for extra, match in cases:
        argv = ["predict", ckpt, "--context", ctx_path, *extra, "--out", out]
        assert main(argv) == 2
        assert match in capsys.readouterr().err
    other = models.entry("gfg").cls(state_dim=3, hidden_dim=8)
    other = train.save_model(other, tmp_path / "gfg.pt")
    assert main(["predict", str(other), "--context", ctx_path, "--times", "1", "--out", out]) == 2
    assert "serves the series models" in capsys.readouterr().err


# the default run guards the exact posterior itself (test_sdevi_model.py: the ELBO equals
# the Kalman evidence, training hides nothing); this trains it near the optimum (~60 s)
@pytest.mark.slow
def test_exact_inference_learns_to_predict_as_the_kalman_smoother(linear, tmp_path):
    ctx, tgt = data.open(linear["context"]), data.open(linear["targets"])
    torch.manual_seed(0)
    model = SDEVI.from_data(ctx, latent_dim=2, inference="exact", noise_init="data")
    ds = data.TrajectoryDataset(ctx, fields=("t", "x"), split="train")
    config = train.TrainConfig(
        max_steps=300, epochs=1000, batch_size=16, lr=1e-2, progress=False, device="cpu"
    )
    train.Trainer(model, config, ds, None, out_dir=tmp_path, collate_fn=model.collate).fit()
    test = np.flatnonzero(ctx.column("split") != 0)
    preds = model.eval().predict([ctx[i] for i in test], [tgt[i]["t"] for i in test])
    err, err_kf = [], []
    for i, pred in zip(test, preds):
        mean_kf, _ = _kalman(ctx[i], tgt[i], ctx.meta)
        err.append((pred["mean"] - tgt[i]["x"]) ** 2)
        err_kf.append((mean_kf - tgt[i]["x"]) ** 2)
    mse, mse_kf = np.concatenate(err).mean(), np.concatenate(err_kf).mean()
    assert mse < 1.3 * mse_kf, (mse, mse_kf)
