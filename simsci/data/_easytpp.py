"""Importer of EasyTPP's event-sequence data into kind="events" trajectory files.

``import_easytpp(src, dst)`` reads the data layout of EasyTPP (the temporal point
process library, github.com/ant-research/EasyTemporalPointProcess, "Gatech format") and
writes one kind="events" file: ``/steps/t`` float64 (the event times),
``/steps/mark`` int64 (the event types, attribute ``num_marks`` = K),
``/episodes/split`` and ``/episodes/source_index`` (the sequence's position in its
source file, 0-based).

The layout read:

- **Pickles** ``train.pkl``, ``dev.pkl``, ``test.pkl``: each a dict with ``dim_process``
  (K, the number of event types) and a key named after the split (``"train"``...)
  holding a list of sequences; a sequence is a list of event dicts with
  ``time_since_start``, ``time_since_last_event`` and ``type_event`` (0..K-1). Other
  keys (``idx_event``, ``time_since_last_same_event``, ``args``, the other splits'
  keys, often empty lists) are ignored, as EasyTPP's loader ignores them.
- **JSON** (the HuggingFace variant, ``train.json``...): a list of records (or JSON
  lines, one record per line), one per sequence, each with ``dim_process``,
  ``seq_len``, ``seq_idx`` and the lists ``time_since_start``, ``time_since_last_event``
  and ``type_event``.

``src`` is a directory holding any subset of the split files (``train``, ``dev`` --
also named ``valid`` or ``validation`` -- and ``test``, each ``.pkl``/``.pickle``,
``.json`` or ``.jsonl``; one file per split) or one such file. train/dev/test become
split 0/1/2 and are written in that order, each in source order. A single pickle whose
name is not a split name contributes every split key it holds with sequences; a single
JSON file whose name is not a split name is written without ``/episodes/split``.

**Pickles are code.** Loading a pickle can run arbitrary code chosen by whoever made the
file. The pickles are read with a restricted unpickler that builds only plain
containers (dict, list, tuple, set), numbers, strings, bytes and numpy scalars and
arrays -- everything EasyTPP's data files contain -- and refuses anything else (a class,
a function) with an error naming it, before it is called. Prefer the JSON variant for
data from untrusted sources.

Choices (and why):

- **Time** is ``time_since_start`` (as float64), the absolute time EasyTPP's models
  read; it is stored as is (no shift to 0). ``time_since_last_event`` is not stored: it
  is checked against the differences of the times instead (``check_gaps=True``):
  for events 1..L-1, ``|gap[j] - (t[j] - t[j-1])|`` must not exceed ``GAP_RTOL`` times
  max(1, largest |t| of the sequence) -- far above float32 round-off, far below a wrong
  gap. The first event's gap is not checked (EasyTPP sets it to 0, to t[0] or to a gap
  from before the sequence). A disagreement is an error: such a file says two things
  about its times. EasyTPP's synthetic Hawkes JSON stores per-type gaps there;
  ``check_gaps=False`` imports such files (``time_since_last_event`` may then be
  absent) and records how many gaps disagreed.
- **Ties.** The format needs strictly increasing times; EasyTPP data sometimes repeat a
  time. ``ties="error"`` (default) refuses them naming file, sequence and event;
  ``"drop"`` keeps the first event of each run of equal times and drops the later ones;
  ``"jitter"`` moves the k-th repeat of a time to ``t + k * eps`` with
  ``eps = max(JITTER_RELATIVE * span, JITTER_ABSOLUTE, 4 ulp(max |t|))`` (span = last
  minus first time of the sequence; the ulp term keeps the shift representable for
  large times such as Unix time stamps) and is an error when that would reach the next
  distinct time. Decreasing times are always an error. ``meta["import"]["ties"]``
  records the policy and the counts.
- **Empty sequences** carry nothing a point-process model can use and usually mean a
  broken export: an error, or left out with ``skip_empty=True`` (counted in meta).
- **Length cap.** ``max_events`` (None: none) refuses longer sequences, or keeps their
  first ``max_events`` events with ``truncate=True``; applied after the ties are
  handled (counted in meta).
- **Checks** are errors (FormatError, a ValueError) naming the file, the sequence
  (0-based position in its file) and the event, with the rule, what arrived and the
  fix: type_event outside 0..K-1 or not an integer, non-numeric or non-finite times,
  lists of different lengths, a ``seq_len`` that does not match, ``dim_process``
  missing, not a positive integer or different between files or records, missing keys,
  unreadable files. Rule ids: import-layout, import-corrupt, import-unsafe, import-time,
  import-gap, import-mark, import-empty, import-length.
- **Memory and atomicity.** Every source file is read and checked before the output is
  opened (EasyTPP files are small enough to load whole, as EasyTPP itself does); the
  output is written through TrajectoryWriter to a temporary sibling and renamed when
  complete, so an error leaves ``dst`` as it was.
"""

from __future__ import annotations

import builtins
import codecs
import collections
import importlib
import json
import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simsci._io import atomic_path, check_parent_dir
from simsci._version import __version__
from simsci.data._reader import open as open_trajectories
from simsci.data._writer import TrajectoryWriter
from simsci.errors import FormatError

#: relative agreement of time_since_last_event with the differences of time_since_start
GAP_RTOL = 1e-5
#: ties="jitter": the step between repeats of a time, relative to the sequence's span ...
JITTER_RELATIVE = 1e-9
#: ... and at least this (absolute)
JITTER_ABSOLUTE = 1e-12

TIES = ("error", "jitter", "drop")
SPLIT_IDS = {"train": 0, "dev": 1, "test": 2}
#: file stems accepted for each split
_STEMS = {"train": "train", "dev": "dev", "valid": "dev", "validation": "dev", "test": "test"}
_SUFFIXES = {".pkl": "pickle", ".pickle": "pickle", ".json": "json", ".jsonl": "jsonl"}
_T, _GAP, _TYPE = "time_since_start", "time_since_last_event", "type_event"


# ------------------------------------------------------------------------ errors
def _error(path, rule: str, message: str, *, seq=None, event=None, split=None, field=None):
    where = [str(path)]
    if seq is not None:
        where.append(f"sequence {seq}" + (f" of split {split!r}" if split else ""))
    if event is not None:
        where.append(f"event {event}")
    return FormatError(
        f"{', '.join(where)}: {message} [rule {rule}]",
        path=path,
        field=field,
        episode=seq,
        rule=rule,
    )


# ------------------------------------------------------------- restricted pickles
_SAFE_BUILTINS = frozenset(
    {"dict", "list", "tuple", "set", "frozenset", "int", "float", "complex", "bool", "str"}
    | {"bytes", "bytearray"}
)
_NUMPY_MODULES = {
    "numpy.core.multiarray": "multiarray",
    "numpy._core.multiarray": "multiarray",
    "numpy.core.numeric": "numeric",
    "numpy._core.numeric": "numeric",
}
_NUMPY_NAMES = {"multiarray": {"scalar", "_reconstruct"}, "numeric": {"_frombuffer"}}


def _numpy_internal(part: str, name: str):
    for prefix in ("numpy._core", "numpy.core"):  # numpy 2, then numpy 1
        try:
            return getattr(importlib.import_module(f"{prefix}.{part}"), name)
        except (ImportError, AttributeError):
            continue
    raise AttributeError(f"numpy has no {part}.{name}")


class _SafeUnpickler(pickle.Unpickler):
    """Builds only containers, numbers, strings, bytes and numpy scalars/arrays."""

    def __init__(self, file, path: Path):
        # latin-1: EasyTPP's pickles are often Python 2 pickles (as EasyTPP loads them)
        super().__init__(file, encoding="latin1")
        self._path = path

    def _latin1(self, text, encoding="latin1", errors="strict"):
        # protocol-2 pickles write bytes as _codecs.encode(text, "latin1"); nothing else
        if codecs.lookup(encoding).name != "iso8859-1":
            raise self._refuse("_codecs", f"encode with encoding {encoding!r}")
        return codecs.encode(text, "latin1", errors)

    def _refuse(self, module: str, name: str) -> FormatError:
        return _error(
            self._path,
            "import-unsafe",
            f"the pickle asks to load {module}.{name}; loading a pickle can run arbitrary "
            "code, so simsci only builds dicts, lists, tuples, sets, numbers, strings and "
            "numpy scalars/arrays (all an EasyTPP data file holds) and refuses anything "
            "else. If you trust the file, convert it to EasyTPP's JSON layout yourself",
        )

    def find_class(self, module, name):
        if module == "__builtin__":  # Python 2
            module = "builtins"
        if module == "builtins" and name in _SAFE_BUILTINS:
            return getattr(builtins, name)
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("_codecs", "encode"):
            return self._latin1
        if module == "numpy" and name in ("ndarray", "dtype"):
            return getattr(np, name)
        part = _NUMPY_MODULES.get(module)
        if part is not None and name in _NUMPY_NAMES[part]:
            return _numpy_internal(part, name)
        raise self._refuse(module, name)

    def persistent_load(self, pid):
        raise self._refuse("persistent id", repr(pid)[:60])


def _load_pickle(path: Path):
    try:
        with open(path, "rb") as f:
            return _SafeUnpickler(f, path).load()
    except FormatError:
        raise
    except OSError:
        raise
    except Exception as exc:  # truncated, not a pickle, a refused value's own error
        raise _error(
            path,
            "import-corrupt",
            f"is not a readable pickle ({type(exc).__name__}: {exc}); the file is "
            "truncated or not an EasyTPP pickle -- re-download or re-export it",
        ) from exc


def _load_json(path: Path, layout: str) -> tuple[list, str]:
    """The records of a JSON (list of records) or JSON-lines file, and which it was."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise _error(
            path, "import-corrupt", f"is not UTF-8 text ({exc}); is it really JSON?"
        ) from exc
    if layout == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if not exc.msg.startswith("Extra data"):
                raise _error(
                    path,
                    "import-corrupt",
                    f"is not valid JSON ({exc}); the file is truncated or corrupt",
                ) from exc
            layout = "jsonl"  # several values: JSON lines (HuggingFace reads both)
        else:
            if isinstance(data, dict) and _T in data:  # JSON lines with one record
                return [data], "jsonl"
            if isinstance(data, dict):
                keys = ", ".join(repr(k) for k in list(data)[:12])
                raise _error(
                    path,
                    "import-layout",
                    f"holds one JSON object (keys {keys}); EasyTPP's JSON layout is a list "
                    "of records (or JSON lines), one per sequence, with 'dim_process', "
                    "'time_since_start', 'time_since_last_event' and 'type_event'",
                )
            if not isinstance(data, list):
                raise _error(
                    path,
                    "import-layout",
                    f"holds a JSON {type(data).__name__}; EasyTPP's JSON layout is a list "
                    "of records, one per sequence",
                )
            return data, "json"
    records = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise _error(
                path,
                "import-corrupt",
                f"line {line_no} is not valid JSON ({exc}); JSON lines hold one record per "
                "line -- the file is truncated or corrupt",
            ) from exc
    return records, "jsonl"


# ------------------------------------------------------------------- source files
@dataclass
class _Part:
    """One split read from one file: raw sequences as (times, gaps, types) lists."""

    path: Path
    layout: str
    split: str | None
    K: int
    sequences: list = field(default_factory=list)


def _dim(path: Path, value, where: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise _error(
            path,
            "import-layout",
            f"{where}dim_process = {value!r} is not an integer; it must be the number of "
            "event types K >= 1",
        )
    if value < 1:
        raise _error(
            path,
            "import-layout",
            f"{where}dim_process = {int(value)}; it must be the number of event types K >= 1",
        )
    return int(value)


def _stem_split(path: Path) -> str | None:
    return _STEMS.get(path.stem.lower())


def _event_error(path: Path, seq, needed, i: int, split: str) -> FormatError:
    """The error for the first event of ``seq`` that is not a dict with ``needed``."""
    for j, ev in enumerate(seq):
        if not isinstance(ev, Mapping):
            return _error(
                path,
                "import-layout",
                f"is a {type(ev).__name__}; an event is a dict with {_T!r}, {_GAP!r} and {_TYPE!r}",
                seq=i,
                event=j,
                split=split,
            )
        missing = [k for k in needed if k not in ev]
        if missing:
            hint = " (pass check_gaps=False to import without it)" if missing == [_GAP] else ""
            return _error(
                path,
                "import-layout",
                f"has no key {missing[0]!r}{hint}; found keys {', '.join(repr(k) for k in ev)}",
                seq=i,
                event=j,
                split=split,
            )
    return _error(path, "import-layout", "holds an unreadable event", seq=i, split=split)


def _read_pickle(path: Path, check_gaps: bool) -> list[_Part]:
    data = _load_pickle(path)
    if not isinstance(data, Mapping):
        raise _error(
            path,
            "import-layout",
            f"holds a {type(data).__name__}; an EasyTPP pickle is a dict with 'dim_process' "
            "and a key named after its split ('train', 'dev' or 'test')",
        )
    keys = ", ".join(repr(k) for k in list(data)[:12])
    if "dim_process" not in data:
        raise _error(
            path,
            "import-layout",
            f"has no key 'dim_process' (the number of event types); found keys {keys}",
        )
    K = _dim(path, data["dim_process"], "")
    split = _stem_split(path)
    if split is not None:
        names = [k for k in dict.fromkeys((path.stem.lower(), split)) if k in data]
        if not names:
            raise _error(
                path,
                "import-layout",
                f"has no key {split!r}: EasyTPP reads the sequences of {path.name} from "
                f"data[{split!r}]; found keys {keys}",
            )
        chosen = [(split, names[0])]
    else:
        chosen = [(s, s) for s in SPLIT_IDS if isinstance(data.get(s), (list, tuple)) and data[s]]
        if not chosen:
            raise _error(
                path,
                "import-layout",
                "holds no sequences under 'train', 'dev' or 'test' (the file name is not a "
                f"split name, so every split key is read); found keys {keys}",
            )
    parts = []
    for split, key in chosen:
        seqs = data[key]
        if not isinstance(seqs, (list, tuple)):
            raise _error(
                path,
                "import-layout",
                f"data[{key!r}] is a {type(seqs).__name__}; it must be a list of sequences "
                "(each a list of event dicts)",
            )
        part = _Part(path, "pickle", split, K)
        needed = (_T, _GAP, _TYPE) if check_gaps else (_T, _TYPE)
        for i, seq in enumerate(seqs):
            if not isinstance(seq, (list, tuple)):
                raise _error(
                    path,
                    "import-layout",
                    f"is a {type(seq).__name__}; a sequence is a list of event dicts",
                    seq=i,
                    split=split,
                )
            try:  # the fast path; _event_error says what is wrong when it fails
                times = [ev[_T] for ev in seq]
                types = [ev[_TYPE] for ev in seq]
                if check_gaps:
                    gaps = [ev[_GAP] for ev in seq]
                else:
                    gaps = [ev.get(_GAP) for ev in seq]
            except (KeyError, TypeError, AttributeError, IndexError) as exc:
                raise _event_error(path, seq, needed, i, split) from exc
            has_gaps = check_gaps or all(g is not None for g in gaps)
            part.sequences.append((times, gaps if has_gaps else None, types))
        parts.append(part)
    return parts


def _read_json(path: Path, layout: str, check_gaps: bool) -> list[_Part]:
    records, layout = _load_json(path, layout)
    part = _Part(path, layout, _stem_split(path), 0)
    K = None
    for i, rec in enumerate(records):
        if not isinstance(rec, Mapping):
            raise _error(
                path,
                "import-layout",
                f"is a JSON {type(rec).__name__}; a record is an object with 'dim_process', "
                f"{_T!r}, {_GAP!r} and {_TYPE!r} (lists)",
                seq=i,
            )
        needed = ("dim_process", _T, _GAP, _TYPE) if check_gaps else ("dim_process", _T, _TYPE)
        missing = [k for k in needed if k not in rec]
        if missing:
            hint = " (pass check_gaps=False to import without it)" if missing == [_GAP] else ""
            raise _error(
                path,
                "import-layout",
                f"has no key {missing[0]!r}{hint}; found keys {', '.join(repr(k) for k in rec)}",
                seq=i,
            )
        k = _dim(path, rec["dim_process"], f"record {i}: ")
        if K is None:
            K = k
        elif k != K:
            raise _error(
                path,
                "import-layout",
                f"dim_process = {k} but record 0 says {K}; every record of a file must "
                "have the same number of event types",
                seq=i,
            )
        lists = {key: rec.get(key) for key in (_T, _GAP, _TYPE)}
        for key, value in lists.items():
            if value is not None and not isinstance(value, list):
                raise _error(
                    path,
                    "import-layout",
                    f"{key!r} is a JSON {type(value).__name__}; it must be a list, one "
                    "entry per event",
                    seq=i,
                )
        n = len(lists[_T])
        for key in (_GAP, _TYPE):
            if lists[key] is not None and len(lists[key]) != n:
                raise _error(
                    path,
                    "import-layout",
                    f"{key!r} has {len(lists[key])} entries but {_T!r} has {n}; each "
                    "list holds one entry per event",
                    seq=i,
                )
        if "seq_len" in rec and rec["seq_len"] != n:
            raise _error(
                path,
                "import-layout",
                f"seq_len = {rec['seq_len']!r} but the record lists {n} events; the file "
                "is inconsistent (re-export it)",
                seq=i,
            )
        part.sequences.append((lists[_T], lists[_GAP], lists[_TYPE]))
    part.K = K if K is not None else 0
    return [part]


def _find_files(src: Path) -> list[tuple[Path, str]]:
    """The split files of a directory, or the one file ``src``: (path, layout) pairs."""
    if src.is_dir():
        by_split: dict[str, list[Path]] = {}
        for p in sorted(src.iterdir()):
            split = _stem_split(p)
            if p.is_file() and split is not None and p.suffix.lower() in _SUFFIXES:
                by_split.setdefault(split, []).append(p)
        if not by_split:
            found = sorted(p.name for p in src.iterdir())
            listing = ", ".join(found[:12]) + (", ..." if len(found) > 12 else "")
            raise _error(
                src,
                "import-layout",
                "holds no EasyTPP split file; expected train, dev (or valid/validation) "
                "and/or test with suffix .pkl, .pickle, .json or .jsonl; found: "
                f"{listing or 'nothing'}",
            )
        for split, paths in by_split.items():
            if len(paths) > 1:
                raise _error(
                    src,
                    "import-layout",
                    f"holds {len(paths)} files for split {split!r} "
                    f"({', '.join(p.name for p in paths)}); keep one per split (or pass "
                    "one file as src)",
                )
        return [
            (by_split[s][0], _SUFFIXES[by_split[s][0].suffix.lower()])
            for s in SPLIT_IDS
            if s in by_split
        ]
    if not src.exists():
        raise FileNotFoundError(
            f"{str(src)!r} does not exist; pass a directory with EasyTPP's train/dev/test "
            "files or one such file"
        )
    layout = _SUFFIXES.get(src.suffix.lower())
    if layout is None:
        raise _error(
            src,
            "import-layout",
            f"has suffix {src.suffix!r}; EasyTPP files end in .pkl, .pickle, .json or .jsonl",
        )
    return [(src, layout)]


# ---------------------------------------------------------------- one sequence
def _numbers(path, values, *, integer: bool, key: str, seq, split) -> np.ndarray:
    """A 1-D float64 (or int64) array of ``values``; a clear error on anything else."""
    kinds = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    if not all(
        issubclass(tp, kinds) and not issubclass(tp, (bool, np.bool_))
        for tp in set(map(type, values))
    ):
        for j, v in enumerate(values):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, kinds):
                want = "an integer event type" if integer else "a number"
                raise _error(
                    path,
                    "import-mark" if integer else "import-time",
                    f"{key} = {v!r} ({type(v).__name__}) is not {want}",
                    seq=seq,
                    event=j,
                    split=split,
                    field=key,
                )
    if integer:
        try:
            return np.asarray(values, dtype=np.int64).reshape(-1)
        except OverflowError as exc:
            raise _error(
                path, "import-mark", f"{key} holds an integer too large ({exc})", seq=seq
            ) from exc
    return np.asarray(values, dtype=np.float64).reshape(-1)


@dataclass
class _Counts:
    tie_sequences: int = 0
    tied_events: int = 0
    empty_skipped: int = 0
    truncated_sequences: int = 0
    truncated_events: int = 0
    gap_sequences: int = 0
    gap_events: int = 0
    gaps_missing: int = 0


def _sequence(part: _Part, i: int, raw, opts, counts: _Counts):
    """Checked (t, mark) of sequence ``i`` of ``part``; None when it is skipped."""
    path, split = part.path, part.split
    times, gaps, types = raw
    if len(times) == 0:
        return _empty_sequence(part, i, opts, counts)
    t = _numbers(path, times, integer=False, key=_T, seq=i, split=split)
    m = _numbers(path, types, integer=True, key=_TYPE, seq=i, split=split)
    _check_marks(part, i, m)
    d = _check_times(part, i, t)
    _check_gaps(part, i, gaps, t, d, opts, counts)
    t, m = _resolve_ties(part, i, t, m, d, opts, counts)
    return _cap_length(part, i, t, m, opts, counts)


def _empty_sequence(part: _Part, i: int, opts, counts: _Counts) -> None:
    """An empty sequence: counted and skipped with skip_empty, else an error."""
    if opts["skip_empty"]:
        counts.empty_skipped += 1
        return None
    raise _error(
        part.path,
        "import-empty",
        "holds no events; an empty sequence carries nothing for a point-process model "
        "and usually means a broken export -- pass skip_empty=True to leave such "
        "sequences out",
        seq=i,
        split=part.split,
    )


def _check_marks(part: _Part, i: int, m: np.ndarray) -> None:
    """Every event type lies in 0..K-1."""
    K = part.K
    bad = (m < 0) | (m >= K)
    if bad.any():
        j = int(np.argmax(bad))
        raise _error(
            part.path,
            "import-mark",
            f"type_event = {int(m[j])} lies outside 0..{K - 1} (dim_process = {K}); fix "
            "dim_process or the event types (EasyTPP numbers types from 0)",
            seq=i,
            event=j,
            split=part.split,
            field=_TYPE,
        )


def _check_times(part: _Part, i: int, t: np.ndarray) -> np.ndarray:
    """Finite, non-decreasing times; returns their differences."""
    finite = np.isfinite(t)
    if not finite.all():
        j = int(np.argmax(~finite))
        raise _error(
            part.path,
            "import-time",
            f"time_since_start = {t[j]} is not finite; event times must be finite",
            seq=i,
            event=j,
            split=part.split,
            field=_T,
        )
    d = np.diff(t)
    if (d < 0).any():
        j = int(np.argmax(d < 0)) + 1
        raise _error(
            part.path,
            "import-time",
            f"time_since_start = {float(t[j])!r} is before the previous event's "
            f"{float(t[j - 1])!r}; event times must increase (sort the events, or fix the "
            "export)",
            seq=i,
            event=j,
            split=part.split,
            field=_T,
        )
    return d


def _check_gaps(part: _Part, i: int, gaps, t: np.ndarray, d: np.ndarray, opts, counts):
    """time_since_last_event vs. the differences ``d``: an error (check_gaps) or counted."""
    path, split = part.path, part.split
    g = None
    if gaps is not None and len(t) > 1:
        try:
            g = _numbers(path, gaps, integer=False, key=_GAP, seq=i, split=split)[1:]
        except FormatError:
            if opts["check_gaps"]:
                raise
    if gaps is None or (g is None and len(t) > 1):
        counts.gaps_missing += 1  # only with check_gaps=False: absent or not numbers
    elif g is not None:
        tol = GAP_RTOL * max(1.0, float(np.abs(t).max()))
        off = ~(np.abs(g - d) <= tol)  # NaN gaps disagree too
        if off.any():
            if opts["check_gaps"]:
                j = int(np.argmax(off)) + 1
                raise _error(
                    path,
                    "import-gap",
                    f"time_since_last_event = {float(g[j - 1])!r} but time_since_start[{j}] - "
                    f"time_since_start[{j - 1}] = {float(d[j - 1])!r} (tolerance {tol:.3g}); "
                    "the file disagrees with itself about the times. Pass "
                    "check_gaps=False to import time_since_start alone (EasyTPP's "
                    "synthetic Hawkes data store per-type gaps there)",
                    seq=i,
                    event=j,
                    split=split,
                    field=_GAP,
                )
            counts.gap_sequences += 1
            counts.gap_events += int(off.sum())


def _resolve_ties(part: _Part, i: int, t, m, d, opts, counts: _Counts):
    """Equal consecutive times by the ``ties`` policy: an error, dropped or jittered."""
    tie = d == 0
    if not tie.any():
        return t, m
    ties = opts["ties"]
    if ties == "error":
        j = int(np.argmax(tie)) + 1
        raise _error(
            part.path,
            "import-time",
            f"time_since_start = {float(t[j])!r} equals the previous event's; the format needs "
            f"strictly increasing times ({int(tie.sum())} tie(s) in this sequence). "
            "Pass ties='drop' to keep the first of equal times or ties='jitter' to "
            "separate them by a tiny step",
            seq=i,
            event=j,
            split=part.split,
            field=_T,
        )
    counts.tie_sequences += 1
    counts.tied_events += int(tie.sum())
    start = np.concatenate([[True], ~tie])
    if ties == "drop":
        return t[start], m[start]
    return _jitter(part, i, t, start), m


def _jitter(part: _Part, i: int, t: np.ndarray, start: np.ndarray) -> np.ndarray:
    """ties="jitter": the k-th repeat of a time moved by k * eps (not past the next)."""
    first = np.flatnonzero(start)
    rank = np.arange(len(t)) - first[np.cumsum(start) - 1]
    eps = max(
        JITTER_RELATIVE * float(t[-1] - t[0]),
        JITTER_ABSOLUTE,
        4.0 * float(np.spacing(np.abs(t).max())),
    )
    moved = t + rank * eps
    if not (np.diff(moved) > 0).all():
        j = int(np.argmax(np.diff(moved) <= 0)) + 1
        raise _error(
            part.path,
            "import-time",
            f"ties='jitter' cannot separate the equal times before t = {float(t[j])!r} "
            f"with a step of {eps:.3g} without reaching the next event; use "
            "ties='drop'",
            seq=i,
            event=j,
            split=part.split,
            field=_T,
        )
    return moved


def _cap_length(part: _Part, i: int, t, m, opts, counts: _Counts):
    """The ``max_events`` cap: an error, or the first events kept with truncate."""
    cap = opts["max_events"]
    if cap is not None and len(t) > cap:
        if not opts["truncate"]:
            raise _error(
                part.path,
                "import-length",
                f"has {len(t)} events, more than max_events = {cap}; pass truncate=True to "
                f"keep the first {cap} events, or raise max_events",
                seq=i,
                split=part.split,
            )
        counts.truncated_sequences += 1
        counts.truncated_events += len(t) - cap
        t, m = t[:cap], m[:cap]
    return t, m


# -------------------------------------------------------------------------- API
def _check_options(ties, skip_empty, max_events, truncate, check_gaps, compression):
    if ties not in TIES:
        raise ValueError(f"ties must be one of {', '.join(map(repr, TIES))}, got {ties!r}")
    for name, value in (
        ("skip_empty", skip_empty),
        ("truncate", truncate),
        ("check_gaps", check_gaps),
    ):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, got {value!r}")
    if max_events is not None and (
        isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 1
    ):
        raise ValueError(f"max_events must be a positive int or None, got {max_events!r}")
    if truncate and max_events is None:
        raise ValueError("truncate=True needs max_events (the number of events to keep)")
    if compression not in (None, "gzip", "lzf"):
        raise ValueError(f"compression must be None, 'gzip' or 'lzf', got {compression!r}")


def import_easytpp(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    ties: str = "error",
    skip_empty: bool = False,
    max_events: int | None = None,
    truncate: bool = False,
    check_gaps: bool = True,
    compression: str | None = None,
) -> Path:
    """Write EasyTPP event sequences (a directory of split files, or one file) to ``dst``.

    ``ties``: "error", "jitter" or "drop" for equal consecutive times; ``skip_empty``
    leave empty sequences out (else an error); ``max_events`` the longest sequence
    accepted (None: any), ``truncate`` keep the first ``max_events`` events of longer
    ones (else an error); ``check_gaps`` refuse files whose time_since_last_event
    disagrees with the differences of time_since_start; ``compression`` None, "gzip" or
    "lzf". Returns ``dst``. Pickles are loaded with a restricted unpickler (a pickle is
    code execution; see the module docstring for what it accepts and for the layout).
    """
    _check_options(ties, skip_empty, max_events, truncate, check_gaps, compression)
    src = Path(src)
    dst = check_parent_dir(dst)
    files = _find_files(src)
    _check_not_dst(files, dst)
    parts = _read_parts(files, check_gaps)
    K = _common_dim(parts, src)
    opts = {
        "ties": ties,
        "skip_empty": bool(skip_empty),
        "max_events": max_events,
        "truncate": bool(truncate),
        "check_gaps": bool(check_gaps),
    }
    counts = _Counts()
    episodes, files_meta = _convert(parts, opts, counts)
    if not episodes:
        raise _error(
            src,
            "import-empty",
            f"holds no non-empty sequence to import ({counts.empty_skipped} empty skipped)",
        )
    with_split = all(p.split is not None for p in parts)
    meta = _import_meta(src, parts, files_meta, episodes, K, opts, counts, with_split)
    return _write_events(src, dst, meta, K, episodes, with_split, compression)


def _check_not_dst(files, dst: Path) -> None:
    """No source file is ``dst`` itself."""
    for path, _ in files:
        if dst.exists() and path.resolve() == dst.resolve():
            raise ValueError(
                f"src and dst are the same file {str(dst)!r}; write the import to another path"
            )


def _read_parts(files, check_gaps: bool) -> list[_Part]:
    """Every split of every source file, read and checked, in file order."""
    parts: list[_Part] = []
    for path, layout in files:
        if layout == "pickle":
            parts.extend(_read_pickle(path, check_gaps))
        else:
            parts.extend(_read_json(path, layout, check_gaps))
    return parts


def _common_dim(parts: list[_Part], src: Path) -> int:
    """The one dim_process K of all parts (set on each); parts sorted train, dev, test."""
    K = None
    for part in parts:
        if not part.sequences and part.K == 0:  # an empty JSON list: no dim_process
            continue
        if K is None:
            K, first = part.K, part
        elif part.K != K:
            raise _error(
                part.path,
                "import-layout",
                f"dim_process = {part.K} but {first.path.name} says {K}; every split must "
                "have the same number of event types",
            )
    if K is None:
        raise _error(src, "import-empty", "holds no sequences to import")
    for part in parts:
        part.K = K
    parts.sort(key=lambda p: SPLIT_IDS.get(p.split, 3))
    return K


def _convert(parts: list[_Part], opts, counts: _Counts):
    """Every kept sequence as (split, source_index, t, mark), and each part's file meta."""
    episodes = []  # (split, source_index, t, mark)
    files_meta = []
    for part in parts:
        kept = 0
        for i, raw in enumerate(part.sequences):
            seq = _sequence(part, i, raw, opts, counts)
            if seq is not None:
                episodes.append((part.split, i, *seq))
                kept += 1
        files_meta.append(
            {
                "path": str(part.path.resolve()),
                "layout": part.layout,
                "split": part.split,
                "bytes": part.path.stat().st_size,
                "sequences": len(part.sequences),
                "events": int(sum(len(s[0]) for s in part.sequences)),
                "episodes_written": kept,
            }
        )
    return episodes, files_meta


def _import_meta(src: Path, parts, files_meta, episodes, K: int, opts, counts, with_split):
    """The output file's meta: the source, the import policies and their counts."""
    layouts = sorted({p.layout for p in parts})
    split_counts = {"train": 0, "val": 0, "test": 0}
    for split, *_ in episodes:
        if split is not None:
            split_counts[{"train": "train", "dev": "val", "test": "test"}[split]] += 1
    return {
        "generator": "simsci.data.import_easytpp",
        "simsci_version": __version__,
        "source": {
            "format": "easytpp",
            "path": str(src.resolve()),
            "layout": layouts[0] if len(layouts) == 1 else "mixed",
            "files": files_meta,
            "dim_process": K,
            "time": _T,
            "sequences": sum(f["sequences"] for f in files_meta),
            "events": sum(f["events"] for f in files_meta),
        },
        "import": _policy_meta(opts, counts),
        "episodes": len(episodes),
        "events": int(sum(len(e[2]) for e in episodes)),
        "split": split_counts if with_split else None,
    }


def _policy_meta(opts, counts: _Counts) -> dict:
    """meta["import"]: each policy (ties, gaps, empty, length) and what it did."""
    return {
        "ties": {
            "policy": opts["ties"],
            "sequences": counts.tie_sequences,
            "events": counts.tied_events,
            **(
                {"jitter_relative": JITTER_RELATIVE, "jitter_absolute": JITTER_ABSOLUTE}
                if opts["ties"] == "jitter"
                else {}
            ),
        },
        "gaps": {
            "checked": opts["check_gaps"],
            "rtol": GAP_RTOL,
            "disagreeing_sequences": counts.gap_sequences,
            "disagreeing_events": counts.gap_events,
            "sequences_without_gaps": counts.gaps_missing,
        },
        "skip_empty": opts["skip_empty"],
        "empty_skipped": counts.empty_skipped,
        "max_events": opts["max_events"],
        "truncate": opts["truncate"],
        "truncated_sequences": counts.truncated_sequences,
        "truncated_events": counts.truncated_events,
    }


def _write_events(src: Path, dst: Path, meta, K: int, episodes, with_split, compression):
    """Write the episodes to ``dst`` (kind="events", system "easytpp:<source name>")."""
    name = src.resolve().name if src.is_dir() else (src.resolve().parent.name or src.stem)
    with TrajectoryWriter(
        dst,
        kind="events",
        system=f"easytpp:{name}",
        meta=meta,
        num_marks=K,
        episode_fields=("source_index",),
        compression=compression,
    ) as writer:
        for split, index, t, mark in episodes:
            ep = {"t": t, "mark": mark, "source_index": np.int64(index)}
            if with_split:
                ep["split"] = SPLIT_IDS[split]
            writer.append(ep)
    return writer.path


def is_easytpp_source(src) -> bool:
    """True when ``src`` looks like EasyTPP data rather than a trajectory file: a file
    ending in .pkl/.pickle/.json/.jsonl, or a directory holding split files (train,
    dev, test) with those suffixes. Lets the event commands take EasyTPP data directly
    (``simsci train cocld --data retweet/``)."""
    src = Path(src)
    if src.is_file():
        return src.suffix.lower() in _SUFFIXES
    if src.is_dir():
        return any(
            p.is_file() and _stem_split(p) is not None and p.suffix.lower() in _SUFFIXES
            for p in src.iterdir()
        )
    return False


# ------------------------------------------------------------------------ export
#: file stem written for each split id of /episodes/split (EasyTPP's names)
_EXPORT_STEMS = {0: "train", 1: "dev", 2: "test"}
EXPORT_FORMATS = ("pkl", "json")


def export_easytpp(src, dst, *, format: str = "pkl") -> dict:
    """Write a kind="events" trajectory file as EasyTPP data: one file per split.

    ``dst`` is a directory (created if missing) that receives ``train``, ``dev`` and
    ``test`` files (``.pkl`` or ``.json``) for the splits of ``/episodes/split``
    (0/1/2; a file without splits is written whole as ``train``). What each holds is
    the layout :func:`import_easytpp` reads, so export then import gives back the same
    times, marks and splits:

    - ``format="pkl"``: a dict ``{"dim_process": K, "<split>": [sequence, ...]}``, a
      sequence a list of event dicts with ``time_since_start`` (float, the stored
      time, unshifted), ``time_since_last_event`` (0.0 for the first event, EasyTPP's
      own convention, then the differences of the times), ``type_event`` (int 0..K-1)
      and ``idx_event`` (0-based);
    - ``format="json"``: a JSON list of records, one per sequence, with ``dim_process``,
      ``seq_len``, ``seq_idx`` and the three lists (what EasyTPP's HuggingFace loader
      reads with ``data_format: json``).

    EasyTPP has no place for locations, groups, per-sequence parameters or observation
    windows: those fields are not written and are named in the returned summary
    (``dropped``). Times stay float64 (Python floats; JSON repr round-trips exactly).
    Each file is written to a temporary sibling and renamed when complete.

    Returns ``{"files": {split: path}, "sequences": {split: n}, "events": {split: n},
    "num_marks": K, "dropped": [field, ...]}``.
    """
    if format not in EXPORT_FORMATS:
        raise ValueError(f"format must be one of {EXPORT_FORMATS}, got {format!r}")
    traj = open_trajectories(src)
    if traj.kind != "events":
        raise FormatError(
            f"{traj.path}: export to EasyTPP needs a kind='events' file, got kind {traj.kind!r}"
        )
    K = int(traj.num_marks)
    splits = (
        np.asarray(traj.column("split"), dtype=np.int64)
        if "split" in traj.episode_fields
        else np.zeros(len(traj), dtype=np.int64)
    )
    kept = {"t", "mark", "split", "valid"}
    dropped = sorted((set(traj.step_fields) | set(traj.episode_fields)) - kept)
    by_split: dict[int, list] = {}
    for i in range(len(traj)):
        ep = traj[i]
        t = np.asarray(ep["t"], dtype=np.float64)
        mark = np.asarray(ep["mark"], dtype=np.int64)
        gaps = np.diff(t, prepend=t[:1]) if len(t) else t
        by_split.setdefault(int(splits[i]), []).append((t, mark, gaps))
    out = Path(dst)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out}: EasyTPP data is a directory of split files")
    out.mkdir(parents=True, exist_ok=True)
    summary = {"files": {}, "sequences": {}, "events": {}, "num_marks": K, "dropped": dropped}
    for split_id, seqs in sorted(by_split.items()):
        name = _EXPORT_STEMS[split_id]
        path = out / f"{name}.{format}"
        with atomic_path(path) as tmp:
            with open(tmp, "wb" if format == "pkl" else "w") as fh:
                if format == "pkl":
                    pickle.dump({"dim_process": K, name: _pickle_sequences(seqs)}, fh)
                else:
                    json.dump(_json_records(seqs, K), fh)
        summary["files"][name] = str(path)
        summary["sequences"][name] = len(seqs)
        summary["events"][name] = int(sum(len(t) for t, _, _ in seqs))
    return summary


def _pickle_sequences(seqs) -> list:
    return [
        [
            {
                _T: float(t[j]),
                _GAP: float(gaps[j]),
                _TYPE: int(mark[j]),
                "idx_event": j,
            }
            for j in range(len(t))
        ]
        for t, mark, gaps in seqs
    ]


def _json_records(seqs, K: int) -> list:
    return [
        {
            "dim_process": K,
            "seq_len": len(t),
            "seq_idx": i,
            _T: t.tolist(),
            _GAP: gaps.tolist(),
            _TYPE: mark.tolist(),
        }
        for i, (t, mark, gaps) in enumerate(seqs)
    ]
