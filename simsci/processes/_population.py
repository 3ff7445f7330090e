r"""Event processes driven by a population: ``population_coupled`` and ``mobility``.

Two marked point processes (:class:`~simsci.processes.PointProcess`) and
their data sets, made to benchmark models of *coupled* continuous-time dynamics
(CoCLD: an individual's latent state evolves continuously while a population-level
state pushes it, both seen only through sparse events). In both, an individual's
events depend on the calendar time shared by a whole population, so a model that
ignores the population loses likelihood. All choices are simsci's own.

Time is in hours since a common epoch, t = 0 being Monday 00:00 (local time of every
group), so the population state is a function of absolute time: hour of day
:math:`t \bmod 24`, hour of week :math:`t \bmod 168`.

**population_coupled** (:class:`PopulationCoupledProcess`). G groups (populations,
e.g. cities; default 2), K marks (default 3), a latent of dimension d (default 2).

*Population state* of group g, :math:`p_g(t) \in \mathbb R^5`, shared by everyone in
the group, with :math:`\omega_d = 2\pi/24`, :math:`\omega_w = 2\pi/168`:

.. math::

    p_g(t) = \big(A_g\cos\omega_d(t-\phi_g),\ A_g\sin\omega_d(t-\phi_g),\
             B_g\cos\omega_w(t-\psi_g),\ B_g\sin\omega_w(t-\psi_g),\
             \sigma((t-\tau_g)/\delta) - 1/2\big)

a daily cycle peaking at hour :math:`\phi_g`, a weekly cycle peaking at hour of week
:math:`\psi_g` and a regime shift, a smooth step from -1/2 to +1/2 of width
:math:`\delta` at a group-specific time :math:`\tau_g` (centred, so that it moves the
mark preferences symmetrically). Defaults, with :math:`f_g = g/(G-1)` (1/2 when
G = 1): :math:`\phi_g = 13 + 6f_g` h (group 0 peaks at 13:00, group 1 at 19:00),
:math:`A_g = 1.8 - 0.4f_g`, :math:`\psi_g = 132 + 12f_g` (Saturday noon to midnight),
:math:`B_g = 0.5 + 0.3f_g`, :math:`\tau_g = 672(0.35 + 0.3f_g)` (day 9.8 and day 18.2
of a 4-week calendar; the ``population_events`` builder places them at the same
fractions of its own span), :math:`\delta = 6` h.

*Individual* i (one sequence) belongs to group g and has a latent
:math:`h_i(t) \in \mathbb R^d`: between its events a linear ODE
:math:`dh/dt = -a \odot (h - m_i)` (closed form
:math:`h(t) = m_i + (h(s) - m_i)\,e^{-a(t-s)}`), at its own events a jump
:math:`h \leftarrow h + J_{k}` (k the event's mark), starting at :math:`h = m_i`,
so :math:`h_i(t) = m_i + \sum_{t_j < t} J_{k_j} \odot e^{-a(t - t_j)}` whatever the
window's start. The random effect :math:`m_i \sim N(0, s^2 I)` is drawn per sequence.
Defaults: decay rates :math:`a = (0.5, 0.1, 0.1, \dots)` per hour (a 2-hour burst
component, 10-hour habit components), :math:`s = 0.5`.

*Intensity* of mark k,

.. math::

    \lambda_k(t) = \bar\lambda_k\,\sigma\big(w_k\cdot h_i(t) + u_{g,k}\cdot p_g(t)
                   + b_k\big),

bounded by :math:`\bar\lambda_k`, so Lewis thinning with the constant bound
:math:`\sum_k \bar\lambda_k` is exact. Defaults: :math:`\bar\lambda_k = 2` per hour,
:math:`b_k = -3.5`; :math:`w_{k,0} = 1` and :math:`w_{k,j} = \cos(\pi j(k + 1/2)/K)`
for j >= 1 (component 0 raises every mark, the others shift the mark preferences:
for K = 3, :math:`w_{\cdot,1} = (0.87, 0, -0.87)`); jumps :math:`J_{k,0} = 0.3`
(self-excitation through the fast component) and :math:`J_{k,j} = 0.15 w_{k,j}` (an
event of mark k makes mark k more likely for the next hours: habits); coupling
:math:`u_{g,k} = (\cos\theta_k, \sin\theta_k, 1, 0, r_k)`, the same for every group
(the groups differ through :math:`p_g`), :math:`\theta_k = \omega_d \cdot 4(k -
(K-1)/2)` (mark k peaks :math:`4(k - (K-1)/2)` hours after the group's daily peak:
for K = 3 at 9:00, 13:00, 17:00 in group 0), :math:`r_k = 2(2k/(K-1) - 1)` (the
regime moves the preference from the low to the high marks: the logit of mark 0 drops
by 2, that of mark K-1 rises by 2). Stronger self-excitation (0.8) or random effects
(0.8) were tried: they saturate the sigmoid of the busiest individuals, whose events
then dominate and hardly follow the population (the likelihood gap below fell to
0.07-0.2 nats per event).

*Sequences.* ``sample(n, t_start=..., t_end=...)`` with per-sequence windows (arrays):
the ``population_events`` builder starts them at uniform absolute times over a
calendar span (default 28 days) and gives each a window (default 72 hours), so
sequences see different phases of the cycles and both sides of the regime shift.
Each sequence's ``params`` is :math:`(g, m_{i,0}, \dots, m_{i,d-1})` (the group as a
float, exactly an integer) and ``group`` is g: everything the intensity needs beyond
the events. A ceiling computed with them (the true process) is an *oracle* that knows
the individual random effect, which no model fitted to the events can know: an upper
bound, not an attainable target.

*Likelihood.* :math:`\sum_j \log\lambda_{k_j}(t_j^-)` (exact) minus the compensator
:math:`\int\sum_k\lambda_k`, by Gauss-Legendre quadrature per inter-event interval
(the integrand is analytic between events): each interval is cut into pieces of at
most ``max_piece`` = 1 hour, 16 nodes each. The integrand varies on scales of 2 hours
(the fast decay), 3.8 hours (the daily cycle) and 6 hours (the regime step), so the
rule converges far below the needed accuracy: against 64 nodes on pieces of 0.1 hour
the compensator's relative error is at most 3e-15 (measured on 50 sampled sequences:
rounding; tested < 1e-8). A time-rescaling check must select the compensator
increments predictably (e.g. those whose interval starts inside the window, sampling
past it): the complete intervals inside a fixed window are biased short, by about
one over the number of events (a mean of 0.98 at 60 events).
:meth:`~PopulationCoupledProcess.time_averaged` returns the same process with
:math:`u_{g,k}\cdot p_g(t)` replaced by its mean over a time range (a constant per
group and mark): the "no population" ablation.

*Measured* (default data set, ``make_dataset("population_events", 2000)``, seed 0,
72-hour windows over 28 days): 58 events per sequence on average (median 47,
quartiles 26 and 81, 5-95%: 11-141); log-likelihood per event over the whole windows
-1.391 nats for the true process, -1.824 with the population term replaced by its mean
over the calendar span (:meth:`time_averaged` over [0, 672]): the population term is
worth 0.43 nats per event (0.41-0.48 over other seeds, 200 sequences each). Sampling
1000 such sequences takes 0.2-0.3 s on one core; building the 2000-sequence file
under 1 s.

**mobility** (:class:`MobilityProcess`). Agents checking in at L locations (default
36) on a 2-D map, K venue types (default 5: ``VENUE_TYPES`` = home, work, food, shop,
leisure). The default map (:func:`city_map`) places locations around four
neighbourhoods of a [0, 10]^2 km city (downtown, west, south, waterfront: Gaussian
scatter of 0.7-0.9 km around their centres, clipped to the city); each venue type has
its own mix of neighbourhoods (homes in the west and south, work downtown, leisure on
the waterfront...) and every location has a popularity (log-normal, sigma 0.6,
normalised to mean 1). The map is drawn once from numpy's PCG64 with ``map_seed``
and then stored explicitly (in ``config()`` and the file's ``/static``), so a file
never depends on the random generator. Each agent has a home (uniform among the
home-type locations), a work place (chosen with weight popularity *
:math:`e^{-d/4\,\mathrm{km}}` from the home), an activity level
:math:`\alpha_i \sim N(0, 0.3^2)` (log-rate offset), and starts its window at home.

*Marks (venue type) and times.* With current venue type s (the type of the last
check-in, home before the first) and :math:`\Delta` the time since the last check-in
(infinite before the first),

.. math::

    \lambda_k(t) = \exp\Big(c_k + \beta_{s,k} + \alpha_i + \sum_{b \in k} a_b\,D_b(t)\,
                   v_b(t)\Big)\,\big(1 - e^{-\Delta/r}\big),

a sum of daily bumps :math:`v_b(t) = \exp\big((\cos(\omega_d(t - \mu_b)) - 1)/
(\omega_d w_b)^2\big)` (peak hour :math:`\mu_b`, width :math:`w_b` hours; the table
``MOBILITY_BUMPS``: work arrivals at 8:30 and back from lunch at 13:30 on weekdays,
breakfast, lunch at 12:30 and dinner at 19:30, shopping after work and on weekend
afternoons, leisure in the evenings and on weekends, home in the evening), each
active on weekdays (:math:`D_b = 1 - W(t)`) or weekends (:math:`D_b = W(t)`), where
:math:`W(t)` is a smooth weekend indicator (sigmoids of width 1 hour at Saturday
00:00 and Monday 00:00). :math:`c_k` (``MOBILITY_BASE``) are night-time log-rates per
hour, :math:`\beta` (``MOBILITY_TRANSITION``) the affinity of the next venue type
from the current one (no check-in at home when at home, lunch after work, home after
leisure, ...), r = 0.5 h a refractory time (no check-in minutes after another).
Nights are quiet because every profile is low at night and agents are home by then.
An agent makes about 4.6 check-ins a day (more on weekdays); four in five go to work
on a weekday morning.

*Locations.* Given the type k of a check-in and the current location :math:`\ell`
(the previous check-in's; home before the first), the location is the agent's home
(k = home), its work place (k = work), or for the other types a gravity model:
:math:`P(j \mid k, \ell) \propto \mathrm{popularity}_j\,e^{-d(\ell, j)/2\,\mathrm{km}}`
over the locations of type k. :meth:`MobilityProcess.location_log_prob` gives these
log-probabilities exactly, so the true process has a ceiling for the location
likelihood too; the full log-likelihood is ``log_likelihood`` (time and type) plus
the sum of ``location_log_prob`` (the location part is conditionally independent of
the times given the types and the previous location).

*Sampling* is thinning with a bound that is constant per state and hour of day: within
hour bin h, :math:`a_b v_b(t) \le a_b^+ \max_{bin} v_b` (the bump's maximum over the
bin is exact: at its peak or the nearer end), the weekday/weekend mix is a convex
combination (bounded by the larger of the two profiles) and the refractory factor is
at most 1. At a bin's end the candidate is discarded and the next bin's bound is used
(exact: exponential waiting times are memoryless). *Likelihood*: as above, 16-point
Gauss-Legendre rule on pieces of at most 1 hour; the narrowest bump (0.75 h) and the
refractory rise (0.5 h) are still smooth on the scale of a piece: the compensator's
relative error is at most 1e-14 against 64 nodes on 0.1-hour pieces (50 sampled
agent-weeks; tested < 1e-8). ``params`` is (home id, work id, :math:`\alpha_i`) and
``group`` the home's neighbourhood.

*Measured* (``make_dataset("mobility", 2000)``, seed 0, 7 days per agent): 32
check-ins per agent on average (5-95%: 20-46), log-likelihood (time and type) -2.464
nats per check-in for the true process over the whole windows, location part -0.788
nats per check-in; sampling 2000 agent-weeks takes about 0.3 s on one core.

Design choices, and why:

- **Bounded intensities where possible.** A sigmoid link caps
  ``population_coupled``'s intensity, so thinning is exact with a constant bound and
  no look-ahead; the mobility rates are exponentials of bounded profiles, bounded per
  state and hour. Both samplers advance all sequences together (one numpy step per
  candidate across the sequences still running); one seed gives the same sequences,
  and sequence i depends on n (they share one stream).
- **Quadrature, not closed forms.** The compensators (a sigmoid of decaying
  exponentials and cosines; exponentials of von Mises bumps) have no closed form, but
  they are analytic between events, where Gauss-Legendre converges geometrically;
  the error is measured and tested against a much finer rule. ``log_likelihood`` and
  ``cumulative_intensity`` take ``order`` and ``max_piece`` for such checks.
- **Many sequences at once.** ``process.batch(...)`` builds every row's latent path
  (population) or reads the last check-in (mobility) once, evaluates the scored events
  and the quadrature nodes of all rows together (the same pieces and nodes as the
  per-sequence rule) and updates the latent path in place when thinning appends an
  event: the true-process scorer's 5-20 s per test split were a Python loop over
  sequences and events.
- **Absolute time.** The population state depends on the calendar, so windows start
  at absolute times; a model that sees only gaps cannot know the phase.
- **Everything per sequence in params.** The intensity of a sequence needs its group
  and random effect (population) or home, work and activity (mobility): they are
  ``params``, so ``process_from_config(meta["process"])`` and the episode's params
  give the exact likelihood. That ceiling is an oracle (it knows the random effect).
- **Groups differ through p_g, not u.** The default coupling is shared by the groups
  (any (G, K, 5) can be given), so the groups are populations with their own clocks
  (peak hours, weekly rhythm, regime date) acting on the same individuals' model.

**Data sets** (``make_dataset``): ``population_events`` and ``mobility`` write
kind="events" files; ``meta`` holds ``process`` (``config()``; rebuild with
:func:`~simsci.processes.process_from_config`), ``time_unit`` "hour",
``day_length`` 24, ``week_length`` 168 and the builder's options. Episode fields:
``params`` (above), ``group``, ``window`` (the observed window [start, end], hours:
the true log-likelihood of the whole observation is ``log_likelihood(t, mark,
t_start=window[0], t_end=window[1], params=params)``). ``min_events`` (default 2)
redraws sequences with fewer events (new group, start, random effect and events): it
conditions the data set on having at least that many events, which the process's
likelihood does not account for (a sequence is redrawn rarely with the defaults; the
count is in ``meta["redrawn"]``). ``max_events`` keeps the first events of longer
sequences and moves the window's end to the last kept event (a stopping time, so the
likelihood of the kept part is still the process's own); the count is in
``meta["truncated"]``. Mobility files have step fields ``loc`` float64 (S, 2) (km)
and ``loc_id`` int64 (S,), and ``/static/locations`` (L, 2), ``venue_type`` (L,),
``popularity`` (L,), ``neighbourhood`` (L,). They are written by
:class:`~simsci.data.TrajectoryWriter` with ``write_event_file``'s split rule,
because ``write_event_file`` stores every field other than t/mark/loc as an episode
field, and the event models read ``loc_id`` as a step field.
"""

from __future__ import annotations

import abc
import functools
import math

import numpy as np

from simsci._seeding import check_positive
from simsci.processes._base import PointProcess, check_sequence, register_process

DAY = 24.0
WEEK = 168.0
#: Gauss-Legendre nodes per piece and the longest piece (hours) of the compensators
QUAD_ORDER = 16
MAX_PIECE = 1.0


# ------------------------------------------------------------------ shared helpers
@functools.lru_cache(maxsize=16)
def _gl_rule(order: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [0, 1]."""
    x, w = np.polynomial.legendre.leggauss(order)
    return (x + 1.0) / 2.0, w / 2.0


def quadrature_nodes(edges, *, order: int = QUAD_ORDER, max_piece: float = MAX_PIECE):
    """Nodes (M,), weights (M,) and interval index (M,) of a Gauss-Legendre rule on each
    interval ``[edges[i], edges[i+1]]`` (edges (B+1,) non-decreasing), cut into
    ``ceil(length / max_piece)`` equal pieces of ``order`` nodes each."""
    _check_rule(order, max_piece)
    edges = np.asarray(edges, dtype=np.float64)
    return _pieces(edges[:-1], edges[1:], int(order), max_piece)


def _check_rule(order, max_piece) -> None:
    if isinstance(order, bool) or int(order) != order or order < 1:
        raise ValueError(f"order must be an integer >= 1, got {order!r}")
    if not (isinstance(max_piece, (int, float)) and math.isfinite(max_piece) and max_piece > 0):
        raise ValueError(f"max_piece must be a finite number > 0 (hours), got {max_piece!r}")


def _pieces(starts: np.ndarray, ends: np.ndarray, order: int, max_piece: float):
    """:func:`quadrature_nodes` on the intervals [starts[i], ends[i]] (any, not only
    consecutive: the intervals of many sequences at once)."""
    lengths = ends - starts
    counts = np.maximum(1, np.ceil(lengths / max_piece).astype(np.int64))
    interval = np.repeat(np.arange(len(lengths)), counts)
    first = np.cumsum(counts) - counts
    piece = np.arange(int(counts.sum())) - first[interval]
    h = lengths[interval] / counts[interval]
    start = starts[interval] + piece * h
    x, w = _gl_rule(order)
    nodes = (start[:, None] + h[:, None] * x).ravel()
    weights = (h[:, None] * w).ravel()
    return nodes, weights, np.repeat(interval, order)


def _rng(seed) -> np.random.Generator:
    """An int >= 0, a SeedSequence or a Generator (used as is)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.SeedSequence):
        return np.random.default_rng(seed)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return np.random.default_rng(int(seed))


def _array(name: str, value, shape: tuple, *, positive=False, integer=False) -> np.ndarray:
    """``value`` as a float64 array of ``shape``, finite (and > 0 / integral)."""
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must be an array of numbers of shape {shape}, got {value!r}"
        ) from None
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {arr.tolist()}")
    if positive and not np.all(arr > 0):
        raise ValueError(f"{name} must be > 0 (rates, time scales), got {arr.tolist()}")
    if integer and not np.all(arr == np.round(arr)):
        raise ValueError(f"{name} must hold integers, got {arr.tolist()}")
    return arr


def _count(name: str, value, minimum: int = 1) -> int:
    return int(check_positive(name, value, integer=True, minimum=minimum))


def _windows(n: int, t_start, t_end) -> tuple[np.ndarray, np.ndarray]:
    """Per-sequence windows: scalars or (n,) arrays, finite, start <= end."""
    t0 = np.broadcast_to(np.asarray(t_start, dtype=np.float64), (n,)).copy()
    t1 = np.broadcast_to(np.asarray(t_end, dtype=np.float64), (n,)).copy()
    if not (np.all(np.isfinite(t0)) and np.all(np.isfinite(t1))):
        raise ValueError("t_start and t_end must be finite")
    if np.any(t1 < t0):
        i = int(np.argmax(t1 < t0))
        raise ValueError(f"t_end must be >= t_start; sequence {i}: {t0[i]} > {t1[i]}")
    return t0, t1


def _check_window(times, t_start, t_end) -> tuple[float, float]:
    t_start, t_end = float(t_start), float(t_end)
    if not (math.isfinite(t_start) and math.isfinite(t_end)) or t_end < t_start:
        raise ValueError(f"need finite t_start <= t_end, got {t_start} and {t_end}")
    if len(times) and times[-1] > t_end:
        raise ValueError(
            f"an event at t = {times[-1]!r} lies after t_end = {t_end!r}; pass only the "
            "events up to t_end"
        )
    return t_start, t_end


def _collect(n: int, seq_ids: list, times: list, marks: list, *extra: list) -> list[tuple]:
    """Group the accepted events (appended in time order per sequence) by sequence."""
    ids = np.concatenate(seq_ids) if seq_ids else np.zeros(0, np.int64)
    order = np.argsort(ids, kind="stable")
    cuts = np.cumsum(np.bincount(ids, minlength=n))[:-1]
    cols = [np.concatenate(c)[order] if c else np.zeros(0) for c in (times, marks, *extra)]
    return list(zip(*(np.split(c, cuts) for c in cols)))


class _QuadratureProcess(PointProcess):
    """Shared likelihood machinery: subclasses give ``_prepare(times, marks, params)``
    (a context) and ``_log_rates(ctx, tq)`` (Q, K) log-intensities at query times given
    the events strictly before each."""

    @abc.abstractmethod
    def _prepare(self, times, marks, params): ...

    @abc.abstractmethod
    def _log_rates(self, ctx, tq: np.ndarray) -> np.ndarray: ...

    @abc.abstractmethod
    def _batch_prepare(self, batch):
        """The per-row context of a :class:`~simsci.processes.SequenceBatch` (its
        ``params`` checked row by row)."""
        ...

    @abc.abstractmethod
    def _batch_log_rates(self, batch, tq, rows, before) -> np.ndarray:
        """(Q, K) log-intensities at ``tq`` of row ``rows`` given its first ``before``
        events (those strictly before each query): ``_log_rates`` for many rows."""
        ...

    def _batch_intensity(self, batch, q, rows, before):
        return np.exp(self._batch_log_rates(batch, q, rows, before))

    def _batch_log_likelihood(
        self, batch, t_start, t_end, *, order: int = QUAD_ORDER, max_piece: float = MAX_PIECE
    ):
        """:meth:`log_likelihood` of every row: the scored events and the quadrature
        nodes of all rows evaluated together (same nodes, same rule)."""
        _check_rule(order, max_piece)
        t, valid = batch.times, batch.valid
        B = batch.size
        scored = valid & (t > t_start[:, None])
        sb, sj = np.nonzero(scored)
        # an event's history is the events before it: the first j of its row
        events = self._batch_log_rates(batch, t[sb, sj], sb, sj)[
            np.arange(len(sb)), batch.marks[sb, sj]
        ]
        total = np.bincount(sb, weights=events, minlength=B)
        # the breakpoints t_start < scored events < t_end of every row, flattened
        keep = np.concatenate([np.ones((B, 1), bool), scored, np.ones((B, 1), bool)], axis=1)
        points = np.concatenate([t_start[:, None], t, t_end[:, None]], axis=1)
        fr, fc = np.nonzero(keep)
        flat = points[fr, fc]
        same = fr[:-1] == fr[1:]  # consecutive breakpoints of one row: an interval
        irow = fr[:-1][same]
        nodes, weights, interval = _pieces(flat[:-1][same], flat[1:][same], int(order), max_piece)
        nrow = irow[interval]
        rates = np.empty(len(nodes))
        for a in range(0, len(nodes), batch.CHUNK):
            sl = slice(a, a + batch.CHUNK)
            before = batch.before(nodes[sl], nrow[sl])
            rates[sl] = np.exp(self._batch_log_rates(batch, nodes[sl], nrow[sl], before)).sum(1)
        per_interval = np.bincount(interval, weights=weights * rates, minlength=len(irow))
        return total - np.bincount(irow, weights=per_interval, minlength=B)

    def intensity(self, t_query, times, marks, params=None) -> np.ndarray:
        """:math:`\\lambda_k(t_q-)` (Q, K) given the events of ``times`` strictly before
        each query time (``params``: the sequence's, see the class docstring)."""
        t, m = check_sequence(times, marks, self.num_marks)
        tq = np.atleast_1d(np.asarray(t_query, dtype=np.float64))
        if tq.ndim != 1 or not np.all(np.isfinite(tq)):
            raise ValueError(f"t_query must be finite, 1-D or a scalar, got shape {tq.shape}")
        return np.exp(self._log_rates(self._prepare(t, m, params), tq))

    def cumulative_intensity(
        self,
        times,
        marks,
        *,
        t_start: float,
        t_end: float,
        params=None,
        order: int = QUAD_ORDER,
        max_piece: float = MAX_PIECE,
    ) -> np.ndarray:
        """Compensator :math:`\\int \\sum_k \\lambda_k` over each interval between the
        breakpoints ``t_start, t_1, ..., t_n, t_end`` (the events in (t_start, t_end]):
        (n + 1,); the first n are the time-rescaling increments (i.i.d. Exp(1) under the
        process when selected predictably: module docstring). Gauss-Legendre, ``order``
        nodes on pieces of at most ``max_piece``."""
        t, m = check_sequence(times, marks, self.num_marks)
        t_start, t_end = _check_window(t, t_start, t_end)
        return self._compensator(self._prepare(t, m, params), t, t_start, t_end, order, max_piece)

    def _compensator(self, ctx, t, t_start, t_end, order, max_piece) -> np.ndarray:
        inside = t[t > t_start]
        edges = np.concatenate([[t_start], inside, [t_end]])
        nodes, weights, interval = quadrature_nodes(edges, order=order, max_piece=max_piece)
        rates = np.exp(self._log_rates(ctx, nodes)).sum(axis=1)
        return np.bincount(interval, weights=weights * rates, minlength=len(edges) - 1)

    def log_likelihood(
        self,
        times,
        marks,
        *,
        t_start: float,
        t_end: float,
        params=None,
        order: int = QUAD_ORDER,
        max_piece: float = MAX_PIECE,
    ) -> float:
        """Log-likelihood of the events in (t_start, t_end] given those before (the
        module docstring: exact event terms, Gauss-Legendre compensator)."""
        t, m = check_sequence(times, marks, self.num_marks)
        t_start, t_end = _check_window(t, t_start, t_end)
        ctx = self._prepare(t, m, params)
        scored = t > t_start
        events = self._log_rates(ctx, t[scored])[np.arange(int(scored.sum())), m[scored]]
        comp = self._compensator(ctx, t, t_start, t_end, order, max_piece)
        return float(events.sum() - comp.sum())


# ======================================================= population-coupled process
@register_process
class PopulationCoupledProcess(_QuadratureProcess):
    """Individuals' latent linear ODEs with self-jumps, pushed by a group-level daily /
    weekly / regime state (module docstring: equations, defaults, measured figures).

    ``params`` of a sequence: (1 + d,) = (group, m_0..m_{d-1}), the individual random
    effect; arrays below: ``lam_max`` (K,), ``bias`` (K,), ``weights`` (K, d),
    ``jumps`` (K, d), ``decay`` (d,), ``coupling`` (G, K, 5), per group ``daily_phase``,
    ``daily_amplitude``, ``weekly_phase``, ``weekly_amplitude``, ``regime_time`` (G,);
    ``population_mean`` (G, K) replaces the population term by constants (see
    :meth:`time_averaged`).
    """

    name = "population_coupled"
    #: size of p_g(t): daily cos/sin, weekly cos/sin, regime step
    POPULATION_DIM = 5

    def __init__(
        self,
        num_marks: int = 3,
        groups: int = 2,
        latent_dim: int = 2,
        *,
        lam_max=None,
        bias=None,
        weights=None,
        jumps=None,
        decay=None,
        effect_std: float = 0.5,
        coupling=None,
        daily_phase=None,
        daily_amplitude=None,
        weekly_phase=None,
        weekly_amplitude=None,
        regime_time=None,
        regime_width: float = 6.0,
        population_mean=None,
    ):
        super().__init__(num_marks)
        K = self.num_marks
        G = self.groups = _count("groups", groups)
        d = self.latent_dim = _count("latent_dim", latent_dim)
        f = np.arange(G) / (G - 1) if G > 1 else np.full(G, 0.5)
        k = np.arange(K)
        w_default = np.ones((K, d))
        for j in range(1, d):
            w_default[:, j] = np.cos(np.pi * j * (k + 0.5) / K)
        theta = 2 * np.pi / DAY * 4.0 * (k - (K - 1) / 2)
        shift = 2.0 * (2 * k / (K - 1) - 1) if K > 1 else np.zeros(K)
        u_default = np.stack(
            [np.cos(theta), np.sin(theta), np.ones(K), np.zeros(K), shift], axis=-1
        )
        jumps_default = 0.15 * w_default
        jumps_default[:, 0] = 0.3
        decay_default = np.full(d, 0.1)
        decay_default[0] = 0.5

        self.lam_max = _array(
            "lam_max", np.full(K, 2.0) if lam_max is None else lam_max, (K,), positive=True
        )
        self.bias = _array("bias", np.full(K, -3.5) if bias is None else bias, (K,))
        self.weights = _array("weights", w_default if weights is None else weights, (K, d))
        self.jumps = _array("jumps", jumps_default if jumps is None else jumps, (K, d))
        self.decay = _array("decay", decay_default if decay is None else decay, (d,), positive=True)
        self.effect_std = float(check_positive("effect_std", effect_std, minimum=0.0))
        P = self.POPULATION_DIM
        self.coupling = _array(
            "coupling",
            np.broadcast_to(u_default, (G, K, P)) if coupling is None else coupling,
            (G, K, P),
        )
        self.daily_phase = _array(
            "daily_phase", 13.0 + 6.0 * f if daily_phase is None else daily_phase, (G,)
        )
        self.daily_amplitude = _array(
            "daily_amplitude",
            1.8 - 0.4 * f if daily_amplitude is None else daily_amplitude,
            (G,),
        )
        self.weekly_phase = _array(
            "weekly_phase", 132.0 + 12.0 * f if weekly_phase is None else weekly_phase, (G,)
        )
        self.weekly_amplitude = _array(
            "weekly_amplitude",
            0.5 + 0.3 * f if weekly_amplitude is None else weekly_amplitude,
            (G,),
        )
        self.regime_time = _array(
            "regime_time",
            4 * WEEK * (0.35 + 0.3 * f) if regime_time is None else regime_time,
            (G,),
        )
        self.regime_width = float(check_positive("regime_width", regime_width))
        self.population_mean = (
            None if population_mean is None else _array("population_mean", population_mean, (G, K))
        )

    def params(self) -> dict:
        return {
            "num_marks": self.num_marks,
            "groups": self.groups,
            "latent_dim": self.latent_dim,
            "lam_max": self.lam_max.tolist(),
            "bias": self.bias.tolist(),
            "weights": self.weights.tolist(),
            "jumps": self.jumps.tolist(),
            "decay": self.decay.tolist(),
            "effect_std": self.effect_std,
            "coupling": self.coupling.tolist(),
            "daily_phase": self.daily_phase.tolist(),
            "daily_amplitude": self.daily_amplitude.tolist(),
            "weekly_phase": self.weekly_phase.tolist(),
            "weekly_amplitude": self.weekly_amplitude.tolist(),
            "regime_time": self.regime_time.tolist(),
            "regime_width": self.regime_width,
            "population_mean": None
            if self.population_mean is None
            else self.population_mean.tolist(),
        }

    # ------------------------------------------------------------- population state
    def _groups(self, group, shape) -> np.ndarray:
        g = np.asarray(group)
        if g.dtype.kind == "f" and np.all(g == np.round(g)):
            g = g.astype(np.int64)
        if g.dtype.kind not in "iu" or np.any(g < 0) or np.any(g >= self.groups):
            raise ValueError(f"group must be integers in 0..{self.groups - 1}, got {group!r}")
        return np.broadcast_to(g, shape)

    def population_state(self, t, group) -> np.ndarray:
        """:math:`p_g(t)` (Q, 5) at times ``t`` (Q,) for groups ``group`` (scalar or (Q,))."""
        t = np.atleast_1d(np.asarray(t, dtype=np.float64))
        g = self._groups(group, t.shape)
        day = 2 * np.pi / DAY * (t - self.daily_phase[g])
        week = 2 * np.pi / WEEK * (t - self.weekly_phase[g])
        A, B = self.daily_amplitude[g], self.weekly_amplitude[g]
        # centred: before the shift -1/2, after +1/2 (symmetric in the marks)
        step = 0.5 * np.tanh((t - self.regime_time[g]) / (2 * self.regime_width))
        return np.stack(
            [A * np.cos(day), A * np.sin(day), B * np.cos(week), B * np.sin(week), step], -1
        )

    def population_drive(self, t, group) -> np.ndarray:
        """The population term :math:`u_{g,k}\\cdot p_g(t)` (Q, K) (the constants of
        ``population_mean`` when set)."""
        t = np.atleast_1d(np.asarray(t, dtype=np.float64))
        g = self._groups(group, t.shape)
        if self.population_mean is not None:
            return self.population_mean[g]
        return np.einsum("qkp,qp->qk", self.coupling[g], self.population_state(t, g))

    def time_averaged(self, t_from: float, t_to: float) -> PopulationCoupledProcess:
        """The same process with the population term replaced by its mean over
        [t_from, t_to] (exact: the cycles and the sigmoid integrate in closed form)."""
        t_from, t_to = float(t_from), float(t_to)
        if not (math.isfinite(t_from) and math.isfinite(t_to) and t_to > t_from):
            raise ValueError(f"need finite t_from < t_to, got {t_from} and {t_to}")
        T = t_to - t_from
        means = []
        for period, phase, amp in (
            (DAY, self.daily_phase, self.daily_amplitude),
            (WEEK, self.weekly_phase, self.weekly_amplitude),
        ):
            om = 2 * np.pi / period
            a, b = om * (t_from - phase), om * (t_to - phase)
            means += [
                amp * (np.sin(b) - np.sin(a)) / (om * T),
                amp * (np.cos(a) - np.cos(b)) / (om * T),
            ]
        w = self.regime_width
        sp = lambda x: np.logaddexp(0.0, x)  # noqa: E731
        means.append(
            w * (sp((t_to - self.regime_time) / w) - sp((t_from - self.regime_time) / w)) / T - 0.5
        )
        pbar = np.stack(means, -1)  # (G, 5)
        cfg = self.params()
        cfg["population_mean"] = np.einsum("gkp,gp->gk", self.coupling, pbar).tolist()
        return PopulationCoupledProcess(**cfg)

    # ------------------------------------------------------------------ likelihood
    def split_params(self, params) -> tuple[int, np.ndarray]:
        """(group, random effect m (d,)) from a sequence's ``params`` (1 + d,)."""
        if params is None:
            raise ValueError(
                f"{self.name}: params=(group, m_0..m_{self.latent_dim - 1}) of the sequence "
                "are needed (its group and individual random effect, as sample() returns "
                "and the data files store in /episodes/params)"
            )
        p = np.asarray(params, dtype=np.float64).reshape(-1)
        if p.shape != (1 + self.latent_dim,) or not np.all(np.isfinite(p)):
            raise ValueError(
                f"{self.name}: params must be {1 + self.latent_dim} finite numbers (group, "
                f"m_0..m_{self.latent_dim - 1}), got {np.asarray(params).tolist()}"
            )
        if p[0] != round(p[0]) or not 0 <= p[0] < self.groups:
            raise ValueError(
                f"{self.name}: params[0] is the group, an integer in 0..{self.groups - 1}, "
                f"got {p[0]}"
            )
        return int(p[0]), p[1:]

    def _prepare(self, times, marks, params):
        g, m = self.split_params(params)
        # x_j = h(t_j+) - m, by the closed-form decay between events
        x = np.zeros((len(times), self.latent_dim))
        prev = np.zeros(self.latent_dim)
        gaps = np.diff(times, prepend=times[0] if len(times) else 0.0)
        decays = np.exp(-np.outer(gaps, self.decay))
        for j in range(len(times)):
            prev = prev * decays[j] + self.jumps[marks[j]]
            x[j] = prev
        return times, x, g, m

    def _log_rates(self, ctx, tq):
        times, x, g, m = ctx
        dev = np.zeros((len(tq), self.latent_dim))
        if len(times):
            # the state decays from the last event strictly before each query
            idx = np.searchsorted(times, tq, side="left") - 1
            has = idx >= 0
            dt = tq[has] - times[idx[has]]
            dev[has] = x[idx[has]] * np.exp(-dt[:, None] * self.decay)
        return self._log_rates_latent(tq, m + dev, g)

    def _batch_prepare(self, batch):
        """Groups (B,), random effects (B, d) and x_j = h(t_j+) - m (B, L, d): the
        recursion of :meth:`_prepare` over the event index, across the rows."""
        if batch.params is None:
            self.split_params(None)  # the error that says which params are needed
        B, d = batch.size, self.latent_dim
        g = np.zeros(B, dtype=np.int64)
        effect = np.zeros((B, d))
        for b in range(B):
            g[b], effect[b] = self.split_params(batch.params[b])
        t, m = batch.times, batch.marks
        x = np.zeros((*t.shape, d))
        prev = np.zeros((B, d))
        gaps = np.diff(t, axis=1, prepend=t[:, :1])
        decays = np.exp(-gaps[..., None] * self.decay)
        for j in range(t.shape[1]):
            prev = prev * decays[:, j] + self.jumps[m[:, j]]
            x[:, j] = prev
        return x, g, effect

    def _batch_update(self, batch, rows, cols):
        """x at the appended events: one step of :meth:`_prepare`'s recursion."""
        x, t = batch.state[0], batch.times
        prev = np.where((cols > 0)[:, None], x[rows, np.maximum(cols - 1, 0)], 0.0)
        gap = t[rows, cols] - t[rows, np.maximum(cols - 1, 0)]
        x[rows, cols] = (
            prev * np.exp(-gap[:, None] * self.decay) + self.jumps[batch.marks[rows, cols]]
        )

    def _batch_log_rates(self, batch, tq, rows, before):
        x, g, effect = batch.state
        dev = np.zeros((len(tq), self.latent_dim))
        has = before > 0
        if has.any():
            r, idx = rows[has], before[has] - 1
            dt = tq[has] - batch.times[r, idx]
            dev[has] = x[r, idx] * np.exp(-dt[:, None] * self.decay)
        return self._log_rates_latent(tq, effect[rows] + dev, g[rows])

    def _log_rates_latent(self, t, h, g) -> np.ndarray:
        """log λ (Q, K) at times t (Q,) for latents h (Q, d) and groups g."""
        logits = h @ self.weights.T + self.population_drive(t, g) + self.bias
        return np.log(self.lam_max) - np.logaddexp(0.0, -logits)

    # -------------------------------------------------------------------- sampling
    def sample(
        self,
        n: int,
        *,
        t_end,
        seed=0,
        t_start=0.0,
        groups=None,
        effects=None,
    ) -> list[dict]:
        """``n`` sequences on [t_start, t_end] (scalars or (n,) arrays: absolute hours),
        by thinning, all sequences advancing together. ``groups`` (n,) and ``effects``
        (n, d) fix the groups and random effects (default: uniform groups,
        :math:`N(0, s^2 I)`). Each: ``t``, ``mark``, ``params`` (1 + d,), ``group``,
        ``window`` (2,)."""
        n = _count("n", n)
        t0, t1 = _windows(n, t_start, t_end)
        rng = _rng(seed)
        d, K = self.latent_dim, self.num_marks
        g = rng.integers(self.groups, size=n) if groups is None else self._groups(groups, (n,))
        g = np.array(g, dtype=np.int64)
        if effects is None:
            m = rng.normal(0.0, self.effect_std, size=(n, d))
        else:
            m = _array("effects", effects, (n, d))
        bound = float(self.lam_max.sum())
        x = np.zeros((n, d))
        t = t0.copy()
        live = np.flatnonzero(t < t1)
        ids, ts, ks = [], [], []
        while live.size:
            dt = rng.exponential(1.0 / bound, size=live.size)
            t[live] += dt
            x[live] *= np.exp(-dt[:, None] * self.decay)
            live = live[t[live] <= t1[live]]
            if not live.size:
                break
            lam = np.exp(self._log_rates_latent(t[live], m[live] + x[live], g[live]))
            # one uniform both thins and picks the mark: u * bound in [cum_{k-1}, cum_k)
            u = rng.random(live.size) * bound
            k = (u[:, None] >= np.cumsum(lam, axis=1)).sum(axis=1)
            acc = k < K
            hit = live[acc]
            x[hit] += self.jumps[k[acc]]
            ids.append(hit)
            ts.append(t[hit])
            ks.append(k[acc])
        out = []
        for i, (ti, ki) in enumerate(_collect(n, ids, ts, ks)):
            out.append(
                {
                    "t": ti.astype(np.float64),
                    "mark": ki.astype(np.int64),
                    "params": np.concatenate([[float(g[i])], m[i]]),
                    "group": np.int64(g[i]),
                    "window": np.array([t0[i], t1[i]]),
                }
            )
        return out


# ============================================================== mobility process
VENUE_TYPES = ("home", "work", "food", "shop", "leisure")
HOME, WORK = 0, 1
#: night-time log-rates per hour c_k, venue types in VENUE_TYPES order
MOBILITY_BASE = (-4.5, -6.0, -5.0, -5.5, -5.5)
#: beta[s, k]: affinity of the next venue type k from the current type s (rows)
MOBILITY_TRANSITION = (
    (-4.0, 0.0, 0.0, 0.0, 0.0),
    (0.0, -3.0, 0.7, -0.5, -0.3),
    (0.3, 0.5, -2.0, 0.0, 0.3),
    (0.5, -0.5, 0.0, -1.5, 0.0),
    (0.7, -1.0, 0.0, 0.0, -1.5),
)
#: daily bumps: (venue type, weekend 0/1, log-amplitude a_b, peak hour mu_b, width w_b h)
MOBILITY_BUMPS = (
    (0, 0, 3.5, 18.5, 1.5),
    (0, 0, 2.5, 22.5, 1.0),
    (0, 1, 3.0, 17.0, 3.0),
    (0, 1, 2.5, 23.0, 1.0),
    (1, 0, 7.5, 8.5, 0.75),
    (1, 0, 5.0, 13.5, 0.75),
    (2, 0, 2.5, 7.5, 0.75),
    (2, 0, 5.0, 12.5, 0.75),
    (2, 0, 4.5, 19.5, 1.0),
    (2, 1, 4.5, 13.0, 1.0),
    (2, 1, 4.5, 20.0, 1.25),
    (3, 0, 3.5, 17.5, 1.5),
    (3, 1, 4.0, 14.0, 2.5),
    (4, 0, 3.5, 20.5, 1.5),
    (4, 1, 3.5, 15.0, 3.0),
    (4, 1, 3.5, 21.5, 1.5),
)
#: the default map: neighbourhood name, centre (km), scatter (km)
NEIGHBOURHOODS = (
    ("downtown", (5.0, 5.0), 0.7),
    ("west", (2.2, 6.8), 0.9),
    ("south", (6.5, 2.0), 0.9),
    ("waterfront", (8.3, 8.0), 0.7),
)
#: share of the locations per venue type, and each type's mix of neighbourhoods
_TYPE_SHARE = (0.3, 0.2, 0.2, 0.15, 0.15)
_TYPE_NEIGHBOURHOODS = (
    (0.05, 0.5, 0.45, 0.0),
    (0.7, 0.1, 0.1, 0.1),
    (0.35, 0.2, 0.2, 0.25),
    (0.4, 0.25, 0.25, 0.1),
    (0.15, 0.1, 0.1, 0.65),
)


def city_map(num_locations: int = 36, seed: int = 0) -> dict[str, np.ndarray]:
    """The default map (module docstring): ``coords`` (L, 2) km, ``venue_type`` (L,)
    int64 (ids sorted by type), ``popularity`` (L,) (mean 1), ``neighbourhood`` (L,)."""
    L = _count("num_locations", num_locations, minimum=len(VENUE_TYPES))
    rng = _rng(seed)
    share = np.array(_TYPE_SHARE)
    counts = np.maximum(1, np.floor(share * L).astype(np.int64))
    while counts.sum() < L:  # the remainder to the types furthest below their share
        counts[np.argmax(share * L - counts)] += 1
    while counts.sum() > L:
        counts[np.argmax(np.where(counts > 1, counts - share * L, -np.inf))] -= 1
    vtype = np.repeat(np.arange(len(VENUE_TYPES)), counts)
    probs = np.array(_TYPE_NEIGHBOURHOODS)[vtype]
    hood = (rng.random(L)[:, None] > np.cumsum(probs, axis=1)).sum(axis=1)
    hood = np.minimum(hood, len(NEIGHBOURHOODS) - 1)
    centre = np.array([c for _, c, _ in NEIGHBOURHOODS])[hood]
    scatter = np.array([s for _, _, s in NEIGHBOURHOODS])[hood]
    coords = np.clip(centre + scatter[:, None] * rng.normal(size=(L, 2)), 0.0, 10.0)
    pop = rng.lognormal(0.0, 0.6, size=L)
    return {
        "coords": coords,
        "venue_type": vtype.astype(np.int64),
        "popularity": pop / pop.mean(),
        "neighbourhood": hood.astype(np.int64),
    }


def weekend_weight(t, width: float = 1.0) -> np.ndarray:
    """Smooth weekend indicator W(t) in [0, 1]: sigmoids of ``width`` hours at Saturday
    00:00 (hour of week 120) and Monday 00:00 (t = 0 is Monday 00:00)."""
    tau = np.mod(np.asarray(t, dtype=np.float64), WEEK)
    s = lambda x: 0.5 * (1.0 + np.tanh(x / (2 * width)))  # noqa: E731
    return s(tau - 120.0) - s(tau - WEEK) + s(-tau)


@register_process
class MobilityProcess(_QuadratureProcess):
    """Check-ins of agents on a city map: venue type (the mark) and time from daily
    profiles and the current venue type, location by a gravity model (module
    docstring). ``params`` of a sequence: (home id, work id, activity). Map arrays:
    ``coords`` (L, 2) km, ``venue_type`` (L,), ``popularity`` (L,), ``neighbourhood``
    (L,); rates: ``base_rate`` (K,) log per hour, ``transition`` (K, K), ``bumps``
    (B, 5) rows (type, weekend, log-amplitude, peak hour, width hours).
    """

    name = "mobility"

    def __init__(
        self,
        num_locations: int = 36,
        *,
        map_seed: int = 0,
        coords=None,
        venue_type=None,
        popularity=None,
        neighbourhood=None,
        base_rate=None,
        transition=None,
        bumps=None,
        distance_scale: float = 2.0,
        commute_scale: float = 4.0,
        refractory: float = 0.5,
        activity_std: float = 0.3,
        weekend_width: float = 1.0,
    ):
        base = np.array(MOBILITY_BASE if base_rate is None else base_rate, dtype=np.float64)
        super().__init__(int(base.size) if base.ndim == 1 else 1)
        K = self.num_marks
        if K < 3:
            raise ValueError(f"mobility needs at least 3 venue types (home, work, others), got {K}")
        self.base_rate = _array("base_rate", base, (K,))
        if transition is None and K != len(VENUE_TYPES):
            raise ValueError(f"with {K} venue types give transition (K, K) and bumps too")
        self.transition = _array(
            "transition", MOBILITY_TRANSITION if transition is None else transition, (K, K)
        )
        raw = np.array(MOBILITY_BUMPS if bumps is None else bumps, dtype=np.float64)
        if raw.ndim != 2 or raw.shape[1] != 5:
            raise ValueError(
                f"bumps must be rows (type, weekend, log-amplitude, peak hour, width), got "
                f"shape {raw.shape}"
            )
        self.bumps = _array("bumps", raw, raw.shape)
        btype = self.bumps[:, 0]
        if not np.all((btype == np.round(btype)) & (btype >= 0) & (btype < K)):
            raise ValueError(f"bumps[:, 0] must be venue types in 0..{K - 1}")
        if not np.all(np.isin(self.bumps[:, 1], (0.0, 1.0))):
            raise ValueError("bumps[:, 1] must be 0 (weekday) or 1 (weekend)")
        if not np.all(self.bumps[:, 4] > 0):
            raise ValueError("bumps[:, 4] (widths, hours) must be > 0")
        if coords is None:
            drawn = city_map(num_locations, map_seed)
            coords, venue_type = drawn["coords"], drawn["venue_type"]
            popularity = drawn["popularity"] if popularity is None else popularity
            neighbourhood = drawn["neighbourhood"] if neighbourhood is None else neighbourhood
        L = int(np.shape(coords)[0]) if np.ndim(coords) == 2 else -1
        self.coords = _array("coords", coords, (max(L, 0), 2))
        if venue_type is None:
            raise ValueError("give venue_type (L,) with coords")
        self.venue_type = _array("venue_type", venue_type, (L,), integer=True).astype(np.int64)
        if self.venue_type.min() < 0 or self.venue_type.max() >= K:
            raise ValueError(f"venue_type must lie in 0..{K - 1}")
        missing = sorted(set(range(K)) - set(self.venue_type.tolist()))
        if missing:
            raise ValueError(f"the map has no location of venue type(s) {missing}")
        self.popularity = _array(
            "popularity", np.ones(L) if popularity is None else popularity, (L,), positive=True
        )
        self.neighbourhood = _array(
            "neighbourhood",
            np.zeros(L) if neighbourhood is None else neighbourhood,
            (L,),
            integer=True,
        ).astype(np.int64)
        self.num_locations = L
        self.map_seed = int(map_seed)
        self.distance_scale = float(check_positive("distance_scale", distance_scale))
        self.commute_scale = float(check_positive("commute_scale", commute_scale))
        self.refractory = float(check_positive("refractory", refractory, minimum=0.0))
        self.activity_std = float(check_positive("activity_std", activity_std, minimum=0.0))
        self.weekend_width = float(check_positive("weekend_width", weekend_width))

        # precomputed tables: bump one-hot (B, K), concentrations, gravity (L, L)
        self._onehot = np.eye(K)[self.bumps[:, 0].astype(np.int64)]
        self._kappa = 1.0 / (2 * np.pi / DAY * self.bumps[:, 4]) ** 2
        dist = np.linalg.norm(self.coords[:, None] - self.coords[None], axis=-1)
        self._dist = dist
        grav = self.popularity * np.exp(-dist / self.distance_scale)
        norm = grav @ np.eye(K)[self.venue_type]  # (L, K): sum over each type
        self._log_gravity = np.log(grav) - np.log(norm[:, self.venue_type])
        self._bound = self._bound_table()

    def params(self) -> dict:
        return {
            "num_locations": self.num_locations,
            "map_seed": self.map_seed,
            "coords": self.coords.tolist(),
            "venue_type": self.venue_type.tolist(),
            "popularity": self.popularity.tolist(),
            "neighbourhood": self.neighbourhood.tolist(),
            "base_rate": self.base_rate.tolist(),
            "transition": self.transition.tolist(),
            "bumps": self.bumps.tolist(),
            "distance_scale": self.distance_scale,
            "commute_scale": self.commute_scale,
            "refractory": self.refractory,
            "activity_std": self.activity_std,
            "weekend_width": self.weekend_width,
        }

    # --------------------------------------------------------------- rates
    def profile(self, t) -> np.ndarray:
        """The time-of-day/week part :math:`\\sum_{b\\in k} a_b D_b(t) v_b(t)` (Q, K)."""
        t = np.atleast_1d(np.asarray(t, dtype=np.float64))
        hour = np.mod(t, DAY)
        vm = np.exp(
            (np.cos(2 * np.pi / DAY * (hour[:, None] - self.bumps[:, 3])) - 1.0) * self._kappa
        )
        wk = weekend_weight(t, self.weekend_width)[:, None]
        day = np.where(self.bumps[:, 1] > 0, wk, 1.0 - wk)
        return (self.bumps[:, 2] * day * vm) @ self._onehot

    def _log_rates_state(self, t, state, activity, since) -> np.ndarray:
        """log λ (Q, K) at times t for current types ``state``, activities and the
        times since the last check-in ``since`` (inf: none yet)."""
        out = self.base_rate + self.transition[state] + activity[:, None] + self.profile(t)
        if self.refractory > 0:
            with np.errstate(divide="ignore"):
                out = out + np.log(-np.expm1(-since / self.refractory))[:, None]
        return out

    def _bound_table(self) -> np.ndarray:
        """(K states, 24 hour bins) upper bound of sum_k λ_k / e^activity (docstring)."""
        h0 = np.arange(24.0)[:, None]
        delta = np.mod(self.bumps[:, 3] - h0, DAY)  # peak's offset after the bin start
        dist = np.where(delta <= 1.0, 0.0, np.minimum(delta - 1.0, DAY - delta))
        vmax = np.exp((np.cos(2 * np.pi / DAY * dist) - 1.0) * self._kappa)  # (24, B)
        a = np.maximum(self.bumps[:, 2], 0.0) * vmax
        wd = (a * (self.bumps[:, 1] == 0)) @ self._onehot
        we = (a * (self.bumps[:, 1] == 1)) @ self._onehot
        top = np.maximum(wd, we)  # (24, K)
        # a tiny relative margin for rounding in the exponentials
        rates = np.exp(self.base_rate + self.transition[:, None, :] + top[None]) * (1 + 1e-9)
        return rates.sum(axis=-1)

    def split_params(self, params) -> tuple[int, int, float]:
        """(home id, work id, activity) from a sequence's ``params`` (3,)."""
        if params is None:
            raise ValueError(
                "mobility: params=(home id, work id, activity) of the agent are needed "
                "(as sample() returns and the data files store in /episodes/params)"
            )
        p = np.asarray(params, dtype=np.float64).reshape(-1)
        if p.shape != (3,) or not np.all(np.isfinite(p)):
            raise ValueError(
                f"mobility: params must be 3 finite numbers (home id, work id, activity), "
                f"got {np.asarray(params).tolist()}"
            )
        for j, (what, kind) in enumerate((("home", HOME), ("work", WORK))):
            v = p[j]
            if v != round(v) or not 0 <= v < self.num_locations or self.venue_type[int(v)] != kind:
                raise ValueError(
                    f"mobility: params[{j}] must be the id of a {what}-type location "
                    f"(0..{self.num_locations - 1}), got {v}"
                )
        return int(p[0]), int(p[1]), float(p[2])

    def _prepare(self, times, marks, params):
        _, _, act = self.split_params(params)
        return times, marks, act

    def _log_rates(self, ctx, tq):
        times, marks, act = ctx
        idx = np.searchsorted(times, tq, side="left") - 1
        has = idx >= 0
        safe = np.maximum(idx, 0)
        if len(times):
            state = np.where(has, marks[safe], HOME)
            since = np.where(has, tq - times[safe], np.inf)
        else:
            state, since = np.full(len(tq), HOME), np.full(len(tq), np.inf)
        return self._log_rates_state(tq, state, np.full(len(tq), act), since)

    def _batch_prepare(self, batch):
        """The activity of every row (its home and work ids checked)."""
        if batch.params is None:
            self.split_params(None)
        return np.array([self.split_params(p)[2] for p in batch.params], dtype=np.float64)

    def _batch_update(self, batch, rows, cols):
        pass  # the rates read the last event directly: no state to update

    def _batch_log_rates(self, batch, tq, rows, before):
        has = before > 0
        safe = np.maximum(before - 1, 0)
        state = np.where(has, batch.marks[rows, safe], HOME)
        since = np.where(has, tq - batch.times[rows, safe], np.inf)
        return self._log_rates_state(tq, state, batch.state[rows], since)

    def location_log_prob(self, marks, loc_ids, params) -> np.ndarray:
        """log P(location j | venue type k, previous location) (L,) per check-in: the
        home / work place for those types, the gravity model for the others; the first
        check-in's previous location is home. -inf where impossible."""
        m = np.asarray(marks)
        j = np.asarray(loc_ids)
        if m.shape != j.shape or m.ndim != 1:
            raise ValueError(
                f"marks and loc_ids must be 1-D of one length, got {m.shape}, {j.shape}"
            )
        if j.size and (j.dtype.kind not in "iu" or j.min() < 0 or j.max() >= self.num_locations):
            raise ValueError(f"loc_ids must be integers in 0..{self.num_locations - 1}")
        _, m = check_sequence(np.arange(len(m), dtype=np.float64), m, self.num_marks)
        home, work, _ = self.split_params(params)
        prev = np.concatenate([[home], j[:-1]]).astype(np.int64)
        out = self._log_gravity[prev, j]
        out = np.where(m == HOME, np.where(j == home, 0.0, -np.inf), out)
        out = np.where(m == WORK, np.where(j == work, 0.0, -np.inf), out)
        return np.where(self.venue_type[j] == m, out, -np.inf)

    # --------------------------------------------------------------- sampling
    def draw_agents(self, n: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Homes (uniform among home locations), work places (popularity *
        exp(-distance / commute_scale) from home) and activities, each (n,)."""
        homes_all = np.flatnonzero(self.venue_type == HOME)
        works_all = np.flatnonzero(self.venue_type == WORK)
        home = homes_all[rng.integers(len(homes_all), size=n)]
        w = self.popularity[works_all] * np.exp(
            -self._dist[home][:, works_all] / self.commute_scale
        )
        cdf = np.cumsum(w, axis=1)
        u = (1.0 - rng.random(n)) * cdf[:, -1]
        work = works_all[np.argmax(cdf >= u[:, None], axis=1)]
        activity = rng.normal(0.0, self.activity_std, size=n)
        return home, work, activity

    def sample(
        self,
        n: int,
        *,
        t_end,
        seed=0,
        t_start=0.0,
        homes=None,
        works=None,
        activity=None,
    ) -> list[dict]:
        """``n`` agents on [t_start, t_end] (scalars or (n,) arrays, hours), starting at
        home; ``homes``, ``works``, ``activity`` (n,) fix the agents (default: drawn).
        Each: ``t``, ``mark`` (venue type), ``loc`` (L, 2), ``loc_id`` (L,), ``params``
        (home, work, activity), ``group`` (home neighbourhood), ``window`` (2,)."""
        n = _count("n", n)
        t0, t1 = _windows(n, t_start, t_end)
        rng = _rng(seed)
        home, work, act = self.draw_agents(n, rng)
        if homes is not None:
            home = _array("homes", homes, (n,), integer=True).astype(np.int64)
        if works is not None:
            work = _array("works", works, (n,), integer=True).astype(np.int64)
        if activity is not None:
            act = _array("activity", activity, (n,))
        for i in range(n):  # validates the ids
            self.split_params([home[i], work[i], act[i]])
        K = self.num_marks
        type_mask = np.eye(K, dtype=bool)[self.venue_type].T  # (K, L)
        gravity = np.exp(self._log_gravity)
        t = t0.copy()
        state = np.full(n, HOME)
        loc = home.copy()
        last = np.full(n, -np.inf)
        scale = np.exp(act)
        live = np.flatnonzero(t < t1)
        ids, ts, ks, js = [], [], [], []
        while live.size:
            hour_start = np.floor(t[live])
            bound = self._bound[state[live], np.mod(hour_start, 24).astype(np.int64)] * scale[live]
            cand = t[live] + rng.exponential(size=live.size) / bound
            stop = np.minimum(hour_start + 1.0, t1[live])
            over = cand >= stop
            t[live] = np.where(over, stop, cand)
            live_next = live[~(over & (stop >= t1[live]))]
            test = live[~over]
            if test.size:
                lam = np.exp(
                    self._log_rates_state(t[test], state[test], act[test], t[test] - last[test])
                )
                if np.any(lam.sum(axis=1) > bound[~over]):  # never: the bound is proven
                    raise RuntimeError("mobility: thinning bound violated (a bug; report it)")
                u = rng.random(test.size) * bound[~over]
                k = (u[:, None] >= np.cumsum(lam, axis=1)).sum(axis=1)
                acc = k < K
                hit, k = test[acc], k[acc]
                if hit.size:
                    # the location: own home / work, else gravity from the current location
                    w = np.where(type_mask[k], gravity[loc[hit]], 0.0)
                    cdf = np.cumsum(w, axis=1)
                    u2 = (1.0 - rng.random(hit.size)) * cdf[:, -1]
                    j = np.argmax(cdf >= u2[:, None], axis=1)
                    j = np.where(k == HOME, home[hit], np.where(k == WORK, work[hit], j))
                    state[hit], loc[hit], last[hit] = k, j, t[hit]
                    ids.append(hit)
                    ts.append(t[hit])
                    ks.append(k)
                    js.append(j)
            live = live_next
        out = []
        for i, (ti, ki, ji) in enumerate(_collect(n, ids, ts, ks, js)):
            ji = ji.astype(np.int64)
            out.append(
                {
                    "t": ti.astype(np.float64),
                    "mark": ki.astype(np.int64),
                    "loc": self.coords[ji],
                    "loc_id": ji,
                    "params": np.array([float(home[i]), float(work[i]), act[i]]),
                    "group": np.int64(self.neighbourhood[home[i]]),
                    "window": np.array([t0[i], t1[i]]),
                }
            )
        return out


# ================================================================== data sets
