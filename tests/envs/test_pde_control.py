"""simsci/PDEControl-v0: gymnasium conformance, actuator physics, batching, bad input."""

import math
import warnings

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import simsci.envs  # noqa: F401  (registers the ids)
from simsci import systems
from simsci.envs import _pde
from simsci.envs._pde import PDE_TASKS, PDEControlDynamics, PDEControlEnv, PDEControlVectorEnv
from simsci.errors import SolverError, UnknownNameError

ENV_ID = "simsci/PDEControl-v0"
if ENV_ID not in gymnasium.registry:
    gymnasium.register(
        ENV_ID,
        entry_point="simsci.envs._pde:PDEControlEnv",
        vector_entry_point="simsci.envs._pde:PDEControlVectorEnv",
    )


def _check(env):
    with warnings.catch_warnings():
        # gymnasium recommends finite observation bounds; a field is unbounded
        warnings.simplefilter("ignore", UserWarning)
        check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.parametrize("task", sorted(PDE_TASKS))
def test_check_env_every_task(task):
    env = gymnasium.make(ENV_ID, task=task)
    _check(env)
    assert env.unwrapped.spec.id == ENV_ID and env.unwrapped.spec.kwargs["task"] == task
    assert env.unwrapped.state_shape == (PDE_TASKS[task].resolution, 1)
    assert env.unwrapped.dt == PDE_TASKS[task].dt


def test_check_env_subsampled_sensors_random_params_float32():
    env = PDEControlEnv("ks-stabilize", n_sensors=16, params="random", dtype="float32")
    _check(env)
    assert env.observation_space.shape == (16,)


def _rollout(env, seed, steps=15):
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(0)
    out = [obs]
    for _ in range(steps):
        obs, reward, term, trunc, info = env.step(env.action_space.sample())
        out.append(np.concatenate([obs, [reward]]))
        if term or trunc:
            break
    return out


@pytest.mark.parametrize(
    "kwargs", [{"task": "ks-stabilize"}, {"task": "burgers-stabilize", "params": "random"}]
)
def test_same_seed_same_rollout(kwargs):
    a = _rollout(gymnasium.make(ENV_ID, **kwargs), seed=3)
    b = _rollout(gymnasium.make(ENV_ID, **kwargs), seed=3)
    c = _rollout(gymnasium.make(ENV_ID, **kwargs), seed=4)
    assert len(a) == 16 and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])


@pytest.mark.parametrize("task", sorted(PDE_TASKS))
def test_observations_are_the_field_at_the_sensors_and_stay_in_space(task):
    env = PDEControlEnv(task, n_sensors=PDE_TASKS[task].resolution // 4)
    obs, info = env.reset(seed=0)
    for _ in range(10):
        assert env.observation_space.contains(obs)
        np.testing.assert_array_equal(obs, info["state"][::4, 0].astype(np.float32))
        assert info["state"].dtype == np.float64 and info["state"].shape == env.state_shape
        obs, reward, term, trunc, info = env.step(env.action_space.sample())
        assert not term and math.isfinite(reward)


# ------------------------------------------------------------------ physics
def test_actuators_are_periodic_peak_normalised_gaussian_bumps():
    dyn = PDEControlDynamics("ks-stabilize")
    L, N, M = 22.0, 64, 8
    B = dyn.actuators
    assert B.shape == (M, N)
    np.testing.assert_allclose(dyn.actuator_centers, (np.arange(M) + 0.5) * L / M)
    sigma = L / 16
    for m, c in enumerate(dyn.actuator_centers):
        d = (dyn.x - c + L / 2) % L - L / 2
        np.testing.assert_allclose(B[m], np.exp(-(d**2) / (2 * sigma**2)), rtol=1e-14)
    # each bump is a rotation of the first (periodic), peak 1 at a grid point here
    np.testing.assert_allclose(np.roll(B[0], 3 * N // M), B[3], atol=1e-15)
    assert B.max() == pytest.approx(1.0)
    # the mean of a bump is its Gaussian integral over L (tails below rounding)
    np.testing.assert_allclose(B.mean(axis=1), math.sqrt(2 * math.pi) * sigma / L, rtol=1e-12)


def _exact_heat_step(u, f, nu, L, dt):
    """One interval of u_t = nu u_xx + f in Fourier space:
    u_k(dt) = e^{-nu k^2 dt} u_k + (1 - e^{-nu k^2 dt})/(nu k^2) f_k  (f_0 dt for k = 0)."""
    N = u.shape[0]
    k = 2 * np.pi * np.fft.rfftfreq(N, d=L / N)
    lam = -nu * k**2
    decay = np.exp(lam * dt)
    gain = np.where(k == 0, dt, np.expm1(lam * dt) / np.where(k == 0, 1.0, lam))
    return np.fft.irfft(decay * np.fft.rfft(u) + gain * np.fft.rfft(f), n=N)


def test_heat_step_is_the_exact_forced_solution(device):
    env = PDEControlEnv("heat-track", device=device)
    _, info = env.reset(seed=1)
    dyn = env.dynamics
    rng = np.random.default_rng(0)
    u = info["state"][:, 0]
    for _ in range(3):
        a = rng.uniform(-1, 1, 8).astype(np.float32)
        _, _, _, _, info = env.step(a)
        f = a.astype(np.float64) @ dyn.actuators
        u = _exact_heat_step(u, f, 0.01, 1.0, env.dt)
        np.testing.assert_allclose(info["state"][:, 0], u, rtol=0, atol=1e-13)


@pytest.mark.parametrize("task", ["heat-track", "burgers-stabilize"])
def test_constant_action_raises_the_mean_at_the_rate_of_the_mean_forcing(task, device):
    """d/dt mean(u) = mean(f) = sum_m a_m mean(b_m): the linear part and the flux-form
    nonlinearity leave the mean alone, so this holds exactly, step after step."""
    env = PDEControlEnv(task, device=device)
    _, info = env.reset(seed=0)
    a = np.array([0.5, 1.0, 0.0, -0.25, 0.75, 1.0, 0.2, 0.1], np.float32)
    rate = float(a.astype(np.float64) @ env.dynamics.actuators.mean(axis=1))
    mean0 = info["state"].mean()
    for k in range(1, 6):
        _, _, _, _, info = env.step(a)
        assert info["state"].mean() == pytest.approx(mean0 + k * env.dt * rate, abs=1e-12)
    assert rate > 0.3  # the check is not vacuous


def test_reward_is_minus_tracking_error_minus_action_cost():
    env = PDEControlEnv("heat-track", action_cost=0.5)
    env.reset(seed=2)
    a = np.linspace(-1, 1, 8).astype(np.float32)
    _, reward, _, _, info = env.step(a)
    target = np.sin(2 * np.pi * env.dynamics.x)
    expected = -(np.mean((info["state"][:, 0] - target) ** 2) + 0.5 * np.sum(a.astype(float) ** 2))
    assert reward == pytest.approx(expected, rel=1e-12)


def test_proportional_feedback_beats_no_control_on_heat_tracking():
    """a_m = -K (u(c_m) - u*(c_m)), read off the observation at the actuator centres,
    holds the field near the sine target; without control it decays to zero."""
    returns, errors = {}, {}
    for gain in (0.0, 4.0):
        env = PDEControlVectorEnv(4, "heat-track", action_cost=0.0)
        obs, _ = env.reset(seed=5)
        dyn = env.dynamics
        idx = np.round(dyn.actuator_centers / (dyn.x[1] - dyn.x[0])).astype(int)
        target = dyn.target[idx]
        total = np.zeros(4)
        for _ in range(dyn.max_episode_steps):
            actions = np.clip(-gain * (obs[:, idx] - target), -1, 1).astype(np.float32)
            obs, reward, term, trunc, infos = env.step(actions)
            total += reward
        assert trunc.all() and not term.any()
        returns[gain] = total
        errors[gain] = np.mean((infos["state"][..., 0] - dyn.target) ** 2, axis=1)
    assert (returns[4.0] > 5 * returns[0.0]).all()  # returns are negative
    np.testing.assert_allclose(errors[0.0], 0.5, rtol=0.1)  # decayed: mean(sin^2)
    assert (errors[4.0] < 0.01).all()


def test_other_methods_agree_with_etdrk4():
    """imex (SBDF2) and rk4 (finite differences) advance the same forced heat field."""
    a = np.full(8, 0.5, np.float32)
    ref = PDEControlEnv("heat-track")
    ref.reset(seed=0)
    u_ref = [ref.step(a)[4]["state"] for _ in range(3)][-1]
    for method, tol in (("imex", 1e-4), ("rk4", 1e-4)):
        env = PDEControlEnv("heat-track", method=method, solver_dt=None)
        env.reset(seed=0)
        u = [env.step(a)[4]["state"] for _ in range(3)][-1]
        np.testing.assert_allclose(u, u_ref, atol=tol)
    # without solver_dt another method gets the system's step for it (rk4: also stable)
    assert PDEControlDynamics("heat-track", method="imex").solver_dt == 1e-3
    rk4 = PDEControlDynamics("heat-track", method="rk4")
    assert rk4.solver_dt <= 0.9 * rk4.system.stable_dt(None, "rk4")


def test_a_registered_stepper_is_checked_by_its_declarations():
    """A stepper registered later (here a toy: pseudo-spectral forward Euler) gets the
    same care as rk4 from what it declares, not from its name: its step limit caps the
    default internal step and refuses a larger given one, and a spectral one needs an
    even grid."""
    from simsci.systems import PDE_STEPPERS, PDEStepper, register_stepper

    @register_stepper
    class SpectralEuler(PDEStepper):
        name = "euler_env_test"
        order = 1
        spectral = True
        unconditionally_stable = False
        stability = "h nu k_max^2 <= 2 (forward Euler on the diffusion)"
        description = "test: pseudo-spectral forward Euler"
        source = "-"

        def coefficients(self, system, h, rows, grid):
            return (system.linear_symbol(torch.as_tensor(rows), grid).to(grid.cdtype),)

        def step(self, system, v, t, h, coeffs, p, grid, source, carry):
            N = system.nonlinear_hat(t, v, p, grid)
            return v + h * (coeffs[0] * v + N + (0 if source is None else source)), carry

        def stable_dt(self, system, params, u0):
            lam = system.linearised_symbol(params, u0=u0, kind="spectral").real
            return float(2.0 / (-lam).max())

    try:
        dyn = PDEControlDynamics("heat-track", method="euler_env_test")
        limit = dyn.system.stable_dt(None, "euler_env_test")
        assert limit < PDE_TASKS["heat-track"].solver_dt  # the task's step would blow up
        assert dyn.solver_dt == pytest.approx(0.9 * limit)
        env = PDEControlEnv("heat-track", method="euler_env_test")
        env.reset(seed=0)
        for _ in range(3):
            assert not env.step(np.full(8, 0.5, np.float32))[2]  # no blow-up
        with pytest.raises(ValueError, match="stability limit .* of 'euler_env_test'"):
            PDEControlDynamics("heat-track", method="euler_env_test", solver_dt=2 * limit)
        with pytest.raises(ValueError, match="'euler_env_test' needs an even resolution"):
            PDEControlDynamics("heat-track", method="euler_env_test", resolution=63)
    finally:
        del PDE_STEPPERS["euler_env_test"]


def test_solver_blow_up_terminates_only_that_sub_env():
    env = PDEControlVectorEnv(3, "ks-stabilize", state_bound=math.inf)
    env.reset(seed=0)
    state = env._batch.state.clone()
    good = state.clone()
    x = torch.as_tensor(env.dynamics.x)
    state[1, :, 0] = 1e160 * torch.sin(2 * math.pi * 5 * x / 22.0)  # u^2 overflows
    env._batch.state = state
    with pytest.raises(SolverError) as err:  # what the dynamics must catch
        env.dynamics.system.simulate(state, [0.0, env.dt], dt=0.05)
    assert err.value.samples == [1]
    a = np.zeros((3, 8), np.float32)
    _, reward, term, trunc, infos = env.step(a)
    assert term.tolist() == [False, True, False] and not trunc.any()
    assert reward[1] == env.dynamics.failure_reward
    np.testing.assert_array_equal(infos["state"][1], state[1].numpy())  # last finite state
    # the others advanced as if the diverging one had never been there
    ref = PDEControlVectorEnv(2, "ks-stabilize")
    ref.reset(seed=0)
    ref._batch.state = good[[0, 2]]
    np.testing.assert_allclose(ref.step(a[:2])[4]["state"], infos["state"][[0, 2]], rtol=1e-13)


def test_random_params_vary_per_episode_inside_the_task_range():
    env = PDEControlVectorEnv(6, "burgers-stabilize", params="random")
    env.reset(seed=0)
    nu = env._batch.params[:, 0]
    assert len(torch.unique(nu)) == 6 and ((nu >= 0.005) & (nu <= 0.05)).all()
    fixed = PDEControlEnv("heat-track", params={"nu": 0.05})
    _, info = fixed.reset(seed=0)
    f = np.zeros(64)
    _, _, _, _, info2 = fixed.step(np.zeros(8, np.float32))
    expected = _exact_heat_step(info["state"][:, 0], f, 0.05, 1.0, fixed.dt)
    np.testing.assert_allclose(info2["state"][:, 0], expected, atol=1e-13)


def _vector_rollout(env, steps, seed=0):
    out = list(env.reset(seed=seed))[:1]
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        obs, reward, term, trunc, infos = env.step(rng.uniform(-1, 1, env.action_space.shape))
        out += [obs, reward, term, trunc, infos["state"], env._batch.params]
    return out


@pytest.mark.parametrize("params", ["default", "random"])
def test_blocked_solve_equals_one_solve_bit_for_bit(params):
    """On the CPU a large batch is solved in blocks of rows (cache-sized); every
    sub-environment's trajectory is the one the whole batch in one solve gives."""
    kw = dict(params=params, max_episode_steps=3)  # autoresets draw new parameter rows
    whole = PDEControlVectorEnv(10, "burgers-stabilize", **kw)
    # rows whose spectra (65 complex128 modes) fill the block
    assert whole.dynamics._rows_per_block == _pde._CPU_BLOCK_BYTES // (65 * 16)
    whole.dynamics._rows_per_block = None
    blocked = PDEControlVectorEnv(10, "burgers-stabilize", **kw)
    blocked.dynamics._rows_per_block = 3  # 10 rows: four blocks, of 3, 3, 2 and 2
    for a, b in zip(_vector_rollout(whole, 8), _vector_rollout(blocked, 8)):
        a, b = (x.numpy() if isinstance(x, torch.Tensor) else x for x in (a, b))
        assert np.array_equal(a, b)


def test_random_params_build_coefficients_only_for_new_rows(monkeypatch):
    """A reset of a few sub-environments draws new parameter rows; only those rows'
    ETDRK4 coefficients are computed, not the whole batch's again."""
    env = PDEControlVectorEnv(16, "burgers-stabilize", params="random")
    env.reset(seed=0)
    stepper = systems.get_stepper("etdrk4")
    built, real = [], type(stepper).coefficients

    def spy(self, system, h, rows, grid):
        built.append(rows.shape[0])
        return real(self, system, h, rows, grid)

    monkeypatch.setattr(type(stepper), "coefficients", spy)
    a = np.zeros((16, 8), np.float32)
    env.step(a)
    env.step(a)
    assert built == [16]  # once, at the first step: the rows did not change
    mask = np.zeros(16, bool)
    mask[[3, 11]] = True
    env.reset(options={"reset_mask": mask})
    env.step(a)
    assert built == [16, 2]
    # each sub-environment's next field is the one it gets stepped alone with its row
    before, rows = env._batch.state.clone(), env._batch.params.clone()
    after = env.step(a)[4]["state"]
    for i in (3, 5, 11):
        one = PDEControlEnv("burgers-stabilize", params="random")
        one.reset(seed=0)
        one._batch.state, one._batch.params = before[i : i + 1].clone(), rows[i : i + 1]
        assert np.array_equal(one.step(a[i])[4]["state"], after[i])


# ------------------------------------------------------------------ vector envs
def test_vector_env_of_8_equals_8_separate_envs_from_the_same_states(device):
    vec = PDEControlVectorEnv(8, "burgers-stabilize", device=device)
    vec.reset(seed=0)
    singles = []
    for i in range(8):
        env = PDEControlEnv("burgers-stabilize", device=device)
        env.reset(seed=0)
        env._batch.state = vec._batch.state[i : i + 1].clone()
        singles.append(env)
    rng = np.random.default_rng(1)
    for _ in range(3):
        actions = rng.uniform(-1, 1, size=(8, 8)).astype(np.float32)
        obs, reward, *_ = vec.step(actions)
        for i, env in enumerate(singles):
            o, r, *_ = env.step(actions[i])
            np.testing.assert_allclose(o, obs[i], rtol=1e-6, atol=1e-7)
            assert r == pytest.approx(reward[i], rel=1e-12)


def test_make_vec_native_entry_point_and_spaces():
    env = gymnasium.make_vec(
        ENV_ID, num_envs=8, vectorization_mode="vector_entry_point", task="heat-track", n_sensors=8
    )
    assert isinstance(env.unwrapped, PDEControlVectorEnv)
    obs, infos = env.reset(seed=0)
    assert obs.shape == (8, 8) and obs.dtype == np.float32
    assert env.observation_space.contains(obs)
    obs, reward, term, trunc, infos = env.step(env.action_space.sample())
    assert reward.shape == (8,) and term.dtype == bool and trunc.dtype == bool
    assert infos["state"].shape == (8, 64, 1) and infos["t"].shape == (8,)
    np.testing.assert_allclose(infos["t"], 0.1)
    env.close()


def test_vector_env_next_step_autoreset_after_truncation():
    env = PDEControlVectorEnv(3, "ks-stabilize", max_episode_steps=2)
    env.reset(seed=0)
    a = np.zeros((3, 8), np.float32)
    env.step(a)
    obs, reward, term, trunc, infos = env.step(a)
    assert trunc.all() and not term.any()
    final = infos["state"].copy()
    obs, reward, term, trunc, infos = env.step(np.ones((3, 8), np.float32))
    np.testing.assert_array_equal(reward, 0.0)  # the reset step: action ignored
    assert not term.any() and not trunc.any()
    np.testing.assert_array_equal(infos["t"], 0.0)
    assert not np.allclose(infos["state"], final)
    np.testing.assert_array_equal(obs, infos["state"][..., 0].astype(np.float32))
    obs, reward, *_ = env.step(a)
    assert (reward != 0).all()


def test_vector_env_same_step_autoreset_reports_final_obs():
    env = PDEControlVectorEnv(2, "heat-track", max_episode_steps=1, autoreset_mode="SameStep")
    env.reset(seed=0)
    obs, reward, term, trunc, infos = env.step(np.zeros((2, 8), np.float32))
    assert trunc.all() and infos["_final_obs"].all()
    assert infos["final_obs"].shape == (2, 64)
    assert not np.allclose(infos["final_obs"], obs)


def test_vector_env_torch_backend_on_device(device):
    env = PDEControlVectorEnv(
        4, "ks-stabilize", device=device, dtype="float32", array_backend="torch", n_sensors=32
    )
    obs, infos = env.reset(seed=0)
    assert isinstance(obs, torch.Tensor) and obs.device.type == device.type
    assert obs.shape == (4, 32) and obs.dtype == torch.float32
    actions = torch.full((4, 8), 0.3, device=device)
    for _ in range(4):
        obs, reward, term, trunc, infos = env.step(actions)
    assert reward.device.type == device.type and term.dtype == torch.bool
    assert infos["state"].shape == (4, 64, 1) and infos["state"].dtype == torch.float32
    assert torch.isfinite(obs).all() and not term.any()
    # float32 follows the float64 run closely over a few steps
    ref = PDEControlVectorEnv(4, "ks-stabilize", array_backend="torch", n_sensors=32)
    ref.reset(seed=0)
    for _ in range(4):
        ref_obs = ref.step(actions.cpu().double())[0]
    torch.testing.assert_close(obs.cpu(), ref_obs, rtol=1e-3, atol=1e-3)


def test_vector_env_invalid_actions():
    env = PDEControlVectorEnv(4, "heat-track")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"\(4, 8\)"):
        env.step(np.zeros((4, 7), np.float32))
    bad = np.zeros((4, 8), np.float32)
    bad[2, 3] = np.nan
    with pytest.raises(ValueError, match=r"sub-environment\(s\) \[2\]"):
        env.step(bad)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "action, match",
    [
        (np.zeros(7, np.float32), r"shape \(8,\)"),
        (np.zeros((1, 8), np.float32), r"shape \(8,\)"),
        (np.array([np.nan] + [0.0] * 7, np.float32), "NaN"),
    ],
)
def test_invalid_actions_raise(action, match):
    env = PDEControlEnv("heat-track")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        env.step(action)


def test_out_of_bounds_actions_clip_or_raise():
    clip = PDEControlEnv("heat-track")
    clip.reset(seed=0)
    a = clip.step(np.full(8, 5.0, np.float32))[4]["state"]
    clip.reset(seed=0)
    b = clip.step(np.full(8, 1.0, np.float32))[4]["state"]
    np.testing.assert_array_equal(a, b)
    strict = PDEControlEnv("heat-track", action_bounds="error")
    strict.reset(seed=0)
    with pytest.raises(ValueError, match="outside the action space"):
        strict.step(np.full(8, 1.5, np.float32))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"task": "heat_track"}, UnknownNameError, "heat-track"),
        ({"system": "burger"}, UnknownNameError, "burgers"),
        ({"system": "lorenz63"}, ValueError, "ODEControl"),
        ({"system": "navier_stokes_2d"}, ValueError, "1-D single-channel"),
        ({"system": "gray_scott"}, ValueError, "1-D single-channel"),
        ({"method": "euler"}, UnknownNameError, "etdrk4"),
        ({"resolution": 63}, ValueError, "even resolution"),
        ({"resolution": 4}, ValueError, "resolution"),
        ({"n_sensors": 10}, ValueError, "divide the resolution 64"),
        ({"n_actuators": 0}, ValueError, "n_actuators"),
        ({"actuator_width": 0.7}, ValueError, "at most 0.5"),
        ({"action_low": 2.0}, ValueError, "below"),
        ({"dt": -0.1}, ValueError, "dt"),
        ({"method": "rk4", "solver_dt": 0.05}, ValueError, "stability limit"),
        ({"target": np.zeros(32)}, ValueError, r"shape \(64,\)"),
        ({"target": np.full(64, np.nan)}, ValueError, "finite"),
        ({"params": "sampled"}, ValueError, "random"),
        ({"params": {"nu": -1.0}}, ValueError, "nu"),
        ({"params": {"mu": 1.0}}, UnknownNameError, "nu"),
        ({"system_options": {"resolution": 32}}, ValueError, "resolution=..."),
        ({"dtype": "float16"}, ValueError, "float32"),
        ({"action_cost": -1.0}, ValueError, "action_cost"),
        ({"max_episode_steps": 0}, ValueError, "max_episode_steps"),
        ({"action_bounds": "wrap"}, ValueError, "clip"),
    ],
)
def test_bad_construction_arguments(kwargs, error, match):
    kwargs = {"task": "heat-track", **kwargs}
    with pytest.raises(error, match=match):
        gymnasium.make(ENV_ID, **kwargs)


def test_other_1d_system_on_a_task_and_config():
    env = PDEControlEnv("ks-stabilize", system="allen_cahn", resolution=32)
    _check(env)
    cfg = env.dynamics.config()
    assert cfg["system"]["name"] == "allen_cahn" and cfg["task"] == "ks-stabilize"
    assert cfg["system"]["options"]["domain"] == [systems.get("allen_cahn").domain[0]]
    assert len(cfg["actuator_centers"]) == 8 and cfg["method"] == "etdrk4"


def test_stable_baselines3_ppo_on_pde_and_surrogate_envs(tmp_path):
    """Every environment trains end to end with SB3 (single env and the batched adapter)."""
    sb3 = pytest.importorskip("stable_baselines3")
    import gymnasium

    from simsci.envs import PDEControlVectorEnv, to_sb3
    from simsci.models import ControlledODE
    from simsci.train import save_model

    env = gymnasium.make("simsci/PDEControl-v0", task="heat-track")
    model = sb3.PPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0)
    model.learn(total_timesteps=64)
    venv = to_sb3(PDEControlVectorEnv(4, "ks-stabilize", max_episode_steps=8))
    model = sb3.PPO("MlpPolicy", venv, n_steps=16, batch_size=32, n_epochs=1, seed=0)
    model.learn(total_timesteps=128)
    assert model.num_timesteps >= 128

    surrogate = ControlledODE(
        state_shape=(2,),
        action_dim=1,
        dt=0.05,
        env_id="simsci/ODEControl-v0",
        env_kwargs={"task": "pendulum-swingup"},
        hidden_dim=8,
        depth=1,
    )
    path = save_model(surrogate, tmp_path / "s.pt")
    env = gymnasium.make("simsci/Surrogate-v0", checkpoint=str(path))
    model = sb3.PPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0)
    model.learn(total_timesteps=64)
    assert model.num_timesteps >= 64
