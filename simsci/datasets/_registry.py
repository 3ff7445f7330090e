"""Dataset builders: simulated data sets that are more than one system's trajectories.

``make_dataset(name, n, out=..., seed=...)`` writes a trajectory file (kind "state") by
the builder registered as ``name`` in :data:`DATASETS`: ``"pendulum_images"`` (frames of
a damped pendulum, irregular and noisy; :mod:`simsci.datasets._pendulum_images`) and
``"climate"`` (station-years of five correlated daily weather channels with gaps;
:mod:`simsci.datasets._climate`). ``simsci generate NAME`` reaches the same builders, and
``simsci generate --list`` lists them after the systems.

Design choices, and why:

- **A registry beside the systems'.** A data set such as rendered pendulum frames is
  made *from* a system (``damped_pendulum``, its integrator) but is not one: it has no
  drift, its ``x`` is not the state. A second plain dict keeps ``systems.get`` and
  ``generate`` unchanged, and the CLI looks a name up in both (an unknown name lists
  both and suggests the closest).
- **Explicit options.** Each builder is a function with keyword-only options and
  documented defaults; ``make_dataset`` checks the given options against the builder's
  signature, so a misspelt or inapplicable option (``--method`` for ``climate``) is an
  error listing the valid ones, never silently ignored.
- **Shared conventions with** :func:`simsci.systems.generate`: ``keep`` in (0, 1] is the
  fraction of a regular grid's time points kept per episode (``max(2, round(keep L))``
  of them, uniformly without replacement, sorted); splits are exact counts assigned by
  a seeded permutation; independent random streams are spawned from one
  :class:`numpy.random.SeedSequence` (changing ``keep`` does not change the simulated
  trajectories); same arguments, identical file. Builders run on the CPU (the data
  sets are small); writes are atomic (:class:`simsci.data.TrajectoryWriter`).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable
from pathlib import Path

from simsci._seeding import check_count, check_seed
from simsci.errors import UnknownNameError, unknown_name
from simsci.systems import SYSTEMS


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """A registered builder: ``build(n, *, out, seed, progress, **options) -> Path``."""

    name: str
    build: Callable[..., Path]
    summary: str

    def options(self) -> dict[str, object]:
        """The builder's options and their defaults (beyond n, out, seed, progress)."""
        sig = inspect.signature(self.build)
        return {
            k: p.default
            for k, p in sig.parameters.items()
            if p.kind is p.KEYWORD_ONLY and k not in ("out", "seed", "progress")
        }


#: dataset name -> builder
DATASETS: dict[str, DatasetInfo] = {}


def register_dataset(name: str, summary: str):
    """Decorator: register ``build`` under ``name`` (a name not taken by a system)."""

    def deco(build: Callable[..., Path]) -> Callable[..., Path]:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a dataset needs a non-empty name, got {name!r}")
        if name in DATASETS or name in SYSTEMS:
            raise ValueError(
                f"dataset name {name!r} is already taken by a "
                f"{'dataset' if name in DATASETS else 'system'}; choose another"
            )
        DATASETS[name] = DatasetInfo(name, build, summary)
        return build

    return deco


def available_datasets() -> list[str]:
    """The registered dataset names, sorted."""
    return sorted(DATASETS)


def make_dataset(
    name: str,
    n: int,
    *,
    out: str | os.PathLike,
    seed: int = 0,
    progress: bool = False,
    **options,
) -> Path:
    """Build the data set ``name`` with ``n`` episodes into the trajectory file ``out``.

    ``options`` are the builder's own (``keep``, ``split``, ``size``, ``years``...; see
    ``DATASETS[name].options()`` and each builder's docstring). Returns the written
    path. An unknown name lists the valid ones (and says so when it is a system, made by
    :func:`simsci.systems.generate`); an unknown option lists the builder's options.

    >>> make_dataset("pendulum_images", 500, out="pend_img.h5", seed=0)  # doctest: +SKIP
    >>> make_dataset("climate", 200, out="climate.h5", keep=0.7)  # doctest: +SKIP
    """
    if not isinstance(name, str):
        raise TypeError(f"dataset name must be a string, got {type(name).__name__} {name!r}")
    info = DATASETS.get(name)
    if info is None:
        if name in SYSTEMS:
            raise UnknownNameError(
                f"{name!r} is a system, not a dataset: simulate it with "
                f"simsci.systems.generate({name!r}, n, out=...). Datasets: "
                f"{', '.join(available_datasets())}."
            )
        raise unknown_name("dataset", name, DATASETS)
    valid = info.options()
    for key in options:
        if key not in valid:
            raise UnknownNameError(
                f"dataset {name!r} has no option {key!r} (CLI --{key.replace('_', '-')}); "
                f"its options: {', '.join(f'{k}={v!r}' for k, v in valid.items())}"
            )
    return info.build(
        check_count(n), out=out, seed=check_seed(seed), progress=bool(progress), **options
    )
