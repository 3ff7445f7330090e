r"""``simsci/ODEControl-v0``: any registered ODE/SDE system under control, with a task.

The controlled system is

.. math::
    \dot x = f(x; p + G u) + B u \quad\text{(ODE)},\qquad
    dx = \big(f(x; p + G u) + B u\big)\,dt + g(x; p + G u)\,dW \quad\text{(SDE)},

with the action :math:`u \in [u_{lo}, u_{hi}]^A` held constant over each control
interval ``dt`` (zero-order hold). *Additive* control uses the actuator matrix
:math:`B` (``D x A``, one column per actuated state); *parametric* control shifts
parameters through the gain matrix :math:`G` (``P x A``). Integration:
:func:`simsci.odeint`'s fixed-step solve (``rk4`` with ``substeps`` steps per
interval; any fixed-step method, adaptive ones are refused) for ODEs, run through
:class:`simsci.integrate.FixedStepSolver`, which checks and plans the interval once
and then takes exactly odeint's steps (the multistep Adams methods call odeint each
interval); :func:`simsci.sdeint` (``euler``/``srk`` with ``substeps`` steps and a
Brownian motion seeded from the environment's generator) for SDEs.

Tasks (``TASKS``; every field can be overridden by a keyword of the environment):

``pendulum-swingup``
    ``damped_pendulum`` (theta = 0 hangs down), torque-like additive control on
    :math:`\dot\omega`, :math:`|u| \le 4` (0.41 of :math:`g/L`, so swinging up needs
    pumping, as in gymnasium's Pendulum whose torque reaches 0.4 of gravity's).
    Observation :math:`(\cos\theta, \sin\theta, \omega)`; reward
    :math:`-(\mathrm{wrap}(\theta - \pi)^2 + 0.1\omega^2 + 0.001 u^2)`; initial angle
    uniform on the circle, :math:`\omega \sim U[-1, 1]`; dt 0.05, 200 steps.
``lorenz63-stabilize``
    ``lorenz63`` (or ``stochastic_lorenz``) from its attractor to the fixed point
    :math:`C^+ = (\sqrt{\beta(\rho-1)}, \sqrt{\beta(\rho-1)}, \rho - 1)` (unstable at
    :math:`\rho = 28`) with additive control on all three states, :math:`|u_i| \le
    10`; reward :math:`-(\|x - C^+\|^2/100 + 10^{-3}\|u\|^2)`; dt 0.02, 250 steps;
    failure beyond :math:`|x_i| > 500`. Bucci et al. (2019), "Control of chaotic
    systems by deep reinforcement learning", Proc. R. Soc. A 475, 20190351, control the
    Lorenz system in the same way.
``lotka-volterra-target``
    ``lotka_volterra`` under harvesting: parametric control
    :math:`\alpha \to \alpha - u_1`, :math:`\gamma \to \gamma + u_2` with efforts
    :math:`u \in [0, 1]^2`; keep the populations at the target (3, 1) (an equilibrium
    for the constant efforts (0.4, 0.6), but a centre, not an attractor: holding it
    needs feedback); reward :math:`-(\|(x - x^*)/x^*\|^2 + 0.01\|u\|^2)`; dt 0.1, 200
    steps; failure when a population leaves [1e-4, 1e3].
``rigid-body-intermediate-axis``
    ``rigid_body`` (Euler's equations in body angular momentum m) spinning about its
    intermediate axis, m = (0, 1, 0): unstable without control (the tennis-racket or
    Dzhanibekov flip; Ashbaugh, Chicone & Cushman 1991, J. Dyn. Differ. Equ. 3, 67-85).
    Body torques on the two other axes only (additive control on :math:`\dot m_1`,
    :math:`\dot m_3`), :math:`|u_i| \le 0.25`; reward :math:`-(\|m - e_2\|^2 +
    0.01\|u\|^2)`; initial :math:`m_1, m_3 \sim U[-0.1, 0.1]`,
    :math:`m_2 = \sqrt{1 - m_1^2 - m_3^2}`; dt 0.1, 200 steps. Linearised about
    :math:`e_2`, :math:`\dot m_1 = (1/I_3 - 1/I_2) m_3 + u_1`,
    :math:`\dot m_3 = (1/I_2 - 1/I_1) m_1 + u_3`: a saddle of rate
    :math:`\sqrt{(1/I_3 - 1/I_2)(1/I_2 - 1/I_1)}` (0.5 at the defaults, at most 0.8
    over ``params="random"``, whose ranges keep :math:`I_1 > I_2 \ge I_3`) that the
    feedback :math:`u = -k(m_1, m_3)`, k above the rate, turns into a sink; no torque
    about the spin axis, as for a spacecraft with two working actuators (Crouch 1984,
    IEEE Trans. Automat. Control 29, 321-331).
``regulate``
    any system: additive control of every state, :math:`|u_i| \le 1`, drive the state
    to ``target`` (default the origin); reward :math:`-(\|x - x^*\|^2 + 0.01\|u\|^2)`;
    dt the system's ``default_dt``, 200 steps.

Design choices: observations are float32 views of the float64 state (``dtype``
selects the integration precision); ``info["state"]`` carries the raw state that
rollout files record and surrogate models learn. ``params="random"`` draws each
episode's parameters from the system's ``param_ranges`` (domain randomisation; the
parameters are not observed). The systems are autonomous, so every interval is
integrated over ``[0, dt]``; ``info["t"]`` is ``steps * dt``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from simsci import integrate
from simsci import systems as _systems
from simsci._device import resolve_device
from simsci.envs import _render
from simsci.envs._core import (
    Dynamics,
    SimsciEnv,
    SimsciVectorEnv,
    check_action_bounds,
    check_dtype,
    fixed_params,
)
from simsci.errors import unknown_name
from simsci.integrate import FIXED_STEP_METHODS, ODE_METHODS, SDE_METHODS, FixedStepSolver

__all__ = ["TASKS", "Task", "ODEControlDynamics", "ODEControlEnv", "ODEControlVectorEnv"]


@dataclasses.dataclass(frozen=True)
class Task:
    """A control task on a system (see the module docstring for the built-in ones).

    ``actuated``: names of the states with additive control (columns of B);
    ``controlled_params``: names of parameters under parametric control with their
    gains (columns of G). ``target(system, params (n, P)) -> (n, D)``;
    ``observe(x) -> obs`` with ``observation_low/high`` its bounds (None: the state,
    unbounded); ``reward(x, u, target) -> (n,)``; ``initial(n, generator) -> (n, D)``
    on the CPU in float64 (None: the system's own initial distribution).
    """

    system: str
    action_low: float | Sequence[float]
    action_high: float | Sequence[float]
    dt: float | None
    max_episode_steps: int | None
    actuated: Sequence[str] | None = None  # None: all states (additive)
    controlled_params: Mapping[str, float] | None = None
    target: Callable | None = None
    observe: Callable | None = None
    observation_low: Sequence[float] | None = None
    observation_high: Sequence[float] | None = None
    observation_names: Sequence[str] | None = None
    reward: Callable | None = None
    initial: Callable | None = None
    state_bound: float = 1e6
    substeps: int = 4
    failure_reward: float = -100.0


def _wrap(angle: torch.Tensor) -> torch.Tensor:
    return torch.remainder(angle + math.pi, 2 * math.pi) - math.pi


def _pendulum_obs(x):
    theta, omega = x[..., 0], x[..., 1]
    return torch.stack((torch.cos(theta), torch.sin(theta), omega), dim=-1)


def _pendulum_reward(x, u, target):
    err = _wrap(x[..., 0] - math.pi)
    return -(err**2 + 0.1 * x[..., 1] ** 2 + 0.001 * (u**2).sum(-1))


def _pendulum_initial(n, generator):
    u = torch.rand(n, 2, generator=generator, dtype=torch.float64)
    return torch.stack((math.pi * (2 * u[:, 0] - 1), 2 * u[:, 1] - 1), dim=-1)


def _lorenz_fixed_point(system, p):
    rho = p[:, system.param_names.index("rho")]
    beta = p[:, system.param_names.index("beta")]
    r = torch.sqrt(beta * (rho - 1).clamp_min(0))
    return torch.stack((r, r, rho - 1), dim=-1)


def _lorenz_reward(x, u, target):
    return -(((x - target) ** 2).sum(-1) / 100.0 + 1e-3 * (u**2).sum(-1))


def _lv_target(system, p):
    return torch.tensor([3.0, 1.0], dtype=p.dtype, device=p.device).expand(p.shape[0], 2)


def _lv_reward(x, u, target):
    return -((((x - target) / target) ** 2).sum(-1) + 0.01 * (u**2).sum(-1))


def _spin_axis(system, p):
    return torch.tensor([0.0, 1.0, 0.0], dtype=p.dtype, device=p.device).expand(p.shape[0], 3)


def _near_spin_axis(n, generator):
    u = 0.2 * torch.rand(n, 2, generator=generator, dtype=torch.float64) - 0.1
    m2 = torch.sqrt(1.0 - (u * u).sum(-1))
    return torch.stack((u[:, 0], m2, u[:, 1]), dim=-1)


def _quadratic_reward(x, u, target):
    return -(((x - target) ** 2).reshape(x.shape[0], -1).sum(-1) + 0.01 * (u**2).sum(-1))


TASKS: dict[str, Task] = {
    "pendulum-swingup": Task(
        system="damped_pendulum",
        action_low=-4.0,
        action_high=4.0,
        dt=0.05,
        max_episode_steps=200,
        actuated=("omega",),
        observe=_pendulum_obs,
        observation_low=(-1.0, -1.0, -math.inf),
        observation_high=(1.0, 1.0, math.inf),
        observation_names=("cos_theta", "sin_theta", "omega"),
        reward=_pendulum_reward,
        initial=_pendulum_initial,
        substeps=4,
    ),
    "lorenz63-stabilize": Task(
        system="lorenz63",
        action_low=-10.0,
        action_high=10.0,
        dt=0.02,
        max_episode_steps=250,
        target=_lorenz_fixed_point,
        reward=_lorenz_reward,
        state_bound=500.0,
        substeps=2,
    ),
    "lotka-volterra-target": Task(
        system="lotka_volterra",
        action_low=0.0,
        action_high=1.0,
        dt=0.1,
        max_episode_steps=200,
        controlled_params={"alpha": -1.0, "gamma": 1.0},
        target=_lv_target,
        reward=_lv_reward,
        state_bound=1e3,
        substeps=4,
    ),
    "rigid-body-intermediate-axis": Task(
        system="rigid_body",
        action_low=-0.25,
        action_high=0.25,
        dt=0.1,
        max_episode_steps=200,
        actuated=("m1", "m3"),
        target=_spin_axis,
        reward=_quadratic_reward,
        initial=_near_spin_axis,
        state_bound=10.0,
        substeps=4,
    ),
    "regulate": Task(
        system="van_der_pol",
        action_low=-1.0,
        action_high=1.0,
        dt=None,
        max_episode_steps=200,
        reward=_quadratic_reward,
    ),
}


class _ControlledField(torch.nn.Module):
    """``f(t, x) = drift(x; p + G u) + B u`` (and ``g`` for SDEs) at fixed ``u``."""

    def __init__(self, system, params, additive, noise_type=None, sde_type="ito"):
        super().__init__()
        self.system = system
        self.params = params
        self.additive = additive
        self.noise_type = noise_type
        self.sde_type = sde_type

    def forward(self, t, x):
        out = self.system.drift(t, x, self.params)
        return out if self.additive is None else out + self.additive

    f = forward

    def g(self, t, x):
        return self.system.diffusion(t, x, self.params)


def _task_system(task: str, system: str | None, system_options: Mapping | None):
    """The task's spec and the system it controls (checked: an ODE/SDE system with the
    task's states unless the task is "regulate")."""
    if task not in TASKS:
        raise unknown_name("task", task, TASKS)
    spec = TASKS[task]
    name = system or spec.system
    if name not in _systems.SYSTEMS:
        raise unknown_name("system", name, _systems.SYSTEMS)
    sys_ = _systems.get(name, **dict(system_options or {}))
    if sys_.kind != "state":
        raise ValueError(
            f"system {name!r} is a {sys_.kind!r} system; ODEControl takes "
            "ODE/SDE systems (use simsci/PDEControl-v0 for PDEs)"
        )
    if not sys_.autonomous:
        raise ValueError(
            f"system {name!r} is not autonomous (its dynamics depend on t); ODEControl "
            "solves each control interval from t = 0, so it would drop the time "
            "dependence: add the phase as a state instead"
        )
    if system is not None and task != "regulate":
        want = _systems.get(spec.system).state_names
        if tuple(sys_.state_names) != tuple(want):
            raise ValueError(
                f"task {task!r} is defined on states {list(want)} but system "
                f"{name!r} has states {list(sys_.state_names)}; pick a "
                "system with the same states or task='regulate'"
            )
    return spec, sys_


def _control_matrices(sys_, name: str, actuated: list[str], controlled_params: dict):
    """``B`` (D x A, additive columns first) and ``G`` (P x A, the parametric columns)."""
    for state in actuated:
        if state not in sys_.state_names:
            raise unknown_name(f"state of {name!r}", state, sys_.state_names)
    for param in controlled_params:
        if param not in sys_.param_names:
            raise unknown_name(f"parameter of {name!r}", param, sys_.param_names)
    A = len(actuated) + len(controlled_params)
    if A == 0:
        raise ValueError("the environment needs at least one actuated state or parameter")
    B = torch.zeros(sys_.dim, A, dtype=torch.float64)
    for j, state in enumerate(actuated):
        B[sys_.state_names.index(state), j] = 1.0
    G = torch.zeros(len(sys_.param_names), A, dtype=torch.float64)
    for j, (param, gain) in enumerate(controlled_params.items()):
        G[sys_.param_names.index(param), len(actuated) + j] = float(gain)
    return B, G


def _integrator(sys_, method: str | None) -> str:
    """The integrator's name: ``euler`` (SDEs) or ``rk4`` (ODEs) unless given, checked."""
    if sys_.is_sde:
        method = method or "euler"
        if method not in SDE_METHODS:
            raise unknown_name("SDE method", method, SDE_METHODS)
        return method
    method = method or "rk4"
    if method not in ODE_METHODS:
        raise unknown_name("ODE method", method, ODE_METHODS)
    if ODE_METHODS[method].adaptive:
        # checked here, once, rather than failing inside odeint on the first step
        fixed = [name for name, info in ODE_METHODS.items() if not info.adaptive]
        raise ValueError(
            f"ODEControl integrates each control interval in `substeps` fixed steps; "
            f"method {method!r} is adaptive (it picks its own steps). Use a fixed-step "
            f"method: {', '.join(fixed)}"
        )
    return method


class ODEControlDynamics(Dynamics):
    """The batched physics + task of ``ODEControl`` (see the module docstring)."""

    def __init__(
        self,
        task: str = "pendulum-swingup",
        *,
        system: str | None = None,
        system_options: Mapping | None = None,
        params="default",
        target=None,
        actuated: Sequence[str] | None = None,
        controlled_params: Mapping[str, float] | None = None,
        action_low=None,
        action_high=None,
        dt: float | None = None,
        substeps: int | None = None,
        max_episode_steps: int | None | str = "task",
        method: str | None = None,
        state_bound: float | None = None,
        failure_reward: float | None = None,
        device=None,
        dtype=torch.float64,
    ):
        spec, sys_ = _task_system(task, system, system_options)
        self.task_name = task
        self.system_name = system or spec.system
        self.system = sys_
        self.device = resolve_device(device) if device is not None else torch.device("cpu")
        self.dtype = check_dtype(dtype)
        self.state_shape = tuple(sys_.state_shape)
        self._setup_controls(spec, actuated, controlled_params, action_low, action_high)
        self._setup_timing(spec, dt, substeps, max_episode_steps, state_bound, failure_reward)
        self.method = _integrator(sys_, method)
        self.params_mode, fixed = fixed_params(sys_, params)
        self._fixed_params = fixed.to(self.device, self.dtype)
        self._target_override = self._check_target(target)
        self._spec = spec
        self._setup_observation(spec)
        self._t_span = torch.tensor([0.0, self.dt], dtype=torch.float64)
        self._solver = self._fixed_step_solver()
        self._field_checked = False

    # ----------------------------------------------------------------- set-up
    def _setup_controls(self, spec, actuated, controlled_params, action_low, action_high):
        """Additive columns (B) then parametric columns (G), and the action bounds."""
        if controlled_params is None and actuated is None:
            controlled_params = spec.controlled_params
            actuated = spec.actuated if spec.controlled_params is None else ()
        actuated = list(self.system.state_names) if actuated is None else list(actuated)
        controlled_params = dict(controlled_params or {})
        B, G = _control_matrices(self.system, self.system_name, actuated, controlled_params)
        self.actuated = tuple(actuated)
        self.controlled_params = controlled_params
        self._B = B.to(self.device, self.dtype) if actuated else None
        self._G = G.to(self.device, self.dtype) if controlled_params else None
        self.action_names = (*actuated, *controlled_params)
        low = spec.action_low if action_low is None else action_low
        high = spec.action_high if action_high is None else action_high
        self.action_low, self.action_high = check_action_bounds(low, high, B.shape[1])

    def _setup_timing(self, spec, dt, substeps, max_episode_steps, state_bound, failure_reward):
        """The control interval, integrator steps, episode length and failure rule."""
        self.dt = float(dt if dt is not None else spec.dt or self.system.default_dt)
        if not (math.isfinite(self.dt) and self.dt > 0):
            raise ValueError(f"dt (the control interval) must be finite and > 0, got {dt!r}")
        self.substeps = int(substeps if substeps is not None else spec.substeps)
        if self.substeps < 1:
            raise ValueError(f"substeps must be >= 1, got {substeps!r}")
        mes = spec.max_episode_steps if max_episode_steps == "task" else max_episode_steps
        if mes is not None and (int(mes) != mes or mes < 1):
            raise ValueError(f"max_episode_steps must be a positive int or None, got {mes!r}")
        self.max_episode_steps = None if mes is None else int(mes)
        self.state_bound = float(spec.state_bound if state_bound is None else state_bound)
        self.failure_reward = float(
            spec.failure_reward if failure_reward is None else failure_reward
        )

    def _check_target(self, target) -> torch.Tensor | None:
        """The user's target state on the device (None: the task's)."""
        if target is None:
            return None
        t_arr = torch.as_tensor(np.asarray(target, dtype=np.float64))
        if tuple(t_arr.shape) != self.state_shape:
            raise ValueError(
                f"target must have the state shape {self.state_shape} of "
                f"{self.system_name!r} ({list(self.system.state_names)}), got "
                f"{tuple(t_arr.shape)}"
            )
        return t_arr.to(self.device, self.dtype)

    def _setup_observation(self, spec) -> None:
        """The observation's bounds and names: the task's observe, else the state."""
        if spec.observe is not None:
            n_obs = len(spec.observation_low)
            self.observation_low = np.asarray(spec.observation_low, dtype=np.float32)
            self.observation_high = np.asarray(spec.observation_high, dtype=np.float32)
            self.obs_names = tuple(spec.observation_names or [f"o{i}" for i in range(n_obs)])
        else:
            self.observation_low = np.full(self.state_shape, -np.inf, dtype=np.float32)
            self.observation_high = np.full(self.state_shape, np.inf, dtype=np.float32)
            self.obs_names = tuple(self.system.state_names)

    def _fixed_step_solver(self) -> FixedStepSolver | None:
        """The control interval's solve, checked and planned once (None: a multistep
        method or a stochastic system, which go through odeint/sdeint each step).

        A single environment's step is a handful of RK steps on a batch of one, where
        odeint's per-call checks and set-up cost more than the arithmetic; this solver
        runs the same steps, bit for bit, without them."""
        if self.system.is_sde or self.method not in FIXED_STEP_METHODS:
            return None
        h = self.dt / self.substeps
        return FixedStepSolver(self.method, self._t_span, h, dtype=self.dtype, device=self.device)

    # ----------------------------------------------------------------- pieces
    def _targets(self, params: torch.Tensor) -> torch.Tensor:
        if self._target_override is not None:
            return self._target_override.expand(params.shape[0], *self.state_shape)
        if self._spec.target is not None:
            return self._spec.target(self.system, params)
        return torch.zeros(params.shape[0], *self.state_shape, dtype=self.dtype, device=self.device)

    def _rows(self, params, n):
        return self._fixed_params.expand(n, -1) if params is None else params

    def sample_reset(self, n, generator):
        sys_ = self.system
        params = None
        if self.params_mode == "random":
            params = sys_.sample_params(
                n, generator=generator, device=self.device, dtype=self.dtype
            )
        if self._spec.initial is not None and self.system_name == self._spec.system:
            x = self._spec.initial(n, generator).to(self.device, self.dtype)
        else:
            x = sys_.sample_initial(
                n,
                generator=generator,
                device=self.device,
                dtype=self.dtype,
                params=self._rows(params, n),
            )
        return x, params

    def advance(self, state, params, action, generator):
        n = state.shape[0]
        p = self._rows(params, n)
        if self._G is not None:
            p = p + action @ self._G.T
        additive = action @ self._B.T if self._B is not None else None
        if self._solver is not None:
            return self._advance_fixed(state, p, additive)
        h = self.dt / self.substeps
        t = self._t_span
        if self.system.is_sde:
            field = _ControlledField(
                self.system, p, additive, self.system.noise_type, self.system.sde_type
            )
            seed = int(torch.randint(0, 2**62, (1,), generator=generator))
            out = integrate.sdeint(
                field, state, t, method=self.method, dt=h, seed=seed, check_finite=False
            )
        else:
            field = _ControlledField(self.system, p, additive)
            out = integrate.odeint(
                field, state, t, method=self.method, step_size=h, check_finite=False
            )
        return out[:, -1]

    def _advance_fixed(self, state, p, additive):
        """One interval by the planned fixed-step solver: what odeint computes, through a
        closure instead of a module (``_ControlledField.forward``'s arithmetic). The
        field's output is checked once, on the first interval: the system and dtype
        cannot change afterwards."""
        drift = self.system.drift

        def bare(t, x):
            return drift(t, x, p)

        if not self._field_checked:
            # the drift's own output, before the actuators are added to it (a wrong
            # shape then reads as the system's fault, not as a broadcasting error)
            self._solver.check(bare, state)
            self._field_checked = True
        if additive is None:
            return self._solver(bare, state)

        def field(t, x):
            return drift(t, x, p) + additive

        return self._solver(field, state)

    def observe(self, state):
        return state if self._spec.observe is None else self._spec.observe(state)

    def target(self, params):
        return self._targets(self._rows(params, 1))

    def render_frame(self, state, params, scale):
        if self.task_name == "pendulum-swingup" and self.system_name == "damped_pendulum":
            return _render.pendulum_frame(float(state[0]))
        return super().render_frame(state, params, scale)

    def reward(self, state, action, next_state, params):
        target = self._targets(self._rows(params, next_state.shape[0]))
        fn = self._spec.reward or _quadratic_reward
        return fn(next_state, action, target)

    def config(self) -> dict:
        return {
            "task": self.task_name,
            "system": self.system.config(),
            "params_mode": self.params_mode,
            "actions": list(self.action_names),
            "dt": self.dt,
            "substeps": self.substeps,
            "method": self.method,
        }


_DOC_ARGS = """
    Args:
        task: a key of ``simsci.envs.TASKS`` ("pendulum-swingup", "lorenz63-stabilize",
            "lotka-volterra-target", "rigid-body-intermediate-axis", "regulate").
        system: a registered ODE/SDE system (default: the task's); for a named task it
            must have the task's states (``stochastic_lorenz`` for the Lorenz task).
        system_options: constructor options of the system (``{"dim": 10}``).
        params: "default", "random" (drawn per episode from ``param_ranges``), or one
            row (dict or array) of parameters.
        target: the state to reach (overrides the task's).
        actuated, controlled_params: additive-control states / parametric-control
            parameters with gains (override the task's actuators).
        action_low, action_high: action bounds (number or one per action).
        dt, substeps, method: control interval, integrator steps per interval and
            integrator (``rk4`` for ODEs, ``euler`` for SDEs by default).
        max_episode_steps: truncation length (None: never truncate).
        state_bound, failure_reward: a state with a component beyond ``state_bound``
            (or non-finite) ends the episode with ``failure_reward``.
        device, dtype: where and in which precision the states are integrated.
        action_bounds: "clip" (default) clips out-of-bound actions, "error" rejects them.
"""


class ODEControlEnv(SimsciEnv):
    __doc__ = (
        """Control an ODE/SDE system (``simsci/ODEControl-v0``).

    ## Description
    A registered simsci system (``simsci.systems``) integrated by ``simsci.odeint`` /
    ``simsci.sdeint`` over a fixed control interval under additive or parametric
    control, with a task: swing up the damped pendulum, stabilise Lorenz-63 at a fixed
    point, hold Lotka-Volterra populations at a target, hold a rigid body's spin about
    its unstable intermediate axis, or regulate any system.

    ## Action Space
    ``Box(action_low, action_high, (A,), float32)``: one entry per actuated state
    (added to its time derivative) or controlled parameter (added to it times a gain).

    ## Observation Space
    ``Box(-inf, inf, (D,), float32)``: the state; the pendulum task observes
    ``(cos theta, sin theta, omega)``. ``info["state"]`` is the raw float64 state.

    ## Rewards
    Minus a weighted squared distance to the task's target minus an action cost (see
    ``simsci.envs._ode`` for each task's formula).

    ## Episode End
    Terminated when the state leaves ``state_bound`` or becomes non-finite (reward
    ``failure_reward``); truncated after ``max_episode_steps``
    (see ``simsci.envs._core`` on gymnasium.make's own ``max_episode_steps``).

    ## Version History
    * v0: first version.
"""
        + _DOC_ARGS
    )

    def __init__(
        self, task: str = "pendulum-swingup", *, action_bounds="clip", render_mode=None, **kwargs
    ):
        super().__init__(
            ODEControlDynamics(task, **kwargs),
            action_bounds=action_bounds,
            render_mode=render_mode,
            spec=("simsci/ODEControl-v0", {"task": task, **kwargs}),
        )


class ODEControlVectorEnv(SimsciVectorEnv):
    __doc__ = (
        """``num_envs`` ODEControl environments stepped as one batch on ``device``.

    Made by ``gymnasium.make_vec("simsci/ODEControl-v0", num_envs=N,
    vectorization_mode="vector_entry_point", ...)``; see :class:`ODEControlEnv` for
    the environment and ``SimsciVectorEnv`` for ``array_backend`` and
    ``autoreset_mode``.
"""
        + _DOC_ARGS
    )

    def __init__(
        self,
        num_envs: int = 1,
        task: str = "pendulum-swingup",
        *,
        action_bounds="clip",
        array_backend="numpy",
        autoreset_mode="NextStep",
        render_mode=None,
        **kwargs,
    ):
        super().__init__(
            ODEControlDynamics(task, **kwargs),
            num_envs,
            action_bounds=action_bounds,
            array_backend=array_backend,
            autoreset_mode=autoreset_mode,
            render_mode=render_mode,
            spec=("simsci/ODEControl-v0", {"task": task, **kwargs}),
        )
