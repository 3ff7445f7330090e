"""Benchmark utilities: warm-up, device-synchronised timing, medians, JSON results.

Benchmarks compare against a named peer in the same run and report medians and ratios
(shared/design/architecture.md). The scripts under ``benchmarks/`` and ``simsci bench``
use these helpers so every result file has the same shape.
"""

from simsci.bench._timing import Timing, environment, time_call, write_result

__all__ = ["Timing", "time_call", "environment", "write_result"]
