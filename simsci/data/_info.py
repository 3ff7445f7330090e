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


def info(path: str | os.PathLike) -> str:
    """Summary of a dataset: kind, system, episodes, lengths, fields with shapes, dtypes
    and names, parameter ranges, static arrays, graphs, statistics, size and meta."""
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
        eps = ds.episode_fields
        if "split" in eps and len(ds):
            counts = np.bincount(ds.column("split").astype(np.int64), minlength=3)
            lines.append(f"split: train {counts[0]}, val {counts[1]}, test {counts[2]}")
        width = max([len(k) for k in [*ds.step_fields, *eps, *ds.static_fields]] + [4])
        lines.append("step fields (shape per step):")
        lines += [_field_line(k, v, width) for k, v in ds.step_fields.items()]
        if ds.num_marks is not None:
            lines.append(f"  num_marks: {ds.num_marks}")
        if eps:
            lines.append("episode fields (shape per episode):")
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
        if ds.static_fields:
            lines.append("static:")
            for k, v in ds.static_fields.items():
                lines.append(_field_line(k, v, width))
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
        meta = ds.meta
        if meta:
            lines.append("meta: " + ", ".join(f"{k}={_short(v)}" for k, v in sorted(meta.items())))
    return "\n".join(lines)
