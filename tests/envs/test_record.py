"""Recording gymnasium episodes into rollout files (RecordEpisodes, RecordVectorEpisodes).

The recorded rows are checked against an independent source: a fresh environment
replaying the stored actions from the stored seed (Pendulum, CartPole), or the exact
dynamics of a small test environment whose info carries ``t`` and ``state``.
"""

import os
import subprocess
import sys

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorWrapper
from gymnasium.wrappers import TimeLimit

import simsci.data
from simsci.envs._record import (
    RecordEpisodes,
    RecordVectorEpisodes,
    jsonable,
    space_from_json,
    space_to_json,
)

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


class Osc(gymnasium.Env):
    """A pendulum (semi-implicit Euler) whose info carries t and the raw float64 state;
    the observation (cos, sin, omega) differs from the state (theta, omega)."""

    dt = 0.1
    state_shape = (2,)
    obs_names = ("cos", "sin", "omega")
    state_names = ("theta", "omega")

    def __init__(self, drop_t_at=None):
        self.observation_space = spaces.Box(-10.0, 10.0, (3,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.drop_t_at = drop_t_at

    def _obs(self):
        th, om = self.state
        return np.array([np.cos(th), np.sin(th), om], np.float32)

    def _info(self):
        info = {"t": self.t, "state": self.state.copy()}
        if self.drop_t_at is not None and self.k >= self.drop_t_at:
            del info["t"]
        return info

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = self.np_random.uniform(-1.0, 1.0, 2)
        self.t, self.k = 1.0, 0
        return self._obs(), self._info()

    def step(self, action):
        th, om = self.state
        om = om + self.dt * (-np.sin(th) + float(np.asarray(action).reshape(())))
        th = th + self.dt * om
        self.state = np.array([th, om])
        self.t += self.dt
        self.k += 1
        return self._obs(), -(th**2), bool(abs(om) > 1.2), False, self._info()


def osc(steps=15, **kwargs):
    return TimeLimit(Osc(**kwargs), max_episode_steps=steps)


def check_osc_episode(ep, *, complete=True):
    """Every row of an Osc episode against the exact dynamics and the row layout."""
    st, act, x = ep["state"], ep["action"], ep["x"]
    n = len(st) - 1
    assert n >= 1 and st.dtype == np.float64 and x.dtype == np.float32
    for j in range(n):
        th, om = st[j]
        om2 = om + 0.1 * (-np.sin(th) + float(act[j, 0]))
        th2 = th + 0.1 * om2
        assert st[j + 1].tolist() == [th2, om2]
        assert ep["reward"][j] == np.float32(-(th2**2))
        assert ep["terminated"][j] == (abs(om2) > 1.2)
    for j in range(n + 1):
        th, om = st[j]
        np.testing.assert_array_equal(x[j], np.array([np.cos(th), np.sin(th), om], np.float32))
    t = 1.0 + np.zeros(1)
    ts = [t[0]]
    for _ in range(n):
        t = t + 0.1
        ts.append(t[0])
    np.testing.assert_array_equal(ep["t"], ts)
    assert np.isnan(ep["action"][n]).all() and np.isnan(ep["reward"][n])
    assert not ep["terminated"][n] and not ep["truncated"][n]
    if complete:  # ended by the env: terminated, or the 15-step time limit
        assert ep["terminated"][n - 1] or (ep["truncated"][n - 1] and n == 15)


def steps_until(rec, episodes, step, limit=3000):
    """Call ``step()`` until ``rec`` has recorded ``episodes`` (fail after ``limit``)."""
    for _ in range(limit):
        if rec.recorded >= episodes:
            return
        step()
    pytest.fail(f"{rec.recorded} of {episodes} episodes recorded after {limit} steps")


def random_step(env):
    """One random action; reset when the episode ended."""

    def step():
        *_, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()

    return step


def assert_files_equal(a, b):
    a, b = simsci.data.open(a), simsci.data.open(b)
    assert len(a) == len(b) and a.step_fields.keys() == b.step_fields.keys()
    for i in range(len(a)):
        ea, eb = a[i], b[i]
        assert ea.keys() == eb.keys()
        for key in ea:
            assert ea[key].dtype == eb[key].dtype, key
            np.testing.assert_array_equal(ea[key], eb[key], err_msg=f"episode {i}, {key}")


# ------------------------------------------------------------------ single env
def test_pendulum_round_trip_by_replay(tmp_path):
    path = tmp_path / "pendulum.h5"
    env = RecordEpisodes(gymnasium.make("Pendulum-v1", max_episode_steps=25), path, max_episodes=3)
    env.action_space.seed(0)
    env.reset(seed=7)
    steps_until(env, 3, random_step(env))
    assert path.exists()  # written as soon as max_episodes were recorded
    env.close()
    assert simsci.data.check_file(path) == []
    ds = simsci.data.open(path)
    assert ds.kind == "rollout" and ds.system == "Pendulum-v1" and len(ds) == 3
    meta = ds.meta
    assert meta["env_id"] == "Pendulum-v1" and meta["env_kwargs"] == {}
    assert meta["max_episode_steps"] == 25 and meta["dt"] == 0.05 and meta["seed"] == 7
    assert space_from_json(meta["action_space"]) == env.action_space
    assert ds.column("seed").tolist() == [7, -1, -1]
    np.testing.assert_array_equal(ds.lengths, [26, 26, 26])

    replay = gymnasium.make("Pendulum-v1", max_episode_steps=25)
    for i, seed in enumerate([7, None, None]):
        ep = ds[i]
        obs, _ = replay.reset(seed=seed)
        np.testing.assert_array_equal(ep["x"][0], obs)
        for j, action in enumerate(ep["action"][:-1]):
            obs, reward, terminated, truncated, _ = replay.step(action)
            np.testing.assert_array_equal(ep["x"][j + 1], obs)
            assert ep["reward"][j] == np.float32(reward)
            assert (ep["terminated"][j], ep["truncated"][j]) == (terminated, truncated)
        assert truncated
        assert ep["x"].dtype == np.float32 and ep["action"].shape == (26, 1)
        assert np.isnan(ep["action"][-1]).all() and np.isnan(ep["reward"][-1])
        assert not ep["terminated"][-1] and not ep["truncated"][-1]
        np.testing.assert_array_equal(ep["t"], np.arange(26.0))


def test_discrete_actions_and_termination(tmp_path):
    path = tmp_path / "cartpole.h5"
    with RecordEpisodes(gymnasium.make("CartPole-v1"), path, max_episodes=2) as env:
        env.action_space.seed(1)
        env.reset(seed=3)
        steps_until(env, 2, random_step(env))
    ds = simsci.data.open(path)
    replay = gymnasium.make("CartPole-v1")
    for i, seed in enumerate([3, None]):
        ep = ds[i]
        assert ep["action"].dtype == np.int64 and ep["action"].shape == (len(ep["t"]),)
        assert ep["action"][-1] == 0 and ep["terminated"][-2]
        obs, _ = replay.reset(seed=seed)
        np.testing.assert_array_equal(ep["x"][0], obs)
        for j, action in enumerate(ep["action"][:-1]):
            obs, reward, terminated, _, _ = replay.step(int(action))
            np.testing.assert_array_equal(ep["x"][j + 1], obs)
            assert ep["terminated"][j] == terminated and ep["reward"][j] == reward
    assert ds.meta["action_space"] == {"type": "Discrete", "n": 2, "start": 0}


def test_info_time_state_and_names(tmp_path):
    path = tmp_path / "osc.h5"
    env = RecordEpisodes(osc(), path, meta={"note": "test"}, compression="gzip")
    env.action_space.seed(2)
    env.reset(seed=11)
    steps_until(env, 4, random_step(env))
    env.step(env.action_space.sample())  # one transition of a fifth episode, cut by close
    env.close()
    ds = simsci.data.open(path)
    assert ds.names("x") == ["cos", "sin", "omega"] and ds.names("state") == ["theta", "omega"]
    assert ds.meta["dt"] == 0.1 and ds.meta["note"] == "test" and ds.meta["env_id"] is None
    assert ds.system == "Osc"
    assert len(ds) == 5  # 4 ended + the one running at close (1 transition, truncated)
    for i in range(4):
        check_osc_episode(ds[i])
    last = ds[4]
    check_osc_episode(last, complete=False)
    assert last["truncated"][-2] and not last["terminated"][-2]


def test_interrupted_episodes_are_truncated_or_dropped(tmp_path):
    path = tmp_path / "cut.h5"
    env = RecordEpisodes(gymnasium.make("Pendulum-v1"), path)
    env.reset(seed=0)
    for _ in range(5):
        env.step(env.action_space.sample())
    env.reset()  # interrupts the first episode after 5 transitions
    env.reset()  # no transition: no episode
    for _ in range(3):
        env.step(env.action_space.sample())
    env.close()  # interrupts the third after 3
    ds = simsci.data.open(path)
    np.testing.assert_array_equal(ds.lengths, [6, 4])
    for ep in ds:
        n = len(ep["t"]) - 1
        expected = np.zeros(n + 1, bool)
        expected[n - 1] = True
        np.testing.assert_array_equal(ep["truncated"], expected)
        assert not ep["terminated"].any()
    assert ds.column("seed").tolist() == [0, -1]


def test_empty_recording_is_a_valid_file(tmp_path):
    path = tmp_path / "empty.h5"
    env = RecordEpisodes(gymnasium.make("Pendulum-v1"), path)
    env.reset(seed=0)
    env.close()
    assert simsci.data.check_file(path) == [] and len(simsci.data.open(path)) == 0


def test_file_appears_only_when_complete(tmp_path):
    path = tmp_path / "late.h5"
    env = RecordEpisodes(gymnasium.make("Pendulum-v1", max_episode_steps=4), path)
    env.reset(seed=0)
    for _ in range(9):
        *_, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    assert env.recorded == 2 and not path.exists()
    assert all(p.name.startswith(".late.h5.tmp-") for p in tmp_path.iterdir())
    env.close()
    assert path.exists() and len(simsci.data.open(path)) == 3


def test_killed_process_leaves_nothing_under_the_name(tmp_path):
    path = tmp_path / "killed.h5"
    script = (
        "import os, sys, gymnasium\n"
        "from simsci.envs._record import RecordEpisodes\n"
        "env = RecordEpisodes(gymnasium.make('Pendulum-v1', max_episode_steps=3), sys.argv[1])\n"
        "env.reset(seed=0)\n"
        "for _ in range(10):\n"
        "    *_, te, tr, _ = env.step(env.action_space.sample())\n"
        "    if te or tr:\n"
        "        env.reset()\n"
        "assert env.recorded == 3\n"
        "os._exit(0)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert not path.exists()


# ------------------------------------------------------------------ vector envs
def run_vector(venv, path, episodes, *, seed=10, action_seed=1):
    """Step with random actions until ``episodes`` are recorded (DISABLED: reset the
    finished sub-envs by mask); return the sub-env index of each finished episode."""
    rec = RecordVectorEpisodes(venv, path, max_episodes=episodes)
    rec.action_space.seed(action_seed)
    rec.reset(seed=seed)
    finished = []

    def step():
        *_, terminated, truncated, _ = rec.step(rec.action_space.sample())
        done = np.asarray(terminated) | np.asarray(truncated)
        finished.extend(np.flatnonzero(done).tolist())
        if rec.autoreset_mode == AutoresetMode.DISABLED and done.any():
            rec.reset(options={"reset_mask": done})

    steps_until(rec, episodes, step)
    rec.close()
    return finished[:episodes]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize(
    "env_id,kwargs", [("Pendulum-v1", {"max_episode_steps": 9}), ("CartPole-v1", {})]
)
def test_vector_episodes_replay_exactly(env_id, kwargs, mode, tmp_path):
    path = tmp_path / "vec.h5"
    n, episodes = 3, 7
    venv = gymnasium.make_vec(
        env_id,
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": mode},
        **kwargs,
    )
    finished = run_vector(venv, path, episodes)
    assert simsci.data.check_file(path) == []
    ds = simsci.data.open(path)
    assert len(ds) == episodes
    assert ds.meta["num_envs"] == n and ds.meta["autoreset_mode"] == mode.value
    assert ds.meta["env_id"] == env_id and ds.meta["env_kwargs"] == {}
    # episode k of the file belongs to sub-env finished[k]; replay each sub-env's
    # episodes in a fresh single env seeded as the vector env seeded it (10 + i)
    for i in range(n):
        replay = gymnasium.make(env_id, **kwargs)
        for k, idx in enumerate(np.flatnonzero(np.asarray(finished) == i)):
            ep = ds[int(idx)]
            seed = 10 + i if k == 0 else None
            assert ep["seed"] == (-1 if seed is None else seed)
            obs, _ = replay.reset(seed=seed)
            np.testing.assert_array_equal(ep["x"][0], obs)
            for j, action in enumerate(ep["action"][:-1]):
                obs, reward, terminated, truncated, _ = replay.step(action)
                np.testing.assert_array_equal(ep["x"][j + 1], obs)
                assert ep["reward"][j] == np.float32(reward)
                assert (ep["terminated"][j], ep["truncated"][j]) == (terminated, truncated)
            assert terminated or truncated


class TorchArrays(VectorWrapper):
    """A vector env whose arrays are torch tensors (observations, rewards, flags, infos)."""

    def _t(self, value):
        if isinstance(value, dict):
            return {k: self._t(v) for k, v in value.items()}
        if isinstance(value, np.ndarray):
            if value.dtype == object:
                return [None if v is None else self._t(v) for v in value]
            return torch.from_numpy(value.copy())
        return value

    def reset(self, *, seed=None, options=None):
        return tuple(self._t(v) for v in self.env.reset(seed=seed, options=options))

    def step(self, actions):
        return tuple(self._t(v) for v in self.env.step(actions.numpy()))


@pytest.mark.parametrize("mode", MODES[:2], ids=lambda m: m.value)
def test_vector_info_time_state_numpy_and_torch(mode, tmp_path):
    n = 3
    paths = {}
    for backend in ("numpy", "torch"):
        venv = SyncVectorEnv([osc] * n, autoreset_mode=mode)
        if backend == "torch":
            venv = TorchArrays(venv)
        paths[backend] = tmp_path / f"{backend}.h5"
        rec = RecordVectorEpisodes(venv, paths[backend], max_episodes=9)
        rng = np.random.default_rng(0)
        rec.reset(seed=5)

        def step(rec=rec, rng=rng, backend=backend):
            actions = rng.uniform(-1, 1, (n, 1)).astype(np.float32)
            rec.step(torch.from_numpy(actions) if backend == "torch" else actions)

        steps_until(rec, 9, step)
        rec.close()
    assert_files_equal(paths["numpy"], paths["torch"])
    ds = simsci.data.open(paths["torch"])
    assert ds.names("state") == ["theta", "omega"] and ds.meta["dt"] == 0.1
    for ep in ds:
        check_osc_episode(ep)


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_simsci_vector_env_torch_backend(mode, tmp_path):
    pytest.importorskip("simsci.envs._ode")
    path = tmp_path / "ode.h5"
    venv = gymnasium.make_vec(
        "simsci/ODEControl-v0",
        num_envs=2,
        vectorization_mode="vector_entry_point",
        array_backend="torch",
        autoreset_mode=mode,
        max_episode_steps=4,
    )
    run_vector(venv, path, 3)
    ds = simsci.data.open(path)
    assert ds.meta["env_id"] == "simsci/ODEControl-v0" and ds.meta["max_episode_steps"] == 4
    assert ds.meta["vector_kwargs"] == {"array_backend": "torch", "autoreset_mode": mode}
    assert "array_backend" not in ds.meta["env_kwargs"]
    assert ds.step_fields["state"].dtype == np.float64 and len(ds.names("x")) == 3
    dt = ds.meta["dt"]
    for ep in ds:
        assert len(ep["t"]) == 5 and ep["truncated"][-2]
        np.testing.assert_allclose(np.diff(ep["t"]), dt, rtol=1e-9)


# ------------------------------------------------------------------ bad input
class TupleObs(gymnasium.Env):  # Dict observations are recorded: test_record_dict.py
    observation_space = spaces.Tuple([spaces.Box(-1, 1, (2,))])
    action_space = spaces.Discrete(2)


class MultiAction(gymnasium.Env):
    observation_space = spaces.Box(-1, 1, (2,))
    action_space = spaces.MultiDiscrete([2, 3])


def test_bad_input_is_rejected_before_stepping(tmp_path):
    env = gymnasium.make("Pendulum-v1")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        RecordEpisodes(env, tmp_path / "no" / "such" / "x.h5")
    with pytest.raises(TypeError, match="Box observations.*FlattenObservation"):
        RecordEpisodes(TupleObs(), tmp_path / "x.h5")
    with pytest.raises(TypeError, match="Box or Discrete actions"):
        RecordEpisodes(MultiAction(), tmp_path / "x.h5")
    with pytest.raises(TypeError, match="Box observations"):
        RecordVectorEpisodes(SyncVectorEnv([TupleObs] * 2), tmp_path / "x.h5")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        RecordVectorEpisodes(SyncVectorEnv([osc] * 2), tmp_path / "no" / "x.h5")
    with pytest.raises(ValueError, match="is a directory"):
        RecordEpisodes(env, tmp_path)
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="max_episodes"):
            RecordEpisodes(env, tmp_path / "x.h5", max_episodes=bad)
    with pytest.raises(ValueError, match="compression"):
        RecordEpisodes(env, tmp_path / "x.h5", compression="zip")
    with pytest.raises(ValueError, match=r"\['env_id'\] are written by the recorder"):
        RecordEpisodes(env, tmp_path / "x.h5", meta={"env_id": "mine"})
    with pytest.raises(TypeError, match="JSON"):
        RecordEpisodes(env, tmp_path / "x.h5", meta={"policy": object()})
    rec = RecordEpisodes(env, tmp_path / "x.h5")
    with pytest.raises(ValueError, match="seeds must be None or ints"):
        rec.reset(seed=-1)
    assert not (tmp_path / "x.h5").exists()


def test_env_that_stops_reporting_time_is_an_error(tmp_path):
    env = RecordEpisodes(osc(drop_t_at=2), tmp_path / "x.h5")
    env.reset(seed=0)
    env.step(env.action_space.sample())
    with pytest.raises(RuntimeError, match="no 't'.*always or never"):
        env.step(env.action_space.sample())


def test_json_helpers():
    assert jsonable(
        {"a": np.float32(1.5), "b": (1, np.int64(2)), 3: float("inf"), "m": AutoresetMode.SAME_STEP}
    ) == {"a": 1.5, "b": [1, 2], "3": "inf", "m": "SameStep"}
    thing = object()
    assert jsonable({"f": thing}) == {"f": str(thing)}
    for space in (
        spaces.Box(-np.inf, np.inf, (2, 3), np.float32),
        spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, np.inf]), dtype=np.float64),
        spaces.Discrete(5, start=2),
    ):
        assert space_from_json(space_to_json(space)) == space
    with pytest.raises(TypeError, match="Box, Discrete and Dict"):
        space_to_json(spaces.MultiBinary(3))


def test_env_kwargs_keep_json_values(tmp_path):
    env = gymnasium.make("Pendulum-v1", g=np.float64(9.5))
    with RecordEpisodes(env, tmp_path / "g.h5") as rec:
        rec.reset(seed=0)
        rec.step(rec.action_space.sample())
    meta = simsci.data.open(tmp_path / "g.h5").meta
    assert meta["env_kwargs"] == {"g": 9.5} and os.path.exists(tmp_path / "g.h5")
