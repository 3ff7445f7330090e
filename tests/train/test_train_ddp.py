"""DDP under torchrun: 2 CPU processes on gloo equal one process with the doubled batch."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import trainhelp_models as hm
import trainhelp_run

from simsci.train import load_checkpoint


def rows(out: Path, split: str) -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


def test_two_gloo_ranks_match_one_process_with_the_doubled_batch(tmp_path):
    ddp_out, ddp_params = tmp_path / "ddp", tmp_path / "ddp_params"
    ddp_params.mkdir()
    # 51 samples in global batches of 8: the last one (3 samples) splits 2 + 1
    args = ["--model", "linear", "--n-data", "51", "--epochs", "3"]
    cmd = [
        # --standalone: torchrun binds a free port itself (a port picked here could be
        # taken by another process before torchrun binds it)
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        str(hm.HERE / "trainhelp_run.py"), "--out", str(ddp_out), "--batch-size", "4",
        "--params-dir", str(ddp_params), *args,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=hm.subprocess_env(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

    single_out, single_params = tmp_path / "single", tmp_path / "single_params"
    single_params.mkdir()
    threads = torch.get_num_threads()
    try:
        trainhelp_run.main(
            [
                "--out",
                str(single_out),
                "--batch-size",
                "8",
                "--params-dir",
                str(single_params),
                *args,
            ]
        )
    finally:
        torch.set_num_threads(threads)

    r0, r1 = (torch.load(ddp_params / f"rank{r}.pt") for r in (0, 1))
    (single,) = [torch.load(single_params / "rank0.pt")]
    assert all(torch.equal(r0[k], r1[k]) for k in r0)  # the ranks agree exactly
    for k in r0:
        torch.testing.assert_close(r0[k], single[k], rtol=1e-5, atol=1e-6)
    moved = (single["linear.weight"] - r0["linear.weight"]).abs().max()
    assert moved < 1e-5 and single["linear.weight"].abs().min() > 0.1  # it did train

    ddp_train, one_train = rows(ddp_out, "train"), rows(single_out, "train")
    assert [r["step"] for r in ddp_train] == [r["step"] for r in one_train] == list(range(1, 22))
    for a, b in zip(ddp_train, one_train):
        assert a["lr"] == b["lr"] and a["epoch"] == b["epoch"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)  # the global batch mean
    ddp_val, one_val = rows(ddp_out, "val"), rows(single_out, "val")
    assert [r["step"] for r in ddp_val] == [r["step"] for r in one_val] == list(range(3, 22, 3))
    for a, b in zip(ddp_val, one_val):  # sharded 7 + 6 samples, weighted by samples
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-5)

    # only rank 0 wrote: one copy of every row, no stray files, every rank's RNG saved
    names = sorted(str(p.relative_to(ddp_out)) for p in ddp_out.rglob("*"))
    assert names == [
        "checkpoints",
        "checkpoints/best.pt",
        "checkpoints/last.pt",
        "metrics.csv",
        "metrics.jsonl",
        "summary.json",
    ]
    assert len(rows(ddp_out, "train")) == 21
    last = load_checkpoint(ddp_out / "checkpoints" / "last.pt")
    assert last["world_size"] == 2 and len(last["rng"]) == 2
    assert not torch.equal(last["rng"][0]["torch"], last["rng"][1]["torch"])
    assert json.loads((ddp_out / "summary.json").read_text())["world_size"] == 2
