"""Driving environment throughput: simsci/Driving-v0 (single and batched) against
highway-env's ``highway-fast-v0``, in the same run.

Claim checked: the batched driving environment steps >= 100x as many environment steps
per second as highway-fast-v0 at 1024 egos (CPU, one torch thread, numpy in/out).

What is compared, and what one step is:

- **ours**: ``gymnasium.make("simsci/Driving-v0")`` (one ego) and
  ``gymnasium.make_vec("simsci/Driving-v0", num_envs=N,
  vectorization_mode="vector_entry_point")`` for N in 1, 64, 1024, default settings:
  the ``Dict`` observation (ego features, 16 nearest agents, 8 nearest lanes of 20
  points), traffic density 20 vehicles/km/lane, 32 vehicle slots per ego, 4 road
  networks of 5 km. One step advances **0.1 s** of simulated time (10 Hz); every
  sub-environment carries its own IDM/MOBIL traffic (about 15-20 vehicles in a 150 m
  window around its ego).
- **peer**: ``gymnasium.make("highway-fast-v0")``, its default config (recorded in the
  JSON): Kinematics observation, DiscreteMetaAction, 3 lanes, 20 vehicles. One step
  advances ``1 / policy_frequency`` s (1 s by default) in ``simulation_frequency /
  policy_frequency`` sub-steps (5).

Both sides are stepped with the same kind of actions: ``random`` (ours uniform in the
action box, the peer uniform over its 5 meta-actions; fixed seeds, drawn in advance) or
a fixed action (ours ``[0, 0]``: hold speed, wheels straight; the peer ``IDLE``), with
a reset whenever an episode ends (ours: the vector env's next-step autoreset; the
single envs: ``reset()`` inside the timed block), so resets are paid at the rate each
side's episodes end. A timed block is ``--block`` steps (about a second); reported:
the median block over ``--repeat`` blocks after warm-up, as seconds per step,
environment steps per second (egos x steps / s) and simulated seconds per second
(egos x dt x steps / s), and both ratios ours / peer. Simulated-seconds is the fair
physics comparison (the peer's step covers 10x our simulated time); env-steps is what
an RL learner sees.

``--clock cpu`` times blocks on this thread's CPU time (``time.thread_time``) instead of
wall time, for a shared machine whose load inflates wall time; both sides run in one
thread, so the comparison stays fair (recorded as ``clock`` in the JSON).

Usage: ``python benchmarks/bench_driving_env.py [--quick] [--clock cpu] [--out PATH]``. Writes
``benchmarks/results/driving_env_cpu.json`` (``--out``: a JSON path, or a folder to
write ``driving_env_cpu.json`` in). highway-env is optional (``pip install
"simsci[compare]"``); without it the peer is recorded as unavailable.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import time
from pathlib import Path

import gymnasium
import numpy as np
import torch

import simsci.envs  # noqa: F401  (registers the ids)
from simsci import driving
from simsci.bench import code_version, out_path, time_call, write_result

RESULTS = Path(__file__).resolve().parent / "results"
OUR_ID = "simsci/Driving-v0"
PEER_ID = "highway-fast-v0"
OUR_DT = driving.DT  # seconds of simulated time per step (10 Hz)
TARGET = 100.0
ACTION_POOL = 64  # pre-drawn action batches, cycled (keeps the RNG out of the timing)
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
CLOCK = {"clock": time.perf_counter}  # set by --clock


def _row(kind, n, action, phase, warm, timing, block, dt, episodes, steps, extra=None):
    step_s = timing.median / block
    return {
        "kind": kind,
        "num_envs": n,
        "action": action,
        "phase": phase,
        "warmup_steps": warm,
        "block_steps": block,
        "step_s": step_s,
        "ms_per_step": 1e3 * step_s,
        "env_steps_per_s": n / step_s,
        "sim_seconds_per_s": n * dt / step_s,
        "episodes_per_1000_env_steps": 1000.0 * episodes / max(steps, 1),
        "block_times_s": list(timing.times),
        **(extra or {}),
    }


def _warm_up(run, block: int, steps: int, count: dict) -> None:
    """Run ``steps`` untimed steps (whole blocks), then zero the episode counters so the
    reported episode-end rate is that of the timed blocks."""
    for _ in range(max(1, -(-steps // block))):
        run()
    count["episodes"] = count["steps"] = 0
    if "vehicles" in count:
        count["vehicles"].clear()


# ----------------------------------------------------------------------------- ours
def ours_single(action: str, phase: str, repeat: int, block: int, warm: int) -> dict:
    env = gymnasium.make(OUR_ID)
    env.reset(seed=0)
    space = env.action_space
    rng = np.random.default_rng(0)
    if action == "random":
        pool = rng.uniform(space.low, space.high, (ACTION_POOL, 2)).astype(np.float32)
    else:
        pool = np.zeros((ACTION_POOL, 2), dtype=np.float32)
    count = {"i": 0, "episodes": 0, "steps": 0}

    def run():
        for _ in range(block):
            a = pool[count["i"] % ACTION_POOL]
            count["i"] += 1
            _, _, term, trunc, _ = env.step(a)
            count["steps"] += 1
            if term or trunc:
                count["episodes"] += 1
                env.reset()

    _warm_up(run, block, warm, count)
    timing = time_call(run, repeat=repeat, warmup=0, clock=CLOCK["clock"])
    env.close()
    return _row(
        "single", 1, action, phase, warm, timing, block, OUR_DT, count["episodes"], count["steps"]
    )


def ours_batched(n: int, action: str, phase: str, repeat: int, block: int, warm: int) -> dict:
    env = gymnasium.make_vec(OUR_ID, num_envs=n, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    space = env.single_action_space
    rng = np.random.default_rng(0)
    if action == "random":
        pool = rng.uniform(space.low, space.high, (ACTION_POOL, n, 2)).astype(np.float32)
    else:
        pool = np.zeros((ACTION_POOL, n, 2), dtype=np.float32)
    count = {"i": 0, "episodes": 0, "steps": 0, "vehicles": []}
    traffic = env.unwrapped.world.traffic

    def run():
        for _ in range(block):
            _, _, term, trunc, _ = env.step(pool[count["i"] % ACTION_POOL])
            count["i"] += 1
            count["episodes"] += int(np.count_nonzero(term | trunc))
            count["steps"] += n
        count["vehicles"].append(float(traffic.state.valid.sum(1).float().mean()))

    _warm_up(run, block, warm, count)
    timing = time_call(run, repeat=repeat, warmup=0, clock=CLOCK["clock"])
    env.close()
    extra = {"vehicles_per_ego_mean": float(np.mean(count["vehicles"]))}
    return _row(
        "batched", n, action, phase, warm, timing, block, OUR_DT, count["episodes"],
        count["steps"], extra,
    )  # fmt: skip


def reset_cost(n: int, counts, repeat: int = 3) -> dict:
    """Seconds of ``Traffic.reset(index)`` for ``k`` of ``n`` scenes (what the vector
    env's autoreset pays), against one ``Traffic.step`` of all ``n``: the env's own 4
    road networks, external ego, 32 slots (the env's defaults)."""
    from simsci import driving

    roads = [driving.make_road(seed=i, length=5000.0) for i in range(4)]
    tr = driving.Traffic(roads, n, ego="external")
    tr.reset()
    action = torch.zeros(n, 2)
    step = time_call(lambda: tr.step(action), repeat=repeat, warmup=1, clock=CLOCK["clock"]).median
    out = {"num_scenes": n, "step_s": step, "reset_s": {}}
    for k in counts:
        idx = torch.arange(k)
        out["reset_s"][str(k)] = time_call(
            lambda i=idx: tr.reset(i), repeat=repeat, warmup=1, clock=CLOCK["clock"]
        ).median
    print(
        f"Traffic({n}) step {1e3 * step:.0f} ms; reset(index of k): "
        + ", ".join(f"k={k} {1e3 * t:.0f} ms" for k, t in out["reset_s"].items()),
        flush=True,
    )
    return out


# ----------------------------------------------------------------------------- peer
def peer_available() -> tuple[bool, str]:
    try:
        import highway_env  # noqa: F401
    except Exception as exc:  # ImportError, or a broken optional install
        return False, f"{type(exc).__name__}: {exc}"
    return True, importlib.metadata.version("highway-env")


def peer_config() -> dict:
    env = gymnasium.make(PEER_ID)
    cfg = json.loads(json.dumps(env.unwrapped.config, default=str))
    env.close()
    return cfg


def peer_run(action: str, repeat: int, block: int, warm: int, dt: float) -> dict:
    env = gymnasium.make(PEER_ID)
    env.reset(seed=0)
    n_actions = int(env.action_space.n)
    idle = 1  # DiscreteMetaAction: 0 LANE_LEFT, 1 IDLE, 2 LANE_RIGHT, 3 FASTER, 4 SLOWER
    rng = np.random.default_rng(0)
    if action == "random":
        pool = rng.integers(0, n_actions, ACTION_POOL)
    else:
        pool = np.full(ACTION_POOL, idle)
    count = {"i": 0, "episodes": 0, "steps": 0, "vehicles": []}

    def run():
        for _ in range(block):
            _, _, term, trunc, _ = env.step(int(pool[count["i"] % ACTION_POOL]))
            count["i"] += 1
            count["steps"] += 1
            if term or trunc:
                count["episodes"] += 1
                count["vehicles"].append(len(env.unwrapped.road.vehicles))
                env.reset()

    _warm_up(run, block, warm, count)
    timing = time_call(run, repeat=repeat, warmup=0, clock=CLOCK["clock"])
    env.close()
    extra = {"vehicles_at_episode_end_mean": float(np.mean(count["vehicles"] or [np.nan]))}
    return _row(
        "single", 1, action, "steady", warm, timing, block, dt, count["episodes"],
        count["steps"], extra,
    )  # fmt: skip


# ----------------------------------------------------------------------------- main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N in (1, 64), tiny repeats")
    parser.add_argument("--repeat", type=int, default=None, help="timed blocks (default 7)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--actions", default="random,fixed", help="comma-separated")
    parser.add_argument(
        "--steady-warmup",
        type=int,
        default=300,
        help="untimed steps before the steady fixed-action blocks (episodes end after ~150)",
    )
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="wall (default) or cpu time"
    )
    parser.add_argument("--out", default=None, help="JSON path or folder")
    args = parser.parse_args()
    CLOCK["clock"] = CLOCKS[args.clock]
    torch.set_num_threads(args.threads)
    quick = args.quick
    repeat = args.repeat or (2 if quick else 7)
    sizes = (1, 64) if quick else (1, 64, 1024)
    # steps per timed block (about a second each at full size)
    block_ours = {1: 5, 64: 3} if quick else {1: 60, 64: 30, 1024: 5}
    block_single = 5 if quick else 60
    block_peer = 5 if quick else 30
    actions = [a for a in args.actions.split(",") if a]
    for a in actions:
        if a not in ("random", "fixed"):
            raise ValueError(f"--actions takes 'random' and/or 'fixed', got {a!r}")
    # (action, phase, untimed warm-up steps): random actions end episodes every ~10
    # steps, so 20 steps reach the steady rate of resets; the fixed action's episodes
    # end after ~150 steps (collision), so "fresh" (right after reset, almost no
    # resets: the cost of stepping) and "steady" (after --steady-warmup steps)
    plan = []
    for a in actions:
        if a == "random":
            plan.append((a, "steady", 3 if quick else 20))
        else:
            plan.append((a, "fresh", 0))
            if not quick:
                plan.append((a, "steady", args.steady_warmup))

    ok, peer_version = peer_available()
    result: dict = {
        "benchmark": "driving_env",
        "claim": f">= {TARGET:g}x highway-fast-v0's env steps/s at 1024 egos (CPU, 1 thread)",
        "quick": quick,
        "clock": args.clock,
        "load_average_before": os.getloadavg(),
        "code": code_version("simsci/driving", "envs"),
        "ours": {
            "id": OUR_ID,
            "dt_s": OUR_DT,
            "config": "defaults: Dict observation (ego 8, agents 16x7, lanes 8x20x2), "
            "density 20 veh/km/lane, max_vehicles 32, num_roads 4, route_length 5000 m, "
            "numpy in/out, NextStep autoreset",
            "actions": {
                "random": "uniform in Box([-8, -0.5], [4, 0.5]), seed 0",
                "fixed": "[0, 0] (hold speed, wheels straight)",
            },
            "rows": [],
        },  # fmt: skip
        "peer": {"id": PEER_ID, "available": ok},
    }
    if ok:
        cfg = peer_config()
        peer_dt = 1.0 / float(cfg["policy_frequency"])
        result["peer"].update(
            version=peer_version,
            dt_s=peer_dt,
            substeps=float(cfg["simulation_frequency"]) / float(cfg["policy_frequency"]),
            actions={"random": "uniform over the 5 meta-actions, seed 0", "fixed": "IDLE (1)"},
            config=cfg,
            rows=[],
        )
    else:
        result["peer"]["reason"] = peer_version
        print(f"highway-env unavailable ({peer_version}); reporting ours only", flush=True)

    def show(label, row):
        print(
            f"{label:4s} {row['kind']:7s} N={row['num_envs']:5d} {row['action']:6s} "
            f"{row['phase']:6s} {row['ms_per_step']:9.2f} ms/step "
            f"{row['env_steps_per_s']:10.0f} env-steps/s {row['sim_seconds_per_s']:9.1f} sim-s/s "
            f"episodes/1000 steps {row['episodes_per_1000_env_steps']:.1f}",
            flush=True,
        )

    # the peer is timed before and after ours (the machine is shared: its speed drifts);
    # the ratios use the faster of the two, which is conservative for ours
    for action in actions:
        if ok:
            row = peer_run(action, repeat, block_peer, block_peer, peer_dt)
            result["peer"]["rows"].append({**row, "when": "before"})
            show("peer", row)
        for a, phase, warm in plan:
            if a != action:
                continue
            row = ours_single(action, phase, repeat, block_single, warm)
            result["ours"]["rows"].append(row)
            show("ours", row)
            for n in sizes:
                row = ours_batched(n, action, phase, repeat, block_ours[n], warm)
                result["ours"]["rows"].append(row)
                show("ours", row)
        if ok:
            row = peer_run(action, repeat, block_peer, block_peer, peer_dt)
            result["peer"]["rows"].append({**row, "when": "after"})
            show("peer", row)
    if not quick:
        result["reset_cost"] = reset_cost(1024, (1, 16, 128))

    ratios = []
    if ok:
        peers = {}
        for r in result["peer"]["rows"]:
            best = peers.get(r["action"])
            if best is None or r["step_s"] < best["step_s"]:
                peers[r["action"]] = r
        result["peer"]["used_for_ratios"] = {a: r["when"] for a, r in peers.items()}
        for r in result["ours"]["rows"]:
            p = peers[r["action"]]
            ratios.append(
                {
                    "kind": r["kind"],
                    "num_envs": r["num_envs"],
                    "action": r["action"],
                    "phase": r["phase"],
                    "env_steps_ratio": r["env_steps_per_s"] / p["env_steps_per_s"],
                    "sim_seconds_ratio": r["sim_seconds_per_s"] / p["sim_seconds_per_s"],
                }
            )
        for q in ratios:
            print(
                f"ours/peer {q['kind']:7s} N={q['num_envs']:5d} {q['action']:6s} {q['phase']:6s} "
                f"env-steps {q['env_steps_ratio']:8.1f}x  "
                f"sim-seconds {q['sim_seconds_ratio']:7.2f}x",
                flush=True,
            )
        at = [q for q in ratios if q["kind"] == "batched" and q["num_envs"] == max(sizes)]
        result["target"] = {
            "ratio": TARGET,
            "num_envs": max(sizes),
            "met_env_steps": {
                f"{q['action']} {q['phase']}": q["env_steps_ratio"] >= TARGET for q in at
            },
            "met_sim_seconds": {
                f"{q['action']} {q['phase']}": q["sim_seconds_ratio"] >= TARGET for q in at
            },
        }
    result["ratios"] = ratios
    out = out_path(args.out, "driving_env_cpu.json", RESULTS)
    print(f"wrote {write_result(out, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
