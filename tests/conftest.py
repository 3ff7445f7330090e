"""Shared fixtures.

``device`` is CPU by default; ``SIMSCI_TEST_DEVICE=cuda`` (set by ``make gpu-check``) runs
every test that takes it on that device instead. Tests that take ``device`` are marked
``device`` automatically so gpu-check can select them.

The suite runs in parallel (``make test``: pytest-xdist, ``-n 2``). The controller
process imports this file first and sets the environment below; the worker processes
(and the subprocesses tests start) inherit it, so they share one scratch cache.
"""

import os

# One intra-op thread for the tests (and the subprocesses they start): the suite is many
# small tensor ops, where a second OpenMP thread buys nothing and, on a 2-core machine
# with any other load, makes each op wait for a busy core (seen: 30-60x slower). Set
# before torch is imported so torch reads it. Benchmarks choose their own threads.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Models built on the fly and cached (VectorWorld's small default) go to one scratch
# cache per run, shared with the xdist workers and the subprocesses the tests start:
# built once, never in the user's ~/.cache. Made here, at import, in the first process
# (pytest alone, or xdist's controller, which starts its workers later with this
# environment); removed by that process at the end of the run.
_OWN_CACHE = None
if "SIMSCI_CACHE" not in os.environ:
    import tempfile

    _OWN_CACHE = tempfile.mkdtemp(prefix="simsci-test-cache-")
    os.environ["SIMSCI_CACHE"] = _OWN_CACHE

import shutil  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_unconfigure(config):
    # the process that made the cache (never an xdist worker) removes it
    if _OWN_CACHE is not None and not os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


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


@pytest.fixture(scope="session")
def series(tmp_path_factory):
    """8 lorenz63 episodes of 11 steps (6 train): a tiny file for training faults and
    reproducibility (read only)."""
    from simsci import systems

    path = tmp_path_factory.mktemp("series") / "lorenz.h5"
    systems.generate("lorenz63", 8, t_end=1.0, dt=0.1, out=path, seed=0, progress=False)
    return path


@pytest.fixture(scope="session")
def events(tmp_path_factory):
    """12 Hawkes sequences: a tiny events file (read only)."""
    from simsci import datasets

    path = tmp_path_factory.mktemp("events") / "hawkes.h5"
    datasets.make_dataset("hawkes", n=12, out=path, seed=0, progress=False)
    return path
