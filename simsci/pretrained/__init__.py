"""Trained defaults shipped with simsci (package data), checked before they are used.

A capability that needs a trained model to work out of the box keeps it here, one folder
per model, and one manifest for all, ``manifest.json``::

    {"format": "simsci.pretrained", "format_version": 1,
     "models": {NAME: {"folder": NAME, "format": ..., "format_version": ...,
                       "command": the one command that remakes it,
                       "data_seed": ..., "train_seed": ..., "files": {FILE: SHA-256},
                       "bytes": ..., "simsci_version": ..., "created": ...,
                       "notes": ...}}}

:func:`path` returns a model's folder after checking that every file the manifest names
is there with its hash (a truncated or edited file is an error naming it, never a model
that loads and behaves differently); :func:`ship` copies a trained model's files in and
writes its manifest entry. Everything here together stays under ~8 MB (the project's
limit for package data); :data:`MAX_BYTES` is checked when a model is shipped.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from simsci._io import write_json
from simsci._version import __version__
from simsci.errors import CheckpointError, unknown_name

__all__ = ["path", "manifest", "ship", "MAX_BYTES"]

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
FORMAT, FORMAT_VERSION = "simsci.pretrained", 1
#: all shipped models together (the project's ~8 MB limit on package data)
MAX_BYTES = 8 * 1024 * 1024


def manifest() -> dict:
    """The manifest (``{"models": {}}`` when nothing ships)."""
    if not MANIFEST.is_file():
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "models": {}}
    try:
        data = json.loads(MANIFEST.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{MANIFEST}: not valid JSON ({exc}); reinstall simsci") from None
    if data.get("format") != FORMAT or data.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{MANIFEST}: format {data.get('format')!r} version {data.get('format_version')!r}"
            f", this simsci reads {FORMAT!r} version {FORMAT_VERSION}; reinstall simsci"
        )
    return data


def _sha256(file: Path) -> str:
    h = hashlib.sha256()
    with open(file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def path(name: str) -> Path:
    """The folder of the shipped model ``name``, every file checked against its SHA-256."""
    models = manifest()["models"]
    if name not in models:
        raise unknown_name("shipped pretrained model", name, models)
    entry = models[name]
    folder = HERE / entry["folder"]
    for file, digest in entry["files"].items():
        target = folder / file
        if not target.is_file():
            raise CheckpointError(
                f"the shipped {name!r} model is incomplete: {target} is missing; reinstall "
                f"simsci or remake it with `{entry['command']}`"
            )
        if _sha256(target) != digest:
            raise CheckpointError(
                f"the shipped {name!r} model's {file} does not match its SHA-256 in "
                f"{MANIFEST} (changed or truncated); reinstall simsci or remake it with "
                f"`{entry['command']}`"
            )
    return folder


def ship(name: str, source, files, *, command: str, data_seed: int, train_seed: int, **info):
    """Copy ``files`` of the trained model in the folder ``source`` to ``simsci/pretrained/
    name`` and record them in the manifest (with ``command``, the seeds, their hashes and
    ``info``: ``format``, ``format_version``, ``notes``...). Replaces an earlier version;
    refuses to take the shipped models over :data:`MAX_BYTES`."""
    source = Path(source)
    missing = [f for f in files if not (source / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{source}: no {', '.join(missing)} to ship")
    data = manifest()
    others = sum(m["bytes"] for k, m in data["models"].items() if k != name)
    size = sum((source / f).stat().st_size for f in files)
    if others + size > MAX_BYTES:
        raise ValueError(
            f"shipping {name!r} ({size / 2**20:.1f} MiB) would take the shipped models to "
            f"{(others + size) / 2**20:.1f} MiB, over the {MAX_BYTES / 2**20:.0f} MiB limit"
        )
    # copy into a temporary sibling, then swap it in: a killed ship leaves the old model
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=HERE))
    try:
        for f in files:
            shutil.copyfile(source / f, tmp / f)
        folder = HERE / name
        old = HERE / f".{name}.old"
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            folder.rename(old)
        tmp.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    data["models"][name] = {
        "folder": name,
        **info,
        "command": command,
        "data_seed": int(data_seed),
        "train_seed": int(train_seed),
        "files": {f: _sha256(folder / f) for f in files},
        "bytes": size,
        "simsci_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    write_json(MANIFEST, data)
    return folder
