"""What a benchmark run sees: :class:`PDEBenchProblem` (systems, initial fields,
output times, scoring against the reference, timing) and the peer protocol
:class:`PDEPeer`.

A peer (another package solving the same problem) is never imported by the library:
``benchmarks/`` builds one (``benchmarks/pypde_peer.py``: py-pde) and hands it to
:func:`simsci.bench.pde_benchmark` (``peers=[...]``). It runs on the problem's own
initial fields and output times, through :meth:`PDEBenchProblem.timed`, so it is scored
and timed like the library's solvers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import torch

from simsci.bench._restrict import restrict_periodic
from simsci.bench._timing import time_call
from simsci.errors import SolverError

__all__ = ["PDEBenchProblem", "PDEPeer"]

#: runs below this many floors are at the reference's accuracy (not scored)
FLOOR_FACTOR = 2.0


@dataclasses.dataclass
class PDEBenchProblem:
    """Everything a run needs: the system factory, times, initial fields, reference.

    ``u0_ref`` ``(n, *ref_grid, C)`` float64 on ``device``: the initial fields on the
    reference grid, restricted exactly to any tested grid by :meth:`initial`.
    ``reference`` ``(n, T, *ref_grid, C)`` and ``floor`` are set once the reference is
    computed. ``times`` the output times (``t[0]`` the time of ``u0``).
    """

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

    # ------------------------------------------------------------ for peers too
    def step_taken(self, dt: float) -> float:
        """The step a fixed-step solver takes for a requested ``dt``: the largest output
        interval split into equal steps no larger than ``dt`` (``simulate``'s rule)."""
        return effective_step(self.times, dt)

    def timed(self, fn, resolution) -> dict:
        """Call ``fn()`` (all ``n`` trajectories, ``(n, T, *grid, C)``) once, score it,
        then time ``repeat`` more calls: the result fields of a run (``status``,
        ``error``, ``error_all``, ``error_max``, ``seconds_per_trajectory``, ...)."""
        return _timed_run(self, fn, resolution)

    @staticmethod
    def failed(status: str, note: str | None = None) -> dict:
        """The result fields of a run that did not finish (``status`` e.g. "failed")."""
        return _failed(status, note)

    @staticmethod
    def label(resolution) -> int | list[int]:
        """A resolution as the results write it (an int in 1D, a list in 2D)."""
        return res_label(tuple(resolution))


class PDEPeer:
    """The protocol of a peer solver in :func:`simsci.bench.pde_benchmark` (``peers=``).

    ``family``: its name in the results (solvers ``"FAMILY:..."``). :meth:`status`:
    whether it can run ``problem`` (``{"included": True, ...}``, or ``False`` with a
    ``"reason"``). :meth:`grids`: the resolutions it runs at (they take part in the
    reference grid and the initial fields' band limit). :meth:`runs`: its run entries on
    those grids (checked, as tuples), each with ``solver``, ``family``, ``method``,
    ``resolution``, ``dt`` (or None) and the result fields of
    :meth:`PDEBenchProblem.timed`.
    """

    family: str = "peer"

    def status(self, problem: str) -> dict:
        raise NotImplementedError

    def grids(self, problem: str, tested: Sequence[tuple[int, ...]]) -> list:
        return list(tested)

    def runs(self, bench: PDEBenchProblem, grids: list[tuple[int, ...]]) -> list[dict]:
        raise NotImplementedError


# ------------------------------------------------------------------------- helpers
def as_resolution(value, ndim: int) -> tuple[int, ...]:
    items = (value,) * ndim if isinstance(value, (int, np.integer)) else tuple(value)
    if len(items) != ndim or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 8 for v in items
    ):
        raise ValueError(
            f"a resolution must be an integer >= 8 or {ndim} such integers, got {value!r}"
        )
    return tuple(int(v) for v in items)


def res_label(res: tuple[int, ...]):
    return res[0] if len(res) == 1 else list(res)


def effective_step(times: np.ndarray, dt: float) -> float:
    """The step ``simulate`` takes: the largest output interval split into equal steps."""
    gaps = np.diff(times)
    steps = np.maximum(1, np.ceil(gaps / dt * (1.0 - 1e-12)))
    return float((gaps / steps).max())


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


def _timed_run(prob: PDEBenchProblem, fn, res) -> dict:
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
    return {"status": "ok", **scores, **_per_trajectory(timing, prob.n)}


def _per_trajectory(timing, n: int) -> dict:
    """A run's time per trajectory: the median of its repeats (what the fronts are
    built from) and their spread, fastest to slowest (what may cross a front)."""
    return {
        "seconds_per_trajectory": timing.median / n,
        "seconds_min": timing.minimum / n,
        "seconds_max": timing.maximum / n,
        "seconds_all": timing.as_dict(),
    }


def _timed_runs(prob: PDEBenchProblem, solve, u0: torch.Tensor, res) -> list[tuple[int, dict]]:
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
        results.append((b, {"status": "ok", **scores, **_per_trajectory(timing, prob.n)}))
    return results


def _batch_entry(entry: dict, b: int, n: int, result: dict) -> dict:
    out = {**entry, "batch": b, **result}
    if b != n:
        out["solver"] = f"{entry['solver']}[batch {b}]"
    return out
