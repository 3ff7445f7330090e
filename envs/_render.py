"""``render_mode="rgb_array"``: small numpy frames, no plotting library.

Frames are ``(240, 320, 3)`` uint8. The default frame draws the flattened state as a
polyline over the width (a PDE field's profile; an ODE state's components joined) on
a symmetric vertical scale that grows with the largest value seen, the target (when
the task has one) in grey. Dynamics may draw their own (the pendulum draws the rod).
Pure numpy so rendering needs no optional dependency (SB3's ``make_vec_env`` asks for
``rgb_array`` by default).
"""

from __future__ import annotations

import numpy as np

HEIGHT, WIDTH = 240, 320
BACKGROUND = (255, 255, 255)
AXIS = (200, 200, 200)
TARGET = (150, 150, 150)
STATE = (31, 119, 180)


def blank() -> np.ndarray:
    img = np.empty((HEIGHT, WIDTH, 3), dtype=np.uint8)
    img[:] = BACKGROUND
    return img


def line(img: np.ndarray, p0, p1, color, width: int = 1) -> None:
    """Draw a segment between pixel coordinates ``(x, y)`` (clipped to the image)."""
    n = int(max(abs(p1[0] - p0[0]), abs(p1[1] - p0[1]), 1)) + 1
    xs = np.linspace(p0[0], p1[0], n)
    ys = np.linspace(p0[1], p1[1], n)
    for dx in range(-(width // 2), width // 2 + 1):
        for dy in range(-(width // 2), width // 2 + 1):
            x = np.round(xs + dx).astype(int)
            y = np.round(ys + dy).astype(int)
            keep = (x >= 0) & (x < img.shape[1]) & (y >= 0) & (y < img.shape[0])
            img[y[keep], x[keep]] = color


def polyline(img: np.ndarray, values: np.ndarray, scale: float, color, width: int = 1) -> None:
    """Draw ``values`` (1-D) across the image width on the vertical range +-scale."""
    values = np.asarray(values, dtype=np.float64).ravel()
    n = len(values)
    xs = np.linspace(10, WIDTH - 10, n) if n > 1 else np.array([WIDTH / 2])
    ys = HEIGHT / 2 - values / scale * (HEIGHT / 2 - 10)
    if n == 1:
        line(img, (xs[0] - 5, ys[0]), (xs[0] + 5, ys[0]), color, width)
    for i in range(n - 1):
        line(img, (xs[i], ys[i]), (xs[i + 1], ys[i + 1]), color, width)


def profile_frame(state: np.ndarray, target: np.ndarray | None, scale: float) -> np.ndarray:
    img = blank()
    line(img, (0, HEIGHT / 2), (WIDTH - 1, HEIGHT / 2), AXIS)
    if target is not None:
        scale = max(scale, 1.1 * float(np.abs(target).max()))
        polyline(img, target, scale, TARGET)
    polyline(img, state, scale, STATE, width=3)
    return img


def pendulum_frame(theta: float) -> np.ndarray:
    """The rod from the pivot at angle ``theta`` from the downward vertical."""
    img = blank()
    cx, cy, r = WIDTH / 2, HEIGHT / 2, HEIGHT * 0.4
    tip = (cx + r * np.sin(theta), cy + r * np.cos(theta))
    line(img, (cx, cy - r), (cx, cy - r + 1), TARGET, width=5)  # the upright target
    line(img, (cx, cy), tip, STATE, width=5)
    return img
