"""Train a tiny model in its own process (for the kill/resume and torchrun tests).

    python trainhelp_run.py --out DIR --steps N [--resume] [--hang-at K] [--model noisy]
    python -m torch.distributed.run --nproc_per_node 2 trainhelp_run.py --model linear ...

The run's setup is fixed here so that every invocation with the same arguments is the
same run. ``--params-dir`` makes every rank save its final parameters as rank<r>.pt.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import trainhelp_models as hm

from simsci.train import TrainConfig, Trainer


def config(args) -> TrainConfig:
    if args.model == "noisy":
        return TrainConfig(
            epochs=1000, max_steps=args.steps, batch_size=args.batch_size, lr=0.02,
            optimizer="adamw", weight_decay=0.01, schedule="warmup_cosine", warmup_steps=5,
            grad_clip=1.0, val_every=7, checkpoint_every=1, log_every=3, seed=11,
            progress=False, device="cpu",
        )  # fmt: skip
    return TrainConfig(
        epochs=args.epochs, batch_size=args.batch_size, lr=0.05, optimizer="sgd",
        schedule="step", step_every=4, step_gamma=0.5, val_every=3, log_every=1, seed=5,
        progress=False, device="cpu",
    )  # fmt: skip


def build(args):
    torch.manual_seed(0)
    if args.model == "noisy":
        model = hm.NoisyNet()
        model.hang_at = args.hang_at
        return model, hm.Regression(args.n_data, noise=0.1), hm.Regression(9, seed=1)
    return hm.LinearRegression(), hm.Regression(args.n_data, noise=0.1), hm.Regression(13, seed=1)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--model", choices=["noisy", "linear"], default="noisy")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--n-data", type=int, default=40)
    p.add_argument("--hang-at", type=int, default=None)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--params-dir", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    model, train_set, val_set = build(args)
    Trainer(model, config(args), train_set, val_set, out_dir=args.out, resume=args.resume).fit()
    if args.params_dir:
        rank = int(os.environ.get("RANK", "0"))
        torch.save(model.state_dict(), Path(args.params_dir) / f"rank{rank}.pt")


if __name__ == "__main__":
    main()
