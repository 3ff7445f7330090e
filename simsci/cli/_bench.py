"""``simsci bench``: the PDE-solver benchmark and the benchmark scripts of the source tree.

``simsci bench pde --problem burgers`` runs :func:`simsci.bench.pde_benchmark`: every
solver method of a registered PDE over resolutions and step sizes, error against a fine
reference, warm time per trajectory, speed-ups at matched accuracy; it prints the table
and writes ``result.json`` and ``pareto.png`` under ``--out``. ``simsci bench pde
--help`` lists its options. The library runs no peer package: the comparison with py-pde
is the script ``benchmarks/bench_pde_pypde.py`` (``simsci bench pde_pypde --problems
burgers``), and ``simsci bench pde`` says so after its table.

Any other NAME runs a script: benchmarks live outside the package, in ``benchmarks/`` of
the repository, one script per claim (shared/design/architecture.md); each compares
against a named peer in the same run and writes JSON under ``benchmarks/results/``. This
command finds that folder (beside the installed package for an editable install, else in
the current directory) and runs a script by its short name: ``simsci bench odeint_grid
--quick`` runs ``benchmarks/bench_odeint_grid.py --quick`` (options after the name go to
the script; ``--`` is optional). A script whose short name is taken by a built-in
benchmark (``benchmarks/bench_pde.py``) runs by its file stem: ``simsci bench
bench_pde``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from simsci.cli._common import HelpFormatter, key_values
from simsci.errors import unknown_name

#: where the py-pde side of the PDE benchmark lives (peers run only from benchmarks/)
PYPDE_SCRIPT = "benchmarks/bench_pde_pypde.py"

#: benchmarks built into the package: name -> one-line description
BUILTIN = {
    "pde": "PDE solvers: error vs time per trajectory, Pareto fronts, speed-ups at matched "
    "accuracy (simsci bench pde --help)",
}


def benchmarks_dir() -> Path:
    """The repository's benchmarks/ folder, or a clear error when there is none."""
    here = Path(__file__).resolve().parents[2] / "benchmarks"
    for candidate in (here, Path.cwd() / "benchmarks"):
        if candidate.is_dir() and any(candidate.glob("bench_*.py")):
            return candidate
    raise FileNotFoundError(
        "no benchmarks/ folder found: benchmarks ship with the source repository, not the "
        "wheel; run this from a clone of simsci (or an editable install of it)"
    )


def available() -> dict[str, Path]:
    """Scripts by short name (``bench_NAME.py`` -> ``NAME``); a name taken by a built-in
    benchmark is listed under the file stem (``bench_pde``)."""
    folder = benchmarks_dir()
    out = {}
    for path in sorted(folder.glob("bench_*.py")):
        name = path.stem.removeprefix("bench_")
        out[path.stem if name in BUILTIN else name] = path
    return out


def add_to(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="run a benchmark: 'pde' (built in) or a script (see --list)",
        description=__doc__,
        formatter_class=HelpFormatter,
        add_help=False,
    )
    p.add_argument("-h", "--help", action="store_true", help="show this help message and exit")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.add_argument("name", nargs="?", help="'pde' or a script name, e.g. odeint_grid (--list)")
    p.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        help="options of the benchmark: simsci bench pde --help, or a script's own options",
    )
    p.set_defaults(run=run, bench_parser=p)


def run(args) -> int:
    if args.name in BUILTIN:
        if args.help:
            args.args = ["--help", *args.args]
        ns, extra = pde_parser().parse_known_args(args.args)
        return run_pde(ns, extra)
    if args.help:
        args.bench_parser.print_help()
        raise SystemExit(0)
    if args.list or not args.name:
        for name, text in BUILTIN.items():
            print(f"{name:20s} {text}")
        try:
            scripts = available()
        except FileNotFoundError as exc:
            print(f"(scripts: {exc})")
            return 0
        for name, path in scripts.items():
            print(f"{name:20s} {path}")
        return 0
    scripts = available()
    name = args.name
    if name not in scripts and f"bench_{name}" in scripts:
        name = f"bench_{name}"
    if name not in scripts and name.removeprefix("bench_") in scripts:
        name = name.removeprefix("bench_")
    if name not in scripts:
        raise unknown_name("benchmark", args.name, [*BUILTIN, *scripts])
    rest = args.args[1:] if args.args[:1] == ["--"] else args.args
    return subprocess.call([sys.executable, str(scripts[name]), *rest])


# ---------------------------------------------------------------------- bench pde
def _csv(kind):
    def parse(text: str):
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        try:
            return [kind(t) for t in items]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"bad list {text!r}: {exc}") from exc

    return parse


def _resolution(text: str):
    """'64' -> 64, '64x32' -> (64, 32)."""
    parts = text.lower().split("x")
    return int(parts[0]) if len(parts) == 1 else tuple(int(p) for p in parts)


def _stepper_names() -> list[str]:
    from simsci.systems import PDE_STEPPERS

    return list(PDE_STEPPERS)


def _peer_note(args) -> str:
    """Where the peer comparison lives (the library runs no peer)."""
    quick = " --quick" if args.quick else ""
    return (
        f"\npeer comparison: py-pde runs from {PYPDE_SCRIPT}, not from the package: "
        f"simsci bench pde_pypde --problems {args.problem}{quick}"
    )


def pde_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="simsci bench pde",
        description="Benchmark the solvers of one PDE: each method over resolutions and step "
        "sizes, relative L2 error against a fine reference (float64), warm wall time per "
        "trajectory (device synchronised, median), Pareto fronts and speed-ups at matched "
        "accuracy (never raw). Trained operator checkpoints (--model) run side by side on "
        "the same initial conditions; the py-pde comparison is the script "
        f"{PYPDE_SCRIPT} (simsci bench pde_pypde --problems PROBLEM). Prints the table; "
        "writes OUT/result.json and OUT/pareto.png. PDE parameters go as --NAME VALUE "
        "(e.g. --nu 0.001).",
    )
    p.add_argument("--problem", required=True, help="a registered PDE, e.g. burgers")
    p.add_argument(
        "--methods",
        type=_csv(str),
        default=None,
        help="comma-separated methods of the problem (default: all; the time steppers: "
        f"{', '.join(_stepper_names())})",
    )
    p.add_argument(
        "--resolutions",
        type=_csv(_resolution),
        default=None,
        help="comma-separated points per axis, e.g. 64,128 or 32x64 (default: per problem)",
    )
    p.add_argument(
        "--dts", type=_csv(float), default=None, help="step sizes for every method (default: "
        "per problem and method; explicit methods at fractions of their stability limit)"
    )  # fmt: skip
    p.add_argument("--t-end", type=float, default=None, help="final time (default: per problem)")
    p.add_argument("--n", type=int, default=4, help="trajectories, one batch (default: 4)")
    p.add_argument(
        "--repeat", type=int, default=3, help="timed calls per configuration (default: 3)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the initial fields (default: 0)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: cpu)")
    p.add_argument(
        "--dtype", choices=["float64", "float32"], default="float64", help="(default: float64)"
    )
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="CKPT",
        help="a trained operator checkpoint to add (repeatable)",
    )
    p.add_argument(
        "--no-pypde",
        action="store_true",
        help=f"kept for old command lines: py-pde never runs here (see {PYPDE_SCRIPT})",
    )
    p.add_argument("--quick", action="store_true", help="small grids (a smoke run)")
    p.add_argument(
        "--param", action="append", metavar="NAME=VALUE", help="a PDE parameter (repeatable)"
    )
    p.add_argument("--out", default=None, help="output folder (default: runs/bench/PROBLEM)")
    p.add_argument("--no-plot", action="store_true", help="do not write pareto.png")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def run_pde(args, extra: list[str] | None = None) -> int:
    import torch

    from simsci.bench import format_table, pde_benchmark, plot_pareto, write_result
    from simsci.cli._generate import system_arguments

    params = key_values(args.param, "--param")
    if extra:
        params.update(system_arguments(extra))
    result = pde_benchmark(
        args.problem,
        methods=args.methods,
        resolutions=args.resolutions,
        dts=args.dts,
        n=args.n,
        t_end=args.t_end,
        params=params or None,
        device=args.device,
        dtype=getattr(torch, args.dtype),
        models=args.model,
        seed=args.seed,
        repeat=args.repeat,
        quick=args.quick,
        log=not args.quiet,
    )
    out = Path(args.out or Path("runs") / "bench" / args.problem)
    print(format_table(result))
    print(_peer_note(args))
    path = write_result(out / "result.json", result, device=result["settings"]["device"])
    print(f"\nwrote {path}")
    if not args.no_plot:
        try:
            print(f"wrote {plot_pareto(result, out / 'pareto.png')}")
        except ImportError as exc:
            print(f"no plot: {exc}")
    return 0
