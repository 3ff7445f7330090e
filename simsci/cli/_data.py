"""``simsci data info|check``: look at and validate trajectory files."""

from __future__ import annotations

import sys

from simsci.cli._common import HelpFormatter


def add_to(sub) -> None:
    p = sub.add_parser(
        "data",
        help="inspect or validate trajectory files",
        description="Inspect (info) or validate (check) a trajectory file or a directory "
        "of shards against the format contract.",
        formatter_class=HelpFormatter,
    )
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    info = dsub.add_parser(
        "info",
        help="print a readable summary of a dataset",
        description="Print kind, system, episode count and lengths, fields with shapes, "
        "dtypes and names, parameter ranges, static arrays, graphs and file size.",
    )
    info.add_argument("path", help="a .h5 file or a directory of part-*.h5 shards")
    info.set_defaults(run=run_info)
    check = dsub.add_parser(
        "check",
        help="check every rule of the format; exit 1 if any is broken",
        description="Check every rule of the trajectory format contract and print each "
        "problem with the file, field, episode and rule it concerns. Exit status 0 when "
        "the file is valid, 1 when it is not.",
    )
    check.add_argument("path", help="a .h5 file or a directory of part-*.h5 shards")
    check.set_defaults(run=run_check)


def run_info(args) -> int:
    from simsci import data

    print(data.info(args.path))
    return 0


def run_check(args) -> int:
    from simsci import data

    problems = data.check_file(args.path)
    if not problems:
        print(f"{args.path}: OK (every rule of the format holds)")
        return 0
    for problem in problems:
        print(problem, file=sys.stderr)  # each names its file, field, episode and rule
    print(f"{args.path}: {len(problems)} problem(s)", file=sys.stderr)
    return 1
