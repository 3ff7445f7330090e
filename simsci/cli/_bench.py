"""``simsci bench``: the PDE-solver benchmark and the benchmark scripts of the source tree.

``simsci bench pde --system burgers`` runs :func:`simsci.bench.pde_benchmark`: every
solver method of a registered PDE over resolutions and step sizes, error against a fine
reference, warm time per trajectory, speed-ups at matched accuracy; it prints the table
and writes ``result.json`` and ``pareto.png`` under ``--out``. ``simsci bench pde
--help`` lists its options. The library runs no peer package: the comparison with py-pde
is the script ``benchmarks/bench_pde_pypde.py`` (``simsci bench pde_pypde --problems
burgers``), and ``simsci bench pde`` says so after its table.

Any other NAME runs a script (one action per script found): benchmarks live outside the
package, in ``benchmarks/`` of the repository (a wheel install has only ``pde``), one
script per claim (shared/design/architecture.md); each compares against a named peer in
the same run and writes JSON under ``benchmarks/results/``. This command finds that
folder (beside the installed package for an editable install, else in the current
directory) and runs a script by its short name: ``simsci bench odeint_grid --quick``
runs ``benchmarks/bench_odeint_grid.py --quick`` (options after the name go to the
script, ``--help`` included; ``--`` is optional). A script whose short name is taken by
a built-in benchmark (``benchmarks/bench_pde.py``) runs by its file stem: ``simsci bench
bench_pde``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from simsci.cli._common import (
    LAZY_TEXT,
    HelpFormatter,
    add_action,
    add_deprecated,
    add_device,
    add_episodes,
    add_out,
    add_param,
    add_seed,
    allow_free_form,
    legacy_params,
    params,
)

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
    )
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.set_defaults(run=run_list, cli_parser=p, extra_options=False)
    actions = p.add_subparsers(dest="bench_action", metavar="NAME", title="benchmarks")
    _add_pde(actions)
    try:
        scripts = available()
    except FileNotFoundError:  # a wheel install: only the built-in benchmarks
        scripts = {}
    for name, path in scripts.items():
        # the script's own options pass through untouched (--help included)
        script = add_action(
            actions,
            name,
            help=f"benchmarks/{path.name}",
            description=f"Run benchmarks/{path.name}; options after the name go to it.",
            run=run_script,
            extra_options=True,
            add_help=False,
        )
        script.set_defaults(script=str(path))
        if not name.startswith("bench_"):  # the file stem works too, unlisted
            actions.choices.setdefault(f"bench_{name}", script)


def run_list(args) -> int:
    """``simsci bench`` / ``simsci bench --list``: the built-in benchmarks and scripts."""
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


def run_script(args) -> int:
    rest = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
    return subprocess.call([sys.executable, args.script, *rest])


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


def _stepper_names() -> str:
    from simsci.systems import PDE_STEPPERS

    return ", ".join(PDE_STEPPERS)


LAZY_TEXT["PDE_STEPPERS"] = _stepper_names


def _peer_note(args) -> str:
    """Where the peer comparison lives (the library runs no peer)."""
    quick = " --quick" if args.quick else ""
    return (
        f"\npeer comparison: py-pde runs from {PYPDE_SCRIPT}, not from the package: "
        f"simsci bench pde_pypde --problems {args.system}{quick}"
    )


PDE_DESCRIPTION = f"""\
Benchmark the solvers of one PDE: each method over resolutions and step sizes, relative
L2 error against a fine reference (float64), warm wall time per trajectory (device
synchronised, median), Pareto fronts and speed-ups at matched accuracy (never raw).
Trained operator checkpoints (--checkpoint) run side by side on the same initial
conditions; the py-pde comparison is the script {PYPDE_SCRIPT} (simsci bench pde_pypde
--problems SYSTEM). Prints the table; writes OUT/result.json and OUT/pareto.png. PDE
parameters go as --param NAME=VALUE.

example:
  simsci bench pde --system burgers --param nu=0.001 --quick --out runs/bench/burgers
"""


def _add_pde(actions) -> None:
    p = add_action(
        actions,
        "pde",
        help=BUILTIN["pde"],
        description=PDE_DESCRIPTION,
        run=run_pde,
        extra_options=True,  # the deprecated free-form --NAME VALUE parameters
    )
    p.add_argument("--system", required=True, help="a registered PDE, e.g. burgers")
    add_deprecated(p, "--problem", "--system", dest="system", type=str)
    p.add_argument(
        "--methods",
        type=_csv(str),
        default=None,
        help="comma-separated methods of the system (default: all; the time steppers: "
        "@PDE_STEPPERS@)",
    )
    p.add_argument(
        "--resolutions",
        type=_csv(_resolution),
        default=None,
        help="comma-separated points per axis, e.g. 64,128 or 32x64 (default: per system)",
    )
    p.add_argument(
        "--dts", type=_csv(float), default=None, help="step sizes for every method (default: "
        "per system and method; explicit methods at fractions of their stability limit)"
    )  # fmt: skip
    p.add_argument("--t-end", type=float, default=None, help="final time (default: per system)")
    add_episodes(p, default=4, help="trajectories, solved as one batch", deprecated=("--n",))
    p.add_argument("--repeat", type=int, default=3, help="timed calls per configuration")
    add_seed(p, help="the seed of the initial fields")
    add_device(p)
    p.add_argument(
        "--dtype", choices=["float64", "float32"], default="float64", help="the solvers' precision"
    )
    p.add_argument(
        "--checkpoint",
        action="append",
        default=None,
        metavar="CKPT",
        help="a trained operator checkpoint to add (repeatable)",
    )
    add_deprecated(p, "--model", "--checkpoint", dest="checkpoint", type=str, append=True)
    add_deprecated(
        p, "--no-pypde", f"nothing (py-pde never runs here: {PYPDE_SCRIPT})", dest="no_pypde",
        flag=True,
    )  # fmt: skip
    p.add_argument("--quick", action="store_true", help="small grids (a smoke run)")
    add_param(p, what="a PDE parameter (nu=0.001)")
    allow_free_form(p, "PDE parameters")
    add_out(p, "dir", default=None, help="the output folder (default: runs/bench/SYSTEM)")
    p.add_argument("--no-plot", action="store_true", help="do not write pareto.png")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run_pde(args) -> int:
    import torch

    from simsci.bench import format_table, pde_benchmark, plot_pareto, write_result
    from simsci.cli._generate import system_arguments

    values = {**legacy_params(args.extra, system_arguments, "simsci bench pde"), **params(args)}
    result = pde_benchmark(
        args.system,
        methods=args.methods,
        resolutions=args.resolutions,
        dts=args.dts,
        n=args.episodes,
        t_end=args.t_end,
        params=values or None,
        device=args.device,
        dtype=getattr(torch, args.dtype),
        models=args.checkpoint or (),
        seed=args.seed,
        repeat=args.repeat,
        quick=args.quick,
        log=not args.quiet,
    )
    out = Path(args.out or Path("runs") / "bench" / args.system)
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
