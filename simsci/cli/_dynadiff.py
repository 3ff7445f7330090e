"""``simsci zoo build|info`` and ``simsci dynadiff data|train|adapt|compare``: DynaDiff,
generating dynamics predictors for new environments (simsci.models.dynadiff)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from simsci.cli._common import HelpFormatter

ZOO_DESCRIPTION = """\
The model zoo of DynaDiff: one expert dynamics predictor per training environment.

  build   train a pooled model on every environment of --data, then one expert per
          environment started at it, all at once (torch.func.vmap); write --out (a zoo
          file with each expert's weights, environment parameters and validation RMSE).
          --data is a file or a directory of `simsci dynadiff data` (train.h5 + val.h5).
          The runs (checkpoints, metrics) go to --runs (default OUT.runs): rerunning the
          same command resumes an interrupted build.
  info    summarise a zoo file (JSON)

examples:
  simsci dynadiff data --system lotka_volterra --out data/lv
  simsci zoo build --data data/lv --out runs/lv/zoo.pt
  simsci zoo info runs/lv/zoo.pt
"""

DESCRIPTION = """\
DynaDiff: a diffusion model in the weight space of a model zoo generates a dynamics
predictor for a new environment from a short context trajectory of it.

  data     write a CoDA/LEADS multi-environment protocol (train, val, in_domain,
           out_of_domain .h5) for --system (lotka_volterra, glycolytic_oscillator,
           damped_pendulum, gray_scott, navier_stokes_2d)
  train    train the generator on --zoo and its --data (weight autoencoder, then
           conditional latent diffusion; resumes under --out); writes OUT/generator.pt
  adapt    generate a predictor for the environment of --context (a trajectory file of
           the new environment: its first episodes' first frames are the context) in one
           call; writes --out, a model checkpoint that `simsci evaluate` and
           simsci.train.load_model read
  compare  DynaDiff vs the baselines (pooled, nearest expert, zoo average, fine-tuning,
           CoDA) on the environments of --data; JSON with RMSE/MSE and deploy times

examples:
  simsci dynadiff data --system lotka_volterra --out data/lv
  simsci zoo build --data data/lv --out runs/lv/zoo.pt
  simsci dynadiff train --zoo runs/lv/zoo.pt --data data/lv/train.h5 --out runs/lv/gen
  simsci dynadiff adapt runs/lv/gen/generator.pt --context data/lv/in_domain.h5 --out pred.pt
  simsci evaluate pred.pt --data data/lv/in_domain.h5 --split all
  simsci dynadiff compare runs/lv/gen/generator.pt --zoo runs/lv/zoo.pt --data data/lv/in_domain.h5
"""


def add_to(sub) -> None:
    z = sub.add_parser(
        "zoo",
        help="build a DynaDiff model zoo (one expert per environment)",
        description=ZOO_DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    z.add_argument("action", choices=("build", "info"))
    z.add_argument("path", nargs="?", default=None, help="info: the zoo file")
    z.add_argument("--data", default=None, help="build: multi-environment file or directory")
    z.add_argument("--val", default=None, help="build: validation file (same environments)")
    z.add_argument("--out", default=None, help="build: the zoo file to write (.pt)")
    z.add_argument("--runs", default=None, help="build: run directory (default OUT.runs)")
    z.add_argument("--steps", type=int, default=1500, help="expert fine-tuning steps")
    z.add_argument("--pool-steps", type=int, default=1500, help="pooled-model steps")
    z.add_argument("--hidden", type=int, default=None, help="expert width")
    z.add_argument("--window", type=int, default=None, help="rollout frames per window")
    z.add_argument("--one-at-a-time", action="store_true", help="no vmap (for comparison)")
    z.add_argument("--seed", type=int, default=0)
    z.add_argument("--device", default="auto")
    z.set_defaults(run=run_zoo)

    p = sub.add_parser(
        "dynadiff",
        help="DynaDiff: data protocols, generator training, adaptation to new environments",
        description=DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    p.add_argument("action", choices=("data", "train", "adapt", "compare"))
    p.add_argument("generator", nargs="?", default=None, help="adapt/compare: generator.pt")
    p.add_argument("--system", default=None, help="data: the protocol's system")
    p.add_argument("--quick", action="store_true", help="data: a small version")
    p.add_argument("--zoo", default=None, help="train/compare: the zoo file")
    p.add_argument("--data", default=None, help="train: zoo's file; compare: test file")
    p.add_argument("--context", default=None, help="adapt: the new environment's file")
    p.add_argument(
        "--context-steps", type=int, default=None, help="train: frames (default: protocol's or 10)"
    )
    p.add_argument("--context-episodes", type=int, default=1, help="train: episodes per context")
    p.add_argument("--autoencoder-steps", type=int, default=1500)
    p.add_argument("--decoder-steps", type=int, default=None, help="default 2x autoencoder")
    p.add_argument("--diffusion-steps", type=int, default=3000, help="train: diffusion steps")
    p.add_argument("--candidates", type=int, default=None, help="adapt: samples scored")
    p.add_argument("--refine-steps", type=int, default=None, help="adapt: latent refinement")
    p.add_argument("--finetune-steps", type=int, default=100, help="compare: K")
    p.add_argument("--coda", default=None, help="compare: a CoDA run dir or checkpoint")
    p.add_argument("--out", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.set_defaults(run=run_dynadiff)


def _need(args, *names):
    for n in names:
        if getattr(args, n) is None:
            raise ValueError(f"this action needs --{n.replace('_', '-')}")


def run_zoo(args) -> int:
    from simsci.models import dynadiff as dd

    if args.action == "info":
        if args.path is None:
            raise ValueError("zoo info needs the zoo file: simsci zoo info ZOO.pt")
        zoo = dd.load_zoo(args.path)
        print(json.dumps(_zoo_summary(zoo), indent=2))
        return 0
    _need(args, "data", "out")
    spec = None if args.hidden is None else {"hidden": args.hidden}
    path = dd.build_zoo(
        args.data, args.out, val=args.val, spec=spec, steps=args.steps,
        pool_steps=args.pool_steps, window=args.window, seed=args.seed, device=args.device,
        vmapped=not args.one_at_a_time, run_dir=args.runs, progress=True,
    )  # fmt: skip
    zoo = dd.load_zoo(path)
    print(json.dumps(_zoo_summary(zoo), indent=2))
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
        "val_rmse_median": float(zoo.val_rmse.median()),
        "val_rmse_max": float(zoo.val_rmse.max()),
        "experts_per_minute": zoo.record.get("experts_per_minute"),
        "seconds": zoo.record.get("seconds"),
    }


def run_dynadiff(args) -> int:
    from simsci.models import dynadiff as dd
    from simsci.models import entry
    from simsci.train import load_model

    if args.action == "data":
        _need(args, "system", "out")
        paths = dd.make_environments(
            args.system, args.out, seed=args.seed, quick=args.quick, progress=True
        )
        print(json.dumps({k: str(v) for k, v in paths.items()}, indent=2))
        return 0
    if args.action == "train":  # the registry entry, as `simsci train dynadiff`
        _need(args, "zoo", "data", "out")
        stages = {
            "zoo": args.zoo,
            "autoencoder_steps": args.autoencoder_steps,
            "decoder_steps": args.decoder_steps,
            "diffusion_train_steps": args.diffusion_steps,
            "context_steps": args.context_steps,
            "context_episodes": args.context_episodes,
        }
        config = {"device": args.device, "seed": args.seed, "progress": True}
        entry("dynadiff").train(
            args.data,
            args.out,
            config,
            model_args={k: v for k, v in stages.items() if v is not None},
        )
        print(f"generator: {Path(args.out) / 'generator.pt'}")
        return 0
    if args.generator is None:
        raise ValueError(f"dynadiff {args.action} needs the generator checkpoint (generator.pt)")
    gen = entry("dynadiff").load(args.generator)
    if args.action == "adapt":
        _need(args, "context", "out")
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
    _need(args, "zoo", "data")
    zoo = dd.load_zoo(args.zoo)
    gen.check_zoo(zoo)
    coda = None
    methods = list(dd.METHODS)
    if args.coda is not None:
        cpath = Path(args.coda)
        coda = load_model(cpath / "checkpoints" / "last.pt" if cpath.is_dir() else cpath)
    else:
        methods.remove("coda")
    res = dd.compare_methods(
        gen, zoo, args.data, coda=coda, methods=methods, finetune_steps=args.finetune_steps,
        seed=args.seed,
    )  # fmt: skip
    if args.out:
        from simsci._io import write_json

        write_json(args.out, res)
    print(json.dumps(res["summary"], indent=2))
    return 0
