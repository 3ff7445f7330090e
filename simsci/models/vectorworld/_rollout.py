"""Recording a drive through a :class:`~simsci.models.vectorworld.StreamingWorld`, and
writing and plotting it.

The closed-loop rollout itself (a policy driving ``simsci/VectorWorld-v0``'s world for
``km`` kilometres) drives the environment's stream, observations and lane-keeping policy,
so it lives a layer up, with the environments: :func:`simsci.envs.vectorworld_rollout`
(``simsci rollout vectorworld``). What it records is this module's: a
:class:`DriveRecorder` snapshots one world every step (agents, validity, vehicle ids,
the tile of each cell the ego visits) and turns the drive into the rollout's NPC and seam
statistics; :func:`write_rollout` writes the recorded episode in the scene-tile format
(:func:`simsci.driving.write_scenes`), cut exactly as the ground-truth drives are (the
visited cells' generated lanes become the lane graph, agents with a 1 s history in each
tile's frame), so the driving world's readers, metrics and VectorWorld's own training
read a generated drive like a simulated one. :func:`plot_route` draws the whole route
top-down (matplotlib, optional).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from simsci.models.vectorworld._world import _cell

__all__ = ["DriveRecorder", "write_rollout", "plot_route"]

#: the ``generator`` a written rollout names in its metadata
ROLLOUT_GENERATOR = "simsci.envs.vectorworld_rollout"


class DriveRecorder:
    """Records world ``b`` of a :class:`StreamingWorld` one frame at a time: call
    :meth:`snap` after the reset and after every step, then :meth:`finish`."""

    def __init__(self, world, b: int = 0):
        self.world, self.b = world, int(b)
        self._agents: list[np.ndarray] = []
        self._valid: list[np.ndarray] = []
        self._uid: list[np.ndarray] = []
        self.tiles: dict = {}  # cell -> the tile the ego found there, in visiting order

    def snap(self) -> None:
        """Record the current frame (and the tile of the ego's cell on a first visit)."""
        w, b = self.world, self.b
        a, v = w.agents()
        self._agents.append(a[b].double().cpu().numpy())
        self._valid.append(v[b].cpu().numpy())
        self._uid.append(w.uid[b].cpu().numpy().copy())
        cell = _cell(float(w.x[b, 0]), float(w.y[b, 0]))
        if cell not in self.tiles:
            slot = w._slot_of(b, cell)
            if slot is not None:
                self.tiles[cell] = w.tiles[b][slot]["tile"]

    def finish(self, stats: dict) -> dict:
        """The recorded drive: ``trace`` (``agents`` ``(T, V, 7)``, ``valid``, ``uid``),
        ``tiles`` (cell -> tile) and ``seam_gaps``; adds the NPC statistics (collision and
        infeasibility rates, agents per lane km) and the seam gaps to ``stats``."""
        return _recorded(stats, self._agents, self._valid, self._uid, self.tiles)


def _recorded(stats: dict, trace_a, trace_v, trace_u, visits: dict) -> dict:
    """The recorded drive (``trace``, ``tiles``, ``seam_gaps``) of :class:`DriveRecorder`;
    adds the NPC and seam statistics to ``stats``."""
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
    """Write a recorded rollout (:func:`simsci.envs.vectorworld_rollout` with
    ``record=True``) to ``path`` in the scene-tile format."""
    from simsci.driving import scene_episode, write_scenes

    if "trace" not in result:
        raise ValueError("the rollout was not recorded: run vectorworld_rollout(..., record=True)")
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
    info = {"generator": ROLLOUT_GENERATOR, **(meta or {})}
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
        f"tiles, {s['world_spawned']} spawns, ended: {s['end_reason']}"
    )
    ax.set_aspect("equal")
    ax.legend(loc="best")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True
