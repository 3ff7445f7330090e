"""`simsci train` dispatches through the model registry for every model: the help lists
the registry (DynaDiff and VectorWorld included), a toy model registered by a test
trains from the command line, each entry receives the same request, and DynaDiff's and
VectorWorld's entries turn it into their own training (`simsci dynadiff train` too)."""

import json
from pathlib import Path

import pytest
import torch

from simsci import models, systems
from simsci.cli import main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


class Toy(torch.nn.Module):
    """A one-step linear predictor of ``x``: the smallest model of the training contract."""

    data_fields = ("t", "x")

    def __init__(self, dim: int, scale: float = 1.0):
        super().__init__()
        self.init_args = {"dim": int(dim), "scale": float(scale)}
        self.lin = torch.nn.Linear(dim, dim)

    @classmethod
    def from_data(cls, traj, *, window=None, **overrides):
        return cls(traj.step_fields["x"].shape[0], **overrides)

    @staticmethod
    def collate(batch):
        return {"x": torch.stack([torch.as_tensor(b["x"], dtype=torch.float32) for b in batch])}

    def training_step(self, batch):
        x = batch["x"]
        return {"loss": ((self.init_args["scale"] * self.lin(x[:, :-1]) - x[:, 1:]) ** 2).mean()}


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry that a test may add to."""
    monkeypatch.setattr(models, "REGISTRY", dict(models.REGISTRY))
    return models.REGISTRY


def test_help_lists_every_registered_model(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in models.REGISTRY:
        assert f"\n  {name} " in out, name
    assert "zoo=ZOO.pt" in out and "VectorWorld" in out and "DynaDiff" in out


def test_unknown_model_is_one_line_with_the_valid_names(capsys):
    code, _, err = run(capsys, "train", "dynadif", "--data", "x.h5")
    assert code == 2 and "did you mean 'dynadiff'" in err and "vectorworld" in err
    assert len(err.strip().splitlines()) == 1


def test_a_registered_toy_model_trains_from_the_cli(tmp_path, capsys, registry):
    data = tmp_path / "lorenz.h5"
    systems.generate("lorenz63", 8, t_end=1.0, dt=0.1, out=data, seed=0, progress=False)
    models.register(models.trajectory_entry("toy", Toy, "a toy for the test", "state"))
    common = ["train", "toy", "--data", data, "--out", tmp_path / "run", "--window", 4,
              "--batch-size", 4, "--no-progress", "--device", "cpu",
              "--param", "scale=0.5"]  # fmt: skip
    code, out, err = run(capsys, *common, "--max-steps", 3)
    assert code == 0, err
    assert json.loads(out)["steps"] == 3
    code, out, err = run(capsys, *common, "--max-steps", 5, "--resume")
    assert code == 0, err
    assert json.loads(out)["steps"] == 5
    model = models.entry("toy").load(tmp_path / "run" / "checkpoints" / "last.pt")
    assert isinstance(model, Toy) and model.init_args == {"dim": 3, "scale": 0.5}
    code, _, err = run(capsys, "train", "toy", "--data", data, "--task", "extrapolation")
    assert code == 2 and "'toy' has no tasks: drop --task" in err


def test_every_entry_gets_the_same_request(tmp_path, capsys, registry):
    calls = []

    def train(data, out, config, **options):
        calls.append((data, out, config, options))
        return {"trained": data}

    models.register(models.ModelEntry("recorder", "records", ("state",), Toy, Toy, train, Toy))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"lr": 0.1, "epochs": 2}))
    code, out, err = run(
        capsys, "train", "recorder", "--data", "d.h5", "--out", tmp_path / "r", "--config",
        config, "--lr", 0.5, "--seed", 3, "--param", "a=1", "--backbone", "fno",
        "--window", 3, "--task", "x", "--resume", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out) == {"trained": "d.h5"}
    [(data, out_dir, cfg, options)] = calls
    assert data == "d.h5" and out_dir == tmp_path / "r"
    assert cfg == {"lr": 0.5, "epochs": 2, "seed": 3, "progress": False}
    assert options == {
        "model_args": {"a": 1, "backbone": "fno"},
        "val_data": None,
        "window": 3,
        "stride": None,
        "task": "x",
        "resume": True,
    }


class _FakeZoo:
    system = "lotka_volterra"


def _record_dynadiff(monkeypatch):
    from simsci.models import dynadiff

    calls = []
    monkeypatch.setattr(dynadiff, "load_zoo", lambda path: _FakeZoo())
    monkeypatch.setattr(dynadiff, "train_generator", lambda **kw: calls.append(kw))
    return calls


def test_train_dynadiff_goes_through_its_entry(tmp_path, capsys, monkeypatch):
    from simsci.models.dynadiff import PROTOCOLS

    calls = _record_dynadiff(monkeypatch)
    folder = tmp_path / "lv"
    folder.mkdir()
    out = tmp_path / "gen"
    code, stdout, err = run(
        capsys, "train", "dynadiff", "--data", folder, "--param", "zoo=zoo.pt", "--out",
        out, "--max-steps", 7, "--param", "latent_dim=8", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(stdout) == {"checkpoint": str(out / "generator.pt")}
    [kw] = calls
    assert isinstance(kw.pop("zoo"), _FakeZoo)
    assert kw == {
        "out_dir": out,
        "data": folder / "train.h5",
        "device": "cpu",
        "seed": 0,
        "progress": True,
        "latent_dim": 8,
        "context_steps": PROTOCOLS["lotka_volterra"].context_steps,
        "context_episodes": 1,
        "autoencoder_steps": 7,
        "decoder_steps": 7,
        "diffusion_train_steps": 7,
    }


def test_dynadiff_train_and_train_dynadiff_are_one_call(tmp_path, capsys, monkeypatch):
    calls = _record_dynadiff(monkeypatch)
    flags = ["--data", tmp_path / "lv.h5", "--out", tmp_path / "gen", "--device", "cpu"]
    code, out, err = run(capsys, "dynadiff", "train", "--zoo", "zoo.pt", *flags,
                         "--autoencoder-steps", 5, "--diffusion-steps", 10)  # fmt: skip
    assert code == 0 and out.startswith("generator: "), err
    code, _, err = run(capsys, "train", "dynadiff", "--param", "zoo=zoo.pt", *flags,
                       "--param", "autoencoder_steps=5",
                       "--param", "diffusion_train_steps=10")  # fmt: skip
    assert code == 0, err
    first, second = calls
    for kw in (first, second):
        kw.pop("zoo")
        kw["out_dir"] = Path(kw["out_dir"])
    assert first == second
    assert first["decoder_steps"] is None and first["data"] == tmp_path / "lv.h5"


@pytest.mark.parametrize(
    "flags, message",
    [
        ([], "pass --param zoo=ZOO.pt"),
        (["--param", "zoo=z.pt", "--window", 4], "drop --window"),
        (["--param", "zoo=z.pt", "--epochs", 4], "not ['epochs']"),
        (["--param", "zoo=z.pt", "--param", "spec=1"], "unknown --param for dynadiff"),
    ],
)
def test_train_dynadiff_errors(flags, message, capsys, monkeypatch):
    _record_dynadiff(monkeypatch)
    code, _, err = run(capsys, "train", "dynadiff", "--data", "lv", *flags)
    assert code == 2 and message in err, err


def test_train_vectorworld_goes_through_its_entry(tmp_path, capsys, monkeypatch):
    from simsci.models import vectorworld

    calls = []

    def fake(data, out, **kw):
        calls.append((data, out, kw))
        return out

    monkeypatch.setattr(vectorworld, "train_vectorworld", fake)
    out = tmp_path / "vw"
    code, stdout, err = run(
        capsys, "train", "vectorworld", "--data", "scenes.h5", "--out", out, "--max-steps", 3,
        "--param", "npc_steps=7", "--param", "npc_roads=2", "--param", "lane_repr=road",
        "--param", "count_pins=true", "--param", "seam_frame=true",
        "--param", "tile_more_steps=4", "--seed", 5,
        "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(stdout) == {"checkpoint": str(out)}
    assert calls == [
        (
            "scenes.h5",
            out,
            {"tile_steps": 3, "vae_steps": 3, "npc_steps": 7, "npc_roads": 2,
             "lane_repr": "road", "count_pins": True, "seam_frame": True,
             "tile_more_steps": 4, "seed": 5,
             "resume": False, "progress": False},
        )
    ]  # fmt: skip
