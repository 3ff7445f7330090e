"""Rule values-finite: ±inf never, NaN only where a value counts as not observed.

``inf`` in ``steps/x`` used to pass ``simsci data check`` and kill training later with a
message about ``y0`` and the solver. The checker, the writer and ``check_finite`` (which
training calls before it starts) now refuse the same values, naming file, field,
episode and step.
"""

import h5py
import numpy as np
import pytest

import simsci.data as sd
from simsci.errors import FormatError, UnknownNameError


def _poke(path, key, index, value):
    """Overwrite one stored value in place (what a buggy exporter would leave)."""
    with h5py.File(path, "r+") as f:
        f[key][index] = value
    return path


def _values_problems(path):
    return [p for p in sd.check_file(path) if p.rule == "values-finite"]


@pytest.fixture
def plain(tmp_path, rng):
    """Three state episodes (4, 5, 6 steps) without a mask, with params."""
    eps = [
        {"t": np.arange(n, dtype=float), "x": rng.normal(size=(n, 2)), "params": [1.0, 2.0]}
        for n in (4, 5, 6)
    ]
    return sd.write(tmp_path / "plain.h5", eps, kind="state", system="demo")


# ------------------------------------------------------------------------- x
@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_non_finite_x_without_mask_is_refused(plain, value):
    _poke(plain, "steps/x", (4 + 2, 1), value)  # episode 1, step 2, entry 1
    (p,) = _values_problems(plain)
    assert p.field == "steps/x" and p.episode == 1 and p.path == str(plain)
    text = str(p)
    assert str(plain) in text and "field steps/x" in text and "episode 1" in text
    assert f"x[2, 1] = {value}" in text and "at step 2 (flat row 6)" in text
    assert "1 value(s) at 1 step(s) in 1 episode(s)" in text
    assert "[rule values-finite]" in text
    if np.isnan(value):
        assert "add a bool 'mask' field" in text  # the fix for a missing value
    else:
        assert "must not hold ±inf" in text


def test_nan_and_inf_against_the_mask(tmp_path, state_episodes):
    """NaN where mask is False is a missing value; NaN where True, and inf anywhere, not."""
    path = sd.write(tmp_path / "m.h5", state_episodes, kind="state", system="demo")
    assert sd.check_file(path) == []  # the fixture has NaN wherever mask is False
    with h5py.File(path) as f:
        mask, off = f["steps/mask"][()], f["episodes/offsets"][()]
    hidden = tuple(int(i) for i in np.argwhere(~mask)[0])
    shown = tuple(int(i) for i in np.argwhere(mask)[-1])
    _poke(path, "steps/x", shown, np.nan)
    (p,) = _values_problems(path)
    ep = int(np.searchsorted(off, shown[0], side="right") - 1)
    assert p.episode == ep and f"at step {shown[0] - off[ep]} " in str(p)
    assert "x must be finite where mask is True" in str(p) and "set mask False" in str(p)
    _poke(path, "steps/x", shown, 1.0)
    _poke(path, "steps/x", hidden, np.inf)  # inf is never a missing value, mask or not
    (p,) = _values_problems(path)
    assert "= inf" in str(p) and "must not hold ±inf" in str(p)


def test_counts_and_first_across_scan_blocks(plain, monkeypatch):
    """The scan reads blocks (here one row each): the first bad entry and the counts
    are found across them."""
    import simsci.data._finite as finite

    monkeypatch.setattr(finite, "SCAN_BYTES", 16)  # one row of x (2 float64) per block
    _poke(plain, "steps/x", (14, 0), np.inf)  # episode 2, step 5
    _poke(plain, "steps/x", (6, 1), -np.inf)  # episode 1, step 2: the first
    _poke(plain, "steps/x", (6, 0), np.nan)
    (p,) = _values_problems(plain)
    assert p.episode == 1 and "x[2, 0] = nan at step 2 (flat row 6)" in str(p)
    assert "3 value(s) at 2 step(s) in 2 episode(s)" in str(p)


# --------------------------------------------------------- other value fields
def test_inf_in_an_episode_field(plain):
    _poke(plain, "episodes/params", (2, 1), -np.inf)
    (p,) = _values_problems(plain)
    assert p.field == "episodes/params" and p.episode == 2
    assert "params[1] = -inf" in str(p) and "drop those episodes" in str(p)


def test_rollout_fill_values_pass_and_inf_does_not(tmp_path):
    """The last row of a rollout holds NaN fill values; inf is refused anywhere."""
    rows = {
        "t": np.arange(4, dtype=float),
        "x": np.zeros((4, 2), np.float32),
        "action": np.array([[0.1], [0.2], [0.3], [np.nan]], np.float32),
        "reward": np.array([1.0, 1.0, 1.0, np.nan], np.float32),
        "terminated": np.array([False, False, True, False]),
        "truncated": np.zeros(4, bool),
    }
    path = sd.write(tmp_path / "r.h5", [rows, rows], kind="rollout", system="toy-v0")
    assert sd.check_file(path) == []
    sd.check_finite(path)  # NaN fill values are not refused by training either
    _poke(path, "steps/reward", 5, np.inf)
    (p,) = _values_problems(path)
    assert p.field == "steps/reward" and p.episode == 1 and "reward[1] = inf at step 1" in str(p)


def _scene_episode(rng, agents, history=3):
    L, F = 3, 2
    a = rng.normal(size=(L, agents, history, F)).astype(np.float32)
    hv = np.ones((L, agents, history), bool)
    hv[:, :, 0] = False  # the oldest frame is unknown: NaN there
    a[:, :, 0] = np.nan
    return {
        "t": np.arange(L, dtype=float),
        "agents": a,
        "agents_valid": np.ones((L, agents), bool),
        "agents_history_valid": hv,
    }


def test_agents_padding_and_unknown_frames_pass(tmp_path, rng):
    eps = [_scene_episode(rng, 2), _scene_episode(rng, 4)]  # the first is padded to 4
    path = sd.write(tmp_path / "s.h5", eps, kind="scene", system="toy")
    assert sd.check_file(path) == []
    _poke(path, "steps/agents", (4, 1, 2, 0), np.nan)  # a known frame of a valid agent
    (p,) = _values_problems(path)
    assert p.field == "steps/agents" and p.episode == 1
    assert "agents[1, 1, 2, 0] = nan at step 1" in str(p) and "agents_valid" in str(p)
    _poke(path, "steps/agents", (4, 1, 2, 0), 0.0)
    _poke(path, "steps/agents", (0, 3, 1, 1), np.inf)  # padding may be NaN, never inf
    (p,) = _values_problems(path)
    assert p.episode == 0 and "must not hold ±inf" in str(p)


# ---------------------------------------------------------------- the writer
@pytest.mark.parametrize(
    ("episode", "message"),
    [
        (
            {"x": np.array([[np.inf], [1.0]]), "mask": np.array([[False], [True]])},
            "field x: x is inf at index \\(0, 0\\).*must not hold ±inf",
        ),
        ({"x": np.ones((2, 1)), "params": [1.0, np.inf]}, "field params: params is inf"),
        ({"x": np.ones((2, 1)), "reward": [1.0, -np.inf]}, "field reward: reward is -inf"),
    ],
)
def test_writer_refuses_what_the_checker_refuses(tmp_path, episode, message):
    with pytest.raises(ValueError, match=message):
        sd.write(tmp_path / "w.h5", [{"t": [0.0, 1.0], **episode}], kind="state", system="x")
    assert not (tmp_path / "w.h5").exists()


def test_writer_refuses_nan_in_a_known_agent_frame(tmp_path, rng):
    ep = _scene_episode(rng, 2)
    ep["agents"][1, 0, 1, 0] = np.nan
    with pytest.raises(ValueError, match=r"agents is nan at index \(1, 0, 1, 0\)"):
        sd.write(tmp_path / "w.h5", [ep], kind="scene", system="toy")


# ------------------------------------------------------------ check_finite
def test_check_finite_raises_the_checkers_message(plain):
    assert sd.check_finite(plain) is None  # a clean file passes
    _poke(plain, "steps/x", (9, 0), np.inf)
    (expected,) = _values_problems(plain)
    with pytest.raises(FormatError) as info:
        sd.check_finite(plain)
    assert str(info.value) == str(expected) and info.value.rule == "values-finite"
    with pytest.raises(FormatError, match="values-finite"):
        sd.check_finite(sd.open(plain), fields=("t", "x"))  # an opened dataset too
    sd.check_finite(plain, fields=("t", "params"))  # only the fields a model reads
    with pytest.raises(UnknownNameError, match="did you mean 'x'"):
        sd.check_finite(plain, fields=("t", "xx"))


def test_check_finite_on_shards_and_on_t(tmp_path, crafted):
    d = tmp_path / "runs"
    d.mkdir()
    for rank in range(2):
        sd.write(
            sd.shard_path(d, rank),
            [{"t": [0.0, 1.0], "x": [[1.0], [2.0]]}],
            kind="state",
            system="toy",
        )
    sd.check_finite(d)
    _poke(sd.shard_path(d, 1), "steps/x", (1, 0), -np.inf)
    with pytest.raises(FormatError, match="part-00001.h5, field steps/x, episode 0"):
        sd.check_finite(d)
    bad_t = crafted(tmp_path / "t.h5", offsets=[0, 3], t=[0.0, np.nan, 2.0], x=np.zeros((3, 1)))
    with pytest.raises(FormatError, match="t-finite"):
        sd.check_finite(bad_t, fields=("t", "x"))
    sd.check_finite(bad_t, fields=("x",))
    with pytest.raises(FileNotFoundError):
        sd.check_finite(tmp_path / "missing.h5")


def test_open_leaves_the_value_scan_to_check_file(plain):
    """open(check=True) does not read every value (that is check_file / check_finite)."""
    _poke(plain, "steps/x", (0, 0), np.inf)
    assert len(sd.open(plain)) == 3
