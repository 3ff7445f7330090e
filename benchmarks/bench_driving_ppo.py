"""PPO in simsci/Driving-v0 against the lane-keeping baseline and the zero action.

Claim checked: an RL agent can be trained in ``simsci/Driving-v0`` with Stable Baselines3
(``to_sb3`` on the native batched environment, ``MultiInputPolicy`` on the Dict
observations) and learns to drive: its safe rate (episodes without a collision or
leaving the road) and distance driven approach or pass the rule-based lane-keeping
policy (Stanley steering + IDM), far above the zero action (which leaves the road on
the first curve).

Every ``--eval-every`` timesteps the deterministic policy is evaluated on
``--eval-episodes`` fixed-seed episodes (the same starts for every policy: the vector
env is reset with one seed); reported: the learning curve (success, safe, collision,
off-road rates, mean distance and return) and the final comparison. Episodes: 60 s
(600 steps at 10 Hz) on 2 km routes of 4 networks, default traffic.

Usage: ``python benchmarks/bench_driving_ppo.py [--quick] [--timesteps N]``. Writes
``benchmarks/results/driving_ppo_cpu.json``. Needs ``pip install "simsci[rl]"``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from simsci.bench import write_result
from simsci.envs import DrivingVectorEnv, evaluate_driving, lane_keeping_policy, to_sb3

RESULTS = Path(__file__).resolve().parent / "results"
EVAL_SEED = 12345
ENV = {"route_length": 2000.0, "num_roads": 4, "max_episode_steps": 600}
PPO_SETTINGS = dict(n_steps=256, batch_size=1024, gamma=0.99, gae_lambda=0.95, n_epochs=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few thousand steps (smoke)")
    parser.add_argument("--timesteps", type=int, default=None)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="default results/driving_ppo_cpu.json")
    args = parser.parse_args()
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    timesteps = args.timesteps or (4096 if args.quick else 300_000)
    every = args.eval_every or (timesteps if args.quick else 50_000)
    episodes = 4 if args.quick else args.eval_episodes
    env = dict(ENV, max_episode_steps=60 if args.quick else ENV["max_episode_steps"])
    ev = {"episodes": episodes, "num_envs": min(16, episodes), "seed": EVAL_SEED, **env}

    def zero(obs):
        return np.zeros((len(obs["ego"]), 2), np.float32)

    baselines = {"lane_keeping": evaluate_driving(lane_keeping_policy, **ev)}
    baselines["zero"] = evaluate_driving(zero, **ev)
    print("baselines", baselines, flush=True)
    from stable_baselines3.common.vec_env import VecNormalize

    venv = to_sb3(DrivingVectorEnv(args.num_envs, **env))
    venv.seed(args.seed)
    # observations in metres and m/s, rewards of 0.1 per metre: running normalisation,
    # and a small initial action noise (std e^-1.5 ~ 0.22 of the box) so that the first
    # policies do not steer off the road at once
    venv = VecNormalize(venv, gamma=PPO_SETTINGS["gamma"])
    settings = dict(PPO_SETTINGS)
    if args.quick:
        settings.update(n_steps=64, batch_size=256)
    model = PPO(
        "MultiInputPolicy",
        venv,
        seed=args.seed,
        device="cpu",
        policy_kwargs={"log_std_init": -1.5},
        **settings,
    )

    def policy(obs):
        return model.predict(venv.normalize_obs(obs), deterministic=True)[0]

    curve, t0 = [], time.perf_counter()
    while model.num_timesteps < timesteps:
        model.learn(every, reset_num_timesteps=False)
        row = {"timesteps": int(model.num_timesteps), **evaluate_driving(policy, **ev)}
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        curve.append(row)
        print(row, flush=True)
    final = curve[-1]
    result = {
        "claim": "PPO learns to drive in simsci/Driving-v0 (vs lane keeping and zero action)",
        "env": env,
        "ppo": {**settings, "log_std_init": -1.5, "vec_normalize": True},
        "num_envs": args.num_envs,
        "timesteps": int(model.num_timesteps),
        "train_wall_s": round(time.perf_counter() - t0, 1),
        "eval": {"episodes": episodes, "seed": EVAL_SEED},
        "curve": curve,
        "final": final,
        "baselines": baselines,
        "ratio_distance_vs_lane_keeping": round(
            final["mean_distance"] / baselines["lane_keeping"]["mean_distance"], 3
        ),
    }
    out = Path(args.out) if args.out else RESULTS / "driving_ppo_cpu.json"
    print(f"wrote {write_result(out, result)}")


if __name__ == "__main__":
    main()
