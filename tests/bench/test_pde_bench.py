"""The PDE-solver benchmark: fronts, matched-accuracy interpolation, restriction, real
runs on small grids, the operator plug-in and the CLI (peers: test_pde_peers.py)."""

import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from simsci.bench import (
    default_setup,
    format_table,
    front_crossings,
    matched_error,
    matched_speedup,
    pareto_front,
    pde_benchmark,
    plot_pareto,
    restrict_periodic,
)
from simsci.cli import main
from simsci.errors import UnknownNameError
from simsci.systems import SYSTEMS, get_stepper

PDES = sorted(name for name, cls in SYSTEMS.items() if cls.kind == "field")


# ------------------------------------------------------------------ fronts
def test_pareto_front_keeps_the_non_dominated_points_fastest_first():
    points = [(1e-2, 1.0), (1e-3, 2.0), (5e-3, 3.0), (1e-4, 4.0), (2e-2, 0.5), (1e-4, 5.0)]
    front = pareto_front(points)
    # (5e-3, 3.0) is slower and less accurate than (1e-3, 2.0); (1e-4, 5.0) ties on
    # error but is slower than (1e-4, 4.0)
    assert front == [(2e-2, 0.5), (1e-2, 1.0), (1e-3, 2.0), (1e-4, 4.0)]


def test_pareto_front_treats_errors_within_one_percent_as_equal():
    # two solvers whose error is spatial: equal to 6 digits, the slower one is no gain
    points = [(8.826e-4, 0.0034), (8.8259e-4, 0.0197), (2.2e-4, 0.0207), (2.19e-4, 0.03)]
    assert pareto_front(points) == [(8.826e-4, 0.0034), (2.2e-4, 0.0207)]
    assert len(pareto_front(points, rtol=0.0)) == 4
    with pytest.raises(ValueError, match="rtol"):
        pareto_front(points, rtol=1.0)


def test_pareto_front_of_runs_leaves_out_failed_and_unscored_runs():
    runs = [
        {"error": 1e-2, "seconds_per_trajectory": 1.0, "status": "ok", "scored": True},
        {"error": None, "seconds_per_trajectory": None, "status": "unstable"},
        {"error": 1e-15, "seconds_per_trajectory": 0.1, "status": "ok", "scored": False},
        {"error": 1e-3, "seconds_per_trajectory": 2.0, "status": "ok", "scored": True},
    ]
    assert pareto_front(runs) == [runs[0], runs[3]]


def power_law_front(c, p, errors):
    """t = c e^-p sampled at ``errors``: straight in log-log, so interpolation is exact."""
    return [(e, c * e ** (-p)) for e in errors]


def test_matched_speedup_of_two_power_laws_is_exact():
    a = power_law_front(1e-3, 0.25, np.geomspace(1e-8, 1e-2, 7))
    b = power_law_front(1e-2, 0.5, np.geomspace(1e-5, 1e-1, 5))
    m = matched_speedup(a, b, levels=4)
    # overlap of the error ranges: [1e-5, 1e-2]
    assert m["errors"][0] == pytest.approx(1e-5) and m["errors"][-1] == pytest.approx(1e-2)
    assert len(m["errors"]) == 4
    # t_b / t_a = 10 e^(-1/4)
    expected = [10 * e**-0.25 for e in m["errors"]]
    assert m["speedup"] == pytest.approx(expected, rel=1e-10)
    assert m["geomean"] == pytest.approx(math.exp(np.mean(np.log(expected))), rel=1e-10)
    # the reverse comparison is the reciprocal
    r = matched_speedup(b, a, levels=4)
    assert r["speedup"] == pytest.approx([1 / x for x in expected], rel=1e-10)


def test_matched_error_of_two_power_laws_is_exact():
    # e = (t / c)^(-1/p): at equal t, e_b / e_a = (t/1e-2)^-2 / (t/1e-3)^-4
    a = power_law_front(1e-3, 0.25, np.geomspace(1e-8, 1e-2, 7))
    b = power_law_front(1e-2, 0.5, np.geomspace(1e-5, 1e-1, 5))
    m = matched_error(a, b, levels=3)
    for t, ratio in zip(m["seconds"], m["ratio"]):
        assert ratio == pytest.approx((t / 1e-2) ** -2 / (t / 1e-3) ** -4, rel=1e-10)


def test_matched_speedup_interpolates_between_front_points_in_log_log():
    a = [(1e-2, 1.0), (1e-4, 100.0)]  # t = 1e-2 / e
    b = [(1e-2, 10.0), (1e-4, 1000.0)]
    m = matched_speedup(a, b, levels=3)
    assert m["errors"] == pytest.approx([1e-4, 1e-3, 1e-2])
    assert m["seconds_a"] == pytest.approx([100.0, 10.0, 1.0])
    assert m["speedup"] == pytest.approx([10.0, 10.0, 10.0])


def test_no_overlap_no_speedup():
    a = [(1e-6, 1.0), (1e-8, 2.0)]
    b = [(1e-2, 1.0), (1e-3, 2.0)]
    assert matched_speedup(a, b) is None
    assert matched_error([(1e-3, 1.0)], [(1e-3, 5.0)]) is None
    # a one-point overlap gives one level
    m = matched_speedup([(1e-3, 1.0), (1e-5, 3.0)], [(1e-3, 4.0), (1e-1, 1.0)])
    assert m["errors"] == pytest.approx([1e-3]) and m["speedup"] == pytest.approx([4.0])
    with pytest.raises(ValueError, match="levels must be a positive integer"):
        matched_speedup(a, b, levels=0)


# ------------------------------------------------- medians, spreads, stability
def _run(solver, error, times, n=1, **extra):
    """A run dict timed like the benchmark: median of the repeats, their spread."""
    t = np.asarray(times) / n
    return {
        "solver": solver, "family": solver.split(":")[0], "error": error,
        "seconds_per_trajectory": float(np.median(t)), "seconds_min": float(t.min()),
        "seconds_max": float(t.max()), "status": "ok", "scored": True, **extra,
    }  # fmt: skip


def test_the_front_is_built_from_medians_so_one_slow_call_keeps_a_run_on_it():
    """The coarse run had one slow call (a busy machine): by its minimum or its last
    call it would leave the front; by the median it stays."""
    coarse = _run("a", 1e-2, [0.010, 0.011, 0.300])  # one 30x outlier
    mid = _run("a", 1e-3, [0.050, 0.052, 0.051])
    fine = _run("a", 1e-4, [0.200, 0.210, 0.190])
    assert pareto_front([fine, coarse, mid]) == [coarse, mid, fine]
    # what a single timing (the slow one) would have said: the coarse run drops out
    single = [{**coarse, "seconds_per_trajectory": 0.300}, mid, fine]
    assert pareto_front(single) == [mid, fine]
    # the benchmark's own record: median and spread of time_call's repeats
    from simsci.bench import Timing
    from simsci.bench._pde_problem import _per_trajectory

    rec = _per_trajectory(Timing((0.04, 0.02, 0.6)), 2)
    assert rec["seconds_per_trajectory"] == pytest.approx(0.02)
    assert (rec["seconds_min"], rec["seconds_max"]) == pytest.approx((0.01, 0.3))


def test_front_crossings_are_the_runs_whose_spread_decides_their_membership():
    # (error, median, fastest, slowest)
    a = (1e-2, 1.0, 0.9, 1.1)
    b = (5e-3, 2.0, 1.9, 2.1)
    c = (2e-3, 4.0, 3.8, 4.3)
    # d is less accurate than b and slower by its median, but its fastest call beats
    # b's slowest: the spread crosses the front
    d = (4e-3 * 2, 2.2, 1.5, 2.4)
    assert pareto_front([a, b, c]) == [a, b, c]
    assert front_crossings([a, b, c]) == []
    assert pareto_front([a, b, c, d]) == [a, b, c]
    assert front_crossings([a, b, c, d]) == [d]
    # a tight spread: the same medians, no crossing
    d_tight = (d[0], 2.2, 2.15, 2.25)
    assert front_crossings([a, b, c, d_tight]) == []
    # front points that a more accurate run can overtake within the spreads: c at its
    # slowest (4.3) falls behind e at its fastest (4.0), e at its slowest (6.0) behind
    # f at its fastest (4.5); f, the most accurate, stays on the front either way
    e = (1e-3, 5.0, 4.0, 6.0)
    f = (9e-4, 5.5, 4.5, 6.5)
    assert pareto_front([a, b, c, e, f]) == [a, b, c, e, f]
    assert front_crossings([a, b, c, e, f]) == [c, e]
    # points without a spread (pairs) never cross
    assert front_crossings([(x[0], x[1]) for x in (a, b, c, d)]) == []
    with pytest.raises(ValueError, match="rtol"):
        front_crossings([a], rtol=-0.1)


def test_an_unstable_comparison_is_flagged_and_a_stable_one_not():
    """summarize: the speed-up over a front whose run's spread crosses it is marked
    unstable, names the run, and carries its range over the spreads."""
    from simsci.bench._fronts import summarize

    a = [_run("simsci:x", e, t) for e, t in ((1e-2, [1.0, 1.0, 1.0]), (1e-3, [4.0, 4.1, 3.9]))]
    b = [
        _run("peer:y", 1e-2, [9.0, 10.0, 11.0]),
        _run("peer:y", 1e-3, [90.0, 100.0, 110.0]),
    ]
    stable = summarize({"runs": a + b}, levels=2)
    (sp,) = stable["speedups"]
    assert sp["unstable"] is False and "unstable_runs" not in sp
    assert sp["geomean"] == pytest.approx(math.sqrt(10 * 100 / 4))
    lo, hi = sp["geomean_spread"]
    assert lo < sp["geomean"] < hi
    assert lo == pytest.approx(math.sqrt(9 * 90 / 4.1)) and hi == pytest.approx(
        math.sqrt(11 * 110 / 3.9)
    )
    assert stable["crossings"] == {}
    # a third run of B: off its front by the median, on it at its fastest
    shaky = _run("peer:y", 5e-3, [30.0, 105.0, 120.0], resolution=64)
    unstable = summarize({"runs": a + b + [shaky]}, levels=2)
    (sp,) = unstable["speedups"]
    assert sp["unstable"] is True
    keys = ("resolution", "error", "seconds_per_trajectory", "seconds_min", "seconds_max")
    assert sp["unstable_runs"] == [{"solver": "peer:y", **{k: shaky[k] for k in keys}}]
    assert [r["error"] for r in unstable["fronts"]["peer:y"]] == [1e-2, 1e-3]  # by medians
    assert list(unstable["crossings"]) == ["peer:y"]


# -------------------------------------------------------------- restriction
def trig_poly(x, L):
    return 1.0 + np.sin(2 * np.pi * 3 * x / L) + 0.5 * np.cos(2 * np.pi * 7 * x / L + 0.3)


@pytest.mark.parametrize("fine, coarse", [(96, 48), (96, 32), (96, 40), (64, 24), (48, 18)])
def test_restrict_periodic_evaluates_band_limited_fields_exactly(fine, coarse):
    L = 2.5
    x_f = np.arange(fine) * L / fine
    x_c = np.arange(coarse) * L / coarse
    u = torch.as_tensor(trig_poly(x_f, L))[None, :, None]
    out = restrict_periodic(u, coarse, dims=[1])
    assert out.shape == (1, coarse, 1)
    assert torch.allclose(out[0, :, 0], torch.as_tensor(trig_poly(x_c, L)), atol=1e-12)


def test_restrict_periodic_strides_when_the_size_divides():
    u = torch.randn(2, 64, 32, 3, dtype=torch.float64)  # not band-limited: striding exactly
    out = restrict_periodic(u, (16, 8), dims=[1, 2])
    assert torch.equal(out, u[:, ::4, ::4])
    with pytest.raises(ValueError, match="must be coarser"):
        restrict_periodic(u, 128, dims=[1, 2])


def test_restrict_periodic_folds_the_nyquist_mode_as_a_cosine():
    # cos(pi j) at N = 8 is the Nyquist mode; its interpolant is cos(2 pi 4 x / L)
    fine, coarse = 8, 6
    u = torch.cos(torch.pi * torch.arange(fine, dtype=torch.float64))[None, :, None]
    x_c = np.arange(coarse) / coarse
    out = restrict_periodic(u, coarse, dims=[1])[0, :, 0]
    assert torch.allclose(out, torch.as_tensor(np.cos(2 * np.pi * 4 * x_c)), atol=1e-12)


# ------------------------------------------------------------------ real runs
def test_tiny_burgers_run_is_consistent(device):
    result = pde_benchmark(
        "burgers",
        methods=["etdrk4", "imex"],
        resolutions=[32, 48],
        dts=[0.01, 0.005],
        t_end=0.1,
        params={"nu": 0.05},
        n=2,
        repeat=1,
        pypde=False,
        device=device,
    )
    ref = result["reference"]
    assert ref["method"] == "etdrk4" and ref["resolution"] == 96
    assert ref["dt"] == pytest.approx(0.0025)  # half the smallest etdrk4 step
    runs = {(r["method"], r["resolution"], r["dt_requested"]): r for r in result["runs"]}
    assert len(runs) == 8 and all(r["status"] == "ok" for r in runs.values())
    assert all(r["seconds_per_trajectory"] > 0 for r in runs.values())
    e = {k: r["error"] for k, r in runs.items()}
    # the spectral method: finer grid -> lower error, finer step -> lower error
    assert e["etdrk4", 48, 0.005] < 0.1 * e["etdrk4", 32, 0.005]
    assert e["etdrk4", 48, 0.005] < e["etdrk4", 48, 0.01]
    # SBDF2 is second order in time: the fitted order from the two steps
    h = [runs["imex", 48, d]["dt"] for d in (0.01, 0.005)]
    order = math.log(e["imex", 48, 0.01] / e["imex", 48, 0.005]) / math.log(h[0] / h[1])
    assert 1.6 < order < 2.4
    # every run's error_all covers later frames too; errors are relative L2, < 1 here
    assert all(0 < r["error_all"] < 1 and r["error_max"] >= r["error"] for r in runs.values())
    # fronts and speed-ups are consistent with the runs
    assert set(result["fronts"]) == {"simsci:etdrk4", "simsci:imex"}
    sp = result["speedups"][0]
    assert (sp["solver"], sp["versus"]) == ("simsci:etdrk4", "simsci:imex")
    if sp["overlap"]:
        lo = max(min(r["error"] for r in result["fronts"][s]) for s in result["fronts"])
        assert min(sp["errors"]) >= lo * (1 - 1e-12)
    json.dumps(result)  # JSON-able as it stands


def test_explicit_step_beyond_stability_is_skipped_and_recorded():
    result = pde_benchmark(
        "heat",
        methods=["rk4"],
        resolutions=[64],
        dts=[0.05, 1e-3],
        t_end=0.4,  # output every 0.1: both steps divide it
        n=2,
        repeat=1,
        pypde=False,
    )
    unstable = [r for r in result["runs"] if r["status"] == "unstable"]
    ok = [r for r in result["runs"] if r["status"] == "ok"]
    assert len(unstable) == 1 and len(ok) == 1
    skipped = unstable[0]
    assert skipped["dt"] == pytest.approx(0.05) and skipped["dt"] > skipped["stable_dt"]
    assert skipped["error"] is None and skipped["seconds_per_trajectory"] is None
    assert "stable limit" in skipped["note"]
    assert ok[0]["dt"] == pytest.approx(1e-3) and ok[0]["error"] < 1e-3
    assert "unstable" in format_table(result)


def test_explicit_methods_default_to_fractions_of_their_stability_limit():
    setup = default_setup("burgers", quick=True)
    assert "rk4" in setup.stable_fractions and "rk4" not in setup.dts
    result = pde_benchmark("burgers", methods=["rk4"], quick=True, n=2, repeat=1, pypde=False)
    assert [r["dt_rule"] for r in result["runs"]] == ["0.9 x stable_dt"] * 2
    for run in result["runs"]:
        assert run["status"] == "ok" and run["dt"] <= 0.9 * run["stable_dt"] * (1 + 1e-12)
    # the coarser grid allows the larger step (diffusive limit ~ dx^2)
    coarse, fine = result["runs"]
    assert coarse["stable_dt"] > 3 * fine["stable_dt"]


def test_a_pde_without_a_setup_gets_generic_defaults():
    from simsci.systems import register
    from simsci.systems._pde1d import Heat

    class HeatCopy(Heat):
        name = "heat_copy_for_bench_test"
        default_resolution = (64,)

    register(HeatCopy)
    limited = {m: (0.9,) for m in HeatCopy.methods if not get_stepper(m).unconditionally_stable}
    try:
        setup = default_setup("heat_copy_for_bench_test", quick=True)
        assert setup.resolutions == (16,) and setup.stable_fractions == limited
        assert "rk4" in limited
        result = pde_benchmark(
            "heat_copy_for_bench_test", quick=True, resolutions=[16, 32], n=2, repeat=1
        )
        assert {r["method"] for r in result["runs"]} == set(HeatCopy.methods)
    finally:
        del SYSTEMS["heat_copy_for_bench_test"]


def test_a_newly_registered_stepper_is_benchmarked_by_default():
    """Adding a stepper is one class: the benchmark runs it without a table entry (a
    step-limited one at 0.9 of its limit) and picks the reference from the registry."""
    from simsci.systems import PDE_STEPPERS, PDEStepper, register_stepper

    before = list(SYSTEMS["heat"].methods)

    @register_stepper
    class SpectralEuler(PDEStepper):
        name = "euler_bench_test"
        order = 1
        spectral = True
        unconditionally_stable = False
        stability = "h nu k_max^2 <= 2 (forward Euler on the diffusion)"
        description = "test: pseudo-spectral forward Euler"
        source = "-"

        def coefficients(self, system, h, rows, grid):
            return (system.linear_symbol(torch.as_tensor(rows), grid).to(grid.cdtype),)

        def step(self, system, v, t, h, coeffs, p, grid, source, carry):
            return v + h * (coeffs[0] * v + system.nonlinear_hat(t, v, p, grid)), carry

        def stable_dt(self, system, params, u0):
            lam = system.linearised_symbol(params, u0=u0, kind="spectral").real
            return float(2.0 / (-lam).max())

    try:
        result = pde_benchmark("heat", quick=True, n=2, repeat=1)
    finally:
        del PDE_STEPPERS["euler_bench_test"]
    assert result["settings"]["methods"] == [*before, "euler_bench_test"]
    assert result["reference"]["method"] == "etdrk4"  # highest order, spectral
    runs = [r for r in result["runs"] if r["method"] == "euler_bench_test"]
    assert [r["dt_rule"] for r in runs] == ["0.9 x stable_dt"] * 2
    assert all(r["status"] == "ok" and 0 < r["error"] < 1e-2 for r in runs)


def test_float32_runs_against_a_float64_reference(device):
    result = pde_benchmark(
        "burgers", methods=["etdrk4"], quick=True, dtype=torch.float32, n=2, repeat=1,
        device=device, pypde=False,
    )  # fmt: skip
    assert result["settings"]["dtype"] == "float32" and result["reference"]["dtype"] == "float64"
    assert result["reference"]["floor"] >= 100 * torch.finfo(torch.float32).eps
    assert all(r["status"] == "ok" and 1e-7 < r["error"] < 1e-2 for r in result["runs"])


def test_a_solver_at_the_reference_floor_gets_a_lower_bound():
    # ETDRK4 is exact for the heat equation with band-limited data: every run at the floor
    result = pde_benchmark(
        "heat", methods=["etdrk4", "imex"], quick=True, n=2, repeat=1, pypde=False
    )
    assert result["fronts"]["simsci:etdrk4"] == []
    etd = [r for r in result["runs"] if r["method"] == "etdrk4"]
    assert all(not r["scored"] and r["error"] < 1e-13 for r in etd)
    (bound,) = [s for s in result["speedups"] if s.get("bound")]
    assert (bound["solver"], bound["versus"]) == ("simsci:etdrk4", "simsci:imex")
    fastest = min(r["seconds_per_trajectory"] for r in etd)
    assert bound["seconds_a"] == pytest.approx([fastest] * len(bound["errors"]))
    imex = result["fronts"]["simsci:imex"]
    assert min(bound["errors"]) == pytest.approx(min(r["error"] for r in imex))
    assert ">= " in format_table(result)


def test_batches_add_a_curve_with_the_same_errors():
    result = pde_benchmark(
        "heat",
        methods=["imex"],
        resolutions=[32],
        dts=[0.01],
        t_end=0.1,
        n=4,
        batches=(4, 1),
        repeat=1,
        pypde=False,
    )
    full, single = result["runs"]
    assert full["solver"] == "simsci:imex" and single["solver"] == "simsci:imex[batch 1]"
    assert full["error"] == single["error"] and single["batch"] == 1
    with pytest.raises(ValueError, match="batches must be integers"):
        pde_benchmark("heat", quick=True, n=2, batches=(3,), pypde=False)


def test_darcy_is_benchmarked_over_resolutions_only():
    result = pde_benchmark("darcy", resolutions=[9, 17], n=2, repeat=1, pypde=False)
    assert result["reference"]["resolution"] == [65, 65]  # 4 x 16 + 1: nested vertex grids
    assert result["reference"]["dt"] is None
    errors = [r["error"] for r in result["runs"]]
    assert [r["dt"] for r in result["runs"]] == [None, None]
    assert errors[1] < errors[0]  # finer grid, lower error
    assert "py-pde" not in result["fronts"]
    with pytest.raises(ValueError, match="steady"):
        pde_benchmark("darcy", resolutions=[9], dts=[0.1], pypde=False)


# gray_scott is the costliest quick run (~8 s); the other PDEs and
# tests/systems/test_pde2d_gray_scott.py guard it in the default run
@pytest.mark.parametrize(
    "problem",
    [pytest.param(p, marks=pytest.mark.slow) if p == "gray_scott" else p for p in PDES],
)
def test_every_registered_pde_runs_quick(problem):
    result = pde_benchmark(problem, quick=True, n=2, repeat=1, pypde=False)
    assert result["runs"] and any(r["status"] == "ok" for r in result["runs"])
    table = format_table(result)
    assert problem in table and "speed-up at matched accuracy" in table


def test_bad_input_is_rejected_with_a_clear_message():
    with pytest.raises(UnknownNameError, match="did you mean 'burgers'"):
        pde_benchmark("burgerz")
    with pytest.raises(ValueError, match="not a PDE"):
        pde_benchmark("lorenz63")
    with pytest.raises(UnknownNameError, match="method for 'heat'"):
        pde_benchmark("heat", methods=["rk5"], pypde=False)
    with pytest.raises(ValueError, match="unknown"):
        pde_benchmark("heat", params={"mu": 1.0}, pypde=False)
    with pytest.raises(ValueError, match="resolution must be an integer"):
        pde_benchmark("heat", resolutions=[4], pypde=False)
    # the library runs no peer: asking for py-pde names where the comparison lives
    with pytest.raises(ValueError, match=r"runs no peer itself.*benchmarks/bench_pde_pypde.py"):
        pde_benchmark("navier_stokes_2d", quick=True, pypde=True)


# ----------------------------------------------------------------- the plug-in
class ExactHeat(nn.Module):
    """Stand-in operator: the exact solution of u_t = nu u_xx on [0, length)."""

    def __init__(self, nu=0.01, length=1.0, resolution=None, system="heat", use_params=True):
        super().__init__()
        self.init_args = {
            "nu": nu,
            "length": length,
            "resolution": resolution,
            "system": system,
            "use_params": use_params,
        }
        self.nu, self.length, self.resolution, self.system = nu, length, resolution, system
        self.use_params = use_params
        self.scale = nn.Parameter(torch.ones((), dtype=torch.float64))

    def rollout(self, u0, t, params=None):
        if params is not None and self.use_params:
            nu = params[:, 0]
        else:
            nu = torch.full((u0.shape[0],), self.nu, dtype=u0.dtype, device=u0.device)
        N = u0.shape[1]
        k = torch.fft.rfftfreq(N, d=1.0 / N, dtype=u0.dtype, device=u0.device)
        k = 2 * math.pi * k / self.length
        v = torch.fft.rfft(u0, dim=1)  # (B, K, C)
        decay = torch.exp(-nu.to(u0.dtype)[:, None, None] * (k**2)[None, :, None] * t[None])
        frames = torch.fft.irfft(v[:, :, None] * decay[..., None], n=N, dim=1)  # (B, N, T, C)
        return self.scale * frames.movedim(2, 1)


class NoRollout(nn.Module):
    def __init__(self):
        super().__init__()
        self.init_args = {}


def save(model, path):
    from simsci.train._checkpoint import (
        FORMAT_VERSION,
        KIND,
        model_import_path,
        save_checkpoint,
        versions,
    )

    payload = {
        "kind": KIND,
        "format_version": FORMAT_VERSION,
        "model": {"import_path": model_import_path(model), "init_args": model.init_args},
        "model_state": model.state_dict(),
        "versions": versions(),
        "extra": {},
    }
    return save_checkpoint(path, payload)


def test_a_checkpoint_is_scored_and_timed_like_a_solver(tmp_path, device):
    (tmp_path / "exact").mkdir()
    path = save(ExactHeat(nu=0.02), tmp_path / "exact" / "best.pt")
    coarse = save(ExactHeat(nu=0.02, resolution=32), tmp_path / "coarse.pt")
    wrong = save(ExactHeat(nu=0.01, use_params=False), tmp_path / "wrong.pt")
    result = pde_benchmark(
        "heat",
        methods=["imex"],
        resolutions=[32, 64],
        dts=[0.01],
        t_end=0.2,
        params={"nu": 0.02},
        n=2,
        repeat=1,
        models=[path, coarse, wrong],
        pypde=False,
        device=device,
    )
    by_solver = {}
    for run in result["runs"]:
        by_solver.setdefault(run["solver"], []).append(run)
    exact = by_solver["model:exact/best"]
    assert [r["resolution"] for r in exact] == [32, 64]  # any resolution: every tested one
    assert all(r["error"] < 1e-12 and r["seconds_per_trajectory"] > 0 for r in exact)
    assert [r["resolution"] for r in by_solver["model:coarse"]] == [32]
    # a model of the wrong viscosity is scored as such (the fields decay more slowly)
    assert all(r["error"] > 1e-2 for r in by_solver["model:wrong"])
    assert all(r["family"] == "model" for r in exact)


def test_models_are_checked_against_the_protocol(tmp_path):
    with pytest.raises(TypeError, match="no rollout"):
        pde_benchmark("heat", quick=True, models=[NoRollout()], pypde=False)
    other = save(ExactHeat(system="burgers"), tmp_path / "b.pt")
    with pytest.raises(ValueError, match="trained on 'burgers'"):
        pde_benchmark("heat", quick=True, models=[other], pypde=False)


# ------------------------------------------------------------------------ CLI
def test_cli_bench_pde_end_to_end(tmp_path, capsys):
    out = tmp_path / "tmp"
    code = main(
        ["bench", "pde", "--quick", "--system", "heat", "--device", "cpu", "--out", str(out)]
    )
    captured = capsys.readouterr()
    assert code == 0
    assert "speed-up at matched accuracy" in captured.out and "simsci:imex" in captured.out
    # the peer comparison is not the package's: the CLI says where it lives
    assert "py-pde runs from benchmarks/bench_pde_pypde.py" in captured.out
    assert "simsci bench pde_pypde --problems heat --quick" in captured.out
    result = json.loads((out / "result.json").read_text())
    assert result["problem"] == "heat" and result["environment"]["device"] == "cpu"
    assert result["runs"] and result["fronts"]
    pytest.importorskip("matplotlib")
    assert (out / "pareto.png").stat().st_size > 5_000


def test_cli_bench_pde_errors_and_listing(capsys):
    assert main(["bench", "pde", "--problem", "burgerz", "--quick"]) == 2
    assert "did you mean 'burgers'" in capsys.readouterr().err
    assert main(["bench", "pde", "--problem", "heat", "--quick", "--mu", "1"]) == 2
    assert "unknown" in capsys.readouterr().err
    assert main(["bench", "--list"]) == 0
    listing = capsys.readouterr().out
    assert listing.startswith("pde ") and "odeint_grid" in listing and "bench_pde " in listing
    with pytest.raises(SystemExit) as exc:
        main(["bench", "pde", "--help"])
    assert exc.value.code == 0 and "usage: simsci bench pde" in capsys.readouterr().out


def test_plot_pareto_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    result = pde_benchmark("heat", quick=True, n=2, repeat=1, pypde=False)
    path = plot_pareto(result, tmp_path / "sub" / "p.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
