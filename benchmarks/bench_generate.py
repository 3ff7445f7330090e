"""Data-generation throughput: simsci's batched solve vs a Python loop of scipy solve_ivp.

Claim checked: generating N Lorenz-63 trajectories is one batched solve on the device,
far faster than solving the trajectories one at a time.

simsci: ``System.simulate`` of N trajectories x STEPS steps at dt = 0.01 with RK4 at
step 0.01 (one batched solve), timed alone; and ``simsci.systems.generate`` (initial
states with the documented 5-time-unit burn-in, the solve, and writing the HDF5 file),
timed as a whole, with the burn-in also timed alone. Peer, in the same run:
``scipy.integrate.solve_ivp`` (RK45, rtol 1e-6, atol 1e-8, ``t_eval`` on the same grid) in
a Python loop over a subset of the trajectories; its per-trajectory cost is extrapolated
linearly to N (the loop has no cross-trajectory work, so this is exact up to noise).
Both solvers' errors at t = 1 against a DOP853 reference at rtol 1e-12 are reported so
the speed ratio is read next to the accuracy each delivers.

Usage: ``python benchmarks/bench_generate.py [--quick] [--device cpu|cuda]``. Writes
``benchmarks/results/generate_<device>.json``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from scipy.integrate import solve_ivp

import simsci.systems as systems
from simsci._device import resolve_device
from simsci.bench import time_call, write_result

RESULTS = Path(__file__).resolve().parent / "results"


def lorenz_numpy(t, x, sigma=10.0, rho=28.0, beta=8.0 / 3.0):
    return np.array([sigma * (x[1] - x[0]), x[0] * (rho - x[2]) - x[1], x[0] * x[1] - beta * x[2]])


def scipy_loop(x0: np.ndarray, t: np.ndarray, method="RK45", rtol=1e-6, atol=1e-8) -> np.ndarray:
    out = np.empty((x0.shape[0], t.shape[0], x0.shape[1]))
    for i, start in enumerate(x0):
        sol = solve_ivp(
            lorenz_numpy, (t[0], t[-1]), start, method=method, t_eval=t, rtol=rtol, atol=atol
        )
        if not sol.success:
            raise RuntimeError(f"solve_ivp failed on trajectory {i}: {sol.message}")
        out[i] = sol.y.T
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--repeat", type=int, default=None, help="timed repeats (median)")
    parser.add_argument(
        "--out", default=None, help="JSON path (default: results/generate_<device>.json)"
    )
    args = parser.parse_args()
    device = resolve_device(args.device)

    n, steps, subset = (1000, 200, 20) if args.quick else (10_000, 1000, 100)
    repeat = args.repeat or (3 if args.quick else 3)
    dt = 0.01
    t_end = steps * dt
    lorenz = systems.get("lorenz63")
    x0 = lorenz.sample_initial(n, generator=torch.Generator().manual_seed(0), device=device)
    t = torch.arange(steps + 1, dtype=torch.float64, device=device) * dt

    def simulate():
        with torch.no_grad():
            return lorenz.simulate(x0, t, method="rk4", step_size=dt)

    sim = time_call(simulate, repeat=repeat, warmup=1, device=device)

    def simulate_matched():
        # the peer's method and tolerances, batched: the speed-up at matched accuracy
        with torch.no_grad():
            return lorenz.simulate(x0, t, method="dopri5", rtol=1e-6, atol=1e-8)

    matched = time_call(simulate_matched, repeat=repeat, warmup=1, device=device)
    burn = time_call(
        lambda: lorenz.sample_initial(n, generator=torch.Generator().manual_seed(1), device=device),
        repeat=repeat,
        warmup=1,
        device=device,
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lorenz.h5"

        def generate():
            return systems.generate(
                "lorenz63",
                n,
                t_end=t_end,
                dt=dt,
                method="rk4",
                device=device,
                out=path,
                progress=False,
                seed=0,
            )

        gen = time_call(generate, repeat=repeat, warmup=1, device=device)
        file_mib = path.stat().st_size / 2**20

    x0_np = x0[:subset].cpu().numpy()
    t_np = t.cpu().numpy()
    peer = time_call(lambda: scipy_loop(x0_np, t_np), repeat=repeat, warmup=1)
    peer_per_traj = peer.median / subset
    peer_extrapolated = peer_per_traj * n

    # accuracy at t = 1 (before chaos amplifies differences) against DOP853 rtol 1e-12
    t_acc = np.arange(101) * dt
    ref = scipy_loop(x0_np, t_acc, method="DOP853", rtol=1e-12, atol=1e-12)[:, -1]
    ours = (
        lorenz.simulate(
            x0[:subset], torch.as_tensor(t_acc, device=device), method="rk4", step_size=dt
        )[:, -1]
        .cpu()
        .numpy()
    )
    theirs = scipy_loop(x0_np, t_acc)[:, -1]
    t_acc_torch = torch.as_tensor(t_acc, device=device)
    ours_matched = lorenz.simulate(x0[:subset], t_acc_torch, method="dopri5", rtol=1e-6, atol=1e-8)
    ours_matched = ours_matched[:, -1].cpu().numpy()

    steps_total = n * steps
    result = {
        "benchmark": "generate",
        "system": "lorenz63",
        "quick": args.quick,
        "trajectories": n,
        "steps": steps,
        "dt": dt,
        "simsci": {
            "method": "rk4, step 0.01, one batched solve",
            "simulate": sim.as_dict(),
            "simulate_steps_per_s": steps_total / sim.median,
            "burn_in_sample_initial": burn.as_dict(),
            "generate_total": gen.as_dict(),
            "generate_steps_per_s": steps_total / gen.median,
            "generate_minus_simulate_minus_burn_in_s": gen.median - sim.median - burn.median,
            "file_mib": file_mib,
            "max_abs_error_t1": float(np.abs(ours - ref).max()),
            "matched": {
                "method": "dopri5, rtol 1e-6, atol 1e-8 (the peer's tolerances), one batched solve",
                "simulate": matched.as_dict(),
                "simulate_steps_per_s": steps_total / matched.median,
                "max_abs_error_t1": float(np.abs(ours_matched - ref).max()),
            },
        },
        "peer": {
            "name": "scipy.integrate.solve_ivp RK45 (rtol 1e-6, atol 1e-8) in a Python loop",
            "measured_trajectories": subset,
            "measured": peer.as_dict(),
            "per_trajectory_s": peer_per_traj,
            "extrapolated_s": peer_extrapolated,
            "extrapolation": f"per-trajectory median over {subset} trajectories x {n}",
            "steps_per_s": steps_total / peer_extrapolated,
            "max_abs_error_t1": float(np.abs(theirs - ref).max()),
        },
        "ratio_simulate_vs_peer": peer_extrapolated / sim.median,
        "ratio_generate_vs_peer": peer_extrapolated / gen.median,
        "ratio_matched_simulate_vs_peer": peer_extrapolated / matched.median,
        "accuracy_reference": "DOP853 rtol=atol=1e-12 at t=1 on the measured subset",
    }
    out_path = args.out or RESULTS / f"generate_{device.type}.json"
    out = write_result(out_path, result, device=device)
    print(f"simsci simulate : {sim.median:8.3f} s  {steps_total / sim.median:12.4g} steps/s")
    print(
        f"simsci dopri5   : {matched.median:8.3f} s  {steps_total / matched.median:12.4g} "
        f"steps/s (peer's tolerances; {peer_extrapolated / matched.median:.1f}x the peer)"
    )
    print(f"simsci burn-in  : {burn.median:8.3f} s")
    print(
        f"simsci generate : {gen.median:8.3f} s  {steps_total / gen.median:12.4g} steps/s "
        f"({file_mib:.1f} MiB)"
    )
    print(
        f"scipy loop      : {peer_extrapolated:8.3f} s  (extrapolated from {subset}) "
        f"{steps_total / peer_extrapolated:12.4g} steps/s"
    )
    print(
        f"ratio simulate {result['ratio_simulate_vs_peer']:.1f}x, "
        f"generate {result['ratio_generate_vs_peer']:.1f}x; "
        f"error at t=1: simsci {result['simsci']['max_abs_error_t1']:.2e}, "
        f"scipy {result['peer']['max_abs_error_t1']:.2e}"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - start:.1f} s")
