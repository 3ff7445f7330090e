r"""VectorWorld's tile generator: outpaint a 64 m tile from its 4-neighbour in one call.

:class:`TileGenerator` wraps an :class:`~._dit.EdgeGatedRelationalDiT` trained with
:func:`~._dit.meanflow_loss` on the fixed token blocks of
:func:`~._tokens.generation_block`; :meth:`TileGenerator.generate` turns noise into new
tiles (one network call with ``steps=1``), :func:`train_tile_generator` trains it on a
scene file through :class:`simsci.train.Trainer` (:mod:`._evaluate` measures map
fidelity against held-out ground truth).

Design choices, and why
-----------------------
- **Training sees what sampling sees.** At sampling the new tile's relations and token
  count are unknown, so a training block hides them too: among the target slots ``rel``
  is ``self`` on the diagonal and ``none`` elsewhere; context <-> target pairs are
  ``context``, except ``seam`` between a context lane and the slot that continues it.
  Everything the block holds is computed from the context alone, by the same function
  (:func:`~._tokens.generation_block`) at training and sampling; the ground truth only
  fills the slots' values. Relations *inside* the context are recomputed from geometry
  (succ/pred by :func:`lane_successors`, which reproduces every within-tile succ edge
  of the 2000-episode scene file exactly; agent_on_lane; agent_near), never read from
  the file, because a generated tile used as the next context has no stored edges
  (left/right are therefore not used).
- **Seam slots from the context.** Every context lane whose *last* point lies on the
  shared edge (within ``edge_tol``) gets a target lane slot whose *first* point is
  pinned to that endpoint (``seam_end`` 0); every context lane whose *first* point lies
  on it (a lane entering the context from the target side) gets a slot whose *last*
  point is pinned (``seam_end`` 1). Pins of one kind within ``seam_tol`` of each other
  share one slot (``seam`` to each of those context lanes). In training the slots are
  matched to the ground-truth lanes greedily by endpoint distance (``<= seam_tol``).
  **When counts disagree:** a seam slot with no ground-truth partner (a lane that ends
  on the edge, a truncated target) is an *empty* token with its pin (the model learns
  that a seam may stop); a ground-truth lane with a seam endpoint but no slot (a split
  exactly on the edge, a context lane truncated away) goes to a free slot with nothing
  pinned; more seam slots than ``max_lanes`` keeps the first ``max_lanes``. On the scene
  file 99.8 % of seam slots are matched.
- **A fixed target block of typed slots.** All ``M = max_lanes + max_agents`` target
  slots are real tokens; a slot without a ground-truth token is the *empty* token (every
  feature 0, both flags 0), so the model decides how many lanes and agents a tile has
  and :func:`~._tokens.tokens_to_tile` drops the empties (flags below 0.5). The first
  ``max_lanes`` slots are lane slots (their agent part and ``is_agent`` pinned to 0),
  the others agent slots (lane part and ``is_lane`` pinned to 0): the pin mask the DiT
  reads tells a slot its type, so one slot never blurs a lane and an agent, and the loss
  covers only the features a slot can use. Layout :data:`~._tokens.GENERATOR_LAYOUT`
  (24 lanes, 10 agents, N = 68) covers 99.67 % of the scene file's tiles untruncated.
- **No ego.** Agent 0 (the ego) is left out of context and target tokens: the world
  inserts its own ego; a generated copy would collide with it. (Vehicles of the context
  that crossed into the new tile between the two tiles' times may be re-generated
  there; the world should drop generated agents overlapping existing ones.)
- **First tiles.** A share ``p_first`` of the training items is an episode's tile 0
  with no context: context slots masked out and the condition's 5th slot
  (:data:`~._tokens.FIRST_TILE`) set instead of a direction one-hot. Tile 0 is centred on
  the ego with +x along its heading (every tile 0 of the scene file has such a lane), so
  generated first tiles learn to carry a lane through the origin along +x. **The ego's
  lane has its own slot** (the layout's ``ego_slot``, on in
  :data:`~._tokens.GENERATOR_LAYOUT`; off in a model saved before it existed, which
  samples as it was trained): in a first tile's block, lane slot 0 is the ego lane, its
  ``is_lane`` pinned to 1 at training and sampling alike, and training puts there the
  truth's lane through the origin along +x (:func:`~._tokens.ego_lane_index`; a
  truth without one leaves the slot unpinned): one slot with one role, rather than
  "some slot among 24 passes through the origin", and a first tile is never lane-less.
  Measured (``benchmarks/bench_vectorworld_repr.py``, 1,500 steps, 40 first tiles, one
  draw): 38-40 % of first tiles with the ego's lane, against 28-38 % before the slot
  (within the noise of 40 tiles); the resampling below takes it to 73-80 % in 3 draws.
  :meth:`~TileGenerator.generate` still checks (a lane within half its width, at
  least 0.5 m, of the origin heading within 30 degrees of +x, :func:`has_ego_lane`)
  and resamples first tiles without one.
- **Resampling.** A generated tile without a lane (or a first tile without the ego's
  lane) is drawn again with fresh noise, up to ``max_tries`` draws in all; ``stats``
  counts the redraws (``resampled``) and the tiles still lane-less (``empty``). A
  tile that continues nothing (a context, no first tile, but no seam slot: no lane of
  any neighbour ends on its edges, e.g. the cell beside a straight road that a turning
  ego looks into) keeps its first draw, lanes or none (``unled``): nothing leads into
  it, so a lane-less draw breaks no road, and of such tiles in the shipped world 47%
  stayed lane-less after 3 draws while costing 3 network calls each, the largest part
  of the world's step time under an untrained policy (benchmarks/README.md, "Tenth
  session").
- **Further neighbours pin their seams too.** A new tile may touch several existing
  tiles (the world turned, or came back); the block holds one context, so
  :meth:`TileGenerator.generate`'s ``neighbours`` add, for every lane end of the other
  neighbours on their shared edge, one more seam slot with that end point pinned and
  ``is_lane`` pinned to 1 (there is no context lane beside it to tell the network
  whether the lane goes on, and a map whose lane stops at a seam is broken). They are
  placed after the context's seam slots, skipping pins within ``seam_tol`` of a pin of
  the same kind already there, while lane slots remain. Not seen in training: the pins
  fix where lanes meet those seams, the network fills in the rest.
- **Seams are lanes.** In training a seam slot may stay empty; at sampling
  (``continue_seams=True``, the default) every seam slot of the context has ``is_lane``
  pinned to 1 as well, so every context lane end on the edge is continued.
  :func:`close_seams` then makes a new tile meet all its existing neighbours exactly
  (snaps, trims, stubs), the streaming world's last step before a tile is kept.
- **Lanes as Béziers** (``lane_repr="bezier"``, a field of the layout; the default
  stays ``"points"``, the representation of every checkpoint saved before). A lane slot
  holds the 4 control points of a cubic instead of 20 free points (module docstring of
  :mod:`._tokens`): 8 numbers, smooth by construction, whose end control points are the
  seam pins. Not the default, because it has not yet shown that it learns faster:
  ``benchmarks/bench_vectorworld_repr.py`` (same data, seed, network and 1,500 steps on
  one CPU thread, results in ``benchmarks/results/vectorworld_repr_cpu.json``) finds
  both representations' samples alike, with the same failures (about 2 crossing lane
  pairs per tile against 0.17 in the truth, 55-65 % of the truth's lanes per tile, no
  successor link inside a tile): what the generator lacks is coordination between lanes
  (topology), not smoothness within one. Decoding (``smooth=True``) still refits
  :func:`smooth_lane`, which is then only the arc-length resampling and the tangent at
  a seam.
- **Roads as lane groups** (``lane_repr="road"``, :mod:`._lanegroups`): a slot is a
  road, its reference lane as a cubic plus how many lanes run beside it (same way left
  and right, oncoming); decoding expands each into its lanes. What the Bézier run
  lacked was coordination between lanes; a group gives the parallel and oncoming lanes
  of a road from one token, and the data's 6.8 lanes per tile are 2.4 groups. Not the
  default: at the shipped budget its map is closer to the truth (raw lane statistics
  1.6-3.3x closer, 20% more lanes per tile as driven) but the lane-keeping driver is
  less safe there (75-81% against 84-94%; benchmarks/README.md, "Roads as lane groups").
- **Counts as conditions** (``count_pins``, a field of the layout; off in every model
  saved before it). The one-step sampler draws too few tokens: about half the data's
  lanes and a third of its vehicles per tile, with bimodal flags no threshold recovers,
  and pinning the flags of a network not trained with them gave tangles. With
  ``count_pins`` every target slot's flag is a condition, pinned in training to the
  truth's (free lanes fill the slots after the seam slots, vehicles the first agent
  slots, :func:`~._tokens.generation_block`) and at sampling to counts drawn from a
  count model: the training data's joint counts of (free lanes, vehicles) given (first
  tile, context seam slots up to ``COUNT_BINS - 1``), stored as the buffer
  ``count_table`` (made by :meth:`TileSamples.count_table` before training). Every seam
  slot is continued (as ``continue_seams``), the other neighbours' pinned lanes count
  among the free lanes drawn, and a tile with no seam never draws 0 lanes. The network
  then learns only where the tokens go, not how many there are.
- **Seam frames** (``seam_frame``, a field of the layout; off in models saved before
  it and in ``GENERATOR_LAYOUT``, on in the shipped generator since the ninth session):
  a seam slot's lane is written in its seam's frame (pin at 0, x along the lane it
  continues) with that lane's width pinned (:mod:`._tokens`, "Seam frames"). Why: the
  generator shipped before (tile frame) continued a straight road badly: on 400
  held-out pairs its lane leaving a seam ends a median 40 degrees off the context lane's
  heading (90th percentile 125) and strays 9.3 m from the straight line,
  where the truth's turn 0 degrees (90th percentile 3.7) and stray 0 m; in the tile frame
  the network has to read the context lane's pose through attention and rotate every
  continuation by it, in the seam frame going straight on is one fixed token. Measured
  at the shipped budget (1,500 steps, seed 0, one thread): 17 degrees and 2.4 m
  (``tile_metrics``' ``seam_turn_median`` / ``seam_lateral_median``); Bézier tokens in
  seam frames were no better at 750 steps (26 degrees, 4.6 m). The shipped generator
  (``make pretrained-vectorworld``: 1,500 steps and a 1,500-step warm restart), decoded
  as below, turns a median 3.2 degrees at a seam (the tile-frame one: 20;
  benchmarks/README.md, "Eighth session" and "Ninth session").
- **Straight unless shown bent** (``bend``, :data:`LANE_BEND` = 1 by default). Decoding's
  cubic (:func:`smooth_lane`) minimises the squared distance to the 20 sampled points
  plus ``bend`` times the control polygon's squared second differences (0 for a straight
  lane). Why: the one-step samples are noisy point by point (median second difference
  5-6 m), and a plain least-squares cubic turns that noise into bends; a driver slows
  for every bend (speed limits are capped by curvature), and 90% of the data's lanes are
  straighter than 0.0027 1/m. With ``bend=1`` the fit moves a held-out true lane by 0 m
  at the median and 0.17 m at the 90th percentile (junction connectors at most 2 m),
  while the lane-keeping driver of a seam-frame world goes 0.81-0.87 of Driving-v0's
  distance against 0.47-0.49, and of the tile-frame one 0.61-0.66 against 0.54-0.63
  (benchmarks/README.md, "Ninth session").
- **Exact seams.** Pinned entries never change in the samplers; decoding writes the
  float64 pin (the context endpoint mapped into the target frame, ``p - 64 step``)
  back into each seam lane, so a seam endpoint equals the context's endpoint.
- **Data.** :class:`TileSamples` builds every block of a scene file once (about 1 ms a
  block) into stacked arrays; an item is a row of them and :func:`collate_blocks`
  stacks rows into tensors, so batches cost microseconds per item.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import numpy as np
import torch
from torch import nn

from simsci.models.vectorworld._dit import (
    EdgeGatedRelationalDiT,
    meanflow_loss,
    sample_multistep,
    sample_one_step,
)
from simsci.models.vectorworld._lanegroups import expand_groups, group_lanes
from simsci.models.vectorworld._tokens import (
    _FIRST,
    COUNT_SCALE,
    COUNT_SLICE,
    DIRECTIONS,
    GEN_COND_DIM,
    GENERATOR_LAYOUT,
    IS_AGENT,
    IS_LANE,
    LANE_POINTS,
    POINTS_SLICE,
    RELATIONS,
    TILE_SIZE,
    TOKEN_DIM,
    WIDTH,
    TokenLayout,
    _decode_geometry,
    _end_tangents,
    _seam_slots,
    _seam_tangent,
    check_scene_layout,
    check_tile,
    ego_lane_index,
    generation_block,
    generation_pair,
    geometry_cols,
    lane_successors,
    pair_steps,
    to_seam_frame,
    tokens_to_tile,
)

__all__ = [
    "TileGenerator",
    "TileSamples",
    "close_seams",
    "collate_blocks",
    "has_ego_lane",
    "lane_successors",
    "train_tile_generator",
]

_BLOCK_KEYS = ("x", "rel", "mask", "pinned", "cond")
COUNT_BINS = 8  # the count model's seam-slot bins: 0..6 seam slots, and 7 or more
#: decoding's default bending penalty (module docstring, "Straight unless shown bent")
LANE_BEND = 1.0


def _layout_from(layout) -> TokenLayout:
    if layout is None:
        return GENERATOR_LAYOUT
    if isinstance(layout, TokenLayout):
        return layout
    if isinstance(layout, dict):
        return TokenLayout.from_dict(layout)
    raise TypeError(
        f"layout must be a dict of TokenLayout fields, a TokenLayout or None, got "
        f"{type(layout).__name__}"
    )


def _check_number(name, value, low=0.0, high=None, integer=False):
    bad = isinstance(value, bool) or not isinstance(value, (int, float))
    if integer:
        bad = bad or not isinstance(value, int)
    if bad or not math.isfinite(value) or value < low or (high is not None and value > high):
        rng = f"in [{low}, {high}]" if high is not None else f">= {low}"
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{name} must be {kind} {rng}, got {value!r}")


# ------------------------------------------------------------------ ego lane check
def has_ego_lane(tile: dict, max_angle: float = 30.0) -> bool:
    """Whether a tile (own frame) has a lane through its centre along +x: a lane whose
    polyline passes within ``max(width / 2, 0.5)`` m of the origin, heading (its nearest
    segment's direction) within ``max_angle`` degrees of +x
    (:func:`~._tokens.ego_lane_index`). First tiles need one: the world puts its ego at
    the origin heading +x."""
    return ego_lane_index(tile["points"], tile["width"], max_angle) >= 0


# ------------------------------------------------------------------ the model
class TileGenerator(nn.Module):
    """Edge-gated relational DiT over :func:`~._tokens.generation_block` token blocks,
    trained with MeanFlow (module docstring).

    ``layout``: a dict of :class:`~._tokens.TokenLayout` fields (default
    :data:`~._tokens.GENERATOR_LAYOUT`, 24 lanes + 10 agents); ``lane_repr``: the
    layout's lane representation, ``"points"`` or ``"bezier"`` (None: the layout's,
    ``"points"`` unless it says otherwise, as in every checkpoint saved before the option
    existed; it is stored in ``init_args["layout"]``); ``width``, ``depth``,
    ``heads``, ``mlp_ratio``, ``freq_dim``, ``time_scale``: the DiT's; ``p_first``: share
    of first tiles (no context) among training items (used by
    :func:`train_tile_generator` to build :class:`TileSamples`); ``flow_ratio``,
    ``jump_ratio``, ``logit_mean``, ``logit_std``, ``weight_power``, ``weight_eps``:
    :func:`~._dit.meanflow_loss`'s. ``init_args`` records them all (JSON-able).
    """

    def __init__(
        self,
        layout: dict | None = None,
        width: int = 128,
        depth: int = 4,
        heads: int = 4,
        p_first: float = 0.15,
        flow_ratio: float = 0.5,
        jump_ratio: float = 0.25,
        mlp_ratio: float = 4.0,
        freq_dim: int = 64,
        time_scale: float = 1.0,
        logit_mean: float = -0.4,
        logit_std: float = 1.0,
        weight_power: float = 1.0,
        weight_eps: float = 1e-3,
        lane_repr: str | None = None,
    ):
        super().__init__()
        lay = _layout_from(layout)
        if lane_repr is not None:
            lay = dataclasses.replace(lay, lane_repr=lane_repr)
        _check_number("p_first", p_first, 0.0, 0.99)
        for name, v in (("flow_ratio", flow_ratio), ("jump_ratio", jump_ratio)):
            _check_number(name, v, 0.0, 1.0)
        if flow_ratio + jump_ratio > 1 + 1e-12:
            raise ValueError(
                f"flow_ratio + jump_ratio must be <= 1, got {flow_ratio} + {jump_ratio}"
            )
        self.layout = lay
        self.p_first = float(p_first)
        self.loss_args = dict(
            flow_ratio=float(flow_ratio),
            jump_ratio=float(jump_ratio),
            logit_mean=float(logit_mean),
            logit_std=float(logit_std),
            weight_power=float(weight_power),
            weight_eps=float(weight_eps),
        )
        self.net = EdgeGatedRelationalDiT(
            token_dim=TOKEN_DIM,
            cond_dim=GEN_COND_DIM,
            width=width,
            depth=depth,
            heads=heads,
            num_relations=len(RELATIONS),
            mlp_ratio=mlp_ratio,
            freq_dim=freq_dim,
            time_scale=time_scale,
        )
        if lay.count_pins:  # counts of (free lanes, agents | first tile, seam slots)
            shape = (2, COUNT_BINS, lay.max_lanes + 1, lay.max_agents + 1)
            self.register_buffer("count_table", torch.zeros(shape))
        self.init_args = {
            "layout": lay.to_dict(),
            "width": width,
            "depth": depth,
            "heads": heads,
            "p_first": self.p_first,
            "mlp_ratio": float(mlp_ratio),
            "freq_dim": freq_dim,
            "time_scale": float(time_scale),
            **self.loss_args,
        }

    @property
    def capacity(self) -> int:
        """Tokens per block, ``2 (max_lanes + max_agents)``."""
        return self.layout.pair_capacity

    def forward(self, z, r, t, rel, mask, cond, pinned=None):
        """The DiT's average velocity ``u(z, r, t)`` (B, N, TOKEN_DIM)."""
        return self.net(z, r, t, rel, mask, cond=cond, pinned=pinned)

    # -- training ---------------------------------------------------------------------
    def _loss(self, batch):
        if not isinstance(batch, dict) or any(k not in batch for k in _BLOCK_KEYS):
            raise ValueError(
                f"a batch must be a dict with {list(_BLOCK_KEYS)} (collate_blocks' output)"
            )
        N = batch["x"].shape[1] if batch["x"].ndim == 3 else -1
        if N != self.capacity:
            raise ValueError(
                f"batch blocks hold {N} tokens but this model's layout has {self.capacity}; "
                "build the data with the model's layout (TileSamples(..., layout=model.layout))"
            )
        return meanflow_loss(
            self.net,
            batch["x"],
            batch["rel"],
            batch["mask"],
            batch["cond"],
            pinned=batch["pinned"],
            **self.loss_args,
        )

    def training_step(self, batch) -> dict:
        """MeanFlow loss of a :func:`collate_blocks` batch (global torch RNG for the noise
        and times, so resumed runs are deterministic) and its per-kind errors."""
        loss, stats = self._loss(batch)
        return {**stats, "loss": loss}

    def validation_step(self, batch) -> dict:
        """``loss`` (the adaptive-weight loss ``mean d / (d + eps)``, near 1 while errors
        exceed ``weight_eps``), ``mse`` and the per-kind errors ``mse_flow`` (r = t: a
        fixed target, the one to compare checkpoints by), ``mse_interval``, ``mse_jump``;
        ``lane_rmse_m`` (:meth:`lane_error`, in metres of lane polylines)."""
        loss, stats = self._loss(batch)
        return {**stats, "loss": loss, "lane_rmse_m": self.lane_error(batch)}

    @torch.no_grad()
    def lane_error(self, batch, t=None) -> torch.Tensor:
        """Root mean squared distance (m) between the lane polylines the network predicts
        from a noised block and the true ones: ``x_hat = z_t - t u(z_t, t, t)`` (the
        flow's estimate of the data, pins reset) decoded to 20 points per lane
        (:func:`~._tokens.tokens_to_tile`'s geometry) against the truth's decoded the
        same way, over target lane slots holding a true lane. ``t`` (B,) defaults to
        the stratified ``(b + 1/2) / B`` (fixed times, so evaluations differ only by the
        noise, drawn from the global RNG, which the Trainer seeds for every one). The
        MeanFlow losses are means over a token's unpinned features, which differ between
        lane representations; this error is in metres of the same polylines for both,
        but at one ``t`` it still favours ``"points"``: 20 noised points, redundant for
        a curve of 8 degrees of freedom, average their noise out and tell the network
        more about the lane than 4 noised control points do (compare samples,
        :func:`tile_metrics`, across representations)."""
        x, pinned = batch["x"], batch["pinned"]
        B = x.shape[0]
        if t is None:
            t = (torch.arange(B, dtype=x.dtype, device=x.device) + 0.5) / B
        tt = t.to(x).view(B, 1, 1)
        eps = torch.randn_like(x)
        z = torch.where(pinned, x, (1 - tt) * x + tt * eps)
        u = self.net(z, t.to(x), t.to(x), batch["rel"], batch["mask"], batch["cond"], pinned)
        x_hat = torch.where(pinned, x, z - tt * u)
        M = self.layout.tile_capacity
        slots = slice(M, M + self.layout.max_lanes)
        real = batch["mask"][:, slots] & (x[:, slots, IS_LANE] >= 0.5)
        if not bool(real.any()):
            return torch.full((), math.nan, dtype=x.dtype, device=x.device)
        cols = (x[:, slots][real][:, POINTS_SLICE], x_hat[:, slots][real][:, POINTS_SLICE])
        truth, pred = (_decode_geometry(c, self.layout) * self.layout.scale for c in cols)
        return ((pred - truth) ** 2).sum(-1).mean().sqrt()

    # -- sampling ---------------------------------------------------------------------
    def _dtype_device(self):
        p = next(iter(self.parameters()), None)
        if p is None:
            return torch.float32, torch.device("cpu")
        return p.dtype, p.device

    def _decode(
        self, xt: torch.Tensor, block: dict, smooth: bool = True, bend: float = LANE_BEND
    ) -> tuple[dict, np.ndarray]:
        """Target slots (M, D) -> a float64 tile dict with exact seam pins, and seam rows
        (context lane, output lane, end). ``smooth``: every lane projected onto a cubic
        Bézier (:func:`smooth_lane`, bending penalty ``bend``), tangent-continuous with the
        context lane at a seam."""
        xt = xt.detach().to("cpu", torch.float64)
        if self.layout.seam_frame:  # seam slots back from their seams' frames
            xt = xt.clone()
            geo = geometry_cols(self.layout)
            for s in range(int(block["n_seam"])):
                back = to_seam_frame(
                    xt[s, geo].numpy(), block["seam_pin"][s], block["seam_tangent"][s],
                    self.layout, inverse=True,
                )  # fmt: skip
                xt[s, geo] = torch.from_numpy(back)
        tile = tokens_to_tile(xt, layout=self.layout)
        tile = {k: v.numpy() for k, v in tile.items()}
        lane_slot = tile.pop("lane_token")
        tile.pop("agent_token")
        rows = []
        pins = {}
        for j, s in enumerate(lane_slot.tolist()):
            end = int(block["seam_end"][s])
            if end < 0:
                continue
            tile["points"][j, 0 if end == 0 else LANE_POINTS - 1] = block["seam_pin"][s]
            rows += [(c, j, end) for c in block["seam_context"][s]]
            pins[j] = (end, block["seam_pin"][s], block["seam_tangent"][s])
        if smooth:
            for j in range(len(tile["points"])):
                end, pin, tangent = pins.get(j, (-1, None, None))
                tile["points"][j] = smooth_lane(
                    tile["points"][j],
                    start=pin if end == 0 else None,
                    start_tangent=tangent if end == 0 else None,
                    end=pin if end == 1 else None,
                    end_tangent=tangent if end == 1 else None,
                    bend=bend,
                )
        out = {
            "points": tile["points"],
            "width": tile["width"],
            "speed_limit": tile["speed_limit"],
            "kind": tile["kind"].astype(np.int64),
            "agents": tile["agents"],
        }
        if self.layout.lane_repr == "road":  # groups -> lanes; the references keep their ids
            out = expand_groups({**out, "group": tile["group"]})
            out.pop("lane_group")
        return out, np.asarray(rows, np.int64).reshape(-1, 3)

    def set_count_table(self, table) -> None:
        """Store the count model (a ``count_pins`` layout only): ``table`` (2,
        COUNT_BINS, max_lanes + 1, max_agents + 1) counts of training blocks by (first
        tile, context seam slots clipped to ``COUNT_BINS - 1``, free lanes, agents), as
        :meth:`TileSamples.count_table` makes."""
        if not self.layout.count_pins:
            raise ValueError("set_count_table needs a layout with count_pins=True")
        table = torch.as_tensor(np.asarray(table), dtype=self.count_table.dtype)
        if table.shape != self.count_table.shape or not bool((table >= 0).all()):
            raise ValueError(
                f"count table must be non-negative counts of shape "
                f"{tuple(self.count_table.shape)}, got {tuple(table.shape)}"
            )
        if not bool(table.sum() > 0):
            raise ValueError("count table is empty: no training block counted")
        self.count_table.copy_(table.to(self.count_table.device))

    def _set_counts(self, known, blocks, generator, todo, dev) -> None:
        """Draw each tile's free lanes and agents from the count model and write the
        pinned flags into ``known`` (len(todo), N, D) in place (module docstring)."""
        L, A = self.layout.max_lanes, self.layout.max_agents
        M = L + A
        if isinstance(generator, (list, tuple)):
            u = [torch.rand(1, generator=generator[b], device=generator[b].device) for b in todo]
            u = torch.cat([v.cpu() for v in u])
        else:
            gdev = generator.device if generator is not None else dev
            u = torch.rand(len(todo), generator=generator, device=gdev).cpu()
        table = self.count_table.detach().to("cpu", torch.float64)
        for j, blk in enumerate(blocks):
            first, bin_ = blk["count_key"]
            p = table[first, bin_]
            if not bool(p.sum() > 0):  # a seam count never seen: that kind of tile at all
                p = table[first].sum(0)
            start = blk["n_seam"] + int(bool(blk.get("ego_slot")))
            if start == 0:  # a tile needs a lane: no free lane is not an option here
                p = torch.cat([torch.zeros_like(p[:1]), p[1:]])
                if not bool(p.sum() > 0):
                    p = torch.zeros_like(p)
                    p[1:, 0] = 1.0
            cdf = torch.cumsum(p.flatten(), 0)
            k = int(torch.searchsorted(cdf, u[j] * cdf[-1], right=True).clamp(max=len(cdf) - 1))
            n_free, n_agents = divmod(k, A + 1)
            # the other neighbours' pinned lanes stand for free lanes of the data's tiles
            n_free = max(0, min(n_free - (blk["n_seam"] - blk["n_seam_context"]), L - start))
            known[j, M + start : M + L, IS_LANE] = 0.0
            known[j, M + start : M + start + n_free, IS_LANE] = 1.0
            known[j, M + L :, IS_AGENT] = 0.0
            known[j, M + L : M + L + n_agents, IS_AGENT] = 1.0

    @torch.no_grad()
    def generate(
        self,
        contexts: list,
        directions: list,
        *,
        steps: int = 1,
        mode: str = "meanflow",
        generator: torch.Generator | None = None,
        max_tries: int = 3,
        smooth: bool = True,
        bend: float = LANE_BEND,
        neighbours: list | None = None,
        continue_seams: bool = True,
    ) -> tuple[list[dict], dict]:
        """New tiles from their neighbours, batched. ``smooth``: project every generated
        lane onto a cubic Bézier (:func:`smooth_lane`; tangent-continuous at seams) with
        the bending penalty ``bend`` (module docstring, "Straight unless shown bent"; 0:
        the plain least-squares cubic).
        ``continue_seams``: every seam slot of the context is a lane (``is_lane`` pinned
        to 1, as the other neighbours' pins always are): in training a seam slot may stay
        empty (a truncated target), but a map whose lane stops at a seam is broken; False
        samples the network's own choice (what :func:`evaluate_tile_generator` measures).

        ``contexts[b]``: the neighbour tile in its own frame, a dict ``points`` (n, 20, 2),
        ``width`` (n,), ``speed_limit`` (n,), ``kind`` (n,) int, ``agents`` (m, 7)
        ``AGENT_FEATURES`` (the other vehicles, not the ego), or None for a first tile;
        ``directions[b]``: index into ``DIRECTIONS`` (new cell = context cell + step), None
        with a None context. ``steps=1, mode="meanflow"``: one network call
        (:func:`~._dit.sample_one_step`); otherwise :func:`~._dit.sample_multistep`
        (``mode="flow"``: Euler on the instantaneous velocity). ``generator``: the noise
        (default the global RNG of the model's device), or a list of one generator per
        tile: each tile's noise (its redraws included) then comes from its own, so a
        tile depends on its generator alone, not on what else is in the batch (up to
        float rounding of batched kernels). ``neighbours[b]``: the new tile's
        other existing 4-neighbours, a list of ``(tile, direction)`` (tile dicts as
        ``contexts``, direction = the step from that neighbour's cell to the new one);
        their lane ends on the shared edges are pinned as lanes of the new tile (module
        docstring). None: no other neighbours.

        Returns ``(tiles, stats)``: float64 tile dicts with the same keys in the NEW
        tile's frame (seam endpoints equal to the context's endpoints), and ``stats``:
        ``tiles``, ``resampled`` (extra draws), ``empty`` (lane-less tiles returned:
        after ``max_tries``, or an ``unled`` tile's one draw), ``unled`` (tiles with a
        context but no seam slot, drawn once: module docstring), ``no_ego_lane``
        (first tiles still without it), ``lanes`` / ``agents`` (totals), ``seams`` (per
        tile int64 (S, 3) rows ``(context lane, new lane, end)``, end 0 = the new lane
        starts where the context lane ends).
        """
        if not isinstance(contexts, (list, tuple)) or not isinstance(directions, (list, tuple)):
            raise TypeError(
                "contexts and directions must be lists (one entry per new tile), got "
                f"{type(contexts).__name__} and {type(directions).__name__}"
            )
        if len(contexts) != len(directions):
            raise ValueError(
                f"contexts ({len(contexts)}) and directions ({len(directions)}) must have the "
                "same length: one direction per context"
            )
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
        if mode not in ("flow", "meanflow"):
            raise ValueError(f"mode must be 'meanflow' or 'flow', got {mode!r}")
        if isinstance(max_tries, bool) or not isinstance(max_tries, int) or max_tries < 1:
            raise ValueError(f"max_tries must be an integer >= 1, got {max_tries!r}")
        B = len(contexts)
        stats = {"tiles": B, "resampled": 0, "empty": 0, "unled": 0, "no_ego_lane": 0, "lanes": 0}
        stats.update(agents=0, seams=[])
        if B == 0:
            return [], stats
        if neighbours is not None and (
            not isinstance(neighbours, (list, tuple)) or len(neighbours) != len(contexts)
        ):
            raise ValueError(
                "neighbours must be None or a list with one entry (a list of (tile, "
                f"direction) pairs) per new tile, {len(contexts)} here"
            )
        per_tile = isinstance(generator, (list, tuple))
        if per_tile and len(generator) != B:
            raise ValueError(
                f"generator must be one torch.Generator or a list of one per tile ({B}), "
                f"got a list of {len(generator)}"
            )
        blocks = []
        for b, (c, d) in enumerate(zip(contexts, directions)):
            try:
                blocks.append(generation_block(c, d, self.layout))
                blk = blocks[-1]
                blk["count_key"] = (int(c is None), min(blk["n_seam"], COUNT_BINS - 1))
                blk["n_seam_context"] = blk["n_seam"]
                if continue_seams or self.layout.count_pins:
                    _force_lanes(blocks[-1], self.layout)
                if neighbours is not None and neighbours[b]:
                    _pin_neighbours(blocks[-1], neighbours[b], self.layout)
            except (ValueError, TypeError) as exc:
                raise type(exc)(f"contexts[{b}] / directions[{b}]: {exc}") from None
        dtype, dev = self._dtype_device()

        def stack(key, **kw):
            return torch.as_tensor(np.stack([blk[key] for blk in blocks]), **kw).to(dev)

        known = stack("known").to(dtype)
        rel, mask, pinned = stack("rel"), stack("mask"), stack("pinned")
        cond = stack("cond").to(dtype)
        M = self.layout.tile_capacity
        first = [c is None for c in contexts]
        tiles: list = [None] * B
        seams: list = [None] * B
        todo = list(range(B))
        for attempt in range(max_tries):
            idx = torch.as_tensor(todo, device=dev)
            known_now = known[idx]
            if self.layout.count_pins:
                self._set_counts(known_now, [blocks[b] for b in todo], generator, todo, dev)
            noise = _noise(generator, todo, known.shape[1:], dtype, dev)
            args = (noise, rel[idx], mask[idx], cond[idx], pinned[idx], known_now)
            if steps == 1 and mode == "meanflow":
                out = sample_one_step(self.net, *args)
            else:
                out = sample_multistep(self.net, *args, steps=steps, mode=mode)
            if attempt:
                stats["resampled"] += len(todo)
            failed = []
            for j, b in enumerate(todo):
                tiles[b], seams[b] = self._decode(out[j, M:], blocks[b], smooth, bend)
                if first[b]:
                    if not has_ego_lane(tiles[b]):
                        failed.append(b)
                elif len(tiles[b]["points"]) == 0 and blocks[b]["n_seam"] > 0:
                    failed.append(b)
            todo = failed
            if not todo:
                break
        stats["empty"] = sum(len(t["points"]) == 0 for t in tiles)
        stats["unled"] = sum(not f and blk["n_seam"] == 0 for f, blk in zip(first, blocks))
        stats["no_ego_lane"] = sum(
            first[b] and len(tiles[b]["points"]) > 0 and not has_ego_lane(tiles[b]) for b in todo
        )
        stats["lanes"] = int(sum(len(t["points"]) for t in tiles))
        stats["agents"] = int(sum(len(t["agents"]) for t in tiles))
        stats["seams"] = seams
        return tiles, stats


def _noise(generator, todo: list, shape, dtype, dev) -> torch.Tensor:
    """Standard normal noise ``(len(todo), *shape)`` for the tiles ``todo``: from one
    generator, or row by row from each tile's own (``generator`` a list)."""
    if isinstance(generator, (list, tuple)):
        rows = [
            torch.randn((1, *shape), generator=g, device=g.device, dtype=dtype).to(dev)
            for g in (generator[b] for b in todo)
        ]
        return torch.cat(rows)
    gdev = generator.device if generator is not None else dev
    return torch.randn((len(todo), *shape), generator=generator, device=gdev, dtype=dtype).to(dev)


def _pin(block: dict, rows, cols, values) -> None:
    """Pin ``block``'s token entries ``[rows, cols]`` to ``values``: written into the
    block's ``x`` and ``known`` and marked in ``pinned`` (sampling-time conditions)."""
    for arr in (block["x"], block["known"]):
        arr[rows, cols] = values
    block["pinned"][rows, cols] = True


def _force_lanes(block: dict, layout: TokenLayout) -> None:
    """Pin ``is_lane`` to 1 in the context's seam slots of a generation block (sampling
    only: ``generate(continue_seams=True)``); with ``lane_repr="road"`` also the width
    and lane counts of the road each continues (a road keeps its lanes across a seam, and
    its offset lanes then meet the context's)."""
    M = layout.max_lanes + layout.max_agents
    rows = M + np.arange(block["n_seam"])
    _pin(block, rows, IS_LANE, 1.0)
    if layout.lane_repr == "road":
        src = np.asarray(block["seam_token"], np.int64)
        for cols in (slice(WIDTH, WIDTH + 1), COUNT_SLICE):
            _pin(block, rows, cols, block["known"][src, cols])


def _pin_neighbours(block: dict, neighbours, layout: TokenLayout) -> None:
    """Add a seam slot to a :func:`~._tokens.generation_block` for every lane end of
    ``neighbours`` (``(tile, direction)`` pairs) on their shared edge: its end point and
    ``is_lane`` pinned (module docstring), its tangent kept for :func:`smooth_lane`."""
    M = layout.max_lanes + layout.max_agents
    S = block["n_seam"]
    x, known, pinned = block["x"], block["known"], block["pinned"]
    tangents = block["seam_tangent"]
    for tile, direction in neighbours:
        if not isinstance(direction, (int, np.integer)) or not 0 <= direction < len(DIRECTIONS):
            raise ValueError(f"a neighbour's direction must index DIRECTIONS, got {direction!r}")
        tile = check_tile(tile, "neighbour")
        road = None
        if layout.lane_repr == "road":  # a road's reference lane pins the new group's
            road = group_lanes(tile)
            tile = road
        pts = tile["points"]
        cp = pts - TILE_SIZE * np.asarray(DIRECTIONS[direction], np.float64)  # new frame
        for end, pin, ids in _seam_slots(cp, int(direction), layout):
            taken = [
                s
                for s in range(S)
                if block["seam_end"][s] == end
                and np.hypot(*(block["seam_pin"][s] - pin)) <= layout.seam_tol
            ]
            if taken or S >= layout.max_lanes:
                continue
            block["seam_end"][S], block["seam_pin"][S] = end, pin
            block["seam_context"].append([])  # no lane of the context beside it
            cols = _FIRST if end == 0 else layout.last_cols
            for arr in (x, known):  # the pin: 0 in its own seam frame
                arr[M + S, cols] = 0.0 if layout.seam_frame else (pin / layout.scale)
                arr[M + S, IS_LANE] = 1.0
            pinned[M + S, cols] = pinned[M + S, IS_LANE] = True
            if road is not None:  # the road's width and lanes, as _force_lanes
                _pin(block, M + S, WIDTH, road["width"][ids[0]] / layout.width_scale)
                _pin(block, M + S, COUNT_SLICE, road["group"][ids[0]] / COUNT_SCALE)
            if layout.seam_frame:  # the lane's width, as generation_block
                _pin(block, M + S, WIDTH, tile["width"][ids[0]] / layout.width_scale)
            tangents[S] = _seam_tangent(cp[ids[0]], end, DIRECTIONS[direction])
            S += 1
    block["n_seam"] = S


def _bernstein(u: np.ndarray) -> np.ndarray:
    return np.stack([(1 - u) ** 3, 3 * u * (1 - u) ** 2, 3 * u**2 * (1 - u), u**3], -1)


def _bend_rows(A, rhs, names, P0, P3, start_tangent, end_tangent, bend):
    """``A``, ``rhs`` of :func:`smooth_lane`'s least squares with the rows of its bending
    penalty appended: ``bend`` times the squared second differences of the control
    polygon, ``|P0 - 2 P1 + P2|^2 + |P1 - 2 P2 + P3|^2`` (0 for a straight lane with
    evenly spaced control points)."""
    k = A.shape[1]
    dirs = np.zeros((k, 4, 2))  # each unknown's step of the control points
    col = 0
    for name, size in names:
        if name == "a":
            dirs[col, 1] = np.asarray(start_tangent, np.float64)
        elif name == "b":
            dirs[col, 2] = -np.asarray(end_tangent, np.float64)
        else:
            i = int(name[1])
            dirs[col, i, 0], dirs[col + 1, i, 1] = 1.0, 1.0
        col += size
    base = np.zeros((4, 2))  # the control points at zero unknowns
    if P0 is not None:  # a fixed end, and the root of its tangent arm
        base[[0, 1] if start_tangent is not None else [0]] = P0
    if P3 is not None:
        base[[2, 3] if end_tangent is not None else [3]] = P3
    second = np.array([[1.0, -2.0, 1.0, 0.0], [0.0, 1.0, -2.0, 1.0]])
    w = math.sqrt(bend)
    rows = w * np.einsum("ri,kic->crk", second, dirs).reshape(4, k)
    target = -w * (second @ base).T.reshape(4)
    return np.concatenate([A, rows]), np.concatenate([rhs, target])


def smooth_lane(
    points, *, start=None, start_tangent=None, end=None, end_tangent=None, bend: float = 0.0
):
    """The cubic Bézier nearest (least squares) a generated lane's 20 points, resampled at
    20 points evenly in arc length; float64 (20, 2).

    Why: the DiT predicts 20 free points per lane, and a small, briefly trained one
    leaves them wiggly and leaving seams at an angle; a lane piece inside a 64 m tile is
    a line, an arc or a gentle S (a cubic fits the ground-truth pieces to centimetres,
    see the benchmark), so decoding projects onto that family. Points are taken at
    uniform parameters ``u_k = k / 19`` (the tokens are evenly spaced in arc length).
    ``start`` / ``end`` (2,): the endpoint is fixed there (a seam pin, kept exactly);
    ``start_tangent`` / ``end_tangent`` (2,) unit: the first (last) control point is
    constrained to ``P0 + a t`` (``P3 - b t``) with a free length ``a, b >= 0``, so the
    lane continues its context lane without a kink (G1 at the seam). ``bend`` >= 0: adds
    ``bend * (|P0 - 2 P1 + P2|^2 + |P1 - 2 P2 + P3|^2)`` (m^2, against the points' summed
    squared distances) to the least squares, pulling the lane towards a straight one
    (module docstring, "Straight unless shown bent"); 0 is the plain fit.
    """
    if not (isinstance(bend, (int, float, np.floating)) and 0.0 <= float(bend) < math.inf):
        raise ValueError(f"bend (the bending penalty) must be a finite number >= 0, got {bend!r}")
    p = np.asarray(points, np.float64)
    n = len(p)
    u = np.linspace(0.0, 1.0, n)
    B = _bernstein(u)  # (n, 4)
    # unknowns: free control points (2 coords each) or tangent lengths (1 each)
    fixed = np.zeros_like(p)
    P0 = None if start is None else np.asarray(start, np.float64)
    P3 = None if end is None else np.asarray(end, np.float64)
    if P0 is not None:
        fixed += B[:, :1] * P0
    if P3 is not None:
        fixed += B[:, 3:] * P3

    # design rows for x and y stacked: (2n, k)
    def free_point(i):
        a = np.zeros((2 * n, 2))
        a[:n, 0], a[n:, 1] = B[:, i], B[:, i]
        return a

    blocks, names = [], []
    if P0 is None:
        blocks.append(free_point(0))
        names.append(("P0", 2))
    if P0 is not None and start_tangent is not None:
        t = np.asarray(start_tangent, np.float64)
        fixed += B[:, 1:2] * P0
        blocks.append(np.concatenate([B[:, 1] * t[0], B[:, 1] * t[1]])[:, None])
        names.append(("a", 1))
    else:
        blocks.append(free_point(1))
        names.append(("P1", 2))
    if P3 is not None and end_tangent is not None:
        t = np.asarray(end_tangent, np.float64)
        fixed += B[:, 2:3] * P3
        blocks.append(-np.concatenate([B[:, 2] * t[0], B[:, 2] * t[1]])[:, None])
        names.append(("b", 1))
    else:
        blocks.append(free_point(2))
        names.append(("P2", 2))
    if P3 is None:
        blocks.append(free_point(3))
        names.append(("P3", 2))
    A = np.concatenate(blocks, 1)
    rhs = np.concatenate([p[:, 0] - fixed[:, 0], p[:, 1] - fixed[:, 1]])
    if bend > 0.0:
        A, rhs = _bend_rows(A, rhs, names, P0, P3, start_tangent, end_tangent, bend)
    sol, *_ = np.linalg.lstsq(A, rhs, rcond=None)
    ctrl, k = {}, 0
    for name, size in names:
        ctrl[name] = sol[k : k + size]
        k += size
    chord = float(np.hypot(*(p[-1] - p[0]))) if P0 is None or P3 is None else 0.0
    P0v = P0 if P0 is not None else ctrl["P0"]
    P3v = P3 if P3 is not None else ctrl["P3"]
    chord = max(chord, float(np.hypot(*(P3v - P0v))), 1e-6)
    # a tangent length must be positive (else the lane would start backwards)
    if "a" in ctrl:
        P1v = P0v + max(float(ctrl["a"][0]), chord / 6) * np.asarray(start_tangent, np.float64)
    else:
        P1v = ctrl["P1"]
    if "b" in ctrl:
        P2v = P3v - max(float(ctrl["b"][0]), chord / 6) * np.asarray(end_tangent, np.float64)
    else:
        P2v = ctrl["P2"]
    ctrl_pts = np.stack([P0v, P1v, P2v, P3v])
    dense = _bernstein(np.linspace(0.0, 1.0, 200)) @ ctrl_pts
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(dense, axis=0).T))])
    if s[-1] <= 1e-9:
        return np.repeat(ctrl_pts[:1], n, 0)
    q = np.linspace(0.0, s[-1], n)
    out = np.stack([np.interp(q, s, dense[:, 0]), np.interp(q, s, dense[:, 1])], -1)
    out[0], out[-1] = P0v, P3v  # exact endpoints (pins stay bit-exact)
    return out


# ------------------------------------------------------------------ closed seams
_EXACT = 1e-9  # m: an end point on its partner's (a pin written back, a snap)
_STUB_LENGTH = 16.0  # m: a stub continuing a neighbour's lane into the new tile
_MIN_LENGTH = 5.0  # m: a trimmed lane shorter than this is dropped


def _in_band(p: np.ndarray, side: np.ndarray, tolerance: float) -> np.ndarray:
    """Points ``p`` (..., 2) (tile frame) within ``tolerance`` of the tile's edge facing
    the unit vector ``side``: the band of :func:`simsci.driving.metrics.seam_gaps`."""
    along = p @ side
    across = p @ np.array([-side[1], side[0]])
    half = 0.5 * TILE_SIZE
    return (np.abs(along - half) <= tolerance) & (np.abs(across) <= half + tolerance)


def _neighbour_ends(neighbours, tolerance: float) -> list:
    """Every lane end of ``neighbours`` in the band of its shared edge, in the new tile's
    frame: dicts ``side`` (index into the neighbours), ``p`` (2,), ``kind`` (0 the lane's
    first point, 1 its last), ``t`` (its unit direction of travel there), ``lane``."""
    ends = []
    for k, (tile, direction) in enumerate(neighbours):
        step = np.asarray(DIRECTIONS[direction], np.float64)
        pts = np.asarray(tile["points"], np.float64).reshape(-1, LANE_POINTS, 2) - TILE_SIZE * step
        if not len(pts):
            continue
        t_in, t_out = _end_tangents(pts)
        for kind, col, t in ((0, 0, t_in), (1, -1, t_out)):
            for j in np.flatnonzero(_in_band(pts[:, col], -step, tolerance)):
                ends.append({"side": k, "p": pts[j, col], "kind": kind, "t": t[j], "lane": int(j)})
    return ends


def _trim(points: np.ndarray, end: int, sides: list, clear: float) -> np.ndarray | None:
    """``points`` (20, 2) cut back from its ``end`` (0 first, 1 last point) to where it
    lies ``clear`` m inside every edge of ``sides``, resampled evenly in arc length;
    None when less than :data:`_MIN_LENGTH` remains."""
    p = points if end == 1 else points[::-1]
    inside = np.min([0.5 * TILE_SIZE - p @ s for s in sides], axis=0)  # (20,) m inside
    ok = np.flatnonzero(inside >= clear)
    if not len(ok) or ok[-1] == len(p) - 1:
        return None if not len(ok) else points
    k = ok[-1]  # the last point far enough inside; the edge is crossed after it
    u = (inside[k] - clear) / (inside[k] - inside[k + 1])  # inside is linear along a segment
    kept = np.concatenate([p[: k + 1], p[k : k + 1] + u * (p[k + 1 : k + 2] - p[k : k + 1])])
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(kept, axis=0).T))])
    if s[-1] < _MIN_LENGTH:
        return None
    q = np.linspace(0.0, s[-1], len(points))
    out = np.stack([np.interp(q, s, kept[:, 0]), np.interp(q, s, kept[:, 1])], -1)
    return out if end == 1 else out[::-1]


def _stub(end: dict, into: np.ndarray, clear: float, shared=()) -> np.ndarray:
    """A straight lane (20, 2) continuing a neighbour's lane ``end`` into the new tile
    (``into``: the unit normal of the shared edge, pointing inside), at most
    :data:`_STUB_LENGTH` long and ending ``clear`` m inside every edge; where that leaves
    under :data:`_MIN_LENGTH` m (an end at a tile corner heading for the other edge), it
    runs to exactly that edge instead, crossing the corner, unless that edge is one of
    ``shared`` (outward unit normals of edges with a tile beyond)."""
    t = end["t"] if end["kind"] == 1 else -end["t"]  # from the edge into the tile
    if t @ into < 0.3:  # running along the edge (or out of it): turn it inwards
        t = t + into
        t = t / np.hypot(*t)
    q = end["p"]

    def room(lim):
        return min(
            [_STUB_LENGTH]
            + [((lim if t[a] > 0 else -lim) - q[a]) / t[a] for a in (0, 1) if abs(t[a]) > 1e-9]
        )

    length = room(0.5 * TILE_SIZE - clear)
    if length < _MIN_LENGTH:
        # at a corner, heading for the other edge: cross the corner to exactly that edge,
        # where the next tile continues it (a stub kept inside would be a dead end),
        # unless a tile is there already (its edge has no lane to meet)
        exact = max(room(0.5 * TILE_SIZE), 0.1)
        blocked = any(abs((q + exact * t) @ s - 0.5 * TILE_SIZE) < 1e-6 for s in shared)
        length = max(length, 1.0) if blocked else exact
    pts = q + np.linspace(0.0, length, LANE_POINTS)[:, None] * t
    return pts if end["kind"] == 1 else pts[::-1]


def close_seams(
    tile: dict,
    neighbours,
    *,
    tolerance: float = 0.5,
    snap: float = 4.0,
    max_turn: float = 60.0,
    max_lanes: int | None = None,
) -> tuple[dict, dict]:
    """A new tile (own frame) made to meet its existing ``neighbours`` exactly at every
    shared edge; returns ``(tile, counts)``.

    ``neighbours``: ``(tile, direction)`` pairs as :meth:`TileGenerator.generate`'s
    (direction = the step from that neighbour's cell to the new one), every existing
    4-neighbour, the context included. An end point *on a seam* lies within
    ``tolerance`` of a shared edge (the band of :func:`simsci.driving.metrics.seam_gaps`,
    whose gaps this closes: a lane's end meets a lane's start of the other tile).

    1. A new lane end on a seam whose nearest complementary neighbour end is within
       ``snap`` m and heads within ``max_turn`` degrees of it is moved onto it
       (``snapped``): the displacement is blended along the lane (smoothstep in arc
       length, the other end fixed), then the lane is refit by :func:`smooth_lane` with
       the neighbour lane's tangent there, so it continues without a kink.
    2. Any other new lane end on a seam runs into the neighbour where it has no lane:
       the lane is **trimmed** back to ``2 tolerance`` inside the edge (``trimmed``), and
       dropped when less than 5 m of it remains (``dropped``). Trimmed, not dropped,
       because the rest of the lane is road the generator drew (the ego or an NPC may be
       on it); its dead end is now the tile's own, not a broken seam.
    3. A neighbour end on a seam with no new end on it (a seam slot the network left
       short, a pin past ``edge_tol`` or past ``max_lanes``) gets a straight **stub**
       (``stubs``) continuing its lane into the tile (16 m at most, its width, speed
       limit and kind).

    ``max_lanes``: the most lanes the tile may keep (the world's slots); lanes beyond it
    are dropped shortest first, those without a seam end before the others
    (``over_capacity``). ``exact``: new ends that already met their partner.
    """
    out = {k: np.array(v, copy=True) for k, v in tile.items()}
    pts = np.asarray(out["points"], np.float64).reshape(-1, LANE_POINTS, 2)
    counts = dict.fromkeys(("exact", "snapped", "trimmed", "dropped", "stubs", "over_capacity"), 0)
    sides = [-np.asarray(DIRECTIONS[d], np.float64) for _, d in neighbours]  # outward normals
    ends = _neighbour_ends(neighbours, tolerance)
    cos_max = math.cos(math.radians(max_turn))
    # 1-2: every new end on a seam: already met, snapped, or trimmed
    targets, trims = {}, {}
    if len(pts):
        t_in, t_out = _end_tangents(pts)
    for i in range(len(pts)):
        for kind, col, t in ((0, 0, t_in[i]), (1, -1, t_out[i])):
            p = pts[i, col]
            bands = [k for k, s in enumerate(sides) if _in_band(p, s, tolerance)]
            if not bands:
                continue
            cand = [e for e in ends if e["side"] in bands and e["kind"] != kind]
            d = np.array([np.hypot(*(e["p"] - p)) for e in cand])
            if len(cand) and d.min() <= _EXACT:
                counts["exact"] += 1
                targets[i, kind] = cand[int(d.argmin())], False
                continue
            fits = [j for j in np.argsort(d) if d[j] <= snap and cand[j]["t"] @ t >= cos_max]
            if fits:
                targets[i, kind] = cand[fits[0]], True
                counts["snapped"] += 1
            else:
                trims.setdefault(i, []).append((kind, [sides[k] for k in bands]))
    for i in sorted({i for (i, _), (_, moved) in targets.items() if moved}):
        pts[i] = _snap_lane(pts[i], targets.get((i, 0)), targets.get((i, 1)))
    keep = np.ones(len(pts), bool)
    for i, cuts in trims.items():
        for kind, edge_sides in cuts:
            cut = _trim(pts[i], kind, edge_sides, 2.0 * tolerance) if keep[i] else None
            if cut is None:
                keep[i] = False
            else:
                pts[i] = cut
        counts["trimmed" if keep[i] else "dropped"] += 1
    lane_keys = ("width", "speed_limit", "kind")
    out["points"] = pts[keep]
    for key in lane_keys:
        out[key] = np.asarray(out[key])[keep]
    # 3: a stub for every neighbour end left without a partner
    new = out["points"]
    stubs = []
    for e in ends:
        col = 0 if e["kind"] == 1 else -1  # the complementary end of a new lane
        if len(new) and np.hypot(*(new[:, col] - e["p"]).T).min() <= _EXACT:
            continue
        if any(np.hypot(*(s[col] - e["p"])) <= _EXACT for s, _ in stubs):
            continue  # two neighbour lanes meeting at one point share a stub
        src = neighbours[e["side"]][0]
        attrs = {key: np.asarray(src[key])[e["lane"]] for key in lane_keys}
        stubs.append((_stub(e, -sides[e["side"]], 2.0 * tolerance, sides), attrs))
    counts["stubs"] = len(stubs)
    if stubs:
        out["points"] = np.concatenate([new, np.stack([s for s, _ in stubs])])
        for key in lane_keys:
            out[key] = np.concatenate([out[key], np.array([a[key] for _, a in stubs])])
    if max_lanes is not None and len(out["points"]) > max_lanes:
        out = _cap_lanes(out, sides, tolerance, max_lanes, counts)
    out["kind"] = np.asarray(out["kind"], np.int64)
    return out, counts


def _snap_lane(points: np.ndarray, start, end) -> np.ndarray:
    """A lane (20, 2) with its start and/or end moved onto a neighbour's end point
    (``start`` / ``end``: ``(neighbour end, moved)`` or None): each end's displacement
    blended along the lane by a smoothstep in arc length, then the lane refit as a
    cubic (:func:`smooth_lane`) through its ends with the neighbours' tangents."""
    p = np.array(points, np.float64)
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(p, axis=0).T))])
    u = s / s[-1] if s[-1] > 1e-9 else np.linspace(0.0, 1.0, len(p))
    w = (u * u * (3.0 - 2.0 * u))[:, None]  # 0 at the start, 1 at the end
    if start is not None:
        p += (1.0 - w) * (start[0]["p"] - points[0])
    if end is not None:
        p += w * (end[0]["p"] - points[-1])
    return smooth_lane(
        p,
        start=p[0] if start is None else start[0]["p"],
        start_tangent=None if start is None else start[0]["t"],
        end=p[-1] if end is None else end[0]["p"],
        end_tangent=None if end is None else end[0]["t"],
    )


def _cap_lanes(tile: dict, sides: list, tolerance: float, max_lanes: int, counts: dict) -> dict:
    """Keep ``max_lanes`` lanes of ``tile``: drop lanes with no end on a seam first, then
    the others, shortest first."""
    pts = tile["points"]
    on_seam = np.zeros(len(pts), bool)
    for s in sides:
        on_seam |= _in_band(pts[:, [0, -1]], s, tolerance).any(-1)
    length = np.hypot(*np.diff(pts, axis=1).transpose(2, 0, 1)).sum(-1)
    order = np.lexsort((-length, ~on_seam))  # seam lanes first, then the longest
    keep = np.sort(order[:max_lanes])
    counts["over_capacity"] += len(pts) - len(keep)
    return {k: (np.asarray(v)[keep] if k != "agents" else v) for k, v in tile.items()}


# ------------------------------------------------------------------ data
class TileSamples(torch.utils.data.Dataset):
    """Training items of a scene file: every usable pair (tile k -> k+1, k from
    :func:`~._tokens.pair_steps`) of ``episodes`` and first tiles (tile 0, no context),
    as :func:`~._tokens.generation_pair` blocks built once into stacked arrays.

    ``p_first``: the share of first-tile items, ``n_first = round(p_first / (1 -
    p_first) * n_pairs)``; they cycle through the episodes' tile-0 blocks (stored once).
    Attributes: ``n_pairs``, ``n_first``, ``build_seconds``, ``skipped`` (pair_steps'
    counts), ``matching`` / ``truncated`` totals, ``index`` (item -> (episode, k), k=-1
    for a first tile). Batch with :func:`collate_blocks`.
    """

    def __init__(self, path, episodes=None, layout=None, p_first: float = 0.15):
        from simsci import data as sdata
        from simsci.driving import read_scene

        _check_number("p_first", p_first, 0.0, 0.99)
        self.layout = _layout_from(layout)
        self.path = os.fspath(path)
        t0 = time.perf_counter()
        ds = sdata.open(self.path)
        rows = {k: [] for k in _BLOCK_KEYS}
        pair_rows, first_rows, index_pairs, index_first = [], [], [], []
        counts = []  # per built block: (first tile, seam-slot bin, free lanes, agents)
        self.skipped = {"not_adjacent": 0, "empty_tile": 0}
        self.matching = {"seam_matched": 0, "seam_empty": 0, "free": 0}
        self.truncated = {"context_lanes": 0, "target_lanes": 0, "target_agents": 0}
        try:
            check_scene_layout(ds)
            n = len(ds)
            ids = list(range(n)) if episodes is None else [int(i) for i in episodes]
            bad = [i for i in ids if not 0 <= i < n]
            if bad:
                raise ValueError(f"episodes {bad[:5]} out of range: the file has {n} (0..{n - 1})")
            for i in ids:
                ep = read_scene(ds, i)
                ks, skipped = pair_steps(ep)
                for key, v in skipped.items():
                    self.skipped[key] += v
                todo = [(k, pair_rows, index_pairs) for k in ks]
                if len(ep["lanes"][0]["points"]):
                    todo.append((None, first_rows, index_first))
                for k, where, index in todo:
                    blk = generation_pair(ep, k, self.layout)
                    for key in self.matching:
                        self.matching[key] += blk["matching"][key]
                    self.truncated["context_lanes"] += blk["truncated"]["context"]["lanes"]
                    self.truncated["target_lanes"] += blk["truncated"]["target"]["lanes"]
                    self.truncated["target_agents"] += blk["truncated"]["target"]["agents"]
                    where.append(len(rows["x"]))
                    index.append((i, -1 if k is None else int(k)))
                    counts.append(
                        (
                            int(k is None),
                            min(blk["n_seam"], COUNT_BINS - 1),
                            blk["matching"]["free"],
                            blk["counts"]["target"]["agents"],
                        )
                    )
                    for key in _BLOCK_KEYS:
                        rows[key].append(blk[key])
        finally:
            ds.close()
        if not rows["x"]:
            raise ValueError(f"{self.path}: episodes {ids[:5]}... hold no usable tile")
        self.x = np.stack(rows["x"])
        self.rel = np.stack(rows["rel"]).astype(np.int8)
        self.mask = np.stack(rows["mask"])
        self.pinned = np.stack(rows["pinned"])
        self.cond = np.stack(rows["cond"])
        self.counts = np.asarray(counts, np.int64).reshape(-1, 4)
        self.n_pairs = len(pair_rows)
        n_first = round(p_first / (1.0 - p_first) * self.n_pairs) if first_rows else 0
        if self.n_pairs == 0 and first_rows:
            n_first = len(first_rows)
        self.n_first = int(n_first)
        cyc = [first_rows[j % len(first_rows)] for j in range(self.n_first)] if first_rows else []
        self._rows = np.asarray(pair_rows + cyc, np.int64)
        self.index = index_pairs + [index_first[j % len(index_first)] for j in range(self.n_first)]
        self.build_seconds = time.perf_counter() - t0

    def __len__(self) -> int:
        return len(self._rows)

    def count_table(self) -> np.ndarray:
        """The count model's table (:meth:`TileGenerator.set_count_table`): float64 (2,
        COUNT_BINS, max_lanes + 1, max_agents + 1), how many of the built blocks (each
        pair and each episode's first tile once) have (first tile, context seam slots
        clipped to ``COUNT_BINS - 1``, free lanes, agents)."""
        lay = self.layout
        table = np.zeros((2, COUNT_BINS, lay.max_lanes + 1, lay.max_agents + 1))
        np.add.at(table, tuple(self.counts.T), 1.0)
        return table

    def __getitem__(self, i: int) -> dict:
        if not -len(self) <= i < len(self):
            raise IndexError(f"item {i} out of range for {len(self)} items")
        r = self._rows[i]
        return {
            "x": self.x[r],
            "rel": self.rel[r],
            "mask": self.mask[r],
            "pinned": self.pinned[r],
            "cond": self.cond[r],
        }


def collate_blocks(batch) -> dict:
    """Stack :class:`TileSamples` items (or :func:`~._tokens.generation_block` dicts)
    into tensors: ``x`` float32 (B, N, D), ``rel`` int64 (B, N, N), ``mask`` bool (B, N),
    ``pinned`` bool (B, N, D), ``known`` (= ``x``), ``cond`` float32 (B, 5)."""
    if not isinstance(batch, (list, tuple)) or not batch:
        raise ValueError("collate_blocks takes a non-empty list of blocks")
    out = {k: torch.from_numpy(np.stack([b[k] for b in batch])) for k in _BLOCK_KEYS}
    out["rel"] = out["rel"].long()
    out["known"] = out["x"]
    return out


# ------------------------------------------------------------------ training
def train_tile_generator(
    path,
    out_dir,
    *,
    steps: int,
    batch_size: int = 32,
    lr: float = 3e-4,
    seed: int = 0,
    val_fraction: float = 0.1,
    model_args: dict | None = None,
    val_every: int = 250,
    max_val_items: int | None = 1024,
    warmup_steps: int = 100,
    grad_clip: float | None = 1.0,
    weight_decay: float = 0.0,
    log_every: int = 25,
    monitor: str = "val_mse_flow",
    device: str = "cpu",
    resume: bool = True,
    progress: bool = False,
    init_from=None,
) -> dict:
    """Train a :class:`TileGenerator` on a scene file with :class:`simsci.train.Trainer`.

    ``init_from``: a TileGenerator checkpoint to start from (a warm start with a fresh
    optimiser and schedule; its constructor arguments replace ``model_args``).

    The last ``val_fraction`` of the episodes (at least one) are held out; validation uses
    at most ``max_val_items`` of their items (evenly spaced). ``model_args``: keyword
    arguments of :class:`TileGenerator`. AdamW with a linear warm-up and a cosine decay
    over ``steps``; best.pt is chosen by ``monitor``, by default ``val_mse_flow``, the
    flow-matching error (r = t), whose target ``v`` does not depend on the model (the
    interval and jump targets contain the model's own ``du/dt``, so their errors are not
    comparable between checkpoints). Files under ``out_dir`` are the
    Trainer's (``checkpoints/best.pt``, ``checkpoints/last.pt``, ``metrics.jsonl``, ...);
    ``resume=True`` continues a run there. Returns the Trainer's summary plus
    ``train_items``, ``val_items``, ``train_episodes``, ``val_episodes``,
    ``data_seconds``, ``matching``, ``truncated``.
    """
    from simsci import data as sdata
    from simsci.train import TrainConfig, Trainer

    _check_number("val_fraction", val_fraction, 0.0, 0.9)
    ds = sdata.open(os.fspath(path))
    n = len(ds)
    ds.close()
    n_val = max(1, round(val_fraction * n)) if val_fraction > 0 else 0
    if n - n_val < 1:
        raise ValueError(f"{path} has {n} episodes: none left for training after {n_val} held out")
    train_ids, val_ids = list(range(n - n_val)), list(range(n - n_val, n))
    if init_from is not None:
        from simsci.train import load_model

        model = load_model(init_from)
        if not isinstance(model, TileGenerator):
            raise ValueError(
                f"init_from {os.fspath(init_from)!r} holds a {type(model).__name__}, not a "
                "TileGenerator"
            )
        model.train()
    else:
        model = TileGenerator(**(model_args or {}))
    t0 = time.perf_counter()
    train_set = TileSamples(path, train_ids, model.layout, p_first=model.p_first)
    val_set = None
    if val_ids:
        val_set = TileSamples(path, val_ids, model.layout, p_first=model.p_first)
        if max_val_items is not None and len(val_set) > max_val_items:
            keep = np.linspace(0, len(val_set) - 1, max_val_items).round().astype(int)
            val_set = torch.utils.data.Subset(val_set, sorted(set(keep.tolist())))
    data_seconds = time.perf_counter() - t0
    if model.layout.count_pins:  # the count model is the training data's counts
        model.set_count_table(train_set.count_table())
    spe = max(1, len(train_set) // batch_size)
    config = TrainConfig(
        epochs=max(1, math.ceil(steps / spe) + 1),
        max_steps=steps,
        batch_size=batch_size,
        lr=lr,
        optimizer="adamw",
        weight_decay=weight_decay,
        schedule="warmup_cosine" if warmup_steps else "cosine",
        warmup_steps=warmup_steps,
        grad_clip=grad_clip,
        val_every=val_every if val_set is not None else None,
        checkpoint_every=val_every,
        monitor=monitor,
        seed=seed,
        device=device,
        log_every=log_every,
        progress=progress,
    )
    extra = {
        "scene_file": os.path.abspath(os.fspath(path)),
        "train_episodes": [0, n - n_val],
        "val_episodes": [n - n_val, n],
        "layout": model.layout.to_dict(),
    }
    trainer = Trainer(
        model,
        config,
        train_set,
        val_set,
        out_dir=out_dir,
        collate_fn=collate_blocks,
        resume=resume,
        extra=extra,
    )
    summary = trainer.fit()
    return {
        **summary,
        "train_items": len(train_set),
        "val_items": len(val_set) if val_set is not None else 0,
        "train_episodes": len(train_ids),
        "val_episodes": len(val_ids),
        "data_seconds": data_seconds,
        "matching": train_set.matching,
        "truncated": train_set.truncated,
    }
