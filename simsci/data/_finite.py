"""Rule ``values-finite``: what non-finite values a file may hold, and where.

The format's conventions (docs/format.md, "Masks, missing values and padding"):

- ``x`` is the state or observation. A missing entry is NaN **and** ``mask`` False, so
  NaN is allowed only where ``mask`` is False (nowhere in a file without ``mask``), and
  ±inf is never allowed: it is neither a value nor a missing value.
- ``agents`` (kind scene) is padded with NaN on the agent axis and holds NaN for
  history frames that are not known: NaN is allowed where ``agents_valid`` (and, with a
  history axis, ``agents_history_valid``) is False; without ``agents_valid`` a padded
  agent cannot be told from a known one, and NaN is allowed everywhere. ±inf never.
- Every other floating step or episode field may hold NaN (the fill value: the last row
  of a rollout, unknown entries) but never ±inf.
- ``t`` has rules of its own (``t-finite``); integer and bool fields are always finite.

One function decides, for a block of one field's values and the matching block of its
validity fields, which entries break the rule. The writer calls it on each episode at
``append``, the checker on blocks of about 16 MiB of a stored file (vectorised; a block
without any non-finite value costs one ``isfinite``), so both refuse the same values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from pathlib import Path

import h5py
import numpy as np

from simsci.data._header import read_rows
from simsci.data._schema import SCAN_BYTES, problem
from simsci.errors import FormatError

#: step fields whose NaN means "not observed" only where these bool fields say so
VALIDITY_FIELDS = {"x": ("mask",), "agents": ("agents_valid", "agents_history_valid")}


def is_floating(dtype: np.dtype) -> bool:
    """Floating or complex: the dtypes that can hold NaN or ±inf."""
    return np.dtype(dtype).kind in "fc"


def _usable(arr, shape) -> bool:
    return arr is not None and arr.dtype == np.bool_ and arr.shape == shape


def observed_of(name: str, shape: tuple, validity: dict) -> np.ndarray | None:
    """Where the entries of step field ``name`` (block shape ``shape``) count as observed,
    broadcastable to ``shape``; None when the file does not say (``x`` without ``mask``:
    everything is observed; ``agents`` without ``agents_valid``: nothing is known).

    ``validity`` maps the field's validity field names (VALIDITY_FIELDS) that the file
    has to their blocks, or to None when they cannot be read as such. A validity field
    of the wrong dtype or shape is not trusted (the checker reports it under its own
    rule): NaN is then allowed and only ±inf breaks the rule."""
    if name == "x":
        if "mask" not in validity:
            return None
        mask = validity["mask"]
        return mask if _usable(mask, shape) else np.False_
    if name != "agents":
        return None
    out = None
    valid = validity.get("agents_valid")
    if len(shape) >= 3 and _usable(valid, shape[:2]):
        out = valid.reshape(valid.shape + (1,) * (len(shape) - 2))
    hist = validity.get("agents_history_valid")
    if len(shape) >= 4 and _usable(hist, shape[:3]):
        hist = hist.reshape(hist.shape + (1,) * (len(shape) - 3))
        out = hist if out is None else out & hist
    return out


def _nan_counts(name: str, observed: np.ndarray | None) -> bool:
    """Whether a NaN of step field ``name`` can break the rule at all."""
    return name == "x" or (name == "agents" and observed is not None)


def bad_entries(
    name: str, values: np.ndarray, observed: np.ndarray | None, *, step: bool = True
) -> np.ndarray | None:
    """The entries of ``values`` (a block of field ``name``) that break the rule, as a
    bool array of its shape; None when every entry is fine.

    ``observed`` is ``observed_of(...)`` for a step field (``step=True``); episode fields
    (``step=False``) may hold NaN and only ±inf breaks the rule."""
    if not is_floating(values.dtype) or values.size == 0:
        return None
    nonfinite = ~np.isfinite(values)
    if not nonfinite.any():  # the common case: one pass over the block
        return None
    bad = np.isinf(values)
    if step and _nan_counts(name, observed):
        nan = nonfinite & ~bad
        if observed is not None:
            nan &= observed
        bad |= nan
    return bad if bad.any() else None


def rule_and_fix(name: str, value, *, has_mask: bool, step: bool = True) -> tuple[str, str]:
    """The rule a bad value of field ``name`` breaks, and the fix."""
    if np.isnan(value):
        if name == "x" and has_mask:
            return (
                "x must be finite where mask is True",
                "a missing value is NaN with mask False: set mask False there, or drop those steps",
            )
        if name == "x":
            return (
                "x must be finite where it counts as observed, and without a mask every "
                "entry counts",
                "add a bool 'mask' field (False where x is missing), or drop those steps",
            )
        return (
            "agents must be finite where agents_valid (and agents_history_valid) say the "
            "agent and the frame are known",
            "set them False for the agents and frames that are not known",
        )
    what = "steps" if step else "episodes"
    if name == "x":
        return (
            "x must not hold ±inf: it is neither a value nor a missing value, which is NaN "
            "with mask False",
            f"replace it with a finite value, mark it missing, or drop those {what}",
        )
    return (
        f"{name} must not hold ±inf: floating fields hold finite values, or NaN as the fill value",
        f"replace it with a finite value or NaN, or drop those {what}",
    )


def _entry(name: str, step: int, entry: tuple) -> str:
    return f"{name}[{', '.join(str(i) for i in (step, *entry))}]"


@dataclasses.dataclass
class _Found:
    """What a scan of one field found: counts and the first offending entry."""

    values: int = 0
    rows: int = 0
    episodes: set = dataclasses.field(default_factory=set)
    first: tuple | None = None  # (flat row, entry index, value)

    def add(self, bad: np.ndarray, block: np.ndarray, start: int, episode_of) -> None:
        rows = np.flatnonzero(bad.reshape(len(bad), -1).any(axis=1))
        self.values += int(np.count_nonzero(bad))
        self.rows += len(rows)
        self.episodes.update(np.unique(episode_of(rows + start)).tolist())
        if self.first is None:
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            self.first = (idx[0] + start, idx[1:], block[idx])


def _blocks(n: int, row_bytes: int):
    step = max(1, SCAN_BYTES // max(1, row_bytes))
    for start in range(0, n, step):
        yield start, min(n, start + step)


def _row_bytes(dset: h5py.Dataset) -> int:
    return max(1, int(np.prod(dset.shape[1:], dtype=np.int64))) * dset.dtype.itemsize


def _scan(dset, name, validity_dsets, episode_of, step: bool) -> _Found:
    found = _Found()
    row_bytes = _row_bytes(dset) + sum(
        _row_bytes(v) for v in validity_dsets.values() if v is not None
    )
    for a, b in _blocks(dset.shape[0], row_bytes):
        block = dset[a:b]
        if np.isfinite(block).all():
            continue
        # the validity fields are read only for blocks that hold a non-finite value
        validity = {k: None if v is None else read_rows(v, a, b) for k, v in validity_dsets.items()}
        observed = observed_of(name, block.shape, validity) if step else None
        bad = bad_entries(name, block, observed, step=step)
        if bad is not None:
            found.add(bad, block, a, episode_of)
    return found


def _message(name: str, found: _Found, offsets: np.ndarray | None, *, has_mask, step) -> str:
    row, entry, value = found.first
    if step:
        ep = int(np.searchsorted(offsets, row, side="right") - 1)
        j = row - int(offsets[ep])
        where = f"{_entry(name, j, entry)} = {value} at step {j} (flat row {row})"
        counts = (
            f"{found.values} value(s) at {found.rows} step(s) in {len(found.episodes)} episode(s)"
        )
    else:
        where = f"{name}[{', '.join(str(i) for i in entry)}]" if entry else name
        where += f" = {value}"
        counts = f"{found.values} value(s) in {len(found.episodes)} episode(s)"
    rule, fix = rule_and_fix(name, value, has_mask=has_mask, step=step)
    return f"{where}; {rule} ({counts}); {fix}"


def _validity(f: h5py.File, name: str, dset: h5py.Dataset) -> dict:
    """The validity datasets of step field ``name`` that the file has; None for one that
    cannot be trusted (not a bool dataset with one row per step)."""
    out = {}
    for v in VALIDITY_FIELDS.get(name, ()):
        key = f"steps/{v}"
        if key in f:
            vd = f[key]
            ok = isinstance(vd, h5py.Dataset) and vd.dtype == np.bool_ and vd.ndim >= 1
            out[v] = vd if ok and vd.shape[0] == dset.shape[0] else None
    return out


def scan_values(
    f: h5py.File, path: Path, offsets: np.ndarray, fields: Collection[str] | None = None
) -> list[FormatError]:
    """Rule values-finite over an open file whose offsets passed the structural rules:
    one FormatError per offending field (the first entry, and how many are affected).

    ``fields`` limits the scan to those step / episode field names (None: all)."""
    out = []
    n_rows = int(offsets[-1])

    def episode_of(rows):
        return np.searchsorted(offsets, rows, side="right") - 1

    for group, step in (("steps", True), ("episodes", False)):
        if group not in f:
            continue
        for name, dset in f[group].items():
            if name in ("t", "offsets") or (fields is not None and name not in fields):
                continue
            if not isinstance(dset, h5py.Dataset) or not is_floating(dset.dtype):
                continue
            if dset.ndim == 0 or dset.shape[0] != (n_rows if step else len(offsets) - 1):
                continue  # reported by offsets-end / episodes-rows
            validity = _validity(f, name, dset) if step else {}
            found = _scan(dset, name, validity, episode_of if step else np.asarray, step)
            if found.first is None:
                continue
            row = found.first[0]
            episode = int(episode_of(row)) if step else row
            message = _message(
                name, found, offsets, has_mask=name == "x" and "mask" in validity, step=step
            )
            out.append(
                problem(path, "values-finite", message, field=f"{group}/{name}", episode=episode)
            )
    return out
