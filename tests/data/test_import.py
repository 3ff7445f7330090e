"""Importers from PDEBench and The Well: small files written here in each layout."""

import json

import h5py
import numpy as np
import pytest

import simsci.data as sd
from simsci.data import _import
from simsci.errors import FormatError


# --------------------------------------------------------------------------- makers
def make_pdebench_1d(path, *, n=5, steps=6, nx=16, extra_t=True, attrs=None, seed=0):
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(n, steps, nx)).astype(np.float32)
    x = (np.arange(nx) + 0.5) / nx
    t = np.arange(steps + int(extra_t)) * 0.01
    with h5py.File(path, "w") as f:
        f["tensor"] = u
        f["x-coordinate"] = x.astype(np.float32)
        f["t-coordinate"] = t.astype(np.float32)
        for k, v in (attrs if attrs is not None else {"Nu": 0.01}).items():
            f.attrs[k] = v
    return u, x.astype(np.float32), t[:steps]


def make_cfd(path, *, n=4, steps=5, grid=(12,), attrs=None, seed=1):
    rng = np.random.default_rng(seed)
    names = ["density", "pressure", "Vx", "Vy", "Vz"][: 2 + len(grid)]
    data = {k: rng.normal(size=(n, steps, *grid)).astype(np.float32) for k in names}
    with h5py.File(path, "w") as f:
        for k, v in data.items():
            f[k] = v
        for ax, size in zip("xyz", grid):
            f[f"{ax}-coordinate"] = np.linspace(0, 1, size)
        f["t-coordinate"] = np.linspace(0, 1, steps + 1)
        for k, v in (attrs or {"eta": 0.01, "zeta": 0.1}).items():
            f.attrs[k] = v
    return data


def make_darcy(path, *, n=3, nx=8, ny=6, beta=1.0, seed=2):
    rng = np.random.default_rng(seed)
    a = np.where(rng.random((n, nx, ny)) > 0.5, 12.0, 3.0).astype(np.float32)
    u = rng.normal(size=(n, 1, nx, ny)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f["tensor"] = u
        f["nu"] = a
        f["x-coordinate"] = np.linspace(0, 1, nx)
        f["y-coordinate"] = np.linspace(0, 1, ny)
        f.attrs["beta"] = beta
    return a, u


def make_per_seed(path, *, n=3, steps=(5, 5, 4), nx=6, ny=5, channels=2, seed=3):
    rng = np.random.default_rng(seed)
    x, y = np.linspace(-1, 1, nx), np.linspace(-1, 1, ny)
    datas = []
    with h5py.File(path, "w") as f:
        for i in range(n):
            g = f.create_group(f"{i:04d}")
            d = rng.normal(size=(steps[i], nx, ny, channels)).astype(np.float32)
            g["data"] = d
            g["grid/x"] = x
            g["grid/y"] = y
            g["grid/t"] = np.linspace(0, 5, steps[i] + 1)  # T+1 entries, as some files hold
            g.attrs["config"] = f"sim:\n  seed: {i}\n"
            datas.append(d)
    return datas, x, y


def make_well(path, *, n=3, steps=4, nx=5, ny=6, seed=4, time_sv=False):
    """A The Well file with every kind of field, scalars and boundary conditions."""
    rng = np.random.default_rng(seed)
    arrays = {
        "density": rng.normal(size=(n, steps, nx, ny)).astype(np.float32),
        "mask": rng.normal(size=(n, nx, ny)).astype(np.float32),  # time-constant
        "profile": rng.normal(size=(n, steps, nx)).astype(np.float32),  # no y axis
        "velocity": rng.normal(size=(n, steps, nx, ny, 2)).astype(np.float32),
        "stress": rng.normal(size=(n, steps, nx, ny, 2, 2)).astype(np.float32),
        "gravity": rng.normal(size=(nx, ny)).astype(np.float32),  # one for all trajectories
    }
    time = np.linspace(0.0, 0.3, steps, dtype=np.float32)
    with h5py.File(path, "w") as f:
        f.attrs["dataset_name"] = "toy_flow"
        f.attrs["grid_type"] = "cartesian"
        f.attrs["n_spatial_dims"] = 2
        f.attrs["n_trajectories"] = n
        f.attrs["simulation_parameters"] = ["Reynolds", "Prandtl", "forcing"]
        f.attrs["Reynolds"] = 100.0
        f.attrs["Prandtl"] = 0.7
        f.attrs["forcing"] = "sinusoidal"  # not a number: meta only
        dims = f.create_group("dimensions")
        dims.attrs["spatial_dims"] = ["x", "y"]
        if time_sv:
            dims["time"] = np.stack([time + i for i in range(n)])
            dims["time"].attrs["sample_varying"] = True
        else:
            dims["time"] = time
            dims["time"].attrs["sample_varying"] = False
        for d, size in (("x", nx), ("y", ny)):
            dims[d] = np.linspace(0, 1, size, dtype=np.float32)
            dims[d].attrs["sample_varying"] = False
            dims[d].attrs["time_varying"] = False
        bcs = f.create_group("boundary_conditions")
        xb = bcs.create_group("x_periodic")
        xb.attrs["associated_dims"] = ["x"]
        xb.attrs["associated_fields"] = []
        xb.attrs["bc_type"] = "PERIODIC"
        xb.attrs["sample_varying"] = False
        xb.attrs["time_varying"] = False
        mask = np.zeros(nx, bool)
        mask[[0, -1]] = True
        xb["mask"] = mask
        yb = bcs.create_group("y_wall")
        yb.attrs["associated_dims"] = ["y"]
        yb.attrs["associated_fields"] = []
        yb.attrs["bc_type"] = "WALL"
        yb.attrs["sample_varying"] = False
        yb.attrs["time_varying"] = False
        ymask = np.zeros(ny, bool)
        ymask[[0, -1]] = True
        yb["mask"] = ymask
        yb["values"] = np.zeros(2, np.float32)
        sc = f.create_group("scalars")
        sc.attrs["field_names"] = ["Reynolds", "energy_input", "alpha", "Prandtl"]
        sc["Prandtl"] = np.array([0.7], np.float32)  # repeats the root attribute, float32
        sc["Prandtl"].attrs["sample_varying"] = False
        sc["Prandtl"].attrs["time_varying"] = False
        sc["Reynolds"] = np.array([100.0 + i for i in range(n)], np.float32)  # per trajectory
        sc["Reynolds"].attrs["sample_varying"] = True
        sc["Reynolds"].attrs["time_varying"] = False
        sc["energy_input"] = rng.normal(size=(n, steps)).astype(np.float32)
        sc["energy_input"].attrs["sample_varying"] = True
        sc["energy_input"].attrs["time_varying"] = True
        sc["alpha"] = np.array([0.5], np.float32)
        sc["alpha"].attrs["sample_varying"] = False
        sc["alpha"].attrs["time_varying"] = False

        def put(group, name, data, sv=True, tv=True, dv=(True, True), **extra):
            group[name] = data
            group[name].attrs["sample_varying"] = sv
            group[name].attrs["time_varying"] = tv
            group[name].attrs["dim_varying"] = np.array(dv)
            for k, v in extra.items():
                group[name].attrs[k] = v

        t0 = f.create_group("t0_fields")
        t0.attrs["field_names"] = ["density", "mask", "profile", "gravity"]
        put(t0, "density", arrays["density"])
        put(t0, "mask", arrays["mask"], tv=False)
        put(t0, "profile", arrays["profile"], dv=(True, False))
        put(t0, "gravity", arrays["gravity"], sv=False, tv=False)
        t1 = f.create_group("t1_fields")
        t1.attrs["field_names"] = ["velocity"]
        put(t1, "velocity", arrays["velocity"])
        t2 = f.create_group("t2_fields")
        t2.attrs["field_names"] = ["stress"]
        put(t2, "stress", arrays["stress"], symmetric=False, antisymmetric=False)
    return arrays, time


def only(ds_path):
    return sd.open(ds_path)


def leftovers(directory):
    return sorted(p.name for p in directory.iterdir() if ".tmp-" in p.name)


# ------------------------------------------------------------------------ PDEBench
def test_pdebench_1d_round_trip(tmp_path):
    src = tmp_path / "1D_Burgers_Sols_Nu0.01.hdf5"
    u, x, t = make_pdebench_1d(src)
    out = sd.import_pdebench(src, tmp_path / "out.h5", progress=False)
    assert sd.check_file(out) == []
    ds = sd.open(out)
    assert ds.kind == "field" and len(ds) == 5 and ds.system == "pdebench:" + src.stem
    assert ds.names("x") == ["u"] and ds.names("params") == ["nu"]
    for i in range(5):
        ep = ds[i]
        assert ep["x"].dtype == np.float32 and ep["x"].shape == (6, 16, 1)
        np.testing.assert_array_equal(ep["x"][..., 0], u[i])
        assert ep["t"].dtype == np.float64
        np.testing.assert_allclose(ep["t"], t.astype(np.float32), rtol=0, atol=0)
        np.testing.assert_array_equal(ep["params"], [0.01])
        assert int(ep["source_index"]) == i
    np.testing.assert_array_equal(ds.static["x"], x)
    source = ds.meta["source"]
    assert source["layout"] == "pdebench:tensor" and source["file"] == str(src.resolve())
    assert source["channels"] == {"u": "tensor"}
    assert "7 entries for 6 frames" in source["time"]
    assert source["params_from"] == {"nu": "root attribute 'Nu'"}


def test_pdebench_time_coordinate_of_length_t_is_used_as_is(tmp_path):
    src = tmp_path / "adv.h5"
    _, _, t = make_pdebench_1d(src, extra_t=False, attrs={"beta": 0.4})
    ds = sd.open(sd.import_pdebench(src, tmp_path / "o.h5", progress=False))
    np.testing.assert_array_equal(ds[0]["t"], t.astype(np.float32))
    assert "time" not in ds.meta["source"]
    assert ds.names("params") == ["beta"]


def test_pdebench_time_coordinate_of_wrong_length_is_refused(tmp_path):
    src = tmp_path / "bad.h5"
    make_pdebench_1d(src)
    with h5py.File(src, "a") as f:
        del f["t-coordinate"]
        f["t-coordinate"] = np.arange(9.0)
    with pytest.raises(FormatError, match=r"t-coordinate.*9 entries but the data have 6"):
        sd.import_pdebench(src, tmp_path / "o.h5", progress=False)


def test_pdebench_params_from_file_name_and_explicit(tmp_path):
    src = tmp_path / "1D_Advection_Sols_beta0.4.hdf5"
    make_pdebench_1d(src, attrs={})
    ds = sd.open(sd.import_pdebench(src, tmp_path / "a.h5", progress=False))
    assert ds.names("params") == ["beta"]
    np.testing.assert_allclose(ds[0]["params"], [0.4])
    assert ds.meta["source"]["params_from"]["beta"] == "file name token 'beta0.4'"
    ds = sd.open(
        sd.import_pdebench(src, tmp_path / "b.h5", params={"beta": 0.5, "nu": 1e-3}, progress=False)
    )
    assert ds.names("params") == ["beta", "nu"]
    np.testing.assert_allclose(ds.column("params"), [[0.5, 1e-3]] * 5)
    with pytest.raises(ValueError, match=r"params\['nu'\] must be a finite real number"):
        sd.import_pdebench(src, tmp_path / "c.h5", params={"nu": float("nan")}, progress=False)


def test_pdebench_reaction_diffusion_attrs(tmp_path):
    src = tmp_path / "ReacDiff_Nu0.5_Rho1.0.hdf5"
    make_pdebench_1d(src, attrs={"Nu": 0.5, "rho": 1.0})
    ds = sd.open(sd.import_pdebench(src, tmp_path / "o.h5", progress=False))
    assert ds.names("params") == ["nu", "rho"]
    np.testing.assert_allclose(ds[2]["params"], [0.5, 1.0])


def test_pdebench_cfd_1d_channels_and_variables(tmp_path):
    src = tmp_path / "1D_CFD_Rand_Eta0.01_Zeta0.1_periodic_Train.hdf5"
    data = make_cfd(src)
    ds = sd.open(sd.import_pdebench(src, tmp_path / "o.h5", progress=False))
    assert sd.check_file(ds.path) == []
    assert ds.names("x") == ["density", "pressure", "Vx"]
    assert ds.meta["source"]["layout"] == "pdebench:multi-variable"
    ep = ds[3]
    assert ep["x"].shape == (5, 12, 3)
    for c, k in enumerate(["density", "pressure", "Vx"]):
        np.testing.assert_array_equal(ep["x"][..., c], data[k][3])
    np.testing.assert_allclose(ep["t"], np.linspace(0, 1, 6)[:5])
    assert ds.names("params") == ["eta", "zeta"]
    ds = sd.open(
        sd.import_pdebench(src, tmp_path / "v.h5", variables=["Vx", "density"], progress=False)
    )
    assert ds.names("x") == ["Vx", "density"]
    np.testing.assert_array_equal(ds[1]["x"][..., 0], data["Vx"][1])
    np.testing.assert_array_equal(ds[1]["x"][..., 1], data["density"][1])
    assert ds.meta["source"]["channels"] == {"Vx": "Vx", "density": "density"}
    with pytest.raises(ValueError, match=r"no channel 'Vy'.*valid: density, pressure, Vx"):
        sd.import_pdebench(src, tmp_path / "w.h5", variables=["Vy"], progress=False)


def test_pdebench_cfd_2d(tmp_path):
    src = tmp_path / "2D_CFD.h5"
    data = make_cfd(src, grid=(6, 5), attrs={"eta": 0.1, "zeta": 0.1, "M": 0.1})
    ds = sd.open(sd.import_pdebench(src, tmp_path / "o.h5", progress=False))
    assert ds.names("x") == ["density", "pressure", "Vx", "Vy"]
    assert ds[0]["x"].shape == (5, 6, 5, 4)
    np.testing.assert_array_equal(ds[2]["x"][..., 3], data["Vy"][2])
    np.testing.assert_array_equal(ds.static["y"], np.linspace(0, 1, 5))
    assert ds.names("params") == ["M", "eta", "zeta"]  # in the file's attribute order


def test_pdebench_cfd_mismatched_shapes_refused(tmp_path):
    src = tmp_path / "cfd.h5"
    make_cfd(src)
    with h5py.File(src, "a") as f:
        del f["pressure"]
        f["pressure"] = np.zeros((4, 5, 11), np.float32)
    with pytest.raises(FormatError, match=r"field pressure.*\(4, 5, 11\) but 'density'"):
        sd.import_pdebench(src, tmp_path / "o.h5", progress=False)


def test_pdebench_coordinate_length_mismatch_refused(tmp_path):
    src = tmp_path / "c.h5"
    make_pdebench_1d(src)
    with h5py.File(src, "a") as f:
        del f["x-coordinate"]
        f["x-coordinate"] = np.arange(15.0)
    with pytest.raises(FormatError, match=r"x-coordinate.*expected \(16,\)"):
        sd.import_pdebench(src, tmp_path / "o.h5", progress=False)


def make_ns_incomp(path, *, n=3, steps=4, grid=(6, 5), seed=5):
    """PDEBench's 2-D incompressible Navier-Stokes layout (its data_gen/src/data_io.py):
    velocity [N, T, X, Y, 2], particles [N, T, X, Y, 1], force [N, X, Y, 2], t [N, T]."""
    rng = np.random.default_rng(seed)
    data = {
        "velocity": rng.normal(size=(n, steps, *grid, 2)).astype(np.float32),
        "particles": rng.random((n, steps, *grid, 1)).astype(np.float32),
        "force": rng.normal(size=(n, *grid, 2)).astype(np.float32),
        "t": (np.arange(steps) * 0.005 + 0.001 * np.arange(n)[:, None]).astype(np.float32),
    }
    with h5py.File(path, "w") as f:
        for k, v in data.items():
            f[k] = v
        f.attrs["config"] = "sim_name: ns_incom_inhom_2d_512\nNU: 0.01\n"
        f.attrs["latestIndex"] = n - 1
    return data


def test_pdebench_incompressible_navier_stokes_2d(tmp_path):
    src = tmp_path / "ns_incom_inhom_2d_512-0.h5"
    data = make_ns_incomp(src)
    ds = sd.open(sd.import_pdebench(src, tmp_path / "o.h5", progress=False))
    assert sd.check_file(ds.path) == []
    assert ds.meta["source"]["layout"] == "pdebench:ns-incompressible"
    assert ds.names("x") == [
        "velocity_x", "velocity_y", "particles", "force_x", "force_y",
    ]  # fmt: skip
    assert ds.meta["source"]["constant_channels"] == ["force_x", "force_y"]
    assert "NU: 0.01" in ds.meta["source"]["root_attributes"]["config"]
    for i in range(3):
        ep = ds[i]
        assert ep["x"].shape == (4, 6, 5, 5)
        np.testing.assert_array_equal(ep["x"][..., :2], data["velocity"][i])
        np.testing.assert_array_equal(ep["x"][..., 2], data["particles"][i, ..., 0])
        for k in range(4):  # the force is the same at every frame
            np.testing.assert_array_equal(ep["x"][k, ..., 3:], data["force"][i])
        np.testing.assert_array_equal(ep["t"], data["t"][i].astype(np.float64))  # its own
    part = sd.open(
        sd.import_pdebench(src, tmp_path / "v.h5", variables=["particles"], progress=False)
    )
    assert part.names("x") == ["particles"] and part.meta["source"]["constant_channels"] == []
    np.testing.assert_array_equal(part[1]["x"][..., 0], data["particles"][1, ..., 0])


def test_pdebench_incompressible_navier_stokes_bad_shapes_refused(tmp_path):
    src = tmp_path / "ns.h5"
    make_ns_incomp(src)
    with h5py.File(src, "a") as f:
        del f["force"]
        f["force"] = np.zeros((3, 6, 5, 1), np.float32)
    with pytest.raises(FormatError, match=r"force.*\(3, 6, 5, 1\), expected \(3, 6, 5, 2\)"):
        sd.import_pdebench(src, tmp_path / "o.h5", progress=False)
    make_ns_incomp(src)
    with h5py.File(src, "a") as f:
        del f["t"]
    with pytest.raises(FormatError, match=r"frame times 't' \[N, T\] = \(3, 4\)"):
        sd.import_pdebench(src, tmp_path / "o.h5", progress=False)
    make_ns_incomp(src)
    with h5py.File(src, "a") as f:
        t = f["t"][()]
        t[1, 2] = t[1, 1]  # not increasing in episode 1
        del f["t"]
        f["t"] = t
    with pytest.raises(FormatError, match="episode 1"):
        sd.import_pdebench(src, tmp_path / "o.h5", progress=False)


def test_pdebench_darcy(tmp_path):
    src = tmp_path / "2D_DarcyFlow_beta1.0_Train.hdf5"
    a, u = make_darcy(src, beta=1.0)
    ds = sd.open(sd.import_pdebench(src, tmp_path / "o.h5", progress=False))
    assert sd.check_file(ds.path) == []
    assert ds.meta["source"]["layout"] == "pdebench:darcy"
    assert ds.names("x") == ["a", "u"] and ds.names("params") == ["beta"]
    for i in range(3):
        ep = ds[i]
        assert ep["x"].shape == (1, 8, 6, 2)
        np.testing.assert_array_equal(ep["t"], [0.0])
        np.testing.assert_array_equal(ep["x"][0, ..., 0], a[i])
        np.testing.assert_array_equal(ep["x"][0, ..., 1], u[i, 0])
        np.testing.assert_array_equal(ep["params"], [1.0])
    assert set(ds.static) == {"x", "y"}
    only_u = sd.open(sd.import_pdebench(src, tmp_path / "u.h5", variables="u", progress=False))
    np.testing.assert_array_equal(only_u[1]["x"][0, ..., 0], u[1, 0])


def test_pdebench_per_seed(tmp_path):
    src = tmp_path / "2D_diff-react_NA_NA.h5"
    datas, x, y = make_per_seed(src)
    ds = sd.open(sd.import_pdebench(src, tmp_path / "o.h5", params={"k": 5e-3}, progress=False))
    assert sd.check_file(ds.path) == []
    assert ds.meta["source"]["layout"] == "pdebench:per-seed"
    assert ds.names("x") == ["u", "v"] and ds.names("params") == ["k"]
    assert list(ds.lengths) == [5, 5, 4]  # seeds may differ in length
    for i, d in enumerate(datas):
        np.testing.assert_array_equal(ds[i]["x"], d)
        np.testing.assert_allclose(ds[i]["t"], np.linspace(0, 5, len(d) + 1)[:-1])
    np.testing.assert_array_equal(ds.static["x"], x)
    np.testing.assert_array_equal(ds.static["y"], y)
    assert ds.meta["source"]["config_of_first_seed"] == "sim:\n  seed: 0\n"
    assert "T+1 entries for T frames" in ds.meta["source"]["time"]
    renamed = sd.open(
        sd.import_pdebench(
            src, tmp_path / "r.h5", channel_names=["A", "B"], variables=["B"], progress=False
        )
    )
    assert renamed.names("x") == ["B"]
    np.testing.assert_array_equal(renamed[2]["x"][..., 0], datas[2][..., 1])


def test_pdebench_per_seed_differing_grid_refused(tmp_path):
    src = tmp_path / "2D_rdb_NA_NA.h5"
    make_per_seed(src, channels=1)
    assert sd.open(sd.import_pdebench(src, tmp_path / "ok.h5", progress=False)).names("x") == ["h"]
    with h5py.File(src, "a") as f:
        del f["0002/grid/x"]
        f["0002/grid/x"] = np.linspace(0, 2, 6)
    with pytest.raises(FormatError, match=r"field 0002/grid/x, episode 2: coordinate differs"):
        sd.import_pdebench(src, tmp_path / "o.h5", progress=False)
    assert not (tmp_path / "o.h5").exists()


# ------------------------------------------------------------------------ The Well
WELL_CHANNELS = [
    "density",
    "mask",
    "profile",
    "gravity",
    "velocity_x",
    "velocity_y",
    "stress_xx",
    "stress_xy",
    "stress_yx",
    "stress_yy",
]


def test_thewell_round_trip(tmp_path):
    src = tmp_path / "toy_flow_00.hdf5"
    arr, time = make_well(src)
    ds = sd.open(sd.import_thewell(src, tmp_path / "o.h5", progress=False))
    assert sd.check_file(ds.path) == []
    assert ds.system == "thewell:toy_flow" and ds.kind == "field"
    assert ds.names("x") == WELL_CHANNELS
    assert ds.names("params") == ["Reynolds", "Prandtl", "alpha"]
    assert ds.names("scalars") == ["energy_input"]
    for i in range(3):
        ep = ds[i]
        x = ep["x"]
        assert x.shape == (4, 5, 6, 10) and x.dtype == np.float32
        np.testing.assert_array_equal(x[..., 0], arr["density"][i])
        np.testing.assert_array_equal(x[..., 1], np.broadcast_to(arr["mask"][i], (4, 5, 6)))
        np.testing.assert_array_equal(
            x[..., 2], np.broadcast_to(arr["profile"][i][..., None], (4, 5, 6))
        )
        np.testing.assert_array_equal(x[..., 3], np.broadcast_to(arr["gravity"], (4, 5, 6)))
        np.testing.assert_array_equal(x[..., 4], arr["velocity"][i, ..., 0])
        np.testing.assert_array_equal(x[..., 5], arr["velocity"][i, ..., 1])
        np.testing.assert_array_equal(x[..., 7], arr["stress"][i, ..., 0, 1])  # xy
        np.testing.assert_array_equal(x[..., 8], arr["stress"][i, ..., 1, 0])  # yx
        np.testing.assert_array_equal(ep["t"], time.astype(np.float64))
        # the per-trajectory Reynolds scalar replaces the root attribute's value
        np.testing.assert_allclose(ep["params"], [100.0 + i, 0.7, 0.5], rtol=1e-6)
        # the float32 copy of Prandtl does not replace the attribute's exact float64 value
        assert ep["params"][1] == 0.7
        assert ep["scalars"].shape == (4, 1)
    np.testing.assert_array_equal(ds.static["x"], np.linspace(0, 1, 5, dtype=np.float32))
    source = ds.meta["source"]
    assert source["layout"] == "thewell" and source["dataset_name"] == "toy_flow"
    assert source["constant_channels"] == ["mask", "gravity"]
    assert source["simulation_parameters"]["forcing"] == "sinusoidal"
    assert source["channels"]["stress_yy"] == "t2_fields/stress"
    with h5py.File(ds.path) as f:
        bcs = json.loads(f["static"].attrs["boundary_conditions"])
        assert f["static"].attrs["grid_type"] == "cartesian"
    assert bcs["x_periodic"]["bc_type"] == "PERIODIC"
    assert bcs["x_periodic"]["associated_dims"] == ["x"]
    assert bcs["x_periodic"]["mask_true"] == [0, 4]
    assert bcs["y_wall"]["values"] == [0.0, 0.0]
    assert source["boundary_conditions"] == bcs


def test_thewell_variables_by_field_or_channel(tmp_path):
    src = tmp_path / "w.hdf5"
    arr, _ = make_well(src)
    ds = sd.open(
        sd.import_thewell(src, tmp_path / "o.h5", variables=["velocity", "density"], progress=False)
    )
    assert ds.names("x") == ["velocity_x", "velocity_y", "density"]
    np.testing.assert_array_equal(ds[1]["x"][..., 1], arr["velocity"][1, ..., 1])
    np.testing.assert_array_equal(ds[1]["x"][..., 2], arr["density"][1])
    with pytest.raises(ValueError, match="no channel 'vorticity'"):
        sd.import_thewell(src, tmp_path / "p.h5", variables=["vorticity"], progress=False)


def test_thewell_sample_varying_time(tmp_path):
    src = tmp_path / "w.hdf5"
    _, time = make_well(src, time_sv=True)
    ds = sd.open(sd.import_thewell(src, tmp_path / "o.h5", progress=False))
    for i in range(3):
        np.testing.assert_array_equal(ds[i]["t"], (time + i).astype(np.float64))


def test_thewell_sample_varying_coordinates_are_episode_fields(tmp_path):
    src = tmp_path / "w.hdf5"
    make_well(src)
    xs = np.stack([np.linspace(0, 1 + i, 5) for i in range(3)])
    with h5py.File(src, "a") as f:
        del f["dimensions/x"]
        f["dimensions/x"] = xs
        f["dimensions/x"].attrs["sample_varying"] = True
    ds = sd.open(sd.import_thewell(src, tmp_path / "o.h5", progress=False))
    assert set(ds.static) == {"y"}
    np.testing.assert_array_equal(ds.column("grid_x"), xs)


def test_thewell_field_shape_mismatch_refused(tmp_path):
    src = tmp_path / "w.hdf5"
    make_well(src)
    with h5py.File(src, "a") as f:
        f["t0_fields/profile"].attrs["dim_varying"] = np.array([True, True])
    with pytest.raises(FormatError, match=r"t0_fields/profile: has shape \(3, 4, 5\), expected"):
        sd.import_thewell(src, tmp_path / "o.h5", progress=False)


def test_thewell_decreasing_time_refused(tmp_path):
    src = tmp_path / "w.hdf5"
    make_well(src)
    with h5py.File(src, "a") as f:
        f["dimensions/time"][2] = 0.0
    with pytest.raises(FormatError, match=r"dimensions/time: times must be strictly increasing"):
        sd.import_thewell(src, tmp_path / "o.h5", progress=False)


# -------------------------------------------------------------------- wrong layouts
def test_other_layouts_get_a_clear_error(tmp_path, state_file):
    with pytest.raises(FormatError, match="already a simsci trajectory file") as info:
        sd.import_pdebench(state_file, tmp_path / "o.h5", progress=False)
    assert "Supported layouts" in str(info.value) and info.value.rule == "import-layout"
    with pytest.raises(FormatError, match="already a simsci trajectory file"):
        sd.import_thewell(state_file, tmp_path / "o.h5", progress=False)

    rnd = tmp_path / "random.h5"
    with h5py.File(rnd, "w") as f:
        f["foo"] = np.zeros((3, 4))
        f.create_group("bar")["baz"] = np.zeros(2)
    with pytest.raises(FormatError, match=r"Found: 'bar' group \[baz\]; 'foo' float64 \(3, 4\)"):
        sd.import_pdebench(rnd, tmp_path / "o.h5", progress=False)
    with pytest.raises(FormatError, match=r"not a file of The Well's layout.*'foo'"):
        sd.import_thewell(rnd, tmp_path / "o.h5", progress=False)

    well = tmp_path / "w.hdf5"
    make_well(well)
    with pytest.raises(FormatError, match="use import_thewell"):
        sd.import_pdebench(well, tmp_path / "o.h5", progress=False)
    pde = tmp_path / "p.h5"
    make_pdebench_1d(pde)
    with pytest.raises(FormatError, match="use import_pdebench"):
        sd.import_thewell(pde, tmp_path / "o.h5", progress=False)

    text = tmp_path / "notes.h5"
    text.write_text("hello")
    with pytest.raises(FormatError, match="not an HDF5 file"):
        sd.import_pdebench(text, tmp_path / "o.h5", progress=False)
    assert not (tmp_path / "o.h5").exists()


# ----------------------------------------------------------- limit, streaming, errors
def test_limit(tmp_path):
    src = tmp_path / "p.h5"
    u, _, _ = make_pdebench_1d(src)
    ds = sd.open(sd.import_pdebench(src, tmp_path / "o.h5", limit=2, progress=False))
    assert len(ds) == 2
    np.testing.assert_array_equal(ds[1]["x"][..., 0], u[1])
    assert len(sd.open(sd.import_thewell(*_well(tmp_path), limit=1, progress=False))) == 1
    with pytest.raises(ValueError, match="limit must be a positive int"):
        sd.import_pdebench(src, tmp_path / "z.h5", limit=0, progress=False)


def _well(tmp_path):
    src = tmp_path / "lim.hdf5"
    make_well(src)
    return src, tmp_path / "lim_out.h5"


def test_reads_are_streamed_in_blocks(tmp_path, monkeypatch):
    src = tmp_path / "p.h5"
    u, _, _ = make_pdebench_1d(src, n=7)
    episode_bytes = 6 * 16 * 4
    monkeypatch.setattr(_import, "READ_BYTES", 2 * episode_bytes)  # two episodes per read
    rows = []
    original = h5py.Dataset.__getitem__

    def spy(self, key):
        out = original(self, key)
        if self.name == "/tensor":
            rows.append(out.shape[0])
        return out

    monkeypatch.setattr(h5py.Dataset, "__getitem__", spy)
    ds = sd.open(sd.import_pdebench(src, tmp_path / "o.h5", progress=False))
    assert rows == [2, 2, 2, 1]
    monkeypatch.setattr(h5py.Dataset, "__getitem__", original)
    np.testing.assert_array_equal(np.stack([ds[i]["x"][..., 0] for i in range(7)]), u)


def test_nan_field_mid_import_leaves_no_file(tmp_path, monkeypatch):
    src = tmp_path / "p.h5"
    make_pdebench_1d(src)
    with h5py.File(src, "a") as f:
        f["tensor"][3, 2, 5] = np.nan
    dst = tmp_path / "out.h5"
    dst.write_bytes(b"previous content")
    monkeypatch.setattr(_import, "READ_BYTES", 1)  # one episode per read: 0-2 are written first
    with pytest.raises(
        FormatError, match=r"field tensor, episode 3: value nan at time index 2"
    ) as e:
        sd.import_pdebench(src, dst, progress=False)
    assert e.value.rule == "import-nonfinite" and str(src) in str(e.value)
    assert dst.read_bytes() == b"previous content"
    assert leftovers(tmp_path) == []
    ds = sd.open(sd.import_pdebench(src, tmp_path / "skip.h5", on_nonfinite="skip", progress=False))
    assert list(ds.column("source_index")) == [0, 1, 2, 4]
    assert ds.meta["import"]["skipped_episodes"] == 1
    assert ds.meta["import"]["skipped_first"] == [3]


def test_interrupted_import_leaves_no_file(tmp_path, monkeypatch):
    src = tmp_path / "p.h5"
    make_pdebench_1d(src)
    monkeypatch.setattr(_import, "READ_BYTES", 1)
    calls = []
    original = sd.TrajectoryWriter.append

    def append(self, episode):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        original(self, episode)

    monkeypatch.setattr(sd.TrajectoryWriter, "append", append)
    with pytest.raises(KeyboardInterrupt):
        sd.import_pdebench(src, tmp_path / "out.h5", progress=False)
    assert not (tmp_path / "out.h5").exists()
    assert leftovers(tmp_path) == []


def test_bad_times_refused(tmp_path):
    src = tmp_path / "p.h5"
    make_pdebench_1d(src)
    with h5py.File(src, "a") as f:
        f["t-coordinate"][3] = f["t-coordinate"][2]
    with pytest.raises(FormatError, match=r"field t-coordinate: times must be strictly increasing"):
        sd.import_pdebench(src, tmp_path / "o.h5", progress=False)
    with h5py.File(src, "a") as f:
        f["t-coordinate"][3] = np.nan
    with pytest.raises(FormatError, match=r"t-coordinate: time t\[3\] = nan is not finite"):
        sd.import_pdebench(src, tmp_path / "o.h5", progress=False)


def test_compression_and_same_path(tmp_path):
    src = tmp_path / "p.h5"
    u, _, _ = make_pdebench_1d(src)
    out = sd.import_pdebench(src, tmp_path / "o.h5", compression="gzip", progress=False)
    with h5py.File(out) as f:
        assert f["steps/x"].compression == "gzip"
    np.testing.assert_array_equal(sd.open(out)[4]["x"][..., 0], u[4])
    with pytest.raises(ValueError, match="src and dst are the same file"):
        sd.import_pdebench(src, src, progress=False)
    with pytest.raises(FileExistsError, match="overwrite=False"):
        sd.import_pdebench(src, out, overwrite=False, progress=False)
