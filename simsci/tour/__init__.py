"""The guided tour: every capability on built-in defaults, one section each.

``simsci tour`` (``make tour``) runs every section in order; ``simsci tour --section
NAME`` runs some of them, ``--list`` names them. From Python::

    from simsci import tour
    tour.run(["gfg", "cocld"], out="runs/tour", quick=True)   # None: the whole tour
    print(tour.listing())

A section is one module here: a docstring (a one-line summary of what it shows, then its
numbered steps) and ``run(ctx) -> dict``, which prints what it does and returns its
figures (summary.json). ``ctx`` is a :class:`Context`: the output folder, device, quick
flag and seed. Sections share no files: each makes the data it reads, so any one runs
alone and gives the figures it gives inside the tour (the torch seed is set before each).
A new capability adds its module and one line to ``SECTIONS`` (in tour order). The whole
tour must stay under 5 minutes on 2 CPU cores; ``quick`` shrinks every section to seconds
(the test suite runs it that way).
"""

from simsci.tour._common import Context
from simsci.tour._registry import SECTIONS, Section, listing, run, run_section, select

__all__ = ["Context", "Section", "SECTIONS", "listing", "run", "run_section", "select"]
