"""The simsci command: every subcommand from the command line, errors as one clear line."""

import json
import subprocess
import sys

import h5py
import pytest

from simsci.cli import main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["generate"],
        ["data"],
        ["data", "info"],
        ["data", "check"],
        ["train"],
        ["evaluate"],
        ["env"],
        ["bench"],
        ["tour"],
    ],
)
def test_help_of_every_command(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    assert exc.value.code == 0
    assert "usage: simsci" in capsys.readouterr().out


def test_python_dash_m_and_version():
    proc = subprocess.run(
        [sys.executable, "-m", "simsci", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.startswith("simsci ")


def test_generate_info_check(tmp_path, capsys):
    out = tmp_path / "vdp.h5"
    code, stdout, _ = run(
        capsys,
        "generate",
        "van_der_pol",
        "--n",
        12,
        "--t-end",
        2,
        "--dt",
        0.05,
        "--keep",
        0.5,
        "--per-channel",
        "--params",
        "mu=0.5,2",
        "--out",
        out,
        "--no-progress",
        "--device",
        "cpu",
    )
    assert code == 0 and out.exists() and "wrote" in stdout
    code, stdout, _ = run(capsys, "data", "info", out)
    assert code == 0
    assert "van_der_pol" in stdout and "episodes: 24" in stdout and "mask" in stdout
    code, stdout, _ = run(capsys, "data", "check", out)
    assert code == 0 and "OK" in stdout
    code, stdout, _ = run(capsys, "generate", "--list")
    assert code == 0 and "lorenz63" in stdout and "ornstein_uhlenbeck" in stdout


def test_check_reports_a_broken_file(tmp_path, capsys):
    out = tmp_path / "l.h5"
    assert (
        run(
            capsys,
            "generate",
            "lorenz63",
            "--n",
            3,
            "--t-end",
            0.5,
            "--out",
            out,
            "--no-progress",
            "--device",
            "cpu",
        )[0]
        == 0
    )
    with h5py.File(out, "r+") as f:
        t = f["steps/t"][...]
        t[5] = t[4]
        f["steps/t"][...] = t
    code, _, err = run(capsys, "data", "check", out)
    assert code == 1
    assert "steps/t" in err and "episode 0" in err and "1 problem" in err


def test_errors_are_one_clear_line(tmp_path, capsys):
    code, _, err = run(capsys, "generate", "lorenz_63", "--out", tmp_path / "x.h5")
    assert code == 2 and "did you mean 'lorenz63'" in err and "Traceback" not in err
    code, _, err = run(capsys, "data", "info", tmp_path / "missing.h5")
    assert code == 2 and "missing.h5" in err
    code, _, err = run(
        capsys,
        "generate",
        "lorenz63",
        "--n",
        2,
        "--out",
        tmp_path / "no" / "such" / "dir.h5",
        "--no-progress",
    )
    assert code == 2 and "does not exist" in err
    code, _, err = run(capsys, "train", "latent_odee", "--data", tmp_path / "x.h5")
    assert code == 2 and "did you mean 'latent_ode'" in err


def test_train_resume_evaluate(tmp_path, capsys):
    data = tmp_path / "lorenz.h5"
    assert (
        run(
            capsys,
            "generate",
            "lorenz63",
            "--n",
            20,
            "--t-end",
            1,
            "--dt",
            0.02,
            "--keep",
            0.6,
            "--out",
            data,
            "--no-progress",
            "--device",
            "cpu",
        )[0]
        == 0
    )
    common = [
        "train",
        "latent_ode",
        "--data",
        data,
        "--out",
        tmp_path / "run",
        "--window",
        12,
        "--batch-size",
        8,
        "--no-progress",
        "--param",
        "latent_dim=4",
        "--param",
        "hidden_dim=16",
    ]
    code, stdout, _ = run(capsys, *common, "--max-steps", 3)
    assert code == 0 and json.loads(stdout)["steps"] == 3
    code, stdout, err = run(capsys, *common, "--max-steps", 6, "--resume")
    assert code == 0, err
    assert json.loads(stdout)["steps"] == 6
    ckpt = tmp_path / "run" / "checkpoints" / "last.pt"
    report = tmp_path / "eval.json"
    code, stdout, _ = run(
        capsys, "evaluate", ckpt, "--data", data, "--split", "all", "--out", report
    )
    assert code == 0 and "interp_mse" in stdout and "locf_mse" in stdout
    metrics = json.loads(report.read_text())
    assert metrics["interp_mse"] > 0 and metrics["locf_mse"] > 0


# the whole quick tour (~60 s of CPU) stays in the default run: `make tour` is one of the
# README's two commands, and CI runs only `make test`
# ~60 s of CPU, a sixth of the default run's. Each section's capability is guarded by
# its own tests (tests/models, tests/operators, tests/envs, tests/driving, tests/cli);
# the tour's own wiring in the default run: tests/cli/test_tour.py (the section registry,
# --list, --section, one section run alone). `make test-all` runs the whole quick tour.
@pytest.mark.slow
def test_tour_quick(tmp_path, capsys):
    code, stdout, _ = run(capsys, "tour", "--quick", "--out", tmp_path / "tour")
    assert code == 0
    summary = json.loads((tmp_path / "tour" / "summary.json").read_text())
    section = summary["latent ODE on irregular Lorenz-63"]
    assert section["interp_mse"] > 0 and section["locf_mse"] > 0
    assert (tmp_path / "tour" / "lorenz_interpolation.png").stat().st_size > 10_000
    for title in ("environments and a learned surrogate", "∂-NO on Burgers"):
        assert title in summary
    assert set(summary["∂-NO on Burgers"]["rel_l2"]) == {"none", "dno"}


@pytest.mark.slow
def test_tour_twice_into_one_folder(tmp_path, capsys):
    # a second tour into the same folder starts its training runs over
    for _ in range(2):
        code, _, err = run(capsys, "tour", "--quick", "--out", tmp_path / "tour")
        assert code == 0, err


def test_bench_lists_scripts(capsys):
    code, stdout, _ = run(capsys, "bench", "--list")
    assert code == 0 and "odeint_grid" in stdout and "data_read" in stdout


# torchrun start-up (~9 s); tests/systems/test_generate.py::test_distributed_ranks_write_shards
# and tests/train/test_train_ddp.py guard the sharded writing and DDP in the default run
@pytest.mark.slow
def test_generate_under_torchrun_writes_one_shard_per_rank(tmp_path):
    from simsci import data

    out = tmp_path / "shards"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",  # torchrun binds a free port itself
            "--nproc_per_node",
            "2",
            "-m",
            "simsci",
            "generate",
            "lorenz63",
            "--episodes",
            "10",
            "--t-end",
            "0.5",
            "--out",
            str(out),
            "--no-progress",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["part-00000.h5", "part-00001.h5"]
    ds = data.open(out)
    assert len(ds) == 10 and not data.check_file(out)
    # the ranks used different seeds: no two episodes start alike
    starts = {tuple(ds[i]["x"][0].round(6)) for i in range(len(ds))}
    assert len(starts) == 10


def test_system_parameters_as_options(tmp_path, capsys):
    from simsci import data
    from simsci.cli._generate import system_arguments

    assert system_arguments(["--rho", "35", "--nx", "64", "--ny=32", "--beta=2"]) == {
        "rho": 35,
        "beta": 2,
        "resolution": (64, 32),
    }
    assert system_arguments(["--nx", "128"]) == {"resolution": 128}
    with pytest.raises(ValueError, match="--ny needs --nx"):
        system_arguments(["--ny", "3"])
    with pytest.raises(ValueError, match="--rho needs a value"):
        system_arguments(["--rho"])
    out = tmp_path / "r.h5"
    code, _, _ = run(
        capsys,
        "generate",
        "lorenz63",
        "--rho",
        35,
        "--n",
        2,
        "--t-end",
        0.1,
        "--out",
        out,
        "--no-progress",
        "--device",
        "cpu",
    )
    assert code == 0 and data.open(out)[0]["params"][1] == 35
    code, _, err = run(capsys, "generate", "lorenz63", "--rhoo", 35, "--out", out)
    assert code == 2 and "Did you mean 'rho'" in err
    with pytest.raises(SystemExit):
        main(["data", "info", str(out), "--bogus"])


def test_data_import_pdebench(tmp_path, capsys):
    import numpy as np

    from simsci import data

    src = tmp_path / "1D_Burgers_Sols_Nu0.001.hdf5"
    with h5py.File(src, "w") as f:
        f["tensor"] = np.random.default_rng(0).normal(size=(3, 5, 16)).astype(np.float32)
        f["x-coordinate"] = (np.arange(16) + 0.5) / 16
        f["t-coordinate"] = np.linspace(0, 0.5, 6)  # T+1 values for T frames, as PDEBench
        f.attrs["Nu"] = 0.001
    dst = tmp_path / "burgers.h5"
    code, stdout, err = run(capsys, "data", "import", "pdebench", src, dst, "--no-progress")
    assert code == 0, err
    ds = data.open(dst)
    assert len(ds) == 3 and ds.kind == "field" and ds[0]["x"].shape == (5, 16, 1)
    assert ds[0]["params"].tolist() == pytest.approx([0.001])
    code, _, err = run(capsys, "data", "import", "thewell", src, tmp_path / "w.h5", "--no-progress")
    assert code == 2 and "layout" in err


def test_generate_a_pde_dataset(tmp_path, capsys):
    from simsci import data

    out = tmp_path / "burgers.h5"
    code, _, err = run(
        capsys,
        "generate",
        "burgers",
        "--nu",
        0.02,
        "--n",
        3,
        "--nx",
        128,
        "--save-resolution",
        32,
        "--t-end",
        0.2,
        "--dt",
        0.1,
        "--out",
        out,
        "--no-progress",
        "--device",
        "cpu",
        "--dtype",
        "float32",
    )
    assert code == 0, err
    ds = data.open(out)
    assert ds.kind == "field" and ds[0]["x"].shape == (3, 32, 1)
    assert ds.static["x"].shape == (32,) and ds.names("params") == ["nu"]
    assert ds[0]["params"].tolist() == pytest.approx([0.02])


# ------------------------------------------------ data commands: values, shards, folders
def test_data_check_refuses_inf_and_info_describes_every_shard(tmp_path, capsys):
    import numpy as np

    from simsci import data

    bad = data.write(
        tmp_path / "inf.h5",
        [{"t": [0.0, 1.0, 2.0], "x": np.ones((3, 2))}] * 2,
        kind="state",
        system="toy",
    )
    with h5py.File(bad, "r+") as f:
        f["steps/x"][4, 1] = np.inf  # episode 1, step 1
    code, _, err = run(capsys, "data", "check", bad)
    assert code == 1 and "1 problem" in err
    assert "field steps/x, episode 1: x[1, 1] = inf at step 1" in err and "values-finite" in err
    shards = tmp_path / "shards"
    shards.mkdir()
    for rank in range(2):
        data.write(
            data.shard_path(shards, rank),
            [{"t": [0.0], "x": [[1.0]]}] * (rank + 1),
            kind="state",
            system="toy",
            meta={"seed": rank, "dt": 0.5},
        )
    code, stdout, _ = run(capsys, "data", "info", shards)
    assert code == 0 and "episodes: 3" in stdout and "shards: 2" in stdout
    common = next(ln for ln in stdout.splitlines() if ln.startswith("meta (the same in all 2"))
    assert "dt=0.5" in common and "seed" not in common
    assert "seed: part-00000.h5: 0, part-00001.h5: 1" in stdout


def test_unwritable_output_folder_is_one_clear_line(tmp_path, capsys, monkeypatch):
    import os

    denied = tmp_path / "denied"
    denied.mkdir()
    real = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda p, mode, *a, **k: False if os.path.abspath(p) == str(denied) else real(p, mode),
    )
    code, _, err = run(
        capsys,
        "generate",
        "lorenz63",
        "--n",
        2,
        "--t-end",
        0.5,
        "--out",
        denied / "l.h5",
        "--no-progress",
        "--device",
        "cpu",
    )
    assert code == 2 and f"folder {str(denied)!r} is not writable" in err
    assert "Traceback" not in err and "errno" not in err
