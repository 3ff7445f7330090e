"""The exact point processes (Poisson, Hawkes, self-correcting) and their dataset builders:
time rescaling, likelihood against quadrature, left limits, rates, MLE sanity, seeds, bad
input, and the kind="events" files."""

import time

import numpy as np
import pytest
from scipy import integrate, stats

import simsci.data
import simsci.datasets as datasets
from simsci.datasets import default_hawkes_params, default_self_correcting_params
from simsci.processes import (
    PROCESSES,
    HawkesProcess,
    PoissonProcess,
    SelfCorrectingProcess,
    get_process,
    process_from_config,
)

HAWKES2 = {"mu": [0.4, 0.3], "alpha": [[0.3, 0.2], [0.4, 0.1]], "beta": [[1.0, 2.0], [3.0, 1.5]]}


def _processes():
    return {
        "poisson": PoissonProcess([1.0, 0.5]),
        "poisson_periodic": PoissonProcess(
            [1.0, 2.0], amplitude=[0.9, -0.5], period=3.0, phase=[0.0, 1.0]
        ),
        "hawkes1": HawkesProcess(0.5, 0.6, 2.0),
        "hawkes2": HawkesProcess(**HAWKES2),
        "hawkes5": HawkesProcess(**default_hawkes_params(5)),
        "self_correcting": SelfCorrectingProcess(),
        "self_correcting3": SelfCorrectingProcess(**default_self_correcting_params(3)),
    }


PROCS = _processes()


def _rescaled_gaps(process, seqs):
    """Compensator increments between consecutive events: of the pooled process, and of
    each mark between the events of that mark (the first from t_start = 0)."""
    pooled, per_mark = [], [[] for _ in range(process.num_marks)]
    for s in seqs:
        C = process.compensator(s["t"], s["t"], s["mark"], t_start=0.0)  # (L, K)
        pooled.append(np.diff(C.sum(axis=1), prepend=0.0))
        for k in range(process.num_marks):
            per_mark[k].append(np.diff(C[s["mark"] == k, k], prepend=0.0))
    return np.concatenate(pooled), [np.concatenate(g) for g in per_mark]


# ---------------------------------------------------------------- time rescaling
@pytest.mark.parametrize("key", sorted(PROCS))
def test_time_rescaling_gives_unit_exponential_gaps(key):
    # A few long sequences: gaps pooled from many short windows are biased short (the
    # censored last gap is dropped), an O(1 / events per sequence) effect.
    process = PROCS[key]
    t_end = 3000.0 / process.mean_rate().sum()
    seqs = process.sample(3, t_end=t_end, seed=11)
    pooled, per_mark = _rescaled_gaps(process, seqs)
    assert len(pooled) > 5000
    assert stats.kstest(pooled, "expon").pvalue > 1e-3
    for gaps in per_mark:
        assert len(gaps) > 300
        assert stats.kstest(gaps, "expon").pvalue > 1e-3


def test_time_rescaling_detects_a_wrong_model():
    truth, wrong = PROCS["hawkes2"], HawkesProcess(**{**HAWKES2, "mu": [0.6, 0.2]})
    seqs = truth.sample(3, t_end=3000.0, seed=2)
    pooled, per_mark = _rescaled_gaps(wrong, seqs)
    assert min(stats.kstest(g, "expon").pvalue for g in per_mark) < 1e-6


# ---------------------------------------------------------------- likelihood
def _quadrature_ll(process, t, m, t_start, t_end):
    scored = t > t_start
    lam = process.intensity(t[scored], t, m)[np.arange(scored.sum()), m[scored]]
    pts = np.concatenate([[t_start], t[scored], [t_end]])
    total = sum(
        integrate.quad(
            lambda x: process.intensity(x, t, m).sum(), a, b, epsabs=1e-12, epsrel=1e-12
        )[0]
        for a, b in zip(pts[:-1], pts[1:])
    )
    return np.log(lam).sum() - total


@pytest.mark.parametrize("key", sorted(PROCS))
def test_log_likelihood_equals_quadrature(key):
    process = PROCS[key]
    t_end = 25.0 / process.mean_rate().sum()
    s = process.sample(1, t_end=t_end, seed=5)[0]
    t, m = s["t"], s["mark"]
    assert len(t) >= 5
    for t_start in (0.0, float(t[len(t) // 2])):  # no history / half the events history
        ll = process.log_likelihood(t, m, t_start=t_start, t_end=t_end)
        assert ll == pytest.approx(_quadrature_ll(process, t, m, t_start, t_end), abs=1e-8)
    # the scoring convention: first event given, window [t_0, t_L]
    ll = process.log_likelihood(t, m, t_start=t[0], t_end=t[-1])
    assert ll == pytest.approx(_quadrature_ll(process, t, m, t[0], t[-1]), abs=1e-8)


def test_log_likelihood_of_no_events_is_minus_the_compensator():
    p = PROCS["hawkes2"]
    ll = p.log_likelihood([], np.zeros(0, np.int64), t_start=1.0, t_end=3.0)
    assert ll == pytest.approx(-2.0 * sum(HAWKES2["mu"]))
    # history only: the decaying excitation still counts
    ll_h = p.log_likelihood([0.5], [0], t_start=1.0, t_end=3.0)
    assert ll_h == pytest.approx(_quadrature_ll(p, np.array([0.5]), np.array([0]), 1.0, 3.0))
    assert ll_h < ll


def test_compensator_is_the_integral_of_the_intensity_per_mark():
    p = PROCS["hawkes5"]
    s = p.sample(1, t_end=6.0, seed=3)[0]
    t, m = s["t"], s["mark"]
    q = np.array([0.0, 1.3, t[3], 6.0])
    C = p.compensator(q, t, m, t_start=0.0)
    for k in range(5):
        want = [
            integrate.quad(lambda x, k=k: p.intensity(x, t, m)[0, k], 0.0, b, points=t, limit=500)[
                0
            ]
            for b in q
        ]
        np.testing.assert_allclose(C[:, k], want, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- intensity
@pytest.mark.parametrize("key", ["hawkes2", "self_correcting3", "poisson_periodic"])
def test_intensity_is_the_left_limit(key):
    process = PROCS[key]
    s = process.sample(1, t_end=20.0, seed=4)[0]
    t, m = s["t"], s["mark"]
    at = process.intensity(t, t, m)
    eps = 1e-9
    np.testing.assert_allclose(process.intensity(t - eps, t, m), at, rtol=1e-6)
    # only the events strictly before a query matter
    j = len(t) // 2
    np.testing.assert_array_equal(process.intensity(t[j], t[: j + 1], m[: j + 1]), at[j : j + 1])
    np.testing.assert_array_equal(process.intensity(t[j], t[:j], m[:j]), at[j : j + 1])
    after = process.intensity(t + eps, t, m)
    if key == "hawkes2":  # an event raises the intensities (alpha > 0), by alpha * beta
        jump = np.asarray(HAWKES2["alpha"]) * np.asarray(HAWKES2["beta"])
        np.testing.assert_allclose(after - at, jump[:, m].T, rtol=1e-6, atol=1e-6)
    elif key == "self_correcting3":  # and lowers them here, by the factor exp(-alpha)
        ratio = np.exp(-process.alpha[:, m].T)
        np.testing.assert_allclose(after / at, ratio, rtol=1e-6)
    assert at.shape == (len(t), process.num_marks)


def test_intensity_before_any_event_is_the_baseline():
    h = PROCS["hawkes2"]
    np.testing.assert_allclose(h.intensity([0.0, 1.0], [2.0], [1]), [HAWKES2["mu"]] * 2)
    sc = SelfCorrectingProcess(0.5, 2.0)
    np.testing.assert_allclose(sc.intensity(3.0, [], np.zeros(0, int)), [[np.exp(1.5)]])


# ---------------------------------------------------------------- rates
def test_homogeneous_poisson_mean_count():
    p = PoissonProcess([1.5, 0.5])
    seqs = p.sample(2000, t_end=20.0, seed=0)
    counts = np.array([np.bincount(s["mark"], minlength=2) for s in seqs])
    want = np.array([30.0, 10.0])
    assert np.all(np.abs(counts.mean(0) - want) < 4 * np.sqrt(want / 2000))
    np.testing.assert_allclose(counts.var(0), want, rtol=0.15)  # Poisson: variance = mean
    t = np.concatenate([s["t"] for s in seqs])
    assert t.min() > 0.0 and t.max() <= 20.0
    assert stats.kstest(t / 20.0, "uniform").pvalue > 1e-3


def test_periodic_poisson_mean_count_follows_the_compensator():
    p = PROCS["poisson_periodic"]
    seqs = p.sample(2000, t_end=4.0, seed=1)
    counts = np.array([np.bincount(s["mark"], minlength=2) for s in seqs]).mean(0)
    want = p.compensator([4.0], [], np.zeros(0, int))[0]
    assert np.all(np.abs(counts - want) < 4 * np.sqrt(want / 2000))


def test_hawkes_stationary_rate():
    h = PROCS["hawkes2"]
    want = np.linalg.solve(np.eye(2) - np.asarray(HAWKES2["alpha"]), HAWKES2["mu"])
    np.testing.assert_allclose(h.mean_rate(), want)
    burn, t_end = 50.0, 2050.0
    seqs = h.sample(20, t_end=t_end, seed=7)
    counts = sum(np.bincount(s["mark"][s["t"] > burn], minlength=2) for s in seqs)
    np.testing.assert_allclose(counts / (20 * (t_end - burn)), want, rtol=0.05)


def test_self_correcting_long_run_rate():
    sc = PROCS["self_correcting3"]
    seqs = sc.sample(5, t_end=400.0, seed=7)
    counts = sum(np.bincount(s["mark"][s["t"] > 20.0], minlength=3) for s in seqs)
    np.testing.assert_allclose(counts / (5 * 380.0), sc.mean_rate(), rtol=0.03)
    # the classic K = 1 process is far more regular than a Poisson process
    gaps = np.diff(SelfCorrectingProcess().sample(1, t_end=2000.0, seed=1)[0]["t"])
    assert gaps.mean() == pytest.approx(1.0, rel=0.05) and gaps.std() < 0.85


# ---------------------------------------------------------------- MLE sanity
@pytest.mark.parametrize(
    "key, perturbed",
    [
        (
            "poisson_periodic",
            {"amplitude": [0.5, -0.5], "phase": [0.0, 1.0], "rate": [1.0, 2.0], "period": 3.0},
        ),
        (
            "poisson_periodic",
            {"amplitude": [0.9, -0.5], "phase": [0.0, 1.0], "rate": [1.2, 2.0], "period": 3.0},
        ),
        ("hawkes2", {**HAWKES2, "mu": [0.5, 0.3]}),
        ("hawkes2", {**HAWKES2, "alpha": [[0.2, 0.2], [0.4, 0.1]]}),
        ("hawkes2", {**HAWKES2, "beta": [[2.0, 2.0], [3.0, 1.5]]}),
        ("self_correcting3", {**default_self_correcting_params(3), "mu": [1.1, 0.75, 0.5]}),
        ("self_correcting3", {"mu": [1.0, 0.75, 0.5], "alpha": np.eye(3) * 1.1}),
    ],
)
def test_true_parameters_score_higher_than_perturbed(key, perturbed):
    truth = PROCS[key]
    other = type(truth)(**perturbed)
    seqs = truth.sample(200, t_end=15.0, seed=8)

    def total(p):
        return sum(p.log_likelihood(s["t"], s["mark"], t_start=0.0, t_end=15.0) for s in seqs)

    assert total(truth) > total(other)


# ---------------------------------------------------------------- seeds, speed, API
@pytest.mark.parametrize("key", ["poisson_periodic", "hawkes5", "self_correcting3"])
def test_same_seed_same_sequences(key):
    p = PROCS[key]
    a, b, c = (p.sample(20, t_end=10.0, seed=s) for s in (3, 3, 4))
    assert all(
        np.array_equal(x["t"], y["t"]) and np.array_equal(x["mark"], y["mark"])
        for x, y in zip(a, b)
    )
    assert not all(
        len(x["t"]) == len(y["t"]) and np.array_equal(x["t"], y["t"]) for x, y in zip(a, c)
    )
    for s in a:
        assert s["t"].dtype == np.float64 and s["mark"].dtype == np.int64
        assert np.all(np.diff(s["t"]) > 0) and np.all((s["mark"] >= 0) & (s["mark"] < p.num_marks))


def test_sample_window_starts_at_t_start():
    for p in (PROCS["hawkes2"], PROCS["self_correcting"], PROCS["poisson"]):
        seqs = p.sample(50, t_end=13.0, seed=0, t_start=10.0)
        t = np.concatenate([s["t"] for s in seqs])
        assert len(t) and t.min() > 10.0 and t.max() <= 13.0


def test_hawkes_sampling_and_scoring_are_fast():
    h = PROCS["hawkes5"]
    start = time.perf_counter()
    seqs = h.sample(500, t_end=20.0, seed=0)  # ~100 events each
    elapsed = time.perf_counter() - start
    assert 80 < np.mean([len(s["t"]) for s in seqs]) < 120
    assert elapsed < 1.0
    start = time.perf_counter()
    for s in seqs[:100]:
        h.log_likelihood(s["t"], s["mark"], t_start=0.0, t_end=20.0)
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("key", sorted(PROCS))
def test_config_round_trip(key):
    p = PROCS[key]
    cfg = p.config()
    assert cfg == process_from_config(cfg).config()
    q = process_from_config(cfg)
    s = p.sample(1, t_end=10.0, seed=1)[0]
    assert q.log_likelihood(s["t"], s["mark"], t_start=0.0, t_end=10.0) == p.log_likelihood(
        s["t"], s["mark"], t_start=0.0, t_end=10.0
    )


def test_registry():
    assert {"poisson", "hawkes", "self_correcting"} <= set(PROCESSES)
    assert isinstance(get_process("hawkes", mu=0.1, alpha=0.5, beta=1.0), HawkesProcess)
    with pytest.raises(ValueError, match="hawkes"):
        get_process("hawke")


# ---------------------------------------------------------------- bad input
def test_bad_sequences_are_rejected():
    h = PROCS["hawkes2"]
    with pytest.raises(ValueError, match="strictly increasing"):
        h.log_likelihood([1.0, 1.0], [0, 1], t_start=0.0, t_end=2.0)
    with pytest.raises(ValueError, match="strictly increasing"):
        h.intensity([1.0], [2.0, 1.0], [0, 1])
    with pytest.raises(ValueError, match=r"marks must be integers in 0\.\.1"):
        h.log_likelihood([1.0, 2.0], [0, 2], t_start=0.0, t_end=3.0)
    with pytest.raises(ValueError, match="marks must be integers"):
        h.log_likelihood([1.0, 2.0], [0.0, 1.0], t_start=0.0, t_end=3.0)
    with pytest.raises(ValueError, match="precedes the last event"):
        h.log_likelihood([1.0, 2.0], [0, 1], t_start=0.0, t_end=1.5)
    with pytest.raises(ValueError, match="must not precede t_start"):
        h.log_likelihood([1.0], [0], t_start=2.0, t_end=1.5)
    with pytest.raises(ValueError, match="one length"):
        h.intensity([1.0], [1.0, 2.0], [0])
    with pytest.raises(ValueError, match="must be finite"):
        h.log_likelihood([1.0, np.nan], [0, 1], t_start=0.0, t_end=3.0)
    with pytest.raises(ValueError, match="precede t_start"):
        h.compensator([0.5], [1.0], [0], t_start=1.0)
    with pytest.raises(ValueError, match="params=None"):
        h.log_likelihood([1.0], [0], t_start=0.0, t_end=2.0, params=np.ones(2))


def test_bad_parameters_are_rejected():
    with pytest.raises(ValueError, match=r"spectral radius of alpha is 1\.1"):
        HawkesProcess([0.1, 0.1], [[0.6, 0.5], [0.5, 0.6]], 1.0)
    with pytest.raises(ValueError, match="not stationary"):
        HawkesProcess(0.5, 1.0, 1.0)
    with pytest.raises(ValueError, match="mu .* > 0"):
        HawkesProcess([0.1, -0.1], 0.2, 1.0)
    with pytest.raises(ValueError, match="alpha .* >= 0"):
        HawkesProcess([0.1, 0.1], [[0.2, -0.1], [0.0, 0.2]], 1.0)
    with pytest.raises(ValueError, match="beta .* > 0"):
        HawkesProcess(0.1, 0.2, 0.0)
    with pytest.raises(ValueError, match=r"alpha must have shape \(2, 2\)"):
        HawkesProcess([0.1, 0.1], [0.2, 0.2], 1.0)
    with pytest.raises(ValueError, match="rate must be > 0"):
        PoissonProcess([1.0, -2.0])
    with pytest.raises(ValueError, match=r"amplitude must lie in \[-1, 1\]"):
        PoissonProcess(1.0, amplitude=1.5)
    with pytest.raises(ValueError, match="period must be > 0"):
        PoissonProcess(1.0, period=0.0)
    with pytest.raises(ValueError, match="diagonal must be > 0"):
        SelfCorrectingProcess([1.0, 1.0], [[1.0, 0.0], [0.5, 0.0]])
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        SelfCorrectingProcess(1.0, -1.0)
    with pytest.raises(ValueError, match="mu .* > 0"):
        SelfCorrectingProcess(-1.0, 1.0)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        PROCS["poisson"].sample(0, t_end=1.0)
    with pytest.raises(ValueError, match="greater than t_start"):
        PROCS["poisson"].sample(2, t_end=1.0, t_start=1.0)
    with pytest.raises(ValueError, match="seed must be"):
        PROCS["poisson"].sample(2, t_end=1.0, seed=-1)


# ---------------------------------------------------------------- builders
def test_hawkes_builder_round_trip(tmp_path):
    path = datasets.make_dataset("hawkes", 20, out=tmp_path / "h.h5", seed=0)
    ds = simsci.data.open(path)
    assert ds.kind == "events" and ds.system == "hawkes" and len(ds) == 20
    assert ds.num_marks == 1
    meta = ds.meta
    process = process_from_config(meta["process"])
    assert isinstance(process, HawkesProcess)
    assert process.config() == HawkesProcess(**default_hawkes_params(1)).config()
    assert meta["t_end"] == pytest.approx(50.0 / process.mean_rate().sum())
    assert meta["time_unit"] is None and meta["min_events"] == 2
    for i in range(len(ds)):
        ep = ds[i]
        assert len(ep["t"]) >= 2 and ep["t"][-1] <= meta["t_end"]
        assert float(ep["t_end"]) == meta["t_end"]
        ll = process.log_likelihood(ep["t"], ep["mark"], t_start=0.0, t_end=meta["t_end"])
        first_given = process.log_likelihood(
            ep["t"], ep["mark"], t_start=ep["t"][0], t_end=ep["t"][-1]
        )
        assert np.isfinite(ll) and np.isfinite(first_given)
    assert sorted(np.bincount(ds.column("split"), minlength=3)) == [2, 2, 16]
    # same seed, same file contents
    again = simsci.data.open(datasets.make_dataset("hawkes", 20, out=tmp_path / "g.h5", seed=0))
    assert all(np.array_equal(ds[i]["t"], again[i]["t"]) for i in range(20))


def test_hawkes_builder_options(tmp_path):
    path = datasets.make_dataset(
        "hawkes", 30, out=tmp_path / "h5.h5", seed=1, marks=5, max_events=40, min_events=5
    )
    ds = simsci.data.open(path)
    meta = ds.meta
    assert ds.num_marks == 5 and meta["spectral_radius"] == pytest.approx(0.65)
    assert process_from_config(meta["process"]).num_marks == 5
    lengths = ds.lengths
    assert lengths.min() >= 5 and lengths.max() <= 40
    assert meta["truncated"] == int(np.sum(lengths == 40)) > 0
    for i in np.flatnonzero(lengths == 40):
        assert float(ds[int(i)]["t_end"]) == ds[int(i)]["t"][-1]
    # CLI-style text options
    path = datasets.make_dataset(
        "hawkes",
        5,
        out=tmp_path / "c.h5",
        marks=2,
        mu="0.2,0.3",
        alpha="0.3,0.1;0.2,0.3",
        beta=2.0,
        t_end=30.0,
    )
    p = process_from_config(simsci.data.open(path).meta["process"])
    assert p.params() == {
        "mu": [0.2, 0.3],
        "alpha": [[0.3, 0.1], [0.2, 0.3]],
        "beta": [[2.0, 2.0], [2.0, 2.0]],
    }
    with pytest.raises(ValueError, match="not stationary"):
        datasets.make_dataset("hawkes", 5, out=tmp_path / "x.h5", alpha=1.2)
    with pytest.raises(ValueError, match="2 x 2"):
        datasets.make_dataset("hawkes", 5, out=tmp_path / "x.h5", marks=2, alpha="0.1,0.2,0.3")
    with pytest.raises(ValueError, match="min_events"):
        datasets.make_dataset("hawkes", 5, out=tmp_path / "x.h5", min_events=400, t_end=5.0)
    assert not (tmp_path / "x.h5").exists()


def test_min_events_conditions_the_data_set(tmp_path):
    # mean 3 events: many sequences fall short and are redrawn
    path = datasets.make_dataset(
        "poisson_events", 50, out=tmp_path / "p.h5", seed=0, t_end=3.0, min_events=4
    )
    ds = simsci.data.open(path)
    assert ds.lengths.min() >= 4 and ds.meta["draws"] > 50
    assert ds.meta["min_events"] == 4 and "conditioned" in ds.meta["conditioning"]


def test_poisson_and_self_correcting_builders(tmp_path):
    p = datasets.make_dataset(
        "poisson_events", 10, out=tmp_path / "p.h5", marks=2, rate="1,0.5", amplitude=0.5
    )
    ds = simsci.data.open(p)
    proc = process_from_config(ds.meta["process"])
    assert isinstance(proc, PoissonProcess) and ds.num_marks == 2
    assert proc.params()["rate"] == [1.0, 0.5] and proc.params()["amplitude"] == [0.5, 0.5]
    assert ds.meta["t_end"] == pytest.approx(50.0 / 1.5)
    s = datasets.make_dataset("self_correcting", 10, out=tmp_path / "s.h5", marks=3, seed=2)
    ds = simsci.data.open(s)
    proc = process_from_config(ds.meta["process"])
    assert isinstance(proc, SelfCorrectingProcess) and ds.num_marks == 3
    for i in range(len(ds)):
        ep = ds[i]
        assert np.isfinite(
            proc.log_likelihood(ep["t"], ep["mark"], t_start=0.0, t_end=ds.meta["t_end"])
        )
    opts = datasets.DATASETS["hawkes"].options()
    assert opts["marks"] == 1 and opts["min_events"] == 2 and opts["max_events"] is None
