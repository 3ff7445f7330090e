r"""ΔSim: VectorWorld's NPC policy -- a hybrid (manoeuvre, acceleration, curvature) action
whose logits are shaped by a differentiable kinematic-feasibility term.

ΔSim drives the non-player vehicles of a streaming world of generated lanes. Its inputs
are generic -- the lane contract of :mod:`simsci.driving`: a
:class:`~simsci.driving.LaneSet` of 20-point centrelines with widths, speed limits and
successor links, and an :class:`~simsci.driving.AgentState` of boxes with speed and
previous controls -- so the same policy runs on :class:`~simsci.driving.RoadNetwork`
roads (:func:`~simsci.driving.lanes_from_road`), on tiles and on what a generative model
emits. It reads :func:`features` (:mod:`._features`), is trained by behaviour cloning on
the ground-truth IDM/MOBIL traffic (:mod:`._bc`: :func:`collect_bc`,
:func:`train_delta_sim`) and compared with it in closed loop (:mod:`._npc_eval`:
:func:`rollout_vs_traffic`).

>>> from simsci import driving
>>> from simsci.models import vectorworld as vw
>>> road = driving.straight_road(300.0, lanes=2)
>>> lanes = driving.lanes_from_road(road)                   # LaneSet, B = 1
>>> traffic = driving.Traffic([road], 1); traffic.reset()
>>> agents = driving.AgentState.from_traffic(traffic)       # slot 0 is the ego
>>> controlled = agents.valid.clone(); controlled[:, 0] = False
>>> policy = vw.DeltaSim(hidden=64)                          # or simsci.train.load_model(...)
>>> accel, kappa, man = policy.act(lanes, agents, controlled)
>>> agents, feats = policy.step(lanes, agents, controlled)  # act + step_agents + memory

The hybrid action and the shaping (the kinematic bicycle's limits)
-----------------------------------------------------------------
**Manoeuvre** ``m`` in :data:`MANOEUVRES` (keep lane, change left, change right,
yield/stop), then **controls conditioned on it**: the acceleration ``a`` and path
curvature ``κ`` are each a categorical over 21 *increments* around the previous control
(``a = a_prev + Δa_k + r``, :data:`ACCEL_BINS` from -4 to 4 m/s^2 per step, denser near 0;
:data:`KAPPA_BINS` from -0.1 to 0.1 1/m per step) with a continuous residual ``r`` inside the
bin (``tanh`` of a per-bin output times the half-gap to the neighbouring bin). Increments,
not absolute values, because the limits that matter are rates, the ground truth changes
its controls slowly (median jerk 0.07 m/s^3), and a fine grid near 0 resolves that. The
outer bins reach beyond the limits on purpose: without shaping the policy can pick them.

The feasible set at state ``(v, a_prev, κ_prev)`` is the box of
:func:`~simsci.driving.feasible_box` (jerk :data:`~simsci.driving.MAX_JERK`, lateral
acceleration :data:`~simsci.driving.MAX_LATERAL_ACCEL`, the absolute and rate limits of
the curvature; never empty). Each bin's logit is shaped by ``-β softplus((d - δ) / τ)``
with ``d`` the signed distance of the bin's centre outside the box (negative inside),
``δ`` half the finest bin gap and ``τ`` a fifth of that: a bin inside or on the boundary
loses < 0.01 β nats, a bin one fine gap outside loses ~5 β (β = 20: 100 nats), and the
term is smooth in the state (its gradient reaches ``v``, ``a_prev``, ``κ_prev``). The
sampled control is finally clamped into the box (the residual may cross the boundary by
less than half a bin), so with shaping every step is feasible by construction, and the
limits (|a| <= 8, κ <= 0.25, both rates) sit inside what
:func:`simsci.driving.metrics.infeasible_steps` calls infeasible (10.4 m/s^2, 0.3 1/m).
``shaping=False`` drops the penalties and the clamp.

**The slip, too.** :func:`~simsci.driving.step_agents` moves the centre along ``θ' + β``
with the slip ``β = asin(κ l_r)``, so a change of ``κ`` turns the *path* by ``Δβ`` on top
of ``v' κ dt``; at low speed a rate-feasible ``Δκ`` (0.06 1/m per step) bends the
recorded positions far beyond any feasible curvature (``Δβ / (v dt)``: 0.4 1/m at 2 m/s).
With shaping the sampled curvature is therefore also clamped into :func:`slip_box`, the
curvatures whose path turn through the next position, ``v' κ dt + asin(κ l_r) -
asin(κ_prev l_r)``, stays within ``MAX_CURVATURE`` times the mean chord ``(v + v') dt /
2`` (at least 0.1 m, the chord below which positions say nothing about curvature:
:func:`~simsci.driving.metrics.path_infeasible_steps`); the feasible box wins where the
two disagree. It is an acting-time clamp, not part of the shaping penalties (training is
unchanged): a slowly moving vehicle simply steers more gradually.

Manoeuvre logits are shaped too: a lane change needs the neighbour lane (``-10^4``
where there is none) and a feasible curvature: a change of lateral shift ``Δ`` over
``D = min(max(3 s v, 10 m), path left in the target lane)`` peaks at ``κ_need = π^2 |Δ|
/ (2 D^2)`` (a cosine S-curve), penalised by ``β softplus((κ_need / κ_max - 1) / 0.05)``.
It also needs a gap (gap acceptance, after MOBIL's safety criterion but kinematic, as
the policy does not know the drivers' IDM parameters): in the target lane, bumper gaps
to the leader and to the follower of at least ``S_MIN = 2`` m, and neither we (closing
on its leader) nor its follower (closing on us) needing to brake harder than ``B_SAFE
= 4`` m/s^2 to keep ``S_MIN`` (``Δv^2 / (2 (gap - S_MIN))``), each penalised by ``β
softplus(violation / 0.25)``. A change once started is **committed** (the ground truth
never aborts one): while the last manoeuvre is a change, the agent is still on the lane
it started from (or that lane's successor) and the target exists, every other manoeuvre
gets ``-10^4``.

The network is a per-agent MLP (features standardised by statistics of the training
data, stored as buffers) with one head for the manoeuvre and, per manoeuvre, the bin
logits and residuals of both controls (the controls are conditioned on the manoeuvre
by selecting its head). Behaviour cloning minimises the shaped cross-entropies of the
manoeuvre and of both bins plus a smooth-L1 loss on the residual of the target bin;
targets are first projected into the feasible box (a few ground-truth steps jump harder
than the jerk limit: counted by :func:`collect_bc`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from simsci.driving import (
    DT,
    MANOEUVRES,
    MAX_CURVATURE,
    AgentState,
    LaneSet,
    curvature_limit,
    feasible_box,
    manoeuvre_index,
    step_agents,
)
from simsci.models.vectorworld._checks import _check_pair, _check_shape, _tensor
from simsci.models.vectorworld._features import (
    FEATURE_DIM,
    FEATURE_NAMES,
    KEEP,
    LEFT,
    RIGHT,
    Features,
    _features,
    _gather_slots,
    _pack,
    _shape_info,
    _unpack,
)

__all__ = [
    "ACCEL_BINS",
    "KAPPA_BINS",
    "DeltaSim",
    "feasibility_penalty",
    "slip_box",
]

_FINE_A = (0.02, 0.05, 0.1, 0.2, 0.4, 0.7, 1.1, 1.7, 2.5, 4.0)
_FINE_K = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 0.015, 0.025, 0.04, 0.06, 0.1)
#: acceleration increments per step [m/s^2] (bin centres).
ACCEL_BINS = tuple(sorted({0.0, *_FINE_A, *(-x for x in _FINE_A)}))
#: curvature increments per step [1/m] (bin centres).
KAPPA_BINS = tuple(sorted({0.0, *_FINE_K, *(-x for x in _FINE_K)}))
_DELTA_A, _TAU_A = 0.01, 0.002  # half the finest gap, a fifth of it
_DELTA_K, _TAU_K = 2.5e-4, 5e-5
_BIG = 1e4  # the penalty of a manoeuvre that is ruled out (finite: no NaN in softmax)
_S_MIN, _B_SAFE = 2.0, 4.0  # m, m/s^2: lane-change gap acceptance


# ----------------------------------------------------------------------------- shaping
def _bins(values, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(values, dtype=like.dtype, device=like.device)


def feasibility_penalty(kin: torch.Tensor, *, beta: float = 20.0, dt: float = DT):
    """Per-bin penalties ``(pen_a (..., Na), pen_k (..., Nk))`` to subtract from the control
    logits: ``β softplus((d - δ) / τ)``, ``d`` the signed distance of the bin's control
    ``a_prev + Δa_k`` (``κ_prev + Δκ_k``) outside :func:`feasible_box`. Differentiable in
    ``kin``."""
    lo_a, hi_a, lo_k, hi_k = feasible_box(kin, dt)
    ca = kin[..., 1:2] + _bins(ACCEL_BINS, kin)
    ck = kin[..., 2:3] + _bins(KAPPA_BINS, kin)
    da = torch.maximum(lo_a[..., None] - ca, ca - hi_a[..., None])
    dk = torch.maximum(lo_k[..., None] - ck, ck - hi_k[..., None])
    pen_a = beta * F.softplus((da - _DELTA_A) / _TAU_A)
    pen_k = beta * F.softplus((dk - _DELTA_K) / _TAU_K)
    return pen_a, pen_k


def slip_box(kin: torch.Tensor, accel: torch.Tensor, dt: float = DT, *, min_chord: float = 0.1):
    """The curvatures ``(lo, hi)`` (...) that keep the path through the next position
    within ``MAX_CURVATURE`` (module docstring): with ``kin`` (..., 4) = (v, a_prev,
    κ_prev, length), ``accel`` the step's acceleration, ``v' = max(v + a dt, 0)``,
    ``l_r = 0.3 length`` and ``s = max((v + v') dt / 2, min_chord)``, the κ with
    ``|v' κ dt + asin(κ l_r) - asin(κ_prev l_r)| <= MAX_CURVATURE s``. The turn is
    increasing in κ, so each bound is found by bisection (30 halvings of [-1/l_r, 1/l_r]);
    always contains κ_prev when ``|κ_prev| <= MAX_CURVATURE``."""
    v, k_prev, length = kin[..., 0], kin[..., 2], kin[..., 3]
    v_new = (v + accel * dt).clamp(min=0.0)
    lr = (0.3 * length).clamp(min=1e-3)
    chord = ((v + v_new) * dt / 2).clamp(min=min_chord)
    beta_prev = torch.asin((k_prev * lr).clamp(-1.0, 1.0))

    # both bounds at once: (2, ...) = the lower bound's bisection, the upper's
    v_new, lr, beta_prev = v_new[None], lr[None], beta_prev[None]
    target = torch.stack([-MAX_CURVATURE * chord, MAX_CURVATURE * chord])
    lo, hi = -1.0 / lr.expand_as(target), 1.0 / lr.expand_as(target)
    for _ in range(30):
        mid = (lo + hi) / 2
        turn = v_new * mid * dt + torch.asin((mid * lr).clamp(-1.0, 1.0)) - beta_prev
        below = turn < target
        lo, hi = torch.where(below, mid, lo), torch.where(below, hi, mid)
    out = (lo + hi) / 2
    return out[0], out[1]


def _manoeuvre_penalty(kin, shape, beta: float):
    """(..., 4) penalties of the manoeuvres from ``shape`` (..., SHAPE_DIM) (see
    :func:`_shape_info`) and the speed in ``kin``."""
    avail, need, commit = shape[..., 0:2], shape[..., 2:4], shape[..., 4].round().long()
    kmax = curvature_limit(kin[..., 0])[..., None]
    lc = _BIG * (1 - avail) + beta * F.softplus((need / kmax - 1) / 0.05) * avail
    # gap acceptance in the target lane: room on both sides, and neither we (behind its
    # leader) nor its follower (behind us) must brake harder than B_SAFE to keep S_MIN
    g = shape[..., 5:].unflatten(-1, (2, 4))  # side, (lead gap, lead dv, fol gap, fol dv)
    closing = torch.stack([(-g[..., 1]).clamp(min=0), g[..., 3].clamp(min=0)], -1)
    gaps = torch.stack([g[..., 0], g[..., 2]], -1)
    d_req = closing.pow(2) / (2 * (gaps - _S_MIN).clamp(min=0.1))
    unsafe = F.softplus((_S_MIN - gaps) / 0.25) + F.softplus((d_req - _B_SAFE) / 0.25)
    lc = lc + beta * unsafe.sum(-1) * avail
    pen = torch.cat([torch.zeros_like(lc[..., :1]), lc, torch.zeros_like(lc[..., :1])], -1)
    idx = torch.arange(len(MANOEUVRES), device=kin.device)
    locked = (commit[..., None] > 0) & (idx != commit[..., None])
    return pen + _BIG * locked.to(pen.dtype)


# ----------------------------------------------------------------------------- the policy
class PolicyOutput(tuple):
    """``(manoeuvre (..., 4), accel_logits (..., 4, Na), accel_residual (..., 4, Na),
    kappa_logits (..., 4, Nk), kappa_residual (..., 4, Nk))``: unshaped logits per
    manoeuvre head; residuals before ``tanh``."""

    __slots__ = ()
    _fields = ("manoeuvre", "accel_logits", "accel_residual", "kappa_logits", "kappa_residual")

    def __new__(cls, *items):
        return super().__new__(cls, items)

    manoeuvre = property(lambda self: self[0])
    accel_logits = property(lambda self: self[1])
    accel_residual = property(lambda self: self[2])
    kappa_logits = property(lambda self: self[3])
    kappa_residual = property(lambda self: self[4])


def _half_gaps(c: torch.Tensor):
    gap = c[1:] - c[:-1]
    lo = torch.cat([gap[:1], gap]) / 2
    hi = torch.cat([gap, gap[-1:]]) / 2
    return lo, hi


def _gumbel_argmax(logits, generator, greedy, order=None, slots=None):
    """Gumbel-max sample of ``logits`` (B, K, ..., n). ``order`` (B, K) / ``slots`` V:
    the logits are of agents packed from V slots (:func:`~._features._pack`); the noise
    is drawn for all V slots and gathered, so a packed run draws what an unpacked one does."""
    if greedy:
        return logits.argmax(-1)
    dev = generator.device if generator is not None else logits.device
    shape = logits.shape if order is None else (logits.shape[0], slots, *logits.shape[2:])
    u = torch.rand(shape, generator=generator, device=dev, dtype=logits.dtype).to(logits.device)
    if order is not None:
        u = _gather_slots(u, order)
    u = u.clamp(1e-12, 1 - 1e-7)
    return (logits - torch.log(-torch.log(u))).argmax(-1)


class DeltaSim(nn.Module):
    """The ΔSim policy: a per-agent MLP over :func:`features` with a manoeuvre head and,
    per manoeuvre, binned acceleration / curvature increments with residuals (module
    docstring). ``shaping``: the default of :meth:`act` and of the training loss;
    ``beta``: the shaping strength [nats per unit violation scale]."""

    def __init__(
        self,
        hidden: int = 256,
        depth: int = 3,
        *,
        shaping: bool = True,
        beta: float = 20.0,
        residual_weight: float = 1.0,
        feature_dim: int = FEATURE_DIM,
    ):
        super().__init__()
        for name, val in (("hidden", hidden), ("depth", depth), ("feature_dim", feature_dim)):
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise ValueError(f"{name} must be an int >= 1, got {val!r}")
        if feature_dim != FEATURE_DIM:
            raise ValueError(
                f"feature_dim must be FEATURE_DIM = {FEATURE_DIM} (this version's features), "
                f"got {feature_dim}; the checkpoint is from another feature layout"
            )
        if not isinstance(shaping, bool):
            raise TypeError(f"shaping must be True or False, got {shaping!r}")
        if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
            raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
        self.init_args = dict(
            hidden=hidden, depth=depth, shaping=shaping, beta=float(beta),
            residual_weight=float(residual_weight), feature_dim=feature_dim,
        )  # fmt: skip
        self.shaping, self.beta, self.residual_weight = shaping, float(beta), float(residual_weight)
        layers, d = [], feature_dim
        for _ in range(depth):
            layers += [nn.Linear(d, hidden), nn.LayerNorm(hidden), nn.SiLU()]
            d = hidden
        self.trunk = nn.Sequential(*layers)
        self.na, self.nk = len(ACCEL_BINS), len(KAPPA_BINS)
        self.man_head = nn.Linear(hidden, len(MANOEUVRES))
        self.ctrl_head = nn.Linear(hidden, len(MANOEUVRES) * 2 * (self.na + self.nk))
        self.register_buffer("feat_mean", torch.zeros(feature_dim))
        self.register_buffer("feat_std", torch.ones(feature_dim))
        ca = torch.tensor(ACCEL_BINS)
        ck = torch.tensor(KAPPA_BINS)
        self.register_buffer("a_bins", ca, persistent=False)
        self.register_buffer("k_bins", ck, persistent=False)
        for n, c in (("a", ca), ("k", ck)):
            lo, hi = _half_gaps(c)
            self.register_buffer(f"{n}_lo", lo, persistent=False)
            self.register_buffer(f"{n}_hi", hi, persistent=False)

    # -- normalisation
    @torch.no_grad()
    def set_normalisation(self, x: torch.Tensor) -> None:
        """Standardise inputs by the mean and std of ``x`` (N, FEATURE_DIM) (a training set)."""
        x = _tensor(x, "x")
        if x.ndim != 2 or x.shape[1] != FEATURE_DIM:
            raise ValueError(f"x must have shape (N, {FEATURE_DIM}), got {tuple(x.shape)}")
        x = x.to(self.feat_mean)
        self.feat_mean.copy_(x.mean(0))
        self.feat_std.copy_(x.std(0).clamp(min=1e-3))

    def forward(self, features) -> PolicyOutput:
        """Unshaped distribution parameters for features ``(..., FEATURE_DIM)`` (or a
        :class:`Features`)."""
        x = features.x if isinstance(features, Features) else features
        if not isinstance(x, torch.Tensor) or x.shape[-1] != FEATURE_DIM:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"features must have shape (..., {FEATURE_DIM}), got {got}")
        x = x.to(self.feat_mean.dtype)
        h = self.trunk((x - self.feat_mean) / self.feat_std)
        m = self.man_head(h)
        c = self.ctrl_head(h).reshape(*h.shape[:-1], len(MANOEUVRES), -1)
        na, nk = self.na, self.nk
        return PolicyOutput(
            m, c[..., :na], c[..., na : 2 * na], c[..., 2 * na : 2 * na + nk], c[..., 2 * na + nk :]
        )

    # -- pieces
    def _offset(self, res, idx, which):
        u = torch.tanh(torch.gather(res, -1, idx.unsqueeze(-1)).squeeze(-1))
        lo, hi = (self.a_lo, self.a_hi) if which == "a" else (self.k_lo, self.k_hi)
        return torch.where(u < 0, u * lo[idx], u * hi[idx])

    def _targets(self, delta, which):
        c = self.a_bins if which == "a" else self.k_bins
        lo, hi = (self.a_lo, self.a_hi) if which == "a" else (self.k_lo, self.k_hi)
        delta = delta.clamp(float(c[0]), float(c[-1]))
        idx = torch.bucketize(delta.contiguous(), ((c[1:] + c[:-1]) / 2).contiguous())
        r = delta - c[idx]
        u = torch.where(r < 0, r / lo[idx], r / hi[idx]).clamp(-1, 1)
        return idx, u

    @staticmethod
    def _head(t, m):
        """Select manoeuvre ``m`` (...) of a per-manoeuvre tensor (..., 4, N)."""
        idx = m[..., None, None].expand(*m.shape, 1, t.shape[-1])
        return torch.gather(t, -2, idx).squeeze(-2)

    def shaped(self, out: PolicyOutput, kin, shape, shaping=None):
        """Shaped logits ``(manoeuvre (..., 4), accel (..., 4, Na), kappa (..., 4, Nk))``."""
        shaping = self.shaping if shaping is None else bool(shaping)
        if not shaping:
            return out.manoeuvre, out.accel_logits, out.kappa_logits
        kin = kin.to(out.manoeuvre.dtype)
        pen_a, pen_k = feasibility_penalty(kin, beta=self.beta)
        pen_m = _manoeuvre_penalty(kin, shape.to(kin.dtype), self.beta)
        return (
            out.manoeuvre - pen_m,
            out.accel_logits - pen_a.unsqueeze(-2),
            out.kappa_logits - pen_k.unsqueeze(-2),
        )

    def decode(
        self, out, kin, shape, *, manoeuvre=None, generator=None, greedy=False, shaping=None,
        order=None, slots=None,
    ):  # fmt: skip
        """Controls from the distribution: ``(accel, kappa, manoeuvre)`` (...). ``manoeuvre``
        given: the controls of that manoeuvre (teacher forcing / forcing). ``order``,
        ``slots``: agents packed from ``slots`` slots (:func:`_gumbel_argmax`)."""
        shaping = self.shaping if shaping is None else bool(shaping)
        kin = kin.to(out.manoeuvre.dtype)
        lm, la, lk = self.shaped(out, kin, shape, shaping)
        g = (generator, greedy, order, slots)
        m = _gumbel_argmax(lm, *g) if manoeuvre is None else manoeuvre
        ia = _gumbel_argmax(self._head(la, m), *g)
        ik = _gumbel_argmax(self._head(lk, m), *g)
        a = kin[..., 1] + self.a_bins[ia] + self._offset(self._head(out.accel_residual, m), ia, "a")
        k = kin[..., 2] + self.k_bins[ik] + self._offset(self._head(out.kappa_residual, m), ik, "k")
        if shaping:
            lo_a, hi_a, lo_k, hi_k = feasible_box(kin)
            a = torch.maximum(torch.minimum(a, hi_a), lo_a)
            k = torch.maximum(torch.minimum(k, hi_k), lo_k)
        return a, k, m

    # -- acting
    def act(
        self,
        lanes: LaneSet,
        agents: AgentState,
        controlled,
        *,
        generator: torch.Generator | None = None,
        greedy: bool = False,
        shaping: bool | None = None,
        force=None,
    ):
        """Controls of the ``controlled`` agents: ``(accel, kappa, manoeuvre)`` (B, V).
        Agents not controlled keep their previous controls and manoeuvre. ``force``: a
        manoeuvre name or (B, V) indices to use instead of sampling one."""
        a, k, m, _ = self._act(lanes, agents, controlled, generator, greedy, shaping, force)
        return a, k, m

    @torch.no_grad()
    def _act(
        self, lanes, agents, controlled, generator, greedy, shaping, force, dt=DT, accel_cap=None,
        idm_floor_below=None,
    ):  # fmt: skip
        lanes, controlled = _check_pair(lanes, agents, controlled)
        if controlled is None:
            raise ValueError("controlled must be a (B, V) bool mask of the agents to drive")
        # the network and the decoding run on the valid agents only, packed (_pack): a
        # streamed world's vehicle slots are mostly empty; an empty slot keeps its controls
        packed, order = _pack(agents)
        B, V = agents.shape
        pf = _features(lanes, packed, give_way=True)  # no waiting for each other
        if force is not None:
            if isinstance(force, torch.Tensor):
                f = force.to(agents.x.device).long()
                _check_shape(f, agents.shape, "force", "one manoeuvre index per agent")
                if bool(((f < 0) | (f >= len(MANOEUVRES))).any()):
                    raise ValueError(
                        f"force must hold manoeuvre indices in [0, {len(MANOEUVRES)}) "
                        f"({', '.join(MANOEUVRES)}); use manoeuvre_index(name)"
                    )
            else:
                f = torch.full(agents.shape, manoeuvre_index(force), device=agents.x.device)
            force = f if order is None else _gather_slots(f, order)
        out = self(pf.x)
        shape = _shape_info(pf)
        a, k, m = self.decode(
            out, pf.kin, shape, manoeuvre=force, generator=generator, greedy=greedy,
            shaping=shaping, order=order, slots=V,
        )  # fmt: skip
        a, k = a.to(agents.x.dtype), k.to(agents.x.dtype)
        if idm_floor_below is not None:  # only where ΔSim keeps its lane (module docstring)
            floor = _idm_floor(pf, float(idm_floor_below)).to(a)
            a = torch.where(m == KEEP, torch.maximum(a, floor), a)
        if accel_cap is not None:  # an upper bound from outside (the world's yielding)
            cap = accel_cap.to(a)
            a = torch.minimum(a, cap if order is None else _gather_slots(cap, order))
        if self.shaping if shaping is None else shaping:  # the box again, in the state's dtype
            lo_a, hi_a, lo_k, hi_k = feasible_box(pf.kin)
            a = torch.maximum(torch.minimum(a, hi_a), lo_a)
            lo_s, hi_s = slip_box(pf.kin, a, dt)  # the slip changes gently, then the box
            k = torch.maximum(torch.minimum(k, hi_s), lo_s)
            k = torch.maximum(torch.minimum(k, hi_k), lo_k)
        feats = pf
        if order is not None:  # back to the slots; empty slots keep what they had
            a, k, m = (
                torch.scatter(prev, 1, order, new)
                for prev, new in ((agents.accel, a), (agents.kappa, k), (agents.manoeuvre, m))
            )
            feats = _unpack(pf, order, V)
        controlled = controlled & agents.valid  # an empty slot has nothing to drive
        a = torch.where(controlled, a, agents.accel)
        k = torch.where(controlled, k, agents.kappa)
        m = torch.where(controlled, m, agents.manoeuvre)
        return a, k, m, feats

    def step(
        self,
        lanes: LaneSet,
        agents: AgentState,
        controlled,
        *,
        generator: torch.Generator | None = None,
        greedy: bool = False,
        shaping: bool | None = None,
        force=None,
        dt: float = DT,
        accel_cap=None,
        idm_floor_below: float | None = None,
    ):
        """One closed-loop step: :meth:`act`, then :func:`step_agents` with the policy's
        memory updated (lane association, manoeuvre, lane-change origin). ``accel_cap``
        (B, V): an upper bound on the accelerations, applied before the feasible box (so
        the controls stay feasible). ``idm_floor_below``: agents slower than this [m/s]
        that keep their lane accelerate at least as the IDM would (:func:`_idm_floor`;
        ``math.inf``: at any speed; None: ΔSim alone; the cap still wins). Returns
        ``(new AgentState, Features of the old state)``."""
        a, k, m, feats = self._act(
            lanes, agents, controlled, generator, greedy, shaping, force, dt, accel_cap,
            idm_floor_below,
        )  # fmt: skip
        origin = _next_origin(m, agents.manoeuvre, feats)
        new = step_agents(
            agents, a, k, controlled & agents.valid, dt, manoeuvre=m, lane=feats.lane, origin=origin
        )
        return new, feats

    # -- training
    def _loss(self, batch):
        x, kin, shape = batch["x"], batch["kin"], batch["shape"]
        man = batch["manoeuvre"].long()
        out = self(x)
        kin = kin.to(out.manoeuvre.dtype)
        lm, la, lk = self.shaped(out, kin, shape)
        ce_m = F.cross_entropy(lm, man)
        a_t, k_t = batch["accel"].to(kin.dtype), batch["kappa"].to(kin.dtype)
        if self.shaping:
            lo_a, hi_a, lo_k, hi_k = feasible_box(kin)
            a_t = torch.maximum(torch.minimum(a_t, hi_a), lo_a)
            k_t = torch.maximum(torch.minimum(k_t, hi_k), lo_k)
        ia, ua = self._targets(a_t - kin[:, 1], "a")
        ik, uk = self._targets(k_t - kin[:, 2], "k")
        ce_a = F.cross_entropy(self._head(la, man), ia)
        ce_k = F.cross_entropy(self._head(lk, man), ik)
        ra = torch.tanh(torch.gather(self._head(out.accel_residual, man), -1, ia[:, None])[:, 0])
        rk = torch.tanh(torch.gather(self._head(out.kappa_residual, man), -1, ik[:, None])[:, 0])
        res = F.smooth_l1_loss(ra, ua, beta=0.1) + F.smooth_l1_loss(rk, uk, beta=0.1)
        loss = ce_m + ce_a + ce_k + self.residual_weight * res
        stats = {
            "loss": loss,
            "ce_manoeuvre": ce_m,
            "ce_accel": ce_a,
            "ce_kappa": ce_k,
            "residual": res,
        }
        return stats, out, kin, shape, man, a_t, k_t

    def training_step(self, batch) -> dict:
        """Behaviour-cloning loss of a :class:`BCDataset` batch (shaped cross-entropies +
        residual smooth-L1)."""
        return self._loss(batch)[0]

    def validation_step(self, batch) -> dict:
        """The loss terms plus manoeuvre accuracy (greedy) and the control errors of the
        greedy controls under the true manoeuvre: ``accel_mae`` [m/s^2], ``kappa_mae``
        [1/m]."""
        stats, out, kin, shape, man, a_t, k_t = self._loss(batch)
        lm = self.shaped(out, kin, shape)[0]
        a, k, _ = self.decode(out, kin, shape, manoeuvre=man, greedy=True)
        stats["manoeuvre_acc"] = (lm.argmax(-1) == man).to(kin.dtype).mean()
        stats["accel_mae"] = (a - batch["accel"].to(kin.dtype)).abs().mean()
        stats["kappa_mae"] = (k - batch["kappa"].to(kin.dtype)).abs().mean()
        return stats


#: the speed limits ΔSim's features sample along the path: their columns of
#: ``Features.x`` and distances [m] ahead (0 first: the agent's own lane)
_LIMIT_COLS = tuple(i for i, n in enumerate(FEATURE_NAMES) if n.startswith("limit@"))
_LIMIT_AHEAD = tuple(float(FEATURE_NAMES[i].split("@")[1]) for i in _LIMIT_COLS)
#: the IDM of :func:`_idm_floor`: minimum gap [m], time headway [s], acceleration and
#: comfortable deceleration [m/s^2] (also the world's yielding IDM, ``IDM_YIELD``)
IDM_FLOOR = (2.0, 1.2, 1.5, 2.0)


def idm_desired_gap(v, v_lead, idm=IDM_FLOOR):
    """The IDM's desired gap ``s* = s0 + max(0, v T + v (v - v_lead) / (2 sqrt(a b)))``
    [m] at speed ``v`` behind a leader at ``v_lead`` (tensors, broadcasting; ``idm`` =
    (s0, T, a, b))."""
    s0, T, a, b = idm
    return s0 + (v * T + v * (v - v_lead) / (2 * math.sqrt(a * b))).clamp(min=0)


def _idm_floor(feats: Features, idm_floor_below: float) -> torch.Tensor:
    """(B, V) lower bounds on the accelerations: for an agent slower than
    ``idm_floor_below`` the IDM acceleration towards its desired speed behind its
    corridor leader, ``a (1 - (v / v0)^4 - (s* / gap)^2)``, ``s* = s0 + max(0, v T +
    v (v - v_lead) / (2 sqrt(a b)))``, the end of its path counting as a standing leader
    (``gap = path_left - length / 2``; lane ends and merges); -inf elsewhere (and where
    the IDM would brake). ``v0``: its lane's speed limit, lowered where a slower limit
    ahead needs it (``sqrt(v_ahead^2 + 2 b d)``, the driving data's rule). The end of
    what the features see (100 m along the path) counts as a path end, so the floor
    pushes no faster than the IDM could stop within sight (~15 m/s): counted as open
    road, it pushed NPCs across junctions it cannot see (benchmarks/README.md).
    :meth:`DeltaSim.step` applies it only where ΔSim keeps its lane: not where it yields
    (crossing traffic is not in the corridor until it enters it) or changes lanes (the
    corridor is the lane it leaves). Above ``v0`` there is no floor: slowing for a curve
    ahead is ΔSim's own.

    Why: the ground truth is IDM traffic, whose free-road law behaviour cloning
    underfits. A clone that has stopped (for a crossing vehicle, a yield) tends to stay
    stopped on generated lanes (at the data's density 22% of NPC steps, 80% of them with
    no leader within 30 m and not yielding; benchmarks/README.md, "Eleventh session"),
    and a clone placed slower than the data's speeds keeps that speed: on the shipped
    world's lanes free NPCs cruised at a median 44% of their lane's limit with a median
    acceleration of 0 ("Thirteenth session"). The world floors every NPC
    (``idm_floor_below`` = inf)."""
    a_max, b = IDM_FLOOR[2], IDM_FLOOR[3]
    v = feats.kin[..., 0]
    limit = (30.0 * feats.x[..., _LIMIT_COLS[0]]).clamp(min=1.0)  # stored / 30
    # a slower limit ahead lowers the aim to the speed from which the IDM's comfortable
    # braking b reaches it there, sqrt(v_ahead^2 + 2 b d) (the driving data's rule). The
    # limits are sampled 20-100 m along the path (0: no lane there); each counts from the
    # sample before it, as the slower lane may start anywhere between (a floor errs low)
    for d_prev, col in zip(_LIMIT_AHEAD, _LIMIT_COLS[1:]):
        ahead = 30.0 * feats.x[..., col]
        reach = torch.sqrt(ahead * ahead + 2 * b * d_prev)
        limit = torch.where(ahead > 0, torch.minimum(limit, reach.clamp(min=1.0)), limit)
    gap = feats.leader_gap[..., 0]
    s_star = idm_desired_gap(v, v + feats.leader_dv[..., 0])
    lead = torch.isfinite(gap)
    push = torch.where(lead, (s_star / gap.clamp(min=0.1)) ** 2, torch.zeros_like(gap))
    # the path's end (lane end or merge) as a standing leader, and so is the end of what
    # the features see (_GAP_CAP = 100 m along the path): the floor pushes no faster than
    # the IDM could stop within sight (about 15 m/s), as crossing traffic beyond the
    # corridor is not in it; ΔSim itself may drive faster
    end = (feats.path_left[..., 0] - 0.5 * feats.kin[..., 3]).clamp(min=0.1)
    push = torch.maximum(push, (idm_desired_gap(v, 0.0) / end) ** 2)
    idm = a_max * (1 - (v / limit) ** 4 - push)
    floor = torch.where((v < idm_floor_below) & (idm > 0), idm, torch.full_like(idm, -math.inf))
    return torch.where(feats.valid & (feats.lane >= 0), floor, torch.full_like(idm, -math.inf))


def _next_origin(m, prev, feats: Features):
    """Lane-change origin after choosing ``m``: a new change starts at the current lane,
    a continued one carries the origin forward, anything else clears it."""
    change = (m == LEFT) | (m == RIGHT)
    carry = change & (m == prev) & (feats.origin >= 0)
    return torch.where(carry, feats.origin, torch.where(change, feats.lane, -1))
