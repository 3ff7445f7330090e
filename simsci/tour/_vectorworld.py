"""A closed-loop drive through a world VectorWorld generates as the ego advances.

25. load the VectorWorld shipped with simsci (simsci/pretrained/vectorworld, its files
    checked against their hashes): a tile generator, a motion-aware gated VAE and ΔSim
    trained on CPU on 2,000 simulated drives;
26. drive 1 km in closed loop with the lane-keeping policy
    (simsci.envs.vectorworld_rollout) while tiles are outpainted ahead in one
    network call each and ΔSim drives the NPCs; report the real-time factor, tiles,
    spawns, NPC infeasibility, off-road steps (and those past the end of the generated
    lanes), seam gaps and why the drive ended; write the drive in the scene format
    (OUT/vectorworld_rollout.h5) and plot the route (OUT/vectorworld_route.png).
"""

from __future__ import annotations

import time

from simsci.tour._common import Context, banner

KEEP = (
    "distance_m", "end_reason", "real_time_factor", "world_tiles", "world_resampled",
    "world_spawned", "npc_infeasible_steps", "ego_offroad_steps", "ego_left_lanes_steps",
    "ego_collision_steps", "seam_gap_median_m",
)  # fmt: skip


def run(ctx: Context) -> dict:
    from simsci.envs import vectorworld_rollout
    from simsci.models.vectorworld import plot_route, pretrained, write_rollout

    km = 0.2 if ctx.quick else 1.0
    banner("25. VectorWorld: the shipped world model (tiles, VAE, ΔSim)")
    start = time.perf_counter()
    model = pretrained()
    print(f"ready in {time.perf_counter() - start:.0f} s ({model.tiles.layout})")
    banner(f"26. a {km:g} km closed-loop rollout: tiles outpainted in one step, ΔSim NPCs")
    res = vectorworld_rollout(model, km=km, seed=ctx.seed, device=ctx.device, stop_on_failure=False)
    s = res["stats"]
    write_rollout(res, ctx.out / "vectorworld_rollout.h5")
    plot = plot_route(res, ctx.out / "vectorworld_route.png")
    print(
        f"drove {s['distance_m']:.0f} m in {s['sim_time_s']:.0f} s ({s['real_time_factor']:.0f}x "
        f"real time): {s['world_tiles']} tiles ({s['world_resampled']} resampled, "
        f"{s['world_empty_tiles']} empty), {s['world_spawned']} NPCs spawned, NPC infeasible "
        f"steps {s['npc_infeasible_steps']}, ego off-road steps {s['ego_offroad_steps']} "
        f"({s['ego_left_lanes_steps']} past the end of the generated lanes), collision steps "
        f"{s['ego_collision_steps']}; ended: {s['end_reason']}"
    )
    print(
        "[the shipped world is a CPU-trained default whose maps are still far from the "
        "ground truth (benchmarks/README.md); train your own with `simsci train vectorworld "
        "--data scenes.h5` and `simsci rollout vectorworld --checkpoint DIR`]"
    )
    route = str(ctx.out / "vectorworld_route.png") if plot else None
    return {**{k: s[k] for k in KEEP}, "plot": route}
