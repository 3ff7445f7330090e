r"""ΔSim's features: what the policy sees of a :class:`~simsci.driving.LaneSet` and an
:class:`~simsci.driving.AgentState` (the lane contract of :mod:`simsci.driving`), per
agent and in its own frame, and the inputs of the manoeuvre shaping (:func:`_shape_info`).

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
   When ΔSim acts (not in its training data), two agents that are each the other's
   leader in their own lanes (a crossing or overlapping generated lanes, with no
   priority between them) are resolved: the faster one (then the lower slot) does not
   see the other, so one goes instead of both waiting for ever (``give_way``).
5. **Context**: the four nearest other agents (position, heading, speed in the agent
   frame), for crossing traffic the corridors do not show (junction yielding).
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import torch

from simsci.driving import MANOEUVRES, AgentState, LaneSet, curvature_limit
from simsci.models.vectorworld._checks import _check_pair

__all__ = ["FEATURE_DIM", "FEATURE_NAMES", "SHAPE_DIM", "Features", "features"]

KEEP, LEFT, RIGHT, YIELD = range(len(MANOEUVRES))  # indices of MANOEUVRES

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


def features(lanes: LaneSet, agents: AgentState) -> Features:
    """Per-agent features in the agent's frame (see the module docstring), vectorised
    over scenes, agents and lanes. ``lanes`` B = 1 is shared by all scenes.

    Computed on the valid agents only, packed to the front of each scene in slot order
    (the pair terms cost V^2, and a streamed world's 32 vehicle slots are mostly empty):
    an agent's features depend on the valid agents alone, so they are the same; the
    invalid slots get 0 (-1 for lane ids, inf for gaps)."""
    lanes, _ = _check_pair(lanes, agents)
    packed, order = _pack(agents)
    if order is None:
        return _features(lanes, agents)
    return _unpack(_features(lanes, packed), order, agents.shape[1])


def _pack(agents: AgentState) -> tuple[AgentState, torch.Tensor | None]:
    """The valid agents moved to the front of each scene in slot order, ``(B, K)`` with
    ``K`` the most valid agents of a scene, and ``order`` (B, K), the slot of each
    packed agent; ``(agents, None)`` when packing saves nothing (all slots or none)."""
    B, V = agents.shape
    K = int(agents.valid.sum(1).max()) if B and V else 0
    if K >= V or K == 0:
        return agents, None
    order = _slot_order(agents.valid, K)
    fields = dataclasses.fields(AgentState)
    packed = AgentState(**{f.name: _gather_slots(getattr(agents, f.name), order) for f in fields})
    return packed, order


def _slot_order(valid: torch.Tensor, K: int) -> torch.Tensor:
    """(B, K): the slots of each row's valid entries of ``valid`` (B, V) first, in slot
    order (a stable sort), then its invalid ones: the packing of :func:`_pack`."""
    return torch.sort((~valid).to(torch.int8), dim=1, stable=True).indices[:, :K]


def _slot_index(order: torch.Tensor, rest) -> torch.Tensor:
    """``order`` (B, K) expanded over trailing dims ``rest``: a gather/scatter index."""
    return order.reshape(*order.shape, *([1] * len(rest))).expand(*order.shape, *rest)


def _gather_slots(t: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """The slots ``order`` (B, K) of ``t`` (B, V, ...): (B, K, ...)."""
    return torch.gather(t, 1, _slot_index(order, t.shape[2:]))


def _unpack(f: Features, order: torch.Tensor, V: int) -> Features:
    """Features of packed agents ``(B, K, ...)`` back in their slots ``(B, V, ...)``."""
    out = {}
    for field in dataclasses.fields(Features):
        t = getattr(f, field.name)
        if t.dtype == torch.bool:
            fill = False
        elif not t.is_floating_point():
            fill = -1 if field.name in ("lane", "neighbour", "origin") else 0
        elif "gap" in field.name or field.name == "path_left":
            fill = math.inf
        else:
            fill = 0.0
        full = torch.full((t.shape[0], V, *t.shape[2:]), fill, dtype=t.dtype, device=t.device)
        out[field.name] = full.scatter(1, _slot_index(order, t.shape[2:]), t)
    return Features(**out)


def _features(lanes: LaneSet, agents: AgentState, give_way: bool = False) -> Features:
    """:func:`features` on every slot (checked inputs); ``give_way``: ΔSim acting, not
    its training data (module docstring, 4; :func:`_give_way`)."""
    geo = lanes.geometry()
    dt = agents.x.dtype
    geo = {
        k: (v.to(dt) if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in geo.items()
    }
    s = _own_state(agents, geo["L"])
    a = _associate(geo, s, agents)
    nb = _neighbours(geo, s, a)
    c = _corridors(geo, s, a, nb, agents.route)
    occ = _occupancy(s, c, give_way)
    ctx = _context(s, occ)
    man = _manoeuvre_inputs(geo, s, a, nb, c, agents)
    x = _assemble(geo, s, a, nb, c, occ, ctx, man, agents.manoeuvre)
    valid, zero = s.valid, s.zero
    kin = torch.stack([agents.v, agents.accel, agents.kappa, agents.length], -1)
    kin = torch.where(valid[..., None], kin, zero)
    return Features(
        x=x, kin=kin, lane=a.lane, offset=a.off_cur, heading_error=a.heading_error,
        neighbour=nb.neighbour, need=man.need, commit=man.commit, origin=man.origin,
        leader_gap=occ.lead_gap, leader_dv=occ.lead_dv, follower_gap=occ.fol_gap,
        follower_dv=occ.fol_dv, path_left=c.path_left, valid=valid,
    )  # fmt: skip


def _own_state(agents: AgentState, L: int) -> SimpleNamespace:
    """The agents' state with invalid entries replaced (0; sizes 1), and the scene
    offsets ``b_off`` (B, 1) = b * L into the flattened lanes."""
    B, V = agents.shape
    dev, dt = agents.x.device, agents.x.dtype
    valid = agents.valid
    zero = torch.zeros((), dtype=dt, device=dev)
    th = torch.where(valid, agents.theta, zero)
    return SimpleNamespace(
        B=B, V=V, L=L, dev=dev, dt=dt, valid=valid, zero=zero,
        px=torch.where(valid, agents.x, zero), py=torch.where(valid, agents.y, zero), th=th,
        v=torch.where(valid, agents.v, zero), acc=torch.where(valid, agents.accel, zero),
        kap=torch.where(valid, agents.kappa, zero),
        alen=torch.where(valid, agents.length, torch.ones((), dtype=dt, device=dev)),
        awid=torch.where(valid, agents.width, torch.ones((), dtype=dt, device=dev)),
        ch=torch.cos(th), sh=torch.sin(th), b_off=(torch.arange(B, device=dev) * L)[:, None],
    )  # fmt: skip


def _associate(geo: dict, s: SimpleNamespace, agents: AgentState) -> SimpleNamespace:
    """Feature 1: the candidate lanes of every agent, their exact projections, and the
    associated lane with hysteresis (module docstring)."""
    B, V, L, dt, zero = s.B, s.V, s.L, s.dt, s.zero
    px, py, ch, sh, valid, b_off = s.px, s.py, s.ch, s.sh, s.valid, s.b_off
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
    cos_cur = torch.where(found, pick(cos_e), torch.ones_like(s.v))
    heading_error = torch.atan2(sin_e, cos_cur)
    return SimpleNamespace(
        cand=cand, cand_ok=cand_ok, bflat_c=bflat_c, s_c=s_c, off_c=off_c, tan_c=tan_c,
        over_c=over_c, lane=lane, found=found, s_cur=s_cur, off_cur=off_cur, tan_cur=tan_cur,
        lidx=lidx, w_cur=w_cur, sin_e=sin_e, cos_cur=cos_cur, heading_error=heading_error,
    )  # fmt: skip


def _neighbours(geo: dict, s: SimpleNamespace, a: SimpleNamespace) -> SimpleNamespace:
    """Feature 2: the left and right neighbour lanes among the candidates, found
    geometrically (module docstring)."""
    zero, cand, lane = s.zero, a.cand, a.lane
    w_c = geo["width"][a.bflat_c + cand.clamp(min=0)]
    rel = a.off_cur[..., None] - a.off_c  # centre of cand relative to the current centre
    expct = 0.5 * (a.w_cur[..., None] + w_c)
    tan_agree = (a.tan_c * a.tan_cur[..., None, :]).sum(-1) > _NEIGH_COS
    side_ok = a.cand_ok & a.found[..., None] & tan_agree & (a.over_c < 1.0)
    side_ok = side_ok & (cand != lane[..., None])
    neigh, s_nb, off_nb, w_nb, avail = [], [], [], [], []
    for sign in (1.0, -1.0):
        err = (rel - sign * expct).abs()
        ok = side_ok & (err < 0.4 * expct)
        sc = torch.where(ok, err + 0.5 * a.over_c, torch.full_like(err, math.inf))
        bi = sc.argmin(-1, keepdim=True)
        f = torch.gather(ok, -1, bi).squeeze(-1)
        g = lambda z, bi=bi: torch.gather(z, -1, bi).squeeze(-1)  # noqa: E731
        neigh.append(torch.where(f, g(cand), torch.full_like(lane, -1)))
        s_nb.append(g(a.s_c))
        off_nb.append(torch.where(f, g(a.off_c), zero))
        w_nb.append(torch.where(f, g(w_c), zero))
        avail.append(f)
    return SimpleNamespace(
        neighbour=torch.stack(neigh, -1), avail=torch.stack(avail, -1), s_nb=s_nb,
        off_nb=off_nb, w_nb=w_nb,
    )  # fmt: skip


def _corridors(geo, s: SimpleNamespace, a, nb, route) -> SimpleNamespace:
    """Feature 3: the current, left and right corridors sampled along the path, in the
    agent frame: reference points, pursuit curvature, speed limits, path left."""
    B, V, dt, dev, zero = s.B, s.V, s.dt, s.dev, s.zero
    lane, neighbour, s_nb, w_nb = a.lane, nb.neighbour, nb.s_nb, nb.w_nb
    c_lane = torch.stack([lane, neighbour[..., 0], neighbour[..., 1]], -1)  # B,V,3
    c_s = torch.stack([a.s_cur, s_nb[0], s_nb[1]], -1)
    c_ok = c_lane >= 0
    c_w = torch.stack([a.w_cur, w_nb[0], w_nb[1]], -1)
    grid = torch.tensor(_GRID, dtype=dt, device=dev)
    look = (0.8 * s.v + 4.0).clamp(6.0, 25.0)
    offs = torch.cat([grid.expand(B, V, 3, -1), look[..., None, None].expand(B, V, 3, 1)], -1)
    bflat_g = s.b_off[..., None, None]
    chain = _chain(geo, s.b_off[..., None], c_lane, c_s, route[..., None].expand_as(c_lane))
    w_lane, w_s, w_ok = _locate(chain, offs)
    w_ok &= c_ok[..., None]
    xy, tg = _point_at(geo, bflat_g, w_lane, w_s)
    lim = geo["limit"][bflat_g + w_lane.clamp(min=0)]
    # path left: the end of the last lane ahead, capped
    fwd_end = torch.where(chain[0] >= 0, chain[2], torch.full_like(chain[2], -math.inf))
    left_len = fwd_end.amax(-1)
    path_left = torch.where(c_ok, left_len.clamp(max=_GAP_CAP), zero)
    # agent frame
    rx = xy[..., 0] - s.px[..., None, None]
    ry = xy[..., 1] - s.py[..., None, None]
    cth, sth = s.ch[..., None, None], s.sh[..., None, None]
    fx = cth * rx + sth * ry
    fy = -sth * rx + cth * ry
    tsin = -sth * tg[..., 0] + cth * tg[..., 1]  # sin of path heading relative to agent
    tcos = cth * tg[..., 0] + sth * tg[..., 1]
    okf = w_ok.to(dt)
    ref_i = list(_REF_IDX)
    lx, ly = fx[..., -1], fy[..., -1]
    pursuit = torch.where(w_ok[..., -1], 2 * ly / (lx * lx + ly * ly).clamp(min=1.0), zero)
    return SimpleNamespace(
        c_ok=c_ok, c_w=c_w, w_ok=w_ok, fx=fx, fy=fy, tsin=tsin, tcos=tcos,
        ref_x=fx[..., ref_i] * okf[..., ref_i], ref_y=fy[..., ref_i] * okf[..., ref_i],
        ref_s=tsin[..., ref_i] * okf[..., ref_i], pursuit=pursuit,
        limits=torch.where(w_ok[..., list(_LIM_IDX)], lim[..., list(_LIM_IDX)], zero),
        path_left=path_left,
    )  # fmt: skip


def _occupancy(s: SimpleNamespace, c: SimpleNamespace, give_way: bool = False) -> SimpleNamespace:
    """Feature 4: every agent j against every corridor sample of agent i: the leader and
    follower in each corridor (gap, speed along the path minus ours, acceleration).
    ``give_way``: mutual leaders resolved (:func:`_give_way`)."""
    B, V, dt, dev, zero, valid = s.B, s.V, s.dt, s.dev, s.zero, s.valid
    px, py, ch, sh = s.px, s.py, s.ch, s.sh
    fx, fy, w_ok = c.fx, c.fy, c.w_ok
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
    tsg, tcg = c.tsin[..., :-1], c.tcos[..., :-1]
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
    reach = c.c_w[..., None] / 2 + s.awid[:, None, None, :] / 2 - 0.3
    inside = other & near_ok & (lat.abs() < reach) & c.c_ok[..., None] & valid[:, :, None, None]
    half = 0.5 * (s.alen[:, :, None, None] + s.alen[:, None, None, :]).expand_as(lon)
    inf = torch.full_like(lon, math.inf)
    ahead = inside & (lon > 0)
    la = torch.where(ahead, lon, inf).min(-1)
    if give_way:  # of two agents each the other's leader, the faster goes (docstring)
        la = _give_way(s, ahead, la, lon)
    fol = inside & (lon <= 0)
    fb = torch.where(fol, -lon, inf).min(-1)
    # speed of j along i's path at its sample: heading of j relative to the path tangent
    thj = s.th[:, None, None, :] - s.th[:, :, None, None]  # heading of j in i's frame
    vj_along = s.v[:, None, None, :] * (torch.cos(thj) * tcx + torch.sin(thj) * tsy)
    aj = s.acc[:, None, None, :].expand_as(lon)
    lead_found = torch.isfinite(la.values)
    fol_found = torch.isfinite(fb.values)
    gl = lambda z, ix: torch.gather(z, -1, ix.unsqueeze(-1)).squeeze(-1)  # noqa: E731
    lead_v = gl(vj_along, la.indices)
    return SimpleNamespace(
        jx=jx, jy=jy, other=other, lead_found=lead_found, fol_found=fol_found,
        lead_gap=torch.where(lead_found, la.values - gl(half, la.indices), inf[..., 0]),
        lead_dv=torch.where(lead_found, lead_v - s.v[..., None], zero),
        lead_a=torch.where(lead_found, gl(aj, la.indices), zero),
        fol_gap=torch.where(fol_found, fb.values - gl(half, fb.indices), inf[..., 0]),
        fol_dv=torch.where(fol_found, gl(vj_along, fb.indices) - s.v[..., None], zero),
    )  # fmt: skip


def _give_way(s: SimpleNamespace, ahead, la, lon):
    """:func:`_occupancy`'s ``give_way``: the leaders ``la`` (a ``min`` over agents j of
    ``lon`` where ``ahead``, (B, V, 3)) with, for the faster of two agents each the
    other's own-lane leader (then the lower slot), the other one left out. Two such
    agents (a crossing, or overlapping generated lanes, with no priority between them)
    would each wait for the other for ever; the ground truth's junctions have priority
    rules, so its traffic never needs this."""
    B, V = s.B, s.V
    lead0, found0 = la.indices[:, :, 0], torch.isfinite(la.values[:, :, 0])
    slots = torch.arange(V, device=s.dev).expand(B, V)
    mutual = found0 & found0.gather(1, lead0) & (lead0.gather(1, lead0) == slots)
    v_other = s.v.gather(1, lead0)
    goes = mutual & ((s.v > v_other) | ((s.v == v_other) & (slots < lead0)))
    if not bool(goes.any()):
        return la
    drop = torch.zeros_like(ahead)
    b_i, i_i = torch.nonzero(goes, as_tuple=True)
    drop[b_i, i_i, :, lead0[b_i, i_i]] = True
    return torch.where(ahead & ~drop, lon, torch.full_like(lon, math.inf)).min(-1)


def _context(s: SimpleNamespace, occ: SimpleNamespace) -> torch.Tensor:
    """Feature 5: the nearest other agents (found, position, heading, speed in the agent
    frame), (B, V, _N_CONTEXT, 6)."""
    B, V, dt, zero, valid = s.B, s.V, s.dt, s.zero, s.valid
    jx, jy, other = occ.jx, occ.jy, occ.other
    dist_ij = jx * jx + jy * jy
    dist_ij = torch.where(other[:, :, 0], dist_ij, torch.full_like(dist_ij, math.inf))
    nk = min(_N_CONTEXT, V)
    nd, ni = torch.topk(dist_ij, nk, dim=-1, largest=False)
    n_ok = torch.isfinite(nd) & valid[..., None]
    gc = lambda z: torch.gather(z, -1, ni)  # noqa: E731
    th_rel = gc(s.th[:, None, :] - s.th[:, :, None])
    ctx = torch.stack(
        [n_ok.to(dt), gc(jx) / 50, gc(jy) / 50, torch.cos(th_rel), torch.sin(th_rel),
         gc(s.v[:, None, :].expand(B, V, V)) / 20], -1,
    )  # fmt: skip
    ctx = torch.where(n_ok[..., None], ctx, zero)
    if nk < _N_CONTEXT:
        ctx = torch.cat([ctx, ctx.new_zeros(B, V, _N_CONTEXT - nk, 6)], 2)
    return ctx


def _manoeuvre_inputs(geo, s, a, nb, c, agents: AgentState) -> SimpleNamespace:
    """What the manoeuvre shaping needs: the curvature a change to each side needs (and
    its ratio to the limit), the committed change and the change's origin carried on."""
    zero, valid, v, lane, avail_t = s.zero, s.valid, s.v, a.lane, nb.avail
    lat_shift = torch.stack([nb.off_nb[0], nb.off_nb[1]], -1).abs()
    D = torch.minimum((_LC_TIME * v).clamp(min=_LC_MIN)[..., None], c.path_left[..., 1:])
    need = math.pi**2 * lat_shift / (2 * D.clamp(min=1.0).pow(2))
    need = torch.where(avail_t, need, zero)
    kmax_now = curvature_limit(v)
    need_ratio = (need / kmax_now[..., None]).clamp(max=3.0)
    prev = agents.manoeuvre
    origin = torch.where(agents.origin < s.L, agents.origin, -1)
    orig_next = _next_lane(geo, s.b_off, origin, agents.route)
    on_origin = (origin >= 0) & ((lane == origin) | (lane == orig_next)) & (lane >= 0)
    changing = (prev == LEFT) | (prev == RIGHT)
    side_av = torch.where(prev == LEFT, avail_t[..., 0], avail_t[..., 1])
    commit = torch.where(changing & on_origin & side_av & valid, prev, torch.zeros_like(prev))
    new_origin = torch.where(changing & on_origin, lane, torch.full_like(origin, -1))
    return SimpleNamespace(need=need, need_ratio=need_ratio, commit=commit, origin=new_origin)


def _assemble(geo, s, a, nb, c, occ, ctx, man, prev) -> torch.Tensor:
    """The feature rows ``x`` (B, V, FEATURE_DIM) in the order of :data:`FEATURE_NAMES`
    (scaled; 0 for invalid agents)."""
    B, V, dt, zero, v = s.B, s.V, s.dt, s.zero, s.v
    found, avail_t, off_nb, w_nb = a.found, nb.avail, nb.off_nb, nb.w_nb
    ref_x, ref_y, ref_s, pursuit, path_left = c.ref_x, c.ref_y, c.ref_s, c.pursuit, c.path_left
    lim_cur = torch.where(found, geo["limit"][a.lidx], zero)
    own = [v / 20, s.acc / 4, s.kap / 0.05, s.alen / 5, s.awid / 2]
    own += [(prev == m).to(dt) for m in range(len(MANOEUVRES))] + [(man.commit > 0).to(dt)]
    cols = own
    cols += [found.to(dt), a.off_cur / 2, a.sin_e, a.cos_cur - 1, a.w_cur / 4]
    cols += [torch.where(found, v / lim_cur.clamp(min=1.0), zero)]
    cols += list((c.limits[:, :, 0] / 30).unbind(-1))
    for k in range(3):
        if k > 0:
            j = k - 1
            cols += [
                avail_t[..., j].to(dt), (off_nb[j]) / 2,
                torch.where(avail_t[..., j], ref_s[:, :, k, 0], zero), w_nb[j] / 4,
                c.limits[:, :, k, 0] / 30,
            ]  # fmt: skip
        cols += list((ref_x[:, :, k] / 40).unbind(-1)) + list((ref_y[:, :, k] / 10).unbind(-1))
        cols += list(ref_s[:, :, k].unbind(-1))
        cols += [pursuit[:, :, k] / 0.05, path_left[:, :, k] / _GAP_CAP]
        if k > 0:
            cols += [torch.where(avail_t[..., k - 1], man.need_ratio[..., k - 1], zero)]
        ok_k = found if k == 0 else avail_t[..., k - 1]
        cols += [torch.where(ok_k, (pursuit[:, :, k] - s.kap) / 0.01, zero)]
    for k in range(3):
        g = occ.lead_gap[..., k].clamp(-10.0, _GAP_CAP)
        fg = occ.fol_gap[..., k].clamp(-10.0, _GAP_CAP)
        lf, ff = occ.lead_found[..., k], occ.fol_found[..., k]
        cols += [
            lf.to(dt), torch.where(lf, g, torch.full_like(g, _GAP_CAP)) / 50,
            torch.where(lf, 1.0 / g.clamp(min=1.0), zero), occ.lead_dv[..., k] / 10,
            occ.lead_a[..., k] / 4, ff.to(dt),
            torch.where(ff, fg, torch.full_like(fg, _GAP_CAP)) / 50, occ.fol_dv[..., k] / 10,
        ]  # fmt: skip
    x = torch.cat([torch.stack(cols, -1), ctx.reshape(B, V, -1)], -1)
    return torch.where(s.valid[..., None], x, zero)


# ----------------------------------------------------------------------------- shaping inputs
SHAPE_DIM = 13


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
