"""PPO across worlds: trained in simsci/Driving-v0, evaluated in simsci/VectorWorld-v1,
and back.

Claim checked: the two environments share their action and observation spaces, so a
policy moves between them; how well it transfers says how close the generated world is
to the ground truth for a driving policy.

Setup: Stable Baselines3 PPO (``MultiInputPolicy``, VecNormalize, the settings of
``bench_driving_ppo.py``) for ``--timesteps`` in each world with 16 egos; each policy,
and the lane-keeping driver as the reference, evaluated deterministically on 32 episodes
of 600 steps (60 s) in both worlds (``evaluate_driving(env_id=...)``): success (drove the
full distance; with 60 s episodes nobody reaches it, so ``timeout`` = safe to the end),
collision and off-road rates, the safe rate and the mean distance.

``--opening-bank K``: PPO trains in VectorWorld with K reused openings (the
environment's ``opening_bank``; cheap resets), evaluated on fresh ones.

Usage: ``python benchmarks/bench_vectorworld_ppo.py --checkpoint runs/vectorworld
[--timesteps 100000] [--opening-bank 64] [--quick]``. Writes
``benchmarks/results/vectorworld_ppo_cpu.json``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from simsci.bench import out_path, write_result

RESULTS = Path(__file__).resolve().parent / "results"
EVAL_SEED = 12345
DRIVING = {"route_length": 2000.0, "num_roads": 4, "max_episode_steps": 600}
PPO_SETTINGS = dict(n_steps=256, batch_size=1024, gamma=0.99, gae_lambda=0.95, n_epochs=10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--timesteps", type=int, default=100_000)
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--episodes", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--opening-bank",
        type=int,
        default=None,
        help="VectorWorld's opening_bank while PPO trains there (evaluation: fresh openings)",
    )
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    from simsci.envs import (
        DrivingVectorEnv,
        VectorWorldVectorEnv,
        evaluate_driving,
        lane_keeping_policy,
        to_sb3,
    )
    from simsci.models.vectorworld import VectorWorld

    torch.set_num_threads(1)
    model_vw = VectorWorld.load(args.checkpoint)
    steps = 60 if args.quick else 600
    timesteps = 4096 if args.quick else args.timesteps
    episodes = 4 if args.quick else args.episodes
    worlds = {
        "simsci/Driving-v0": (DrivingVectorEnv, dict(DRIVING, max_episode_steps=steps)),
        "simsci/VectorWorld-v1": (
            VectorWorldVectorEnv,
            {"checkpoint": model_vw, "route_length": 2000.0, "max_episode_steps": steps},
        ),
    }

    def evaluate(policy, env_id):
        kw = worlds[env_id][1]
        return evaluate_driving(
            policy, episodes=episodes, num_envs=min(16, episodes), seed=EVAL_SEED,
            env_id=env_id, **kw,
        )  # fmt: skip

    result = {
        "claim": "a PPO driver moves between simsci/Driving-v0 and simsci/VectorWorld-v1",
        "checkpoint": str(args.checkpoint),
        "timesteps": timesteps,
        "opening_bank": args.opening_bank,
        "episodes": episodes,
        "episode_steps": steps,
        "ppo": {**PPO_SETTINGS, "log_std_init": -1.5, "vec_normalize": True},
        "lane_keeping": {w: evaluate(lane_keeping_policy, w) for w in worlds},
        "trained_in": {},
    }
    print("lane keeping", result["lane_keeping"], flush=True)
    for train_id, (cls, kw) in worlds.items():
        if cls is VectorWorldVectorEnv and args.opening_bank is not None:
            kw = dict(kw, opening_bank=args.opening_bank)  # training only
        venv = VecNormalize(to_sb3(cls(args.num_envs, **kw)), gamma=PPO_SETTINGS["gamma"])
        venv.seed(args.seed)
        settings = dict(PPO_SETTINGS)
        if args.quick:
            settings.update(n_steps=64, batch_size=256)
        ppo = PPO(
            "MultiInputPolicy", venv, seed=args.seed, device="cpu",
            policy_kwargs={"log_std_init": -1.5}, **settings,
        )  # fmt: skip
        t0 = time.perf_counter()
        ppo.learn(timesteps)
        wall = time.perf_counter() - t0
        venv.training = False

        def policy(obs, ppo=ppo, venv=venv):
            return ppo.predict(venv.normalize_obs(obs), deterministic=True)[0]

        row = {"train_wall_s": round(wall, 1)}
        for eval_id in worlds:
            row[eval_id] = evaluate(policy, eval_id)
        result["trained_in"][train_id] = row
        print(train_id, row, flush=True)
    out = out_path(args.out, "vectorworld_ppo_cpu.json", RESULTS)
    print(f"wrote {write_result(out, result)}")


if __name__ == "__main__":
    main()
