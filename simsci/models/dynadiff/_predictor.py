"""A deployed dynamics predictor: one expert's weights as an ordinary simsci model.

Whatever produced the weights -- DynaDiff's generator, a zoo expert, a baseline -- the
result is a :class:`Predictor`, written with :func:`simsci.train.save_model`, so
``simsci evaluate``, :func:`simsci.train.load_model` and (for ODE states) the
``simsci/Surrogate-v0`` environment load it like any trained model.

``Predictor`` works in original units: ``forward(x)`` is one frame ahead, ``rollout``
many; inside it normalises with the zoo's ``mean``/``std`` and integrates the expert's
field (:mod:`._experts`) by RK4 in frame time.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from simsci.models.dynadiff._experts import ExpertNet, ExpertSpec, unflatten_params

__all__ = ["Predictor", "predictor_from_weights", "rollout_errors"]


class Predictor(nn.Module):
    """One expert in original units (see the module docstring).

    Args:
        spec: the expert architecture (:class:`ExpertSpec` as a dict).
        mean, std: per-channel normalisation (C values each).
        dt: the frame interval the expert steps.
        system: the simulated system's registry name (records what it models).
        params: the environment's parameters when known (a dict), else None.
        source: how the weights were made ("dynadiff", "expert", "pooled", ...).
    """

    def __init__(
        self,
        spec: dict,
        mean: list,
        std: list,
        dt: float,
        *,
        system: str = "",
        params: dict | None = None,
        source: str = "",
    ):
        super().__init__()
        self.spec = ExpertSpec.from_dict(spec)
        if len(mean) != self.spec.channels or len(std) != self.spec.channels:
            raise ValueError(
                f"mean and std need {self.spec.channels} values (one per channel), got "
                f"{len(mean)} and {len(std)}"
            )
        if not (float(dt) > 0 and math.isfinite(float(dt))):
            raise ValueError(f"dt must be a positive finite frame interval, got {dt!r}")
        self.init_args = dict(
            spec=self.spec.to_dict(),
            mean=[float(v) for v in mean],
            std=[float(v) for v in std],
            dt=float(dt),
            system=str(system),
            params=None if params is None else {k: float(v) for k, v in params.items()},
            source=str(source),
        )
        self.dt = float(dt)
        self.system = str(system)
        self.net = ExpertNet(self.spec)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32))
        if self.spec.kind == "mlp" and system:
            # the surrogate-environment interface (simsci.envs._surrogate): an autonomous
            # model of the system's state, stepped by the ODE environment's "regulate" task
            self.env_id = "simsci/ODEControl-v0"
            kw = {"task": "regulate", "system": str(system), "dt": float(dt)}
            if params:
                kw["params"] = {k: float(v) for k, v in params.items()}
            self.env_kwargs = kw
            self.state_shape = (self.spec.channels,)
            self.action_dim = 0

    @classmethod
    def with_weights(cls, weights, spec, mean, std, dt, **kwargs) -> Predictor:
        """A predictor (eval mode, on the CPU) with the expert weights ``weights``: flat
        ``(P,)`` or ``{name: tensor}``; ``kwargs`` as for the constructor."""
        spec = ExpertSpec.from_dict(spec)
        model = cls(spec.to_dict(), list(mean), list(std), dt, **kwargs)
        if isinstance(weights, torch.Tensor):
            weights = unflatten_params(weights.detach().float().cpu(), spec)
        model.net.load_state_dict({k: v.detach().float().cpu() for k, v in weights.items()})
        return model.eval()

    def _norm(self, x):
        return (x - self.mean.to(x)) / self.std.to(x)

    def _denorm(self, z):
        return z * self.std.to(z) + self.mean.to(z)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, *S)`` -> the state one frame (``dt``) later, ``(B, *S)``."""
        self.spec.check_state(x)
        dtype = x.dtype
        z = self._norm(x.to(self.mean.dtype))
        return self._denorm(self.net.step(z)).to(dtype)

    def rollout(self, x0: torch.Tensor, steps: int) -> torch.Tensor:
        """``(B, *S)`` -> ``(B, steps + 1, *S)``, the initial state first."""
        self.spec.check_state(x0, "initial state")
        if int(steps) < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        dtype = x0.dtype
        z = self.net.rollout(self._norm(x0.to(self.mean.dtype)), int(steps))
        return self._denorm(z).to(dtype)

    @torch.no_grad()
    def advance(self, state: torch.Tensor, action, dt: float) -> torch.Tensor:
        """The surrogate-environment step: ``dt`` must be a whole number of frames."""
        k = float(dt) / self.dt
        if abs(k - round(k)) > 1e-6 or round(k) < 1:
            raise ValueError(
                f"this predictor steps frames of {self.dt}; dt={dt} is not a whole number of frames"
            )
        x = state
        for _ in range(round(k)):
            x = self(x)
        return x

    @torch.no_grad()
    def evaluate_file(self, path, *, split="test", device=None) -> dict:
        """Rollout error on the ``split`` episodes of a trajectory file, from each
        episode's first frame over its whole horizon (``split="all"`` or None for
        every episode): ``{"rmse", "mse", "nrmse", "episodes", "frames"}``."""
        from simsci.models.dynadiff._envdata import load_environments

        env = load_environments(path)
        xs = []
        for e, x in enumerate(env.episodes):
            keep = np.ones(len(x), bool) if split in (None, "all") else env.split[e] == split
            if keep.any():
                xs.append(x[torch.as_tensor(keep)])
        if not xs:
            raise ValueError(f"{path}: no episodes in split {split!r} (use split='all')")
        x = torch.cat(xs)
        if tuple(x.shape[2:])[-1] != self.spec.channels:
            raise ValueError(
                f"{path}: states of shape {tuple(x.shape[2:])} do not fit this predictor "
                f"({self.spec.channels} channels)"
            )
        if abs(env.dt - self.dt) > 1e-9 * max(1.0, self.dt):
            raise ValueError(
                f"{path}: frames every {env.dt}, but this predictor steps {self.dt}; "
                "evaluate on data with its frame interval"
            )
        device = torch.device(device or "cpu")
        self.to(device)
        return rollout_errors(self, x.to(device))


@torch.no_grad()
def rollout_errors(model, x: torch.Tensor) -> dict:
    """Roll ``model`` (a :class:`Predictor`) from ``x[:, 0]`` over ``x`` ``(N, T, *S)``."""
    pred = model.rollout(x[:, 0].to(model.mean.dtype), x.shape[1] - 1).to(x.dtype)
    err = (pred - x) ** 2
    mse = float(err.mean()) if torch.isfinite(err).all() else math.inf
    scale = float(x.var()) if x.numel() > 1 else 1.0
    return {
        "rmse": math.sqrt(mse),
        "mse": mse,
        "nrmse": math.sqrt(mse / max(scale, 1e-30)),
        "episodes": int(x.shape[0]),
        "frames": int(x.shape[1]),
    }


def predictor_from_weights(flat_or_dict, zoo, *, params=None, source="") -> Predictor:
    """A :class:`Predictor` with a zoo's architecture and normalisation and the given
    weights (flat ``(P,)`` or ``{name: tensor}``)."""
    return Predictor.with_weights(
        flat_or_dict, zoo.spec, zoo.mean.tolist(), zoo.std.tolist(), zoo.dt,
        system=zoo.system, params=params, source=source,
    )  # fmt: skip
