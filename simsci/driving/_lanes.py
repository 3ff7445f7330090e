r"""The lane contract: :class:`LaneSet`, the lanes every driver in these worlds reads.

A :class:`LaneSet` holds the lanes of ``B`` scenes: ``points`` (B, L, 20, 2) world frame
[m] in driving direction, ``width`` and ``speed_limit`` (B, L), ``succ`` (B, L, S) long
(-1 = none; S = 2 in the tile contract, any S works), ``valid`` (B, L) bool. Lanes may be
pieces of any length; a lane shorter than 1 mm is treated as invalid. Points need not be
evenly spaced: :meth:`LaneSet.geometry` resamples a lane to even arc length when its
spacing is off by more than 1 mm. Predecessors are derived from ``succ`` (one per lane,
the highest id among them).

Lane sources: :func:`lanes_from_road` (a :class:`RoadNetwork`, lane ids kept),
:func:`lanes_from_tiles` (a scene episode's tile lane graph in the world frame) and
:func:`crop_lanes` (the lanes near each scene's centre, e.g. the ego, successor ids
remapped: keeps L small on long roads). The agents on these lanes and their kinematics
are in :mod:`._agents`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from simsci.driving._tiles import LANE_POINTS

__all__ = ["LaneSet", "crop_lanes", "lanes_from_road", "lanes_from_tiles"]


# ----------------------------------------------------------------------------- inputs
def checked_tensor(x, name: str, *, like=None, dtype=None) -> torch.Tensor:
    """``x`` as a tensor (on ``like``'s device, in ``dtype``), or a TypeError naming it."""
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.as_tensor(np.asarray(x))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be a tensor or an array, got {type(x).__name__}") from exc
    if like is not None:
        x = x.to(device=like.device)
    if dtype is not None:
        x = x.to(dtype)
    return x


def check_shape(t: torch.Tensor, shape: tuple, name: str, what: str) -> None:
    """A ValueError naming ``name``, the expected shape and its meaning unless ``t`` has it."""
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} ({what}), got {tuple(t.shape)}")


@dataclasses.dataclass
class LaneSet:
    """Lanes of ``B`` scenes: ``points`` (B, L, 20, 2) world frame [m] in driving
    direction, ``width``, ``speed_limit`` (B, L), ``succ`` (B, L, S) long (-1 = none),
    ``valid`` (B, L) bool. Validated on construction; float fields share ``points``'
    dtype and device."""

    points: torch.Tensor
    width: torch.Tensor
    speed_limit: torch.Tensor
    succ: torch.Tensor
    valid: torch.Tensor
    _geo: dict | None = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self):
        p = checked_tensor(self.points, "LaneSet.points")
        if not p.is_floating_point():
            p = p.to(torch.get_default_dtype())
        if p.ndim != 4 or p.shape[-1] != 2 or p.shape[-2] < 2:
            raise ValueError(
                f"LaneSet.points must have shape (B, L, {LANE_POINTS}, 2) (B scenes, L lanes, "
                f"centreline points), got {tuple(p.shape)}"
            )
        B, L = p.shape[:2]
        self.points = p
        for name in ("width", "speed_limit"):
            t = checked_tensor(getattr(self, name), f"LaneSet.{name}", like=p, dtype=p.dtype)
            check_shape(t, (B, L), f"LaneSet.{name}", "one value per lane")
            setattr(self, name, t)
        s = checked_tensor(self.succ, "LaneSet.succ", like=p)
        if s.is_floating_point() or s.dtype == torch.bool:
            raise TypeError(f"LaneSet.succ must hold integer lane ids, got dtype {s.dtype}")
        if s.ndim != 3 or tuple(s.shape[:2]) != (B, L) or s.shape[2] < 1:
            raise ValueError(
                f"LaneSet.succ must have shape ({B}, {L}, S) (successor lane ids, -1 padded), "
                f"got {tuple(s.shape)}"
            )
        s = s.long()
        if s.numel() and (int(s.min()) < -1 or int(s.max()) >= L):
            raise ValueError(
                f"LaneSet.succ must hold lane ids in [0, {L}) or -1, got values in "
                f"[{int(s.min())}, {int(s.max())}]"
            )
        self.succ = s
        v = checked_tensor(self.valid, "LaneSet.valid", like=p)
        if v.dtype != torch.bool:
            raise TypeError(f"LaneSet.valid must be a bool tensor, got dtype {v.dtype}")
        check_shape(v, (B, L), "LaneSet.valid", "one flag per lane")
        self.valid = v
        m = v[..., None, None].expand_as(p)
        if bool((~torch.isfinite(p) & m).any()) or bool(
            (v & ~(torch.isfinite(self.width) & torch.isfinite(self.speed_limit))).any()
        ):
            raise ValueError(
                "LaneSet has NaN or inf in a valid lane (points, width or speed_limit); fix "
                "them or mark the lane invalid"
            )
        if bool((v & (self.width <= 0)).any()):
            raise ValueError("LaneSet.width must be > 0 for valid lanes")
        self._geo = None

    @property
    def num_scenes(self) -> int:
        return int(self.points.shape[0])

    @property
    def num_lanes(self) -> int:
        return int(self.points.shape[1])

    def to(self, device=None, dtype=None) -> LaneSet:
        """A copy on ``device`` with float fields in ``dtype``."""
        f = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731
        return LaneSet(
            f(self.points), f(self.width), f(self.speed_limit),
            self.succ.to(device), self.valid.to(device),
        )  # fmt: skip

    def expand(self, n: int) -> LaneSet:
        """The lanes of a one-scene set repeated for ``n`` scenes (views, no copies)."""
        if self.num_scenes != 1:
            raise ValueError(f"expand needs a LaneSet with B = 1, got B = {self.num_scenes}")
        e = lambda t: t.expand(n, *t.shape[1:])  # noqa: E731
        return LaneSet(
            e(self.points), e(self.width), e(self.speed_limit), e(self.succ), e(self.valid)
        )

    def geometry(self) -> dict:
        """Derived tensors, computed once: even-resampled points, segment tangents,
        lengths, predecessor, successor counts (flattened over (B, L) for gathers)."""
        if self._geo is None:
            self._geo = _lane_geometry(self)
        return self._geo


def _resample_even(pts: torch.Tensor, n: int) -> torch.Tensor:
    """Polylines (N, P, 2) resampled at ``n`` evenly spaced arc lengths (N, n, 2)."""
    seg = (pts[:, 1:] - pts[:, :-1]).norm(dim=-1)
    cum = torch.cat([torch.zeros_like(seg[:, :1]), seg.cumsum(1)], 1)
    total = cum[:, -1:].clamp(min=1e-12)
    tgt = torch.linspace(0, 1, n, dtype=pts.dtype, device=pts.device)[None] * total
    i = torch.searchsorted(cum.contiguous(), tgt.contiguous(), right=True) - 1
    i = i.clamp(0, pts.shape[1] - 2)
    c0 = torch.gather(cum, 1, i)
    sl = torch.gather(seg, 1, i).clamp(min=1e-12)
    u = ((tgt - c0) / sl).clamp(0, 1)[..., None]
    p0 = torch.gather(pts, 1, i[..., None].expand(-1, -1, 2))
    p1 = torch.gather(pts, 1, (i + 1)[..., None].expand(-1, -1, 2))
    return p0 + u * (p1 - p0)


def _lane_geometry(lanes: LaneSet) -> dict:
    pts = lanes.points
    B, L, P = pts.shape[:3]
    flat = pts.reshape(B * L, P, 2)
    seg = (flat[:, 1:] - flat[:, :-1]).norm(dim=-1)
    length = seg.sum(1)
    even = length[:, None] / (P - 1)
    uneven = ((seg - even).abs() > 1e-3).any(1) & (length > 0)
    if bool(uneven.any()):
        flat = flat.clone()
        flat[uneven] = _resample_even(flat[uneven], P)
    valid = lanes.valid.reshape(-1) & (length > 1e-3)
    d = flat[:, 1:] - flat[:, :-1]
    dl = d.norm(dim=-1, keepdim=True)
    tan = torch.where(dl > 1e-9, d / dl.clamp(min=1e-12), torch.zeros_like(d))
    tan[..., 0] = torch.where(dl[..., 0] > 1e-9, tan[..., 0], torch.ones_like(tan[..., 0]))
    succ = lanes.succ.reshape(B * L, -1)
    base = (torch.arange(B, device=pts.device) * L).repeat_interleave(L)[:, None]
    succ_ok = (succ >= 0) & valid[(succ.clamp(min=0) + base)]
    succ = torch.where(succ_ok, succ, torch.full_like(succ, -1))
    # compact the successors to the front, count them
    order = torch.sort((~succ_ok).to(torch.int8), dim=1, stable=True).indices
    succ = torch.gather(succ, 1, order)
    n_succ = succ_ok.sum(1)
    # one predecessor per lane (the highest id among them)
    pred = torch.full((B * L,), -1, dtype=torch.long, device=pts.device)
    src = torch.arange(B * L, device=pts.device)[:, None].expand_as(succ) - base
    tgt = (succ + base).clamp(min=0)
    ok = succ >= 0
    pred.scatter_reduce_(0, tgt[ok], src[ok], reduce="amax")
    return {
        "B": B, "L": L, "P": P, "pts": flat, "tan": tan, "length": length,
        "valid": valid, "succ": succ, "n_succ": n_succ, "pred": pred,
        "width": lanes.width.reshape(-1), "limit": lanes.speed_limit.reshape(-1),
    }  # fmt: skip


def lanes_from_road(road, device=None, dtype=torch.float32, *, max_succ: int = 2) -> LaneSet:
    """A :class:`LaneSet` with B = 1 of a :class:`~simsci.driving.RoadNetwork`:
    every lane resampled to 20 points evenly in arc length (lanes are <= 100 m: <= 5.3 m
    apart), lane ids kept (index ``l`` is the road's lane ``l``). ``max_succ``: successors
    kept per lane (the road has up to 4; the tile contract 2)."""
    if not hasattr(road, "points") or not hasattr(road, "num_points"):
        raise TypeError(f"road must be a RoadNetwork, got {type(road).__name__}")
    if isinstance(max_succ, bool) or not isinstance(max_succ, int) or max_succ < 1:
        raise ValueError(f"max_succ must be an int >= 1, got {max_succ!r}")
    L = road.num_lanes
    out = np.zeros((L, LANE_POINTS, 2))
    for lane in range(L):
        p = road.points[lane, : road.num_points[lane]]
        seg = np.linalg.norm(np.diff(p, axis=0), axis=1)
        cum = np.concatenate([[0.0], np.cumsum(seg)])
        t = np.linspace(0.0, cum[-1], LANE_POINTS)
        out[lane, :, 0] = np.interp(t, cum, p[:, 0])
        out[lane, :, 1] = np.interp(t, cum, p[:, 1])
    succ = np.full((L, max_succ), -1, dtype=np.int64)
    k = min(max_succ, road.succ.shape[1])
    succ[:, :k] = road.succ[:, :k]
    kw = dict(device=device, dtype=dtype)
    return LaneSet(
        torch.as_tensor(out, **kw)[None],
        torch.as_tensor(road.width, **kw)[None],
        torch.as_tensor(road.speed_limit, **kw)[None],
        torch.as_tensor(succ, device=device)[None],
        torch.ones(1, L, dtype=torch.bool, device=device),
    )


def lanes_from_tiles(
    graph: dict, tile_pose, *, max_succ: int = 2, device=None, dtype=torch.float32
) -> LaneSet:
    """A :class:`LaneSet` with B = 1 of a scene episode's lane graph (``read_scene``'s
    ``graph``: ``nodes`` with tile-frame ``points`` (n, 20, 2), ``tile``, ``width``,
    ``speed_limit``; ``edges`` ``index`` (E, 2), ``type`` (E,) into ``EDGE_TYPES``) and
    the episode's ``tile_pose`` (T, 3): pieces in the world frame, ``succ`` from the
    graph's succ edges (the first ``max_succ`` per piece), node ids kept."""
    from simsci.driving.metrics import EDGE_TYPES, tile_to_world

    try:
        nodes, edges = graph["nodes"], graph["edges"]
        pts, tile = np.asarray(nodes["points"], np.float64), np.asarray(nodes["tile"], np.int64)
        width, limit = np.asarray(nodes["width"]), np.asarray(nodes["speed_limit"])
        index, etype = np.asarray(edges["index"], np.int64), np.asarray(edges["type"], np.int64)
    except (KeyError, TypeError) as exc:
        raise TypeError(
            "graph must be a scene lane graph: {'nodes': {points, tile, width, speed_limit}, "
            f"'edges': {{index, type}}}} (read_scene(...)['graph']); got {exc!r}"
        ) from exc
    pose = np.asarray(tile_pose, np.float64)
    n = len(pts)
    if pts.shape != (n, LANE_POINTS, 2) or n == 0:
        raise ValueError(
            f"graph nodes/points must have shape (n >= 1, {LANE_POINTS}, 2), got {pts.shape}"
        )
    if pose.ndim != 2 or pose.shape[1] != 3 or tile.min() < 0 or tile.max() >= len(pose):
        raise ValueError(
            f"tile_pose must have shape (T, 3) with a row for every node tile (0..{tile.max()}), "
            f"got {pose.shape}"
        )
    world = tile_to_world(pts, pose[tile][:, None])
    succ = np.full((n, max_succ), -1, np.int64)
    fill = np.zeros(n, np.int64)
    for a, b in index[etype == EDGE_TYPES.index("succ")]:
        if fill[a] < max_succ:
            succ[a, fill[a]] = b
            fill[a] += 1
    kw = dict(device=device, dtype=dtype)
    return LaneSet(
        torch.as_tensor(world, **kw)[None], torch.as_tensor(width, **kw)[None],
        torch.as_tensor(limit, **kw)[None], torch.as_tensor(succ, device=device)[None],
        torch.ones(1, n, dtype=torch.bool, device=device),
    )  # fmt: skip


def crop_lanes(lanes: LaneSet, centre, radius: float, max_lanes: int | None = None):
    """Per scene, the lanes that come within ``radius`` m of ``centre`` (B, 2) (all of
    them, or the ``max_lanes`` nearest), successor ids remapped (a successor that is
    cropped away becomes -1). A one-scene ``lanes`` is used for every centre.

    Returns ``(LaneSet (B, L', ...), source (B, L') long)``: ``source[b, i]`` is the lane's
    index in ``lanes`` (-1 for padding)."""
    c = checked_tensor(centre, "centre", like=lanes.points, dtype=lanes.points.dtype)
    if c.ndim != 2 or c.shape[1] != 2:
        raise ValueError(f"centre must have shape (B, 2), got {tuple(c.shape)}")
    B = c.shape[0]
    if lanes.num_scenes not in (1, B):
        raise ValueError(f"lanes have B = {lanes.num_scenes}; centre needs B = 1 or that many")
    if lanes.num_scenes == 1 and B > 1:
        lanes = lanes.expand(B)
    L = lanes.num_lanes
    d2 = (lanes.points - c[:, None, None]).pow(2).sum(-1).amin(-1)  # B, L
    keep = lanes.valid & (d2 <= float(radius) ** 2)
    n = int(keep.sum(1).max()) if keep.numel() else 0
    if max_lanes is not None:
        n = min(n, int(max_lanes))
    n = max(n, 1)
    score = torch.where(keep, d2, torch.full_like(d2, math.inf))
    if max_lanes is None:
        # keep the original order (stable): kept lanes first
        order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices[:, :n]
    else:
        order = torch.topk(score, n, dim=1, largest=False).indices
        order = torch.sort(order, dim=1).values
    kept = torch.gather(keep, 1, order)
    source = torch.where(kept, order, torch.full_like(order, -1))
    remap = torch.full((B, L), -1, dtype=torch.long, device=c.device)
    remap.scatter_(1, order, torch.where(kept, torch.arange(n, device=c.device).expand(B, n), -1))

    def g(t):
        return torch.gather(
            t, 1, order.reshape(B, n, *([1] * (t.ndim - 2))).expand(B, n, *t.shape[2:])
        )

    succ = g(lanes.succ)
    succ = torch.where(
        succ >= 0, torch.gather(remap, 1, succ.clamp(min=0).reshape(B, -1)).reshape(succ.shape), -1
    )
    out = LaneSet(g(lanes.points), g(lanes.width), g(lanes.speed_limit), succ, kept)
    return out, source
