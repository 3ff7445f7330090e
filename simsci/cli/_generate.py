"""``simsci generate``: simulate a registered system, or build a registered dataset, into
a trajectory file."""

from __future__ import annotations

from simsci.cli._common import (
    add_action,
    add_deprecated,
    add_device,
    add_episodes,
    add_no_progress,
    add_out,
    add_param,
    add_seed,
    allow_free_form,
    legacy_params,
    params,
    parse_value,
)
from simsci.errors import unknown_name

DESCRIPTION = """\
Simulate N trajectories of a registered system as one batched solve on the device and
write them as a trajectory file (kind="state"). Observations can be thinned to an
irregular subset (--keep), independently per channel (--per-channel), and noised
(--obs-noise). Under torchrun each rank writes one shard into OUT (a directory).
A dataset name (pendulum_images, climate, hawkes, population_events, mobility...; see
--list) builds that data set instead
(simsci.datasets.make_dataset): it takes --episodes, --out, --seed, --split-fractions,
--compression, --keep and --t-end/--dt where the dataset has them, and its own options
as --param NAME=VALUE.

--param NAME=VALUE sets a parameter of the system (rho=35, nu=0.001), an option of its
constructor (dim=20 for lorenz96; resolution=1024 or resolution=[64,64] for a PDE
system's grid) or an option of the dataset (size=32, noise_std=0.1). --params says how
the parameters vary between episodes: the same for all (default), drawn uniformly over
the system's ranges (sample), or a grid.

examples:
  mkdir -p data
  simsci generate lorenz63 -n 1000 --t-end 10 --dt 0.01 --out data/lorenz.h5
  simsci generate lorenz63 -n 500 --keep 0.3 --per-channel --out data/irregular.h5
  simsci generate van_der_pol --params "mu=0.5,1,2" -n 100 --out data/vdp.h5
  simsci generate lorenz96 --param dim=20 --params sample --out data/l96.h5
  simsci generate burgers --param nu=0.001 --param resolution=1024 -n 1000 --t-end 1 \\
      --dt 0.01 --out data/b.h5
  simsci generate pendulum_images -n 500 --out data/pend_img.h5
  simsci generate climate -n 200 --keep 0.7 --param missing=0.2 --out data/climate.h5
  simsci generate hawkes -n 500 --param marks=5 --out data/hawkes5.h5
  simsci generate population_events -n 1000 --out data/population.h5
  simsci generate --list
  torchrun --nproc_per_node 4 -m simsci generate lorenz63 --episodes 100000 --out data/shards
"""


def add_to(sub) -> None:
    p = add_action(
        sub,
        "generate",
        help="simulate a system into a trajectory file",
        description=DESCRIPTION,
        run=run,
        extra_options=True,  # the deprecated free-form --NAME VALUE parameters
    )
    p.add_argument(
        "system",
        nargs="?",
        metavar="SYSTEM",
        help="registry name of a system (lorenz63) or a dataset (climate); see --list",
    )
    p.add_argument(
        "--list", action="store_true", help="list the registered systems and datasets and exit"
    )
    add_out(p, "file", help="the trajectory file to write (under torchrun: a DIR of shards)")
    add_episodes(
        p,
        default=100,
        help="number of trajectories (episodes); -n and --episodes work under torchrun too "
        "(the old --n does not: torchrun reads it as an abbreviation of its own options)",
        deprecated=("--n",),
    )
    p.add_argument("--t-end", type=float, default=None, help="end time (default: the system's)")
    p.add_argument("--dt", type=float, default=None, help="time step of the stored grid")
    p.add_argument(
        "--keep",
        type=float,
        default=None,
        help="fraction of time points kept per episode, in (0, 1]; < 1 makes irregular data "
        "(default: 1 for a system, the dataset's own for a dataset)",
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
    add_param(
        p, what="a parameter or constructor option of the system, or an option of the dataset"
    )
    add_deprecated(p, "--option", "--param", dest="param", append=True)
    allow_free_form(p, "system parameters and dataset options")
    p.add_argument(
        "--params",
        default="default",
        metavar="SPEC",
        help="how the parameters vary between episodes: 'default' (as set, for all), "
        "'sample' (uniform over the system's ranges) or a grid 'NAME=v1,v2;NAME2=w1,w2'",
    )
    p.add_argument("--burn-in", type=float, default=0.0, help="time simulated and dropped first")
    # not --split: elsewhere --split names the split to read (train, val, test, all)
    p.add_argument(
        "--split-fractions",
        dest="split",
        default=None,
        metavar="TRAIN,VAL,TEST",
        help="fractions of the episodes in each split (default: 0.8,0.1,0.1 for systems; "
        "a dataset's own)",
    )
    add_deprecated(p, "--split", "--split-fractions", dest="split")
    add_seed(p, help="random seed (initial states, params, noise)")
    add_device(p)
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
        help="PDE systems: store on this coarser grid (solve on the resolution, keep every "
        "k-th point)",
    )
    p.add_argument(
        "--dtype", choices=["float64", "float32"], default="float64", help="stored precision"
    )
    p.add_argument("--compression", choices=["gzip", "lzf"], default=None, help="HDF5 compression")
    add_no_progress(p)


def system_params(args) -> dict:
    """Every parameter of the command line: the deprecated free-form --NAME VALUE ones,
    then --param (the deprecated --option KEY=VALUE included)."""
    free = legacy_params(args.extra, system_arguments, "simsci generate")
    return {**free, **params(args)}


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
    import torch

    system = systems.get(args.system, **_tuples(system_params(args)))
    path = systems.generate(
        system,
        args.episodes,
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
    options = {**given, **system_params(args)}
    if split is not None:  # else the dataset's own default split
        options["split"] = split
    if args.compression is not None:
        options["compression"] = args.compression
    path = datasets.make_dataset(
        args.system,
        args.episodes,
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


def _tuples(kwargs: dict) -> dict:
    """JSON lists of --param (resolution=[64,32]) as the tuples the systems take."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}


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
            raise ValueError(f"unexpected argument {item!r}; parameters go as --param NAME=VALUE")
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
