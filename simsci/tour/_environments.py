"""Batched environments and a learned surrogate loaded back as an environment.

6. step 1024 pendulum environments as one batch vs gymnasium's SyncVectorEnv;
7. record 64 random-action episodes into OUT/pendulum_rollouts.h5 (kind "rollout");
8. fit a ControlledODE surrogate to them (checkpoint in OUT/surrogate/);
9. load it as simsci/Surrogate-v0 and compare open-loop rollouts with the truth.
"""

from __future__ import annotations

import time

import numpy as np

from simsci.tour._common import Context, banner

TASK = "pendulum-swingup"


def run(ctx: Context) -> dict:
    """Step many pendulum environments as one tensor operation (vs gymnasium's
    SyncVectorEnv), record random-action episodes, fit a ControlledODE to them, and
    load it as simsci/Surrogate-v0."""
    rng = np.random.default_rng(ctx.seed)
    rates = _step_rates(ctx, rng)
    path = _record(ctx, rng)
    checkpoint = _fit(ctx, path)
    errors = _compare(ctx, checkpoint, rng)
    return {**rates, "rollouts": str(path), "surrogate_checkpoint": checkpoint, **errors}


def _step_rates(ctx: Context, rng) -> dict:
    import gymnasium

    from simsci.envs import ODEControlVectorEnv

    banner("6. step pendulum environments: batched vs gymnasium's SyncVectorEnv")
    n_batched, n_sync = (64, 8) if ctx.quick else (1024, 64)

    def steps_per_second(env, n, steps):
        env.reset(seed=ctx.seed)
        actions = rng.uniform(-4, 4, size=(n, 1)).astype(np.float32)
        env.step(actions)
        start = time.perf_counter()
        for _ in range(steps):
            env.step(actions)
        return n * steps / (time.perf_counter() - start)

    batched = ODEControlVectorEnv(n_batched, TASK, device=ctx.device)
    sync = gymnasium.make_vec(
        "simsci/ODEControl-v0", num_envs=n_sync, vectorization_mode="sync", task=TASK
    )
    fast = steps_per_second(batched, n_batched, 5 if ctx.quick else 20)
    slow = steps_per_second(sync, n_sync, 2 if ctx.quick else 5)
    print(
        f"batched ({n_batched} envs): {fast:,.0f} env-steps/s;  SyncVectorEnv ({n_sync} envs): "
        f"{slow:,.0f} env-steps/s;  {fast / slow:.0f}x"
    )
    return {"batched_steps_per_s": fast, "sync_steps_per_s": slow, "speedup": fast / slow}


def _record(ctx: Context, rng):
    from simsci import data
    from simsci.envs import ODEControlVectorEnv, RecordVectorEpisodes

    banner("7. record random-action episodes into the trajectory format")
    episodes, length = (16, 20) if ctx.quick else (64, 40)
    path = ctx.out / "pendulum_rollouts.h5"
    recorder = RecordVectorEpisodes(
        ODEControlVectorEnv(16, TASK, max_episode_steps=length, device=ctx.device), path
    )
    recorder.reset(seed=ctx.seed + 1)
    while recorder.recorded < episodes:
        recorder.step(rng.uniform(-4, 4, size=(16, 1)).astype(np.float32))
    recorder.close()
    traj = data.open(path)
    print(f"{path}: {len(traj.lengths)} episodes of {length} actions (kind {traj.kind!r})")
    return path


def _fit(ctx: Context, path) -> str:
    from simsci import data, train
    from simsci.models import ControlledODE

    banner("8. fit a ControlledODE surrogate (dx/dt = f(x, u)) to the rollouts")
    traj = data.open(path)
    model = ControlledODE.from_data(traj, hidden_dim=64, depth=2)
    config = train.TrainConfig(
        max_steps=40 if ctx.quick else 500, epochs=10_000, batch_size=16, lr=3e-3,
        schedule="cosine", progress=False, device=str(ctx.device), seed=ctx.seed,
    )  # fmt: skip
    dataset = data.TrajectoryDataset(traj, fields=("t", "state", "action"))
    summary = train.Trainer(
        model, config, dataset, None, out_dir=ctx.fresh("surrogate"), collate_fn=model.collate
    ).fit()
    checkpoint = summary["paths"]["last_checkpoint"]
    print(f"checkpoint: {checkpoint}")
    return checkpoint


def _compare(ctx: Context, checkpoint: str, rng) -> dict:
    import gymnasium

    from simsci.envs import ODEControlEnv

    banner("9. the surrogate as an environment: open-loop rollouts against the truth")
    true_env = ODEControlEnv(TASK)
    sur_env = gymnasium.make("simsci/Surrogate-v0", checkpoint=checkpoint)
    horizon = 10 if ctx.quick else 20
    errors, baseline = [], []
    for i in range(8):
        o_true, _ = true_env.reset(seed=ctx.seed + 100 + i)
        o_sur, _ = sur_env.reset(seed=ctx.seed + 100 + i)
        start_obs = o_true.copy()
        for _ in range(horizon):
            a = rng.uniform(-4, 4, size=1).astype(np.float32)
            o_true = true_env.step(a)[0]
            o_sur = sur_env.step(a)[0]
        errors.append(float(np.abs(o_sur - o_true).max()))
        baseline.append(float(np.abs(start_obs - o_true).max()))
    err, base = float(np.median(errors)), float(np.median(baseline))
    print(
        f"after {horizon} steps ({horizon * true_env.dt:g} s) with the same actions: surrogate "
        f"observation error {err:.3f} (median of 8) vs {base:.3f} for 'nothing moves'"
    )
    return {"surrogate_error": err, "static_baseline_error": base}
