"""Reading trajectory files: ``open`` -> ``Trajectories`` (lazy, fork- and pickle-safe).

Design:

- One ``_Source`` per file holds the parsed header (fields, shapes, dtypes, names,
  offsets, statistics): plain data, read once at open and kept in memory. The h5py
  handle is opened on first use and re-opened when ``os.getpid()`` changes (a forked
  DataLoader worker never uses its parent's handle); pickling drops it.
- Reading episode i touches only its rows: one contiguous slice per field; offsets
  and dataset objects are cached per process.
- Views (``ds[a:b]``, ``ds[[i, j]]``, ``ds[mask]``) are ``Trajectories`` over an index
  array of global episode ids; nothing is read until an episode is asked for.
- A directory of ``part-*.h5`` shards is one dataset: episodes are numbered shard after
  shard in name order. Shards must share kind, system and schema (fields, per-step
  shapes, dtypes); only the agent axis of ``agents``/``agents_valid`` may differ and is
  padded (NaN / False) to the largest when read. ``meta`` is the first shard's (each
  shard's is in ``ds.shard_meta``); statistics are merged from the shards' counts.
- Episode-level arrays (params, label, split, ...) are loaded into memory on first use
  when under 256 MiB (per file), else read row by row.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import h5py
import numpy as np

from simsci.data._check import RDCC_NBYTES, load_header, no_shards, shard_files
from simsci.data._header import Header, read_rows, shard_mismatch
from simsci.data._schema import PADDED_FIELDS, FieldInfo, problem
from simsci.errors import unknown_name

_COLUMN_CACHE_BYTES = 256 * 2**20


class _Source:
    """One file: the header plus a lazily opened, per-process h5py handle."""

    def __init__(self, header: Header):
        self.header = header
        self.offsets = header.offsets
        self.n = len(header.offsets) - 1
        self._h5: h5py.File | None = None
        self._pid: int | None = None
        self._dsets: dict[str, h5py.Dataset] = {}
        self._columns: dict[str, np.ndarray] = {}
        self._graph_offsets: dict[str, np.ndarray] = {}

    def __getstate__(self):
        state = self.__dict__.copy()
        state.update(_h5=None, _pid=None, _dsets={})
        return state

    def file(self) -> h5py.File:
        if self._h5 is None or self._pid != os.getpid():
            # after fork the parent's handle must not be used (nor closed) here
            self._dsets = {}
            try:
                self._h5 = h5py.File(
                    self.header.path, "r", rdcc_nbytes=RDCC_NBYTES, rdcc_nslots=4099
                )
            except OSError as exc:
                raise problem(
                    self.header.path,
                    "damaged",
                    f"cannot be re-opened (moved, deleted or damaged since open?): {exc}",
                ) from exc
            self._pid = os.getpid()
        return self._h5

    def dset(self, key: str) -> h5py.Dataset:
        d = self._dsets.get(key)
        if d is None or self._pid != os.getpid():
            d = self.file()[key]
            self._dsets[key] = d
        return d

    def close(self) -> None:
        if self._h5 is not None and self._pid == os.getpid():
            self._h5.close()
        self._h5 = None
        self._pid = None
        self._dsets = {}

    def rows(self, key: str, start: int, stop: int, width: int | None = None) -> np.ndarray:
        arr = read_rows(self.dset(key), start, stop)
        if width is not None and arr.shape[1] < width:  # agents of a narrower shard
            name = key.rsplit("/", 1)[-1]
            pad = np.full(
                (arr.shape[0], width - arr.shape[1], *arr.shape[2:]), PADDED_FIELDS[name], arr.dtype
            )
            arr = np.concatenate([arr, pad], axis=1)
        return arr

    def column(self, name: str) -> np.ndarray | None:
        """The whole /episodes/<name> array when small enough to keep, else None."""
        col = self._columns.get(name)
        if col is None:
            d = self.dset(f"episodes/{name}")
            if d.size * d.dtype.itemsize > _COLUMN_CACHE_BYTES:
                return None
            col = d[()]
            self._columns[name] = col
        return col

    def episode_row(self, name: str, local: int) -> np.ndarray:
        col = self.column(name)
        if col is None:
            return np.asarray(self.dset(f"episodes/{name}")[local])
        return np.array(col[local])

    def graph_offsets(self, g: str) -> tuple[np.ndarray, np.ndarray]:
        if g not in self._graph_offsets:
            grp = self.file()[f"graphs/{g}"]
            self._graph_offsets[g] = np.stack(
                [grp["node_offsets"][()], grp["edge_offsets"][()]]
            ).astype(np.int64)
        off = self._graph_offsets[g]
        return off[0], off[1]


def _merge_stats(sources: Sequence[_Source]) -> dict[str, dict[str, np.ndarray]]:
    if len(sources) == 1:
        return {
            k: {"mean": v["mean"], "std": v["std"]}
            for k, v in sources[0].header.stats.items()
            if "mean" in v and "std" in v
        }
    if not all(s.header.has_stats for s in sources):
        return {}  # some shard was written without statistics: no honest merge
    out = {}
    names = set.union(*(set(s.header.stats) for s in sources))
    for name in sorted(names):
        # a shard without an entry had no train data for the field: it weighs 0
        parts = [s.header.stats[name] for s in sources if name in s.header.stats]
        if not all({"mean", "std", "count"} <= set(p) for p in parts):
            continue  # cannot weight shards without counts
        n = np.stack([np.asarray(p["count"], np.float64) for p in parts])
        mean = np.stack([np.nan_to_num(np.asarray(p["mean"], np.float64)) for p in parts])
        var = np.stack([np.nan_to_num(np.asarray(p["std"], np.float64)) ** 2 for p in parts])
        total = n.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            m = (n * mean).sum(axis=0) / total
            v = (n * (var + (mean - m) ** 2)).sum(axis=0) / total
        out[name] = {"mean": m, "std": np.sqrt(v)}
    return out


class Trajectories:
    """A dataset of N episodes (a file or a shard directory), or a lazy view of one.

    ``ds[i]`` is episode i as a dict of numpy arrays: the step fields (L rows each), the
    episode fields (one row) and ``"graphs"`` when the file has graphs (as given to
    ``TrajectoryWriter.append``, plus ``num_nodes``). ``ds[a:b]``, ``ds[[i, j]]`` and
    ``ds[bool_mask]`` are views. ``ds.read(i, fields)`` and ``ds.window(i, start,
    length, fields)`` read only what is asked for.
    """

    def __init__(self, sources: Sequence[_Source], ids: np.ndarray | None = None, *, path=None):
        self._sources = tuple(sources)
        counts = [s.n for s in self._sources]
        self._starts = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=self._starts[1:])
        self._ids = np.arange(self._starts[-1]) if ids is None else np.asarray(ids, np.int64)
        self.path = Path(path if path is not None else self._sources[0].header.path)
        first = self._sources[0].header
        self._steps = dict(first.steps)
        for name in PADDED_FIELDS:  # widest agent axis across shards
            if name in self._steps and len(self._sources) > 1:
                width = max(s.header.steps[name].shape[0] for s in self._sources)
                self._steps[name] = dataclasses.replace(
                    self._steps[name], shape=(width, *self._steps[name].shape[1:])
                )
        self._lengths: np.ndarray | None = None
        self._static: dict[str, np.ndarray] | None = None
        self._stats: dict | None = None

    # ------------------------------------------------------------- metadata
    def __len__(self) -> int:
        return len(self._ids)

    def __repr__(self) -> str:
        return (
            f"Trajectories({str(self.path)!r}, kind={self.kind!r}, system={self.system!r}, "
            f"episodes={len(self)}, step_fields={list(self.step_fields)})"
        )

    @property
    def kind(self) -> str:
        return self._sources[0].header.kind

    @property
    def system(self) -> str:
        return self._sources[0].header.system

    @property
    def meta(self) -> dict:
        """The first file's meta (a copy); every shard's is in ``shard_meta``."""
        return json.loads(json.dumps(self._sources[0].header.meta))

    @property
    def shard_meta(self) -> list[dict]:
        return [json.loads(json.dumps(s.header.meta)) for s in self._sources]

    @property
    def format_version(self) -> int:
        return self._sources[0].header.format_version

    @property
    def files(self) -> list[Path]:
        return [s.header.path for s in self._sources]

    @property
    def lengths(self) -> np.ndarray:
        """Episode lengths (int64, one per episode of this view)."""
        if self._lengths is None:
            every = np.concatenate([np.diff(s.offsets) for s in self._sources])
            self._lengths = every[self._ids]
            self._lengths.flags.writeable = False
        return self._lengths

    @property
    def step_fields(self) -> dict[str, FieldInfo]:
        """name -> FieldInfo(shape per step, dtype, names, units)."""
        return dict(self._steps)

    @property
    def episode_fields(self) -> dict[str, FieldInfo]:
        """name -> FieldInfo(shape per episode, dtype, names, units)."""
        return dict(self._sources[0].header.episodes)

    @property
    def graph_names(self) -> list[str]:
        return list(self._sources[0].header.graphs)

    @property
    def graph_fields(self) -> dict[str, dict[str, dict[str, FieldInfo]]]:
        """graph -> {"nodes": {feat: FieldInfo}, "edges": {feat: FieldInfo}}."""
        return self._sources[0].header.graphs

    @property
    def num_marks(self) -> int | None:
        marks = [s.header.num_marks for s in self._sources if s.header.num_marks is not None]
        return max(marks) if marks else None

    @property
    def static(self) -> dict[str, np.ndarray]:
        """The /static arrays (of the first file), loaded on first access."""
        if self._static is None:
            src = self._sources[0]
            self._static = {k: src.dset(f"static/{k}")[()] for k in src.header.static}
        return {k: v.copy() for k, v in self._static.items()}

    @property
    def static_fields(self) -> dict[str, FieldInfo]:
        return dict(self._sources[0].header.static)

    @property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """field -> {"mean": ..., "std": ...} over the train split (empty if not written)."""
        if self._stats is None:
            self._stats = _merge_stats(self._sources)
        return {k: {kk: np.array(vv) for kk, vv in v.items()} for k, v in self._stats.items()}

    def names(self, field: str) -> list[str] | None:
        """The names of the last axis of a step, episode or ``static/<name>`` field."""
        if field in self._steps:
            return self._steps[field].names
        if field in self.episode_fields:
            return self.episode_fields[field].names
        if field.startswith("static/") and field[7:] in self.static_fields:
            return self.static_fields[field[7:]].names
        raise unknown_name(
            "field",
            field,
            [*self._steps, *self.episode_fields, *(f"static/{k}" for k in self.static_fields)],
        )

    def column(self, name: str) -> np.ndarray:
        """An episode field for every episode of this view, e.g. ``ds.column("split")``."""
        if name not in self.episode_fields:
            raise unknown_name("episode field", name, self.episode_fields)
        info = self.episode_fields[name]
        out = np.empty((len(self._ids), *info.shape), info.dtype)
        which = np.searchsorted(self._starts, self._ids, side="right") - 1
        for s, src in enumerate(self._sources):
            sel = which == s
            if not sel.any():
                continue
            col = src.column(name)
            if col is None:
                col = src.dset(f"episodes/{name}")[()]
            out[sel] = col[self._ids[sel] - self._starts[s]]
        return out

    # --------------------------------------------------------------- indexing
    def _locate(self, i) -> tuple[_Source, int]:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"episode index must be an int, got {type(i).__name__}")
        n = len(self._ids)
        if not -n <= i < n:
            raise IndexError(f"episode {i} out of range for {n} episodes")
        g = int(self._ids[i])
        if len(self._sources) == 1:
            return self._sources[0], g
        s = int(np.searchsorted(self._starts, g, side="right")) - 1
        return self._sources[s], g - int(self._starts[s])

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            return self.read(key)
        if isinstance(key, slice):
            return Trajectories(self._sources, self._ids[key], path=self.path)
        sel = np.asarray(key)
        if sel.dtype == np.bool_:
            if sel.shape != (len(self),):
                raise IndexError(f"a boolean mask must have shape ({len(self)},), got {sel.shape}")
            return Trajectories(self._sources, self._ids[sel], path=self.path)
        if sel.dtype.kind in "iu" and sel.ndim == 1:
            n = len(self)
            if len(sel) and (sel.min() < -n or sel.max() >= n):
                raise IndexError(f"episode indices out of range for {n} episodes")
            return Trajectories(self._sources, self._ids[sel], path=self.path)
        raise TypeError(
            f"index with an int, a slice, a list of ints or a bool mask, got {type(key).__name__}"
        )

    def __iter__(self) -> Iterator[dict]:
        for i in range(len(self)):
            yield self.read(i)

    def _fields(self, fields: Iterable[str] | None) -> list[str]:
        valid = [*self._steps, *self.episode_fields] + (["graphs"] if self.graph_names else [])
        if fields is None:
            return valid
        if isinstance(fields, str):
            fields = (fields,)
        fields = list(fields)
        for f in fields:
            if f not in valid:
                raise unknown_name("field", f, valid)
        return fields

    def read(self, i: int, fields: Iterable[str] | None = None) -> dict:
        """Episode ``i`` (only ``fields`` when given: step, episode fields or "graphs")."""
        return self._read_checked(i, self._fields(fields))

    def window(self, i: int, start: int, length: int, fields: Iterable[str] | None = None) -> dict:
        """Steps ``start:start+length`` of episode ``i`` (episode fields whole)."""
        return self._read_checked(i, self._fields(fields), start, length)

    def _read_checked(self, i: int, fields: list[str], start: int = 0, length=None) -> dict:
        """``read``/``window`` with ``fields`` already validated (the Dataset's hot path)."""
        src, local = self._locate(i)
        a, b = int(src.offsets[local]), int(src.offsets[local + 1])
        if length is not None:
            if start < 0 or length < 0 or start + length > b - a:
                raise IndexError(
                    f"window start={start}, length={length} does not fit episode {i} of "
                    f"length {b - a}"
                )
            a, b = a + start, a + start + length
        return self._read(src, local, a, b, fields)

    def _read(self, src: _Source, local: int, a: int, b: int, fields: list[str]) -> dict:
        out = {}
        episode_fields = src.header.episodes
        for name in fields:
            if name in self._steps:
                width = None
                if name in PADDED_FIELDS and len(self._sources) > 1:
                    width = self._steps[name].shape[0]
                out[name] = src.rows(f"steps/{name}", a, b, width)
            elif name in episode_fields:
                out[name] = src.episode_row(name, local)
            elif name == "graphs":
                out["graphs"] = self._graphs(src, local)
        return out

    def _graphs(self, src: _Source, local: int) -> dict:
        out = {}
        for g, parts in src.header.graphs.items():
            node_off, edge_off = src.graph_offsets(g)
            na, nb = int(node_off[local]), int(node_off[local + 1])
            ea, eb = int(edge_off[local]), int(edge_off[local + 1])
            out[g] = {
                "nodes": {k: src.rows(f"graphs/{g}/nodes/{k}", na, nb) for k in parts["nodes"]},
                "edges": {k: src.rows(f"graphs/{g}/edges/{k}", ea, eb) for k in parts["edges"]},
                "num_nodes": nb - na,
            }
        return out

    # -------------------------------------------------------------- handles
    def close(self) -> None:
        """Close the h5py handles (they re-open lazily if the dataset is used again)."""
        for s in self._sources:
            s.close()

    def __enter__(self) -> Trajectories:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open(path: str | os.PathLike, *, check: bool = True) -> Trajectories:  # noqa: A001
    """Open a trajectory file or a directory of ``part-*.h5`` shards.

    ``check=True`` validates every rule of the format (check_file) and raises the first
    problem as a FormatError; ``check=False`` only checks the structure (root
    attributes, version, offsets, shapes), skipping the scans of per-step values.
    A missing path raises FileNotFoundError."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no trajectory file or shard directory at {str(path)!r}")
    files = shard_files(path)
    if not files:
        raise no_shards(path)
    headers = []
    for p in files:
        header, problems = load_header(p, deep=check)
        if problems:
            raise problems[0]
        headers.append(header)
    if len(headers) > 1:
        problems = shard_mismatch(headers)
        if problems:
            raise problems[0]
    return Trajectories([_Source(h) for h in headers], path=path)
