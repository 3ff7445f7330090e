"""``simsci driving``: road networks, scene-file metrics, and RL in simsci/Driving-v0."""

from __future__ import annotations

import json
import time
from pathlib import Path

from simsci.cli._common import HelpFormatter

DESCRIPTION = """\
The driving world (simsci.driving) and its environment simsci/Driving-v0.

  roads     generate road networks and summarise them (lanes by kind, junctions,
            conflicts, route length, generation time)
  metrics   the driving metrics of a scene file (simsci generate driving): collision
            and off-road rates of the agents in each tile, kinematic infeasibility of
            their histories, agents per km, lane-graph statistics, seam gaps
  ppo       train a PPO agent (Stable Baselines3, pip install "simsci[rl]") in
            simsci/Driving-v0 (--env vectorworld: simsci/VectorWorld-v0, the generated
            world of --checkpoint) and evaluate it against the lane-keeping baseline
  eval      evaluate a policy: lane-keeping, zero, or a PPO checkpoint (.zip), in
            either world (a policy trained in one runs in the other)

examples:
  simsci driving roads --seed 0 --count 5 --length 5000
  simsci generate driving --n 2000 --out data/scenes.h5
  simsci driving metrics data/scenes.h5
  simsci driving ppo --timesteps 200000 --num-envs 32 --out runs/driving_ppo
  simsci driving eval runs/driving_ppo/ppo.zip --episodes 64
  simsci driving eval runs/driving_ppo/ppo.zip --env vectorworld --checkpoint runs/vw
"""


def add_to(sub) -> None:
    p = sub.add_parser(
        "driving",
        help="driving world: roads, scene metrics, PPO in simsci/Driving-v0",
        description=DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    p.add_argument("action", choices=["roads", "metrics", "ppo", "eval"])
    p.add_argument("target", nargs="?", default=None, help="scene file (metrics) or policy (eval)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count", type=int, default=3, help="roads: networks to generate")
    p.add_argument("--length", type=float, default=5000.0, help="route length [m]")
    p.add_argument("--episodes", type=int, default=32, help="metrics: episodes read; eval: run")
    p.add_argument("--num-envs", type=int, default=16, help="egos stepped together")
    p.add_argument("--timesteps", type=int, default=200_000, help="ppo: environment steps")
    p.add_argument("--max-episode-steps", type=int, default=600, help="episode length (10 Hz)")
    p.add_argument(
        "--env",
        choices=["driving", "vectorworld"],
        default="driving",
        help="ppo/eval: simsci/Driving-v0 or simsci/VectorWorld-v0 (same spaces)",
    )
    p.add_argument(
        "--checkpoint", default=None, help="vectorworld: the VectorWorld directory (simsci train)"
    )
    p.add_argument(
        "--out", default=None, help="output: JSON file (roads, metrics) or run dir (ppo)"
    )
    p.set_defaults(run=run)


def _emit(result: dict, out) -> None:
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        from simsci._io import write_json

        write_json(Path(out), result)


def run(args) -> int:
    return {"roads": _roads, "metrics": _metrics, "ppo": _ppo, "eval": _eval}[args.action](args)


def _roads(args) -> int:
    import numpy as np

    from simsci.driving import LANE_ENDS, LANE_KINDS, make_road

    if args.count < 1:
        raise ValueError("--count must be >= 1")
    rows = []
    for i in range(args.count):
        t0 = time.perf_counter()
        road = make_road(seed=args.seed + i, length=args.length)
        dt = time.perf_counter() - t0
        kinds = np.bincount(road.kind, minlength=len(LANE_KINDS))
        ends = np.bincount(road.end, minlength=len(LANE_ENDS))
        rows.append(
            {
                "seed": args.seed + i,
                "route_m": round(float(road.route_s()[-1]), 1),
                "lanes": int(len(road.length)),
                "lanes_by_kind": dict(zip(LANE_KINDS, kinds.tolist())),
                "ends": dict(zip(LANE_ENDS, ends.tolist())),
                "conflicts": int(len(road.conflict_lanes)),
                "lane_km": round(float(road.length.sum()) / 1000, 2),
                "seconds": round(dt, 4),
            }
        )
    _emit({"roads": rows}, args.out)
    return 0


def _metrics(args) -> int:
    if not args.target:
        raise ValueError("driving metrics needs a scene FILE (made by simsci generate driving)")
    from simsci.driving import scene_metrics

    _emit(scene_metrics(args.target, episodes=args.episodes), args.out)
    return 0


ENV_IDS = {"driving": "simsci/Driving-v0", "vectorworld": "simsci/VectorWorld-v0"}


def _env_kwargs(args) -> dict:
    if args.max_episode_steps < 1 or args.num_envs < 1:
        raise ValueError("--max-episode-steps and --num-envs must be >= 1")
    kw = {"max_episode_steps": args.max_episode_steps, "route_length": args.length}
    if args.env == "vectorworld":
        kw["checkpoint"] = args.checkpoint
    elif args.checkpoint is not None:
        raise ValueError("--checkpoint applies to --env vectorworld (a VectorWorld directory)")
    return kw


def _vector_env(args):
    from simsci.envs import DrivingVectorEnv, VectorWorldVectorEnv

    return DrivingVectorEnv if args.env == "driving" else VectorWorldVectorEnv


def _ppo(args) -> int:
    import torch

    from simsci.envs import evaluate_driving, lane_keeping_policy, to_sb3

    try:
        from stable_baselines3 import PPO
    except ImportError as exc:
        raise RuntimeError('driving ppo needs Stable Baselines3: pip install "simsci[rl]"') from exc
    if not args.out:
        raise ValueError("driving ppo needs --out DIR (the model and its evaluation go there)")
    if args.timesteps < 1:
        raise ValueError("--timesteps must be >= 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kwargs = _env_kwargs(args)
    torch.manual_seed(args.seed)
    from stable_baselines3.common.vec_env import VecNormalize

    # observations in metres and m/s: running normalisation (saved beside the model)
    venv = VecNormalize(to_sb3(_vector_env(args)(args.num_envs, **kwargs)), gamma=0.99)
    # rollouts of 256 steps per ego (fewer for a tiny budget), minibatches of 1024; a
    # small initial action noise, or the first policies steer off the road at once
    n_steps = max(8, min(256, args.timesteps // args.num_envs))
    batch = min(1024, n_steps * args.num_envs)
    model = PPO(
        "MultiInputPolicy",
        venv,
        n_steps=n_steps,
        batch_size=batch,
        gamma=0.99,
        seed=args.seed,
        policy_kwargs={"log_std_init": -1.5},
    )
    t0 = time.perf_counter()
    model.learn(args.timesteps)
    seconds = time.perf_counter() - t0
    model.save(out / "ppo.zip")
    venv.save(str(out / "vecnormalize.pkl"))

    def ppo_policy(obs):
        return model.predict(venv.normalize_obs(obs), deterministic=True)[0]

    eval_kw = {
        "episodes": args.episodes,
        "num_envs": args.num_envs,
        "seed": 10_000 + args.seed,
        "env_id": ENV_IDS[args.env],
    }
    result = {
        "timesteps": args.timesteps,
        "train_seconds": round(seconds, 1),
        "env": {"id": ENV_IDS[args.env], **kwargs},
        "ppo": evaluate_driving(ppo_policy, **eval_kw, **kwargs),
        "lane_keeping": evaluate_driving(lane_keeping_policy, **eval_kw, **kwargs),
        "model": str(out / "ppo.zip"),
    }
    _emit(result, out / "eval.json")
    return 0


def _eval(args) -> int:
    import numpy as np

    from simsci.envs import evaluate_driving, lane_keeping_policy

    target = args.target or "lane-keeping"
    if target == "lane-keeping":
        policy = lane_keeping_policy
    elif target == "zero":

        def policy(obs):
            return np.zeros((len(obs["ego"]), 2), np.float32)

    else:
        path = Path(target)
        if not path.is_file():
            raise FileNotFoundError(
                f"policy {target!r} is neither lane-keeping, zero nor a PPO checkpoint file"
            )
        import pickle

        from stable_baselines3 import PPO

        model = PPO.load(path)
        stats = path.parent / "vecnormalize.pkl"  # written by `simsci driving ppo`
        norm = pickle.loads(stats.read_bytes()) if stats.is_file() else None

        def policy(obs):
            obs = norm.normalize_obs(obs) if norm is not None else obs
            return model.predict(obs, deterministic=True)[0]

    kwargs = _env_kwargs(args)
    result = evaluate_driving(
        policy,
        episodes=args.episodes,
        num_envs=args.num_envs,
        seed=args.seed,
        env_id=ENV_IDS[args.env],
        **kwargs,
    )
    _emit({"policy": target, "env": ENV_IDS[args.env], **result}, args.out)
    return 0
