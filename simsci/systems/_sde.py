"""Itô stochastic differential equation systems.

``diffusion`` follows the :func:`simsci.integrate.sdeint` (and torchsde) convention:
``(B, D)``, the diagonal of the noise matrix, for ``"diagonal"`` noise; the full
``(B, D, M)`` matrix for ``"additive"`` noise (state-independent; here ``M = D`` and the
matrix is diagonal). Declaring additive noise where it holds lets the integrators use
the higher strong order they reach for it (Euler-Maruyama 1.0, SRK 1.5). The default
solver is Euler-Maruyama, except for ``linear_sde``, whose default ``"exact"`` samples
its closed-form Gaussian transitions (its own method, see ``System.own_methods``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import torch

from simsci.integrate import build_grid, lti_transition
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


class LinearForm(NamedTuple):
    """The linear SDE ``dz = (A z + b) dt + L dW`` with ``z(0) ~ N(m0, P0)``, as tensors."""

    A: torch.Tensor
    b: torch.Tensor
    L: torch.Tensor
    m0: torch.Tensor
    P0: torch.Tensor


@register
class LinearSDE(System):
    r"""A stochastic damped harmonic oscillator: the 2-D linear SDE

    .. math::
        dz = A z\,dt + L\,dW,\qquad
        A = \begin{pmatrix}0 & 1\\ -\omega^2 & -2\zeta\omega\end{pmatrix},\quad
        L = \mathrm{diag}(\sigma_{pos}, \sigma_{vel}),\qquad z = (x, v),

    a mass on a spring with viscous damping driven by white-noise forces (Uhlenbeck &
    Ornstein 1930, "On the theory of the Brownian motion", Phys. Rev. 36, 823-841,
    Sec. 4; Sarkka & Solin 2019, *Applied Stochastic Differential Equations*, Ch. 6).
    Initial states z(0) ~ N(m0, P0) with m0 = 0 and P0 = I (the identity): a swing of
    amplitude ~1 that relaxes to the stationary law.

    **Exact in distribution.** The transition over any step :math:`\Delta` is Gaussian,
    :math:`z(t+\Delta) \mid z(t) \sim \mathcal N(F z(t), Q)` with
    :math:`F = e^{A\Delta}`, :math:`Q = \int_0^\Delta e^{As} L L^\top e^{A^\top s} ds`,
    computed by one matrix exponential (Van Loan 1978, IEEE TAC 23;
    :func:`simsci.integrate.lti_transition`). The default method ``"exact"`` (this
    system's own, see ``own_methods``) samples these transitions between consecutive
    requested times, so data at any recording step, regular or irregular, has exactly the
    law of the SDE (no discretisation error, no sub-steps). Every integrator method
    (``"euler"``, ``"srk"``, ...) still works through :func:`simsci.integrate.sdeint`.
    :meth:`linear_form` gives A, b, L, m0, P0 so that a model can compute the exact
    Kalman evidence of a generated file (:meth:`observation_model` gives H, R).

    **Defaults.** omega = 2 pi / 2.5 (period 2.5 time units: the default episode,
    t_end = 10 at dt = 0.05, spans four periods of 50 steps each); zeta = 0.15
    (underdamped: amplitudes e-fold in 1 / (zeta omega) = 2.65 time units, about one
    period, so an episode shows the oscillation and the relaxation); sigma_vel = 0.5 (a
    random force; stationary stds ~0.41 in velocity and ~0.17 in position, against 1 at
    the start); sigma_pos = 0.05 (small, but non-zero so that Q is well conditioned
    even at short steps, where position noise would otherwise grow only as
    :math:`\Delta^3`).
    """

    name = "linear_sde"
    state_names = ("x", "v")
    param_names = ("omega", "zeta", "sigma_pos", "sigma_vel")
    default_params = {
        "omega": 2.0 * math.pi / 2.5,
        "zeta": 0.15,
        "sigma_pos": 0.05,
        "sigma_vel": 0.5,
    }
    param_ranges = {
        "omega": (1.5, 4.0),
        "zeta": (0.05, 0.3),
        "sigma_pos": (0.0, 0.1),
        "sigma_vel": (0.25, 1.0),
    }
    valid_ranges = {
        "omega": "(0, inf)",
        "zeta": "[0, inf)",
        "sigma_pos": "[0, inf)",
        "sigma_vel": "[0, inf)",
    }
    noise_type = "additive"
    default_dt = 0.05
    default_t_end = 10.0
    default_method = "exact"
    own_methods = ("exact",)

    def drift(self, t, x, p):
        omega, zeta = p[:, 0], p[:, 1]
        pos, vel = x.unbind(-1)
        return torch.stack((vel, -omega * omega * pos - 2.0 * zeta * omega * vel), dim=-1)

    def diffusion(self, t, x, p):
        return torch.diag_embed(p[:, 2:4].to(x.dtype).expand_as(x))

    def _sample_initial(self, n, generator, device):
        return torch.randn(n, 2, generator=generator, device=device, dtype=torch.float64)

    # ------------------------------------------------------------ linear form
    @staticmethod
    def _matrices(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A (n, 2, 2) and L (n, 2, 2) of parameter rows ``p`` (n, 4)."""
        omega, zeta = p[:, 0], p[:, 1]
        A = torch.zeros(p.shape[0], 2, 2, dtype=p.dtype, device=p.device)
        A[:, 0, 1] = 1.0
        A[:, 1, 0] = -omega * omega
        A[:, 1, 1] = -2.0 * zeta * omega
        return A, torch.diag_embed(p[:, 2:4])

    def linear_form(self, params=None, *, dtype=torch.float64, device=None) -> LinearForm:
        """``(A, b, L, m0, P0)`` of the SDE at ``params``: ``dz = (A z + b) dt + L dW``,
        ``z(0) ~ N(m0, P0)``, the arguments of
        :func:`simsci.models.sdevi.kalman_log_likelihood` (b = 0, m0 = 0, P0 = I).

        ``params``: None (``self.params``), a dict of scalars or a ``(4,)`` row give
        unbatched tensors A (2, 2), b (2,), L (2, 2), m0 (2,), P0 (2, 2); an ``(n, 4)``
        array/tensor (e.g. a file's ``/episodes/params``) or a dict of sequences gives a
        leading axis n on each. The prior (m0, P0) is that of the state at t = 0, the
        first time of :func:`simsci.systems.generate`'s grid (before any subsampling).
        """
        spec = 1 if params is None else params
        if isinstance(params, Mapping):
            batched = any(np.ndim(v) > 0 for v in params.values())
        else:
            batched = params is not None and getattr(params, "ndim", np.ndim(params)) == 2
        p = self.params_tensor(spec, device=device, dtype=dtype)
        A, L = self._matrices(p)
        n = p.shape[0]
        b = torch.zeros(n, 2, dtype=dtype, device=device)
        m0 = torch.zeros(n, 2, dtype=dtype, device=device)
        P0 = torch.eye(2, dtype=dtype, device=device).expand(n, 2, 2).clone()
        form = LinearForm(A, b, L, m0, P0)
        return form if batched else LinearForm(*(v[0] for v in form))

    @staticmethod
    def observation_model(meta: Mapping, *, dtype=torch.float64, device=None):
        """``(H, R)`` of a file that ``generate("linear_sde", ..., obs_noise=s)`` wrote:
        observations ``y = z + eps``, so H = I (2, 2), and ``eps ~ N(0, diag(R))`` with
        ``R_c = (s * std_c)^2``, where ``std_c = meta["obs_noise_std"][c]`` is the channel
        std that ``generate`` scaled the noise by (its module docstring).

        ``meta``: the file's ``meta`` dict (``simsci.data.open(path).meta``). A file
        without observation noise (``obs_noise = 0``) has no Gaussian likelihood (R = 0):
        that is a ValueError asking to generate with ``obs_noise > 0``.
        """
        scale = float(meta.get("obs_noise") or 0.0)
        std = meta.get("obs_noise_std")
        if scale <= 0 or std is None:
            raise ValueError(
                "the file has no observation noise (meta obs_noise = "
                f"{meta.get('obs_noise')!r}): y = z exactly, R = 0, and the Kalman "
                "likelihood needs R > 0; generate it with obs_noise > 0 (e.g. 0.1)"
            )
        R = (scale * torch.as_tensor(std, dtype=dtype, device=device)) ** 2
        if R.shape != (2,):
            raise ValueError(
                f"meta obs_noise_std must hold one std per channel (x, v), got {std!r}"
            )
        return torch.eye(2, dtype=dtype, device=device), R

    # ------------------------------------------------------ exact simulation
    def _simulate_own(self, method, x0, t, p, *, seed=None, **options):
        """``method="exact"``: sample the exact Gaussian transitions between the requested
        times (per-sample and ragged grids as for :func:`simsci.integrate.sdeint`).

        Transitions are computed in float64 and cast to ``x0``'s dtype. Noise: standard
        normals from a CPU generator seeded with ``seed`` (the global generator when None),
        one ``(B, T_max - 1, 2)`` draw, moved to ``x0``'s device: a seed gives the same path
        on every device. Q's square root is the symmetric one from its eigenvalues (clipped
        at 0), which stays defined where Q is singular (sigma_pos = sigma_vel = 0).
        """

        if options:
            raise ValueError(
                f"method 'exact' of {self.name!r} samples the exact transitions between the "
                f"requested times and takes no solver options; got {sorted(options)}. Drop "
                "them, or choose an integrator method (e.g. method='euler', dt=...)"
            )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
        B, dev = x0.shape[0], x0.device
        grid = build_grid(t, B, x0.dtype, dev)
        lens = torch.as_tensor(grid.lengths, device=dev)
        T = int(lens.max())
        N = grid.times.shape[0]
        pos = torch.arange(N, device=dev) - grid.first[grid.sample]
        times = grid.times.to(torch.float64)
        # pad each sample's grid with its last time: steps of 0 keep the state (F = I, Q = 0)
        tp = times[grid.first + lens - 1][:, None].repeat(1, T)
        tp[grid.sample, pos] = times
        A, L = self._matrices(p.to(torch.float64))
        b = torch.zeros(B, 1, 2, dtype=torch.float64, device=dev)
        F, c, Q = lti_transition(A[:, None], b, L[:, None], tp.diff(dim=1))
        evals, evecs = torch.linalg.eigh(Q)
        root = evecs @ torch.diag_embed(evals.clamp_min(0).sqrt()) @ evecs.transpose(-1, -2)
        gen = None if seed is None else torch.Generator().manual_seed(seed)
        eps = torch.randn(B, max(T - 1, 0), 2, generator=gen, dtype=torch.float64).to(dev)
        noise = (root @ eps[..., None])[..., 0] + c
        z = x0.to(torch.float64)
        path = [z]
        for k in range(T - 1):
            z = (F[:, k] @ z[..., None])[..., 0] + noise[:, k]
            path.append(z)
        states = torch.stack(path, dim=1).to(x0.dtype)  # (B, T, 2)
        return grid.assemble(states[grid.sample, pos], x0)
