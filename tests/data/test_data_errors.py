"""Bad input: corrupt files are reported by rule, bad episodes are refused, writes are atomic."""

import hashlib
import os
import signal
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest

import simsci.data as sd
from simsci.errors import FormatError, UnknownNameError

GOOD_T = [0.0, 1.0, 2.0, 0.5, 1.5]  # two episodes: 3 + 2 steps (a drop between them is fine)


def rules(path):
    return [p.rule for p in sd.check_file(path)]


# ----------------------------------------------------------------- corrupt files
def test_crafted_valid_file_passes(tmp_path, crafted):
    path = crafted(tmp_path / "ok.h5", offsets=[0, 3, 5], t=GOOD_T, x=np.zeros((5, 2)))
    assert sd.check_file(path) == []
    assert len(sd.open(path)) == 2


def test_truncated_file(tmp_path, state_file):
    data = state_file.read_bytes()
    bad = tmp_path / "truncated.h5"
    bad.write_bytes(data[: len(data) // 2])
    (problem,) = sd.check_file(bad)
    assert problem.rule == "damaged" and problem.path == str(bad)
    with pytest.raises(FormatError, match="truncated or damaged"):
        sd.open(bad)
    with pytest.raises(FormatError, match="truncated or damaged"):
        sd.info(bad)


def test_file_of_another_format(tmp_path):
    npz = tmp_path / "data.npz"
    np.savez(npz, t=np.arange(3.0))
    with pytest.raises(FormatError, match="not an HDF5 file .*zip archive"):
        sd.open(npz)
    txt = tmp_path / "notes.h5"
    txt.write_text("t,x\n0,1\n")
    with pytest.raises(FormatError, match="not an HDF5 file .*text file"):
        sd.open(txt)
    assert rules(txt) == ["not-hdf5"]


def test_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trajectory file"):
        sd.open(tmp_path / "nope.h5")
    assert rules(tmp_path / "nope.h5") == ["file-missing"]


def test_directory_without_shards(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a shard")
    (problem,) = sd.check_file(empty)
    assert problem.rule == "no-shards" and problem.path == str(empty)
    with pytest.raises(FormatError, match=r"no part-\*\.h5 shards.*\[rule no-shards\]"):
        sd.open(empty)


def test_missing_root_attributes(tmp_path, crafted):
    path = crafted(tmp_path / "a.h5", offsets=[0, 3, 5], t=GOOD_T, drop_attrs=("kind", "meta"))
    with pytest.raises(FormatError, match=r"missing root attribute\(s\) \['kind', 'meta'\]"):
        sd.open(path)
    assert rules(path) == ["root-attrs"]


def test_bad_meta_json(tmp_path, crafted):
    path = crafted(tmp_path / "m.h5", offsets=[0, 5], t=np.arange(5.0), attrs={"meta": "{oops"})
    with pytest.raises(FormatError, match="meta is not valid JSON"):
        sd.open(path)


def test_newer_format_version(tmp_path, state_file):
    with h5py.File(state_file, "r+") as f:
        f.attrs["format_version"] = 2
    with pytest.raises(FormatError, match="format_version 2 .* a newer simsci is needed") as exc:
        sd.open(state_file)
    assert exc.value.rule == "format-version"


def test_offsets_that_decrease(tmp_path, crafted):
    path = crafted(tmp_path / "d.h5", offsets=[0, 3, 2, 5], t=[0, 1, 2, 3, 4.0])
    with pytest.raises(FormatError, match="offsets decrease at episode 1") as exc:
        sd.open(path)
    assert exc.value.episode == 1 and exc.value.field == "episodes/offsets"
    assert "offsets-decrease" in rules(path)


def test_offsets_that_overrun(tmp_path, crafted):
    path = crafted(tmp_path / "o.h5", offsets=[0, 3, 7], t=GOOD_T, x=np.zeros((5, 2)))
    with pytest.raises(FormatError, match="offsets end at 7 but steps/.* has 5 rows") as exc:
        sd.open(path)
    assert exc.value.episode == 1
    assert rules(path) == ["offsets-end", "offsets-end"]  # t and x


def test_offsets_not_starting_at_zero(tmp_path, crafted):
    path = crafted(tmp_path / "z.h5", offsets=[1, 5], t=np.arange(5.0))
    assert "offsets-start" in rules(path)


def test_non_increasing_times(tmp_path, crafted):
    t = [0.0, 1.0, 2.0, 0.5, 0.5, 1.0, 2.0]  # episode 1 repeats 0.5
    path = crafted(tmp_path / "t.h5", offsets=[0, 3, 7], t=t)
    with pytest.raises(FormatError, match=r"not strictly increasing.*t\[0\] = 0.5 .*t\[1\] = 0.5"):
        sd.open(path)
    (p,) = sd.check_file(path)
    assert (p.rule, p.episode, p.field) == ("t-increasing", 1, "steps/t")
    # check=False skips the scans of per-step values
    assert len(sd.open(path, check=False)) == 2


def test_nan_in_t(tmp_path, crafted):
    path = crafted(tmp_path / "n.h5", offsets=[0, 3, 5], t=[0.0, 1.0, 2.0, np.nan, 1.0])
    with pytest.raises(FormatError, match="t must be finite") as exc:
        sd.open(path)
    assert exc.value.episode == 1 and exc.value.rule == "t-finite"


def test_mask_of_wrong_shape(tmp_path, crafted):
    path = crafted(
        tmp_path / "mk.h5",
        offsets=[0, 5],
        t=np.arange(5.0),
        x=np.zeros((5, 3)),
        mask=np.ones((5, 2), bool),
    )
    with pytest.raises(FormatError, match=r"mask has shape \(5, 2\) but x has \(5, 3\)"):
        sd.open(path)
    path2 = crafted(
        tmp_path / "mk2.h5",
        offsets=[0, 5],
        t=np.arange(5.0),
        x=np.zeros((5, 3)),
        mask=np.ones((5, 3), np.int8),
    )
    assert rules(path2) == ["mask-dtype"]


def test_mark_out_of_range(tmp_path, crafted):
    path = crafted(
        tmp_path / "mr.h5",
        offsets=[0, 3, 5],
        t=GOOD_T,
        mark=[0, 1, 2, 3, 1],
        num_marks=3,
        attrs={"kind": "events"},
    )
    with pytest.raises(FormatError, match=r"mark = 3 at flat row 3 is outside 0..2") as exc:
        sd.open(path)
    assert exc.value.episode == 1
    nomarks = crafted(tmp_path / "nm.h5", offsets=[0, 5], t=np.arange(5.0), mark=[0] * 5)
    assert rules(nomarks) == ["num-marks"]


def test_episode_rows_and_split_range(tmp_path, crafted):
    path = crafted(
        tmp_path / "er.h5",
        offsets=[0, 3, 5],
        t=GOOD_T,
        episodes={"params": np.zeros((3, 2)), "split": np.array([0, 5], np.uint8)},
    )
    assert sorted(rules(path)) == ["episodes-rows", "split-range"]


def test_graph_edges_out_of_range(tmp_path, crafted):
    path = crafted(tmp_path / "g.h5", offsets=[0, 3, 5], t=GOOD_T)
    with h5py.File(path, "r+") as f:
        f["graphs/lanes/node_offsets"] = np.array([0, 2, 5])
        f["graphs/lanes/edge_offsets"] = np.array([0, 1, 3])
        f["graphs/lanes/nodes/pos"] = np.zeros((5, 2))
        f["graphs/lanes/edges/index"] = np.array([[0, 1], [2, 0], [1, 3]])  # 3 > episode 1's 0..2
    (p,) = sd.check_file(path)
    assert (p.rule, p.episode) == ("graph-edges", 1)
    assert "edge 1 = [1, 3] refers to a node outside the episode's 0..2" in str(p)


def test_check_file_collects_every_problem(tmp_path, crafted):
    path = crafted(
        tmp_path / "many.h5",
        offsets=[0, 3, 5],
        t=[0.0, np.nan, 2.0, 1.0, 1.0],
        x=np.zeros((5, 2)),
        mask=np.ones((5, 1), bool),
        mark=[0, 0, 9, 0, 0],
        num_marks=2,
    )
    problems = sd.check_file(path)
    assert sorted(p.rule for p in problems) == [
        "mark-range",
        "mask-shape",
        "t-finite",
        "t-increasing",
    ]
    for p in problems:
        assert str(path) in str(p) and f"[rule {p.rule}]" in str(p)


# --------------------------------------------------------- writer validation
def ep(n=5, dim=2, **extra):
    out = {"t": np.arange(n, dtype=float), "x": np.ones((n, dim))}
    out.update(extra)
    return out


def test_directory_that_does_not_exist(tmp_path):
    with pytest.raises(FileNotFoundError, match="directory .*missing.* does not exist"):
        sd.TrajectoryWriter(tmp_path / "missing" / "f.h5", kind="state", system="s")


def test_unknown_kind(tmp_path):
    with pytest.raises(UnknownNameError, match="unknown trajectory kind 'states'; did you mean"):
        sd.TrajectoryWriter(tmp_path / "f.h5", kind="states", system="s")


@pytest.mark.parametrize(
    ("episode", "message"),
    [
        ({"x": np.ones((3, 2))}, "'t' .* is required"),
        (ep(t=np.array([0.0, 1.0, 1.0, 2.0, 3.0])), r"strictly increasing.*t\[1\] = 1 is followed"),
        (ep(t=np.array([0.0, np.nan, 2, 3, 4])), r"t must be finite; t\[1\] = nan"),
        (ep(x=np.full((5, 2), np.nan)), "add a bool 'mask' field"),
        (
            ep(x=np.full((5, 2), np.nan), mask=np.ones((5, 2), bool)),
            "set mask False there",
        ),
        (ep(mask=np.ones((5, 3), bool)), r"mask must have the shape of x \(5, 2\)"),
        (ep(mask=np.ones((5, 2), np.int64)), "mask must be bool"),
        (ep(x=np.ones((4, 2))), "must have the episode's length 5"),
        (ep(mark=np.array([0, 1, 2, 3, 1])), r"mark\[3\] = 3 is out of range.*0..2"),
        (ep(mark=np.array([0, -1, 0, 0, 0])), r"mark\[1\] = -1 is out of range"),
        (ep(split=4), "split must be one of 0"),
        (ep(params=np.ones((2, 2))), "params must be a vector"),
        (ep(x=np.array(["a"] * 5)), "arrays must be numeric or bool"),
    ],
)
def test_bad_episode_is_refused(tmp_path, episode, message):
    w = sd.TrajectoryWriter(tmp_path / "f.h5", kind="state", system="s", num_marks=3)
    with pytest.raises((ValueError, TypeError), match=message):
        w.append(episode)
    w.abort()


def test_rejected_episode_leaves_the_writer_usable(tmp_path):
    path = tmp_path / "f.h5"
    with sd.TrajectoryWriter(path, kind="state", system="s", names={"x": ["a", "b"]}) as w:
        w.append(ep(5))
        with pytest.raises(ValueError, match=r"episode 1, field x: per-step shape \(3,\) differs"):
            w.append(ep(4, dim=3))
        with pytest.raises(ValueError, match=r"episode 1: step fields differ .* missing \['x'\]"):
            w.append({"t": np.arange(3.0)})
        with pytest.raises(TypeError, match="dtype complex128 does not match the file's float64"):
            w.append(ep(3, x=np.ones((3, 2), complex)))
        w.append(ep(3, x=np.ones((3, 2), np.float32)))  # same kind: cast
        assert len(w) == 2
    assert list(sd.open(path).lengths) == [5, 3]


def test_writer_config_errors(tmp_path):
    with pytest.raises(
        ValueError, match=r"names\['x'\] has 3 entries but the field's last axis has 2"
    ):
        with sd.TrajectoryWriter(
            tmp_path / "n.h5", kind="state", system="s", names={"x": ["a", "b", "c"]}
        ) as w:
            w.append(ep())
    assert not (tmp_path / "n.h5").exists()
    with pytest.raises(ValueError, match=r"names\['y'\]: no such field"):
        sd.write(tmp_path / "n.h5", [ep()], kind="state", system="s", names={"y": ["a", "b"]})
    with pytest.raises(TypeError, match="meta must be JSON-serialisable"):
        sd.TrajectoryWriter(tmp_path / "m.h5", kind="state", system="s", meta={"f": object()})
    with pytest.raises(ValueError, match="compression must be None, 'gzip' or 'lzf'"):
        sd.TrajectoryWriter(tmp_path / "m.h5", kind="state", system="s", compression="zstd")
    with pytest.raises(ValueError, match="kind='field' stores x as \\(L, \\*grid, C\\)"):
        sd.write(tmp_path / "m.h5", [ep()], kind="field", system="s")
    with pytest.raises(ValueError, match="kind='events' needs a 'mark' step field"):
        sd.write(tmp_path / "m.h5", [ep()], kind="events", system="s")
    with pytest.raises(ValueError, match="episode field 'seed' .* is missing"):
        sd.write(tmp_path / "m.h5", [ep()], kind="state", system="s", episode_fields=["seed"])
    assert not list(tmp_path.iterdir())  # nothing left behind, not even temporary files


# ----------------------------------------------------------------- atomicity
def test_exception_inside_with_keeps_the_old_file(tmp_path, state_file):
    before = state_file.read_bytes()
    with pytest.raises(RuntimeError, match="boom"):
        with sd.TrajectoryWriter(state_file, kind="state", system="new") as w:
            w.append(ep())
            raise RuntimeError("boom")
    assert state_file.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.h5"]


def test_abort_and_overwrite_false(tmp_path, state_file):
    before = state_file.read_bytes()
    w = sd.TrajectoryWriter(state_file, kind="state", system="new")
    w.append(ep())
    w.abort()
    assert state_file.read_bytes() == before
    with pytest.raises(RuntimeError, match="closed"):
        w.append(ep())
    with pytest.raises(FileExistsError, match="overwrite=False"):
        sd.TrajectoryWriter(state_file, kind="state", system="s", overwrite=False)
    sd.write(state_file, [ep()], kind="state", system="replaced")
    assert sd.open(state_file).system == "replaced"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.h5"]


_KILLED_WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    import simsci.data as sd

    w = sd.TrajectoryWriter(sys.argv[1], kind="state", system="killed", buffer_bytes=1)
    rng = np.random.default_rng(0)
    i = 0
    while True:
        w.append({"t": np.arange(200.0), "x": rng.normal(size=(200, 3))})
        i += 1
        if i == 50:
            print("writing", flush=True)
    """
)


def _kill_mid_write(path):
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "writing"
        temps = [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.tmp-")]
        assert temps and temps[0].stat().st_size > 0  # it really was mid-write
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL


def test_writer_killed_mid_file_keeps_old_file(tmp_path, state_file):
    digest = hashlib.sha256(state_file.read_bytes()).hexdigest()
    _kill_mid_write(state_file)
    assert hashlib.sha256(state_file.read_bytes()).hexdigest() == digest
    assert sd.check_file(state_file) == []
    assert sd.open(state_file).system == "demo"


def test_writer_killed_mid_file_leaves_no_file(tmp_path):
    path = tmp_path / "fresh.h5"
    _kill_mid_write(path)
    assert not path.exists()
    # only the hidden temporary file can remain, and it is never taken for data
    leftovers = [p.name for p in tmp_path.iterdir()]
    assert all(name.startswith(".fresh.h5.tmp-") for name in leftovers)


def test_scans_work_across_read_blocks(tmp_path, crafted, monkeypatch, state_file):
    """t and mark are read in blocks; problems at or across block edges are still found."""
    import simsci.data._check as check

    monkeypatch.setattr(check, "SCAN_BYTES", 16)  # two rows of t per block
    assert sd.check_file(state_file) == []  # episode starts fall on and between block edges
    t = [0.0, 1.0, 1.0, 2.0, 3.0, 4.0]  # the repeat at flat row 2 starts block 2
    path = crafted(tmp_path / "b.h5", offsets=[0, 6], t=t, mark=[0, 0, 0, 0, 0, 7], num_marks=2)
    found = {p.rule: p for p in sd.check_file(path)}
    assert set(found) == {"t-increasing", "mark-range"}
    assert "t[1] = 1.0 is followed by t[2] = 1.0" in str(found["t-increasing"])
    assert "flat row 5" in str(found["mark-range"])
