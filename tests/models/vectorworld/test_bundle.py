"""The VectorWorld checkpoint directory, the CLI, and the small on-the-fly model (slow)."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from simsci.models.vectorworld import DeltaSim, MotionGatedVAE, TileGenerator, VectorWorld


def _tiny() -> VectorWorld:
    return VectorWorld(
        TileGenerator(width=16, depth=1, heads=2, freq_dim=8),
        MotionGatedVAE(hidden=8, latent=4),
        DeltaSim(hidden=8, depth=1),
    )


def test_save_load_round_trip(tmp_path):
    model = _tiny()
    path = model.save(tmp_path / "vw")
    again = VectorWorld.load(path)
    for name in ("tiles", "vae", "npc"):
        a, b = getattr(model, name).state_dict(), getattr(again, name).state_dict()
        assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)
    manifest = json.loads((path / "vectorworld.json").read_text())
    assert manifest["format_version"] == 1 and set(manifest["parts"]) == {"tiles", "vae", "npc"}
    model.save(path)  # overwriting is atomic and leaves no temporary directories
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vw"]


def test_load_rejects_other_parts_versions_and_folders(tmp_path):
    path = _tiny().save(tmp_path / "vw")
    with pytest.raises(ValueError, match="no vectorworld.json"):
        VectorWorld.load(tmp_path)
    bad = tmp_path / "swapped"
    shutil.copytree(path, bad)
    shutil.copy(bad / "npc.pt", bad / "tiles.pt")
    with pytest.raises(ValueError, match="holds a DeltaSim.*must be a TileGenerator"):
        VectorWorld.load(bad)
    old = tmp_path / "old"
    shutil.copytree(path, old)
    m = json.loads((old / "vectorworld.json").read_text())
    m["format_version"] = 0
    (old / "vectorworld.json").write_text(json.dumps(m))
    with pytest.raises(ValueError, match="format_version 0"):
        VectorWorld.load(old)
    (old / "vectorworld.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        VectorWorld.load(old)
    with pytest.raises(TypeError, match="'vae' part must be a MotionGatedVAE"):
        VectorWorld(TileGenerator(width=16, depth=1), DeltaSim(hidden=8), DeltaSim(hidden=8))


def test_train_data_of_another_layout_rejected(tmp_path):
    from simsci.data import TrajectoryWriter
    from simsci.models.vectorworld import train_vectorworld

    path = tmp_path / "other.h5"
    with TrajectoryWriter(path, kind="scene", system="driving", meta={"tile_size": 32.0}) as w:
        w.append({"t": np.arange(3.0), "x": np.zeros((3, 2))})
    with pytest.raises(ValueError, match="tile_size|lacks"):
        train_vectorworld(path, tmp_path / "vw", tile_steps=1, vae_steps=1, npc_steps=1)


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "simsci", *args], capture_output=True, text=True, cwd=cwd
    )


def test_cli_errors_are_one_clear_line(tmp_path, capsys):
    from simsci.cli import main

    code = main(["rollout", "vectorworld", "--checkpoint", str(tmp_path), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "no vectorworld.json" in err and "Traceback" not in err
    code = main(["train", "vectorworld", "--data", "x.h5", "--param", "depth=3"])
    assert code == 2 and "unknown --param for vectorworld" in capsys.readouterr().err


@pytest.mark.slow
def test_small_default_drives_and_cli_rollout(tmp_path, monkeypatch):
    """The on-the-fly model end to end: built, cached, driven, written, from the CLI."""
    from simsci.driving import read_scene
    from simsci.envs import vectorworld_rollout
    from simsci.models.vectorworld import small_default

    monkeypatch.setenv("SIMSCI_CACHE", str(tmp_path / "cache"))
    model = small_default()
    assert len(list((tmp_path / "cache").iterdir())) == 1
    res = vectorworld_rollout(model, km=0.1, seed=0, stop_on_failure=False)
    assert res["stats"]["distance_m"] >= 100.0 and res["stats"]["npc_infeasible_steps"] == 0
    r = _cli("rollout", "vectorworld", "--km", "0.1", "--keep-going", "--out", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["distance_m"] >= 100.0
    assert read_scene(tmp_path / "out" / "rollout.h5", 0)["agents"].shape[2:] == (11, 7)
