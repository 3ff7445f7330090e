"""The population-coupled and mobility point processes and their data sets: exact
sampling (time rescaling), likelihoods against brute force and finer quadrature, the
population term's worth, daily cycles, locations, builders and bad input."""

import json

import numpy as np
import pytest
from scipy import stats

import simsci.data
import simsci.datasets as datasets
import simsci.processes as processes
from simsci.errors import UnknownNameError
from simsci.processes import MobilityProcess, PopulationCoupledProcess, process_from_config
from simsci.processes._population import HOME, WORK, weekend_weight

SPAN = 28 * 24.0
WINDOW = 72.0


def _pop_windows(n, seed, window=WINDOW):
    start = np.random.default_rng(seed).uniform(0.0, SPAN - WINDOW, n)
    return start, start + window


def _rescaled(process, seqs, t0, horizon):
    """Compensator increments of the events whose previous event (or the window start)
    lies before t0 + horizon: a predictable selection, so i.i.d. Exp(1) (keeping only
    the complete intervals inside a window biases them short, by about 1/events)."""
    out = []
    for s, a in zip(seqs, t0):
        if not len(s["t"]):
            continue
        inc = process.cumulative_intensity(
            s["t"], s["mark"], t_start=a, t_end=s["t"][-1], params=s["params"]
        )[:-1]
        prev = np.concatenate([[a], s["t"][:-1]])
        out.append(inc[prev <= a + horizon])
    return np.concatenate(out)


def _brute_force_ll(process, s, t_start, t_end, step=2e-3):
    """Log-likelihood from the public intensity() only: log-intensities at the events
    (left limits) and a composite midpoint rule on each inter-event interval."""
    t, m = s["t"], s["mark"]
    lam_events = np.array(
        [process.intensity(tj, t, m, params=s["params"])[0, mj] for tj, mj in zip(t, m)]
    )
    edges = np.concatenate([[t_start], t[t > t_start], [t_end]])
    total = 0.0
    for a, b in zip(edges[:-1], edges[1:]):
        k = max(1, int(np.ceil((b - a) / step)))
        h = (b - a) / k
        mids = a + h * (np.arange(k) + 0.5)
        total += h * process.intensity(mids, t, m, params=s["params"]).sum()
    return float(np.log(lam_events[t > t_start]).sum() - total)


# ============================================================ population_coupled
def test_population_sampler_layout_and_reproducibility():
    p = PopulationCoupledProcess()
    t0, t1 = _pop_windows(40, 0)
    a = p.sample(40, t_start=t0, t_end=t1, seed=5)
    b = p.sample(40, t_start=t0, t_end=t1, seed=5)
    c = p.sample(40, t_start=t0, t_end=t1, seed=6)
    assert all(np.array_equal(x[k], y[k]) for x, y in zip(a, b) for k in ("t", "mark", "params"))
    assert any(
        len(x["t"]) != len(y["t"]) or not np.array_equal(x["t"], y["t"]) for x, y in zip(a, c)
    )
    for s, lo, hi in zip(a, t0, t1):
        assert s["t"].dtype == np.float64 and s["mark"].dtype == np.int64
        assert np.all(np.diff(s["t"]) > 0) and (
            len(s["t"]) == 0 or (s["t"][0] > lo and s["t"][-1] <= hi)
        )
        assert s["params"].shape == (3,) and s["params"][0] == s["group"] in (0, 1)
        assert np.array_equal(s["window"], [lo, hi])
    # groups and effects can be fixed
    fixed = p.sample(3, t_end=50.0, groups=[1, 1, 0], effects=np.zeros((3, 2)), seed=0)
    assert [int(s["group"]) for s in fixed] == [1, 1, 0]
    assert np.all(np.stack([s["params"][1:] for s in fixed]) == 0)


def test_population_time_rescaling_is_exponential():
    p = PopulationCoupledProcess()
    t0, _ = _pop_windows(250, 1)
    seqs = p.sample(250, t_start=t0, t_end=t0 + 2 * WINDOW, seed=2)
    inc = _rescaled(p, seqs, t0, WINDOW)
    assert len(inc) > 8000
    assert stats.kstest(inc, "expon").pvalue > 1e-3


def test_population_log_likelihood_matches_brute_force_and_finer_quadrature():
    p = PopulationCoupledProcess()
    t0, t1 = _pop_windows(30, 3)
    seqs = p.sample(30, t_start=t0, t_end=t1, seed=3)
    for s, a, b in list(zip(seqs, t0, t1))[:3]:
        ll = p.log_likelihood(s["t"], s["mark"], t_start=a, t_end=b, params=s["params"])
        assert ll == pytest.approx(_brute_force_ll(p, s, a, b), rel=1e-6, abs=1e-6)
    # the 16-point rule on 1-hour pieces against 64 points on 0.1-hour pieces
    for s, a, b in zip(seqs, t0, t1):
        kw = {"t_start": a, "t_end": b, "params": s["params"]}
        coarse = p.cumulative_intensity(s["t"], s["mark"], **kw).sum()
        fine = p.cumulative_intensity(s["t"], s["mark"], order=64, max_piece=0.1, **kw).sum()
        assert abs(coarse - fine) < 1e-8 * fine
    # the scoring convention (first event given) and the pieces add up
    s = next(x for x in seqs if len(x["t"]) > 3)
    head = p.log_likelihood(
        s["t"][:2], s["mark"][:2], t_start=s["window"][0], t_end=s["t"][1], params=s["params"]
    )
    tail = p.log_likelihood(
        s["t"], s["mark"], t_start=s["t"][1], t_end=s["t"][-1], params=s["params"]
    )
    whole = p.log_likelihood(
        s["t"], s["mark"], t_start=s["window"][0], t_end=s["t"][-1], params=s["params"]
    )
    assert head + tail == pytest.approx(whole, rel=1e-12)


def test_population_intensity_is_the_left_limit():
    p = PopulationCoupledProcess()
    s = next(x for x in p.sample(5, t_end=72.0, seed=0) if len(x["t"]) > 2)
    tj = s["t"][1]
    at = p.intensity(tj, s["t"], s["mark"], params=s["params"])
    before = p.intensity(np.nextafter(tj, -np.inf), s["t"], s["mark"], params=s["params"])
    after = p.intensity(np.nextafter(tj, np.inf), s["t"], s["mark"], params=s["params"])
    assert at.shape == (1, 3) and np.allclose(at, before, rtol=1e-12)
    assert not np.allclose(at, after)  # the jump J[mark] acts just after the event
    assert np.all(at > 0) and np.all(at < p.lam_max)


def test_population_term_is_worth_likelihood():
    p = PopulationCoupledProcess()
    ablated = p.time_averaged(0.0, SPAN)
    t0, t1 = _pop_windows(200, 4)
    seqs = p.sample(200, t_start=t0, t_end=t1, seed=4)
    full = flat = 0.0
    for s, a, b in zip(seqs, t0, t1):
        kw = {"t_start": a, "t_end": b, "params": s["params"]}
        full += p.log_likelihood(s["t"], s["mark"], **kw)
        flat += ablated.log_likelihood(s["t"], s["mark"], **kw)
    events = sum(len(s["t"]) for s in seqs)
    assert 30 < events / len(seqs) < 90  # a typical sequence: tens of events
    # documented: 0.43-0.47 nats per event on the default data set
    assert (full - flat) / events > 0.2


def test_population_time_average_is_the_mean_of_the_drive():
    p = PopulationCoupledProcess()
    grid = np.linspace(10.0, 500.0, 400001)
    avg = p.time_averaged(10.0, 500.0)
    for g in range(2):
        numeric = p.population_drive(grid, g).mean(axis=0)
        assert np.allclose(avg.population_mean[g], numeric, atol=1e-4)
        assert np.allclose(avg.population_drive([3.0, 300.0], g), avg.population_mean[g])
    again = process_from_config(json.loads(json.dumps(avg.config())))
    assert np.array_equal(again.population_mean, avg.population_mean)


def test_population_daily_cycle_and_regime_shift():
    p = PopulationCoupledProcess()
    t0, t1 = _pop_windows(300, 5)
    seqs = p.sample(300, t_start=t0, t_end=t1, seed=5)
    peaks = {}
    for g in (0, 1):
        t = np.concatenate([s["t"] for s in seqs if s["group"] == g])
        counts = np.bincount((t % 24).astype(int), minlength=24)
        assert counts.max() > 3 * counts.min()  # a strong daily cycle
        peaks[g] = int(np.argmax(np.convolve(np.tile(counts, 3), np.ones(3), "same")[24:48]))
    assert 10 <= peaks[0] <= 16 and 16 <= peaks[1] <= 22  # 13:00 and 19:00 by default
    # the regime moves the preference from mark 0 to mark 2 (group 0 shifts at day 9.8)
    tau = p.regime_time[0]
    before = p.sample(200, t_start=tau - 96, t_end=tau - 24, groups=np.zeros(200, int), seed=1)
    after = p.sample(200, t_start=tau + 24, t_end=tau + 96, groups=np.zeros(200, int), seed=1)
    share = [np.mean(np.concatenate([s["mark"] for s in x]) == 2) for x in (before, after)]
    assert share[1] > share[0] + 0.2


def test_population_bad_input():
    with pytest.raises(ValueError, match="lam_max must be > 0"):
        PopulationCoupledProcess(lam_max=[1.0, -2.0, 1.0])
    with pytest.raises(ValueError, match=r"weights must have shape \(3, 2\)"):
        PopulationCoupledProcess(weights=np.ones((2, 2)))
    with pytest.raises(ValueError, match="decay must be > 0"):
        PopulationCoupledProcess(decay=[0.5, 0.0])
    with pytest.raises(TypeError, match="bias must be an array of numbers"):
        PopulationCoupledProcess(bias="high")
    with pytest.raises(ValueError, match="groups must be"):
        PopulationCoupledProcess(groups=0)
    with pytest.raises(ValueError, match="regime_width must be a finite number > 0"):
        PopulationCoupledProcess(regime_width=-1.0)
    p = PopulationCoupledProcess()
    t, m = np.array([1.0, 2.0]), np.array([0, 1])
    with pytest.raises(ValueError, match="params=.*are needed"):
        p.log_likelihood(t, m, t_start=0.0, t_end=3.0)
    with pytest.raises(ValueError, match="params must be 3 finite numbers"):
        p.log_likelihood(t, m, t_start=0.0, t_end=3.0, params=[0.0, 1.0])
    with pytest.raises(ValueError, match="params\\[0\\] is the group"):
        p.intensity(1.5, t, m, params=[2.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="lies after t_end"):
        p.log_likelihood(t, m, t_start=0.0, t_end=1.5, params=[0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="strictly increasing"):
        p.log_likelihood([2.0, 1.0], m, t_start=0.0, t_end=3.0, params=[0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="marks must be integers in 0..2"):
        p.intensity(1.5, t, [0, 3], params=[0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="t_end must be >= t_start"):
        p.sample(2, t_start=[0.0, 5.0], t_end=4.0)
    with pytest.raises(ValueError, match="n must be"):
        p.sample(0, t_end=4.0)
    with pytest.raises(ValueError, match="group must be integers in 0..1"):
        p.sample(2, t_end=4.0, groups=[0, 2])


# ===================================================================== mobility
def _agents(n, seed, days=7):
    start = 24.0 * np.random.default_rng(seed).integers(7, size=n) + 4.0
    return start, start + 24.0 * days


def test_mobility_events_sit_at_their_locations():
    p = MobilityProcess()
    t0, t1 = _agents(100, 0)
    seqs = p.sample(100, t_start=t0, t_end=t1, seed=1)
    again = p.sample(100, t_start=t0, t_end=t1, seed=1)
    assert all(np.array_equal(a["loc_id"], b["loc_id"]) for a, b in zip(seqs, again))
    for s in seqs:
        home, work = int(s["params"][0]), int(s["params"][1])
        assert np.array_equal(s["loc"], p.coords[s["loc_id"]])
        assert np.array_equal(s["mark"], p.venue_type[s["loc_id"]])
        assert np.all(s["loc_id"][s["mark"] == HOME] == home)
        assert np.all(s["loc_id"][s["mark"] == WORK] == work)
        assert s["group"] == p.neighbourhood[home]
        assert np.all(np.isfinite(p.location_log_prob(s["mark"], s["loc_id"], s["params"])))
    per_day = np.mean([len(s["t"]) for s in seqs]) / 7
    assert 3 < per_day < 7


def test_mobility_time_rescaling_is_exponential():
    p = MobilityProcess()
    t0, _ = _agents(250, 2)
    seqs = p.sample(250, t_start=t0, t_end=t0 + 24.0 * 8, seed=3)
    inc = _rescaled(p, seqs, t0, 24.0 * 4)
    assert len(inc) > 3000
    assert stats.kstest(inc, "expon").pvalue > 1e-3


def test_mobility_log_likelihood_matches_brute_force_and_finer_quadrature():
    p = MobilityProcess()
    t0, t1 = _agents(20, 4, days=2)
    seqs = p.sample(20, t_start=t0, t_end=t1, seed=4)
    for s, a, b in list(zip(seqs, t0, t1))[:2]:
        ll = p.log_likelihood(s["t"], s["mark"], t_start=a, t_end=b, params=s["params"])
        assert ll == pytest.approx(_brute_force_ll(p, s, a, b, step=1e-3), rel=1e-6, abs=1e-6)
    for s, a, b in zip(seqs, t0, t1):
        kw = {"t_start": a, "t_end": b, "params": s["params"]}
        coarse = p.cumulative_intensity(s["t"], s["mark"], **kw).sum()
        fine = p.cumulative_intensity(s["t"], s["mark"], order=64, max_piece=0.1, **kw).sum()
        assert abs(coarse - fine) < 1e-8 * fine


def test_mobility_daily_and_weekly_profile():
    p = MobilityProcess()
    t0, t1 = _agents(300, 5)
    seqs = p.sample(300, t_start=t0, t_end=t1, seed=5)
    t = np.concatenate([s["t"] for s in seqs])
    m = np.concatenate([s["mark"] for s in seqs])
    hour = (t % 24).astype(int)
    counts = np.bincount(hour, minlength=24)
    assert counts[12] > 8 * counts[1:5].mean()  # lunch vs the night
    assert counts[8] > 8 * counts[1:5].mean()  # work arrivals
    weekend = weekend_weight(t) > 0.5
    work_wd = np.sum((m == WORK) & ~weekend) / 5
    work_we = np.sum((m == WORK) & weekend) / 2
    assert work_wd > 10 * work_we  # no work at weekends
    assert weekend_weight([0.0, 60.0, 120.0, 150.0, 168.0]) == pytest.approx(
        [0.5, 0.0, 0.5, 1.0, 0.5], abs=1e-7
    )


def test_mobility_location_model():
    p = MobilityProcess()
    # normalised: from any location, over the locations of each public venue type
    home = int(np.flatnonzero(p.venue_type == HOME)[0])
    work = int(np.flatnonzero(p.venue_type == WORK)[0])
    params = [home, work, 0.0]
    for prev in (home, 20, p.num_locations - 1):
        for k in (2, 3, 4):
            ids = np.flatnonzero(p.venue_type == k)
            logp = [p.location_log_prob([p.venue_type[prev], k], [prev, j], params)[1] for j in ids]
            assert np.exp(logp).sum() == pytest.approx(1.0, rel=1e-12)
    # impossible choices: someone else's home, a location of another type
    other = int(np.flatnonzero(p.venue_type == HOME)[1])
    assert p.location_log_prob([HOME], [other], params)[0] == -np.inf
    assert p.location_log_prob([2], [home], params)[0] == -np.inf
    # the sampler's food choices from home follow the gravity model
    seqs = p.sample(400, t_end=24.0 * 7, t_start=4.0, homes=np.full(400, home), seed=6)
    chosen = []
    for s in seqs:
        prev = np.concatenate([[home], s["loc_id"][:-1]])
        chosen.append(s["loc_id"][(s["mark"] == 2) & (prev == home)])
    chosen = np.concatenate(chosen)
    food = np.flatnonzero(p.venue_type == 2)
    expected = np.exp([p.location_log_prob([2], [j], params)[0] for j in food])
    observed = np.array([(chosen == j).mean() for j in food])
    assert len(chosen) > 500 and 0.5 * np.abs(observed - expected).sum() < 0.08


def test_mobility_bad_input():
    with pytest.raises(ValueError, match="refractory must be a finite number >= 0"):
        MobilityProcess(refractory=-1.0)
    with pytest.raises(ValueError, match="distance_scale must be a finite number > 0"):
        MobilityProcess(distance_scale=0.0)
    with pytest.raises(ValueError, match="num_locations must be"):
        MobilityProcess(num_locations=3)
    with pytest.raises(ValueError, match="no location of venue type"):
        MobilityProcess(coords=np.zeros((3, 2)), venue_type=[0, 1, 2])
    with pytest.raises(ValueError, match="popularity must be > 0"):
        p = MobilityProcess()
        MobilityProcess(**{**p.params(), "popularity": [-1.0] * p.num_locations})
    with pytest.raises(ValueError, match="bumps must be rows"):
        MobilityProcess(bumps=[[0, 0, 1.0, 12.0]])
    p = MobilityProcess()
    t, m = np.array([5.0, 6.0]), np.array([2, 0])
    work = int(np.flatnonzero(p.venue_type == WORK)[0])
    with pytest.raises(ValueError, match=r"params\[0\] must be the id of a home-type location"):
        p.log_likelihood(t, m, t_start=0.0, t_end=7.0, params=[work, work, 0.0])
    with pytest.raises(ValueError, match="params must be 3 finite numbers"):
        p.intensity(5.5, t, m, params=[0.0, np.nan, 0.0])
    with pytest.raises(ValueError, match="loc_ids must be integers"):
        p.location_log_prob(m, [0, 999], [0, work, 0.0])


# ===================================================================== data sets
def test_builders_round_trip(tmp_path):
    path = datasets.make_dataset("population_events", 24, out=tmp_path / "p.h5", seed=3)
    ds = simsci.data.open(path)
    assert ds.kind == "events" and ds.system == "population_events" and ds.num_marks == 3
    meta = ds.meta
    assert meta["time_unit"] == "hour" and meta["day_length"] == 24.0
    assert meta["week_length"] == 168.0 and meta["span_days"] == 28.0
    process = process_from_config(meta["process"])
    assert isinstance(process, PopulationCoupledProcess)
    assert np.allclose(process.regime_time, SPAN * np.array([0.35, 0.65]))
    assert np.bincount(ds.column("split"), minlength=3).tolist() == [19, 2, 3]
    again = PopulationCoupledProcess(regime_time=SPAN * np.array([0.35, 0.65]))
    for i in range(len(ds)):
        ep = ds[i]
        assert len(ep["t"]) >= 2 and int(ep["group"]) == ep["params"][0]
        lo, hi = ep["window"]
        assert hi - lo == pytest.approx(WINDOW) and lo < ep["t"][0] and ep["t"][-1] <= hi
        kw = {"t_start": lo, "t_end": hi, "params": ep["params"]}
        assert process.log_likelihood(ep["t"], ep["mark"], **kw) == pytest.approx(
            again.log_likelihood(ep["t"], ep["mark"], **kw), rel=1e-13
        )
    same = datasets.make_dataset("population_events", 24, out=tmp_path / "q.h5", seed=3)
    ds2 = simsci.data.open(same)
    assert all(np.array_equal(ds[i]["t"], ds2[i]["t"]) for i in range(len(ds)))

    cut = simsci.data.open(
        datasets.make_dataset(
            "population_events",
            20,
            out=tmp_path / "c.h5",
            max_events=10,
            min_events=5,
            groups=3,
            marks=2,
            span_days=14,
            window_hours=48,
            split=(0.5, 0.25, 0.25),
        )
    )
    lengths = np.array([len(cut[i]["t"]) for i in range(len(cut))])
    assert lengths.max() == 10 and lengths.min() >= 5 and cut.meta["truncated"] > 0
    assert cut.num_marks == 2 and set(cut.column("group").tolist()) <= {0, 1, 2}
    # a truncated sequence's window ends at its last kept event (a stopping time)
    short = [cut[i] for i in range(len(cut)) if np.diff(cut[i]["window"])[0] < 48.0]
    assert len(short) == cut.meta["truncated"]
    assert all(len(ep["t"]) == 10 and ep["window"][1] == ep["t"][-1] for ep in short)

    mob = simsci.data.open(datasets.make_dataset("mobility", 10, out=tmp_path / "m.h5", days=2))
    assert set(mob.step_fields) == {"t", "mark", "loc", "loc_id"} and mob.num_marks == 5
    static = mob.static
    process = process_from_config(mob.meta["process"])
    assert np.array_equal(static["locations"], process.coords)
    assert np.array_equal(static["venue_type"], process.venue_type)
    for i in range(len(mob)):
        ep = mob[i]
        assert np.array_equal(ep["loc"], static["locations"][ep["loc_id"]])
        assert np.array_equal(ep["mark"], static["venue_type"][ep["loc_id"]])
        assert int(ep["group"]) == static["neighbourhood"][int(ep["params"][0])]
        ll = process.log_likelihood(
            ep["t"],
            ep["mark"],
            t_start=ep["window"][0],
            t_end=ep["window"][1],
            params=ep["params"],
        )
        assert np.isfinite(ll)


def test_processes_are_registered_and_configs_round_trip():
    for cls in (PopulationCoupledProcess, MobilityProcess):
        assert processes.PROCESSES[cls.name] is cls
        p = cls()
        q = process_from_config(json.loads(json.dumps(p.config())))
        assert q.config() == p.config()
    assert processes.get_process("population_coupled", groups=3).groups == 3


def test_builders_reject_bad_options(tmp_path):
    out = tmp_path / "x.h5"
    with pytest.raises(UnknownNameError, match="no option 'keep'.*groups=2"):
        datasets.make_dataset("population_events", 2, out=out, keep=0.5)
    with pytest.raises(UnknownNameError, match="no option 'groups'.*locations=36"):
        datasets.make_dataset("mobility", 2, out=out, groups=2)
    with pytest.raises(ValueError, match="must fit in the calendar span"):
        datasets.make_dataset("population_events", 2, out=out, span_days=1, window_hours=48)
    with pytest.raises(ValueError, match="max_events must be"):
        datasets.make_dataset("population_events", 2, out=out, max_events=1, min_events=2)
    with pytest.raises(ValueError, match="min_events must be"):
        datasets.make_dataset("mobility", 2, out=out, min_events=-1)
    with pytest.raises(ValueError, match="split must be three"):
        datasets.make_dataset("mobility", 2, out=out, split=(0.9, 0.2, 0.0))
    with pytest.raises(ValueError, match="start_hour must lie in"):
        datasets.make_dataset("mobility", 2, out=out, start_hour=30.0)
    assert not out.exists()
