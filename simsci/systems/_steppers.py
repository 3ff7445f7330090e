r"""PDE time steppers: what each one is, what it needs, and the step itself.

A plain dict beside its entry function (shared/design/architecture.md), as the
integrators' :mod:`simsci.integrate._methods`: ``PDE_STEPPERS`` maps a method name to a
:class:`PDEStepper`, ``get_stepper(name)`` returns it (an unknown name lists the valid
ones and suggests the closest). :class:`simsci.systems._pde.PDESystem` looks every
method up here: which steppers a system offers (``methods``), whether it needs the
periodic spectral grid (even resolution, uniform points), its step limit
(:meth:`PDEStepper.stable_dt`), whether it takes a source field, and the step. The
run loop (output times, inf/NaN checks) and the coefficient cache are the base class's.

Each stepper declares, as class attributes:

- ``order``: global order in time (the test suite fits it on a problem with a known
  solution, for every registered stepper);
- ``spectral``: True when it carries the state's Fourier spectrum and so needs the
  periodic spectral grid; False for finite differences on the grid values;
- ``unconditionally_stable`` and ``stability``: the stability rule. True: no step
  limit from the linear part (exact or implicit); :meth:`PDEStepper.stable_dt` is
  ``inf``. False: :meth:`PDEStepper.stable_dt` computes the limit, ``simulate`` caps its
  default step at 0.9 of it and refuses a larger one before running. ``stability`` says
  the rule in words (error messages, documentation);
- ``forcing``: whether it adds a time-constant source ``f`` (``simulate(forcing=f)``);
- ``generic``: offered by every :class:`PDESystem`; False for a scheme that only some
  systems list (``extra_steppers``), e.g. ``cn``, which takes the real part of the
  linear symbol;
- ``description`` (one line, what ``system.methods`` shows) and ``source`` (the paper
  or code it follows).

Adding a stepper is one class here (``@register_stepper``, the attributes above,
:meth:`PDEStepper.coefficients` and :meth:`PDEStepper.step`) and one test
(tests/systems/test_pde_steppers.py fits its declared order).

Sources of the entries: Cox & Matthews (2002), J. Comput. Phys. 176, 430-455 (ETDRK4)
with the coefficients of Kassam & Trefethen (2005), SIAM J. Sci. Comput. 26,
1214-1233; Ascher, Ruuth & Wetton (1995), SIAM J. Numer. Anal. 32, 797-823 (SBDF2);
the FNO data generator (Li et al. 2021, ``data_generation/navier_stokes/ns_2d.py``;
``cn``); classical RK4 with fourth-order centred differences (Fornberg 1988, Math.
Comp. 51, 699-706, for the stencils; Hairer & Wanner, "Solving ODEs II", IV.2 for the
stability region); the strong-stability-preserving RK3 of Shu & Osher (1988), J. Comput.
Phys. 77, 439-471, on the same stencils (``ssprk3``; Gottlieb, Shu & Tadmor 2001, SIAM
Rev. 43, 89-112, for its SSP property).
"""

from __future__ import annotations

import functools
import math
from typing import ClassVar

import numpy as np
import torch

from simsci.errors import unknown_name

__all__ = [
    "PDEStepper",
    "PDE_STEPPERS",
    "get_stepper",
    "register_stepper",
    "etdrk4_coefficients",
    "rk4_stable_radius",
    "rk_stable_radius",
]

#: contour points for the ETDRK4 coefficients (full circle of radius 1)
CONTOUR_POINTS = 64


# ------------------------------------------------------------------------ the base
class PDEStepper:
    """One time-stepping scheme for :class:`simsci.systems._pde.PDESystem`.

    Subclasses set the class attributes (module docstring) and implement
    :meth:`coefficients` (what depends on the step ``h`` and the parameter rows only:
    built once, cached by the system) and :meth:`step`. Shapes: channels-first; a
    spectral stepper's state is the spectrum ``(B, C, *kshape)``, a finite-difference
    stepper's the grid values ``(B, C, *resolution)``.
    """

    name: ClassVar[str]
    order: ClassVar[int]
    spectral: ClassVar[bool]
    unconditionally_stable: ClassVar[bool]
    stability: ClassVar[str]
    description: ClassVar[str]
    source: ClassVar[str]
    forcing: ClassVar[bool] = True
    generic: ClassVar[bool] = True

    def __repr__(self) -> str:
        return f"<PDE stepper {self.name!r}: {self.description}>"

    # ------------------------------------------------------------- state layout
    def enter(self, w: torch.Tensor, grid) -> torch.Tensor:
        """The stepper's state (or source) from grid values ``(B, C, *resolution)``."""
        return grid.to_spectral(w) if self.spectral else w

    def leave(self, state: torch.Tensor, grid) -> torch.Tensor:
        """Grid values ``(B, C, *resolution)`` of a state (a recorded frame)."""
        return grid.to_physical(state) if self.spectral else state

    # ------------------------------------------------------------- coefficients
    def coefficients(self, system, h: float, rows: np.ndarray, grid):
        """Step-dependent constants for the distinct parameter ``rows`` ``(R, P)``
        (float64); cached by the system per ``(name, h, rows, grid)``. None by default."""
        return ()

    def select(self, coeffs, index: torch.Tensor | None, grid):
        """The coefficients per sample: ``index`` ``(B,)`` maps samples to rows (None:
        one row shared by the batch, the coefficients broadcast)."""
        if index is None:
            return coeffs
        return tuple(c.index_select(0, index) for c in coeffs)

    # --------------------------------------------------------------------- step
    def step(self, system, state, t: float, h: float, coeffs, p, grid, source, carry):
        """One step from ``t`` to ``t + h``: returns ``(state, carry)``.

        ``p`` ``(B, P)`` parameters in the state's real dtype; ``source`` the forcing in
        the stepper's layout (:meth:`enter`) or None; ``carry`` what the previous step
        returned (None at the start of a solve: multistep schemes keep their history
        there).
        """
        raise NotImplementedError

    # ---------------------------------------------------------------- stability
    def stable_dt(self, system, params, u0) -> float:
        """Largest stable step for ``system`` (rows ``params``, optional ``u0``
        channels-last for the advective part). ``inf`` when unconditionally stable."""
        if self.unconditionally_stable:
            return math.inf
        raise NotImplementedError(f"stepper {self.name!r} declares a step limit: define stable_dt")


PDE_STEPPERS: dict[str, PDEStepper] = {}

_DECLARED = {
    "name": str,
    "order": int,
    "spectral": bool,
    "unconditionally_stable": bool,
    "stability": str,
    "description": str,
    "source": str,
    "forcing": bool,
    "generic": bool,
}


def register_stepper(cls: type[PDEStepper]) -> type[PDEStepper]:
    """Class decorator: add an instance of ``cls`` to :data:`PDE_STEPPERS` under
    ``cls.name``, after checking that it declares every property (module docstring)."""
    if not (isinstance(cls, type) and issubclass(cls, PDEStepper)):
        raise TypeError(f"register_stepper() takes a PDEStepper subclass, got {cls!r}")
    for attr, kind in _DECLARED.items():
        value = getattr(cls, attr, None)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise TypeError(
                f"{cls.__name__}.{attr} must be declared as a {kind.__name__}, got {value!r}"
            )
    if not cls.name or cls.order < 1:
        raise ValueError(f"{cls.__name__} needs a non-empty name and an order >= 1")
    taken = PDE_STEPPERS.get(cls.name)
    if taken is not None and type(taken) is not cls:
        raise ValueError(
            f"PDE stepper name {cls.name!r} is already registered by "
            f"{type(taken).__qualname__}; choose another name for {cls.__qualname__}"
        )
    PDE_STEPPERS[cls.name] = cls()
    return cls


def get_stepper(name: str) -> PDEStepper:
    """The :class:`PDEStepper` registered as ``name``; an unknown name lists the valid ones."""
    if not isinstance(name, str) or name not in PDE_STEPPERS:
        raise unknown_name("PDE stepper", name, PDE_STEPPERS)
    return PDE_STEPPERS[name]


def _with_source(system, source, inplace: bool = False):
    """``system.nonlinear_hat``, plus the source spectrum ``source`` when given.

    ``inplace``: add the source into the freshly computed spectrum instead of a new
    array (one pass less over the batch; the same numbers). Only where nothing
    differentiates through the step and the system's ``nonlinear_hat`` is known to
    return a fresh tensor (:func:`returns_fresh`), never one it keeps.
    """
    if source is None:
        return system.nonlinear_hat
    base = system.nonlinear_hat
    if inplace and getattr(type(system).nonlinear_hat, "returns_fresh", False):

        def forced_inplace(t, v, p, grid):
            return base(t, v, p, grid).add_(source)

        return forced_inplace

    def forced(t, v, p, grid):
        return base(t, v, p, grid) + source

    return forced


def returns_fresh(method):
    """Mark a ``nonlinear_hat`` that always returns a new tensor, which the steppers may
    then update in place (an override without the mark gets the out-of-place path)."""
    method.returns_fresh = True
    return method


def _no_grad_needed(*tensors) -> bool:
    """True when no gradient can flow through a step: the in-place fast paths (the same
    arithmetic, fewer temporaries) are then safe."""
    if not torch.is_grad_enabled():
        return True
    return not any(isinstance(x, torch.Tensor) and x.requires_grad for x in tensors)


def _linear_symbol(system, rows: np.ndarray, grid) -> torch.Tensor:
    return system.linear_symbol(torch.as_tensor(rows), grid)


# -------------------------------------------------------------------------- ETDRK4
def etdrk4_coefficients(
    L: torch.Tensor, h: float, points: int = CONTOUR_POINTS, chunk: int = 1 << 18
) -> tuple[torch.Tensor, ...]:
    r"""ETDRK4 coefficients for the diagonal linear operator ``L`` (complex128).

    Returns ``(E, E2, Q, f1, f2, f3)``, each of ``L``'s shape: :math:`E = e^{hL}`,
    :math:`E_2 = e^{hL/2}` and the Kassam-Trefethen contour means
    :math:`Q = h\,\overline{(e^{z/2}-1)/z}`,
    :math:`f_1 = h\,\overline{(-4 - z + e^z(4 - 3z + z^2))/z^3}`,
    :math:`f_2 = h\,\overline{(2 + z + e^z(z - 2))/z^3}`,
    :math:`f_3 = h\,\overline{(-4 - 3z - z^2 + e^z(4 - z))/z^3}` over
    :math:`z = hL + e^{i\theta_j}`, :math:`\theta_j = 2\pi(j - 1/2)/M`. Evaluated in
    chunks of ``chunk`` entries to bound the ``(…, M)`` temporaries.
    """
    L = L.to(torch.complex128)
    flat = L.reshape(-1)
    j = torch.arange(points, dtype=torch.float64, device=L.device)
    roots = torch.exp(1j * (2.0 * math.pi * (j + 0.5) / points)).to(torch.complex128)
    outs = [[], [], [], []]
    for start in range(0, flat.numel(), chunk):
        z = h * flat[start : start + chunk, None] + roots
        ez = torch.exp(z)
        z3 = z**3
        outs[0].append(h * ((torch.exp(z / 2) - 1) / z).mean(-1))
        outs[1].append(h * ((-4 - z + ez * (4 - 3 * z + z * z)) / z3).mean(-1))
        outs[2].append(h * ((2 + z + ez * (z - 2)) / z3).mean(-1))
        outs[3].append(h * ((-4 - 3 * z - z * z + ez * (4 - z)) / z3).mean(-1))
    Q, f1, f2, f3 = (torch.cat(o).reshape(L.shape) for o in outs)
    if not bool(L.imag.any()):
        # real symbol: the exact means are real; drop the rounding-level imaginary parts
        Q, f1, f2, f3 = (c.real.to(torch.complex128) for c in (Q, f1, f2, f3))
    return torch.exp(h * L), torch.exp(0.5 * h * L), Q, f1, f2, f3


@register_stepper
class ETDRK4(PDEStepper):
    r"""Pseudo-spectral exponential time differencing RK4 (Cox & Matthews 2002).

    The coefficients :math:`\varphi(h\mathcal L)` are the contour means of Kassam &
    Trefethen (2005) over ``M = 64`` points on the unit circle around :math:`hL_k`
    (:func:`etdrk4_coefficients`), in float64, then cast to the working dtype. Fourth
    order in time, the stiff linear part exact; with a source ``f`` exact for a linear
    PDE (:math:`f_1 + 4 f_2 + f_3 = (e^{hL} - 1)/L`).
    """

    name = "etdrk4"
    order = 4
    spectral = True
    unconditionally_stable = True
    stability = (
        "unconditionally stable for the linear part (applied exactly); the explicit "
        "nonlinear part needs roughly h max|u| k_max <~ 1 for strong advection"
    )
    description = "pseudo-spectral, exponential time differencing RK4 (order 4)"
    source = "Cox & Matthews 2002, JCP 176; coefficients: Kassam & Trefethen 2005, SISC 26"

    def coefficients(self, system, h, rows, grid):
        E, E2, Q, f1, f2, f3 = etdrk4_coefficients(_linear_symbol(system, rows, grid), h)
        return tuple(c.to(grid.cdtype) for c in (E, E2, Q, f1, 2.0 * f2, f3))

    def step(self, system, v, t, h, coeffs, p, grid, source, carry):
        E, E2, Q, f1, f2x2, f3 = coeffs  # f2x2 = 2 f2 (cached that way)
        if _no_grad_needed(v, p, source, *coeffs):
            return self._step_inplace(system, v, t, h, coeffs, p, grid, source), carry
        N = _with_source(system, source)
        # Cox & Matthews' ETDRK4, written with fused multiply-adds (fewer passes over
        # the batch: the step is memory-bound on CPU)
        Nv = N(t, v, p, grid)
        E2v = E2 * v
        a = torch.addcmul(E2v, Q, Nv)
        Na = N(t + 0.5 * h, a, p, grid)
        b = torch.addcmul(E2v, Q, Na)
        Nb = N(t + 0.5 * h, b, p, grid)
        c = torch.addcmul(E2 * a, Q, Nb.mul(2.0).sub_(Nv))
        Nc = N(t + h, c, p, grid)
        out = torch.addcmul(E * v, f1, Nv)
        out.addcmul_(f2x2, Na.add_(Nb))
        return out.addcmul_(f3, Nc), carry

    def _step_inplace(self, system, v, t, h, coeffs, p, grid, source):
        """:meth:`step` without autograd: the same operations in the same order (so the
        same numbers, bit for bit), but each stage written into a temporary that is no
        longer needed. Fewer fresh arrays means fewer passes through memory, which is
        what a large batch on the CPU pays for."""
        E, E2, Q, f1, f2x2, f3 = coeffs
        N = _with_source(system, source, inplace=True)
        Nv = N(t, v, p, grid)
        E2v = E2 * v
        a = torch.addcmul(E2v, Q, Nv)
        Na = N(t + 0.5 * h, a, p, grid)
        b = E2v.addcmul_(Q, Na)  # E2 v is not needed after b
        Nb = N(t + 0.5 * h, b, p, grid)
        # 2 Nb - Nv into b's memory (b is not needed after Nb)
        c = a.mul_(E2).addcmul_(Q, torch.mul(Nb, 2.0, out=b).sub_(Nv))
        Nc = N(t + h, c, p, grid)
        out = v.mul(E).addcmul_(f1, Nv)
        out.addcmul_(f2x2, Na.add_(Nb))
        return out.addcmul_(f3, Nc)


# ------------------------------------------------------------------------------ CN
@register_stepper
class CrankNicolsonEuler(PDEStepper):
    r"""The FNO data generator's scheme (Li et al. 2021, ``ns_2d.py``): Crank-Nicolson
    on the linear part, forward Euler on the nonlinear part (forcing included in the
    system's nonlinear term), so first order in time overall.

    Not generic: its coefficients use the real part of the linear symbol (diffusion and
    decay; advection or dispersion would be dropped), so a system lists it in
    ``extra_steppers`` (``navier_stokes_2d``). No ``forcing=`` source.
    """

    name = "cn"
    order = 1
    spectral = True
    unconditionally_stable = True
    stability = (
        "unconditionally stable for the (real, diffusive) linear part (Crank-Nicolson); "
        "the forward-Euler nonlinear part needs h max|u| k_max <~ 1"
    )
    description = (
        "pseudo-spectral, Crank-Nicolson viscosity + forward-Euler advection: the FNO data "
        "generator (order 1)"
    )
    source = "Li et al. 2021 (FNO), data_generation/navier_stokes/ns_2d.py"
    forcing = False
    generic = False

    def coefficients(self, system, h, rows, grid):
        lin = _linear_symbol(system, rows, grid).real
        return (
            (1.0 + 0.5 * h * lin).to(grid.dtype),
            (1.0 / (1.0 - 0.5 * h * lin)).to(grid.dtype),
        )

    def step(self, system, v, t, h, coeffs, p, grid, source, carry):
        plus, inv_minus = coeffs
        return (plus * v + h * system.nonlinear_hat(t, v, p, grid)) * inv_minus, carry


# ---------------------------------------------------------------------------- SBDF2
@register_stepper
class SBDF2(PDEStepper):
    r"""Pseudo-spectral semi-implicit backward differentiation SBDF2 (Ascher, Ruuth &
    Wetton 1995): linear part implicit, nonlinear part extrapolated, started (and
    restarted whenever the step changes) with one IMEX-Euler step. Second order in
    time: the lower-order spectral baseline of the benchmark."""

    name = "imex"
    order = 2
    spectral = True
    unconditionally_stable = True
    stability = (
        "unconditionally stable for the linear part (implicit); the extrapolated "
        "nonlinear part needs roughly h max|u| k_max <~ 1 for strong advection"
    )
    description = "pseudo-spectral, semi-implicit SBDF2 (order 2)"
    source = "Ascher, Ruuth & Wetton 1995, SIAM J. Numer. Anal. 32, 797-823"

    def coefficients(self, system, h, rows, grid):
        L = _linear_symbol(system, rows, grid)
        d1, d2 = 1.0 - h * L, 3.0 - 2.0 * h * L
        if bool((d1.abs() < 1e-12).any() or (d2.abs() < 1e-12).any()):
            raise ValueError(
                f"{system.name}: dt={h:g} makes the implicit step of 'imex' singular "
                "(1 - dt L or 3 - 2 dt L vanishes for a growing mode); change dt"
            )
        return tuple(c.to(grid.cdtype) for c in (1.0 / d1, 1.0 / d2))

    def step(self, system, v, t, h, coeffs, p, grid, source, history):
        inv1, inv2 = coeffs
        Nv = _with_source(system, source)(t, v, p, grid)
        if history is None or history[2] != h:
            new = (v + h * Nv) * inv1  # IMEX Euler start (and restart when h changes)
        else:
            v_prev, N_prev, _ = history
            new = (4.0 * v - v_prev + (2.0 * h) * (2.0 * Nv - N_prev)) * inv2
        return new, (v, Nv, h)


# ------------------------------------------------------------------------------ RK4
@functools.lru_cache(maxsize=4)
def _rk_radius_table(order: int = 4, n_angles: int = 1025) -> tuple[np.ndarray, np.ndarray]:
    r"""Radius of the stability region of an explicit ``order``-stage RK method of order
    ``order`` (``order`` <= 4: its stability polynomial is the Taylor polynomial
    :math:`\sum_{j \le p} z^j / j!`, whatever the tableau) along rays at angles in
    [pi/2, pi]."""
    theta = np.linspace(0.5 * np.pi, np.pi, n_angles)
    direction = np.exp(1j * theta)
    taylor = [1.0 / math.factorial(j) for j in range(order + 1)]

    def amp(r):
        z = r * direction
        return np.abs(sum(c * z**j for j, c in enumerate(taylor)))

    radii = np.arange(1, 3201) * 1e-3  # scan to 3.2 > 2.83 (RK4's largest extent)
    inside = np.stack([amp(r) <= 1.0 + 1e-14 for r in radii])  # (R, A)
    first_out = np.argmin(inside, axis=0)  # first radius index leaving the region
    lo = np.where(first_out > 0, radii[np.maximum(first_out - 1, 0)], 0.0)
    hi = radii[first_out]
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        ok = amp(mid) <= 1.0
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
    return theta, lo


def rk4_stable_radius(angle: np.ndarray) -> np.ndarray:
    """Conservative radius of the RK4 stability region along the ray at ``angle``.

    ``angle`` in [pi/2, pi] (the left half-plane, mirrored for negative imaginary
    parts); the table value of the two neighbouring tabulated angles, the smaller one.
    Along the negative real axis this is 2.785, along the imaginary axis 2.828.
    """
    return rk_stable_radius(angle, 4)


def rk_stable_radius(angle: np.ndarray, order: int) -> np.ndarray:
    """:func:`rk4_stable_radius` for an explicit RK method of ``order`` stages and order,
    3 or 4 (the regions that contain a segment of the imaginary axis; those of orders 1
    and 2 only touch it at 0). Order 3 (``ssprk3``): 2.513 along the negative real axis,
    sqrt(3) along the imaginary axis."""
    if order not in (3, 4):
        raise ValueError(f"order must be 3 or 4, got {order!r}")
    theta, radius = _rk_radius_table(order)
    angle = np.clip(np.asarray(angle, dtype=np.float64), theta[0], theta[-1])
    idx = np.clip(np.searchsorted(theta, angle), 1, len(theta) - 1)
    return np.minimum(radius[idx - 1], radius[idx])


def _rk_dt_limit(lam: np.ndarray, order: int = 4) -> float:
    """Largest h with h*lam inside the region of the explicit RK method of ``order`` (4:
    RK4) for every eigenvalue in ``lam``.

    Eigenvalues with a positive real part are physically growing modes (KS, Allen-Cahn);
    only their imaginary part constrains stability.
    """
    lam = np.asarray(lam, dtype=np.complex128).ravel()
    lam = np.where(lam.real > 0, 1j * lam.imag, lam)
    mag = np.abs(lam)
    keep = mag > 0
    if not keep.any():
        return math.inf
    lam, mag = lam[keep], mag[keep]
    angle = np.abs(np.angle(lam))  # mirror the lower half-plane onto the upper
    return float(np.min(rk_stable_radius(angle, order) / mag))


def _linear_fd(system, u: torch.Tensor, coefs) -> torch.Tensor:
    """:math:`\\mathcal L u` with the finite-difference stencils (``coefs`` per sample)."""
    out = torch.zeros_like(u)
    for coef, alpha in coefs:
        out = out + coef * (system.grid_for(u.device, u.dtype).fd_apply(u, alpha))
    return out


@register_stepper
class RK4FiniteDifferences(PDEStepper):
    r"""Explicit fourth-order centred finite differences in space (``torch.roll``
    stencils) and classical RK4 in time. The step must respect the linear stability
    limit (diffusive :math:`\Delta t \lesssim \Delta x^2/\nu`, dispersive
    :math:`\lesssim \Delta x^3`, hyper-diffusive :math:`\lesssim \Delta x^4`, advective
    CFL :math:`\lesssim \Delta x/\max|u|`): :meth:`stable_dt` computes it exactly for
    the frozen-coefficient linearisation (the RK4 stability region traced along rays);
    works on any resolution (odd ones too)."""

    name = "rk4"
    order = 4
    spectral = False
    unconditionally_stable = False
    stability = (
        "h lambda inside RK4's stability region for every eigenvalue lambda of the "
        "finite-difference linearisation: diffusive dt ~ dx^2/nu, dispersive ~ dx^3, "
        "hyper-diffusive ~ dx^4, advective ~ dx/max|u|"
    )
    description = "4th-order centred finite differences, explicit RK4 (order 4)"
    source = "classical RK4; centred stencils (Fornberg 1988, Math. Comp. 51)"

    def coefficients(self, system, h, rows, grid):
        # per-row, per-channel coefficients of the linear terms (real, float64)
        rows = torch.as_tensor(rows, device=grid.device)
        coeffs = []
        for coef, alpha in system.linear_terms(rows):
            c = torch.as_tensor(coef, dtype=torch.float64, device=grid.device)
            c = torch.broadcast_to(c, (rows.shape[0], len(system.channel_names)))
            coeffs.append((c.reshape(*c.shape, *([1] * grid.ndim)), alpha))
        return coeffs

    def select(self, coeffs, index, grid):
        if index is None:
            return [(c.to(grid.dtype), a) for c, a in coeffs]
        return [(c.index_select(0, index).to(grid.dtype), a) for c, a in coeffs]

    def step(self, system, u, t, h, coefs, p, grid, source, carry):
        def rhs(t, u):
            out = _linear_fd(system, u, coefs) + system.nonlinear_fd(t, u, p, grid)
            return out if source is None else out + source

        k1 = rhs(t, u)
        k2 = rhs(t + 0.5 * h, u + (0.5 * h) * k1)
        k3 = rhs(t + 0.5 * h, u + (0.5 * h) * k2)
        k4 = rhs(t + h, u + h * k3)
        return u + (h / 6.0) * (k1 + 2.0 * (k2 + k3) + k4), carry

    def stable_dt(self, system, params, u0) -> float:
        return _rk_dt_limit(system.linearised_symbol(params, u0=u0, kind="fd").numpy(), 4)


# --------------------------------------------------------------------------- SSPRK3
@register_stepper
class SSPRK3FiniteDifferences(PDEStepper):
    r"""The strong-stability-preserving third-order Runge-Kutta method of Shu & Osher
    (1988) in time, on the fourth-order centred finite differences of ``rk4`` in space.
    With :math:`F(t, u) = \mathcal L u + \mathcal N(u) + f`, one step is the convex
    combination of forward-Euler steps

    .. math::
        u^{(1)} &= u^n + h F(t, u^n) \\
        u^{(2)} &= \tfrac34 u^n + \tfrac14 \big(u^{(1)} + h F(t + h, u^{(1)})\big) \\
        u^{n+1} &= \tfrac13 u^n + \tfrac23 \big(u^{(2)} + h F(t + h/2, u^{(2)})\big)

    so any norm or total-variation bound that forward Euler keeps for steps up to
    :math:`h_{FE}` it keeps for the same steps (SSP coefficient 1; Gottlieb, Shu & Tadmor
    2001). Third order in time, three right-hand sides a step (RK4 takes four). Its
    linear stability region is that of every three-stage third-order RK method,
    :math:`|1 + z + z^2/2 + z^3/6| \le 1`: 2.513 along the negative real axis (RK4:
    2.785) and :math:`\sqrt 3` along the imaginary axis (RK4: :math:`2\sqrt 2`);
    :meth:`stable_dt` traces it along rays as ``rk4`` does its own.
    """

    name = "ssprk3"
    order = 3
    spectral = False
    unconditionally_stable = False
    stability = (
        "h lambda inside the region |1 + z + z^2/2 + z^3/6| <= 1 (2.513 along the negative "
        "real axis, sqrt(3) along the imaginary one) for every eigenvalue lambda of the "
        "finite-difference linearisation: diffusive dt ~ dx^2/nu, advective ~ dx/max|u|"
    )
    description = "4th-order centred finite differences, explicit SSP-RK3 (order 3)"
    source = "Shu & Osher 1988, JCP 77, 439-471; SSP: Gottlieb, Shu & Tadmor 2001, SIAM Rev. 43"

    # the per-row coefficients of the linear terms, as rk4 builds and selects them
    coefficients = RK4FiniteDifferences.coefficients
    select = RK4FiniteDifferences.select

    def step(self, system, u, t, h, coefs, p, grid, source, carry):
        def euler(t, v):  # one forward-Euler step of the semi-discrete system from v
            rhs = _linear_fd(system, v, coefs) + system.nonlinear_fd(t, v, p, grid)
            return v + h * (rhs if source is None else rhs + source)

        u1 = euler(t, u)
        u2 = 0.75 * u + 0.25 * euler(t + h, u1)
        return u / 3.0 + (2.0 / 3.0) * euler(t + 0.5 * h, u2), carry

    def stable_dt(self, system, params, u0) -> float:
        return _rk_dt_limit(system.linearised_symbol(params, u0=u0, kind="fd").numpy(), 3)
