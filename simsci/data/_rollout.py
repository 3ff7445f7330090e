"""What a rollout file (kind="rollout") says about the environment that recorded it.

``simsci.envs.RecordEpisodes`` writes the file meta ``env_id``, ``env_kwargs`` and
``max_episode_steps`` (the episode length, which ``gymnasium.make`` takes as its own
argument and keeps beside the constructor keywords). Models that learn from rollout
files (surrogates of an environment) read them back here, below the environments, so
no model imports ``simsci.envs``.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["recorded_env_kwargs"]


def recorded_env_kwargs(meta: Mapping) -> dict:
    """The constructor keywords of the environment a rollout file recorded (``meta`` of
    the file): ``env_kwargs`` plus the episode length, which the file keeps beside them
    (``gymnasium.make`` takes it as its own argument) and simsci environments take as
    the keyword ``max_episode_steps``. What a surrogate model records as ``env_kwargs``."""
    kwargs = dict(meta.get("env_kwargs") or {})
    if meta.get("max_episode_steps") is not None:
        kwargs.setdefault("max_episode_steps", int(meta["max_episode_steps"]))
    return kwargs
