"""The header of a trajectory file and the shard-schema comparison.

The header is what ``open`` parses once per file and keeps in memory (kind, system,
meta, offsets and the fields' shapes, dtypes, names and statistics); both the reader
(one ``Trajectories`` over many shards) and the checker (``check_file`` of a shard
directory) compare headers to decide whether shards form one dataset; ``read_rows`` is
the row reader both (and the value scan of ``_finite``) use. This module sits below
them: it imports only ``_schema``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np

from simsci.data._schema import PADDED_FIELDS, FieldInfo, attr_str, json_attr, problem
from simsci.errors import FormatError


@dataclasses.dataclass
class Header:
    """The parsed header of one file: plain data, read once at open."""

    path: Path
    kind: str
    system: str
    meta: dict
    format_version: int
    offsets: np.ndarray
    steps: dict[str, FieldInfo]
    episodes: dict[str, FieldInfo]
    static: dict[str, FieldInfo]
    graphs: dict[str, dict[str, dict[str, FieldInfo]]]
    num_marks: int | None
    stats: dict[str, dict[str, np.ndarray]]
    has_stats: bool = False


def _info(dset: h5py.Dataset, per_row: bool = True) -> FieldInfo:
    return FieldInfo(
        shape=tuple(dset.shape[1:] if per_row else dset.shape),
        dtype=dset.dtype,
        names=json_attr(dset, "names"),
        units=json_attr(dset, "units"),
    )


def _datasets(group) -> dict[str, h5py.Dataset]:
    return {k: v for k, v in group.items() if isinstance(v, h5py.Dataset)}


def read_rows(dset: h5py.Dataset, start: int, stop: int) -> np.ndarray:
    """Rows start:stop of ``dset``.

    A plain slice goes through h5py's fast Cython path for numeric dtypes; bool (an
    HDF5 enum) misses that path, and one hand-built hyperslab read is quicker there."""
    if dset.dtype != np.bool_:
        return dset[start:stop]
    out = np.empty((stop - start, *dset.shape[1:]), dtype=np.bool_)
    if out.size:
        fspace = dset.id.get_space()
        fspace.select_hyperslab((start,) + (0,) * (out.ndim - 1), out.shape)
        dset.id.read(h5py.h5s.create_simple(out.shape), fspace, out)
    return out


def read_header(f: h5py.File, path: Path) -> Header:
    """The header of an open file that passed the checker's structural rules."""
    steps = {k: _info(v) for k, v in _datasets(f["steps"]).items()}
    episodes = {}
    if "episodes" in f:
        episodes = {k: _info(v) for k, v in _datasets(f["episodes"]).items() if k != "offsets"}
    static = {}
    if "static" in f:
        static = {k: _info(v, per_row=False) for k, v in _datasets(f["static"]).items()}
    graphs = {}
    for g, grp in f["graphs"].items() if "graphs" in f else ():
        graphs[g] = {
            part: ({k: _info(v) for k, v in _datasets(grp[part]).items()} if part in grp else {})
            for part in ("nodes", "edges")
        }
    num_marks = None
    if "steps/mark" in f:
        num_marks = int(np.asarray(f["steps/mark"].attrs["num_marks"]).item())
    stats = {}
    for name, grp in f["stats"].items() if "stats" in f else ():
        stats[name] = {k: grp[k][()] for k in ("mean", "std", "count") if k in grp}
    return Header(
        path=path,
        kind=attr_str(f.attrs["kind"]),
        system=attr_str(f.attrs["system"]),
        meta=json.loads(attr_str(f.attrs["meta"])),
        format_version=int(np.asarray(f.attrs["format_version"]).item()),
        offsets=f["episodes/offsets"][()].astype(np.int64),
        steps=steps,
        episodes=episodes,
        static=static,
        graphs=graphs,
        num_marks=num_marks,
        stats=stats,
        has_stats="stats" in f,
    )


def _strip(shape: tuple, name: str) -> tuple:
    return shape[1:] if name in PADDED_FIELDS and shape else shape


def _signature(h: Header) -> dict:
    """What shards of one dataset must share (the padded agent axis left out)."""
    return {
        "kind": h.kind,
        "system": h.system,
        "step fields": {k: (_strip(v.shape, k), v.dtype.str) for k, v in h.steps.items()},
        "episode fields": {k: (v.shape, v.dtype.str) for k, v in h.episodes.items()},
        "static arrays": {k: (v.shape, v.dtype.str) for k, v in h.static.items()},
        "graphs": {
            g: {p: {k: (v.shape, v.dtype.str) for k, v in d.items()} for p, d in parts.items()}
            for g, parts in h.graphs.items()
        },
    }


def shard_mismatch(headers: Sequence[Header]) -> list[FormatError]:
    """Problems that keep shards from being one dataset (rule shard-schema)."""
    first = headers[0]
    want = _signature(first)
    out = []
    for h in headers[1:]:
        have = _signature(h)
        for key in want:
            if have[key] != want[key]:
                out.append(
                    problem(
                        h.path,
                        "shard-schema",
                        f"{key} differ from the first shard {first.path.name}: {have[key]} vs "
                        f"{want[key]}; all shards of a directory must share one schema",
                    )
                )
    return out
