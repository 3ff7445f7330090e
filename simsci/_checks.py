"""Argument checks that need neither torch nor numpy's random streams, so that the data
layer (which never imports torch to write, read or check files) and the simulators
(:mod:`simsci._seeding`, which re-exports them) share one rule and one message."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["check_split"]


def check_split(split: Sequence[float]) -> tuple[float, float, float]:
    """Three finite, non-negative fractions (train, val, test) summing to 1."""
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
