"""Recording a drive through a :class:`~simsci.models.vectorworld.StreamingWorld`, and
writing and plotting it.

The closed-loop rollout itself (a policy driving ``simsci/VectorWorld-v1``'s world for
``km`` kilometres) drives the environment's stream, observations and lane-keeping policy,
so it lives a layer up, with the environments: :func:`simsci.envs.vectorworld_rollout`
(``simsci rollout vectorworld``). What it records is this module's: a
:class:`DriveRecorder` snapshots one world every step (every vehicle slot's state,
validity, vehicle id and controls, the ego's action, and which tile versions are live),
and turns the drive into the rollout's statistics; :func:`write_rollout` writes it as a
trajectory file of kind ``rollout`` (docs/format.md, "VectorWorld drives"): the whole
drive at 10 Hz, and every tile version with the steps it was live, so the file holds the
map that was driven; :func:`plot_route` draws it top-down (matplotlib, optional).

Design choices, and why
-----------------------
- **Every frame, every slot.** The agents are kept as the world holds them, ``(T+1, V,
  7)`` slots with a validity mask and the id of the vehicle in each slot (the ego is id
  0; a slot is reused after a vehicle leaves, so a track is a run of one id): nothing is
  cut or resampled, and the metrics of the file are the metrics of the drive.
- **Tile versions with live intervals.** A tile version (the world's tile id) is stored
  once with its lanes; each interval of steps it was live (kept by the world) is one row
  ``(tile id, cell, first step, last step)``, so a dropped and restored tile has two
  rows and one set of lanes. Nothing assumes one version per cell: the seam gaps pair
  only versions live at the same step (:func:`simsci.driving.metrics.drive_seam_gaps`).
- **One definition of each statistic.** Seam gaps, feasibility (stated speed and heading,
  and recorded positions) and the ego's tile coverage come from
  :mod:`simsci.driving.metrics` (``drive_seam_gaps``, ``drive_feasibility``,
  ``drive_tile_coverage``), which ``simsci driving metrics`` applies to the written file.
"""

from __future__ import annotations

import numpy as np

from simsci.driving import (
    AGENT_FEATURES,
    DT,
    EDGE_TYPES,
    LANE_KINDS,
    LANE_POINTS,
    TILE_SIZE,
    metrics,
)

__all__ = ["DriveRecorder", "write_rollout", "plot_route"]

#: the ``generator`` a written rollout names in its metadata
ROLLOUT_GENERATOR = "simsci.envs.vectorworld_rollout"
#: the ``recorder`` of a written rollout: ``simsci driving metrics`` reads files with it
RECORDER = "simsci.models.vectorworld.DriveRecorder"
SYSTEM = "simsci/VectorWorld-v1"


class DriveRecorder:
    """Records world ``b`` of a :class:`StreamingWorld` one frame at a time: call
    :meth:`snap` after the reset and after every step, then :meth:`finish`."""

    def __init__(self, world, b: int = 0):
        self.world, self.b = world, int(b)
        self._frames: dict[str, list] = {k: [] for k in ("agents", "valid", "uid", "control")}
        self._actions: list[np.ndarray] = []
        self.versions: dict = {}  # tile id -> {"cell", "tile"}
        self._open: dict = {}  # tile id -> the frame its current live interval began
        self._live: list = []  # closed intervals (tile id, first frame, last frame)

    def snap(self, action=None) -> None:
        """Record the current frame: every slot, and the live tile versions. ``action``:
        the ego's action ``(2,)`` that led from the previous frame to this one (None for
        the first frame)."""
        w, b = self.world, self.b
        j = len(self._frames["agents"])
        if (action is None) != (j == 0):
            raise ValueError("give the ego's action with every frame but the first")
        if action is not None:
            self._actions.append(np.asarray(action, np.float64).reshape(2))
        a, v = w.agents()
        self._frames["agents"].append(a[b].cpu().numpy())
        valid = v[b].cpu().numpy()
        self._frames["valid"].append(valid)
        self._frames["uid"].append(np.where(valid, w.uid[b].cpu().numpy(), -1))
        control = np.stack([w.accel[b].cpu().numpy(), w.kappa[b].cpu().numpy()], -1)
        self._frames["control"].append(np.where(valid[:, None], control, np.nan))
        live = {r["tile_id"]: r for r in w.tiles[b].values()}
        for tid in [t for t in self._open if t not in live]:
            self._live.append((tid, self._open.pop(tid), j - 1))
        for tid, rec in live.items():
            self.versions.setdefault(tid, {"cell": rec["cell"], "tile": rec["tile"]})
            self._open.setdefault(tid, j)

    def finish(self, stats: dict) -> dict:
        """The recorded drive, and its statistics added to ``stats`` (see
        :func:`drive_stats`): ``trace`` (``agents`` ``(T+1, V, 7)``, ``valid``, ``uid``
        (-1 where invalid), ``control`` ``(T+1, V, 2)`` [accel, curvature], ``action``
        ``(T, 2)``), ``dt``, ``versions`` (tile id -> cell and tile, own frame), ``live``
        int64 ``(k, 3)`` rows (tile id, first frame, last frame) and ``seam_gaps``.

        The statistics: the ego's ``tile_coverage`` (share of frames on a recorded live
        tile), seam gaps of tiles live together (``seam_endpoints``, ``seam_unmatched``,
        ``seam_gap_median_m`` / ``seam_gap_p90_m`` of the matched ones), feasibility of
        the ego and the NPCs by their stated speed and heading (``ego_infeasible_steps``
        of ``ego_steps_checked`` frame pairs, ``npc_...`` likewise) and by their recorded
        positions (``*_path_infeasible_steps`` of ``*_path_steps_checked`` triples),
        NPC collisions, lane-km of the recorded tile versions and generated agents per
        lane-km."""
        last = len(self._frames["agents"]) - 1
        live = self._live + [(tid, first, last) for tid, first in self._open.items()]
        live.sort(key=lambda r: (r[1], r[0]))
        trace = {k: np.stack(v) for k, v in self._frames.items()}
        trace["action"] = np.asarray(self._actions, np.float64).reshape(-1, 2)
        out = {
            "trace": trace,
            "dt": DT,
            "versions": dict(sorted(self.versions.items())),
            "live": np.asarray(live, np.int64).reshape(-1, 3),
        }
        out["seam_gaps"] = _drive_stats(out, stats)
        return out


def _map(result: dict) -> dict:
    """The tile versions as flat arrays: lanes (tile frame) with their version, and the
    live intervals with their cells."""
    versions, live = result["versions"], result["live"]
    pts = [
        np.asarray(v["tile"]["points"], np.float64).reshape(-1, LANE_POINTS, 2)
        for v in versions.values()
    ]
    return {
        "points": np.concatenate(pts) if pts else np.zeros((0, LANE_POINTS, 2)),
        "lane_tile": np.repeat(np.fromiter(versions, np.int64), [len(p) for p in pts]),
        "tile_id": live[:, 0],
        "tile_cell": np.array([versions[int(t)]["cell"] for t in live[:, 0]], np.int64).reshape(
            -1, 2
        ),
        "first_step": live[:, 1],
        "last_step": live[:, 2],
    }


def _drive_stats(result: dict, stats: dict) -> np.ndarray:
    """Add the statistics of a recorded drive to ``stats`` (:meth:`DriveRecorder.finish`);
    returns its seam gaps."""
    m = _map(result)
    gaps = metrics.drive_seam_gaps(
        m["points"], m["lane_tile"], m["tile_id"], m["tile_cell"], m["first_step"], m["last_step"]
    )
    stats.update(_stats(result["trace"], m, gaps, result["versions"], result["dt"]))
    return gaps


def _stats(tr: dict, m: dict, gaps: np.ndarray, versions: dict, dt: float) -> dict:
    import torch

    agents, valid, uid = tr["agents"], tr["valid"], tr["uid"]
    out = {
        "tile_versions": len(versions),
        "tile_coverage": metrics.drive_tile_coverage(
            agents[:, 0, :2], m["tile_cell"], m["first_step"], m["last_step"], tile_size=TILE_SIZE
        ),
    }
    finite = gaps[np.isfinite(gaps)]
    out["seam_endpoints"] = int(len(gaps))
    out["seam_unmatched"] = int((~np.isfinite(gaps)).sum())
    out["seam_gap_median_m"] = float(np.median(finite)) if len(finite) else None
    out["seam_gap_p90_m"] = float(np.quantile(finite, 0.9)) if len(finite) else None
    feas = metrics.drive_feasibility(agents, valid, uid, dt)
    for who, row in feas.items():
        out[f"{who}_steps_checked"] = row["stated_steps"]
        out[f"{who}_infeasible_steps"] = row["stated_infeasible"]
        out[f"{who}_path_steps_checked"] = row["path_steps"]
        out[f"{who}_path_infeasible_steps"] = row["path_infeasible"]
        out[f"{who}_path_infeasible_agents"] = row["path_agents_infeasible"]
    npc = valid.copy()
    npc[:, 0] = False
    coll = np.asarray(metrics.collisions(torch.as_tensor(agents), torch.as_tensor(valid)))
    lane_km = float(np.asarray(metrics.lane_lengths(m["points"])).sum()) / 1000.0
    generated = sum(len(v["tile"]["agents"]) for v in versions.values())
    out.update(
        npc_agents=feas["npc"]["agents"],
        npc_steps=int(npc.sum()),
        npc_collision_rate=int((coll & npc).sum()) / max(int(npc.sum()), 1),
        mean_npcs=float(npc.sum(1).mean()),
        lane_km=lane_km,
        generated_agents_per_lane_km=generated / max(lane_km, 1e-9),
        # per tile as well: a per-lane-km density hides a sparse map (fewer lanes and
        # fewer vehicles in the same ratio)
        lane_m_per_tile=1000.0 * lane_km / max(len(versions), 1),
        agents_per_tile=generated / max(len(versions), 1),
    )
    return out


def write_rollout(result: dict, path, *, meta: dict | None = None):
    """Write a recorded drive (:func:`simsci.envs.vectorworld_rollout` with
    ``record=True``) to ``path``: a trajectory file of kind ``rollout`` with every frame
    of every vehicle and every tile version that was live (docs/format.md, "VectorWorld
    drives"). Returns the path."""
    import simsci.data

    if "trace" not in result:
        raise ValueError("the rollout was not recorded: run vectorworld_rollout(..., record=True)")
    tr, m = result["trace"], _map(result)
    T1 = len(tr["agents"])
    if T1 < 2:
        raise ValueError("the rollout has fewer than 2 frames; nothing to write")
    dt = float(result["dt"])
    action = np.full((T1, 2), np.nan, np.float32)
    action[:-1] = tr["action"]
    versions = result["versions"]
    ids = np.fromiter(versions, np.int64)
    lanes = {
        "points": m["points"],
        "tile_id": m["lane_tile"],
        "width": _lane_field(versions, "width", np.float32),
        "speed_limit": _lane_field(versions, "speed_limit", np.float32),
        "kind": _lane_field(versions, "kind", np.int64),
    }
    world = m["points"] + TILE_SIZE * _cells_of(versions, ids, m["lane_tile"])[:, None, :]
    succ = _successors(world)
    episode = {
        "t": np.arange(T1) * dt,
        "agents": np.where(tr["valid"][..., None], tr["agents"], np.nan),  # no vehicle: NaN
        "agents_valid": tr["valid"],
        "agent_id": tr["uid"].astype(np.int64),
        "agents_control": tr["control"],
        "action": action,
        "seed": int(result["stats"].get("seed", -1)),
        "graphs": {
            "lanes": {
                "nodes": lanes,
                "edges": {
                    "index": succ,
                    "type": np.full(len(succ), EDGE_TYPES.index("succ"), np.int64),
                },
            },
            "tiles": {
                "nodes": {
                    "tile_id": m["tile_id"],
                    "cell": m["tile_cell"],
                    "first_step": m["first_step"],
                    "last_step": m["last_step"],
                },
                "edges": {"index": np.zeros((0, 2), np.int64)},
            },
        },
    }
    info = {
        "generator": ROLLOUT_GENERATOR,
        "recorder": RECORDER,
        "env_id": SYSTEM,
        "dt": dt,
        "time_unit": "s",
        "tile_size": TILE_SIZE,
        "lane_points": LANE_POINTS,
        "agent_features": list(AGENT_FEATURES),
        "edge_types": list(EDGE_TYPES),
        "lane_kinds": list(LANE_KINDS),
        **(meta or {}),
    }
    # the rollout's statistics, JSON-able (meta refuses NaN: an undefined one is left out)
    info["stats"] = {
        k: v
        for k, v in result["stats"].items()
        if isinstance(v, (int, str)) or (isinstance(v, float) and np.isfinite(v))
    }
    return simsci.data.write(
        path,
        [episode],
        kind="rollout",
        system=SYSTEM,
        episode_fields=("seed",),
        meta=info,
        names={
            "agents": list(AGENT_FEATURES),
            "agents_control": ["accel", "curvature"],
            "action": ["accel", "steer"],
        },
        units={
            "t": "s",
            "agents_control": ["m/s^2", "1/m"],
            "action": ["m/s^2", "rad"],
            "graphs/lanes/nodes/points": "m",
        },
        overwrite=True,
    )


def _lane_field(versions: dict, key: str, dtype) -> np.ndarray:
    parts = [np.asarray(v["tile"][key]).reshape(-1) for v in versions.values()]
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)


def _cells_of(versions: dict, ids: np.ndarray, lane_tile: np.ndarray) -> np.ndarray:
    cells = np.array([versions[int(t)]["cell"] for t in ids], np.float64).reshape(-1, 2)
    return cells[np.searchsorted(ids, lane_tile)] if len(lane_tile) else np.zeros((0, 2))


def _successors(world_points: np.ndarray) -> np.ndarray:
    from simsci.models.vectorworld._tokens import lane_successors

    if len(world_points) < 2:
        return np.zeros((0, 2), np.int64)
    return np.asarray(lane_successors(world_points, tol=0.5), np.int64).reshape(-1, 2)


def plot_route(result: dict, path) -> bool:
    """A top-down plot of what was driven to ``path``: the lanes of every tile version
    that was live (a cell with several versions: the older ones faint), the ego's path,
    NPC tracks in blue; False when matplotlib is not installed. The ego's path is drawn
    wide and light under the lanes: a driver on its lane would otherwise hide it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 8))
    newest = {}
    for tid, v in result["versions"].items():
        newest[v["cell"]] = max(newest.get(v["cell"], tid), tid)
    for tid, v in result["versions"].items():
        c = np.array(v["cell"], np.float64) * TILE_SIZE
        old = newest[v["cell"]] != tid
        ax.add_patch(
            plt.Rectangle(c - TILE_SIZE / 2, TILE_SIZE, TILE_SIZE, fill=False, lw=0.4, ec="0.8")
        )
        for p in np.asarray(v["tile"]["points"], np.float64):
            ax.plot(
                p[:, 0] + c[0],
                p[:, 1] + c[1],
                color="tab:red" if old else "0.45",
                lw=0.5 if old else 0.8,
                alpha=0.4 if old else 1.0,
                zorder=3,
            )
    tr = result["trace"]
    a, uid = tr["agents"], tr["uid"]
    label = "NPCs"
    for j in range(1, a.shape[1]):  # one line per vehicle: break where the slot's id changes
        for u in np.unique(uid[:, j][uid[:, j] > 0]):
            xy = np.where((uid[:, j] == u)[:, None], a[:, j, :2], np.nan)
            ax.plot(xy[:, 0], xy[:, 1], color="tab:blue", lw=1.0, alpha=0.6, zorder=4, label=label)
            label = None
    ax.plot(a[:, 0, 0], a[:, 0, 1], color="tab:green", lw=4.0, alpha=0.45, label="ego", zorder=1)
    s = result["stats"]
    ax.set_title(
        f"VectorWorld rollout: {s['distance_m'] / 1000:.2f} km, "
        f"{len(result['versions'])} tiles, {s['world_spawned']} spawns, "
        f"ended: {s['end_reason']}"
    )
    ax.set_aspect("equal")
    ax.legend(loc="best")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True
