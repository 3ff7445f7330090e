"""The benchmarks' one job runner: a spawn process pool with one thread per job, failures
recorded instead of fatal, a per-run log, quick mode, medians and ratios, and the JSON
result written atomically under benchmarks/results/.

Usage (a script in this folder; ``python benchmarks/bench_x.py`` puts this folder on
``sys.path``, and the spawned workers inherit it)::

    from _runner import RESULTS, map_jobs, medians, quick, seed_jobs, write

    def run_one(job):                  # module level, so the workers can unpickle it
        name, seed, steps = job
        return {"system": name, "seed": seed, "rmse": ...}

    args = parser.parse_args()         # --seeds, --jobs, --quick, --out as the script had
    quick(args, seeds=1, steps=100)    # --quick: these values replace the arguments
    jobs = seed_jobs(SYSTEMS, args.seeds, args.steps)      # (name, seed, steps) tuples
    runs = map_jobs(run_one, jobs, workers=args.jobs, record_as=("system", "seed"))
    ok = [r for r in runs if "error" not in r]             # failures: system, seed, error
    write(args.out, {"summary": ..., "runs": runs}, echo=True)

- ``map_jobs(fn, jobs, ...)``: ``fn(job)`` for each job, results in job order. With
  ``record_as`` a failed job becomes ``{field: job's value, ..., "error": "Type: msg"}``
  (fields named in order for a tuple job, by key for a dict job); without it the
  :class:`Failure` itself stands in the list.
- ``run_jobs(tasks, ...)``: the same over zero-argument callables
  (``functools.partial(fn, arg, ...)``, mixed functions allowed), yielding
  ``(task, result or Failure)`` in submission order as they finish, so a script can save
  after every run.
- Both take ``workers`` (processes; 1 runs the jobs in this process unless
  ``in_process=False``), ``threads`` (``torch.set_num_threads`` before every job; None
  leaves it alone) and ``log`` (a JSON-lines file each finished result is appended to by
  its worker, so a killed run keeps what finished; ``read_log`` reads it back). A job
  that raises is printed with its traceback and the rest go on.
- ``resume(log, jobs, fields)``: the finished records of a log and the jobs still to run.
- ``medians(rows, keys)``, ``median_ratio(nums, dens)``, ``ratio(a, b)``,
  ``mean_std(values)``, ``group(runs, *keys)``: the summaries' arithmetic.
- ``write(path, result, echo=False)``: ``simsci.bench.write_result`` (atomic, with the
  ``environment`` block); ``echo`` prints ``result["summary"]`` and the path.
- ``show(result)``: one JSON line of a result, floats rounded to 4 digits.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import statistics
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


# ---------------------------------------------------------------- running jobs
@dataclass(frozen=True)
class Failure:
    """A job that raised: ``error`` is ``"TypeName: message"``."""

    error: str
    traceback: str = ""

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(f"{type(exc).__name__}: {exc}", tb)

    def record(self, **fields) -> dict:
        """The failure as a run record: ``fields`` and the error."""
        return {**fields, "error": self.error}


def _label(task: Callable[[], Any]) -> str:
    func = getattr(task, "func", task)
    args = getattr(task, "args", ())
    text = f"{getattr(func, '__name__', repr(func))}({', '.join(map(repr, args))})"
    return text if len(text) <= 200 else text[:197] + "..."


def _call(item: tuple) -> Any:
    """Run one task (in a worker or here): threads set, a failure caught, logged."""
    task, threads, log = item
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    try:
        result = task()
    except Exception as exc:  # noqa: BLE001 - the benchmark records every failure
        failure = Failure.of(exc)
        print(f"{_label(task)} FAILED: {failure.error}\n{failure.traceback}", flush=True)
        return failure
    if log is not None:
        append_log(log, result)
    return result


def run_jobs(
    tasks: Iterable[Callable[[], Any]],
    *,
    workers: int = 2,
    threads: int | None = 1,
    in_process: bool | None = None,
    log: str | Path | None = None,
) -> Iterator[tuple[Callable[[], Any], Any]]:
    """Run zero-argument ``tasks`` (module-level functions or ``functools.partial`` of
    them) on ``workers`` spawned processes; yield ``(task, result or Failure)`` in
    submission order. ``in_process`` (default: ``workers == 1``) runs them one after
    another in this process instead."""
    if workers < 1:
        raise ValueError(f"need workers >= 1, got {workers}; pass --jobs 1 or more")
    tasks = list(tasks)
    items = [(task, threads, None if log is None else str(log)) for task in tasks]
    if in_process if in_process is not None else workers == 1:
        for task, item in zip(tasks, items):
            yield task, _call(item)
        return
    if not tasks:
        return
    with mp.get_context("spawn").Pool(workers) as pool:
        results = pool.imap(_call, items, chunksize=1)
        for task in tasks:
            try:
                result = next(results)
            except Exception as exc:  # noqa: BLE001 - e.g. a result that did not pickle
                result = Failure.of(exc)
                print(f"{_label(task)} FAILED: {result.error}", flush=True)
            yield task, result


def map_jobs(
    fn: Callable[[Any], Any],
    jobs: Iterable[Any],
    *,
    record_as: Sequence[str] | None = None,
    **options,
) -> list:
    """``fn(job)`` for every job through :func:`run_jobs` (same ``options``); the results
    in job order, a failure as its record (``record_as``) or as the :class:`Failure`."""
    from functools import partial

    jobs = list(jobs)
    out = []
    for job, (_, result) in zip(jobs, run_jobs([partial(fn, j) for j in jobs], **options)):
        if isinstance(result, Failure) and record_as is not None:
            if isinstance(job, dict):
                result = result.record(**{k: job[k] for k in record_as})
            else:
                result = result.record(**dict(zip(record_as, job)))
        out.append(result)
    return out


def seed_jobs(items: Iterable[Any], seeds: int, *extra: Any) -> list[tuple]:
    """``(item, seed, *extra)`` for every item and seed in ``range(seeds)``, item-major."""
    return [(item, seed, *extra) for item in items for seed in range(seeds)]


def quick(args, **sizes):
    """With ``args.quick`` set, replace ``args``' values by ``sizes``; return ``args``."""
    if args.quick:
        for name, value in sizes.items():
            setattr(args, name, value)
    return args


# ---------------------------------------------------------------- per-run log
def append_log(path: str | Path, record: dict) -> None:
    """Append ``record`` as one JSON line (each worker appends its own runs)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def read_log(path: str | Path, key: Callable[[dict], Any] | None = None) -> list[dict]:
    """The records of a log; with ``key``, the latest record per key (first-seen order)."""
    records = [json.loads(line) for line in Path(path).read_text().splitlines() if line]
    if key is None:
        return records
    latest: dict = {}
    for r in records:
        latest[key(r)] = r
    return list(latest.values())


def resume(
    log: str | Path,
    jobs: Sequence[tuple],
    fields: Sequence[str],
    keep: Callable[[dict], bool] | None = None,
) -> tuple[list[dict], list[tuple]]:
    """``(finished, pending)`` for a rerun: the log's latest error-free records whose
    ``fields`` equal the first values of one of ``jobs`` (and that pass ``keep``), and the
    jobs that have none. A rerun after a crash, or with more seeds, runs only the rest."""
    jobs = list(jobs)
    if not Path(log).exists():
        return [], jobs
    n = len(fields)

    def key(record: dict) -> tuple:
        return tuple(record[f] for f in fields)

    wanted = {tuple(j[:n]) for j in jobs}
    finished = [
        r
        for r in read_log(log, key=key)
        if "error" not in r and key(r) in wanted and (keep is None or keep(r))
    ]
    done = {key(r) for r in finished}
    return finished, [j for j in jobs if tuple(j[:n]) not in done]


def show(result: dict, digits: int = 4) -> str:
    """One JSON line of ``result``, finite floats rounded to ``digits``."""
    return json.dumps(
        {
            k: (round(v, digits) if isinstance(v, float) and math.isfinite(v) else v)
            for k, v in result.items()
        }
    )


# ---------------------------------------------------------------- summaries
def medians(rows: Iterable[dict], keys: Iterable[str]) -> dict:
    """``{key: median of row[key] over rows}``."""
    rows = list(rows)
    return {k: statistics.median(r[k] for r in rows) for k in keys}


def ratio(a: float, b: float) -> float:
    """``a / b``; NaN when ``b`` is not positive."""
    return a / b if b > 0 else math.nan


def median_ratio(nums: Iterable[float], dens: Iterable[float]) -> float:
    """The median of the pairwise ratios ``num / den`` (per run, then the median)."""
    return statistics.median(n / d for n, d in zip(nums, dens, strict=True))


def mean_std(values: Sequence[float]) -> dict:
    """``{"mean", "std"}`` over seeds (sample std; 0 for a single value)."""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "std": std}


def group(runs: Iterable[dict], *keys: str) -> dict[tuple, list[dict]]:
    """Runs by their values of ``keys``, sorted by them."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    return dict(sorted(groups.items(), key=lambda item: item[0]))


# ---------------------------------------------------------------- results
def write(path: str | Path, result: dict, *, echo: bool = False, device: str = "cpu") -> Path:
    """Write ``result`` atomically (``simsci.bench.write_result``: with the environment
    block); ``echo`` prints ``result["summary"]`` and the path written."""
    from simsci.bench import write_result

    path = write_result(path, result, device=device)
    if echo:
        print(json.dumps(result["summary"], indent=1))
        print(f"wrote {path}")
    return path
