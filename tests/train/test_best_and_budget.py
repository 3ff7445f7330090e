"""best.pt exists whenever a run ends, and a max_steps budget is honoured.

- A run with no validation (none given, or none within its steps) writes its final state
  to best.pt at the end (it used to write none, and `simsci train vectorworld` / short
  GFG runs then had nothing to load); an evaluation with a best replaces it later.
- ``TrainConfig.epochs`` defaults to None: unbounded with ``max_steps``, 10 without; with
  both, the Trainer warns at the start when epochs stop the run before max_steps.
"""

import warnings

import pytest
import torch
import trainhelp_models as hm

from simsci.train import TrainConfig, Trainer, load_checkpoint, load_model


def fit(out, train, val=None, **cfg):
    cfg = {"progress": False, "device": "cpu", "batch_size": 8, "lr": 0.05, **cfg}
    trainer = Trainer(hm.LinearRegression(), TrainConfig(**cfg), train, val, out_dir=out)
    return trainer.fit()


def same_weights(a, b) -> bool:
    sa, sb = load_checkpoint(a)["model_state"], load_checkpoint(b)["model_state"]
    return all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a_run_without_validation_still_writes_best(tmp_path):
    summary = fit(tmp_path / "r", hm.Regression(32), max_steps=5)
    ckpt = tmp_path / "r" / "checkpoints"
    assert (ckpt / "best.pt").is_file()
    assert same_weights(ckpt / "best.pt", ckpt / "last.pt")  # the final state
    assert load_checkpoint(ckpt / "best.pt")["step"] == 5
    assert summary["paths"]["best_checkpoint"] == str(ckpt / "best.pt")
    assert summary["best_from"] == "final_state" and summary["best_step"] is None
    assert isinstance(load_model(ckpt / "best.pt"), hm.LinearRegression)


def test_validation_never_reached_warns_without_naming_val_data_and_writes_best(tmp_path):
    with pytest.warns(UserWarning) as caught:
        fit(tmp_path / "r", hm.Regression(32), hm.Regression(8, seed=1), max_steps=3,
            val_every=100)  # fmt: skip
    text = " ".join(str(w.message) for w in caught)
    assert "val_data is given" not in text
    assert "never evaluates on its validation data (val_every=100)" in text
    assert "set val_every to at most 3 steps" in text
    assert (tmp_path / "r" / "checkpoints" / "best.pt").is_file()


def test_an_evaluation_with_a_best_replaces_the_final_state(tmp_path):
    out = tmp_path / "r"
    with pytest.warns(UserWarning, match="never evaluates"):
        fit(out, hm.Regression(32), hm.Regression(8, seed=1), max_steps=2, val_every=4)
    assert load_checkpoint(out / "checkpoints" / "best.pt")["step"] == 2  # final state
    cfg = {"progress": False, "device": "cpu", "batch_size": 8, "lr": 0.05}
    trainer = Trainer(
        hm.LinearRegression(),
        TrainConfig(max_steps=6, val_every=4, **cfg),
        hm.Regression(32),
        hm.Regression(8, seed=1),
        out_dir=out,
        resume=True,
    )
    summary = trainer.fit()
    assert summary["best_step"] == 4 and summary["best_from"] == "validation"
    assert load_checkpoint(out / "checkpoints" / "best.pt")["step"] == 4


def test_max_steps_is_a_budget_the_default_epochs_do_not_cap(tmp_path):
    c = TrainConfig(max_steps=120)
    assert c.epochs is None and TrainConfig().epochs == 10
    assert TrainConfig.from_dict(c.to_dict()) == c
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: nothing stops the run early
        summary = fit(tmp_path / "r", hm.Regression(32), max_steps=120)  # 4 steps per epoch
    assert summary["steps"] == 120 and summary["epochs"] == 30 and summary["total_steps"] == 120
    summary = fit(tmp_path / "d", hm.Regression(32))  # no budget: the 10 epochs
    assert summary["steps"] == 40


def test_epochs_that_end_the_run_before_max_steps_are_named_at_the_start(tmp_path):
    with pytest.warns(UserWarning, match=r"epochs=3 \(4 steps each\) stops this run at step "
                      r"12, before max_steps=120.*epochs >= 30"):  # fmt: skip
        trainer = Trainer(
            hm.LinearRegression(),
            TrainConfig(epochs=3, max_steps=120, progress=False, device="cpu", batch_size=8),
            hm.Regression(32),
            out_dir=tmp_path / "r",
        )
    assert trainer.fit()["steps"] == 12
