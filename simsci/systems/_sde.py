"""Itô stochastic differential equation systems.

``diffusion`` follows the :func:`simsci.integrate.sdeint` (and torchsde) convention:
``(B, D)``, the diagonal of the noise matrix, for ``"diagonal"`` noise; the full
``(B, D, M)`` matrix for ``"additive"`` noise (state-independent; here ``M = D`` and the
matrix is diagonal). Declaring additive noise where it holds lets the integrators use
the higher strong order they reach for it (Euler-Maruyama 1.0, SRK 1.5). The default
solver is Euler-Maruyama.
"""

from __future__ import annotations

import torch

from simsci.systems._base import System
from simsci.systems._ode import Lorenz63, _check_int, _uniform
from simsci.systems._registry import register


@register
class OrnsteinUhlenbeck(System):
    r"""Ornstein-Uhlenbeck process (independent in each of ``dim`` components).

    .. math:: dX = \theta (\mu - X)\,dt + \sigma\,dW

    Uhlenbeck & Ornstein (1930), "On the theory of the Brownian motion", Phys. Rev. 36,
    823-841. Closed form: E[X_t] = mu + (X_0 - mu) e^{-theta t},
    Var[X_t] = sigma^2 (1 - e^{-2 theta t}) / (2 theta). Defaults theta = 1, mu = 0,
    sigma = 0.5 (illustrative: stationary std 0.35, relaxation time 1).
    ``get("ornstein_uhlenbeck", dim=D)`` makes D independent components.
    Initial states: N(0, 1) in each component.
    """

    name = "ornstein_uhlenbeck"
    param_names = ("theta", "mu", "sigma")
    default_params = {"theta": 1.0, "mu": 0.0, "sigma": 0.5}
    param_ranges = {"theta": (0.5, 2.0), "mu": (-1.0, 1.0), "sigma": (0.2, 1.0)}
    valid_ranges = {"theta": "(0, inf)", "sigma": "[0, inf)"}
    options = ("dim",)
    noise_type = "additive"
    default_dt = 0.01
    default_t_end = 5.0
    default_method = "euler"

    def __init__(self, *, dim: int = 1, **params):
        dim = _check_int("dim", dim, 1, self.name)
        self.state_names = ("x",) if dim == 1 else tuple(f"x{i}" for i in range(dim))
        super().__init__(**params)

    def drift(self, t, x, p):
        theta, mu = p[:, 0:1], p[:, 1:2]
        return theta * (mu - x)

    def diffusion(self, t, x, p):
        return torch.diag_embed(p[:, 2:3].expand_as(x))

    def _sample_initial(self, n, generator, device):
        return torch.randn(n, self.dim, generator=generator, device=device, dtype=torch.float64)


@register
class GeometricBrownianMotion(System):
    r"""Geometric Brownian motion.

    .. math:: dS = \mu S\,dt + \sigma S\,dW

    Samuelson (1965), "Rational theory of warrant pricing"; Black & Scholes (1973),
    J. Polit. Econ. 81, 637-654. E[S_t] = S_0 e^{mu t},
    Var[S_t] = S_0^2 e^{2 mu t}(e^{sigma^2 t} - 1). Defaults mu = 0.1, sigma = 0.2
    (annualised drift and volatility of the usual equity illustration).
    Initial states: uniform in [0.5, 1.5].
    """

    name = "geometric_brownian_motion"
    state_names = ("S",)
    param_names = ("mu", "sigma")
    default_params = {"mu": 0.1, "sigma": 0.2}
    param_ranges = {"mu": (-0.1, 0.3), "sigma": (0.1, 0.4)}
    valid_ranges = {"sigma": "[0, inf)"}
    noise_type = "diagonal"
    default_dt = 0.01
    default_t_end = 1.0
    default_method = "euler"

    def drift(self, t, x, p):
        return p[:, 0:1] * x

    def diffusion(self, t, x, p):
        return p[:, 1:2] * x

    def _sample_initial(self, n, generator, device):
        return _uniform(n, [0.5], [1.5], generator, device)


@register
class StochasticLorenz(System):
    r"""Lorenz-63 with additive noise of strength ``sigma_noise`` on every component.

    .. math:: dX = f_{\text{Lorenz}}(X)\,dt + \sigma_{\text{noise}}\,dW

    The stochastic Lorenz attractor is the toy data set of Li, Wong, Chen & Duvenaud
    (2020), "Scalable gradients for stochastic differential equations", AISTATS,
    Sec. 7.2, with sigma = 10, rho = 28, beta = 8/3 and initial states X_0 ~ N(0, I)
    (used here too, no burn-in). Note that their noise is *multiplicative*,
    diag(0.1 x, 0.28 y, 0.3 z) (torchsde's examples/latent_sde_lorenz.py); simsci's
    ``stochastic_lorenz`` uses additive noise, sigma_noise = 1 by default, which keeps
    the noise level independent of the position on the attractor.
    """

    name = "stochastic_lorenz"
    state_names = ("x", "y", "z")
    param_names = ("sigma", "rho", "beta", "sigma_noise")
    default_params = {**Lorenz63.default_params, "sigma_noise": 1.0}
    param_ranges = {**Lorenz63.param_ranges, "sigma_noise": (0.5, 2.0)}
    valid_ranges = {**Lorenz63.valid_ranges, "sigma_noise": "[0, inf)"}
    noise_type = "additive"
    default_dt = 0.01
    default_t_end = 2.0
    default_method = "euler"

    def drift(self, t, x, p):
        return Lorenz63.drift(self, t, x, p[:, :3])

    def diffusion(self, t, x, p):
        return torch.diag_embed(p[:, 3:4].expand_as(x))

    def _sample_initial(self, n, generator, device):
        return torch.randn(n, 3, generator=generator, device=device, dtype=torch.float64)
