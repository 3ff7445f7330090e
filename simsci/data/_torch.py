"""Torch side of the format: a map-style Dataset over episodes or windows, and collates.

Design:

- ``TrajectoryDataset`` holds a ``Trajectories`` (lazy, per-process h5py handles), so it
  is safe with ``DataLoader(num_workers=N)``: the handle held by the constructing
  process is closed once the index is built, and each worker opens its own.
- Windows: ``window=W`` gives every run of W consecutive steps starting at 0, stride,
  2*stride, ... that fits inside an episode; ``stride`` defaults to ``window``
  (non-overlapping windows, each step seen once per epoch). Episodes shorter than W
  give no window and are skipped. Without ``window`` an item is a whole episode
  (empty episodes included). The index (episode, start) is built with numpy.
- Items: the selected step fields as tensors (floating fields, ``t`` included, cast to
  ``dtype``; bool and integer fields kept, unsigned wider than uint8 widened to int64),
  selected episode fields (``params``, ``label``, ...), ``"episode"`` (the episode's
  index in ``source``) and ``"start"`` (first step of the window, 0 for episodes).
- ``normalize=True`` maps every selected floating step field except ``t`` through the
  file's train-split statistics, ``(v - mean) / std`` along the last axis (std 0 taken
  as 1); NaN stays NaN. ``transform`` is applied last, to the dict.
- ``pad_collate`` tells step fields from episode-level values by length: a tensor is a
  step field when its axis 0 equals ``len(t)`` in every sample of the batch and its name
  is not one of params/label/split/episode/start/t0; pass ``step_fields=`` to say it.
- ``union_collate`` merges times closer than ``tol``: sorted distinct times whose gap to
  the previous one is <= tol join its group (chains merge), and the group's grid value
  is its smallest time. With tol=0 (default) ``grid[index] == t`` exactly.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

from simsci.data._reader import Trajectories
from simsci.data._reader import open as open_trajectories
from simsci.data._schema import split_id
from simsci.errors import unknown_name

_EPISODE_KEYS = frozenset({"params", "label", "split", "episode", "start", "t0"})
_TORCH_INTS = {np.dtype(d) for d in ("int8", "int16", "int32", "int64", "uint8")}


def _to_tensor(arr: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    if arr.dtype.kind == "f":
        return torch.from_numpy(np.ascontiguousarray(arr)).to(dtype)
    if arr.dtype.kind in "iu" and arr.dtype not in _TORCH_INTS:
        arr = arr.astype(np.int64)
    return torch.from_numpy(np.ascontiguousarray(arr))


class TrajectoryDataset(torch.utils.data.Dataset):
    """Episodes (or fixed-length windows of them) of a trajectory file as tensor dicts.

    ``source``: a path or a ``Trajectories``. ``fields``: step and/or episode field
    names. ``window``/``stride``: window length and step between window starts.
    ``split``: 0/1/2 or "train"/"val"/"test". ``dtype``: floating dtype for floating
    fields other than ``t``; ``time_dtype`` (float64 by default) for ``t``, because float32
    keeps only ~7 digits: at t ~ 1e4 its spacing is ~1e-3, and event timestamps in epoch
    seconds would be rounded to minutes. ``normalize``: apply the file's statistics.
    ``transform``: applied last.
    """

    def __init__(
        self,
        source: str | os.PathLike | Trajectories,
        *,
        fields: Iterable[str] = ("t", "x"),
        window: int | None = None,
        stride: int | None = None,
        split: int | str | None = None,
        transform: Callable[[dict], dict] | None = None,
        dtype: torch.dtype = torch.float32,
        time_dtype: torch.dtype = torch.float64,
        normalize: bool = False,
    ):
        ds = source if isinstance(source, Trajectories) else open_trajectories(source)
        if isinstance(fields, str):
            fields = (fields,)
        self.fields = tuple(fields)
        valid = [*ds.step_fields, *ds.episode_fields]
        for f in self.fields:
            if f == "graphs":
                raise ValueError(
                    "TrajectoryDataset does not batch graphs; read them with "
                    "simsci.data.open(path)[i]['graphs']"
                )
            if f not in valid:
                raise unknown_name("field", f, valid)
        for arg, value in (("dtype", dtype), ("time_dtype", time_dtype)):
            if not isinstance(value, torch.dtype) or not value.is_floating_point:
                raise TypeError(f"{arg} must be a floating torch dtype, got {value!r}")
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        episodes = np.arange(len(ds))
        if split is not None:
            sid = split_id(split, where="TrajectoryDataset")
            if "split" not in ds.episode_fields:
                raise ValueError(
                    f"split={split!r} was asked for but {ds.path} has no 'split' episode "
                    "field; write episodes with 'split' or pass split=None"
                )
            episodes = np.flatnonzero(ds.column("split") == sid)
        self.trajectories = ds
        self._view = ds[episodes]
        self._fields = list(self.fields)
        self._episode_ids = episodes.astype(np.int64)
        self.window, self.stride = self._check_window(window, stride)
        lengths = self._view.lengths
        if self.window is None:
            self._ep = np.arange(len(lengths), dtype=np.int64)
            self._start = np.zeros(len(lengths), np.int64)
        else:
            w, s = self.window, self.stride
            counts = np.where(lengths >= w, (lengths - w) // s + 1, 0)
            self._ep = np.repeat(np.arange(len(lengths), dtype=np.int64), counts)
            first = np.repeat(np.cumsum(counts) - counts, counts)
            self._start = (np.arange(len(self._ep), dtype=np.int64) - first) * s
        self.dtype = dtype
        self.time_dtype = time_dtype
        self.transform = transform
        self._norm: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if normalize:
            stats = ds.stats
            for f in self.fields:
                info = ds.step_fields.get(f)
                if f == "t" or info is None or info.dtype.kind != "f":
                    continue
                if f not in stats:
                    raise ValueError(
                        f"normalize=True but {ds.path} has no statistics for {f!r}; write the "
                        "file with stats=True or pass normalize=False"
                    )
                mean = np.nan_to_num(np.asarray(stats[f]["mean"], np.float64))
                std = np.asarray(stats[f]["std"], np.float64)
                std = np.where(np.isfinite(std) & (std > 0), std, 1.0)
                self._norm[f] = (mean, std)
        # drop the handle: DataLoader workers open their own (lazily, per process)
        ds.close()

    @staticmethod
    def _check_window(window, stride):
        if window is None:
            if stride is not None:
                raise ValueError("stride needs window= (the window length in steps)")
            return None, None
        for name, v in (("window", window), ("stride", stride)):
            if v is not None and (
                isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1
            ):
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        return int(window), int(stride if stride is not None else window)

    def __len__(self) -> int:
        return len(self._ep)

    def index(self) -> tuple[np.ndarray, np.ndarray]:
        """(episode, start) of every item: episode indexes ``source``."""
        return self._episode_ids[self._ep], self._start.copy()

    def __getitem__(self, k: int) -> dict:
        if not -len(self) <= k < len(self):
            raise IndexError(f"item {k} out of range for {len(self)} items")
        e = int(self._ep[k])
        start = int(self._start[k])
        rec = self._view._read_checked(e, self._fields, start, self.window)
        out = {}
        for name, arr in rec.items():
            if name in self._norm:
                mean, std = self._norm[name]
                arr = (arr - mean) / std
            out[name] = _to_tensor(arr, self.time_dtype if name == "t" else self.dtype)
        out["episode"] = int(self._episode_ids[e])
        out["start"] = start
        if self.transform is not None:
            out = self.transform(out)
        return out


def pad_collate(batch: Sequence[Mapping], *, step_fields: Iterable[str] | None = None) -> dict:
    """Pad a list of samples (dicts of tensors) into a batch.

    Step fields become (B, Lmax, ...) padded with 0 (False for bool); adds ``valid``
    (B, Lmax) bool and ``lengths`` (B,) int64. Episode-level tensors are stacked, Python
    numbers become tensors, anything else is kept as a list."""
    if not batch:
        raise ValueError("pad_collate got an empty batch")
    keys = list(batch[0].keys())
    for j, b in enumerate(batch):
        if set(b.keys()) != set(keys):
            raise ValueError(
                f"sample {j} has keys {sorted(b)} but sample 0 has {sorted(keys)}; all "
                "samples of a batch need the same fields"
            )
    if step_fields is None:
        if "t" not in keys:
            raise ValueError("pad_collate needs a 't' field to tell lengths, or step_fields=")
        lens = [int(b["t"].shape[0]) for b in batch]
        step_fields = [
            k
            for k in keys
            if k not in _EPISODE_KEYS
            and all(
                isinstance(b[k], torch.Tensor) and b[k].ndim >= 1 and b[k].shape[0] == n
                for b, n in zip(batch, lens)
            )
        ]
    else:
        step_fields = list(step_fields)
        missing = [k for k in step_fields if k not in keys]
        if missing or not step_fields:
            raise ValueError(f"step_fields {missing or step_fields} are not fields of the batch")
        lens = [int(b[step_fields[0]].shape[0]) for b in batch]
        for k in step_fields:
            for j, (b, n) in enumerate(zip(batch, lens)):
                if b[k].shape[0] != n:
                    raise ValueError(f"sample {j}: {k} has {b[k].shape[0]} steps, expected {n}")
    device = batch[0][step_fields[0]].device if step_fields else torch.device("cpu")
    out = {}
    for k in step_fields:
        out[k] = pad_sequence([b[k] for b in batch], batch_first=True, padding_value=0)
    lengths = torch.tensor(lens, dtype=torch.int64, device=device)
    lmax = max(lens) if lens else 0
    out["valid"] = torch.arange(lmax, device=device)[None, :] < lengths[:, None]
    out["lengths"] = lengths
    for k in keys:
        if k in out:
            continue
        values = [b[k] for b in batch]
        if all(isinstance(v, torch.Tensor) for v in values):
            shapes = {tuple(v.shape) for v in values}
            if len(shapes) != 1:
                raise ValueError(
                    f"episode-level field {k!r} has different shapes in the batch {shapes}; "
                    "give it as a step field (step_fields=) or make the shapes equal"
                )
            out[k] = torch.stack(values)
        elif all(isinstance(v, (bool, int, float, np.number)) for v in values):
            out[k] = torch.tensor(values, device=device)
        else:
            out[k] = values
    return out


def union_collate(batch: Sequence[Mapping], *, relative: bool = False, tol: float = 0.0) -> dict:
    """``pad_collate`` plus the batch's union time grid, for one batched ODE solve.

    Adds ``grid`` (U,): the distinct valid times sorted (times within ``tol`` merged) and
    ``index`` (B, Lmax) int64 with ``grid[index[b, j]] == t[b, j]`` where ``valid`` (0 at
    padding). ``relative=True`` first shifts every sample so its first time is 0
    (``t`` in the output is the shifted time) and returns the shifts as ``t0`` (B,)."""
    if tol < 0 or not np.isfinite(tol):
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    out = pad_collate(batch)
    t, valid = out["t"], out["valid"]
    if not t.is_floating_point():
        raise TypeError(f"t must be floating for a time grid, got {t.dtype}")
    if relative:
        first = t[:, 0] if t.shape[1] else t.new_zeros(t.shape[0])
        t0 = torch.where(out["lengths"] > 0, first, torch.zeros_like(first))
        t = torch.where(valid, t - t0[:, None], torch.zeros_like(t))
        out["t"] = t
        out["t0"] = t0
    values = t[valid]
    index = torch.zeros(t.shape, dtype=torch.int64, device=t.device)
    if values.numel() == 0:
        out["grid"] = values
        out["index"] = index
        return out
    ordered, order = torch.sort(values)
    new = torch.ones_like(ordered, dtype=torch.bool)
    new[1:] = (ordered[1:] - ordered[:-1]) > tol
    group_sorted = torch.cumsum(new, 0) - 1
    group = torch.empty_like(group_sorted)
    group[order] = group_sorted
    index[valid] = group
    out["grid"] = ordered[new]
    out["index"] = index
    return out
