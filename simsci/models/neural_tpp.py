r"""The neural temporal point-process baselines: RMTPP, Neural Hawkes, Transformer Hawkes.

Each is an :class:`~simsci.models._events.EventModel` (the harness gives the
likelihood, prediction, thinning and evaluation); each implements its paper's
intensity, written here from the papers' equations. Times are in model units
(data units / ``time_scale``): :math:`\tau = (t - t_j)/s` is the offset past the last
event, :math:`\Delta_j = (t_j - t_{j-1})/s` the gaps (``batch["dt"]``).

**RMTPP** (Du et al. 2016, "Recurrent marked temporal point processes"). A recurrent
net reads event j's mark embedding and gap features and gives :math:`h_j`; then

.. math::

    \lambda^*(t_j + \tau) = \exp(v^\top h_j + w\,\tau + b), \qquad
    p(k \mid h_j) = \mathrm{softmax}_k(V h_j + b^y), \qquad
    \lambda_k = p(k \mid h_j)\,\lambda^*,

and the compensator of a gap is closed form,
:math:`\int_0^\Delta \lambda^* = e^{v^\top h_j + b}\,(e^{w\Delta} - 1)/w`.

- The cell is a **GRU** (the paper writes a ReLU RNN, :math:`h_j = \max(W^y y_j +
  W^t t_j + W^h h_{j-1} + b_h, 0)`): a gated cell trains stably on short sequences
  without gradient clipping, and it keeps the state one vector (``extend_state`` is one
  GRU step).
- Gap features :math:`(\Delta_j, \log(1 + \Delta_j))`: the paper's raw gap, plus its
  log so that heavy-tailed gaps do not saturate the cell (:math:`\Delta_0 = 0`).
- The closed-form compensator replaces the harness's quadrature
  (:meth:`RMTPP.log_likelihood_terms`); :math:`(e^{w\Delta} - 1)/w` is evaluated as
  ``expm1(w Δ) / w``, and as its limit :math:`\Delta(1 + w\Delta/2)` when
  :math:`|w| < 10^{-6}`, so w needs no clamp away from 0. :math:`\log \lambda^*` is
  capped at 60 so that a growing intensity (w > 0) stays finite over the prediction
  horizon (float32 overflows at :math:`e^{88}`); an intensity of :math:`e^{60}` per
  model time unit is far beyond any fitted one, and below the cap the closed form is
  exact.

**Neural Hawkes** (Mei & Eisner 2017, continuous-time LSTM). After event j (mark
embedding :math:`x_j`, state just before it :math:`h(t_j^-)`, :math:`c(t_j^-)`) the
gates :math:`i, f, \bar\imath, \bar f, o = \sigma(\cdot)`, :math:`z = \tanh(\cdot)`,
:math:`\delta = \mathrm{softplus}(\cdot)` (each affine in :math:`[x_j, h(t_j^-)]`) give

.. math::

    c_{j+1} = f \odot c(t_j^-) + i \odot z, \quad
    \bar c_{j+1} = \bar f \odot \bar c_j + \bar\imath \odot z, \\
    c(t_j + \tau) = \bar c_{j+1} + (c_{j+1} - \bar c_{j+1})\,e^{-\delta \tau}, \quad
    h(t) = o \odot \tanh(c(t)), \quad
    \lambda_k(t) = s_k \log(1 + e^{w_k^\top h(t) / s_k}).

- ``H`` holds :math:`(c_{j+1}, \bar c_{j+1}, \delta, o)` concatenated (4 x hidden): the
  intensity at any :math:`\tau` is closed form, and ``extend_state`` is one CT-LSTM step.
- The paper's beginning-of-stream event is not needed: the harness gives the first
  event, so the cell starts from :math:`c = \bar c = h = 0` and reads event 0 as its
  first input. :math:`w_k` has no bias (as in the paper); :math:`s_k = e^{\theta_k}`
  is learned, initial 1.

*Calendar option* (``calendar=True``; not in the paper: a baseline given the calendar
time that CoCLD's population latent reads, so that a comparison can tell the coupling
from the access to absolute time). The calendar features :math:`\phi(t)` of an absolute
time are CoCLD's own (:func:`simsci.models._events.calendar_features`, the same
function and the same options: ``harmonics`` per cycle of the day and the week when the
file gives ``day_length``, ``trend_features`` bumps over ``calendar_span``); a small net
:math:`c(t) = \tanh(W_2 \tanh(W_1 \phi(t) + b_1) + b_2) \in \mathbb R^C`
(``calendar_dim`` C, the shape of CoCLD's population net less the group embedding:
groups are not read) enters twice:

.. math::

    \text{gates at event } j \mathrel{+}= W_c\, c(t_j), \qquad
    \lambda_k(t) = s_k \log\left(1 + e^{(w_k^\top h(t) + u_k^\top c(t)) / s_k}\right).

At the events, so that what the cell stores (and its decay rates) can depend on when an
event happened; in the intensity, read at the query time t itself, because the CT-LSTM
state between events only relaxes exponentially towards :math:`\bar c` and cannot
follow a daily cycle through a long quiet gap (a night): without the head term the
intensity of a quiet stretch could not rise in the morning. The head term is affine in
c(t), as CoCLD's head is in z(t, g). :math:`\Lambda` stays the harness's quadrature
(c(t) varies within a gap, so the CT-LSTM's intensity has no closed form either way).
The location head reads :math:`[h(t), c(t)]` (CoCLD's reads :math:`[h, z]`). The
calendar layers are built after the paper's, so ``calendar=False`` (the default) builds
and initialises the same network as before the option existed, and checkpoints without
the option load as the plain model.

**Transformer Hawkes** (Zuo et al. 2020). Event j's input is its mark embedding plus
the sinusoidal encoding of its time, :math:`x_j = U y_j + z(T_j)`,
:math:`z(T)_{2i} = \sin(T / 10000^{2i/M})`, :math:`z(T)_{2i+1} = \cos(\cdot)` (here
the sines fill the first half and the cosines the second: a fixed permutation of the
input coordinates, which the learned layers absorb); causal multi-head self-attention
layers (``torch.nn.TransformerEncoder``; event j attends to events 0..j) give
:math:`h_j`, and

.. math::

    \lambda_k(t_j + \tau) = s_k \log\left(1 + \exp\left(\left[\alpha_k\,c_j(\tau)
    + w_k^\top h_j + b_k\right] / s_k\right)\right)

with the "current" term :math:`c_j(\tau)` normalised by ``current``:

- ``"gap"`` (the default): :math:`c_j(\tau) = \tau = (t - t_j)/s`, the offset in
  model units, i.e. divided by the median training gap s (``time_scale``);
- ``"elapsed"``: :math:`c_j(\tau) = \tau / (T_j + 1)`, the paper's
  :math:`(t - t_j)/t_j` with times measured from the sequence's first event in model
  units, :math:`T_j = (t_j - t_0)/s`, and ``+ 1`` so that the first event
  (:math:`T_0 = 0`) stays finite.

Why ``"gap"`` by default: both normalisations make the term scale-free, but the
paper's fades as :math:`1/T_j` along the sequence, so one :math:`\alpha_k` cannot give
the intensity the same decay within an interval early and late in a sequence; the
model is then nearly constant between events and learns the history only through
:math:`h_j`. Measured on 1-mark Hawkes data (mu=0.5, alpha=0.6, beta=2; 120 sequences
of ~15 events, 72 to train, 36 held out; 150 Adam steps, lr 1e-2, batch 16; six data
seeds), the held-out log-likelihood per event beat the Poisson baseline's by
0.055-0.133 with ``"gap"`` and by -0.010 to +0.061 with ``"elapsed"`` (RMTPP: 0.08-0.20,
Neural Hawkes: 0.16-0.24). ``current="elapsed"`` restores the paper's form.

- :math:`T_j` is also what the temporal encoding reads: the paper encodes absolute
  times (its sequences start at 0), but ours may start anywhere (epoch seconds), and
  the model of a shifted sequence should be the same. ``H`` carries :math:`T_j` as its
  last column (for ``"elapsed"``).
- Pre-norm layers (``norm_first=True``): they train without warm-up on small data.
  ``dropout`` 0.1 as in the paper.
- The paper adds time and type prediction losses (MSE, cross-entropy) to the
  likelihood, and integrates by Monte Carlo; here the model is fitted on the
  likelihood alone (as RMTPP and the Neural Hawkes are, so the comparison is of the
  intensities) and the harness integrates by Gauss-Legendre quadrature, more accurate
  per intensity evaluation. No ``extend_state``: sampling recomputes ``history`` on
  the grown sequence (attention reads every earlier event).

Shared choices: the per-mark scale of a softplus (:math:`s_k` above) is
:math:`e^{\theta_k}`, so it stays positive. Groups (``batch["group"]``), calendar time
and ``params`` are not read: none of the three papers has them (calendar time only
with the Neural Hawkes' ``calendar=True``, above; the Transformer Hawkes' attention and
RMTPP's closed-form compensator are other code paths, not given the option). With a
file's locations (``num_locations > 0``) each model feeds the location head its state
at the event (RMTPP and THP :math:`h_j`, the Neural Hawkes :math:`h(t)`). Padded positions
follow the valid ones and every model is causal, so they never influence a valid
position.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from simsci.models._events import EventModel, calendar_features, calendar_width

__all__ = ["RMTPP", "NeuralHawkes", "TransformerHawkes"]

#: the normalisations of THP's current term (module docstring)
CURRENT_TERMS = ("gap", "elapsed")


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _scaled_softplus(x: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
    """s log(1 + exp(x / s)) per mark (the last axis), s = exp(log_scale) (K,)."""
    s = log_scale.exp()
    return s * F.softplus(x / s)


# ----------------------------------------------------------------------------- RMTPP
class RMTPP(EventModel):
    """Recurrent marked temporal point process (Du et al. 2016; module docstring).

    Args:
        num_marks: K.
        hidden: GRU width (the state ``H`` is (B, L, hidden)).
        mark_dim: mark embedding width.
        **event_args: the harness's (:class:`~simsci.models._events.EventModel`).
    """

    #: cap on log λ* (see the module docstring)
    LOG_CAP = 60.0

    def __init__(self, num_marks: int, *, hidden: int = 32, mark_dim: int = 16, **event_args):
        super().__init__(num_marks, **event_args)
        self.hidden = _positive_int("hidden", hidden)
        self.mark_dim = _positive_int("mark_dim", mark_dim)
        self.embed = nn.Embedding(self.num_marks, self.mark_dim)
        self.rnn = nn.GRU(self.mark_dim + 2, self.hidden, batch_first=True)
        self.time_head = nn.Linear(self.hidden, 1)  # v·h + b
        self.mark_head = nn.Linear(self.hidden, self.num_marks)  # V h + b^y
        # the scalar w of the current influence; a small decay to start with
        self.w = nn.Parameter(torch.tensor(-0.1))
        self._build_location_head(self.hidden, self.hidden)
        self.init_args = {**self.event_args, "hidden": self.hidden, "mark_dim": self.mark_dim}

    def _inputs(self, mark: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        """(…, mark_dim + 2) GRU input of events with marks ``mark`` and gaps ``dt``."""
        dt = dt.to(self.w.dtype)
        return torch.cat([self.embed(mark), dt[..., None], torch.log1p(dt)[..., None]], -1)

    def history(self, batch: dict) -> torch.Tensor:
        """(B, L, hidden): h_j after each event."""
        h, _ = self.rnn(self._inputs(batch["mark"], batch["dt"]))
        return h

    def _log_base(self, H: torch.Tensor) -> torch.Tensor:
        """(B, L) v·h_j + b."""
        return self.time_head(H)[..., 0]

    def intensity(self, H, t_last, tau):
        """(B, L, G, K) λ_k = p(k|h_j) exp(v·h_j + w τ + b)."""
        log_total = (self._log_base(H)[..., None] + self.w * tau.to(H.dtype)).clamp_max(
            self.LOG_CAP
        )
        log_p = torch.log_softmax(self.mark_head(H), -1)
        return torch.exp(log_total[..., None] + log_p[..., None, :])

    def compensator_closed_form(self, H: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        """(B, L) ∫_0^dt λ* = exp(v·h + b) (exp(w dt) - 1) / w, for H (B, L, D) and the
        gaps dt (B, L) that follow each state."""
        dt = dt.to(H.dtype)
        w = self.w
        small = w.abs() < 1e-6
        w_safe = torch.where(small, torch.ones_like(w), w)
        # expm1 keeps the relative precision of (e^{w dt} - 1) for small w dt
        ratio = torch.where(small, dt * (1 + w * dt / 2), torch.expm1(w * dt) / w_safe)
        return torch.exp(self._log_base(H).clamp_max(self.LOG_CAP)) * ratio

    def log_likelihood_terms(self, batch: dict) -> dict:
        """The harness's terms with the closed-form compensator (same dict contract)."""
        terms = super().log_likelihood_terms(batch)
        comp = self.compensator_closed_form(terms["H"][:, :-1], batch["dt"][:, 1:])
        pad = torch.zeros_like(comp[:, :1])
        comp = torch.cat([pad, comp], 1) * terms["scored"]
        if "t_end" in batch:  # the survival term to the window's end, closed form too
            rows = torch.arange(comp.shape[0], device=comp.device)
            last = batch["length"] - 1
            gap = ((batch["t_end"] - batch["t"][rows, last]) / self.time_scale).to(comp)
            tail = self.compensator_closed_form(terms["H"][rows, last][:, None], gap[:, None])
            scored = terms["scored"][rows, last].to(comp)
            comp = comp.index_put((rows, last), comp[rows, last] + tail[:, 0] * scored)
        terms["compensator"] = comp
        return terms

    def features(self, H, t_last, tau):
        """(B, L, G, hidden): h_j at every offset."""
        return H[..., None, :].expand(*tau.shape, H.shape[-1])

    def extend_state(self, H_last, t_last, tau, mark, group):
        """One GRU step: (B, hidden) after an event of ``mark`` a gap ``tau`` later."""
        x = self._inputs(mark, tau)[:, None]
        h, _ = self.rnn(x, H_last[None].contiguous())
        return h[:, 0]


# ---------------------------------------------------------------------- Neural Hawkes
class NeuralHawkes(EventModel):
    """Neural Hawkes process, continuous-time LSTM (Mei & Eisner 2017; module docstring).

    Args:
        num_marks: K.
        hidden: CT-LSTM width (the state ``H`` is (B, L, 4 * hidden): c, c̄, δ, o).
        calendar: read the calendar features of absolute time at the events and in the
            intensity (module docstring; default False, the paper's model).
        harmonics, trend_features: the calendar features (CoCLD's options, same
            defaults); calendar_dim: width C of the calendar net's output. Read only
            with ``calendar=True``.
        **event_args: the harness's (:class:`~simsci.models._events.EventModel`).
    """

    def __init__(
        self,
        num_marks: int,
        *,
        hidden: int = 32,
        calendar: bool = False,
        harmonics: int = 3,
        trend_features: int = 8,
        calendar_dim: int = 8,
        **event_args,
    ):
        super().__init__(num_marks, **event_args)
        self.hidden = _positive_int("hidden", hidden)
        if not isinstance(calendar, bool):
            raise ValueError(f"calendar must be True or False, got {calendar!r}")
        for name, value in (("harmonics", harmonics), ("trend_features", trend_features)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        self.calendar = calendar
        self.harmonics, self.trend_features = int(harmonics), int(trend_features)
        self.calendar_dim = _positive_int("calendar_dim", calendar_dim)
        if calendar and not self.day_length and self.trend_features == 0:
            raise ValueError(
                "calendar=True reads calendar time through day/week harmonics (day_length) "
                "or trend features; with neither there is no input: give day_length, set "
                "trend_features >= 1, or calendar=False"
            )
        self.embed = nn.Embedding(self.num_marks, self.hidden)
        # i, f, z, o, ī, f̄, δ, each affine in [x_j, h(t_j^-)]: W x_j + U h(t_j^-) + d (the
        # input part is computed for all events at once, outside the recurrence)
        self.gates_x = nn.Linear(self.hidden, 7 * self.hidden)
        self.gates_h = nn.Linear(self.hidden, 7 * self.hidden, bias=False)
        self.out = nn.Linear(self.hidden, self.num_marks, bias=False)  # w_k, no bias
        self.log_scale = nn.Parameter(torch.zeros(self.num_marks))  # s_k = e^θ_k
        cal = 0
        if self.calendar:  # built after the paper's layers: calendar=False inits as before
            cal = self.calendar_dim
            F_in = calendar_width(self.day_length, self.harmonics, self.trend_features)
            self.calendar_net = nn.Sequential(
                nn.Linear(F_in, self.hidden), nn.Tanh(), nn.Linear(self.hidden, cal), nn.Tanh()
            )
            self.calendar_gates = nn.Linear(cal, 7 * self.hidden, bias=False)
            self.calendar_out = nn.Linear(cal, self.num_marks, bias=False)
        self._build_location_head(self.hidden + cal, self.hidden)
        self.init_args = {**self.event_args, "hidden": self.hidden, "calendar": self.calendar}
        if self.calendar:
            self.init_args.update(
                harmonics=self.harmonics,
                trend_features=self.trend_features,
                calendar_dim=self.calendar_dim,
            )

    def _calendar(self, t: torch.Tensor) -> torch.Tensor:
        """c(t) (..., calendar_dim): the calendar net on the features of absolute times t
        (..., data units, float64)."""
        phi = calendar_features(
            t,
            day_length=self.day_length,
            harmonics=self.harmonics,
            trend_features=self.trend_features,
            span=self.calendar_span,
        )
        return self.calendar_net(phi.to(self.log_scale.dtype))

    def _query_times(self, t_last, tau):
        """(B, L, G) absolute times t_j + τ s (float64) of offsets τ (B, L, G)."""
        return t_last.double()[..., None] + tau.double() * self.time_scale

    def _gates_in(self, mark, t):
        """W x_j + d, plus W_c c(t_j) with the calendar: the input part of the gates."""
        gx = self.gates_x(self.embed(mark))
        if self.calendar:
            gx = gx + self.calendar_gates(self._calendar(t))
        return gx

    def _split(self, H: torch.Tensor):
        return H.split(self.hidden, -1)  # c, c̄, δ, o

    @staticmethod
    def _decay(c, cbar, delta, tau):
        """c(t_j + τ) = c̄ + (c - c̄) exp(-δ τ); τ broadcasts against the state."""
        return cbar + (c - cbar) * torch.exp(-delta * tau)

    def _cell(self, gx, c, cbar, delta, o, tau):
        """One CT-LSTM update: decay the state over ``tau`` to just before the event, then
        read the event (``gx`` = W x_j + d, its input part of the gates); returns the new
        (c, c̄, δ, o)."""
        c_t = self._decay(c, cbar, delta, tau)
        h_t = o * torch.tanh(c_t)
        g = gx + self.gates_h(h_t)
        i, f, z, o_new, ibar, fbar, d = g.chunk(7, -1)
        i, f, ibar, fbar = map(torch.sigmoid, (i, f, ibar, fbar))
        z = torch.tanh(z)
        c_new = f * c_t + i * z
        cbar_new = fbar * cbar + ibar * z
        return c_new, cbar_new, F.softplus(d), torch.sigmoid(o_new)

    def history(self, batch: dict) -> torch.Tensor:
        """(B, L, 4 hidden): (c, c̄, δ, o) after each event."""
        gx = self._gates_in(batch["mark"], batch["t"])
        dt = batch["dt"].to(gx.dtype)
        B, L = dt.shape
        zero = gx.new_zeros(B, self.hidden)
        # before event 0: c = c̄ = 0 and o = 0, so h(t_0^-) = 0 whatever the decay
        state = (zero, zero, zero, zero)
        out = []
        for j in range(L):
            state = self._cell(gx[:, j], *state, dt[:, j, None])
            out.append(torch.cat(state, -1))
        return torch.stack(out, 1)

    def _hidden_at(self, H, tau):
        """(B, L, G, hidden) h(t_j + τ)."""
        c, cbar, delta, o = (v[..., None, :] for v in self._split(H))
        c_t = self._decay(c, cbar, delta, tau.to(H.dtype)[..., None])
        return o * torch.tanh(c_t)

    def intensity(self, H, t_last, tau):
        """(B, L, G, K) λ_k(t_j + τ) = s_k softplus(w_k·h(t) / s_k), with the calendar
        s_k softplus((w_k·h(t) + u_k·c(t)) / s_k)."""
        x = self.out(self._hidden_at(H, tau))
        if self.calendar:
            x = x + self.calendar_out(self._calendar(self._query_times(t_last, tau)))
        return _scaled_softplus(x, self.log_scale)

    def features(self, H, t_last, tau):
        """(B, L, G, hidden): h(t_j + τ); with the calendar [h(t), c(t)]
        (hidden + calendar_dim)."""
        h = self._hidden_at(H, tau)
        if self.calendar:
            h = torch.cat([h, self._calendar(self._query_times(t_last, tau))], -1)
        return h

    def extend_state(self, H_last, t_last, tau, mark, group):
        """(B, 4 hidden) after one more event of ``mark`` at offset ``tau``."""
        t = t_last.double() + tau.double() * self.time_scale if self.calendar else None
        gx = self._gates_in(mark, t)
        state = self._cell(gx, *self._split(H_last), tau.to(H_last.dtype)[:, None])
        return torch.cat(state, -1)


# ----------------------------------------------------------------- Transformer Hawkes
class TransformerHawkes(EventModel):
    """Transformer Hawkes process (Zuo et al. 2020; module docstring).

    Args:
        num_marks: K.
        d_model: width of the embeddings and attention layers (even; ``H`` is
            (B, L, d_model + 1), the last column :math:`T_j`).
        heads: attention heads (dividing ``d_model``); layers: encoder layers;
        d_ff: feed-forward width; dropout: of the encoder layers.
        current: normalisation of the current term, ``"gap"`` (τ in model units) or
            ``"elapsed"`` (the paper's, τ / (T_j + 1)); see the module docstring.
        **event_args: the harness's (:class:`~simsci.models._events.EventModel`).
    """

    def __init__(
        self,
        num_marks: int,
        *,
        d_model: int = 32,
        heads: int = 4,
        layers: int = 2,
        d_ff: int = 64,
        dropout: float = 0.1,
        current: str = "gap",
        **event_args,
    ):
        super().__init__(num_marks, **event_args)
        self.d_model = _positive_int("d_model", d_model)
        self.heads = _positive_int("heads", heads)
        self.layers = _positive_int("layers", layers)
        self.d_ff = _positive_int("d_ff", d_ff)
        if self.d_model % 2:
            raise ValueError(f"d_model must be even (sine and cosine pairs), got {d_model}")
        if self.d_model % self.heads:
            raise ValueError(f"heads ({heads}) must divide d_model ({d_model})")
        if not (isinstance(dropout, (int, float)) and 0 <= dropout < 1):
            raise ValueError(f"dropout must be a number in [0, 1), got {dropout!r}")
        self.dropout = float(dropout)
        if current not in CURRENT_TERMS:
            raise ValueError(f"current must be one of {CURRENT_TERMS}, got {current!r}")
        self.current = current
        self.embed = nn.Embedding(self.num_marks, self.d_model)
        i = torch.arange(self.d_model // 2, dtype=torch.float32)
        self.register_buffer(
            "freq", torch.exp(-math.log(10000.0) * 2 * i / self.d_model), persistent=False
        )
        layer = nn.TransformerEncoderLayer(
            self.d_model,
            self.heads,
            self.d_ff,
            self.dropout,
            batch_first=True,
            norm_first=True,
        )
        # nested tensors are for key-padding masks; the causal mask alone isolates the
        # padding (it follows the valid events)
        self.encoder = nn.TransformerEncoder(
            layer, self.layers, norm=nn.LayerNorm(self.d_model), enable_nested_tensor=False
        )
        self.out = nn.Linear(self.d_model, self.num_marks)  # w_k, b_k
        self.alpha = nn.Parameter(torch.zeros(self.num_marks))
        self.log_scale = nn.Parameter(torch.zeros(self.num_marks))
        self._build_location_head(self.d_model, self.d_model)
        self.init_args = {
            **self.event_args,
            "d_model": self.d_model,
            "heads": self.heads,
            "layers": self.layers,
            "d_ff": self.d_ff,
            "dropout": self.dropout,
            "current": self.current,
        }

    def temporal_encoding(self, T: torch.Tensor) -> torch.Tensor:
        """(…, d_model) sinusoidal encoding of the model-unit times T (…)."""
        angle = T[..., None] * self.freq.to(T.dtype)
        return torch.cat([torch.sin(angle), torch.cos(angle)], -1)

    def history(self, batch: dict) -> torch.Tensor:
        """(B, L, d_model + 1): [h_j, T_j] after each event."""
        x = self.embed(batch["mark"])
        t = batch["t"]
        # subtract in float64 before the cast: absolute times may be large (epoch seconds)
        T = ((t - t[:, :1]) / self.time_scale).to(x.dtype)
        L = t.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(L, device=x.device, dtype=x.dtype)
        h = self.encoder(x + self.temporal_encoding(T), mask=mask, is_causal=True)
        return torch.cat([h, T[..., None]], -1)

    def intensity(self, H, t_last, tau):
        """(B, L, G, K) λ_k = s_k softplus((α_k c_j(τ) + w_k·h_j + b_k) / s_k)."""
        h, T = H[..., :-1], H[..., -1]
        tau = tau.to(H.dtype)
        if self.current == "elapsed":
            tau = tau / (T[..., None] + 1)
        current = self.alpha * tau[..., None]
        return _scaled_softplus(current + self.out(h)[..., None, :], self.log_scale)

    def features(self, H, t_last, tau):
        """(B, L, G, d_model): h_j at every offset."""
        h = H[..., :-1]
        return h[..., None, :].expand(*tau.shape, h.shape[-1])
