"""An action-conditioned neural ODE: an environment's controlled dynamics learned from
rollout files, usable as a surrogate environment (issue 4's checkpoint interface).

Model. With the state x (shape ``state_shape``) and the action u held constant over each
control interval [t_k, t_k + h_k) (zero-order hold), in normalised units

    z = (x - mu_x) / sigma_x,        a = (u - mu_u) / sigma_u,
    dz/dt = r * f_theta(z, a_k),     r = rho / sigma_x,
    z_{k+1} = z_k + int_{t_k}^{t_k + h_k} r * f_theta(z(s), a_k) ds,

where f_theta is an MLP (SiLU, ``depth`` hidden layers of ``hidden_dim``) on the flattened
z and a, whose output is the *normalised time derivative*: rho is the root mean square of
the finite-difference rates (x_{k+1} - x_k) / h_k in the data, so f_theta = O(1) is the
typical rate of every channel. mu, sigma, rho are per entry of the last state axis (as the
file's /stats are) and broadcast over the other axes.

Each interval is one ``simsci.odeint`` solve with method "rk4", solved in the unit time
tau = (t - t_k) / h_k, dz/dtau = h_k r f_theta(z, a_k) on tau in [0, 1] with step 1/n: the
same change of variables serves every sample's own h_k in one batched solve, and
n = substeps * ceil(h / dt) keeps the physical step at most dt / substeps for intervals
longer than the training interval dt.

Training loss (multi-step rollout). A window of K transitions (``window`` = K + 1 rows) is
integrated from its first state through its K recorded actions, and the loss is the mean
squared error in normalised units over all K predicted states:

    loss = mean_{k=1..K, entries} (z_hat_k - z_k)^2,   z_hat_0 = z_0.

A one-step loss lets errors compound unseen; rolling out through K intervals trains
the model on its own predictions, which is what keeps long model rollouts (the
surrogate's use) stable. Validation also reports the one-step error and the "state
unchanged" baseline (z_hat_k = z_0) over the same targets.

Choices, and why:

- Normalisation constants come from the file's /stats (train split) when present, else
  from the data; rho is always computed from the data (the format stores no rate
  statistics). Reading at most 512 evenly spread train episodes for them bounds the cost
  of ``from_data`` on large files. A constant channel (sigma = 0) gets sigma = 1, and a
  channel that never moves (rho = 0) gets rho = sigma / dt.
- All normalisation constants, dt, env_id/env_kwargs, state_shape and action_dim live in
  ``init_args``, so ``simsci.train.load_model`` rebuilds the model from a checkpoint
  alone; they are non-persistent buffers (``init_args`` is their one source of truth).
- Batches are padded episodes or windows (``collate``). Longer items (``simsci train``
  without ``--window`` gives whole episodes) are cut in ``training_step`` into windows of
  ``window`` rows that share their end rows, so every transition is trained on once and
  the rollout horizon is the model's, whatever the dataset gives.
- Transition k (row k -> row k+1) counts only if both rows are valid, the states are
  finite and the action of row k is finite. The last row of an episode holds the final
  state and a NaN action: it is a target, never the source of a transition. Once a
  transition is missing, the window's later rows are not scored (the rollout cannot
  continue without the action).
- ``advance`` computes in the state's dtype (float32/float64; other floats in float32)
  and on the state's device. A model whose parameters are elsewhere is evaluated through
  converted copies of its weights (``torch.func.functional_call``), never moved: call
  ``model.to(device, dtype)`` once to skip the copies in a hot loop.
- The state must evolve continuously: a wrapped angle (theta jumping from pi to -pi)
  cannot be produced by an ODE, so record the raw state or an unwrapped angle.
- Discrete (integer) actions are rejected: the vector field takes a real action vector.

Batch layout (``collate``): ``t`` (B, L) float64, ``state`` (B, L, *state_shape),
``action`` (B, L, A) with NaN replaced by 0, ``action_valid`` (B, L) bool, ``valid``
(B, L) bool, ``lengths`` (B,).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from simsci.data import recorded_env_kwargs
from simsci.integrate import FixedStepSolver, odeint

__all__ = ["ControlledODE"]

_STATE_FIELDS = ("state", "x")
_MAX_STAT_EPISODES = 512


def _as_floats(values, n: int, name: str, default: float | None) -> list[float] | None:
    """A list of n finite floats (a scalar broadcasts), or the default list."""
    if values is None:
        return None if default is None else [default] * n
    arr = np.asarray(values, dtype=np.float64).ravel()
    if arr.size == 1 and n != 1:
        arr = np.full(n, arr[0])
    if arr.size != n:
        raise ValueError(
            f"{name} needs {n} entries (one per entry of the last axis), got {arr.size}"
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got {arr.tolist()}")
    return [float(v) for v in arr]


def _positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _positive_float(value, name: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a positive number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value}")
    return value


class ControlledODE(nn.Module):
    """dx/dt = f_theta(x, u) with zero-order-hold actions; see the module docstring.

    Args:
        state_shape: shape of one state, without the batch axis (at least one axis).
        action_dim: A >= 1, the width of an action vector.
        dt: the control interval of the data (sets the solver step dt / substeps).
        env_id, env_kwargs: the environment whose dynamics the model learned (JSON-able).
        state_field: the file field the state came from: "state" (the env's raw state) or
            "x" (the observation, when the file has no state).
        hidden_dim, depth: width and number of hidden layers of the MLP f_theta.
        substeps: RK4 steps per control interval of length dt.
        window: rows per training window (K = window - 1 transitions, the rollout horizon).
        state_mean, state_std, action_mean, action_std: normalisation, one entry per entry
            of the last state axis / per action entry (default 0 and 1).
        deriv_scale: rho, the typical rate |dx/dt| per entry of the last state axis
            (default state_std / dt).
    """

    #: step fields the model reads (``TrajectoryDataset(fields=...)``): "state" when the
    #: file has it, else the observation "x"
    data_fields = ("t", "state", "x", "action")

    def __init__(
        self,
        state_shape: Sequence[int],
        action_dim: int,
        dt: float,
        *,
        env_id: str = "",
        env_kwargs: Mapping | None = None,
        state_field: str = "state",
        hidden_dim: int = 128,
        depth: int = 3,
        substeps: int = 4,
        window: int = 9,
        state_mean: Sequence[float] | None = None,
        state_std: Sequence[float] | None = None,
        action_mean: Sequence[float] | None = None,
        action_std: Sequence[float] | None = None,
        deriv_scale: Sequence[float] | None = None,
    ):
        super().__init__()
        if isinstance(state_shape, (int, np.integer)):
            state_shape = (state_shape,)
        try:
            shape = tuple(_positive_int(s, "every entry of state_shape") for s in state_shape)
        except TypeError as exc:
            raise TypeError(
                f"state_shape must be a sequence of positive ints, got {state_shape!r}"
            ) from exc
        if not shape:
            raise ValueError(
                "state_shape must have at least one axis (a scalar state is shape (1,))"
            )
        action_dim = _positive_int(action_dim, "action_dim")
        dt = _positive_float(dt, "dt")
        if not isinstance(env_id, str):
            raise TypeError(f"env_id must be a string, got {type(env_id).__name__}")
        env_kwargs = {} if env_kwargs is None else env_kwargs
        if not isinstance(env_kwargs, Mapping):
            raise TypeError(f"env_kwargs must be a dict, got {type(env_kwargs).__name__}")
        try:
            env_kwargs = json.loads(json.dumps(dict(env_kwargs), allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"env_kwargs must be JSON-able (it goes into checkpoints): {exc}"
            ) from exc
        if state_field not in _STATE_FIELDS:
            raise ValueError(f"state_field must be 'state' or 'x', got {state_field!r}")
        hidden_dim = _positive_int(hidden_dim, "hidden_dim")
        depth = _positive_int(depth, "depth")
        substeps = _positive_int(substeps, "substeps")
        window = _positive_int(window, "window (rows per training window)", minimum=2)
        C = shape[-1]
        s_mean = _as_floats(state_mean, C, "state_mean", 0.0)
        s_std = _as_floats(state_std, C, "state_std", 1.0)
        a_mean = _as_floats(action_mean, action_dim, "action_mean", 0.0)
        a_std = _as_floats(action_std, action_dim, "action_std", 1.0)
        rho = _as_floats(deriv_scale, C, "deriv_scale", None)
        if rho is None:
            rho = [s / dt for s in s_std]
        for name, vals in (("state_std", s_std), ("action_std", a_std), ("deriv_scale", rho)):
            if min(vals) <= 0:
                raise ValueError(f"{name} must be > 0 everywhere, got {vals}")

        self.init_args = {
            "state_shape": list(shape),
            "action_dim": action_dim,
            "dt": dt,
            "env_id": env_id,
            "env_kwargs": env_kwargs,
            "state_field": state_field,
            "hidden_dim": hidden_dim,
            "depth": depth,
            "substeps": substeps,
            "window": window,
            "state_mean": s_mean,
            "state_std": s_std,
            "action_mean": a_mean,
            "action_std": a_std,
            "deriv_scale": rho,
        }
        self.env_id, self.env_kwargs = env_id, env_kwargs
        self.state_shape, self.action_dim, self.dt = shape, action_dim, dt
        self.state_field = state_field
        self.substeps, self.window = substeps, window
        self.state_dim = math.prod(shape)
        for name, vals in (
            ("state_mean", s_mean),
            ("state_std", s_std),
            ("action_mean", a_mean),
            ("action_std", a_std),
            ("rate", [r / s for r, s in zip(rho, s_std)]),  # r = rho / sigma_x
        ):
            self.register_buffer(name, torch.tensor(vals, dtype=torch.float32), persistent=False)
        layers: list[nn.Module] = []
        width = self.state_dim + action_dim
        for _ in range(depth):
            layers += [nn.Linear(width, hidden_dim), nn.SiLU()]
            width = hidden_dim
        layers.append(nn.Linear(width, self.state_dim))
        self.net = nn.Sequential(*layers)

    def extra_repr(self) -> str:
        return (
            f"env_id={self.env_id!r}, state_shape={self.state_shape}, "
            f"action_dim={self.action_dim}, dt={self.dt}, substeps={self.substeps}"
        )

    # ---------------------------------------------------------------- from a file
    @classmethod
    def from_data(cls, traj, window: int | None = None, **overrides) -> ControlledODE:
        """A model sized, normalised and labelled for a rollout file.

        ``traj``: a ``simsci.data.Trajectories`` (or a path). env_id / env_kwargs / dt come
        from ``traj.meta`` (env_id falls back to the file's ``system``, dt to the median
        time step), state_shape and action_dim from the fields, the normalisation from
        /stats and the train episodes. ``window`` (default 9) rows per training window.
        ``overrides`` replace any constructor argument.
        """
        from simsci import data

        if isinstance(traj, (str, os.PathLike)):
            traj = data.open(traj)
        if not isinstance(traj, data.Trajectories):
            raise TypeError(
                f"from_data expects simsci.data.open(path) or a path, got {type(traj).__name__}"
            )
        fields = traj.step_fields
        where = f"{traj.path}"
        if "action" not in fields:
            raise ValueError(
                f"{where}: controlled_ode learns dx/dt = f(x, u) and needs a rollout file "
                f"with an 'action' step field; this {traj.kind!r} file has step fields "
                f"{sorted(fields)}. Record rollouts of the environment (kind='rollout')"
            )
        a_info = fields["action"]
        if a_info.dtype.kind != "f":
            raise TypeError(
                f"{where}: 'action' is {a_info.dtype} (a Discrete action space); "
                "controlled_ode needs real-valued (Box) actions of shape (A,)"
            )
        if len(a_info.shape) != 1 or a_info.shape[0] < 1:
            raise ValueError(
                f"{where}: 'action' must have per-step shape (A,) with A >= 1, got "
                f"{tuple(a_info.shape)}"
            )
        field = next((f for f in _STATE_FIELDS if f in fields), None)
        if field is None:
            raise ValueError(
                f"{where}: controlled_ode needs a 'state' or 'x' step field, got {sorted(fields)}"
            )
        s_info = fields[field]
        if s_info.dtype.kind != "f" or len(s_info.shape) < 1:
            raise ValueError(
                f"{where}: {field!r} must be floating with at least one axis per step, got "
                f"{s_info.dtype} of per-step shape {tuple(s_info.shape)}"
            )
        window = 9 if window is None else window
        meta = traj.meta
        env_kwargs = recorded_env_kwargs(meta)
        kwargs: dict = {
            "state_shape": list(s_info.shape),
            "action_dim": int(a_info.shape[0]),
            "env_id": str(meta.get("env_id") or traj.system),
            "env_kwargs": env_kwargs,
            "state_field": field,
            "window": window,
        }
        ts, xs, us = _sample_episodes(traj, field)
        if not ts:
            raise ValueError(f"{where}: no train episodes with at least one transition")
        dt = meta.get("dt")
        if dt is None:
            steps = np.concatenate([np.diff(t) for t in ts])
            dt = float(np.median(steps))
        kwargs["dt"] = _positive_float(overrides.get("dt", dt), f"{where}: dt")

        C = s_info.shape[-1]
        x_rows = np.concatenate([x.reshape(-1, C) for x in xs])
        u_rows = np.concatenate(us)
        mean, std = _file_stats(traj.stats.get(field), C)
        if mean is None:
            mean, std = _masked_mean_std(x_rows)
        a_mean, a_std = _file_stats(traj.stats.get("action"), u_rows.shape[1])
        if a_mean is None:
            a_mean, a_std = _masked_mean_std(u_rows)
        rates = []
        for t, x in zip(ts, xs):
            h = np.diff(t).reshape(-1, *([1] * (x.ndim - 1)))
            rates.append(((x[1:] - x[:-1]) / h).reshape(-1, C))
        rates = np.concatenate(rates)
        ok = np.isfinite(rates)
        n = ok.sum(0)
        rho = np.sqrt((np.where(ok, rates, 0.0) ** 2).sum(0) / np.maximum(n, 1))
        rho = np.where((n > 0) & (rho > 0) & np.isfinite(rho), rho, std / kwargs["dt"])
        kwargs.update(
            state_mean=mean.tolist(),
            state_std=std.tolist(),
            action_mean=a_mean.tolist(),
            action_std=a_std.tolist(),
            deriv_scale=rho.tolist(),
        )
        kwargs.update(overrides)
        return cls(**kwargs)

    # ---------------------------------------------------------------- batches
    @staticmethod
    def collate(batch: list[dict]) -> dict:
        """Pad TrajectoryDataset items (episodes or windows of a rollout file) into a batch.

        Uses ``state`` when the items carry it, else ``x``. NaN actions (the last row of
        every episode) become 0 with ``action_valid`` False.
        """
        from simsci.data import pad_collate

        if not batch:
            raise ValueError("collate got an empty batch")
        first = batch[0]
        field = next((f for f in _STATE_FIELDS if f in first), None)
        if field is None or "action" not in first or "t" not in first:
            raise ValueError(
                "controlled_ode batches need the step fields 't', 'action' and 'state' (or "
                f"'x'); the items have {sorted(first)}. Build the dataset with "
                "fields=ControlledODE.data_fields from a rollout file"
            )
        items = []
        for item in batch:
            action = item["action"]
            if not action.is_floating_point():
                raise TypeError(
                    f"action must be real-valued (Box), got {action.dtype} (Discrete actions "
                    "are not supported)"
                )
            if action.ndim != 2:
                raise ValueError(f"action must be (L, A) per item, got shape {tuple(action.shape)}")
            items.append({"t": item["t"], "state": item[field], "action": action})
        out = pad_collate(items, step_fields=("t", "state", "action"))
        action = out["action"]
        ok = torch.isfinite(action).all(-1) & out["valid"]
        out["action"] = torch.where(ok[..., None], action, torch.zeros_like(action))
        out["action_valid"] = ok
        return out

    # ---------------------------------------------------------------- dynamics
    def normalise_state(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.state_mean.to(x)) / self.state_std.to(x)

    def denormalise_state(self, z: torch.Tensor) -> torch.Tensor:
        return z * self.state_std.to(z) + self.state_mean.to(z)

    def normalise_action(self, u: torch.Tensor) -> torch.Tensor:
        return (u - self.action_mean.to(u)) / self.action_std.to(u)

    def _net_on(self, like: torch.Tensor):
        """f_theta as a callable in ``like``'s dtype and device (converted weights if the
        parameters live elsewhere, so the model itself is never moved)."""
        params = dict(self.net.named_parameters())
        if all(p.dtype == like.dtype and p.device == like.device for p in params.values()):
            return self.net
        conv = {k: p.to(device=like.device, dtype=like.dtype) for k, p in params.items()}
        return lambda inp: torch.func.functional_call(self.net, conv, (inp,))

    def _interval(self, z, a, h, n_sub: int, net) -> torch.Tensor:
        """One control interval in normalised units: z (N, *S), a (N, A), h (N,) ->
        z after h with a held, by RK4 in tau = (t - t_k) / h with n_sub steps."""
        N = z.shape[0]
        scale = h.reshape(N, *([1] * len(self.state_shape))) * self.rate.to(z)

        def field(t, y):
            return scale * net(torch.cat([y.reshape(N, -1), a], -1)).reshape(y.shape)

        tau = torch.tensor([0.0, 1.0], dtype=z.dtype, device=z.device)
        return odeint(field, z, tau, method="rk4", step_size=1.0 / n_sub)[:, -1]

    def _substeps_for(self, h_max: float) -> int:
        # intervals longer than dt get proportionally more steps (1e-6: rounding slack)
        return self.substeps * max(1, math.ceil(h_max / self.dt - 1e-6))

    def _rollout_normalised(self, z0, a, h) -> torch.Tensor:
        """z0 (N, *S), a (N, K, A) normalised actions, h (N, K) -> (N, K, *S) z_1..z_K."""
        net = self._net_on(z0)
        K = a.shape[1]
        n_sub = self._substeps_for(float(h.max())) if K else self.substeps
        z, out = z0, []
        for k in range(K):
            z = self._interval(z, a[:, k], h[:, k], n_sub, net)
            out.append(z)
        return torch.stack(out, 1) if out else z0.new_zeros(z0.shape[0], 0, *z0.shape[1:])

    def _check_state(self, state, what: str = "state") -> None:
        if not isinstance(state, torch.Tensor):
            raise TypeError(f"{what} must be a torch.Tensor, got {type(state).__name__}")
        if not state.is_floating_point():
            raise TypeError(f"{what} must be floating, got {state.dtype}")
        if state.ndim != 1 + len(self.state_shape) or tuple(state.shape[1:]) != self.state_shape:
            raise ValueError(
                f"{what} must be (B, *state_shape) = (B, {', '.join(map(str, self.state_shape))})"
                f", got shape {tuple(state.shape)}; add a batch axis with {what}[None] for "
                "one state"
            )

    def _compute_dtype(self, state: torch.Tensor) -> torch.dtype:
        return state.dtype if state.dtype in (torch.float32, torch.float64) else torch.float32

    def advance(self, state: torch.Tensor, action: torch.Tensor, dt: float) -> torch.Tensor:
        """The state one control interval ``dt`` later, ``action`` held constant over it.

        state (B, *state_shape), action (B, action_dim), dt > 0 -> (B, *state_shape) on
        state's device and in its dtype. Differentiable (no ``torch.no_grad`` inside).
        """
        self._check_state(state)
        return self.rollout(state, self._check_action(action, state)[:, None], dt)[:, -1]

    def rollout(self, state: torch.Tensor, actions: torch.Tensor, dt: float) -> torch.Tensor:
        """States after each of K control intervals of length ``dt``.

        state (B, *state_shape), actions (B, K, action_dim) -> (B, K + 1, *state_shape),
        entry [:, 0] the given state; device and dtype of state.
        """
        self._check_state(state)
        dt = _positive_float(dt, "dt")
        if not isinstance(actions, torch.Tensor):
            raise TypeError(f"actions must be a torch.Tensor, got {type(actions).__name__}")
        B = state.shape[0]
        if actions.ndim != 3 or actions.shape[0] != B or actions.shape[2] != self.action_dim:
            raise ValueError(
                f"actions must be (B, K, action_dim) = ({B}, K, {self.action_dim}), got "
                f"shape {tuple(actions.shape)}"
            )
        for name, v in (("state", state), ("action", actions)):
            bad = ~torch.isfinite(v.flatten(1)).all(1)
            if bool(bad.any()):
                rows = bad.nonzero().flatten()[:5].tolist()
                raise ValueError(
                    f"{name} must be finite; samples {rows} hold NaN or inf (a diverged "
                    "rollout or an unset action)"
                )
        dtype = self._compute_dtype(state)
        z0 = self.normalise_state(state.to(dtype))
        if B == 0:
            return state.unsqueeze(1).expand(0, actions.shape[1] + 1, *self.state_shape)
        a = self.normalise_action(actions.to(device=state.device, dtype=dtype))
        h = torch.full(a.shape[:2], dt, dtype=dtype, device=state.device)
        z = self._rollout_normalised(z0, a, h)
        x = self.denormalise_state(z).to(state.dtype)
        return torch.cat([state[:, None], x], 1)

    def _check_action(self, action, state) -> torch.Tensor:
        if action is None:
            raise ValueError(
                f"this model is controlled (action_dim={self.action_dim}); pass an action of "
                f"shape (B, {self.action_dim})"
            )
        if not isinstance(action, torch.Tensor):
            raise TypeError(f"action must be a torch.Tensor, got {type(action).__name__}")
        if action.ndim != 2 or action.shape[1] != self.action_dim:
            raise ValueError(
                f"action must be (B, action_dim) = (B, {self.action_dim}), got shape "
                f"{tuple(action.shape)}"
            )
        if isinstance(state, torch.Tensor) and action.shape[0] != state.shape[0]:
            raise ValueError(
                f"action has {action.shape[0]} rows but state has {state.shape[0]} (one "
                "action per state)"
            )
        return action

    # ---------------------------------------------------------------- training contract
    def _windows(self, batch: dict):
        """Cut the batch into rollout windows: normalised states z (N, W, *S), actions a
        (N, W-1, A), intervals h (N, W-1) and the scored-target mask (N, W-1)."""
        state, action, t = batch["state"], batch["action"], batch["t"]
        B, L = state.shape[:2]
        if tuple(state.shape[2:]) != self.state_shape:
            raise ValueError(
                f"batch state has per-step shape {tuple(state.shape[2:])}, the model's "
                f"state_shape is {self.state_shape}; train on the file the model was built for"
            )
        if action.ndim != 3 or action.shape[-1] != self.action_dim:
            raise ValueError(
                f"batch action must be (B, L, {self.action_dim}), got {tuple(action.shape)}"
            )
        if L < 2:
            raise ValueError(f"training needs items of at least 2 rows (one transition), got {L}")
        dtype = self._compute_dtype(state)
        valid = batch.get("valid")
        valid = torch.ones(B, L, dtype=torch.bool, device=state.device) if valid is None else valid
        row_ok = valid & torch.isfinite(state.reshape(B, L, -1)).all(-1)
        act_ok = valid & torch.isfinite(action).all(-1)
        if "action_valid" in batch:
            act_ok = act_ok & batch["action_valid"]
        h = (t[:, 1:] - t[:, :-1]).to(dtype)
        trans_ok = row_ok[:, :-1] & act_ok[:, :-1] & row_ok[:, 1:] & (h > 0)
        h = torch.where(trans_ok, h, torch.full_like(h, self.dt))
        z = self.normalise_state(
            torch.where(
                row_ok.reshape(B, L, *[1] * len(self.state_shape)), state, torch.zeros_like(state)
            ).to(dtype)
        )
        a = torch.where(act_ok[..., None], action, torch.zeros_like(action)).to(dtype)
        a = self.normalise_action(a[:, :-1])
        T, Kw = L - 1, self.window - 1
        if T > Kw:  # cut into windows of Kw transitions sharing their end rows
            n = math.ceil(T / Kw)
            pad = n * Kw - T
            if pad:
                z = torch.cat([z, z.new_zeros(B, pad, *z.shape[2:])], 1)
                a = torch.cat([a, a.new_zeros(B, pad, a.shape[2])], 1)
                h = torch.cat([h, h.new_full((B, pad), self.dt)], 1)
                trans_ok = torch.cat([trans_ok, trans_ok.new_zeros(B, pad)], 1)
            starts = torch.arange(n, device=z.device) * Kw
            rows = starts[:, None] + torch.arange(Kw + 1, device=z.device)
            tr = starts[:, None] + torch.arange(Kw, device=z.device)
            z = z[:, rows].reshape(B * n, Kw + 1, *z.shape[2:])
            a = a[:, tr].reshape(B * n, Kw, a.shape[-1])
            h = h[:, tr].reshape(B * n, Kw)
            trans_ok = trans_ok[:, tr].reshape(B * n, Kw)
        mask = torch.cumprod(trans_ok.to(torch.int64), 1).bool()
        keep = mask[:, 0]
        if bool(keep.any()) and not bool(keep.all()):
            z, a, h, mask = z[keep], a[keep], h[keep], mask[keep]
        scored = mask.any(0).nonzero()
        K = int(scored.max()) + 1 if scored.numel() else 1  # drop all-padding tail columns
        return z[:, : K + 1], a[:, :K], h[:, :K], mask[:, :K]

    def _mse(self, pred, target, mask) -> torch.Tensor:
        """Mean squared error over the masked (N, K) rows' entries."""
        err = (pred - target).reshape(*mask.shape, -1).pow(2).mean(-1)
        return torch.where(mask, err, 0.0).sum() / mask.sum().clamp(min=1)

    def training_step(self, batch: dict) -> dict:
        z, a, h, mask = self._windows(batch)
        pred = self._rollout_normalised(z[:, 0], a, h)
        target = z[:, 1:]
        with torch.no_grad():
            zero = self._mse(z[:, :1].expand_as(target), target, mask)
        return {"loss": self._mse(pred, target, mask), "zero_model_mse": zero}

    def validation_step(self, batch: dict) -> dict:
        """Multi-step loss, one-step error and the "state unchanged" baselines, all mean
        squared errors in normalised units."""
        z, a, h, mask = self._windows(batch)
        target = z[:, 1:]
        pred = self._rollout_normalised(z[:, 0], a, h)
        N, K = mask.shape
        one = self._interval(
            z[:, :-1].reshape(N * K, *self.state_shape),
            a.reshape(N * K, -1),
            h.reshape(N * K),
            self._substeps_for(float(h.max())),
            self._net_on(z),
        ).reshape(target.shape)
        step_ok = mask  # trans k is scored exactly when the rollout reaches k + 1
        return {
            "loss": self._mse(pred, target, mask),
            "one_step_mse": self._mse(one, target, step_ok),
            "zero_model_mse": self._mse(z[:, :1].expand_as(target), target, mask),
            "zero_model_one_step_mse": self._mse(z[:, :-1], target, step_ok),
        }

    # ---------------------------------------------------------------- export
    def export_spec(self, example_shape: Sequence[int] | None = None) -> dict:
        """What :func:`simsci.train.export_model` exports: :meth:`advance` over one control
        interval of the training ``dt`` (RK4 as ``advance`` runs it, without its input
        checks), on an example state of ``example_shape`` ((B, *state_shape); default a
        batch of 2) and an action."""
        shape = [2, *self.state_shape] if example_shape is None else list(example_shape)
        if len(shape) < 2 or tuple(shape[1:]) != self.state_shape or shape[0] < 1:
            raise ValueError(
                f"example shape {tuple(shape)} does not fit this model: a state batch is "
                f"(B, *state_shape) = (B, {', '.join(map(str, self.state_shape))})"
            )
        p = next(self.parameters())
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(*shape, generator=gen, dtype=torch.float64)
        x = x * self.state_std.double() + self.state_mean.double()
        u = torch.randn(shape[0], self.action_dim, generator=gen, dtype=torch.float64)
        u = u * self.action_std.double() + self.action_mean.double()
        dims = ", ".join(map(str, self.state_shape))
        return {
            "kind": "controlled_ode",
            "module": _AdvanceProgram(self, p.dtype, p.device),
            "inputs": (x.to(p.device, p.dtype), u.to(p.device, p.dtype)),
            "input_names": ["state", "action"],
            "inputs_doc": {
                "state": f"(B, {dims}) the environment state ({self.env_id or 'no env'}), "
                "physical units",
                "action": f"(B, {self.action_dim}) the action held over the interval",
            },
            "output_names": ["next_state"],
            "outputs_doc": {"next_state": f"(B, {dims}) the state dt = {self.dt:g} later"},
            "function": f"ControlledODE.advance(state, action, dt={self.dt:g}): one control "
            f"interval, {self.substeps} RK4 steps (3/8 rule); roll out by feeding it back",
        }


class _AdvanceProgram(nn.Module):
    """``ControlledODE.advance(state, action, model.dt)`` as a module: the same RK4 steps
    (``FixedStepSolver``: odeint's, bit for bit) without the data-dependent input checks
    that a traced program cannot hold."""

    def __init__(self, model: ControlledODE, dtype: torch.dtype, device):
        super().__init__()
        self.model = model
        self.solver = FixedStepSolver(
            "rk4", [0.0, 1.0], 1.0 / model.substeps, dtype=dtype, device=device
        )

    def forward(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        m = self.model
        z = m.normalise_state(state)
        a = m.normalise_action(action)
        N = z.shape[0]
        h = torch.full((N,), m.dt, dtype=z.dtype, device=z.device)
        scale = h.reshape(N, *([1] * len(m.state_shape))) * m.rate.to(z)

        def field(t, y):
            return scale * m.net(torch.cat([y.reshape(N, -1), a], -1)).reshape(y.shape)

        return m.denormalise_state(self.solver(field, z))


# ------------------------------------------------------------------------ data helpers


def _sample_episodes(traj, field: str):
    """t, state and finite-action rows of at most 512 evenly spread train episodes."""
    ids = np.arange(len(traj))
    if "split" in traj.episode_fields:
        train = np.flatnonzero(traj.column("split") == 0)
        ids = train if len(train) else ids
    ids = ids[traj.lengths[ids] >= 2]
    if len(ids) > _MAX_STAT_EPISODES:
        ids = ids[np.unique(np.linspace(0, len(ids) - 1, _MAX_STAT_EPISODES).round().astype(int))]
    ts, xs, us = [], [], []
    for i in ids:
        ep = traj.read(int(i), fields=("t", field, "action"))
        ts.append(np.asarray(ep["t"], np.float64))
        xs.append(np.asarray(ep[field], np.float64))
        u = np.asarray(ep["action"], np.float64)
        us.append(u[np.isfinite(u).all(1)])
    return ts, xs, us


def _file_stats(stats, n: int):
    """(mean, std) from a file's /stats entry when usable (n finite entries), else None."""
    if stats is None or "mean" not in stats or "std" not in stats:
        return None, None
    mean = np.asarray(stats["mean"], np.float64).ravel()
    std = np.asarray(stats["std"], np.float64).ravel()
    if mean.size != n or std.size != n or not np.isfinite(mean).all():
        return None, None
    return mean, np.where(np.isfinite(std) & (std > 0), std, 1.0)


def _masked_mean_std(rows: np.ndarray):
    """Per-column mean and std over the finite entries of rows (R, C); std 0 -> 1."""
    ok = np.isfinite(rows)
    n = np.maximum(ok.sum(0), 1)
    mean = np.where(ok, rows, 0.0).sum(0) / n
    std = np.sqrt((np.where(ok, rows - mean, 0.0) ** 2).sum(0) / n)
    return mean, np.where(std > 0, std, 1.0)
