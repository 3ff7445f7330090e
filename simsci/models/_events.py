r"""The harness of the event-sequence models: batches, likelihood, prediction, sampling.

Every temporal point-process model here (CoCLD and its baselines: Poisson, RMTPP,
Neural Hawkes, Transformer Hawkes, the true process) subclasses :class:`EventModel`
and implements two things:

- ``history(batch) -> H`` (B, L, D): the model's state right after each event j
  (conditioned on events 0..j);
- ``intensity(H, t_last, tau) -> (B, L, G, K)``: :math:`\lambda_k(t_j + \tau)` for
  each event j, given events 0..j and none in :math:`(t_j, t_j + \tau)`. ``H`` (B, L, D)
  rows of ``history``; ``t_last`` (B, L) the event times in data units (float64, for
  models that read absolute time); ``tau`` (B, L, G) offsets in *model* units
  (data units / ``time_scale``), non-negative. Intensities are per model time unit.

On top of these two the harness computes, identically for every model:

- **Log-likelihood** (EasyTPP's convention: a sequence's first event is given, events
  2..L are scored): :math:`\ell = \sum_{j \ge 1} \log \lambda_{m_j}(t_j) -
  \int_{t_0}^{T} \sum_k \lambda_k`, with T the end of the sequence's observation
  window where the file records it (the episode field ``t_end``, or ``window[1]``),
  else its last event. The survival term to T matters: without it a model that reads
  absolute time can raise its intensity after the last event of windows that end
  at a shared time and gain likelihood the truth cannot (measured: +0.04 nats/event
  over the last 20% of a Hawkes window). The compensator of interval j by an n-point
  Gauss-Legendre rule on :math:`[t_{j-1}, t_j]` (``quadrature`` nodes, default 16; a
  model with a closed-form compensator overrides ``log_likelihood_terms``). Reported per scored
  event in data time units (:math:`\log\lambda_{data} = \log\lambda_{model} - \log s`
  with s = ``time_scale``), so figures compare across models and with the truth.
- **Next-event prediction**: from the density :math:`p(\tau) = \lambda(\tau)
  e^{-\Lambda(\tau)}` on a grid of ``predict_nodes`` offsets over ``[0, horizon]``
  (denser near 0: :math:`\tau = h u^2`): the expected time :math:`E[\tau] =
  \int_0^h S(\tau)\,d\tau` (the mass beyond the horizon counted at the horizon) and the
  most likely type :math:`\arg\max_k \int_0^h \lambda_k S\,d\tau` (marginalised over the
  time, as in the Neural Hawkes paper). ``horizon`` defaults to 3 times the 99.5%
  quantile of the training gaps.
- **Sampling** by thinning (:meth:`EventModel.sample`): look-ahead windows of
  ``horizon / 8``; the bound of a window is 1.5 times the largest intensity on a
  16-point grid of it, plus 1e-6 (neural intensities have no analytic bound; exact
  whenever the intensity stays below the bound, e.g. when it is monotone between
  events; the same choice as EasyTPP's sampler). Models with a cheap recurrent update
  override ``extend_state``; the rest recompute ``history`` on the grown sequence.
- **Locations** (mobility check-ins): a file with the step field ``loc_id`` gives the
  models that expose ``features(H, t_last, tau) -> (B, L, G, F)`` a location head,
  :math:`p(\mathrm{loc}_j \mid \text{features at } t_j^-, m_j)` (softmax over the
  file's locations), scored as ``loc_nll`` and sampled in generation.

Batches (:meth:`EventModel.collate`): ``t`` (B, L) float64 absolute times (padding
repeats the last time), ``mark`` (B, L) int64, ``valid`` (B, L) bool, ``length`` (B,),
``dt`` (B, L) model-unit gaps (``dt[:, 0] = 0``), ``group`` (B,) int64 (0 when the file
has no groups), ``loc_id`` (B, L) when present. The rules of a batch: at least one
event per sequence (two to score one), strictly increasing times, marks in 0..K-1,
at most ``max_events`` events (``truncate=True`` keeps the first ``max_events``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from simsci import data

DATA_FIELDS = ("t", "mark", "loc_id", "group", "params", "t_end", "window")


def gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the n-point Gauss-Legendre rule on [0, 1]."""
    x, w = np.polynomial.legendre.leggauss(n)
    return (x + 1) / 2, w / 2


def calendar_features(
    t: torch.Tensor,
    *,
    day_length: float | None,
    harmonics: int,
    trend_features: int,
    span: float | None,
) -> torch.Tensor:
    r"""The calendar features :math:`\phi(t)` (..., F) float64 of absolute times ``t``
    (..., data units): the harmonics n = 1..``harmonics`` of the day and the week (sin and
    cos of :math:`2\pi n t / T_{day}` and :math:`2\pi n t / 7T_{day}`, in that order)
    when ``day_length`` is given, then ``trend_features`` Gaussian bumps over
    :math:`t / T_{span}` (``span``: the end of the training data, 1 when None), centres
    evenly on [0, 1], width their spacing. F = :func:`calendar_width`. What CoCLD's
    population latent and the calendar option of the Neural Hawkes read."""
    t = t.double()
    feats = []
    if day_length:
        n = torch.arange(1, harmonics + 1, device=t.device, dtype=torch.float64)
        for period in (day_length, 7 * day_length):
            angle = 2 * math.pi * t[..., None] * n / period
            feats += [angle.sin(), angle.cos()]
    if trend_features:
        centres = torch.linspace(0, 1, trend_features, device=t.device, dtype=torch.float64)
        width = 1.0 / max(trend_features - 1, 1)
        feats.append(torch.exp(-0.5 * ((t[..., None] / (span or 1.0) - centres) / width) ** 2))
    if not feats:
        return t.new_zeros(*t.shape, 0)
    return feats[0] if len(feats) == 1 else torch.cat(feats, -1)


def calendar_width(day_length: float | None, harmonics: int, trend_features: int) -> int:
    """F, the width of :func:`calendar_features`."""
    return 4 * harmonics * (1 if day_length else 0) + trend_features


def event_file_kwargs(trajectories) -> dict:
    """Constructor sizes of an event model from a kind="events" file: ``num_marks``,
    ``time_scale`` (the median gap of the train split), ``horizon`` (model units),
    ``num_groups``, ``num_locations`` and ``day_length`` (from meta, when given)."""
    path = trajectories.path
    if trajectories.kind != "events" or "mark" not in trajectories.step_fields:
        raise ValueError(
            f"{path}: event models read kind='events' files with a step field 'mark' "
            f"(this one is kind={trajectories.kind!r}); write event data with "
            "simsci.datasets.make_dataset('hawkes', ...) or import it with "
            "`simsci data import easytpp`"
        )
    ids = np.arange(len(trajectories))
    if "split" in trajectories.episode_fields:
        split = np.asarray(trajectories.column("split"))
        ids = ids[split == 0] if (split == 0).any() else ids
    gaps, groups, locs, ends = [], [0], [0], [0.0]
    for i in ids[:2000]:
        ep = trajectories[int(i)]
        gaps.append(np.diff(ep["t"]))
        ends.append(float(ep["t"][-1]) if len(ep["t"]) else 0.0)
        if "group" in ep:
            groups.append(int(np.asarray(ep["group"]).item()))
        if "loc_id" in ep and len(ep["loc_id"]):
            locs.append(int(ep["loc_id"].max()))
    gaps = np.concatenate(gaps) if gaps else np.zeros(0)
    gaps = gaps[gaps > 0]
    if gaps.size == 0:
        raise ValueError(
            f"{path}: the training sequences hold no two events; an event model needs "
            "sequences of at least two events to learn from"
        )
    scale = float(np.median(gaps))
    kwargs = {
        "num_marks": int(trajectories.num_marks),
        "time_scale": scale,
        "horizon": float(3 * np.quantile(gaps, 0.995) / scale),
        "num_groups": max(groups) + 1,
    }
    if "loc_id" in trajectories.step_fields:
        static = trajectories.static
        count = len(static["locations"]) if "locations" in static else max(locs) + 1
        kwargs["num_locations"] = int(count)
    day = trajectories.meta.get("day_length")
    if day is not None:
        kwargs["day_length"] = float(day)
    kwargs["calendar_span"] = max(max(ends), 1e-12)
    return kwargs


class EventModel(nn.Module):
    """Base of the marked temporal point-process models (see the module docstring).

    Arguments: ``num_marks`` K; ``time_scale`` data time per model time unit;
    ``horizon`` prediction/sampling horizon in model units; ``num_groups`` population
    ids; ``num_locations`` (0: no location head); ``max_events``/``truncate`` the cap
    on sequence length; ``quadrature`` Gauss-Legendre nodes per interval;
    ``predict_nodes`` grid points of the next-event density; ``day_length`` and
    ``calendar_span`` (data units) for models that read absolute time.
    """

    data_fields = DATA_FIELDS
    #: False for models with nothing to train (the true process)
    trainable = True

    def __init__(
        self,
        num_marks: int,
        *,
        time_scale: float = 1.0,
        horizon: float = 20.0,
        num_groups: int = 1,
        num_locations: int = 0,
        max_events: int | None = None,
        truncate: bool = False,
        quadrature: int = 16,
        predict_nodes: int = 128,
        day_length: float | None = None,
        calendar_span: float | None = None,
    ):
        super().__init__()
        for name, value, low in (
            ("num_marks", num_marks, 1),
            ("num_groups", num_groups, 1),
            ("num_locations", num_locations, 0),
            ("quadrature", quadrature, 1),
            ("predict_nodes", predict_nodes, 8),
        ):
            if isinstance(value, bool) or int(value) != value or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if max_events is not None and (int(max_events) != max_events or max_events < 2):
            raise ValueError(f"max_events must be None or an integer >= 2, got {max_events!r}")
        for name, value in (("time_scale", time_scale), ("horizon", horizon)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        self.num_marks, self.num_groups = int(num_marks), int(num_groups)
        self.num_locations = int(num_locations)
        self.time_scale, self.horizon = float(time_scale), float(horizon)
        self.max_events = None if max_events is None else int(max_events)
        self.truncate = bool(truncate)
        self.quadrature, self.predict_nodes = int(quadrature), int(predict_nodes)
        self.day_length = None if day_length is None else float(day_length)
        self.calendar_span = None if calendar_span is None else float(calendar_span)
        nodes, weights = gauss_legendre(self.quadrature)
        self.register_buffer("gl_nodes", torch.tensor(nodes, dtype=torch.float32), persistent=False)
        self.register_buffer(
            "gl_weights", torch.tensor(weights, dtype=torch.float32), persistent=False
        )
        self.event_args = {
            "num_marks": self.num_marks,
            "time_scale": self.time_scale,
            "horizon": self.horizon,
            "num_groups": self.num_groups,
            "num_locations": self.num_locations,
            "max_events": self.max_events,
            "truncate": self.truncate,
            "quadrature": self.quadrature,
            "predict_nodes": self.predict_nodes,
            "day_length": self.day_length,
            "calendar_span": self.calendar_span,
        }
        self.loc_head: nn.Module | None = None

    def _build_location_head(self, feature_dim: int, hidden: int) -> None:
        """The location head p(loc | features, mark) when the data has locations."""
        if self.num_locations > 0:
            self.loc_mark = nn.Embedding(self.num_marks, hidden)
            self.loc_head = nn.Sequential(
                nn.Linear(feature_dim + hidden, hidden),
                nn.Tanh(),
                nn.Linear(hidden, self.num_locations),
            )

    @classmethod
    def from_data(cls, trajectories, *, window=None, task=None, **overrides):
        """A model sized for an event file (``simsci.data.open(...)``)."""
        if window is not None:
            raise ValueError("event models read whole sequences: drop --window")
        if task not in (None, "next_event"):
            raise ValueError(f"event models have the one task 'next_event', got {task!r}")
        return cls(**{**event_file_kwargs(trajectories), **overrides})

    # ----------------------------------------------------------------- batches
    def collate(self, items: list[dict]) -> dict:
        """Pad a list of episodes (``TrajectoryDataset`` items) into a batch; checks the
        rules of the module docstring."""
        if not items:
            raise ValueError("an empty batch")
        seqs = []
        for item in items:
            t = torch.as_tensor(item["t"], dtype=torch.float64)
            m = torch.as_tensor(item["mark"]).long()
            where = f"episode {int(item.get('episode', -1))}"
            if t.ndim != 1 or t.numel() == 0:
                raise ValueError(f"{where}: an empty sequence; event models need >= 1 event")
            cap = self.max_events
            if cap is not None and t.numel() > cap:
                if not self.truncate:
                    raise ValueError(
                        f"{where}: {t.numel()} events exceed max_events={cap}; pass "
                        "truncate=True (--param truncate=true) to keep the first "
                        f"{cap}, or raise max_events"
                    )
                t, m = t[:cap], m[:cap]
            if not bool(torch.isfinite(t).all()):
                j = int(torch.nonzero(~torch.isfinite(t))[0])
                raise ValueError(f"{where}: event times must be finite, got t[{j}] = {float(t[j])}")
            if t.numel() > 1 and not bool((t[1:] > t[:-1]).all()):
                j = int(torch.nonzero(~(t[1:] > t[:-1]))[0]) + 1
                raise ValueError(
                    f"{where}: event times must be strictly increasing, but t[{j}] = "
                    f"{float(t[j])!r} follows t[{j - 1}] = {float(t[j - 1])!r}"
                )
            if m.numel() and (int(m.min()) < 0 or int(m.max()) >= self.num_marks):
                bad = int(m[(m < 0) | (m >= self.num_marks)][0])
                raise ValueError(
                    f"{where}: marks must lie in 0..{self.num_marks - 1} (num_marks="
                    f"{self.num_marks}), got a mark {bad}"
                )
            seq = {"t": t, "mark": m}
            if "loc_id" in item and self.num_locations > 0:
                loc = torch.as_tensor(item["loc_id"]).long()[: t.numel()]
                if loc.numel() and (int(loc.min()) < 0 or int(loc.max()) >= self.num_locations):
                    raise ValueError(f"{where}: loc_id must lie in 0..{self.num_locations - 1}")
                seq["loc_id"] = loc
            group = int(torch.as_tensor(item.get("group", 0)).reshape(-1)[0])
            if not 0 <= group < self.num_groups:
                raise ValueError(
                    f"{where}: group {group} outside 0..{self.num_groups - 1} (num_groups="
                    f"{self.num_groups})"
                )
            seq["group"] = group
            if "params" in item:
                seq["params"] = torch.as_tensor(item["params"], dtype=torch.float64).reshape(-1)
            end = item.get("t_end", item["window"][1] if "window" in item else None)
            if end is not None:
                end = float(torch.as_tensor(end, dtype=torch.float64).reshape(-1)[-1])
                # TrajectoryDataset loads episode fields as float32: a window that ends
                # at the last event comes back up to ~1 ulp(float32) before it
                if math.isfinite(end) and end >= float(t[-1]) - 1e-6 * max(1.0, abs(float(t[-1]))):
                    end = max(end, float(t[-1]))
                if not (math.isfinite(end) and end >= float(t[-1])):
                    raise ValueError(
                        f"{where}: the observation window ends at {end!r}, before the last "
                        f"event at {float(t[-1])!r}"
                    )
                seq["t_end"] = end
            seqs.append(seq)
        return pad_events(seqs, self.time_scale)

    def evaluate_file(self, path, *, split="test", device=None) -> dict:
        """:func:`evaluate_events` on a file (``simsci evaluate``'s hook)."""
        return evaluate_events(self, path, split=split, device=device)

    # ------------------------------------------------------------ the contract
    # an nn.Module, so not an abc.ABC (its metaclass is type): the two hooks say so
    def history(self, batch: dict) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must define history(batch)")

    def intensity(self, H: torch.Tensor, t_last: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must define intensity(H, t_last, tau)")

    def features(self, H, t_last, tau):  # optional: the location head's input
        return None

    def extend_state(self, H_last, t_last, tau, mark, group):
        """(B, D) state after one more event at t_last + tau (model units) with ``mark``;
        None: the harness recomputes ``history`` on the grown sequences."""
        return None

    def extra_loss(self, batch: dict, H: torch.Tensor) -> dict:
        """Model-specific terms added to the training loss (e.g. CoCLD's alignment)."""
        return {}

    def export_spec(self, example_shape=None) -> dict:
        """What :func:`simsci.train.export_model` exports: the conditional intensity
        after each event, ``history`` then ``intensity``, in data units, for B complete
        sequences of L events each (no padding); ``example_shape`` is (B, L) or
        (B, L, G) (default (2, 8, 4)). B and G are free in the program, L too where the
        model's ``history`` allows it (the manifest lists the free axes)."""
        if not self.trainable:
            raise TypeError(
                f"{type(self).__name__} has no network to export (it computes the true "
                "process with numpy); export a trained event model (rmtpp, nhp, thp, cocld)"
            )
        shape = [2, 8, 4] if example_shape is None else [int(v) for v in example_shape]
        if len(shape) == 2:
            shape.append(4)
        if len(shape) != 3 or min(shape) < 1 or shape[1] < 2:
            raise ValueError(
                f"example shape {tuple(example_shape)} does not fit an event model: give "
                "(B, L) or (B, L, G), B sequences of L >= 2 events and G query offsets"
            )
        B, L, G = shape
        gen = torch.Generator().manual_seed(0)
        gaps = torch.rand(B, L, generator=gen, dtype=torch.float64) + 0.05
        t = torch.cumsum(gaps * self.time_scale, 1)
        mark = torch.randint(0, self.num_marks, (B, L), generator=gen)
        tau = torch.rand(B, L, G, generator=gen, dtype=torch.float64) * 2 * self.time_scale
        device = next(iter(self.parameters()), self.gl_nodes).device
        inputs = [t, mark, tau.float()]
        names = ["t", "mark", "tau"]
        docs = {
            "t": f"(B, {L}) float64 event times, data units, strictly increasing per row",
            "mark": f"(B, {L}) int64 event types in 0..{self.num_marks - 1}",
            "tau": f"(B, {L}, G) float32 offsets past each event, data units, >= 0",
        }
        if self.num_groups > 1:
            inputs.append(torch.randint(0, self.num_groups, (B,), generator=gen))
            names.append("group")
            docs["group"] = f"(B,) int64 population ids in 0..{self.num_groups - 1}"
        return {
            "kind": "event_model",
            "module": _IntensityProgram(self),
            "inputs": tuple(x.to(device) for x in inputs),
            "input_names": names,
            "inputs_doc": docs,
            "output_names": ["intensity"],
            "outputs_doc": {
                "intensity": f"(B, {L}, G, {self.num_marks}) lambda_k(t_j + tau) per data "
                "time unit, given events 0..j and none in (t_j, t_j + tau)"
            },
            "function": f"{type(self).__name__}.intensity(history(batch), t, tau / "
            "time_scale) / time_scale: the conditional intensity after each event",
            "free_axes": {"t": [1], "mark": [1], "tau": [1, 2]},
        }

    # --------------------------------------------------------------- likelihood
    def log_likelihood_terms(self, batch: dict) -> dict:
        """``event`` (B, L): log λ_{m_j}(t_j) (data units) for j >= 1, 0 elsewhere;
        ``compensator`` (B, L): ∫ over (t_{j-1}, t_j]; ``scored`` (B, L) bool;
        ``loc`` (B, L) log p(loc_j) when the model has a location head; ``H``."""
        H = self.history(batch)
        scored = batch["valid"].clone()
        scored[:, 0] = False
        dt = batch["dt"][:, 1:]  # (B, L-1) gap to the next event, model units
        nodes = self.gl_nodes.to(dt)
        tau = torch.cat([dt[..., None] * nodes, dt[..., None]], -1)  # (B, L-1, Q+1)
        lam = self.intensity(H[:, :-1], batch["t"][:, :-1], tau)  # (B, L-1, Q+1, K)
        total = lam[..., :-1, :].sum(-1)
        comp = dt * (total * self.gl_weights.to(dt)).sum(-1)
        at = lam[..., -1, :].gather(-1, batch["mark"][:, 1:, None]).squeeze(-1)
        event = torch.log(at.clamp_min(1e-30)) - math.log(self.time_scale)
        pad = torch.zeros_like(batch["dt"][:, :1])
        comp = torch.cat([pad, comp], 1) * scored
        if "t_end" in batch:  # survival from the last event to the window's end
            rows = torch.arange(H.shape[0], device=H.device)
            last = batch["length"] - 1
            t_last = batch["t"][rows, last]
            gap = ((batch["t_end"] - t_last) / self.time_scale).to(dt)
            lam_tail = self.intensity(
                H[rows, last][:, None], t_last[:, None], gap[:, None, None] * nodes
            )
            tail = gap * (lam_tail[:, 0].sum(-1) * self.gl_weights.to(dt)).sum(-1)
            # booked on the last scored event (sequences of one event score nothing)
            comp = comp.index_put((rows, last), comp[rows, last] + tail * scored[rows, last])
        out = {
            "event": torch.cat([pad, event], 1) * scored,
            "compensator": comp,
            "scored": scored,
            "H": H,
        }
        if self.loc_head is not None and "loc_id" in batch:
            feats = self.features(H[:, :-1], batch["t"][:, :-1], dt[..., None])[..., 0, :]
            logits = self.loc_head(torch.cat([feats, self.loc_mark(batch["mark"][:, 1:])], -1))
            logp = torch.log_softmax(logits, -1).gather(-1, batch["loc_id"][:, 1:, None])
            out["loc"] = torch.cat([pad, logp.squeeze(-1)], 1) * scored
        return out

    def training_step(self, batch: dict) -> dict:
        terms = self.log_likelihood_terms(batch)
        events = terms["scored"].sum().clamp_min(1)
        ll = (terms["event"].sum() - terms["compensator"].sum()) / events
        loss = -ll
        out = {"ll_per_event": ll.detach()}
        if "loc" in terms:
            loc = terms["loc"].sum() / events
            loss = loss - loc
            out["loc_nll"] = -loc.detach()
        for name, value in self.extra_loss(batch, terms["H"]).items():
            loss = loss + value
            out[name] = value.detach()
        out["loss"] = loss
        return out

    @torch.no_grad()
    def validation_step(self, batch: dict) -> dict:
        terms = self.log_likelihood_terms(batch)
        events = terms["scored"].sum().clamp_min(1)
        ll = (terms["event"].sum() - terms["compensator"].sum()) / events
        pred = self.predict_next(batch, H=terms["H"])
        out = {"loss": -ll, "ll_per_event": ll, **pred}
        if "loc" in terms:
            out["loc_nll"] = -terms["loc"].sum() / events
        return out

    # --------------------------------------------------------------- prediction
    def next_event_density(self, H, t_last, *, nodes: int | None = None):
        """The next-event distribution after each event on the grid τ = horizon u²:
        ``tau`` (G,) model units, ``survival`` (B, L, G), ``lam`` (B, L, G, K)."""
        G = nodes or self.predict_nodes
        u = torch.linspace(0, 1, G, device=H.device, dtype=torch.float32)
        tau = self.horizon * u**2
        lam = self.intensity(H, t_last, tau.expand(*H.shape[:2], G))
        total = lam.sum(-1)
        step = tau[1:] - tau[:-1]
        cum = torch.cat(
            [
                torch.zeros_like(total[..., :1]),
                torch.cumsum(0.5 * (total[..., 1:] + total[..., :-1]) * step, -1),
            ],
            -1,
        )
        return tau, torch.exp(-cum), lam

    def predict_from_state(self, H, t_last) -> tuple[torch.Tensor, torch.Tensor]:
        """Expected next-event offset (data units) and most likely next type, each
        (B, L), from the states after each event."""
        tau, surv, lam = self.next_event_density(H, t_last)
        step = tau[1:] - tau[:-1]
        expected = (0.5 * (surv[..., 1:] + surv[..., :-1]) * step).sum(-1)
        dens = lam * surv[..., None]
        mass = (0.5 * (dens[..., 1:, :] + dens[..., :-1, :]) * step[:, None]).sum(-2)
        return expected * self.time_scale, mass.argmax(-1)

    @torch.no_grad()
    def predict_next(self, batch: dict, H=None) -> dict:
        """Time RMSE (data units) and type accuracy of next-event prediction over the
        scored events of a batch (each predicted from the history before it)."""
        H = self.history(batch) if H is None else H
        offset, kind = self.predict_from_state(H[:, :-1], batch["t"][:, :-1])
        scored = batch["valid"][:, 1:]
        true_gap = (batch["t"][:, 1:] - batch["t"][:, :-1]).to(offset)
        n = scored.sum().clamp_min(1)
        se = ((offset - true_gap) ** 2 * scored).sum() / n
        acc = ((kind == batch["mark"][:, 1:]) & scored).sum() / n
        return {"time_rmse": se.sqrt(), "type_accuracy": acc.to(se)}

    # ----------------------------------------------------------------- sampling
    @torch.no_grad()
    def sample(self, batch: dict, t_end, *, max_new: int = 500, generator=None) -> list[dict]:
        """Continue each sequence of ``batch`` by thinning until ``t_end`` (B,) (data
        units, float64) or ``max_new`` new events. Returns per sequence a dict of the
        *new* events: ``t`` float64, ``mark`` int64 (and ``loc_id``)."""
        t_end = torch.as_tensor(t_end, dtype=torch.float64, device=batch["t"].device).reshape(-1)
        B = batch["t"].shape[0]
        if t_end.shape[0] != B:
            raise ValueError(f"t_end needs one end time per sequence ({B}), got {t_end.shape[0]}")
        if not bool(batch["valid"][:, 0].all()):
            raise ValueError("sampling continues a history: every sequence needs >= 1 event")
        lengths = batch["length"]
        last = lengths - 1
        rows = torch.arange(B, device=lengths.device)
        H = self.history(batch)
        H_last = H[rows, last]
        t_last = batch["t"][rows, last].clone()
        if bool((t_end < t_last).any()):
            raise ValueError("t_end lies before a sequence's last event")
        return self._thin(
            H_last, t_last, t_end, batch["group"], batch=batch, max_new=max_new, generator=generator
        )

    def _thin(self, H_last, t_last, t_end, group, *, batch=None, max_new=500, generator=None):
        """Thinning from the states ``H_last`` (B, D) at times ``t_last`` (B,) (see
        :meth:`sample`); ``batch`` (the histories) is needed by models without
        ``extend_state``."""
        B = H_last.shape[0]
        H = H_last
        rows = torch.arange(B, device=H.device)
        new_t = [[] for _ in range(B)]
        new_m = [[] for _ in range(B)]
        new_l = [[] for _ in range(B)]
        tau_cur = torch.zeros(B, device=H.device)
        done = t_last >= t_end
        window = self.horizon / 8
        grid = torch.linspace(0, 1, 16, device=H.device)
        # offsets are asked for on fine grids from the last event: a model that
        # integrates its state through the queried offsets (CoCLD) then reaches a far
        # offset in short steps, as in the likelihood, not in one long one
        lead = torch.linspace(0, 1, 17, device=H.device)[:-1]
        tail = torch.linspace(0, 1, 5, device=H.device)[1:]
        seqs = None  # grown padded sequences for models without extend_state
        count = torch.zeros(B, dtype=torch.long, device=H.device)
        for _ in range(100000):
            if bool(done.all()):
                break
            before = tau_cur[:, None] * lead  # (B, 16) from the last event to tau_cur
            taus = torch.cat([before, tau_cur[:, None] + window * grid], -1)[:, None]
            lam = self.intensity(H_last[:, None], t_last[:, None], taus)[:, 0, 16:].sum(-1)
            bound = 1.5 * lam.max(-1).values + 1e-6
            e = -torch.log(torch.rand(B, device=H.device, generator=generator).clamp_min(1e-12))
            prop = tau_cur + e / bound
            inside = prop <= tau_cur + window
            reach = torch.minimum(prop, tau_cur + window) - tau_cur
            ptaus = torch.cat([before, tau_cur[:, None] + reach[:, None] * tail], -1)[:, None]
            lam_p = self.intensity(H_last[:, None], t_last[:, None], ptaus)[:, 0, -1]
            u = torch.rand(B, device=H.device, generator=generator)
            accept = inside & (u * bound <= lam_p.sum(-1)) & ~done
            tau_cur = torch.where(inside, prop, tau_cur + window)
            t_abs = t_last + tau_cur.double() * self.time_scale
            done = done | (t_abs > t_end)
            accept = accept & ~done
            if bool(accept.any()):
                mark = torch.multinomial(lam_p.clamp_min(1e-30), 1, generator=generator)[:, 0]
                loc = None
                if self.loc_head is not None:
                    f = self.features(H_last[:, None], t_last[:, None], ptaus)[:, 0, -1]
                    logits = self.loc_head(torch.cat([f, self.loc_mark(mark)], -1))
                    loc = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)[:, 0]
                for b in torch.nonzero(accept)[:, 0].tolist():
                    new_t[b].append(float(t_abs[b]))
                    new_m[b].append(int(mark[b]))
                    if loc is not None:
                        new_l[b].append(int(loc[b]))
                H_new = self.extend_state(H_last, t_last, tau_cur, mark, group)
                if H_new is None:
                    if batch is None:
                        raise ValueError(
                            f"{type(self).__name__} has no extend_state: thinning needs the "
                            "histories (call sample with a batch)"
                        )
                    seqs = self._grown(batch, new_t, new_m, new_l)
                    Hs = self.history(seqs)
                    H_new = Hs[rows, seqs["length"] - 1]
                a = accept[:, None]
                H_last = torch.where(a, H_new, H_last)
                t_last = torch.where(accept, t_abs, t_last)
                tau_cur = torch.where(accept, torch.zeros_like(tau_cur), tau_cur)
                count = count + accept.long()
                done = done | (count >= max_new)
        out = []
        for b in range(B):
            seq = {
                "t": np.asarray(new_t[b], dtype=np.float64),
                "mark": np.asarray(new_m[b], dtype=np.int64),
            }
            if self.loc_head is not None:
                seq["loc_id"] = np.asarray(new_l[b], dtype=np.int64)
            out.append(seq)
        return out

    def _grown(self, batch, new_t, new_m, new_l) -> dict:
        seqs = []
        for b in range(batch["t"].shape[0]):
            n = int(batch["length"][b])
            t = torch.cat([batch["t"][b, :n].cpu(), torch.tensor(new_t[b], dtype=torch.float64)])
            m = torch.cat([batch["mark"][b, :n].cpu(), torch.tensor(new_m[b], dtype=torch.long)])
            seq = {"t": t, "mark": m, "group": int(batch["group"][b])}
            if "params" in batch:
                seq["params"] = batch["params"][b].cpu()
            if "loc_id" in batch and self.loc_head is not None:
                seq["loc_id"] = torch.cat(
                    [batch["loc_id"][b, :n].cpu(), torch.tensor(new_l[b], dtype=torch.long)]
                )
            seqs.append(seq)
        return {
            k: v.to(batch["t"].device) if torch.is_tensor(v) else v
            for k, v in pad_events(seqs, self.time_scale).items()
        }


class _IntensityProgram(nn.Module):
    """``EventModel.export_spec``'s program: complete sequences (t, mark[, group]) and
    offsets tau -> the intensity after each event, all in data units."""

    def __init__(self, model: EventModel):
        super().__init__()
        self.model = model

    def forward(self, t, mark, tau, group=None):
        m = self.model
        B, L = t.shape
        dt = torch.cat([torch.zeros_like(t[:, :1]), (t[:, 1:] - t[:, :-1]) / m.time_scale], 1)
        batch = {
            "t": t,
            "mark": mark,
            "dt": dt.float(),
            "valid": torch.ones(B, L, dtype=torch.bool, device=t.device),
            "length": torch.full((B,), L, dtype=torch.long, device=t.device),
            "group": torch.zeros(B, dtype=torch.long, device=t.device) if group is None else group,
        }
        H = m.history(batch)
        return m.intensity(H, t, tau / m.time_scale) / m.time_scale


def pad_events(seqs: list[dict], time_scale: float) -> dict:
    """Pad sequences ({"t", "mark", "group", optional "loc_id"}) into a batch (the
    layout of the module docstring)."""
    B = len(seqs)
    L = max(int(s["t"].numel()) for s in seqs)
    t = torch.zeros(B, L, dtype=torch.float64)
    mark = torch.zeros(B, L, dtype=torch.long)
    valid = torch.zeros(B, L, dtype=torch.bool)
    has_loc = all("loc_id" in s for s in seqs)
    loc = torch.zeros(B, L, dtype=torch.long) if has_loc else None
    for b, s in enumerate(seqs):
        n = int(s["t"].numel())
        t[b, :n] = s["t"]
        t[b, n:] = s["t"][-1]
        mark[b, :n] = s["mark"]
        valid[b, :n] = True
        if loc is not None:
            loc[b, :n] = s["loc_id"]
    dt = torch.zeros(B, L, dtype=torch.float32)
    dt[:, 1:] = ((t[:, 1:] - t[:, :-1]) / time_scale).float()
    batch = {
        "t": t,
        "mark": mark,
        "valid": valid,
        "length": valid.sum(1),
        "dt": dt,
        "group": torch.tensor([int(s.get("group", 0)) for s in seqs], dtype=torch.long),
    }
    if loc is not None:
        batch["loc_id"] = loc
    if all("params" in s for s in seqs):
        batch["params"] = torch.stack([s["params"] for s in seqs])
    if all("t_end" in s for s in seqs):
        batch["t_end"] = torch.tensor([s["t_end"] for s in seqs], dtype=torch.float64)
    return batch


# ------------------------------------------------------------------ evaluation
def _jsd(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence (nats, in [0, log 2]) of two histograms."""
    p = p / max(p.sum(), 1e-300)
    q = q / max(q.sum(), 1e-300)
    m = 0.5 * (p + q)

    def kl(a):
        nz = a > 0
        return float((a[nz] * np.log(a[nz] / m[nz])).sum())

    return 0.5 * kl(p) + 0.5 * kl(q)


def generation_distances(
    real: list[dict],
    generated: list[dict],
    *,
    num_marks: int,
    num_locations: int = 0,
    day_length: float | None = None,
) -> dict:
    """Distances between the events of real and generated sequences (same windows):

    - ``gap_w1``: Wasserstein-1 between the inter-event times, divided by the real
      mean gap (0 = identical, scale-free);
    - ``count_w1``: Wasserstein-1 between the numbers of events per sequence, divided by
      the real mean count;
    - ``mark_jsd``: Jensen-Shannon divergence of the mark frequencies;
    - ``daily_jsd`` (with ``day_length``): of the 24-bin time-of-day histograms;
    - ``location_jsd`` (with locations): of the location frequencies.
    """
    from scipy.stats import wasserstein_distance

    def gaps(seqs):
        g = [np.diff(s["t"]) for s in seqs if len(s["t"]) > 1]
        return np.concatenate(g) if g else np.zeros(0)

    rg, gg = gaps(real), gaps(generated)
    rc = np.array([len(s["t"]) for s in real], dtype=float)
    gc = np.array([len(s["t"]) for s in generated], dtype=float)
    out = {
        "gap_w1": float(wasserstein_distance(rg, gg) / max(rg.mean(), 1e-300))
        if rg.size and gg.size
        else float("nan"),
        "count_w1": float(wasserstein_distance(rc, gc) / max(rc.mean(), 1e-300)),
    }

    def hist(seqs, key, bins):
        v = [s[key] for s in seqs if len(s[key])]
        v = np.concatenate(v) if v else np.zeros(0, dtype=np.int64)
        return np.bincount(v.astype(np.int64), minlength=bins).astype(float)

    out["mark_jsd"] = _jsd(hist(real, "mark", num_marks), hist(generated, "mark", num_marks))
    if day_length:

        def hours(seqs):
            t = [s["t"] for s in seqs if len(s["t"])]
            t = np.concatenate(t) if t else np.zeros(0)
            return np.bincount(
                np.floor(24 * (t % day_length) / day_length).astype(int) % 24, minlength=24
            )

        out["daily_jsd"] = _jsd(hours(real).astype(float), hours(generated).astype(float))
    if num_locations and all("loc_id" in s for s in real + generated):
        out["location_jsd"] = _jsd(
            hist(real, "loc_id", num_locations), hist(generated, "loc_id", num_locations)
        )
    return out


def event_items(traj, split) -> list[dict]:
    """The sequences of an events file (a split, or all with None) as dicts of ``t``,
    ``mark``, ``episode`` and the optional ``loc_id``, ``group``, ``params``, ``t_end``,
    ``window``: what :meth:`EventModel.collate` takes."""
    ids = np.arange(len(traj))
    if split is not None and "split" in traj.episode_fields:
        ids = ids[np.asarray(traj.column("split")) == data.split_id(split, where=str(traj.path))]
    items = []
    for i in ids:
        ep = traj[int(i)]
        item = {"t": ep["t"], "mark": ep["mark"], "episode": int(i)}
        for key in ("loc_id", "group", "params", "t_end", "window"):
            if key in ep:
                item[key] = ep[key]
        items.append(item)
    return items


@torch.no_grad()
def evaluate_events(
    model: EventModel,
    source,
    *,
    split="test",
    batch_size: int = 64,
    device=None,
    generate: bool = True,
    seed: int = 0,
    window: bool = True,
) -> dict:
    """Score ``model`` on the sequences of a file: ``ll_per_event`` (exact event-weighted
    mean, data time units), ``time_rmse``, ``type_accuracy``, ``loc_nll`` (with
    locations), ``events`` (scored), and with ``generate`` the
    :func:`generation_distances` of sequences sampled from each sequence's first event
    to its last event time against the real ones. ``window=False`` ignores the
    observation windows the file records: the compensator (and generation) stop at each
    sequence's last event, EasyTPP's convention."""
    traj = source if isinstance(source, data.Trajectories) else data.open(source)
    items = event_items(traj, split)
    if not window:
        for item in items:
            item.pop("t_end", None)
            item.pop("window", None)
    if not items:
        raise ValueError(f"{traj.path}: no sequences in split {split!r}")
    dev = (
        torch.device(device)
        if device is not None
        else next((p.device for p in model.parameters()), torch.device("cpu"))
    )
    model.to(dev).eval()
    gen = torch.Generator(device=dev).manual_seed(seed)
    sums = {"ll": 0.0, "se": 0.0, "hit": 0.0, "loc": 0.0, "events": 0}
    real, fake = [], []
    for a in range(0, len(items), batch_size):
        chunk = items[a : a + batch_size]
        batch = {k: v.to(dev) if torch.is_tensor(v) else v for k, v in model.collate(chunk).items()}
        terms = model.log_likelihood_terms(batch)
        n = int(terms["scored"].sum())
        sums["ll"] += float(terms["event"].sum() - terms["compensator"].sum())
        if "loc" in terms:
            sums["loc"] += float(terms["loc"].sum())
        pred = model.predict_next(batch, H=terms["H"])
        sums["se"] += float(pred["time_rmse"]) ** 2 * n
        sums["hit"] += float(pred["type_accuracy"]) * n
        sums["events"] += n
        if generate:
            step_keys = ("t", "mark", "valid", "dt", "loc_id")
            first = {k: v[:, :1] if k in step_keys else v for k, v in batch.items()}
            first["length"] = torch.ones_like(batch["length"])
            rows = torch.arange(len(chunk), device=dev)
            # to the window's end where the file records it, else to the last real event
            t_end = batch.get("t_end", batch["t"][rows, batch["length"] - 1])
            new = model.sample(first, t_end, max_new=4 * int(batch["length"].max()), generator=gen)
            for b, seq in enumerate(new):
                n_b = int(batch["length"][b])
                r = {
                    "t": batch["t"][b, :n_b].cpu().numpy(),
                    "mark": batch["mark"][b, :n_b].cpu().numpy(),
                }
                g = {
                    "t": np.concatenate([r["t"][:1], seq["t"]]),
                    "mark": np.concatenate([r["mark"][:1], seq["mark"]]),
                }
                if "loc_id" in batch and "loc_id" in seq:
                    r["loc_id"] = batch["loc_id"][b, :n_b].cpu().numpy()
                    g["loc_id"] = np.concatenate([r["loc_id"][:1], seq["loc_id"]])
                real.append(r)
                fake.append(g)
    n = max(sums["events"], 1)
    out = {
        "ll_per_event": sums["ll"] / n,
        "time_rmse": math.sqrt(sums["se"] / n),
        "type_accuracy": sums["hit"] / n,
        "events": sums["events"],
    }
    if model.loc_head is not None and "loc_id" in traj.step_fields:
        out["loc_nll"] = -sums["loc"] / n
    if generate:
        out.update(
            generation_distances(
                real,
                fake,
                num_marks=model.num_marks,
                num_locations=model.num_locations,
                day_length=model.day_length,
            )
        )
    return out
