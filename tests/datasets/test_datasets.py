"""``simsci.datasets.make_dataset``: the pendulum image sequences and the climate stations
(layout, masks, labels, splits, the noise and weather models, seeds, bad input)."""

import functools
import math
from pathlib import Path

import numpy as np
import pytest

import simsci.data
import simsci.datasets as datasets
import simsci.systems as systems
from simsci.datasets._climate import CORRELATION, LATITUDE_RANGE, climatology
from simsci.datasets._pendulum_images import render_pendulum
from simsci.errors import UnknownNameError

FAST_PEND = {"t_end": 2.0, "dt": 0.1}  # 21 grid frames


def _episodes(path):
    ds = simsci.data.open(path)
    return ds, [ds[i] for i in range(len(ds))]


def _same_files(a, b) -> bool:
    _, ea = _episodes(a)
    _, eb = _episodes(b)
    return len(ea) == len(eb) and all(
        x.keys() == y.keys() and all(np.array_equal(x[k], y[k], equal_nan=True) for k in x)
        for x, y in zip(ea, eb)
    )


# ------------------------------------------------------------------ registry
def test_registry_lists_the_datasets_and_their_options():
    names = datasets.available_datasets()
    assert names == sorted(names)
    assert {"climate", "pendulum_images", "hawkes", "population_events", "mobility"} <= set(names)
    opts = datasets.DATASETS["pendulum_images"].options()
    assert opts["keep"] == 0.5 and opts["size"] == 24 and "out" not in opts
    assert datasets.DATASETS["climate"].options()["years"] == 2
    assert not set(datasets.DATASETS) & set(systems.SYSTEMS)


def test_a_family_builder_gets_the_shared_options_and_its_names_defaults(tmp_path):
    seen = {}

    def build(variant, n, common, *, size=3, **extra):
        seen.update(variant=variant, n=n, common=common, size=size, extra=extra)
        return Path(common.out)

    register = datasets.register_dataset
    try:
        register("_test_a", "a", split=(0.5, 0.5, 0.0), defaults={"size": 5, "level": 1.0})(
            functools.partial(build, "_test_a")
        )
        register("_test_b", "b")(functools.partial(build, "_test_b"))
        a, b = datasets.DATASETS["_test_a"], datasets.DATASETS["_test_b"]
        assert a.options() == {"size": 5, "level": 1.0, "split": (0.5, 0.5, 0.0)}
        assert b.options() == {"size": 3, "split": (0.8, 0.1, 0.1)}
        out = tmp_path / "x.h5"
        datasets.make_dataset("_test_a", 2, out=out, seed=4, level=2.0)
        assert seen["variant"] == "_test_a" and seen["n"] == 2
        assert seen["common"] == datasets.BuildOptions(out, 4, False, (0.5, 0.5, 0.0))
        assert seen["size"] == 5 and seen["extra"] == {"level": 2.0}
        datasets.make_dataset("_test_b", 1, out=out, progress=True, split=(1, 0, 0), size=7)
        assert seen["common"] == datasets.BuildOptions(out, 0, True, (1, 0, 0))
        assert seen["size"] == 7 and seen["extra"] == {}
        with pytest.raises(UnknownNameError, match="no option 'level'.*size=3, split="):
            datasets.make_dataset("_test_b", 1, out=out, level=1.0)
        with pytest.raises(ValueError, match="already taken by a dataset"):
            register("_test_a", "again")(build)
    finally:
        datasets.DATASETS.pop("_test_a", None)
        datasets.DATASETS.pop("_test_b", None)


def test_bad_dataset_arguments_are_rejected(tmp_path):
    out = tmp_path / "d.h5"
    with pytest.raises(
        UnknownNameError, match="unknown dataset 'pendulum_image'.*'pendulum_images'"
    ):
        datasets.make_dataset("pendulum_image", 2, out=out)
    with pytest.raises(UnknownNameError, match="'lorenz63' is a system.*generate"):
        datasets.make_dataset("lorenz63", 2, out=out)
    with pytest.raises(UnknownNameError, match="no option 'method'.*its options: keep=0.7"):
        datasets.make_dataset("climate", 2, out=out, method="rk4")
    for n in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="n must be a positive integer"):
            datasets.make_dataset("climate", n, out=out)
    for name in ("climate", "pendulum_images"):
        for keep in (0.0, 1.5, -0.1, math.nan):
            with pytest.raises(ValueError, match=r"keep must lie in \(0, 1\]"):
                datasets.make_dataset(name, 2, out=out, keep=keep)
        with pytest.raises(ValueError, match="split must be three non-negative fractions"):
            datasets.make_dataset(name, 2, out=out, split=(0.5, 0.6, 0.1))
        with pytest.raises(ValueError, match="seed must be a non-negative integer"):
            datasets.make_dataset(name, 2, out=out, seed=-1)
    with pytest.raises(ValueError, match="t_end must be a positive multiple of dt"):
        datasets.make_dataset("pendulum_images", 2, out=out, t_end=1.05, dt=0.1)
    with pytest.raises(ValueError, match="size must be a finite number >= 8"):
        datasets.make_dataset("pendulum_images", 2, out=out, size=4)
    with pytest.raises(ValueError, match=r"corrupt_prob must lie in \[0, 1\]"):
        datasets.make_dataset("pendulum_images", 2, out=out, corrupt_prob=1.2)
    with pytest.raises(ValueError, match=r"missing must lie in \[0, 1\)"):
        datasets.make_dataset("climate", 2, out=out, missing=1.0)
    with pytest.raises(ValueError, match="years must be an integer"):
        datasets.make_dataset("climate", 2, out=out, years=1.5)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        datasets.make_dataset("climate", 2, out=tmp_path / "no" / "d.h5")
    assert not out.exists()


# ------------------------------------------------------------ pendulum images
def test_pendulum_images_layout(tmp_path):
    path = datasets.make_dataset("pendulum_images", 10, out=tmp_path / "p.h5", seed=1, **FAST_PEND)
    assert simsci.data.check_file(path) == []
    ds, eps = _episodes(path)
    assert ds.kind == "state" and ds.system == "pendulum_images" and len(ds) == 10
    assert ds.meta["image_shape"] == [24, 24] and ds.meta["kept_per_episode"] == 10
    assert ds.names("angle") == ["sin", "cos"] and ds.names("label") == ["sin_theta", "cos_theta"]
    assert ds.names("params") == ["g", "L", "damping"]
    grid = 0.1 * np.arange(21)
    for ep in eps:
        x = ep["x"]
        assert x.shape == (10, 576) and x.dtype == np.float32
        assert 0.0 <= x.min() and x.max() <= 1.0 and "mask" not in ep
        assert np.all(np.diff(ep["t"]) > 0) and np.isin(ep["t"], grid).all()
        assert ep["angle"].shape == (10, 2) and ep["state"].shape == (10, 2)
        theta = ep["state"][:, 0].astype(np.float64)
        np.testing.assert_allclose(
            ep["angle"], np.stack([np.sin(theta), np.cos(theta)], 1), atol=1e-6
        )
        assert ep["label"].shape == (2,) and np.array_equal(ep["label"], ep["angle"][-1])
        g, length, damping = ep["params"]
        assert g == 9.81 and 0.5 <= length <= 2.0 and 0.0 <= damping <= 0.5
    labels = ds.column("label")
    assert labels.shape == (10, 2) and labels.dtype == np.float32
    np.testing.assert_allclose((labels**2).sum(1), 1.0, atol=1e-5)
    assert np.bincount(ds.column("split"), minlength=3).tolist() == [8, 1, 1]
    assert ds.stats["x"]["mean"].shape == (576,)


def test_pendulum_frames_show_the_bob_at_its_angle(tmp_path):
    path = datasets.make_dataset(
        "pendulum_images", 4, out=tmp_path / "p.h5", noise_std=0.0, corrupt_prob=0.0, **FAST_PEND
    )
    _, eps = _episodes(path)
    c = 23 / 2
    rows, cols = np.mgrid[0:24, 0:24]
    for ep in eps:
        theta = ep["state"][:, 0]
        # state is stored in float32: the frames agree to its rounding
        np.testing.assert_allclose(ep["x"], render_pendulum(theta, 24).reshape(-1, 576), atol=1e-5)
        assert not ep["corruption"].any()
        img = ep["x"].reshape(-1, 24, 24).astype(np.float64)
        mass = img.sum((1, 2))
        col = (img * cols).sum((1, 2)) / mass - c
        row = (img * rows).sum((1, 2)) / mass - c
        np.testing.assert_allclose(np.arctan2(col, row), theta, atol=0.03)  # centroid's angle
        np.testing.assert_allclose(np.hypot(col, row), 0.36 * 24, rtol=0.03)
    # anti-aliased disc: area pi r^2, a one-pixel edge, bright centre
    frame = render_pendulum(np.array([0.3]), 24)[0]
    assert frame.max() == 1.0 and abs(frame.sum() - math.pi * (0.11 * 24) ** 2) < 0.5
    assert ((frame > 0) & (frame < 1)).sum() > 8


def test_pendulum_noise_and_corrupted_frames(tmp_path):
    path = datasets.make_dataset(
        "pendulum_images", 20, out=tmp_path / "p.h5", noise_std=0.05, corrupt_prob=0.3, **FAST_PEND
    )
    _, eps = _episodes(path)
    w = np.concatenate([e["corruption"] for e in eps])
    assert w.shape == (200,) and abs((w > 0).mean() - 0.3) < 0.1
    assert w[w > 0].min() >= 0.5 and w.max() <= 1.0
    dark_clean, dark_corrupt = [], []
    for e in eps:
        clean = render_pendulum(e["state"][:, 0], 24).reshape(-1, 576)
        dark = clean == 0.0
        hit = e["corruption"] > 0
        dark_clean.append(e["x"][~hit][dark[~hit]])
        dark_corrupt.append(e["x"][hit][dark[hit]])
    # clean frames: clip(0 + 0.05 eps, 0, 1) on dark pixels has mean 0.05 / sqrt(2 pi)
    assert np.concatenate(dark_clean).mean() == pytest.approx(
        0.05 / math.sqrt(2 * math.pi), rel=0.05
    )
    # corrupted frames: mostly uniform noise (mean w / 2 >= 0.25 on dark pixels)
    assert np.concatenate(dark_corrupt).mean() > 0.25


def test_pendulum_images_are_seeded(tmp_path):
    a = datasets.make_dataset("pendulum_images", 4, out=tmp_path / "a.h5", seed=3, **FAST_PEND)
    b = datasets.make_dataset("pendulum_images", 4, out=tmp_path / "b.h5", seed=3, **FAST_PEND)
    c = datasets.make_dataset("pendulum_images", 4, out=tmp_path / "c.h5", seed=4, **FAST_PEND)
    assert _same_files(a, b) and not _same_files(a, c)
    # keep draws its own stream: the simulated pendulums do not change with it
    d = datasets.make_dataset(
        "pendulum_images", 4, out=tmp_path / "d.h5", seed=3, keep=1.0, **FAST_PEND
    )
    np.testing.assert_array_equal(
        simsci.data.open(d).column("params"), simsci.data.open(a).column("params")
    )
    ep_a, ep_d = simsci.data.open(a)[0], simsci.data.open(d)[0]
    idx = np.searchsorted(ep_d["t"], ep_a["t"])
    np.testing.assert_array_equal(ep_d["state"][idx], ep_a["state"])


# -------------------------------------------------------------------- climate
def test_climate_layout_masks_and_station_splits(tmp_path):
    path = datasets.make_dataset("climate", 9, out=tmp_path / "c.h5", seed=2, missing=0.2)
    assert simsci.data.check_file(path) == []
    ds, eps = _episodes(path)
    assert ds.kind == "state" and ds.system == "climate" and len(ds) == 9
    assert ds.names("x") == ["temperature", "pressure", "humidity", "wind", "precipitation"]
    assert ds.meta["stations"] == 5 and ds.meta["split_by"] == "station"
    station, year = ds.column("station"), ds.column("year")
    assert station.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4] and year.tolist() == [0, 1] * 4 + [0]
    label, split = ds.column("label"), ds.column("split")
    assert (
        label.shape == (9, 1) and label.dtype == np.float32 and ds.column("params").shape == (9, 2)
    )
    lo, hi = LATITUDE_RANGE
    assert np.all((lo <= label) & (label <= hi))
    for s in range(5):  # one latitude and one split per station
        assert len(set(label[station == s, 0].tolist())) == 1
        assert len(set(split[station == s].tolist())) == 1
    # 5 stations: round(0.8 * 5) = 4 train, round(0.5) = 0 val, 1 test
    assert np.bincount(split[::2], minlength=3).tolist() == [4, 0, 1]
    for ep in eps:
        x, m, t = ep["x"], ep["mask"], ep["t"]
        assert x.shape == m.shape and x.shape[1] == 5 and x.dtype == np.float32
        assert np.array_equal(np.isnan(x), ~m) and m.any(axis=1).all()  # NaN exactly where missing
        assert np.all(np.diff(t) > 0) and np.all(t == np.round(t)) and 0 <= t[0] and t[-1] < 365
        assert len(t) <= round(0.7 * 365)
        assert 0.6 < m.mean() < 0.95  # 20% missing at random plus outages
        rain, wind, humidity = x[m[:, 4], 4], x[m[:, 3], 3], x[m[:, 2], 2]
        assert rain.min() >= 0 and (rain == 0).any() and wind.min() > 0 and humidity.max() <= 100
    assert np.isfinite(ds.stats["x"]["mean"]).all()


def test_climate_splits_count_stations(tmp_path):
    path = datasets.make_dataset(
        "climate", 40, out=tmp_path / "c.h5", days=30, split=(0.5, 0.25, 0.25)
    )
    ds = simsci.data.open(path)
    per_station = ds.column("split")[::2]
    assert np.bincount(per_station, minlength=3).tolist() == [10, 5, 5]


def test_climate_weather_model(tmp_path):
    """Full daily records: the annual cycle flips between hemispheres and the anomalies
    have the documented cross-channel correlation and unit variance."""
    path = datasets.make_dataset(
        "climate", 40, out=tmp_path / "c.h5", seed=1, keep=1.0, missing=0.0, outages=0.0
    )
    ds, eps = _episodes(path)
    params, label = ds.column("params"), ds.column("label")[:, 0]
    anomalies, north, south = [], [], []
    for i, ep in enumerate(eps):
        assert ep["mask"].all() and len(ep["t"]) == 365
        terms = climatology(label[i], params[i, 0], params[i, 1], ep["t"])
        a = (ep["x"][:, :2] - terms["mean"][:, :2] - terms["season"][:, :2]) / terms["scale"][:, :2]
        anomalies.append(a)
        july_minus_january = ep["x"][180:220, 0].mean() - ep["x"][0:40, 0].mean()
        (north if label[i] > 30 else south if label[i] < -30 else []).append(july_minus_january)
    assert north and south and min(north) > 3 and max(south) < -3
    a = np.concatenate(anomalies)
    np.testing.assert_allclose(a.std(0), 1.0, atol=0.1)
    # ~14600 days with 3-5 day memory: the correlation's standard error is ~0.03
    assert np.corrcoef(a.T)[0, 1] == pytest.approx(CORRELATION[0, 1], abs=0.1)


def test_climate_is_seeded(tmp_path):
    kwargs = {"days": 60, "missing": 0.2}
    a = datasets.make_dataset("climate", 5, out=tmp_path / "a.h5", seed=1, **kwargs)
    b = datasets.make_dataset("climate", 5, out=tmp_path / "b.h5", seed=1, **kwargs)
    c = datasets.make_dataset("climate", 5, out=tmp_path / "c.h5", seed=2, **kwargs)
    assert _same_files(a, b) and not _same_files(a, c)
