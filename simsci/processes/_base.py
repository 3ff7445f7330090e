r"""The :class:`PointProcess` base: marked temporal point processes with exact likelihoods.

A marked point process on :math:`[t_0, T]` with K event types (marks) is described by
its conditional intensities :math:`\lambda_k(t \mid \mathcal H_t)`, k = 0..K-1, where
:math:`\mathcal H_t` holds the events strictly before t. The log-likelihood of the events
in :math:`(t_s, t_e]` given everything up to :math:`t_s` is

.. math::

    \ell = \sum_{t_s < t_j \le t_e} \log \lambda_{m_j}(t_j)
           - \int_{t_s}^{t_e} \sum_k \lambda_k(t)\,dt .

Every process here implements the same four things, so a model can be scored against
the truth and the truth can stand in a benchmark as the ceiling:

- ``sample(n, t_end=..., seed=...)``: n independent sequences on ``[t_start, t_end]``
  (exact simulation: thinning with a valid bound, or inversion), each a dict with
  ``"t"`` float64 (L,), strictly increasing, and ``"mark"`` int64 (L,), plus any
  per-sequence values the process draws (``"params"``: a random effect the intensity
  depends on);
- ``intensity(t_query, times, marks, params=None)``: :math:`\lambda_k(t_q-)` at each
  query time given the events of ``times`` strictly before it, shape (Q, K);
- ``log_likelihood(times, marks, t_start=, t_end=, params=None)``: the :math:`\ell`
  above, exact (closed-form compensators) where the process allows, otherwise by a
  quadrature whose error the class documents;
- ``config()``: ``{"name": ..., "params": {...}}``, JSON-able; :func:`process_from_config`
  rebuilds the process from it. Dataset builders store it in the file's
  ``meta["process"]`` so that the true process of a file can be rebuilt;
- ``batch(times, marks, lengths, params=None)``: many sequences at once, padded to
  (B, L), as a :class:`SequenceBatch` whose ``intensity(t_query, rows, counts)`` and
  ``log_likelihood(t_start=, t_end=)`` equal the per-sequence calls (to rounding) in
  one numpy pass over all sequences, and whose ``append(rows, times, marks)`` grows
  sequences in place (as thinning does). A scorer asks for the intensity after every
  event of every sequence on a grid of offsets: a Python loop over sequences and events
  made the true-process ceiling of the event benchmarks cost 5-20 s per test split. The
  base class loops over the sequences (any process works); the registered processes
  override the hooks ``_batch_prepare`` / ``_batch_intensity`` /
  ``_batch_log_likelihood`` / ``_batch_update`` with vectorised code.

The scoring convention used by simsci's event models (and EasyTPP's): a sequence's
first event is given, events 2..L are scored, ``t_start = times[0]``,
``t_end = times[-1]``.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from simsci import data as sdata
from simsci._seeding import check_split, split_ids, streams
from simsci.errors import unknown_name

#: registry name -> PointProcess subclass
PROCESSES: dict[str, type[PointProcess]] = {}


def register_process(cls: type[PointProcess]) -> type[PointProcess]:
    """Class decorator: add ``cls`` to :data:`PROCESSES` under ``cls.name``."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__} needs a non-empty class attribute 'name'")
    if name in PROCESSES:
        raise ValueError(f"point process name {name!r} is already registered")
    PROCESSES[name] = cls
    return cls


def get_process(name: str, **params) -> PointProcess:
    """Build the point process registered as ``name`` (``"hawkes"``, ``"poisson"``...)."""
    if name not in PROCESSES:
        raise unknown_name("point process", name, PROCESSES)
    return PROCESSES[name](**params)


def process_from_config(config: Mapping) -> PointProcess:
    """Rebuild a process from ``config()`` (as stored in a file's ``meta["process"]``)."""
    if not isinstance(config, Mapping) or "name" not in config:
        raise ValueError(
            f"a point-process config is a dict with 'name' and 'params', got {config!r}"
        )
    return get_process(config["name"], **dict(config.get("params", {})))


def check_sequence(times, marks, num_marks: int, where: str = "sequence"):
    """``times`` float64 (L,) finite and strictly increasing, ``marks`` int64 (L,) in
    0..K-1; returns them as arrays, else a ValueError naming the rule and the index."""
    t = np.asarray(times, dtype=np.float64)
    m = np.asarray(marks)
    if t.ndim != 1 or m.shape != t.shape:
        raise ValueError(
            f"{where}: times and marks must be 1-D of one length, got shapes "
            f"{t.shape} and {m.shape}"
        )
    if not np.all(np.isfinite(t)):
        raise ValueError(f"{where}: event times must be finite")
    if len(t) > 1 and not np.all(np.diff(t) > 0):
        j = int(np.argmin(np.diff(t) > 0)) + 1
        raise ValueError(
            f"{where}: event times must be strictly increasing, but t[{j}] = {t[j]!r} "
            f"follows t[{j - 1}] = {t[j - 1]!r}"
        )
    if m.size and (m.dtype.kind not in "iu" or m.min() < 0 or m.max() >= num_marks):
        raise ValueError(f"{where}: marks must be integers in 0..{num_marks - 1}, got {m}")
    return t, m.astype(np.int64)


class PointProcess(abc.ABC):
    """Base of the marked point processes (see the module docstring for the contract)."""

    #: registry name
    name: ClassVar[str] = ""

    def __init__(self, num_marks: int):
        if isinstance(num_marks, bool) or int(num_marks) != num_marks or num_marks < 1:
            raise ValueError(f"num_marks must be an integer >= 1, got {num_marks!r}")
        self.num_marks = int(num_marks)

    @abc.abstractmethod
    def params(self) -> dict:
        """The constructor arguments, JSON-able (lists, not arrays)."""
        ...

    def config(self) -> dict:
        return {"name": self.name, "params": self.params()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.params()})"

    @abc.abstractmethod
    def sample(
        self, n: int, *, t_end: float, seed: int = 0, t_start: float = 0.0
    ) -> list[dict]: ...

    @abc.abstractmethod
    def intensity(self, t_query, times, marks, params=None) -> np.ndarray: ...

    @abc.abstractmethod
    def log_likelihood(
        self, times, marks, *, t_start: float, t_end: float, params=None
    ) -> float: ...

    # ------------------------------------------------------------ many sequences
    def batch(self, times, marks, lengths=None, params=None) -> SequenceBatch:
        """Padded sequences (B, L) prepared once for vectorised intensities and
        log-likelihoods (:class:`SequenceBatch`); ``lengths`` (B,) the events of each row
        (default: all L), ``params`` (B, P) the per-sequence values or None."""
        return SequenceBatch(self, times, marks, lengths, params)

    def _batch_prepare(self, batch: SequenceBatch):
        """Per-sequence state computed once for the whole batch (None: nothing)."""
        return None

    def _batch_intensity(self, batch: SequenceBatch, q, rows, before) -> np.ndarray:
        """(Q, K) intensities at ``q`` of row ``rows`` given its first ``before`` events
        (those strictly before each query). The fallback: one call per query."""
        out = np.empty((len(q), self.num_marks))
        for i, (b, p) in enumerate(zip(rows.tolist(), before.tolist())):
            out[i] = self.intensity(
                q[i : i + 1], batch.times[b, :p], batch.marks[b, :p], params=batch.row_params(b)
            )[0]
        return out

    def _batch_update(self, batch: SequenceBatch, rows, cols) -> None:
        """Bring the per-sequence state up to date after :meth:`SequenceBatch.append`
        wrote event ``cols[i]`` of row ``rows[i]`` (its earlier events unchanged). The
        fallback rebuilds the state; the registered processes update those entries."""
        if batch.state is not None:
            batch.state = self._batch_prepare(batch)

    def _batch_log_likelihood(self, batch: SequenceBatch, t_start, t_end, **options):
        """(B,) log-likelihoods. The fallback: one :meth:`log_likelihood` call per row."""
        out = np.empty(batch.size)
        for b in range(batch.size):
            n = int(batch.lengths[b])
            out[b] = self.log_likelihood(
                batch.times[b, :n], batch.marks[b, :n], t_start=float(t_start[b]),
                t_end=float(t_end[b]), params=batch.row_params(b), **options,
            )  # fmt: skip
        return out


class SequenceBatch:
    """B sequences of one process, padded to (B, L), for vectorised evaluation.

    Built by :meth:`PointProcess.batch`. ``times`` (B, L) float64, strictly increasing
    over each row's first ``lengths[b]`` entries (what follows is padding, ignored);
    ``marks`` (B, L) integers in 0..K-1 there; ``params`` (B, P) or None. The process's
    per-sequence state (Hawkes states, counts, latent paths) is computed once here, so
    many intensity queries on the same sequences cost one pass each.
    """

    #: queries evaluated per numpy pass (bounds the (Q, K, K) temporaries)
    CHUNK = 1 << 15

    def __init__(self, process: PointProcess, times, marks, lengths=None, params=None):
        t = np.asarray(times, dtype=np.float64)
        m = np.asarray(marks)
        if t.ndim != 2 or m.shape != t.shape:
            raise ValueError(
                f"batch: times and marks must be (B, L) of one shape, got {t.shape} and {m.shape}"
            )
        B, L = t.shape
        n = np.full(B, L, dtype=np.int64) if lengths is None else np.asarray(lengths)
        if n.shape != (B,) or n.dtype.kind not in "iu" or np.any(n < 0) or np.any(n > L):
            raise ValueError(
                f"batch: lengths must be {B} integers in 0..{L} (events per row), got "
                f"{np.asarray(lengths).tolist()}"
            )
        n = n.astype(np.int64)
        valid = np.arange(L)[None] < n[:, None]
        _check_padded(t, m, valid, process.num_marks)
        self.process = process
        self.size, self.width = B, L
        self.lengths = n
        self.valid = valid
        # padding repeats a row's last time (0 for an empty row): finite differences
        last = np.where(n > 0, t[np.arange(B), np.maximum(n - 1, 0)], 0.0)
        self.times = np.where(valid, t, last[:, None])
        self.marks = np.where(valid, m, 0).astype(np.int64)
        # the same with +inf padding: each row sorted, for the searches
        self._search = np.where(valid, t, np.inf)
        if params is not None:
            params = np.asarray(params, dtype=np.float64)
            if params.ndim != 2 or params.shape[0] != B:
                raise ValueError(
                    f"batch: params must be (B, P) with B = {B} rows, got shape {params.shape}"
                )
        self.params = params
        self.state = process._batch_prepare(self)

    def row_params(self, b: int):
        return None if self.params is None else self.params[b]

    def before(self, t_query, rows, counts=None) -> np.ndarray:
        """(Q,) how many of the first ``counts`` events of row ``rows`` lie strictly
        before each ``t_query`` (default: all the row's events)."""
        q = np.asarray(t_query, dtype=np.float64)
        rows = np.asarray(rows, dtype=np.int64)
        limit = self.lengths[rows] if counts is None else np.minimum(counts, self.lengths[rows])
        # most queries come after the whole history (a scorer asks after each event):
        # then the answer is the count itself, no search needed
        last = self.times[rows, np.maximum(limit - 1, 0)]
        p = limit.copy()
        slow = np.flatnonzero((limit > 0) & ~(q > last))
        if slow.size:
            order = slow[np.argsort(rows[slow], kind="stable")]
            cuts = np.searchsorted(rows[order], np.arange(self.size + 1))
            for b in np.flatnonzero(np.diff(cuts)):
                idx = order[cuts[b] : cuts[b + 1]]
                p[idx] = np.searchsorted(self._search[b], q[idx], side="left")
        return np.minimum(p, limit)

    def append(self, rows, times, marks, at=None) -> None:
        """Write one event per row of ``rows`` at position ``at`` (default: after the
        row's last event), dropping the row's events from there on, and update the
        process's per-sequence state in place. A sampler that grows the sequences event
        by event (thinning) queries them without rebuilding the batch. Each time must
        come after the row's event before it."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        t = np.asarray(times, dtype=np.float64).reshape(-1)
        m = np.asarray(marks).reshape(-1)
        if not (t.shape == m.shape == rows.shape):
            raise ValueError(
                f"append: rows, times and marks need one entry each, got shapes {rows.shape}, "
                f"{t.shape}, {m.shape}"
            )
        if not rows.size:
            return
        if rows.min() < 0 or rows.max() >= self.size or len(np.unique(rows)) != rows.size:
            raise ValueError(f"append: rows must be distinct integers in 0..{self.size - 1}")
        at = self.lengths[rows] if at is None else np.asarray(at, dtype=np.int64).reshape(-1)
        if at.shape != rows.shape or np.any(at < 0) or np.any(at > self.lengths[rows]):
            raise ValueError("append: at must be one position per row in 0..its length")
        if m.dtype.kind not in "iu" or m.min() < 0 or m.max() >= self.process.num_marks:
            raise ValueError(f"append: marks must be integers in 0..{self.process.num_marks - 1}")
        prev = self.times[rows, np.maximum(at - 1, 0)]
        if not np.all(np.isfinite(t)) or np.any((at > 0) & ~(t > prev)):
            i = int(np.argmax(~np.isfinite(t) | ((at > 0) & ~(t > prev))))
            raise ValueError(
                f"append: row {int(rows[i])}: the new time {float(t[i])!r} must be finite "
                f"and after the event before it, {float(prev[i])!r}"
            )
        if int(at.max()) + 1 > self.width:
            self._grow(max(int(at.max()) + 1, 2 * self.width))
        cols = np.arange(self.width)[None]
        after = cols > at[:, None]
        self.times[rows, at] = t
        self.marks[rows, at] = m
        self.times[rows] = np.where(after, t[:, None], self.times[rows])
        self._search[rows] = np.where(after, np.inf, self.times[rows])
        self.valid[rows] = ~after
        self.lengths[rows] = at + 1
        self.process._batch_update(self, rows, at)

    def _grow(self, width: int) -> None:
        """Room for ``width`` events per row; the per-sequence state is rebuilt."""
        extra = width - self.width
        last = self.times[:, -1:] if self.width else np.zeros((self.size, 1))
        self.times = np.concatenate([self.times, np.repeat(last, extra, axis=1)], axis=1)
        self.marks = np.pad(self.marks, ((0, 0), (0, extra)))
        self.valid = np.pad(self.valid, ((0, 0), (0, extra)))
        self._search = np.pad(self._search, ((0, 0), (0, extra)), constant_values=np.inf)
        self.width = width
        self.state = self.process._batch_prepare(self)

    def intensity(self, t_query, rows, counts=None) -> np.ndarray:
        """(Q, K) :math:`\\lambda_k(t_q-)` of sequence ``rows[i]`` given its first
        ``counts[i]`` events (default: all) strictly before ``t_query[i]``; as
        ``process.intensity(t_query[i], times[b, :counts[i]], ...)`` for each i."""
        q = np.asarray(t_query, dtype=np.float64).reshape(-1)
        rows = np.asarray(rows).reshape(-1)
        if rows.shape != q.shape or (rows.size and rows.dtype.kind not in "iu"):
            raise ValueError(
                f"batch intensity: rows must be integers, one per query ({q.shape}), got "
                f"shape {rows.shape}"
            )
        if rows.size and (rows.min() < 0 or rows.max() >= self.size):
            raise ValueError(f"batch intensity: rows must lie in 0..{self.size - 1}")
        if not np.all(np.isfinite(q)):
            raise ValueError("batch intensity: t_query must be finite")
        if counts is not None:
            counts = np.broadcast_to(np.asarray(counts, dtype=np.int64).reshape(-1), q.shape)
        out = np.empty((len(q), self.process.num_marks))
        for a in range(0, len(q), self.CHUNK):
            sl = slice(a, a + self.CHUNK)
            r = rows[sl].astype(np.int64)
            p = self.before(q[sl], r, None if counts is None else counts[sl])
            out[sl] = self.process._batch_intensity(self, q[sl], r, p)
        return out

    def log_likelihood(self, *, t_start, t_end, **options) -> np.ndarray:
        """(B,) each row's :meth:`PointProcess.log_likelihood` on (t_start, t_end]
        (numbers or (B,) arrays); ``options`` go to it (``order``, ``max_piece``)."""
        t0 = np.broadcast_to(np.asarray(t_start, dtype=np.float64), (self.size,))
        t1 = np.broadcast_to(np.asarray(t_end, dtype=np.float64), (self.size,))
        if not (np.all(np.isfinite(t0)) and np.all(np.isfinite(t1))):
            raise ValueError("batch log_likelihood: t_start and t_end must be finite")
        if np.any(t1 < t0):
            b = int(np.argmax(t1 < t0))
            raise ValueError(
                f"batch log_likelihood: row {b}: t_end = {float(t1[b])} < t_start = {float(t0[b])}"
            )
        has = self.lengths > 0
        last = self.times[np.arange(self.size), np.maximum(self.lengths - 1, 0)]
        late = has & (last > t1)
        if np.any(late):
            b = int(np.argmax(late))
            raise ValueError(
                f"batch log_likelihood: row {b}: t_end = {float(t1[b])!r} precedes its last event "
                f"{float(last[b])!r}; the window (t_start, t_end] must contain every given event"
            )
        return self.process._batch_log_likelihood(self, t0, t1, **options)


def _check_padded(t, m, valid, num_marks: int) -> None:
    """check_sequence's rules on every row's valid part, vectorised."""
    if not np.all(np.isfinite(t[valid])):
        b = int(np.argmax((~np.isfinite(t) & valid).any(axis=1)))
        raise ValueError(f"batch: row {b}: event times must be finite")
    both = valid[:, 1:]
    with np.errstate(invalid="ignore"):  # the padding may hold anything
        bad = both & ~(np.diff(t, axis=1) > 0)
    if bad.any():
        b, j = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(
            f"batch: row {b}: event times must be strictly increasing, but t[{j + 1}] = "
            f"{float(t[b, j + 1])!r} follows t[{j}] = {float(t[b, j])!r}"
        )
    if valid.any():
        mv = m[valid]
        if mv.dtype.kind not in "iu" or mv.min() < 0 or mv.max() >= num_marks:
            raise ValueError(f"batch: marks must be integers in 0..{num_marks - 1}")


def write_event_file(
    out,
    sequences: list[dict],
    *,
    system: str,
    num_marks: int,
    split_fractions=(0.8, 0.1, 0.1),
    seed: int = 0,
    process: PointProcess | None = None,
    meta: Mapping | None = None,
    static: Mapping | None = None,
    names: Mapping | None = None,
    units: Mapping | None = None,
):
    """Write event sequences as one kind="events" trajectory file (atomically).

    ``sequences``: dicts with ``"t"`` (L,), ``"mark"`` (L,), optional ``"loc"`` (L, D)
    and ``"loc_id"`` (L,)
    and per-sequence values (``"params"``, ``"group"``, ... any key whose value is not
    of length L is an episode field). Splits: exact counts by a permutation seeded by
    ``seed`` (:func:`simsci._seeding.split_ids`). ``meta`` gets
    ``"process"`` (``process.config()``) when a process is given. Returns the path.
    """
    fractions = check_split(split_fractions)
    if not sequences:
        raise ValueError(f"{out}: no sequences to write")
    split = split_ids(len(sequences), fractions, streams(seed, ["split"])["split"])
    step_keys = ("t", "mark", "loc", "loc_id")
    extra = sorted(
        {k for s in sequences for k in s if k not in step_keys and k not in ("params", "label")}
    )
    meta = dict(meta or {})
    if process is not None:
        meta["process"] = process.config()
    with sdata.TrajectoryWriter(
        out,
        kind="events",
        system=system,
        meta=meta,
        num_marks=int(num_marks),
        static=dict(static or {}),
        names=dict(names or {}),
        units=dict(units or {}),
        episode_fields=extra,
        overwrite=True,
    ) as w:
        for i, seq in enumerate(sequences):
            w.append({**seq, "split": int(split[i])})
    return w.path
