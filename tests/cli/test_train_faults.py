"""The faults a new user of `simsci train` / `simsci evaluate` hit first, each fixed:

- a --max-steps budget was capped by the default 10 epochs (now honoured; epochs and
  max_steps together say at the start when epochs stops the run early);
- `simsci evaluate` on a file of the wrong kind died in a KeyError (now the message
  `simsci train` gives: the kinds and fields the model reads, what the file has);
- `simsci evaluate --out missing/dir/x.json` computed everything, then failed on the
  write (now refused before the work);
- `simsci train gfg` without --val-data warned "val_data is given" (now a short run
  evaluates once at its end, and the Trainer's warning names no argument never given);
- a short `simsci train vectorworld` collected minutes of traffic, then found no best.pt
  (now seconds, and a loadable world);
- files with inf (or NaN where observed) are refused before the model is built.
"""

import json
import warnings

import h5py
import pytest
import torch

from simsci import models, systems
from simsci.cli import main
from simsci.errors import FormatError


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def field(tmp_path_factory):
    path = tmp_path_factory.mktemp("field") / "burgers.h5"
    systems.generate(
        systems.get("burgers", resolution=16),
        2,
        t_end=0.1,
        dt=0.05,
        out=path,
        seed=0,
        progress=False,
    )
    return path


COMMON = ["--window", 4, "--batch-size", 4, "--device", "cpu", "--no-progress"]


# ------------------------------------------------------------------ --max-steps budget
def test_max_steps_is_not_capped_by_the_default_epochs(tmp_path, capsys, series):
    # 3 steps per epoch: the old default of 10 epochs stopped this run at step 30
    code, out, err = run(capsys, "train", "gru_dt", "--data", series, "--out", tmp_path / "r",
                         "--max-steps", 40, *COMMON)  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)
    assert summary["steps"] == 40 and summary["total_steps"] == 40 and summary["epochs"] == 13


def test_epochs_that_stop_before_max_steps_say_so_at_the_start(tmp_path, capsys, series):
    with pytest.warns(UserWarning, match=r"epochs=2 .*step 6, before max_steps=40"):
        code, out, err = run(capsys, "train", "gru_dt", "--data", series, "--out",
                             tmp_path / "r", "--max-steps", 40, "--epochs", 2, *COMMON)  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["steps"] == 6  # both given: the first reached ends the run


# ------------------------------------------------------------ evaluate: wrong kind
@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, series, events):
    root = tmp_path_factory.mktemp("ckpt")
    config = {"max_steps": 1, "batch_size": 4, "device": "cpu", "progress": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models.entry("latent_ode").train(series, root / "lode", config, window=4)
        models.entry("cocld").train(events, root / "cocld", config)
    return {
        "latent_ode": root / "lode" / "checkpoints" / "last.pt",
        "cocld": root / "cocld" / "checkpoints" / "last.pt",
    }


@pytest.mark.parametrize(
    "model, data, needs, has",
    [
        ("latent_ode", "events", "reads kind='state' files", "this file is kind='events'"),
        ("cocld", "field", "reads kind='events' files", "this file is kind='field'"),
    ],
)
def test_evaluate_names_the_kind_the_model_needs(request, capsys, checkpoints, model, data,
                                                 needs, has):  # fmt: skip
    path = request.getfixturevalue(data)
    code, _, err = run(capsys, "evaluate", checkpoints[model], "--data", path)
    assert code == 2 and "KeyError" not in err and "Traceback" not in err
    line = err.strip()
    assert len(line.splitlines()) == 1 and str(path) in line
    assert f"{model} (" in line and needs in line and has in line
    assert "step fields: t, " in line  # what the file has
    fields = "t, x, mask, label" if model == "latent_ode" else "t, mark"
    assert f"the fields it reads: {fields}" in line
    # `simsci train` refuses the same file with the same message
    code, _, train_err = run(capsys, "train", model, "--data", path, "--out",
                             path.parent / f"never-{model}", "--max-steps", 1)  # fmt: skip
    assert code == 2 and needs in train_err and has in train_err
    assert not (path.parent / f"never-{model}").exists()


def test_evaluate_checks_its_output_before_the_work(tmp_path, capsys, monkeypatch, series,
                                                    checkpoints):  # fmt: skip
    from simsci import train

    def no_work(*args, **kwargs):
        raise AssertionError("the evaluation ran before its output was checked")

    monkeypatch.setattr(train, "load_model", no_work)
    monkeypatch.setattr(train, "evaluate", no_work)
    out = tmp_path / "missing" / "dir" / "x.json"
    code, _, err = run(capsys, "evaluate", checkpoints["latent_ode"], "--data", series,
                       "--out", out)  # fmt: skip
    assert code == 2 and "AssertionError" not in err
    assert "does not exist" in err and str(out.parent) in err
    monkeypatch.undo()
    code, _, err = run(capsys, "evaluate", checkpoints["latent_ode"], "--data", series,
                       "--out", tmp_path / "x.json", "--device", "cpu")  # fmt: skip
    assert code == 0, err
    assert "interp_mse" in json.loads((tmp_path / "x.json").read_text())


# --------------------------------------------------------------- gfg's warning
def test_gfg_without_val_data_warns_nothing_wrong(tmp_path, capsys):
    data = tmp_path / "circle.h5"
    code, _, err = run(capsys, "generate", "lifted_circle", "--n", 6, "--dim", 4, "--steps",
                       10, "--t-end", 4, "--out", data, "--no-progress")  # fmt: skip
    assert code == 0, err
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, out, err = run(capsys, "train", "gfg", "--data", data, "--out", tmp_path / "g",
                             "--max-steps", 6, "--batch-size", 8, "--no-progress", "--param",
                             "hidden_dim=16", "--param", "method=rk4")  # fmt: skip
    assert code == 0, err
    texts = [str(w.message) for w in caught]
    assert not [t for t in texts if "val_data" in t or "never evaluates" in t], texts
    summary = json.loads(out)
    # its default interval (200 steps) is cut to the budget: one evaluation, at the end
    assert summary["steps"] == 6 and summary["best_step"] == 6
    assert summary["best_from"] == "validation"
    assert (tmp_path / "g" / "checkpoints" / "best.pt").is_file()


# ------------------------------------------------------- a short vectorworld run
def test_a_short_vectorworld_run_ends_loadable_and_reproducible(tmp_path, capsys):
    from simsci.driving import make_scenes
    from simsci.models.vectorworld import VectorWorld

    scenes = make_scenes(4, out=tmp_path / "scenes.h5", drive_length=100.0, route_length=400.0)
    worlds = []
    for name in ("a", "b"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code, out, err = run(capsys, "train", "vectorworld", "--data", scenes, "--out",
                                 tmp_path / name, "--max-steps", 3, "--seed", 1,
                                 "--param", "tile_more_steps=2", "--param", "seam_frame=true",
                                 "--no-progress")  # fmt: skip
        assert code == 0, err
        assert json.loads(out)["checkpoint"] == str(tmp_path / name)
        worlds.append(VectorWorld.load(tmp_path / name))
        assert isinstance(models.entry("vectorworld").load(tmp_path / name), VectorWorld)
    a, b = worlds
    for part in ("tiles", "vae", "npc"):  # the same seed: the same world
        sa, sb = getattr(a, part).state_dict(), getattr(b, part).state_dict()
        assert all(torch.equal(sa[k], sb[k]) for k in sa), part
    # the tile generator trained on (tile_more_steps) is the one the world took, in the
    # layout asked for (and kept by the warm restart)
    assert a.meta["tile_more"] == {"steps": 2, "lr": 1.5e-4}
    assert a.tiles.layout.seam_frame and not a.tiles.layout.count_pins
    more = torch.load(tmp_path / "a/runs/tiles_more/checkpoints/last.pt", weights_only=False)
    base = torch.load(tmp_path / "a/runs/tiles/checkpoints/last.pt", weights_only=False)
    assert more["step"] == 2 and base["step"] == 3
    sa = a.tiles.state_dict()
    assert not all(torch.equal(sa[k], base["model_state"][k].to(sa[k].dtype)) for k in sa)


# ------------------------------------------------------------- non-finite values
def test_training_refuses_non_finite_values_before_building_the_model(
    tmp_path, capsys, monkeypatch, series
):
    from simsci.models import LatentODE

    bad = tmp_path / "inf.h5"
    bad.write_bytes(series.read_bytes())
    with h5py.File(bad, "r+") as f:
        f["steps/x"][5, 1] = float("inf")

    def never(*args, **kwargs):
        raise AssertionError("the model was built from a file with inf")

    monkeypatch.setattr(LatentODE, "from_data", classmethod(never))
    with pytest.raises(FormatError, match=r"values-finite") as exc:
        models.entry("latent_ode").train(bad, tmp_path / "run", {"max_steps": 1}, window=4)
    assert "x[5, 1] = inf" in str(exc.value) and "episode 0" in str(exc.value)
    code, _, err = run(capsys, "train", "latent_ode", "--data", bad, "--out", tmp_path / "r2",
                       "--max-steps", 1, *COMMON)  # fmt: skip
    assert code == 2 and "values-finite" in err and not (tmp_path / "r2").exists()
