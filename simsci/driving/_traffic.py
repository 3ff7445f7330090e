"""Batched traffic on procedural lane graphs: IDM, MOBIL, junction yielding, bicycle model.

``Traffic`` simulates ``B`` scenes at once as tensors on one device (CPU or CUDA). Scene
``b`` lives on road network ``net[b]`` of a :class:`RoadPool` (several networks padded
into one set of tensors) and holds ``V`` vehicle slots; slot 0 is the ego. One call of
:meth:`Traffic.step` advances every scene by ``dt = 0.1`` s (10 Hz).

Model, per vehicle (the literature's models, composed the usual way):

- **Longitudinal: IDM** (Treiber, Hennecke & Helbing 2000), with the parameter values of
  Treiber & Kesting, *Traffic Flow Dynamics* (2013), table 11.2 (highway):
  ``a_idm = a [1 - (v / v0)^4 - (s*(v, Δv) / s)^2]``, ``s* = s0 + max(0, v T + v Δv /
  (2 sqrt(a b)))``. The desired speed ``v0`` is the lane's speed limit times a per-vehicle
  factor, lowered ahead of a slower lane to ``sqrt(v_next^2 + 2 b d)`` (braking in time,
  not at the lane start). The result is clipped to ``[-MAX_BRAKE, MAX_ACCEL]`` so traffic
  never exceeds the kinematic limits the metrics check (10.4 m/s^2).
- **Leaders along the path.** Each vehicle holds its path: current lane and the next two
  lanes, chosen at random among successors as it reaches them (route choice at
  junctions and off-ramps). The leader is the nearest vehicle ahead on any lane of that
  path (a vehicle that is changing lanes occupies both lanes). A lane that ends
  (``lane_end``: a merge or dropped lane) is a stopped obstacle at its end.
- **Lateral: MOBIL** (Kesting, Treiber & Helbing 2007): change to the left/right lane if
  ``a'_i - a_i + p (a'_n - a_n + a'_o - a_o) > Δa_th ± a_bias`` and the new follower
  brakes less than ``b_safe``. Evaluated every ``LANE_CHANGE_EVERY`` steps, left and right
  on alternate evaluations (two vehicles never move into one gap from both sides at once).
  An ending lane gives its vehicles a strong incentive to leave it (mandatory merge).
  Not on junction or roundabout lanes, nor closer than ``PULL_OUT_GAP`` behind a car
  (turning out, the front would sweep into it). While changing, a vehicle keeps its
  distance to the leaders of both lanes.
- **Junctions without signals.** Each conflict (two lanes that cross or merge) has a
  zone: where the two centrelines are closer than ``ZONE_WIDTH`` (a few metres around a
  crossing; from where merging lanes converge to their end). The road orders each pair
  by right of way (main road over side road, ring over entry, straight over turning).
  A vehicle stops before a zone on its path
  (a stopped obstacle 1 m before it) while a vehicle on the other lane is inside the
  zone, or can no longer stop before it, or -- when the other lane has the right of way
  -- arrives within ``YIELD_HORIZON`` s (gap acceptance). A vehicle that can no longer
  stop at ``HARD_BRAKE`` goes on (committed). Cars do not spawn in or just before
  zones, nor where lanes forking from one predecessor still overlap; on such a fork a
  car occupies its siblings too, so followers on either see it.
- **Steering and motion.** Pure pursuit on the path (look-ahead ``0.8 v + 4`` m, 6 to 25
  m) gives a curvature, clipped to ``MAX_CURVATURE`` and rate-limited; a kinematic
  bicycle with the centre of gravity midway between the axles (wheelbase 0.6 x length)
  integrates the steering angle ``δ = atan(κ L)`` and the acceleration with
  semi-implicit Euler. The arc length on the lane follows from two Newton steps of the
  projection of the new position onto the lane (``s += (p - c(s)) . t(s)``).
- **A window around the ego.** Only vehicles within ``window`` m of the ego exist:
  vehicles beyond ``window + 20`` m or at a network exit leave; each step, a scene with
  fewer vehicles than ``density`` x the lane length within the window spawns one on a
  free spot 90 m or more from the ego (never in view of a tile around the ego), with a
  speed that fits its gaps. This keeps the cost per scene fixed on a route of any length.

Cost: nothing compares all pairs of vehicles. Leaders and followers come from per-lane
indices -- every vehicle's (scene, lane, arc length) sorted once per step into one key,
searched with ``searchsorted`` -- and conflicts from a sparse list of (vehicle, lane of its
path, conflict of that lane) reduced per conflict side with ``scatter_reduce``. A step is
O(B V log(B V)) with a few hundred tensor operations, whatever the network's size.
Vehicles spawned in a step are added to the others' leaders explicitly (at most one
per scene), and lane changes wait a step in those scenes, instead of sorting again.

The ego (slot 0) is either ``"autopilot"`` (IDM along the route's lanes, no lane changes:
how data is made) or ``"external"`` (acceleration and steering angle given to
:meth:`Traffic.step`: the RL environment). Others see the ego as a vehicle on the lane
it is associated with.

Per-episode parameters (``PARAM_NAMES``, one row per scene): the IDM/MOBIL parameters and
the density. ``sample_params`` draws them around the literature values.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import torch

from simsci.driving.metrics import AGENT_FEATURES

__all__ = [
    "AGENT_FEATURES",
    "PARAM_NAMES",
    "DEFAULT_PARAMS",
    "RoadPool",
    "Traffic",
    "default_params",
    "sample_params",
    "jam_density",
]


#: per-episode traffic parameters (IDM, MOBIL, density in vehicles per km and lane).
PARAM_NAMES = (
    "speed_factor",  # mean desired speed / speed limit
    "time_headway",  # T [s]
    "min_gap",  # s0 [m]
    "max_accel",  # a [m/s^2]
    "comfort_decel",  # b [m/s^2]
    "politeness",  # p
    "change_threshold",  # Δa_th [m/s^2]
    "safe_decel",  # b_safe [m/s^2]
    "density",  # vehicles per km per lane
)
#: Treiber & Kesting (2013) table 11.2 (IDM, highway) and Kesting et al. (2007) (MOBIL).
DEFAULT_PARAMS = (1.0, 1.0, 2.0, 1.0, 1.5, 0.2, 0.1, 4.0, 20.0)
#: ranges ``sample_params`` draws from (uniform).
PARAM_RANGES = (
    (0.85, 1.1),
    (0.8, 1.8),
    (1.5, 3.0),
    (0.8, 1.6),
    (1.2, 2.0),
    (0.0, 0.5),
    (0.05, 0.3),
    (3.0, 5.0),
    (8.0, 40.0),
)

DT = 0.1
MAX_ACCEL = 4.0
MAX_BRAKE = 8.0
MAX_CURVATURE = 0.25  # 1/m, below the 0.3 the metrics call infeasible
MAX_CURVATURE_RATE = 0.6  # 1/m per s
LANE_CHANGE_EVERY = 5
LANE_CHANGE_COOLDOWN = 30  # steps
A_BIAS = 0.2  # keep-right bias of MOBIL [m/s^2]
YIELD_HORIZON = 4.5  # s
HARD_BRAKE = 6.0  # beyond this a vehicle cannot stop for a conflict: it is committed
PULL_OUT_GAP = 6.0  # m to the leader needed to start a lane change
ZONE_WIDTH = 3.0  # m: centrelines closer than this are one conflict zone
SPAWN_MIN_DISTANCE = 90.0
RESET_ROUNDS = 40  # spawn rounds filling a fresh scene
SPAWN_CANDIDATES = 2  # spots tried per scene and step
CAR_LENGTH = (4.2, 5.2)
CAR_WIDTH = (1.75, 2.0)
EGO_SIZE = (4.6, 1.9)
INF = 1e9
STRADDLE = 0.8  # m off the lane centre: the ego's body reaches the next lane
OFFROAD_MARGIN = 0.5  # m beyond the lane edge

KIND_ROAD, KIND_JUNCTION, KIND_ROUNDABOUT, KIND_RAMP = 0, 1, 2, 3
END_CONTINUES, END_EXIT, END_LANE_END = 0, 1, 2


def default_params(n: int = 1, **overrides) -> torch.Tensor:
    """``(n, len(PARAM_NAMES))`` float64 rows of the literature values (``overrides`` by
    name, e.g. ``density=30``)."""
    row = dict(zip(PARAM_NAMES, DEFAULT_PARAMS))
    for k, v in overrides.items():
        if k not in row:
            from simsci.errors import unknown_name

            raise unknown_name("traffic parameter", k, PARAM_NAMES)
        row[k] = float(v)
    return torch.tensor([list(row.values())] * int(n), dtype=torch.float64)


def sample_params(n: int, generator: torch.Generator | None = None, **fixed) -> torch.Tensor:
    """``(n, P)`` parameters drawn uniformly from ``PARAM_RANGES`` (``fixed`` by name)."""
    lo = torch.tensor([r[0] for r in PARAM_RANGES], dtype=torch.float64)
    hi = torch.tensor([r[1] for r in PARAM_RANGES], dtype=torch.float64)
    u = torch.rand(int(n), len(PARAM_NAMES), generator=generator, dtype=torch.float64)
    out = lo + (hi - lo) * u
    for k, v in fixed.items():
        if k not in PARAM_NAMES:
            from simsci.errors import unknown_name

            raise unknown_name("traffic parameter", k, PARAM_NAMES)
        out[:, PARAM_NAMES.index(k)] = float(v)
    return out


def jam_density(min_gap: float = DEFAULT_PARAMS[2]) -> float:
    """The most vehicles per km and lane that fit standing still: 1000 / (s0 + longest car)."""
    return 1000.0 / (min_gap + CAR_LENGTH[1])


# ----------------------------------------------------------------------------- the pool
class RoadPool:
    """Road networks padded into one set of tensors (``N`` networks, ``L`` lanes, ``P``
    points), plus the tables traffic needs: spawn points sorted by route position, the
    route polyline, each lane's range of route positions (to find lanes near the ego).
    """

    def __init__(self, roads: Sequence, *, device=None, dtype=torch.float32):
        if len(roads) == 0:
            raise ValueError("a RoadPool needs at least one road network")
        for r in roads:
            r.validate()
        self.roads = list(roads)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype = dtype
        tab = _pool_tables(roads)
        self._set_lanes(tab)
        self._set_lane_conflicts(roads, tab["L"])
        self._set_route(tab)
        self._set_spawn_points(tab)

    def _tensor(self, a, dt=None) -> torch.Tensor:
        """``a`` as a tensor on the pool's device (default dtype: the pool's)."""
        return torch.as_tensor(a, dtype=dt or self.dtype, device=self.device)

    def _set_lanes(self, tab: dict) -> None:
        """The lane tables as tensors: geometry, links, kinds, route lanes, conflicts."""
        t, i64, dtype = self._tensor, torch.int64, self.dtype
        self.N, self.L, self.P, self.K = tab["N"], tab["L"], tab["P"], tab["K"]
        self.points = t(tab["pts"])
        self.points_flat = self.points.reshape(-1, 2)
        self.num_points = t(tab["npts"], i64)
        f = tab["f"]
        self.length, self.width = t(f["length"]), t(f["width"])
        self.speed_limit = t(f["speed_limit"])
        self.ds = self.length / (self.num_points - 1).to(dtype)
        # the length of one polyline segment (uniform spacing per lane)
        first = self.points[:, :, 1] - self.points[:, :, 0]
        self.ds_seg = first.norm(dim=-1).clamp(min=1e-6)
        self.left, self.right = t(tab["ints"]["left"], i64), t(tab["ints"]["right"], i64)
        self.kind, self.end = t(tab["kind"], i64), t(tab["end"], i64)
        self.priority = t(tab["prio"], i64)
        self.succ, self.pred = t(tab["succ"], i64), t(tab["pred"], i64)
        self.num_succ = (self.succ >= 0).sum(-1)
        self.route_next = t(tab["route_next"], i64)
        self.on_route = t(tab["on_route"], torch.bool)
        self.route_lanes = t(tab["rlanes"], i64)
        self.route_cum = t(tab["route_cum"])  # (N, R+1) arc length at the start of each route lane
        self.route_count = t([len(r.route) for r in self.roads], i64)
        self.conflict_lanes, self.conflict_s = t(tab["cl"], i64), t(tab["cs"])
        self.conflict_xy = t(tab["cxy"])
        self.zone_in, self.zone_out = t(tab["zin"]), t(tab["zout"])
        self._set_point_tables()

    def _set_lane_conflicts(self, roads, L: int) -> None:
        """Every lane's conflicts and which side of each it is on (C per lane at most)."""
        N = len(roads)
        per_lane = [[[] for _ in range(L)] for _ in range(N)]
        for n, r in enumerate(roads):
            for k, pair in enumerate(r.conflict_lanes):
                for side, lane in enumerate(pair):
                    per_lane[n][int(lane)].append((k, side))
        C = max((len(x) for net in per_lane for x in net), default=0)
        lc = np.full((N, L, max(C, 1)), -1, dtype=np.int64)
        ls = np.zeros((N, L, max(C, 1)), dtype=np.int64)
        for n in range(N):
            for lane, items in enumerate(per_lane[n]):
                for j, (k, side) in enumerate(items):
                    lc[n, lane, j], ls[n, lane, j] = k, side
        self.C = C
        self.lane_conflicts = self._tensor(lc, torch.int64)
        self.lane_conflict_side = self._tensor(ls, torch.int64)

    def _set_route(self, tab: dict) -> None:
        """Shadows, the route polylines and each lane's range of route positions."""
        t = self._tensor
        self.shadow, self.shadow_len = t(tab["shadow"], torch.int64), t(tab["shadow_len"])
        self.route_points, self.route_s = t(tab["rpts"]), t(tab["rs"])
        self.route_length = t(tab["rlen"])
        self.lane_key_lo, self.lane_key_hi = t(tab["key_lo"]), t(tab["key_hi"])

    def _set_spawn_points(self, tab: dict) -> None:
        """Spawn points of all networks in one sorted 1-D table: key = net * 1e6 + route s."""
        sp = tab["spawn"]
        net = np.concatenate(sp["net"])
        key = np.concatenate(sp["key"])
        order = np.lexsort((key, net))
        glob = net[order] * 1e6 + key[order]
        self.spawn_key = torch.as_tensor(glob, dtype=torch.float64, device=self.device)
        self.spawn_lane = self._tensor(np.concatenate(sp["lane"])[order], torch.int64)
        self.spawn_s = self._tensor(np.concatenate(sp["s"])[order])
        ds_sorted = np.concatenate(sp["ds"])[order]
        self.spawn_cumlen = torch.as_tensor(
            np.concatenate([[0.0], np.cumsum(ds_sorted)]), dtype=torch.float64, device=self.device
        )

    def _set_point_tables(self) -> None:
        """Flat per-lane and per-point tables of :meth:`point_at` (each polyline segment
        and its unit tangent, computed once with the operations the lookup used to do)."""
        self._ds_flat = self.ds.reshape(-1)
        self._length_flat = self.length.reshape(-1)
        self._speed_limit_flat = self.speed_limit.reshape(-1)
        self._end_flat = self.end.reshape(-1)
        # successors of every lane: how many, the last valid pick, the table (flat rows)
        self._num_succ_flat = self.num_succ.reshape(-1)
        self._max_pick_flat = (self._num_succ_flat - 1).clamp(min=0)
        self._succ_flat = self.succ.reshape(-1, self.succ.shape[-1])
        self._last_seg_flat = self.num_points.reshape(-1) - 2
        nxt = torch.cat([self.points[:, :, 1:], self.points[:, :, -1:]], 2).reshape(-1, 2)
        self._seg_flat = nxt - self.points_flat  # the last point of a lane: never indexed
        ds_seg = self.ds_seg.unsqueeze(-1).expand(self.N, self.L, self.P).reshape(-1, 1)
        self._tangent_flat = self._seg_flat / ds_seg

    # ------------------------------------------------------------------ geometry
    def point_at(self, net, lane, s):
        """Position ``(..., 2)`` and unit tangent ``(..., 2)`` at arc length ``s`` of
        ``lane`` of network ``net`` (all broadcastable, same shape)."""
        return self.point_on(self.lane_rows(net, lane), s)

    def position_at(self, net, lane, s):
        """The position of :meth:`point_at` alone."""
        base, frac = self._segment(self.lane_rows(net, lane), s)
        return self.points_flat[base] + frac * self._seg_flat[base]

    def tangent_at(self, net, lane, s):
        """The unit tangent of :meth:`point_at` alone."""
        return self._tangent_flat[self._segment_index(self.lane_rows(net, lane), s)[0]]

    def lane_rows(self, net, lane):
        """What :meth:`point_at` looks up per lane, for several :meth:`point_on` calls on
        the same lanes."""
        flat = net * self.L + lane.clamp(min=0)
        return flat, self._ds_flat[flat], self._last_seg_flat[flat], flat * self.P

    def point_on(self, rows, s):
        """:meth:`point_at` on the lanes of ``rows`` (:meth:`lane_rows`)."""
        base, frac = self._segment(rows, s)
        return self.points_flat[base] + frac * self._seg_flat[base], self._tangent_flat[base]

    def _segment_index(self, rows, s):
        """The flat index of the segment holding arc length ``s`` on the lanes of ``rows``,
        with ``s`` in segments ``u`` and the segment's index ``i0`` on its lane (``u >= 0``:
        truncation is the floor)."""
        _, ds, last, first = rows
        u = (s / ds).clamp(min=0)
        i0 = torch.minimum(u.long(), last)
        return first + i0, u, i0

    def _segment(self, rows, s):
        """The flat index of the segment holding arc length ``s`` and the fraction
        ``(..., 1)`` of it before ``s``."""
        index, u, i0 = self._segment_index(rows, s)
        return index, (u - i0.to(u.dtype)).clamp(max=1.0).unsqueeze(-1)


def _pool_tables(roads) -> dict:
    """The networks padded into numpy tables (see :class:`RoadPool`), filled per network."""
    tab = _empty_tables(roads)
    for n, r in enumerate(roads):
        _pad_lanes(tab, n, r)
        keys = _route_keys(tab, n, r)
        _add_spawn_points(tab, n, r, keys)
        route = np.asarray(r.route)
        cum = tab["route_cum"]
        cum[n, : len(route) + 1] = np.concatenate([[0.0], np.cumsum(r.length[route])])
        cum[n, len(route) + 1 :] = cum[n, len(route)]
    return tab


def _empty_tables(roads) -> dict:
    """The pool's numpy tables at their padded sizes, holding the padding values."""
    N = len(roads)
    L = max(len(r.length) for r in roads)
    P = max(r.points.shape[1] for r in roads)
    K = max(1, max(len(r.conflict_lanes) for r in roads))
    M = max(len(r.route_s()) for r in roads)
    R = max(len(r.route) for r in roads)
    f = {k: np.zeros((N, L)) for k in ("length", "width", "speed_limit")}
    f["length"][:] = 1.0
    f["width"][:] = 3.5
    f["speed_limit"][:] = 10.0
    return {
        "N": N,
        "L": L,
        "P": P,
        "K": K,
        "M": M,
        "pts": np.zeros((N, L, P, 2)),
        "npts": np.full((N, L), 2, dtype=np.int64),
        "f": f,
        "ints": {k: np.full((N, L), -1, dtype=np.int64) for k in ("left", "right")},
        "kind": np.zeros((N, L), dtype=np.int64),
        "end": np.full((N, L), END_EXIT, dtype=np.int64),
        "prio": np.zeros((N, L), dtype=np.int64),
        "succ": np.full((N, L, 4), -1, dtype=np.int64),
        "pred": np.full((N, L, 4), -1, dtype=np.int64),
        "route_next": np.full((N, L), -1, dtype=np.int64),
        "on_route": np.zeros((N, L), dtype=bool),
        "cl": np.full((N, K, 2), -1, dtype=np.int64),
        "cs": np.zeros((N, K, 2)),
        "cxy": np.full((N, K, 2), INF),
        "zin": np.zeros((N, K, 2)),
        "zout": np.zeros((N, K, 2)),
        "shadow": np.full((N, L, 3), -1, dtype=np.int64),
        "shadow_len": np.zeros((N, L, 3)),
        "rpts": np.zeros((N, M, 2)),
        "rs": np.zeros((N, M)),
        "rlen": np.zeros(N),
        "rlanes": np.full((N, R), -1, dtype=np.int64),
        "route_cum": np.zeros((N, R + 1)),
        "key_lo": np.full((N, L), INF),
        "key_hi": np.full((N, L), -INF),
        "spawn": {k: [] for k in ("lane", "s", "key", "ds", "net")},
    }


def _pad_lanes(tab: dict, n: int, r) -> None:
    """Network ``n``'s lanes, links, route lanes, conflicts, zones and shadows."""
    nl, p = r.points.shape[:2]
    tab["pts"][n, :nl, :p] = r.points
    tab["pts"][n, :nl, p:] = r.points[:, -1:]
    tab["npts"][n, :nl] = r.num_points
    for k in tab["f"]:
        tab["f"][k][n, :nl] = getattr(r, k)
    for k in tab["ints"]:
        tab["ints"][k][n, :nl] = getattr(r, k)
    tab["kind"][n, :nl], tab["end"][n, :nl], tab["prio"][n, :nl] = r.kind, r.end, r.priority
    tab["succ"][n, :nl, : r.succ.shape[1]] = r.succ
    tab["pred"][n, :nl, : r.pred.shape[1]] = r.pred
    route = np.asarray(r.route)
    tab["route_next"][n, route[:-1]] = route[1:]
    tab["on_route"][n, route] = True
    tab["rlanes"][n, : len(route)] = route
    k = len(r.conflict_lanes)
    tab["cl"][n, :k], tab["cs"][n, :k] = r.conflict_lanes, r.conflict_s
    tab["cxy"][n, :k] = r.conflict_xy
    tab["zin"][n, :k], tab["zout"][n, :k] = _conflict_zones(r)
    tab["shadow"][n, :nl], tab["shadow_len"][n, :nl] = _shadows(r)


def _route_keys(tab: dict, n: int, r) -> np.ndarray:
    """Network ``n``'s route polyline and lane ranges; returns each lane point's route s."""
    from scipy.spatial import cKDTree

    nl, M = r.points.shape[0], tab["M"]
    poly, s_route = r.route_polyline(), r.route_s()
    tab["rpts"][n, : len(s_route)] = poly
    tab["rpts"][n, len(s_route) :] = poly[-1]
    tab["rs"][n, : len(s_route)] = s_route
    tab["rs"][n, len(s_route) :] = s_route[-1] + 1e-3 * np.arange(1, M - len(s_route) + 1)
    tab["rlen"][n] = s_route[-1]
    tree = cKDTree(poly)
    valid_pt = np.arange(r.points.shape[1])[None, :] < r.num_points[:, None]
    _, near = tree.query(r.points[valid_pt])
    keys = np.full(valid_pt.shape, np.nan)
    keys[valid_pt] = s_route[near]
    tab["key_lo"][n, :nl] = np.nanmin(keys, axis=1)
    tab["key_hi"][n, :nl] = np.nanmax(keys, axis=1)
    return keys


def _add_spawn_points(tab: dict, n: int, r, keys: np.ndarray) -> None:
    """Network ``n``'s spawn points: road/ramp points away from ends, forks and zones."""
    nl = r.points.shape[0]
    k = len(r.conflict_lanes)
    valid_pt = np.arange(r.points.shape[1])[None, :] < r.num_points[:, None]
    ds = r.length / (r.num_points - 1)
    s_pt = np.arange(r.points.shape[1])[None, :] * ds[:, None]
    spawnable = np.isin(r.kind, (KIND_ROAD, KIND_RAMP))[:, None]
    # not at the very ends (spawned vehicles need room to see ahead)
    keep = valid_pt & spawnable & (s_pt > 2.0) & (s_pt < r.length[:, None] - 15.0)
    # nor where a car could touch one on a sibling lane or in a conflict zone
    # (followers on those lanes would not see it yet)
    keep &= s_pt > tab["shadow_len"][n, :nl].max(1, keepdims=True) + 5.0
    for (la, lb), z0, z1 in zip(r.conflict_lanes, tab["zin"][n, :k], tab["zout"][n, :k]):
        for lane, a0, a1 in ((la, z0[0], z1[0]), (lb, z0[1], z1[1])):
            keep[lane] &= ~((s_pt[lane] > a0 - 15.0) & (s_pt[lane] < a1 + 5.0))
    lane_id = np.broadcast_to(np.arange(nl)[:, None], keep.shape)
    sp = tab["spawn"]
    sp["lane"].append(lane_id[keep])
    sp["s"].append(s_pt[keep])
    sp["key"].append(keys[keep])
    sp["ds"].append(np.broadcast_to(ds[:, None], keep.shape)[keep])
    sp["net"].append(np.full(int(keep.sum()), n))


# ----------------------------------------------------------------------------- traffic
@dataclasses.dataclass
class _State:
    valid: torch.Tensor  # (B, V) bool
    x: torch.Tensor
    y: torch.Tensor
    theta: torch.Tensor
    v: torch.Tensor
    accel: torch.Tensor
    kappa: torch.Tensor
    length: torch.Tensor
    width: torch.Tensor
    v_factor: torch.Tensor
    lane: torch.Tensor  # (B, V) long
    s: torch.Tensor
    nxt: torch.Tensor  # (B, V, 2) long: the next two lanes of the path
    from_lane: torch.Tensor  # (B, V) long, -1 when not changing lanes
    cooldown: torch.Tensor  # (B, V) long
    offset: torch.Tensor  # (B, V) signed lateral offset from the lane centre [m]
    uid: torch.Tensor  # (B, V) long: a new id for every vehicle that enters a slot


class Traffic:
    """``n`` scenes of traffic, batched (see the module docstring for the model).

    ``roads``: a :class:`RoadPool` or a list of RoadNetworks. ``params``: ``(n, P)`` rows
    of ``PARAM_NAMES`` (default: the literature values). ``max_vehicles``: slots per
    scene, the ego included. ``window``: vehicles exist within this distance of the ego
    [m]. ``ego``: "autopilot" or "external". ``seed``: the generator of spawns and route
    choices.
    """

    def __init__(
        self,
        roads,
        n: int,
        *,
        params=None,
        max_vehicles: int = 32,
        window: float = 150.0,
        ego: str = "autopilot",
        seed: int = 0,
        device=None,
        dtype=torch.float32,
    ):
        if ego not in ("autopilot", "external"):
            raise ValueError(f"ego must be 'autopilot' or 'external', got {ego!r}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n (the number of scenes) must be a positive int, got {n!r}")
        if int(max_vehicles) < 2:
            raise ValueError(
                f"max_vehicles must be >= 2 (the ego and one more), got {max_vehicles}"
            )
        if not (window > SPAWN_MIN_DISTANCE + 20):
            raise ValueError(f"window must exceed {SPAWN_MIN_DISTANCE + 20} m, got {window}")
        pool = roads if isinstance(roads, RoadPool) else RoadPool(roads, device=device, dtype=dtype)
        self.pool = pool
        self.device, self.dtype = pool.device, pool.dtype
        self.n, self.V = int(n), int(max_vehicles)
        self.window = float(window)
        self.ego_mode = ego
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(int(seed))
        self.params = self._check_params(params)
        self.net = torch.zeros(self.n, dtype=torch.long, device=self.device)
        self.steps = 0
        self._next_uid = 1  # the ego of every scene is 0
        self.state: _State | None = None
        self.ego_route_s = torch.zeros(self.n, dtype=self.dtype, device=self.device)
        self._route_idx = torch.zeros(self.n, dtype=torch.long, device=self.device)

    # ------------------------------------------------------------------ parameters
    def _check_params(self, params) -> torch.Tensor:
        if params is None:
            params = default_params(self.n)
        p = torch.as_tensor(params, dtype=torch.float64)
        if p.dim() == 1:
            p = p.expand(self.n, -1)
        if tuple(p.shape) != (self.n, len(PARAM_NAMES)):
            raise ValueError(
                f"params must have shape ({self.n}, {len(PARAM_NAMES)}) (one row of "
                f"{', '.join(PARAM_NAMES)} per scene), got {tuple(p.shape)}"
            )
        if not bool(torch.isfinite(p).all()):
            raise ValueError("traffic params contain NaN or inf")
        pos = [i for i, k in enumerate(PARAM_NAMES) if k not in ("politeness", "density")]
        if bool((p[:, pos] <= 0).any()):
            raise ValueError(f"traffic params {[PARAM_NAMES[i] for i in pos]} must be > 0")
        dens = p[:, PARAM_NAMES.index("density")]
        gap = p[:, PARAM_NAMES.index("min_gap")]
        jam = 1000.0 / (gap + CAR_LENGTH[1])
        bad = torch.nonzero((dens < 0) | (dens > 0.8 * jam)).flatten()
        if bad.numel():
            i = int(bad[0])
            raise ValueError(
                f"density {float(dens[i]):g} vehicles/km/lane of scene {i} cannot fit on the "
                f"road: it must lie in [0, {0.8 * float(jam[i]):.0f}] (80% of the jam density "
                f"1000 / (min_gap + car length) = {float(jam[i]):.0f})"
            )
        return p.to(device=self.device, dtype=self.dtype)

    def _param(self, name: str) -> torch.Tensor:
        return self._param_cols()[name][0]

    def _param2(self, name: str) -> torch.Tensor:
        """``_param(name)[:, None]`` ``(n, 1)``."""
        return self._param_cols()[name][1]

    def _param_cols(self) -> dict:
        """Views of the parameter columns, ``(n,)`` and ``(n, 1)``, made again when
        ``self.params`` is replaced (views: they follow changes made in place)."""
        if self.__dict__.get("_pcols_of") is not self.params:
            p = self.params
            self._pcols = {k: (p[:, i], p[:, i].unsqueeze(-1)) for i, k in enumerate(PARAM_NAMES)}
            self._pcols_of = p
        return self._pcols

    def _net2(self) -> torch.Tensor:
        """``self.net[:, None].expand(n, V)``, a view made again when ``self.net`` is
        replaced."""
        if self.__dict__.get("_net2_of") is not self.net:
            self._net2_val = self.net[:, None].expand(self.n, self.V)
            self._net2_of = self.net
        return self._net2_val

    def _slots(self, k: int, width: int) -> torch.Tensor:
        """``arange(V)`` as ``(k, V, width)`` (cached)."""
        cache = self.__dict__.setdefault("_slots_cache", {})
        out = cache.get((k, width))
        if out is None:
            slots = torch.arange(self.V, device=self.device).expand(k, self.V)
            out = cache[(k, width)] = slots.unsqueeze(-1).expand(k, self.V, width)
        return out

    # ------------------------------------------------------------------ reset
    def reset(
        self, index: torch.Tensor | None = None, *, nets=None, params=None, start=None
    ) -> None:
        """Start fresh scenes: all (``index`` None) or those in ``index``. ``nets``: the
        network of each reset scene (default: drawn at random from the pool); ``params``:
        their traffic parameters; ``start``: the ego's starting arc length along the
        route [m] (default 10 m)."""
        full = index is None
        idx = torch.arange(self.n, device=self.device) if full else index.to(self.device)
        k = int(idx.numel())
        if k == 0:
            return
        if params is not None:
            new = self._check_params_rows(params, k)
            self.params = self.params.clone()
            self.params[idx] = new
        if nets is None:
            nets = torch.randint(self.pool.N, (k,), generator=self.generator)
        nets = torch.as_tensor(nets, dtype=torch.long).to(self.device).reshape(-1)
        if nets.numel() != k or bool((nets < 0).any()) or bool((nets >= self.pool.N).any()):
            raise ValueError(f"nets must hold {k} network ids in [0, {self.pool.N})")
        self.net = self.net.clone()
        self.net[idx] = nets
        if full:  # a full reset starts the clock (lane-change rhythm) and the ids afresh
            self.steps = 0
            self._next_uid = 1
        if self.state is None:
            z = lambda dt=self.dtype: torch.zeros(self.n, self.V, dtype=dt, device=self.device)  # noqa: E731
            self.state = _State(
                valid=z(torch.bool), x=z(), y=z(), theta=z(), v=z(), accel=z(), kappa=z(),
                length=z(), width=z(), v_factor=z(), lane=z(torch.long) - 1, s=z(),
                nxt=torch.full((self.n, self.V, 2), -1, dtype=torch.long, device=self.device),
                from_lane=z(torch.long) - 1, cooldown=z(torch.long), offset=z(), uid=z(torch.long),
            )  # fmt: skip
        st = self.state
        for f in dataclasses.fields(st):
            setattr(st, f.name, getattr(st, f.name).clone())
        st.valid[idx] = False
        self._place_ego(idx, start)
        self._update_route_progress(idx, search=True)
        # fill the window around the ego: rounds of 4 far-apart candidate spots per scene
        idle = 0
        counts = self._target_count(idx)  # the egos stay put while the scenes fill
        for _ in range(RESET_ROUNDS):
            added = self._spawn(idx, min_distance=8.0, candidates=4, counts=counts) >= 0
            idle = 0 if bool(added.any()) else idle + 1
            if idle == 3:  # full (or no free spot found three times running)
                break

    def place(self, scene: int, lanes, s, speeds, *, lengths=None, widths=None) -> torch.Tensor:
        """Add vehicles to ``scene`` at arc length ``s`` of ``lanes`` (all ``(k,)``),
        driving at ``speeds``, on the lane centre and heading. Returns their slots.
        (Tests, and worlds that start from given agents.)"""
        st, pool = self.state, self.pool
        if st is None:
            raise RuntimeError("call Traffic.reset() before place()")
        if not (0 <= int(scene) < self.n):
            raise ValueError(f"scene must lie in [0, {self.n}), got {scene}")
        lanes = torch.as_tensor(lanes, dtype=torch.long, device=self.device).reshape(-1)
        k = int(lanes.numel())
        s = torch.as_tensor(s, dtype=self.dtype, device=self.device).reshape(-1)
        v = torch.as_tensor(speeds, dtype=self.dtype, device=self.device).reshape(-1)
        if s.numel() != k or v.numel() != k:
            raise ValueError(
                f"lanes, s and speeds must have the same length, got {k}, {s.numel()}, {v.numel()}"
            )
        net = self.net[scene].expand(k)
        n_lanes = len(pool.roads[int(self.net[scene])].length)
        if bool(((lanes < 0) | (lanes >= n_lanes)).any()):
            raise ValueError(f"lanes must be ids in [0, {n_lanes}) of the scene's network")
        if bool(((s < 0) | (s > pool.length[net, lanes])).any()) or bool((v < 0).any()):
            raise ValueError("s must lie on the lanes (0 <= s <= length) and speeds be >= 0")
        free = torch.nonzero(~st.valid[scene]).flatten()
        if free.numel() < k:
            raise ValueError(f"scene {scene} has {free.numel()} free slots, {k} vehicles asked")
        slot = free[:k]
        xy, tan = pool.point_at(net, lanes, s)
        length = torch.full((k,), 4.7) if lengths is None else torch.as_tensor(lengths)
        width = torch.full((k,), 1.9) if widths is None else torch.as_tensor(widths)
        n1 = self._choose_next(net, lanes)
        n2 = self._choose_next(net, n1)
        for name, val in dict(
            x=xy[:, 0], y=xy[:, 1], theta=torch.atan2(tan[:, 1], tan[:, 0]), v=v,
            accel=torch.zeros_like(v), kappa=torch.zeros_like(v), length=length, width=width,
            v_factor=torch.ones_like(v), s=s, offset=torch.zeros_like(v),
        ).items():  # fmt: skip
            getattr(st, name)[scene, slot] = val.to(self.device, self.dtype)
        st.lane[scene, slot] = lanes
        st.nxt[scene, slot] = torch.stack([n1, n2], -1)
        st.from_lane[scene, slot] = -1
        st.cooldown[scene, slot] = 0
        st.valid[scene, slot] = True
        st.uid[scene, slot] = self._next_uid + torch.arange(k, device=self.device)
        self._next_uid += k
        return slot

    def _check_params_rows(self, params, k):
        p = torch.as_tensor(params, dtype=torch.float64)
        if p.dim() == 1:
            p = p.expand(k, -1)
        saved, self.n = self.n, k
        try:
            return self._check_params(p)
        finally:
            self.n = saved

    def _place_ego(self, idx, start=None):
        pool, st = self.pool, self.state
        net = self.net[idx]
        k = int(idx.numel())
        if start is None:
            start = torch.full((k,), 10.0, dtype=torch.float64)
        start = torch.as_tensor(start, dtype=torch.float64).reshape(-1).to(self.device)
        if start.numel() != k:
            raise ValueError(f"start must hold one route position per reset scene ({k})")
        room = pool.route_length[net].to(torch.float64) - 50.0
        bad = torch.nonzero(~((start >= 0) & (start <= room))).flatten()
        if bad.numel():
            i = int(bad[0])
            raise ValueError(
                f"start {float(start[i]):.1f} m lies outside the route of scene {int(idx[i])} "
                f"(length {float(room[i]) + 50:.1f} m; the ego needs 50 m ahead)"
            )
        cum = pool.route_cum[net].to(torch.float64)  # k, R+1
        j = (torch.searchsorted(cum, start.unsqueeze(-1), right=True).squeeze(-1) - 1).clamp(min=0)
        j = torch.minimum(j, pool.route_count[net] - 1)
        lane = pool.route_lanes[net, j]
        s = (start - torch.gather(cum, 1, j.unsqueeze(-1)).squeeze(-1)).to(self.dtype)
        start = lane
        xy, tan = pool.point_at(net, start, s)
        st.valid[idx, 0] = True
        st.x[idx, 0], st.y[idx, 0] = xy[:, 0], xy[:, 1]
        st.theta[idx, 0] = torch.atan2(tan[:, 1], tan[:, 0])
        limit = pool.speed_limit[net, start]
        st.v[idx, 0] = 0.8 * limit
        st.accel[idx, 0] = 0.0
        st.kappa[idx, 0] = 0.0
        st.length[idx, 0], st.width[idx, 0] = EGO_SIZE
        st.v_factor[idx, 0] = 1.0
        st.lane[idx, 0] = start
        st.s[idx, 0] = s
        n1 = pool.route_next[net, start]
        n2 = pool.route_next[net, n1.clamp(min=0)]
        st.nxt[idx, 0, 0] = n1
        st.nxt[idx, 0, 1] = torch.where(n1 >= 0, n2, -1)
        st.from_lane[idx, 0] = -1
        st.cooldown[idx, 0] = 0
        st.offset[idx, 0] = 0.0
        st.uid[idx, 0] = 0

    # ------------------------------------------------------------------ helpers
    def _choose_next(self, net, lane):
        """A random successor of each ``lane`` (-1 where it has none)."""
        pool = self.pool
        flat = net * pool.L + lane.clamp(min=0)
        count = pool._num_succ_flat[flat]
        u = torch.rand(lane.shape, generator=self.generator)
        if u.device != self.device:
            u = u.to(self.device)
        pick = (u * count.to(u.dtype)).floor().long().clamp(min=0)
        pick = torch.minimum(pick, pool._max_pick_flat[flat])
        nxt = torch.gather(pool._succ_flat[flat], -1, pick.unsqueeze(-1)).squeeze(-1)
        return torch.where((lane >= 0) & (count > 0), nxt, -1)

    def _rows(self, rows, *names):
        """State fields (and the scenes' networks) of all scenes or of ``rows``."""
        st = self.state
        fields = [getattr(st, n) if rows is None else getattr(st, n)[rows] for n in names]
        return (self.net if rows is None else self.net[rows]), fields

    def _path(self, rows=None):
        """Path lanes ``(B, V, 3)`` and the path offset of each ``(B, V, 3)`` (INF where
        the path has no such lane), of all scenes or of ``rows``."""
        net, (lane, nxt) = self._rows(rows, "lane", "nxt")
        lanes = torch.cat([lane.unsqueeze(-1), nxt], dim=-1)
        return lanes, self._path_offsets(net[:, None], lanes)

    def _path_offsets(self, net, lanes):
        """Arc length from the start of a path ``lanes`` ``(..., 3)`` to the start of each
        of its lanes (INF where the path has no such lane); ``net`` ``(...)``."""
        ln = self.pool.length[net.unsqueeze(-1), lanes.clamp(min=0)]
        ln0, ln1, _ = ln.unbind(-1)
        off = torch.stack([torch.zeros_like(ln0), ln0, ln0 + ln1], -1)
        return torch.where(lanes >= 0, off, INF)

    def _occupancy(self, rows=None):
        """The lanes each vehicle occupies ``(B, V, 5)`` and its arc length on each: its
        lane, the lane it is leaving during a lane change, and near the start of a lane
        that forks from the same predecessor as others, those siblings while they are
        still closer than ``ZONE_WIDTH`` (a car on one would touch a car on the other)."""
        pool = self.pool
        net, (lane, from_lane, s, length, valid) = self._rows(
            rows, "lane", "from_lane", "s", "length", "valid"
        )
        net = net[:, None].expand_as(lane)
        lane_c = lane.clamp(min=0)
        ratio = pool.length[net, from_lane.clamp(min=0)] / pool.length[net, lane_c]
        sh = pool.shadow[net, lane_c]  # B,V,3
        near = s.unsqueeze(-1) < pool.shadow_len[net, lane_c] + 0.5 * length.unsqueeze(-1)
        sh = torch.where(near, sh, -1)
        occ = torch.cat([torch.stack([lane, from_lane], dim=-1), sh], -1)
        occ = torch.where(valid.unsqueeze(-1), occ, -1)
        occ_s = torch.cat([torch.stack([s, s * ratio], dim=-1), s.unsqueeze(-1).expand_as(sh)], -1)
        return occ, occ_s

    def _indices(self):
        """Sorted lane indices of the current state: occupancy (where vehicles are, both
        lanes during a lane change) and paths (every vehicle in the coordinates of each
        lane of its path, for follower lookups)."""
        st, pool = self.state, self.pool
        lanes, off = self._path()
        occ, occ_s = self._occupancy()
        occ_index = _LaneIndex(pool.L, occ, occ_s, self._slots(self.n, occ.shape[-1]))
        # paths, and the lane a vehicle is leaving (its followers there must see it)
        path_s = torch.cat([st.s.unsqueeze(-1) - off, occ_s[..., 1:2]], -1)
        path_lanes = torch.cat([lanes, occ[..., 1:2]], -1)
        path_lanes = torch.where(
            st.valid.unsqueeze(-1), path_lanes, torch.full_like(path_lanes, -1)
        )
        # sorted when first asked (a spawn attempt that gets far, a MOBIL step)
        path_index = _LazyLaneIndex(
            pool.L, path_lanes, path_s, self._slots(self.n, path_lanes.shape[-1])
        )
        self._occ = (occ, occ_s)  # reused by step (the state does not change in between)
        return lanes, off, occ_index, path_index

    def _gaps(self, q_lanes, q_off, q_s, q_len, occ_index):
        """Bumper gap from queries to the nearest vehicle ahead on their paths.

        ``q_lanes``/``q_off``: ``(B, Q, 3)`` query paths; ``q_s``, ``q_len``: ``(B, Q)``.
        Returns ``(gap (B, Q), leader index (B, Q))`` (gap INF and index -1 if none).
        """
        dist, who = occ_index.ahead(q_lanes, q_s.unsqueeze(-1) - q_off)  # B,Q,3
        dist, p = dist.min(-1)
        who = torch.gather(who, -1, p.unsqueeze(-1)).squeeze(-1)
        len_j = torch.gather(self.state.length, 1, who.clamp(min=0))
        gap = torch.where(who >= 0, dist - 0.5 * (q_len + len_j), INF)
        return gap, who

    def _followers(self, q_lane, q_s, q_len, path_index):
        """Bumper gap from the nearest vehicle behind a query position ``(lane, s)``
        ``(B, Q)`` whose path contains the query lane. Returns ``(gap, index)``."""
        dist, who = path_index.behind(q_lane.unsqueeze(-1), q_s.unsqueeze(-1))
        dist, who = dist.squeeze(-1), who.squeeze(-1)
        len_j = torch.gather(self.state.length, 1, who.clamp(min=0))
        gap = torch.where(who >= 0, dist - 0.5 * (q_len + len_j), INF)
        return gap, who

    def _idm(self, v, v0, gap, v_lead):
        """IDM acceleration (``gap`` INF: free road), per scene parameters broadcast."""
        T = self._param2("time_headway")
        s0 = self._param2("min_gap")
        a = self._param2("max_accel")
        b = self._param2("comfort_decel")
        free = 1.0 - (v / v0.clamp(min=0.1)).clamp(min=0).pow(4)
        dv = v - v_lead
        s_star = s0 + (v * T + v * dv / (2.0 * torch.sqrt(a * b))).clamp(min=0)
        interaction = (s_star / gap.clamp(min=0.1)).pow(2)
        interaction = torch.where(gap < INF / 2, interaction, 0.0)
        return a * (free - interaction)

    def _gather_v(self, who):
        v = torch.gather(self.state.v, 1, who.clamp(min=0))
        return torch.where(who >= 0, v, 0.0)

    # ------------------------------------------------------------------ step
    def step(self, ego_action: torch.Tensor | None = None) -> None:
        """Advance every scene by ``DT``. ``ego_action``: ``(n, 2)`` [acceleration m/s^2,
        steering angle rad] when the ego is external (ignored for autopilot)."""
        if self.state is None:
            raise RuntimeError("call Traffic.reset() before step()")
        if self.ego_mode == "external" and ego_action is None:
            raise ValueError("an external ego needs ego_action of shape (n, 2) at every step")
        st, pool = self.state, self.pool
        net2 = self._net2()
        lanes, off, occ_index, path_index = self._indices()
        # new vehicles first, at free spots of the current state
        new_slots = self._spawn(
            None,
            min_distance=SPAWN_MIN_DISTANCE,
            indices=(occ_index, path_index),
            candidates=SPAWN_CANDIDATES,
        )
        spawned = (new_slots >= 0).any(1)
        any_spawned = bool(spawned.any())
        if any_spawned:
            lanes, off = self._path()

        # --- leaders and the desired speed
        gap, who = self._gaps(lanes, off, st.s, st.length, occ_index)
        if any_spawned:
            # the indices predate this step's new vehicles (a few per scene): add
            # each as a possible leader of the others in its scene (cheaper than sorting
            # again); lane changes wait a step in those scenes (see _mobil)
            for c in range(new_slots.shape[1]):
                gap, who = self._with_new_leaders(gap, who, lanes, off, new_slots[:, c])
        # a vehicle changing lanes still keeps its distance in the lane it is leaving
        # (none changing lanes: every such gap would be INF, closer nowhere; skipped)
        occ, occ_s = self._occ
        if bool((occ[..., 1] >= 0).any()):
            d_from, who_from = occ_index.ahead(occ[..., 1], occ_s[..., 1])
            len_from = torch.gather(st.length, 1, who_from.clamp(min=0))
            gap_from = torch.where(who_from >= 0, d_from - 0.5 * (st.length + len_from), INF)
            closer = gap_from < gap
            gap = torch.where(closer, gap_from, gap)
            who = torch.where(closer, who_from, who)
        v_lead = self._gather_v(who)
        # the path's lanes in the pool's flat tables (lanes[..., 0] is the current lane)
        flat3 = net2.unsqueeze(-1) * pool.L + lanes.clamp(min=0)
        real3 = lanes >= 0
        lim3 = pool._speed_limit_flat[flat3]
        v0 = lim3[..., 0] * st.v_factor * self._param2("speed_factor")
        b = self._param2("comfort_decel")
        # slow down in time for a slower lane ahead (elementwise: both lanes at once)
        dist = (off[..., 1:] - st.s.unsqueeze(-1)).clamp(min=0)
        cap = torch.sqrt(
            lim3[..., 1:].pow(2) * st.v_factor.pow(2).unsqueeze(-1) + (2 * b).unsqueeze(-1) * dist
        )
        for p in (1, 2):
            v0 = torch.where(real3[..., p], torch.minimum(v0, cap[..., p - 1]), v0)
        # an ending lane at the end of the known path is a stopped obstacle
        ends = real3 & (pool._end_flat[flat3] == END_LANE_END)
        d_end = (
            off + pool._length_flat[flat3] - st.s.unsqueeze(-1) - (0.5 * st.length).unsqueeze(-1)
        )
        last_end = torch.where(ends, d_end, INF).amin(-1)
        stop_gap = last_end
        # junction yielding: a stopped obstacle before the conflict point
        stop_gap = torch.minimum(stop_gap, self._yield_gaps(lanes, off, net2))
        use_stop = stop_gap < gap
        gap_eff = torch.where(use_stop, stop_gap, gap)
        v_lead_eff = torch.where(use_stop, 0.0, v_lead)
        acc = self._idm(st.v, v0, gap_eff, v_lead_eff).clamp(-MAX_BRAKE, MAX_ACCEL)

        # --- lane changes
        if self.steps % LANE_CHANGE_EVERY == 0:
            direction = "left" if (self.steps // LANE_CHANGE_EVERY) % 2 == 0 else "right"
            self._mobil(
                direction, acc, gap, who, v0, last_end, occ_index, path_index, net2, spawned
            )
            lanes, off = self._path()

        # --- steering: pure pursuit on the path
        look = (0.8 * st.v + 4.0).clamp(6.0, 25.0)
        s_t = st.s + look
        tgt_lane, s_on = st.lane, s_t
        for p in (1, 2):
            beyond = (lanes[..., p] >= 0) & (s_t >= off[..., p])
            tgt_lane = torch.where(beyond, lanes[..., p], tgt_lane)
            s_on = torch.where(beyond, s_t - off[..., p], s_on)
        target = pool.position_at(net2, tgt_lane, s_on)
        dx, dy = target[..., 0] - st.x, target[..., 1] - st.y
        alpha = torch.atan2(dy, dx) - st.theta
        alpha = torch.atan2(torch.sin(alpha), torch.cos(alpha))
        dist = torch.sqrt(dx * dx + dy * dy).clamp(min=1.0)
        kappa_cmd = 2.0 * torch.sin(alpha) / dist
        dk = (kappa_cmd - st.kappa).clamp(-MAX_CURVATURE_RATE * DT, MAX_CURVATURE_RATE * DT)
        kappa = (st.kappa + dk).clamp(-MAX_CURVATURE, MAX_CURVATURE)
        wheelbase = 0.6 * st.length
        delta = torch.atan(kappa * wheelbase)

        if self.ego_mode == "external":
            a_e = torch.as_tensor(ego_action, device=self.device, dtype=self.dtype)
            acc = acc.clone()
            delta = delta.clone()
            acc[:, 0] = a_e[:, 0]
            delta[:, 0] = a_e[:, 1]

        x_new, y_new, theta_new, v_new, acc, kappa_real = bicycle_step(
            st.x, st.y, st.theta, st.v, acc, delta, st.length
        )
        valid = st.valid
        keep = lambda new, old: torch.where(valid, new, old)  # noqa: E731
        st.x, st.y = keep(x_new, st.x), keep(y_new, st.y)
        st.theta = keep(torch.atan2(torch.sin(theta_new), torch.cos(theta_new)), st.theta)
        st.v, st.accel, st.kappa = (
            keep(v_new, st.v),
            keep(acc, st.accel),
            keep(kappa_real, st.kappa),
        )
        st.cooldown = (st.cooldown - 1).clamp(min=0)

        # --- arc length on the path, lane transitions, lane-change completion
        self._project(net2)
        if self.ego_mode == "external":
            self._associate_ego()
        self._despawn()
        self.steps += 1
        self._update_route_progress(None)

    def _yield_gaps(self, lanes, off, net2):
        """Gap to the stop position of each vehicle that must yield at a conflict on its
        path ``(B, V)`` (INF where none).

        Sparse: one entry per (vehicle, path lane, conflict of that lane), only where a
        path lane has conflicts; what each side of a conflict holds (someone inside,
        arriving, committed) is reduced per (scene, conflict, side) with scatter.
        """
        pool, st = self.pool, self.state
        B, V = self.n, self.V
        if pool.C == 0:
            return torch.full_like(st.s, INF)
        net3 = self.net[:, None, None].expand_as(lanes)
        conf = pool.lane_conflicts[net3, lanes.clamp(min=0)]  # B,V,3,C
        ok = (lanes >= 0) & st.valid.unsqueeze(-1)
        conf = torch.where(ok.unsqueeze(-1), conf, -1)
        b, i, p, c = torch.nonzero(conf >= 0, as_tuple=True)
        if b.numel() == 0:
            return torch.full_like(st.s, INF)
        net = self.net[b]
        k = conf[b, i, p, c]
        side = pool.lane_conflict_side[net, lanes[b, i, p], c]
        base = off[b, i, p] - st.s[b, i]
        d_in = base + pool.zone_in[net, k, side]
        d_out = base + pool.zone_out[net, k, side]
        half = 0.5 * st.length[b, i]
        v = st.v[b, i]
        margin = 1.0
        # the body overlaps the zone / the front has not reached it yet
        inside = (d_in < half + margin) & (d_out > -(half + margin))
        approach = d_in >= half + margin
        stop_gap = d_in - half - margin  # front bumper to the stop position
        committed = stop_gap < v.pow(2) / (2 * HARD_BRAKE)
        ahead = approach & ((d_in - half) / v.clamp(min=1.0) < YIELD_HORIZON)
        # per (scene, conflict, side): anyone inside / arriving / arriving unable to stop
        key = (b * pool.K + k) * 2 + side
        flags = torch.stack([inside, ahead, ahead & committed], -1).to(self.dtype)
        held = torch.zeros(B * pool.K * 2, 3, dtype=self.dtype, device=self.device)
        held.scatter_reduce_(0, key.unsqueeze(-1).expand_as(flags), flags, "amax")
        other = held[key ^ 1] > 0  # the other side of the same conflict
        # the road orders each pair: side 0 has the right of way, so side 1 yields to
        # anyone arriving on side 0 within the horizon (gap acceptance)
        must = other[:, 0] | other[:, 2] | (other[:, 1] & (side == 1))
        must &= approach & ~committed
        gap = torch.where(must, stop_gap, INF)
        gaps = torch.full((B * V,), INF, dtype=self.dtype, device=self.device)
        gaps.scatter_reduce_(0, b * V + i, gap, "amin")
        return gaps.reshape(B, V)

    def _with_new_leaders(self, gap, who, lanes, off, new_slot):
        """``gap``/``who`` ``(B, V)`` updated with the vehicle in ``new_slot`` ``(B,)``
        (-1: none) of each scene as a candidate leader on the others' paths."""
        st = self.state
        slot = new_slot.clamp(min=0).unsqueeze(-1)  # B,1
        new_lane = torch.gather(st.lane, 1, slot)
        new_lane = torch.where(new_slot.unsqueeze(-1) >= 0, new_lane, -1)
        new_s = torch.gather(st.s, 1, slot)
        new_len = torch.gather(st.length, 1, slot)
        match = (lanes == new_lane.unsqueeze(-1)) & (new_lane.unsqueeze(-1) >= 0)  # B,V,3
        d = off + new_s.unsqueeze(-1) - st.s.unsqueeze(-1)
        d = torch.where(match & (d > 0), d, INF).amin(-1)
        d = d - 0.5 * (st.length + new_len)
        d = torch.where(torch.arange(self.V, device=self.device) == slot, INF, d)
        closer = d < gap
        return torch.where(closer, d, gap), torch.where(closer, slot.expand_as(who), who)

    def _mobil(self, direction, acc, gap, who, v0, last_end, occ_index, path_index, net2, spawned):
        st, pool = self.state, self.pool
        table = pool.left if direction == "left" else pool.right
        lane_c = st.lane.clamp(min=0)
        target = table[net2, lane_c]
        kind = pool.kind[net2, lane_c]
        eligible = (
            st.valid
            & (target >= 0)
            & (st.from_lane < 0)
            & (st.cooldown == 0)
            & ((kind == KIND_ROAD) | (kind == KIND_RAMP))
        )
        eligible[:, 0] = False  # the ego stays on its route (autopilot) or steers itself
        eligible &= ~spawned.unsqueeze(-1)  # the indices do not hold this step's new cars
        if not bool(eligible.any()):
            return
        tgt = torch.where(eligible, target, -1)
        ratio = pool.length[net2, tgt.clamp(min=0)] / pool.length[net2, lane_c]
        s_t = st.s * ratio
        n1 = self._choose_next(net2, tgt)
        n2 = self._choose_next(net2, n1)
        t_lanes = torch.stack([tgt, n1, n2], dim=-1)
        t_off = self._path_offsets(net2, t_lanes)
        # the new leader and the new follower in the target lane
        g_new, lead_new = self._gaps(t_lanes, t_off, s_t, st.length, occ_index)
        g_f, fol_new = self._followers(tgt, s_t, st.length, path_index)
        v = st.v
        limit_t = pool.speed_limit[net2, tgt.clamp(min=0)]
        v0_t = limit_t * st.v_factor * self._param2("speed_factor")
        # an ending target lane is an obstacle there too
        end_t = torch.full_like(st.s, INF)
        for p in (0, 1, 2):
            lp = t_lanes[..., p]
            ends = (lp >= 0) & (pool.end[net2, lp.clamp(min=0)] == END_LANE_END)
            d_end = t_off[..., p] + pool.length[net2, lp.clamp(min=0)] - s_t - 0.5 * st.length
            end_t = torch.where(ends, torch.minimum(end_t, d_end), end_t)
        use_end = end_t < g_new
        a_i_new = self._idm(
            v,
            v0_t,
            torch.where(use_end, end_t, g_new),
            torch.where(use_end, 0.0, self._gather_v(lead_new)),
        ).clamp(-MAX_BRAKE, MAX_ACCEL)
        # the new follower: before (its current acceleration) and after (i ahead of it)
        v_f = self._gather_v(fol_new)
        a_f_old = torch.gather(acc, 1, fol_new.clamp(min=0))
        v0_f = torch.gather(v0, 1, fol_new.clamp(min=0))
        a_f_new = self._idm(v_f, v0_f, g_f, v)
        has_f = fol_new >= 0
        a_f_old = torch.where(has_f, a_f_old, 0.0)
        a_f_new = torch.where(has_f, a_f_new, 0.0)
        # the old follower: gains the gap of i
        g_o, fol_old = self._followers(st.lane, st.s, st.length, path_index)
        has_o = fol_old >= 0
        v_o = self._gather_v(fol_old)
        a_o_old = torch.gather(acc, 1, fol_old.clamp(min=0))
        v0_o = torch.gather(v0, 1, fol_old.clamp(min=0))
        g_o_new = g_o + st.length + gap
        a_o_new = self._idm(v_o, v0_o, g_o_new, self._gather_v(who))
        a_o_old = torch.where(has_o, a_o_old, 0.0)
        a_o_new = torch.where(has_o, a_o_new, 0.0)
        p = self._param2("politeness")
        thr = self._param2("change_threshold")
        b_safe = self._param2("safe_decel")
        incentive = a_i_new - acc + p * (a_f_new - a_f_old + a_o_new - a_o_old)
        bias = -A_BIAS if direction == "right" else A_BIAS
        # leaving an ending lane is mandatory: the bias grows as its end nears
        mandatory = (last_end < 250.0) & (end_t > last_end + 50.0)
        incentive = incentive + torch.where(mandatory, torch.full_like(incentive, 3.0), 0.0)
        s0 = self._param2("min_gap")
        safe = (a_f_new > -b_safe) & (g_new > 0.5 * s0) & (g_f > 0.5 * s0)
        # too close to the end of the lane to finish a change on it
        room = pool.length[net2, lane_c] - st.s > 10.0
        # pulling out needs room ahead: close behind a car the front would sweep into it
        room &= gap > PULL_OUT_GAP
        go = eligible & safe & room & (incentive > thr + bias)
        if not bool(go.any()):
            return
        st.from_lane = torch.where(go, st.lane, st.from_lane)
        st.lane = torch.where(go, tgt, st.lane)
        st.s = torch.where(go, s_t, st.s)
        st.nxt = torch.where(go.unsqueeze(-1), torch.stack([n1, n2], -1), st.nxt)
        st.cooldown = torch.where(
            go, torch.full_like(st.cooldown, LANE_CHANGE_COOLDOWN), st.cooldown
        )

    def _project(self, net2):
        """New arc length of every vehicle on its path (projection onto the polyline
        near the old position), lane transitions and lane-change completion."""
        st, pool = self.state, self.pool
        # two Newton steps of the projection: s <- s + (p - c(s)) . t(s); exact on
        # straight lanes, and on curves (radius >= 5 m, offsets < 2 m) converged to
        # well under a centimetre; each step starts from the last, so nothing drifts
        pos = torch.stack([st.x, st.y], -1)
        s_new = st.s
        rows = pool.lane_rows(net2, st.lane)
        for _ in range(2):
            c, t = pool.point_on(rows, s_new)
            s_new = s_new + ((pos - c) * t).sum(-1)
        c, t = pool.point_on(rows, s_new)
        rel = pos - c
        offset = t[..., 0] * rel[..., 1] - t[..., 1] * rel[..., 0]
        st.s = torch.where(st.valid, s_new.clamp(min=0), st.s)
        st.offset = torch.where(st.valid, offset, st.offset)
        # lane transitions (at most two per step: lanes are >= 5 m, vehicles move < 4 m)
        for _ in range(2):
            ln = pool.length[net2, st.lane.clamp(min=0)]
            over = st.valid & (st.s >= ln) & (st.nxt[..., 0] >= 0)
            if not bool(over.any()):
                break
            nxt0 = st.nxt[..., 0]
            n_new = self._choose_next(net2, st.nxt[..., 1])
            # the ego follows its route (off the route: a random successor)
            ego_next = pool.route_next[self.net, st.nxt[:, 0, 1].clamp(min=0)]
            ego_next = torch.where(ego_next >= 0, ego_next, n_new[:, 0])
            n_new[:, 0] = torch.where(st.nxt[:, 0, 1] >= 0, ego_next, -1)
            # the lane being left moves on in parallel
            from_next = pool.succ[net2, st.from_lane.clamp(min=0), 0]
            st.from_lane = torch.where(
                over, torch.where(st.from_lane >= 0, from_next, st.from_lane), st.from_lane
            )
            st.s = torch.where(over, st.s - ln, st.s)
            st.lane = torch.where(over, nxt0, st.lane)
            st.nxt = torch.where(
                over.unsqueeze(-1), torch.stack([st.nxt[..., 1], n_new], -1), st.nxt
            )
        done = (st.from_lane >= 0) & (st.offset.abs() < 0.3)
        st.from_lane = torch.where(done, torch.full_like(st.from_lane, -1), st.from_lane)

    def _associate_ego(self):
        """Put the external ego on the lane it drives on: of its lane, the neighbours and
        the lanes that fork from the same predecessor, the one with the least lateral
        offset. Straddling a lane line (> ``STRADDLE`` m off centre towards a neighbour)
        it occupies the neighbour too, so that lane's traffic reacts."""
        st, pool, net = self.state, self.pool, self.net
        lane, s = st.lane[:, 0], st.s[:, 0]
        pred0 = pool.pred[net, lane, 0]
        siblings = pool.succ[net, pred0.clamp(min=0)]
        siblings = torch.where((pred0 >= 0).unsqueeze(-1), siblings, -1)
        left, right = pool.left[net, lane], pool.right[net, lane]
        cand = torch.cat([torch.stack([lane, left, right], -1), siblings], -1)  # B,7
        rows = pool.lane_rows(net.unsqueeze(-1), cand)
        ln = pool._length_flat[rows[0]]  # the candidates' lengths
        ratio = ln / pool.length[net, lane].unsqueeze(-1)
        s_c = torch.cat([s.unsqueeze(-1) * ratio[:, :3], s.unsqueeze(-1).expand(-1, 4)], -1)
        pos = torch.stack([st.x[:, 0], st.y[:, 0]], -1).unsqueeze(1)
        for _ in range(2):
            c, t = pool.point_on(rows, s_c)
            s_c = s_c + ((pos - c) * t).sum(-1)
        c, t = pool.point_on(rows, s_c)
        rel = pos - c
        off = t[..., 0] * rel[..., 1] - t[..., 1] * rel[..., 0]
        usable = (cand >= 0) & (s_c >= -1.0) & (s_c <= ln + 1.0)
        score = torch.where(usable, off.abs(), INF)
        score[:, 0] = torch.where(usable[:, 0], score[:, 0] - 1e-3, score[:, 0])  # keep ties
        best = score.argmin(-1, keepdim=True)
        new_lane = torch.gather(cand, 1, best).squeeze(1)
        changed = new_lane != lane
        st.lane[:, 0] = new_lane
        st.s[:, 0] = torch.gather(s_c, 1, best).squeeze(1).clamp(min=0)
        st.offset[:, 0] = torch.gather(off, 1, best).squeeze(1)
        if bool(changed.any()):
            n1 = pool.route_next[net, new_lane]
            n1 = torch.where(n1 >= 0, n1, self._choose_next(net, new_lane))
            n2 = pool.route_next[net, n1.clamp(min=0)]
            n2 = torch.where(n2 >= 0, n2, self._choose_next(net, n1))
            n2 = torch.where(n1 >= 0, n2, -1)
            st.nxt[:, 0] = torch.where(
                changed.unsqueeze(-1), torch.stack([n1, n2], -1), st.nxt[:, 0]
            )
        # straddling: also occupy the neighbour on the side of the offset
        o = st.offset[:, 0]
        side = torch.where(o > 0, pool.left[net, new_lane], pool.right[net, new_lane])
        st.from_lane[:, 0] = torch.where(o.abs() > STRADDLE, side, -1)

    def ego_offroad(self) -> torch.Tensor:
        """``(n,)`` bool: the ego's centre is more than ``OFFROAD_MARGIN`` m beyond the
        edge of the lane it is on (its carriageway; the oncoming lanes count as off)."""
        st, pool = self.state, self.pool
        half = 0.5 * pool.width[self.net, st.lane[:, 0].clamp(min=0)]
        return st.offset[:, 0].abs() > half + OFFROAD_MARGIN

    def _despawn(self):
        st, pool = self.state, self.pool
        net2 = self.net[:, None].expand_as(st.lane)
        ln = pool.length[net2, st.lane.clamp(min=0)]
        at_exit = (st.nxt[..., 0] < 0) & (st.s >= ln - 0.5 * st.length)
        far = (st.x - st.x[:, :1]).pow(2) + (st.y - st.y[:, :1]).pow(2) > (self.window + 20) ** 2
        lost = st.offset.abs() > 4.0
        gone = st.valid & (at_exit | far | lost)
        gone[:, 0] = False
        st.valid = st.valid & ~gone

    def _target_count(self, idx):
        """Vehicles a scene should hold: density x lane length within the window."""
        pool = self.pool
        s_e = self.ego_route_s[idx].to(torch.float64)
        base = self.net[idx].to(torch.float64) * 1e6
        lo = torch.searchsorted(pool.spawn_key, base + s_e - self.window)
        hi = torch.searchsorted(pool.spawn_key, base + s_e + self.window)
        lane_km = (pool.spawn_cumlen[hi] - pool.spawn_cumlen[lo]) / 1000.0
        dens = self._param("density")[idx].to(torch.float64)
        return (dens * lane_km).round().long(), lo, hi

    def _local_indices(self, rows):
        """Lane indices of the scenes ``rows`` only (scene ids 0..k-1 in their order)."""
        st, pool = self.state, self.pool
        lanes, off = self._path(rows)
        occ, occ_s = self._occupancy(rows)
        valid = st.valid[rows].unsqueeze(-1)
        slots = torch.arange(self.V, device=self.device).expand(rows.numel(), self.V)
        occ_index = _LaneIndex(pool.L, occ, occ_s, slots.unsqueeze(-1).expand_as(occ))
        path_s = torch.cat([st.s[rows].unsqueeze(-1) - off, occ_s[..., 1:2]], -1)
        path_lanes = torch.cat([lanes, occ[..., 1:2]], -1)
        path_lanes = torch.where(valid, path_lanes, -1)
        owners = slots.unsqueeze(-1).expand_as(path_lanes)
        return occ_index, _LazyLaneIndex(pool.L, path_lanes, path_s, owners)

    def _spawn(self, idx, *, min_distance: float, indices=None, candidates: int = 1, counts=None):
        """Spawn attempts (``candidates`` spots each) in the scenes of ``idx`` (None: all)
        that lack vehicles; returns the slots of the new vehicles ``(n, candidates)`` (-1:
        none).

        ``indices``: the full-batch lane indices of the current state (the step's); else
        indices of just these scenes are built (resets: cheap for a few scenes).
        ``counts``: ``_target_count(idx)`` when the caller has it (the egos did not move).
        """
        st, pool = self.state, self.pool
        new_slot = torch.full((self.n, candidates), -1, dtype=torch.long, device=self.device)
        if idx is None:
            idx = torch.arange(self.n, device=self.device)
        target, lo, hi = self._target_count(idx) if counts is None else counts
        valid = st.valid[idx]
        free = (~valid).sum(1)
        want = (valid.sum(1) < torch.clamp(target + 1, max=self.V)) & (free > 0)
        want &= hi > lo
        if not bool(want.any()):
            return new_slot
        idx, lo, hi, free = idx[want], lo[want], hi[want], free[want]
        k, m = int(idx.numel()), int(candidates)
        g = self.generator
        u = torch.rand(k, m, generator=g, dtype=torch.float64).to(self.device)
        j = lo[:, None] + (u * (hi - lo).to(torch.float64)[:, None]).long()
        j = j.clamp(max=pool.spawn_lane.numel() - 1)
        lane, s = pool.spawn_lane[j], pool.spawn_s[j]  # k,m
        net = self.net[idx][:, None].expand(k, m)
        xy, tan = pool.point_at(net, lane, s)
        ex, ey = st.x[idx, :1], st.y[idx, :1]
        d_ego = torch.sqrt((xy[..., 0] - ex) ** 2 + (xy[..., 1] - ey) ** 2)
        ok = (d_ego >= min_distance) & (d_ego <= self.window)
        # clear of everyone (also across lanes meeting at junctions)
        dx = xy[..., 0:1] - st.x[idx].unsqueeze(1)
        dy = xy[..., 1:2] - st.y[idx].unsqueeze(1)
        ok &= ~((dx * dx + dy * dy < 7.0**2) & st.valid[idx].unsqueeze(1)).any(-1)
        # candidates of one scene do not see each other: keep them far apart
        for c in range(1, m):
            dd = (xy[:, :c] - xy[:, c : c + 1]).pow(2).sum(-1)
            ok[:, c] &= ~((dd < 40.0**2) & ok[:, :c]).any(1)
        length = CAR_LENGTH[0] + (CAR_LENGTH[1] - CAR_LENGTH[0]) * torch.rand(k, m, generator=g)
        width = CAR_WIDTH[0] + (CAR_WIDTH[1] - CAR_WIDTH[0]) * torch.rand(k, m, generator=g)
        factor = (1.0 + 0.1 * torch.randn(k, m, generator=g)).clamp(0.8, 1.2)
        length, width, factor = (t.to(self.device, self.dtype) for t in (length, width, factor))
        n1 = self._choose_next(net, lane)
        n2 = self._choose_next(net, n1)
        # every random number of the attempt is drawn: with no spot clear of the ego and
        # the others, nothing below can accept one (the same answer, far fewer operations)
        if not bool(ok.any()):
            return new_slot
        if indices is None:
            occ_index, path_index = self._local_indices(idx)
            scenes = torch.arange(k, device=self.device)
        else:
            occ_index, path_index = indices
            scenes = idx
        q_lanes = torch.stack([lane, n1, n2], -1)  # k,m,3
        q_off = self._path_offsets(net, q_lanes)
        # the leader ahead on the spot's path and the follower behind it
        rows = idx[:, None]
        d, who = occ_index.ahead(q_lanes, s.unsqueeze(-1) - q_off, scenes)
        d, p = d.min(-1)
        who = torch.gather(who, -1, p.unsqueeze(-1)).squeeze(-1)
        g_lead = torch.where(who >= 0, d - 0.5 * (length + st.length[rows, who.clamp(min=0)]), INF)
        par = lambda name: self._param2(name)[idx]  # noqa: E731
        T, s0 = par("time_headway"), par("min_gap")
        accept = ok & (g_lead > s0 + 1.0)
        if not bool(accept.any()):  # no room behind a leader: the speed checks cannot help
            return new_slot
        d, fol = path_index.behind(lane.unsqueeze(-1), s.unsqueeze(-1), scenes)
        d, fol = d.squeeze(-1), fol.squeeze(-1)
        g_fol = torch.where(fol >= 0, d - 0.5 * (length + st.length[rows, fol.clamp(min=0)]), INF)
        v_des = pool.speed_limit[net, lane] * factor * par("speed_factor")
        v_lead = torch.where(who >= 0, st.v[rows, who.clamp(min=0)], v_des)
        a_max, b_cmf = par("max_accel"), par("comfort_decel")
        # no faster than the leader, than the speed whose IDM equilibrium gap fits the gap
        # ahead, than the equilibrium speed of the scene's density (dense traffic starts
        # congested, so its cars fit), and slow enough to stop comfortably before the next
        # conflict zone or lane end on the path
        v = torch.minimum(v_des, v_lead)
        v = torch.minimum(v, ((g_lead - s0) / T).clamp(min=0))
        spacing = 1000.0 / par("density").clamp(min=1e-3) - sum(CAR_LENGTH) / 2
        d_stop = self._stop_distance(net, q_lanes, q_off, s) - 0.5 * length - 2.0
        v_stop = torch.sqrt(2 * b_cmf * d_stop.clamp(min=0))
        # the equilibrium speed matters only where it is below the other bounds: the
        # bisection stops once it is known to be above them for every candidate that can
        # still be accepted (min is exact: v is the same number either way)
        v_eq = _idm_equilibrium_speed(
            spacing, v_des, s0, T, settled=(torch.minimum(v, v_stop), accept)
        )
        v = torch.minimum(v, v_eq)
        v = torch.minimum(v, v_stop)
        v_fol = torch.where(fol >= 0, st.v[rows, fol.clamp(min=0)], 0.0)
        # the follower must not need to brake harder than comfortably: its IDM
        # deceleration with the new car ahead >= -b, and room to stop behind it at b
        fol_c = fol.clamp(min=0)
        v0_fol = (
            pool.speed_limit[net, st.lane[rows, fol_c].clamp(min=0)]
            * st.v_factor[rows, fol_c]
            * par("speed_factor")
        )
        gap_f = (g_fol - 1.0).clamp(min=0.1)
        s_star = s0 + (v_fol * T + v_fol * (v_fol - v) / (2 * torch.sqrt(a_max * b_cmf))).clamp(
            min=0
        )
        a_fol = a_max * (1 - (v_fol / v0_fol.clamp(min=0.1)).pow(4) - (s_star / gap_f).pow(2))
        stop = s0 + (v_fol.pow(2) - v.pow(2)).clamp(min=0) / (2 * b_cmf)
        fol_ok = (fol < 0) | ((a_fol >= -b_cmf) & (g_fol > stop + 1.0))
        accept &= fol_ok
        # the r-th accepted candidate of a scene takes its r-th free slot
        rank = accept.long().cumsum(1) - 1
        accept &= rank < free.unsqueeze(-1)
        if not bool(accept.any()):
            return new_slot
        free_order = torch.sort(st.valid[idx].to(torch.int8), dim=1, stable=True).indices
        r, c = torch.nonzero(accept, as_tuple=True)
        scene, slot = idx[r], free_order[r, rank[r, c]]
        vals = dict(
            x=xy[r, c, 0], y=xy[r, c, 1], theta=torch.atan2(tan[r, c, 1], tan[r, c, 0]),
            v=v[r, c], accel=torch.zeros_like(v[r, c]), kappa=torch.zeros_like(v[r, c]),
            length=length[r, c], width=width[r, c], v_factor=factor[r, c], s=s[r, c],
            offset=torch.zeros_like(v[r, c]),
        )  # fmt: skip
        for name, val in vals.items():
            getattr(st, name)[scene, slot] = val.to(self.dtype)
        st.lane[scene, slot] = lane[r, c]
        st.nxt[scene, slot] = torch.stack([n1[r, c], n2[r, c]], -1)
        st.from_lane[scene, slot] = -1
        st.cooldown[scene, slot] = LANE_CHANGE_COOLDOWN
        st.valid[scene, slot] = True
        st.uid[scene, slot] = self._next_uid + torch.arange(scene.numel(), device=self.device)
        self._next_uid += int(scene.numel())
        new_slot[scene, c] = slot
        return new_slot

    def _stop_distance(self, net, q_lanes, q_off, s):
        """Distance from arc length ``s`` along paths ``q_lanes`` ``(..., 3)`` to the first
        conflict zone or ending lane on them ``(...)`` (INF: none)."""
        pool = self.pool
        netq = net.unsqueeze(-1).expand_as(q_lanes)
        lanes_c = q_lanes.clamp(min=0)
        d = torch.full_like(s, INF)
        if pool.C:
            conf = pool.lane_conflicts[netq, lanes_c]  # ...,3,C
            side = pool.lane_conflict_side[netq, lanes_c]
            z = pool.zone_in[netq.unsqueeze(-1), conf.clamp(min=0), side]
            dz = q_off.unsqueeze(-1) + z - s[..., None, None]
            ok = (conf >= 0) & (q_lanes >= 0).unsqueeze(-1) & (dz > -1.0)
            d = torch.minimum(d, torch.where(ok, dz, INF).amin((-1, -2)))
        ends = (q_lanes >= 0) & (pool.end[netq, lanes_c] == END_LANE_END)
        d_end = q_off + pool.length[netq, lanes_c] - s.unsqueeze(-1)
        return torch.minimum(d, torch.where(ends, d_end, INF).amin(-1))

    def _update_route_progress(self, idx, *, search: bool = False):
        """The ego's arc length along the route polyline (windowed projection)."""
        pool, st = self.pool, self.state
        if idx is None:  # every scene: slices (the same values as an index of all rows)
            idx = slice(None)
            net = self.net
        else:
            net = self.net[idx]
        M = pool.route_points.shape[1]
        first = self._route_idx[idx]
        if search:
            # from scratch: the nearest route point overall (reset)
            rp = pool.route_points[net]
            d = (rp[..., 0] - st.x[idx, :1]) ** 2 + (rp[..., 1] - st.y[idx, :1]) ** 2
            j = d.argmin(1)
        else:
            k = self.__dict__.get("_route_window")
            if k is None:
                k = self._route_window = torch.arange(-3, 30, device=self.device)
            cand = (first[:, None] + k).clamp(0, M - 1)
            rp = pool.route_points[net[:, None], cand]
            d = (rp[..., 0] - st.x[idx, :1]) ** 2 + (rp[..., 1] - st.y[idx, :1]) ** 2
            j = torch.gather(cand, 1, d.argmin(1, keepdim=True)).squeeze(1)
        self._route_idx[idx] = j
        # refine on the segment after/before the nearest point
        j0 = j.clamp(max=M - 2)
        p0 = pool.route_points[net, j0]
        p1 = pool.route_points[net, j0 + 1]
        seg = p1 - p0
        rel = torch.stack([st.x[idx, 0], st.y[idx, 0]], -1) - p0
        u = ((rel * seg).sum(-1) / (seg * seg).sum(-1).clamp(min=1e-9)).clamp(-1.0, 1.0)
        s0 = pool.route_s[net, j0]
        s1 = pool.route_s[net, j0 + 1]
        self.ego_route_s[idx] = (s0 + u * (s1 - s0)).to(self.dtype)

    # ------------------------------------------------------------------ outputs
    def agents(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(agents (n, V, 7) [x, y, speed, cos, sin, length, width], valid (n, V))``."""
        st = self.state
        feats = torch.stack(
            [st.x, st.y, st.v, torch.cos(st.theta), torch.sin(st.theta), st.length, st.width], -1
        )
        return feats, st.valid.clone()

    @property
    def route_length(self) -> torch.Tensor:
        """The route length of each scene's network ``(n,)`` [m]."""
        return self.pool.route_length[self.net]

    def __repr__(self) -> str:
        return (
            f"Traffic(n={self.n}, max_vehicles={self.V}, networks={self.pool.N}, "
            f"ego={self.ego_mode!r}, device={self.device})"
        )


_SCENE_CODES: dict = {}


class _LazyLaneIndex:
    """A :class:`_LaneIndex` built on its first query (its inputs are new tensors that
    nothing changes in place, so it is the index it would have been when made)."""

    def __init__(self, *args):
        self._args, self._index = args, None

    def _get(self) -> _LaneIndex:
        if self._index is None:
            self._index = _LaneIndex(*self._args)
        return self._index

    def ahead(self, lanes, s, scenes=None):
        return self._get().ahead(lanes, s, scenes)

    def behind(self, lanes, s, scenes=None):
        return self._get().behind(lanes, s, scenes)


class _LaneIndex:
    """Entries ``(scene, lane, s, owner)`` sorted by one float64 key, for the nearest entry
    ahead of or behind a query on the same lane of the same scene, in ``O(log E)``
    (``searchsorted``) instead of comparing all pairs of vehicles."""

    SPAN = 2048.0  # key = (scene * L + lane) * SPAN + s + OFFSET: s in (-OFFSET, SPAN - OFFSET)
    OFFSET = 1024.0

    def __init__(self, num_lanes: int, lanes, s, owner):
        self.B = lanes.shape[0]
        self.L = num_lanes
        self.device = lanes.device
        code = self._scene_codes(lanes.dim()) + lanes
        key = code.to(torch.float64) * self.SPAN + (s.to(torch.float64) + self.OFFSET)
        real = lanes >= 0
        key = torch.where(real, key, math.inf)
        self.keys, order = key.flatten().sort()
        self.codes = torch.where(real, code, -1).flatten()[order]
        self.s = s.flatten()[order]
        self.owner = owner.flatten()[order]
        self.size = int(self.keys.numel())

    def _scene_codes(self, dim: int) -> torch.Tensor:
        """``scene * L`` of every scene ``(B, 1, ...)`` with ``dim`` dimensions (cached)."""
        key = (self.B, self.L, dim, self.device)
        out = _SCENE_CODES.get(key)
        if out is None:
            if len(_SCENE_CODES) >= 64:  # a few batch sizes per process; never grows much
                _SCENE_CODES.clear()
            scene = torch.arange(self.B, device=self.device)
            out = _SCENE_CODES[key] = (scene * self.L).reshape((self.B,) + (1,) * (dim - 1))
        return out

    def _query(self, lanes, s, ahead: bool, scenes=None):
        if scenes is None:
            code = self._scene_codes(lanes.dim()) + lanes
        else:
            scene = scenes.reshape((-1,) + (1,) * (lanes.dim() - 1))
            code = scene * self.L + lanes
        key = code.to(torch.float64) * self.SPAN + (s.to(torch.float64) + self.OFFSET)
        pos = torch.searchsorted(self.keys, key.flatten(), right=ahead).reshape(key.shape)
        # searchsorted gives 0..size: ahead, only the end can lie outside; behind, the start
        if ahead:
            ok = pos < self.size
        else:
            pos = pos - 1
            ok = pos >= 0
        pos = pos.clamp(0, max(self.size - 1, 0))
        ok &= (self.codes[pos] == code) & (lanes >= 0)
        dist = self.s[pos] - s if ahead else s - self.s[pos]
        dist = torch.where(ok, dist, INF)
        who = torch.where(ok, self.owner[pos], -1)
        return dist, who

    def ahead(self, lanes, s, scenes=None):
        """Distance to and owner of the nearest entry with a larger ``s`` on each query's
        lane; query row ``r`` belongs to scene ``scenes[r]`` (default ``r``)."""
        return self._query(lanes, s, True, scenes)

    def behind(self, lanes, s, scenes=None):
        """Distance to and owner of the nearest entry with a smaller ``s`` on the lane."""
        return self._query(lanes, s, False, scenes)


def _polyline_distance(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Distance from each point of ``p`` (n, 2) to the polyline ``q`` (m, 2)."""
    a, b = q[:-1], q[1:]
    ab = b - a
    t = ((p[:, None] - a[None]) * ab[None]).sum(-1) / np.maximum((ab * ab).sum(-1), 1e-12)
    foot = a[None] + np.clip(t, 0.0, 1.0)[..., None] * ab[None]
    return np.linalg.norm(p[:, None] - foot, axis=-1).min(1)


def _zone_around(dist: np.ndarray, s: np.ndarray, s_point: float) -> tuple[float, float]:
    """The arc-length interval around ``s_point`` where ``dist < ZONE_WIDTH``."""
    i = int(np.clip(np.searchsorted(s, s_point), 0, len(s) - 1))
    close = dist < ZONE_WIDTH
    if not close[i]:
        return max(s_point - 1.0, 0.0), min(s_point + 1.0, s[-1])
    lo = i
    while lo > 0 and close[lo - 1]:
        lo -= 1
    hi = i
    while hi < len(s) - 1 and close[hi + 1]:
        hi += 1
    return float(s[lo]), float(s[hi])


def _conflict_zones(road) -> tuple[np.ndarray, np.ndarray]:
    """``(zone_in, zone_out)`` (K, 2): where each conflict's lanes are closer than
    ``ZONE_WIDTH`` around the conflict point, on each lane (a crossing: a few metres; a
    merge: from where the lanes converge to their end)."""
    K = len(road.conflict_lanes)
    zin, zout = np.zeros((K, 2)), np.zeros((K, 2))
    for k, (la, lb) in enumerate(road.conflict_lanes):
        for side, (x, y) in enumerate(((la, lb), (lb, la))):
            p = road.points[x, : road.num_points[x]]
            q = road.points[y, : road.num_points[y]]
            s = np.linspace(0.0, road.length[x], len(p))
            zin[k, side], zout[k, side] = _zone_around(
                _polyline_distance(p, q), s, road.conflict_s[k, side]
            )
    return zin, zout


def _shadows(road) -> tuple[np.ndarray, np.ndarray]:
    """For every lane, up to 3 siblings (lanes forking from the same predecessor) and
    the arc length over which each stays closer than ``ZONE_WIDTH`` to it."""
    L = len(road.length)
    shadow = np.full((L, 3), -1, dtype=np.int64)
    length = np.zeros((L, 3))
    for lane in range(L):
        preds = road.pred[lane][road.pred[lane] >= 0]
        sibs = sorted({int(x) for p in preds for x in road.succ[p] if x >= 0 and x != lane})[:3]
        p = road.points[lane, : road.num_points[lane]]
        s = np.linspace(0.0, road.length[lane], len(p))
        for j, sib in enumerate(sibs):
            q = road.points[sib, : road.num_points[sib]]
            far = np.flatnonzero(_polyline_distance(p, q) >= ZONE_WIDTH)
            shadow[lane, j] = sib
            length[lane, j] = s[far[0]] if far.size else road.length[lane]
    return shadow, length


def bicycle_step(x, y, theta, v, accel, steer, length, dt: float = DT):
    """One step of the kinematic bicycle (centre of gravity midway between the axles,
    wheelbase ``0.6 length``), every argument a tensor of one shape.

    ``v' = max(v + a dt, 0)``, slip ``beta = atan(tan(steer) / 2)``, ``theta' = theta +
    v' sin(beta) / l_r dt`` (``l_r`` half the wheelbase), position advanced along
    ``theta' + beta``. Returns ``(x', y', theta', v', a_real, kappa)``: the acceleration
    actually applied (the speed does not go below 0) and the path curvature
    ``sin(beta) / l_r``. Traffic and VectorWorld's ego use this one function."""
    v_new = (v + accel * dt).clamp(min=0.0)
    a_real = (v_new - v) / dt
    lr = 0.3 * length
    beta = torch.atan(0.5 * torch.tan(steer))
    theta_new = theta + v_new / lr * torch.sin(beta) * dt
    heading = theta_new + beta
    x_new = x + v_new * torch.cos(heading) * dt
    y_new = y + v_new * torch.sin(heading) * dt
    return x_new, y_new, theta_new, v_new, a_real, torch.sin(beta) / lr


def _idm_equilibrium_speed(gap, v0, s0, T, iters: int = 30, *, settled=None):
    """The speed at which IDM keeps the bumper ``gap``: the root of ``(s0 + v T) /
    sqrt(1 - (v / v0)^4) = gap`` in ``[0, v0]`` (bisection; 0 where ``gap <= s0``).

    ``settled``: ``(bound, need)``, for a caller that takes ``minimum(bound, speed)`` and
    only where ``need``: the bisection's lower end never decreases, so once it reaches
    ``bound`` wherever ``need``, that minimum is ``bound`` there whatever the remaining
    iterations do; it stops and returns the lower end so far (elsewhere not the root)."""
    gap = torch.as_tensor(gap).expand_as(v0) if not torch.is_tensor(gap) else gap.expand_as(v0)
    lo, hi = torch.zeros_like(v0), v0.clone()
    v0 = v0.clamp(min=1e-6)
    # in place, into buffers made once: per iteration mid = 0.5 (lo + hi) and
    # s_e = (s0 + mid T) / sqrt(max(1 - (mid / v0)^4, 1e-9)), the same roundings as the
    # expressions (x + s0 = s0 + x and -x + 1 = 1 - x exactly), far less overhead
    mid, s_e, root = torch.empty_like(lo), torch.empty_like(lo), torch.empty_like(lo)
    too_fast = torch.empty_like(lo, dtype=torch.bool)
    for i in range(iters):
        torch.add(lo, hi, out=mid).mul_(0.5)
        torch.div(mid, v0, out=root).pow_(4).neg_().add_(1).clamp_(min=1e-9).sqrt_()
        torch.mul(mid, T, out=s_e).add_(s0).div_(root)
        torch.gt(s_e, gap, out=too_fast)
        torch.where(too_fast, mid, hi, out=hi)
        torch.where(too_fast, lo, mid, out=lo)
        if settled is not None and i in _SETTLED_CHECKS:
            bound, need = settled
            if not bool((need & ~(lo >= bound)).any()):
                break
    return lo


#: iterations of ``_idm_equilibrium_speed`` after which it checks ``settled``
_SETTLED_CHECKS = (1, 3, 6, 10)
