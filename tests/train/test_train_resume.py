"""Bit-for-bit resume: a run stopped anywhere and resumed ends exactly like an
uninterrupted one (parameters by torch.equal, metrics rows equal but for wall time)."""

import json
import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import trainhelp_models as hm

from simsci.train import CheckpointError, TrainConfig, Trainer, load_checkpoint

CONFIG = dict(
    epochs=6, batch_size=8, lr=0.02, optimizer="adam", schedule="warmup_cosine",
    warmup_steps=3, grad_clip=0.5, val_every=4, log_every=3, checkpoint_every=3, seed=7,
    progress=False, device="cpu",
)  # fmt: skip  # 36 samples: batches of 8, 8, 8, 8, 4 -> 30 steps


def data():
    return hm.Regression(36, noise=0.1), hm.Regression(10, seed=1)


def rows(out):
    lines = (Path(out) / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k != "time"} for x in lines]


def same_params(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def uninterrupted(out, **changes):
    torch.manual_seed(0)
    model = hm.NoisyNet()
    summary = Trainer(model, TrainConfig(**{**CONFIG, **changes}), *data(), out_dir=out).fit()
    return model, summary


def scramble_global_rngs():
    """What a fresh process would have: nothing of the first run's RNG states."""
    torch.manual_seed(12345)
    random.seed(12345)
    np.random.seed(12345)  # noqa: NPY002


@pytest.mark.parametrize("crash_at", [2, 8, 16, 27])
def test_crash_and_resume_in_process(tmp_path, crash_at):
    ref, ref_summary = uninterrupted(tmp_path / "ref")

    torch.manual_seed(0)
    model = hm.NoisyNet()
    model.interrupt_at = crash_at
    trainer = Trainer(model, TrainConfig(**CONFIG), *data(), out_dir=tmp_path / "run")
    with pytest.raises(hm.Interrupted):
        trainer.fit()
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    saved = (crash_at - 1) // 3 * 3  # checkpoint_every=3
    assert (load_checkpoint(last)["step"] if last.exists() else 0) == saved
    # the crashed run logged rows after its last checkpoint; resume must drop them
    assert max((r["step"] for r in rows(tmp_path / "run")), default=0) >= saved

    # the restarted script builds its model as before; with a checkpoint its weights (and
    # every RNG) come from the checkpoint, so scramble them to prove it
    torch.manual_seed(0)
    fresh = hm.NoisyNet()
    if saved:
        scramble_global_rngs()
        torch.nn.init.normal_(fresh.net[0].weight)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = Trainer(
            fresh, TrainConfig(**CONFIG), *data(), out_dir=tmp_path / "run", resume=True
        ).fit()
    assert summary["resumed_from"] == (str(last) if saved else None)
    assert same_params(fresh.state_dict(), ref.state_dict())
    assert rows(tmp_path / "run") == rows(tmp_path / "ref")
    for key in ("steps", "epochs", "best_metric", "best_step", "last_val"):
        assert summary[key] == ref_summary[key]
    best = [
        load_checkpoint(p / "checkpoints" / "best.pt") for p in (tmp_path / "ref", tmp_path / "run")
    ]
    assert same_params(best[0]["model_state"], best[1]["model_state"])


def test_stop_with_max_steps_then_extend(tmp_path):
    # a horizon-free schedule, so stopping at 11 steps and extending is the same run
    changes = dict(schedule="step", warmup_steps=0, step_every=5, step_gamma=0.7)
    ref, _ = uninterrupted(tmp_path / "ref", **changes)
    _, first = uninterrupted(tmp_path / "run", max_steps=11, **changes)
    assert first["steps"] == 11
    scramble_global_rngs()
    model = hm.NoisyNet()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Trainer(
            model,
            TrainConfig(**{**CONFIG, **changes}),
            *data(),
            out_dir=tmp_path / "run",
            resume=True,
        ).fit()
    assert same_params(model.state_dict(), ref.state_dict())
    assert rows(tmp_path / "run") == rows(tmp_path / "ref")


def test_without_restored_rng_the_run_differs(tmp_path):
    """The control: the resume test can fail. Resuming from a checkpoint whose RNG states
    were replaced does not reproduce the uninterrupted run."""
    ref, _ = uninterrupted(tmp_path / "ref")
    _, _ = uninterrupted(tmp_path / "run", max_steps=9)
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    ck = load_checkpoint(last)
    other = torch.Generator().manual_seed(99).get_state()
    ck["rng"][0]["torch"] = other
    torch.save(ck, last)
    model = hm.NoisyNet()
    with pytest.warns(UserWarning, match="schedule horizon 9 -> 30"):
        Trainer(model, TrainConfig(**CONFIG), *data(), out_dir=tmp_path / "run", resume=True).fit()
    assert not same_params(model.state_dict(), ref.state_dict())


def test_resumed_finished_run_does_nothing(tmp_path):
    ref, summary = uninterrupted(tmp_path / "ref")
    before = rows(tmp_path / "ref")
    model = hm.NoisyNet()
    again = Trainer(
        model, TrainConfig(**CONFIG), *data(), out_dir=tmp_path / "ref", resume=True
    ).fit()
    assert again["steps"] == summary["steps"] and rows(tmp_path / "ref") == before
    assert same_params(model.state_dict(), ref.state_dict())


# ------------------------------------------------------------------ killed process


def script(*args):
    return [sys.executable, str(hm.HERE / "trainhelp_run.py"), *map(str, args)]


def wait_for_step(path: Path, min_step: int, proc: subprocess.Popen, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            pytest.fail(f"training process exited ({proc.returncode}) early:\n{out}")
        if path.exists():
            try:
                if load_checkpoint(path)["step"] >= min_step:
                    return
            except (FileNotFoundError, CheckpointError):
                pass  # replaced between exists() and the read; look again
        time.sleep(0.02)
    pytest.fail(f"no checkpoint with step >= {min_step} at {path} within {timeout} s")


def test_sigkilled_process_resumes_bit_for_bit(tmp_path):
    full_dir, victim_dir = tmp_path / "full", tmp_path / "victim"
    opts = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=hm.subprocess_env())
    full = subprocess.Popen(script("--out", full_dir, "--steps", 60), **opts)
    # the victim blocks inside step 45, so the kill always lands mid-run (steps 30..45)
    victim = subprocess.Popen(script("--out", victim_dir, "--steps", 60, "--hang-at", 45), **opts)
    try:
        wait_for_step(victim_dir / "checkpoints" / "last.pt", 30, victim)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=60)
    finally:
        if victim.poll() is None:
            victim.kill()
    assert victim.returncode == -signal.SIGKILL
    killed_at = load_checkpoint(victim_dir / "checkpoints" / "last.pt")["step"]
    assert 30 <= killed_at <= 44

    resumed = subprocess.run(
        script("--out", victim_dir, "--steps", 60, "--resume"),
        capture_output=True,
        text=True,
        env=hm.subprocess_env(),
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    full_out, _ = full.communicate(timeout=300)
    assert full.returncode == 0, full_out.decode()

    a = load_checkpoint(full_dir / "checkpoints" / "last.pt")
    b = load_checkpoint(victim_dir / "checkpoints" / "last.pt")
    assert a["step"] == b["step"] == 60
    assert same_params(a["model_state"], b["model_state"])
    assert rows(victim_dir) == rows(full_dir)
    assert not list((victim_dir / "checkpoints").glob(".*tmp*"))
