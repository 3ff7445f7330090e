"""``process.batch(...)`` (SequenceBatch): the vectorised intensities and log-likelihoods
of many padded sequences equal the per-sequence methods on every process kind; events
appended in place give the state a rebuilt batch has; bad input is refused."""

import numpy as np
import pytest

from simsci.datasets import default_hawkes_params, default_self_correcting_params
from simsci.processes import (
    HawkesProcess,
    MobilityProcess,
    PointProcess,
    PoissonProcess,
    PopulationCoupledProcess,
    SelfCorrectingProcess,
)

PROCS = {
    "poisson": PoissonProcess([1.0, 0.5]),
    "poisson_periodic": PoissonProcess(
        [1.0, 2.0], amplitude=[0.9, -0.5], period=3.0, phase=[0.0, 1.0]
    ),
    "hawkes1": HawkesProcess(0.5, 0.6, 2.0),
    "hawkes5": HawkesProcess(**default_hawkes_params(5)),
    "self_correcting": SelfCorrectingProcess(),
    "self_correcting3": SelfCorrectingProcess(**default_self_correcting_params(3)),
    "population": PopulationCoupledProcess(),
    "mobility": MobilityProcess(),
}
#: per kind: (t_start, t_end) of the sampled windows
WINDOWS = {"population": (100.0, 172.0), "mobility": (0.0, 72.0)}


def _sample(name, n=7, seed=0):
    """n sequences with their windows; one of them cut to a single event, one to none
    (the padding of a batch must not leak into the others)."""
    proc = PROCS[name]
    t0, t1 = WINDOWS.get(name, (0.0, 12.0))
    seqs = proc.sample(n, t_start=t0, t_end=t1, seed=seed)
    seqs[1] = {**seqs[1], "t": seqs[1]["t"][:1], "mark": seqs[1]["mark"][:1]}
    seqs[2] = {**seqs[2], "t": seqs[2]["t"][:0], "mark": seqs[2]["mark"][:0]}
    return proc, seqs, t0, t1


def _pad(seqs, junk=-7.0):
    """(B, L) arrays; the padding holds junk (the batch must ignore it)."""
    L = max(len(s["t"]) for s in seqs)
    t = np.full((len(seqs), L), junk)
    m = np.full((len(seqs), L), 0)
    for b, s in enumerate(seqs):
        t[b, : len(s["t"])] = s["t"]
        m[b, : len(s["t"])] = s["mark"]
    n = np.array([len(s["t"]) for s in seqs])
    params = np.stack([s["params"] for s in seqs]) if "params" in seqs[0] else None
    return t, m, n, params


def _params(s):
    return s.get("params")


@pytest.mark.parametrize("name", sorted(PROCS))
def test_batch_log_likelihood_equals_the_per_sequence_loop(name):
    proc, seqs, t0, t1 = _sample(name)
    t, m, n, params = _pad(seqs)
    batch = proc.batch(t, m, n, params)
    # the harness's convention (first event given, up to each window's end) ...
    starts = np.array([s["t"][0] if len(s["t"]) else t0 for s in seqs])
    got = batch.log_likelihood(t_start=starts, t_end=t1)
    loop = [
        proc.log_likelihood(s["t"], s["mark"], t_start=a, t_end=t1, params=_params(s))
        for s, a in zip(seqs, starts)
    ]
    np.testing.assert_allclose(got, loop, rtol=1e-12, atol=1e-12)
    # ... and a window that starts inside the sequences (history events before it)
    mid = t0 + 0.4 * (t1 - t0)
    got = batch.log_likelihood(t_start=mid, t_end=t1 + 1.0)
    loop = [
        proc.log_likelihood(s["t"], s["mark"], t_start=mid, t_end=t1 + 1.0, params=_params(s))
        for s in seqs
    ]
    np.testing.assert_allclose(got, loop, rtol=1e-12, atol=1e-12)
    assert len(seqs[0]["t"]) > 3  # something was scored


@pytest.mark.parametrize("name", sorted(PROCS))
def test_batch_intensity_equals_the_per_sequence_loop(name):
    proc, seqs, t0, t1 = _sample(name)
    t, m, n, params = _pad(seqs)
    batch = proc.batch(t, m, n, params)
    rng = np.random.default_rng(1)
    rows, queries, counts = [], [], []
    for b, s in enumerate(seqs):
        # random times, the events themselves (left limits), before the first event
        q = np.concatenate([rng.uniform(t0 - 1.0, t1 + 1.0, 9), s["t"], [t0 - 2.0]])
        c = rng.integers(0, len(s["t"]) + 1, len(q))  # histories cut at random counts
        rows.append(np.full(len(q), b))
        queries.append(q)
        counts.append(c)
    rows, queries, counts = map(np.concatenate, (rows, queries, counts))
    got = batch.intensity(queries, rows, counts)
    want = np.stack([
        proc.intensity(q, seqs[b]["t"][:c], seqs[b]["mark"][:c], params=_params(seqs[b]))[0]
        for q, b, c in zip(queries, rows, counts)
    ])  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    # every event by default
    got = batch.intensity(queries, rows)
    want = np.stack([
        proc.intensity(q, seqs[b]["t"], seqs[b]["mark"], params=_params(seqs[b]))[0]
        for q, b in zip(queries, rows)
    ])  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("name", ["hawkes5", "self_correcting3", "population", "mobility"])
def test_appended_events_give_the_state_of_a_rebuilt_batch(name):
    """Grow sequences event by event (as thinning does, overwriting a rejected
    candidate): the intensities equal those of a batch built from the grown sequences,
    to the last bit."""
    proc, seqs, t0, t1 = _sample(name)
    starts = [s["t"][:2] for s in seqs]
    heads = [{**s, "t": s["t"][:2], "mark": s["mark"][:2]} for s in seqs]
    batch = proc.batch(*_pad(heads))
    rng = np.random.default_rng(2)
    for step in range(12):  # past the initial width: the arrays grow
        rows = np.flatnonzero(rng.random(len(seqs)) < 0.7)
        last = batch.times[rows, np.maximum(batch.lengths[rows] - 1, 0)]
        last = np.where(batch.lengths[rows] > 0, last, t0)
        new_t = last + rng.exponential(0.5, len(rows))
        new_m = rng.integers(0, proc.num_marks, len(rows))
        if step % 3 == 2:  # a rejected candidate first, then the accepted one
            batch.append(rows, new_t + 0.1, new_m)
            batch.append(rows, new_t, new_m, at=batch.lengths[rows] - 1)
        else:
            batch.append(rows, new_t, new_m)
        for i, b in enumerate(rows):
            starts[b] = np.append(starts[b], new_t[i])
            heads[b] = {**heads[b], "t": starts[b], "mark": np.append(heads[b]["mark"], new_m[i])}
    fresh = proc.batch(*_pad(heads))
    q = rng.uniform(t0, t1 + 10.0, 50)
    rows = rng.integers(0, len(seqs), 50)
    np.testing.assert_array_equal(batch.intensity(q, rows), fresh.intensity(q, rows))
    np.testing.assert_array_equal(batch.lengths, fresh.lengths)


def test_the_base_class_fallback_loops(monkeypatch):
    """A process without vectorised hooks is served by the base class's loop."""
    proc, seqs, t0, t1 = _sample("hawkes1")
    t, m, n, _ = _pad(seqs)
    fast = proc.batch(t, m, n)
    for hook in ("_batch_prepare", "_batch_intensity", "_batch_log_likelihood", "_batch_update"):
        monkeypatch.setattr(HawkesProcess, hook, getattr(PointProcess, hook))
    slow = proc.batch(t, m, n)
    assert slow.state is None
    q = np.linspace(t0, t1, 20)
    rows = np.arange(20) % len(seqs)
    np.testing.assert_allclose(slow.intensity(q, rows), fast.intensity(q, rows), rtol=1e-12)
    np.testing.assert_allclose(
        slow.log_likelihood(t_start=t0, t_end=t1),
        fast.log_likelihood(t_start=t0, t_end=t1),
        rtol=1e-12,
    )


def test_batch_bad_input():
    hawkes = PROCS["hawkes1"]
    t = np.array([[0.5, 1.0, 2.0], [0.3, 0.2, 0.0]])
    m = np.zeros((2, 3), dtype=np.int64)
    with pytest.raises(ValueError, match=r"row 1: event times must be strictly increasing"):
        hawkes.batch(t, m, [3, 2])
    hawkes.batch(t, m, [3, 1])  # the rest of row 1 is padding: fine
    with pytest.raises(ValueError, match="must be \\(B, L\\) of one shape"):
        hawkes.batch(t, m[:, :2])
    with pytest.raises(ValueError, match="lengths must be 2 integers in 0..3"):
        hawkes.batch(t, m, [4, 1])
    with pytest.raises(ValueError, match="marks must be integers in 0..0"):
        hawkes.batch(t, m + 1, [3, 1])
    with pytest.raises(ValueError, match="draws no per-sequence parameters"):
        hawkes.batch(t, m, [3, 1], params=np.zeros((2, 1)))
    with pytest.raises(ValueError, match="params=\\(group, m_0..m_1\\)"):
        PROCS["population"].batch(t, m, [3, 1])
    batch = hawkes.batch(t, m, [3, 1])
    with pytest.raises(ValueError, match="row 0: t_end = 1.5 precedes its last event"):
        batch.log_likelihood(t_start=0.0, t_end=1.5)
    with pytest.raises(ValueError, match="rows must lie in 0..1"):
        batch.intensity([1.0], [2])
    with pytest.raises(ValueError, match="row 1: the new time 0.1 must be finite and after"):
        batch.append([1], [0.1], [0])
    with pytest.raises(ValueError, match="rows must be distinct"):
        batch.append([1, 1], [0.5, 0.6], [0, 0])
