"""Accuracy-cost comparisons: Pareto fronts and speed-ups at matched accuracy.

A run is on its solver's front when no other run of that solver is both faster and more
accurate (by more than 1%). Solvers are compared *at equal error* along their fronts
(:func:`matched_speedup`) or at equal time (:func:`matched_error`), never by raw time
ratios of runs with different accuracies (:mod:`simsci.bench._pde` has the method).

Timings are noisy on a shared machine, and one slow timing of a coarse run can drop it
from a front and turn a speed-up into "no overlap" (a Burgers sweep gave that once and
2,100x once). So a run's time is the *median* of its repeats (``seconds_per_trajectory``)
with the spread of the repeats beside it (``seconds_min``, ``seconds_max``), the fronts
are built from the medians, and :func:`front_crossings` finds the runs whose spread
crosses their front (on it at one end of the spread, off it at the other): a speed-up
that rests on such a front is flagged ``unstable`` (:func:`summarize`), and its range
over the spreads is reported beside it (``geomean_spread``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

__all__ = ["pareto_front", "front_crossings", "matched_speedup", "matched_error", "summarize"]

#: families whose solvers are this library's (every other family is a peer's)
OWN_FAMILIES = ("simsci", "model")


def _point(item) -> tuple[float, float]:
    if isinstance(item, Mapping):
        return float(item["error"]), float(item["seconds_per_trajectory"])
    return float(item[0]), float(item[1])


def _spread(item) -> tuple[float, float]:
    """(fastest, slowest) time of a point's repeats: a run dict's ``seconds_min`` /
    ``seconds_max``, a tuple's third and fourth entries, else the median twice."""
    if isinstance(item, Mapping):
        seconds = float(item["seconds_per_trajectory"])
        lo, hi = item.get("seconds_min"), item.get("seconds_max")
        return (seconds if lo is None else float(lo), seconds if hi is None else float(hi))
    if len(item) >= 4:
        return float(item[2]), float(item[3])
    seconds = float(item[1])
    return seconds, seconds


def _usable(item) -> bool:
    if isinstance(item, Mapping):
        if item.get("status", "ok") != "ok" or not item.get("scored", True):
            return False
        e, s = item.get("error"), item.get("seconds_per_trajectory")
        if e is None or s is None:
            return False
    e, s = _point(item)
    return math.isfinite(e) and math.isfinite(s) and e > 0 and s > 0


def pareto_front(points: Iterable, *, rtol: float = 0.01) -> list:
    """The accuracy-cost Pareto front of ``points``, fastest first.

    ``points``: ``(error, seconds)`` pairs (``(error, median, fastest, slowest)``
    tuples too) or run dicts (``error``, ``seconds_per_trajectory``: the median of the
    repeats; runs not ``status == "ok"`` or not ``scored`` are left out). Going from
    the fastest point to slower ones, a point is kept when its error is below that of
    every faster point by more than the relative ``rtol`` (errors within 1% are the
    same accuracy: two solvers whose error is spatial give equal errors to many digits,
    and a slower copy would put a vertical step into the front). Returns the kept items
    (same type), sorted by time ascending, hence error descending.
    """
    _check_rtol(rtol)
    items = [p for p in points if _usable(p)]
    return [items[i] for i in _front_indices([_point(p) for p in items], rtol)]


def _check_rtol(rtol) -> None:
    if not (0 <= rtol < 1):
        raise ValueError(f"rtol must lie in [0, 1), got {rtol!r}")


def _front_indices(points: list[tuple[float, float]], rtol: float) -> list[int]:
    """Indices of the front of (error, seconds) pairs, fastest first (the rule of
    :func:`pareto_front`)."""
    order = sorted(range(len(points)), key=lambda i: (points[i][1], points[i][0]))
    front, best = [], math.inf
    for i in order:
        if points[i][0] < best * (1 - rtol):
            front.append(i)
            best = points[i][0]
    return front


def front_crossings(points: Iterable, *, rtol: float = 0.01) -> list:
    """The points whose timing spread crosses their front (see the module docstring).

    ``points`` as for :func:`pareto_front`, with spreads: run dicts with
    ``seconds_min`` and ``seconds_max`` or ``(error, median, fastest, slowest)``
    tuples (a point without a spread has none). The front is built from the medians;
    a point crosses it when its membership is not the same in three cases: every point
    at its median, the point at its fastest and all others at their slowest (its best
    case), the point at its slowest and all others at their fastest (its worst case).
    Returns those points (same type), in input order; empty: the front stands whatever
    the repeats' spread.
    """
    _check_rtol(rtol)
    items = [p for p in points if _usable(p)]
    errors = [_point(p)[0] for p in items]
    medians = [_point(p)[1] for p in items]
    spreads = [_spread(p) for p in items]
    on_median = set(_front_indices(list(zip(errors, medians)), rtol))
    out = []
    for i, item in enumerate(items):
        best = [(e, spreads[i][0] if j == i else spreads[j][1]) for j, e in enumerate(errors)]
        worst = [(e, spreads[i][1] if j == i else spreads[j][0]) for j, e in enumerate(errors)]
        cases = {i in on_median, i in _front_indices(best, rtol), i in _front_indices(worst, rtol)}
        if len(cases) > 1:
            out.append(item)
    return out


def _interp_loglog(xs: np.ndarray, ys: np.ndarray, at: np.ndarray) -> np.ndarray:
    order = np.argsort(xs)
    return np.exp(np.interp(np.log(at), np.log(xs[order]), np.log(ys[order])))


def _levels(lo: float, hi: float, levels: int) -> np.ndarray:
    if hi <= lo * (1 + 1e-12):
        return np.array([lo])
    return np.exp(np.linspace(math.log(lo), math.log(hi), max(levels, 2)))


def _check_levels(levels) -> int:
    if isinstance(levels, bool) or not isinstance(levels, int) or levels < 1:
        raise ValueError(f"levels must be a positive integer, got {levels!r}")
    return levels


def matched_speedup(front_a, front_b, *, levels: int = 3) -> dict | None:
    """Speed-up of A over B at equal error: ``t_B(e) / t_A(e)``.

    ``front_a``, ``front_b``: Pareto fronts (see :func:`pareto_front`; any points are
    reduced to their front first). :math:`\\log t` is interpolated linearly in
    :math:`\\log e` along each front, at ``levels`` errors spaced geometrically over the
    overlap of the two fronts' error ranges (one level when the overlap is one point).
    Returns ``{"errors", "seconds_a", "seconds_b", "speedup", "geomean",
    "geomean_spread"}`` (lists of floats, ``geomean`` the geometric mean of ``speedup``,
    ``geomean_spread`` its value with A's fronts at its points' slowest repeats and B's
    at their fastest, and the reverse: the range the timing spread allows), or None
    when the error ranges do not overlap (then no matched comparison exists).
    """
    levels = _check_levels(levels)
    a = np.array([_point(p) for p in pareto_front(front_a)]).reshape(-1, 2)
    b = np.array([_point(p) for p in pareto_front(front_b)]).reshape(-1, 2)
    if not len(a) or not len(b):
        return None
    lo = max(a[:, 0].min(), b[:, 0].min())
    hi = min(a[:, 0].max(), b[:, 0].max())
    if lo > hi:
        return None
    errors = _levels(lo, hi, levels)
    ta = _interp_loglog(a[:, 0], a[:, 1], errors)
    tb = _interp_loglog(b[:, 0], b[:, 1], errors)
    ratio = tb / ta
    # the same comparison with A at its slowest and B at its fastest, and vice versa
    sa = np.array([_spread(p) for p in pareto_front(front_a)]).reshape(-1, 2)
    sb = np.array([_spread(p) for p in pareto_front(front_b)]).reshape(-1, 2)
    low = _interp_loglog(b[:, 0], sb[:, 0], errors) / _interp_loglog(a[:, 0], sa[:, 1], errors)
    high = _interp_loglog(b[:, 0], sb[:, 1], errors) / _interp_loglog(a[:, 0], sa[:, 0], errors)
    return {
        "errors": errors.tolist(),
        "seconds_a": ta.tolist(),
        "seconds_b": tb.tolist(),
        "speedup": ratio.tolist(),
        "geomean": float(np.exp(np.log(ratio).mean())),
        "geomean_spread": [float(np.exp(np.log(low).mean())), float(np.exp(np.log(high).mean()))],
    }


def matched_error(front_a, front_b, *, levels: int = 3) -> dict | None:
    """Error ratio at equal time: ``e_B(t) / e_A(t)`` (>1: A more accurate).

    As :func:`matched_speedup` with the axes swapped: :math:`\\log e` interpolated in
    :math:`\\log t` along each front, at ``levels`` times over the overlap of the
    fronts' time ranges. Returns ``{"seconds", "error_a", "error_b", "ratio",
    "geomean"}`` or None without overlap.
    """
    levels = _check_levels(levels)
    a = np.array([_point(p) for p in pareto_front(front_a)]).reshape(-1, 2)
    b = np.array([_point(p) for p in pareto_front(front_b)]).reshape(-1, 2)
    if not len(a) or not len(b):
        return None
    lo = max(a[:, 1].min(), b[:, 1].min())
    hi = min(a[:, 1].max(), b[:, 1].max())
    if lo > hi:
        return None
    seconds = _levels(lo, hi, levels)
    ea = _interp_loglog(a[:, 1], a[:, 0], seconds)
    eb = _interp_loglog(b[:, 1], b[:, 0], seconds)
    ratio = eb / ea
    return {
        "seconds": seconds.tolist(),
        "error_a": ea.tolist(),
        "error_b": eb.tolist(),
        "ratio": ratio.tolist(),
        "geomean": float(np.exp(np.log(ratio).mean())),
    }


def _family_order(family: str) -> int:
    return OWN_FAMILIES.index(family) if family in OWN_FAMILIES else len(OWN_FAMILIES)


def _curves(runs: list[dict]) -> tuple[list[str], dict, dict, dict[str, str]]:
    """Solvers (own first, then peers), their fronts, the curves compared (the fronts
    plus, per peer family with several solvers, the union ``"FAMILY (best)"``) and each
    curve's family."""
    family = {r["solver"]: r["family"] for r in runs}
    solvers = list(dict.fromkeys(r["solver"] for r in runs))
    solvers.sort(key=lambda s: _family_order(family[s]))
    fronts = {s: pareto_front([r for r in runs if r["solver"] == s]) for s in solvers}
    curves = dict(fronts)
    peers = [f for f in dict.fromkeys(family[s] for s in solvers) if f not in OWN_FAMILIES]
    for peer in peers:
        if sum(family[s] == peer for s in solvers) > 1:
            union = pareto_front([r for r in runs if r["family"] == peer])
            if union:
                curves[f"{peer} (best)"] = union
                family[f"{peer} (best)"] = peer
    return solvers, fronts, curves, family


def _bound(a: str, fastest: dict, b: str, curve: list, levels: int) -> dict:
    """A solver at the reference floor against ``b``'s front: a lower bound."""
    front = np.array([_point(p) for p in curve])
    errors = _levels(front[:, 0].min(), front[:, 0].max(), levels)
    tb = _interp_loglog(front[:, 0], front[:, 1], errors)
    ta = fastest["seconds_per_trajectory"]
    ratio = tb / ta
    return {
        "solver": a,
        "versus": b,
        "overlap": True,
        "bound": True,
        "errors": errors.tolist(),
        "seconds_a": [ta] * len(errors),
        "seconds_b": tb.tolist(),
        "speedup": ratio.tolist(),
        "geomean": float(np.exp(np.log(ratio).mean())),
        "note": f"every {a} run is at the reference floor (error "
        f"{fastest['error']:.1e}): its fastest run against {b}'s front, a lower "
        "bound on the speed-up at equal error (it is more accurate)",
    }


def _matched(a: str, b: str, curves: dict, levels: int) -> dict:
    entry = {"solver": a, "versus": b}
    m = matched_speedup(curves[a], curves[b], levels=levels)
    if m is None:
        ea = [_point(p)[0] for p in curves[a]]
        eb = [_point(p)[0] for p in curves[b]]
        entry["overlap"] = False
        entry["note"] = (
            f"error ranges do not overlap ({min(ea):.2e}-{max(ea):.2e} vs "
            f"{min(eb):.2e}-{max(eb):.2e}): no matched-accuracy speed-up"
        )
        return entry
    entry["overlap"] = True
    entry.update(m)
    eq = matched_error(curves[a], curves[b], levels=levels)
    if eq is not None:
        entry["error_ratio_at_equal_time"] = eq
    return entry


def summarize(result: dict, *, levels: int = 3) -> dict:
    """``fronts``, ``crossings`` and ``speedups`` of a result's runs (recomputed from
    ``runs``).

    Every pair of curves is compared, except two of the same peer family (a peer's
    solvers against each other are not this benchmark's question). A solver whose every
    successful run is at the reference floor has no front; it gets a lower bound
    against each other curve instead (:func:`_bound`). ``crossings``: per curve, the
    runs whose timing spread crosses its front (:func:`front_crossings`); a speed-up
    involving such a curve has ``unstable: True`` and names them (``unstable_runs``).
    """
    runs = result["runs"]
    solvers, fronts, curves, family = _curves(runs)
    crossings = {name: front_crossings(_candidates(runs, name, family)) for name in curves}

    def same_peer(a, b):
        return family[a] == family[b] and family[a] not in OWN_FAMILIES

    names = [s for s in curves if curves[s]]
    speedups = []
    for a in solvers:
        ok = [r for r in runs if r["solver"] == a and r["status"] == "ok"]
        if fronts[a] or not ok or any(r.get("scored", True) for r in ok):
            continue
        fastest = min(ok, key=lambda r: r["seconds_per_trajectory"])
        speedups += [_bound(a, fastest, b, curves[b], levels) for b in names if not same_peer(a, b)]
    for i, a in enumerate(names):
        speedups += [_matched(a, b, curves, levels) for b in names[i + 1 :] if not same_peer(a, b)]
    for entry in speedups:
        crossing = [
            {"solver": r["solver"], **_front_row(r)}
            for name in (entry["solver"], entry["versus"])
            for r in crossings.get(name, [])
        ]
        entry["unstable"] = bool(crossing)
        if crossing:
            entry["unstable_runs"] = crossing
    return {
        "fronts": {s: [_front_row(r) for r in f] for s, f in fronts.items()},
        "crossings": {s: [_front_row(r) for r in c] for s, c in crossings.items() if c},
        "speedups": speedups,
    }


def _candidates(runs: list[dict], curve: str, family: dict[str, str]) -> list[dict]:
    """The runs a curve's front is built from (a solver's, or a peer family's union)."""
    if curve.endswith(" (best)"):
        return [r for r in runs if r["family"] == family[curve]]
    return [r for r in runs if r["solver"] == curve]


def _front_row(run: dict) -> dict:
    keys = (
        "resolution", "dt", "tolerance", "error", "error_all", "seconds_per_trajectory",
        "seconds_min", "seconds_max",
    )  # fmt: skip
    return {k: run[k] for k in keys if k in run}
