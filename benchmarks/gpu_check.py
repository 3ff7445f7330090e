"""CUDA figures for `make gpu-check` (after the device tests have run on CUDA).

Runs the benchmarks that have a CUDA side on the GPU and short latent-ODE, CoCLD, GFG and
Neural Hawkes trainings on both CPU and CUDA, and prints one table. Results go to
benchmarks/results/*_cuda.json, and this table to benchmarks/results/gpu_check_cuda.json.
Each row is printed as soon as it is measured, and a benchmark script that runs past
``--script-timeout`` seconds is stopped and reported, so a short lease still returns every
other figure. Exits non-zero when any part fails; stops with a clear message when there is
no GPU.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def latent_ode_steps_per_second(device: str, steps: int = 60) -> float:
    """Training steps/s of the tour's latent ODE on a small irregular Lorenz set."""
    from simsci import data, models, systems
    from simsci._device import synchronize

    with tempfile.TemporaryDirectory() as tmp:
        path = systems.generate(
            "lorenz63",
            256,
            t_end=4.0,
            dt=0.02,
            keep=0.5,
            out=Path(tmp) / "l.h5",
            device=device,
            progress=False,
        )
        ds = data.TrajectoryDataset(path, fields=("t", "x"), window=24, stride=12)
        model = models.LatentODE.from_data(data.open(path), window=24).to(device)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=64, shuffle=True, collate_fn=model.collate, drop_last=True
        )
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        batches = [
            {k: v.to(device) if torch.is_tensor(v) else v for k, v in b.items()} for b in loader
        ]
        done, start = 0, None
        while done < steps + 5:
            for batch in batches:
                if done == 5:  # warm-up steps are not timed
                    synchronize(device)
                    start = time.perf_counter()
                loss = model.training_step(batch)["loss"]
                opt.zero_grad()
                loss.backward()
                opt.step()
                done += 1
                if done == steps + 5:
                    break
        synchronize(device)
        return steps / (time.perf_counter() - start)


def event_model_events_per_second(name: str, device: str, steps: int = 20) -> float:
    """Training events/s of an event model (cocld, nhp) on a population-coupled set."""
    from simsci import data, datasets, models
    from simsci._device import synchronize
    from simsci.cli._train import make_dataset

    with tempfile.TemporaryDirectory() as tmp:
        path = datasets.make_dataset("population_events", 128, out=Path(tmp) / "p.h5", seed=0)
        traj = data.open(path)
        model = models.MODELS[name].from_data(traj).to(device)
        ds = make_dataset(traj, model.data_fields)  # the model's fields the file has
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        batches = [model.collate([ds[i] for i in range(a, a + 32)]) for a in range(0, 96, 32)]
        batches = [
            {k: v.to(device) if torch.is_tensor(v) else v for k, v in b.items()} for b in batches
        ]
        events, start = 0, None
        for step in range(steps + 3):
            if step == 3:  # warm-up steps are not timed
                synchronize(device)
                start = time.perf_counter()
            batch = batches[step % len(batches)]
            loss = model.training_step(batch)["loss"]
            opt.zero_grad()
            loss.backward()
            opt.step()
            events += int(batch["valid"].sum()) if step >= 3 else 0
        synchronize(device)
        return events / (time.perf_counter() - start)


def gfg_steps_per_second(variant: str, device: str, steps: int = 30) -> float:
    """Training steps/s of GFG (variant tangent) or the plain neural ODE (ambient) on a
    lifted circle in R^64, then one grounded rollout (checks the rollout runs there)."""
    from simsci import data, datasets
    from simsci._device import synchronize
    from simsci.models.gfg import GFG, episode_arrays

    with tempfile.TemporaryDirectory() as tmp:
        path = datasets.make_dataset("lifted_circle", 10, out=Path(tmp) / "c.h5", seed=0)
        traj = data.open(path)
        model = GFG.from_data(traj, variant=variant).to(device)
        items = [
            {"t": torch.as_tensor(e["t"]), "x": torch.as_tensor(e["x"]).float()}
            for e in episode_arrays(traj, "train")
        ]
        batch = {k: v.to(device) for k, v in model.collate(items).items()}
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        start = None
        for step in range(steps + 3):
            if step == 3:
                synchronize(device)
                start = time.perf_counter()
            opt.zero_grad()
            model.training_step(batch)["loss"].backward()
            opt.step()
        synchronize(device)
        rate = steps / (time.perf_counter() - start)
        with torch.no_grad():
            x0 = batch["x"][:4]
            path = model.rollout(x0, torch.linspace(0, 1, 11, device=device))
        if not bool(torch.isfinite(path).all()):
            raise FloatingPointError("the rollout produced non-finite states")
        return rate


def driving_env_steps_per_second(device: str, num_envs: int = 4096, steps: int = 20) -> float:
    """simsci/Driving-v0 egos stepped per second on ``device`` (torch in/out, lane keeping)."""
    from simsci.envs import DrivingVectorEnv

    env = DrivingVectorEnv(num_envs, device=device, array_backend="torch")
    return _lane_keeping_steps_per_second(env, device, num_envs, steps)


def _lane_keeping_steps_per_second(env, device: str, num_envs: int, steps: int) -> float:
    from simsci.envs import lane_keeping_policy

    obs, _ = env.reset(seed=0)

    def act(o):
        host = {k: v.cpu().numpy() for k, v in o.items()}
        return torch.as_tensor(lane_keeping_policy(host), device=device)

    for _ in range(3):
        obs = env.step(act(obs))[0]
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        obs = env.step(act(obs))[0]
    if device == "cuda":
        torch.cuda.synchronize()
    return num_envs * steps / (time.perf_counter() - start)


def vectorworld_env_steps_per_second(device: str, num_envs: int = 64, steps: int = 20) -> float:
    """simsci/VectorWorld-v1 egos stepped per second on ``device`` (the small on-the-fly
    model: tiles outpainted, ΔSim NPCs and the observation all on the device)."""
    from simsci.envs import VectorWorldVectorEnv

    env = VectorWorldVectorEnv(num_envs, device=device, array_backend="torch")
    return _lane_keeping_steps_per_second(env, device, num_envs, steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--script-timeout",
        type=float,
        default=60.0,
        help="seconds one benchmark script may run before it is stopped (reported as failed)",
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu-check: torch sees no CUDA device", file=sys.stderr)
        return 1
    gpu = torch.cuda.get_device_name()
    print(f"GPU: {gpu}  torch {torch.__version__}", flush=True)
    rows, failed = [], []

    def report(label: str, status: str, figure: str) -> None:
        rows.append((label, status, figure))
        print(f"{label:36s} {status:12s} {figure}", flush=True)

    for script, extra in (
        # quick sizes where a script has them: on an H200 (2026-12-04) the full
        # bench_generate, bench_odeint_grid, bench_dno --quick and the two-system zoo each
        # ran past 45 s, and the whole check took 8.2 min against its 5 min target; with
        # quick sizes (second run) bench_envs and the zoo still ran past 60 s
        ("bench_generate.py", ["--quick", "--device", "cuda"]),
        (
            "bench_odeint_grid.py",
            [
                "--quick",
                "--device",
                "cuda",
                "--out",
                str(HERE / "results" / "odeint_grid_cuda.json"),
            ],
        ),
        ("bench_pde_throughput.py", ["--device", "cuda"]),
        # every environment batched on CUDA at 1, 64 and 4096; SyncVectorEnv at N = 1 only
        # (at 64 it steps 64 single envs at ~3-30 ms each: the script ran past 60 s)
        (
            "bench_envs.py",
            [
                "--device",
                "cuda",
                "--sizes",
                "1",
                "64",
                "4096",
                "--sync-max",
                "1",
                "--repeat",
                "5",
                "--sync-repeat",
                "1",
            ],
        ),
        # ∂-NO vs FNO on Burgers (one seed, few steps) and the surrogate vs ETDRK4
        ("bench_dno.py", ["--quick", "--device", "cuda", "--only", "burgers:fno"]),
        # SDEVI's three variants vs the torchsde latent SDE, one training step each
        ("bench_sdevi_speed.py", ["--quick", "--device", "cuda"]),
        # DynaDiff's zoo: experts per minute, vmapped vs one at a time, on CUDA
        (
            "bench_dynadiff_zoo.py",
            [
                "--device",
                "cuda",
                "--part",
                "throughput",  # the quality part trains five systems' zoos: minutes
                "--systems",
                "lotka_volterra",
                "--steps",
                "20",  # one at a time on CUDA: 58 experts/min at 50 steps (2026-12-04)
                "--repeats",
                "1",
            ],
        ),
    ):
        start = time.perf_counter()
        try:
            code = subprocess.call(
                [sys.executable, str(HERE / script), *extra], timeout=args.script_timeout
            )
            status = "ok" if code == 0 else f"FAILED ({code})"
        except subprocess.TimeoutExpired:
            code, status = -1, f"TIMED OUT ({args.script_timeout:.0f} s)"
        report(script, status, f"{time.perf_counter() - start:.0f} s")
        if code:
            failed.append(script)
    for device in ("cpu", "cuda"):
        try:
            rate = latent_ode_steps_per_second(device)
            report(f"latent ODE training on {device}", "ok", f"{rate:.1f} steps/s")
        except Exception as exc:  # report every part, then fail at the end
            report(f"latent ODE training on {device}", f"FAILED: {exc}", "")
            failed.append(device)
        for name in ("cocld", "nhp"):
            label = f"{name} training on {device}"
            try:
                rate = event_model_events_per_second(name, device)
                report(label, "ok", f"{rate:.0f} events/s")
            except Exception as exc:
                report(label, f"FAILED: {exc}", "")
                failed.append(label)
        for variant in ("tangent", "ambient"):
            label = f"gfg {variant} training on {device}"
            try:
                rate = gfg_steps_per_second(variant, device)
                report(label, "ok", f"{rate:.1f} steps/s")
            except Exception as exc:
                report(label, f"FAILED: {exc}", "")
                failed.append(label)
        for name, rate_of in (
            ("Driving-v0 x4096", driving_env_steps_per_second),
            ("VectorWorld-v1 x64", vectorworld_env_steps_per_second),
        ):
            label = f"{name} on {device}"
            try:
                rate = rate_of(device)
                report(label, "ok", f"{rate:.0f} env-steps/s")
            except Exception as exc:
                report(label, f"FAILED: {exc}", "")
                failed.append(label)
    out = HERE / "results" / "gpu_check_cuda.json"
    payload = {
        "gpu": gpu,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "rows": [{"part": a, "status": b, "figure": c} for a, b, c in rows],
        "failed": failed,
    }
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\n{len(rows) - len(failed)} of {len(rows)} parts ok; table in {out}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
