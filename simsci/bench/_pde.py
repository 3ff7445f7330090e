r"""The PDE-solver benchmark: accuracy against cost, speed-ups at matched accuracy.

``pde_benchmark("burgers")`` runs every solver method of a registered PDE system
(``kind == "field"``) over a grid of resolutions and step sizes, scores each run against
a fine reference solution and times it, extracts the accuracy-cost Pareto front of each
solver and compares solvers *at equal error*. Trained operator checkpoints and peers
(other packages, handed in by ``benchmarks/``: py-pde in
``benchmarks/pypde_peer.py``) run side by side on the same problem and the same
initial conditions.

The function is four steps, each its own module: check the arguments and build a
:class:`~simsci.bench._pde_spec.PDEBenchSpec` (:mod:`simsci.bench._pde_spec`, with the
default grids of :mod:`simsci.bench._pde_setups`), run it (:mod:`simsci.bench._pde_run`:
initial fields, reference, solver / model / peer runs), report
(:mod:`simsci.bench._pde_report`: scored runs, fronts and speed-ups of
:mod:`simsci.bench._fronts`, the table, the plot).

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

**Reference.** The most accurate method of the system (the registered stepper of
highest order, spectral first: ``etdrk4``, spectral in space, fourth order in time,
linear part exact; ``cg`` at tolerance 1e-11 for Darcy), in float64, at
``reference_factor`` (default 2) times the finest resolution of the simsci runs and
models (and at least every peer's finest grid), with half the smallest ``etdrk4``
step of the run (at most ``reference_dt``). Only the reference method's steps set it:
the other methods are lower order (IMEX) or take small steps for stability (RK4,
peers), not for accuracy, and halving their steps would multiply the reference's cost
for nothing; the floor below checks the choice. Its own accuracy is estimated in the
same run from two cheaper solves: A at twice its step (time: ``dt_doubled`` =
:math:`\|A - ref\|`, divided by :math:`2^4 - 1`, Richardson for the stepper's declared
order 4) and B at half
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
(``batches`` adds curves timed in smaller chunks, e.g. ``[batch 1]``), with the spread
of the ``repeat`` calls beside it (``seconds_min``, ``seconds_max``). A peer times
its runs through the same helper (:meth:`PDEBenchProblem.timed`: a scored warm-up
call, then the median of ``repeat``); py-pde integrates one trajectory at a time.

**Steps.** Each output interval is split into equal steps no larger than the requested
``dt`` (``simulate``'s rule); ``dt`` in the results is the step taken, ``dt_requested``
the one asked for. By default a stepper with a step limit (the explicit ``rk4``) runs
at fractions (0.9, 0.45) of its stability limit at each resolution
(``PDEBenchSetup.stable_fractions``): its error at a resolution is spatial once it is
stable, and a fixed list of steps would spend the run
on redundant small steps at coarse grids.

**Skipped configurations.** An explicit method whose (output-adjusted) step exceeds
:meth:`PDESystem.stable_dt` at that resolution and initial condition is not run and is
recorded with ``status="unstable"`` and the limit; a run that blows up anyway (the
nonlinear terms grow) is recorded with ``status="blew_up"``.

**Pareto front and matched accuracy.** A run is on its solver's front when no other run
of that solver is both faster and more accurate (by more than 1%: equal errors to a few
digits are the same accuracy), by the *median* times: one slow call on a shared machine
does not drop a run from the front. Where a run's spread crosses its front (it would be
on it at one end of its spread and off it at the other, :func:`front_crossings`), the
speed-ups that rest on that front are flagged ``unstable`` with the runs named, and
each speed-up carries its range over the spreads (``geomean_spread``). The speed-up of
solver A over solver B is :math:`t_B(e)/t_A(e)` at equal error :math:`e`, where
:math:`t_S(e)` interpolates :math:`\log t` piecewise linearly in :math:`\log e` along S's
front; it is reported at
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

Peers (``peers``)
-----------------
The library calls no other package (shared/design/architecture.md: peers are called
only from ``benchmarks/``). A peer is an object following :class:`PDEPeer`: its
``family`` name, ``status(problem)`` (included, or why not), ``grids(problem, tested)``
(its resolutions, which join the reference grid and the initial fields' band limit)
and ``runs(bench, grids)``, which solves ``bench.initial(resolution)`` at
``bench.times`` and scores and times each configuration with ``bench.timed``
(:class:`PDEBenchProblem`). Its runs form one curve per solver (``"FAMILY:..."``) and,
with several solvers, the union ``"FAMILY (best)"``; a family's curves are not compared
with each other. py-pde (RK4 and RKF45 on its second-order finite differences) is such
a peer: ``benchmarks/pypde_peer.py``, run by ``benchmarks/bench_pde_pypde.py``.

Design choices the task left open, and why
------------------------------------------
- Default grids (:func:`default_setup`) are per problem, sized for two CPU cores (a
  1D problem's default run well under a minute), with a ``quick`` variant for smoke runs
  and the CLI's ``--quick``; a PDE without an entry gets generic defaults derived from
  its class attributes and the stepper registry.
- ``t_end`` is shorter than the systems' data-generation defaults (chaotic
  Kuramoto-Sivashinsky: 10 time units, so errors are not all O(1)). Gray-Scott runs at
  4x Pearson's diffusivities (patterns twice as wide) so that 64-128 grids resolve it on
  two cores; the parameters are recorded and ``params=`` overrides them.
- Where two fronts do not overlap in error, the result says so instead of quoting a
  speed-up.
- The reference runs in float64 whatever ``dtype`` the runs use; timing excludes
  one-off setup (ETDRK4 coefficients, a peer's compilation), which a data-generation
  run pays once.
- The machine's load average is recorded with each result (``settings``): timings on a
  shared machine are not comparable to those on an idle one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence

import torch

from simsci.bench._fronts import front_crossings, matched_error, matched_speedup, pareto_front
from simsci.bench._pde_problem import PDEBenchProblem, PDEPeer
from simsci.bench._pde_report import format_table, plot_pareto, report
from simsci.bench._pde_run import make_problem, plan_runs, reference, run_all
from simsci.bench._pde_setups import PDEBenchSetup, default_setup
from simsci.bench._pde_spec import PDEBenchSpec, build_spec
from simsci.bench._restrict import restrict_periodic

__all__ = [
    "PDEBenchSetup",
    "PDEBenchSpec",
    "PDEBenchProblem",
    "PDEPeer",
    "default_setup",
    "pde_benchmark",
    "pareto_front",
    "front_crossings",
    "matched_speedup",
    "matched_error",
    "restrict_periodic",
    "format_table",
    "plot_pareto",
]


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
    peers: Sequence[PDEPeer] = (),
    seed: int = 0,
    repeat: int = 3,
    quick: bool = False,
    levels: int = 3,
    batches: Sequence[int] | None = None,
    log: Callable[[str], None] | bool | None = None,
    pypde=None,
) -> dict:
    """Benchmark the solvers of one registered PDE (module docstring: the method).

    ``problem``: a registered system of kind ``"field"``. ``methods``: the system's
    methods to run (default: all). ``resolutions``: points per axis (default: the
    problem's :func:`default_setup`, ``quick`` for smoke-run sizes). ``dts``: step sizes
    for every method, or a mapping method -> step sizes (default: per problem; Darcy
    has none). ``n``: trajectories (one batch). ``t_end``: final time (output every
    ``t_end / frames``). ``params``: PDE parameters (defaults of the system).
    ``device``/``dtype``: of the runs (the reference is float64 on ``device``).
    ``models``: checkpoint paths or modules following the rollout protocol. ``peers``:
    :class:`PDEPeer` objects (built in ``benchmarks/``; py-pde:
    ``benchmarks/pypde_peer.py``). ``repeat``: timed calls (median).
    ``levels``: error levels of the matched-accuracy speed-ups. ``batches``: batch sizes
    at which the simsci solvers and models are timed (default ``(n,)``: the ``n``
    trajectories in one call); a size ``b < n`` solves them in chunks of ``b`` and adds
    the curve ``"simsci:METHOD[batch b]"`` (same errors, its own times). ``log``: a
    callable for progress lines (True: print to stderr). ``pypde``: kept for old calls:
    False/"auto"/None run no peer (the library never does); True is an error naming
    where the py-pde comparison lives.

    Returns a JSON-able dict: ``problem``, ``params``, ``settings``, ``reference``,
    ``runs`` (each ``solver``, ``family``, ``method``, ``resolution``, ``dt``,
    ``error``, ``error_all``, ``error_max``, ``seconds_per_trajectory``, ``status``,
    ``scored``, ...), ``fronts`` (solver -> front runs, fastest first), ``speedups``
    (matched-accuracy comparisons per solver pair) and ``peers`` (family -> included
    or why not).
    """
    say = _log_to(log)
    spec = build_spec(
        problem, methods=methods, resolutions=resolutions, dts=dts, n=n, t_end=t_end,
        params=params, device=device, dtype=dtype, models=models, peers=peers, pypde=pypde,
        seed=seed, repeat=repeat, quick=quick, levels=levels, batches=batches,
    )  # fmt: skip
    prob, ref_system, ic_note = make_problem(spec)
    plan, ref_dt = plan_runs(spec, prob)
    label = "x".join(map(str, spec.ref_resolution))
    say(
        f"{spec.problem}: reference {spec.ref_method} at {label}"
        + (f", dt={ref_dt:.4g}" if ref_dt is not None else "")
    )
    ref = reference(spec, prob, ref_system, ref_dt)
    say(f"{spec.problem}: reference done in {ref['seconds']:.1f} s, floor {ref['floor']:.2e}")
    runs = run_all(spec, prob, plan, say)
    return report(spec, prob, ref_system.params, ref, runs, ic_note)
