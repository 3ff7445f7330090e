r"""Gene regulatory networks with RNA-velocity kinetics: single-cell-like snapshots and
the scoring of a recovered network (the ground truth for GFG's motif recovery).

**Model.** G genes, each with an unspliced (u) and a spliced (s) RNA level; the state is
``x = [u_1..u_G, s_1..s_G]`` (2G). Transcription of gene j is regulated by the spliced
levels of its regulators (the signed edges i -> j), splicing turns u into s and s is
degraded (the kinetics of RNA velocity, La Manno et al. 2018, with regulated
transcription):

.. math::
    \dot u_j = \alpha_j f_j(s) + b_j - \beta_j u_j, \qquad
    \dot s_j = \beta_j u_j - \gamma_j s_j,

with :math:`f_j(s) = \frac{1}{k_j} \sum_{e: i \to j} h_e(s_i)` the mean over the
:math:`k_j` regulators of gene j of the Hill terms
:math:`h_e = r/(1+r)` for an activation and :math:`1/(1+r)` for a repression,
:math:`r = (s_i/K_e)^{n_e}` (threshold :math:`K_e > 0`, Hill coefficient
:math:`n_e \ge 1`, both per edge), and :math:`b_j \ge 0` a basal (leaky) rate. A gene
without regulators is constitutive (:math:`f_j = 1`).

Design choices, and why:

- **Mean of Hill terms** (each regulator contributes an equal share of the maximal
  rate; the additive form of the Huang et al. 2007 cell-fate toggle and, with equal
  weights, of SERGIO's sums of Hill functions, Dibaeinia & Sinha 2020). The sign of an
  edge is the sign of its effect *everywhere*: :math:`\partial f_j/\partial s_i =
  h_e'(s_i)/k_j` is > 0 for an activation and < 0 for a repression at every state with
  :math:`s_i > 0`, and exactly 0 for a non-edge, so the mean Jacobian entry
  (:func:`true_motif_scores`) ranks every edge correctly (AUROC 1: the ceiling a
  learned field can reach). The product of Hill terms (AND logic) was tried first and
  dropped: in random networks a gene with two repressors or an unlit activator is
  silenced (f ~ 0), which hides *all* its incoming edges (on ``random_network(12, 0)``
  the weakest true scores were 3e-4 against a median 0.13; with the mean the weakest
  is 0.05 against 0.32), and the silence cascades to its targets.
- **Splicing faster than degradation** (:math:`\beta \approx 3`-:math:`5\gamma`): the
  unspliced levels relax within :math:`1/\beta`, so cells lie near the G-dimensional
  slow manifold :math:`u \approx (\alpha f(s) + b)/\beta`
  (:meth:`GeneNetwork.quasi_steady_unspliced`), the structure GFG's learned manifold
  should find. Time is in units of the spliced lifetime (:math:`\gamma \approx 1`).
- **Invariant box.** Since :math:`0 \le f \le 1`, the box :math:`0 \le s_j \le
  (\alpha_j + b_j)/\gamma_j`, :math:`0 \le u_j \le (\alpha_j + b_j)/\beta_j` is
  forward invariant (:meth:`GeneNetwork.upper_bounds`): it is "the range the network
  visits" from which :meth:`GeneNetwork.sample_initial` draws. Hill terms see
  :math:`\max(s, 0)` so noisy or slightly negative inputs stay finite.
- **Closed-form Jacobian.** ``jacobian`` assembles the four blocks (diagonal
  splicing and degradation, the regulated du/ds block) from the Hill derivatives;
  tested against autograd.

**Networks** (:data:`NETWORKS`, :func:`get_network`):

- ``"toggle_switch"``: A and B repress each other and activate themselves (all four
  terms K=2.5, n=4), alpha=5, basal 0.2: two attractors (s_A ~ 5.06, s_B ~ 0.34 and
  the mirror image) separated by the symmetric saddle s_A = s_B = 2.7 (there f = 1/2
  exactly; its one unstable eigenvalue, of the antisymmetric mode, is ~0.58, and no
  "both off" or "both on" state exists: 1000 uniform starts all end in the two
  attractors). Marker C is activated by A and D by B (K=2,
  n=2, alpha=4, basal 0.1). 4 genes, 6 edges: both signs, self-loops and non-edges.
- ``"repressilator"``: A -| B -| C -| A (Elowitz & Leibler 2000), alpha=10, K=1, n=3,
  basal 0.05, gamma=1, beta=4. With beta/gamma=4 the symmetric fixed point
  (s* ~ 1.7) loses stability (Hopf) once the loop gain per gene
  :math:`\alpha |h'(s^*)|` exceeds ~1.48; here it is ~2.5, so a stable limit cycle
  (period ~ 7.5, s_A between ~0.36 and ~7.9) attracts almost every start.
- ``"random"``: G genes (10-20, default 12) named g01.., each with 1-3 regulators drawn
  without replacement from the other genes (no self-loops), signs a seeded balanced
  permutation (half repressions, rounded down), gamma ~ U(0.8, 1.25), beta/gamma ~
  U(3, 5), alpha ~ U(2, 5), basal/alpha ~ U(0.02, 0.1), K_e ~ U(0.2, 0.5) times the
  regulator's bound :math:`(\alpha_i + b_i)/\gamma_i` (so each Hill term switches
  inside the visited range), n_e ~ U(1.5, 3).

**Snapshot data sets** (``make_dataset("grn_toggle" | "grn_repressilator" |
"grn_random", n, out=...)``): each cell is one episode of one step. Initial states:
spliced levels uniform over the invariant box, unspliced at their quasi-steady value
times U(1 - u_spread, 1 + u_spread). Each cell is integrated to its own time
``t ~ U(0, t_max]`` (one batched dopri5 solve with per-cell grids ``[0, t]``, rtol 1e-6,
atol 1e-8), so the sample holds cells in transit and near attractors. Recorded:
``/steps/x_clean`` the state, ``/steps/x`` the observation ``Poisson(counts_scale *
x_clean) / counts_scale`` (counts-like noise, relative size
:math:`1/\sqrt{\text{counts\_scale}\cdot x}`; ``counts_scale=math.inf`` for none),
``/steps/v`` the true velocity at ``x_clean`` and ``/steps/t`` the cell's time (its
pseudotime). Arrays float64, names ``["u_A", .., "s_A", ..]`` for all three; kind
"state", system ``"grn_<network>"``, ``/episodes/split`` by exact seeded counts; meta
holds ``"network": network.config()`` (rebuild with :func:`network_from_config`) and
the options. Independent streams (initial states, times, noise, split) from one
SeedSequence: changing ``counts_scale`` does not move the clean cells.

**Scoring** (:func:`score_network`): scores[i, j] is the estimated signed effect of
gene i on gene j, compared with the true adjacency over the ordered pairs i != j
(self-loops are left out: a snapshot's Jacobian diagonal mixes them with degradation).
AUROCs are Mann-Whitney statistics with ties counted half.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from simsci import data as sdata
from simsci._seeding import check_positive, check_split, progress_bar, split_ids, streams
from simsci.datasets._registry import BuildOptions, check_compression, register_dataset
from simsci.errors import unknown_name
from simsci.integrate import odeint

_PARAMS = ("alpha", "basal", "beta", "gamma")


def _as_vector(name: str, value, length: int, *, minimum: float, strict: bool) -> list[float]:
    """A per-gene or per-edge parameter: a number (broadcast) or ``length`` numbers,
    finite and > minimum (``strict``) or >= minimum."""
    arr = (
        np.asarray(value, dtype=np.float64)
        if not isinstance(value, torch.Tensor)
        else (value.detach().cpu().double().numpy())
    )
    if arr.ndim == 0:
        arr = np.full(length, float(arr))
    if arr.shape != (length,):
        raise ValueError(
            f"{name} must be a number or {length} numbers (one per "
            f"{'edge' if name in ('K', 'hill') else 'gene'}), got shape {arr.shape}"
        )
    bad = ~np.isfinite(arr) | ((arr <= minimum) if strict else (arr < minimum))
    if bad.any():
        k = int(np.argmax(bad))
        rule = f"> {minimum}" if strict else f">= {minimum}"
        raise ValueError(f"{name} must be finite and {rule}, but {name}[{k}] = {float(arr[k])!r}")
    return [float(v) for v in arr]


class _Tables:
    """The network's parameters as tensors on one device/dtype (cached per pair)."""

    def __init__(self, net: GeneNetwork, device, dtype):
        G, R = net.n_genes, net._max_in
        src = torch.zeros(G, R, dtype=torch.long)
        mask = torch.zeros(G, R, dtype=torch.bool)
        act = torch.zeros(G, R, dtype=torch.bool)
        K = torch.ones(G, R, dtype=torch.float64)
        hill = torch.ones(G, R, dtype=torch.float64)
        fill = [0] * G
        for e, (i, j, sign) in enumerate(net.edges):
            r = fill[j]
            fill[j] += 1
            src[j, r], mask[j, r], act[j, r] = i, True, sign > 0
            K[j, r], hill[j, r] = net.K[e], net.hill[e]
        kw = {"device": device}
        self.src, self.mask, self.act = src.to(**kw), mask.to(**kw), act.to(**kw)
        self.K, self.hill = K.to(dtype=dtype, **kw), hill.to(dtype=dtype, **kw)
        self.regulated = self.mask.any(dim=-1)
        self.in_degree = mask.sum(dim=-1).clamp_min(1).to(dtype=dtype, **kw)
        for p in _PARAMS:
            setattr(self, p, torch.tensor(getattr(net, p), dtype=dtype, device=device))


class GeneNetwork:
    """G genes with signed regulatory edges and transcription/splicing kinetics (module
    docstring: the equations). State ``x = [u_1..u_G, s_1..s_G]``.

    Args:
        genes: G distinct gene names.
        edges: ``(src, dst, sign)`` triples, src/dst gene names or indices, sign +1
            (activation) or -1 (repression); at most one edge per ordered pair.
        alpha, basal, beta, gamma: per gene (a number or G numbers): maximal
            transcription (> 0), basal transcription (>= 0), splicing (> 0) and
            degradation (> 0) rates.
        K, hill: per edge (a number or E numbers): Hill threshold (> 0) and
            coefficient (>= 1).
        name: a label (the builder's name).

    Methods take and return torch tensors on the input's device and dtype.
    """

    def __init__(
        self,
        genes: Sequence[str],
        edges: Sequence[Sequence],
        *,
        alpha=1.0,
        basal=0.0,
        beta=4.0,
        gamma=1.0,
        K=1.0,
        hill=2.0,
        name: str = "custom",
    ):
        if isinstance(genes, str) or not isinstance(genes, Sequence) or not genes:
            raise ValueError(f"genes must be a non-empty list of gene names, got {genes!r}")
        genes = tuple(genes)
        if any(not isinstance(g, str) or not g for g in genes) or len(set(genes)) != len(genes):
            raise ValueError(f"gene names must be distinct non-empty strings, got {list(genes)}")
        self.genes = genes
        self.name = str(name)
        G = len(genes)
        index = {g: k for k, g in enumerate(genes)}

        def gene(ref, what: str, e: int) -> int:
            if isinstance(ref, str):
                if ref not in index:
                    raise unknown_name(f"gene (edge {e} {what})", ref, genes)
                return index[ref]
            if (
                isinstance(ref, bool)
                or not isinstance(ref, (int, np.integer))
                or not (0 <= ref < G)
            ):
                raise ValueError(
                    f"edge {e}: {what} must be a gene name or an index in 0..{G - 1}, got {ref!r}"
                )
            return int(ref)

        parsed, seen = [], set()
        for e, edge in enumerate(edges):
            try:
                src, dst, sign = edge
            except (TypeError, ValueError):
                raise ValueError(
                    f"edge {e} must be a (src, dst, sign) triple, got {edge!r}"
                ) from None
            i, j = gene(src, "src", e), gene(dst, "dst", e)
            if isinstance(sign, bool) or sign not in (1, -1):
                raise ValueError(
                    f"edge {e} ({genes[i]} -> {genes[j]}): sign must be +1 (activation) or "
                    f"-1 (repression), got {sign!r}"
                )
            if (i, j) in seen:
                raise ValueError(
                    f"edge {e}: a second edge {genes[i]} -> {genes[j]}; each ordered pair "
                    "has at most one edge (merge them)"
                )
            seen.add((i, j))
            parsed.append((i, j, int(sign)))
        self.edges: tuple[tuple[int, int, int], ...] = tuple(parsed)
        E = len(parsed)
        self.alpha = _as_vector("alpha", alpha, G, minimum=0.0, strict=True)
        self.basal = _as_vector("basal", basal, G, minimum=0.0, strict=False)
        self.beta = _as_vector("beta", beta, G, minimum=0.0, strict=True)
        self.gamma = _as_vector("gamma", gamma, G, minimum=0.0, strict=True)
        self.K = _as_vector("K", K, E, minimum=0.0, strict=True)
        self.hill = _as_vector("hill", hill, E, minimum=1.0, strict=False)
        in_degree = [0] * G
        for _, j, _ in parsed:
            in_degree[j] += 1
        self._max_in = max(1, *in_degree)
        self._tables: dict = {}

    # ------------------------------------------------------------ description
    @property
    def n_genes(self) -> int:
        return len(self.genes)

    @property
    def dim(self) -> int:
        """State dimension 2G."""
        return 2 * len(self.genes)

    def state_names(self) -> list[str]:
        """``["u_A", ..., "s_A", ...]``: the names of the state's entries."""
        return [f"u_{g}" for g in self.genes] + [f"s_{g}" for g in self.genes]

    def adjacency(self) -> torch.Tensor:
        """``(G, G)`` int64: A[i, j] = sign of the edge i -> j (+1, -1), 0 for none."""
        A = torch.zeros(self.n_genes, self.n_genes, dtype=torch.int64)
        for i, j, sign in self.edges:
            A[i, j] = sign
        return A

    def upper_bounds(self) -> torch.Tensor:
        """``(2G,)`` float64: the forward-invariant box [0, bound] (u: (alpha + basal) /
        beta, s: (alpha + basal) / gamma)."""
        top = torch.tensor(self.alpha) + torch.tensor(self.basal)
        return torch.cat([top / torch.tensor(self.beta), top / torch.tensor(self.gamma)])

    def config(self) -> dict:
        """JSON-serialisable parameters; :func:`network_from_config` rebuilds the network."""
        return {
            "name": self.name,
            "genes": list(self.genes),
            "edges": [[self.genes[i], self.genes[j], s] for i, j, s in self.edges],
            **{p: list(getattr(self, p)) for p in _PARAMS},
            "K": list(self.K),
            "hill": list(self.hill),
        }

    def __repr__(self) -> str:
        return f"GeneNetwork({self.name!r}, genes={self.n_genes}, edges={len(self.edges)})"

    # -------------------------------------------------------------- dynamics
    def _t(self, like: torch.Tensor) -> _Tables:
        key = (like.device, like.dtype)
        if key not in self._tables:
            self._tables[key] = _Tables(self, like.device, like.dtype)
        return self._tables[key]

    def _check_x(self, x, what: str = "x") -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            x = torch.as_tensor(np.asarray(x, dtype=np.float64))
        if not x.is_floating_point():
            x = x.to(torch.float64)
        if x.ndim < 1 or x.shape[-1] != self.dim:
            raise ValueError(
                f"{what} must have a last axis of {self.dim} entries ([u_1..u_{self.n_genes}, "
                f"s_1..s_{self.n_genes}]), got shape {tuple(x.shape)}"
            )
        return x

    def _hill(self, s: torch.Tensor, derivative: bool):
        """f (..., G) and, with ``derivative``, dF (..., G, G) with dF[..., j, i] =
        d f_j / d s_i."""
        tb = self._t(s)
        sg = s.clamp_min(0.0)[..., tb.src]  # (..., G, R): the regulators' levels
        r = (sg / tb.K) ** tb.hill
        denom = 1.0 + r
        h = torch.where(tb.act, r / denom, 1.0 / denom)
        h = torch.where(tb.mask, h, torch.zeros_like(h))
        f = torch.where(tb.regulated, h.sum(dim=-1) / tb.in_degree, torch.ones_like(h[..., 0]))
        if not derivative:
            return f, None
        dr = tb.hill / tb.K * (sg / tb.K) ** (tb.hill - 1.0)
        dh = torch.where(tb.act, dr, -dr) / (denom * denom)
        slot = torch.where(tb.mask, dh, torch.zeros_like(dh)) / tb.in_degree[:, None]
        dF = torch.zeros(*slot.shape[:-1], self.n_genes, dtype=s.dtype, device=s.device)
        dF.scatter_add_(-1, tb.src.expand(slot.shape), slot)  # padded slots add 0
        return f, dF

    def transcription(self, s) -> torch.Tensor:
        """``(..., G)`` regulated transcription ``alpha * f(s) + basal`` at spliced ``s``."""
        s = torch.as_tensor(s)
        tb = self._t(s)
        return tb.alpha * self._hill(s, False)[0] + tb.basal

    def quasi_steady_unspliced(self, s) -> torch.Tensor:
        """``(..., G)`` the slow manifold ``u = (alpha f(s) + basal) / beta``."""
        s = torch.as_tensor(s)
        return self.transcription(s) / self._t(s).beta

    def velocity(self, x) -> torch.Tensor:
        """``(..., 2G)`` dx/dt at ``x`` ``(..., 2G)``."""
        x = self._check_x(x)
        tb = self._t(x)
        G = self.n_genes
        u, s = x[..., :G], x[..., G:]
        f, _ = self._hill(s, False)
        du = tb.alpha * f + tb.basal - tb.beta * u
        ds = tb.beta * u - tb.gamma * s
        return torch.cat([du, ds], dim=-1)

    def jacobian(self, x) -> torch.Tensor:
        """``(..., 2G, 2G)`` J[..., a, b] = d velocity_a / d x_b at ``x`` (closed form)."""
        x = self._check_x(x)
        tb = self._t(x)
        G = self.n_genes
        _, dF = self._hill(x[..., G:], True)
        J = torch.zeros(*x.shape[:-1], 2 * G, 2 * G, dtype=x.dtype, device=x.device)
        k = torch.arange(G, device=x.device)
        J[..., k, k] = -tb.beta
        J[..., G + k, k] = tb.beta
        J[..., G + k, G + k] = -tb.gamma
        J[..., :G, G:] = tb.alpha[:, None] * dF
        return J

    def simulate(self, x0, t, **solver_options) -> torch.Tensor:
        """Solve from ``x0`` ``(B, 2G)`` through :func:`simsci.integrate.odeint`; ``t``
        ``(T,)`` shared or ``(B, T)`` per cell (or ragged). Returns ``(B, T, 2G)``.
        ``solver_options`` go to odeint (method, rtol, atol, ...)."""
        x0 = self._check_x(x0, "x0")
        if x0.ndim != 2:
            raise ValueError(f"x0 must be (B, {self.dim}), got shape {tuple(x0.shape)}")
        return odeint(lambda _t, y: self.velocity(y), x0, t, **solver_options)

    def sample_initial(
        self,
        n: int,
        generator: torch.Generator | None = None,
        *,
        u_spread: float = 0.5,
        device=None,
        dtype=torch.float64,
    ) -> torch.Tensor:
        """``(n, 2G)`` initial states: s uniform on [0, (alpha + basal) / gamma] (the
        invariant box), u = its quasi-steady value times U(1 - u_spread, 1 + u_spread).
        Random numbers from ``generator`` (CPU, float64), then moved to device/dtype."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive integer (cells), got {n!r}")
        u_spread = _check_spread(u_spread)
        G = self.n_genes
        top = self.upper_bounds()[G:]
        draws = torch.rand(int(n), 2 * G, generator=generator, dtype=torch.float64)
        s = top * draws[:, G:]
        u = self.quasi_steady_unspliced(s) * (1.0 + u_spread * (2.0 * draws[:, :G] - 1.0))
        return torch.cat([u, s], dim=-1).to(device=device, dtype=dtype)


def _check_spread(u_spread) -> float:
    if isinstance(u_spread, bool) or not isinstance(u_spread, (int, float, np.number)):
        raise TypeError(f"u_spread must be a number, got {u_spread!r}")
    u_spread = float(u_spread)
    if not 0.0 <= u_spread <= 1.0:
        raise ValueError(
            f"u_spread must lie in [0, 1] (unspliced starts at its quasi-steady value "
            f"times U(1 - u_spread, 1 + u_spread), kept >= 0), got {u_spread}"
        )
    return u_spread


def network_from_config(config: Mapping) -> GeneNetwork:
    """Rebuild a :class:`GeneNetwork` from ``config()`` (a file's ``meta["network"]``)."""
    keys = {"name", "genes", "edges", *_PARAMS, "K", "hill"}
    if not isinstance(config, Mapping) or not {"genes", "edges"} <= set(config):
        raise ValueError(
            f"a gene-network config is a dict with 'genes', 'edges' and the rates "
            f"(GeneNetwork.config()), got {config!r}"
        )
    extra = set(config) - keys
    if extra:
        raise ValueError(
            f"gene-network config has unknown keys {sorted(extra)}; valid: {sorted(keys)}"
        )
    cfg = dict(config)
    genes, edges = cfg.pop("genes"), cfg.pop("edges")
    return GeneNetwork(genes, [tuple(e) for e in edges], **cfg)


# ------------------------------------------------------------------ networks
def toggle_switch() -> GeneNetwork:
    """A, B mutually repressing and self-activating (bistable), markers C <- A, D <- B."""
    edges = [
        ("A", "A", 1),
        ("B", "B", 1),
        ("B", "A", -1),
        ("A", "B", -1),
        ("A", "C", 1),
        ("B", "D", 1),
    ]
    return GeneNetwork(
        ["A", "B", "C", "D"],
        edges,
        alpha=[5.0, 5.0, 4.0, 4.0],
        basal=[0.2, 0.2, 0.1, 0.1],
        beta=4.0,
        gamma=1.0,
        K=[2.5, 2.5, 2.5, 2.5, 2.0, 2.0],
        hill=[4.0, 4.0, 4.0, 4.0, 2.0, 2.0],
        name="toggle_switch",
    )


def repressilator() -> GeneNetwork:
    """A -| B -| C -| A (Elowitz & Leibler 2000), in the oscillating regime."""
    edges = [("A", "B", -1), ("B", "C", -1), ("C", "A", -1)]
    return GeneNetwork(
        ["A", "B", "C"],
        edges,
        alpha=10.0,
        basal=0.05,
        beta=4.0,
        gamma=1.0,
        K=1.0,
        hill=3.0,
        name="repressilator",
    )


GENES_RANGE = (10, 20)


def random_network(genes: int = 12, seed: int = 0) -> GeneNetwork:
    """``genes`` (10-20) genes, 1-3 regulators each, balanced random signs, no self-loops,
    rates from the seeded ranges of the module docstring."""
    lo, hi = GENES_RANGE
    if (
        isinstance(genes, bool)
        or not isinstance(genes, (int, np.integer))
        or not (lo <= genes <= hi)
    ):
        raise ValueError(f"genes must be an integer in {lo}..{hi} (random network), got {genes!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"network seed must be a non-negative integer, got {seed!r}")
    G = int(genes)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x6E7]))
    edges = []
    for j in range(G):
        k = int(rng.integers(1, 4))
        others = np.array([i for i in range(G) if i != j])
        for i in np.sort(rng.choice(others, size=k, replace=False)):
            edges.append([int(i), j])
    E = len(edges)
    signs = np.array([1] * (E - E // 2) + [-1] * (E // 2))[rng.permutation(E)]
    gamma = rng.uniform(0.8, 1.25, G)
    beta = gamma * rng.uniform(3.0, 5.0, G)
    alpha = rng.uniform(2.0, 5.0, G)
    basal = alpha * rng.uniform(0.02, 0.1, G)
    bound = (alpha + basal) / gamma
    K = np.array([bound[i] for i, _ in edges]) * rng.uniform(0.2, 0.5, E)
    hill = rng.uniform(1.5, 3.0, E)
    names = [f"g{k + 1:02d}" for k in range(G)]
    return GeneNetwork(
        names,
        [(i, j, int(s)) for (i, j), s in zip(edges, signs)],
        alpha=alpha,
        basal=basal,
        beta=beta,
        gamma=gamma,
        K=K,
        hill=hill,
        name="random",
    )


#: network name -> builder
NETWORKS: dict[str, Callable[..., GeneNetwork]] = {
    "toggle_switch": toggle_switch,
    "repressilator": repressilator,
    "random": random_network,
}


def get_network(name: str, **options) -> GeneNetwork:
    """Build the network registered as ``name`` (options: ``genes``, ``seed`` for
    ``"random"``)."""
    if name not in NETWORKS:
        raise unknown_name("gene network", name, NETWORKS)
    return NETWORKS[name](**options)


# ------------------------------------------------------------------- scoring
def rank_auroc(score: np.ndarray, positive: np.ndarray) -> float:
    """Mann-Whitney AUROC of ``score`` for the boolean labels, ties counted half; NaN
    when a class is empty."""
    P = int(positive.sum())
    N = positive.size - P
    if P == 0 or N == 0:
        return math.nan
    values, inverse, counts = np.unique(score, return_inverse=True, return_counts=True)
    # average rank of each distinct value (1-based): ties share the mean of their ranks
    rank = np.cumsum(counts) - (counts - 1) / 2.0
    u = rank[inverse][positive].sum() - P * (P + 1) / 2.0
    return float(u / (P * N))


def _to_numpy(a, what: str) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    try:
        return np.asarray(a)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be a (G, G) array, got {type(a).__name__}") from exc


def score_network(scores, adjacency) -> dict:
    """Score a recovered network against the true one, over ordered pairs i != j.

    Args:
        scores: ``(G, G)`` real, finite: scores[i, j] the estimated signed effect of gene i
            on gene j (e.g. :func:`true_motif_scores` or a learned field's mean Jacobian).
        adjacency: ``(G, G)`` integers in {-1, 0, 1} (:meth:`GeneNetwork.adjacency`).

    Returns:
        ``{"auroc_activation": score vs is-activation against all other pairs,
        "auroc_repression": -score vs is-repression, "auroc_signed": mean of those two
        that are defined, "auroc_edge": |score| vs is-edge, "sign_accuracy": fraction of
        true edges whose score has their sign (0 counts as wrong), "n_pairs", "n_edges"}``;
        an AUROC with an empty class (and sign_accuracy with no edge) is NaN.
    """
    S = _to_numpy(scores, "scores")
    A = _to_numpy(adjacency, "adjacency")
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] < 2:
        raise ValueError(
            f"adjacency must be a square (G, G) matrix with G >= 2, got shape {A.shape}"
        )
    if S.shape != A.shape:
        raise ValueError(
            f"scores must have the adjacency's shape {A.shape} (scores[i, j]: effect of "
            f"gene i on gene j), got shape {S.shape}"
        )
    if not np.issubdtype(S.dtype, np.number) or np.iscomplexobj(S):
        raise TypeError(f"scores must be real numbers, got dtype {S.dtype}")
    S = S.astype(np.float64)
    if not np.isfinite(S).all():
        i, j = np.argwhere(~np.isfinite(S))[0]
        raise ValueError(
            f"scores must be finite, but scores[{i}, {j}] = {float(S[i, j])!r} (replace NaN/inf "
            "before scoring)"
        )
    if not np.isin(A, (-1, 0, 1)).all():
        raise ValueError(
            f"adjacency entries must be -1, 0 or +1 (signed edges), got values "
            f"{sorted(set(np.unique(A).tolist()))}"
        )
    A = A.astype(np.int64)
    off = ~np.eye(A.shape[0], dtype=bool)
    s, a = S[off], A[off]
    act = rank_auroc(s, a > 0)
    rep = rank_auroc(-s, a < 0)
    defined = [v for v in (act, rep) if not math.isnan(v)]
    edge = a != 0
    n_edges = int(edge.sum())
    return {
        "auroc_activation": act,
        "auroc_repression": rep,
        "auroc_signed": float(np.mean(defined)) if defined else math.nan,
        "auroc_edge": rank_auroc(np.abs(s), edge),
        "sign_accuracy": float(np.mean(np.sign(s[edge]) == a[edge])) if n_edges else math.nan,
        "n_pairs": int(s.size),
        "n_edges": n_edges,
    }


def true_motif_scores(network: GeneNetwork, x) -> torch.Tensor:
    """``(G, G)``: the mean over cells ``x`` ``(N, 2G)`` of d(du_j/dt)/d(s_i) =
    alpha_j df_j/ds_i at [i, j] (the true field's signed interactions; the ceiling of
    :func:`score_network`). Device and dtype of ``x``."""
    x = network._check_x(x)
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"x must be (N, {network.dim}) cells, got shape {tuple(x.shape)}")
    _, dF = network._hill(x[:, network.n_genes :], True)  # (N, j, i)
    return (network._t(x).alpha[:, None] * dF).mean(dim=0).T


# ------------------------------------------------------------------ datasets
_STREAMS = ("initial", "times", "noise", "split")
# the trajectories only place the cells (v is exact at x_clean), so odeint's defaults do
_RTOL, _ATOL = 1e-6, 1e-8


def _check_counts_scale(counts_scale) -> float:
    if isinstance(counts_scale, bool) or not isinstance(counts_scale, (int, float, np.number)):
        raise TypeError(f"counts_scale must be a number, got {counts_scale!r}")
    value = float(counts_scale)
    if not value > 0:  # also NaN
        raise ValueError(
            f"counts_scale must be > 0 (observed x = Poisson(counts_scale * x) / "
            f"counts_scale; larger is less noise, math.inf for none), got {counts_scale!r}"
        )
    return value


def grn(
    dataset: str,
    make_network: Callable[..., GeneNetwork],
    n: int,
    common: BuildOptions,
    *,
    t_max: float,
    counts_scale: float = 50.0,
    u_spread: float = 0.5,
    compression: str | None = None,
    **network_options,
) -> Path:
    """Write ``n`` cells of ``make_network(**network_options)`` (module docstring: the sampling,
    noise and file layout; ``common.seed`` draws the cells). Registered as ``grn_toggle``,
    ``grn_repressilator`` and ``grn_random`` (whose ``genes`` and ``network_seed`` make
    the network); call through ``make_dataset("grn_toggle", n, out=...)``."""
    network = make_network(**network_options)
    t_max = check_positive("t_max", t_max)
    counts_scale = _check_counts_scale(counts_scale)
    u_spread = _check_spread(u_spread)
    fractions = check_split(common.split)
    compression = check_compression(compression)

    gens = streams(common.seed, _STREAMS)
    x0 = network.sample_initial(n, gens["initial"], u_spread=u_spread)
    # end times in (0, t_max]: 1 - U(0, 1) never hits 0, so every grid [0, t] increases
    t_end = t_max * (1.0 - torch.rand(n, generator=gens["times"], dtype=torch.float64))
    grid = torch.stack([torch.zeros_like(t_end), t_end], dim=1)
    x_clean = odeint(lambda _t, y: network.velocity(y), x0, grid, rtol=_RTOL, atol=_ATOL)[:, -1]
    x_clean = x_clean.clamp_min(0.0)  # levels are >= 0; guards a solver's -1e-17
    v = network.velocity(x_clean)
    if math.isinf(counts_scale):
        x_obs = x_clean.clone()
    else:
        x_obs = torch.poisson(counts_scale * x_clean, generator=gens["noise"]) / counts_scale
    ids = split_ids(n, fractions, gens["split"])

    names = network.state_names()
    meta = {
        **common.meta(dataset, n),
        **{k: int(v) for k, v in network_options.items()},
        "t_max": t_max,
        "counts_scale": counts_scale if math.isfinite(counts_scale) else "inf",
        "u_spread": u_spread,
        "split": list(fractions),
        "network": network.config(),
        "state": "x = [u_1..u_G, s_1..s_G] (unspliced, spliced)",
        "velocity": "du/dt = alpha f(s) + basal - beta u, ds/dt = beta u - gamma s",
        "fields": {
            "x": "observed: Poisson(counts_scale * x_clean) / counts_scale",
            "x_clean": "the cell's noise-free state",
            "v": "true velocity at x_clean",
            "t": "the cell's time since its initial state (pseudotime)",
        },
        "solver": {"method": "dopri5", "rtol": _RTOL, "atol": _ATOL},
    }
    t_np, x_np, c_np, v_np = (a.numpy() for a in (t_end, x_obs, x_clean, v))
    bar = progress_bar(n, dataset, common.progress)
    try:
        with sdata.TrajectoryWriter(
            common.out,
            kind="state",
            system=f"grn_{network.name}",
            meta=meta,
            names={"x": names, "x_clean": names, "v": names},
            compression=compression,
        ) as writer:
            for i in range(n):
                writer.append(
                    {
                        "t": t_np[i : i + 1],
                        "x": x_np[i : i + 1],
                        "x_clean": c_np[i : i + 1],
                        "v": v_np[i : i + 1],
                        "split": int(ids[i]),
                    }
                )
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return writer.path


def _random(genes: int, network_seed: int) -> GeneNetwork:
    return random_network(genes, network_seed)


#: (data set, its network, its defaults, what it shows)
for _dataset, _network, _defaults, _summary in (
    (
        "grn_toggle",
        toggle_switch,
        {"t_max": 8.0},
        "a bistable toggle switch with two marker genes",
    ),
    (
        "grn_repressilator",
        repressilator,
        {"t_max": 30.0},
        "the 3-gene repressilator (oscillating)",
    ),
    (
        "grn_random",
        _random,
        {"genes": 12, "network_seed": 0, "t_max": 10.0},
        "a seeded random signed network of 10-20 genes",
    ),
):
    register_dataset(
        _dataset,
        f"single-cell snapshots (u, s, true velocity) of {_summary}; counts-like noise",
        defaults=_defaults,
    )(functools.partial(grn, _dataset, _network))
