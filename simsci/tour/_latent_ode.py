"""A latent neural ODE interpolating irregular Lorenz-63, against the last value.

1. generate a small irregular Lorenz-63 dataset (50% of time points kept, 1% noise);
2. check it against the format contract and print its summary;
3. train a latent neural ODE on windows of it for a fixed budget of steps;
4. report interpolation error on held-out test points vs the last-value baseline, and
   plot a few test windows with predictions to OUT/lorenz_interpolation.png.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from simsci.tour._common import Context, banner, model_dataset, pyplot, save_plot


def run(ctx: Context) -> dict:
    from simsci import data, models, systems, train

    n, t_end, window, steps = (48, 2.0, 16, 30) if ctx.quick else (400, 6.0, 24, 1400)
    path = ctx.out / "lorenz63_irregular.h5"
    banner("1. generate: irregular Lorenz-63 trajectories")
    systems.generate(
        "lorenz63", n, t_end=t_end, dt=0.02, out=path, keep=0.5, obs_noise=0.01,
        seed=ctx.seed, device=ctx.device, progress=False,
    )  # fmt: skip
    banner("2. check and describe the file")
    problems = data.check_file(path)
    if problems:
        raise RuntimeError(f"the tour's own dataset breaks the format: {problems[0]}")
    print(data.info(path))

    banner(f"3. train a latent ODE on windows of {window} observations ({steps} steps)")
    traj, fields = data.open(path), models.LatentODE.data_fields
    train_set = model_dataset(traj, fields, split="train", window=window, stride=window // 2)
    val_set = model_dataset(traj, fields, split="val", window=window)
    model = models.LatentODE.from_data(traj, window=window, latent_dim=12, hidden_dim=64)
    config = train.TrainConfig(
        max_steps=steps, epochs=10_000, batch_size=32, lr=3e-3, schedule="cosine",
        grad_clip=5.0, val_every=max(steps // 3, 1),
        monitor="val_interp_mse",  # keep the checkpoint that interpolates best on val
        device=str(ctx.device), progress=not ctx.quick, log_every=25, seed=ctx.seed,
    )  # fmt: skip
    start = time.perf_counter()
    summary = train.Trainer(
        model, config, train_set, val_set, out_dir=ctx.fresh("latent_ode"),
        collate_fn=model.collate,
    ).fit()  # fmt: skip
    train_time = time.perf_counter() - start

    banner("4. interpolation on the test split: 30% of interior points hidden")
    best = Path(summary["paths"]["best_checkpoint"] or summary["paths"]["last_checkpoint"])
    model = train.load_model(best)
    test_set = model_dataset(traj, fields, split="test", window=window)
    metrics = train.evaluate(
        model, test_set, collate_fn=model.collate, batch_size=64, device=ctx.device,
        seed=ctx.seed,
    )  # fmt: skip
    ratio = metrics["interp_mse"] / max(metrics["locf_mse"], 1e-12)
    print(f"latent ODE interpolation MSE (normalised): {metrics['interp_mse']:.4f}")
    print(f"last-value baseline MSE (normalised):      {metrics['locf_mse']:.4f}")
    print(
        f"ratio model / baseline: {ratio:.3f} ({'better' if ratio < 1 else 'worse'} "
        f"than carrying the last value forward)  [train {train_time:.0f} s]"
    )
    plot = _plot(model, test_set, ctx.out / "lorenz_interpolation.png", seed=ctx.seed + 1234)
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


def _plot(model, dataset, path: Path, *, seed: int) -> str | None:
    """Three test windows: observed points, hidden points, and the model's curve."""
    plt = pyplot()
    if plt is None:
        return None
    from simsci.integrate import odeint
    from simsci.models.latent_ode import hide_time_points, observed_mask

    model = model.cpu()  # plotting is small; keep every tensor on the CPU
    batch = model.collate([dataset[i] for i in range(min(3, len(dataset)))])
    observed = observed_mask(batch)
    hidden = hide_time_points(observed, 0.3, torch.Generator().manual_seed(seed))
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
    return save_plot(plt, fig, path)
