"""Writing then reading every kind of trajectory file gives back what was written."""

import json
import multiprocessing
import pickle

import h5py
import numpy as np
import pytest
import torch

import simsci
import simsci.data as sd
from simsci.errors import FormatError


def assert_episode_equal(got: dict, want: dict):
    for k, v in want.items():
        if k == "graphs":
            for g, graph in v.items():
                for part in ("nodes", "edges"):
                    for feat, arr in graph[part].items():
                        np.testing.assert_array_equal(got["graphs"][g][part][feat], arr)
            continue
        np.testing.assert_array_equal(got[k], np.asarray(v), err_msg=k)


def test_state_round_trip_with_mask_and_nans(state_file, state_episodes):
    ds = sd.open(state_file)
    assert len(ds) == len(state_episodes)
    assert ds.kind == "state" and ds.system == "demo" and ds.format_version == 1
    assert ds.meta["seed"] == 7 and ds.meta["simsci_version"] == simsci.__version__
    assert "created_utc" in ds.meta
    np.testing.assert_array_equal(ds.lengths, [len(e["t"]) for e in state_episodes])
    assert ds.lengths.dtype == np.int64
    assert ds.step_fields["x"] == sd.FieldInfo((3,), np.dtype("f8"), ["a", "b", "c"], "m")
    assert ds.step_fields["mask"].dtype == np.bool_
    assert ds.episode_fields["params"].shape == (2,)
    assert ds.episode_fields["split"].dtype == np.uint8
    assert ds.names("x") == ["a", "b", "c"] and ds.names("params") == ["alpha", "beta"]
    for i, ep in enumerate(state_episodes):
        got = ds[i]
        assert set(got) == {"t", "x", "mask", "params", "split"}
        assert_episode_equal(got, ep)
        assert np.isnan(got["x"][~got["mask"]]).all()
    assert sd.check_file(state_file) == []


def test_read_fields_window_and_iteration(state_file, state_episodes):
    ds = sd.open(state_file)
    got = ds.read(4, fields=("t", "params"))
    assert set(got) == {"t", "params"}
    np.testing.assert_array_equal(got["t"], state_episodes[4]["t"])
    w = ds.window(4, 3, 6, fields=("t", "x"))
    np.testing.assert_array_equal(w["t"], state_episodes[4]["t"][3:9])
    np.testing.assert_array_equal(w["x"], state_episodes[4]["x"][3:9])
    assert ds.window(4, 20, 0)["t"].shape == (0,)
    with pytest.raises(IndexError, match="does not fit episode 4 of length 20"):
        ds.window(4, 15, 6)
    with pytest.raises(ValueError, match="unknown field 'xx'; did you mean 'x'"):
        ds.read(0, fields=("xx",))
    assert [len(e["t"]) for e in ds] == list(ds.lengths)
    np.testing.assert_array_equal(ds[-1]["t"], state_episodes[-1]["t"])
    with pytest.raises(IndexError, match="out of range"):
        ds[len(ds)]


def test_views_slice_list_mask(state_file, state_episodes):
    ds = sd.open(state_file)
    view = ds[2:6]
    assert len(view) == 4
    np.testing.assert_array_equal(view.lengths, ds.lengths[2:6])
    assert_episode_equal(view[0], state_episodes[2])
    picked = ds[[5, 0, 5]]
    assert [len(e["t"]) for e in picked] == [3, 5, 3]
    mask = ds.lengths > 6
    big = ds[mask]
    assert list(big.lengths) == [12, 8, 20, 9]
    nested = ds[1:][::2]  # episodes 1, 3, 5
    assert_episode_equal(nested[2], state_episodes[5])
    np.testing.assert_array_equal(ds[[6, 1]].column("split"), [0, 1])
    with pytest.raises(IndexError, match="boolean mask must have shape"):
        ds[np.ones(3, bool)]


def test_field_kind_with_static_grid(tmp_path, rng):
    grid = np.linspace(0, 1, 8)
    eps = [{"t": np.arange(n) * 0.1, "x": rng.normal(size=(n, 8, 2))} for n in (4, 6)]
    path = sd.write(
        tmp_path / "f.h5",
        eps,
        kind="field",
        system="burgers",
        static={"x": grid},
        names={"x": ["u", "v"]},
        units={"static/x": "m"},
    )
    ds = sd.open(path)
    np.testing.assert_array_equal(ds.static["x"], grid)
    assert ds.static_fields["x"].units == "m"
    assert ds.step_fields["x"].shape == (8, 2)
    assert ds.stats["x"]["mean"].shape == (2,)
    for i, ep in enumerate(eps):
        assert_episode_equal(ds[i], ep)


def test_events_with_marks(tmp_path, rng):
    eps = []
    for n in (7, 0, 11):
        eps.append(
            {
                "t": np.sort(rng.uniform(0, 10, n)),
                "mark": rng.integers(0, 4, n),
                "loc": rng.normal(size=(n, 2)),
                "label": np.int64(n % 2),
            }
        )
    path = sd.write(tmp_path / "e.h5", eps, kind="events", system="hawkes", num_marks=5)
    ds = sd.open(path)
    assert ds.num_marks == 5
    assert ds.step_fields["mark"].dtype == np.int64
    assert list(ds.lengths) == [7, 0, 11]
    for i, ep in enumerate(eps):
        assert_episode_equal(ds[i], ep)
    assert ds[1]["loc"].shape == (0, 2)
    # without num_marks the writer stores max(mark) + 1
    path2 = sd.write(tmp_path / "e2.h5", eps, kind="events", system="hawkes")
    assert sd.open(path2).num_marks == max(int(e["mark"].max()) for e in eps if len(e["mark"])) + 1


def test_rollout(tmp_path, rng):
    eps = []
    for steps in (3, 5):
        action = rng.normal(size=(steps + 1, 2))
        action[-1] = np.nan
        reward = np.append(rng.normal(size=steps), np.nan)
        terminated = np.zeros(steps + 1, bool)
        terminated[-2] = True
        eps.append(
            {
                "t": np.arange(steps + 1.0),
                "x": rng.normal(size=(steps + 1, 4)),
                "action": action,
                "reward": reward,
                "terminated": terminated,
                "truncated": np.zeros(steps + 1, bool),
            }
        )
    path = sd.write(tmp_path / "r.h5", eps, kind="rollout", system="pendulum")
    ds = sd.open(path)
    for i, ep in enumerate(eps):
        assert_episode_equal(ds[i], ep)
    rewards = np.concatenate([e["reward"][:-1] for e in eps])
    np.testing.assert_allclose(ds.stats["reward"]["mean"], rewards.mean())
    np.testing.assert_allclose(ds.stats["reward"]["std"], rewards.std())


def _scene(rng, n, agents, nodes, edges):
    valid = rng.random((n, agents)) > 0.3
    return {
        "t": np.arange(n) * 0.1,
        "agents": rng.normal(size=(n, agents, 4)),
        "agents_valid": valid,
        "graphs": {
            "lanes": {
                "nodes": {"pos": rng.normal(size=(nodes, 2)).astype(np.float32)},
                "edges": {
                    "index": rng.integers(0, nodes, size=(edges, 2)),
                    "weight": rng.random(edges),
                },
            }
        },
    }


def test_scene_with_graphs_and_padded_agents(tmp_path, rng):
    eps = [_scene(rng, 6, 3, 5, 7), _scene(rng, 4, 5, 2, 1), _scene(rng, 5, 2, 3, 0)]
    # buffer_bytes=1 flushes after every episode: exercises growing the agent axis on disk
    with sd.TrajectoryWriter(
        tmp_path / "s.h5", kind="scene", system="highway", buffer_bytes=1
    ) as w:
        w.extend(eps)
    ds = sd.open(tmp_path / "s.h5")
    assert ds.graph_names == ["lanes"]
    assert ds.step_fields["agents"].shape == (5, 4)
    for i, ep in enumerate(eps):
        got = ds[i]
        a = ep["agents"].shape[1]
        np.testing.assert_array_equal(got["agents"][:, :a], ep["agents"])
        assert np.isnan(got["agents"][:, a:]).all()
        np.testing.assert_array_equal(got["agents_valid"][:, :a], ep["agents_valid"])
        assert not got["agents_valid"][:, a:].any()
        assert got["graphs"]["lanes"]["num_nodes"] == len(ep["graphs"]["lanes"]["nodes"]["pos"])
        assert_episode_equal({"graphs": got["graphs"]}, {"graphs": ep["graphs"]})
    assert sd.check_file(tmp_path / "s.h5") == []
    # stats over valid agents only
    vals = np.concatenate([e["agents"][e["agents_valid"]] for e in eps])
    np.testing.assert_allclose(ds.stats["agents"]["mean"], vals.mean(axis=0))


def test_appended_arrays_are_copied(tmp_path):
    x = np.ones((4, 2))
    with sd.TrajectoryWriter(tmp_path / "c.h5", kind="state", system="s") as w:
        w.append({"t": np.arange(4.0), "x": x})
        x[:] = 7.0  # a simulator refilling its buffer must not change what was appended
        w.append({"t": np.arange(4.0), "x": x})
    ds = sd.open(tmp_path / "c.h5")
    np.testing.assert_array_equal(ds[0]["x"], np.ones((4, 2)))
    np.testing.assert_array_equal(ds[1]["x"], np.full((4, 2), 7.0))


def test_torch_tensor_input(tmp_path, device):
    t = torch.linspace(0, 1, 10, device=device, dtype=torch.float64)
    x = torch.randn(10, 2, device=device, dtype=torch.bfloat16)
    path = sd.write(tmp_path / "torch.h5", [{"t": t, "x": x}], kind="state", system="torch")
    got = sd.open(path)[0]
    np.testing.assert_array_equal(got["t"], t.cpu().numpy())
    np.testing.assert_array_equal(got["x"], x.float().cpu().numpy())
    assert got["x"].dtype == np.float32


def test_stats_match_numpy(tmp_path, state_factory, rng):
    eps = state_factory(rng, rng.integers(20, 60, size=30))
    path = sd.write(tmp_path / "st.h5", eps, kind="state", system="s", buffer_bytes=3000)
    train = [e for e in eps if e["split"] == 0]
    x = np.concatenate([e["x"] for e in train])
    mask = np.concatenate([e["mask"] for e in train])
    x = np.where(mask, x, np.nan)
    stats = sd.open(path).stats
    np.testing.assert_allclose(stats["x"]["mean"], np.nanmean(x, axis=0), rtol=1e-12)
    np.testing.assert_allclose(stats["x"]["std"], np.nanstd(x, axis=0), rtol=1e-12)
    assert "t" not in stats
    with h5py.File(path) as f:
        assert f["stats"].attrs["split"] == "train"
    # without split: all episodes
    for e in eps:
        del e["split"]
    path2 = sd.write(tmp_path / "st2.h5", eps, kind="state", system="s", stats=True)
    allx = np.concatenate([np.where(e["mask"], e["x"], np.nan) for e in eps])
    np.testing.assert_allclose(sd.open(path2).stats["x"]["std"], np.nanstd(allx, axis=0))
    assert (
        sd.open(sd.write(tmp_path / "no.h5", eps, kind="state", system="s", stats=False)).stats
        == {}
    )


def test_shards_read_as_one_dataset(tmp_path, state_factory, rng):
    shards = tmp_path / "shards"
    shards.mkdir()
    val_only = state_factory(rng, [5])
    val_only[0]["split"] = 1  # this shard has no train data: its statistics weigh nothing
    parts = [state_factory(rng, [4, 9, 6]), state_factory(rng, [3, 10]), val_only]
    for rank, eps in enumerate(parts):
        sd.write(sd.shard_path(shards, rank), eps, kind="state", system="demo")
    assert sd.shard_path(shards, 1).name == "part-00001.h5"
    ds = sd.open(shards)
    flat = [e for p in parts for e in p]
    assert len(ds) == 6 and list(ds.lengths) == [4, 9, 6, 3, 10, 5]
    for i, ep in enumerate(flat):
        assert_episode_equal(ds[i], ep)
    view = ds[[5, 2, 3]]
    assert_episode_equal(view[0], flat[5])
    np.testing.assert_array_equal(view.column("split"), [1, 2, 0])
    train = np.concatenate([np.where(e["mask"], e["x"], np.nan) for e in flat if e["split"] == 0])
    np.testing.assert_allclose(ds.stats["x"]["mean"], np.nanmean(train, axis=0))
    np.testing.assert_allclose(ds.stats["x"]["std"], np.nanstd(train, axis=0))
    assert sd.check_file(shards) == []
    assert len(ds.shard_meta) == 3


def test_shards_with_different_schema_are_refused(tmp_path, state_factory, rng):
    d = tmp_path / "bad"
    d.mkdir()
    sd.write(sd.shard_path(d, 0), state_factory(rng, [3]), kind="state", system="demo")
    sd.write(sd.shard_path(d, 1), state_factory(rng, [3], dim=2), kind="state", system="demo")
    with pytest.raises(FormatError, match="step fields differ from the first shard part-00000.h5"):
        sd.open(d)
    assert [p.rule for p in sd.check_file(d)] == ["shard-schema"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="holds no part-\\*.h5 shards"):
        sd.open(empty)


def test_rank_shard_path_creates_directory(tmp_path):
    p = sd.rank_shard_path(tmp_path / "new" / "dir")
    assert p == tmp_path / "new" / "dir" / "part-00000.h5"
    assert p.parent.is_dir()
    with pytest.raises(ValueError, match="rank must be an int >= 0"):
        sd.shard_path(tmp_path, -1)


def test_empty_episodes_and_empty_file(tmp_path):
    eps = [
        {"t": np.zeros(0), "x": np.zeros((0, 2))},
        {"t": np.array([0.0, 1.0]), "x": np.ones((2, 2))},
        {"t": np.zeros(0), "x": np.zeros((0, 2))},
    ]
    ds = sd.open(sd.write(tmp_path / "e.h5", eps, kind="state", system="s"))
    assert list(ds.lengths) == [0, 2, 0]
    assert ds[0]["x"].shape == (0, 2) and ds[2]["t"].shape == (0,)
    np.testing.assert_array_equal(ds[1]["x"], np.ones((2, 2)))
    empty = sd.open(sd.write(tmp_path / "none.h5", [], kind="state", system="s"))
    assert len(empty) == 0 and list(empty.step_fields) == ["t"]
    assert sd.check_file(tmp_path / "none.h5") == []


@pytest.mark.parametrize("compression", [None, "gzip", "lzf"])
def test_compression_and_chunks(tmp_path, state_factory, rng, compression):
    eps = state_factory(rng, [300] * 10)
    path = sd.write(
        tmp_path / "c.h5",
        eps,
        kind="state",
        system="s",
        compression=compression,
        chunk_bytes=4096,
        buffer_bytes=20000,
    )
    with h5py.File(path) as f:
        assert f["steps/x"].chunks == (4096 // 24, 3)
        assert f["steps/t"].chunks == (512,)
        assert f["steps/x"].compression == compression
    ds = sd.open(path)
    for i, ep in enumerate(eps):
        assert_episode_equal(ds[i], ep)


def test_small_file_chunks_fit_the_data(tmp_path, state_factory, rng):
    path = sd.write(tmp_path / "small.h5", state_factory(rng, [4, 5]), kind="state", system="s")
    with h5py.File(path) as f:
        assert f["steps/x"].chunks == (9, 3)


def test_pickle_and_fork_reopen(state_file, state_episodes):
    ds = sd.open(state_file)
    ds[0]  # opens the handle in this process
    clone = pickle.loads(pickle.dumps(ds[1:]))
    assert_episode_equal(clone[0], state_episodes[1])
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.map(_read_in_child, [(ds, 3)])
    np.testing.assert_array_equal(got[0], state_episodes[3]["t"])
    ds.close()
    np.testing.assert_array_equal(ds[3]["t"], state_episodes[3]["t"])  # re-opens lazily


def _read_in_child(args):
    ds, i = args
    return ds[i]["t"]


def test_info_contents(tmp_path, state_file):
    text = sd.info(state_file)
    for needle in (
        "kind: state",
        "system: demo",
        "episodes: 7",
        "total steps: 58",
        "length min/median/max: 1 / 8 / 20",
        "split: train 3, val 2, test 2",
        "names ['a', 'b', 'c']",
        "units m",
        "alpha: 1.",
        "beta: 1.",
        "stats (train split): x",
        "seed=7",
        "simsci_version=",
        "KiB",
    ):
        assert needle in text, needle
    grid = np.linspace(0, 1, 4)
    eps = [_scene(np.random.default_rng(0), 3, 2, 4, 5)]
    path = sd.write(tmp_path / "g.h5", eps, kind="scene", system="hw", static={"grid": grid})
    text = sd.info(path)
    assert "graph lanes: 4 nodes, 5 edges" in text
    assert "static:" in text and "grid" in text


def test_meta_and_names_are_json_attributes(state_file):
    with h5py.File(state_file) as f:
        assert json.loads(f.attrs["meta"])["seed"] == 7
        assert json.loads(f["steps/x"].attrs["names"]) == ["a", "b", "c"]
        assert json.loads(f["steps/x"].attrs["units"]) == "m"
        assert f.attrs["format"] == "simsci.trajectories"
        assert f["episodes/offsets"].dtype == np.int64


def test_scene_shards_with_different_agent_counts(tmp_path, rng):
    d = tmp_path / "scenes"
    d.mkdir()
    narrow, wide = _scene(rng, 4, 2, 3, 2), _scene(rng, 3, 4, 3, 2)
    sd.write(sd.shard_path(d, 0), [narrow], kind="scene", system="hw")
    sd.write(sd.shard_path(d, 1), [wide], kind="scene", system="hw")
    ds = sd.open(d)
    assert ds.step_fields["agents"].shape == (4, 4)
    got = ds[0]
    assert got["agents"].shape == (4, 4, 4) and got["agents_valid"].shape == (4, 4)
    np.testing.assert_array_equal(got["agents"][:, :2], narrow["agents"])
    assert np.isnan(got["agents"][:, 2:]).all() and not got["agents_valid"][:, 2:].any()
    np.testing.assert_array_equal(ds[1]["agents"], wide["agents"])
