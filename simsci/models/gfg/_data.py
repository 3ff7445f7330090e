"""GFG's data side: the variants, velocities by finite differences, and what a model
reads off a trajectory file (episodes, scales, a latent-dimension hint).

Below both the model (:mod:`._model`) and its uses (:mod:`._uses`), which import it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from simsci.data import SPLITS
from simsci.datasets import lifted_from_config

#: the model's variants: GFG itself and its baselines (module docstring)
VARIANTS = ("tangent", "ambient", "latent", "known")
#: variants with a learned autoencoder (a chart of the manifold)
CHART_VARIANTS = ("tangent", "latent")


def finite_difference_velocity(t: Tensor, x: Tensor) -> Tensor:
    """Second-order finite-difference velocities of one episode on its own (irregular)
    grid: t (L,), x (L, D) -> (L, D).

    Interior points: the three-point central formula for unequal gaps h1, h2,
    v_j = (-h2/(h1(h1+h2))) x_{j-1} + ((h2-h1)/(h1 h2)) x_j + (h1/(h2(h1+h2))) x_{j+1};
    the two ends: the one-sided three-point formulas (also second order). Two points: the
    difference quotient at both. Needs L >= 2.
    """
    L = x.shape[0]
    if L < 2:
        raise ValueError(
            "finite-difference velocities need episodes of at least 2 steps (3 for second "
            "order), got 1: give the velocities as the step field 'v'"
        )
    t = t.to(x.dtype)
    if L == 2:
        q = (x[1] - x[0]) / (t[1] - t[0])
        return torch.stack([q, q])
    h = (t[1:] - t[:-1])[:, None]  # (L-1, 1)
    h1, h2 = h[:-1], h[1:]
    v = torch.empty_like(x)
    v[1:-1] = (
        -h2 / (h1 * (h1 + h2)) * x[:-2]
        + (h2 - h1) / (h1 * h2) * x[1:-1]
        + h1 / (h2 * (h1 + h2)) * x[2:]
    )
    a, b = h[0], h[1]  # the first two gaps
    v[0] = -(2 * a + b) / (a * (a + b)) * x[0] + (a + b) / (a * b) * x[1] - a / (b * (a + b)) * x[2]
    a, b = h[-2], h[-1]  # the last two gaps
    v[-1] = (
        b / (a * (a + b)) * x[-3] - (a + b) / (a * b) * x[-2] + (2 * b + a) / (b * (a + b)) * x[-1]
    )
    return v


# ------------------------------------------------------------------ data helpers
def episode_arrays(traj, split: str | None = None) -> list[dict]:
    """The episodes of a file (a split, or all) as dicts of numpy arrays t, x (and v)."""
    has_split = "split" in traj.episode_fields
    ids = np.arange(len(traj))
    if split is not None and has_split:
        code = SPLITS[split] if isinstance(split, str) else int(split)
        ids = ids[np.asarray(traj.column("split")) == code]
    fields = [f for f in ("t", "x", "v") if f in traj.step_fields]
    return [{**traj.read(int(i), fields), "episode": int(i)} for i in ids]


def data_statistics(traj) -> dict:
    """state_dim, x_mean (D), x_scale, time_scale of a file's training episodes."""
    if "x" not in traj.step_fields:
        raise ValueError(f"{traj.path}: gfg needs a step field 'x' (the states)")
    shape = tuple(traj.step_fields["x"].shape)
    if len(shape) != 1 or shape[0] < 2:
        raise ValueError(
            f"{traj.path}: gfg models vector states (x of per-step shape (D,), D >= 2); "
            f"x has per-step shape {shape}"
        )
    episodes = episode_arrays(traj, "train") or episode_arrays(traj)
    x = np.concatenate([e["x"] for e in episodes]).astype(np.float64)
    if not np.isfinite(x).all():
        raise ValueError(
            f"{traj.path}: the training states hold NaN or inf; gfg needs every state "
            "observed (drop or impute those episodes)"
        )
    if "v" in traj.step_fields:
        v = np.concatenate([e["v"] for e in episodes]).astype(np.float64)
    else:
        vs = []
        for e in episodes:
            if len(e["t"]) >= 2:
                t_e = torch.from_numpy(np.asarray(e["t"], dtype=np.float64))
                x_e = torch.from_numpy(np.asarray(e["x"], dtype=np.float64))
                vs.append(finite_difference_velocity(t_e, x_e).numpy())
        if not vs:
            raise ValueError(
                f"{traj.path}: no velocities: the file has no step field 'v' and no "
                "episode of 2 or more steps to take finite differences along"
            )
        v = np.concatenate(vs)
    gaps = [np.diff(np.asarray(e["t"], dtype=np.float64)) for e in episodes if len(e["t"]) > 1]
    median_gap = float(np.median(np.concatenate(gaps))) if gaps else None
    mean = x.mean(0)
    scale = float(np.sqrt(((x - mean) ** 2).sum(-1).mean()))
    speed = float(np.sqrt((v**2).sum(-1).mean()))
    if not (scale > 0 and np.isfinite(speed)):
        raise ValueError(f"{traj.path}: the training states do not vary (scale {scale})")
    return {
        "state_dim": shape[0],
        "x_mean": [float(m) for m in mean],
        "x_scale": scale,
        "time_scale": scale / speed if speed > 0 else 1.0,
        "median_gap": median_gap,
        "x": x,
    }


def latent_dim_hint(traj, stats: dict) -> int:
    """The manifold's dimension when the file says it, else a PCA estimate (99%)."""
    D = stats["state_dim"]
    meta = traj.meta
    if "manifold" in meta:
        return min(D - 1, int(lifted_from_config(meta["manifold"]).base_dim))
    if "network" in meta and D % 2 == 0:
        return D // 2  # a gene network's [u, s]: the slow manifold u ~ u*(s)
    x = stats["x"] - stats["x"].mean(0)
    s = np.linalg.svd(x, compute_uv=False) ** 2
    share = np.cumsum(s) / max(s.sum(), 1e-300)
    return int(min(D - 1, max(1, int(np.searchsorted(share, 0.99)) + 1)))
