"""OperatorModel: training on field files, rollout/advance protocols, evaluation, errors."""

import json

import numpy as np
import pytest
import torch

from simsci import data, systems, train
from simsci.cli import main
from simsci.operators import OperatorModel, evaluate_operator


@pytest.fixture(scope="module")
def heat_file(tmp_path_factory):
    """Heat equation, 48 episodes of 6 frames on 128 points (train at 64: subsample 2)."""
    path = tmp_path_factory.mktemp("ops") / "heat.h5"
    system = systems.get("heat", resolution=128, nu=0.02)
    systems.generate(system, 48, t_end=0.5, dt=0.1, out=path, seed=0, progress=False)
    return path


@pytest.fixture(scope="module")
def darcy_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ops") / "darcy.h5"
    systems.generate(systems.get("darcy", resolution=17), 24, out=path, seed=0, progress=False)
    return path


def _fit(model, path, steps=150, lr=3e-3, **cfg):
    import tempfile

    traj = data.open(path)
    ds = data.TrajectoryDataset(traj, fields=("t", "x"), split="train")
    config = train.TrainConfig(
        max_steps=steps, epochs=10_000, batch_size=8, lr=lr, progress=False, device="cpu", **cfg
    )
    out = tempfile.mkdtemp(prefix="simsci-op-")
    return train.Trainer(model, config, ds, None, out_dir=out, collate_fn=model.collate).fit()


def _small(path, **kw):
    kw.setdefault("backbone_kwargs", {"width": 16, "modes": 8, "layers": 2})
    return OperatorModel.from_data(data.open(path), subsample=2, **kw)


def test_from_data_infers_task_grid_and_step(heat_file, darcy_file):
    m = _small(heat_file)
    assert m.task == "rollout" and m.grid == (128,) and m.dt == pytest.approx(0.1)
    assert m.state_shape == (128, 1) and m.channels == ["u"]
    d = OperatorModel.from_data(data.open(darcy_file), backbone_kwargs={"modes": 4, "width": 8})
    assert d.task == "map" and d.inputs == [0] and d.targets == [1] and d.dim == 2


def test_dno_features_start_switched_off(heat_file):
    """∂-NO from_data starts with its feature scales at 0 (issue 25: at 1 the ∂-NO FNO
    failed to fit 2-D Navier-Stokes), also when rebuilt from its init_args."""
    m = _small(heat_file, features="dno")
    assert m.init_args["feature_kwargs"]["scale_init"] == 0.0
    for model in (m, OperatorModel(**m.init_args)):
        assert torch.equal(model.net.features.scale.detach(), torch.zeros(4))


@pytest.mark.parametrize("features", ["none", "dno"])
def test_operator_learns_the_heat_step_better_than_persistence(heat_file, features):
    torch.manual_seed(0)
    model = _small(heat_file, features=features)
    _fit(model, heat_file, steps=200)
    result = evaluate_operator(model, heat_file, split="test")
    train_res = next(r for r in result["resolutions"].values() if r["training_resolution"])
    # persistence (u_{k+1} = u_k) on the same test episodes
    traj = data.open(heat_file)
    test = np.flatnonzero(traj.column("split") == 2)
    x = np.stack([traj[int(i)]["x"][:, ::2] for i in test])
    persist = np.linalg.norm(x[:, 1:] - x[:, :1], axis=(2, 3)) / np.linalg.norm(
        x[:, 1:], axis=(2, 3)
    )
    assert train_res["rel_l2_mean"] < 0.25 * persist.mean(), (train_res, persist.mean())
    assert len(train_res["rel_l2"]) == 5 and len(train_res["rel_l2"][0]) == 1  # steps, channels
    # the same weights at 2x finer resolution (zero-shot super-resolution)
    fine = result["resolutions"]["128"]
    assert fine["rel_l2_mean"] < 0.25 * persist.mean()
    if features == "dno":
        betas = model.betas()
        assert betas and all(np.isfinite(list(betas.values())))


def test_map_task_on_darcy_trains_and_scores(darcy_file):
    torch.manual_seed(0)
    model = OperatorModel.from_data(
        data.open(darcy_file),
        features="dno",
        feature_kwargs={"periodic": False},
        backbone_kwargs={"modes": 4, "width": 8, "layers": 2, "periodic": False},
    )
    before = evaluate_operator(model, darcy_file, split=None)["resolutions"]["17x17"]
    _fit(model, darcy_file, steps=60, lr=1e-2)
    after = evaluate_operator(model, darcy_file, split=None)["resolutions"]["17x17"]
    assert after["rel_l2_mean"] < before["rel_l2_mean"]


def test_rollout_protocol_and_times(heat_file):
    model = _small(heat_file)
    u0 = torch.randn(3, 64, 1)
    out = model.rollout(u0, torch.tensor([0.0, 0.1, 0.3]))
    assert out.shape == (3, 3, 64, 1)
    torch.testing.assert_close(out[:, 0], u0)
    with pytest.raises(ValueError, match="whole multiples"):
        model.rollout(u0, torch.tensor([0.0, 0.15]))
    u0[1, 5] = float("nan")
    with pytest.raises(ValueError, match=r"sample\(s\) \[1\]"):
        model.rollout(u0, torch.tensor([0.0, 0.1]))


def test_nan_in_a_training_batch_names_the_sample(heat_file):
    model = _small(heat_file)
    traj = data.open(heat_file)
    items = [traj[0], traj[1]]
    items[1] = {**items[1], "x": items[1]["x"].copy()}
    items[1]["x"][5, 4] = np.nan  # the last frame: only ever a target
    batch = model.collate(items)
    with pytest.raises(ValueError, match=r"sample\(s\) \[9\]"):  # window 4 of episode 1
        model.training_step(batch)


def test_grid_coarser_than_the_fourier_modes_is_refused(heat_file):
    model = OperatorModel.from_data(
        data.open(heat_file), subsample=8, backbone_kwargs={"modes": 12, "width": 8}
    )
    batch = model.collate([data.open(heat_file)[0]])  # 16 points < 2 * 12 modes
    with pytest.raises(ValueError, match="coarser"):
        model.training_step(batch)


def test_checkpoint_from_a_different_backbone_is_refused(heat_file, tmp_path):
    traj = data.open(heat_file)
    ds = data.TrajectoryDataset(traj, fields=("t", "x"), split="train")
    config = train.TrainConfig(max_steps=1, epochs=10, batch_size=4, progress=False, device="cpu")
    fno = _small(heat_file)
    train.Trainer(fno, config, ds, None, out_dir=tmp_path, collate_fn=fno.collate).fit()
    unet = _small(heat_file, backbone="unet", backbone_kwargs={"width": 8, "levels": 2})
    with (
        pytest.warns(UserWarning, match="init_args differ"),
        pytest.raises(train.CheckpointError, match="do not fit"),
    ):
        train.Trainer(
            unet, config, ds, None, out_dir=tmp_path, collate_fn=unet.collate, resume=True
        )
    again = train.load_model(tmp_path / "checkpoints" / "last.pt")  # rebuilds its own FNO
    assert again.init_args["backbone"] == "fno"


def test_cli_train_and_evaluate_operator(heat_file, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "train", "operator", "--backbone", "fno", "--features", "dno", "--data",
            str(heat_file), "--out", str(out), "--max-steps", "5", "--epochs", "100",
            "--device", "cpu", "--no-progress", "--param", "subsample=2",
            "--param", 'backbone_kwargs={"width": 8, "modes": 6, "layers": 1}',
        ]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    metrics = tmp_path / "m.json"
    code = main(
        ["evaluate", str(out / "checkpoints" / "last.pt"), "--data", str(heat_file),
         "--out", str(metrics), "--device", "cpu"]
    )  # fmt: skip
    assert code == 0
    text = capsys.readouterr().out
    assert "training resolution" in text and "rel L2" in text
    result = json.loads(metrics.read_text())
    assert set(result["resolutions"]) == {"64", "128"}


def test_operator_as_a_pde_surrogate_environment(tmp_path):
    """Trained on PDEControl rollouts (actions as channels), it loads as Surrogate-v0."""
    from simsci.envs import PDEControlVectorEnv, RecordVectorEpisodes, SurrogateEnv

    path = tmp_path / "heat_rollouts.h5"
    rec = RecordVectorEpisodes(PDEControlVectorEnv(8, "heat-track", max_episode_steps=6), path)
    rec.reset(seed=0)
    rng = np.random.default_rng(0)
    while rec.recorded < 8:
        rec.step(rng.uniform(-1, 1, size=(8, 8)).astype(np.float32))
    rec.close()
    model = OperatorModel.from_data(
        data.open(path), backbone_kwargs={"width": 8, "modes": 8, "layers": 1}
    )
    assert model.action_dim == 8 and model.env_id == "simsci/PDEControl-v0"
    env = SurrogateEnv(model=model)
    obs, _ = env.reset(seed=0)
    obs, reward, *_ = env.step(np.zeros(8, np.float32))
    assert obs.shape == (64,) and np.isfinite(reward)


def test_checkpoint_enters_the_pde_solver_benchmark(heat_file, tmp_path):
    from simsci.bench import pde_benchmark

    torch.manual_seed(0)
    model = _small(heat_file)
    _fit(model, heat_file, steps=30)
    path = train.save_model(model, tmp_path / "heat_op.pt")
    result = pde_benchmark(
        "heat",
        methods=("etdrk4",),
        quick=True,
        t_end=0.4,  # output frames 0.1 apart: the operator's step
        params={"nu": 0.02},
        models=[str(path)],
        pypde=False,
        repeat=1,
    )
    runs = [r for r in result["runs"] if r["solver"].startswith("model:")]
    assert runs and all(np.isfinite(r["error"]) for r in runs)


def test_h1_loss_and_device(heat_file, device):
    model = _small(heat_file, h1_weight=0.5).to(device)
    batch = model.collate([data.open(heat_file)[i] for i in range(2)])
    out = model.training_step(batch)
    assert torch.isfinite(out["loss"]) and out["loss"].device.type == device.type
    out["loss"].backward()
    u0 = torch.randn(2, 64, 1, device=device)
    assert model.rollout(u0, torch.tensor([0.0, 0.2])).device.type == device.type
