r"""The :class:`PDESystem` base: batched periodic PDE solvers on uniform grids.

A PDE system is written as

.. math:: \partial_t u = \mathcal L u + \mathcal N(t, u) + f,

with a *linear* part :math:`\mathcal L = \sum_j a_j(p)\, \partial^{\alpha_j}` (constant
coefficients per sample and channel, e.g. :math:`\nu\partial_x^2`) and a *nonlinear*
part in flux form :math:`\mathcal N = \sum_j \partial^{\beta_j} F_j(t, u)` (e.g. Burgers
:math:`\partial_x(-u^2/2)`, Allen-Cahn :math:`u - u^3` with :math:`\beta = 0`), and an
optional time-constant source :math:`f(x)` (``simulate(..., forcing=f)``; zero by
default). A subclass describes the PDE once (:meth:`PDESystem.linear_terms`,
:meth:`PDESystem.nonlinear_terms`) and gets every time stepper of the registry
:data:`simsci.systems._steppers.PDE_STEPPERS` (its ``methods``):

``etdrk4``
    pseudo-spectral in space (real FFT, 2/3-rule dealiasing of :math:`\mathcal N`),
    exponential time differencing RK4 in time (Cox & Matthews 2002), the coefficients
    by Kassam & Trefethen's (2005) contour integral. Fourth order, stiff linear part
    exact.
``imex``
    the same spectral discretisation with SBDF2 (Ascher, Ruuth & Wetton 1995), started
    with one IMEX-Euler step. Second order: the lower-order spectral baseline.
``rk4``
    explicit fourth-order centred finite differences in space (``torch.roll``
    stencils) and classical RK4 in time, inside its linear stability limit
    (:meth:`PDESystem.stable_dt`, checked by :meth:`PDESystem.simulate` before running).

Each stepper declares its order, whether it needs the spectral grid, its stability
rule and whether it takes a source field (:mod:`simsci.systems._steppers`, with the
sources); this base class validates, plans the steps, caches the coefficients and runs
the loop. A system can offer a non-generic stepper by listing it in
``extra_steppers`` (``navier_stokes_2d``: ``cn``, the FNO generator's scheme).

Design choices the task left open, and why:

- **Layout.** States are channels-last ``(B, *grid, C)`` at the boundary (the
  trajectory format's layout); the solvers work channels-first ``(B, C, *grid)`` so
  the FFT acts on the trailing axes. Spectral solvers carry the state in Fourier space
  between output times and transform back only to record a frame.
- **Hitting output times.** Each output interval :math:`\Delta_i = t_{i+1} - t_i` is
  split into :math:`n_i = \lceil \Delta_i / dt \rceil` equal steps of
  :math:`h_i = \Delta_i / n_i \le dt` (``dt`` is adjusted *down*), so every output time
  is reached exactly. Equal intervals share one :math:`h` (one set of coefficients);
  SBDF2 restarts with an IMEX-Euler step whenever :math:`h` changes.
- **Per-sample parameters.** Linear coefficients are batched over the distinct
  parameter rows of the batch (one row when all samples share parameters, the common
  case, so the coefficient arrays broadcast). They are computed once per
  ``(method, h, parameter rows, resolution, domain, device, dtype)`` and cached on
  the instance (the last 16 entries). Coefficients are computed from detached
  parameters: gradients flow with respect to ``u0`` (and parameters used inside the
  nonlinear term), not through the linear coefficients.
- **Dealiasing** zeroes the Fourier modes with :math:`3|n| \ge N` of the nonlinear term
  (Orszag's 2/3 rule: exact for quadratic terms; cubic terms such as Allen-Cahn's are
  only partially dealiased). Odd derivatives drop the Nyquist mode, whose derivative
  is not representable in a real signal.
- **Contour points.** The full circle (``M = 64``) instead of Kassam & Trefethen's
  upper half with the real part: the linear symbols of advection and KdV are complex,
  where the half-circle symmetry does not hold. For real symbols the two coincide.
- **Blow-up detection.** The state is checked for inf/NaN every ``check_every``
  internal steps (default 100) and at every output time; a
  :class:`simsci.errors.SolverError` names the trajectories (batch indices) and the
  time of detection. One host synchronisation per check keeps GPU runs asynchronous
  in between.
- **Forcing.** ``simulate(..., forcing=f)`` adds a time-constant source field ``f``
  ``(B, *resolution, C)`` (or ``(1, ...)`` shared by the batch): the spectral solvers
  add its full, undealiased spectrum (it is data, not a product of the solution) to
  every evaluation of :math:`\hat{\mathcal N}`, ``rk4`` adds ``f`` to the right-hand
  side. ETDRK4 is then exact for a linear PDE (:math:`f_1 + 4 f_2 + f_3 =
  (e^{hL} - 1)/L`), SBDF2 and RK4 keep their orders. It is what an environment's
  actuators hold constant over one control interval; ``forcing=None`` runs the
  unforced code unchanged.
- **Domain and initial conditions** are constructor options beside ``resolution``
  (``get("kuramoto_sivashinsky", domain=22.0)``, ``ic="sines"``), since they fix the
  grid of a batch like the resolution does. Initial fields come from
  :mod:`simsci.systems._grf` (``ic_params`` per system).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
import torch

from simsci.errors import SolverError, unknown_name
from simsci.systems._base import System, _check_count
from simsci.systems._grf import gaussian_random_field, sum_of_sines
from simsci.systems._steppers import (
    PDE_STEPPERS,
    PDEStepper,
    etdrk4_coefficients,
    get_stepper,
    returns_fresh,
    rk4_stable_radius,
)

__all__ = ["PDESystem", "PeriodicGrid", "etdrk4_coefficients", "fd_weights", "rk4_stable_radius"]

AXIS_NAMES = ("x", "y", "z")
_CACHE_SIZE = 16


# --------------------------------------------------------------------- stencils
@functools.cache
def fd_weights(order: int, accuracy: int = 4) -> tuple[tuple[int, float], ...]:
    """Centred finite-difference weights for ``d^order/dx^order`` on a unit grid.

    Returns ``((offset, weight), ...)``: :math:`f^{(m)}(x_i) \\approx h^{-m} \\sum_j
    w_j f(x_{i+j})` with error :math:`O(h^{accuracy})` (accuracy even). Solved from the
    Taylor conditions on the ``2 r + 1`` centred points, ``r = (order + 1) // 2 +
    accuracy // 2 - 1``.
    """
    if order < 0 or accuracy < 2 or accuracy % 2:
        raise ValueError(f"need order >= 0 and an even accuracy >= 2, got {order}, {accuracy}")
    if order == 0:
        return ((0, 1.0),)
    r = (order + 1) // 2 + accuracy // 2 - 1
    offsets = np.arange(-r, r + 1)
    A = np.array([offsets.astype(np.float64) ** q / math.factorial(q) for q in range(2 * r + 1)])
    rhs = np.zeros(2 * r + 1)
    rhs[order] = 1.0
    w = np.linalg.solve(A, rhs)
    return tuple((int(o), float(c)) for o, c in zip(offsets, w) if abs(c) > 1e-13)


# -------------------------------------------------------------------------- grid
class PeriodicGrid:
    """A uniform periodic grid with Fourier and finite-difference operators.

    Shared by all :class:`PDESystem` subclasses (1D and 2D). Fields are channels-first
    ``(B, C, *resolution)``; spectra ``(B, C, *kshape)`` with ``kshape =
    (*resolution[:-1], resolution[-1] // 2 + 1)`` (``torch.fft.rfftn`` over the
    trailing ``ndim`` axes). ``k[a]`` is the angular wavenumber :math:`2\\pi n / L_a`
    along axis ``a`` in float64, shaped to broadcast against a spectrum;
    ``dealias`` the 2/3-rule mask (``3|n| < N`` on every axis), same broadcasting.
    """

    def __init__(self, resolution, domain, device=None, dtype=torch.float64):
        self.resolution = tuple(int(n) for n in resolution)
        self.domain = tuple(float(d) for d in domain)
        self.ndim = len(self.resolution)
        self.dx = tuple(L / N for L, N in zip(self.domain, self.resolution))
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype = dtype
        self.cdtype = torch.complex64 if dtype == torch.float32 else torch.complex128
        self.dims = tuple(range(-self.ndim, 0))
        self.kshape = (*self.resolution[:-1], self.resolution[-1] // 2 + 1)
        self.n: list[torch.Tensor] = []
        self.k: list[torch.Tensor] = []
        mask = None
        for axis, (N, L) in enumerate(zip(self.resolution, self.domain)):
            if axis == self.ndim - 1:
                n = torch.fft.rfftfreq(N, d=1.0 / N, dtype=torch.float64, device=self.device)
            else:
                n = torch.fft.fftfreq(N, d=1.0 / N, dtype=torch.float64, device=self.device)
            shape = [1, 1] + [1] * self.ndim
            shape[2 + axis] = -1
            n = n.reshape(shape)
            self.n.append(n)
            self.k.append(2.0 * math.pi * n / L)
            keep = 3.0 * n.abs() < N
            mask = keep if mask is None else mask & keep
        self.dealias = mask.to(dtype)
        self._symbols: dict = {}

    def coords(self) -> dict[str, np.ndarray]:
        """Grid coordinates ``x_j = j L / N`` per axis (float64 numpy)."""
        return {
            AXIS_NAMES[a]: np.arange(N, dtype=np.float64) * (L / N)
            for a, (N, L) in enumerate(zip(self.resolution, self.domain))
        }

    # ----------------------------------------------------------- transforms
    def to_spectral(self, u: torch.Tensor) -> torch.Tensor:
        """``rfftn`` over the grid axes: ``(B, C, *resolution)`` -> ``(B, C, *kshape)``."""
        return torch.fft.rfftn(u, dim=self.dims)

    def to_physical(self, v: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`to_spectral`: ``(B, C, *kshape)`` -> ``(B, C, *resolution)``."""
        return torch.fft.irfftn(v, s=self.resolution, dim=self.dims)

    # -------------------------------------------------------------- symbols
    def _axis_symbol(self, axis: int, order: int, kind: str) -> torch.Tensor:
        k = self.k[axis]
        if kind == "spectral":
            if order % 2:
                # the Nyquist mode has no real odd derivative: drop it
                N = self.resolution[axis]
                k = torch.where(2 * self.n[axis].abs() == N, torch.zeros_like(k), k)
            return (1j * k) ** order
        if kind == "fd":
            dx = self.dx[axis]
            sym = torch.zeros_like(k, dtype=torch.complex128)
            for offset, w in fd_weights(order):
                sym = sym + w * torch.exp(1j * k * (offset * dx))
            return sym / dx**order
        raise ValueError(f"symbol kind must be 'spectral' or 'fd', got {kind!r}")

    def symbol(self, alpha: Sequence[int], kind: str = "spectral") -> torch.Tensor:
        """Fourier symbol of :math:`\\partial^\\alpha` (complex128, broadcastable).

        ``kind="spectral"``: :math:`\\prod_a (i k_a)^{\\alpha_a}`; ``kind="fd"``: the
        symbol of the fourth-order centred stencils that :meth:`fd_apply` uses.
        """
        alpha = self._check_alpha(alpha)
        out = torch.ones((1,) * (2 + self.ndim), dtype=torch.complex128, device=self.device)
        for axis, order in enumerate(alpha):
            if order:
                out = out * self._axis_symbol(axis, order, kind)
        return out

    def _check_alpha(self, alpha) -> tuple[int, ...]:
        alpha = tuple(int(a) for a in alpha)
        if len(alpha) != self.ndim or any(a < 0 for a in alpha):
            raise ValueError(
                f"a derivative multi-index needs {self.ndim} non-negative orders, got {alpha}"
            )
        return alpha

    def deriv_hat(self, v: torch.Tensor, alpha: Sequence[int]) -> torch.Tensor:
        """Spectral :math:`\\partial^\\alpha` of a spectrum ``v`` (same shape)."""
        return v * self.cached_symbol(alpha)

    def cached_symbol(self, alpha: Sequence[int], dealias: bool = False) -> torch.Tensor:
        """:meth:`symbol` (spectral) in the working complex dtype, optionally times the
        2/3-rule mask; computed once per grid."""
        key = (tuple(alpha), dealias)
        sym = self._symbols.get(key)
        if sym is None:
            sym = self.symbol(alpha)
            if dealias:
                sym = sym * self.dealias.to(torch.float64)
            sym = sym.to(self.cdtype)
            self._symbols[key] = sym
        return sym

    # -------------------------------------------------- finite differences
    def fd_apply(self, u: torch.Tensor, alpha: Sequence[int]) -> torch.Tensor:
        """Fourth-order centred finite-difference :math:`\\partial^\\alpha u` (periodic)."""
        alpha = self._check_alpha(alpha)
        for axis, order in enumerate(alpha):
            if not order:
                continue
            dim = u.ndim - self.ndim + axis
            out = None
            for offset, w in fd_weights(order):
                term = u if offset == 0 else torch.roll(u, shifts=-offset, dims=dim)
                out = term * w if out is None else out.add_(term, alpha=w)
            u = out / self.dx[axis] ** order
        return u


# ------------------------------------------------------------------------ options
@dataclasses.dataclass(frozen=True)
class SimulateOptions:
    """Extra keywords of :meth:`PDESystem.simulate`.

    ``check_stability``: refuse an explicit step beyond the stability limit (default);
    False runs anyway (the blow-up detection still stops a diverging run).
    ``check_every``: internal steps between inf/NaN checks.
    """

    check_stability: bool = True
    check_every: int = 100

    def __post_init__(self):
        if not isinstance(self.check_stability, bool):
            raise TypeError(f"check_stability must be a bool, got {self.check_stability!r}")
        if (
            isinstance(self.check_every, bool)
            or not isinstance(self.check_every, (int, np.integer))
            or self.check_every < 1
        ):
            raise ValueError(f"check_every must be a positive integer, got {self.check_every!r}")


@dataclasses.dataclass(frozen=True)
class _SolveOptions(SimulateOptions):
    """:class:`SimulateOptions` plus the validated forcing, channels-first ``(B|1, C,
    *resolution)``, handed to the runners (subclasses that override a runner pass
    ``opts`` through unchanged, so the forcing reaches the base solvers)."""

    forcing: torch.Tensor | None = dataclasses.field(default=None, compare=False, repr=False)


# ---------------------------------------------------------------------- the base
class _OfferedSteppers:
    """``PDESystem.methods``: name -> description of the steppers a system offers, read
    from :data:`PDE_STEPPERS` at each access (a stepper registered later is offered too):
    every ``generic`` one and those the class lists in ``extra_steppers``, in registry
    order. A subclass that solves by other means (Darcy's ``cg``) sets a plain dict."""

    def __get__(self, obj, owner) -> dict[str, str]:
        extra = owner.extra_steppers
        return {
            name: stepper.description
            for name, stepper in PDE_STEPPERS.items()
            if stepper.generic or name in extra
        }


class PDESystem(System):
    """Base class of the periodic PDE systems (``kind = "field"``).

    Subclasses set the class attributes below and implement :meth:`linear_terms` and
    :meth:`nonlinear_terms` (or override :meth:`nonlinear_hat` / :meth:`nonlinear_fd`
    for terms that are not pointwise fluxes, such as the velocity of a vorticity
    equation). Shapes: states ``(B, *resolution, C)`` channels-last, parameters
    ``(B, P)``.

    Class attributes: ``spatial_dims`` (1 or 2), ``channel_names``, ``domain`` (box
    lengths per axis, overridable per instance), ``periodic``, ``pde_order`` (highest
    spatial derivative), ``default_resolution``, ``methods`` (name -> description, the
    registered time steppers it offers; read-only), ``extra_steppers`` (non-generic
    steppers it offers too), ``default_method``, ``default_dt`` (internal step of
    ``default_method``), ``method_dt`` (internal steps of the other methods; a stepper
    with a step limit, rk4, also never exceeds 0.9 of it), ``default_save_dt``
    (recording interval for :func:`simsci.systems.generate`), ``default_t_end``,
    ``ic_params`` (keywords of :func:`simsci.systems._grf.gaussian_random_field` for
    ``ic="grf"``), ``sines_params`` (keywords of :func:`simsci.systems._grf.sum_of_sines`).
    """

    kind: ClassVar[str] = "field"
    spatial_dims: ClassVar[int] = 1
    channel_names: ClassVar[tuple[str, ...]] = ("u",)
    domain: tuple[float, ...] = (1.0,)
    periodic: ClassVar[bool] = True
    pde_order: ClassVar[int] = 2
    default_resolution: ClassVar[tuple[int, ...]] = (256,)
    methods: ClassVar[dict[str, str]] = _OfferedSteppers()  # type: ignore[assignment]
    extra_steppers: ClassVar[tuple[str, ...]] = ()
    default_method: ClassVar[str] = "etdrk4"
    default_dt: ClassVar[float] = 1e-3
    method_dt: ClassVar[dict[str, float]] = {}
    default_save_dt: ClassVar[float] = 0.01
    default_t_end: ClassVar[float] = 1.0
    options: ClassVar[tuple[str, ...]] = ("resolution", "domain", "ic")
    ic_kinds: ClassVar[tuple[str, ...]] = ("grf", "sines")
    ic_params: ClassVar[dict] = {"alpha": 2.0, "tau": 3.0}
    sines_params: ClassVar[dict] = {"waves": 2, "n_max": 8, "amplitude": 1.0}

    def __init__(self, resolution=None, *, domain=None, ic: str = "grf", **params):
        super().__init__(**params)
        d = self.spatial_dims
        self.resolution = self._check_resolution(
            self.default_resolution if resolution is None else resolution
        )
        self.domain = self._check_domain(type(self).domain if domain is None else domain)
        if ic not in self.ic_kinds:
            raise unknown_name(f"initial-condition kind of {self.name!r}", ic, self.ic_kinds)
        self.ic = ic
        if len(self.resolution) != d or len(self.domain) != d:
            raise ValueError(f"{self.name}: resolution and domain need {d} entries")
        self._cache: dict = {}
        self._pools: dict = {}
        self._grids: dict = {}

    # ------------------------------------------------------------ validation
    def _check_resolution(self, value) -> tuple[int, ...]:
        d = self.spatial_dims
        items = (value,) * d if isinstance(value, (int, np.integer)) else value
        try:
            items = tuple(items)
        except TypeError:
            items = None
        ok = (
            items is not None
            and len(items) == d
            and all(
                isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 8
                for n in items
            )
        )
        if not ok:
            raise ValueError(
                f"resolution of {self.name!r} must be an integer >= 8 or {d} such integers "
                f"(grid points per axis), got {value!r}"
            )
        return tuple(int(n) for n in items)

    def _check_domain(self, value) -> tuple[float, ...]:
        d = self.spatial_dims
        items = (value,) * d if isinstance(value, (int, float, np.number)) else value
        try:
            items = tuple(float(x) for x in items)
        except (TypeError, ValueError):
            items = None
        if items is None or len(items) != d or not all(math.isfinite(x) and x > 0 for x in items):
            raise ValueError(
                f"domain of {self.name!r} must be a positive length or {d} such lengths "
                f"(periodic box [0, L)), got {value!r}"
            )
        return items

    def _check_method(self, method: str | None) -> str:
        method = self.default_method if method is None else method
        if method not in self.methods:
            raise unknown_name(f"method for {self.name!r}", method, self.methods)
        return method

    # ----------------------------------------------------------- description
    @property
    def state_names(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(self.channel_names)

    @property
    def state_shape(self) -> tuple[int, ...]:
        return (*self.resolution, len(self.channel_names))

    def grid_for(self, device=None, dtype=torch.float64) -> PeriodicGrid:
        """The (cached) :class:`PeriodicGrid` of this instance on ``device``/``dtype``."""
        device = torch.device(device) if device is not None else torch.device("cpu")
        key = (str(device), dtype)
        grid = self._grids.get(key)
        if grid is None:
            grid = PeriodicGrid(self.resolution, self.domain, device, dtype)
            self._grids[key] = grid
        return grid

    def coords(self) -> dict[str, np.ndarray]:
        """Grid coordinates ``{"x": (Nx,), "y": (Ny,)}``, ``x_j = j L / N`` (periodic)."""
        return {
            AXIS_NAMES[a]: np.arange(N, dtype=np.float64) * (L / N)
            for a, (N, L) in enumerate(zip(self.resolution, self.domain))
        }

    def static(self) -> dict[str, np.ndarray]:
        """The grid coordinates (written to the format's ``/static``)."""
        return self.coords()

    def config(self) -> dict:
        cfg = super().config()
        cfg["options"] = {
            "resolution": list(self.resolution),
            "domain": list(self.domain),
            "ic": self.ic,
        }
        return cfg

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v:g}" for k, v in self.params.items())
        return (
            f"{type(self).__name__}({self.name!r}, resolution={self.resolution}, "
            f"domain={tuple(round(x, 6) for x in self.domain)}, {params})"
        )

    # ------------------------------------------------------------ the PDE
    def linear_terms(self, p: torch.Tensor) -> list[tuple[torch.Tensor, tuple[int, ...]]]:
        """The linear part :math:`\\sum_j a_j \\partial^{\\alpha_j}` as ``[(a_j, alpha_j)]``.

        ``p`` ``(R, P)`` float64 parameter rows; each ``a_j`` broadcastable to ``(R, C)``
        (one coefficient per row and channel), ``alpha_j`` one derivative order per axis.
        """
        return []

    def nonlinear_terms(
        self, t, u: torch.Tensor, p: torch.Tensor
    ) -> list[tuple[tuple[int, ...], torch.Tensor]]:
        """The nonlinear part :math:`\\sum_j \\partial^{\\beta_j} F_j` as ``[(beta_j, F_j)]``.

        ``u`` channels-first ``(B, C, *resolution)``, ``p`` ``(B, P)`` in ``u``'s dtype;
        each ``F_j`` broadcastable to ``u``'s shape.
        """
        return []

    @returns_fresh
    def nonlinear_hat(self, t, v: torch.Tensor, p: torch.Tensor, grid: PeriodicGrid):
        """Dealiased spectrum of :math:`\\mathcal N` from the state's spectrum ``v``
        (always a new tensor, so the steppers may add a source into it in place)."""
        terms = self.nonlinear_terms(t, grid.to_physical(v), p)
        if not terms:
            return torch.zeros_like(v)
        out = None
        for beta, F in terms:
            # one multiplication applies the derivative and the 2/3 rule together, in
            # place on the transform's new output (its backward keeps no copy of it)
            Fh = grid.to_spectral(F).mul_(grid.cached_symbol(beta, dealias=True))
            out = Fh if out is None else out.add_(Fh)
        return out

    def nonlinear_fd(self, t, u: torch.Tensor, p: torch.Tensor, grid: PeriodicGrid):
        """:math:`\\mathcal N` with the finite-difference stencils (the ``rk4`` method)."""
        out = torch.zeros_like(u)
        for beta, F in self.nonlinear_terms(t, u, p):
            out = out + (grid.fd_apply(F, beta) if any(beta) else F)
        return out

    def wave_speed(self, u: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """``(B, spatial_dims)`` largest advection speed per axis (for the rk4 CFL limit).

        ``u`` channels-first. Zero by default (no nonlinear advection).
        """
        return torch.zeros(u.shape[0], self.spatial_dims, dtype=u.dtype, device=u.device)

    def _column(self, p: torch.Tensor, name: str, ndim: int | None = None) -> torch.Tensor:
        """Column ``name`` of ``p`` shaped ``(B, 1)`` or, with ``ndim``, ``(B, 1, ..., 1)``."""
        j = self.param_names.index(name)
        col = p[:, j]
        return col.reshape(-1, *([1] * ((ndim or 2) - 1)))

    # ------------------------------------------------------------ operators
    def linear_symbol(self, p: torch.Tensor, grid: PeriodicGrid, kind: str = "spectral"):
        """Symbol of :math:`\\mathcal L`: ``(R, C, *kshape)`` complex128 for rows ``p``."""
        C = len(self.channel_names)
        p = p.to(device=grid.device, dtype=torch.float64)
        out = torch.zeros((p.shape[0], C, *grid.kshape), dtype=torch.complex128, device=grid.device)
        for coef, alpha in self.linear_terms(p):
            coef = torch.as_tensor(coef, dtype=torch.float64, device=grid.device)
            coef = coef.reshape(*coef.shape, *([1] * grid.ndim)) if coef.ndim else coef
            out = out + coef * grid.symbol(alpha, kind)
        return out

    def drift(self, t, u: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """Pseudo-spectral semi-discrete right-hand side :math:`\\mathcal L u + \\mathcal N`.

        ``u`` ``(B, *resolution, C)`` channels-last, ``p`` ``(B, P)``; returns ``u``'s
        shape. For :func:`simsci.odeint` (via :meth:`vector_field`) and environments.
        """
        grid = self.grid_for(u.device, u.dtype)
        w = u.movedim(-1, 1)
        v = grid.to_spectral(w)
        L = self._spectral_linear(p, grid)
        rhs = L * v + self.nonlinear_hat(t, v, p.to(u.dtype), grid)
        return grid.to_physical(rhs).movedim(1, -1)

    # -------------------------------------------------------------- caching
    def _rows(self, p: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Distinct parameter rows (float64) and each sample's row index."""
        rows = p.detach().to("cpu", torch.float64).numpy()
        if rows.shape[1] == 0 or (rows == rows[:1]).all():
            return rows[:1], np.zeros(rows.shape[0], dtype=np.int64)
        uniq, inverse = np.unique(rows, axis=0, return_inverse=True)
        return uniq, inverse.reshape(-1)

    def _cached(self, key, build):
        value = self._cache.get(key)
        if value is None:
            value = build()
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = value
        return value

    def _row_pool(self, key) -> _RowPool:
        """The per-row coefficient pool of ``key`` (kept apart from the whole-set cache,
        whose one-row entries would otherwise push it out; the last few are kept)."""
        pools = self._pools
        pool = pools.pop(key, None)
        if pool is None:
            pool = _RowPool()
            if len(pools) >= _POOLS:
                pools.pop(next(iter(pools)))
        pools[key] = pool  # most recently used last
        return pool

    def _gather(self, coeffs, uniq, inverse, grid):
        if uniq.shape[0] == 1:
            return coeffs
        index = torch.as_tensor(inverse, device=grid.device)
        return tuple(c.index_select(0, index) for c in coeffs)

    def _spectral_linear(self, p: torch.Tensor, grid: PeriodicGrid) -> torch.Tensor:
        uniq, inverse = self._rows(p)
        key = ("L", uniq.tobytes(), uniq.shape, grid.resolution, grid.domain,
               str(grid.device), grid.dtype)  # fmt: skip
        L = self._cached(
            key,
            lambda: (self.linear_symbol(torch.as_tensor(uniq), grid).to(grid.cdtype),),
        )
        return self._gather(L, uniq, inverse, grid)[0]

    def _coefficients(self, method: str, h: float, p: torch.Tensor, grid: PeriodicGrid):
        """The stepper's coefficients for step ``h`` and parameters ``p`` ``(B, P)``: built
        once per distinct parameter row (cached), then selected per sample.

        One shared row (the common case) is cached as it is and broadcasts. Several rows
        go through a per-row pool (:class:`_RowPool`): only rows it has not seen are
        computed, so a batch whose rows change a few at a time (an environment
        resetting some sub-environments with new random parameters) pays for those
        few, not for the whole batch again."""
        stepper = get_stepper(method)
        uniq, inverse = self._rows(p)
        hkey = float(f"{h:.14g}")
        where = (grid.resolution, grid.domain, str(grid.device), grid.dtype)
        if uniq.shape[0] == 1:
            key = (method, hkey, uniq.tobytes(), uniq.shape, *where)
            coeffs = self._cached(key, lambda: stepper.coefficients(self, h, uniq, grid))
            return stepper.select(coeffs, None, grid)
        pool = self._row_pool((method, hkey, *where))
        slots = pool.slots(uniq, lambda rows: stepper.coefficients(self, h, rows, grid))
        index = torch.as_tensor(slots[inverse], device=grid.device)
        return stepper.select(pool.coeffs, index, grid)

    # ------------------------------------------------------------ stability
    def stable_dt(self, params=None, method: str | None = None, *, u0=None) -> float:
        """Largest stable internal step of ``method`` (the most restrictive sample).

        The stepper's stability rule (:attr:`PDEStepper.stability`): ``inf`` for the
        steppers that treat the linear part exactly or implicitly (``etdrk4``, ``imex``;
        their explicit nonlinear part still needs a CFL-like step for strong advection, a
        blow-up is reported by :meth:`simulate`). For ``rk4`` the largest ``h`` with
        :math:`h\\lambda` inside the RK4 stability region for every eigenvalue
        :math:`\\lambda` of :meth:`linearised_symbol` (the finite-difference linear
        operator plus, when ``u0`` ``(B, *resolution, C)`` is given, the frozen advection).
        """
        stepper = get_stepper(self._check_method(method))
        if stepper.unconditionally_stable:
            return math.inf
        return stepper.stable_dt(self, params, u0)

    def linearised_symbol(self, params=None, *, u0=None, kind: str = "fd") -> torch.Tensor:
        """Eigenvalues of the frozen-coefficient linearisation, complex128 on the CPU.

        The symbol of :math:`\\mathcal L` (``kind`` ``"fd"``: the finite-difference
        stencils; ``"spectral"``) for the distinct rows of ``params``, and with ``u0``
        the advection :math:`\\pm i \\sum_a s_a |D_a|` at the largest speeds ``s`` of
        :meth:`wave_speed` (both signs stacked). What explicit steppers' step limits
        (:meth:`PDEStepper.stable_dt`) are computed from.
        """
        grid = self.grid_for("cpu", torch.float64)
        if isinstance(params, torch.Tensor):
            rows = params.detach().to("cpu", torch.float64).reshape(-1, len(self.param_names))
        else:
            rows = self.params_tensor(1 if params is None else params)
        uniq, _ = self._rows(rows)
        lam = self.linear_symbol(torch.as_tensor(uniq), grid, kind=kind)
        if u0 is not None:
            u = u0.detach().to("cpu", torch.float64).movedim(-1, 1)
            full = rows if rows.shape[0] == u.shape[0] else rows[:1].expand(u.shape[0], -1)
            speed = self.wave_speed(u, full.to(u.dtype)).amax(dim=0)  # (d,)
            adv = torch.zeros((1, 1, *grid.kshape), dtype=torch.float64)
            for axis in range(grid.ndim):
                d1 = grid.symbol(tuple(int(a == axis) for a in range(grid.ndim)), kind)
                adv = adv + float(speed[axis]) * d1.imag.abs()
            lam = torch.cat([lam + 1j * adv, lam - 1j * adv])
        return lam

    # ----------------------------------------------------------- sampling
    def _sample_initial(self, n: int, generator, device) -> torch.Tensor:
        fields = []
        for _ in self.channel_names:
            if self.ic == "sines":
                f = sum_of_sines(
                    n, self.resolution, self.domain, generator=generator, **self.sines_params
                )
            else:
                f = gaussian_random_field(
                    n, self.resolution, self.domain, generator=generator, **self.ic_params
                )
            fields.append(f)
        return torch.stack(fields, dim=-1).to(device)

    def sample_initial(
        self,
        n: int,
        *,
        generator: torch.Generator | None = None,
        device=None,
        dtype=torch.float64,
        params=None,
    ) -> torch.Tensor:
        """``(n, *resolution, C)`` initial fields (``ic="grf"``: Gaussian random fields
        with ``ic_params``; ``ic="sines"``: PDEBench sums of sines with
        ``sines_params``), drawn in float64 on the generator's device, then moved."""
        n = _check_count(n)
        gen_device = generator.device if generator is not None else torch.device("cpu")
        return self._sample_initial(n, generator, gen_device).to(device=device, dtype=dtype)

    # ---------------------------------------------------------- simulation
    def _check_u0(self, u0) -> torch.Tensor:
        u0 = self.check_state(u0, "u0")
        if u0.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{self.name}: u0 must be float32 or float64, got {u0.dtype}")
        finite = torch.isfinite(u0.detach()).reshape(u0.shape[0], -1).all(dim=1)
        if not bool(finite.all()):
            bad = torch.nonzero(~finite).flatten().tolist()
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise ValueError(
                f"{self.name}: the initial condition u0 of sample {bad[0]}{more} contains "
                "NaN or inf values; give finite initial fields"
            )
        return u0

    def _check_grid(self, grid, method: str) -> None:
        """Accept only the instance's uniform periodic grid (``x_j = j L / N``)."""
        if grid is None:
            return
        d = self.spatial_dims
        if isinstance(grid, Mapping):
            unknown = [k for k in grid if k not in AXIS_NAMES[:d]]
            if unknown:
                raise ValueError(
                    f"{self.name}: grid keys must be among {AXIS_NAMES[:d]}, got {unknown}"
                )
            axes = [grid.get(AXIS_NAMES[a]) for a in range(d)]
        elif d == 1 and not (isinstance(grid, (list, tuple)) and grid and np.ndim(grid[0]) == 1):
            axes = [grid]
        else:
            axes = list(grid)
        if len(axes) != d:
            raise ValueError(f"{self.name}: grid needs {d} coordinate arrays, got {len(axes)}")
        spectral = get_stepper(method).spectral
        for a, coords in enumerate(axes):
            if coords is None:
                continue
            name = AXIS_NAMES[a]
            x = np.asarray(
                coords.detach().cpu() if isinstance(coords, torch.Tensor) else coords,
                dtype=np.float64,
            )
            N, L = self.resolution[a], self.domain[a]
            if x.ndim != 1 or x.shape[0] != N:
                raise ValueError(
                    f"{self.name}: grid {name!r} must have {N} points (resolution), got shape "
                    f"{x.shape}"
                )
            steps = np.diff(x)
            h = L / N
            if not np.all(np.isfinite(x)) or np.any(np.abs(steps - steps.mean()) > 1e-8 * L):
                if spectral:
                    raise ValueError(
                        f"{self.name}: a non-uniform grid given to a spectral solver "
                        f"({method!r}) on axis {name!r}: Fourier methods need equispaced "
                        f"periodic points x_j = x_0 + j L/N (L = {L:g}, N = {N}); resample the "
                        "data onto a uniform grid"
                    )
                raise ValueError(
                    f"{self.name}: method {method!r} uses uniform finite-difference stencils; "
                    f"grid {name!r} is not uniform (spacing varies by "
                    f"{np.ptp(steps):.3g}); give x_j = x_0 + j L/N"
                )
            if abs(steps.mean() * (N - 1) - L) <= 1e-8 * L:
                raise ValueError(
                    f"{self.name}: grid {name!r} includes both end points 0 and L = {L:g}; a "
                    f"periodic grid excludes x = L (x_j = j L / N, spacing {h:g})"
                )
            if abs(steps.mean() - h) > 1e-8 * h:
                raise ValueError(
                    f"{self.name}: grid {name!r} has spacing {steps.mean():g}, but the system's "
                    f"periodic box has L/N = {L:g}/{N} = {h:g}; build the system with "
                    f"domain={steps.mean() * N:g} (get({self.name!r}, domain=...))"
                )

    def _plan(self, times: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        gaps = np.diff(times)
        counts = np.maximum(1, np.ceil(gaps / dt * (1.0 - 1e-12))).astype(np.int64)
        hs = gaps / counts
        # equal intervals (up to rounding of t) share one step size and coefficient set
        for i in range(1, len(hs)):
            if abs(hs[i] - hs[i - 1]) <= 1e-10 * hs[i - 1]:
                hs[i] = hs[i - 1]
        return counts, hs

    def _default_step(self, stepper: PDEStepper, p: torch.Tensor, u0: torch.Tensor) -> float:
        dt = self.method_dt.get(stepper.name, self.default_dt)
        if not stepper.unconditionally_stable:
            dt = min(dt, 0.9 * self.stable_dt(p, stepper.name, u0=u0))
        return dt

    def _check_step(self, stepper: PDEStepper, hs: np.ndarray, p, u0) -> None:
        """Refuse steps beyond the stepper's stability limit, before running."""
        if stepper.unconditionally_stable or not len(hs):
            return
        limit = self.stable_dt(p, stepper.name, u0=u0)
        if hs.max() > limit:
            free = [m for m in self.methods if get_stepper(m).unconditionally_stable]
            raise ValueError(
                f"{self.name}: dt={hs.max():.4g} is beyond the stability limit {limit:.4g} of "
                f"the explicit method {stepper.name!r} at resolution {self.resolution} and "
                f"these parameters ({stepper.stability}). Use dt <= "
                f"{limit:.4g}, a coarser grid, or a method without a step limit "
                f"({', '.join(map(repr, free))}); check_stability=False runs anyway"
            )

    def simulate(
        self,
        u0,
        t,
        params=None,
        *,
        method: str | None = None,
        dt: float | None = None,
        grid=None,
        forcing=None,
        **options,
    ) -> torch.Tensor:
        """Solve from ``u0`` ``(B, *resolution, C)``; return ``(B, T, *resolution, C)``.

        ``t`` ``(T,)`` strictly increasing output times; ``t[0]`` is the time of ``u0``
        (the first frame is ``u0`` itself). ``params``: ``(B, P)``/``(P,)``, a dict or
        None (defaults), one row per sample. ``method``: a key of :attr:`methods`
        (default :attr:`default_method`). ``dt``: the largest internal step (default
        :attr:`default_dt`/:attr:`method_dt`; for ``rk4`` also at most 0.9 of
        :meth:`stable_dt`); each output interval takes ``ceil(interval/dt)`` equal steps.
        ``grid``: optional coordinates (array in 1D, or ``{"x": ..., "y": ...}``) checked
        against the system's periodic grid. ``forcing``: an optional time-constant
        source ``f`` of shape ``(B, *resolution, C)`` or ``(1, *resolution, C)`` (shared),
        on ``u0``'s device, cast to its dtype: the PDE becomes
        :math:`u_t = \\mathcal L u + \\mathcal N(u) + f` (methods ``etdrk4``, ``imex``,
        ``rk4``; gradients flow to ``f``). ``options``: see :class:`SimulateOptions`.
        Runs on ``u0``'s device and dtype.

        Raises ValueError before running for non-finite ``u0`` or ``forcing``, a wrong
        shape, an unknown method, a non-uniform grid, parameters out of range or an
        explicit ``dt`` beyond the stability limit (TypeError for a non-real forcing);
        :class:`simsci.errors.SolverError` naming the trajectories and the time when
        the solution becomes non-finite.
        """
        opts = SimulateOptions(**options) if options else SimulateOptions()
        u0 = self._check_u0(u0)
        method = self._check_method(method)
        stepper = get_stepper(method)
        self._check_grid(grid, method)
        if stepper.spectral and any(n % 2 for n in self.resolution):
            raise ValueError(
                f"{self.name}: spectral method {method!r} needs an even resolution, got "
                f"{self.resolution}; use an even number of grid points"
            )
        times = _check_times(t)
        B = u0.shape[0]
        p = self._batch_params(params, B, u0)
        if forcing is not None:
            opts = _SolveOptions(
                **dataclasses.asdict(opts), forcing=self._check_forcing(forcing, u0, method)
            )
        if dt is None:
            dt = self._default_step(stepper, p, u0)
        elif isinstance(dt, bool) or not isinstance(dt, (int, float, np.number)):
            raise TypeError(f"dt must be a number, got {dt!r}")
        dt = float(dt)
        if not (math.isfinite(dt) and dt > 0):
            raise ValueError(f"dt must be finite and > 0, got {dt!r}")
        counts, hs = self._plan(times, dt)
        if opts.check_stability:
            self._check_step(stepper, hs, p, u0)
        grid_ = self.grid_for(u0.device, u0.dtype)
        w = u0.movedim(-1, 1).contiguous()
        frames = self._run(stepper, w, times, counts, hs, p, grid_, opts)
        return torch.stack([u0, *[f.movedim(1, -1) for f in frames]], dim=1)

    def _check_forcing(self, forcing, u0: torch.Tensor, method: str) -> torch.Tensor:
        """Validate a source field; return it channels-first in ``u0``'s dtype."""
        if not get_stepper(method).forcing:
            raise ValueError(
                f"{self.name}: forcing= is supported by the methods "
                f"{sorted(m for m in self.methods if get_stepper(m).forcing)}, not {method!r}"
            )
        shape = (*self.resolution, len(self.channel_names))
        B = u0.shape[0]
        if isinstance(forcing, torch.Tensor):
            if forcing.device != u0.device:
                raise ValueError(
                    f"{self.name}: forcing is on {forcing.device} but u0 is on {u0.device}; "
                    "move it with forcing.to(u0.device)"
                )
            f = forcing
        else:
            arr = np.asarray(forcing)
            if arr.dtype.kind not in "fiu":
                raise TypeError(
                    f"{self.name}: forcing must hold real numbers, got dtype {arr.dtype}"
                )
            f = torch.as_tensor(arr, device=u0.device)
        if f.dtype == torch.bool or f.is_complex():
            raise TypeError(f"{self.name}: forcing must be a real tensor, got {f.dtype}")
        dims = ", ".join(map(str, shape))
        if f.ndim != len(shape) + 1 or tuple(f.shape[1:]) != shape or f.shape[0] not in (1, B):
            raise ValueError(
                f"{self.name}: forcing must have shape ({B}, {dims}) (one source field per "
                f"sample) or (1, {dims}) (shared by the batch), got {tuple(f.shape)}"
            )
        f = f.to(u0.dtype)
        finite = torch.isfinite(f.detach()).reshape(f.shape[0], -1).all(dim=1)
        if not bool(finite.all()):
            bad = torch.nonzero(~finite).flatten().tolist()
            raise ValueError(
                f"{self.name}: the forcing of sample {bad[0]}"
                f"{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''} contains NaN or inf "
                "values; give a finite source field"
            )
        return f.movedim(-1, 1)

    def _check_finite(self, state, t_prev: float, t_now: float, method: str, h: float):
        finite = torch.isfinite(state).reshape(state.shape[0], -1).all(dim=1)
        if bool(finite.all()):
            return
        bad = torch.nonzero(~finite).flatten().tolist()
        more = f" and {len(bad) - 1} more ({bad[:10]})" if len(bad) > 1 else ""
        raise SolverError(
            f"{self.name}: trajectory {bad[0]}{more} blew up (inf/NaN) with method "
            f"{method!r}, step {h:.4g}: detected at t={t_now:.6g} (finite at t={t_prev:.6g}). "
            "Use a smaller dt, another method, or check the parameters",
            samples=bad,
            time=float(t_now),
        )

    def _run(self, stepper: PDEStepper, w, times, counts, hs, p, grid, opts):
        """Step ``w`` ``(B, C, *resolution)`` through the planned intervals; the frames at
        ``times[1:]``. Coefficients are looked up when the step changes; the state is
        checked for inf/NaN every ``check_every`` steps and at every output time."""
        state = stepper.enter(w, grid)
        pw = p.to(w.dtype)
        forcing = getattr(opts, "forcing", None)
        source = None if forcing is None else stepper.enter(forcing, grid)
        frames = []
        carry = None  # the stepper's history (SBDF2: previous state, N and step)
        t_ok = float(times[0])
        coeffs, h_coeffs = None, None
        for i in range(len(counts)):
            h = float(hs[i])
            if h != h_coeffs:  # equal intervals reuse the coefficients without a lookup
                coeffs, h_coeffs = self._coefficients(stepper.name, h, p, grid), h
            t0 = float(times[i])
            for j in range(int(counts[i])):
                tj = t0 + j * h
                state, carry = stepper.step(self, state, tj, h, coeffs, pw, grid, source, carry)
                if (j + 1) % opts.check_every == 0:
                    t_now = tj + h
                    self._check_finite(state, t_ok, t_now, stepper.name, h)
                    t_ok = t_now
            self._check_finite(state, t_ok, float(times[i + 1]), stepper.name, h)
            t_ok = float(times[i + 1])
            frames.append(stepper.leave(state, grid))
        return frames


# ------------------------------------------------------------- per-row coefficients
#: bound on one pool's tensors: past it the pool keeps only the rows in use
_POOL_BYTES = 64 * 2**20
#: pools kept per system (one per method, step and grid in use)
_POOLS = 4


def _tensors(tree) -> list[torch.Tensor]:
    """The tensors of a stepper's coefficient structure (nested tuples/lists), in order."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (tuple, list)):
        return [x for item in tree for x in _tensors(item)]
    return []


def _replace(tree, tensors):
    """``tree`` with its tensors replaced, in order, by those of the iterator ``tensors``."""
    if isinstance(tree, torch.Tensor):
        return next(tensors)
    if isinstance(tree, (tuple, list)):
        return type(tree)(_replace(item, tensors) for item in tree)
    return tree


class _RowPool:
    """A stepper's coefficients for many parameter rows, one slot per distinct row.

    ``coeffs`` has the structure ``stepper.coefficients`` returns, each tensor with one
    slot per row along its first axis (rows the pool has not filled are never
    selected). ``slots(rows, build)`` returns the slot of each of ``rows`` ``(R, P)``,
    calling ``build`` once, on the rows it has not seen; a pool past
    :data:`_POOL_BYTES` is rebuilt with only the rows asked for (copied, not
    recomputed), so memory stays bounded whatever the number of rows over time.
    """

    def __init__(self):
        self.coeffs = None
        self._slot: dict[bytes, int] = {}
        self._size = 0
        self._capacity = 0

    def slots(self, rows: np.ndarray, build) -> np.ndarray:
        keys = [row.tobytes() for row in rows]
        missing = [i for i, k in enumerate(keys) if k not in self._slot]
        if missing:
            new = build(rows[missing])
            self._make_room(len(missing), keys, new)
            self._put(new, [keys[i] for i in missing])
        return np.fromiter((self._slot[k] for k in keys), dtype=np.int64, count=len(keys))

    def _put(self, new, keys: list[bytes]) -> None:
        start = self._size
        for pooled, fresh in zip(_tensors(self.coeffs), _tensors(new)):
            pooled[start : start + len(keys)] = fresh
        self._slot.update((k, start + j) for j, k in enumerate(keys))
        self._size += len(keys)

    def _make_room(self, m: int, keys: list[bytes], new) -> None:
        """Capacity for ``m`` more rows: grow (doubling) within the bound, else keep only
        the rows in ``keys`` that the pool already holds."""
        fresh = _tensors(new)
        if not fresh:  # a stepper without coefficients: nothing to store
            self.coeffs, self._capacity = new, self._size + m
            return
        row_bytes = sum(t[0].numel() * t.element_size() for t in fresh)
        if self.coeffs is not None and self._size + m <= self._capacity:
            return
        if self.coeffs is not None and (self._size + m) * row_bytes > _POOL_BYTES:
            keep = [k for k in keys if k in self._slot]
            index = torch.as_tensor(
                [self._slot[k] for k in keep], dtype=torch.long, device=fresh[0].device
            )
            kept = [t.index_select(0, index) for t in _tensors(self.coeffs)]
            self._slot = {k: j for j, k in enumerate(keep)}
            self._size = len(keep)
        else:
            kept = None if self.coeffs is None else [t[: self._size] for t in _tensors(self.coeffs)]
        needed = self._size + m
        capacity = max(needed, min(2 * needed, _POOL_BYTES // row_bytes))
        tensors = []
        for j, t in enumerate(fresh):
            pooled = t.new_empty((capacity, *t.shape[1:]))
            if kept is not None and self._size:
                pooled[: self._size] = kept[j]
            tensors.append(pooled)
        self.coeffs = _replace(new, iter(tensors))
        self._capacity = capacity


def _check_times(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().double().numpy()
    times = np.asarray(t, dtype=np.float64)
    if times.ndim != 1 or times.shape[0] < 1:
        raise ValueError(
            f"t must be a 1-D array of output times (T,), got shape {times.shape}; PDE "
            "solves share one time grid across the batch"
        )
    if not np.all(np.isfinite(times)):
        raise ValueError("t must be finite")
    if times.shape[0] > 1 and not np.all(np.diff(times) > 0):
        i = int(np.flatnonzero(np.diff(times) <= 0)[0])
        raise ValueError(
            f"t must be strictly increasing; t[{i}]={times[i]:g} >= t[{i + 1}]={times[i + 1]:g}"
        )
    return times
