r"""The PDE-solver benchmark: accuracy against cost, speed-ups at matched accuracy.

``pde_benchmark("burgers")`` runs every solver method of a registered PDE system
(``kind == "field"``) over a grid of resolutions and step sizes, scores each run against
a fine reference solution and times it, extracts the accuracy-cost Pareto front of each
solver and compares solvers *at equal error*. A trained operator checkpoint and py-pde
(an independent finite-difference package) run side by side on the same problem and the
same initial conditions.

The method
----------
**Initial conditions.** ``n`` fields are drawn once, with the system's own sampler
(``sample_initial``, seeded by ``seed``), at the reference resolution, then low-passed
with an exponential filter :math:`\sigma(n) = e^{-36 (|n|/n_c)^8}` (zero for
:math:`|n| \ge n_c`) per axis, :math:`n_c` the Nyquist mode of the coarsest resolution
in the run. Every resolution therefore represents the *same* band-limited field exactly
(restriction is exact, see below): the measured error is the error of the dynamics, not
of a different initial condition. Darcy (a vertex grid with boundaries) draws its
coefficient at the reference grid and takes every tested grid as a nested subset of its
nodes.

**Reference.** The most accurate method of the system (``etdrk4``: spectral in space,
fourth order in time, linear part exact; ``cg`` at tolerance 1e-11 for Darcy), in
float64, at ``reference_factor`` (default 2) times the finest resolution of the simsci
runs and models (and at least py-pde's finest grid), with half the smallest ``etdrk4``
step of the run (at most ``reference_dt``). Only the reference method's steps set it:
the other methods are lower order (IMEX) or take small steps for stability (RK4,
py-pde), not for accuracy, and halving their steps would multiply the reference's cost
for nothing; the floor below checks the choice. Its own accuracy is estimated in the
same run from two cheaper solves: A at twice its step (time: ``dt_doubled`` =
:math:`\|A - ref\|`, divided by :math:`2^4 - 1`, Richardson for order 4) and B at half
its resolution *and* twice its step against A (space alone: ``resolution_halved``,
divided by :math:`2^p - 1` with the problem's spatial order ``p``, 4 for the spectral
problems as a conservative stand-in for spectral convergence, 1 for Darcy's
discontinuous coefficients); the larger estimate, or 100 machine epsilons of the tested
dtype, is the *floor*. Runs whose error is below twice the floor are reported but kept
out of the fronts and the speed-ups (at most half of their measured error is theirs). A
linear PDE solved by ETDRK4 with band-limited data is exact up to rounding: it lands
at the floor.

**Error.** Relative :math:`L^2` error per trajectory and channel,
:math:`\|u_c - u_{ref,c}\|_2 / \|u_{ref,c}\|_2` over the grid points, averaged over the
(scored) channels (they may differ in scale: Gray-Scott's ``u`` is near 1, ``v`` near
0), at the final time (``error``, averaged over the ``n`` trajectories; ``error_max``
the worst trajectory),
and over all output times except the initial frame, which every solver gets for free
(``error_all``). Compared on the run's (coarse) grid: the reference is restricted by
exact striding when the resolution divides the reference's, otherwise by evaluating its
trigonometric interpolant at the coarse points (its Fourier coefficients folded modulo
the coarse size: exact, no interpolation error).

**Time.** Wall time of one batched ``simulate`` call for the ``n`` trajectories, device
synchronised, median of ``repeat`` calls after one untimed warm-up call (which also
builds the cached ETDRK4/IMEX coefficients for that step size and supplies the output
that is scored), divided by ``n``: ``seconds_per_trajectory`` *at batch size n*
(``batches`` adds curves timed in smaller chunks, e.g. ``[batch 1]``). py-pde
integrates one trajectory at a time (its stepping functions are compiled by numba for one
field); its compilation happens when the stepper is built and is excluded, and a
warm-up run precedes the timing as for the solvers.

**Steps.** Each output interval is split into equal steps no larger than the requested
``dt`` (``simulate``'s rule); ``dt`` in the results is the step taken, ``dt_requested``
the one asked for. By default the explicit ``rk4`` runs at fractions (0.9, 0.45) of its
stability limit at each resolution (``PDEBenchSetup.stable_fractions``): its error at a
resolution is spatial once it is stable, and a fixed list of steps would spend the run
on redundant small steps at coarse grids.

**Skipped configurations.** An explicit method whose (output-adjusted) step exceeds
:meth:`PDESystem.stable_dt` at that resolution and initial condition is not run and is
recorded with ``status="unstable"`` and the limit; a run that blows up anyway (the
nonlinear terms grow) is recorded with ``status="blew_up"``.

**Pareto front and matched accuracy.** A run is on its solver's front when no other run
of that solver is both faster and more accurate (by more than 1%: equal errors to a few
digits are the same accuracy). The speed-up of solver A over solver B
is :math:`t_B(e)/t_A(e)` at equal error :math:`e`, where :math:`t_S(e)` interpolates
:math:`\log t` piecewise linearly in :math:`\log e` along S's front; it is reported at
``levels`` (default 3) errors spaced geometrically over the *overlap* of the two fronts'
error ranges and never extrapolated. No overlap, no speed-up: raw time ratios of runs
with different accuracies are never reported. ``matched_error`` does the same with the
roles swapped (error ratio at equal time). A solver whose every run is at the floor
(ETDRK4 on the linear PDEs) has no front; against each other front it gets a lower
bound instead (``bound: True``, printed ``>=``): its fastest run's time against the
other front's time at the other front's errors, all larger than its own.

Operator checkpoints (``models``)
---------------------------------
The protocol a trained operator follows to enter the benchmark (the ∂-NO issue builds on
it): ``simsci.train.load_model(path)`` returns an ``nn.Module`` with

- ``rollout(u0, t, params=None) -> (B, T, *grid, C)``: ``u0`` ``(B, *grid, C)``
  channels-last (the layout of ``simulate``), ``t`` ``(T,)`` the output times with
  ``t[0]`` the time of ``u0`` (the first output frame is ``u0``), ``params`` ``(B, P)``
  in the system's ``param_names`` order (or None). Called under ``torch.no_grad()``.
- ``resolution``: an int or a tuple (the grid it runs at: one point in the benchmark),
  or None / absent (works at any resolution: one point per tested resolution).
- optional ``system``: the registered name of the PDE it was trained on (also read from
  ``checkpoint_extra["system"]``); a mismatch with the benchmark's problem is an error.

Inputs are given in the dtype of the model's first floating-point parameter (the
benchmark's dtype when it has none) on the benchmark's device; outputs are scored in
float64 like a solver's and timed the same way (batch of ``n``). Entries of ``models``
are checkpoint paths or already built modules.

py-pde
------
Where ``import pde`` works (the optional extra ``compare``) and the problem has an
expression form (:data:`PYPDE_EQUATIONS`: advection, heat, Burgers, KdV,
Kuramoto-Sivashinsky, Allen-Cahn, Gray-Scott; Navier-Stokes needs a Poisson solve and
Darcy is steady, so they are left out with the reason recorded), py-pde's ``PDE`` class
runs on the same periodic box and resolutions, with the same initial values, with its
classical RK4 at fixed steps (``py-pde:rk4``) and its adaptive Runge-Kutta-Fehlberg 4(5)
at a few tolerances (``py-pde:rkf45``). py-pde stores values at cell centres
:math:`(j + 1/2)\Delta x`; every benchmarked PDE is translation invariant, so the same
values there are the same problem shifted by :math:`\Delta x/2` and the outputs compare
point by point. Its second-order finite differences are what they are: part of the
comparison.

Design choices the task left open, and why
------------------------------------------
- Default grids (:func:`default_setup`) are per problem, sized for two CPU cores (a
  1D problem's default run well under a minute), with a ``quick`` variant for smoke runs
  and the CLI's ``--quick``; a PDE without an entry gets generic defaults derived from
  its class attributes.
- ``t_end`` is shorter than the systems' data-generation defaults (chaotic
  Kuramoto-Sivashinsky: 10 time units, so errors are not all O(1)). Gray-Scott runs at
  4x Pearson's diffusivities (patterns twice as wide) so that 64-128 grids resolve it on
  two cores; the parameters are recorded and ``params=`` overrides them.
- py-pde's default grids are finer than simsci's (its second-order differences need
  them to reach the same errors); where the fronts still do not overlap, the result
  says so instead of quoting a speed-up.
- The reference runs in float64 whatever ``dtype`` the runs use; timing excludes
  one-off setup (ETDRK4 coefficients, py-pde's compilation), which a data-generation
  run pays once.
- The machine's load average is recorded with each result (``settings``): timings on a
  shared machine are not comparable to those on an idle one.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from simsci._device import synchronize
from simsci.bench._timing import time_call
from simsci.errors import SolverError, unknown_name

__all__ = [
    "PDEBenchSetup",
    "default_setup",
    "pde_benchmark",
    "pareto_front",
    "matched_speedup",
    "matched_error",
    "restrict_periodic",
    "format_table",
    "plot_pareto",
]

#: py-pde right-hand sides per problem: channel -> expression, ``{name}`` = parameter
PYPDE_EQUATIONS: dict[str, dict[str, str]] = {
    "advection": {"u": "-{c} * d_dx(u)"},
    "heat": {"u": "{nu} * laplace(u)"},
    "burgers": {"u": "-u * d_dx(u) + {nu} * laplace(u)"},
    "kdv": {"u": "-{alpha} * u * d_dx(u) - {beta} * d_dx(laplace(u))"},
    "kuramoto_sivashinsky": {"u": "-u * d_dx(u) - laplace(u) - {nu} * laplace(laplace(u))"},
    "allen_cahn": {"u": "{eps} * laplace(u) + u - u**3"},
    "gray_scott": {
        "u": "{Du} * laplace(u) - u * v**2 + {F} * (1 - u)",
        "v": "{Dv} * laplace(v) + u * v**2 - ({F} + {k}) * v",
    },
}
_PYPDE_MISSING = {
    "navier_stokes_2d": "py-pde's expression PDE has no stream-function (Poisson) solve for "
    "the vorticity form",
    "darcy": "darcy is a steady elliptic problem; py-pde's time steppers do not apply",
}

#: Richardson factor of the reference's time error (ETDRK4: order 4)
_REF_TIME_ORDER = 4
#: runs below this many floors are at the reference's accuracy (not scored)
_FLOOR_FACTOR = 2.0


# =============================================================================== setup
@dataclasses.dataclass(frozen=True)
class PDEBenchSetup:
    """Default grid of one benchmark problem (see :func:`default_setup`).

    ``resolutions``: points per axis (a 2D entry ``N`` means ``N x N``). ``dts``: method
    -> step sizes (each output interval takes ``ceil(interval / dt)`` equal steps).
    ``t_end``, ``frames`` (output intervals). ``params``: overrides of the system's
    default parameters. ``reference_factor``: reference resolution over the finest
    tested one; ``reference_dt``: the largest reference step. ``space_order``: spatial
    order assumed for the reference's floor estimate. ``pypde_dts`` (fixed RK4 steps),
    ``pypde_tolerances`` (adaptive RKF45), ``pypde_resolutions`` (default: the same as
    ``resolutions``). ``channels``: the channels scored (None: all).
    ``stable_fractions``: method -> fractions of its stability limit
    (:meth:`PDESystem.stable_dt` at each resolution with the run's initial fields), used
    instead of ``dts`` for explicit methods: their error at a resolution is spatial as
    soon as the step is stable, and a fixed list of steps would spend most of the run
    on redundant small steps at coarse grids.
    """

    resolutions: tuple[int, ...]
    dts: Mapping[str, tuple[float, ...]]
    t_end: float
    frames: int = 4
    params: Mapping[str, float] = dataclasses.field(default_factory=dict)
    reference_factor: int = 2
    reference_dt: float | None = None
    space_order: int = 4
    pypde_dts: tuple[float, ...] = ()
    pypde_tolerances: tuple[float, ...] = ()
    pypde_resolutions: tuple[int, ...] | None = None
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
              t_end=1.0, stable_fractions=rk4, pypde_resolutions=(128, 256, 512),
              pypde_dts=(1e-3,), pypde_tolerances=(1e-6,)),
            S((32, 64), {"etdrk4": (0.05,), "imex": (0.01, 2e-3)}, t_end=0.5,
              stable_fractions=rk4_quick, pypde_resolutions=(256, 512), pypde_dts=(5e-4,),
              pypde_tolerances=(1e-6,)),
        ),
        "heat": (
            S((32, 48, 64, 128), {"etdrk4": (0.1, 0.02), "imex": (0.02, 0.01, 5e-3, 2e-3)},
              t_end=0.5, stable_fractions=rk4, pypde_resolutions=(64, 128, 256, 512),
              pypde_dts=(1e-4,), pypde_tolerances=(1e-6,)),
            S((32, 64), {"etdrk4": (0.05,), "imex": (0.01, 2e-3)}, t_end=0.2,
              stable_fractions=rk4_quick, pypde_resolutions=(256, 512), pypde_dts=(1e-4,),
              pypde_tolerances=(1e-6,)),
        ),
        "burgers": (
            S((64, 96, 128, 256), {"etdrk4": (2e-3, 1e-3, 5e-4), "imex": (1e-3, 5e-4, 2.5e-4)},
              t_end=0.5, stable_fractions=rk4, pypde_resolutions=(128, 256, 512, 1024),
              pypde_dts=(), pypde_tolerances=(1e-6,)),
            S((64, 128), {"etdrk4": (2e-3, 1e-3), "imex": (1e-3, 5e-4)}, t_end=0.2,
              stable_fractions=rk4_quick, pypde_resolutions=(256, 512), pypde_dts=(1e-4,),
              pypde_tolerances=(1e-6,)),
        ),
        "kdv": (
            S((128, 192, 256), {"etdrk4": (0.02, 0.01, 5e-3, 2.5e-3),
              "imex": (5e-3, 2e-3, 1e-3)}, t_end=2.0, reference_dt=5e-4, stable_fractions=rk4,
              pypde_resolutions=(256, 512), pypde_dts=(), pypde_tolerances=(1e-6,)),
            S((128, 192), {"etdrk4": (0.02, 0.01), "imex": (2e-3,)}, t_end=0.5,
              reference_dt=1e-3, stable_fractions=rk4_quick, pypde_resolutions=(512, 1024),
              pypde_dts=(), pypde_tolerances=(1e-6,)),
        ),
        "kuramoto_sivashinsky": (
            S((128, 192, 256), {"etdrk4": (0.5, 0.25, 0.1, 0.05), "imex": (0.1, 0.05, 0.02)},
              t_end=10.0, reference_dt=0.0125, stable_fractions=rk4_quick,
              pypde_resolutions=(256, 384), pypde_dts=(), pypde_tolerances=(1e-6,)),
            S((128, 192), {"etdrk4": (0.25, 0.1), "imex": (0.05,)}, t_end=5.0,
              reference_dt=0.025, stable_fractions=rk4_quick, pypde_resolutions=(384, 512),
              pypde_dts=(), pypde_tolerances=(1e-6,)),
        ),
        "allen_cahn": (
            S((32, 48, 64, 128), {"etdrk4": (0.2, 0.1, 0.05, 0.02),
              "imex": (0.05, 0.02, 0.01)}, t_end=2.0, stable_fractions=rk4,
              pypde_resolutions=(64, 128, 256, 512), pypde_dts=(2e-3,),
              pypde_tolerances=(1e-6,)),
            S((32, 64), {"etdrk4": (0.2, 0.1), "imex": (0.05,)}, t_end=1.0,
              stable_fractions=rk4_quick, pypde_resolutions=(128, 256), pypde_dts=(),
              pypde_tolerances=(1e-6,)),
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
              stable_fractions={"rk4": (0.9,)}, pypde_resolutions=(64, 128), pypde_dts=(),
              pypde_tolerances=(1e-6,)),
            S((64, 96), {"etdrk4": (4.0, 2.0), "imex": (1.0,)}, t_end=100.0,
              params={"Du": 8e-5, "Dv": 4e-5}, reference_dt=1.0, stable_fractions=rk4_quick,
              pypde_resolutions=(64,), pypde_dts=(), pypde_tolerances=(1e-6,)),
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


def default_setup(problem: str, quick: bool = False) -> PDEBenchSetup:
    """The default :class:`PDEBenchSetup` of a registered PDE (``quick``: smoke-run sizes).

    A PDE registered after this table was written gets generic defaults from its class:
    resolutions ``default_resolution / (4, 2, 1)``, steps ``method_dt x (4, 2, 1)`` per
    method (``rk4`` at 0.9 and 0.45 of its stability limit) and
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
    dts = {}
    for method in cls.methods:
        dt = float(cls.method_dt.get(method, cls.default_dt))
        dts[method] = tuple(dt * f for f in ((4, 2) if quick else (4, 2, 1)))
    t_end = float(min(cls.default_t_end, 2000 * cls.default_dt))
    fractions = {"rk4": (0.9,) if quick else (0.9, 0.45)} if "rk4" in dts else {}
    dts.pop("rk4", None)
    return PDEBenchSetup(
        res, dts, t_end=t_end * (0.5 if quick else 1.0), stable_fractions=fractions
    )


# ========================================================================= restriction
def _fold_axis(u: torch.Tensor, dim: int, n: int) -> torch.Tensor:
    """Values at ``n`` equispaced points of the trigonometric interpolant along ``dim``."""
    m = u.shape[dim]
    if m == n:
        return u
    if m % n == 0:
        index = torch.arange(0, m, m // n, device=u.device)
        return u.index_select(dim, index)
    coef = torch.fft.fft(u.to(torch.float64), dim=dim) / m
    freq = torch.fft.fftfreq(m, d=1.0 / m, device=u.device).round().to(torch.int64)
    shape = [1] * u.ndim
    shape[dim] = m
    weight = torch.ones(m, dtype=torch.float64, device=u.device)
    if m % 2 == 0:
        # the Nyquist mode of a real interpolant is a cosine: half at +m/2, half at -m/2
        weight[m // 2] = 0.5
    coef = coef * weight.reshape(shape)
    out_shape = list(u.shape)
    out_shape[dim] = n
    folded = torch.zeros(out_shape, dtype=coef.dtype, device=u.device)
    folded.index_add_(dim, torch.remainder(freq, n), coef)
    if m % 2 == 0:
        nyq = coef.narrow(dim, m // 2, 1)
        folded.index_add_(dim, torch.tensor([(m // 2) % n], device=u.device), nyq)
    return (torch.fft.ifft(folded, dim=dim) * n).real.to(u.dtype)


def restrict_periodic(u: torch.Tensor, resolution, dims: Sequence[int]) -> torch.Tensor:
    """Sample a periodic field at a coarser uniform grid (``x_j = j L / N``).

    ``dims``: the grid axes of ``u``; ``resolution``: the target points per axis (an int
    for all axes). Exact striding when the target divides the size; otherwise the values
    of the field's trigonometric interpolant at the target points (Fourier coefficients
    folded modulo the target size, the Nyquist mode split as a cosine), which is exact
    for any band-limited field and equals striding whenever that applies.
    """
    dims = [d % u.ndim for d in dims]
    res = (resolution,) * len(dims) if isinstance(resolution, int) else tuple(resolution)
    if len(res) != len(dims):
        raise ValueError(f"resolution {resolution!r} needs {len(dims)} entries (one per axis)")
    for dim, n in zip(dims, res):
        if n > u.shape[dim]:
            raise ValueError(
                f"cannot restrict {u.shape[dim]} points to {n}: the target must be coarser"
            )
        u = _fold_axis(u, dim, int(n))
    return u


def _band_limit(u: torch.Tensor, dims: Sequence[int], cutoff: Sequence[int]) -> torch.Tensor:
    """Exponential low-pass (order 8, 36) per axis, zero at and above ``cutoff`` modes."""
    v = torch.fft.rfftn(u, dim=dims)
    for axis, (dim, nc) in enumerate(zip(dims, cutoff)):
        m = u.shape[dim]
        if axis == len(dims) - 1:
            freq = torch.fft.rfftfreq(m, d=1.0 / m, dtype=torch.float64)
        else:
            freq = torch.fft.fftfreq(m, d=1.0 / m, dtype=torch.float64)
        ratio = freq.abs() / nc
        sigma = torch.where(ratio < 1, torch.exp(-36.0 * ratio**8), torch.zeros_like(ratio))
        shape = [1] * u.ndim
        shape[dim] = -1
        v = v * sigma.reshape(shape).to(v.device)
    return torch.fft.irfftn(v, s=[u.shape[d] for d in dims], dim=dims)


# ======================================================================== fronts
def _point(item) -> tuple[float, float]:
    if isinstance(item, Mapping):
        return float(item["error"]), float(item["seconds_per_trajectory"])
    error, seconds = item
    return float(error), float(seconds)


def _usable(item) -> bool:
    if isinstance(item, Mapping):
        if item.get("status", "ok") != "ok" or not item.get("scored", True):
            return False
        e, s = item.get("error"), item.get("seconds_per_trajectory")
        if e is None or s is None:
            return False
    e, s = _point(item)
    return math.isfinite(e) and math.isfinite(s) and e > 0 and s > 0


def pareto_front(points: Iterable, *, rtol: float = 0.01) -> list:
    """The accuracy-cost Pareto front of ``points``, fastest first.

    ``points``: ``(error, seconds)`` pairs or run dicts (``error``,
    ``seconds_per_trajectory``; runs not ``status == "ok"`` or not ``scored`` are left
    out). Going from the fastest point to slower ones, a point is kept when its error is
    below that of every faster point by more than the relative ``rtol`` (errors within
    1% are the same accuracy: two solvers whose error is spatial give equal errors to
    many digits, and a slower copy would put a vertical step into the front). Returns
    the kept items (same type), sorted by time ascending, hence error descending.
    """
    if not (0 <= rtol < 1):
        raise ValueError(f"rtol must lie in [0, 1), got {rtol!r}")
    items = [p for p in points if _usable(p)]
    items.sort(key=lambda p: (_point(p)[1], _point(p)[0]))
    front, best = [], math.inf
    for item in items:
        error = _point(item)[0]
        if error < best * (1 - rtol):
            front.append(item)
            best = error
    return front


def _interp_loglog(xs: np.ndarray, ys: np.ndarray, at: np.ndarray) -> np.ndarray:
    order = np.argsort(xs)
    return np.exp(np.interp(np.log(at), np.log(xs[order]), np.log(ys[order])))


def _levels(lo: float, hi: float, levels: int) -> np.ndarray:
    if hi <= lo * (1 + 1e-12):
        return np.array([lo])
    return np.exp(np.linspace(math.log(lo), math.log(hi), max(levels, 2)))


def _check_levels(levels) -> int:
    if isinstance(levels, bool) or not isinstance(levels, int) or levels < 1:
        raise ValueError(f"levels must be a positive integer, got {levels!r}")
    return levels


def matched_speedup(front_a, front_b, *, levels: int = 3) -> dict | None:
    """Speed-up of A over B at equal error: ``t_B(e) / t_A(e)``.

    ``front_a``, ``front_b``: Pareto fronts (see :func:`pareto_front`; any points are
    reduced to their front first). :math:`\\log t` is interpolated linearly in
    :math:`\\log e` along each front, at ``levels`` errors spaced geometrically over the
    overlap of the two fronts' error ranges (one level when the overlap is one point).
    Returns ``{"errors", "seconds_a", "seconds_b", "speedup", "geomean"}`` (lists of
    floats, ``geomean`` the geometric mean of ``speedup``), or None when the error
    ranges do not overlap (then no matched comparison exists).
    """
    levels = _check_levels(levels)
    a = np.array([_point(p) for p in pareto_front(front_a)]).reshape(-1, 2)
    b = np.array([_point(p) for p in pareto_front(front_b)]).reshape(-1, 2)
    if not len(a) or not len(b):
        return None
    lo = max(a[:, 0].min(), b[:, 0].min())
    hi = min(a[:, 0].max(), b[:, 0].max())
    if lo > hi:
        return None
    errors = _levels(lo, hi, levels)
    ta = _interp_loglog(a[:, 0], a[:, 1], errors)
    tb = _interp_loglog(b[:, 0], b[:, 1], errors)
    ratio = tb / ta
    return {
        "errors": errors.tolist(),
        "seconds_a": ta.tolist(),
        "seconds_b": tb.tolist(),
        "speedup": ratio.tolist(),
        "geomean": float(np.exp(np.log(ratio).mean())),
    }


def matched_error(front_a, front_b, *, levels: int = 3) -> dict | None:
    """Error ratio at equal time: ``e_B(t) / e_A(t)`` (>1: A more accurate).

    As :func:`matched_speedup` with the axes swapped: :math:`\\log e` interpolated in
    :math:`\\log t` along each front, at ``levels`` times over the overlap of the
    fronts' time ranges. Returns ``{"seconds", "error_a", "error_b", "ratio",
    "geomean"}`` or None without overlap.
    """
    levels = _check_levels(levels)
    a = np.array([_point(p) for p in pareto_front(front_a)]).reshape(-1, 2)
    b = np.array([_point(p) for p in pareto_front(front_b)]).reshape(-1, 2)
    if not len(a) or not len(b):
        return None
    lo = max(a[:, 1].min(), b[:, 1].min())
    hi = min(a[:, 1].max(), b[:, 1].max())
    if lo > hi:
        return None
    seconds = _levels(lo, hi, levels)
    ea = _interp_loglog(a[:, 1], a[:, 0], seconds)
    eb = _interp_loglog(b[:, 1], b[:, 0], seconds)
    ratio = eb / ea
    return {
        "seconds": seconds.tolist(),
        "error_a": ea.tolist(),
        "error_b": eb.tolist(),
        "ratio": ratio.tolist(),
        "geomean": float(np.exp(np.log(ratio).mean())),
    }


# =================================================================== the benchmark
@dataclasses.dataclass
class _Problem:
    """Everything a run needs: the system factory, times, initial fields, reference."""

    name: str
    params: dict
    steady: bool
    periodic: bool
    ndim: int
    channels: list[int]
    times: np.ndarray
    device: torch.device
    dtype: torch.dtype
    n: int
    repeat: int
    batches: tuple[int, ...]
    ref_resolution: tuple[int, ...]
    u0_ref: torch.Tensor  # (n, *ref_grid, C) float64 on device
    reference: torch.Tensor | None = None  # (n, T, *ref_grid, C) float64
    floor: float = 0.0
    _systems: dict = dataclasses.field(default_factory=dict)

    def system(self, resolution):
        from simsci import systems

        key = tuple(resolution)
        if key not in self._systems:
            self._systems[key] = systems.get(self.name, resolution=key, **self.params)
        return self._systems[key]

    @property
    def grid_dims(self) -> list[int]:
        return list(range(1, 1 + self.ndim))

    def restrict(self, u: torch.Tensor, resolution, dims: Sequence[int]) -> torch.Tensor:
        """Restrict fields from the reference grid to ``resolution`` (exact)."""
        if self.periodic:
            return restrict_periodic(u, resolution, dims)
        for dim, (nf, nc) in zip(dims, zip(self.ref_resolution, resolution)):
            step = (nf - 1) // (nc - 1)
            u = u.index_select(dim, torch.arange(0, nf, step, device=u.device))
        return u

    def initial(self, resolution, dtype=None) -> torch.Tensor:
        u0 = self.restrict(self.u0_ref, resolution, self.grid_dims)
        return u0.to(dtype or self.dtype).contiguous()

    def t(self, dtype=torch.float64) -> torch.Tensor:
        return torch.as_tensor(self.times, dtype=dtype, device=self.device)

    def simulate(self, resolution, method, dt, u0):
        system = self.system(resolution)
        if self.steady:
            return system.simulate(u0, None, method=method)
        return system.simulate(u0, self.t(), method=method, dt=dt)

    def score(self, out: torch.Tensor, resolution, against: torch.Tensor | None = None) -> dict:
        """Relative L2 errors of ``out`` ``(n, T, *grid, C)`` against the reference (or
        ``against``, given on the reference grid)."""
        ref = self.reference if against is None else against
        ref = self.restrict(ref, resolution, [d + 1 for d in self.grid_dims])
        out = out.detach().to(torch.float64)
        if out.shape != ref.shape:
            raise ValueError(
                f"output shape {tuple(out.shape)} differs from the reference restricted to "
                f"its grid, {tuple(ref.shape)}: a rollout must return (B, T, *grid, C)"
            )
        ch = torch.as_tensor(self.channels, device=out.device)
        diff = (out - ref).index_select(-1, ch)
        ref = ref.index_select(-1, ch)

        def rel(d, r):
            # per trajectory and channel (channels may differ in scale), mean over channels
            d = d.movedim(-1, 1).reshape(d.shape[0], d.shape[-1], -1)
            r = r.movedim(-1, 1).reshape(r.shape[0], r.shape[-1], -1)
            num = torch.linalg.vector_norm(d, dim=2)
            den = torch.linalg.vector_norm(r, dim=2)
            return (num / torch.where(den > 0, den, torch.ones_like(den))).mean(dim=1)

        final = rel(diff[:, -1], ref[:, -1])
        later = rel(diff[:, 1:], ref[:, 1:]) if out.shape[1] > 1 else final
        if not bool(torch.isfinite(final).all()):
            return {"error": math.nan, "error_max": math.nan, "error_all": math.nan}
        return {
            "error": float(final.mean()),
            "error_max": float(final.max()),
            "error_all": float(later.mean()),
        }


def _as_resolution(value, ndim: int) -> tuple[int, ...]:
    items = (value,) * ndim if isinstance(value, (int, np.integer)) else tuple(value)
    if len(items) != ndim or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 8 for v in items
    ):
        raise ValueError(
            f"a resolution must be an integer >= 8 or {ndim} such integers, got {value!r}"
        )
    return tuple(int(v) for v in items)


def _res_label(res: tuple[int, ...]):
    return res[0] if len(res) == 1 else list(res)


def _check_float_seq(values, what: str) -> tuple[float, ...]:
    if isinstance(values, (int, float)):
        values = (values,)
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
            raise TypeError(f"{what} must be numbers, got {v!r}")
        if not (math.isfinite(float(v)) and v > 0):
            raise ValueError(f"{what} must be finite and > 0, got {v!r}")
        out.append(float(v))
    return tuple(out)


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _log_to(log):
    if log is None or log is False:
        return lambda msg: None
    if log is True:
        return lambda msg: print(msg, file=sys.stderr, flush=True)
    return log


def pde_benchmark(
    problem: str,
    *,
    methods: Sequence[str] | None = None,
    resolutions: Sequence | None = None,
    dts=None,
    n: int = 4,
    t_end: float | None = None,
    params: Mapping[str, float] | None = None,
    device="cpu",
    dtype: torch.dtype = torch.float64,
    models: Sequence = (),
    pypde="auto",
    seed: int = 0,
    repeat: int = 3,
    quick: bool = False,
    pypde_dts: Sequence[float] | None = None,
    pypde_tolerances: Sequence[float] | None = None,
    pypde_resolutions: Sequence | None = None,
    levels: int = 3,
    batches: Sequence[int] | None = None,
    log: Callable[[str], None] | bool | None = None,
) -> dict:
    """Benchmark the solvers of one registered PDE (module docstring: the method).

    ``problem``: a registered system of kind ``"field"``. ``methods``: the system's
    methods to run (default: all). ``resolutions``: points per axis (default: the
    problem's :func:`default_setup`, ``quick`` for smoke-run sizes). ``dts``: step sizes
    for every method, or a mapping method -> step sizes (default: per problem; Darcy
    has none). ``n``: trajectories (one batch). ``t_end``: final time (output every
    ``t_end / frames``). ``params``: PDE parameters (defaults of the system).
    ``device``/``dtype``: of the runs (the reference is float64 on ``device``).
    ``models``: checkpoint paths or modules following the rollout protocol.
    ``pypde``: ``"auto"`` (when installed and the problem is expressible), True
    (required: an error otherwise) or False; ``pypde_dts``/``pypde_tolerances``
    override its fixed steps / adaptive tolerances and ``pypde_resolutions`` its grids
    (default: the problem's py-pde grids, or ``resolutions`` when given). ``repeat``:
    timed calls (median).
    ``levels``: error levels of the matched-accuracy speed-ups. ``batches``: batch sizes
    at which the simsci solvers and models are timed (default ``(n,)``: the ``n``
    trajectories in one call); a size ``b < n`` solves them in chunks of ``b`` and adds
    the curve ``"simsci:METHOD[batch b]"`` (same errors, its own times). ``log``: a
    callable for progress lines (True: print to stderr).

    Returns a JSON-able dict: ``problem``, ``params``, ``settings``, ``reference``,
    ``runs`` (each ``solver``, ``family``, ``method``, ``resolution``, ``dt``,
    ``error``, ``error_all``, ``error_max``, ``seconds_per_trajectory``, ``status``,
    ``scored``, ...), ``fronts`` (solver -> front runs, fastest first), ``speedups``
    (matched-accuracy comparisons per solver pair) and ``pypde`` (included or why not).
    """
    from simsci import systems
    from simsci._device import resolve_device

    problem = _check_problem(problem)
    say = _log_to(log)
    setup = default_setup(problem, quick=quick)
    cls = systems.SYSTEMS[problem]
    device = resolve_device(device)
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer (trajectories), got {n!r}")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat must be a positive integer, got {repeat!r}")
    _check_levels(levels)
    if batches is None:
        batches = (n,)
    if isinstance(batches, int):
        batches = (batches,)
    batches = tuple(dict.fromkeys(batches))
    for b in batches:
        if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= n:
            raise ValueError(f"batches must be integers in [1, n={n}], got {b!r}")
    steady = bool(getattr(cls, "steady", False))
    ndim = int(cls.spatial_dims)
    periodic = bool(cls.periodic)

    # ---------------------------------------------------------------- what to run
    valid_methods = list(cls.methods)
    if methods is None:
        methods = [
            m for m in valid_methods if m in setup.dts or m in setup.stable_fractions
        ] or valid_methods
    else:
        if isinstance(methods, str):
            methods = [methods]
        methods = list(dict.fromkeys(methods))
        for m in methods:
            if m not in valid_methods:
                raise unknown_name(f"method for {problem!r}", m, valid_methods)
    res_list = [
        _as_resolution(r, ndim) for r in (setup.resolutions if resolutions is None else resolutions)
    ]
    if not res_list:
        raise ValueError("resolutions must not be empty")
    res_list = sorted(dict.fromkeys(res_list))

    def default_steps(m):
        if m in setup.stable_fractions:
            return tuple(f"{f:g}*stable" for f in setup.stable_fractions[m])
        steps = setup.dts.get(m)
        if not steps:
            steps = tuple(float(cls.method_dt.get(m, cls.default_dt)) * f for f in (4, 2, 1))
        return tuple(steps)

    if steady:
        if dts is not None:
            raise ValueError(
                f"{problem} is steady (solved once, no time stepping): it is benchmarked over "
                "resolutions only; drop dts"
            )
        dt_map = {m: (None,) for m in methods}
    elif dts is None:
        dt_map = {m: default_steps(m) for m in methods}
    elif isinstance(dts, Mapping):
        unknown = [m for m in dts if m not in methods]
        if unknown:
            raise ValueError(
                f"dts names methods {unknown} that are not run (methods: {methods}); give "
                "step sizes for the methods being benchmarked"
            )
        dt_map = {
            m: _check_float_seq(dts[m], "dts") if m in dts else default_steps(m) for m in methods
        }
        missing = [m for m in methods if not dt_map[m]]
        if missing:
            raise ValueError(f"no step sizes for method(s) {missing}; add them to dts")
    else:
        steps = _check_float_seq(dts, "dts")
        if not steps:
            raise ValueError("dts must not be empty")
        dt_map = {m: steps for m in methods}
    t_end = setup.t_end if t_end is None else float(t_end)
    if steady:
        t_end = 0.0
    elif not (math.isfinite(t_end) and t_end > 0):
        raise ValueError(f"t_end must be finite and > 0 for a time-dependent PDE, got {t_end!r}")
    params = {**setup.params, **dict(params or {})}
    unknown_params = [k for k in params if k not in cls.param_names]
    if unknown_params:
        raise ValueError(
            f"{problem} has parameters {list(cls.param_names)}; got unknown {unknown_params}"
        )
    frames = 1 if steady else setup.frames
    times = np.array([0.0]) if steady else np.linspace(0.0, t_end, frames + 1)

    loaded = _load_models(models, problem, device)

    # ------------------------------------------------------------ py-pde: included?
    pypde_info = _pypde_status(problem, pypde)
    pypde_res = []
    if pypde_info["included"]:
        if pypde_resolutions is not None:
            pypde_res = sorted({_as_resolution(r, ndim) for r in pypde_resolutions})
        elif resolutions is None and setup.pypde_resolutions:
            pypde_res = sorted({_as_resolution(r, ndim) for r in setup.pypde_resolutions})
        else:
            pypde_res = list(res_list)
    pd_dts = _check_float_seq(setup.pypde_dts if pypde_dts is None else pypde_dts, "pypde_dts")
    pd_tols = _check_float_seq(
        setup.pypde_tolerances if pypde_tolerances is None else pypde_tolerances,
        "pypde_tolerances",
    )

    # ---------------------------------------------------- grids: coarse and reference
    model_res = [_as_resolution(r, ndim) for _, m in loaded if (r := _model_resolution(m))]
    all_res = res_list + pypde_res + model_res
    own = res_list + model_res
    finest = tuple(max(r[a] for r in own) for a in range(ndim))
    finest_all = tuple(max(r[a] for r in all_res) for a in range(ndim))
    coarsest = tuple(min(r[a] for r in all_res) for a in range(ndim))
    factor = setup.reference_factor
    if periodic:
        ref_res = tuple(max(factor * f, g) for f, g in zip(finest, finest_all))
    else:
        ref_res = []
        for a in range(ndim):
            lcm = 1
            for r in all_res:
                lcm = math.lcm(lcm, r[a] - 1)
            m = lcm * math.ceil(factor * (finest[a] - 1) / lcm)
            if m > 16 * factor * (finest[a] - 1):
                raise ValueError(
                    f"{problem}: the vertex-grid resolutions {[_res_label(r) for r in all_res]} "
                    "do not nest in a common reference grid of reasonable size; use sizes "
                    "2^k + 1 (17, 33, 65, ...)"
                )
            ref_res.append(m + 1)
        ref_res = tuple(ref_res)

    # ----------------------------------------------------------- initial conditions
    ref_system = systems.get(problem, resolution=ref_res, **params)
    generator = torch.Generator().manual_seed(int(seed))
    u0 = ref_system.sample_initial(n, generator=generator, dtype=torch.float64)
    grid_dims = list(range(1, 1 + ndim))
    if periodic:
        u0 = _band_limit(u0, grid_dims, [c // 2 for c in coarsest])
        ic_note = (
            f"{ref_system.ic} fields drawn at {_res_label(ref_res)} (seed {seed}), low-passed "
            f"below the Nyquist mode of the coarsest grid {_res_label(coarsest)} "
            "(exponential filter, order 8)"
        )
    else:
        ic_note = (
            f"{ref_system.ic} fields drawn at the reference grid {_res_label(ref_res)} (seed "
            f"{seed}); coarser grids take every k-th node"
        )
    channel_names = list(cls.channel_names)
    scored = list(setup.channels) if setup.channels else channel_names
    prob = _Problem(
        name=problem,
        params=params,
        steady=steady,
        periodic=periodic,
        ndim=ndim,
        channels=[channel_names.index(c) for c in scored],
        times=times,
        device=device,
        dtype=dtype,
        n=n,
        repeat=repeat,
        batches=batches,
        ref_resolution=ref_res,
        u0_ref=u0.to(device),
    )

    # ------------------------------------------------------------- plan the runs
    ref_method = "cg" if steady else ("etdrk4" if "etdrk4" in valid_methods else valid_methods[0])
    plan = []  # (method, resolution, dt_requested, h, status, stable limit, dt spec)
    for method in methods:
        for res in res_list:
            system = prob.system(res)
            u0_res = prob.initial(res, torch.float64)
            limit = math.inf if steady else system.stable_dt(None, method, u0=u0_res.cpu())
            for spec in dt_map[method]:
                dt = spec
                if isinstance(spec, str):  # "F*stable": a fraction of the stability limit
                    dt = float(spec.split("*")[0]) * limit
                h = None if steady else _effective_step(times, dt)
                status = "unstable" if h is not None and h > limit else "ok"
                plan.append((method, res, dt, h, status, limit, spec))

    ref_dt = None
    if not steady:
        # half the smallest step of the reference method (of any method when it is not
        # run): the other methods are lower order or stability-limited, their small
        # steps buy them stability, not an accuracy the reference must exceed
        steps = [p[3] for p in plan if p[4] == "ok" and p[0] == ref_method]
        steps = steps or [p[3] for p in plan if p[4] == "ok"] or [t_end / frames]
        ref_dt = min(steps) / 2
        if setup.reference_dt is not None:
            ref_dt = min(ref_dt, setup.reference_dt)
    say(
        f"{problem}: reference {ref_method} at {_res_str(_res_label(ref_res))}"
        + (f", dt={ref_dt:.4g}" if ref_dt is not None else "")
    )
    reference = _reference(prob, ref_system, ref_method, ref_res, ref_dt, setup)
    say(
        f"{problem}: reference done in {reference['seconds']:.1f} s, floor {reference['floor']:.2e}"
    )

    # ------------------------------------------------------------------ the runs
    runs = []
    for method, res, dt, h, status, limit, spec in plan:
        entry = {
            "solver": f"simsci:{method}",
            "family": "simsci",
            "method": method,
            "resolution": _res_label(res),
            "dt": h,
            "dt_requested": dt,
        }
        if isinstance(spec, str):
            entry.update(dt_rule=f"{spec.split('*')[0]} x stable_dt", stable_dt=limit)
        if status == "unstable":
            entry.update(
                status="unstable",
                stable_dt=limit,
                error=None,
                error_all=None,
                error_max=None,
                seconds_per_trajectory=None,
                scored=False,
                note=f"step {h:.3g} > stable limit {limit:.3g} of the explicit method",
            )
            runs.append(entry)
            say(f"  simsci:{method:11s} {_res_str(_res_label(res)):>10} dt={h:.3g}: unstable")
            continue
        u0_res = prob.initial(res)
        results = _timed_runs(
            prob,
            lambda u, res=res, method=method, dt=dt: prob.simulate(res, method, dt, u),
            u0_res,
            res,
        )
        for b, result in results:
            runs.append(_batch_entry(entry, b, prob.n, result))
            say(_progress_line(runs[-1]))

    for name, model in loaded:
        model_res = _model_resolution(model)
        for res in [_as_resolution(model_res, ndim)] if model_res else res_list:
            entry = {
                "solver": f"model:{name}",
                "family": "model",
                "method": type(model).__name__,
                "resolution": _res_label(res),
                "dt": None,
                "dt_requested": None,
            }
            for b, result in _model_run(prob, model, res):
                runs.append(_batch_entry(entry, b, prob.n, result))
                say(_progress_line(runs[-1]))

    if pypde_info["included"]:
        for entry in _pypde_runs(prob, pypde_res, pd_dts, pd_tols):
            runs.append(entry)
            say(_progress_line(entry))

    # --------------------------------------------------- floors, fronts, speed-ups
    for entry in runs:
        if entry["status"] == "ok":
            entry["scored"] = bool(
                entry["error"] is not None
                and math.isfinite(entry["error"])
                and entry["error"] >= _FLOOR_FACTOR * prob.floor
            )
            if not entry["scored"]:
                entry["note"] = (
                    f"error below {_FLOOR_FACTOR:g} x the reference floor {prob.floor:.2e}: "
                    "at the reference's accuracy, not scored"
                )
    result = {
        "benchmark": "pde",
        "problem": problem,
        "params": {**ref_system.params},
        "settings": {
            "n": n,
            "t_end": t_end,
            "output_times": times.tolist(),
            "device": str(device),
            "dtype": _dtype_name(dtype),
            "seed": seed,
            "repeat": repeat,
            "batches": list(batches),
            "quick": quick,
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "methods": methods,
            "resolutions": [_res_label(r) for r in res_list],
            "dts": {m: list(v) for m, v in dt_map.items()} if not steady else None,
            "scored_channels": scored,
            "initial_conditions": ic_note,
            "error": "relative L2 at the final time per trajectory and channel, mean over "
            "channels and trajectories (error_all: all output times after the initial one; "
            "error_max: worst trajectory)",
            "time": f"median of {repeat} warm calls, device synchronised, divided by the "
            f"batch of {n} (py-pde: one trajectory at a time)",
        },
        "reference": reference,
        "runs": runs,
        "pypde": pypde_info,
    }
    result.update(_summarize(result, levels=levels))
    return result


def _summarize(result: dict, *, levels: int = 3) -> dict:
    """``fronts`` and ``speedups`` of a result's runs (recomputed from ``runs``)."""
    runs = result["runs"]
    solvers = list(dict.fromkeys(r["solver"] for r in runs))
    order = {"simsci": 0, "model": 1, "py-pde": 2}
    solvers.sort(key=lambda s: order.get(next(r["family"] for r in runs if r["solver"] == s), 3))
    fronts = {s: pareto_front([r for r in runs if r["solver"] == s]) for s in solvers}
    curves = dict(fronts)
    pypde_solvers = [s for s in solvers if s.startswith("py-pde:")]
    if len(pypde_solvers) > 1:
        union = pareto_front([r for r in runs if r["family"] == "py-pde"])
        if union:
            curves["py-pde (best)"] = union
    speedups = []
    names = [s for s in curves if curves[s]]
    # solvers whose every successful run is at the reference floor (exact up to the
    # reference's accuracy): compared by a bound, their fastest such run against the
    # other fronts (at least as accurate at every error level of the other front)
    at_floor = {}
    for s in solvers:
        ok = [r for r in runs if r["solver"] == s and r["status"] == "ok"]
        if not fronts[s] and ok and all(not r.get("scored", True) for r in ok):
            at_floor[s] = min(ok, key=lambda r: r["seconds_per_trajectory"])
    for a, fastest in at_floor.items():
        for b in names:
            if b.startswith("py-pde") and a.startswith("py-pde"):
                continue
            front = np.array([_point(p) for p in curves[b]])
            errors = _levels(front[:, 0].min(), front[:, 0].max(), levels)
            tb = _interp_loglog(front[:, 0], front[:, 1], errors)
            ta = fastest["seconds_per_trajectory"]
            ratio = tb / ta
            speedups.append(
                {
                    "solver": a,
                    "versus": b,
                    "overlap": True,
                    "bound": True,
                    "errors": errors.tolist(),
                    "seconds_a": [ta] * len(errors),
                    "seconds_b": tb.tolist(),
                    "speedup": ratio.tolist(),
                    "geomean": float(np.exp(np.log(ratio).mean())),
                    "note": f"every {a} run is at the reference floor (error "
                    f"{fastest['error']:.1e}): its fastest run against {b}'s front, a lower "
                    "bound on the speed-up at equal error (it is more accurate)",
                }
            )
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if a.startswith("py-pde") and b.startswith("py-pde"):
                continue
            entry = {"solver": a, "versus": b}
            m = matched_speedup(curves[a], curves[b], levels=levels)
            if m is None:
                ea = [_point(p)[0] for p in curves[a]]
                eb = [_point(p)[0] for p in curves[b]]
                entry["overlap"] = False
                entry["note"] = (
                    f"error ranges do not overlap ({min(ea):.2e}-{max(ea):.2e} vs "
                    f"{min(eb):.2e}-{max(eb):.2e}): no matched-accuracy speed-up"
                )
            else:
                entry["overlap"] = True
                entry.update(m)
                eq = matched_error(curves[a], curves[b], levels=levels)
                if eq is not None:
                    entry["error_ratio_at_equal_time"] = eq
            speedups.append(entry)
    return {
        "fronts": {s: [_front_row(r) for r in f] for s, f in fronts.items()},
        "speedups": speedups,
    }


def _front_row(run: dict) -> dict:
    keys = ("resolution", "dt", "tolerance", "error", "error_all", "seconds_per_trajectory")
    return {k: run[k] for k in keys if k in run}


def _effective_step(times: np.ndarray, dt: float) -> float:
    """The step ``simulate`` takes: the largest output interval split into equal steps."""
    gaps = np.diff(times)
    steps = np.maximum(1, np.ceil(gaps / dt * (1.0 - 1e-12)))
    return float((gaps / steps).max())


def _progress_line(entry: dict) -> str:
    head = f"  {entry['solver']:18s} {entry['resolution']!s:>10}"
    if entry.get("dt") is not None:
        head += f" dt={entry['dt']:.3g}"
    if entry.get("tolerance") is not None:
        head += f" tol={entry['tolerance']:.0e}"
    if entry["status"] != "ok":
        return f"{head}: {entry['status']}"
    return f"{head}: error {entry['error']:.2e}, {entry['seconds_per_trajectory']:.3g} s/traj"


def _failed(status: str, note: str | None = None, **scores) -> dict:
    out = {
        "status": status,
        "error": None,
        "error_all": None,
        "error_max": None,
        **scores,
        "seconds_per_trajectory": None,
        "scored": False,
    }
    if note:
        out["note"] = note
    return out


def _timed_run(prob: _Problem, fn, res) -> dict:
    """Warm-up call (scored), then ``repeat`` timed calls; errors and s/trajectory."""
    try:
        with torch.no_grad():
            out = fn()
    except SolverError as exc:
        return _failed("blew_up", str(exc).split(". ")[0])
    scores = prob.score(out, res)
    if not math.isfinite(scores["error"]):
        return _failed("blew_up", "non-finite output", **scores)

    def call():
        with torch.no_grad():
            return fn()

    timing = time_call(call, repeat=prob.repeat, warmup=0, device=prob.device)
    return {
        "status": "ok",
        **scores,
        "seconds_per_trajectory": timing.median / prob.n,
        "seconds_all": timing.as_dict(),
    }


def _timed_runs(prob: _Problem, solve, u0: torch.Tensor, res) -> list[tuple[int, dict]]:
    """Score ``solve(u0)`` (all ``n`` trajectories), then time it per batch size.

    For each ``b`` in ``prob.batches`` the ``n`` trajectories are solved in chunks of
    ``b`` (one warm-up pass when ``b < n``, for per-shape caches); the errors are those
    of the full batch (batching does not change the arithmetic per trajectory).
    Returns ``[(b, result), ...]``.
    """
    first = _timed_run(prob, lambda: solve(u0), res) if prob.n in prob.batches else None
    if first is None:
        # score without timing the full batch
        try:
            with torch.no_grad():
                out = solve(u0)
        except SolverError as exc:
            return [(b, _failed("blew_up", str(exc).split(". ")[0])) for b in prob.batches]
        scores = prob.score(out, res)
        if not math.isfinite(scores["error"]):
            return [(b, _failed("blew_up", "non-finite output", **scores)) for b in prob.batches]
    elif first["status"] != "ok":
        return [(b, first) for b in prob.batches]
    else:
        scores = {k: first[k] for k in ("error", "error_all", "error_max")}
    results = []
    for b in prob.batches:
        if b == prob.n:
            results.append((b, first))
            continue

        def chunks(b=b):
            with torch.no_grad():
                return [solve(u0[i : i + b]) for i in range(0, prob.n, b)]

        timing = time_call(chunks, repeat=prob.repeat, warmup=1, device=prob.device)
        results.append(
            (
                b,
                {
                    "status": "ok",
                    **scores,
                    "seconds_per_trajectory": timing.median / prob.n,
                    "seconds_all": timing.as_dict(),
                },
            )
        )
    return results


def _batch_entry(entry: dict, b: int, n: int, result: dict) -> dict:
    out = {**entry, "batch": b, **result}
    if b != n:
        out["solver"] = f"{entry['solver']}[batch {b}]"
    return out


# ------------------------------------------------------------------------ reference
def _reference(prob: _Problem, system, method, ref_res, ref_dt, setup) -> dict:
    """Compute the reference trajectories and estimate their accuracy (the floor)."""
    start = time.perf_counter()
    u0 = prob.u0_ref
    with torch.no_grad():
        if prob.steady:
            ref = system.simulate(u0, None, method=method, tol=1e-11)
        else:
            ref = system.simulate(u0, prob.t(), method=method, dt=ref_dt)
    synchronize(prob.device)
    seconds = time.perf_counter() - start
    prob.reference = ref.to(torch.float64)
    # its accuracy: A at twice the step (time), B at half the resolution and twice the
    # step against A (space alone: the same step size)
    self_error = {}
    if prob.periodic:
        half = tuple(r // 2 for r in ref_res)
    else:
        half = tuple((r - 1) // 2 + 1 for r in ref_res)
    u0h = prob.initial(half, torch.float64)
    with torch.no_grad():
        if prob.steady:
            a = ref
            b = prob.system(half).simulate(u0h, None, method=method, tol=1e-11)
        else:
            a = system.simulate(u0, prob.t(), method=method, dt=2 * ref_dt)
            self_error["dt_doubled"] = prob.score(a, ref_res)["error"]
            b = prob.system(half).simulate(u0h, prob.t(), method=method, dt=2 * ref_dt)
        self_error["resolution_halved"] = prob.score(b, half, against=a)["error"]
    estimate = max(
        self_error.get("dt_doubled", 0.0) / (2**_REF_TIME_ORDER - 1),
        self_error["resolution_halved"] / (2**setup.space_order - 1),
    )
    eps = torch.finfo(prob.dtype).eps
    prob.floor = max(estimate, 100 * eps)
    return {
        "method": method,
        "resolution": _res_label(ref_res),
        "dt": ref_dt,
        "dtype": "float64",
        "seconds": seconds,
        "self_error": self_error,
        "error_estimate": estimate,
        "floor": prob.floor,
        "floor_rule": (
            f"max(dt_doubled / {2**_REF_TIME_ORDER - 1}, resolution_halved / "
            f"{2**setup.space_order - 1}, 100 eps({_dtype_name(prob.dtype)})); runs below "
            f"{_FLOOR_FACTOR:g} x floor are not scored"
        ),
        "why": "the most accurate method of the system, float64, at reference_factor x the "
        "finest simsci grid (at least py-pde's finest) and half the smallest step of that "
        "method in the run",
    }


# --------------------------------------------------------------------------- models
def _model_resolution(model):
    res = getattr(model, "resolution", None)
    return res if res not in (None, 0) else None


def _load_models(models, problem: str, device) -> list[tuple[str, torch.nn.Module]]:
    if isinstance(models, (str, Path, torch.nn.Module)):
        models = [models]
    out, names = [], set()
    for item in models:
        if isinstance(item, torch.nn.Module):
            model, name = item, type(item).__name__
        elif isinstance(item, (str, Path)):
            from simsci.train import load_model

            model = load_model(item, map_location=device)
            path = Path(item)
            name = path.stem
            if name in ("best", "last"):
                # Trainer's OUT/checkpoints/best.pt: name it by the run folder
                folder = path.parent.parent if path.parent.name == "checkpoints" else path.parent
                name = f"{folder.name}/{name}" if folder.name else name
        else:
            raise TypeError(
                f"models entries must be checkpoint paths or nn.Modules, got {type(item).__name__}"
            )
        if not callable(getattr(model, "rollout", None)):
            raise TypeError(
                f"model {name!r} ({type(model).__name__}) has no rollout(u0, t, params=None) "
                "method; the benchmark protocol needs one returning (B, T, *grid, C)"
            )
        trained_on = getattr(model, "system", None) or (
            getattr(model, "checkpoint_extra", None) or {}
        ).get("system")
        if trained_on is not None and trained_on != problem:
            raise ValueError(
                f"model {name!r} was trained on {trained_on!r}, not on the benchmark problem "
                f"{problem!r}; benchmark it on --problem {trained_on}"
            )
        base, k = name, 2
        while name in names:
            name, k = f"{base}#{k}", k + 1
        names.add(name)
        out.append((name, model.to(device).eval()))
    return out


def _model_run(prob: _Problem, model, res) -> dict:
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), prob.dtype)
    u0 = prob.initial(res, dtype)
    system = prob.system(res)
    p = torch.as_tensor(
        [float(system.params[k]) for k in system.param_names], dtype=dtype, device=prob.device
    ).expand(prob.n, -1)
    t = prob.t(dtype)

    def solve(u):
        out = model.rollout(u, t, params=p[: u.shape[0]])
        if not isinstance(out, torch.Tensor):
            raise TypeError(
                f"{type(model).__name__}.rollout returned {type(out).__name__}; the protocol "
                "needs a tensor (B, T, *grid, C)"
            )
        return out

    return _timed_runs(prob, solve, u0, res)


# --------------------------------------------------------------------------- py-pde
def _pypde_status(problem: str, pypde) -> dict:
    if pypde not in ("auto", True, False):
        raise ValueError(f"pypde must be 'auto', True or False, got {pypde!r}")
    if pypde is False:
        return {"included": False, "reason": "turned off (pypde=False / --no-pypde)"}
    reason = None
    if problem not in PYPDE_EQUATIONS:
        reason = _PYPDE_MISSING.get(problem, f"no py-pde expression for {problem!r}")
    else:
        try:
            import pde  # noqa: F401
        except ImportError as exc:
            reason = f"py-pde is not installed ({exc}); pip install 'simsci[compare]'"
    if reason is not None:
        if pypde is True:
            raise ValueError(f"py-pde cannot run {problem!r}: {reason}")
        return {"included": False, "reason": reason}
    import pde

    return {
        "included": True,
        "version": getattr(pde, "__version__", "?"),
        "equation": PYPDE_EQUATIONS[problem],
    }


def _pypde_runs(prob: _Problem, resolutions, dts, tolerances) -> list[dict]:
    import pde
    from pde.solvers import RungeKuttaSolver

    exprs = {
        c: e.format(**{k: repr(float(v)) for k, v in prob.system(resolutions[0]).params.items()})
        for c, e in PYPDE_EQUATIONS[prob.name].items()
    }
    channel_names = list(prob.system(resolutions[0]).channel_names)
    runs = []
    for res in resolutions:
        system = prob.system(res)
        grid = pde.CartesianGrid([[0.0, L] for L in system.domain], list(res), periodic=True)
        eq = pde.PDE(exprs)
        u0 = prob.initial(res, torch.float64).cpu().numpy()  # (n, *grid, C)
        if len(channel_names) == 1:
            state = pde.ScalarField(grid, u0[0, ..., 0])
        else:
            state = pde.FieldCollection(
                [pde.ScalarField(grid, u0[0, ..., c], label=name)
                 for c, name in enumerate(channel_names)]
            )  # fmt: skip
        configs = [("rk4", dt, None) for dt in dts] + [("rkf45", None, tol) for tol in tolerances]
        for kind, dt, tol in configs:
            entry = {
                "solver": f"py-pde:{kind}",
                "family": "py-pde",
                "method": "runge-kutta (RK4, fixed step)"
                if kind == "rk4"
                else "runge-kutta (RKF45, adaptive)",
                "resolution": _res_label(res),
                "batch": 1,
            }
            if kind == "rk4":
                h = _effective_step(prob.times, dt)
                entry.update(dt=h, dt_requested=dt)
                solver = RungeKuttaSolver(eq, adaptive=False)
                stepper = solver.make_stepper(state, dt=h)
                dt_init = h
            else:
                entry.update(dt=None, dt_requested=None, tolerance=tol)
                solver = RungeKuttaSolver(eq, adaptive=True, tolerance=tol)
                dt_init = 1e-3 * float(np.diff(prob.times).min())
                stepper = solver.make_stepper(state, dt=dt_init)

            def run_all(solver=solver, stepper=stepper, dt_init=dt_init, u0=u0, state=state):
                out = np.empty((u0.shape[0], len(prob.times), *u0.shape[1:]))
                for b in range(u0.shape[0]):
                    state.data[...] = np.moveaxis(u0[b], -1, 0).reshape(state.data.shape)
                    out[b, 0] = u0[b]
                    solver.info["dt"] = dt_init
                    for i in range(len(prob.times) - 1):
                        stepper(state, float(prob.times[i]), float(prob.times[i + 1]))
                        data = state.data.reshape(len(channel_names), *u0.shape[1:-1])
                        out[b, i + 1] = np.moveaxis(data, 0, -1)
                return torch.from_numpy(out).to(prob.device)

            try:
                with np.errstate(all="ignore"):
                    result = _timed_run(prob, run_all, res)
            except RuntimeError as exc:  # py-pde's adaptive stepper: dt below dt_min
                result = _failed("failed", str(exc)[:200])
            if kind == "rkf45" and result["status"] == "ok":
                stats = solver.info.get("dt_statistics")
                if stats is not None and getattr(stats, "count", 0):
                    entry["dt_mean"] = float(stats.mean)
            entry.update(result)
            runs.append(entry)
    return runs


# ===================================================================== reporting
def _fmt(value, spec=".2e") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan"
    return format(value, spec)


def format_table(result: dict) -> str:
    """The table the CLI prints: per solver its runs (resolution, dt, error, time; ``*``
    marks the Pareto front), then the matched-accuracy speed-ups."""
    s = result["settings"]
    ref = result["reference"]
    params = ", ".join(f"{k}={v:g}" for k, v in result["params"].items())
    lines = [
        f"PDE benchmark: {result['problem']} ({params}), t_end={s['t_end']:g}, "
        f"{s['n']} trajectories, {s['device']} {s['dtype']}",
        f"reference: {ref['method']} at {ref['resolution']}"
        + (f", dt={ref['dt']:.3g}" if ref.get("dt") else "")
        + f" (float64); floor {ref['floor']:.1e} (self-differences: "
        + ", ".join(f"{k} {v:.1e}" for k, v in ref["self_error"].items())
        + ")",
        f"error: {s['error']}",
        f"time: {s['time']}",
        "",
        f"{'solver':24s} {'resolution':>10s} {'dt/tol':>9s} {'error':>9s} {'err(all t)':>10s} "
        f"{'s/traj':>9s}  front",
    ]
    fronts = result["fronts"]
    on_front = {
        (sv, str(r["resolution"]), r.get("dt"), r.get("tolerance"))
        for sv, rows in fronts.items()
        for r in rows
    }
    skipped = []
    for run in result["runs"]:
        if run["status"] != "ok":
            skipped.append(run)
            continue
        step = (
            _fmt(run["dt"], ".3g")
            if run.get("dt") is not None
            else (_fmt(run["tolerance"], ".0e") if run.get("tolerance") is not None else "-")
        )
        key = (run["solver"], str(run["resolution"]), run.get("dt"), run.get("tolerance"))
        mark = "*" if key in on_front else ("(floor)" if not run.get("scored", True) else "")
        lines.append(
            f"{run['solver']:24s} {_res_str(run['resolution']):>10s} {step:>9s} "
            f"{_fmt(run['error']):>9s} {_fmt(run['error_all']):>10s} "
            f"{_fmt(run['seconds_per_trajectory'], '.3g'):>9s}  {mark}"
        )
    if skipped:
        lines += ["", "not run / failed:"]
        for run in skipped:
            step = f" dt={run['dt']:.3g}" if run.get("dt") is not None else ""
            lines.append(
                f"  {run['solver']} {_res_str(run['resolution'])}{step}: {run['status']}"
                + (f" ({run['note']})" if run.get("note") else "")
            )
    lines += ["", "speed-up at matched accuracy (time ratio at equal error, interpolated "
              "along the Pareto fronts):"]  # fmt: skip
    if not result["speedups"]:
        lines.append("  (fewer than two solvers with runs above the reference floor)")
    for sp in result["speedups"]:
        if not sp["overlap"]:
            lines.append(f"  {sp['solver']} vs {sp['versus']}: {sp['note']}")
            continue
        ge = ">= " if sp.get("bound") else ""
        at = ", ".join(f"{ge}{r:.3g}x at {e:.1e}" for r, e in zip(sp["speedup"], sp["errors"]))
        tail = " [bound: every run of the first at the reference floor]" if ge else ""
        lines.append(
            f"  {sp['solver']} vs {sp['versus']}: {at} (geomean {sp['geomean']:.3g}x){tail}"
        )
    pyp = result.get("pypde", {})
    if not pyp.get("included"):
        lines += ["", f"py-pde: not included ({pyp.get('reason', '?')})"]
    return "\n".join(lines)


def _res_str(res) -> str:
    return "x".join(str(r) for r in res) if isinstance(res, (list, tuple)) else str(res)


def plot_pareto(result: dict, path) -> Path:
    """Error vs time per trajectory (log-log): each solver's runs as points and its
    Pareto front as a line. Writes a PNG to ``path``; needs matplotlib (extra ``plot``)."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(
            f"plot_pareto needs matplotlib ({exc}); install it with pip install 'simsci[plot]'"
        ) from exc
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 5))
    markers = "osD^vP*X<>"
    solvers = list(result["fronts"])
    for i, solver in enumerate(solvers):
        runs = [
            r for r in result["runs"] if r["solver"] == solver and r["status"] == "ok"
            and r["error"] and r["seconds_per_trajectory"]
        ]  # fmt: skip
        if not runs:
            continue
        color = f"C{i % 10}"
        ax.scatter(
            [r["seconds_per_trajectory"] for r in runs],
            [r["error"] for r in runs],
            color=color,
            marker=markers[i % len(markers)],
            alpha=0.45,
            s=22,
        )
        front = result["fronts"][solver]
        if front:
            ax.plot(
                [r["seconds_per_trajectory"] for r in front],
                [r["error"] for r in front],
                color=color,
                marker=markers[i % len(markers)],
                label=solver,
            )
        else:
            ax.scatter([], [], color=color, label=f"{solver} (at floor)")
    floor = result["reference"]["floor"]
    ax.axhline(
        _FLOOR_FACTOR * floor,
        color="grey",
        ls=":",
        lw=1,
        label=f"{_FLOOR_FACTOR:g} x reference floor (below: not scored)",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("wall time per trajectory [s]")
    ax.set_ylabel("relative L2 error at t_end")
    s = result["settings"]
    ax.set_title(f"{result['problem']}: accuracy vs cost ({s['device']}, batch {s['n']})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
