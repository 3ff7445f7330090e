"""``simsci/Surrogate-v0``: a trained model stands in for an environment's dynamics.

Model-based RL trains a policy inside a learned model. The surrogate environment takes
everything but the dynamics from the environment the model learned -- spaces, task,
reward, initial-state distribution, episode ends -- and advances the state with the
model, so a policy moves between the two without change.

The checkpoint interface (what a model must have to be loaded here; the models of
simsci that learn controlled dynamics implement it):

``env_id`` (str)
    the environment whose state the model learned, e.g. ``"simsci/ODEControl-v0"``;
``env_kwargs`` (dict)
    that environment's constructor keywords (task, system, dt, ...), JSON-able;
``state_shape`` (tuple of int), ``action_dim`` (int, 0 for an autonomous model);
``advance(state (B, *state_shape), action (B, action_dim) | None, dt) -> (B, *state_shape)``
    the state one control interval ``dt`` later with the action held constant.

These attributes are constructor arguments of the model, so a checkpoint written by
:mod:`simsci.train` rebuilds them. A checkpoint whose state shape or action width does
not fit the environment (for example a model of Lorenz-63 loaded with the pendulum
task) is refused with a message naming both layouts.

Design choices: the model runs in its own parameters' dtype (the state is cast in and
out), under ``torch.no_grad``; the reset distribution is the true system's (a
surrogate has no distribution of its own), drawn with the environment's generator.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch

from simsci.envs._core import Dynamics, SimsciEnv, SimsciVectorEnv
from simsci.envs._ode import ODEControlDynamics
from simsci.envs._pde import PDEControlDynamics
from simsci.errors import unknown_name
from simsci.train import load_model

__all__ = ["SurrogateDynamics", "SurrogateEnv", "SurrogateVectorEnv", "load_surrogate"]

_FRONT_END_KEYS = frozenset(
    {"action_bounds", "array_backend", "autoreset_mode", "render_mode", "num_envs"}
)
_PROTOCOL = ("env_id", "env_kwargs", "state_shape", "action_dim", "advance")


#: env_id -> the Dynamics class of the environments a model can learn
_BASE_DYNAMICS = {
    "simsci/ODEControl-v0": ODEControlDynamics,
    "simsci/PDEControl-v0": PDEControlDynamics,
}


def _base_dynamics(env_id: str):
    """The Dynamics class of the environment ``env_id`` (the ones a model can learn)."""
    if env_id not in _BASE_DYNAMICS:
        raise unknown_name("environment a surrogate can stand in for", env_id, _BASE_DYNAMICS)
    return _BASE_DYNAMICS[env_id]


def load_surrogate(checkpoint, device=None) -> torch.nn.Module:
    """Load a model from a :mod:`simsci.train` checkpoint and check the interface."""
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise TypeError(f"checkpoint must be a path, got {type(checkpoint).__name__}")
    if not os.path.exists(checkpoint):
        raise FileNotFoundError(f"surrogate checkpoint {str(checkpoint)!r} does not exist")
    model = load_model(checkpoint, map_location=device or "cpu")
    _check_protocol(model, str(checkpoint))
    return model


def _check_protocol(model, where: str) -> None:
    missing = [name for name in _PROTOCOL if not hasattr(model, name)]
    if missing:
        raise TypeError(
            f"{where}: {type(model).__name__} cannot stand in for an environment's dynamics: "
            f"it lacks {missing}. A surrogate model needs env_id, env_kwargs, state_shape, "
            "action_dim and advance(state, action, dt) (see simsci.envs._surrogate)"
        )


class SurrogateDynamics(Dynamics):
    """The base environment's task with the model's ``advance`` as dynamics."""

    def __init__(self, checkpoint=None, *, model=None, device=None, dtype=None, **env_kwargs):
        if (checkpoint is None) == (model is None):
            raise ValueError("give exactly one of checkpoint= (a path) or model= (a module)")
        if model is None:
            model = load_surrogate(checkpoint, device=device)
            where = str(checkpoint)
        else:
            _check_protocol(model, "model")
            where = "model"
            if device is not None:
                model = model.to(device)
        self.model = model.eval()
        self.checkpoint = None if checkpoint is None else str(checkpoint)
        self.env_id = str(model.env_id)
        if not isinstance(model.env_kwargs, Mapping):
            raise TypeError(f"{where}: env_kwargs must be a dict, got {model.env_kwargs!r}")
        # the front ends' own keywords (recorded in rollout files' env_kwargs) are not
        # the dynamics'; the surrogate front end takes its own
        learned = {k: v for k, v in dict(model.env_kwargs).items() if k not in _FRONT_END_KEYS}
        base_kwargs = {**learned, **env_kwargs}
        if device is not None:
            base_kwargs["device"] = device
        if dtype is not None:
            base_kwargs["dtype"] = dtype
        self.base = _base_dynamics(self.env_id)(**base_kwargs)
        base = self.base
        want_shape = tuple(int(s) for s in model.state_shape)
        A = int(base.action_low.shape[0])
        if want_shape != tuple(base.state_shape) or int(model.action_dim) not in (0, A):
            raise ValueError(
                f"{where}: the model's state layout does not fit the environment: the model "
                f"advances states of shape {want_shape} with {int(model.action_dim)} action "
                f"input(s), but {self.env_id} with {base_kwargs} has states of shape "
                f"{tuple(base.state_shape)} and {A} action(s). Load it with the env_kwargs "
                "it was trained on (model.env_kwargs) or retrain it on rollouts of this "
                "environment"
            )
        self.uses_action = int(model.action_dim) > 0
        for name in (
            "state_shape",
            "dt",
            "observation_low",
            "observation_high",
            "action_low",
            "action_high",
            "max_episode_steps",
            "state_bound",
            "failure_reward",
            "device",
            "dtype",
        ):
            setattr(self, name, getattr(base, name))
        self.model = self.model.to(self.device)
        params = [p for p in self.model.parameters() if p.is_floating_point()]
        self._model_dtype = params[0].dtype if params else self.dtype

    def sample_reset(self, n, generator):
        return self.base.sample_reset(n, generator)

    def advance(self, state, params, action, generator):
        md = self._model_dtype
        a = action.to(md) if self.uses_action else None
        with torch.no_grad():
            out = self.model.advance(state.to(md), a, self.dt)
        if tuple(out.shape) != tuple(state.shape):
            raise RuntimeError(
                f"the surrogate's advance returned shape {tuple(out.shape)} for states of "
                f"shape {tuple(state.shape)}; it must keep the state shape"
            )
        return out.to(self.dtype)

    def observe(self, state):
        return self.base.observe(state)

    def reward(self, state, action, next_state, params):
        return self.base.reward(state, action, next_state, params)

    def config(self) -> dict:
        return {
            "surrogate_of": self.env_id,
            "checkpoint": self.checkpoint,
            "model": type(self.model).__name__,
            "base": self.base.config(),
        }


_DOC_ARGS = """
    Args:
        checkpoint: path of a checkpoint written by simsci.train whose model has the
            surrogate interface (or ``model=`` an already built module).
        device, dtype: where the states live (the model runs in its own dtype).
        **env_kwargs: override keywords of the learned environment (e.g.
            ``max_episode_steps``); they must keep its state and action layout.
        action_bounds: "clip" (default) or "error", as for every simsci environment.
"""


class SurrogateEnv(SimsciEnv):
    __doc__ = (
        """A learned model as the dynamics of a simsci environment (``simsci/Surrogate-v0``).

    ## Description
    Everything but the dynamics comes from the environment the model learned
    (``model.env_id`` with ``model.env_kwargs``): spaces, task, reward, initial states,
    termination. The state advances by ``model.advance(state, action, dt)``.

    ## Action Space
    The learned environment's.

    ## Observation Space
    The learned environment's.

    ## Rewards
    The learned environment's reward, evaluated on the model's states.

    ## Episode End
    As in the learned environment (failure when the model's state leaves the bounds or
    becomes non-finite; truncation after ``max_episode_steps``).

    ## Version History
    * v0: first version.
"""
        + _DOC_ARGS
    )

    def __init__(self, checkpoint=None, *, action_bounds="clip", render_mode=None, **kwargs):
        super().__init__(
            SurrogateDynamics(checkpoint, **kwargs),
            action_bounds=action_bounds,
            render_mode=render_mode,
            spec=("simsci/Surrogate-v0", {"checkpoint": checkpoint, **kwargs}),
        )


class SurrogateVectorEnv(SimsciVectorEnv):
    __doc__ = (
        """``num_envs`` surrogate environments stepped as one batch through the model.

    Made by ``gymnasium.make_vec("simsci/Surrogate-v0", num_envs=N,
    vectorization_mode="vector_entry_point", checkpoint=PATH)``.
"""
        + _DOC_ARGS
    )

    def __init__(
        self,
        num_envs: int = 1,
        checkpoint=None,
        *,
        action_bounds="clip",
        array_backend="numpy",
        autoreset_mode="NextStep",
        render_mode=None,
        **kwargs,
    ):
        super().__init__(
            SurrogateDynamics(checkpoint, **kwargs),
            num_envs,
            action_bounds=action_bounds,
            array_backend=array_backend,
            autoreset_mode=autoreset_mode,
            render_mode=render_mode,
            spec=("simsci/Surrogate-v0", {"checkpoint": checkpoint, **kwargs}),
        )
