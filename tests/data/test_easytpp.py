"""``simsci.data.import_easytpp``: EasyTPP's pickles and JSON as kind="events" files
(round trips, splits, ties, marks, empty and long sequences, gaps, unsafe and corrupt
files, layout errors)."""

import json
import os
import pickle
import shlex

import numpy as np
import pytest

import simsci.data as sd
from simsci.errors import FormatError

K = 3
SEQS = {
    "train": [([0.5, 1.25, 2.0, 4.5], [0, 2, 1, 1]), ([0.1, 0.3], [2, 2])],
    "dev": [([1.0, 1.5, 3.0], [1, 0, 2])],
    "test": [([0.0, 0.75], [0, 1]), ([2.0, 2.5, 3.5, 3.75, 9.0], [2, 1, 0, 0, 1])],
}


def _events(times, types, *, first_gap=None, numpy=False):
    """One EasyTPP sequence: event dicts as the Gatech pickles hold them."""
    out, last = [], None
    for j, (t, k) in enumerate(zip(times, types)):
        gap = (t if first_gap is None else first_gap) if last is None else t - last
        if numpy:
            t, gap, k = np.float32(t), np.float32(gap), np.int64(k)
        out.append(
            {
                "idx_event": j,
                "time_since_start": t,
                "time_since_last_event": gap,
                "time_since_last_same_event": gap,
                "type_event": k,
            }
        )
        last = times[j]
    return out


def _pickle(path, split, seqs, *, dim=K, protocol=pickle.HIGHEST_PROTOCOL, **events_kw):
    data = {"dim_process": dim, split: [_events(t, k, **events_kw) for t, k in seqs]}
    for other in ("train", "dev", "test", "devtest"):  # as in the neural Hawkes pickles
        data.setdefault(other, [])
    data["args"] = None
    path.write_bytes(pickle.dumps(data, protocol=protocol))
    return path


def _record(i, times, types, *, dim=K):
    gaps = [0.0] + np.diff(times).tolist() if times else []
    return {
        "dim_process": dim,
        "seq_idx": i,
        "seq_len": len(times),
        "time_since_start": list(times),
        "time_since_last_event": gaps,
        "type_event": list(types),
    }


def _json(path, seqs, *, lines=False, dim=K):
    records = [_record(i, t, k, dim=dim) for i, (t, k) in enumerate(seqs)]
    if lines:
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        path.write_text(json.dumps(records))
    return path


def _pickle_dir(tmp_path, seqs=SEQS, **kw):
    d = tmp_path / "taxi"
    d.mkdir(exist_ok=True)
    for split, s in seqs.items():
        _pickle(d / f"{split}.pkl", split, s, **kw)
    return d


def _check_episodes(ds, seqs=SEQS):
    expected = [(s, i, t, k) for s in ("train", "dev", "test") for i, (t, k) in enumerate(seqs[s])]
    assert len(ds) == len(expected)
    split_id = {"train": 0, "dev": 1, "test": 2}
    assert ds.column("split").tolist() == [split_id[s] for s, *_ in expected]
    assert ds.column("source_index").tolist() == [i for _, i, *_ in expected]
    for n, (_, _, t, k) in enumerate(expected):
        ep = ds[n]
        assert ep["t"].dtype == np.float64 and ep["mark"].dtype == np.int64
        np.testing.assert_allclose(ep["t"], t, rtol=1e-6)
        assert ep["mark"].tolist() == k


def test_pickle_directory_round_trip(tmp_path):
    d = _pickle_dir(tmp_path)
    _pickle(d / "dev.pkl", "dev", SEQS["dev"], numpy=True, protocol=2)  # numpy scalars, py2
    out = sd.import_easytpp(d, tmp_path / "out.h5")
    assert sd.check_file(out) == []
    ds = sd.open(out)
    assert ds.kind == "events" and ds.system == "easytpp:taxi" and ds.num_marks == K
    _check_episodes(ds)
    meta = ds.meta
    src = meta["source"]
    assert src["format"] == "easytpp" and src["layout"] == "pickle" and src["dim_process"] == K
    assert [f["split"] for f in src["files"]] == ["train", "dev", "test"]
    assert [os.path.basename(f["path"]) for f in src["files"]] == [
        "train.pkl",
        "dev.pkl",
        "test.pkl",
    ]
    assert src["sequences"] == 5 and src["events"] == 16 and meta["events"] == 16
    assert meta["split"] == {"train": 2, "val": 1, "test": 2}
    assert meta["import"]["ties"] == {"policy": "error", "sequences": 0, "events": 0}
    assert meta["import"]["gaps"]["checked"] is True


@pytest.mark.parametrize("lines", [False, True])
def test_json_layouts_round_trip(tmp_path, lines):
    d = tmp_path / "hf"
    d.mkdir()
    _json(d / "train.json", SEQS["train"], lines=lines)  # .json holding JSON lines too
    _json(d / "validation.jsonl", SEQS["dev"], lines=True)
    _json(d / "test.json", SEQS["test"])
    ds = sd.open(sd.import_easytpp(d, tmp_path / "out.h5", compression="gzip"))
    _check_episodes(ds)
    layouts = [f["layout"] for f in ds.meta["source"]["files"]]
    assert layouts == ["jsonl" if lines else "json", "jsonl", "json"]
    assert ds.meta["source"]["layout"] == "mixed"


def test_any_subset_of_splits_and_single_files(tmp_path):
    d = tmp_path / "part"
    d.mkdir()
    _pickle(d / "test.pkl", "test", SEQS["test"])
    _json(d / "train.json", SEQS["train"])
    ds = sd.open(sd.import_easytpp(d, tmp_path / "a.h5"))
    assert ds.column("split").tolist() == [0, 0, 2, 2]
    one = sd.open(sd.import_easytpp(d / "test.pkl", tmp_path / "b.h5"))
    assert one.column("split").tolist() == [2, 2] and one.system == "easytpp:part"
    # a pickle not named after a split: every split key that holds sequences
    both = {"dim_process": K, "train": [_events(*SEQS["train"][0])], "dev": [], "test": []}
    both["test"] = [_events(*s) for s in SEQS["test"]]
    (tmp_path / "all.pkl").write_bytes(pickle.dumps(both))
    ds = sd.open(sd.import_easytpp(tmp_path / "all.pkl", tmp_path / "c.h5"))
    assert ds.column("split").tolist() == [0, 2, 2]
    # a JSON file not named after a split: no split is written
    plain = sd.open(
        sd.import_easytpp(_json(tmp_path / "seqs.json", SEQS["dev"]), tmp_path / "d.h5")
    )
    assert "split" not in plain.episode_fields and plain.meta["split"] is None
    assert plain[0]["mark"].tolist() == [1, 0, 2]


def test_ties_error_jitter_drop(tmp_path):
    seqs = {"train": [([0.0, 1.0], [0, 1]), ([0.0, 1.0, 1.0, 1.0, 2.0], [0, 1, 2, 0, 1])]}
    d = _pickle_dir(tmp_path, seqs)
    with pytest.raises(FormatError, match=r"train\.pkl, sequence 1 of split 'train', event 2") as e:
        sd.import_easytpp(d, tmp_path / "out.h5")
    assert e.value.rule == "import-time" and "ties='drop'" in str(e.value)
    assert not (tmp_path / "out.h5").exists()

    ds = sd.open(sd.import_easytpp(d, tmp_path / "j.h5", ties="jitter"))
    t = ds[1]["t"]
    assert np.all(np.diff(t) > 0) and ds[1]["mark"].tolist() == [0, 1, 2, 0, 1]
    eps = 1e-9 * 2.0  # relative 1e-9 of the span
    np.testing.assert_allclose(t, [0.0, 1.0, 1.0 + eps, 1.0 + 2 * eps, 2.0], rtol=0, atol=1e-15)
    ties = ds.meta["import"]["ties"]
    assert ties["policy"] == "jitter" and ties["sequences"] == 1 and ties["events"] == 2
    assert ties["jitter_relative"] == 1e-9 and ties["jitter_absolute"] == 1e-12

    ds = sd.open(sd.import_easytpp(d, tmp_path / "d.h5", ties="drop"))
    assert ds[1]["t"].tolist() == [0.0, 1.0, 2.0] and ds[1]["mark"].tolist() == [0, 1, 1]
    assert ds.meta["import"]["ties"]["events"] == 2 and ds.meta["events"] == 5


def test_jitter_stays_representable_for_large_times(tmp_path):
    t0 = 1.6e9  # Unix time stamps: 1e-9 of a small span is below float64 resolution there
    seqs = {"train": [([t0, t0 + 0.5, t0 + 0.5, t0 + 1.0], [0, 1, 1, 2])]}
    ds = sd.open(sd.import_easytpp(_pickle_dir(tmp_path, seqs), tmp_path / "o.h5", ties="jitter"))
    t = ds[0]["t"]
    assert np.all(np.diff(t) > 0) and abs(t[2] - (t0 + 0.5)) < 1e-5


def test_jitter_that_would_reach_the_next_event_is_refused(tmp_path):
    seqs = {"train": [([0.0, 1.0, 1.0, 1.0 + 1e-12, 2.0], [0, 0, 0, 0, 0])]}
    with pytest.raises(FormatError, match="ties='drop'"):
        sd.import_easytpp(_pickle_dir(tmp_path, seqs), tmp_path / "o.h5", ties="jitter")


def test_decreasing_and_non_finite_times_are_refused(tmp_path):
    d = _pickle_dir(tmp_path, {"train": [([0.0, 2.0, 1.0], [0, 1, 2])]})
    for ties in ("error", "drop", "jitter"):
        with pytest.raises(FormatError, match="event 2: time_since_start = 1.0 is before"):
            sd.import_easytpp(d, tmp_path / "o.h5", ties=ties, check_gaps=False)
    d = _pickle_dir(tmp_path, {"train": [([0.0, float("nan")], [0, 1])]})
    with pytest.raises(FormatError, match="event 1: time_since_start = nan is not finite"):
        sd.import_easytpp(d, tmp_path / "o.h5", check_gaps=False)
    _json(d / "train.json", [([0.0, 1.0], [0, 1])])
    records = json.loads((d / "train.json").read_text())
    records[0]["time_since_start"][1] = "1.0"
    (d / "train.pkl").unlink()
    (d / "train.json").write_text(json.dumps(records))
    with pytest.raises(FormatError, match=r"event 1: time_since_start = '1.0' \(str\) is not a"):
        sd.import_easytpp(d, tmp_path / "o.h5")


def test_marks_out_of_range_or_not_integers(tmp_path):
    d = _pickle_dir(tmp_path, {"train": [([0.0, 1.0], [0, 1]), ([0.0, 1.0, 2.0], [0, 3, 1])]})
    with pytest.raises(
        FormatError, match=r"sequence 1 .*event 1: type_event = 3 lies outside 0\.\.2"
    ) as e:
        sd.import_easytpp(d, tmp_path / "o.h5")
    assert e.value.rule == "import-mark"
    _pickle(d / "train.pkl", "train", [([0.0, 1.0], [0, -1])])
    with pytest.raises(FormatError, match="type_event = -1 lies outside"):
        sd.import_easytpp(d, tmp_path / "o.h5")
    _pickle(d / "train.pkl", "train", [([0.0, 1.0], [0, 1.0])])
    with pytest.raises(FormatError, match=r"type_event = 1.0 \(float\) is not an integer"):
        sd.import_easytpp(d, tmp_path / "o.h5")
    for dim in (0, 2.5, True):
        _pickle(d / "train.pkl", "train", [([0.0, 1.0], [0, 1])], dim=dim)
        with pytest.raises(FormatError, match="dim_process"):
            sd.import_easytpp(d, tmp_path / "o.h5")


def test_dim_process_must_agree_between_files_and_records(tmp_path):
    d = _pickle_dir(tmp_path)
    _pickle(d / "test.pkl", "test", SEQS["test"], dim=4)
    with pytest.raises(FormatError, match="dim_process = 4 but train.pkl says 3"):
        sd.import_easytpp(d, tmp_path / "o.h5")
    records = [_record(0, [0.0, 1.0], [0, 1]), _record(1, [0.0, 1.0], [0, 1], dim=5)]
    (tmp_path / "train.json").write_text(json.dumps(records))
    with pytest.raises(FormatError, match="sequence 1: dim_process = 5 but record 0 says 3"):
        sd.import_easytpp(tmp_path / "train.json", tmp_path / "o.h5")


def test_empty_sequences(tmp_path):
    seqs = {"train": [([0.0, 1.0], [0, 1]), ([], []), ([0.5], [2])]}
    d = _pickle_dir(tmp_path, seqs)
    with pytest.raises(FormatError, match="sequence 1 of split 'train'.*skip_empty=True") as e:
        sd.import_easytpp(d, tmp_path / "o.h5")
    assert e.value.rule == "import-empty"
    ds = sd.open(sd.import_easytpp(d, tmp_path / "o.h5", skip_empty=True))
    assert len(ds) == 2 and ds.column("source_index").tolist() == [0, 2]
    assert ds.meta["import"]["empty_skipped"] == 1
    (tmp_path / "e").mkdir()
    only_empty = _pickle_dir(tmp_path / "e", {"train": [([], [])]})
    with pytest.raises(FormatError, match="no non-empty sequence"):
        sd.import_easytpp(only_empty, tmp_path / "o2.h5", skip_empty=True)


def test_too_long_sequences(tmp_path):
    d = _pickle_dir(tmp_path)
    with pytest.raises(FormatError, match="has 5 events, more than max_events = 4") as e:
        sd.import_easytpp(d, tmp_path / "o.h5", max_events=4)
    assert e.value.rule == "import-length" and "sequence 1 of split 'test'" in str(e.value)
    ds = sd.open(sd.import_easytpp(d, tmp_path / "o.h5", max_events=3, truncate=True))
    assert ds.lengths.max() == 3 and ds[4]["t"].tolist() == [2.0, 2.5, 3.5]
    imp = ds.meta["import"]
    assert imp["truncated_sequences"] == 2 and imp["truncated_events"] == 3
    assert imp["max_events"] == 3 and imp["truncate"] is True
    with pytest.raises(ValueError, match="truncate=True needs max_events"):
        sd.import_easytpp(d, tmp_path / "o.h5", truncate=True)
    with pytest.raises(ValueError, match="max_events must be a positive int"):
        sd.import_easytpp(d, tmp_path / "o.h5", max_events=0)


def test_gaps_must_agree_unless_check_gaps_false(tmp_path):
    d = tmp_path / "syn"
    d.mkdir()
    rec = _record(0, [0.0, 1.0, 3.0], [0, 1, 0])
    rec["time_since_last_event"] = [0.7, 1.0, 2.5]  # per-type gaps, as EasyTPP's synthetic
    (d / "train.json").write_text(json.dumps([rec]))
    with pytest.raises(FormatError, match=r"event 2: time_since_last_event = 2\.5 but") as e:
        sd.import_easytpp(d, tmp_path / "o.h5")
    assert e.value.rule == "import-gap" and "check_gaps=False" in str(e.value)
    ds = sd.open(sd.import_easytpp(d, tmp_path / "o.h5", check_gaps=False))
    assert ds[0]["t"].tolist() == [0.0, 1.0, 3.0]
    gaps = ds.meta["import"]["gaps"]
    assert gaps["checked"] is False and gaps["disagreeing_sequences"] == 1
    assert gaps["disagreeing_events"] == 1
    # float32 round-off is within the tolerance; the first gap is not checked
    _pickle_dir(tmp_path, {"train": [([1e3 + 0.1, 1e3 + 0.2], [0, 1])]}, numpy=True, first_gap=9.0)
    assert len(sd.open(sd.import_easytpp(tmp_path / "taxi", tmp_path / "f.h5"))) == 1


def test_missing_keys(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "train.pkl").write_bytes(pickle.dumps({"train": [_events([0.0], [0])]}))
    with pytest.raises(FormatError, match="has no key 'dim_process'"):
        sd.import_easytpp(d, tmp_path / "o.h5")
    (d / "train.pkl").write_bytes(pickle.dumps({"dim_process": 2, "dev": [_events([0.0], [0])]}))
    with pytest.raises(FormatError, match=r"has no key 'train'.*found keys 'dim_process', 'dev'"):
        sd.import_easytpp(d, tmp_path / "o.h5")
    seq = _events([0.0, 1.0], [0, 1])
    del seq[1]["type_event"]
    (d / "train.pkl").write_bytes(pickle.dumps({"dim_process": 2, "train": [seq]}))
    with pytest.raises(
        FormatError, match="sequence 0 of split 'train', event 1: has no key 'type_event'"
    ):
        sd.import_easytpp(d, tmp_path / "o.h5")
    (d / "train.pkl").write_bytes(pickle.dumps({"dim_process": 2, "train": [[[0.0, 1]]]}))
    with pytest.raises(FormatError, match="event 0: is a list; an event is a dict"):
        sd.import_easytpp(d, tmp_path / "o.h5")
    seq = _events([0.0, 1.0], [0, 1])
    del seq[0]["time_since_last_event"]
    (d / "train.pkl").write_bytes(pickle.dumps({"dim_process": 2, "train": [seq]}))
    with pytest.raises(FormatError, match="'time_since_last_event' .pass check_gaps=False"):
        sd.import_easytpp(d, tmp_path / "o.h5")
    ds = sd.open(sd.import_easytpp(d, tmp_path / "o.h5", check_gaps=False))
    assert ds.meta["import"]["gaps"]["sequences_without_gaps"] == 1
    (d / "train.pkl").unlink()
    rec = _record(0, [0.0, 1.0], [0, 1])
    del rec["time_since_start"]
    (d / "train.json").write_text(json.dumps([rec]))
    with pytest.raises(FormatError, match="sequence 0: has no key 'time_since_start'"):
        sd.import_easytpp(d, tmp_path / "o.h5")
    rec = _record(0, [0.0, 1.0], [0, 1])
    rec["seq_len"] = 3
    (d / "train.json").write_text(json.dumps([rec]))
    with pytest.raises(FormatError, match="seq_len = 3 but the record lists 2 events"):
        sd.import_easytpp(d, tmp_path / "o.h5")
    rec["seq_len"], rec["type_event"] = 2, [0]
    (d / "train.json").write_text(json.dumps([rec]))
    with pytest.raises(
        FormatError, match="'type_event' has 1 entries but 'time_since_start' has 2"
    ):
        sd.import_easytpp(d, tmp_path / "o.h5")


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def test_malicious_pickle_is_refused_before_it_runs(tmp_path):
    marker = tmp_path / "pwned"
    d = tmp_path / "evil"
    d.mkdir()
    payload = {"dim_process": 2, "train": [_events([0.0], [0])], "args": _Evil(marker)}
    (d / "train.pkl").write_bytes(pickle.dumps(payload))
    dst = tmp_path / "o.h5"
    with pytest.raises(
        FormatError, match=r"asks to load (posix|nt|os)\.system.*arbitrary code"
    ) as e:
        sd.import_easytpp(d, dst)
    assert e.value.rule == "import-unsafe" and not marker.exists() and not dst.exists()
    import argparse  # a harmless class is refused too: only plain data is built

    args = argparse.Namespace(lr=0.1)
    (d / "train.pkl").write_bytes(pickle.dumps({"dim_process": 2, "train": [], "args": args}))
    with pytest.raises(FormatError, match=r"argparse\.Namespace"):
        sd.import_easytpp(d, dst)


def test_corrupt_files_leave_dst_untouched(tmp_path):
    d = _pickle_dir(tmp_path)
    dst = tmp_path / "o.h5"
    dst.write_bytes(b"previous")
    good = (d / "dev.pkl").read_bytes()
    (d / "dev.pkl").write_bytes(good[: len(good) // 2])
    with pytest.raises(FormatError, match=r"dev\.pkl: is not a readable pickle") as e:
        sd.import_easytpp(d, dst)
    assert e.value.rule == "import-corrupt"
    (d / "dev.pkl").write_bytes(b"\x00garbage, not a pickle")
    with pytest.raises(FormatError, match="is not a readable pickle"):
        sd.import_easytpp(d, dst)
    (d / "dev.pkl").write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(FormatError, match="holds a list; an EasyTPP pickle is a dict"):
        sd.import_easytpp(d, dst)
    (d / "dev.pkl").unlink()
    text = json.dumps([_record(0, *SEQS["dev"][0])])
    (d / "dev.json").write_text(text[:-10])
    with pytest.raises(FormatError, match="is not valid JSON"):
        sd.import_easytpp(d, dst)
    (d / "dev.json").unlink()
    (d / "dev.jsonl").write_text(text + "\n{broken\n")
    with pytest.raises(FormatError, match="line 2 is not valid JSON"):
        sd.import_easytpp(d, dst)
    (d / "dev.jsonl").unlink()
    (d / "dev.json").write_text(json.dumps({"dim_process": 3, "event_seqs": {}}))  # old layout
    with pytest.raises(FormatError, match="holds one JSON object .keys 'dim_process'"):
        sd.import_easytpp(d, dst)
    assert dst.read_bytes() == b"previous"


def test_layout_and_option_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "readme.txt").write_text("x")
    with pytest.raises(FormatError, match="holds no EasyTPP split file.*found: readme.txt"):
        sd.import_easytpp(empty, tmp_path / "o.h5")
    d = _pickle_dir(tmp_path)
    _json(d / "dev.json", SEQS["dev"])
    with pytest.raises(FormatError, match="2 files for split 'dev' .dev.json, dev.pkl"):
        sd.import_easytpp(d, tmp_path / "o.h5")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        sd.import_easytpp(tmp_path / "nope", tmp_path / "o.h5")
    (tmp_path / "train.csv").write_text("1,2")
    with pytest.raises(FormatError, match="suffix '.csv'"):
        sd.import_easytpp(tmp_path / "train.csv", tmp_path / "o.h5")
    with pytest.raises(ValueError, match="ties must be one of 'error', 'jitter', 'drop'"):
        sd.import_easytpp(d, tmp_path / "o.h5", ties="shift")
    with pytest.raises(ValueError, match="compression must be"):
        sd.import_easytpp(d, tmp_path / "o.h5", compression="zstd")
    with pytest.raises(ValueError, match="same file"):
        sd.import_easytpp(d / "train.pkl", d / "train.pkl")
    assert not (tmp_path / "o.h5").exists()


def _events_file(tmp_path, *, split=True):
    """A kind="events" file with the fields EasyTPP has no place for (loc, group, t_end)."""
    rng = np.random.default_rng(0)
    eps = []
    for i in range(7):
        n = int(rng.integers(1, 9))
        ep = {
            "t": np.cumsum(rng.exponential(0.7, n)) + 100.0 / 3,  # not exact in decimal
            "mark": rng.integers(0, K, n),
            "loc": rng.normal(size=(n, 2)),
            "group": np.int64(i % 2),
            "t_end": np.float64(50.0),
        }
        if split:
            ep["split"] = [0, 0, 2, 1, 0, 2, 0][i]
        eps.append(ep)
    path = sd.write(
        tmp_path / "ev.h5", eps, kind="events", system="s", num_marks=K,
        episode_fields=("group", "t_end"),
    )  # fmt: skip
    return path, eps


@pytest.mark.parametrize("fmt", ["pkl", "json"])
def test_export_then_import_gives_the_same_sequences(tmp_path, fmt):
    src, eps = _events_file(tmp_path)
    summary = sd.export_easytpp(src, tmp_path / "out", format=fmt)
    assert sorted(summary["files"]) == ["dev", "test", "train"]
    assert summary["sequences"] == {"train": 4, "dev": 1, "test": 2}
    assert summary["num_marks"] == K and summary["dropped"] == ["group", "loc", "t_end"]
    back = sd.open(sd.import_easytpp(tmp_path / "out", tmp_path / "back.h5"))
    assert back.num_marks == K
    expected = [ep for s in (0, 1, 2) for ep in eps if ep["split"] == s]  # split order
    assert back.column("split").tolist() == [ep["split"] for ep in expected]
    for n, ep in enumerate(expected):
        np.testing.assert_array_equal(back[n]["t"], ep["t"])  # float64 kept exactly
        np.testing.assert_array_equal(back[n]["mark"], ep["mark"])


def test_export_writes_easytpps_layout(tmp_path):
    src, eps = _events_file(tmp_path)
    sd.export_easytpp(src, tmp_path / "pk")
    train = pickle.loads((tmp_path / "pk" / "train.pkl").read_bytes())
    assert train["dim_process"] == K and len(train["train"]) == 4
    first = train["train"][0]
    assert [e["idx_event"] for e in first] == list(range(len(first)))
    assert first[0]["time_since_last_event"] == 0.0  # EasyTPP's first gap
    gaps = [e["time_since_last_event"] for e in first[1:]]
    np.testing.assert_allclose(gaps, np.diff(eps[0]["t"]))
    sd.export_easytpp(src, tmp_path / "js", format="json")
    records = json.loads((tmp_path / "js" / "test.json").read_text())
    assert [r["seq_len"] for r in records] == [len(eps[2]["t"]), len(eps[5]["t"])]
    assert set(records[0]) == {
        "dim_process", "seq_len", "seq_idx", "time_since_start",
        "time_since_last_event", "type_event",
    }  # fmt: skip


def test_export_without_splits_and_bad_input(tmp_path):
    src, _ = _events_file(tmp_path, split=False)
    summary = sd.export_easytpp(src, tmp_path / "all")
    assert list(summary["files"]) == ["train"] and summary["sequences"]["train"] == 7
    state = sd.write(
        tmp_path / "st.h5", [{"t": np.arange(3.0), "x": np.zeros((3, 2))}], kind="state",
        system="s",
    )  # fmt: skip
    with pytest.raises(FormatError, match="kind='events'"):
        sd.export_easytpp(state, tmp_path / "x")
    with pytest.raises(ValueError, match="format must be one of"):
        sd.export_easytpp(src, tmp_path / "x", format="csv")
    (tmp_path / "afile").write_text("")
    with pytest.raises(NotADirectoryError):
        sd.export_easytpp(src, tmp_path / "afile")


def test_export_cli(tmp_path, capsys):
    from simsci.cli import main

    src, _ = _events_file(tmp_path)
    assert main(["data", "export", "easytpp", str(src), str(tmp_path / "cli")]) == 0
    out = capsys.readouterr().out
    assert "train.pkl: 4 sequences" in out and "not written: group, loc, t_end" in out
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == [
        "dev.pkl", "test.pkl", "train.pkl",
    ]  # fmt: skip
