"""Per-sample time grids: one batched ``simsci.odeint`` call vs a loop of torchdiffeq calls.

256 Lorenz-63 samples (sigma=10, rho=28, beta=8/3), each with its own ~100 random sorted
observation times in [0, 2] (so every sample starts and ends at a different time) and its
own initial state near the attractor. Both sides use dopri5, rtol=1e-7, atol=1e-9, float64:

  (a) simsci.odeint(f, y0, t) with t of shape (B, T): one solve on the union grid;
  (b) the peer: [torchdiffeq.odeint(f, y0[b], t[b]) for b in range(B)].

Reports median wall times, the speed-up (target >= 20x), the max |a - b|, and the solver
statistics that explain the ratio (union grid size, steps and evaluations of each side).
Writes benchmarks/results/odeint_grid.json. ``--quick`` runs a small version.

    .venv/bin/python benchmarks/bench_odeint_grid.py [--quick] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torchdiffeq

import simsci
from simsci._device import resolve_device
from simsci.bench import Timing, time_call, write_result

SIGMA, RHO, BETA = 10.0, 28.0, 8.0 / 3.0
RTOL, ATOL = 1e-7, 1e-9
RESULT = Path(__file__).parent / "results" / "odeint_grid.json"


def lorenz63(t, s):
    """dx = sigma (y - x), dy = x (rho - z) - y, dz = x y - beta z; state (..., 3)."""
    x, y, z = s[..., 0], s[..., 1], s[..., 2]
    return torch.stack([SIGMA * (y - x), x * (RHO - z) - y, x * y - BETA * z], dim=-1)


class Counted:
    """``lorenz63`` that counts evaluations; used in an untimed pass only (the counter
    itself costs microseconds, which would tax the loop's 50x more calls)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, t, s):
        self.calls += 1
        return lorenz63(t, s)


def make_problem(batch: int, n_times: int, device, seed: int = 0):
    """Initial states near the attractor and per-sample sorted random times in [0, 2]."""
    gen = torch.Generator().manual_seed(seed)
    # Start from a point on the attractor: integrate one trajectory past its transient,
    # then pick states along it and perturb them a little.
    base = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)
    ts = torch.linspace(0, 20 + batch * 0.05, 400 + batch, dtype=torch.float64)
    traj = torchdiffeq.odeint(lorenz63, base, ts, rtol=1e-8, atol=1e-10)[-batch:]
    y0 = traj + 0.1 * torch.randn(batch, 3, generator=gen, dtype=torch.float64)
    t = torch.sort(2.0 * torch.rand(batch, n_times, generator=gen, dtype=torch.float64)).values
    return y0.to(device), t.to(device)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 samples x 30 times, 2 rounds")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=str(RESULT))
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    batch, n_times, repeat = (16, 30, 2) if args.quick else (256, 100, 5)

    y0, t = make_problem(batch, n_times, device)

    def batched(f=lorenz63):
        return simsci.odeint(f, y0, t, method="dopri5", rtol=RTOL, atol=ATOL)

    def loop(f=lorenz63):
        return torch.stack(
            [
                torchdiffeq.odeint(f, y0[b], t[b], method="dopri5", rtol=RTOL, atol=ATOL)
                for b in range(batch)
            ]
        )

    with torch.no_grad():
        counted = Counted()
        out_a = batched(counted)
        calls_a = counted.calls
        counted = Counted()
        out_b = loop(counted)
        calls_b = counted.calls
        # Alternate the two sides round by round, so that a change in machine load (a
        # shared CI box) hits both alike; medians over the rounds.
        runs_a, runs_b = [], []
        time_call(batched, repeat=1, warmup=1, device=device)  # warm-up
        for _ in range(repeat):
            runs_a += time_call(batched, repeat=1, warmup=0, device=device).times
            runs_b += time_call(loop, repeat=1, warmup=0, device=device).times
        t_a, t_b = Timing(tuple(runs_a)), Timing(tuple(runs_b))

        # Lorenz-63 is chaotic: both answers carry errors of ~1e-5 relative after t = 2.
        # A much tighter batched solve tells whose error the difference is.
        ref = simsci.odeint(lorenz63, y0, t, method="dopri8", rtol=1e-12, atol=1e-12)
    max_diff = float((out_a - out_b).abs().max())
    err_a = float((out_a - ref).abs().max())
    err_b = float((out_b - ref).abs().max())
    max_scale = float(out_b.abs().max())
    union = int(torch.unique(t).numel())
    ratio = t_b.median / t_a.median
    result = {
        "benchmark": "odeint_grid",
        "claim": "one batched simsci.odeint on per-sample grids is >= 20x faster than a "
        "per-sample torchdiffeq loop",
        "quick": args.quick,
        "problem": {
            "system": "lorenz63",
            "batch": batch,
            "times_per_sample": n_times,
            "t_range": [0.0, 2.0],
            "method": "dopri5",
            "rtol": RTOL,
            "atol": ATOL,
            "dtype": "float64",
        },
        "simsci_batched": {
            **t_a.as_dict(),
            "union_grid_size": union,
            # dopri5: 6 evaluations per step, plus 1 after each sample's start time
            "evaluations": calls_a,
        },
        "torchdiffeq_loop": {
            **t_b.as_dict(),
            "evaluations": calls_b,
            "evaluations_per_sample": calls_b / batch,
        },
        "speedup": ratio,
        "target_speedup": 20.0,
        "meets_target": ratio >= 20.0,
        "max_abs_difference": max_diff,
        "max_abs_error_vs_reference": {"simsci_batched": err_a, "torchdiffeq_loop": err_b},
        "reference": "simsci.odeint dopri8 rtol=atol=1e-12",
        "max_abs_state": max_scale,
    }
    path = write_result(args.out, result, device=device)
    print(
        f"batched simsci.odeint: {t_a.median * 1e3:.1f} ms ({calls_a} evaluations of {batch} rows, "
        f"union grid {union} times)\n"
        f"torchdiffeq loop:      {t_b.median * 1e3:.1f} ms ({calls_b} evaluations of 1 row)\n"
        f"speed-up: {ratio:.1f}x (target 20x)   max |difference| = {max_diff:.3g} "
        f"(max |state| {max_scale:.3g})\nmax |error| vs a dopri8 rtol=1e-12 reference: "
        f"batched {err_a:.3g}, loop {err_b:.3g}\nwrote {path}"
    )
    return result


if __name__ == "__main__":
    main()
