"""Evaluating a driving policy in either driving world (``simsci/Driving-v0`` or
``simsci/VectorWorld-v1``: the same spaces), above both of them."""

from __future__ import annotations

import numpy as np

from simsci.envs._driving import ENV_ID as DRIVING_ID
from simsci.envs._driving import DrivingVectorEnv, lane_keeping_policy
from simsci.envs._vectorworld import ENV_ID as VECTORWORLD_ID
from simsci.envs._vectorworld import VectorWorldVectorEnv

__all__ = ["evaluate"]


def evaluate(
    policy,
    *,
    episodes: int = 32,
    num_envs: int = 16,
    seed: int = 0,
    env_id: str = DRIVING_ID,
    **env_kwargs,
) -> dict:
    """Run ``policy(obs) -> actions`` (batched observations in, ``(num_envs, 2)`` out)
    for ``episodes`` episodes of ``env_id`` (``simsci/Driving-v0`` or
    ``simsci/VectorWorld-v1``: the same spaces); returns the fraction that drove
    their full distance (``success``), collided, left the road, or ran out of time
    (``timeout``), the fraction without a collision or leaving the road (``safe``), and
    the mean distance driven [m] and return. In ``simsci/VectorWorld-v1`` also
    ``left_generated_lanes``: the fraction that left the road by driving past the end of
    the generated lanes (``info["end_reason"]``; counted in ``offroad`` too).

    The policy sees the observations and gives the actions of the environment that
    ``env_kwargs`` make (``observation="flat"``, ``action_scale="normalized"`` for a
    policy trained so); :func:`~simsci.envs.lane_keeping_policy` needs the defaults."""
    if episodes < 1 or num_envs < 1:
        raise ValueError("episodes and num_envs must be >= 1")
    conventions = {k: env_kwargs[k] for k in ("observation", "action_scale") if k in env_kwargs}
    if policy is lane_keeping_policy and not conventions.items() <= {
        ("observation", "dict"),
        ("action_scale", "physical"),
    }:
        # it would read a flat vector as a Dict, or have its physical actions rescaled
        raise ValueError(
            "lane_keeping_policy reads the Dict observation and gives physical actions; "
            f"evaluate it without {conventions} (the world is the same)"
        )
    if env_id == DRIVING_ID:
        cls = DrivingVectorEnv
    elif env_id == VECTORWORLD_ID:
        cls = VectorWorldVectorEnv
    else:
        raise ValueError(
            f"env_id must be 'simsci/Driving-v0' or 'simsci/VectorWorld-v1', got {env_id!r}"
        )
    env = cls(min(num_envs, episodes), autoreset_mode="SameStep", **env_kwargs)
    obs, _ = env.reset(seed=seed)
    ret = np.zeros(env.num_envs)
    out = {"success": 0, "collision": 0, "offroad": 0, "timeout": 0, "distance": [], "return": []}
    left = 0
    done_count = 0
    while done_count < episodes:
        obs, reward, term, trunc, infos = env.step(np.asarray(policy(obs), dtype=np.float32))
        ret += reward
        for i in np.flatnonzero(term | trunc):
            if done_count >= episodes:
                break
            info = infos["final_info"]
            dist = float(info["distance"][i])
            if info["collision"][i]:
                out["collision"] += 1
            elif info["offroad"][i]:
                out["offroad"] += 1
                left += bool(info["end_reason"][i] == "left_generated_lanes")
            elif dist >= env.world.success_distance(i) - 1.0:
                out["success"] += 1
            else:
                out["timeout"] += 1
            out["distance"].append(dist)
            out["return"].append(float(ret[i]))
            ret[i] = 0.0
            done_count += 1
    n = float(done_count)
    result = {
        "episodes": done_count,
        **{k: out[k] / n for k in ("success", "collision", "offroad", "timeout")},
        "safe": 1.0 - (out["collision"] + out["offroad"]) / n,
        "mean_distance": float(np.mean(out["distance"])),
        "mean_return": float(np.mean(out["return"])),
    }
    if env_id == VECTORWORLD_ID:
        result["left_generated_lanes"] = left / n
    return result
