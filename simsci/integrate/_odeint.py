"""``odeint``: batched ODE solves over torchdiffeq with per-sample time grids.

Design choices (the task left them open):

- One solve per call, whatever the grids. Per-sample grids ((B, T) or a ragged list) are
  merged into the sorted union of all times; each sample's outputs are gathered back with
  one index. Sample b's initial state is given at its own first time t_b0: outside its
  window [t_b0, t_bend] its vector field is masked to zero, so it rests at y0 until it
  starts and stops changing (cannot drift or blow up) after it ends. The window edges
  are discontinuities of the masked field. Adaptive Runge-Kutta methods get the start
  times as torchdiffeq ``jump_t`` (a step ends exactly there and the rate is re-evaluated
  on the far side). Ends need no such stop: a sample is frozen from the first step that
  *begins* at or after its end and leaves the error norm then, so the step containing
  its end is an ordinary step for it (its last outputs are interpolated from that step).
  This halves the forced steps of the benchmark (256 samples, all with different
  windows). Under ``adjoint`` (whose backward solves do not report their steps) the
  ends are ``jump_t`` too. Fixed-step methods step on a grid that contains every edge
  and evaluate the field just inside each step (torchdiffeq's ``perturb``), so no step
  straddles an edge.
- Error control is per sample: the norm handed to torchdiffeq is the largest per-sample
  RMS of the scaled error, not the RMS over the whole batch (which would let one sample's
  error be diluted by sqrt(B) and make batched results looser than separate solves).
- Fixed-step methods with ``step_size`` take steps of at most ``step_size``: each gap
  between consecutive union times is split into ceil(gap / step_size) equal steps, so
  every requested time is a step boundary (no interpolation). Without ``step_size`` they
  step on the union grid itself. The Adams multistep methods need equal steps, so they
  step on a uniform grid and interpolate outputs (cubic Hermite); they need every sample
  to start at the same time and do not support ``adjoint``.
- Adaptive methods without adjoint run through ``_dense`` (vectorised dense output); the
  rest through the public ``torchdiffeq.odeint``/``odeint_adjoint`` on the union grid.
- Times follow y0: moved to its device, cast to its dtype (a cast that merges two times of
  one sample is an error). Gradients flow to y0 and parameters, not to t.
"""

from __future__ import annotations

import torch
import torchdiffeq
from torch import Tensor, nn

from simsci.errors import SolverError
from simsci.integrate import _dense
from simsci.integrate._failure import (
    FIX_ADAPTIVE,
    FIX_FIXED,
    FIX_MAX_STEPS,
    culprits,
    raise_solver_error,
    scan_outputs,
    torchdiffeq_failure,
)
from simsci.integrate._grid import TimeGrid, build_grid, check_y0, subdivide, uniform
from simsci.integrate._methods import MethodInfo, get_ode_method


class _Default(float):
    """A default number, told apart (by identity) from the same number passed explicitly."""

    __slots__ = ()


_RTOL = _Default(1e-6)
_ATOL = _Default(1e-8)
_ADAMS_MAX_ORDER = 5  # history of 4 rates: 4th-order Adams-Bashforth predictor


class _TooManySteps(Exception):
    def __init__(self, time: float, steps: int):
        super().__init__(time, steps)
        self.time, self.steps = time, steps


class _Field:
    """The user's ``func`` with shape checks, window masks, a step counter and a memory.

    Window masks: sample b's rate is zero before its start t_b0 (a time mask; the start is
    a step boundary). After its end it is frozen either by a time mask (``t <= t_bend``,
    with t_bend a step boundary too) or, in ``freeze_ends`` mode, from the first step that
    *begins* at or after t_bend: the step containing t_bend is then an ordinary step for
    b (its outputs up to t_bend come from it), no step has to stop at t_bend, and the
    error norm ignores b from then on. Remembers the last evaluated ``(t, y, dy)`` so a
    failure can name the samples. A plain callable (not an nn.Module): it sits in the
    innermost loop, and nn.Module attribute access costs there.
    """

    __slots__ = (
        "func", "start", "end", "masked", "freeze_ends", "alive", "live_start", "max_steps",
        "steps", "last", "view",
    )  # fmt: skip

    def __init__(self, func, grid: TimeGrid, masked: bool, freeze_ends: bool, max_steps):
        self.func = func
        self.start, self.end = grid.start, grid.end
        self.masked = masked
        self.freeze_ends = masked and freeze_ends
        self.alive = grid.end > grid.union[0]
        self.live_start = torch.where(self.alive, grid.start, float("inf"))
        self.max_steps = max_steps
        self.steps = 0
        self.last = None
        self.view = None

    def __call__(self, t: Tensor, y: Tensor, perturb=None) -> Tensor:
        # ``perturb`` is torchdiffeq's Perturb enum, passed when the dense path hands this
        # field to a solver directly (the public odeint wraps it in its own _PerturbFunc):
        # evaluate just after (NEXT) or before (PREV) t, so a step that ends or starts at a
        # window edge sees the field of its own side.
        if t.dtype != y.dtype:
            t = t.to(y.dtype)
        if perturb is not None and perturb.name != "NONE":
            t = torch.nextafter(t, t + 1 if perturb.name == "NEXT" else t - 1)
        dy = self.func(t, y)
        if not isinstance(dy, Tensor) or dy.shape != y.shape or dy.dtype != y.dtype:
            got = (
                f"{type(dy).__name__}"
                if not isinstance(dy, Tensor)
                else f"shape {tuple(dy.shape)}, dtype {dy.dtype}"
            )
            raise ValueError(
                f"func(t, y) must return dy/dt with the shape and dtype of y "
                f"({tuple(y.shape)}, {y.dtype}, batch first), got {got}."
            )
        if self.masked:
            if self.view is None:
                self.view = (-1,) + (1,) * (y.dim() - 1)
            if self.freeze_ends:
                active = t >= self.live_start
            else:
                active = (t >= self.start) & (t <= self.end)
            dy = torch.where(active.view(self.view), dy, 0.0)
        self.last = (t, y, dy)
        return dy

    def callback_step(self, t0, y0, dt):
        self.steps += 1
        if self.max_steps is not None and self.steps > self.max_steps:
            raise _TooManySteps(float(t0), self.steps - 1)
        if self.freeze_ends:
            self.alive = self.end > t0
            # A finished sample "starts" at +inf: one comparison per evaluation masks both.
            self.live_start = torch.where(self.alive, self.start, float("inf"))

    def norm(self, x: Tensor) -> Tensor:
        """Largest per-sample RMS: error control as strict as solving each sample alone.

        (torchdiffeq's default RMS over the whole batch would dilute one sample's error by
        sqrt(B).) Samples frozen after their end no longer count. No gradient: the step
        sizes are constants for backpropagation (also, sqrt at a resting sample's zero
        error would give 0 * inf = NaN).
        """
        with torch.no_grad():
            mean_sq = x.reshape(x.shape[0], -1).pow(2).mean(dim=1)
            if self.freeze_ends:
                mean_sq = torch.where(self.alive, mean_sq, 0.0)
            return mean_sq.max().sqrt()


class _DenseField(_Field):
    """The field handed to a torchdiffeq solver directly (``_dense``), which calls these
    callbacks unconditionally. (The public odeint would warn that fixed-step solvers do
    not support them, so plain ``_Field`` does not have them.)"""

    __slots__ = ()

    def callback_accept_step(self, t0, y0, dt):
        """Nothing to do after an accepted step."""

    def callback_reject_step(self, t0, y0, dt):
        """Nothing to do after a rejected step."""


def _check_options(info: MethodInfo, rtol, atol, step_size, max_steps):
    name = info.name
    if info.adaptive:
        if step_size is not None:
            raise ValueError(
                f"step_size is for fixed-step methods, but {name!r} is adaptive: it chooses its "
                f"own steps from rtol/atol (and max_steps caps them). Drop step_size, or pick a "
                f"fixed-step method such as 'rk4'."
            )
    else:
        given = [k for k, v, d in (("rtol", rtol, _RTOL), ("atol", atol, _ATOL)) if v is not d]
        if given and not info.uses_tolerances:
            raise ValueError(
                f"{' and '.join(given)} only apply to adaptive methods, but {name!r} takes fixed "
                f"steps: control its accuracy with step_size, or pick an adaptive method such "
                f"as 'dopri5'."
            )
        if max_steps is not None:
            raise ValueError(
                f"max_steps only applies to adaptive methods; {name!r} takes fixed steps, whose "
                f"number step_size sets. Drop max_steps."
            )
        if info.multistep and step_size is None:
            raise ValueError(
                f"{name!r} is a multistep method whose coefficients assume equal steps: give "
                f"step_size (the union of the output times is not evenly spaced in general)."
            )
        if step_size is not None and not (float(step_size) > 0 and float(step_size) < float("inf")):
            raise ValueError(f"step_size must be a positive finite number, got {step_size!r}.")
    for key, value in (("rtol", rtol), ("atol", atol)):
        if not (float(value) >= 0):
            raise ValueError(f"{key} must be a non-negative number, got {value!r}.")
    if max_steps is not None and (int(max_steps) != max_steps or max_steps < 1):
        raise ValueError(f"max_steps must be a positive integer or None, got {max_steps!r}.")


# Long by design: the public entry point, and its 36-line docstring is the API's documentation.
def odeint(
    func,
    y0: Tensor,
    t,
    *,
    method: str = "dopri5",
    rtol: float = _RTOL,
    atol: float = _ATOL,
    step_size: float | None = None,
    max_steps: int | None = None,
    adjoint: bool = False,
    adjoint_params=None,
    check_finite: bool = True,
):
    """Solve dy/dt = func(t, y) for a batch of initial states; batch first.

    Args:
        func: ``func(t, y) -> dy/dt``; ``t`` a 0-d tensor, ``y`` and the result (B, *S).
            An ``nn.Module`` if ``adjoint`` should find its parameters.
        y0: (B, *S) float32/float64, finite. Sample b's state at its first time.
        t: the output times, strictly increasing for each sample:
            (T,) shared by all samples -> returns (B, T, *S);
            (B, T) one grid per sample -> returns (B, T, *S);
            a list of B 1-D tensors of lengths T_b (ragged) -> returns a list of
            B tensors (T_b, *S).
            Samples may start and end at different times; each is solved from its own
            t_b0 (see the module docstring). All grids are solved in ONE batched call.
        method: a key of ``ODE_METHODS`` (default "dopri5").
        rtol, atol: error tolerances of adaptive methods (defaults 1e-6, 1e-8); per
            sample: every sample meets them, as if solved alone.
        step_size: fixed-step methods only: largest step (each gap between output times
            is split evenly). None steps on the output times themselves.
        max_steps: adaptive methods only: the most step attempts (accepted + rejected)
            in the whole solve; None for no limit.
        adjoint: backpropagate with the adjoint method (torchdiffeq.odeint_adjoint):
            O(1) memory in the number of steps, at the price of a backward solve.
        adjoint_params: the tensors to differentiate with the adjoint; default
            ``func.parameters()`` (func must then be an ``nn.Module``; pass ``()`` if
            there are none).
        check_finite: scan the result and raise ``SolverError`` on NaN/inf.

    Returns:
        (B, T, *S) tensor, or a list of (T_b, *S) tensors for ragged t; device and dtype
        of y0; entry [b, 0] is y0[b].

    Raises:
        SolverError: step-size underflow, max_steps exceeded or a non-finite state; the
            message names the failing samples (batch indices), the time and the fix.
        UnknownNameError, ValueError, TypeError: bad input, checked before solving.
    """
    info = get_ode_method(method)
    _check_options(info, rtol, atol, step_size, max_steps)
    y0 = check_y0(y0)
    if not callable(func):
        raise TypeError(f"func must be callable as func(t, y), got {type(func).__name__}.")
    grid = build_grid(t, y0.shape[0], y0.dtype, y0.device)

    if info.multistep and grid.windows_differ and bool((grid.start != grid.start[0]).any()):
        raise ValueError(
            f"{method!r} is a multistep method: its step history cannot restart for samples "
            f"that start later, so all samples must share their first time (they start "
            f"between {float(grid.start.min())!r} and {float(grid.start.max())!r}). Use 'rk4' "
            f"or an adaptive method such as 'dopri5' for different start times."
        )
    if adjoint:
        if info.multistep:
            raise ValueError(
                f"adjoint=True is not supported with the multistep method {method!r} (its "
                f"backward solve restarts on every output interval); use 'rk4' or 'dopri5'."
            )
        if adjoint_params is None:
            if not isinstance(func, nn.Module):
                raise ValueError(
                    "adjoint=True needs the tensors to differentiate: make func an nn.Module "
                    "(its parameters are used) or pass adjoint_params=(...); pass "
                    "adjoint_params=() if gradients are only wanted for y0."
                )
            adjoint_params = tuple(func.parameters())
        else:
            adjoint_params = tuple(adjoint_params)

    if len(grid.union_list) == 1:  # every sample asks only for its initial state
        return grid.assemble(y0[grid.sample], y0)

    # Multistep methods mask nothing: all samples start together, and a sample running
    # past its own end only produces outputs nobody gathers.
    masked = grid.windows_differ and not info.multistep
    dense = info.adaptive and not adjoint and _dense.AVAILABLE
    # Step-based freezing at the ends needs our own step loop (the adjoint's backward
    # solves do not report their steps), so the dense path only.
    field = (_DenseField if dense else _Field)(func, grid, masked, dense, max_steps)
    options: dict = {"norm": field.norm}
    if info.adaptive:
        if masked:
            edges = grid.start if dense else torch.cat([grid.start, grid.end])
            options["jump_t"] = torch.unique(edges)
    else:
        if masked:
            options["perturb"] = True
        if info.multistep:
            steps = uniform(grid.union[0], grid.union[-1], float(step_size))
            options["grid_constructor"] = lambda f, y, tt: steps
            options["interp"] = "cubic"
            # torchdiffeq's default raises the order up to 12, and Adams-Bashforth of high
            # order is unstable (explicit_adams then diverges on dy/dt = -y with h = 0.01).
            options["max_order"] = _ADAMS_MAX_ORDER
        elif step_size is not None:
            options["grid_constructor"] = _segment_constructor(subdivide(grid.union, step_size))
    rtol_, atol_ = float(rtol), float(atol)

    what = f"odeint (method {method!r})"
    try:
        if dense:
            values = _dense.solve(field, y0, grid, method, rtol_, atol_, options)
        else:
            kwargs = dict(rtol=rtol_, atol=atol_, method=method, options=options)
            if adjoint:
                sol = torchdiffeq.odeint_adjoint(
                    field, y0, grid.union, adjoint_params=adjoint_params, **kwargs
                )
            else:
                sol = torchdiffeq.odeint(field, y0, grid.union, **kwargs)
            values = _union_values(sol, grid)
    except SolverError:
        raise
    except _TooManySteps as exc:
        samples, why = _blame(field, rtol_, atol_)
        raise_solver_error(
            what,
            f"max_steps={max_steps} step attempts were used up",
            samples,
            why,
            exc.time,
            FIX_MAX_STEPS,
            None,
        )
    except (AssertionError, RuntimeError) as exc:
        meaning = torchdiffeq_failure(exc)
        if meaning is None:
            raise
        samples, why = _blame(field, rtol_, atol_)
        time = None if field.last is None else float(field.last[0])
        raise_solver_error(what, meaning, samples, why, time, FIX_ADAPTIVE, exc)
    finally:
        field.last = None
    if check_finite:
        scan_outputs(values, grid, what, FIX_FIXED if not info.adaptive else FIX_ADAPTIVE)
    return grid.assemble(values, y0)


def _blame(field: _Field, rtol: float, atol: float):
    if field.last is None:
        return [], ""
    _, y, dy = field.last
    return culprits(y, dy, rtol, atol)


def _union_values(sol: Tensor, grid: TimeGrid) -> Tensor:
    """(U, B, *S) torchdiffeq solution -> caller-order entries (N, *S)."""
    if grid.kind == "shared":
        return sol.movedim(0, 1).reshape(-1, *sol.shape[2:])
    return grid.gather_union(sol)


def _segment_constructor(steps: Tensor):
    """torchdiffeq grid_constructor: the part of ``steps`` between t[0] and t[-1].

    Works for the forward solve (t = the union grid) and for the adjoint's backward
    solves over single output intervals, which pass their times reversed.
    """

    def construct(func, y0, t):
        a, b = t[0], t[-1]
        lo, hi = (a, b) if a <= b else (b, a)
        seg = steps[(steps >= lo) & (steps <= hi)]
        return seg if a <= b else seg.flip(0)

    return construct
