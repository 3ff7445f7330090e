"""CoCLD (simsci.models.cocld): shapes and signs, gradients, the exponential-midpoint
integrator (order 2, exact for the decay), the recurrent update, padding, the
population latent's reading of absolute time (and the ablation's invariance), the
diffusion interpolator, generation, checkpoints, bad arguments, and that a small CoCLD
learns a daily-periodic process better than the Poisson baseline and its own ablation."""

import json

import numpy as np
import pytest
import torch

from simsci import data, train
from simsci.datasets import make_dataset
from simsci.models import MODELS
from simsci.models._events import evaluate_events
from simsci.models.cocld import CoCLD, LatentDiffusion
from simsci.models.cocld._diffusion import cosine_schedule
from simsci.models.cocld._recurrence import Recurrence
from simsci.models.point_process import PoissonTPP

torch.set_num_threads(1)

K, G, D, P = 3, 2, 6, 3


def build(**kw):
    torch.manual_seed(0)
    args = dict(num_groups=G, day_length=24.0, calendar_span=60.0, latent_dim=D, pop_dim=P,
                hidden=16, diffusion_steps=5)  # fmt: skip
    return CoCLD(K, **{**args, **kw}).eval()


def items(n=4, seed=0, t0=0.0, locations=0):
    """Short K-mark sequences of different lengths at calendar times in [0, 40]."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        L = int(rng.integers(3, 9))
        t = t0 + rng.uniform(0, 30) + np.cumsum(rng.exponential(1.0, L))
        it = {"t": t, "mark": rng.integers(0, K, L), "group": i % G, "episode": i}
        if locations:
            it["loc_id"] = rng.integers(0, locations, L)
        out.append(it)
    return out


def per_sequence_ll(model, batch):
    with torch.no_grad():
        terms = model.log_likelihood_terms(batch)
    return (terms["event"] - terms["compensator"]).sum(1)


def test_registered():
    assert MODELS["cocld"] is CoCLD and MODELS["poisson_tpp"] is PoissonTPP


# -------------------------------------------------------------------- shapes, signs
@pytest.mark.parametrize("use_population", [True, False])
def test_shapes_and_positive_intensity(use_population):
    model = build(use_population=use_population)
    batch = model.collate(items())
    B, L = batch["t"].shape
    with torch.no_grad():
        H = model.history(batch)
        assert H.shape == (B, L, D + 1)  # [h, group id]
        assert H[..., D].tolist() == batch["group"][:, None].expand(B, L).double().tolist()
        tau, _ = torch.sort(torch.rand(B, L, 5) * 10, -1)
        lam = model.intensity(H, batch["t"], tau)
        assert lam.shape == (B, L, 5, K)
        assert torch.isfinite(lam).all() and (lam > 0).all()
        feats = model.features(H, batch["t"], tau)
        assert feats.shape == (B, L, 5, D + (P if use_population else 0))
        terms = model.log_likelihood_terms(batch)
    for key in ("event", "compensator"):
        assert terms[key].shape == (B, L) and torch.isfinite(terms[key]).all()
    assert (terms["compensator"][terms["scored"]] > 0).all()
    pred = model.predict_next(batch)
    assert np.isfinite(float(pred["time_rmse"])) and 0 <= float(pred["type_accuracy"]) <= 1
    json.dumps(model.init_args)


@pytest.mark.parametrize(("use_population", "locations"), [(True, 0), (True, 4), (False, 0)])
def test_gradients_flow(use_population, locations):
    """Every parameter the model uses gets a finite, nonzero gradient from the loss
    (likelihood + alignment, + locations); the ablation leaves the population net out."""
    model = build(use_population=use_population, num_locations=locations).train()
    out = model.training_step(model.collate(items(locations=locations)))
    assert {"ll_per_event", "align", "loss"} <= set(out)
    assert ("loc_nll" in out) == bool(locations)
    out["loss"].backward()
    unused = set()
    if not use_population:
        # no z: the population net is idle and init_net reads a constant zero input
        unused = {n for n, _ in model.named_parameters() if n.startswith(("pop_net", "group_"))}
        unused.add("init_net.0.weight")
    for name, p in model.named_parameters():
        if name in unused:
            assert p.grad is None or p.grad.abs().sum() == 0, name
            continue
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


# --------------------------------------------------------------------- integrator
def test_exponential_midpoint_converges_at_order_two():
    """The error of _integrate against a 256-step solve of the same field falls ~4x per
    halving of the step (fitted slope ~ -2), with the population latent moving in t."""
    model = build().double()
    with torch.no_grad():  # a livelier field than the initial one
        for p in model.field.parameters():
            p.mul_(2.0)
    gen = torch.Generator().manual_seed(0)
    N = 6
    h = torch.randn(N, D, dtype=torch.float64, generator=gen)
    t0 = 50 * torch.rand(N, dtype=torch.float64, generator=gen)
    span = 1 + 2 * torch.rand(N, dtype=torch.float64, generator=gen)
    group = torch.arange(N) % G
    with torch.no_grad():
        ref = model._integrate(h, t0, span, group, steps=256)
        steps = [1, 2, 4, 8]
        err = [float((model._integrate(h, t0, span, group, steps=s) - ref).abs().max())
               for s in steps]  # fmt: skip
    slope = np.polyfit(np.log(steps), np.log(err), 1)[0]
    assert abs(slope + 2) < 0.4, (err, slope)
    assert err[-1] < 0.02 * err[0]


def test_integrator_is_exact_for_the_pure_decay():
    model = build().double()
    with torch.no_grad():
        model.field[-1].weight.zero_()
        model.field[-1].bias.zero_()
        model.decay.copy_(torch.linspace(-3, 2, D))
    h = torch.randn(4, D, dtype=torch.float64)
    t0 = torch.tensor([0.0, 3.0, 10.0, 20.0], dtype=torch.float64)
    span = torch.tensor([0.0, 0.5, 2.0, 7.0], dtype=torch.float64)
    rate = torch.nn.functional.softplus(model.decay)
    exact = h * torch.exp(-rate * span[:, None])
    with torch.no_grad():
        for steps in (1, 3):
            got = model._integrate(h, t0, span, torch.zeros(4, dtype=torch.long), steps=steps)
            torch.testing.assert_close(got, exact, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------- recurrence, padding
def test_extend_state_is_one_more_event():
    """extend_state gives the state that history computes on the grown sequence."""
    model = build()
    its = items(n=3)
    batch = model.collate(its)
    rows = torch.arange(3)
    last = batch["length"] - 1
    tau = torch.tensor([0.3, 1.7, 0.05])
    mark = torch.tensor([2, 0, 1])
    t_last = batch["t"][rows, last]
    with torch.no_grad():
        H = model.history(batch)
        new = model.extend_state(H[rows, last], t_last, tau, mark, batch["group"])
        grown = [
            {**it, "t": np.append(it["t"], float(t_last[b]) + float(tau[b]) * model.time_scale),
             "mark": np.append(it["mark"], int(mark[b]))}
            for b, it in enumerate(its)
        ]  # fmt: skip
        gb = model.collate(grown)
        ref = model.history(gb)[rows, gb["length"] - 1]
    torch.testing.assert_close(new, ref, rtol=1e-5, atol=1e-5)


def test_padding_does_not_leak():
    """A padded batch gives each sequence the log-likelihood it has alone."""
    model = build(num_locations=4)
    its = items(n=5, locations=4)
    assert len({len(it["t"]) for it in its}) > 1
    together = per_sequence_ll(model, model.collate(its))
    alone = torch.cat([per_sequence_ll(model, model.collate([it])) for it in its])
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)


# ------------------------------------------------ batched solves vs the event loop
class LoopCoCLD(CoCLD):
    """The first CoCLD's solves, kept as the reference: a Python loop over events whose
    every step computes z and calls the field on [h, z] and nn.GRUCell, and an intensity
    path that computes z at each quadrature node's steps in turn."""

    def _loop_integrate(self, h, t0, span, group, steps=None):
        steps = self.substeps if steps is None else steps
        rate = torch.nn.functional.softplus(self.decay)
        s = (span / steps)[:, None]
        decay, half = torch.exp(-rate * s), torch.exp(-rate * s / 2)
        phi, phi_half = -torch.expm1(-rate * s) / rate, -torch.expm1(-rate * s / 2) / rate
        for i in range(steps):
            t_mid = t0 + (i + 0.5) * (span / steps).double() * self.time_scale
            z = self._z(t_mid, group)
            g1 = torch.tanh(self.field(self._cat(h, z)))
            mid = half * h + phi_half * g1
            g2 = torch.tanh(self.field(self._cat(mid, z)))
            h = decay * h + phi * g2
        return h

    def _loop_jump(self, h, mark, t, group):
        return self.jump(self._cat(self.mark_embed(mark), self._z(t, group)), h)

    def history(self, batch):
        t, dt, mark, valid, group = (batch[k] for k in ("t", "dt", "mark", "valid", "group"))
        h = batch["h0"] if "h0" in batch else self.initial_state(t[:, 0], group)
        out = []
        for j in range(t.shape[1]):
            if j > 0:
                h = self._loop_integrate(h, t[:, j - 1], dt[:, j], group)
            h_new = self._loop_jump(h, mark[:, j], t[:, j], group)
            h = torch.where(valid[:, j, None], h_new, h)
            out.append(h)
        h = torch.stack(out, 1)
        return self._with_group(h, group[:, None].expand(h.shape[:2]))

    def intensity(self, H, t_last, tau):
        h, z = self._loop_path(H, t_last, tau)
        return torch.nn.functional.softplus(self.head(self._cat(h, z)))

    def features(self, H, t_last, tau):
        return self._cat(*self._loop_path(H, t_last, tau))

    def _loop_path(self, H, t_last, tau):
        B, L, G = tau.shape
        h, group = self._split(H)
        h, g = h.reshape(B * L, -1), group.reshape(B * L)
        t0, taus = t_last.reshape(B * L), tau.reshape(B * L, G)
        hs, prev = [], torch.zeros_like(taus[:, 0])
        for k in range(G):
            step = (taus[:, k] - prev).clamp_min(0)
            h = self._loop_integrate(
                h, t0 + prev.double() * self.time_scale, step, g, self._steps(step, 1)
            )
            hs.append(h)
            prev = taus[:, k]
        h = torch.stack(hs, 1).reshape(B, L, G, -1)
        t_abs = t_last[..., None] + tau.double() * self.time_scale
        return h, self._z(t_abs, group[..., None].expand(B, L, G))


def windowed(its, extra=2.0):
    return [{**it, "t_end": float(it["t"][-1]) + extra * (1 + i % 2)} for i, it in enumerate(its)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("use_population", "day"), [(True, 24.0), (True, None), (False, 24.0)])
def test_batched_solves_match_the_event_loop(dtype, use_population, day):
    """The batched history and intensity path give the per-sequence log-likelihood
    (events, compensator with the survival to the window end, locations) and the
    gradients of the event loop, on sequences of unequal length (one of a single event),
    with long gaps that take several steps per quadrature node."""
    kw = dict(use_population=use_population, day_length=day, num_locations=4, max_step=0.5)
    model = build(**kw).to(dtype).train()
    ref = LoopCoCLD(**{**model.init_args, "diffusion_steps": 5}).to(dtype).train()
    ref.load_state_dict(model.state_dict())
    its = windowed(items(n=6, locations=4))
    its[2] = {**its[2], "t": its[2]["t"][:1], "mark": its[2]["mark"][:1],
              "loc_id": its[2]["loc_id"][:1]}  # fmt: skip
    batch = model.collate(its)
    assert len(set(batch["length"].tolist())) > 2 and "t_end" in batch
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-12}
    got, want = model.log_likelihood_terms(batch), ref.log_likelihood_terms(batch)
    for key in ("event", "compensator", "loc", "H"):
        torch.testing.assert_close(got[key], want[key], **tol)
    ll = (got["event"] - got["compensator"] + got["loc"]).sum(1)
    ll_ref = (want["event"] - want["compensator"] + want["loc"]).sum(1)
    torch.testing.assert_close(ll, ll_ref, **tol)
    torch.manual_seed(1)
    model.training_step(batch)["loss"].backward()
    torch.manual_seed(1)
    ref.training_step(batch)["loss"].backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        if q.grad is None:
            assert p.grad is None or not p.grad.any(), name
            continue
        torch.testing.assert_close(p.grad, q.grad, **tol, msg=name)


@pytest.mark.parametrize("jumps", [True, False])
def test_recurrence_backward_passes_gradcheck(jumps):
    """The hand-written backward of the batched recurrence against finite differences
    (float64), with segments of 0, 1 and 2 steps and rows that skip a jump."""
    gen = torch.Generator().manual_seed(0)
    B, d, w, counts = 3, 4, 5, (0, 2, 1, 2)
    J, S = len(counts), sum(counts)

    def rnd(*shape, scale=1.0):
        x = scale * torch.randn(*shape, dtype=torch.float64, generator=gen)
        return x.requires_grad_()

    E, Eh, phi, phih = (rnd(J, B, d, scale=0.5) for _ in range(4))
    args = [rnd(B, d), rnd(S, B, w), E, Eh, phi, phih, rnd(d, w), rnd(d, w), rnd(d)]
    if jumps:
        keep = torch.ones(J, B, 1, dtype=torch.bool)
        keep[2:, 1] = False
        args += [rnd(J, B, 3 * d), rnd(3 * d, d), rnd(3 * d), keep, counts]
    else:
        args += [None, None, None, None, counts]
    assert torch.autograd.gradcheck(Recurrence.apply, args)


def test_path_on_rows_without_offsets():
    """Offsets all 0 (padding rows) keep the state, mixed with integrated rows."""
    model = build()
    ref = LoopCoCLD(**{**model.init_args, "diffusion_steps": 5}).eval()
    ref.load_state_dict(model.state_dict())
    batch = model.collate(items(n=3))
    with torch.no_grad():
        H = model.history(batch)
        tau = torch.sort(torch.rand(3, H.shape[1], 4) * 9, -1).values
        tau[0] = 0
        tau[:, -1] = 0
        for m in (model, ref):
            torch.testing.assert_close(
                model.intensity(H, batch["t"], tau), m.intensity(H, batch["t"], tau)
            )
        zero = torch.zeros(3, H.shape[1], 2)
        torch.testing.assert_close(
            model.intensity(H, batch["t"], zero), ref.intensity(H, batch["t"], zero)
        )


# --------------------------------------------------------------- absolute time
def test_population_latent_reads_absolute_time():
    """With day_length the population latent z(t, g) is a function of calendar time: a
    half-day shift changes the likelihood; without trend features a whole week (the
    longest harmonic) leaves it as it is."""
    model = build(trend_features=0)
    base = per_sequence_ll(model, model.collate(items()))
    half_day = per_sequence_ll(model, model.collate(items(t0=12.0)))
    week = per_sequence_ll(model, model.collate(items(t0=7 * 24.0)))
    assert (base - half_day).abs().min() > 1e-3
    torch.testing.assert_close(week, base, rtol=1e-4, atol=1e-4)
    # and z itself: periodic in the week, different half a day later, per group
    t = torch.linspace(0, 30, 7, dtype=torch.float64)
    g = torch.zeros(7, dtype=torch.long)
    z = model.population(t, g)
    assert z.shape == (7, P)
    torch.testing.assert_close(model.population(t + 168.0, g), z, rtol=1e-5, atol=1e-5)
    assert (model.population(t + 12.0, g) - z).abs().max() > 1e-3
    assert (model.population(t, g + 1) - z).abs().max() > 1e-3
    # the trend features read t / calendar_span: with them even a week's shift shows
    trended = build()
    a = per_sequence_ll(trended, trended.collate(items()))
    b = per_sequence_ll(trended, trended.collate(items(t0=7 * 24.0)))
    assert (a - b).abs().max() > 1e-3


@pytest.mark.parametrize("shift", [12.0, 7 * 24.0, 1e5])
def test_ablation_is_invariant_to_a_shift_of_time(shift):
    """use_population=False drops z everywhere (trend features included): the model
    reads only gaps, so shifting every time changes nothing."""
    model = build(use_population=False)
    a = per_sequence_ll(model, model.collate(items()))
    b = per_sequence_ll(model, model.collate(items(t0=shift)))
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------ diffusion interpolator
def test_cosine_schedule():
    abar = cosine_schedule(50)
    assert abar.shape == (51,) and abar[0] == 1
    assert bool((abar[1:] < abar[:-1]).all()) and 0 < float(abar[-1]) < 1e-2
    assert float((1 - abar[1:] / abar[:-1]).max()) <= 0.999 + 1e-12


def test_latent_diffusion_learns_a_conditional_gaussian():
    """A tiny DDPM learns h | c ~ N((2c + 1, 0.5 - c), 0.3^2 I): the sample means follow
    the condition."""

    def draw(n, gen):
        c = 2 * torch.rand(n, 1, generator=gen) - 1
        mean = torch.cat([2 * c + 1, 0.5 - c], -1)
        return mean + 0.3 * torch.randn(n, 2, generator=gen), c

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = LatentDiffusion(2, 1, hidden=64, steps=20)
    h, _ = draw(4000, gen)
    for _ in range(100):
        model.update_stats(h, momentum=0.1)
    torch.testing.assert_close(model.mean, h.mean(0), rtol=0, atol=1e-3)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 500)
    for _ in range(500):
        h, c = draw(256, gen)
        loss = model.loss(h, c, generator=gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    assert loss.item() < 0.4  # from ~1 (the noise's own variance)
    for c in (-0.8, 0.0, 0.8):
        x = model.sample(torch.full((2000, 1), c), generator=torch.Generator().manual_seed(2))
        assert x.shape == (2000, 2)
        torch.testing.assert_close(x.mean(0), torch.tensor([2 * c + 1, 0.5 - c]), rtol=0,
                                   atol=0.25)  # fmt: skip
        assert bool(((x.std(0) > 0.15) & (x.std(0) < 0.45)).all()), x.std(0)


def test_latent_diffusion_rejects_one_step():
    with pytest.raises(ValueError, match="diffusion steps must be >= 2"):
        LatentDiffusion(2, 1, steps=1)


@pytest.mark.parametrize("use_population", [True, False])
def test_sample_population_shapes(use_population):
    model = build(use_population=use_population)
    gen = torch.Generator().manual_seed(0)
    draws = model.sample_population(torch.tensor([1.0, 5.0, 30.0]), 1, n=4, generator=gen)
    assert draws.shape == (3, 4, D) and torch.isfinite(draws).all()
    groups = model.sample_population([0.0, 1.0], [0, 1], n=2, generator=gen)
    assert groups.shape == (2, 2, D)
    h0 = model.initial_state(torch.tensor([0.0, 1.0], dtype=torch.float64), torch.tensor([0, 1]))
    assert h0.shape == (2, D)


# --------------------------------------------------------------------- generation
def test_generate_new_sequences():
    model = build(num_locations=4)
    start = torch.tensor([0.0, 10.0, 5.0], dtype=torch.float64)
    end = torch.tensor([6.0, 14.0, 9.0], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    out = model.generate(start, end, torch.tensor([0, 1, 1]), generator=gen)
    assert len(out) == 3 and sum(len(s["t"]) for s in out) > 0
    for b, seq in enumerate(out):
        t, m = seq["t"], seq["mark"]
        assert t.dtype == np.float64 and m.dtype == np.int64 and len(t) == len(m)
        assert len(seq["loc_id"]) == len(t)
        if len(t):
            assert float(start[b]) <= t[0] and t[-1] <= float(end[b])
            assert np.all(np.diff(t) > 0)
            assert 0 <= m.min() and m.max() < K
            assert 0 <= seq["loc_id"].min() and seq["loc_id"].max() < 4
    capped = model.generate(torch.zeros(2), torch.full((2,), 1e4), 0, max_events=5, generator=gen)
    assert [len(s["t"]) for s in capped] == [5, 5]
    again = model.generate(start, end, torch.tensor([0, 1, 1]),
                           generator=torch.Generator().manual_seed(0))  # fmt: skip
    for a, b in zip(out, again):  # the generator fixes the draws
        np.testing.assert_array_equal(a["t"], b["t"])


def test_generate_refuses_bad_windows_and_groups():
    model = build()
    with pytest.raises(ValueError, match="t_end > t_start"):
        model.generate(torch.tensor([5.0]), torch.tensor([5.0]))
    with pytest.raises(ValueError, match="t_end > t_start"):
        model.generate(torch.tensor([5.0, 0.0]), torch.tensor([6.0, -1.0]))
    with pytest.raises(ValueError, match="one pair per sequence"):
        model.generate(torch.tensor([0.0, 1.0]), torch.tensor([5.0]))
    for group in (G, -1):
        with pytest.raises(ValueError, match=f"group must lie in 0..{G - 1}"):
            model.generate(torch.tensor([0.0]), torch.tensor([5.0]), group)


def test_sample_continues_a_history():
    model = build()
    batch = model.collate(items(n=3))
    rows = torch.arange(3)
    t_last = batch["t"][rows, batch["length"] - 1]
    for start in (True, False):  # from a draw of the population law, or its mean
        gen = torch.Generator().manual_seed(1)
        out = model.sample(batch, t_last + 4.0, max_new=40, generator=gen, population_start=start)
        assert len(out) == 3
        for b, seq in enumerate(out):
            if len(seq["t"]):
                assert seq["t"][0] > float(t_last[b]) and seq["t"][-1] <= float(t_last[b]) + 4.0
                assert np.all(np.diff(seq["t"]) > 0) and 0 <= seq["mark"].min() < K
    with pytest.raises(ValueError, match="t_end lies before a sequence's last event"):
        model.sample(batch, t_last - 1.0)


# -------------------------------------------------------------------- checkpoints
def test_checkpoint_round_trip(tmp_path):
    model = build(num_locations=3, time_scale=0.7, horizon=12.5)
    with torch.no_grad():  # off the initial values, the diffusion statistics included
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    model.diffusion.update_stats(torch.randn(50, D) * 3 + 1, momentum=0.5)
    path = train.save_model(model, tmp_path / "m.pt")
    loaded = train.load_model(path)
    assert type(loaded) is CoCLD and loaded.init_args == model.init_args
    batch = model.collate(items(locations=3))
    torch.testing.assert_close(per_sequence_ll(loaded, batch), per_sequence_ll(model, batch),
                               rtol=0, atol=0)  # fmt: skip
    with torch.no_grad():
        lt, mt = loaded.log_likelihood_terms(batch)["loc"], model.log_likelihood_terms(batch)["loc"]
    torch.testing.assert_close(lt, mt, rtol=0, atol=0)
    a = model.sample_population([3.0], [1], n=3, generator=torch.Generator().manual_seed(0))
    b = loaded.sample_population([3.0], [1], n=3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(a, b, rtol=0, atol=0)


# ------------------------------------------------------------------ bad arguments
@pytest.mark.parametrize(
    "kw",
    [
        {"latent_dim": 0},
        {"latent_dim": 2.5},
        {"pop_dim": 0},
        {"hidden": True},
        {"substeps": 0},
        {"substeps": 1.5},
        {"diffusion_steps": 1},
        {"num_marks": 0},
        {"time_scale": -1.0},
        {"horizon": float("nan")},
        {"max_events": 1},
    ],
)
def test_bad_arguments(kw):
    args = {"num_marks": 2, **kw}
    with pytest.raises(ValueError):
        CoCLD(**args)


@pytest.mark.parametrize("kw", [{"harmonics": -1}, {"trend_features": -1}])
def test_negative_feature_counts_are_refused(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        CoCLD(2, day_length=24.0, **kw)


def test_population_without_calendar_features():
    """Either refused up front with a message naming the cause, or z = MLP(e_g) works."""
    try:
        model = CoCLD(2, trend_features=0)
    except ValueError as exc:
        assert "trend_features" in str(exc) or "day_length" in str(exc)
        return
    batch = model.collate([{"t": np.array([0.0, 1.0, 2.5]), "mark": np.array([0, 1, 0])}])
    assert torch.isfinite(per_sequence_ll(model, batch)).all()


# ----------------------------------------------------------------------- learning
@pytest.fixture(scope="module")
def daily_file(tmp_path_factory):
    """80 sequences of a 1-mark Poisson process with a daily cycle, rate 0.5 (1 + 0.8
    sin(2 pi t / 24)) on [0, 48] (~25 events each), split 70/0/30 %."""
    out = tmp_path_factory.mktemp("cocld") / "daily.h5"
    return make_dataset("poisson_events", 80, out=out, seed=1, rate=0.5, amplitude=0.8,
                        period=24.0, t_end=48.0, split=(0.7, 0.0, 0.3))  # fmt: skip


def _fit(model, items, steps, *, batch_size=16, lr=1e-2, seed=0):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    model.train()
    for _ in range(steps):
        idx = rng.choice(len(items), batch_size, replace=False)
        out = model.training_step(model.collate([items[i] for i in idx]))
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    return model.eval()


def test_learns_a_daily_cycle_better_than_poisson_and_the_ablation(daily_file):
    """The population latent reads the time of day: after 60 steps CoCLD beats the
    Poisson floor and its use_population=False ablation on held-out ll_per_event."""
    from simsci.models import event_items

    traj = data.open(daily_file)
    train_items = event_items(traj, "train")
    baseline = evaluate_events(PoissonTPP.from_data(traj), traj, split="test", generate=False)
    small = dict(day_length=24.0, latent_dim=8, pop_dim=4, hidden=16, substeps=1,
                 diffusion_steps=10, quadrature=8, predict_nodes=16)  # fmt: skip
    got = {}
    for use_population in (True, False):
        torch.manual_seed(0)
        model = CoCLD.from_data(traj, use_population=use_population, **small)
        assert model.day_length == 24.0 and model.num_marks == 1
        _fit(model, train_items, 60)
        got[use_population] = evaluate_events(model, traj, split="test", generate=False)
    full, ablation = got[True], got[False]
    assert full["events"] == baseline["events"] > 300
    assert full["ll_per_event"] > baseline["ll_per_event"] + 0.08, (full, baseline)
    assert full["ll_per_event"] > ablation["ll_per_event"] + 0.02, (full, ablation)
