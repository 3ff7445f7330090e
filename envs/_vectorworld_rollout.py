"""Closed-loop VectorWorld rollouts: drive a policy through a streamed world, record it.

:func:`vectorworld_rollout` (public as ``simsci.envs.vectorworld_rollout``; the command
``simsci rollout vectorworld``) runs one ego in ``simsci/VectorWorld-v1``'s world (its
stream, observation and reward) for ``km`` kilometres under a policy (the lane-keeping
driver of ``simsci/Driving-v0`` by default, or any ``policy(obs) -> action`` on batched
observations) and returns the rollout's statistics: distance, steps, wall time and
real-time factor, why it ended (``end_reason``, in the words of the environment's
``info["end_reason"]``: collision, offroad, left_generated_lanes, distance or
time_limit), tiles generated, resampled, dropped and restored, spawns, collision and
off-road steps (and of those, the steps off the end of the generated lanes). With
``record=True`` (the default) the drive is recorded by
:class:`simsci.models.vectorworld.DriveRecorder` (every frame of every vehicle, the
ego's actions, every tile version with the steps it was live), which adds the ego's tile
coverage, seam gaps, kinematic feasibility of the ego and the NPCs (stated and from
their positions) and agents per lane-km, ready for
:func:`simsci.models.vectorworld.write_rollout` (a ``rollout`` trajectory file) and
:func:`simsci.models.vectorworld.plot_route`.

It sits with the environments, not with the model, because it drives the environment's
world: the model layer below cannot import it.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from simsci.envs._driving import ACTION_HIGH, ACTION_LOW, END_REASONS, lane_keeping_policy
from simsci.envs._vectorworld import _Stream

__all__ = ["vectorworld_rollout"]

#: world options of :func:`vectorworld_rollout` and their defaults
WORLD_OPTIONS = {
    "max_agents": 32,
    "max_tiles": 6,
    "shaping": True,
    "tile_steps": 1,
    "tile_mode": "flow",
    "complete": True,
    "tile_agents": "generator",
    "npc_yield": True,
}


def _policy_fn(policy):
    if policy is None or policy in ("lane_keeping", "lane-keeping"):
        return lane_keeping_policy
    if policy == "zero":
        return lambda obs: np.zeros((len(obs["ego"]), 2), np.float32)
    if callable(policy):
        return policy
    raise ValueError(f"policy must be 'lane_keeping', 'zero' or a callable, got {policy!r}")


def _check(km, max_steps, world_kwargs: dict) -> tuple[float, int, dict]:
    """Validated goal [m], step cap and world options (defaults filled in)."""
    if isinstance(km, bool) or not (isinstance(km, (int, float)) and math.isfinite(km) and km > 0):
        raise ValueError(f"km must be a positive number of kilometres, got {km!r}")
    unknown = sorted(set(world_kwargs) - set(WORLD_OPTIONS))
    if unknown:
        raise TypeError(
            f"vectorworld_rollout got unknown world options {unknown}; "
            f"the world options are {sorted(WORLD_OPTIONS)}"
        )
    goal = float(km) * 1000.0
    limit = int(max_steps) if max_steps is not None else int(goal / 2.0 * 10)
    if limit < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps!r}")
    return goal, limit, {**WORLD_OPTIONS, **world_kwargs}


def vectorworld_rollout(
    model=None,
    *,
    km: float = 1.0,
    policy="lane_keeping",
    seed: int = 0,
    max_steps: int | None = None,
    record: bool = True,
    stop_on_failure: bool = True,
    device=None,
    **world_kwargs,
) -> dict:
    """Drive ``km`` kilometres in a streamed world of ``model`` (a
    :class:`~simsci.models.vectorworld.VectorWorld`, a checkpoint directory, None for the
    shipped :func:`~simsci.models.vectorworld.pretrained` or ``"small"`` for
    :func:`~simsci.models.vectorworld.small_default`); see the module docstring.

    ``policy``: "lane_keeping" (default), "zero" or ``policy(obs) -> actions`` on batched
    observations. ``max_steps``: a cap (default: 2 m/s on average, ``km * 1000 / 2`` s at
    10 Hz); ``device``: None (the model's), "auto", "cpu", "cuda"...; ``world_kwargs``:
    max_agents, max_tiles, shaping, tile_steps (1: one-step MeanFlow; more: that many
    flow-matching Euler steps, ``tile_mode="flow"``), complete (lane-graph completion,
    default True), tile_agents ("generator", default: the VAE places as many vehicles as
    the tile generator drew; "vae": as many as the VAE's count head draws, the data's
    density), npc_yield (default True:
    NPCs brake for the ego ahead in their path) of the world. ``stop_on_failure``:
    end at the first collision or off-road (else keep driving and count them).

    Returns a dict: ``stats`` (``end_reason`` says why the rollout ended: "distance" when
    it drove ``km``, "time_limit" when ``max_steps`` ran out, else the failure that
    stopped it, as ``simsci/VectorWorld-v1``'s ``info["end_reason"]``) and, with
    ``record``, what :meth:`~simsci.models.vectorworld.DriveRecorder.finish` returns:
    ``trace`` (per-frame agents ``(T+1, V, 7)``, ``valid``, ``uid``, ``control``, the
    ego's ``action`` ``(T, 2)``), ``dt``, ``versions`` (tile id -> cell, tile), ``live``
    (tile id, first frame, last frame) and ``seam_gaps``.
    """
    from simsci.models.vectorworld import DriveRecorder

    goal, limit, opts = _check(km, max_steps, world_kwargs)
    fn = _policy_fn(policy)
    stream = _Stream(
        1,
        checkpoint=model,
        route_length=max(5000.0, goal + 200.0),
        max_distance=goal,
        max_episode_steps=limit,
        num_agents=16,
        num_lanes=8,
        max_vehicles=opts["max_agents"],
        max_tiles=opts["max_tiles"],
        shaping=opts["shaping"],
        tile_steps=opts["tile_steps"],
        tile_mode=opts["tile_mode"],
        complete=opts["complete"],
        tile_agents=opts["tile_agents"],
        npc_yield=opts["npc_yield"],
        device=device,
    )
    gen = torch.Generator().manual_seed(int(seed))
    t0 = time.perf_counter()
    stream.reset(gen)
    sim = stream.sim
    recorder = DriveRecorder(sim, 0)
    recorder.snap()
    counts, steps, reason = _drive(stream, fn, goal, limit, stop_on_failure, recorder, record)
    wall = time.perf_counter() - t0
    stats = {
        "km_requested": float(km),
        "seed": int(seed),
        "distance_m": float(sim.driven[0]),
        "steps": steps,
        "sim_time_s": steps * 0.1,
        "wall_s": wall,
        "real_time_factor": steps * 0.1 / max(wall, 1e-9),
        "end_reason": reason,
        "ego_collision_steps": counts[0],
        "ego_offroad_steps": counts[1],
        "ego_left_lanes_steps": counts[2],
        **{f"world_{k}": int(v) for k, v in sim.stats.items()},
    }
    out = {"stats": stats}
    if record:
        out.update(recorder.finish(stats))
    return out


def _drive(stream, fn, goal, limit, stop_on_failure, recorder, record):
    """The closed loop: ``((collision, off-road, off the generated lanes) step counts,
    steps, end reason)``; the reasons are the environment's (:data:`END_REASONS`)."""
    sim = stream.sim
    low, high = torch.as_tensor(ACTION_LOW), torch.as_tensor(ACTION_HIGH)
    left_code = END_REASONS.index("left_generated_lanes")
    collisions = offroad = left = steps = 0
    reason = "distance"
    obs = stream.observe()
    while float(sim.driven[0]) < goal:
        if steps >= limit:
            reason = "time_limit"
            break
        action = np.asarray(fn({k: v.cpu().numpy() for k, v in obs.items()}), np.float32)
        action = torch.as_tensor(action.reshape(1, 2)).clamp(low, high)  # what the ego gets
        _, term, _, coll, off = stream.step(action.to(stream.device))
        steps += 1
        collisions += int(coll[0])
        offroad += int(off[0])
        left += int(stream.end_code[0]) == left_code
        if record:
            recorder.snap(action[0].numpy())
        obs = stream.observe()
        if bool(term[0]) and stop_on_failure:
            reason = END_REASONS[int(stream.end_code[0])]
            break
    return (collisions, offroad, left), steps, reason
