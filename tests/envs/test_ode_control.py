"""simsci/ODEControl-v0: gymnasium conformance, determinism, physics, bad input."""

import math
import warnings

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import simsci.envs
from simsci import systems
from simsci.envs import TASKS, ODEControlEnv, ODEControlVectorEnv
from simsci.errors import UnknownNameError

ENV_ID = "simsci/ODEControl-v0"


def _check(env):
    with warnings.catch_warnings():
        # gymnasium recommends [-1, 1] action spaces and finite observation bounds; ours
        # are physical units (RescaleAction does the former) and unbounded states
        warnings.simplefilter("ignore", UserWarning)
        check_env(env.unwrapped, skip_render_check=True)


def test_check_env_stochastic_system():
    env = gymnasium.make(ENV_ID, task="lorenz63-stabilize", system="stochastic_lorenz")
    _check(env)
    assert env.unwrapped.dynamics.system.is_sde


def test_ids_registered_with_vector_entry_points():
    for env_id in simsci.envs.ENV_IDS:
        spec = gymnasium.spec(env_id)
        assert spec.vector_entry_point is not None


def _rollout(env, seed, steps=40, action_seed=0):
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(action_seed)
    out = [obs]
    for _ in range(steps):
        obs, reward, term, trunc, info = env.step(env.action_space.sample())
        out.append(np.concatenate([obs, [reward]]))
        if term or trunc:
            break
    return out


@pytest.mark.parametrize(
    "kwargs",
    [
        {"task": "pendulum-swingup"},
        {"task": "lorenz63-stabilize", "system": "stochastic_lorenz"},
        {"task": "lotka-volterra-target", "params": "random"},
    ],
)
def test_same_seed_same_rollout(kwargs):
    a = _rollout(gymnasium.make(ENV_ID, **kwargs), seed=3)
    b = _rollout(gymnasium.make(ENV_ID, **kwargs), seed=3)
    c = _rollout(gymnasium.make(ENV_ID, **kwargs), seed=4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])


def test_stochastic_system_noise_depends_on_seed_not_only_on_initial_state():
    env = ODEControlEnv("lorenz63-stabilize", system="stochastic_lorenz", params={"rho": 28.0})
    env.reset(seed=0)
    x0 = env._batch.state.clone()
    first = env.step(np.zeros(3, np.float32))[0]
    env.reset(seed=0)
    env._batch.state = x0.clone()
    second = env.step(np.zeros(3, np.float32))[0]
    np.testing.assert_array_equal(first, second)  # same seed sequence: same noise
    env.reset(seed=1)
    env._batch.state = x0.clone()
    third = env.step(np.zeros(3, np.float32))[0]
    assert not np.allclose(first, third)  # other seed: other Brownian path


def test_observations_stay_in_space_under_random_actions():
    for task in TASKS:
        env = gymnasium.make(ENV_ID, task=task)
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        for _ in range(60):
            obs, _, term, trunc, _ = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs), (task, obs)
            if term or trunc:
                obs, _ = env.reset()


def test_rigid_body_intermediate_axis_task():
    """gymnasium's check_env; the free body flips (m2 changes sign: the tennis-racket
    instability the task is about); torques on the two other axes, u = -k (m1, m3) with
    k above the saddle's rate, hold the spin, inside the action bounds."""
    env = gymnasium.make(ENV_ID, task="rigid-body-intermediate-axis")
    _check(env)
    assert env.unwrapped.dynamics.action_names == ("m1", "m3")

    def episode(gain, seed=0, **kwargs):
        env = ODEControlEnv("rigid-body-intermediate-axis", **kwargs)
        obs, _ = env.reset(seed=seed)
        assert abs(np.linalg.norm(obs) - 1.0) < 1e-6 and obs[1] > 0.98
        states, total, done = [obs], 0.0, False
        while not done:
            action = (-gain * obs[[0, 2]]).astype(np.float32)
            assert np.all(np.abs(action) <= 0.25)  # never clipped
            obs, reward, term, trunc, _ = env.step(action)
            states.append(obs)
            total, done = total + reward, term or trunc
        return np.array(states), total

    free, free_return = episode(0.0)
    held, held_return = episode(1.5)
    assert len(free) == len(held) == 201  # 200 steps, no failure
    np.testing.assert_allclose(np.linalg.norm(free, axis=1), 1.0, atol=1e-4)  # |m| kept
    assert free[:, 1].min() < -0.9  # flipped to the opposite spin
    assert np.linalg.norm(held - [0.0, 1.0, 0.0], axis=1).max() < 0.15
    assert free_return < -100.0 and held_return > -1.0
    # the same holds over the randomised inertias (saddle rate at most 0.8 < 1.5)
    _, random_return = episode(1.5, seed=1, params="random")
    assert random_return > -1.0


def test_zero_action_pendulum_matches_system_simulate():
    env = ODEControlEnv("pendulum-swingup")
    _, info = env.reset(seed=5)
    x0 = torch.as_tensor(info["state"])[None]
    for _ in range(20):
        _, _, _, _, info = env.step(np.zeros(1, np.float32))
    sys_ = systems.get("damped_pendulum")
    t = torch.arange(21, dtype=torch.float64) * env.dt
    ref = sys_.simulate(x0, t, method="rk4", step_size=env.dt / 4)[0, -1]
    np.testing.assert_allclose(info["state"], ref.numpy(), rtol=1e-12, atol=1e-12)
    assert info["t"] == pytest.approx(20 * env.dt)


def test_additive_torque_matches_hand_written_rk4():
    env = ODEControlEnv("pendulum-swingup")
    _, info = env.reset(seed=1)
    x = torch.as_tensor(info["state"])
    u = 2.5
    g, L, c = 9.81, 1.0, 0.25

    def f(y):
        return torch.stack((y[1], -(g / L) * torch.sin(y[0]) - c * y[1] + u))

    h = env.dt / 4
    for _ in range(4):
        k1 = f(x)
        k2 = f(x + h / 2 * k1)
        k3 = f(x + h / 2 * k2)
        k4 = f(x + h * k3)
        x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    _, _, _, _, info = env.step(np.array([u], np.float32))
    # torchdiffeq's rk4 is the 3/8-rule variant: same order, O(h^5) apart per step
    np.testing.assert_allclose(info["state"], x.numpy(), rtol=1e-7)


def test_parametric_control_shifts_parameters():
    """Harvesting efforts (u1, u2) act as alpha - u1, gamma + u2."""
    env = ODEControlEnv("lotka-volterra-target")
    _, info = env.reset(seed=2)
    x0 = torch.as_tensor(info["state"])[None]
    u = np.array([0.3, 0.5], np.float32)
    for _ in range(5):
        _, _, _, _, info = env.step(u)
    sys_ = systems.get("lotka_volterra")
    shifted = {"alpha": 1.3 - float(u[0]), "gamma": 1.8 + float(u[1])}
    t = torch.arange(6, dtype=torch.float64) * env.dt
    ref = sys_.simulate(x0, t, params=shifted, method="rk4", step_size=env.dt / 4)[0, -1]
    np.testing.assert_allclose(info["state"], ref.numpy(), rtol=1e-6)


def test_lorenz_reward_is_zero_at_the_fixed_point_and_negative_elsewhere():
    env = ODEControlEnv("lorenz63-stabilize", max_episode_steps=None)
    env.reset(seed=0)
    r = math.sqrt(8 / 3 * 27)
    env._batch.state = torch.tensor([[r, r, 27.0]], dtype=torch.float64)
    _, reward, _, _, info = env.step(np.zeros(3, np.float32))
    assert reward == pytest.approx(0.0, abs=1e-8)  # a fixed point stays put
    env._batch.state = torch.tensor([[0.0, 1.0, 20.0]], dtype=torch.float64)
    assert env.step(np.zeros(3, np.float32))[1] < -1.0


def test_failure_terminates_with_failure_reward_and_finite_observation():
    env = ODEControlEnv("regulate", system="lorenz63", state_bound=30.0, failure_reward=-7.0)
    env.reset(seed=0)
    env._batch.state = torch.tensor([[29.9, 29.9, 29.9]], dtype=torch.float64)
    obs, reward, term, trunc, _ = env.step(np.ones(3, np.float32))
    assert term and not trunc and reward == -7.0
    assert env.observation_space.contains(obs)
    with pytest.raises(gymnasium.error.ResetNeeded, match="reset"):
        env.step(np.zeros(3, np.float32))


def test_non_finite_state_terminates_and_keeps_last_finite_state():
    env = ODEControlEnv("regulate", system="lorenz63")
    env.reset(seed=0)
    env._batch.state = torch.tensor([[1e200, 1e200, 1e200]], dtype=torch.float64)
    before = env._batch.state.clone()
    _, reward, term, _, info = env.step(np.zeros(3, np.float32))
    assert term and reward == env.dynamics.failure_reward
    np.testing.assert_array_equal(info["state"], before[0].numpy())


def test_truncation_after_max_episode_steps():
    env = gymnasium.make(ENV_ID, task="pendulum-swingup", max_episode_steps=3)
    env.reset(seed=0)
    flags = [env.step(np.zeros(1, np.float32))[3] for _ in range(3)]
    assert flags == [False, False, True]


def test_step_before_reset_raises():
    env = ODEControlEnv()
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step(np.zeros(1, np.float32))


@pytest.mark.parametrize(
    "action, error, match",
    [
        (np.zeros(2, np.float32), ValueError, r"shape \(1,\)"),
        (np.zeros((1, 1), np.float32), ValueError, r"shape \(1,\)"),
        (np.array(["a"]), TypeError, "real numbers"),
        (np.array([True]), TypeError, "real numbers"),
        (np.array([np.nan], np.float32), ValueError, "NaN"),
        (np.array([np.inf], np.float32), ValueError, "NaN or inf"),
    ],
)
def test_invalid_actions_raise(action, error, match):
    env = ODEControlEnv()
    env.reset(seed=0)
    with pytest.raises(error, match=match):
        env.step(action)


def test_out_of_bounds_actions_clip_or_raise():
    clip = ODEControlEnv(max_episode_steps=None)
    clip.reset(seed=0)
    a = clip.step(np.array([100.0], np.float32))[4]["state"]
    clip.reset(seed=0)
    b = clip.step(np.array([4.0], np.float32))[4]["state"]
    np.testing.assert_array_equal(a, b)
    strict = ODEControlEnv(action_bounds="error")
    strict.reset(seed=0)
    with pytest.raises(ValueError, match="outside the action space"):
        strict.step(np.array([4.5], np.float32))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"task": "pendulum_swingup"}, UnknownNameError, "pendulum-swingup"),
        ({"task": "regulate", "system": "lorenz64"}, UnknownNameError, "lorenz63"),
        ({"task": "regulate", "system": "burgers"}, ValueError, "PDEControl"),
        ({"task": "pendulum-swingup", "system": "lorenz63"}, ValueError, "same states"),
        ({"actuated": ["phi"]}, UnknownNameError, "theta"),
        ({"controlled_params": {"gg": 1.0}}, UnknownNameError, "g"),
        ({"dt": -0.1}, ValueError, "dt"),
        ({"action_low": 5.0}, ValueError, "below"),
        ({"target": [0.0, 1.0, 2.0]}, ValueError, "state shape"),
        ({"params": "sampled"}, ValueError, "random"),
        ({"params": {"g": -1.0}}, ValueError, "g"),
        ({"dtype": "float16"}, ValueError, "float32"),
        ({"action_bounds": "wrap"}, ValueError, "clip"),
        ({"method": "rk5"}, UnknownNameError, "rk4"),
        ({"method": "dopri5"}, ValueError, "adaptive"),
    ],
)
def test_bad_construction_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        gymnasium.make(ENV_ID, **kwargs)


def test_random_params_vary_per_episode():
    env = ODEControlVectorEnv(4, task="lotka-volterra-target", params="random")
    env.reset(seed=0)
    rows = env._batch.params
    assert rows.shape == (4, 4) and len(torch.unique(rows[:, 0])) == 4


# ------------------------------------------------------------------ vector envs
def test_make_vec_native_entry_point_and_spaces():
    env = gymnasium.make_vec(
        ENV_ID, num_envs=16, vectorization_mode="vector_entry_point", task="lorenz63-stabilize"
    )
    assert isinstance(env.unwrapped, ODEControlVectorEnv)
    obs, infos = env.reset(seed=0)
    assert obs.shape == (16, 3) and obs.dtype == np.float32
    assert env.observation_space.contains(obs)
    obs, reward, term, trunc, infos = env.step(env.action_space.sample())
    assert reward.shape == (16,) and term.dtype == bool and trunc.dtype == bool
    assert infos["state"].shape == (16, 3) and infos["t"].shape == (16,)
    env.close()


def test_vector_env_next_step_autoreset():
    env = ODEControlVectorEnv(3, "pendulum-swingup", max_episode_steps=2)
    env.reset(seed=0)
    a = np.zeros((3, 1), np.float32)
    env.step(a)
    obs, reward, term, trunc, infos = env.step(a)
    assert trunc.all() and not term.any()
    final = infos["state"].copy()
    obs, reward, term, trunc, infos = env.step(np.full((3, 1), 4.0, np.float32))
    # the step after the end: reset observations, reward 0, flags false, action ignored
    np.testing.assert_array_equal(reward, 0.0)
    assert not term.any() and not trunc.any()
    np.testing.assert_array_equal(infos["t"], 0.0)
    assert not np.allclose(infos["state"], final)
    obs, reward, *_ = env.step(a)
    assert (reward != 0).all()


def test_vector_env_same_step_autoreset_reports_final_obs():
    env = ODEControlVectorEnv(2, "pendulum-swingup", max_episode_steps=1, autoreset_mode="SameStep")
    assert env.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.SAME_STEP
    env.reset(seed=0)
    obs, reward, term, trunc, infos = env.step(np.zeros((2, 1), np.float32))
    assert trunc.all() and infos["_final_obs"].all()
    assert infos["final_obs"].shape == (2, 3)
    assert not np.allclose(infos["final_obs"], obs)  # obs is already the new episode's
    np.testing.assert_array_equal(infos["t"], 0.0)


def test_vector_env_only_failed_sub_env_terminates():
    env = ODEControlVectorEnv(3, "regulate", system="lorenz63", state_bound=100.0)
    env.reset(seed=0)
    state = env._batch.state.clone()
    state[1] = torch.tensor([99.9, 99.9, 99.9], dtype=torch.float64)
    env._batch.state = state
    _, reward, term, _, _ = env.step(np.zeros((3, 3), np.float32))
    assert term.tolist() == [False, True, False]
    assert reward[1] == env.dynamics.failure_reward


def test_vector_env_torch_backend_on_device(device):
    env = ODEControlVectorEnv(
        8, "lorenz63-stabilize", device=device, dtype="float32", array_backend="torch"
    )
    obs, infos = env.reset(seed=0)
    assert isinstance(obs, torch.Tensor) and obs.device.type == device.type
    actions = torch.zeros(8, 3, device=device)
    obs, reward, term, trunc, infos = env.step(actions)
    assert obs.shape == (8, 3) and obs.dtype == torch.float32
    assert reward.device.type == device.type and term.dtype == torch.bool
    assert torch.isfinite(obs).all()


def test_vector_env_matches_on_device_and_cpu(device):
    cpu = ODEControlVectorEnv(4, "lotka-volterra-target")
    dev = ODEControlVectorEnv(4, "lotka-volterra-target", device=device)
    o1, _ = cpu.reset(seed=9)
    o2, _ = dev.reset(seed=9)
    np.testing.assert_allclose(o1, o2, rtol=1e-6)
    a = np.full((4, 2), 0.5, np.float32)
    for _ in range(5):
        o1 = cpu.step(a)[0]
        o2 = dev.step(a)[0]
    np.testing.assert_allclose(o1, o2, rtol=1e-5)


@pytest.mark.parametrize(
    "actions, error, match",
    [
        (np.zeros((3, 1), np.float32), ValueError, r"\(4, 1\)"),
        (np.zeros(4, np.float32), ValueError, r"\(4, 1\)"),
        (np.array([[0.0], [np.nan], [0.0], [0.0]], np.float32), ValueError, r"\[1\]"),
    ],
)
def test_vector_env_invalid_actions(actions, error, match):
    env = ODEControlVectorEnv(4)
    env.reset(seed=0)
    with pytest.raises(error, match=match):
        env.step(actions)


def test_vector_env_bad_construction():
    with pytest.raises(ValueError, match="num_envs"):
        ODEControlVectorEnv(0)
    with pytest.raises(ValueError, match="array_backend"):
        ODEControlVectorEnv(2, array_backend="jax")
    with pytest.raises(ValueError, match="autoreset_mode"):
        ODEControlVectorEnv(2, autoreset_mode="Disabled")
    with pytest.raises(gymnasium.error.ResetNeeded):
        ODEControlVectorEnv(2).step(np.zeros((2, 1), np.float32))


# ------------------------------------------------------------------ Stable Baselines3
def test_stable_baselines3_ppo_runs_end_to_end():
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gymnasium.make(ENV_ID, task="pendulum-swingup")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        sb3_check_env(env.unwrapped)
    model = sb3.PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=128)
    assert model.num_timesteps >= 128
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(action)


def test_rgb_array_render():
    env = gymnasium.make(ENV_ID, task="pendulum-swingup", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8
    assert (frame != 255).any()  # something was drawn
    vec = ODEControlVectorEnv(2, "lorenz63-stabilize", render_mode="rgb_array")
    vec.reset(seed=0)
    frames = vec.render()
    assert len(frames) == 2 and frames[0].shape == (240, 320, 3)
    with pytest.raises(ValueError, match="rgb_array"):
        ODEControlEnv(render_mode="human")


def test_sb3_make_vec_env_and_batched_adapter():
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecMonitor

    from simsci.envs import to_sb3

    dummy = make_vec_env(ENV_ID, n_envs=2, env_kwargs={"task": "lorenz63-stabilize"})
    assert dummy.reset().shape == (2, 3)
    venv = VecMonitor(to_sb3(ODEControlVectorEnv(4, "pendulum-swingup", max_episode_steps=20)))
    model = sb3.PPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0)
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    # episodes of 20 steps ended and were reported with their final observation
    assert len(model.ep_info_buffer) >= 4
    assert all(info["l"] == 20 for info in model.ep_info_buffer)
    with pytest.raises(TypeError, match="simsci vector environment"):
        to_sb3(gymnasium.make(ENV_ID))


def test_a_non_autonomous_system_is_refused():
    # ODEControl restarts t at every control interval: a forced system would lose its
    # forcing without a word, so a system that declares autonomous = False is refused
    from simsci import systems

    @systems.register
    class Forced(systems.System):
        name = "_test_forced"
        state_names = ("x", "v")
        param_names = ("w",)
        default_params = {"w": 1.0}
        autonomous = False

        def drift(self, t, x, p):
            force = torch.cos(p[:, :1] * t)
            return torch.cat([x[:, 1:], -x[:, :1] + force], -1)

    try:
        with pytest.raises(ValueError, match="'_test_forced' is not autonomous"):
            ODEControlEnv("regulate", system="_test_forced")
    finally:
        del systems.SYSTEMS["_test_forced"]


# ------------------------------------------------------------------ the lean fixed step
LEAN_CASES = [
    {"task": "pendulum-swingup"},
    {"task": "lorenz63-stabilize"},
    {"task": "lotka-volterra-target", "params": "random"},  # parametric control, failures
    {"task": "rigid-body-intermediate-axis"},
    {"task": "regulate", "system": "lorenz96", "system_options": {"dim": 6}},
    {"task": "pendulum-swingup", "dtype": "float32"},
    {"task": "pendulum-swingup", "method": "midpoint", "substeps": 3},
]


def _vector_rollout(kwargs, n, lean, device, steps=150):
    env = ODEControlVectorEnv(n, device=device, **kwargs)
    if not lean:
        env.dynamics._solver = None  # every interval through simsci.odeint, as before
    out = list(env.reset(seed=7))
    rng = np.random.default_rng(0)
    space = env.action_space
    for _ in range(steps):
        obs, reward, term, trunc, info = env.step(rng.uniform(space.low, space.high))
        out += [obs, reward, term, trunc, info["state"]]
    return out[:1] + out[2:]


@pytest.mark.parametrize("kwargs", LEAN_CASES)
def test_lean_step_equals_the_odeint_step_bit_for_bit(kwargs, device):
    """The fixed-step path (checked once, no odeint call per step) gives the trajectories
    of the odeint path bit for bit: observations, rewards, flags, states, through
    failures and autoresets."""
    assert ODEControlEnv(**kwargs).dynamics._solver is not None
    lean = _vector_rollout(kwargs, 5, True, device)
    checked = _vector_rollout(kwargs, 5, False, device)
    for a, b in zip(lean, checked):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    one = ODEControlEnv(device=device, **kwargs)
    ref = ODEControlEnv(device=device, **kwargs)
    ref.dynamics._solver = None
    rng = np.random.default_rng(1)
    for env in (one, ref):
        env.reset(seed=3)
    for _ in range(120):
        a = rng.uniform(one.action_space.low, one.action_space.high).astype(np.float32)
        x, y = one.step(a), ref.step(a)
        assert np.array_equal(x[0], y[0]) and x[1:4] == y[1:4]
        assert np.array_equal(x[4]["state"], y[4]["state"]) and x[4]["t"] == y[4]["t"]
        if x[2] or x[3]:
            assert np.array_equal(one.reset()[0], ref.reset()[0])


def test_lean_step_only_for_single_step_fixed_methods():
    assert ODEControlEnv().dynamics._solver.method == "rk4"
    assert ODEControlEnv(method="explicit_adams").dynamics._solver is None  # multistep
    sde = ODEControlEnv("lorenz63-stabilize", system="stochastic_lorenz")
    assert sde.dynamics._solver is None  # Brownian increments: sdeint


def test_lean_step_checks_the_field_once():
    """A drift of the wrong shape is still a clear error on the first step (the check
    odeint made on every step runs once)."""

    @systems.register
    class Bad(systems.System):
        name = "_test_bad_drift"
        state_names = ("x", "v")
        param_names = ("w",)
        default_params = {"w": 1.0}

        def drift(self, t, x, p):
            return torch.cat([x, x[:, :1]], -1)  # (B, 3) for a (B, 2) state

        def _sample_initial(self, n, generator, device):
            return torch.zeros(n, 2, dtype=torch.float64, device=device)

    try:
        env = ODEControlEnv("regulate", system="_test_bad_drift")
        env.reset(seed=0)
        with pytest.raises(ValueError, match="shape and dtype of y"):
            env.step(np.zeros(2, np.float32))
    finally:
        del systems.SYSTEMS["_test_bad_drift"]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("as_tensor", [False, True])
def test_non_finite_actions_still_raise_on_every_step(bad, as_tensor):
    env = ODEControlEnv("lorenz63-stabilize")
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.zeros(3, np.float32))
    action = np.array([0.0, bad, 0.0], np.float32)
    with pytest.raises(ValueError, match="NaN or inf"):
        env.step(torch.from_numpy(action) if as_tensor else action)
    vec = ODEControlVectorEnv(3, "lorenz63-stabilize")
    vec.reset(seed=0)
    actions = np.zeros((3, 3), np.float64)
    actions[2, 1] = bad
    with pytest.raises(ValueError, match=r"sub-environment\(s\) \[2\]"):
        vec.step(torch.from_numpy(actions) if as_tensor else actions)


def test_numpy_and_torch_action_checks_agree():
    """check_actions checks numpy actions for the CPU in numpy (cheaper for one env):
    the same tensors and the same errors as its torch path."""
    from simsci.envs._core import check_actions

    low, high = np.array([-1.0, 0.0], np.float32), np.array([1.0, 2.0], np.float32)
    rng = np.random.default_rng(0)
    nan_rows = rng.uniform(-3, 3, (4, 2))
    nan_rows[1, 0] = np.nan
    inputs = [
        rng.uniform(-3, 3, (4, 2)).astype(np.float32),
        rng.uniform(-3, 3, (4, 2)),
        rng.integers(-3, 3, (4, 2)),
        np.array([[1e300, 0.0]] * 4),  # finite in float64, inf once cast to float32
        nan_rows,
        rng.uniform(-3, 3, (3, 2)),  # wrong shape
    ]
    for dtype in (torch.float32, torch.float64):
        for arr in inputs:
            for mode in ("clip", "error"):
                kw = dict(batch=4, low=low, high=high, mode=mode, device="cpu", dtype=dtype)
                got = []
                for x in (arr, torch.from_numpy(arr)):
                    try:
                        got.append(check_actions(x, **kw))
                    except (TypeError, ValueError) as err:
                        got.append(f"{type(err).__name__}: {err}")
                if isinstance(got[0], str):
                    assert got[0] == got[1]
                else:
                    assert got[0].dtype == got[1].dtype == dtype
                    assert torch.equal(got[0], got[1])
