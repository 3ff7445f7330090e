"""Lifted flows on known manifolds (simsci.datasets._manifolds): the embedding and its
Jacobian, bi-Lipschitz bound, tangency, projectors, nearest points, invariants of the
simulated flows, config round trips, "wrong physics", the four data sets, bad input."""

import json
import math

import numpy as np
import pytest
import torch

import simsci.data
import simsci.datasets as datasets
import simsci.systems as systems
from simsci.datasets import _manifolds as mf
from simsci.errors import UnknownNameError

NAMES = ("circle", "torus", "rigid_body", "lorenz63")
DIMS = {"circle": (1, 2), "torus": (2, 4), "rigid_body": (2, 3), "lorenz63": (3, 3)}


@pytest.fixture(scope="module")
def flows():
    return {name: mf.lifted_flow(name, dim=32, seed=1) for name in NAMES}


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _points(flow, n, seed=0):
    return flow.sample_initial(n, _gen(seed))


def _normal_offsets(flow, u, size, seed=5):
    """x = Phi(u) + n with n normal to M at Phi(u), |n| = size."""
    n = torch.randn(u.shape[0], flow.ambient_dim, generator=_gen(seed), dtype=torch.float64)
    n = n - (flow.tangent_projector_at(u) @ n[..., None])[..., 0]
    return flow.embed(u) + size * n / n.norm(dim=-1, keepdim=True)


# ------------------------------------------------------------------ description
def test_registry_dimensions_and_defaults(flows):
    assert set(mf.LIFTED_FLOWS) == set(NAMES)
    for name, flow in flows.items():
        assert (flow.manifold_dim, flow.base_dim) == DIMS[name]
        assert flow.ambient_dim == 32 and flow.name == name
        assert len(flow.coordinate_names) == flow.base_dim
    default = mf.lifted_flow("circle")
    assert default.ambient_dim == 64 and default.params == {"omega": 1.0, "a": 0.5}
    assert mf.lifted_flow("rigid_body").params == {"I1": 2.0, "I2": 1.0, "I3": 2.0 / 3.0}
    assert mf.lifted_flow("lorenz63").params == {"sigma": 10.0, "rho": 28.0, "beta": 8.0 / 3.0}
    assert {"lifted_circle", "lifted_torus", "lifted_rigid_body", "lifted_lorenz63"} <= set(
        datasets.DATASETS
    )


# ------------------------------------------------------------------ the embedding
@pytest.mark.parametrize("name", NAMES)
def test_embed_jacobian_matches_autograd(flows, name):
    flow = flows[name]
    u = torch.randn(3, flow.base_dim, generator=_gen(0), dtype=torch.float64)
    jac = flow.embed_jacobian(u)
    assert jac.shape == (3, flow.ambient_dim, flow.base_dim)
    for i in range(3):
        auto = torch.autograd.functional.jacobian(flow.embed, u[i])
        torch.testing.assert_close(jac[i], auto, rtol=0, atol=1e-14)
    # batched over several leading axes, dtype followed
    u32 = u.reshape(3, 1, -1).float()
    assert flow.embed(u32).shape == (3, 1, flow.ambient_dim)
    assert flow.embed(u32).dtype == torch.float32
    torch.testing.assert_close(flow.embed(u32)[:, 0].double(), flow.embed(u), atol=1e-5, rtol=0)


@pytest.mark.parametrize("hidden", [8, 48])  # W2 with orthonormal columns / rows (D = 32)
def test_embedding_is_bi_lipschitz(hidden):
    for name in NAMES:
        flow = mf.lifted_flow(name, dim=32, seed=3, hidden=hidden)
        c, w1, w2, w3, _ = flow._phi.tensors(torch.zeros(1, dtype=torch.float64))
        torch.testing.assert_close(w1.T @ w1, torch.eye(flow.base_dim, dtype=torch.float64))
        # w2 carries eps: the nonlinear part's Lipschitz bound is exactly bend (2), and it
        # lies in the orthogonal complement of W1
        bound = torch.linalg.matrix_norm(w2, ord=2) * torch.linalg.matrix_norm(w3, ord=2)
        assert float(bound) == pytest.approx(flow.bend, rel=1e-12) and flow.bend == 2.0
        assert float((w1.T @ w2).abs().max()) < 1e-12
        g = _gen(7)
        a = 2.0 * torch.randn(2000, flow.base_dim, generator=g, dtype=torch.float64)
        scale = torch.logspace(-4, 0, 2000, dtype=torch.float64)[:, None]
        b = a + scale * torch.randn(2000, flow.base_dim, generator=g, dtype=torch.float64)
        ratio = (flow.embed(a) - flow.embed(b)).norm(dim=-1) / (a - b).norm(dim=-1)
        assert float(ratio.min()) >= 1.0 - 1e-12 and float(ratio.max()) <= 3.0
        # and the map is not linear: the nonlinear part is visible
        assert float(ratio.max() - ratio.min()) > 0.1


# ------------------------------------------------------------------ tangents
@pytest.mark.parametrize("name", NAMES)
def test_velocity_is_tangent_and_ambient_velocity_lies_in_the_tangent_space(flows, name):
    flow = flows[name]
    u = _points(flow, 16)
    v = flow.velocity(u)
    basis = flow.tangent_basis(u)
    k = flow.manifold_dim
    assert basis.shape == (16, flow.base_dim, k)
    torch.testing.assert_close(
        basis.transpose(-1, -2) @ basis, torch.eye(k, dtype=torch.float64).expand(16, k, k)
    )
    tangential = (basis @ (basis.transpose(-1, -2) @ v[..., None]))[..., 0]
    assert float((v - tangential).norm(dim=-1).max()) < 1e-14
    assert float(v.norm(dim=-1).min()) > 1e-3
    xdot = flow.ambient_velocity(u)
    torch.testing.assert_close(xdot, (flow.embed_jacobian(u) @ v[..., None])[..., 0])
    P = flow.tangent_projector(flow.embed(u))
    residual = xdot - (P @ xdot[..., None])[..., 0]
    assert float(residual.norm(dim=-1).max()) < 1e-12 * float(xdot.norm(dim=-1).max())


@pytest.mark.parametrize("name", NAMES)
def test_tangent_projector_is_an_orthogonal_projector_of_rank_k(flows, name):
    flow = flows[name]
    u = _points(flow, 8, seed=1)
    x = _normal_offsets(flow, u, 0.2)
    P = flow.tangent_projector(x)  # at project(x) = Phi(u)
    D, k = flow.ambient_dim, flow.manifold_dim
    assert P.shape == (8, D, D)
    torch.testing.assert_close(P @ P, P, rtol=0, atol=1e-13)
    torch.testing.assert_close(P, P.transpose(-1, -2), rtol=0, atol=1e-14)
    assert torch.linalg.matrix_rank(P).tolist() == [k] * 8
    torch.testing.assert_close(P, flow.tangent_projector_at(u), rtol=0, atol=1e-10)
    # it spans the embedded tangent vectors
    JB = flow.embed_jacobian(u) @ flow.tangent_basis(u)
    torch.testing.assert_close(P @ JB, JB, rtol=0, atol=1e-12)


# ------------------------------------------------------------------ nearest points
@pytest.mark.parametrize("name", NAMES)
def test_nearest_recovers_points_on_the_manifold_and_normal_offsets(flows, name):
    flow = flows[name]
    u = _points(flow, 64, seed=2)
    x = flow.embed(u)
    assert float((flow.nearest(x) - u).norm(dim=-1).max()) < 1e-12
    assert float(flow.distance(x).max()) < 1e-12
    for size in (0.05, 0.3):
        xo = _normal_offsets(flow, u, size)
        us = flow.nearest(xo)
        assert float((us - u).norm(dim=-1).max()) < 1e-10
        torch.testing.assert_close(flow.distance(xo), torch.full((64,), size, dtype=xo.dtype))
        torch.testing.assert_close(flow.project(xo), x, rtol=0, atol=1e-10)
    # the result lies on M0 and batches over leading axes
    assert float(flow._constraint(us).max()) < 1e-15
    assert flow.nearest(xo.reshape(8, 8, -1)).shape == (8, 8, flow.base_dim)


def test_nearest_is_the_global_nearest_point_on_the_circle(flows):
    flow = flows["circle"]
    x = flow.embed(_points(flow, 6, seed=4))
    x = x + 0.4 * torch.randn(x.shape, generator=_gen(9), dtype=torch.float64)  # any offset
    theta = torch.linspace(0, 2 * math.pi, 200001, dtype=torch.float64)
    curve = flow.embed(torch.stack((theta.cos(), theta.sin()), dim=-1))
    brute = torch.cdist(x, curve).min(dim=-1).values
    d = flow.distance(x)
    assert bool((d <= brute + 1e-12).all()) and float((brute - d).max()) < 1e-8


# ------------------------------------------------------------------ simulation
def test_circle_returns_after_one_period_and_stays_on_the_circle(flows):
    flow = flows["circle"]
    u0 = _points(flow, 4)
    period = 2 * math.pi / math.sqrt(1 - 0.5**2)
    t = torch.linspace(0, period, 41, dtype=torch.float64)
    us = flow.simulate(u0, t)
    assert us.shape == (4, 41, 2)
    torch.testing.assert_close(us.norm(dim=-1), torch.ones(4, 41, dtype=torch.float64))
    torch.testing.assert_close(us[:, -1], u0, rtol=0, atol=1e-7)
    # the closed form: tan(theta/2) = sqrt((1+a)/(1-a)) tan(sqrt(1-a^2) t/2 + c)
    a = 0.5
    theta0 = torch.atan2(u0[:, 1], u0[:, 0])
    c = torch.atan(math.sqrt((1 - a) / (1 + a)) * torch.tan(theta0 / 2))
    s = math.sqrt(1 - a * a) * t[:20] / 2 + c[:, None]  # before theta passes pi
    half = torch.atan(math.sqrt((1 + a) / (1 - a)) * torch.tan(s))
    exact = torch.stack(((2 * half).cos(), (2 * half).sin()), dim=-1)
    ok = (s > -math.pi / 2) & (s < math.pi / 2)
    assert int(ok.sum()) > 20
    assert float((us[:, :20] - exact).norm(dim=-1)[ok].max()) < 1e-7


def test_torus_angles_follow_the_exact_sum_and_the_phase_difference_drifts(flows):
    flow = flows["torus"]
    u0 = _points(flow, 3)
    t = torch.linspace(0, 20, 201, dtype=torch.float64)
    us = flow.simulate(u0, t)
    pair = us.reshape(3, 201, 2, 2)
    torch.testing.assert_close(pair.norm(dim=-1), torch.ones(3, 201, 2, dtype=torch.float64))
    theta = torch.atan2(pair[..., 1], pair[..., 0])
    total = theta.sum(-1)  # (th1 + th2)' = w1 + w2 exactly
    exact = total[:, :1] + (1.0 + math.sqrt(2.0)) * t
    diff = torch.remainder(total - exact + math.pi, 2 * math.pi) - math.pi
    assert float(diff.abs().max()) < 1e-7
    # no phase locking: the unwrapped phase difference keeps growing
    phi = np.unwrap((theta[..., 1] - theta[..., 0]).numpy(), axis=1)
    rate = (phi[:, -1] - phi[:, 0]) / 20.0
    assert np.allclose(rate, math.sqrt((math.sqrt(2) - 1) ** 2 - 0.04), atol=0.05)


def test_rigid_body_conserves_norm_and_energy(flows):
    flow = flows["rigid_body"]
    u0 = _points(flow, 5)
    us = flow.simulate(u0, torch.linspace(0, 16, 81, dtype=torch.float64))
    torch.testing.assert_close(us.norm(dim=-1), torch.ones(5, 81, dtype=torch.float64))
    energy = flow.energy(us)
    assert float((energy - energy[:, :1]).abs().max()) < 1e-8
    # the drift is the registered system's
    body = systems.get("rigid_body")
    p = body.params_tensor(5)
    torch.testing.assert_close(flow.velocity(u0), body.drift(0.0, u0, p), rtol=0, atol=0)


def test_lorenz_matches_the_plain_system_in_scaled_coordinates(flows):
    flow = flows["lorenz63"]
    u0 = _points(flow, 3)
    x0 = flow.to_physical(u0)
    assert float(x0[:, 2].min()) > 0 and float(u0.abs().max()) < 3  # on the attractor, O(1)
    t = torch.linspace(0, 1, 26, dtype=torch.float64)
    us = flow.simulate(u0, t)
    xs = systems.get("lorenz63").simulate(x0, t, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(flow.to_physical(us), xs, rtol=0, atol=1e-5)
    torch.testing.assert_close(flow.from_physical(xs), us, rtol=0, atol=1e-6)


# ------------------------------------------------------------------ config, wrong physics
@pytest.mark.parametrize("name", NAMES)
def test_config_round_trip_rebuilds_the_same_flow(flows, name):
    flow = flows[name].with_params(**{next(iter(flows[name].params)): 1.25})
    cfg = json.loads(json.dumps(flow.config()))
    again = mf.lifted_from_config(cfg)
    assert again.config() == flow.config()
    u = _points(flow, 4)
    assert torch.equal(again.embed(u), flow.embed(u))
    assert torch.equal(again.velocity(u), flow.velocity(u))
    assert torch.equal(again.nearest(flow.embed(u)), flow.nearest(flow.embed(u)))


def test_with_params_changes_the_flow_not_the_embedding(flows):
    changes = {
        "circle": {"omega": 2.0, "a": 0.2},
        "torus": {"w2": 1.7, "k": 0.3},
        "rigid_body": {"I1": 3.0},
        "lorenz63": {"rho": 35.0, "sigma": 9.0},
    }
    for name, change in changes.items():
        flow = flows[name]
        other = flow.with_params(**change)
        assert other.params == {**flow.params, **change} and type(other) is type(flow)
        u = _points(flow, 4)
        assert torch.equal(other.embed(u), flow.embed(u))
        assert float((other.velocity(u) - flow.velocity(u)).abs().max()) > 1e-3
        assert flow.params != other.params  # the original is untouched
    assert (
        mf.lifted_flow("rigid_body", 32, 1, I1=3.0).config()
        == flows["rigid_body"].with_params(I1=3.0).config()
    )


# ------------------------------------------------------------------ data sets
def _open(path):
    ds = simsci.data.open(path)
    return ds, [ds[i] for i in range(len(ds))]


@pytest.mark.parametrize("name", NAMES)
def test_dataset_files_and_velocity_against_finite_differences(tmp_path, name):
    path = datasets.make_dataset(
        f"lifted_{name}",
        2,
        out=tmp_path / "d.h5",
        dim=16,
        steps=100,
        t_end=0.4,
        split=(0.5, 0.5, 0),
    )
    ds, eps = _open(path)
    k, m = DIMS[name]
    assert ds.kind == "state" and ds.system == f"lifted_{name}" and len(ds) == 2
    flow = mf.lifted_from_config(ds.meta["manifold"])
    assert (flow.name, flow.ambient_dim, flow.manifold_dim) == (name, 16, k)
    assert ds.names("u") == list(flow.coordinate_names)
    assert "x_clean" not in ds.step_fields and "stats" not in ds.step_fields
    assert sorted(int(e["split"]) for e in eps) == [0, 1]
    for e in eps:
        assert e["x"].shape == (101, 16) and e["v"].shape == (101, 16) and e["u"].shape == (101, m)
        u = torch.as_tensor(e["u"])
        torch.testing.assert_close(torch.as_tensor(e["x"]), flow.embed(u), rtol=0, atol=1e-14)
        assert float(flow.distance(torch.as_tensor(e["x"])).max()) < 1e-12
        x, v, t = e["x"], e["v"], e["t"]
        h = t[1] - t[0]
        errs = []
        for stride in (2, 1):  # central differences at 2h and h on the same points
            j = np.arange(2, len(t) - 2)
            fd = (x[j + stride] - x[j - stride]) / (2 * stride * h)
            errs.append(np.abs(fd - v[j]).max())
        # h = 0.004: a truncation error h^2 |x'''| / 6 of 1e-6 (rigid body) to 1e-2
        # (Lorenz: fast, through the bent embedding) of |v|; the solver's 1e-10 state
        # error is far below it
        assert errs[1] < 2e-2 * np.abs(v).max()
        assert 3.5 < errs[0] / errs[1] < 4.5  # second order
    np.testing.assert_allclose(eps[0]["params"], list(flow.params.values()))


def test_dataset_defaults_noise_keep_and_seeds(tmp_path):
    opts = datasets.DATASETS["lifted_lorenz63"].options()
    assert (opts["dim"], opts["steps"], opts["t_end"], opts["keep"]) == (64, 50, 2.0, 1.0)
    assert opts["split"] == (0.6, 0.2, 0.2) and opts["noise"] == 0.0
    kw = {"dim": 12, "steps": 40, "keep": 0.5, "noise": 0.01}
    a = datasets.make_dataset("lifted_circle", 5, out=tmp_path / "a.h5", seed=3, **kw)
    b = datasets.make_dataset("lifted_circle", 5, out=tmp_path / "b.h5", seed=3, **kw)
    c = datasets.make_dataset("lifted_circle", 5, out=tmp_path / "c.h5", seed=4, **kw)
    (da, ea), (_, eb), (_, ec) = _open(a), _open(b), _open(c)
    assert all(
        x.keys() == y.keys() and all(np.array_equal(x[f], y[f]) for f in x) for x, y in zip(ea, eb)
    )
    assert not np.array_equal(ea[0]["x"], ec[0]["x"])
    assert da.meta["manifold"] == _open(c)[0].meta["manifold"]  # same embed_seed
    assert da.meta["noise"] == 0.01 and da.meta["kept_per_episode"] == 20
    noise = np.concatenate([e["x"] - e["x_clean"] for e in ea])
    assert noise.std() == pytest.approx(0.01, rel=0.1)
    flow = mf.lifted_from_config(da.meta["manifold"])
    for e in ea:
        assert len(e["t"]) == 20 and np.all(np.diff(e["t"]) > 0)
        np.testing.assert_allclose(e["x_clean"], flow.embed(torch.as_tensor(e["u"])).numpy())
        np.testing.assert_allclose(e["v"], flow.ambient_velocity(torch.as_tensor(e["u"])))
    other = datasets.make_dataset("lifted_circle", 2, out=tmp_path / "e.h5", embed_seed=1, dim=12)
    assert _open(other)[0].meta["manifold"]["seed"] == 1
    assert "x" in da.stats


# ------------------------------------------------------------------ bad input
def test_bad_input_is_rejected_with_clear_messages(flows, tmp_path):
    with pytest.raises(ValueError, match="dim .* must exceed the base dimension m = 4"):
        mf.lifted_flow("torus", dim=4)
    with pytest.raises(UnknownNameError, match="unknown lifted flow 'lorenz'.*'lorenz63'"):
        mf.lifted_flow("lorenz")
    with pytest.raises(UnknownNameError, match="unknown parameter 'omgea'.*'omega'.*omega, a"):
        mf.lifted_flow("circle", omgea=2.0)
    with pytest.raises(UnknownNameError, match="Valid parameters: I1, I2, I3"):
        flows["rigid_body"].with_params(I4=1.0)
    with pytest.raises(ValueError, match=r"'a' .* must be finite and lie in \[0, 1\)"):
        flows["circle"].with_params(a=1.0)
    with pytest.raises(TypeError, match="must be a real number"):
        mf.lifted_flow("circle", omega="fast")
    flow = flows["circle"]
    x = flow.embed(_points(flow, 3))
    x[1, 4] = float("nan")
    with pytest.raises(ValueError, match="x must be finite; it has 1 NaN/inf entries.*1, 4"):
        flow.nearest(x)
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 32\)"):
        flow.distance(torch.zeros(3, 31))
    with pytest.raises(ValueError, match=r"u must have shape \(\.\.\., 2\)"):
        flow.embed(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="u0 must be finite and lie on M0.*retract"):
        flow.simulate(torch.tensor([[2.0, 0.0]]), torch.linspace(0, 1, 3))
    with pytest.raises(ValueError, match="not a lifted-flow config.*missing keys"):
        mf.lifted_from_config({"flow": "circle"})
    with pytest.raises(UnknownNameError, match="no option 'omega'"):
        datasets.make_dataset("lifted_torus", 2, out=tmp_path / "t.h5", omega=1.0)
    with pytest.raises(ValueError, match="steps must be"):
        datasets.make_dataset("lifted_circle", 2, out=tmp_path / "t.h5", steps=1)
    with pytest.raises(ValueError, match="dim .* must exceed"):
        datasets.make_dataset("lifted_lorenz63", 2, out=tmp_path / "t.h5", dim=3)
