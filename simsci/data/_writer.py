"""Writing trajectory files (shared/design/trajectory-format.md, version 1).

Design choices the format leaves open (and why):

- **Schema from the first episode.** The first ``append`` fixes the set of step fields,
  episode fields and graphs, their per-step (per-row) shapes and dtypes (``t`` is stored
  as float64, ``mark`` as int64, ``split`` as uint8). Later episodes must carry the same
  fields with the same per-step shapes; a different dtype is cast to the first one when
  numpy's ``same_kind`` casting allows it (float32 into float64, int32 into int64), else
  it is an error. The only per-step shape allowed to vary is the agent axis of
  ``agents`` / ``agents_valid`` / ``agents_history_valid`` (kind=scene): it is padded
  to the file-wide maximum with NaN / False, as the contract says. ``agents`` is
  ``(L, A, F)`` or, with a motion history, ``(L, A, H, F)``.
- **Validation at the boundary.** Every episode is checked before anything of it is
  buffered, so a rejected episode leaves the writer as it was (append more or close).
  ``t`` must be 1-D, finite and strictly increasing. ``mask`` must be bool with the
  shape of ``x``. Rule values-finite (``_finite``, the checker scans files for the
  same): NaN in a floating ``x`` is allowed only where ``mask`` is False (without a
  ``mask`` field, ``x`` must be finite): the contract says readers never trust NaN
  alone; NaN in ``agents`` only where ``agents_valid`` / ``agents_history_valid`` are
  False; other floating fields may hold NaN (the fill values of the last rollout row,
  padded agents); no floating step or episode field holds ±inf. ``mark`` must be a
  non-negative integer below ``num_marks`` (when not given, ``num_marks`` is stored as
  max(mark)+1). For kind="events" ``mark`` is required; for
  kind="field" ``x`` must be (L, *grid, C).
- **Empty episodes** (length 0) are allowed: offsets may repeat, the contract only
  requires them non-decreasing. A reader returns zero-row arrays for them; windowed
  datasets skip them.
- **Buffering.** Appends are kept in memory and flushed to resizable datasets chunked
  along axis 0 (about ``chunk_bytes`` per chunk) once the buffer passes ``buffer_bytes``
  (default ``max(4 MiB, 4 * chunk_bytes)``). When the whole file fits in the buffer the
  chunks are sized to the data, so a small file is small on disk.
- **Statistics** (``stats=True``): for every floating step field except ``t`` (times
  are not normalised), mean and std (population, ddof=0) per entry of the last axis,
  over all steps and all other axes of the train split (``split == 0`` when the episodes
  carry ``split``, else all episodes), ignoring non-finite entries and entries where
  ``mask`` (for ``x``) or ``agents_valid`` (for ``agents``) is False. Accumulated while
  flushing with Chan's parallel update, stored as ``/stats/<field>/{mean,std,count}``
  (``count`` lets readers merge shards).
- **Atomicity.** The file is written to a hidden temporary sibling
  (``.NAME.tmp-PID-RANDOM``) and renamed over ``path`` on a successful ``close``. An
  exception inside ``with``, ``abort()``, a failing ``close`` or a writer dropped without
  ``close`` delete it. A killed process (SIGKILL, power loss) may leave the hidden
  temporary file behind, never a partial file under ``path``; stale ``.*.tmp-*`` files
  are safe to delete.
- **Names and units.** ``names={"x": ["x", "y", "z"]}`` / ``units={"x": "m"}`` are keyed
  by step or episode field name, ``"static/<name>"`` for static arrays and
  ``"graphs/<graph>/nodes/<feature>"`` (or ``edges``) for graph features; stored as
  JSON attributes ``names`` / ``units`` of the dataset.
- **Graphs.** ``episode["graphs"] = {name: {"nodes": {feat: (n, ...)}, "edges":
  {"index": (e, 2) int, feat: (e, ...)}}}``, optionally with ``"num_nodes"`` (required
  when there is no node feature). Every episode must carry the same graph names.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import h5py
import numpy as np

from simsci._io import check_parent_dir, is_unwritable, not_writable, temporary_sibling
from simsci._version import __version__
from simsci.data._finite import VALIDITY_FIELDS, bad_entries, observed_of, rule_and_fix
from simsci.data._schema import (
    BOOL_FIELDS,
    FORMAT,
    FORMAT_VERSION,
    KINDS,
    PADDED_FIELDS,
    RESERVED_EPISODE_FIELDS,
    row_shape_str,
    split_id,
    to_numpy,
)
from simsci.errors import unknown_name

_COMPRESSIONS = (None, "gzip", "lzf")


def _fmt(v) -> str:
    return np.format_float_positional(v, precision=8, trim="-") if np.isfinite(v) else str(v)


class _Stat:
    """Running count/mean/M2 per channel (Chan et al. parallel variance)."""

    def __init__(self, channels: int):
        self.n = np.zeros(channels, np.float64)
        self.mean = np.zeros(channels, np.float64)
        self.m2 = np.zeros(channels, np.float64)

    def update(self, v: np.ndarray) -> None:
        """``v`` (R, C) float64 with NaN for entries to ignore."""
        ok = ~np.isnan(v)
        n = ok.sum(axis=0).astype(np.float64)
        if not n.any():
            return
        safe = np.where(ok, v, 0.0)
        mean = safe.sum(axis=0) / np.maximum(n, 1.0)
        m2 = (np.where(ok, v - mean, 0.0) ** 2).sum(axis=0)
        total = self.n + n
        delta = mean - self.mean
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(total > 0, n / np.maximum(total, 1.0), 0.0)
            self.mean = self.mean + delta * frac
            self.m2 = self.m2 + m2 + delta**2 * self.n * frac
        self.n = total

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(self.n > 0, self.mean, np.nan)
            std = np.where(self.n > 0, np.sqrt(self.m2 / np.maximum(self.n, 1.0)), np.nan)
        return mean, std


class TrajectoryWriter:
    """Write episodes into one trajectory file, atomically.

    >>> with TrajectoryWriter("lorenz.h5", kind="state", system="lorenz63",
    ...                       names={"x": ["x", "y", "z"]}) as w:    # doctest: +SKIP
    ...     w.append({"t": t, "x": x, "params": np.array([10.0, 28.0, 8 / 3])})

    Parameters: ``kind`` one of "state", "field", "events", "scene", "rollout";
    ``system`` what generated the data; ``meta`` a JSON-able dict (the writer adds
    ``simsci_version`` and ``created_utc``); ``names`` / ``units`` per field;
    ``static`` arrays shared by all episodes (``/static``); ``episode_fields`` names of
    per-episode fields beyond params/label/split; ``compression`` None, "gzip" or
    "lzf"; ``chunk_bytes`` target chunk size along axis 0; ``stats`` write
    normalisation statistics; ``num_marks`` the number of event types K (marks must be
    in 0..K-1); ``overwrite`` replace an existing file on close (else FileExistsError);
    ``buffer_bytes`` flush the in-memory buffer to disk past this size (default
    ``max(4 MiB, 4 * chunk_bytes)``).
    See the module docstring for the validation rules.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        kind: str,
        system: str,
        meta: Mapping | None = None,
        names: Mapping[str, Iterable[str]] | None = None,
        units: Mapping[str, str | Iterable[str]] | None = None,
        static: Mapping[str, object] | None = None,
        episode_fields: Iterable[str] = (),
        compression: str | None = None,
        chunk_bytes: int = 2**20,
        stats: bool = True,
        num_marks: int | None = None,
        overwrite: bool = True,
        buffer_bytes: int | None = None,
    ):
        if kind not in KINDS:
            raise unknown_name("trajectory kind", kind, KINDS)
        if not isinstance(system, str) or not system:
            raise TypeError(f"system must be a non-empty string (e.g. 'lorenz63'), got {system!r}")
        meta = {} if meta is None else meta
        if not isinstance(meta, Mapping):
            raise TypeError(f"meta must be a dict, got {type(meta).__name__}")
        meta = dict(meta)
        meta.setdefault("simsci_version", __version__)
        meta.setdefault(
            "created_utc", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        )
        try:
            self._meta_json = json.dumps(meta, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"meta must be JSON-serialisable (str, numbers, lists, dicts; no NaN): {exc}"
            ) from exc
        if compression not in _COMPRESSIONS:
            raise ValueError(f"compression must be None, 'gzip' or 'lzf', got {compression!r}")
        if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be a positive int, got {chunk_bytes!r}")
        if num_marks is not None and (
            isinstance(num_marks, bool) or not isinstance(num_marks, int) or num_marks < 1
        ):
            raise ValueError(f"num_marks must be a positive int or None, got {num_marks!r}")
        if isinstance(episode_fields, str):
            raise TypeError(
                f"episode_fields must be a list of names, got the string {episode_fields!r}"
            )
        episode_fields = tuple(episode_fields)
        for name in episode_fields:
            if not isinstance(name, str) or not name or "/" in name or name in ("t", "graphs"):
                raise ValueError(
                    f"episode_fields: {name!r} cannot be an episode field name "
                    "(non-empty, no '/', not 't' or 'graphs')"
                )
        self._names = self._check_attr_map(names, "names", require_list=True)
        self._units = self._check_attr_map(units, "units", require_list=False)
        self._static = {}
        for key, value in (static or {}).items():
            if not isinstance(key, str) or not key or "/" in key:
                raise ValueError(f"static: array names must be non-empty strings, got {key!r}")
            self._static[key] = to_numpy(value, where=f"static[{key!r}]")

        self.path = check_parent_dir(path)
        if not overwrite and self.path.exists():
            raise FileExistsError(
                f"{str(self.path)!r} exists and overwrite=False; remove it, choose another "
                "path, or write a new shard (see shard_path)"
            )
        self.kind = kind
        self.system = system
        self._overwrite = overwrite
        self._episode_fields = set(RESERVED_EPISODE_FIELDS) | set(episode_fields)
        self._declared = episode_fields
        self._compression = compression
        self._chunk_bytes = chunk_bytes
        if buffer_bytes is None:
            buffer_bytes = max(4 * 2**20, 4 * chunk_bytes)
        if isinstance(buffer_bytes, bool) or not isinstance(buffer_bytes, int) or buffer_bytes < 1:
            raise ValueError(f"buffer_bytes must be a positive int or None, got {buffer_bytes!r}")
        self._flush_bytes = buffer_bytes
        self._num_marks = num_marks
        self._want_stats = bool(stats)

        self._n = 0
        self._lengths: list[int] = []
        self._steps: dict[str, tuple[tuple, np.dtype]] | None = None
        self._eps: dict[str, tuple[tuple, np.dtype]] = {}
        self._graphs: dict[str, dict[str, dict[str, tuple[tuple, np.dtype]]]] = {}
        self._graph_counts: dict[str, tuple[list[int], list[int]]] = {}
        self._buf: dict[str, list[np.ndarray]] = {}
        self._buf_bytes = 0
        self._buf_lengths: list[int] = []
        self._buf_train: list[bool] = []
        self._stats: dict[str, _Stat] = {}
        self._max_mark = -1
        self._dsets: dict[str, h5py.Dataset] = {}
        self._closed = False
        self._tmp = temporary_sibling(self.path)
        try:
            self._h5 = h5py.File(self._tmp, "w", track_order=True)
        except OSError as exc:
            self._closed = True  # nothing to discard: __del__ has no file to remove
            if is_unwritable(exc, self._tmp, self.path):
                raise not_writable(self.path, exc) from exc
            raise

    # ------------------------------------------------------------------ public
    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __len__(self) -> int:
        """Episodes appended so far."""
        return self._n

    def __del__(self):
        # A writer dropped without close() is discarded, never half-renamed.
        with contextlib.suppress(Exception):
            if not self._closed:
                self.abort()

    def append(self, episode: Mapping) -> None:
        """Validate one episode (a dict; see the class docstring) and buffer it."""
        self._require_open()
        idx = self._n
        where = f"{self.path}: episode {idx}"
        if not isinstance(episode, Mapping):
            raise TypeError(f"{where}: an episode must be a dict of arrays, got {type(episode)}")
        steps, eps, graphs = self._validate(episode, where)
        if self._steps is None:
            self._steps = {k: (v.shape[1:], v.dtype) for k, v in steps.items()}
            self._eps = {k: (v.shape, v.dtype) for k, v in eps.items()}
            self._graphs = {
                g: {
                    part: {k: (v.shape[1:], v.dtype) for k, v in d[part].items()}
                    for part in ("nodes", "edges")
                }
                for g, d in graphs.items()
            }
            try:
                self._check_names_keys()
            except ValueError:
                self._steps, self._eps, self._graphs = None, {}, {}
                raise
            self._graph_counts = {g: ([], []) for g in graphs}
        length = len(steps["t"])
        for name, arr in steps.items():
            self._push(f"steps/{name}", arr)
        for name, arr in eps.items():
            self._push(f"episodes/{name}", arr)
        for g, d in graphs.items():
            for part in ("nodes", "edges"):
                for k, arr in d[part].items():
                    self._push(f"graphs/{g}/{part}/{k}", arr)
            self._graph_counts[g][0].append(d["num_nodes"])
            self._graph_counts[g][1].append(len(d["edges"]["index"]))
        if "mark" in steps and length:
            self._max_mark = max(self._max_mark, int(steps["mark"].max()))
        self._lengths.append(length)
        self._buf_lengths.append(length)
        self._buf_train.append(int(eps["split"]) == 0 if "split" in eps else True)
        self._n += 1
        if self._buf_bytes >= self._flush_bytes:
            self._flush(final=False)

    def extend(self, episodes: Iterable[Mapping]) -> None:
        """``append`` each episode in turn."""
        for ep in episodes:
            self.append(ep)

    def close(self) -> Path:
        """Flush, write offsets/attributes/statistics, and rename into place."""
        if self._closed:
            return self.path
        try:
            self._finish()
            self._h5.close()
            # durable before it is visible: after a crash the final name holds old or new
            fd = os.open(self._tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            if not self._overwrite and self.path.exists():
                raise FileExistsError(
                    f"{str(self.path)!r} appeared while writing and overwrite=False; "
                    "the new file was discarded"
                )
            os.replace(self._tmp, self.path)
            self._closed = True
        except BaseException:
            self.abort()
            raise
        return self.path

    def abort(self) -> None:
        """Discard everything written; a file already at ``path`` is untouched."""
        self._closed = True
        with contextlib.suppress(Exception):
            self._h5.close()
        with contextlib.suppress(FileNotFoundError):
            self._tmp.unlink()
        self._buf.clear()

    # --------------------------------------------------------------- validation
    def _require_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"writer for {str(self.path)!r} is closed; open a new one")

    @staticmethod
    def _check_attr_map(mapping, what: str, *, require_list: bool) -> dict:
        if mapping is None:
            return {}
        if not isinstance(mapping, Mapping):
            raise TypeError(f"{what} must be a dict of field name -> value, got {mapping!r}")
        out = {}
        for key, value in mapping.items():
            if not isinstance(key, str):
                raise TypeError(f"{what}: keys must be field names (str), got {key!r}")
            if isinstance(value, str) and not require_list:
                out[key] = value
                continue
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise TypeError(
                    f"{what}[{key!r}] must be a list of strings naming the last axis"
                    + ("" if require_list else " or one string")
                    + f", got {value!r}"
                )
            out[key] = list(value)
        return out

    def _resolve_attr_key(self, key: str) -> tuple[str, tuple] | None:
        """names/units key -> (dataset path, row shape); None when unknown."""
        if self._steps and key in self._steps:
            return f"steps/{key}", self._steps[key][0]
        if key in self._eps:
            return f"episodes/{key}", self._eps[key][0]
        if key.startswith("static/") and key[7:] in self._static:
            return key, self._static[key[7:]].shape
        parts = key.split("/")
        if len(parts) == 4 and parts[0] == "graphs" and parts[1] in self._graphs:
            part = self._graphs[parts[1]].get(parts[2], {})
            if parts[3] in part:
                return key, part[parts[3]][0]
        return None

    def _check_names_keys(self) -> None:
        for what, mapping in (("names", self._names), ("units", self._units)):
            for key, value in mapping.items():
                res = self._resolve_attr_key(key)
                if res is None:
                    valid = [*self._steps, *self._eps, *(f"static/{s}" for s in self._static)]
                    raise ValueError(
                        f"{what}[{key!r}]: no such field in the first episode; valid keys: "
                        f"{', '.join(valid)} (graph features as graphs/<name>/nodes/<feat>)"
                    )
                shape = res[1]
                if what == "names" or isinstance(value, list):
                    width = shape[-1] if shape else 1
                    if len(value) != width:
                        raise ValueError(
                            f"{what}[{key!r}] has {len(value)} entries but the field's last "
                            f"axis has {width} (per-step shape {row_shape_str(shape)})"
                        )

    def _validate(self, episode: Mapping, where: str):
        for key in episode:
            if not isinstance(key, str) or not key or "/" in key:
                raise ValueError(
                    f"{where}: field names must be non-empty str without '/', got {key!r}"
                )
        if "t" not in episode:
            raise ValueError(f"{where}: the step field 't' (times, shape (L,)) is required")
        t = to_numpy(episode["t"], where=f"{where}, field t")
        if t.ndim != 1 or t.dtype.kind not in "iuf":
            raise ValueError(
                f"{where}, field t: t must be a 1-D real array (L,), got shape "
                f"{t.shape} dtype {t.dtype}"
            )
        t = t.astype(np.float64, copy=False)
        length = len(t)
        bad = ~np.isfinite(t)
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(f"{where}, field t: t must be finite; t[{j}] = {t[j]}")
        step = np.diff(t) <= 0
        if step.any():
            j = int(np.argmax(step)) + 1
            raise ValueError(
                f"{where}, field t: t must be strictly increasing inside an episode; "
                f"t[{j - 1}] = {_fmt(t[j - 1])} is followed by t[{j}] = {_fmt(t[j])}; "
                "sort the steps or drop duplicated times"
            )
        steps = {"t": t}
        eps = {}
        graphs = {}
        for name, value in episode.items():
            if name == "t":
                continue
            if name == "graphs":
                graphs = self._validate_graphs(value, where)
                continue
            if name in self._episode_fields:
                eps[name] = self._episode_value(name, value, where)
                continue
            arr = to_numpy(value, where=f"{where}, field {name}")
            if arr.ndim == 0 or arr.shape[0] != length:
                raise ValueError(
                    f"{where}, field {name}: a step field must have the episode's length "
                    f"{length} (len(t)) on axis 0, got shape {arr.shape}; per-episode values "
                    "go in params/label/split or a name listed in episode_fields"
                )
            steps[name] = arr
        for name in self._declared:
            if name not in eps:
                raise ValueError(
                    f"{where}: episode field {name!r} (listed in episode_fields) is missing"
                )
        steps = self._check_steps(steps, where)
        self._check_against_schema(steps, eps, graphs, where)
        self._check_values(steps, eps, where)  # after the casts: float32 may overflow
        return steps, eps, graphs

    @staticmethod
    def _check_values(steps: dict, eps: dict, where: str) -> None:
        """Rule values-finite (``_finite``): the values the checker would refuse."""
        for group, step in ((steps, True), (eps, False)):
            for name, arr in group.items():
                if name == "t":
                    continue  # checked on its own
                observed = None
                if step:
                    validity = {v: steps[v] for v in VALIDITY_FIELDS.get(name, ()) if v in steps}
                    observed = observed_of(name, arr.shape, validity)
                bad = bad_entries(name, arr, observed, step=step)
                if bad is None:
                    continue
                pos = tuple(int(i) for i in np.argwhere(bad)[0])
                rule, fix = rule_and_fix(name, arr[pos], has_mask="mask" in steps, step=step)
                at = f"index {pos}" if pos else "the episode"
                raise ValueError(
                    f"{where}, field {name}: {name} is {arr[pos]} at {at} "
                    f"({int(np.count_nonzero(bad))} such value(s)); {rule}; {fix}"
                )

    def _episode_value(self, name: str, value, where: str) -> np.ndarray:
        if name == "split":
            return np.uint8(split_id(value, where=f"{where}, field split"))
        arr = to_numpy(value, where=f"{where}, field {name}")
        if name == "params":
            if arr.dtype.kind not in "iuf":
                raise TypeError(
                    f"{where}, field params: params must be real numbers, got dtype {arr.dtype}"
                )
            if arr.dtype.kind != "f":
                arr = arr.astype(np.float64)
            if arr.ndim == 0:
                arr = arr.reshape(1)
            if arr.ndim != 1:
                raise ValueError(
                    f"{where}, field params: params must be a vector (P,) per episode, got "
                    f"shape {arr.shape}; flatten it and name the entries with names="
                )
        return arr

    def _check_steps(self, steps: dict, where: str) -> dict:
        for name in BOOL_FIELDS:
            if name in steps and steps[name].dtype != np.bool_:
                raise TypeError(
                    f"{where}, field {name}: {name} must be bool, got dtype "
                    f"{steps[name].dtype}; pass {name}.astype(bool)"
                )
        x = steps.get("x")
        if "mask" in steps:
            if x is None:
                raise ValueError(f"{where}, field mask: a mask needs an 'x' field to mask")
            if steps["mask"].shape != x.shape:
                raise ValueError(
                    f"{where}, field mask: mask must have the shape of x {x.shape}, got "
                    f"{steps['mask'].shape}"
                )
        if self.kind == "field" and x is not None and x.ndim < 3:
            raise ValueError(
                f"{where}, field x: kind='field' stores x as (L, *grid, C) with channels "
                f"last, got shape {x.shape}; add a channel axis (x[..., None])"
            )
        if self.kind == "events" and "mark" not in steps:
            raise ValueError(f"{where}: kind='events' needs a 'mark' step field (L,) int")
        if "mark" in steps:
            mark = steps["mark"]
            if mark.dtype.kind not in "iu" or mark.ndim != 1:
                raise TypeError(
                    f"{where}, field mark: mark must be a 1-D integer array (L,), got shape "
                    f"{mark.shape} dtype {mark.dtype}"
                )
            mark = mark.astype(np.int64, copy=False)
            steps["mark"] = mark
            if len(mark):
                lo, hi = int(mark.min()), int(mark.max())
                k = self._num_marks
                if lo < 0 or (k is not None and hi >= k):
                    j = int(np.argmax((mark < 0) | (mark >= (k if k is not None else 2**62))))
                    rng = f"0..{k - 1} (num_marks={k})" if k is not None else ">= 0"
                    raise ValueError(
                        f"{where}, field mark: mark[{j}] = {int(mark[j])} is out of range; "
                        f"marks must lie in {rng}"
                    )
        if "agents" in steps:
            agents = steps["agents"]
            if agents.ndim < 3:
                raise ValueError(
                    f"{where}, field agents: agents must be (L, A, F) or with a history "
                    f"axis (L, A, H, F), got {agents.shape}"
                )
            valid = steps.get("agents_valid")
            if valid is not None and valid.shape != agents.shape[:2]:
                raise ValueError(
                    f"{where}, field agents_valid: must have shape (L, A) = "
                    f"{agents.shape[:2]}, got {valid.shape}"
                )
        return steps

    def _validate_graphs(self, value, where: str) -> dict:
        if not isinstance(value, Mapping):
            raise TypeError(f"{where}, graphs: must be a dict graph name -> graph dict")
        out = {}
        for g, graph in value.items():
            gw = f"{where}, graph {g!r}"
            if not isinstance(g, str) or not g or "/" in g:
                raise ValueError(f"{gw}: graph names must be non-empty str without '/'")
            if not isinstance(graph, Mapping) or "edges" not in graph:
                raise ValueError(
                    f"{gw}: a graph is {{'nodes': {{feat: (n, ...)}}, 'edges': {{'index': "
                    "(e, 2), feat: (e, ...)}}}}"
                )
            unknown = set(graph) - {"nodes", "edges", "num_nodes"}
            if unknown:
                raise ValueError(f"{gw}: unknown keys {sorted(unknown)}; use nodes/edges/num_nodes")
            nodes = {
                k: to_numpy(v, where=f"{gw}, nodes/{k}")
                for k, v in (graph.get("nodes") or {}).items()
            }
            edges = {k: to_numpy(v, where=f"{gw}, edges/{k}") for k, v in graph["edges"].items()}
            counts = {k: v.shape[0] if v.ndim else -1 for k, v in nodes.items()}
            if "num_nodes" in graph:
                num_nodes = int(graph["num_nodes"])
            elif counts:
                num_nodes = next(iter(counts.values()))
            else:
                raise ValueError(f"{gw}: give node features or 'num_nodes'")
            for k, c in counts.items():
                if c != num_nodes:
                    raise ValueError(
                        f"{gw}, nodes/{k}: has {c} rows, expected {num_nodes} (one per node)"
                    )
            if num_nodes < 0:
                raise ValueError(f"{gw}: num_nodes must be >= 0, got {num_nodes}")
            index = edges.get("index")
            if (
                index is None
                or index.ndim != 2
                or index.shape[1] != 2
                or (index.dtype.kind not in "iu" and index.size)
            ):
                raise ValueError(
                    f"{gw}, edges/index: must be an int array (n_edges, 2) of local node ids, "
                    f"got {None if index is None else (index.shape, index.dtype)}"
                )
            index = index.astype(np.int64)
            edges["index"] = index
            if index.size and (index.min() < 0 or index.max() >= num_nodes):
                j = int(np.argmax(((index < 0) | (index >= num_nodes)).any(axis=1)))
                raise ValueError(
                    f"{gw}, edges/index: edge {j} = {index[j].tolist()} refers to a node "
                    f"outside 0..{num_nodes - 1}"
                )
            for k, v in edges.items():
                if v.ndim == 0 or v.shape[0] != len(index):
                    raise ValueError(
                        f"{gw}, edges/{k}: must have one row per edge ({len(index)}), got "
                        f"shape {v.shape}"
                    )
            out[g] = {"nodes": nodes, "edges": edges, "num_nodes": num_nodes}
        return out

    def _cast(self, arr: np.ndarray, dtype: np.dtype, what: str) -> np.ndarray:
        if arr.dtype == dtype:
            return arr
        if np.can_cast(arr.dtype, dtype, "same_kind"):
            return arr.astype(dtype)
        raise TypeError(
            f"{what}: dtype {arr.dtype} does not match the file's {dtype} (set by the first "
            f"episode); convert it with .astype({dtype.name!r})"
        )

    def _check_against_schema(self, steps: dict, eps: dict, graphs: dict, where: str) -> None:
        if self._steps is None:
            return
        for label, have, want in (
            ("step", steps, self._steps),
            ("episode", eps, self._eps),
            ("graph", graphs, self._graphs),
        ):
            if set(have) != set(want):
                missing = sorted(set(want) - set(have))
                extra = sorted(set(have) - set(want))
                raise ValueError(
                    f"{where}: {label} fields differ from the first episode's: missing "
                    f"{missing}, unexpected {extra}; every episode carries the same fields"
                )
        for name, arr in steps.items():
            shape, dtype = self._steps[name]
            got = arr.shape[1:]
            if name in PADDED_FIELDS:
                got, shape = got[:0] + got[1:], shape[1:]
            if got != shape:
                raise ValueError(
                    f"{where}, field {name}: per-step shape {row_shape_str(arr.shape[1:])} "
                    f"differs from the first episode's {row_shape_str(self._steps[name][0])}"
                )
            steps[name] = self._cast(arr, dtype, f"{where}, field {name}")
        for name, arr in eps.items():
            shape, dtype = self._eps[name]
            if arr.shape != shape:
                raise ValueError(
                    f"{where}, field {name}: shape {arr.shape} differs from the first "
                    f"episode's {shape}"
                )
            eps[name] = self._cast(arr, dtype, f"{where}, field {name}")
        for g, d in graphs.items():
            for part in ("nodes", "edges"):
                want = self._graphs[g][part]
                if set(d[part]) != set(want):
                    raise ValueError(
                        f"{where}, graph {g!r}: {part} features {sorted(d[part])} differ from "
                        f"the first episode's {sorted(want)}"
                    )
                for k, arr in d[part].items():
                    if arr.shape[1:] != want[k][0]:
                        raise ValueError(
                            f"{where}, graph {g!r}, {part}/{k}: per-row shape "
                            f"{arr.shape[1:]} differs from the first episode's {want[k][0]}"
                        )
                    d[part][k] = self._cast(arr, want[k][1], f"{where}, graph {g!r} {part}/{k}")

    # ---------------------------------------------------------------- storage
    def _push(self, key: str, arr: np.ndarray) -> None:
        # a copy: simulators often refill the array they just appended
        arr = np.array(arr, order="C", copy=True)
        self._buf.setdefault(key, []).append(arr)
        self._buf_bytes += arr.nbytes

    def _group(self, path: str) -> h5py.Group:
        """The group at ``path``, created (keeping insertion order) when missing."""
        grp = self._h5
        for part in path.split("/"):
            grp = grp[part] if part in grp else grp.create_group(part, track_order=True)
        return grp

    def _create(self, key: str, row_shape: tuple, dtype: np.dtype, rows: int, final: bool):
        row_bytes = max(1, int(np.prod(row_shape, dtype=np.int64))) * dtype.itemsize
        chunk_rows = max(1, self._chunk_bytes // row_bytes)
        if final:
            chunk_rows = min(chunk_rows, max(1, rows))
        kwargs = {}
        if self._compression == "gzip":
            kwargs.update(compression="gzip", compression_opts=4, shuffle=True)
        elif self._compression == "lzf":
            kwargs.update(compression="lzf", shuffle=True)
        parent, name = key.rsplit("/", 1)
        if key.startswith("steps/") and name in PADDED_FIELDS:
            kwargs["fillvalue"] = PADDED_FIELDS[name]
        dset = self._group(parent).create_dataset(
            name,
            shape=(0, *row_shape),
            maxshape=(None,) * (1 + len(row_shape)),
            chunks=(chunk_rows, *(max(1, s) for s in row_shape)),
            dtype=dtype,
            **kwargs,
        )
        self._dsets[key] = dset
        return dset

    def _flush(self, *, final: bool) -> None:
        data = {}
        for key, arrays in self._buf.items():
            if key.startswith("episodes/"):
                data[key] = np.stack(arrays)
                continue
            name = key.rsplit("/", 1)[-1]
            if key.startswith("steps/") and name in PADDED_FIELDS:
                width = max(a.shape[1] for a in arrays)
                if key in self._dsets:
                    width = max(width, self._dsets[key].shape[1])
                fill = PADDED_FIELDS[name]
                arrays = [
                    a
                    if a.shape[1] == width
                    else np.concatenate(
                        [a, np.full((a.shape[0], width - a.shape[1], *a.shape[2:]), fill, a.dtype)],
                        axis=1,
                    )
                    for a in arrays
                ]
            data[key] = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
        for key, arr in data.items():
            dset = self._dsets.get(key)
            if dset is None:
                dset = self._create(key, arr.shape[1:], arr.dtype, len(arr), final)
            start = dset.shape[0]
            if arr.ndim > 1 and arr.shape[1] > dset.shape[1]:  # more agents than so far
                dset.resize(arr.shape[1], axis=1)
            dset.resize(start + len(arr), axis=0)
            if len(arr):
                dset[start:] = arr
        if self._want_stats:
            self._update_stats(data)
        self._buf = {}
        self._buf_bytes = 0
        self._buf_lengths = []
        self._buf_train = []

    def _update_stats(self, data: dict) -> None:
        if not self._buf_lengths:
            return
        train = np.repeat(np.asarray(self._buf_train), self._buf_lengths)
        if not train.any():
            return
        for key, arr in data.items():
            name = key[6:]
            if not key.startswith("steps/") or name == "t" or arr.dtype.kind != "f":
                continue
            v = arr[train].astype(np.float64)
            if name == "x" and "steps/mask" in data:
                v[~data["steps/mask"][train]] = np.nan
            if name == "agents" and "steps/agents_valid" in data:
                v[~data["steps/agents_valid"][train]] = np.nan
            v[~np.isfinite(v)] = np.nan
            channels = arr.shape[-1] if arr.ndim > 1 else 1
            stat = self._stats.setdefault(name, _Stat(channels))
            stat.update(v.reshape(-1, channels))

    def _finish(self) -> None:
        self._flush(final=True)
        h5 = self._h5
        if self._steps is None:  # no episode: an empty but valid file
            self._group("steps").create_dataset(
                "t", shape=(0,), maxshape=(None,), chunks=(1,), dtype="f8"
            )
        offsets = np.zeros(self._n + 1, np.int64)
        np.cumsum(self._lengths, out=offsets[1:])
        self._group("episodes").create_dataset("offsets", data=offsets)
        for g, (nodes, edges) in self._graph_counts.items():
            for name, counts in (("node_offsets", nodes), ("edge_offsets", edges)):
                off = np.zeros(self._n + 1, np.int64)
                np.cumsum(counts, out=off[1:])
                self._group(f"graphs/{g}").create_dataset(name, data=off)
        for key, arr in self._static.items():
            self._group("static").create_dataset(key, data=arr)
        if self._steps is not None:
            for what, mapping in (("names", self._names), ("units", self._units)):
                for key, value in mapping.items():
                    dpath = self._resolve_attr_key(key)[0]
                    h5[dpath].attrs[what] = json.dumps(value)
        else:
            for what, mapping in (("names", self._names), ("units", self._units)):
                for key, value in mapping.items():
                    if key.startswith("static/") and key[7:] in self._static:
                        h5[key].attrs[what] = json.dumps(value)
        if "steps/mark" in h5:
            k = self._num_marks if self._num_marks is not None else self._max_mark + 1
            h5["steps/mark"].attrs["num_marks"] = np.int64(k)
        if self._want_stats:  # the group marks "statistics were computed", even if empty
            grp = self._group("stats")
            grp.attrs["split"] = "train" if "split" in self._eps else "all"
            for name, stat in self._stats.items():
                mean, std = stat.result()
                if not self._steps[name][0]:  # scalar per step -> scalar stats
                    mean, std, count = mean[0], std[0], stat.n[0]
                else:
                    count = stat.n
                sub = grp.create_group(name, track_order=True)
                sub.create_dataset("mean", data=mean)
                sub.create_dataset("std", data=std)
                sub.create_dataset("count", data=np.asarray(count, np.int64))
        h5.attrs["format"] = FORMAT
        h5.attrs["format_version"] = np.int64(FORMAT_VERSION)
        h5.attrs["kind"] = self.kind
        h5.attrs["system"] = self.system
        h5.attrs["meta"] = self._meta_json


def write(path: str | os.PathLike, episodes: Iterable[Mapping], **writer_kwargs) -> Path:
    """Write ``episodes`` (dicts, see TrajectoryWriter) into ``path`` in one call."""
    with TrajectoryWriter(path, **writer_kwargs) as w:
        w.extend(episodes)
    return w.path


def shard_path(directory: str | os.PathLike, rank: int) -> Path:
    """``directory/part-00000.h5`` for rank 0, ``part-00001.h5`` for rank 1, ...

    A directory of such shards (same schema) is read as one dataset by ``open``."""
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 0:
        raise ValueError(f"rank must be an int >= 0, got {rank!r}")
    return Path(directory) / f"part-{int(rank):05d}.h5"


def rank_shard_path(directory: str | os.PathLike) -> Path:
    """The shard this process should write in a distributed run.

    Uses ``torch.distributed.get_rank()`` when a process group is initialised (else rank
    0), creates ``directory`` if needed, and returns ``shard_path(directory, rank)``:

    >>> with TrajectoryWriter(rank_shard_path("runs/lorenz"), kind="state",
    ...                       system="lorenz63") as w:             # doctest: +SKIP
    ...     w.extend(my_rank_episodes)
    """
    rank = 0
    try:
        # torch is heavy and optional here: writing trajectory files never needs it
        import torch.distributed as dist
    except ImportError:  # torch without distributed support
        dist = None
    if dist is not None and dist.is_available() and dist.is_initialized():
        rank = dist.get_rank()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return shard_path(directory, rank)
