"""The event-model harness (simsci.models._events) against exact answers: the true
process's likelihood, the Gauss-Legendre compensator on a known intensity, next-event
prediction and sampling of a Poisson model with known rates, time units, the
generation distances, and the rules of a batch (bad input rejected with a clear
message)."""

import math

import numpy as np
import pytest
import torch

from simsci import data
from simsci.datasets import make_dataset
from simsci.models._events import (
    EventModel,
    evaluate_events,
    event_file_kwargs,
    event_items,
    gauss_legendre,
    generation_distances,
)
from simsci.models.point_process import PoissonTPP, TrueProcessTPP
from simsci.processes import HawkesProcess

torch.set_num_threads(1)

RATES = np.array([0.2, 0.9, 0.4])  # data units (events per data time unit)


@pytest.fixture(scope="module")
def hawkes_file(tmp_path_factory):
    """40 sequences of the default 2-mark Hawkes process on [0, 15] (~25 events each)."""
    out = tmp_path_factory.mktemp("harness") / "hawkes.h5"
    return make_dataset("hawkes", 40, out=out, seed=3, marks=2, t_end=15.0)


@pytest.fixture(scope="module")
def hawkes(hawkes_file):
    traj = data.open(hawkes_file)
    return traj, HawkesProcess(**traj.meta["process"]["params"])


def items_of(traj, split=None):
    ids = range(len(traj))
    if split is not None:
        ids = np.flatnonzero(np.asarray(traj.column("split")) == {"train": 0, "test": 2}[split])
    return [{"t": traj[int(i)]["t"], "mark": traj[int(i)]["mark"], "episode": int(i)} for i in ids]


def poisson(time_scale=1.0, rates=RATES, **kw):
    """A PoissonTPP with the data-unit ``rates`` written in model units."""
    log_rate = np.log(np.asarray(rates) * time_scale).tolist()
    return PoissonTPP(len(rates), log_rate=log_rate, time_scale=time_scale, **kw)


def one(t, mark, **extra):
    return {"t": np.asarray(t, dtype=float), "mark": np.asarray(mark), **extra}


# ------------------------------------------------------------------ the true process
def test_true_process_scores_the_exact_log_likelihood(hawkes):
    """ll_per_event of the true process is the process's own exact log-likelihood of
    each test sequence (first event given, up to the window's end /episodes/t_end),
    summed and divided by the scored events."""
    traj, proc = hawkes
    model = TrueProcessTPP.from_data(traj)
    items = items_of(traj, "test")
    assert len(items) >= 3
    ends = traj.column("t_end")
    total = sum(
        proc.log_likelihood(
            it["t"], it["mark"], t_start=it["t"][0], t_end=float(ends[it["episode"]])
        )
        for it in items
    )
    assert all(float(ends[it["episode"]]) > it["t"][-1] for it in items)
    scored = sum(len(it["t"]) - 1 for it in items)
    got = evaluate_events(model, traj, split="test", generate=False)
    assert got["events"] == scored
    assert got["ll_per_event"] == pytest.approx(total / scored, rel=1e-6)


def test_window_false_stops_the_score_at_the_last_event(hawkes):
    """evaluate_events(window=False): EasyTPP's convention, the exact log-likelihood of
    each test sequence from its first to its last event."""
    traj, proc = hawkes
    items = items_of(traj, "test")
    total = sum(
        proc.log_likelihood(it["t"], it["mark"], t_start=it["t"][0], t_end=it["t"][-1])
        for it in items
    )
    scored = sum(len(it["t"]) - 1 for it in items)
    got = evaluate_events(TrueProcessTPP.from_data(traj), traj, generate=False, window=False)
    assert got["ll_per_event"] == pytest.approx(total / scored, rel=1e-6)


def test_gauss_legendre_compensator_on_the_true_hawkes_intensity(hawkes):
    """The harness's generic quadrature (EventModel.log_likelihood_terms) applied to the
    exact Hawkes intensity: the intensity is smooth between events, so 16 GL nodes per
    interval give each interval's compensator, each event's log-intensity and each
    sequence's log-likelihood to float32 accuracy."""
    traj, proc = hawkes
    model = TrueProcessTPP.from_data(traj)
    batch = model.collate(items_of(traj))
    terms = EventModel.log_likelihood_terms(model, batch)
    s = model.time_scale
    for b in range(batch["t"].shape[0]):
        n = int(batch["length"][b])
        t, m = batch["t"][b, :n].numpy(), batch["mark"][b, :n].numpy()
        cum = proc.compensator(t, t, m, t_start=t[0]).sum(-1)  # (n,) Λ(t_0, t_j)
        comp = terms["compensator"][b, 1:n].double().numpy()
        np.testing.assert_allclose(comp, np.diff(cum), rtol=2e-5, atol=1e-7)
        lam = proc.intensity(t[1:], t, m)[np.arange(n - 1), m[1:]]  # left limits
        event = terms["event"][b, 1:n].double().numpy()
        np.testing.assert_allclose(event, np.log(lam), rtol=1e-5, atol=1e-5)
        # the compensator is in model units and the events in data units: the total is
        # the data-unit log-likelihood all the same (the time change cancels)
        exact = proc.log_likelihood(t, m, t_start=t[0], t_end=t[-1])
        ll = float(event.sum() - comp.sum())
        assert ll == pytest.approx(exact, rel=1e-5), (b, ll, exact)
        assert float(terms["event"][b, n:].abs().sum()) == 0  # padding scores nothing
    assert not bool(terms["scored"][:, 0].any())
    assert s != 1.0  # the check above crossed units for real

    # the check is sensitive: the one-point (midpoint) rule is visibly off
    coarse = TrueProcessTPP.from_data(traj, quadrature=1)
    terms1 = EventModel.log_likelihood_terms(coarse, batch)
    gap = (terms1["compensator"] - terms["compensator"]).abs().max()
    assert float(gap) > 1e-3


#: every kind of true process, each as a small file: (builder, options)
TRUE_KINDS = {
    "poisson_events": dict(marks=2, t_end=15.0),
    "hawkes": dict(marks=2, t_end=15.0),
    "self_correcting": dict(marks=2, t_end=15.0),
    "population_events": dict(window_hours=24.0, span_days=7.0),
    "mobility": dict(days=2.0),
}


@pytest.fixture(scope="module", params=sorted(TRUE_KINDS))
def true_file(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("truth") / f"{request.param}.h5"
    return make_dataset(request.param, 24, out=out, seed=1, **TRUE_KINDS[request.param])


def _loop_intensity(model, batch, H, t_last, tau):
    """The true process's intensity one sequence and event at a time (what
    TrueProcessTPP.intensity computed before it was vectorised)."""
    t, m = batch["t"].numpy(), batch["mark"].numpy()
    out = np.zeros((*tau.shape, model.num_marks))
    tq = tau.double().numpy() * model.time_scale
    for i in range(H.shape[0]):
        for j in range(H.shape[1]):
            b, e = int(H[i, j, 0]), int(H[i, j, 1])
            e = min(e, int(batch["length"][b]) - 1)
            tl = float(t_last[i, j])
            q = np.maximum(tl + tq[i, j], np.nextafter(tl, np.inf))
            params = batch["params"][b].numpy() if "params" in batch else None
            out[i, j] = model.process.intensity(q, t[b, : e + 1], m[b, : e + 1], params=params)
    return torch.as_tensor(out * model.time_scale, dtype=torch.float32)


def test_true_process_is_the_per_sequence_loop_on_every_kind(true_file):
    """TrueProcessTPP, vectorised over the batch, against the per-sequence loop: the
    log-likelihood of each sequence (to float tolerance), the intensities on the
    likelihood's and the prediction's grids (to float32 rounding), hence the scores."""
    traj = data.open(true_file)
    model = TrueProcessTPP.from_data(traj)
    items = event_items(traj, None)
    batch = model.collate(items)
    terms = model.log_likelihood_terms(batch)
    n = batch["length"].numpy()
    proc = model.process
    for b, it in enumerate(items):
        end = float(batch["t_end"][b]) if "t_end" in batch else float(it["t"][-1])
        params = batch["params"][b].numpy() if "params" in batch else None
        t = batch["t"][b, : n[b]].numpy()
        m = batch["mark"][b, : n[b]].numpy()
        want = proc.log_likelihood(t, m, t_start=t[0], t_end=end, params=params) if n[b] > 1 else 0
        assert float(terms["event"][b].sum()) == pytest.approx(want, rel=1e-6, abs=1e-6)
    assert float(terms["compensator"].abs().sum()) == 0.0
    H = terms["H"]
    t_last = batch["t"][:, :-1]
    for tau in (
        torch.cat([batch["dt"][:, 1:, None] * model.gl_nodes, batch["dt"][:, 1:, None]], -1),
        (model.horizon * torch.linspace(0, 1, 16) ** 2).expand(*t_last.shape, 16),
    ):
        got = model.intensity(H[:, :-1], t_last, tau)
        want = _loop_intensity(model, batch, H[:, :-1], t_last, tau)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=0)


def test_true_process_thinning_grows_the_sequences_in_place(hawkes, monkeypatch):
    """Sampling with extend_state (events appended to the batch's sequences) gives
    the sequences the harness's rebuild path gives (extend_state None: history
    recomputed on the grown batch), draw for draw."""
    traj, _ = hawkes
    model = TrueProcessTPP.from_data(traj)
    batch = model.collate(items_of(traj)[:12])
    ends = batch["t"][torch.arange(12), batch["length"] - 1] + 3.0
    fast = model.sample(batch, ends, generator=torch.Generator().manual_seed(5))
    monkeypatch.setattr(TrueProcessTPP, "extend_state", lambda self, *args: None)
    slow = model.sample(batch, ends, generator=torch.Generator().manual_seed(5))
    assert sum(len(s["t"]) for s in fast) > 12
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a["t"], b["t"])
        np.testing.assert_array_equal(a["mark"], b["mark"])


def test_gauss_legendre_rule_integrates_polynomials():
    x, w = gauss_legendre(5)
    assert w.sum() == pytest.approx(1.0)
    assert np.all((x > 0) & (x < 1))
    for k in range(10):  # exact up to degree 2n - 1
        assert (w * x**k).sum() == pytest.approx(1 / (k + 1), rel=1e-12)


# ------------------------------------------------------------------- Poisson, exact
@pytest.mark.parametrize("time_scale", [1.0, 2.5])
def test_poisson_prediction_is_exact(time_scale):
    """Next-event prediction of a Poisson process: E[gap] = (1 - e^{-R h}) / R on the
    horizon h (the grid's trapezoid error aside), type = the largest rate."""
    horizon_data = 40.0
    model = poisson(time_scale, horizon=horizon_data / time_scale)
    H = torch.zeros(2, 3, 1)
    with torch.no_grad():
        offset, kind = model.predict_from_state(H, torch.zeros(2, 3, dtype=torch.float64))
    assert offset.shape == kind.shape == (2, 3)
    R = RATES.sum()
    exact = (1 - math.exp(-R * horizon_data)) / R
    # the rule on the grid tau = h u^2, in float64: what the harness computes
    u = np.linspace(0, 1, model.predict_nodes)
    tau = horizon_data * u**2
    grid = float(np.sum(0.5 * (np.exp(-R * tau[1:]) + np.exp(-R * tau[:-1])) * np.diff(tau)))
    np.testing.assert_allclose(offset.numpy(), grid, rtol=1e-5)
    np.testing.assert_allclose(offset.numpy(), exact, rtol=5e-3)
    assert bool((kind == int(np.argmax(RATES))).all())


def test_poisson_log_likelihood_exact_and_invariant_to_time_units(hawkes_file):
    """ll of a Poisson sequence: sum of log rates of the scored events minus R times the
    span, in data units whatever the model's time_scale; evaluate_events gives the same
    figures for models whose rates are converted between time units."""
    items = [one([0.0, 0.5, 1.7, 4.0], [1, 0, 2, 1]), one([3.0, 3.1], [2, 2])]
    R = RATES.sum()
    exact = [np.log(RATES[[0, 2, 1]]).sum() - 4.0 * R, np.log(RATES[2]) - 0.1 * R]
    results = []
    for s in (1.0, 2.5, 1e-3):
        model = poisson(s)
        with torch.no_grad():
            terms = model.log_likelihood_terms(model.collate(items))
        ll = (terms["event"] - terms["compensator"]).sum(1).double().numpy()
        np.testing.assert_allclose(ll, exact, rtol=1e-5)
        traj = data.open(hawkes_file)
        rates = 2 * [0.5]  # a 2-mark model for the 2-mark file
        model = poisson(s, rates=rates, horizon=30.0 / s)
        results.append(evaluate_events(model, traj, split="test", generate=False))
    for r in results[1:]:
        assert r["ll_per_event"] == pytest.approx(results[0]["ll_per_event"], rel=1e-5)
        assert r["time_rmse"] == pytest.approx(results[0]["time_rmse"], rel=1e-4)
        assert r["events"] == results[0]["events"]


def test_poisson_mle_from_data(tmp_path):
    """PoissonTPP.from_data starts at the maximum-likelihood rates (per data time unit
    after the time change), close to the generating ones."""
    path = make_dataset(
        "poisson_events", 60, out=tmp_path / "p.h5", seed=0, marks=2, rate="0.5,1.5", t_end=40.0
    )
    traj = data.open(path)
    model = PoissonTPP.from_data(traj)
    rate_data = model.log_rate.detach().exp().numpy() / model.time_scale
    np.testing.assert_allclose(rate_data, [0.5, 1.5], rtol=0.1)


def test_poisson_sample_matches_the_rates():
    """Thinning a Poisson model: counts per unit time and mark frequencies match the
    rates (statistical, loose: 4 standard deviations)."""
    model = poisson(2.0, horizon=20.0)
    B, span = 8, 150.0
    batch = model.collate([one([0.0], [0])] * B)
    out = model.sample(
        batch, torch.full((B,), span), max_new=10**6, generator=torch.Generator().manual_seed(0)
    )
    count = sum(len(s["t"]) for s in out)
    expect = RATES.sum() * span * B
    assert abs(count - expect) < 4 * math.sqrt(expect), (count, expect)
    freq = np.bincount(np.concatenate([s["mark"] for s in out]), minlength=3) / count
    p = RATES / RATES.sum()
    assert np.all(np.abs(freq - p) < 4 * np.sqrt(p * (1 - p) / count)), (freq, p)
    for s in out:
        assert np.all(np.diff(s["t"]) > 0) and s["t"][0] > 0 and s["t"][-1] <= span


def test_sample_continues_a_history_and_respects_t_end():
    model = poisson(1.0, horizon=10.0)
    batch = model.collate([one([0.0, 1.0, 2.0], [0, 1, 2]), one([5.0], [1])])
    gen = torch.Generator().manual_seed(0)
    out = model.sample(batch, torch.tensor([9.0, 5.0], dtype=torch.float64), generator=gen)
    assert len(out[0]["t"]) > 0 and out[0]["t"][0] > 2.0 and out[0]["t"][-1] <= 9.0
    assert out[0]["t"].dtype == np.float64 and out[0]["mark"].dtype == np.int64
    assert len(out[1]["t"]) == 0  # t_end at the last event: nothing new
    capped = model.sample(batch, torch.tensor([500.0, 500.0]), max_new=7, generator=gen)
    assert [len(s["t"]) for s in capped] == [7, 7]


# ----------------------------------------------------------- generation distances
def _seqs(seed=0, n=30, marks=3):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        L = int(rng.integers(5, 20))
        out.append(
            {
                "t": np.cumsum(rng.exponential(2.0, L)),
                "mark": rng.integers(0, marks, L),
                "loc_id": rng.integers(0, 4, L),
            }
        )
    return out


def test_generation_distances_vanish_for_identical_sets():
    real = _seqs()
    d = generation_distances(real, real, num_marks=3, num_locations=4, day_length=24.0)
    assert set(d) == {"gap_w1", "count_w1", "mark_jsd", "daily_jsd", "location_jsd"}
    for key, value in d.items():
        assert value == pytest.approx(0.0, abs=1e-12), key


def test_generation_distances_grow_for_shifted_sets():
    real = _seqs()
    # every gap scaled by c: W1 = (c - 1) E[gap], so gap_w1 = c - 1 exactly
    c = 1.5
    slow = [{**s, "t": c * s["t"]} for s in real]
    d = generation_distances(real, slow, num_marks=3)
    assert d["gap_w1"] == pytest.approx(c - 1, rel=1e-9)
    assert d["count_w1"] == 0 and d["mark_jsd"] == 0
    # disjoint marks: the JSD's maximum, log 2
    only0 = [{**s, "mark": np.zeros_like(s["mark"])} for s in real]
    only1 = [{**s, "mark": np.ones_like(s["mark"])} for s in real]
    assert generation_distances(only0, only1, num_marks=3)["mark_jsd"] == pytest.approx(math.log(2))
    # half the events dropped: the counts move, W1 = mean count lost / mean count
    half = [{k: v[: len(v) // 2] for k, v in s.items()} for s in real]
    d = generation_distances(real, half, num_marks=3)
    rc = np.array([len(s["t"]) for s in real])
    lost = rc - rc // 2
    assert d["count_w1"] == pytest.approx(lost.mean() / rc.mean(), rel=1e-9)
    # events at 2 am versus 2 pm: the time-of-day histograms are disjoint
    night = [{"t": np.array([2.0, 26.0, 50.0]), "mark": np.zeros(3, int)}]
    noon = [{"t": np.array([14.0, 38.0, 62.0]), "mark": np.zeros(3, int)}]
    d = generation_distances(night, noon, num_marks=1, day_length=24.0)
    assert d["daily_jsd"] == pytest.approx(math.log(2))
    assert d["gap_w1"] == pytest.approx(0.0, abs=1e-12)  # same gaps
    at0 = [{**s, "loc_id": np.zeros_like(s["loc_id"])} for s in real]
    at3 = [{**s, "loc_id": np.full_like(s["loc_id"], 3)} for s in real]
    d = generation_distances(at0, at3, num_marks=3, num_locations=4)
    assert d["location_jsd"] == pytest.approx(math.log(2))


# ---------------------------------------------------------------- rules of a batch
@pytest.mark.parametrize(
    ("item", "match"),
    [
        (one([0.0, 1.0, 1.0], [0, 0, 0]), r"strictly increasing, but t\[2\] = 1.0 follows"),
        (one([0.0, 2.0, 1.0], [0, 0, 0]), r"strictly increasing, but t\[2\] = 1.0"),
        (one([0.0, 1.0], [0, 3]), r"marks must lie in 0..2 \(num_marks=3\), got a mark 3"),
        (one([0.0, 1.0], [-1, 0]), "got a mark -1"),
        (one([], []), "an empty sequence"),
        (one(np.arange(6.0), [0] * 6), "6 events exceed max_events=5; pass truncate=True"),
        (one([0.0, 1.0], [0, 1], group=2), r"group 2 outside 0..1 \(num_groups=2\)"),
        (one([0.0, 1.0], [0, 1], group=-1), "group -1 outside"),
        (one([0.0, 1.0], [0, 1], loc_id=np.array([0, 4])), r"loc_id must lie in 0..3"),
        (one([0.0, 1.0], [0, 1], loc_id=np.array([-1, 0])), r"loc_id must lie in 0..3"),
    ],
)
def test_collate_rejects_bad_sequences(item, match):
    model = poisson(1.0, num_groups=2, num_locations=4, max_events=5)
    good = one([0.0, 0.5], [0, 1])
    with pytest.raises(ValueError, match=match):
        model.collate([good, {**item, "episode": 7}])
    with pytest.raises(ValueError, match="episode 7"):  # the message names the episode
        model.collate([{**item, "episode": 7}])


def test_collate_rejects_a_nan_time_with_a_clear_message():
    with pytest.raises(ValueError, match="must be finite"):
        poisson().collate([one([0.0, float("nan"), 2.0], [0, 0, 0])])


def test_collate_rejects_an_empty_batch():
    with pytest.raises(ValueError, match="empty batch"):
        poisson().collate([])


def test_truncate_keeps_the_first_events():
    model = poisson(1.0, max_events=4, truncate=True, num_locations=5)
    batch = model.collate([one(np.arange(7.0), [0, 1, 2, 0, 1, 2, 0], loc_id=np.arange(7) % 5)])
    assert batch["t"].shape == (1, 4)
    assert batch["t"][0].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert batch["mark"][0].tolist() == [0, 1, 2, 0]
    assert batch["loc_id"][0].tolist() == [0, 1, 2, 3]


def test_collate_layout():
    model = poisson(2.0, num_groups=3)
    batch = model.collate([one([1.0, 2.0, 5.0], [0, 1, 2], group=2), one([4.0], [1])])
    assert batch["t"].dtype == torch.float64 and batch["mark"].dtype == torch.int64
    assert batch["t"][1].tolist() == [4.0, 4.0, 4.0]  # padding repeats the last time
    assert batch["valid"].tolist() == [[True, True, True], [True, False, False]]
    assert batch["length"].tolist() == [3, 1] and batch["group"].tolist() == [2, 0]
    torch.testing.assert_close(batch["dt"][0], torch.tensor([0.0, 0.5, 1.5]))  # model units
    assert batch["dt"][1].tolist() == [0.0, 0.0, 0.0]


def test_sample_refuses_bad_requests():
    model = poisson(1.0)
    batch = model.collate([one([0.0, 3.0], [0, 1]), one([1.0], [2])])
    with pytest.raises(ValueError, match="t_end lies before a sequence's last event"):
        model.sample(batch, torch.tensor([2.0, 5.0]))
    with pytest.raises(ValueError, match=r"one end time per sequence \(2\), got 3"):
        model.sample(batch, torch.tensor([5.0, 5.0, 5.0]))
    empty = {k: v.clone() for k, v in batch.items()}
    empty["valid"][1] = False
    empty["length"][1] = 0
    with pytest.raises(ValueError, match="every sequence needs >= 1 event"):
        model.sample(empty, torch.tensor([5.0, 5.0]))


# ------------------------------------------------------------------------ files
def test_from_data_refuses_other_files_and_windows(tmp_path, hawkes_file):
    from simsci.systems import generate

    state = generate(
        "lorenz63", 1, t_end=0.1, dt=0.05, out=tmp_path / "s.h5", device="cpu", progress=False
    )
    traj = data.open(state)
    assert traj.kind == "state"
    for cls in (PoissonTPP, EventModel):
        with pytest.raises(ValueError, match="kind='events' files with a step field 'mark'"):
            cls.from_data(traj)
    with pytest.raises(ValueError, match="does not record its generating process"):
        TrueProcessTPP.from_data(traj)
    events = data.open(hawkes_file)
    with pytest.raises(ValueError, match="drop --window"):
        PoissonTPP.from_data(events, window=8)
    with pytest.raises(ValueError, match="one task 'next_event', got 'interpolation'"):
        PoissonTPP.from_data(events, task="interpolation")


def test_true_process_from_data_refuses_windows(hawkes_file):
    events = data.open(hawkes_file)
    with pytest.raises(ValueError, match="drop --window"):
        TrueProcessTPP.from_data(events, window=8)
    with pytest.raises(ValueError, match="one task 'next_event'"):
        TrueProcessTPP.from_data(events, task="interpolation")


def test_event_file_kwargs(tmp_path):
    path = make_dataset(
        "population_events", 20, out=tmp_path / "pop.h5", seed=0, window_hours=24.0,
        span_days=7.0, max_events=12,
    )  # fmt: skip
    traj = data.open(path)
    kw = event_file_kwargs(traj)
    split = np.asarray(traj.column("split"))
    gaps = np.concatenate([np.diff(traj[int(i)]["t"]) for i in np.flatnonzero(split == 0)])
    assert kw["time_scale"] == pytest.approx(float(np.median(gaps)))
    assert kw["horizon"] == pytest.approx(3 * np.quantile(gaps, 0.995) / kw["time_scale"])
    assert kw["num_marks"] == 3 and kw["num_groups"] == 2 and kw["day_length"] == 24.0
    train_ends = [float(traj[int(i)]["t"][-1]) for i in np.flatnonzero(split == 0)]
    assert kw["calendar_span"] == pytest.approx(max(train_ends))
    # the oracle reads the per-sequence random effects (/episodes/params)
    model = TrueProcessTPP.from_data(traj)
    items = [
        {**it, "params": traj[it["episode"]]["params"], "group": traj[it["episode"]]["group"]}
        for it in items_of(traj, "test")
    ]
    proc = model.process
    windows = traj.column("window")  # the likelihood runs to each window's end
    exact = sum(
        proc.log_likelihood(it["t"], it["mark"], t_start=it["t"][0],
                            t_end=float(windows[it["episode"]][1]), params=it["params"])
        for it in items
    )  # fmt: skip
    got = evaluate_events(model, traj, split="test", generate=False)
    assert got["ll_per_event"] == pytest.approx(exact / got["events"], rel=1e-5)


@pytest.mark.parametrize(
    "kw",
    [
        {"num_marks": 0},
        {"num_marks": True},
        {"num_groups": 0},
        {"num_locations": -1},
        {"quadrature": 0},
        {"quadrature": 2.5},
        {"predict_nodes": 4},
        {"max_events": 1},
        {"time_scale": 0.0},
        {"time_scale": float("nan")},
        {"horizon": float("inf")},
        {"horizon": -1.0},
    ],
)
def test_bad_harness_arguments(kw):
    args = {"num_marks": 2, **kw}
    with pytest.raises(ValueError, match=next(iter(kw))):
        EventModel(**args)


def test_the_likelihood_runs_to_the_window_end():
    """With the window's end recorded (t_end, or window[1]) the compensator runs past
    the last event to it: exactly sum log r - R (T - t_0) for a Poisson model."""
    model = poisson()
    R = float(np.sum(RATES))
    t, m = [0.5, 1.0, 2.5], [0, 1, 0]
    for extra in ({"t_end": np.float64(4.0)}, {"window": np.array([0.0, 4.0])}):
        batch = model.collate([one(t, m, **extra)])
        terms = model.log_likelihood_terms(batch)
        ll = float(terms["event"].sum() - terms["compensator"].sum())
        exact = np.log(RATES[0]) + np.log(RATES[1]) - R * (4.0 - 0.5)
        assert ll == pytest.approx(exact, rel=1e-6)
    with pytest.raises(ValueError, match="window ends at"):
        model.collate([one(t, m, t_end=np.float64(2.0))])
