r"""``pendulum_images``: irregularly observed, noisy image sequences of a damped pendulum.

Built like the pendulum benchmark of Schirmer, Eltayeb, Lessmann & Rudolph (2022),
"Modeling irregular time series with continuous recurrent units", ICML (after Becker
et al. 2019, "Recurrent Kalman networks"): small grayscale frames of a swinging
pendulum, seen at an irregular subset of a regular time grid, with pixel noise and
occasional frames that are mostly noise, and the pendulum's angle as the regression
target. The numbers below are simsci's choices, documented here.

**Dynamics.** The registered ``damped_pendulum`` system,
:math:`\ddot\theta = -(g/L)\sin\theta - c\,\dot\theta`, solved as one batched
``dopri5`` solve (rtol = atol = 1e-7: angle errors ~1e-5 rad, far below a pixel) on
``t = 0, dt, ..., t_end`` (defaults 0.1 and 10: 101 grid frames). Per episode the
length L and damping c are drawn uniformly from the system's ``param_ranges`` (L in
[0.5, 2] m, c in [0, 0.5] 1/s; g = 9.81 m/s^2 fixed), so periods range over 1.4-2.8 s
(14-28 grid frames); initial states follow the system's own distribution (theta
uniform in [-pi/2, pi/2], omega in [-1, 1]).

**Rendering.** A ``size x size`` frame (default 24) with the pivot at the centre and
theta = 0 hanging down: the bob is a disc of radius ``0.11 size`` pixels centred at
``(c + r sin theta, c + r cos theta)`` (column, row; ``c = (size - 1) / 2``,
``r = 0.36 size``). The camera shows every pendulum at the same pixel length, so a frame
shows the angle alone and L must be inferred from the motion (the period). Pixel
intensity is the disc's coverage with a one-pixel linear edge,
``clip(radius + 1/2 - d, 0, 1)`` with d the distance from the pixel centre to the bob
centre: anti-aliased, smooth in theta, values in [0, 1].

**Observation times.** ``keep`` (default 0.5) of the grid frames per episode,
``max(2, round(keep * L))`` of them, uniformly without replacement: a random subset of
the regular grid, as in :func:`simsci.systems.generate`.

**Noise model.** Each observed frame is ``clip(clean + noise_std * eps, 0, 1)`` with
per-pixel i.i.d. ``eps ~ N(0, 1)`` (default noise_std 0.05). With probability
``corrupt_prob`` (default 0.1), independently per observed frame, the frame is heavily
corrupted instead: ``clip((1 - w) clean + w u + noise_std * eps, 0, 1)`` with a weight
``w ~ U(0.5, 1)`` per frame and ``u ~ U(0, 1)`` per pixel (the bob fades into uniform
noise). The per-step field ``corruption`` stores ``w`` (0 for a clean frame).

**File.** kind "state", system "pendulum_images":

- ``x`` float32 (S, size*size): the observed frames, row-major flattened;
  ``meta["image_shape"] = [size, size]`` reshapes them (``x.reshape(-1, *shape)``).
- ``angle`` float32 (S, 2): (sin theta, cos theta) at each frame, names
  ``["sin", "cos"]``, for per-step regression; ``state`` float32 (S, 2): (theta, omega),
  the latent ground truth; ``corruption`` float32 (S,).
- ``/episodes/label`` float32 (N, 2): (sin theta, cos theta) at the episode's last stored
  time point (names ``["sin_theta", "cos_theta"]``); ``/episodes/params`` (N, 3): g, L,
  damping; ``/episodes/split``: train/val/test by ``split`` (default 0.8, 0.1, 0.1).
- ``/stats/x`` (per pixel, train split) from the writer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from simsci import data as sdata
from simsci._seeding import (
    check_fraction,
    check_positive,
    check_split,
    kept_indices,
    progress_bar,
    split_ids,
    streams,
)
from simsci.datasets._registry import BuildOptions, check_compression, register_dataset
from simsci.systems import get

_STREAMS = ("params", "initial", "keep", "noise", "split")
#: episodes per batched pendulum solve
_SOLVE_BATCH = 4096
#: rtol = atol of the dopri5 solve
_TOL = 1e-7


def render_pendulum(theta: np.ndarray, size: int) -> np.ndarray:
    """Frames ``(len(theta), size, size)`` float32 in [0, 1] of a bob at angles ``theta``
    (see the module docstring for the geometry)."""
    theta = np.asarray(theta, dtype=np.float64).reshape(-1)
    c = (size - 1) / 2.0
    r, radius = 0.36 * size, 0.11 * size
    col = c + r * np.sin(theta)
    row = c + r * np.cos(theta)
    grid = np.arange(size, dtype=np.float64)
    d = np.sqrt(
        (grid[None, None, :] - col[:, None, None]) ** 2
        + (grid[None, :, None] - row[:, None, None]) ** 2
    )
    return np.clip(radius + 0.5 - d, 0.0, 1.0).astype(np.float32)


@register_dataset(
    "pendulum_images",
    "damped pendulum frames (24x24), irregular times, pixel noise + corrupted frames; "
    "label sin/cos of the last angle",
)
def pendulum_images(
    n: int,
    common: BuildOptions,
    *,
    keep: float = 0.5,
    size: int = 24,
    t_end: float = 10.0,
    dt: float = 0.1,
    noise_std: float = 0.05,
    corrupt_prob: float = 0.1,
    compression: str | None = None,
) -> Path:
    """Write ``n`` pendulum image sequences to ``common.out`` (module docstring: the model,
    the noise and the file layout); returns the path. Call through
    ``simsci.datasets.make_dataset("pendulum_images", n, out=...)``."""
    keep = check_fraction("keep", keep, what="fraction of the grid frames observed")
    size = check_positive("size", size, integer=True, minimum=8)
    t_end = check_positive("t_end", t_end)
    dt = check_positive("dt", dt)
    steps = round(t_end / dt)
    if steps < 1 or abs(steps - t_end / dt) > 1e-6 * max(1.0, t_end / dt):
        raise ValueError(
            f"t_end must be a positive multiple of dt: t_end={t_end}, dt={dt} gives "
            f"{t_end / dt:g} steps; choose t_end = k * dt"
        )
    noise_std = check_positive("noise_std", noise_std, minimum=0.0)
    corrupt_prob = check_fraction(
        "corrupt_prob", corrupt_prob, allow_zero=True, what="probability of a corrupted frame"
    )
    fractions = check_split(common.split)
    compression = check_compression(compression)

    gens = streams(common.seed, _STREAMS)
    pendulum = get("damped_pendulum")
    grid = dt * np.arange(steps + 1, dtype=np.float64)
    rows, states = _swing(pendulum, n, grid, gens)
    kept = kept_indices(n, steps + 1, keep, gens["keep"])
    splits = split_ids(n, fractions, gens["split"])
    meta = {
        **common.meta("pendulum_images", n),
        "image_shape": [size, size],
        "t_end": t_end,
        "dt": dt,
        "grid_length": steps + 1,
        "keep": keep,
        "kept_per_episode": int(kept.shape[1]),
        "simulator": {
            "system": pendulum.config(),
            "method": pendulum.default_method,
            "rtol": _TOL,
            "atol": _TOL,
            "sampled": ["L", "damping"],
        },
        "render": {"pivot": "centre", "length_px": 0.36 * size, "bob_radius_px": 0.11 * size},
        "noise_model": {
            "pixel_noise_std": noise_std,
            "corrupt_prob": corrupt_prob,
            "corrupt_weight": [0.5, 1.0],
            "corrupted": "clip((1 - w) clean + w U(0,1) + std N(0,1), 0, 1)",
        },
        "label": "(sin, cos) of theta at the episode's last stored time point",
        "split": list(fractions),
    }
    names = {
        "angle": ["sin", "cos"],
        "state": ["theta", "omega"],
        "label": ["sin_theta", "cos_theta"],
        "params": list(pendulum.param_names),
    }
    bar = progress_bar(n, "pendulum_images", common.progress)
    try:
        with sdata.TrajectoryWriter(
            common.out,
            kind="state",
            system="pendulum_images",
            meta=meta,
            names=names,
            units={"state": ["rad", "rad/s"], "params": ["m/s^2", "m", "1/s"]},
            compression=compression,
        ) as writer:
            for i in range(n):
                idx = kept[i]
                frames = _observe(states[i, idx], size, noise_std, corrupt_prob, gens["noise"])
                writer.append(
                    {"t": grid[idx], **frames, "params": rows[i].numpy(), "split": int(splits[i])}
                )
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return writer.path


def _swing(pendulum, n: int, grid: np.ndarray, gens) -> tuple[torch.Tensor, np.ndarray]:
    """(parameter rows (n, 3), states (n, L, 2)) of n pendulums with sampled L and damping
    (g fixed) from the system's initial states, solved on ``grid`` in batches."""
    rows = pendulum.sample_params(n, generator=gens["params"])
    rows[:, pendulum.param_names.index("g")] = pendulum.params["g"]
    x0 = pendulum.sample_initial(n, generator=gens["initial"])
    states = np.empty((n, len(grid), 2), dtype=np.float64)
    t = torch.as_tensor(grid)
    with torch.no_grad():
        for b0 in range(0, n, _SOLVE_BATCH):
            b1 = min(n, b0 + _SOLVE_BATCH)
            xs = pendulum.simulate(x0[b0:b1], t, rows[b0:b1], rtol=_TOL, atol=_TOL)
            states[b0:b1] = xs.numpy()
    return rows, states


def _observe(states: np.ndarray, size: int, noise_std: float, corrupt_prob: float, noise):
    """One episode's observed frames and ground truth at its kept ``states`` (S, 2); draws
    the pixel noise and the corruptions from the generator ``noise``."""
    theta = states[:, 0]
    clean = render_pendulum(theta, size).reshape(len(theta), -1)
    eps = torch.randn(clean.shape, generator=noise, dtype=torch.float64).numpy()
    hit = torch.rand(len(theta), generator=noise, dtype=torch.float64).numpy()
    w = 0.5 + 0.5 * torch.rand(len(theta), generator=noise, dtype=torch.float64).numpy()
    u = torch.rand(clean.shape, generator=noise, dtype=torch.float64).numpy()
    w = np.where(hit < corrupt_prob, w, 0.0)
    frames = (1.0 - w[:, None]) * clean + w[:, None] * u + noise_std * eps
    angle = np.stack([np.sin(theta), np.cos(theta)], axis=-1)
    return {
        "x": np.clip(frames, 0.0, 1.0).astype(np.float32),
        "angle": angle.astype(np.float32),
        "state": states.astype(np.float32),
        "corruption": w.astype(np.float32),
        "label": angle[-1].astype(np.float32),
    }
