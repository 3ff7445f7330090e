"""Environment throughput: simsci's batched vector environments vs gymnasium's
SyncVectorEnv of the single environment, at 1, 64, 1024 and 4096 sub-environments.

Claim checked: stepping all sub-environments as one tensor operation is fast enough to
train on -- the issue's target is >= 50x SyncVectorEnv at 1024 sub-environments on
the CPU.

For each environment and each N, in the same run: the native vector environment
(``gymnasium.make_vec(id, num_envs=N, vectorization_mode="vector_entry_point")``) and
``gymnasium.make_vec(..., vectorization_mode="sync")`` (N single environments stepped
one after another), both with numpy in/out, next-step autoreset, the same fixed
random actions; float64 states unless the label says float32 (then both sides run in
float32). Each step is timed (median over repeats after warm-up); throughput is
N / median step time in environment steps per second. SyncVectorEnv at large N takes
seconds per step, so it gets fewer repeats (``--sync-repeat``).

Two more figures (issue 27). At N = 1, ``single_step_s``: the median ``step`` of one
environment made by ``gymnasium.make`` and unwrapped (what a user debugging with one
environment pays, without gymnasium's checking wrappers). And ``random_reset``: a
batch of 1024 Burgers sub-environments with ``params="random"``, the median step right
after one sub-environment was reset (``reset_mask``: it draws a new parameter row)
beside the median step without a reset -- the price of new parameter rows.

``--clock cpu`` times with the thread's CPU time instead of the wall clock (CPU only;
everything here runs on the main thread): on a machine shared with other work the wall
clock also counts the time the process waited for a core, the CPU time does not.

Usage: ``python benchmarks/bench_envs.py [--quick] [--device cpu|cuda] [--clock cpu]
[--sizes 1 1024]``. Writes ``benchmarks/results/envs_<device>.json``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import gymnasium
import numpy as np
import torch

import simsci.envs  # noqa: F401  (registers the ids)
from simsci._device import resolve_device
from simsci.bench import time_call, write_result

RESULTS = Path(__file__).resolve().parent / "results"


def env_cases(device: torch.device) -> list[tuple[str, str, dict]]:
    """(label, id, kwargs) of every environment measured."""
    cases = [
        ("ODEControl pendulum-swingup", "simsci/ODEControl-v0", {"task": "pendulum-swingup"}),
        ("ODEControl lorenz63-stabilize", "simsci/ODEControl-v0", {"task": "lorenz63-stabilize"}),
        (
            "ODEControl lotka-volterra-target",
            "simsci/ODEControl-v0",
            {"task": "lotka-volterra-target"},
        ),
        (
            "ODEControl stochastic_lorenz (SDE)",
            "simsci/ODEControl-v0",
            {"task": "lorenz63-stabilize", "system": "stochastic_lorenz"},
        ),
        ("PDEControl burgers-stabilize", "simsci/PDEControl-v0", {"task": "burgers-stabilize"}),
        ("PDEControl heat-track", "simsci/PDEControl-v0", {"task": "heat-track"}),
        ("PDEControl ks-stabilize", "simsci/PDEControl-v0", {"task": "ks-stabilize"}),
        ("Surrogate ControlledODE pendulum", "simsci/Surrogate-v0", {"model": surrogate_model()}),
        # float32 states (and model): half the memory traffic of the compute-bound cases
        (
            "PDEControl burgers-stabilize float32",
            "simsci/PDEControl-v0",
            {"task": "burgers-stabilize", "dtype": "float32"},
        ),
        (
            "PDEControl ks-stabilize float32",
            "simsci/PDEControl-v0",
            {"task": "ks-stabilize", "dtype": "float32"},
        ),
        (
            "Surrogate ControlledODE pendulum float32",
            "simsci/Surrogate-v0",
            {"model": surrogate_model(torch.float32), "dtype": "float32"},
        ),
    ]
    return [(label, env_id, {**kw, "device": str(device)}) for label, env_id, kw in cases]


def surrogate_model(dtype=torch.float64):
    """A ControlledODE of the pendulum task at its default size (weights untrained: the
    cost of a step does not depend on them)."""
    from simsci.models import ControlledODE

    torch.manual_seed(0)
    return ControlledODE(
        state_shape=(2,),
        action_dim=1,
        dt=0.05,
        env_id="simsci/ODEControl-v0",
        env_kwargs={"task": "pendulum-swingup"},
    ).to(dtype)


def _reset_with_action(env, seed: int) -> np.ndarray:
    """Reset ``env`` and draw one seeded action (batch) of its space."""
    env.reset(seed=seed)
    space = env.action_space
    rng = np.random.default_rng(seed)
    return rng.uniform(space.low, space.high, size=space.shape).astype(np.float32)


def step_timer(env, seed: int):
    actions = _reset_with_action(env, seed)

    def step():
        env.step(actions)

    return step


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
_clock = time.perf_counter


def timed(fn, *, repeat: int, warmup: int, device) -> float:
    """Median seconds of ``fn`` over ``repeat`` calls after ``warmup`` on ``--clock``."""
    return time_call(fn, repeat=repeat, warmup=warmup, device=device, clock=_clock).median


def single_timer(env, seed: int):
    """Step one environment; a new episode when one ends (reset not timed)."""
    action = _reset_with_action(env, seed)

    def step():
        if env.step(action)[2:4] != (False, False):
            env.reset()

    return step


def measure(env_id, kwargs, n, device, repeat, sync_repeat, sync_max):
    vec = gymnasium.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point", **kwargs)
    t_vec = timed(step_timer(vec, 0), repeat=repeat, warmup=3, device=device)
    vec.close()
    row = {"num_envs": n, "batched_step_s": t_vec, "batched_steps_per_s": n / t_vec}
    if n == 1:
        one = gymnasium.make(env_id, **kwargs).unwrapped
        row["single_step_s"] = timed(
            single_timer(one, 0), repeat=max(repeat, 200), warmup=20, device=device
        )
        one.close()
    if n <= sync_max:
        t0 = time.perf_counter()
        sync = gymnasium.make_vec(env_id, num_envs=n, vectorization_mode="sync", **kwargs)
        row["sync_build_s"] = round(time.perf_counter() - t0, 2)
        t_sync = timed(step_timer(sync, 0), repeat=sync_repeat, warmup=1, device=device)
        sync.close()
        row.update(
            sync_step_s=t_sync,
            sync_steps_per_s=n / t_sync,
            speedup=t_sync / t_vec,
        )
    return row


def measure_random_reset(device, n: int, repeat: int) -> dict:
    """Burgers with per-episode random parameters: the median step with and without a
    reset of one sub-environment just before it (a new parameter row)."""
    kwargs = {"task": "burgers-stabilize", "params": "random", "device": str(device)}
    vec = gymnasium.make_vec(
        "simsci/PDEControl-v0", num_envs=n, vectorization_mode="vector_entry_point", **kwargs
    )
    vec.reset(seed=0)
    space = vec.action_space
    actions = np.random.default_rng(0).uniform(space.low, space.high, size=space.shape)
    actions = actions.astype(np.float32)
    rng = np.random.default_rng(1)

    def after_reset():
        mask = np.zeros(n, bool)
        mask[rng.integers(n)] = True
        vec.reset(options={"reset_mask": mask})  # untimed: only the step after it
        t0 = _clock()
        vec.step(actions)
        return _clock() - t0

    plain = timed(lambda: vec.step(actions), repeat=repeat, warmup=2, device=device)
    after = float(np.median([after_reset() for _ in range(repeat)]))
    vec.close()
    return {
        "num_envs": n,
        "kwargs": kwargs,
        "step_s": plain,
        "step_after_one_reset_s": after,
        "reset_extra_s": after - plain,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N up to 64 only (smoke)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--sync-repeat", type=int, default=3)
    parser.add_argument("--sync-max", type=int, default=4096, help="largest N run with sync")
    parser.add_argument("--only", default=None, help="substring of the env labels to run")
    parser.add_argument(
        "--random-reset", action="store_true", help="also the random-params reset cost"
    )
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="N to run")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    if args.clock == "cpu" and device.type != "cpu":
        parser.error("--clock cpu times CPU work; a GPU run needs the wall clock")
    global _clock
    _clock = CLOCKS[args.clock]
    sizes = (1, 64) if args.quick else (1, 64, 1024, 4096)
    sizes = tuple(args.sizes) if args.sizes else sizes
    # the 2-core machine is shared: say how busy it was
    result = {
        "sizes": list(sizes),
        "clock": args.clock,
        "envs": {},
        "load_average_start": os.getloadavg(),
    }
    if args.random_reset:
        row = measure_random_reset(device, 64 if args.quick else 1024, 5 if args.quick else 10)
        result["random_reset"] = row
        print(
            f"random params, {row['num_envs']} envs: step {row['step_s'] * 1e3:.1f} ms, "
            f"after one reset {row['step_after_one_reset_s'] * 1e3:.1f} ms",
            flush=True,
        )
    out = args.out or RESULTS / f"envs_{device.type}.json"
    for label, env_id, kwargs in env_cases(device):
        if args.only and args.only not in label:
            continue
        rows = []
        for n in sizes:
            row = measure(env_id, kwargs, n, device, args.repeat, args.sync_repeat, args.sync_max)
            rows.append(row)
            ratio = f"{row['speedup']:7.1f}x" if "speedup" in row else "      -"
            single = f"  single {row['single_step_s'] * 1e3:.3f} ms" if n == 1 else ""
            print(
                f"{label:38s} N={n:5d}  batched {row['batched_steps_per_s']:12.0f} steps/s  "
                f"sync {row.get('sync_steps_per_s', float('nan')):10.0f} steps/s  {ratio}"
                f"{single}",
                flush=True,
            )
        shown = {
            k: (type(v).__name__ if isinstance(v, torch.nn.Module) else v)
            for k, v in kwargs.items()
        }
        result["envs"][label] = {"id": env_id, "kwargs": shown, "rows": rows}
        # written after every environment: a run stopped at a time limit keeps its rows
        write_result(out, result, device=device)
    result["load_average_end"] = os.getloadavg()
    print(f"wrote {write_result(out, result, device=device)}")


if __name__ == "__main__":
    main()
