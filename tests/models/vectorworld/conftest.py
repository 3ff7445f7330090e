"""Fixtures shared by VectorWorld's test modules."""

import pytest

from simsci import data as sdata
from simsci.driving import make_scenes, read_scene


@pytest.fixture(scope="session")
def scene_file(tmp_path_factory):
    """``scene_file(roads, drive_length, route_length, episodes_per_road)``: a scene file
    of the driving world made with those settings and its episodes, ``(path,
    episodes)``. Read-only for the tests."""

    def make(roads, drive_length, route_length, episodes_per_road):
        path = tmp_path_factory.mktemp("vectorworld_scene") / "scenes.h5"
        make_scenes(
            roads, out=path, drive_length=drive_length, route_length=route_length,
            episodes_per_road=episodes_per_road,
        )  # fmt: skip
        ds = sdata.open(path)
        episodes = [read_scene(ds, i) for i in range(len(ds))]
        ds.close()
        return path, episodes

    return make


@pytest.fixture(scope="session")
def small_scene(scene_file):
    """A small scene file (2 roads, 2 drives of 150 m each) and its episodes, shared by
    the modules that need one (one per xdist worker)."""
    return scene_file(2, 150.0, 800.0, 2)


@pytest.fixture
def train_tiny(tmp_path):
    """``train_tiny(path, lane_repr, count_pins=False)``: a tiny tile generator trained 3
    steps on the scene file ``path`` (its summary checked), loaded from its last
    checkpoint."""
    import dataclasses

    import numpy as np
    import torch

    from simsci.models.vectorworld._outpaint import TileGenerator, train_tile_generator
    from simsci.models.vectorworld._tokens import GENERATOR_LAYOUT
    from simsci.train import load_model

    def train(path, lane_repr, count_pins=False):
        torch.manual_seed(0)
        layout = dataclasses.replace(GENERATOR_LAYOUT, count_pins=count_pins).to_dict()
        summary = train_tile_generator(
            path, tmp_path / "run", steps=3, batch_size=4, val_every=3, max_val_items=8,
            warmup_steps=1, resume=False,
            model_args=dict(width=16, depth=1, heads=2, freq_dim=8, mlp_ratio=2.0,
                            lane_repr=lane_repr, layout=layout),
        )  # fmt: skip
        assert summary["steps"] == 3 and np.isfinite(summary["last_val"]["val_lane_rmse_m"])
        model = load_model(tmp_path / "run" / "checkpoints" / "last.pt")
        assert isinstance(model, TileGenerator) and model.layout.lane_repr == lane_repr
        return model

    return train
