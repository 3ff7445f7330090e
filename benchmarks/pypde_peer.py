r"""py-pde as a peer of :func:`simsci.bench.pde_benchmark` (``peers=[PyPDEPeer()]``).

The library calls no other package (shared/design/architecture.md: peers are called
only from ``benchmarks/``); this module is the py-pde side of the PDE-solver benchmark,
used by ``bench_pde_pypde.py`` (the >= 10x claim, and any expressible PDE side by side)
and ``bench_pde.py`` (every PDE). Not a script itself.

Where ``import pde`` works (the optional extra ``compare``) and the problem has an
expression form (:data:`PYPDE_EQUATIONS`: advection, heat, Burgers, KdV,
Kuramoto-Sivashinsky, Allen-Cahn, Gray-Scott; Navier-Stokes needs a Poisson solve and
Darcy is steady, so they are left out with the reason recorded), py-pde's ``PDE`` class
runs on the same periodic box and resolutions, with the same initial values (the
benchmark's band-limited fields, :meth:`PDEBenchProblem.initial`), with its classical
RK4 at fixed steps (``py-pde:rk4``) and its adaptive Runge-Kutta-Fehlberg 4(5) at a few
tolerances (``py-pde:rkf45``). py-pde stores values at cell centres
:math:`(j + 1/2)\Delta x`; every benchmarked PDE is translation invariant, so the same
values there are the same problem shifted by :math:`\Delta x/2` and the outputs compare
point by point. Its second-order finite differences are what they are: part of the
comparison. It integrates one trajectory at a time (its stepping functions are compiled
by numba for one field); the compilation happens when the stepper is built and is
excluded from the timing, and a scored warm-up run precedes the timed ones
(:meth:`PDEBenchProblem.timed`).

Compiling is most of a short run's wall time (numba: ~5-25 s per stepper on two
cores, against milliseconds of stepping), so nothing is compiled twice in a process:
one ``pde.PDE``, grid and field per equation and grid (py-pde caches the compiled
right-hand side on them, so every solver on that grid shares it), one stepper per
solver configuration (:data:`_COMPILED`), reused across the trajectories, the timed
calls and later benchmark calls with the same grid and equation.

py-pde's default grids (:data:`PYPDE_GRIDS`) are finer than simsci's: its second-order
differences need them to reach the same errors; where the fronts still do not overlap,
the result says so instead of quoting a speed-up.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from simsci.bench import PDEBenchProblem, PDEPeer

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
PYPDE_MISSING = {
    "navier_stokes_2d": "py-pde's expression PDE has no stream-function (Poisson) solve for "
    "the vorticity form",
    "darcy": "darcy is a steady elliptic problem; py-pde's time steppers do not apply",
}


#: compiled py-pde objects of this process: (problem, equation, domain, grid) ->
#: {"eq", "grid", "state", "steppers": {(kind, dt or tolerance): (solver, stepper)}}
_COMPILED: dict[tuple, dict] = {}


def _grids(resolutions, dts=(), tolerances=()):
    return {"resolutions": resolutions, "dts": dts, "tolerances": tolerances}


#: per problem (full, quick): py-pde's resolutions, fixed RK4 steps and RKF45 tolerances
#: beside simsci's default setups (simsci.bench.default_setup), sized for two CPU cores
PYPDE_GRIDS: dict[str, tuple[dict, dict]] = {
    "advection": (
        _grids((128, 256, 512), (1e-3,), (1e-6,)),
        _grids((256, 512), (5e-4,), (1e-6,)),
    ),
    "heat": (
        _grids((64, 128, 256, 512), (1e-4,), (1e-6,)),
        _grids((256, 512), (1e-4,), (1e-6,)),
    ),
    "burgers": (
        _grids((128, 256, 512, 1024), (), (1e-6,)),
        _grids((256, 512), (1e-4,), (1e-6,)),
    ),
    "kdv": (_grids((256, 512), (), (1e-6,)), _grids((512, 1024), (), (1e-6,))),
    "kuramoto_sivashinsky": (_grids((256, 384), (), (1e-6,)), _grids((384, 512), (), (1e-6,))),
    "allen_cahn": (
        _grids((64, 128, 256, 512), (2e-3,), (1e-6,)),
        _grids((128, 256), (), (1e-6,)),
    ),
    "gray_scott": (_grids((64, 128), (), (1e-6,)), _grids((64,), (), (1e-6,))),
}


class PyPDEPeer(PDEPeer):
    """py-pde on the benchmark's problem (module docstring).

    ``resolutions``, ``dts`` (fixed RK4 steps) and ``tolerances`` (adaptive RKF45)
    override :data:`PYPDE_GRIDS` (``quick``: its smoke-run sizes); a problem without an
    entry runs at the tested resolutions with no solver configurations unless given.
    """

    family = "py-pde"

    def __init__(
        self,
        *,
        quick: bool = False,
        resolutions: Sequence | None = None,
        dts: Sequence[float] | None = None,
        tolerances: Sequence[float] | None = None,
    ):
        self.quick = quick
        self.resolutions = None if resolutions is None else list(resolutions)
        self.dts = None if dts is None else tuple(float(d) for d in dts)
        self.tolerances = None if tolerances is None else tuple(float(t) for t in tolerances)

    def _table(self, problem: str) -> dict:
        entry = PYPDE_GRIDS.get(problem)
        return _grids(None) if entry is None else entry[1 if self.quick else 0]

    def status(self, problem: str) -> dict:
        if problem not in PYPDE_EQUATIONS:
            reason = PYPDE_MISSING.get(problem, f"no py-pde expression for {problem!r}")
            return {"included": False, "reason": reason}
        try:
            import pde
        except ImportError as exc:
            return {
                "included": False,
                "reason": f"py-pde is not installed ({exc}); pip install 'simsci[compare]'",
            }
        return {
            "included": True,
            "version": getattr(pde, "__version__", "?"),
            "equation": PYPDE_EQUATIONS[problem],
        }

    def grids(self, problem: str, tested) -> list:
        if self.resolutions is not None:
            return self.resolutions
        return list(self._table(problem)["resolutions"] or tested)

    def runs(self, bench: PDEBenchProblem, grids) -> list[dict]:
        table = self._table(bench.name)
        dts = table["dts"] if self.dts is None else self.dts
        tolerances = table["tolerances"] if self.tolerances is None else self.tolerances
        configs = [("rk4", dt, None) for dt in dts] + [("rkf45", None, t) for t in tolerances]
        return [self._run(bench, res, *config) for res in grids for config in configs]

    @staticmethod
    def _compiled(bench: PDEBenchProblem, res) -> dict:
        """The equation, grid and field of a problem on a grid: built once per process
        (py-pde compiles the right-hand side for them once, :data:`_COMPILED`)."""
        import pde

        system = bench.system(res)
        exprs = {
            c: e.format(**{k: repr(float(v)) for k, v in system.params.items()})
            for c, e in PYPDE_EQUATIONS[bench.name].items()
        }
        key = (bench.name, tuple(exprs.items()), tuple(map(float, system.domain)), tuple(res))
        if key not in _COMPILED:
            channel_names = list(system.channel_names)
            grid = pde.CartesianGrid([[0.0, L] for L in system.domain], list(res), periodic=True)
            zero = np.zeros(tuple(res))
            if len(channel_names) == 1:
                state = pde.ScalarField(grid, zero)
            else:
                state = pde.FieldCollection(
                    [pde.ScalarField(grid, zero, label=name) for name in channel_names]
                )
            _COMPILED[key] = {
                "eq": pde.PDE(exprs), "grid": grid, "state": state, "steppers": {},
                "channels": len(channel_names),
            }  # fmt: skip
        return _COMPILED[key]

    def _run(self, bench: PDEBenchProblem, res, kind: str, dt, tol) -> dict:
        from pde.solvers import RungeKuttaSolver

        compiled = self._compiled(bench, res)
        eq, state, channels = compiled["eq"], compiled["state"], compiled["channels"]
        u0 = bench.initial(res, torch.float64).cpu().numpy()  # (n, *grid, C)
        entry = {
            "solver": f"py-pde:{kind}",
            "family": "py-pde",
            "method": "runge-kutta (RK4, fixed step)"
            if kind == "rk4"
            else "runge-kutta (RKF45, adaptive)",
            "resolution": bench.label(res),
            "batch": 1,
        }
        if kind == "rk4":
            h = bench.step_taken(dt)
            entry.update(dt=h, dt_requested=dt)
            dt_init, config = h, (kind, h)
        else:
            entry.update(dt=None, dt_requested=None, tolerance=tol)
            dt_init, config = 1e-3 * float(np.diff(bench.times).min()), (kind, tol)
        if config not in compiled["steppers"]:  # numba compiles here, once per config
            solver = RungeKuttaSolver(eq, adaptive=kind == "rkf45", tolerance=tol or 1e-4)
            compiled["steppers"][config] = (solver, solver.make_stepper(state, dt=dt_init))
        solver, stepper = compiled["steppers"][config]
        stats = solver.info.get("dt_statistics")
        before = (getattr(stats, "count", 0), getattr(stats, "mean", 0.0))

        def run_all():
            out = np.empty((u0.shape[0], len(bench.times), *u0.shape[1:]))
            for b in range(u0.shape[0]):
                state.data[...] = np.moveaxis(u0[b], -1, 0).reshape(state.data.shape)
                out[b, 0] = u0[b]
                solver.info["dt"] = dt_init
                for i in range(len(bench.times) - 1):
                    stepper(state, float(bench.times[i]), float(bench.times[i + 1]))
                    data = state.data.reshape(channels, *u0.shape[1:-1])
                    out[b, i + 1] = np.moveaxis(data, 0, -1)
            return torch.from_numpy(out).to(bench.device)

        try:
            with np.errstate(all="ignore"):
                result = bench.timed(run_all, res)
        except RuntimeError as exc:  # py-pde's adaptive stepper: dt below dt_min
            result = bench.failed("failed", str(exc)[:200])
        if kind == "rkf45" and result["status"] == "ok" and stats is not None:
            # the mean step of this run's calls (the statistics outlive a cached stepper)
            count = int(stats.count) - before[0]
            if count > 0:
                entry["dt_mean"] = (stats.count * stats.mean - before[0] * before[1]) / count
        entry.update(result)
        return entry
