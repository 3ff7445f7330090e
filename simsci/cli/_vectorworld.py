"""``simsci rollout WORLD``: closed-loop rollouts in a generated world, one sub-parser per
world (``vectorworld``: :func:`simsci.envs.vectorworld_rollout`). ``simsci train
vectorworld`` is VectorWorld's registry entry, simsci.models.entry("vectorworld"),
through ``simsci train``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from simsci.cli._common import (
    DEPRECATED,
    add_action,
    add_deprecated,
    add_deprecated_param,
    add_device,
    add_group,
    add_out,
    add_param,
    add_seed,
    params,
    warn_deprecated,
)

DESCRIPTION = """\
Closed-loop rollouts in a world a trained model generates as the ego drives, one action
per world. Run 'simsci rollout WORLD --help' for each world's options.

example:
  simsci rollout vectorworld --checkpoint runs/vw --km 1.5 --out runs/vw_rollout
"""

VECTORWORLD_DESCRIPTION = """\
A closed-loop rollout in a world a trained VectorWorld generates as the ego drives
(simsci.envs.vectorworld_rollout, over simsci/VectorWorld-v1's world): map tiles
outpainted ahead in one step each, NPCs driven by ΔSim, the ego by --policy
(lane-keeping, zero, or a PPO checkpoint .zip of `simsci driving ppo`). A cell is
generated once per episode: a dropped tile the ego comes back to is restored, not drawn
again. Writes OUT/rollout.h5 (the whole drive, a trajectory file of kind rollout: every
vehicle at every 0.1 s step with its id, the ego's actions, every tile version with the
steps it was live; docs/format.md "VectorWorld drives"; `simsci driving metrics` reads
it), OUT/route.png (top-down plot of what was driven; needs matplotlib) and
OUT/stats.json (distance, why the rollout ended, real-time factor, tiles, spawns,
collisions, the ego's tile coverage, seam gaps, feasibility of the ego and the NPCs
from their stated motion and from their positions). Without
--checkpoint the world shipped with simsci is driven (simsci/pretrained/vectorworld;
--checkpoint small: the tiny on-the-fly model the tests use).

Why it ended (stats.json "end_reason", also printed on stderr): distance (drove --km),
time_limit (ran out of steps: 2 m/s on average), or, unless --keep-going, the failure
that stopped it, as simsci/VectorWorld-v1's info["end_reason"]: collision, offroad (left
a lane that goes on), left_generated_lanes (drove past the end of the generated lanes:
the map ran out, not a steering error).

examples:
  simsci train vectorworld --data data/scenes.h5 --out runs/vw
  simsci rollout vectorworld --checkpoint runs/vw --km 1.5 --out runs/vw_rollout
"""

#: what each end reason means, for the line the command prints
END_REASON_TEXT = {
    "distance": "drove the requested distance",
    "time_limit": "ran out of steps before the requested distance",
    "collision": "the ego collided with another vehicle",
    "offroad": "the ego left a lane that goes on, more than 0.5 m beyond its edge",
    "left_generated_lanes": "the ego drove past the end of the generated lanes, where "
    "the generated map ran out",
}

#: the options of ``simsci rollout vectorworld`` besides --seed, --device and --out:
#: (flag, dest, argparse keywords); the same list makes their deprecated spellings
#: before the world word (``simsci rollout --km 1 vectorworld``)
_VECTORWORLD_OPTIONS = (
    (
        "--checkpoint",
        "checkpoint",
        {
            "help": "VectorWorld directory (simsci train vectorworld); default: the "
            "shipped world; small: the tiny on-the-fly model"
        },
    ),
    ("--km", "km", {"type": float, "default": 1.0, "help": "distance to drive [km]"}),
    (
        "--policy",
        "policy",
        {"default": "lane-keeping", "help": "lane-keeping, zero or a PPO checkpoint (.zip)"},
    ),
    (
        "--tile-steps",
        "tile_steps",
        {"type": int, "default": 1, "help": "1 = one-step MeanFlow tiles"},
    ),
    ("--no-shaping", "no_shaping", {"action": "store_true", "help": "ΔSim without shaping"}),
    (
        "--keep-going",
        "keep_going",
        {"action": "store_true", "help": "do not stop at a collision or off-road"},
    ),
)
#: the options above that the world's action takes as --param NAME=VALUE (their old
#: spellings still work, with a warning)
_AS_PARAM = ("tile_steps", "no_shaping")
#: the --param names of ``simsci rollout vectorworld`` and their defaults
_ROLLOUT_PARAMS = {
    "tile_steps": 1,
    "shaping": True,
    "complete": True,
    "tile_agents": "generator",
    "npc_yield": True,
}
_SHARED = (
    ("--seed", "seed", {"type": int}),
    ("--device", "device", {}),
    ("--out", "out", {}),
)
_LEGACY = "legacy_"


class _BeforeWorld(argparse.Action):
    """An option given before the world word (the old grammar): warns and keeps the value
    for the action (:func:`_apply_legacy`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        shown = option_string if self.nargs == 0 else f"{option_string} {values}"
        now = {
            "--tile-steps": f"--param tile_steps={values}",
            "--no-shaping": "--param shaping=false",
        }.get(option_string, shown)
        warn_deprecated(
            f"'simsci rollout {shown} vectorworld' (an option before the world)",
            f"'simsci rollout vectorworld {now}'",
        )
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def add_to(sub) -> None:
    worlds = add_group(
        sub,
        "rollout",
        help="closed-loop rollout in a generated world (vectorworld)",
        description=DESCRIPTION,
    )
    group = sub.choices["rollout"]
    for flag, dest, kw in _VECTORWORLD_OPTIONS + _SHARED:
        flag_kw = {"nargs": 0, "const": True} if kw.get("action") == "store_true" else {}
        group.add_argument(
            flag,
            dest=_LEGACY + dest,
            action=_BeforeWorld,
            type=kw.get("type"),
            default=argparse.SUPPRESS,
            help=argparse.SUPPRESS,
            **flag_kw,
        )
    DEPRECATED[(group.prog, "OPTION ... vectorworld")] = "vectorworld OPTION ..."
    p = add_action(
        worlds,
        "vectorworld",
        help="drive a policy through a world VectorWorld generates",
        description=VECTORWORLD_DESCRIPTION,
        run=run_rollout,
    )
    for flag, dest, kw in _VECTORWORLD_OPTIONS:
        if dest not in _AS_PARAM:
            p.add_argument(flag, dest=dest, **kw)
    add_param(
        p,
        what="a parameter of the rollout: tile_steps (default 1: one-step MeanFlow tiles), "
        "shaping (default true: ΔSim with shaping), complete (default true: lane ends "
        "inside a tile joined or extended to its edge; false: the generator's raw lanes), "
        "tile_agents (default generator: the VAE places as many vehicles as the tile "
        "generator drew; vae: as many as the VAE's count head draws, the data's density), "
        "npc_yield (default true: NPCs brake for "
        "the ego ahead in their path or that they would meet from the side)",
    )
    add_deprecated_param(p, "--tile-steps", "tile_steps")
    add_deprecated(p, "--no-shaping", "--param shaping=false", dest="no_shaping", flag=True)
    add_seed(p)
    add_device(p, help="the world's")
    add_out(
        p,
        "dir",
        help="the rollout folder (rollout.h5, route.png, stats.json)",
        default="runs/vectorworld_rollout",
    )


def _apply_legacy(args) -> None:
    """Options given before the world word: they count unless given after it too."""
    parser = args.cli_parser
    for key in [k for k in vars(args) if k.startswith(_LEGACY)]:
        dest = key[len(_LEGACY) :]
        value = getattr(args, key)
        delattr(args, key)
        if getattr(args, dest, None) == parser.get_default(dest):
            setattr(args, dest, value)


def rollout_params(args) -> dict:
    """The --param values of the rollout over their defaults (the old --tile-steps and
    --no-shaping, before or after the world word, count when --param does not name them)."""
    values = dict(_ROLLOUT_PARAMS)
    if getattr(args, "tile_steps", None) is not None:
        values["tile_steps"] = args.tile_steps
    if getattr(args, "no_shaping", None):
        values["shaping"] = False
    given = params(args)
    unknown = sorted(set(given) - set(_ROLLOUT_PARAMS))
    if unknown:
        raise ValueError(
            f"unknown --param for rollout vectorworld: {unknown} (valid: "
            f"{', '.join(_ROLLOUT_PARAMS)})"
        )
    return {**values, **given}


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


def end_line(stats: dict) -> str:
    """One line: how far the rollout drove and why it ended (early: what stopped it)."""
    reason = stats["end_reason"]
    goal = stats["km_requested"] * 1000.0
    head = f"drove {stats['distance_m']:.0f} m of {goal:.0f} m in {stats['steps']} steps"
    why = END_REASON_TEXT.get(reason, reason)
    if reason == "distance":
        return f"{head}: {why}"
    return f"{head}; stopped early, {reason}: {why}"


def run_rollout(args) -> int:
    from simsci._io import write_json
    from simsci.envs import vectorworld_rollout
    from simsci.models.vectorworld import plot_route, write_rollout

    _apply_legacy(args)
    values = rollout_params(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = vectorworld_rollout(
        args.checkpoint,
        km=args.km,
        policy=load_policy(args.policy),
        seed=args.seed,
        device=args.device,
        stop_on_failure=not args.keep_going,
        tile_steps=int(values["tile_steps"]),
        shaping=bool(values["shaping"]),
        complete=bool(values["complete"]),
        tile_agents=str(values["tile_agents"]),
        npc_yield=bool(values["npc_yield"]),
    )
    stats = {"policy": args.policy, "checkpoint": args.checkpoint, **result["stats"]}
    write_rollout(result, out / "rollout.h5", meta={"policy": args.policy})
    if plot_route(result, out / "route.png"):
        stats["plot"] = str(out / "route.png")
    write_json(out / "stats.json", stats)
    print(json.dumps(stats, indent=2))
    print(f"simsci rollout vectorworld: {end_line(stats)}", file=sys.stderr)
    return 0
