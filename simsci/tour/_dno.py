"""A plain FNO against ∂-NO (the same FNO + derivative features) on Burgers.

10. generate a small Burgers set (nu = 0.01, 96 episodes);
11. train a plain FNO and the same FNO with ∂-NO derivative features; report rollout
    errors at the training resolution and 2x finer, and the learned orders beta.
"""

from __future__ import annotations

import time

import torch

from simsci.tour._common import Context, banner


def run(ctx: Context) -> dict:
    """One-step operators rolled out over the episode, scored at the training resolution
    and at 2x finer with the same weights; the learned orders beta."""
    from simsci import data, systems

    banner("10. generate Burgers data (nu = 0.01, 256 points, t in [0, 0.5])")
    n, steps = (24, 20) if ctx.quick else (96, 400)
    path = ctx.out / "burgers_small.h5"
    system = systems.get("burgers", resolution=256, nu=0.01)
    systems.generate(
        system, n, t_end=0.5, dt=0.05, out=path, seed=ctx.seed, progress=False,
        device=ctx.device,
    )  # fmt: skip
    traj = data.open(path)
    print(f"{path}: {n} episodes of {traj.lengths[0]} frames")

    banner("11. train a plain FNO and a ∂-NO (same FNO + derivative features) at 128 points")
    scores, betas = {}, {}
    for features in ("none", "dno"):
        scores[features], betas[features] = _train_and_score(ctx, traj, features, steps)
    print("learned orders beta (Burgers is second order, m = 2): " + ", ".join(
        f"{k} {v:.2f}" for k, v in betas["dno"].items()
    ))  # fmt: skip
    return {"rel_l2": scores, "betas": betas["dno"]}


def _train_and_score(ctx: Context, traj, features: str, steps: int) -> tuple[dict, dict]:
    """Train one operator (``features`` "none" or "dno"); its test errors and orders."""
    from simsci import data, train
    from simsci.operators import OperatorModel, evaluate_operator

    torch.manual_seed(ctx.seed)
    model = OperatorModel.from_data(
        traj,
        features=features,
        subsample=2,
        backbone_kwargs={"width": 24, "modes": 12, "layers": 3},
    )
    dataset = data.TrajectoryDataset(traj, fields=("t", "x"), split="train")
    config = train.TrainConfig(
        max_steps=steps, epochs=100_000, batch_size=4, lr=3e-3, schedule="cosine",
        progress=False, device=str(ctx.device), seed=ctx.seed,
    )  # fmt: skip
    start = time.perf_counter()
    train.Trainer(
        model, config, dataset, None, out_dir=ctx.fresh(f"operator_{features}"),
        collate_fn=model.collate,
    ).fit()  # fmt: skip
    result = evaluate_operator(model, traj, split="test")["resolutions"]
    scores = {k: v["rel_l2_mean"] for k, v in result.items()}
    print(
        f"{'plain FNO' if features == 'none' else '∂-NO':9s}  {model.num_parameters():,} "
        f"parameters, {time.perf_counter() - start:.0f} s; rollout rel L2 "
        + ", ".join(f"{v:.4f} at {k}" for k, v in scores.items())
    )
    return scores, model.betas()
