"""The event-model commands: `simsci train cocld`, `simsci evaluate` on an event
checkpoint, `simsci events predict|generate`, and their errors as one clear line."""

import json

import numpy as np
import pytest

from simsci import data, train
from simsci.cli import main
from simsci.datasets import make_dataset
from simsci.models import LatentODE
from simsci.models.point_process import PoissonTPP


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny population_events file (24 individuals, 1-day windows, <= 12 events) and a
    CoCLD trained on it for 3 steps."""
    root = tmp_path_factory.mktemp("events_cli")
    path = make_dataset("population_events", 24, out=root / "pop.h5", seed=0,
                        window_hours=24.0, span_days=7.0, max_events=12)  # fmt: skip
    run_dir = root / "run"
    code = main(["train", "cocld", "--data", str(path), "--out", str(run_dir),
                 "--max-steps", "3", "--no-progress", "--device", "cpu",
                 "--param", "hidden=16", "--param", "latent_dim=8"])  # fmt: skip
    assert code == 0
    return path, run_dir / "checkpoints" / "last.pt"


def test_train_writes_an_event_checkpoint(trained):
    path, ckpt = trained
    model = train.load_model(ckpt)
    assert type(model).__name__ == "CoCLD"
    assert model.init_args["hidden"] == 16 and model.init_args["latent_dim"] == 8
    assert model.num_marks == 3 and model.num_groups == 2 and model.day_length == 24.0
    assert model.checkpoint_extra.get("data") == str(path)


def test_train_nhp_with_calendar_features(trained, capsys, tmp_path):
    """`--param calendar=true` gives the Neural Hawkes CoCLD's calendar features; the
    checkpoint records the option and the file's day_length."""
    path, _ = trained
    code, _, err = run(capsys, "train", "nhp", "--data", path, "--out", tmp_path / "run",
                       "--max-steps", "2", "--no-progress", "--device", "cpu",
                       "--param", "calendar=true", "--param", "hidden=8")  # fmt: skip
    assert code == 0, err
    model = train.load_model(tmp_path / "run" / "checkpoints" / "last.pt")
    assert type(model).__name__ == "NeuralHawkes"
    assert model.calendar is True and model.init_args["calendar"] is True
    assert model.day_length == 24.0 and hasattr(model, "calendar_net")


def test_evaluate_prints_event_metrics(trained, capsys, tmp_path):
    path, ckpt = trained
    report = tmp_path / "eval.json"
    code, out, err = run(capsys, "evaluate", ckpt, "--data", path, "--device", "cpu",
                         "--out", report)  # fmt: skip
    assert code == 0, err
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    for key in ("ll_per_event", "time_rmse", "type_accuracy", "events", "gap_w1", "daily_jsd"):
        assert key in names, out
    metrics = json.loads(report.read_text())
    assert np.isfinite(metrics["ll_per_event"]) and metrics["events"] > 0
    test_ids = np.flatnonzero(np.asarray(data.open(path).column("split")) == 2)
    traj = data.open(path)
    assert metrics["events"] == sum(len(traj[int(i)]["t"]) - 1 for i in test_ids)


def test_events_predict(trained, capsys, tmp_path):
    path, ckpt = trained
    out_path = tmp_path / "p.jsonl"
    code, out, err = run(capsys, "events", "predict", ckpt, "--data", path, "--split", "all",
                         "--device", "cpu", "--out", out_path)  # fmt: skip
    assert code == 0, err
    lines = [json.loads(line) for line in out_path.read_text().splitlines()]
    traj = data.open(path)
    assert len(lines) == sum(len(traj[i]["t"]) - 1 for i in range(len(traj)))
    assert f"wrote {len(lines)} predictions" in out
    for rec in lines:
        assert {"episode", "index", "t_predicted", "mark_predicted", "t", "mark"} <= set(rec)
        ep = traj[rec["episode"]]
        j = rec["index"]
        assert 1 <= j < len(ep["t"])
        assert rec["t"] == float(ep["t"][j]) and rec["mark"] == int(ep["mark"][j])
        assert rec["t_predicted"] > float(ep["t"][j - 1])  # after the history it reads
        assert 0 <= rec["mark_predicted"] < 3


def test_events_generate_new_sequences(trained, capsys, tmp_path):
    path, ckpt = trained
    out_path = tmp_path / "g.h5"
    code, out, err = run(capsys, "events", "generate", ckpt, "-n", 3, "--t-start", 0,
                         "--t-end", 24, "--group", 1, "--max-events", 40, "--device", "cpu",
                         "--out", out_path)  # fmt: skip
    assert code == 0, err
    assert "wrote" in out and "sequences" in out
    gen = data.open(out_path)
    assert gen.kind == "events" and gen.num_marks == 3
    assert 1 <= len(gen) <= 3
    for i in range(len(gen)):
        ep = gen[i]
        t, m = np.asarray(ep["t"]), np.asarray(ep["mark"])
        assert 1 <= len(t) <= 40 and np.all(np.diff(t) > 0)
        assert t[0] >= 0 and t[-1] <= 24
        assert m.min() >= 0 and m.max() < 3
        assert int(np.asarray(ep["group"])) == 1
    assert gen.meta["day_length"] == 24.0


def test_events_generate_continues_a_file(trained, capsys, tmp_path):
    path, ckpt = trained
    out_path = tmp_path / "c.h5"
    code, out, err = run(capsys, "events", "generate", ckpt, "--continue", path, "--prefix", 2,
                         "--max-events", 30, "--device", "cpu", "--out", out_path)  # fmt: skip
    assert code == 0, err
    traj, gen = data.open(path), data.open(out_path)
    real = [traj[int(i)] for i in np.flatnonzero(np.asarray(traj.column("split")) == 2)]
    assert gen.kind == "events" and len(gen) == len(real)
    for i, ep in enumerate(real):
        g = gen[i]
        t = np.asarray(g["t"])
        # the first two events are the history, the rest sampled up to the window's end
        np.testing.assert_array_equal(t[:2], ep["t"][:2])
        np.testing.assert_array_equal(np.asarray(g["mark"])[:2], ep["mark"][:2])
        assert np.all(np.diff(t) > 0) and t[-1] <= ep["window"][1]
        assert int(np.asarray(g["group"])) == int(np.asarray(ep["group"]))


# ---------------------------------------------------------------------------- errors
def _error(capsys, *argv):
    code, _, err = run(capsys, *argv)
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("simsci: error:"), err
    return lines[0]


def test_event_command_errors(trained, capsys, tmp_path):
    path, ckpt = trained
    out = tmp_path / "x.h5"
    with pytest.raises(SystemExit) as exc:
        run(capsys, "events", "predict", ckpt, "--out", tmp_path / "p.jsonl")
    assert exc.value.code == 2 and "required: --data" in capsys.readouterr().err

    other = train.save_model(LatentODE(2, latent_dim=2, hidden_dim=4), tmp_path / "lode.pt")
    line = _error(capsys, "events", "predict", other, "--data", path, "--out", tmp_path / "p")
    assert "holds a LatentODE, not an event model" in line

    line = _error(capsys, "train", "cocld", "--data", path, "--out", tmp_path / "r",
                  "--window", 4, "--max-steps", 1, "--no-progress")  # fmt: skip
    assert "event models read whole sequences: drop --window" in line

    line = _error(capsys, "events", "generate", ckpt, "-n", 2, "--out", out)
    assert "needs -n/--episodes N and --t-end" in line
    line = _error(capsys, "events", "generate", ckpt, "-n", 2, "--t-start", 5, "--t-end", 5,
                  "--out", out)  # fmt: skip
    assert "t_end > t_start" in line
    line = _error(capsys, "events", "generate", ckpt, "-n", 2, "--t-end", 5, "--group", 7,
                  "--out", out)  # fmt: skip
    assert "group must lie in 0..1" in line
    line = _error(capsys, "events", "generate", ckpt, "--continue", path, "--prefix", 0,
                  "--out", out)  # fmt: skip
    assert "--prefix must be >= 1" in line

    poisson = train.save_model(PoissonTPP(3, num_groups=2), tmp_path / "pois.pt")
    line = _error(capsys, "events", "generate", poisson, "-n", 2, "--t-end", 5, "--out", out)
    assert "PoissonTPP generates only continuations" in line and "--continue" in line
    assert not out.exists()


def test_event_commands_take_easytpp_data_directly(tmp_path, capsys):
    """train/evaluate/events read EasyTPP's layout without a separate import step."""
    import pickle

    rng = np.random.default_rng(0)

    def split(n):
        seqs = []
        for _ in range(n):
            t = np.cumsum(rng.exponential(1.0, size=int(rng.integers(3, 9))))
            seqs.append(
                [
                    {"time_since_start": float(a), "time_since_last_event": float(g),
                     "type_event": int(rng.integers(0, 2))}
                    for a, g in zip(t, np.diff(t, prepend=0.0))
                ]
            )  # fmt: skip
        return seqs

    src = tmp_path / "easytpp"
    src.mkdir()
    for name, n in (("train", 16), ("dev", 4), ("test", 4)):
        payload = {"dim_process": 2, name: split(n)}
        (src / f"{name}.pkl").write_bytes(pickle.dumps(payload))
    run_dir = tmp_path / "run"
    code, out, err = run(capsys, "train", "rmtpp", "--data", src, "--out", run_dir,
                         "--max-steps", "2", "--no-progress", "--device", "cpu")  # fmt: skip
    assert code == 0, err
    assert (run_dir / "data.h5").exists() and data.open(run_dir / "data.h5").num_marks == 2
    ckpt = run_dir / "checkpoints" / "last.pt"
    code, out, err = run(capsys, "evaluate", ckpt, "--data", src)
    assert code == 0, err
    assert "ll_per_event" in out
    code, out, err = run(capsys, "events", "predict", ckpt, "--data", src, "--out",
                         tmp_path / "p.jsonl")  # fmt: skip
    assert code == 0, err
    lines = (tmp_path / "p.jsonl").read_text().splitlines()
    assert len(lines) == sum(
        len(s) - 1 for s in pickle.loads((src / "test.pkl").read_bytes())["test"]
    )
