"""``simsci bench``: run the benchmark scripts of the source tree.

Benchmarks live outside the package, in ``benchmarks/`` of the repository, one script
per claim (shared/design/architecture.md); each compares against a named peer in the
same run and writes JSON under ``benchmarks/results/``. This command finds that folder
(beside the installed package for an editable install, else in the current directory)
and runs a script by its short name: ``simsci bench odeint_grid`` runs
``benchmarks/bench_odeint_grid.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from simsci.cli._common import HelpFormatter
from simsci.errors import unknown_name


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
    folder = benchmarks_dir()
    return {p.stem.removeprefix("bench_"): p for p in sorted(folder.glob("bench_*.py"))}


def add_to(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="run a benchmark script (see --list)",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument("name", nargs="?", help="benchmark name, e.g. odeint_grid (see --list)")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.add_argument("args", nargs="*", help="passed to the script (after --), e.g. -- --quick")
    p.set_defaults(run=run)


def run(args) -> int:
    scripts = available()
    if args.list or not args.name:
        for name, path in scripts.items():
            print(f"{name:20s} {path}")
        return 0
    if args.name not in scripts:
        raise unknown_name("benchmark", args.name, scripts)
    return subprocess.call([sys.executable, str(scripts[args.name]), *args.args])
