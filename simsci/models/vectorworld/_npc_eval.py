r"""Closed-loop evaluation of ΔSim against the ground-truth traffic
(:func:`rollout_vs_traffic`): displacement, collisions, off-road and kinematic
feasibility of the vehicles it drives, beside the same rates of the ground truth.

Rollouts (:func:`rollout_vs_traffic`)
-------------------------------------
Ground truth and ΔSim start from one :class:`Traffic` state (after a warm-up). The ego
is **replayed** from the ground truth in both (ΔSim's NPCs see the same ego); ΔSim drives
every non-ego vehicle present at the start while its slot holds the same vehicle in
the ground truth. A slot whose vehicle the ground truth removes or replaces (despawn,
spawn) is replayed from the ground truth from then on and no longer compared, so only
vehicles present at the start are compared, up to their despawn.
"""

from __future__ import annotations

import math
import time

import torch

from simsci.driving import (
    AgentState,
    Traffic,
    crop_lanes,
    lanes_from_road,
    metrics,
    sample_params,
)
from simsci.models.vectorworld._checks import _int_arg, _road_list
from simsci.models.vectorworld._features import KEEP
from simsci.models.vectorworld._npc import DeltaSim

__all__ = ["rollout_vs_traffic"]


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
    if not isinstance(policy, DeltaSim):
        raise TypeError(f"policy must be a DeltaSim, got {type(policy).__name__}")
    (road,) = _road_list(road)
    n_scenes = _int_arg("n_scenes", n_scenes, 1)
    steps = _int_arg("steps", steps, 1)
    agents, lanes, gt = _ground_truth(
        road, n_scenes, steps, seed=seed, warmup=warmup, params=params,
        max_vehicles=max_vehicles, crop_radius=crop_radius, dtype=dtype,
    )  # fmt: skip
    uid0 = gt[0]["uid"]
    ctrl0 = gt[0]["valid"].clone()
    ctrl0[:, 0] = False
    alive = torch.stack([d["valid"] & (d["uid"] == uid0) for d in gt], -1)  # B,V,T+1
    compared = ctrl0[..., None] & (alive.long().cumprod(-1) > 0)
    sim, mans, elapsed = _drive(
        policy, lanes, agents, gt, compared, seed=seed, greedy=greedy, shaping=shaping
    )
    sim_f = _frames(sim, dtype)  # B,T+1,V,7
    gt_f = _frames(gt, dtype)
    sim_valid = torch.stack([d["valid"] for d in sim], 1)
    gt_valid = torch.stack([d["valid"] for d in gt], 1)
    n_agents = int(ctrl0.sum())
    out = {"agents": n_agents, "steps": steps, "shaping": bool(shaping), "seed": int(seed)}
    _displacement(out, sim_f, gt_f, compared, steps)
    for name, frames, valid in (("", sim_f, sim_valid), ("gt_", gt_f, gt_valid)):
        _safety(out, name, road, frames, valid, compared, n_agents, offroad_tolerance)
    out["ms_per_step"] = 1e3 * elapsed / steps
    if details:
        out["trajectories"] = dict(
            sim=sim_f, gt=gt_f, compared=compared, manoeuvre=torch.stack(mans, -1),
            sim_valid=sim_valid, gt_valid=gt_valid,
        )  # fmt: skip
    return out


def _ground_truth(road, n_scenes, steps, *, seed, warmup, params, max_vehicles, crop_radius, dtype):
    """The start state after ``warmup`` steps of :class:`Traffic` (parameters drawn with
    ``seed`` unless given), the lanes cropped around each ego, and the logged states of
    ``steps`` more ground-truth steps (the first one the start)."""
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
    return agents, lanes, gt


def _drive(policy, lanes, agents, gt, compared, *, seed, greedy, shaping):
    """ΔSim's closed loop from the start state: it drives the ``compared`` slots, every
    other slot is replayed from the logged ground truth ``gt``. Returns the logged states
    (the first one the start), ΔSim's manoeuvres per step and the seconds spent in
    :meth:`DeltaSim.step`."""
    sim = [dict(gt[0])]
    mans = []
    g = torch.Generator().manual_seed(int(seed) + 1)
    elapsed = 0.0
    policy_was = policy.training
    policy.eval()
    for t in range(len(gt) - 1):
        t0 = time.perf_counter()
        new, _ = policy.step(
            lanes, agents, compared[..., t], generator=g, greedy=greedy, shaping=shaping
        )
        elapsed += time.perf_counter() - t0
        mans.append(new.manoeuvre)
        agents = _replay(new, gt[t + 1], ~compared[..., t + 1])
        sim.append({n: getattr(agents, n) for n in (*AgentState.FLOAT_FIELDS, "valid")})
    policy.train(policy_was)
    return sim, mans, elapsed


def _replay(new: AgentState, d: dict, rep: torch.Tensor) -> AgentState:
    """``new`` with the slots ``rep`` taken from the logged ground-truth state ``d`` (their
    policy memory cleared; invalid slots NaN)."""
    upd = {n: torch.where(rep, d[n], getattr(new, n)) for n in AgentState.FLOAT_FIELDS}
    upd["valid"] = torch.where(rep, d["valid"], new.valid)
    for n, fill in (("lane", -1), ("manoeuvre", KEEP), ("origin", -1)):
        upd[n] = torch.where(rep, torch.full_like(getattr(new, n), fill), getattr(new, n))
    nan = torch.full_like(upd["x"], math.nan)
    for n in AgentState.FLOAT_FIELDS:
        upd[n] = torch.where(upd["valid"], upd[n], nan)
    return new.replace(**upd)


def _displacement(out: dict, sim_f, gt_f, compared, steps: int) -> None:
    """ADE / FDE of the compared agents (agent-major, steps 1..T) into ``out``; FDE over
    the agents compared for the whole horizon, ADE at 1 s and 3 s."""
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


def _safety(out: dict, name: str, road, frames, valid, compared, n_agents, tolerance) -> None:
    """Collisions, off-road and infeasible steps of the compared agents (against everyone
    present) of one rollout into ``out`` (keys prefixed ``name``; ΔSim's, ``name`` "",
    also its collisions between two ΔSim-driven vehicles)."""
    dtype = frames.dtype
    cmp_t = compared.transpose(1, 2)  # B,T+1,V
    ever = cmp_t[:, 1:].any(1)
    col = metrics.collisions(frames, valid) & cmp_t
    out[name + "collision_rate"] = float((col[:, 1:].any(1) & ever).sum() / max(n_agents, 1))
    pts = torch.as_tensor(road.points, dtype=dtype)
    w = torch.as_tensor(road.width, dtype=dtype)
    off = metrics.offroad(frames, valid & cmp_t, pts, w, tolerance=tolerance)
    out[name + "offroad_rate"] = float((off[:, 1:].any(1) & ever).sum() / max(n_agents, 1))
    if not name:  # collisions between two ΔSim-driven vehicles (no replayed partner)
        x = torch.where(valid[..., None], frames, torch.zeros((), dtype=dtype))[:, 1:]
        pair = metrics.boxes_overlap(x[:, :, :, None], x[:, :, None, :])
        both = cmp_t[:, 1:, :, None] & cmp_t[:, 1:, None, :]
        pair &= both & ~torch.eye(x.shape[2], dtype=torch.bool, device=x.device)
        out["collision_rate_sim_sim"] = float((pair.any(-1).any(1) & ever).sum() / max(n_agents, 1))
    traj = frames.transpose(1, 2)  # B,V,T+1,7
    bad = metrics.infeasible_steps(traj, compared & valid.transpose(1, 2))
    n_steps = int((compared[..., 1:] & compared[..., :-1]).sum())
    out[name + "infeasible_steps"] = int(bad.sum())
    out[name + "infeasible_step_rate"] = float(bad.sum() / max(n_steps, 1))
    out[name + "infeasible_rate"] = float(bad.any(-1).sum() / max(n_agents, 1))
