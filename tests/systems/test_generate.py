"""``simsci.systems.generate``: files, subsampling, noise, parameters, splits, seeds,
batching, failures and distributed shards."""

import math

import numpy as np
import pytest
import torch

import simsci.data
import simsci.integrate
import simsci.systems as systems
from simsci.errors import SolverError, UnknownNameError

FAST = {"t_end": 1.0, "dt": 0.1, "method": "rk4", "progress": False}


def _arrays(path):
    """Every episode's arrays, for exact comparisons of two files."""
    ds = simsci.data.open(path)
    return [{k: np.asarray(v) for k, v in ds[i].items()} for i in range(len(ds))]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(
        ea.keys() == eb.keys() and all(np.array_equal(ea[k], eb[k], equal_nan=True) for k in ea)
        for ea, eb in zip(a, b)
    )


def test_round_trip_defaults(tmp_path, device):
    path = systems.generate("lorenz63", 10, out=tmp_path / "l.h5", device=device, **FAST)
    assert path == tmp_path / "l.h5"
    ds = simsci.data.open(path)
    assert len(ds) == 10 and ds.system == "lorenz63" and ds.kind == "state"
    assert ds.names("x") == ["x", "y", "z"] and ds.names("params") == ["sigma", "rho", "beta"]
    meta = ds.meta
    for key, value in {
        "t_end": 1.0,
        "dt": 0.1,
        "keep": 1.0,
        "per_channel": False,
        "obs_noise": 0.0,
        "seed": 0,
        "method": "rk4",
        "params_mode": "default",
    }.items():
        assert meta[key] == value
    assert meta["system"]["name"] == "lorenz63" and "simsci_version" in meta
    params = ds.column("params")
    np.testing.assert_allclose(params, np.tile([10.0, 28.0, 8.0 / 3.0], (10, 1)))
    grid = np.arange(11) * 0.1
    lorenz = systems.get("lorenz63")
    for i in range(10):
        ep = ds[i]
        np.testing.assert_allclose(ep["t"], grid, rtol=0, atol=1e-12)
        assert ep["x"].shape == (11, 3) and "mask" not in ep
        # the stored trajectory is the system's flow from its first state
        again = lorenz.simulate(torch.as_tensor(ep["x"][:1]), grid, method="rk4", step_size=0.1)
        np.testing.assert_allclose(ep["x"], again[0].numpy(), rtol=1e-10, atol=1e-10)


def test_keep_subsamples_each_episode(tmp_path):
    path = systems.generate(
        "van_der_pol",
        12,
        keep=0.3,
        out=tmp_path / "v.h5",
        seed=1,
        t_end=2.0,
        dt=0.05,
        method="rk4",
        progress=False,
    )
    ds = simsci.data.open(path)
    length = 41
    k = max(2, round(0.3 * length))
    assert ds.meta["kept_per_episode"] == k
    assert list(ds.lengths) == [k] * 12
    grid = np.arange(length) * 0.05
    picks = []
    for i in range(12):
        t = ds[i]["t"]
        assert np.all(np.diff(t) > 0)
        idx = np.rint(t / 0.05).astype(int)
        np.testing.assert_allclose(t, grid[idx], atol=1e-12)
        picks.append(tuple(idx))
    assert len(set(picks)) == 12  # each episode its own random times
    # at least two points survive even a tiny keep
    tiny = systems.generate("van_der_pol", 3, keep=0.01, out=tmp_path / "t.h5", **FAST)
    assert list(simsci.data.open(tiny).lengths) == [2, 2, 2]


def test_per_channel_mask_semantics(tmp_path):
    path = systems.generate(
        "lorenz63",
        8,
        keep=0.25,
        per_channel=True,
        out=tmp_path / "m.h5",
        t_end=4.0,
        dt=0.1,
        method="rk4",
        progress=False,
        seed=3,
    )
    ds = simsci.data.open(path)
    k = round(0.25 * 41)
    full = systems.generate(
        "lorenz63",
        8,
        out=tmp_path / "f.h5",
        t_end=4.0,
        dt=0.1,
        method="rk4",
        progress=False,
        seed=3,
    )
    ref = simsci.data.open(full)
    for i in range(8):
        ep = ds[i]
        mask, x, t = ep["mask"], ep["x"], ep["t"]
        assert mask.dtype == np.bool_ and mask.shape == x.shape
        assert np.all(np.isnan(x[~mask])) and np.all(np.isfinite(x[mask]))
        assert list(mask.sum(axis=0)) == [k, k, k]  # each channel keeps k points
        assert np.all(mask.any(axis=1))  # no empty rows
        assert 0 < len(t) <= 3 * k and len(t) > k  # channels chose differently
        # observed values are the full trajectory's values (same seed, same initial states)
        rows = np.rint(t / 0.1).astype(int)
        np.testing.assert_array_equal(x[mask], ref[i]["x"][rows][mask])


def test_per_channel_with_keep_one_writes_a_full_mask(tmp_path):
    path = systems.generate("rigid_body", 2, per_channel=True, out=tmp_path / "r.h5", **FAST)
    ep = simsci.data.open(path)[0]
    assert ep["mask"].all() and ep["mask"].shape == (11, 3)


def test_observation_noise_scales_with_channel_std(tmp_path):
    kwargs = dict(t_end=5.0, dt=0.05, method="rk4", progress=False, seed=4)
    clean = _arrays(systems.generate("lorenz63", 40, out=tmp_path / "c.h5", **kwargs))
    noisy_path = systems.generate("lorenz63", 40, obs_noise=0.1, out=tmp_path / "n.h5", **kwargs)
    noisy = _arrays(noisy_path)
    x_clean = np.concatenate([e["x"] for e in clean])
    x_noisy = np.concatenate([e["x"] for e in noisy])
    std = x_clean.std(axis=0)
    np.testing.assert_allclose(simsci.data.open(noisy_path).meta["obs_noise_std"], std, rtol=1e-10)
    ratio = (x_noisy - x_clean).std(axis=0) / std
    # 4040 draws per channel: the sample std is within a few percent of 0.1
    np.testing.assert_allclose(ratio, 0.1, rtol=0.08)
    assert abs((x_noisy - x_clean).mean(axis=0) / std).max() < 0.01


def test_sampled_parameters_are_recorded_and_in_range(tmp_path):
    path = systems.generate("double_pendulum", 20, params="sample", out=tmp_path / "d.h5", **FAST)
    ds = simsci.data.open(path)
    params = ds.column("params")
    sys = systems.get("double_pendulum")
    assert params.shape == (20, 5) and ds.names("params") == list(sys.param_names)
    for j, key in enumerate(sys.param_names):
        lo, hi = sys.param_ranges[key]
        assert params[:, j].min() >= lo and params[:, j].max() <= hi
    assert len(np.unique(params[:, 0])) == 20
    assert ds.meta["params_mode"] == "sample"


def test_parameter_grid_has_n_episodes_per_point(tmp_path):
    path = systems.generate(
        "lorenz63",
        3,
        params={"rho": [20.0, 28.0], "sigma": [9.0, 11.0]},
        out=tmp_path / "g.h5",
        **FAST,
    )
    ds = simsci.data.open(path)
    params = ds.column("params")
    assert len(ds) == 12
    expected = [(s, r) for r in (20.0, 28.0) for s in (9.0, 11.0) for _ in range(3)]
    assert [(p[0], p[1]) for p in params] == expected
    np.testing.assert_allclose(params[:, 2], 8.0 / 3.0)
    assert ds.meta["params_mode"] == "grid" and len(ds.meta["grid"]) == 4
    # the CLI's string form means the same
    again = systems.generate(
        "lorenz63", 3, params="rho=20,28;sigma=9,11", out=tmp_path / "g2.h5", **FAST
    )
    assert _same(_arrays(path), _arrays(again))


def test_parameter_array_and_bad_parameters(tmp_path):
    rows = np.array([[1.0], [1.5], [2.0]])
    path = systems.generate("van_der_pol", 3, params=rows, out=tmp_path / "a.h5", **FAST)
    np.testing.assert_array_equal(simsci.data.open(path).column("params"), rows)
    with pytest.raises(ValueError, match="3 rows but n=4"):
        systems.generate("van_der_pol", 4, params=rows, out=tmp_path / "b.h5", **FAST)
    with pytest.raises(UnknownNameError, match="unknown parameter 'rh0'.*'rho'"):
        systems.generate("lorenz63", 2, params={"rh0": [1.0]}, out=tmp_path / "c.h5", **FAST)
    with pytest.raises(ValueError, match="'beta'.*must be finite and lie in"):
        systems.generate("lorenz63", 2, params="beta=-1", out=tmp_path / "d.h5", **FAST)
    assert not (tmp_path / "b.h5").exists() and not (tmp_path / "c.h5").exists()


def test_split_fractions(tmp_path):
    path = systems.generate(
        "fitzhugh_nagumo", 50, split=(0.6, 0.2, 0.2), out=tmp_path / "s.h5", **FAST
    )
    split = simsci.data.open(path).column("split")
    assert np.bincount(split, minlength=3).tolist() == [30, 10, 10]
    assert split[:30].tolist() != [0] * 30  # shuffled, not in blocks
    with pytest.raises(ValueError, match="summing to 1"):
        systems.generate("fitzhugh_nagumo", 5, split=(0.5, 0.2, 0.2), out=tmp_path / "x.h5", **FAST)


def test_same_seed_same_file_different_seed_different(tmp_path):
    kwargs = dict(keep=0.5, per_channel=True, obs_noise=0.05, params="sample", **FAST)
    a = _arrays(systems.generate("lotka_volterra", 6, seed=7, out=tmp_path / "a.h5", **kwargs))
    b = _arrays(systems.generate("lotka_volterra", 6, seed=7, out=tmp_path / "b.h5", **kwargs))
    c = _arrays(systems.generate("lotka_volterra", 6, seed=8, out=tmp_path / "c.h5", **kwargs))
    assert _same(a, b)
    assert not _same(a, c)
    assert not np.array_equal(a[0]["params"], c[0]["params"])


def test_sde_generation_is_seeded(tmp_path, device):
    kwargs = dict(t_end=1.0, dt=0.05, progress=False, device=device, burn_in=0.5)
    a = _arrays(systems.generate("ornstein_uhlenbeck", 5, seed=1, out=tmp_path / "a.h5", **kwargs))
    b = _arrays(systems.generate("ornstein_uhlenbeck", 5, seed=1, out=tmp_path / "b.h5", **kwargs))
    c = _arrays(systems.generate("ornstein_uhlenbeck", 5, seed=2, out=tmp_path / "c.h5", **kwargs))
    assert _same(a, b) and not _same(a, c)
    assert a[0]["x"].shape == (21, 1) and a[0]["t"][0] == 0.0


def test_one_batched_solve(tmp_path, monkeypatch):
    calls = []
    real = simsci.integrate.odeint

    def counting(func, y0, t, **kwargs):
        calls.append(tuple(y0.shape))
        return real(func, y0, t, **kwargs)

    monkeypatch.setattr(simsci.integrate, "odeint", counting)
    whole = systems.generate("lorenz63", 20, out=tmp_path / "w.h5", **FAST)
    assert calls == [(20, 3)]
    calls.clear()
    parts = systems.generate("lorenz63", 20, batch_size=8, out=tmp_path / "p.h5", **FAST)
    assert calls == [(8, 3), (8, 3), (4, 3)]
    # batching only bounds memory: a fixed-step solve gives the same file
    assert _same(_arrays(whole), _arrays(parts))


def test_diverging_configuration_raises_solver_error(tmp_path):
    out = tmp_path / "bad.h5"
    with pytest.raises(SolverError, match=r"generate\('lorenz63'\).*episode") as info:
        systems.generate(
            "lorenz63", 4, t_end=40.0, dt=0.5, method="rk4", out=out, progress=False, batch_size=2
        )
    assert info.value.samples and set(info.value.samples) <= {0, 1, 2, 3}
    assert not out.exists()


def test_bad_arguments_are_rejected(tmp_path):
    out = tmp_path / "x.h5"
    with pytest.raises(ValueError, match=r"keep must lie in \(0, 1\]"):
        systems.generate("lorenz63", 2, keep=1.5, out=out, **FAST)
    with pytest.raises(ValueError, match="keep must be a finite number > 0"):
        systems.generate("lorenz63", 2, keep=0.0, out=out, **FAST)
    with pytest.raises(ValueError, match="multiple of dt"):
        systems.generate("lorenz63", 2, t_end=1.05, dt=0.1, out=out, progress=False)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        systems.generate("lorenz63", 0, out=out, **FAST)
    with pytest.raises(ValueError, match="obs_noise"):
        systems.generate("lorenz63", 2, obs_noise=-1.0, out=out, **FAST)
    with pytest.raises(UnknownNameError, match="did you mean 'lorenz63'"):
        systems.generate("lorentz63", 2, out=out, **FAST)
    with pytest.raises(ValueError, match="batch_size"):
        systems.generate("lorenz63", 2, batch_size=0, out=out, **FAST)


def test_unknown_method_fails_before_any_simulation(tmp_path):
    class Watched(type(systems.get("lorenz63"))):
        def _sample_initial(self, n, generator, device):
            raise AssertionError("initial states were drawn before the method was checked")

    out = tmp_path / "x.h5"
    fast = {**FAST, "method": "rk5"}
    with pytest.raises(UnknownNameError, match="unknown ODE method 'rk5'.*'rk4'"):
        systems.generate(Watched(), 2, out=out, **fast)
    fast["method"] = "eulr"
    with pytest.raises(UnknownNameError, match="unknown SDE method 'eulr'.*'euler'"):
        systems.generate("ornstein_uhlenbeck", 2, out=out, **fast)
    assert not out.exists()


def test_progress_bar_and_compression(tmp_path, capsys):
    path = systems.generate(
        "kuramoto", 3, out=tmp_path / "k.h5", t_end=1.0, dt=0.1, method="rk4", compression="gzip"
    )
    assert "generate kuramoto" in capsys.readouterr().err
    ds = simsci.data.open(path)
    np.testing.assert_array_equal(
        ds.static["frequencies"], systems.get("kuramoto").frequencies.numpy()
    )
    assert ds.meta["system"]["options"]["dim"] == 10


def test_generate_accepts_a_system_instance(tmp_path):
    sys = systems.get("lorenz96", dim=5, F=6.0)
    ds = simsci.data.open(systems.generate(sys, 2, out=tmp_path / "l96.h5", **FAST))
    assert ds[0]["x"].shape == (11, 5) and ds.names("x") == ["x0", "x1", "x2", "x3", "x4"]
    assert ds.meta["system"] == sys.config()
    np.testing.assert_array_equal(ds.column("params"), [[6.0], [6.0]])


def test_float32_generation(tmp_path):
    path = systems.generate("van_der_pol", 2, dtype=torch.float32, out=tmp_path / "f.h5", **FAST)
    ep = simsci.data.open(path)[0]
    assert ep["x"].dtype == np.float32 and ep["t"].dtype == np.float64


def test_distributed_ranks_write_shards(tmp_path, monkeypatch):
    out = tmp_path / "shards"
    monkeypatch.setenv("WORLD_SIZE", "2")
    written = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        written.append(systems.generate("lorenz63", 7, out=out, params="sample", **FAST))
    assert [p.name for p in written] == ["part-00000.h5", "part-00001.h5"]
    ds = simsci.data.open(out)
    assert len(ds) == 7
    assert [m["episode_range"] for m in ds.shard_meta] == [[0, 3], [3, 7]]
    params = ds.column("params")
    assert len(np.unique(params[:, 1])) == 7  # rank-dependent seeds: no repeated draws


def test_burn_in_starts_recording_later(tmp_path):
    kwargs = dict(t_end=1.0, dt=0.1, method="rk4", progress=False, seed=5)
    plain = _arrays(systems.generate("van_der_pol", 2, out=tmp_path / "a.h5", **kwargs))
    later = _arrays(
        systems.generate("van_der_pol", 2, burn_in=0.5, out=tmp_path / "b.h5", **kwargs)
    )
    np.testing.assert_allclose(later[0]["t"], plain[0]["t"])
    # the burnt-in episode starts where the plain one is at t = 0.5
    np.testing.assert_allclose(later[0]["x"][0], plain[0]["x"][5], rtol=1e-3, atol=1e-3)
    assert math.isclose(simsci.data.open(tmp_path / "b.h5").meta["burn_in"], 0.5)


@pytest.mark.parametrize(
    "name", [n for n in systems.available() if systems.SYSTEMS[n].kind == "state"]
)
def test_every_system_generates_with_its_defaults(name, tmp_path):
    """Default method and sampled parameters: a short file of finite, named trajectories."""
    sys = systems.get(name)
    t_end = 20 * sys.default_dt
    path = systems.generate(
        name, 3, t_end=t_end, params="sample", out=tmp_path / "s.h5", progress=False
    )
    ds = simsci.data.open(path)
    assert len(ds) == 3 and ds.names("x") == list(sys.state_names)
    assert ds.meta["method"] == sys.default_method
    for i in range(3):
        assert ds[i]["x"].shape == (21, sys.dim) and np.isfinite(ds[i]["x"]).all()
