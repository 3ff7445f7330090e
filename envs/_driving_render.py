"""Top-down frames of a driving scene (numpy only: no plotting library needed).

The view is ``VIEW_M`` metres square, centred on the ego and rotated so the ego faces up.
Lanes are painted as grey bands of their width with a thin centre line, vehicles as
filled boxes (the ego green, others blue).
"""

from __future__ import annotations

import numpy as np

SIZE = 256  # pixels
VIEW_M = 80.0  # metres across
BACKGROUND = (34, 90, 40)
ROAD = (90, 90, 90)
CENTRE = (150, 150, 150)
EGO = (40, 200, 80)
OTHER = (60, 110, 230)


def _to_pixels(xy: np.ndarray, ego: np.ndarray) -> np.ndarray:
    """World points (..., 2) -> pixel (col, row) with the ego at the centre facing up."""
    c, s = ego[3], ego[4]
    n = np.hypot(c, s) or 1.0
    c, s = c / n, s / n
    d = xy - ego[:2]
    fwd = d[..., 0] * c + d[..., 1] * s
    left = -d[..., 0] * s + d[..., 1] * c
    scale = SIZE / VIEW_M
    return np.stack([SIZE / 2 - left * scale, SIZE / 2 - fwd * scale], -1)


def _fill_polygon(img: np.ndarray, poly: np.ndarray, color) -> None:
    """Fill a convex polygon (k, 2) in pixel coordinates."""
    lo = np.floor(poly.min(0)).astype(int)
    hi = np.ceil(poly.max(0)).astype(int)
    lo = np.clip(lo, 0, SIZE - 1)
    hi = np.clip(hi, 0, SIZE - 1)
    if (hi < lo).any():
        return
    cols, rows = np.meshgrid(np.arange(lo[0], hi[0] + 1), np.arange(lo[1], hi[1] + 1))
    p = np.stack([cols + 0.5, rows + 0.5], -1)
    inside = np.ones(cols.shape, dtype=bool)
    sign = None
    for i in range(len(poly)):
        a, b = poly[i], poly[(i + 1) % len(poly)]
        cross = (b[0] - a[0]) * (p[..., 1] - a[1]) - (b[1] - a[1]) * (p[..., 0] - a[0])
        if sign is None:
            sign = np.sign(np.sum(cross)) or 1.0
        inside &= cross * sign >= 0
    img[rows[inside], cols[inside]] = color


def top_down(road, agents: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """An ``(SIZE, SIZE, 3)`` uint8 frame of ``road`` and ``agents`` (V, 7), agent 0 the ego."""
    img = np.empty((SIZE, SIZE, 3), dtype=np.uint8)
    img[:] = BACKGROUND
    ego = agents[0].astype(np.float64)
    reach = VIEW_M * 0.75
    for lane in range(len(road.length)):
        pts = road.points[lane, : road.num_points[lane]]
        near = np.abs(pts - ego[:2]).max(-1) < reach
        if not near.any():
            continue
        pts = pts[max(int(np.argmax(near)) - 1, 0) : len(near) - int(np.argmax(near[::-1])) + 1]
        half = 0.5 * road.width[lane]
        tangent = np.gradient(pts, axis=0)
        tangent /= np.maximum(np.linalg.norm(tangent, axis=-1, keepdims=True), 1e-9)
        normal = np.stack([-tangent[:, 1], tangent[:, 0]], -1)
        left, right = pts + half * normal, pts - half * normal
        pl, pr = _to_pixels(left, ego), _to_pixels(right, ego)
        for i in range(len(pts) - 1):
            _fill_polygon(img, np.stack([pl[i], pl[i + 1], pr[i + 1], pr[i]]), ROAD)
        centre = _to_pixels(pts, ego)
        keep = (centre >= 0).all(-1) & (centre < SIZE).all(-1)
        c = centre[keep].astype(int)
        img[c[:, 1], c[:, 0]] = CENTRE
    for i in np.flatnonzero(valid):
        a = agents[i].astype(np.float64)
        c, s = a[3], a[4]
        hl, hw = a[5] / 2, a[6] / 2
        u, v = np.array([c, s]), np.array([-s, c])
        corners = np.stack(
            [
                a[:2] + hl * u - hw * v,
                a[:2] + hl * u + hw * v,
                a[:2] - hl * u + hw * v,
                a[:2] - hl * u - hw * v,
            ]
        )
        _fill_polygon(img, _to_pixels(corners, ego), EGO if i == 0 else OTHER)
    return img
