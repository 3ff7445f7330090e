"""Event-sequence data sets of the exact point processes: ``poisson_events``, ``hawkes``,
``self_correcting``.

Each builder samples :mod:`simsci.processes` exactly and writes the sequences as one
kind="events" trajectory file. Conditioning and truncation (``min_events``,
``max_events``), the default parameters (a fixed formula of K, so "hawkes, K=5" is one
process across seeds and files) and the default ``t_end`` (about ``TARGET_EVENTS`` events
per sequence) are described in :mod:`simsci.processes._exact`'s docstring.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from simsci._seeding import check_count, check_positive, check_seed, check_split, progress_bar
from simsci.datasets._registry import BuildOptions, register_dataset
from simsci.processes import (
    HawkesProcess,
    PointProcess,
    PoissonProcess,
    SelfCorrectingProcess,
    write_event_file,
)

#: events per sequence the builders' default t_end aims at (total mean rate x t_end)
TARGET_EVENTS = 50.0


# ------------------------------------------------------------------ default parameters
def _positions(K: int) -> np.ndarray:
    return np.arange(K) / max(K - 1, 1)  # u_k = k / (K - 1), 0 when K = 1


def default_hawkes_params(K: int) -> dict:
    """The ``hawkes`` builder's parameters for K marks (a fixed formula of K):
    ``mu_k = 0.2 + 0.3 u_k`` with ``u_k = k / max(K - 1, 1)``; ``alpha = 0.65 B /
    rho(B)`` with ``B_kk = 1``, ``B_{k, k-1 mod K} = 0.6`` (each mark excites the next,
    a cycle) and 0.15 elsewhere, so the spectral radius is 0.65; ``beta_kl = 1 + 2 ((k +
    l) mod K) / max(K - 1, 1)`` in [1, 3]. K = 1: mu 0.2, alpha 0.65, beta 1 (mean
    rate 0.571)."""
    K = check_positive("marks", K, integer=True)
    B = np.full((K, K), 0.15)
    B[np.arange(K), (np.arange(K) - 1) % K] = 0.6
    B[np.arange(K), np.arange(K)] = 1.0
    alpha = 0.65 * B / np.max(np.abs(np.linalg.eigvals(B)))
    row, col = np.meshgrid(np.arange(K), np.arange(K), indexing="ij")
    beta = 1.0 + 2.0 * ((row + col) % K) / max(K - 1, 1)
    return {
        "mu": (0.2 + 0.3 * _positions(K)).tolist(),
        "alpha": alpha.tolist(),
        "beta": beta.tolist(),
    }


def default_self_correcting_params(K: int) -> dict:
    """The ``self_correcting`` builder's parameters for K marks: ``mu_k = 1 - 0.5 u_k``
    (u_k as in :func:`default_hawkes_params`) and ``alpha = (1 - c) I + c J``, c = 0.5 /
    K (diagonal 1, weak cross-correction), whose long-run rates alpha^-1 mu are all
    positive for every K. K = 1: the classic mu = alpha = 1 (rate 1)."""
    K = check_positive("marks", K, integer=True)
    c = 0.5 / K
    alpha = np.full((K, K), c)
    alpha[np.arange(K), np.arange(K)] = 1.0
    return {"mu": (1.0 - 0.5 * _positions(K)).tolist(), "alpha": alpha.tolist()}


# --------------------------------------------------------------------------- builders
def _option_values(name: str, value):
    """A builder option as numbers: a number, a (nested) list, or text (CLI): JSON or
    comma-separated values with rows separated by ';'."""
    if isinstance(value, str):
        text = value.strip()
        try:
            if text.startswith("["):
                return json.loads(text)
            rows = [[float(v) for v in row.split(",")] for row in text.split(";")]
        except ValueError:
            raise ValueError(
                f"{name} must be a number, a list or comma-separated numbers (rows of a "
                f"matrix separated by ';'), got {value!r}"
            ) from None
        if len(rows) == 1:
            return rows[0][0] if len(rows[0]) == 1 else rows[0]
        return rows
    return value


def _vector_option(name: str, value, K: int) -> list[float]:
    arr = np.asarray(_option_values(name, value), dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(K, float(arr))
    if arr.shape != (K,):
        raise ValueError(f"{name} must be a number or {K} values (marks={K}), got {value!r}")
    return arr.tolist()


def _matrix_option(name: str, value, K: int) -> list[list[float]]:
    arr = np.asarray(_option_values(name, value), dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full((K, K), float(arr))
    elif arr.shape == (K * K,):
        arr = arr.reshape(K, K)  # flat, row-major
    if arr.shape != (K, K):
        raise ValueError(
            f"{name} must be a number or a {K} x {K} matrix (marks={K}; flat row-major or "
            f"rows separated by ';'), got {value!r}"
        )
    return arr.tolist()


def _default_t_end(process: PointProcess, t_end) -> float:
    if t_end is not None:
        return check_positive("t_end", t_end)
    rate = process.mean_rate()
    if not np.all(rate > 0):
        raise ValueError(
            f"the default t_end needs positive mean rates, got {rate.tolist()}; give t_end"
        )
    return TARGET_EVENTS / float(rate.sum())


def events(
    dataset: str,
    make_process: Callable[..., tuple[PointProcess, dict]],
    n: int,
    common: BuildOptions,
    *,
    marks: int = 1,
    t_end: float | None = None,
    min_events: int = 2,
    max_events: int | None = None,
    **params,
) -> Path:
    """Write ``n`` sequences of ``make_process(marks, **params)`` (the process and its
    extra meta) on (0, t_end] (default: about ``TARGET_EVENTS`` events); returns the path.
    Sequences with fewer than ``min_events`` events are redrawn (the data set is
    conditioned on having at least that many); longer than ``max_events``: cut (module
    docstring). Registered as ``poisson_events``, ``hawkes`` and ``self_correcting``."""
    K = check_positive("marks", marks, integer=True)
    process, extra_meta = make_process(K, **params)
    n = check_count(n)
    seed = check_seed(common.seed)
    t_end = _default_t_end(process, t_end)
    fractions = check_split(common.split)
    min_events = check_positive("min_events", min_events, integer=True, minimum=0)
    if max_events is not None:
        max_events = check_positive("max_events", max_events, integer=True, minimum=1)
        if max_events < min_events:
            raise ValueError(f"max_events = {max_events} is below min_events = {min_events}")
    kept, draws = _draw(process, n, dataset, seed, common.progress, t_end, min_events)
    truncated = 0
    for seq in kept:
        seq["t_end"] = np.float64(t_end)
        if max_events is not None and len(seq["t"]) > max_events:
            seq["t"], seq["mark"] = seq["t"][:max_events], seq["mark"][:max_events]
            seq["t_end"] = np.float64(seq["t"][-1])  # observed up to the cut (a stopping time)
            truncated += 1
    lengths = np.array([len(s["t"]) for s in kept])
    meta = {
        **common.meta(dataset, n),
        "t_start": 0.0,
        "t_end": t_end,
        "time_unit": None,
        "num_marks": process.num_marks,
        "mean_rate": process.mean_rate().tolist(),
        "min_events": min_events,
        "max_events": max_events,
        "conditioning": (
            f"sequences with fewer than {min_events} events on (0, t_end] were redrawn: the "
            "data set is the process conditioned on at least that many events"
        ),
        "draws": draws,
        "truncated": truncated,
        "truncation": "a cut sequence is observed on (0, episodes/t_end], its last event",
        "events_mean": float(lengths.mean()),
        "split": list(fractions),
        **extra_meta,
    }
    return write_event_file(
        common.out,
        kept,
        system=dataset,
        num_marks=process.num_marks,
        split_fractions=fractions,
        seed=seed,
        process=process,
        meta=meta,
    )


def _draw(
    process: PointProcess, n: int, dataset: str, seed: int, progress: bool, t_end, min_events
) -> tuple[list[dict], int]:
    """n sequences on (0, t_end] with >= min_events events (redrawing the others) and the
    number of sequences drawn."""
    # spawn key (1,): write_event_file draws the splits from the stream with key (0,)
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])
    kept: list[dict] = []
    draws = 0
    bar = progress_bar(n, dataset, progress)
    try:
        while len(kept) < n:
            need = n - len(kept)
            accepted = len(kept) / draws if draws else 1.0
            batch = process.sample(
                min(max(need, math.ceil(need / max(accepted, 0.01))), 100 * n),
                t_end=t_end,
                seed=rng,
            )
            draws += len(batch)
            new = [s for s in batch if len(s["t"]) >= min_events][:need]
            kept += new
            if bar is not None:
                bar.update(len(new))
            if len(kept) < n and draws >= 100 * n:
                raise ValueError(
                    f"{dataset}: only {len(kept)} of {draws} sequences had >= min_events = "
                    f"{min_events} events on (0, {t_end:g}]; lower min_events or raise t_end"
                )
    finally:
        if bar is not None:
            bar.close()
    return kept, draws


# ------------------------------------------------------------------ the processes
def _poisson(K: int, *, rate=1.0, amplitude=0.0, period: float = 10.0, phase=0.0):
    """:class:`PoissonProcess` (``rate``, ``amplitude``, ``phase``: a number or ``marks``
    values, comma-separated on the CLI); default ``t_end`` 50 / sum(rate)."""
    process = PoissonProcess(
        _vector_option("rate", rate, K),
        amplitude=_vector_option("amplitude", amplitude, K),
        period=period,
        phase=_vector_option("phase", phase, K),
        num_marks=K,
    )
    return process, {}


def _hawkes(K: int, *, mu=None, alpha=None, beta=None):
    """:class:`HawkesProcess`, empty history at 0. ``mu`` (K values), ``alpha``, ``beta`` (K
    x K, or a number): None takes :func:`default_hawkes_params` (spectral radius 0.65,
    beta in [1, 3]); default ``t_end`` 50 / the total stationary rate (about 50 events, a
    little fewer since the process starts empty)."""
    default = default_hawkes_params(K)
    process = HawkesProcess(
        _vector_option("mu", default["mu"] if mu is None else mu, K),
        _matrix_option("alpha", default["alpha"] if alpha is None else alpha, K),
        _matrix_option("beta", default["beta"] if beta is None else beta, K),
        num_marks=K,
    )
    defaults = [k for k, v in (("mu", mu), ("alpha", alpha), ("beta", beta)) if v is None]
    return process, {"default_params": defaults, "spectral_radius": process.spectral_radius}


def _self_correcting(K: int, *, mu=None, alpha=None):
    """:class:`SelfCorrectingProcess`. ``mu`` (K values), ``alpha`` (K x K, or a number):
    None takes :func:`default_self_correcting_params` (K = 1: mu = alpha = 1); default
    ``t_end`` 50 / the total long-run rate sum(alpha^-1 mu)."""
    default = default_self_correcting_params(K)
    process = SelfCorrectingProcess(
        _vector_option("mu", default["mu"] if mu is None else mu, K),
        _matrix_option("alpha", default["alpha"] if alpha is None else alpha, K),
        num_marks=K,
    )
    return process, {"default_params": [k for k, v in (("mu", mu), ("alpha", alpha)) if v is None]}


#: (data set, its process, summary); the process's keyword defaults are the data set's
_EVENTS = (
    (
        "poisson_events",
        _poisson,
        "marked Poisson event sequences, homogeneous or with a periodic rate (exact "
        "likelihood; a baseline for event models)",
    ),
    (
        "hawkes",
        _hawkes,
        "multivariate Hawkes event sequences with exponential kernels (exact likelihood; "
        "default parameters a fixed formula of --marks)",
    ),
    (
        "self_correcting",
        _self_correcting,
        "multivariate self-correcting event sequences, lambda = exp(mu t - alpha N(t)) "
        "(exact likelihood)",
    ),
)
for _dataset, _make, _summary in _EVENTS:
    _defaults = {
        k: p.default
        for k, p in inspect.signature(_make).parameters.items()
        if p.kind is p.KEYWORD_ONLY
    }
    register_dataset(_dataset, _summary, defaults=_defaults)(
        functools.partial(events, _dataset, _make)
    )
