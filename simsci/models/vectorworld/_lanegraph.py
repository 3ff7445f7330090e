r"""Lane-graph completion: a generated tile without dead ends inside it.

:func:`complete_lanes` takes a generated tile (own frame, after
:func:`~._outpaint.close_seams`) and removes its interior dead ends, so that every lane
either continues inside the tile or reaches the tile's edge, where the next tile's seam
slot picks it up. The world (:class:`~._world.StreamingWorld`, ``complete=True``)
applies it to every tile it makes.

Why a decoding rule and not only a better generator: in the driving data a lane ends
inside a tile only where a lane drops (``end = "lane_end"``, an acceleration lane: rare),
every other end is on a successor or on the tile edge; a generator trained briefly on
one CPU (the shipped default: 26 min) leaves most of its lanes ending mid-tile, and an
ego (or an NPC) that reaches such an end has nowhere to go: 87% of the lane-keeping
driver's episodes in ``simsci/VectorWorld-v1`` ended there. The rule keeps what the
network drew and only adds road where its lane graph is open, the same way the seams
are closed (:func:`~._outpaint.close_seams`): snapping, trimming and stubs there; joins
and extensions here.

Steps (lengths in m, curvatures in 1/m; a point is *on an edge* when it lies within
``tolerance`` of one of the tile's four edges, the seam band of
:func:`simsci.driving.metrics.seam_gaps`; a lane end *on a neighbour's* when it is that
neighbour lane's complementary end to 1e-9 m):

0. **Shape.** A lane sharper than ``max_curvature`` (0.13, the data's junction turns)
   anywhere (:func:`lane_curvature`), or meeting a neighbour's lane at more than 10
   degrees, is replaced by the least-squares cubic through its 20 points with its end
   points kept and, at an end on a neighbour's, that lane's tangent (G1;
   :func:`~._outpaint.smooth_lane`) (``smoothed``). Generated lanes are often hooked at
   their ends (points clipped onto the tile edge, a trimmed end): 67% of the shipped
   model's lanes are sharper than 0.19 (the ego's tightest turn at full lock) before,
   ~25% after this step. A lane still sharper than ``drop_curvature`` (0.2, the
   largest curvature of any lane of the driving data) is not a road the data has: it
   goes on straight from the neighbour lane it continues (its start's if both ends
   are on a neighbour's: such a lane turns back across the seam), for at most 16 m and
   turned inwards where that lane runs along the edge, as the seams' stubs
   (``straightened``; the extension steps below take it on), or, continuing none, is
   dropped (``dropped``; a tile keeps at least one lane).
1. **Joins.** A lane end inside the tile with no successor (no lane start within 0.5 m
   heading within 45 degrees, :func:`~._tokens.lane_successors`'s rule) and a lane start
   inside the tile with no predecessor are paired, nearest pairs first, when the start
   lies ahead of the end (within ``max_turn`` of its heading, at most ``join`` m away),
   the headings differ by at most ``max_turn`` and the connecting curve stays below
   ``max_curvature``: a new lane (``joined``), the cubic Hermite curve from the end to
   the start with both lanes' tangents (G1 at both), width / speed limit / kind of the
   lane it leaves.
   An end *leaves the tile* when it is on an edge, heads out through it (within 60
   degrees of its normal) and lies more than 2 m from a corner (:func:`_leaves`); every
   other end without a successor or predecessor is open. A seam stub grazing an edge or
   a lane into a corner leads nowhere: no neighbour continues it, and the driver would
   run off its end (``left_generated_lanes``).
2. **Forward extension** (``extended``), of every other open end, the lane grown
   and resampled over its new length (one lane, 20 points evenly in arc length, so the
   lane count stays the network's), by the first of:

   a. straight along its last tangent to the tile edge, when that edge is open (no
      tile there yet): an end's tangent is all the network says about where the lane
      goes, and the next tile's seam slot continues it; but where that run would go
      closer than 2.5 m to another lane of the tile along 10 m (``merge_beside``,
      :func:`_runs_beside`), the lane merges into that lane as in d. Straight runs beside
      lanes made most of the near-duplicate lanes of completed tiles (1.34 pairs a tile
      against the data's 0.07), and the driver's side-swipes. Where that lane is an
      oncoming one (heading within 30 degrees of the opposite way, so no merge), the
      lane turns away instead (``avoid_oncoming``, ``turned_away``): c, else the
      shortest e, either only if it does not itself run 10 m beside an oncoming lane.
      Of the near-duplicates left after merging, 46% were oncoming pairs (median 1.3 m
      apart: vehicles on them meet head on), half of them made by completion alone;
   b. when that edge is shared with an existing neighbour, a Hermite curve (G1) onto
      the nearest neighbour lane start on it within ``join`` m of the straight exit
      point whose heading agrees (within ``max_turn``);
   c. a Hermite curve onto the nearest lane start it can reach smoothly (ahead within
      ``max_turn``, heading within ``max_turn``, curvature at most ``drop_curvature``,
      within a tile's width): the tile's own lanes or a neighbour's;
   d. a Hermite curve merging into another lane of the tile at its nearest point ahead
      where that lane runs the same way (within ``max_turn``; curvature at most
      ``drop_curvature``), that lane being split there into two lanes (``merged``; a
      merge in the data is a lane piece ending where two lanes meet);
   e. a Hermite curve leaving the tile at right angles through an open edge ahead (the
      shortest whose curvature is at most ``drop_curvature``).

   With none of these, c and e are tried again from 8, 16 and 24 m before the end, the
   lane's last metres replaced (``rerouted``): an end a few metres from an edge cannot
   turn. Failing all (an end boxed in by existing tiles with no lane to meet), the end
   is left as it is (``dead_ends``), since a neighbour is never changed after it is made.

   An extended lane is then refit as one cubic (``refit``, :func:`_refit`): its ends
   and its start's tangent kept, its new end's tangent too where it meets a lane. A
   network lane often curls in its last metres, and extending it straight along that
   curl makes a corner (a 35 degree turn within 3 m) that caps the whole lane's speed
   limit (step 4); the cubic spreads the turn over the lane. It is taken only when it is
   gentler, stays in the tile and within 4 m of the extended lane.
3. **Backward extension** (``extended_back``): the same for interior lane starts with no
   predecessor, growing backwards onto lane ends (d: diverging from a lane).
4. **Speed limits** are capped by the curvature: :math:`v \le \sqrt{a / \kappa_{max}}`
   with ``lateral_accel`` a = 3 m/s^2, the driving data's rule for its road lanes
   (``speed_capped``): a generated lane's speed limit is the network's guess, and a
   driver keeping to it on a 20 m radius would leave the lane.

Lanes are resampled in float64, end points written exactly (an extension's end is on the
edge to rounding, ~1e-14 m). Tangents are those of the first / last segment.
"""

from __future__ import annotations

import math

import numpy as np

from simsci.driving import LANE_POINTS, ROAD_MAX_CURVATURE, TILE_SIZE, arc_length
from simsci.models.vectorworld._lanegroups import _resample
from simsci.models.vectorworld._outpaint import (
    _EXACT,
    _in_band,
    _neighbour_ends,
    _stub,
    smooth_lane,
)
from simsci.models.vectorworld._tokens import DIRECTIONS, _end_tangents, lane_successors

__all__ = ["COMPLETION_VERSION", "complete_lanes", "lane_curvature"]

# The version of complete_lanes' rules: bumped whenever its output for the same input
# changes, since openings made ahead (StreamingWorld.opening_settings) are completed
# tiles and are reused only under the same version.
COMPLETION_VERSION = 5

_CORNER = 2.0  # m: an end this near a tile corner leaves through no edge (see _leaves)
_SEAM_TURN = 10.0  # degrees: a lane meeting its neighbour's more sharply is refit (G1)
_LANE_KEYS = ("width", "speed_limit", "kind")  # per-lane attributes beside the points
_SIDES = [np.asarray(d, np.float64) for d in ((1, 0), (-1, 0), (0, 1), (0, -1))]


def _hermite(p0, t0, p1, t1, n: int = 64) -> tuple[np.ndarray, float]:
    """The cubic from ``p0`` (tangent ``t0``) to ``p1`` (tangent ``t1``), control arms a
    third of the chord: dense points (n, 2) and its largest curvature [1/m]."""
    chord = float(np.hypot(*(p1 - p0)))
    c = np.stack([p0, p0 + chord / 3 * t0, p1 - chord / 3 * t1, p1])
    u = np.linspace(0.0, 1.0, n)[:, None]
    pts = (1 - u) ** 3 * c[0] + 3 * u * (1 - u) ** 2 * c[1] + 3 * u**2 * (1 - u) * c[2]
    pts = pts + u**3 * c[3]
    d1 = 3 * ((1 - u) ** 2 * (c[1] - c[0]) + 2 * u * (1 - u) * (c[2] - c[1]) + u**2 * (c[3] - c[2]))
    d2 = 6 * ((1 - u) * (c[2] - 2 * c[1] + c[0]) + u * (c[3] - 2 * c[2] + c[1]))
    speed = np.hypot(d1[:, 0], d1[:, 1])
    kappa = np.abs(d1[:, 0] * d2[:, 1] - d1[:, 1] * d2[:, 0]) / np.maximum(speed, 1e-9) ** 3
    pts[0], pts[-1] = p0, p1
    return pts, float(kappa.max())


def _exit(p: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, int]:
    """Where the ray ``p + s t`` (s > 0) leaves the tile square: the point (2,) and the
    index into :data:`_SIDES` of the edge it crosses."""
    half = 0.5 * TILE_SIZE
    best = (math.inf, -1)
    for k, side in enumerate(_SIDES):
        a = int(np.argmax(np.abs(side)))
        if t[a] * side[a] > 1e-12:
            best = min(best, ((half * side[a] - p[a]) / t[a], k))
    s, k = best
    q = p + s * t
    a = int(np.argmax(np.abs(_SIDES[k])))
    q[a] = half * _SIDES[k][a]  # exactly on the edge
    return q, k


def _side_of(direction: int) -> int:
    """The index into :data:`_SIDES` of the new tile's edge shared with a neighbour that
    lies ``direction`` (the step from the neighbour's cell to the new one) behind it."""
    dx, dy = DIRECTIONS[direction]
    return next(k for k, s in enumerate(_SIDES) if s[0] == -dx and s[1] == -dy)


def _on_edge(p: np.ndarray, tolerance: float) -> bool:
    return any(bool(_in_band(p, s, tolerance)) for s in _SIDES)


def _leaves(p: np.ndarray, t: np.ndarray, tolerance: float) -> bool:
    """Whether an end at ``p`` going along ``t`` (unit) leaves the tile through an edge it
    is on: within ``tolerance`` of it and at most 60 degrees off its outward normal. An
    end on an edge that runs along it (a seam stub beside the edge) leads nowhere."""
    half = 0.5 * TILE_SIZE
    for s in _SIDES:
        across = abs(float(p @ np.array([-s[1], s[0]])))
        if _in_band(p, s, tolerance) and float(t @ s) >= 0.5 and across <= half - _CORNER:
            return True
    return False


def _inside(p: np.ndarray, tolerance: float = 0.0) -> bool:
    return bool(np.all(np.abs(p) < 0.5 * TILE_SIZE + tolerance))


def lane_curvature(points: np.ndarray) -> np.ndarray:
    """The largest curvature [1/m] of each lane polyline (n, P, 2): the turn between
    consecutive segments over their mean length (0 for a lane of one segment)."""
    d = np.diff(np.asarray(points, np.float64), axis=1)
    if d.shape[1] < 2:
        return np.zeros(len(d))
    h = np.arctan2(d[..., 1], d[..., 0])
    turn = np.abs(np.angle(np.exp(1j * np.diff(h, axis=1))))
    seg = np.hypot(d[..., 0], d[..., 1])
    ds = 0.5 * (seg[:, 1:] + seg[:, :-1])
    return (turn / np.maximum(ds, 1e-6)).max(1)


def _reach(p, t, forward, pts, own, ends, max_kappa, cos_max, reach=TILE_SIZE):
    """The nearest lane a lane growing from ``p`` in direction ``t`` can meet smoothly:
    a lane start (``forward``; a lane end backwards) of the tile's other lanes or of a
    neighbour's lane on a shared edge, ahead of ``p`` within ``reach`` m, heading within
    ``max_turn`` of ``t``, by a Hermite curve no sharper than ``max_kappa``; the curve
    (m, 2) from ``p``, or None."""
    col, want = (0, 0) if forward else (-1, 1)
    t_in, t_out = _end_tangents(pts)
    tans = t_in if forward else -t_out
    cand = [(pts[j, col], tans[j]) for j in range(len(pts)) if j != own]
    cand += [(e["p"], e["t"] if forward else -e["t"]) for e in ends if e["kind"] == want]
    scored = []
    for q, tq in cand:
        v = q - p
        d = float(np.hypot(*v))
        if 1e-6 < d <= reach and v @ t >= cos_max * d and tq @ t >= cos_max:
            scored.append((d, q, tq))
    for _, q, tq in sorted(scored, key=lambda c: c[0]):
        curve, kappa = _hermite(p, t, q, tq)
        if kappa <= max_kappa:
            return curve
    return None


def _runs_beside(path, pts, own, gap: float = 2.5, span: float = 10.0, oncoming=None) -> bool:
    """Whether ``path`` (m, 2; a straight extension: its two ends) runs closer than
    ``gap`` m to one other lane of ``pts`` along at least ``span`` m. ``oncoming``: the
    sign (+1 growing forward, -1 backward) that turns the path's direction into the
    driving direction of its lane; then only other lanes' points heading the other way
    (within 30 degrees of the opposite) count: an oncoming lane."""
    length = float(arc_length(path)[-1])
    if length < span:
        return False
    if len(path) == 2:
        u = np.linspace(0.0, 1.0, int(length) + 1)[:, None]
        line = path[0] + u * (path[1] - path[0])
    else:
        line = _resample(path, int(length) + 1)
    if oncoming is not None:
        drive = oncoming * np.gradient(line, axis=0)
        drive /= np.linalg.norm(drive, axis=1, keepdims=True) + 1e-12
    for j in range(len(pts)):
        if j == own:
            continue
        lane = _resample(pts[j], 4 * LANE_POINTS)
        if oncoming is None:
            if points_near(line, lane, gap) >= span:
                return True
            continue
        tan = np.gradient(lane, axis=0)
        tan /= np.linalg.norm(tan, axis=1, keepdims=True) + 1e-12
        d = np.sqrt(((line[:, None] - lane[None]) ** 2).sum(-1))
        if ((d < gap) & (drive @ tan.T < -0.87)).any(1).sum() >= span:
            return True
    return False


def points_near(points: np.ndarray, other: np.ndarray, gap: float) -> int:
    """How many of ``points`` (m, 2) lie closer than ``gap`` m to a point of ``other``
    (k, 2; a lane resampled densely): with points 1 m apart, the metres along which one
    lane runs beside another (:func:`_runs_beside`, and ``tile_metrics``' near-duplicate
    lanes)."""
    d = np.sqrt(((points[:, None] - other[None]) ** 2).sum(-1)).min(1)
    return int((d < gap).sum())


def _merge_point(
    p, t, forward, pts, own, max_kappa, cos_max, reach=TILE_SIZE, min_piece=5.0, tolerance=0.5
):
    """Where a lane growing from ``p`` in direction ``t`` can merge into another lane of
    the tile (``forward``; diverge from it backwards): the nearest inner point k of a
    lane j ahead within ``reach`` m whose direction there agrees with the growth (within
    ``max_turn``), leaving pieces of at least ``min_piece`` m on both sides and not within
    ``tolerance`` of an edge, reached by a Hermite curve no sharper than ``max_kappa``.
    Returns ``(curve, j, k)`` or None."""
    scored = []
    for j in range(len(pts)):
        if j == own:
            continue
        s = arc_length(pts[j])
        for k in range(1, len(pts[j]) - 1):
            if s[k] < min_piece or s[-1] - s[k] < min_piece or _on_edge(pts[j, k], tolerance):
                continue  # (a split on a seam band would leave a seam end unmatched)
            lane_t = pts[j, k + 1] - pts[j, k - 1]
            norm = float(np.hypot(*lane_t))
            if norm < 1e-9:
                continue
            tq = lane_t / norm if forward else -lane_t / norm
            v = pts[j, k] - p
            d = float(np.hypot(*v))
            if 1e-6 < d <= reach and v @ t >= cos_max * d and tq @ t >= cos_max:
                scored.append((d, j, k, tq))
    for _, j, k, tq in sorted(scored, key=lambda c: c[0]):
        curve, kappa = _hermite(p, t, pts[j, k], tq)
        if kappa <= max_kappa:
            return curve, j, k
    return None


def _reroute(
    lane, forward, pts, own, ends, shared_sides, max_kappa, cos_max, backs=(8.0, 16.0, 24.0)
):
    """A boxed-in lane ``lane`` (20, 2, in its growth direction) left ``b`` m before its
    end, for ``b`` in ``backs``: the lane up to there and a curve from there onto a lane
    it can reach (:func:`_reach`) or out through an open edge (:func:`_turn_out`);
    ``(kept part, curve)`` or None. At least 5 m of the lane is kept."""
    seg = np.hypot(*np.diff(lane, axis=0).T)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    for b in backs:
        at = s[-1] - b
        if at < 5.0:
            break
        k = int(np.searchsorted(s, at, side="right")) - 1  # segment k holds the cut
        u = (at - s[k]) / max(seg[k], 1e-12)
        c = lane[k] + u * (lane[k + 1] - lane[k])
        tc = (lane[k + 1] - lane[k]) / max(seg[k], 1e-12)
        curve = _reach(c, tc, forward, pts, own, ends, max_kappa, cos_max)
        if curve is None:
            curve = _turn_out(c, tc, shared_sides, max_kappa)
        if curve is not None:
            return np.concatenate([lane[: k + 1], c[None]]), curve
    return None


def _turn_out(p, t, shared_sides, max_kappa, spacing: float = 4.0, reject=None):
    """A Hermite curve from ``p`` (direction ``t``) leaving the tile square at right
    angles through an edge not in ``shared_sides``, the shortest whose curvature stays
    below ``max_kappa`` (and, given ``reject``, for which ``reject(curve)`` is False);
    None when there is none."""
    half = 0.5 * TILE_SIZE
    best = None
    along = np.arange(-half + spacing / 2, half, spacing)
    for k, side in enumerate(_SIDES):
        if k in shared_sides or side @ t < 0.0:
            continue
        normal = np.array([-side[1], side[0]])
        for a in along:
            q = half * side + a * normal
            curve, kappa = _hermite(p, t, q, side)
            if kappa > max_kappa:
                continue
            length = float(np.hypot(*np.diff(curve, axis=0).T).sum())
            if (best is None or length < best[0]) and not (reject and reject(curve)):
                best = (length, curve)
    return None if best is None else best[1]


def _shape(pts, ends, neighbours, counts, tolerance, max_curvature, drop_curvature):
    """Step 0 of :func:`complete_lanes`, in place on ``pts`` (n, 20, 2): lanes sharper
    than ``max_curvature`` or meeting a neighbour's lane at more than ``_SEAM_TURN``
    degrees refit through their end points (with the neighbour lane's tangent at an end
    on a neighbour's), those still sharper than ``drop_curvature`` made a seam stub when
    they continue a neighbour's lane; returns the (n,) mask of lanes to drop."""
    t_in, t_out = _end_tangents(pts)
    kappa = lane_curvature(pts)
    drop = np.zeros(len(pts), bool)
    cos_seam = math.cos(math.radians(_SEAM_TURN))
    shared = [-np.asarray(DIRECTIONS[d], np.float64) for _, d in neighbours]  # outward
    for i in range(len(pts)):
        pin, bent = {}, False
        for kind, col, t in ((0, 0, t_in[i]), (1, -1, t_out[i])):
            for e in ends:
                if e["kind"] != kind and float(np.hypot(*(e["p"] - pts[i, col]))) <= _EXACT:
                    pin[kind] = e
                    bent = bent or bool(e["t"] @ t < cos_seam)
                    break
        if kappa[i] <= max_curvature and not bent:
            continue
        fit = smooth_lane(
            pts[i],
            start=pts[i, 0],
            end=pts[i, -1],
            start_tangent=pin[0]["t"] if 0 in pin else None,
            end_tangent=pin[1]["t"] if 1 in pin else None,
        )
        if lane_curvature(fit[None])[0] < kappa[i] or bent:
            pts[i] = fit
            counts["smoothed"] += 1
        # still sharper than any lane of the data (a hook or a loop, not a road): a lane
        # continuing a neighbour's goes on straight from it; a free one is dropped
        if lane_curvature(pts[i : i + 1])[0] > drop_curvature:
            if pin:  # (a lane pinned at both ends turns back: it continues its start)
                e = pin[0] if 0 in pin else pin[1]
                into = np.asarray(DIRECTIONS[neighbours[e["side"]][1]], np.float64)
                # at a corner the stub may cross to the other edge only where no tile is
                # yet (a neighbour's edge has no lane there to continue it)
                pts[i] = _stub(e, into, 2.0 * tolerance, shared)
                counts["straightened"] += 1
            else:
                drop[i] = True
    return drop


def _refit(grown: np.ndarray, base: np.ndarray, end_dir, slack: float = 4.0) -> np.ndarray:
    """An extended lane ``grown`` (20, 2, in its growth direction; ``base`` the lane before
    it grew) as one cubic (:func:`~._outpaint.smooth_lane`): both ends kept, the start's
    tangent kept, the end's kept along ``end_dir`` (None: free). Taken only when it is
    gentler, stays in the tile and within ``slack`` m of the grown lane; else ``grown``.

    Why: a network lane's end tangent is its noisiest part (a curl in its last metres),
    and extending straight along it turns that curl into a corner the curvature cap
    slows every driver for (a 35 degree turn within 3 m of lane)."""
    t0 = base[1] - base[0]
    if float(np.hypot(*t0)) < 1e-9 or float(np.hypot(*(grown[-1] - grown[0]))) < 1e-6:
        return grown
    t1 = None
    if end_dir is not None:
        n1 = float(np.hypot(*end_dir))
        t1 = None if n1 < 1e-12 else np.asarray(end_dir, np.float64) / n1
    fit = smooth_lane(
        grown,
        start=grown[0],
        start_tangent=t0 / float(np.hypot(*t0)),
        end=grown[-1],
        end_tangent=t1,
    )
    if lane_curvature(fit[None])[0] >= lane_curvature(grown[None])[0]:
        return grown
    if np.abs(fit).max() > 0.5 * TILE_SIZE + 0.5:
        return grown
    dense = _resample(grown, 4 * LANE_POINTS)
    gap = np.sqrt(((fit[:, None] - dense[None]) ** 2).sum(-1)).min(1).max()
    return fit if gap <= slack else grown


def _meet_on_edge(p, t, q, forward, edge_ends, join, cos_max, max_kappa):
    """A Hermite curve from ``p`` (growing along ``t``) onto the nearest lane of a
    neighbour on the shared edge it would leave by at ``q``: a lane start (``forward``;
    a lane end backwards) within ``join`` m of ``q``, heading within ``max_turn`` of
    ``t``, the curve no sharper than ``max_kappa``; None when there is none."""
    want = 0 if forward else 1
    cand = []
    for e in edge_ends:
        heading = e["t"] if forward else -e["t"]
        if e["kind"] != want or heading @ t < cos_max:
            continue
        off = float(np.hypot(*(e["p"] - q)))
        if off <= join:
            cand.append((off, e))
    for _, e in sorted(cand, key=lambda c: c[0]):
        curve, kappa = _hermite(p, t, e["p"], e["t"] if forward else -e["t"])
        if kappa <= max_kappa:
            return curve
    return None


def _append_lanes(out: dict, pts: np.ndarray, new, src) -> np.ndarray:
    """``pts`` with the lanes ``new`` (m, 20, 2) appended; ``out``'s per-lane attributes
    get copies of lanes ``src``' (m,) in place."""
    for key in _LANE_KEYS:
        v = np.asarray(out[key])
        out[key] = np.concatenate([v, v[np.asarray(src, np.int64)]])
    return np.concatenate([pts, np.asarray(new).reshape(-1, LANE_POINTS, 2)])


def _split(out: dict, pts: np.ndarray, moved: dict, j: int, k: int) -> np.ndarray:
    """``pts`` with lane ``j`` split at its point ``k`` (a lane merging into it there):
    the head stays lane ``j``, the tail is appended (``out``'s attributes copied from
    ``j``) and recorded in ``moved`` as where ``j``'s end went."""
    head, tail = _resample(pts[j, : k + 1]), _resample(pts[j, k:])
    pts[j] = head
    moved[j] = len(pts)
    return _append_lanes(out, pts, tail, [j])


def complete_lanes(
    tile: dict,
    neighbours=(),
    *,
    tolerance: float = 0.5,
    join: float = 24.0,
    max_turn: float = 60.0,
    max_curvature: float = 0.13,
    drop_curvature: float = ROAD_MAX_CURVATURE,
    lateral_accel: float = 3.0,
    max_lanes: int | None = None,
    refit: bool = True,
    merge_beside: bool = True,
    avoid_oncoming: bool = True,
) -> tuple[dict, dict]:
    """``tile`` (own frame, float64 lanes) without interior dead ends; returns ``(tile,
    counts)`` with counts ``smoothed``, ``straightened``, ``dropped``, ``joined``,
    ``extended``, ``extended_back``, ``merged``, ``turned_away``, ``rerouted``,
    ``refit``, ``dead_ends``, ``speed_capped`` (the steps of the module docstring;
    ``tile["points"]`` (n, 20, 2), ``width`` / ``speed_limit`` / ``kind`` (n,)).
    ``neighbours``: the existing 4-neighbours as ``(tile, direction)`` pairs, as
    :func:`~._outpaint.close_seams` takes them; their shared edges are where an
    extension must meet one of their lanes. ``max_lanes``:
    joins stop adding lanes at this count (extensions add none). ``refit``: False keeps
    every extended lane as extended (completion version 2's rule); ``merge_beside``:
    False extends an end straight to an open edge even beside another lane (version 3's
    rule); ``avoid_oncoming``: False extends it straight beside an oncoming lane where
    it cannot merge (version 4's rule). The tile's agents are
    kept as they are."""
    out = {k: np.array(v, copy=True) for k, v in tile.items()}
    pts = np.asarray(out["points"], np.float64).reshape(-1, LANE_POINTS, 2).copy()
    keys = (
        "smoothed",
        "straightened",
        "dropped",
        "joined",
        "extended",
        "extended_back",
        "merged",
        "turned_away",
        "rerouted",
        "refit",
        "dead_ends",
        "speed_capped",
    )
    counts = dict.fromkeys(keys, 0)
    n = len(pts)
    if n == 0:
        return out, counts
    cos_max = math.cos(math.radians(max_turn))
    neighbours = list(neighbours)
    ends = _neighbour_ends(neighbours, tolerance)
    drop = _shape(pts, ends, neighbours, counts, tolerance, max_curvature, drop_curvature)
    if drop.all():  # keep the gentlest lane rather than none
        drop[int(np.argmin(lane_curvature(pts)))] = False
    counts["dropped"] = int(drop.sum())
    if drop.any():
        pts = pts[~drop]
        for key in _LANE_KEYS:
            out[key] = np.asarray(out[key])[~drop]
        n = len(pts)
    t_in, t_out = _end_tangents(pts)
    edges = lane_successors(pts)
    has_succ = np.zeros(n, bool)
    has_pred = np.zeros(n, bool)
    has_succ[edges[:, 0]] = True
    has_pred[edges[:, 1]] = True
    open_end = [
        i
        for i in range(n)
        if not has_succ[i]
        and _inside(pts[i, -1], tolerance)
        and not _leaves(pts[i, -1], t_out[i], tolerance)
    ]
    open_start = [
        i
        for i in range(n)
        if not has_pred[i]
        and _inside(pts[i, 0], tolerance)
        and not _leaves(pts[i, 0], -t_in[i], tolerance)
    ]
    # 1. joins, nearest pairs first
    pairs = []
    for i in open_end:
        for j in open_start:
            if i == j:
                continue
            v = pts[j, 0] - pts[i, -1]
            d = float(np.hypot(*v))
            if d > join or d < 1e-6:
                continue
            if v @ t_out[i] < cos_max * d or t_out[i] @ t_in[j] < cos_max:
                continue
            pairs.append((d, i, j))
    new_lanes, new_src = [], []
    used_end, used_start = set(), set()
    for _, i, j in sorted(pairs):
        if i in used_end or j in used_start:
            continue
        if max_lanes is not None and n + len(new_lanes) >= max_lanes:
            break
        curve, kappa = _hermite(pts[i, -1], t_out[i], pts[j, 0], t_in[j])
        if kappa > max_curvature:
            continue
        used_end.add(i), used_start.add(j)
        new_lanes.append(_resample(curve))
        new_src.append(i)
        counts["joined"] += 1
    # 2-3. extensions to the edge, onto a neighbour's lane where the edge is shared
    shared_sides = {_side_of(d) for _, d in neighbours}
    moved = {}  # lane -> the piece its end went to when it was split
    shared = {}
    for e in ends:
        shared.setdefault(_side_of(neighbours[e["side"]][1]), []).append(e)
    for forward, ids in ((True, open_end), (False, open_start)):
        for i in ids:
            if (i in used_end) if forward else (i in used_start):
                continue
            while forward and i in moved:  # split since: its end is on the tail piece
                i = moved[i]
            p = pts[i, -1] if forward else pts[i, 0]
            ti, to = _end_tangents(pts[i : i + 1])  # (pts changes as lanes are split)
            t = to[0] if forward else -ti[0]  # the direction the lane grows in
            q, k = _exit(p, t)
            # an end on an edge it runs along has no straight way out: curves only
            straight = k not in shared_sides and not _on_edge(p, tolerance)
            if not straight:
                # a neighbour lane to meet: its start (forward) or its end (backward)
                ok = _meet_on_edge(
                    p, t, q, forward, shared.get(k, []), join, cos_max, max_curvature
                )
                if ok is None:  # any lane it can reach: the tile's or a neighbour's
                    ok = _reach(p, t, forward, pts, i, ends, drop_curvature, cos_max)
                room = max_lanes is None or len(pts) < max_lanes
                if ok is None and room:  # else merge into (diverge from) a lane: split it
                    hit = _merge_point(p, t, forward, pts, i, drop_curvature, cos_max)
                    if hit is not None:
                        ok, j, k = hit
                        pts = _split(out, pts, moved, j, k)
                        counts["merged"] += 1
                if ok is None:  # else turn out of the tile through an open edge
                    ok = _turn_out(p, t, shared_sides, drop_curvature)
                base = pts[i] if forward else pts[i, ::-1]
                if ok is None:  # else leave the lane earlier (its last metres rerouted)
                    hit = _reroute(
                        base, forward, pts, i, ends, shared_sides, drop_curvature, cos_max
                    )
                    if hit is not None:
                        base, ok = hit
                        counts["rerouted"] += 1
                if ok is None:
                    counts["dead_ends"] += 1
                    continue
                ext = ok
            else:
                ext = np.stack([p, q])
                base = pts[i] if forward else pts[i, ::-1]
                room = max_lanes is None or len(pts) < max_lanes
                beside = merge_beside and _runs_beside(ext, pts, i)
                if beside and room:
                    # a straight run beside a lane of the tile would duplicate it: merge
                    # into (diverge from) that lane instead, where it can
                    hit = _merge_point(p, t, forward, pts, i, drop_curvature, cos_max)
                    if hit is not None:
                        ext, j, k = hit
                        pts = _split(out, pts, moved, j, k)
                        counts["merged"] += 1
                        straight = beside = False
                sign = 1.0 if forward else -1.0
                if beside and avoid_oncoming and _runs_beside(ext, pts, i, oncoming=sign):
                    # beside a lane going the other way (no merge there): vehicles on
                    # the two would meet head on; a curve onto a lane it can reach or
                    # out through an open edge instead, where one does not run so
                    def head_on(curve, pts=pts, i=i, sign=sign):
                        return _runs_beside(curve, pts, i, oncoming=sign)

                    turn = _reach(p, t, forward, pts, i, ends, drop_curvature, cos_max)
                    if turn is None or head_on(turn):
                        turn = _turn_out(p, t, shared_sides, drop_curvature, reject=head_on)
                    if turn is not None:
                        ext, straight = turn, False
                        counts["turned_away"] += 1
            grown = _resample(np.concatenate([base, ext[1:]]))
            if refit:
                # a straight run to an open edge leaves the end's direction free (the
                # next tile continues whatever it is); a curve onto a lane keeps its end
                fit = _refit(grown, base, None if straight else ext[-1] - ext[-2])
                counts["refit"] += int(fit is not grown)
                grown = fit
            pts[i] = grown if forward else grown[::-1]
            counts["extended" if forward else "extended_back"] += 1
    out["points"] = _append_lanes(out, pts, new_lanes, new_src) if new_lanes else pts
    # 4. speed limits the curvature allows (the data's rule for connectors)
    cap = np.sqrt(lateral_accel / np.maximum(lane_curvature(out["points"]), 1e-9))
    limit = np.asarray(out["speed_limit"], np.float64)
    counts["speed_capped"] = int((cap < limit).sum())
    out["speed_limit"] = np.minimum(limit, cap)
    out["kind"] = np.asarray(out["kind"], np.int64)
    return out, counts
