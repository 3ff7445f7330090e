r"""``simsci/PDEControl-v0``: 1-D periodic PDEs with distributed actuators, with a task.

The controlled system is a 1-D periodic simsci PDE (``burgers``, ``heat``,
``kuramoto_sivashinsky``, or any other single-channel 1-D field system) with a
time-constant source made of ``M`` actuators,

.. math::
    u_t = \mathcal L u + \mathcal N(u) + \sum_{m=1}^{M} a_m\, b_m(x),\qquad
    b_m(x) = \exp\!\Big(-\frac{d_L(x, c_m)^2}{2\sigma^2}\Big),\quad
    c_m = (m - \tfrac12)\frac{L}{M},\quad \sigma = w L,

where :math:`d_L` is the periodic distance on :math:`[0, L)`, the amplitudes
:math:`a \in [a_{lo}, a_{hi}]^M` are the action, held constant over each control
interval ``dt`` (zero-order hold), and ``w`` is ``actuator_width`` (a fraction of the
domain). Each interval is one call of :meth:`simsci.systems.PDESystem.simulate` over
``[0, dt]`` for the whole batch with ``forcing`` :math:`\sum_m a_m b_m`, by ``method``
(``etdrk4`` by default) with internal steps of at most ``solver_dt``. The observation
is the field at ``n_sensors`` equally spaced grid points (every point by default); the
reward is

.. math:: r = -\Big(\frac1N\sum_j (u_j - u^*_j)^2 + \lambda\,\|a\|_2^2\Big)

after the step (``u^*`` the target, :math:`\lambda` ``action_cost``). This is the
setting of controlgym (Zhang et al. 2023, "Controlgym: large-scale control environments
for benchmarking reinforcement learning algorithms", L4DC 2024), whose Burgers and
Kuramoto-Sivashinsky environments have 8 evenly spaced actuators (top-hat supports of
width L/10 there; smooth bumps here, so the spectral solvers see no Gibbs ringing) and
a quadratic tracking-plus-actuation cost, and of the localized-actuation
Kuramoto-Sivashinsky control of Bucci et al. (2019, "Control of chaotic systems by deep
reinforcement learning", Proc. R. Soc. A 475, 20190351) on the chaotic domain
:math:`L = 22` (they target the unstable equilibria; here the flat state). PDEControlGym
(Bhan et al. 2024) controls related parabolic PDEs through the boundary instead; here
the actuation is distributed.

Tasks (``PDE_TASKS``; every field can be overridden by a keyword of the environment):

``burgers-stabilize``
    ``burgers``, :math:`\nu = 0.01` on [0, 1), N = 128: bring a random field (the
    system's Gaussian random field, max :math:`|u| \approx 1`) to rest, target
    :math:`u^* = 0`, faster than viscosity alone. controlgym's Burgers task (8
    actuators, sample time 0.05, 100 steps). ETDRK4 with ``solver_dt`` = 1e-3: the
    explicit advection needs :math:`h \max|u| k_{max} \lesssim 2`; full constant
    actuation drives the field to :math:`|u| \approx 6.3` by the end of an episode,
    which a step of 2e-3 still integrates and 2.5e-3 does not, so 1e-3 leaves a factor
    of two. dt 0.05, 100 steps; ``params="random"`` draws
    :math:`\nu \in [0.005, 0.05]` (resolved at N = 128).
``heat-track``
    ``heat``, :math:`\nu = 0.01` on [0, 1), N = 64: track :math:`u^*(x) = \sin(2\pi
    x/L)`, which is not a steady state, so holding it needs a sustained source
    :math:`-\nu u^*_{xx}` -- feedback plus feedforward. ETDRK4 is exact for a linear
    PDE with a constant source, so one internal step per interval
    (``solver_dt = dt = 0.1``); 100 steps (t = 10, four decay times of the first mode).
``ks-stabilize``
    ``kuramoto_sivashinsky`` (:math:`\nu = 1`) on the chaotic domain :math:`L = 22`
    (three linearly unstable Fourier modes; Bucci et al. 2019), N = 64: drive the
    chaotic field to :math:`u^* = 0`. ETDRK4 with ``solver_dt`` = 0.05, dt 0.25, 400
    steps (t = 100, several Lyapunov times); ``params="random"`` draws
    :math:`\nu \in [0.5, 1.5]`.

All three: M = 8 actuators, :math:`\sigma = L/16` (neighbouring bumps overlap at
:math:`e^{-1/2}`, so the actuators can shape a smooth source; each bump injects
:math:`\sqrt{2\pi}\sigma/L \approx 0.157` of its amplitude into the mean),
:math:`|a_m| \le 1`, ``action_cost`` 0.01; failure (reward ``failure_reward`` =
-100, the cost of 100 steps at unit mean squared error) when the solver blows up or
:math:`|u|` exceeds ``state_bound`` anywhere: 20 for Burgers and Kuramoto-Sivashinsky
(fields under zero or uniformly random actions stay below 10; all actuators at full
strength add 1.25 to the mean per time unit, and the bound ends such an episode before
the explicit advection outruns the solver's step), 100 for the linear heat equation.

Design choices, and why:

- **Peak-normalised bumps** (:math:`b_m(c_m) = 1`): an action is the source strength
  at the actuator's centre, independent of ``N``. The periodic distance keeps the bumps
  periodic; their value at distance :math:`L/2` is :math:`e^{-32}` for the default
  width, so the kink there is below rounding.
- **Mean squared error over the grid** (not controlgym's sum): it approximates
  :math:`\frac1L\int (u - u^*)^2 dx`, so rewards do not scale with the resolution.
- **Solver blow-up.** The solver checks the batch for inf/NaN once, at the end of the
  interval, and raises :class:`simsci.errors.SolverError` naming the samples; the
  dynamics then re-run the interval without them and return NaN rows for them, so
  :class:`simsci.envs.SimsciVectorEnv` terminates exactly those sub-environments
  (one extra solve, only in the step where something blew up). A method with a step
  limit (``rk4``; any stepper whose registry entry declares one) runs with
  ``check_stability=False``: its linear stability limit is checked once at
  construction, an advective CFL violation shows as a blow-up (a failure), never as an
  exception in the middle of an episode.
- **Parameters.** ``params="default"`` (or one fixed row) shares one parameter row, so
  the ETDRK4 coefficients are computed once and cached. ``params="random"`` draws each
  episode's row (domain randomisation; not observed): the system keeps the
  coefficients per distinct row (a bounded pool), so a reset computes only the rows
  it drew; each sample then reads its own coefficient rows, a little more memory
  traffic per step than one shared row.
- **Blocks on the CPU.** A large batch is solved in equal blocks of rows whose state
  arrays take at most 256 KiB each (252 Burgers fields in float64): an ETDRK4 stage keeps
  about ten such arrays alive, and at that size they stay in a core's cache instead of
  streaming through memory. Every sample is solved on its own either way, so the
  blocks change no number; on a GPU the batch is one solve.
- **Observation.** A flat float32 vector of ``n_sensors`` point values (what an MLP
  policy takes); ``info["state"]`` is the full ``(N, 1)`` field in float64, which
  rollout files record and surrogate models learn.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

import numpy as np
import torch

from simsci import systems as _systems
from simsci._device import resolve_device
from simsci.envs._core import (
    Dynamics,
    SimsciEnv,
    SimsciVectorEnv,
    check_action_bounds,
    check_dtype,
    fixed_params,
)
from simsci.errors import SolverError, unknown_name

__all__ = [
    "PDE_TASKS",
    "PDETask",
    "PDEControlDynamics",
    "PDEControlEnv",
    "PDEControlVectorEnv",
]

#: larger than any number of internal steps per interval: check for blow-up only at
#: the end of the interval, so one check names every sample that blew up
_CHECK_AT_END = 2**62
_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: bytes of one state array that a CPU solve works on at a time. An ETDRK4 stage keeps
#: about ten arrays of the batch's size alive; in blocks of this size they stay near the
#: core (1.25 MiB of L2 per core on the benchmark machine) instead of streaming through
#: memory: 1024 Burgers fields stepped ~1.3x faster in blocks of 256 than in one solve,
#: blocks of 128 gained less (per-call overhead), 64 nothing (benchmarks/README.md)
_CPU_BLOCK_BYTES = 256 * 1024


@dataclasses.dataclass(frozen=True)
class PDETask:
    """A control task on a 1-D PDE (see the module docstring for the built-in ones).

    ``system_params``: parameter overrides of the task's system (e.g. ``{"nu": 0.01}``);
    ``domain`` None keeps the system's. ``target(x, L) -> (N,)`` numpy (None: zero).
    ``param_ranges``: sampling ranges of ``params="random"`` (None: the system's).
    ``actuator_width``: Gaussian width :math:`\\sigma` as a fraction of ``L``.
    ``solver_dt``: the largest internal step of ``method``.
    """

    system: str
    resolution: int
    dt: float
    solver_dt: float
    max_episode_steps: int | None
    domain: float | None = None
    system_params: Mapping[str, float] | None = None
    method: str = "etdrk4"
    n_actuators: int = 8
    actuator_width: float = 1.0 / 16.0
    action_low: float = -1.0
    action_high: float = 1.0
    target: Callable | None = None
    action_cost: float = 0.01
    initial_scale: float = 1.0
    param_ranges: Mapping[str, tuple[float, float]] | None = None
    state_bound: float = 100.0
    failure_reward: float = -100.0


def _first_mode(x: np.ndarray, L: float) -> np.ndarray:
    return np.sin(2.0 * np.pi * x / L)


PDE_TASKS: dict[str, PDETask] = {
    "burgers-stabilize": PDETask(
        system="burgers",
        resolution=128,
        system_params={"nu": 0.01},
        dt=0.05,
        solver_dt=1e-3,
        max_episode_steps=100,
        param_ranges={"nu": (0.005, 0.05)},
        state_bound=20.0,
    ),
    "heat-track": PDETask(
        system="heat",
        resolution=64,
        system_params={"nu": 0.01},
        dt=0.1,
        solver_dt=0.1,
        max_episode_steps=100,
        target=_first_mode,
    ),
    "ks-stabilize": PDETask(
        system="kuramoto_sivashinsky",
        resolution=64,
        domain=22.0,
        system_params={"nu": 1.0},
        dt=0.25,
        solver_dt=0.05,
        max_episode_steps=400,
        param_ranges={"nu": (0.5, 1.5)},
        state_bound=20.0,
    ),
}


def _positive(value, what: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{what} must be a number, got {value!r}")
    v = float(value)
    ok = math.isfinite(v) and (v >= 0 if allow_zero else v > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{what} must be finite and {bound}, got {value!r}")
    return v


def _count(value, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {value!r}")
    if not low <= int(value) <= high:
        raise ValueError(f"{what} must lie in [{low}, {high}], got {value}")
    return int(value)


def _pde_system(spec: PDETask, name: str, system_options, resolution, domain):
    """The controlled 1-D single-channel PDE system, built with the task's settings when
    it is the task's own system (checked: a field system, options without the grid)."""
    if name not in _systems.SYSTEMS:
        raise unknown_name("system", name, _systems.SYSTEMS)
    cls = _systems.SYSTEMS[name]
    if getattr(cls, "kind", "state") != "field":
        raise ValueError(
            f"system {name!r} is an ODE/SDE system; PDEControl takes 1-D PDE "
            "systems (use simsci/ODEControl-v0 for ODEs and SDEs)"
        )
    if cls.spatial_dims != 1 or len(cls.channel_names) != 1:
        raise ValueError(
            f"system {name!r} is a {cls.spatial_dims}-D PDE with channels "
            f"{list(cls.channel_names)}; PDEControl takes 1-D single-channel PDEs "
            "(burgers, heat, kuramoto_sivashinsky, advection, kdv, allen_cahn)"
        )
    own = name == spec.system
    options = dict(system_options or {})
    for key in ("resolution", "domain"):
        if key in options:
            raise ValueError(
                f"give {key} as the environment keyword {key}=..., not in system_options"
            )
    options = {**(dict(spec.system_params or {}) if own else {}), **options}
    res = spec.resolution if resolution is None else resolution
    dom = domain if domain is not None else (spec.domain if own else None)
    return _systems.get(name, resolution=res, domain=dom, **options)


def _check_method(sys_, name: str, method: str) -> str:
    if method not in sys_.methods:
        raise unknown_name(f"method for {name!r}", method, sys_.methods)
    N = sys_.resolution[0]
    if _systems.get_stepper(method).spectral and N % 2:
        raise ValueError(f"the spectral method {method!r} needs an even resolution, got {N}")
    return method


def _solver_dt(
    sys_, spec: PDETask, method: str, dt: float, solver_dt, params_mode, fixed, ranges
) -> float:
    """The largest internal step: the task's (at most the system's own for another
    method) unless given; for a method with a step limit (rk4, any registered stepper
    that declares one) inside the linear stability limit of every row the episodes can
    draw."""
    given = solver_dt is not None
    if not given:
        # the task's step is tuned for the task's method; another method also gets at
        # most the system's own step for it (SBDF2 is second order, not exact)
        solver_dt = spec.solver_dt
        if method != spec.method:
            solver_dt = min(solver_dt, sys_.method_dt.get(method, sys_.default_dt))
    solver_dt = _positive(solver_dt, "solver_dt (the internal step)")
    if _systems.get_stepper(method).unconditionally_stable:
        return solver_dt
    rows = fixed
    if params_mode == "random":
        rows = sys_.params_tensor({k: list(v) for k, v in ranges.items()})
    limit = sys_.stable_dt(rows, method)
    if not given:
        solver_dt = min(solver_dt, 0.9 * limit)
    h = dt / math.ceil(dt / solver_dt * (1.0 - 1e-12))
    if h > limit:
        raise ValueError(
            f"solver_dt={solver_dt:g} (step {h:.4g} per interval) is beyond the "
            f"stability limit {limit:.4g} of {method!r} at resolution {sys_.resolution[0]}; use "
            f"solver_dt <= {limit:.4g} or method='etdrk4'"
        )
    return solver_dt


def _actuators(x: np.ndarray, L: float, M: int, width: float) -> tuple[np.ndarray, np.ndarray]:
    """Centres ``(m + 1/2) L / M`` and the periodic Gaussian bumps ``(M, N)`` on the grid
    ``x``, peak 1."""
    centers = (np.arange(M, dtype=np.float64) + 0.5) * (L / M)
    d = np.remainder(x[None, :] - centers[:, None] + 0.5 * L, L) - 0.5 * L
    return centers, np.exp(-0.5 * (d / (width * L)) ** 2)


def _target_field(spec: PDETask, target, x: np.ndarray, L: float) -> np.ndarray:
    """The field to reach on the grid ``x``: the user's, else the task's, else zero."""
    N = len(x)
    if target is None:
        tgt = spec.target(x, L) if (spec.target is not None) else np.zeros(N)
    else:
        tgt = np.asarray(target, dtype=np.float64)
        if tgt.shape not in ((N,), (N, 1)):
            raise ValueError(
                f"target must be a field of shape ({N},) or ({N}, 1) on the grid "
                f"x_j = j L / N, got shape {tgt.shape}"
            )
        if not np.isfinite(tgt).all():
            raise ValueError("target must be finite")
    return np.asarray(tgt, dtype=np.float64).reshape(N)


class PDEControlDynamics(Dynamics):
    """The batched physics + task of ``PDEControl`` (see the module docstring)."""

    def __init__(
        self,
        task: str = "heat-track",
        *,
        system: str | None = None,
        system_options: Mapping | None = None,
        resolution: int | None = None,
        domain: float | None = None,
        params="default",
        target=None,
        n_actuators: int | None = None,
        actuator_width: float | None = None,
        action_low=None,
        action_high=None,
        n_sensors: int | None = None,
        dt: float | None = None,
        solver_dt: float | None = None,
        method: str | None = None,
        action_cost: float | None = None,
        initial_scale: float | None = None,
        max_episode_steps: int | None | str = "task",
        state_bound: float | None = None,
        failure_reward: float | None = None,
        device=None,
        dtype=torch.float64,
    ):
        if task not in PDE_TASKS:
            raise unknown_name("task", task, PDE_TASKS)
        spec = PDE_TASKS[task]
        self.task_name = task
        self._spec = spec
        self.system_name = system or spec.system
        self.system = _pde_system(spec, self.system_name, system_options, resolution, domain)
        sys_ = self.system
        self.device = resolve_device(device) if device is not None else torch.device("cpu")
        self.dtype = check_dtype(dtype)
        self.state_shape = tuple(sys_.state_shape)  # (N, 1)
        self.method = _check_method(
            sys_, self.system_name, spec.method if method is None else method
        )
        self.dt = _positive(spec.dt if dt is None else dt, "dt (the control interval)")
        fixed = self._setup_params(spec, params)
        self.solver_dt = _solver_dt(
            sys_, spec, self.method, self.dt, solver_dt, self.params_mode, fixed, self.param_ranges
        )
        self._setup_actuators(spec, n_actuators, actuator_width, action_low, action_high)
        self._setup_sensors(n_sensors)
        self.target = _target_field(spec, target, self.x, sys_.domain[0])
        self._target = torch.as_tensor(self.target, device=self.device, dtype=self.dtype)[:, None]
        self._setup_task(
            spec, action_cost, initial_scale, max_episode_steps, state_bound, failure_reward
        )
        self._t_span = [0.0, self.dt]
        self._rows_per_block = self._block_rows()

    # ----------------------------------------------------------------- set-up
    def _setup_params(self, spec: PDETask, params) -> torch.Tensor:
        """Fixed rows or drawn per episode, and the sampling ranges of "random"; returns
        the fixed row on the CPU."""
        sys_ = self.system
        self.params_mode, fixed = fixed_params(sys_, params)
        self._fixed_params = fixed.to(self.device)
        ranges = dict(spec.param_ranges or {}) if self.system_name == spec.system else {}
        self.param_ranges = {
            k: tuple(map(float, ranges.get(k, sys_.param_ranges[k])))
            for k in sys_.param_names
            if k in ranges or k in sys_.param_ranges
        }
        if self.params_mode == "random":
            corners = {k: list(v) for k, v in self.param_ranges.items()}
            sys_.params_tensor(corners)  # the range ends must be valid parameters
        return fixed

    def _setup_actuators(self, spec, n_actuators, actuator_width, action_low, action_high):
        """Periodic Gaussian bumps, peak 1, centres (m + 1/2) L / M; the action bounds."""
        N, L = self.system.resolution[0], self.system.domain[0]
        M = _count(spec.n_actuators if n_actuators is None else n_actuators, "n_actuators", 1, N)
        width = spec.actuator_width if actuator_width is None else actuator_width
        width = _positive(width, "actuator_width (sigma / L)")
        if width > 0.5:
            raise ValueError(f"actuator_width (sigma / L) must be at most 0.5, got {width:g}")
        self.n_actuators = M
        self.actuator_width = width
        self.x = np.arange(N, dtype=np.float64) * (L / N)
        self.actuator_centers, self.actuators = _actuators(self.x, L, M, width)
        self._B = torch.as_tensor(self.actuators, device=self.device, dtype=self.dtype)
        self.action_names = tuple(f"a{m}" for m in range(M))
        low = spec.action_low if action_low is None else action_low
        high = spec.action_high if action_high is None else action_high
        self.action_low, self.action_high = check_action_bounds(low, high, M)

    def _setup_sensors(self, n_sensors) -> None:
        """Every (N / n_sensors)-th grid point, observed unbounded."""
        N = self.system.resolution[0]
        S = N if n_sensors is None else _count(n_sensors, "n_sensors", 1, N)
        if N % S:
            raise ValueError(
                f"n_sensors must divide the resolution {N} (equally spaced sensors on the "
                f"grid), got {S}"
            )
        self.n_sensors = S
        self._stride = N // S
        self.sensor_positions = self.x[:: self._stride]
        self.obs_names = tuple(f"u{j}" for j in range(0, N, self._stride))
        self.observation_low = np.full(S, -np.inf, dtype=np.float32)
        self.observation_high = np.full(S, np.inf, dtype=np.float32)

    def _setup_task(
        self, spec, action_cost, initial_scale, max_episode_steps, state_bound, failure_reward
    ) -> None:
        """The reward's action cost, the initial scale, the episode length and failure."""
        cost = spec.action_cost if action_cost is None else action_cost
        self.action_cost = _positive(cost, "action_cost", allow_zero=True)
        scale = spec.initial_scale if initial_scale is None else initial_scale
        self.initial_scale = _positive(scale, "initial_scale")
        mes = spec.max_episode_steps if max_episode_steps == "task" else max_episode_steps
        if mes is not None and (
            isinstance(mes, bool) or not isinstance(mes, (int, np.integer)) or mes < 1
        ):
            raise ValueError(f"max_episode_steps must be a positive int or None, got {mes!r}")
        self.max_episode_steps = None if mes is None else int(mes)
        bound = spec.state_bound if state_bound is None else state_bound
        self.state_bound = _positive(bound, "state_bound") if bound != math.inf else math.inf
        fail = spec.failure_reward if failure_reward is None else failure_reward
        if not math.isfinite(float(fail)):
            raise ValueError(f"failure_reward must be finite, got {fail!r}")
        self.failure_reward = float(fail)

    # ----------------------------------------------------------------- pieces
    def forcing(self, action: torch.Tensor) -> torch.Tensor:
        """The source field ``(n, N, 1)`` of actions ``(n, M)``: :math:`\\sum_m a_m b_m`."""
        return (action.to(self._B.dtype) @ self._B).unsqueeze(-1)

    def _sample_params(self, n: int, generator: torch.Generator) -> torch.Tensor:
        sys_ = self.system
        rows = sys_.params_tensor(n)  # CPU float64, the defaults
        for j, key in enumerate(sys_.param_names):
            if key in self.param_ranges:
                lo, hi = self.param_ranges[key]
                u = torch.rand(n, generator=generator, dtype=torch.float64)
                rows[:, j] = lo + (hi - lo) * u
        return rows.to(self.device)

    def sample_reset(self, n, generator):
        params = self._sample_params(n, generator) if self.params_mode == "random" else None
        u = self.system.sample_initial(n, generator=generator, device=self.device, dtype=self.dtype)
        if self.initial_scale != 1.0:
            u = u * self.initial_scale
        return u, params

    def _block_rows(self) -> int | None:
        """Sub-environments solved together on the CPU (None: the whole batch at once,
        as on a GPU): as many as keep one state array near :data:`_CPU_BLOCK_BYTES`."""
        if self.device.type != "cpu":
            return None
        N = self.system.resolution[0]
        item = torch.empty((), dtype=self.dtype).element_size()
        spectral = _systems.get_stepper(self.method).spectral
        row_bytes = (N // 2 + 1) * 2 * item if spectral else N * item
        return max(1, _CPU_BLOCK_BYTES // row_bytes)

    def _solve(self, state, params, forcing):
        """One interval for the batch, in blocks of rows on the CPU (the results do not
        depend on the blocking: every sample is solved on its own, bit for bit)."""
        rows, n = self._rows_per_block, state.shape[0]
        if rows is None or n <= rows:
            return self._solve_block(state, params, forcing)
        k = -(-n // rows)  # blocks of at most `rows`, sizes within one of each other
        edges = [i * n // k for i in range(k + 1)]
        shared = params.shape[0] == 1
        return torch.cat(
            [
                self._solve_block(state[a:b], params if shared else params[a:b], forcing[a:b])
                for a, b in zip(edges[:-1], edges[1:])
            ]
        )

    def _solve_block(self, state, params, forcing):
        """One interval for the rows given; NaN rows for samples whose solve blew up."""
        try:
            out = self.system.simulate(
                state,
                self._t_span,
                params,
                method=self.method,
                dt=self.solver_dt,
                forcing=forcing,
                check_every=_CHECK_AT_END,
                check_stability=False,
            )
            return out[:, -1]
        except SolverError as err:
            failed = set(err.samples)
        n = state.shape[0]
        keep = [i for i in range(n) if i not in failed]
        result = torch.full_like(state, math.nan)
        if keep:
            idx = torch.as_tensor(keep, device=state.device)
            rows = params if params.shape[0] == 1 else params[idx]
            result[idx] = self._solve_block(state[idx], rows, forcing[idx])
        return result

    def advance(self, state, params, action, generator):
        rows = self._fixed_params if params is None else params
        return self._solve(state, rows, self.forcing(action))

    def observe(self, state):
        # a finite float64 field beyond float32's range (a diverging episode's last
        # state) must not become an inf observation
        return state[:, :: self._stride, 0].clamp(-_FLOAT32_MAX, _FLOAT32_MAX)

    def reward(self, state, action, next_state, params):
        err = (next_state - self._target.to(next_state.dtype)).square().mean(dim=(1, 2))
        return -(err + self.action_cost * action.square().sum(-1))

    def config(self) -> dict:
        return {
            "task": self.task_name,
            "system": self.system.config(),
            "params_mode": self.params_mode,
            "param_ranges": {k: list(v) for k, v in self.param_ranges.items()},
            "actions": list(self.action_names),
            "actuator_centers": self.actuator_centers.tolist(),
            "actuator_width": self.actuator_width,
            "n_sensors": self.n_sensors,
            "target": self.target.tolist(),
            "action_cost": self.action_cost,
            "dt": self.dt,
            "solver_dt": self.solver_dt,
            "method": self.method,
        }


_DOC_ARGS = """
    Args:
        task: a key of ``simsci.envs._pde.PDE_TASKS`` ("burgers-stabilize", "heat-track",
            "ks-stabilize").
        system: a registered 1-D single-channel PDE system (default: the task's); another
            system keeps the task's actuators, target and timing but its own defaults.
        system_options: constructor options of the system (``{"ic": "sines"}``, parameter
            overrides such as ``{"nu": 0.02}``), not resolution/domain.
        resolution, domain: grid points N (even for spectral methods) and period L.
        params: "default", "random" (drawn per episode from the task's or the system's
            ranges; see the module docstring), or one row (dict or array).
        target: the field to reach, shape (N,) or (N, 1) (overrides the task's).
        n_actuators, actuator_width: number M of Gaussian actuators and their width
            sigma as a fraction of L.
        action_low, action_high: action bounds (number or one per actuator).
        n_sensors: observed grid points, equally spaced; must divide N (default: N).
        dt, solver_dt, method: control interval, largest internal step and PDE solver
            (a key of the system's ``methods``: "etdrk4", "imex", "rk4", ...).
        action_cost: weight of ||a||^2 in the reward.
        initial_scale: factor on the system's random initial fields.
        max_episode_steps: truncation length (None: never truncate).
        state_bound, failure_reward: a field with a value beyond ``state_bound`` (or a
            solver blow-up) ends the episode with ``failure_reward``.
        device, dtype: where and in which precision ("float32", "float64") the fields
            are integrated.
        action_bounds: "clip" (default) clips out-of-bound actions, "error" rejects them.
"""


class PDEControlEnv(SimsciEnv):
    __doc__ = (
        """Control a 1-D PDE with distributed actuators (``simsci/PDEControl-v0``).

    ## Description
    A periodic 1-D simsci PDE (Burgers, heat, Kuramoto-Sivashinsky, ...) driven by M
    Gaussian-shaped actuators whose amplitudes are the action, held constant over each
    control interval; tasks: bring a Burgers field to rest, make the heat equation track
    a sine profile, suppress Kuramoto-Sivashinsky chaos.

    ## Action Space
    ``Box(action_low, action_high, (M,), float32)``: the source strength at each
    actuator's centre; the source is ``sum_m a_m b_m(x)``.

    ## Observation Space
    ``Box(-inf, inf, (n_sensors,), float32)``: the field at equally spaced grid points.
    ``info["state"]`` is the full float64 field ``(N, 1)``.

    ## Rewards
    ``-(mean_j (u_j - u*_j)^2 + action_cost * ||a||^2)`` after the step.

    ## Episode End
    Terminated when the field exceeds ``state_bound`` in absolute value or the solver
    blows up (reward ``failure_reward``); truncated after ``max_episode_steps``
    (see ``simsci.envs._core`` on gymnasium.make's own ``max_episode_steps``).

    ## Version History
    * v0: first version.
"""
        + _DOC_ARGS
    )

    def __init__(
        self, task: str = "heat-track", *, action_bounds="clip", render_mode=None, **kwargs
    ):
        super().__init__(
            PDEControlDynamics(task, **kwargs),
            action_bounds=action_bounds,
            render_mode=render_mode,
            spec=("simsci/PDEControl-v0", {"task": task, **kwargs}),
        )


class PDEControlVectorEnv(SimsciVectorEnv):
    __doc__ = (
        """``num_envs`` PDEControl environments stepped as one batch on ``device``.

    Made by ``gymnasium.make_vec("simsci/PDEControl-v0", num_envs=N,
    vectorization_mode="vector_entry_point", ...)``; one PDE solve advances all
    sub-environments. See :class:`PDEControlEnv` for the environment and
    ``SimsciVectorEnv`` for ``array_backend`` and ``autoreset_mode``.
"""
        + _DOC_ARGS
    )

    def __init__(
        self,
        num_envs: int = 1,
        task: str = "heat-track",
        *,
        action_bounds="clip",
        array_backend="numpy",
        autoreset_mode="NextStep",
        render_mode=None,
        **kwargs,
    ):
        super().__init__(
            PDEControlDynamics(task, **kwargs),
            num_envs,
            action_bounds=action_bounds,
            array_backend=array_backend,
            autoreset_mode=autoreset_mode,
            render_mode=render_mode,
            spec=("simsci/PDEControl-v0", {"task": task, **kwargs}),
        )
