"""The checks every simsci environment passes (the issue's list), over all of them.

Environment-specific behaviour (physics, tasks, actuators, surrogates) is tested in the
files beside this one.
"""

import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import simsci.envs  # noqa: F401
from simsci.envs import PDE_TASKS, TASKS
from simsci.models import ControlledODE

SURROGATE = ControlledODE(
    state_shape=(2,),
    action_dim=1,
    dt=0.05,
    env_id="simsci/ODEControl-v0",
    env_kwargs={"task": "pendulum-swingup"},
    hidden_dim=8,
    depth=1,
)

CASES = [
    *[("simsci/ODEControl-v0", {"task": task}) for task in TASKS],
    ("simsci/ODEControl-v0", {"task": "lorenz63-stabilize", "system": "stochastic_lorenz"}),
    *[("simsci/PDEControl-v0", {"task": task}) for task in PDE_TASKS],
    ("simsci/Surrogate-v0", {"model": SURROGATE}),
]
IDS = [f"{env_id.split('/')[1]}:{kw.get('task', 'model')}" for env_id, kw in CASES]


@pytest.fixture(params=range(len(CASES)), ids=IDS)
def case(request):
    return CASES[request.param]


def test_gymnasium_check_env(case):
    env_id, kwargs = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # unbounded boxes, physical units
        check_env(gymnasium.make(env_id, **kwargs).unwrapped, skip_render_check=True)


def _rollout(env, seed, steps=12):
    rng = np.random.default_rng(seed)
    space = env.action_space
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for _ in range(steps):
        obs, reward, *_ = env.step(rng.uniform(space.low, space.high).astype(np.float32))
        out += [obs, np.array([reward])]
    return np.concatenate([np.ravel(o) for o in out])


def test_same_seed_same_rollout_and_observations_in_space(case):
    env_id, kwargs = case
    a = _rollout(gymnasium.make(env_id, **kwargs), seed=7)
    b = _rollout(gymnasium.make(env_id, **kwargs), seed=7)
    c = _rollout(gymnasium.make(env_id, **kwargs), seed=8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    env = gymnasium.make(env_id, **kwargs)
    obs, _ = env.reset(seed=0)
    for _ in range(10):
        assert env.observation_space.contains(obs)
        obs = env.step(env.action_space.sample())[0]


def test_vector_env_of_one_equals_the_single_env(case):
    env_id, kwargs = case
    single = gymnasium.make(env_id, **kwargs)
    vec = gymnasium.make_vec(env_id, num_envs=1, vectorization_mode="vector_entry_point", **kwargs)
    o1, _ = single.reset(seed=11)
    o2, _ = vec.reset(seed=11)
    np.testing.assert_array_equal(o1, o2[0])
    rng = np.random.default_rng(0)
    space = single.action_space
    for _ in range(5):
        a = rng.uniform(space.low, space.high).astype(np.float32)
        s, v = single.step(a), vec.step(a[None])
        np.testing.assert_array_equal(s[0], v[0][0])
        assert s[1] == v[1][0]


def test_invalid_actions_raise(case):
    env_id, kwargs = case
    env = gymnasium.make(env_id, **kwargs).unwrapped
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step(env.action_space.sample())
    env.reset(seed=0)
    A = env.action_space.shape[0]
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(A + 1, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        env.step(np.full(A, np.nan, np.float32))
    with pytest.raises(TypeError, match="real numbers"):
        env.step(np.array(["x"] * A))
    strict = gymnasium.make(env_id, action_bounds="error", **kwargs).unwrapped
    strict.reset(seed=0)
    with pytest.raises(ValueError, match="outside the action space"):
        strict.step(strict.action_space.high + 1.0)


def test_stepping_after_the_end_without_reset_raises(case):
    env_id, kwargs = case
    env = gymnasium.make(env_id, **kwargs).unwrapped
    env.dynamics.max_episode_steps = 2
    env.reset(seed=0)
    env.step(np.zeros(env.action_space.shape, np.float32))
    assert env.step(np.zeros(env.action_space.shape, np.float32))[3]
    with pytest.raises(gymnasium.error.ResetNeeded, match="reset"):
        env.step(np.zeros(env.action_space.shape, np.float32))
