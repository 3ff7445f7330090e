"""``info(path)``: a human-readable summary of a trajectory file or shard directory."""

from __future__ import annotations

import json
import os

import numpy as np

from simsci.data._reader import open as open_trajectories
from simsci.data._schema import FieldInfo


def _size(nbytes: float) -> str:
    if nbytes < 1024:
        return f"{nbytes:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        nbytes /= 1024
        if nbytes < 1024 or unit == "TiB":
            break
    return f"{nbytes:.1f} {unit}"


def _num(v) -> str:
    return f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)


def _field_line(name: str, fi: FieldInfo, width: int) -> str:
    shape = "(" + ", ".join(str(s) for s in fi.shape) + ("," if len(fi.shape) == 1 else "") + ")"
    line = f"  {name:<{width}}  {shape:<12} {fi.dtype}"
    if fi.names:
        line += f"  names {fi.names}"
    if fi.units:
        line += f"  units {fi.units}"
    return line


def _short(value, limit: int = 60) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: shards listed one by one up to this many; beyond, a summary
_LIST_SHARDS = 8
#: per-shard values shown for a meta key that differs between shards
_LIST_VALUES = 4
_ABSENT = object()


def _per_shard(values, *, limit: int = _LIST_SHARDS) -> str:
    """``2, 3, 4`` for a few shards, ``min 2 / median 3 / max 4`` for many."""
    values = np.asarray(values)
    if len(values) <= limit:
        return ", ".join(str(v) for v in values)
    return f"min {values.min()} / median {_num(float(np.median(values)))} / max {values.max()}"


def meta_by_shard(shard_meta: list[dict]) -> tuple[dict, dict[str, list]]:
    """Split the shards' meta into the entries every shard has with the same value, and
    for each other key its value per shard (``_ABSENT`` where a shard lacks the key)."""
    keys = sorted(set().union(*shard_meta)) if shard_meta else []
    common, differing = {}, {}
    for key in keys:
        values = [m.get(key, _ABSENT) for m in shard_meta]
        first = values[0]
        if first is not _ABSENT and all(v is not _ABSENT and v == first for v in values):
            common[key] = first
        else:
            differing[key] = values
    return common, differing


def _meta_lines(ds) -> list[str]:
    """``meta: ...`` for a file; for shards, the common meta and the keys that differ."""
    shard_meta = ds.shard_meta
    if len(shard_meta) == 1:
        meta = shard_meta[0]
        return ["meta: " + ", ".join(f"{k}={_short(v)}" for k, v in sorted(meta.items()))]
    common, differing = meta_by_shard(shard_meta)
    n = len(shard_meta)
    lines = []
    if common:
        lines.append(
            f"meta (the same in all {n} shards): "
            + ", ".join(f"{k}={_short(v)}" for k, v in common.items())
        )
    if differing:
        lines.append(f"meta that differs between shards ({len(differing)} key(s)):")
        names = [f.name for f in ds.files]
        for key, values in differing.items():
            shown = [
                f"{name}: {'(absent)' if v is _ABSENT else _short(v, 30)}"
                for name, v in zip(names[:_LIST_VALUES], values[:_LIST_VALUES])
            ]
            distinct = {json.dumps(v, sort_keys=True) for v in values if v is not _ABSENT}
            absent = sum(v is _ABSENT for v in values)
            more = ""
            if n > _LIST_VALUES:
                more = f", ... ({len(distinct)} distinct value(s)"
                more += f", absent in {absent} shard(s))" if absent else ")"
            lines.append(f"  {key}: " + ", ".join(shown) + more)
    return lines


def _shard_lines(ds) -> list[str]:
    """The shards of a directory: how many, their names, episodes and steps per shard,
    and what differs between them beyond meta (num_marks, agent width, statistics)."""
    sources = ds._sources
    files = ds.files
    names = f"{files[0].name} .. {files[-1].name}" if len(files) > 1 else files[0].name
    lines = [
        f"shards: {len(files)} ({names})",
        f"  episodes per shard: {_per_shard([s.n for s in sources])}",
        f"  steps per shard: {_per_shard([int(s.offsets[-1]) for s in sources])}",
    ]
    marks = [s.header.num_marks for s in sources]
    if len(set(marks)) > 1:
        lines.append(f"  num_marks per shard: {_per_shard(marks)} (the dataset uses the largest)")
    if "agents" in ds.step_fields:
        widths = [s.header.steps["agents"].shape[0] for s in sources]
        if len(set(widths)) > 1:
            lines.append(f"  agents per shard: {_per_shard(widths)} (read padded to the widest)")
    without = [f.name for f, s in zip(files, sources) if not s.header.has_stats]
    if without and len(without) < len(files):
        lines.append(
            f"  written without statistics: {', '.join(without[:_LIST_VALUES])}"
            + (", ..." if len(without) > _LIST_VALUES else "")
            + " (so the dataset has none)"
        )
    return lines


def _episode_field_lines(ds, width: int) -> list[str]:
    eps = ds.episode_fields
    if not eps:
        return []
    lines = ["episode fields (shape per episode):"]
    for k, v in eps.items():
        lines.append(_field_line(k, v, width))
        if v.dtype.kind in "iuf" and len(ds) and len(v.shape) <= 1 and k != "split":
            col = ds.column(k).reshape(len(ds), -1)
            names = v.names or [f"{k}[{j}]" for j in range(col.shape[1])]
            if col.shape[1] == 1 and not v.names:
                names = [k]
            ranges = [
                f"{n}: {_num(col[:, j].min())} .. {_num(col[:, j].max())}"
                for j, n in enumerate(names[: col.shape[1]])
            ]
            lines.append("    " + "; ".join(ranges))
    return lines


def _graph_and_stats_lines(ds) -> list[str]:
    lines = []
    for g, parts in ds.graph_fields.items():
        src = ds._sources
        nodes = sum(int(s.graph_offsets(g)[0][-1]) for s in src)
        edges = sum(int(s.graph_offsets(g)[1][-1]) for s in src)
        feats = "; ".join(
            f"{p} " + ", ".join(f"{k} {tuple(fi.shape)} {fi.dtype}" for k, fi in d.items())
            for p, d in parts.items()
            if d
        )
        lines.append(f"graph {g}: {nodes} nodes, {edges} edges in all; {feats}")
    stats = ds.stats
    if stats:
        lines.append("stats (train split): " + ", ".join(stats))
        for k, v in stats.items():
            mean = np.array2string(np.asarray(v["mean"]), precision=4, threshold=8)
            std = np.array2string(np.asarray(v["std"]), precision=4, threshold=8)
            lines.append(f"  {k}: mean {mean}  std {std}")
    return lines


def info(path: str | os.PathLike) -> str:
    """Summary of a dataset: kind, system, episodes, lengths, fields with shapes, dtypes
    and names, parameter ranges, static arrays, graphs, statistics, size and meta.

    For a shard directory everything counts every shard (episodes, steps, lengths,
    splits, ranges, graphs, merged statistics); a ``shards`` block gives their number and
    episodes and steps per shard, and meta is split into what all shards share and the
    keys that differ (with their value per shard)."""
    with open_trajectories(path, check=False) as ds:
        files = ds.files
        size = sum(os.path.getsize(f) for f in files)
        lines = [
            f"{ds.path}" + (f"  ({len(files)} shards)" if len(files) > 1 else ""),
            f"kind: {ds.kind}   system: {ds.system}   format_version: {ds.format_version}"
            f"   size: {_size(size)}",
        ]
        lengths = ds.lengths
        if len(lengths):
            lines.append(
                f"episodes: {len(ds)}   total steps: {int(lengths.sum())}   length "
                f"min/median/max: {lengths.min()} / {_num(float(np.median(lengths)))} / "
                f"{lengths.max()}"
            )
        else:
            lines.append("episodes: 0")
        if len(files) > 1:
            lines += _shard_lines(ds)
        eps = ds.episode_fields
        if "split" in eps and len(ds):
            counts = np.bincount(ds.column("split").astype(np.int64), minlength=3)
            lines.append(f"split: train {counts[0]}, val {counts[1]}, test {counts[2]}")
        width = max([len(k) for k in [*ds.step_fields, *eps, *ds.static_fields]] + [4])
        lines.append("step fields (shape per step):")
        lines += [_field_line(k, v, width) for k, v in ds.step_fields.items()]
        if ds.num_marks is not None:
            lines.append(f"  num_marks: {ds.num_marks}")
        lines += _episode_field_lines(ds, width)
        if ds.static_fields:
            lines.append("static:" + (f" (from {files[0].name})" if len(files) > 1 else ""))
            for k, v in ds.static_fields.items():
                lines.append(_field_line(k, v, width))
        lines += _graph_and_stats_lines(ds)
        if any(ds.shard_meta):
            lines += _meta_lines(ds)
    return "\n".join(lines)
