"""The tour's sections in order, choosing some of them, and running them."""

from __future__ import annotations

import json
import os
import textwrap
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from simsci.errors import unknown_name
from simsci.tour import (
    _cocld,
    _dno,
    _driving,
    _dynadiff,
    _environments,
    _gfg,
    _latent_ode,
    _pde_solvers,
    _sdevi,
    _vectorworld,
)
from simsci.tour._common import Context


@dataclass(frozen=True)
class Section:
    """One section of the tour: ``name`` (for ``--section``), ``title`` (its heading and
    its key in summary.json) and the module that runs it (``module.run(ctx) -> dict``,
    its docstring: a one-line summary, then the numbered steps)."""

    name: str
    title: str
    module: ModuleType

    @property
    def summary(self) -> str:
        return self.module.__doc__.strip().splitlines()[0]

    @property
    def steps(self) -> str:
        body = self.module.__doc__.strip("\n").split("\n", 2)[2]
        return textwrap.indent(textwrap.dedent(body).rstrip(), "  ")

    @property
    def run(self) -> Callable[[Context], dict]:
        return self.module.run


SECTIONS: dict[str, Section] = {
    s.name: s
    for s in (
        Section("latent_ode", "latent ODE on irregular Lorenz-63", _latent_ode),
        Section("pde_solvers", "PDE solvers on Burgers", _pde_solvers),
        Section("environments", "environments and a learned surrogate", _environments),
        Section("dno", "∂-NO on Burgers", _dno),
        Section("sdevi", "SDEVI on an irregular pendulum", _sdevi),
        Section("cocld", "CoCLD on population-coupled events", _cocld),
        Section("gfg", "plain vs grounded rollout of a lifted system", _gfg),
        Section("dynadiff", "DynaDiff: a predictor for an unseen Lotka-Volterra", _dynadiff),
        Section("driving", "driving world: roads, traffic, tiles", _driving),
        Section("vectorworld", "VectorWorld: a streamed closed-loop rollout", _vectorworld),
    )
}


def select(names: Iterable[str] | None = None) -> list[Section]:
    """The sections named in ``names`` (each may list several, comma-separated), in tour
    order, each once; every section when ``names`` is None or empty."""
    wanted = {n.strip() for item in names or () for n in str(item).split(",")} - {""}
    for name in sorted(wanted):
        if name not in SECTIONS:
            raise unknown_name("tour section", name, SECTIONS)
    return [s for s in SECTIONS.values() if not wanted or s.name in wanted]


def listing() -> str:
    """One line per section: its name and what it shows."""
    width = max(len(name) for name in SECTIONS)
    return "\n".join(f"{s.name:<{width}}  {s.summary}" for s in SECTIONS.values())


def run_section(section: Section | str, ctx: Context) -> dict:
    """Run one section (a Section or its name) in ``ctx``; the same seed, the same
    figures, whether it runs alone or inside the tour."""
    import torch

    if isinstance(section, str):
        (section,) = select([section])
    print(f"\n##### {section.title} #####", flush=True)
    torch.manual_seed(ctx.seed)  # what a section builds without a seed of its own
    return section.run(ctx)


def run(
    names: Iterable[str] | None = None,
    *,
    out: str | os.PathLike = "runs/tour",
    quick: bool = False,
    device="cpu",
    seed: int = 0,
) -> dict:
    """Run the named sections (all, in order, when ``names`` is None) into ``out``; write
    their figures to ``out/summary.json`` (keyed by title, with ``total_seconds``) and
    return them. ``quick``: smoke-test sizes, seconds per section."""
    import torch

    from simsci._device import resolve_device
    from simsci._seeding import check_seed

    sections = select(names)  # refuse an unknown name before anything is written
    ctx = Context(Path(out), resolve_device(device), quick=quick, seed=check_seed(seed))
    ctx.out.mkdir(parents=True, exist_ok=True)
    if ctx.device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        # The tour's tensors are small: a second OpenMP thread buys nothing, and on a
        # 2-core machine with any other load every op would wait for a busy core (seen:
        # the Lorenz training 12x slower). OMP_NUM_THREADS, when set, wins.
        torch.set_num_threads(1)
    results, start = {}, time.perf_counter()
    for section in sections:
        results[section.title] = run_section(section, ctx)
    results["total_seconds"] = round(time.perf_counter() - start, 1)
    summary = ctx.out / "summary.json"
    summary.write_text(json.dumps(results, indent=2, default=float) + "\n")
    print(f"\ntour finished in {results['total_seconds']:.0f} s; summary: {summary}")
    return results
