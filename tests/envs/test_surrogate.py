"""simsci/Surrogate-v0: a model with the surrogate interface stands in for the dynamics."""

import warnings

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import simsci.envs  # noqa: F401
from simsci.envs import ODEControlEnv, ODEControlVectorEnv, SurrogateEnv, SurrogateVectorEnv
from simsci.envs._ode import ODEControlDynamics
from simsci.models import ControlledODE
from simsci.train import TrainConfig, Trainer, save_model


class ExactModel(torch.nn.Module):
    """The surrogate interface around the true dynamics: a perfect 'learned' model."""

    def __init__(self, task="pendulum-swingup", state_shape=(2,), action_dim=1):
        super().__init__()
        self.env_id = "simsci/ODEControl-v0"
        self.env_kwargs = {"task": task}
        self.state_shape = state_shape
        self.action_dim = action_dim
        self.scale = torch.nn.Parameter(torch.ones((), dtype=torch.float64))
        self._dyn = ODEControlDynamics(task)

    def advance(self, state, action, dt):
        assert dt == self._dyn.dt
        return self._dyn.advance(state, None, action, None) * self.scale


def test_exact_model_reproduces_the_true_environment():
    true_env = ODEControlEnv("pendulum-swingup")
    sur_env = SurrogateEnv(model=ExactModel())
    o1, _ = true_env.reset(seed=4)
    o2, _ = sur_env.reset(seed=4)
    np.testing.assert_array_equal(o1, o2)
    rng = np.random.default_rng(0)
    for _ in range(30):
        a = rng.uniform(-4, 4, size=1).astype(np.float32)
        s1, s2 = true_env.step(a), sur_env.step(a)
        np.testing.assert_allclose(s1[0], s2[0], rtol=1e-12)
        assert s1[1] == pytest.approx(s2[1], rel=1e-12)
    assert sur_env.observation_space == true_env.observation_space
    assert sur_env.action_space == true_env.action_space


def _checkpoint(tmp_path, model) -> str:
    return str(save_model(model, tmp_path / "model.pt"))


def _untrained(**overrides):
    kwargs = dict(
        state_shape=(2,),
        action_dim=1,
        dt=0.05,
        env_id="simsci/ODEControl-v0",
        env_kwargs={"task": "pendulum-swingup"},
        hidden_dim=16,
        depth=1,
    )
    kwargs.update(overrides)
    return ControlledODE(**kwargs)


def test_surrogate_from_checkpoint_passes_check_env(tmp_path):
    path = _checkpoint(tmp_path, _untrained())
    env = gymnasium.make("simsci/Surrogate-v0", checkpoint=path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        check_env(env.unwrapped, skip_render_check=True)
    true_env = gymnasium.make("simsci/ODEControl-v0", task="pendulum-swingup")
    assert env.observation_space == true_env.observation_space
    assert env.action_space == true_env.action_space
    assert env.unwrapped.dt == true_env.unwrapped.dt


def test_surrogate_vector_env(tmp_path, device):
    path = _checkpoint(tmp_path, _untrained())
    env = gymnasium.make_vec(
        "simsci/Surrogate-v0",
        num_envs=8,
        vectorization_mode="vector_entry_point",
        checkpoint=path,
        device=str(device),
        array_backend="torch",
    )
    assert isinstance(env.unwrapped, SurrogateVectorEnv)
    obs, _ = env.reset(seed=0)
    obs, reward, term, trunc, infos = env.step(torch.zeros(8, 1, device=device))
    assert obs.shape == (8, 3) and obs.device.type == device.type
    assert torch.isfinite(reward).all()


def test_env_kwargs_override_keeps_layout(tmp_path):
    path = _checkpoint(tmp_path, _untrained())
    env = SurrogateEnv(path, max_episode_steps=5)
    env.reset(seed=0)
    flags = [env.step(np.zeros(1, np.float32))[3] for _ in range(5)]
    assert flags[-1] and not any(flags[:-1])


def test_checkpoint_whose_layout_does_not_fit_is_refused(tmp_path):
    lorenz_shaped = _untrained(state_shape=(3,), action_dim=3)
    with pytest.raises(ValueError, match=r"state layout does not fit.*\(3,\).*\(2,\)"):
        SurrogateEnv(_checkpoint(tmp_path, lorenz_shaped))
    path = _checkpoint(tmp_path, _untrained())
    with pytest.raises(ValueError, match="state layout does not fit"):
        SurrogateEnv(path, task="lorenz63-stabilize")


def test_bad_surrogate_sources(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        SurrogateEnv(str(tmp_path / "missing.pt"))
    with pytest.raises(ValueError, match="exactly one"):
        SurrogateEnv()
    with pytest.raises(TypeError, match="lacks"):
        SurrogateEnv(model=torch.nn.Linear(2, 2))
    model = ExactModel()
    model.env_id = "simsci/CartPole-v9"
    with pytest.raises(simsci.errors.UnknownNameError, match="ODEControl"):
        SurrogateEnv(model=model)


# ~18 s: the suite's 10-minute budget on 2 cores; the tour trains and loads a surrogate too
@pytest.mark.slow
def test_trained_surrogate_tracks_the_true_environment(tmp_path):
    """Record random-action rollouts, train ControlledODE, roll both envs out."""
    from simsci.envs import RecordVectorEpisodes

    path = tmp_path / "rollouts.h5"
    venv = RecordVectorEpisodes(
        ODEControlVectorEnv(16, "pendulum-swingup", max_episode_steps=40), path
    )
    venv.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(41 * 2):
        venv.step(rng.uniform(-4, 4, size=(16, 1)).astype(np.float32))
    venv.close()

    from simsci import data

    traj = data.open(path)
    model = ControlledODE.from_data(traj, hidden_dim=64, depth=2)
    dataset = data.TrajectoryDataset(traj, fields=("t", "state", "action"))
    config = TrainConfig(
        max_steps=300, epochs=1000, batch_size=8, lr=3e-3, progress=False, seed=0, device="cpu"
    )
    Trainer(model, config, dataset, None, out_dir=tmp_path / "run", collate_fn=model.collate).fit()

    true_env = ODEControlEnv("pendulum-swingup")
    sur_env = SurrogateEnv(model=model.eval())
    zero_err, sur_err = [], []
    for seed in range(4):
        o_true, _ = true_env.reset(seed=seed)
        o_sur, _ = sur_env.reset(seed=seed)
        o_start = o_true.copy()
        for _ in range(10):
            a = rng.uniform(-4, 4, size=1).astype(np.float32)
            o_true = true_env.step(a)[0]
            o_sur = sur_env.step(a)[0]
        sur_err.append(np.abs(o_sur - o_true).max())
        zero_err.append(np.abs(o_start - o_true).max())
    assert np.median(sur_err) < 0.2 * np.median(zero_err), (sur_err, zero_err)
