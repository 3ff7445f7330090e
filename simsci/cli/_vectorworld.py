"""``simsci rollout vectorworld``: VectorWorld from the CLI (``simsci train vectorworld``
is its registry entry, simsci.models.entry("vectorworld"), through ``simsci train``)."""

from __future__ import annotations

import json
from pathlib import Path

from simsci.cli._common import HelpFormatter

ROLLOUT_DESCRIPTION = """\
A closed-loop rollout in a world a trained VectorWorld generates as the ego drives
(simsci.models.vectorworld): map tiles outpainted ahead in one step each, NPCs driven by
ΔSim, the ego by --policy (lane-keeping, zero, or a PPO checkpoint .zip of `simsci driving
ppo`). Writes OUT/rollout.h5 (the drive in the scene-tile format, readable by
simsci.driving.read_scene and `simsci driving metrics`), OUT/route.png (top-down
plot of the route; needs matplotlib) and OUT/stats.json (distance, real-time factor,
tiles, spawns, collisions, NPC infeasibility, seam gaps). Without --checkpoint the small
on-the-fly model is used (trained once and cached: for trying things, not for results).

examples:
  simsci train vectorworld --data data/scenes.h5 --out runs/vw
  simsci rollout vectorworld --checkpoint runs/vw --km 1.5 --out runs/vw_rollout
"""


def add_to(sub) -> None:
    p = sub.add_parser(
        "rollout",
        help="closed-loop rollout in a generated world (vectorworld)",
        description=ROLLOUT_DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    p.add_argument("world", choices=["vectorworld"], help="the world model")
    p.add_argument("--checkpoint", default=None, help="VectorWorld directory (simsci train)")
    p.add_argument("--km", type=float, default=1.0, help="distance to drive [km]")
    p.add_argument("--policy", default="lane-keeping", help="lane-keeping, zero or a PPO .zip")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None)
    p.add_argument("--tile-steps", type=int, default=1, help="1 = one-step MeanFlow tiles")
    p.add_argument("--no-shaping", action="store_true", help="ΔSim without logit shaping")
    p.add_argument("--keep-going", action="store_true", help="do not stop at a failure")
    p.add_argument("--out", default="runs/vectorworld_rollout", help="output directory")
    p.set_defaults(run=run_rollout)


def load_policy(target: str):
    """``policy(obs) -> actions`` for a name (lane-keeping, zero) or a PPO .zip file
    (with the vecnormalize.pkl that `simsci driving ppo` writes beside it)."""
    import numpy as np

    from simsci.envs import lane_keeping_policy

    if target in ("lane-keeping", "lane_keeping"):
        return lane_keeping_policy
    if target == "zero":
        return lambda obs: np.zeros((len(obs["ego"]), 2), np.float32)
    path = Path(target)
    if not path.is_file():
        raise FileNotFoundError(
            f"policy {target!r} is neither lane-keeping, zero nor a PPO checkpoint file"
        )
    import pickle

    try:
        from stable_baselines3 import PPO
    except ImportError as exc:
        raise RuntimeError(
            'a PPO policy needs Stable Baselines3: pip install "simsci[rl]"'
        ) from exc
    model = PPO.load(path)
    stats = path.parent / "vecnormalize.pkl"
    norm = pickle.loads(stats.read_bytes()) if stats.is_file() else None

    def policy(obs):
        obs = norm.normalize_obs(obs) if norm is not None else obs
        return model.predict(obs, deterministic=True)[0]

    return policy


def run_rollout(args) -> int:
    from simsci._io import write_json
    from simsci.models.vectorworld import plot_route, rollout, write_rollout

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = rollout(
        args.checkpoint,
        km=args.km,
        policy=load_policy(args.policy),
        seed=args.seed,
        device=args.device,
        stop_on_failure=not args.keep_going,
        tile_steps=args.tile_steps,
        shaping=not args.no_shaping,
    )
    stats = {"policy": args.policy, "checkpoint": args.checkpoint, **result["stats"]}
    write_rollout(result, out / "rollout.h5", meta={"policy": args.policy})
    if plot_route(result, out / "route.png"):
        stats["plot"] = str(out / "route.png")
    write_json(out / "stats.json", stats)
    print(json.dumps(stats, indent=2))
    return 0
