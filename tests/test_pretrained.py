"""simsci.pretrained: the shipped defaults are complete, hash-checked and small; a damaged
file is an error naming it; ship() swaps a model in atomically and keeps the size limit."""

import json
import shutil

import pytest

from simsci import pretrained
from simsci.errors import CheckpointError, UnknownNameError


@pytest.fixture
def fake_home(tmp_path, monkeypatch):
    """simsci.pretrained pointed at an empty folder (the real package data untouched)."""
    home = tmp_path / "pretrained"
    home.mkdir()
    monkeypatch.setattr(pretrained, "HERE", home)
    monkeypatch.setattr(pretrained, "MANIFEST", home / "manifest.json")
    return home


def _trained(tmp_path):
    src = tmp_path / "run"
    src.mkdir()
    (src / "a.json").write_text('{"x": 1}')
    (src / "b.pt").write_bytes(b"\x00\x01" * 100)
    (src / "log.txt").write_text("not shipped")
    return src


def test_every_shipped_model_is_complete_hashed_and_small():
    data = pretrained.manifest()
    assert data["format"] == "simsci.pretrained" and data["format_version"] == 1
    assert "vectorworld" in data["models"]  # VectorWorld-v1's default world
    total = 0
    for name, entry in data["models"].items():
        folder = pretrained.path(name)  # checks every file's SHA-256
        assert sorted(p.name for p in folder.iterdir()) == sorted(entry["files"])
        assert entry["command"] and isinstance(entry["data_seed"], int)
        assert isinstance(entry["train_seed"], int) and entry["format_version"] >= 1
        assert entry["bytes"] == sum((folder / f).stat().st_size for f in entry["files"])
        total += entry["bytes"]
    assert total <= pretrained.MAX_BYTES


def test_ship_then_path_round_trip_and_replacement(fake_home, tmp_path):
    src = _trained(tmp_path)
    folder = pretrained.ship(
        "toy", src, ["a.json", "b.pt"], command="make toy", data_seed=3, train_seed=4, format="t"
    )
    assert pretrained.path("toy") == folder == fake_home / "toy"
    entry = pretrained.manifest()["models"]["toy"]
    assert entry["bytes"] == 208 and entry["data_seed"] == 3 and entry["format"] == "t"
    assert not (folder / "log.txt").exists()  # only the named files ship
    (src / "b.pt").write_bytes(b"\x02" * 10)
    pretrained.ship("toy", src, ["a.json", "b.pt"], command="make toy", data_seed=3, train_seed=5)
    assert (folder / "b.pt").read_bytes() == b"\x02" * 10
    assert pretrained.manifest()["models"]["toy"]["train_seed"] == 5
    assert [p.name for p in fake_home.iterdir() if p.name.startswith(".")] == []


def test_damaged_or_missing_files_are_errors_naming_them(fake_home, tmp_path):
    pretrained.ship(
        "toy", _trained(tmp_path), ["a.json", "b.pt"], command="make toy", data_seed=0, train_seed=0
    )
    with open(fake_home / "toy" / "b.pt", "r+b") as f:
        f.write(b"\xff")
    with pytest.raises(CheckpointError, match=r"b\.pt does not match its SHA-256.*make toy"):
        pretrained.path("toy")
    (fake_home / "toy" / "a.json").unlink()
    with pytest.raises(CheckpointError, match=r"incomplete: .*a\.json is missing"):
        pretrained.path("toy")
    with pytest.raises(UnknownNameError, match="toy"):
        pretrained.path("tyo")


def test_ship_refuses_missing_files_and_the_size_limit(fake_home, tmp_path, monkeypatch):
    src = _trained(tmp_path)
    with pytest.raises(FileNotFoundError, match="no c.pt"):
        pretrained.ship("toy", src, ["c.pt"], command="x", data_seed=0, train_seed=0)
    monkeypatch.setattr(pretrained, "MAX_BYTES", 100)
    with pytest.raises(ValueError, match="over the 0 MiB limit"):
        pretrained.ship("toy", src, ["b.pt"], command="x", data_seed=0, train_seed=0)
    assert pretrained.manifest()["models"] == {}


def test_a_manifest_of_another_format_is_refused(fake_home):
    (fake_home / "manifest.json").write_text(json.dumps({"format": "x", "format_version": 9}))
    with pytest.raises(CheckpointError, match="reinstall simsci"):
        pretrained.manifest()
    (fake_home / "manifest.json").write_text("{")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        pretrained.manifest()


def test_the_shipped_vectorworld_is_the_default_everywhere(tmp_path):
    from simsci import models
    from simsci.envs import VectorWorldVectorEnv
    from simsci.models.vectorworld import VectorWorld
    from simsci.models.vectorworld import pretrained as shipped_world

    world = shipped_world()
    assert isinstance(world, VectorWorld)
    assert isinstance(models.get("vectorworld"), VectorWorld)
    env = VectorWorldVectorEnv(1, max_episode_steps=5)  # checkpoint=None: the shipped world
    assert env.world.sim.model.tiles.init_args == world.tiles.init_args
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    # a copy with a damaged part is refused before anything is built
    copy = tmp_path / "vw"
    shutil.copytree(pretrained.path("vectorworld"), copy)
    (copy / "npc.pt").write_bytes(b"")
    with pytest.raises(Exception, match="npc"):
        VectorWorld.load(copy)
