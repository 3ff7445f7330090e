"""DynaDiff's multi-environment protocols and the files make_environments writes."""

import dataclasses
import itertools

import numpy as np
import pytest
import torch

import simsci.data as sdata
from simsci.errors import UnknownNameError
from simsci.models.dynadiff._protocol import (
    PROTOCOLS,
    Protocol,
    env_ids,
    get_protocol,
    make_environments,
)

GRID_SIZES = {
    "lotka_volterra": 81,
    "glycolytic_oscillator": 64,
    "damped_pendulum": 64,
    "gray_scott": 9,
    "navier_stokes_2d": 7,
}
NAMES = list(GRID_SIZES)


def test_registry_holds_the_five_systems():
    assert sorted(PROTOCOLS) == sorted(NAMES)
    for name in NAMES:
        assert get_protocol(name) is PROTOCOLS[name]
        assert PROTOCOLS[name].system == name


@pytest.mark.parametrize("name", NAMES)
def test_protocol_sets(name):
    p = get_protocol(name)
    train = p.environments("train")
    assert len(train) == GRID_SIZES[name]
    assert p.environments("val") == train
    # the grid is the cartesian product, in itertools.product order over varied
    combos = list(itertools.product(*(p.train_grid[k] for k in p.varied)))
    assert [tuple(e[k] for k in p.varied) for e in train] == combos
    # full parameter dicts: every system parameter, fixed values applied
    for env in train + p.environments("in_domain") + p.environments("out_of_domain"):
        assert tuple(env) == p.param_names
        for k, v in p.fixed.items():
            assert env[k] == v
    ranges = p.param_range()
    assert set(ranges) == set(p.varied)
    nodes = set(combos)
    for env in p.environments("in_domain"):
        assert all(lo < env[k] < hi for k, (lo, hi) in ranges.items())
        assert tuple(env[k] for k in p.varied) not in nodes
        assert not p.is_extrapolation(env)
    for env in p.environments("out_of_domain"):
        assert any(not lo <= env[k] <= hi for k, (lo, hi) in ranges.items())
        assert p.is_extrapolation(env)
    assert not any(p.is_extrapolation(e) for e in train)
    assert 2 <= p.context_steps < p.frames
    assert p.n_val_per_env >= 2 and p.n_test_per_env >= 2
    assert p.param_rows("train").shape == (len(train), len(p.param_names))
    assert Protocol(**p.to_dict()) == p


def test_specific_ranges():
    lv = get_protocol("lotka_volterra")
    assert lv.fixed == {"alpha": 0.5, "gamma": 0.5}
    assert lv.param_range() == {"beta": (0.5, 1.0), "delta": (0.5, 1.0)}
    assert (lv.t_end, lv.dt, lv.frames) == (10.0, 0.5, 21)
    assert len(lv.in_domain) == 6 and len(lv.out_of_domain) == 6
    ns = get_protocol("navier_stokes_2d")
    assert ns.param_range() == {"nu": (8e-4, 1.2e-3)}
    assert ns.make_system().resolution == (32, 32)
    assert get_protocol("gray_scott").make_system().state_shape == (32, 32, 2)
    # unforced: a fixed forcing field is out of reach of translation-equivariant experts
    assert ns.fixed == {"forcing": 0.0} and ns.n_train_per_env == 16


def test_dense_grids_keep_the_held_out_points_apart():
    # the ODE zoos have 64+ experts; every in-domain point stays off the grid lines of
    # the denser grids (at least 3% of a spacing from each) and inside the range
    for name in ("lotka_volterra", "glycolytic_oscillator", "damped_pendulum"):
        p = get_protocol(name)
        assert len(p.environments("train")) >= 64
        for point in p.in_domain:
            for k in p.varied:
                grid = np.asarray(p.train_grid[k])
                assert np.abs(grid - point[k]).min() >= 0.03 * (grid[1] - grid[0]), (name, point)


def test_is_extrapolation_inputs():
    p = get_protocol("lotka_volterra")
    assert not p.is_extrapolation({"beta": 0.5, "delta": 1.0})  # closed range
    assert p.is_extrapolation({"beta": 0.49, "delta": 0.7})
    assert p.is_extrapolation(np.array([0.5, 0.7, 0.5, 1.2]))  # a full row
    assert not p.is_extrapolation(torch.tensor([0.5, 0.7, 0.5, 0.9]))
    with pytest.raises(ValueError, match="missing"):
        p.is_extrapolation({"beta": 0.7})
    with pytest.raises(ValueError, match="not a parameter"):
        p.is_extrapolation({"beta": 0.7, "delta": 0.7, "rho": 1.0})
    with pytest.raises(ValueError, match="full row of 4"):
        p.is_extrapolation([0.7, 0.7])


def test_unknown_names():
    with pytest.raises(UnknownNameError, match="lotka_volterra") as info:
        get_protocol("lotka_voltera")
    assert "did you mean 'lotka_volterra'" in str(info.value)
    assert "navier_stokes_2d" in str(info.value)
    with pytest.raises(UnknownNameError, match="Valid names"):
        make_environments("lorenz63", "unused")
    with pytest.raises(UnknownNameError, match="environment set"):
        get_protocol("lotka_volterra").environments("test")


def test_validation_rejects_bad_protocols():
    base = get_protocol("lotka_volterra")
    bad = {
        "strictly inside": {"in_domain": [{"beta": 0.4, "delta": 0.7}]},
        "off the grid": {"in_domain": [{"beta": 0.625, "delta": 0.75}]},
        "outside it": {"out_of_domain": [{"beta": 0.7, "delta": 0.7}]},
        "strictly increasing": {"train_grid": {"beta": [0.5, 0.5], "delta": [0.5, 1.0]}},
        "one entry per varied": {"train_grid": {"beta": [0.5, 1.0]}},
        "shorter than an episode": {"context_steps": 21},
        "multiple of dt": {"t_end": 10.2},
        "both varied and fixed": {"fixed": {"beta": 0.5}},
        "not a parameter": {"varied": ("beta", "rho")},
        "n_test_per_env must be an integer >= 2": {"n_test_per_env": 1},
        "n_val_per_env must be an integer >= 2": {"n_val_per_env": 1},
        "must be finite": {"in_domain": [{"beta": float("nan"), "delta": 0.7}]},
    }
    for message, change in bad.items():
        with pytest.raises(ValueError, match=message):
            dataclasses.replace(base, **change)
    # the system checks the values: lotka_volterra parameters must be positive
    with pytest.raises(ValueError, match="must be finite and lie in"):
        dataclasses.replace(base, out_of_domain=[{"beta": -0.1, "delta": 0.7}])


def test_quick_shrinks_and_keeps_the_range():
    for name in NAMES:
        p = get_protocol(name)
        q = p.quick()
        assert q.param_range() == p.param_range()
        assert len(q.environments("train")) < len(p.environments("train"))
        assert set(map(tuple, q.param_rows("train"))) <= set(map(tuple, p.param_rows("train")))
        assert (q.t_end, q.dt, q.context_steps) == (p.t_end, p.dt, p.context_steps)
    # the quick sizes the tests and the tour run on stay small as the full grids grow
    assert len(get_protocol("lotka_volterra").quick().environments("train")) == 9
    assert get_protocol("lotka_volterra").quick().train_grid["beta"] == [0.5, 0.75, 1.0]
    assert len(get_protocol("gray_scott").quick().environments("train")) == 4
    assert len(get_protocol("navier_stokes_2d").quick().environments("train")) == 3


def _check_files(paths, protocol):
    sizes = {
        "train": protocol.n_train_per_env,
        "val": protocol.n_val_per_env,
        "in_domain": protocol.n_test_per_env,
        "out_of_domain": protocol.n_test_per_env,
    }
    labels = {"train": 0, "val": 1, "in_domain": 2, "out_of_domain": 2}
    assert set(paths) == set(sizes)
    for key, path in paths.items():
        assert path.name == f"{key}.h5" and path.exists()
        ds = sdata.open(path)
        rows = ds.column("params")
        envs = protocol.param_rows(key)
        n = sizes[key]
        assert len(ds) == n * envs.shape[0]
        # each environment's episodes contiguous, in environments() order
        np.testing.assert_array_equal(rows, np.repeat(envs, n, axis=0))
        ids = env_ids(rows, protocol, which=key)
        assert ids.dtype == torch.long
        torch.testing.assert_close(ids, torch.arange(envs.shape[0]).repeat_interleave(n))
        assert set(ds.column("split").tolist()) == {labels[key]}
        ep = ds[0]
        np.testing.assert_allclose(ep["t"], protocol.dt * np.arange(protocol.frames))
        assert ds.names("params") == list(protocol.param_names)
    return sdata.open(paths["train"]), sdata.open(paths["val"])


def test_make_environments_lotka_volterra(tmp_path):
    protocol = get_protocol("lotka_volterra").quick()
    paths = make_environments("lotka_volterra", tmp_path / "lv", quick=True, seed=3)
    train, val = _check_files(paths, protocol)
    assert train[0]["x"].shape == (protocol.frames, 2)
    assert train.meta["system"]["params"]["alpha"] == 0.5
    # independent seeds per file: no validation episode repeats a training one
    x0_train = np.stack([train[i]["x"][0] for i in range(len(train))])
    x0_val = np.stack([val[i]["x"][0] for i in range(len(val))])
    assert np.abs(x0_train[:, None] - x0_val[None]).sum(-1).min() > 1e-6
    # same seed, same data (generate is deterministic)
    again = make_environments(protocol, tmp_path / "again", seed=3)
    first, second = sdata.open(paths["in_domain"]), sdata.open(again["in_domain"])
    np.testing.assert_array_equal(first[1]["x"], second[1]["x"])


def test_make_environments_gray_scott(tmp_path):
    protocol = get_protocol("gray_scott").quick()
    paths = make_environments("gray_scott", tmp_path, quick=True)
    train, _ = _check_files(paths, protocol)
    x = train[0]["x"]
    assert x.shape == (protocol.frames, 32, 32, 2)
    assert np.isfinite(x).all()
    # the fields move between frames and F, k change the dynamics
    change = np.linalg.norm(np.diff(x, axis=0).reshape(x.shape[0] - 1, -1), axis=1)
    assert (change / np.linalg.norm(x[:-1].reshape(x.shape[0] - 1, -1), axis=1)).min() > 1e-3
    assert train.meta["domain"] == [0.5, 0.5]


def test_env_ids_matching_and_errors():
    p = get_protocol("navier_stokes_2d")
    rows = p.param_rows("out_of_domain")[[2, 0, 1, 2]]
    torch.testing.assert_close(env_ids(rows, p, which="out_of_domain"), torch.tensor([2, 0, 1, 2]))
    # a tensor keeps its device; float32 storage still matches
    t = torch.as_tensor(p.param_rows("train"), dtype=torch.float32)
    torch.testing.assert_close(env_ids(t, "navier_stokes_2d"), torch.arange(7))
    with pytest.raises(ValueError, match="matches no 'train' environment"):
        env_ids(p.param_rows("in_domain"), p)
    with pytest.raises(ValueError, match=r"shape \(N, 2\)"):
        env_ids(np.zeros((3, 1)), p)
