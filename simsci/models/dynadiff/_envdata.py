"""Multi-environment trajectory files, grouped by environment.

A multi-environment file is an ordinary trajectory file (kind ``"state"`` or ``"field"``)
whose ``/episodes/params`` says which environment each episode belongs to: episodes
with identical parameter rows are one environment. :func:`load_environments` reads one
into :class:`EnvData`, environments in the order of their first episode, every episode
on the file's common regular time grid (DynaDiff's experts step one frame at a time, so
irregular or ragged files are refused with the reason).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["EnvData", "load_environments", "group_rows"]


@dataclass
class EnvData:
    """Episodes grouped by environment.

    episodes: one float tensor ``(n_e, T, *state_shape)`` per environment; params:
    ``(E, P)`` float64, one row per environment; split: per environment, the split name
    of each of its episodes (``"train"``/``"val"``/``"test"``); dt: the frame interval.
    """

    episodes: list[torch.Tensor]
    params: np.ndarray
    param_names: list[str]
    dt: float
    kind: str
    system: str
    split: list[np.ndarray] = field(default_factory=list)
    path: str = ""

    @property
    def num_envs(self) -> int:
        return len(self.episodes)

    @property
    def state_shape(self) -> tuple[int, ...]:
        return tuple(self.episodes[0].shape[2:])

    @property
    def length(self) -> int:
        return int(self.episodes[0].shape[1])

    def subset(self, which: str) -> EnvData:
        """The episodes of split ``which`` in each environment (environments without any
        are dropped)."""
        eps, rows, splits = [], [], []
        for e, x in enumerate(self.episodes):
            keep = self.split[e] == which
            if keep.any():
                eps.append(x[torch.as_tensor(keep)])
                rows.append(self.params[e])
                splits.append(self.split[e][keep])
        if not eps:
            raise ValueError(f"{self.path}: no episodes in split {which!r}")
        return EnvData(
            eps, np.stack(rows), self.param_names, self.dt, self.kind, self.system, splits,
            self.path,
        )  # fmt: skip

    def reorder(self, rows: np.ndarray, hint: str) -> EnvData:
        """The environments whose parameter rows are ``rows`` ``(E, P)``, in that order
        (rows matched to 1e-9 relative); a row with no episodes here is an error that
        ends with ``hint`` (what to pass instead)."""
        order = []
        for row in np.asarray(rows, dtype=np.float64):
            hit = np.flatnonzero(np.all(np.isclose(self.params, row, rtol=1e-9, atol=1e-12), 1))
            if len(hit) == 0:
                raise ValueError(
                    f"{self.path} has no episodes of the environment "
                    f"{dict(zip(self.param_names, row.tolist()))}; {hint}"
                )
            order.append(int(hit[0]))
        return EnvData(
            [self.episodes[i] for i in order], self.params[order], self.param_names, self.dt,
            self.kind, self.system, [self.split[i] for i in order], self.path,
        )  # fmt: skip


def group_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Environment index of each row (equal rows, one environment), in first-seen order.

    Returns ``(env_of_row (N,), unique_rows (E, P))``.
    """
    _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)  # unique sorts rows; renumber by first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    env = rank[inverse.reshape(-1)]
    return env, rows[np.sort(first)]


def load_environments(path, *, dtype=torch.float32, device=None) -> EnvData:
    """Read a multi-environment file (see the module docstring) into :class:`EnvData`."""
    from simsci import data

    traj = data.open(path)
    if traj.kind not in ("state", "field"):
        raise ValueError(
            f"{path}: DynaDiff reads kind='state' or kind='field' files, got kind={traj.kind!r}"
        )
    if "params" not in traj.episode_fields:
        raise ValueError(
            f"{path}: no /episodes/params; a multi-environment file records each episode's "
            "system parameters (simsci.systems.generate writes them, e.g. with params={...} "
            "grids, or `simsci dynadiff data`)"
        )
    if "mask" in traj.step_fields:
        raise ValueError(
            f"{path}: the file has per-channel masks; DynaDiff's experts step fully observed "
            "frames on a regular grid"
        )
    n = len(traj)
    if n == 0:
        raise ValueError(f"{path}: the file has no episodes")
    xs, ts = [], []
    for i in range(n):
        ep = traj.read(i, ["t", "x"])
        xs.append(np.asarray(ep["x"]))
        ts.append(np.asarray(ep["t"], dtype=np.float64))
    lengths = {len(t) for t in ts}
    if len(lengths) != 1:
        raise ValueError(
            f"{path}: episodes have different lengths {sorted(lengths)[:5]}; DynaDiff needs "
            "every episode on one regular time grid"
        )
    t0 = ts[0]
    if len(t0) < 2:
        raise ValueError(f"{path}: episodes need at least 2 frames, got {len(t0)}")
    gaps = np.diff(t0)
    dt = float(np.median(gaps))
    if not np.allclose(gaps, dt, rtol=1e-6, atol=1e-12) or not all(
        np.allclose(t - t[0], t0 - t0[0], rtol=1e-6, atol=1e-12) for t in ts
    ):
        raise ValueError(
            f"{path}: the frames are not on one regular time grid; DynaDiff's experts step "
            "one frame at a time (regenerate without keep < 1)"
        )
    x = np.stack(xs)
    if not np.isfinite(x).all():
        bad = int((~np.isfinite(x)).sum())
        raise ValueError(f"{path}: {bad} non-finite values in x; clean or regenerate the file")
    params = np.asarray(traj.column("params"), dtype=np.float64).reshape(n, -1)
    names = traj.names("params") or [f"p{j}" for j in range(params.shape[1])]
    split = np.asarray(traj.column("split")) if "split" in traj.episode_fields else None
    split_names = ["train", "val", "test"]
    env, rows = group_rows(params)
    episodes, splits = [], []
    xt = torch.as_tensor(x, dtype=dtype, device=device)
    for e in range(len(rows)):
        idx = np.flatnonzero(env == e)
        episodes.append(xt[torch.as_tensor(idx, device=xt.device)])
        if split is None:
            splits.append(np.array(["test"] * len(idx)))
        else:
            splits.append(np.array([split_names[int(s)] for s in split[idx]]))
    return EnvData(episodes, rows, list(names), dt, traj.kind, traj.system, splits, str(path))
