"""neuraloperator's models as simsci backbones (``neuralop.fno``, ``neuralop.tfno``,
``neuralop.uno``): the backbone contract, parameter counts, ∂-NO, OperatorModel, the CLI,
checkpoints, and the errors. Skipped where neuraloperator is not installed, except the
checks that it is imported lazily and that its absence is a clear ImportError."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from simsci import data, systems, train
from simsci.cli import main
from simsci.errors import UnknownNameError
from simsci.operators import (
    BACKBONES,
    DerivativeAugmented,
    OperatorModel,
    count_parameters,
    get,
)

NAMES = ("neuralop.fno", "neuralop.tfno", "neuralop.uno")
GRIDS = {1: (64,), 2: (16, 12)}


@pytest.fixture(scope="module")
def neuralop():
    return pytest.importorskip("neuralop")


@pytest.fixture(scope="module")
def heat_file(tmp_path_factory):
    """Heat equation, 16 episodes of 5 frames on 64 points."""
    path = tmp_path_factory.mktemp("neuralop") / "heat.h5"
    system = systems.get("heat", resolution=64, nu=0.02)
    systems.generate(system, 16, t_end=0.4, dt=0.1, out=path, seed=0, progress=False)
    return path


def _small(name, dim=1, in_channels=2, out_channels=3, **kw):
    kw = {"width": 8, "modes": 6, "layers": 2 if name != "neuralop.uno" else 3, **kw}
    return get(name, in_channels=in_channels, out_channels=out_channels, dim=dim, **kw)


def _real_count(module):
    return sum(p.numel() * (2 if p.is_complex() else 1) for p in module.parameters())


# ---------------------------------------------------------------- lazy import, missing
def test_importing_simsci_operators_does_not_import_neuralop():
    code = (
        "import sys, simsci.operators as o; "
        "assert {'neuralop.fno', 'neuralop.uno'} <= set(o.BACKBONES); "
        "assert 'neuralop' not in sys.modules, 'neuralop imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_neuralop_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "neuralop", None)  # import neuralop -> ImportError
    monkeypatch.setitem(sys.modules, "neuralop.models", None)
    with pytest.raises(ImportError, match=r"simsci\[neuralop\].*--no-deps neuraloperator==2"):
        get("neuralop.fno", in_channels=1, out_channels=1)


def test_cli_says_in_one_line_what_to_install(monkeypatch, heat_file, tmp_path, capsys):
    from simsci.errors import MissingExtraError

    monkeypatch.setitem(sys.modules, "neuralop", None)
    monkeypatch.setitem(sys.modules, "neuralop.models", None)
    with pytest.raises(MissingExtraError):  # an ImportError that is also a SimsciError
        get("neuralop.fno", in_channels=1, out_channels=1)
    argv = ["train", "operator", "--backbone", "neuralop.fno", "--data", str(heat_file)]
    code = main([*argv, "--out", str(tmp_path / "run"), "--max-steps", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert err.startswith("simsci: error: the neuralop.* backbones need neuraloperator"), err


def test_unknown_neuralop_name_lists_the_valid_ones():
    with pytest.raises(UnknownNameError, match=r"did you mean 'neuralop.fno'\?") as err:
        get("neuralop.fn0", in_channels=1, out_channels=1)
    assert all(name in str(err.value) for name in (*NAMES, "fno", "deeponet", "unet"))


# ---------------------------------------------------------------- the backbone contract
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dim", [1, 2])
def test_shapes_gradients_and_rebuild(neuralop, name, dim, device):
    torch.manual_seed(0)
    model = _small(name, dim).to(device)
    assert (model.in_channels, model.out_channels, model.dim) == (2, 3, dim)
    x = torch.randn(3, 2, *GRIDS[dim], device=device)
    y = model(x)
    assert y.shape == (3, 3, *GRIDS[dim]) and torch.isfinite(y).all()
    y.square().mean().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname
    # init_args are JSON-able and rebuild the same module (weights fit, same output)
    clone = type(model)(**json.loads(json.dumps(model.init_args))).to(device)
    clone.load_state_dict(model.state_dict())
    torch.testing.assert_close(clone(x), y.detach(), rtol=0, atol=0)
    assert clone.num_parameters() == model.num_parameters() == _real_count(model)


def test_a_real_dtype_leaves_complex_weights_complex(neuralop):
    # nn.Module.to(torch.float32) would cast them to float32, dropping the imaginary parts
    model = _small("neuralop.fno")
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    assert any(w.is_complex() for w in weights.values())
    model.to("cpu", torch.float32)
    for n, p in model.named_parameters():
        assert p.dtype == weights[n].dtype and torch.equal(p, weights[n]), n


def test_non_periodic_pads_the_domain(neuralop):
    model = _small("neuralop.fno", 2, periodic=False)
    assert model.model.domain_padding is not None
    assert _small("neuralop.fno", 2).model.domain_padding is None
    assert model(torch.randn(2, 2, 17, 13)).shape == (2, 3, 17, 13)


def test_parameter_counts_count_complex_weights_twice(neuralop):
    # neuraloperator's own FNO: 86,817 real parameters (49,953 entries, complex ones once)
    reference = neuralop.models.FNO(
        n_modes=(16,), hidden_channels=32, in_channels=1, out_channels=1
    )
    assert count_parameters(reference) == 86817
    assert sum(p.numel() for p in reference.parameters()) == 49953
    ours = get("neuralop.fno", in_channels=1, out_channels=1, width=32, modes=16)
    assert ours.num_parameters() == 86817
    bkw = {"width": 32, "modes": 16}
    model = OperatorModel(
        task="rollout",
        channels=["u"],
        dim=1,
        grid=[64],
        backbone="neuralop.fno",
        backbone_kwargs=bkw,
    )
    assert model.num_parameters() == _real_count(model) == 86817
    # simsci's FNO keeps its spectral weights as real pairs: its count is unchanged
    assert get("fno", in_channels=1, out_channels=1, modes=8).num_parameters() == 74209


def test_passthrough_keywords_and_their_errors(neuralop):
    tucker = _small("neuralop.fno", factorization="tucker", rank=0.5)
    assert tucker.init_args["factorization"] == "tucker"
    assert type(tucker)(**tucker.init_args).num_parameters() == tucker.num_parameters()
    assert _small("neuralop.tfno").model.fno_blocks.convs[0].weight.name == "Tucker"
    with pytest.raises(TypeError, match="pass width=..., simsci's name for neuraloperator's"):
        _small("neuralop.fno", hidden_channels=16)
    with pytest.raises(UnknownNameError, match=r"keyword 'factorisation'; did you mean"):
        _small("neuralop.fno", factorisation="tucker")
    with pytest.raises(TypeError, match="not JSON-able"):
        _small("neuralop.fno", conv_module=torch.nn.Conv1d)
    with pytest.raises(ValueError, match="did you mean 'gelu'"):
        _small("neuralop.fno", activation="gelu2")


def test_bad_input_is_refused(neuralop):
    model = _small("neuralop.fno", 1)
    with pytest.raises(ValueError, match="expects 2 input channels, got 3"):
        model(torch.randn(2, 3, 16))
    with pytest.raises(ValueError, match=r"channels-first input \(B, C, N\)"):
        model(torch.randn(2, 16))
    with pytest.raises(TypeError, match="float32 weights but the input is torch.float64"):
        model(torch.randn(2, 2, 16, dtype=torch.float64))
    with pytest.raises(TypeError, match="takes float32 input.*complex64"):
        model.double()(torch.randn(2, 2, 16, dtype=torch.float64))
    x = torch.randn(3, 2, 16)
    x[1, 0, 3] = float("nan")
    with pytest.raises(ValueError, match="sample 1 holds NaN/inf"):
        _small("neuralop.fno", 1)(x)


# ---------------------------------------------------------------- ∂-NO
def test_derivative_augmented_rebuilds_a_neuralop_backbone(neuralop):
    torch.manual_seed(0)
    backbone = _small("neuralop.fno", 1, in_channels=2, out_channels=1)
    model = DerivativeAugmented(backbone, features={"n_orders": 1})
    n_feat = model.features.out_channels
    assert model.backbone is not backbone and model.backbone.in_channels == 2 + n_feat
    x = torch.randn(2, 2, 64)
    y = model(x)
    assert y.shape == (2, 1, 64)
    spec = model.init_args["backbone"]
    assert spec["import_path"] == "simsci.operators._neuralop:NeuralopFNO"
    assert spec["init_args"]["in_channels"] == 2
    again = DerivativeAugmented(**json.loads(json.dumps(model.init_args)))
    again.load_state_dict(model.state_dict())
    torch.testing.assert_close(again(x), y, rtol=0, atol=0)
    assert model.num_parameters() == _real_count(model)


# ---------------------------------------------------------------- training, CLI, checkpoints
def test_operator_model_learns_and_its_checkpoint_loads(neuralop, heat_file, tmp_path):
    torch.manual_seed(0)
    traj = data.open(heat_file)
    model = OperatorModel.from_data(
        traj,
        backbone="neuralop.fno",
        backbone_kwargs={"width": 16, "modes": 12, "layers": 2},
    )
    batch = model.collate([traj[i] for i in range(8)])
    with torch.no_grad():
        before = float(model.validation_step(batch)["loss"])
    ds = data.TrajectoryDataset(traj, fields=("t", "x"), split="train")
    config = train.TrainConfig(
        max_steps=50, epochs=10_000, batch_size=8, lr=3e-3, progress=False, device="cpu"
    )
    train.Trainer(model, config, ds, None, out_dir=tmp_path, collate_fn=model.collate).fit()
    model.eval()
    with torch.no_grad():
        after = float(model.validation_step(batch)["loss"])
    assert after < 0.3 * before, (before, after)
    again = train.load_model(tmp_path / "checkpoints" / "last.pt")
    assert again.init_args["backbone"] == "neuralop.fno"
    u0 = torch.randn(2, 64, 1)
    torch.testing.assert_close(again.step(u0[:, None]), model.step(u0[:, None]))


def test_cli_trains_a_neuralop_backbone(neuralop, heat_file, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "train", "operator", "--backbone", "neuralop.fno", "--features", "dno",
            "--data", str(heat_file), "--out", str(out), "--max-steps", "3",
            "--epochs", "100", "--device", "cpu", "--no-progress",
            "--param", 'backbone_kwargs={"width": 8, "modes": 8, "layers": 1}',
        ]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    model = train.load_model(out / "checkpoints" / "last.pt")
    assert model.init_args["backbone"] == "neuralop.fno" and model.features == "dno"
    assert type(model.net.backbone) is BACKBONES["neuralop.fno"]


@pytest.fixture(scope="module")
def kdv_file(tmp_path_factory):
    """KdV, 24 episodes of 11 frames on 64 points (solitons steepening: rough inputs)."""
    path = tmp_path_factory.mktemp("neuralop") / "kdv.h5"
    systems.generate(
        systems.get("kdv", resolution=64), 24, t_end=1.0, dt=0.1, out=path, seed=0, progress=False
    )
    return path


def test_dno_rollout_with_neuralop_fno_stays_near_the_plain_model(neuralop, kdv_file, tmp_path):
    """10 autoregressive steps of ∂-NO on neuraloperator's FNO: no divergence, within 2x
    of the same backbone without features (features standardised by the training
    spectrum, so a rollout's own high-frequency errors are not rescaled away)."""
    from simsci.operators import evaluate_operator

    traj = data.open(kdv_file)
    errors = {}
    for features in ("none", "dno"):
        torch.manual_seed(0)
        model = OperatorModel.from_data(
            traj,
            backbone="neuralop.fno",
            backbone_kwargs={"width": 16, "modes": 16, "layers": 2},
            features=features,
        )
        ds = data.TrajectoryDataset(traj, fields=("t", "x"), split="train")
        config = train.TrainConfig(
            max_steps=120, epochs=10_000, batch_size=4, lr=3e-3, progress=False, device="cpu"
        )
        out = tmp_path / features
        train.Trainer(model, config, ds, None, out_dir=out, collate_fn=model.collate).fit()
        result = evaluate_operator(model, traj, split=None, factors=[1])
        per_step = [sum(row) / len(row) for row in result["resolutions"]["64"]["rel_l2"]]
        assert len(per_step) == 10 and all(e == e and e < 1.0 for e in per_step), per_step
        errors[features] = per_step
    assert errors["dno"][-1] < 2 * errors["none"][-1], errors
    assert max(errors["dno"]) < 2 * max(errors["none"]), errors
