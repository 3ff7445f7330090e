r"""Roads as lane groups: a tile's parallel lanes as one reference lane plus lane counts.

:func:`group_lanes` turns a tile's lanes into **groups**: lanes that run side by side at
one lane width (a carriageway, or both carriageways of a two-way road) become one
*reference* lane and three counts ``(left, right, oncoming)``; :func:`expand_groups` is
the inverse, offsetting the reference sideways by whole lane widths. The tile generator's
``lane_repr="road"`` (:class:`~._tokens.TokenLayout`) learns and draws groups, one token
a road, and the world drives on the expanded lanes.

Why: the generator drew lanes one token at a time, and nothing made two tokens a road: a
CPU-trained model drew about half the data's lanes per tile, no parallel or oncoming
lanes, and two crossing lane pairs per tile where the data has 0.17 (benchmarks/README.md,
"Lane representation"). In the data (``make_road``) 6.8 lanes per tile form 2.4 groups
(2.8 lanes a group), so a group token has fewer, more distinct things to place, and the
lanes of a group are parallel by construction.

Definitions (all in the tile's frame, metres):

- Two lanes are **adjacent** when at least ``MIN_OVERLAP`` of one's 20 points project onto
  the other's interior at a signed lateral distance of one lane width (mean within 25%,
  spread below 12% of the width, all on one side) with the two headings within 18
  degrees of parallel or anti-parallel there. Groups are the connected components.
- In a group each lane gets a lateral slot ``k`` (whole widths from the group's first
  lane, left positive) and a direction (+1 / -1). The **reference** is the rightmost lane
  of the direction with more lanes (a tie: the direction heading east, or north when
  exactly north/south), or the lane given as ``ego`` (a first tile's ego lane, so the
  generator's ego slot stays that lane). ``left`` / ``right``: lanes of its direction on
  its left / right; ``oncoming``: lanes of the other direction beyond its left-most lane
  (right-hand traffic, as the data). A lane breaking that pattern (a second lane in one
  slot, an oncoming lane on the right, a gap) leaves the group as a group of its own.
- **Expansion**: lane ``k`` widths to the left is the reference moved ``k w`` along its
  left normal (oncoming lanes also reversed). An end of the reference on the tile's edge
  is carried to the same edge (the offset lane is cut, or extended straight along its end
  tangent, where it meets the edge line): a road crossing a seam at an angle keeps every
  lane's end on the seam. Offset lanes on the inner side of a curve tighter than the
  offset would fold back; they are left out (counted by the caller as fewer lanes).
"""

from __future__ import annotations

import math

import numpy as np

from simsci.driving import LANE_POINTS, TILE_SIZE, arc_length, point_at

__all__ = ["COUNT_NAMES", "MAX_COUNT", "expand_groups", "group_lanes"]

#: the counts of a group, in the order of ``tile["group"]``'s columns
COUNT_NAMES = ("left", "right", "oncoming")
#: the largest count a group may have (the data's widest roads have 4 lanes a side)
MAX_COUNT = 4
#: points of a lane (of 20) that must lie beside its neighbour to call them adjacent
MIN_OVERLAP = 10
_EDGE_TOL = 0.05
_HALF = 0.5 * TILE_SIZE


def _side_by_side(p: np.ndarray, q: np.ndarray):
    """How lane ``q`` (20, 2) lies beside lane ``p``: ``(offset, direction, spread)``,
    the mean and standard deviation of the signed lateral distances of q's points that
    project onto p's interior (left of p positive) and ``direction`` +1 / -1 (q runs
    along / against p); None when they are not parallel there (module docstring)."""
    a, ab = p[:-1], np.diff(p, axis=0)  # (S, 2)
    den = np.maximum((ab**2).sum(-1), 1e-18)
    d = q[:, None, :] - a[None]  # (P, S, 2)
    u = (d * ab[None]).sum(-1) / den[None]
    uc = np.clip(u, 0.0, 1.0)
    foot = a[None] + uc[..., None] * ab[None]
    dist = np.sqrt(((q[:, None] - foot) ** 2).sum(-1))
    s = dist.argmin(1)
    rows = np.arange(len(q))
    u_best = u[rows, s]
    inner = ((s > 0) | (u_best > 1e-3)) & ((s < len(ab) - 1) | (u_best < 1 - 1e-3))
    if inner.sum() < MIN_OVERLAP:
        return None
    t = ab[s] / np.sqrt(den[s])[:, None]  # p's unit tangent at each foot
    rel = q - foot[rows, s]
    signed = (t[:, 0] * rel[:, 1] - t[:, 1] * rel[:, 0])[inner]
    tq = np.gradient(q, axis=0)
    tq = tq / np.maximum(np.linalg.norm(tq, axis=-1, keepdims=True), 1e-12)
    cos = (tq * t).sum(-1)[inner]
    if np.all(cos >= 0.95):
        direction = 1
    elif np.all(cos <= -0.95):
        direction = -1
    else:
        return None
    if not (np.all(signed > 0) or np.all(signed < 0)):
        return None
    return float(signed.mean()), direction, float(signed.std())


def _heads_east(p: np.ndarray) -> bool:
    chord = p[-1] - p[0]
    return bool(chord[0] > 1e-6 or (abs(chord[0]) <= 1e-6 and chord[1] > 0))


def group_lanes(tile: dict, ego: int | None = None) -> dict:
    """A tile's lanes as lane groups (module docstring).

    ``tile``: ``points`` (n, 20, 2), ``width`` / ``speed_limit`` / ``kind`` (n,) and any
    other keys (passed through). ``ego``: a lane that must be a group's reference.
    Returns a tile dict whose lanes are the groups' reference lanes (points, width,
    speed limit and kind those of the reference, unchanged) with ``group`` int64 (G, 3)
    ``(left, right, oncoming)`` and ``source`` int64 (G,) (each reference's index into
    the input lanes), groups in ascending ``source`` order."""
    pts = np.asarray(tile["points"], np.float64)
    width = np.asarray(tile["width"], np.float64)
    n = len(pts)
    if pts.ndim != 3 or pts.shape[1:] != (LANE_POINTS, 2):
        raise ValueError(f"points must be (n, {LANE_POINTS}, 2) lane polylines, got {pts.shape}")
    if ego is not None and not (0 <= int(ego) < n):
        raise ValueError(f"ego must index the tile's {n} lanes, got {ego!r}")
    # adjacency: (i, j) -> (offset of j in i's frame, direction of j relative to i)
    adj: dict[int, list] = {i: [] for i in range(n)}
    # pairs whose nearest points are farther apart than a lane width and a segment
    # cannot be adjacent: skipped before the exact test (the same result, faster)
    seg = np.sqrt((np.diff(pts, axis=1) ** 2).sum(-1)).max(-1) if n else np.zeros(0)
    flat = pts.reshape(-1, 2)
    near = np.sqrt(((flat[:, None] - flat[None]) ** 2).sum(-1))
    near = near.reshape(n, LANE_POINTS, n, LANE_POINTS).min(axis=(1, 3))
    reach = 1.25 * 0.5 * (width[:, None] + width[None]) + np.maximum(seg[:, None], seg[None])
    for i in range(n):
        for j in range(i + 1, n):
            if near[i, j] > reach[i, j]:
                continue
            w = 0.5 * (width[i] + width[j])
            hit = _side_by_side(pts[i], pts[j])
            if hit is None:
                hit = _side_by_side(pts[j], pts[i])
                if hit is None:
                    continue
                off, dr, spread = hit  # i seen from j: turn it round
                off_ij, dir_ij = -off * dr, dr
            else:
                off_ij, dir_ij, spread = hit
            if abs(abs(off_ij) - w) <= 0.25 * w and spread <= 0.12 * w:
                adj[i].append((j, off_ij, dir_ij))
                # j's frame: i lies at -off (same direction) or +off (opposite), and the
                # direction relation is symmetric
                adj[j].append((i, -off_ij * dir_ij, dir_ij))
    seen = np.zeros(n, bool)
    refs, counts = [], []
    for start in range(n):
        if seen[start]:
            continue
        # breadth-first: each member's slot offset and direction in start's frame
        offset, direc = {start: 0.0}, {start: 1}
        queue = [start]
        seen[start] = True
        while queue:
            i = queue.pop(0)
            for j, off_ij, dir_ij in adj[i]:
                if j in offset:
                    continue
                offset[j] = offset[i] + direc[i] * off_ij
                direc[j] = direc[i] * dir_ij
                seen[j] = True
                queue.append(j)
        group = sorted(offset)
        ref, cnt, left_out = _reference(group, offset, direc, pts, width, ego)
        refs.append(ref)
        counts.append(cnt)
        for j in left_out:
            refs.append(j)
            counts.append((0, 0, 0))
    order = np.argsort(refs, kind="stable")
    src = np.asarray(refs, np.int64)[order]
    out = dict(tile)
    for key in ("points", "width", "speed_limit", "kind"):
        out[key] = np.asarray(tile[key])[src]
    out["group"] = np.asarray(counts, np.int64).reshape(-1, 3)[order]
    out["source"] = src
    return out


def _reference(group, offset, direc, pts, width, ego):
    """The reference lane of one group, its counts and the lanes that leave it."""
    if len(group) == 1:
        return group[0], (0, 0, 0), []
    w = width[group[0]]
    slot = {j: int(round(offset[j] / w)) for j in group}
    n_pos = sum(direc[j] > 0 for j in group)
    n_neg = len(group) - n_pos
    if ego is not None and int(ego) in slot:
        main = direc[int(ego)]
    elif n_pos != n_neg:
        main = 1 if n_pos > n_neg else -1
    else:
        east = [j for j in group if _heads_east(pts[j])]
        main = direc[east[0]] if east else 1
    # positions in the main direction's frame: left positive
    pos = {j: main * slot[j] for j in group}
    mine = sorted((j for j in group if direc[j] == main), key=lambda j: (pos[j], j))
    other = sorted((j for j in group if direc[j] != main), key=lambda j: (pos[j], j))
    ref = int(ego) if ego is not None and int(ego) in slot else mine[0]
    keep, left_out = {ref}, []
    # the main direction's lanes: one per slot, no gap, outwards from the reference
    for side in (1, -1):
        p = pos[ref] + side
        for j in sorted(mine, key=lambda j: side * pos[j]):
            if j == ref or side * (pos[j] - pos[ref]) <= 0:
                continue
            if pos[j] == p:
                keep.add(j)
                p += side
            else:
                left_out.append(j)
    top = max(pos[j] for j in keep)
    p = top + 1
    for j in other:
        if pos[j] == p:
            keep.add(j)
            p += 1
        else:
            left_out.append(j)
    left = sum(pos[j] > pos[ref] for j in keep if direc[j] == main)
    right = sum(pos[j] < pos[ref] for j in keep if direc[j] == main)
    oncoming = sum(direc[j] != main for j in keep)
    cnt = tuple(min(c, MAX_COUNT) for c in (left, right, oncoming))
    return ref, cnt, left_out


def _resample(poly: np.ndarray, n: int = LANE_POINTS) -> np.ndarray:
    """``n`` points evenly in arc length along the polyline ``poly`` (m, 2); exact ends
    (also lane completion's, :mod:`._lanegraph`)."""
    total = arc_length(poly)[-1]
    if total <= 1e-12:
        return np.repeat(poly[:1], n, 0)
    out = point_at(poly, np.linspace(0.0, total, n))
    out[0], out[-1] = poly[0], poly[-1]
    return out


def _edge_of(point: np.ndarray):
    """(axis, edge value) of the tile edge a point lies on, or None."""
    for axis in (0, 1):
        if abs(abs(point[axis]) - _HALF) <= _EDGE_TOL:
            return axis, math.copysign(_HALF, point[axis])
    return None


def _to_edge(lane: np.ndarray, at_end: bool, axis: int, edge: float) -> np.ndarray | None:
    """``lane`` with its last (``at_end``) or first point carried to the line
    ``x[axis] = edge``: cut where it first crosses it from the other end, or extended
    straight along its end tangent. None if the line cannot be reached ahead."""
    p = lane if at_end else lane[::-1]
    # strictly on the tile's side of the edge line
    inside = p[:, axis] < edge if edge > 0 else p[:, axis] > edge
    if not inside[0]:
        return None
    out_idx = np.flatnonzero(~inside)
    if len(out_idx):
        k = int(out_idx[0])  # first point on or past the line
        a, b = p[k - 1], p[k]
        u = (edge - a[axis]) / (b[axis] - a[axis]) if b[axis] != a[axis] else 1.0
        q = np.concatenate([p[:k], [a + u * (b - a)]])
    else:
        t = p[-1] - p[-2]
        if abs(t[axis]) < 1e-9 or np.sign(t[axis]) != np.sign(edge - p[-1, axis]):
            return None
        u = (edge - p[-1, axis]) / t[axis]
        q = np.concatenate([p, [p[-1] + u * t]])
    if len(q) < 2 or arc_length(q)[-1] < 1.0:
        return None
    return q if at_end else q[::-1]


def _offset_lane(ref: np.ndarray, d: float) -> np.ndarray | None:
    """The reference moved ``d`` metres along its left normal, ends carried to the edges
    the reference's ends lie on; None where it would fold back or cannot reach them."""
    t = np.gradient(ref, axis=0, edge_order=2)  # second order at the ends too
    t = t / np.maximum(np.linalg.norm(t, axis=-1, keepdims=True), 1e-12)
    lane = ref + d * np.stack([-t[:, 1], t[:, 0]], -1)
    if np.any((np.diff(lane, axis=0) * np.diff(ref, axis=0)).sum(-1) <= 0):
        return None  # inner side of a curve tighter than the offset
    for at_end, point in ((False, ref[0]), (True, ref[-1])):
        edge = _edge_of(point)
        if edge is not None:
            lane = _to_edge(lane, at_end, *edge)
            if lane is None:
                return None
    return _resample(lane)


def expand_groups(tile: dict) -> dict:
    """Lane groups (``group_lanes``' output, or a generated tile with ``group`` (G, 3)
    counts) -> a tile of lanes: the references first, in order, then each group's other
    lanes (module docstring). Other keys pass through; ``group`` and ``source`` are
    dropped; ``lane_group`` (n,) gives each lane's group."""
    pts = np.asarray(tile["points"], np.float64)
    counts = np.clip(np.asarray(tile["group"], np.int64).reshape(-1, 3), 0, MAX_COUNT)
    if len(counts) != len(pts):
        raise ValueError(f"group must be ({len(pts)}, 3) like the lanes, got {counts.shape}")
    width = np.asarray(tile["width"], np.float64)
    new_pts, new_src = [], []
    for g, (left, right, oncoming) in enumerate(counts.tolist()):
        w = width[g]
        for k, reverse in (
            [(k, False) for k in range(1, left + 1)]
            + [(-k, False) for k in range(1, right + 1)]
            + [(left + k, True) for k in range(1, oncoming + 1)]
        ):
            lane = _offset_lane(pts[g], k * w)
            if lane is not None:
                new_pts.append(lane[::-1] if reverse else lane)
                new_src.append(g)
    src = np.concatenate([np.arange(len(pts)), np.asarray(new_src, np.int64)]).astype(np.int64)
    out = {k: v for k, v in tile.items() if k not in ("group", "source")}
    out["points"] = np.concatenate([pts, np.asarray(new_pts).reshape(-1, LANE_POINTS, 2)])
    for key in ("width", "speed_limit", "kind"):
        out[key] = np.asarray(tile[key])[src]
    out["lane_group"] = src
    return out
