"""Record gymnasium episodes into trajectory files of kind="rollout".

``RecordEpisodes`` wraps a single environment, ``RecordVectorEpisodes`` a vector
environment; both write one episode per reset -> terminated/truncated into one file
(shared/design/trajectory-format.md, kind="rollout")::

    env = RecordEpisodes(gymnasium.make("Pendulum-v1"), "pendulum.h5", max_episodes=10)
    obs, info = env.reset(seed=0)
    ...                      # step as usual
    env.close()              # pendulum.h5 appears now (complete), never before

Row layout of an episode of T actions (T+1 rows):

    t           float64 (T+1,)      info["t"] when the env reports it, else 0, 1, ..., T
    x           (T+1, *obs_shape)   observation x_j (the last row: the final observation)
    x.<key>     (T+1, *entry_shape) instead of x for a Dict observation: one field per
                                    entry (nested Dicts: x.<key>.<subkey>), Box entries in
                                    their dtype, Discrete entries int64 (see _spaces.py)
    action      (T+1, *act_shape)   Box: the action space's dtype, last row NaN;
                (T+1,) int64        Discrete: last row 0
    reward      float32 (T+1,)      the reward that followed action j; last row NaN
    terminated  bool (T+1,)         the flags that followed action j; last row False
    truncated   bool (T+1,)
    state       float64 (T+1, *state_shape)   info["state"], only when the env reports it

and one episode field ``seed`` (int64): the seed given to the reset that started the
episode, -1 when that reset had none (autoresets and unseeded resets).

Design choices (and why):

- **The file appears when recording ends.** Episodes go through
  ``simsci.data.TrajectoryWriter``, which writes a hidden temporary sibling and renames
  it on close: a process that dies mid-recording leaves nothing under ``path``. The
  writer is created when the first episode ends (the file meta records the seed of the
  first reset, known only then) and closed by ``close()`` or as soon as
  ``max_episodes`` episodes are recorded, whichever comes first. A wrapper dropped
  without ``close()`` discards its recording: close it (or use ``with``).
- **Interrupted episodes.** An episode still running when ``close()`` (or a new
  ``reset()`` of that env) comes is written with ``truncated=True`` on its last
  transition: the data up to there are valid, the episode was cut short from outside
  (time-limit semantics). One without any transition is dropped. Steps taken after an
  episode ended and before the next reset (not a gymnasium episode) are not recorded.
- **Dict observations** are stored one step field per entry, ``x.<key>``, with the Dict
  described in the meta ``observation_space``: plain step fields of format version 1
  that every reader takes, and ``simsci.envs.rollout_observations(file, i)`` gives the
  Dict back (the layout and its reasons are in ``envs/_spaces.py``). Entries must be
  Box, Discrete or Dict spaces with str keys without "." or "/"; other spaces are
  refused when the wrapper is made. Names of an entry's last axis come from a dict
  ``env.unwrapped.obs_names`` = ``{key: [names]}``.
- **Dtypes.** ``x`` and Box actions keep the spaces' dtypes (float32 for every simsci
  environment, lossless for others); actions are cast to the action space's dtype as a
  Box contains them. ``reward`` is float32 as the format says (a float64 reward is
  rounded to the nearest float32).
- **Vector environments.** One buffer per sub-environment; episodes are written in the
  order they finish (by sub-env index within one step). ``autoreset_mode`` (from
  ``env.metadata``, default NEXT_STEP): NEXT_STEP -- the step after a sub-env finished
  returns its reset observation (reward 0, flags False) and is the start of the next
  episode, not a transition; SAME_STEP -- the finishing step returns the next episode's
  first observation and ``infos["final_obs"]`` / ``infos["final_info"]`` hold the final
  ones; DISABLED -- the user resets finished sub-envs with ``options["reset_mask"]``.
  Arrays may be numpy or torch tensors (converted to numpy for storage).
- **File meta**: ``env_id``, ``env_kwargs`` and ``max_episode_steps`` from ``env.spec``
  (values JSON cannot hold are stored as their ``str``), ``dt`` from
  ``env.unwrapped.dt`` (None when absent), ``seed`` (the seed of the first reset),
  ``observation_space`` / ``action_space`` (JSON descriptions, see ``space_to_json``),
  ``recorder``, and for vector envs ``num_envs``, ``autoreset_mode`` and
  ``vector_kwargs`` (the vector entry point's ``autoreset_mode`` / ``array_backend``,
  kept out of ``env_kwargs`` so that ``gymnasium.make(env_id, **env_kwargs)`` rebuilds
  one sub-environment). The user's ``meta`` adds keys (it may not replace these).
  Names of the last axis of ``x`` / ``state`` come from ``env.unwrapped.obs_names``
  (or ``observation_names``) / ``state_names`` when the env has them (else from
  ``env.unwrapped.dynamics`` or ``dynamics.system``); state names need
  ``env.unwrapped.state_shape``.
- **SAME_STEP without ``final_info["t"]``**: the final time is taken as the previous
  time plus ``dt`` (an env that reports ``t`` should put it in ``final_info`` too).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorWrapper

from simsci._io import check_parent_dir
from simsci.data import (
    TrajectoryWriter,
    # moved to simsci.data (models read it below the environments); importable here
    # until every caller imports it from simsci.data
    recorded_env_kwargs,  # noqa: F401
)
from simsci.envs._spaces import (
    OBS_FIELD,
    jsonable,
    leaf_dtype,
    leaf_shape,
    observation_fields,
    space_from_json,
    space_to_json,
    split_observation,
)
from simsci.envs._spaces import to_numpy as _np

__all__ = ["RecordEpisodes", "RecordVectorEpisodes", "space_from_json", "space_to_json"]

_COMPRESSIONS = (None, "gzip", "lzf")
#: make_vec's own arguments, which it stores in the spec's kwargs (not env arguments).
_VECTOR_SPEC_KEYS = ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers")
#: arguments of a vector entry point that a single env does not take (meta vector_kwargs).
_VECTOR_ONLY_KWARGS = ("autoreset_mode", "array_backend")
#: file meta keys the recorder writes (a user's meta may not replace them).
_OWN_META = (
    "env_id",
    "env_kwargs",
    "max_episode_steps",
    "dt",
    "seed",
    "observation_space",
    "action_space",
    "recorder",
    "num_envs",
    "autoreset_mode",
    "vector_kwargs",
)


# --------------------------------------------------------------------------- helpers
def _check_spaces(obs_space, action_space, who: str) -> dict[str, spaces.Space]:
    """The observation's step fields (``observation_fields``); TypeError for spaces the
    recorder cannot store."""
    fields = observation_fields(obs_space, who)
    if not isinstance(action_space, (spaces.Box, spaces.Discrete)):
        raise TypeError(
            f"{who} records Box or Discrete actions, got the action space {action_space}"
        )
    return fields


def _check_seed(seed, who: str) -> None:
    ok = seed is None or (
        isinstance(seed, (int, np.integer))
        and not isinstance(seed, bool)
        and 0 <= int(seed) < 2**63
    )
    if not ok:
        raise ValueError(
            f"{who}: reset seeds must be None or ints in 0..2**63-1 (the recorder stores "
            f"them as int64), got {seed!r}"
        )


def _name_list(names, shape: tuple, what: str, label: str, attr: str) -> list[str]:
    names = [str(n) for n in names]
    width = shape[-1] if shape else 1
    if len(names) != width:
        raise ValueError(
            f"{label} has {len(names)} names but the {what}'s last axis has {width} "
            f"entries (shape {tuple(shape)}); fix the env's {attr}"
        )
    return names


def _names(src, attrs: Sequence[str], shape: tuple, what: str) -> list[str] | None:
    for attr in attrs:
        names = getattr(src, attr, None)
        if names is None:
            continue
        return _name_list(names, shape, what, f"{type(src).__name__}.{attr}", attr)
    return None


def _spec_meta(spec) -> dict:
    """env_id, env_kwargs and max_episode_steps (the TimeLimit) of a gymnasium spec."""
    if spec is None:
        return {"env_id": None, "env_kwargs": {}, "max_episode_steps": None}
    kwargs = {k: v for k, v in (spec.kwargs or {}).items() if k not in _VECTOR_SPEC_KEYS}
    steps = kwargs.pop("max_episode_steps", None)  # make_vec passes the limit as a kwarg
    if spec.max_episode_steps is not None:
        steps = spec.max_episode_steps
    return {
        "env_id": spec.id,
        "env_kwargs": jsonable(kwargs),
        "max_episode_steps": None if steps is None else int(steps),
    }


def _float_attr(obj, name: str) -> float | None:
    value = getattr(obj, name, None)
    if value is None:
        return None
    try:
        value = float(_np(value))
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


class _Episode:
    """The rows of one running episode (lists of per-step values)."""

    __slots__ = ("seed", "obs", "t", "state", "actions", "rewards", "terminated", "truncated")

    def __init__(self, seed, obs, t, state):
        self.seed = -1 if seed is None else int(seed)
        self.obs = [obs]
        self.t = [t]
        self.state = [state]
        self.actions: list = []
        self.rewards: list[float] = []
        self.terminated: list[bool] = []
        self.truncated: list[bool] = []

    def __len__(self) -> int:
        """Transitions (actions) so far."""
        return len(self.actions)

    def add(self, action, reward, terminated, truncated, obs, t, state) -> None:
        self.actions.append(action)
        self.rewards.append(float(reward))
        self.terminated.append(bool(terminated))
        self.truncated.append(bool(truncated))
        self.obs.append(obs)
        self.t.append(t)
        self.state.append(state)


class _Recorder:
    """What both wrappers share: conversion of steps to rows and the (lazy) writer."""

    def __init__(
        self,
        path,
        *,
        who: str,
        obs_space: spaces.Space,
        obs_fields: dict[str, spaces.Space],
        action_space: spaces.Space,
        system: str,
        meta: dict,
        user_meta,
        names: dict,
        max_episodes,
        compression,
    ):
        self.who = who
        path = check_parent_dir(path)  # a clear error before anything is stepped
        if path.is_dir():
            raise ValueError(
                f"{who}: {str(path)!r} is a directory; give the path of the .h5 file to write"
            )
        self.path = Path(path)
        if max_episodes is not None and (
            isinstance(max_episodes, bool)
            or not isinstance(max_episodes, (int, np.integer))
            or max_episodes < 1
        ):
            raise ValueError(
                f"{who}: max_episodes must be a positive int or None, got {max_episodes!r}"
            )
        if compression not in _COMPRESSIONS:
            raise ValueError(
                f"{who}: compression must be None, 'gzip' or 'lzf', got {compression!r}"
            )
        if user_meta is None:
            user_meta = {}
        if not isinstance(user_meta, Mapping):
            raise TypeError(f"{who}: meta must be a dict, got {type(user_meta).__name__}")
        clash = sorted(set(user_meta) & set(_OWN_META))
        if clash:
            raise ValueError(
                f"{who}: meta keys {clash} are written by the recorder itself; rename them"
            )
        try:
            json.dumps(dict(user_meta), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{who}: meta must be JSON-serialisable (str, numbers, lists, dicts; no NaN): {exc}"
            ) from exc
        self.obs_space = obs_space
        self.action_space = action_space
        self.discrete = isinstance(action_space, spaces.Discrete)
        # step field -> (per-step shape, dtype, Discrete?): "x", or "x.<key>" per Dict entry
        self.obs_fields = {
            name: (leaf_shape(sub), leaf_dtype(sub), isinstance(sub, spaces.Discrete))
            for name, sub in obs_fields.items()
        }
        if not self.discrete:
            self.act_shape = tuple(action_space.shape)
            self.act_dtype = np.dtype(action_space.dtype)
        self.system = system
        self.meta = {
            **meta,
            "observation_space": space_to_json(obs_space),
            "action_space": space_to_json(action_space),
            **dict(user_meta),
        }
        self.names = names
        self.dt = meta.get("dt")
        self.max_episodes = None if max_episodes is None else int(max_episodes)
        self.compression = compression
        self.first_seed = None  # the seed argument of the first reset (file meta)
        self._reset_seen = False
        self.has_t: bool | None = None  # decided by the first observation recorded
        self.has_state: bool | None = None
        self.count = 0
        self.active = True
        self._writer: TrajectoryWriter | None = None
        self._done = False

    # ------------------------------------------------------------- conversion
    def obs(self, value, where: str) -> dict[str, np.ndarray]:
        """One observation as ``{step field: array}`` (copies in the stored dtypes)."""
        out = {}
        entries = split_observation(value, self.obs_fields, f"{self.who}: {where}")
        for name, entry in entries.items():
            shape, dtype, discrete = self.obs_fields[name]
            arr = _np(entry)
            what = "observation" if name == OBS_FIELD else f"observation entry {name!r}"
            if discrete and (arr.size != 1 or arr.dtype.kind not in "iu"):
                raise ValueError(
                    f"{self.who}: {where}: the {what} is Discrete, one integer, got {entry!r}"
                )
            if not discrete and arr.shape != shape:
                raise ValueError(
                    f"{self.who}: {where}: {what} of shape {arr.shape}, but the "
                    f"observation space has shape {shape}"
                )
            out[name] = np.array(arr, dtype=dtype, copy=True).reshape(shape)
        return out

    def action(self, value, where: str):
        arr = _np(value)
        if self.discrete:
            if arr.size != 1 or arr.dtype.kind not in "iub":
                raise ValueError(
                    f"{self.who}: {where}: a Discrete action is one integer, got {value!r}"
                )
            return int(arr.reshape(()))
        if arr.size != int(np.prod(self.act_shape, dtype=np.int64)):
            raise ValueError(
                f"{self.who}: {where}: action of shape {arr.shape}, but the action space "
                f"has shape {self.act_shape}"
            )
        return np.array(arr, dtype=self.act_dtype, copy=True).reshape(self.act_shape)

    def time_state(self, t, state, where: str):
        """Check the info's "t"/"state" against what the first reset reported."""
        if self.has_t is None:
            self.has_t = t is not None
            self.has_state = state is not None
        for key, value, want in (("t", t, self.has_t), ("state", state, self.has_state)):
            if want and value is None:
                raise RuntimeError(
                    f"{self.who}: {where}: the info has no {key!r}, but the first reset's "
                    f"info had one; an env reports {key!r} always or never"
                )
        t = float(_np(t).reshape(())) if self.has_t else None
        state = np.array(_np(state), dtype=np.float64, copy=True) if self.has_state else None
        return t, state

    def note_reset(self, seed) -> None:
        if not self._reset_seen:
            self._reset_seen = True
            self.first_seed = seed

    def start(self, seed, obs, t, state, where: str) -> _Episode | None:
        if not self.active:
            return None
        obs = self.obs(obs, where)
        t, state = self.time_state(t, state, where)
        return _Episode(seed, obs, t, state)

    def add(self, ep: _Episode, action, reward, terminated, truncated, obs, t, state, where):
        obs = self.obs(obs, where)
        t, state = self.time_state(t, state, where)
        ep.add(action, reward, terminated, truncated, obs, t, state)

    def rows(self, ep: _Episode, interrupted: bool) -> dict:
        n = len(ep)
        if self.discrete:
            action = np.zeros(n + 1, np.int64)
            action[:n] = ep.actions
        else:
            fill = np.nan if self.act_dtype.kind == "f" else 0
            action = np.full((n + 1, *self.act_shape), fill, self.act_dtype)
            if n:
                action[:n] = np.stack(ep.actions)
        reward = np.full(n + 1, np.nan, np.float32)
        reward[:n] = ep.rewards
        terminated = np.zeros(n + 1, np.bool_)
        terminated[:n] = ep.terminated
        truncated = np.zeros(n + 1, np.bool_)
        truncated[:n] = ep.truncated
        if interrupted:
            truncated[n - 1] = True
        t = np.asarray(ep.t, np.float64) if self.has_t else np.arange(n + 1, dtype=np.float64)
        out = {
            "t": t,
            **{name: np.stack([o[name] for o in ep.obs]) for name in self.obs_fields},
            "action": action,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
        }
        if self.has_state:
            out["state"] = np.stack(ep.state)
        out["seed"] = np.int64(ep.seed)
        return out

    # ---------------------------------------------------------------- writing
    def _open_writer(self) -> TrajectoryWriter:
        if self._writer is None:
            meta = dict(self.meta)
            meta["seed"] = jsonable(self.first_seed)
            names = dict(self.names)
            if not self.has_state:
                names.pop("state", None)
            self._writer = TrajectoryWriter(
                self.path,
                kind="rollout",
                system=self.system,
                meta=meta,
                names=names,
                episode_fields=("seed",),
                compression=self.compression,
            )
        return self._writer

    def finish(self, ep: _Episode | None, *, interrupted: bool = False) -> None:
        """Write ``ep`` (ended, or ``interrupted`` from outside) when recording."""
        if ep is None or not self.active:
            return
        if interrupted and len(ep) == 0:
            return  # a reset without a transition is no episode
        rows = self.rows(ep, interrupted)
        self._open_writer().append(rows)
        self.count += 1
        if self.max_episodes is not None and self.count >= self.max_episodes:
            self.close()

    def close(self) -> None:
        """Write the file (an empty one when no episode ended); idempotent."""
        self.active = False
        if self._done:
            return
        self._done = True
        self._open_writer().close()


def _single_meta(env, who: str) -> tuple[str, dict, dict]:
    unwrapped = env.unwrapped
    meta = {**_spec_meta(env.spec), "dt": _float_attr(unwrapped, "dt"), "recorder": who}
    system = meta["env_id"] or type(unwrapped).__name__
    return system, meta, unwrapped


def _entry_names(src, obs_fields: dict[str, spaces.Space]) -> dict | None:
    """Names of the Dict entries' last axes from ``src.obs_names`` (or
    ``observation_names``) when that is a mapping ``{key: [names]}`` (nested keys joined
    with "."); entries it does not name get none."""
    for attr in ("obs_names", "observation_names"):
        table = getattr(src, attr, None)
        if table is None:
            continue
        if not isinstance(table, Mapping):
            raise ValueError(
                f"{type(src).__name__}.{attr} is a list, but the observation space is a "
                "Dict; give a dict {key: [names of the entry's last axis]} (or None)"
            )
        out = {}
        for key, names in table.items():
            field = f"{OBS_FIELD}.{key}"
            if field not in obs_fields:
                raise ValueError(
                    f"{type(src).__name__}.{attr} names the entry {key!r}, which the "
                    f"observation Dict does not have ({[f[2:] for f in obs_fields]})"
                )
            label = f"{type(src).__name__}.{attr}[{key!r}]"
            shape = leaf_shape(obs_fields[field])
            out[field] = _name_list(names, shape, f"entry {key!r}", label, attr)
        return out
    return None


def _names_for(unwrapped, obs_fields: dict[str, spaces.Space]) -> dict:
    """Names of x (or the x.<key> entries) / state from the env (or its ``dynamics`` /
    ``dynamics.system``)."""
    dynamics = getattr(unwrapped, "dynamics", None)
    candidates = (unwrapped, dynamics, getattr(dynamics, "system", None))
    sources = [o for o in candidates if o is not None]
    names = {}
    for src in sources:
        if OBS_FIELD in obs_fields:
            shape = tuple(obs_fields[OBS_FIELD].shape)
            found = _names(src, ("obs_names", "observation_names"), shape, "observation")
            if found is not None:
                names[OBS_FIELD] = found
                break
        else:
            found = _entry_names(src, obs_fields)
            if found is not None:
                names.update(found)
                break
    state_shape = getattr(unwrapped, "state_shape", None)
    if state_shape is not None:
        for src in sources:
            found = _names(src, ("state_names",), tuple(state_shape), "state")
            if found is not None:
                names["state"] = found
                break
    return names


def _info_value(info, key: str):
    if not isinstance(info, Mapping) or key not in info:
        return None
    return info[key]


# ------------------------------------------------------------------ single env
class RecordEpisodes(gymnasium.Wrapper):
    """Record every episode of ``env`` into the rollout file ``path``.

    ``RecordEpisodes(env, path, *, max_episodes=None, meta=None, compression=None)``:
    ``max_episodes`` stops recording (and writes the file) after that many episodes;
    ``meta`` adds JSON-able keys to the file meta; ``compression`` None, "gzip" or
    "lzf". The file appears at ``close()`` (or when ``max_episodes`` are recorded); an
    episode still running then is stored with ``truncated=True`` on its last
    transition. See the module docstring for the row layout. ``recorded`` counts the
    episodes written so far.
    """

    def __init__(
        self,
        env: gymnasium.Env,
        path: str | os.PathLike,
        *,
        max_episodes: int | None = None,
        meta: Mapping | None = None,
        compression: str | None = None,
    ):
        super().__init__(env)
        who = type(self).__name__
        obs_fields = _check_spaces(env.observation_space, env.action_space, who)
        system, base, unwrapped = _single_meta(env, who)
        self._rec = _Recorder(
            path,
            who=who,
            obs_space=env.observation_space,
            obs_fields=obs_fields,
            action_space=env.action_space,
            system=system,
            meta=base,
            user_meta=meta,
            names=_names_for(unwrapped, obs_fields),
            max_episodes=max_episodes,
            compression=compression,
        )
        self._episode: _Episode | None = None

    @property
    def path(self) -> Path:
        """The file being recorded."""
        return self._rec.path

    @property
    def recorded(self) -> int:
        """Episodes written so far."""
        return self._rec.count

    def reset(self, *, seed=None, options=None):
        _check_seed(seed, type(self).__name__)
        obs, info = self.env.reset(seed=seed, options=options)
        self._rec.note_reset(seed)
        self._rec.finish(self._episode, interrupted=True)
        self._episode = self._rec.start(
            seed, obs, _info_value(info, "t"), _info_value(info, "state"), "reset"
        )
        return obs, info

    def step(self, action):
        ep = self._episode
        if ep is not None:
            stored = self._rec.action(action, f"step {len(ep)}")
        obs, reward, terminated, truncated, info = self.env.step(action)
        if ep is not None and self._rec.active:
            self._rec.add(
                ep,
                stored,
                float(_np(reward)),
                bool(_np(terminated)),
                bool(_np(truncated)),
                obs,
                _info_value(info, "t"),
                _info_value(info, "state"),
                f"step {len(ep)}",
            )
            if ep.terminated[-1] or ep.truncated[-1]:
                self._episode = None
                self._rec.finish(ep)
        return obs, reward, terminated, truncated, info

    def close(self):
        """Write the recording (see the class docstring), then close ``env``."""
        try:
            if self._rec.active:
                self._rec.finish(self._episode, interrupted=True)
            self._episode = None
            self._rec.close()
        finally:
            super().close()


# ------------------------------------------------------------------ vector env
def _autoreset_mode(env) -> AutoresetMode:
    mode = (getattr(env, "metadata", None) or {}).get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if isinstance(mode, AutoresetMode):
        return mode
    try:
        return AutoresetMode(mode)
    except ValueError:
        valid = [m.value for m in AutoresetMode]
        raise ValueError(
            f"env.metadata['autoreset_mode'] = {mode!r} is not one of {valid}"
        ) from None


def _sub(infos, key: str, i: int):
    """``infos[key][i]`` of a vector info dict; None when absent for sub-env ``i``."""
    if not isinstance(infos, Mapping) or key not in infos:
        return None
    mask = infos.get("_" + key)
    if mask is not None and not bool(_np(mask)[i]):
        return None
    value = infos[key]
    if isinstance(value, Mapping):
        return value
    return value[i]


def _batch(obs):
    """A vector env's observations as numpy: an array, or a (nested) dict of arrays."""
    if isinstance(obs, Mapping):
        return {k: _batch(v) for k, v in obs.items()}
    return _np(obs)


def _row(obs, i: int):
    """Sub-env ``i``'s observation of a batch (an array, or a nested dict of arrays). In
    a dict, a key ``_k`` beside ``k`` is a vector info's mask (SyncVectorEnv stores a
    Dict ``final_obs`` so) and is left out."""
    if isinstance(obs, Mapping):
        return {
            k: _row(v, i)
            for k, v in obs.items()
            if not (isinstance(k, str) and k.startswith("_") and k[1:] in obs)
        }
    return obs[i]


def _final_obs(infos, i: int):
    """``infos["final_obs"]`` of sub-env ``i`` (SAME_STEP); None when absent for it."""
    if not isinstance(infos, Mapping) or "final_obs" not in infos:
        return None
    mask = infos.get("_final_obs")
    if mask is not None and not bool(_np(mask)[i]):
        return None
    return _row(infos["final_obs"], i)


def _vector_seeds(seed, n: int, who: str) -> list:
    if seed is None:
        return [None] * n
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        seeds = [int(seed) + i for i in range(n)]
    elif isinstance(seed, Sequence) and not isinstance(seed, str):
        seeds = list(seed)
        if len(seeds) != n:
            raise ValueError(f"{who}: a list of seeds needs num_envs={n} entries, got {len(seeds)}")
    else:
        raise ValueError(f"{who}: seed must be None, an int or a list of ints, got {seed!r}")
    for s in seeds:
        _check_seed(s, who)
    return seeds


def _vector_meta(env, who: str) -> tuple[str, dict, object]:
    unwrapped = env.unwrapped
    spec = env.spec
    subs = getattr(unwrapped, "envs", None)
    sub0 = subs[0] if isinstance(subs, Sequence) and subs else None
    if spec is None and sub0 is not None:
        spec = getattr(sub0, "spec", None)
    dt = _float_attr(unwrapped, "dt")
    if dt is None and sub0 is not None:
        dt = _float_attr(getattr(sub0, "unwrapped", sub0), "dt")
    spec_meta = _spec_meta(spec)
    vector_kwargs = {
        k: spec_meta["env_kwargs"].pop(k)
        for k in _VECTOR_ONLY_KWARGS
        if k in spec_meta["env_kwargs"]
    }
    meta = {
        **spec_meta,
        "vector_kwargs": vector_kwargs,
        "dt": dt,
        "recorder": who,
        "num_envs": int(env.num_envs),
        "autoreset_mode": _autoreset_mode(env).value,
    }
    system = meta["env_id"] or type(unwrapped).__name__
    names_source = unwrapped
    if not any(hasattr(unwrapped, a) for a in ("obs_names", "observation_names", "state_names")):
        names_source = getattr(sub0, "unwrapped", unwrapped) if sub0 is not None else unwrapped
    return system, meta, names_source


class RecordVectorEpisodes(VectorWrapper):
    """Record every sub-environment episode of a vector env into one rollout file.

    ``RecordVectorEpisodes(env, path, *, max_episodes=None, meta=None, compression=None)``
    with the meaning of ``RecordEpisodes``. Episodes are written in the order they
    finish; the autoreset mode is read from ``env.metadata["autoreset_mode"]`` (see the
    module docstring). ``env`` may return numpy arrays or torch tensors.
    """

    def __init__(
        self,
        env: gymnasium.vector.VectorEnv,
        path: str | os.PathLike,
        *,
        max_episodes: int | None = None,
        meta: Mapping | None = None,
        compression: str | None = None,
    ):
        super().__init__(env)
        who = type(self).__name__
        obs_fields = _check_spaces(env.single_observation_space, env.single_action_space, who)
        self._mode = _autoreset_mode(env)
        system, base, names_source = _vector_meta(env, who)
        self._rec = _Recorder(
            path,
            who=who,
            obs_space=env.single_observation_space,
            obs_fields=obs_fields,
            action_space=env.single_action_space,
            system=system,
            meta=base,
            user_meta=meta,
            names=_names_for(names_source, obs_fields),
            max_episodes=max_episodes,
            compression=compression,
        )
        self._n = int(env.num_envs)
        self._episodes: list[_Episode | None] = [None] * self._n
        # NEXT_STEP: sub-envs whose next step returns a reset observation, not a transition
        self._autoreset = np.zeros(self._n, np.bool_)

    @property
    def path(self) -> Path:
        """The file being recorded."""
        return self._rec.path

    @property
    def recorded(self) -> int:
        """Episodes written so far."""
        return self._rec.count

    @property
    def autoreset_mode(self) -> AutoresetMode:
        return self._mode

    def _start(self, i: int, seed, obs, infos, where: str) -> None:
        self._episodes[i] = self._rec.start(
            seed, _row(obs, i), _sub(infos, "t", i), _sub(infos, "state", i), where
        )

    def reset(self, *, seed=None, options=None):
        who = type(self).__name__
        seeds = _vector_seeds(seed, self._n, who)
        mask = None
        if isinstance(options, Mapping) and options.get("reset_mask") is not None:
            # read before the env pops it from the dict
            mask = _np(options["reset_mask"]).astype(np.bool_).reshape(-1)
            if mask.shape != (self._n,):
                raise ValueError(
                    f"{who}: options['reset_mask'] must have shape ({self._n},), got {mask.shape}"
                )
        obs, infos = self.env.reset(seed=seed, options=options)
        self._rec.note_reset(seed)
        which = range(self._n) if mask is None else np.flatnonzero(mask)
        obs_np = _batch(obs)
        for i in which:
            self._rec.finish(self._episodes[i], interrupted=True)
            self._episodes[i] = None
            self._autoreset[i] = False
            self._start(int(i), seeds[i], obs_np, infos, f"reset of sub-env {i}")
        return obs, infos

    def step(self, actions):
        rec = self._rec
        stored = None
        if rec.active:
            acts = _np(actions)
            if len(acts) != self._n:
                raise ValueError(
                    f"{type(self).__name__}: actions need num_envs={self._n} rows, got shape "
                    f"{acts.shape}"
                )
            stored = [
                rec.action(acts[i], f"step of sub-env {i}")
                if self._episodes[i] is not None
                else None
                for i in range(self._n)
            ]
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        if rec.active:
            self._record(stored, obs, rewards, terminations, truncations, infos)
        return obs, rewards, terminations, truncations, infos

    def _record(self, stored, obs, rewards, terminations, truncations, infos) -> None:
        rec = self._rec
        obs = _batch(obs)
        rewards = _np(rewards).reshape(-1)
        terminations = _np(terminations).reshape(-1).astype(np.bool_)
        truncations = _np(truncations).reshape(-1).astype(np.bool_)
        same_step = self._mode == AutoresetMode.SAME_STEP
        finished = []
        for i in range(self._n):
            where = f"step of sub-env {i}"
            if self._mode == AutoresetMode.NEXT_STEP and self._autoreset[i]:
                # the reset step: obs[i] starts the next episode, nothing was transitioned
                self._autoreset[i] = False
                self._start(i, None, obs, infos, f"autoreset of sub-env {i}")
                continue
            done = bool(terminations[i] or truncations[i])
            ep = self._episodes[i]
            if ep is not None:
                if same_step and done:
                    final_obs = _final_obs(infos, i)
                    if final_obs is None:
                        raise RuntimeError(
                            f"{rec.who}: {where}: autoreset_mode SAME_STEP but "
                            "infos has no 'final_obs' for a finished sub-env"
                        )
                    final_info = _sub(infos, "final_info", i)
                    t, state = _sub(final_info, "t", i), _sub(final_info, "state", i)
                    if t is None and rec.has_t and rec.dt is not None:
                        t = ep.t[-1] + rec.dt  # an env that leaves t out of final_info
                    next_obs = final_obs
                else:
                    t, state = _sub(infos, "t", i), _sub(infos, "state", i)
                    next_obs = _row(obs, i)
                rec.add(
                    ep,
                    stored[i],
                    float(rewards[i]),
                    bool(terminations[i]),
                    bool(truncations[i]),
                    next_obs,
                    t,
                    state,
                    where,
                )
            if done:
                if ep is not None:
                    finished.append(ep)
                self._episodes[i] = None
                if self._mode == AutoresetMode.NEXT_STEP:
                    self._autoreset[i] = True
                elif same_step:
                    self._start(i, None, obs, infos, f"autoreset of sub-env {i}")
        for ep in finished:
            rec.finish(ep)

    def close(self, **kwargs):
        """Write the recording (running episodes as truncated), then close ``env``."""
        try:
            for i, ep in enumerate(self._episodes):
                self._rec.finish(ep, interrupted=True)
                self._episodes[i] = None
            self._rec.close()
        finally:
            super().close(**kwargs)
