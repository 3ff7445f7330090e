r"""Driving metrics: collisions, off-road, kinematic feasibility, displacement errors,
traffic density, lane-graph statistics, seam continuity and distribution distances.

Used by the driving world to check its ground-truth traffic and by VectorWorld to compare
generated worlds with the ground truth. Geometry is in metres, seconds and radians; the
world frame has x east, y north and the heading θ counter-clockwise from +x.

**Inputs.** Agents are ``(..., 7)`` rows of :data:`AGENT_FEATURES` ``(x, y, speed, cos,
sin, length, width)``; a boolean ``valid`` mask has the agents' shape without the feature
axis (``None`` = all valid). Entries that are not valid are never read, so padding may
hold anything (NaN included); a NaN or inf in a *valid* entry is a ``ValueError``. Lanes
are centreline polylines ``(n, P, 2)`` with widths ``(n,)`` and an optional
``lane_valid`` of shape ``(n,)`` (per lane) or ``(n, P)`` (per point; a segment counts
when both its points are valid). Layouts: collisions and their rates take time-major
``(T, A, 7)`` or ``(B, T, A, 7)`` (agents interact at one step); trajectories for
feasibility and displacement errors are agent-major ``(A, T, 7)`` or ``(B, A, T, 7)``.

**Outputs.** Torch in, torch out: results follow the input's device and dtype, rates and
means are 0-d tensors (input validation and the off-road pruning synchronise with the
host; nothing else does). NumPy (or list)
in: computed in float64 on the CPU, masks and per-entry arrays come back as NumPy
arrays, rates and means as Python floats. A rate with an empty denominator (no valid
agent) is NaN.

Design choices, and why:

- **Exact geometry, vectorised.** Box overlap is the separating axis theorem on the
  four box axes, written in closed form (projections and radii from the relative
  heading), over all agent pairs, in blocks of steps of about a million pairs. Off-road
  is the exact point-to-segment distance to the nearest lane: lanes whose bounding box
  (less half their width) is farther than an upper bound (the distance to a few of
  each lane's vertices) are pruned, and exact distances are taken to every segment of
  the remaining lanes, so large maps cost little more than small ones. Work runs in
  blocks of about a million elements so long rollouts fit in memory; the only Python
  loops are over those blocks.
- **Touching is not overlapping.** Two boxes overlap iff on every axis the centre
  distance is below the sum of the projected half-extents by more than rounding,
  ``16 eps max(|coordinates|, sizes)`` (about 1e-14 m in float64 near the origin, ~1 cm
  for float32 world coordinates of 5 km). A box with zero length and width overlaps
  nothing unless it lies strictly inside another.
- **Headings from (cos, sin)** are normalised before use (generated worlds need not emit
  unit vectors); (0, 0) reads as heading 0. Heading changes use
  :math:`\Delta\theta = \operatorname{atan2}(c_0 s_1 - s_0 c_1, c_0 c_1 + s_0 s_1)`,
  wrapped to :math:`(-\pi, \pi]` by construction.
- **Feasibility per step** from consecutive frames: :math:`a = \Delta v / \Delta t`,
  :math:`\kappa = |\Delta\theta| / \Delta s` with :math:`\Delta s` the chord between the
  two positions. A step is infeasible if :math:`|a| > 10.4` m/s² or
  :math:`\kappa > 0.3` 1/m; below :math:`\Delta s = 10^{-3}` m curvature is undefined and
  a heading change over :math:`10^{-3}` rad is infeasible (turning in place). On a circle
  of radius R the chord gives :math:`\kappa = \Delta\phi / (2R \sin(\Delta\phi/2))`,
  within a relative :math:`\Delta\phi^2/24` of 1/R. That judges the *stated* motion
  (speed and heading); :func:`path_infeasible_steps` judges the *recorded positions*
  against the same limits: from three consecutive positions, the path curvature
  :math:`\kappa = \varphi / ((a + b)/2)` (φ the turning angle between the chords a, b)
  and the longitudinal acceleration :math:`(b - a)/\Delta t^2`, so a vehicle whose
  reference point slides sideways (a heading that does not turn while the positions do)
  is seen. :func:`drive_feasibility` applies both to every agent of a recorded drive.
- **Rates.** ``per="agent"`` (default): the fraction of agents (valid at least once)
  that are ever in collision / off-road / infeasible; ``per="step"``: the fraction of
  valid agent-steps (agent-frames for off-road, valid frame pairs for feasibility).
  For a series over time use the boolean functions directly.
- **Fréchet distance is returned squared** (the FID convention, m² for positions):
  :math:`\|\mu_a-\mu_b\|^2 + \operatorname{tr}(\Sigma_a + \Sigma_b -
  2(\Sigma_a^{1/2}\Sigma_b\Sigma_a^{1/2})^{1/2})`, the squared 2-Wasserstein distance
  between the two Gaussians; for d = 1 it is :math:`(\mu_a-\mu_b)^2 +
  (\sigma_a-\sigma_b)^2`. Square roots come from symmetric eigendecompositions with
  eigenvalues clipped at 0 (exact, stable for d = 1 and rank-deficient covariances),
  in float64. Covariances are unbiased (n - 1).
- **MMD is the unbiased MMD²** (Gretton et al. 2012, may be slightly negative), RBF
  kernel :math:`e^{-|x-y|^2/(2h^2)}` with h from the median heuristic (the median of
  the non-zero pooled pairwise distances: robust to the ties of integer statistics such
  as degrees), on at most ``max_samples`` points per side drawn with a fixed seed.
- **Lane-graph degrees** count distinct links: successor links are the union of succ
  edges and reversed pred edges (the format stores both), so a node's ``in_degree`` is
  its number of predecessors and ``out_degree`` its number of successors, whether a
  graph stores succ, pred or both. Curvature of a node is its total absolute discrete
  turning angle divided by its length (zero-length segments, e.g. padding, turn 0).
- **Seam gaps** (one definition, :func:`seam_gaps` for two tiles, applied to a scene
  file's episodes by :func:`episode_seam_gaps` and to a generated drive's tiles live at
  the same step by :func:`drive_seam_gaps`): every lane end point within ``tolerance``
  of an edge shared by two grid-neighbour tiles is matched to the other tile's end
  points on that edge *of the complementary kind* (an end meets a start: lanes running
  into the next tile end on the seam there and start on it in the next tile; oncoming
  lanes the other way round), so a neighbouring lane 3.5 m away is never a partner of
  the wrong direction; its gap is the distance to the nearest partner, ``inf`` with
  none. ``tolerance`` defaults to 0.5 m, the shortest piece the tiles keep.
  ``symmetric=False`` measures a seam from the earlier tile's end points only (a drive:
  does tile k+1 continue tile k?), ``True`` from both (a generated map, where either
  side may leave a lane unmet). Distances are world-frame, computed in float64.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = [
    "AGENT_FEATURES",
    "EDGE_TYPES",
    "ade_fde",
    "agents_per_km",
    "box_corners",
    "boxes_overlap",
    "collision_rate",
    "collisions",
    "compare_lane_stats",
    "drive_feasibility",
    "drive_seam_gaps",
    "drive_tile_coverage",
    "episode_seam_gaps",
    "frechet_distance",
    "infeasibility_rate",
    "infeasible_steps",
    "lane_graph_stats",
    "lane_lengths",
    "mmd",
    "offroad",
    "offroad_distance",
    "offroad_rate",
    "path_infeasible_steps",
    "seam_gaps",
    "tile_to_world",
    "world_to_tile",
]

AGENT_FEATURES = ("x", "y", "speed", "cos", "sin", "length", "width")
EDGE_TYPES = ("pred", "succ", "left", "right")
_F = len(AGENT_FEATURES)
_X, _Y, _SPEED, _COS, _SIN, _LEN, _WID = range(_F)
_PER = ("agent", "step")
_KERNELS = ("rbf", "laplacian")
_BLOCK = 1 << 20  # elements per block (box pairs, point-lane or point-segment pairs)


# ------------------------------------------------------------------ input handling
def _is_torch(x) -> bool:
    return isinstance(x, torch.Tensor)


def _float(x, name: str, like: torch.Tensor | None = None) -> torch.Tensor:
    """A floating tensor: torch input keeps its device/dtype (or ``like``'s), NumPy -> f64."""
    if _is_torch(x):
        t = x
        if t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"{name} must be a real float tensor, got dtype {t.dtype}")
    else:
        arr = np.asarray(x)
        if arr.dtype == object or not (
            np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
        ):
            raise TypeError(
                f"{name} must be a real numeric array, got dtype {arr.dtype}; pass floats"
            )
        t = torch.as_tensor(arr.astype(np.float64))
    if like is not None:
        return t.to(device=like.device, dtype=like.dtype)
    if not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    return t


def _int(x, name: str, device) -> torch.Tensor:
    t = x if _is_torch(x) else torch.as_tensor(np.asarray(x))
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"{name} must hold integers, got dtype {t.dtype}")
    return t.to(device=device, dtype=torch.int64)


def _mask(valid, shape, name: str, what: str, device) -> torch.Tensor:
    shape = tuple(shape)
    if valid is None:
        return torch.ones(shape, dtype=torch.bool, device=device)
    t = valid if _is_torch(valid) else torch.as_tensor(np.asarray(valid))
    if t.is_floating_point() or t.is_complex():
        raise TypeError(
            f"{name} must be a boolean mask (bool or 0/1 integers), got dtype {t.dtype}; "
            f"pass e.g. {name} > 0.5"
        )
    if tuple(t.shape) != shape:
        raise ValueError(
            f"{name} must have shape {shape} ({what}), got {tuple(t.shape)}; "
            "give one flag per entry"
        )
    return t.to(device=device) != 0


def _agents(x, name: str, min_ndim: int = 1) -> tuple[torch.Tensor, bool]:
    numpy_mode = not _is_torch(x)
    t = _float(x, name)
    if t.ndim < min_ndim or t.shape[-1] != _F:
        raise ValueError(
            f"{name} must have shape (..., {_F}) with AGENT_FEATURES = {AGENT_FEATURES}"
            f"{' and at least ' + str(min_ndim) + ' dimensions' if min_ndim > 1 else ''}"
            f", got shape {tuple(t.shape)}; stack the features on the last axis"
        )
    return t, numpy_mode


def _check_finite(x: torch.Tensor, mask: torch.Tensor, name: str) -> None:
    bad = mask & ~torch.isfinite(x).all(-1)
    if bool(bad.any()):
        first = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{name} has NaN or inf in {int(bad.sum())} valid entries (first at index "
            f"{first}); fix them or mark those entries invalid"
        )


def _check_agent_values(x: torch.Tensor, mask: torch.Tensor, name: str) -> None:
    _check_finite(x, mask, name)
    neg = mask & ((x[..., _LEN] < 0) | (x[..., _WID] < 0))
    if bool(neg.any()):
        first = tuple(int(i) for i in neg.nonzero()[0])
        raise ValueError(
            f"{name} has a negative length or width in {int(neg.sum())} valid entries "
            f"(first at index {first}); box sizes must be >= 0"
        )


def _clean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Invalid rows -> 0 (a zero-size box at the origin), so padding never propagates."""
    return torch.where(mask[..., None], x, torch.zeros((), dtype=x.dtype, device=x.device))


def _out(t: torch.Tensor, numpy_mode: bool):
    return t.detach().cpu().numpy() if numpy_mode else t


def _scalar(t: torch.Tensor, numpy_mode: bool):
    return float(t) if numpy_mode else t


def _check_per(per: str) -> None:
    if per not in _PER:
        raise ValueError(f"per must be one of {_PER}, got {per!r}")


def _rate(flags: torch.Tensor, mask: torch.Tensor, per: str, time_dim: int, dtype):
    _check_per(per)
    if per == "agent":
        num = (flags & mask).any(time_dim).sum()
        den = mask.any(time_dim).sum()
    else:
        num = (flags & mask).sum()
        den = mask.sum()
    return num.to(dtype) / den.to(dtype)


# ------------------------------------------------------------------ boxes
def _unit_heading(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    c, s = x[..., _COS], x[..., _SIN]
    n = torch.hypot(c, s)
    zero = n == 0
    n = torch.where(zero, torch.ones_like(n), n)
    return torch.where(zero, torch.ones_like(c), c / n), s / n


def _sat(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Strict interior overlap of oriented boxes a, b (broadcasting ``(..., 7)``)."""
    ca, sa = _unit_heading(a)
    cb, sb = _unit_heading(b)
    hla, hwa = a[..., _LEN] / 2, a[..., _WID] / 2
    hlb, hwb = b[..., _LEN] / 2, b[..., _WID] / 2
    dx, dy = b[..., _X] - a[..., _X], b[..., _Y] - a[..., _Y]
    cos_ab = (ca * cb + sa * sb).abs()  # |u_a . u_b| = |v_a . v_b|
    sin_ab = (ca * sb - sa * cb).abs()  # |u_a . v_b| = |v_a . u_b|
    scale = torch.maximum(
        torch.maximum(a[..., _X].abs(), a[..., _Y].abs()),
        torch.maximum(b[..., _X].abs(), b[..., _Y].abs()),
    )
    scale = torch.maximum(scale, hla + hwa + hlb + hwb)
    tol = 16 * torch.finfo(a.dtype).eps * scale
    # projection of the centre offset on each of the four axes vs the summed radii
    p1, r1 = (dx * ca + dy * sa).abs(), hla + hlb * cos_ab + hwb * sin_ab
    p2, r2 = (-dx * sa + dy * ca).abs(), hwa + hlb * sin_ab + hwb * cos_ab
    p3, r3 = (dx * cb + dy * sb).abs(), hlb + hla * cos_ab + hwa * sin_ab
    p4, r4 = (-dx * sb + dy * cb).abs(), hwb + hla * sin_ab + hwa * cos_ab
    return (p1 < r1 - tol) & (p2 < r2 - tol) & (p3 < r3 - tol) & (p4 < r4 - tol)


def box_corners(agents):
    """Corners ``(..., 4, 2)`` of the agents' boxes ``(..., 7)``.

    Counter-clockwise from the front-right corner: front-right, front-left, rear-left,
    rear-right; corner = (x, y) ± (length/2) u ± (width/2) v with u = (cos, sin)
    normalised and v = (-sin, cos).
    """
    x, numpy_mode = _agents(agents, "agents")
    _check_agent_values(x, torch.ones(x.shape[:-1], dtype=torch.bool, device=x.device), "agents")
    c, s = _unit_heading(x)
    hl, hw = x[..., _LEN] / 2, x[..., _WID] / 2
    fl = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=x.dtype, device=x.device)
    fw = torch.tensor([-1.0, 1.0, 1.0, -1.0], dtype=x.dtype, device=x.device)
    a = hl[..., None] * fl  # (..., 4) along u
    b = hw[..., None] * fw  # along v
    cx = x[..., _X, None] + a * c[..., None] - b * s[..., None]
    cy = x[..., _Y, None] + a * s[..., None] + b * c[..., None]
    return _out(torch.stack([cx, cy], -1), numpy_mode)


def boxes_overlap(a, b):
    """Whether oriented boxes ``a`` and ``b`` (``(..., 7)``, broadcasting) overlap.

    Separating axis theorem on the four box axes; boxes that only touch (within
    rounding) do not overlap. Returns bool ``broadcast(a, b).shape[:-1]``.
    """
    x, numpy_mode = _agents(a, "a")
    y, _ = _agents(b, "b")
    y = y.to(device=x.device, dtype=torch.promote_types(x.dtype, y.dtype))
    x = x.to(y.dtype)
    _check_agent_values(x, torch.ones(x.shape[:-1], dtype=torch.bool, device=x.device), "a")
    _check_agent_values(y, torch.ones(y.shape[:-1], dtype=torch.bool, device=y.device), "b")
    try:
        torch.broadcast_shapes(x.shape, y.shape)
    except RuntimeError as exc:
        raise ValueError(
            f"a {tuple(x.shape)} and b {tuple(y.shape)} do not broadcast; add axes "
            "(e.g. a[:, None] against b[None]) to compare all pairs"
        ) from exc
    return _out(_sat(x, y), numpy_mode)


# ------------------------------------------------------------------ collisions
def _collisions(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """All agent pairs of all steps, in blocks of steps of about _BLOCK pairs each.

    A block whose boxes' circumscribed circles all stay 1 m apart (most steps of a
    drive) skips the separating-axis test: such boxes cannot overlap, so the result is
    the same."""
    num = x.shape[-2]
    if num == 0 or m.numel() == 0:
        return torch.zeros(m.shape, dtype=torch.bool, device=x.device)
    xf = _clean(x, m).reshape(-1, num, _F)
    mf = m.reshape(-1, num)
    out = torch.zeros(mf.shape, dtype=torch.bool, device=x.device)
    not_self = ~torch.eye(num, dtype=torch.bool, device=x.device)
    bs = max(1, _BLOCK // max(num * num, 1))
    for i in range(0, xf.shape[0], bs):
        xb, mb = xf[i : i + bs], mf[i : i + bs]
        both = mb[:, :, None] & mb[:, None, :] & not_self
        reach = 0.5 * torch.hypot(xb[..., _LEN], xb[..., _WID])  # circumradii
        dx = xb[:, :, None, _X] - xb[:, None, :, _X]
        dy = xb[:, :, None, _Y] - xb[:, None, :, _Y]
        limit = reach[:, :, None] + reach[:, None, :] + 1.0
        if not bool((both & (dx * dx + dy * dy < limit * limit)).any()):
            continue
        pair = _sat(xb[:, :, None, :], xb[:, None, :, :]) & both
        out[i : i + bs] = pair.any(-1)
    return out.reshape(m.shape)


def collisions(agents, valid=None):
    """Bool ``(..., A)``: the agent's box overlaps another valid agent's box at that step.

    ``agents`` ``(..., A, 7)``, e.g. ``(T, A, 7)`` or ``(B, T, A, 7)``; ``valid``
    ``(..., A)``. Invalid agents are never in collision and never collide with others.
    """
    x, numpy_mode = _agents(agents, "agents", min_ndim=2)
    m = _mask(valid, x.shape[:-1], "valid", "agents without its feature axis", x.device)
    _check_agent_values(x, m, "agents")
    return _out(_collisions(x, m), numpy_mode)


def collision_rate(agents, valid=None, *, per: str = "agent"):
    """Collision rate of ``agents`` ``(T, A, 7)`` or ``(B, T, A, 7)`` (``(A, 7)`` = T=1).

    ``per="agent"``: fraction of agents valid at least once that collide at least once
    (agent a of episode b is one agent across the T steps); ``per="step"``: fraction
    of valid agent-steps in collision.
    """
    _check_per(per)
    x, numpy_mode = _agents(agents, "agents", min_ndim=2)
    m = _mask(valid, x.shape[:-1], "valid", "agents without its feature axis", x.device)
    _check_agent_values(x, m, "agents")
    col = _collisions(x, m)
    if x.ndim == 2:
        col, m = col[None], m[None]
    return _scalar(_rate(col, m, per, -2, x.dtype), numpy_mode)


# ------------------------------------------------------------------ off-road
def _lane_segments(lanes, widths, lane_valid, like, half_name="widths"):
    """Validated lanes: points (*L, n, P, 2), half widths (*L, n), segment mask (*L, n, P-1)."""
    pts = _float(lanes, "lanes", like)
    if pts.ndim < 3 or pts.shape[-1] != 2 or pts.shape[-2] < 2:
        raise ValueError(
            f"lanes must be polylines of shape (..., n, P, 2) with P >= 2, got {tuple(pts.shape)}"
        )
    w = _float(widths, half_name, like)
    if tuple(w.shape) != tuple(pts.shape[:-2]):
        raise ValueError(
            f"{half_name} must have shape {tuple(pts.shape[:-2])} (one width per lane), "
            f"got {tuple(w.shape)}"
        )
    lv = _lane_mask(lane_valid, pts)
    pv = lv if lv.ndim == pts.ndim - 1 else lv[..., None].expand(pts.shape[:-1])
    _check_finite(pts, pv, "lanes")
    lane_any = pv.any(-1)
    bad = lane_any & ~(torch.isfinite(w) & (w >= 0))
    if bool(bad.any()):
        raise ValueError(f"{half_name} must be finite and >= 0 for valid lanes")
    seg_valid = pv[..., :-1] & pv[..., 1:]
    return pts, w / 2, seg_valid


def _lane_mask(lane_valid, pts: torch.Tensor) -> torch.Tensor:
    if lane_valid is None:
        return torch.ones(pts.shape[:-2], dtype=torch.bool, device=pts.device)
    t = lane_valid if _is_torch(lane_valid) else torch.as_tensor(np.asarray(lane_valid))
    per_lane, per_point = tuple(pts.shape[:-2]), tuple(pts.shape[:-1])
    if tuple(t.shape) == per_lane:
        return _mask(t, per_lane, "lane_valid", "one flag per lane", pts.device)
    return _mask(t, per_point, "lane_valid", f"{per_lane} per lane or per point", pts.device)


def _pad_by_batch(batch: torch.Tensor, num_groups: int, *arrays):
    """Scatter rows grouped by ``batch`` (n,) into padded (G, n_max, ...) arrays + mask."""
    n = batch.shape[0]
    counts = torch.bincount(batch, minlength=num_groups)
    n_max = int(counts.max()) if n else 0
    order = torch.argsort(batch, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(n, device=batch.device) - starts[batch[order]]
    g = batch[order]
    mask = torch.zeros(num_groups, n_max, dtype=torch.bool, device=batch.device)
    mask[g, rank] = True
    out = []
    for arr in arrays:
        pad = torch.zeros(
            (num_groups, n_max) + tuple(arr.shape[1:]), dtype=arr.dtype, device=arr.device
        )
        pad[g, rank] = arr[order]
        out.append(pad)
    return mask, out


def _segment_excess(p, a, d, inv, sv, hw):
    """Exact ``min_s |p - seg_s| - hw`` for K point-lane pairs: p (K, 2), a, d (K, S, 2)."""
    qx = p[:, None, 0] - a[..., 0]
    qy = p[:, None, 1] - a[..., 1]
    t = ((qx * d[..., 0] + qy * d[..., 1]) * inv).clamp(0, 1)
    rx, ry = qx - t * d[..., 0], qy - t * d[..., 1]
    d2 = (rx * rx + ry * ry).masked_fill(~sv, math.inf)
    return d2.amin(-1).sqrt() - hw


def _min_excess(p, pts, half, sv):
    """``min_l (dist(p, lane l) - half_l)`` for points p (Bl, N, 2), lanes (Bl, n, P, 2).

    Exact, with pruning: a lane whose bounding box is farther (minus its half width) than
    the best upper bound (the distance to a few of each lane's vertices) cannot be the
    nearest, so exact segment distances are computed only for the surviving pairs.
    """
    nb, n_pts = p.shape[:2]
    n_lanes, n_p = pts.shape[1], pts.shape[2]
    inf = math.inf
    a = pts[:, :, :-1]
    d = pts[:, :, 1:] - a
    dd = (d * d).sum(-1)
    inv = torch.where(dd > 0, 1 / torch.where(dd > 0, dd, torch.ones_like(dd)), dd)
    on = torch.zeros(pts.shape[:-1], dtype=torch.bool, device=p.device)
    on[..., :-1] |= sv
    on[..., 1:] |= sv  # the points of valid segments
    has = sv.any(-1)  # (Bl, n)
    lo = torch.where(on[..., None], pts, inf).amin(-2)  # (Bl, n, 2) bounding boxes
    hi = torch.where(on[..., None], pts, -inf).amax(-2)
    idx = torch.unique(torch.linspace(0, n_p - 1, 5, device=p.device).round().long())
    sample, sample_ok = pts[:, :, idx], on[:, :, idx]  # (Bl, n, k, 2)
    res = torch.full((nb, n_pts), inf, dtype=p.dtype, device=p.device)
    per_point = n_lanes * (idx.numel() + 2)
    cs = max(1, min(n_pts, _BLOCK // per_point))
    bs = max(1, _BLOCK // (cs * per_point))
    n_seg = max(1, n_p - 1)
    for i in range(0, nb, bs):
        b_sl = slice(i, i + bs)
        for j in range(0, n_pts, cs):
            pc = p[b_sl, j : j + cs]  # (b, c, 2)
            px, py = pc[..., 0, None], pc[..., 1, None]  # (b, c, 1)
            gx = torch.maximum(lo[b_sl, None, :, 0] - px, px - hi[b_sl, None, :, 0]).clamp_min(0)
            gy = torch.maximum(lo[b_sl, None, :, 1] - py, py - hi[b_sl, None, :, 1]).clamp_min(0)
            lower = torch.hypot(gx, gy) - half[b_sl, None]  # (b, c, n)
            vd = torch.hypot(
                sample[b_sl, None, ..., 0] - px[..., None],
                sample[b_sl, None, ..., 1] - py[..., None],
            ).masked_fill(~sample_ok[b_sl, None], inf)
            upper = vd.amin(-1) - half[b_sl, None]
            ok = has[b_sl, None]
            best = upper.masked_fill(~ok, inf).amin(-1)  # (b, c)
            cand = ok & (lower <= best[..., None])
            ib, ic, il = cand.nonzero(as_tuple=True)
            ib_abs = ib + i
            out = torch.full((pc.shape[0] * pc.shape[1],), inf, dtype=p.dtype, device=p.device)
            ks = max(1, _BLOCK // n_seg)
            for k in range(0, ib.numel(), ks):
                sb, sc, sl_ = ib_abs[k : k + ks], ic[k : k + ks], il[k : k + ks]
                ex = _segment_excess(
                    p[sb, sc + j], a[sb, sl_], d[sb, sl_], inv[sb, sl_], sv[sb, sl_], half[sb, sl_]
                )
                flat = ib[k : k + ks] * pc.shape[1] + sc
                out.scatter_reduce_(0, flat, ex, reduce="amin")
            res[b_sl, j : j + cs] = out.reshape(pc.shape[:2])
    return res


def _offroad_distance(x, m, lanes, widths, lane_valid, lane_batch):
    """Min over lane segments of (centre distance - half width) for each entry, (...)."""
    if lane_batch is not None:
        pts = _float(lanes, "lanes", x)
        if pts.ndim != 3:
            raise ValueError(
                f"with lane_batch, lanes must be (n, P, 2) (all scenes' lanes stacked), "
                f"got {tuple(pts.shape)}"
            )
        b = _int(lane_batch, "lane_batch", x.device)
        if tuple(b.shape) != (pts.shape[0],):
            raise ValueError(
                f"lane_batch must have shape ({pts.shape[0]},) (the scene of each lane), "
                f"got {tuple(b.shape)}"
            )
        groups = x.shape[0] if x.ndim > 1 else 0
        if b.numel() and (int(b.min()) < 0 or int(b.max()) >= groups):
            raise ValueError(
                f"lane_batch must index the agents' first axis (0..{groups - 1}), got "
                f"values in [{int(b.min())}, {int(b.max())}]"
            )
        w = _float(widths, "widths", x)
        if tuple(w.shape) != (pts.shape[0],):
            raise ValueError(
                f"widths must have shape ({pts.shape[0]},) (one width per lane), got "
                f"{tuple(w.shape)}"
            )
        lv = _lane_mask(lane_valid, pts)
        if lv.ndim == 1:
            lv = lv[:, None].expand(pts.shape[:-1])
        mask, (pts, w, lv) = _pad_by_batch(b, groups, pts, w, lv)
        lv = lv & mask[..., None]
        lanes, widths, lane_valid = pts, w, lv
    pts, half, seg_valid = _lane_segments(lanes, widths, lane_valid, x)
    lead = tuple(pts.shape[:-3])
    if tuple(x.shape[: len(lead)]) != lead or x.ndim - 1 < len(lead):
        raise ValueError(
            f"lanes with batch shape {lead} need agents whose leading axes are {lead}, got "
            f"agents {tuple(x.shape)}; pass lanes (n, P, 2) shared by all agents instead"
        )
    nb = math.prod(lead)
    n_lanes, n_pts = pts.shape[-3], x[..., 0].numel() // max(nb, 1)
    res = torch.full((nb, n_pts), math.inf, dtype=x.dtype, device=x.device)
    if nb and n_pts and n_lanes:
        p = _clean(x, m)[..., :2].reshape(nb, n_pts, 2)
        pts = pts.reshape(nb, n_lanes, *pts.shape[-2:])
        res = _min_excess(p, pts, half.reshape(nb, n_lanes), seg_valid.reshape(nb, n_lanes, -1))
    res = res.reshape(x.shape[:-1])
    return res.masked_fill(~m, math.nan)


def offroad_distance(agents, valid, lanes, widths, lane_valid=None, *, lane_batch=None):
    """How far each agent centre lies outside the lanes: ``min_l (d_l - w_l / 2)``.

    ``d_l`` is the exact distance to lane l's centreline polyline. > 0: off-road by that
    many metres; <= 0: on a lane. ``inf`` when no lane is valid, NaN for invalid entries.
    ``lanes`` ``(n, P, 2)`` shared by all agents, or ``(*L, n, P, 2)`` per scene with
    agents ``(*L, ..., 7)``; or stacked ``(n, P, 2)`` with ``lane_batch`` ``(n,)`` giving
    each lane's index along the agents' first axis (the tile format's ``nodes/tile``).
    """
    x, numpy_mode = _agents(agents, "agents")
    m = _mask(valid, x.shape[:-1], "valid", "agents without its feature axis", x.device)
    _check_agent_values(x, m, "agents")
    return _out(_offroad_distance(x, m, lanes, widths, lane_valid, lane_batch), numpy_mode)


def offroad(agents, valid, lanes, widths, lane_valid=None, *, tolerance=0.0, lane_batch=None):
    """Bool (...): the centre is farther than ``width/2 + tolerance`` from every lane.

    Shapes as in :func:`offroad_distance`; invalid entries are False.
    """
    x, numpy_mode = _agents(agents, "agents")
    m = _mask(valid, x.shape[:-1], "valid", "agents without its feature axis", x.device)
    _check_agent_values(x, m, "agents")
    dist = _offroad_distance(x, m, lanes, widths, lane_valid, lane_batch)
    return _out((dist > tolerance) & m, numpy_mode)


def offroad_rate(
    agents, valid, lanes, widths, lane_valid=None, *, tolerance=0.0, per="agent", lane_batch=None
):
    """Off-road rate of agents ``(T, A, 7)`` or ``(B, T, A, 7)`` (layout of
    :func:`collision_rate`): ``per="agent"`` fraction of agents ever off-road,
    ``per="step"`` fraction of valid agent-frames off-road."""
    _check_per(per)
    x, numpy_mode = _agents(agents, "agents", min_ndim=2)
    m = _mask(valid, x.shape[:-1], "valid", "agents without its feature axis", x.device)
    _check_agent_values(x, m, "agents")
    off = (_offroad_distance(x, m, lanes, widths, lane_valid, lane_batch) > tolerance) & m
    if x.ndim == 2:
        off, m = off[None], m[None]
    return _scalar(_rate(off, m, per, -2, x.dtype), numpy_mode)


# ------------------------------------------------------------------ feasibility
def _check_positive(value, name: str) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def _infeasible(x, m, dt, max_accel, max_curvature, min_distance, max_turn_in_place):
    dt = _check_positive(dt, "dt")
    max_accel = _check_positive(max_accel, "max_accel")
    max_curvature = _check_positive(max_curvature, "max_curvature")
    min_distance = _check_positive(min_distance, "min_distance")
    max_turn_in_place = _check_positive(max_turn_in_place, "max_turn_in_place")
    x = _clean(x, m)
    x0, x1 = x[..., :-1, :], x[..., 1:, :]
    acc = (x1[..., _SPEED] - x0[..., _SPEED]) / dt
    c0, s0, c1, s1 = x0[..., _COS], x0[..., _SIN], x1[..., _COS], x1[..., _SIN]
    dth = torch.atan2(c0 * s1 - s0 * c1, c0 * c1 + s0 * s1).abs()
    ds = torch.hypot(x1[..., _X] - x0[..., _X], x1[..., _Y] - x0[..., _Y])
    moving = ds >= min_distance
    kappa = dth / ds.clamp_min(min_distance)
    bad = (acc.abs() > max_accel) | torch.where(
        moving, kappa > max_curvature, dth > max_turn_in_place
    )
    return bad & m[..., :-1] & m[..., 1:]


def infeasible_steps(
    traj,
    valid=None,
    dt=0.1,
    *,
    max_accel=10.4,
    max_curvature=0.3,
    min_distance=1e-3,
    max_turn_in_place=1e-3,
):
    """Bool ``(..., A, T-1)``: step t -> t+1 of trajectory ``traj`` ``(..., A, T, 7)`` is
    kinematically infeasible.

    Infeasible if ``|Δspeed/dt| > max_accel`` (m/s²), or, moving (``Δs >= min_distance``
    m), ``|Δθ|/Δs > max_curvature`` (1/m), or, not moving, ``|Δθ| > max_turn_in_place``
    (rad). Only steps whose two frames are both valid can be infeasible.
    """
    x, numpy_mode = _agents(traj, "traj", min_ndim=2)
    m = _mask(valid, x.shape[:-1], "valid", "traj without its feature axis", x.device)
    _check_agent_values(x, m, "traj")
    bad = _infeasible(x, m, dt, max_accel, max_curvature, min_distance, max_turn_in_place)
    return _out(bad, numpy_mode)


def infeasibility_rate(
    traj,
    valid=None,
    dt=0.1,
    *,
    per="agent",
    max_accel=10.4,
    max_curvature=0.3,
    min_distance=1e-3,
    max_turn_in_place=1e-3,
):
    """Infeasibility rate of ``traj`` ``(..., A, T, 7)``: ``per="agent"`` fraction of
    agents with >= 1 valid step that have an infeasible step, ``per="step"`` fraction of
    valid steps (both frames valid) that are infeasible."""
    _check_per(per)
    x, numpy_mode = _agents(traj, "traj", min_ndim=2)
    m = _mask(valid, x.shape[:-1], "valid", "traj without its feature axis", x.device)
    _check_agent_values(x, m, "traj")
    bad = _infeasible(x, m, dt, max_accel, max_curvature, min_distance, max_turn_in_place)
    step_valid = m[..., :-1] & m[..., 1:]
    return _scalar(_rate(bad, step_valid, per, -1, x.dtype), numpy_mode)


def _path_infeasible(x, m, dt, max_accel, max_curvature, min_distance):
    """Flags ``(..., T-2)`` of position triples (t-1, t, t+1), see :func:`path_infeasible_steps`."""
    dt = _check_positive(dt, "dt")
    max_accel = _check_positive(max_accel, "max_accel")
    max_curvature = _check_positive(max_curvature, "max_curvature")
    min_distance = _check_positive(min_distance, "min_distance")
    x = _clean(x, m)
    p = x[..., :2]
    d0, d1 = p[..., 1:-1, :] - p[..., :-2, :], p[..., 2:, :] - p[..., 1:-1, :]
    a, b = torch.hypot(d0[..., 0], d0[..., 1]), torch.hypot(d1[..., 0], d1[..., 1])
    cross = d0[..., 0] * d1[..., 1] - d0[..., 1] * d1[..., 0]
    dot = (d0 * d1).sum(-1)
    turn = torch.atan2(cross, dot).abs()  # the path's turning angle at frame t, [0, π]
    kappa = 2.0 * turn / (a + b).clamp_min(min_distance)
    moving = (a >= min_distance) & (b >= min_distance)
    acc = (b - a) / (dt * dt)  # change of the path speed |Δp| / dt over one step
    bad = (acc.abs() > max_accel) | (moving & (kappa > max_curvature))
    return bad & m[..., :-2] & m[..., 1:-1] & m[..., 2:]


def path_infeasible_steps(
    traj, valid=None, dt=0.1, *, max_accel=10.4, max_curvature=0.3, min_distance=0.1
):
    """Bool ``(..., A, T-2)``: the motion through frame t+1 of trajectory ``traj``
    ``(..., A, T, 7)``, judged from the recorded positions alone, is infeasible.

    From three consecutive positions p_{t}, p_{t+1}, p_{t+2} with chords a, b and turning
    angle φ between them: path curvature ``κ = φ / ((a + b) / 2)`` (1/m; on a circle of
    radius R, 1/R within a relative (a/R)²/24) and longitudinal acceleration ``(b - a) /
    dt²`` (the change of the speed along the path, m/s²). Infeasible if ``|accel| >
    max_accel``, or ``κ > max_curvature`` while both chords are at least
    ``min_distance`` m (slower than that the positions' float32 rounding, ~0.3 mm at
    5 km, reads as curvature, and heading alone says nothing: turning in place is
    :func:`infeasible_steps`' to judge). Only triples of three valid frames count.
    Unlike :func:`infeasible_steps` (the stated speed and heading), this sees a vehicle
    whose reference point slides sideways.
    """
    x, numpy_mode = _agents(traj, "traj", min_ndim=2)
    m = _mask(valid, x.shape[:-1], "valid", "traj without its feature axis", x.device)
    _check_agent_values(x, m, "traj")
    if x.shape[-2] < 3:
        return _out(torch.zeros((*m.shape[:-1], 0), dtype=torch.bool, device=x.device), numpy_mode)
    return _out(_path_infeasible(x, m, dt, max_accel, max_curvature, min_distance), numpy_mode)


def drive_feasibility(agents, valid, agent_id, dt=0.1, *, ego_id=0):
    """Feasibility of every agent of a recorded drive, both ways: a JSON-able dict
    ``{"ego": {...}, "npc": {...}}``.

    ``agents`` ``(T, V, 7)`` per-step slots (time-major, as a world stores them),
    ``valid`` ``(T, V)``, ``agent_id`` ``(T, V)`` ints: the vehicle in each slot (a slot
    is reused; consecutive frames belong to one agent only when its id holds), the ego's
    ``ego_id``. Per group: ``agents`` (distinct ids), ``stated_steps`` /
    ``stated_infeasible`` / ``stated_agents_infeasible`` (:func:`infeasible_steps`: the
    stated speed and heading, over pairs of consecutive frames of one agent) and
    ``path_steps`` / ``path_infeasible`` / ``path_agents_infeasible``
    (:func:`path_infeasible_steps`: the recorded positions, over triples), at the default
    limits (10.4 m/s², 0.3 1/m).
    """
    x, _ = _agents(agents, "agents", min_ndim=3)
    if x.ndim != 3:
        raise ValueError(f"agents must have shape (T, V, {_F}), got {tuple(x.shape)}")
    m = _mask(valid, x.shape[:-1], "valid", "(T, V)", x.device)
    ids = _int(agent_id, "agent_id", x.device)
    if tuple(ids.shape) != tuple(m.shape):
        raise ValueError(
            f"agent_id must have shape {tuple(m.shape)} (T, V), got {tuple(ids.shape)}"
        )
    traj, tm, tid = x.transpose(0, 1), m.transpose(0, 1), ids.transpose(0, 1)  # V, T
    same = tid[:, 1:] == tid[:, :-1]
    stated = infeasible_steps(traj, tm, dt) & same
    pairs = tm[:, 1:] & tm[:, :-1] & same
    path = path_infeasible_steps(traj, tm, dt) & same[:, 1:] & same[:, :-1]
    triples = tm[:, 2:] & tm[:, 1:-1] & tm[:, :-2] & same[:, 1:] & same[:, :-1]
    out = {}
    for name, group in (("ego", tid == ego_id), ("npc", tid != ego_id)):
        g = group & tm
        row = {"agents": int(torch.unique(tid[g]).numel())}
        for basis, bad, checked in (("stated", stated, pairs), ("path", path, triples)):
            k = checked.shape[1]
            gk = group[:, :k] & checked
            row[f"{basis}_steps"] = int(gk.sum())
            row[f"{basis}_infeasible"] = int((bad & gk).sum())
            row[f"{basis}_agents_infeasible"] = int(torch.unique(tid[:, :k][bad & gk]).numel())
        out[name] = row
    return out


# ------------------------------------------------------------------ displacement
def ade_fde(pred, target, valid=None, *, reduction="mean"):
    """Average and final displacement errors (m) of ``pred`` vs ``target``.

    ``pred``, ``target`` ``(..., A, T, D)`` with D = 2 (x, y) or 7 (AGENT_FEATURES; only
    x, y are used); ``valid`` ``(..., A, T)``. Per agent: ADE = mean over its valid steps
    of ``|pred_xy - target_xy|``, FDE = that distance at its last valid step.
    ``reduction="mean"``: both averaged over agents with a valid step (NaN if none);
    ``"none"``: per-agent ``(..., A)`` arrays, NaN for agents never valid.
    """
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
    numpy_mode = not _is_torch(pred)
    p = _float(pred, "pred")
    t = _float(target, "target", p)
    for name, arr in (("pred", p), ("target", t)):
        if arr.ndim < 2 or arr.shape[-1] not in (2, _F):
            raise ValueError(
                f"{name} must have shape (..., A, T, 2) or (..., A, T, {_F}), got "
                f"{tuple(arr.shape)}"
            )
    if p.shape[:-1] != t.shape[:-1]:
        raise ValueError(
            f"pred {tuple(p.shape)} and target {tuple(t.shape)} must agree on all axes but the last"
        )
    m = _mask(valid, p.shape[:-1], "valid", "pred without its feature axis", p.device)
    p, t = p[..., :2], t[..., :2]
    _check_finite(p, m, "pred")
    _check_finite(t, m, "target")
    diff = torch.where(m[..., None], p - t, torch.zeros((), dtype=p.dtype, device=p.device))
    dist = torch.hypot(diff[..., 0], diff[..., 1])  # (..., A, T)
    cnt = m.sum(-1)
    has = cnt > 0
    nan = torch.full((), math.nan, dtype=p.dtype, device=p.device)
    ade_a = torch.where(has, dist.sum(-1) / cnt.clamp_min(1).to(p.dtype), nan)
    steps = torch.arange(m.shape[-1], device=p.device)
    last = torch.where(m, steps, torch.zeros_like(steps)).amax(-1)
    fde_a = torch.where(has, dist.gather(-1, last[..., None])[..., 0], nan)
    if reduction == "none":
        return _out(ade_a, numpy_mode), _out(fde_a, numpy_mode)
    k = has.sum().to(p.dtype)
    zero = torch.zeros((), dtype=p.dtype, device=p.device)
    ade = torch.where(has, ade_a, zero).sum() / k
    fde = torch.where(has, fde_a, zero).sum() / k
    return _scalar(ade, numpy_mode), _scalar(fde, numpy_mode)


# ------------------------------------------------------------------ density
def lane_lengths(lane_polylines, lane_valid=None):
    """Arc length (m) of each polyline ``(..., n, P, 2)`` over its valid segments, (..., n)."""
    numpy_mode = not _is_torch(lane_polylines)
    pts = _float(lane_polylines, "lane_polylines")
    if pts.ndim < 3 or pts.shape[-1] != 2 or pts.shape[-2] < 2:
        raise ValueError(
            f"lane_polylines must have shape (..., n, P, 2) with P >= 2, got {tuple(pts.shape)}"
        )
    return _out(_lane_lengths(pts, lane_valid), numpy_mode)


def _lane_lengths(pts: torch.Tensor, lane_valid) -> torch.Tensor:
    lv = _lane_mask(lane_valid, pts)
    pv = lv if lv.ndim == pts.ndim - 1 else lv[..., None].expand(pts.shape[:-1])
    _check_finite(pts, pv, "lane_polylines")
    seg = pts[..., 1:, :] - pts[..., :-1, :]
    seg_len = torch.hypot(seg[..., 0], seg[..., 1])
    sv = pv[..., 1:] & pv[..., :-1]
    zero = torch.zeros((), dtype=pts.dtype, device=pts.device)
    return torch.where(sv, seg_len, zero).sum(-1)


def agents_per_km(num_agents, lane_polylines, lane_valid=None, *, batch=None):
    """Traffic density: agents per km of lane centreline (every lane counted, both
    directions), ``num_agents / (sum of lane lengths / 1000)``; NaN where there is no
    lane length.

    ``lane_polylines`` ``(n, P, 2)`` with ``num_agents`` a number, or padded per scene
    ``(*B, n, P, 2)`` with ``num_agents`` ``(*B,)`` (or broadcasting); or stacked
    ``(n, P, 2)`` with ``batch`` ``(n,)`` the scene of each lane and ``num_agents``
    ``(G,)``, returning ``(G,)``.
    """
    numpy_mode = not _is_torch(lane_polylines)
    pts = _float(lane_polylines, "lane_polylines")
    if pts.ndim < 3 or pts.shape[-1] != 2 or pts.shape[-2] < 2:
        raise ValueError(
            f"lane_polylines must have shape (..., n, P, 2) with P >= 2, got {tuple(pts.shape)}"
        )
    count = _float(num_agents, "num_agents", pts)
    lengths = _lane_lengths(pts, lane_valid)
    if batch is not None:
        if pts.ndim != 3:
            raise ValueError(f"with batch, lane_polylines must be (n, P, 2), got {pts.shape}")
        b = _int(batch, "batch", pts.device)
        if tuple(b.shape) != (pts.shape[0],) or count.ndim != 1:
            raise ValueError(
                f"with batch, batch must be ({pts.shape[0]},) and num_agents (G,), got "
                f"batch {tuple(b.shape)} and num_agents {tuple(count.shape)}"
            )
        if b.numel() and (int(b.min()) < 0 or int(b.max()) >= count.shape[0]):
            raise ValueError(f"batch values must lie in [0, {count.shape[0]}) (one per scene)")
        total = torch.zeros(count.shape[0], dtype=pts.dtype, device=pts.device)
        total = total.index_add(0, b, lengths)
    else:
        total = lengths.sum(-1)
    km = total / 1000
    nan = torch.full((), math.nan, dtype=pts.dtype, device=pts.device)
    dens = torch.where(km > 0, count / torch.where(km > 0, km, torch.ones_like(km)), nan)
    if dens.ndim == 0:
        return _scalar(dens, numpy_mode)
    return _out(dens, numpy_mode)


# ------------------------------------------------------------------ lane graph statistics
def lane_graph_stats(points, edge_index, edge_type, num_nodes=None, *, batch=None, num_graphs=None):
    """Statistics of a lane graph: a dict of 1-D arrays.

    ``points`` ``(n, P, 2)`` node centrelines (the tile format's ``nodes/points``),
    ``edge_index`` ``(E, 2)`` [src, dst], ``edge_type`` ``(E,)`` indices into
    :data:`EDGE_TYPES`, ``batch`` ``(n,)`` optional graph (tile) of each node.

    Per node ``(n,)``: ``length`` (m), ``curvature`` (1/m, total absolute turning angle
    / length), ``in_degree`` / ``out_degree`` (distinct predecessors / successors from
    succ edges and reversed pred edges), ``degree`` = in + out, ``lateral_degree``
    (distinct left/right neighbours). Per graph ``(G,)`` (G = 1 without ``batch``):
    ``num_nodes``, ``num_links`` (distinct successor links), ``num_lateral`` (distinct
    left/right edges); a link belongs to the graph of its source node.
    """
    numpy_mode = not _is_torch(points)
    pts = _float(points, "points")
    if pts.ndim != 3 or pts.shape[-1] != 2 or pts.shape[1] < 2:
        raise ValueError(f"points must have shape (n, P, 2) with P >= 2, got {tuple(pts.shape)}")
    n = pts.shape[0]
    if num_nodes is not None and int(num_nodes) != n:
        raise ValueError(f"num_nodes={num_nodes} but points holds {n} nodes")
    _check_finite(pts, torch.ones(pts.shape[:-1], dtype=torch.bool, device=pts.device), "points")
    ei = _int(edge_index, "edge_index", pts.device)
    if ei.ndim != 2 or ei.shape[1] != 2:
        raise ValueError(
            f"edge_index must have shape (E, 2) [src, dst], got {tuple(ei.shape)}; "
            "transpose a PyG-style (2, E) index"
        )
    et = _int(edge_type, "edge_type", pts.device)
    if tuple(et.shape) != (ei.shape[0],):
        raise ValueError(f"edge_type must have shape ({ei.shape[0]},), got {tuple(et.shape)}")
    if ei.numel() and (int(ei.min()) < 0 or int(ei.max()) >= n):
        raise ValueError(
            f"edge_index values must lie in [0, {n}), got [{int(ei.min())}, {int(ei.max())}]"
        )
    if et.numel() and (int(et.min()) < 0 or int(et.max()) >= len(EDGE_TYPES)):
        raise ValueError(f"edge_type values must index EDGE_TYPES = {EDGE_TYPES}")
    if batch is None:
        g = torch.zeros(n, dtype=torch.int64, device=pts.device)
        num_graphs = 1 if num_graphs is None else int(num_graphs)
    else:
        g = _int(batch, "batch", pts.device)
        if tuple(g.shape) != (n,):
            raise ValueError(f"batch must have shape ({n},), got {tuple(g.shape)}")
        if n and int(g.min()) < 0:
            raise ValueError("batch values must be >= 0")
        top = int(g.max()) + 1 if n else 0
        if num_graphs is None:
            num_graphs = top
        elif int(num_graphs) < top:
            raise ValueError(f"num_graphs={num_graphs} but batch refers to graph {top - 1}")

    seg = pts[:, 1:] - pts[:, :-1]
    seg_len = torch.hypot(seg[..., 0], seg[..., 1])
    length = seg_len.sum(-1)
    a, b = seg[:, :-1], seg[:, 1:]
    turn = torch.atan2(a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0], (a * b).sum(-1)).abs()
    turn = torch.where((seg_len[:, :-1] > 0) & (seg_len[:, 1:] > 0), turn, torch.zeros_like(turn))
    zero = torch.zeros((), dtype=pts.dtype, device=pts.device)
    curvature = torch.where(length > 0, turn.sum(-1) / torch.where(length > 0, length, 1), zero)

    src, dst = ei[:, 0], ei[:, 1]
    is_succ, is_pred = et == 1, et == 0
    frm = torch.cat([src[is_succ], dst[is_pred]])
    to = torch.cat([dst[is_succ], src[is_pred]])
    links = torch.unique(frm * n + to)
    lf, lt = links // max(n, 1), links % max(n, 1)
    lat = et >= 2
    lat_keys = torch.unique((src[lat] * n + dst[lat]) * 2 + (et[lat] - 2))
    lat_src = lat_keys // 2 // max(n, 1)
    in_deg = torch.bincount(lt, minlength=n)
    out_deg = torch.bincount(lf, minlength=n)
    stats = {
        "length": length,
        "curvature": curvature,
        "in_degree": in_deg,
        "out_degree": out_deg,
        "degree": in_deg + out_deg,
        "lateral_degree": torch.bincount(lat_src, minlength=n),
        "num_nodes": torch.bincount(g, minlength=num_graphs),
        "num_links": torch.bincount(g[lf], minlength=num_graphs),
        "num_lateral": torch.bincount(g[lat_src], minlength=num_graphs),
    }
    return {k: _out(v, numpy_mode) for k, v in stats.items()}


# ------------------------------------------------------------------ tiles and seams
def _pose(pose, name: str, like: torch.Tensor) -> torch.Tensor:
    t = _float(pose, name)
    t = t.to(device=like.device, dtype=torch.promote_types(like.dtype, t.dtype))
    if t.ndim < 1 or t.shape[-1] != 3:
        raise ValueError(f"{name} must have shape (..., 3) [cx, cy, θ], got {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be finite")
    return t


def _rotate(p: torch.Tensor, theta: torch.Tensor, sign: float) -> torch.Tensor:
    c, s = torch.cos(theta), sign * torch.sin(theta)
    return torch.stack([c * p[..., 0] - s * p[..., 1], s * p[..., 0] + c * p[..., 1]], -1)


def tile_to_world(points, pose):
    """World coordinates ``c + R(θ) p`` of tile-frame points ``(..., 2)``; ``pose``
    ``(3,)`` or ``(..., 3)`` [cx, cy, θ] broadcasting against the points' leading axes
    (e.g. ``pose[:, None]`` for per-node poses of ``(n, P, 2)`` points). The result has
    the promoted dtype of points and pose (float32 points, float64 poses -> float64)."""
    numpy_mode = not _is_torch(points)
    p = _float(points, "points")
    if p.ndim < 1 or p.shape[-1] != 2:
        raise ValueError(f"points must have shape (..., 2), got {tuple(p.shape)}")
    q = _pose(pose, "pose", p)
    p = p.to(q.dtype)
    w = _rotate(p, q[..., 2], 1.0) + q[..., :2]
    return _out(w, numpy_mode)


def world_to_tile(points, pose):
    """Inverse of :func:`tile_to_world`: ``R(θ)^T (p - c)``."""
    numpy_mode = not _is_torch(points)
    p = _float(points, "points")
    if p.ndim < 1 or p.shape[-1] != 2:
        raise ValueError(f"points must have shape (..., 2), got {tuple(p.shape)}")
    q = _pose(pose, "pose", p)
    p = p.to(q.dtype)
    return _out(_rotate(p - q[..., :2], q[..., 2], -1.0), numpy_mode)


_SIDES = ((1, 0), (-1, 0), (0, 1), (0, -1))  # +x, -x, +y, -y edges of a tile
_OPPOSITE = (1, 0, 3, 2)


def _check_tolerance(tolerance) -> float:
    tol = float(tolerance)
    if not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    return tol


def _grid_cells(poses: torch.Tensor, tile_size: float, tolerance: float) -> torch.Tensor:
    theta0 = poses[0, 2]
    dth = torch.atan2(torch.sin(poses[:, 2] - theta0), torch.cos(poses[:, 2] - theta0))
    if bool((dth.abs() > 1e-6).any()):
        raise ValueError(
            "all tiles must share one orientation θ0 (the tile grid is anchored at the "
            f"ego's start heading), got θ = {poses[:, 2].tolist()}"
        )
    rel = _rotate(poses[:, :2] - poses[0, :2], theta0, -1.0) / tile_size
    cells = torch.round(rel)
    tol = max(tolerance, 1e-3)  # float32 poses of a 5 km drive round to ~5e-4 m
    if bool(((rel - cells).abs() * tile_size > tol).any()):
        raise ValueError(
            f"tile centres must lie on a {tile_size} m grid around tile 0 (within "
            f"{tol} m); check tile_pose and tile_size"
        )
    return cells.to(torch.int64)


def _seam_core(pts, node_tile, poses, tile_size, tolerance, symmetric):
    """Gaps (float64) of lane endpoints on the edges shared by grid-neighbour tiles."""
    tile_size = _check_positive(tile_size, "tile_size")
    tolerance = _check_tolerance(tolerance)
    dev = pts.device
    f64 = torch.float64
    poses = poses.to(f64)
    cells = _grid_cells(poses, tile_size, tolerance)  # (T, 2)
    n = pts.shape[0]
    ends = torch.cat([pts[:, 0], pts[:, -1]]).to(f64)  # (2n, 2) tile frame
    kind = torch.cat(
        [
            torch.zeros(n, dtype=torch.int64, device=dev),
            torch.ones(n, dtype=torch.int64, device=dev),
        ]
    )  # 0 start, 1 end
    tile = torch.cat([node_tile, node_tile])
    half = tile_size / 2
    sides = torch.tensor(_SIDES, dtype=f64, device=dev)  # (4, 2)
    along = ends @ sides.T  # (2n, 4) coordinate along each side's normal
    across = ends @ torch.stack([-sides[:, 1], sides[:, 0]], -1).T
    on = ((along - half).abs() <= tolerance) & (across.abs() <= half + tolerance)
    pe, ps = on.nonzero(as_tuple=True)  # endpoint-side pairs on a tile edge
    side_cells = torch.tensor(_SIDES, dtype=torch.int64, device=dev)
    nb_cell = cells[tile[pe]] + side_cells[ps]  # (K, 2)
    match = (nb_cell[:, None, :] == cells[None, :, :]).all(-1)  # (K, T)
    has_nb = match.any(-1)
    nb = match.to(torch.int64).argmax(-1)
    keep = has_nb if symmetric else has_nb & (nb > tile[pe])
    qe, qs, qn = pe[keep], ps[keep], nb[keep]
    world = _rotate(ends, poses[tile, 2], 1.0) + poses[tile, :2]  # (2n, 2) float64
    if qe.numel() == 0:
        return torch.zeros(0, dtype=f64, device=dev)
    opposite = torch.tensor(_OPPOSITE, dtype=torch.int64, device=dev)
    partner = (
        (tile[pe][None, :] == qn[:, None])
        & (ps[None, :] == opposite[qs][:, None])
        & (kind[pe][None, :] != kind[qe][:, None])
    )  # (K', K)
    dist = torch.cdist(world[qe], world[pe], compute_mode="donot_use_mm_for_euclid_dist")
    dist = dist.masked_fill(~partner, math.inf)
    if dist.shape[1] == 0:
        return torch.full((qe.numel(),), math.inf, dtype=f64, device=dev)
    return dist.amin(-1)


def episode_seam_gaps(
    points, node_tile, tile_pose, *, tile_size=64.0, tolerance=0.5, symmetric=False
):
    """Seam gaps (m) of one episode's lane graph in the tile format.

    ``points`` ``(n, P, 2)`` node centrelines in their tiles' frames (``nodes/points``),
    ``node_tile`` ``(n,)`` (``nodes/tile``), ``tile_pose`` ``(T, 3)``
    (``steps/tile_pose``). Every lane endpoint on an edge shared with another tile of
    the episode (grid neighbours, not only consecutive steps) is matched to the nearest
    endpoint of the complementary kind (end <-> start) on that edge in the neighbour;
    the world-frame distance is its gap (``inf`` without a partner). ``symmetric=False``
    measures each seam from the tile with the smaller index only (one gap per
    continuation), ``True`` from both sides. Returns a 1-D array (dtype of points).
    """
    numpy_mode = not _is_torch(points)
    pts = _float(points, "points")
    if pts.ndim != 3 or pts.shape[-1] != 2 or pts.shape[1] < 2:
        raise ValueError(f"points must have shape (n, P, 2) with P >= 2, got {tuple(pts.shape)}")
    _check_finite(pts, torch.ones(pts.shape[:-1], dtype=torch.bool, device=pts.device), "points")
    poses = _pose(tile_pose, "tile_pose", pts)
    if poses.ndim != 2 or poses.shape[0] < 1:
        raise ValueError(f"tile_pose must have shape (T, 3), got {tuple(poses.shape)}")
    nt = _int(node_tile, "node_tile", pts.device)
    if tuple(nt.shape) != (pts.shape[0],):
        raise ValueError(f"node_tile must have shape ({pts.shape[0]},), got {tuple(nt.shape)}")
    if nt.numel() and (int(nt.min()) < 0 or int(nt.max()) >= poses.shape[0]):
        raise ValueError(f"node_tile values must index tile_pose's {poses.shape[0]} tiles")
    gaps = _seam_core(pts, nt, poses, tile_size, tolerance, symmetric)
    return _out(gaps.to(pts.dtype), numpy_mode)


def seam_gaps(
    points_a, points_b, pose_a, pose_b, *, tile_size=64.0, tolerance=0.5, symmetric=False
):
    """Seam gaps (m) between two edge-neighbouring tiles, lanes in the world frame.

    ``points_a`` ``(n, P, 2)`` lanes of tile k and ``points_b`` ``(m, P, 2)`` of tile k+1,
    both in world coordinates; ``pose_a``, ``pose_b`` ``(3,)`` the tiles' poses
    [cx, cy, θ] (same θ, centres one ``tile_size`` apart along a tile axis). For each
    endpoint of a lane of tile k on the shared edge (within ``tolerance``): the distance
    to the nearest endpoint of the complementary kind (end <-> start, covering oncoming
    lanes) of tile k+1 on the edge; ``inf`` if there is none. ``symmetric=True`` adds the
    gaps measured from tile k+1's endpoints. Returns a 1-D array; report its median.
    """
    numpy_mode = not _is_torch(points_a)
    pa = _float(points_a, "points_a")
    pb = _float(points_b, "points_b", pa)
    for name, arr in (("points_a", pa), ("points_b", pb)):
        if arr.ndim != 3 or arr.shape[-1] != 2 or arr.shape[1] < 2:
            raise ValueError(
                f"{name} must have shape (n, P, 2) with P >= 2, got {tuple(arr.shape)}"
            )
        ones = torch.ones(arr.shape[:-1], dtype=torch.bool, device=arr.device)
        _check_finite(arr, ones, name)
    qa, qb = _pose(pose_a, "pose_a", pa), _pose(pose_b, "pose_b", pa)
    if qa.shape != (3,) or qb.shape != (3,):
        raise ValueError(
            f"pose_a and pose_b must have shape (3,), got {tuple(qa.shape)} and {tuple(qb.shape)}"
        )
    poses = torch.stack([qa, qb]).to(torch.float64)
    cells = _grid_cells(poses, _check_positive(tile_size, "tile_size"), _check_tolerance(tolerance))
    if int(cells[1].abs().sum()) != 1:
        raise ValueError(
            f"tiles must be edge neighbours (centres {tile_size} m apart along a tile axis); "
            f"tile b sits at grid offset {tuple(cells[1].tolist())} from tile a"
        )
    # endpoints only need float64 tile-frame coordinates, so bring both to their frames
    ta = _rotate(pa[:, [0, -1]].to(torch.float64) - poses[0, :2], poses[0, 2], -1.0)
    tb = _rotate(pb[:, [0, -1]].to(torch.float64) - poses[1, :2], poses[1, 2], -1.0)
    pts = torch.cat([ta, tb])  # (n + m, 2, 2): first and last point of every lane
    nt = torch.cat(
        [
            torch.zeros(pa.shape[0], dtype=torch.int64, device=pa.device),
            torch.ones(pb.shape[0], dtype=torch.int64, device=pa.device),
        ]
    )
    gaps = _seam_core(pts, nt, poses, tile_size, tolerance, symmetric)
    return _out(gaps.to(pa.dtype), numpy_mode)


def _live_tiles(tile_cell, first_step, last_step):
    cells = _int(tile_cell, "tile_cell", "cpu")
    if cells.ndim != 2 or cells.shape[1] != 2:
        raise ValueError(f"tile_cell must have shape (k, 2), got {tuple(cells.shape)}")
    first = _int(first_step, "first_step", "cpu")
    last = _int(last_step, "last_step", "cpu")
    k = cells.shape[0]
    if tuple(first.shape) != (k,) or tuple(last.shape) != (k,):
        raise ValueError(
            f"first_step and last_step must have shape ({k},) like tile_cell's rows, got "
            f"{tuple(first.shape)} and {tuple(last.shape)}"
        )
    if bool((last < first).any()):
        raise ValueError("every live interval needs first_step <= last_step")
    return cells, first, last


def drive_seam_gaps(
    points, lane_tile, tile_id, tile_cell, first_step, last_step, *, tile_size=64.0, tolerance=0.5
):
    """Seam gaps (m) of the map a drive saw: every seam between two tiles that were live
    at the same step, measured once, with :func:`seam_gaps` (``symmetric=True``).

    The one seam-gap definition (the world, its recorder, the benchmarks and ``simsci
    driving metrics`` use it): for every lane end point within ``tolerance`` of an edge
    shared by two grid-neighbour tiles, the distance to the nearest end point of the
    complementary kind (a lane's end meets a lane's start) of the other tile on that
    edge; ``inf`` when there is none (a lane cut off at the seam). End points of both
    tiles count.

    ``points`` ``(n, P, 2)``: lanes in their tile's frame (tile (i, j) is centred at
    ``tile_size (i, j)``, axes as the world's); ``lane_tile`` ``(n,)``: the tile version
    each lane belongs to (a value of ``tile_id``). ``tile_id``, ``tile_cell`` ``(k, 2)``,
    ``first_step``, ``last_step`` ``(k,)``: the intervals of steps each version was live
    (a version may have several). Returns float64 ``(g,)`` (NumPy).
    """
    pts = _float(points, "points").to(torch.float64)
    if pts.ndim != 3 or pts.shape[-1] != 2 or pts.shape[1] < 2:
        raise ValueError(f"points must have shape (n, P, 2) with P >= 2, got {tuple(pts.shape)}")
    lane_of = _int(lane_tile, "lane_tile", "cpu")
    if tuple(lane_of.shape) != (pts.shape[0],):
        raise ValueError(f"lane_tile must have shape ({pts.shape[0]},), got {tuple(lane_of.shape)}")
    ids = _int(tile_id, "tile_id", "cpu")
    cells, first, last = _live_tiles(tile_cell, first_step, last_step)
    if tuple(ids.shape) != (cells.shape[0],):
        raise ValueError(f"tile_id must have shape ({cells.shape[0]},), got {tuple(ids.shape)}")
    cell_of = {}
    for v, c in zip(ids.tolist(), cells.tolist()):
        if cell_of.setdefault(v, tuple(c)) != tuple(c):
            raise ValueError(f"tile version {v} is recorded at two cells, {cell_of[v]} and {c}")
    # pairs of 4-neighbour versions whose live intervals overlap, each pair once
    c, f, la, v = cells.numpy(), first.numpy(), last.numpy(), ids.numpy()
    near = np.abs(c[:, None] - c[None]).sum(-1) == 1
    overlap = (f[:, None] <= la[None]) & (f[None] <= la[:, None])
    r, q = np.nonzero(near & overlap & (v[:, None] < v[None]))
    gaps = [torch.zeros(0, dtype=torch.float64)]
    for a, b in sorted(set(zip(v[r].tolist(), v[q].tolist()))):
        centre = [tile_size * torch.tensor(cell_of[u], dtype=torch.float64) for u in (a, b)]
        wa, wb = pts[lane_of == a] + centre[0], pts[lane_of == b] + centre[1]
        if len(wa) or len(wb):  # an empty neighbour: its partners' gaps are inf
            pose_a, pose_b = (torch.cat([cc, torch.zeros(1, dtype=torch.float64)]) for cc in centre)
            gaps.append(
                seam_gaps(
                    wa, wb, pose_a, pose_b, tile_size=tile_size, tolerance=tolerance, symmetric=True
                )
            )
    return torch.cat(gaps).numpy()


def drive_tile_coverage(xy, tile_cell, first_step, last_step, *, tile_size=64.0) -> float:
    """Fraction of the steps t of a drive whose position ``xy[t]`` (``(T, 2)``, world
    frame) lies in the cell of a tile live at t (``tile_cell`` ``(k, 2)``, live from
    ``first_step`` to ``last_step``, inclusive; cell (i, j) is the square of side
    ``tile_size`` centred at ``tile_size (i, j)``). 1.0 for a recording that holds every
    tile the ego drove on; NaN for an empty drive."""
    p = _float(xy, "xy").to(torch.float64)
    if p.ndim != 2 or p.shape[1] != 2:
        raise ValueError(f"xy must have shape (T, 2), got {tuple(p.shape)}")
    cells, first, last = _live_tiles(tile_cell, first_step, last_step)
    if p.shape[0] == 0:
        return math.nan
    here = torch.floor(p.cpu() / tile_size + 0.5).to(torch.int64)  # (T, 2)
    t = torch.arange(p.shape[0])[:, None]
    live = (t >= first[None]) & (t <= last[None])  # (T, k)
    same = (here[:, None, :] == cells[None]).all(-1)
    return float((live & same).any(-1).double().mean())


# ------------------------------------------------------------------ distribution distances
def _feats(x, name: str) -> tuple[torch.Tensor, bool]:
    numpy_mode = not _is_torch(x)
    t = _float(x, name).to(torch.float64)
    if t.ndim == 1:
        t = t[:, None]
    if t.ndim != 2:
        raise ValueError(f"{name} must have shape (n,) or (n, d), got {tuple(t.shape)}")
    if t.shape[0] < 2:
        raise ValueError(f"{name} needs at least 2 samples, got {t.shape[0]}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} has NaN or inf; drop those samples")
    return t, numpy_mode


def _pair(feats_a, feats_b):
    a, numpy_mode = _feats(feats_a, "feats_a")
    b, _ = _feats(feats_b, "feats_b")
    b = b.to(a.device)
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"feats_a and feats_b must have the same dimension d, got {a.shape[1]} and {b.shape[1]}"
        )
    out_dtype = feats_a.dtype if _is_torch(feats_a) and feats_a.is_floating_point() else None
    return a, b, numpy_mode, out_dtype


def _sqrtm_psd(c: torch.Tensor) -> torch.Tensor:
    w, v = torch.linalg.eigh((c + c.T) / 2)
    return (v * w.clamp_min(0).sqrt()) @ v.T


def frechet_distance(feats_a, feats_b):
    r"""Squared Fréchet distance between Gaussians fitted to ``feats_a`` ``(n, d)`` and
    ``feats_b`` ``(m, d)`` (1-D input = d 1):
    :math:`\|\mu_a-\mu_b\|^2 + \operatorname{tr}(\Sigma_a+\Sigma_b-2(\Sigma_a^{1/2}
    \Sigma_b\Sigma_a^{1/2})^{1/2})` (the FID convention; units of the features squared).
    """
    a, b, numpy_mode, out_dtype = _pair(feats_a, feats_b)
    mu_a, mu_b = a.mean(0), b.mean(0)
    ca = torch.cov(a.T, correction=1).reshape(a.shape[1], a.shape[1])
    cb = torch.cov(b.T, correction=1).reshape(b.shape[1], b.shape[1])
    sa = _sqrtm_psd(ca)
    mid = sa @ cb @ sa
    tr_sqrt = torch.linalg.eigvalsh((mid + mid.T) / 2).clamp_min(0).sqrt().sum()
    fd = ((mu_a - mu_b) ** 2).sum() + torch.trace(ca) + torch.trace(cb) - 2 * tr_sqrt
    fd = fd.clamp_min(0)
    return float(fd) if numpy_mode else fd.to(out_dtype or torch.float64)


def _subsample(x: torch.Tensor, k: int | None, gen: torch.Generator) -> torch.Tensor:
    if k is None or x.shape[0] <= k:
        return x
    idx = torch.randperm(x.shape[0], generator=gen)[:k].to(x.device)
    return x[idx]


def _dist(x, y):
    return torch.cdist(x, y, compute_mode="donot_use_mm_for_euclid_dist")


def mmd(feats_a, feats_b, kernel="rbf", bandwidth=None, *, max_samples=2000, seed=0):
    r"""Unbiased squared maximum mean discrepancy between samples ``feats_a`` ``(n, d)``
    and ``feats_b`` ``(m, d)`` (1-D = d 1):

    .. math:: \frac{\sum_{i\ne j}k(a_i,a_j)}{n(n-1)} + \frac{\sum_{i\ne j}k(b_i,b_j)}
              {m(m-1)} - \frac{2}{nm}\sum_{i,j}k(a_i,b_j)

    ``kernel``: ``"rbf"`` :math:`e^{-|x-y|^2/(2h^2)}` or ``"laplacian"``
    :math:`e^{-|x-y|/h}`; ``bandwidth`` h (same units as the features) or ``None`` for
    the median of the non-zero pooled pairwise distances (1 if all points coincide).
    At most ``max_samples`` points per side are used, drawn with ``seed``.
    """
    if kernel not in _KERNELS:
        raise ValueError(f"kernel must be one of {_KERNELS}, got {kernel!r}")
    if max_samples is not None and int(max_samples) < 2:
        raise ValueError(f"max_samples must be >= 2 or None, got {max_samples!r}")
    a, b, numpy_mode, out_dtype = _pair(feats_a, feats_b)
    gen = torch.Generator().manual_seed(int(seed))
    a = _subsample(a, max_samples, gen)
    b = _subsample(b, max_samples, gen)
    if bandwidth is None:
        pool = _subsample(torch.cat([a, b]), 1000, gen)
        d = _dist(pool, pool)
        iu = torch.triu_indices(pool.shape[0], pool.shape[0], 1, device=pool.device)
        d = d[iu[0], iu[1]]
        d = d[d > 0]
        h = d.median() if d.numel() else torch.ones((), dtype=a.dtype, device=a.device)
    else:
        h = torch.as_tensor(_check_positive(bandwidth, "bandwidth"), dtype=a.dtype, device=a.device)

    def k(x, y):
        dist = _dist(x, y)
        if kernel == "rbf":
            return torch.exp(-(dist**2) / (2 * h**2))
        return torch.exp(-dist / h)

    n, m = a.shape[0], b.shape[0]
    kaa = (k(a, a).sum() - n) / (n * (n - 1))  # k(x, x) = 1 for both kernels
    kbb = (k(b, b).sum() - m) / (m * (m - 1))
    kab = k(a, b).sum() / (n * m)
    val = kaa + kbb - 2 * kab
    return float(val) if numpy_mode else val.to(out_dtype or torch.float64)


def compare_lane_stats(stats_a, stats_b, *, keys=None, max_samples=2000, seed=0):
    """Per-statistic distances between two :func:`lane_graph_stats` dicts (e.g. ground
    truth vs generated; concatenate several graphs' dicts key by key first).

    Returns ``{key: {"frechet": float, "mmd": float, "n_a": int, "n_b": int}}`` with the
    squared 1-D Fréchet distance (Wasserstein-2² between the fitted Gaussians,
    :func:`frechet_distance`) and the unbiased RBF MMD² (:func:`mmd`, median-heuristic
    bandwidth); NaN for a statistic with fewer than 2 values on a side. ``keys``
    defaults to every key of ``stats_a``; each must be in ``stats_b``.
    """
    keys = list(stats_a) if keys is None else list(keys)
    missing = [key for key in keys if key not in stats_a or key not in stats_b]
    if missing:
        raise ValueError(
            f"statistics {missing} are missing from stats_a or stats_b; both need the "
            f"same keys (have {sorted(stats_a)} and {sorted(stats_b)})"
        )
    out = {}
    for key in keys:
        va = np.asarray(
            stats_a[key].detach().cpu() if _is_torch(stats_a[key]) else stats_a[key],
            dtype=np.float64,
        ).reshape(-1)
        vb = np.asarray(
            stats_b[key].detach().cpu() if _is_torch(stats_b[key]) else stats_b[key],
            dtype=np.float64,
        ).reshape(-1)
        va, vb = va[np.isfinite(va)], vb[np.isfinite(vb)]
        row = {"frechet": math.nan, "mmd": math.nan, "n_a": int(va.size), "n_b": int(vb.size)}
        if va.size >= 2 and vb.size >= 2:
            row["frechet"] = frechet_distance(va, vb)
            row["mmd"] = mmd(va, vb, max_samples=max_samples, seed=seed)
        out[key] = row
    return out
