r"""Planar polyline geometry for the driving world: arcs, resampling, arc length, heading,
curvature, intersections (numpy float64, no state).

Conventions: points are ``(n, 2)`` arrays in metres, x east, y north; a heading
:math:`\theta` is counter-clockwise from +x; a curvature :math:`\kappa > 0` turns left.

- :func:`arc_points` evaluates a constant-curvature piece exactly,
  :math:`p(s) = p_0 + s\,\mathrm{sinc}(\kappa s / 2)\,(\cos, \sin)(\theta_0 + \kappa s/2)`,
  which stays exact (no division by :math:`\kappa`) as :math:`\kappa \to 0`.
- :func:`path_points` chains such pieces (a "clothoid-free" spline: continuous position
  and heading, piecewise constant curvature), :func:`path_sample` samples one uniformly in
  arc length.
- :func:`resample` re-spaces any polyline uniformly in arc length (``n - 1 =
  ceil(length / max_spacing)`` chords, none longer than ``max_spacing``).
- :func:`curvature` is the discrete (Menger) curvature of consecutive triples,
  :math:`\kappa = 2 |(b - a) \times (c - b)| / (|b - a| |c - b| |c - a|)`, exact on
  points of a circle whatever their spacing.
- :func:`polyline_intersections` finds every crossing of two polylines with its arc
  length on each (vectorised segment-segment test).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "arc_length",
    "arc_points",
    "curvature",
    "headings",
    "path_points",
    "path_sample",
    "point_at",
    "polyline_intersections",
    "resample",
    "wrap_angle",
]


def wrap_angle(a):
    """Wrap angles to [-pi, pi)."""
    return (np.asarray(a, dtype=np.float64) + math.pi) % (2.0 * math.pi) - math.pi


def arc_points(x0: float, y0: float, theta0: float, kappa: float, s) -> np.ndarray:
    """Points at arc lengths ``s`` (any shape, may be negative) along the circle (or line,
    ``kappa = 0``) through ``(x0, y0)`` with heading ``theta0``: shape ``s.shape + (2,)``."""
    s = np.asarray(s, dtype=np.float64)
    half = 0.5 * kappa * s
    chord = s * np.sinc(half / math.pi)
    ang = theta0 + half
    return np.stack([x0 + chord * np.cos(ang), y0 + chord * np.sin(ang)], axis=-1)


def path_points(x0, y0, theta0, lengths, curvatures, s) -> tuple[np.ndarray, np.ndarray]:
    """Points ``(n, 2)`` and headings ``(n,)`` at arc lengths ``s`` (1-D, within
    ``[0, sum(lengths)]``) of a chain of constant-curvature pieces starting at the pose
    ``(x0, y0, theta0)``."""
    lengths = np.asarray(lengths, dtype=np.float64)
    curvatures = np.asarray(curvatures, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    m = len(lengths)
    xs, ys, ths = np.empty(m), np.empty(m), np.empty(m)
    x, y, th = float(x0), float(y0), float(theta0)
    for i in range(m):
        xs[i], ys[i], ths[i] = x, y, th
        x, y = arc_points(x, y, th, curvatures[i], lengths[i])
        th = th + curvatures[i] * lengths[i]
    starts = np.concatenate([[0.0], np.cumsum(lengths)[:-1]])
    idx = np.clip(np.searchsorted(starts, s, side="right") - 1, 0, m - 1)
    loc = s - starts[idx]
    k = curvatures[idx]
    half = 0.5 * k * loc
    chord = loc * np.sinc(half / math.pi)
    ang = ths[idx] + half
    pts = np.stack([xs[idx] + chord * np.cos(ang), ys[idx] + chord * np.sin(ang)], axis=-1)
    return pts, ths[idx] + k * loc


def path_sample(x0, y0, theta0, lengths, curvatures, max_spacing: float = 1.0) -> np.ndarray:
    """Sample a chain of constant-curvature pieces uniformly in arc length, chords at most
    ``max_spacing``: ``(n, 2)`` with ``n - 1 = ceil(total / max_spacing)``."""
    total = float(np.sum(lengths))
    n = max(2, math.ceil(total / max_spacing - 1e-9) + 1)
    return path_points(x0, y0, theta0, lengths, curvatures, np.linspace(0.0, total, n))[0]


def arc_length(points: np.ndarray) -> np.ndarray:
    """Cumulative arc length ``(n,)`` of a polyline ``(n, 2)``, starting at 0."""
    seg = np.hypot(*np.diff(points, axis=0).T)
    return np.concatenate([[0.0], np.cumsum(seg)])


def resample(points: np.ndarray, max_spacing: float = 1.0) -> np.ndarray:
    """Re-space a polyline ``(n, 2)`` uniformly in arc length with chords at most
    ``max_spacing``; the end points are kept exactly."""
    s = arc_length(points)
    total = s[-1]
    n = max(2, math.ceil(total / max_spacing - 1e-9) + 1)
    t = np.linspace(0.0, total, n)
    out = np.stack([np.interp(t, s, points[:, 0]), np.interp(t, s, points[:, 1])], axis=-1)
    out[0], out[-1] = points[0], points[-1]
    return out


def point_at(points: np.ndarray, s) -> np.ndarray:
    """Linear interpolation of a polyline ``(n, 2)`` at arc lengths ``s`` (clipped to the
    polyline): shape ``s.shape + (2,)``."""
    cum = arc_length(points)
    s = np.asarray(s, dtype=np.float64)
    return np.stack([np.interp(s, cum, points[:, 0]), np.interp(s, cum, points[:, 1])], -1)


def headings(points: np.ndarray) -> np.ndarray:
    """Heading ``(n,)`` at each vertex: of the adjacent chord at the ends, the mean
    direction of the two adjacent chords inside."""
    d = np.diff(points, axis=0)
    u = d / np.maximum(np.hypot(d[:, 0], d[:, 1]), 1e-300)[:, None]
    v = np.concatenate([u[:1], u[:-1] + u[1:], u[-1:]], axis=0)
    return np.arctan2(v[:, 1], v[:, 0])


def curvature(points: np.ndarray) -> np.ndarray:
    """Unsigned discrete (Menger) curvature ``(n - 2,)`` of consecutive vertex triples."""
    a, b, c = points[:-2], points[1:-1], points[2:]
    ab, bc, ac = b - a, c - b, c - a
    cross = ab[:, 0] * bc[:, 1] - ab[:, 1] * bc[:, 0]
    den = np.hypot(*ab.T) * np.hypot(*bc.T) * np.hypot(*ac.T)
    return 2.0 * np.abs(cross) / np.maximum(den, 1e-300)


def polyline_intersections(p: np.ndarray, q: np.ndarray, merge: float = 0.5) -> list:
    """Crossings of polylines ``p`` ``(n, 2)`` and ``q`` ``(m, 2)``.

    Returns a list of ``(s_p, s_q, x, y)``: the arc length of each crossing on ``p`` and
    ``q`` and the point. Crossings closer than ``merge`` metres along ``p`` (one crossing
    seen at a shared vertex) are reported once. Collinear overlaps are not crossings.
    """
    a, r = p[:-1], np.diff(p, axis=0)
    b, t = q[:-1], np.diff(q, axis=0)
    rxs = r[:, None, 0] * t[None, :, 1] - r[:, None, 1] * t[None, :, 0]
    ba = b[None, :, :] - a[:, None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        u = (ba[..., 0] * t[None, :, 1] - ba[..., 1] * t[None, :, 0]) / rxs
        v = (ba[..., 0] * r[:, None, 1] - ba[..., 1] * r[:, None, 0]) / rxs
    ok = (np.abs(rxs) > 1e-12) & (u >= 0) & (u <= 1) & (v >= 0) & (v <= 1)
    i, j = np.nonzero(ok)
    if len(i) == 0:
        return []
    cp, cq = arc_length(p), arc_length(q)
    sp = cp[i] + u[i, j] * (cp[i + 1] - cp[i])
    sq = cq[j] + v[i, j] * (cq[j + 1] - cq[j])
    xy = a[i] + u[i, j, None] * r[i]
    order = np.argsort(sp, kind="stable")
    out: list = []
    for k in order:
        if out and abs(sp[k] - out[-1][0]) < merge and abs(sq[k] - out[-1][1]) < merge:
            continue
        out.append((float(sp[k]), float(sq[k]), float(xy[k, 0]), float(xy[k, 1])))
    return out
