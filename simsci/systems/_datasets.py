"""Dataset builders: simulated data sets that are more than one system's trajectories.

``make_dataset(name, n, out=..., seed=...)`` writes a trajectory file (kind "state") by
the builder registered as ``name`` in :data:`DATASETS`: ``"pendulum_images"`` (frames of
a damped pendulum, irregular and noisy; :mod:`simsci.systems._pendulum_images`) and
``"climate"`` (station-years of five correlated daily weather channels with gaps;
:mod:`simsci.systems._climate`). ``simsci generate NAME`` reaches the same builders, and
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
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from simsci.errors import UnknownNameError, unknown_name


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
        from simsci.systems._registry import SYSTEMS

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
    from simsci.systems._registry import SYSTEMS

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


# ------------------------------------------------------------ shared helpers
def check_count(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer (episodes), got {n!r}")
    return int(n)


def check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def check_fraction(name: str, value, *, allow_zero: bool = False, what: str = "") -> float:
    """A number in (0, 1] (``allow_zero``: [0, 1]), else a ValueError naming the rule."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    value = float(value)
    ok = 0.0 <= value <= 1.0 if allow_zero else 0.0 < value <= 1.0
    if not (math.isfinite(value) and ok):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise ValueError(
            f"{name} must lie in {interval}{f' ({what})' if what else ''}, got {value}"
        )
    return value


def check_positive(name: str, value, *, integer: bool = False, minimum=None) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if integer and (not float(value).is_integer()):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value) if integer else float(value)
    low = minimum if minimum is not None else (1 if integer else 0.0)
    ok = value >= low if (integer or minimum is not None) else value > 0
    if not (math.isfinite(value) and ok):
        rule = f">= {low}" if (integer or minimum is not None) else "> 0"
        raise ValueError(f"{name} must be a finite number {rule}, got {value!r}")
    return value


def check_split(split: Sequence[float]) -> tuple[float, float, float]:
    try:
        fractions = tuple(float(f) for f in split)
    except (TypeError, ValueError):
        raise ValueError(
            f"split must be three fractions (train, val, test), got {split!r}"
        ) from None
    if (
        len(fractions) != 3
        or any(not math.isfinite(f) or f < 0 for f in fractions)
        or abs(sum(fractions) - 1.0) > 1e-9
    ):
        raise ValueError(
            f"split must be three non-negative fractions (train, val, test) summing to 1, "
            f"got {tuple(split)}"
        )
    return fractions


def streams(seed: int, names: Sequence[str]) -> dict[str, torch.Generator]:
    """One independent CPU generator per name, spawned from ``SeedSequence(seed)``."""
    from simsci.systems._generate import _generator

    root = np.random.SeedSequence(seed)
    return {k: _generator(s) for k, s in zip(names, root.spawn(len(names)))}


def kept_indices(count: int, length: int, keep: float, generator) -> np.ndarray:
    """``(count, k)`` sorted indices of the kept grid points, ``k = max(2, round(keep L))``
    (at most L), uniformly without replacement (``generate``'s rule)."""
    k = min(length, max(2, round(keep * length)))
    scores = torch.rand((count, length), generator=generator, dtype=torch.float64)
    return np.sort(scores.argsort(dim=1)[:, :k].numpy(), axis=1)


def split_ids(count: int, fractions, generator) -> np.ndarray:
    from simsci.systems._generate import _split_ids

    return _split_ids(count, fractions, generator)


def progress_bar(total: int, desc: str, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="episode")
