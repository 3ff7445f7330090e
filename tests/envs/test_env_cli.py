"""`simsci env`: list, rollout; the CLI path rollout -> train -> surrogate environment."""

import json

import numpy as np
import pytest

from simsci import data
from simsci.cli import main
from simsci.envs import SurrogateEnv


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_env_list(capsys):
    code, out, _ = run(capsys, "env", "list")
    assert code == 0
    for name in ("simsci/ODEControl-v0", "pendulum-swingup", "heat-track", "Surrogate"):
        assert name in out


def test_env_rollout_writes_a_rollout_file(tmp_path, capsys):
    out = tmp_path / "heat.h5"
    code, stdout, err = run(
        capsys, "env", "rollout", "PDEControl", "--task", "heat-track",
        "--max-episode-steps", "5", "--episodes", "6", "--num-envs", "4", "--out", out,
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["episodes"] == 6
    traj = data.open(out)
    assert traj.kind == "rollout" and len(traj.lengths) == 6
    assert (traj.lengths == 6).all()  # 5 actions -> 6 rows
    ep = traj[0]
    assert ep["x"].shape == (6, 64) and ep["state"].shape == (6, 64, 1)
    assert np.isnan(ep["action"][-1]).all() and np.isfinite(ep["action"][:-1]).all()
    assert traj.meta["env_id"] == "simsci/PDEControl-v0"
    assert traj.meta["env_kwargs"]["task"] == "heat-track"


def test_env_rollout_train_then_surrogate(tmp_path, capsys):
    rollouts = tmp_path / "pend.h5"
    code, _, err = run(
        capsys, "env", "rollout", "ODEControl", "--task", "pendulum-swingup",
        "--max-episode-steps", "20", "--episodes", "16", "--out", rollouts,
    )  # fmt: skip
    assert code == 0, err
    code, _, err = run(
        capsys, "train", "controlled_ode", "--data", rollouts, "--out", tmp_path / "run",
        "--max-steps", "30", "--epochs", "100", "--device", "cpu", "--no-progress",
        "--param", "hidden_dim=16",
    )  # fmt: skip
    assert code == 0, err
    env = SurrogateEnv(str(tmp_path / "run" / "checkpoints" / "last.pt"))
    obs, _ = env.reset(seed=0)
    obs, reward, *_ = env.step(np.zeros(1, np.float32))
    assert obs.shape == (3,) and np.isfinite(reward)
    assert env.unwrapped.dynamics.base.max_episode_steps == 20  # the recorded env's keywords


@pytest.mark.parametrize(
    "argv, match",
    [
        (["env", "rollout", "ODEControl"], "--out"),
        (["env", "rollout", "ODECtrl", "--out", "x.h5"], "ODEControl"),
        (["env", "rollout", "ODEControl", "--out", "x.h5", "--task"], "needs a value"),
        (["env", "rollout", "ODEControl", "--out", "x.h5", "--task", "swing"], "swingup"),
        (["env", "rollout", "ODEControl", "--out", "missing/x.h5"], "does not exist"),
        (["env", "rollout", "ODEControl", "--out", "x.h5", "--episodes", "0"], "episodes"),
    ],
)
def test_env_cli_errors(argv, match, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, *argv)
    assert code == 2 and match in err
