"""Benchmark utilities: warm-up, device-synchronised timing, medians, JSON results, and
the PDE-solver benchmark.

Benchmarks compare against a named peer in the same run and report medians and ratios
(shared/design/architecture.md). The scripts under ``benchmarks/`` and ``simsci bench``
use these helpers so every result file has the same shape.

``pde_benchmark(problem)`` runs every solver of a registered PDE over resolutions and
step sizes, scores each against a fine reference and times it (median of repeats, with
their spread); ``pareto_front`` (from the medians), ``front_crossings`` (runs whose spread
crosses their front: an unstable comparison), ``matched_speedup`` and ``matched_error``
compare solvers at matched accuracy;
``format_table`` and ``plot_pareto`` report a result (see :mod:`simsci.bench._pde`).
The library calls no peer package: a peer (``PDEPeer``, e.g. py-pde in
``benchmarks/pypde_peer.py``) is handed in with ``pde_benchmark(..., peers=[...])``
and runs on the ``PDEBenchProblem`` it is given.
"""

from simsci.bench._pde import (
    PDEBenchProblem,
    PDEBenchSetup,
    PDEPeer,
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
from simsci.bench._timing import (
    Timing,
    code_version,
    environment,
    out_path,
    time_call,
    write_result,
)

__all__ = [
    "code_version",
    "out_path",
    "Timing",
    "time_call",
    "environment",
    "write_result",
    "pde_benchmark",
    "default_setup",
    "PDEBenchSetup",
    "PDEBenchProblem",
    "PDEPeer",
    "pareto_front",
    "front_crossings",
    "matched_speedup",
    "matched_error",
    "restrict_periodic",
    "format_table",
    "plot_pareto",
]
