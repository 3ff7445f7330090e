"""DynaDiff from the command line: dynadiff data -> zoo build -> zoo info -> dynadiff
train -> adapt -> evaluate -> compare (quick protocol, tiny step counts: seconds), and
a corrupt zoo refused with one clear line."""

import json
import math

import pytest

from simsci.cli import main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_dynadiff_cli_round_trip(tmp_path, capsys):
    data = tmp_path / "lv"
    code, out, err = run(capsys, "dynadiff", "data", "--system", "lotka_volterra", "--quick",
                         "--out", data)  # fmt: skip
    assert code == 0, err
    assert set(json.loads(out)) == {"train", "val", "in_domain", "out_of_domain"}
    zoo = tmp_path / "zoo.pt"
    code, out, err = run(capsys, "zoo", "build", "--data", data, "--out", zoo, "--max-steps",
                         20, "--pool-steps", 20, "--param", "hidden=8",
                         "--device", "cpu")  # fmt: skip
    assert code == 0, err
    code, out, err = run(capsys, "zoo", "info", zoo)
    info = json.loads(out)
    assert code == 0 and info["experts"] == 9 and info["varied"] == ["beta", "delta"]
    assert info["spec"]["hidden"] == 8
    gen = tmp_path / "gen"
    code, out, err = run(capsys, "dynadiff", "train", "--zoo", zoo, "--data", data, "--out",
                         gen, "--param", "autoencoder_steps=5", "--param",
                         "diffusion_train_steps=10", "--device", "cpu")  # fmt: skip
    assert code == 0, err
    pred = tmp_path / "pred.pt"
    code, out, err = run(capsys, "dynadiff", "adapt", gen / "generator.pt", "--context",
                         data / "in_domain.h5", "--out", pred, "--candidates", 4)  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["predictor"] == str(pred) and pred.is_file()
    code, out, err = run(
        capsys, "evaluate", pred, "--data", data / "in_domain.h5", "--split", "all"
    )
    assert code == 0, err
    assert "rmse" in out and "nrmse" in out
    report = tmp_path / "compare.json"
    code, out, err = run(capsys, "dynadiff", "compare", gen / "generator.pt", "--zoo", zoo,
                         "--data", data / "in_domain.h5", "--finetune-steps", 3,
                         "--out", report)  # fmt: skip
    assert code == 0, err
    summary = json.loads(report.read_text())["summary"]
    assert {"dynadiff", "pooled", "nearest", "average", "finetune"} <= set(summary)
    assert all(math.isfinite(v["rmse"]) for v in summary.values())
    # an environment outside the zoo's range: a warning, and a predictor all the same
    code, out, err = run(capsys, "dynadiff", "adapt", gen / "generator.pt", "--context",
                         data / "out_of_domain.h5", "--out", tmp_path / "ood.pt")  # fmt: skip
    assert code == 0 and "extrapolates" in out


def test_corrupt_zoo_and_missing_arguments_are_one_line_errors(tmp_path, capsys):
    bad = tmp_path / "zoo.pt"
    bad.write_bytes(b"not a zoo at all")
    code, _, err = run(capsys, "zoo", "info", bad)
    assert code == 2 and "not a readable zoo file" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exc:
        run(capsys, "zoo", "build", "--out", tmp_path / "z.pt")
    assert exc.value.code == 2 and "required: --data" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        run(capsys, "dynadiff", "adapt", "--context", bad, "--out", tmp_path / "p.pt")
    assert exc.value.code == 2 and "required: GENERATOR" in capsys.readouterr().err
