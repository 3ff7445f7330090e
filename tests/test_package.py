"""The package installs as the architecture says: simsci, simsci.envs, simsci.operators
import from an editable install and from a built wheel; the public surface is there."""

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import simsci

ROOT = Path(__file__).resolve().parents[1]


def test_public_surface():
    assert callable(simsci.odeint) and callable(simsci.sdeint)
    for name in ("data", "integrate", "systems", "train", "models", "envs", "operators"):
        assert getattr(simsci, name).__name__ == f"simsci.{name}"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        simsci.nope  # noqa: B018


def test_editable_install_maps_envs_and_operators():
    import simsci.envs
    import simsci.operators

    assert Path(simsci.envs.__file__).parent.name == "envs"
    assert Path(simsci.operators.__file__).parent.name == "operators"


def test_built_wheel_imports_envs_and_operators(tmp_path):
    # built from a copy of the sources: a stale build/ in the checkout (or another run
    # building there at the same time) cannot leak files into the wheel or hide a package
    # that pyproject.toml forgets to list
    src = tmp_path / "src"
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for name in ("simsci", "envs", "operators"):
        shutil.copytree(ROOT / name, src / name, ignore=junk)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("simsci-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"simsci/envs/__init__.py", "simsci/operators/__init__.py"} <= names
    assert not any(n.startswith(("envs/", "operators/", "tests/")) for n in names)
    # every subpackage of the source tree is in the wheel (pyproject lists them by hand)
    for init in (ROOT / "simsci").rglob("__init__.py"):
        assert init.relative_to(ROOT).as_posix() in names, f"{init.parent} missing from pyproject"
    # the shipped trained defaults are package data: every file the manifest names
    shipped = json.loads((ROOT / "simsci" / "pretrained" / "manifest.json").read_text())
    for entry in shipped["models"].values():
        for file in entry["files"]:
            assert f"simsci/pretrained/{entry['folder']}/{file}" in names
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    code = (
        "import simsci, simsci.envs, simsci.operators, simsci.data, simsci.cli, simsci.models;"
        "from simsci import pretrained;"
        "[pretrained.path(name) for name in pretrained.manifest()['models']];"  # hash-checked
        "print(simsci.__file__); print(simsci.envs.__file__); print(pretrained.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    ).stdout.split()
    assert all(Path(p).is_relative_to(target) for p in out), out
