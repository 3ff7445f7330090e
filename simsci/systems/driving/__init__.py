"""The driving world: procedural lane graphs, batched IDM/MOBIL traffic, vector tiles.

>>> from simsci.systems import driving
>>> road = driving.make_road(seed=0, length=5000.0)          # a RoadNetwork (lane graph)
>>> traffic = driving.Traffic([road], 16)                    # 16 scenes on that road
>>> traffic.reset(); traffic.step()                          # 10 Hz, batched in torch
>>> agents, valid = traffic.agents()                         # (16, V, 7), (16, V)
>>> driving.make_scenes(100, out="scenes.h5")                # tiles in the format  # doctest: +SKIP
>>> driving.metrics.collision_rate(agents[:, None], valid[:, None])  # doctest: +SKIP

- :func:`make_road` / :class:`RoadNetwork` / :class:`RoadConfig`: seeded lane graphs of
  multi-lane roads, curves, on/off-ramps, lane drops, signal-free T and 4-way
  intersections and roundabouts, with lane connectivity, right of way and conflicts
  (:mod:`._roads`); :func:`straight_road` a small hand-built one.
- :class:`Traffic`: many scenes at once (CPU or CUDA): IDM, MOBIL, yielding at
  junctions, route choice, kinematic bicycle at 10 Hz; ``PARAM_NAMES`` per-episode
  parameters with the literature's defaults (:mod:`._traffic`).
- Tiles (:mod:`._tiles`): ego-centric 64 m x 64 m tiles with 20-point lane polylines and
  typed edges, agents with history, written as kind="scene" (:func:`write_scenes`,
  :func:`read_scene`); :func:`make_scenes` / ``simsci generate driving`` simulates the
  drives and writes them (:mod:`._scenes`).
- :mod:`.metrics`: collisions, off-road, kinematic infeasibility, ADE/FDE, density,
  lane-graph statistics, seam gaps, Fréchet and MMD distances.
- The RL environment is ``gymnasium.make("simsci/Driving-v0")`` (:mod:`simsci.envs`).
"""

from simsci.systems.driving import metrics
from simsci.systems.driving._roads import (
    LANE_ENDS,
    LANE_KINDS,
    RoadConfig,
    RoadNetwork,
    make_road,
    straight_road,
)
from simsci.systems.driving._scenes import driving_scenes as make_scenes
from simsci.systems.driving._scenes import simulate_drives
from simsci.systems.driving._tiles import (
    HISTORY,
    LANE_POINTS,
    TILE_SIZE,
    read_scene,
    scene_episode,
    write_scenes,
)
from simsci.systems.driving._traffic import (
    DEFAULT_PARAMS,
    PARAM_NAMES,
    RoadPool,
    Traffic,
    default_params,
    sample_params,
)
from simsci.systems.driving.metrics import AGENT_FEATURES, EDGE_TYPES

__all__ = [
    "metrics",
    "AGENT_FEATURES",
    "EDGE_TYPES",
    "LANE_KINDS",
    "LANE_ENDS",
    "RoadConfig",
    "RoadNetwork",
    "make_road",
    "straight_road",
    "RoadPool",
    "Traffic",
    "PARAM_NAMES",
    "DEFAULT_PARAMS",
    "default_params",
    "sample_params",
    "TILE_SIZE",
    "LANE_POINTS",
    "HISTORY",
    "scene_episode",
    "write_scenes",
    "read_scene",
    "make_scenes",
    "simulate_drives",
]
