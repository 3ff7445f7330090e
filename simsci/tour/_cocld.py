"""CoCLD's next-event prediction on population-coupled events vs Poisson and the truth.

14. generate event sequences of individuals whose intensities follow their own latent
    state and a drifting population state (daily and weekly cycles, a regime shift);
15. train CoCLD and report next-event prediction (log-likelihood per event, time
    RMSE, type accuracy) against a Poisson process and the true process (the ceiling).
"""

from __future__ import annotations

import time

import torch

from simsci.tour._common import Context, banner, model_dataset


def run(ctx: Context) -> dict:
    """CoCLD on population-coupled event sequences, next to a Poisson process and the
    true generating process."""
    from simsci import data, datasets, models, train

    n, steps = (40, 3) if ctx.quick else (300, 50)
    path = ctx.out / "population_events.h5"
    banner("14. generate: event sequences of individuals coupled to a drifting population")
    datasets.make_dataset("population_events", n, out=path, seed=ctx.seed)
    traj = data.open(path)
    banner(f"15. train CoCLD (latent neural ODEs + population diffusion; {steps} steps)")
    torch.manual_seed(ctx.seed)
    model = models.CoCLD.from_data(traj, latent_dim=8, hidden=32)
    config = train.TrainConfig(
        max_steps=steps, epochs=100_000, batch_size=32, lr=3e-3, grad_clip=10.0,
        device=str(ctx.device), progress=False, seed=ctx.seed,
    )  # fmt: skip
    start = time.perf_counter()
    train.Trainer(
        model, config, model_dataset(traj, model.data_fields, split="train"), None,
        out_dir=ctx.fresh("cocld"), collate_fn=model.collate,
    ).fit()  # fmt: skip
    seconds = time.perf_counter() - start
    results = {}
    for name, m in (
        ("CoCLD", model),
        ("Poisson", models.PoissonTPP.from_data(traj)),
        ("true process", models.TrueProcessTPP.from_data(traj)),
    ):
        r = models.evaluate_events(m, traj, split="test", generate=False, device=ctx.device)
        results[name] = r
        print(
            f"{name:>13s}: log-likelihood/event {r['ll_per_event']:7.3f}   next-event time "
            f"RMSE {r['time_rmse']:.2f} h   type accuracy {100 * r['type_accuracy']:.0f}%"
        )
    print(f"[train {seconds:.0f} s; `simsci events generate` samples new sequences]")
    return {"train_seconds": seconds, **results}
