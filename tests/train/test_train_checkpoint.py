"""Checkpoint contents, load_model, and the errors for files that are not checkpoints."""

import numpy as np
import pytest
import torch
import trainhelp_models as hm

import simsci
from simsci.train import (
    CheckpointError,
    TrainConfig,
    Trainer,
    load_checkpoint,
    load_model,
)


@pytest.fixture
def trained(tmp_path):
    torch.manual_seed(0)
    model = hm.LinearRegression(dim=3)
    config = TrainConfig(
        epochs=2,
        batch_size=8,
        lr=0.05,
        optimizer="adamw",
        schedule="cosine",
        progress=False,
        device="cpu",
        val_every=3,
        log_every=2,
    )
    Trainer(
        model,
        config,
        hm.Regression(20),
        hm.Regression(6, seed=1),
        out_dir=tmp_path,
        extra={"window": 24},
    ).fit()
    return model, config, tmp_path / "checkpoints"


def test_checkpoint_contents(trained):
    model, config, ckpt_dir = trained
    ck = load_checkpoint(ckpt_dir / "last.pt")
    assert ck["format_version"] == 1 and ck["kind"] == "simsci.train.checkpoint"
    assert ck["model"] == {
        "import_path": "trainhelp_models:LinearRegression",
        "init_args": {"dim": 3},
    }
    state = model.state_dict()
    assert all(torch.equal(ck["model_state"][k], state[k]) for k in state)
    assert ck["optimizer_state"]["state"][0]["step"].item() == 6
    assert ck["scheduler_state"]["last_epoch"] == 6
    assert (ck["step"], ck["epoch"], ck["epoch_position"], ck["steps_per_epoch"]) == (6, 2, 0, 3)
    assert ck["early_stopping"]["best_step"] in (3, 6) and ck["early_stopping"]["stopped"] is False
    assert ck["config"] == config.to_dict() and ck["world_size"] == 1
    assert ck["extra"] == {"window": 24}
    (rng,) = ck["rng"]
    assert set(rng) == {"python", "numpy", "torch", "cuda"}
    assert rng["numpy"]["keys"].shape == (624,) and rng["torch"].dtype == torch.uint8
    assert ck["versions"]["simsci"] == simsci.__version__
    assert ck["versions"]["torch"] == torch.__version__
    # written atomically: no temporary siblings left behind
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["best.pt", "last.pt"]
    # every value is weights_only-safe (nothing in the file can run code)
    torch.load(ckpt_dir / "best.pt", weights_only=True)


def test_load_model_round_trip(trained, device):
    model, _, ckpt_dir = trained
    loaded = load_model(ckpt_dir / "last.pt", map_location=device)
    assert type(loaded) is hm.LinearRegression and not loaded.training
    assert loaded.checkpoint_extra == {"window": 24}
    assert loaded.linear.weight.device.type == device.type
    x = torch.randn(5, 3)
    torch.testing.assert_close(loaded(x.to(device)).cpu(), model(x), rtol=0, atol=0)
    best = load_checkpoint(ckpt_dir / "best.pt")
    assert best["step"] == best["early_stopping"]["best_step"]


def test_not_a_checkpoint(tmp_path, trained):
    with pytest.raises(
        FileNotFoundError, match="no checkpoint at .*nope.pt.*checkpoints there: best.pt, last.pt"
    ):
        load_checkpoint(trained[2] / "nope.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"this is not a checkpoint at all")
    with pytest.raises(CheckpointError, match="junk.pt' is not a simsci checkpoint.*truncated"):
        load_model(junk)
    cut = tmp_path / "cut.pt"
    cut.write_bytes((trained[2] / "last.pt").read_bytes()[:5000])
    with pytest.raises(CheckpointError, match="is not a simsci checkpoint"):
        load_checkpoint(cut)
    other = tmp_path / "other.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, other)
    with pytest.raises(CheckpointError, match="holds a dict with keys \\['state_dict'\\]"):
        load_checkpoint(other)
    torch.save(torch.zeros(3), other)
    with pytest.raises(CheckpointError, match="holds a Tensor"):
        load_checkpoint(other)
    torch.save(
        {"kind": "simsci.train.checkpoint", "format_version": 1, "bad": np.random.default_rng(0)},
        other,
    )
    with pytest.raises(CheckpointError, match="weights_only=True.*Unsupported global"):
        load_checkpoint(other)


def test_newer_format_version_is_refused(tmp_path, trained):
    ck = load_checkpoint(trained[2] / "last.pt")
    ck["format_version"] = 2
    torch.save(ck, tmp_path / "future.pt")
    with pytest.raises(CheckpointError, match="format_version 2, newer than the 1.*upgrade simsci"):
        load_model(tmp_path / "future.pt")


def test_resume_checks(tmp_path, trained):
    _, config, ckpt_dir = trained
    data, val = hm.Regression(20), hm.Regression(6, seed=1)
    with pytest.raises(CheckpointError, match=r"different batch_size \(8 -> 4\)"):
        Trainer(
            hm.LinearRegression(),
            TrainConfig(**{**config.to_dict(), "batch_size": 4}),
            data,
            val,
            out_dir=tmp_path / "x",
            resume=ckpt_dir / "last.pt",
        )
    with pytest.raises(
        CheckpointError, match="holds a trainhelp_models:LinearRegression model.*NoisyNet"
    ):
        Trainer(
            hm.NoisyNet(), config, data, val, out_dir=tmp_path / "y", resume=ckpt_dir / "last.pt"
        )
    with pytest.raises(CheckpointError, match="3 steps per epoch but train_data now gives 4"):
        Trainer(
            hm.LinearRegression(),
            config,
            hm.Regression(32),
            val,
            out_dir=tmp_path / "z",
            resume=ckpt_dir / "last.pt",
        )
    with pytest.raises(FileNotFoundError, match="no such checkpoint file"):
        Trainer(hm.LinearRegression(), config, data, out_dir=tmp_path, resume=tmp_path / "a.pt")
    ck = load_checkpoint(ckpt_dir / "last.pt")
    ck["world_size"] = 2
    torch.save(ck, tmp_path / "ddp.pt")
    with pytest.raises(CheckpointError, match="run of 2 processes; resume it with the same"):
        Trainer(
            hm.LinearRegression(), config, data, out_dir=tmp_path / "w", resume=tmp_path / "ddp.pt"
        )


def test_resume_true_without_checkpoint_starts_fresh(tmp_path):
    # an attempt that died before its first checkpoint left metrics rows behind
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "split": "train", "loss": 9.0}\n{"st')
    config = TrainConfig(epochs=1, batch_size=4, log_every=1, progress=False, device="cpu")
    summary = Trainer(
        hm.LinearRegression(), config, hm.Regression(8), out_dir=tmp_path, resume=True
    ).fit()
    assert summary["resumed_from"] is None and summary["steps"] == 2
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and '"loss": 9.0' not in lines[0]


def test_save_model_round_trip_without_trainer(tmp_path):
    from simsci.models import ControlledODE
    from simsci.train import save_model

    model = ControlledODE(state_shape=(2,), action_dim=1, dt=0.1, hidden_dim=8, depth=1)
    path = save_model(model, tmp_path / "m.pt", extra={"note": "scripted"})
    again = load_model(path)
    x, u = torch.randn(4, 2, dtype=torch.float64), torch.randn(4, 1, dtype=torch.float64)
    torch.testing.assert_close(again.advance(x, u, 0.1), model.advance(x, u, 0.1))
    assert again.checkpoint_extra == {"note": "scripted"}
    with pytest.raises(TypeError, match="init_args"):
        save_model(torch.nn.Linear(2, 2), tmp_path / "linear.pt")
    with pytest.raises(FileNotFoundError):
        save_model(model, tmp_path / "missing" / "m.pt")


class _Grouped(torch.nn.Module):
    """y = a * x + b with b in its own group learning 10x faster."""

    def __init__(self):
        super().__init__()
        self.init_args = {}
        self.a = torch.nn.Parameter(torch.zeros(()))
        self.b = torch.nn.Parameter(torch.zeros(()))

    def parameter_groups(self):
        return [
            {"params": [self.a], "lr_scale": 1.0, "name": "weights"},
            {"params": [self.b], "lr_scale": 10.0, "name": "fast"},
        ]

    def training_step(self, batch):
        x, y = batch[:, 0], batch[:, 1]
        return {"loss": ((self.a * x + self.b - y) ** 2).mean()}


def test_model_parameter_groups_get_scaled_learning_rates_and_resume(tmp_path):
    from simsci.train import TrainConfig, Trainer

    data = torch.stack([torch.linspace(0, 1, 64), 2 * torch.linspace(0, 1, 64) + 1], dim=1)
    config = TrainConfig(max_steps=4, epochs=100, batch_size=16, lr=0.01, progress=False)
    trainer = Trainer(_Grouped(), config, data, None, out_dir=tmp_path / "run")
    lrs = [g["lr"] for g in trainer.optimizer.param_groups]
    assert lrs == pytest.approx([0.01, 0.1])
    trainer.fit()
    config2 = TrainConfig(max_steps=8, epochs=100, batch_size=16, lr=0.01, progress=False)
    resumed = Trainer(_Grouped(), config2, data, None, out_dir=tmp_path / "run", resume=True)
    assert [g["lr"] for g in resumed.optimizer.param_groups] == pytest.approx([0.01, 0.1])


def test_parameter_groups_must_cover_every_parameter():
    from simsci.train._optim import parameter_groups

    model = _Grouped()
    model.parameter_groups = lambda: [{"params": [model.a]}]
    with pytest.raises(ValueError, match="leaves out 1"):
        parameter_groups(model)
    model.parameter_groups = lambda: [{"params": [model.a, model.b]}, {"params": [model.a]}]
    with pytest.raises(ValueError, match="repeats"):
        parameter_groups(model)


def test_import_model_class_and_save_checkpoint_are_public(tmp_path):
    from simsci.train import import_model_class, save_checkpoint

    assert import_model_class("torch.nn:Linear") is torch.nn.Linear
    assert import_model_class("trainhelp_models:LinearRegression") is hm.LinearRegression
    with pytest.raises(CheckpointError, match="inside a function"):
        import_model_class("trainhelp_models:make.<locals>.Model")
    with pytest.raises(CheckpointError, match="has no"):
        import_model_class("torch.nn:NoSuchLayer")
    path = save_checkpoint(tmp_path / "c.pt", {"format_version": 1, "x": torch.arange(3)})
    assert path == tmp_path / "c.pt" and [p.name for p in tmp_path.iterdir()] == ["c.pt"]
    assert torch.load(path, weights_only=True)["x"].tolist() == [0, 1, 2]
