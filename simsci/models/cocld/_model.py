r"""CoCLD: coupled continuous-time latent dynamics for irregular event sequences.

The paper's abstract (shared/design/papers.md) fixes the ingredients: individual
latent neural ODEs, a population-level distributional process, the two coupled and
aligned in one continuous-time latent space, and a diffusion-based latent
interpolator. The details are simsci's own:

**Population latent.** :math:`z(t, g) = \mathrm{MLP}([\phi(t), e_g]) \in \mathbb R^P`,
a continuous function of *calendar* time t (the file's absolute times) and the
population id g. :math:`\phi(t)` holds the harmonics n = 1..``harmonics`` of the day
and the week (sin and cos of :math:`2\pi n t / T_{day}`, :math:`2\pi n t / 7T_{day}`)
when the file gives ``day_length``, and ``trend_features`` Gaussian bumps over
:math:`t / T_{span}` (``calendar_span``: the end of the training data) that can follow
a slow drift or a regime shift; :math:`e_g` is a learned embedding. Times past the
span see the last bump's tail (extrapolation is the periodic part's business).

**Individual latent** :math:`h(t) \in \mathbb R^d`, between events a neural ODE
driven by the population (the coupling term):

.. math::

    \frac{dh}{dt} = -\mathrm{softplus}(a) \odot h + \tanh\!\big(\mathrm{MLP}([h, z(t, g)])\big),

(the linear decay keeps h bounded, :math:`|h_i| \le 1/\mathrm{softplus}(a_i)`
asymptotically), and at an event of mark m a jump
:math:`h \leftarrow \mathrm{GRUCell}([e_m, z(t, g)], h)`. A sequence starts from
:math:`h(t_0^-) = \mathrm{MLP}(z(t_0, g))`, the population's typical state at its
start. Intensities read both: :math:`\lambda_k(t) = \mathrm{softplus}(w_k^\top [h(t),
z(t, g)] + b_k)`.

**Diffusion latent interpolator** (:mod:`._diffusion`): a conditional DDPM of the
individual latents :math:`h_i(t_j^+)` given :math:`z(t_j, g)`, the population's latent
law at any time; it generates population latents at arbitrary times (new individuals
in :meth:`CoCLD.generate` start from a sample of it) and its loss, weighted by
``align_weight``, is the alignment between individual and population latents.

**Training** maximises the exact log-likelihood of the harness
(:mod:`simsci.models._events`; Gauss-Legendre compensator) plus the alignment term.

**Integration.** The field is stiff-linear plus bounded, so it is integrated by the
exponential midpoint rule (ETD-RK2), exact for the decay and stable for any step:
with :math:`E = e^{-r s}`, :math:`\varphi = (1 - E)/r` and z held at the step's
midpoint, :math:`h_{1/2} = E^{1/2} h + \varphi_{1/2}\, g(h)`,
:math:`h_1 = E h + \varphi\, g(h_{1/2})`, g the tanh term. Each inter-event interval
takes ``substeps`` equal steps (default 2; the state carried to the next event, in
training and in sampling alike). The intensity at sorted offsets τ after an event (the
one the likelihood scores and the sampler thins with) takes at least one step per gap
between consecutive offsets and enough that none is longer than ``max_step`` model
units (default 4, four median gaps), at most ``max_substeps`` (8), one count for the
batch. The harness's sampler asks for offsets on fine grids from the last event (a lone
far offset reached in one step was off from the fine-grid intensity by 7% at 4 and
23-34% at 8-13 model units, so the sampler drew from a different process from the one
scored); ``max_step`` guards other callers. The rule on the carried state, or a
``max_step`` of 2, cost a third to a half of the training events/s (measured 1040-1480
vs 2300-2650), so neither is the default.
The steps
are written out here rather than calling :func:`simsci.odeint`: the
history is a Python loop over events with one tiny solve per event, and odeint's
per-call grid merging and checks cost ~15x such a solve (7 ms vs 0.4 ms measured).
The state carried to the next event (``substeps`` steps) and the intensity path that
scores the interval (one step per quadrature node, finer) are two discretisations of
the same ODE; they differ by the solver error, which the tests bound (order 2).

``use_population=False`` drops z everywhere (an individual-only latent ODE: the
ablation that shows what the coupling is worth).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from simsci.models._events import EventModel
from simsci.models.cocld._diffusion import LatentDiffusion


class CoCLD(EventModel):
    """Coupled continuous-time latent dynamics (see the module docstring).

    ``latent_dim`` d, ``pop_dim`` P, ``hidden`` MLP width, ``harmonics`` per cycle,
    ``trend_features`` bumps, ``substeps`` integration steps per inter-event interval,
    ``diffusion_steps`` S, ``align_weight``, ``use_population``; the harness's
    arguments (``num_marks``, ``time_scale``, ...) as keywords.
    """

    def __init__(
        self,
        num_marks: int,
        *,
        latent_dim: int = 16,
        pop_dim: int = 8,
        hidden: int = 64,
        harmonics: int = 3,
        trend_features: int = 8,
        substeps: int = 2,
        max_step: float = 4.0,
        max_substeps: int = 8,
        diffusion_steps: int = 50,
        align_weight: float = 0.1,
        use_population: bool = True,
        **event_args,
    ):
        super().__init__(num_marks, **event_args)
        for name, value in (("latent_dim", latent_dim), ("pop_dim", pop_dim), ("hidden", hidden)):
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name, value in (("harmonics", harmonics), ("trend_features", trend_features)):
            if isinstance(value, bool) or int(value) != value or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if use_population and not self.day_length and trend_features == 0:
            raise ValueError(
                "the population latent reads calendar time through day/week harmonics "
                "(day_length) or trend features; with neither it has no input: set "
                "trend_features >= 1, give day_length, or use_population=False"
            )
        if isinstance(substeps, bool) or int(substeps) != substeps or substeps < 1:
            raise ValueError(f"substeps must be an integer >= 1, got {substeps!r}")
        d, p, w = int(latent_dim), int(pop_dim), int(hidden)
        self.latent_dim, self.pop_dim = d, p
        self.harmonics, self.trend_features = int(harmonics), int(trend_features)
        if not (isinstance(max_step, (int, float)) and math.isfinite(max_step) and max_step > 0):
            raise ValueError(f"max_step must be a finite number > 0, got {max_step!r}")
        if isinstance(max_substeps, bool) or int(max_substeps) != max_substeps or max_substeps < 1:
            raise ValueError(f"max_substeps must be an integer >= 1, got {max_substeps!r}")
        self.substeps, self.max_step = int(substeps), float(max_step)
        self.max_substeps = max(int(max_substeps), self.substeps)
        self.align_weight, self.use_population = float(align_weight), bool(use_population)
        self.init_args = {
            **self.event_args,
            "latent_dim": d,
            "pop_dim": p,
            "hidden": w,
            "harmonics": self.harmonics,
            "trend_features": self.trend_features,
            "substeps": self.substeps,
            "max_step": self.max_step,
            "max_substeps": self.max_substeps,
            "diffusion_steps": int(diffusion_steps),
            "align_weight": self.align_weight,
            "use_population": self.use_population,
        }
        cycles = 2 if self.day_length else 0
        phi_dim = 2 * self.harmonics * cycles + self.trend_features
        self.group_embed = nn.Embedding(self.num_groups, 8)
        self.pop_net = nn.Sequential(
            nn.Linear(phi_dim + 8, w), nn.Tanh(), nn.Linear(w, p), nn.Tanh()
        )
        zin = p if self.use_population else 0
        self.decay = nn.Parameter(torch.full((d,), -1.0))
        self.field = nn.Sequential(nn.Linear(d + zin, w), nn.Tanh(), nn.Linear(w, d))
        self.mark_embed = nn.Embedding(self.num_marks, w)
        self.jump = nn.GRUCell(w + zin, d)
        self.init_net = nn.Sequential(nn.Linear(max(zin, 1), w), nn.Tanh(), nn.Linear(w, d))
        self.head = nn.Linear(d + zin, self.num_marks)
        self.diffusion = LatentDiffusion(d, max(zin, 1), hidden=w, steps=int(diffusion_steps))
        self._build_location_head(d + zin, w)

    # ---------------------------------------------------------- population
    def population(self, t: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
        """z(t, g): (...,) calendar times (data units, float64) and groups -> (..., P)."""
        t = t.double()
        feats = []
        if self.day_length:
            n = torch.arange(1, self.harmonics + 1, device=t.device, dtype=torch.float64)
            for period in (self.day_length, 7 * self.day_length):
                angle = 2 * math.pi * t[..., None] * n / period
                feats += [angle.sin(), angle.cos()]
        if self.trend_features:
            span = self.calendar_span or 1.0
            centres = torch.linspace(
                0, 1, self.trend_features, device=t.device, dtype=torch.float64
            )
            width = 1.0 / max(self.trend_features - 1, 1)
            feats.append(torch.exp(-0.5 * ((t[..., None] / span - centres) / width) ** 2))
        phi = torch.cat(feats, -1).to(self.decay.dtype)
        e = self.group_embed(group).expand(*phi.shape[:-1], -1)
        return self.pop_net(torch.cat([phi, e], -1))

    def _z(self, t, group):
        if not self.use_population:
            return None
        return self.population(t, group)

    def _cat(self, h, z):
        return h if z is None else torch.cat([h, z], -1)

    # ---------------------------------------------------------- dynamics
    def _steps(self, span: torch.Tensor, least: int) -> int:
        """Steps for spans (N,): at least ``least``, enough that none is longer than
        ``max_step`` for the longest span, at most ``max_substeps``."""
        top = float(span.max()) if span.numel() else 0.0
        return min(self.max_substeps, max(least, math.ceil(top / self.max_step)))

    def _integrate(self, h, t0, span, group, steps: int | None = None):
        """h (N, d) from calendar times t0 (N,) over ``span`` (N,) model units in
        ``steps`` exponential-midpoint steps (default ``substeps``)."""
        steps = self.substeps if steps is None else steps
        rate = nn.functional.softplus(self.decay)
        s = (span / steps)[:, None]
        decay, half = torch.exp(-rate * s), torch.exp(-rate * s / 2)
        # (1 - e^{-r s}) / r, exact as r -> 0
        phi, phi_half = -torch.expm1(-rate * s) / rate, -torch.expm1(-rate * s / 2) / rate
        for i in range(steps):
            t_mid = t0 + (i + 0.5) * (span / steps).double() * self.time_scale
            z = self._z(t_mid, group)
            g1 = torch.tanh(self.field(self._cat(h, z)))
            mid = half * h + phi_half * g1
            g2 = torch.tanh(self.field(self._cat(mid, z)))
            h = decay * h + phi * g2
        return h

    def _jump(self, h, mark, t, group):
        z = self._z(t, group)
        return self.jump(self._cat(self.mark_embed(mark), z), h)

    def initial_state(self, t0: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
        """h(t_0^-) (B, d) of sequences starting at calendar times t0 (B,)."""
        z = self._z(t0, group)
        if z is None:
            z = torch.zeros(t0.shape[0], 1, device=t0.device, dtype=self.decay.dtype)
        return self.init_net(z)

    def history(self, batch):
        t, dt, mark, valid, group = (
            batch["t"],
            batch["dt"],
            batch["mark"],
            batch["valid"],
            batch["group"],
        )
        # "h0" (B, d): a given start latent (a draw of the population law in sample())
        h = batch["h0"] if "h0" in batch else self.initial_state(t[:, 0], group)
        out = []
        for j in range(t.shape[1]):
            if j > 0:
                h = self._integrate(h, t[:, j - 1], dt[:, j], group)
            h_new = self._jump(h, mark[:, j], t[:, j], group)
            h = torch.where(valid[:, j, None], h_new, h)
            out.append(h)
        h = torch.stack(out, 1)
        return self._with_group(h, group[:, None].expand(h.shape[:2]))

    # H rows are [h (d), group id]: the harness hands intensity() only H, t and tau
    def _split(self, H):
        return H[..., : self.latent_dim], H[..., self.latent_dim].round().long()

    def _path(self, H, t_last, tau):
        """States and population latents at t_last + tau for sorted tau (B, L, G):
        h (B, L, G, d), z (B, L, G, P) or None."""
        B, L, G = tau.shape
        h, group = self._split(H)
        h, g = h.reshape(B * L, -1), group.reshape(B * L)
        t0 = t_last.reshape(B * L)
        taus = tau.reshape(B * L, G)
        hs, prev = [], torch.zeros_like(taus[:, 0])
        for k in range(G):
            step = (taus[:, k] - prev).clamp_min(0)
            h = self._integrate(
                h, t0 + prev.double() * self.time_scale, step, g, self._steps(step, 1)
            )
            hs.append(h)
            prev = taus[:, k]
        h = torch.stack(hs, 1).reshape(B, L, G, -1)
        t_abs = t_last[..., None] + tau.double() * self.time_scale
        z = self._z(t_abs, group[..., None].expand(B, L, G))
        return h, z

    def intensity(self, H, t_last, tau):
        h, z = self._path(H, t_last, tau)
        return nn.functional.softplus(self.head(self._cat(h, z)))

    def features(self, H, t_last, tau):
        h, z = self._path(H, t_last, tau)
        return self._cat(h, z)

    def _with_group(self, h, group):
        return torch.cat([h, group.to(h.dtype).reshape(*h.shape[:-1], 1)], -1)

    def extend_state(self, H_last, t_last, tau, mark, group):
        h, g = self._split(H_last)
        h = self._integrate(h, t_last, tau, g)
        return self._with_group(self._jump(h, mark, t_last + tau.double() * self.time_scale, g), g)

    # ---------------------------------------------------------- alignment
    def extra_loss(self, batch, H):
        if self.align_weight <= 0:
            return {}
        valid = batch["valid"]
        h = H[valid][:, : self.latent_dim]
        z = self._z(batch["t"], batch["group"][:, None].expand_as(batch["t"]))
        cond = torch.zeros(h.shape[0], 1, device=h.device) if z is None else z[valid]
        if self.training:
            self.diffusion.update_stats(h.detach())
        return {"align": self.align_weight * self.diffusion.loss(h, cond)}

    # ---------------------------------------------------------- generation
    @torch.no_grad()
    def sample_population(self, t, group, n: int = 1, generator=None) -> torch.Tensor:
        """Population latents at calendar times ``t`` (N,) for groups (N,): (N, n, d)
        draws from the diffusion interpolator."""
        t = torch.as_tensor(t, dtype=torch.float64, device=self.decay.device).reshape(-1)
        group = (
            torch.as_tensor(group, dtype=torch.long, device=t.device).reshape(-1).expand(t.shape)
        )
        z = self._z(t, group)
        cond = torch.zeros(t.shape[0], 1, device=t.device) if z is None else z
        draws = self.diffusion.sample(cond.repeat_interleave(n, 0), generator=generator)
        return draws.reshape(t.shape[0], n, -1)

    @torch.no_grad()
    def sample(self, batch, t_end, *, max_new=500, generator=None, population_start=False):
        """Thinning continuation of each sequence (the harness's ``sample``). With
        ``population_start`` each sequence's start latent h(t_0^-) is a draw of the
        population law at t_0 (the diffusion interpolator) instead of its mean
        ``initial_state``: a continuation then stands for *an* individual consistent
        with the history, so sampled sets keep the population's spread (of event counts,
        say) rather than that of one typical individual. (The interpolator learns the
        post-event latents h(t_j^+); using a draw as a pre-event start is an
        approximation, as in :meth:`generate`.) Off by default: after a short training
        (200 steps on 480 sequences) the interpolator's draws still land where the
        dynamics were never trained, and continuations from them overshoot the event
        counts (population_events, 60 test sequences: mean 70 events against 60 real,
        max 260 against 160; the mean start gives 49 and 135)."""
        if population_start:
            h0 = self.sample_population(batch["t"][:, 0], batch["group"], 1, generator=generator)
            batch = {**batch, "h0": h0[:, 0]}
        return super().sample(batch, t_end, max_new=max_new, generator=generator)

    @torch.no_grad()
    def generate(
        self, t_start, t_end, group=0, *, max_events: int = 500, generator=None
    ) -> list[dict]:
        """Whole new sequences on [t_start, t_end] (each (N,), calendar times), no
        history: each individual starts from a draw of the population latent law at
        t_start (the diffusion interpolator) and events follow by thinning. Returns
        dicts of ``t``, ``mark`` (and ``loc_id``)."""
        t_start = torch.as_tensor(t_start, dtype=torch.float64, device=self.decay.device).reshape(
            -1
        )
        t_end = torch.as_tensor(t_end, dtype=torch.float64, device=t_start.device).reshape(-1)
        if t_end.shape != t_start.shape or bool((t_end <= t_start).any()):
            raise ValueError("generate needs t_end > t_start, one pair per sequence")
        group = torch.as_tensor(group, dtype=torch.long, device=t_start.device).reshape(-1)
        group = group.expand(t_start.shape).contiguous()
        if bool((group < 0).any()) or bool((group >= self.num_groups).any()):
            raise ValueError(f"group must lie in 0..{self.num_groups - 1}")
        h0 = self.sample_population(t_start, group, 1, generator=generator)[:, 0]
        H0 = self._with_group(h0, group)
        return self._thin(H0, t_start, t_end, group, max_new=max_events, generator=generator)
