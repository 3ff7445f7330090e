"""The batched machinery every simsci environment shares.

An environment is split in two:

- a :class:`Dynamics` object: the physics and the task for a *batch* of ``n``
  sub-environments held as tensors on one device -- how to draw initial states, how to
  advance all states by one control interval, what is observed, the reward, and when a
  state has failed (left its bounds or became non-finite);
- the gymnasium front ends :class:`SimsciEnv` (one environment, numpy in/out) and
  :class:`SimsciVectorEnv` (``num_envs`` sub-environments stepped as one tensor
  operation, numpy or torch in/out, gymnasium's autoreset semantics).

Both front ends drive the same :class:`_Batch` (states, parameters, step counters), so a
single environment is exactly a vector environment of one, and they cannot disagree.

Design choices, and why:

- **Randomness.** One ``torch.Generator`` on the CPU per front end, seeded by
  ``reset(seed=...)``, draws everything random (initial states, per-episode parameters,
  the seeds of the Brownian motions of stochastic systems), then the numbers move to the
  device: a seed gives the same episode on every machine (up to floating-point
  arithmetic). A vector environment draws for all its sub-environments at once, so
  sub-environment ``i`` of a vector env seeded ``s`` is *not* the single env seeded
  ``s + i``; each is deterministic given its seed and actions.
- **Failure.** A state that becomes non-finite, or leaves the task's ``state_bound``,
  ends its episode (``terminated``) with the task's ``failure_reward``; a non-finite
  state is replaced by the last finite one, so observations always lie in the
  observation space. A diverging sub-environment never stops the others.
- **Actions.** Shape and dtype are checked and NaN/inf raise ``ValueError`` naming
  the sub-environments. Out-of-bounds actions are clipped to the action space
  (``action_bounds="clip"``, the default, as the classic-control environments do) or
  rejected (``action_bounds="error"``).
- **Truncation** at ``max_episode_steps`` (a keyword of every constructor and of
  ``make_vec``; default the task's) happens inside the environment, not by a
  ``TimeLimit`` wrapper, so single and vector environments truncate identically.
  ``gymnasium.make`` keeps a ``max_episode_steps`` argument for itself and adds its
  ``TimeLimit`` on top: that shortens episodes below the task's length but cannot
  lengthen them; for longer episodes construct the class (``ODEControlEnv(...,
  max_episode_steps=1000)``) or use ``make_vec``.
- **Autoreset.** Vector environments follow gymnasium's ``NEXT_STEP`` mode by default
  (the step after an episode ends resets that sub-environment, ignores its action and
  returns reward 0 and false flags); ``autoreset_mode="SameStep"`` resets within the
  ending step and reports the final observation in ``infos["final_obs"]``.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode

from simsci.envs import _render

__all__ = [
    "Dynamics",
    "SimsciEnv",
    "SimsciVectorEnv",
    "check_actions",
    "check_action_bounds",
    "check_dtype",
    "check_vector_options",
    "fixed_params",
    "own_spec",
]

ACTION_BOUNDS = ("clip", "error")
ARRAY_BACKENDS = ("numpy", "torch")


class Dynamics(abc.ABC):
    """Physics + task for a batch of sub-environments (subclass and fill in).

    Attributes set by subclasses: ``state_shape``, ``dt`` (control interval),
    ``observation_low/high`` (float32 arrays of the observation shape),
    ``action_low/high`` (float32 arrays ``(A,)``), ``max_episode_steps`` (int or None),
    ``state_bound`` (inf for none), ``failure_reward``, ``device``, ``dtype``.
    """

    state_shape: tuple[int, ...]
    dt: float
    observation_low: np.ndarray
    observation_high: np.ndarray
    action_low: np.ndarray
    action_high: np.ndarray
    max_episode_steps: int | None = None
    state_bound: float = math.inf
    failure_reward: float = -100.0
    device: torch.device
    dtype: torch.dtype

    @abc.abstractmethod
    def sample_reset(self, n: int, generator: torch.Generator):
        """``(states (n, *S), params (n, P) or None)`` for ``n`` fresh episodes."""

    @abc.abstractmethod
    def advance(self, state, params, action, generator: torch.Generator):
        """All states one control interval ahead; ``action`` ``(n, A)`` held constant."""

    def observe(self, state) -> torch.Tensor:
        """``(n, *obs_shape)`` observations of ``state``."""
        return state

    @abc.abstractmethod
    def reward(self, state, action, next_state, params) -> torch.Tensor:
        """``(n,)`` rewards of the transitions ``state --action--> next_state``."""

    def config(self) -> dict:
        """JSON-able description (system, task, parameters) recorded in rollout files."""
        return {}

    def target(self, params) -> torch.Tensor | None:
        """``(n, *S)`` target states of the task (None when it has none); for rendering."""
        return None

    def render_frame(self, state: torch.Tensor, params, scale: float) -> np.ndarray:
        """An ``(H, W, 3)`` uint8 frame of one state ``(*S)`` (``params`` its row or None)."""
        target = self.target(None if params is None else params[None])
        target = None if target is None else target[0].detach().cpu().numpy()
        return _render.profile_frame(state.detach().cpu().numpy(), target, scale)


def _box(low, high) -> gymnasium.spaces.Box:
    return gymnasium.spaces.Box(
        np.asarray(low, dtype=np.float32), np.asarray(high, dtype=np.float32), dtype=np.float32
    )


def _seed_from(seed) -> int:
    """An int seed from an int or a list of ints (a vector env's per-env seeds)."""
    if isinstance(seed, (list, tuple, np.ndarray)):
        ints = [int(s) for s in seed if s is not None]
        return int(np.random.SeedSequence(ints).generate_state(1, np.uint64)[0] >> 1)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, a list of ints or None, got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    return int(seed)


def check_actions(action, *, batch: int | None, low, high, mode: str, device, dtype):
    """Validate actions and return a ``(n, A)`` tensor on ``device``/``dtype``.

    ``batch`` None: one action of shape ``(A,)`` (a single environment); else ``(batch,
    A)``. Raises TypeError for non-numeric input, ValueError for a wrong shape, NaN/inf,
    and (``mode="error"``) values outside ``[low, high]``; ``mode="clip"`` clips.
    """
    A = low.shape[0]
    expected = (A,) if batch is None else (batch, A)
    if not isinstance(action, torch.Tensor) and _on_cpu(device) and dtype in _NUMPY_DTYPES:
        return _check_actions_numpy(action, expected, batch, low, high, mode, dtype)
    if isinstance(action, torch.Tensor):
        if action.dtype == torch.bool or action.is_complex():
            raise TypeError(f"actions must be real numbers, got a {action.dtype} tensor")
        a = action.detach()
    else:
        arr = np.asarray(action)
        if arr.dtype.kind not in "fiu":
            raise TypeError(
                f"actions must be real numbers (float or int), got dtype {arr.dtype} "
                f"({type(action).__name__}); pass a float array of shape {expected}"
            )
        a = torch.from_numpy(np.ascontiguousarray(arr))
    if tuple(a.shape) != expected:
        what = "the action" if batch is None else f"the actions of {batch} sub-environments"
        raise ValueError(
            f"{what} must have shape {expected} (the action space is Box{(A,)}), "
            f"got shape {tuple(a.shape)}"
        )
    a = a.to(device=device, dtype=dtype).reshape(-1, A)
    low_t = torch.as_tensor(low, device=device, dtype=dtype)
    high_t = torch.as_tensor(high, device=device, dtype=dtype)
    finite = torch.isfinite(a).all(dim=1)
    # one host synchronisation for both checks
    outside = ((a < low_t) | (a > high_t)).any(dim=1) if mode == "error" else None
    flags = torch.stack([~finite, outside if outside is not None else torch.zeros_like(finite)])
    if bool(flags.any()):
        bad_nan = torch.nonzero(flags[0]).flatten().tolist()
        if bad_nan:
            raise _nonfinite_action(bad_nan, batch)
        bad = torch.nonzero(flags[1]).flatten().tolist()
        raise _outside_action(bad, a[bad[0]].tolist(), low, high, batch)
    if mode == "clip":
        a = torch.maximum(torch.minimum(a, high_t), low_t)
    return a


def _nonfinite_action(rows: list[int], batch) -> ValueError:
    """The error for NaN/inf actions (rows: the sub-environments holding them)."""
    where = "" if batch is None else f" of sub-environment(s) {rows[:10]}"
    return ValueError(f"the action{where} contains NaN or inf: actions must be finite numbers")


def _outside_action(rows: list[int], first: list, low, high, batch) -> ValueError:
    """The error for actions outside the box (first: the first such row's action)."""
    where = "" if batch is None else f" of sub-environment {rows[0]} ({len(rows)} in all)"
    return ValueError(
        f"the action{where} {first} lies outside the action space [{low.tolist()}, "
        f"{high.tolist()}]; scale it into the bounds, or make the environment with "
        "action_bounds='clip' to clip silently"
    )


_NUMPY_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}


def _on_cpu(device) -> bool:
    return (device.type if isinstance(device, torch.device) else torch.device(device).type) == "cpu"


def _check_actions_numpy(action, expected, batch, low, high, mode, dtype) -> torch.Tensor:
    """:func:`check_actions` for numpy-like actions bound for the CPU: the same checks,
    casts and clipping in numpy (the same numbers and the same errors), then one tensor.

    A small numpy operation costs a fraction of a small torch one, and a single
    environment's step is made of small operations, so this is most of its action
    check's cost saved."""
    arr = np.asarray(action)
    if arr.dtype.kind not in "fiu":
        raise TypeError(
            f"actions must be real numbers (float or int), got dtype {arr.dtype} "
            f"({type(action).__name__}); pass a float array of shape {expected}"
        )
    if arr.shape != expected:
        what = "the action" if batch is None else f"the actions of {batch} sub-environments"
        raise ValueError(
            f"{what} must have shape {expected} (the action space is Box{expected[-1:]}), "
            f"got shape {arr.shape}"
        )
    np_dtype = _NUMPY_DTYPES[dtype]
    if arr.dtype != np_dtype:
        # a value beyond float32 becomes inf, as in torch's cast, silently: the finite
        # check below reports it
        with np.errstate(over="ignore"):
            arr = arr.astype(np_dtype)
    a = np.ascontiguousarray(arr).reshape(-1, expected[-1])
    low_c, high_c = low.astype(np_dtype), high.astype(np_dtype)
    if not np.isfinite(a).all():
        raise _nonfinite_action(np.flatnonzero(~np.isfinite(a).all(axis=1)).tolist(), batch)
    if mode == "error":
        outside = ((a < low_c) | (a > high_c)).any(axis=1)
        if outside.any():
            bad = np.flatnonzero(outside).tolist()
            raise _outside_action(bad, a[bad[0]].tolist(), low, high, batch)
        return torch.from_numpy(a)
    return torch.from_numpy(np.maximum(np.minimum(a, high_c), low_c))


def check_dtype(dtype) -> torch.dtype:
    """torch.float32/float64 or their names ("float32", "float64": JSON-able kwargs)."""
    named = {"float32": torch.float32, "float64": torch.float64}
    if isinstance(dtype, str) and dtype in named:
        return named[dtype]
    if dtype in (torch.float32, torch.float64):
        return dtype
    raise ValueError(f"dtype must be float32 or float64 (torch dtype or name), got {dtype!r}")


def _per_action(value, A: int, what: str) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(A, float(arr))
    if arr.shape != (A,):
        raise ValueError(f"{what} must be a number or {A} numbers (one per action), got {value!r}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{what} must be finite, got {value!r}")
    return arr


def check_action_bounds(low, high, A: int) -> tuple[np.ndarray, np.ndarray]:
    """``action_low`` / ``action_high`` (a number or one per action) as float32 ``(A,)``
    arrays, each entry of ``low`` below the one of ``high``."""
    low = _per_action(low, A, "action_low").astype(np.float32)
    high = _per_action(high, A, "action_high").astype(np.float32)
    if (low >= high).any():
        raise ValueError(f"action_low {low.tolist()} must lie below action_high {high.tolist()}")
    return low, high


def fixed_params(system, params) -> tuple[str, torch.Tensor]:
    """The parameter mode ("default", "random" or "fixed") and the fixed row ``(1, P)``
    (CPU float64; the system's defaults unless ``params`` is one row, a dict or array)."""
    if isinstance(params, str):
        if params not in ("default", "random"):
            raise ValueError(
                f"params must be 'default', 'random', a dict or an array, got {params!r}"
            )
        return params, system.params_tensor(1)
    rows = system.params_tensor(params)
    if rows.shape[0] != 1:
        raise ValueError("params must describe one parameter row (or use 'random')")
    return "fixed", rows


def own_spec(env, env_id: str, kwargs: dict) -> None:
    """Give a directly constructed environment the spec ``gymnasium.make`` would give it
    (``make`` overwrites it anyway), so recorders and Minari know how to rebuild it."""
    registered = gymnasium.registry.get(env_id)
    entry = registered.entry_point if registered is not None else None
    env.spec = EnvSpec(id=env_id, entry_point=entry, kwargs=dict(kwargs))


def check_vector_options(num_envs, array_backend, autoreset_mode) -> AutoresetMode:
    """Validate a vector environment's ``num_envs``, ``array_backend`` and
    ``autoreset_mode``; returns the autoreset mode."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)):
        raise TypeError(f"num_envs must be a positive int, got {num_envs!r}")
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if array_backend not in ARRAY_BACKENDS:
        raise ValueError(f"array_backend must be one of {ARRAY_BACKENDS}, got {array_backend!r}")
    try:
        mode = AutoresetMode(autoreset_mode)
    except ValueError:
        raise ValueError(
            f"autoreset_mode must be 'NextStep' or 'SameStep', got {autoreset_mode!r}"
        ) from None
    if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
        raise ValueError(
            f"autoreset_mode {mode.value!r} is not supported; use NextStep or SameStep"
        )
    return mode


def reset_index(options, num_envs: int, device, was_reset: bool) -> torch.Tensor | None:
    """The sub-environments a ``reset(options=...)`` call resets: None for all, else the
    indices where ``options["reset_mask"]`` (bool, (num_envs,): gymnasium's partial
    reset, as SB3-style wrappers need) is True, allowed once a full reset was done. Any
    other option is refused."""
    if not options:
        return None
    unknown = sorted(set(options) - {"reset_mask"})
    if unknown:
        raise ValueError(f"reset options are not supported, got {unknown} (only 'reset_mask')")
    mask = options["reset_mask"]
    mask = mask.cpu().numpy() if isinstance(mask, torch.Tensor) else np.asarray(mask)
    if mask.dtype != np.bool_ or mask.shape != (num_envs,):
        raise ValueError(
            f"reset_mask must be a bool array of shape ({num_envs},), got dtype {mask.dtype} "
            f"and shape {mask.shape}"
        )
    if not was_reset:
        raise gymnasium.error.ResetNeeded("reset_mask needs a full reset() first")
    return torch.as_tensor(np.flatnonzero(mask), device=device)


def _check_render_mode(render_mode):
    if render_mode not in (None, "rgb_array"):
        raise ValueError(
            f"render_mode must be None or 'rgb_array', got {render_mode!r} (simsci "
            "environments draw numpy frames; record rollouts and plot those for more)"
        )
    return render_mode


class _Batch:
    """The states of ``n`` sub-environments and their bookkeeping, on one device."""

    def __init__(self, dynamics: Dynamics, n: int):
        self.dyn = dynamics
        self.n = n
        self.state = None
        self.params = None
        self.steps = torch.zeros(n, dtype=torch.long, device=dynamics.device)

    def reset(self, generator: torch.Generator, index: torch.Tensor | None = None):
        """Fresh episodes for all sub-environments (``index`` None) or those in ``index``."""
        if index is None:
            self.state, self.params = self.dyn.sample_reset(self.n, generator)
            self.steps.zero_()
            return
        k = int(index.numel())
        if k == 0:
            return
        state, params = self.dyn.sample_reset(k, generator)
        self.state = self.state.clone()
        self.state[index] = state
        if params is not None:
            self.params = self.params.clone()
            self.params[index] = params
        self.steps[index] = 0

    def step(self, action: torch.Tensor, generator: torch.Generator):
        """Advance every sub-environment; returns ``(reward, terminated, truncated)``."""
        dyn = self.dyn
        old = self.state
        with torch.no_grad():
            new = dyn.advance(old, self.params, action, generator)
            flat = new.reshape(new.shape[0], -1)
            if math.isfinite(dyn.state_bound):
                # |x| <= bound is False for NaN and inf too: one test covers both rules
                failed = ~(flat.abs() <= dyn.state_bound).all(dim=1)
            else:
                failed = ~torch.isfinite(flat).all(dim=1)
            # On the CPU a look at the flags costs nothing, and most steps fail nowhere:
            # skip the repairs then (on a GPU that look would stall the queue; always
            # repair there, which gives the same numbers)
            repair = new.device.type != "cpu" or bool(failed.any())
            if repair:
                # a non-finite state is replaced by the last finite one (observations stay
                # inside the observation space); its reward is the failure reward
                finite = torch.isfinite(flat).all(dim=1)
                shape = (-1,) + (1,) * (new.dim() - 1)
                new = torch.where(finite.reshape(shape), new, old)
            reward = dyn.reward(old, action, new, self.params)
            if repair:
                reward = reward.masked_fill(failed, dyn.failure_reward)
        self.state = new
        self.steps += 1
        if dyn.max_episode_steps is None:
            truncated = torch.zeros_like(failed)
        else:
            truncated = (self.steps >= dyn.max_episode_steps) & ~failed
        return reward, failed, truncated

    def time(self) -> torch.Tensor:
        return self.steps.to(torch.float64) * self.dyn.dt


class _Common:
    """What both front ends share: spaces, generator, action checking, observations."""

    def _setup(self, dynamics: Dynamics, action_bounds: str):
        if action_bounds not in ACTION_BOUNDS:
            raise ValueError(f"action_bounds must be one of {ACTION_BOUNDS}, got {action_bounds!r}")
        self.dynamics = dynamics
        self.action_bounds = action_bounds
        self.dt = float(dynamics.dt)
        self.state_shape = tuple(dynamics.state_shape)
        self._obs_space = _box(dynamics.observation_low, dynamics.observation_high)
        self._act_space = _box(dynamics.action_low, dynamics.action_high)
        self._generator = torch.Generator(device="cpu")
        self._generator.manual_seed(int(np.random.SeedSequence().generate_state(1)[0]))

    def _seed(self, seed) -> None:
        if seed is not None:
            self._generator.manual_seed(_seed_from(seed))

    def _frame(self, i: int) -> np.ndarray:
        batch = self._batch
        if batch.state is None:
            raise gymnasium.error.ResetNeeded("call reset() before render()")
        state = batch.state[i]
        peak = float(state.abs().max()) if state.numel() else 1.0
        self._scale = max(getattr(self, "_scale", 1.0), 1.1 * peak)
        params = None if batch.params is None else batch.params[i]
        return self.dynamics.render_frame(state, params, self._scale)

    def _observe(self) -> torch.Tensor:
        obs = self.dynamics.observe(self._batch.state)
        # a finite float64 state beyond float32's range must not become an inf observation
        big = float(np.finfo(np.float32).max)
        return obs.clamp(-big, big).to(torch.float32)


class SimsciEnv(_Common, gymnasium.Env):
    """One environment over a :class:`Dynamics` (numpy observations and actions).

    ``info`` of reset and step: ``{"t": time, "state": raw state (float64)}``.
    Stepping before ``reset`` or after an episode ended raises
    ``gymnasium.error.ResetNeeded``.
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(
        self,
        dynamics: Dynamics,
        *,
        action_bounds: str = "clip",
        render_mode=None,
        spec: tuple[str, dict] | None = None,
    ):
        self.render_mode = _check_render_mode(render_mode)
        self._setup(dynamics, action_bounds)
        if spec is not None:  # (id, constructor keywords) of a registered subclass
            own_spec(self, spec[0], {**spec[1], "action_bounds": action_bounds})
        self.observation_space = self._obs_space
        self.action_space = self._act_space
        self._batch = _Batch(dynamics, 1)
        self._needs_reset = True
        self._seeded_once = False

    def _info(self) -> dict:
        batch = self._batch
        # the batch's time (steps * dt in float64) and state, read without indexing
        # tensors: a batch of one, and each small torch call costs more than numpy's
        return {
            "t": float(batch.steps.item()) * batch.dyn.dt,
            "state": batch.state.detach().to("cpu", torch.float64).numpy()[0],
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is None and not self._seeded_once:
            # derive from gymnasium's np_random so an unseeded env is still random
            self._generator.manual_seed(int(self.np_random.integers(2**62)))
        self._seeded_once = True
        self._seed(seed)
        if options:
            raise ValueError(f"reset options are not supported, got {sorted(options)}")
        self._batch.reset(self._generator)
        self._needs_reset = False
        return self._observe().cpu().numpy()[0], self._info()

    def step(self, action):
        if self._needs_reset:
            raise gymnasium.error.ResetNeeded(
                "the episode has ended (terminated or truncated) or the environment was "
                "never reset: call env.reset() before env.step()"
            )
        dyn = self.dynamics
        a = check_actions(
            action,
            batch=None,
            low=dyn.action_low,
            high=dyn.action_high,
            mode=self.action_bounds,
            device=dyn.device,
            dtype=dyn.dtype,
        )
        reward, terminated, truncated = self._batch.step(a, self._generator)
        term, trunc = bool(terminated.item()), bool(truncated.item())
        self._needs_reset = term or trunc
        obs = self._observe().cpu().numpy()[0]
        return obs, float(reward.item()), term, trunc, self._info()

    def render(self):
        """An ``(H, W, 3)`` uint8 frame of the current state (``render_mode="rgb_array"``)."""
        if self.render_mode is None:
            gymnasium.logger.warn(
                "render() called with render_mode=None; pass render_mode='rgb_array'"
            )
            return None
        return self._frame(0)


class SimsciVectorEnv(_Common, gymnasium.vector.VectorEnv):
    """``num_envs`` sub-environments of a :class:`Dynamics`, stepped as one batch.

    ``array_backend``: "numpy" (default; gymnasium's convention) or "torch" (tensors on
    the dynamics' device in and out: observations, rewards, flags, infos).
    ``autoreset_mode``: gymnasium's "NextStep" (default) or "SameStep".
    ``infos``: ``{"t": (n,), "state": (n, *S)}`` plus gymnasium's ``_key`` masks;
    ``SameStep`` adds ``final_obs``/``final_info`` for the sub-environments that ended.
    """

    metadata: dict[str, Any] = {
        "render_modes": ["rgb_array"],
        "render_fps": 20,
        "autoreset_mode": AutoresetMode.NEXT_STEP,
    }

    def __init__(
        self,
        dynamics: Dynamics,
        num_envs: int,
        *,
        action_bounds: str = "clip",
        array_backend: str = "numpy",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        render_mode=None,
        spec: tuple[str, dict] | None = None,
    ):
        mode = check_vector_options(num_envs, array_backend, autoreset_mode)
        self.render_mode = _check_render_mode(render_mode)
        self._setup(dynamics, action_bounds)
        self.num_envs = int(num_envs)
        self.array_backend = array_backend
        self.autoreset_mode = mode
        self.metadata = {**type(self).metadata, "autoreset_mode": mode}
        self.single_observation_space = self._obs_space
        self.single_action_space = self._act_space
        self.observation_space = gymnasium.vector.utils.batch_space(self._obs_space, self.num_envs)
        self.action_space = gymnasium.vector.utils.batch_space(self._act_space, self.num_envs)
        self._batch = _Batch(dynamics, self.num_envs)
        self._autoreset = torch.zeros(self.num_envs, dtype=torch.bool, device=dynamics.device)
        self._was_reset = False
        if spec is not None:
            front = {
                "action_bounds": action_bounds,
                "array_backend": array_backend,
                "autoreset_mode": mode.value,
            }
            own_spec(self, spec[0], {**spec[1], **front})

    # ----------------------------------------------------------------- output
    def _out(self, x: torch.Tensor):
        return x if self.array_backend == "torch" else x.cpu().numpy()

    def _infos(self) -> dict:
        state = self._batch.state
        if self.array_backend == "numpy":
            state = state.to(torch.float64)
        ones = np.ones(self.num_envs, dtype=bool)
        return {
            "t": self._out(self._batch.time()),
            "state": self._out(state),
            "_t": ones,
            "_state": ones,
        }

    # ----------------------------------------------------------------- API
    def reset(self, *, seed=None, options=None):
        if seed is None and not self._was_reset:
            self._generator.manual_seed(int(np.random.SeedSequence().generate_state(1)[0]))
        index = reset_index(options, self.num_envs, self._autoreset.device, self._was_reset)
        self._seed(seed)
        self._batch.reset(self._generator, index)
        self._autoreset[slice(None) if index is None else index] = False
        self._was_reset = True
        return self._out(self._observe()), self._infos()

    def step(self, actions):
        if not self._was_reset:
            raise gymnasium.error.ResetNeeded("call reset() before step() on a vector environment")
        dyn = self.dynamics
        a = check_actions(
            actions,
            batch=self.num_envs,
            low=dyn.action_low,
            high=dyn.action_high,
            mode=self.action_bounds,
            device=dyn.device,
            dtype=dyn.dtype,
        )
        batch = self._batch
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            resetting = self._autoreset
            reward, terminated, truncated = batch.step(a, self._generator)
            index = torch.nonzero(resetting).flatten()
            if index.numel():
                batch.reset(self._generator, index)
                reward = torch.where(resetting, torch.zeros_like(reward), reward)
                terminated = terminated & ~resetting
                truncated = truncated & ~resetting
            self._autoreset = terminated | truncated
            infos = self._infos()
            obs = self._observe()
        else:
            reward, terminated, truncated = batch.step(a, self._generator)
            done = terminated | truncated
            index = torch.nonzero(done).flatten()
            extra = {}
            if index.numel():
                final_obs = self._observe()
                final_state = batch.state
                final_t = batch.time()
                batch.reset(self._generator, index)
                done_np = done.cpu().numpy()
                extra = {
                    "final_obs": self._out(final_obs),
                    "_final_obs": done_np,
                    "final_info": {
                        "state": self._out(final_state),
                        "_state": done_np,
                        "t": self._out(final_t),
                        "_t": done_np,
                    },
                    "_final_info": done_np,
                }
            infos = {**self._infos(), **extra}
            obs = self._observe()
        return (
            self._out(obs),
            self._out(reward.to(torch.float32 if self.array_backend == "torch" else torch.float64)),
            self._out(terminated),
            self._out(truncated),
            infos,
        )

    def render(self):
        """A tuple of ``(H, W, 3)`` uint8 frames, one per sub-environment."""
        if self.render_mode is None:
            return None
        return tuple(self._frame(i) for i in range(self.num_envs))

    def close_extras(self, **kwargs):
        self._batch.state = None
