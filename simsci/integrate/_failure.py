"""Turn solver failures into :class:`simsci.errors.SolverError` naming samples and time.

torchdiffeq fails deep inside with an ``AssertionError`` ("underflow in dt", "non-finite
values in state"); fixed-step methods fail silently with NaN/inf. Two ways to find the
culprit samples: (1) the wrapped vector field remembers the last evaluated ``(t, y, dy)``,
and at a failure the samples whose state or rate is non-finite, or else the one changing
fastest relative to the tolerances, are named; (2) after a fixed-step solve the outputs
are scanned for each sample's first non-finite entry.
"""

from __future__ import annotations

import torch
from torch import Tensor

from simsci.errors import SolverError
from simsci.integrate._grid import TimeGrid, _fmt_samples

# torchdiffeq's assertion messages (rk_common.py) and what they mean.
_TORCHDIFFEQ_FAILURES = {
    "underflow in dt": "step-size underflow: the adaptive step shrank below the floating-point "
    "resolution of t",
    "non-finite values in state": "the state became non-finite (NaN or inf)",
    "max_num_steps exceeded": "too many steps",
}

FIX_ADAPTIVE = (
    "Fix: check the parameters and initial state of the named samples (a finite-time blow-up "
    "cannot be integrated through); if the problem is stiff, loosen rtol/atol or integrate "
    "with a fixed-step method ('rk4' with a small step_size) to see where it goes wrong; "
    "shorten the time span if the blow-up is genuine."
)
FIX_FIXED = (
    "Fix: use a smaller step_size, or an adaptive method such as 'dopri5' that controls the "
    "error; check the parameters and initial state of the named samples (a finite-time "
    "blow-up cannot be integrated through)."
)
FIX_MAX_STEPS = (
    "Fix: raise max_steps, loosen rtol/atol, or check the named samples for stiff or fast "
    "dynamics (their state changes fastest relative to the tolerance)."
)


def torchdiffeq_failure(exc: BaseException) -> str | None:
    """What a torchdiffeq exception means, or None if it is not a known solver failure."""
    text = str(exc)
    for key, meaning in _TORCHDIFFEQ_FAILURES.items():
        if key in text:
            return meaning
    return None


def culprits(y: Tensor, dy: Tensor | None, rtol: float, atol: float) -> tuple[list[int], str]:
    """Samples to blame from the last evaluated state ``y`` and rate ``dy`` (both (B, *S)).

    Non-finite state or rate first; otherwise the sample whose rate is largest relative to
    ``atol + rtol * |y|`` (the one the step-size control is fighting).
    """
    with torch.no_grad():
        B = y.shape[0]
        yf = y.detach().reshape(B, -1)
        bad = ~torch.isfinite(yf).all(dim=1)
        if dy is not None:
            df = dy.detach().reshape(B, -1)
            bad |= ~torch.isfinite(df).all(dim=1)
        if bool(bad.any()):
            return torch.nonzero(bad).flatten().tolist(), "non-finite state or rate"
        if dy is None:
            return [], ""
        scaled = (df.abs() / (atol + rtol * yf.abs())).amax(dim=1)
        b = int(torch.argmax(scaled))
        return [b], f"fastest-changing state: max |dy/dt| = {float(df[b].abs().max()):.3g}"


def raise_solver_error(
    what: str, meaning: str, samples: list[int], why: str, time: float | None, fix: str, cause
):
    at = "" if time is None else f" at t = {time:.6g}"
    who = f"sample(s) {_fmt_samples(samples)}" if samples else "no single sample could be blamed"
    detail = f" ({why})" if why else ""
    raise SolverError(
        f"{what} failed{at}: {meaning}. Failing {who}{detail}. {fix}",
        samples=samples,
        time=time,
    ) from cause


def scan_outputs(values: Tensor, grid: TimeGrid, what: str, fix: str):
    """Raise SolverError if any output entry (N, *S) is non-finite: names each sample's first."""
    with torch.no_grad():
        N = values.shape[0]
        ok = torch.isfinite(values.detach().reshape(N, -1)).all(dim=1)
        if bool(ok.all()):
            return
        bad = torch.nonzero(~ok).flatten()
        # Caller order is sample-major and time-increasing: the first bad entry of a sample
        # is the first occurrence of that sample in ``bad``.
        bad_samples = grid.sample[bad]
        keep = torch.ones_like(bad_samples, dtype=torch.bool)
        keep[1:] = bad_samples[1:] != bad_samples[:-1]
        first_bad = bad[keep]
        samples = grid.sample[first_bad].tolist()
        times = grid.times[first_bad].tolist()
        prev = [
            None if int(k) == 0 or int(grid.sample[k - 1]) != s else float(grid.times[k - 1])
            for k, s in zip(first_bad.tolist(), samples)
        ]
    k = min(range(len(samples)), key=lambda j: times[j])
    since = "" if prev[k] is None else f" (finite at t = {prev[k]:.6g})"
    per = ", ".join(f"sample {s} from t = {tt:.6g}" for s, tt in list(zip(samples, times))[:5])
    raise SolverError(
        f"{what} produced non-finite values (NaN or inf) first at t = {times[k]:.6g}{since}: "
        f"{per}{' ...' if len(samples) > 5 else ''}. Failing sample(s) {_fmt_samples(samples)}. "
        f"{fix}",
        samples=samples,
        time=times[k],
    )
