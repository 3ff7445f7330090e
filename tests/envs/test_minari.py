"""Rollout files <-> Minari datasets (to_minari, from_minari, simsci data export-/import-minari).

Every test writes Minari datasets under a temporary MINARI_DATASETS_PATH."""

import sys

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit

import simsci.data
from simsci.cli import main
from simsci.envs import _minari as sm
from simsci.envs._minari import from_minari, to_minari
from simsci.envs._record import RecordEpisodes, space_from_json
from simsci.errors import UnknownNameError

minari = pytest.importorskip("minari")

FRESH_META = {"created_utc", "simsci_version", "converted_from"}


@pytest.fixture(autouse=True)
def minari_home(tmp_path, monkeypatch):
    home = tmp_path / "minari-datasets"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(home))
    return home


class Osc(gymnasium.Env):
    """A small pendulum whose info carries t and the raw float64 state."""

    dt = 0.1
    state_shape = (2,)
    obs_names = ("cos", "sin", "omega")
    state_names = ("theta", "omega")

    def __init__(self):
        self.observation_space = spaces.Box(-10.0, 10.0, (3,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def _out(self):
        th, om = self.state
        obs = np.array([np.cos(th), np.sin(th), om], np.float32)
        return obs, {"t": self.t, "state": self.state.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state, self.t = self.np_random.uniform(-1.0, 1.0, 2), 0.5
        return self._out()

    def step(self, action):
        th, om = self.state
        om = om + self.dt * (-np.sin(th) + float(np.asarray(action).reshape(())))
        self.state, self.t = np.array([th + self.dt * om, om]), self.t + self.dt
        obs, info = self._out()
        return obs, -(th**2), bool(abs(om) > 1.2), False, info


def record(path, env, episodes=3, seed=4):
    """Record ``episodes`` random-action episodes of ``env`` into ``path``."""
    rec = RecordEpisodes(env, path, max_episodes=episodes)
    rec.action_space.seed(seed)
    rec.reset(seed=seed)
    for _ in range(5000):
        if rec.recorded >= episodes:
            break
        *_, terminated, truncated, _ = rec.step(rec.action_space.sample())
        if terminated or truncated:
            rec.reset()
    rec.close()
    return path


ENVS = {
    "osc": lambda: TimeLimit(Osc(), max_episode_steps=12),
    "pendulum": lambda: gymnasium.make("Pendulum-v1", max_episode_steps=20),
    "cartpole": lambda: gymnasium.make("CartPole-v1"),
}


def assert_same_file(a, b):
    a, b = simsci.data.open(a), simsci.data.open(b)
    assert (a.kind, a.system, len(a)) == (b.kind, b.system, len(b))
    assert a.step_fields.keys() == b.step_fields.keys()
    assert a.episode_fields.keys() == b.episode_fields.keys()
    for name in a.step_fields:
        assert a.names(name) == b.names(name)
    for i in range(len(a)):
        ea, eb = a[i], b[i]
        assert ea.keys() == eb.keys()
        for key in ea:
            assert ea[key].dtype == eb[key].dtype, key
            np.testing.assert_array_equal(ea[key], eb[key], err_msg=f"episode {i}, {key}")
    strip = lambda m: {k: v for k, v in m.items() if k not in FRESH_META}  # noqa: E731
    assert strip(a.meta) == strip(b.meta)


@pytest.mark.parametrize("name", list(ENVS))
def test_round_trip_file_minari_file(name, tmp_path):
    src = record(tmp_path / f"{name}.h5", ENVS[name]())
    dataset = to_minari(src, f"simsci/{name}-v0")
    assert dataset.total_episodes == 3
    back = from_minari(f"simsci/{name}-v0", tmp_path / "back.h5")
    assert simsci.data.check_file(back) == []
    assert_same_file(src, back)
    meta = simsci.data.open(back).meta
    assert meta["converted_from"]["minari_dataset"] == f"simsci/{name}-v0"


def test_minari_episode_layout(tmp_path):
    src = simsci.data.open(record(tmp_path / "osc.h5", ENVS["osc"](), episodes=2, seed=9))
    dataset = to_minari(src, "osc-v3")
    assert dataset.env_spec is None  # Osc is not a registered gymnasium id
    assert dataset.observation_space == Osc().observation_space
    assert dataset.action_space == Osc().action_space
    assert dataset.total_steps == int((src.lengths - 1).sum())
    seeds = [m.get("seed") for m in dataset.storage.get_episode_metadata(range(2))]
    assert seeds == [9, None]
    for i, episode in enumerate(dataset.iterate_episodes()):
        ep = src[i]
        n = len(ep["t"]) - 1
        assert len(episode) == n and episode.observations.shape == (n + 1, 3)
        np.testing.assert_array_equal(episode.observations, ep["x"])
        np.testing.assert_array_equal(episode.actions, ep["action"][:n])
        np.testing.assert_array_equal(episode.rewards, ep["reward"][:n])
        np.testing.assert_array_equal(episode.terminations, ep["terminated"][:n])
        np.testing.assert_array_equal(episode.truncations, ep["truncated"][:n])
        np.testing.assert_array_equal(episode.infos["t"], ep["t"])
        np.testing.assert_array_equal(episode.infos["state"], ep["state"])


def test_env_spec_is_attached_and_checked(tmp_path, minari_home):
    src = record(tmp_path / "p.h5", ENVS["pendulum"](), episodes=1)
    dataset = to_minari(src, "simsci/pendulum-v0")
    assert dataset.env_spec.id == "Pendulum-v1" and dataset.env_spec.max_episode_steps == 20
    env = dataset.recover_environment()
    assert env.observation_space == gymnasium.make("Pendulum-v1").observation_space
    env.close()
    with pytest.raises(ValueError, match="does not match the file"):
        to_minari(src, "simsci/wrong-v0", env="CartPole-v1")
    assert not (minari_home / "simsci" / "wrong-v0").exists()


def test_episode_fields_and_chunks_survive(tmp_path, monkeypatch):
    monkeypatch.setattr(sm, "_CHUNK_BYTES", 1)  # one episode per chunk handed to Minari
    rng = np.random.default_rng(0)
    episodes = []
    for i, n in enumerate([3, 1, 5]):
        action = np.full((n + 1, 2), np.nan, np.float32)
        action[:n] = rng.normal(size=(n, 2))
        reward = np.full(n + 1, np.nan, np.float32)
        reward[:n] = rng.normal(size=n)
        episodes.append(
            {
                "t": np.linspace(0.0, 1.0, n + 1),
                "x": rng.normal(size=(n + 1, 4)).astype(np.float32),
                "action": action,
                "reward": reward,
                "terminated": np.arange(n + 1) == n - 1,
                "truncated": np.zeros(n + 1, bool),
                "params": np.array([i, 2.0 * i]),
                "split": i % 3,
            }
        )
    src = simsci.data.write(
        tmp_path / "hand.h5", episodes, kind="rollout", system="hand", meta={"k": 1}
    )
    dataset = to_minari(src, "hand-v0")
    assert dataset.total_episodes == 3
    assert dataset.action_space.shape == (2,)  # inferred: the file has no space meta
    assert_same_file(src, from_minari("hand-v0", tmp_path / "back.h5"))


def test_overwrite_and_failed_overwrite_keep_a_dataset(tmp_path, monkeypatch, minari_home):
    two = record(tmp_path / "two.h5", ENVS["cartpole"](), episodes=2)
    three = record(tmp_path / "three.h5", ENVS["cartpole"](), episodes=3)
    to_minari(two, "simsci/cp-v0")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        to_minari(three, "simsci/cp-v0")
    assert to_minari(three, "simsci/cp-v0", overwrite=True).total_episodes == 3
    real = minari.create_dataset_from_buffers

    def broken(*args, **kwargs):
        real(*args, **kwargs)
        raise RuntimeError("disk full")

    monkeypatch.setattr(minari, "create_dataset_from_buffers", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        to_minari(two, "simsci/cp-v0", overwrite=True)
    with pytest.raises(RuntimeError, match="disk full"):
        to_minari(two, "simsci/new-v0")
    assert minari.load_dataset("simsci/cp-v0").total_episodes == 3  # the old one is back
    assert not (minari_home / "simsci" / "new-v0").exists()
    assert sorted(p.name for p in (minari_home / "simsci").iterdir()) == [
        "cp-v0",
        "namespace_metadata.json",
    ]


def test_foreign_minari_dataset(tmp_path):
    from minari.data_collector import EpisodeBuffer

    rng = np.random.default_rng(1)
    buffers = [
        EpisodeBuffer(
            seed=s,
            observations=rng.normal(size=(n + 1, 2)).astype(np.float32),
            actions=rng.integers(0, 3, n),
            rewards=rng.normal(size=n),  # float64
            terminations=np.arange(n) == n - 1,
            truncations=np.zeros(n, bool),
        )
        for s, n in [(5, 4), (None, 2)]
    ]
    with pytest.warns(UserWarning):
        minari.create_dataset_from_buffers(
            "other/data-v1",
            buffers,
            observation_space=spaces.Box(-5, 5, (2,), np.float32),
            action_space=spaces.Discrete(3),
        )
    path = from_minari("other/data-v1", tmp_path / "foreign.h5")
    ds = simsci.data.open(path)
    assert simsci.data.check_file(path) == [] and ds.kind == "rollout"
    assert ds.column("seed").tolist() == [5, -1] and ds.meta["seed"] == 5
    assert space_from_json(ds.meta["action_space"]) == spaces.Discrete(3)
    for buf, ep in zip(buffers, ds):
        n = len(buf.rewards)
        np.testing.assert_array_equal(ep["x"], buf.observations)
        np.testing.assert_array_equal(ep["action"], [*buf.actions, 0])
        np.testing.assert_array_equal(ep["reward"][:n], buf.rewards.astype(np.float32))
        np.testing.assert_array_equal(ep["t"], np.arange(n + 1.0))
        assert ep["terminated"][n - 1] and np.isnan(ep["reward"][n])


def test_bad_input(tmp_path, monkeypatch):
    state = simsci.data.write(
        tmp_path / "state.h5",
        [{"t": np.arange(3.0), "x": np.zeros((3, 2))}],
        kind="state",
        system="demo",
    )
    with pytest.raises(ValueError, match="kind='state'.*rollout"):
        to_minari(state, "simsci/state-v0")
    one_row = simsci.data.write(
        tmp_path / "one.h5",
        [
            {
                "t": np.zeros(1),
                "x": np.zeros((1, 2), np.float32),
                "action": np.full((1, 1), np.nan, np.float32),
                "reward": np.full(1, np.nan, np.float32),
                "terminated": np.zeros(1, bool),
                "truncated": np.zeros(1, bool),
            }
        ],
        kind="rollout",
        system="demo",
    )
    with pytest.raises(ValueError, match="episode 0.*no transition"):
        to_minari(one_row, "simsci/one-v0")
    for bad in ("no-version", "x/y", "a b-v0", 3):
        with pytest.raises(ValueError, match="namespace/"):
            to_minari(one_row, bad)
    src = record(tmp_path / "p.h5", ENVS["pendulum"](), episodes=1)
    to_minari(src, "simsci/pendulum-v0")
    with pytest.raises(UnknownNameError, match="did you mean 'simsci/pendulum-v0'.*MINARI"):
        from_minari("simsci/pendulum-v1", tmp_path / "x.h5")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        from_minari("simsci/pendulum-v0", tmp_path / "no" / "x.h5")
    with pytest.raises(FileNotFoundError):
        to_minari(tmp_path / "missing.h5", "simsci/missing-v0")
    monkeypatch.setitem(sys.modules, "minari", None)
    with pytest.raises(ImportError, match=r'pip install "simsci\[minari\]"'):
        to_minari(src, "simsci/again-v0")
    with pytest.raises(ImportError, match=r'pip install "simsci\[minari\]"'):
        from_minari("simsci/pendulum-v0", tmp_path / "x.h5")


def test_tuple_observation_dataset_is_refused(tmp_path):
    # Dict observations are imported (x.<key> step fields): test_record_dict.py
    from minari.data_collector import EpisodeBuffer

    obs_space = spaces.Tuple([spaces.Box(-1, 1, (2,), np.float32)])
    buffer = EpisodeBuffer(
        observations=(np.zeros((3, 2), np.float32),),
        actions=np.zeros(2, np.int64),
        rewards=np.zeros(2),
        terminations=np.array([False, True]),
        truncations=np.zeros(2, bool),
    )
    with pytest.warns(UserWarning):
        minari.create_dataset_from_buffers(
            "tuply-v0", [buffer], observation_space=obs_space, action_space=spaces.Discrete(2)
        )
    with pytest.raises(
        TypeError, match=r"'tuply-v0': rollout files store Box observations or Dicts.*Tuple"
    ):
        from_minari("tuply-v0", tmp_path / "x.h5")
    assert not (tmp_path / "x.h5").exists()


# ------------------------------------------------------------------------ CLI
def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("action", ["export-minari", "import-minari"])
def test_cli_help(action, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["data", action, "--help"])
    assert exc.value.code == 0 and "minari" in capsys.readouterr().out.lower()


def test_cli_export_import(tmp_path, capsys, monkeypatch):
    src = record(tmp_path / "c.h5", ENVS["cartpole"](), episodes=2)
    code, out, _ = run(capsys, "data", "export-minari", src, "simsci/cli-v0", "--author", "me")
    assert code == 0 and "simsci/cli-v0 (2 episodes" in out
    assert minari.load_dataset("simsci/cli-v0").storage.metadata["author"] == {"me"}
    code, _, err = run(capsys, "data", "export-minari", src, "simsci/cli-v0")
    assert code == 2 and "--overwrite" in err and "Traceback" not in err
    assert run(capsys, "data", "export-minari", src, "simsci/cli-v0", "--overwrite")[0] == 0
    back = tmp_path / "back.h5"
    code, out, _ = run(
        capsys, "data", "import-minari", "simsci/cli-v0", back, "--compression", "gzip"
    )
    assert code == 0 and str(back) in out
    assert_same_file(src, back)
    code, _, err = run(capsys, "data", "import-minari", "simsci/cli-v9", back)
    assert code == 2 and "did you mean 'simsci/cli-v0'" in err
    monkeypatch.setitem(sys.modules, "minari", None)
    code, _, err = run(capsys, "data", "import-minari", "simsci/cli-v0", back)
    assert code == 2 and 'pip install "simsci[minari]"' in err and "Traceback" not in err
