r"""Flows on known low-dimensional manifolds, lifted into R^D by a random smooth embedding.

Ground truth for learned dynamics that must stay on a learned data manifold (GFG): the
state ``x`` lives in R^D, but only on a k-dimensional manifold ``M = Phi(M0)`` that is
known exactly, so a model can be scored by how far its states leave ``M``
(:meth:`LiftedFlow.distance`), by the true tangent projector
(:meth:`LiftedFlow.tangent_projector`), and compared with a "known-manifold" ceiling
that uses :meth:`LiftedFlow.project` and the true tangent spaces.

**Base flows** (``LIFTED_FLOWS``; coordinates ``u`` in R^m, on ``M0``):

- ``"circle"`` (k = 1, m = 2): ``u = (cos th, sin th)`` on the unit circle,
  :math:`\dot\theta = \omega (1 + a \cos\theta)`; defaults omega = 1, a = 0.5. For
  0 <= a < 1 the rate never vanishes: one periodic orbit (the whole circle), period
  :math:`2\pi / (\omega\sqrt{1 - a^2})` (7.255 at the defaults), traversed non-uniformly.
- ``"torus"`` (k = 2, m = 4): ``u = (cos th1, sin th1, cos th2, sin th2)`` on the flat
  torus, two coupled phase oscillators :math:`\dot\theta_1 = w_1 + k\sin(\theta_2 -
  \theta_1)`, :math:`\dot\theta_2 = w_2 + k\sin(\theta_1 - \theta_2)`; defaults w1 = 1,
  w2 = sqrt 2, k = 0.1. The phase difference obeys :math:`\dot\phi = (w_2 - w_1) - 2k
  \sin\phi`, which locks only when |w2 - w1| <= 2k; at the defaults (0.414 > 0.2) it
  drifts, the mean frequencies are (w1 + w2)/2 -/+ sqrt((w2 - w1)^2 - 4k^2)/2 = 1.026 and
  1.389 (ratio 1.354): quasi-periodic, dense on the torus.
- ``"rigid_body"`` (k = 2, m = 3): the free rigid body (Euler's equations, the drift of
  ``simsci.systems.get("rigid_body")``) on the unit sphere |m| = 1, inertia
  I = (2, 1, 2/3); both |m| and the energy are conserved, orbits are closed curves.
- ``"lorenz63"`` (k = 3, m = 3): Lorenz-63 (the drift of ``get("lorenz63")``, sigma = 10,
  rho = 28, beta = 8/3) in scaled coordinates ``u = ((x, y, z) - (0, 0, 25)) / 10`` (so
  u is O(1); time unchanged). M0 = R^3, so ``M = Phi(R^3)`` is a 3-D manifold and the
  attractor lies on it. The scaling is fixed (it does not follow ``rho``).

**Embedding.** :math:`\Phi(u) = c + W_1 u + \varepsilon W_2 \tanh(W_3 u + b)` with
W1 (D, m) orthonormal columns (QR of a Gaussian), W3 (H, m) i.i.d. N(0, freq^2), b ~
N(0, 1) (H,), W2 (D, H) in the orthogonal complement of W1's columns (W1^T W2 = 0) with
orthonormal columns (orthonormal rows of that complement when H > D - m, so
||W2||_2 = 1), c ~ N(0, I/D) (D,), hidden width H = 32, and
:math:`\varepsilon = \text{bend} / (\|W_2\|_2 \|W_3\|_2)`, so the nonlinear part has
Lipschitz constant at most ``bend`` (default 2). Because W1^T Phi(u) = W1^T c + u, for
all u, u' in R^m

.. math:: |u - u'| \le |\Phi(u) - \Phi(u')| \le (1 + \text{bend})\,|u - u'|,

i.e. Phi is bi-Lipschitz (an injective immersion with a continuous inverse on its
image: an embedding) whatever ``bend`` is, and W1^T (x - c) is the base point of any x
on M exactly. Everything is drawn from ``seed`` (a NumPy SeedSequence stream) in
float64 on the CPU; methods cast to the input's device and dtype.

Why the complement: a first version added the nonlinear part in any direction and
capped its Lipschitz constant at 0.5 to stay injective; that kept M nearly flat (0.3 %
of the data's variance off its best m-dimensional subspace), too flat for an ambient
model to drift off. Orthogonal to W1 the nonlinear part cannot break injectivity, so
it may bend M as much as ``bend`` says. ``freq`` = 1: tanh arguments vary by O(1)
over the unit-scale data, each unit bends once inside it.

**Nearest point.** :meth:`LiftedFlow.nearest` minimises :math:`|x - \Phi(u)|^2` over u in
M0: start from the linear pseudo-inverse :math:`W_1^T (x - c)` retracted onto M0 (the
nonlinear part moves a point by at most half its distance, so this lands close), then
Levenberg-Marquardt steps in the tangent space of M0 (coordinates in an orthonormal
basis of T_u M0, closed-form Jacobian), each followed by the retraction (normalise for
circle and sphere, per (cos, sin) pair for the torus, identity for Lorenz). A step is
kept only when it lowers the residual (damping x0.1 on success, x10 on failure), or
when it is below 1e-6: there the cost changes by less than its rounding error, so the
test would stall the iteration at sqrt(machine eps), and the step is in the
Gauss-Newton regime anyway. The iteration stops when every proposed step is below
1e-12 (float64). On M the residual is zero and Gauss-Newton converges quadratically
(3 iterations to ~1e-14 at the defaults); off M, within the reach, it converges
linearly to the true nearest point (7-11 iterations to 1e-11 for normal offsets of 0.3;
errors below 1e-12 measured for random normal offsets up to 1 at D = 64; on the
circle it matches a brute-force search).

**Simulation.** :meth:`LiftedFlow.simulate` integrates du/dt in base coordinates with
``simsci.integrate.odeint`` (dopri5, rtol 1e-8, atol 1e-10). The circle, torus and
sphere vector fields are tangent to every level set of |u| (per pair for the torus), so
the exact flow stays on M0; the solver's ~1e-10 drift off it is removed by retracting
every output state (dividing by the norm), which leaves the rigid body's energy
conserved to solver accuracy.

**Data sets** ``lifted_circle``, ``lifted_torus``, ``lifted_rigid_body``,
``lifted_lorenz63`` (:func:`simsci.datasets.make_dataset`): few sparse trajectories,
kind "state", system ``"lifted_<flow>"``. Per step: ``t``; ``x`` (S, D) the lifted state
(plus i.i.d. N(0, noise^2) when ``noise > 0``, then the clean state as ``x_clean``);
``v`` (S, D) the true ambient velocity :math:`J_\Phi(u)\dot u` at the clean state;
``u`` (S, m) the base coordinates. ``/episodes/params`` holds the flow parameters,
``/episodes/split`` the split; ``meta["manifold"]`` is :meth:`LiftedFlow.config`
(rebuild with :func:`lifted_from_config`). The grid is ``steps + 1`` regular points on
[0, t_end]; ``keep < 1`` keeps a random subset of them per episode (irregular times).
Defaults ("few, sparse trajectories"; n is the caller's, 8-16 for the GFG benchmark):
D = 64, steps = 50 (51 points), keep = 1, noise = 0, split (0.6, 0.2, 0.2), and t_end
14.5 for the circle (2 periods), 12 for the torus (~2 and ~2.7 turns of the two
phases), 16 for the rigid body (its periods over the unit sphere spread from ~9.5 to
~19, median 12.4: 1-2 periods) and 2 for Lorenz-63 (dt 0.04, ~2 Lyapunov times).
"""

from __future__ import annotations

import difflib
import functools
import math
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from simsci import data as sdata
from simsci._seeding import (
    check_fraction,
    check_positive,
    check_split,
    kept_indices,
    progress_bar,
    split_ids,
    streams,
)
from simsci.datasets._registry import BuildOptions, check_compression, register_dataset
from simsci.errors import UnknownNameError, unknown_name
from simsci.integrate import odeint
from simsci.systems import Interval, get

#: rtol, atol of the dopri5 solves
RTOL, ATOL = 1e-8, 1e-10
#: nearest() stops when every step is below max(_NEAREST_TOL, 50 eps) (eps: the dtype's)
_NEAREST_TOL = 1e-12
_NEAREST_ITERATIONS = 60
#: steps below max(_SMALL_STEP, 10 sqrt(eps)) skip the LM cost test (see nearest)
_SMALL_STEP = 1e-6


def _as_tensor(value, what: str) -> torch.Tensor:
    """A floating tensor (float64 for non-tensors and integer tensors)."""
    if not isinstance(value, torch.Tensor):
        value = torch.as_tensor(np.asarray(value, dtype=np.float64))
    if not torch.is_floating_point(value):
        value = value.to(torch.float64)
    if value.ndim == 0:
        raise ValueError(f"{what} must have at least one axis (..., dim), got a scalar")
    return value


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class _Embedding:
    """The fixed map Phi: R^m -> R^D (module docstring), float64 master copies."""

    def __init__(self, base_dim: int, dim: int, hidden: int, freq: float, seed: int, bend: float):
        self.base_dim, self.dim, self.hidden = base_dim, dim, hidden
        self.freq, self.seed, self.bend = freq, seed, bend
        g = streams(seed, ("embedding",))["embedding"]
        f64 = torch.float64
        w1 = _orthonormal(torch.randn(dim, base_dim, generator=g, dtype=f64))
        w3 = freq * torch.randn(hidden, base_dim, generator=g, dtype=f64)
        b = torch.randn(hidden, generator=g, dtype=f64)
        # W2 maps into the orthogonal complement of W1's columns (W1^T W2 = 0), with
        # orthonormal columns, or orthonormal rows of the complement when H > D - m
        free = dim - base_dim
        out_of_w1 = torch.eye(dim, dtype=f64) - w1 @ w1.T
        if hidden <= free:
            w2 = _orthonormal(out_of_w1 @ torch.randn(dim, hidden, generator=g, dtype=f64))
        else:
            basis = _orthonormal(out_of_w1 @ torch.randn(dim, free, generator=g, dtype=f64))
            rows = _orthonormal(torch.randn(hidden, free, generator=g, dtype=f64)).T
            w2 = (basis @ rows).contiguous()
        c = torch.randn(dim, generator=g, dtype=f64) / math.sqrt(dim)
        norms = torch.linalg.matrix_norm(w2, ord=2) * torch.linalg.matrix_norm(w3, ord=2)
        self.eps = float(bend / norms)
        self._master = (c, w1, w2 * self.eps, w3, b)  # eps folded into W2
        self._cache: dict = {}

    def tensors(self, like: torch.Tensor):
        key = (like.device, like.dtype)
        if key not in self._cache:
            self._cache[key] = tuple(
                t.to(device=like.device, dtype=like.dtype) for t in self._master
            )
        return self._cache[key]

    def embed(self, u):
        c, w1, w2, w3, b = self.tensors(u)
        return c + u @ w1.T + torch.tanh(u @ w3.T + b) @ w2.T

    def jacobian(self, u):
        """(..., D, m)."""
        c, w1, w2, w3, b = self.tensors(u)
        s = 1.0 - torch.tanh(u @ w3.T + b) ** 2  # (..., H)
        return w1 + (w2 * s[..., None, :]) @ w3

    def push(self, u, vectors):
        """J_Phi(u) @ vectors for vectors (..., m, j) -> (..., D, j), without forming J."""
        c, w1, w2, w3, b = self.tensors(u)
        s = 1.0 - torch.tanh(u @ w3.T + b) ** 2
        return w1 @ vectors + w2 @ (s[..., :, None] * (w3 @ vectors))


def _orthonormal(a: torch.Tensor) -> torch.Tensor:
    """Orthonormal columns spanning a's, made unique by a positive diagonal of R."""
    q, r = torch.linalg.qr(a)
    sign = torch.where(torch.diagonal(r) < 0, -1.0, 1.0).to(a.dtype)
    return q * sign


def _unit(v: torch.Tensor, fallback: int = 0) -> torch.Tensor:
    """v / |v| along the last axis; a zero vector becomes the basis vector ``fallback``."""
    n = v.norm(dim=-1, keepdim=True)
    e = torch.zeros_like(v)
    e[..., fallback] = 1.0
    return torch.where(n > 0, v / torch.where(n > 0, n, 1.0), e)


class LiftedFlow:
    """A flow on a base manifold M0 in R^m, lifted into R^D by a fixed embedding Phi.

    Build with :func:`lifted_flow` (``lifted_flow("circle", dim=64, seed=0, a=0.3)``).
    Attributes: ``name``, ``manifold_dim`` k, ``base_dim`` m, ``ambient_dim`` D,
    ``params`` (dict), ``seed``, ``hidden``, ``freq``, ``coordinate_names``. Every method
    is batched over leading axes and follows its input's device and dtype (non-tensors
    become float64). ``u`` has shape (..., m), ``x`` (..., D).
    """

    name: ClassVar[str] = ""
    manifold_dim: ClassVar[int] = 0
    base_dim: ClassVar[int] = 0
    coordinate_names: ClassVar[tuple[str, ...]] = ()
    default_params: ClassVar[dict[str, float]] = {}
    valid_ranges: ClassVar[dict[str, str]] = {}
    #: constraint violation of u0 accepted by simulate (then retracted exactly)
    on_manifold_tol: ClassVar[float] = 1e-6

    def __init__(
        self,
        *,
        dim: int = 64,
        seed: int = 0,
        hidden: int = 32,
        freq: float = 1.0,
        bend: float = 2.0,
        _embedding: _Embedding | None = None,
        **params,
    ):
        unknown = [k for k in params if k not in self.default_params]
        if unknown:
            raise self._unknown_parameter(unknown[0])
        merged = dict(self.default_params)
        for key, value in params.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise TypeError(
                    f"parameter {key!r} of lifted flow {self.name!r} must be a real number, "
                    f"got {value!r}"
                )
            interval = Interval.parse(self.valid_ranges.get(key, "(-inf, inf)"))
            if not bool(interval.contains(float(value))):
                raise ValueError(
                    f"parameter {key!r} of lifted flow {self.name!r} must be finite and lie "
                    f"in {interval}, got {value!r}"
                )
            merged[key] = float(value)
        self.params: dict[str, float] = merged
        if _embedding is None:
            if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
                raise TypeError(f"dim must be an integer, got {dim!r}")
            if dim <= self.base_dim:
                raise ValueError(
                    f"dim (the ambient dimension D) must exceed the base dimension m = "
                    f"{self.base_dim} of lifted flow {self.name!r}, got dim={dim}; pick e.g. "
                    "dim=64"
                )
            hidden = _check_int("hidden", hidden, 1)
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
                raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
            if isinstance(freq, bool) or not isinstance(freq, (int, float, np.number)):
                raise TypeError(f"freq must be a number, got {freq!r}")
            if not (math.isfinite(freq) and freq > 0):
                raise ValueError(f"freq (the scale of W3) must be finite and > 0, got {freq!r}")
            if isinstance(bend, bool) or not isinstance(bend, (int, float, np.number)):
                raise TypeError(f"bend must be a number, got {bend!r}")
            if not (math.isfinite(bend) and bend > 0):
                raise ValueError(
                    f"bend (the Lipschitz constant of the embedding's nonlinear part) must "
                    f"be finite and > 0, got {bend!r}"
                )
            _embedding = _Embedding(
                self.base_dim, int(dim), hidden, float(freq), int(seed), float(bend)
            )
        self._phi = _embedding
        self.ambient_dim = _embedding.dim
        self.seed, self.hidden, self.freq = _embedding.seed, _embedding.hidden, _embedding.freq
        self.bend = _embedding.bend

    # ------------------------------------------------------------ description
    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v:g}" for k, v in self.params.items())
        return (
            f"{type(self).__name__}({self.name!r}, D={self.ambient_dim}, k={self.manifold_dim}"
            f", m={self.base_dim}, seed={self.seed}, {params})"
        )

    def _unknown_parameter(self, name: str) -> UnknownNameError:
        valid = list(self.default_params)
        close = difflib.get_close_matches(str(name), valid, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return UnknownNameError(
            f"unknown parameter {name!r} for lifted flow {self.name!r}.{hint} Valid "
            f"parameters: {', '.join(valid)}."
        )

    @property
    def embedding_scale(self) -> float:
        """eps, the factor in front of the nonlinear part."""
        return self._phi.eps

    def config(self) -> dict:
        """JSON-able description; :func:`lifted_from_config` rebuilds this flow exactly."""
        return {
            "flow": self.name,
            "params": dict(self.params),
            "dim": self.ambient_dim,
            "seed": self.seed,
            "hidden": self.hidden,
            "freq": self.freq,
            "bend": self.bend,
            "manifold_dim": self.manifold_dim,
            "base_dim": self.base_dim,
            "embedding": "c + W1 u + eps W2 tanh(W3 u + b)",
            "eps": self._phi.eps,
        }

    def with_params(self, **changes) -> LiftedFlow:
        """The same embedding (same tensors) with other flow parameters ("wrong physics")."""
        for key in changes:
            if key not in self.default_params:
                raise self._unknown_parameter(key)
        return type(self)(_embedding=self._phi, **{**self.params, **changes})

    # ------------------------------------------------------------ input checks
    def _base(self, u, what: str = "u") -> torch.Tensor:
        u = _as_tensor(u, what)
        if u.shape[-1] != self.base_dim:
            raise ValueError(
                f"lifted flow {self.name!r}: {what} must have shape (..., {self.base_dim}) "
                f"(base coordinates {', '.join(self.coordinate_names)}), got {tuple(u.shape)}"
            )
        return u

    def _ambient(self, x, what: str = "x") -> torch.Tensor:
        x = _as_tensor(x, what)
        if x.shape[-1] != self.ambient_dim:
            raise ValueError(
                f"lifted flow {self.name!r}: {what} must have shape (..., {self.ambient_dim}) "
                f"(the ambient dimension D), got {tuple(x.shape)}"
            )
        bad = ~torch.isfinite(x)
        if bool(bad.any()):
            raise ValueError(
                f"lifted flow {self.name!r}: {what} must be finite; it has "
                f"{int(bad.sum())} NaN/inf entries (first at index "
                f"{tuple(int(i) for i in bad.nonzero()[0])}); drop or impute them first"
            )
        return x

    # ------------------------------------------------------------ base manifold (per flow)
    def velocity(self, u) -> torch.Tensor:
        """du/dt (..., m) in base coordinates, tangent to M0."""
        return self._velocity(self._base(u))

    def _velocity(self, u: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def retract(self, u) -> torch.Tensor:
        """The point of M0 that u (..., m) normalises to (identity where M0 = R^m)."""
        return self._retract(self._base(u))

    def _retract(self, u: torch.Tensor) -> torch.Tensor:
        return u

    def tangent_basis(self, u) -> torch.Tensor:
        """(..., m, k): orthonormal columns spanning T_u M0 (u on M0, or retracted)."""
        return self._tangent_basis(self._base(u))

    def _tangent_basis(self, u: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _constraint(self, u: torch.Tensor) -> torch.Tensor:
        """(...,) how far u is from M0 (0 on it)."""
        return (self._retract(u) - u).norm(dim=-1)

    def sample_initial(
        self,
        n: int,
        generator: torch.Generator | None = None,
        *,
        device=None,
        dtype=torch.float64,
    ) -> torch.Tensor:
        """(n, m) initial states on M0 (drawn in float64 on the generator's device)."""
        n = _check_int("n", n, 1)
        gen_device = generator.device if generator is not None else torch.device("cpu")
        u = self._sample_initial(n, generator, gen_device)
        return u.to(device=device, dtype=dtype)

    def _sample_initial(self, n, generator, device) -> torch.Tensor:
        raise NotImplementedError

    # ------------------------------------------------------------ the lift
    def embed(self, u) -> torch.Tensor:
        """x = Phi(u): (..., m) -> (..., D)."""
        return self._phi.embed(self._base(u))

    def embed_jacobian(self, u) -> torch.Tensor:
        """dPhi/du (..., D, m), closed form."""
        return self._phi.jacobian(self._base(u))

    def ambient_velocity(self, u) -> torch.Tensor:
        """dx/dt = J_Phi(u) du/dt (..., D)."""
        u = self._base(u)
        return self._phi.push(u, self._velocity(u)[..., None])[..., 0]

    def simulate(self, u0, t, *, rtol: float = RTOL, atol: float = ATOL) -> torch.Tensor:
        """Trajectories (B, T, m) from u0 (B, m) on M0 at times ``t`` ((T,) or (B, T), as
        for :func:`simsci.integrate.odeint`); every output state is retracted onto M0."""
        u0 = self._base(u0, "u0")
        if u0.ndim != 2:
            raise ValueError(
                f"lifted flow {self.name!r}: u0 must have shape (B, {self.base_dim}), got "
                f"{tuple(u0.shape)}; add a batch axis for one state: u0[None]"
            )
        off = self._constraint(u0)
        if bool((~torch.isfinite(u0)).any()) or bool((off > self.on_manifold_tol).any()):
            raise ValueError(
                f"lifted flow {self.name!r}: u0 must be finite and lie on M0 (within "
                f"{self.on_manifold_tol:g}); the worst row is {float(off.max()):.3g} off it. "
                "Project it first: flow.retract(u0)"
            )
        us = odeint(
            lambda _t, y: self._velocity(y),
            self._retract(u0),
            t,
            method="dopri5",
            rtol=rtol,
            atol=atol,
        )
        return self._retract(us)

    # ------------------------------------------------------------ the manifold M in R^D
    def nearest(
        self, x, *, max_iterations: int = _NEAREST_ITERATIONS, tol: float | None = None
    ) -> torch.Tensor:
        """u* (..., m) on M0 with Phi(u*) the closest point of M to x (..., D).

        Pseudo-inverse start + Levenberg-Marquardt on M0 (module docstring). Converges to
        ~1e-12 on M and to the true nearest point for x within the reach of M; far from M
        it may stop at a local minimum of the distance. ``tol``: the step size at which to
        stop (default 1e-12 in float64, 50 eps in lower precision).
        """
        x = self._ambient(x)
        eps = torch.finfo(x.dtype).eps
        tol = max(_NEAREST_TOL, 50 * eps) if tol is None else float(tol)
        small_step = max(_SMALL_STEP, 10 * math.sqrt(eps))
        c, w1 = self._phi.tensors(x)[:2]
        u = self._retract((x - c) @ w1)
        r = x - self._phi.embed(u)
        cost = (r * r).sum(-1)
        damping = torch.full_like(cost, 1e-4)
        eye = torch.eye(self.manifold_dim, dtype=x.dtype, device=x.device)
        for _ in range(max_iterations):
            basis = self._tangent_basis(u)  # (..., m, k)
            jac = self._phi.push(u, basis)  # (..., D, k)
            gram = jac.transpose(-1, -2) @ jac
            grad = (jac.transpose(-1, -2) @ r[..., None])[..., 0]
            scale = torch.diagonal(gram, dim1=-2, dim2=-1).mean(-1)[..., None, None]
            step = torch.linalg.solve(gram + (damping[..., None, None] * scale) * eye, grad)
            size = step.norm(dim=-1)
            if size.numel() == 0 or float(size.max()) <= tol:
                break
            trial = self._retract(u + (basis @ step[..., None])[..., 0])
            r_trial = x - self._phi.embed(trial)
            cost_trial = (r_trial * r_trial).sum(-1)
            # Near the minimum a cost comparison drowns in rounding (cost changes by
            # |step|^2, below eps * cost once |step| < 1e-8 |r|), which would stall the
            # iteration at sqrt(machine eps); small steps are in the Gauss-Newton regime
            # and are taken unconditionally.
            better = (cost_trial <= cost) | (size < small_step)
            u = torch.where(better[..., None], trial, u)
            r = torch.where(better[..., None], r_trial, r)
            cost = torch.where(better, cost_trial, cost)
            damping = torch.where(better, (damping * 0.1).clamp(min=1e-12), damping * 10.0)
        return u

    def project(self, x) -> torch.Tensor:
        """Phi(nearest(x)) (..., D), the closest point of M."""
        return self._phi.embed(self.nearest(x))

    def distance(self, x) -> torch.Tensor:
        """(...,) Euclidean distance of x to M."""
        x = self._ambient(x)
        return (x - self.project(x)).norm(dim=-1)

    def tangent_projector_at(self, u) -> torch.Tensor:
        """(..., D, D) orthogonal projector onto T_{Phi(u)} M, u on M0 (rank k)."""
        u = self._base(u)
        q, _ = torch.linalg.qr(self._phi.push(u, self._tangent_basis(u)))
        return q @ q.transpose(-1, -2)

    def tangent_projector(self, x) -> torch.Tensor:
        """(..., D, D) orthogonal projector onto the tangent space of M at project(x)."""
        return self.tangent_projector_at(self.nearest(x))


# ---------------------------------------------------------------- the four flows
class CircleFlow(LiftedFlow):
    """theta' = omega (1 + a cos theta) on the unit circle, u = (cos theta, sin theta)."""

    name = "circle"
    manifold_dim, base_dim = 1, 2
    coordinate_names = ("cos_theta", "sin_theta")
    default_params = {"omega": 1.0, "a": 0.5}
    valid_ranges = {"omega": "(-inf, inf)", "a": "[0, 1)"}

    def period(self) -> float:
        """2 pi / (|omega| sqrt(1 - a^2))."""
        return 2 * math.pi / (abs(self.params["omega"]) * math.sqrt(1 - self.params["a"] ** 2))

    def _velocity(self, u):
        # through the angle: cos theta = u1 / |u|; the field (-u2, u1) keeps |u| fixed
        cos = u[..., 0] / u.norm(dim=-1)
        rate = self.params["omega"] * (1.0 + self.params["a"] * cos)
        return rate[..., None] * torch.stack((-u[..., 1], u[..., 0]), dim=-1)

    def _retract(self, u):
        return _unit(u)

    def _tangent_basis(self, u):
        e = _unit(u)
        return torch.stack((-e[..., 1], e[..., 0]), dim=-1)[..., None]

    def _sample_initial(self, n, generator, device):
        th = 2 * math.pi * torch.rand(n, generator=generator, device=device, dtype=torch.float64)
        return torch.stack((th.cos(), th.sin()), dim=-1)


class TorusFlow(LiftedFlow):
    """Two coupled phase oscillators on the flat torus, u = (cos th1, sin th1, cos th2,
    sin th2): th1' = w1 + k sin(th2 - th1), th2' = w2 + k sin(th1 - th2)."""

    name = "torus"
    manifold_dim, base_dim = 2, 4
    coordinate_names = ("cos_theta1", "sin_theta1", "cos_theta2", "sin_theta2")
    default_params = {"w1": 1.0, "w2": math.sqrt(2.0), "k": 0.1}
    valid_ranges = {"w1": "(-inf, inf)", "w2": "(-inf, inf)", "k": "[0, inf)"}

    @staticmethod
    def _pairs(u):
        return u[..., 0:2], u[..., 2:4]

    def _velocity(self, u):
        p1, p2 = self._pairs(u)
        e1, e2 = _unit(p1), _unit(p2)
        # sin(th2 - th1) = sin th2 cos th1 - cos th2 sin th1
        sin21 = e2[..., 1] * e1[..., 0] - e2[..., 0] * e1[..., 1]
        k = self.params["k"]
        rate1 = self.params["w1"] + k * sin21
        rate2 = self.params["w2"] - k * sin21
        return torch.cat(
            (
                rate1[..., None] * torch.stack((-p1[..., 1], p1[..., 0]), dim=-1),
                rate2[..., None] * torch.stack((-p2[..., 1], p2[..., 0]), dim=-1),
            ),
            dim=-1,
        )

    def _retract(self, u):
        p1, p2 = self._pairs(u)
        return torch.cat((_unit(p1), _unit(p2)), dim=-1)

    def _tangent_basis(self, u):
        p1, p2 = self._pairs(u)
        e1, e2 = _unit(p1), _unit(p2)
        zero = torch.zeros_like(e1[..., 0])
        col1 = torch.stack((-e1[..., 1], e1[..., 0], zero, zero), dim=-1)
        col2 = torch.stack((zero, zero, -e2[..., 1], e2[..., 0]), dim=-1)
        return torch.stack((col1, col2), dim=-1)

    def _sample_initial(self, n, generator, device):
        th = 2 * math.pi * torch.rand(n, 2, generator=generator, device=device, dtype=torch.float64)
        return torch.stack((th[:, 0].cos(), th[:, 0].sin(), th[:, 1].cos(), th[:, 1].sin()), dim=-1)


class _SystemFlow(LiftedFlow):
    """A flow whose drift is a registered simsci system's (parameters passed as rows)."""

    system_name: ClassVar[str] = ""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.system = get(self.system_name, **self.params)

    def _drift(self, x):
        """The system's drift at states x (..., 3), batched over all leading axes."""
        flat = x.reshape(-1, x.shape[-1])
        p = torch.tensor(
            [self.system.params[k] for k in self.system.param_names], dtype=x.dtype, device=x.device
        )
        return self.system.drift(0.0, flat, p.expand(flat.shape[0], -1)).reshape(x.shape)


class RigidBodyFlow(_SystemFlow):
    """Euler's equations of the free rigid body on the unit sphere |m| = 1."""

    name = "rigid_body"
    system_name = "rigid_body"
    manifold_dim, base_dim = 2, 3
    coordinate_names = ("m1", "m2", "m3")
    default_params = {"I1": 2.0, "I2": 1.0, "I3": 2.0 / 3.0}
    valid_ranges = {k: "(0, inf)" for k in default_params}

    def energy(self, u) -> torch.Tensor:
        """(...,) kinetic energy sum_i m_i^2 / (2 I_i)."""
        u = self._base(u)
        inertia = torch.tensor(
            [self.params[k] for k in ("I1", "I2", "I3")], dtype=u.dtype, device=u.device
        )
        return 0.5 * (u * u / inertia).sum(-1)

    def _velocity(self, u):
        return self._drift(u)

    def _retract(self, u):
        return _unit(u)

    def _tangent_basis(self, u):
        e = _unit(u)
        # Gram-Schmidt the axis least aligned with e against it, complete by a cross product
        axis = torch.nn.functional.one_hot(e.abs().argmin(dim=-1), 3).to(e.dtype)
        a = _unit(axis - (axis * e).sum(-1, keepdim=True) * e)
        return torch.stack((a, torch.linalg.cross(e, a)), dim=-1)

    def _sample_initial(self, n, generator, device):
        return self.system.sample_initial(n, generator=generator, device=device)


class Lorenz63Flow(_SystemFlow):
    """Lorenz-63 in u = ((x, y, z) - (0, 0, 25)) / 10; M0 = R^3 (the image Phi(R^3))."""

    name = "lorenz63"
    system_name = "lorenz63"
    manifold_dim, base_dim = 3, 3
    coordinate_names = ("u_x", "u_y", "u_z")
    default_params = {"sigma": 10.0, "rho": 28.0, "beta": 8.0 / 3.0}
    valid_ranges = {"sigma": "(0, inf)", "rho": "(-inf, inf)", "beta": "(0, inf)"}
    #: x = SCALE * u + CENTRE
    SCALE = 10.0
    CENTRE = (0.0, 0.0, 25.0)

    def to_physical(self, u) -> torch.Tensor:
        u = self._base(u)
        return self.SCALE * u + torch.tensor(self.CENTRE, dtype=u.dtype, device=u.device)

    def from_physical(self, x) -> torch.Tensor:
        x = self._base(x, "x")
        return (x - torch.tensor(self.CENTRE, dtype=x.dtype, device=x.device)) / self.SCALE

    def _velocity(self, u):
        centre = torch.tensor(self.CENTRE, dtype=u.dtype, device=u.device)
        return self._drift(self.SCALE * u + centre) / self.SCALE

    def _tangent_basis(self, u):
        eye = torch.eye(3, dtype=u.dtype, device=u.device)
        return eye.expand(*u.shape[:-1], 3, 3)

    def _sample_initial(self, n, generator, device):
        # the system's own draw: a box, then 5 time units of burn-in onto the attractor
        x = self.system.sample_initial(
            n, generator=generator, device=device, params=dict(self.system.params)
        )
        return self.from_physical(x)


#: flow name -> class
LIFTED_FLOWS: dict[str, type[LiftedFlow]] = {
    cls.name: cls for cls in (CircleFlow, TorusFlow, RigidBodyFlow, Lorenz63Flow)
}


def lifted_flow(
    name: str,
    dim: int = 64,
    seed: int = 0,
    *,
    hidden: int = 32,
    freq: float = 1.0,
    bend: float = 2.0,
    **params,
) -> LiftedFlow:
    """The flow ``name`` (a key of ``LIFTED_FLOWS``) lifted into R^dim by the embedding
    drawn from ``seed``; ``params`` override the flow's defaults."""
    if not isinstance(name, str):
        raise TypeError(f"lifted flow name must be a string, got {type(name).__name__}")
    cls = LIFTED_FLOWS.get(name)
    if cls is None:
        raise unknown_name("lifted flow", name, LIFTED_FLOWS)
    return cls(dim=dim, seed=seed, hidden=hidden, freq=freq, bend=bend, **params)


_CONFIG_KEYS = ("flow", "params", "dim", "seed", "hidden", "freq", "bend")
_DERIVED_KEYS = ("manifold_dim", "base_dim", "embedding", "eps")


def lifted_from_config(cfg: dict) -> LiftedFlow:
    """Rebuild the flow that :meth:`LiftedFlow.config` described (e.g. a file's
    ``meta["manifold"]``)."""
    if not isinstance(cfg, dict):
        raise TypeError(f"a lifted-flow config must be a dict, got {type(cfg).__name__}")
    unknown = [k for k in cfg if k not in _CONFIG_KEYS + _DERIVED_KEYS]
    missing = [k for k in ("flow", "dim", "seed") if k not in cfg]
    if unknown or missing:
        raise ValueError(
            f"not a lifted-flow config: unknown keys {unknown}, missing keys {missing}; "
            f"expected {', '.join(_CONFIG_KEYS)} (from LiftedFlow.config())"
        )
    flow = lifted_flow(
        cfg["flow"],
        cfg["dim"],
        cfg["seed"],
        hidden=cfg.get("hidden", 32),
        freq=cfg.get("freq", 1.0),
        bend=cfg.get("bend", 2.0),
        **cfg.get("params", {}),
    )
    if "eps" in cfg and not math.isclose(flow.embedding_scale, cfg["eps"], rel_tol=1e-12):
        raise ValueError(
            f"rebuilt embedding has eps = {flow.embedding_scale!r} but the config says "
            f"{cfg['eps']!r}: the random streams differ from the ones that wrote it "
            "(another torch/simsci version?)"
        )
    return flow


# ---------------------------------------------------------------- data sets
_STREAMS = ("initial", "keep", "noise", "split")


def lifted(
    flow: str,
    n: int,
    common: BuildOptions,
    *,
    dim: int = 64,
    steps: int = 50,
    t_end: float,
    keep: float = 1.0,
    noise: float = 0.0,
    embed_seed: int = 0,
    hidden: int = 32,
    freq: float = 1.0,
    bend: float = 2.0,
    compression: str | None = None,
    **params,
) -> Path:
    """Write ``n`` trajectories of the lifted ``flow`` to ``common.out`` (module docstring of
    :mod:`simsci.datasets._manifolds`: the flow, the embedding, the file); returns the path.
    ``dim`` D, ``embed_seed``/``hidden``/``freq``/``bend`` the embedding, ``params`` the flow
    parameters. Registered as ``lifted_<flow>`` (defaults: ``t_end`` per flow, the flow's
    own parameters); call through ``simsci.datasets.make_dataset("lifted_<flow>", n, out=...)``."""
    flow = lifted_flow(flow, dim, embed_seed, hidden=hidden, freq=freq, bend=bend, **params)
    steps = check_positive("steps", steps, integer=True, minimum=2)
    t_end = check_positive("t_end", t_end)
    keep = check_fraction("keep", keep, what="fraction of the grid points kept per episode")
    noise = check_positive("noise", noise, minimum=0.0)
    fractions = check_split(common.split)
    compression = check_compression(compression)

    gens = streams(common.seed, _STREAMS)
    grid = torch.linspace(0.0, t_end, steps + 1, dtype=torch.float64)
    with torch.no_grad():
        u = flow.simulate(flow.sample_initial(n, gens["initial"]), grid)  # (n, L, m)
        x = flow.embed(u)
        v = flow.ambient_velocity(u)
    kept = kept_indices(n, steps + 1, keep, gens["keep"])
    splits = split_ids(n, fractions, gens["split"])
    system = f"lifted_{flow.name}"
    meta = {
        **common.meta(system, n),
        "manifold": flow.config(),
        "steps": steps,
        "t_end": t_end,
        "dt": t_end / steps,
        "grid_length": steps + 1,
        "keep": keep,
        "kept_per_episode": int(kept.shape[1]),
        "noise": noise,
        "split": list(fractions),
        "simulator": {"method": "dopri5", "rtol": RTOL, "atol": ATOL, "retracted": True},
        "fields": {
            "x": "Phi(u) (+ N(0, noise^2) when noise > 0)",
            "x_clean": "Phi(u), only when noise > 0",
            "v": "true ambient velocity J_Phi(u) du/dt at the clean state",
            "u": "base-manifold coordinates",
        },
    }
    names = {"u": list(flow.coordinate_names), "params": list(flow.params)}
    param_row = np.array(list(flow.params.values()), dtype=np.float64)
    bar = progress_bar(n, system, common.progress)
    try:
        with sdata.TrajectoryWriter(
            common.out, kind="state", system=system, meta=meta, names=names, compression=compression
        ) as writer:
            for i in range(n):
                idx = kept[i]
                clean = x[i, idx].numpy()
                episode = {"t": grid[idx].numpy(), "x": clean}
                if noise > 0:
                    eps = torch.randn(clean.shape, generator=gens["noise"], dtype=torch.float64)
                    episode["x"] = clean + noise * eps.numpy()
                    episode["x_clean"] = clean
                episode.update(
                    v=v[i, idx].numpy(), u=u[i, idx].numpy(), params=param_row, split=int(splits[i])
                )
                writer.append(episode)
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return writer.path


#: (flow, default t_end, what the data set shows): one data set ``lifted_<flow>`` each
_LIFTED = (
    ("circle", 14.5, "non-uniform rotation on a circle"),
    ("torus", 12.0, "two coupled phase oscillators on a torus"),
    ("rigid_body", 16.0, "free rigid body on the unit sphere"),
    ("lorenz63", 2.0, "Lorenz-63 (scaled) on a 3-D manifold"),
)
for _flow, _t_end, _what in _LIFTED:
    register_dataset(
        f"lifted_{_flow}",
        f"{_what} embedded in R^D by a random smooth map; x, true velocity v, base coords u",
        split=(0.6, 0.2, 0.2),
        defaults={"t_end": _t_end, **LIFTED_FLOWS[_flow].default_params},
    )(functools.partial(lifted, _flow))
