"""``simsci generate`` for irregular SDE/ODE data (--keep --per-channel) and for the
registered datasets (pendulum_images, climate): files, options and errors."""

import numpy as np
import pytest

import simsci.data
from simsci.cli import main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    "system, keep, t_end, length",
    [("stochastic_lorenz", 0.3, 1.0, 101), ("damped_pendulum", 0.5, 2.0, 101)],
)
def test_irregular_per_channel_data_from_the_cli(system, keep, t_end, length, tmp_path, capsys):
    out = tmp_path / f"{system}.h5"
    code, stdout, _ = run(
        capsys,
        "generate",
        system,
        "-n",
        6,
        "--t-end",
        t_end,
        "--keep",
        keep,
        "--per-channel",
        "--out",
        out,
        "--no-progress",
        "--device",
        "cpu",
    )
    assert code == 0 and "wrote" in stdout
    assert run(capsys, "data", "check", out)[0] == 0
    ds = simsci.data.open(out)
    k = max(2, round(keep * length))
    assert ds.meta["kept_per_episode"] == k and ds.meta["per_channel"] is True
    for i in range(len(ds)):
        ep = ds[i]
        assert np.array_equal(np.isnan(ep["x"]), ~ep["mask"])
        assert ep["mask"].sum(axis=0).tolist() == [k] * ep["x"].shape[1]  # k per channel
        assert ep["mask"].any(axis=1).all() and len(ep["t"]) < length


def test_generate_pendulum_images_and_climate(tmp_path, capsys):
    code, stdout, _ = run(capsys, "generate", "--list")
    assert code == 0 and "pendulum_images" in stdout and "climate" in stdout
    assert "linear_sde" in stdout and "lorenz63" in stdout
    pend = tmp_path / "pend_img.h5"
    code, stdout, _ = run(
        capsys,
        "generate",
        "pendulum_images",
        "-n",
        5,
        "--t-end",
        2,
        "--keep",
        0.4,
        "--seed",
        3,
        "--param",
        "noise_std=0.1",
        "--param",
        "size=16",
        "--out",
        pend,
        "--no-progress",
    )
    assert code == 0 and "wrote" in stdout
    assert run(capsys, "data", "check", pend)[0] == 0
    ds = simsci.data.open(pend)
    assert ds.meta["image_shape"] == [16, 16] and ds.meta["seed"] == 3
    assert ds.meta["noise_model"]["pixel_noise_std"] == 0.1 and ds[0]["x"].shape == (8, 256)
    clim = tmp_path / "climate.h5"
    code, stdout, _ = run(
        capsys,
        "generate",
        "climate",
        "-n",
        4,
        "--keep",
        0.5,
        "--param",
        "missing=0.2",
        "--split-fractions",
        "0.5,0.5,0",
        "--out",
        clim,
        "--no-progress",
    )
    assert code == 0 and "wrote" in stdout
    code, stdout, _ = run(capsys, "data", "info", clim)
    assert code == 0 and "climate" in stdout and "latitude" in stdout
    ds = simsci.data.open(clim)
    assert ds.meta["keep"] == 0.5 and ds.meta["missing"] == 0.2 and len(ds) == 4
    assert ds.column("label").shape == (4, 1) and set(ds.column("split").tolist()) == {0, 1}


def test_generate_dataset_errors_are_one_clear_line(tmp_path, capsys):
    out = tmp_path / "d.h5"
    code, _, err = run(capsys, "generate", "pendulum_image", "--out", out)
    assert code == 2 and "did you mean 'pendulum_images'" in err and "Traceback" not in err
    code, _, err = run(capsys, "generate", "climate", "--method", "rk4", "--out", out)
    assert code == 2 and "no option 'method' (CLI --method)" in err and "keep=0.7" in err
    code, _, err = run(capsys, "generate", "climate", "--per-channel", "--out", out)
    assert code == 2 and "no option 'per_channel'" in err
    code, _, err = run(capsys, "generate", "climate", "-n", 0, "--out", out)
    assert code == 2 and "n must be a positive integer" in err
    code, _, err = run(capsys, "generate", "pendulum_images", "--keep", 1.5, "--out", out)
    assert code == 2 and "keep must lie in (0, 1]" in err
    code, _, err = run(capsys, "generate", "climate", "--param", "colour=red", "--out", out)
    assert code == 2 and "no option 'colour'" in err
    code, _, err = run(capsys, "generate", "climate", "--split", "a,b", "--out", out)
    assert code == 2 and "--split must be three comma-separated fractions" in err
    assert not out.exists()


def test_a_dataset_keeps_its_own_split_unless_split_is_given(tmp_path, capsys):
    # lifted_circle's own default is (0.6, 0.2, 0.2); systems default to 0.8,0.1,0.1
    for flag, counts in (((), [6, 2, 2]), (("--split-fractions", "0.8,0.1,0.1"), [8, 1, 1])):
        out = tmp_path / f"circle{len(flag)}.h5"
        argv = ("generate", "lifted_circle", "-n", 10, "--out", out, "--no-progress", *flag)
        code, _, err = run(capsys, *argv, "--param", "dim=4", "--param", "steps=4")
        assert code == 0, err
        split = simsci.data.open(out).column("split")
        assert np.bincount(split, minlength=3).tolist() == counts
