"""``to_sb3``: SB3's same-step semantics without changing the caller's environment, a
partial ``reset(options={"reset_mask": ...})`` on the vector envs, and episode statistics
as SB3's Monitor writes them."""

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from simsci.envs import DrivingVectorEnv, ODEControlVectorEnv, to_sb3

pytest.importorskip("stable_baselines3")

DRIVING = {"num_roads": 1, "route_length": 1500.0}


def _pendulum(mode: str) -> ODEControlVectorEnv:
    return ODEControlVectorEnv(4, "pendulum-swingup", max_episode_steps=7, autoreset_mode=mode)


def _actions(rng, venv, steps):
    """(steps, num_envs, *action shape) uniform actions in the action box, float32."""
    box = venv.action_space
    size = (steps, venv.num_envs, *box.shape)
    return rng.uniform(box.low, box.high, size=size).astype(np.float32)


def test_the_adapter_leaves_the_environment_as_it_was():
    env = _pendulum("NextStep")
    before = (env.autoreset_mode, dict(env.metadata))
    to_sb3(env)
    assert (
        (env.autoreset_mode, dict(env.metadata))
        == before
        == (
            AutoresetMode.NEXT_STEP,
            {**type(env).metadata, "autoreset_mode": AutoresetMode.NEXT_STEP},
        )
    )


@pytest.mark.parametrize(
    "make",
    [
        _pendulum,
        lambda mode: DrivingVectorEnv(3, max_episode_steps=5, autoreset_mode=mode, **DRIVING),
    ],
    ids=["pendulum", "driving"],
)
def test_next_step_env_gives_what_a_same_step_env_gives_bit_for_bit(make):
    # the partial reset draws from the env's generator exactly as SameStep's reset does
    a, b = to_sb3(make("NextStep")), to_sb3(make("SameStep"))
    a.seed(3), b.seed(3)
    obs_a, obs_b = a.reset(), b.reset()
    rng = np.random.default_rng(0)
    episodes = 0
    for act in _actions(rng, a, 12):
        a.step_async(act), b.step_async(act)
        (obs_a, r_a, d_a, i_a), (obs_b, r_b, d_b, i_b) = a.step_wait(), b.step_wait()
        flat = (
            (lambda o: np.concatenate([o[k].ravel() for k in sorted(o)]))
            if isinstance(obs_a, dict)
            else np.ravel
        )
        assert np.array_equal(flat(obs_a), flat(obs_b))
        assert np.array_equal(r_a, r_b) and np.array_equal(d_a, d_b)
        for i in np.flatnonzero(d_a):
            episodes += 1
            fa, fb = i_a[i]["terminal_observation"], i_b[i]["terminal_observation"]
            assert np.array_equal(flat(fa), flat(fb))
            assert i_a[i]["TimeLimit.truncated"] == i_b[i]["TimeLimit.truncated"]
            assert i_a[i]["episode"]["l"] == i_b[i]["episode"]["l"] <= 7
            assert i_a[i]["episode"]["r"] == i_b[i]["episode"]["r"]
    assert episodes >= 3  # some episodes ended inside the 12 steps
    assert a.venv.autoreset_mode == AutoresetMode.NEXT_STEP  # still the caller's mode


def test_episode_statistics_are_the_sums_of_the_rewards():
    venv = to_sb3(_pendulum("NextStep"))
    venv.seed(0)
    venv.reset()
    total = np.zeros(4)
    rng = np.random.default_rng(1)
    for act in _actions(rng, venv, 7):
        venv.step_async(act)
        _, reward, done, infos = venv.step_wait()
        total += reward.astype(np.float64)
    assert done.all()  # the 7-step time limit
    for i, info in enumerate(infos):
        assert info["episode"]["l"] == 7 and info["TimeLimit.truncated"]
        assert info["episode"]["r"] == pytest.approx(total[i], rel=1e-6)
        assert info["episode"]["t"] >= 0.0


def test_ppo_logs_episode_returns_without_a_monitor():
    from stable_baselines3 import PPO

    venv = to_sb3(_pendulum("NextStep"))
    model = PPO("MlpPolicy", venv, n_steps=16, batch_size=32, n_epochs=1, seed=0)
    model.learn(total_timesteps=64)
    assert len(model.ep_info_buffer) >= 4  # SB3 read info["episode"] itself
    assert all(info["l"] == 7 for info in model.ep_info_buffer)


def test_reset_mask_resets_only_the_masked_rows_and_is_checked():
    env = _pendulum("NextStep")
    with pytest.raises(Exception, match="full reset"):
        env.reset(options={"reset_mask": np.ones(4, bool)})
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(np.zeros((4, 1), np.float32))
    mask = np.array([True, False, True, False])
    again, _ = env.reset(options={"reset_mask": mask})
    assert np.array_equal(again[~mask], obs[~mask]) and not np.array_equal(again[mask], obs[mask])
    for bad, match in (
        ({"reset_mask": np.ones(3, bool)}, "shape \\(4,\\)"),
        ({"reset_mask": np.ones(4)}, "bool array"),
        ({"whatever": 1}, "only 'reset_mask'"),
    ):
        with pytest.raises(ValueError, match=match):
            env.reset(options=bad)
