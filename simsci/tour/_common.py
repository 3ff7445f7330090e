"""What the tour's sections share: the context they run in and a few small helpers."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Context:
    """Where a section runs: ``out`` (an existing folder for its data, runs and plots),
    ``device``, ``quick`` (smoke-test sizes: seconds) and ``seed`` (every seed a section
    uses is ``seed`` plus a fixed offset, so one tour seed gives one tour).

    Sections share nothing else: each makes the files it reads, so it runs alone."""

    out: Path
    device: torch.device
    quick: bool = False
    seed: int = 0

    def fresh(self, name: str) -> Path:
        """An empty training folder ``out/name``: a second tour starts over (the trainer
        refuses to write into a folder that holds another run)."""
        run_dir = self.out / name
        if run_dir.exists():
            shutil.rmtree(run_dir)
        return run_dir


def banner(text: str) -> None:
    print(f"\n== {text} ==", flush=True)


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (with a hint) when not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: pip install 'simsci[plot]' for the plot)")
        return None
    return plt


def save_plot(plt, fig, path: Path, *, dpi: int = 90) -> str:
    """Lay out, write and close ``fig``; print and return its path."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    print(f"plot: {path}")
    return str(path)


def model_dataset(source, fields, *, split=None, window=None, stride=None):
    """A TrajectoryDataset over those of a model's ``fields`` that the data has (a series
    model lists ``label``, which generated data lacks); ``split`` is ignored when the data
    carries no split ids. ``source``: a path or an opened ``Trajectories``."""
    from simsci import data

    traj = source if isinstance(source, data.Trajectories) else data.open(source)
    present = tuple(f for f in fields if f in traj.step_fields or f in traj.episode_fields)
    if split is not None and "split" not in traj.episode_fields:
        split = None
    return data.TrajectoryDataset(traj, fields=present, split=split, window=window, stride=stride)
