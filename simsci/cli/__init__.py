"""The ``simsci`` command (also ``python -m simsci``).

Subcommands live in one private module each and register themselves on the parser:
``generate``, ``data info|check|import``, ``train``, ``evaluate``, ``events``, ``env``,
``zoo``, ``dynadiff``, ``bench``, ``tour``. Later
capabilities add theirs to ``_COMMANDS``.

Errors a user can cause (simsci errors, bad values, missing files) print one clear line
``simsci: error: ...`` and exit with status 2, never a traceback; ``--traceback`` shows it.
"""

from __future__ import annotations

import argparse
import sys

from simsci._version import __version__
from simsci.cli import (
    _bench,
    _data,
    _driving,
    _dynadiff,
    _env,
    _events,
    _generate,
    _tour,
    _train,
    _vectorworld,
)

_COMMANDS = (
    _generate,
    _data,
    _train,
    _events,
    _dynadiff,
    _driving,
    _vectorworld,
    _env,
    _bench,
    _tour,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simsci",
        description="Simulation and scientific machine learning of dynamics: make data, "
        "train models, run benchmarks. Run 'simsci COMMAND --help' for each command.",
    )
    parser.add_argument("--version", action="version", version=f"simsci {__version__}")
    parser.add_argument(
        "--traceback", action="store_true", help="show the full traceback on errors"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _COMMANDS:
        module.add_to(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Commands that take free-form --NAME VALUE pairs (system parameters of `generate`)
    # set `extra_options`; anything unknown elsewhere is the usual argparse error.
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "extra_options", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print("simsci: interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, FileNotFoundError, RuntimeError, OSError) as exc:
        if args.traceback:
            raise
        print(f"simsci: error: {exc}", file=sys.stderr)
        return 2
