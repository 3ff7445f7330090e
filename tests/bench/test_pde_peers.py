"""Peers of the PDE benchmark: the library calls none; a peer handed in from
``benchmarks/`` (py-pde: ``benchmarks/pypde_peer.py``) runs on the same initial fields
and output times, scored and timed like the library's solvers."""

import importlib.util
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import simsci
from simsci.bench import PDEBenchProblem, PDEPeer, format_table, pde_benchmark

ROOT = Path(__file__).resolve().parents[2]


def load_benchmark_module(name: str):
    """A module of the repository's benchmarks/ folder (not a package)."""
    path = ROOT / "benchmarks" / f"{name}.py"
    if not path.exists():
        pytest.skip(f"no {path} (benchmarks ship with the source tree)")
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FourierHeat(PDEPeer):
    """A stand-in peer for the heat equation on [0, 1): the exact Fourier solution
    (``toy:exact``) and forward Euler in Fourier space at fixed steps (``toy:euler``)."""

    family = "toy"

    def __init__(self, grids=(48,), dts=(0.01, 0.005), included=True):
        self._grids, self.dts, self.included = list(grids), dts, included
        self.seen = []

    def status(self, problem):
        if not self.included:
            return {"included": False, "reason": "switched off in the test"}
        return {"included": problem == "heat", "reason": "heat only"}

    def grids(self, problem, tested):
        return self._grids

    def runs(self, bench: PDEBenchProblem, grids):
        assert all(isinstance(g, tuple) for g in grids)
        nu = bench.system(grids[0]).params["nu"]
        out = []
        for res in grids:
            u0 = bench.initial(res, torch.float64)  # (n, N, 1)
            self.seen.append((res, u0))
            N = res[0]
            lam = -nu * (2 * math.pi * torch.fft.rfftfreq(N, 1.0 / N, dtype=torch.float64)) ** 2
            t = torch.as_tensor(bench.times, dtype=torch.float64)

            def exact(u0=u0, lam=lam, t=t, N=N):
                v = torch.fft.rfft(u0, dim=1)[:, None]  # (n, 1, K, 1)
                decay = torch.exp(lam[None, None, :, None] * t[None, :, None, None])
                return torch.fft.irfft(v * decay, n=N, dim=2)

            entry = {"solver": "toy:exact", "family": "toy", "method": "exact",
                     "resolution": bench.label(res), "dt": None}  # fmt: skip
            out.append({**entry, **bench.timed(exact, res)})
            for dt in self.dts:
                h = bench.step_taken(dt)
                steps = round(float(np.diff(bench.times)[0]) / h)

                def euler(u0=u0, lam=lam, h=h, steps=steps, N=N):
                    v = torch.fft.rfft(u0, dim=1)
                    frames = [u0]
                    for _ in range(len(bench.times) - 1):
                        v = v * (1 + h * lam[None, :, None]) ** steps
                        frames.append(torch.fft.irfft(v, n=N, dim=1))
                    return torch.stack(frames, dim=1)

                entry = {"solver": "toy:euler", "family": "toy", "method": "forward Euler",
                         "resolution": bench.label(res), "dt": h, "dt_requested": dt}  # fmt: skip
                out.append({**entry, **bench.timed(euler, res)})
        return out


def test_a_peer_runs_on_the_same_fields_and_is_compared_at_matched_accuracy():
    peer = FourierHeat(grids=(48, 128))
    result = pde_benchmark(
        "heat", methods=["imex"], quick=True, n=2, repeat=1, peers=[peer], levels=2
    )
    # the peer's grids join the reference: at least its finest (128 > 2 x 64)
    assert result["reference"]["resolution"] == 128
    assert result["peers"] == {"toy": {"included": True, "reason": "heat only"}}
    runs = [r for r in result["runs"] if r["family"] == "toy"]
    assert [(r["solver"], r["resolution"]) for r in runs] == [
        ("toy:exact", 48), ("toy:euler", 48), ("toy:euler", 48),
        ("toy:exact", 128), ("toy:euler", 128), ("toy:euler", 128),
    ]  # fmt: skip
    # the exact solution of the same band-limited fields at the same times: at the
    # reference's accuracy (so not scored), which only holds for the same initial fields
    exact = [r for r in runs if r["solver"] == "toy:exact"]
    assert all(r["status"] == "ok" and r["error"] < 1e-12 and not r["scored"] for r in exact)
    euler = [r for r in runs if r["solver"] == "toy:euler"]
    assert all(r["scored"] and r["seconds_per_trajectory"] > 0 for r in euler)
    e = {(r["resolution"], r["dt_requested"]): r["error"] for r in euler}
    assert 1.8 < e[48, 0.01] / e[48, 0.005] < 2.2  # first order in time
    # one curve per solver, the family's union, and no comparison inside the family
    assert {"simsci:imex", "toy:exact", "toy:euler"} <= set(result["fronts"])
    pairs = {(s["solver"], s["versus"]) for s in result["speedups"]}
    assert ("simsci:imex", "toy (best)") in pairs and ("simsci:imex", "toy:euler") in pairs
    assert not any(a.startswith("toy") and b.startswith("toy") for a, b in pairs)
    # the at-floor peer solver gets its lower bound against the library's front
    assert ("toy:exact", "simsci:imex") in pairs
    # the fields the peer saw are the restriction of the shared reference-grid fields
    for res, u0 in peer.seen:
        assert u0.shape == (2, res[0], 1)
    assert "toy:euler" in format_table(result)


def test_a_peer_that_cannot_run_says_why_and_is_left_out():
    result = pde_benchmark(
        "heat", methods=["imex"], quick=True, n=2, repeat=1, peers=[FourierHeat(included=False)]
    )
    assert result["peers"]["toy"]["included"] is False
    assert all(r["family"] == "simsci" for r in result["runs"])
    assert result["reference"]["resolution"] == 128  # 2 x 64: the peer's grids left out
    assert "toy: not included (switched off in the test)" in format_table(result)
    with pytest.raises(TypeError, match=r"has no status\(\) method; a peer follows"):
        pde_benchmark("heat", quick=True, n=2, peers=[object()])


def test_the_library_imports_no_peer():
    """Peers are called only from benchmarks/ (shared/design/architecture.md)."""
    package = Path(simsci.__file__).parent
    offenders = []
    for path in package.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if re.search(r"^\s*(import pde\b|from pde(\.| import))", text, flags=re.M):
            offenders.append(str(path.relative_to(package)))
    assert offenders == []


def test_pypde_peer_reports_why_it_cannot_run():
    peers = load_benchmark_module("pypde_peer")
    peer = peers.PyPDEPeer(quick=True)
    assert "Poisson" in peer.status("navier_stokes_2d")["reason"]
    assert "steady" in peer.status("darcy")["reason"]
    heat = peer.status("heat")
    if importlib.util.find_spec("pde") is None:
        assert not heat["included"] and "not installed" in heat["reason"]
    else:
        assert heat["included"] and heat["equation"] == {"u": "{nu} * laplace(u)"}
    assert peer.grids("heat", [(32,)]) == [256, 512]  # its quick grids
    assert peers.PyPDEPeer(resolutions=[64]).grids("heat", [(32,)]) == [64]
    assert peer.grids("navier_stokes_2d", [(16, 16)]) == [(16, 16)]  # no table entry


@pytest.mark.slow  # numba compiles py-pde's stepper per grid: ~10 s
def test_pypde_runs_side_by_side_with_the_same_initial_conditions():
    pytest.importorskip("pde")
    peers = load_benchmark_module("pypde_peer")
    result = pde_benchmark(
        "heat",
        methods=["etdrk4"],
        resolutions=[32, 64],
        dts=[0.05],
        t_end=0.2,
        n=2,
        repeat=1,
        peers=[peers.PyPDEPeer(resolutions=[32, 64], dts=(), tolerances=(1e-9,))],
    )
    assert result["peers"]["py-pde"]["included"]
    runs = [r for r in result["runs"] if r["family"] == "py-pde"]
    assert [r["resolution"] for r in runs] == [32, 64]
    e32, e64 = (r["error"] for r in runs)
    # py-pde's second-order centred differences on the same band-limited fields:
    # doubling the grid divides its error by about 4
    assert 3.0 < e32 / e64 < 5.0 and e64 < 1e-2


@pytest.mark.slow  # numba compiles two py-pde steppers: ~20 s
def test_pypde_compiles_each_stepper_once_per_configuration(monkeypatch):
    """A second benchmark call on the same grid and equation reuses the compiled
    steppers (numba's compile is most of a short run's wall time): no new compile,
    the same errors."""
    pytest.importorskip("pde")
    from pde.solvers import RungeKuttaSolver

    peers = load_benchmark_module("pypde_peer")
    built = []
    make = RungeKuttaSolver.make_stepper

    def counting(self, state, dt=None):
        built.append((self.adaptive, dt))
        return make(self, state, dt=dt)

    monkeypatch.setattr(RungeKuttaSolver, "make_stepper", counting)

    def run():
        result = pde_benchmark(
            "heat", methods=["etdrk4"], resolutions=[32], dts=[0.05], t_end=0.2, n=2,
            repeat=2, peers=[peers.PyPDEPeer(resolutions=[32], dts=(1e-3,), tolerances=(1e-8,))],
        )  # fmt: skip
        return [r for r in result["runs"] if r["family"] == "py-pde"]

    first = run()
    assert len(built) == 2  # rk4 at one step, rkf45 at one tolerance
    second = run()
    assert len(built) == 2  # nothing compiled again
    assert [r["error"] for r in first] == [r["error"] for r in second]
    assert all(r["status"] == "ok" for r in first)
    (entry,) = peers._COMPILED.values()
    assert len(entry["steppers"]) == 2
