"""``simsci.data.import_aeon``: aeon's bundled classification sets as irregular, masked
sensor sequences (layout, splits, masks, unequal lengths, seeds, errors, the CLI)."""

import sys
from pathlib import Path

import numpy as np
import pytest

import simsci.data
from simsci.cli import main
from simsci.errors import UnknownNameError


def _aeon():
    return pytest.importorskip(
        "aeon", reason="the optional package aeon is not installed (pip install 'simsci[aeon]')"
    )


def _episodes(path):
    ds = simsci.data.open(path)
    return ds, [ds[i] for i in range(len(ds))]


def test_a_missing_aeon_is_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "aeon", None)  # import aeon now raises ImportError
    monkeypatch.setitem(sys.modules, "aeon.datasets", None)
    with pytest.raises(ImportError, match=r'pip install "simsci\[aeon\]"'):
        simsci.data.import_aeon("BasicMotions", tmp_path / "b.h5")
    assert main(["data", "import", "aeon", "BasicMotions", str(tmp_path / "b.h5")]) == 2
    err = capsys.readouterr().err
    assert 'pip install "simsci[aeon]"' in err and "Traceback" not in err
    assert not (tmp_path / "b.h5").exists()


def test_basic_motions_irregular_layout(tmp_path):
    aeon = _aeon()
    from aeon.datasets import load_from_ts_file

    path = simsci.data.import_aeon("BasicMotions", tmp_path / "b.h5", keep=0.5, seed=0)
    assert simsci.data.check_file(path) == []
    ds, eps = _episodes(path)
    assert ds.kind == "state" and ds.system == "aeon:BasicMotions" and len(ds) == 80
    meta = ds.meta
    assert meta["class_names"] == ["standing", "running", "walking", "badminton"]
    assert meta["time_unit"] == "s" and meta["sampling_rate"] == 10.0
    split, label = ds.column("split"), ds.column("label")
    # aeon's 40 train cases -> 36 train + 4 validation (10%, seeded); its 40 test -> test
    assert np.bincount(split).tolist() == [36, 4, 40] and (split[40:] == 2).all()
    assert label.dtype == np.int64 and label.shape == (80,) and set(label.tolist()) == {0, 1, 2, 3}
    data_dir = Path(aeon.datasets.__file__).parent / "data"
    X, y = load_from_ts_file(str(data_dir / "BasicMotions" / "BasicMotions_TRAIN.ts"))
    assert ds.column("source_index")[:40].tolist() == list(range(40))
    for i, ep in enumerate(eps[:40]):
        x, m, t = ep["x"], ep["mask"], ep["t"]
        assert x.shape == m.shape and x.shape[1] == 6 and np.array_equal(np.isnan(x), ~m)
        assert m.sum(axis=0).tolist() == [50] * 6  # each channel keeps 50 of its 100 points
        assert m.any(axis=1).all() and np.all(np.diff(t) > 0)
        j = np.round(t * 10).astype(int)  # t = sample index / 10 Hz
        np.testing.assert_allclose(t, j / 10.0)
        np.testing.assert_array_equal(x[m], X[i].T[j][m])  # the source values where kept
        assert meta["class_names"][ep["label"]] == y[i]


def test_unequal_lengths_keep_their_own_length(tmp_path):
    _aeon()
    path = simsci.data.import_aeon("JapaneseVowels", tmp_path / "v.h5")
    ds = simsci.data.open(path)
    assert len(ds) == 640 and ds[0]["x"].shape[1] == 12
    assert ds.lengths.min() == 7 and ds.lengths.max() == 29  # keep = 1: every frame
    assert all(ds[i]["mask"].all() for i in range(0, 640, 50))
    np.testing.assert_allclose(np.diff(ds[0]["t"]), 0.0064)  # the 6.4 ms frame shift
    assert ds.meta["class_names"] == [str(k) for k in range(1, 10)]
    thin = simsci.data.import_aeon("JapaneseVowels", tmp_path / "w.h5", keep=0.3, seed=2)
    assert simsci.data.check_file(thin) == []
    ep = simsci.data.open(thin)[0]
    length = ds.lengths[0]
    assert ep["mask"].sum(axis=0).tolist() == [max(2, round(0.3 * length))] * 12


def test_import_is_seeded_and_keep_does_not_move_the_split(tmp_path):
    _aeon()
    a = simsci.data.import_aeon("BasicMotions", tmp_path / "a.h5", keep=0.5, seed=1)
    b = simsci.data.import_aeon("BasicMotions", tmp_path / "b.h5", keep=0.5, seed=1)
    c = simsci.data.import_aeon("BasicMotions", tmp_path / "c.h5", keep=0.5, seed=2)
    d = simsci.data.import_aeon("BasicMotions", tmp_path / "d.h5", keep=0.8, seed=1)
    _, ea = _episodes(a)
    _, eb = _episodes(b)
    _, ec = _episodes(c)
    assert all(np.array_equal(x["mask"], y["mask"]) for x, y in zip(ea, eb))
    assert not all(np.array_equal(x["mask"], y["mask"]) for x, y in zip(ea, ec))
    split = simsci.data.open(a).column("split")
    assert np.array_equal(simsci.data.open(d).column("split"), split)
    unknown = simsci.data.import_aeon("GunPoint", tmp_path / "g.h5", sampling_rate=50)
    meta = simsci.data.open(unknown).meta
    assert meta["time_unit"] == "s" and simsci.data.open(unknown)[0]["t"][1] == 0.02
    plain = simsci.data.open(simsci.data.import_aeon("GunPoint", tmp_path / "h.h5"))
    assert plain.meta["time_unit"] == "sample" and plain[0]["t"][:3].tolist() == [0.0, 1.0, 2.0]


def test_bad_aeon_input_is_rejected(tmp_path, capsys):
    aeon = _aeon()
    out = tmp_path / "x.h5"
    assert "BasicMotions" in simsci.data.bundled_aeon_datasets()
    assert "Covid3Month" not in simsci.data.bundled_aeon_datasets()  # a regression set
    with pytest.raises(UnknownNameError, match="did you mean 'BasicMotions'.*extract_path"):
        simsci.data.import_aeon("BasicMotion", out)
    for keep in (0.0, 1.5):
        with pytest.raises(ValueError, match=r"keep must lie in \(0, 1\]"):
            simsci.data.import_aeon("BasicMotions", out, keep=keep)
    with pytest.raises(ValueError, match=r"val_fraction must lie in \[0, 1\)"):
        simsci.data.import_aeon("BasicMotions", out, val_fraction=1.0)
    with pytest.raises(ValueError, match="sampling_rate must be a finite number > 0"):
        simsci.data.import_aeon("BasicMotions", out, sampling_rate=-1.0)
    with pytest.raises(FileNotFoundError, match="no train file"):
        simsci.data.import_aeon("BasicMotions", out, extract_path=tmp_path)
    data_dir = Path(aeon.datasets.__file__).parent / "data"
    with pytest.raises(ValueError, match="not a classification problem"):
        simsci.data.import_aeon("Covid3Month", out, extract_path=data_dir)
    assert not out.exists()
    code = main(["data", "import", "pdebench", "a.h5", str(out), "--keep", "0.5"])
    assert code == 2 and "--keep applies to 'data import aeon' only" in capsys.readouterr().err


def test_data_import_aeon_from_the_cli(tmp_path, capsys):
    _aeon()
    out = tmp_path / "basic.h5"
    code = main(["data", "import", "aeon", "BasicMotions", str(out), "--keep", "0.5"])
    assert code == 0 and "wrote" in capsys.readouterr().out
    assert main(["data", "check", str(out)]) == 0
    ds = simsci.data.open(out)
    assert ds.meta["keep"] == 0.5 and len(ds) == 80
