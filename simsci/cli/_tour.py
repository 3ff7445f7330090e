"""``simsci tour``: the main job on built-in defaults, for a newcomer (``make tour``).

The sections live in :mod:`simsci.tour`, one module each; this is the command.
"""

from __future__ import annotations

from simsci.cli._common import LAZY_TEXT, add_action, add_device, add_out, add_seed

_INTRO = """\
Every capability on built-in defaults, section by section, in this order; plots and
summary.json land in --out. --section NAME runs only that section (repeat it or list
names comma-separated; each section makes the data it needs), --list names them. The
whole tour must stay under 5 minutes on 2 CPU cores; --quick shrinks every section to
seconds (the test suite runs it that way)."""


def _sections() -> str:
    """Each section's steps (imports the tour, so only when the help is shown)."""
    from simsci.tour import SECTIONS

    parts = [f'Section "{s.title}" (--section {s.name}):\n{s.steps}' for s in SECTIONS.values()]
    return "\n\n".join(parts)


LAZY_TEXT["TOUR_SECTIONS"] = _sections


def add_to(sub) -> None:
    p = add_action(
        sub,
        "tour",
        help="run the guided tour on built-in defaults",
        description=f"{_INTRO}\n\n@TOUR_SECTIONS@",
        run=run,
    )
    add_out(p, "dir", default="runs/tour", help="where data, runs, plots and summary.json go")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of seconds")
    add_device(p)
    add_seed(p, help="every section's seeds derive from it")
    p.add_argument(
        "--section",
        action="append",
        metavar="NAME",
        help="run only this section (repeatable, or NAME,NAME); default: all, in order",
    )
    p.add_argument("--list", action="store_true", help="list the sections and exit")


def run(args) -> int:
    from simsci import tour

    if args.list:
        print(tour.listing())
        return 0
    tour.run(args.section, out=args.out, quick=args.quick, device=args.device, seed=args.seed)
    return 0
