"""The benchmarks' shared job runner (benchmarks/_runner.py): a spawn pool whose failed
job is recorded while the rest go on, the per-run log, quick mode, the summaries'
arithmetic and the atomic result file. The jobs are standard-library callables, so the
workers need nothing but the runner to unpickle them."""

import argparse
import json
import math
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def runner(monkeypatch):
    # the scripts import it as `_runner` from their folder; spawned workers inherit the path
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import _runner

    return _runner


def test_pool_of_two_records_the_failure_and_logs_the_run_that_finished(runner, tmp_path, capfd):
    log = tmp_path / "logs" / "runs.jsonl"
    good, bad = partial(dict, system="a", seed=0), partial(dict, 1)
    out = list(runner.run_jobs([good, bad], workers=2, threads=None, log=log))
    assert [task for task, _ in out] == [good, bad]  # submission order
    assert out[0][1] == {"system": "a", "seed": 0}
    failure = out[1][1]
    assert isinstance(failure, runner.Failure)
    assert failure.error.startswith("TypeError: ") and "Traceback" in failure.traceback
    assert "dict(1) FAILED: TypeError" in capfd.readouterr().out  # printed by the worker
    assert runner.read_log(log) == [{"system": "a", "seed": 0}]  # only the finished run


def test_map_jobs_in_process_records_failures_with_the_jobs_fields(runner):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        jobs = [(("system", "a"), ("seed", 0)), (1, 2)]
        runs = runner.map_jobs(dict, jobs, workers=1, threads=1, record_as=("system", "seed"))
        assert torch.get_num_threads() == 1  # threads set before each job
    finally:
        torch.set_num_threads(before)
    assert runs[0] == {"system": "a", "seed": 0}
    assert runs[1]["system"] == 1 and runs[1]["seed"] == 2
    assert runs[1]["error"].startswith("TypeError: ")
    # dict jobs are recorded by key; without record_as the Failure itself stands in
    assert runner.map_jobs(math.sqrt, [4.0], workers=1) == [2.0]
    (failure,) = runner.map_jobs(math.sqrt, [-1.0], workers=1, threads=None)
    assert failure.error == "ValueError: math domain error"
    assert failure.record(seed=3) == {"seed": 3, "error": "ValueError: math domain error"}
    with pytest.raises(ValueError, match="workers >= 1"):
        runner.map_jobs(math.sqrt, [4.0], workers=0)


def test_quick_mode_replaces_the_sizes_only_when_asked(runner):
    full = argparse.Namespace(quick=False, seeds=3, steps=1500)
    assert vars(runner.quick(full, seeds=1, steps=100)) == {
        "quick": False,
        "seeds": 3,
        "steps": 1500,
    }
    small = runner.quick(argparse.Namespace(quick=True, seeds=3, steps=1500), seeds=1, steps=100)
    assert (small.seeds, small.steps) == (1, 100)
    assert runner.seed_jobs(["a", "b"], 2, 7) == [
        ("a", 0, 7),
        ("a", 1, 7),
        ("b", 0, 7),
        ("b", 1, 7),
    ]


def test_medians_ratios_and_mean_std(runner):
    rows = [{"x": 1.0, "y": 4.0}, {"x": 3.0, "y": 2.0}, {"x": 2.0, "y": 8.0}]
    assert runner.medians(iter(rows), ("x", "y")) == {"x": 2.0, "y": 4.0}
    # the median of the per-run ratios, not the ratio of the medians
    assert runner.median_ratio([1.0, 3.0, 2.0], [4.0, 2.0, 8.0]) == 0.25
    assert runner.ratio(1.0, 4.0) == 0.25 and math.isnan(runner.ratio(1.0, 0.0))
    assert runner.mean_std([1.0, 3.0]) == {"mean": 2.0, "std": math.sqrt(2.0)}
    assert runner.mean_std([5.0]) == {"mean": 5.0, "std": 0.0}
    runs = [{"p": "b", "m": 1}, {"p": "a", "m": 2}, {"p": "b", "m": 1}]
    groups = runner.group(runs, "p", "m")
    assert list(groups) == [("a", 2), ("b", 1)] and len(groups[("b", 1)]) == 2
    shown = json.loads(runner.show({"a": 0.123456, "b": float("inf"), "c": "x"}))
    assert shown == {"a": 0.1235, "b": math.inf, "c": "x"}


def test_write_is_atomic_with_environment_and_echoes_the_summary(runner, tmp_path, capsys):
    path = runner.write(tmp_path / "r.json", {"summary": {"k": 1}, "runs": []}, echo=True)
    data = json.loads(path.read_text())
    assert data["summary"] == {"k": 1} and "environment" in data
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left
    out = capsys.readouterr().out
    assert '"k": 1' in out and f"wrote {path}" in out
    assert runner.RESULTS == BENCHMARKS / "results"
    assert str(BENCHMARKS) in sys.path
