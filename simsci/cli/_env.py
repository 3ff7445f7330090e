"""``simsci env list|rollout``: list the environments and record rollouts into the trajectory
format; one sub-parser per action."""

from __future__ import annotations

import json

from simsci.cli._common import (
    add_action,
    add_device,
    add_episodes,
    add_group,
    add_out,
    add_param,
    add_seed,
    allow_free_form,
    legacy_params,
    params,
    parse_value,
)

DESCRIPTION = """\
The gymnasium environments of simsci (import simsci.envs registers them):
simsci/ODEControl-v0, simsci/PDEControl-v0, simsci/Surrogate-v0, simsci/Driving-v0
(its Dict observation recorded as one step field x.<key> per entry, or with --param
observation=flat as one vector x; `simsci driving` for RL in it).
Run 'simsci env ACTION --help' for each action's options.

examples:
  simsci env list
  simsci env rollout ODEControl --param task=pendulum-swingup -n 64 --out data/pend.h5
  simsci env rollout PDEControl --param task=heat-track -n 16 --num-envs 16 --out data/heat.h5
  simsci train controlled_ode --data data/pend.h5 --out runs/pend --max-steps 2000
"""

LIST_DESCRIPTION = "The environments and their tasks."

ROLLOUT_DESCRIPTION = """\
Run a policy (zero or uniformly random actions) in the batched vector environment and
record every finished episode as a rollout file (kind "rollout": observations x,
actions, rewards, flags, raw states), the data a surrogate (simsci train controlled_ode)
learns from. --param sets a keyword of the environment (task=pendulum-swingup,
max_episode_steps=100, target=[0,0], system=lorenz63, ...). A Dict observation
(Driving) is stored as one step field per entry (x.ego, x.agents, x.lanes, ...; read it
back with simsci.envs.rollout_observations).

examples:
  simsci env rollout ODEControl --param task=pendulum-swingup -n 64 --out data/pend.h5
  simsci env rollout PDEControl --param task=heat-track --param max_episode_steps=50 \\
      -n 16 --num-envs 16 --out data/heat.h5
  simsci env rollout Driving --param max_episode_steps=200 -n 8 --num-envs 4 \\
      --out data/driving.h5
"""

SHORT = {
    "ODEControl": "simsci/ODEControl-v0",
    "PDEControl": "simsci/PDEControl-v0",
    "Surrogate": "simsci/Surrogate-v0",
    "Driving": "simsci/Driving-v0",
}


def add_to(sub) -> None:
    actions = add_group(
        sub, "env", help="environments: list, record rollouts", description=DESCRIPTION
    )
    add_action(
        actions, "list", help="the environments and their tasks", description=LIST_DESCRIPTION,
        run=run_list,
    )  # fmt: skip
    p = add_action(
        actions,
        "rollout",
        help="record rollouts of a policy into a trajectory file",
        description=ROLLOUT_DESCRIPTION,
        run=run_rollout,
        extra_options=True,  # the deprecated free-form --KEY VALUE keywords
    )
    p.add_argument(
        "env",
        metavar="ENV",
        help="ODEControl, PDEControl, Surrogate, Driving or an id (simsci/...-v0)",
    )
    add_episodes(p, default=32, help="episodes to record")
    p.add_argument("--num-envs", type=int, default=16, help="sub-environments stepped together")
    p.add_argument(
        "--policy", choices=["random", "zero"], default="random", help="the actions taken"
    )
    add_param(p, what="a keyword of the environment (task=heat-track, max_episode_steps=100)")
    allow_free_form(p, "environment keywords")
    add_seed(p, help="the seed of the resets and of the random policy")
    add_device(p)
    add_out(p, "file", help="the rollout file to write (.h5); required")
    p.add_argument("--compression", choices=["gzip", "lzf"], default=None, help="HDF5 compression")


def env_kwargs(extra: list[str]) -> dict:
    """``--KEY VALUE`` pairs (``--max-episode-steps 100``) as constructor keywords."""
    out, items = {}, list(extra)
    while items:
        key = items.pop(0)
        if not key.startswith("--") or len(key) < 3:
            raise ValueError(f"expected --KEY VALUE environment keywords, got {key!r}")
        if not items or items[0].startswith("--"):
            raise ValueError(f"environment keyword {key} needs a value")
        out[key[2:].replace("-", "_")] = parse_value(items.pop(0))
    return out


def describe() -> str:
    from simsci.envs import ENV_IDS, PDE_TASKS, TASKS

    lines = ["id                      tasks"]
    lines.append(f"{'simsci/ODEControl-v0':24s}{', '.join(TASKS)} (any ODE/SDE system)")
    lines.append(f"{'simsci/PDEControl-v0':24s}{', '.join(PDE_TASKS)}")
    lines.append(
        f"{'simsci/Surrogate-v0':24s}checkpoint=PATH of a model with the surrogate interface"
    )
    lines.append(
        f"{'simsci/Driving-v0':24s}an ego on a procedural route through IDM/MOBIL traffic "
        "(Dict or observation=flat; simsci driving ppo|eval)"
    )
    known = {"simsci/ODEControl-v0", "simsci/PDEControl-v0", "simsci/Surrogate-v0"}
    missing = set(ENV_IDS) - known - {"simsci/Driving-v0"}
    lines += [f"{env_id:24s}" for env_id in sorted(missing)]
    return "\n".join(lines)


def run_list(args) -> int:
    print(describe())
    return 0


def run_rollout(args) -> int:
    import gymnasium
    import numpy as np

    import simsci.envs
    from simsci._device import resolve_device
    from simsci.envs import RecordVectorEpisodes
    from simsci.errors import unknown_name

    if not args.out:  # checked here, not by argparse: one line and status 2, as before
        raise ValueError("env rollout needs --out FILE (the rollout file to write)")
    env_id = SHORT.get(args.env, args.env)
    if env_id not in simsci.envs.ENV_IDS:
        raise unknown_name("environment", args.env, [*SHORT, *simsci.envs.ENV_IDS])
    for name in ("episodes", "num_envs"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    kwargs = {
        **legacy_params(args.extra, env_kwargs, "simsci env rollout"),
        **params(args),
        "device": str(resolve_device(args.device)),
    }
    venv = gymnasium.make_vec(
        env_id, num_envs=args.num_envs, vectorization_mode="vector_entry_point", **kwargs
    )
    recorder = RecordVectorEpisodes(
        venv,
        args.out,
        max_episodes=args.episodes,
        meta={"policy": args.policy, "cli": "simsci env rollout"},
        compression=args.compression,
    )
    space = venv.action_space
    rng = np.random.default_rng(args.seed)
    recorder.reset(seed=args.seed)
    steps = 0
    while recorder.recorded < args.episodes:
        if args.policy == "zero":
            actions = np.zeros(space.shape, np.float32)
        else:
            actions = rng.uniform(space.low, space.high, size=space.shape).astype(np.float32)
        recorder.step(actions)
        steps += 1
    recorder.close()
    print(
        json.dumps(
            {
                "out": args.out,
                "env": env_id,
                "episodes": recorder.recorded,
                "vector_steps": steps,
                "policy": args.policy,
            }
        )
    )
    return 0
