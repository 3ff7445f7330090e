"""``generate`` for PDE systems: kind="field" files, static grids, parameters, downsampling."""

import numpy as np
import pytest
import torch

import simsci.data
import simsci.systems as systems
from simsci.errors import SolverError

FAST = {"t_end": 0.1, "dt": 0.02, "progress": False}


def test_burgers_round_trip(tmp_path, device):
    burgers = systems.get("burgers", resolution=128, nu=0.02)
    path = systems.generate(burgers, 4, out=tmp_path / "b.h5", device=device, seed=3, **FAST)
    ds = simsci.data.open(path)
    assert ds.kind == "field" and ds.system == "burgers" and len(ds) == 4
    assert simsci.data.check_file(path) == []
    assert ds.names("x") == ["u"] and ds.names("params") == ["nu"]
    np.testing.assert_allclose(ds.static["x"], np.arange(128) / 128)
    np.testing.assert_allclose(ds.column("params"), np.full((4, 1), 0.02))
    meta = ds.meta
    assert meta["method"] == "etdrk4" and meta["resolution"] == [128]
    assert meta["system"]["options"]["resolution"] == [128]
    # the first stored frame is the initial field, the rest its solution
    for i in range(4):
        ep = ds[i]
        assert ep["x"].shape == (6, 128, 1)
        np.testing.assert_allclose(ep["t"], np.arange(6) * 0.02, atol=1e-12, rtol=0)
        again = burgers.simulate(torch.as_tensor(ep["x"][:1]), ep["t"])
        np.testing.assert_allclose(ep["x"], again[0].numpy(), atol=1e-12, rtol=0)
    # same seed, same file; the initial fields do not depend on batch_size
    again = systems.generate(burgers, 4, out=tmp_path / "c.h5", seed=3, batch_size=3, **FAST)
    first = simsci.data.open(again)
    for i in range(4):
        np.testing.assert_allclose(first[i]["x"], ds[i]["x"], atol=1e-12, rtol=0)


def test_save_resolution_strides_the_fine_solution(tmp_path):
    fine = systems.get("burgers", resolution=256, nu=0.02)
    kwargs = dict(seed=1, **FAST)
    full = simsci.data.open(systems.generate(fine, 2, out=tmp_path / "f.h5", **kwargs))
    coarse_path = systems.generate(fine, 2, out=tmp_path / "c.h5", save_resolution=64, **kwargs)
    coarse = simsci.data.open(coarse_path)
    np.testing.assert_allclose(coarse.static["x"], np.arange(64) / 64)
    assert coarse.meta["save_resolution"] == [64] and coarse.meta["resolution"] == [256]
    for i in range(2):
        assert coarse[i]["x"].shape == (6, 64, 1)
        np.testing.assert_array_equal(coarse[i]["x"], full[i]["x"][:, ::4])
    with pytest.raises(ValueError, match=r"save_resolution \(96,\) must divide"):
        systems.generate(fine, 2, out=tmp_path / "x.h5", save_resolution=96, **kwargs)
    with pytest.raises(ValueError, match="save_resolution applies to PDE systems"):
        systems.generate("lorenz63", 2, out=tmp_path / "y.h5", save_resolution=8, **kwargs)


def test_parameter_grid_and_internal_step(tmp_path):
    heat = systems.get("heat", resolution=32)
    path = systems.generate(
        heat, 2, out=tmp_path / "h.h5", params="nu=0.01,0.05", step_size=5e-3, **FAST
    )
    ds = simsci.data.open(path)
    np.testing.assert_allclose(ds.column("params")[:, 0], [0.01, 0.01, 0.05, 0.05])
    assert ds.meta["solver_options"] == {"dt": 5e-3}
    # more viscosity, faster decay
    decay = [np.abs(ds[i]["x"][-1]).max() / np.abs(ds[i]["x"][0]).max() for i in range(4)]
    assert max(decay[2:]) < min(decay[:2])


def test_sampled_parameters_are_per_episode(tmp_path):
    path = systems.generate(
        systems.get("kuramoto_sivashinsky", resolution=32), 3, out=tmp_path / "k.h5",
        params="sample", t_end=2.0, dt=1.0, progress=False,
    )  # fmt: skip
    nu = simsci.data.open(path).column("params")[:, 0]
    assert len(np.unique(nu)) == 3 and ((nu >= 0.5) & (nu <= 1.5)).all()


def test_ode_only_options_are_refused(tmp_path):
    burgers = systems.get("burgers", resolution=32)
    for kwargs, what in (
        ({"keep": 0.5}, "keep=0.5 is an ODE option"),
        ({"per_channel": True}, "per_channel=True is an ODE option"),
        ({"rtol": 1e-3}, "rtol=0.001 is an ODE option"),
    ):
        with pytest.raises(ValueError, match=what):
            systems.generate(burgers, 2, out=tmp_path / "x.h5", **kwargs, **FAST)
    with pytest.raises(ValueError, match="unknown method"):
        systems.generate(burgers, 2, out=tmp_path / "x.h5", method="dopri5", **FAST)
    assert not (tmp_path / "x.h5").exists()


def test_blow_up_names_the_episode(tmp_path):
    ac = systems.get("allen_cahn", resolution=16, ic="sines")
    ac.sines_params = {"waves": 1, "n_max": 1, "amplitude": 50.0}
    with pytest.raises(SolverError, match=r"episode\(s\) failed") as info:
        systems.generate(ac, 3, out=tmp_path / "a.h5", t_end=4.0, dt=1.0, step_size=1.0,
                         progress=False)  # fmt: skip
    assert info.value.samples and info.value.time is not None
    assert not (tmp_path / "a.h5").exists()


def test_distributed_ranks_write_field_shards(tmp_path, monkeypatch):
    out = tmp_path / "shards"
    monkeypatch.setenv("WORLD_SIZE", "2")
    heat = systems.get("heat", resolution=16)
    written = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        written.append(systems.generate(heat, 5, out=out, **FAST))
    assert [p.name for p in written] == ["part-00000.h5", "part-00001.h5"]
    ds = simsci.data.open(out)
    assert len(ds) == 5 and ds.kind == "field"
    x0 = np.stack([ds[i]["x"][0] for i in range(5)])
    assert len(np.unique(x0[:, 0, 0])) == 5  # rank-dependent seeds


def test_steady_darcy_writes_one_frame_per_episode(tmp_path):
    import simsci.data as sdata
    import simsci.systems as ssys

    path = ssys.generate(
        ssys.get("darcy", resolution=33),
        3,
        out=tmp_path / "d.h5",
        progress=False,
        save_resolution=17,
    )
    ds = sdata.open(path)
    ep = ds[0]
    assert ep["x"].shape == (1, 17, 17, 2) and ep["t"].tolist() == [0.0]
    assert ds.names("x") == ["a", "u"] and ds.static["x"].shape == (17,)
    assert ds.static["x"][0] == 0.0 and ds.static["x"][-1] == 1.0  # boundary nodes kept
    assert set(np.unique(ep["x"][..., 0])) <= {3.0, 12.0}
    with pytest.raises(ValueError, match="steady problem"):
        ssys.generate("darcy", 2, t_end=1.0, out=tmp_path / "e.h5", progress=False)
    with pytest.raises(ValueError, match=r"\(fine - 1\) % \(coarse - 1\)"):
        ssys.generate(
            ssys.get("darcy", resolution=33),
            2,
            out=tmp_path / "f.h5",
            progress=False,
            save_resolution=16,
        )
