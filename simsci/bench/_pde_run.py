"""Step two of the PDE benchmark: run a :class:`PDEBenchSpec`.

The initial fields (drawn once at the reference grid, band-limited), the plan of
solver runs (steps beyond a stepper's stability limit recorded, not run), the reference
and its accuracy floor, then the timed runs of the solvers, the operator checkpoints
and the peers, all on the same fields and output times."""

from __future__ import annotations

import math
import time

import torch

from simsci._device import synchronize
from simsci.bench._pde_problem import (
    FLOOR_FACTOR,
    PDEBenchProblem,
    _batch_entry,
    _timed_runs,
    as_resolution,
    effective_step,
    res_label,
)
from simsci.bench._pde_spec import PDEBenchSpec, _model_resolution
from simsci.bench._restrict import _band_limit

__all__ = ["make_problem", "plan_runs", "reference", "run_all"]


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def make_problem(spec: PDEBenchSpec) -> tuple[PDEBenchProblem, object, str]:
    """The shared initial fields (seeded, at the reference grid, low-passed below the
    coarsest grid's Nyquist mode when periodic): ``(problem, reference system, note)``."""
    from simsci import systems

    cls = systems.SYSTEMS[spec.problem]
    ref_res, coarsest = spec.ref_resolution, spec.coarsest
    ref_system = systems.get(spec.problem, resolution=ref_res, **spec.params)
    generator = torch.Generator().manual_seed(int(spec.seed))
    u0 = ref_system.sample_initial(spec.n, generator=generator, dtype=torch.float64)
    if spec.periodic:
        u0 = _band_limit(u0, list(range(1, 1 + spec.ndim)), [c // 2 for c in coarsest])
        ic_note = (
            f"{ref_system.ic} fields drawn at {res_label(ref_res)} (seed {spec.seed}), "
            f"low-passed below the Nyquist mode of the coarsest grid {res_label(coarsest)} "
            "(exponential filter, order 8)"
        )
    else:
        ic_note = (
            f"{ref_system.ic} fields drawn at the reference grid {res_label(ref_res)} (seed "
            f"{spec.seed}); coarser grids take every k-th node"
        )
    channel_names = list(cls.channel_names)
    scored = list(spec.setup.channels) if spec.setup.channels else channel_names
    prob = PDEBenchProblem(
        name=spec.problem,
        params=spec.params,
        steady=spec.steady,
        periodic=spec.periodic,
        ndim=spec.ndim,
        channels=[channel_names.index(c) for c in scored],
        times=spec.times,
        device=spec.device,
        dtype=spec.dtype,
        n=spec.n,
        repeat=spec.repeat,
        batches=spec.batches,
        ref_resolution=ref_res,
        u0_ref=u0.to(spec.device),
    )
    return prob, ref_system, ic_note


def plan_runs(spec: PDEBenchSpec, prob: PDEBenchProblem) -> tuple[list[tuple], float | None]:
    """``[(method, resolution, dt_requested, h, status, stable limit, dt spec)]`` and the
    reference step: half the smallest step of the reference method (of any method when
    it is not run), at most the setup's ``reference_dt``. The other methods are lower
    order or stability-limited: their small steps buy stability, not an accuracy the
    reference must exceed."""
    plan = []
    for method in spec.methods:
        for res in spec.resolutions:
            system = prob.system(res)
            u0_res = prob.initial(res, torch.float64)
            limit = math.inf if spec.steady else system.stable_dt(None, method, u0=u0_res.cpu())
            for step in spec.dt_map[method]:
                dt = step
                if isinstance(step, str):  # "F*stable": a fraction of the stability limit
                    dt = float(step.split("*")[0]) * limit
                h = None if spec.steady else effective_step(spec.times, dt)
                status = "unstable" if h is not None and h > limit else "ok"
                plan.append((method, res, dt, h, status, limit, step))
    if spec.steady:
        return plan, None
    steps = [p[3] for p in plan if p[4] == "ok" and p[0] == spec.ref_method]
    steps = steps or [p[3] for p in plan if p[4] == "ok"] or [spec.t_end / spec.setup.frames]
    ref_dt = min(steps) / 2
    if spec.setup.reference_dt is not None:
        ref_dt = min(ref_dt, spec.setup.reference_dt)
    return plan, ref_dt


def reference(spec: PDEBenchSpec, prob: PDEBenchProblem, system, ref_dt) -> dict:
    """Compute the reference trajectories and estimate their accuracy (the floor)."""
    from simsci.systems import PDE_STEPPERS

    method, ref_res = spec.ref_method, spec.ref_resolution
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
    # Richardson factor of the time error: the reference stepper's declared order
    time_order = PDE_STEPPERS[method].order if method in PDE_STEPPERS else 4
    space_order = spec.setup.space_order
    estimate = max(
        self_error.get("dt_doubled", 0.0) / (2**time_order - 1),
        self_error["resolution_halved"] / (2**space_order - 1),
    )
    eps = torch.finfo(prob.dtype).eps
    prob.floor = max(estimate, 100 * eps)
    return {
        "method": method,
        "resolution": res_label(ref_res),
        "dt": ref_dt,
        "dtype": "float64",
        "seconds": seconds,
        "self_error": self_error,
        "error_estimate": estimate,
        "floor": prob.floor,
        "floor_rule": (
            f"max(dt_doubled / {2**time_order - 1}, resolution_halved / "
            f"{2**space_order - 1}, 100 eps({_dtype_name(prob.dtype)})); runs below "
            f"{FLOOR_FACTOR:g} x floor are not scored"
        ),
        "why": "the most accurate method of the system, float64, at reference_factor x the "
        "finest simsci grid (at least every peer's finest) and half the smallest step of "
        "that method in the run",
    }


# ----------------------------------------------------------------------------- runs
def run_all(spec: PDEBenchSpec, prob: PDEBenchProblem, plan, say) -> list[dict]:
    """Every run entry: the solvers' (in plan order), the models', the peers'."""
    runs = []
    for method, res, dt, h, status, limit, step in plan:
        entry = {
            "solver": f"simsci:{method}",
            "family": "simsci",
            "method": method,
            "resolution": res_label(res),
            "dt": h,
            "dt_requested": dt,
        }
        if isinstance(step, str):
            entry.update(dt_rule=f"{step.split('*')[0]} x stable_dt", stable_dt=limit)
        if status == "unstable":
            entry.update(
                status="unstable", stable_dt=limit, error=None, error_all=None,
                error_max=None, seconds_per_trajectory=None, scored=False,
                note=f"step {h:.3g} > stable limit {limit:.3g} of the explicit method",
            )  # fmt: skip
            runs.append(entry)
            say(f"  simsci:{method:11s} {_res_str(res_label(res)):>10} dt={h:.3g}: unstable")
            continue
        results = _timed_runs(
            prob,
            lambda u, res=res, method=method, dt=dt: prob.simulate(res, method, dt, u),
            prob.initial(res),
            res,
        )
        for b, result in results:
            runs.append(_batch_entry(entry, b, prob.n, result))
            say(progress_line(runs[-1]))
    for name, model in spec.models:
        model_res = _model_resolution(model)
        for res in [as_resolution(model_res, spec.ndim)] if model_res else spec.resolutions:
            entry = {
                "solver": f"model:{name}",
                "family": "model",
                "method": type(model).__name__,
                "resolution": res_label(res),
                "dt": None,
                "dt_requested": None,
            }
            for b, result in _model_run(prob, model, res):
                runs.append(_batch_entry(entry, b, prob.n, result))
                say(progress_line(runs[-1]))
    for peer, status, grids in spec.peers:
        if status.get("included"):
            for entry in peer.runs(prob, grids):
                runs.append(entry)
                say(progress_line(entry))
    return runs


def _model_run(prob: PDEBenchProblem, model, res) -> list[tuple[int, dict]]:
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


def progress_line(entry: dict) -> str:
    head = f"  {entry['solver']:18s} {entry['resolution']!s:>10}"
    if entry.get("dt") is not None:
        head += f" dt={entry['dt']:.3g}"
    if entry.get("tolerance") is not None:
        head += f" tol={entry['tolerance']:.0e}"
    if entry["status"] != "ok":
        return f"{head}: {entry['status']}"
    return f"{head}: error {entry['error']:.2e}, {entry['seconds_per_trajectory']:.3g} s/traj"


def _res_str(res) -> str:
    return "x".join(str(r) for r in res) if isinstance(res, (list, tuple)) else str(res)
