"""The zoo's quality record: each expert's validation RMSE against persistence (every
frame predicted by the first), the build time, and an old file without them."""

import math
import warnings

import pytest
import torch

from simsci.models import dynadiff as dd
from simsci.models.dynadiff._zoo import persistence_rmse, save_zoo


@pytest.fixture(scope="module")
def lv_zoo(tmp_path_factory):
    """A tiny zoo on the quick Lotka-Volterra protocol (9 experts, seconds)."""
    root = tmp_path_factory.mktemp("zoo_quality")
    paths = dd.make_environments("lotka_volterra", root / "data", quick=True, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = dd.build_zoo(
            root / "data", root / "zoo.pt", spec={"hidden": 16}, steps=300, pool_steps=150,
            batch_size=8, lr=1e-2, device="cpu",
        )  # fmt: skip
    return dd.load_zoo(path), paths


def test_persistence_is_the_rmse_of_the_first_frame_held():
    x = torch.zeros(2, 3, 1)
    x[:, 1] = 1.0
    x[:, 2] = 2.0  # errors 0, 1, 2 on every episode: sqrt(5 / 3)
    y = torch.ones(1, 4, 2) * 7.0  # nothing moves: persistence is exact
    torch.testing.assert_close(
        persistence_rmse([x, y]), torch.tensor([math.sqrt(5 / 3), 0.0], dtype=torch.float64)
    )


def test_zoo_records_validation_against_persistence(lv_zoo):
    zoo, paths = lv_zoo
    E = zoo.num_experts
    assert zoo.persistence_rmse.shape == (E,) and zoo.val_rmse.shape == (E,)
    assert torch.isfinite(zoo.persistence_rmse).all() and (zoo.persistence_rmse > 0).all()
    assert torch.isfinite(zoo.val_rmse).all()
    # the persistence figures are those of the validation file, expert by expert
    val = dd.load_environments(paths["val"]).reorder(zoo.env_params.numpy(), "same grid")
    torch.testing.assert_close(zoo.persistence_rmse, persistence_rmse(val.episodes))
    q = zoo.quality()
    assert set(q) == {
        "val_rmse_median", "val_rmse_max", "persistence_rmse_median", "ratio_median",
        "ratio_max", "build_seconds",
    }  # fmt: skip
    assert all(math.isfinite(v) for v in q.values())
    assert q["build_seconds"] >= sum(zoo.record["seconds"][k] for k in ("pooled", "experts"))
    # a few hundred steps on a 2-state ODE already beat "nothing moves" clearly
    assert q["ratio_median"] < 0.5 and q["ratio_max"] < 1.0


def test_a_zoo_without_persistence_still_loads(tmp_path, lv_zoo):
    zoo, _ = lv_zoo
    record = {k: v for k, v in zoo.record.items() if k not in ("kind", "format_version")}
    del record["persistence_rmse"]
    record["seconds"] = {"pooled": 1.0, "experts": 2.0}
    old = dd.load_zoo(save_zoo(tmp_path / "old.pt", record))
    assert old.persistence_rmse is None
    assert set(old.quality()) == {"val_rmse_median", "val_rmse_max"}
