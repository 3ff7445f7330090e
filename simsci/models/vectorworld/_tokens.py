r"""Scene tiles as token sets for the relational DiT, and outpainting training pairs.

A tile of :mod:`simsci.driving` (64 m x 64 m, lane pieces of 20 points and agents
of ``AGENT_FEATURES``) becomes ``N = n_lanes + n_agents`` tokens of :data:`TOKEN_DIM`
features (lanes first, then agents), an integer relation matrix ``rel`` ``(N, N)`` with
values in ``[0, len(RELATIONS))`` and a mask; :func:`tokens_to_tile` decodes tokens back.
:func:`outpaint_pair` puts tile k (context, in tile k+1's frame) and tile k+1 (target)
into one set with the pinned entries and known values that
:func:`~simsci.models.vectorworld._dit.meanflow_loss` and the samplers take;
:class:`TilePairs` / :func:`collate_pairs` serve every such pair of a scene file.

Token features (one flat vector, both parts in every token)
-----------------------------------------------------------
``[lane part | agent part | is_lane, is_agent]``, see the slices below:

- lane part (:data:`LANE_SLICE`, 46): the lane's geometry in :data:`POINTS_SLICE` (40
  columns, by the layout's ``lane_repr``: below), ``width / width_scale``,
  ``speed_limit / speed_scale`` and the one-hot of ``kind`` over ``LANE_KINDS`` (4);
- agent part (:data:`AGENT_SLICE`, 7): ``x / scale, y / scale, speed / speed_scale, cos,
  sin, length / length_scale, width / agent_width_scale``;
- flags (:data:`FLAG_SLICE`): ``is_lane``, ``is_agent``.

The part a token does not use is 0. Defaults ``scale = 32`` (half a tile: a tile's own
coordinates lie in [-1, 1], a context tile's in [-3, 1]), ``speed_scale = 30`` m/s,
``width_scale = 4``, ``length_scale = 5``, ``agent_width_scale = 2``: every feature is
O(1), as the unit-variance noise of the flow expects. Scales by powers of two keep
positions exact in float32 (``p / 32 * 32 == p``); the others round trip to float32
precision. One flat vector (not separate lane/agent embeddings) because the DiT is
data-agnostic and embeds tokens with one linear layer; the flags let a *generated* token
declare what it is (:func:`tokens_to_tile` takes the larger flag, drops tokens where both
are below 0.5, and renormalises ``(cos, sin)``).

Lane geometry (:class:`TokenLayout`'s ``lane_repr``)
----------------------------------------------------
- ``"points"`` (the default, and every layout saved before the option existed): the 20
  centreline points ``(x0, y0, ..., x19, y19) / scale``.
- ``"bezier"``: the 4 control points ``(P0, P1, P2, P3) / scale`` of the cubic Bézier
  nearest the 20 points (:func:`fit_bezier`: least squares at ``u_k = k / 19``, the
  points being evenly spaced in arc length, with ``P0`` and ``P3`` the lane's first and
  last points **exactly**) in :data:`BEZIER_SLICE`; the other 32 columns are 0 and
  pinned in generation blocks (never noised, not in the loss). Decoding
  (:func:`tokens_to_tile`) samples the curve back at ``u_k`` (:func:`bezier_points`), so
  the rest of the code still sees 20 points per lane, with end points equal to ``P0`` /
  ``P3`` bit for bit: a seam pin is the first (``[0:2]``) or the last control point
  (``[6:8]``, :attr:`TokenLayout.last_cols`). Why: a lane piece inside a 64 m tile is a
  line, an arc or a gentle S (heading changes up to 89 degrees), and one cubic holds
  the 32,563 pieces of a 400-episode scene file to 0.19 m at worst (p99 4.7 cm, p95
  0.6 mm; ``benchmarks/bench_vectorworld_repr.py``), so 8 numbers replace 40 whose
  mutual smoothness a generator must otherwise learn. The token keeps its width for both
  (one set of slices; a zero input column costs nothing in the DiT's linear embedding),
  so the option is one field of the layout, stored in a model's config.
- ``"road"``: a token is a **lane group** (:mod:`._lanegroups`): the tile's lanes are
  grouped (:func:`~._lanegroups.group_lanes`) before tokenising, a token holds its
  reference lane as ``"bezier"`` does, plus the group's counts ``(left, right,
  oncoming) / COUNT_SCALE`` in :data:`COUNT_SLICE` (``[8:11]``; the other 29 columns 0
  and pinned). :func:`tokens_to_tile` returns the rounded counts as ``group`` (n, 3);
  the generator expands them into lanes (:func:`~._lanegroups.expand_groups`). Contexts
  and neighbours arrive as lanes and are grouped the same way, so a seam pins a
  reference lane to a reference lane; a first tile's ego lane is its group's reference.

**Seam frames** (:class:`TokenLayout`'s ``seam_frame``, any ``lane_repr``): in a
generation block, a seam slot's positions (points or control points) are written in its
seam's own frame, origin at the pin and x along the direction of travel of the context
lane it continues (:func:`to_seam_frame`; the pin itself is then the pinned value 0),
and its width is pinned to that lane's (a road keeps its width across a seam: all the
scene file's seam lanes do; 99.8% keep the speed limit too, but a generated context's
limit is capped by its curvature, :mod:`._lanegraph`, and a pinned limit would carry one
bend's cap down the rest of the road).
A road going straight on across a seam is then the same token, ``y = 0``, wherever the
seam lies on the edge and however the road runs, where in the tile frame the network
has to rotate and shift every continuation by the context lane's pose read through
attention. Empty slots stay all 0; the other slots keep the tile frame; decoding maps
seam slots back (:meth:`~._outpaint.TileGenerator.generate`).

Relations (:data:`RELATIONS`; ``rel[i, j]`` = how token i sees token j)
-----------------------------------------------------------------------
``pred``/``succ``/``left``/``right``: a lane-graph edge ``src -> dst`` of that type (the
file's ``EDGE_TYPES``) sets ``rel[src, dst]``; the graph stores every ``succ`` with its
reversed ``pred``, so ``rel == succ`` and ``rel.T == pred`` coincide. ``agent_on_lane``
(agent -> lane) / ``lane_under_agent`` (lane -> agent): the lane piece nearest the agent's
centre among those whose polyline is within that lane's width of it (one lane per agent,
none when no lane is that close). ``agent_near``: two distinct agents whose centres are
within ``near_radius`` (20 m). ``context``: every pair between a context-tile token and a
new-tile token (both directions). ``seam``: a new-tile lane that continues a context-tile
lane across the shared edge (both directions; definition in :func:`outpaint_pair`).
``self`` on the diagonal, ``none`` otherwise (padding too).

**Precedence** (every pair gets exactly one id): ``self > seam > succ > pred > left >
right > agent_on_lane > lane_under_agent > agent_near > context > none``. Most families
cannot collide (lane-lane, agent-lane, lane-agent, agent-agent and cross-tile pairs are
disjoint); real collisions are a lane pair that is both ``succ`` and ``pred`` (two pieces
of a ring closing on each other inside one tile: ``succ`` wins) or a graph edge also
typed left/right, and ``seam`` over ``context``.

Design choices, and why
-----------------------
- **Truncation keeps the nearest.** A tile with more lanes (agents) than ``max_lanes``
  (``max_agents``) keeps the ones nearest the tile centre (a lane by the distance from
  the centre to its polyline, an agent by its centre), in their original order, and
  ``truncated`` counts the dropped ones: a fixed token budget (padding to a fixed N makes
  batches cheap) that loses the periphery first.
- **Context in the new tile's frame.** All tiles of an episode share one orientation, so
  tile k's coordinates map to tile k+1's by ``p - 64 (di, dj)`` with ``(di, dj)`` the cell
  step; the shift is applied in float64 before encoding (exact seams stay exact in
  float32) and relations are computed on the untranslated tile (they are translation
  invariant; truncation ranks by distance to the context tile's *own* centre).
- **Pinned entries.** All features of every context token, and the two coordinates of
  each seam endpoint of a target lane, with ``known`` = the context lane's endpoint. The
  pair's ``x`` carries the known value there too, so training noises exactly what
  sampling will fix (a no-op for the file's exact seams).
- **Zero-lane tiles are skipped.** The file format promises a lane in every tile, but a
  hand-built episode or a future format may not; a pair whose context or target tile has
  no lane is left out of :func:`pair_steps` / :class:`TilePairs` and counted in
  ``skipped["empty_tile"]`` (VectorWorld resamples such tiles rather than learning to
  generate an empty square). Consecutive tiles that are not 4-neighbours are counted in
  ``skipped["not_adjacent"]`` (the format makes them 4-connected, so normally 0).
- **Fixed-size blocks in a batch.** :func:`collate_pairs` pads to ``N = 2 M`` with ``M =
  max_lanes + max_agents``, the context at ``[0, M)`` and the target at ``[M, 2M)``, so
  ``x[:, M:]`` is always the new tile (``target_slice``) whatever the counts.

Generation blocks (what the tile generator trains and samples on)
-----------------------------------------------------------------
:func:`outpaint_pair` is the *teacher's* view: it shows the new tile's true relations and
token count, which a sampler cannot know. :func:`generation_block` /
:func:`generation_pair` build the block the generator (:mod:`._outpaint`, whose
docstring gives the reasons) sees at training and at sampling alike: the context (ego
removed, relations from geometry via :func:`lane_successors`), then a fixed block of
``max_lanes`` lane slots and ``max_agents`` agent slots, all real tokens, whose mutual
relations are ``self``/``none``; seam slots (derived from the context's endpoints on the
shared edge) come first with their endpoint pinned, unused slots are empty tokens;
``cond`` is the direction one-hot plus a 5th slot for a first tile (no context), whose
lane slot 0 is the ego's lane with the layout's ``ego_slot`` (``is_lane`` pinned;
:func:`ego_lane_index` picks it from the truth).
:data:`GENERATOR_LAYOUT` (24 lanes, 10 agents) was measured on a 2000-episode file.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping

import numpy as np

from simsci.driving import LANE_KINDS, LANE_POINTS, TILE_SIZE
from simsci.driving.metrics import AGENT_FEATURES, EDGE_TYPES
from simsci.models.vectorworld._lanegroups import COUNT_NAMES, MAX_COUNT, group_lanes

__all__ = [
    "AGENT_SLICE",
    "BEZIER_SLICE",
    "COUNT_SLICE",
    "DIRECTIONS",
    "FIRST_TILE",
    "FLAG_SLICE",
    "GENERATOR_LAYOUT",
    "GEN_COND_DIM",
    "IS_AGENT",
    "IS_LANE",
    "KIND_SLICE",
    "LANE_REPRS",
    "LANE_SLICE",
    "POINTS_SLICE",
    "RELATIONS",
    "SPEED_LIMIT",
    "TOKEN_DIM",
    "WIDTH",
    "TilePairs",
    "TokenLayout",
    "bezier_basis",
    "bezier_points",
    "check_scene_layout",
    "check_tile",
    "collate_pairs",
    "ego_lane_index",
    "episode_tile",
    "fit_bezier",
    "geometry_cols",
    "generation_block",
    "generation_pair",
    "lane_successors",
    "outpaint_pair",
    "pair_steps",
    "tile_tokens",
    "token_points",
    "to_seam_frame",
    "tokens_to_tile",
]

_NK = len(LANE_KINDS)
_NF = len(AGENT_FEATURES)
#: lane points as (x0, y0, x1, y1, ...) / scale
POINTS_SLICE = slice(0, 2 * LANE_POINTS)
WIDTH = 2 * LANE_POINTS
SPEED_LIMIT = WIDTH + 1
KIND_SLICE = slice(SPEED_LIMIT + 1, SPEED_LIMIT + 1 + _NK)
LANE_SLICE = slice(0, KIND_SLICE.stop)
#: x, y, speed, cos, sin, length, width (AGENT_FEATURES order), scaled
AGENT_SLICE = slice(LANE_SLICE.stop, LANE_SLICE.stop + _NF)
IS_LANE = AGENT_SLICE.stop
IS_AGENT = IS_LANE + 1
FLAG_SLICE = slice(IS_LANE, IS_AGENT + 1)
TOKEN_DIM = IS_AGENT + 1

RELATIONS = (
    "none",
    "self",
    "pred",
    "succ",
    "left",
    "right",
    "agent_on_lane",
    "lane_under_agent",
    "agent_near",
    "context",
    "seam",
)
_R = {name: i for i, name in enumerate(RELATIONS)}
#: grid step (di, dj) from the context tile to the new one; ``cond`` is its one-hot
DIRECTIONS = ((1, 0), (0, 1), (-1, 0), (0, -1))
_HALF = TILE_SIZE / 2.0
_FIRST = slice(0, 2)  # a lane token's first point (or first control point)
_LAST = slice(2 * LANE_POINTS - 2, 2 * LANE_POINTS)  # and its last ("points")
#: how a lane's geometry fills :data:`POINTS_SLICE` (:class:`TokenLayout`'s ``lane_repr``)
LANE_REPRS = ("points", "bezier", "road")
#: control points of a ``"bezier"`` lane, ``(P0x, P0y, ..., P3x, P3y) / scale``
BEZIER_SLICE = slice(0, 8)
_BEZIER_LAST = slice(6, 8)
_BEZIER_UNUSED = slice(BEZIER_SLICE.stop, POINTS_SLICE.stop)
#: a ``"road"`` lane token's group counts (left, right, oncoming) / COUNT_SCALE, in the
#: columns after its reference lane's control points (:mod:`._lanegroups`)
COUNT_SLICE = slice(BEZIER_SLICE.stop, BEZIER_SLICE.stop + len(COUNT_NAMES))
COUNT_SCALE = 2.0
_ROAD_UNUSED = slice(COUNT_SLICE.stop, POINTS_SLICE.stop)


@dataclasses.dataclass(frozen=True)
class TokenLayout:
    """How tiles become tokens (module docstring). Lengths in m, speeds in m/s.

    max_lanes, max_agents: tokens kept per tile (the nearest to the centre);
    scale: position divisor; speed_scale: speed and speed-limit divisor; width_scale:
    lane-width divisor; length_scale, agent_width_scale: vehicle size divisors;
    near_radius: ``agent_near`` distance; seam_tol: endpoint coincidence for ``seam``;
    edge_tol: how far a context endpoint may lie off the shared edge to count as a seam;
    lane_repr: a lane's geometry in the token, ``"points"`` (its 20 points) or
    ``"bezier"`` (the 4 control points of its least-squares cubic, module docstring);
    ego_slot: a first tile's lane slot 0 is the ego's lane (:func:`generation_block`);
    count_pins: every target slot's flag (``is_lane`` / ``is_agent``) is pinned in
    generation blocks, to the truth's at training and to counts drawn by the generator's
    count model at sampling (:mod:`._outpaint`, "Counts as conditions");
    seam_frame: a seam slot's lane geometry is written in its seam's own frame (origin at
    the pin, x along the lane it continues: :func:`to_seam_frame`), so that going
    straight on is the same token wherever the seam lies and however the road runs, and
    its width is pinned to that lane's.
    The defaults of the last four, ``"points"``, False, False and False, are what a
    layout saved before they existed meant; :data:`GENERATOR_LAYOUT` sets ``ego_slot``.
    """

    max_lanes: int = 48
    max_agents: int = 24
    scale: float = 32.0
    speed_scale: float = 30.0
    width_scale: float = 4.0
    length_scale: float = 5.0
    agent_width_scale: float = 2.0
    near_radius: float = 20.0
    seam_tol: float = 0.5
    edge_tol: float = 1e-2
    lane_repr: str = "points"
    ego_slot: bool = False
    count_pins: bool = False
    seam_frame: bool = False

    def __post_init__(self):
        for name in ("max_lanes", "max_agents"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"TokenLayout.{name} must be an int >= 1, got {v!r}")
        if self.lane_repr not in LANE_REPRS:
            raise ValueError(
                f"TokenLayout.lane_repr must be one of {LANE_REPRS}, got {self.lane_repr!r}"
            )
        for name in ("ego_slot", "count_pins", "seam_frame"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"TokenLayout.{name} must be a bool, got {getattr(self, name)!r}")
        for f in dataclasses.fields(self)[2:]:
            if f.name in ("lane_repr", "ego_slot", "count_pins", "seam_frame"):
                continue
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"TokenLayout.{f.name} must be a number > 0, got {v!r}")
            if not math.isfinite(v):
                raise ValueError(f"TokenLayout.{f.name} must be finite, got {v!r}")

    @property
    def tile_capacity(self) -> int:
        """Tokens per tile at most, ``max_lanes + max_agents``."""
        return self.max_lanes + self.max_agents

    @property
    def pair_capacity(self) -> int:
        """Tokens per padded pair, ``2 (max_lanes + max_agents)``."""
        return 2 * self.tile_capacity

    @property
    def last_cols(self) -> slice:
        """The token columns of a lane's last point (its last control point)."""
        return _LAST if self.lane_repr == "points" else _BEZIER_LAST

    @property
    def unused_cols(self) -> slice | None:
        """Columns of :data:`POINTS_SLICE` a lane token leaves 0 (pinned in generation
        blocks): the 32 after the control points for ``"bezier"``, the 29 after the
        control points and group counts for ``"road"``, None for ``"points"``."""
        return {"bezier": _BEZIER_UNUSED, "road": _ROAD_UNUSED}.get(self.lane_repr)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> TokenLayout:
        if not isinstance(d, Mapping):
            raise TypeError(f"TokenLayout.from_dict takes a dict, got {type(d).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ValueError(f"unknown TokenLayout keys {unknown}; valid keys are {names}")
        return cls(**d)


def _check_layout_arg(layout) -> TokenLayout:
    if not isinstance(layout, TokenLayout):
        raise TypeError(
            f"layout must be a TokenLayout, got {type(layout).__name__}; use "
            "TokenLayout(...) or TokenLayout.from_dict(d)"
        )
    return layout


# ------------------------------------------------------------------ geometry
def _polyline_dist(q: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Distance from points ``q`` (m, 2) to polylines ``points`` (n, P, 2): (m, n)."""
    a, b = points[:, :-1], points[:, 1:]  # (n, S, 2)
    ab = b - a
    den = np.maximum((ab**2).sum(-1), 1e-18)
    d = q[:, None, None, :] - a[None]  # (m, n, S, 2)
    u = np.clip((d * ab[None]).sum(-1) / den[None], 0.0, 1.0)
    foot = a[None] + u[..., None] * ab[None]
    return np.sqrt(((q[:, None, None, :] - foot) ** 2).sum(-1)).min(-1)


def _nearest(dist: np.ndarray, keep: int) -> np.ndarray:
    """Indices (ascending) of the ``keep`` smallest entries of ``dist`` (stable)."""
    if len(dist) <= keep:
        return np.arange(len(dist))
    return np.sort(np.argsort(dist, kind="stable")[:keep])


def _check_tile(tile_lanes, agents_now, agents_valid):
    if not isinstance(tile_lanes, Mapping):
        raise TypeError(
            "tile_lanes must be a dict like read_scene(...)['lanes'][k] (points, width, "
            f"speed_limit, kind, edge_index, edge_type), got {type(tile_lanes).__name__}"
        )
    missing = [
        k
        for k in ("points", "width", "speed_limit", "kind", "edge_index", "edge_type")
        if k not in tile_lanes
    ]
    if missing:
        raise ValueError(
            f"tile_lanes lacks {missing}; pass read_scene(...)['lanes'][k] (a tile's lanes)"
        )
    pts = np.asarray(tile_lanes["points"], dtype=np.float64)
    if pts.ndim != 3 or pts.shape[1:] != (LANE_POINTS, 2):
        raise ValueError(
            f"lane points must be (n, {LANE_POINTS}, 2) (the tile layout's lane_points), got "
            f"shape {pts.shape}; the file was written with another tile layout: regenerate it"
        )
    n = len(pts)
    fields = {}
    for k in ("width", "speed_limit", "kind"):
        v = np.asarray(tile_lanes[k])
        if v.shape != (n,):
            raise ValueError(f"tile_lanes[{k!r}] must be ({n},) like points, got {v.shape}")
        fields[k] = v
    kind = fields["kind"].astype(np.int64)
    if n and (kind.min() < 0 or kind.max() >= _NK):
        raise ValueError(f"lane kind must be in [0, {_NK}) (LANE_KINDS), got {np.unique(kind)}")
    if not np.isfinite(pts).all():
        raise ValueError("lane points have NaN or inf; a tile's lane pieces must be finite")
    ei = np.asarray(tile_lanes["edge_index"], dtype=np.int64).reshape(-1, 2)
    et = np.asarray(tile_lanes["edge_type"], dtype=np.int64).reshape(-1)
    if len(ei) != len(et):
        raise ValueError(f"edge_index ({len(ei)}, 2) and edge_type ({len(et)},) differ in length")
    if len(ei) and (ei.min() < 0 or ei.max() >= n):
        raise ValueError(f"edge_index must hold local lane ids in [0, {n}), got {ei.max()}")
    if len(et) and (et.min() < 0 or et.max() >= len(EDGE_TYPES)):
        raise ValueError(f"edge_type must be in [0, {len(EDGE_TYPES)}) ({EDGE_TYPES})")
    ag = np.asarray(agents_now, dtype=np.float64)
    if ag.ndim != 2 or ag.shape[1] != _NF:
        raise ValueError(
            f"agents_now must be (A, {_NF}) {AGENT_FEATURES} (the last history frame, "
            f"agents[k, :, -1]), got shape {ag.shape}"
        )
    val = np.asarray(agents_valid)
    if val.shape != (len(ag),) or val.dtype != np.bool_:
        raise ValueError(
            f"agents_valid must be bool ({len(ag)},) like agents_now, got {val.dtype} {val.shape}"
        )
    if not np.isfinite(ag[val]).all():
        raise ValueError("a valid agent has NaN or inf features; agents_valid must mark them")
    return pts, fields, kind, ei, et, ag[val]


# ------------------------------------------------------------------ lane geometry
def bezier_basis(n: int = LANE_POINTS) -> np.ndarray:
    """Cubic Bernstein basis (n, 4) at the uniform parameters ``u_k = k / (n - 1)``."""
    u = np.linspace(0.0, 1.0, n)
    return np.stack([(1 - u) ** 3, 3 * u * (1 - u) ** 2, 3 * u**2 * (1 - u), u**3], -1)


_BASIS = bezier_basis()
# least squares for (P1, P2) with P0, P3 fixed at the end points: (2, 20)
_INNER_PINV = np.linalg.pinv(_BASIS[:, 1:3])


def fit_bezier(points) -> np.ndarray:
    """Control points (n, 4, 2) float64 of the cubic Bézier nearest lane polylines
    ``points`` (n, 20, 2) (least squares over the 20 points at ``u_k = k / 19``; they
    are evenly spaced in arc length), with ``P0`` / ``P3`` **exactly** the first / last
    point (a Bézier interpolates its end control points, so seam pins map to them)."""
    p = np.asarray(points, np.float64)
    if p.ndim != 3 or p.shape[1:] != (LANE_POINTS, 2):
        raise ValueError(f"points must be (n, {LANE_POINTS}, 2) lane polylines, got {p.shape}")
    ends = _BASIS[:, [0]] * p[:, :1] + _BASIS[:, [3]] * p[:, -1:]  # (n, 20, 2)
    inner = np.einsum("kp,npc->nkc", _INNER_PINV, p - ends)  # (n, 2, 2)
    return np.concatenate([p[:, :1], inner, p[:, -1:]], 1)


def bezier_points(ctrl):
    """The 20 points (..., 20, 2) of cubic Béziers ``ctrl`` (..., 4, 2) at ``u_k = k /
    19``: the first and last are exactly ``P0`` and ``P3``. Numpy or torch (differentiable,
    on ``ctrl``'s device and dtype)."""
    import torch

    if isinstance(ctrl, torch.Tensor):
        basis = torch.as_tensor(_BASIS, dtype=ctrl.dtype, device=ctrl.device)
        out = torch.einsum("pk,...kc->...pc", basis, ctrl)
        return torch.cat([ctrl[..., :1, :], out[..., 1:-1, :], ctrl[..., -1:, :]], -2)
    c = np.asarray(ctrl)
    out = np.einsum("pk,...kc->...pc", _BASIS, c).astype(c.dtype)
    out[..., 0, :], out[..., -1, :] = c[..., 0, :], c[..., -1, :]
    return out


def _encode_geometry(pts: np.ndarray, layout: TokenLayout) -> np.ndarray:
    """Lane polylines (n, 20, 2) already divided by ``scale`` -> the token's
    :data:`POINTS_SLICE` columns (n, 40) under ``layout.lane_repr``."""
    n = len(pts)
    if layout.lane_repr == "points":
        return pts.reshape(n, -1)
    out = np.zeros((n, 2 * LANE_POINTS), pts.dtype)
    out[:, BEZIER_SLICE] = fit_bezier(pts).reshape(n, -1)
    return out


def _decode_geometry(cols, layout: TokenLayout):
    """The inverse of :func:`_encode_geometry`: columns (n, 40) -> points (n, 20, 2) (in
    units of ``scale``); numpy or torch."""
    if layout.lane_repr == "points":
        return cols.reshape(-1, LANE_POINTS, 2)
    return bezier_points(cols[:, BEZIER_SLICE].reshape(-1, 4, 2))


def token_points(x, layout: TokenLayout) -> np.ndarray:
    """Lane tokens ``x`` (n, TOKEN_DIM) -> their polylines (n, 20, 2) float64 in metres."""
    cols = np.asarray(x, np.float64)[:, POINTS_SLICE]
    return _decode_geometry(cols, layout) * layout.scale


def geometry_cols(layout: TokenLayout) -> slice:
    """The token columns holding a lane's positions: the 20 points (``"points"``) or the
    4 control points (``"bezier"``, ``"road"``)."""
    return POINTS_SLICE if layout.lane_repr == "points" else BEZIER_SLICE


def to_seam_frame(cols, pin, tangent, layout: TokenLayout, inverse: bool = False):
    """A lane token's position columns (k,) (x0, y0, x1, y1, ... in units of ``scale``,
    :func:`geometry_cols`) between the tile frame and a seam's frame: origin at ``pin``
    (2,) (m, tile frame), x along the unit ``tangent`` (2,) (the direction of travel of the
    lane the slot continues), y to its left. ``inverse``: seam frame -> tile frame. A
    rotation and a shift, so distances and the Bézier / polyline shape are kept; the pin
    itself maps to (0, 0). Numpy float64 in, float64 out."""
    p = np.asarray(cols, np.float64).reshape(-1, 2)
    t = np.asarray(tangent, np.float64)
    rot = np.array([[t[0], -t[1]], [t[1], t[0]]])  # columns: tangent, left normal
    o = np.asarray(pin, np.float64) / layout.scale
    out = p @ rot.T + o if inverse else (p - o) @ rot
    return out.reshape(-1)


def _seam_tangent(lane: np.ndarray, end: int, step) -> np.ndarray:
    """The unit direction of travel at a seam of the context ``lane`` (20, 2) continued
    by a slot with ``end`` (0: the lane ends on the edge, its last segment; 1: it starts
    there, its first); a degenerate segment falls back to ``step`` (into the new tile)
    for end 0 and ``-step`` for end 1."""
    d = lane[-1] - lane[-2] if end == 0 else lane[1] - lane[0]
    n = float(np.hypot(*d))
    if n > 1e-9:
        return d / n
    s = np.asarray(step, np.float64)
    return s if end == 0 else -s


# ------------------------------------------------------------------ one tile
def tile_tokens(tile_lanes, agents_now, agents_valid, layout=None, offset=None) -> dict:
    """One tile as tokens: lanes then agents.

    ``tile_lanes``: ``read_scene(...)["lanes"][k]`` (points (n, 20, 2), width,
    speed_limit, kind (n,), edge_index (E, 2) local, edge_type (E,)); ``agents_now``
    (A, 7) = ``agents[k, :, -1]``; ``agents_valid`` (A,) bool; ``offset`` (2,) metres
    added to every position before encoding (context tiles; relations and truncation use
    the untranslated tile).

    Returns ``x`` float32 (N, TOKEN_DIM), ``rel`` int64 (N, N), ``mask`` bool (N,) (all
    True), ``counts`` {"lanes", "agents"} kept, ``truncated`` {"lanes", "agents"} dropped,
    ``lane_index`` / ``agent_index`` (indices of the kept lanes into ``tile_lanes`` and of
    the kept agents into ``agents_now``).
    """
    layout = TokenLayout() if layout is None else _check_layout_arg(layout)
    pts, fields, kind, ei, et, _ = _check_tile(tile_lanes, agents_now, agents_valid)
    ag_all = np.asarray(agents_now, dtype=np.float64)
    a_ids = np.flatnonzero(np.asarray(agents_valid))
    centre = np.zeros((1, 2))
    lane_keep = (
        _nearest(_polyline_dist(centre, pts)[0], layout.max_lanes) if len(pts) else np.arange(0)
    )
    a_dist = np.sqrt((ag_all[a_ids, :2] ** 2).sum(-1))
    agent_keep = a_ids[_nearest(a_dist, layout.max_agents)]
    pts_k, kind_k = pts[lane_keep], kind[lane_keep]
    ag = ag_all[agent_keep]
    nl, na = len(lane_keep), len(agent_keep)
    N = nl + na
    off = np.zeros(2) if offset is None else np.asarray(offset, dtype=np.float64).reshape(2)

    x = np.zeros((N, TOKEN_DIM), np.float64)
    x[:nl, POINTS_SLICE] = _encode_geometry((pts_k + off) / layout.scale, layout)
    x[:nl, WIDTH] = fields["width"][lane_keep] / layout.width_scale
    x[:nl, SPEED_LIMIT] = fields["speed_limit"][lane_keep] / layout.speed_scale
    if layout.lane_repr == "road" and "group" in tile_lanes:
        group = np.asarray(tile_lanes["group"], np.float64).reshape(-1, len(COUNT_NAMES))
        x[:nl, COUNT_SLICE] = group[lane_keep] / COUNT_SCALE
    x[np.arange(nl), KIND_SLICE.start + kind_k] = 1.0
    x[:nl, IS_LANE] = 1.0
    a0 = AGENT_SLICE.start
    x[nl:, a0 : a0 + 2] = (ag[:, :2] + off) / layout.scale
    x[nl:, a0 + 2] = ag[:, 2] / layout.speed_scale
    x[nl:, a0 + 3 : a0 + 5] = ag[:, 3:5]
    x[nl:, a0 + 5] = ag[:, 5] / layout.length_scale
    x[nl:, a0 + 6] = ag[:, 6] / layout.agent_width_scale
    x[nl:, IS_AGENT] = 1.0

    # relations, written from the lowest precedence up (module docstring)
    rel = np.zeros((N, N), np.int64)
    if na > 1:
        d = np.sqrt(((ag[:, None, :2] - ag[None, :, :2]) ** 2).sum(-1))
        rel[nl:, nl:][d <= layout.near_radius] = _R["agent_near"]
    if na and nl:
        dist = _polyline_dist(ag[:, :2], pts_k)  # (na, nl)
        width = np.asarray(fields["width"], np.float64)[lane_keep]
        dist = np.where(dist <= width[None], dist, np.inf)
        best = dist.argmin(1)
        on = np.isfinite(dist[np.arange(na), best])
        ai, li = np.flatnonzero(on), best[on]
        rel[li, nl + ai] = _R["lane_under_agent"]
        rel[nl + ai, li] = _R["agent_on_lane"]
    if len(ei) and nl:
        local = np.full(len(pts), -1, np.int64)
        local[lane_keep] = np.arange(nl)
        src, dst = local[ei[:, 0]], local[ei[:, 1]]
        ok = (src >= 0) & (dst >= 0)
        for name in ("right", "left", "pred", "succ"):
            m = ok & (et == EDGE_TYPES.index(name))
            rel[src[m], dst[m]] = _R[name]
    rel[np.arange(N), np.arange(N)] = _R["self"]
    return {
        "x": x.astype(np.float32),
        "rel": rel,
        "mask": np.ones(N, bool),
        "counts": {"lanes": nl, "agents": na},
        "truncated": {"lanes": len(pts) - nl, "agents": len(a_ids) - na},
        "lane_index": lane_keep,
        "agent_index": agent_keep,
    }


def tokens_to_tile(x, mask=None, layout=None) -> dict:
    """Decode tokens (N, TOKEN_DIM) (real or generated) into a tile.

    A token with ``mask`` True is a lane when ``is_lane >= is_agent`` and ``is_lane >=
    0.5``, an agent when ``is_agent > is_lane`` and ``is_agent >= 0.5``, dropped when both
    flags are below 0.5. Returns ``points`` (n, 20, 2), ``width`` (n,), ``speed_limit``
    (n,), ``kind`` (n,) int64 (argmax of the one-hot), ``agents`` (a, 7) with ``(cos,
    sin)`` renormalised ((1, 0) if both are 0), ``lane_token`` / ``agent_token`` (the
    token indices). Numpy in, numpy out; a torch tensor in, tensors on its device/dtype.
    """
    import torch

    layout = TokenLayout() if layout is None else _check_layout_arg(layout)
    is_np = not isinstance(x, torch.Tensor)
    xt = torch.as_tensor(np.asarray(x)) if is_np else x
    if xt.ndim != 2 or xt.shape[1] != TOKEN_DIM or not xt.is_floating_point():
        raise ValueError(
            f"x must be float tokens (N, TOKEN_DIM={TOKEN_DIM}) of one tile, got "
            f"{xt.dtype} of shape {tuple(xt.shape)}"
        )
    if mask is None:
        m = torch.ones(xt.shape[0], dtype=torch.bool, device=xt.device)
    else:
        m = torch.as_tensor(np.asarray(mask)) if not isinstance(mask, torch.Tensor) else mask
        m = m.to(xt.device)
        if m.dtype != torch.bool or m.shape != (xt.shape[0],):
            raise ValueError(
                f"mask must be bool ({xt.shape[0]},) like x's tokens, got {m.dtype} "
                f"{tuple(m.shape)}"
            )
    fl, fa = xt[:, IS_LANE], xt[:, IS_AGENT]
    lane = m & (fl >= fa) & (fl >= 0.5)
    agent = m & (fa > fl) & (fa >= 0.5)
    lt, at = torch.nonzero(lane).flatten(), torch.nonzero(agent).flatten()
    xl, xa = xt[lt], xt[at]
    points = _decode_geometry(xl[:, POINTS_SLICE], layout) * layout.scale
    width = xl[:, WIDTH] * layout.width_scale
    speed = xl[:, SPEED_LIMIT] * layout.speed_scale
    kind = xl[:, KIND_SLICE].argmax(-1) if len(xl) else torch.zeros(0, dtype=torch.long)
    a = xa[:, AGENT_SLICE]
    cs = a[:, 3:5]
    norm = torch.linalg.vector_norm(cs, dim=-1, keepdim=True)
    unit = torch.zeros_like(cs)
    unit[:, 0] = 1.0
    cs = torch.where(norm > 0, cs / norm.clamp(min=torch.finfo(cs.dtype).tiny), unit)
    agents = torch.cat(
        [
            a[:, :2] * layout.scale,
            a[:, 2:3] * layout.speed_scale,
            cs,
            a[:, 5:6] * layout.length_scale,
            a[:, 6:7] * layout.agent_width_scale,
        ],
        dim=-1,
    )
    out = {
        "points": points,
        "width": width,
        "speed_limit": speed,
        "kind": kind.to(torch.long),
        "agents": agents,
        "lane_token": lt,
        "agent_token": at,
    }
    if layout.lane_repr == "road":  # group counts, rounded to whole lanes
        out["group"] = (
            torch.round(xl[:, COUNT_SLICE] * COUNT_SCALE).clamp(0, MAX_COUNT).to(torch.long)
        )
    if is_np:
        out = {k: v.cpu().numpy() for k, v in out.items()}
    return out


# ------------------------------------------------------------------ pairs
def _direction(episode, k) -> int | None:
    cell = np.asarray(episode["tile_cell"], dtype=np.int64)
    step = tuple(int(v) for v in cell[k + 1] - cell[k])
    return DIRECTIONS.index(step) if step in DIRECTIONS else None


def _check_episode(episode):
    if not isinstance(episode, Mapping):
        raise TypeError(f"episode must be a dict from read_scene, got {type(episode).__name__}")
    missing = [k for k in ("tile_cell", "agents", "agents_valid", "lanes") if k not in episode]
    if missing:
        raise ValueError(f"episode lacks {missing}; pass read_scene(path_or_dataset, i)")
    ag = np.asarray(episode["agents"])
    if ag.ndim != 4 or ag.shape[-1] != _NF:
        raise ValueError(
            f"episode agents must be (T, A, H, {_NF}) {AGENT_FEATURES}, got shape {ag.shape}; "
            "the file was written with another agent layout: regenerate it"
        )
    T = len(episode["tile_cell"])
    if len(episode["lanes"]) != T or ag.shape[0] != T:
        raise ValueError(
            f"episode has {T} tiles but {len(episode['lanes'])} lane lists and {ag.shape[0]} "
            "agent frames; pass read_scene's output unchanged"
        )
    for k, lanes in enumerate(episode["lanes"]):
        shape = np.shape(lanes["points"])
        if len(shape) != 3 or tuple(shape[1:]) != (LANE_POINTS, 2):
            raise ValueError(
                f"tile {k}'s lane points are {shape}, the tokens need (n, {LANE_POINTS}, 2); "
                "the file was written with another lane layout: regenerate it"
            )
    return T


def pair_steps(episode) -> tuple[list[int], dict]:
    """Steps k whose pair k -> k+1 is usable, and ``skipped`` counts: ``not_adjacent``
    (cells not 4-neighbours) and ``empty_tile`` (tile k or k+1 has no lane)."""
    T = _check_episode(episode)
    ks, skipped = [], {"not_adjacent": 0, "empty_tile": 0}
    for k in range(T - 1):
        if _direction(episode, k) is None:
            skipped["not_adjacent"] += 1
        elif min(len(episode["lanes"][k]["points"]), len(episode["lanes"][k + 1]["points"])) == 0:
            skipped["empty_tile"] += 1
        else:
            ks.append(k)
    return ks, skipped


def outpaint_pair(episode, k: int, layout=None) -> dict:
    """The outpainting pair tile k (context) -> tile k+1 (target) of an episode.

    Tokens ``[context (nc) | target (nt)]``: ``x`` float32 (N, D), ``rel`` int64 (N, N)
    (blocks from each tile, ``context`` across, ``seam`` both ways for continuing lanes),
    ``mask`` (N,), ``pinned`` bool (N, D) (all of the context; seam endpoints), ``known``
    float32 (N, D) (= ``x``), ``cond`` float32 (4,) one-hot of the grid step in
    :data:`DIRECTIONS`, ``direction``, ``context_slice`` / ``target_slice``, ``seams``
    int64 (S, 3) rows ``(context token, target token, end)`` with end 0 = the target
    lane enters (its first point = the context lane's last), 1 = it leaves (its last point
    = the context lane's first), ``counts`` / ``truncated`` per tile, ``capacity``.

    A seam: a target lane's endpoint within ``seam_tol`` of the context lane's opposite
    endpoint, which lies on the shared edge (within ``edge_tol``); several matches all get
    ``seam``, the pinned value is the nearest one.
    """
    layout = TokenLayout() if layout is None else _check_layout_arg(layout)
    T = _check_episode(episode)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < T - 1:
        raise ValueError(f"k must be an int in [0, {T - 1}) (pairs k -> k+1), got {k!r}")
    k = int(k)
    direction = _direction(episode, k)
    if direction is None:
        cell = np.asarray(episode["tile_cell"])
        raise ValueError(
            f"tiles {k} {cell[k].tolist()} and {k + 1} {cell[k + 1].tolist()} are not grid "
            "neighbours; use pair_steps(episode) for the usable k"
        )
    for j in (k, k + 1):
        if len(episode["lanes"][j]["points"]) == 0:
            raise ValueError(
                f"tile {j} has no lane; such pairs are skipped (pair_steps counts them)"
            )
    step = np.asarray(DIRECTIONS[direction], np.float64)
    agents = np.asarray(episode["agents"])
    valid = np.asarray(episode["agents_valid"])
    ctx = tile_tokens(
        episode["lanes"][k], agents[k, :, -1], valid[k], layout, offset=-TILE_SIZE * step
    )
    tgt = tile_tokens(episode["lanes"][k + 1], agents[k + 1, :, -1], valid[k + 1], layout)
    nc, nt = len(ctx["x"]), len(tgt["x"])
    N = nc + nt
    x = np.concatenate([ctx["x"], tgt["x"]])
    rel = np.full((N, N), _R["context"], np.int64)
    rel[:nc, :nc] = ctx["rel"]
    rel[nc:, nc:] = tgt["rel"]
    pinned = np.zeros((N, TOKEN_DIM), bool)
    pinned[:nc] = True

    # seams, in the target frame (metres, float64)
    ncl, ntl = ctx["counts"]["lanes"], tgt["counts"]["lanes"]
    cp, tp = token_points(ctx["x"][:ncl], layout), token_points(tgt["x"][:ntl], layout)
    if layout.unused_cols is not None:  # the columns a Bézier lane leaves 0 are known
        pinned[nc : nc + ntl, layout.unused_cols] = True
    axis = 0 if step[0] != 0 else 1
    edge = -_HALF * step[axis]  # the shared edge in the target frame
    seams = []
    for end, (t_pt, c_pt) in enumerate(((tp[:, 0], cp[:, -1]), (tp[:, -1], cp[:, 0]))):
        on_edge = np.abs(c_pt[:, axis] - edge) <= layout.edge_tol  # (ncl,)
        d = np.sqrt(((t_pt[:, None] - c_pt[None]) ** 2).sum(-1))  # (ntl, ncl)
        d = np.where(on_edge[None] & (d <= layout.seam_tol), d, np.inf)
        for j in np.flatnonzero(np.isfinite(d).any(1)):
            for i in np.flatnonzero(np.isfinite(d[j])):
                rel[i, nc + j] = rel[nc + j, i] = _R["seam"]
                seams.append((i, nc + j, end))
            i = int(d[j].argmin())
            last = layout.last_cols
            t_cols, c_cols = (_FIRST, last) if end == 0 else (last, _FIRST)
            pinned[nc + j, t_cols] = True
            x[nc + j, t_cols] = x[i, c_cols]
    cond = np.zeros(len(DIRECTIONS), np.float32)
    cond[direction] = 1.0
    return {
        "x": x,
        "rel": rel,
        "mask": np.ones(N, bool),
        "pinned": pinned,
        "known": x.copy(),
        "cond": cond,
        "direction": direction,
        "context_slice": slice(0, nc),
        "target_slice": slice(nc, N),
        "seams": np.asarray(seams, np.int64).reshape(-1, 3),
        "counts": {"context": ctx["counts"], "target": tgt["counts"]},
        "truncated": {"context": ctx["truncated"], "target": tgt["truncated"]},
        "capacity": layout.pair_capacity,
    }


# ------------------------------------------------------------------ files
def check_scene_layout(ds) -> None:
    """Refuse a scene file whose layout the tokens cannot represent (a ValueError naming
    the key, what the file has and what is needed): ``tile_size`` 64, ``lane_points``
    20, ``agent_features`` (7, AGENT_FEATURES) present, ``lane_kinds`` and
    ``edge_types`` as this version's when stored. (The arrays' shapes, agents
    (T, A, H, 7) and lane points (n, 20, 2), are checked per episode by
    :func:`pair_steps` / :func:`outpaint_pair`.)"""
    meta = ds.meta
    need = {
        "tile_size": TILE_SIZE,
        "lane_points": LANE_POINTS,
        "agent_features": list(AGENT_FEATURES),
    }
    optional = {"lane_kinds": list(LANE_KINDS), "edge_types": list(EDGE_TYPES)}
    for key, want in {**need, **optional}.items():
        if key not in meta:
            if key in need:
                raise ValueError(
                    f"{ds.path}: the scene file's meta lacks {key!r} (need {want!r}); the "
                    "tokens need a file written by simsci.driving.make_scenes"
                )
            continue
        if meta[key] != want:
            raise ValueError(
                f"{ds.path}: the scene file's layout {key}={meta[key]!r} differs from the "
                f"token layout's {want!r}; regenerate the file with this simsci version"
            )


def _dataset_class():
    import torch.utils.data

    return torch.utils.data.Dataset


class TilePairs(_dataset_class()):
    """Every outpainting pair (tile k -> k+1) of a scene file, as a torch Dataset.

    ``path``: a scene file or shard directory (``make_scenes``); ``episodes``: episode
    ids to use (default all); ``layout``: a :class:`TokenLayout`. The index
    ``pairs`` (list of ``(episode, k)``) is built once (one pass over the episodes);
    ``skipped`` sums :func:`pair_steps`' counts. Items are :func:`outpaint_pair` dicts
    (numpy) plus ``episode`` and ``step``, read lazily (the file is reopened in each
    process, e.g. DataLoader workers; the last episode read is cached). Batch them with
    :func:`collate_pairs`.
    """

    def __init__(self, path, episodes: Iterable[int] | None = None, layout=None):
        from simsci import data as sdata
        from simsci.driving import read_scene

        self.layout = TokenLayout() if layout is None else _check_layout_arg(layout)
        self.path = os.fspath(path)
        ds = sdata.open(self.path)
        try:
            check_scene_layout(ds)
            n = len(ds)
            if episodes is None:
                ids = list(range(n))
            else:
                ids = [int(i) for i in episodes]
                bad = [i for i in ids if not 0 <= i < n]
                if bad:
                    raise ValueError(f"episodes {bad} out of range: the file has {n} (0..{n - 1})")
            self.episodes = ids
            self.pairs: list[tuple[int, int]] = []
            self.skipped = {"not_adjacent": 0, "empty_tile": 0}
            for i in ids:
                ks, skipped = pair_steps(read_scene(ds, i))
                self.pairs += [(i, k) for k in ks]
                for key, v in skipped.items():
                    self.skipped[key] += v
        finally:
            ds.close()
        self._ds = None
        self._pid = None
        self._cache = (None, None)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(_ds=None, _pid=None, _cache=(None, None))
        return state

    def _episode(self, i):
        from simsci import data as sdata
        from simsci.driving import read_scene

        if self._cache[0] == i:
            return self._cache[1]
        if self._ds is None or self._pid != os.getpid():
            self._ds = sdata.open(self.path, check=False)
            self._pid = os.getpid()
        ep = read_scene(self._ds, i)
        self._cache = (i, ep)
        return ep

    def __getitem__(self, idx: int) -> dict:
        if not -len(self) <= idx < len(self):
            raise IndexError(f"pair {idx} out of range for {len(self)} pairs")
        i, k = self.pairs[idx]
        pair = outpaint_pair(self._episode(i), k, self.layout)
        pair["episode"], pair["step"] = i, k
        return pair

    def close(self) -> None:
        if self._ds is not None:
            self._ds.close()
        self._ds, self._pid, self._cache = None, None, (None, None)


def collate_pairs(batch, capacity: int | None = None) -> dict:
    """Pad :func:`outpaint_pair` dicts to ``N = capacity`` (default the pairs'
    ``2 (max_lanes + max_agents)``): context tokens at ``[0, N/2)``, target tokens at
    ``[N/2, N)``, padding with ``mask`` False, ``rel`` 0, ``pinned`` False, 0 values.

    Returns torch tensors ``x`` float32 (B, N, D), ``rel`` int64 (B, N, N), ``mask`` bool
    (B, N), ``pinned`` bool (B, N, D), ``known`` float32 (B, N, D), ``cond`` float32 (B, 4),
    ``target`` bool (B, N) (the new tile's real tokens), ``direction`` int64 (B,),
    ``episode``/``step`` int64 (B,) (-1 when absent) and ``target_slice`` = slice(N/2, N).
    """
    import torch

    if not isinstance(batch, (list, tuple)) or not batch:
        raise ValueError("collate_pairs takes a non-empty list of outpaint_pair dicts")
    if capacity is None:
        capacity = int(batch[0]["capacity"])
    if capacity % 2:
        raise ValueError(f"capacity must be even (two tile blocks), got {capacity}")
    M = capacity // 2
    B, D = len(batch), TOKEN_DIM
    x = np.zeros((B, capacity, D), np.float32)
    known = np.zeros((B, capacity, D), np.float32)
    pinned = np.zeros((B, capacity, D), bool)
    mask = np.zeros((B, capacity), bool)
    target = np.zeros((B, capacity), bool)
    rel = np.zeros((B, capacity, capacity), np.int64)
    cond = np.zeros((B, len(DIRECTIONS)), np.float32)
    direction = np.zeros(B, np.int64)
    episode = np.full(B, -1, np.int64)
    step = np.full(B, -1, np.int64)
    for b, p in enumerate(batch):
        cs, ts = p["context_slice"], p["target_slice"]
        nc, nt = cs.stop - cs.start, ts.stop - ts.start
        if nc > M or nt > M:
            raise ValueError(
                f"pair {b} has {nc} context and {nt} target tokens, more than capacity/2 = {M}; "
                "pass the capacity of the TokenLayout that made the pairs"
            )
        idx = np.concatenate([np.arange(nc), M + np.arange(nt)])
        x[b, idx] = p["x"]
        known[b, idx] = p["known"]
        pinned[b, idx] = p["pinned"]
        mask[b, idx] = p["mask"]
        target[b, M : M + nt] = True
        rel[b, idx[:, None], idx[None, :]] = p["rel"]
        cond[b] = p["cond"]
        direction[b] = p["direction"]
        episode[b] = p.get("episode", -1)
        step[b] = p.get("step", -1)
    out = {
        "x": x,
        "rel": rel,
        "mask": mask,
        "pinned": pinned,
        "known": known,
        "cond": cond,
        "target": target,
        "direction": direction,
        "episode": episode,
        "step": step,
    }
    out = {k: torch.from_numpy(v) for k, v in out.items()}
    out["target_slice"] = slice(M, capacity)
    return out


# ------------------------------------------------------------------ generation blocks
#: the generator's layout, measured on a 2000-episode scene file (22,803 tiles): tiles
#: have <= 24 lanes and <= 10 non-ego agents in 99.67 % of cases (lanes: median 6, 99th
#: percentile 19, max 30; non-ego agents: median 2, 99th percentile 7, max 12), and a
#: first tile's lane slot 0 for the ego's lane
GENERATOR_LAYOUT = TokenLayout(max_lanes=24, max_agents=10, ego_slot=True)
#: the generator's condition: one-hot of the step in DIRECTIONS, or this slot for a
#: first tile (no context)
FIRST_TILE = len(DIRECTIONS)
GEN_COND_DIM = len(DIRECTIONS) + 1
_TILE_KEYS = ("points", "width", "speed_limit", "kind", "agents")


def _end_tangents(pts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit tangents (n, 2) at the first and the last point of polylines (n, P, 2): the
    first / last segment, or the chord when that segment has zero length (0 if both)."""
    chord = pts[:, -1] - pts[:, 0]
    out = []
    for seg in (pts[:, 1] - pts[:, 0], pts[:, -1] - pts[:, -2]):
        short = (seg**2).sum(-1) < 1e-18
        seg = np.where(short[:, None], chord, seg)
        norm = np.sqrt((seg**2).sum(-1, keepdims=True))
        out.append(np.where(norm > 1e-12, seg / np.maximum(norm, 1e-300), 0.0))
    return out[0], out[1]


def ego_lane_index(points, width, max_angle: float = 30.0) -> int:
    """The lane a first tile's ego drives on: among lanes (n, P, 2) passing within
    ``max(width / 2, 0.5)`` m of the origin with a heading (their nearest segment's
    direction) within ``max_angle`` degrees of +x, the one nearest the origin; -1 when
    none does. (The world puts its ego at the origin heading +x, as tile 0 of the data
    is centred on the ego along its heading.)"""
    pts = np.asarray(points, np.float64)
    if len(pts) == 0:
        return -1
    a, b = pts[:, :-1], pts[:, 1:]
    ab = b - a
    den = np.maximum((ab**2).sum(-1), 1e-18)
    u = np.clip((-a * ab).sum(-1) / den, 0.0, 1.0)
    dist = np.sqrt(((a + u[..., None] * ab) ** 2).sum(-1))  # (n, S)
    seg = dist.argmin(1)
    d = dist[np.arange(len(pts)), seg]
    t = ab[np.arange(len(pts)), seg]
    cos = t[:, 0] / np.maximum(np.sqrt((t**2).sum(-1)), 1e-12)
    near = d <= np.maximum(0.5 * np.asarray(width, np.float64), 0.5)
    ok = near & (cos >= math.cos(math.radians(max_angle)))
    return int(np.where(ok, d, np.inf).argmin()) if ok.any() else -1


def lane_successors(points, tol: float = 0.5, max_turn: float = 45.0) -> np.ndarray:
    """Successor edges of lane polylines from their geometry: int64 (E, 2) [src, dst].

    ``points`` (n, P, 2), all in one frame (lanes of one tile, or of several tiles mapped
    into a common frame). ``src -> dst`` when dst's first point lies within ``tol`` m of
    src's last point and the headings agree there: the unit tangents of src's last
    segment and of dst's first segment (the chord when a segment has zero length) differ
    by at most ``max_turn`` degrees (so an oncoming lane starting beside a lane's end is
    never its successor). No self loops. Rows sorted by (src, dst).
    """
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 3 or pts.shape[-1] != 2 or pts.shape[1] < 2:
        raise ValueError(
            f"points must be lane polylines of shape (n, P, 2) with P >= 2, got {pts.shape}"
        )
    if not np.isfinite(pts).all():
        raise ValueError("points have NaN or inf; lane polylines must be finite")
    for name, v in (("tol", tol), ("max_turn", max_turn)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < math.inf):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    n = len(pts)
    if n == 0:
        return np.zeros((0, 2), np.int64)
    t_in, t_out = _end_tangents(pts)
    d = np.sqrt(((pts[:, -1][:, None] - pts[:, 0][None]) ** 2).sum(-1))  # (src, dst)
    cos = t_out @ t_in.T
    ok = (d <= tol) & (cos >= math.cos(math.radians(max_turn)) - 1e-12)
    ok[np.arange(n), np.arange(n)] = False
    return np.argwhere(ok).astype(np.int64).reshape(-1, 2)


def check_tile(tile, name: str = "tile") -> dict:
    """Validate a plain tile dict (``points`` (n, 20, 2), ``width`` / ``speed_limit``
    (n,), ``kind`` (n,) ints in ``[0, len(LANE_KINDS))``, ``agents`` (m, 7)
    ``AGENT_FEATURES``); returns float64 / int64 numpy copies. ValueError/TypeError
    naming the key, what arrived and the rule."""
    if not isinstance(tile, Mapping):
        raise TypeError(
            f"{name} must be a dict with keys {list(_TILE_KEYS)} (a tile in its own frame), "
            f"got {type(tile).__name__}"
        )
    missing = [k for k in _TILE_KEYS if k not in tile]
    if missing:
        raise ValueError(f"{name} lacks {missing}; a tile dict has keys {list(_TILE_KEYS)}")

    def arr(key, dtype):
        v = tile[key]
        if hasattr(v, "detach"):
            v = v.detach().cpu().numpy()
        try:
            return np.array(v, dtype=dtype)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name}[{key!r}] must be numeric, got {type(v).__name__}") from exc

    pts = arr("points", np.float64)
    if pts.ndim != 3 or pts.shape[1:] != (LANE_POINTS, 2):
        raise ValueError(
            f"{name}['points'] must be (n, {LANE_POINTS}, 2) lane polylines, got shape {pts.shape}"
        )
    n = len(pts)
    out = {"points": pts}
    for key in ("width", "speed_limit"):
        v = arr(key, np.float64)
        if v.shape != (n,):
            raise ValueError(f"{name}[{key!r}] must be ({n},) like points, got shape {v.shape}")
        out[key] = v
    kind = np.asarray(tile["kind"])
    if kind.shape != (n,) or (n and kind.dtype.kind not in "iu"):
        raise ValueError(
            f"{name}['kind'] must be ({n},) integers (indices into LANE_KINDS), got "
            f"{kind.dtype} of shape {kind.shape}"
        )
    kind = kind.astype(np.int64)
    if n and (kind.min() < 0 or kind.max() >= _NK):
        raise ValueError(f"{name}['kind'] must be in [0, {_NK}) (LANE_KINDS), got {kind}")
    out["kind"] = kind
    ag = arr("agents", np.float64)
    if ag.size == 0:
        ag = ag.reshape(0, _NF)
    if ag.ndim != 2 or ag.shape[1] != _NF:
        raise ValueError(
            f"{name}['agents'] must be (m, {_NF}) rows of {AGENT_FEATURES}, got shape {ag.shape}"
        )
    out["agents"] = ag
    for key in ("points", "width", "speed_limit", "agents"):
        if not np.isfinite(out[key]).all():
            raise ValueError(f"{name}[{key!r}] has NaN or inf; a tile's values must be finite")
    return out


def episode_tile(episode, k: int) -> dict:
    """Tile ``k`` of a :func:`~simsci.driving.read_scene` episode as a plain tile
    dict (points, width, speed_limit, kind, agents): the agents are the valid ones at the
    last history frame **without the ego** (agent 0; the world inserts its own)."""
    lanes = episode["lanes"][k]
    valid = np.asarray(episode["agents_valid"][k], bool).copy()
    valid[0] = False
    return {
        "points": np.asarray(lanes["points"]),
        "width": np.asarray(lanes["width"]),
        "speed_limit": np.asarray(lanes["speed_limit"]),
        "kind": np.asarray(lanes["kind"]),
        "agents": np.asarray(episode["agents"][k, :, -1])[valid],
    }


def _geometric_tokens(tile: dict, layout: TokenLayout, offset=None, ego: int = -1) -> dict:
    """:func:`tile_tokens` of a checked tile dict with succ/pred from
    :func:`lane_successors` (the same at training and sampling: generated tiles have no
    stored edges) and all agents valid. With ``lane_repr="road"`` the tile's lanes are
    first grouped (:func:`~._lanegroups.group_lanes`; ``ego`` >= 0: that lane is a
    reference) and ``lane_index`` indexes the tile's lanes (the references)."""
    source = None
    if layout.lane_repr == "road":
        tile = group_lanes(tile, ego=ego if ego >= 0 else None)
        source = tile["source"]
    succ = lane_successors(tile["points"], tol=layout.seam_tol)
    lanes = {
        "points": tile["points"],
        "width": tile["width"],
        "speed_limit": tile["speed_limit"],
        "kind": tile["kind"],
        "edge_index": np.concatenate([succ, succ[:, ::-1]]),
        "edge_type": np.repeat(
            [EDGE_TYPES.index("succ"), EDGE_TYPES.index("pred")], len(succ)
        ).astype(np.int64),
    }
    if source is not None:
        lanes["group"] = tile["group"]
    ag = tile["agents"]
    tok = tile_tokens(lanes, ag, np.ones(len(ag), bool), layout, offset=offset)
    if source is not None:
        tok["lane_index"] = source[tok["lane_index"]]
    return tok


def _seam_slots(cp: np.ndarray, direction: int, layout: TokenLayout) -> list:
    """Seam slots from context lanes ``cp`` (n, 20, 2) in the TARGET frame (metres):
    ``(end, pin (2,) float64, [context lane ids])`` with end 0 for a context lane whose
    last point lies on the shared edge (the slot's first point is pinned there), end 1
    for one whose first point does (the slot's last point is pinned). Pins of one end
    within ``seam_tol`` of each other share a slot. At most ``max_lanes`` slots."""
    step = DIRECTIONS[direction]
    axis = 0 if step[0] != 0 else 1
    edge = -_HALF * step[axis]
    slots = []
    for end, col in ((0, -1), (1, 0)):
        for i in np.flatnonzero(np.abs(cp[:, col, axis] - edge) <= layout.edge_tol):
            pin = cp[i, col]
            for s in slots:
                if s[0] == end and np.sqrt(((s[1] - pin) ** 2).sum()) <= layout.seam_tol:
                    s[2].append(int(i))
                    break
            else:
                slots.append((end, pin.copy(), [int(i)]))
    return slots[: layout.max_lanes]


def generation_block(context, direction, layout=None, target=None) -> dict:
    """The generator's fixed token block for one new tile (the same at training and
    sampling; module docstring of :mod:`._outpaint`).

    ``context``: a tile dict (:func:`check_tile`) in the context tile's own frame, or
    None for a first tile (then ``direction`` must be None); ``direction``: index into
    :data:`DIRECTIONS` (target cell = context cell + step). ``target``: the ground-truth
    new tile (its own frame) to fill the slots (training), or None (sampling: the target
    slots hold empty tokens).

    ``N = 2 M``, ``M = max_lanes + max_agents``: context tokens at ``[0, nc)`` (lanes then
    agents, in the target frame, the rest of ``[0, M)`` masked out), target slots at
    ``[M, 2M)``, all real: lane slots ``[M, M + max_lanes)`` (seam slots first), agent
    slots after. Returns numpy ``x`` float32 (N, D), ``rel`` int64 (N, N), ``mask`` (N,),
    ``pinned`` (N, D), ``known`` (= x), ``cond`` float32 (GEN_COND_DIM,), ``seam_end``
    int64 (M,) (-1, or 0/1 per target slot), ``seam_pin`` float64 (M, 2) (metres, target
    frame; NaN off seams), ``seam_context`` (list of context lane-id lists per seam slot,
    ids into ``context``), ``seam_token`` (per seam slot, the index of a context token
    it continues), ``seam_tangent`` (seam slot -> unit direction of travel (2,) of the
    lane it continues, target frame: the x axis of its frame with ``seam_frame``),
    ``n_seam``, ``counts``, ``truncated`` and ``matching``
    (``seam_matched``, ``seam_empty``: seam slots with / without a ground-truth lane;
    ``free``: ground-truth lanes placed in free slots; training only), ``ego_slot``
    (a first tile whose lane slot 0 is the ego's lane, ``is_lane`` pinned).
    """
    layout = GENERATOR_LAYOUT if layout is None else _check_layout_arg(layout)
    _check_block_args(context, direction)
    L, A = layout.max_lanes, layout.max_agents
    M = L + A
    N, D = 2 * M, TOKEN_DIM
    blk = {
        "x": np.zeros((N, D), np.float32),
        "rel": np.full((N, N), _R["none"], np.int64),
        "mask": np.ones(N, bool),
        "pinned": np.zeros((N, D), bool),
        "cond": np.zeros(GEN_COND_DIM, np.float32),
        "seam_end": np.full(M, -1, np.int64),
        "seam_pin": np.full((M, 2), np.nan),
        "counts": {"context": {"lanes": 0, "agents": 0}, "target": {"lanes": 0, "agents": 0}},
        "truncated": {"context": {"lanes": 0, "agents": 0}, "target": {"lanes": 0, "agents": 0}},
    }
    slots = []
    nc = 0
    if context is None:
        blk["cond"][FIRST_TILE] = 1.0
        blk["mask"][:M] = False
        # lane slot 0 is the ego's lane (unset by _block_target when the truth has none)
        blk["ego_slot"] = bool(layout.ego_slot)
    else:
        slots, nc = _block_context(blk, context, int(direction), layout)
    x, rel, pinned, seam_end, seam_pin = (
        blk[k] for k in ("x", "rel", "pinned", "seam_end", "seam_pin")
    )
    t = np.arange(M, N)
    rel[t, t] = _R["self"]
    lane_slots, agent_slots = np.arange(M, M + L), np.arange(M + L, N)
    pinned[lane_slots, AGENT_SLICE] = True
    pinned[lane_slots, IS_AGENT] = True
    pinned[agent_slots, LANE_SLICE] = True
    pinned[agent_slots, IS_LANE] = True
    if layout.unused_cols is not None:
        pinned[lane_slots, layout.unused_cols] = True
    if layout.count_pins:  # the flags are conditions: the truth's here, drawn at sampling
        pinned[lane_slots, IS_LANE] = True
        pinned[agent_slots, IS_AGENT] = True
    S = len(slots)
    for s in range(S):
        cols = _FIRST if seam_end[s] == 0 else layout.last_cols
        pinned[M + s, cols] = True
    matching = {"seam_matched": 0, "seam_empty": S, "free": 0}
    if target is not None:
        matching = _block_target(blk, target, layout, S)
    if blk.get("ego_slot"):
        x[M, IS_LANE] = 1.0
        pinned[M, IS_LANE] = True
    tangents = {}  # a direction: the context's own frame serves (no shift needed)
    if S:
        step = DIRECTIONS[int(direction)]
        cp = np.asarray(context["points"], np.float64)
        tangents = {s: _seam_tangent(cp[slots[s][2][0]], int(seam_end[s]), step) for s in range(S)}
    geo = geometry_cols(layout)
    for s in range(S):  # pinned seam endpoints carry the context's value (exact)
        cols = _FIRST if seam_end[s] == 0 else layout.last_cols
        if layout.seam_frame:  # a true lane's geometry in its seam's frame; the pin is 0
            if x[M + s, IS_LANE] >= 0.5:
                x[M + s, geo] = to_seam_frame(x[M + s, geo], seam_pin[s], tangents[s], layout)
            x[M + s, cols] = 0.0
            # a road keeps its width across a seam: the lane's, pinned (not its speed
            # limit: a generated context's is capped by its curvature, and a pin would
            # carry one bend's cap down the rest of the road)
            x[M + s, WIDTH] = x[blk["seam_token"][s], WIDTH]
            pinned[M + s, WIDTH] = True
        else:
            x[M + s, cols] = (seam_pin[s] / layout.scale).astype(np.float32)
    x[lane_slots, AGENT_SLICE] = 0.0
    x[lane_slots, IS_AGENT] = 0.0
    return {
        "x": x,
        "rel": rel,
        "mask": blk["mask"],
        "pinned": pinned,
        "known": x.copy(),
        "cond": blk["cond"],
        "seam_end": seam_end,
        "seam_pin": seam_pin,
        "seam_context": [ids for _, _, ids in slots],
        "seam_token": blk.get("seam_token", []),
        "seam_tangent": tangents,
        "n_seam": S,
        "n_context": nc,
        "counts": blk["counts"],
        "truncated": blk["truncated"],
        "matching": matching,
        "capacity": N,
        "ego_slot": bool(blk.get("ego_slot", False)),
    }


def _check_block_args(context, direction) -> None:
    if (context is None) != (direction is None):
        raise ValueError(
            "context and direction go together: a first tile has context=None and "
            f"direction=None, an outpainted one both; got context "
            f"{'None' if context is None else 'a dict'} and direction={direction!r}"
        )
    if direction is not None and (
        isinstance(direction, bool)
        or not isinstance(direction, (int, np.integer))
        or not 0 <= direction < len(DIRECTIONS)
    ):
        raise ValueError(
            f"direction must be an int in [0, {len(DIRECTIONS)}) indexing DIRECTIONS "
            f"{DIRECTIONS} (or None for a first tile), got {direction!r}"
        )


def _block_context(blk: dict, context, direction: int, layout) -> tuple[list, int]:
    """Fill the context half of a :func:`generation_block` (tokens in the target frame,
    pinned) and its seam slots; returns the seam slots ``(end, pin, context lane ids)``
    and the number of context tokens."""
    M = layout.max_lanes + layout.max_agents
    x, rel, mask, pinned = blk["x"], blk["rel"], blk["mask"], blk["pinned"]
    ctx = check_tile(context, "context")
    blk["cond"][direction] = 1.0
    step = np.asarray(DIRECTIONS[direction], np.float64)
    tok = _geometric_tokens(ctx, layout, offset=-TILE_SIZE * step)
    nc = len(tok["x"])
    x[:nc] = tok["x"]
    rel[:nc, :nc] = tok["rel"]
    mask[nc:M] = False
    pinned[:nc] = True
    blk["counts"]["context"], blk["truncated"]["context"] = tok["counts"], tok["truncated"]
    cp = ctx["points"][tok["lane_index"]] - TILE_SIZE * step  # target frame, float64
    slots = _seam_slots(cp, direction, layout)
    for s, (end, pin, ids) in enumerate(slots):
        blk["seam_end"][s], blk["seam_pin"][s] = end, pin
        for i in ids:
            rel[i, M + s] = rel[M + s, i] = _R["seam"]
    rel[:nc, M:] = np.where(rel[:nc, M:] == _R["seam"], _R["seam"], _R["context"])
    rel[M:, :nc] = rel[:nc, M:].T
    blk["seam_token"] = [int(ids[0]) for _, _, ids in slots]  # a context token per slot
    # context lane ids -> the caller's lane ids
    slots = [(e, p, [int(tok["lane_index"][i]) for i in ids]) for e, p, ids in slots]
    return slots, nc


def _block_target(blk: dict, target, layout, S: int) -> dict:
    """Place the ground-truth ``target`` tile in the target slots of a
    :func:`generation_block` (lanes at seam ``S`` slots matched to the nearest seam pin,
    the rest nearest the centre first); returns the matching counts."""
    L = layout.max_lanes
    M = L + layout.max_agents
    x, seam_end, seam_pin = blk["x"], blk["seam_end"], blk["seam_pin"]
    target = check_tile(target, "target")
    ego = -1
    if blk.get("ego_slot") and layout.lane_repr == "road":  # the ego lane is a reference
        ego = ego_lane_index(target["points"], target["width"])
    tgt = _geometric_tokens(target, layout, ego=ego)
    ntl, nta = tgt["counts"]["lanes"], tgt["counts"]["agents"]
    tp = token_points(tgt["x"][:ntl], layout)
    cand = []
    for s in range(S):
        ends = tp[:, 0] if seam_end[s] == 0 else tp[:, -1]
        d = np.sqrt(((ends - seam_pin[s]) ** 2).sum(-1))
        cand += [(float(d[j]), s, int(j)) for j in np.flatnonzero(d <= layout.seam_tol)]
    slot_of = np.full(ntl, -1, np.int64)
    used = np.zeros(S, bool)
    for _, s, j in sorted(cand):
        if not used[s] and slot_of[j] < 0:
            used[s], slot_of[j] = True, s
    ego = -1
    if blk.get("ego_slot"):  # a first tile: its ego lane goes to lane slot 0
        ego = ego_lane_index(tp, tgt["x"][:ntl, WIDTH] * layout.width_scale)
        blk["ego_slot"] = ego >= 0  # no ego lane in the truth: no ego slot to teach
        if ego >= 0:
            slot_of[ego] = 0
            S = 1
    free = [j for j in range(ntl) if slot_of[j] < 0]
    room = L - S
    if len(free) > room:  # keep the nearest to the centre (tile_tokens' order is kept)
        dist = _polyline_dist(np.zeros((1, 2)), tp[free])[0]
        free = [free[i] for i in _nearest(dist, room)]
    for n_free, j in enumerate(free):
        slot_of[j] = S + n_free
    placed = slot_of >= 0
    x[M + slot_of[placed]] = tgt["x"][np.flatnonzero(placed)]
    x[M + L : M + L + nta] = tgt["x"][ntl:]
    blk["counts"]["target"] = {"lanes": int(placed.sum()), "agents": nta}
    blk["truncated"]["target"] = {
        "lanes": tgt["truncated"]["lanes"] + int((~placed).sum()),
        "agents": tgt["truncated"]["agents"],
    }
    return {
        "seam_matched": int(used.sum()),
        "seam_empty": int(len(used) - used.sum()),
        "free": len(free),
    }


def generation_pair(episode, k: int, layout=None) -> dict:
    """:func:`generation_block` for tile ``k`` (context, ego removed) -> tile ``k + 1``
    (target) of a :func:`~simsci.driving.read_scene` episode, or for ``k=None``
    tile 0 as a first tile (no context). Adds ``episode_step`` (k or -1)."""
    T = _check_episode(episode)
    if k is None:
        out = generation_block(None, None, layout, target=episode_tile(episode, 0))
        out["episode_step"] = -1
        return out
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < T - 1:
        raise ValueError(f"k must be an int in [0, {T - 1}) (pairs k -> k+1) or None, got {k!r}")
    direction = _direction(episode, int(k))
    if direction is None:
        cell = np.asarray(episode["tile_cell"])
        raise ValueError(
            f"tiles {k} {cell[k].tolist()} and {k + 1} {cell[k + 1].tolist()} are not grid "
            "neighbours; use pair_steps(episode) for the usable k"
        )
    out = generation_block(
        episode_tile(episode, int(k)), direction, layout, target=episode_tile(episode, int(k) + 1)
    )
    out["episode_step"] = int(k)
    return out
