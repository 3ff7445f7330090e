"""``simsci tour``: the main job on built-in defaults, for a newcomer (``make tour``).

Each capability adds one short section to ``SECTIONS``: a function ``(out_dir, quick)
-> dict`` that prints what it does and returns its figures. The whole tour must stay
under 5 minutes on 2 CPU cores; ``--quick`` shrinks every section to seconds (the test
suite runs it that way).

Section "latent ODE on irregular Lorenz-63":
  1. generate a small irregular Lorenz-63 dataset (50% of time points kept, 1% noise);
  2. check it against the format contract and print its summary;
  3. train a latent neural ODE on windows of it for a fixed budget of steps;
  4. report interpolation error on held-out test points vs the last-value baseline, and
     plot a few test windows with predictions to OUT/lorenz_interpolation.png.

Section "PDE solvers on Burgers":
  5. run ETDRK4 and finite differences + RK4 over resolutions and steps, report the
     speed-up at matched accuracy and plot the Pareto fronts to OUT/burgers_pareto.png.

Section "environments and a learned surrogate":
  6. step 1024 pendulum environments as one batch vs gymnasium's SyncVectorEnv;
  7. record 64 random-action episodes into OUT/pendulum_rollouts.h5 (kind "rollout");
  8. fit a ControlledODE surrogate to them (checkpoint in OUT/surrogate/);
  9. load it as simsci/Surrogate-v0 and compare open-loop rollouts with the truth.

Section "∂-NO on Burgers":
 10. generate a small Burgers set (nu = 0.01, 96 episodes);
 11. train a plain FNO and the same FNO with ∂-NO derivative features; report rollout
     errors at the training resolution and 2x finer, and the learned orders beta.

Section "SDEVI on an irregular pendulum":
 12. generate a damped pendulum whose two channels are observed at different times;
 13. train SDEVI (non-linear variant) and report interpolation error against the
     last-value and mean baselines, the 95% interval coverage, and plot the posterior
     with its uncertainty band to OUT/sdevi_interpolation.png.

Section "CoCLD on population-coupled events":
 14. generate event sequences of individuals whose intensities follow their own latent
     state and a drifting population state (daily and weekly cycles, a regime shift);
 15. train CoCLD and report next-event prediction (log-likelihood per event, time
     RMSE, type accuracy) against a Poisson process and the true process (the ceiling).

Section "plain vs grounded rollout of a lifted system":
 16. generate 8 trajectories of a non-uniform rotation on a circle embedded in R^32 by a
     curved random map (the true manifold is known);
 17. train a plain neural ODE (GFG variant "ambient") and GFG (variant "tangent":
     velocities in the tangent space of a learned manifold, re-projected onto it);
 18. roll both out from the test starts to 10x the training horizon; report the error
     against the true flow and the distance to the true manifold, and plot that
     distance over time to OUT/gfg_manifold_distance.png.

Section "DynaDiff: a predictor for an unseen Lotka-Volterra":
 19. write the Lotka-Volterra protocol of CoDA (25 training environments, beta and delta
     on a grid over [0.5, 1]; 6 unseen in-domain environments);
 20. build the model zoo (a pooled model, then 25 experts trained at once with vmap)
     and train the generator (weight autoencoder, then latent diffusion conditioned on
     the prompt of a 10-frame context);
 21. for each unseen environment, generate a predictor from one 10-frame context and
     compare its rollout error and deploy time with fine-tuning the pooled model on
     the same context (100 steps) and with the nearest expert.

Section "driving world: roads, traffic, tiles":
 22. generate a 5 km procedural road network (curves, ramps, junctions, roundabouts);
 23. drive 70 s in simsci/Driving-v0 with the lane-keeping policy through IDM/MOBIL
     traffic; report the ego's outcome, the traffic's collision rate and infeasible
     steps, and plot the drive top-down to OUT/driving_rollout.png;
 24. simulate 16 drives, cut them into 64 m vector tiles (kind "scene") and report
     their metrics (agents per km, collision/off-road rates, seam gaps).

Section "VectorWorld: a streamed closed-loop rollout":
 25. build (once, then cached) the small on-the-fly VectorWorld: a tile generator, a
     motion-aware gated VAE and ΔSim trained briefly on a few simulated drives;
 26. drive 1 km in closed loop with the lane-keeping policy while tiles are outpainted
     ahead in one network call each and ΔSim drives the NPCs; report the real-time
     factor, tiles, spawns, NPC infeasibility, seam gaps; write the drive in the scene
     format (OUT/vectorworld_rollout.h5) and plot the route (OUT/vectorworld_route.png).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import torch

from simsci.cli._common import HelpFormatter


def add_to(sub) -> None:
    p = sub.add_parser(
        "tour",
        help="run the guided tour on built-in defaults",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--out", default="runs/tour", help="where data, runs and plots go")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of seconds")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.set_defaults(run=run)


def _fresh(run_dir: Path) -> Path:
    """An empty training folder inside the tour's output: a second tour starts over
    (the trainer refuses to write into a folder that holds another run)."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    return run_dir


def _banner(text: str) -> None:
    print(f"\n== {text} ==", flush=True)


def lorenz_latent_ode(out: Path, quick: bool, device: torch.device) -> dict:
    from simsci import data, models, systems, train
    from simsci.cli._train import make_dataset

    n, t_end, window, steps = (48, 2.0, 16, 30) if quick else (400, 6.0, 24, 1400)
    path = out / "lorenz63_irregular.h5"
    _banner("1. generate: irregular Lorenz-63 trajectories")
    systems.generate(
        "lorenz63",
        n,
        t_end=t_end,
        dt=0.02,
        out=path,
        keep=0.5,
        obs_noise=0.01,
        seed=0,
        device=device,
        progress=False,
    )
    _banner("2. check and describe the file")
    problems = data.check_file(path)
    if problems:
        raise RuntimeError(f"the tour's own dataset breaks the format: {problems[0]}")
    print(data.info(path))

    _banner(f"3. train a latent ODE on windows of {window} observations ({steps} steps)")
    traj = data.open(path)
    train_set = make_dataset(
        path, models.LatentODE.data_fields, split="train", window=window, stride=window // 2
    )
    val_set = make_dataset(path, models.LatentODE.data_fields, split="val", window=window)
    model = models.LatentODE.from_data(traj, window=window, latent_dim=12, hidden_dim=64)
    config = train.TrainConfig(
        max_steps=steps,
        epochs=10_000,
        batch_size=32,
        lr=3e-3,
        schedule="cosine",
        grad_clip=5.0,
        val_every=max(steps // 3, 1),
        monitor="val_interp_mse",  # keep the checkpoint that interpolates best on val
        device=str(device),
        progress=not quick,
        log_every=25,
    )
    start = time.perf_counter()
    summary = train.Trainer(
        model,
        config,
        train_set,
        val_set,
        out_dir=_fresh(out / "latent_ode"),
        collate_fn=model.collate,
    ).fit()
    train_time = time.perf_counter() - start

    _banner("4. interpolation on the test split: 30% of interior points hidden")
    best = Path(summary["paths"]["best_checkpoint"] or summary["paths"]["last_checkpoint"])
    model = train.load_model(best)
    test_set = make_dataset(path, models.LatentODE.data_fields, split="test", window=window)
    metrics = train.evaluate(
        model, test_set, collate_fn=model.collate, batch_size=64, device=device
    )
    ratio = metrics["interp_mse"] / max(metrics["locf_mse"], 1e-12)
    print(f"latent ODE interpolation MSE (normalised): {metrics['interp_mse']:.4f}")
    print(f"last-value baseline MSE (normalised):      {metrics['locf_mse']:.4f}")
    print(
        f"ratio model / baseline: {ratio:.3f} ({'better' if ratio < 1 else 'worse'} "
        f"than carrying the last value forward)  [train {train_time:.0f} s]"
    )

    plot = _plot_lorenz(model, test_set, out / "lorenz_interpolation.png")
    return {
        "dataset": str(path),
        "episodes": n,
        "train_steps": steps,
        "train_seconds": round(train_time, 1),
        "interp_mse": metrics["interp_mse"],
        "locf_mse": metrics["locf_mse"],
        "ratio": ratio,
        "plot": plot,
    }


def _pyplot():
    """matplotlib.pyplot on the Agg backend, or None (with a hint) when not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: pip install 'simsci[plot]' for the plot)")
        return None
    return plt


def _plot_lorenz(model, dataset, path: Path) -> str | None:
    """Three test windows: observed points, hidden points, and the model's curve."""
    plt = _pyplot()
    if plt is None:
        return None
    from simsci.integrate import odeint
    from simsci.models.latent_ode import hide_time_points, observed_mask

    model = model.cpu()  # plotting is small; keep every tensor on the CPU
    batch = model.collate([dataset[i] for i in range(min(3, len(dataset)))])
    observed = observed_mask(batch)
    hidden = hide_time_points(observed, 0.3, torch.Generator().manual_seed(1234))
    visible = observed & ~hidden[..., None]
    with torch.no_grad():
        xn = torch.nan_to_num(model.normalise(batch["x"]))
        mu, _ = model.encode(batch["t"], xn, visible)
        dense = torch.linspace(0, float(batch["grid"][-1]), 200, dtype=batch["grid"].dtype)
        z = odeint(model.dynamics, mu, dense / model.time_scale, method=model.method)
        curve = model.decoder(z) * model.data_std + model.data_mean
    names = ["x", "y", "z"][: batch["x"].shape[-1]]
    fig, axes = plt.subplots(len(names), batch["x"].shape[0], figsize=(12, 7), squeeze=False)
    for b in range(batch["x"].shape[0]):
        t = batch["t"][b]
        for d, name in enumerate(names):
            ax = axes[d, b]
            vis, hid = visible[b, :, d], hidden[b] & observed[b, :, d]
            inside = dense <= t[batch["valid"][b]].max()
            ax.plot(dense[inside], curve[b, inside, d], color="C0", label="latent ODE")
            ax.plot(t[vis], batch["x"][b, vis, d], "k.", label="seen by the encoder")
            ax.plot(t[hid], batch["x"][b, hid, d], "rx", label="hidden (to interpolate)")
            ax.set_xlabel("t (window-relative)") if d == len(names) - 1 else None
            ax.set_ylabel(name) if b == 0 else None
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("Latent ODE interpolation on irregular Lorenz-63 (test windows)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"plot: {path}")
    return str(path)


def burgers_solvers(out: Path, quick: bool, device: torch.device) -> dict:
    """One PDE, two solvers: ETDRK4 (pseudo-spectral, 4th order) against explicit finite
    differences with RK4, each over a sweep of resolutions and steps; error against a
    fine reference, warm time per trajectory, speed-up at matched accuracy, Pareto plot."""
    from simsci.bench import format_table, pde_benchmark, plot_pareto

    _banner("5. benchmark two Burgers solvers: ETDRK4 vs finite differences + RK4")
    result = pde_benchmark(
        "burgers",
        methods=("etdrk4", "rk4"),
        quick=True,
        pypde=False,
        device=device,
        repeat=1 if quick else 3,
    )
    print(format_table(result))
    plot = None
    try:
        plot = str(plot_pareto(result, out / "burgers_pareto.png"))
        print(f"plot: {plot}")
    except ImportError as exc:
        print(f"({exc})")
    speedups = [s for s in result["speedups"] if s.get("overlap")]
    return {"speedups": speedups, "plot": plot}


def environments(out: Path, quick: bool, device: torch.device) -> dict:
    """Batched environments and a learned surrogate: step many pendulum environments as
    one tensor operation (vs gymnasium's SyncVectorEnv), record random-action episodes,
    fit a ControlledODE to them, and load it as simsci/Surrogate-v0."""
    import gymnasium
    import numpy as np

    from simsci import data, train
    from simsci.envs import (
        ODEControlEnv,
        ODEControlVectorEnv,
        RecordVectorEpisodes,
    )
    from simsci.models import ControlledODE

    task = "pendulum-swingup"
    _banner("6. step pendulum environments: batched vs gymnasium's SyncVectorEnv")
    n_batched, n_sync = (64, 8) if quick else (1024, 64)
    rng = np.random.default_rng(0)

    def steps_per_second(env, n, steps):
        env.reset(seed=0)
        actions = rng.uniform(-4, 4, size=(n, 1)).astype(np.float32)
        env.step(actions)
        start = time.perf_counter()
        for _ in range(steps):
            env.step(actions)
        return n * steps / (time.perf_counter() - start)

    batched = ODEControlVectorEnv(n_batched, task, device=device)
    sync = gymnasium.make_vec(
        "simsci/ODEControl-v0", num_envs=n_sync, vectorization_mode="sync", task=task
    )
    fast = steps_per_second(batched, n_batched, 5 if quick else 20)
    slow = steps_per_second(sync, n_sync, 2 if quick else 5)
    print(
        f"batched ({n_batched} envs): {fast:,.0f} env-steps/s;  SyncVectorEnv ({n_sync} envs): "
        f"{slow:,.0f} env-steps/s;  {fast / slow:.0f}x"
    )

    _banner("7. record random-action episodes into the trajectory format")
    episodes, length = (16, 20) if quick else (64, 40)
    path = out / "pendulum_rollouts.h5"
    recorder = RecordVectorEpisodes(
        ODEControlVectorEnv(16, task, max_episode_steps=length, device=device), path
    )
    recorder.reset(seed=1)
    while recorder.recorded < episodes:
        recorder.step(rng.uniform(-4, 4, size=(16, 1)).astype(np.float32))
    recorder.close()
    traj = data.open(path)
    print(f"{path}: {len(traj.lengths)} episodes of {length} actions (kind {traj.kind!r})")

    _banner("8. fit a ControlledODE surrogate (dx/dt = f(x, u)) to the rollouts")
    model = ControlledODE.from_data(traj, hidden_dim=64, depth=2)
    config = train.TrainConfig(
        max_steps=40 if quick else 500,
        epochs=10_000,
        batch_size=16,
        lr=3e-3,
        schedule="cosine",
        progress=False,
        device=str(device),
    )
    dataset = data.TrajectoryDataset(traj, fields=("t", "state", "action"))
    summary = train.Trainer(
        model, config, dataset, None, out_dir=_fresh(out / "surrogate"), collate_fn=model.collate
    ).fit()
    checkpoint = summary["paths"]["last_checkpoint"]
    print(f"checkpoint: {checkpoint}")

    _banner("9. the surrogate as an environment: open-loop rollouts against the truth")
    true_env = ODEControlEnv(task)
    sur_env = gymnasium.make("simsci/Surrogate-v0", checkpoint=checkpoint)
    horizon = 10 if quick else 20
    errors, baseline = [], []
    for seed in range(8):
        o_true, _ = true_env.reset(seed=100 + seed)
        o_sur, _ = sur_env.reset(seed=100 + seed)
        start_obs = o_true.copy()
        for _ in range(horizon):
            a = rng.uniform(-4, 4, size=1).astype(np.float32)
            o_true = true_env.step(a)[0]
            o_sur = sur_env.step(a)[0]
        errors.append(float(np.abs(o_sur - o_true).max()))
        baseline.append(float(np.abs(start_obs - o_true).max()))
    err, base = float(np.median(errors)), float(np.median(baseline))
    print(
        f"after {horizon} steps ({horizon * true_env.dt:g} s) with the same actions: surrogate "
        f"observation error {err:.3f} (median of 8) vs {base:.3f} for 'nothing moves'"
    )
    return {
        "batched_steps_per_s": fast,
        "sync_steps_per_s": slow,
        "speedup": fast / slow,
        "rollouts": str(path),
        "surrogate_checkpoint": checkpoint,
        "surrogate_error": err,
        "static_baseline_error": base,
    }


def dno_burgers(out: Path, quick: bool, device: torch.device) -> dict:
    """Plain FNO vs ∂-NO (the same FNO with learnable fractional-derivative features) on
    a small Burgers set: one-step operators rolled out over the episode, scored at the
    training resolution and at 2x finer with the same weights; the learned orders beta."""
    from simsci import data, systems, train
    from simsci.operators import OperatorModel, evaluate_operator

    _banner("10. generate Burgers data (nu = 0.01, 256 points, t in [0, 0.5])")
    n, steps = (24, 20) if quick else (96, 400)
    path = out / "burgers_small.h5"
    system = systems.get("burgers", resolution=256, nu=0.01)
    systems.generate(system, n, t_end=0.5, dt=0.05, out=path, seed=0, progress=False, device=device)
    traj = data.open(path)
    print(f"{path}: {n} episodes of {traj.lengths[0]} frames")

    _banner("11. train a plain FNO and a ∂-NO (same FNO + derivative features) at 128 points")
    scores, betas = {}, {}
    for features in ("none", "dno"):
        torch.manual_seed(0)
        model = OperatorModel.from_data(
            traj,
            features=features,
            subsample=2,
            backbone_kwargs={"width": 24, "modes": 12, "layers": 3},
        )
        dataset = data.TrajectoryDataset(traj, fields=("t", "x"), split="train")
        config = train.TrainConfig(
            max_steps=steps,
            epochs=100_000,
            batch_size=4,
            lr=3e-3,
            schedule="cosine",
            progress=False,
            device=str(device),
        )
        start = time.perf_counter()
        train.Trainer(
            model, config, dataset, None, out_dir=_fresh(out / f"operator_{features}"),
            collate_fn=model.collate,
        ).fit()  # fmt: skip
        result = evaluate_operator(model, traj, split="test")["resolutions"]
        scores[features] = {k: v["rel_l2_mean"] for k, v in result.items()}
        betas[features] = model.betas()
        print(
            f"{'plain FNO' if features == 'none' else '∂-NO':9s}  {model.num_parameters():,} "
            f"parameters, {time.perf_counter() - start:.0f} s; rollout rel L2 "
            + ", ".join(f"{v:.4f} at {k}" for k, v in scores[features].items())
        )
    print("learned orders beta (Burgers is second order, m = 2): " + ", ".join(
        f"{k} {v:.2f}" for k, v in betas["dno"].items()
    ))  # fmt: skip
    return {"rel_l2": scores, "betas": betas["dno"]}


def sdevi_pendulum(out: Path, quick: bool, device: torch.device) -> dict:
    """SDEVI (non-linear variant) interpolating an irregular damped pendulum whose
    channels are observed at different times, with posterior uncertainty."""
    from simsci import data, models, systems, train

    n, steps = (32, 10) if quick else (128, 200)
    path = out / "pendulum_per_channel.h5"
    _banner("12. generate: damped pendulum, each channel keeps its own 50% of the times")
    systems.generate(
        "damped_pendulum", n, t_end=6.0, dt=0.1, keep=0.5, per_channel=True, out=path,
        seed=0, device=device, progress=False,
    )  # fmt: skip
    traj = data.open(path)
    _banner(f"13. train SDEVI (non-linear SDE-induced posterior, no path sampling; {steps} steps)")
    torch.manual_seed(0)
    model = models.SDEVI.from_data(traj, latent_dim=4, hidden_dim=32, variant="nonlinear")
    fields = ("t", "x", "mask")
    config = train.TrainConfig(
        max_steps=steps, epochs=100_000, batch_size=16, lr=1e-2, schedule="cosine",
        grad_clip=10.0, device=str(device), progress=False,
    )  # fmt: skip
    start = time.perf_counter()
    train.Trainer(
        model, config, data.TrajectoryDataset(traj, fields=fields, split="train"), None,
        out_dir=_fresh(out / "sdevi"), collate_fn=model.collate,
    ).fit()  # fmt: skip
    seconds = time.perf_counter() - start
    test_set = data.TrajectoryDataset(traj, fields=fields, split="test")
    metrics = train.evaluate(model, test_set, collate_fn=model.collate, device=device)
    print(
        f"interpolation MSE (normalised) {metrics['interp_mse']:.4f} vs last value "
        f"{metrics['locf_mse']:.4f} and episode mean {metrics['mean_mse']:.4f}; "
        f"{100 * metrics['coverage95']:.0f}% of the hidden values inside the 95% "
        f"interval  [train {seconds:.0f} s]"
    )
    plot = _plot_sdevi(model.cpu(), test_set, out / "sdevi_interpolation.png")
    return {**{k: float(v) for k, v in metrics.items()}, "train_seconds": seconds, "plot": plot}


def _plot_sdevi(model, dataset, path: Path) -> str | None:
    """Two test episodes: visible and hidden points, the posterior mean and its band."""
    plt = _pyplot()
    if plt is None:
        return None
    model.eval()
    batch = model.collate([dataset[i] for i in range(min(2, len(dataset)))])
    observed, visible, hidden = model.masks(batch, torch.Generator().manual_seed(1234))
    with torch.no_grad():
        mean, var = model.predict(batch, visible, variance=True)
    fig, axes = plt.subplots(2, batch["x"].shape[0], figsize=(11, 5), squeeze=False)
    for b in range(batch["x"].shape[0]):
        keep = batch["valid"][b]
        t = batch["t"][b, keep]
        for d, name in enumerate(("angle", "angular velocity")):
            ax = axes[d, b]
            m, s = mean[b, keep, d], var[b, keep, d].sqrt()
            ax.fill_between(t, m - 2 * s, m + 2 * s, color="C0", alpha=0.25, label="±2 std")
            ax.plot(t, m, color="C0", label="SDEVI posterior mean")
            vis, hid = visible[b, keep, d], hidden[b, keep, d]
            ax.plot(t[vis], batch["x"][b, keep, d][vis], "k.", label="seen")
            ax.plot(t[hid], batch["x"][b, keep, d][hid], "rx", label="hidden")
            ax.set_ylabel(name) if b == 0 else None
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("SDEVI interpolation with uncertainty (irregular, per-channel pendulum)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"plot: {path}")
    return str(path)


def cocld_events(out: Path, quick: bool, device: torch.device) -> dict:
    """CoCLD on population-coupled event sequences, next to a Poisson process and the
    true generating process."""
    from simsci import data, datasets, models, train
    from simsci.cli._train import make_dataset  # the fields of the model the file has

    n, steps = (40, 3) if quick else (300, 50)
    path = out / "population_events.h5"
    _banner("14. generate: event sequences of individuals coupled to a drifting population")
    datasets.make_dataset("population_events", n, out=path, seed=0)
    traj = data.open(path)
    _banner(f"15. train CoCLD (latent neural ODEs + population diffusion; {steps} steps)")
    torch.manual_seed(0)
    model = models.CoCLD.from_data(traj, latent_dim=8, hidden=32)
    config = train.TrainConfig(
        max_steps=steps, epochs=100_000, batch_size=32, lr=3e-3, grad_clip=10.0,
        device=str(device), progress=False,
    )  # fmt: skip
    start = time.perf_counter()
    train.Trainer(
        model, config, make_dataset(traj, model.data_fields, split="train"), None,
        out_dir=_fresh(out / "cocld"), collate_fn=model.collate,
    ).fit()  # fmt: skip
    seconds = time.perf_counter() - start
    results = {}
    for name, m in (
        ("CoCLD", model),
        ("Poisson", models.PoissonTPP.from_data(traj)),
        ("true process", models.TrueProcessTPP.from_data(traj)),
    ):
        r = models.evaluate_events(m, traj, split="test", generate=False, device=device)
        results[name] = r
        print(
            f"{name:>13s}: log-likelihood/event {r['ll_per_event']:7.3f}   next-event time "
            f"RMSE {r['time_rmse']:.2f} h   type accuracy {100 * r['type_accuracy']:.0f}%"
        )
    print(f"[train {seconds:.0f} s; `simsci events generate` samples new sequences]")
    return {"train_seconds": seconds, **results}


def gfg_lifted_circle(out: Path, quick: bool, device: torch.device) -> dict:
    """A plain neural ODE against GFG on a circle lifted into R^32, trained on the same
    4 trajectories: rolled out to 10x their duration, the plain one leaves the data
    manifold (on this data it diverges exponentially), while GFG's velocities lie in the
    tangent spaces of its learned manifold and its state is re-projected onto it at
    every output step. Distances to the true manifold come from the file's meta."""
    import numpy as np

    from simsci import data, datasets, models, train
    from simsci.errors import SolverError

    # quick: a smoke run of about a second; full: about 15 s on one core
    dim, grid_steps, steps, hidden, horizon = (
        (16, 10, 20, 32, 2) if quick else (32, 50, 300, 64, 10)
    )
    path = out / "lifted_circle.h5"
    _banner(f"16. generate: 8 trajectories of a rotation on a circle curved into R^{dim}")
    datasets.make_dataset(
        "lifted_circle", 8, out=path, dim=dim, steps=grid_steps, split=(0.5, 0.0, 0.5), seed=0
    )
    traj = data.open(path)
    flow = datasets.lifted_from_config(traj.meta["manifold"])  # the true manifold
    split = np.asarray(traj.column("split"))
    n_train, n_test = int((split == 0).sum()), int((split == 2).sum())
    print(f"{path}: {len(traj)} episodes ({n_train} train) of {traj.lengths[0]} points")

    _banner(f"17. train a plain neural ODE and GFG ({steps} full-batch steps each)")
    fields = ("t", "x", "v")  # the file's true velocities (without v: finite differences)
    config = train.TrainConfig(
        max_steps=steps, epochs=100_000, batch_size=8, lr=3e-3, schedule="cosine",
        checkpoint_every=steps, log_every=steps, device=str(device), progress=False,
    )  # fmt: skip
    trained, seconds = {}, {}
    for variant in ("ambient", "tangent"):
        torch.manual_seed(0)
        # rk4 on the (regular) output grid, for time: half the data's step is the default
        # the plain neural ODE as usually trained: without GFG's restoring term
        extra = {"restore": 0.0} if variant == "ambient" else {}
        model = models.GFG.from_data(
            traj, variant=variant, hidden_dim=hidden, method="rk4", step_size=None, **extra
        )
        start = time.perf_counter()
        train.Trainer(
            model, config, data.TrajectoryDataset(traj, fields=fields, split="train"), None,
            out_dir=_fresh(out / f"gfg_{variant}"), collate_fn=model.collate,
        ).fit()  # fmt: skip
        trained[variant], seconds[variant] = model.to(device).eval(), time.perf_counter() - start

    _banner(f"18. roll out from the {n_test} test starts to {horizon}x the training horizon")
    test = [traj.read(int(i), ["t", "x"]) for i in np.flatnonzero(split == 2)]
    t = torch.as_tensor(test[0]["t"], dtype=torch.float64)  # a regular grid, shared
    L = len(t)
    t_long = t[0] + (t[1] - t[0]) * torch.arange(horizon * (L - 1) + 1, dtype=torch.float64)
    x0 = torch.as_tensor(np.stack([e["x"][0] for e in test]), dtype=torch.float32)
    truth = flow.embed(flow.simulate(flow.nearest(x0.double()), t_long - t_long[0]))
    results, curves = {}, {}
    for variant, label in (("ambient", "plain neural ODE"), ("tangent", "GFG")):
        model = trained[variant]
        roll = torch.full((len(x0), len(t_long), dim), float("nan"), dtype=torch.float64)
        roll[:, 0] = x0.double()
        state = x0.to(device)
        with torch.no_grad():
            for k in range(horizon):  # one training horizon at a time: a blow-up is kept
                piece = slice(k * (L - 1), (k + 1) * (L - 1) + 1)
                try:
                    path_k = model.rollout(state, t_long[piece].to(device)).double().cpu()
                except SolverError:
                    break  # the plain model's state went to inf: the rest stays NaN
                roll[:, piece] = path_k
                state = path_k[:, -1].to(device=device, dtype=torch.float32)
        scale = float(model.x_scale)
        done = torch.isfinite(roll).all(-1).all(0)  # the times every rollout reached
        dist = torch.full(roll.shape[:2], float("inf"), dtype=torch.float64)
        dist[:, done] = flow.distance(roll[:, done].reshape(-1, dim)).reshape(len(x0), -1) / scale
        err = ((roll - truth) ** 2).sum(-1).mean(-1).sqrt() / scale  # NaN after a blow-up
        err = torch.where(torch.isfinite(err), err, torch.full_like(err, float("inf")))
        curves[label] = dist.mean(0)
        results[variant] = {
            "train_seconds": seconds[variant],
            "rollout_rel_error": float(err.mean()),
            "distance_1x": float(dist[:, :L].mean()),
            "distance_mean": float(dist.mean()),
            "distance_final": float(dist[:, -1].mean()),
        }
        r = results[variant]
        print(
            f"{label:>16s}: state error {r['rollout_rel_error']:.3g}, distance to the true "
            f"manifold {r['distance_1x']:.3g} over the training horizon, {r['distance_mean']:.3g} "
            f"over {horizon}x, {r['distance_final']:.3g} at the end (all / x_scale)  "
            f"[train {seconds[variant]:.1f} s]"
        )
    plot = _plot_gfg(
        t_long - t_long[0], curves, float(t[-1] - t[0]), out / "gfg_manifold_distance.png"
    )
    return {**results, "horizon": horizon, "plot": plot}


def _plot_gfg(t, curves: dict, train_span: float, path: Path) -> str | None:
    """The mean distance to the true manifold over time of each model, log scale."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, dist in curves.items():
        keep = torch.isfinite(dist)
        keep[0] = False  # the start: a data point, on the manifold up to rounding
        ax.semilogy(t[keep], dist[keep], label=label)
    ax.axvline(train_span, color="k", ls=":", label="training horizon")
    ax.set_xlabel("t")
    ax.set_ylabel("distance to the true manifold / x_scale")
    ax.set_title("Lifted circle in R^D: rollouts from the test starts")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"plot: {path}")
    return str(path)


def dynadiff_lotka_volterra(out: Path, quick: bool, device: torch.device) -> dict:
    """DynaDiff generates a predictor for an unseen Lotka-Volterra environment; against
    fine-tuning the pooled model and the nearest expert."""
    import warnings

    from simsci.models import dynadiff as dd

    zoo_steps, ae, diff = (30, 10, 30) if quick else (200, 50, 250)
    _banner("19. data: the CoDA Lotka-Volterra protocol (25 training environments)")
    paths = dd.make_environments("lotka_volterra", out / "dynadiff_data", quick=quick)
    _banner(f"20. zoo: pooled model + one expert per environment at once ({zoo_steps} steps)")
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyG's torch.jit deprecation note
        zoo = dd.load_zoo(
            dd.build_zoo(
                out / "dynadiff_data",
                _fresh(out / "dynadiff") / "zoo.pt",
                steps=zoo_steps,
                pool_steps=zoo_steps,
                device=str(device),
            )  # fmt: skip
        )
        print(
            f"{zoo.num_experts} experts of {zoo.spec.num_params} weights; "
            f"{zoo.record['experts_per_minute']:.0f} experts/min; validation RMSE median "
            f"{float(zoo.val_rmse.median()):.3f}"
        )
        gen = dd.train_generator(
            zoo, paths["train"], out / "dynadiff" / "gen", autoencoder_steps=ae,
            diffusion_train_steps=diff, context_steps=10, device=str(device),
        )  # fmt: skip
    print(f"[zoo + generator trained in {time.perf_counter() - start:.0f} s]")
    _banner("21. adapt to unseen environments from a 10-frame context")
    res = dd.compare_methods(
        gen, zoo, paths["in_domain"], methods=("dynadiff", "finetune", "nearest", "pooled")
    )
    for name, r in res["summary"].items():
        print(f"{name:>9s}: rollout RMSE {r['rmse']:.4f}   deploy {1000 * r['seconds']:8.1f} ms")
    print("[`simsci dynadiff adapt GEN --context FILE --out pred.pt` writes a checkpoint]")
    return res["summary"]


def driving_world(out: Path, quick: bool, device: torch.device) -> dict:
    """A procedural road, a drive through IDM/MOBIL traffic in simsci/Driving-v0 with the
    lane-keeping policy, the traffic's metrics, and tiled scenes in the format."""
    import numpy as np

    from simsci import driving
    from simsci.driving import metrics
    from simsci.envs import DrivingEnv, lane_keeping_policy

    _banner("22. a procedural road network (5 km route)")
    road = driving.make_road(seed=3, length=5000.0)
    kinds = dict(zip(driving.LANE_KINDS, np.bincount(road.kind, minlength=4).tolist()))
    print(f"{len(road.length)} lane segments {kinds}, {len(road.conflict_lanes)} conflicts")
    steps = 60 if quick else 700
    _banner(f"23. drive {steps / 10:.0f} s in simsci/Driving-v0 (lane keeping, IDM/MOBIL traffic)")
    env = DrivingEnv(num_roads=1, road_seed=0, route_length=5000.0, max_episode_steps=2000)
    obs, info = env.reset(seed=0)
    tr = env._vec.world.traffic
    frames, valid, uids, ego_path = [], [], [], []
    ret, start = 0.0, time.perf_counter()
    for _ in range(steps):
        obs, r, term, trunc, info = env.step(lane_keeping_policy(obs))
        ret += r
        a, v = tr.agents()
        frames.append(a[0].clone())
        valid.append(v[0].clone())
        uids.append(tr.state.uid[0].clone())
        ego_path.append(a[0, 0, :2].tolist())
        if term or trunc:
            break
    seconds = time.perf_counter() - start
    a, v, u = torch.stack(frames), torch.stack(valid), torch.stack(uids)
    rel = a.clone()
    rel[..., :2] -= a[:, :1, :2]  # ego-relative: exact box tests in float32
    same = torch.zeros_like(v)
    same[1:] = v[1:] & v[:-1] & (u[1:] == u[:-1])
    traj = a.permute(1, 0, 2).clone()  # positions relative to a fixed point for float32
    traj[..., :2] -= a[0, 0, :2]
    bad = metrics.infeasible_steps(traj, same.T) & same.T[:, 1:] & same.T[:, :-1]
    res = {
        "distance_m": round(info["distance"], 1),
        "ego_collision": info.get("collision", False),
        "ego_offroad": info.get("offroad", False),
        "return": round(ret, 2),
        "traffic_collision_rate": float(metrics.collision_rate(rel, v)),
        "traffic_infeasible_steps": int(bad.sum()),
        "vehicles_seen": int(torch.unique(u[v]).numel()),
        "real_time_factor": round(len(frames) * 0.1 / seconds, 1),
    }
    print(
        f"drove {res['distance_m']:.0f} m in {len(frames) / 10:.0f} s; collision "
        f"{res['ego_collision']}, off-road {res['ego_offroad']}; traffic: "
        f"{res['vehicles_seen']} vehicles, collision rate {res['traffic_collision_rate']:.3f}, "
        f"{res['traffic_infeasible_steps']} infeasible steps; {res['real_time_factor']:.0f}x "
        "real time"
    )
    res["plot"] = _plot_driving(
        tr.pool.roads[int(tr.net[0])], np.array(ego_path), a[-1].numpy(), v[-1].numpy(),
        out / "driving_rollout.png",
    )  # fmt: skip
    n = 2 if quick else 16
    _banner(f"24. {n} drives cut into 64 m vector tiles (kind scene) and their metrics")
    path = driving.make_scenes(
        n, out=out / "driving_scenes.h5", drive_length=200.0 if quick else 600.0,
        route_length=1500.0 if quick else 5000.0, episodes_per_road=4,
    )  # fmt: skip
    from simsci.driving import scene_metrics

    m = scene_metrics(path)
    print(
        f"{m['tiles']} tiles, {m['agents']} agents ({m['agents_per_km_mean']:.1f} per lane-km); "
        f"collision {m['collision_rate']:.3f}, off-road {m['offroad_rate']:.3f}, infeasible "
        f"{m['infeasible_step_rate']:.3f}; seam gap median {m['seam_gap_median_m']:.1e} m"
    )
    print("[`simsci generate driving --n 2000 --out scenes.h5`; `simsci driving metrics FILE`]")
    res["scenes"] = {k: m[k] for k in ("tiles", "agents", "collision_rate", "seam_gap_median_m")}
    return res


def _plot_driving(road, ego_path, agents, valid, path: Path) -> str | None:
    """The route's lanes near the drive, the ego's path and the last frame's vehicles."""
    plt = _pyplot()
    if plt is None:
        return None
    import numpy as np

    from simsci.driving.metrics import box_corners

    corners = np.asarray(box_corners(agents[valid]))
    fig, axes = plt.subplots(1, 2, figsize=(13, 6.5))
    views = [
        (ego_path.min(0) - 60, ego_path.max(0) + 60, "the drive"),
        (ego_path[-1] - 70, ego_path[-1] + 70, "the last frame, 140 m around the ego"),
    ]
    for ax, (lo, hi, title) in zip(axes, views):
        for lane in range(len(road.length)):
            p = road.points[lane, : road.num_points[lane]]
            if ((p >= lo) & (p <= hi)).all(1).any():
                ax.plot(p[:, 0], p[:, 1], color="0.6", lw=0.6)
        ax.plot(ego_path[:, 0], ego_path[:, 1], color="tab:green", lw=1.5, label="ego path")
        for i, c in enumerate(corners):
            ax.fill(c[:, 0], c[:, 1], color="tab:green" if i == 0 else "tab:blue")
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_aspect("equal")
        ax.set_title(title)
        ax.set_xlabel("x [m]")
    axes[0].legend(loc="upper left")
    fig.suptitle("simsci/Driving-v0: lane keeping through IDM/MOBIL traffic")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot: {path}")
    return str(path)


def vectorworld_rollout(out: Path, quick: bool, device: torch.device) -> dict:
    """A closed-loop drive through a world VectorWorld generates as the ego advances."""
    from simsci.models.vectorworld import plot_route, rollout, small_default, write_rollout

    km = 0.2 if quick else 1.0
    _banner("25. VectorWorld: the small on-the-fly model (tiles, VAE, ΔSim; cached)")
    start = time.perf_counter()
    model = small_default()
    print(f"ready in {time.perf_counter() - start:.0f} s ({model.tiles.layout})")
    _banner(f"26. a {km:g} km closed-loop rollout: tiles outpainted in one step, ΔSim NPCs")
    res = rollout(model, km=km, seed=0, device=device, stop_on_failure=False)
    s = res["stats"]
    write_rollout(res, out / "vectorworld_rollout.h5")
    plot = plot_route(res, out / "vectorworld_route.png")
    print(
        f"drove {s['distance_m']:.0f} m in {s['sim_time_s']:.0f} s ({s['real_time_factor']:.0f}x "
        f"real time): {s['world_tiles']} tiles ({s['world_resampled']} resampled, "
        f"{s['world_empty_tiles']} empty), {s['world_spawned']} NPCs spawned, NPC infeasible "
        f"steps {s['npc_infeasible_steps']}, ego off-road steps {s['ego_offroad_steps']}, "
        f"collision steps {s['ego_collision_steps']}"
    )
    print(
        "[the small model is for trying things; train the real one with `simsci train "
        "vectorworld --data scenes.h5` and `simsci rollout vectorworld --checkpoint DIR`]"
    )
    keep = (
        "distance_m", "real_time_factor", "world_tiles", "world_resampled", "world_spawned",
        "npc_infeasible_steps", "ego_offroad_steps", "ego_collision_steps", "seam_gap_median_m",
    )  # fmt: skip
    return {**{k: s[k] for k in keep}, "plot": str(out / "vectorworld_route.png") if plot else None}


SECTIONS = [
    ("latent ODE on irregular Lorenz-63", lorenz_latent_ode),
    ("PDE solvers on Burgers", burgers_solvers),
    ("environments and a learned surrogate", environments),
    ("∂-NO on Burgers", dno_burgers),
    ("SDEVI on an irregular pendulum", sdevi_pendulum),
    ("CoCLD on population-coupled events", cocld_events),
    ("plain vs grounded rollout of a lifted system", gfg_lifted_circle),
    ("DynaDiff: a predictor for an unseen Lotka-Volterra", dynadiff_lotka_volterra),
    ("driving world: roads, traffic, tiles", driving_world),
    ("VectorWorld: a streamed closed-loop rollout", vectorworld_rollout),
]


def run(args) -> int:
    from simsci._device import resolve_device

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(args.device)
    if device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        # The tour's tensors are small: a second OpenMP thread buys nothing, and on a
        # 2-core machine with any other load every op would wait for a busy core (seen:
        # the Lorenz training 12x slower). OMP_NUM_THREADS, when set, wins.
        torch.set_num_threads(1)
    results, start = {}, time.perf_counter()
    for title, section in SECTIONS:
        print(f"\n##### {title} #####", flush=True)
        results[title] = section(out, args.quick, device)
    results["total_seconds"] = round(time.perf_counter() - start, 1)
    (out / "summary.json").write_text(json.dumps(results, indent=2, default=float) + "\n")
    print(f"\ntour finished in {results['total_seconds']:.0f} s; summary: {out / 'summary.json'}")
    return 0
