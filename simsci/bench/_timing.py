"""Timing helpers. Device work is asynchronous, so every timed call is followed by a
synchronisation of the device before the clock is read; warm-up calls are discarded."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from simsci._device import synchronize
from simsci._io import write_json
from simsci._version import __version__


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of repeated calls: ``median`` is the figure to report."""

    times: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def minimum(self) -> float:
        return min(self.times)

    @property
    def maximum(self) -> float:
        return max(self.times)

    def as_dict(self) -> dict:
        return {
            "median_s": self.median,
            "min_s": self.minimum,
            "max_s": self.maximum,
            "runs": list(self.times),
        }


def time_call(
    fn: Callable[[], object],
    *,
    repeat: int = 5,
    warmup: int = 1,
    device: torch.device | str = "cpu",
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Run ``fn`` ``warmup`` times untimed, then ``repeat`` times timed (device synchronised)
    on ``clock`` (wall time; ``time.thread_time`` for this thread's CPU time, which load
    from other processes does not inflate)."""
    if repeat < 1 or warmup < 0:
        raise ValueError(f"need repeat >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeat):
        start = clock()
        fn()
        synchronize(device)
        times.append(clock() - start)
    return Timing(tuple(times))


def environment(device: torch.device | str = "cpu") -> dict:
    """What the numbers were measured on: versions, threads, CPU/GPU names, UTC time."""
    dev = torch.device(device)
    env = {
        "simsci": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "torch_threads": torch.get_num_threads(),
        "device": str(dev),
        "utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if dev.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(dev)
    return env


def write_result(path: str | Path, result: dict, *, device: torch.device | str = "cpu") -> Path:
    """Write ``result`` plus an ``environment`` block as JSON (atomically); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {**result, "environment": environment(device)})
    return path


def out_path(arg: str | None, name: str, default_dir: str | Path) -> Path:
    """A benchmark's ``--out``: a JSON file, or a folder to write ``name`` in (None:
    ``default_dir``)."""
    if arg is None:
        return Path(default_dir) / name
    p = Path(arg)
    return p if p.suffix == ".json" else p / name


def code_version(*paths: str) -> dict:
    """The commit figures were measured at and whether ``paths`` (relative to the
    repository) differed from it -- other work may land in the same tree meanwhile."""
    import subprocess

    root = Path(__file__).resolve().parents[2]

    def git(*args):
        try:
            return subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    dirty = git("status", "--porcelain", "--", *paths)
    return {"commit": git("rev-parse", "HEAD"), "code_modified": bool(dirty), "paths": list(paths)}
