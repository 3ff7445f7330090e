"""The action-conditioned neural ODE: exact integrator pieces, the surrogate interface
(advance), learning a controlled pendulum from a rollout file, checkpoints, the CLI, and
bad input rejected."""

import json
import math

import numpy as np
import pytest
import torch

from simsci import data, odeint, train
from simsci.cli import main
from simsci.models import MODELS, ControlledODE, get

DT = 0.05
ENV_ID = "simsci/ODEControl-v0"
ENV_KWARGS = {"task": "pendulum", "system": "pendulum"}


def pendulum_rate(y: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Damped pendulum with a torque: theta' = omega, omega' = -4 sin theta - 0.2 omega + u."""
    theta, omega = y[:, 0], y[:, 1]
    return torch.stack([omega, -4.0 * torch.sin(theta) - 0.2 * omega + u[:, 0]], -1)


def write_rollouts(
    path, n=32, steps=40, *, seed=0, with_state=True, meta_dt=DT, discrete=False, n_val=8
):
    """A rollout file of the damped pendulum under random torques u in [-2, 2], held
    constant over each control interval (zero-order hold), integrated with simsci.odeint
    RK4. Row layout of issue 4: the last row has action NaN and reward NaN."""
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    y = torch.stack(
        [
            torch.rand(n, generator=g, dtype=f64) * 4 - 2,
            torch.rand(n, generator=g, dtype=f64) * 2 - 1,
        ],
        -1,
    )
    u = torch.rand(n, steps, 1, generator=g, dtype=f64) * 4 - 2
    ys = [y]
    interval = torch.tensor([0.0, DT], dtype=f64)
    for k in range(steps):
        uk = u[:, k]
        y = odeint(
            lambda t, s, uk=uk: pendulum_rate(s, uk),
            y,
            interval,
            method="rk4",
            step_size=DT / 10,
        )[:, -1]
        ys.append(y)
    states = torch.stack(ys, 1).numpy()
    u = u.numpy()
    meta = {"env_id": ENV_ID, "env_kwargs": ENV_KWARGS, "dt": meta_dt, "seed": seed}
    names = {"state": ["theta", "omega"]} if with_state else None
    with data.TrajectoryWriter(
        path, kind="rollout", system="pendulum", meta=meta, names=names
    ) as w:
        for i in range(n):
            st = states[i]
            if discrete:
                action = np.r_[(u[i, :, 0] > 0).astype(np.int64), 0]
            else:
                action = np.concatenate([u[i], [[np.nan]]]).astype(np.float32)
            obs = np.stack([np.cos(st[:, 0]), np.sin(st[:, 0]), st[:, 1]], -1)
            ep = {
                "t": np.arange(steps + 1) * DT,
                "x": obs.astype(np.float32),
                "action": action,
                "reward": np.r_[-(st[1:, 0] ** 2), np.nan].astype(np.float32),
                "terminated": np.zeros(steps + 1, bool),
                "truncated": np.r_[np.zeros(steps - 1, bool), True, False],
                "split": np.uint8(0 if i < n - n_val else 1),
            }
            if with_state:
                ep["state"] = st
            w.append(ep)
    return path


@pytest.fixture(scope="module")
def rollout_file(tmp_path_factory):
    return write_rollouts(tmp_path_factory.mktemp("rollouts") / "pendulum.h5")


def small_model(**kw):
    args = dict(
        state_shape=[2],
        action_dim=1,
        dt=DT,
        env_id=ENV_ID,
        env_kwargs=ENV_KWARGS,
        hidden_dim=16,
        depth=2,
        state_mean=[0.1, -0.2],
        state_std=[0.7, 1.1],
        action_mean=[0.0],
        action_std=[1.2],
        deriv_scale=[1.1, 2.4],
    )
    args.update(kw)
    return ControlledODE(**args)


# ------------------------------------------------------------------ integrator pieces


def test_constant_field_is_integrated_exactly_in_data_units(device):
    """With f_theta = b (last layer zeroed), dx/dt = rho * b: advance must give
    x + dt * rho * b for any dt (normalisation, time scaling and denormalisation agree)."""
    model = small_model().to(device)
    last = model.net[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.tensor([0.5, -2.0]))
    x = torch.randn(5, 2, dtype=torch.float64, device=device)
    u = torch.randn(5, 1, dtype=torch.float64, device=device)
    rho = torch.tensor([1.1, 2.4], dtype=torch.float64, device=device)
    b = torch.tensor([0.5, -2.0], dtype=torch.float64, device=device)
    for dt in (DT, 0.013, 0.3):
        out = model.advance(x, u, dt)
        torch.testing.assert_close(out, x + dt * rho * b, rtol=1e-6, atol=1e-6)


def test_rollout_holds_each_action_over_its_interval(device):
    model = small_model().to(device)
    x = torch.randn(4, 2, device=device)
    u = torch.rand(4, 3, 1, device=device) * 4 - 2
    path = model.rollout(x, u, DT)
    assert path.shape == (4, 4, 2)
    assert torch.equal(path[:, 0], x)
    y = x
    for k in range(3):
        y = model.advance(y, u[:, k], DT)
        torch.testing.assert_close(path[:, k + 1], y, rtol=1e-6, atol=1e-6)
    # the action matters: another action in interval 1 changes states 2.. only
    u2 = u.clone()
    u2[:, 1] += 1.0
    other = model.rollout(x, u2, DT)
    torch.testing.assert_close(other[:, :2], path[:, :2])
    assert (other[:, 2] - path[:, 2]).abs().min() > 0


def test_longer_interval_takes_proportionally_more_steps(device):
    """advance over 2 dt uses 2 * substeps steps of the same size: equal to two advances."""
    model = small_model().double().to(device)
    x = torch.randn(6, 2, dtype=torch.float64, device=device)
    u = torch.randn(6, 1, dtype=torch.float64, device=device)
    twice = model.advance(model.advance(x, u, DT), u, DT)
    torch.testing.assert_close(model.advance(x, u, 2 * DT), twice, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ surrogate interface


def test_advance_shapes_dtypes_devices_and_gradients(device):
    model = small_model(state_shape=[3, 2], state_mean=[0.0, 0.0], state_std=[1.0, 1.0])
    assert (model.state_shape, model.action_dim, model.dt) == ((3, 2), 1, DT)
    assert (model.env_id, model.env_kwargs) == (ENV_ID, ENV_KWARGS)
    for B in (1, 7):
        for dtype in (torch.float32, torch.float64):
            x = torch.randn(B, 3, 2, dtype=dtype, device=device)
            u = torch.randn(B, 1, device=device)
            out = model.advance(x, u, DT)  # parameters stay on CPU in float32
            assert out.shape == (B, 3, 2) and out.dtype == dtype and out.device == x.device
            assert torch.isfinite(out).all() and not torch.equal(out, x)
    assert next(model.parameters()).device.type == "cpu"
    assert model.advance(torch.zeros(0, 3, 2, device=device), torch.zeros(0, 1), DT).shape == (
        0,
        3,
        2,
    )
    # gradients reach the state and the parameters (also through converted weights)
    x = torch.randn(4, 3, 2, dtype=torch.float64, device=device, requires_grad=True)
    model.advance(x, torch.randn(4, 1, device=device), DT).square().sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert model.net[0].weight.grad.abs().sum() > 0
    # under no_grad it runs without building a graph
    with torch.no_grad():
        assert not model.advance(x, torch.zeros(4, 1, device=device), DT).requires_grad


def test_advance_gradcheck_float64():
    model = small_model(hidden_dim=6).double()
    x = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    u = torch.randn(3, 1, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, u: model.advance(x, u, DT), (x, u))


# ------------------------------------------------------------------ data and training


def test_from_data_reads_meta_shapes_and_statistics(rollout_file, tmp_path):
    traj = data.open(rollout_file)
    model = ControlledODE.from_data(traj)
    assert model.env_id == ENV_ID and model.env_kwargs == ENV_KWARGS
    assert model.state_shape == (2,) and model.action_dim == 1 and model.dt == DT
    assert model.state_field == "state" and model.window == 9
    stats = traj.stats
    np.testing.assert_allclose(model.init_args["state_mean"], stats["state"]["mean"])
    np.testing.assert_allclose(model.init_args["state_std"], stats["state"]["std"])
    np.testing.assert_allclose(model.init_args["action_std"], stats["action"]["std"], rtol=1e-6)
    # rho: RMS of the finite-difference rates of the train episodes
    train_ids = np.flatnonzero(traj.column("split") == 0)
    rates = np.concatenate([np.diff(traj[int(i)]["state"], axis=0) / DT for i in train_ids])
    np.testing.assert_allclose(model.init_args["deriv_scale"], np.sqrt((rates**2).mean(0)))
    json.dumps(model.init_args)
    assert ControlledODE.from_data(traj, window=5, hidden_dim=8).init_args["window"] == 5
    # no dt in meta: the median step; no state field: the observation x
    path = write_rollouts(tmp_path / "obs.h5", n=4, steps=6, with_state=False, meta_dt=None)
    obs_model = ControlledODE.from_data(data.open(path))
    assert obs_model.state_field == "x" and obs_model.state_shape == (3,)
    assert obs_model.dt == pytest.approx(DT, rel=1e-9)


def test_last_row_action_is_never_used(rollout_file):
    """Whole episodes end with a NaN action: the loss is finite and does not change when
    that action is replaced by any finite number; padded short items are masked."""
    model = small_model()
    ds = data.TrajectoryDataset(rollout_file, fields=ControlledODE.data_fields)
    items = [ds[0], ds[1]]
    items[1] = {k: (v[:7] if isinstance(v, torch.Tensor) else v) for k, v in items[1].items()}
    assert torch.isnan(items[0]["action"][-1]).all()
    batch = ControlledODE.collate(items)
    assert batch["state"].dtype == torch.float32 and batch["state"].shape == (2, 41, 2)
    assert not batch["action_valid"][0, -1] and batch["action_valid"][0, :-1].all()
    assert torch.isfinite(batch["action"]).all()
    z, a, h, mask = model._windows(batch)
    # 40 transitions -> 5 windows of 8; the 6-transition item -> 1 window, 6 scored rows
    assert z.shape == (6, 9, 2) and a.shape == (6, 8, 1) and mask.sum() == 46
    loss = model.training_step(batch)["loss"]
    assert torch.isfinite(loss)
    items[0] = dict(items[0], action=items[0]["action"].nan_to_num(1e6))
    torch.testing.assert_close(model.training_step(ControlledODE.collate(items))["loss"], loss)


def _rollout_error(model, traj, episodes):
    """Mean squared error (normalised units) of open-loop rollouts through whole episodes,
    and of predicting the initial state throughout."""
    errs, zero = [], []
    std = torch.tensor(model.init_args["state_std"], dtype=torch.float64)
    for i in episodes:
        ep = traj[int(i)]
        state = torch.from_numpy(ep["state"])
        actions = torch.from_numpy(ep["action"][:-1]).double()[None]
        with torch.no_grad():
            path = model.rollout(state[:1], actions, DT)[0]
        errs.append((((path - state) / std) ** 2)[1:].mean())
        zero.append((((state[:1] - state) / std) ** 2)[1:].mean())
    return float(torch.stack(errs).mean()), float(torch.stack(zero).mean())


def test_learns_controlled_pendulum_and_checkpoint_round_trip(rollout_file, tmp_path, device):
    traj = data.open(rollout_file)
    fields = ControlledODE.data_fields
    train_set = data.TrajectoryDataset(traj, fields=fields, split="train", window=9, stride=4)
    val_set = data.TrajectoryDataset(traj, fields=fields, split="val", window=9, stride=8)
    # 2 RK4 steps per interval (default 4) halve the cost; the pendulum is smooth at this dt
    model = ControlledODE.from_data(traj, hidden_dim=32, depth=2, substeps=2)
    untrained = train.evaluate(model, val_set, collate_fn=ControlledODE.collate)
    untrained_long, zero_long = _rollout_error(model, traj, range(24, 32))

    config = train.TrainConfig(
        max_steps=200,
        epochs=1000,
        batch_size=32,
        lr=3e-3,
        schedule="cosine",
        val_every=100,
        progress=False,
        device=str(device),
    )
    out = tmp_path / "run"
    summary = train.Trainer(
        model, config, train_set, val_set, out_dir=out, collate_fn=ControlledODE.collate
    ).fit()
    val = summary["last_val"]
    zero = val["val_zero_model_mse"]
    # the multi-step error (8 intervals) beats "state unchanged" and the untrained model
    assert val["val_loss"] < zero / 20, val
    assert val["val_loss"] < untrained["loss"] / 20, (val, untrained)
    assert val["val_one_step_mse"] < val["val_zero_model_one_step_mse"] / 10, val
    # and stays accurate over whole 40-interval episodes, 5x the training horizon
    model.cpu()
    long_err, _ = _rollout_error(model, traj, range(24, 32))
    assert long_err < zero_long / 50 and long_err < untrained_long / 50, (long_err, zero_long)

    loaded = train.load_model(out / "checkpoints" / "last.pt")
    assert isinstance(loaded, ControlledODE) and loaded.init_args == model.init_args
    assert (loaded.env_id, loaded.env_kwargs, loaded.state_shape, loaded.action_dim) == (
        ENV_ID,
        ENV_KWARGS,
        (2,),
        1,
    )
    x = torch.randn(16, 2, dtype=torch.float64, device=device)
    u = torch.rand(16, 1, device=device) * 4 - 2
    model.eval()
    with torch.no_grad():
        assert torch.equal(loaded.advance(x, u, DT), model.advance(x, u, DT))


# the default run: tests/envs/test_env_cli.py::test_env_rollout_train_then_surrogate
# (simsci train controlled_ode, its checkpoint loaded), the metrics in
# test_learns_controlled_pendulum_and_checkpoint_round_trip, simsci evaluate in
# tests/cli/test_cli.py
@pytest.mark.slow
def test_cli_train_and_evaluate(rollout_file, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "controlled_ode", "--data", rollout_file, "--out", out, "--max-steps", 50]
    code = main([str(a) for a in [*argv, "--epochs", 100, "--no-progress", "--device", "cpu"]])
    stdout = capsys.readouterr().out
    assert code == 0 and json.loads(stdout)["steps"] == 50
    ckpt = out / "checkpoints" / "last.pt"
    model = train.load_model(ckpt)
    assert model.env_id == ENV_ID and model.window == 9
    code = main(["evaluate", str(ckpt), "--data", str(rollout_file), "--split", "val"])
    stdout = capsys.readouterr().out
    assert code == 0 and "zero_model_mse" in stdout and "one_step_mse" in stdout


def test_registered():
    assert MODELS["controlled_ode"] is ControlledODE
    assert isinstance(get("controlled_ode", state_shape=[2], action_dim=1, dt=0.1), ControlledODE)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "state, action, dt, error, match",
    [
        (torch.zeros(3, 4), torch.zeros(3, 1), DT, ValueError, "state_shape"),
        (torch.zeros(2), torch.zeros(1, 1), DT, ValueError, "batch axis"),
        (torch.zeros(3, 2, dtype=torch.int64), torch.zeros(3, 1), DT, TypeError, "floating"),
        (torch.zeros(3, 2), torch.zeros(3, 2), DT, ValueError, "action_dim"),
        (torch.zeros(3, 2), torch.zeros(2, 1), DT, ValueError, "one action per state"),
        (torch.zeros(3, 2), None, DT, ValueError, "controlled"),
        (torch.tensor([[0.0, 1.0], [math.nan, 0.0]]), torch.zeros(2, 1), DT, ValueError, "finite"),
        (torch.zeros(2, 2), torch.tensor([[0.0], [math.inf]]), DT, ValueError, "finite"),
        (torch.zeros(3, 2), torch.zeros(3, 1), 0.0, ValueError, "dt must be"),
        (torch.zeros(3, 2), torch.zeros(3, 1), -0.1, ValueError, "dt must be"),
        (torch.zeros(3, 2), torch.zeros(3, 1), math.nan, ValueError, "dt must be"),
    ],
)
def test_advance_rejects_bad_input(state, action, dt, error, match):
    with pytest.raises(error, match=match):
        small_model().advance(state, action, dt)


def test_constructor_rejects_bad_arguments():
    with pytest.raises(ValueError, match="dt must be"):
        small_model(dt=0.0)
    with pytest.raises(ValueError, match="action_dim"):
        small_model(action_dim=0)
    with pytest.raises(ValueError, match="at least one axis"):
        small_model(state_shape=[])
    with pytest.raises(ValueError, match="state_std needs 2"):
        small_model(state_std=[1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="state_std must be > 0"):
        small_model(state_std=[1.0, 0.0])
    with pytest.raises(ValueError, match="window"):
        small_model(window=1)
    with pytest.raises(TypeError, match="JSON-able"):
        small_model(env_kwargs={"f": object()})
    with pytest.raises(TypeError, match="unexpected keyword"):
        small_model(hiden_dim=3)


def test_from_data_rejects_unusable_files(tmp_path, rollout_file):
    state_file = tmp_path / "state.h5"
    with data.TrajectoryWriter(state_file, kind="state", system="pendulum") as w:
        w.append({"t": np.arange(5) * 0.1, "x": np.zeros((5, 2))})
    with pytest.raises(ValueError, match="needs a rollout file with an 'action'"):
        ControlledODE.from_data(data.open(state_file))
    discrete = write_rollouts(tmp_path / "discrete.h5", n=3, steps=5, discrete=True, n_val=1)
    with pytest.raises(TypeError, match="Discrete"):
        ControlledODE.from_data(data.open(discrete))
    with pytest.raises(ValueError, match="dt must be"):
        ControlledODE.from_data(data.open(rollout_file), dt=0.0)
    bad_dt = write_rollouts(tmp_path / "bad_dt.h5", n=3, steps=5, meta_dt=-1.0, n_val=1)
    with pytest.raises(ValueError, match="dt must be"):
        ControlledODE.from_data(data.open(bad_dt))


def test_training_rejects_mismatched_batches(rollout_file):
    batch = ControlledODE.collate(
        [data.TrajectoryDataset(rollout_file, fields=ControlledODE.data_fields, window=5)[0]]
    )
    with pytest.raises(ValueError, match="state_shape"):
        small_model(state_shape=[3], state_mean=0.0, state_std=1.0, deriv_scale=1.0).training_step(
            batch
        )
    with pytest.raises(ValueError, match=r"action must be \(B, L, 2\)"):
        small_model(action_dim=2, action_mean=None, action_std=None).training_step(batch)
    with pytest.raises(ValueError, match="'action'"):
        ControlledODE.collate([{"t": torch.zeros(3), "state": torch.zeros(3, 2)}])
