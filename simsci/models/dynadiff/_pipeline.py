"""DynaDiff end to end: train the generator on a zoo, adapt to a context, compare.

- :func:`train_generator`: the two training stages of :class:`._generator.DynaDiff`
  (each a :class:`simsci.train.Trainer` run under ``out_dir/<stage>``, so an
  interrupted run resumes), then ``out_dir/generator.pt``.
- :func:`read_context`: a context file (a trajectory file of the new environment) ->
  ``(M, K, *S)`` frames: the first K frames of its first M episodes.
- :func:`adapt`: generator + context file -> a :class:`._predictor.Predictor`
  checkpoint, warning when the file's parameters lie outside the zoo's range.
- :func:`compare_methods`: DynaDiff (``dynadiff``; ``dynadiff_refine`` with
  ``refine_steps`` latent refinement steps on the context) and every baseline on the
  environments of a file:
  context = the first K frames of each environment's first M episodes, evaluation =
  full-horizon rollouts of its other episodes; RMSE and MSE (the metric CoDA reports)
  in original units, and the time each method takes to deploy.
"""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from simsci.models.dynadiff import _baselines as baselines
from simsci.models.dynadiff._envdata import EnvData, load_environments
from simsci.models.dynadiff._generator import ContextData, DynaDiff
from simsci.models.dynadiff._predictor import predictor_from_weights, rollout_errors
from simsci.models.dynadiff._zoo import Zoo, _train, load_zoo

__all__ = [
    "train_generator",
    "train_baselines",
    "read_context",
    "adapt",
    "compare_methods",
    "tune_methods",
    "zoo_order",
    "METHODS",
]

METHODS = ("dynadiff", "dynadiff_guided", "dynadiff_refine") + baselines.BASELINES
#: the default guidance scale of ``dynadiff_guided`` when the generator's own is 0
GUIDANCE = 0.3
#: the guidance settings (scale, polishing steps) :func:`tune_methods` tries
GUIDANCE_SETTINGS = tuple((g, n) for g in (0.1, 0.3, 1.0) for n in (0, 20))
#: the learning rates :func:`tune_methods` tries for the gradient baselines
LEARNING_RATES = {"finetune": (3e-4, 1e-3, 3e-3, 1e-2), "coda": (3e-3, 1e-2, 3e-2, 1e-1)}


def zoo_order(zoo: Zoo, env: EnvData) -> EnvData:
    """``env``'s environments reordered to the zoo's experts (rows of params matched);
    an environment of the zoo missing from ``env`` is an error."""
    if env.param_names != zoo.param_names:
        raise ValueError(
            f"{env.path}: parameters {env.param_names} differ from the zoo's {zoo.param_names}"
        )
    return env.reorder(
        zoo.env_params.numpy(), "train the generator on the file the zoo was built from"
    )


def train_generator(
    zoo,
    data,
    out_dir,
    *,
    autoencoder_steps: int = 1500,
    decoder_steps: int | None = None,
    diffusion_train_steps: int = 3000,
    batch_size: int | None = None,
    lr: float = 1e-3,
    context_steps: int = 10,
    context_episodes: int = 1,
    device: str = "auto",
    seed: int = 0,
    progress: bool = False,
    **model_kwargs,
) -> DynaDiff:
    """Train a :class:`DynaDiff` generator for ``zoo`` (path or Zoo) on the training
    episodes of ``data`` (the zoo's file or its EnvData); writes ``out_dir/generator.pt``.

    Stages (module docstring of :mod:`._generator`): ``autoencoder_steps``, then
    ``decoder_steps`` (default ``2 * autoencoder_steps``) of decoder refinement on the
    fixed latents, then ``diffusion_train_steps``.

    ``batch_size`` (contexts per step) defaults to 32 for states and 8 for fields; each
    item carries 32 (states) or 2 (fields) frame pairs for the functional loss."""
    from simsci.train import save_model

    zoo = zoo if isinstance(zoo, Zoo) else load_zoo(zoo)
    env = data if isinstance(data, EnvData) else load_environments(data)
    env = zoo_order(zoo, env)
    train = env.subset("train")
    if train.num_envs != zoo.num_experts:
        raise ValueError(f"{env.path}: every zoo environment needs training episodes")
    out_dir = Path(out_dir)
    model = DynaDiff.from_zoo(
        zoo, context_steps=context_steps, context_episodes=context_episodes, seed=seed,
        **model_kwargs,
    )  # fmt: skip
    field = zoo.spec.kind != "mlp"
    if batch_size is None:
        batch_size = 8 if field else 32
    ds = ContextData(
        train.episodes, context_steps=context_steps, context_episodes=context_episodes,
        n_pairs=2 if field else 32, seed=seed,
    )  # fmt: skip
    common = dict(batch_size=batch_size, lr=lr, device=device, progress=progress, seed=seed)
    model.set_stage("autoencoder")
    _train(model, ds, None, steps=autoencoder_steps, out_dir=out_dir / "autoencoder", **common)
    model.freeze_latents()
    model.fit_prompt_normalisation(ds)
    model.set_stage("decoder")
    dec_steps = 2 * autoencoder_steps if decoder_steps is None else int(decoder_steps)
    if dec_steps > 0:
        _train(model, ds, None, steps=dec_steps, out_dir=out_dir / "decoder", **common)
    model.set_stage("diffusion")
    _train(model, ds, None, steps=diffusion_train_steps, out_dir=out_dir / "diffusion", **common)
    model = model.cpu().eval()
    save_model(model, out_dir / "generator.pt", extra={"zoo": str(zoo.path)})
    return model


def read_context(path, *, steps: int, episodes: int = 1, state_shape=None):
    """The first ``steps`` frames of the first ``episodes`` episodes of a trajectory file,
    ``(M, K, *S)``, and the file's parameter rows (None when it has none)."""
    from simsci import data

    traj = data.open(path)
    if traj.kind not in ("state", "field"):
        raise ValueError(f"{path}: a context is a kind='state' or 'field' file, got {traj.kind!r}")
    n = len(traj)
    if n < 1:
        raise ValueError(f"{path}: the context file has no episodes")
    M = min(int(episodes), n)
    xs = []
    for i in range(M):
        x = np.asarray(traj.read(i, ["x"])["x"])
        if x.shape[0] < steps:
            raise ValueError(
                f"context trajectory too short for the prompter: {path} episode {i} has "
                f"{x.shape[0]} frames, the generator reads {steps}; pass a longer context"
            )
        xs.append(x[:steps])
    ctx = torch.as_tensor(np.stack(xs), dtype=torch.float32)
    if state_shape is not None and tuple(ctx.shape[2:]) != tuple(state_shape):
        raise ValueError(
            f"{path}: states of shape {tuple(ctx.shape[2:])}, the generator makes predictors "
            f"of {tuple(state_shape)}"
        )
    params = None
    if "params" in traj.episode_fields:
        params = np.asarray(traj.column("params"), dtype=np.float64).reshape(n, -1)
    return ctx, params, traj


def _check_range(generator: DynaDiff, params, names) -> None:
    rng = generator.init_args.get("param_range") or {}
    if params is None or not rng:
        return
    outside = []
    for j, name in enumerate(names or []):
        if name in rng:
            lo, hi = rng[name]
            if lo == hi:
                continue
            vals = params[:, j]
            if (vals < lo - 1e-12).any() or (vals > hi + 1e-12).any():
                outside.append(f"{name}={vals.min():g}..{vals.max():g} (zoo {lo:g}..{hi:g})")
    if outside:
        warnings.warn(
            "the context's environment lies outside the zoo's parameter range: "
            + ", ".join(outside)
            + "; the generated predictor extrapolates",
            UserWarning,
            stacklevel=3,
        )


def adapt(
    generator, context_path, out, *, candidates=None, seed=None, refine_steps=None
) -> tuple[Path, dict]:
    """Generate a predictor for the environment of ``context_path`` and save it to ``out``
    (a model checkpoint). Returns ``(path, info)``."""
    from simsci.train import load_model, save_model

    if not isinstance(generator, DynaDiff):
        generator = load_model(generator)
        if not isinstance(generator, DynaDiff):
            raise TypeError(f"{generator!r} is not a DynaDiff generator checkpoint")
    ctx, params, traj = read_context(
        context_path, steps=generator.K, episodes=generator.M, state_shape=generator.state_shape
    )
    names = traj.names("params") if params is not None else None
    _check_range(generator, params, names)
    if abs(float(traj.meta.get("dt", generator.dt)) - generator.dt) > 1e-9 * generator.dt:
        raise ValueError(
            f"{context_path}: frames every {traj.meta.get('dt')}, the generator's experts step "
            f"{generator.dt}"
        )
    t0 = time.perf_counter()
    model, info = generator.generate(
        ctx, candidates=candidates, seed=seed, refine_steps=refine_steps
    )
    info["seconds"] = time.perf_counter() - t0
    if params is not None and names:
        model.init_args["params"] = {n: float(v) for n, v in zip(names, params[0])}
    path = save_model(model, out, extra={"context": str(context_path), **info})
    return Path(path), info


def _adapt_one(name, generator, zoo, coda, ctx, *, seed, guidance, polish_steps,
               refine_steps, finetune_steps, finetune_lr, coda_steps, coda_lr):  # fmt: skip
    """One method's predictor for context ``ctx`` ``(M, K, *S)``."""
    if name == "dynadiff":
        return generator.generate(ctx, seed=seed, refine_steps=0, guidance=0.0)[0]
    if name == "dynadiff_guided":
        return generator.generate(
            ctx, seed=seed, refine_steps=0, guidance=guidance, polish_steps=polish_steps
        )[0]
    if name == "dynadiff_refine":
        return generator.generate(ctx, seed=seed, refine_steps=refine_steps, guidance=0.0)[0]
    if name == "finetune":
        flat = baselines.finetune(zoo, ctx, steps=finetune_steps, lr=finetune_lr)
    elif name == "coda":
        flat = coda.adapt(ctx, steps=coda_steps, lr=coda_lr)
    else:
        flat = getattr(baselines, name)(zoo, ctx)
    return predictor_from_weights(flat, zoo, source=name)


def compare_methods(
    generator: DynaDiff,
    zoo: Zoo,
    data,
    *,
    coda=None,
    methods=METHODS,
    finetune_steps: int = 100,
    finetune_lr: float = 1e-3,
    coda_steps: int = 100,
    coda_lr: float = 1e-2,
    refine_steps: int = 30,
    guidance: float | None = None,
    polish_steps: int | None = None,
    context_episodes: int | None = None,
    seed: int = 0,
) -> dict:
    """Every method on every environment of ``data`` (see the module docstring).

    ``guidance`` and ``polish_steps`` set ``dynadiff_guided`` (default: the generator's,
    or :data:`GUIDANCE` and 0 when its guidance is 0). Every method reads the same
    context frames; its deployment time is reported beside its error.

    Returns ``{"environments": [{params, method: {rmse, mse, seconds}}...],
    "summary": {method: {rmse, mse, seconds}}}`` (summary: medians of seconds, means of
    errors over environments).
    """
    env = data if isinstance(data, EnvData) else load_environments(data)
    K = generator.K
    M = generator.M if context_episodes is None else int(context_episodes)
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown methods {unknown}; valid: {list(METHODS)}")
    if "coda" in methods and coda is None:
        raise ValueError("method 'coda' needs a trained CoDA model (coda=)")
    own = generator.init_args
    if guidance is None:
        guidance = own["guidance"] or GUIDANCE
    if polish_steps is None:
        polish_steps = own["polish_steps"] if own["guidance"] else 0
    opts = dict(seed=seed, guidance=float(guidance), polish_steps=int(polish_steps),
                refine_steps=refine_steps,
                finetune_steps=finetune_steps, finetune_lr=finetune_lr,
                coda_steps=coda_steps, coda_lr=coda_lr)  # fmt: skip
    rows = []
    for e, x in enumerate(env.episodes):
        if x.shape[0] < M + 1:
            raise ValueError(
                f"{env.path}: environment {e} has {x.shape[0]} episodes; comparing needs "
                f"{M} for the context and at least one to evaluate"
            )
        ctx = x[:M, :K].float()
        test = x[M:].float()
        row = {"params": dict(zip(env.param_names, env.params[e].tolist()))}
        for name in methods:
            t0 = time.perf_counter()
            model = _adapt_one(name, generator, zoo, coda, ctx, **opts)
            seconds = time.perf_counter() - t0
            err = rollout_errors(model, test)
            row[name] = {"rmse": err["rmse"], "mse": err["mse"], "seconds": seconds}
        rows.append(row)
    summary = {}
    for name in methods:
        rmse = [r[name]["rmse"] for r in rows]
        summary[name] = {
            "rmse": float(np.mean(rmse)) if all(map(math.isfinite, rmse)) else math.inf,
            "mse": float(np.mean([r[name]["mse"] for r in rows])),
            "seconds": float(np.median([r[name]["seconds"] for r in rows])),
        }
    return {"environments": rows, "summary": summary}


def tune_methods(
    generator: DynaDiff, zoo: Zoo, data, *, coda=None, rates=None, guidance=GUIDANCE_SETTINGS,
    max_envs: int = 8, finetune_steps: int = 100, coda_steps: int = 100, seed: int = 0,
) -> dict:  # fmt: skip
    """Each tunable method's best setting on validation environments: the learning rate
    of ``finetune`` and ``coda``, the guidance scale and polishing steps of
    ``dynadiff_guided``.

    ``data``: a file (or EnvData) whose environments have at least M + 1 episodes, e.g.
    the protocol's ``val.h5`` (the training environments' validation episodes, which
    neither the zoo, CoDA nor the generator trained on); at most ``max_envs`` of them,
    evenly spread. Each value of ``rates`` (default :data:`LEARNING_RATES`) and each
    ``(scale, polish_steps)`` of ``guidance`` is scored by the mean rollout RMSE of
    :func:`compare_methods`, the smallest wins. Returns ``{"finetune": lr, "coda": lr,
    "guidance": scale, "polish_steps": n, "sweep": {method: {value: rmse}}}`` (the
    guided sweep's keys are ``"scale/steps"`` strings).
    """
    env = data if isinstance(data, EnvData) else load_environments(data)
    keep = np.unique(np.linspace(0, env.num_envs - 1, min(max_envs, env.num_envs)).round())
    keep = keep.astype(int)
    env = EnvData(
        [env.episodes[i] for i in keep], env.params[keep], env.param_names, env.dt, env.kind,
        env.system, [env.split[i] for i in keep] if env.split else [], env.path,
    )  # fmt: skip
    rates = LEARNING_RATES if rates is None else rates
    grids = {"finetune": rates["finetune"], "dynadiff_guided": tuple(guidance)}
    if coda is not None:
        grids["coda"] = rates["coda"]
    out = {"sweep": {}}
    for name, values in grids.items():
        scores = {}
        for v in values:
            g, n = v if name == "dynadiff_guided" else (None, None)
            res = compare_methods(
                generator, zoo, env, coda=coda, methods=(name,), seed=seed, guidance=g,
                polish_steps=n, finetune_steps=finetune_steps, finetune_lr=v,
                coda_steps=coda_steps, coda_lr=v,
            )  # fmt: skip
            scores[v] = res["summary"][name]["rmse"]
        best = min(scores, key=lambda v: (scores[v], v))  # ties: the smaller setting
        if name == "dynadiff_guided":
            out["guidance"], out["polish_steps"] = float(best[0]), int(best[1])
            scores = {f"{g:g}/{n}": r for (g, n), r in scores.items()}
        else:
            out[name] = float(best)
            scores = {float(k): r for k, r in scores.items()}
        out["sweep"][name] = scores
    return out


def train_baselines(zoo, data, out_dir, *, coda_steps=1500, device="auto", seed=0, progress=False):
    """The trained baselines of the harness: CoDA (the others need no training)."""
    zoo = zoo if isinstance(zoo, Zoo) else load_zoo(zoo)
    env = data if isinstance(data, EnvData) else load_environments(data)
    env = zoo_order(zoo, env)
    return baselines.train_coda(
        zoo, env, Path(out_dir) / "coda", steps=coda_steps, device=device, seed=seed,
        progress=progress,
    )  # fmt: skip
