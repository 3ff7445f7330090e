r"""Motion-aware gated VAE: history-compatible initial agents for a tile's lanes.

Given one 64 m tile's lane pieces -- geometry only, as another model generates them:
``points`` (n, 20, 2) in the tile frame, ``width`` (n,), ``speed_limit`` (n,), ``kind``
(n,) over ``LANE_KINDS`` -- :meth:`MotionGatedVAE.sample` places the tile's other agents
(not the ego) with a 1 s motion history (11 frames at 10 Hz, ``AGENT_FEATURES``), on
lanes, without overlaps, and with histories that are kinematically consistent with the
current states by construction. Training data are the non-ego agents of a scene file's
tiles (:class:`TileAgents`, :func:`collate_tiles`, :func:`train_vae`);
:func:`scene_init_metrics` compares samples with held-out ground truth.

Model (one latent per agent; agents are conditionally independent given the lanes, and
rejection sampling enforces the joint constraints)
-----------------------------------------------------------------------------------------
- **Lane graph from geometry only** (:func:`lane_edges`, one rule for training and
  sampling, whatever edges a file stores): ``src`` is ``dst``'s *successor* when
  ``|end(dst) - start(src)| <= 0.5 m`` (the tiles' ``MIN_PIECE``), the reverse edge is a
  *predecessor* edge, and any other pair whose polylines come within 10 m (closest pair
  of their 20 points) are *neighbours* both ways. Edge attributes put the source in the
  destination's frame (its start, middle and end points relative to the destination's
  middle point and tangent, / 32 m; the relative heading as cos/sin; the gap / 10 m), so
  left/right, oncoming and crossing neighbours are told apart without more types.
- **Lane encoder**: node features (:func:`lane_features`: points / 32 m, width, speed
  limit, kind one-hot, length, whether each end lies on the tile's border) -> MLP -> 2
  layers of a typed message passing (:class:`TypedLaneConv`, a PyG ``MessagePassing``:
  the message from j to i is ``relu(W_r [h_j, h_i, e_ji])`` with its own weights per edge
  type r, mean-aggregated, residual update with LayerNorm).
- **Agent state in lane coordinates** (:func:`project_to_lanes`): each ground-truth agent
  is assigned the lane minimising ``distance + 5 (1 - cos psi)`` (psi = heading minus the
  lane tangent; the term keeps oncoming lanes away) and described by the arc-length
  fraction ``s`` along it, the signed lateral offset ``d`` (left +), ``psi``, speed and
  size. Decoding places an agent at arc length ``s`` plus ``d`` along the segment normal,
  heading = tangent + psi (:func:`place_on_lanes`; the exact inverse inside a segment).
- **Motion history as controls**: per step j -> j+1 the acceleration ``a_j = dv / dt``
  and curvature ``kappa_j = dtheta / (v_{j+1} dt)`` of the simulator's kinematic bicycle
  (centre of gravity midway between the axles, rear-axle distance ``l_r = 0.3 length``,
  slip ``beta = asin(kappa l_r)``; semi-implicit Euler: ``v' = v + a dt``, ``theta' =
  theta + v' kappa dt``, ``p' = p + v' dt (cos, sin)(theta' + beta)``). This reproduces
  the scene file's histories to ~0.1 mm after 1 s (without the slip: ~1 cm median, 0.4 m
  at the 99th percentile), so the representation is exact for the data.
- **Encoder with a motion gate**: ``mu = f_mu(c) + g h_mu(m)``, ``log sigma^2 = f_v(c) +
  g h_v(m)`` with c the current state (tile and lane coordinates, speed, size, the
  assigned lane's embedding and a distance-biased attention over the tile's lanes), m
  the 10 past frames, flattened (positions and headings relative to the current pose,
  speeds, the controls of each step, validity flags; invalid frames are zeros; the
  current frame is in c), ``h(m) = tanh(MLP(m)) - tanh(MLP(0))`` and the gate ``g =
  sigmoid(MLP(c, n_past / 10))`` per agent. Two choices make the gate mean what it
  says: ``h(0) = 0``, so a history without past frames contributes exactly nothing
  (else ``g(c) h(0)`` is extra capacity and the gate stays open everywhere), and a
  bounded h, so the gate's scale cannot be traded against h's. A cost ``gate_cost *
  softplus(logit) = -gate_cost log(1 - g)`` (0.1 nat per unit; its gradient in the logit
  does not vanish as g -> 1) closes the gate where the history does not pay for itself:
  with only the current frame valid (12 % of the file's agents: tiles at an episode's
  start) the model relies on the current state. An MLP over the fixed 10 frames instead
  of a GRU: the window is short and fixed, and the MLP is several times cheaper on one
  core. ``z = mu + sigma eps``, eps from the global torch RNG (so a resumed run is
  bit-for-bit the same); KL to N(0, I).
- **Decoder** from z, autoregressive over the agent's attributes in the order ``lane ->
  s -> speed -> lateral offset -> heading offset -> size and controls``, each step
  conditioned on the previous ones (teacher-forced in training): a POINTER over the
  tile's lanes (dot product of an MLP of [z, tile context] with the lane embeddings);
  ``s`` as a histogram density over 16 equal bins of the lane (uniform inside a bin);
  the speed over 40 bins of 1 m/s; ``d / (0.98 w/2)`` and ``psi / 0.6 rad`` over 24 bins
  of the warped coordinate ``u = sign(x) sqrt(|x|)`` (bins of 0.7 % of the half width
  next to the centre line, 16 % at the edge; ``|d| < 0.98 w/2``: on the lane by
  construction); then the length, width and the 10 controls ``a = 8 tanh(.)`` m/s^2,
  ``kappa = 0.25 tanh(.)`` 1/m (within the bicycle limits the metrics check, 10.4 and
  0.3), Gaussian with one learned sigma per output type. Every step after ``s`` sees the
  position features at ``s`` and a distance-biased attention over the tile's lanes from
  there. Categorical steps are sampled at generation time: positions, speeds and the
  bimodal lane-change offsets (a car leaving its lane and one arriving have the same
  ``|d|`` and opposite ``psi``) keep their spread and modes even where the latent is
  uninformative, and later steps stay consistent with the drawn values. Gaussian steps
  are decoded at their mean (noise on controls would be per-frame jitter, not motion),
  except the vehicle size, independent of motion, which is drawn with its sigma
  (clamped to length [2, 12] m, width [1, 3] m). Control steps whose frames are not
  both valid are masked out of the loss.
- **History by backward integration** (:func:`integrate_history`): from the current state
  the decoded controls are applied backwards through the same bicycle step (``v_{j} =
  max(v_{j+1} - a_j dt, 0)``, the effective acceleration is what is kept), so every
  history satisfies the bicycle exactly, ``|p_T - p_{T-1}| = v_T dt``, ``|a| <= 8`` and
  the measured curvature equals ``|kappa| <= 0.25``: 0 infeasible steps by construction.
  Sampled agents always carry the full 11 valid frames (the world needs a history to
  start from; the data's short histories are an artefact of episode starts).
- **Count**: a Poisson count head on the pooled lane context and the total lane length,
  trained zero-truncated (the dataset skips tiles without other agents);
  ``sample(lanes, None)`` draws n from it, :meth:`MotionGatedVAE.expected_count` gives
  its mean. The world normally passes n.
- **Rejection** (:meth:`MotionGatedVAE.sample`): candidates are decoded in batches and
  accepted greedily in draw order; a candidate is rejected when its centre lies outside
  the tile's closed square, it is off the lanes (``metrics.offroad_distance > 0``), its
  box overlaps the ego's or an accepted agent's at the current frame (the separating
  axis test of ``metrics.boxes_overlap``), it violates a following gap (a box stretched
  forward by ``min_gap + headway * speed``, 1 m + 0.3 s by default, overlaps the other's box; the
  scene file has no such pair among 5,300 agents), or the two histories overlap at any
  frame. Each reason is counted. ``min_gap = headway = 0`` leaves plain overlap.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Mapping

import numpy as np
import torch
from torch import nn
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import scatter, to_dense_batch

from simsci.driving import HISTORY, LANE_KINDS, LANE_POINTS, MIN_PIECE, TILE_SIZE
from simsci.driving.metrics import AGENT_FEATURES

__all__ = [
    "DT",
    "EDGE_KINDS",
    "LANE_FEATURES",
    "LANE_RADIUS",
    "MAX_ACCEL",
    "MAX_CURVATURE",
    "MotionGatedVAE",
    "TileAgents",
    "TypedLaneConv",
    "check_lanes",
    "collate_tiles",
    "history_controls",
    "integrate_history",
    "lane_edges",
    "lane_features",
    "place_on_lanes",
    "project_to_lanes",
    "scene_init_metrics",
    "train_vae",
]

DT = 0.1
#: bounds of the decoded controls (inside the 10.4 m/s^2 and 0.3 1/m the metrics check)
MAX_ACCEL = 8.0
MAX_CURVATURE = 0.25
MAX_PSI = 0.6
#: the geometric lane-graph rule (see the module docstring)
SUCC_TOL = MIN_PIECE
LANE_RADIUS = 10.0
EDGE_KINDS = ("successor", "predecessor", "neighbour")
LANE_FEATURES = 2 * LANE_POINTS + 3 + len(LANE_KINDS) + 2
EDGE_FEATURES = 9
STATE_FEATURES = 17
POS_FEATURES = 7
HIST_FEATURES = 8
_NF = len(AGENT_FEATURES)
_X, _Y, _V, _C, _S, _L, _W = range(_NF)
_HALF = TILE_SIZE / 2
_SCALE = 32.0
_VSCALE = 30.0
_LEN0, _LENS = 4.7, 0.5
_WID0, _WIDS = 1.9, 0.2
_ASCALE, _KSCALE = 2.0, 0.02  # controls in the loss: a / 2 m/s^2, kappa / 0.02 1/m
_LR = 0.3  # rear-axle distance / length (CoG midway, wheelbase 0.6 length)
_STEPS = HISTORY - 1
_REASONS = ("outside", "offroad", "ego", "overlap", "gap", "history")
_TERMS = ("lane", "s", "speed", "lateral", "heading", "size", "history")


# ------------------------------------------------------------------ input checks
def _np(value, name: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    try:
        arr = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - report any unconvertible input the same way
        raise TypeError(f"{name} must be an array, got {type(value).__name__}") from exc
    if arr.dtype == object:
        raise TypeError(f"{name} must be a numeric array, got dtype object")
    return arr


def check_lanes(lanes: Mapping) -> dict:
    """Validate a tile's lanes and return them as float64 / int64 numpy arrays.

    ``lanes``: a dict with ``points`` (n, 20, 2) in the tile frame, ``width`` (n,) > 0,
    ``speed_limit`` (n,) >= 0 and ``kind`` (n,) integers in [0, len(LANE_KINDS)); other
    keys (a file's ``edge_index``, ``node``) are ignored. n >= 1; everything finite."""
    if not isinstance(lanes, Mapping):
        raise TypeError(
            f"lanes must be a dict with points, width, speed_limit and kind, got "
            f"{type(lanes).__name__}"
        )
    missing = [k for k in ("points", "width", "speed_limit", "kind") if k not in lanes]
    if missing:
        raise ValueError(
            f"lanes lacks {missing}; a tile's lanes need points (n, {LANE_POINTS}, 2), "
            "width (n,), speed_limit (n,) and kind (n,)"
        )
    pts = _np(lanes["points"], "lanes['points']")
    if pts.ndim != 3 or pts.shape[1:] != (LANE_POINTS, 2):
        raise ValueError(f"lanes['points'] must have shape (n, {LANE_POINTS}, 2), got {pts.shape}")
    n = pts.shape[0]
    if n == 0:
        raise ValueError(
            "a tile needs at least one lane (the agents are placed on lanes), got 0 lanes"
        )
    out = {"points": pts.astype(np.float64)}
    for key in ("width", "speed_limit", "kind"):
        arr = _np(lanes[key], f"lanes[{key!r}]")
        if arr.shape != (n,):
            raise ValueError(
                f"lanes[{key!r}] must have shape ({n},) (one per lane), got {arr.shape}"
            )
        out[key] = arr
    for key in ("points", "width", "speed_limit"):
        arr = out[key].astype(np.float64)
        if not np.isfinite(arr).all():
            raise ValueError(f"lanes[{key!r}] has NaN or inf; lanes must be finite")
        out[key] = arr
    if (out["width"] <= 0).any():
        raise ValueError(f"lane widths must be > 0, got min {out['width'].min()}")
    if (out["speed_limit"] < 0).any():
        raise ValueError(f"speed limits must be >= 0, got min {out['speed_limit'].min()}")
    kind = out["kind"]
    if kind.dtype.kind not in "iu" and not (
        kind.dtype.kind == "f" and np.isfinite(kind).all() and (kind == np.round(kind)).all()
    ):
        raise ValueError(
            f"lanes['kind'] must hold integers (indices into LANE_KINDS), got {kind.dtype}"
        )
    kind = kind.astype(np.int64)
    if ((kind < 0) | (kind >= len(LANE_KINDS))).any():
        raise ValueError(
            f"lanes['kind'] must be in [0, {len(LANE_KINDS)}) (LANE_KINDS = {LANE_KINDS}), "
            f"got values in [{kind.min()}, {kind.max()}]"
        )
    out["kind"] = kind
    return out


# ------------------------------------------------------------------ lane geometry
def _warp(x):
    """u = sign(x) sqrt(|x|) on [-1, 1] (fine bins near 0); torch."""
    return torch.sign(x) * torch.sqrt(x.abs().clamp(0, 1))


def _unwarp(u):
    return torch.sign(u) * u * u


def _arc(points: np.ndarray):
    """Segment vectors (n, P-1, 2), lengths (n, P-1) and cumulative arc length (n, P)."""
    seg = np.diff(points, axis=-2)
    sl = np.linalg.norm(seg, axis=-1)
    cum = np.concatenate([np.zeros(sl.shape[:-1] + (1,)), np.cumsum(sl, -1)], -1)
    return seg, sl, cum


def _wrap(a):
    return (a + np.pi) % (2 * np.pi) - np.pi


def lane_features(points, width, speed_limit, kind) -> np.ndarray:
    """Node features (n, :data:`LANE_FEATURES`) float32: points / 32 (40), width / 4,
    speed limit / 30, length / 64, one-hot kind (4), start and end on the tile border
    (within 0.5 m of |coordinate| = 32)."""
    pts = np.asarray(points, np.float64)
    n = pts.shape[0]
    _, _, cum = _arc(pts)
    onehot = np.zeros((n, len(LANE_KINDS)))
    onehot[np.arange(n), np.asarray(kind, np.int64)] = 1.0
    border = lambda p: (np.abs(p).max(-1) >= _HALF - MIN_PIECE).astype(np.float64)  # noqa: E731
    feats = np.concatenate(
        [
            pts.reshape(n, -1) / _SCALE,
            np.asarray(width, np.float64)[:, None] / 4.0,
            np.asarray(speed_limit, np.float64)[:, None] / _VSCALE,
            cum[:, -1:] / TILE_SIZE,
            onehot,
            border(pts[:, 0])[:, None],
            border(pts[:, -1])[:, None],
        ],
        -1,
    )
    return feats.astype(np.float32)


def _mid_frame(pts: np.ndarray):
    """Middle point (n, 2) and unit tangent (n, 2) of each polyline (points P/2-1 -> P/2)."""
    i = LANE_POINTS // 2
    mid = (pts[:, i - 1] + pts[:, i]) / 2
    t = pts[:, i] - pts[:, i - 1]
    norm = np.linalg.norm(t, axis=-1, keepdims=True)
    t = np.where(norm > 1e-9, t / np.where(norm > 1e-9, norm, 1.0), np.array([1.0, 0.0]))
    return mid, t


def lane_edges(points) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The geometric lane graph of one tile (the rule of the module docstring).

    ``points`` (n, 20, 2). Returns ``edge_index`` int64 (2, E) (row 0 the source, row 1
    the destination: messages flow source -> destination), ``edge_type`` int64 (E,) into
    :data:`EDGE_KINDS` (the source is the destination's successor / predecessor /
    neighbour) and ``edge_attr`` float32 (E, 9), sorted by (type, destination, source)."""
    pts = np.asarray(points, np.float64)
    n = pts.shape[0]
    if n == 0:
        return (
            np.zeros((2, 0), np.int64),
            np.zeros(0, np.int64),
            np.zeros((0, EDGE_FEATURES), np.float32),
        )
    eye = np.eye(n, dtype=bool)
    # succ[i, j]: lane j continues lane i (i's end meets j's start)
    succ = (np.linalg.norm(pts[:, None, -1] - pts[None, :, 0], axis=-1) <= SUCC_TOL) & ~eye
    gap = np.linalg.norm(pts[:, None, :, None] - pts[None, :, None, :], axis=-1).min((-1, -2))
    near = (gap <= LANE_RADIUS) & ~eye & ~succ & ~succ.T
    # (dst, src, type): the successor j of i sends to i; the predecessor i of j sends to j
    di, sj = np.nonzero(succ)
    parts = [
        np.stack([sj, di, np.zeros_like(di)]),
        np.stack([di, sj, np.ones_like(di)]),
    ]
    a, b = np.nonzero(near)
    parts.append(np.stack([b, a, np.full_like(a, 2)]))
    src, dst, typ = np.concatenate(parts, 1)
    order = np.lexsort((src, dst, typ))
    src, dst, typ = src[order], dst[order], typ[order]
    mid, tan = _mid_frame(pts)
    nrm = np.stack([-tan[:, 1], tan[:, 0]], -1)

    def rel(p):  # source points in the destination's middle frame
        q = p - mid[dst]
        return np.stack([(q * tan[dst]).sum(-1), (q * nrm[dst]).sum(-1)], -1) / _SCALE

    cos_rel = (tan[src] * tan[dst]).sum(-1)
    sin_rel = tan[dst][:, 0] * tan[src][:, 1] - tan[dst][:, 1] * tan[src][:, 0]
    attr = np.concatenate(
        [
            rel(pts[src, 0]),
            rel(mid[src]),
            rel(pts[src, -1]),
            cos_rel[:, None],
            sin_rel[:, None],
            gap[src, dst][:, None] / LANE_RADIUS,
        ],
        -1,
    )
    return np.stack([src, dst]).astype(np.int64), typ.astype(np.int64), attr.astype(np.float32)


def project_to_lanes(xy, heading, points, width) -> dict:
    """Assign agents to lanes and express them in lane coordinates (numpy, float64).

    ``xy`` (m, 2), ``heading`` (m,) rad, ``points`` (n, P, 2), ``width`` (n,). For every
    agent and lane: the nearest point on the polyline (exact point-segment distance),
    the arc length there, the signed normal offset d (left of the travel direction +)
    and psi = heading - segment tangent, wrapped. The agent's lane minimises ``dist + 5
    (1 - cos psi)``. Returns ``lane`` (m,), ``s`` (m,) arc-length fraction in [0, 1],
    ``d`` (m,) m, ``psi`` (m,) rad, ``dist`` (m,) centre-to-polyline distance of that lane
    and ``offroad`` (m,) ``min over lanes (dist - width / 2)`` (> 0: off the lanes)."""
    xy = np.asarray(xy, np.float64).reshape(-1, 2)
    heading = np.asarray(heading, np.float64).reshape(-1)
    pts = np.asarray(points, np.float64)
    w = np.asarray(width, np.float64)
    m, n = xy.shape[0], pts.shape[0]
    if m == 0:
        z = np.zeros(0)
        return {"lane": np.zeros(0, np.int64), "s": z, "d": z, "psi": z, "dist": z, "offroad": z}
    seg, sl, cum = _arc(pts)
    a = pts[:, :-1]
    l2 = sl**2
    q = xy[:, None, None, :] - a[None]  # (m, n, S, 2)
    t = np.clip((q * seg[None]).sum(-1) / np.where(l2 > 0, l2, 1.0)[None], 0.0, 1.0)
    r = q - t[..., None] * seg[None]
    dist = np.linalg.norm(r, axis=-1)  # (m, n, S)
    k = dist.argmin(-1)  # (m, n)
    mi, ni = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    dl = dist[mi, ni, k]
    tk = t[mi, ni, k]
    s_abs = cum[ni, k] + tk * sl[ni, k]
    length = cum[:, -1]
    sv = seg[ni, k]
    slen = np.where(sl[ni, k] > 0, sl[ni, k], 1.0)
    tx, ty = sv[..., 0] / slen, sv[..., 1] / slen
    rv = r[mi, ni, k]
    d = tx * rv[..., 1] - ty * rv[..., 0]
    psi = _wrap(heading[:, None] - np.arctan2(ty, tx))
    cost = dl + 5.0 * (1.0 - np.cos(psi))
    lane = cost.argmin(-1)
    ar = np.arange(m)
    s_frac = np.clip(s_abs[ar, lane] / np.where(length[lane] > 0, length[lane], 1.0), 0.0, 1.0)
    return {
        "lane": lane.astype(np.int64),
        "s": s_frac,
        "d": d[ar, lane],
        "psi": psi[ar, lane],
        "dist": dl[ar, lane],
        "offroad": (dl - w[None] / 2).min(-1),
    }


def _at_arc(points: torch.Tensor, s_frac: torch.Tensor):
    """Point, unit tangent, arc length and lane length at arc fraction s of polylines.

    ``points`` (K, P, 2), ``s_frac`` (K,) -> pos (K, 2), tangent (K, 2), s (K,), length (K,).
    The segment is the one holding arc length ``s * length`` (torch, any dtype)."""
    seg = points[:, 1:] - points[:, :-1]
    sl = torch.linalg.vector_norm(seg, dim=-1)
    cum = torch.cat([torch.zeros_like(sl[:, :1]), torch.cumsum(sl, -1)], -1)
    length = cum[:, -1]
    s = s_frac * length
    k = torch.searchsorted(cum.contiguous(), s[:, None].contiguous(), right=True)[:, 0] - 1
    k = k.clamp(0, seg.shape[1] - 1)
    ar = torch.arange(points.shape[0], device=points.device)
    slk = sl[ar, k]
    safe = torch.where(slk > 0, slk, torch.ones_like(slk))
    t = ((s - cum[ar, k]) / safe).clamp(0, 1)
    pos = points[ar, k] + t[:, None] * seg[ar, k]
    tan = seg[ar, k] / safe[:, None]
    tan = torch.where(
        (slk > 0)[:, None], tan, torch.tensor([1.0, 0.0], dtype=tan.dtype, device=tan.device)
    )
    return pos, tan, s, length


def place_on_lanes(points, s_frac, d, psi):
    """Positions and headings of agents in lane coordinates (the inverse of
    :func:`project_to_lanes` inside a segment): ``points`` (K, P, 2) each agent's lane,
    ``s_frac``, ``d``, ``psi`` (K,). Returns xy (K, 2) = point at arc ``s_frac * length``
    + d * normal, and heading (K,) = tangent angle + psi. torch in, torch out."""
    pos, tan, _, _ = _at_arc(points, s_frac)
    nrm = torch.stack([-tan[:, 1], tan[:, 0]], -1)
    xy = pos + d[:, None] * nrm
    heading = torch.atan2(tan[:, 1], tan[:, 0]) + psi
    return xy, heading


def _pos_features(points: torch.Tensor, s_frac: torch.Tensor):
    """(K, 7) [s, x / 32, y / 32, tangent (2), (length - s) / 64, s / 64] and the point."""
    pos, tan, s, length = _at_arc(points, s_frac)
    f = torch.cat(
        [
            s_frac[:, None],
            pos / _SCALE,
            tan,
            ((length - s) / TILE_SIZE)[:, None],
            (s / TILE_SIZE)[:, None],
        ],
        -1,
    )
    return f, pos


# ------------------------------------------------------------------ kinematics
def integrate_history(current, controls, *, dt: float = DT):
    r"""Integrate the kinematic bicycle BACKWARDS from the current state.

    ``current`` (..., 7) AGENT_FEATURES at the last frame; ``controls`` (..., H-1, 2) with
    ``[a_j, kappa_j]`` of step j -> j+1 (j = 0 is the oldest step). Inverts the forward
    step ``v' = v + a dt``, ``theta' = theta + v' kappa dt``, ``p' = p + v' dt
    (cos, sin)(theta' + beta)``, ``beta = asin(kappa 0.3 length)`` exactly; speeds are
    clamped at 0 going back (``v_j = max(v_{j+1} - a_j dt, 0)``). Returns the history
    (..., H, 7) (the last frame is ``current`` itself) and the
    effective controls (..., H-1, 2) (the clamped accelerations). Torch in, torch out."""
    if not isinstance(current, torch.Tensor) or not isinstance(controls, torch.Tensor):
        raise TypeError("integrate_history takes torch tensors (current, controls)")
    if current.shape[-1:] != (_NF,) or controls.ndim != current.ndim + 1 or controls.shape[-1] != 2:
        raise ValueError(
            f"current must be (..., {_NF}) and controls (..., H-1, 2) with the same leading axes, "
            f"got {tuple(current.shape)} and {tuple(controls.shape)}"
        )
    if controls.shape[:-2] != current.shape[:-1]:
        raise ValueError(
            f"controls' leading axes {tuple(controls.shape[:-2])} must match current's "
            f"{tuple(current.shape[:-1])}"
        )
    controls = controls.to(current.dtype)
    x, y, v = current[..., _X], current[..., _Y], current[..., _V]
    th = torch.atan2(current[..., _S], current[..., _C])
    length, width = current[..., _L], current[..., _W]
    frames = [current]
    eff = []
    for j in reversed(range(controls.shape[-2])):
        a, k = controls[..., j, 0], controls[..., j, 1]
        beta = torch.asin((k * _LR * length).clamp(-1, 1))
        x = x - v * dt * torch.cos(th + beta)
        y = y - v * dt * torch.sin(th + beta)
        th_prev = th - v * k * dt
        v_prev = (v - a * dt).clamp_min(0)
        eff.append(torch.stack([(v - v_prev) / dt, k], -1))
        th, v = th_prev, v_prev
        frames.append(torch.stack([x, y, v, torch.cos(th), torch.sin(th), length, width], -1))
    return torch.stack(frames[::-1], -2), torch.stack(eff[::-1], -2)


def history_controls(history, valid=None, *, dt: float = DT, min_distance: float = 1e-3):
    """Per-step controls of histories (numpy, float64): ``history`` (..., H, 7), ``valid``
    (..., H) -> ``controls`` (..., H-1, 2) ``[a, kappa]`` with ``a = dv / dt`` and ``kappa =
    dtheta / (v_{j+1} dt)`` (0 when ``v_{j+1} dt < min_distance``), and ``valid`` (..., H-1)
    (both frames valid). Invalid steps are 0. The inverse of :func:`integrate_history`."""
    h = np.asarray(history, np.float64)
    if valid is None:
        valid = np.ones(h.shape[:-1], bool)
    valid = np.asarray(valid, bool)
    h = np.where(valid[..., None], h, 0.0)
    th = np.arctan2(h[..., _S], h[..., _C])
    v = h[..., _V]
    a = np.diff(v, axis=-1) / dt
    dth = _wrap(np.diff(th, axis=-1))
    ds = v[..., 1:] * dt
    k = np.where(ds >= min_distance, dth / np.where(ds >= min_distance, ds, 1.0), 0.0)
    sv = valid[..., 1:] & valid[..., :-1]
    ctrl = np.where(sv[..., None], np.stack([a, k], -1), 0.0)
    return ctrl, sv


# ------------------------------------------------------------------ dataset
def _tile_record(lanes_k: Mapping, agents_k, valid_k, hvalid_k) -> dict | None:
    """Everything one training tile needs, precomputed (numpy). None if no other agent."""
    lanes = check_lanes(lanes_k)
    valid_k = np.asarray(valid_k, bool)
    idx = np.nonzero(valid_k)[0]
    idx = idx[idx > 0]
    if idx.size == 0:
        return None
    hist = np.asarray(agents_k, np.float64)[idx]  # (m, H, 7)
    hv = np.asarray(hvalid_k, bool)[idx].copy()
    hv[:, -1] = True
    cur = hist[:, -1]
    if not np.isfinite(cur).all():
        raise ValueError("an agent valid at the tile's time has NaN or inf features")
    heading = np.arctan2(cur[:, _S], cur[:, _C])
    pr = project_to_lanes(cur[:, :2], heading, lanes["points"], lanes["width"])
    ctrl, cv = history_controls(hist, hv)
    ctrl[..., 0] = np.clip(ctrl[..., 0], -MAX_ACCEL, MAX_ACCEL)
    ctrl[..., 1] = np.clip(ctrl[..., 1], -MAX_CURVATURE, MAX_CURVATURE)
    # history features in the current pose's frame
    c, s = np.cos(heading)[:, None], np.sin(heading)[:, None]
    hh = np.where(hv[..., None], hist, 0.0)
    dx, dy = hh[..., _X] - cur[:, None, _X], hh[..., _Y] - cur[:, None, _Y]
    th = np.arctan2(hh[..., _S], hh[..., _C]) - heading[:, None]
    ctrl_f = np.concatenate([ctrl, np.zeros((len(idx), 1, 2))], 1)  # step j -> j+1 at frame j
    hf = np.stack(
        [
            (c * dx + s * dy) / 10.0,
            (-s * dx + c * dy) / 10.0,
            np.cos(th),
            np.sin(th),
            hh[..., _V] / _VSCALE,
            ctrl_f[..., 0] / _ASCALE,
            ctrl_f[..., 1] / _KSCALE,
            hv.astype(np.float64),
        ],
        -1,
    )
    hf = np.where(hv[..., None], hf, 0.0)[:, :-1]  # the current frame is in the state
    w_lane = lanes["width"][pr["lane"]]
    edge_index, edge_type, edge_attr = lane_edges(lanes["points"])
    return {
        "lane_x": lane_features(
            lanes["points"], lanes["width"], lanes["speed_limit"], lanes["kind"]
        ),
        "lane_points": lanes["points"].astype(np.float32),
        "lane_width": lanes["width"].astype(np.float32),
        "edge_index": edge_index,
        "edge_type": edge_type,
        "edge_attr": edge_attr,
        "cur": cur.astype(np.float32),
        "lane": pr["lane"],
        "s": pr["s"].astype(np.float32),
        "d": np.clip(pr["d"] / (w_lane / 2), -1.0, 1.0).astype(np.float32),
        "psi": pr["psi"].astype(np.float32),
        "hist": hf.reshape(len(idx), -1).astype(np.float32),
        "n_valid": hv.sum(1).astype(np.float32),
        "ctrl": ctrl.astype(np.float32),
        "ctrl_valid": cv,
    }


def _episodes(source, episodes):
    """Yield (episode id, episode dict) from a path / opened file or a list of dicts."""
    if isinstance(source, (list, tuple)):
        ids = range(len(source)) if episodes is None else episodes
        for i in ids:
            yield int(i), source[int(i)]
        return
    from simsci import data as sdata
    from simsci.driving import read_scene

    own = isinstance(source, (str, os.PathLike))
    ds = sdata.open(source) if own else source
    try:
        n = len(ds)
        ids = range(n) if episodes is None else [int(i) for i in episodes]
        bad = [i for i in ids if not 0 <= i < n]
        if bad:
            raise ValueError(f"episodes {bad[:5]} out of range: the file has {n} (0..{n - 1})")
        for i in ids:
            yield i, read_scene(ds, i)
    finally:
        if own:
            ds.close()


class TileAgents(torch.utils.data.Dataset):
    """The tiles of a scene file (or of a list of :func:`read_scene` episode dicts) with
    at least one non-ego agent, precomputed once in memory, as a torch Dataset.

    ``source``: a scene file path, an opened ``simsci.data`` file, or a list of episode
    dicts; ``episodes``: the episode ids to use (default all). Each item is a dict of
    numpy arrays (lane features, points, widths, geometric edges, and per agent its lane,
    s, d / (w/2), psi, current state, flattened history features, controls) plus
    ``episode`` and ``step``; ``skipped`` counts tiles without other agents. Batch with
    :func:`collate_tiles`. Items cost a dict lookup."""

    def __init__(self, source, episodes: Iterable[int] | None = None):
        self.items: list[dict] = []
        self.skipped = 0
        for i, ep in _episodes(source, episodes):
            agents, valid, hvalid = ep["agents"], ep["agents_valid"], ep["agents_history_valid"]
            for k, lanes_k in enumerate(ep["lanes"]):
                rec = _tile_record(lanes_k, agents[k], valid[k], hvalid[k])
                if rec is None:
                    self.skipped += 1
                    continue
                rec["episode"], rec["step"] = i, k
                self.items.append(rec)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, idx: int) -> dict:
        return self.items[idx]


def collate_tiles(batch) -> dict:
    """Concatenate :class:`TileAgents` items into one batch of torch tensors.

    Lanes of all tiles are stacked (``lane_x`` (N, F), ``lane_points`` (N, 20, 2),
    ``lane_width`` (N,), ``lane_tile`` (N,)), edges offset to the stacked ids
    (``edge_index`` (2, E), ``edge_type``, ``edge_attr``); agents are stacked (``agent_tile``
    (M,), ``lane`` local lane index in its tile, ``lane_global`` (M,), ``s``, ``d``, ``psi``,
    ``cur`` (M, 7), ``hist`` (M, 80), ``n_valid``, ``ctrl`` (M, 10, 2), ``ctrl_valid``), and
    ``count`` (B,) other agents per tile."""
    if not isinstance(batch, (list, tuple)) or not batch:
        raise ValueError("collate_tiles takes a non-empty list of TileAgents items")
    lane_off = np.cumsum([0] + [len(b["lane_x"]) for b in batch])
    out = {
        "lane_x": np.concatenate([b["lane_x"] for b in batch]),
        "lane_points": np.concatenate([b["lane_points"] for b in batch]),
        "lane_width": np.concatenate([b["lane_width"] for b in batch]),
        "lane_tile": np.concatenate([np.full(len(b["lane_x"]), i) for i, b in enumerate(batch)]),
        "edge_index": np.concatenate(
            [b["edge_index"] + lane_off[i] for i, b in enumerate(batch)], 1
        ),
        "edge_type": np.concatenate([b["edge_type"] for b in batch]),
        "edge_attr": np.concatenate([b["edge_attr"] for b in batch]),
        "agent_tile": np.concatenate([np.full(len(b["lane"]), i) for i, b in enumerate(batch)]),
        "lane_global": np.concatenate([b["lane"] + lane_off[i] for i, b in enumerate(batch)]),
        "count": np.array([len(b["lane"]) for b in batch], np.float32),
    }
    for key in ("lane", "s", "d", "psi", "cur", "hist", "n_valid", "ctrl", "ctrl_valid"):
        out[key] = np.concatenate([b[key] for b in batch])
    res = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in out.items()}
    for k in ("lane_tile", "edge_index", "edge_type", "agent_tile", "lane_global", "lane"):
        res[k] = res[k].long()
    return res


# ------------------------------------------------------------------ network parts
def _mlp(d_in: int, hidden: int, d_out: int, layers: int = 2) -> nn.Sequential:
    mods: list[nn.Module] = []
    d = d_in
    for _ in range(layers - 1):
        mods += [nn.Linear(d, hidden), nn.SiLU()]
        d = hidden
    mods.append(nn.Linear(d, d_out))
    return nn.Sequential(*mods)


class TypedLaneConv(MessagePassing):
    r"""Typed message passing over the lane graph: ``m_{j->i} = relu(W_{r(j,i)}
    [h_j, h_i, e_{ji}] + b_r)`` with one weight matrix per edge type r, mean over the
    incoming edges, ``h_i' = LayerNorm(h_i + MLP([h_i, mean_j m_{j->i}]))``."""

    def __init__(
        self, hidden: int, edge_dim: int = EDGE_FEATURES, num_types: int = len(EDGE_KINDS)
    ):
        super().__init__(aggr="mean")
        self.hidden, self.num_types = hidden, num_types
        self.msg = nn.Linear(2 * hidden + edge_dim, num_types * hidden)
        self.upd = _mlp(2 * hidden, hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, h, edge_index, edge_type, edge_attr):
        agg = self.propagate(edge_index, h=h, edge_type=edge_type, edge_attr=edge_attr)
        return self.norm(h + self.upd(torch.cat([h, agg], -1)))

    def message(self, h_j, h_i, edge_type, edge_attr):
        m = self.msg(torch.cat([h_j, h_i, edge_attr], -1)).view(-1, self.num_types, self.hidden)
        return torch.relu(m[torch.arange(m.shape[0], device=m.device), edge_type])


class _LaneAttention(nn.Module):
    """Single-head attention of a query over its tile's lanes, biased by distance:
    ``logit_l = q . k_l / sqrt(H) - softplus(gamma) dist_l / 10`` (dist = distance from the
    query's position to lane l's nearest point)."""

    def __init__(self, d_query: int, hidden: int):
        super().__init__()
        self.q = nn.Linear(d_query, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.gamma = nn.Parameter(torch.tensor(1.0))
        self.hidden = hidden

    def forward(self, query, pos, emb, pts, mask):
        """query (K, Dq), pos (K, 2), emb (K, Lmax, H), pts (K, Lmax, P, 2), mask (K, Lmax)."""
        dist = torch.linalg.vector_norm(pts - pos[:, None, None, :].to(pts.dtype), dim=-1).amin(-1)
        logit = (self.k(emb) @ self.q(query)[:, :, None])[..., 0] / math.sqrt(self.hidden)
        logit = logit - nn.functional.softplus(self.gamma) * dist.to(logit.dtype) / 10.0
        logit = logit.masked_fill(~mask, float("-inf"))
        att = torch.softmax(logit, -1)
        return (att[..., None] * self.v(emb)).sum(1)


# ------------------------------------------------------------------ the model
class MotionGatedVAE(nn.Module):
    """Motion-aware gated VAE for history-compatible initial agents (module docstring).

    Args: ``hidden`` width H, ``latent`` z dimension, ``gnn_layers`` typed lane message
    passing layers, ``s_bins`` / ``v_bins`` / ``lat_bins`` histogram bins of the arc
    position, the speed (``v_max`` m/s: the last bin's upper end) and of the lateral and
    heading offsets (in the warped coordinate ``u = sign(x) sqrt(|x| / x_max)``, fine
    bins near the lane centre), ``beta`` KL weight, ``count_weight`` weight of the count
    head's loss, ``gate_cost`` weight of the gate's cost ``-log(1 - g)`` per agent (the
    gate opens only where the history pays for it; 0 leaves it unregularised).
    """

    def __init__(
        self,
        hidden: int = 64,
        latent: int = 16,
        gnn_layers: int = 2,
        s_bins: int = 16,
        v_bins: int = 40,
        lat_bins: int = 24,
        v_max: float = 40.0,
        beta: float = 1.0,
        count_weight: float = 1.0,
        gate_cost: float = 0.1,
    ):
        super().__init__()
        for name, value, low in (
            ("hidden", hidden, 1),
            ("latent", latent, 1),
            ("gnn_layers", gnn_layers, 0),
            ("s_bins", s_bins, 1),
            ("v_bins", v_bins, 1),
            ("lat_bins", lat_bins, 2),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        for name, value in (
            ("v_max", v_max),
            ("beta", beta),
            ("count_weight", count_weight),
            ("gate_cost", gate_cost),
        ):
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (math.isfinite(value) and value >= 0)
            ):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if v_max <= 0:
            raise ValueError(f"v_max must be > 0, got {v_max}")
        self.init_args = {
            "hidden": hidden,
            "latent": latent,
            "gnn_layers": gnn_layers,
            "s_bins": s_bins,
            "v_bins": v_bins,
            "lat_bins": lat_bins,
            "v_max": float(v_max),
            "beta": float(beta),
            "count_weight": float(count_weight),
            "gate_cost": float(gate_cost),
        }
        H, Z = hidden, latent
        self.hidden, self.latent = H, Z
        self.s_bins, self.v_bins, self.lat_bins = s_bins, v_bins, lat_bins
        self.v_max = float(v_max)
        self.beta, self.count_weight, self.gate_cost = (
            float(beta),
            float(count_weight),
            float(gate_cost),
        )
        # lanes
        self.lane_in = _mlp(LANE_FEATURES, H, H)
        self.convs = nn.ModuleList(TypedLaneConv(H) for _ in range(gnn_layers))
        self.tile_ctx = _mlp(H + 1, H, H)
        self.count_head = _mlp(H, H, 1)
        # encoder
        d_state = STATE_FEATURES + 2 * H
        self.enc_att = _LaneAttention(STATE_FEATURES + H, H)
        self.enc_state = _mlp(d_state, H, 2 * Z)
        self.enc_hist = _mlp(_STEPS * HIST_FEATURES, H, 2 * Z)
        self.enc_gate = _mlp(d_state + 1, H, 1)
        # decoder: lane -> s -> speed -> lateral -> heading -> size and controls
        self.ptr_q = _mlp(Z + H, H, H)
        self.ptr_k = nn.Linear(H, H)
        self.s_head = _mlp(Z + 2 * H, H, s_bins)
        self.dec_att = _LaneAttention(Z + H + POS_FEATURES, H)
        d_pos = Z + 2 * H + POS_FEATURES + H
        self.v_head = _mlp(d_pos, H, v_bins)
        self.d_head = _mlp(d_pos + 1, H, lat_bins)
        self.psi_head = _mlp(d_pos + 2, H, lat_bins)
        self.rest_head = _mlp(d_pos + 3, H, 2 + 2 * _STEPS)
        # learned log sigma of the Gaussian outputs: length, width, accel, curvature
        self.log_sigma = nn.Parameter(torch.full((4,), -1.0))

    # ---------------------------------------------------------------- lanes
    def _encode_lanes(
        self, lane_x, edge_index, edge_type, edge_attr, lane_tile, lane_points, n_tiles
    ):
        h = self.lane_in(lane_x)
        for conv in self.convs:
            h = conv(h, edge_index, edge_type, edge_attr)
        pooled = scatter(h, lane_tile, 0, dim_size=n_tiles, reduce="mean")
        seg = torch.linalg.vector_norm(lane_points[:, 1:] - lane_points[:, :-1], dim=-1).sum(-1)
        total = scatter(seg, lane_tile, 0, dim_size=n_tiles, reduce="sum")
        ctx = self.tile_ctx(torch.cat([pooled, (total / 256.0)[:, None].to(h.dtype)], -1))
        dense, mask = to_dense_batch(h, lane_tile, batch_size=n_tiles)
        pts, _ = to_dense_batch(lane_points, lane_tile, batch_size=n_tiles)
        return {"emb": h, "ctx": ctx, "dense": dense, "mask": mask, "pts": pts, "total": total}

    def _count_rate(self, lanes) -> torch.Tensor:
        """Poisson rate (B,) of other agents per tile."""
        return nn.functional.softplus(self.count_head(lanes["ctx"])[:, 0]) * (
            1.0 + lanes["total"].to(lanes["ctx"].dtype) / 100.0
        )

    # ---------------------------------------------------------------- the decoder chain
    def _pointer_logits(self, z, ctx, dense, mask):
        q = self.ptr_q(torch.cat([z, ctx], -1))
        logit = (self.ptr_k(dense) @ q[:, :, None])[..., 0] / math.sqrt(self.hidden)
        return logit.masked_fill(~mask, float("-inf"))

    def _chain(self, z, ctx, dense, mask, pts, lane_points, emb, given=None, draw=None):
        """Decode lane, s, speed, lateral and heading offsets, size and controls from z.

        Training (``given``: targets ``lane`` (index in the tile), ``lane_global`` (row
        of ``lane_points`` / ``emb``), ``s``, ``speed``, ``lateral`` (d / (0.98 w/2)),
        ``heading`` (psi / MAX_PSI)): every step is conditioned on the target (teacher
        forcing) and the per-agent NLL terms ``nll_<step>`` are returned. Sampling
        (``draw``: ``pick(logits) -> index``, ``rand(n) -> U(0, 1)``): each categorical
        is drawn, a value drawn uniformly inside its bin, and fed to the next step.
        Returns the values ``lane``, ``glob``, ``s``, ``speed``, ``lateral``, ``heading``,
        the Gaussian means ``size`` (normalised) and ``ctrl`` (a / 2, kappa / 0.02)."""
        out = {}
        dt = z.dtype
        ptr = self._pointer_logits(z, ctx, dense, mask)
        if given is not None:
            lane, glob = given["lane"], given["lane_global"]
            out["nll_lane"] = -torch.log_softmax(ptr, -1).gather(1, lane[:, None])[:, 0]
        else:
            lane = glob = draw["pick"](ptr)
        e_sel, lane_pts = emb[glob], lane_points[glob]

        def step(name, logits, n_bins, lo, hi, warp):
            """Histogram density over n_bins equal bins of u in [lo, hi] (u = warp(x))."""
            width = (hi - lo) / n_bins
            if given is not None:
                x = given[name]
                u = _warp(x) if warp else x
                b = ((u - lo) / width).long().clamp(0, n_bins - 1)
                lp = torch.log_softmax(logits, -1).gather(1, b[:, None])[:, 0]
                out[f"nll_{name}"] = -lp + math.log(width)
                return x
            b = draw["pick"](logits)
            u = (lo + (b.double() + draw["rand"](b.shape[0])) * width).clamp(lo, hi)
            return _unwarp(u) if warp else u

        s = step("s", self.s_head(torch.cat([z, e_sel, ctx], -1)), self.s_bins, 0.0, 1.0, False)
        pf, pos = _pos_features(lane_pts, s.to(lane_pts.dtype))
        pf = pf.to(dt)
        att = self.dec_att(torch.cat([z, e_sel, pf], -1), pos, dense, pts, mask)
        x_in = torch.cat([z, e_sel, ctx, pf, att], -1)
        v = step("speed", self.v_head(x_in), self.v_bins, 0.0, self.v_max, False)
        x_in = torch.cat([x_in, (v / _VSCALE).to(dt)[:, None]], -1)
        d = step("lateral", self.d_head(x_in), self.lat_bins, -1.0, 1.0, True)
        x_in = torch.cat([x_in, d.to(dt)[:, None]], -1)
        psi = step("heading", self.psi_head(x_in), self.lat_bins, -1.0, 1.0, True)
        x_in = torch.cat([x_in, psi.to(dt)[:, None]], -1)
        raw = self.rest_head(x_in)
        ctrl = raw[:, 2:].view(-1, _STEPS, 2)
        a = (MAX_ACCEL / _ASCALE) * torch.tanh(ctrl[..., 0])
        k = (MAX_CURVATURE / _KSCALE) * torch.tanh(ctrl[..., 1])
        out.update(
            lane=lane,
            glob=glob,
            s=s,
            speed=v,
            lateral=d,
            heading=psi,
            size=raw[:, :2],
            ctrl=torch.stack([a, k], -1),
        )
        return out

    # ---------------------------------------------------------------- training
    def _state_features(self, cur, s, d, psi, pf):
        return torch.cat(
            [
                cur[:, :2] / _SCALE,
                cur[:, _C : _S + 1],
                cur[:, _V : _V + 1] / _VSCALE,
                ((cur[:, _L] - _LEN0) / _LENS)[:, None],
                ((cur[:, _W] - _WID0) / _WIDS)[:, None],
                s[:, None],
                d[:, None],
                psi[:, None],
                pf,
            ],
            -1,
        )

    def forward(self, batch: Mapping) -> dict:
        """Per-agent negative ELBO terms (nats) for a :func:`collate_tiles` batch, and
        the gate (M,)."""
        n_tiles = batch["count"].shape[0]
        lanes = self._encode_lanes(
            batch["lane_x"],
            batch["edge_index"],
            batch["edge_type"],
            batch["edge_attr"],
            batch["lane_tile"],
            batch["lane_points"],
            n_tiles,
        )
        tile = batch["agent_tile"]
        dense, mask, pts = lanes["dense"][tile], lanes["mask"][tile], lanes["pts"][tile]
        ctx = lanes["ctx"][tile]
        e_sel = lanes["emb"][batch["lane_global"]]
        lane_pts = batch["lane_points"][batch["lane_global"]]
        s, cur = batch["s"], batch["cur"]
        d = (batch["d"] / 0.98).clamp(-1, 1)
        psi = (batch["psi"] / MAX_PSI).clamp(-1, 1)
        # encoder
        pf, pos = _pos_features(lane_pts, s)
        st = self._state_features(cur, s, d, psi, pf)
        att = self.enc_att(torch.cat([st, e_sel], -1), pos, dense, pts, mask)
        c = torch.cat([st, e_sel, att], -1)
        past = ((batch["n_valid"] - 1) / _STEPS)[:, None]  # 0: no past frame
        gate_logit = self.enc_gate(torch.cat([c, past], -1))
        gate = torch.sigmoid(gate_logit)
        hist = batch["hist"]
        # h(m) - h(empty): a history with only the current frame adds exactly nothing
        h = torch.tanh(self.enc_hist(hist)) - torch.tanh(self.enc_hist(torch.zeros_like(hist[:1])))
        mu_lv = self.enc_state(c) + gate * h
        mu, logvar = mu_lv[:, : self.latent], mu_lv[:, self.latent :].clamp(-10.0, 6.0)
        z = mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)
        kl = 0.5 * (mu**2 + logvar.exp() - 1.0 - logvar).sum(-1)
        # decoder (teacher forcing)
        given = {
            "lane": batch["lane"],
            "lane_global": batch["lane_global"],
            "s": s,
            "speed": cur[:, _V],
            "lateral": d,
            "heading": psi,
        }
        dec = self._chain(z, ctx, dense, mask, pts, batch["lane_points"], lanes["emb"], given=given)
        ls = self.log_sigma
        half_log_2pi = 0.5 * math.log(2 * math.pi)

        def gnll(x, mean, log_sig):
            return 0.5 * ((x - mean) * torch.exp(-log_sig)) ** 2 + log_sig + half_log_2pi

        tgt_size = torch.stack([(cur[:, _L] - _LEN0) / _LENS, (cur[:, _W] - _WID0) / _WIDS], -1)
        nll_size = gnll(tgt_size, dec["size"], ls[0:2]).sum(-1)
        tgt_ctrl = torch.stack(
            [batch["ctrl"][..., 0] / _ASCALE, batch["ctrl"][..., 1] / _KSCALE], -1
        )
        cv = batch["ctrl_valid"].to(z.dtype)
        nll_ctrl = (gnll(tgt_ctrl, dec["ctrl"], ls[2:4]).sum(-1) * cv).sum(-1)
        # count (zero-truncated Poisson: every training tile has >= 1 other agent)
        lam = self._count_rate(lanes)
        n = batch["count"].to(lam.dtype)
        count_nll = lam - n * torch.log(lam) + torch.lgamma(n + 1) + torch.log(-torch.expm1(-lam))
        out = {key: dec[key] for key in dec if key.startswith("nll_")}
        out.update(kl=kl, nll_size=nll_size, nll_history=nll_ctrl, count_nll=count_nll)
        out["gate"] = gate[:, 0]
        out["gate_cost"] = nn.functional.softplus(gate_logit[:, 0])  # -log(1 - g)
        return out

    def _losses(self, batch) -> dict:
        t = self(batch)
        recon = sum(t[f"nll_{k}"] for k in _TERMS)
        elbo = (recon + t["kl"]).mean()
        loss = (
            recon + self.beta * t["kl"] + self.gate_cost * t["gate_cost"]
        ).mean() + self.count_weight * t["count_nll"].mean()
        out = {"loss": loss, "neg_elbo": elbo.detach()}
        for key in ("kl", "count_nll", "gate") + tuple(f"nll_{k}" for k in _TERMS):
            out[key] = t[key].mean().detach()
        return out

    def training_step(self, batch) -> dict:
        """``loss`` = mean over agents of (reconstruction NLL + beta KL - gate_cost log(1 - g))
        + count_weight * count NLL per tile; also ``neg_elbo`` (the negative ELBO per
        agent, beta = 1, without count and gate terms) and each term, in nats per agent
        (histogram terms as densities of s, speed in m/s, and the warped offsets)."""
        return self._losses(batch)

    def validation_step(self, batch) -> dict:
        out = self._losses(batch)
        out["loss"] = out["loss"].detach()
        return out

    # ---------------------------------------------------------------- sampling
    def _lanes_single(self, lanes: dict) -> dict:
        dev, dt = self._device_dtype()
        ei, et, ea = lane_edges(lanes["points"])
        pts64 = torch.as_tensor(lanes["points"], dtype=torch.float64, device=dev)
        enc = self._encode_lanes(
            torch.as_tensor(
                lane_features(**{k: lanes[k] for k in ("points", "width", "speed_limit", "kind")}),
                dtype=dt,
                device=dev,
            ),
            torch.as_tensor(ei, device=dev),
            torch.as_tensor(et, device=dev),
            torch.as_tensor(ea, dtype=dt, device=dev),
            torch.zeros(len(pts64), dtype=torch.long, device=dev),
            pts64.to(dt),
            1,
        )
        enc["pts64"] = pts64
        enc["width"] = torch.as_tensor(lanes["width"], dtype=torch.float64, device=dev)
        return enc

    def _device_dtype(self):
        p = next(self.parameters())
        return p.device, p.dtype

    def expected_count(self, lanes: Mapping) -> float:
        """Mean number of other agents the count head expects on a tile with these lanes."""
        with torch.no_grad():
            return float(self._count_rate(self._lanes_single(check_lanes(lanes)))[0])

    def _decode(self, enc: dict, n: int, generator) -> tuple[torch.Tensor, dict]:
        """Decode n candidates from z ~ N(0, I): histories (n, 11, 7) float64 and parts."""
        dev, dt = self._device_dtype()
        gdev = generator.device if generator is not None else torch.device("cpu")

        def rand(m):
            return torch.rand(m, generator=generator, device=gdev, dtype=torch.float64).to(dev)

        def pick(logits):
            p = torch.softmax(logits.double(), -1).to(gdev)
            return torch.multinomial(p, 1, generator=generator)[:, 0].to(dev)

        z = torch.randn(n, self.latent, generator=generator, device=gdev, dtype=torch.float64)
        z = z.to(dev, dt)
        dec = self._chain(
            z,
            enc["ctx"].expand(n, -1),
            enc["dense"].expand(n, -1, -1),
            enc["mask"].expand(n, -1),
            enc["pts"].expand(n, -1, -1, -1),
            enc["pts64"],
            enc["emb"],
            draw={"pick": pick, "rand": rand},
        )
        lane = dec["lane"]
        sig = torch.exp(self.log_sigma.detach().double())
        eps = torch.randn(n, 2, generator=generator, device=gdev, dtype=torch.float64).to(dev)
        size = dec["size"].double() + sig[0:2] * eps
        length = (_LEN0 + _LENS * size[:, 0]).clamp(2.0, 12.0)
        width = (_WID0 + _WIDS * size[:, 1]).clamp(1.0, 3.0)
        d = 0.98 * dec["lateral"].double() * enc["width"][lane] / 2
        psi = dec["heading"].double() * MAX_PSI
        v = dec["speed"].double()
        xy, heading = place_on_lanes(enc["pts64"][lane], dec["s"].double(), d, psi)
        cur = torch.stack(
            [xy[:, 0], xy[:, 1], v, torch.cos(heading), torch.sin(heading), length, width], -1
        )
        m_ctrl = dec["ctrl"].double()
        ctrl = torch.stack([m_ctrl[..., 0] * _ASCALE, m_ctrl[..., 1] * _KSCALE], -1)
        hist, eff = integrate_history(cur, ctrl)
        return hist, {"lane": lane, "s": dec["s"], "d": d, "psi": psi, "controls": eff}

    @torch.no_grad()
    def sample(
        self,
        lanes: Mapping,
        n_agents: int | None = None,
        *,
        ego=None,
        generator: torch.Generator | None = None,
        max_tries: int = 20,
        min_gap: float = 1.0,
        headway: float = 0.3,
        reject: bool = True,
    ):
        """Sample the other agents of a tile with their 1 s histories.

        ``lanes``: see :func:`check_lanes` (file edges, if any, are ignored). ``n_agents``:
        how many (None: drawn from the count head). ``ego`` (7,) the ego's current state
        (no agent may overlap it) or None. ``generator``: a torch.Generator for every
        draw. ``max_tries``: candidates decoded per requested agent at most. ``min_gap``
        (m) and ``headway`` (s): the following gap of the rejection rule. ``reject=False``
        returns the first n decoded candidates unchecked (the raw decoder).

        Returns ``agents`` (m, 11, 7) float64 in the tile frame (m <= n; m < n only when
        ``max_tries`` ran out, see ``stats['shortfall']``), ``history_valid`` (m, 11) bool
        (all True) and ``stats``: ``requested``, ``placed``, ``shortfall``, ``drawn``
        (decoded candidates, the unused ones of the last round included), ``rejected``
        and ``rejected_<reason>`` for the reasons outside, offroad, ego (overlap or gap
        with the ego's box; the ego has no history here), overlap, gap, history (module
        docstring). Candidates are decoded in rounds of ``max(8, 2 * missing)``."""
        lanes = check_lanes(lanes)
        if n_agents is not None and (
            isinstance(n_agents, bool)
            or not isinstance(n_agents, (int, np.integer))
            or n_agents < 0
        ):
            raise ValueError(f"n_agents must be an integer >= 0 or None, got {n_agents!r}")
        if isinstance(max_tries, bool) or not isinstance(max_tries, int) or max_tries < 1:
            raise ValueError(f"max_tries must be an integer >= 1, got {max_tries!r}")
        for name, value in (("min_gap", min_gap), ("headway", headway)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        ego_arr = None
        if ego is not None:
            ego_arr = _np(ego, "ego").astype(np.float64)
            if ego_arr.shape != (_NF,):
                raise ValueError(
                    f"ego must have shape ({_NF},) (AGENT_FEATURES {AGENT_FEATURES}), "
                    f"got {ego_arr.shape}"
                )
            if not np.isfinite(ego_arr).all():
                raise ValueError("ego has NaN or inf; pass the ego's current state or None")
            if ego_arr[_L] < 0 or ego_arr[_W] < 0:
                raise ValueError("ego's length and width must be >= 0")
        was_training = self.training
        if was_training:
            self.eval()
        try:
            enc = self._lanes_single(lanes)
            if n_agents is None:
                lam = (
                    self._count_rate(enc)
                    .double()
                    .to(generator.device if generator is not None else "cpu")
                )
                n_agents = int(torch.poisson(lam, generator=generator)[0])
            n = int(n_agents)
            stats = {
                "requested": n,
                "drawn": 0,
                "rejected": 0,
                **{f"rejected_{r}": 0 for r in _REASONS},
            }
            accepted = np.zeros((0, HISTORY, _NF))
            budget = n * max_tries
            while len(accepted) < n and stats["drawn"] < budget:
                need = n - len(accepted)
                c = need if not reject else min(budget - stats["drawn"], max(8, 2 * need))
                hist, _ = self._decode(enc, c, generator)
                cand = hist.cpu().numpy()
                stats["drawn"] += c
                if not reject:
                    accepted = cand[:need]
                    break
                accepted = self._accept(
                    cand, accepted, need, lanes, ego_arr, min_gap, headway, stats
                )
        finally:
            if was_training:
                self.train()
        stats["placed"] = len(accepted)
        stats["shortfall"] = n - len(accepted)
        return accepted, np.ones(accepted.shape[:2], bool), stats

    @staticmethod
    def _accept(cand, accepted, need, lanes, ego, min_gap, headway, stats):
        """Greedy acceptance of candidate histories (c, H, 7) after the accepted ones."""
        from simsci.driving.metrics import offroad_distance

        cur = cand[:, -1]
        reason = np.full(len(cand), -1)
        outside = (np.abs(cur[:, :2]) > _HALF).any(-1)
        reason[outside] = 0
        off = offroad_distance(cur, None, lanes["points"], lanes["width"]) > 0
        reason[(reason < 0) & off] = 1
        if ego is not None:
            hit = _overlap(cur, ego[None]) | _overlap(_stretch(cur, min_gap, headway), ego[None])
            hit |= _overlap(cur, _stretch(ego[None], min_gap, headway))
            reason[(reason < 0) & hit] = 2
        allx = np.concatenate([accepted, cand])  # (K, H, 7)
        now = allx[:, -1]
        ov = _overlap(now[:, None], now[None])
        ext = _stretch(now, min_gap, headway)
        gap = _overlap(ext[:, None], now[None])
        gap = gap | gap.T
        hov = _overlap(allx[:, None], allx[None]).any(-1)
        keep = list(range(len(accepted)))
        na = len(accepted)
        for i in range(len(cand)):
            if len(keep) - na >= need:
                break
            if reason[i] < 0 and keep:
                j = na + i
                if ov[j, keep].any():
                    reason[i] = 3
                elif gap[j, keep].any():
                    reason[i] = 4
                elif hov[j, keep].any():
                    reason[i] = 5
            if reason[i] < 0:
                keep.append(na + i)
            else:
                stats[f"rejected_{_REASONS[reason[i]]}"] += 1
                stats["rejected"] += 1
        return allx[keep]


def _overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``metrics.boxes_overlap`` of numpy boxes in their own dtype (numpy input would be
    promoted to float64, which changes the test's rounding tolerance), numpy out."""
    from simsci.driving.metrics import boxes_overlap

    return boxes_overlap(torch.from_numpy(np.asarray(a)), torch.from_numpy(np.asarray(b))).numpy()


def _stretch(boxes: np.ndarray, min_gap: float, headway: float) -> np.ndarray:
    """Boxes (..., 7) lengthened forward by ``min_gap + headway * speed`` (rear kept)."""
    g = min_gap + headway * np.maximum(boxes[..., _V], 0.0)
    out = boxes.copy()
    norm = np.hypot(boxes[..., _C], boxes[..., _S])
    norm = np.where(norm > 0, norm, 1.0)
    out[..., _L] = boxes[..., _L] + g
    out[..., _X] = boxes[..., _X] + boxes[..., _C] / norm * g / 2
    out[..., _Y] = boxes[..., _Y] + boxes[..., _S] / norm * g / 2
    return out


# ------------------------------------------------------------------ training and evaluation
def _split(n: int, holdout: float) -> tuple[list[int], list[int]]:
    if not (isinstance(holdout, (int, float)) and 0 < holdout < 1):
        raise ValueError(f"holdout must be a fraction in (0, 1), got {holdout!r}")
    n_val = max(1, int(round(holdout * n)))
    if n_val >= n:
        raise ValueError(f"holdout={holdout} of {n} episodes leaves none to train on")
    return list(range(n - n_val)), list(range(n - n_val, n))


def train_vae(
    path,
    out_dir,
    *,
    steps: int = 20000,
    batch_size: int = 32,
    lr: float = 1e-3,
    seed: int = 0,
    holdout: float = 0.1,
    val_every: int = 2000,
    model_args: Mapping | None = None,
    grad_clip: float | None = 1.0,
    device: str = "auto",
    progress: bool = False,
    resume=False,
) -> dict:
    """Train a :class:`MotionGatedVAE` on a scene file with :class:`simsci.train.Trainer`.

    The last ``holdout`` fraction of the episodes is the validation set (never trained
    on). Cosine lr decay over ``steps`` optimisation steps of ``batch_size`` tiles; the
    model is built after ``torch.manual_seed(seed)``. Checkpoints go to
    ``out_dir/checkpoints/{last,best}.pt`` (best by ``val_neg_elbo``). Returns the
    Trainer's summary plus ``train_episodes``, ``val_episodes``, ``train_tiles``,
    ``val_tiles`` and ``best``, the best checkpoint's path."""
    from simsci import data as sdata
    from simsci.train import TrainConfig, Trainer

    ds = sdata.open(path)
    try:
        train_ids, val_ids = _split(len(ds), holdout)
        train_set = TileAgents(ds, train_ids)
        val_set = TileAgents(ds, val_ids)
    finally:
        ds.close()
    torch.manual_seed(seed)
    model = MotionGatedVAE(**dict(model_args or {}))
    spe = max(1, math.ceil(len(train_set) / batch_size))
    config = TrainConfig(
        epochs=math.ceil(steps / spe),
        max_steps=steps,
        batch_size=batch_size,
        lr=lr,
        schedule="cosine",
        grad_clip=grad_clip,
        val_every=val_every,
        monitor="val_neg_elbo",
        seed=seed,
        device=device,
        log_every=min(200, steps),
        progress=progress,
    )
    extra = {
        "data": os.fspath(path),
        "train_episodes": [train_ids[0], train_ids[-1] + 1],
        "val_episodes": [val_ids[0], val_ids[-1] + 1],
    }
    trainer = Trainer(
        model,
        config,
        train_set,
        val_set,
        out_dir=out_dir,
        collate_fn=collate_tiles,
        resume=resume,
        extra=extra,
    )
    summary = dict(trainer.fit())
    summary.update(
        train_episodes=extra["train_episodes"],
        val_episodes=extra["val_episodes"],
        train_tiles=len(train_set),
        val_tiles=len(val_set),
        best=os.fspath(trainer.best_path),
    )
    return summary


def _nearest_distance(cur: np.ndarray, ego) -> np.ndarray:
    """Centre distance of each agent to the nearest other agent (the ego included)."""
    pts = cur[:, :2] if ego is None else np.concatenate([cur[:, :2], ego[None, :2]])
    dd = np.linalg.norm(cur[:, None, :2] - pts[None], axis=-1)
    dd[np.arange(len(cur)), np.arange(len(cur))] = np.inf
    return dd.min(-1) if pts.shape[0] > 1 else np.full(len(cur), np.nan)


class _Tally:
    """Per-set running counts and features for :func:`scene_init_metrics`."""

    def __init__(self):
        self.n = 0
        self.collide = 0
        self.offroad = 0
        self.steps = 0
        self.bad_steps = 0
        self.bad_agents = 0
        self.mismatch = []
        self.feats = {
            k: [] for k in ("speed", "lateral", "heading_offset", "nearest", "displacement")
        }

    def add(self, hist, hv, lanes, ego):
        from simsci.driving.metrics import collisions, infeasible_steps, offroad

        cur = hist[:, -1]
        m = len(cur)
        if m == 0:
            return
        self.n += m
        scene = cur if ego is None else np.concatenate([ego[None], cur])
        col = collisions(scene[None])[0]
        self.collide += int(col[-m:].sum())
        self.offroad += int(offroad(cur, None, lanes["points"], lanes["width"]).sum())
        bad = infeasible_steps(np.where(hv[..., None], hist, 0.0), hv)
        sv = hv[:, 1:] & hv[:, :-1]
        self.steps += int(sv.sum())
        self.bad_steps += int(bad.sum())
        self.bad_agents += int(bad.any(-1).sum())
        two = sv[:, -1]
        if two.any():
            implied = np.linalg.norm(hist[two, -1, :2] - hist[two, -2, :2], axis=-1) / DT
            self.mismatch.append(np.abs(cur[two, _V] - implied))
        pr = project_to_lanes(
            cur[:, :2], np.arctan2(cur[:, _S], cur[:, _C]), lanes["points"], lanes["width"]
        )
        f = self.feats
        f["speed"].append(cur[:, _V])
        f["lateral"].append(pr["d"])
        f["heading_offset"].append(pr["psi"])
        f["nearest"].append(_nearest_distance(cur, ego))
        full = hv.all(-1)
        f["displacement"].append(np.linalg.norm(hist[full, -1, :2] - hist[full, 0, :2], axis=-1))

    def summary(self) -> dict:
        mis = np.concatenate(self.mismatch) if self.mismatch else np.zeros(0)
        nan = math.nan
        return {
            "agents": self.n,
            "collision_rate": self.collide / self.n if self.n else nan,
            "offroad_rate": self.offroad / self.n if self.n else nan,
            "infeasible_step_rate": self.bad_steps / self.steps if self.steps else nan,
            "infeasible_agent_rate": self.bad_agents / self.n if self.n else nan,
            "speed_mismatch_mean": float(mis.mean()) if mis.size else nan,
            "speed_mismatch_max": float(mis.max()) if mis.size else nan,
            "speed_mean": float(np.concatenate(self.feats["speed"]).mean()) if self.n else nan,
        }

    def values(self, key):
        v = np.concatenate(self.feats[key]) if self.feats[key] else np.zeros(0)
        return v[np.isfinite(v)]


def scene_init_metrics(
    model: MotionGatedVAE,
    source,
    episodes: Iterable[int] | None = None,
    *,
    seed: int = 0,
    max_tiles: int | None = None,
    max_tries: int = 20,
    min_gap: float = 1.0,
    headway: float = 0.3,
    use_ego: bool = True,
    raw: bool = True,
) -> dict:
    """Compare sampled initial agents with held-out ground truth, tile by tile.

    For every tile of ``episodes`` of ``source`` (a scene file path, an opened file, or a
    list of episode dicts) with at least one other agent (at most ``max_tiles``), samples
    as many agents as the ground truth has, avoiding the ground-truth ego (``use_ego``),
    with one ``torch.Generator`` seeded by ``seed``. Returns a dict with, for
    ``generated``, ``ground_truth`` and (``raw``) ``raw`` (the decoder without rejection):
    ``collision_rate`` (fraction of agents whose box overlaps another agent's or the ego's
    at the tile's time, ``metrics.collisions``), ``offroad_rate`` (``metrics.offroad``,
    the tile's lanes), ``infeasible_step_rate`` / ``infeasible_agent_rate``
    (``metrics.infeasible_steps`` on the histories), ``speed_mismatch_mean`` / ``_max``
    (``|v_T - |p_T - p_{T-1}| / dt|``, m/s) and ``speed_mean``; ``distances``: squared
    Fréchet distance and RBF MMD² (``metrics.frechet_distance`` / ``metrics.mmd``)
    between generated and ground-truth ``speed`` (m/s), ``lateral`` offset and
    ``heading_offset`` to the assigned lane (:func:`project_to_lanes`), ``nearest``
    neighbour distance (m, the ego included) and 1 s ``displacement`` (full histories);
    ``rejection`` (summed ``sample`` stats), ``ms_per_tile`` (median and mean wall time of
    one ``sample`` call) and ``tiles``."""
    from simsci.driving.metrics import frechet_distance, mmd

    gen = torch.Generator().manual_seed(int(seed))
    sets = {"generated": _Tally(), "ground_truth": _Tally()}
    if raw:
        sets["raw"] = _Tally()
    rej: dict = {}
    times = []
    tiles = 0
    for _, ep in _episodes(source, episodes):
        agents, valid, hvalid = ep["agents"], ep["agents_valid"], ep["agents_history_valid"]
        for k, lanes_k in enumerate(ep["lanes"]):
            if max_tiles is not None and tiles >= max_tiles:
                break
            idx = np.nonzero(np.asarray(valid[k], bool))[0]
            idx = idx[idx > 0]
            if idx.size == 0:
                continue
            lanes = check_lanes(lanes_k)
            ego = np.asarray(agents[k, 0, -1], np.float64) if (use_ego and valid[k][0]) else None
            gt = np.asarray(agents[k, idx], np.float64)
            gt_hv = np.asarray(hvalid[k, idx], bool)
            sets["ground_truth"].add(gt, gt_hv, lanes, ego)
            t0 = time.perf_counter()
            hist, hv, st = model.sample(
                lanes,
                len(idx),
                ego=ego,
                generator=gen,
                max_tries=max_tries,
                min_gap=min_gap,
                headway=headway,
            )
            times.append(time.perf_counter() - t0)
            for key, v in st.items():
                rej[key] = rej.get(key, 0) + v
            sets["generated"].add(hist, hv, lanes, ego)
            if raw:
                h2, v2, _ = model.sample(lanes, len(idx), ego=ego, generator=gen, reject=False)
                sets["raw"].add(h2, v2, lanes, ego)
            tiles += 1
        if max_tiles is not None and tiles >= max_tiles:
            break
    out = {name: t.summary() for name, t in sets.items()}
    dist = {}
    for key in ("speed", "lateral", "heading_offset", "nearest", "displacement"):
        a, b = sets["generated"].values(key), sets["ground_truth"].values(key)
        row = {
            "n_generated": int(a.size),
            "n_ground_truth": int(b.size),
            "frechet": math.nan,
            "mmd": math.nan,
        }
        if a.size >= 2 and b.size >= 2:
            row["frechet"] = frechet_distance(a, b)
            row["mmd"] = mmd(a, b, seed=int(seed))
        dist[key] = row
    out["distances"] = dist
    placed_or_rejected = rej.get("placed", 0) + rej.get("rejected", 0)
    rej["rejection_rate"] = (
        rej.get("rejected", 0) / placed_or_rejected if placed_or_rejected else math.nan
    )
    out["rejection"] = rej
    t = np.asarray(times) * 1e3
    out["ms_per_tile"] = {
        "median": float(np.median(t)) if t.size else math.nan,
        "mean": float(t.mean()) if t.size else math.nan,
    }
    out["tiles"] = tiles
    return out
