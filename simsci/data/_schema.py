"""Constants and small helpers shared by the writer, the checker and the reader.

Everything here follows shared/design/trajectory-format.md (version 1).
"""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np

from simsci.errors import FormatError

FORMAT = "simsci.trajectories"
FORMAT_VERSION = 1
KINDS = ("state", "field", "events", "scene", "rollout")
ROOT_ATTRS = ("format", "format_version", "kind", "system", "meta")

#: episode-level names that are never step fields.
RESERVED_EPISODE_FIELDS = ("params", "label", "split")
SPLITS = {"train": 0, "val": 1, "validation": 1, "test": 2}

#: step fields whose axis 1 is padded to the file-wide maximum (kind=scene agents),
#: with the fill value of the padding.
PADDED_FIELDS = {"agents": np.nan, "agents_valid": False, "agents_history_valid": False}

#: step fields that must be bool.
BOOL_FIELDS = ("mask", "agents_valid", "agents_history_valid")

#: chunk-wise reading of big arrays in the checker and statistics (rows of bytes).
SCAN_BYTES = 16 * 2**20


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    """One stored array: ``shape`` per step (or per episode), ``dtype``, ``names`` of the
    last axis and ``units`` (both ``None`` when the file does not say)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    names: list[str] | None = None
    units: str | list[str] | None = None


def split_id(value, *, where: str) -> int:
    """0/1/2 or "train"/"val"/"test" -> 0/1/2."""
    if isinstance(value, str):
        if value not in SPLITS:
            raise ValueError(
                f"{where}: unknown split {value!r}; use 0/'train', 1/'val' or 2/'test'"
            )
        return SPLITS[value]
    arr = np.asarray(value)
    if arr.shape != () or arr.dtype.kind not in "iu" or int(arr) not in (0, 1, 2):
        raise ValueError(
            f"{where}: split must be one of 0 (train), 1 (val), 2 (test) or their names, "
            f"got {value!r}"
        )
    return int(arr)


def to_numpy(value, *, where: str) -> np.ndarray:
    """numpy arrays, torch tensors (any device, any dtype), lists and scalars -> ndarray.

    torch is only touched when the value is a tensor (so writing and reading do not
    import torch)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype == torch.bfloat16:  # numpy has no bfloat16
            value = value.float()
        return value.cpu().numpy()
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:  # ragged lists
        raise TypeError(f"{where}: cannot make an array of {type(value).__name__}: {exc}") from exc
    if arr.dtype.kind not in "biufc":
        raise TypeError(
            f"{where}: arrays must be numeric or bool, got dtype {arr.dtype} "
            f"({type(value).__name__}); store text in meta or encode it as integers"
        )
    return arr


def attr_str(value) -> str:
    """An HDF5 string attribute as str (h5py returns str or bytes)."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray) and value.shape == ():
        return attr_str(value[()])
    return str(value)


def json_attr(obj, key: str):
    """Parse the JSON attribute ``key`` of an h5py object; None when absent."""
    if key not in obj.attrs:
        return None
    return json.loads(attr_str(obj.attrs[key]))


def problem(path, rule: str, message: str, *, field=None, episode=None) -> FormatError:
    """A FormatError whose text names file, field, episode and rule."""
    where = [str(path)]
    if field is not None:
        where.append(f"field {field}")
    if episode is not None:
        where.append(f"episode {episode}")
    return FormatError(
        f"{', '.join(where)}: {message} [rule {rule}]",
        path=path,
        field=field,
        episode=episode,
        rule=rule,
    )


def row_shape_str(shape) -> str:
    return str(tuple(int(s) for s in shape))
