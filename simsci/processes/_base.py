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
  ``meta["process"]`` so that the true process of a file can be rebuilt.

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
