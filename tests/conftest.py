"""Shared fixtures.

``device`` is CPU by default; ``SIMSCI_TEST_DEVICE=cuda`` (set by ``make gpu-check``) runs
every test that takes it on that device instead. Tests that take ``device`` are marked
``device`` automatically so gpu-check can select them.
"""

import os

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "device" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.device)


@pytest.fixture
def device() -> torch.device:
    name = os.environ.get("SIMSCI_TEST_DEVICE", "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        pytest.skip("SIMSCI_TEST_DEVICE=cuda but torch sees no CUDA device")
    return dev


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
