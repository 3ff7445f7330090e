"""Checkpoints: what they hold, how they are written and read, and RNG state capture.

A checkpoint is a dict saved with ``torch.save``; every value in it is a tensor or a
plain Python container/number/string (RNG states included: numpy's key array is stored
as a tensor), so it loads with ``torch.load(..., weights_only=True)`` and reading a
checkpoint never runs code from the file. ``load_model`` imports the model's class by
the recorded ``module:qualname`` path and calls it with the recorded ``init_args``.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import os
import random
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from simsci._io import atomic_path, check_parent_dir
from simsci._version import __version__
from simsci.errors import CheckpointError, TrainingError  # noqa: F401  (re-exported)

FORMAT_VERSION = 1
KIND = "simsci.train.checkpoint"


def model_import_path(model: nn.Module) -> str:
    """``"package.module:QualName"`` of the model's class."""
    cls = type(model)
    return f"{cls.__module__}:{cls.__qualname__}"


def import_model_class(path: str):
    """The class named by a ``module:qualname`` path, or a CheckpointError saying why not."""
    module_name, _, qualname = path.partition(":")
    if not module_name or not qualname or "<locals>" in qualname:
        raise CheckpointError(
            f"cannot rebuild model class {path!r}: it is not importable (classes defined "
            "inside a function cannot be rebuilt); define the model at module level"
        )
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise CheckpointError(
            f"cannot import module {module_name!r} of the checkpoint's model class {path!r} "
            f"({exc}); make the package that defines it importable (install it or add it "
            "to PYTHONPATH)"
        ) from exc
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise CheckpointError(
                f"module {module_name!r} has no {qualname!r} (the checkpoint's model class "
                f"{path!r}); was the class renamed or moved?"
            )
        obj = getattr(obj, part)
    return obj


# ---------------------------------------------------------------------------------- RNG


def capture_rng() -> dict:
    """The states of python ``random``, numpy's global RNG, torch CPU and (when CUDA has
    been initialised) every CUDA device, as weights_only-safe values."""
    # the legacy global numpy RNG is the state user code draws from, so it is what we save
    name, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002
    py_version, py_state, py_gauss = random.getstate()
    cuda = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        cuda = [s.clone() for s in torch.cuda.get_rng_state_all()]
    return {
        "python": [py_version, list(py_state), py_gauss],
        "numpy": {
            "name": str(name),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state().clone(),
        "cuda": cuda,
    }


def restore_rng(state: dict) -> None:
    """Undo :func:`capture_rng`: every generator continues exactly where it was."""
    py_version, py_state, py_gauss = state["python"]
    random.setstate((py_version, tuple(py_state), py_gauss))
    npst = state["numpy"]
    np.random.set_state(  # noqa: NPY002
        (
            npst["name"],
            npst["keys"].numpy().astype(np.uint32),
            npst["pos"],
            npst["has_gauss"],
            npst["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"].cpu())
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available():
        for i, s in enumerate(cuda[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(s.cpu(), i)


def seed_all(seed: int) -> None:
    """Seed python, numpy and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002
    torch.manual_seed(seed)


@contextlib.contextmanager
def isolated_rng(seed: int):
    """Run a block with all global RNGs seeded by ``seed``; restore them afterwards.

    Validation runs inside this, so it is reproducible on its own and leaves the training
    random stream untouched (changing ``val_every`` does not change the trained weights).
    """
    saved = capture_rng()
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002
    torch.default_generator.manual_seed(seed)
    if saved["cuda"]:
        torch.cuda.manual_seed_all(seed)
    try:
        yield
    finally:
        restore_rng(saved)


# ------------------------------------------------------------------------------- files


def versions() -> dict:
    return {
        "simsci": __version__,
        "torch": str(torch.__version__),  # a TorchVersion is not weights_only-safe
        "python": sys.version.split()[0],
    }


def save_checkpoint(path: str | os.PathLike, payload: dict) -> Path:
    """``torch.save`` to a temporary sibling, then rename: the file is whole or absent."""
    path = Path(path)
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return path


def save_model(model: nn.Module, path: str | os.PathLike, *, extra: dict | None = None) -> Path:
    """Write ``model`` (weights + ``init_args``) as a checkpoint :func:`load_model` reads.

    For a model built or trained outside :class:`simsci.train.Trainer` (a surrogate
    fitted in a script, say). The model needs ``init_args``, the keyword arguments that
    rebuild it. The write is atomic.
    """
    init_args = getattr(model, "init_args", None)
    if not isinstance(init_args, dict):
        raise TypeError(
            f"{type(model).__name__} has no init_args dict; a checkpoint must record the "
            "constructor arguments that rebuild the model"
        )
    check_parent_dir(path)
    payload = {
        "kind": KIND,
        "format_version": FORMAT_VERSION,
        "model": {"import_path": model_import_path(model), "init_args": copy.deepcopy(init_args)},
        "model_state": model.state_dict(),
        "versions": versions(),
        "extra": copy.deepcopy(extra or {}),
    }
    return save_checkpoint(path, payload)


def load_checkpoint(path: str | os.PathLike, map_location="cpu") -> dict:
    """Read a checkpoint written by :class:`simsci.train.Trainer`.

    Raises FileNotFoundError for a missing file and :class:`CheckpointError` for a file
    that is not a simsci checkpoint or was written by a newer format.
    """
    path = Path(path)
    if not path.is_file():
        hint = ""
        if path.parent.is_dir():
            present = sorted(p.name for p in path.parent.glob("*.pt"))
            hint = f" (checkpoints there: {', '.join(present)})" if present else ""
        raise FileNotFoundError(
            f"no checkpoint at {str(path)!r}{hint}; pass the path of a .pt file written by "
            "simsci.train (e.g. OUT/checkpoints/last.pt or best.pt)"
        )
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # corrupt, truncated, not a torch file, or unsafe pickle
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [""]
        why = next((ln for ln in lines if "WeightsUnpickler error" in ln), lines[0])
        raise CheckpointError(
            f"{str(path)!r} is not a simsci checkpoint: torch.load(weights_only=True) could "
            f"not read it ({type(exc).__name__}: {why[:300]}); it may be truncated, corrupt "
            "or not written by simsci.train"
        ) from exc
    if not isinstance(ckpt, dict) or ckpt.get("kind") != KIND or "format_version" not in ckpt:
        what = (
            f"a dict with keys {sorted(map(str, ckpt))[:8]}"
            if isinstance(ckpt, dict)
            else (f"a {type(ckpt).__name__}")
        )
        raise CheckpointError(
            f"{str(path)!r} is not a simsci checkpoint: it holds {what}, not a dict with "
            f"kind={KIND!r} and a format_version; pass a file written by simsci.train"
        )
    version = ckpt["format_version"]
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"{str(path)!r} has checkpoint format_version {version!r}, newer than the "
            f"{FORMAT_VERSION} this simsci {__version__} reads (written by simsci "
            f"{ckpt.get('versions', {}).get('simsci', '?')}); upgrade simsci"
        )
    return ckpt


def load_model(path: str | os.PathLike, map_location="cpu") -> nn.Module:
    """Rebuild the checkpoint's model: import its class, call it with ``init_args``, load
    the weights, and return it in eval mode (on ``map_location`` when that is a device).
    The trainer's ``extra`` record (e.g. the data window ``simsci train`` used) is kept
    as ``model.checkpoint_extra`` (a dict, empty when there was none).
    """
    ckpt = load_checkpoint(path, map_location=map_location)
    info = ckpt.get("model")
    if not isinstance(info, dict) or "import_path" not in info:
        raise CheckpointError(f"{str(path)!r} has no model record (import_path, init_args)")
    cls = import_model_class(info["import_path"])
    init_args = info.get("init_args") or {}
    try:
        model = cls(**init_args)
    except TypeError as exc:
        raise CheckpointError(
            f"cannot rebuild {info['import_path']} from the checkpoint's init_args "
            f"{sorted(init_args)}: {exc}; the class's constructor changed since the "
            "checkpoint was written"
        ) from exc
    try:
        model.load_state_dict(ckpt["model_state"])
    except RuntimeError as exc:
        raise CheckpointError(
            f"the weights in {str(path)!r} do not fit {info['import_path']}(**init_args): {exc}"
        ) from exc
    if isinstance(map_location, (str, torch.device)):
        model.to(map_location)
    model.checkpoint_extra = dict(ckpt.get("extra") or {})
    return model.eval()
