"""ETDRK4 vs py-pde on Burgers and Kuramoto-Sivashinsky: time at equal error, error at
equal time (target: >= 10x faster at equal error).

Claim checked: simsci's batched pseudo-spectral ETDRK4 reaches a given accuracy much
faster than py-pde, the established Python PDE package (numba-compiled finite
differences), on the same problem with the same initial conditions.

Both run in the same call of :func:`simsci.bench.pde_benchmark` (its docstring has the
method): the same band-limited Gaussian-random-field initial fields on the same periodic
box, scored against one ETDRK4 reference (float64, at the finest grid of the run and
half the smallest ETDRK4 step) by the relative L2 error at the final time; warm wall
time per trajectory (median of repeats; py-pde's numba compilation excluded and one
warm-up run first). py-pde runs its adaptive Runge-Kutta-Fehlberg 4(5)
(``py-pde:rkf45``) and its classical RK4 at fixed steps (``py-pde:rk4``; steps beyond
its stability limit blow up and are recorded) over a range of grids wide enough for its
second-order differences to reach the errors ETDRK4 covers; ETDRK4 runs over coarser
grids and a few steps. The comparison is along the Pareto fronts, at matched accuracy:

- time at equal error: ``t_py-pde(e) / t_ETDRK4(e)`` at errors inside both fronts'
  ranges (log-log interpolation, no extrapolation), against py-pde's best front (the
  union of its two solvers);
- error at equal time: ``e_py-pde(t) / e_ETDRK4(t)`` at times inside both ranges.

ETDRK4 is timed twice: solving the ``n`` trajectories in one batch (how simsci makes
data), and one trajectory per call (``[batch 1]``, the like-for-like comparison with
py-pde, which integrates one field at a time).

py-pde is the peer :class:`pypde_peer.PyPDEPeer` (the library calls no peer; it is
handed to ``pde_benchmark(..., peers=[...])`` here). Any other PDE that py-pde can
express (``--problems heat,allen_cahn``, see ``pypde_peer.PYPDE_EQUATIONS``) runs every
simsci method on the problem's default grid (``--quick``: the smoke-run sizes) with
py-pde side by side on its default grids: what ``simsci bench pde`` did with py-pde
installed before the peer moved out of the package.

Timing: every run is the median of ``--repeat`` calls (3, also with ``--quick``) with
the spread of the calls recorded; the fronts are built from the medians, and a
comparison whose front a run's spread crosses is flagged unstable (printed, and
``unstable`` in the JSON): on a shared machine one slow call no longer drops a run
from a front and swings the speed-up (:mod:`simsci.bench._fronts`).

``--quick`` is a smoke run sized by py-pde's compilation, which is most of its wall
time (numba, ~10-30 s per stepper on two cores; each py-pde grid and solver compiles
its own): Burgers only (``--problems`` adds Kuramoto-Sivashinsky, whose quick sizes
give no overlapping errors anyway), ETDRK4 on three grids at one step, py-pde's RKF45
on one grid, 2 trajectories.

Usage: ``python benchmarks/bench_pde_pypde.py [--quick] [--device cpu|cuda] [--n 8]
[--problems burgers,kuramoto_sivashinsky]``. Writes
``benchmarks/results/pde_pypde.json`` (``--out`` to change). Needs py-pde
(``pip install 'simsci[compare]'``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from pypde_peer import PYPDE_EQUATIONS, PyPDEPeer

from simsci.bench import format_table, pde_benchmark, write_result

RESULTS = Path(__file__).resolve().parent / "results"

#: the claim's problems: (full, quick) pde_benchmark keywords and the peer's grids
PROBLEMS = {
    "burgers": (
        (
            dict(t_end=0.5, resolutions=[48, 64, 80, 96, 128, 160],
                 dts={"etdrk4": [1e-2, 5e-3, 2e-3, 1e-3, 5e-4]}),
            dict(resolutions=[128, 256, 512, 1024, 2048], dts=[1e-4, 2.5e-5],
                 tolerances=[1e-6]),
        ),
        (
            # one step size: at these grids the error is spatial (equal for 1e-3)
            dict(t_end=0.2, resolutions=[48, 64, 96], dts={"etdrk4": [2e-3]}),
            dict(resolutions=[256], dts=[], tolerances=[1e-6]),
        ),
    ),
    "kuramoto_sivashinsky": (
        (
            dict(t_end=10.0, resolutions=[96, 112, 128, 144, 160, 192],
                 dts={"etdrk4": [1.0, 0.5, 0.25, 0.1, 0.05]}),
            # its error is spatial: tolerance 1e-4 gives the same
            dict(resolutions=[192, 256, 384, 512], dts=[], tolerances=[1e-6]),
        ),
        (
            dict(t_end=5.0, resolutions=[112, 128], dts={"etdrk4": [0.5, 0.25]}),
            dict(resolutions=[256], dts=[], tolerances=[1e-5]),
        ),
    ),
}  # fmt: skip


def run_problem(problem: str, quick: bool, n: int, repeat: int, device: str) -> dict:
    """One problem with py-pde side by side: the claim's setup (ETDRK4 only, both
    batchings, 5 error levels) or, for another expressible PDE, every simsci method on
    the default grid (quick: smoke-run sizes) against py-pde's default grids."""
    common = dict(n=n, repeat=repeat, device=device, log=True)
    if problem not in PROBLEMS:
        return pde_benchmark(problem, quick=quick, peers=[PyPDEPeer(quick=quick)], **common)
    kwargs, grids = PROBLEMS[problem][1 if quick else 0]
    return pde_benchmark(
        problem,
        methods=["etdrk4"],
        batches=(n, 1),
        peers=[PyPDEPeer(**grids)],
        levels=5,
        **common,
        **kwargs,
    )


def comparison_rows(result: dict) -> list[dict]:
    """The matched-accuracy comparisons of ETDRK4 (both batchings) with py-pde."""
    rows = []
    for sp in result["speedups"]:
        if sp["solver"].startswith("simsci:etdrk4") and sp["versus"].startswith("py-pde"):
            rows.append(sp)
    return rows


def describe(problem: str, result: dict) -> str:
    lines = [f"== {problem}: ETDRK4 vs py-pde (matched accuracy)"]
    for sp in comparison_rows(result):
        head = f"  {sp['solver']} vs {sp['versus']}:"
        if not sp["overlap"]:
            lines.append(f"{head} {sp['note']}")
            continue
        spread = sp.get("geomean_spread")
        lines.append(
            f"{head} time at equal error (geomean {sp['geomean']:.3g}x"
            + (f", {spread[0]:.3g}-{spread[1]:.3g}x over the timing spread" if spread else "")
            + ")"
        )
        if sp.get("unstable"):
            lines.append(
                "    UNSTABLE: the timing spread of "
                + ", ".join(f"{r['solver']} {r['resolution']}" for r in sp["unstable_runs"])
                + " crosses its front"
            )
        for e, ta, tb, r in zip(sp["errors"], sp["seconds_a"], sp["seconds_b"], sp["speedup"]):
            lines.append(
                f"      error {e:8.2e}: ETDRK4 {ta:9.3g} s/traj, py-pde {tb:9.3g} s/traj -> "
                f"{r:7.3g}x"
            )
        eq = sp.get("error_ratio_at_equal_time")
        if eq:
            lines.append("    error at equal time")
            for t, ea, eb, r in zip(eq["seconds"], eq["error_a"], eq["error_b"], eq["ratio"]):
                lines.append(
                    f"      {t:9.3g} s/traj: ETDRK4 error {ea:8.2e}, py-pde {eb:8.2e} -> "
                    f"{r:9.3g}x lower"
                )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--device", default="cpu", help="device of the simsci side")
    parser.add_argument("--n", type=int, default=None, help="trajectories (default 8; quick 2)")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls (median)")
    parser.add_argument("--out", default=None, help="JSON path (default results/pde_pypde.json)")
    parser.add_argument(
        "--problems",
        default=None,
        help="comma-separated (default: the claim's, --quick: burgers; any PDE py-pde can express)",
    )
    args = parser.parse_args()
    try:
        import pde  # noqa: F401
    except ImportError as exc:
        print(f"bench_pde_pypde needs py-pde ({exc}): pip install 'simsci[compare]'")
        return 1
    n = args.n or (2 if args.quick else 8)
    repeat = args.repeat
    out = {
        "benchmark": "pde_pypde",
        "claim": ">= 10x faster than py-pde at equal error (ETDRK4, Burgers and KS)",
        "quick": args.quick,
        "load_average_before": os.getloadavg(),
        "problems": {},
    }
    problems = (args.problems or ("burgers" if args.quick else ",".join(PROBLEMS))).split(",")
    missing = [p for p in problems if p not in PYPDE_EQUATIONS]
    if missing:
        reason = {p: PyPDEPeer().status(p)["reason"] for p in missing}
        print(f"py-pde cannot run {missing}: {reason}")
        return 1
    for problem in problems:
        start = time.perf_counter()
        result = run_problem(problem, args.quick, n, repeat, args.device)
        result["wall_seconds"] = time.perf_counter() - start
        print(format_table(result))
        print(describe(problem, result), flush=True)
        out["problems"][problem] = {
            "comparisons": comparison_rows(result),
            **{k: result[k] for k in ("params", "settings", "reference", "fronts", "crossings")},
            "pypde": result["peers"]["py-pde"],
            "runs": result["runs"],
            "wall_seconds": result["wall_seconds"],
        }
    out["load_average_after"] = os.getloadavg()
    path = write_result(args.out or RESULTS / "pde_pypde.json", out, device=args.device)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    start = time.perf_counter()
    code = main()
    print(f"total {time.perf_counter() - start:.1f} s")
    sys.exit(code)
