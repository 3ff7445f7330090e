"""Step three of the PDE benchmark: the result (runs scored against the floor, fronts,
speed-ups at matched accuracy, settings), the table the CLI prints and the Pareto plot."""

from __future__ import annotations

import math
import os
from pathlib import Path

from simsci.bench._fronts import summarize
from simsci.bench._pde_problem import FLOOR_FACTOR, PDEBenchProblem, res_label
from simsci.bench._pde_run import _dtype_name, _res_str
from simsci.bench._pde_spec import PDEBenchSpec
from simsci.errors import MissingExtraError

__all__ = ["report", "format_table", "plot_pareto"]


def report(
    spec: PDEBenchSpec, prob: PDEBenchProblem, ref_params: dict, reference: dict,
    runs: list[dict], ic_note: str,
) -> dict:  # fmt: skip
    """The JSON-able result of a run (see :func:`simsci.bench.pde_benchmark`)."""
    for entry in runs:
        if entry["status"] == "ok":
            entry["scored"] = bool(
                entry["error"] is not None
                and math.isfinite(entry["error"])
                and entry["error"] >= FLOOR_FACTOR * prob.floor
            )
            if not entry["scored"]:
                entry["note"] = (
                    f"error below {FLOOR_FACTOR:g} x the reference floor {prob.floor:.2e}: "
                    "at the reference's accuracy, not scored"
                )
    result = {
        "benchmark": "pde",
        "problem": spec.problem,
        "params": dict(ref_params),
        "settings": _settings(spec, ic_note),
        "reference": reference,
        "runs": runs,
        "peers": {peer.family: status for peer, status, _ in spec.peers},
    }
    result.update(summarize(result, levels=spec.levels))
    return result


def _settings(spec: PDEBenchSpec, ic_note: str) -> dict:
    n, repeat = spec.n, spec.repeat
    scored = list(spec.setup.channels) if spec.setup.channels else None
    if scored is None:
        from simsci import systems

        scored = list(systems.SYSTEMS[spec.problem].channel_names)
    return {
        "n": n,
        "t_end": spec.t_end,
        "output_times": spec.times.tolist(),
        "device": str(spec.device),
        "dtype": _dtype_name(spec.dtype),
        "seed": spec.seed,
        "repeat": repeat,
        "batches": list(spec.batches),
        "quick": spec.quick,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "methods": spec.methods,
        "resolutions": [res_label(r) for r in spec.resolutions],
        "dts": {m: list(v) for m, v in spec.dt_map.items()} if not spec.steady else None,
        "scored_channels": scored,
        "initial_conditions": ic_note,
        "error": "relative L2 at the final time per trajectory and channel, mean over "
        "channels and trajectories (error_all: all output times after the initial one; "
        "error_max: worst trajectory)",
        "time": f"median of {repeat} warm calls, device synchronised, divided by the "
        f"batch of {n} (peers: as they run, e.g. one trajectory at a time); the fronts "
        "are built from the medians, seconds_min / seconds_max give the spread of the "
        "calls, and a speed-up whose front a run's spread crosses is flagged unstable",
    }


def _fmt(value, spec=".2e") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan"
    return format(value, spec)


def format_table(result: dict) -> str:
    """The table the CLI prints: per solver its runs (resolution, dt, error, time; ``*``
    marks the Pareto front), then the matched-accuracy speed-ups."""
    lines = _table_head(result) + _table_runs(result) + _table_speedups(result)
    for family, status in result.get("peers", {}).items():
        if not status.get("included"):
            lines += ["", f"{family}: not included ({status.get('reason', '?')})"]
    return "\n".join(lines)


def _table_head(result: dict) -> list[str]:
    s = result["settings"]
    ref = result["reference"]
    params = ", ".join(f"{k}={v:g}" for k, v in result["params"].items())
    return [
        f"PDE benchmark: {result['problem']} ({params}), t_end={s['t_end']:g}, "
        f"{s['n']} trajectories, {s['device']} {s['dtype']}",
        f"reference: {ref['method']} at {ref['resolution']}"
        + (f", dt={ref['dt']:.3g}" if ref.get("dt") else "")
        + f" (float64); floor {ref['floor']:.1e} (self-differences: "
        + ", ".join(f"{k} {v:.1e}" for k, v in ref["self_error"].items())
        + ")",
        f"error: {s['error']}",
        f"time: {s['time']}",
        "",
        f"{'solver':24s} {'resolution':>10s} {'dt/tol':>9s} {'error':>9s} {'err(all t)':>10s} "
        f"{'s/traj':>9s} {'spread':>7s}  front",
    ]


def _table_runs(result: dict) -> list[str]:
    on_front = {
        (sv, str(r["resolution"]), r.get("dt"), r.get("tolerance"))
        for sv, rows in result["fronts"].items()
        for r in rows
    }
    crossing = {
        (sv, str(r["resolution"]), r.get("dt"), r.get("tolerance"))
        for sv, rows in result.get("crossings", {}).items()
        for r in rows
    }
    lines, skipped = [], []
    for run in result["runs"]:
        if run["status"] != "ok":
            skipped.append(run)
            continue
        step = (
            _fmt(run["dt"], ".3g")
            if run.get("dt") is not None
            else (_fmt(run["tolerance"], ".0e") if run.get("tolerance") is not None else "-")
        )
        key = (run["solver"], str(run["resolution"]), run.get("dt"), run.get("tolerance"))
        mark = "*" if key in on_front else ("(floor)" if not run.get("scored", True) else "")
        if key in crossing:
            mark += " (spread crosses the front)"
        lines.append(
            f"{run['solver']:24s} {_res_str(run['resolution']):>10s} {step:>9s} "
            f"{_fmt(run['error']):>9s} {_fmt(run['error_all']):>10s} "
            f"{_fmt(run['seconds_per_trajectory'], '.3g'):>9s} {_spread_pct(run):>7s}  {mark}"
        )
    if skipped:
        lines += ["", "not run / failed:"]
        for run in skipped:
            step = f" dt={run['dt']:.3g}" if run.get("dt") is not None else ""
            lines.append(
                f"  {run['solver']} {_res_str(run['resolution'])}{step}: {run['status']}"
                + (f" ({run['note']})" if run.get("note") else "")
            )
    return lines


def _spread_pct(run: dict) -> str:
    """The repeats' spread, (slowest - fastest) / median, in percent."""
    lo, hi, mid = run.get("seconds_min"), run.get("seconds_max"), run["seconds_per_trajectory"]
    if lo is None or hi is None or not mid:
        return "-"
    return f"{100 * (hi - lo) / mid:.0f}%"


def _table_speedups(result: dict) -> list[str]:
    lines = ["", "speed-up at matched accuracy (time ratio at equal error, interpolated "
             "along the Pareto fronts):"]  # fmt: skip
    if not result["speedups"]:
        lines.append("  (fewer than two solvers with runs above the reference floor)")
    for sp in result["speedups"]:
        if not sp["overlap"]:
            lines.append(f"  {sp['solver']} vs {sp['versus']}: {sp['note']}")
            continue
        ge = ">= " if sp.get("bound") else ""
        at = ", ".join(f"{ge}{r:.3g}x at {e:.1e}" for r, e in zip(sp["speedup"], sp["errors"]))
        tail = " [bound: every run of the first at the reference floor]" if ge else ""
        spread = sp.get("geomean_spread")
        if spread and spread[0] != spread[1]:
            tail += f" [spread {spread[0]:.3g}-{spread[1]:.3g}x]"
        lines.append(
            f"  {sp['solver']} vs {sp['versus']}: {at} (geomean {sp['geomean']:.3g}x){tail}"
        )
        if sp.get("unstable"):
            runs = ", ".join(
                f"{r['solver']} {_res_str(r['resolution'])}"
                + (f" dt={r['dt']:.3g}" if r.get("dt") is not None else "")
                + (f" tol={r['tolerance']:.0e}" if r.get("tolerance") is not None else "")
                for r in sp["unstable_runs"]
            )
            lines.append(
                f"    UNSTABLE: the timing spread of {runs} crosses its front: the repeats "
                "disagree on which runs are on it (rerun with more --repeat, on a quieter "
                "machine)"
            )
    return lines


def plot_pareto(result: dict, path) -> Path:
    """Error vs time per trajectory (log-log): each solver's runs as points and its
    Pareto front as a line. Writes a PNG to ``path``; needs matplotlib (extra ``plot``)."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingExtraError(
            f"plot_pareto needs matplotlib ({exc}); install it with pip install 'simsci[plot]'"
        ) from exc
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 5))
    markers = "osD^vP*X<>"
    solvers = list(result["fronts"])
    for i, solver in enumerate(solvers):
        runs = [
            r for r in result["runs"] if r["solver"] == solver and r["status"] == "ok"
            and r["error"] and r["seconds_per_trajectory"]
        ]  # fmt: skip
        if not runs:
            continue
        color = f"C{i % 10}"
        ax.scatter(
            [r["seconds_per_trajectory"] for r in runs],
            [r["error"] for r in runs],
            color=color,
            marker=markers[i % len(markers)],
            alpha=0.45,
            s=22,
        )
        front = result["fronts"][solver]
        if front:
            ax.plot(
                [r["seconds_per_trajectory"] for r in front],
                [r["error"] for r in front],
                color=color,
                marker=markers[i % len(markers)],
                label=solver,
            )
        else:
            ax.scatter([], [], color=color, label=f"{solver} (at floor)")
    floor = result["reference"]["floor"]
    ax.axhline(
        FLOOR_FACTOR * floor,
        color="grey",
        ls=":",
        lw=1,
        label=f"{FLOOR_FACTOR:g} x reference floor (below: not scored)",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("wall time per trajectory [s]")
    ax.set_ylabel("relative L2 error at t_end")
    s = result["settings"]
    ax.set_title(f"{result['problem']}: accuracy vs cost ({s['device']}, batch {s['n']})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
