"""simsci/Driving-v0 where it meets Stable Baselines3: ``action_scale="normalized"`` (a
[-1, 1] box mapped affinely onto the physical one) and ``observation="flat"`` (one float32
vector of the Dict's entries) pass SB3's ``check_env`` without a warning, and change
nothing about the world: the same physical actions drive the same trajectory."""

import warnings

import gymnasium
import numpy as np
import pytest
import torch

import simsci.envs  # noqa: F401
from simsci.envs import (
    DrivingEnv,
    DrivingVectorEnv,
    RecordEpisodes,
    evaluate_driving,
    lane_keeping_policy,
    normalized_actions,
    physical_actions,
    to_sb3,
)
from simsci.envs._driving import FLAT_ORDER

KW = {"num_roads": 1, "route_length": 1500.0}
SB3 = {"observation": "flat", "action_scale": "normalized"}
ID = "simsci/Driving-v0"


def _sb3_user_warnings(env) -> list[str]:
    from stable_baselines3.common.env_checker import check_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, warn=True)
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, UserWarning) and "stable_baselines3" in w.filename
    ]


def test_sb3_check_env_warns_on_the_defaults_and_not_on_flat_normalized():
    pytest.importorskip("stable_baselines3")
    # the seam the issue reports: lanes (8, 20, 2) read as an image, an asymmetric box
    told = " ".join(_sb3_user_warnings(DrivingEnv(**KW)))
    assert "image" in told and "normalized Box action space" in told
    assert _sb3_user_warnings(DrivingEnv(**KW, **SB3)) == []


def test_flat_normalized_env_passes_gymnasium_check_env_and_to_sb3():
    pytest.importorskip("stable_baselines3")
    from gymnasium.utils.env_checker import check_env

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # unbounded boxes
        check_env(gymnasium.make(ID, **KW, **SB3).unwrapped, skip_render_check=True)
    venv = to_sb3(DrivingVectorEnv(2, max_episode_steps=3, **KW, **SB3))
    obs = venv.reset()
    assert obs.shape == (2, 464) and obs.dtype == np.float32
    for _ in range(3):
        venv.step_async(np.zeros((2, 2), np.float32))
        obs, _, done, infos = venv.step_wait()
    assert done.all() and infos[0]["terminal_observation"].shape == (464,)


def test_normalized_plus_minus_one_applies_the_physical_bounds():
    env = DrivingEnv(action_scale="normalized", **KW)
    assert env.action_space == gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    obs, _ = env.reset(seed=0)
    assert obs["ego"][0] > 5.0  # moving: -8 m/s^2 for 0.1 s does not stop it
    for action, (accel, steer) in (([1.0, 1.0], (4.0, 0.5)), ([-1.0, -1.0], (-8.0, -0.5))):
        v0 = float(obs["ego"][0])
        obs, *_ = env.step(np.array(action, np.float32))
        # ego features [speed, accel, steer, ...]: the applied acceleration and steering
        assert obs["ego"][1] == pytest.approx(accel, rel=1e-4)
        assert obs["ego"][2] == steer
        assert obs["ego"][0] == pytest.approx(v0 + 0.1 * accel, abs=1e-4)
    # the box is the normalised one: clipped there, rejected there with action_bounds
    clipped = DrivingEnv(action_scale="normalized", **KW)
    clipped.reset(seed=0)
    assert clipped.step(np.array([3.0, 2.0], np.float32))[0]["ego"][2] == 0.5
    strict = DrivingEnv(action_scale="normalized", action_bounds="error", **KW)
    strict.reset(seed=0)
    with pytest.raises(ValueError, match=r"outside the action space \[\[-1.0, -1.0\]"):
        strict.step(np.array([4.0, 0.0], np.float32))  # a physical bound, too big here


def test_the_action_map_and_its_inverse():
    np.testing.assert_array_equal(physical_actions([-1.0, -1.0]), [-8.0, -0.5])
    np.testing.assert_array_equal(physical_actions([1.0, 1.0]), [4.0, 0.5])
    np.testing.assert_array_equal(physical_actions([0.0, 0.0]), [-2.0, 0.0])
    rng = np.random.default_rng(0)
    p = rng.uniform([-8, -0.5], [4, 0.5], (50, 2)).astype(np.float32)
    n = normalized_actions(p)
    assert n.dtype == np.float32 and np.all(np.abs(n) <= 1.0)
    np.testing.assert_allclose(physical_actions(n), p, atol=1e-6)
    # torch in, torch out, the same float32 numbers
    t = physical_actions(torch.from_numpy(n))
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
    np.testing.assert_array_equal(t.numpy(), physical_actions(n))


def _drive(env, actions, seed=4):
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for a in actions:
        obs, reward, term, trunc, info = env.step(a)
        out.append((obs, reward, term, trunc, info))
        if term or trunc:
            break
    return out


def test_same_seed_same_physical_actions_same_trajectory_in_either_scale():
    rng = np.random.default_rng(1)
    # gentle actions: the drive must go on for all 25 steps to compare them
    normalized = rng.uniform([0.2, -0.04], [0.5, 0.04], (25, 2)).astype(np.float32)
    physical = physical_actions(normalized)
    a = _drive(DrivingEnv(**KW), physical)
    b = _drive(DrivingEnv(action_scale="normalized", **KW), normalized)
    assert len(a) == len(b) == 26
    for k in FLAT_ORDER:
        np.testing.assert_array_equal(a[0][k], b[0][k])
    for (oa, *ra), (ob, *rb) in zip(a[1:], b[1:]):
        for k in FLAT_ORDER:
            np.testing.assert_array_equal(oa[k], ob[k])
        assert ra == rb  # reward, flags and info, bit for bit


def test_flat_is_the_dicts_entries_concatenated_in_the_documented_order():
    dict_env, flat_env = DrivingEnv(**KW), DrivingEnv(observation="flat", **KW)
    space = flat_env.dict_observation_space
    assert tuple(space.keys()) == FLAT_ORDER == tuple(sorted(FLAT_ORDER))
    assert space == dict_env.observation_space
    assert flat_env.observation_space == gymnasium.spaces.flatten_space(space)
    # D = 8 num_agents + 8 + 41 num_lanes
    assert flat_env.observation_space.shape == (8 * 16 + 8 + 41 * 8,)
    actions = np.tile(np.array([[0.5, 0.01]], np.float32), (6, 1))
    for d, f in zip(_drive(dict_env, actions), _drive(flat_env, actions)):
        obs_d = d if isinstance(d, dict) else d[0]
        obs_f = f if isinstance(f, np.ndarray) else f[0]
        assert obs_f.dtype == np.float32 and flat_env.observation_space.contains(obs_f)
        concat = np.concatenate([obs_d[k].ravel() for k in FLAT_ORDER])
        np.testing.assert_array_equal(obs_f, concat)
        np.testing.assert_array_equal(obs_f, gymnasium.spaces.flatten(space, obs_d))
        back = gymnasium.spaces.unflatten(space, obs_f)
        for k in FLAT_ORDER:
            np.testing.assert_array_equal(back[k], obs_d[k])


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_vector_env_flat_observation_is_num_envs_by_d(backend):
    env = DrivingVectorEnv(
        3, max_episode_steps=2, autoreset_mode="SameStep", array_backend=backend, **KW, **SB3
    )
    D = env.single_observation_space.shape[0]
    assert env.observation_space.shape == (3, D) and env.action_space.shape == (3, 2)
    obs, _ = env.reset(seed=0)
    assert tuple(obs.shape) == (3, D)
    actions = np.zeros((3, 2), np.float32)
    if backend == "torch":
        actions = torch.from_numpy(actions)
    env.step(actions)
    obs, _, _, trunc, infos = env.step(actions)  # the episodes end; SameStep resets now
    assert bool(trunc.all()) and tuple(infos["final_obs"].shape) == (3, D)
    # a vector env of one gives what the single environment gives
    single = DrivingEnv(**KW, **SB3)
    one = DrivingVectorEnv(1, **KW, **SB3)
    np.testing.assert_array_equal(single.reset(seed=2)[0], one.reset(seed=2)[0][0])
    a = np.array([0.3, -0.2], np.float32)
    np.testing.assert_array_equal(single.step(a)[0], one.step(a[None])[0][0])


def test_invalid_keyword_values_are_rejected_with_the_valid_names():
    from simsci.envs import VectorWorldVectorEnv

    with pytest.raises(ValueError, match=r"did you mean 'normalized'.*normalized, physical"):
        DrivingEnv(action_scale="normalised", **KW)
    with pytest.raises(ValueError, match=r"unknown observation 'image'.*dict, flat"):
        gymnasium.make_vec(ID, num_envs=2, vectorization_mode="vector_entry_point",
                           observation="image", **KW)  # fmt: skip
    with pytest.raises(TypeError, match="'physical', 'normalized'"):
        DrivingVectorEnv(2, action_scale=None, **KW)
    # checked before the generated world (and its model) is built
    with pytest.raises(ValueError, match="unknown observation 'flattened'"):
        VectorWorldVectorEnv(2, observation="flattened")


def test_the_lane_keeping_driver_refuses_what_it_cannot_read():
    env = DrivingEnv(observation="flat", **KW)
    obs, _ = env.reset(seed=0)
    with pytest.raises(TypeError, match="Dict observation"):
        lane_keeping_policy(obs)
    # unflattened, it drives; in a normalised env its actions go through the inverse map
    action = lane_keeping_policy(gymnasium.spaces.unflatten(env.dict_observation_space, obs))
    assert np.all(np.abs(normalized_actions(action)) <= 1.0)
    with pytest.raises(ValueError, match="physical actions"):
        evaluate_driving(lane_keeping_policy, episodes=1, action_scale="normalized", **KW)


def test_recorded_rollouts_state_the_action_scale(tmp_path):
    import simsci.data

    path = tmp_path / "normalized.h5"
    env = RecordEpisodes(gymnasium.make(ID, max_episode_steps=3, **KW, **SB3), path)
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.array([1.0, 0.0], np.float32))
    env.close()
    meta = simsci.data.open(path).meta
    assert meta["env_kwargs"]["action_scale"] == "normalized"
    assert meta["action_space"]["low"] == -1.0 and meta["action_space"]["high"] == 1.0
    assert meta["observation_space"]["shape"] == [464]
