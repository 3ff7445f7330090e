"""Fixtures shared by VectorWorld's test modules."""

import pytest

from simsci import data as sdata
from simsci.driving import make_scenes, read_scene


@pytest.fixture(scope="session")
def small_scene(tmp_path_factory):
    """A small scene file of the driving world (2 roads, 2 drives of 150 m each) and its
    episodes: ``(path, episodes)``. Read-only for the tests (one per xdist worker)."""
    path = tmp_path_factory.mktemp("vectorworld_scene") / "scenes.h5"
    make_scenes(2, out=path, drive_length=150.0, route_length=800.0, episodes_per_road=2)
    ds = sdata.open(path)
    episodes = [read_scene(ds, i) for i in range(len(ds))]
    ds.close()
    return path, episodes
