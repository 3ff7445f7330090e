"""Same seed, same data, same device and thread count: bit-identical runs.

Every training entry seeds once, first (``simsci.train.seed_everything``), so two
trainings in one process -- whose global generators were left anywhere by whatever ran
before -- log the same metrics, bit for bit, and end with the same weights; another seed
gives another run. Covered: registry models of series and event files (latent_ode,
gru_dt, cocld), ``simsci zoo build`` and DynaDiff's generator (``simsci dynadiff
train``), all tiny.
"""

import json
import random
import warnings

import numpy as np
import pytest
import torch

from simsci import models
from simsci.train import load_checkpoint, seed_everything


def _scramble():
    """Leave the global generators somewhere else, as earlier work in a process would."""
    random.random()
    np.random.rand(3)  # noqa: NPY002
    torch.rand(7)


def _rows(run):
    """The metrics rows without their wall-clock times."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time"} for r in rows]


def _weights(path):
    return load_checkpoint(path)["model_state"]


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _train(name, data, out, seed, **kwargs):
    config = {"max_steps": 3, "batch_size": 4, "log_every": 1, "seed": seed,
              "device": "cpu", "progress": False}  # fmt: skip
    _scramble()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models.entry(name).train(data, out, config, **kwargs)
    return _rows(out), _weights(out / "checkpoints" / "last.pt")


@pytest.mark.parametrize(
    "name, fixture, kwargs",
    [
        ("latent_ode", "series", {"window": 4}),
        ("gru_dt", "series", {"window": 4}),
        ("cocld", "events", {}),
    ],
)
def test_same_seed_same_run_bit_for_bit(tmp_path, request, name, fixture, kwargs):
    data = request.getfixturevalue(fixture)
    rows_a, w_a = _train(name, data, tmp_path / "a", 3, **kwargs)
    rows_b, w_b = _train(name, data, tmp_path / "b", 3, **kwargs)
    assert rows_a[0]["step"] == 1 and len(rows_a) >= 3
    assert rows_a == rows_b  # every logged loss and metric, bit for bit (floats compared ==)
    assert _same(w_a, w_b)
    rows_c, w_c = _train(name, data, tmp_path / "c", 4, **kwargs)
    assert rows_c != rows_a and not _same(w_a, w_c)


def test_seed_everything_checks_and_seeds_every_generator():
    assert seed_everything(5) == 5
    first = (random.random(), np.random.rand(), torch.rand(1))  # noqa: NPY002
    seed_everything(np.int64(5))
    again = (random.random(), np.random.rand(), torch.rand(1))  # noqa: NPY002
    assert first[:2] == again[:2] and torch.equal(first[2], again[2])
    for bad, error in ((-1, ValueError), (2**63, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="seed must be a non-negative integer"):
            seed_everything(bad)


@pytest.fixture(scope="module")
def lv(tmp_path_factory):
    from simsci.models import dynadiff as dd

    root = tmp_path_factory.mktemp("lv")
    dd.make_environments("lotka_volterra", root / "data", quick=True, device="cpu")
    return root


def test_zoo_build_and_generator_are_reproducible(tmp_path, lv):
    from simsci.models import dynadiff as dd

    spec = dd.ExpertSpec("mlp", 2, hidden=8, depth=3)
    kw = dict(spec=spec, steps=3, pool_steps=2, batch_size=4, device="cpu")
    zoos = []
    for run, seed in (("a", 1), ("b", 1), ("c", 2)):
        _scramble()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            path = dd.build_zoo(lv / "data", tmp_path / f"zoo-{run}.pt", seed=seed, **kw)
        zoos.append(dd.load_zoo(path))
    a, b, c = zoos
    assert _same(a.weights, b.weights) and torch.equal(a.val_rmse, b.val_rmse)
    assert not _same(a.weights, c.weights)

    def generator(run, seed):
        model_args = {"zoo": str(tmp_path / "zoo-a.pt"), "autoencoder_steps": 2,
                      "decoder_steps": 1, "diffusion_train_steps": 2, "latent_dim": 4,
                      "hidden": 16, "encoder_hidden": 16}  # fmt: skip
        config = {"device": "cpu", "seed": seed, "progress": False, "batch_size": 4}
        _scramble()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            models.entry("dynadiff").train(
                lv / "data", tmp_path / run, config, model_args=model_args
            )
        return _weights(tmp_path / run / "generator.pt"), _rows(tmp_path / run / "diffusion")

    (w1, r1), (w2, r2), (w3, _) = generator("g1", 1), generator("g2", 1), generator("g3", 2)
    assert _same(w1, w2) and r1 == r2
    assert not _same(w1, w3)
