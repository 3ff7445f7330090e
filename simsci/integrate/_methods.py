"""Solver registries: what each ODE/SDE method is, and what it supports.

Plain dicts beside the entry functions (shared/design/architecture.md): ``ODE_METHODS``
maps a torchdiffeq method name to a :class:`MethodInfo`, ``SDE_METHODS`` a torchsde
method name to an :class:`SDEMethodInfo`. ``odeint``/``sdeint`` read them to check a
call before any work is done. The entries were read off torchdiffeq 0.2.5
(``_impl/odeint.py`` SOLVERS and each solver's ``order``) and torchsde 0.2.6 (each
solver class's ``sde_type``, ``noise_types``, ``strong_order`` and
``levy_area_approximations``).

Left out on purpose: torchdiffeq's ``scipy_solver`` (runs on NumPy, one sample at a time,
no autograd) and ``fixed_adams`` (an alias of ``implicit_adams``); torchsde's
``adjoint_reversible_heun`` (only meaningful inside ``sdeint_adjoint``).
"""

from __future__ import annotations

import dataclasses

from simsci.errors import unknown_name

__all__ = [
    "MethodInfo",
    "SDEMethodInfo",
    "ODE_METHODS",
    "SDE_METHODS",
    "NOISE_TYPES",
    "SDE_TYPES",
    "LEVY_AREAS",
    "get_ode_method",
    "get_sde_method",
]


@dataclasses.dataclass(frozen=True)
class MethodInfo:
    """An ODE method.

    ``order``: global order of accuracy (error ~ h**order). ``adaptive``: error-controlled
    step size (takes ``rtol``/``atol``/``max_steps``); otherwise fixed steps (takes
    ``step_size``). ``multistep``: a linear multistep method, whose coefficients assume
    equal steps (needs ``step_size``). ``uses_tolerances``: ``rtol``/``atol`` apply
    (adaptive methods, and the corrector iteration of ``implicit_adams``).
    """

    name: str
    order: int
    adaptive: bool
    description: str
    multistep: bool = False
    uses_tolerances: bool = False


def _adaptive(name: str, order: int, description: str) -> MethodInfo:
    return MethodInfo(name, order, True, description, uses_tolerances=True)


ODE_METHODS: dict[str, MethodInfo] = {
    "dopri5": _adaptive("dopri5", 5, "Dormand-Prince 5(4), the default; 6 evaluations a step"),
    "dopri8": _adaptive("dopri8", 8, "Dormand-Prince 8(5,3); for tight tolerances"),
    "bosh3": _adaptive("bosh3", 3, "Bogacki-Shampine 3(2); for loose tolerances"),
    "adaptive_heun": _adaptive("adaptive_heun", 2, "Heun 2(1) with an Euler error estimate"),
    "fehlberg2": _adaptive("fehlberg2", 2, "Runge-Kutta-Fehlberg 2(1)"),
    "euler": MethodInfo("euler", 1, False, "explicit Euler; 1 evaluation a step"),
    "midpoint": MethodInfo("midpoint", 2, False, "explicit midpoint; 2 evaluations a step"),
    "heun2": MethodInfo("heun2", 2, False, "Heun's method (explicit trapezoid)"),
    "heun3": MethodInfo("heun3", 3, False, "Heun's third-order method"),
    "rk4": MethodInfo("rk4", 4, False, "classical Runge-Kutta (3/8 rule); 4 evaluations a step"),
    "explicit_adams": MethodInfo(
        "explicit_adams",
        4,
        False,
        "Adams-Bashforth of order 4 (RK4 start); equal steps: needs step_size",
        multistep=True,
    ),
    "implicit_adams": MethodInfo(
        "implicit_adams",
        4,
        False,
        "Adams-Bashforth-Moulton predictor-corrector of order >= 4 (RK4 start); equal steps: needs "
        "step_size; rtol/atol set the corrector's convergence test",
        multistep=True,
        uses_tolerances=True,
    ),
}

NOISE_TYPES = ("diagonal", "additive", "scalar", "general")
SDE_TYPES = ("ito", "stratonovich")
LEVY_AREAS = ("none", "space-time", "davie", "foster")


@dataclasses.dataclass(frozen=True)
class SDEMethodInfo:
    """An SDE method.

    ``strong_orders``: ``(noise_type, strong order)`` pairs, one per supported noise
    type (the strong order depends on the noise: Euler-Maruyama is 0.5 in general, 1.0
    for additive noise). ``sde_types``: "ito" and/or "stratonovich".
    ``adaptive_noise_types``: noise types for which step-doubling adaptive stepping is
    supported. ``levy_areas``: the Levy-area approximations of the Brownian motion the
    method accepts; ``default_levy_area`` is what ``sdeint`` builds when it makes the
    Brownian motion itself.
    """

    name: str
    strong_orders: tuple[tuple[str, float], ...]
    sde_types: tuple[str, ...]
    adaptive_noise_types: tuple[str, ...]
    levy_areas: tuple[str, ...]
    default_levy_area: str
    description: str

    @property
    def noise_types(self) -> tuple[str, ...]:
        return tuple(noise for noise, _ in self.strong_orders)

    def strong_order(self, noise_type: str) -> float:
        """Strong order of convergence for ``noise_type``."""
        for noise, order in self.strong_orders:
            if noise == noise_type:
                return order
        raise ValueError(
            f"SDE method {self.name!r} does not support noise_type {noise_type!r}; it supports "
            f"{', '.join(self.noise_types)}."
        )


def _orders(general: float, additive: float, diagonal: float, scalar: float):
    return (
        ("general", general),
        ("additive", additive),
        ("diagonal", diagonal),
        ("scalar", scalar),
    )


_NOT_GENERAL = (("additive", 1.0), ("diagonal", 1.0), ("scalar", 1.0))

SDE_METHODS: dict[str, SDEMethodInfo] = {
    "euler": SDEMethodInfo(
        "euler",
        _orders(0.5, 1.0, 0.5, 0.5),
        ("ito",),
        # Step doubling with Euler-Maruyama is only known to converge for additive noise
        # (torchsde warns for the others; we refuse).
        ("additive",),
        LEVY_AREAS,
        "none",
        "Euler-Maruyama",
    ),
    "milstein": SDEMethodInfo(
        "milstein",
        _NOT_GENERAL,
        ("ito", "stratonovich"),
        ("additive", "diagonal", "scalar"),
        LEVY_AREAS,
        "none",
        "Milstein (derivative-using; the Ito or Stratonovich form follows sde_type)",
    ),
    "srk": SDEMethodInfo(
        "srk",
        (("additive", 1.5), ("diagonal", 1.5), ("scalar", 1.5)),
        ("ito",),
        ("additive", "diagonal", "scalar"),
        ("space-time", "davie", "foster"),
        "space-time",
        "stochastic Runge-Kutta (Rossler SRA1 for additive noise, SRID2 otherwise)",
    ),
    "midpoint": SDEMethodInfo(
        "midpoint",
        _orders(0.5, 1.0, 1.0, 1.0),
        ("stratonovich",),
        NOISE_TYPES,
        LEVY_AREAS,
        "none",
        "Stratonovich midpoint",
    ),
    "heun": SDEMethodInfo(
        "heun",
        _orders(0.5, 1.0, 1.0, 1.0),
        ("stratonovich",),
        NOISE_TYPES,
        LEVY_AREAS,
        "none",
        "Stratonovich Heun",
    ),
    "euler_heun": SDEMethodInfo(
        "euler_heun",
        _orders(0.5, 1.0, 1.0, 1.0),
        ("stratonovich",),
        NOISE_TYPES,
        LEVY_AREAS,
        "none",
        "Euler-Heun (Euler drift, Heun diffusion)",
    ),
    "reversible_heun": SDEMethodInfo(
        "reversible_heun",
        _orders(0.5, 1.0, 0.5, 0.5),
        ("stratonovich",),
        NOISE_TYPES,
        LEVY_AREAS,
        "none",
        "reversible Heun (algebraically reversible; carries drift/diffusion state)",
    ),
    "log_ode": SDEMethodInfo(
        "log_ode",
        _orders(0.5, 1.0, 1.0, 1.0),
        ("stratonovich",),
        NOISE_TYPES,
        ("davie", "foster"),
        "foster",
        "log-ODE midpoint (uses the Levy area of the Brownian motion)",
    ),
}


def get_ode_method(name: str) -> MethodInfo:
    """The :class:`MethodInfo` of ``name``; an unknown name lists the valid ones."""
    if not isinstance(name, str) or name not in ODE_METHODS:
        raise unknown_name("ODE method", name, ODE_METHODS)
    return ODE_METHODS[name]


def get_sde_method(name: str) -> SDEMethodInfo:
    """The :class:`SDEMethodInfo` of ``name``; an unknown name lists the valid ones."""
    if not isinstance(name, str) or name not in SDE_METHODS:
        raise unknown_name("SDE method", name, SDE_METHODS)
    return SDE_METHODS[name]


def compatible_sde_methods(noise_type: str, sde_type: str, adaptive: bool = False) -> list[str]:
    """Names of the SDE methods that accept ``noise_type`` and ``sde_type``, sorted."""
    return sorted(
        info.name
        for info in SDE_METHODS.values()
        if noise_type in info.noise_types
        and sde_type in info.sde_types
        and (not adaptive or noise_type in info.adaptive_noise_types)
    )
