"""Closed-loop VectorWorld rollouts: drive a policy through a streamed world, record it.

:func:`rollout` runs one ego (``simsci/VectorWorld-v0``'s world, observation and reward)
for ``km`` kilometres under a policy (the lane-keeping driver of ``simsci/Driving-v0``
by default, or any ``policy(obs) -> action`` on batched observations), and returns the
rollout's statistics (distance, steps, wall time and real-time factor, tiles generated
and resampled, spawns, collisions, off-road, NPC kinematic infeasibility, agents per km,
seam gaps) and, with ``record=True``, the episode in the scene-tile format
(:func:`simsci.driving.write_scenes`), cut exactly as the ground-truth drives
are: the visited cells' generated lanes become the lane graph, agents with a 1 s history
in each tile's frame, so the driving world's readers, metrics and VectorWorld's own
training read a generated drive like a simulated one. :func:`plot_route` draws the whole
route top-down (matplotlib, optional).
"""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import numpy as np
import torch

__all__ = ["rollout", "write_rollout", "plot_route"]


def _policy_fn(policy):
    from simsci.envs import lane_keeping_policy

    if policy is None or policy == "lane_keeping":
        return lane_keeping_policy
    if policy == "zero":
        return lambda obs: np.zeros((len(obs["ego"]), 2), np.float32)
    if callable(policy):
        return policy
    raise ValueError(f"policy must be 'lane_keeping', 'zero' or a callable, got {policy!r}")


def rollout(
    model=None,
    *,
    km: float = 1.0,
    policy="lane_keeping",
    seed: int = 0,
    max_steps: int | None = None,
    record: bool = True,
    stop_on_failure: bool = True,
    device=None,
    **world_kwargs,
) -> dict:
    """Drive ``km`` kilometres in a streamed world of ``model`` (a :class:`VectorWorld`,
    a checkpoint directory, or None for :func:`small_default`); see the module docstring.
    ``max_steps``: a cap (default: 2 m/s on average, ``km * 1000 / 2`` s at 10 Hz);
    ``world_kwargs``: max_agents, max_tiles, shaping, tile_steps (1: one-step MeanFlow;
    more: that many flow-matching Euler steps, ``tile_mode="flow"``) of the world.
    ``stop_on_failure``: end at the first collision or off-road (else keep driving and
    count them). Returns a dict: ``stats`` and, with ``record``, ``trace``
    (per-step agents ``(T, V, 7)``, ``valid``, ``uid``) and ``tiles`` (cell -> tile)."""
    from simsci.envs._vectorworld import _Stream
    from simsci.models.vectorworld._bundle import VectorWorld, small_default
    from simsci.models.vectorworld._world import _cell

    if not (isinstance(km, (int, float)) and math.isfinite(km) and km > 0):
        raise ValueError(f"km must be a positive number of kilometres, got {km!r}")
    if model is None:
        model = small_default()
    elif not all(hasattr(model, part) for part in ("tiles", "vae", "npc")):
        model = VectorWorld.load(model)
    fn = _policy_fn(policy)
    goal = float(km) * 1000.0
    limit = int(max_steps) if max_steps is not None else int(goal / 2.0 * 10)
    stream = _Stream(
        1,
        checkpoint=model,
        route_length=max(5000.0, goal + 200.0),
        max_distance=goal,
        max_episode_steps=limit,
        num_agents=16,
        num_lanes=8,
        max_vehicles=world_kwargs.pop("max_agents", 32),
        max_tiles=world_kwargs.pop("max_tiles", 6),
        shaping=world_kwargs.pop("shaping", True),
        tile_steps=world_kwargs.pop("tile_steps", 1),
        tile_mode=world_kwargs.pop("tile_mode", "flow"),
        device=device,
    )
    if world_kwargs:
        raise TypeError(f"rollout got unknown world options {sorted(world_kwargs)}")
    gen = torch.Generator().manual_seed(int(seed))
    t0 = time.perf_counter()
    stream.reset(gen)
    sim = stream.sim
    trace_a, trace_v, trace_u = [], [], []
    visits: dict = {}

    def snap():
        a, v = sim.agents()
        trace_a.append(a[0].double().cpu().numpy())
        trace_v.append(v[0].cpu().numpy())
        trace_u.append(sim.uid[0].cpu().numpy().copy())
        cell = _cell(float(sim.x[0, 0]), float(sim.y[0, 0]))
        if cell not in visits:
            slot = sim._slot_of(0, cell)
            if slot is not None:
                visits[cell] = sim.tiles[0][slot]["tile"]

    snap()
    collisions = offroad = 0
    steps = 0
    ended = "distance"
    obs = stream.observe()
    while float(sim.driven[0]) < goal:
        if steps >= limit:
            ended = "steps"
            break
        action = np.asarray(fn({k: v.cpu().numpy() for k, v in obs.items()}), np.float32)
        action = torch.as_tensor(action.reshape(1, 2)).clamp(
            torch.tensor([-8.0, -0.5]), torch.tensor([4.0, 0.5])
        )
        _, term, _, coll, off = stream.step(action.to(stream.device))
        steps += 1
        collisions += int(coll[0])
        offroad += int(off[0])
        if record:
            snap()
        obs = stream.observe()
        if bool(term[0]) and stop_on_failure:
            ended = "collision" if bool(coll[0]) else "offroad"
            break
    wall = time.perf_counter() - t0
    distance = float(sim.driven[0])
    stats = {
        "km_requested": float(km),
        "distance_m": distance,
        "steps": steps,
        "sim_time_s": steps * 0.1,
        "wall_s": wall,
        "real_time_factor": steps * 0.1 / max(wall, 1e-9),
        "ended": ended,
        "ego_collision_steps": collisions,
        "ego_offroad_steps": offroad,
        **{f"world_{k}": int(v) for k, v in sim.stats.items()},
    }
    out = {"stats": stats}
    if record:
        out.update(_recorded(stats, trace_a, trace_v, trace_u, visits))
    return out


def _recorded(stats: dict, trace_a, trace_v, trace_u, visits: dict) -> dict:
    """The recorded drive (``trace``, ``tiles``, ``seam_gaps``) of :func:`rollout`; adds
    the NPC and seam statistics to ``stats``."""
    out = {}
    agents = np.stack(trace_a)
    valid = np.stack(trace_v)
    uid = np.stack(trace_u)
    stats.update(_trace_stats(agents, valid, uid, visits))
    out["trace"] = {"agents": agents, "valid": valid, "uid": uid}
    out["tiles"] = visits
    out["seam_gaps"] = _seams(visits)
    gaps = out["seam_gaps"]
    finite = gaps[np.isfinite(gaps)]
    stats["seam_endpoints"] = int(len(gaps))
    stats["seam_unmatched"] = int((~np.isfinite(gaps)).sum())
    stats["seam_gap_median_m"] = float(np.median(finite)) if len(finite) else None
    stats["seam_gap_p90_m"] = float(np.quantile(finite, 0.9)) if len(finite) else None
    return out


def _trace_stats(agents, valid, uid, tiles) -> dict:
    """NPC collisions / infeasibility over the rollout and agents per km of lane."""
    from simsci.driving import metrics

    T, V, _ = agents.shape
    # per-vehicle tracks: a slot's frames belong to one vehicle while its uid holds
    same = np.ones((T, V), bool)
    same[1:] = uid[1:] == uid[:-1]
    a = torch.as_tensor(agents)
    m = torch.as_tensor(valid)
    coll = metrics.collisions(a[:, None], m[:, None])[:, 0]  # (T, V)
    npc = m.clone()
    npc[:, 0] = False
    n_npc_steps = int(npc.sum())
    npc_coll = int((coll & npc).sum())
    # infeasible steps of NPC tracks: consecutive frames of one vehicle
    traj = a.permute(1, 0, 2)  # V, T, 7
    ok = (m & torch.as_tensor(same)).permute(1, 0)
    ok[0] = False  # the ego is the user's
    bad = metrics.infeasible_steps(traj, ok)  # V, T-1
    pair = ok[:, 1:] & ok[:, :-1] & torch.as_tensor(same[1:].T)
    lane_len = sum(
        float(np.linalg.norm(np.diff(t["points"], axis=1), axis=-1).sum()) for t in tiles.values()
    )
    gen_agents = sum(len(t["agents"]) for t in tiles.values())
    return {
        "npc_steps": n_npc_steps,
        "npc_collision_rate": npc_coll / max(n_npc_steps, 1),
        "npc_infeasible_rate": float((bad & pair).sum()) / max(int(pair.sum()), 1),
        "npc_infeasible_steps": int((bad & pair).sum()),
        "mean_npcs": float(npc.sum(1).float().mean()),
        "tiles_visited": len(tiles),
        "lane_km_visited": lane_len / 1000.0,
        "generated_agents_per_lane_km": gen_agents / max(lane_len / 1000.0, 1e-9),
    }


def _seams(tiles) -> np.ndarray:
    """Endpoint gaps at the seams between the visited tiles (as :func:`._world.seam_gaps`)."""
    from simsci.models.vectorworld._world import _seam_gaps_of

    return _seam_gaps_of(
        {
            cell: np.asarray(t["points"], np.float64) + np.array(cell, np.float64) * 64.0
            for cell, t in tiles.items()
        }
    )


def _pseudo_road(tiles) -> SimpleNamespace:
    """The visited tiles' generated lanes (world frame) as a road the tiler can cut."""
    from simsci.models.vectorworld._tokens import lane_successors

    pts, width, speed, kind = [], [], [], []
    for cell, t in tiles.items():
        if len(t["points"]) == 0:
            continue
        pts.append(np.asarray(t["points"], np.float64) + np.array(cell, np.float64) * 64.0)
        width.append(np.asarray(t["width"], np.float64))
        speed.append(np.asarray(t["speed_limit"], np.float64))
        kind.append(np.asarray(t["kind"], np.int64))
    P = np.concatenate(pts) if pts else np.zeros((0, 20, 2))
    L = len(P)
    succ = np.full((L, 4), -1, np.int64)
    fill = np.zeros(L, np.int64)
    for s, d in np.asarray(lane_successors(P, tol=0.5)).reshape(-1, 2) if L > 1 else []:
        if fill[s] < 4:
            succ[s, fill[s]] = d
            fill[s] += 1
    return SimpleNamespace(
        points=P,
        num_points=np.full(L, P.shape[1] if L else 20, np.int64),
        length=np.linalg.norm(np.diff(P, axis=1), axis=-1).sum(-1) if L else np.zeros(0),
        width=np.concatenate(width) if width else np.zeros(0),
        speed_limit=np.concatenate(speed) if speed else np.zeros(0),
        kind=np.concatenate(kind) if kind else np.zeros(0, np.int64),
        succ=succ,
        left=np.full(L, -1, np.int64),
        right=np.full(L, -1, np.int64),
    )


def write_rollout(result: dict, path, *, meta: dict | None = None):
    """Write :func:`rollout`'s recorded episode to ``path`` in the scene-tile format."""
    from simsci.driving import scene_episode, write_scenes

    if "trace" not in result:
        raise ValueError("the rollout was not recorded: run rollout(..., record=True)")
    tr = result["trace"]
    T = len(tr["agents"])
    if T < 2:
        raise ValueError("the rollout has fewer than 2 frames; nothing to write")
    from simsci.driving import tile_cells

    road = _pseudo_road(result["tiles"])
    # the format needs a lane in every tile: a drive that left the generated lanes into
    # a lane-less cell is written up to the step it entered that cell
    origin = np.array([0.0, 0.0, 0.0])
    cells, first = tile_cells(np.asarray(tr["agents"][:, 0, :2], np.float64), origin[:2], 0.0)
    end = T
    for cell, f in zip(np.asarray(cells), np.asarray(first)):
        tile = result["tiles"].get((int(cell[0]), int(cell[1])))
        if tile is None or len(tile["points"]) == 0:
            end = max(int(np.floor(f)), 2)
            break
    times = np.arange(end) * 0.1
    ep = scene_episode(road, times, tr["agents"][:end], tr["valid"][:end], origin_pose=origin)
    info = {"generator": "simsci.models.vectorworld.rollout", **(meta or {})}
    info["written_steps"] = int(end)
    info.update({k: v for k, v in result["stats"].items() if isinstance(v, (int, float, str))})
    return write_scenes(path, [ep], meta=info, overwrite=True)


def plot_route(result: dict, path) -> bool:
    """A top-down plot of the whole route (lanes of the visited tiles, the ego's path,
    NPC tracks) to ``path``; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 8))
    for cell, t in result["tiles"].items():
        c = np.array(cell, np.float64) * 64.0
        ax.add_patch(plt.Rectangle(c - 32.0, 64.0, 64.0, fill=False, lw=0.4, ec="0.8", zorder=0))
        for p in np.asarray(t["points"], np.float64):
            ax.plot(p[:, 0] + c[0], p[:, 1] + c[1], color="0.45", lw=0.8, zorder=1)
    tr = result["trace"]
    a, v = tr["agents"], tr["valid"]
    for j in range(1, a.shape[1]):
        if v[:, j].any():
            xy = np.where(v[:, j, None], a[:, j, :2], np.nan)
            ax.plot(xy[:, 0], xy[:, 1], color="tab:blue", lw=0.5, alpha=0.6, zorder=2)
    ax.plot(a[:, 0, 0], a[:, 0, 1], color="tab:green", lw=2.0, label="ego", zorder=3)
    s = result["stats"]
    ax.set_title(
        f"VectorWorld rollout: {s['distance_m'] / 1000:.2f} km, {s.get('tiles_visited', 0)} "
        f"tiles, {s['world_spawned']} spawns, ended: {s['ended']}"
    )
    ax.set_aspect("equal")
    ax.legend(loc="best")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True
