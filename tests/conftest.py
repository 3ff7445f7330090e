"""Shared fixtures.

``device`` is CPU by default; ``SIMSCI_TEST_DEVICE=cuda`` (set by ``make gpu-check``) runs
every test that takes it on that device instead. Tests that take ``device`` are marked
``device`` automatically so gpu-check can select them.
"""

import os

# One intra-op thread for the tests (and the subprocesses they start): the suite is many
# small tensor ops, where a second OpenMP thread buys nothing and, on a 2-core machine
# with any other load, makes each op wait for a busy core (seen: 30-60x slower). Set
# before torch is imported so torch reads it. Benchmarks choose their own threads.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Models built on the fly and cached (VectorWorld's small default) go to one scratch
# cache per run, shared with the subprocesses the tests start: built once, never in the
# user's ~/.cache.
if "SIMSCI_CACHE" not in os.environ:
    import tempfile

    os.environ["SIMSCI_CACHE"] = tempfile.mkdtemp(prefix="simsci-test-cache-")

import pytest  # noqa: E402
import torch  # noqa: E402


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
