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
``infos[i]["TimeLimit.truncated"]``; the adapter runs the simsci env in gymnasium's
``SameStep`` autoreset mode, which has exactly these semantics. Stable Baselines3 is an
optional dependency (``pip install "simsci[rl]"``), imported when :func:`to_sb3` runs.
"""

from __future__ import annotations

import numpy as np
from gymnasium.vector import AutoresetMode

from simsci.envs._core import SimsciVectorEnv
from simsci.envs._driving import DrivingVectorEnv

__all__ = ["to_sb3"]


def _import_vec_env():
    try:
        from stable_baselines3.common.vec_env import VecEnv
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            'to_sb3 needs Stable Baselines3: pip install "simsci[rl]" (or stable-baselines3)'
        ) from exc
    return VecEnv


def to_sb3(env: SimsciVectorEnv):
    """Wrap a simsci vector environment (numpy backend) as an SB3 ``VecEnv``.

    The environment is switched to ``SameStep`` autoreset (SB3's semantics). Dict
    observations (``simsci/Driving-v0``: use ``PPO("MultiInputPolicy", ...)``) pass
    through; a finished driving episode's ``collision``/``offroad``/``distance`` are in
    its info.
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
            venv.autoreset_mode = AutoresetMode.SAME_STEP
            venv.metadata = {**venv.metadata, "autoreset_mode": AutoresetMode.SAME_STEP}
            super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
            self._actions = None

        def reset(self):
            seed = self._seeds[0] if any(s is not None for s in self._seeds) else None
            obs, _ = self.venv.reset(seed=seed)
            self._reset_seeds()
            self._reset_options()
            return obs

        def step_async(self, actions: np.ndarray) -> None:
            self._actions = np.asarray(actions, dtype=np.float32).reshape(
                self.num_envs, *self.action_space.shape
            )

        def step_wait(self):
            obs, reward, term, trunc, infos = self.venv.step(self._actions)
            done = term | trunc
            out = [{} for _ in range(self.num_envs)]
            final = infos.get("final_obs")
            for i in np.flatnonzero(done):
                if isinstance(final, dict):  # Dict observations (simsci/Driving-v0)
                    out[i]["terminal_observation"] = {k: v[i] for k, v in final.items()}
                else:
                    out[i]["terminal_observation"] = final[i]
                out[i]["TimeLimit.truncated"] = bool(trunc[i] and not term[i])
                for key in ("collision", "offroad", "distance"):  # episode outcome
                    if key in infos.get("final_info", {}):
                        out[i][key] = infos["final_info"][key][i]
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
