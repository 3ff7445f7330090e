"""Default grids of the PDE benchmark, per registered PDE (full and ``quick`` sizes).

Sized for two CPU cores (a 1D problem's default run well under a minute). ``t_end`` is
shorter than the systems' data-generation defaults (chaotic Kuramoto-Sivashinsky: 10
time units, so errors are not all O(1)); Gray-Scott runs at 4x Pearson's
diffusivities (patterns twice as wide) so that 64-128 grids resolve it. A PDE without an
entry gets generic defaults from its class attributes and the stepper registry.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from simsci.errors import unknown_name

__all__ = ["PDEBenchSetup", "default_setup"]


@dataclasses.dataclass(frozen=True)
class PDEBenchSetup:
    """Default grid of one benchmark problem (see :func:`default_setup`).

    ``resolutions``: points per axis (a 2D entry ``N`` means ``N x N``). ``dts``: method
    -> step sizes (each output interval takes ``ceil(interval / dt)`` equal steps).
    ``t_end``, ``frames`` (output intervals). ``params``: overrides of the system's
    default parameters. ``reference_factor``: reference resolution over the finest
    tested one; ``reference_dt``: the largest reference step. ``space_order``: spatial
    order assumed for the reference's floor estimate. ``channels``: the channels scored
    (None: all). ``stable_fractions``: method -> fractions of its stability limit
    (:meth:`PDESystem.stable_dt` at each resolution with the run's initial fields), used
    instead of ``dts`` for steppers with a step limit: their error at a resolution is
    spatial as soon as the step is stable, and a fixed list of steps would spend most of
    the run on redundant small steps at coarse grids. (A peer's grids belong to the
    peer: ``benchmarks/pypde_peer.py`` for py-pde.)
    """

    resolutions: tuple[int, ...]
    dts: Mapping[str, tuple[float, ...]]
    t_end: float
    frames: int = 4
    params: Mapping[str, float] = dataclasses.field(default_factory=dict)
    reference_factor: int = 2
    reference_dt: float | None = None
    space_order: int = 4
    channels: tuple[str, ...] | None = None
    stable_fractions: Mapping[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not self.resolutions:
            raise ValueError("a benchmark setup needs at least one resolution")
        if not (math.isfinite(self.t_end) and self.t_end >= 0):
            raise ValueError(f"t_end must be finite and >= 0, got {self.t_end!r}")
        if isinstance(self.frames, bool) or not isinstance(self.frames, int) or self.frames < 1:
            raise ValueError(f"frames must be a positive integer, got {self.frames!r}")
        if self.reference_factor < 2:
            raise ValueError(f"reference_factor must be >= 2, got {self.reference_factor!r}")


def _setups() -> dict[str, tuple[PDEBenchSetup, PDEBenchSetup]]:
    """(full, quick) per problem. Sizes chosen on 2 CPU cores (module docstring)."""
    S = PDEBenchSetup
    rk4 = {"rk4": (0.9, 0.45)}
    rk4_quick = {"rk4": (0.9,)}
    return {
        "advection": (
            S((32, 48, 64, 128), {"etdrk4": (0.1, 0.02), "imex": (0.01, 5e-3, 2e-3, 1e-3)},
              t_end=1.0, stable_fractions=rk4),
            S((32, 64), {"etdrk4": (0.05,), "imex": (0.01, 2e-3)}, t_end=0.5,
              stable_fractions=rk4_quick),
        ),
        "heat": (
            S((32, 48, 64, 128), {"etdrk4": (0.1, 0.02), "imex": (0.02, 0.01, 5e-3, 2e-3)},
              t_end=0.5, stable_fractions=rk4),
            S((32, 64), {"etdrk4": (0.05,), "imex": (0.01, 2e-3)}, t_end=0.2,
              stable_fractions=rk4_quick),
        ),
        "burgers": (
            S((64, 96, 128, 256), {"etdrk4": (2e-3, 1e-3, 5e-4), "imex": (1e-3, 5e-4, 2.5e-4)},
              t_end=0.5, stable_fractions=rk4),
            S((64, 128), {"etdrk4": (2e-3, 1e-3), "imex": (1e-3, 5e-4)}, t_end=0.2,
              stable_fractions=rk4_quick),
        ),
        "kdv": (
            S((128, 192, 256), {"etdrk4": (0.02, 0.01, 5e-3, 2.5e-3),
              "imex": (5e-3, 2e-3, 1e-3)}, t_end=2.0, reference_dt=5e-4, stable_fractions=rk4),
            S((128, 192), {"etdrk4": (0.02, 0.01), "imex": (2e-3,)}, t_end=0.5,
              reference_dt=1e-3, stable_fractions=rk4_quick),
        ),
        "kuramoto_sivashinsky": (
            S((128, 192, 256), {"etdrk4": (0.5, 0.25, 0.1, 0.05), "imex": (0.1, 0.05, 0.02)},
              t_end=10.0, reference_dt=0.0125, stable_fractions=rk4_quick),
            S((128, 192), {"etdrk4": (0.25, 0.1), "imex": (0.05,)}, t_end=5.0,
              reference_dt=0.025, stable_fractions=rk4_quick),
        ),
        "allen_cahn": (
            S((32, 48, 64, 128), {"etdrk4": (0.2, 0.1, 0.05, 0.02),
              "imex": (0.05, 0.02, 0.01)}, t_end=2.0, stable_fractions=rk4),
            S((32, 64), {"etdrk4": (0.2, 0.1), "imex": (0.05,)}, t_end=1.0,
              stable_fractions=rk4_quick),
        ),
        # Navier-Stokes: the FNO setup is smooth at these grids (spectral error ~1e-6 at 32)
        "navier_stokes_2d": (
            S((32, 48, 64), {"etdrk4": (0.1, 0.05, 0.02), "cn": (0.02, 0.01, 5e-3),
              "imex": (0.05, 0.02, 0.01)}, t_end=10.0, reference_dt=0.01,
              stable_fractions={"rk4": (0.9,)}),
            S((16, 32), {"etdrk4": (0.1, 0.05), "cn": (0.02,), "imex": (0.05,)}, t_end=2.0,
              reference_dt=0.02, stable_fractions=rk4_quick),
        ),
        # Gray-Scott with 4x Pearson's diffusivities: patterns twice as wide, so 64-128
        # grids resolve them (Pearson's values need >= 256^2 for errors below 1e-2; at
        # 32-64 every solver is O(1) wrong and the comparison says nothing)
        "gray_scott": (
            S((64, 96, 128), {"etdrk4": (4.0, 2.0, 1.0), "imex": (2.0, 1.0, 0.5)},
              t_end=100.0, params={"Du": 8e-5, "Dv": 4e-5}, reference_dt=0.5,
              stable_fractions={"rk4": (0.9,)}),
            S((64, 96), {"etdrk4": (4.0, 2.0), "imex": (1.0,)}, t_end=100.0,
              params={"Du": 8e-5, "Dv": 4e-5}, reference_dt=1.0, stable_fractions=rk4_quick),
        ),
        "darcy": (
            S((17, 33, 65), {"cg": ()}, t_end=0.0, frames=1, reference_factor=4,
              space_order=1, channels=("u",)),
            S((17, 33), {"cg": ()}, t_end=0.0, frames=1, reference_factor=4,
              space_order=1, channels=("u",)),
        ),
    }  # fmt: skip


def _pde_names() -> list[str]:
    from simsci import systems

    return [name for name in systems.available() if systems.SYSTEMS[name].kind == "field"]


def _check_problem(problem) -> str:
    from simsci import systems

    if not isinstance(problem, str):
        raise TypeError(f"problem must be a registered PDE name (str), got {problem!r}")
    names = _pde_names()
    if problem not in names:
        if problem in systems.SYSTEMS:
            kind = systems.SYSTEMS[problem].kind
            raise ValueError(
                f"{problem!r} is a registered system of kind {kind!r}, not a PDE (kind "
                f"'field'); the PDE benchmark runs one of: {', '.join(names)}"
            )
        raise unknown_name("PDE problem", problem, names)
    return problem


def has_step_limit(method: str) -> bool:
    """Whether ``method`` is a registered PDE stepper with a stability limit (its steps
    are then chosen as fractions of that limit, not from a list)."""
    from simsci.systems import PDE_STEPPERS

    stepper = PDE_STEPPERS.get(method)
    return stepper is not None and not stepper.unconditionally_stable


def default_setup(problem: str, quick: bool = False) -> PDEBenchSetup:
    """The default :class:`PDEBenchSetup` of a registered PDE (``quick``: smoke-run sizes).

    A PDE registered after this table was written gets generic defaults from its class:
    resolutions ``default_resolution / (4, 2, 1)``, steps ``method_dt x (4, 2, 1)`` per
    method (a stepper with a step limit, ``rk4``, at 0.9 and 0.45 of it) and
    ``t_end = min(default_t_end, 2000 default_dt)``.
    """
    from simsci import systems

    problem = _check_problem(problem)
    table = _setups()
    if problem in table:
        return table[problem][1 if quick else 0]
    cls = systems.SYSTEMS[problem]
    base = int(cls.default_resolution[0])
    res = tuple(sorted({max(16, (base // f) // 2 * 2) for f in ((8, 4) if quick else (4, 2, 1))}))
    dts, fractions = {}, {}
    for method in cls.methods:
        if has_step_limit(method):
            fractions[method] = (0.9,) if quick else (0.9, 0.45)
            continue
        dt = float(cls.method_dt.get(method, cls.default_dt))
        dts[method] = tuple(dt * f for f in ((4, 2) if quick else (4, 2, 1)))
    t_end = float(min(cls.default_t_end, 2000 * cls.default_dt))
    return PDEBenchSetup(
        res, dts, t_end=t_end * (0.5 if quick else 1.0), stable_fractions=fractions
    )
