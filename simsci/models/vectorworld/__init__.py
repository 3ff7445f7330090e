"""VectorWorld: a streaming vector-graph world model for closed-loop driving rollouts.

Built on the driving world of :mod:`simsci.driving` (its scene tiles are the
training data, its metrics the yardstick). Three trained parts and the world they make:

- :class:`TileGenerator` (:mod:`._outpaint`, over :mod:`._dit` and :mod:`._tokens`): an
  edge-gated relational DiT trained with interval-conditioned MeanFlow (JVP target ``u =
  v - (t - r) du/dt``, large-step supervision) that outpaints a 64 m lane/agent tile from
  its already generated neighbour in one network call, seam endpoints pinned; a
  multi-step flow sampler of the same network for comparison; first tiles without
  context.
- :class:`MotionGatedVAE` (:mod:`._vae`): history-compatible initial agents on a tile's
  lanes (geometric lane graph in torch-geometric, a gate on each agent's motion history,
  histories integrated backwards by the kinematic bicycle).
- :class:`DeltaSim` (:mod:`._npc`): the NPC policy, a discrete manoeuvre (keep, left,
  right, yield) and binned continuous controls whose logits are shaped by a
  differentiable kinematic-feasibility term, over :func:`features` (:mod:`._features`),
  cloned from the ground-truth traffic (:func:`collect_bc`, :func:`train_delta_sim`:
  :mod:`._bc`) and compared with it in closed loop (:func:`rollout_vs_traffic`:
  :mod:`._npc_eval`). Its inputs are the lane contract of :mod:`simsci.driving`
  (:class:`LaneSet`, :class:`AgentState`, :func:`step_agents`, re-exported here).
- :class:`StreamingWorld` (:mod:`._world`): ``n`` closed-loop worlds that generate tiles
  ahead of the ego and drop those behind, spawn the generated agents and drive them with
  ΔSim (braking for the ego ahead in their path whatever lane either is on,
  ``npc_yield``); ``gymnasium.make("simsci/VectorWorld-v1")`` wraps it with the spaces of
  ``simsci/Driving-v0``. The closed-loop rollout (a policy driving that world for a
  distance) lives with the environments it drives, a layer above this package:
  :func:`simsci.envs.vectorworld_rollout` (``simsci rollout vectorworld``; it was
  ``simsci.models.vectorworld.rollout`` before). What it records and writes is here:
  :class:`DriveRecorder`, :func:`write_rollout` (kind ``rollout``: every agent at every
  step, the ego's actions, every tile version with the steps it was live) and
  :func:`plot_route` (:mod:`._rollout`).
- :class:`VectorWorld` (:mod:`._bundle`): the three parts in one checkpoint directory
  (with openings made ahead for an opening bank, :meth:`VectorWorld.make_openings`);
  :func:`train_vectorworld` (``simsci train vectorworld --data scenes.h5``) trains them;
  :func:`pretrained` is the world shipped with simsci (package data, hash-checked; what
  ``checkpoint=None`` means everywhere), :func:`small_default` a small model trained on
  the fly (cached) for tests (``checkpoint="small"``); :func:`resolve_world` maps a
  ``checkpoint`` argument onto one of them.

>>> from simsci.models import vectorworld as vw
>>> from simsci.envs import vectorworld_rollout
>>> model = vw.small_default()                                  # doctest: +SKIP
>>> out = vectorworld_rollout(model, km=1.0)                    # doctest: +SKIP
>>> out["stats"]["real_time_factor"], out["stats"]["end_reason"]  # doctest: +SKIP
>>> vw.write_rollout(out, "drive.h5")                           # doctest: +SKIP
"""

from simsci.driving import MANOEUVRES, AgentState, LaneSet, lanes_from_road, step_agents
from simsci.models.vectorworld._bc import collect_bc, train_delta_sim
from simsci.models.vectorworld._bundle import (
    VectorWorld,
    pretrained,
    resolve_world,
    small_default,
    train_vectorworld,
)
from simsci.models.vectorworld._dit import (
    EdgeGatedAttention,
    EdgeGatedRelationalDiT,
    RelationalDiTConfig,
    meanflow_loss,
    sample_multistep,
    sample_one_step,
    sample_times,
)
from simsci.models.vectorworld._evaluate import evaluate_tile_generator, tile_metrics
from simsci.models.vectorworld._features import features
from simsci.models.vectorworld._npc import DeltaSim
from simsci.models.vectorworld._npc_eval import rollout_vs_traffic
from simsci.models.vectorworld._outpaint import TileGenerator, train_tile_generator
from simsci.models.vectorworld._rollout import DriveRecorder, plot_route, write_rollout
from simsci.models.vectorworld._tokens import (
    GENERATOR_LAYOUT,
    RELATIONS,
    TOKEN_DIM,
    TilePairs,
    TokenLayout,
    collate_pairs,
    lane_successors,
    outpaint_pair,
    tile_tokens,
    tokens_to_tile,
)
from simsci.models.vectorworld._vae import MotionGatedVAE, scene_init_metrics, train_vae
from simsci.models.vectorworld._world import StreamingWorld, seam_gaps

__all__ = [
    "VectorWorld",
    "train_vectorworld",
    "small_default",
    "pretrained",
    "resolve_world",
    "StreamingWorld",
    "seam_gaps",
    "DriveRecorder",
    "write_rollout",
    "plot_route",
    "TileGenerator",
    "train_tile_generator",
    "tile_metrics",
    "evaluate_tile_generator",
    "MotionGatedVAE",
    "train_vae",
    "scene_init_metrics",
    "DeltaSim",
    "MANOEUVRES",
    "LaneSet",
    "AgentState",
    "features",
    "step_agents",
    "lanes_from_road",
    "collect_bc",
    "train_delta_sim",
    "rollout_vs_traffic",
    "EdgeGatedRelationalDiT",
    "EdgeGatedAttention",
    "RelationalDiTConfig",
    "meanflow_loss",
    "sample_one_step",
    "sample_multistep",
    "sample_times",
    "RELATIONS",
    "TOKEN_DIM",
    "GENERATOR_LAYOUT",
    "TokenLayout",
    "TilePairs",
    "collate_pairs",
    "outpaint_pair",
    "tile_tokens",
    "tokens_to_tile",
    "lane_successors",
]
