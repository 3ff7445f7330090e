"""The one seeding point of every training command.

Same seed, same data, same device and thread count: bit-identical results. That needs
every random draw of a run -- data that is drawn (behaviour-cloning rollouts, context
windows), the model's initial weights, and the training loop -- to come from the seed,
so each training entry (``simsci train NAME`` through its registry entry, ``simsci zoo
build``, ``simsci dynadiff train``, ``simsci driving ppo``, ``simsci train
vectorworld``) calls :func:`seed_everything` once, first, before it loads data that
draws, builds a model or starts a :class:`simsci.train.Trainer`. The Trainer seeds the
global generators again when ``fit`` starts (or restores a resumed checkpoint's states),
so the training loop itself does not depend on what ran before it.
"""

from __future__ import annotations

import numpy as np

from simsci.train._checkpoint import seed_all


def seed_everything(seed) -> int:
    """Seed python's ``random``, numpy's global generator and torch (CPU and every CUDA
    device) with ``seed``; returns it as an int.

    ``seed`` must be a non-negative integer below 2**63 (what :class:`TrainConfig`
    accepts): a bool, float or negative number is a TypeError/ValueError that says so.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(
            f"seed must be a non-negative integer, got {seed!r} ({type(seed).__name__})"
        )
    seed = int(seed)
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed must be a non-negative integer below 2**63, got {seed}")
    seed_all(seed)
    return seed
