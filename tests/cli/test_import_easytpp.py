"""``simsci data import easytpp SRC DST``: EasyTPP pickles/JSON from the command line,
its options, and one clear line for each error."""

import json
import pickle

import pytest

import simsci.data
from simsci.cli import main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _events(times, types):
    return [
        {
            "time_since_start": t,
            "time_since_last_event": t - (times[j - 1] if j else 0.0),
            "type_event": k,
        }
        for j, (t, k) in enumerate(zip(times, types))
    ]


@pytest.fixture
def easytpp_dir(tmp_path):
    d = tmp_path / "retweet"
    d.mkdir()
    train = [_events([0.0, 1.0, 1.0, 2.0], [0, 1, 2, 0]), [], _events([0.5, 0.7], [1, 1])]
    (d / "train.pkl").write_bytes(pickle.dumps({"dim_process": 3, "train": train}))
    record = {
        "dim_process": 3,
        "seq_idx": 0,
        "seq_len": 3,
        "time_since_start": [0.0, 0.25, 1.0],
        "time_since_last_event": [0.0, 0.25, 0.75],
        "type_event": [2, 0, 1],
    }
    (d / "test.json").write_text(json.dumps([record]))
    return d


def test_import_easytpp_with_options(easytpp_dir, tmp_path, capsys):
    dst = tmp_path / "events.h5"
    code, stdout, err = run(
        capsys,
        "data",
        "import",
        "easytpp",
        easytpp_dir,
        dst,
        "--ties",
        "drop",
        "--skip-empty",
        "--max-events",
        2,
        "--truncate",
        "--compression",
        "gzip",
    )
    assert code == 0, err
    assert "wrote" in stdout and dst.exists()
    assert main(["data", "check", str(dst)]) == 0
    ds = simsci.data.open(dst)
    assert ds.kind == "events" and ds.num_marks == 3 and len(ds) == 3
    assert ds.column("split").tolist() == [0, 0, 2]
    assert ds[0]["t"].tolist() == [0.0, 1.0] and ds[2]["mark"].tolist() == [2, 0]
    imp = ds.meta["import"]
    assert imp["ties"]["policy"] == "drop" and imp["empty_skipped"] == 1
    assert imp["truncated_sequences"] == 2


def test_import_easytpp_errors_are_one_line(easytpp_dir, tmp_path, capsys):
    dst = tmp_path / "events.h5"
    code, _, err = run(capsys, "data", "import", "easytpp", easytpp_dir, dst)
    assert code == 2 and "Traceback" not in err
    assert "train.pkl, sequence 0 of split 'train', event 2" in err and "--ties" not in err
    assert "ties='drop'" in err and not dst.exists()
    code, _, err = run(capsys, "data", "import", "easytpp", easytpp_dir, dst, "--ties", "jitter")
    assert code == 2 and "sequence 1 of split 'train': holds no events" in err
    code, _, err = run(
        capsys,
        "data",
        "import",
        "easytpp",
        easytpp_dir,
        dst,
        "--ties",
        "jitter",
        "--skip-empty",
        "--max-events",
        2,
    )
    assert code == 2 and "more than max_events = 2" in err
    code, _, err = run(capsys, "data", "import", "easytpp", easytpp_dir, dst, "-n", 1)
    assert code == 2 and "-n/--episodes applies to pdebench/thewell" in err
    code, _, err = run(capsys, "data", "import", "pdebench", "a.h5", dst, "--ties", "drop")
    assert code == 2 and "--ties applies to 'data import easytpp' only, not to pdebench" in err
    code, _, err = run(capsys, "data", "import", "easytpp", easytpp_dir, dst, "--keep", 0.5)
    assert code == 2 and "--keep applies to 'data import aeon' only, not to easytpp" in err
    assert not dst.exists()


def test_import_help_names_easytpp(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["data", "import", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "easytpp" in out and "--max-events" in out and "--no-check-gaps" in out
