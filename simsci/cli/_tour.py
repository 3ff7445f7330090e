"""``simsci tour``: the main job on built-in defaults, for a newcomer (``make tour``).

The sections live in :mod:`simsci.tour`, one module each; this is the command.
"""

from __future__ import annotations

from simsci.cli._common import HelpFormatter

_INTRO = """\
Every capability on built-in defaults, section by section, in this order; plots and
summary.json land in --out. --section NAME runs only that section (repeat it or list
names comma-separated; each section makes the data it needs), --list names them. The
whole tour must stay under 5 minutes on 2 CPU cores; --quick shrinks every section to
seconds (the test suite runs it that way)."""


def _description() -> str:
    from simsci.tour import SECTIONS

    parts = [_INTRO]
    for s in SECTIONS.values():
        parts.append(f'Section "{s.title}" (--section {s.name}):\n{s.steps}')
    return "\n\n".join(parts)


def add_to(sub) -> None:
    p = sub.add_parser(
        "tour",
        help="run the guided tour on built-in defaults",
        description=_description(),
        formatter_class=HelpFormatter,
    )
    p.add_argument("--out", default="runs/tour", help="where data, runs and plots go")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of seconds")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--seed", type=int, default=0, help="every section's seeds derive from it")
    p.add_argument(
        "--section",
        action="append",
        metavar="NAME",
        help="run only this section (repeatable, or NAME,NAME); default: all, in order",
    )
    p.add_argument("--list", action="store_true", help="list the sections and exit")
    p.set_defaults(run=run)


def run(args) -> int:
    from simsci import tour

    if args.list:
        print(tour.listing())
        return 0
    tour.run(args.section, out=args.out, quick=args.quick, device=args.device, seed=args.seed)
    return 0
