"""Every PDE solver on every registered PDE: error vs time, Pareto tables, speed-ups at
matched accuracy.

Claim checked: each solver's accuracy-cost trade-off, measured the same way on every
PDE of ``simsci.systems`` (kind "field"), with the solvers compared at equal error, never
by raw time.

For each PDE, :func:`simsci.bench.pde_benchmark` (its docstring has the method) runs
every solver method over the problem's quick-sized grid of resolutions and step sizes
(``default_setup(problem, quick=True)``; steppers with a step limit at fractions of it),
with py-pde side by side where it is installed and can express the PDE (the peer
``pypde_peer.PyPDEPeer`` at its quick grids; the library itself calls no peer):
relative L2 error at the final time against a float64 ETDRK4 reference at a finer grid
and step (CG at a finer grid for Darcy), warm wall time per trajectory (batch of
``n``, device synchronised, median of repeats), Pareto fronts per solver, and for every
pair of solvers the time ratio at equal error along the fronts (log-log interpolation
inside the overlap of their error ranges).

Usage: ``python benchmarks/bench_pde.py [--quick] [--device cpu|cuda] [--problems a,b]
[--no-pypde]``. ``--quick`` is a smoke run (2 trajectories, 1 timed call, no py-pde).
Writes ``benchmarks/results/pde_pareto.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from pypde_peer import PyPDEPeer

from simsci.bench import format_table, pde_benchmark, write_result
from simsci.systems import SYSTEMS

RESULTS = Path(__file__).resolve().parent / "results"


def pde_names() -> list[str]:
    return sorted(name for name, cls in SYSTEMS.items() if cls.kind == "field")


def summary_rows(problem: str, result: dict) -> list[str]:
    rows = []
    for sp in result["speedups"]:
        if not sp["overlap"]:
            continue
        lo, hi = min(sp["errors"]), max(sp["errors"])
        rng = f"{lo:.1e}" if lo == hi else f"{lo:.1e}-{hi:.1e}"
        ge = ">=" if sp.get("bound") else "  "
        rows.append(
            f"{problem:22s} {sp['solver']:16s} {sp['versus']:16s} {ge}{sp['geomean']:9.3g}x "
            f"[{min(sp['speedup']):.3g}-{max(sp['speedup']):.3g}] at errors {rng}"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (see the docstring)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--problems", default=None, help="comma-separated (default: every PDE)")
    parser.add_argument("--n", type=int, default=None, help="trajectories (default 4; quick 2)")
    parser.add_argument("--repeat", type=int, default=None, help="timed calls (median)")
    parser.add_argument("--no-pypde", action="store_true", help="leave py-pde out")
    parser.add_argument("--out", default=None, help="JSON path (default results/pde_pareto.json)")
    args = parser.parse_args()
    problems = args.problems.split(",") if args.problems else pde_names()
    n = args.n or (2 if args.quick else 4)
    repeat = args.repeat or (1 if args.quick else 3)
    out = {
        "benchmark": "pde_pareto",
        "claim": "each solver's error-cost front on every PDE; speed-ups at matched accuracy",
        "quick": args.quick,
        "load_average_before": os.getloadavg(),
        "problems": {},
    }
    summary = []
    for problem in problems:
        start = time.perf_counter()
        result = pde_benchmark(
            problem,
            quick=True,
            n=n,
            repeat=repeat,
            device=args.device,
            peers=[] if (args.quick or args.no_pypde) else [PyPDEPeer(quick=True)],
            log=True,
        )
        wall = time.perf_counter() - start
        print(format_table(result))
        print(f"({problem}: {wall:.1f} s)\n", flush=True)
        summary += summary_rows(problem, result)
        out["problems"][problem] = {
            **{k: result[k] for k in ("params", "settings", "reference", "fronts", "speedups")},
            "pypde": result["peers"].get(
                "py-pde", {"included": False, "reason": "left out (--quick / --no-pypde)"}
            ),
            "not_run": [
                {k: r.get(k) for k in ("solver", "resolution", "dt", "status", "note")}
                for r in result["runs"]
                if r["status"] != "ok"
            ],
            "runs": result["runs"],
            "wall_seconds": wall,
        }
    out["load_average_after"] = os.getloadavg()
    out["summary"] = summary
    print(
        "speed-ups at matched accuracy (geometric mean [range] over the error levels; >=: a "
        "lower bound, every run of the first solver at the reference floor):"
    )
    print("\n".join(summary))
    path = write_result(args.out or RESULTS / "pde_pareto.json", out, device=args.device)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    start = time.perf_counter()
    code = main()
    print(f"total {time.perf_counter() - start:.1f} s")
    sys.exit(code)
