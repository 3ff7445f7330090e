"""Batched ODE and SDE solves over torchdiffeq and torchsde, batch first.

``odeint(func, y0, t)`` and ``sdeint(sde, y0, t)`` take y0 of shape (B, *S) and times
``t`` that are (T,) shared by all samples, (B, T) one grid per sample, or a list of B 1-D
tensors (ragged; the result is then a list). Results are (B, T, *S). Per-sample grids,
including different start and end times, are solved in ONE batched call on the union of
all times and gathered back. Device and dtype follow y0.

``ODE_METHODS`` and ``SDE_METHODS`` say what each method is and supports; a call is
checked against them before any work is done. ``FixedStepSolver(method, t, step_size)``
is odeint's fixed-step solve with the checks and the step grid done once, for callers
that solve the same interval many times (an environment's control step).
``lti_transition(A, b, L, dt)`` gives the exact Gaussian transition of a linear SDE over
``dt`` (one matrix exponential, ``expm``), shared by the exact SDE simulator and SDEVI.
Solver failures raise :class:`simsci.errors.SolverError` naming the failing samples and
the time.
"""

from simsci.integrate._fixed import FIXED_STEP_METHODS, FixedStepSolver
from simsci.integrate._grid import build_grid
from simsci.integrate._linear import expm, lti_transition
from simsci.integrate._methods import (
    ODE_METHODS,
    SDE_METHODS,
    MethodInfo,
    SDEMethodInfo,
    compatible_sde_methods,
    get_ode_method,
    get_sde_method,
)
from simsci.integrate._odeint import odeint
from simsci.integrate._sdeint import sdeint

__all__ = [
    "odeint",
    "sdeint",
    "FixedStepSolver",
    "FIXED_STEP_METHODS",
    "ODE_METHODS",
    "SDE_METHODS",
    "MethodInfo",
    "SDEMethodInfo",
    "compatible_sde_methods",
    "get_ode_method",
    "get_sde_method",
    "build_grid",
    "expm",
    "lti_transition",
]
