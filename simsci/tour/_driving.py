"""A procedural road, a lane-keeping drive through IDM/MOBIL traffic, and tiled scenes.

22. generate a 5 km procedural road network (curves, ramps, junctions, roundabouts);
23. drive 70 s in simsci/Driving-v0 with the lane-keeping policy through IDM/MOBIL
    traffic; report the ego's outcome, the traffic's collision rate and infeasible
    steps, and plot the drive top-down to OUT/driving_rollout.png;
24. simulate 16 drives, cut them into 64 m vector tiles (kind "scene") and report
    their metrics (agents per km, collision/off-road rates, seam gaps).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from simsci.tour._common import Context, banner, pyplot, save_plot


def run(ctx: Context) -> dict:
    """A procedural road, a drive through IDM/MOBIL traffic in simsci/Driving-v0 with the
    lane-keeping policy, the traffic's metrics, and tiled scenes in the format."""
    from simsci import driving

    banner("22. a procedural road network (5 km route)")
    road = driving.make_road(seed=ctx.seed + 3, length=5000.0)
    kinds = dict(zip(driving.LANE_KINDS, np.bincount(road.kind, minlength=4).tolist()))
    print(f"{len(road.length)} lane segments {kinds}, {len(road.conflict_lanes)} conflicts")
    res = _drive(ctx)
    res["scenes"] = _scenes(ctx)
    return res


def _drive(ctx: Context) -> dict:
    """Step 23: one ego with the lane-keeping policy; its outcome and the traffic's."""
    from simsci.driving import metrics
    from simsci.envs import DrivingEnv, lane_keeping_policy

    steps = 60 if ctx.quick else 700
    banner(f"23. drive {steps / 10:.0f} s in simsci/Driving-v0 (lane keeping, IDM/MOBIL traffic)")
    env = DrivingEnv(num_roads=1, road_seed=ctx.seed, route_length=5000.0, max_episode_steps=2000)
    obs, info = env.reset(seed=ctx.seed)
    tr = env._vec.world.traffic
    frames, valid, uids, ego_path = [], [], [], []
    ret, start = 0.0, time.perf_counter()
    for _ in range(steps):
        obs, r, term, trunc, info = env.step(lane_keeping_policy(obs))
        ret += r
        a, v = tr.agents()
        frames.append(a[0].clone())
        valid.append(v[0].clone())
        uids.append(tr.state.uid[0].clone())
        ego_path.append(a[0, 0, :2].tolist())
        if term or trunc:
            break
    seconds = time.perf_counter() - start
    a, v, u = torch.stack(frames), torch.stack(valid), torch.stack(uids)
    rel = a.clone()
    rel[..., :2] -= a[:, :1, :2]  # ego-relative: exact box tests in float32
    same = torch.zeros_like(v)
    same[1:] = v[1:] & v[:-1] & (u[1:] == u[:-1])
    traj = a.permute(1, 0, 2).clone()  # positions relative to a fixed point for float32
    traj[..., :2] -= a[0, 0, :2]
    bad = metrics.infeasible_steps(traj, same.T) & same.T[:, 1:] & same.T[:, :-1]
    res = {
        "distance_m": round(info["distance"], 1),
        "ego_collision": info.get("collision", False),
        "ego_offroad": info.get("offroad", False),
        "return": round(ret, 2),
        "traffic_collision_rate": float(metrics.collision_rate(rel, v)),
        "traffic_infeasible_steps": int(bad.sum()),
        "vehicles_seen": int(torch.unique(u[v]).numel()),
        "real_time_factor": round(len(frames) * 0.1 / seconds, 1),
    }
    print(
        f"drove {res['distance_m']:.0f} m in {len(frames) / 10:.0f} s; collision "
        f"{res['ego_collision']}, off-road {res['ego_offroad']}; traffic: "
        f"{res['vehicles_seen']} vehicles, collision rate {res['traffic_collision_rate']:.3f}, "
        f"{res['traffic_infeasible_steps']} infeasible steps; {res['real_time_factor']:.0f}x "
        "real time"
    )
    res["plot"] = _plot(
        tr.pool.roads[int(tr.net[0])], np.array(ego_path), a[-1].numpy(), v[-1].numpy(),
        ctx.out / "driving_rollout.png",
    )  # fmt: skip
    return res


def _scenes(ctx: Context) -> dict:
    """Step 24: drives cut into vector tiles in the scene format, and their metrics."""
    from simsci import driving

    n = 2 if ctx.quick else 16
    banner(f"24. {n} drives cut into 64 m vector tiles (kind scene) and their metrics")
    path = driving.make_scenes(
        n, out=ctx.out / "driving_scenes.h5", drive_length=200.0 if ctx.quick else 600.0,
        route_length=1500.0 if ctx.quick else 5000.0, episodes_per_road=4, seed=ctx.seed,
    )  # fmt: skip
    m = driving.scene_metrics(path)
    print(
        f"{m['tiles']} tiles, {m['agents']} agents ({m['agents_per_km_mean']:.1f} per lane-km); "
        f"collision {m['collision_rate']:.3f}, off-road {m['offroad_rate']:.3f}, infeasible "
        f"{m['infeasible_step_rate']:.3f}; seam gap median {m['seam_gap_median_m']:.1e} m"
    )
    print("[`simsci generate driving --n 2000 --out scenes.h5`; `simsci driving metrics FILE`]")
    return {k: m[k] for k in ("tiles", "agents", "collision_rate", "seam_gap_median_m")}


def _plot(road, ego_path, agents, valid, path: Path) -> str | None:
    """The route's lanes near the drive, the ego's path and the last frame's vehicles."""
    plt = pyplot()
    if plt is None:
        return None
    from simsci.driving.metrics import box_corners

    corners = np.asarray(box_corners(agents[valid]))
    fig, axes = plt.subplots(1, 2, figsize=(13, 6.5))
    views = [
        (ego_path.min(0) - 60, ego_path.max(0) + 60, "the drive"),
        (ego_path[-1] - 70, ego_path[-1] + 70, "the last frame, 140 m around the ego"),
    ]
    for ax, (lo, hi, title) in zip(axes, views):
        for lane in range(len(road.length)):
            p = road.points[lane, : road.num_points[lane]]
            if ((p >= lo) & (p <= hi)).all(1).any():
                ax.plot(p[:, 0], p[:, 1], color="0.6", lw=0.6)
        ax.plot(ego_path[:, 0], ego_path[:, 1], color="tab:green", lw=1.5, label="ego path")
        for i, c in enumerate(corners):
            ax.fill(c[:, 0], c[:, 1], color="tab:green" if i == 0 else "tab:blue")
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_aspect("equal")
        ax.set_title(title)
        ax.set_xlabel("x [m]")
    axes[0].legend(loc="upper left")
    fig.suptitle("simsci/Driving-v0: lane keeping through IDM/MOBIL traffic")
    return save_plot(plt, fig, path, dpi=110)
