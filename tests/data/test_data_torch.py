"""TrajectoryDataset (episodes, windows, splits, normalisation), collates, DataLoader workers."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import simsci.data as sd


@pytest.fixture
def window_file(tmp_path, state_factory, rng):
    eps = state_factory(rng, [5, 10, 3, 0, 7], nan_frac=0.0)
    for e in eps:
        e["mark"] = np.arange(len(e["t"])) % 2
    path = sd.write(tmp_path / "w.h5", eps, kind="state", system="s", num_marks=2)
    return path, eps


def test_windows_count_and_content(window_file):
    path, eps = window_file
    ds = sd.TrajectoryDataset(path, fields=("t", "x"), window=3, stride=2)
    # lengths 5, 10, 3, 0, 7 -> (L - 3) // 2 + 1 windows, none for 0
    assert len(ds) == 2 + 4 + 1 + 0 + 3
    episode, start = ds.index()
    np.testing.assert_array_equal(episode, [0, 0, 1, 1, 1, 1, 2, 4, 4, 4])
    np.testing.assert_array_equal(start, [0, 2, 0, 2, 4, 6, 0, 0, 2, 4])
    for k in range(len(ds)):
        item = ds[k]
        e, s = item["episode"], item["start"]
        assert (e, s) == (episode[k], start[k])
        np.testing.assert_allclose(item["t"].numpy(), eps[e]["t"][s : s + 3], rtol=1e-6)
        np.testing.assert_allclose(item["x"].numpy(), eps[e]["x"][s : s + 3], rtol=1e-6)
        assert (
            item["t"].dtype == torch.float64
            and item["x"].dtype == torch.float32
            and item["x"].shape == (3, 3)
        )
    # stride defaults to the window (non-overlapping); episodes shorter than it are skipped
    assert len(sd.TrajectoryDataset(path, window=4)) == 1 + 2 + 0 + 0 + 1
    assert len(sd.TrajectoryDataset(path, window=11)) == 0


def test_time_keeps_float64_precision_by_default(tmp_path):
    from simsci import data

    t = 1.0e9 + np.arange(5, dtype=np.float64)  # epoch seconds, one apart
    path = data.write(
        tmp_path / "e.h5", [{"t": t, "x": np.zeros((5, 1))}], kind="state", system="clock"
    )
    item = sd.TrajectoryDataset(path, fields=("t", "x"))[0]
    assert item["t"].dtype == torch.float64 and torch.all(torch.diff(item["t"]) == 1)
    item = sd.TrajectoryDataset(path, fields=("t",), time_dtype=torch.float32)[0]
    assert item["t"].dtype == torch.float32
    with pytest.raises(TypeError, match="time_dtype must be a floating"):
        sd.TrajectoryDataset(path, time_dtype=torch.int64)


def test_episode_items_fields_and_dtypes(window_file):
    path, eps = window_file
    ds = sd.TrajectoryDataset(
        path, fields=("t", "x", "mask", "mark", "params"), dtype=torch.float64
    )
    assert len(ds) == 5
    item = ds[1]
    assert set(item) == {"t", "x", "mask", "mark", "params", "episode", "start"}
    assert item["x"].dtype == torch.float64 and item["mask"].dtype == torch.bool
    assert item["mark"].dtype == torch.int64 and item["params"].shape == (2,)
    np.testing.assert_array_equal(item["x"].numpy(), eps[1]["x"])
    assert ds[3]["t"].shape == (0,)  # empty episode kept as an item
    with pytest.raises(ValueError, match="unknown field 'xs'"):
        sd.TrajectoryDataset(path, fields=("t", "xs"))
    with pytest.raises(ValueError, match="stride needs window="):
        sd.TrajectoryDataset(path, stride=2)
    with pytest.raises(ValueError, match="window must be a positive int"):
        sd.TrajectoryDataset(path, window=0)


def test_split_selection(window_file):
    path, eps = window_file
    train = sd.TrajectoryDataset(path, split="train")
    assert [train[k]["episode"] for k in range(len(train))] == [0, 3]
    test = sd.TrajectoryDataset(sd.open(path), split=2)
    assert [test[k]["episode"] for k in range(len(test))] == [2]
    np.testing.assert_allclose(test[0]["t"].numpy(), eps[2]["t"], rtol=1e-6)
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        sd.TrajectoryDataset(path, split="dev")


def test_split_requires_split_field(tmp_path):
    path = sd.write(tmp_path / "n.h5", [{"t": np.arange(3.0)}], kind="state", system="s")
    with pytest.raises(ValueError, match="has no 'split' episode field"):
        sd.TrajectoryDataset(path, fields=("t",), split="train")


def test_normalize_and_transform(tmp_path, state_factory, rng):
    eps = state_factory(rng, [6, 9, 4])
    path = sd.write(tmp_path / "n.h5", eps, kind="state", system="s")
    stats = sd.open(path).stats["x"]
    ds = sd.TrajectoryDataset(
        path,
        fields=("t", "x"),
        normalize=True,
        dtype=torch.float64,
        transform=lambda d: {**d, "twice": 2 * d["x"]},
    )
    item = ds[1]
    want = (eps[1]["x"] - stats["mean"]) / stats["std"]
    np.testing.assert_allclose(item["x"].numpy(), want, rtol=1e-12)
    assert torch.isnan(item["x"]).sum() == np.isnan(eps[1]["x"]).sum() > 0  # NaN stays NaN
    np.testing.assert_array_equal(item["t"].numpy(), eps[1]["t"])  # t never normalised
    torch.testing.assert_close(item["twice"], 2 * item["x"], equal_nan=True)
    bare = sd.write(tmp_path / "b.h5", eps, kind="state", system="s", stats=False)
    with pytest.raises(ValueError, match="no statistics for 'x'"):
        sd.TrajectoryDataset(bare, normalize=True)


def _sample(t, x, device, **extra):
    out = {
        "t": torch.tensor(t, dtype=torch.float64, device=device),
        "x": torch.tensor(x, dtype=torch.float32, device=device),
        "mask": torch.ones(len(t), dtype=torch.bool, device=device),
        "mark": torch.arange(len(t), device=device) + 1,
        "params": torch.tensor([1.0, 2.0], device=device),
        "episode": 3,
        "start": 0,
    }
    out.update(extra)
    return out


def test_pad_collate(device):
    a = _sample([0.0, 1.0, 2.0], [[1.0], [2.0], [3.0]], device)
    b = _sample([0.5], [[4.0]], device)
    out = sd.pad_collate([a, b])
    assert out["x"].shape == (2, 3, 1) and out["x"].device.type == device.type
    torch.testing.assert_close(
        out["x"][..., 0], torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]], device=device)
    )
    assert out["mask"].tolist() == [[True, True, True], [True, False, False]]
    assert out["mark"].tolist() == [[1, 2, 3], [1, 0, 0]] and out["mark"].dtype == torch.int64
    assert out["valid"].tolist() == [[True, True, True], [True, False, False]]
    assert out["lengths"].tolist() == [3, 1] and out["lengths"].dtype == torch.int64
    assert out["params"].shape == (2, 2)
    assert out["episode"].tolist() == [3, 3] and out["start"].dtype == torch.int64
    # params of length 3 in a batch of length-3 episodes is still episode-level
    c = _sample([0.0, 1.0, 2.0], [[1.0]] * 3, device, params=torch.ones(3, device=device))
    assert sd.pad_collate([c, c])["params"].shape == (2, 3)
    with pytest.raises(ValueError, match="sample 1 has keys"):
        sd.pad_collate([a, {"t": a["t"]}])


def test_union_collate_grid(device):
    a = _sample([0.0, 0.5, 1.0], [[1.0]] * 3, device)
    b = _sample([0.25, 0.5], [[1.0]] * 2, device)
    out = sd.union_collate([a, b])
    assert out["grid"].tolist() == [0.0, 0.25, 0.5, 1.0]
    assert out["index"].tolist() == [[0, 2, 3], [1, 2, 0]]
    valid = out["valid"]
    torch.testing.assert_close(out["grid"][out["index"]][valid], out["t"][valid])


def test_union_collate_tol_merges_float_noise(device):
    a = _sample([0.0, 0.3, 0.5], [[1.0]] * 3, device)
    b = _sample([0.1 * 3, 0.4], [[1.0]] * 2, device)  # 0.30000000000000004
    assert 0.1 * 3 != 0.3
    split = sd.union_collate([a, b])
    assert len(split["grid"]) == 5
    merged = sd.union_collate([a, b], tol=1e-12)
    assert len(merged["grid"]) == 4
    assert merged["index"][0, 1] == merged["index"][1, 0] == 1
    assert (merged["grid"][merged["index"]] - merged["t"]).abs()[merged["valid"]].max() < 1e-12


def test_union_collate_relative(device):
    a = _sample([10.0, 10.5, 11.0], [[1.0]] * 3, device)
    b = _sample([3.0, 3.5], [[1.0]] * 2, device)
    out = sd.union_collate([a, b], relative=True)
    assert out["t0"].tolist() == [10.0, 3.0]
    assert out["grid"].tolist() == [0.0, 0.5, 1.0]
    assert out["index"].tolist() == [[0, 1, 2], [0, 1, 0]]
    assert out["t"].tolist() == [[0.0, 0.5, 1.0], [0.0, 0.5, 0.0]]
    with pytest.raises(ValueError, match="tol must be a finite number >= 0"):
        sd.union_collate([a, b], tol=-1.0)


def test_dataloader_with_two_workers(tmp_path, state_factory, rng):
    eps = state_factory(rng, rng.integers(1, 30, size=40))
    path = sd.write(tmp_path / "dl.h5", eps, kind="state", system="s")
    ds = sd.TrajectoryDataset(path, fields=("t", "x", "mask"), dtype=torch.float64)
    loader = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=sd.union_collate)
    seen = 0
    for batch in loader:
        for b, e in enumerate(batch["episode"].tolist()):
            n = int(batch["lengths"][b])
            assert n == len(eps[e]["t"])
            np.testing.assert_array_equal(batch["t"][b, :n].numpy(), eps[e]["t"])
            np.testing.assert_array_equal(batch["x"][b, :n].numpy(), eps[e]["x"])
            assert not batch["mask"][b, n:].any()
            seen += 1
    assert seen == 40
