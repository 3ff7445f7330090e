r"""Steady 2D Darcy flow :math:`-\nabla\cdot(a\nabla u) = f` on a box with ``u = 0`` on the
boundary, solved by finite differences and batched conjugate gradients.

The FNO benchmark problem (Li et al. 2021, "Fourier neural operator for parametric
PDEs", ICLR, section 5.2; data generator ``data_generation/darcy`` of the FNO
repository): unit square, :math:`f = 1`, coefficient
:math:`a = \psi(g)` with :math:`g \sim \mathcal N(0, (-\Delta + 9I)^{-2})` (Laplacian
with zero Neumann conditions) and :math:`\psi = 12` on :math:`g \ge 0`, 3 on
:math:`g < 0`. PDEBench's 2D Darcy data (Takamoto et al. 2022) vary the constant
forcing :math:`\beta \in \{0.01, 0.1, 1, 10, 100\}`: here the parameter ``beta``.

Design choices the task left open, and why:

- **Grid.** Vertex-centred: ``n`` nodes per axis *including* both boundaries,
  :math:`x_i = i L / (n - 1)` (the FNO solver's grid, ``s = 421`` there). The unknowns
  are the ``(n - 2)^2`` interior nodes. The coefficient lives on the nodes.
- **Discretisation.** The conservative 5-point scheme
  :math:`\frac{1}{h^2}\sum_{\pm} a_{i\pm1/2,j}(u_{ij} - u_{i\pm1,j}) + \dots = f_{ij}`
  with face values the arithmetic mean of the two nodes (the FNO generator's
  ``solve_gwf.m``; default) or the harmonic mean (``face_average="harmonic"``: flux
  continuity across a jump of :math:`a`, the classic choice for discontinuous
  coefficients). Symmetric positive definite, second order for smooth :math:`a`.
- **Solver.** Matrix-free conjugate gradients with the Jacobi preconditioner,
  vectorised over the batch: every sample has its own step lengths and stops
  (its updates are masked) once its relative residual
  :math:`\|f - Au\|/\|f\|` is below ``tol``; the host checks every ``check_every``
  iterations whether all have stopped (one synchronisation per check on a GPU).
  Samples that do not converge in ``max_iter`` iterations raise
  :class:`simsci.errors.SolverError` naming them. Iterations grow like ``n``, so the
  method fits grids up to a few hundred points per axis (FNO's 421: ~1600
  iterations at tol 1e-8); a multigrid preconditioner would be the next step for larger grids.
- **The random coefficient.** The Gaussian field is the Karhunen-Loeve sum over the
  Neumann eigenfunctions :math:`\phi_{k}(x) \propto \cos(\pi k_1 x/L_1)\cos(\pi k_2 y/L_2)`,
  ``k`` = 0..n-1 per axis (as FNO's ``GRF.m``, which takes an inverse DCT), evaluated
  directly on the vertex grid (FNO samples cell centres and spline-interpolates the
  thresholded field onto the vertices, which smears the jumps). The mean mode is
  dropped; the overall scale does not matter after thresholding.
- **No time axis.** One episode is one frame at ``t = 0`` with channels
  ``("a", "u")``: the data map the coefficient channel to the solution channel. The
  trajectory format allows single-frame episodes.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
import torch.nn.functional as F

from simsci.errors import SolverError, unknown_name
from simsci.systems._pde import AXIS_NAMES, PDESystem
from simsci.systems._registry import register

__all__ = ["Darcy", "DarcyOptions"]

FACE_AVERAGES = ("arithmetic", "harmonic")


@dataclasses.dataclass(frozen=True)
class DarcyOptions:
    """Extra keywords of :meth:`Darcy.simulate`.

    ``tol``: relative residual :math:`\\|f - Au\\|_2/\\|f\\|_2` at which a sample stops
    (default 1e-8 in float64, 1e-5 in float32). ``max_iter``: CG iterations before a
    :class:`SolverError` (default ``20 * max(n) + 200``). ``forcing``: a right-hand
    side field ``(n0, n1)`` or ``(B, n0, n1)`` replacing the constant ``beta`` (the
    boundary values are ignored). ``check_every``: iterations between convergence
    checks on the host.
    """

    tol: float | None = None
    max_iter: int | None = None
    forcing: object = None
    check_every: int = 10

    def __post_init__(self):
        if self.tol is not None:
            if isinstance(self.tol, bool) or not isinstance(self.tol, (int, float, np.number)):
                raise TypeError(f"tol must be a number, got {self.tol!r}")
            if not (0 < self.tol < 1):
                raise ValueError(f"tol must lie in (0, 1), got {self.tol!r}")
        for name in ("max_iter", "check_every"):
            value = getattr(self, name)
            if value is None and name == "max_iter":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


# ------------------------------------------------------------------- numerics
def face_coefficients(a: torch.Tensor, average: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Face values of the nodal coefficient ``a`` ``(B, n0, n1)``.

    ``ax`` ``(B, n0 - 1, n1)`` between nodes ``(i, j)`` and ``(i + 1, j)``; ``ay``
    ``(B, n0, n1 - 1)`` between ``(i, j)`` and ``(i, j + 1)``.
    """
    lo0, hi0 = a[:, :-1, :], a[:, 1:, :]
    lo1, hi1 = a[:, :, :-1], a[:, :, 1:]
    if average == "harmonic":
        return 2.0 * lo0 * hi0 / (lo0 + hi0), 2.0 * lo1 * hi1 / (lo1 + hi1)
    return 0.5 * (lo0 + hi0), 0.5 * (lo1 + hi1)


def apply_operator(u_int, ax, ay, h0: float, h1: float) -> torch.Tensor:
    """:math:`Au = -\\nabla_h\\cdot(a\\nabla_h u)` on the interior ``(B, n0-2, n1-2)``,
    with ``u = 0`` on the boundary."""
    u = F.pad(u_int, (1, 1, 1, 1))
    fx = ax * (u[:, 1:, :] - u[:, :-1, :])
    fy = ay * (u[:, :, 1:] - u[:, :, :-1])
    return -(
        (fx[:, 1:, 1:-1] - fx[:, :-1, 1:-1]) / (h0 * h0)
        + (fy[:, 1:-1, 1:] - fy[:, 1:-1, :-1]) / (h1 * h1)
    )


def operator_diagonal(ax, ay, h0: float, h1: float) -> torch.Tensor:
    """Diagonal of :func:`apply_operator`'s matrix, ``(B, n0-2, n1-2)``."""
    return (ax[:, 1:, 1:-1] + ax[:, :-1, 1:-1]) / (h0 * h0) + (
        ay[:, 1:-1, 1:] + ay[:, 1:-1, :-1]
    ) / (h1 * h1)


def batched_pcg(apply, b, inv_diag, x0, tol: float, max_iter: int, check_every: int = 10):
    """Jacobi-preconditioned conjugate gradients for ``B`` independent SPD systems.

    ``apply(x)`` maps ``(B, ...)`` to ``(B, ...)``; ``b``, ``inv_diag``, ``x0`` have that
    shape. A sample stops updating once :math:`\\|r\\|_2 \\le` ``tol`` :math:`\\|b\\|_2`.
    Returns ``(x, relres, iterations)``, the last two ``(B,)`` (``relres`` of the
    recursively updated residual).
    """
    B = b.shape[0]
    dims = tuple(range(1, b.ndim))
    col = (B,) + (1,) * (b.ndim - 1)
    bnorm = torch.linalg.vector_norm(b, dim=dims)
    bnorm = torch.where(bnorm > 0, bnorm, torch.ones_like(bnorm))
    x = x0.clone()
    r = b - apply(x)
    z = inv_diag * r
    p = z.clone()
    rz = (r * z).sum(dims)
    relres = torch.linalg.vector_norm(r, dim=dims) / bnorm
    active = relres > tol
    iters = torch.zeros(B, dtype=torch.int64, device=b.device)
    if not bool(active.any()):
        return x, relres, iters
    one = torch.ones_like(rz)
    for it in range(1, max_iter + 1):
        ap = apply(p)
        pap = (p * ap).sum(dims)
        ok = active & (pap > 0)
        alpha = torch.where(ok, rz / torch.where(ok, pap, one), 0.0)
        x = x + alpha.reshape(col) * p
        r = r - alpha.reshape(col) * ap
        relres = torch.where(active, torch.linalg.vector_norm(r, dim=dims) / bnorm, relres)
        iters = iters + active.to(torch.int64)
        active = active & (relres > tol)
        if it % check_every == 0 and not bool(active.any()):
            break
        z = inv_diag * r
        rz_new = (r * z).sum(dims)
        ok = active & (rz != 0)
        beta = torch.where(ok, rz_new / torch.where(ok, rz, one), 0.0)
        p = z + beta.reshape(col) * p
        rz = rz_new
    return x, relres, iters


def neumann_grf(n: int, resolution, domain, *, alpha: float, tau: float, generator, device):
    r"""Mean-zero Gaussian fields with covariance :math:`(-\Delta_N + \tau^2)^{-\alpha}` on
    the vertex grid of ``[0, L_0] x [0, L_1]`` (zero-Neumann Laplacian), float64
    ``(n, n0, n1)``; cosine modes ``0..n_a - 1`` per axis."""
    mats = []
    lam = None
    for axis, (N, L) in enumerate(zip(resolution, domain)):
        k = torch.arange(N, dtype=torch.float64, device=device)
        x = torch.arange(N, dtype=torch.float64, device=device) * (L / (N - 1))
        basis = torch.cos(math.pi * x[:, None] * k[None, :] / L)
        basis[:, 1:] *= math.sqrt(2.0 / L)
        basis[:, 0] *= math.sqrt(1.0 / L)
        mats.append(basis)
        ev = (math.pi * k / L) ** 2
        ev = ev[:, None] if axis == 0 else ev[None, :]
        lam = ev if lam is None else lam + ev
    scale = (lam + tau * tau) ** (-0.5 * alpha)
    scale[0, 0] = 0.0
    xi = torch.randn((n, *resolution), generator=generator, device=device, dtype=torch.float64)
    return mats[0] @ (scale * xi) @ mats[1].T


# ---------------------------------------------------------------------- system
@register
class Darcy(PDESystem):
    r"""Steady Darcy flow :math:`-\nabla\cdot(a\nabla u) = \beta` on the unit square,
    :math:`u = 0` on the boundary (the FNO / PDEBench benchmark; module docstring).

    **The operator maps a to u.** A state is ``(B, n0, n1, 2)`` with channels
    ``("a", "u")`` on the vertex grid :math:`x_i = i/(n-1)` (boundary nodes included).
    :meth:`simulate` takes ``u0`` whose ``"a"`` channel is the coefficient (finite,
    > 0) and whose ``"u"`` channel is the CG starting guess (zeros from
    :meth:`sample_initial`; its boundary values are ignored), and returns
    ``(B, 1, n0, n1, 2)``: one frame at ``t = 0`` with the coefficient unchanged and
    the solution in ``"u"``. There is no time axis (``t`` may be omitted or a single
    time) and no time step. Parameter ``beta`` (default 1, FNO's :math:`f = 1`): the
    constant forcing; ``forcing=`` in :meth:`simulate` gives a field instead.

    Options: ``resolution`` (default 128 x 128; FNO solved at 421 x 421 and subsampled
    to 85-211, PDEBench stores 128 x 128), ``domain``, ``face_average``
    (``"arithmetic"``, FNO's, default; or ``"harmonic"``). Initial fields
    (``ic="threshold"``): :math:`a = 12` where the Neumann GRF (alpha 2, tau 3) is
    :math:`\ge 0`, else 3.

    ``drift`` is the pseudo-time right-hand side :math:`\partial_\tau u =
    \nabla\cdot(a\nabla u) + f` whose steady state is the solution (zero rate for
    ``a`` and on the boundary). ``simulate`` is not differentiable (the CG loop runs
    under ``torch.no_grad``).
    """

    name = "darcy"
    spatial_dims = 2
    channel_names = ("a", "u")
    domain = (1.0, 1.0)
    periodic = False
    pde_order = 2
    param_names = ("beta",)
    default_params = {"beta": 1.0}
    valid_ranges = {"beta": "(-inf, inf)"}
    default_resolution = (128, 128)
    methods = {"cg": "5-point finite differences, batched Jacobi-preconditioned CG"}
    default_method = "cg"
    default_dt = 1.0
    default_save_dt = 1.0
    default_t_end = 0.0
    options = ("resolution", "domain", "ic", "face_average")
    ic_kinds = ("threshold",)
    ic_params = {"alpha": 2.0, "tau": 3.0}
    #: coefficient values where the Gaussian field is >= 0 / < 0 (FNO: 12 and 3)
    a_high = 12.0
    a_low = 3.0
    #: one frame per episode; :func:`simsci.systems.generate` needs a path for this
    steady = True

    def __init__(
        self,
        resolution=None,
        *,
        domain=None,
        ic: str = "threshold",
        face_average: str = "arithmetic",
        **params,
    ):
        super().__init__(resolution, domain=domain, ic=ic, **params)
        if face_average not in FACE_AVERAGES:
            raise unknown_name("face_average of 'darcy'", face_average, FACE_AVERAGES)
        self.face_average = face_average

    def config(self) -> dict:
        cfg = super().config()
        cfg["options"]["face_average"] = self.face_average
        return cfg

    @property
    def spacing(self) -> tuple[float, float]:
        """Node spacing ``L / (n - 1)`` per axis."""
        return tuple(L / (n - 1) for n, L in zip(self.resolution, self.domain))

    def coords(self) -> dict[str, np.ndarray]:
        """Vertex-grid coordinates ``x_i = i L / (n - 1)``, both boundaries included."""
        return {
            AXIS_NAMES[a]: np.linspace(0.0, L, n)
            for a, (n, L) in enumerate(zip(self.resolution, self.domain))
        }

    # ----------------------------------------------------------- sampling
    def _sample_initial(self, n, generator, device):
        g = neumann_grf(
            n, self.resolution, self.domain, generator=generator, device=device, **self.ic_params
        )
        a = torch.where(g >= 0, self.a_high, self.a_low).to(torch.float64)
        return torch.stack([a, torch.zeros_like(a)], dim=-1)

    # ----------------------------------------------------------- operator
    def _forcing(self, opts: DarcyOptions, p: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        B = like.shape[0]
        n0, n1 = self.resolution
        if opts.forcing is None:
            beta = p[:, 0].to(like.dtype).reshape(B, 1, 1)
            return beta.expand(B, n0 - 2, n1 - 2)
        f = opts.forcing
        if not isinstance(f, torch.Tensor):
            f = torch.as_tensor(np.asarray(f, dtype=np.float64))
        f = f.to(device=like.device, dtype=like.dtype)
        if f.shape == (n0, n1):
            f = f.expand(B, n0, n1)
        if f.shape != (B, n0, n1):
            raise ValueError(
                f"darcy: forcing must have shape ({n0}, {n1}) or ({B}, {n0}, {n1}) (the node "
                f"grid), got {tuple(f.shape)}"
            )
        if not bool(torch.isfinite(f).all()):
            raise ValueError("darcy: forcing contains NaN or inf values")
        return f[:, 1:-1, 1:-1]

    def _check_coefficient(self, a: torch.Tensor) -> None:
        low = a.detach().reshape(a.shape[0], -1).amin(dim=1)
        bad = torch.nonzero(~(low > 0)).flatten().tolist()
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise ValueError(
                f"darcy: the coefficient a (channel 'a' of u0) must be > 0 everywhere for an "
                f"elliptic problem; sample {bad[0]}{more} has min a = "
                f"{float(low[bad[0]]):g}. Give a positive permeability field"
            )

    def _operator(self, a: torch.Tensor):
        ax, ay = face_coefficients(a, self.face_average)
        h0, h1 = self.spacing
        diag = operator_diagonal(ax, ay, h0, h1)
        return (lambda u: apply_operator(u, ax, ay, h0, h1)), diag

    def residual(self, state, params=None, *, forcing=None) -> torch.Tensor:
        """Relative residual :math:`\\|f - Au\\|_2 / \\|f\\|_2` of states ``(B, n0, n1, 2)``
        on the interior nodes, ``(B,)``."""
        state = self.check_state(state, "state")
        p = self._batch_params(params, state.shape[0], state)
        f = self._forcing(DarcyOptions(forcing=forcing), p, state)
        apply, _ = self._operator(state[..., 0])
        r = f - apply(state[:, 1:-1, 1:-1, 1])
        dims = (1, 2)
        fn = torch.linalg.vector_norm(f, dim=dims)
        return torch.linalg.vector_norm(r, dim=dims) / torch.where(fn > 0, fn, 1.0)

    def drift(self, t, u, p):
        """Pseudo-time rate ``(B, n0, n1, 2)``: :math:`\\nabla\\cdot(a\\nabla u) + \\beta`
        on interior nodes of channel ``u``, zero elsewhere."""
        apply, _ = self._operator(u[..., 0])
        f = self._forcing(DarcyOptions(), p, u)
        rate = F.pad(f - apply(u[:, 1:-1, 1:-1, 1]), (1, 1, 1, 1))
        return torch.stack([torch.zeros_like(rate), rate], dim=-1)

    def stable_dt(self, params=None, method=None, *, u0=None) -> float:
        """No time stepping: ``inf`` (the method name is still checked)."""
        self._check_method(method)
        return math.inf

    # ----------------------------------------------------------- solve
    def _check_grid(self, grid, method):
        if grid is None:
            return
        if not isinstance(grid, dict):
            raise TypeError('darcy: grid must be a dict {"x": ..., "y": ...} of node coordinates')
        expected = self.coords()
        for key, coords in grid.items():
            if key not in expected:
                raise ValueError(f"darcy: grid keys must be among {tuple(expected)}, got {key!r}")
            x = np.asarray(
                coords.detach().cpu() if isinstance(coords, torch.Tensor) else coords,
                dtype=np.float64,
            )
            ref = expected[key]
            if x.shape != ref.shape or not np.allclose(x, ref, rtol=0, atol=1e-8 * ref[-1]):
                raise ValueError(
                    f"darcy: method {method!r} uses a uniform vertex grid; grid {key!r} must be "
                    f"{ref.shape[0]} equispaced nodes from 0 to {ref[-1]:g} (boundaries "
                    "included), e.g. numpy.linspace; resample non-uniform data first"
                )

    def simulate(
        self,
        u0,
        t=None,
        params=None,
        *,
        method: str | None = None,
        dt: float | None = None,
        grid=None,
        **options,
    ) -> torch.Tensor:
        """Solve for every sample; return ``(B, 1, n0, n1, 2)`` (channels ``a``, ``u``).

        ``u0`` ``(B, n0, n1, 2)``: coefficient and starting guess (see the class
        docstring). ``t``: None or a single time (the frame's time stamp). ``params``:
        ``beta`` rows as for :meth:`System.simulate`. ``options``: :class:`DarcyOptions`.

        Raises ValueError for non-finite input (naming the sample), a coefficient
        that is not positive, more than one output time, a time step, or a grid other
        than the vertex grid; :class:`simsci.errors.SolverError` naming the samples whose
        CG did not reach ``tol`` in ``max_iter`` iterations.
        """
        opts = DarcyOptions(**options)
        u0 = self._check_u0(u0)
        method = self._check_method(method)
        if dt is not None:
            raise ValueError(
                "darcy is a steady problem solved by conjugate gradients; it has no time step "
                f"(got dt={dt!r}). Drop dt; use tol/max_iter to control the solve"
            )
        if t is not None:
            times = np.asarray(
                t.detach().cpu() if isinstance(t, torch.Tensor) else t, dtype=np.float64
            ).reshape(-1)
            if times.shape[0] != 1 or not np.isfinite(times).all():
                raise ValueError(
                    f"darcy is steady: one episode is one frame, so t must be None or a single "
                    f"finite time (e.g. [0.0]); got {times.shape[0]} times"
                )
        self._check_grid(grid, method)
        B = u0.shape[0]
        p = self._batch_params(params, B, u0)
        a = u0[..., 0]
        self._check_coefficient(a)
        tol = opts.tol if opts.tol is not None else (1e-8 if u0.dtype == torch.float64 else 1e-5)
        max_iter = opts.max_iter or 20 * max(self.resolution) + 200
        with torch.no_grad():
            f = self._forcing(opts, p, u0)
            apply, diag = self._operator(a)
            x0 = u0[:, 1:-1, 1:-1, 1]
            x, relres, iters = batched_pcg(
                apply, f, 1.0 / diag, x0, tol, max_iter, opts.check_every
            )
        failed = torch.nonzero(~(relres <= tol)).flatten().tolist()
        if failed:
            more = f" and {len(failed) - 1} more ({failed[:10]})" if len(failed) > 1 else ""
            raise SolverError(
                f"darcy: conjugate gradients did not converge for sample {failed[0]}{more}: "
                f"relative residual {float(relres[failed[0]]):.3g} > tol={tol:g} after "
                f"{max_iter} iterations. Raise max_iter, loosen tol, or check the coefficient "
                "contrast of those samples",
                samples=failed,
                time=0.0,
            )
        self.last_iterations = iters
        u = F.pad(x, (1, 1, 1, 1))
        return torch.stack([a.detach(), u], dim=-1)[:, None]
