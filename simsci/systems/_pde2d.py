r"""Two-dimensional periodic PDEs: incompressible Navier-Stokes and Gray-Scott.

Both build on :class:`simsci.systems._pde.PDESystem` (states ``(B, Nx, Ny, C)``
channels-last, axis 1 is ``x``, axis 2 is ``y``; grid ``x_i = i L_x / N_x``) and get its
``etdrk4`` (pseudo-spectral ETDRK4), ``imex`` (pseudo-spectral SBDF2) and ``rk4``
(fourth-order finite differences + RK4, with the stability limit checked before running)
solvers. Navier-Stokes adds ``cn``, the scheme of the FNO data generator (a stepper of
:mod:`simsci.systems._steppers` that it lists in ``extra_steppers``).

Design choices the task left open, and why:

- **Navier-Stokes nonlinear term.** The stream function is solved in Fourier space,
  :math:`\hat\psi = \hat w / |k|^2`; the four fields :math:`u = \psi_y`,
  :math:`v = -\psi_x`, :math:`w_x`, :math:`w_y` come back through *one* batched
  ``irfft2`` call, the product :math:`u w_x + v w_y` is formed on the grid and
  transformed once (five transforms per evaluation, as in the FNO generator) and then
  dealiased (2/3 rule). The mean vorticity is conserved exactly because
  :math:`\sum_j u\cdot\nabla w` vanishes by Parseval when the Nyquist wavenumber of the
  odd derivatives is dropped. The ``rk4`` baseline is a consistent finite-difference
  discretisation: the stream function inverts the *finite-difference* Laplacian (exact
  in Fourier space, a fast Poisson solver), velocities and the advection (in flux form
  :math:`\nabla\cdot(\mathbf u w)`, which conserves the mean) use the fourth-order
  stencils. Spectral multipliers and the forcing spectrum are cached per grid.
- **cn** is Li et al.'s generator (``data_generation/navier_stokes/ns_2d.py`` of the
  FNO repository, "Crank-Nicolson update"): Crank-Nicolson on the viscous term,
  forward Euler on advection and forcing, so first order in time overall (the test
  suite fits the order). One difference: FNO sets :math:`|k|^2 = 1` for the mean mode
  in both the Poisson solve and the diffusion, which slowly damps a non-zero mean
  vorticity; here the mean mode is not diffused (zero-mean data are unaffected).
- **Initial vorticity** follows the FNO generator (``random_fields.py``):
  :math:`\mathcal N(0, \sigma^2(-\Delta + 49 I)^{-2.5})` with
  :math:`\sigma = 7^{3/2}`. The paper writes the covariance as
  :math:`7^{3/2}(-\Delta + 49I)^{-2.5}`; the code (which made the published data)
  scales the *square root* of the covariance by :math:`7^{3/2}`, i.e. the covariance
  by :math:`7^3`. We follow the code (pointwise std about 0.22).
- **Gray-Scott linear part.** The diagonal linear operator carries the diffusion and
  the linear decay terms :math:`-F u` and :math:`-(F + k) v` (still diagonal per
  channel), so ETDRK4 treats them exactly and the homogeneous state
  :math:`(u, v) = (1, 0)` is a fixed point of every solver to rounding. The cubic
  reaction is dealiased with the 2/3 rule like every nonlinear term of the base.
"""

from __future__ import annotations

import math

import torch

from simsci.systems._pde import PDESystem, PeriodicGrid
from simsci.systems._registry import register

__all__ = ["NavierStokes2D", "GrayScott"]


@register
class NavierStokes2D(PDESystem):
    r"""Incompressible 2D Navier-Stokes in vorticity form on the periodic unit torus.

    .. math:: w_t + \mathbf u\cdot\nabla w = \nu\Delta w + f,\quad
              \mathbf u = (\psi_y, -\psi_x),\quad -\Delta\psi = w,

    with the FNO paper's forcing (Li et al. 2021, "Fourier neural operator for
    parametric partial differential equations", ICLR, section 5.3)
    :math:`f = A(\sin 2\pi(x + y) + \cos 2\pi(x + y))`, :math:`A` = ``forcing`` = 0.1,
    and viscosity ``nu`` (the paper's :math:`10^{-3}, 10^{-4}, 10^{-5}`; default
    :math:`10^{-3}`; valid :math:`\nu > 0`, :math:`A \ge 0`). Initial vorticity: the
    paper's Gaussian random field (alpha = 2.5, tau = 7, sigma = 7^1.5; see the module
    docstring). FNO data: 64 x 64 (generated at 256 x 256), t up to 50 (nu = 1e-3),
    frames every 1 time unit (``default_save_dt``).

    Channels ``("w",)``. Methods: ``etdrk4`` (default, step 1e-2), ``cn`` (the FNO
    generator's Crank-Nicolson/forward-Euler, order 1, its step 1e-4), ``imex``
    (SBDF2, order 2, step 1e-3), ``rk4`` (fourth-order finite differences + RK4, step
    1e-2 capped by the viscous limit and the CFL number of the initial velocity). At
    64 x 64 from FNO fields to t = 50, ETDRK4 with step 1e-2 differs from step 2.5e-3
    by a relative 7e-11 (nu = 1e-3) and 1e-6 (nu = 1e-4); at nu = 1e-5 the flow is
    chaotic and under-resolved at 64 x 64 (1% at t = 50), and ``cn`` with step 1e-3
    blows up there (FNO used 1e-4). The explicit advection of every method needs
    :math:`h\max|\mathbf u| k_{max} \lesssim 1`; a run that blows up raises
    :class:`simsci.errors.SolverError`.
    """

    name = "navier_stokes_2d"
    spatial_dims = 2
    channel_names = ("w",)
    domain = (1.0, 1.0)
    pde_order = 2
    param_names = ("nu", "forcing")
    default_params = {"nu": 1e-3, "forcing": 0.1}
    param_ranges = {"nu": (1e-4, 1e-3)}
    valid_ranges = {"nu": "(0, inf)", "forcing": "[0, inf)"}
    default_resolution = (64, 64)
    extra_steppers = ("cn",)  # the FNO generator's scheme (simsci.systems._steppers)
    default_method = "etdrk4"
    default_dt = 1e-2
    method_dt = {"cn": 1e-4, "imex": 1e-3, "rk4": 1e-2}
    default_save_dt = 1.0
    default_t_end = 50.0
    ic_params = {"alpha": 2.5, "tau": 7.0}

    # ------------------------------------------------------------- the PDE
    def linear_terms(self, p):
        nu = p[:, 0:1]
        return [(nu, (2, 0)), (nu, (0, 2))]

    def forcing_field(self, device=None, dtype=torch.float64) -> torch.Tensor:
        """The unit-amplitude forcing :math:`\\sin 2\\pi(x+y) + \\cos 2\\pi(x+y)` on the
        grid, ``(Nx, Ny)`` (scaled by the ``forcing`` parameter in the equation)."""
        c = self.coords()
        x = torch.as_tensor(c["x"], device=device, dtype=torch.float64)
        y = torch.as_tensor(c["y"], device=device, dtype=torch.float64)
        lx, ly = self.domain
        arg = 2.0 * math.pi * (x[:, None] / lx + y[None, :] / ly)
        return (torch.sin(arg) + torch.cos(arg)).to(dtype)

    def _operators(self, grid: PeriodicGrid):
        """Cached ``(mult, f_hat, inv_lap_fd, f)`` for ``grid``.

        ``mult`` ``(1, 4, *kshape)`` maps ``w_hat`` to the spectra of ``(u, v, w_x, w_y)``;
        ``f_hat`` ``(1, 1, *kshape)`` the forcing spectrum and ``f`` ``(Nx, Ny)`` the
        forcing on the grid; ``inv_lap_fd`` the inverse of minus the finite-difference
        Laplacian's symbol (zero on the mean mode).
        """
        key = ("ns-ops", grid.resolution, grid.domain, str(grid.device), grid.dtype)

        def build():
            dx = grid.symbol((1, 0))  # i k_x, Nyquist dropped
            dy = grid.symbol((0, 1))
            k2 = -(grid.symbol((2, 0)) + grid.symbol((0, 2))).real
            inv_k2 = torch.where(k2 > 0, 1.0 / torch.where(k2 > 0, k2, 1.0), 0.0)
            mult = torch.cat([dy * inv_k2, -dx * inv_k2, dx + 0 * dy, dy + 0 * dx], dim=1)
            f = self.forcing_field(grid.device, torch.float64)
            f_hat = torch.fft.rfft2(f)[None, None]
            lap_fd = -(grid.symbol((2, 0), "fd") + grid.symbol((0, 2), "fd")).real
            inv_fd = torch.where(lap_fd > 1e-12, 1.0 / torch.where(lap_fd > 1e-12, lap_fd, 1.0), 0)
            return (
                mult.to(grid.cdtype),
                f_hat.to(grid.cdtype),
                inv_fd.to(grid.dtype),
                f.to(grid.dtype),
            )

        return self._cached(key, build)

    def nonlinear_hat(self, t, v, p, grid):
        """:math:`A\\hat f - P\\,\\widehat{\\mathbf u\\cdot\\nabla w}` from ``v``
        ``(B, 1, *kshape)`` (``P`` the 2/3 dealiasing mask)."""
        mult, f_hat, _, _ = self._operators(grid)
        fields = grid.to_physical(v * mult)  # (B, 4, Nx, Ny): u, v, w_x, w_y
        adv = fields[:, 0:1] * fields[:, 2:3] + fields[:, 1:2] * fields[:, 3:4]
        amp = self._column(p, "forcing", v.ndim).to(grid.dtype)
        return amp * f_hat - grid.dealias * grid.to_spectral(adv)

    def _velocity_fd(self, w, grid):
        _, _, inv_fd, _ = self._operators(grid)
        psi = grid.to_physical(grid.to_spectral(w) * inv_fd)
        return grid.fd_apply(psi, (0, 1)), -grid.fd_apply(psi, (1, 0))

    def nonlinear_fd(self, t, u, p, grid):
        """Finite differences: :math:`fA - \\nabla\\cdot(\\mathbf u w)` (``rk4``)."""
        ux, uy = self._velocity_fd(u, grid)
        adv = grid.fd_apply(ux * u, (1, 0)) + grid.fd_apply(uy * u, (0, 1))
        amp = self._column(p, "forcing", u.ndim).to(u.dtype)
        f = self._operators(grid)[3]
        return amp * f - adv

    def wave_speed(self, u, p):
        grid = self.grid_for(u.device, u.dtype)
        mult, _, _, _ = self._operators(grid)
        vel = grid.to_physical(grid.to_spectral(u) * mult[:, :2])
        return vel.abs().amax(dim=(2, 3))  # (B, 2): max |u|, max |v|

    def velocity(self, w: torch.Tensor) -> torch.Tensor:
        """Velocity ``(psi_y, -psi_x)``, ``(B, Nx, Ny, 2)``, of vorticity ``(B, Nx, Ny, 1)``."""
        w = self.check_state(w, "w")
        grid = self.grid_for(w.device, w.dtype)
        mult, _, _, _ = self._operators(grid)
        vel = grid.to_physical(grid.to_spectral(w.movedim(-1, 1)) * mult[:, :2])
        return vel.movedim(1, -1)

    # ----------------------------------------------------------- diagnostics
    def taylor_green(self, n: int = 1, *, mode: int = 1, amplitude: float = 1.0,
                     device=None, dtype=torch.float64) -> torch.Tensor:  # fmt: skip
        r"""Taylor-Green vorticity :math:`w = 2k^2 A \sin(kx)\sin(ky)`, ``(n, Nx, Ny, 1)``.

        :math:`k = 2\pi\,` ``mode`` on the unit torus; stream function
        :math:`\psi = A\sin(kx)\sin(ky)`, so :math:`\mathbf u\cdot\nabla w = 0` and without
        forcing :math:`w(t) = w_0 e^{-2\nu k^2 t}` exactly.
        """
        c = self.coords()
        kx = 2.0 * math.pi * mode / self.domain[0]
        ky = 2.0 * math.pi * mode / self.domain[1]
        x = torch.as_tensor(c["x"], dtype=torch.float64)
        y = torch.as_tensor(c["y"], dtype=torch.float64)
        w = (kx * kx + ky * ky) * amplitude * torch.sin(kx * x)[:, None] * torch.sin(ky * y)
        return w[None, :, :, None].expand(n, -1, -1, -1).to(device=device, dtype=dtype).clone()


@register
class GrayScott(PDESystem):
    r"""Gray-Scott reaction-diffusion on a periodic square.

    .. math:: u_t = D_u\Delta u - u v^2 + F(1 - u),\qquad
              v_t = D_v\Delta v + u v^2 - (F + k) v.

    Pearson's setup (1993, "Complex patterns in a simple system", Science 261, 189-192):
    :math:`D_u = 2\cdot10^{-5}`, :math:`D_v = 10^{-5}`, box :math:`[0, 2.5)^2`
    periodic (Pearson used 256 x 256 points; default here 128 x 128, pass
    ``resolution=256`` for his grid), initial state :math:`u = 1, v = 0` except
    squares where :math:`u = 1/2, v = 1/4`, perturbed by 1% noise (multiplicative here, so
    :math:`v \ge 0` stays exactly 0 outside the squares). Pearson places one
    centred square of side 0.2 (8% of the box); here each sample gets 1-4 squares of
    that side at random positions (``ic="squares"``, seeded by the generator), so a data
    set has varied patterns. Defaults :math:`F = 0.04`, :math:`k = 0.06`, a commonly used
    point of Pearson's (F, k) plane where the patterns persist (v stays O(0.4) at
    t = 1000); ``param_ranges`` F 0.02-0.06, k 0.05-0.065 sample around it.

    Channels ``("u", "v")``. Methods: ``etdrk4`` (default, step 1), ``imex`` (SBDF2,
    step 0.5), ``rk4`` (fourth-order finite differences + RK4, step limited by the
    diffusion: :math:`h \lesssim 2.79\,\Delta x^2 / (10.7\,\max D)`, 4.6 on the
    default grid). ETDRK4 with step 1 matches step 0.25 to 1e-5 at t = 1000.
    Patterns develop over thousands of time units (Pearson ran 200 000); default
    t_end 2000, frames every 20.
    """

    name = "gray_scott"
    spatial_dims = 2
    channel_names = ("u", "v")
    domain = (2.5, 2.5)
    pde_order = 2
    param_names = ("F", "k", "Du", "Dv")
    default_params = {"F": 0.04, "k": 0.06, "Du": 2e-5, "Dv": 1e-5}
    param_ranges = {"F": (0.02, 0.06), "k": (0.05, 0.065)}
    valid_ranges = {"F": "[0, inf)", "k": "[0, inf)", "Du": "(0, inf)", "Dv": "(0, inf)"}
    default_resolution = (128, 128)
    default_dt = 1.0
    method_dt = {"imex": 0.5, "rk4": 1.0}
    default_save_dt = 20.0
    default_t_end = 2000.0
    ic_kinds = ("squares",)
    #: side of the seeded squares as a fraction of the box (Pearson: 0.2 / 2.5)
    square_fraction = 0.08
    max_squares = 4
    noise = 0.01

    def __init__(self, resolution=None, *, domain=None, ic: str = "squares", **params):
        super().__init__(resolution, domain=domain, ic=ic, **params)

    def linear_terms(self, p):
        F, k, Du, Dv = (p[:, j : j + 1] for j in range(4))
        diff = torch.cat([Du, Dv], dim=1)  # (R, 2): one coefficient per channel
        decay = -torch.cat([F, F + k], dim=1)
        return [(diff, (2, 0)), (diff, (0, 2)), (decay, (0, 0))]

    def nonlinear_terms(self, t, u, p):
        F = self._column(p, "F", u.ndim)
        uu, vv = u[:, 0:1], u[:, 1:2]
        r = uu * vv * vv
        return [((0, 0), torch.cat([F - r, r], dim=1))]

    def _sample_initial(self, n, generator, device):
        nx, ny = self.resolution
        sx = max(1, round(self.square_fraction * nx))
        sy = max(1, round(self.square_fraction * ny))
        kw = {"generator": generator, "device": device}
        count = torch.randint(1, self.max_squares + 1, (n,), **kw)
        ox = torch.randint(0, nx, (n, self.max_squares), **kw)
        oy = torch.randint(0, ny, (n, self.max_squares), **kw)
        ix = torch.arange(nx, device=device)
        iy = torch.arange(ny, device=device)
        # periodic distance from each square's corner; a square covers [o, o + s)
        inx = ((ix[None, None, :] - ox[:, :, None]) % nx) < sx  # (n, S, nx)
        iny = ((iy[None, None, :] - oy[:, :, None]) % ny) < sy
        used = torch.arange(self.max_squares, device=device)[None, :] < count[:, None]
        inside = (inx[:, :, :, None] & iny[:, :, None, :] & used[:, :, None, None]).any(dim=1)
        u = torch.where(inside, 0.5, 1.0).to(torch.float64)
        v = torch.where(inside, 0.25, 0.0).to(torch.float64)
        state = torch.stack([u, v], dim=-1)
        noise = torch.rand(state.shape, dtype=torch.float64, **kw)
        return state * (1.0 + self.noise * (2.0 * noise - 1.0))

    def total_mass_rate(self, state: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        r"""Rate of the mean mass, ``(B,)``, for states ``(B, Nx, Ny, 2)``:
        :math:`\frac{d}{dt}\langle u + v\rangle = F(1 - \langle u\rangle) - (F+k)\langle v\rangle`
        (diffusion and the reaction :math:`uv^2` cancel in the sum)."""
        mean = state.mean(dim=(1, 2))
        F, k = p[:, 0], p[:, 1]
        return F * (1.0 - mean[:, 0]) - (F + k) * mean[:, 1]
