"""simsci.train.export_model and `simsci export`: a trained operator, controlled-ODE
surrogate and event model run in a fresh interpreter that cannot import simsci.

One module fixture trains (a few steps) or builds each model, saves its checkpoint and
exports it; one subprocess then loads every export with torch alone, parses the
safetensors files by hand, and compares the programs with the simsci models' outputs on
inputs the export never saw (another batch size where the batch axis is free)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest
import torch

from simsci.cli import main
from simsci.models.controlled_ode import ControlledODE
from simsci.models.neural_tpp import RMTPP
from simsci.models.point_process import TrueProcessTPP
from simsci.operators import OperatorModel
from simsci.train import CheckpointError, export_model, save_model
from simsci.train._safetensors import COMPLEX_SUFFIX, load_safetensors, save_safetensors

TINY_FNO = {"width": 8, "modes": 4, "layers": 2, "projection_width": 16}


def _fit(model, batch, steps=3):
    """A few Adam steps on one batch (training_step contract), then eval mode."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        model.training_step(batch)["loss"].backward()
        opt.step()
    return model.eval()


def _operator():
    torch.manual_seed(0)
    model = OperatorModel(
        task="rollout", channels=["u"], dim=1, grid=[32], backbone_kwargs=TINY_FNO,
        dt=0.1, mean=[0.5], std=[2.0],
    )  # fmt: skip
    x = torch.randn(4, 2, 32, 1)
    _fit(model, {"inputs": x[:, :1], "targets": x[:, 1:], "actions": None})
    history = torch.randn(3, 1, 64, 1) * 2 + 0.5  # another batch size and resolution
    with torch.no_grad():
        expected = model.step(history)
    return model, (history,), expected


def _operator_complex():
    """neuraloperator's FNO keeps complex64 spectral weights (the optional extra)."""
    torch.manual_seed(3)
    model = OperatorModel(
        task="rollout", channels=["u"], dim=1, grid=[32], backbone="neuralop.fno",
        backbone_kwargs={"width": 8, "modes": 8, "layers": 2}, dt=0.1,
    ).eval()  # fmt: skip
    history = torch.randn(2, 1, 32, 1)  # its batch axis is fixed (see the manifest)
    with torch.no_grad():
        expected = model.step(history)
    return model, (history,), expected


def _controlled_ode():
    torch.manual_seed(1)
    model = ControlledODE(
        [3], 2, 0.05, hidden_dim=16, depth=2, state_mean=[0.0, 1.0, -1.0],
        state_std=[1.0, 2.0, 0.5], action_std=[1.0, 3.0],
    ).eval()  # fmt: skip
    state, action = torch.randn(5, 3), torch.randn(5, 2)
    with torch.no_grad():
        expected = model.advance(state, action, model.dt)
    return model, (state, action), expected


def _event_model():
    torch.manual_seed(2)
    model = RMTPP(3, hidden=8, mark_dim=4, time_scale=2.0)
    gen = torch.Generator().manual_seed(0)

    def items(n, L):
        t = torch.cumsum(torch.rand(n, L, generator=gen, dtype=torch.float64) + 0.1, 1) * 2
        marks = torch.randint(0, 3, (n, L), generator=gen)
        return [{"t": t[i], "mark": marks[i]} for i in range(n)]

    _fit(model, model.collate(items(4, 8)))
    batch = model.collate(items(3, 8))
    tau = torch.rand(3, 8, 5, generator=gen) * 4
    with torch.no_grad():
        H = model.history(batch)
        expected = model.intensity(H, batch["t"], tau / model.time_scale) / model.time_scale
    return model, (batch["t"], batch["mark"], tau), expected


BUILDERS = {"operator": _operator, "controlled_ode": _controlled_ode, "event_model": _event_model}
if importlib.util.find_spec("neuralop") is not None:
    BUILDERS["operator_complex"] = _operator_complex


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """kind -> (export dir, manifest, model); each export's case.pt holds fresh inputs and
    the simsci model's outputs on them."""
    root = tmp_path_factory.mktemp("export")
    out = {}
    for kind, build in BUILDERS.items():
        model, inputs, expected = build()
        ckpt = save_model(model, root / f"{kind}.pt")
        manifest = export_model(ckpt, root / kind)
        torch.save({"inputs": list(inputs), "expected": expected}, root / kind / "case.pt")
        out[kind] = (root / kind, manifest, model)
    return out


# The check that runs in a fresh interpreter: simsci cannot be imported there at all.
FRESH = textwrap.dedent(
    r"""
    import hashlib, json, struct, sys

    class NoSimsci:
        def find_spec(self, name, path=None, target=None):
            if name == "simsci" or name.startswith("simsci."):
                raise ImportError("simsci is blocked in this interpreter")

    sys.meta_path.insert(0, NoSimsci())
    import numpy as np
    import torch

    DTYPES = {"F64": ("<f8", torch.float64), "F32": ("<f4", torch.float32),
              "I64": ("<i8", torch.int64), "BOOL": ("u1", torch.bool)}

    def read_safetensors(path):
        data = open(path, "rb").read()
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        meta = header.pop("__metadata__", {})
        out = {}
        for name, info in header.items():
            np_dtype, dtype = DTYPES[info["dtype"]]
            a, b = info["data_offsets"]
            arr = np.frombuffer(data[8 + n + a:8 + n + b], dtype=np_dtype)
            out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy()).to(dtype)
        for name in json.loads(meta.get("complex_as_real", "[]")):
            out[name] = torch.view_as_complex(out.pop(name + ".complex_as_real"))
        return out, meta

    for folder in sys.argv[1:]:
        man = json.load(open(f"{folder}/manifest.json"))
        for name, digest in man["sha256"].items():
            assert hashlib.sha256(open(f"{folder}/{name}", "rb").read()).hexdigest() == digest
        prog_info = man["program"]
        path = f"{folder}/{prog_info['file']}"
        if prog_info["format"] == "torch.export":
            program = torch.export.load(path).module()
        else:
            program = torch.jit.load(path)
        case = torch.load(f"{folder}/case.pt", weights_only=True)
        with torch.no_grad():
            got = program(*case["inputs"])
        assert torch.allclose(got, case["expected"], rtol=1e-5, atol=1e-6), folder
        example, _ = read_safetensors(f"{folder}/example.safetensors")
        with torch.no_grad():
            again = program(*[example[i["name"]] for i in man["inputs"]])
        assert torch.allclose(again, example[man["outputs"][0]["name"]], rtol=1e-5, atol=1e-6)
        weights, meta = read_safetensors(f"{folder}/weights.safetensors")
        state = program.state_dict()
        prefix = man["weights"]["program_prefix"]
        assert weights and meta["format"] == "pt"
        for name, w in weights.items():
            assert torch.equal(state[prefix + name], w), name
        print(folder.rsplit("/", 1)[-1], prog_info["format"], "ok")

    cplx, _ = read_safetensors(sys.argv[1] + "/../complex.safetensors")
    ref = torch.load(sys.argv[1] + "/../complex.pt", weights_only=True)
    assert cplx.keys() == ref.keys() and all(torch.equal(cplx[k], ref[k]) for k in ref)
    assert not [m for m in sys.modules if m == "simsci" or m.startswith("simsci.")]
    print("simsci not imported")
    """
)


def test_exports_run_with_torch_alone_in_a_fresh_interpreter(exported):
    dirs = [str(exported[kind][0]) for kind in BUILDERS]
    root = exported["operator"][0].parent
    tensors = {"w": torch.randn(2, 3, dtype=torch.complex64), "b": torch.arange(4)}
    save_safetensors(tensors, root / "complex.safetensors")
    torch.save(tensors, root / "complex.pt")
    proc = subprocess.run(
        [sys.executable, "-c", FRESH, *dirs], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "simsci not imported" in proc.stdout
    for kind in BUILDERS:
        assert f"{kind} torch.export ok" in proc.stdout


def test_manifest_says_what_is_exported(exported):
    for kind, (folder, manifest, model) in exported.items():
        assert manifest["kind"] == kind.removesuffix("_complex")
        assert json.loads((folder / "manifest.json").read_text()) == manifest
        assert manifest["program"] == {**manifest["program"], "format": "torch.export"}
        assert manifest["model"]["init_args"] == model.init_args
        assert manifest["model"]["checkpoint"].endswith(f"{kind}.pt")
        assert set(manifest["sha256"]) == {
            "program.pt2",
            "weights.safetensors",
            "example.safetensors",
        }
        for record in manifest["inputs"] + manifest["outputs"]:
            assert record["meaning"] and record["shape"]
        if kind != "operator_complex":  # neuraloperator's FNO fixes the batch size
            assert manifest["program"]["dynamic_batch"] is True
            for record in manifest["inputs"]:
                assert record["free_axes"][0] == {"axis": 0, "min": 1, "max": None}
        assert not list(folder.glob(".*tmp*"))  # atomic writes leave no temporary file
    op = exported["operator"][1]
    assert op["function"].startswith("OperatorModel.step(history)")
    assert [i["shape"] for i in op["inputs"]] == [[2, 1, 32, 1]]
    assert op["inputs"][0]["free_axes"][1] == {"axis": 2, "min": 8, "max": None}  # the grid
    ode = exported["controlled_ode"][1]
    assert [i["name"] for i in ode["inputs"]] == ["state", "action"] and "dt=0.05" in ode[
        "function"
    ]
    ev = exported["event_model"][1]
    assert [i["dtype"] for i in ev["inputs"]] == ["float64", "int64", "float32"]
    if "operator_complex" in exported:
        folder, manifest, model = exported["operator_complex"]
        names = [k for k, v in model.state_dict().items() if v.is_complex()]
        assert names and manifest["weights"]["complex_as_real"] == sorted(names)
        weights, _ = load_safetensors(folder / "weights.safetensors")
        assert all(torch.equal(weights[k], model.state_dict()[k]) for k in names)


def test_weights_round_trip_with_complex_tensors(tmp_path):
    tensors = {
        "spectral": torch.randn(2, 3, 4, dtype=torch.complex64),
        "real": torch.randn(3, 2).t(),  # not contiguous
        "flag": torch.tensor([True, False]),
        "half": torch.randn(3).bfloat16(),
        "empty": torch.zeros(0, 2),
    }
    save_safetensors(tensors, tmp_path / "w.safetensors", {"note": "x"})
    back, meta = load_safetensors(tmp_path / "w.safetensors")
    assert meta["note"] == "x" and json.loads(meta["complex_as_real"]) == ["spectral"]
    assert back.keys() == tensors.keys()
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name], t), name
    raw = (tmp_path / "w.safetensors").read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + header_len])
    assert header_len % 8 == 0 and "spectral" + COMPLEX_SUFFIX in header
    assert header["spectral" + COMPLEX_SUFFIX]["shape"] == [2, 3, 4, 2]


def test_bad_input_is_refused_with_the_reason(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        export_model(tmp_path / "missing.pt", tmp_path / "out")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a simsci checkpoint"):
        export_model(tmp_path / "junk.pt", tmp_path / "out")
    with pytest.raises(TypeError, match="Linear cannot be exported: it defines no export_spec"):
        export_model(torch.nn.Linear(2, 2), tmp_path / "out")
    with pytest.raises(TypeError, match="TrueProcessTPP has no network to export"):
        export_model(
            TrueProcessTPP(2, process={"name": "poisson", "params": {"rate": [1.0, 1.0]}}),
            tmp_path / "out",
        )
    ode = ControlledODE([3], 1, 0.1, hidden_dim=4, depth=1)
    with pytest.raises(ValueError, match=r"a state batch is \(B, \*state_shape\) = \(B, 3\)"):
        export_model(ode, tmp_path / "out", example=(2, 4))
    assert not (tmp_path / "out").exists()  # nothing written for a refused export


class _Branchy(torch.nn.Module):
    """A Python branch on values: torch.export refuses it, a TorchScript trace takes it."""

    def forward(self, x):
        if bool((x > 100).any()):
            return x + 1
        return 2 * x

    def export_spec(self, example_shape=None):
        x = torch.randn(*(example_shape or (3, 4)))
        return {"kind": "toy", "module": self, "inputs": (x,), "input_names": ["x"],
                "output_names": ["y"], "function": "2 x"}  # fmt: skip


class _Numpy(_Branchy):
    """Values through numpy: a trace bakes them in, which the second check catches."""

    def forward(self, x):
        return torch.from_numpy(x.numpy() * 2)


def test_torchscript_fallback_and_unfaithful_traces(tmp_path):
    manifest = export_model(_Branchy(), tmp_path / "b", example=(2, 5))
    assert manifest["program"]["format"] == "torchscript" and "note" in manifest["program"]
    assert "GuardOnDataDependentSymNode" in manifest["program"]["why_not_torch_export"]
    program = torch.jit.load(tmp_path / "b" / "program.pt")
    x = torch.randn(2, 5)
    assert torch.equal(program(x), 2 * x)
    with pytest.raises(TypeError, match="does not trace faithfully"):
        export_model(_Numpy(), tmp_path / "n")
    assert not (tmp_path / "n").exists()


def test_cli_export(exported, tmp_path, capsys):
    ckpt = exported["operator"][0].parent / "operator.pt"
    out = tmp_path / "cli"
    assert main(["export", str(ckpt), "--example-shape", "1,1,64,1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert (
        "exported operator" in text
        and "program.pt2 (torch.export; example history (1, 1, 64, 1); free axes: history 0/2)"
        in text
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"][0]["shape"] == [1, 1, 64, 1]  # the operator at 2x resolution
    assert main(["export", str(tmp_path / "nope.pt"), "--out", str(out)]) == 2
    assert "simsci: error: no checkpoint at" in capsys.readouterr().err
    assert main(["export", str(ckpt), "--example-shape", "2,x", "--out", str(out)]) == 2
    assert "--example-shape" in capsys.readouterr().err
