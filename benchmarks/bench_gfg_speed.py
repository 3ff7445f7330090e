"""GFG's cost per field evaluation and per training step against the plain neural ODE's
(issue 27), with the tangent velocity by the hand-written MLP JVP (``mlp_jvp``, the
model's path) and by ``torch.func.jvp`` (the path before issue 27), same process.

Models as in the forecast benchmark: D = 64, latent 3, width 128, 2 hidden layers; a
field evaluation of 256 states (no grad) and a full training step (loss with
reconstruction and the restoring term, backward) on 256 points. The six timings are
interleaved in rounds (``--rounds``, the first 5 dropped), so machine load falls on all
of them alike; medians and the ratios of medians are reported, with the load average.
Target (issue 27): the GFG field <= 3x the plain field per evaluation.

Usage: ``python benchmarks/bench_gfg_speed.py [--rounds 60] [--quick] [--out PATH]``; writes
benchmarks/results/gfg_speed_cpu.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from _runner import RESULTS, quick, write


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--quick", action="store_true", help="10 rounds")
    parser.add_argument("--out", default=str(RESULTS / "gfg_speed_cpu.json"))
    args = parser.parse_args()
    quick(args, rounds=10)
    torch.set_num_threads(1)
    from torch.func import jvp

    import simsci.models.gfg._model as model_module
    from simsci.models.gfg import GFG

    torch.manual_seed(0)
    D = 64
    gfg = GFG(D, latent_dim=3, hidden_dim=128, depth=2)
    plain = GFG(D, latent_dim=3, hidden_dim=128, depth=2, variant="ambient")
    x = torch.randn(256, D)
    batch = {"x": torch.randn(256, D), "v": torch.randn(256, D)}
    hand = model_module.tangent_velocity

    def functorch(decoder, z, w):
        return jvp(decoder, (z,), (w,))[1]

    def field(model, path):
        def call():
            model_module.tangent_velocity = path
            with torch.no_grad():
                model.field_n(x)

        return call

    def step(model, path):
        def call():
            model_module.tangent_velocity = path
            model.zero_grad()
            model.training_step(batch)["loss"].backward()

        return call

    calls = {
        "field_plain": field(plain, hand),
        "field_gfg": field(gfg, hand),
        "field_gfg_functorch": field(gfg, functorch),
        "step_plain": step(plain, hand),
        "step_gfg": step(gfg, hand),
        "step_gfg_functorch": step(gfg, functorch),
    }
    times: dict[str, list[float]] = {k: [] for k in calls}
    try:
        for _ in range(args.rounds):
            for name, call in calls.items():
                start = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - start)
    finally:
        model_module.tangent_velocity = hand
    med = {k: statistics.median(v[5:]) for k, v in times.items()}
    summary = {
        "median_ms": {k: 1e3 * v for k, v in med.items()},
        "field_ratio": med["field_gfg"] / med["field_plain"],
        "field_ratio_functorch": med["field_gfg_functorch"] / med["field_plain"],
        "step_ratio": med["step_gfg"] / med["step_plain"],
        "step_ratio_functorch": med["step_gfg_functorch"] / med["step_plain"],
        "target_field_le_3x_met": med["field_gfg"] / med["field_plain"] <= 3,
        "load_average": os.getloadavg()[0],
    }
    result = {
        "benchmark": "gfg_speed",
        "peer": "the plain neural ODE (variant ambient, restore=0) of the same harness",
        "config": {"rounds": args.rounds, "state_dim": D, "latent_dim": 3, "width": 128},
        "summary": summary,
    }
    write(args.out, result, echo=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
