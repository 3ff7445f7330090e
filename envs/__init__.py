"""simsci.envs: gymnasium environments over simsci's systems and trained models.

``import simsci.envs`` registers (lazily: nothing heavy is imported until ``make``):

- ``simsci/ODEControl-v0``: any ODE/SDE system under control with a task
  (:class:`ODEControlEnv`, tasks in :data:`TASKS`);
- ``simsci/PDEControl-v0``: Burgers, heat or Kuramoto-Sivashinsky with distributed
  actuators (:class:`PDEControlEnv`);
- ``simsci/Surrogate-v0``: a trained simsci model standing in for the dynamics of the
  environment it learned (:class:`SurrogateEnv`);
- ``simsci/Driving-v0``: an ego car on a procedural route through batched IDM/MOBIL
  traffic (:class:`DrivingEnv`, Dict observations of padded lanes and agents, or
  ``observation="flat"``; physical actions, or ``action_scale="normalized"`` in [-1, 1]
  for Stable Baselines3 and the like: :func:`physical_actions` / :func:`normalized_actions`
  convert);
- ``simsci/VectorWorld-v1``: the same ego, spaces and reward in a world a trained
  VectorWorld generates as it drives (:class:`VectorWorldEnv`: streamed lane tiles,
  ΔSim NPCs), so a driving policy can move between the two;
  :func:`vectorworld_rollout` drives a policy through that world for a distance and
  records it (``simsci rollout vectorworld``).

The two driving worlds say why an episode ended in ``info["end_reason"]`` (one of
:data:`END_REASONS`: collision, offroad, left_generated_lanes, distance, time_limit).

Each has a native batched vector environment (``gymnasium.make_vec(id, num_envs=N,
vectorization_mode="vector_entry_point")``): all sub-environments advance as one tensor
operation on the device, numpy or torch in/out, gymnasium's autoreset semantics.
:class:`RecordEpisodes` / :class:`RecordVectorEpisodes` write episodes into the
trajectory format (kind "rollout"; a Dict observation as one step field ``x.<key>`` per
entry, read back as the Dict by :func:`rollout_observations` /
:func:`rollout_observation_space`); :func:`to_minari` / :func:`from_minari` convert to
and from Minari datasets (optional extra ``simsci[minari]``).

Surrogate checkpoint interface: a model that can advance an environment's state has
``env_id``, ``env_kwargs``, ``state_shape``, ``action_dim`` and ``advance(state (B, *S),
action (B, A) | None, dt) -> (B, *S)`` (see :mod:`simsci.envs._surrogate`).
"""

from __future__ import annotations

import gymnasium

from simsci.envs._core import Dynamics, SimsciEnv, SimsciVectorEnv
from simsci.envs._driving import (
    END_REASONS,
    DrivingEnv,
    DrivingVectorEnv,
    lane_keeping_policy,
    normalized_actions,
    physical_actions,
)
from simsci.envs._driving_eval import evaluate as evaluate_driving
from simsci.envs._minari import from_minari, to_minari
from simsci.envs._ode import TASKS, ODEControlEnv, ODEControlVectorEnv, Task
from simsci.envs._pde import PDE_TASKS, PDEControlEnv, PDEControlVectorEnv, PDETask
from simsci.envs._record import RecordEpisodes, RecordVectorEpisodes
from simsci.envs._sb3 import to_sb3
from simsci.envs._spaces import rollout_observation_space, rollout_observations
from simsci.envs._surrogate import SurrogateEnv, SurrogateVectorEnv, load_surrogate
from simsci.envs._vectorworld import VectorWorldEnv, VectorWorldVectorEnv
from simsci.envs._vectorworld_rollout import vectorworld_rollout

__all__ = [
    "TASKS",
    "Task",
    "Dynamics",
    "SimsciEnv",
    "SimsciVectorEnv",
    "ODEControlEnv",
    "ODEControlVectorEnv",
    "PDE_TASKS",
    "PDETask",
    "PDEControlEnv",
    "PDEControlVectorEnv",
    "SurrogateEnv",
    "SurrogateVectorEnv",
    "load_surrogate",
    "DrivingEnv",
    "DrivingVectorEnv",
    "END_REASONS",
    "lane_keeping_policy",
    "physical_actions",
    "normalized_actions",
    "evaluate_driving",
    "VectorWorldEnv",
    "VectorWorldVectorEnv",
    "vectorworld_rollout",
    "to_sb3",
    "RecordEpisodes",
    "RecordVectorEpisodes",
    "rollout_observation_space",
    "rollout_observations",
    "to_minari",
    "from_minari",
    "ENV_IDS",
]

#: id -> (entry point, vector entry point)
ENV_IDS = {
    "simsci/ODEControl-v0": (
        "simsci.envs._ode:ODEControlEnv",
        "simsci.envs._ode:ODEControlVectorEnv",
    ),
    "simsci/PDEControl-v0": (
        "simsci.envs._pde:PDEControlEnv",
        "simsci.envs._pde:PDEControlVectorEnv",
    ),
    "simsci/Surrogate-v0": (
        "simsci.envs._surrogate:SurrogateEnv",
        "simsci.envs._surrogate:SurrogateVectorEnv",
    ),
    "simsci/Driving-v0": (
        "simsci.envs._driving:DrivingEnv",
        "simsci.envs._driving:DrivingVectorEnv",
    ),
    "simsci/VectorWorld-v1": (
        "simsci.envs._vectorworld:VectorWorldEnv",
        "simsci.envs._vectorworld:VectorWorldVectorEnv",
    ),
}


def _register() -> None:
    for env_id, (entry, vector_entry) in ENV_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point=entry, vector_entry_point=vector_entry)


_register()
