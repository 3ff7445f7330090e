"""``info`` (and ``simsci data info``) of a shard directory describes the whole dataset:
totals over every shard, the shards themselves, and where their meta differ."""

import numpy as np
import pytest

import simsci.data as sd


def _shards(directory, counts, meta_of):
    directory.mkdir()
    for rank, n in enumerate(counts):
        eps = [
            {"t": [0.0, 1.0, 2.0][: 2 + rank % 2], "x": np.full((2 + rank % 2, 1), float(rank))}
            for _ in range(n)
        ]
        sd.write(
            sd.shard_path(directory, rank), eps, kind="state", system="toy", meta=meta_of(rank)
        )
    return directory


def test_info_counts_every_shard_and_splits_the_meta(tmp_path):
    def meta_of(rank):
        meta = {"seed": rank, "dt": 0.1, "generator": "demo"}
        if rank == 1:
            meta["note"] = "resumed"  # in one shard only
        return meta

    d = _shards(tmp_path / "ds", [2, 3, 4], meta_of)
    text = sd.info(d)
    # totals: 2 + 3 + 4 episodes; 2*2 + 3*3 + 4*2 steps
    assert "episodes: 9   total steps: 21" in text
    assert "shards: 3 (part-00000.h5 .. part-00002.h5)" in text
    assert "episodes per shard: 2, 3, 4" in text and "steps per shard: 4, 9, 8" in text
    common = next(line for line in text.splitlines() if line.startswith("meta (the same"))
    assert common.startswith("meta (the same in all 3 shards): ")
    assert "dt=0.1" in common and 'generator="demo"' in common and "seed=" not in common
    assert "meta that differs between shards" in text
    assert "  seed: part-00000.h5: 0, part-00001.h5: 1, part-00002.h5: 2" in text
    assert (
        '  note: part-00000.h5: (absent), part-00001.h5: "resumed", part-00002.h5: (absent)' in text
    )
    assert "\nmeta: " not in text  # not the first shard's meta passed off as the dataset's


def test_info_of_many_shards_summarises(tmp_path):
    d = _shards(tmp_path / "many", [1] * 9 + [5], lambda rank: {"seed": rank % 3, "dt": 0.5})
    text = sd.info(d)
    assert "shards: 10 (part-00000.h5 .. part-00009.h5)" in text
    assert "episodes per shard: min 1 / median 1 / max 5" in text
    seed = next(line for line in text.splitlines() if line.startswith("  seed:"))
    assert seed.count("part-") == 4 and seed.endswith(", ... (3 distinct value(s))")


def test_info_of_one_file_is_unchanged(tmp_path):
    path = sd.write(
        tmp_path / "one.h5",
        [{"t": [0.0], "x": [[1.0]]}],
        kind="state",
        system="toy",
        meta={"seed": 3},
    )
    text = sd.info(path)
    assert "shards:" not in text and "\nmeta: " in text and "seed=3" in text


@pytest.mark.parametrize("stats_in_second", [True, False])
def test_info_names_what_else_differs(tmp_path, stats_in_second):
    d = tmp_path / "ev"
    d.mkdir()
    for rank, k in enumerate((2, 4)):
        sd.write(
            sd.shard_path(d, rank),
            [{"t": [0.5, 1.0], "mark": [0, 1], "v": [0.0, 1.0]}],
            kind="events",
            system="toy",
            num_marks=k,
            stats=rank == 0 or stats_in_second,
        )
    text = sd.info(d)
    assert "num_marks per shard: 2, 4 (the dataset uses the largest)" in text
    assert ("written without statistics: part-00001.h5" in text) is not stats_in_second
