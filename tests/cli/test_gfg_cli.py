"""GFG from the command line: generate -> train gfg -> evaluate --task forecast | detect |
motifs, and --task refused where it does not apply (tiny sizes: seconds)."""

import json
import math

from simsci.cli import main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def train_gfg(capsys, tmp_path, data, name, steps, *model_args):
    """``simsci train gfg`` for ``steps`` full-batch steps (one epoch is one step with 8
    episodes, so evaluation and checkpoints are set to the end, not every epoch)."""
    cfg = tmp_path / f"{name}.json"
    cfg.write_text(json.dumps({"val_every": steps, "checkpoint_every": steps, "lr": 0.003}))
    extra = [a for arg in ("hidden_dim=32", *model_args) for a in ("--param", arg)]
    code, _, err = run(
        capsys, "train", "gfg", "--data", data, "--out", tmp_path / name, "--max-steps", steps,
        "--batch-size", 8, "--config", cfg, "--no-progress", *extra,
    )  # fmt: skip
    assert code == 0, err
    return tmp_path / name / "checkpoints" / "last.pt"


def evaluate(capsys, tmp_path, checkpoint, data, task):
    report = tmp_path / f"{task}.json"
    code, stdout, err = run(
        capsys, "evaluate", checkpoint, "--data", data, "--task", task, "--out", report
    )
    assert code == 0, err
    metrics = json.loads(report.read_text())
    for key, value in metrics.items():  # every metric is printed, one per line
        if key not in ("checkpoint", "data"):
            assert key in stdout and math.isfinite(value), (key, value)
    return metrics


def test_lifted_circle_forecast_and_detect(tmp_path, capsys):
    data = tmp_path / "circle.h5"
    code, _, err = run(
        capsys, "generate", "lifted_circle", "-n", 6, "--param", "dim=8", "--param", "steps=10",
        "--t-end", 4, "--split-fractions", "0.5,0.17,0.33", "--out", data, "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    # rk4 on the output grid: the 10x-horizon forecast of a barely trained model with the
    # default dopri5 takes seconds, with rk4 a fraction of one
    checkpoint = train_gfg(capsys, tmp_path, data, "gfg", 30, "method=rk4")

    forecast = evaluate(capsys, tmp_path, checkpoint, data, "forecast")
    assert forecast["episodes"] == 2 and forecast["horizon"] == 10  # the 2 test episodes
    for key in ("rollout_rel_error", "long_rel_error", "drift_mean", "drift_final"):
        assert forecast[key] >= 0

    detect = evaluate(capsys, tmp_path, checkpoint, data, "detect")
    assert detect["n_real"] == 2
    for kind in ("reversed", "spliced", "generated", "wrong_physics"):  # the file has its flow
        for score in ("", "_flow", "_tangent", "_manifold"):
            assert 0 <= detect[f"auroc_{kind}{score}"] <= 1

    code, _, err = run(capsys, "evaluate", checkpoint, "--data", data, "--task", "forcast")
    assert code == 2 and "forecast" in err and len(err.strip().splitlines()) == 1

    # --task on a model with one evaluation, and on gfg at training, is refused
    code, _, err = run(
        capsys, "train", "latent_ode", "--data", data, "--window", 8, "--max-steps", 1,
        "--out", tmp_path / "lode", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    lode = tmp_path / "lode" / "checkpoints" / "last.pt"
    code, _, err = run(capsys, "evaluate", lode, "--data", data, "--task", "forecast")
    assert code == 2 and "LatentODE has one evaluation; drop --task forecast" in err
    code, _, err = run(
        capsys, "train", "gfg", "--data", data, "--task", "forecast", "--out", tmp_path / "x"
    )
    assert code == 2 and "drop --task" in err


def test_grn_toggle_motifs(tmp_path, capsys):
    data = tmp_path / "toggle.h5"
    code, _, err = run(capsys, "generate", "grn_toggle", "-n", 60, "--out", data, "--no-progress")
    assert code == 0, err
    checkpoint = train_gfg(capsys, tmp_path, data, "gfg_grn", 20)
    motifs = evaluate(capsys, tmp_path, checkpoint, data, "motifs")
    # the manifold read-out (a chart model's default), the ambient one, the true Jacobian
    for prefix in ("", "ambient_", "truth_"):
        for kind in ("signed", "activation", "repression", "edge"):
            assert 0 <= motifs[f"{prefix}auroc_{kind}"] <= 1
    assert motifs["truth_auroc_signed"] == 1.0  # the true network's own Jacobian
    assert motifs["n_edges"] == 4 and motifs["n_pairs"] == 12  # 4 genes: 12 ordered pairs
