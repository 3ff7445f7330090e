"""The ``driving`` data set: drives through procedural roads, cut into vector tiles.

``simsci.datasets.make_dataset("driving", n, out=...)`` / ``simsci generate driving --n 2000 --out
scenes.h5`` writes ``n`` episodes of kind "scene" (the layout: :mod:`._tiles` and
docs/format.md). Each episode is one drive of ``drive_length`` m by an
autopilot ego (IDM along its route) through IDM/MOBIL traffic, recorded at 10 Hz and cut
into the 64 m tiles the ego passes.

Design choices, and why:

- **Roads are shared by a few episodes** (``episodes_per_road``, each starting at its own
  random point of the route): generating a 5 km network costs more than simulating a
  600 m drive on it, and starting points spread along the route still visit every kind
  of element.
- **Traffic parameters are drawn per episode** (``random_params``, uniform over
  :data:`PARAM_RANGES`) and stored in ``/episodes/params``: the data covers drivers from
  timid to aggressive and densities from light to dense.
- **A warm-up of ``warmup`` s** before recording lets the traffic placed at reset settle
  into car-following (spawned cars start at equilibrium speeds, not at their final
  gaps); the first tile's agents still have no history before the recording started
  (``agents_history_valid`` says so).
- **Vehicles are tracked by identity**, not by slot: a slot freed by a vehicle that left
  the window can be taken by a new one in the same step, and a history must not join
  two cars.
- **Batched**: ``batch`` drives are simulated as one tensor operation on ``device``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import torch

from simsci._seeding import check_count, check_positive, progress_bar, split_ids, streams
from simsci.driving._roads import make_road
from simsci.driving._tiles import scene_episode, write_scenes
from simsci.driving._traffic import (
    DT,
    PARAM_NAMES,
    RoadPool,
    Traffic,
    default_params,
    sample_params,
)

__all__ = ["driving_scenes", "simulate_drives"]


def simulate_drives(
    roads,
    nets,
    starts,
    params,
    *,
    drive_length: float,
    warmup: float = 2.0,
    max_vehicles: int = 48,
    seed: int = 0,
    device=None,
) -> list[dict]:
    """Simulate one autopilot drive per entry of ``nets`` (network ids into ``roads``)
    from route position ``starts`` [m] with traffic ``params`` (rows of PARAM_NAMES).

    Returns per drive ``{"times" (T,), "agents" (T, U, 7), "valid" (T, U), "driven"}`` in
    the world frame, one column per vehicle identity (the ego first), starting after
    ``warmup``; a drive that has not reached ``drive_length`` when 90% of the batch has
    (plus 30% more time) ends shorter.
    """

    pool = RoadPool(roads, device=device)
    n = len(nets)
    tr = Traffic(pool, n, params=params, max_vehicles=max_vehicles, ego="autopilot", seed=seed)
    tr.reset(nets=torch.as_tensor(nets), start=torch.as_tensor(starts, dtype=torch.float64))
    for _ in range(int(round(warmup / DT))):
        tr.step()
    start_s = tr.ego_route_s.clone()
    frames, valids, uids = [], [], []
    # the batch runs until every ego has driven drive_length, but a few egos stuck in
    # dense traffic must not hold up the rest: once 90% are done the others get 30%
    # more time (their drives end shorter), and nobody more than the time to drive it
    # at 2 m/s
    max_steps = int(math.ceil(drive_length / 2.0 / DT))
    deadline = max_steps
    for step in range(max_steps):
        agents, valid = tr.agents()
        frames.append(agents.cpu())
        valids.append(valid.cpu())
        uids.append(tr.state.uid.cpu())
        done = (tr.ego_route_s - start_s) >= drive_length
        if bool(done.all()) or step >= deadline:
            break
        if deadline == max_steps and float(done.float().mean()) >= 0.9:
            deadline = int(1.3 * step) + 1
        tr.step()
    frames = torch.stack(frames, 1).numpy()  # n,T,V,7
    valids = torch.stack(valids, 1).numpy()
    uids = torch.stack(uids, 1).numpy()
    out = []
    driven = (tr.ego_route_s - start_s).cpu().numpy()
    for b in range(n):
        # keep the frames up to the drive length for this ego
        T = frames.shape[1]
        done = np.flatnonzero(_ego_progress(frames[b, :, 0, :2]) >= drive_length)
        T = int(done[0]) + 1 if done.size else T
        ids = np.unique(uids[b, :T][valids[b, :T]])
        col = {int(u): j for j, u in enumerate(ids)}  # uid 0 (the ego) comes first
        agents = np.full((T, len(ids), 7), np.nan, dtype=np.float32)
        valid = np.zeros((T, len(ids)), dtype=bool)
        t_idx, slot = np.nonzero(valids[b, :T])
        cols = np.array([col[int(u)] for u in uids[b, :T][t_idx, slot]], dtype=np.int64)
        agents[t_idx, cols] = frames[b, :T][t_idx, slot]
        valid[t_idx, cols] = True
        out.append(
            {
                "times": np.arange(T) * DT,
                "agents": agents,
                "valid": valid,
                "driven": float(driven[b]),
            }
        )
    return out


def _ego_progress(xy: np.ndarray) -> np.ndarray:
    """Distance travelled along a path (T, 2) at each sample."""
    return np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(xy, axis=0), axis=1))])


def driving_scenes(
    n: int,
    *,
    out: str | os.PathLike,
    seed: int = 0,
    progress: bool = False,
    drive_length: float = 600.0,
    route_length: float = 5000.0,
    episodes_per_road: int = 8,
    random_params: bool = True,
    density: float | None = None,
    batch: int = 256,
    max_vehicles: int = 48,
    split=(0.8, 0.1, 0.1),
    device: str | None = None,
) -> Path:
    """Write ``n`` drives as tiled scenes to ``out`` (see the module docstring); returns
    the path. ``density`` fixes the vehicles per km and lane (else drawn per episode)."""

    n = check_count(n)
    drive_length = check_positive("drive_length", drive_length)
    route_length = check_positive("route_length", route_length)
    per_road = check_positive("episodes_per_road", episodes_per_road, integer=True)
    batch = check_positive("batch", batch, integer=True)
    margin = 200.0
    if drive_length + margin > route_length:
        raise ValueError(
            f"a route of {route_length:g} m is shorter than the requested drive of "
            f"{drive_length:g} m plus {margin:g} m of margin: raise route_length or lower "
            "drive_length"
        )
    gens = streams(seed, ("roads", "start", "params", "split", "traffic"))
    fixed = {} if density is None else {"density": float(density)}
    if random_params:
        params = sample_params(n, gens["params"], **fixed)
    else:
        params = default_params(n, **fixed)
    splits = split_ids(n, split, gens["split"])
    num_roads = math.ceil(n / per_road)
    road_seeds = torch.randint(2**31 - 1, (num_roads,), generator=gens["roads"]).tolist()
    u = torch.rand(n, generator=gens["start"], dtype=torch.float64)
    bar = progress_bar(n, "driving scenes", progress)

    def episodes():
        for lo in range(0, n, batch):
            hi = min(lo + batch, n)
            road_ids = sorted({i // per_road for i in range(lo, hi)})
            roads = [make_road(seed=road_seeds[r], length=route_length) for r in road_ids]
            local = {r: j for j, r in enumerate(road_ids)}
            nets = [local[i // per_road] for i in range(lo, hi)]
            room = torch.tensor(
                [roads[j].route_s()[-1] - drive_length - margin for j in nets], dtype=torch.float64
            )
            starts = 20.0 + u[lo:hi] * (room - 20.0).clamp(min=0.0)
            drives = simulate_drives(
                roads,
                nets,
                starts,
                params[lo:hi],
                drive_length=drive_length,
                max_vehicles=max_vehicles,
                seed=int(torch.randint(2**31 - 1, (1,), generator=gens["traffic"])),
                device=device,
            )
            for k, d in enumerate(drives):
                i = lo + k
                ep = scene_episode(
                    roads[nets[k]], d["times"], d["agents"], d["valid"], params=params[i].numpy()
                )
                ep["split"] = np.uint8(splits[i])
                if bar is not None:
                    bar.update(1)
                yield ep

    meta = {
        "generator": "simsci.driving.driving_scenes",
        "seed": seed,
        "drive_length": drive_length,
        "route_length": route_length,
        "episodes_per_road": per_road,
        "random_params": bool(random_params),
        "density": density,
        "road_seeds": road_seeds,
    }
    try:
        return write_scenes(out, episodes(), meta=meta, param_names=PARAM_NAMES)
    finally:
        if bar is not None:
            bar.close()
