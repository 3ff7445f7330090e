"""Checking files against the format contract (shared/design/trajectory-format.md).

``check_file`` collects every problem (one FormatError per rule and field, naming the
first offending episode and how many are affected) instead of stopping at the first;
``open(check=True)`` raises the first. Big arrays (``t``, ``mark``, edge ids) are read in
blocks of about 16 MiB, and every test is vectorised over the flat arrays.

Three depths: the structure (root attributes, offsets, shapes; ``open(check=False)``),
the scans of ``t``, ``mark`` and edge ids (``open(check=True)``), and the scan of every
floating value (rule values-finite, ``_finite``; ``check_file`` and ``check_finite``).
The last reads the whole file, so ``open`` leaves it to ``check_file`` and to
``check_finite``, which training calls for the fields it reads.

Rule ids: file-missing, not-hdf5, damaged, root-attrs, format, format-version, kind,
meta, offsets, offsets-start, offsets-decrease, offsets-end, steps-shape, episodes-rows,
split-range, t-missing, t-dtype, t-finite, t-increasing, mask-shape, mask-dtype,
mark-dtype, num-marks, mark-range, agents-valid-shape, graph-offsets, graph-edges, stats,
attrs, values-finite, read-error, no-shards, shard-schema.

``load_header`` (check, then parse the header) is what the reader opens files with; the
header and the shard-schema comparison live one level down in ``_header``, so the
imports run one way: ``_schema`` < ``_header`` < ``_check`` < ``_reader``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import h5py
import numpy as np

from simsci._version import __version__
from simsci.data._finite import scan_values
from simsci.data._header import Header, read_header, shard_mismatch
from simsci.data._schema import (
    FORMAT,
    FORMAT_VERSION,
    KINDS,
    ROOT_ATTRS,
    SCAN_BYTES,
    attr_str,
    problem,
)
from simsci.errors import FormatError, unknown_name

#: raw-data chunk cache per dataset for readers (chunks are ~1 MiB).
RDCC_NBYTES = 8 * 2**20


def _sniff(path: Path) -> str:
    """What a non-HDF5 file looks like, from its first bytes."""
    try:
        with path.open("rb") as fh:
            head = fh.read(16)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if not head:
        return "an empty file"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (numpy .npz? torch .pt?)"
    if head.startswith(b"\x93NUMPY"):
        return "a numpy .npy file"
    if head.startswith(b"\x80"):
        return "a Python pickle"
    if head.startswith(b"CDF"):
        return "a netCDF-3 file"
    try:
        head.decode("utf-8")
        return "a text file"
    except UnicodeDecodeError:
        return "an unknown binary format"


def open_h5(path: Path) -> tuple[h5py.File | None, FormatError | None]:
    """Open ``path`` read-only, turning every failure into a FormatError."""
    if not path.exists():
        return None, problem(
            path, "file-missing", "no such file; check the path (or generate the data first)"
        )
    if path.is_dir():
        return None, problem(path, "not-hdf5", "is a directory; give a file or a shard directory")
    try:
        is_hdf5 = h5py.is_hdf5(path)
    except OSError:
        is_hdf5 = False
    if not is_hdf5:
        return None, problem(
            path,
            "not-hdf5",
            f"is not an HDF5 file (it looks like {_sniff(path)}); simsci trajectory files "
            "are HDF5 written by simsci.data.write / TrajectoryWriter",
        )
    try:
        return h5py.File(path, "r", rdcc_nbytes=RDCC_NBYTES, rdcc_nslots=4099), None
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        return None, problem(
            path,
            "damaged",
            "is an HDF5 file that cannot be opened: it is truncated or damaged (an "
            f"interrupted copy or download?); re-copy or regenerate it. h5py said: {exc}",
        )


def _describe(obj) -> str:
    if isinstance(obj, h5py.Dataset):
        return f"dtype {obj.dtype} shape {obj.shape}"
    return f"a {type(obj).__name__}"


def _blocks(n: int, row_bytes: int):
    step = max(1, SCAN_BYTES // max(1, row_bytes))
    for start in range(0, n, step):
        yield start, min(n, start + step)


def _episode_of(offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Episode index of flat rows (empty episodes never own a row)."""
    return np.searchsorted(offsets, rows, side="right") - 1


class _Checker:
    """The rules of one open file. ``deep`` adds the scans of ``t``, ``mark`` and edge
    ids; ``values`` the scan of the floating values (rule values-finite), limited to the
    step / episode field names in ``fields`` when given."""

    def __init__(self, f: h5py.File, path: Path, deep: bool, values: bool = False, fields=None):
        self.f = f
        self.path = path
        self.deep = deep
        self.values = values
        self.fields = fields
        self.problems: list[FormatError] = []
        self.offsets: np.ndarray | None = None

    def add(self, rule, message, *, field=None, episode=None) -> None:
        self.problems.append(problem(self.path, rule, message, field=field, episode=episode))

    def run(self) -> list[FormatError]:
        try:
            if not self.root():
                return self.problems
            self.offsets_rule()
            self.episodes_rule()
            self.steps_rule()
            self.graphs_rule()
            self.stats_rule()
            self.attrs_rule()
            if self.values and self.offsets is not None:
                self.problems.extend(scan_values(self.f, self.path, self.offsets, self.fields))
        except (OSError, RuntimeError, KeyError, ValueError, TypeError, AttributeError) as exc:
            # h5py raises these on damaged data blocks; AttributeError on a group where a
            # dataset belongs
            self.add(
                "read-error",
                f"reading failed ({type(exc).__name__}: {exc}); the file is damaged or "
                "not written by simsci",
            )
        return self.problems

    # root attributes and version; False when nothing further can be trusted
    def root(self) -> bool:
        attrs = self.f.attrs
        missing = [a for a in ROOT_ATTRS if a not in attrs]
        if missing:
            self.add(
                "root-attrs",
                f"missing root attribute(s) {missing}; a simsci trajectory file has "
                f"{list(ROOT_ATTRS)} (was it written by simsci.data?)",
            )
            return False
        if attr_str(attrs["format"]) != FORMAT:
            self.add(
                "format",
                f"root attribute format is {attr_str(attrs['format'])!r}, expected {FORMAT!r}",
            )
            return False
        try:
            version = int(np.asarray(attrs["format_version"]).item())
        except (TypeError, ValueError):
            self.add(
                "format-version",
                f"format_version {attrs['format_version']!r} is not an integer",
            )
            return False
        meta = None
        try:
            meta = json.loads(attr_str(attrs["meta"]))
            if not isinstance(meta, dict):
                self.add("meta", f"meta must be a JSON object, got {type(meta).__name__}")
                meta = None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            self.add("meta", f"meta is not valid JSON ({exc}); it must be a JSON object string")
        if version > FORMAT_VERSION:
            wrote = (meta or {}).get("simsci_version")
            by = f"simsci {wrote}" if wrote else "a newer simsci"
            self.add(
                "format-version",
                f"format_version {version} was written by {by}; this simsci {__version__} "
                f"reads format_version <= {FORMAT_VERSION}: a newer simsci is needed "
                f"(pip install -U simsci{'>=' + wrote if wrote else ''})",
            )
            return False
        if version < 1:
            self.add("format-version", f"format_version {version} is invalid (versions start at 1)")
            return False
        kind = attr_str(attrs["kind"])
        if kind not in KINDS:
            self.add("kind", f"kind {kind!r} is not one of {list(KINDS)}")
        return True

    def offsets_rule(self) -> None:
        f = self.f
        if "episodes/offsets" not in f:
            self.add(
                "offsets",
                "/episodes/offsets is missing (int64 (N+1,), required)",
                field="episodes/offsets",
            )
            return
        ds = f["episodes/offsets"]
        if not isinstance(ds, h5py.Dataset) or ds.ndim != 1 or ds.dtype.kind not in "iu":
            self.add(
                "offsets",
                f"offsets must be a 1-D integer dataset, got {_describe(ds)}",
                field="episodes/offsets",
            )
            return
        off = ds[()].astype(np.int64)
        if len(off) == 0:
            self.add(
                "offsets", "offsets is empty; it needs N+1 >= 1 entries", field="episodes/offsets"
            )
            return
        ok = True
        if off[0] != 0:
            self.add("offsets-start", f"offsets[0] = {off[0]}, must be 0", field="episodes/offsets")
            ok = False
        dec = np.flatnonzero(np.diff(off) < 0)
        if len(dec):
            i = int(dec[0])
            self.add(
                "offsets-decrease",
                f"offsets decrease at episode {i}: offsets[{i}] = {off[i]} > offsets[{i + 1}] = "
                f"{off[i + 1]} ({len(dec)} episode(s) affected); offsets must never decrease",
                field="episodes/offsets",
                episode=i,
            )
            ok = False
        if "steps" in f:
            for name, dset in f["steps"].items():
                if not isinstance(dset, h5py.Dataset) or not dset.shape:
                    self.add(
                        "steps-shape",
                        f"every /steps entry must be a dataset with a step axis, got "
                        f"{_describe(dset)}",
                        field=f"steps/{name}",
                    )
                    ok = False
                elif dset.shape[0] != off[-1]:
                    over = np.flatnonzero(off > dset.shape[0])
                    ep = int(over[0]) - 1 if len(over) else None
                    self.add(
                        "offsets-end",
                        f"offsets end at {off[-1]} but steps/{name} has {dset.shape[0]} rows"
                        + (f"; episode {ep} runs past the end" if ep is not None else "")
                        + "; offsets[-1] must equal the length of every /steps array",
                        field=f"steps/{name}",
                        episode=ep,
                    )
                    ok = False
        if ok:
            self.offsets = off

    @property
    def n(self) -> int | None:
        return None if self.offsets is None else len(self.offsets) - 1

    def episodes_rule(self) -> None:
        if self.n is None or "episodes" not in self.f:
            return
        for name, dset in self.f["episodes"].items():
            if name == "offsets" or not isinstance(dset, h5py.Dataset):
                continue
            if not dset.shape or dset.shape[0] != self.n:
                self.add(
                    "episodes-rows",
                    f"episodes/{name} has shape {dset.shape}, expected {self.n} rows "
                    "(one per episode)",
                    field=f"episodes/{name}",
                )
            elif name == "split":
                split = dset[()]
                bad = np.flatnonzero((split < 0) | (split > 2))
                if len(bad):
                    self.add(
                        "split-range",
                        f"split[{bad[0]}] = {split[bad[0]]}; split ids are 0 train, 1 val, "
                        f"2 test ({len(bad)} episode(s) affected)",
                        field="episodes/split",
                        episode=int(bad[0]),
                    )

    def steps_rule(self) -> None:
        f = self.f
        if "steps/t" not in f:
            self.add("t-missing", "/steps/t is missing (float64 (S,), required)", field="steps/t")
        else:
            t = f["steps/t"]
            if not isinstance(t, h5py.Dataset) or t.dtype.kind != "f" or t.ndim != 1:
                self.add(
                    "t-dtype",
                    f"t must be a 1-D float dataset, got {_describe(t)}",
                    field="steps/t",
                )
            elif self.deep and self.offsets is not None:
                self.scan_t(t)
        if "steps/mask" in f:
            mask = f["steps/mask"]
            if mask.dtype != np.bool_:
                self.add("mask-dtype", f"mask must be bool, got {mask.dtype}", field="steps/mask")
            x_shape = f["steps/x"].shape if "steps/x" in f else None
            if mask.shape != x_shape:
                self.add(
                    "mask-shape",
                    f"mask has shape {mask.shape} but x has {x_shape}; mask must have the "
                    "shape of x (True where observed)",
                    field="steps/mask",
                )
        if "steps/mark" in f:
            self.mark_rule(f["steps/mark"])
        if "steps/agents_valid" in f and "steps/agents" in f:
            av, ag = f["steps/agents_valid"], f["steps/agents"]
            if av.shape != ag.shape[:2]:
                self.add(
                    "agents-valid-shape",
                    f"agents_valid has shape {av.shape}, expected agents' (S, A) = {ag.shape[:2]}",
                    field="steps/agents_valid",
                )

    def scan_t(self, t: h5py.Dataset) -> None:
        off = self.offsets
        starts = off[:-1][np.diff(off) > 0]  # first row of every non-empty episode
        nonfinite: list[int] = []
        nonincr: list[int] = []
        n_nf = n_ni = 0
        prev = None
        for a, b in _blocks(t.shape[0], 8):
            block = t[a:b].astype(np.float64)
            bad = np.flatnonzero(~np.isfinite(block)) + a
            n_nf += len(bad)
            if len(bad) and not nonfinite:
                nonfinite.append(int(bad[0]))
            ext = block if prev is None else np.concatenate([[prev], block])
            rows = np.flatnonzero(np.diff(ext) <= 0) + (a + 1 if prev is None else a)
            rows = rows[~np.isin(rows, starts)]
            n_ni += len(rows)
            if len(rows) and not nonincr:
                nonincr.append(int(rows[0]))
            prev = block[-1] if len(block) else prev
        if nonfinite:
            r = nonfinite[0]
            ep = int(_episode_of(off, np.array([r]))[0])
            self.add(
                "t-finite",
                f"t[{r - off[ep]}] = {t[r]} (flat row {r}); t must be finite "
                f"({n_nf} row(s) affected)",
                field="steps/t",
                episode=ep,
            )
        if nonincr:
            r = nonincr[0]
            ep = int(_episode_of(off, np.array([r]))[0])
            j = r - off[ep]
            self.add(
                "t-increasing",
                f"t is not strictly increasing inside the episode: t[{j - 1}] = {t[r - 1]} "
                f"is followed by t[{j}] = {t[r]} ({n_ni} row(s) affected)",
                field="steps/t",
                episode=ep,
            )

    def mark_rule(self, mark: h5py.Dataset) -> None:
        if mark.dtype.kind not in "iu" or mark.ndim != 1:
            self.add(
                "mark-dtype",
                f"mark must be a 1-D integer array, got dtype {mark.dtype} shape {mark.shape}",
                field="steps/mark",
            )
            return
        if "num_marks" not in mark.attrs:
            self.add(
                "num-marks",
                "steps/mark has no num_marks attribute (the number of event types K)",
                field="steps/mark",
            )
            return
        k = int(np.asarray(mark.attrs["num_marks"]).item())
        if not self.deep:
            return
        first, count = None, 0
        for a, b in _blocks(mark.shape[0], 8):
            block = mark[a:b]
            bad = np.flatnonzero((block < 0) | (block >= k))
            count += len(bad)
            if len(bad) and first is None:
                first = int(bad[0]) + a
        if first is not None:
            ep = None
            if self.offsets is not None:
                ep = int(_episode_of(self.offsets, np.array([first]))[0])
            self.add(
                "mark-range",
                f"mark = {mark[first]} at flat row {first} is outside 0..{k - 1} "
                f"(num_marks = {k}; {count} row(s) affected)",
                field="steps/mark",
                episode=ep,
            )

    def graphs_rule(self) -> None:
        if "graphs" not in self.f or self.n is None:
            return
        for g, grp in self.f["graphs"].items():
            field = f"graphs/{g}"
            offs = {}
            for name, part in (("node_offsets", "nodes"), ("edge_offsets", "edges")):
                if name not in grp:
                    self.add("graph-offsets", f"{name} is missing", field=f"{field}/{name}")
                    continue
                off = grp[name][()].astype(np.int64)
                if off.shape != (self.n + 1,):
                    self.add(
                        "graph-offsets",
                        f"{name} has shape {off.shape}, expected (N+1,) = ({self.n + 1},)",
                        field=f"{field}/{name}",
                    )
                    continue
                if off[0] != 0 or (np.diff(off) < 0).any():
                    dec = np.flatnonzero(np.diff(off) < 0)
                    self.add(
                        "graph-offsets",
                        f"{name} must start at 0 and never decrease",
                        field=f"{field}/{name}",
                        episode=int(dec[0]) if len(dec) else None,
                    )
                    continue
                if part in grp:
                    for feat, dset in grp[part].items():
                        if dset.shape[0] != off[-1]:
                            self.add(
                                "graph-offsets",
                                f"{name} ends at {off[-1]} but {part}/{feat} has "
                                f"{dset.shape[0]} rows",
                                field=f"{field}/{part}/{feat}",
                            )
                offs[name] = off
            if "edges/index" not in grp:
                self.add("graph-edges", "edges/index is missing", field=f"{field}/edges/index")
            else:
                idx = grp["edges/index"]
                if idx.ndim != 2 or idx.shape[1:] != (2,) or idx.dtype.kind not in "iu":
                    self.add(
                        "graph-edges",
                        f"edges/index must be int (E, 2), got {idx.dtype} {idx.shape}",
                        field=f"{field}/edges/index",
                    )
                elif self.deep and len(offs) == 2 and idx.shape[0] == offs["edge_offsets"][-1]:
                    self.scan_edges(idx, offs["node_offsets"], offs["edge_offsets"], field)

    def scan_edges(self, idx, node_off, edge_off, field) -> None:
        nodes_per_ep = np.diff(node_off)
        first, count = None, 0
        for a, b in _blocks(idx.shape[0], 16):
            block = idx[a:b]
            ep = _episode_of(edge_off, np.arange(a, b))
            limit = nodes_per_ep[ep][:, None]
            bad = np.flatnonzero(((block < 0) | (block >= limit)).any(axis=1))
            count += len(bad)
            if len(bad) and first is None:
                r = int(bad[0])
                first = (
                    int(ep[r]),
                    r + a - int(edge_off[ep[r]]),
                    block[r].tolist(),
                    int(limit[r, 0]),
                )
        if first is not None:
            ep, j, ids, n = first
            self.add(
                "graph-edges",
                f"edge {j} = {ids} refers to a node outside the episode's 0..{n - 1} "
                f"(edge ids are local to each episode's graph; {count} edge(s) affected)",
                field=f"{field}/edges/index",
                episode=ep,
            )

    def stats_rule(self) -> None:
        if "stats" not in self.f:
            return
        for name, grp in self.f["stats"].items():
            field = f"stats/{name}"
            if f"steps/{name}" not in self.f:
                self.add(
                    "stats", f"statistics for {name!r}, which is not a step field", field=field
                )
                continue
            shape = self.f[f"steps/{name}"].shape[1:]
            want = (shape[-1],) if shape else ()
            for part in ("mean", "std"):
                if part not in grp:
                    self.add("stats", f"{part} is missing", field=field)
                elif grp[part].shape != want:
                    self.add(
                        "stats",
                        f"{part} has shape {grp[part].shape}, expected {want} (the last axis "
                        f"of steps/{name})",
                        field=f"{field}/{part}",
                    )

    def attrs_rule(self) -> None:
        def visit(name, obj):
            if not isinstance(obj, h5py.Dataset):
                return
            for key in ("names", "units"):
                if key not in obj.attrs:
                    continue
                try:
                    value = json.loads(attr_str(obj.attrs[key]))
                except (json.JSONDecodeError, UnicodeDecodeError):
                    self.add("attrs", f"attribute {key!r} is not valid JSON", field=name)
                    continue
                if key == "names" and (
                    not isinstance(value, list) or (obj.ndim >= 2 and len(value) != obj.shape[-1])
                ):
                    self.add(
                        "attrs",
                        f"names {value!r} must be a JSON list naming the last axis "
                        f"({obj.shape[-1] if obj.ndim else 0} entries)",
                        field=name,
                    )

        self.f.visititems(visit)


def check_one(path: str | os.PathLike, *, deep: bool = True) -> list[FormatError]:
    """Every problem of one file; ``deep=False`` skips the scans of per-step values."""
    path = Path(path)
    f, err = open_h5(path)
    if err is not None:
        return [err]
    with f:
        return _Checker(f, path, deep, values=deep).run()


def load_header(path: Path, deep: bool) -> tuple[Header | None, list[FormatError]]:
    """Open once: check (shallow or deep) and, when valid, parse the header."""
    f, err = open_h5(path)
    if err is not None:
        return None, [err]
    with f:
        problems = _Checker(f, path, deep).run()
        if problems:
            return None, problems
        try:
            return read_header(f, path), []
        except (OSError, RuntimeError, KeyError, ValueError, TypeError, AttributeError) as exc:
            return None, [
                problem(path, "read-error", f"reading the header failed ({exc}); file damaged?")
            ]


def schema_mismatch(files: Sequence[Path]) -> list[FormatError]:
    """The problems of the first file that fails the structural rules, else the problems
    that keep the (valid) files from being one dataset."""
    headers = []
    for p in files:
        h, problems = load_header(p, deep=False)
        if problems:
            return problems
        headers.append(h)
    return shard_mismatch(headers)


def shard_files(path: Path) -> list[Path]:
    """The files of a dataset: ``[path]`` for a file, sorted ``part-*.h5`` for a directory."""
    if path.is_dir():
        return sorted(p for p in path.glob("part-*.h5") if p.is_file())
    return [path]


def no_shards(path: Path) -> FormatError:
    """The problem of a dataset directory without shards."""
    return problem(
        path,
        "no-shards",
        "directory holds no part-*.h5 shards; a dataset directory holds part-00000.h5, "
        "part-00001.h5, ... (see simsci.data.shard_path)",
    )


def check_file(path: str | os.PathLike) -> list[FormatError]:
    """Check a file (or a directory of shards) against the format contract.

    Returns every problem found (an empty list when the data is valid), each a
    FormatError naming the file, field, episode and rule id (``err.rule``). Every value
    is read (rule values-finite scans the floating fields); ``open(check=True)`` runs
    the same rules but that scan."""
    path = Path(path)
    if path.is_dir():
        files = shard_files(path)
        if not files:
            return [no_shards(path)]
        problems = []
        for p in files:
            problems.extend(check_one(p))
        if not problems:
            problems.extend(schema_mismatch(files))
        return problems
    return check_one(path)


def _field_names(f: h5py.File) -> list[str]:
    names = list(f["steps"]) if "steps" in f else []
    if "episodes" in f:
        names += [k for k in f["episodes"] if k != "offsets"]
    return names


def _finite_problems(path: Path, fields: frozenset[str] | None) -> list[FormatError]:
    """The structural problems of one file, else its problems of t-finite and
    values-finite (for ``fields``, or every field)."""
    f, err = open_h5(path)
    if err is not None:
        return [err]
    with f:
        checker = _Checker(f, path, deep=False)
        problems = checker.run()  # the structure: offsets are needed to name episodes
        if problems:
            return problems
        if fields is not None:
            known = _field_names(f)
            for name in sorted(fields - set(known)):
                raise unknown_name("field", name, known)
        try:
            if (fields is None or "t" in fields) and "steps/t" in f:
                checker.scan_t(f["steps/t"])
                problems = [p for p in checker.problems if p.rule == "t-finite"]
            return problems + scan_values(f, path, checker.offsets, fields)
        except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
            return [
                problem(
                    path,
                    "read-error",
                    f"reading failed ({type(exc).__name__}: {exc}); the file is damaged",
                )
            ]


def check_finite(source, fields: Iterable[str] | None = None) -> None:
    """Refuse data whose values training cannot use: raise the first problem of rule
    values-finite (or t-finite) as a FormatError, with the message ``check_file`` and
    ``simsci data check`` give for it (file, field, episode, step and the fix).

    ``source`` is a path (a file or a directory of ``part-*.h5`` shards) or an opened
    ``Trajectories`` (its files are scanned whole, also for a view). ``fields`` names the
    step and episode fields to scan, e.g. ``("t", "x", "params")``: the ones a model
    reads; None scans every one. A name the data does not have is an error
    (UnknownNameError, a ValueError, listing the names it has). Integer and bool fields
    are always finite. Reads every value of the named fields, in blocks of about 16 MiB
    (vectorised); a file that breaks a structural rule raises that problem instead.

    >>> check_finite("data/lorenz.h5", fields=("t", "x"))     # doctest: +SKIP
    """
    if fields is not None:
        if isinstance(fields, str):
            fields = (fields,)
        fields = frozenset(fields)
    files = getattr(source, "files", None)
    if files is None:
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(f"no trajectory file or shard directory at {str(path)!r}")
        files = shard_files(path)
        if not files:
            raise no_shards(path)
    for p in files:
        problems = _finite_problems(Path(p), fields)
        if problems:
            raise problems[0]
