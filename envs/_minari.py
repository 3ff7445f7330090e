"""Convert rollout files (kind="rollout") to and from Minari datasets (offline RL).

``to_minari("pendulum.h5", "simsci/pendulum-random-v0")`` writes a Minari dataset under
``$MINARI_DATASETS_PATH`` (default ``~/.minari/datasets``); ``from_minari(dataset_id,
"out.h5")`` writes a rollout file from a local Minari dataset. Minari is an optional
dependency (``pip install "simsci[minari]"``), imported on first use.

Mapping of one episode of T transitions (T+1 rows in the file):

    file (T+1 rows)                  Minari episode
    x                                observations (T+1, *obs_shape)
    x.<key> (a Dict observation)     observations[key] (T+1, ...): Minari's own Dict
                                     layout (nested Dicts nest: x.<key>.<subkey>)
    action[:T]                       actions (T, ...)
    reward[:T], terminated[:T],      rewards, terminations, truncations (T,)
    truncated[:T]
    t, state, other step fields      infos[name] (T+1, ...), as Minari's DataCollector
                                     stores infos (one per observation)
    episode field seed (-1 = none)   the episode's seed (None)
    other episode fields             episode metadata "simsci_<name>"

Design choices (and why):

- **Lossless round trip.** The file's ``system``, ``meta``, field ``names`` and
  episode-field names travel in the dataset metadata key ``"simsci"`` (a JSON
  string), so file -> Minari -> file gives the same arrays, seeds, names and meta (the
  new file's meta adds ``converted_from`` and gets a fresh ``created_utc`` /
  ``simsci_version``). Images are stored unencoded (``jpeg_encoding=False``): Minari's
  default JPEG encoding is lossy.
- **Spaces and the environment.** ``env`` (an env, a gymnasium id or an EnvSpec) is
  attached to the dataset, so ``dataset.recover_environment()`` works; without it the
  file's ``env_id`` / ``env_kwargs`` / ``max_episode_steps`` are used when that id is
  registered with gymnasium (``simsci/...`` ids after importing simsci.envs) and the
  env can be made; otherwise the dataset has no env spec. Spaces come from the env,
  else from the space descriptions the recorder stores in the meta, else from the data
  (unbounded Box, Discrete(max action + 1)).
- **Safety.** Minari refuses to overwrite a dataset id; ``overwrite=True`` moves the old
  dataset aside and deletes it only after the new one is complete (restored on
  failure). A failed conversion deletes its partial dataset directory. Episodes are
  handed to Minari in chunks of about 64 MiB, so big files do not need to fit in memory.
- Minari episodes need at least one transition: a rollout episode with a single row is
  an error. Reading a foreign Minari dataset (not written by ``to_minari``) takes
  ``infos["t"]`` / ``infos["state"]`` as the step fields t / state when they have one
  entry per observation (else t = 0, 1, ..., T); it must have a Box or Dict observation
  space and a Box or Discrete action space.
- **Dict observations** (``x.<key>`` step fields, ``simsci/Driving-v0``) go to Minari
  as its native Dict observations, so Minari users (and ``recover_environment()``) get
  the environment's Dict; from a Minari dataset with a Dict observation space (entries
  Box, Discrete or Dict) each entry becomes the step field ``x.<key>``, and the space
  description goes to the file's meta as the recorder writes it. Other observation
  spaces (Tuple, Text, Graph, ...) are refused with the space named.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import secrets
import shutil
import warnings
from pathlib import Path

import gymnasium
import numpy as np
from gymnasium import spaces

from simsci._io import check_parent_dir
from simsci.data import Trajectories, TrajectoryWriter
from simsci.data import open as open_trajectories
from simsci.envs._spaces import (
    check_observation_fields,
    inferred_observation_space,
    is_observation_field,
    join_rows,
    jsonable,
    leaf_dtype,
    leaf_shape,
    observation_fields,
    space_from_json,
    space_to_json,
    split_observation,
)
from simsci.errors import MissingExtraError, UnknownNameError, unknown_name

__all__ = ["from_minari", "to_minari"]

#: Minari ids: ``(namespace/)name-v<version>``; Minari's parser needs the version.
_ID_RE = re.compile(r"^(?:[-\w][-\w/]*[-\w]/)?[-\w]+?-v\d+$")
#: the step fields of a rollout besides its observations (``x``, or ``x.<key>`` per entry)
_REQUIRED = ("action", "reward", "terminated", "truncated")
_CHUNK_BYTES = 64 * 2**20
_MINARI_NAG = r"(`\w+` is set to None|env_spec is None)"


def _minari():
    try:
        return importlib.import_module("minari")
    except ImportError as exc:
        raise MissingExtraError(
            "converting to and from Minari datasets needs the optional package minari; "
            'install it with: pip install "simsci[minari]"'
        ) from exc


def _check_id(dataset_id) -> str:
    if not isinstance(dataset_id, str) or not _ID_RE.match(dataset_id):
        raise ValueError(
            f"a Minari dataset id is '(namespace/)name-v<version>', e.g. "
            f"'simsci/pendulum-random-v0', got {dataset_id!r}"
        )
    return dataset_id


def _dataset_dir(dataset_id: str) -> Path:
    from minari.storage import get_dataset_path

    return Path(get_dataset_path(dataset_id))


# ------------------------------------------------------------------ to_minari
def _check_rollout(ds: Trajectories) -> None:
    where = str(ds.path)
    if ds.kind != "rollout":
        raise ValueError(
            f"{where}: kind={ds.kind!r}, but Minari datasets are made from rollout files "
            "(kind='rollout', written by RecordEpisodes / RecordVectorEpisodes)"
        )
    missing = [f for f in _REQUIRED if f not in ds.step_fields]
    if missing:
        raise ValueError(
            f"{where}: a rollout file needs the step fields x (or x.<key> for a Dict "
            f"observation) and {list(_REQUIRED)}; missing {missing}"
        )
    inferred_observation_space(ds)  # raises when there is no observation (x / x.<key>)
    short = np.flatnonzero(ds.lengths < 2)
    if len(short):
        raise ValueError(
            f"{where}, episode {int(short[0])}: has {int(ds.lengths[short[0]])} row(s), no "
            "transition; Minari stores episodes of at least one step (two rows)"
        )


def _inferred_spaces(ds: Trajectories) -> tuple[spaces.Space, spaces.Space]:
    act = ds.step_fields["action"]
    obs_space = inferred_observation_space(ds)
    if act.dtype.kind in "iu":
        top = max(
            (int(ds.read(i, "action")["action"][:-1].max()) for i in range(len(ds))), default=0
        )
        return obs_space, spaces.Discrete(top + 1)
    return obs_space, spaces.Box(-np.inf, np.inf, shape=act.shape, dtype=act.dtype)


def _fits(ds: Trajectories, obs_space, action_space) -> str | None:
    """Why the spaces do not describe the file's data (None when they do)."""
    act = ds.step_fields["action"]
    why = check_observation_fields(ds, obs_space, "to_minari")
    if why is not None:
        return f"observation space {obs_space}: {why}"
    if isinstance(action_space, spaces.Discrete):
        if act.dtype.kind not in "iu" or act.shape != ():
            return f"action space {action_space} vs actions {act.dtype} {act.shape}"
    elif isinstance(action_space, spaces.Box):
        if act.dtype.kind != "f" or tuple(action_space.shape) != act.shape:
            return f"action space {action_space} vs actions {act.dtype} {act.shape}"
    else:
        return f"action space {action_space} is neither Box nor Discrete"
    return None


def _make_env(env, ds: Trajectories):
    """(env or None, made_here) from the ``env`` argument or the file's meta."""
    if isinstance(env, gymnasium.Env):
        return env, False
    if env is not None:
        if not isinstance(env, (str, gymnasium.envs.registration.EnvSpec)):
            raise TypeError(
                f"env must be a gymnasium.Env, a registered id or an EnvSpec, got {env!r}"
            )
        env_id = env if isinstance(env, str) else env.id
        if env_id.startswith("simsci/"):
            importlib.import_module("simsci.envs")
        return gymnasium.make(env), True
    meta = ds.meta
    env_id = meta.get("env_id")
    if not isinstance(env_id, str):
        return None, False
    if env_id.startswith("simsci/"):
        with contextlib.suppress(ImportError):
            importlib.import_module("simsci.envs")
    if env_id not in gymnasium.registry:
        return None, False
    kwargs = dict(meta.get("env_kwargs") or {})
    if meta.get("max_episode_steps") is not None:
        kwargs["max_episode_steps"] = meta["max_episode_steps"]
    try:
        return gymnasium.make(env_id, **kwargs), True
    except Exception as exc:  # an env that cannot be rebuilt from its stored kwargs
        warnings.warn(
            f"{ds.path}: could not make {env_id!r} from the file's env_kwargs ({exc}); "
            "the Minari dataset gets no environment spec (pass env= to attach one)",
            UserWarning,
            stacklevel=3,
        )
        return None, False


def _spaces(ds: Trajectories, env_obj) -> tuple[spaces.Space, spaces.Space]:
    if env_obj is not None:
        why = _fits(ds, env_obj.observation_space, env_obj.action_space)
        if why is not None:
            raise ValueError(f"{ds.path}: the environment does not match the file: {why}")
        return env_obj.observation_space, env_obj.action_space
    meta = ds.meta
    try:
        obs_space = space_from_json(meta["observation_space"])
        action_space = space_from_json(meta["action_space"])
    except (KeyError, ValueError, TypeError):
        return _inferred_spaces(ds)
    if _fits(ds, obs_space, action_space) is not None:
        return _inferred_spaces(ds)
    return obs_space, action_space


def _buffers(ds: Trajectories, obs_space: spaces.Space, episode_fields: list[str]):
    """Yield lists of EpisodeBuffers of about _CHUNK_BYTES each."""
    from minari.data_collector import EpisodeBuffer

    extra_steps = [f for f in ds.step_fields if f not in _REQUIRED and not is_observation_field(f)]
    chunk, size = [], 0
    for i in range(len(ds)):
        ep = ds[i]
        n = len(ep["t"]) - 1
        seed = int(ep["seed"]) if "seed" in ep else -1
        buf = EpisodeBuffer(
            seed=None if seed < 0 else seed,
            observations=join_rows(ep, obs_space),
            actions=ep["action"][:n],
            rewards=ep["reward"][:n],
            terminations=ep["terminated"][:n],
            truncations=ep["truncated"][:n],
            infos={name: ep[name] for name in extra_steps},
        )
        meta = {f"simsci_{name}": ep[name] for name in episode_fields}
        chunk.append((buf, meta))
        size += sum(np.asarray(v).nbytes for v in ep.values())
        if size >= _CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk or len(ds) == 0:
        yield chunk


def to_minari(
    source: str | os.PathLike | Trajectories,
    dataset_id: str,
    *,
    env: gymnasium.Env | str | gymnasium.envs.registration.EnvSpec | None = None,
    algorithm_name: str | None = None,
    author: str | None = None,
    author_email: str | None = None,
    code_permalink: str | None = None,
    description: str | None = None,
    overwrite: bool = False,
):
    """Write the rollout file (or shard directory) ``source`` as the Minari dataset
    ``dataset_id`` ("(namespace/)name-v<version>") and return it (a MinariDataset).

    Per episode of T transitions: observations (T+1, ...), actions/rewards/terminations/
    truncations (T, ...), infos t/state (T+1, ...). ``env`` attaches an environment
    (default: the file's env_id when registered); the other keywords are Minari's
    dataset metadata. ``overwrite`` replaces an existing dataset of that id (else
    FileExistsError). See the module docstring for the mapping."""
    minari = _minari()
    _check_id(dataset_id)
    meta_kwargs = {
        "algorithm_name": algorithm_name,
        "author": author,
        "author_email": author_email,
        "code_permalink": code_permalink,
        "description": description,
    }
    if isinstance(source, Trajectories):
        return _to_minari(minari, source, dataset_id, env, overwrite, meta_kwargs)
    with open_trajectories(source) as ds:
        return _to_minari(minari, ds, dataset_id, env, overwrite, meta_kwargs)


def _to_minari(minari, ds: Trajectories, dataset_id: str, env, overwrite: bool, meta_kwargs):
    _check_rollout(ds)
    target = _dataset_dir(dataset_id)
    if target.exists() and not overwrite:
        raise FileExistsError(
            f"a Minari dataset {dataset_id!r} exists at {str(target)!r}; pass overwrite=True "
            "(simsci data export-minari --overwrite) or choose another id or version"
        )
    env_obj, made = _make_env(env, ds)
    try:
        obs_space, action_space = _spaces(ds, env_obj)
        episode_fields = [f for f in ds.episode_fields if f != "seed"]  # seed: Minari's own
        names = {f: ds.names(f) for f in ds.step_fields if ds.names(f) is not None}
        simsci_block = {
            "format": "simsci.trajectories",
            "system": ds.system,
            "meta": ds.meta,
            "names": names,
            "step_fields": list(ds.step_fields),
            "episode_fields": list(ds.episode_fields),
        }
        backup = None
        if target.exists():  # overwrite: keep the old one until the new one is complete
            backup = target.with_name(f".{target.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
            os.replace(target, backup)
        try:
            dataset = _create(
                minari,
                ds,
                dataset_id,
                env_obj,
                obs_space,
                action_space,
                episode_fields,
                simsci_block,
                **{
                    **meta_kwargs,
                    "description": meta_kwargs["description"]
                    or f"simsci rollout file {ds.path.name} (system {ds.system})",
                },
            )
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            if backup is not None:
                os.replace(backup, target)
            raise
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)
    finally:
        if made and env_obj is not None:
            env_obj.close()
    return dataset


def _create(minari, ds, dataset_id, env_obj, obs_space, action_space, episode_fields, block, **kw):
    dataset = None
    for chunk in _buffers(ds, obs_space, episode_fields):
        buffers = [b for b, _ in chunk]
        first = 0 if dataset is None else dataset.total_episodes
        if dataset is None:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_MINARI_NAG, category=UserWarning)
                dataset = minari.create_dataset_from_buffers(
                    dataset_id,
                    buffers,
                    env=env_obj,
                    observation_space=obs_space,
                    action_space=action_space,
                    jpeg_encoding=False,
                    **kw,
                )
        else:
            dataset.update_dataset_from_buffer(buffers)
        if episode_fields and chunk:
            dataset.storage.update_episode_metadata(
                [m for _, m in chunk], range(first, first + len(chunk))
            )
    dataset.storage.update_metadata({"simsci": json.dumps(jsonable(block))})
    return minari.load_dataset(dataset_id)


# ---------------------------------------------------------------- from_minari
def _load(minari, dataset_id: str):
    try:
        return minari.load_dataset(dataset_id)
    except FileNotFoundError:
        local = list(minari.list_local_datasets())
        root = _dataset_dir("")
        raise UnknownNameError(
            f"{unknown_name('local Minari dataset', dataset_id, local)} Looked in "
            f"{str(root)!r} (set MINARI_DATASETS_PATH to look elsewhere, or fetch a remote "
            f"dataset with `minari download {dataset_id}`)."
        ) from None


def _episode_meta(dataset) -> list[dict]:
    return list(dataset.storage.get_episode_metadata(dataset.episode_indices))


def _observation_rows(obs, obs_fields: dict, n: int, where: str) -> dict:
    """The observation step fields (``x``, or ``x.<key>`` per Dict entry) of an episode
    of ``n`` steps from Minari's observations (an array, or a nested dict of arrays)."""
    if "x" in obs_fields and not isinstance(obs, np.ndarray):
        raise TypeError(f"{where}: observations must be one array, got {type(obs).__name__}")
    rows = {}
    for name, value in split_observation(obs, obs_fields, where).items():
        arr = np.asarray(value)
        space = obs_fields[name]
        what = "observations" if name == "x" else f"observations of the entry {name[2:]!r}"
        if len(arr) != n + 1:
            raise ValueError(
                f"{where}: {len(arr)} {what} for {n} steps; Minari episodes hold T+1 "
                "observations for T steps"
            )
        if arr.shape[1:] != leaf_shape(space):
            raise ValueError(
                f"{where}: {what} of shape {arr.shape[1:]} per step, but the observation "
                f"space says {leaf_shape(space)}"
            )
        rows[name] = arr.astype(leaf_dtype(space)) if isinstance(space, spaces.Discrete) else arr
    return rows


def _rows(ep, i: int, discrete: bool, act_space, obs_fields, step_fields, dataset_id) -> dict:
    where = f"Minari dataset {dataset_id!r}, episode {i}"
    rewards = np.asarray(ep.rewards).reshape(-1)
    n = len(rewards)
    obs_rows = _observation_rows(ep.observations, obs_fields, n, where)
    actions = np.asarray(ep.actions)
    if discrete:
        action = np.zeros(n + 1, np.int64)
        action[:n] = actions.reshape(n)
    else:
        dtype = np.dtype(act_space.dtype)
        fill = np.nan if dtype.kind == "f" else 0
        action = np.full((n + 1, *act_space.shape), fill, dtype)
        action[:n] = actions.reshape(n, *act_space.shape)
    reward = np.full(n + 1, np.nan, np.float32)
    reward[:n] = rewards
    flags = {}
    for name, value in (("terminated", ep.terminations), ("truncated", ep.truncations)):
        flag = np.zeros(n + 1, np.bool_)
        flag[:n] = np.asarray(value).reshape(n)
        flags[name] = flag
    infos = ep.infos or {}
    rows = {**obs_rows, "action": action, "reward": reward, **flags}
    for name in step_fields:
        if name in (*flags, "action", "reward") or is_observation_field(name):
            continue
        value = infos.get(name)
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and len(value) == n + 1:
            rows[name] = value
        elif name != "t":
            raise ValueError(
                f"{where}: infos[{name!r}] must have one entry per observation ({n + 1})"
            )
    if "t" not in rows:
        rows["t"] = np.arange(n + 1, dtype=np.float64)
    return rows


def from_minari(
    dataset_id: str,
    path: str | os.PathLike,
    *,
    compression: str | None = None,
    overwrite: bool = True,
) -> Path:
    """Write the local Minari dataset ``dataset_id`` as the rollout file ``path``.

    Observations (T+1) -> x (a Dict observation: x.<key> per entry), actions/rewards/flags
    (T) -> the first T rows (the last row
    holds NaN / 0 / False), infos t/state -> step fields, episode seeds -> the episode
    field ``seed`` (-1 for none). A dataset written by ``to_minari`` comes back as it
    was. ``compression`` None, "gzip" or "lzf"; ``overwrite`` as TrajectoryWriter.
    Returns the path written."""
    minari = _minari()
    _check_id(dataset_id)
    path = check_parent_dir(path)
    dataset = _load(minari, dataset_id)
    obs_space, act_space = dataset.observation_space, dataset.action_space
    try:
        obs_fields = observation_fields(obs_space, "a rollout file")
    except TypeError as exc:
        raise TypeError(
            f"Minari dataset {dataset_id!r}: rollout files store Box observations or "
            f"Dicts of Box, Discrete and Dict entries, the dataset has {obs_space}: {exc}"
        ) from None
    if not isinstance(act_space, (spaces.Box, spaces.Discrete)):
        raise TypeError(
            f"Minari dataset {dataset_id!r}: rollout files store Box or Discrete actions, "
            f"the dataset has {act_space}"
        )
    discrete = isinstance(act_space, spaces.Discrete)
    raw = dataset.storage.metadata
    block = json.loads(raw["simsci"]) if isinstance(raw.get("simsci"), str) else None
    spec = dataset.env_spec
    if block is not None:
        system = block["system"]
        meta = dict(block["meta"])
        names = block.get("names") or {}
        step_fields = list(block["step_fields"])
        has_seed = "seed" in block["episode_fields"]
        episode_fields = [f for f in block["episode_fields"] if f != "seed"]
    else:
        system = spec.id if spec is not None else dataset_id
        meta = {
            "env_id": None if spec is None else spec.id,
            "env_kwargs": {} if spec is None else jsonable(spec.kwargs),
            "dt": None,
            "observation_space": space_to_json(obs_space),
            "action_space": space_to_json(act_space),
        }
        names, episode_fields, has_seed = {}, [], True
        first = next(iter(dataset.iterate_episodes()), None) if len(dataset) else None
        infos = (first.infos or {}) if first is not None else {}
        step_fields = ["t"] + (["state"] if "state" in infos else [])
    for key in ("created_utc", "simsci_version"):
        meta.pop(key, None)
    meta["converted_from"] = {
        "minari_dataset": dataset_id,
        "minari_version": dataset.minari_version,
    }
    episode_meta = _episode_meta(dataset)
    if block is None:
        seeds = [m.get("seed") for m in episode_meta]
        meta.setdefault("seed", seeds[0] if seeds else None)
    with TrajectoryWriter(
        path,
        kind="rollout",
        system=system,
        meta=meta,
        names={k: v for k, v in names.items() if k in step_fields},
        episode_fields=(("seed",) if has_seed else ()) + tuple(episode_fields),
        compression=compression,
        overwrite=overwrite,
    ) as writer:
        for i, (ep, emeta) in enumerate(zip(dataset.iterate_episodes(), episode_meta)):
            rows = _rows(ep, i, discrete, act_space, obs_fields, step_fields, dataset_id)
            if has_seed:
                seed = emeta.get("seed")
                rows["seed"] = np.int64(-1 if seed is None else seed)
            for name in episode_fields:
                rows[name] = emeta[f"simsci_{name}"]
            writer.append(rows)
    return writer.path
