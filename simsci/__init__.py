"""simsci: simulation and scientific machine learning of dynamics and continuous-time models.

The public surface is small; the packages are layered (README, "Layout"):

- ``simsci.odeint`` / ``simsci.sdeint``: batched ODE/SDE solves with per-sample time grids;
- ``simsci.data``: the trajectory format (``open``, ``write``, ``TrajectoryWriter``,
  ``check_file``, torch datasets and collates);
- ``simsci.systems``: ground-truth simulators (``get``, ``generate``); beside them
  ``simsci.processes`` (point processes) and ``simsci.driving`` (the driving world);
- ``simsci.datasets``: data sets built over the simulators (``make_dataset``);
- ``simsci.train``: the one training loop;
- ``simsci.models``, ``simsci.operators``, ``simsci.envs``: models, neural operators and
  gymnasium environments; ``simsci.bench`` and ``simsci.tour``: timing and the tour.

Subpackages are imported lazily, so ``import simsci`` stays cheap for the CLI.
"""

from __future__ import annotations

import importlib

from simsci._version import __version__
from simsci.errors import (
    CheckpointError,
    FormatError,
    SimsciError,
    SolverError,
    TrainingError,
    UnknownNameError,
)

_SUBMODULES = {
    "data",
    "integrate",
    "systems",
    "processes",
    "driving",
    "datasets",
    "models",
    "train",
    "envs",
    "operators",
    "bench",
    "tour",
}
_FUNCTIONS = {"odeint": "simsci.integrate", "sdeint": "simsci.integrate"}

__all__ = [
    "__version__",
    "odeint",
    "sdeint",
    "SimsciError",
    "FormatError",
    "SolverError",
    "UnknownNameError",
    "CheckpointError",
    "TrainingError",
    *sorted(_SUBMODULES),
]


def __getattr__(name: str):
    if name in _FUNCTIONS:
        return getattr(importlib.import_module(_FUNCTIONS[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"simsci.{name}")
    raise AttributeError(f"module 'simsci' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
