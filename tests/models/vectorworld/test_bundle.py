"""The VectorWorld checkpoint directory, the CLI, and the small on-the-fly model (slow)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simsci.models.vectorworld import (
    DeltaSim,
    MotionGatedVAE,
    TileGenerator,
    VectorWorld,
    _lanegraph,
)


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


def test_saving_again_keeps_the_training_runs(tmp_path):
    # train_vectorworld writes the parts' runs under OUT/runs; a later save of the world
    # into OUT must leave them, or a finished run could not be resumed with more steps
    path = _tiny().save(tmp_path / "vw")
    (path / "runs" / "tiles" / "checkpoints").mkdir(parents=True)
    (path / "runs" / "tiles" / "checkpoints" / "last.pt").write_bytes(b"state")
    _tiny().save(path)
    assert (path / "runs" / "tiles" / "checkpoints" / "last.pt").read_bytes() == b"state"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vw"]


def test_small_default_is_built_once_and_renamed_into_place(tmp_path, monkeypatch):
    """Concurrent callers: one builds (in a work folder), the others wait and load."""
    import threading
    import time

    import simsci.driving
    from simsci.models.vectorworld import _bundle

    calls, seen_partial = [], []

    def fake_scenes(n, *, out, **kwargs):
        Path(out).write_bytes(b"scenes")

    def fake_train(scenes, out, **kwargs):
        calls.append(out)
        time.sleep(0.3)  # the others arrive while this one builds
        cache = tmp_path / "cache"
        seen_partial.extend(p.name for p in cache.iterdir() if not p.name.startswith("."))
        return _tiny().save(out)

    monkeypatch.setattr(simsci.driving, "make_scenes", fake_scenes)
    monkeypatch.setattr(_bundle, "train_vectorworld", fake_train)
    monkeypatch.setenv("SIMSCI_CACHE", str(tmp_path / "cache"))
    worlds = []
    threads = [
        threading.Thread(target=lambda: worlds.append(_bundle.small_default())) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(worlds) == 3  # one build, three loads
    assert seen_partial == []  # the cache key's folder never existed half-built
    assert calls[0].parent.name.endswith(".work")
    visible = [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]
    assert len(visible) == 1 and (visible[0] / "vectorworld.json").is_file()
    assert not (visible[0] / "runs").exists()
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.endswith(".work")]


def test_openings_made_ahead_are_the_ones_a_world_makes(tmp_path, monkeypatch):
    import torch

    torch.manual_seed(0)
    model = _tiny()
    made = model.make_openings(2, first_steps=2)
    path = model.save(tmp_path / "vw")
    again = VectorWorld.load(path)
    world = again.world(1, opening_bank=2, first_steps=2)
    assert sorted(world.bank) == sorted(made["tiles"]) and len(world.bank) == 2
    # the same weights without stored openings make the very same tiles, one key at a time
    plain = VectorWorld(again.tiles, again.vae, again.npc).world(1, opening_bank=2, first_steps=2)
    assert plain.bank == {}
    for key, opening in world.bank.items():
        for (cell, tile), (cell2, tile2) in zip(opening, plain.opening([key])[0]):
            assert cell == cell2 and all(np.array_equal(tile[k], tile2[k]) for k in tile)
    # made under other settings, lane-completion rules or weights: not used
    assert again.world(1, opening_bank=2, first_steps=3).bank == {}
    monkeypatch.setattr(_lanegraph, "COMPLETION_VERSION", _lanegraph.COMPLETION_VERSION + 1)
    assert again.world(1, opening_bank=2, first_steps=2).bank == {}
    monkeypatch.undo()
    assert len(again.world(1, opening_bank=2, first_steps=2).bank) == 2
    with torch.no_grad():
        next(again.tiles.parameters()).add_(1e-3)
    assert again.world(1, opening_bank=2, first_steps=2).bank == {}
    (path / "openings.npz").write_bytes(b"not an npz")
    with pytest.raises(ValueError, match="not a readable openings file"):
        VectorWorld.load(path)
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        model.make_openings(0)


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
    code = main(["train", "vectorworld", "--data", "x.h5", "--param", "count_pins=maybe"])
    assert code == 2 and "count_pins must be true or false" in capsys.readouterr().err
    code = main(["train", "vectorworld", "--data", "x.h5", "--param", "seam_frame=2"])
    assert code == 2 and "seam_frame must be true or false" in capsys.readouterr().err


@pytest.mark.slow
def test_small_default_drives_and_cli_rollout(tmp_path, monkeypatch):
    """The on-the-fly model end to end: built, cached, driven, written, from the CLI."""
    import simsci.data as sd
    from simsci.envs import vectorworld_rollout
    from simsci.models.vectorworld import small_default

    monkeypatch.setenv("SIMSCI_CACHE", str(tmp_path / "cache"))
    model = small_default()
    built = [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]
    assert len(built) == 1  # the model; the hidden lock file beside it
    res = vectorworld_rollout(model, km=0.1, seed=0, stop_on_failure=False)
    s = res["stats"]
    assert s["distance_m"] >= 100.0 and s["npc_infeasible_steps"] == 0
    assert s["tile_coverage"] == 1.0
    # closed seams (every end meets its partner) and NPC positions feasible (the slip)
    assert s["seam_unmatched"] == 0 and (s["seam_gap_p90_m"] or 0.0) <= 0.1
    assert s["npc_path_infeasible_steps"] <= 0.005 * max(s["npc_path_steps_checked"], 1)
    r = _cli(
        "rollout", "vectorworld", "--checkpoint", "small", "--km", "0.1", "--keep-going",
        "--out", "out", cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["distance_m"] >= 100.0
    ep = sd.open(tmp_path / "out" / "rollout.h5")[0]
    assert ep["agents"].shape[0] == stats["steps"] + 1 and ep["agents"].shape[2] == 7
