"""``simsci generate``: simulate a registered system, or build a registered dataset, into
a trajectory file."""

from __future__ import annotations

import torch

from simsci.cli._common import HelpFormatter, key_values, parse_value
from simsci.errors import unknown_name

DESCRIPTION = """\
Simulate N trajectories of a registered system as one batched solve on the device and
write them as a trajectory file (kind="state"). Observations can be thinned to an
irregular subset (--keep), independently per channel (--per-channel), and noised
(--obs-noise). Under torchrun each rank writes one shard into OUT (a directory).
A dataset name (pendulum_images, climate, hawkes, population_events, mobility...; see
--list) builds that data set instead
(simsci.datasets.make_dataset): it takes --n, --out, --seed, --split, --compression,
--keep and --t-end/--dt where the dataset has them, and its own options as --NAME VALUE.

examples:
  mkdir -p data
  simsci generate lorenz63 --n 1000 --t-end 10 --dt 0.01 --out data/lorenz.h5
  simsci generate lorenz63 --n 500 --keep 0.3 --per-channel --out data/irregular.h5
  simsci generate van_der_pol --params "mu=0.5,1,2" --n 100 --out data/vdp.h5
  simsci generate lorenz96 --option dim=20 --params sample --out data/l96.h5
  simsci generate burgers --nu 0.001 --n 1000 --nx 1024 --t-end 1 --dt 0.01 --out data/b.h5
  simsci generate pendulum_images --n 500 --out data/pend_img.h5
  simsci generate climate --n 200 --keep 0.7 --missing 0.2 --out data/climate.h5
  simsci generate hawkes --n 500 --marks 5 --out data/hawkes5.h5
  simsci generate population_events --n 1000 --out data/population.h5

Any other --NAME VALUE sets a parameter of the system (--rho 35, --nu 0.001) or an
option of the dataset (--size 32, --noise-std 0.1); --nx and --ny set the grid
resolution of a PDE system.
  simsci generate --list
  torchrun --nproc_per_node 4 -m simsci generate lorenz63 --episodes 100000 --out data/shards
"""


def add_to(sub) -> None:
    p = sub.add_parser(
        "generate",
        help="simulate a system into a trajectory file",
        description=DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "system",
        nargs="?",
        help="registry name of a system (lorenz63) or a dataset (climate); see --list",
    )
    p.add_argument(
        "--list", action="store_true", help="list the registered systems and datasets and exit"
    )
    p.add_argument("--out", help="output file (or directory of shards under torchrun)")
    p.add_argument(
        "--n",
        "--episodes",
        dest="n",
        type=int,
        default=100,
        help="number of trajectories (episodes); under torchrun write --episodes, since "
        "torchrun reads --n as an abbreviation of its own options",
    )
    p.add_argument("--t-end", type=float, default=None, help="end time (default: the system's)")
    p.add_argument("--dt", type=float, default=None, help="time step of the stored grid")
    p.add_argument(
        "--keep",
        type=float,
        default=None,
        help="fraction of time points kept per episode, in (0, 1]; < 1 makes irregular data "
        "(None: 1 for a system, the dataset's own default for a dataset)",
    )
    p.add_argument(
        "--per-channel",
        action="store_true",
        help="thin each channel independently (writes a mask; unobserved values are NaN)",
    )
    p.add_argument(
        "--obs-noise",
        type=float,
        default=0.0,
        help="Gaussian observation noise, as a fraction of each channel's std",
    )
    p.add_argument(
        "--params",
        default="default",
        help="'default', 'sample' (uniform over the system's ranges) or a grid "
        "'NAME=v1,v2;NAME2=w1,w2'",
    )
    p.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="system constructor option, e.g. dim=40 for lorenz96 (repeatable)",
    )
    p.add_argument("--burn-in", type=float, default=0.0, help="time simulated and dropped first")
    p.add_argument(
        "--split",
        default=None,
        help="train,val,test fractions (default: 0.8,0.1,0.1 for systems; a dataset's own)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="random seed (initial states, params, noise)"
    )
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    p.add_argument("--method", default=None, help="solver method (default: the system's)")
    p.add_argument("--batch-size", type=int, default=None, help="trajectories per solve")
    p.add_argument(
        "--step-size",
        type=float,
        default=None,
        help="internal solver step (fixed-step ODE methods, PDE solvers); --dt is the "
        "recording interval",
    )
    p.add_argument("--rtol", type=float, default=None, help="adaptive ODE methods")
    p.add_argument("--atol", type=float, default=None, help="adaptive ODE methods")
    p.add_argument(
        "--save-resolution",
        type=int,
        nargs="+",
        default=None,
        help="PDE systems: store on this coarser grid (solve on --nx, keep every k-th point)",
    )
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    p.add_argument("--compression", choices=["gzip", "lzf"], default=None)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(run=run, extra_options=True)


def run(args) -> int:
    from simsci import datasets, systems
    from simsci._device import resolve_device

    if args.list:
        print(describe_systems())
        return 0
    if not args.system or not args.out:
        raise ValueError("generate needs a SYSTEM (or DATASET) and --out FILE (or --list)")
    split = None if args.split is None else _split(args.split)
    if args.system in datasets.DATASETS:
        return run_dataset(args, split)
    if args.system not in systems.SYSTEMS:
        valid = [*systems.SYSTEMS, *datasets.DATASETS]
        raise unknown_name("system or dataset", args.system, valid)
    kwargs = {**key_values(args.option, "--option"), **system_arguments(args.extra)}
    system = systems.get(args.system, **kwargs)
    path = systems.generate(
        system,
        args.n,
        t_end=args.t_end,
        dt=args.dt,
        out=args.out,
        keep=1.0 if args.keep is None else args.keep,
        per_channel=args.per_channel,
        obs_noise=args.obs_noise,
        params=systems.parse_param_spec(args.params),
        seed=args.seed,
        device=resolve_device(args.device),
        method=args.method,
        split=(0.8, 0.1, 0.1) if split is None else split,
        burn_in=args.burn_in,
        batch_size=args.batch_size,
        progress=not args.no_progress,
        compression=args.compression,
        step_size=args.step_size,
        rtol=args.rtol,
        atol=args.atol,
        save_resolution=_resolution(args.save_resolution),
        dtype=getattr(torch, args.dtype),
    )
    print(f"wrote {path}")
    return 0


#: generate's options that a dataset may take (when it has an option of that name), with
#: the parser defaults: only options given on the command line are passed on
_SHARED_OPTIONS = {
    "t_end": None,
    "dt": None,
    "keep": None,
    "per_channel": False,
    "obs_noise": 0.0,
    "params": "default",
    "option": None,
    "burn_in": 0.0,
    "method": None,
    "batch_size": None,
    "step_size": None,
    "rtol": None,
    "atol": None,
    "save_resolution": None,
    "dtype": "float64",
}


def run_dataset(args, split) -> int:
    """Build the registered dataset ``args.system`` (``simsci.datasets.make_dataset``)."""
    from simsci import datasets

    given = {k: getattr(args, k) for k, d in _SHARED_OPTIONS.items() if getattr(args, k) != d}
    options = {**given, **system_arguments(args.extra)}
    if split is not None:  # else the dataset's own default split
        options["split"] = split
    if args.compression is not None:
        options["compression"] = args.compression
    path = datasets.make_dataset(
        args.system,
        args.n,
        out=args.out,
        seed=args.seed,
        progress=not args.no_progress,
        **options,
    )
    print(f"wrote {path}")
    return 0


def _split(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(
            f"--split must be three comma-separated fractions train,val,test (e.g. "
            f"0.8,0.1,0.1), got {text!r}"
        ) from None


def describe_systems() -> str:
    """One line per registered system: name, state, noise, default parameters; then one
    line per registered dataset: name and summary."""
    from simsci import datasets, systems

    lines = []
    for name in systems.available():
        system = systems.get(name)
        noise = "pde" if system.kind == "field" else (system.noise_type or "ode")
        params = ", ".join(f"{k}={v:g}" for k, v in system.default_params.items())
        state = ",".join(system.state_names)
        if len(state) > 40:
            state = f"{system.dim} states"
        lines.append(f"{name:28s} {noise:9s} [{state}]  {params}")
    for name in datasets.available_datasets():
        lines.append(f"{name:28s} {'dataset':9s} {datasets.DATASETS[name].summary}")
    return "\n".join(lines)


def _resolution(values):
    if values is None:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def system_arguments(extra: list[str]) -> dict:
    """``--rho 35 --nx 256 --ny=128`` -> ``{"rho": 35, "resolution": (256, 128)}``.

    Names are the system's own (its parameters and options); ``systems.get`` rejects an
    unknown one with the list of valid names. ``--nx``/``--ny`` make ``resolution``.
    """
    out, res, items = {}, {}, list(extra)
    while items:
        item = items.pop(0)
        if not item.startswith("--") or len(item) < 3:
            raise ValueError(f"unexpected argument {item!r}; system parameters go as --NAME VALUE")
        name, sep, value = item[2:].partition("=")
        if not sep:
            if not items or items[0].startswith("--"):
                raise ValueError(f"--{name} needs a value, e.g. --{name} 0.5")
            value = items.pop(0)
        name = name.replace("-", "_")
        if name in ("nx", "ny"):
            res[name] = int(value)
        else:
            out[name] = parse_value(value)
    if "ny" in res and "nx" not in res:
        raise ValueError("--ny needs --nx too (a 2D grid is --nx NX --ny NY)")
    if res:
        out["resolution"] = (res["nx"], res["ny"]) if "ny" in res else res["nx"]
    return out
