"""The ``simsci`` command (also ``python -m simsci``).

Subcommands live in one private module each and register themselves on the parser:
``generate``, ``data info|check|import|...``, ``train``, ``evaluate``, ``predict``, ``events
predict|generate``, ``zoo build|info``, ``dynadiff data|train|adapt|compare``, ``driving
roads|metrics|ppo|eval``, ``rollout``, ``env list|rollout``, ``bench pde|SCRIPT``, ``export``,
``tour``. A command with several actions has one sub-parser per action (its own usage
line, options and help); the options every command shares are built once, in
:mod:`simsci.cli._common`, under one name per concept. Later capabilities add theirs to
``_COMMANDS``.

Building the parser imports no heavy module (torch, h5py, gymnasium, simsci.models...):
each action imports what it needs when it runs, so ``simsci --help`` is quick.

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
    _export,
    _generate,
    _predict,
    _tour,
    _train,
    _vectorworld,
)
from simsci.cli._common import (
    DEPRECATED,
    LAZY_TEXT,
    OUTPUT_RULE,
    SHARED_NAMES,
    HelpFormatter,
    check_out,
    deprecated_listing,
    warn_deprecated,
)
from simsci.errors import MissingExtraError

_COMMANDS = (
    _generate,
    _data,
    _train,
    _predict,
    _export,
    _events,
    _dynadiff,
    _driving,
    _vectorworld,
    _env,
    _bench,
    _tour,
)

EPILOG = f"""\
{SHARED_NAMES}

{OUTPUT_RULE}

deprecated spellings (they still work in this release and print a DeprecationWarning
line on stderr naming the new one):
@DEPRECATED@"""

LAZY_TEXT["DEPRECATED"] = deprecated_listing


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simsci",
        description="Simulation and scientific machine learning of dynamics: make data,\n"
        "train models, run benchmarks. Run 'simsci COMMAND --help' (and 'simsci COMMAND\n"
        "ACTION --help') for each command and action.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"simsci {__version__}")
    parser.add_argument(
        "--traceback", action="store_true", help="show the full traceback on errors"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _COMMANDS:
        module.add_to(sub)
    return parser


#: groups whose action was a positional word with options allowed anywhere (the grammar
#: before one sub-parser per action); ``rollout`` handles its own (simsci.cli._vectorworld)
_OLD_GROUPS = ("events", "zoo", "dynadiff", "driving", "env")
for _group in _OLD_GROUPS:
    DEPRECATED[(f"simsci {_group}", "OPTION ... ACTION")] = "ACTION OPTION ..."


def _choices(parser: argparse.ArgumentParser) -> dict:
    """The sub-parsers of ``parser`` by name (empty when it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def options_before_action(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The old grammar took a group's options before its action word too (``simsci events
    --device cpu predict ...``): they move after it, with a deprecation warning."""
    commands = _choices(parser)
    i = next((i for i, word in enumerate(argv) if not word.startswith("-")), None)
    word = None if i is None else argv[i]
    if word not in _OLD_GROUPS or word not in commands:
        return argv
    actions = _choices(commands[word])
    k = next((k for k in range(i + 1, len(argv)) if argv[k] in actions), None)
    moved = argv[i + 1 : k] if k is not None else []
    if not moved or not moved[0].startswith("-") or {"-h", "--help"} & set(moved):
        return argv
    old, new = " ".join(moved), f"{argv[k]} {' '.join(moved)}"
    warn_deprecated(
        f"'simsci {word} {old} {argv[k]}' (options before the action)", f"'simsci {word} {new}'"
    )
    return [*argv[: i + 1], argv[k], *moved, *argv[k + 1 :]]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = options_before_action(parser, list(sys.argv[1:] if argv is None else argv))
    # Actions that take arguments they do not declare (the deprecated free-form --NAME
    # VALUE parameters, a benchmark script's options) set `extra_options`; anything
    # unknown elsewhere is the usual argparse error, with the action's own usage line.
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "extra_options", False):
        getattr(args, "cli_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    try:
        check_out(args)
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print("simsci: interrupted", file=sys.stderr)
        return 130
    except (
        ValueError,
        TypeError,
        FileNotFoundError,
        RuntimeError,
        OSError,
        MissingExtraError,  # an optional package to install: the message says which
    ) as exc:
        if args.traceback:
            raise
        print(f"simsci: error: {exc}", file=sys.stderr)
        return 2
