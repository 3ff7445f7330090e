"""Seeded random streams, splits and argument checks shared by every simulator.

``generate`` (systems), the point processes and the dataset builders draw from the same
conventions, so they live below all of them: independent streams are spawned from one
:class:`numpy.random.SeedSequence` (``streams``), splits are exact counts assigned by a
seeded permutation (``split_ids``), irregular grids keep ``max(2, round(keep L))`` points
per episode (``kept_indices``). The checks raise ``ValueError``/``TypeError`` that state
the rule and what arrived.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from simsci._checks import check_split  # noqa: F401 - re-exported for the simulators


def generator(seq: np.random.SeedSequence) -> torch.Generator:
    """A CPU torch generator seeded from one spawned SeedSequence."""
    return torch.Generator().manual_seed(int(seq.generate_state(1, dtype=np.uint64)[0] >> 1))


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


def streams(seed: int, names: Sequence[str]) -> dict[str, torch.Generator]:
    """One independent CPU generator per name, spawned from ``SeedSequence(seed)``."""
    root = np.random.SeedSequence(seed)
    return {k: generator(s) for k, s in zip(names, root.spawn(len(names)))}


def kept_indices(count: int, length: int, keep: float, generator) -> np.ndarray:
    """``(count, k)`` sorted indices of the kept grid points, ``k = max(2, round(keep L))``
    (at most L), uniformly without replacement (``generate``'s rule)."""
    k = min(length, max(2, round(keep * length)))
    scores = torch.rand((count, length), generator=generator, dtype=torch.float64)
    return np.sort(scores.argsort(dim=1)[:, :k].numpy(), axis=1)


def split_ids(count: int, fractions, generator) -> np.ndarray:
    """Split labels (count,) uint8: 0 train, 1 val, 2 test, exact counts
    ``round(f_train n)`` and ``round(f_val n)``, assigned by a seeded permutation."""
    n_train = round(fractions[0] * count)
    n_val = min(round(fractions[1] * count), count - n_train)
    labels = np.full(count, 2, dtype=np.uint8)
    labels[:n_train] = 0
    labels[n_train : n_train + n_val] = 1
    perm = torch.randperm(count, generator=generator).numpy()
    return labels[perm]


def progress_bar(total: int, desc: str, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="episode")
