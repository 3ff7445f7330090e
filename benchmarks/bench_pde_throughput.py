"""PDE data-generation throughput: trajectories/s for Burgers N=1024 and Navier-Stokes
64x64, batched vs one trajectory at a time.

Claim checked: the PDE solvers are batched, so generating many trajectories is one solve
on the device, much faster per trajectory than solving them one by one.

For each problem, ``System.simulate`` with ETDRK4 at the system's default step (the step
``simsci generate`` uses) is timed for batches of B trajectories (warm-up call first,
device synchronised, median of repeats); trajectories/s = B / time. The peer, in the
same run, is the same solver called once per trajectory (B = 1), so the accuracy is
identical and the ratio is the batching gain. The accuracy of what is timed is reported
beside it: the relative L2 difference at the final time to the same solve at half the
step (4th order: the step's own error is about 1/15 of it).

- Burgers: N = 1024 on [0, 1), nu = 0.01 (the system's defaults), GRF initial fields,
  t in [0, 0.1] with 10 frames (at the default step 1e-4: 1,000 ETDRK4 steps).
- Navier-Stokes (the FNO setup, nu = 1e-3, forcing 0.1 (sin + cos)): 64 x 64, t in
  [0, 1] with 10 frames, at the system's default ETDRK4 step (the JSON records it).
  Only when ``navier_stokes_2d`` is registered.

Trajectories/s scale with 1/t_end; trajectory-steps/s do not (both are reported).

Usage: ``python benchmarks/bench_pde_throughput.py [--quick] [--device cpu|cuda]``.
Writes ``benchmarks/results/pde_throughput_<device>.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from simsci import systems
from simsci._device import resolve_device
from simsci.bench import time_call, write_result

RESULTS = Path(__file__).resolve().parent / "results"

CASES = {
    "burgers": {"resolution": 1024, "t_end": 0.1, "frames": 10},
    "navier_stokes_2d": {"resolution": 64, "t_end": 1.0, "frames": 10},
}


def batches_for(device: torch.device, quick: bool) -> dict[str, list[int]]:
    if quick:
        return {"burgers": [1, 8], "navier_stokes_2d": [1, 8]}
    if device.type == "cuda":
        return {"burgers": [1, 64, 512, 2048], "navier_stokes_2d": [1, 64, 256, 1024]}
    return {"burgers": [1, 8, 32, 128, 512], "navier_stokes_2d": [1, 8, 32, 128]}


def run_case(name: str, batches: list[int], device, repeat: int, t_scale: float) -> dict:
    case = CASES[name]
    system = systems.get(name, resolution=case["resolution"])
    dt = float(system.method_dt.get("etdrk4", system.default_dt))
    t_end = case["t_end"] * t_scale
    t = torch.linspace(0.0, t_end, case["frames"] + 1, dtype=torch.float64, device=device)
    steps = round(t_end / dt)
    gen = torch.Generator().manual_seed(0)
    u0_all = system.sample_initial(max(batches), generator=gen, device=device)

    rows = []
    for b in batches:
        u0 = u0_all[:b].contiguous()

        def solve(u0=u0):
            with torch.no_grad():
                return system.simulate(u0, t, method="etdrk4", dt=dt)

        timing = time_call(solve, repeat=repeat, warmup=1, device=device)
        rows.append(
            {
                "batch": b,
                "seconds": timing.as_dict(),
                "trajectories_per_s": b / timing.median,
                "trajectory_steps_per_s": b * steps / timing.median,
            }
        )
        print(
            f"  {name:18s} B={b:5d}: {timing.median:8.3f} s  "
            f"{b / timing.median:10.2f} traj/s  {b * steps / timing.median:12.4g} traj-steps/s",
            flush=True,
        )
    single = next(r for r in rows if r["batch"] == 1)
    for r in rows:
        r["speedup_vs_batch_1"] = r["trajectories_per_s"] / single["trajectories_per_s"]

    # accuracy of the timed solve: against the same solve at half the step
    k = min(4, max(batches))
    with torch.no_grad():
        coarse = system.simulate(u0_all[:k], t, method="etdrk4", dt=dt)[:, -1]
        fine = system.simulate(u0_all[:k], t, method="etdrk4", dt=dt / 2)[:, -1]
    diff = (coarse - fine).flatten(1).norm(dim=1) / fine.flatten(1).norm(dim=1)
    return {
        "system": name,
        "params": dict(system.params),
        "resolution": list(system.resolution),
        "method": "etdrk4",
        "dt": dt,
        "t_end": t_end,
        "steps": steps,
        "frames": case["frames"],
        "dtype": "float64",
        "rows": rows,
        "relative_l2_vs_half_step": float(diff.mean()),
        "peer": "the same solver, one trajectory per call (B = 1)",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs, two batch sizes")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--repeat", type=int, default=None, help="timed calls (median)")
    parser.add_argument(
        "--out", default=None, help="JSON path (default results/pde_throughput_<device>.json)"
    )
    args = parser.parse_args()
    device = resolve_device(args.device)
    repeat = args.repeat or (1 if args.quick else 3)
    plan = batches_for(device, args.quick)
    out = {
        "benchmark": "pde_throughput",
        "claim": "batched PDE solves: trajectories/s for Burgers N=1024 and Navier-Stokes 64x64",
        "quick": args.quick,
        "load_average_before": os.getloadavg(),
        "cases": {},
    }
    for name in CASES:
        if name not in systems.SYSTEMS:
            out["cases"][name] = {"skipped": f"{name} is not registered in simsci.systems"}
            print(f"  {name}: not registered, skipped")
            continue
        out["cases"][name] = run_case(name, plan[name], device, repeat, 0.2 if args.quick else 1)
    out["load_average_after"] = os.getloadavg()
    path = write_result(
        args.out or RESULTS / f"pde_throughput_{device.type}.json", out, device=device
    )
    print("\ncase                 batch   traj/s   vs B=1   (error vs half step)")
    for name, case in out["cases"].items():
        for r in case.get("rows", []):
            print(
                f"{name:20s} {r['batch']:5d} {r['trajectories_per_s']:8.2f} "
                f"{r['speedup_vs_batch_1']:7.2f}x  ({case['relative_l2_vs_half_step']:.1e})"
            )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    start = time.perf_counter()
    code = main()
    print(f"total {time.perf_counter() - start:.1f} s")
    sys.exit(code)
