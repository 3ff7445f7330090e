"""``simsci zoo build|info`` and ``simsci dynadiff data|train|adapt|compare``: DynaDiff,
generating dynamics predictors for new environments (simsci.models.dynadiff); one
sub-parser per action."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

from simsci.cli._common import (
    add_action,
    add_deprecated,
    add_deprecated_param,
    add_device,
    add_group,
    add_max_steps,
    add_no_progress,
    add_out,
    add_param,
    add_seed,
    params,
)

ZOO_DESCRIPTION = """\
The model zoo of DynaDiff: one expert dynamics predictor per training environment.
Run 'simsci zoo ACTION --help' for each action's options.

examples:
  simsci dynadiff data --system lotka_volterra --out data/lv
  simsci zoo build --data data/lv --out runs/lv/zoo.pt
  simsci zoo info runs/lv/zoo.pt
"""

BUILD_DESCRIPTION = """\
Train a pooled model on every environment of --data, then one expert per environment
started at it, all at once (torch.func.vmap); write --out (a zoo file with each expert's
weights, environment parameters, validation RMSE and the persistence RMSE of its
validation episodes) and print its summary (JSON on stdout; one line on stderr: expert
and persistence RMSE, their ratio, build seconds). --data is a
file or a directory of `simsci dynadiff data` (train.h5 + val.h5). The runs
(checkpoints, metrics) go to --runs (default OUT.runs): rerunning the same command
resumes an interrupted build. --param sets a field of the experts' architecture
(hidden=64, depth=3, activation=tanh, substeps=1, kernel=3, modes=6).

example:
  simsci zoo build --data data/lv --out runs/lv/zoo.pt --max-steps 1500 --param hidden=32
"""

INFO_DESCRIPTION = """\
Summarise a zoo file as JSON: system, experts, architecture, parameters per expert, the
varied environment parameters and their range, validation RMSE against persistence
(ratio < 1: better than predicting no change), build time.

example:
  simsci zoo info runs/lv/zoo.pt
"""

DESCRIPTION = """\
DynaDiff: a diffusion model in the weight space of a model zoo generates a dynamics
predictor for a new environment from a short context trajectory of it.
Run 'simsci dynadiff ACTION --help' for each action's options.

examples:
  simsci dynadiff data --system lotka_volterra --out data/lv
  simsci zoo build --data data/lv --out runs/lv/zoo.pt
  simsci dynadiff train --zoo runs/lv/zoo.pt --data data/lv/train.h5 --out runs/lv/gen
  simsci dynadiff adapt runs/lv/gen/generator.pt --context data/lv/in_domain.h5 --out pred.pt
  simsci evaluate pred.pt --data data/lv/in_domain.h5 --split all
  simsci dynadiff compare runs/lv/gen/generator.pt --zoo runs/lv/zoo.pt --data data/lv/in_domain.h5
"""

DATA_DESCRIPTION = """\
Write a CoDA/LEADS multi-environment protocol for --system into the folder --out:
train.h5, val.h5, in_domain.h5 and out_of_domain.h5 (their paths are printed as JSON).

example:
  simsci dynadiff data --system lotka_volterra --out data/lv --quick
"""

TRAIN_DESCRIPTION = """\
Train the generator on --zoo and its --data: the weight autoencoder, its decoder, then
the conditional latent diffusion (each stage resumes under --out); writes
OUT/generator.pt. This is `simsci train dynadiff` (the model registry's entry).
--max-steps sets the length of every stage (default: autoencoder 1500, decoder twice the
autoencoder's, diffusion 3000); --param sets one stage (autoencoder_steps=N,
decoder_steps=N, diffusion_train_steps=N) or a generator argument (context_steps=N,
frames per context, default the protocol's or 10; context_episodes=N, default 1; and the
other arguments of simsci.models.dynadiff.DynaDiff).

example:
  simsci dynadiff train --zoo runs/lv/zoo.pt --data data/lv --out runs/lv/gen \\
      --param diffusion_train_steps=5000
"""

ADAPT_DESCRIPTION = """\
Generate a predictor for the environment of --context (a trajectory file of the new
environment: its first episodes' first frames are the context) in one call; writes
--out, a model checkpoint that `simsci evaluate` and simsci.train.load_model read, and
prints the context error of each candidate.

example:
  simsci dynadiff adapt runs/lv/gen/generator.pt --context data/lv/in_domain.h5 --out pred.pt
"""

COMPARE_DESCRIPTION = """\
DynaDiff against the baselines (pooled model, nearest expert, zoo average, fine-tuning,
and CoDA with --coda) on every environment of --data: RMSE/MSE of each method's
predictor and its deploy time, printed as JSON (the summary) and written in full to
--out. Runs on the CPU, where the zoo's baselines run, so that the times compare.

example:
  simsci dynadiff compare runs/lv/gen/generator.pt --zoo runs/lv/zoo.pt \\
      --data data/lv/in_domain.h5 --out compare.json
"""

GENERATOR_HELP = "the generator checkpoint (OUT/generator.pt of dynadiff train)"

#: old options of `dynadiff train` -> the --param they set now
_OLD_TRAIN_OPTIONS = {
    "--autoencoder-steps": "autoencoder_steps",
    "--decoder-steps": "decoder_steps",
    "--diffusion-steps": "diffusion_train_steps",
    "--context-steps": "context_steps",
    "--context-episodes": "context_episodes",
}


def add_to(sub) -> None:
    _add_zoo(sub)
    actions = add_group(
        sub,
        "dynadiff",
        help="DynaDiff: data protocols, generator training, adaptation to new environments",
        description=DESCRIPTION,
    )
    d = add_action(
        actions,
        "data",
        help="write a multi-environment protocol (train, val, in_domain, out_of_domain)",
        description=DATA_DESCRIPTION,
        run=run_data,
    )
    d.add_argument(
        "--system",
        required=True,
        help="the protocol's system: lotka_volterra, glycolytic_oscillator, damped_pendulum, "
        "gray_scott or navier_stokes_2d",
    )
    d.add_argument("--quick", action="store_true", help="a small version (seconds)")
    add_seed(d)
    add_device(d, help="where the systems are simulated")
    add_out(d, "dir", help="the folder of the four files", required=True)
    add_no_progress(d)

    t = add_action(
        actions,
        "train",
        help="train the generator on a zoo (autoencoder, decoder, diffusion)",
        description=TRAIN_DESCRIPTION,
        run=run_train,
    )
    t.add_argument("--zoo", required=True, help="the zoo file (simsci zoo build)")
    t.add_argument(
        "--data", required=True, help="the zoo's data: its file, or the folder of dynadiff data"
    )
    add_max_steps(t, default=None, help="the length of every stage (default: each its own)")
    add_param(t, what="a stage length or a generator argument (see above)")
    for old, name in _OLD_TRAIN_OPTIONS.items():
        add_deprecated_param(t, old, name)
    add_seed(t)
    add_device(t)
    add_out(t, "dir", help="the run folder (stages, generator.pt)", required=True)
    add_no_progress(t)

    a = add_action(
        actions,
        "adapt",
        help="generate a predictor for a new environment from its context",
        description=ADAPT_DESCRIPTION,
        run=run_adapt,
    )
    a.add_argument("generator", metavar="GENERATOR", help=GENERATOR_HELP)
    a.add_argument("--context", required=True, help="a trajectory file of the new environment")
    a.add_argument(
        "--candidates", type=int, default=None, help="samples scored (default: the generator's)"
    )
    a.add_argument(
        "--refine-steps",
        type=int,
        default=None,
        help="latent refinement steps on the context (default: the generator's)",
    )
    add_seed(a, help="the seed of the diffusion sampling")
    add_device(a)
    add_out(a, "file", help="the predictor checkpoint to write (.pt)", required=True)

    c = add_action(
        actions,
        "compare",
        help="DynaDiff vs the baselines on the environments of a file",
        description=COMPARE_DESCRIPTION,
        run=run_compare,
    )
    c.add_argument("generator", metavar="GENERATOR", help=GENERATOR_HELP)
    c.add_argument("--zoo", required=True, help="the zoo file the generator was trained on")
    c.add_argument("--data", required=True, help="the test environments (a protocol file)")
    c.add_argument(
        "--finetune-steps", type=int, default=100, help="steps of the fine-tuning baseline"
    )
    c.add_argument("--coda", default=None, help="a CoDA run folder or checkpoint to add")
    c.add_argument(
        "--guidance", type=float, default=None,
        help="guidance scale of dynadiff_guided (default: the generator's, else 0.3)",
    )  # fmt: skip
    c.add_argument(
        "--polish-steps", type=int, default=None,
        help="polishing steps of dynadiff_guided at noise level 0 (default: the generator's)",
    )  # fmt: skip
    c.add_argument("--finetune-lr", type=float, default=1e-3, help="fine-tuning learning rate")
    c.add_argument("--coda-lr", type=float, default=1e-2, help="CoDA adaptation learning rate")
    c.add_argument(
        "--tune-on", default=None, metavar="VAL",
        help="pick the fine-tuning and CoDA learning rates and the guidance scale by a sweep "
        "on the environments of this file (e.g. the protocol's val.h5); overrides "
        "--finetune-lr, --coda-lr, --guidance and --polish-steps",
    )  # fmt: skip
    add_seed(c, help="the seed of the diffusion sampling")
    add_out(c, "file", help="the full results (JSON)")


def _add_zoo(sub) -> None:
    actions = add_group(
        sub,
        "zoo",
        help="build a DynaDiff model zoo (one expert per environment)",
        description=ZOO_DESCRIPTION,
    )
    b = add_action(
        actions,
        "build",
        help="train the pooled model and one expert per environment",
        description=BUILD_DESCRIPTION,
        run=run_build,
    )
    b.add_argument(
        "--data", required=True, help="a multi-environment file, or the folder of dynadiff data"
    )
    b.add_argument(
        "--val-data",
        default=None,
        help="validation file with the same environments (default: DATA/val.h5, else the "
        "file's val split)",
    )
    add_deprecated(b, "--val", "--val-data", dest="val_data", type=str)
    add_out(b, "file", help="the zoo file to write (.pt)", required=True)
    b.add_argument("--runs", default=None, help="the run folder (default: OUT.runs)")
    add_max_steps(b, default=1500, help="training steps of each expert", deprecated=("--steps",))
    b.add_argument(
        "--pool-steps",
        type=int,
        default=None,
        help="training steps of the pooled model (default: --max-steps)",
    )
    add_param(b, what="a field of the experts' architecture (hidden=64, depth=3, ...)")
    add_deprecated_param(b, "--hidden", "hidden")
    b.add_argument(
        "--window",
        type=int,
        default=None,
        help="frames per training rollout (default: 4 for states, 2 for fields)",
    )
    b.add_argument(
        "--one-at-a-time", action="store_true", help="no vmap: one expert after the other"
    )
    add_seed(b)
    add_device(b)
    add_no_progress(b)

    i = add_action(
        actions, "info", help="summarise a zoo file (JSON)", description=INFO_DESCRIPTION,
        run=run_info,
    )  # fmt: skip
    i.add_argument("zoo", metavar="ZOO", help="the zoo file")


def run_info(args) -> int:
    from simsci.models import dynadiff as dd

    print(json.dumps(_zoo_summary(dd.load_zoo(args.zoo)), indent=2))
    return 0


def run_build(args) -> int:
    from simsci.models import dynadiff as dd

    spec = params(args) or None
    pool_steps = args.max_steps if args.pool_steps is None else args.pool_steps
    path = dd.build_zoo(
        args.data, args.out, val=args.val_data, spec=spec, steps=args.max_steps,
        pool_steps=pool_steps, window=args.window, seed=args.seed, device=args.device,
        vmapped=not args.one_at_a_time, run_dir=args.runs, progress=not args.no_progress,
    )  # fmt: skip
    zoo = dd.load_zoo(path)
    summary = _zoo_summary(zoo)
    print(json.dumps(summary, indent=2))
    # one line for the eye, on stderr so stdout stays one JSON document
    print(
        f"zoo: {zoo.num_experts} experts in {summary['build_seconds']:.0f} s; validation "
        f"RMSE median {summary['val_rmse_median']:.3g}, max {summary['val_rmse_max']:.3g}; "
        f"persistence median {summary['persistence_rmse_median']:.3g}; expert/persistence "
        f"median {summary['ratio_median']:.2f}, max {summary['ratio_max']:.2f}",
        file=sys.stderr,
    )
    return 0


def _zoo_summary(zoo) -> dict:
    varied = zoo.varied()
    return {
        "path": zoo.path,
        "system": zoo.system,
        "experts": zoo.num_experts,
        "spec": zoo.spec.to_dict(),
        "params_per_expert": zoo.spec.num_params,
        "varied": varied,
        "range": {k: v for k, v in zoo.param_range().items() if k in varied},
        **zoo.quality(),
        "experts_per_minute": zoo.record.get("experts_per_minute"),
        "seconds": zoo.record.get("seconds"),
    }


def run_data(args) -> int:
    from simsci.models import dynadiff as dd

    paths = dd.make_environments(
        args.system, args.out, seed=args.seed, quick=args.quick, device=args.device,
        progress=not args.no_progress,
    )  # fmt: skip
    print(json.dumps({k: str(v) for k, v in paths.items()}, indent=2))
    return 0


def run_train(args) -> int:
    """The registry entry, as `simsci train dynadiff`."""
    from simsci.models import entry

    config = {"device": args.device, "seed": args.seed, "progress": not args.no_progress}
    if args.max_steps is not None:
        config["max_steps"] = args.max_steps
    model_args = {"zoo": args.zoo, **params(args)}
    entry("dynadiff").train(args.data, args.out, config, model_args=model_args)
    print(f"generator: {Path(args.out) / 'generator.pt'}")
    return 0


def run_adapt(args) -> int:
    from simsci._device import resolve_device
    from simsci.models import dynadiff as dd
    from simsci.models import entry

    gen = entry("dynadiff").load(args.generator, map_location=resolve_device(args.device))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path, info = dd.adapt(
            gen, args.context, args.out, candidates=args.candidates, seed=args.seed,
            refine_steps=args.refine_steps,
        )  # fmt: skip
    for w in caught:
        print(f"simsci: warning: {w.message}")
    print(json.dumps({"predictor": str(path), **info}, indent=2))
    return 0


def run_compare(args) -> int:
    from simsci.models import dynadiff as dd
    from simsci.models import entry
    from simsci.train import load_model

    gen = entry("dynadiff").load(args.generator)
    zoo = dd.load_zoo(args.zoo)
    gen.check_zoo(zoo)
    coda = None
    methods = list(dd.METHODS)
    if args.coda is not None:
        cpath = Path(args.coda)
        coda = load_model(cpath / "checkpoints" / "last.pt" if cpath.is_dir() else cpath)
    else:
        methods.remove("coda")
    lrs = {"finetune": args.finetune_lr, "coda": args.coda_lr}
    tuned = None
    if args.tune_on is not None:
        tuned = dd.tune_methods(
            gen, zoo, args.tune_on, coda=coda, finetune_steps=args.finetune_steps,
            seed=args.seed,
        )  # fmt: skip
        lrs.update({k: tuned[k] for k in lrs if k in tuned})
        args.guidance, args.polish_steps = tuned["guidance"], tuned["polish_steps"]
    res = dd.compare_methods(
        gen, zoo, args.data, coda=coda, methods=methods, finetune_steps=args.finetune_steps,
        finetune_lr=lrs["finetune"], coda_lr=lrs["coda"], guidance=args.guidance,
        polish_steps=args.polish_steps, seed=args.seed,
    )  # fmt: skip
    res["settings"] = {**lrs, "guidance": args.guidance, "polish_steps": args.polish_steps}
    if tuned is not None:
        res["sweep"] = tuned["sweep"]
    if args.out:
        from simsci._io import write_json

        write_json(args.out, res)
    print(json.dumps(res["summary"], indent=2))
    return 0
