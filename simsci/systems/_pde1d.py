r"""One-dimensional periodic PDE systems on :math:`[0, L)`.

Each system states its PDE as a linear part (``linear_terms``: coefficient, derivative
order) and a nonlinear flux (``nonlinear_terms``); :class:`PDESystem` turns that into
the ``etdrk4``, ``imex`` and ``rk4`` solvers. Nonlinear advection is written in
conservative form :math:`-\partial_x(u^2/2)`, so the spectral and finite-difference
discretisations conserve the mean exactly.

Initial conditions default to Gaussian random fields (:mod:`simsci.systems._grf`) with
the parameters listed in each docstring; ``ic="sines"`` gives PDEBench's sums of sines.
"""

from __future__ import annotations

import math

import torch

from simsci.systems._pde import PDESystem
from simsci.systems._registry import register


@register
class Advection(PDESystem):
    r"""Linear advection :math:`u_t + c\,u_x = 0` on :math:`[0, 1)`.

    Exact solution :math:`u(x, t) = u_0(x - ct)`. As PDEBench's 1D advection
    (Takamoto et al. 2022): domain [0, 1), t in [0, 2], speeds :math:`\beta` between
    0.1 and 7 (``param_ranges`` 0.1-4). Default ``c = 1``.
    Initial fields: GRF with alpha = 2, tau = 5, std = 0.5.
    """

    name = "advection"
    param_names = ("c",)
    default_params = {"c": 1.0}
    param_ranges = {"c": (0.1, 4.0)}
    valid_ranges = {"c": "(-inf, inf)"}
    domain = (1.0,)
    pde_order = 1
    default_resolution = (256,)
    default_dt = 1e-2  # ETDRK4 is exact in time for a linear PDE
    method_dt = {"imex": 2e-4}
    default_save_dt = 0.02
    default_t_end = 2.0
    ic_params = {"alpha": 2.0, "tau": 5.0, "std": 0.5}

    def linear_terms(self, p):
        return [(-p[:, 0:1], (1,))]


@register
class Heat(PDESystem):
    r"""Heat equation :math:`u_t = \nu\,u_{xx}` on :math:`[0, 1)`.

    Fourier mode :math:`n` decays as :math:`e^{-\nu (2\pi n)^2 t}` (the classic
    spectral-method test problem, e.g. Trefethen 2000, "Spectral methods in MATLAB",
    SIAM). Default
    :math:`\nu = 0.01` (valid :math:`\nu > 0`; sampling range 0.001-0.1). Initial
    fields: GRF with alpha = 2, tau = 5, std = 1.
    """

    name = "heat"
    param_names = ("nu",)
    default_params = {"nu": 0.01}
    param_ranges = {"nu": (1e-3, 0.1)}
    valid_ranges = {"nu": "(0, inf)"}
    domain = (1.0,)
    pde_order = 2
    default_resolution = (256,)
    default_dt = 1e-2
    method_dt = {"imex": 1e-3}
    default_save_dt = 0.01
    default_t_end = 1.0
    ic_params = {"alpha": 2.0, "tau": 5.0, "std": 1.0}

    def linear_terms(self, p):
        return [(p[:, 0:1], (2,))]


@register
class Burgers(PDESystem):
    r"""Viscous Burgers :math:`u_t + u u_x = \nu u_{xx}` on :math:`[0, 1)`.

    Literature setup: PDEBench (Takamoto et al. 2022) solves this equation on [0, 1)
    for viscosities between 0.001 and 4 (0.001, 0.01, 0.1, ...) with 1024 points up to
    t = 2 and sum-of-sines initial fields (``ic="sines"``); the FNO
    paper (Li et al. 2021) uses [0, 1), t = 1, :math:`\nu = 0.1`, 8192 points
    (subsampled for training) and initial fields
    :math:`\mathcal N(0, 625(-\Delta + 25 I)^{-2})` (here ``ic="grf"``: alpha = 2,
    tau = 5, sigma = 25). Defaults: :math:`\nu = 0.01`, N = 1024, t_end = 1,
    ETDRK4 step 1e-4 (the explicit nonlinear term needs roughly
    :math:`h \max|u| k_{max} \lesssim 2`). :math:`\nu = 10^{-3}` needs N >= 2048 for a
    resolved shock with the spectral solvers.
    """

    name = "burgers"
    param_names = ("nu",)
    default_params = {"nu": 0.01}
    param_ranges = {"nu": (1e-3, 0.1)}
    valid_ranges = {"nu": "(0, inf)"}
    domain = (1.0,)
    pde_order = 2
    default_resolution = (1024,)
    default_dt = 1e-4
    method_dt = {"imex": 5e-5}
    default_save_dt = 0.01
    default_t_end = 1.0
    ic_params = {"alpha": 2.0, "tau": 5.0, "sigma": 25.0}

    def linear_terms(self, p):
        return [(p[:, 0:1], (2,))]

    def nonlinear_terms(self, t, u, p):
        return [((1,), torch.square(u).mul_(-0.5))]

    def wave_speed(self, u, p):
        return u.abs().amax(dim=(1, 2)).unsqueeze(1)


@register
class KdV(PDESystem):
    r"""Korteweg-de Vries :math:`u_t + \alpha u u_x + \beta u_{xxx} = 0` on :math:`[0, 50)`.

    The standard form has :math:`\alpha = 6`, :math:`\beta = 1` (Drazin & Johnson 1989,
    "Solitons: an introduction"), with the soliton
    :math:`u = 2k^2\,\mathrm{sech}^2(k(x - 4k^2 t - x_0))` (amplitude :math:`2k^2`,
    speed :math:`4k^2`; for general coefficients amplitude :math:`12\beta k^2/\alpha`,
    speed :math:`4\beta k^2`). Zabusky & Kruskal (1965) used :math:`\alpha = 1`,
    :math:`\beta = 0.022^2` on [0, 2). Initial fields: GRF with alpha = 3, tau = 1,
    std = 0.5 (waves of length ~2pi that steepen into soliton trains).
    """

    name = "kdv"
    param_names = ("alpha", "beta")
    default_params = {"alpha": 6.0, "beta": 1.0}
    param_ranges = {"alpha": (3.0, 6.0), "beta": (0.5, 1.5)}
    valid_ranges = {"alpha": "(-inf, inf)", "beta": "(0, inf)"}
    domain = (50.0,)
    pde_order = 3
    default_resolution = (256,)
    default_dt = 1e-3
    method_dt = {"imex": 2e-4}
    default_save_dt = 0.05
    default_t_end = 5.0
    ic_params = {"alpha": 3.0, "tau": 1.0, "std": 0.5}

    def linear_terms(self, p):
        return [(-p[:, 1:2], (3,))]

    def nonlinear_terms(self, t, u, p):
        alpha = self._column(p, "alpha", u.ndim)
        return [((1,), torch.square(u).mul_(-0.5 * alpha))]

    def wave_speed(self, u, p):
        alpha = p[:, 0].abs()
        return (alpha * u.abs().amax(dim=(1, 2))).unsqueeze(1)


@register
class KuramotoSivashinsky(PDESystem):
    r"""Kuramoto-Sivashinsky :math:`u_t + u u_x + u_{xx} + \nu u_{xxxx} = 0` on
    :math:`[0, 32\pi)`.

    As Kassam & Trefethen (2005): domain 32 pi, ETDRK4 with h = 1/4, t up to 150 (their
    initial condition :math:`\cos(x/16)(1 + \sin(x/16))` is :meth:`kassam_trefethen_ic`).
    :math:`\nu = 1` is the standard equation; other values rescale the unstable band
    :math:`0 < k < 1/\sqrt\nu`. N = 256 (K&T used 128). Random initial fields: GRF with
    alpha = 2, tau = 1, std = 1.
    """

    name = "kuramoto_sivashinsky"
    param_names = ("nu",)
    default_params = {"nu": 1.0}
    param_ranges = {"nu": (0.5, 1.5)}
    valid_ranges = {"nu": "(0, inf)"}
    domain = (32.0 * math.pi,)
    pde_order = 4
    default_resolution = (256,)
    default_dt = 0.25
    method_dt = {"imex": 0.05}
    default_save_dt = 1.0
    default_t_end = 150.0
    ic_params = {"alpha": 2.0, "tau": 1.0, "std": 1.0}

    def linear_terms(self, p):
        return [(-1.0, (2,)), (-p[:, 0:1], (4,))]

    def nonlinear_terms(self, t, u, p):
        return [((1,), torch.square(u).mul_(-0.5))]

    def wave_speed(self, u, p):
        return u.abs().amax(dim=(1, 2)).unsqueeze(1)

    def kassam_trefethen_ic(self, n: int = 1, *, device=None, dtype=torch.float64):
        """``(n, N, 1)`` copies of :math:`\\cos(x/16)(1 + \\sin(x/16))` (for L = 32 pi)."""
        x = torch.as_tensor(self.coords()["x"], device=device, dtype=dtype)
        u = torch.cos(x / 16) * (1 + torch.sin(x / 16))
        return u.reshape(1, -1, 1).expand(n, -1, -1).clone()


@register
class AllenCahn(PDESystem):
    r"""Allen-Cahn :math:`u_t = \epsilon u_{xx} + u - u^3` on :math:`[0, 2)`, periodic.

    The periodic counterpart of Kassam & Trefethen's (2005) example
    (:math:`\epsilon = 0.01` on [-1, 1], there with Dirichlet ends): fronts of width
    :math:`\sim\sqrt{2\epsilon}` between the stable states :math:`\pm 1` coarsen slowly
    (metastability). The reaction :math:`u - u^3` is the (pointwise) nonlinear term.
    Initial fields: GRF with alpha = 2, tau = 10, std = 0.5.
    """

    name = "allen_cahn"
    param_names = ("eps",)
    default_params = {"eps": 0.01}
    param_ranges = {"eps": (1e-3, 0.05)}
    valid_ranges = {"eps": "(0, inf)"}
    domain = (2.0,)
    pde_order = 2
    default_resolution = (256,)
    default_dt = 1e-2
    method_dt = {"imex": 1e-2}
    default_save_dt = 0.1
    default_t_end = 10.0
    ic_params = {"alpha": 2.0, "tau": 10.0, "std": 0.5}

    def linear_terms(self, p):
        return [(p[:, 0:1], (2,))]

    def nonlinear_terms(self, t, u, p):
        return [((0,), u - u * u * u)]
