"""The training loop: learning, schedules, clipping, early stopping, metrics, errors."""

import csv
import json
import math

import pytest
import torch
import trainhelp_models as hm

from simsci.errors import UnknownNameError
from simsci.train import TrainConfig, Trainer, TrainingError, evaluate, load_checkpoint


def run(model, out, train, val=None, **cfg):
    cfg.setdefault("progress", False)
    cfg.setdefault("device", "cpu")
    trainer = Trainer(model, TrainConfig(**cfg), train, val, out_dir=out)
    return trainer, trainer.fit()


def rows(out, split=None):
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if split is None or r["split"] == split]


def test_linear_regression_learns_the_weights(tmp_path, device):
    data = hm.Regression(256, noise=0.01)
    model = hm.LinearRegression()
    before = evaluate(model, data, batch_size=64, device=device)["loss"]
    _, summary = run(
        model,
        tmp_path / "r",
        data,
        hm.Regression(64, seed=1),
        epochs=15,
        lr=0.05,
        log_every=8,
        device=str(device),
    )
    after = evaluate(model, data, batch_size=64, device=device)["loss"]
    assert after < before / 1000
    torch.testing.assert_close(model.linear.weight.detach().cpu()[0], data.w, atol=0.01, rtol=0)
    assert abs(model.linear.bias.item() - data.b) < 0.01
    assert summary["steps"] == 15 * 8 and summary["epochs"] == 15
    assert summary["best_step"] == 120 and summary["stopped_early"] is False
    assert summary["best_metric"] == rows(tmp_path / "r", "val")[-1]["val_loss"]
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["steps"] == 120


def expected_lr(schedule, s, total, lr=0.1):
    if schedule == "constant":
        return lr
    if schedule == "cosine":
        return lr * (1 + math.cos(math.pi * s / total)) / 2
    if schedule == "step":  # step_every=3, gamma=0.5
        return lr * 0.5 ** (s // 3)
    warm = 4  # warmup_cosine
    if s < warm:
        return lr * (s + 1) / warm
    return lr * (1 + math.cos(math.pi * (s - warm) / (total - warm))) / 2


@pytest.mark.parametrize("schedule", ["constant", "cosine", "step", "warmup_cosine"])
def test_schedules_give_the_documented_lr_curve(tmp_path, schedule):
    extra = {"step": dict(step_every=3, step_gamma=0.5), "warmup_cosine": dict(warmup_steps=4)}
    _, summary = run(
        hm.LinearRegression(),
        tmp_path,
        hm.Regression(40),
        epochs=4,
        batch_size=8,
        lr=0.1,
        optimizer="sgd",
        schedule=schedule,
        log_every=1,
        **extra.get(schedule, {}),
    )
    lrs = [r["lr"] for r in rows(tmp_path, "train")]
    assert len(lrs) == summary["total_steps"] == 20
    want = [expected_lr(schedule, s, 20) for s in range(20)]
    assert lrs == pytest.approx(want, rel=1e-12, abs=1e-15)
    if schedule != "constant":
        assert lrs[-1] < lrs[0] or schedule == "warmup_cosine"


def test_max_steps_bounds_the_cosine_horizon(tmp_path):
    _, summary = run(
        hm.LinearRegression(),
        tmp_path,
        hm.Regression(40),
        epochs=50,
        max_steps=10,
        batch_size=8,
        lr=0.1,
        schedule="cosine",
        log_every=1,
    )
    lrs = [r["lr"] for r in rows(tmp_path, "train")]
    assert summary["steps"] == 10 and summary["epochs"] == 2
    assert lrs == pytest.approx([0.05 * (1 + math.cos(math.pi * s / 10)) for s in range(10)])


@pytest.mark.parametrize("clip", [1.0, None])
def test_grad_clip_caps_the_total_norm(tmp_path, device, clip):
    model = hm.SumLoss(n=4, scale=1000.0)  # gradient 1000 per entry: norm 2000
    run(
        model,
        tmp_path,
        torch.zeros(8, 1),
        max_steps=1,
        batch_size=8,
        optimizer="sgd",
        lr=0.1,
        grad_clip=clip,
        log_every=1,
        device=str(device),
    )
    # first SGD step: the momentum buffer is the (clipped) gradient, so w = -lr * g
    moved = model.w.detach().cpu().norm().item()
    assert moved == pytest.approx(0.1 * (clip if clip else 2000.0), rel=1e-5)
    (row,) = rows(tmp_path, "train")
    if clip:
        assert row["grad_norm"] == pytest.approx(2000.0, rel=1e-6)
    else:
        assert "grad_norm" not in row


def test_early_stopping_after_patience_and_best_checkpoint(tmp_path):
    scores = [5.0, 4.0, 3.0, 3.5, 2.95, 3.2, 3.1, 1.0, 0.5]
    model = hm.ScriptedValidation(scores)
    # min_delta=0.1: 2.95 is no real improvement on 3.0
    _, summary = run(
        model,
        tmp_path,
        torch.zeros(4, 1),
        torch.zeros(1, 1),
        epochs=100,
        batch_size=2,
        val_every=3,
        early_stopping=True,
        monitor="val_score",
        patience=3,
        min_delta=0.1,
    )
    assert summary["stopped_early"] is True
    assert summary["best_metric"] == 3.0 and summary["best_step"] == 9
    assert summary["steps"] == 18  # evaluations at 3, 6, ..., 18; three without gain
    assert [r["val_score"] for r in rows(tmp_path, "val")] == scores[:6]
    best = load_checkpoint(tmp_path / "checkpoints" / "best.pt")
    assert best["step"] == 9 and best["early_stopping"]["best"] == 3.0
    last = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert last["step"] == 18 and last["early_stopping"]["stopped"] is True
    assert last["early_stopping"]["bad_evals"] == 3


def test_mode_max_and_no_stopping_without_the_flag(tmp_path):
    model = hm.ScriptedValidation([1.0, 3.0, 2.0, 2.5, 2.0, 1.0])
    _, summary = run(
        model,
        tmp_path,
        torch.zeros(2, 1),
        torch.zeros(1, 1),
        epochs=6,
        batch_size=2,
        monitor="val_score",
        mode="max",
        patience=1,
    )
    assert summary["stopped_early"] is False and summary["steps"] == 6
    assert (summary["best_metric"], summary["best_step"]) == (3.0, 2)


def test_metrics_files_agree_and_average_the_log_window(tmp_path):
    def go(name, log_every):
        torch.manual_seed(0)
        run(
            hm.LinearRegression(),
            tmp_path / name,
            hm.Regression(40),
            hm.Regression(10, seed=1),
            epochs=2,
            batch_size=8,
            val_every=5,
            log_every=log_every,
            lr=0.05,
        )
        return tmp_path / name

    one, two = go("one", 1), go("two", 2)
    per_step = {r["step"]: r for r in rows(one, "train")}
    train2 = rows(two, "train")
    assert [r["step"] for r in train2] == [2, 4, 6, 8, 10]
    for r in train2:  # a log row holds the mean over the steps since the previous one
        for k in ("loss", "mae"):
            assert r[k] == pytest.approx((per_step[r["step"] - 1][k] + per_step[r["step"]][k]) / 2)
        assert r["lr"] == 0.05 and r["epoch"] == (r["step"] - 1) // 5
    val = rows(two, "val")
    assert [(r["step"], r["epoch"]) for r in val] == [(5, 0), (10, 1)]

    def strip(rs):
        return [{k: v for k, v in r.items() if k != "time"} for r in rs]

    assert strip(val) == strip(rows(one, "val"))  # logging cadence does not change training

    with open(two / "metrics.csv") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames
        table = list(reader)
    assert header == ["step", "epoch", "split", "lr", "time", "loss", "mae", "val_loss", "val_mae"]
    jsonl = rows(two)
    assert len(table) == len(jsonl) == 7
    for c, j in zip(table, jsonl):
        assert set(k for k, v in c.items() if v != "") == set(j)
        for k, v in j.items():
            assert (c[k] == v) if isinstance(v, str) else float(c[k]) == v


def test_validation_is_sample_weighted(tmp_path):
    data = hm.Regression(10, seed=3)
    model = hm.LinearRegression()
    got = evaluate(model, data, batch_size=4)  # batches of 4, 4, 2
    with torch.no_grad():
        err = model(data.x) - data.y
    assert got["loss"] == pytest.approx(err.pow(2).mean().item(), rel=1e-6)
    assert got["mae"] == pytest.approx(err.abs().mean().item(), rel=1e-6)


def test_evaluate_keeps_the_model_on_its_device(monkeypatch, device):
    # device=None means "where the model is", not "CUDA when available": a CPU model on a
    # CUDA machine must stay on the CPU (the caller goes on using it with CPU tensors).
    # Pretending CUDA exists makes "auto" pick it, which a CPU-only machine cannot do.
    data = hm.Regression(10, seed=3)
    model = hm.LinearRegression().to(device)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    got = evaluate(model, data, batch_size=4)
    assert all(p.device.type == device.type for p in model.parameters())
    assert math.isfinite(got["loss"])


def test_validation_does_not_disturb_training_randomness(tmp_path):
    def final(name, val_every):
        torch.manual_seed(0)
        model = hm.NoisyNet()
        run(
            model,
            tmp_path / name,
            hm.Regression(24),
            hm.Regression(8, seed=1),
            epochs=3,
            batch_size=8,
            val_every=val_every,
        )
        return model.state_dict()

    a, b = final("a", 1), final("b", 4)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_non_finite_loss_names_the_step_and_saves_nothing_bad(tmp_path):
    model = hm.NaNAt(at=4)
    named = r"non-finite loss \(nan\) at step 4 \(epoch 1, batch 2 of 2\)"
    with pytest.raises(TrainingError, match=named):
        run(
            model,
            tmp_path,
            hm.Regression(12),
            epochs=5,
            batch_size=6,
            checkpoint_every=1,
            log_every=1,
        )
    assert all(torch.isfinite(p).all() for p in model.parameters())
    last = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert last["step"] == 3
    assert all(torch.isfinite(v).all() for v in last["model_state"].values())
    assert [r["step"] for r in rows(tmp_path)] == [1, 2, 3]


def test_contract_errors(tmp_path):
    data = hm.Regression(8)
    cfg = TrainConfig(progress=False, device="cpu")
    with pytest.raises(TypeError, match="has no training_step"):
        Trainer(hm.NoTrainingStep(), cfg, data, out_dir=tmp_path / "a")
    with pytest.raises(TypeError, match="needs an init_args attribute"):
        Trainer(hm.NoInitArgs(), cfg, data, out_dir=tmp_path / "b")
    with pytest.raises(ValueError, match="dict with a scalar tensor 'loss'.*got keys \\['mse'\\]"):
        Trainer(hm.NoLoss(), cfg, data, out_dir=tmp_path / "c").fit()
    with pytest.raises(TypeError, match="must be a TrainConfig"):
        Trainer(hm.LinearRegression(), {"epochs": 1}, data, out_dir=tmp_path / "d")
    with pytest.raises(ValueError, match="early_stopping=True needs val_data"):
        Trainer(
            hm.LinearRegression(), TrainConfig(early_stopping=True), data, out_dir=tmp_path / "e"
        )
    with pytest.raises(ValueError, match="train_data is empty"):
        Trainer(hm.LinearRegression(), cfg, hm.Regression(0), out_dir=tmp_path / "f")
    with pytest.raises(UnknownNameError, match="monitored metric.*'val_los'.*val_loss"):
        run(hm.LinearRegression(), tmp_path / "g", data, data, monitor="val_los", epochs=1)


def test_refuses_to_overwrite_a_run(tmp_path):
    run(hm.LinearRegression(), tmp_path, hm.Regression(8), epochs=1)
    with pytest.raises(FileExistsError, match="already holds a run.*resume=True"):
        Trainer(hm.LinearRegression(), TrainConfig(), hm.Regression(8), out_dir=tmp_path)


def test_tensorboard_is_optional(tmp_path):
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="needs the tensorboard package.*tensorboard=False"):
            Trainer(
                hm.LinearRegression(),
                TrainConfig(tensorboard=True),
                hm.Regression(8),
                out_dir=tmp_path,
            )
        assert not tmp_path.joinpath("metrics.jsonl").exists()
    else:
        run(
            hm.LinearRegression(),
            tmp_path,
            hm.Regression(8),
            epochs=2,
            log_every=1,
            tensorboard=True,
        )
        assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_worker_processes_load_the_same_batches(tmp_path):
    def final(name, workers):
        torch.manual_seed(0)
        model = hm.LinearRegression()
        run(model, tmp_path / name, hm.Regression(24), epochs=2, batch_size=5, num_workers=workers)
        return model.state_dict()

    a, b = final("main", 0), final("workers", 2)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_deterministic_flag_is_set_for_the_run_only(tmp_path):
    seen = []

    class Probe(hm.LinearRegression):
        def training_step(self, batch):
            seen.append(torch.are_deterministic_algorithms_enabled())
            return super().training_step(batch)

    before = torch.are_deterministic_algorithms_enabled()
    with pytest.warns(UserWarning, match="defined inside a function"):
        run(Probe(), tmp_path, hm.Regression(8), epochs=1, batch_size=4, deterministic=True)
    assert seen == [True, True]
    assert torch.are_deterministic_algorithms_enabled() == before
