"""Fast path for adaptive Runge-Kutta solves: drive torchdiffeq's solver step by step.

``torchdiffeq.odeint`` visits the requested times one at a time in Python: for each it
checks whether a new step is needed and evaluates the interpolant at that single time.
On a union grid of B samples x T times that is B*T Python iterations even though the
adaptive steps number only a few hundred. Here we take the solver's steps ourselves and,
after each accepted step, evaluate the step's interpolating polynomial once for *all*
output entries ``(sample, time)`` that fall inside it: one vectorised gather and a Horner
evaluation per step. Only the requested entries are computed (memory O(N * S) rather than
O(U * B * S) for the full union solution).

The numbers are torchdiffeq's own: same solver object, same steps, same interpolant
(4th-order polynomial fitted by the Runge-Kutta step); only the bookkeeping differs. It
uses torchdiffeq internals (``SOLVERS``, the solver constructor's keywords, the
``perturb`` protocol, ``_before_integrate``, ``_adaptive_step``, ``rk_state``), stable
since torchdiffeq 0.2.0; if they are missing, ``AVAILABLE`` is False and ``odeint`` uses
the public ``torchdiffeq.odeint`` instead.
"""

from __future__ import annotations

import bisect

from torch import Tensor

from simsci.integrate._grid import TimeGrid

try:
    from torchdiffeq._impl.odeint import SOLVERS
    from torchdiffeq._impl.rk_common import RKAdaptiveStepsizeODESolver

    AVAILABLE = all(
        hasattr(RKAdaptiveStepsizeODESolver, name)
        for name in ("_before_integrate", "_adaptive_step")
    )
except ImportError:  # a torchdiffeq whose internals moved: use the public odeint instead
    AVAILABLE = False


def solve(func, y0: Tensor, grid: TimeGrid, method: str, rtol, atol, options: dict) -> Tensor:
    """Solve on ``grid`` with adaptive RK ``method``; return entries (N, *S) in caller order."""
    # ``func`` is handed to the solver as is (no torchdiffeq _check_inputs wrapping): it
    # takes the ``perturb`` keyword and has the callback_* methods the solver calls.
    solver = SOLVERS[method](func=func, y0=y0, rtol=rtol, atol=atol, **options)
    solver._before_integrate(grid.union[[0, -1]].to(solver.dtype))

    order, ptr = grid.order, grid.ptr
    sample_sorted = grid.sample_in_union_order()
    uindex_sorted = grid.uindex[order]
    union_t = grid.union.to(solver.dtype)
    times = grid.union_list
    n_union = len(times)
    view = (-1,) + (1,) * (y0.dim() - 1)

    # Entries at the first union time are the initial states themselves.
    chunks = [y0[sample_sorted[: ptr[1]]]]
    k = 1
    last_t1 = times[0]
    while k < n_union:
        state = solver._adaptive_step(solver.rk_state)
        solver.rk_state = state
        t1 = float(state.t1.detach())
        if t1 <= last_t1:  # step rejected: rk_state.t1 did not move
            continue
        last_t1 = t1
        k_hi = bisect.bisect_right(times, t1, lo=k)
        if k_hi == k:
            continue
        e0, e1 = ptr[k], ptr[k_hi]
        rows = sample_sorted[e0:e1]
        x = (union_t[uindex_sorted[e0:e1]] - state.t0) / (state.t1 - state.t0)
        x = x.to(y0.dtype).view(view)
        # Interpolant coefficients [e, d, c, b, a] of e + d x + c x^2 + b x^3 + a x^4.
        coeffs = state.interp_coeff
        value = coeffs[4][rows]
        for c in (coeffs[3], coeffs[2], coeffs[1], coeffs[0]):
            value = value * x + c[rows]
        chunks.append(value)
        k = k_hi

    return grid.from_union_order(chunks)
