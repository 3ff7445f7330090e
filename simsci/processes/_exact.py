r"""Ground-truth marked point processes: Poisson, Hawkes and self-correcting, exact.

Three :class:`~simsci.processes.PointProcess` classes (registered in
:data:`PROCESSES`) with exact simulation, exact intensities and exact (closed-form)
log-likelihoods. Their dataset builders (``simsci.datasets.make_dataset("hawkes", n,
out=...)``, :mod:`simsci.datasets._events`) write samples as kind="events" trajectory
files. K event types (marks), :math:`k = 0..K-1`; :math:`\mathcal H_t` is the history
strictly before t; all numpy float64.

**Poisson** (``"poisson"``, :class:`PoissonProcess`). Independent marks with
deterministic intensities

.. math::

    \lambda_k(t) = \mu_k \bigl(1 + a_k \sin(2\pi t / P + \varphi_k)\bigr),
    \qquad |a_k| \le 1,

homogeneous when every amplitude :math:`a_k` is 0, and compensator
:math:`\Lambda_k(t_0, t_1) = \mu_k[(t_1 - t_0) - \tfrac{a_k P}{2\pi}(\cos(2\pi t_1/P +
\varphi_k) - \cos(2\pi t_0/P + \varphi_k))]`.

**Hawkes** (``"hawkes"``, :class:`HawkesProcess`). Mutually exciting, exponential kernels
normalised to unit mass, so that ``alpha`` holds the branching ratios:

.. math::

    \lambda_k(t) = \mu_k + \sum_{t_j < t} \alpha_{k m_j} \beta_{k m_j}
                   e^{-\beta_{k m_j} (t - t_j)} .

An event of mark m causes on average :math:`\alpha_{km}` direct offspring of mark k; the
process is stationary iff the spectral radius :math:`\rho(\alpha) < 1`, with mean rates
:math:`(I - \alpha)^{-1}\mu`. The compensator is closed-form, :math:`\Lambda_k(t_s, t) =
\mu_k (t - t_s) + \sum_{t_j < t} \alpha_{k m_j} (e^{-\beta (\max(t_s, t_j) - t_j)} -
e^{-\beta (t - t_j)})` (:math:`\beta = \beta_{k m_j}`), and the intensity at the events
follows from the K x K states :math:`R_{km}(t) = \sum_{t_j \le t, m_j = m}
e^{-\beta_{km}(t - t_j)}`, updated recursively, :math:`R(t_{j}) = e^{-\beta (t_j -
t_{j-1})} \odot R(t_{j-1}) + \mathbb 1[\cdot, m_j]`: O(L K^2) for a sequence of L events.

**Self-correcting** (``"self_correcting"``, :class:`SelfCorrectingProcess`). Each event
lowers the intensities, which otherwise grow exponentially (Isham and Westcott 1979;
K = 1 is the classic :math:`\lambda(t) = \exp(\mu t - \alpha N(t))`):

.. math::

    \lambda_k(t) = \exp\Bigl(\mu_k t - \sum_l \alpha_{kl} N_l(t^-)\Bigr),

with :math:`\mu_k > 0`, :math:`\alpha \ge 0` and :math:`\alpha_{kk} > 0` (every mark
corrects itself). Between events the intensity is :math:`\lambda_k(t_j) e^{\mu_k (t -
t_j)}`, so the compensator over an inter-event interval is :math:`\lambda_k(t_j)
\operatorname{expm1}(\mu_k \Delta)/\mu_k`. When :math:`\alpha^{-1}\mu > 0` the counts
grow as :math:`N(t)/t \to \alpha^{-1}\mu` (the exponent stays bounded only then); t is
absolute time (the intensity at ``t_start`` is :math:`e^{\mu t_{start}}`, not 1).

**Likelihood conventions** (the base class's): :math:`\ell = \sum_{t_s < t_j \le t_e}
\log\lambda_{m_j}(t_j^-) - \sum_k \Lambda_k(t_s, t_e)`; events at or before ``t_start``
are history (they drive the Hawkes and self-correcting intensities but are not scored),
``t_end`` must not precede the last event. :meth:`compensator` returns the
:math:`\Lambda_k(t_s, t_q)` themselves, so the time-rescaling theorem can be checked:
the compensator increments between consecutive events (of the pooled process, and per
mark between events of that mark) of a correct model are i.i.d. Exp(1).

Design choices, and why:

- **Exact simulation, vectorised over sequences.** Each sampler runs all n sequences
  at once, one numpy step per event (or candidate) across the sequences still running,
  so hundreds of sequences cost about as much as the longest one. Poisson: the count is
  Poisson, the times uniform (equivalent to exponential gaps, without a loop);
  inhomogeneous rates are thinned from the bound :math:`\mu_k(1 + |a_k|)`. Hawkes:
  Ogata's thinning; the intensity only decays between events, so its value at the
  current time bounds it until the next accepted event, and after a rejection the
  (lower) intensity at the candidate is the new bound. Self-correcting: inversion,
  competing risks: each mark's waiting time solves :math:`\Lambda_k = E_k`, E_k ~
  Exp(1), in closed form, and the earliest wins (no rejections; computed in log space,
  since :math:`e^{-\log\lambda}` overflows after a burst).
- **Random streams.** ``seed`` is an int (``np.random.default_rng(SeedSequence(seed))``),
  a SeedSequence or a Generator; the same seed and n give the same sequences.
  Sequences run concurrently share one stream, so sequence i depends on n as well.
- **Many sequences at once.** :meth:`~simsci.processes.PointProcess.batch` evaluates
  intensities and log-likelihoods of padded sequences in one numpy pass: the Hawkes
  states and self-correcting counts of every row are built once (the recursion runs
  over the event index, vectorised across rows), then any number of queries index
  them. Same formulas, same order of operations as the per-sequence methods, so the
  results agree to rounding (tested against the loop).
- **No per-sequence parameters.** These processes draw no random effects, so
  ``params`` (the base contract's per-sequence values) must be None.
- **Builders condition and may truncate.** A builder redraws sequences with fewer than
  ``min_events`` events (default 2, the minimum the "first event given" scoring
  convention needs): the data set is a sample of the process *conditioned* on at least
  ``min_events`` events in [0, t_end], and the file's meta says so (``min_events``,
  ``draws``). ``max_events`` cuts longer sequences after their first ``max_events``
  events; a cut sequence is observed on [0, t_max_events] (a stopping time, so its
  likelihood there is still exact), stored per episode as ``/episodes/t_end``
  (``t_end`` for the others) and counted in meta ``truncated``.
- **Documented default parameters**, a fixed formula of K (the seed only draws the
  sequences, so "hawkes, K=5" is one process across seeds and files): see
  :func:`default_hawkes_params` and :func:`default_self_correcting_params`. The default
  ``t_end`` gives about 50 events per sequence: 50 divided by the total mean rate.
"""

from __future__ import annotations

import abc
import math

import numpy as np

from simsci.processes._base import PointProcess, check_sequence, register_process


# ------------------------------------------------------------------ validation helpers
def _rng(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.SeedSequence):
        return np.random.default_rng(seed)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(
            f"seed must be a non-negative int, a numpy SeedSequence or Generator, got {seed!r}"
        )
    return np.random.default_rng(np.random.SeedSequence(int(seed)))


def _finite(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def _array(name: str, value, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` as float64 of ``shape`` (a scalar is broadcast), finite, else ValueError."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be numbers of shape {shape}, got {value!r}") from None
    if arr.ndim == 0:
        arr = np.full(shape, float(arr))
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape} (K = {shape[0]} marks), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {arr.tolist()}")
    return arr


def _num_marks(num_marks, *values) -> int:
    """K: ``num_marks`` when given, else the length of the first non-scalar value, else 1."""
    if num_marks is not None:
        return num_marks
    for v in values:
        shape = np.shape(v)
        if len(shape):
            return int(shape[0])
    return 1


def _check_params_arg(process: PointProcess, params) -> None:
    if params is not None:
        raise ValueError(
            f"{type(process).__name__} draws no per-sequence parameters; pass params=None, "
            f"got {params!r}"
        )


def _queries(t_query) -> np.ndarray:
    q = np.atleast_1d(np.asarray(t_query, dtype=np.float64))
    if q.ndim != 1:
        raise ValueError(f"t_query must be a number or 1-D (Q,), got shape {q.shape}")
    if not np.all(np.isfinite(q)):
        raise ValueError("t_query must be finite")
    return q


def _window(t: np.ndarray, t_start, t_end) -> tuple[float, float]:
    t_start = _finite("t_start", t_start)
    t_end = _finite("t_end", t_end)
    if t_end < t_start:
        raise ValueError(f"t_end = {t_end} must not precede t_start = {t_start}")
    if len(t) and t[-1] > t_end:
        raise ValueError(
            f"t_end = {t_end} precedes the last event, t[{len(t) - 1}] = {t[-1]}; the "
            "window (t_start, t_end] must contain every given event (drop later events or "
            "raise t_end)"
        )
    return t_start, t_end


def _sample_args(n, t_start, t_end) -> tuple[int, float, float]:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer (sequences), got {n!r}")
    t_start = _finite("t_start", t_start)
    t_end = _finite("t_end", t_end)
    if not t_end > t_start:
        raise ValueError(f"t_end = {t_end} must be greater than t_start = {t_start}")
    return int(n), t_start, t_end


def _collect(n: int, ids: list, times: list, marks: list) -> list[dict]:
    """Group event records (sequence id, time, mark), time-ordered within each id, into n
    dicts {"t": (L,), "mark": (L,)}."""
    ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    times = np.concatenate(times) if times else np.zeros(0)
    marks = np.concatenate(marks) if marks else np.zeros(0, np.int64)
    order = np.argsort(ids, kind="stable")  # stable: keeps each sequence's time order
    bounds = np.concatenate([[0], np.cumsum(np.bincount(ids, minlength=n))])
    t, m = times[order].astype(np.float64), marks[order].astype(np.int64)
    return [
        {"t": t[bounds[i] : bounds[i + 1]].copy(), "mark": m[bounds[i] : bounds[i + 1]].copy()}
        for i in range(n)
    ]


def _categorical(rng: np.random.Generator, weights: np.ndarray) -> np.ndarray:
    """One draw per row of non-negative ``weights`` (n, K), proportional to the row."""
    cum = np.cumsum(weights, axis=1)
    v = rng.random(len(weights)) * cum[:, -1]
    return np.minimum((cum <= v[:, None]).sum(axis=1), weights.shape[1] - 1)


class _ExactProcess(PointProcess):
    """Shared checks and the likelihood assembled from the event intensities and the
    compensator (subclasses give ``_log_event_intensity`` and ``_compensator``)."""

    @abc.abstractmethod
    def mean_rate(self) -> np.ndarray:
        """(K,) mean number of events per unit time of each mark (see the subclass)."""
        ...

    @abc.abstractmethod
    def _log_event_intensity(self, t: np.ndarray, m: np.ndarray) -> np.ndarray:
        """(L,) log lambda_{m_j}(t_j-) given the events before each."""
        ...

    @abc.abstractmethod
    def _compensator(self, q, t, m, t_start: float) -> np.ndarray:
        """(Q, K) integral of lambda_k over [t_start, q], for sorted-or-not q >= t_start."""
        ...

    @abc.abstractmethod
    def _intensity(self, q, t, m) -> np.ndarray: ...

    def intensity(self, t_query, times, marks, params=None) -> np.ndarray:
        """(Q, K) left limits lambda_k(t_q-), given the events of ``times`` strictly
        before each query time ``t_query`` (Q,) (a number: Q = 1)."""
        _check_params_arg(self, params)
        t, m = check_sequence(times, marks, self.num_marks, where=f"{self.name} intensity")
        return self._intensity(_queries(t_query), t, m)

    def compensator(self, t_query, times, marks, *, t_start: float = 0.0, params=None):
        """(Q, K) compensators Lambda_k(t_start, t_q) = int_{t_start}^{t_q} lambda_k,
        events at or before ``t_start`` acting as history; every t_q >= t_start."""
        _check_params_arg(self, params)
        t, m = check_sequence(times, marks, self.num_marks, where=f"{self.name} compensator")
        q = _queries(t_query)
        t_start = _finite("t_start", t_start)
        if q.size and q.min() < t_start:
            raise ValueError(
                f"compensator: query times must not precede t_start = {t_start}, got {q.min()}"
            )
        return self._compensator(q, t, m, t_start)

    def log_likelihood(self, times, marks, *, t_start: float, t_end: float, params=None) -> float:
        """Exact log-likelihood of the events in (t_start, t_end] given those before."""
        _check_params_arg(self, params)
        t, m = check_sequence(times, marks, self.num_marks, where=f"{self.name} log_likelihood")
        t_start, t_end = _window(t, t_start, t_end)
        scored = t > t_start
        with np.errstate(divide="ignore"):  # a zero intensity at an event is -inf, honestly
            log_lam = self._log_event_intensity(t, m)[scored].sum() if scored.any() else 0.0
        comp = self._compensator(np.array([t_end]), t, m, t_start).sum()
        return float(log_lam - comp)

    # ------------------------------------------------- many sequences (SequenceBatch)
    def _batch_prepare(self, batch):
        _check_params_arg(self, batch.params)
        return self._batch_state(batch)

    def _batch_state(self, batch):
        """Per-row state built once (Hawkes: the states R; self-correcting: counts)."""
        return None

    @abc.abstractmethod
    def _batch_log_event_intensity(self, batch) -> np.ndarray:
        """(B, L) log lambda_{m_j}(t_j-) of every event of every row (padding: junk)."""
        ...

    @abc.abstractmethod
    def _batch_compensator(self, batch, t_start: np.ndarray, t_end: np.ndarray) -> np.ndarray:
        """(B, K) integral of lambda_k over [t_start, t_end] of each row."""
        ...

    def _batch_log_likelihood(self, batch, t_start, t_end):
        scored = batch.valid & (batch.times > t_start[:, None])
        with np.errstate(divide="ignore"):
            log_lam = self._batch_log_event_intensity(batch)
        events = np.where(scored, log_lam, 0.0).sum(axis=1)
        return events - self._batch_compensator(batch, t_start, t_end).sum(axis=1)


# ---------------------------------------------------------------------------- Poisson
@register_process
class PoissonProcess(_ExactProcess):
    """Independent Poisson processes, rate ``mu_k (1 + a_k sin(2 pi t / period + phi_k))``.

    ``rate`` (K,) or a number, > 0; ``amplitude`` (K,) or a number in [-1, 1] (0:
    homogeneous); ``period`` > 0 (shared by the marks); ``phase`` (K,) or a number, in
    radians; ``num_marks`` K when every value is a number (default: from the lengths).
    """

    name = "poisson"

    def __init__(
        self,
        rate=1.0,
        *,
        amplitude=0.0,
        period: float = 1.0,
        phase=0.0,
        num_marks: int | None = None,
    ):
        super().__init__(_num_marks(num_marks, rate, amplitude, phase))
        K = self.num_marks
        self.rate = _array("rate", rate, (K,))
        if np.any(self.rate <= 0):
            raise ValueError(f"rate must be > 0 for every mark, got {self.rate.tolist()}")
        self.amplitude = _array("amplitude", amplitude, (K,))
        if np.any(np.abs(self.amplitude) > 1):
            raise ValueError(
                f"amplitude must lie in [-1, 1] (a non-negative rate), got "
                f"{self.amplitude.tolist()}"
            )
        self.period = _finite("period", period)
        if self.period <= 0:
            raise ValueError(f"period must be > 0, got {self.period}")
        self.phase = _array("phase", phase, (K,))
        self.omega = 2.0 * math.pi / self.period
        self.homogeneous = bool(np.all(self.amplitude == 0))

    def params(self) -> dict:
        return {
            "rate": self.rate.tolist(),
            "amplitude": self.amplitude.tolist(),
            "period": self.period,
            "phase": self.phase.tolist(),
        }

    def mean_rate(self) -> np.ndarray:
        """(K,) the rates averaged over a period: ``rate``."""
        return self.rate.copy()

    def _rates(self, q: np.ndarray) -> np.ndarray:  # (Q, K)
        wave = np.sin(self.omega * q[:, None] + self.phase)
        return self.rate * (1.0 + self.amplitude * wave)

    def _intensity(self, q, t, m):
        return self._rates(q)

    def _log_event_intensity(self, t, m):
        return np.log(self._rates(t)[np.arange(len(t)), m])

    def _compensator(self, q, t, m, t_start):
        cos = lambda s: np.cos(self.omega * np.asarray(s)[..., None] + self.phase)  # noqa: E731
        wave = (cos(q) - cos(t_start)) * (self.amplitude / self.omega)
        return self.rate * ((q - t_start)[:, None] - wave)

    def _batch_intensity(self, batch, q, rows, before):
        return self._rates(q)

    def _batch_log_event_intensity(self, batch):
        t, m = batch.times.ravel(), batch.marks.ravel()
        return np.log(self._rates(t)[np.arange(len(t)), m]).reshape(batch.times.shape)

    def _batch_compensator(self, batch, t_start, t_end):
        return self._compensator(t_end, None, None, t_start)  # t_start (B,) broadcasts

    def sample(self, n: int, *, t_end: float, seed=0, t_start: float = 0.0) -> list[dict]:
        """n independent sequences on (t_start, t_end]: a Poisson count of candidates at
        the total bound rate, uniform times, marks by their bounds, thinned to the
        intensity (nothing to thin when homogeneous)."""
        n, t_start, t_end = _sample_args(n, t_start, t_end)
        rng = _rng(seed)
        bound = self.rate * (1.0 + np.abs(self.amplitude))
        counts = rng.poisson(bound.sum() * (t_end - t_start), size=n)
        total = int(counts.sum())
        # t_end - span * U with U in [0, 1): times in (t_start, t_end]
        times = t_end - (t_end - t_start) * rng.random(total)
        marks = _categorical(rng, np.broadcast_to(bound, (total, self.num_marks)))
        ids = np.repeat(np.arange(n), counts)
        if not self.homogeneous:
            lam = self._rates(times)[np.arange(total), marks]
            keep = rng.random(total) * bound[marks] < lam
            ids, times, marks = ids[keep], times[keep], marks[keep]
        order = np.lexsort((times, ids))
        return _collect(n, [ids[order]], [times[order]], [marks[order]])


# ----------------------------------------------------------------------------- Hawkes
@register_process
class HawkesProcess(_ExactProcess):
    """Multivariate Hawkes process with exponential kernels (module docstring).

    ``mu`` (K,) baseline rates > 0; ``alpha`` (K, K) branching ratios >= 0, alpha[k, m]
    the mean number of mark-k children of a mark-m event, spectral radius < 1; ``beta``
    (K, K) decay rates > 0 (a number: the same for all pairs). Numbers are allowed for
    K = 1 (or with ``num_marks``).
    """

    name = "hawkes"

    def __init__(self, mu, alpha, beta, *, num_marks: int | None = None):
        super().__init__(_num_marks(num_marks, mu, alpha, beta))
        K = self.num_marks
        self.mu = _array("mu", mu, (K,))
        if np.any(self.mu <= 0):
            raise ValueError(f"mu (baseline rates) must be > 0, got {self.mu.tolist()}")
        self.alpha = _array("alpha", alpha, (K, K))
        if np.any(self.alpha < 0):
            raise ValueError(
                f"alpha (branching ratios) must be >= 0 (an excitation), got {self.alpha.tolist()}"
            )
        self.beta = _array("beta", beta, (K, K))
        if np.any(self.beta <= 0):
            raise ValueError(f"beta (decay rates) must be > 0, got {self.beta.tolist()}")
        radius = float(np.max(np.abs(np.linalg.eigvals(self.alpha))))
        if radius >= 1.0:
            raise ValueError(
                f"the Hawkes process is not stationary: the spectral radius of alpha is "
                f"{radius:.6g} >= 1 (each event has on average that many descendants per "
                f"generation, so the counts explode); scale alpha below 1 / {radius:.6g}"
            )
        self.spectral_radius = radius
        self._jump = self.alpha * self.beta  # intensity jump of k after a mark-m event

    def params(self) -> dict:
        return {"mu": self.mu.tolist(), "alpha": self.alpha.tolist(), "beta": self.beta.tolist()}

    def mean_rate(self) -> np.ndarray:
        """(K,) the stationary rates (I - alpha)^-1 mu."""
        return np.linalg.solve(np.eye(self.num_marks) - self.alpha, self.mu)

    def _states(self, t: np.ndarray, m: np.ndarray) -> np.ndarray:
        """(L, K, K) R[j, k, m'] = sum over events i <= j of mark m' of
        exp(-beta[k, m'] (t_j - t_i)), by the recursion (right limits at the events)."""
        L, K = len(t), self.num_marks
        R = np.zeros((L, K, K))
        if L == 0:
            return R
        decay = np.exp(-self.beta * np.diff(t)[:, None, None])  # one vectorised exp
        R[0, :, m[0]] = 1.0
        for j in range(1, L):
            np.multiply(R[j - 1], decay[j - 1], out=R[j])
            R[j, :, m[j]] += 1.0
        return R

    def _decayed(self, q, t, R) -> tuple[np.ndarray, np.ndarray]:
        """States at q- (Q, K, K) and p (Q,), the number of events strictly before q."""
        p = np.searchsorted(t, q, side="left")
        S = np.zeros((len(q), self.num_marks, self.num_marks))
        has = p > 0
        if has.any():
            last = p[has] - 1
            S[has] = R[last] * np.exp(-self.beta * (q[has] - t[last])[:, None, None])
        return S, p

    def _intensity(self, q, t, m):
        S, _ = self._decayed(q, t, self._states(t, m))
        return self.mu + (self._jump * S).sum(axis=2)

    def _log_event_intensity(self, t, m):
        L = len(t)
        lam = self.mu[m].copy()
        if L > 1:
            R = self._states(t, m)
            k = m[1:]
            # row k = m_j of the state just before event j: R[j-1] decayed over the gap
            rows = R[np.arange(L - 1), k] * np.exp(-self.beta[k] * np.diff(t)[:, None])
            lam[1:] += (self._jump[k] * rows).sum(axis=1)
        return np.log(lam)

    def _batch_state(self, batch):
        """(B, L, K, K) the states R of every row (:meth:`_states`, vectorised over rows:
        the same recursion, the same operations)."""
        t, m = batch.times, batch.marks
        (B, L), K = t.shape, self.num_marks
        R = np.zeros((B, L, K, K))
        if L == 0:
            return R
        rows = np.arange(B)
        decay = np.exp(-self.beta * np.diff(t, axis=1)[:, :, None, None])
        R[rows, 0, :, m[:, 0]] = 1.0
        for j in range(1, L):
            np.multiply(R[:, j - 1], decay[:, j - 1], out=R[:, j])
            R[rows, j, :, m[:, j]] += 1.0
        return R

    def _batch_update(self, batch, rows, cols):
        """R at the appended events: one step of the recursion from the event before."""
        R, t, m = batch.state, batch.times, batch.marks
        first = cols == 0
        R[rows[first], 0] = 0.0
        r, j = rows[~first], cols[~first]
        R[r, j] = R[r, j - 1] * np.exp(-self.beta * (t[r, j] - t[r, j - 1])[:, None, None])
        R[rows, cols, :, m[rows, cols]] += 1.0

    def _batch_decayed(self, batch, q, rows, before) -> np.ndarray:
        """(Q, K, K) the states of row ``rows`` at q- given its first ``before`` events."""
        S = np.zeros((len(q), self.num_marks, self.num_marks))
        has = before > 0
        if has.any():
            r, last = rows[has], before[has] - 1
            S[has] = batch.state[r, last] * np.exp(
                -self.beta * (q[has] - batch.times[r, last])[:, None, None]
            )
        return S

    def _batch_intensity(self, batch, q, rows, before):
        return self.mu + (self._jump * self._batch_decayed(batch, q, rows, before)).sum(axis=2)

    def _batch_log_event_intensity(self, batch):
        t, m = batch.times, batch.marks
        lam = self.mu[m]
        if t.shape[1] > 1:
            k = m[:, 1:]
            # row k = m_j of the state just before event j: R[j-1] decayed over the gap
            Rk = np.take_along_axis(batch.state[:, :-1], k[:, :, None, None], axis=2)[:, :, 0]
            rows = Rk * np.exp(-self.beta[k] * np.diff(t, axis=1)[:, :, None])
            lam[:, 1:] += (self._jump[k] * rows).sum(axis=2)
        return np.log(lam)

    def _batch_compensator(self, batch, t_start, t_end):
        t, m = batch.times, batch.marks
        base = self.mu * (t_end - t_start)[:, None]
        before = np.maximum(t_start[:, None] - t, 0.0)[..., None]  # (B, L, 1)
        mass = np.moveaxis(self.alpha[:, m], 0, -1) * np.exp(
            -np.moveaxis(self.beta[:, m], 0, -1) * before
        )
        mass = np.where(batch.valid[..., None], mass, 0.0)
        zero = np.zeros((len(t), 1, self.num_marks))
        prefix = np.concatenate([zero, np.cumsum(mass, axis=1)], axis=1)
        rows = np.arange(len(t))
        p = batch.before(t_end, rows)
        S = self._batch_decayed(batch, t_end, rows, p)
        return base + prefix[rows, p] - (self.alpha * S).sum(axis=2)

    def _compensator(self, q, t, m, t_start):
        base = self.mu * (q - t_start)[:, None]
        if len(t) == 0:
            return base
        # each event's kernel mass inside [t_start, inf): alpha, less what fell before
        # t_start for history events
        before = np.maximum(t_start - t, 0.0)[:, None]
        mass = self.alpha[:, m].T * np.exp(-self.beta[:, m].T * before)  # (L, K)
        prefix = np.concatenate([np.zeros((1, self.num_marks)), np.cumsum(mass, axis=0)])
        S, p = self._decayed(q, t, self._states(t, m))
        # sum over events before q of mass - alpha exp(-beta (q - t_i))
        return base + prefix[p] - (self.alpha * S).sum(axis=2)

    def sample(self, n: int, *, t_end: float, seed=0, t_start: float = 0.0) -> list[dict]:
        """n independent sequences on (t_start, t_end], empty history at t_start, by
        Ogata's thinning run across the sequences at once."""
        n, t_start, t_end = _sample_args(n, t_start, t_end)
        rng = _rng(seed)
        K = self.num_marks
        ids = np.arange(n)
        t = np.full(n, t_start)
        E = np.zeros((n, K, K))  # excitation of k by past mark-m events, at time t
        bound = np.full(n, self.mu.sum())  # total intensity at t (it only decays after)
        rec_id, rec_t, rec_m = [], [], []
        while ids.size:
            s = t + rng.standard_exponential(ids.size) / bound
            alive = s <= t_end
            if not alive.all():
                ids, t, s, E, bound = ids[alive], t[alive], s[alive], E[alive], bound[alive]
                if not ids.size:
                    break
            E *= np.exp(-self.beta * (s - t)[:, None, None])
            lam = self.mu + E.sum(axis=2)  # (n, K) at the candidate
            total = lam.sum(axis=1)
            accept = rng.random(ids.size) * bound < total
            if accept.any():
                a = np.flatnonzero(accept)
                mk = _categorical(rng, lam[a])
                jump = self._jump[:, mk].T  # (a, K)
                E[a, :, mk] += jump
                total[a] += jump.sum(axis=1)
                rec_id.append(ids[a])
                rec_t.append(s[a])
                rec_m.append(mk)
            # after a rejection the intensity at s bounds the rest (it keeps decaying)
            bound, t = total, s
        return _collect(n, rec_id, rec_t, rec_m)


# ------------------------------------------------------------------- self-correcting
@register_process
class SelfCorrectingProcess(_ExactProcess):
    """Multivariate self-correcting process, lambda_k(t) = exp(mu_k t - (alpha N(t-))_k).

    ``mu`` (K,) growth rates > 0; ``alpha`` (K, K) >= 0 with a positive diagonal,
    alpha[k, l] how much a mark-l event lowers log lambda_k. Numbers for K = 1.
    """

    name = "self_correcting"

    def __init__(self, mu=1.0, alpha=1.0, *, num_marks: int | None = None):
        super().__init__(_num_marks(num_marks, mu, alpha))
        K = self.num_marks
        self.mu = _array("mu", mu, (K,))
        if np.any(self.mu <= 0):
            raise ValueError(f"mu (growth rates) must be > 0, got {self.mu.tolist()}")
        self.alpha = _array("alpha", alpha, (K, K))
        if np.any(self.alpha < 0):
            raise ValueError(
                f"alpha must be >= 0 (an event lowers the intensities; a negative entry "
                f"can make the process explode), got {self.alpha.tolist()}"
            )
        if np.any(np.diag(self.alpha) <= 0):
            raise ValueError(
                f"alpha's diagonal must be > 0 (each mark corrects itself; otherwise its "
                f"intensity can grow as exp(mu t) unchecked), got {np.diag(self.alpha).tolist()}"
            )

    def params(self) -> dict:
        return {"mu": self.mu.tolist(), "alpha": self.alpha.tolist()}

    def mean_rate(self) -> np.ndarray:
        """(K,) the long-run rates alpha^-1 mu (N(t)/t tends to them when they are all
        positive; a non-positive entry means that mark dies out)."""
        try:
            return np.linalg.solve(self.alpha, self.mu)
        except np.linalg.LinAlgError:
            raise ValueError(
                f"alpha is singular, so the long-run rates alpha^-1 mu are undefined: "
                f"{self.alpha.tolist()}"
            ) from None

    def _counts_before(self, q, t, m):
        """(Q, K) N(q-), counts of events strictly before each q, and p (Q,)."""
        onehot = np.zeros((len(t) + 1, self.num_marks))
        onehot[np.arange(1, len(t) + 1), m] = 1.0
        counts = np.cumsum(onehot, axis=0)  # counts[j] = counts of the first j events
        p = np.searchsorted(t, q, side="left")
        return counts[p], p, counts

    def _log_rates(self, q, N):
        return self.mu * q[:, None] - N @ self.alpha.T

    def _intensity(self, q, t, m):
        N, _, _ = self._counts_before(q, t, m)
        return np.exp(self._log_rates(q, N))

    def _log_event_intensity(self, t, m):
        N, _, _ = self._counts_before(t, t, m)
        return self._log_rates(t, N)[np.arange(len(t)), m]

    def _segment(self, a, b, N):
        """(., K) int_a^b lambda_k with the counts N constant on [a, b)."""
        return np.exp(self._log_rates(a, N)) * np.expm1(self.mu * (b - a)[:, None]) / self.mu

    def _batch_state(self, batch):
        """(B, L + 1, K) counts of each row's first j events (:meth:`_counts_before`)."""
        (B, L), K = batch.times.shape, self.num_marks
        onehot = np.zeros((B, L + 1, K))
        b, j = np.nonzero(batch.valid)
        onehot[b, j + 1, batch.marks[b, j]] = 1.0
        return np.cumsum(onehot, axis=1)

    def _batch_update(self, batch, rows, cols):
        counts = batch.state
        counts[rows, cols + 1] = counts[rows, cols]
        counts[rows, cols + 1, batch.marks[rows, cols]] += 1.0

    def _batch_intensity(self, batch, q, rows, before):
        return np.exp(self._log_rates(q, batch.state[rows, before]))

    def _batch_log_event_intensity(self, batch):
        t, m = batch.times.ravel(), batch.marks.ravel()
        N = batch.state[:, :-1].reshape(len(t), self.num_marks)  # N(t_j-) = first j events
        return self._log_rates(t, N)[np.arange(len(t)), m].reshape(batch.times.shape)

    def _batch_compensator(self, batch, t_start, t_end):
        """As :meth:`_compensator` at q = t_end: one segment per scored event (from the
        previous breakpoint), then the last one to t_end."""
        t, counts, valid = batch.times, batch.state, batch.valid
        B, L = t.shape
        rows = np.arange(B)
        h = (valid & (t <= t_start[:, None])).sum(axis=1)  # history: events <= t_start
        p = batch.before(t_end, rows)
        j = np.arange(L)[None]
        prev = np.where(j == h[:, None], t_start[:, None], np.roll(t, 1, axis=1))
        sb, sj = np.nonzero((j >= h[:, None]) & (j < p[:, None]))
        segs = self._segment(prev[sb, sj], t[sb, sj], counts[sb, sj])
        total = np.zeros((B, self.num_marks))
        np.add.at(total, sb, segs)
        start = np.where(p > h, t[rows, np.maximum(p - 1, 0)], t_start)
        return total + self._segment(start, t_end, counts[rows, p])

    def _compensator(self, q, t, m, t_start):
        N_q, p, counts = self._counts_before(q, t, m)
        h = int(np.searchsorted(t, t_start, side="right"))  # history: events <= t_start
        # breakpoints t_start < t_h < t_{h+1} < ...; counts on segment i are counts[h + i]
        points = np.concatenate([[t_start], t[h:]])
        segs = self._segment(points[:-1], points[1:], counts[h : len(t)])
        G = np.concatenate([np.zeros((1, self.num_marks)), np.cumsum(segs, axis=0)])
        i = np.maximum(p - h, 0)  # scored events before q
        start = points[i]
        return G[i] + self._segment(start, q, N_q)

    def sample(self, n: int, *, t_end: float, seed=0, t_start: float = 0.0) -> list[dict]:
        """n independent sequences on (t_start, t_end], no events before t_start, by
        inverting each mark's compensator from the last event (competing risks)."""
        n, t_start, t_end = _sample_args(n, t_start, t_end)
        rng = _rng(seed)
        K = self.num_marks
        log_mu = np.log(self.mu)
        ids = np.arange(n)
        t = np.full(n, t_start)
        N = np.zeros((n, K))
        rec_id, rec_t, rec_m = [], [], []
        while ids.size:
            log_lam = self._log_rates(t, N)  # (n, K) at t, the intensity's restart value
            e = rng.standard_exponential((ids.size, K))
            # Lambda_k(t, t + d) = lam_k expm1(mu_k d) / mu_k = e_k, solved in log space
            wait = np.logaddexp(0.0, np.log(e) + log_mu - log_lam) / self.mu
            k = np.argmin(wait, axis=1)
            s = t + wait[np.arange(ids.size), k]
            alive = s <= t_end
            if not alive.all():
                ids, s, N, k = ids[alive], s[alive], N[alive], k[alive]
                if not ids.size:
                    break
            rec_id.append(ids)
            rec_t.append(s)
            rec_m.append(k)
            N[np.arange(ids.size), k] += 1.0
            t = s
        return _collect(n, rec_id, rec_t, rec_m)
