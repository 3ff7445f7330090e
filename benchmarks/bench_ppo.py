"""PPO learning curves on simsci/ODEControl-v0: pendulum swing-up and Lorenz-63
stabilisation, against a zero-action and a uniformly random policy.

Claim checked: RL users can train on simsci environments with Stable Baselines3, and
the learned policy beats the trivial ones. Training runs on the batched environment
through ``simsci.envs.to_sb3`` (8 sub-environments). Every ``--eval-every`` timesteps
the deterministic policy is evaluated on 16 fixed-seed episodes (a vector env reset
with seed 12345, so every evaluation sees the same initial states); the zero-action
and random policies are evaluated on the same episodes. Reported: the learning curve
(median and mean return), the final returns, and the ratio of the final median
return's gap to the zero policy over the zero policy's.

PPO settings: pendulum as the RL Baselines3 Zoo's Pendulum-v1 PPO (n_steps 1024 per
env, gae 0.95, gamma 0.9, 10 epochs, lr 1e-3, gSDE with sample frequency 4); Lorenz
SB3's defaults with gamma 0.98 and ``VecNormalize`` (observations of size 10-40 and
rewards normalised by running statistics; without it PPO does not improve on the zero
policy in 200k steps). Needs ``pip install "simsci[rl]"``.

Usage: ``python benchmarks/bench_ppo.py [--quick] [--timesteps N]``. Writes
``benchmarks/results/ppo_cpu.json``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from simsci.bench import write_result
from simsci.envs import ODEControlVectorEnv, to_sb3

RESULTS = Path(__file__).resolve().parent / "results"
EVAL_EPISODES = 16
EVAL_SEED = 12345

SETTINGS = {
    "pendulum-swingup": {
        "timesteps": 200_000,
        "ppo": dict(
            n_steps=1024,
            batch_size=256,
            gae_lambda=0.95,
            gamma=0.9,
            n_epochs=10,
            ent_coef=0.0,
            learning_rate=1e-3,
            clip_range=0.2,
            use_sde=True,
            sde_sample_freq=4,
        ),
    },
    "lorenz63-stabilize": {
        "timesteps": 500_000,
        # states of size 10-40: observations and rewards normalised by running statistics
        "normalize": True,
        "ppo": dict(n_steps=512, batch_size=256, gamma=0.98, n_epochs=10, learning_rate=3e-4),
    },
}


def evaluate(task: str, policy) -> np.ndarray:
    """Returns of ``policy(obs) -> actions`` on the fixed evaluation episodes."""
    env = ODEControlVectorEnv(EVAL_EPISODES, task)
    obs, _ = env.reset(seed=EVAL_SEED)
    total = np.zeros(EVAL_EPISODES)
    alive = np.ones(EVAL_EPISODES, dtype=bool)
    while alive.any():
        obs, reward, term, trunc, _ = env.step(policy(obs))
        total += np.where(alive, reward, 0.0)
        alive &= ~(term | trunc)
    return total


def run_task(task: str, timesteps: int, eval_every: int, seed: int) -> dict:
    from stable_baselines3 import PPO

    env = ODEControlVectorEnv(1, task)
    low, high = env.single_action_space.low, env.single_action_space.high
    rng = np.random.default_rng(seed)
    zero = evaluate(task, lambda o: np.zeros((len(o), len(low)), np.float32))
    random_ = evaluate(
        task, lambda o: rng.uniform(low, high, (len(o), len(low))).astype(np.float32)
    )

    venv = to_sb3(ODEControlVectorEnv(8, task))
    venv.seed(seed)
    normalize = SETTINGS[task].get("normalize", False)
    if normalize:
        from stable_baselines3.common.vec_env import VecNormalize

        venv = VecNormalize(venv, gamma=SETTINGS[task]["ppo"]["gamma"])
    model = PPO("MlpPolicy", venv, seed=seed, device="cpu", **SETTINGS[task]["ppo"])

    def policy(obs):
        if normalize:
            obs = venv.normalize_obs(obs)
        return model.predict(obs, deterministic=True)[0]

    curve = []
    t0 = time.perf_counter()
    while model.num_timesteps < timesteps:
        model.learn(eval_every, reset_num_timesteps=False)
        returns = evaluate(task, policy)
        curve.append(
            {
                "timesteps": int(model.num_timesteps),
                "median_return": float(np.median(returns)),
                "mean_return": float(returns.mean()),
                "wall_s": round(time.perf_counter() - t0, 1),
            }
        )
        print(f"  {task:20s} {curve[-1]}", flush=True)
    final = evaluate(task, policy)
    z, f = float(np.median(zero)), float(np.median(final))
    return {
        "timesteps": int(model.num_timesteps),
        "train_wall_s": round(time.perf_counter() - t0, 1),
        "ppo": SETTINGS[task]["ppo"],
        "vec_normalize": normalize,
        "curve": curve,
        "final_median_return": f,
        "final_mean_return": float(final.mean()),
        "zero_policy_median_return": z,
        "random_policy_median_return": float(np.median(random_)),
        "improvement_over_zero": round((f - z) / abs(z), 3) if z else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few thousand steps (smoke)")
    parser.add_argument("--timesteps", type=int, default=None, help="per task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", default=None, help="comma-separated subset of the tasks")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", default=None, help="default results/ppo_cpu.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result = {"eval_episodes": EVAL_EPISODES, "eval_seed": EVAL_SEED, "tasks": {}}
    for task, cfg in SETTINGS.items():
        if args.tasks and task not in args.tasks.split(","):
            continue
        steps = args.timesteps or (8192 if args.quick else cfg["timesteps"])
        every = max(steps // 10, 8192) if not args.quick else steps
        print(f"== {task}: {steps} timesteps", flush=True)
        result["tasks"][task] = run_task(task, steps, every, args.seed)
    path = write_result(args.out or RESULTS / "ppo_cpu.json", result)
    for task, r in result["tasks"].items():
        print(
            f"{task:20s} final median {r['final_median_return']:9.1f}  zero "
            f"{r['zero_policy_median_return']:9.1f}  random "
            f"{r['random_policy_median_return']:9.1f}  ({r['train_wall_s']} s)"
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
