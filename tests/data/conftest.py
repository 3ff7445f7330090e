"""Episode factories and a raw-file crafter for the simsci.data tests."""

import json

import h5py
import numpy as np
import pytest


def _times(rng, length):
    return np.cumsum(rng.uniform(0.05, 0.5, size=length)) + rng.uniform(0, 3)


def make_state(rng, lengths, *, dim=3, nan_frac=0.2, splits=True):
    """State episodes with a mask (NaN where unobserved), params and splits."""
    eps = []
    for i, n in enumerate(lengths):
        x = rng.normal(size=(n, dim)) * np.arange(1, dim + 1) + 5.0
        mask = rng.random((n, dim)) > nan_frac
        x[~mask] = np.nan
        ep = {"t": _times(rng, n), "x": x, "mask": mask, "params": rng.uniform(1, 2, size=2)}
        if splits:
            ep["split"] = i % 3
        eps.append(ep)
    return eps


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def state_episodes(rng):
    return make_state(rng, [5, 12, 1, 8, 20, 3, 9])


@pytest.fixture
def state_file(tmp_path, state_episodes):
    import simsci.data as sd

    return sd.write(
        tmp_path / "state.h5",
        state_episodes,
        kind="state",
        system="demo",
        names={"x": ["a", "b", "c"], "params": ["alpha", "beta"]},
        units={"x": "m"},
        meta={"seed": 7},
    )


def craft(
    path,
    *,
    offsets,
    t,
    x=None,
    mask=None,
    mark=None,
    num_marks=None,
    attrs=None,
    drop_attrs=(),
    episodes=None,
):
    """Write a file directly with h5py (to make corrupt files the writer would refuse)."""
    root = {
        "format": "simsci.trajectories",
        "format_version": 1,
        "kind": "state",
        "system": "crafted",
        "meta": json.dumps({"simsci_version": "0.1.0"}),
    }
    root.update(attrs or {})
    with h5py.File(path, "w") as f:
        for k, v in root.items():
            if k not in drop_attrs:
                f.attrs[k] = v
        f["episodes/offsets"] = np.asarray(offsets, np.int64)
        f["steps/t"] = np.asarray(t, np.float64)
        if x is not None:
            f["steps/x"] = x
        if mask is not None:
            f["steps/mask"] = mask
        if mark is not None:
            f["steps/mark"] = np.asarray(mark, np.int64)
            if num_marks is not None:
                f["steps/mark"].attrs["num_marks"] = num_marks
        for k, v in (episodes or {}).items():
            f[f"episodes/{k}"] = v
    return path


@pytest.fixture
def crafted():
    """The ``craft`` function: write a raw (possibly corrupt) file with h5py."""
    return craft


@pytest.fixture
def state_factory():
    """The ``make_state`` function: (rng, lengths, ...) -> list of state episodes."""
    return make_state
