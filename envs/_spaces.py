"""Gymnasium spaces in rollout files: their JSON descriptions and the observation fields.

A rollout file (kind="rollout", docs/format.md) keeps the spaces of the environment that
recorded it in its meta (``observation_space`` / ``action_space``, see
:func:`space_to_json`), and stores each observation in one or more step fields:

    Box observation     x                    (T+1, *shape), the space's dtype
    Dict observation    x.<key>              one step field per entry of the Dict: a Box
                        x.<key>.<subkey>     entry in its dtype, a Discrete entry int64
                                             (T+1,); a nested Dict adds one more key

``rollout_observation_space(file)`` rebuilds the space (from the meta, checked against
the step fields), ``rollout_observations(file, i)`` episode ``i``'s observations as the
space gives them: ``(T+1, *shape)`` for a Box, a (nested) dict of such arrays for a Dict.

Design choices (and why):

- **One step field per entry, named with a dot.** Every entry is an ordinary step field
  of its own dtype and shape, so files of format version 1 hold Dict observations
  without a version bump: the checker, the statistics, ``simsci data info``, shards and
  older readers see plain step fields (an HDF5 group under ``/steps`` would have broken
  rule ``steps-shape``). The dot is the separator because field names cannot hold ``/``
  and Dict keys commonly hold ``_`` (``agents_mask``); keys with a dot or ``/`` are
  refused rather than stored ambiguously.
- **The space description is the authority.** The field names alone cannot say which
  entries were Discrete or what the bounds were; the meta description rebuilds the
  space exactly (``==`` the environment's), and a reader refuses a file whose fields do
  not match it (missing or unexpected entries, other shapes or dtypes).
- Leaves are Box or Discrete (what a step field holds losslessly); Tuple, Sequence,
  Graph, Text, MultiDiscrete and MultiBinary entries are refused when recording starts.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable, Mapping
from enum import Enum

import numpy as np
from gymnasium import spaces

from simsci.data import Trajectories
from simsci.data import open as open_trajectories

__all__ = [
    "OBS_FIELD",
    "SEP",
    "jsonable",
    "observation_fields",
    "rollout_observation_space",
    "rollout_observations",
    "space_from_json",
    "space_to_json",
]

#: the step field of a Box observation, and the prefix of a Dict observation's fields
OBS_FIELD = "x"
#: the separator between the keys of a Dict observation in its step field names
SEP = "."
_LEAVES = (spaces.Box, spaces.Discrete)


# --------------------------------------------------------------------------- helpers
def to_numpy(value) -> np.ndarray:
    """numpy arrays, torch tensors (any device), scalars -> ndarray (no copy for numpy)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype == torch.bfloat16:
            value = value.float()
        return value.cpu().numpy()
    return np.asarray(value)


def jsonable(value):
    """``value`` with everything JSON cannot hold replaced by its ``str``.

    Dicts (keys as str), lists/tuples, numpy scalars and arrays are converted entry by
    entry; NaN/inf become "nan"/"inf"/"-inf"; an Enum becomes its value."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, Enum):
        return jsonable(value.value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.bool_):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return jsonable(value.tolist())
    return str(value)


def _bound(arr: np.ndarray):
    """Box bounds for JSON: a scalar when all entries agree, inf as "inf"/"-inf"."""
    flat = arr.reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return jsonable(flat[0].item())
    return jsonable(arr.tolist())


def _unbound(value, shape: tuple, dtype: np.dtype) -> np.ndarray:
    # entries are numbers or "inf"/"-inf"/"nan"; float() reads both
    arr = np.vectorize(float, otypes=[np.float64])(np.asarray(value, dtype=object))
    return np.broadcast_to(arr, shape).astype(dtype)


# ------------------------------------------------------------ space descriptions
def space_to_json(space: spaces.Space) -> dict:
    """A Box, Discrete or Dict space as a JSON-able dict (stored in a rollout file's meta).

    ``{"type": "Box", "shape": [...], "dtype": "float32", "low": ..., "high": ...}``
    (bounds as one number when all entries agree, infinities as "inf"/"-inf"),
    ``{"type": "Discrete", "n": n, "start": start}`` or ``{"type": "Dict", "spaces":
    {key: description, ...}}`` (str keys, in the Dict's order)."""
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": np.dtype(space.dtype).name,
            "low": _bound(space.low),
            "high": _bound(space.high),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.Dict):
        bad = [k for k in space.spaces if not isinstance(k, str)]
        if bad:
            raise TypeError(f"only Dict spaces with str keys can be described, got keys {bad}")
        return {"type": "Dict", "spaces": {k: space_to_json(v) for k, v in space.spaces.items()}}
    raise TypeError(f"only Box, Discrete and Dict spaces can be described, got {space}")


def space_from_json(desc: Mapping) -> spaces.Space:
    """The inverse of ``space_to_json``."""
    kind = desc.get("type") if isinstance(desc, Mapping) else None
    if kind not in ("Box", "Discrete", "Dict"):
        raise ValueError(
            "a space description is a dict with type 'Box' (shape, dtype, low, high), "
            f"'Discrete' (n, start) or 'Dict' (spaces), got {desc!r}"
        )
    if kind == "Discrete":
        return spaces.Discrete(int(desc["n"]), start=int(desc.get("start", 0)))
    if kind == "Dict":
        entries = desc.get("spaces")
        if not isinstance(entries, Mapping):
            raise ValueError(f"a 'Dict' space description needs a dict 'spaces', got {desc!r}")
        return spaces.Dict({str(k): space_from_json(v) for k, v in entries.items()})
    shape = tuple(int(s) for s in desc["shape"])
    dtype = np.dtype(desc["dtype"])
    return spaces.Box(
        low=_unbound(desc["low"], shape, dtype),
        high=_unbound(desc["high"], shape, dtype),
        shape=shape,
        dtype=dtype,
    )


# ------------------------------------------------------------ observation fields
def observation_fields(space: spaces.Space, who: str) -> dict[str, spaces.Space]:
    """The step fields that hold observations of ``space``: ``{"x": space}`` for a Box,
    ``{"x.<key>[.<subkey>...]": entry}`` for a Dict (entries Box or Discrete, in the
    Dict's order). TypeError for any other space, naming the entry at fault."""
    if isinstance(space, spaces.Box):
        return {OBS_FIELD: space}
    if isinstance(space, spaces.Dict):
        out: dict[str, spaces.Space] = {}
        _walk(space, OBS_FIELD, out, who)
        return out
    raise TypeError(
        f"{who} records Box observations (the step field x) or Dict observations of Box, "
        f"Discrete and Dict entries (one step field x.<key> per entry), got the "
        f"observation space {space}; flatten it first, e.g. "
        "gymnasium.wrappers.FlattenObservation(env)"
    )


def _walk(space: spaces.Dict, prefix: str, out: dict, who: str) -> None:
    if not space.spaces:
        raise TypeError(f"{who}: the observation Dict {prefix!r} has no entries; nothing to record")
    for key, sub in space.spaces.items():
        if not isinstance(key, str) or not key or SEP in key or "/" in key:
            raise TypeError(
                f"{who}: a Dict observation's keys name its step fields ({prefix}.<key>): "
                f"they must be non-empty str without '.' or '/', got {key!r}; rename it "
                "(e.g. with a gymnasium.wrappers.TransformObservation)"
            )
        name = f"{prefix}{SEP}{key}"
        if isinstance(sub, spaces.Dict):
            _walk(sub, name, out, who)
        elif isinstance(sub, _LEAVES):
            out[name] = sub
        else:
            raise TypeError(
                f"{who}: the observation entry {name!r} is {sub}; a Dict observation is "
                "recorded when its entries are Box, Discrete or Dict spaces (not Tuple, "
                "Sequence, Graph, Text, MultiDiscrete or MultiBinary); flatten that entry "
                "first, or the whole observation with gymnasium.wrappers.FlattenObservation"
            )


def leaf_dtype(space: spaces.Space) -> np.dtype:
    """The dtype an observation entry is stored in: the Box's, int64 for a Discrete."""
    return np.dtype(np.int64) if isinstance(space, spaces.Discrete) else np.dtype(space.dtype)


def leaf_shape(space: spaces.Space) -> tuple:
    return () if isinstance(space, spaces.Discrete) else tuple(space.shape)


def _leaves(value, prefix: str, out: dict) -> None:
    if isinstance(value, Mapping):
        for key, sub in value.items():
            _leaves(sub, f"{prefix}{SEP}{key}", out)
    else:
        out[prefix] = value


def split_observation(obs, fields: Mapping[str, spaces.Space], where: str) -> dict:
    """One observation (an array, or a nested dict of arrays for a Dict space) as
    ``{field: value}`` for the step ``fields`` of its space; ValueError naming the
    missing or unexpected entries. Values are returned as given (not converted)."""
    if OBS_FIELD in fields:
        if isinstance(obs, Mapping):
            raise ValueError(
                f"{where}: a dict observation ({sorted(obs)}), but the observation space is a Box"
            )
        return {OBS_FIELD: obs}
    if not isinstance(obs, Mapping):
        raise ValueError(
            f"{where}: an observation of type {type(obs).__name__}, but the observation "
            f"space is a Dict with the entries {_keys(fields)}"
        )
    out: dict = {}
    _leaves(obs, OBS_FIELD, out)
    if out.keys() != fields.keys():
        raise ValueError(f"{where}: {_mismatch(fields, out, 'observation')}")
    return out


def join_rows(rows: Mapping[str, np.ndarray], space: spaces.Space):
    """The observations of one episode from its step fields: ``rows["x"]`` for a Box,
    the nested dict of ``(T+1, ...)`` arrays (in the space's key order) for a Dict."""
    if isinstance(space, spaces.Dict):
        return _join(rows, space, OBS_FIELD)
    return rows[OBS_FIELD]


def _join(rows, space: spaces.Dict, prefix: str) -> dict:
    out = {}
    for key, sub in space.spaces.items():
        name = f"{prefix}{SEP}{key}"
        out[key] = _join(rows, sub, name) if isinstance(sub, spaces.Dict) else rows[name]
    return out


def is_observation_field(name: str) -> bool:
    """Whether the step field ``name`` holds (an entry of) the observation."""
    return name == OBS_FIELD or name.startswith(OBS_FIELD + SEP)


def _keys(fields: Iterable[str]) -> list[str]:
    return [f[len(OBS_FIELD) + 1 :] for f in fields if f != OBS_FIELD]


def _mismatch(want: Iterable[str], got: Iterable[str], what: str) -> str:
    want, got = list(want), list(got)
    missing = [f for f in want if f not in got]
    extra = [f for f in got if f not in want]
    parts = [f"missing {missing}"] if missing else []
    parts += [f"unexpected {extra}"] if extra else []
    return (
        f"the {what} has the entries {_keys(got) or got}, the observation space "
        f"{_keys(want) or want} ({', '.join(parts)})"
    )


# ------------------------------------------------------------------ reading files
def file_observation_fields(ds: Trajectories) -> list[str]:
    """The step fields of ``ds`` that hold observations (``x``, or ``x.<key>...``)."""
    return [f for f in ds.step_fields if is_observation_field(f)]


def inferred_observation_space(ds: Trajectories) -> spaces.Space:
    """An unbounded Box (or a Dict of them, nested by the dots of the field names) of the
    file's observation fields: the space when the meta has no description."""
    names = file_observation_fields(ds)
    if not names:
        raise ValueError(
            f"{ds.path}: no observations: a rollout file stores them in the step field x "
            f"(Box) or x.<key> (Dict entries); its step fields are {list(ds.step_fields)}"
        )

    def box(name):
        info = ds.step_fields[name]
        dtype = np.dtype(info.dtype)
        if dtype.kind == "f":
            return spaces.Box(-np.inf, np.inf, shape=info.shape, dtype=dtype)
        if dtype.kind == "b":
            return spaces.Box(0, 1, shape=info.shape, dtype=dtype)
        top = np.iinfo(dtype)
        return spaces.Box(top.min, top.max, shape=info.shape, dtype=dtype)

    if OBS_FIELD in names:
        if len(names) > 1:
            raise ValueError(
                f"{ds.path}: both the step field x and Dict entries {names[1:]}; a rollout "
                "file stores the observation in one of the two layouts"
            )
        return box(OBS_FIELD)
    tree: dict = {}
    for name in names:
        *parents, last = name.split(SEP)[1:]
        node = tree
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ValueError(f"{ds.path}: the step field {name!r} nests under a leaf entry")
        if isinstance(node.get(last), dict):
            raise ValueError(f"{ds.path}: the step field {name!r} is also a parent of others")
        node[last] = box(name)

    def build(node):
        return spaces.Dict({k: build(v) if isinstance(v, dict) else v for k, v in node.items()})

    return build(tree)


def check_observation_fields(ds: Trajectories, space: spaces.Space, who: str = "") -> str | None:
    """Why the observation fields of ``ds`` do not hold observations of ``space`` (None
    when they do): missing or unexpected entries, another shape or dtype kind."""
    try:
        fields = observation_fields(space, who or "a rollout file")
    except TypeError as exc:
        return str(exc)
    got = file_observation_fields(ds)
    if set(got) != set(fields):
        return _mismatch(fields, got, "file")
    for name, sub in fields.items():
        info = ds.step_fields[name]
        want = leaf_dtype(sub)
        if tuple(info.shape) != leaf_shape(sub) or np.dtype(info.dtype).kind != want.kind:
            return (
                f"the step field {name!r} is {np.dtype(info.dtype).name} of per-step shape "
                f"{tuple(info.shape)}, but its space {sub} holds {want.name} of shape "
                f"{leaf_shape(sub)}"
            )
    return None


def _with_file(source, fn):
    if isinstance(source, Trajectories):
        return fn(source)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(
            f"source must be a path or a simsci.data.Trajectories, got {type(source).__name__}"
        )
    with open_trajectories(source) as ds:
        return fn(ds)


def _space_of(ds: Trajectories) -> spaces.Space:
    if ds.kind != "rollout":
        raise ValueError(
            f"{ds.path}: kind={ds.kind!r}; observations are read from rollout files "
            "(kind='rollout')"
        )
    desc = ds.meta.get("observation_space")
    if desc is None:
        return inferred_observation_space(ds)
    try:
        space = space_from_json(desc)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{ds.path}: meta['observation_space'] is not a space: {exc}") from None
    why = check_observation_fields(ds, space)
    if why is not None:
        raise ValueError(
            f"{ds.path}: meta['observation_space'] does not match the step fields: {why}"
        )
    return space


def rollout_observation_space(source) -> spaces.Space:
    """The observation space of the rollout file (or shard directory, or open
    ``Trajectories``) ``source``: rebuilt from ``meta["observation_space"]`` and checked
    against its step fields (ValueError naming the missing or unexpected entries, or a
    shape or dtype that differs); without a description, unbounded Boxes (a Dict of them
    for ``x.<key>`` fields)."""
    return _with_file(source, _space_of)


def rollout_observations(source, i: int):
    """The T+1 observations of episode ``i`` of a rollout file (path or ``Trajectories``)
    as its observation space gives them: an array ``(T+1, *shape)`` for a Box, a nested
    dict of such arrays (the space's keys) for a Dict."""

    def read(ds):
        space = _space_of(ds)
        rows = ds.read(i, list(observation_fields(space, "a rollout file")))
        return join_rows(rows, space)

    return _with_file(source, read)
