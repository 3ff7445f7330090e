"""``FixedStepSolver``: odeint's fixed-step solve, checked once and run many times.

``odeint`` validates its arguments, builds the time grid, wraps the field and hands it
to torchdiffeq on every call. For a large batch that costs nothing next to the
arithmetic; for a batch of one (a single environment stepping a pendulum through four
RK4 steps) it is most of the time. An environment solves the same interval with the
same method again and again, so this class does the checks and builds the step grid
once, at construction, and a call then runs only the steps.

A call runs exactly what ``odeint(func, y0, t, method=method, step_size=step_size)``
runs: the same step grid (:func:`simsci.integrate._grid.subdivide` of ``t`` cast to
the dtype and device given), torchdiffeq's step formulas for the method written out
in the same order, the same time tensors handed to ``func``. The result therefore
equals odeint's last output bit for bit (tests/integrate/test_fixed_step.py checks
it for every method here). What a call does not do, by design: check ``y0`` and the
shape and dtype of ``func``'s output (:meth:`FixedStepSolver.check` does both, for a
caller to run once), scan the result for NaN/inf (odeint's ``check_finite=False``),
or mask per-sample time windows (one time grid is shared by the whole batch).

Methods: the single-step fixed-grid methods of ``ODE_METHODS`` (``euler``,
``midpoint``, ``heun2``, ``heun3``, ``rk4``: torchdiffeq's formulas, rk4 its 3/8
rule). The Adams methods keep a history across steps and stay with ``odeint``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from simsci.integrate._grid import build_grid, check_y0, subdivide
from simsci.integrate._methods import get_ode_method

__all__ = ["FixedStepSolver", "FIXED_STEP_METHODS"]

# torchdiffeq's constants (rk_common.py), so the products round as there
_ONE_THIRD = 1 / 3
_TWO_THIRDS = 2 / 3


def _euler(func, t0, dt, ts, y0):
    return y0 + dt * func(t0, y0)


def _midpoint(func, t0, dt, ts, y0):
    half_dt, t_half = ts
    f0 = func(t0, y0)
    y_mid = y0 + f0 * half_dt
    return y0 + dt * func(t_half, y_mid)


def _heun2(func, t0, dt, ts, y0):
    (t1,) = ts
    k1 = func(t0, y0)
    k2 = func(t1, y0 + dt * k1 * 1.0)
    return y0 + dt * (k1 * (1 / 2) + k2 * (1 / 2))


def _heun3(func, t0, dt, ts, y0):
    ta, tb = ts
    k1 = func(t0, y0)
    k2 = func(ta, y0 + dt * k1 * (1 / 3))
    k3 = func(tb, y0 + dt * (k1 * 0.0 + k2 * (2 / 3)))
    return y0 + dt * (k1 * (1 / 4) + k2 * 0.0 + k3 * (3 / 4))


def _rk4(func, t0, dt, ts, y0):
    ta, tb, t1 = ts
    k1 = func(t0, y0)
    k2 = func(ta, y0 + dt * k1 * _ONE_THIRD)
    k3 = func(tb, y0 + dt * (k2 - k1 * _ONE_THIRD))
    k4 = func(t1, y0 + dt * (k1 - k2 + k3))
    return y0 + (k1 + 3 * (k2 + k3) + k4) * dt * 0.125


def _stage_times(name: str, t0: Tensor, t1: Tensor, dt: Tensor) -> tuple:
    """The times torchdiffeq hands the field inside one step (computed as it does)."""
    if name == "midpoint":
        half_dt = 0.5 * dt
        return (half_dt, t0 + half_dt)
    if name == "heun2":
        return (t0 + dt * 1.0,)
    if name == "heun3":
        return (t0 + dt * (1 / 3), t0 + dt * (2 / 3))
    if name == "rk4":
        return (t0 + dt * _ONE_THIRD, t0 + dt * _TWO_THIRDS, t1)
    return ()


#: method name -> one step ``(func, t0, dt, stage times, y0) -> y1``, as torchdiffeq's
#: fixed-grid solvers (fixed_grid.py, rk_common.py) compute it
FIXED_STEP_METHODS: dict[str, Callable] = {
    "euler": _euler,
    "midpoint": _midpoint,
    "heun2": _heun2,
    "heun3": _heun3,
    "rk4": _rk4,
}


class FixedStepSolver:
    """``odeint(func, y0, t, method=method, step_size=step_size)[:, -1]`` for many calls.

    Construction checks the method, ``t`` (1-D, strictly increasing, finite) and
    ``step_size`` as odeint does and builds the step grid on ``device`` in ``dtype``
    (the dtype and device the states will have). ``solver(func, y0)`` then returns the
    state at ``t[-1]``, bit for bit odeint's, without re-checking anything; run
    :meth:`check` once with a representative ``func`` and ``y0`` for odeint's checks
    of those two.
    """

    def __init__(
        self,
        method: str,
        t,
        step_size: float | None,
        *,
        dtype: torch.dtype = torch.float64,
        device=None,
    ):
        info = get_ode_method(method)
        if info.name not in FIXED_STEP_METHODS:
            raise ValueError(
                f"FixedStepSolver runs the single-step fixed-grid methods "
                f"{sorted(FIXED_STEP_METHODS)}, not {method!r}; use simsci.odeint for it."
            )
        if step_size is not None and not (0 < float(step_size) < float("inf")):
            raise ValueError(f"step_size must be a positive finite number, got {step_size!r}.")
        device = torch.device("cpu") if device is None else torch.device(device)
        grid = build_grid(t, 1, dtype, device)
        union = grid.union
        if union.numel() < 2:
            raise ValueError("t needs at least two times (a start and an end) to step between.")
        times = union if step_size is None else subdivide(union, float(step_size))
        self.method = info.name
        # the grid's device, not the one asked for: 'cuda' becomes 'cuda:0', which is what
        # the states' .device reads, so check() compares like with like
        self.dtype, self.device = dtype, union.device
        self._step = FIXED_STEP_METHODS[info.name]
        self._steps = []
        for t0, t1 in zip(times[:-1], times[1:]):
            dt = t1 - t0
            self._steps.append((t0, dt, _stage_times(info.name, t0, t1, dt)))

    @property
    def num_steps(self) -> int:
        return len(self._steps)

    def __call__(self, func, y0: Tensor) -> Tensor:
        """The state at ``t[-1]`` from ``y0`` at ``t[0]`` (``func(t, y) -> dy/dt``)."""
        step = self._step
        y = y0
        for t0, dt, ts in self._steps:
            y = step(func, t0, dt, ts, y)
        return y

    def check(self, func, y0: Tensor) -> None:
        """odeint's checks of ``y0`` (a finite float tensor ``(B, *S)`` of this solver's
        dtype and device) and of one evaluation of ``func`` (its shape and dtype)."""
        y0 = check_y0(y0)
        if y0.dtype != self.dtype or y0.device != self.device:
            raise ValueError(
                f"this solver was built for {self.dtype} states on {self.device}, got "
                f"{y0.dtype} on {y0.device}; build one for those."
            )
        t0 = self._steps[0][0]
        dy = func(t0, y0)
        if not isinstance(dy, Tensor) or dy.shape != y0.shape or dy.dtype != y0.dtype:
            got = (
                type(dy).__name__
                if not isinstance(dy, Tensor)
                else f"shape {tuple(dy.shape)}, dtype {dy.dtype}"
            )
            raise ValueError(
                f"func(t, y) must return dy/dt with the shape and dtype of y "
                f"({tuple(y0.shape)}, {y0.dtype}, batch first), got {got}."
            )
