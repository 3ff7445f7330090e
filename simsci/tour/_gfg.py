"""A plain neural ODE vs GFG, rolled out 10x past training on a circle lifted into R^32.

16. generate 8 trajectories of a non-uniform rotation on a circle embedded in R^32 by a
    curved random map (the true manifold is known);
17. train a plain neural ODE (GFG variant "ambient") and GFG (variant "tangent":
    velocities in the tangent space of a learned manifold, re-projected onto it);
18. roll both out from the test starts to 10x the training horizon; report the error
    against the true flow and the distance to the true manifold, and plot that
    distance over time to OUT/gfg_manifold_distance.png.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from simsci.tour._common import Context, banner, pyplot, save_plot

LABELS = {"ambient": "plain neural ODE", "tangent": "GFG"}


def run(ctx: Context) -> dict:
    """A plain neural ODE against GFG on a circle lifted into R^32, trained on the same
    4 trajectories: rolled out to 10x their duration, the plain one leaves the data
    manifold (on this data it diverges exponentially), while GFG's velocities lie in the
    tangent spaces of its learned manifold and its state is re-projected onto it at
    every output step. Distances to the true manifold come from the file's meta."""
    from simsci import data, datasets

    # quick: a smoke run of about a second; full: about 15 s on one core
    dim, grid_steps, steps, hidden, horizon = (
        (16, 10, 20, 32, 2) if ctx.quick else (32, 50, 300, 64, 10)
    )
    path = ctx.out / "lifted_circle.h5"
    banner(f"16. generate: 8 trajectories of a rotation on a circle curved into R^{dim}")
    datasets.make_dataset(
        "lifted_circle", 8, out=path, dim=dim, steps=grid_steps, split=(0.5, 0.0, 0.5),
        seed=ctx.seed,
    )  # fmt: skip
    traj = data.open(path)
    flow = datasets.lifted_from_config(traj.meta["manifold"])  # the true manifold
    split = np.asarray(traj.column("split"))
    n_train, n_test = int((split == 0).sum()), int((split == 2).sum())
    print(f"{path}: {len(traj)} episodes ({n_train} train) of {traj.lengths[0]} points")

    banner(f"17. train a plain neural ODE and GFG ({steps} full-batch steps each)")
    trained, seconds = {}, {}
    for variant in LABELS:
        trained[variant], seconds[variant] = _train(ctx, traj, variant, steps, hidden)

    banner(f"18. roll out from the {n_test} test starts to {horizon}x the training horizon")
    test = [traj.read(int(i), ["t", "x"]) for i in np.flatnonzero(split == 2)]
    t = torch.as_tensor(test[0]["t"], dtype=torch.float64)  # a regular grid, shared
    L = len(t)
    t_long = t[0] + (t[1] - t[0]) * torch.arange(horizon * (L - 1) + 1, dtype=torch.float64)
    x0 = torch.as_tensor(np.stack([e["x"][0] for e in test]), dtype=torch.float32)
    truth = flow.embed(flow.simulate(flow.nearest(x0.double()), t_long - t_long[0]))
    results, curves = {}, {}
    for variant, label in LABELS.items():
        model = trained[variant]
        roll = _rollout(model, x0, t_long, L, horizon, ctx.device)
        scores, curves[label] = _score(model, roll, truth, flow, L)
        r = results[variant] = {"train_seconds": seconds[variant], **scores}
        print(
            f"{label:>16s}: state error {r['rollout_rel_error']:.3g}, distance to the true "
            f"manifold {r['distance_1x']:.3g} over the training horizon, {r['distance_mean']:.3g} "
            f"over {horizon}x, {r['distance_final']:.3g} at the end (all / x_scale)  "
            f"[train {seconds[variant]:.1f} s]"
        )
    plot = _plot(
        t_long - t_long[0], curves, float(t[-1] - t[0]), ctx.out / "gfg_manifold_distance.png"
    )
    return {**results, "horizon": horizon, "plot": plot}


def _train(ctx: Context, traj, variant: str, steps: int, hidden: int):
    """One GFG variant trained full-batch on the train split; the model and its seconds."""
    from simsci import data, models, train

    fields = ("t", "x", "v")  # the file's true velocities (without v: finite differences)
    config = train.TrainConfig(
        max_steps=steps, epochs=100_000, batch_size=8, lr=3e-3, schedule="cosine",
        checkpoint_every=steps, log_every=steps, device=str(ctx.device), progress=False,
        seed=ctx.seed,
    )  # fmt: skip
    torch.manual_seed(ctx.seed)
    # rk4 on the (regular) output grid, for time: half the data's step is the default
    # the plain neural ODE as usually trained: without GFG's restoring term
    extra = {"restore": 0.0} if variant == "ambient" else {}
    model = models.GFG.from_data(
        traj, variant=variant, hidden_dim=hidden, method="rk4", step_size=None, **extra
    )
    start = time.perf_counter()
    train.Trainer(
        model, config, data.TrajectoryDataset(traj, fields=fields, split="train"), None,
        out_dir=ctx.fresh(f"gfg_{variant}"), collate_fn=model.collate,
    ).fit()  # fmt: skip
    return model.to(ctx.device).eval(), time.perf_counter() - start


def _rollout(model, x0, t_long, L: int, horizon: int, device) -> torch.Tensor:
    """Roll out one training horizon at a time (float64, CPU): a blow-up is kept, the
    rest after it stays NaN."""
    from simsci.errors import SolverError

    roll = torch.full((len(x0), len(t_long), x0.shape[-1]), float("nan"), dtype=torch.float64)
    roll[:, 0] = x0.double()
    state = x0.to(device)
    with torch.no_grad():
        for k in range(horizon):
            piece = slice(k * (L - 1), (k + 1) * (L - 1) + 1)
            try:
                path_k = model.rollout(state, t_long[piece].to(device)).double().cpu()
            except SolverError:
                break  # the plain model's state went to inf: the rest stays NaN
            roll[:, piece] = path_k
            state = path_k[:, -1].to(device=device, dtype=torch.float32)
    return roll


def _score(model, roll, truth, flow, L: int) -> tuple[dict, torch.Tensor]:
    """Error against the true flow and distance to the true manifold (both / x_scale);
    the mean distance over time for the plot."""
    n, _, dim = roll.shape
    scale = float(model.x_scale)
    done = torch.isfinite(roll).all(-1).all(0)  # the times every rollout reached
    dist = torch.full(roll.shape[:2], float("inf"), dtype=torch.float64)
    dist[:, done] = flow.distance(roll[:, done].reshape(-1, dim)).reshape(n, -1) / scale
    err = ((roll - truth) ** 2).sum(-1).mean(-1).sqrt() / scale  # NaN after a blow-up
    err = torch.where(torch.isfinite(err), err, torch.full_like(err, float("inf")))
    return {
        "rollout_rel_error": float(err.mean()),
        "distance_1x": float(dist[:, :L].mean()),
        "distance_mean": float(dist.mean()),
        "distance_final": float(dist[:, -1].mean()),
    }, dist.mean(0)


def _plot(t, curves: dict, train_span: float, path: Path) -> str | None:
    """The mean distance to the true manifold over time of each model, log scale."""
    plt = pyplot()
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
    return save_plot(plt, fig, path)
