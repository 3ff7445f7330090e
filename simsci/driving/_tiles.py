r"""Vector scene tiles: a drive cut into 64 m squares of lane pieces and agent histories.

The contract is the "Scene tiles" section of the driving design (kind="scene",
system="driving"); this module cuts a simulated drive into it, writes it through
:class:`simsci.data.TrajectoryWriter` and reads it back. Design choices and why:

- **One grid per episode, anchored at the ego.** Tile 0 is centred on the ego's position
  at ``times[0]`` with axes along its heading :math:`\theta_0`; tile (i, j) is centred at
  :math:`c_0 + 64\,(i\,e_x + j\,e_y)`, with :math:`e_x = (\cos\theta_0, \sin\theta_0)`,
  :math:`e_y = (-\sin\theta_0, \cos\theta_0)`, and
  :math:`p_\text{world} = c + R(\theta_0)\,p_\text{tile}`. All tiles share one
  orientation, so neighbouring squares share their edges exactly (no overlap, no gap)
  and a lane cut on a seam continues in the neighbour from the same point.
- **Cells in order of first visit** (:func:`tile_cells`). A sample belongs to cell
  ``floor(q / 64 + 1/2)`` (q its position in tile 0's frame: half-open cells, so every
  point has one cell). When two consecutive samples are not 4-neighbours (a diagonal
  skip past a corner, or a jump), the segment between them is walked cell by cell
  (Amanatides & Woo 1987 grid traversal), so the cell sequence stays 4-connected; an
  exact corner passage steps along x first. Revisited cells are not repeated.
  ``first_index`` is the index of the first sample inside the cell, as a float: a cell
  the path only cuts between samples i and i+1 gets the fractional index ``i + u``
  where it enters it (clipped into (0, 1)), so the tile times stay strictly increasing
  and its agents are interpolated linearly between the two samples.
- **Lane pieces** (:func:`cut_lanes`): each lane polyline is clipped against the closed
  square segment by segment (Liang & Barsky 1984, vectorised over all segments of the
  lanes whose bounding box meets the square); clipped parts that touch form a maximal
  run, the run's arc-length range [s0, s1] is resampled at 20 evenly spaced arc
  lengths, and an end cut by the boundary is snapped onto it (the coordinate nearest
  to +-32 m set exactly). Runs shorter than 0.5 m are dropped. Arc length is the
  cumulative length of the lane's own polyline. Seams are exact (gap ~1e-13 m in
  float64) and stay exact in the file's float32 points, since neighbouring tiles share
  one orientation (the coordinate along the seam is the same number in both frames).
- **Tiles the ego only grazes** (:func:`scene_episode`). Every tile must hold a lane. A
  tile whose lanes are all shorter than 0.5 m keeps those slivers (a centreline clipping
  a corner). A cell with no centreline at all that the ego reaches at most one lane
  width (the road's widest) inside -- the ego's body clipping a corner or an edge while
  changing lanes -- is dropped; when that breaks 4-connectivity, the other cell at that
  corner (4-adjacent to an earlier tile and to the next one, holding a lane) takes its
  place and time (the ego is agent 0 there though just outside the square). A lane-less
  cell the ego enters deeper means an ego off the road network: a ValueError naming the
  step.
- **Lane graph** (:func:`lane_graph`), one per episode over the pieces of all its
  tiles, node ids in tile order. ``succ`` src -> dst when dst continues src: two pieces
  of the same segment that follow each other in arc length with a gap of at most 0.5 m
  (the length below which pieces are dropped, so a dropped sliver does not cut the
  chain; a lane that leaves the episode's tiles for longer gets no edge), and the last
  piece of a segment (ending within 0.5 m of its end) to the first piece of each of its
  successors (starting within 0.5 m of their start), in any tiles. ``pred`` is every
  ``succ`` reversed. ``left``/``right``: pieces in the same tile whose segments are
  neighbours (``road.left``/``road.right``) and whose arc-length ranges overlap after
  mapping s by ``length[dst] / length[src]``. Edges are sorted by (type, src, dst).
- **Agents** (:func:`scene_episode`). Per tile k, the H = 11 input samples ending at
  ``first_index[k]`` (1 s at the simulator's 10 Hz), in tile k's frame (position
  rotated and shifted, heading as (cos, sin) rotated by :math:`-\theta_0`, speed and
  size unchanged). Agent 0 is the ego; the others are every slot valid and inside the
  closed square at t_k, in slot order. A history frame is valid when the slot is valid
  there and at every later frame up to t_k (a slot that was empty in between held a
  different vehicle); invalid frames and padded agents are NaN / False. A slot re-used
  by a new vehicle without an empty sample between cannot be told apart from one
  vehicle. ``t`` is stored relative to ``times[0]`` (so t_0 = 0).
- **Files.** Written through the shared writer (atomic rename, schema checks,
  statistics) with ``meta`` carrying the layout (``tile_size``, ``lane_points``,
  ``history``, ``edge_types``, ``agent_features``, ``lane_kinds``, ``min_piece``);
  :func:`read_scene` refuses a file of another layout rather than misreading it, and
  checks the rules the generic checker does not know (one lane node per tile at least,
  edge types, node tiles, feature shapes). ``agents`` carries the history axis, (L, A,
  H, F), which the format allows for kind="scene".
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from simsci.data import TrajectoryWriter, problem, to_numpy
from simsci.driving._roads import LANE_KINDS
from simsci.driving.metrics import AGENT_FEATURES, EDGE_TYPES

TILE_SIZE = 64.0
LANE_POINTS = 20
HISTORY = 11
#: pieces shorter than this (m) are dropped; also the largest arc-length gap bridged by succ.
MIN_PIECE = 0.5

_HALF = TILE_SIZE / 2.0
_F = len(AGENT_FEATURES)
_GAP = MIN_PIECE + 1e-6
_SLIVER = 1e-6
_STEP_FIELDS = (
    "t",
    "tile_pose",
    "tile_cell",
    "agents",
    "agents_valid",
    "agents_history_valid",
)


def layout() -> dict:
    """The tile layout this module reads and writes (stored in every file's meta)."""
    return {
        "tile_size": TILE_SIZE,
        "lane_points": LANE_POINTS,
        "history": HISTORY,
        "min_piece": MIN_PIECE,
        "edge_types": list(EDGE_TYPES),
        "agent_features": list(AGENT_FEATURES),
        "lane_kinds": list(LANE_KINDS),
    }


# ------------------------------------------------------------------------ frames
def _pose_parts(points, pose):
    """(cx, cy, cos, sin) broadcastable against ``points[..., 0]``; numpy or torch."""
    torch = sys.modules.get("torch")
    is_torch = torch is not None and isinstance(points, torch.Tensor)
    if is_torch:
        pose = torch.as_tensor(pose, dtype=points.dtype, device=points.device)
        cos, sin = torch.cos, torch.sin
    else:
        points = np.asarray(points)
        if points.dtype.kind != "f":
            points = points.astype(np.float64)
        pose = np.asarray(pose, dtype=np.float64)
        cos, sin = np.cos, np.sin
    if points.ndim < 1 or points.shape[-1] != 2:
        raise ValueError(f"points must be (..., 2) [x, y], got shape {tuple(points.shape)}")
    if pose.ndim not in (1, 2) or pose.shape[-1] != 3:
        raise ValueError(
            f"pose must be (3,) [cx, cy, theta] or (K, 3) for points (K, ..., 2), got shape "
            f"{tuple(pose.shape)}"
        )
    if pose.ndim == 2:
        if points.ndim < 2 or points.shape[0] != pose.shape[0]:
            raise ValueError(
                f"a (K, 3) pose needs points (K, ..., 2) with the same K, got pose "
                f"{tuple(pose.shape)} and points {tuple(points.shape)}"
            )
        pose = pose.reshape(pose.shape[0], *([1] * (points.ndim - 2)), 3)
    return points, pose[..., 0], pose[..., 1], cos(pose[..., 2]), sin(pose[..., 2]), is_torch


def _stack(a, b, is_torch, like):
    if is_torch:
        return sys.modules["torch"].stack([a, b], dim=-1)
    return np.stack([a, b], axis=-1).astype(like.dtype, copy=False)


def world_to_tile(points, pose):
    """World points (..., 2) -> a tile's frame: :math:`R(\\theta)^T (p - c)`.

    ``pose`` is [cx, cy, theta] (3,), or (K, 3) for points (K, ..., 2). numpy or torch
    (the result follows the points' device and dtype)."""
    points, cx, cy, c, s, is_torch = _pose_parts(points, pose)
    dx, dy = points[..., 0] - cx, points[..., 1] - cy
    return _stack(c * dx + s * dy, -s * dx + c * dy, is_torch, points)


def tile_to_world(points, pose):
    """Tile-frame points (..., 2) -> world: :math:`c + R(\\theta)\\,p` (see world_to_tile)."""
    points, cx, cy, c, s, is_torch = _pose_parts(points, pose)
    x, y = points[..., 0], points[..., 1]
    return _stack(cx + c * x - s * y, cy + s * x + c * y, is_torch, points)


# ------------------------------------------------------------------------- cells
def _array(value, name: str, shape: tuple, where: str, dtype=np.float64) -> np.ndarray:
    arr = to_numpy(value, where=f"{where}: {name}")
    if arr.ndim != len(shape) or any(w is not None and a != w for a, w in zip(arr.shape, shape)):
        want = "(" + ", ".join("N" if w is None else str(w) for w in shape) + ")"
        raise ValueError(f"{where}: {name} must have shape {want}, got {arr.shape}")
    return arr.astype(dtype, copy=False)


def _traverse(a: np.ndarray, b: np.ndarray, ca: np.ndarray, cb: np.ndarray):
    """Cells strictly between ca and cb crossed by the segment a -> b (grid units), each
    with the segment parameter u at which it is entered."""
    d = b - a
    step = np.sign(cb - ca).astype(np.int64)
    left = np.abs(cb - ca)
    t_next = np.full(2, np.inf)
    t_delta = np.full(2, np.inf)
    for ax in (0, 1):
        if step[ax]:
            boundary = ca[ax] + (1 if step[ax] > 0 else 0)
            t_next[ax] = (boundary - a[ax]) / d[ax]
            t_delta[ax] = 1.0 / abs(d[ax])
    cur = ca.copy()
    out = []
    while left.sum() > 1:  # the last step enters cb itself
        ax = 0 if left[1] == 0 or (left[0] > 0 and t_next[0] <= t_next[1]) else 1
        u = t_next[ax]
        cur[ax] += step[ax]
        left[ax] -= 1
        t_next[ax] += t_delta[ax]
        out.append((cur.copy(), u))
    return out


def tile_cells(path_xy, origin, theta0) -> tuple[np.ndarray, np.ndarray]:
    """The grid cells a path passes through, in order of first visit.

    ``path_xy`` (M, 2) world positions, ``origin`` (2,) the centre of cell (0, 0),
    ``theta0`` the grid's orientation. Returns ``cells`` int64 (T, 2), (i, j) with centre
    ``origin + 64 R(theta0) (i, j)``, and ``first_index`` float64 (T,): the index of the
    first sample inside each cell, or ``i + u`` (0 < u < 1) for a cell the path only
    crosses between samples i and i+1 (inserted to keep the sequence 4-connected).
    """
    where = "tile_cells"
    theta0 = float(theta0)
    p = _array(path_xy, "path_xy", (None, 2), where)
    o = _array(origin, "origin", (2,), where)
    if len(p) == 0:
        raise ValueError(f"{where}: path_xy is empty; give at least one position (M >= 1)")
    if not np.isfinite(p).all() or not np.isfinite(o).all() or not math.isfinite(theta0):
        raise ValueError(f"{where}: path_xy, origin and theta0 must be finite")
    g = world_to_tile(p, np.array([o[0], o[1], float(theta0)])) / TILE_SIZE + 0.5
    cell = np.floor(g).astype(np.int64)
    change = np.flatnonzero((cell[1:] != cell[:-1]).any(axis=1)) + 1
    seq_cells = [cell[0]]
    seq_index = [0.0]
    for m in change:
        ca, cb = cell[m - 1], cell[m]
        if np.abs(cb - ca).sum() > 1:
            crossed = _traverse(g[m - 1], g[m], ca, cb)
            u = np.clip([c[1] for c in crossed], 1e-6, 1.0 - 1e-6)
            for j in range(1, len(u)):  # strictly increasing even through exact corners
                u[j] = max(u[j], u[j - 1] + 1e-9)
            for (c, _), uj in zip(crossed, u):
                seq_cells.append(c)
                seq_index.append(m - 1 + float(uj))
        seq_cells.append(cb)
        seq_index.append(float(m))
    seen = set()
    keep = []
    for k, c in enumerate(seq_cells):
        key = (int(c[0]), int(c[1]))
        if key not in seen:
            seen.add(key)
            keep.append(k)
    cells = np.array([seq_cells[k] for k in keep], dtype=np.int64).reshape(-1, 2)
    return cells, np.array([seq_index[k] for k in keep], dtype=np.float64)


def _cell_poses(cells: np.ndarray, origin: np.ndarray, theta0: float) -> np.ndarray:
    centres = tile_to_world(TILE_SIZE * cells.astype(np.float64), [origin[0], origin[1], theta0])
    return np.concatenate([centres, np.full((len(cells), 1), theta0)], axis=1)


# ------------------------------------------------------------------------- lanes
_ROAD_FIELDS = ("points", "num_points", "width", "speed_limit", "kind", "succ", "left", "right")


class _LaneIndex:
    """A road's lane polylines flattened once: points, arc length, bounding boxes.

    ``gs`` is a global arc-length coordinate, lane l's samples at ``goff[l] + s``, lanes
    1 m apart, so one ``np.interp`` resamples pieces of many lanes at once."""

    def __init__(self, road):
        missing = [f for f in _ROAD_FIELDS if not hasattr(road, f)]
        if missing:
            raise TypeError(
                f"road must be a RoadNetwork (or have its attributes); {type(road).__name__} "
                f"lacks {missing}"
            )
        pts = np.asarray(road.points, dtype=np.float64)
        num = np.asarray(road.num_points, dtype=np.int64)
        if pts.ndim != 3 or pts.shape[2] != 2 or num.shape != (pts.shape[0],):
            raise ValueError(
                f"road.points must be (L, P, 2) and road.num_points (L,), got "
                f"{pts.shape} and {num.shape}"
            )
        if len(num) and (num.min() < 2 or num.max() > pts.shape[1]):
            raise ValueError(f"road.num_points must lie in 2..{pts.shape[1]}, got {num}")
        n_lanes = len(num)
        mask = np.arange(pts.shape[1])[None, :] < num[:, None]
        xy = pts[mask]
        if not np.isfinite(xy).all():
            raise ValueError("road.points holds non-finite coordinates; validate the road")
        start = np.zeros(n_lanes + 1, np.int64)
        np.cumsum(num, out=start[1:])
        lane_of = np.repeat(np.arange(n_lanes), num)
        seg = np.zeros(len(xy))
        seg[1:] = np.hypot(*(xy[1:] - xy[:-1]).T)
        seg[start[:-1]] = 0.0
        cum = np.cumsum(seg)
        s = cum - np.repeat(cum[start[:-1]], num) if n_lanes else cum
        length = s[start[1:] - 1] if n_lanes else np.zeros(0)
        goff = np.zeros(n_lanes)
        if n_lanes > 1:
            goff[1:] = np.cumsum(length[:-1] + 1.0)
        self.xy, self.s, self.lane_of, self.start, self.num = xy, s, lane_of, start, num
        self.length = length
        self.goff = goff
        self.gs = s + goff[lane_of] if n_lanes else s
        if n_lanes:
            self.lo = np.minimum.reduceat(xy, start[:-1], axis=0)
            self.hi = np.maximum.reduceat(xy, start[:-1], axis=0)
        else:
            self.lo = self.hi = np.zeros((0, 2))
        self.width = np.asarray(road.width, dtype=np.float64)
        self.speed_limit = np.asarray(road.speed_limit, dtype=np.float64)
        self.kind = np.asarray(road.kind, dtype=np.int64)
        self.n_lanes = n_lanes


def _empty_pieces() -> dict:
    return {
        "points": np.zeros((0, LANE_POINTS, 2)),
        "lane": np.zeros(0, np.int64),
        "s0": np.zeros(0),
        "s1": np.zeros(0),
        "width": np.zeros(0),
        "speed_limit": np.zeros(0),
        "kind": np.zeros(0, np.int64),
    }


def _cut(index: _LaneIndex, pose: np.ndarray, min_piece: float = MIN_PIECE) -> dict:
    h = _HALF
    c, s = math.cos(pose[2]), math.sin(pose[2])
    reach = h * (abs(c) + abs(s))  # half-extent of the rotated square's bounding box
    hit = (
        (index.lo[:, 0] <= pose[0] + reach)
        & (index.hi[:, 0] >= pose[0] - reach)
        & (index.lo[:, 1] <= pose[1] + reach)
        & (index.hi[:, 1] >= pose[1] - reach)
    )
    cand = np.flatnonzero(hit)
    if not len(cand):
        return _empty_pieces()
    counts = index.num[cand]
    first = np.repeat(index.start[cand], counts)
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    idx = first + within
    p = world_to_tile(index.xy[idx], pose)
    lane = index.lane_of[idx]
    sv = index.s[idx]
    same = lane[1:] == lane[:-1]
    a, b = p[:-1][same], p[1:][same]
    seg_lane = lane[:-1][same]
    sa, sb = sv[:-1][same], sv[1:][same]
    # Liang-Barsky: the part t in [t0, t1] of a + t (b - a) inside |x|, |y| <= h
    d = b - a
    t0 = np.zeros(len(a))
    t1 = np.ones(len(a))
    empty = np.zeros(len(a), bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        for pp, qq in ((-d, a + h), (d, h - a)):
            for ax in (0, 1):
                pk, qk = pp[:, ax], qq[:, ax]
                r = qk / pk
                par = pk == 0
                empty |= par & (qk < 0)
                neg = (pk < 0) & ~par
                pos = (pk > 0) & ~par
                t0 = np.where(neg, np.maximum(t0, r), t0)
                t1 = np.where(pos, np.minimum(t1, r), t1)
    full = ~empty & (t0 <= t1)
    prev_ok = np.zeros(len(a), bool)
    prev_ok[1:] = full[:-1] & (seg_lane[1:] == seg_lane[:-1]) & (t1[:-1] == 1.0)
    cont = full & prev_ok & (t0 == 0.0)
    starts = np.flatnonzero(full & ~cont)
    if not len(starts):
        return _empty_pieces()
    nxt_cont = np.zeros(len(a), bool)
    nxt_cont[:-1] = cont[1:]
    ends = np.flatnonzero(full & ~nxt_cont)
    s0 = sa[starts] + t0[starts] * (sb[starts] - sa[starts])
    s1 = sa[ends] + t1[ends] * (sb[ends] - sa[ends])
    run_lane = seg_lane[starts]
    cut0 = t0[starts] > 0.0
    cut1 = t1[ends] < 1.0
    long = (s1 - s0) >= min_piece
    s0, s1, run_lane, cut0, cut1 = s0[long], s1[long], run_lane[long], cut0[long], cut1[long]
    if not len(s0):
        return _empty_pieces()
    frac = np.linspace(0.0, 1.0, LANE_POINTS)
    q = index.goff[run_lane][:, None] + s0[:, None] + (s1 - s0)[:, None] * frac
    world = np.stack([np.interp(q, index.gs, index.xy[:, k]) for k in (0, 1)], axis=-1)
    pts = world_to_tile(world, pose)
    for col, cut in ((0, cut0), (-1, cut1)):
        end = pts[cut, col]
        ax = np.argmax(np.abs(end), axis=1)
        rows = np.arange(len(end))
        near = np.abs(h - np.abs(end[rows, ax])) < 1e-6  # rounding only, never a move
        end[rows[near], ax[near]] = np.copysign(h, end[rows[near], ax[near]])
        pts[cut, col] = np.clip(end, -h, h)
    return {
        "points": pts,
        "lane": run_lane.astype(np.int64),
        "s0": s0,
        "s1": s1,
        "width": index.width[run_lane],
        "speed_limit": index.speed_limit[run_lane],
        "kind": index.kind[run_lane],
    }


def cut_lanes(road, pose) -> dict:
    """The lane pieces inside one tile.

    ``pose`` = [cx, cy, theta] (3,) of the 64 m square. Every maximal run of every lane
    inside the closed square, cut at the boundary, in driving direction, runs shorter than
    0.5 m dropped; sorted by lane id, then arc length. Returns a dict: ``points`` float64
    (n, 20, 2) in the tile frame, evenly spaced in arc length; ``lane`` int64 (n,) the
    segment id; ``s0``, ``s1`` float64 (n,) the run's arc-length range on the segment;
    ``width``, ``speed_limit`` float64 (n,) and ``kind`` int64 (n,) of the segment."""
    pose = _array(pose, "pose", (3,), "cut_lanes")
    if not np.isfinite(pose).all():
        raise ValueError(f"cut_lanes: pose must be finite, got {pose.tolist()}")
    return _cut(_LaneIndex(road), pose)


def lane_graph(pieces_per_tile: list[dict], road) -> dict:
    """One lane graph over the pieces of all tiles of an episode (see the module doc).

    ``pieces_per_tile`` are :func:`cut_lanes` outputs, tile k's pieces getting ``tile``
    k. Returns ``{"nodes": {points float32 (n, 20, 2), tile int64 (n,), width float32,
    speed_limit float32, kind int64}, "edges": {"index": int64 (E, 2) [src, dst],
    "type": int64 (E,) into EDGE_TYPES}, "num_nodes": n}`` (the writer's graph dict)."""
    if isinstance(pieces_per_tile, Mapping):
        raise TypeError("lane_graph: give a list of cut_lanes outputs (one per tile), not one")
    pieces = list(pieces_per_tile)
    length = np.maximum(np.asarray(road.length, dtype=np.float64), 1e-12)
    succ_tab = np.asarray(road.succ, dtype=np.int64).reshape(len(length), -1)
    left_tab = np.asarray(road.left, dtype=np.int64)
    right_tab = np.asarray(road.right, dtype=np.int64)
    n_lanes = len(length)
    if pieces:
        for k, pc in enumerate(pieces):
            missing = {"points", "lane", "s0", "s1", "width", "speed_limit", "kind"} - set(pc)
            if missing:
                raise ValueError(f"lane_graph: tile {k} lacks {sorted(missing)}; use cut_lanes")
        cat = {key: np.concatenate([np.asarray(pc[key]) for pc in pieces]) for key in pieces[0]}
        tile = np.concatenate(
            [np.full(len(pc["lane"]), k, np.int64) for k, pc in enumerate(pieces)]
        )
    else:
        cat, tile = _empty_pieces(), np.zeros(0, np.int64)
    lane = cat["lane"].astype(np.int64)
    s0, s1 = cat["s0"].astype(np.float64), cat["s1"].astype(np.float64)
    n = len(lane)
    if n and (lane.min() < 0 or lane.max() >= n_lanes):
        raise ValueError(
            f"lane_graph: piece lane ids must lie in 0..{n_lanes - 1} (the road's lanes), got "
            f"{lane.min()}..{lane.max()}; were the pieces cut from another road?"
        )
    src, dst, typ = [], [], []

    def add(a, b, name):
        src.append(np.asarray(a, np.int64))
        dst.append(np.asarray(b, np.int64))
        typ.append(np.full(len(a), EDGE_TYPES.index(name), np.int64))

    # succ within a segment: consecutive pieces in arc length
    order = np.lexsort((s0, lane))
    lo, hi = order[:-1], order[1:]
    chain = (lane[lo] == lane[hi]) & (s0[hi] - s1[lo] <= _GAP)
    add(lo[chain], hi[chain], "succ")
    # succ across segments: a segment's last piece -> its successors' first pieces
    if n:
        group_first = np.ones(n, bool)
        group_first[1:] = lane[order[1:]] != lane[order[:-1]]
        group_last = np.ones(n, bool)
        group_last[:-1] = group_first[1:]
        first_node = np.full(n_lanes, -1, np.int64)
        last_node = np.full(n_lanes, -1, np.int64)
        first_node[lane[order[group_first]]] = order[group_first]
        last_node[lane[order[group_last]]] = order[group_last]
        ends = np.flatnonzero(last_node >= 0)
        ends = ends[s1[last_node[ends]] >= length[ends] - _GAP]
        nxt = succ_tab[ends]
        rows, cols = np.nonzero(nxt >= 0)
        a_lane, b_lane = ends[rows], nxt[rows, cols]
        b_node = first_node[b_lane]
        ok = b_node >= 0
        ok[ok] = s0[b_node[ok]] <= _GAP
        add(last_node[a_lane[ok]], b_node[ok], "succ")
    # left / right: neighbouring segments in the same tile with overlapping ranges
    key = tile * max(n_lanes, 1) + lane
    korder = np.argsort(key, kind="stable")
    ksorted = key[korder]
    for name, tab in (("left", left_tab), ("right", right_tab)):
        nb = tab[lane] if n else np.zeros(0, np.int64)
        has = np.flatnonzero(nb >= 0)
        target = tile[has] * max(n_lanes, 1) + nb[has]
        a = np.searchsorted(ksorted, target, "left")
        b = np.searchsorted(ksorted, target, "right")
        cnt = b - a
        p = np.repeat(has, cnt)
        q = korder[np.repeat(a, cnt) + np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt)]
        ratio = length[lane[q]] / length[lane[p]]
        overlap = np.minimum(s1[p] * ratio, s1[q]) - np.maximum(s0[p] * ratio, s0[q])
        keep = overlap > 0
        add(p[keep], q[keep], name)
    src_a, dst_a, typ_a = (np.concatenate(v) for v in (src, dst, typ))
    succ_id = EDGE_TYPES.index("succ")
    is_succ = typ_a == succ_id
    src_a, dst_a, typ_a = (
        np.concatenate([src_a, dst_a[is_succ]]),
        np.concatenate([dst_a, src_a[is_succ]]),
        np.concatenate([typ_a, np.full(int(is_succ.sum()), EDGE_TYPES.index("pred"))]),
    )
    edges = np.unique(np.stack([typ_a, src_a, dst_a], axis=1), axis=0).reshape(-1, 3)
    return {
        "nodes": {
            "points": np.asarray(cat["points"], np.float32).reshape(n, LANE_POINTS, 2),
            "tile": tile,
            "width": np.asarray(cat["width"], np.float32),
            "speed_limit": np.asarray(cat["speed_limit"], np.float32),
            "kind": np.asarray(cat["kind"], np.int64),
        },
        "edges": {"index": np.ascontiguousarray(edges[:, 1:]), "type": edges[:, 0].copy()},
        "num_nodes": n,
    }


# ----------------------------------------------------------------------- episodes
def _rotate_heading(cos, sin, theta0):
    c0, s0 = math.cos(theta0), math.sin(theta0)
    return cos * c0 + sin * s0, sin * c0 - cos * s0


def _tile_pieces(index: _LaneIndex, pose: np.ndarray) -> dict:
    pc = _cut(index, pose)
    if not len(pc["lane"]):  # the centrelines only clip a corner: keep their slivers
        pc = _cut(index, pose, min_piece=_SLIVER)
    return pc


def _adjacent(cell: np.ndarray, cells: list) -> bool:
    return any(abs(int(cell[0] - c[0])) + abs(int(cell[1] - c[1])) == 1 for c in cells)


def _episode_tiles(index: _LaneIndex, ego_xy, times, origin, theta0):
    """Cells of the ego path with their lane pieces; a cell the ego only grazes
    (reaching at most one lane width inside) where no centreline lies is dropped, and
    bridged by the other corner cell when the sequence would lose 4-connectivity."""
    where = "scene_episode"
    cells, first = tile_cells(ego_xy, origin, theta0)
    poses = _cell_poses(cells, origin, theta0)
    g = world_to_tile(ego_xy, [origin[0], origin[1], theta0]) / TILE_SIZE + 0.5
    sample_cell = np.floor(g).astype(np.int64)
    depth = TILE_SIZE * (0.5 - np.abs(g - sample_cell - 0.5).max(axis=1))
    order = {(int(c[0]), int(c[1])): k for k, c in enumerate(cells)}
    cell_depth = np.zeros(len(cells))
    np.maximum.at(cell_depth, [order[(int(a), int(b))] for a, b in sample_cell], depth)
    graze = float(index.width.max()) if len(index.width) else 0.0
    kept_cells, kept_first, kept_poses, kept_pieces = [], [], [], []
    dropped = None  # (cell, first index) of the last grazed cell dropped
    seen = set()
    for k in range(len(cells)):
        key = (int(cells[k, 0]), int(cells[k, 1]))
        if key in seen:  # already used as a bridge
            continue
        pc = _tile_pieces(index, poses[k])
        if not len(pc["lane"]):
            if cell_depth[k] > graze:
                m = int(np.floor(first[k]))
                e = ego_xy[m]
                raise ValueError(
                    f"{where}: tile {len(kept_cells)} (cell {key}, t = "
                    f"{times[m] - times[0]:.2f} s, centre {np.round(poses[k, :2], 2).tolist()}) "
                    f"holds no lane piece: the ego at ({e[0]:.1f}, {e[1]:.1f}) is off the road "
                    "network; every tile needs at least one lane (check the ego trajectory "
                    "against the road)"
                )
            dropped = (cells[k], first[k])
            continue
        if kept_cells and not _adjacent(cells[k], kept_cells):
            bridge = None
            if dropped is not None:
                c = cells[k]
                for d in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                    b = c + np.array(d)
                    if (int(b[0]), int(b[1])) in seen or not _adjacent(b, kept_cells):
                        continue
                    bpose = _cell_poses(b[None], origin, theta0)[0]
                    bpc = _tile_pieces(index, bpose)
                    if len(bpc["lane"]):
                        bridge = (b, bpose, bpc)
                        break
            if bridge is None:
                raise ValueError(
                    f"{where}: the ego passes from cell {tuple(kept_cells[-1].tolist())} to "
                    f"{key} through cells with no lane (it grazes "
                    f"{None if dropped is None else tuple(dropped[0].tolist())}) and no "
                    "neighbouring cell with lanes connects them; the ego is off the road network"
                )
            b, bpose, bpc = bridge
            kept_cells.append(b)
            kept_first.append(dropped[1])
            kept_poses.append(bpose)
            kept_pieces.append(bpc)
            seen.add((int(b[0]), int(b[1])))
        dropped = None
        kept_cells.append(cells[k])
        kept_first.append(first[k])
        kept_poses.append(poses[k])
        kept_pieces.append(pc)
        seen.add(key)
    if not kept_cells:
        raise ValueError(f"{where}: no tile of the ego path holds a lane; the ego is off the road")
    return (
        np.array(kept_cells, np.int64).reshape(-1, 2),
        np.array(kept_first, np.float64),
        np.array(kept_poses, np.float64).reshape(-1, 3),
        kept_pieces,
    )


def scene_episode(
    road,
    times,
    agents,
    valid,
    *,
    ego_index: int = 0,
    params=None,
    origin_pose=None,
) -> dict:
    """One drive cut into tiles: an episode dict for :func:`write_scenes`.

    ``times`` (Tsim,) strictly increasing (10 Hz from the simulator); ``agents``
    (Tsim, V, 7) world-frame AGENT_FEATURES; ``valid`` bool (Tsim, V); the ego (slot
    ``ego_index``) must be valid at every sample. ``params`` (P,) traffic parameters or
    None; ``origin_pose`` [cx, cy, theta0] of tile (0, 0) (default: the ego at times[0]).
    numpy arrays or torch tensors (any device). Returns ``t`` (T,) float64 (from
    times[0]), ``tile_pose`` (T, 3), ``tile_cell`` int64 (T, 2), ``agents`` float32
    (T, A, H, 7) in each tile's frame, ``agents_valid`` (T, A), ``agents_history_valid``
    (T, A, H), ``graphs`` {"lanes": lane_graph(...)} and ``params`` when given.
    """
    where = "scene_episode"
    times = _episode_times(times, where)
    ag, ok, ego_index = _episode_agents(agents, valid, len(times), ego_index, where)
    origin, theta0 = _episode_origin(ag, ego_index, origin_pose, where)
    cells, first, poses, pieces = _episode_tiles(
        _LaneIndex(road), ag[:, ego_index, :2], times, origin, theta0
    )
    t_tile = _tile_times(times, first)
    graph = lane_graph(pieces, road)
    out_a, sel_ok, out_h = _tile_agents(ag, ok, first, poses, theta0, ego_index)
    episode = {
        "t": t_tile,
        "tile_pose": poses,
        "tile_cell": cells,
        "agents": out_a,
        "agents_valid": sel_ok,
        "agents_history_valid": out_h,
        "graphs": {"lanes": graph},
    }
    if params is not None:
        episode["params"] = _episode_params(params, where)
    return episode


def _episode_times(times, where: str) -> np.ndarray:
    """``times`` checked (non-empty, 1-D, real, finite, strictly increasing) as float64."""
    t_in = to_numpy(times, where=f"{where}: times")
    if t_in.ndim != 1 or t_in.dtype.kind not in "iuf" or len(t_in) == 0:
        raise ValueError(f"{where}: times must be a non-empty 1-D real array, got {t_in.shape}")
    times = t_in.astype(np.float64)
    if not np.isfinite(times).all():
        raise ValueError(f"{where}: times must be finite")
    bad = np.flatnonzero(np.diff(times) <= 0)
    if len(bad):
        j = int(bad[0]) + 1
        raise ValueError(
            f"{where}: times must be strictly increasing; times[{j - 1}] = {times[j - 1]} is "
            f"followed by times[{j}] = {times[j]}"
        )
    return times


def _episode_agents(agents, valid, n_t: int, ego_index, where: str):
    """``agents``, ``valid`` and ``ego_index`` checked: (agents float64, valid, ego index)."""
    ag = to_numpy(agents, where=f"{where}: agents")
    if ag.ndim != 3 or ag.shape[0] != n_t or ag.shape[2] != _F or ag.dtype.kind not in "iuf":
        raise ValueError(
            f"{where}: agents must be real (Tsim, V, {_F}) = ({n_t}, V, {_F}) with features "
            f"{AGENT_FEATURES}, got shape {ag.shape} dtype {ag.dtype}"
        )
    ag = ag.astype(np.float64)
    ok = to_numpy(valid, where=f"{where}: valid")
    if ok.shape != ag.shape[:2] or ok.dtype != np.bool_:
        raise ValueError(
            f"{where}: valid must be bool (Tsim, V) = {ag.shape[:2]}, got {ok.dtype} {ok.shape}"
        )
    n_v = ag.shape[1]
    if isinstance(ego_index, bool) or not isinstance(ego_index, (int, np.integer)):
        raise TypeError(f"{where}: ego_index must be an int, got {ego_index!r}")
    if not 0 <= ego_index < n_v:
        raise ValueError(f"{where}: ego_index must lie in 0..{n_v - 1}, got {ego_index}")
    ego_index = int(ego_index)
    if not ok[:, ego_index].all():
        j = int(np.argmin(ok[:, ego_index]))
        raise ValueError(
            f"{where}: the ego (slot {ego_index}) must be valid at every sample (its path "
            f"defines the tiles); valid[{j}, {ego_index}] is False"
        )
    nonfinite = ok & ~np.isfinite(ag).all(axis=2)
    if nonfinite.any():
        j, v = (int(x) for x in np.argwhere(nonfinite)[0])
        raise ValueError(
            f"{where}: agents hold NaN/inf where valid is True (first at sample {j}, slot "
            f"{v}: {ag[j, v].tolist()}); set valid False there or fix the simulation"
        )
    return ag, ok, ego_index


def _episode_origin(ag: np.ndarray, ego_index: int, origin_pose, where: str):
    """(origin xy, theta0) of tile (0, 0): ``origin_pose`` checked, or the ego at times[0]."""
    if origin_pose is None:
        origin = ag[0, ego_index, :2].copy()
        theta0 = math.atan2(ag[0, ego_index, 4], ag[0, ego_index, 3])
    else:
        op = _array(origin_pose, "origin_pose", (3,), where)
        if not np.isfinite(op).all():
            raise ValueError(f"{where}: origin_pose must be finite, got {op.tolist()}")
        origin, theta0 = op[:2].copy(), float(op[2])
    return origin, theta0


def _tile_times(times: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Each tile's time (from times[0]) at its fractional sample index ``first``."""
    n_t = len(times)
    lo = np.floor(first).astype(np.int64)
    w = first - lo
    hi = np.minimum(lo + 1, n_t - 1)
    return times[lo] + w * (times[hi] - times[lo]) - times[0]


def _tile_agents(ag, ok, first, poses, theta0, ego_index: int):
    """Each tile's agents in its frame, ego first: (agents, agents_valid, history_valid)."""
    n_t, n_v = ag.shape[:2]
    # history frames (T, H): fractional sample indices ending at first_index
    frames = first[:, None] - np.arange(HISTORY - 1, -1, -1)[None, :]
    exists = frames > -1e-9
    f_lo = np.clip(np.floor(frames + 1e-9).astype(np.int64), 0, n_t - 1)
    f_w = np.where(exists, np.clip(frames - f_lo, 0.0, 1.0), 0.0)
    f_w[f_w < 1e-9] = 0.0
    f_hi = np.minimum(f_lo + 1, n_t - 1)
    clean = np.where(ok[..., None], ag, 0.0)
    a_lo, a_hi = clean[f_lo], clean[f_hi]  # (T, H, V, 7)
    ww = f_w[..., None, None]
    st = a_lo + ww * (a_hi - a_lo)
    fv = exists[..., None] & ok[f_lo] & (ok[f_hi] | (f_w == 0.0)[..., None])  # (T, H, V)
    norm = np.hypot(st[..., 3], st[..., 4])
    norm = np.where(norm > 0, norm, 1.0)
    cs, sn = st[..., 3] / norm, st[..., 4] / norm
    st[..., 0:2] = world_to_tile(st[..., 0:2], poses)
    st[..., 3], st[..., 4] = _rotate_heading(cs, sn, theta0)
    hv = np.flip(np.logical_and.accumulate(np.flip(fv, axis=1), axis=1), axis=1)
    cur = st[:, -1]  # (T, V, 7) at t_k
    inside = hv[:, -1] & (np.maximum(np.abs(cur[..., 0]), np.abs(cur[..., 1])) <= _HALF)
    inside[:, ego_index] = True
    rank = np.where(np.arange(n_v) == ego_index, -1, np.arange(n_v))
    sort_key = np.where(inside, rank[None, :], n_v + 1)
    sel = np.argsort(sort_key, axis=1, kind="stable")
    n_a = int(inside.sum(axis=1).max())
    sel = sel[:, :n_a]
    sel_ok = np.take_along_axis(inside, sel, axis=1)  # (T, A)
    out_a = np.take_along_axis(st, sel[:, None, :, None], axis=2).transpose(0, 2, 1, 3)
    out_h = np.take_along_axis(hv, sel[:, None, :], axis=2).transpose(0, 2, 1)
    out_h &= sel_ok[..., None]
    out_a = np.where(out_h[..., None], out_a, np.nan).astype(np.float32)
    return out_a, sel_ok, out_h


def _episode_params(params, where: str) -> np.ndarray:
    """``params`` checked as a real vector (P,), float64."""
    pa = to_numpy(params, where=f"{where}: params")
    if pa.ndim != 1 or pa.dtype.kind not in "iuf":
        raise ValueError(f"{where}: params must be a real vector (P,), got {pa.shape}")
    return pa.astype(np.float64)


# ---------------------------------------------------------------------- checking
def _scene_problem(ep: Mapping, history: int = HISTORY):
    """The first broken scene-tile rule of an episode dict: (rule, field, message) or None."""
    missing = [k for k in _STEP_FIELDS if k not in ep]
    if missing or "graphs" not in ep or "lanes" not in ep["graphs"]:
        return (
            "scene-fields",
            None,
            f"a scene-tile episode needs {list(_STEP_FIELDS)} and graphs['lanes']; missing "
            f"{missing + ([] if 'lanes' in ep.get('graphs', {}) else ['graphs/lanes'])}",
        )
    n_t = len(ep["t"])
    agents = np.asarray(ep["agents"])
    if agents.ndim != 4 or agents.shape[0] != n_t or agents.shape[3] != _F:
        return (
            "agents-features",
            "steps/agents",
            f"agents must be (T, A, H, {_F}) with features {AGENT_FEATURES}, got shape "
            f"{agents.shape}",
        )
    if agents.shape[2] != history:
        return (
            "agents-history",
            "steps/agents",
            f"agents hold {agents.shape[2]} history frames, the tile layout has {history}",
        )
    av, ah = np.asarray(ep["agents_valid"]), np.asarray(ep["agents_history_valid"])
    if av.shape != agents.shape[:2] or ah.shape != agents.shape[:3]:
        return (
            "agents-valid-shape",
            "steps/agents_history_valid",
            f"agents_valid must be (T, A) = {agents.shape[:2]} and agents_history_valid (T, A, "
            f"H) = {agents.shape[:3]}, got {av.shape} and {ah.shape}",
        )
    pose, cell = np.asarray(ep["tile_pose"]), np.asarray(ep["tile_cell"])
    if pose.shape != (n_t, 3) or cell.shape != (n_t, 2):
        return (
            "tile-shape",
            "steps/tile_pose",
            f"tile_pose must be (T, 3) and tile_cell (T, 2) with T = {n_t}, got {pose.shape} "
            f"and {cell.shape}",
        )
    g = ep["graphs"]["lanes"]
    nodes, edges = g.get("nodes", {}), g.get("edges", {})
    for key in ("points", "tile", "width", "speed_limit", "kind"):
        if key not in nodes:
            return ("lane-nodes", f"graphs/lanes/nodes/{key}", f"lane nodes lack {key!r}")
    points = np.asarray(nodes["points"])
    n = int(g.get("num_nodes", len(points)))
    if points.ndim != 3 or points.shape[1:] != (LANE_POINTS, 2) or len(points) != n:
        return (
            "lane-points",
            "graphs/lanes/nodes/points",
            f"lane points must be (n, {LANE_POINTS}, 2) with n = {n} nodes, got {points.shape}",
        )
    tile = np.asarray(nodes["tile"])
    if tile.shape != (n,) or (n and (tile.min() < 0 or tile.max() >= n_t)):
        return (
            "lane-tile",
            "graphs/lanes/nodes/tile",
            f"node tiles must be (n,) step indices in 0..{n_t - 1}, got shape {tile.shape}"
            + (f", values {tile.min()}..{tile.max()}" if tile.size else ""),
        )
    count = np.bincount(tile.astype(np.int64), minlength=n_t) if n else np.zeros(n_t, int)
    if n_t and (count == 0).any():
        k = int(np.argmin(count))
        return (
            "tile-lanes",
            "graphs/lanes/nodes/tile",
            f"tile (step) {k} has no lane node; every tile holds at least one lane piece",
        )
    index = np.asarray(edges.get("index", np.zeros((0, 2), np.int64)))
    etype = np.asarray(edges.get("type", np.zeros(0, np.int64)))
    if index.ndim != 2 or index.shape[1] != 2 or etype.shape != (len(index),):
        return (
            "edge-shape",
            "graphs/lanes/edges/index",
            f"edges must be index (E, 2) and type (E,), got {index.shape} and {etype.shape}",
        )
    bad = (index < 0) | (index >= n)
    if bad.any():
        j = int(np.argmax(bad.any(axis=1)))
        return (
            "edge-node",
            "graphs/lanes/edges/index",
            f"edge {j} = {index[j].tolist()} points to a missing node (the graph has nodes "
            f"0..{n - 1})",
        )
    bad_t = (etype < 0) | (etype >= len(EDGE_TYPES))
    if bad_t.any():
        j = int(np.argmax(bad_t))
        return (
            "edge-type",
            "graphs/lanes/edges/type",
            f"edge {j} has type id {int(etype[j])}; types are 0..{len(EDGE_TYPES) - 1} = "
            f"{EDGE_TYPES}",
        )
    return None


def write_scenes(
    path: str | os.PathLike,
    episodes: Iterable[Mapping],
    *,
    meta: Mapping | None = None,
    param_names: Iterable[str] | None = None,
    **writer_kwargs,
) -> Path:
    """Write :func:`scene_episode` dicts into one trajectory file (kind="scene",
    system="driving"), atomically. ``meta`` is stored with the tile layout added
    (:func:`layout`); ``param_names`` names the params columns; ``writer_kwargs`` go to
    TrajectoryWriter (compression, overwrite, stats, ...). Returns the path."""
    meta = dict(meta or {})
    lay = layout()
    for key, value in lay.items():
        if key in meta and meta[key] != value:
            raise ValueError(
                f"write_scenes: meta[{key!r}] = {meta[key]!r} contradicts the tile layout "
                f"({value!r}); leave the layout keys to write_scenes"
            )
    meta.update(lay)
    names = {
        "agents": list(AGENT_FEATURES),
        "tile_pose": ["x", "y", "theta"],
        "tile_cell": ["i", "j"],
        "graphs/lanes/nodes/points": ["x", "y"],
    }
    if param_names is not None:
        names["params"] = list(param_names)
    units = {
        "t": "s",
        "tile_pose": ["m", "m", "rad"],
        "agents": ["m", "m", "m/s", "1", "1", "m", "m"],
        "graphs/lanes/nodes/points": "m",
        "graphs/lanes/nodes/width": "m",
        "graphs/lanes/nodes/speed_limit": "m/s",
    }
    for key in ("kind", "system"):
        if key in writer_kwargs:
            raise TypeError(f"write_scenes: {key} is fixed (scene / driving)")
    with TrajectoryWriter(
        path, kind="scene", system="driving", meta=meta, names=names, units=units, **writer_kwargs
    ) as w:
        for i, ep in enumerate(episodes):
            found = _scene_problem(ep)
            if found is not None:
                rule, field, msg = found
                raise ValueError(
                    f"write_scenes: episode {i}"
                    + (f", field {field}" if field else "")
                    + f": {msg} [rule {rule}]"
                )
            w.append(ep)
    return w.path


def _check_layout(ds, path) -> int:
    if ds.kind != "scene":
        raise problem(
            path, "scene-kind", f"kind is {ds.kind!r}; scene tiles are kind 'scene' (driving)"
        )
    meta = ds.meta
    want = {"tile_size": TILE_SIZE, "lane_points": LANE_POINTS, "history": HISTORY}
    if "edge_types" in meta:
        want["edge_types"] = list(EDGE_TYPES)
    if "agent_features" in meta:
        want["agent_features"] = list(AGENT_FEATURES)
    absent = [k for k in ("tile_size", "lane_points", "history") if k not in meta]
    if absent:
        raise problem(
            path,
            "tile-layout",
            f"meta lacks {absent}: not a file of simsci driving scene tiles (write_scenes "
            "stores the layout in meta)",
        )
    diff = {k: meta[k] for k, v in want.items() if meta[k] != v}
    if diff:
        raise problem(
            path,
            "tile-layout",
            f"the file's tile layout {diff} differs from this reader's "
            f"{ {k: want[k] for k in diff} }; read it with the simsci version that wrote it "
            "or regenerate it",
        )
    return HISTORY


def read_scene(dataset_or_path, i: int) -> dict:
    """Episode ``i`` of a scene-tile file (a path, a shard directory, or an opened
    ``simsci.data.Trajectories``), checked, with the lane graph split per tile.

    Returns the step fields (``t``, ``tile_pose``, ``tile_cell``, ``agents``,
    ``agents_valid``, ``agents_history_valid``), ``params`` when stored, ``graph`` (the
    episode's whole lane graph, as written) and ``lanes``: a list of T dicts, tile k's
    ``node`` (ids in ``graph``), ``points`` (n_k, 20, 2), ``width``, ``speed_limit``,
    ``kind``, and the edges with both ends in tile k as ``edge_index`` (local ids) and
    ``edge_type``. A broken rule raises a FormatError (a ValueError) naming file,
    episode and rule. A path is opened (and fully checked by ``simsci.data.open``) on
    every call: to read many episodes, pass ``simsci.data.open(path)`` once."""
    from simsci import data as sdata

    own = isinstance(dataset_or_path, (str, os.PathLike))
    ds = sdata.open(dataset_or_path) if own else dataset_or_path
    try:
        path = ds.path
        history = _check_layout(ds, path)
        ep = ds[i]
    finally:
        if own:
            ds.close()
    if "graphs" not in ep or "lanes" not in ep["graphs"]:
        raise problem(path, "scene-fields", "no graphs/lanes lane graph", episode=i)
    found = _scene_problem(ep, history)
    if found is not None:
        rule, field, msg = found
        raise problem(path, rule, msg, field=field, episode=i)
    g = ep.pop("graphs")["lanes"]
    nodes, edges = g["nodes"], g["edges"]
    tile = nodes["tile"].astype(np.int64)
    n_t = len(ep["t"])
    order = np.argsort(tile, kind="stable")
    bounds = np.searchsorted(tile[order], np.arange(n_t + 1))
    local = np.empty(len(tile), np.int64)
    index, etype = edges["index"], edges["type"]
    src_tile = tile[index[:, 0]] if len(index) else np.zeros(0, np.int64)
    same = src_tile == (tile[index[:, 1]] if len(index) else src_tile)
    lanes = []
    for k in range(n_t):
        ids = order[bounds[k] : bounds[k + 1]]
        local[ids] = np.arange(len(ids))
        m = same & (src_tile == k)
        lanes.append(
            {
                "node": ids,
                "points": nodes["points"][ids],
                "width": nodes["width"][ids],
                "speed_limit": nodes["speed_limit"][ids],
                "kind": nodes["kind"][ids],
                "edge_index": local[index[m]],
                "edge_type": etype[m],
            }
        )
    ep["graph"] = g
    ep["lanes"] = lanes
    return ep
