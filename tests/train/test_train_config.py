"""TrainConfig validation and the deterministic batch sampler."""

import dataclasses

import pytest
import torch

from simsci.errors import UnknownNameError
from simsci.train import EpochBatchSampler, TrainConfig


def test_defaults_and_round_trip():
    c = TrainConfig()
    assert (c.epochs, c.batch_size, c.lr) == (10, 32, 1e-3)
    assert (c.optimizer, c.schedule) == ("adam", "constant")
    assert c.max_steps is None and c.val_every is None and c.checkpoint_every is None
    d = TrainConfig(lr=1, max_steps=7, grad_clip=2).to_dict()
    assert d["lr"] == 1.0 and isinstance(d["lr"], float) and d["max_steps"] == 7
    assert TrainConfig.from_dict(d) == TrainConfig(lr=1.0, max_steps=7, grad_clip=2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.lr = 0.1


def test_unknown_key_lists_valid_keys_and_suggests():
    valid = r"did you mean 'batch_size'\?.*Valid names:.*epochs"
    with pytest.raises(UnknownNameError, match=valid):
        TrainConfig.from_dict({"bach_size": 4})
    with pytest.raises(UnknownNameError, match="did you mean 'optimizer'"):
        TrainConfig.from_dict({"optimiser": "adam"})
    with pytest.raises(ValueError, match=r"key 'learning_rat'.*Other unknown keys: 'zzz'"):
        TrainConfig.from_dict({"epochs": 2, "learning_rat": 1.0, "zzz": 1})
    with pytest.raises(TypeError, match="expects a dict"):
        TrainConfig.from_dict([("epochs", 2)])


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"epochs": 0}, ValueError, "epochs must be >= 1, got 0"),
        ({"epochs": 2.5}, TypeError, "epochs must be an integer"),
        ({"batch_size": True}, TypeError, "batch_size must be an integer"),
        ({"max_steps": 0}, ValueError, "max_steps must be >= 1"),
        ({"lr": -1.0}, ValueError, "lr must be a finite number > 0"),
        ({"lr": float("nan")}, ValueError, "lr must be a finite number"),
        ({"lr": "1e-3"}, TypeError, "lr must be a number, got '1e-3'"),
        ({"weight_decay": -0.1}, ValueError, "weight_decay must be a finite number >= 0"),
        ({"optimizer": "adm"}, ValueError, "did you mean 'adam'"),
        ({"schedule": "cosin"}, ValueError, "did you mean 'cosine'"),
        ({"schedule": "warmup_cosine"}, ValueError, "needs warmup_steps >= 1"),
        ({"warmup_steps": 10}, ValueError, "only used by schedule='warmup_cosine'"),
        ({"step_gamma": 1.5}, ValueError, r"step_gamma must be in \(0, 1\]"),
        ({"grad_clip": 0.0}, ValueError, "grad_clip must be a finite number > 0"),
        ({"monitor": "loss"}, ValueError, "monitor must name a validation metric"),
        ({"mode": "avg"}, ValueError, "unknown mode 'avg'"),
        ({"patience": 0}, ValueError, "patience must be >= 1"),
        ({"seed": -1}, ValueError, "seed must be >= 0"),
        ({"device": "gpu0"}, ValueError, "device must be 'auto', 'cpu'"),
        ({"progress": 1}, TypeError, "progress must be True or False"),
    ],
)
def test_bad_values_are_rejected(kwargs, error, match):
    with pytest.raises(error, match=match):
        TrainConfig(**kwargs)


def test_sampler_order_depends_on_seed_and_epoch_only():
    s = EpochBatchSampler(23, 4, seed=3)
    torch.manual_seed(123)
    a = [list(b) for b in s]
    torch.manual_seed(456)  # the global RNG plays no part
    assert [list(b) for b in s] == a
    assert sorted(i for b in a for i in b) == list(range(23))
    assert [len(b) for b in a] == [4, 4, 4, 4, 4, 3]
    s.set_epoch(1)
    assert [list(b) for b in s] != a
    s.set_epoch(0, start=2)  # resuming inside an epoch: same batches, none loaded before
    assert [list(b) for b in s] == a[2:] and len(s) == 4
    assert [list(b) for b in EpochBatchSampler(23, 4, seed=4)] != a


def test_ranks_concatenate_to_the_single_process_batches():
    single = EpochBatchSampler(27, 8, seed=1)
    ranks = [EpochBatchSampler(27, 4, seed=1, world_size=2, rank=r) for r in (0, 1)]
    for epoch in (0, 1):
        for s in (single, *ranks):
            s.set_epoch(epoch)
        joined = [b0 + b1 for b0, b1 in zip(*ranks)]
        assert joined == [list(b) for b in single]
    # the last global batch of 3 splits 2 + 1, and sizes() says so on each rank
    assert ranks[0].sizes(3) == (2, 3) and ranks[1].sizes(3) == (1, 3)
    assert ranks[0].sizes(0) == (4, 8)
    # a leftover smaller than the number of ranks is dropped under DDP only
    assert EpochBatchSampler(9, 4, world_size=2, rank=1).num_batches == 1
    assert EpochBatchSampler(9, 8).num_batches == 2
