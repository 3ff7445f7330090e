"""``simsci driving roads|metrics|ppo|eval``: road networks, scene-file metrics, and RL in
simsci/Driving-v0; one sub-parser per action."""

from __future__ import annotations

import json
import time
from pathlib import Path

from simsci.cli._common import (
    add_action,
    add_deprecated_param,
    add_device,
    add_episodes,
    add_group,
    add_max_steps,
    add_out,
    add_param,
    add_seed,
    params,
)

DESCRIPTION = """\
The driving world (simsci.driving) and its environment simsci/Driving-v0.
Run 'simsci driving ACTION --help' for each action's options.

examples:
  simsci driving roads --seed 0 -n 5 --param length=5000
  simsci generate driving -n 2000 --out data/scenes.h5
  simsci driving metrics data/scenes.h5
  simsci driving ppo --max-steps 200000 --num-envs 32 --out runs/driving_ppo
  simsci driving eval runs/driving_ppo/ppo.zip -n 64
  simsci driving eval runs/driving_ppo/ppo.zip --env vectorworld --checkpoint runs/vw
"""

ROADS_DESCRIPTION = """\
Generate road networks (simsci.driving.make_road, seeds SEED, SEED+1, ...) and summarise
each as JSON: route length, lanes by kind, lane ends, conflicts, lane-km, generation
time. --param sets an argument of make_road: length (route length [m], default 5000) or
any RoadConfig field (lanes=[2,3], oncoming=false, p_roundabout=0.2, ...).

example:
  simsci driving roads -n 5 --param length=2000 --out roads.json
"""

METRICS_DESCRIPTION = """\
The driving metrics of a scene file (simsci generate driving): collision and off-road
rates of the agents in each tile, kinematic infeasibility of their histories, agents per
km, lane-graph statistics, seam gaps; printed as JSON (and written to --out).

Of a VectorWorld drive (OUT/rollout.h5 of `simsci rollout vectorworld`): for each
drive, the share of the ego's steps on a recorded live tile, the seam gaps between tiles
live at the same step, and kinematic feasibility of every agent (the ego and the NPCs)
at every step, judged from the stated speed and heading and from the recorded
positions (path curvature and acceleration), with the limits 10.4 m/s^2 and 0.3 1/m
(simsci.driving.metrics: drive_tile_coverage, drive_seam_gaps, drive_feasibility).
Deterministic: draws no random numbers.

examples:
  simsci driving metrics data/scenes.h5 -n 64 --out metrics.json
  simsci driving metrics runs/vectorworld_rollout/rollout.h5
"""

ENV_PARAMS = """\
--param sets a keyword of the environment: route_length (metres, default 5000),
max_episode_steps (10 Hz steps, default 600 here), num_agents, max_vehicles,
action_scale (physical or normalized), observation (dict or flat), ...
(simsci.envs.DrivingVectorEnv, VectorWorldVectorEnv)."""

PPO_DESCRIPTION = f"""\
Train a PPO agent (Stable Baselines3, pip install "simsci[rl]") in simsci/Driving-v0
(--env vectorworld: simsci/VectorWorld-v1, the generated world of --checkpoint) for
--max-steps environment steps, then evaluate it on -n/--episodes episodes against the
lane-keeping baseline (which drives the Dict observation with physical actions
whatever --param action_scale/observation say). Writes OUT/ppo.zip, OUT/vecnormalize.pkl
(its observation normalisation) and OUT/eval.json.
{ENV_PARAMS}

example:
  simsci driving ppo --max-steps 200000 --num-envs 32 --out runs/driving_ppo
"""

EVAL_DESCRIPTION = f"""\
Evaluate a policy, lane-keeping, zero, or a PPO checkpoint (.zip of `simsci driving
ppo`), in either world (a policy trained in one runs in the other): the fractions of
episodes that succeeded, collided, left the road or timed out, mean distance and return.
A checkpoint runs with the action scale and observation it was trained with (read from
its spaces).
{ENV_PARAMS}

examples:
  simsci driving eval lane-keeping -n 64
  simsci driving eval runs/driving_ppo/ppo.zip --env vectorworld --checkpoint runs/vw
"""


def add_to(sub) -> None:
    actions = add_group(
        sub,
        "driving",
        help="driving world: roads, scene metrics, PPO in simsci/Driving-v0",
        description=DESCRIPTION,
    )
    r = add_action(
        actions,
        "roads",
        help="generate road networks and summarise them",
        description=ROADS_DESCRIPTION,
        run=_roads,
    )
    r.add_argument("-n", "--count", type=int, default=3, metavar="N", help="networks to generate")
    add_param(r, what="an argument of make_road (length=5000, lanes=[2,3], ...)")
    add_deprecated_param(r, "--length", "length")
    add_seed(r, help="the seed of the first network (the next ones: SEED+1, ...)")
    add_out(r, "file", help="also write the summary here (JSON)")

    m = add_action(
        actions,
        "metrics",
        help="driving metrics of a scene file",
        description=METRICS_DESCRIPTION,
        run=_metrics,
    )
    m.add_argument(
        "scenes",
        metavar="SCENES",
        help="a scene file (simsci generate driving) or a VectorWorld drive (rollout.h5)",
    )
    add_episodes(m, default=32, help="episodes read (the first N)")
    add_out(m, "file", help="also write the metrics here (JSON)")

    p = add_action(
        actions,
        "ppo",
        help="train a PPO agent (Stable Baselines3) and evaluate it",
        description=PPO_DESCRIPTION,
        run=_ppo,
    )
    add_max_steps(
        p, default=200_000, help="environment steps of training", deprecated=("--timesteps",)
    )
    add_episodes(p, default=32, help="evaluation episodes")
    _add_env_options(p)
    add_out(p, "dir", help="the run folder (ppo.zip, vecnormalize.pkl, eval.json)", required=True)

    e = add_action(
        actions,
        "eval",
        help="evaluate a policy: lane-keeping, zero or a PPO checkpoint",
        description=EVAL_DESCRIPTION,
        run=_eval,
    )
    e.add_argument(
        "policy",
        nargs="?",
        default="lane-keeping",
        metavar="POLICY",
        help="lane-keeping, zero, or a PPO checkpoint (.zip)",
    )
    add_episodes(e, default=32, help="episodes to run")
    _add_env_options(e)
    add_out(e, "file", help="also write the result here (JSON)")


def _add_env_options(p) -> None:
    """The environment of ppo and eval: which world, its keywords, batch, seed, device."""
    p.add_argument(
        "--env",
        choices=["driving", "vectorworld"],
        default="driving",
        help="simsci/Driving-v0 or simsci/VectorWorld-v1 (same spaces)",
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        help="--env vectorworld: the VectorWorld directory (simsci train vectorworld); "
        "default: the shipped world; small: the tiny on-the-fly model",
    )
    p.add_argument("--num-envs", type=int, default=16, help="egos stepped together")
    add_param(p, what="a keyword of the environment (route_length=5000, max_episode_steps=600)")
    add_deprecated_param(p, "--length", "route_length")
    add_deprecated_param(p, "--max-episode-steps", "max_episode_steps")
    add_seed(p)
    add_device(p, help="the environment's and the policy's")


def _emit(result: dict, out) -> None:
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        from simsci._io import write_json

        write_json(Path(out), result)


def _roads(args) -> int:
    import numpy as np

    from simsci.driving import LANE_ENDS, LANE_KINDS, make_road

    if args.count < 1:
        raise ValueError("-n/--count must be >= 1")
    options = params(args)
    rows = []
    for i in range(args.count):
        t0 = time.perf_counter()
        road = make_road(seed=args.seed + i, **options)
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
    import simsci.data
    from simsci.driving import scene_metrics

    with simsci.data.open(args.scenes) as ds:
        drive = ds.kind == "rollout" and ds.meta.get("recorder") == DRIVE_RECORDER
        result = drive_metrics(ds, episodes=args.episodes) if drive else None
    if result is None:
        result = scene_metrics(args.scenes, episodes=args.episodes)
    _emit(result, args.out)
    return 0


#: the ``recorder`` of VectorWorld drive files (simsci.models.vectorworld.write_rollout)
DRIVE_RECORDER = "simsci.models.vectorworld.DriveRecorder"


def drive_metrics(ds, *, episodes: int | None = None) -> dict:
    """The metrics of the drives of a VectorWorld rollout file ``ds`` (open), one row per
    episode: ``steps``, ``tile_coverage``, seam gaps (count, unmatched, median and 90th
    percentile of the matched), ``feasibility`` (``ego`` and ``npc``: agents, checked and
    infeasible steps, stated and path)."""
    import numpy as np

    from simsci.driving import metrics

    n = len(ds) if episodes is None else min(int(episodes), len(ds))
    dt = float(ds.meta["dt"])
    rows = []
    for i in range(n):
        ep = ds[i]
        tiles, lanes = ep["graphs"]["tiles"]["nodes"], ep["graphs"]["lanes"]["nodes"]
        live = (tiles["cell"], tiles["first_step"], tiles["last_step"])
        gaps = metrics.drive_seam_gaps(
            lanes["points"],
            lanes["tile_id"],
            tiles["tile_id"],
            *live,
            tile_size=ds.meta["tile_size"],
        )
        matched = gaps[np.isfinite(gaps)]
        rows.append(
            {
                "steps": int(len(ep["t"]) - 1),
                "tile_versions": int(len(np.unique(tiles["tile_id"]))),
                "tile_coverage": metrics.drive_tile_coverage(
                    ep["agents"][:, 0, :2], *live, tile_size=ds.meta["tile_size"]
                ),
                "seam_endpoints": int(len(gaps)),
                "seam_unmatched": int((~np.isfinite(gaps)).sum()),
                "seam_gap_median_m": float(np.median(matched)) if matched.size else None,
                "seam_gap_p90_m": float(np.quantile(matched, 0.9)) if matched.size else None,
                "feasibility": metrics.drive_feasibility(
                    ep["agents"], ep["agents_valid"], ep["agent_id"], dt
                ),
            }
        )
    return {"episodes": n, "drives": rows}


ENV_IDS = {"driving": "simsci/Driving-v0", "vectorworld": "simsci/VectorWorld-v1"}


def _env_kwargs(args) -> dict:
    """The environment's keywords: --param over this command's defaults, and --device."""
    from simsci._device import resolve_device

    kw = {"max_episode_steps": 600, "route_length": 5000.0, **params(args)}
    if kw["max_episode_steps"] < 1 or args.num_envs < 1:
        raise ValueError("max_episode_steps and --num-envs must be >= 1")
    kw["device"] = str(resolve_device(args.device))
    if args.env == "vectorworld":
        kw["checkpoint"] = args.checkpoint
    elif args.checkpoint is not None:
        raise ValueError("--checkpoint applies to --env vectorworld (a VectorWorld directory)")
    return kw


def _vector_env(args):
    from simsci.envs import DrivingVectorEnv, VectorWorldVectorEnv

    return DrivingVectorEnv if args.env == "driving" else VectorWorldVectorEnv


#: the environment keywords that choose how a policy sees and acts, and their defaults
#: (lane keeping and the zero action drive those; a PPO checkpoint, what it learned on)
CONVENTIONS = {"observation": "dict", "action_scale": "physical"}


def _builtin_kwargs(kwargs: dict) -> dict:
    """``kwargs`` for the lane-keeping and zero policies: the default conventions (the
    world, and so the result, does not depend on them)."""
    return {**kwargs, **CONVENTIONS}


def _checkpoint_kwargs(model, kwargs: dict) -> dict:
    """``kwargs`` with the conventions a PPO checkpoint was trained with, read from its
    spaces (a Box observation: flat; a [-1, 1] action box: normalised); a --param that
    says otherwise is an error."""
    import numpy as np
    from gymnasium import spaces

    trained = {
        "observation": "flat" if isinstance(model.observation_space, spaces.Box) else "dict",
        "action_scale": (
            "normalized"
            if np.all(model.action_space.low == -1) and np.all(model.action_space.high == 1)
            else "physical"
        ),
    }
    for key, value in trained.items():
        if kwargs.get(key, value) != value:
            raise ValueError(
                f"the checkpoint was trained with {key}={value}, not --param "
                f"{key}={kwargs[key]}; drop that --param"
            )
    return {**kwargs, **trained}


def _ppo(args) -> int:
    from simsci.envs import evaluate_driving, lane_keeping_policy, to_sb3
    from simsci.train import seed_everything

    try:
        from stable_baselines3 import PPO
    except ImportError as exc:
        raise RuntimeError('driving ppo needs Stable Baselines3: pip install "simsci[rl]"') from exc
    if args.max_steps < 1:
        raise ValueError("--max-steps must be >= 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kwargs = _env_kwargs(args)
    # the one seeding point of the run: before the environments and the policy are built
    seed_everything(args.seed)
    from stable_baselines3.common.vec_env import VecNormalize

    # observations in metres and m/s: running normalisation (saved beside the model)
    venv = VecNormalize(to_sb3(_vector_env(args)(args.num_envs, **kwargs)), gamma=0.99)
    # rollouts of 256 steps per ego (fewer for a tiny budget), minibatches of 1024; a
    # small initial action noise, or the first policies steer off the road at once
    n_steps = max(8, min(256, args.max_steps // args.num_envs))
    batch = min(1024, n_steps * args.num_envs)
    # the Dict observation needs SB3's multi-input policy, the flat one its plain MLP
    flat = kwargs.get("observation", "dict") == "flat"
    model = PPO(
        "MlpPolicy" if flat else "MultiInputPolicy",
        venv,
        n_steps=n_steps,
        batch_size=batch,
        gamma=0.99,
        seed=args.seed,
        device=kwargs["device"],
        policy_kwargs={"log_std_init": -1.5},
    )
    t0 = time.perf_counter()
    model.learn(args.max_steps)
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
        "timesteps": args.max_steps,
        "train_seconds": round(seconds, 1),
        "env": {"id": ENV_IDS[args.env], **kwargs},
        "ppo": evaluate_driving(ppo_policy, **eval_kw, **kwargs),
        "lane_keeping": evaluate_driving(lane_keeping_policy, **eval_kw, **_builtin_kwargs(kwargs)),
        "model": str(out / "ppo.zip"),
    }
    _emit(result, out / "eval.json")
    return 0


def _eval(args) -> int:
    import numpy as np

    from simsci.envs import evaluate_driving, lane_keeping_policy

    kwargs = _env_kwargs(args)
    target = args.policy
    if target == "lane-keeping":
        kwargs = _builtin_kwargs(kwargs)
        policy = lane_keeping_policy
    elif target == "zero":
        kwargs = _builtin_kwargs(kwargs)  # zero physical acceleration and steering

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

        model = PPO.load(path, device=kwargs["device"])
        kwargs = _checkpoint_kwargs(model, kwargs)
        stats = path.parent / "vecnormalize.pkl"  # written by `simsci driving ppo`
        norm = pickle.loads(stats.read_bytes()) if stats.is_file() else None

        def policy(obs):
            obs = norm.normalize_obs(obs) if norm is not None else obs
            return model.predict(obs, deterministic=True)[0]

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
