r"""ΔSim: VectorWorld's NPC policy -- a hybrid (manoeuvre, acceleration, curvature) action
whose logits are shaped by a differentiable kinematic-feasibility term.

ΔSim drives the non-player vehicles of a streaming world of generated lanes. Its inputs
are generic -- a :class:`LaneSet` of 20-point centrelines with widths, speed limits and
successor links, and an :class:`AgentState` of boxes with speed and previous controls --
so the same policy runs on :class:`~simsci.driving.RoadNetwork` roads
(:func:`lanes_from_road`), on tiles and on what a generative model emits. It is trained
by behaviour cloning on the ground-truth IDM/MOBIL traffic
(:class:`~simsci.driving.Traffic`, :func:`collect_bc`, :func:`train_delta_sim`)
and compared with it in closed loop (:func:`rollout_vs_traffic`).

>>> from simsci import driving
>>> from simsci.models.vectorworld import _npc as npc
>>> road = driving.straight_road(300.0, lanes=2)
>>> lanes = npc.lanes_from_road(road)                       # LaneSet, B = 1
>>> traffic = driving.Traffic([road], 1); traffic.reset()
>>> agents = npc.AgentState.from_traffic(traffic)           # slot 0 is the ego
>>> controlled = agents.valid.clone(); controlled[:, 0] = False
>>> policy = npc.DeltaSim(hidden=64)                         # or simsci.train.load_model(...)
>>> accel, kappa, man = policy.act(lanes, agents, controlled)
>>> agents, feats = policy.step(lanes, agents, controlled)  # act + step_agents + memory

Other lane sources: :func:`lanes_from_tiles` (a scene episode's tile lane graph in the
world frame) and :func:`crop_lanes` (the lanes near each scene's centre, e.g. the ego,
successor ids remapped: keeps L small on long roads).

The data contract (the integrator's world builds these)
--------------------------------------------------------
- :class:`LaneSet`: ``points`` (B, L, 20, 2) world frame [m] in driving direction,
  ``width`` and ``speed_limit`` (B, L), ``succ`` (B, L, S) long (-1 = none; S = 2 in the
  tile contract, any S works), ``valid`` (B, L) bool. Lanes may be pieces of any length;
  a lane shorter than 1 mm is treated as invalid. Points need not be evenly spaced: the
  geometry resamples a lane to even arc length when its spacing is off by more than 1 mm.
  Predecessors are derived from ``succ`` (one per lane, the highest id among them).
- :class:`AgentState`: ``x, y, theta, v, accel, kappa, length, width`` (B, V) float
  (``accel`` and ``kappa`` are the controls of the last step), ``valid`` (B, V) bool,
  plus the policy's memory: ``lane`` (the lane index associated last step, -1 unknown),
  ``manoeuvre`` (last manoeuvre, an index of :data:`MANOEUVRES`), ``origin`` (the lane a
  lane change started from, -1 none) and ``route`` (a per-agent key choosing among
  successors: lane ``l``'s next lane is ``succ[l, route % n_succ(l)]``). ``lane`` and
  ``origin`` index the LaneSet of the last step: a world that rebuilds its LaneSet must
  map them to the new indices (``crop_lanes`` returns each lane's source id for that)
  or reset them to -1 (ids beyond the new L are ignored).
- ``controlled`` (B, V) bool: the agents the policy drives (slot 0 may be an ego that
  something else drives).

Features (:func:`features`, vectorised over B, V and L; no loops over agents)
------------------------------------------------------------------------------
1. **Association.** Candidate lanes: the ``K = 10`` lanes whose nearest *point* is
   nearest (one batched matrix product of squared distances in a local frame), then
   the exact projection onto each candidate's 19 segments (distance, arc length ``s``,
   signed lateral offset, left positive, and tangent). The agent's lane is the
   candidate minimising ``distance + 4 m (1 - cos heading error) - 0.5 m [the lane of
   last step or its chosen successor]`` among those within 4 m whose heading agrees
   within 60 deg (hysteresis keeps the lane through forks and in the middle of lane
   changes; no such lane: the agent is off the lanes and its lane features are 0).
2. **Neighbours, found geometrically** (no left/right links in the contract): a
   candidate whose tangent agrees within 25 deg, beside which the agent lies (its
   projection at most 1 m beyond the candidate's ends) and whose centre lies
   ``(w_cur + w_cand) / 2`` to the left (right) within 40 %: the lateral position of a
   candidate's centre relative to the current one is ``offset_cur - offset_cand``.
3. **Corridors.** For the current, left and right lanes, the path from 40 m behind to
   100 m ahead of the agent's projection, following ``succ`` (route key) forward and the
   derived predecessor backward, sampled every 4 m, plus the pure-pursuit look-ahead
   point at ``clamp(0.8 v + 4, 6, 25)`` m (the ground truth's rule). Features per
   corridor, in the agent frame (x forward, y left): reference points at 4, 8, 16, 24, 40
   m (x, y, heading), the pursuit curvature ``2 y / d^2`` to the look-ahead point, speed
   limits along the path and the length of path left (a path that ends is a stopped
   obstacle there: lane ends and merges).
4. **Leaders and followers** in each corridor: every other agent is projected onto the
   corridor's sample nearest to it; it is *in* the corridor when its centre is within
   ``w / 2 + width_j / 2 - 0.3`` m of the centreline (its body reaches 0.3 m into the
   lane: straddlers count, so merging and crossing vehicles are seen where they enter
   the lane). The nearest one ahead (behind) gives the bumper gap ``Δs - (l_i + l_j)/2``
   (negative: alongside), its speed along the path minus the agent's, its acceleration.
5. **Context**: the four nearest other agents (position, heading, speed in the agent
   frame), for crossing traffic the corridors do not show (junction yielding).

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

The feasible set at state ``(v, a_prev, κ_prev)`` is a box (:func:`feasible_box`):
``a ∈ [lo_a, hi_a] = clamp(a_prev ∓ J dt, -MAX_BRAKE, MAX_ACCEL)`` (jerk ``J =``
:data:`MAX_JERK`), and with ``v_hi = max(v + hi_a dt, 0)``,
``κ_max = min(MAX_CURVATURE, A_LAT / v_hi^2)`` (``A_LAT =`` :data:`MAX_LATERAL_ACCEL`),
``κ ∈ clamp(κ_prev ∓ MAX_CURVATURE_RATE dt, -κ_max, κ_max)``. Clamping the rate window
into the absolute box keeps it non-empty from any state (the absolute limits win).
Each bin's logit is shaped by ``-β softplus((d - δ) / τ)`` with ``d`` the signed distance
of the bin's centre outside the box (negative inside), ``δ`` half the finest bin gap and
``τ`` a fifth of that: a bin inside or on the boundary loses < 0.01 β nats, a bin one
fine gap outside loses ~5 β (β = 20: 100 nats), and the term is smooth in the state (its
gradient reaches ``v``, ``a_prev``, ``κ_prev``). The sampled control is finally clamped
into the box (the residual may cross the boundary by less than half a bin), so with
shaping every step is feasible by construction, and the limits (|a| <= 8, κ <= 0.25,
both rates) sit inside what :func:`simsci.driving.metrics.infeasible_steps` calls
infeasible (10.4 m/s^2, 0.3 1/m). ``shaping=False`` drops the penalties and the clamp.

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

Behaviour-cloning labels (:func:`collect_bc`)
---------------------------------------------
From :class:`~simsci.driving.Traffic` with an autopilot ego, on
:func:`lanes_from_road` of its roads (cropped around each ego), one sample per non-ego
vehicle present before and after a step: features of the state before, targets ``a =
state.accel``, ``κ = state.kappa`` after the step (the realised controls, which
:func:`step_agents` reproduces exactly). Manoeuvre: **change left/right** while the
vehicle is changing lanes after the step (``from_lane >= 0``) and our association is
not yet its target lane (so the label flips to keep where the association flips: the
two agree with the corridors the features describe); the direction is the side of the
target lane (the sign of the offset from it: negative, left). **Yield/stop** otherwise
when the vehicle brakes harder than 1 m/s^2 or is below 1 m/s after the step; **keep**
the rest. Samples the shaping rules out (a change label where we see no neighbour, or
one that breaks commitment) are dropped and counted. The successor choice (route key)
follows the vehicle's next lane in the ground truth.

Rollouts (:func:`rollout_vs_traffic`)
-------------------------------------
Ground truth and ΔSim start from one :class:`Traffic` state (after a warm-up). The ego
is **replayed** from the ground truth in both (ΔSim's NPCs see the same ego); ΔSim drives
every non-ego vehicle present at the start while its slot holds the same vehicle in
the ground truth. A slot whose vehicle the ground truth removes or replaces (despawn,
spawn) is replayed from the ground truth from then on and no longer compared, so only
vehicles present at the start are compared, up to their despawn.

Closed-loop refinement is limited to the data: plain behaviour cloning drifts off the
lane in closed loop (the logs never leave the centreline), so :func:`collect_bc` injects
noise into the ground truth (DART) and records its corrections. No policy-gradient or
differentiable-simulation fine-tuning is done here.

Integration: ``theta += v_new κ dt`` with ``v_new = max(v + a dt, 0)``, then the centre
moves along ``theta_new + β``, ``β = asin(κ l_r)``, ``l_r = 0.3 length`` (the slip angle of
a bicycle with the centre midway between axles and wheelbase 0.6 length): exactly the
semi-implicit Euler of :meth:`Traffic.step` with its realised controls.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from simsci.driving import (
    DT,
    MAX_ACCEL,
    MAX_BRAKE,
    MAX_CURVATURE,
    MAX_CURVATURE_RATE,
)
from simsci.errors import unknown_name

__all__ = [
    "ACCEL_BINS",
    "FEATURE_DIM",
    "FEATURE_NAMES",
    "KAPPA_BINS",
    "LANE_POINTS",
    "MANOEUVRES",
    "MAX_JERK",
    "MAX_LATERAL_ACCEL",
    "SHAPE_DIM",
    "AgentState",
    "BCDataset",
    "DeltaSim",
    "Features",
    "LaneSet",
    "collate_bc",
    "collect_bc",
    "crop_lanes",
    "feasibility_penalty",
    "feasible_box",
    "features",
    "lanes_from_road",
    "lanes_from_tiles",
    "manoeuvre_index",
    "rollout_vs_traffic",
    "step_agents",
    "train_delta_sim",
]

MANOEUVRES = ("keep", "left", "right", "yield")
KEEP, LEFT, RIGHT, YIELD = range(4)
LANE_POINTS = 20
MAX_JERK = 25.0  # m/s^3: covers 99.9 % of the ground truth's steps (IDM jumps aside)
MAX_LATERAL_ACCEL = 8.0  # m/s^2: covers 99.99 % of the ground truth's steps
_FINE_A = (0.02, 0.05, 0.1, 0.2, 0.4, 0.7, 1.1, 1.7, 2.5, 4.0)
_FINE_K = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 0.015, 0.025, 0.04, 0.06, 0.1)
#: acceleration increments per step [m/s^2] (bin centres).
ACCEL_BINS = tuple(sorted({0.0, *_FINE_A, *(-x for x in _FINE_A)}))
#: curvature increments per step [1/m] (bin centres).
KAPPA_BINS = tuple(sorted({0.0, *_FINE_K, *(-x for x in _FINE_K)}))
_DELTA_A, _TAU_A = 0.01, 0.002  # half the finest gap, a fifth of it
_DELTA_K, _TAU_K = 2.5e-4, 5e-5
_BIG = 1e4  # the penalty of a manoeuvre that is ruled out (finite: no NaN in softmax)

# association and geometry
_K_CAND = 10
_ASSOC_MAX = 4.0
_ASSOC_COS = 0.5  # 60 deg
_NEIGH_COS = 0.9  # 25 deg
_HEAD_W = 4.0
_BONUS = 0.5
_HOPS = 8
_GRID = tuple(float(x) for x in range(-40, 101, 4))  # path samples [m], 36
_G0 = _GRID.index(0.0)
_REF = (4.0, 8.0, 16.0, 24.0, 40.0)
_REF_IDX = tuple(_GRID.index(r) for r in _REF)
_LIM = (0.0, 20.0, 40.0, 60.0, 100.0)
_LIM_IDX = tuple(_GRID.index(r) for r in _LIM)
_N_CONTEXT = 4
_LC_TIME, _LC_MIN = 3.0, 10.0  # lane-change length D = max(3 s v, 10 m)
_GAP_CAP = 100.0


def _feature_names() -> tuple[str, ...]:
    own = ["v", "accel", "kappa", "length", "width"]
    own += [f"prev_{m}" for m in MANOEUVRES] + ["committed"]
    cur = ["lane_found", "offset", "heading_sin", "heading_cos", "lane_width", "v_over_limit"]
    cur += [f"limit@{int(d)}" for d in _LIM]
    ref = [f"{c}@{int(d)}" for c in ("ref_x", "ref_y", "ref_sin") for d in _REF]
    cur += ref + ["pursuit_kappa", "path_left", "pursuit_minus_kappa"]
    side = []
    for s in ("left", "right"):
        side += [f"{s}_{n}" for n in ("avail", "offset", "heading_sin", "width", "limit")]
        side += [f"{s}_{n}" for n in ref] + [f"{s}_{n}" for n in ("pursuit_kappa", "path_left")]
        side += [f"{s}_need_ratio", f"{s}_pursuit_minus_kappa"]
    corr = []
    for c in ("cur", "left", "right"):
        corr += [
            f"{c}_{n}"
            for n in (
                "lead_found", "lead_gap", "lead_inv_gap", "lead_dv", "lead_accel",
                "fol_found", "fol_gap", "fol_dv",
            )
        ]  # fmt: skip
    ctx = [
        f"near{k}_{n}" for k in range(_N_CONTEXT) for n in ("found", "x", "y", "cos", "sin", "v")
    ]
    return tuple(own + cur + side + corr + ctx)


#: names of the columns of ``Features.x`` (see the module docstring).
FEATURE_NAMES = _feature_names()
FEATURE_DIM = len(FEATURE_NAMES)


def manoeuvre_index(name) -> int:
    """The index of a manoeuvre name in :data:`MANOEUVRES` (an int in range passes)."""
    if isinstance(name, (int, np.integer)) and not isinstance(name, bool):
        if 0 <= int(name) < len(MANOEUVRES):
            return int(name)
        raise ValueError(
            f"manoeuvre index must lie in [0, {len(MANOEUVRES)}) ({', '.join(MANOEUVRES)}), "
            f"got {name}"
        )
    if not isinstance(name, str) or name not in MANOEUVRES:
        raise unknown_name("manoeuvre", str(name), MANOEUVRES)
    return MANOEUVRES.index(name)


# ----------------------------------------------------------------------------- inputs
def _tensor(x, name: str, *, like=None, dtype=None) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.as_tensor(np.asarray(x))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be a tensor or an array, got {type(x).__name__}") from exc
    if like is not None:
        x = x.to(device=like.device)
    if dtype is not None:
        x = x.to(dtype)
    return x


def _check_shape(t: torch.Tensor, shape: tuple, name: str, what: str) -> None:
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} ({what}), got {tuple(t.shape)}")


@dataclasses.dataclass
class LaneSet:
    """Lanes of ``B`` scenes: ``points`` (B, L, 20, 2) world frame [m] in driving
    direction, ``width``, ``speed_limit`` (B, L), ``succ`` (B, L, S) long (-1 = none),
    ``valid`` (B, L) bool. Validated on construction; float fields share ``points``'
    dtype and device."""

    points: torch.Tensor
    width: torch.Tensor
    speed_limit: torch.Tensor
    succ: torch.Tensor
    valid: torch.Tensor
    _geo: dict | None = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self):
        p = _tensor(self.points, "LaneSet.points")
        if not p.is_floating_point():
            p = p.to(torch.get_default_dtype())
        if p.ndim != 4 or p.shape[-1] != 2 or p.shape[-2] < 2:
            raise ValueError(
                f"LaneSet.points must have shape (B, L, {LANE_POINTS}, 2) (B scenes, L lanes, "
                f"centreline points), got {tuple(p.shape)}"
            )
        B, L = p.shape[:2]
        self.points = p
        for name in ("width", "speed_limit"):
            t = _tensor(getattr(self, name), f"LaneSet.{name}", like=p, dtype=p.dtype)
            _check_shape(t, (B, L), f"LaneSet.{name}", "one value per lane")
            setattr(self, name, t)
        s = _tensor(self.succ, "LaneSet.succ", like=p)
        if s.is_floating_point() or s.dtype == torch.bool:
            raise TypeError(f"LaneSet.succ must hold integer lane ids, got dtype {s.dtype}")
        if s.ndim != 3 or tuple(s.shape[:2]) != (B, L) or s.shape[2] < 1:
            raise ValueError(
                f"LaneSet.succ must have shape ({B}, {L}, S) (successor lane ids, -1 padded), "
                f"got {tuple(s.shape)}"
            )
        s = s.long()
        if s.numel() and (int(s.min()) < -1 or int(s.max()) >= L):
            raise ValueError(
                f"LaneSet.succ must hold lane ids in [0, {L}) or -1, got values in "
                f"[{int(s.min())}, {int(s.max())}]"
            )
        self.succ = s
        v = _tensor(self.valid, "LaneSet.valid", like=p)
        if v.dtype != torch.bool:
            raise TypeError(f"LaneSet.valid must be a bool tensor, got dtype {v.dtype}")
        _check_shape(v, (B, L), "LaneSet.valid", "one flag per lane")
        self.valid = v
        m = v[..., None, None].expand_as(p)
        if bool((~torch.isfinite(p) & m).any()) or bool(
            (v & ~(torch.isfinite(self.width) & torch.isfinite(self.speed_limit))).any()
        ):
            raise ValueError(
                "LaneSet has NaN or inf in a valid lane (points, width or speed_limit); fix "
                "them or mark the lane invalid"
            )
        if bool((v & (self.width <= 0)).any()):
            raise ValueError("LaneSet.width must be > 0 for valid lanes")
        self._geo = None

    @property
    def num_scenes(self) -> int:
        return int(self.points.shape[0])

    @property
    def num_lanes(self) -> int:
        return int(self.points.shape[1])

    def to(self, device=None, dtype=None) -> LaneSet:
        """A copy on ``device`` with float fields in ``dtype``."""
        f = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731
        return LaneSet(
            f(self.points), f(self.width), f(self.speed_limit),
            self.succ.to(device), self.valid.to(device),
        )  # fmt: skip

    def expand(self, n: int) -> LaneSet:
        """The lanes of a one-scene set repeated for ``n`` scenes (views, no copies)."""
        if self.num_scenes != 1:
            raise ValueError(f"expand needs a LaneSet with B = 1, got B = {self.num_scenes}")
        e = lambda t: t.expand(n, *t.shape[1:])  # noqa: E731
        return LaneSet(
            e(self.points), e(self.width), e(self.speed_limit), e(self.succ), e(self.valid)
        )

    def geometry(self) -> dict:
        """Derived tensors, computed once: even-resampled points, segment tangents,
        lengths, predecessor, successor counts (flattened over (B, L) for gathers)."""
        if self._geo is None:
            self._geo = _lane_geometry(self)
        return self._geo


def _resample_even(pts: torch.Tensor, n: int) -> torch.Tensor:
    """Polylines (N, P, 2) resampled at ``n`` evenly spaced arc lengths (N, n, 2)."""
    seg = (pts[:, 1:] - pts[:, :-1]).norm(dim=-1)
    cum = torch.cat([torch.zeros_like(seg[:, :1]), seg.cumsum(1)], 1)
    total = cum[:, -1:].clamp(min=1e-12)
    tgt = torch.linspace(0, 1, n, dtype=pts.dtype, device=pts.device)[None] * total
    i = torch.searchsorted(cum.contiguous(), tgt.contiguous(), right=True) - 1
    i = i.clamp(0, pts.shape[1] - 2)
    c0 = torch.gather(cum, 1, i)
    sl = torch.gather(seg, 1, i).clamp(min=1e-12)
    u = ((tgt - c0) / sl).clamp(0, 1)[..., None]
    p0 = torch.gather(pts, 1, i[..., None].expand(-1, -1, 2))
    p1 = torch.gather(pts, 1, (i + 1)[..., None].expand(-1, -1, 2))
    return p0 + u * (p1 - p0)


def _lane_geometry(lanes: LaneSet) -> dict:
    pts = lanes.points
    B, L, P = pts.shape[:3]
    flat = pts.reshape(B * L, P, 2)
    seg = (flat[:, 1:] - flat[:, :-1]).norm(dim=-1)
    length = seg.sum(1)
    even = length[:, None] / (P - 1)
    uneven = ((seg - even).abs() > 1e-3).any(1) & (length > 0)
    if bool(uneven.any()):
        flat = flat.clone()
        flat[uneven] = _resample_even(flat[uneven], P)
    valid = lanes.valid.reshape(-1) & (length > 1e-3)
    d = flat[:, 1:] - flat[:, :-1]
    dl = d.norm(dim=-1, keepdim=True)
    tan = torch.where(dl > 1e-9, d / dl.clamp(min=1e-12), torch.zeros_like(d))
    tan[..., 0] = torch.where(dl[..., 0] > 1e-9, tan[..., 0], torch.ones_like(tan[..., 0]))
    succ = lanes.succ.reshape(B * L, -1)
    base = (torch.arange(B, device=pts.device) * L).repeat_interleave(L)[:, None]
    succ_ok = (succ >= 0) & valid[(succ.clamp(min=0) + base)]
    succ = torch.where(succ_ok, succ, torch.full_like(succ, -1))
    # compact the successors to the front, count them
    order = torch.sort((~succ_ok).to(torch.int8), dim=1, stable=True).indices
    succ = torch.gather(succ, 1, order)
    n_succ = succ_ok.sum(1)
    # one predecessor per lane (the highest id among them)
    pred = torch.full((B * L,), -1, dtype=torch.long, device=pts.device)
    src = torch.arange(B * L, device=pts.device)[:, None].expand_as(succ) - base
    tgt = (succ + base).clamp(min=0)
    ok = succ >= 0
    pred.scatter_reduce_(0, tgt[ok], src[ok], reduce="amax")
    return {
        "B": B, "L": L, "P": P, "pts": flat, "tan": tan, "length": length,
        "valid": valid, "succ": succ, "n_succ": n_succ, "pred": pred,
        "width": lanes.width.reshape(-1), "limit": lanes.speed_limit.reshape(-1),
    }  # fmt: skip


def lanes_from_road(road, device=None, dtype=torch.float32, *, max_succ: int = 2) -> LaneSet:
    """A :class:`LaneSet` with B = 1 of a :class:`~simsci.driving.RoadNetwork`:
    every lane resampled to 20 points evenly in arc length (lanes are <= 100 m: <= 5.3 m
    apart), lane ids kept (index ``l`` is the road's lane ``l``). ``max_succ``: successors
    kept per lane (the road has up to 4; the tile contract 2)."""
    if not hasattr(road, "points") or not hasattr(road, "num_points"):
        raise TypeError(f"road must be a RoadNetwork, got {type(road).__name__}")
    if isinstance(max_succ, bool) or not isinstance(max_succ, int) or max_succ < 1:
        raise ValueError(f"max_succ must be an int >= 1, got {max_succ!r}")
    L = road.num_lanes
    out = np.zeros((L, LANE_POINTS, 2))
    for lane in range(L):
        p = road.points[lane, : road.num_points[lane]]
        seg = np.linalg.norm(np.diff(p, axis=0), axis=1)
        cum = np.concatenate([[0.0], np.cumsum(seg)])
        t = np.linspace(0.0, cum[-1], LANE_POINTS)
        out[lane, :, 0] = np.interp(t, cum, p[:, 0])
        out[lane, :, 1] = np.interp(t, cum, p[:, 1])
    succ = np.full((L, max_succ), -1, dtype=np.int64)
    k = min(max_succ, road.succ.shape[1])
    succ[:, :k] = road.succ[:, :k]
    kw = dict(device=device, dtype=dtype)
    return LaneSet(
        torch.as_tensor(out, **kw)[None],
        torch.as_tensor(road.width, **kw)[None],
        torch.as_tensor(road.speed_limit, **kw)[None],
        torch.as_tensor(succ, device=device)[None],
        torch.ones(1, L, dtype=torch.bool, device=device),
    )


def lanes_from_tiles(
    graph: dict, tile_pose, *, max_succ: int = 2, device=None, dtype=torch.float32
) -> LaneSet:
    """A :class:`LaneSet` with B = 1 of a scene episode's lane graph (``read_scene``'s
    ``graph``: ``nodes`` with tile-frame ``points`` (n, 20, 2), ``tile``, ``width``,
    ``speed_limit``; ``edges`` ``index`` (E, 2), ``type`` (E,) into ``EDGE_TYPES``) and
    the episode's ``tile_pose`` (T, 3): pieces in the world frame, ``succ`` from the
    graph's succ edges (the first ``max_succ`` per piece), node ids kept."""
    from simsci.driving.metrics import EDGE_TYPES, tile_to_world

    try:
        nodes, edges = graph["nodes"], graph["edges"]
        pts, tile = np.asarray(nodes["points"], np.float64), np.asarray(nodes["tile"], np.int64)
        width, limit = np.asarray(nodes["width"]), np.asarray(nodes["speed_limit"])
        index, etype = np.asarray(edges["index"], np.int64), np.asarray(edges["type"], np.int64)
    except (KeyError, TypeError) as exc:
        raise TypeError(
            "graph must be a scene lane graph: {'nodes': {points, tile, width, speed_limit}, "
            f"'edges': {{index, type}}}} (read_scene(...)['graph']); got {exc!r}"
        ) from exc
    pose = np.asarray(tile_pose, np.float64)
    n = len(pts)
    if pts.shape != (n, LANE_POINTS, 2) or n == 0:
        raise ValueError(
            f"graph nodes/points must have shape (n >= 1, {LANE_POINTS}, 2), got {pts.shape}"
        )
    if pose.ndim != 2 or pose.shape[1] != 3 or tile.min() < 0 or tile.max() >= len(pose):
        raise ValueError(
            f"tile_pose must have shape (T, 3) with a row for every node tile (0..{tile.max()}), "
            f"got {pose.shape}"
        )
    world = tile_to_world(pts, pose[tile][:, None])
    succ = np.full((n, max_succ), -1, np.int64)
    fill = np.zeros(n, np.int64)
    for a, b in index[etype == EDGE_TYPES.index("succ")]:
        if fill[a] < max_succ:
            succ[a, fill[a]] = b
            fill[a] += 1
    kw = dict(device=device, dtype=dtype)
    return LaneSet(
        torch.as_tensor(world, **kw)[None], torch.as_tensor(width, **kw)[None],
        torch.as_tensor(limit, **kw)[None], torch.as_tensor(succ, device=device)[None],
        torch.ones(1, n, dtype=torch.bool, device=device),
    )  # fmt: skip


def crop_lanes(lanes: LaneSet, centre, radius: float, max_lanes: int | None = None):
    """Per scene, the lanes that come within ``radius`` m of ``centre`` (B, 2) (all of
    them, or the ``max_lanes`` nearest), successor ids remapped (a successor that is
    cropped away becomes -1). A one-scene ``lanes`` is used for every centre.

    Returns ``(LaneSet (B, L', ...), source (B, L') long)``: ``source[b, i]`` is the lane's
    index in ``lanes`` (-1 for padding)."""
    c = _tensor(centre, "centre", like=lanes.points, dtype=lanes.points.dtype)
    if c.ndim != 2 or c.shape[1] != 2:
        raise ValueError(f"centre must have shape (B, 2), got {tuple(c.shape)}")
    B = c.shape[0]
    if lanes.num_scenes not in (1, B):
        raise ValueError(f"lanes have B = {lanes.num_scenes}; centre needs B = 1 or that many")
    if lanes.num_scenes == 1 and B > 1:
        lanes = lanes.expand(B)
    L = lanes.num_lanes
    d2 = (lanes.points - c[:, None, None]).pow(2).sum(-1).amin(-1)  # B, L
    keep = lanes.valid & (d2 <= float(radius) ** 2)
    n = int(keep.sum(1).max()) if keep.numel() else 0
    if max_lanes is not None:
        n = min(n, int(max_lanes))
    n = max(n, 1)
    score = torch.where(keep, d2, torch.full_like(d2, math.inf))
    if max_lanes is None:
        # keep the original order (stable): kept lanes first
        order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices[:, :n]
    else:
        order = torch.topk(score, n, dim=1, largest=False).indices
        order = torch.sort(order, dim=1).values
    kept = torch.gather(keep, 1, order)
    source = torch.where(kept, order, torch.full_like(order, -1))
    remap = torch.full((B, L), -1, dtype=torch.long, device=c.device)
    remap.scatter_(1, order, torch.where(kept, torch.arange(n, device=c.device).expand(B, n), -1))

    def g(t):
        return torch.gather(
            t, 1, order.reshape(B, n, *([1] * (t.ndim - 2))).expand(B, n, *t.shape[2:])
        )

    succ = g(lanes.succ)
    succ = torch.where(
        succ >= 0, torch.gather(remap, 1, succ.clamp(min=0).reshape(B, -1)).reshape(succ.shape), -1
    )
    out = LaneSet(g(lanes.points), g(lanes.width), g(lanes.speed_limit), succ, kept)
    return out, source


@dataclasses.dataclass
class AgentState:
    """Agents of ``B`` scenes with ``V`` slots: ``x, y`` [m], ``theta`` [rad], ``v``
    [m/s], ``accel`` [m/s^2] and ``kappa`` [1/m] (the last controls), ``length``,
    ``width`` [m], all (B, V) float; ``valid`` (B, V) bool; the policy's memory
    ``lane``, ``manoeuvre``, ``origin``, ``route`` (B, V) long (defaults -1, keep, -1, 0).
    Invalid entries may hold anything (NaN too)."""

    x: torch.Tensor
    y: torch.Tensor
    theta: torch.Tensor
    v: torch.Tensor
    accel: torch.Tensor
    kappa: torch.Tensor
    length: torch.Tensor
    width: torch.Tensor
    valid: torch.Tensor
    lane: torch.Tensor | None = None
    manoeuvre: torch.Tensor | None = None
    origin: torch.Tensor | None = None
    route: torch.Tensor | None = None

    _FLOATS = ("x", "y", "theta", "v", "accel", "kappa", "length", "width")
    _LONGS = ("lane", "manoeuvre", "origin", "route")

    def __post_init__(self):
        x = _tensor(self.x, "AgentState.x")
        if not x.is_floating_point():
            x = x.to(torch.get_default_dtype())
        if x.ndim != 2:
            raise ValueError(f"AgentState fields must have shape (B, V), got x {tuple(x.shape)}")
        shape = tuple(x.shape)
        for name in self._FLOATS:
            t = _tensor(getattr(self, name), f"AgentState.{name}", like=x, dtype=x.dtype)
            _check_shape(t, shape, f"AgentState.{name}", "scenes x vehicle slots, like x")
            setattr(self, name, t)
        v = _tensor(self.valid, "AgentState.valid", like=x)
        if v.dtype != torch.bool:
            raise TypeError(f"AgentState.valid must be a bool tensor, got dtype {v.dtype}")
        _check_shape(v, shape, "AgentState.valid", "scenes x vehicle slots, like x")
        self.valid = v
        defaults = {"lane": -1, "manoeuvre": KEEP, "origin": -1, "route": 0}
        for name in self._LONGS:
            t = getattr(self, name)
            if t is None:
                t = torch.full(shape, defaults[name], dtype=torch.long, device=x.device)
            t = _tensor(t, f"AgentState.{name}", like=x)
            if t.is_floating_point() or t.dtype == torch.bool:
                raise TypeError(f"AgentState.{name} must hold integers, got dtype {t.dtype}")
            _check_shape(t, shape, f"AgentState.{name}", "scenes x vehicle slots, like x")
            setattr(self, name, t.long())
        m = self.manoeuvre
        bad = v & ((m < 0) | (m >= len(MANOEUVRES)))
        if bool(bad.any()):
            i = tuple(int(k) for k in bad.nonzero()[0])
            raise ValueError(
                f"AgentState.manoeuvre must index MANOEUVRES {MANOEUVRES} (0..3), got "
                f"{int(m[i])} at {i}; use manoeuvre_index(name)"
            )
        stack = torch.stack([getattr(self, n) for n in self._FLOATS], -1)
        bad = v & ~torch.isfinite(stack).all(-1)
        if bool(bad.any()):
            i = tuple(int(k) for k in bad.nonzero()[0])
            names = [n for n, ok in zip(self._FLOATS, torch.isfinite(stack[i])) if not ok]
            raise ValueError(
                f"AgentState has NaN or inf in {int(bad.sum())} valid agents (first at "
                f"(scene, slot) {i}: {', '.join(names)}); fix them or mark them invalid"
            )
        if bool((v & ((self.length <= 0) | (self.width <= 0) | (self.v < 0))).any()):
            raise ValueError("AgentState needs length > 0, width > 0 and v >= 0 for valid agents")

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.x.shape)

    def replace(self, **changes) -> AgentState:
        """A copy with some fields replaced (validated again)."""
        return dataclasses.replace(self, **changes)

    def agents(self) -> torch.Tensor:
        """``(B, V, 7)`` rows of ``AGENT_FEATURES`` (x, y, speed, cos, sin, length, width)."""
        return torch.stack(
            [self.x, self.y, self.v, torch.cos(self.theta), torch.sin(self.theta),
             self.length, self.width], -1,
        )  # fmt: skip

    @classmethod
    def from_traffic(cls, traffic, dtype=None) -> AgentState:
        """The vehicles of a :class:`~simsci.driving.Traffic` (slot 0 the ego);
        ``route`` picks each vehicle's next lane in the ground truth."""
        st = traffic.state
        if st is None:
            raise RuntimeError("call traffic.reset() before AgentState.from_traffic")
        dt = dtype or st.x.dtype
        f = lambda t: t.detach().clone().to(dt)  # noqa: E731
        pool = traffic.pool
        net = traffic.net[:, None].expand_as(st.lane)
        succ = pool.succ[net, st.lane.clamp(min=0)]  # B, V, 4
        hit = succ == st.nxt[..., :1]
        route = torch.where(hit.any(-1), hit.to(torch.int8).argmax(-1), 0).long()
        nan = torch.full_like(f(st.x), math.nan)
        valid = st.valid.clone()
        g = lambda t: torch.where(valid, f(t), nan)  # noqa: E731
        return cls(
            g(st.x), g(st.y), g(st.theta), g(st.v), g(st.accel), g(st.kappa),
            g(st.length), g(st.width), valid, route=route,
        )  # fmt: skip


def _check_pair(lanes, agents, controlled=None):
    if not isinstance(lanes, LaneSet):
        raise TypeError(f"lanes must be a LaneSet, got {type(lanes).__name__}")
    if not isinstance(agents, AgentState):
        raise TypeError(f"agents must be an AgentState, got {type(agents).__name__}")
    B, V = agents.shape
    if lanes.num_scenes not in (1, B):
        raise ValueError(
            f"lanes have B = {lanes.num_scenes} scenes, agents B = {B}: give one LaneSet "
            "scene per agent scene (or B = 1 shared)"
        )
    if lanes.num_scenes == 1 and B > 1:
        lanes = lanes.expand(B)
    if lanes.points.device != agents.x.device:
        raise ValueError(
            f"lanes are on {lanes.points.device}, agents on {agents.x.device}; move one"
        )
    if controlled is not None:
        c = _tensor(controlled, "controlled", like=agents.x)
        if c.dtype != torch.bool:
            raise TypeError(f"controlled must be a bool tensor, got dtype {c.dtype}")
        _check_shape(c, (B, V), "controlled", "one flag per agent slot")
        controlled = c & agents.valid
    return lanes, controlled


# ----------------------------------------------------------------------------- features
@dataclasses.dataclass
class Features:
    """What :func:`features` computes. ``x`` (B, V, FEATURE_DIM) (columns
    :data:`FEATURE_NAMES`, 0 for invalid agents); ``kin`` (B, V, 4) = (v, a_prev, κ_prev,
    length), taken from the state (differentiable); the association ``lane`` (B, V)
    (-1: none), ``offset`` [m, left +], ``heading_error`` [rad]; ``neighbour`` (B, V, 2)
    left/right lane ids (-1: none); ``need`` (B, V, 2) the curvature a change to each
    side needs [1/m]; ``commit`` (B, V) the committed change (0 none, 1 left, 2 right);
    ``origin`` (B, V) the change's start lane carried forward; corridor quantities
    (B, V, 3) for the current, left, right lanes: ``leader_gap``, ``leader_dv``,
    ``follower_gap``, ``follower_dv`` [m, m/s] (inf/0 where none) and ``path_left`` [m].
    """

    x: torch.Tensor
    kin: torch.Tensor
    lane: torch.Tensor
    offset: torch.Tensor
    heading_error: torch.Tensor
    neighbour: torch.Tensor
    need: torch.Tensor
    commit: torch.Tensor
    origin: torch.Tensor
    leader_gap: torch.Tensor
    leader_dv: torch.Tensor
    follower_gap: torch.Tensor
    follower_dv: torch.Tensor
    path_left: torch.Tensor
    valid: torch.Tensor


def _next_lane(geo, bflat, lane, key):
    """The chosen successor of ``lane`` (any shape; ``bflat`` its scene offset b * L)."""
    idx = bflat + lane.clamp(min=0)
    n = geo["n_succ"][idx]
    pick = torch.remainder(key, n.clamp(min=1))
    nxt = torch.gather(geo["succ"][idx], -1, pick.unsqueeze(-1)).squeeze(-1)
    return torch.where((lane >= 0) & (n > 0), nxt, torch.full_like(nxt, -1))


def _chain(geo, bflat, lane, s, key, hops_ahead: int = _HOPS, hops_behind: int = 4):
    """The lanes around arc length ``s`` of ``lane`` (...): the lane, its chosen
    successors ahead and its predecessors behind, ``(lanes, start, end)`` (..., C) with
    start/end the arc lengths of each lane relative to the point, ascending (-1 lanes
    where a chain stops, their starts pushed out so searches never land on them)."""
    length, pred = geo["length"], geo["pred"]
    ln0 = length[bflat + lane.clamp(min=0)]
    lanes, starts, ends = [lane], [-s], [ln0 - s]
    cur, st, en = lane, -s, ln0 - s
    for h in range(hops_ahead):
        cur = _next_lane(geo, bflat, cur, key)
        ln = length[bflat + cur.clamp(min=0)]
        st = torch.where(cur >= 0, en, torch.full_like(en, 1e9 * (h + 1)))
        en = torch.where(cur >= 0, st + ln, st)
        lanes.append(cur)
        starts.append(st)
        ends.append(en)
    cur, st = lane, -s
    for h in range(hops_behind):
        cur = torch.where(cur >= 0, pred[bflat + cur.clamp(min=0)], cur)
        ln = length[bflat + cur.clamp(min=0)]
        en = st
        st = torch.where(cur >= 0, en - ln, torch.full_like(en, -1e9 * (h + 1)))
        lanes.insert(0, cur)
        starts.insert(0, st)
        ends.insert(0, torch.where(cur >= 0, en, st))
    return torch.stack(lanes, -1), torch.stack(starts, -1), torch.stack(ends, -1)


def _locate(chain, offsets):
    """Lane, arc length on it and validity of points ``offsets`` (..., G) [m from the
    chain's reference point] on a :func:`_chain`."""
    lanes, starts, ends = chain
    i = torch.searchsorted(starts.contiguous(), offsets.contiguous(), right=True) - 1
    ok = i >= 0
    i = i.clamp(min=0)
    lane = torch.gather(lanes, -1, i)
    st = torch.gather(starts, -1, i)
    en = torch.gather(ends, -1, i)
    ok = ok & (lane >= 0) & (offsets <= en + 1e-6)
    return lane, (offsets - st).clamp(min=0), ok


def _point_at(geo, bflat, lane, s):
    """Position (..., 2), unit tangent (..., 2) at arc length ``s`` of ``lane``."""
    P = geo["P"]
    idx = bflat + lane.clamp(min=0)
    ln = geo["length"][idx].clamp(min=1e-9)
    u = (s / ln).clamp(0, 1) * (P - 1)
    i0 = u.floor().long().clamp(max=P - 2)
    frac = (u - i0.to(u.dtype)).unsqueeze(-1)
    pts = geo["pts"].reshape(-1, 2)
    base = idx * P + i0
    p0 = pts[base]
    p1 = pts[base + 1]
    tan = geo["tan"].reshape(-1, 2)[idx * (P - 1) + i0]
    return p0 + frac * (p1 - p0), tan


def _project(geo, bflat_c, cand, px, py):
    """Exact projection of points (B, V) onto candidate lanes (B, V, K): distance,
    arc length, signed offset (left +), tangent (…, 2), overshoot beyond the ends."""
    P = geo["P"]
    idx = bflat_c + cand.clamp(min=0)  # B,V,K
    pts = geo["pts"][idx]  # B,V,K,P,2
    a = pts[..., :-1, :]
    d = pts[..., 1:, :] - a
    rx = px[..., None, None] - a[..., 0]
    ry = py[..., None, None] - a[..., 1]
    dd = (d * d).sum(-1).clamp(min=1e-12)
    t = (rx * d[..., 0] + ry * d[..., 1]) / dd
    tc = t.clamp(0, 1)
    ex = rx - tc * d[..., 0]
    ey = ry - tc * d[..., 1]
    d2 = ex * ex + ey * ey
    j = d2.argmin(-1, keepdim=True)  # B,V,K,1
    take = lambda z: torch.gather(z, -1, j).squeeze(-1)  # noqa: E731
    dist = take(d2).sqrt()
    t_raw = take(t)
    ln = geo["length"][idx]
    seg_len = ln / (P - 1)
    s = (j.squeeze(-1).to(t.dtype) + take(tc)) * seg_len
    tan = geo["tan"][idx]  # B,V,K,P-1,2
    tj = torch.gather(tan, -2, j[..., None].expand(*j.shape[:-1], 1, 2)).squeeze(-2)
    rxj, ryj = take(rx), take(ry)
    offset = tj[..., 0] * ryj - tj[..., 1] * rxj
    first = j.squeeze(-1) == 0
    last = j.squeeze(-1) == P - 2
    over = torch.where(first & (t_raw < 0), -t_raw * seg_len, torch.zeros_like(s))
    over = torch.where(last & (t_raw > 1), (t_raw - 1) * seg_len, over)
    return dist, s, offset, tj, over


def _kappa_max(v):
    """Curvature limit at speed ``v``: min(MAX_CURVATURE, A_LAT / v^2)."""
    return torch.minimum(
        torch.full_like(v, MAX_CURVATURE), MAX_LATERAL_ACCEL / (v * v).clamp(min=1e-6)
    )


def features(lanes: LaneSet, agents: AgentState) -> Features:
    """Per-agent features in the agent's frame (see the module docstring), vectorised
    over scenes, agents and lanes. ``lanes`` B = 1 is shared by all scenes."""
    lanes, _ = _check_pair(lanes, agents)
    geo = lanes.geometry()
    B, V = agents.shape
    L = geo["L"]
    dev, dt = agents.x.device, agents.x.dtype
    geo = {
        k: (v.to(dt) if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in geo.items()
    }
    valid = agents.valid
    zero = torch.zeros((), dtype=dt, device=dev)
    px = torch.where(valid, agents.x, zero)
    py = torch.where(valid, agents.y, zero)
    th = torch.where(valid, agents.theta, zero)
    v = torch.where(valid, agents.v, zero)
    acc = torch.where(valid, agents.accel, zero)
    kap = torch.where(valid, agents.kappa, zero)
    alen = torch.where(valid, agents.length, torch.ones((), dtype=dt, device=dev))
    awid = torch.where(valid, agents.width, torch.ones((), dtype=dt, device=dev))
    ch, sh = torch.cos(th), torch.sin(th)
    b_off = (torch.arange(B, device=dev) * L)[:, None]  # B,1
    # --- coarse candidates: nearest point per lane (batched matmul in a local frame)
    n_valid = valid.sum(1, keepdim=True).clamp(min=1).to(dt)
    ox = (px * valid).sum(1, keepdim=True) / n_valid
    oy = (py * valid).sum(1, keepdim=True) / n_valid
    q = geo["pts"].reshape(B, L * geo["P"], 2) - torch.stack([ox, oy], -1)
    p = torch.stack([px - ox, py - oy], -1)  # B,V,2
    # ranking only needs |q|^2 - 2 p.q (|p|^2 is constant per agent); invalid lanes far
    pv = geo["valid"].reshape(B, L, 1).expand(B, L, geo["P"]).reshape(B, 1, -1)
    qn = (q * q).sum(-1)[:, None] + torch.where(pv, 0.0, 1e12)
    d2 = torch.baddbmm(qn, p, q.transpose(1, 2), alpha=-2.0)
    d2 = d2.reshape(B, V, L, geo["P"]).amin(-1)
    K = min(_K_CAND, L)
    cd2, cand = torch.topk(d2, K, dim=-1, largest=False)
    cd2 = cd2 + (p * p).sum(-1, keepdim=True)
    cand_ok = cd2 < 1e11
    bflat_c = b_off[..., None]  # B,1,1
    dist, s_c, off_c, tan_c, over_c = _project(geo, bflat_c, cand, px, py)
    cos_e = tan_c[..., 0] * ch[..., None] + tan_c[..., 1] * sh[..., None]
    # --- association with hysteresis
    # memory from another lane set (ids out of range) is forgotten, not misread
    cache = torch.where(agents.lane < L, agents.lane, -1)
    cache_next = _next_lane(geo, b_off, cache, agents.route)
    pref = (cand == cache[..., None]) | (cand == cache_next[..., None])
    pref &= (cache >= 0)[..., None]
    allowed = cand_ok & (cos_e > _ASSOC_COS) & (dist < _ASSOC_MAX) & valid[..., None]
    score = dist + _HEAD_W * (1 - cos_e) - _BONUS * pref.to(dt)
    score = torch.where(allowed, score, torch.full_like(score, math.inf))
    best = score.argmin(-1, keepdim=True)
    found = torch.gather(allowed, -1, best).squeeze(-1)
    pick = lambda z: torch.gather(z, -1, best).squeeze(-1)  # noqa: E731
    lane = torch.where(found, pick(cand), torch.full_like(cache, -1))
    s_cur = pick(s_c)
    off_cur = torch.where(found, pick(off_c), zero)
    tan_cur = torch.gather(tan_c, 2, best[..., None].expand(B, V, 1, 2)).squeeze(2)
    lidx = b_off + lane.clamp(min=0)
    w_cur = torch.where(found, geo["width"][lidx], zero)
    sin_e = torch.where(found, tan_cur[..., 0] * sh - tan_cur[..., 1] * ch, zero)
    cos_cur = torch.where(found, pick(cos_e), torch.ones_like(v))
    heading_error = torch.atan2(sin_e, cos_cur)
    # --- neighbours, geometrically
    w_c = geo["width"][bflat_c + cand.clamp(min=0)]
    rel = off_cur[..., None] - off_c  # centre of cand relative to the current centre
    expct = 0.5 * (w_cur[..., None] + w_c)
    tan_agree = (tan_c * tan_cur[..., None, :]).sum(-1) > _NEIGH_COS
    side_ok = cand_ok & found[..., None] & tan_agree & (over_c < 1.0) & (cand != lane[..., None])
    neigh, s_nb, off_nb, w_nb, avail = [], [], [], [], []
    for sign in (1.0, -1.0):
        err = (rel - sign * expct).abs()
        ok = side_ok & (err < 0.4 * expct)
        sc = torch.where(ok, err + 0.5 * over_c, torch.full_like(err, math.inf))
        bi = sc.argmin(-1, keepdim=True)
        f = torch.gather(ok, -1, bi).squeeze(-1)
        g = lambda z, bi=bi: torch.gather(z, -1, bi).squeeze(-1)  # noqa: E731
        neigh.append(torch.where(f, g(cand), torch.full_like(lane, -1)))
        s_nb.append(g(s_c))
        off_nb.append(torch.where(f, g(off_c), zero))
        w_nb.append(torch.where(f, g(w_c), zero))
        avail.append(f)
    neighbour = torch.stack(neigh, -1)  # B,V,2
    avail_t = torch.stack(avail, -1)
    # --- corridors: current, left, right
    c_lane = torch.stack([lane, neighbour[..., 0], neighbour[..., 1]], -1)  # B,V,3
    c_s = torch.stack([s_cur, s_nb[0], s_nb[1]], -1)
    c_ok = c_lane >= 0
    c_w = torch.stack([w_cur, w_nb[0], w_nb[1]], -1)
    grid = torch.tensor(_GRID, dtype=dt, device=dev)
    look = (0.8 * v + 4.0).clamp(6.0, 25.0)
    offs = torch.cat([grid.expand(B, V, 3, -1), look[..., None, None].expand(B, V, 3, 1)], -1)
    bflat_g = b_off[..., None, None]
    chain = _chain(geo, b_off[..., None], c_lane, c_s, agents.route[..., None].expand_as(c_lane))
    w_lane, w_s, w_ok = _locate(chain, offs)
    w_ok &= c_ok[..., None]
    xy, tg = _point_at(geo, bflat_g, w_lane, w_s)
    lim = geo["limit"][bflat_g + w_lane.clamp(min=0)]
    # path left: the end of the last lane ahead, capped
    fwd_end = torch.where(chain[0] >= 0, chain[2], torch.full_like(chain[2], -math.inf))
    left_len = fwd_end.amax(-1)
    path_left = torch.where(c_ok, left_len.clamp(max=_GAP_CAP), zero)
    # agent frame
    rx = xy[..., 0] - px[..., None, None]
    ry = xy[..., 1] - py[..., None, None]
    cth, sth = ch[..., None, None], sh[..., None, None]
    fx = cth * rx + sth * ry
    fy = -sth * rx + cth * ry
    tsin = -sth * tg[..., 0] + cth * tg[..., 1]  # sin of path heading relative to agent
    tcos = cth * tg[..., 0] + sth * tg[..., 1]
    okf = w_ok.to(dt)
    ref_i = list(_REF_IDX)
    ref_x = fx[..., ref_i] * okf[..., ref_i]
    ref_y = fy[..., ref_i] * okf[..., ref_i]
    ref_s = tsin[..., ref_i] * okf[..., ref_i]
    lx, ly = fx[..., -1], fy[..., -1]
    pursuit = torch.where(w_ok[..., -1], 2 * ly / (lx * lx + ly * ly).clamp(min=1.0), zero)
    limits = torch.where(w_ok[..., list(_LIM_IDX)], lim[..., list(_LIM_IDX)], zero)
    # --- corridor occupancy: every agent j against every corridor sample of agent i
    gx, gy = fx[..., :-1], fy[..., :-1]  # B,V,3,36
    gok = w_ok[..., :-1]
    ajx = px[:, None, :] - px[:, :, None]  # B,i,j
    ajy = py[:, None, :] - py[:, :, None]
    jx = ch[..., None] * ajx + sh[..., None] * ajy  # in i's frame
    jy = -sh[..., None] * ajx + ch[..., None] * ajy
    Gp = gx.shape[-1]
    gpts = torch.stack([gx, gy], -1).reshape(B * V, 3 * Gp, 2)
    jpts = torch.stack([jx, jy], -1).reshape(B * V, V, 2)
    # argmin over samples needs |g|^2 - 2 g.j only; samples off the path never win
    gn = (gpts * gpts).sum(-1) + torch.where(gok.reshape(B * V, 3 * Gp), 0.0, 1e12)
    dd = torch.baddbmm(gn[:, None, :], jpts, gpts.transpose(1, 2), alpha=-2.0)
    kstar = dd.reshape(B, V, V, 3, Gp).argmin(-1).permute(0, 1, 3, 2)  # B,V,3,V(j)
    gk = lambda z: torch.gather(z, -1, kstar)  # noqa: E731  z: B,V,3,Gp -> B,V,3,V
    tsg, tcg = tsin[..., :-1], tcos[..., :-1]
    bx, by = gk(gx), gk(gy)
    tcx, tsy = gk(tcg), gk(tsg)
    dxj = jx[:, :, None, :] - bx
    dyj = jy[:, :, None, :] - by
    along = dxj * tcx + dyj * tsy
    lat = -dxj * tsy + dyj * tcx
    s_k = torch.tensor(_GRID, dtype=dt, device=dev)[kstar]
    lon = s_k + along
    near_ok = gk(gok.to(torch.int8)).bool() & (along.abs() < 3.0)
    other = valid[:, None, None, :] & ~torch.eye(V, dtype=torch.bool, device=dev)[None, :, None, :]
    reach = c_w[..., None] / 2 + awid[:, None, None, :] / 2 - 0.3
    inside = other & near_ok & (lat.abs() < reach) & c_ok[..., None] & valid[:, :, None, None]
    half = 0.5 * (alen[:, :, None, None] + alen[:, None, None, :]).expand_as(lon)
    inf = torch.full_like(lon, math.inf)
    ahead = inside & (lon > 0)
    la = torch.where(ahead, lon, inf).min(-1)
    fol = inside & (lon <= 0)
    fb = torch.where(fol, -lon, inf).min(-1)
    # speed of j along i's path at its sample: heading of j relative to the path tangent
    thj = th[:, None, None, :] - th[:, :, None, None]  # heading of j in i's frame
    vj_along = v[:, None, None, :] * (torch.cos(thj) * tcx + torch.sin(thj) * tsy)
    aj = acc[:, None, None, :].expand_as(lon)
    lead_found = torch.isfinite(la.values)
    fol_found = torch.isfinite(fb.values)
    gl = lambda z, ix: torch.gather(z, -1, ix.unsqueeze(-1)).squeeze(-1)  # noqa: E731
    lead_gap = torch.where(lead_found, la.values - gl(half, la.indices), inf[..., 0])
    lead_v = gl(vj_along, la.indices)
    lead_dv = torch.where(lead_found, lead_v - v[..., None], zero)
    lead_a = torch.where(lead_found, gl(aj, la.indices), zero)
    fol_gap = torch.where(fol_found, fb.values - gl(half, fb.indices), inf[..., 0])
    fol_dv = torch.where(fol_found, gl(vj_along, fb.indices) - v[..., None], zero)
    # --- context: nearest other agents
    dist_ij = jx * jx + jy * jy
    dist_ij = torch.where(other[:, :, 0], dist_ij, torch.full_like(dist_ij, math.inf))
    nk = min(_N_CONTEXT, V)
    nd, ni = torch.topk(dist_ij, nk, dim=-1, largest=False)
    n_ok = torch.isfinite(nd) & valid[..., None]
    gc = lambda z: torch.gather(z, -1, ni)  # noqa: E731
    th_rel = gc(th[:, None, :] - th[:, :, None])
    ctx = torch.stack(
        [n_ok.to(dt), gc(jx) / 50, gc(jy) / 50, torch.cos(th_rel), torch.sin(th_rel),
         gc(v[:, None, :].expand(B, V, V)) / 20], -1,
    )  # fmt: skip
    ctx = torch.where(n_ok[..., None], ctx, zero)
    if nk < _N_CONTEXT:
        ctx = torch.cat([ctx, ctx.new_zeros(B, V, _N_CONTEXT - nk, 6)], 2)
    # --- manoeuvre shaping inputs: curvature a change needs; commitment
    lat_shift = torch.stack([off_nb[0], off_nb[1]], -1).abs()
    D = torch.minimum((_LC_TIME * v).clamp(min=_LC_MIN)[..., None], path_left[..., 1:])
    need = math.pi**2 * lat_shift / (2 * D.clamp(min=1.0).pow(2))
    need = torch.where(avail_t, need, zero)
    kmax_now = _kappa_max(v)
    need_ratio = (need / kmax_now[..., None]).clamp(max=3.0)
    prev = agents.manoeuvre
    origin = torch.where(agents.origin < L, agents.origin, -1)
    orig_next = _next_lane(geo, b_off, origin, agents.route)
    on_origin = (origin >= 0) & ((lane == origin) | (lane == orig_next)) & (lane >= 0)
    changing = (prev == LEFT) | (prev == RIGHT)
    side_av = torch.where(prev == LEFT, avail_t[..., 0], avail_t[..., 1])
    commit = torch.where(changing & on_origin & side_av & valid, prev, torch.zeros_like(prev))
    new_origin = torch.where(changing & on_origin, lane, torch.full_like(origin, -1))
    # --- assemble
    lim_cur = torch.where(found, geo["limit"][lidx], zero)
    own = [v / 20, acc / 4, kap / 0.05, alen / 5, awid / 2]
    own += [(prev == m).to(dt) for m in range(len(MANOEUVRES))] + [(commit > 0).to(dt)]
    cols = own
    cols += [found.to(dt), off_cur / 2, sin_e, cos_cur - 1, w_cur / 4]
    cols += [torch.where(found, v / lim_cur.clamp(min=1.0), zero)]
    cols += list((limits[:, :, 0] / 30).unbind(-1))
    for k in range(3):
        if k > 0:
            j = k - 1
            cols += [
                avail_t[..., j].to(dt), (off_nb[j]) / 2,
                torch.where(avail_t[..., j], ref_s[:, :, k, 0], zero), w_nb[j] / 4,
                limits[:, :, k, 0] / 30,
            ]  # fmt: skip
        cols += list((ref_x[:, :, k] / 40).unbind(-1)) + list((ref_y[:, :, k] / 10).unbind(-1))
        cols += list(ref_s[:, :, k].unbind(-1))
        cols += [pursuit[:, :, k] / 0.05, path_left[:, :, k] / _GAP_CAP]
        if k > 0:
            cols += [torch.where(avail_t[..., k - 1], need_ratio[..., k - 1], zero)]
        ok_k = found if k == 0 else avail_t[..., k - 1]
        cols += [torch.where(ok_k, (pursuit[:, :, k] - kap) / 0.01, zero)]
    for k in range(3):
        g = lead_gap[..., k].clamp(-10.0, _GAP_CAP)
        fg = fol_gap[..., k].clamp(-10.0, _GAP_CAP)
        lf, ff = lead_found[..., k], fol_found[..., k]
        cols += [
            lf.to(dt), torch.where(lf, g, torch.full_like(g, _GAP_CAP)) / 50,
            torch.where(lf, 1.0 / g.clamp(min=1.0), zero), lead_dv[..., k] / 10,
            lead_a[..., k] / 4, ff.to(dt), torch.where(ff, fg, torch.full_like(fg, _GAP_CAP)) / 50,
            fol_dv[..., k] / 10,
        ]  # fmt: skip
    x = torch.cat([torch.stack(cols, -1), ctx.reshape(B, V, -1)], -1)
    x = torch.where(valid[..., None], x, zero)
    kin = torch.stack([agents.v, agents.accel, agents.kappa, agents.length], -1)
    kin = torch.where(valid[..., None], kin, zero)
    return Features(
        x=x, kin=kin, lane=lane, offset=off_cur, heading_error=heading_error,
        neighbour=neighbour, need=need, commit=commit, origin=new_origin,
        leader_gap=lead_gap, leader_dv=lead_dv, follower_gap=fol_gap, follower_dv=fol_dv,
        path_left=path_left, valid=valid,
    )  # fmt: skip


# ----------------------------------------------------------------------------- shaping
def _bins(values, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(values, dtype=like.dtype, device=like.device)


def feasible_box(kin: torch.Tensor, dt: float = DT):
    """The feasible controls at state ``kin`` (..., 4) = (v, a_prev, κ_prev, length):
    ``(lo_a, hi_a, lo_k, hi_k)`` (...), see the module docstring (never empty)."""
    v, a, k = kin[..., 0], kin[..., 1], kin[..., 2]
    lo_a = (a - MAX_JERK * dt).clamp(-MAX_BRAKE, MAX_ACCEL)
    hi_a = (a + MAX_JERK * dt).clamp(-MAX_BRAKE, MAX_ACCEL)
    kmax = _kappa_max((v + hi_a * dt).clamp(min=0))
    lo_k = torch.maximum(torch.minimum(k - MAX_CURVATURE_RATE * dt, kmax), -kmax)
    hi_k = torch.maximum(torch.minimum(k + MAX_CURVATURE_RATE * dt, kmax), -kmax)
    return lo_a, hi_a, lo_k, hi_k


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


_S_MIN, _B_SAFE = 2.0, 4.0  # m, m/s^2: lane-change gap acceptance
SHAPE_DIM = 13


def _manoeuvre_penalty(kin, shape, beta: float):
    """(..., 4) penalties of the manoeuvres from ``shape`` (..., SHAPE_DIM) (see
    :func:`_shape_info`) and the speed in ``kin``."""
    avail, need, commit = shape[..., 0:2], shape[..., 2:4], shape[..., 4].round().long()
    kmax = _kappa_max(kin[..., 0])[..., None]
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


def _shape_info(feats: Features) -> torch.Tensor:
    """What the manoeuvre shaping reads (..., SHAPE_DIM): availability of the left and
    right lanes (2), the curvature a change needs (2), the committed change (1), and per
    side (left, right) the target lane's leader gap, its speed minus ours, the follower
    gap, its speed minus ours (8; gaps clipped to [-10, 100] m, 100 where nobody)."""
    dt = feats.x.dtype
    avail = (feats.neighbour >= 0).to(dt)
    side = []
    for k in (1, 2):
        side += [
            feats.leader_gap[..., k].clamp(-10.0, _GAP_CAP), feats.leader_dv[..., k],
            feats.follower_gap[..., k].clamp(-10.0, _GAP_CAP), feats.follower_dv[..., k],
        ]  # fmt: skip
    return torch.cat([avail, feats.need, feats.commit[..., None].to(dt), torch.stack(side, -1)], -1)


def _shape_from_x(x: torch.Tensor, shape5: torch.Tensor) -> torch.Tensor:
    """The gap columns of :func:`_shape_info` recovered from feature rows ``x`` (the
    features store them scaled), appended to the first five columns."""
    col = {n: i for i, n in enumerate(FEATURE_NAMES)}
    side = []
    for s in ("left", "right"):
        side += [
            x[..., col[f"{s}_lead_gap"]] * 50, x[..., col[f"{s}_lead_dv"]] * 10,
            x[..., col[f"{s}_fol_gap"]] * 50, x[..., col[f"{s}_fol_dv"]] * 10,
        ]  # fmt: skip
    return torch.cat([shape5[..., :5], torch.stack(side, -1)], -1)


# ----------------------------------------------------------------------------- motion
def step_agents(
    agents: AgentState,
    accel,
    kappa,
    controlled,
    dt: float = DT,
    *,
    manoeuvre=None,
    lane=None,
    origin=None,
) -> AgentState:
    """Advance the ``controlled`` agents one step by the kinematic bicycle (Traffic's
    semi-implicit Euler): ``v' = max(v + a dt, 0)``, realised ``a = (v' - v) / dt``,
    ``θ' = θ + v' κ dt``, centre along ``θ' + β``, ``β = asin(κ 0.3 length)``. Others keep
    their state. ``manoeuvre``/``lane``/``origin`` (B, V), when given, replace the
    policy memory of the controlled agents (``lane``: of all valid agents)."""
    if not isinstance(agents, AgentState):
        raise TypeError(f"agents must be an AgentState, got {type(agents).__name__}")
    shape = agents.shape
    x = agents.x
    a = _tensor(accel, "accel", like=x, dtype=x.dtype)
    k = _tensor(kappa, "kappa", like=x, dtype=x.dtype)
    _check_shape(a, shape, "accel", "one acceleration per agent slot")
    _check_shape(k, shape, "kappa", "one curvature per agent slot")
    c = _tensor(controlled, "controlled", like=x)
    if c.dtype != torch.bool:
        raise TypeError(f"controlled must be a bool tensor, got dtype {c.dtype}")
    _check_shape(c, shape, "controlled", "one flag per agent slot")
    c = c & agents.valid
    if not (isinstance(dt, (int, float)) and math.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be a finite number > 0, got {dt!r}")
    bad = c & ~(torch.isfinite(a) & torch.isfinite(k))
    if bool(bad.any()):
        raise ValueError(
            f"accel/kappa have NaN or inf for {int(bad.sum())} controlled agents; give "
            "finite controls"
        )
    v_new = (agents.v + a * dt).clamp(min=0.0)
    a_real = (v_new - agents.v) / dt
    lr = 0.3 * agents.length
    beta = torch.asin((k * lr).clamp(-1.0, 1.0))
    th_new = agents.theta + v_new * k * dt
    head = th_new + beta
    x_new = agents.x + v_new * torch.cos(head) * dt
    y_new = agents.y + v_new * torch.sin(head) * dt
    th_new = torch.atan2(torch.sin(th_new), torch.cos(th_new))
    w = lambda new, old: torch.where(c, new, old)  # noqa: E731
    changes = dict(
        x=w(x_new, agents.x), y=w(y_new, agents.y), theta=w(th_new, agents.theta),
        v=w(v_new, agents.v), accel=w(a_real, agents.accel), kappa=w(k, agents.kappa),
    )  # fmt: skip
    for name, val, mask in (
        ("manoeuvre", manoeuvre, c),
        ("origin", origin, c),
        ("lane", lane, agents.valid),
    ):
        if val is not None:
            t = _tensor(val, name, like=x)
            _check_shape(t, shape, name, "one per agent slot")
            changes[name] = torch.where(mask, t.long(), getattr(agents, name))
    return dataclasses.replace(agents, **changes)


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


def _gumbel_argmax(logits, generator, greedy):
    if greedy:
        return logits.argmax(-1)
    dev = generator.device if generator is not None else logits.device
    u = torch.rand(logits.shape, generator=generator, device=dev, dtype=logits.dtype)
    u = u.to(logits.device).clamp(1e-12, 1 - 1e-7)
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
        self, out, kin, shape, *, manoeuvre=None, generator=None, greedy=False, shaping=None
    ):
        """Controls from the distribution: ``(accel, kappa, manoeuvre)`` (...). ``manoeuvre``
        given: the controls of that manoeuvre (teacher forcing / forcing)."""
        shaping = self.shaping if shaping is None else bool(shaping)
        kin = kin.to(out.manoeuvre.dtype)
        lm, la, lk = self.shaped(out, kin, shape, shaping)
        m = _gumbel_argmax(lm, generator, greedy) if manoeuvre is None else manoeuvre
        ia = _gumbel_argmax(self._head(la, m), generator, greedy)
        ik = _gumbel_argmax(self._head(lk, m), generator, greedy)
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
    def _act(self, lanes, agents, controlled, generator, greedy, shaping, force):
        lanes, controlled = _check_pair(lanes, agents, controlled)
        if controlled is None:
            raise ValueError("controlled must be a (B, V) bool mask of the agents to drive")
        feats = features(lanes, agents)
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
            force = f
        out = self(feats.x)
        shape = _shape_info(feats)
        a, k, m = self.decode(
            out, feats.kin, shape, manoeuvre=force, generator=generator, greedy=greedy,
            shaping=shaping,
        )  # fmt: skip
        a, k = a.to(agents.x.dtype), k.to(agents.x.dtype)
        if self.shaping if shaping is None else shaping:  # the box again, in the state's dtype
            lo_a, hi_a, lo_k, hi_k = feasible_box(feats.kin)
            a = torch.maximum(torch.minimum(a, hi_a), lo_a)
            k = torch.maximum(torch.minimum(k, hi_k), lo_k)
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
    ):
        """One closed-loop step: :meth:`act`, then :func:`step_agents` with the policy's
        memory updated (lane association, manoeuvre, lane-change origin). Returns
        ``(new AgentState, Features of the old state)``."""
        a, k, m, feats = self._act(lanes, agents, controlled, generator, greedy, shaping, force)
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


def _next_origin(m, prev, feats: Features):
    """Lane-change origin after choosing ``m``: a new change starts at the current lane,
    a continued one carries the origin forward, anything else clears it."""
    change = (m == LEFT) | (m == RIGHT)
    carry = change & (m == prev) & (feats.origin >= 0)
    return torch.where(carry, feats.origin, torch.where(change, feats.lane, -1))


# ----------------------------------------------------------------------------- data
_BC_FIELDS = {
    "x": (FEATURE_DIM,),
    "kin": (4,),
    "shape": (SHAPE_DIM,),
    "manoeuvre": (),
    "accel": (),
    "kappa": (),
}


class BCDataset(torch.utils.data.Dataset):
    """Behaviour-cloning samples: ``x`` (N, FEATURE_DIM), ``kin`` (N, 4) = (v, a_prev,
    κ_prev, length), ``shape`` (N, SHAPE_DIM) (what the manoeuvre shaping reads:
    ``_shape_info``), ``manoeuvre`` (N,) long, targets ``accel``, ``kappa`` (N,). ``info``: a
    JSON-able record of how it was made. Indexing with a list of indices returns a
    batch dict (``__getitems__``: the DataLoader fetches batches in one slice)."""

    def __init__(self, data: dict, info: dict | None = None):
        if not isinstance(data, dict):
            raise TypeError(f"data must be a dict of tensors, got {type(data).__name__}")
        missing = sorted(set(_BC_FIELDS) - set(data))
        if missing:
            raise ValueError(f"BC data lacks fields {missing}; it needs {sorted(_BC_FIELDS)}")
        n = None
        self.data = {}
        for k, tail in _BC_FIELDS.items():
            t = _tensor(data[k], f"data[{k!r}]")
            if n is None:
                n = t.shape[0] if t.ndim else 0
            if tuple(t.shape) != (n, *tail):
                raise ValueError(
                    f"data[{k!r}] must have shape {(n, *tail)} (N samples), got {tuple(t.shape)}"
                )
            self.data[k] = t.long() if k == "manoeuvre" else t.float()
        m = self.data["manoeuvre"]
        if m.numel() and (int(m.min()) < 0 or int(m.max()) >= len(MANOEUVRES)):
            raise ValueError(
                f"manoeuvre labels must index MANOEUVRES {MANOEUVRES}, got values in "
                f"[{int(m.min())}, {int(m.max())}]"
            )
        for k in ("x", "kin", "accel", "kappa"):
            if not bool(torch.isfinite(self.data[k]).all()):
                raise ValueError(f"data[{k!r}] has NaN or inf; drop those samples")
        self.info = dict(info or {})

    def __len__(self) -> int:
        return int(self.data["x"].shape[0])

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.data.items()}

    def __getitems__(self, idx):
        idx = torch.as_tensor(idx, dtype=torch.long)
        return {k: v[idx] for k, v in self.data.items()}

    def save(self, path) -> None:
        """Write to ``path`` (torch.save; loads with weights_only=True)."""
        torch.save({"data": self.data, "info": self.info}, str(path))

    @classmethod
    def load(cls, path) -> BCDataset:
        d = torch.load(str(path), weights_only=True)
        return cls(d["data"], d.get("info"))

    def class_counts(self) -> dict:
        c = torch.bincount(self.data["manoeuvre"], minlength=len(MANOEUVRES))
        return {m: int(c[i]) for i, m in enumerate(MANOEUVRES)}


def collate_bc(batch):
    """Collate for :class:`BCDataset`: a batch dict passes through, a list of samples is
    stacked."""
    if isinstance(batch, dict):
        return batch
    return {k: torch.stack([b[k] for b in batch]) for k in batch[0]}


def _cat_lanes(sets: Sequence[LaneSet]) -> LaneSet:
    """Scenes of several LaneSets in one (lanes padded with invalid ones)."""
    L = max(s.num_lanes for s in sets)
    S = max(s.succ.shape[2] for s in sets)

    def pad(t, fill, dims):
        pads = []
        for d in reversed(range(2, t.ndim)):
            pads += [0, dims.get(d, t.shape[d]) - t.shape[d]]
        pads += [0, L - t.shape[1]]
        return F.pad(t, pads, value=fill)

    return LaneSet(
        torch.cat([pad(s.points, 0.0, {}) for s in sets]),
        torch.cat([pad(s.width, 1.0, {}) for s in sets]),
        torch.cat([pad(s.speed_limit, 1.0, {}) for s in sets]),
        torch.cat([pad(s.succ, -1, {2: S}) for s in sets]),
        torch.cat([pad(s.valid, False, {}) for s in sets]),
    )


def _scenes(lanes: LaneSet, idx: torch.Tensor) -> LaneSet:
    return LaneSet(
        lanes.points[idx], lanes.width[idx], lanes.speed_limit[idx], lanes.succ[idx],
        lanes.valid[idx],
    )  # fmt: skip


class _LaneCache:
    """Per-scene lanes cropped around each ego, refreshed every ``every`` steps, with
    the association memory remapped between crops."""

    def __init__(self, roads, net, radius, every, dtype, device):
        full = _cat_lanes([lanes_from_road(r, device, dtype, max_succ=4) for r in roads])
        self.full = full
        self.net = net
        self.radius, self.every = float(radius), int(every)
        self.lanes, self.source, self.t = None, None, 0

    def get(self, ego_xy, memory: list[torch.Tensor]):
        if self.lanes is None or self.t % self.every == 0:
            new, source = crop_lanes(_scenes(self.full, self.net), ego_xy, self.radius)
            if self.source is not None:
                B, n = source.shape
                Lf = self.full.num_lanes
                inv = torch.full((B, Lf + 1), -1, dtype=torch.long, device=source.device)
                to = torch.where(source >= 0, source, Lf)
                inv.scatter_(1, to, torch.arange(n, device=source.device).expand(B, n))
                for m in memory:  # old local ids -> lane ids -> new local ids
                    g = torch.gather(self.source, 1, m.clamp(min=0))
                    nm = torch.gather(inv, 1, torch.where(g >= 0, g, Lf))
                    m.copy_(torch.where((m >= 0) & (g >= 0), nm, -1))
            self.lanes, self.source = new, source
        self.t += 1
        return self.lanes, self.source


def _int_arg(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _road_list(roads):
    roads = [roads] if hasattr(roads, "points") else list(roads)
    if not roads or not all(hasattr(r, "points") for r in roads):
        raise TypeError("roads must be a RoadNetwork or a non-empty list of them (make_road)")
    return roads


def collect_bc(
    roads,
    *,
    n_scenes: int = 16,
    steps: int = 500,
    seed: int = 0,
    warmup: int = 20,
    every: int = 1,
    params=None,
    max_vehicles: int = 32,
    window: float = 150.0,
    crop_radius: float = 300.0,
    recrop_every: int = 20,
    noise: float = 1.0,
    kick_prob: float = 0.05,
    device=None,
    dtype=torch.float32,
    progress: bool = False,
) -> BCDataset:
    """Behaviour-cloning samples from ground-truth :class:`~simsci.driving.Traffic`
    (autopilot ego) on ``roads`` (a RoadNetwork or a list; each scene drives one, drawn
    at random): ``steps`` steps of ``n_scenes`` scenes, a sample of every non-ego vehicle
    present before and after a step, every ``every`` steps, skipping the first ``warmup``
    steps of every scene (spawn transients). Traffic parameters: ``params`` or
    :func:`~simsci.driving.sample_params` drawn with ``seed`` (again for a scene
    reset when its ego nears the route's end). Labels: module docstring.

    **Noise injection** (DART, Laskey et al. 2017): before a step, each non-ego vehicle
    is kicked with probability ``kick_prob`` -- moved sideways by N(0, (0.6 noise)^2) m,
    turned by N(0, (0.03 noise)^2) rad, its speed changed by N(0, noise^2) m/s -- so the
    data show the ground truth's corrections from off-centre states, which the policy
    reaches in closed loop and plain logs never show. ``noise=0``: plain logs."""
    from simsci.driving import Traffic, sample_params

    roads = _road_list(roads)
    n_scenes = _int_arg("n_scenes", n_scenes, 1)
    steps = _int_arg("steps", steps, 1)
    warmup = _int_arg("warmup", warmup, 0)
    every = _int_arg("every", every, 1)
    gen = torch.Generator().manual_seed(int(seed))
    if params is None:
        params = sample_params(n_scenes, gen)
    tr = Traffic(
        roads, n_scenes, params=params, max_vehicles=max_vehicles, window=window,
        seed=int(seed), device=device, dtype=dtype,
    )  # fmt: skip
    tr.reset()
    B, V = n_scenes, int(max_vehicles)
    dev = tr.device
    cache = _LaneCache(roads, tr.net, crop_radius, recrop_every, dtype, dev)
    mem_lane = torch.full((B, V), -1, dtype=torch.long, device=dev)
    mem_origin = torch.full((B, V), -1, dtype=torch.long, device=dev)
    mem_man = torch.zeros((B, V), dtype=torch.long, device=dev)
    mem_uid = tr.state.uid.clone()
    age = torch.zeros(B, dtype=torch.long, device=dev)
    buf = {k: [] for k in _BC_FIELDS}
    counts = dict(
        samples=0, dropped_inconsistent=0, projected_accel=0, projected_kappa=0, resets=0,
        kicked=0,
    )  # fmt: skip
    t0 = time.time()
    for t in range(steps):
        near_end = tr.ego_route_s > tr.route_length - 250.0
        if bool(near_end.any()):
            idx = torch.nonzero(near_end).flatten()
            tr.reset(idx, params=sample_params(int(idx.numel()), gen))
            age[idx] = 0
            counts["resets"] += int(idx.numel())
            cache.net = tr.net
            cache.t = 0  # recrop now
            mem_lane[idx] = -1
            mem_origin[idx] = -1
        st = tr.state
        if noise > 0:
            kick = st.valid & (torch.rand(st.x.shape, generator=gen).to(dev) < kick_prob)
            kick[:, 0] = False
            z = torch.randn((3, *st.x.shape), generator=gen).to(dev, dtype) * noise
            z = torch.where(kick, z, torch.zeros((), dtype=dtype, device=dev))
            lat = 0.6 * z[0]
            st.x = st.x - torch.sin(st.theta) * lat
            st.y = st.y + torch.cos(st.theta) * lat
            st.theta = st.theta + 0.03 * z[1]
            st.v = (st.v + z[2]).clamp(min=0)
            counts["kicked"] += int(kick.sum())
        fresh = ~(st.valid & (st.uid == mem_uid))
        mem_lane[fresh] = -1
        mem_origin[fresh] = -1
        mem_man[fresh] = KEEP
        lanes, source = cache.get(torch.stack([st.x[:, 0], st.y[:, 0]], -1), [mem_lane, mem_origin])
        agents = AgentState.from_traffic(tr, dtype)
        agents = agents.replace(lane=mem_lane.clone(), manoeuvre=mem_man, origin=mem_origin.clone())
        feats = features(lanes, agents)
        uid0, valid0 = st.uid.clone(), st.valid.clone()
        lane0, from0 = st.lane.clone(), st.from_lane.clone()
        tr.step()
        s1 = tr.state
        same = valid0 & s1.valid & (s1.uid == uid0)
        same[:, 0] = False
        same &= (age >= warmup)[:, None]
        my = torch.where(feats.lane >= 0, torch.gather(source, 1, feats.lane.clamp(min=0)), -1)
        changing = s1.from_lane >= 0
        crossed = (my == s1.lane) | ((from0 >= 0) & (my == lane0))
        direction = torch.where(s1.offset < 0, LEFT, RIGHT)
        brake = (s1.accel < -1.0) | (s1.v < 1.0)
        label = torch.where(
            changing & ~crossed & (my >= 0), direction, torch.where(brake, YIELD, KEEP)
        )
        shape = _shape_info(feats)
        pen = _manoeuvre_penalty(feats.kin, shape, 20.0)
        ok = torch.gather(pen, -1, label[..., None]).squeeze(-1) - pen.amin(-1) < 1.0
        take = same & ok
        counts["dropped_inconsistent"] += int((same & ~ok).sum())
        if t % every == 0 and bool(take.any()):
            lo_a, hi_a, lo_k, hi_k = feasible_box(feats.kin)
            a1, k1 = s1.accel.to(dtype), s1.kappa.to(dtype)
            counts["projected_accel"] += int(
                (take & ((a1 < lo_a - 1e-5) | (a1 > hi_a + 1e-5))).sum()
            )
            counts["projected_kappa"] += int(
                (take & ((k1 < lo_k - 1e-7) | (k1 > hi_k + 1e-7))).sum()
            )
            buf["x"].append(feats.x[take].cpu())
            buf["kin"].append(feats.kin[take].cpu())
            buf["shape"].append(shape[take].cpu())
            buf["manoeuvre"].append(label[take].cpu())
            buf["accel"].append(a1[take].cpu())
            buf["kappa"].append(k1[take].cpu())
            counts["samples"] += int(take.sum())
        mem_origin = _next_origin(label, mem_man, feats)
        mem_man = torch.where(s1.valid, label, KEEP)
        mem_lane = feats.lane.clone()
        mem_uid = s1.uid.clone()
        age += 1
        if progress and (t + 1) % 200 == 0:
            print(f"collect_bc: step {t + 1}/{steps}, {counts['samples']} samples, "
                  f"{time.time() - t0:.0f} s", flush=True)  # fmt: skip
    if not buf["x"]:
        raise ValueError(
            f"collect_bc found no samples in {steps} steps (warmup {warmup}); run more steps"
        )
    data = {k: torch.cat(v) for k, v in buf.items()}
    info = dict(
        counts, n_scenes=n_scenes, steps=steps, seed=int(seed), warmup=warmup, every=every,
        noise=float(noise), kick_prob=float(kick_prob),
        roads=[
            dict(seed=int(r.seed), lanes=int(r.num_lanes), length=r.config.get("length"))
            for r in roads
        ],
        seconds=round(time.time() - t0, 1),
    )  # fmt: skip
    ds = BCDataset(data, info)
    info["classes"] = ds.class_counts()
    ds.info = info
    return ds


# ----------------------------------------------------------------------------- rollouts
def _log_state(st) -> dict:
    names = ("x", "y", "theta", "v", "accel", "kappa", "length", "width", "valid", "uid")
    return {n: getattr(st, n).clone() for n in names}


def _frames(log: list[dict], dtype) -> torch.Tensor:
    """(B, T, V, 7) AGENT_FEATURES frames of a list of logged states."""
    rows = [
        torch.stack(
            [
                d["x"],
                d["y"],
                d["v"],
                torch.cos(d["theta"]),
                torch.sin(d["theta"]),
                d["length"],
                d["width"],
            ],
            -1,
        )  # fmt: skip
        for d in log
    ]
    return torch.stack(rows, 1).to(dtype)


def rollout_vs_traffic(
    policy: DeltaSim,
    road,
    *,
    n_scenes: int = 16,
    steps: int = 50,
    seed: int = 0,
    shaping: bool = True,
    greedy: bool = False,
    warmup: int = 30,
    params=None,
    max_vehicles: int = 32,
    crop_radius: float = 450.0,
    offroad_tolerance: float = 0.5,
    dtype=torch.float64,
    details: bool = False,
) -> dict:
    """Closed-loop ΔSim against the ground truth from the same :class:`Traffic` state
    (after ``warmup`` steps of ``n_scenes`` scenes on ``road``, parameters drawn with
    ``seed``): ``steps`` steps of each; ΔSim drives the non-ego vehicles present at the
    start (ego and later arrivals replayed, module docstring). Returns a dict: ``ade``,
    ``fde`` [m] (over the compared agents and steps; ``fde`` at each agent's last compared
    step, ``fde_5s`` over agents compared for all 5 s), ``collision_rate``,
    ``offroad_rate`` (fraction of compared agents ever in collision / beyond ``width/2 +
    offroad_tolerance`` of every lane), ``infeasible_rate`` (fraction of compared agents
    with an infeasible step) and ``infeasible_step_rate`` / ``infeasible_steps`` (count),
    ``collision_rate_sim_sim`` (collisions whose partner is ΔSim-driven too, not replayed),
    the same rates of the ground truth (``gt_*``), ``agents``, and ``ms_per_step``
    (features + act + integration for the batch). ``details``: also ``"trajectories"``,
    the frames (B, T+1, V, 7) of both rollouts, the ``compared`` mask (B, V, T+1) and
    ΔSim's manoeuvres (B, V, T)."""
    from simsci.driving import Traffic, metrics, sample_params

    if not isinstance(policy, DeltaSim):
        raise TypeError(f"policy must be a DeltaSim, got {type(policy).__name__}")
    (road,) = _road_list(road)
    n_scenes = _int_arg("n_scenes", n_scenes, 1)
    steps = _int_arg("steps", steps, 1)
    gen = torch.Generator().manual_seed(int(seed))
    if params is None:
        params = sample_params(n_scenes, gen)
    tr = Traffic(
        [road], n_scenes, params=params, max_vehicles=max_vehicles, seed=int(seed), dtype=dtype
    )
    tr.reset()
    for _ in range(int(warmup)):
        tr.step()
    agents = AgentState.from_traffic(tr, dtype)
    lanes, _ = crop_lanes(
        lanes_from_road(road, dtype=dtype, max_succ=4),
        torch.stack([agents.x[:, 0], agents.y[:, 0]], -1),
        crop_radius,
    )
    gt = [_log_state(tr.state)]
    for _ in range(steps):
        tr.step()
        gt.append(_log_state(tr.state))
    uid0 = gt[0]["uid"]
    ctrl0 = gt[0]["valid"].clone()
    ctrl0[:, 0] = False
    alive = torch.stack([d["valid"] & (d["uid"] == uid0) for d in gt], -1)  # B,V,T+1
    compared = ctrl0[..., None] & (alive.long().cumprod(-1) > 0)
    sim = [dict(gt[0])]
    mans = []
    g = torch.Generator().manual_seed(int(seed) + 1)
    elapsed = 0.0
    policy_was = policy.training
    policy.eval()
    for t in range(steps):
        t0 = time.perf_counter()
        new, _ = policy.step(
            lanes, agents, compared[..., t], generator=g, greedy=greedy, shaping=shaping
        )
        elapsed += time.perf_counter() - t0
        mans.append(new.manoeuvre)
        rep = ~compared[..., t + 1]
        d = gt[t + 1]
        upd = {n: torch.where(rep, d[n], getattr(new, n)) for n in AgentState._FLOATS}
        upd["valid"] = torch.where(rep, d["valid"], new.valid)
        for n, fill in (("lane", -1), ("manoeuvre", KEEP), ("origin", -1)):
            upd[n] = torch.where(rep, torch.full_like(getattr(new, n), fill), getattr(new, n))
        nan = torch.full_like(upd["x"], math.nan)
        for n in AgentState._FLOATS:
            upd[n] = torch.where(upd["valid"], upd[n], nan)
        agents = new.replace(**upd)
        sim.append({n: getattr(agents, n) for n in (*AgentState._FLOATS, "valid")})
    policy.train(policy_was)
    sim_f = _frames(sim, dtype)  # B,T+1,V,7
    gt_f = _frames(gt, dtype)
    sim_valid = torch.stack([d["valid"] for d in sim], 1)
    gt_valid = torch.stack([d["valid"] for d in gt], 1)
    cmp_t = compared.transpose(1, 2)  # B,T+1,V
    n_agents = int(ctrl0.sum())
    out = {"agents": n_agents, "steps": steps, "shaping": bool(shaping), "seed": int(seed)}
    # displacement (agent-major, steps 1..T)
    pred = sim_f[:, 1:, :, :2].transpose(1, 2)
    tgt = gt_f[:, 1:, :, :2].transpose(1, 2)
    m = compared[..., 1:]
    ade, fde = metrics.ade_fde(pred, tgt, m)
    out["ade"], out["fde"] = float(ade), float(fde)
    full = m.all(-1)
    if bool(full.any()):
        _, fde_a = metrics.ade_fde(pred, tgt, m, reduction="none")
        out["fde_5s" if steps == 50 else f"fde_{steps / 10:g}s"] = float(fde_a[full].mean())
    for h in (10, 30):
        if steps >= h:
            a_h, _ = metrics.ade_fde(pred[..., :h, :], tgt[..., :h, :], m[..., :h])
            out[f"ade_{h / 10:g}s"] = float(a_h)
    # collisions and off-road of the compared agents (against everyone present)
    ever = cmp_t[:, 1:].any(1)
    for name, frames, valid in (("", sim_f, sim_valid), ("gt_", gt_f, gt_valid)):
        col = metrics.collisions(frames, valid) & cmp_t
        out[name + "collision_rate"] = float((col[:, 1:].any(1) & ever).sum() / max(n_agents, 1))
        pts = torch.as_tensor(road.points, dtype=dtype)
        w = torch.as_tensor(road.width, dtype=dtype)
        off = metrics.offroad(frames, valid & cmp_t, pts, w, tolerance=offroad_tolerance)
        out[name + "offroad_rate"] = float((off[:, 1:].any(1) & ever).sum() / max(n_agents, 1))
        if not name:  # collisions between two ΔSim-driven vehicles (no replayed partner)
            x = torch.where(valid[..., None], frames, torch.zeros((), dtype=dtype))[:, 1:]
            pair = metrics.boxes_overlap(x[:, :, :, None], x[:, :, None, :])
            both = cmp_t[:, 1:, :, None] & cmp_t[:, 1:, None, :]
            pair &= both & ~torch.eye(x.shape[2], dtype=torch.bool, device=x.device)
            out["collision_rate_sim_sim"] = float(
                (pair.any(-1).any(1) & ever).sum() / max(n_agents, 1)
            )
        traj = frames.transpose(1, 2)  # B,V,T+1,7
        bad = metrics.infeasible_steps(traj, compared & valid.transpose(1, 2))
        n_steps = int((compared[..., 1:] & compared[..., :-1]).sum())
        out[name + "infeasible_steps"] = int(bad.sum())
        out[name + "infeasible_step_rate"] = float(bad.sum() / max(n_steps, 1))
        out[name + "infeasible_rate"] = float(bad.any(-1).sum() / max(n_agents, 1))
    out["ms_per_step"] = 1e3 * elapsed / steps
    if details:
        out["trajectories"] = dict(
            sim=sim_f, gt=gt_f, compared=compared, manoeuvre=torch.stack(mans, -1),
            sim_valid=sim_valid, gt_valid=gt_valid,
        )  # fmt: skip
    return out


# ----------------------------------------------------------------------------- training
def _roads_for(seeds, length_range, seed: int):
    from simsci.driving import make_road

    rng = np.random.default_rng(int(seed))
    lo, hi = (
        (float(length_range), float(length_range))
        if np.isscalar(length_range)
        else map(float, length_range)
    )
    return [make_road(seed=int(s), length=float(rng.uniform(lo, hi))) for s in seeds]


@torch.no_grad()
def bc_report(model: DeltaSim, dataset: BCDataset, batch_size: int = 4096) -> dict:
    """Greedy manoeuvre accuracy, per-class recall and the confusion matrix (rows: label,
    columns: prediction), and control errors under the true manoeuvre (MAE, RMSE)."""
    was = model.training
    model.eval()
    conf = torch.zeros(len(MANOEUVRES), len(MANOEUVRES), dtype=torch.long)
    ea, ek, n = [], [], len(dataset)
    for i in range(0, n, batch_size):
        b = dataset.__getitems__(list(range(i, min(n, i + batch_size))))
        out = model(b["x"])
        lm = model.shaped(out, b["kin"], b["shape"])[0]
        pred = lm.argmax(-1)
        conf += torch.bincount(b["manoeuvre"] * 4 + pred, minlength=16).reshape(4, 4)
        a, k, _ = model.decode(out, b["kin"], b["shape"], manoeuvre=b["manoeuvre"], greedy=True)
        ea.append(a - b["accel"])
        ek.append(k - b["kappa"])
    model.train(was)
    ea, ek = torch.cat(ea), torch.cat(ek)
    recall = {m: float(conf[i, i] / conf[i].sum().clamp(min=1)) for i, m in enumerate(MANOEUVRES)}
    return {
        "samples": n,
        "manoeuvre_acc": float(conf.diag().sum() / conf.sum().clamp(min=1)),
        "recall": recall,
        "confusion": conf.tolist(),
        "accel_mae": float(ea.abs().mean()),
        "accel_rmse": float(ea.pow(2).mean().sqrt()),
        "kappa_mae": float(ek.abs().mean()),
        "kappa_rmse": float(ek.pow(2).mean().sqrt()),
    }


def train_delta_sim(
    out_dir,
    *,
    road_seeds: Sequence[int] = (0, 1, 2, 3, 4, 5),
    val_road_seeds: Sequence[int] = (1000, 1001),
    road_length=(2000.0, 5000.0),
    n_scenes: int = 16,
    steps: int = 3000,
    val_steps: int = 600,
    every: int = 2,
    seed: int = 0,
    hidden: int = 256,
    depth: int = 3,
    beta: float = 20.0,
    epochs: int = 8,
    batch_size: int = 512,
    lr: float = 2e-3,
    max_steps: int | None = None,
    resume=True,
    progress: bool = True,
    log_every: int = 200,
) -> dict:
    """Collect behaviour-cloning data on seeded roads (train and validation roads
    differ; route lengths drawn from ``road_length``; random traffic parameters) -- or
    reuse ``out_dir/data/*.pt`` -- and train a :class:`DeltaSim` with
    :class:`simsci.train.Trainer` (cosine lr, gradient clipping 1, checkpoints under
    ``out_dir/checkpoints``, resumable). Returns the trainer summary, the paths and the
    :func:`bc_report` of the best checkpoint on the validation data."""
    from simsci.train import TrainConfig, Trainer, load_model

    out = Path(out_dir)
    (out / "data").mkdir(parents=True, exist_ok=True)
    sets = {}
    for split, seeds, n_steps, s in (
        ("train", road_seeds, steps, seed),
        ("val", val_road_seeds, val_steps, seed + 1),
    ):
        path = out / "data" / f"{split}.pt"
        if path.exists():
            sets[split] = BCDataset.load(path)
            continue
        roads = _roads_for(seeds, road_length, s)
        ds = collect_bc(
            roads, n_scenes=n_scenes, steps=n_steps, seed=s, every=every, progress=progress
        )
        ds.save(path)
        sets[split] = ds
    model = DeltaSim(hidden=hidden, depth=depth, shaping=True, beta=beta)
    model.set_normalisation(sets["train"].data["x"])
    cfg = TrainConfig(
        epochs=epochs, max_steps=max_steps, batch_size=batch_size, lr=lr, schedule="cosine",
        grad_clip=1.0, device="cpu", progress=progress, log_every=log_every, seed=seed,
        monitor="val_loss",
    )  # fmt: skip
    extra = {"train_data": sets["train"].info, "val_data": sets["val"].info}
    trainer = Trainer(
        model, cfg, sets["train"], sets["val"], out_dir=out, collate_fn=collate_bc,
        resume=resume, extra=extra,
    )  # fmt: skip
    summary = trainer.fit()
    best = out / "checkpoints" / "best.pt"
    report = bc_report(load_model(best), sets["val"])
    return {
        "summary": summary, "best": str(best), "last": str(out / "checkpoints" / "last.pt"),
        "val_report": report, "data": {k: v.info for k, v in sets.items()},
    }  # fmt: skip
