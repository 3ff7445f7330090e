"""SDEVI interpolating a pendulum whose channels are observed at different times.

12. generate a damped pendulum whose two channels are observed at different times;
13. train SDEVI (non-linear variant) and report interpolation error against the
    last-value and mean baselines, the 95% interval coverage, and plot the posterior
    with its uncertainty band to OUT/sdevi_interpolation.png.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from simsci.tour._common import Context, banner, pyplot, save_plot


def run(ctx: Context) -> dict:
    """SDEVI (non-linear variant) interpolating an irregular damped pendulum whose
    channels are observed at different times, with posterior uncertainty."""
    from simsci import data, models, systems, train

    n, steps = (32, 10) if ctx.quick else (128, 200)
    path = ctx.out / "pendulum_per_channel.h5"
    banner("12. generate: damped pendulum, each channel keeps its own 50% of the times")
    systems.generate(
        "damped_pendulum", n, t_end=6.0, dt=0.1, keep=0.5, per_channel=True, out=path,
        seed=ctx.seed, device=ctx.device, progress=False,
    )  # fmt: skip
    traj = data.open(path)
    banner(f"13. train SDEVI (non-linear SDE-induced posterior, no path sampling; {steps} steps)")
    torch.manual_seed(ctx.seed)
    model = models.SDEVI.from_data(traj, latent_dim=4, hidden_dim=32, variant="nonlinear")
    fields = ("t", "x", "mask")
    config = train.TrainConfig(
        max_steps=steps, epochs=100_000, batch_size=16, lr=1e-2, schedule="cosine",
        grad_clip=10.0, device=str(ctx.device), progress=False, seed=ctx.seed,
    )  # fmt: skip
    start = time.perf_counter()
    train.Trainer(
        model, config, data.TrajectoryDataset(traj, fields=fields, split="train"), None,
        out_dir=ctx.fresh("sdevi"), collate_fn=model.collate,
    ).fit()  # fmt: skip
    seconds = time.perf_counter() - start
    test_set = data.TrajectoryDataset(traj, fields=fields, split="test")
    metrics = train.evaluate(
        model, test_set, collate_fn=model.collate, device=ctx.device, seed=ctx.seed
    )
    print(
        f"interpolation MSE (normalised) {metrics['interp_mse']:.4f} vs last value "
        f"{metrics['locf_mse']:.4f} and episode mean {metrics['mean_mse']:.4f}; "
        f"{100 * metrics['coverage95']:.0f}% of the hidden values inside the 95% "
        f"interval  [train {seconds:.0f} s]"
    )
    plot = _plot(model.cpu(), test_set, ctx.out / "sdevi_interpolation.png", ctx.seed + 1234)
    return {**{k: float(v) for k, v in metrics.items()}, "train_seconds": seconds, "plot": plot}


def _plot(model, dataset, path: Path, seed: int) -> str | None:
    """Two test episodes: visible and hidden points, the posterior mean and its band."""
    plt = pyplot()
    if plt is None:
        return None
    model.eval()
    batch = model.collate([dataset[i] for i in range(min(2, len(dataset)))])
    observed, visible, hidden = model.masks(batch, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        mean, var = model.predict_steps(batch, visible, variance=True)
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
    return save_plot(plt, fig, path)
