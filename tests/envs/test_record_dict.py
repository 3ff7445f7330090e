"""Dict observations in rollout files: recording (one step field x.<key> per entry), reading
back (rollout_observations / rollout_observation_space), Minari export/import, and
`simsci env rollout` of simsci/Driving-v0.

Observations are checked against independent sources: what the environment returned
(single env), and a recording of the same seeded run with observation="flat", whose
vector is gymnasium's flattening of the Dict (vector envs, both autoreset modes)."""

import json

import gymnasium
import h5py
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import simsci.data
from simsci.cli import main
from simsci.envs import (
    RecordEpisodes,
    RecordVectorEpisodes,
    rollout_observation_space,
    rollout_observations,
)
from simsci.envs._driving import EGO_FEATURES
from simsci.envs._spaces import space_from_json, space_to_json

#: a small, fast Driving-v0: one short road, few agents and lanes, 5-step episodes
SMALL = dict(
    num_roads=1,
    route_length=600.0,
    num_agents=3,
    num_lanes=2,
    max_vehicles=6,
    max_episode_steps=5,
)
FIELDS = ["x.agents", "x.agents_mask", "x.ego", "x.lanes", "x.lanes_mask"]
FRESH_META = {"created_utc", "simsci_version", "converted_from"}


def record_driving(path, episodes=3, seed=1):
    """Record ``episodes`` random-action episodes of the single Driving env; return the
    observations, actions and rewards the env gave, per episode."""
    env = RecordEpisodes(gymnasium.make("simsci/Driving-v0", **SMALL), path, max_episodes=episodes)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    seen, cur = [], {"obs": [obs], "act": [], "rew": []}
    for _ in range(200):
        if env.recorded >= episodes:
            break
        action = env.action_space.sample()
        obs, reward, terminated, truncated, _ = env.step(action)
        cur["obs"].append(obs)
        cur["act"].append(action)
        cur["rew"].append(reward)
        if terminated or truncated:
            seen.append(cur)
            obs, _ = env.reset()
            cur = {"obs": [obs], "act": [], "rew": []}
    space = env.observation_space
    env.close()
    return seen, space


# ------------------------------------------------------------------ recording
def test_driving_dict_recording_round_trip(tmp_path):
    path = tmp_path / "driving.h5"
    seen, space = record_driving(path)
    ds = simsci.data.open(path)
    assert simsci.data.check_file(path) == []
    assert ds.kind == "rollout" and len(ds) == 3
    assert [f for f in ds.step_fields if f.startswith("x")] == FIELDS  # no plain x
    assert ds.meta["observation_space"]["type"] == "Dict"
    assert ds.names("x.ego") == list(EGO_FEATURES)
    assert ds.names("x.lanes") == ["x", "y"]
    rebuilt = rollout_observation_space(path)
    assert rebuilt == space and isinstance(rebuilt, spaces.Dict)
    for i, ep in enumerate(seen):
        obs = rollout_observations(ds, i)
        assert list(obs) == list(space.spaces)  # the space's keys, in its order
        for key in space.spaces:
            want = np.stack([o[key] for o in ep["obs"]])
            assert obs[key].dtype == want.dtype == np.float32
            np.testing.assert_array_equal(obs[key], want, err_msg=f"episode {i}, {key}")
            assert all(space[key].contains(row) for row in obs[key])
        rows = ds[i]
        n = len(ep["act"])
        assert len(rows["t"]) == n + 1
        np.testing.assert_array_equal(rows["action"][:n], np.stack(ep["act"]))
        np.testing.assert_array_equal(rows["reward"][:n], np.float32(ep["rew"]))
        assert np.isnan(rows["action"][n]).all() and np.isnan(rows["reward"][n])


def run_vector(path, observation, mode, *, sync=False, episodes=5, seed=0):
    """Record a seeded Driving vector run with fixed actions; return the env's Dict space."""
    kwargs = dict(SMALL, observation=observation)
    if sync:
        venv = SyncVectorEnv(
            [lambda: gymnasium.make("simsci/Driving-v0", **kwargs)] * 2, autoreset_mode=mode
        )
    else:
        venv = gymnasium.make_vec(
            "simsci/Driving-v0",
            num_envs=2,
            vectorization_mode="vector_entry_point",
            autoreset_mode=mode,
            **kwargs,
        )
    rec = RecordVectorEpisodes(venv, path, max_episodes=episodes)
    rng = np.random.default_rng(seed)
    rec.reset(seed=seed)
    for _ in range(100):
        if rec.recorded >= episodes:
            break
        rec.step(rng.uniform([-8, -0.5], [4, 0.5], size=(2, 2)).astype(np.float32))
    rec.close()
    return venv


@pytest.mark.parametrize(
    "mode, sync",
    [
        (AutoresetMode.NEXT_STEP, False),
        (AutoresetMode.SAME_STEP, False),
        (AutoresetMode.SAME_STEP, True),
    ],
    ids=["next-step", "same-step", "sync-same-step"],
)
def test_vector_dict_recording_matches_the_flat_one(tmp_path, mode, sync):
    venv = run_vector(tmp_path / "dict.h5", "dict", mode, sync=sync)
    run_vector(tmp_path / "flat.h5", "flat", mode, sync=sync)
    d, f = simsci.data.open(tmp_path / "dict.h5"), simsci.data.open(tmp_path / "flat.h5")
    assert len(d) == len(f) == 5 and list(d.lengths) == list(f.lengths)
    dict_space = rollout_observation_space(d)
    assert dict_space == venv.single_observation_space
    for i in range(len(d)):
        obs = rollout_observations(d, i)
        flat = np.stack(
            [
                spaces.flatten(dict_space, {k: v[j] for k, v in obs.items()})
                for j in range(d.lengths[i])
            ]
        )
        np.testing.assert_array_equal(flat, f[i]["x"], err_msg=f"episode {i}")
        for key in ("action", "reward", "terminated", "truncated", "t"):
            np.testing.assert_array_equal(d[i][key], f[i][key], err_msg=f"{i} {key}")


class Nested(gymnasium.Env):
    """A nested Dict observation with Box (float, uint8) and Discrete entries."""

    observation_space = spaces.Dict(
        {
            "pos": spaces.Box(-5.0, 5.0, (2,), np.float32),
            "inner": spaces.Dict(
                {
                    "mode": spaces.Discrete(3, start=1),
                    "img": spaces.Box(0, 255, (2, 2), np.uint8),
                }
            ),
        }
    )
    action_space = spaces.Discrete(2)
    obs_names = {"pos": ["px", "py"]}

    def _obs(self):
        return {
            "pos": np.array([self.k, -self.k], np.float32),
            "inner": {
                "mode": 1 + self.k % 3,
                "img": np.full((2, 2), 10 * self.k + self.offset, np.uint8),
            },
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k, self.offset = 0, int(self.np_random.integers(0, 5))
        return self._obs(), {}

    def step(self, action):
        self.k += 1
        return self._obs(), float(action), self.k >= 3 + self.offset % 2, False, {}


def record_nested(path, episodes=2):
    env = RecordEpisodes(Nested(), path, max_episodes=episodes)
    env.action_space.seed(0)
    env.reset(seed=3)
    while env.recorded < episodes:
        *_, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    env.close()
    return path


def test_nested_dict_with_discrete_and_integer_entries(tmp_path):
    path = record_nested(tmp_path / "nested.h5")
    ds = simsci.data.open(path)
    fields = {f: ds.step_fields[f] for f in ds.step_fields if f.startswith("x")}
    assert list(fields) == ["x.inner.img", "x.inner.mode", "x.pos"]  # gymnasium sorts keys
    assert fields["x.inner.mode"].dtype == np.int64 and fields["x.inner.mode"].shape == ()
    assert fields["x.inner.img"].dtype == np.uint8 and fields["x.inner.img"].shape == (2, 2)
    assert ds.names("x.pos") == ["px", "py"]
    assert rollout_observation_space(path) == Nested.observation_space
    obs = rollout_observations(path, 0)
    n = len(obs["pos"])
    np.testing.assert_array_equal(obs["inner"]["mode"], 1 + np.arange(n) % 3)
    np.testing.assert_array_equal(obs["pos"][:, 0], np.arange(n, dtype=np.float32))
    assert Nested.observation_space.contains({"pos": obs["pos"][1], "inner": {
        "mode": obs["inner"]["mode"][1], "img": obs["inner"]["img"][1]}})  # fmt: skip


def test_space_descriptions_round_trip():
    for space in (
        Nested.observation_space,
        gymnasium.make("simsci/Driving-v0", **SMALL).observation_space,
    ):
        desc = space_to_json(space)
        assert space_from_json(json.loads(json.dumps(desc))) == space
    with pytest.raises(TypeError, match="Box, Discrete and Dict"):
        space_to_json(spaces.Tuple([spaces.Discrete(2)]))
    with pytest.raises(ValueError, match="'Dict' space description needs"):
        space_from_json({"type": "Dict"})


# ------------------------------------------------------------------ bad cases
class Obs(gymnasium.Env):
    action_space = spaces.Discrete(2)

    def __init__(self, observation_space, obs=None, names=None):
        self.observation_space = observation_space
        self.obs = obs
        if names is not None:
            self.obs_names = names

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.obs, {}

    def step(self, action):
        return self.obs, 0.0, True, False, {}


BOX = spaces.Box(-1, 1, (2,), np.float32)


@pytest.mark.parametrize(
    "space, match",
    [
        (
            spaces.Tuple([BOX, BOX]),
            r"Box observations .* or Dict observations .* got the observation space Tuple",
        ),
        (
            spaces.Dict({"a": BOX, "inner": spaces.Dict({"t": spaces.Tuple([BOX])})}),
            r"entry 'x\.inner\.t' is Tuple",
        ),
        (
            spaces.Dict({"a.b": BOX}),
            r"keys name its step fields .* without '\.' or '/', got 'a\.b'",
        ),
        (spaces.Dict({"a": spaces.MultiBinary(3)}), r"entry 'x\.a' is MultiBinary"),
        (spaces.Dict({"a": spaces.Dict({})}), r"'x\.a' has no entries"),
    ],
    ids=["tuple", "tuple-entry", "dotted-key", "multibinary", "empty"],
)
def test_unsupported_observation_spaces_are_refused(tmp_path, space, match):
    with pytest.raises(TypeError, match=match):
        RecordEpisodes(Obs(space), tmp_path / "x.h5")
    with pytest.raises(TypeError, match=match):
        RecordVectorEpisodes(SyncVectorEnv([lambda: Obs(space)] * 2), tmp_path / "x.h5")
    assert not (tmp_path / "x.h5").exists()


def test_observations_that_do_not_fit_the_dict_are_refused(tmp_path):
    space = spaces.Dict({"a": BOX, "b": BOX})
    rec = RecordEpisodes(Obs(space, {"a": np.zeros(2, np.float32)}), tmp_path / "x.h5")
    with pytest.raises(ValueError, match=r"reset: .*\['a'\].*missing \['x\.b'\]"):
        rec.reset(seed=0)
    extra = {"a": np.zeros(2), "b": np.zeros(2), "c": np.zeros(2)}
    with pytest.raises(ValueError, match=r"unexpected \['x\.c'\]"):
        RecordEpisodes(Obs(space, extra), tmp_path / "x.h5").reset()
    wrong = {"a": np.zeros(2), "b": np.zeros(3)}
    with pytest.raises(ValueError, match=r"entry 'x\.b' of shape \(3,\).*has shape \(2,\)"):
        RecordEpisodes(Obs(space, wrong), tmp_path / "x.h5").reset()
    with pytest.raises(
        ValueError, match="an observation of type ndarray, but the observation space is a Dict"
    ):
        RecordEpisodes(Obs(space, np.zeros(2)), tmp_path / "x.h5").reset()
    discrete = spaces.Dict({"m": spaces.Discrete(3)})
    with pytest.raises(ValueError, match=r"'x\.m' is Discrete, one integer, got 1\.5"):
        RecordEpisodes(Obs(discrete, {"m": 1.5}), tmp_path / "x.h5").reset()
    with pytest.raises(
        ValueError, match=r"obs_names is a list, but the observation space is a Dict"
    ):
        RecordEpisodes(Obs(space, names=["u", "v"]), tmp_path / "x.h5")
    with pytest.raises(ValueError, match=r"names the entry 'z'"):
        RecordEpisodes(Obs(space, names={"z": ["u", "v"]}), tmp_path / "x.h5")
    with pytest.raises(ValueError, match=r"obs_names\['a'\] has 3 names .* last axis has 2"):
        RecordEpisodes(Obs(space, names={"a": ["u", "v", "w"]}), tmp_path / "x.h5")


def test_a_file_whose_fields_do_not_match_its_space_is_refused_on_read(tmp_path):
    path = record_nested(tmp_path / "nested.h5")
    meta = dict(simsci.data.open(path).meta)
    desc = meta["observation_space"]
    desc["spaces"]["vel"] = space_to_json(BOX)  # a key the file has no field for
    desc["spaces"].pop("pos")
    with h5py.File(path, "r+") as f:
        f.attrs["meta"] = json.dumps(meta)
    with pytest.raises(
        ValueError,
        match=r"does not match the step fields.*missing \['x\.vel'\], unexpected \['x\.pos'\]",
    ):
        rollout_observation_space(path)
    with pytest.raises(ValueError, match="does not match the step fields"):
        rollout_observations(path, 0)
    desc["spaces"]["pos"] = space_to_json(spaces.Box(-1, 1, (3,), np.float32))
    desc["spaces"].pop("vel")
    with h5py.File(path, "r+") as f:
        f.attrs["meta"] = json.dumps(meta)
    with pytest.raises(ValueError, match=r"'x\.pos' is float32 of per-step shape \(2,\)"):
        rollout_observation_space(path)
    del meta["observation_space"]  # no description: unbounded Boxes, nested by the dots
    with h5py.File(path, "r+") as f:
        f.attrs["meta"] = json.dumps(meta)
    inferred = rollout_observation_space(path)
    assert list(inferred.spaces) == ["inner", "pos"] and list(inferred["inner"].spaces) == [
        "img",
        "mode",
    ]
    scene = tmp_path / "scene.h5"
    simsci.data.write(scene, [{"t": [0.0], "x": [[1.0]]}], kind="state", system="toy")
    with pytest.raises(ValueError, match="kind='state'; observations are read from rollout files"):
        rollout_observation_space(scene)


# ------------------------------------------------------------------ Minari
@pytest.fixture
def minari(tmp_path, monkeypatch):
    module = pytest.importorskip("minari")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari-datasets"))
    return module


def assert_same_file(a, b):
    a, b = simsci.data.open(a), simsci.data.open(b)
    assert (a.kind, a.system, len(a)) == (b.kind, b.system, len(b))
    assert list(a.step_fields) == list(b.step_fields)
    assert a.episode_fields.keys() == b.episode_fields.keys()
    for name in a.step_fields:
        assert a.names(name) == b.names(name), name
    for i in range(len(a)):
        ea, eb = a[i], b[i]
        assert ea.keys() == eb.keys()
        for key in ea:
            assert ea[key].dtype == eb[key].dtype, key
            np.testing.assert_array_equal(ea[key], eb[key], err_msg=f"episode {i}, {key}")
    strip = lambda m: {k: v for k, v in m.items() if k not in FRESH_META}  # noqa: E731
    assert strip(a.meta) == strip(b.meta)


def test_minari_round_trip_of_a_driving_recording(tmp_path, minari):
    from simsci.envs import from_minari, to_minari

    src = tmp_path / "driving.h5"
    seen, space = record_driving(src)
    dataset = to_minari(src, "simsci/driving-dict-v0")
    assert dataset.total_episodes == 3
    assert dataset.observation_space == space  # Minari's native Dict
    assert dataset.recover_environment().observation_space == space
    for i, ep in enumerate(dataset.iterate_episodes()):
        assert set(ep.observations) == set(space.spaces)
        for key in space.spaces:
            np.testing.assert_array_equal(
                ep.observations[key], np.stack([o[key] for o in seen[i]["obs"]])
            )
        np.testing.assert_array_equal(ep.actions, np.stack(seen[i]["act"]))
    back = from_minari("simsci/driving-dict-v0", tmp_path / "back.h5")
    assert simsci.data.check_file(back) == []
    assert_same_file(src, back)
    assert rollout_observation_space(back) == space


def test_minari_round_trip_of_a_nested_dict_and_a_foreign_dict_dataset(tmp_path, minari):
    from minari.data_collector import EpisodeBuffer

    from simsci.envs import from_minari, to_minari

    src = record_nested(tmp_path / "nested.h5")
    to_minari(src, "simsci/nested-v0")
    back = from_minari("simsci/nested-v0", tmp_path / "back.h5")
    assert_same_file(src, back)
    # a Dict dataset not written by to_minari: entries become x.<key>, the space the meta
    obs_space = spaces.Dict({"a": BOX, "b": spaces.Discrete(4)})
    buffer = EpisodeBuffer(
        observations={
            "a": np.arange(6, dtype=np.float32).reshape(3, 2) / 10,
            "b": np.array([0, 3, 1]),
        },
        actions=np.zeros(2, np.int64),
        rewards=np.array([1.0, 2.0]),
        terminations=np.array([False, True]),
        truncations=np.zeros(2, bool),
    )
    with pytest.warns(UserWarning):
        minari.create_dataset_from_buffers(
            "dicty-v0", [buffer], observation_space=obs_space, action_space=spaces.Discrete(2)
        )
    foreign = from_minari("dicty-v0", tmp_path / "foreign.h5")
    ds = simsci.data.open(foreign)
    assert [f for f in ds.step_fields if f.startswith("x")] == ["x.a", "x.b"]
    assert rollout_observation_space(ds) == obs_space
    obs = rollout_observations(ds, 0)
    np.testing.assert_array_equal(obs["b"], [0, 3, 1])
    assert obs["b"].dtype == np.int64
    np.testing.assert_array_equal(obs["a"], buffer.observations["a"])


# ------------------------------------------------------------------ CLI
def test_env_rollout_records_driving_dict_observations(tmp_path, capsys):
    out = tmp_path / "driving.h5"
    argv = ["env", "rollout", "simsci/Driving-v0", "-n", "3", "--num-envs", "2", "--seed", "2"]
    argv += [f"--param={k}={v}" for k, v in SMALL.items()] + ["--out", str(out)]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["episodes"] == 3
    ds = simsci.data.open(out)
    assert [f for f in ds.step_fields if f.startswith("x")] == FIELDS
    assert ds.meta["env_kwargs"]["num_agents"] == 3
    space = rollout_observation_space(ds)
    assert space == gymnasium.make("simsci/Driving-v0", **SMALL).observation_space
    assert rollout_observations(ds, 0)["lanes"].shape == (ds.lengths[0], 2, 20, 2)
