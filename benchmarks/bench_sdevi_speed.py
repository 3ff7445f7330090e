"""SDEVI vs a path-sampling latent SDE (torchsde): time per training step.

Claim checked (issue 6): the SDE-induced posterior needs no path sampling, so an ELBO +
gradient step is much cheaper than torchsde's latent SDE (Li et al. 2020) at the same
latent size, batch and data (target >= 5x).

Same run, same batch (irregular damped-pendulum episodes, 50% of points kept, 60 time
points each, batch 32), latent size 8, GRU width 64:

- SDEVI: ``SDEVI.training_step`` (bidirectional GRU, per-interval LTV-SDE posterior,
  closed-form marginals and KL) + backward;
- peer: the latent SDE of torchsde's example design: a GRU encoder gives q(z0) and a
  context, the posterior drift is an MLP of (z, context), the prior drift an MLP of z,
  diagonal diffusion; ``torchsde.sdeint(..., logqp=True)`` with Euler-Maruyama at a
  step of 1/4 of the median gap on the union time grid, Gaussian likelihood of the
  observed entries, + backward.

Also timed: the non-linear variant (its default parallel linearisation and the
sequential one), the complex variant (4 complex modes = 8 real dimensions), and simsci's
own baseline ``simsci.models.LatentSDE`` (the same harness as SDEVI; per-time context,
gated correction) at the peer's step.

All are timed warm, in interleaved rounds (median over rounds; ratios also as the
median of each round's ratio), on ``--device`` (synchronised). Usage: ``python
benchmarks/bench_sdevi_speed.py [--quick] [--device cuda]``; writes
``benchmarks/results/sdevi_speed_<device>.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torchsde
from torch import nn

from simsci import data, systems
from simsci.bench import time_call, write_result
from simsci.models import SDEVI
from simsci.models import LatentSDE as LibraryLatentSDE
from simsci.models.latent_ode import observed_mask
from simsci.models.sdevi import VARIANTS

RESULTS = Path(__file__).resolve().parent / "results"


class LatentSDE(nn.Module):
    """A compact torchsde latent SDE (posterior drift conditioned on a context)."""

    noise_type = "diagonal"
    sde_type = "ito"

    def __init__(self, obs_dim: int, latent: int = 8, hidden: int = 64):
        super().__init__()
        self.encoder = nn.GRU(2 * obs_dim + 1, hidden, batch_first=True)
        self.q0 = nn.Linear(hidden, 2 * latent)
        self.ctx = nn.Linear(hidden, hidden)
        self.f_post = nn.Sequential(
            nn.Linear(latent + hidden, hidden), nn.Tanh(), nn.Linear(hidden, latent)
        )
        self.f_prior = nn.Sequential(
            nn.Linear(latent, hidden), nn.Tanh(), nn.Linear(hidden, latent)
        )
        self.log_g = nn.Parameter(torch.full((latent,), -1.0))
        self.decoder = nn.Linear(latent, obs_dim)
        self._context = None

    def f(self, t, z):
        return self.f_post(torch.cat([z, self._context], -1))

    def h(self, t, z):
        return self.f_prior(z)

    def g(self, t, z):
        return self.log_g.exp().expand_as(z)

    def loss(self, batch: dict) -> torch.Tensor:
        x = batch["x"]
        obs = observed_mask(batch)
        xv = torch.nan_to_num(x)
        gaps = torch.diff(batch["t"], dim=1, prepend=batch["t"][:, :1])
        inp = torch.cat([xv * obs, obs.to(x.dtype), gaps[..., None].to(x.dtype)], -1)
        _, h = self.encoder(inp.flip(1))
        h = h[-1]
        mu, logvar = self.q0(h).chunk(2, -1)
        self._context = self.ctx(h)
        z0 = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        grid = batch["grid"].to(x.dtype)
        dt = float(torch.diff(grid).median()) / 4
        zs, logqp = torchsde.sdeint(self, z0, grid, dt=dt, logqp=True, method="euler")
        zs = zs.transpose(0, 1)  # (B, U, latent)
        z = torch.gather(zs, 1, batch["index"][..., None].expand(-1, -1, zs.shape[-1]))
        pred = self.decoder(z)
        nll = 0.5 * torch.where(obs, (xv - pred) ** 2 / 0.01, 0.0).sum()
        kl0 = 0.5 * (mu**2 + logvar.exp() - 1 - logvar).sum()
        return (nll + kl0 + logqp.sum()) / obs.sum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time, or this thread's CPU time (a shared CPU machine; not for CUDA)",
    )
    args = parser.parse_args()
    if args.clock == "cpu" and args.device != "cpu":
        parser.error("--clock cpu times the CPU only; use the wall clock on a GPU")
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        path = systems.generate(
            "damped_pendulum", 64, t_end=12.0, dt=0.1, keep=0.5, out=Path(tmp) / "p.h5",
            seed=0, progress=False,
        )  # fmt: skip
        traj = data.open(path)
        ds = data.TrajectoryDataset(traj, fields=("t", "x"))
        sdevi = {
            variant: SDEVI.from_data(
                traj, latent_dim=4 if variant == "complex" else 8, hidden_dim=64,
                variant=variant,
            ).to(device)
            for variant in VARIANTS
        }  # fmt: skip
        # the non-linear variant's earlier scheme (one Python step per sub-step), beside
        # the default fixed-point sweeps (issue 27)
        sdevi["nonlinear_sequential"] = SDEVI.from_data(
            traj, latent_dim=8, hidden_dim=64, variant="nonlinear", linearisation="sequential"
        ).to(device)
        batch = sdevi["linear"].collate([ds[i] for i in range(32)])
        batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
        peer = LatentSDE(obs_dim=2, latent=8, hidden=64).to(device)
        # the library's baseline at the peer's step (a quarter of the median union gap)
        union_gap = float(torch.diff(batch["grid"]).median())
        library = LibraryLatentSDE.from_data(
            traj, latent_dim=8, hidden_dim=64, dt=union_gap / 4
        ).to(device)
        repeat = 3 if args.quick else 10

        def step(model, fn):
            def run():
                model.zero_grad()
                fn().backward()

            return run

        runs = {f"sdevi_{v}": step(m, lambda m=m: m.training_step(batch)["loss"])
                for v, m in sdevi.items()}  # fmt: skip
        runs["torchsde_latent_sde"] = step(peer, lambda: peer.loss(batch))
        runs["simsci_latent_sde"] = step(library, lambda: library.training_step(batch)["loss"])
        # interleaved rounds (one timed step of every model a round): a load change on a
        # shared machine then hits all models alike, and each round gives its own ratios
        rounds = {k: [] for k in runs}
        for r in range(repeat):
            for key, run in runs.items():
                rounds[key].append(
                    time_call(run, repeat=1, warmup=int(r == 0), device=device, clock=clock).times[
                        0
                    ]
                )
        times = {k: statistics.median(v) for k, v in rounds.items()}
        peer_rounds = rounds["torchsde_latent_sde"]
        round_ratios = {
            k: statistics.median(p / t for p, t in zip(peer_rounds, v))
            for k, v in rounds.items()
            if k.startswith("sdevi")
        }
    result = {
        "batch": 32,
        "device": str(device),
        "time_points_per_episode": int(batch["valid"].sum(1).float().mean()),
        "union_grid": int(batch["grid"].numel()),
        "latent": 8,
        "clock": args.clock,
        "step_s": times,
        # the headline: linear SDEVI vs the compact torchsde latent SDE (earlier results)
        "sdevi_step_s": times["sdevi_linear"],
        "torchsde_latent_sde_step_s": times["torchsde_latent_sde"],
        "speedup": times["torchsde_latent_sde"] / times["sdevi_linear"],
        "speedup_vs_torchsde": {
            k: times["torchsde_latent_sde"] / v for k, v in times.items() if k.startswith("sdevi")
        },
        # the median over rounds of each round's peer / model time
        "speedup_vs_torchsde_round_median": round_ratios,
        "step_s_rounds": rounds,
        "speedup_vs_simsci_latent_sde": {
            k: times["simsci_latent_sde"] / v for k, v in times.items() if k.startswith("sdevi")
        },
    }
    out = args.out or RESULTS / f"sdevi_speed_{device.type}.json"
    for key, value in times.items():
        print(f"{key:24s} {value * 1e3:8.1f} ms/step")
    print(
        "speed-up vs the torchsde latent SDE: "
        + ", ".join(f"{k} {v:.1f}x" for k, v in result["speedup_vs_torchsde"].items())
    )
    print(
        "median of the rounds' ratios: "
        + ", ".join(f"{k} {v:.1f}x" for k, v in round_ratios.items())
    )
    print(f"wrote {write_result(out, result, device=device)}")


if __name__ == "__main__":
    main()
