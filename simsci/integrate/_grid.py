"""Normalise ``y0`` and ``t`` at the boundary and build the union time grid.

Every solve in simsci runs once for the whole batch on the *union grid*: the sorted
unique times of all samples. Each output entry ``(sample b, its i-th time)`` remembers
which union time it is (``uindex``), so gathering the answer back is one vectorised index
(no Python loop over samples). Samples whose windows ``[t_b0, t_bend]`` differ are
frozen outside their window by the solvers (see ``_odeint``/``_sdeint``).

Entries are kept in two orders: the caller's (sample-major, time within sample) and the
union order (sorted by union index, stable), in which a solver that walks forward in
time meets them contiguously.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

_FLOAT_DTYPES = (torch.float32, torch.float64)


def check_y0(y0, *, name: str = "y0", min_dim: int = 1) -> Tensor:
    """``y0``: a finite float32/float64 tensor of shape (B, *S) with B >= 1."""
    if not isinstance(y0, Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape (B, *S) (batch first), got "
            f"{type(y0).__name__}; wrap it with torch.as_tensor(..., dtype=torch.float64)."
        )
    if y0.dtype not in _FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be float32 or float64 (the solvers' time arithmetic and the "
            f"step-size control need at least single precision), got {y0.dtype}; cast it "
            f"with {name}.double() or {name}.float()."
        )
    if y0.dim() < min_dim or y0.shape[0] == 0:
        want = "(B, *S)" if min_dim == 1 else "(B, D)"
        raise ValueError(
            f"{name} must have shape {want} with batch size B >= 1, got shape "
            f"{tuple(y0.shape)}; add a batch dimension with {name}.unsqueeze(0)."
        )
    finite = torch.isfinite(y0.detach()).reshape(y0.shape[0], -1).all(dim=1)
    if not bool(finite.all()):
        bad = torch.nonzero(~finite).flatten().tolist()
        raise ValueError(
            f"{name} must be finite, but sample(s) {_fmt_samples(bad)} contain NaN or inf; "
            f"fix the initial state of those samples."
        )
    return y0


def _fmt_samples(samples: Sequence[int], limit: int = 10) -> str:
    samples = list(samples)
    head = ", ".join(str(s) for s in samples[:limit])
    more = f", ... ({len(samples)} in all)" if len(samples) > limit else ""
    return f"[{head}{more}]"


@dataclasses.dataclass
class TimeGrid:
    """The union grid of a batch and the map from output entries to it.

    Shapes: ``union`` (U,); per entry (N = total number of requested outputs)
    ``sample``/``uindex``/``times`` in the caller's order; ``order`` (N,) the permutation
    into union order; ``ptr`` (U+1,) Python list: union-order entries with union index k
    are ``order[ptr[k]:ptr[k+1]]``. ``start``/``end`` (B,): each sample's window.
    ``kind`` is "shared" (one (T,) grid), "batched" ((B, T)) or "ragged" (list).
    """

    kind: str
    batch: int
    union: Tensor
    union_list: list[float]
    sample: Tensor
    uindex: Tensor
    times: Tensor
    lengths: list[int]
    first: Tensor
    start: Tensor
    end: Tensor
    windows_differ: bool
    _order: Tensor | None = None
    _ptr: list[int] | None = None

    @property
    def order(self) -> Tensor:
        if self._order is None:
            self._order = torch.argsort(self.uindex, stable=True)
        return self._order

    @property
    def ptr(self) -> list[int]:
        if self._ptr is None:
            sorted_u = self.uindex[self.order]
            marks = torch.arange(len(self.union_list) + 1, device=sorted_u.device)
            self._ptr = torch.searchsorted(sorted_u, marks).tolist()
        return self._ptr

    def min_own_interval(self) -> float | None:
        """The smallest gap between consecutive times of any one sample (None if no gaps)."""
        same = self.sample[1:] == self.sample[:-1]
        if not bool(same.any()):
            return None
        gaps = (self.times[1:] - self.times[:-1])[same]
        return float(gaps.min())

    def sample_in_union_order(self) -> Tensor:
        """(N,) the sample of each entry, in union order."""
        return self.sample[self.order]

    def from_union_order(self, chunks: list[Tensor]) -> Tensor:
        """Entries collected in union order (consecutive ``chunks``) -> caller order (N, *S)."""
        sorted_values = torch.cat(chunks, dim=0)
        out = sorted_values.new_empty(sorted_values.shape)
        return out.index_copy(0, self.order, sorted_values)

    def gather_union(self, sol: Tensor) -> Tensor:
        """Entries (N, *S) in the caller's order from a union solution ``sol`` (U, B, *S)."""
        return sol[self.uindex, self.sample]

    def assemble(self, values: Tensor, y0: Tensor):
        """Caller-order entries (N, *S) -> (B, T, *S), or a list of (T_b, *S) if ragged.

        Each sample's first output is set to its ``y0`` exactly (interpolation at a step
        end reproduces it only to rounding).
        """
        values = values.index_copy(0, self.first, y0)
        if self.kind == "ragged":
            return list(torch.split(values, self.lengths, dim=0))
        return values.reshape(self.batch, self.lengths[0], *values.shape[1:])


def _as_time_tensor(t, name: str) -> Tensor:
    if isinstance(t, Tensor):
        out = t
    else:
        try:
            out = torch.as_tensor(np.asarray(t))
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{name} must be a tensor of times, got {type(t).__name__} ({exc})"
            ) from None
    if (
        out.dtype == torch.bool
        or out.is_complex()
        or not (
            out.is_floating_point()
            or out.dtype in (torch.int8, torch.int16, torch.int32, torch.int64)
        )
    ):
        raise TypeError(f"{name} must hold real numbers (times), got dtype {out.dtype}.")
    return out.detach()


def _check_increasing(
    times: Tensor, sample: Tensor, offsets: Tensor, shared: bool, after_cast: Tensor | None = None
):
    """Strictly increasing within each sample; names the first offending sample/index."""
    if times.numel() < 2:
        return
    same = sample[1:] == sample[:-1]
    bad = same & ~(times[1:] > times[:-1])
    if bool(bad.any()):
        k = int(torch.nonzero(bad)[0, 0])
        b = int(sample[k])
        i = k + 1 - int(offsets[b])
        who = "t" if shared else f"sample {b}"
        if after_cast is None:
            raise ValueError(
                f"t must be strictly increasing along time for every sample, but {who} has "
                f"t[{i - 1}] = {float(times[k])!r} >= t[{i}] = {float(times[k + 1])!r}; sort the "
                f"times and drop duplicates (torch.unique); to integrate backwards in time, "
                f"substitute s = -t."
            )
        raise ValueError(
            f"t for {who}: t[{i - 1}] = {float(after_cast[k])!r} and t[{i}] = "
            f"{float(after_cast[k + 1])!r} are distinct but become equal when cast to "
            f"{times.dtype} (the dtype of y0); use a float64 y0, or times further apart."
        )


def build_grid(t, batch: int, dtype: torch.dtype, device: torch.device) -> TimeGrid:
    """Validate ``t`` ((T,), (B, T) or a list of B 1-D tensors) and build its union grid.

    Times end up on ``device`` with ``dtype`` (the dtype of y0); a cast to lower
    precision that merges two distinct times of one sample is an error.
    """
    ragged = (
        isinstance(t, (list, tuple))
        and len(t) > 0
        and all(isinstance(x, (Tensor, np.ndarray, list, tuple)) for x in t)
    )
    if ragged:
        parts = [_as_time_tensor(x, f"t[{b}]") for b, x in enumerate(t)]
        for b, p in enumerate(parts):
            if p.dim() != 1 or p.numel() == 0:
                raise ValueError(
                    f"a list t gives one 1-D tensor of times per sample, but t[{b}] has shape "
                    f"{tuple(p.shape)}; give each sample at least one time."
                )
        if len(parts) != batch:
            raise ValueError(
                f"t is a list of {len(parts)} per-sample time grids but y0 has batch size "
                f"{batch}; give exactly one grid per sample."
            )
        lengths = [int(p.numel()) for p in parts]
        src_dtype = torch.promote_types(parts[0].dtype, torch.float64)
        flat = torch.cat([p.to(device=device, dtype=src_dtype) for p in parts])
        kind = "ragged"
    else:
        tt = _as_time_tensor(t, "t")
        if tt.dim() == 1:
            if tt.numel() == 0:
                raise ValueError("t must hold at least one time point, got an empty tensor.")
            kind, lengths = "shared", [int(tt.numel())] * batch
        elif tt.dim() == 2:
            if tt.shape[0] != batch:
                raise ValueError(
                    f"t of shape {tuple(tt.shape)} gives per-sample grids for {tt.shape[0]} "
                    f"samples, but y0 has batch size {batch}; give t as (T,) to share one grid, "
                    f"or as (B, T) with one row per sample."
                )
            if tt.shape[1] == 0:
                raise ValueError("t must hold at least one time point per sample, got T = 0.")
            kind, lengths = "batched", [int(tt.shape[1])] * batch
        else:
            raise ValueError(
                f"t must be (T,) shared by all samples, (B, T) per sample, or a list of B 1-D "
                f"tensors; got shape {tuple(tt.shape)}."
            )
        src_dtype = tt.dtype if tt.is_floating_point() else torch.float64
        tt = tt.to(device=device, dtype=src_dtype)
        flat = tt if kind == "shared" else tt.reshape(-1)

    if not bool(torch.isfinite(flat).all()):
        k = int(torch.nonzero(~torch.isfinite(flat))[0, 0])
        where = f"index {k}" if kind == "shared" else _entry_name(k, lengths)
        raise ValueError(f"t must be finite, but has {float(flat[k])!r} at {where}; fix the times.")

    if kind == "shared":
        sample_of = torch.zeros(flat.shape[0], dtype=torch.long, device=device)
        offsets = torch.zeros(1, dtype=torch.long, device=device)
    else:
        lens = torch.as_tensor(lengths, device=device)
        sample_of = torch.repeat_interleave(torch.arange(batch, device=device), lens)
        offsets = torch.cumsum(lens, 0) - lens
    _check_increasing(flat, sample_of, offsets, kind == "shared")
    cast = flat.to(dtype)
    if cast.dtype != flat.dtype:
        _check_increasing(cast, sample_of, offsets, kind == "shared", after_cast=flat)

    if kind == "shared":
        union = cast
        T = int(cast.numel())
        uindex = torch.arange(T, device=device).repeat(batch)
        sample = torch.arange(batch, device=device).repeat_interleave(T)
        times = union[uindex]
        first = torch.arange(batch, device=device) * T
        start = union[:1].expand(batch)
        end = union[-1:].expand(batch)
        differ = False
    else:
        union, uindex = torch.unique(cast, sorted=True, return_inverse=True)
        sample = sample_of
        times = cast
        first = offsets
        last = offsets + torch.as_tensor(lengths, device=device) - 1
        start, end = cast[first], cast[last]
        differ = bool((start != start[0]).any() or (end != end[0]).any())
    return TimeGrid(
        kind=kind,
        batch=batch,
        union=union,
        union_list=union.tolist(),
        sample=sample,
        uindex=uindex,
        times=times,
        lengths=lengths,
        first=first,
        start=start.contiguous(),
        end=end.contiguous(),
        windows_differ=differ,
    )


def _entry_name(k: int, lengths: list[int]) -> str:
    b, acc = 0, 0
    while acc + lengths[b] <= k:
        acc += lengths[b]
        b += 1
    return f"sample {b}, index {k - acc}"


def subdivide(union: Tensor, step: float) -> Tensor:
    """Split each gap of ``union`` into ceil(gap / step) equal steps; keeps every union time.

    The result contains ``union`` exactly (bit for bit), so outputs and sample windows are
    step boundaries. A relative slack of 1e-6 stops rounding noise from adding a sliver.
    """
    if union.numel() < 2:
        return union
    u64 = union.to(torch.float64)
    gaps = u64[1:] - u64[:-1]
    n = torch.ceil(gaps / step * (1 - 1e-6)).clamp_(min=1).long()
    seg = torch.repeat_interleave(torch.arange(gaps.numel(), device=union.device), n)
    offs = torch.cumsum(n, 0) - n
    k = torch.arange(int(n.sum()), device=union.device) - offs[seg]
    inner = u64[seg] + k.to(torch.float64) * (gaps / n)[seg]
    grid = torch.cat([inner.to(union.dtype), union[-1:]])
    # Where k == 0 the value is the union time itself; restore it bit for bit after the cast.
    grid[:-1] = torch.where(k == 0, union[seg], grid[:-1])
    _check_grid(grid, step)
    return grid


def uniform(t0: Tensor, t1: Tensor, step: float) -> Tensor:
    """Equal steps of at most ``step`` from ``t0`` to ``t1`` (both exact endpoints)."""
    span = float(t1.to(torch.float64) - t0.to(torch.float64))
    n = max(1, int(np.ceil(span / step * (1 - 1e-6))))
    k = torch.arange(n + 1, device=t0.device, dtype=torch.float64)
    grid = (t0.to(torch.float64) + k * (span / n)).to(t0.dtype)
    grid[0], grid[-1] = t0, t1
    _check_grid(grid, step)
    return grid


def _check_grid(grid: Tensor, step: float):
    if grid.numel() > 1 and not bool((grid[1:] > grid[:-1]).all()):
        k = int(torch.nonzero(~(grid[1:] > grid[:-1]))[0, 0])
        raise ValueError(
            f"step_size={step!r} is below the {grid.dtype} resolution of the times near "
            f"t = {float(grid[k])!r}: two steps would share a time; use a larger step_size or "
            f"a float64 y0."
        )
