"""The driving world: procedural lane graphs, batched IDM/MOBIL traffic, vector tiles.

>>> from simsci import driving
>>> road = driving.make_road(seed=0, length=5000.0)          # a RoadNetwork (lane graph)
>>> traffic = driving.Traffic([road], 16)                    # 16 scenes on that road
>>> traffic.reset(); traffic.step()                          # 10 Hz, batched in torch
>>> agents, valid = traffic.agents()                         # (16, V, 7), (16, V)
>>> driving.make_scenes(100, out="scenes.h5")                # tiles in the format  # doctest: +SKIP
>>> driving.metrics.collision_rate(agents[:, None], valid[:, None])  # doctest: +SKIP

- :func:`make_road` / :class:`RoadNetwork` / :class:`RoadConfig`: seeded lane graphs of
  multi-lane roads, curves, on/off-ramps, lane drops, signal-free T and 4-way
  intersections and roundabouts, with lane connectivity, right of way and conflicts
  (:mod:`._roads`); :func:`straight_road` a small hand-built one; ``ROAD_MAX_CURVATURE``
  the sharpest lane it draws (1/m).
- :class:`Traffic`: many scenes at once (CPU or CUDA): IDM, MOBIL, yielding at
  junctions, route choice, kinematic bicycle at 10 Hz; ``PARAM_NAMES`` per-episode
  parameters with the literature's defaults (:mod:`._traffic`).
- Tiles (:mod:`._tiles`): ego-centric 64 m x 64 m tiles with 20-point lane polylines and
  typed edges, agents with history, written as kind="scene" (:func:`write_scenes`,
  :func:`read_scene`); :func:`make_scenes` / ``simsci generate driving`` simulates the
  drives and writes them (:mod:`._scenes`).
- Kinematics shared by every driver in these worlds: ``DT`` (10 Hz), the limits
  ``MAX_ACCEL``, ``MAX_BRAKE``, ``MAX_CURVATURE``, ``MAX_CURVATURE_RATE``, ``EGO_SIZE``,
  ``OFFROAD_MARGIN`` and :func:`bicycle_step`, the kinematic bicycle.
- The agent contract (:mod:`._lanes`, :mod:`._agents`) that VectorWorld's ΔSim and any
  other policy drive on: :class:`LaneSet` (:func:`lanes_from_road`,
  :func:`lanes_from_tiles`, :func:`crop_lanes`), :class:`AgentState` (``MANOEUVRES``,
  :func:`manoeuvre_index`), :func:`step_agents` (the bicycle in curvature form) and the
  feasibility limits ``MAX_JERK``, ``MAX_LATERAL_ACCEL``, :func:`curvature_limit`,
  :func:`feasible_box`; :func:`checked_tensor` and :func:`check_shape`, the contract's
  input checks, for code that builds on it.
- Polyline helpers (points ``(n, 2)``): :func:`arc_length`, :func:`point_at`,
  :func:`resample`.
- :mod:`.metrics`: collisions, off-road, kinematic infeasibility, ADE/FDE, density,
  lane-graph statistics, seam gaps, Fréchet and MMD distances.
- The RL environment is ``gymnasium.make("simsci/Driving-v0")`` (:mod:`simsci.envs`).
"""

from simsci.driving import metrics
from simsci.driving._agents import (
    MANOEUVRES,
    MAX_JERK,
    MAX_LATERAL_ACCEL,
    AgentState,
    curvature_limit,
    feasible_box,
    manoeuvre_index,
    step_agents,
)
from simsci.driving._geometry import arc_length, point_at, resample
from simsci.driving._lanes import (
    LaneSet,
    check_shape,
    checked_tensor,
    crop_lanes,
    lanes_from_road,
    lanes_from_tiles,
)
from simsci.driving._roads import (
    LANE_ENDS,
    LANE_KINDS,
    RoadConfig,
    RoadNetwork,
    make_road,
    straight_road,
)
from simsci.driving._roads import (
    MAX_CURVATURE as ROAD_MAX_CURVATURE,
)
from simsci.driving._scenes import driving_scenes as make_scenes
from simsci.driving._scenes import simulate_drives
from simsci.driving._summary import lane_stats, scene_metrics
from simsci.driving._tiles import (
    HISTORY,
    LANE_POINTS,
    MIN_PIECE,
    TILE_SIZE,
    cut_lanes,
    lane_graph,
    read_scene,
    scene_episode,
    tile_cells,
    write_scenes,
)
from simsci.driving._traffic import (
    DEFAULT_PARAMS,
    DT,
    EGO_SIZE,
    MAX_ACCEL,
    MAX_BRAKE,
    MAX_CURVATURE,
    MAX_CURVATURE_RATE,
    OFFROAD_MARGIN,
    PARAM_NAMES,
    RoadPool,
    Traffic,
    bicycle_step,
    default_params,
    sample_params,
)
from simsci.driving.metrics import AGENT_FEATURES, EDGE_TYPES

__all__ = [
    "metrics",
    "AGENT_FEATURES",
    "EDGE_TYPES",
    "LANE_KINDS",
    "LANE_ENDS",
    "ROAD_MAX_CURVATURE",
    "RoadConfig",
    "RoadNetwork",
    "make_road",
    "straight_road",
    "DT",
    "MAX_ACCEL",
    "MAX_BRAKE",
    "MAX_CURVATURE",
    "MAX_CURVATURE_RATE",
    "EGO_SIZE",
    "OFFROAD_MARGIN",
    "bicycle_step",
    "RoadPool",
    "Traffic",
    "PARAM_NAMES",
    "DEFAULT_PARAMS",
    "default_params",
    "sample_params",
    "TILE_SIZE",
    "LANE_POINTS",
    "HISTORY",
    "MIN_PIECE",
    "tile_cells",
    "cut_lanes",
    "lane_graph",
    "lane_stats",
    "scene_metrics",
    "scene_episode",
    "write_scenes",
    "read_scene",
    "make_scenes",
    "simulate_drives",
    "LaneSet",
    "lanes_from_road",
    "lanes_from_tiles",
    "crop_lanes",
    "checked_tensor",
    "check_shape",
    "arc_length",
    "point_at",
    "resample",
    "AgentState",
    "MANOEUVRES",
    "manoeuvre_index",
    "step_agents",
    "MAX_JERK",
    "MAX_LATERAL_ACCEL",
    "curvature_limit",
    "feasible_box",
]
