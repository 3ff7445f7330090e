"""The classification benchmark on real sensor data, CI-sized: aeon's bundled
BasicMotions and JapaneseVowels, imported by ``simsci.data.import_aeon`` (offline: the
``.ts`` files ship inside the aeon wheel), trained and scored by the harness of
``benchmarks/bench_sdevi.py`` (``from_data(task="classification")``, ``train.Trainer``,
``train.evaluate`` on the test split) with a small GRU-Δt, in seconds.

Chance: BasicMotions has 4 balanced classes (40 test episodes; chance and the train
majority 0.25), JapaneseVowels 9 speakers (370 test episodes; majority 0.095). The bars
sit well below what the runs reach (BasicMotions 0.53-0.68 over seeds 0-3 at 40 steps,
JapaneseVowels 0.88-0.95 at 30) and far above chance: 18 of 40 right at p = 0.25 has
probability < 0.005. The benchmark itself (150 steps, SDEVI and every baseline, 3 seeds)
is ``python benchmarks/bench_sdevi.py --only basicmotions``."""

import numpy as np
import pytest
import torch

from simsci import data, models, train

# name -> fraction of each channel's points kept (the benchmark keeps 50% on BasicMotions)
KEEP = {"BasicMotions": 0.5, "JapaneseVowels": 1.0}
# name -> (Adam steps, accuracy bar) of the default run (GRU-Δt, width 32)
FAST = {"BasicMotions": (40, 0.45), "JapaneseVowels": (30, 0.6)}
# ... and of the slow run (SDEVI linear at the benchmark's sizes, latent 8 and width 64,
# lr 3e-3; BasicMotions at its 150 steps: ~40 s, 0.65; JapaneseVowels 60 steps, 0.95)
SLOW = {"BasicMotions": (150, 0.45), "JapaneseVowels": (60, 0.8)}


def _aeon_set(name, tmp_path):
    pytest.importorskip(
        "aeon", reason="the optional package aeon is not installed (pip install 'simsci[aeon]')"
    )
    return data.open(data.import_aeon(name, tmp_path / f"{name}.h5", keep=KEEP[name], seed=0))


def _accuracy_and_baseline(traj, tmp_path, model_name, steps, lr, **kwargs):
    """Train on the train split as bench_sdevi.run_one does; the test split's accuracy
    and the train majority class's accuracy there."""
    cls = models.MODELS[model_name]
    torch.manual_seed(0)
    model = cls.from_data(traj, task="classification", **kwargs)
    fields = tuple(f for f in cls.data_fields if f in traj.step_fields or f in traj.episode_fields)
    train_set = data.TrajectoryDataset(traj, fields=fields, split="train")
    test_set = data.TrajectoryDataset(traj, fields=fields, split="test")
    config = train.TrainConfig(
        max_steps=steps, epochs=100_000, batch_size=32, lr=lr, schedule="cosine",
        grad_clip=10.0, seed=0, device="cpu", progress=False, log_every=10**9,
    )  # fmt: skip
    train.Trainer(
        model, config, train_set, None, out_dir=tmp_path / "run", collate_fn=model.collate
    ).fit()
    scores = train.evaluate(model, test_set, collate_fn=model.collate, batch_size=128)
    label, split = np.asarray(traj.column("label")), np.asarray(traj.column("split"))
    majority = np.bincount(label[split == 0]).argmax()
    return scores["accuracy"], float((label[split == 2] == majority).mean())


@pytest.mark.parametrize("name", FAST)
def test_gru_dt_classifies_aeon_sets_above_chance(name, tmp_path):
    traj = _aeon_set(name, tmp_path)
    steps, bar = FAST[name]
    chance = 1.0 / len(traj.meta["class_names"])
    accuracy, baseline = _accuracy_and_baseline(
        traj, tmp_path, "gru_dt", steps, 1e-2, hidden_dim=32
    )
    assert bar >= max(baseline, chance) + 0.15  # the bar itself is well above chance
    assert accuracy >= bar, (accuracy, baseline)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_sdevi_classifies_aeon_sets_above_chance(name, tmp_path):
    """The benchmark's own model; the default run guards the same path with GRU-Δt
    (test_gru_dt_classifies_aeon_sets_above_chance)."""
    traj = _aeon_set(name, tmp_path)
    steps, bar = SLOW[name]
    chance = 1.0 / len(traj.meta["class_names"])
    accuracy, baseline = _accuracy_and_baseline(
        traj, tmp_path, "sdevi", steps, 3e-3, variant="linear", latent_dim=8, hidden_dim=64
    )
    assert bar >= max(baseline, chance) + 0.15  # the bar itself is well above chance
    assert accuracy >= bar, (accuracy, baseline)
