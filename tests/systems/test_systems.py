"""Registry, parameters, drifts and diffusions of every system (no integrator needed)."""

import math

import numpy as np
import pytest
import torch

import simsci.systems as systems
from simsci.errors import UnknownNameError

# ODE/SDE systems (vector states); the PDE systems (kind "field") have their own tests
ALL = [name for name in systems.available() if systems.SYSTEMS[name].kind == "state"]
FIELDS = {
    "advection",
    "heat",
    "burgers",
    "kdv",
    "kuramoto_sivashinsky",
    "allen_cahn",
    "navier_stokes_2d",
    "gray_scott",
    "darcy",
}
SDES = [name for name in ALL if systems.SYSTEMS[name].noise_type is not None]


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------- registry
def test_registry_lists_the_built_in_systems():
    expected = {
        "lorenz63",
        "lorenz96",
        "van_der_pol",
        "damped_pendulum",
        "duffing",
        "double_pendulum",
        "lotka_volterra",
        "glycolytic_oscillator",
        "fitzhugh_nagumo",
        "kuramoto",
        "rigid_body",
        "ornstein_uhlenbeck",
        "geometric_brownian_motion",
        "stochastic_lorenz",
        "linear_sde",
    }
    assert set(ALL) == expected
    assert set(systems.available()) == expected | FIELDS
    assert systems.available() == sorted(systems.available())
    assert all(systems.SYSTEMS[name].name == name for name in systems.available())


def test_get_unknown_name_suggests_the_closest():
    with pytest.raises(
        UnknownNameError, match=r"unknown system 'lorentz63'.*did you mean 'lorenz63'"
    ):
        systems.get("lorentz63")
    with pytest.raises(ValueError, match="Valid names: .*van_der_pol"):
        systems.get("nonexistent_system_xyz")


def test_register_rejects_a_taken_name_and_non_systems():
    class Clash(systems.System):
        name = "lorenz63"

    with pytest.raises(ValueError, match="already registered"):
        systems.register(Clash)
    with pytest.raises(TypeError, match="System subclass"):
        systems.register(int)

    class Nameless(systems.System):
        pass

    with pytest.raises(ValueError, match="non-empty class attribute `name`"):
        systems.register(Nameless)


def test_register_adds_a_new_system_to_get():
    @systems.register
    class Decay(systems.System):
        name = "_test_decay"
        state_names = ("u",)
        param_names = ("k",)
        default_params = {"k": 1.0}

        def drift(self, t, x, p):
            return -p[:, :1] * x

    try:
        sys = systems.get("_test_decay", k=3.0)
        assert sys.params == {"k": 3.0}
        out = sys.drift(0.0, torch.ones(2, 1), sys.params_tensor(2))
        assert torch.equal(out, torch.full((2, 1), -3.0, dtype=torch.float64))
    finally:
        del systems.SYSTEMS["_test_decay"]


# ------------------------------------------------------------------- parameters
def test_unknown_parameter_lists_valid_ones():
    with pytest.raises(UnknownNameError, match=r"unknown parameter 'rh0'.*'rho'.*sigma, rho, beta"):
        systems.get("lorenz63", rh0=30)
    with pytest.raises(UnknownNameError, match="options: dim"):
        systems.get("lorenz96", N=10)
    lorenz = systems.get("lorenz63")
    with pytest.raises(UnknownNameError, match="unknown parameter 'gamma'"):
        lorenz.params_tensor({"gamma": 1.0})


def test_out_of_range_parameter_is_rejected():
    with pytest.raises(
        ValueError, match=r"'sigma' of system 'lorenz63' must .* \(0, inf\); got -1"
    ):
        systems.get("lorenz63", sigma=-1.0)
    with pytest.raises(ValueError, match=r"'damping'.*\[0, inf\)"):
        systems.get("damped_pendulum", damping=-0.1)
    pend = systems.get("double_pendulum")
    rows = pend.params_tensor(3)
    rows[2, 0] = 0.0
    with pytest.raises(ValueError, match=r"'m1'.*row 2"):
        pend.params_tensor(rows)
    with pytest.raises(ValueError, match="finite"):
        systems.get("lorenz63", rho=math.nan)
    with pytest.raises(TypeError, match="real number"):
        systems.get("lorenz63", rho="28")


def test_params_tensor_forms():
    lorenz = systems.get("lorenz63", rho=35.0)
    assert lorenz.params == {"sigma": 10.0, "rho": 35.0, "beta": 8.0 / 3.0}
    assert lorenz.params_tensor(2).tolist() == [[10.0, 35.0, 8.0 / 3.0]] * 2
    rows = lorenz.params_tensor({"rho": [20.0, 28.0], "sigma": 12.0})
    assert rows.tolist() == [[12.0, 20.0, 8.0 / 3.0], [12.0, 28.0, 8.0 / 3.0]]
    assert lorenz.params_tensor(np.array([1.0, 2.0, 3.0])).shape == (1, 3)
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        lorenz.params_tensor(np.ones((2, 4)))
    with pytest.raises(ValueError, match="one common length"):
        lorenz.params_tensor({"rho": [1.0, 2.0], "sigma": [1.0, 2.0, 3.0]})
    out = lorenz.params_tensor(4, dtype=torch.float32)
    assert out.dtype == torch.float32 and out.shape == (4, 3)


@pytest.mark.parametrize("name", ALL)
def test_sample_params_inside_ranges_and_seeded(name):
    sys = systems.get(name)
    rows = sys.sample_params(500, generator=_gen(1))
    assert rows.shape == (500, len(sys.param_names))
    for j, key in enumerate(sys.param_names):
        if key in sys.param_ranges:
            lo, hi = sys.param_ranges[key]
            assert lo <= rows[:, j].min() and rows[:, j].max() <= hi
            assert rows[:, j].std() > 0.2 * (hi - lo) / math.sqrt(12)  # really spread
        else:
            assert torch.all(rows[:, j] == sys.params[key])
    sys.params_tensor(rows)  # every sampled row is valid
    assert torch.equal(rows, sys.sample_params(500, generator=_gen(1)))
    assert not torch.equal(rows, sys.sample_params(500, generator=_gen(2)))


@pytest.mark.parametrize("name", ALL)
def test_class_attributes_are_consistent(name):
    cls = systems.SYSTEMS[name]
    sys = systems.get(name)
    assert set(cls.default_params) == set(cls.param_names)
    assert set(cls.param_ranges) <= set(cls.param_names)
    assert set(cls.valid_ranges) <= set(cls.param_names)
    assert cls.noise_type in (None, "diagonal", "additive", "general")
    assert cls.default_dt > 0 and cls.default_t_end > cls.default_dt
    assert sys.dim == len(sys.state_names) > 0
    assert cls.__doc__ and any(str(y) in cls.__doc__ for y in range(1920, 2025))
    for key, (lo, hi) in cls.param_ranges.items():
        assert lo <= hi
        sys.params_tensor({key: [lo, hi]})  # the ranges are valid parameters
    rebuilt = systems.get(name, **sys.config()["options"], **sys.config()["params"])
    x = sys.sample_initial(3, generator=_gen())
    assert torch.equal(
        rebuilt.drift(0.0, x, rebuilt.params_tensor(3)), sys.drift(0.0, x, sys.params_tensor(3))
    )


# ------------------------------------------------------------- drift / diffusion
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ALL)
def test_drift_shape_dtype_device(name, dtype, device):
    sys = systems.get(name)
    x = sys.sample_initial(5, generator=_gen(), device=device, dtype=dtype)
    assert x.shape == (5, sys.dim) and x.dtype == dtype and x.device.type == device.type
    assert torch.isfinite(x).all()
    p = sys.params_tensor(5, device=device, dtype=dtype)
    f = sys.drift(torch.tensor(0.3, device=device, dtype=dtype), x, p)
    assert f.shape == x.shape and f.dtype == dtype and f.device.type == device.type
    assert torch.isfinite(f).all()
    if sys.is_sde:
        g = sys.diffusion(0.0, x, p)
        want = x.shape if sys.noise_type == "diagonal" else (*x.shape, sys.dim)
        assert g.shape == want and g.dtype == dtype and g.device.type == device.type
        assert torch.isfinite(g).all()
        sde = sys.as_sde(p)
        assert sde.noise_type == sys.noise_type and sde.sde_type == "ito"
        assert torch.equal(sde.f(0.0, x), f) and torch.equal(sde.g(0.0, x), g)
    else:
        with pytest.raises(TypeError, match="is an ODE"):
            sys.diffusion(0.0, x, p)
        assert torch.equal(sys.vector_field(p)(0.0, x), f)


@pytest.mark.parametrize("name", ALL)
def test_drift_uses_per_sample_parameters(name):
    """Row i of a batched drift equals the drift evaluated with row i alone."""
    sys = systems.get(name)
    x = sys.sample_initial(6, generator=_gen(3))
    p = sys.sample_params(6, generator=_gen(4))
    batched = sys.drift(0.0, x, p)
    for i in range(6):
        single = sys.drift(0.0, x[i : i + 1], p[i : i + 1])
        torch.testing.assert_close(batched[i : i + 1], single, rtol=1e-12, atol=1e-12)
    if sys.param_ranges:
        assert not torch.allclose(batched, sys.drift(0.0, x, sys.params_tensor(6)))


def _np_lorenz63(x, p):
    s, r, b = p
    return np.array([s * (x[1] - x[0]), x[0] * (r - x[2]) - x[1], x[0] * x[1] - b * x[2]])


def _np_lorenz96(x, p):
    n = len(x)
    return np.array([(x[(i + 1) % n] - x[i - 2]) * x[i - 1] - x[i] + p[0] for i in range(n)])


def _np_double_pendulum(x, p):
    """Solve the Lagrangian's mass-matrix equation M(q) qdd = F(q, qd) directly."""
    m1, m2, l1, l2, g = p
    th1, th2, w1, w2 = x
    d = th1 - th2
    mass = np.array(
        [[(m1 + m2) * l1**2, m2 * l1 * l2 * np.cos(d)], [m2 * l1 * l2 * np.cos(d), m2 * l2**2]]
    )
    force = np.array(
        [
            -m2 * l1 * l2 * w2**2 * np.sin(d) - (m1 + m2) * g * l1 * np.sin(th1),
            m2 * l1 * l2 * w1**2 * np.sin(d) - m2 * g * l2 * np.sin(th2),
        ]
    )
    return np.concatenate([[w1, w2], np.linalg.solve(mass, force)])


def _np_glycolytic(x, p):
    j0, k1, k2, k3, k4, k5, k6, k, kappa, q, big_k1, psi, n, a = p
    s1, s2, s3, s4, s5, s6, s7 = x
    v1 = k1 * s1 * s6 / (1 + (s6 / big_k1) ** q)
    return np.array(
        [
            j0 - v1,
            2 * v1 - k2 * s2 * (n - s5) - k6 * s2 * s5,
            k2 * s2 * (n - s5) - k3 * s3 * (a - s6),
            k3 * s3 * (a - s6) - k4 * s4 * s5 - kappa * (s4 - s7),
            k2 * s2 * (n - s5) - k4 * s4 * s5 - k6 * s2 * s5,
            -2 * v1 + 2 * k3 * s3 * (a - s6) - k5 * s6,
            psi * kappa * (s4 - s7) - k * s7,
        ]
    )


def _np_rigid_body(x, p):
    return np.cross(x, x / p)  # Euler: dm/dt = m x omega, omega = I^-1 m


def _np_duffing(x, p):
    delta, alpha, beta = p
    return np.array([x[1], -delta * x[1] - alpha * x[0] - beta * x[0] ** 3])


def _np_fitzhugh(x, p):
    a, b, tau, current = p
    v, w = x
    return np.array([v - v**3 / 3 - w + current, (v + a - b * w) / tau])


REFERENCES = {
    "lorenz63": _np_lorenz63,
    "lorenz96": _np_lorenz96,
    "double_pendulum": _np_double_pendulum,
    "glycolytic_oscillator": _np_glycolytic,
    "rigid_body": _np_rigid_body,
    "fitzhugh_nagumo": _np_fitzhugh,
    "duffing": _np_duffing,
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_drift_matches_numpy_reference(name):
    sys = systems.get(name)
    x = sys.sample_initial(4, generator=_gen(5))
    p = sys.sample_params(4, generator=_gen(6))
    got = sys.drift(0.0, x, p).numpy()
    for i in range(4):
        want = REFERENCES[name](x[i].numpy(), p[i].numpy())
        np.testing.assert_allclose(got[i], want, rtol=1e-10, atol=1e-10)


def test_kuramoto_matches_the_pairwise_sum():
    sys = systems.get("kuramoto", dim=7, frequency_seed=3)
    x = sys.sample_initial(3, generator=_gen())
    p = sys.sample_params(3, generator=_gen(1))
    got = sys.drift(0.0, x, p).numpy()
    omega = sys.frequencies.numpy()
    for b in range(3):
        th, k = x[b].numpy(), p[b, 0].item()
        want = omega + k / 7 * np.sin(th[None, :] - th[:, None]).sum(axis=1)
        np.testing.assert_allclose(got[b], want, rtol=1e-12, atol=1e-12)


def test_kuramoto_frequencies_are_seeded_and_recorded():
    a = systems.get("kuramoto", dim=5, frequency_seed=1)
    assert torch.equal(a.frequencies, systems.get("kuramoto", dim=5, frequency_seed=1).frequencies)
    assert not torch.equal(a.frequencies, systems.get("kuramoto", dim=5).frequencies)
    np.testing.assert_array_equal(a.static()["frequencies"], a.frequencies.numpy())
    given = systems.get("kuramoto", frequencies=[0.5, -0.5, 1.0])
    assert given.dim == 3 and given.state_names == ("theta0", "theta1", "theta2")
    # synchronised phases feel no coupling: the drift is the natural frequency
    x = torch.zeros(1, 3, dtype=torch.float64)
    assert torch.allclose(given.drift(0.0, x, given.params_tensor(1))[0], given.frequencies)
    assert given.order_parameter(x).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="dim=2 but 3 frequencies given"):
        systems.get("kuramoto", dim=2, frequencies=[0.1, 0.2, 0.3])


def test_lorenz96_dimension_option():
    sys = systems.get("lorenz96", dim=6, F=5.0)
    assert sys.dim == 6 and sys.state_names[0] == "x0" and sys.params == {"F": 5.0}
    # the uniform state x_i = F is a fixed point
    x = torch.full((2, 6), 5.0, dtype=torch.float64)
    assert torch.allclose(
        sys.drift(0.0, x, sys.params_tensor(2)), torch.zeros(2, 6, dtype=torch.float64)
    )
    with pytest.raises(ValueError, match="integer >= 4"):
        systems.get("lorenz96", dim=3)


def test_lorenz63_fixed_points_are_zeros_of_the_drift(device):
    sys = systems.get("lorenz63")
    rows = sys.sample_params(5, generator=_gen(2), device=device)
    for i in range(5):
        sigma, rho, beta = rows[i].tolist()
        c = math.sqrt(beta * (rho - 1.0))
        points = torch.tensor(
            [[0.0, 0.0, 0.0], [c, c, rho - 1.0], [-c, -c, rho - 1.0]],
            dtype=torch.float64,
            device=device,
        )
        f = sys.drift(0.0, points, rows[i : i + 1].expand(3, -1))
        assert torch.allclose(f, torch.zeros_like(f), atol=1e-12)
    # and a point that is not a fixed point is not a zero
    f = sys.drift(0.0, torch.ones(1, 3, dtype=torch.float64, device=device), rows[:1])
    assert f.abs().max() > 1.0


def test_ou_and_gbm_diffusion_values():
    ou = systems.get("ornstein_uhlenbeck", dim=3, sigma=0.7)
    x = torch.randn(4, 3, dtype=torch.float64)
    eye = torch.eye(3, dtype=torch.float64)
    assert torch.equal(ou.diffusion(0.0, x, ou.params_tensor(4)), 0.7 * eye.expand(4, 3, 3))
    assert ou.noise_type == "additive" and ou.state_names == ("x0", "x1", "x2")
    gbm = systems.get("geometric_brownian_motion")
    s = torch.tensor([[2.0], [3.0]], dtype=torch.float64)
    p = gbm.params_tensor(2)
    assert torch.allclose(gbm.drift(0.0, s, p), 0.1 * s)
    assert torch.allclose(gbm.diffusion(0.0, s, p), 0.2 * s)
    sl = systems.get("stochastic_lorenz", sigma_noise=0.3)
    lz = systems.get("lorenz63")
    y = lz.sample_initial(3, generator=_gen())
    assert torch.equal(sl.drift(0.0, y, sl.params_tensor(3)), lz.drift(0.0, y, lz.params_tensor(3)))
    assert torch.equal(sl.diffusion(0.0, y, sl.params_tensor(3)), 0.3 * eye.expand(3, 3, 3))


# --------------------------------------------------------------- initial states
@pytest.mark.parametrize("name", ALL)
def test_sample_initial_is_seeded_and_follows_device(name, device):
    sys = systems.get(name)
    a = sys.sample_initial(8, generator=_gen(7), device=device, dtype=torch.float32)
    b = sys.sample_initial(8, generator=_gen(7), device=device, dtype=torch.float32)
    c = sys.sample_initial(8, generator=_gen(8), device=device, dtype=torch.float32)
    assert a.device.type == device.type and a.dtype == torch.float32
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_lorenz63_initial_states_lie_on_the_attractor():
    sys = systems.get("lorenz63")
    x = sys.sample_initial(200, generator=_gen())
    # the attractor: |x| < 25, |y| < 30, 0 < z < 50, and away from the (unstable) origin
    assert x[:, 0].abs().max() < 25 and x[:, 1].abs().max() < 30
    assert x[:, 2].min() > 0 and x[:, 2].max() < 50
    assert x.norm(dim=1).min() > 1.0
    # burn-in at per-sample parameters: a larger rho lifts the attractor
    rows = sys.params_tensor({"rho": [28.0] * 100 + [40.0] * 100})
    y = sys.sample_initial(200, generator=_gen(), params=rows)
    assert y[100:, 2].mean() > y[:100, 2].mean() + 5


def test_initial_distributions_follow_the_documented_ranges():
    gly = systems.get("glycolytic_oscillator")
    x = gly.sample_initial(1000, generator=_gen())
    lo = torch.tensor(gly._IC_LO, dtype=torch.float64)
    hi = torch.tensor(gly._IC_HI, dtype=torch.float64)
    assert torch.all(x >= lo) and torch.all(x <= hi)
    assert torch.all(x.min(0).values < lo + 0.05 * (hi - lo))
    rigid = systems.get("rigid_body").sample_initial(100, generator=_gen())
    assert torch.allclose(rigid.norm(dim=1), torch.ones(100, dtype=torch.float64))
    kur = systems.get("kuramoto").sample_initial(100, generator=_gen())
    assert kur.min() >= 0 and kur.max() < 2 * math.pi


# ------------------------------------------------------------------ validation
def test_wrong_state_dimension_names_system_and_states():
    sys = systems.get("lorenz63")
    msg = r"'lorenz63' has state shape \(3,\) \(x, y, z\).*shape \(5, 4\) \(state dimension 4\)"
    with pytest.raises(ValueError, match=msg):
        sys.simulate(torch.zeros(5, 4), torch.linspace(0, 1, 3))
    with pytest.raises(ValueError, match=r"x0\[None\]"):
        sys.simulate(torch.zeros(3), torch.linspace(0, 1, 3))
    big = systems.get("lorenz96", dim=20)
    with pytest.raises(ValueError, match=r"x0, x1, .*, x19\).*state dimension 40"):
        big.check_state(torch.zeros(2, 40))


def test_simulate_validates_params_before_solving():
    sys = systems.get("lorenz63")
    x0 = torch.zeros(4, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="params has 2 rows but x0 has a batch of 4"):
        sys.simulate(x0, [0.0, 1.0], sys.params_tensor(2))
    with pytest.raises(ValueError, match=r"shape \(B, 3\)"):
        sys.simulate(x0, [0.0, 1.0], torch.ones(4, 2))
    with pytest.raises(ValueError, match="'beta'.*got -2"):
        sys.simulate(x0, [0.0, 1.0], {"beta": -2.0})
    with pytest.raises(ValueError, match="seed applies to SDE systems only"):
        sys.simulate(x0, [0.0, 1.0], seed=3)


def test_as_sde_and_vector_field_bind_params():
    ou = systems.get("ornstein_uhlenbeck")
    sde = ou.as_sde({"sigma": [0.1, 0.2]})
    x = torch.zeros(2, 1, dtype=torch.float64)
    assert sde.g(0.0, x).shape == (2, 1, 1) and sde.g(0.0, x).flatten().tolist() == [0.1, 0.2]
    with pytest.raises(TypeError, match="is an ODE"):
        systems.get("lorenz63").as_sde()
    field = systems.get("van_der_pol").vector_field(n=3)
    with pytest.raises(RuntimeError, match="batch of 2 states but 3 parameter rows"):
        field(0.0, torch.zeros(2, 2, dtype=torch.float64))


def test_interval_notation():
    closed = systems.Interval.parse("[0, 1]")
    half = systems.Interval.parse("(0, inf)")
    assert closed.contains(np.array([0.0, 1.0, 1.5])).tolist() == [True, True, False]
    assert half.contains(np.array([0.0, 1e300, np.inf])).tolist() == [False, True, False]
    assert str(half) == "(0, inf)"
    with pytest.raises(ValueError, match="not of the form"):
        systems.Interval.parse("0..1")


# ------------------------------------------------------------------- CLI parser
def test_parse_param_spec():
    assert systems.parse_param_spec("default") == "default"
    assert systems.parse_param_spec(" Sample ") == "sample"
    assert systems.parse_param_spec("rho=20,28,35") == {"rho": [20.0, 28.0, 35.0]}
    assert systems.parse_param_spec("rho = 20, 28; sigma=10") == {
        "rho": [20.0, 28.0],
        "sigma": [10.0],
    }
    assert systems.parse_param_spec("beta=2.5e0") == {"beta": [2.5]}
    with pytest.raises(ValueError, match="'x' .*is not a number"):
        systems.parse_param_spec("rho=20,x")
    with pytest.raises(ValueError, match="cannot read 'rho'"):
        systems.parse_param_spec("rho")
    with pytest.raises(ValueError, match="given twice"):
        systems.parse_param_spec("rho=1;rho=2")
    with pytest.raises(ValueError, match="is empty"):
        systems.parse_param_spec("  ")
    with pytest.raises(ValueError, match="not finite"):
        systems.parse_param_spec("rho=inf")
