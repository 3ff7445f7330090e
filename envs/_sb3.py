"""Stable Baselines3 adapter: a simsci vector environment as an SB3 ``VecEnv``.

SB3 steps its own vector environments (``DummyVecEnv`` runs the sub-environments one
after another). :func:`to_sb3` hands SB3 a simsci batched environment instead, so all
sub-environments advance in one tensor operation::

    from stable_baselines3 import PPO
    from simsci.envs import ODEControlVectorEnv, to_sb3

    venv = to_sb3(ODEControlVectorEnv(16, "pendulum-swingup"))
    PPO("MlpPolicy", venv).learn(10_000)

SB3 resets a finished sub-environment within the same step and reports the final
observation in ``infos[i]["terminal_observation"]`` and time-limit ends in
``infos[i]["TimeLimit.truncated"]``. The adapter leaves the caller's environment as it
is (no attribute changed): in gymnasium's default ``NextStep`` autoreset mode it resets
the finished sub-environments at once with a partial reset
(``reset(options={"reset_mask": done})``), in ``SameStep`` mode it reads ``final_obs``.
Like SB3's ``Monitor``/``VecMonitor``, it puts ``infos[i]["episode"] = {"r": return,
"l": length, "t": seconds since the adapter was made}`` on each finished episode, so
SB3's ``rollout/ep_rew_mean`` and ``ep_len_mean`` are logged without another wrapper.
Stable Baselines3 is an optional dependency (``pip install "simsci[rl]"``), imported
when :func:`to_sb3` runs.
"""

from __future__ import annotations

import time

import numpy as np
from gymnasium.vector import AutoresetMode

from simsci.envs._core import SimsciVectorEnv
from simsci.envs._driving import DrivingVectorEnv
from simsci.errors import MissingExtraError

__all__ = ["to_sb3"]


def _import_vec_env():
    try:
        from stable_baselines3.common.vec_env import VecEnv
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise MissingExtraError(
            'to_sb3 needs Stable Baselines3: pip install "simsci[rl]" (or stable-baselines3)'
        ) from exc
    return VecEnv


def to_sb3(env: SimsciVectorEnv):
    """Wrap a simsci vector environment (numpy backend) as an SB3 ``VecEnv``.

    The environment itself is not changed (module docstring). Dict observations
    (``simsci/Driving-v0``'s default: use ``PPO("MultiInputPolicy", ...)``) pass
    through; ``DrivingVectorEnv(n, observation="flat", action_scale="normalized")`` gives
    the flat vector and [-1, 1] actions SB3 recommends (``PPO("MlpPolicy", ...)``). A
    finished driving episode's ``collision``/``offroad``/``distance`` are in its info,
    and every finished episode's return, length and time in ``info["episode"]``.
    """
    if not isinstance(env, (SimsciVectorEnv, DrivingVectorEnv)):
        raise TypeError(
            f"to_sb3 takes a simsci vector environment (e.g. ODEControlVectorEnv or "
            f"gymnasium.make_vec(..., vectorization_mode='vector_entry_point').unwrapped), "
            f"got {type(env).__name__}"
        )
    if env.array_backend != "numpy":
        raise ValueError("to_sb3 needs array_backend='numpy' (SB3 works on numpy arrays)")
    VecEnv = _import_vec_env()

    class SimsciSB3VecEnv(VecEnv):
        """SB3 view of a simsci batched environment (see :func:`simsci.envs.to_sb3`)."""

        def __init__(self, venv: SimsciVectorEnv):
            self.venv = venv
            super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
            self._actions = None
            self._returns = np.zeros(self.num_envs)
            self._lengths = np.zeros(self.num_envs, dtype=np.int64)
            self._start = time.perf_counter()

        def reset(self):
            seed = self._seeds[0] if any(s is not None for s in self._seeds) else None
            obs, _ = self.venv.reset(seed=seed)
            self._reset_seeds()
            self._reset_options()
            self._returns[:] = 0.0
            self._lengths[:] = 0
            return obs

        def step_async(self, actions: np.ndarray) -> None:
            self._actions = np.asarray(actions, dtype=np.float32).reshape(
                self.num_envs, *self.action_space.shape
            )

        def step_wait(self):
            obs, reward, term, trunc, infos = self.venv.step(self._actions)
            done = term | trunc
            self._returns += reward
            self._lengths += 1
            out = [{} for _ in range(self.num_envs)]
            if not done.any():
                return obs, reward.astype(np.float32), done, out
            if self.venv.autoreset_mode == AutoresetMode.SAME_STEP:
                final, final_info = infos["final_obs"], infos["final_info"]
            else:  # NextStep: obs and infos are the final ones; reset those rows now
                final, final_info = obs, infos
                obs, _ = self.venv.reset(options={"reset_mask": done})
            elapsed = round(time.perf_counter() - self._start, 6)
            for i in np.flatnonzero(done):
                if isinstance(final, dict):  # Dict observations (simsci/Driving-v0)
                    out[i]["terminal_observation"] = {k: v[i] for k, v in final.items()}
                else:
                    out[i]["terminal_observation"] = final[i]
                out[i]["TimeLimit.truncated"] = bool(trunc[i] and not term[i])
                for key in ("collision", "offroad", "distance"):  # episode outcome
                    if key in final_info:
                        out[i][key] = final_info[key][i]
                out[i]["episode"] = {
                    "r": float(self._returns[i]),
                    "l": int(self._lengths[i]),
                    "t": elapsed,
                }
            self._returns[done] = 0.0
            self._lengths[done] = 0
            return obs, reward.astype(np.float32), done, out

        def close(self) -> None:
            self.venv.close()

        def get_attr(self, attr_name, indices=None):
            value = getattr(self.venv, attr_name)
            return [value for _ in self._get_indices(indices)]

        def set_attr(self, attr_name, value, indices=None) -> None:
            setattr(self.venv, attr_name, value)

        def env_method(self, method_name, *method_args, indices=None, **method_kwargs):
            result = getattr(self.venv, method_name)(*method_args, **method_kwargs)
            return [result for _ in self._get_indices(indices)]

        def env_is_wrapped(self, wrapper_class, indices=None):
            return [False for _ in self._get_indices(indices)]

    return SimsciSB3VecEnv(env)
