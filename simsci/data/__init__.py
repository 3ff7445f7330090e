"""The simsci trajectory format (shared/design/trajectory-format.md, version 1).

Write::

    with simsci.data.TrajectoryWriter("out.h5", kind="state", system="lorenz63") as w:
        w.append({"t": t, "x": x, "params": p})
    simsci.data.write("out.h5", episodes, kind="state", system="lorenz63")

Read::

    ds = simsci.data.open("out.h5")          # or a directory of part-*.h5 shards
    ep = ds[0]                                # dict of numpy arrays
    loader = DataLoader(TrajectoryDataset(ds, window=64), batch_size=32,
                        collate_fn=union_collate, num_workers=4)

Check and describe: ``check_file(path)`` (every problem), ``info(path)`` (a summary),
``check_finite(path_or_trajectories, fields=None)`` (raise when a field holds values
training cannot use: ±inf, or NaN where it counts as observed).
Import: ``import_pdebench``, ``import_thewell`` (PDE fields), ``import_aeon`` (aeon's
classification sets as irregular sensor sequences; needs the optional package aeon),
``import_easytpp`` (EasyTPP's event-sequence pickles/JSON as kind="events"; its inverse
``export_easytpp`` writes an events file as EasyTPP's train/dev/test files),
``import_anndata`` (RNA-velocity data, scVelo's spliced/unspliced layers of an AnnData
file, as gene-network snapshots GFG trains on; needs the optional package anndata).
Rollouts: ``recorded_env_kwargs(meta)`` (the constructor keywords of the environment a
kind="rollout" file recorded; ``simsci.envs.RecordEpisodes`` writes such files).
For code that writes its own kinds: ``to_numpy`` (arrays, tensors, lists -> ndarray),
``split_id`` ("train"/"val"/"test" or 0/1/2 -> 0/1/2) and ``problem`` (a FormatError
naming file, rule, field and episode).
The torch parts (TrajectoryDataset, pad_collate, union_collate) import torch on first
use, so writing, reading and checking do not need it.
"""

from __future__ import annotations

import importlib

from simsci.data._aeon import bundled_aeon_datasets, import_aeon
from simsci.data._anndata import import_anndata
from simsci.data._check import check_file, check_finite
from simsci.data._easytpp import export_easytpp, import_easytpp, is_easytpp_source
from simsci.data._import import import_pdebench, import_thewell
from simsci.data._info import info
from simsci.data._reader import Trajectories, open
from simsci.data._rollout import recorded_env_kwargs
from simsci.data._schema import (
    FORMAT,
    FORMAT_VERSION,
    KINDS,
    SPLITS,
    FieldInfo,
    problem,
    split_id,
    to_numpy,
)
from simsci.data._writer import TrajectoryWriter, rank_shard_path, shard_path, write

_TORCH = {"TrajectoryDataset", "pad_collate", "union_collate"}

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "KINDS",
    "SPLITS",
    "problem",
    "split_id",
    "to_numpy",
    "FieldInfo",
    "TrajectoryWriter",
    "Trajectories",
    "TrajectoryDataset",
    "bundled_aeon_datasets",
    "check_file",
    "check_finite",
    "export_easytpp",
    "import_aeon",
    "import_anndata",
    "import_easytpp",
    "is_easytpp_source",
    "import_pdebench",
    "import_thewell",
    "info",
    "open",
    "pad_collate",
    "rank_shard_path",
    "recorded_env_kwargs",
    "shard_path",
    "union_collate",
    "write",
]


def __getattr__(name: str):
    if name in _TORCH:
        return getattr(importlib.import_module("simsci.data._torch"), name)
    raise AttributeError(f"module 'simsci.data' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
