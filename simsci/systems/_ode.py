"""Ordinary differential equation systems with their literature parameter values.

Every drift takes ``x`` ``(B, D)`` and one parameter row per sample ``p`` ``(B, P)`` and
is written with whole-batch tensor operations (no Python loop over samples or, except
where noted, over state components), so one call serves a batch of environments.
All systems here are autonomous: ``t`` is accepted and ignored.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from simsci.systems._base import System
from simsci.systems._registry import register


def _uniform(n, lo, hi, generator, device) -> torch.Tensor:
    """``(n, len(lo))`` uniform draws with per-column bounds, float64."""
    lo = torch.as_tensor(lo, dtype=torch.float64, device=device)
    hi = torch.as_tensor(hi, dtype=torch.float64, device=device)
    u = torch.rand(n, lo.shape[0], generator=generator, device=device, dtype=torch.float64)
    return lo + (hi - lo) * u


def _check_int(name: str, value, minimum: int, system: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(
            f"option {name!r} of system {system!r} must be an integer >= {minimum}, got {value!r}"
        )
    return int(value)


@register
class Lorenz63(System):
    r"""Lorenz (1963) convection model.

    .. math:: \dot x = \sigma (y - x),\quad \dot y = x(\rho - z) - y,\quad
              \dot z = x y - \beta z

    Parameters: Lorenz, E. N. (1963), "Deterministic nonperiodic flow", J. Atmos. Sci.
    20, 130-141: sigma = 10, rho = 28, beta = 8/3 (the chaotic "butterfly" attractor).
    Sampling ranges (sigma 9-11, rho 28-40, beta 2.4-3) keep rho above the Hopf
    threshold sigma(sigma+beta+3)/(sigma-beta-1) everywhere, so every environment is
    chaotic (or, in windows, periodic) rather than settling on a fixed point.

    Initial states: uniform in [-20, 20] x [-20, 20] x [0, 50], then a burn-in of
    5 time units (RK4, step 0.01) at the episode's parameters so the states lie on the
    attractor.
    """

    name = "lorenz63"
    state_names = ("x", "y", "z")
    param_names = ("sigma", "rho", "beta")
    default_params = {"sigma": 10.0, "rho": 28.0, "beta": 8.0 / 3.0}
    param_ranges = {"sigma": (9.0, 11.0), "rho": (28.0, 40.0), "beta": (2.4, 3.0)}
    valid_ranges = {"sigma": "(0, inf)", "rho": "(-inf, inf)", "beta": "(0, inf)"}
    default_dt = 0.01
    default_t_end = 10.0
    default_method = "dopri5"
    burn_in = 5.0
    burn_in_step = 0.01

    def drift(self, t, x, p):
        sigma, rho, beta = p.unbind(-1)
        u, v, w = x.unbind(-1)
        return torch.stack((sigma * (v - u), u * (rho - w) - v, u * v - beta * w), dim=-1)

    def _sample_initial(self, n, generator, device):
        return _uniform(n, [-20.0, -20.0, 0.0], [20.0, 20.0, 50.0], generator, device)


@register
class Lorenz96(System):
    r"""Lorenz (1996) model of an atmospheric quantity on a latitude circle.

    .. math:: \dot x_i = (x_{i+1} - x_{i-2})\, x_{i-1} - x_i + F,\quad i \bmod N

    Lorenz, E. N. (1996), "Predictability: a problem partly solved", Proc. ECMWF Seminar
    on Predictability: N = 40, F = 8 (chaotic). ``get("lorenz96", dim=N)`` sets N >= 4.
    Initial states: F + N(0, 1) noise on every site, then a burn-in of 10 time units
    (RK4, step 0.02) at the episode's forcing.
    """

    name = "lorenz96"
    param_names = ("F",)
    default_params = {"F": 8.0}
    param_ranges = {"F": (6.0, 10.0)}
    options = ("dim",)
    default_dt = 0.05
    default_t_end = 10.0
    burn_in = 10.0
    burn_in_step = 0.02

    def __init__(self, *, dim: int = 40, **params):
        dim = _check_int("dim", dim, 4, self.name)
        self.state_names = tuple(f"x{i}" for i in range(dim))
        super().__init__(**params)

    def drift(self, t, x, p):
        forcing = p[:, :1]
        return (torch.roll(x, -1, -1) - torch.roll(x, 2, -1)) * torch.roll(x, 1, -1) - x + forcing

    def _sample_initial(self, n, generator, device):
        noise = torch.randn(n, self.dim, generator=generator, device=device, dtype=torch.float64)
        return self.params["F"] + noise


@register
class VanDerPol(System):
    r"""Van der Pol (1926) relaxation oscillator.

    .. math:: \dot x = y,\quad \dot y = \mu (1 - x^2) y - x

    van der Pol, B. (1926), "On relaxation-oscillations", Phil. Mag. 2, 978-992. For
    every mu > 0 all orbits except the origin approach one limit cycle, of amplitude
    close to 2 for small mu. Default mu = 1 (the usual benchmark value); the sampling
    range 0.5-2 stays clear of the stiff relaxation regime. Initial states: uniform in
    [-3, 3]^2.
    """

    name = "van_der_pol"
    state_names = ("x", "y")
    param_names = ("mu",)
    default_params = {"mu": 1.0}
    param_ranges = {"mu": (0.5, 2.0)}
    valid_ranges = {"mu": "[0, inf)"}
    default_dt = 0.05
    default_t_end = 20.0

    def drift(self, t, x, p):
        mu = p[:, 0]
        u, v = x.unbind(-1)
        return torch.stack((v, mu * (1.0 - u * u) * v - u), dim=-1)

    def _sample_initial(self, n, generator, device):
        return _uniform(n, [-3.0, -3.0], [3.0, 3.0], generator, device)


@register
class DampedPendulum(System):
    r"""A planar pendulum with linear (viscous) damping.

    .. math:: \dot\theta = \omega,\quad \dot\omega = -(g / L)\sin\theta - c\,\omega

    Strogatz, S. H. (2015), Nonlinear Dynamics and Chaos, 2nd ed., Sec. 6.7. Defaults:
    g = 9.81 m/s^2 (standard gravity), L = 1 m and damping c = 0.25 1/s (an underdamped
    swing: c < 2 sqrt(g/L)); c = 0 is the conservative pendulum. The energy per unit
    mass E = L^2 omega^2 / 2 + g L (1 - cos theta) obeys dE/dt = -c L^2 omega^2 <= 0.
    Initial states: theta uniform in [-pi/2, pi/2], omega uniform in [-1, 1].
    """

    name = "damped_pendulum"
    state_names = ("theta", "omega")
    param_names = ("g", "L", "damping")
    default_params = {"g": 9.81, "L": 1.0, "damping": 0.25}
    param_ranges = {"g": (9.0, 10.5), "L": (0.5, 2.0), "damping": (0.0, 0.5)}
    valid_ranges = {"g": "(0, inf)", "L": "(0, inf)", "damping": "[0, inf)"}
    default_dt = 0.02
    default_t_end = 10.0

    def drift(self, t, x, p):
        g, length, damping = p.unbind(-1)
        theta, omega = x.unbind(-1)
        return torch.stack((omega, -(g / length) * torch.sin(theta) - damping * omega), dim=-1)

    def _sample_initial(self, n, generator, device):
        return _uniform(n, [-math.pi / 2, -1.0], [math.pi / 2, 1.0], generator, device)


@register
class Duffing(System):
    r"""Duffing oscillator, unforced: a unit mass on a cubic spring with viscous damping.

    .. math:: \dot x = v,\quad \dot v = -\delta v - \alpha x - \beta x^3

    Duffing, G. (1918), "Erzwungene Schwingungen bei veränderlicher Eigenfrequenz und
    ihre technische Bedeutung", Vieweg. Defaults: the double-well form of Holmes, P.
    (1979), "A nonlinear oscillator with a strange attractor", Phil. Trans. R. Soc.
    Lond. A 292, 419-448 (Guckenheimer & Holmes 1983, Nonlinear Oscillations, Dynamical
    Systems, and Bifurcations of Vector Fields, Sec. 2.2): alpha = -1, beta = 1, with
    their damping delta = 0.25. Two sinks at x = +-sqrt(-alpha/beta), v = 0 (small
    oscillations there at frequency sqrt(-2 alpha) before the damping), a saddle at
    the origin. The energy per unit mass H = v^2/2 + alpha x^2/2 + beta x^4/4 obeys
    dH/dt = -delta v^2: conserved for delta = 0, decreasing otherwise.

    Their periodic forcing gamma cos(omega t) is left out: every system here is
    autonomous (``simsci/ODEControl-v0`` integrates each control interval over
    [0, dt], so a time-dependent drift would restart its phase at every step).
    beta >= 0 (a hardening or linear spring): with beta < 0 and alpha > 0 orbits beyond
    the saddles escape to infinity in finite time. Sampling ranges: delta 0.1-0.4,
    alpha -1.5 to -0.5, beta 0.5-1.5 (always two wells). Initial states: uniform in
    [-2, 2]^2 (both wells and the orbits over the barrier).
    """

    name = "duffing"
    state_names = ("x", "v")
    param_names = ("delta", "alpha", "beta")
    default_params = {"delta": 0.25, "alpha": -1.0, "beta": 1.0}
    param_ranges = {"delta": (0.1, 0.4), "alpha": (-1.5, -0.5), "beta": (0.5, 1.5)}
    valid_ranges = {"delta": "[0, inf)", "beta": "[0, inf)"}
    default_dt = 0.05
    default_t_end = 20.0

    def drift(self, t, x, p):
        delta, alpha, beta = p.unbind(-1)
        u, v = x.unbind(-1)
        return torch.stack((v, -delta * v - alpha * u - beta * u**3), dim=-1)

    def energy(self, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """``H = v^2/2 + alpha x^2/2 + beta x^4/4`` per unit mass, shape ``x.shape[:-1]``."""
        alpha, beta = p[..., 1], p[..., 2]
        u, v = x[..., 0], x[..., 1]
        return 0.5 * v * v + 0.5 * alpha * u * u + 0.25 * beta * u**4

    def _sample_initial(self, n, generator, device):
        return _uniform(n, [-2.0, -2.0], [2.0, 2.0], generator, device)


@register
class DoublePendulum(System):
    r"""A planar double pendulum of two point masses on massless rods (no friction).

    State (theta1, theta2, omega1, omega2), angles from the downward vertical. With
    d = theta1 - theta2 and den = 2 m1 + m2 - m2 cos(2 d):

    .. math::
        \dot\omega_1 = \frac{-g(2m_1+m_2)\sin\theta_1 - m_2 g \sin(\theta_1 - 2\theta_2)
                       - 2 m_2 \sin d\,(\omega_2^2 L_2 + \omega_1^2 L_1 \cos d)}{L_1\,den}
        \dot\omega_2 = \frac{2\sin d\,(\omega_1^2 L_1 (m_1+m_2) + g(m_1+m_2)\cos\theta_1
                       + \omega_2^2 L_2 m_2 \cos d)}{L_2\,den}

    (the Euler-Lagrange equations solved for the accelerations). Defaults
    m1 = m2 = 1, L1 = L2 = 1, g = 9.8, as in Cranmer et al. (2020), "Lagrangian Neural
    Networks", ICLR DeepDiffEq workshop. Energy is conserved. Initial states: angles
    uniform in [-pi/2, pi/2], angular velocities uniform in [-1, 1].
    """

    name = "double_pendulum"
    state_names = ("theta1", "theta2", "omega1", "omega2")
    param_names = ("m1", "m2", "L1", "L2", "g")
    default_params = {"m1": 1.0, "m2": 1.0, "L1": 1.0, "L2": 1.0, "g": 9.8}
    param_ranges = {
        "m1": (0.5, 2.0),
        "m2": (0.5, 2.0),
        "L1": (0.5, 1.5),
        "L2": (0.5, 1.5),
        "g": (9.0, 10.5),
    }
    valid_ranges = {k: "(0, inf)" for k in param_names}
    default_dt = 0.01
    default_t_end = 10.0

    def drift(self, t, x, p):
        m1, m2, l1, l2, g = p.unbind(-1)
        th1, th2, w1, w2 = x.unbind(-1)
        d = th1 - th2
        sin_d, cos_d = torch.sin(d), torch.cos(d)
        den = 2.0 * m1 + m2 - m2 * torch.cos(2.0 * d)
        a1 = (
            -g * (2.0 * m1 + m2) * torch.sin(th1)
            - m2 * g * torch.sin(th1 - 2.0 * th2)
            - 2.0 * sin_d * m2 * (w2 * w2 * l2 + w1 * w1 * l1 * cos_d)
        ) / (l1 * den)
        a2 = (
            2.0
            * sin_d
            * (
                w1 * w1 * l1 * (m1 + m2)
                + g * (m1 + m2) * torch.cos(th1)
                + w2 * w2 * l2 * m2 * cos_d
            )
        ) / (l2 * den)
        return torch.stack((w1, w2, a1, a2), dim=-1)

    def energy(self, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """Total mechanical energy ``(B,)`` (kinetic + potential, zero at the pivot)."""
        m1, m2, l1, l2, g = p.unbind(-1)
        th1, th2, w1, w2 = x.unbind(-1)
        kinetic = 0.5 * m1 * (l1 * w1) ** 2 + 0.5 * m2 * (
            (l1 * w1) ** 2 + (l2 * w2) ** 2 + 2.0 * l1 * l2 * w1 * w2 * torch.cos(th1 - th2)
        )
        potential = -(m1 + m2) * g * l1 * torch.cos(th1) - m2 * g * l2 * torch.cos(th2)
        return kinetic + potential

    def _sample_initial(self, n, generator, device):
        h = math.pi / 2
        return _uniform(n, [-h, -h, -1.0, -1.0], [h, h, 1.0, 1.0], generator, device)


@register
class LotkaVolterra(System):
    r"""Lotka-Volterra predator-prey model.

    .. math:: \dot x = \alpha x - \beta x y,\quad \dot y = \delta x y - \gamma y

    Lotka (1925), Volterra (1926). Parameter values from the universal differential
    equations benchmark of Rackauckas et al. (2020), "Universal Differential Equations
    for Scientific Machine Learning", arXiv:2001.04385: prey growth alpha = 1.3,
    predation beta = 0.9, predator growth per prey delta = 0.8, predator death
    gamma = 1.8 (their code writes the last two as gamma = 0.8, delta = 1.8 with the
    roles swapped; the dynamics are the same). The quantity
    V = delta x - gamma ln x + beta y - alpha ln y is conserved. Initial states:
    uniform in [0.5, 4.5]^2 (their u0 = (0.44, 4.63) sits at the corner).
    """

    name = "lotka_volterra"
    state_names = ("prey", "predator")
    param_names = ("alpha", "beta", "gamma", "delta")
    default_params = {"alpha": 1.3, "beta": 0.9, "gamma": 1.8, "delta": 0.8}
    param_ranges = {
        "alpha": (1.0, 1.6),
        "beta": (0.7, 1.1),
        "gamma": (1.5, 2.1),
        "delta": (0.6, 1.0),
    }
    valid_ranges = {k: "(0, inf)" for k in param_names}
    default_dt = 0.05
    default_t_end = 15.0

    def drift(self, t, x, p):
        alpha, beta, gamma, delta = p.unbind(-1)
        u, v = x.unbind(-1)
        return torch.stack((alpha * u - beta * u * v, delta * u * v - gamma * v), dim=-1)

    def conserved(self, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """The first integral ``V(x, y)`` ``(B,)``, constant along every orbit."""
        alpha, beta, gamma, delta = p.unbind(-1)
        u, v = x.unbind(-1)
        return delta * u - gamma * torch.log(u) + beta * v - alpha * torch.log(v)

    def _sample_initial(self, n, generator, device):
        return _uniform(n, [0.5, 0.5], [4.5, 4.5], generator, device)


_GLYCOLYTIC = {
    "J0": 2.5,
    "k1": 100.0,
    "k2": 6.0,
    "k3": 16.0,
    "k4": 100.0,
    "k5": 1.28,
    "k6": 12.0,
    "k": 1.8,
    "kappa": 13.0,
    "q": 4.0,
    "K1": 0.52,
    "psi": 0.1,
    "N": 1.0,
    "A": 4.0,
}


@register
class GlycolyticOscillator(System):
    r"""Seven-species model of yeast glycolytic oscillations.

    Ruoff, Christensen, Wolf & Heinrich (2003), "Temperature dependency and temperature
    compensation in a model of yeast glycolytic oscillations", Biophys. Chem. 106,
    179-192; the benchmark form and values of Daniels & Nemenman (2015), "Efficient
    inference of parsimonious phenomenological models of cellular dynamics using
    S-systems and alternating regression", PLoS ONE 10(3), e0119821, used by the SINDy
    papers (Mangan et al. 2016; Kaheman et al. 2020, SINDy-PI). With
    v1 = k1 S1 S6 / (1 + (S6/K1)^q):

    .. math::
        \dot S_1 &= J_0 - v_1 \\
        \dot S_2 &= 2 v_1 - k_2 S_2 (N - S_5) - k_6 S_2 S_5 \\
        \dot S_3 &= k_2 S_2 (N - S_5) - k_3 S_3 (A - S_6) \\
        \dot S_4 &= k_3 S_3 (A - S_6) - k_4 S_4 S_5 - \kappa (S_4 - S_7) \\
        \dot S_5 &= k_2 S_2 (N - S_5) - k_4 S_4 S_5 - k_6 S_2 S_5 \\
        \dot S_6 &= -2 v_1 + 2 k_3 S_3 (A - S_6) - k_5 S_6 \\
        \dot S_7 &= \psi \kappa (S_4 - S_7) - k S_7

    Values (mM, min): J0 = 2.5, k1 = 100, k2 = 6, k3 = 16, k4 = 100, k5 = 1.28, k6 = 12,
    k = 1.8, kappa = 13, q = 4, K1 = 0.52, psi = 0.1, N = 1, A = 4. Initial states:
    uniform over Daniels & Nemenman's ranges S1 [0.15, 1.60], S2 [0.19, 2.16],
    S3 [0.04, 0.20], S4 [0.10, 0.35], S5 [0.08, 0.30], S6 [0.14, 2.67], S7 [0.05, 0.10].
    Sampling ranges: +-10 % around every value.
    """

    name = "glycolytic_oscillator"
    state_names = ("S1", "S2", "S3", "S4", "S5", "S6", "S7")
    param_names = tuple(_GLYCOLYTIC)
    default_params = dict(_GLYCOLYTIC)
    param_ranges = {k: (0.9 * v, 1.1 * v) for k, v in _GLYCOLYTIC.items()}
    valid_ranges = {k: "(0, inf)" for k in _GLYCOLYTIC}
    default_dt = 0.01
    default_t_end = 5.0

    _IC_LO = (0.15, 0.19, 0.04, 0.10, 0.08, 0.14, 0.05)
    _IC_HI = (1.60, 2.16, 0.20, 0.35, 0.30, 2.67, 0.10)

    def drift(self, t, x, p):
        j0, k1, k2, k3, k4, k5, k6, k, kappa, q, big_k1, psi, n_tot, a_tot = p.unbind(-1)
        s1, s2, s3, s4, s5, s6, s7 = x.unbind(-1)
        v1 = k1 * s1 * s6 / (1.0 + (s6 / big_k1) ** q)
        v2 = k2 * s2 * (n_tot - s5)
        v3 = k3 * s3 * (a_tot - s6)
        v4 = k4 * s4 * s5
        v6 = k6 * s2 * s5
        leak = kappa * (s4 - s7)
        return torch.stack(
            (
                j0 - v1,
                2.0 * v1 - v2 - v6,
                v2 - v3,
                v3 - v4 - leak,
                v2 - v4 - v6,
                -2.0 * v1 + 2.0 * v3 - k5 * s6,
                psi * leak - k * s7,
            ),
            dim=-1,
        )

    def _sample_initial(self, n, generator, device):
        return _uniform(n, self._IC_LO, self._IC_HI, generator, device)


@register
class FitzHughNagumo(System):
    r"""FitzHugh-Nagumo excitable-membrane model.

    .. math:: \dot v = v - v^3/3 - w + I,\quad \dot w = (v + a - b w) / \tau

    FitzHugh, R. (1961), "Impulses and physiological states in theoretical models of
    nerve membrane", Biophys. J. 1, 445-466; Nagumo, Arimoto & Yoshizawa (1962), Proc.
    IRE 50, 2061-2070. FitzHugh's values a = 0.7, b = 0.8, tau = 12.5 (epsilon = 0.08);
    external current I = 0.5 puts the model on its limit cycle (tonic spiking).
    Initial states: uniform in [-2, 2]^2.
    """

    name = "fitzhugh_nagumo"
    state_names = ("v", "w")
    param_names = ("a", "b", "tau", "I")
    default_params = {"a": 0.7, "b": 0.8, "tau": 12.5, "I": 0.5}
    param_ranges = {"a": (0.6, 0.8), "b": (0.7, 0.9), "tau": (10.0, 15.0), "I": (0.3, 0.7)}
    valid_ranges = {"b": "[0, inf)", "tau": "(0, inf)"}
    default_dt = 0.1
    default_t_end = 100.0

    def drift(self, t, x, p):
        a, b, tau, current = p.unbind(-1)
        v, w = x.unbind(-1)
        return torch.stack((v - v**3 / 3.0 - w + current, (v + a - b * w) / tau), dim=-1)

    def _sample_initial(self, n, generator, device):
        return _uniform(n, [-2.0, -2.0], [2.0, 2.0], generator, device)


@register
class Kuramoto(System):
    r"""Kuramoto (1975) model of N coupled phase oscillators.

    .. math:: \dot\theta_i = \omega_i + \frac{K}{N}\sum_{j=1}^N \sin(\theta_j - \theta_i)

    Kuramoto, Y. (1975), "Self-entrainment of a population of coupled non-linear
    oscillators", Lecture Notes in Physics 39, 420-422. The natural frequencies omega_i
    are drawn once per instance from N(0, 1) with ``frequency_seed`` (or given as
    ``frequencies``); for that distribution the infinite-N synchronisation threshold is
    K_c = 2 / (pi g(0)) = sqrt(8 / pi) ~ 1.60. Default N = 10 (``dim``), K = 2 (partial
    synchronisation); the sampling range 0-4 spans incoherence to locking. The
    frequencies are stored in the files' ``/static/frequencies``. Phases are not wrapped
    (trajectories stay continuous). The coupling sum is evaluated in O(N) as
    cos(theta_i) sum_j sin(theta_j) - sin(theta_i) sum_j cos(theta_j).
    Initial states: phases uniform in [0, 2 pi).
    """

    name = "kuramoto"
    param_names = ("K",)
    default_params = {"K": 2.0}
    param_ranges = {"K": (0.0, 4.0)}
    options = ("dim", "frequency_seed", "frequencies")
    default_dt = 0.05
    default_t_end = 20.0

    def __init__(
        self, *, dim: int | None = None, frequency_seed: int = 0, frequencies=None, **params
    ):
        if frequencies is not None:
            freq = torch.as_tensor(np.asarray(frequencies, dtype=np.float64))
            if freq.ndim != 1 or freq.shape[0] < 2 or not torch.isfinite(freq).all():
                raise ValueError(
                    "kuramoto: frequencies must be a finite 1-D sequence of at least 2 "
                    f"values, got shape {tuple(freq.shape)}"
                )
            if dim is not None and dim != freq.shape[0]:
                raise ValueError(f"kuramoto: dim={dim} but {freq.shape[0]} frequencies given")
            dim = freq.shape[0]
        else:
            dim = _check_int("dim", 10 if dim is None else dim, 2, self.name)
            gen = torch.Generator().manual_seed(int(frequency_seed))
            freq = torch.randn(dim, generator=gen, dtype=torch.float64)
        self.frequency_seed = int(frequency_seed)
        self.frequencies = freq
        self.state_names = tuple(f"theta{i}" for i in range(dim))
        self._freq_cache: dict = {}
        super().__init__(**params)

    def _omega(self, like: torch.Tensor) -> torch.Tensor:
        key = (like.device, like.dtype)
        omega = self._freq_cache.get(key)
        if omega is None:
            omega = self.frequencies.to(device=like.device, dtype=like.dtype)
            self._freq_cache[key] = omega
        return omega

    def static(self):
        return {"frequencies": self.frequencies.numpy().copy()}

    def drift(self, t, x, p):
        coupling = p[:, :1] / x.shape[-1]
        s, c = torch.sin(x), torch.cos(x)
        interaction = c * s.sum(-1, keepdim=True) - s * c.sum(-1, keepdim=True)
        return self._omega(x) + coupling * interaction

    def order_parameter(self, x: torch.Tensor) -> torch.Tensor:
        """Kuramoto's r = |mean_j exp(i theta_j)| in [0, 1], shape ``x.shape[:-1]``."""
        return torch.sqrt(torch.cos(x).mean(-1) ** 2 + torch.sin(x).mean(-1) ** 2)

    def _sample_initial(self, n, generator, device):
        u = torch.rand(n, self.dim, generator=generator, device=device, dtype=torch.float64)
        return 2.0 * math.pi * u


@register
class RigidBody(System):
    r"""Free rigid body (Euler's equations) in body-frame angular momentum m = I omega.

    .. math:: \dot m_1 = (1/I_3 - 1/I_2) m_2 m_3,\quad
              \dot m_2 = (1/I_1 - 1/I_3) m_3 m_1,\quad
              \dot m_3 = (1/I_2 - 1/I_1) m_1 m_2

    Hairer, Lubich & Wanner (2006), Geometric Numerical Integration, 2nd ed., Sec. IV.1:
    I1 = 2, I2 = 1, I3 = 2/3. Both |m|^2 and the kinetic energy
    H = (m1^2/I1 + m2^2/I2 + m3^2/I3) / 2 are conserved. Initial states: uniform on the
    unit sphere |m| = 1 (their example starts at (cos 1.1, 0, sin 1.1), on that sphere).
    """

    name = "rigid_body"
    state_names = ("m1", "m2", "m3")
    param_names = ("I1", "I2", "I3")
    default_params = {"I1": 2.0, "I2": 1.0, "I3": 2.0 / 3.0}
    param_ranges = {"I1": (1.5, 2.5), "I2": (0.8, 1.2), "I3": (0.5, 0.8)}
    valid_ranges = {k: "(0, inf)" for k in param_names}
    default_dt = 0.05
    default_t_end = 20.0

    def drift(self, t, x, p):
        a1, a2, a3 = (1.0 / p).unbind(-1)
        m1, m2, m3 = x.unbind(-1)
        return torch.stack(((a3 - a2) * m2 * m3, (a1 - a3) * m3 * m1, (a2 - a1) * m1 * m2), dim=-1)

    def energy(self, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """Kinetic energy ``(B,)``: ``sum_i m_i^2 / (2 I_i)``."""
        return 0.5 * (x * x / p).sum(-1)

    def _sample_initial(self, n, generator, device):
        g = torch.randn(n, 3, generator=generator, device=device, dtype=torch.float64)
        return g / g.norm(dim=-1, keepdim=True)
