"""The :class:`System` base class: a ground-truth simulator with batched parameters.

A system is a vector field ``drift(t, x, p)`` (and, for SDEs, ``diffusion(t, x, p)``)
over a batch of states ``x`` of shape ``(B, *state_shape)`` with one parameter row per
sample, ``p`` of shape ``(B, P)``. Per-sample parameters are what make multi-environment
data (one solve, many parameter settings) a single batched solve.

Design choices the task left open:

- Parameters live in the batch (``p`` is an argument), not in the instance, so one
  instance serves any number of environments. The instance holds the *default* row
  (``system.params``: the literature values, overridden by ``get(name, rho=35)``).
- ``param_ranges`` are the sampling ranges for multi-environment data;
  ``valid_ranges`` are the mathematical/physical validity intervals (written as interval
  strings such as ``"(0, inf)"``) that every parameter row is checked against at the
  boundary. A parameter without a valid range only has to be finite.
- Options that change the shape of the state (``dim`` of Lorenz-96 or Kuramoto) are
  constructor keywords listed in ``options``; they are not parameters because a batch
  must share one state shape.
- ``sample_initial`` draws on the generator's device (CPU by default, so a seed gives
  the same numbers on every machine) and then moves to ``device``. Systems whose
  literature initial condition is "on the attractor" (Lorenz-63, Lorenz-96) integrate
  a documented burn-in with a fixed-step RK4 on ``device`` (``burn_in`` class
  attribute, in time units), independently of :mod:`simsci.integrate`, because only the
  end point matters.
- A system may simulate itself by a method of its own, beside the integrators': the
  names in ``own_methods`` (e.g. ``"exact"`` for a linear SDE, whose Gaussian
  transitions are known in closed form) go to ``_simulate_own`` instead of
  :func:`simsci.integrate.odeint`/``sdeint``. Every other method name still goes to the
  integrators, so the system stays comparable with any solver; ``generate`` records the
  method in ``meta["method"]`` as usual. No system outside ``own_methods`` changes.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
import torch

from simsci.errors import UnknownNameError

NOISE_TYPES = ("diagonal", "additive", "scalar", "general")


@dataclasses.dataclass(frozen=True)
class Interval:
    """A real interval such as ``(0, inf)`` or ``[0, 1]``; ``parse`` reads that notation."""

    lo: float
    hi: float
    lo_closed: bool
    hi_closed: bool

    _PATTERN: ClassVar[re.Pattern] = re.compile(
        r"^\s*([\[(])\s*([^,]+?)\s*,\s*([^,]+?)\s*([\])])\s*$"
    )

    @classmethod
    def parse(cls, text: str) -> Interval:
        match = cls._PATTERN.match(text)
        if match is None:
            raise ValueError(f"interval {text!r} is not of the form '(lo, hi]' etc.")
        lo, hi = float(match.group(2)), float(match.group(3))
        return cls(lo, hi, match.group(1) == "[", match.group(4) == "]")

    def contains(self, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        above = values >= self.lo if self.lo_closed else values > self.lo
        below = values <= self.hi if self.hi_closed else values < self.hi
        return np.isfinite(values) & above & below

    def __str__(self) -> str:
        def fmt(v: float) -> str:
            return "inf" if v == math.inf else "-inf" if v == -math.inf else f"{v:g}"

        left = "[" if self.lo_closed else "("
        right = "]" if self.hi_closed else ")"
        return f"{left}{fmt(self.lo)}, {fmt(self.hi)}{right}"


def _short_list(names: Sequence[str], limit: int = 8) -> str:
    names = list(names)
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[: limit - 2]) + f", ..., {names[-1]}"


class _VectorField(torch.nn.Module):
    """``func(t, y)`` for :func:`simsci.integrate.odeint`: the drift with fixed params.

    A module (with no parameters of its own) so adjoint solvers accept it.
    """

    def __init__(self, system: System, params: torch.Tensor):
        super().__init__()
        self.system = system
        self.params = params

    def forward(self, t, y):
        if y.shape[0] != self.params.shape[0]:
            raise RuntimeError(
                f"{self.system.name}: the solver evaluated a batch of {y.shape[0]} states "
                f"but {self.params.shape[0]} parameter rows were bound; the integrator must "
                "call the vector field with the whole batch"
            )
        return self.system.drift(t, y, self.params)


class _SDE(torch.nn.Module):
    """A torchsde-style SDE object: ``f(t, y)``, ``g(t, y)``, ``noise_type``, ``sde_type``.

    ``f`` and ``g`` close over one parameter row per sample.
    """

    def __init__(self, system: System, params: torch.Tensor):
        super().__init__()
        self.system = system
        self.params = params
        self.noise_type = system.noise_type
        self.sde_type = system.sde_type

    def f(self, t, y):
        return self.system.drift(t, y, self.params)

    def g(self, t, y):
        return self.system.diffusion(t, y, self.params)


class System:
    """A ground-truth dynamical system (ODE when ``noise_type`` is None, else Itô SDE).

    Subclasses set the class attributes and implement ``drift`` (and ``diffusion``) and
    ``_sample_initial``. Shapes: states ``x`` ``(B, *state_shape)``, parameters ``p``
    ``(B, P)`` with columns in ``param_names`` order, time ``t`` a scalar.

    Construct through :func:`simsci.systems.get` (``get("lorenz63", rho=35)``): keyword
    arguments are parameter overrides (they become ``self.params``, the default row) and
    options listed in ``options``.
    """

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "state"
    state_names: tuple[str, ...] = ()
    param_names: ClassVar[tuple[str, ...]] = ()
    default_params: ClassVar[dict[str, float]] = {}
    param_ranges: ClassVar[dict[str, tuple[float, float]]] = {}
    valid_ranges: ClassVar[dict[str, str]] = {}
    options: ClassVar[tuple[str, ...]] = ()
    noise_type: ClassVar[str | None] = None
    sde_type: ClassVar[str] = "ito"
    default_dt: ClassVar[float] = 0.01
    default_t_end: ClassVar[float] = 10.0
    default_method: ClassVar[str] = "dopri5"
    burn_in: ClassVar[float] = 0.0
    burn_in_step: ClassVar[float] = 0.01
    #: simulation methods the system implements itself (``_simulate_own``), not the
    #: integrators; may include ``default_method``
    own_methods: ClassVar[tuple[str, ...]] = ()
    #: False when the drift (or diffusion) depends on t itself (a forced oscillator):
    #: consumers that restart the clock, such as ODEControl (each control interval is
    #: solved from t = 0), refuse such a system instead of silently dropping the forcing
    autonomous: ClassVar[bool] = True

    def __init__(self, **params: float):
        unknown = [k for k in params if k not in self.param_names]
        if unknown:
            raise self._unknown_parameter(unknown[0])
        for key, value in params.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise TypeError(
                    f"parameter {key!r} of system {self.name!r} must be a real number, "
                    f"got {value!r}"
                )
        merged = {**self.default_params, **{k: float(v) for k, v in params.items()}}
        self._valid = {k: Interval.parse(v) for k, v in self.valid_ranges.items()}
        self.params: dict[str, float] = {k: float(merged[k]) for k in self.param_names}
        row = np.array([[self.params[k] for k in self.param_names]], dtype=np.float64)
        self._check_rows(row.reshape(1, len(self.param_names)), "get()")

    # ----------------------------------------------------------------- description
    @property
    def dim(self) -> int:
        """Number of state components, ``len(state_names)``."""
        return len(self.state_names)

    @property
    def state_shape(self) -> tuple[int, ...]:
        """Shape of one state (without the batch axis); ``(dim,)`` for ODE/SDE systems."""
        return (self.dim,)

    @property
    def is_sde(self) -> bool:
        return self.noise_type is not None

    def config(self) -> dict:
        """What :func:`simsci.systems.get` needs to rebuild this instance (JSON-able)."""
        options = {}
        for key in self.options:
            value = getattr(self, key)
            if isinstance(value, torch.Tensor):
                value = value.tolist()
            options[key] = value
        return {"name": self.name, "params": dict(self.params), "options": options}

    def static(self) -> dict[str, np.ndarray]:
        """Arrays shared by all episodes (the format's ``/static``); none by default."""
        return {}

    def __repr__(self) -> str:
        opts = "".join(f", {k}={getattr(self, k)!r}" for k in self.options if k != "frequencies")
        params = ", ".join(f"{k}={v:g}" for k, v in self.params.items())
        return f"{type(self).__name__}({self.name!r}{opts}, {params})"

    # ------------------------------------------------------------------- dynamics
    def drift(self, t, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """The vector field (ODE) or Itô drift (SDE): ``x`` ``(B, D)``, ``p`` ``(B, P)``."""
        raise NotImplementedError(f"{type(self).__name__} does not define drift()")

    def diffusion(self, t, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """The diffusion: ``(B, D)`` for diagonal noise, ``(B, D, M)`` for additive/general
        (the :func:`simsci.integrate.sdeint` convention)."""
        raise TypeError(
            f"system {self.name!r} is an ODE (noise_type=None) and has no diffusion; "
            "only SDE systems do"
        )

    def _bound_params(self, params, n, device, dtype) -> torch.Tensor:
        if isinstance(params, torch.Tensor):
            like = torch.empty(
                0,
                device=device or params.device,
                dtype=dtype or (params.dtype if params.is_floating_point() else torch.float64),
            )
            rows = params.reshape(1, -1) if params.ndim == 1 else params
            return self._batch_params(params, rows.shape[0], like)
        spec = params if params is not None else n
        return self.params_tensor(spec, device=device, dtype=dtype or torch.float64)

    def vector_field(self, params=None, *, n: int = 1, device=None, dtype=None):
        """``func(t, y)`` for :func:`simsci.integrate.odeint` with bound per-sample params.

        ``params`` as for :meth:`params_tensor` (None: ``n`` rows of the defaults); a
        tensor keeps its device/dtype unless ``device``/``dtype`` are given.
        """
        return _VectorField(self, self._bound_params(params, n, device, dtype))

    def as_sde(self, params=None, *, n: int = 1, device=None, dtype=None):
        """A torchsde-style object (``f``, ``g``, ``noise_type``, ``sde_type``) for sdeint.

        ``params`` is anything :meth:`params_tensor` accepts; ``None`` means ``n`` rows of
        the defaults. ``f``/``g`` close over those rows, so the batch must have as many.
        """
        if not self.is_sde:
            raise TypeError(f"system {self.name!r} is an ODE; use vector_field() for odeint")
        return _SDE(self, self._bound_params(params, n, device, dtype))

    # ----------------------------------------------------------------- parameters
    def _unknown_parameter(self, name: str) -> UnknownNameError:
        close = difflib.get_close_matches(str(name), [*self.param_names, *self.options], n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        opts = f"; options: {', '.join(self.options)}" if self.options else ""
        return UnknownNameError(
            f"unknown parameter {name!r} for system {self.name!r}.{hint} Valid parameters: "
            f"{', '.join(self.param_names) or '(none)'}{opts}."
        )

    def _check_rows(self, rows: np.ndarray, where: str) -> None:
        """Every row finite and inside ``valid_ranges``; errors name the parameter and row."""
        valid = self._valid
        for j, key in enumerate(self.param_names):
            col = rows[:, j]
            interval = valid.get(key, Interval(-math.inf, math.inf, False, False))
            bad = np.flatnonzero(~interval.contains(col))
            if bad.size:
                i = int(bad[0])
                raise ValueError(
                    f"parameter {key!r} of system {self.name!r} must be finite and lie in "
                    f"{interval}; got {float(col[i]):g} (in {where}, row {i}"
                    f"{f' and {bad.size - 1} more' if bad.size > 1 else ''})"
                )

    def params_tensor(self, spec=1, *, device=None, dtype=torch.float64) -> torch.Tensor:
        """Parameter rows ``(n, P)`` in ``param_names`` order, validated.

        ``spec``: an int ``n`` (n rows of ``self.params``); a dict name -> scalar or 1-D
        sequence (merged over ``self.params``, sequences broadcast to a common length);
        or an array/tensor of shape ``(P,)`` or ``(n, P)``.
        """
        P = len(self.param_names)
        if isinstance(spec, bool):
            raise TypeError(f"params must be an int, dict or array, not {spec!r}")
        if isinstance(spec, (int, np.integer)):
            if spec < 1:
                raise ValueError(f"need at least one parameter row, got n={spec}")
            row = [self.params[k] for k in self.param_names]
            rows = np.tile(np.asarray(row, dtype=np.float64), (int(spec), 1)).reshape(-1, P)
        elif isinstance(spec, Mapping):
            for key in spec:
                if key not in self.param_names:
                    raise self._unknown_parameter(key)
            columns = {}
            lengths = set()
            for key in self.param_names:
                value = spec.get(key, self.params[key])
                arr = np.asarray(
                    value.detach().cpu() if isinstance(value, torch.Tensor) else value,
                    dtype=np.float64,
                )
                if arr.ndim > 1:
                    raise ValueError(
                        f"parameter {key!r}: give a scalar or a 1-D sequence, got shape {arr.shape}"
                    )
                if arr.ndim == 1:
                    lengths.add(arr.shape[0])
                columns[key] = arr
            if len(lengths) > 1:
                raise ValueError(
                    f"parameter sequences must have one common length, got lengths "
                    f"{sorted(lengths)} for system {self.name!r}"
                )
            n = lengths.pop() if lengths else 1
            rows = np.stack(
                [np.broadcast_to(columns[k], (n,)) for k in self.param_names], axis=-1
            ).reshape(n, P)
        else:
            if isinstance(spec, torch.Tensor):
                spec = spec.detach().cpu()
            rows = np.asarray(spec, dtype=np.float64)
            if rows.ndim == 1:
                rows = rows[None, :]
            if rows.ndim != 2 or rows.shape[1] != P:
                raise ValueError(
                    f"system {self.name!r} takes {P} parameters ({', '.join(self.param_names)}); "
                    f"params must have shape (n, {P}) or ({P},), got {tuple(np.shape(spec))}"
                )
        self._check_rows(rows, "params")
        return torch.as_tensor(np.ascontiguousarray(rows), dtype=dtype, device=device)

    def sample_params(
        self,
        n: int,
        *,
        generator: torch.Generator | None = None,
        device=None,
        dtype=torch.float64,
    ) -> torch.Tensor:
        """``(n, P)`` rows uniform over ``param_ranges`` (parameters without a range keep
        ``self.params``). Drawn on the generator's device, then moved to ``device``."""
        n = _check_count(n)
        gen_device = generator.device if generator is not None else torch.device("cpu")
        rows = self.params_tensor(n, device=gen_device, dtype=torch.float64)
        for j, key in enumerate(self.param_names):
            if key in self.param_ranges:
                lo, hi = self.param_ranges[key]
                u = torch.rand(n, generator=generator, device=gen_device, dtype=torch.float64)
                rows[:, j] = lo + (hi - lo) * u
        return rows.to(device=device, dtype=dtype)

    def _batch_params(self, params, batch: int, like: torch.Tensor) -> torch.Tensor:
        """Normalise ``params`` (None, dict, (P,), (1, P) or (B, P)) to ``(B, P)`` like ``like``.

        A tensor keeps its autograd graph (gradients with respect to physical parameters
        flow through :meth:`simulate`); it is validated on a detached copy.
        """
        P = len(self.param_names)
        if isinstance(params, torch.Tensor):
            p = params.reshape(1, -1) if params.ndim == 1 else params
            if p.ndim != 2 or p.shape[1] != P:
                raise ValueError(
                    f"system {self.name!r} takes {P} parameters ({', '.join(self.param_names)}); "
                    f"params must have shape (B, {P}) or ({P},), got {tuple(params.shape)}"
                )
            self._check_rows(p.detach().cpu().double().numpy(), "params")
            p = p.to(device=like.device, dtype=like.dtype)
        else:
            spec = batch if params is None else params
            p = self.params_tensor(spec, device=like.device, dtype=like.dtype)
        if p.shape[0] == 1 and batch != 1:
            return p.expand(batch, -1)
        if p.shape[0] != batch:
            raise ValueError(
                f"params has {p.shape[0]} rows but x0 has a batch of {batch}; give one row "
                "per sample, a single row, or None for the defaults"
            )
        return p

    # ----------------------------------------------------------------- states
    def check_state(self, x: torch.Tensor, what: str = "x0") -> torch.Tensor:
        """Return ``x`` as a floating tensor of shape ``(B, *state_shape)`` or raise."""
        if not isinstance(x, torch.Tensor):
            x = torch.as_tensor(np.asarray(x), dtype=torch.float64)
        if not torch.is_floating_point(x):
            x = x.to(torch.float64)
        shape = self.state_shape
        if x.ndim != len(shape) + 1 or tuple(x.shape[1:]) != shape:
            got = tuple(x.shape)
            arrived = got[-1] if got else "a scalar"
            raise ValueError(
                f"system {self.name!r} has state shape {shape} "
                f"({_short_list(self.state_names)}); {what} must have shape (B, "
                f"{', '.join(map(str, shape))}) but has shape {got} (state dimension "
                f"{arrived}). Add a batch axis for a single state: x0[None]."
            )
        return x

    def _sample_initial(self, n: int, generator, device: torch.device) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define _sample_initial()")

    def sample_initial(
        self,
        n: int,
        *,
        generator: torch.Generator | None = None,
        device=None,
        dtype=torch.float64,
        params=None,
    ) -> torch.Tensor:
        """``(n, *state_shape)`` initial states from the system's literature distribution.

        Random numbers come from ``generator`` (on its device; the global CPU generator
        when None) in float64, then the states move to ``device``/``dtype``. With a
        ``burn_in`` (Lorenz systems) the states are then integrated for ``burn_in`` time
        units with RK4 at ``params`` (rows as for :meth:`simulate`; defaults when None).
        """
        n = _check_count(n)
        gen_device = generator.device if generator is not None else torch.device("cpu")
        x = self._sample_initial(n, generator, gen_device)
        x = x.to(device=device, dtype=dtype)
        if self.burn_in > 0:
            x = self._burn_in(x, self._batch_params(params, n, x))
        return x

    def _burn_in(self, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """Integrate ``burn_in`` time units with fixed-step RK4 (step ~``burn_in_step``)."""
        steps = max(1, round(self.burn_in / self.burn_in_step))
        h = self.burn_in / steps
        with torch.no_grad():
            for _ in range(steps):
                k1 = self.drift(0.0, x, p)
                k2 = self.drift(0.0, x + 0.5 * h * k1, p)
                k3 = self.drift(0.0, x + 0.5 * h * k2, p)
                k4 = self.drift(0.0, x + h * k3, p)
                x = x + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        return x

    # ----------------------------------------------------------------- simulation
    def simulate(
        self,
        x0,
        t,
        params=None,
        *,
        method: str | None = None,
        seed: int | None = None,
        **solver_options,
    ) -> torch.Tensor:
        """Solve from ``x0`` ``(B, *S)``; return ``(B, T, *S)``.

        ``t`` as for :func:`simsci.integrate.odeint`: ``(T,)`` shared, ``(B, T)`` per
        sample, or a list of B 1-D tensors (ragged; the result is then a list of
        ``(T_b, *S)``). ``params``: ``(B, P)``/``(P,)`` array, dict name -> value(s), or
        None (defaults). ODEs go to :func:`simsci.integrate.odeint`, SDEs to
        :func:`simsci.integrate.sdeint` (``seed`` fixes the Brownian motion; ODEs take no
        seed), a name in ``own_methods`` to the system's own ``_simulate_own``. ``method``
        defaults to ``default_method``; ``solver_options`` (rtol, atol, step_size, dt, ...)
        pass through. Everything runs on ``x0``'s device and dtype
        (the integrators move and cast ``t``, and refuse a cast that merges two times).
        """
        from simsci import integrate  # late: the integrators may import systems one day

        x0 = self.check_state(x0)
        p = self._batch_params(params, x0.shape[0], x0)
        method = method or self.default_method
        if method in self.own_methods:
            return self._simulate_own(method, x0, t, p, seed=seed, **solver_options)
        if not self.is_sde:
            if seed is not None:
                raise ValueError(
                    f"system {self.name!r} is an ODE and deterministic; seed applies to SDE "
                    "systems only (drop seed=)"
                )
            return integrate.odeint(_VectorField(self, p), x0, t, method=method, **solver_options)
        return integrate.sdeint(_SDE(self, p), x0, t, method=method, seed=seed, **solver_options)

    def _simulate_own(self, method: str, x0, t, p, *, seed=None, **options):
        """Simulate by ``method``, one of ``own_methods``: ``x0`` ``(B, *S)`` checked, ``p``
        ``(B, P)`` validated, ``t`` as for :meth:`simulate`; same return as :meth:`simulate`."""
        raise NotImplementedError(
            f"{type(self).__name__} lists own_methods {self.own_methods} but does not define "
            "_simulate_own()"
        )


def _check_count(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    return int(n)
