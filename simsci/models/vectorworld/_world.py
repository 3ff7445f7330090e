r"""Streaming closed-loop rollouts: the world is generated tile by tile as the ego drives.

:class:`StreamingWorld` holds ``n`` independent worlds as tensors (CPU or CUDA) and
advances them at the driving world's 10 Hz:

1. **Reset.** An episode opens with :meth:`StreamingWorld.opening` of a seed drawn from
   the world's generator: a first tile (unconditional: a lane through its centre along
   +x, like tile 0 of the driving data) and the tile east of it, each episode's from a
   noise generator of its own, so openings can be made ahead in one batched call (a
   ``pool``, as ``simsci/VectorWorld-v1`` keeps) and give what a reset would make; the
   ego is put on a lane near the
   origin (each lane's point nearest it, scored by the lane length ahead of it minus
   twice its distance), heading along the lane at 0.8 x its speed limit (as
   ``simsci/Driving-v0`` starts it); the motion-aware gated VAE fills the tile with as
   many agents as the generator put there, each with a 1 s history that agrees with its
   state (agents overlapping the ego or each other are redrawn by the VAE; agents that
   would meet the ego within 3 s at constant speed and heading are left out,
   ``init_unsafe``, as ``simsci/Driving-v0`` fills a scene only where its gaps are safe).
   That initial traffic is part of the opening, drawn from the opening's own noise
   generator after its tiles, so an opening bank's episode costs no VAE call at reset
   (the VAE's draw was 10 ms of a 19 ms reset).
2. **Streaming.** Every step the cells crossed by the segment from the ego to
   ``lookahead`` metres ahead along its lane (the tangent of the lane it drives on at
   its nearest point, as associated at the last step; its heading where it has no lane
   running its way; walked 4-connected, x first, as the data's tile sequence) must
   exist. A missing cell generated before in the episode is
   restored from the episode's store, unchanged; a cell never generated is outpainted in
   one network call from the cell before it on that walk (its 4-neighbour, the
   context), with the seam endpoints of *every* existing 4-neighbour pinned (the
   context's through the context tokens, the others' as extra pinned lanes:
   :meth:`~._outpaint.TileGenerator.generate`'s ``neighbours``), then closed against
   all of them (:func:`~._outpaint.close_seams`). Requests of all worlds are batched
   into one generator call. At most ``max_tiles`` tiles are kept; adding one
   drops the tile farthest from the ego that is neither the ego's cell nor on its
   look-ahead walk, and its agents leave with it (the tile stays in the store).
3. **Agents.** A new tile's agents (drawn by the VAE on its final lanes, as many as
   the generator drew; or, with ``tile_agents="vae"``, as many as the VAE's count head
   draws for them) enter the world
   unless their box overlaps a present vehicle or lies within ``spawn_clearance`` of
   the ego (counted as ``spawn_rejected``), or the ego would meet it within 3 s at
   constant speed and heading (the initial traffic's screen; ``spawn_unsafe``: a tile's
   vehicles appear when the look-ahead reaches it, which on a bend or at a restored
   cell can be inside the ego's braking distance), each with a random route key (its
   choice at forks). NPCs act with ΔSim (:mod:`._npc`) on the
   generated lanes; agents farther than ``window`` from the ego or on a dropped tile
   leave, and so do NPCs with no lane (or more than 3.5 m off it) and NPCs stopped at
   the end of their lane (``npc_lost``): a generated lane can end anywhere. An NPC in
   collision leaves at the next step (``npc_crashed``: a crashed pair would otherwise
   stay locked on its lane; the crash itself is observed and recorded once), and so
   does an NPC stopped for 20 s (``npc_stalled``): ΔSim, cloned from traffic that
   always moves on, sometimes stops for good before a seam of a generated map, and
   a lane-keeping ego (which does not overtake) would wait behind it all episode.
   Every NPC keeping its lane accelerates at least as the IDM would towards its lane's
   speed limit (or less where a slower limit ahead needs it) behind its corridor leader,
   and no faster than it could stop within the 100 m its features see
   (``IDM_FLOOR_BELOW``, ΔSim's ``idm_floor_below``; not while it yields or changes
   lanes): the ground truth is
   IDM traffic, and the clone alone, once stopped, tended to stay stopped with a free
   road, and once slow, to stay slow (free NPCs cruised at a median 44% of their lane's
   limit; with the floor the lane-keeping ego drives 0.83-0.98 of its Driving-v0
   distance on seeds 0-5 instead of 0.80-0.93; benchmarks/README.md, "Thirteenth
   session").
4. **The ego** is driven by the caller (acceleration, steering: the action of
   ``simsci/Driving-v0``) through the same kinematic bicycle as the driving world
   (:func:`simsci.driving.bicycle_step`).

Lanes of all kept tiles live in one padded store ``(n, max_tiles * max_lanes, 20, 2)``
(world frame = tile 0's frame; cell (i, j) is centred at ``64 (i, j)``); successor edges
are recomputed from endpoint matching (:func:`._outpaint.lane_successors`) over the
store of a world whenever a tile is added, so they also join lanes across seams; a lane
end with no successor by that rule goes on into a lane that starts exactly there (a
closed seam) turned by up to ``KINK_TURN`` = 60 degrees (the generator's kinks at
seams: without the link the ego's lane association jumped sideways and 2 of the 5
off-road ends of the shipped world's lane keeping, seed 0, were such seams).

Design choices, and why
-----------------------
- **Look-ahead along the ego's lane, not along a route**: there is no route in a
  generated world; the user's policy decides where the ego goes. Walking the straight
  segment ahead generates what the ego will see within ``lookahead`` metres (64 m: the
  ego always has at least half a tile of map ahead), and at a junction the side cell
  appears as soon as the ego's lane turns towards it. The segment follows the lane's
  tangent rather than the ego's heading: a policy that swerves (PPO's stochastic
  actions) swept the heading's ray over the cells beside its road, and 46% of the tiles
  made for a 320k-step PPO policy were never entered; along the lane it makes 21% fewer
  tiles and a ~9% cheaper step (median of four paired runs), and a lane-keeping
  driver's world barely changes
  (benchmarks/README.md, fifteenth session).
- **A persistent world.** A cell is generated once per episode: every tile goes into a
  per-world store ``cell -> (tile id, tile)`` when it is made (float64 tile dicts in
  their own frame, a few kB each), and a dropped cell the ego comes back to is restored
  from it, bit for bit (re-generating it would show the ego another map in the same
  place, and a recording could not say which one was driven). A restored tile brings
  its agents again (subject to the spawn checks), so a revisited area keeps its
  density. Tile ids count a world's tiles in the order they were made.
- **Vehicles from the VAE.** The tile generator's one-step sampler draws about a third
  of the data's agents per tile (0.8-1.0 against 2.4-2.7; the same under-drawing as its
  lanes), so a world filled by it had 0.2-0.4 of the data's agents per lane-km. The
  VAE was trained to fill a tile's lanes as the data does (count head, placements,
  histories that agree with the states), so it places every tile's vehicles, on the
  lanes the ego will drive (after seams and completion), from the world's seeded
  generator (an opening's from its own seed's): as many as the generator drew (the
  default) or, with ``tile_agents="vae"``, as many as its count head draws. The latter
  is not the default: at the data's density
  the generated lanes' unresolved conflicts (crossing and converging lanes without
  right of way) put the lane-keeping driver in collisions far more often
  (benchmarks/README.md, "Vehicles from the VAE").
- **All neighbours pin their seams.** The generator was trained on (tile, 4-neighbour)
  pairs, so it sees one context tile; a new cell that touches several existing tiles
  (kept or stored: the ego turned, or came back) is outpainted from the one it is
  reached from, and every lane end of the other neighbours on their shared edges is
  pinned too, as a lane slot whose end point is fixed there (and which must be a lane).
  The generator never saw such extra pins in training: they fix where lanes meet the
  seams, the network fills in the rest. :func:`seam_gaps` measures every seam
  (:func:`simsci.driving.metrics.drive_seam_gaps`, the one definition).
- **Closed seams, by construction.** Pins alone leave seams open: the network adds
  lanes that run into a neighbour's edge where it has no lane, and a context end farther
  than ``edge_tol`` (1 cm) from the edge gets no pin. So every new tile is closed
  against every existing neighbour at the seam band of the one definition (0.5 m): its
  lane ends there are snapped onto the neighbour's complementary end within 4 m (and
  60 degrees; the lane refit smoothly), or trimmed back 1 m from the edge (dropped when
  under 5 m), and a neighbour's end left without a partner gets a 16 m stub continuing
  it (``stats``: ``seam_exact``, ``seam_snapped``, ``seam_trimmed``, ``seam_dropped``,
  ``seam_stubs``). A tile is closed when it is made, against the tiles made before it,
  and never changed after: every seam is closed by the later of its two tiles, so
  restored tiles and cells with several neighbours close too.
- **Completed lane graphs** (``complete=True``, the default). After closing its seams,
  a new tile's lanes go through :func:`._lanegraph.complete_lanes`: a lane that stops
  inside the tile is joined to a lane starting ahead of it or extended to the tile's
  edge (onto a neighbour's lane where that edge is shared), kinks are smoothed, and
  each lane's speed limit is capped by its curvature (:math:`\sqrt{3/\kappa}`, the
  driving data's rule). Why: the shipped generator, trained for 26 minutes on one CPU,
  ends most lanes mid-tile; with its raw lanes 56-75% of lane-keeping episodes ended
  by driving past a lane's end. Completion adds road only where the graph is open and
  keeps what the network drew; ``complete=False`` shows the generator alone.
- **The ego keeps to its lane.** Its observed lane (offset, heading error) is its last
  lane or one of that lane's successors while it is within half a width + 0.5 m of it,
  the nearest lane agreeing with its heading otherwise: generated lanes cross, and the
  nearest lane at a crossing would switch the driver onto the crossing road
  (``simsci/Driving-v0``'s ego likewise keeps to its lane). Off-road is still judged
  against every lane.
- **Off-road** as in ``simsci/Driving-v0``: the ego's centre more than 0.5 m beyond the
  edge of every lane whose direction agrees with its heading (oncoming lanes do not
  count), or no lane within reach at all.
- **Progress** is the ego's displacement along the tangent of its lane (there is no route
  arc length); ``route_fraction`` is the distance driven over ``route_length`` (default
  5 km, the length of ``simsci/Driving-v0``'s routes), so the observation keeps the same
  scale in both environments.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import torch

from simsci.driving import (
    DT,
    EGO_SIZE,
    LANE_POINTS,
    OFFROAD_MARGIN,
    TILE_SIZE,
    AgentState,
    LaneSet,
    bicycle_step,
    metrics,
)
from simsci.models.vectorworld import _lanegraph, _outpaint
from simsci.models.vectorworld._features import _gather_slots, _slot_order
from simsci.models.vectorworld._npc import IDM_FLOOR, idm_desired_gap

__all__ = ["StreamingWorld", "seam_gaps"]

#: an NPC stopped (< 0.1 m/s) this many steps (20 s) leaves the world (``npc_stalled``)
STALL_STEPS = 200
#: NPCs slower than this [m/s] accelerate at least as the IDM would (ΔSim's
#: ``idm_floor_below``): all of them (1 m/s until the thirteenth session: a restart only)
IDM_FLOOR_BELOW = math.inf

_EMPTY_TILE = {
    "points": np.zeros((0, LANE_POINTS, 2)),
    "width": np.zeros(0),
    "speed_limit": np.zeros(0),
    "kind": np.zeros(0, np.int64),
    "agents": np.zeros((0, 7)),
}


def _moved(rows: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
    """Boxes ``rows`` (..., 7) (AGENT_FEATURES) after each of ``taus`` (T,) seconds at
    constant speed and heading: (T, ..., 7)."""
    t = taus.reshape(-1, *([1] * rows.dim()))
    out = rows.expand(len(taus), *rows.shape).clone()
    out[..., :2] = rows[..., :2] + rows[..., 2:3] * t * rows[..., 3:5]
    return out


def _on_collision_course(
    agents: np.ndarray, ego: np.ndarray, horizon: float = 3.0, step: float = 0.05
) -> np.ndarray:
    """``(k,)`` bool: agents ``(k, 7)`` (AGENT_FEATURES) whose box, grown by 0.5 m all
    round, meets the ego's (``(7,)``) within ``horizon`` s when both keep their speed and
    heading (checked every ``step`` s: at 0.5 s a head-on pair closing at 28 m/s passed
    through each other between checks): a time-to-collision screen for initial agents."""
    if len(agents) == 0:
        return np.zeros(0, bool)
    taus = torch.as_tensor(np.arange(0.0, horizon + 1e-9, step))
    a = _moved(torch.as_tensor(np.asarray(agents, np.float64)), taus)  # (T, k, 7)
    e = _moved(torch.as_tensor(np.asarray(ego, np.float64))[None], taus)
    a[..., 5:7] += 1.0
    e[..., 5:7] += 1.0
    return metrics.boxes_overlap(a, e).any(0).numpy()


def _ego_start(tile: dict) -> tuple[float, float, float, float]:
    """Where an episode's ego starts on its first ``tile``: ``(x, y, heading, speed)``.
    On each lane the point nearest the origin; of those, the one with the most lane ahead
    of it minus twice its distance (a generated lane can be short: start where there is
    room), heading along the lane at 0.8 x its speed limit. A lane-less tile (counted):
    the origin, heading +x, 10 m/s."""
    pts = np.asarray(tile["points"], np.float64)
    if len(pts) == 0:
        return 0.0, 0.0, 0.0, 10.0
    d = np.hypot(pts[..., 0], pts[..., 1])
    near = d.argmin(1)
    seg = np.hypot(*np.diff(pts, axis=1).transpose(2, 0, 1))  # (n, 19)
    ahead = np.array([seg[i, k:].sum() for i, k in enumerate(near)])
    score = ahead - 2.0 * d[np.arange(len(pts)), near]
    lane = int(np.argmax(score))
    k = int(near[lane])
    k0, k1 = (k, k + 1) if k + 1 < LANE_POINTS else (k - 1, k)
    t = pts[lane, k1] - pts[lane, k0]
    x, y = pts[lane, k]
    return float(x), float(y), math.atan2(t[1], t[0]), 0.8 * float(tile["speed_limit"][lane])


def _ego_row(x: float, y: float, heading: float, speed: float) -> np.ndarray:
    """The ego as an AGENT_FEATURES row ``(7,)``."""
    return np.array([x, y, speed, math.cos(heading), math.sin(heading), *EGO_SIZE])


def _cell(x: float, y: float) -> tuple[int, int]:
    return int(math.floor(x / TILE_SIZE + 0.5)), int(math.floor(y / TILE_SIZE + 0.5))


def _walk(x0, y0, x1, y1, step: float = 4.0) -> list[tuple[int, int]]:
    """Cells crossed by the segment (x0, y0) -> (x1, y1), 4-connected (x first)."""
    n = max(int(math.hypot(x1 - x0, y1 - y0) / step), 1)
    cells = [_cell(x0, y0)]
    for k in range(1, n + 1):
        u = k / n
        c = _cell(x0 + u * (x1 - x0), y0 + u * (y1 - y0))
        last = cells[-1]
        if c == last:
            continue
        if c[0] != last[0] and c[1] != last[1]:  # a diagonal step: go along x first
            cells.append((c[0], last[1]))
        cells.append(c)
    return cells


def _direction(src: tuple[int, int], dst: tuple[int, int]) -> int:
    from simsci.models.vectorworld._tokens import DIRECTIONS

    return DIRECTIONS.index((dst[0] - src[0], dst[1] - src[1]))


def _physical(tile: dict) -> dict:
    """A generated tile with its lane points clipped into the tile's square (lane pieces
    of the data never leave it: they are cut at its edges), lane widths and speed limits
    clipped to physical ranges (a decoded width can be any real number) and non-finite
    lanes dropped."""
    pts = np.asarray(tile["points"], np.float64)
    ok = np.isfinite(pts).all(axis=(1, 2)) if len(pts) else np.zeros(0, bool)
    out = dict(tile)
    out["points"] = np.clip(pts[ok], -0.5 * TILE_SIZE, 0.5 * TILE_SIZE)
    out["width"] = np.clip(
        np.nan_to_num(np.asarray(tile["width"], np.float64)[ok], nan=3.5), 2.5, 5.0
    )
    out["speed_limit"] = np.clip(
        np.nan_to_num(np.asarray(tile["speed_limit"], np.float64)[ok], nan=13.9), 3.0, 40.0
    )
    out["kind"] = np.asarray(tile["kind"], np.int64)[ok]
    ag = np.asarray(tile["agents"], np.float64).reshape(-1, 7)
    ag = ag[np.isfinite(ag).all(1)]
    if len(ag):
        ag[:, 2] = np.clip(ag[:, 2], 0.0, 40.0)
        ag[:, 5] = np.clip(ag[:, 5], 3.0, 6.0)
        ag[:, 6] = np.clip(ag[:, 6], 1.5, 2.5)
    out["agents"] = ag
    return out


def _renumber(index: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Lane indices ``index`` (n, ...) (-1: none) through a per-world ``table`` (n, L)."""
    flat = index.reshape(index.shape[0], -1)
    out = torch.gather(table, 1, flat.clamp(min=0))
    return torch.where(flat >= 0, out, torch.full_like(out, -1)).reshape(index.shape)


#: who puts a new tile's vehicles (StreamingWorld's ``tile_agents``)
TILE_AGENTS = ("vae", "generator")
#: the version of how a tile's vehicles are put (opening settings' ``placement``): 2, the
#: VAE places every tile's vehicles on its final lanes (before: the generator's own
#: tokens for every tile but the first); 3, the collision screen checks every 0.05 s
#: (every 0.5 s let fast head-on pairs through)
PLACEMENT_VERSION = 3
#: the largest turn [degrees] at which a lane starting exactly at another's end is still
#: its successor when that end has no other (StreamingWorld._connect)
KINK_TURN = 60.0
#: npc_yield: the ego counts as in an NPC's path within its width band widened by this [m]
YIELD_MARGIN = 0.5
#: npc_yield's IDM: minimum gap [m], time headway [s], acceleration and comfortable
#: braking [m/s^2] (those of the lane-keeping driver; ΔSim's IDM floor uses the same)
IDM_YIELD = IDM_FLOOR
#: npc_yield's look-ahead for meeting the ego from the side [s], and the least heading
#: difference [degrees] that counts as from the side (StreamingWorld._conflict_cap)
YIELD_HORIZON, YIELD_ANGLE = 3.0, 5.0
#: the seed of an opening bank's slot 0 (StreamingWorld.opening_key); slot j: + j
BANK_SEED = 2**62


def _walk_generator(key: int) -> torch.Generator:
    """The generator of a bank opening's look-ahead tiles: seeded from its ``key`` through
    a SeedSequence (not the key itself, whose draws made the opening's first tiles)."""
    seed = np.random.SeedSequence([int(key), 1]).generate_state(1, np.uint64)[0]
    return torch.Generator(device="cpu").manual_seed(int(seed >> np.uint64(1)))


def _fingerprint(module: torch.nn.Module) -> str:
    """SHA-256 (16 hex digits) of a module's state: names, dtypes, shapes and values."""
    import hashlib

    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


class StreamingWorld:
    """``n`` streaming VectorWorld rollouts (see the module docstring).

    ``model``: a :class:`~simsci.models.vectorworld.VectorWorld` (tile generator, VAE,
    ΔSim). ``max_tiles``: tiles kept per world; ``max_agents``: vehicle slots, the ego
    included; ``lookahead`` [m]; ``window`` [m]: NPCs farther from the ego leave;
    ``tile_steps`` / ``tile_mode``: the generator's sampler (1 / "meanflow" = one step);
    ``first_steps``: flow-matching steps of a reset's first tile (once per episode, where
    a lane through the origin matters most: 16 steps find one far more often);
    ``shaping``: ΔSim's kinematic logit shaping; ``greedy``: ΔSim's most likely actions
    instead of samples; ``seed``: the generator of tiles, agents and NPC actions;
    ``opening_bank``: None (default) opens every episode with tiles made from its own
    seed; an int K opens it with one of K fixed openings (:meth:`opening_key`, tiles
    and initial traffic; the tiles of the ego's first look-ahead beyond them are made
    from the key at the opening's first episode and kept with it), kept once made, so
    that after the first K a reset makes no tile and draws no vehicle at all (what the
    rest of the episode generates, its agents and NPC actions still come from its own
    seed);
    the bank starts with the model's openings made ahead when they were made under this
    world's :meth:`opening_settings` (:meth:`VectorWorld.make_openings`).
    ``complete``: True (default) completes every tile's lane graph when it is made
    (:func:`._lanegraph.complete_lanes`: kinks smoothed, lane ends inside the tile joined
    or extended to its edge, speed limits capped by curvature); False keeps the
    generator's lanes as closed at the seams. ``tile_agents``: who puts the vehicles of
    a tile: the motion-gated VAE places them on the tile's final lanes, as many as the
    tile generator drew (``"generator"``, default) or as the VAE's count head draws for
    them (``"vae"``: the data's density, but more conflicts on the generated lanes;
    benchmarks/README.md). ``npc_yield``: True
    (default) NPCs brake for the ego when it is ahead in their path, whatever lanes
    either is on, or when they would meet it from the side with the ego ahead
    (:meth:`_yield_cap`; generated lanes cross and overlap, and ΔSim only
    sees leaders on its own lane's corridors); False: ΔSim's accelerations alone.
    """

    def __init__(
        self,
        model,
        n: int,
        *,
        max_tiles: int = 6,
        max_agents: int = 32,
        lookahead: float = 64.0,
        window: float = 150.0,
        spawn_clearance: float = 10.0,
        tile_steps: int = 1,
        tile_mode: str = "meanflow",
        first_steps: int = 16,
        shaping: bool = True,
        greedy: bool = False,
        seed: int = 0,
        device=None,
        dtype=torch.float32,
        opening_bank: int | None = None,
        complete: bool = True,
        tile_agents: str = "generator",
        npc_yield: bool = True,
    ):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n (the number of worlds) must be a positive int, got {n!r}")
        bank = () if opening_bank is None else (("opening_bank", opening_bank, 1),)
        for name, value, lo in (
            ("max_tiles", max_tiles, 3),
            ("max_agents", max_agents, 2),
            ("tile_steps", tile_steps, 1),
            ("first_steps", first_steps, 1),
            *bank,
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
                raise ValueError(f"{name} must be an int >= {lo}, got {value!r}")
        if not (lookahead > 0 and window > lookahead):
            raise ValueError(
                f"need 0 < lookahead < window, got lookahead={lookahead}, window={window}"
            )
        self.model = model
        self.device = torch.device(device) if device is not None else model.device
        self.dtype = dtype
        model.to(self.device)
        self.n, self.V, self.S = int(n), int(max_agents), int(max_tiles)
        self.Lt = int(model.tiles.layout.max_lanes)
        self.L = self.S * self.Lt
        self.lookahead, self.window = float(lookahead), float(window)
        self.spawn_clearance = float(spawn_clearance)
        self.tile_steps, self.tile_mode = int(tile_steps), str(tile_mode)
        self.first_steps = int(first_steps)
        self.opening_bank = None if opening_bank is None else int(opening_bank)
        if not isinstance(complete, (bool, np.bool_)):
            raise ValueError(f"complete must be True or False, got {complete!r}")
        self.complete = bool(complete)
        if tile_agents not in TILE_AGENTS:
            raise ValueError(f"tile_agents must be one of {TILE_AGENTS}, got {tile_agents!r}")
        self.tile_agents = str(tile_agents)
        #: an opening bank's openings, key -> opening (reset's pool when given none)
        self.bank: dict = {}
        made = getattr(model, "openings", None)
        if self.opening_bank is not None and made and made["settings"] == self.opening_settings():
            last = BANK_SEED + self.opening_bank
            self.bank.update((k, v) for k, v in made["tiles"].items() if BANK_SEED <= k < last)
        if not isinstance(npc_yield, (bool, np.bool_)):
            raise ValueError(f"npc_yield must be True or False, got {npc_yield!r}")
        self.npc_yield = bool(npc_yield)
        self.shaping, self.greedy = bool(shaping), bool(greedy)
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(int(seed))
        dev, f = self.device, dtype
        n, L, V = self.n, self.L, self.V
        self.lane_points = torch.zeros(n, L, LANE_POINTS, 2, device=dev, dtype=f)
        self.lane_width = torch.full((n, L), 3.5, device=dev, dtype=f)
        self.lane_speed = torch.full((n, L), 13.9, device=dev, dtype=f)
        self.lane_kind = torch.zeros(n, L, dtype=torch.long, device=dev)
        self.lane_valid = torch.zeros(n, L, dtype=torch.bool, device=dev)
        self.lane_succ = torch.full((n, L, 2), -1, dtype=torch.long, device=dev)
        self.lane_slot = (torch.arange(L, device=dev) // self.Lt).expand(n, L)
        self._packed_cache = None  # (versions, lane tensors, packed lanes): _packed_lanes
        self.tiles: list[dict] = [{} for _ in range(n)]  # per world: slot -> tile record
        # per world: every tile of the episode, cell -> {"tile_id", "tile"} (own frame)
        self.store: list[dict] = [{} for _ in range(n)]
        # the same cells as tensors, for the per-step "on a kept tile" test
        self.slot_cell = torch.zeros(n, self.S, 2, dtype=torch.long, device=dev)
        self.slot_used = torch.zeros(n, self.S, dtype=torch.bool, device=dev)
        z = lambda: torch.zeros(n, V, device=dev, dtype=f)  # noqa: E731
        self.x, self.y, self.theta, self.v = z(), z(), z(), z()
        self.accel, self.kappa, self.length, self.width = z(), z(), z(), z()
        self.valid = torch.zeros(n, V, dtype=torch.bool, device=dev)
        # ΔSim's memory per slot (lane association, manoeuvre, lane-change origin, route)
        self.memory = {
            name: torch.full((n, V), fill, dtype=torch.long, device=dev)
            for name, fill in (("lane", -1), ("manoeuvre", 0), ("origin", -1), ("route", 0))
        }
        self.uid = torch.zeros(n, V, dtype=torch.long, device=dev)
        # the step a slot was last vacated: new vehicles take the slot free longest, so a
        # recorded track never jumps from one vehicle to the next within a step
        self._freed_at = torch.full((n, V), -(10**9), dtype=torch.long, device=dev)
        self._stopped = torch.zeros(n, V, dtype=torch.long, device=dev)  # steps at v < 0.1
        self._next_uid = 1
        self.steps = 0
        self.driven = torch.zeros(n, device=dev, dtype=torch.float64)
        self.init_history: list[np.ndarray | None] = [None] * n
        self.stats = {
            k: 0
            for k in (
                "tiles",
                "first_tiles",
                "resampled",
                "empty_tiles",
                "unled_tiles",
                "dropped_tiles",
                "restored_tiles",
                "pinned_neighbours",
                "spawned",
                "spawn_rejected",
                "spawn_unsafe",
                "despawned",
                "init_agents",
                "init_rejected",
                "init_unsafe",
                "tile_agents_drawn",
                "uncontexted",
                "npc_lost",
                "npc_crashed",
                "npc_stalled",
                "seam_exact",
                "seam_snapped",
                "seam_trimmed",
                "seam_dropped",
                "seam_stubs",
                "seam_over_capacity",
                "lanes_smoothed",
                "lanes_straightened",
                "lanes_dropped",
                "lanes_joined",
                "lanes_extended",
                "lanes_extended_back",
                "lanes_merged",
                "lanes_turned_away",
                "lanes_rerouted",
                "lanes_refit",
                "lanes_dead_ends",
                "lanes_speed_capped",
            )
        }
        self._ego_lane = torch.zeros(n, dtype=torch.long, device=dev)
        self._ego_known = torch.zeros(n, dtype=torch.bool, device=dev)  # _ego_lane is set
        self._ego_offset = torch.zeros(n, device=dev, dtype=f)
        self._ego_heading_err = torch.zeros(n, device=dev, dtype=f)
        self._ego_tangent = torch.zeros(n, 2, device=dev, dtype=f)
        self._ego_offroad = torch.zeros(n, dtype=torch.bool, device=dev)

    # ------------------------------------------------------------------ reset
    def reset(self, index=None, *, pool: dict | None = None) -> None:
        """Fresh worlds: all (``index`` None) or those in ``index`` (1-D ints).

        Each episode draws an opening seed from :attr:`generator` and opens with
        :meth:`opening` of it. ``pool``: openings made ahead, ``{seed: opening}`` (a dict
        the caller keeps and refills, :meth:`opening`'s batched call): an episode whose
        seed is in it takes its entry (removed) instead of making it, and gets the very
        same tiles, since an opening depends on its seed alone."""
        idx = list(range(self.n)) if index is None else [int(i) for i in index]
        if not idx:
            return
        # the seeds first: nothing else draws from the generator before them, so a
        # caller can tell an episode's opening seeds from the generator's seed
        seeds = [int(torch.randint(2**62, (1,), generator=self.generator)) for _ in idx]
        for b in idx:
            self.tiles[b] = {}
            self.store[b] = {}
            self.slot_used[b] = False
            self.lane_valid[b] = False
            self.lane_succ[b] = -1
            self.valid[b] = False
            self._freed_at[b] = -(10**9)
        self.driven[idx] = 0.0
        self._ego_known[idx] = False
        if pool is None:
            pool = self.bank if self.opening_bank is not None else {}
        seeds = [self.opening_key(s) for s in seeds]
        missing = list(dict.fromkeys(s for s in seeds if s not in pool))
        if missing:
            pool.update(zip(missing, self.opening(missing)))
        openings = [pool[s] for s in seeds]
        if self.opening_bank is None:  # a bank's openings are kept for the next episodes
            for s in seeds:
                pool.pop(s, None)
        self.stats["first_tiles"] += len(idx)
        for b, key, tiles in zip(idx, seeds, openings):
            if self.opening_bank is not None:  # as an earlier world of this reset left it
                tiles = pool[key]
            (cell, first), rest = tiles[0], tiles[1:]
            first = dict(first)  # a bank's entry stays as it is
            traffic = first.pop("traffic", None)
            if traffic is None:  # a tile pair made elsewhere: its traffic drawn now
                traffic = self._traffic(first, self.generator)
            self._add_tile(b, cell, first, spawn=False)
            self._place_ego(b, first)
            self._init_agents(b, traffic)
            for cell, tile in rest:
                self._add_tile(b, cell, tile)
            if self.opening_bank is not None:
                # the tiles of the ego's first look-ahead beyond the opening's, made from
                # the key (one world at a time: batching changes the rounding) and kept
                # with the entry, so that a bank's reset generates nothing. Kept only when
                # all fit in the world's tiles: else the stream dropped one, which adding
                # them back in order would not repeat, and each episode makes them anew
                made = set(self.store[b])
                self._stream([b], generators={b: _walk_generator(key)})
                extra = sorted(set(self.store[b]) - made, key=lambda c: self.store[b][c]["tile_id"])
                if extra and len(tiles) + len(extra) <= self.S:
                    # a new list: the model's openings made ahead stay as they are
                    pool[key] = list(tiles) + [(c, self.store[b][c]["tile"]) for c in extra]
        self._stream(idx)
        self._associate_ego(torch.as_tensor(idx, device=self.device))

    def opening_settings(self) -> dict:
        """What an opening depends on besides its seed: the tile generator's and the VAE's
        weights (fingerprints), its samplers' steps, seam completion, how vehicles are
        drawn, device and dtype. Openings made under equal settings are the tiles and
        traffic :meth:`opening` makes (``completion``: the version of
        :func:`._lanegraph.complete_lanes`' rules). ``lookahead`` and ``window`` are not
        among them: an opening is its first two tiles and their traffic, made before any
        look-ahead; a bank's look-ahead tiles are made by the world that uses them and
        kept in its :attr:`bank`, never in the model's openings."""
        return {
            "tiles": _fingerprint(self.model.tiles),
            "first_steps": self.first_steps,
            "tile_steps": self.tile_steps,
            "tile_mode": self.tile_mode,
            "complete": self.complete,
            "completion": _lanegraph.COMPLETION_VERSION if self.complete else None,
            "bend": _outpaint.LANE_BEND,
            "traffic": _fingerprint(self.model.vae),
            "tile_agents": self.tile_agents,
            "placement": PLACEMENT_VERSION,
            "max_agents": self.V,
            "device": self.device.type,
            "dtype": str(self.dtype).replace("torch.", ""),
        }

    def opening_seeds(self, seed: int, k: int = 1) -> list[int]:
        """The keys of the openings :meth:`reset` asks for, for ``k`` worlds right after
        ``generator.manual_seed(seed)`` (what a pool of openings is keyed by): the seeds
        it draws, through :meth:`opening_key`."""
        gen = torch.Generator(device="cpu").manual_seed(int(seed))
        return [self.opening_key(int(torch.randint(2**62, (1,), generator=gen))) for _ in range(k)]

    def opening_key(self, seed: int) -> int:
        """The seed an episode's opening is made from, given the opening seed it drew:
        that seed itself, or with ``opening_bank`` K the seed of its bank slot (the drawn
        seed mod K; slot j's seed is fixed, ``BANK_SEED + j``), so that K openings serve
        every episode and a seeded reset still gets the same one."""
        if self.opening_bank is None:
            return int(seed)
        return BANK_SEED + int(seed) % self.opening_bank

    def opening(self, seeds) -> list[list]:
        """The opening tiles of episodes with these ``seeds``: per seed ``[((0, 0), first
        tile), ((1, 0), the tile east of it)]`` (own frames), all seeds in one batched
        generator call per tile; the first tile's dict also holds its initial traffic,
        ``"traffic"`` ``(m, 11, 7)`` (:meth:`_traffic`), so that a bank's episode costs
        no VAE call at reset. The first tile (unconditional: a lane through its centre
        along +x, like tile 0 of the driving data) gets more draws and flow steps
        (``first_steps``), so that lane is found more often; the east one is the tile the
        ego's look-ahead asks for first, outpainted from it and closed against it. Each
        seed's noise comes from its own generator, so an opening depends on its seed
        alone, not on the batch (a pool made ahead gives what a reset would make, up to
        the float rounding of batched kernels); a bank's openings are made one at a time,
        so that one is its key's to the bit, made ahead, stored or on demand."""
        seeds = [int(s) for s in seeds]
        if self.opening_bank is not None and len(seeds) > 1:
            return [self.opening([s])[0] for s in seeds]
        return self._openings(seeds)

    def _openings(self, seeds: list) -> list[list]:
        from simsci.models.vectorworld._tokens import DIRECTIONS

        if not seeds:
            return []
        gens = [torch.Generator(device="cpu").manual_seed(s) for s in seeds]
        k = len(seeds)
        firsts, _ = self._generate(
            [None] * k, [None] * k, max_tries=8, steps=self.first_steps, generator=gens
        )
        east = DIRECTIONS.index((1, 0))
        # a lane-less first tile has nothing to continue: its neighbour is drawn like a
        # first tile (as the stream does)
        lanes = [len(t["points"]) > 0 for t in firsts]
        self.stats["uncontexted"] += lanes.count(False)
        contexts = [t if ok else None for t, ok in zip(firsts, lanes)]
        nexts, _ = self._generate(contexts, [east if ok else None for ok in lanes], generator=gens)
        firsts = [self._complete(t, []) for t in firsts]
        out = []
        for first, nxt, gen in zip(firsts, nexts, gens):
            east_tile = self._close(nxt, [(first, east)], gen)
            first = {**first, "traffic": self._traffic(first, gen)}
            out.append([((0, 0), first), ((1, 0), east_tile)])
        return out

    def _place_ego(self, b: int, tile: dict) -> None:
        x, y, th, speed = _ego_start(tile)
        self.x[b, 0], self.y[b, 0], self.theta[b, 0], self.v[b, 0] = x, y, th, speed
        self.accel[b, 0] = self.kappa[b, 0] = 0.0
        self.length[b, 0], self.width[b, 0] = EGO_SIZE
        self.valid[b, 0] = True
        self.uid[b, 0] = 0

    def _traffic(self, tile: dict, generator) -> np.ndarray:
        """A first tile's vehicles with 1 s histories ``(m, 11, 7)`` from the VAE, drawn
        from ``generator`` (the opening's own): as many as its count head draws
        (``tile_agents="vae"``) or as the generator made, none on a collision course with
        the ego where :func:`_ego_start` puts it. Counted (``init_rejected``,
        ``init_unsafe``) when drawn: a bank's once."""
        count = min(len(tile["agents"]), self.V - 1)
        if self.tile_agents == "vae":
            count = None
        if count == 0 or len(tile["points"]) == 0:
            return np.zeros((0, 11, 7))
        ego = _ego_row(*_ego_start(tile))
        hist, _, st = self.model.vae.sample(
            {k: tile[k] for k in ("points", "width", "speed_limit", "kind")},
            count,
            ego=ego,
            generator=generator,
        )
        hist = np.asarray(hist, np.float64)
        self.stats["init_rejected"] += int(st.get("rejected", 0))
        # no agent starts on a collision course with the ego (as simsci/Driving-v0 fills
        # a scene only where its IDM gaps are safe)
        unsafe = _on_collision_course(hist[:, -1], ego)
        self.stats["init_unsafe"] += int(unsafe.sum())
        return hist[~unsafe]

    def _init_agents(self, b: int, hist: np.ndarray) -> None:
        """The opening's traffic ``hist`` (:meth:`_traffic`) into world ``b``: each
        vehicle at its last history sample, its acceleration and curvature from the last
        two."""
        self.init_history[b] = hist
        if len(hist) == 0:
            return
        self.stats["init_agents"] += len(hist)
        now = hist[:, -1]
        prev = hist[:, -2]
        acc = (now[:, 2] - prev[:, 2]) / DT
        dth = np.arctan2(now[:, 4], now[:, 3]) - np.arctan2(prev[:, 4], prev[:, 3])
        dth = np.arctan2(np.sin(dth), np.cos(dth))
        ds = np.hypot(now[:, 0] - prev[:, 0], now[:, 1] - prev[:, 1])
        kap = np.where(ds > 1e-3, dth / np.maximum(ds, 1e-3), 0.0)
        for j, a in enumerate(now):
            self._add_agent(b, a, accel=float(acc[j]), kappa=float(kap[j]), check=False)

    # ------------------------------------------------------------------ tiles
    def _generate(
        self,
        contexts,
        directions,
        neighbours=None,
        max_tries: int = 3,
        steps: int | None = None,
        generator=None,
    ):
        steps = self.tile_steps if steps is None else int(steps)
        # only a request with extra neighbours passes them (a generator without the
        # keyword, e.g. a stand-in, still serves the rest)
        extra = {"neighbours": neighbours} if neighbours and any(neighbours) else {}
        tiles, st = self.model.tiles.generate(
            contexts,
            directions,
            steps=steps,
            mode=self.tile_mode if steps == self.tile_steps else "flow",
            generator=self.generator if generator is None else generator,
            max_tries=max_tries,
            **extra,
        )
        tiles = [_physical(t) for t in tiles]
        self.stats["tiles"] += len(tiles)
        self.stats["resampled"] += int(st.get("resampled", 0))
        self.stats["empty_tiles"] += int(st.get("empty", 0))
        self.stats["unled_tiles"] += int(st.get("unled", 0))
        return tiles, st

    def _slot_of(self, b: int, cell) -> int | None:
        for slot, rec in self.tiles[b].items():
            if rec["cell"] == cell:
                return slot
        return None

    def _add_tile(self, b: int, cell, tile: dict, *, spawn: bool = True, protect=()) -> None:
        """A newly generated ``tile`` for ``cell``: into the store (the next tile id), then
        into the world."""
        tile_id = len(self.store[b])
        self.store[b][tuple(cell)] = {"tile_id": tile_id, "tile": tile}
        self._insert(b, cell, tile, tile_id, spawn=spawn, protect=protect)

    def _restore(self, b: int, cell, protect=()) -> None:
        """Bring a dropped cell back from the store, as it was generated."""
        rec = self.store[b][tuple(cell)]
        self._insert(b, cell, rec["tile"], rec["tile_id"], protect=protect)
        self.stats["restored_tiles"] += 1

    def _insert(
        self, b: int, cell, tile: dict, tile_id: int, *, spawn: bool = True, protect=()
    ) -> None:
        """Put ``tile`` (its own frame) at ``cell`` of world ``b``, dropping one if full."""
        recs = self.tiles[b]
        free = [s for s in range(self.S) if s not in recs]
        if free:
            slot = free[0]
        else:
            ex, ey = float(self.x[b, 0]), float(self.y[b, 0])
            keep = set(protect) | {_cell(ex, ey)}
            far = [
                (math.hypot(r["cell"][0] * TILE_SIZE - ex, r["cell"][1] * TILE_SIZE - ey), s)
                for s, r in recs.items()
                if r["cell"] not in keep
            ]
            slot = max(far)[1] if far else min(recs)
            self._drop(b, slot)
        n_l = min(len(tile["points"]), self.Lt)
        lo = slot * self.Lt
        centre = np.array(cell, np.float64) * TILE_SIZE
        pts = np.asarray(tile["points"], np.float64)[:n_l] + centre
        self.lane_valid[b, lo : lo + self.Lt] = False
        if n_l:
            t = lambda a: torch.as_tensor(np.asarray(a)[:n_l], device=self.device)  # noqa: E731
            self.lane_points[b, lo : lo + n_l] = torch.as_tensor(pts, dtype=self.dtype).to(
                self.device
            )
            self.lane_width[b, lo : lo + n_l] = t(tile["width"]).to(self.dtype)
            self.lane_speed[b, lo : lo + n_l] = t(tile["speed_limit"]).to(self.dtype)
            self.lane_kind[b, lo : lo + n_l] = t(tile["kind"]).long()
            self.lane_valid[b, lo : lo + n_l] = True
        recs[slot] = {"cell": tuple(cell), "tile": tile, "tile_id": int(tile_id)}
        self.slot_cell[b, slot] = torch.as_tensor(cell, device=self.device)
        self.slot_used[b, slot] = True
        # ΔSim remembers lanes by index: forget the slot's old lanes
        for name in ("lane", "origin"):
            m = self.memory[name][b]
            m[(m >= lo) & (m < lo + self.Lt)] = -1
        self._connect(b)
        if spawn:
            for a in np.asarray(tile["agents"], np.float64).reshape(-1, 7):
                row = a.copy()
                row[:2] += centre
                self._add_agent(b, row)

    def _drop(self, b: int, slot: int) -> None:
        cell = self.tiles[b].pop(slot)["cell"]
        self.slot_used[b, slot] = False
        self.lane_valid[b, slot * self.Lt : (slot + 1) * self.Lt] = False
        self.stats["dropped_tiles"] += 1
        gone = self.valid[b].clone()
        gone[0] = False
        for j in torch.nonzero(gone).flatten().tolist():
            if _cell(float(self.x[b, j]), float(self.y[b, j])) == cell:
                self.valid[b, j] = False
                self._freed_at[b, j] = self.steps
                self.stats["despawned"] += 1

    def _connect(self, b: int) -> None:
        from simsci.models.vectorworld._tokens import lane_successors

        self.lane_succ[b] = -1
        ids = torch.nonzero(self.lane_valid[b]).flatten()
        if ids.numel() < 2:
            return
        pts = self.lane_points[b, ids].double().cpu().numpy()
        edges = np.asarray(lane_successors(pts, tol=0.5)).reshape(-1, 2)
        # a lane whose end another lane starts at exactly (a closed seam, to 1e-6 m) goes
        # on there even when the generator turned it by up to KINK_TURN degrees: without
        # the link the ego's lane association jumps sideways and the episode ends off-road
        exact = np.asarray(lane_successors(pts, tol=1e-6, max_turn=KINK_TURN)).reshape(-1, 2)
        exact = exact[~np.isin(exact[:, 0], edges[:, 0])]
        edges = np.concatenate([edges, exact]) if len(exact) else edges
        succ = np.full((len(ids), 2), -1, np.int64)
        fill = np.zeros(len(ids), np.int64)
        for src, dst in np.asarray(edges).reshape(-1, 2):
            if fill[src] < 2:
                succ[src, fill[src]] = int(ids[dst])
                fill[src] += 1
        self.lane_succ[b, ids] = torch.as_tensor(succ, device=self.device)

    def _stream(self, worlds=None, generators: dict | None = None) -> None:
        """Generate every missing cell on the look-ahead walk of each world (batched).
        ``generators``: world -> the generator its tiles (and their vehicles) are drawn
        from instead of the world's (a bank opening's look-ahead, :meth:`reset`)."""
        worlds = list(range(self.n)) if worlds is None else list(worlds)
        # one host copy per step (each .cpu() of a CUDA tensor waits for the device)
        ego = torch.stack(
            [self.x[:, 0], self.y[:, 0], self.theta[:, 0], *self._ego_tangent.unbind(1)]
            + [self._ego_known.to(self.x.dtype)],
            1,
        )
        ex, ey, th, tx, ty, known = ego.double().cpu().numpy().T
        # along the ego's lane where it has one running its way (the last association:
        # a reset world has none yet), else along its heading (module docstring)
        walks = {}
        for b in worlds:
            ux, uy = math.cos(th[b]), math.sin(th[b])
            if known[b] > 0.5 and tx[b] * ux + ty[b] * uy > 0.0:
                ux, uy = float(tx[b]), float(ty[b])
            x1 = ex[b] + self.lookahead * ux
            y1 = ey[b] + self.lookahead * uy
            walks[b] = _walk(ex[b], ey[b], x1, y1)
        for _ in range(8):  # at most a few missing cells per walk
            req, back = [], []
            for b, walk in walks.items():
                have = {r["cell"] for r in self.tiles[b].values()}
                prev = None
                for c in walk:
                    if c not in have:
                        if c in self.store[b]:
                            back.append((b, c))
                        else:
                            req.append((b, prev, c))
                        break
                    prev = c
            if not req and not back:
                return
            for b, c in back:
                self._restore(b, c, protect=walks[b])
            contexts, dirs, neighbours, cells, around = [], [], [], [], []
            for b, prev, c in req:
                # the context: the cell it is reached from, else any existing neighbour;
                # a lane-less one has nothing to continue (drawn like a first tile if all are)
                near = self._neighbours(b, c, prev)
                if not near:  # nothing around it to continue (cannot happen while driving)
                    continue
                around.append([(t, _direction(p, c)) for p, t in near])  # lane-less ones too
                near = [(p, t) for p, t in near if len(t["points"])]
                if not near:
                    self.stats["uncontexted"] += 1
                    contexts.append(None), dirs.append(None), neighbours.append([])
                else:
                    (p0, t0), rest = near[0], near[1:]
                    contexts.append(t0), dirs.append(_direction(p0, c))
                    neighbours.append([(t, _direction(p, c)) for p, t in rest])
                    self.stats["pinned_neighbours"] += len(rest)
                cells.append((b, c))
            if cells:
                gens = [None if generators is None else generators[b] for b, _ in cells]
                tiles, _ = self._generate(
                    contexts, dirs, neighbours, generator=None if generators is None else gens
                )
                for (b, c), tile, near, gen in zip(cells, tiles, around, gens):
                    self._add_tile(b, c, self._close(tile, near, gen), protect=walks[b])

    def _close(self, tile: dict, neighbours, generator=None) -> dict:
        """``tile`` closed against every existing neighbour (:func:`._outpaint.close_seams`,
        at the seam band of the one seam-gap definition), completed and populated
        (:meth:`_populate`, from ``generator``, default the world's); counted in
        ``stats``."""
        from simsci.models.vectorworld._outpaint import close_seams

        tile, counts = close_seams(tile, neighbours, max_lanes=self.Lt)
        for key, value in counts.items():
            self.stats[f"seam_{key}"] += value
        return self._populate(self._complete(tile, neighbours), generator)

    def _populate(self, tile: dict, generator=None) -> dict:
        """``tile``'s vehicles drawn by the VAE on its final lanes, from ``generator``
        (default the world's): as many as its count head draws (``tile_agents="vae"``;
        the generator draws about a third of the data's agents per tile, the VAE was
        trained to fill a tile's lanes as the data does) or as the generator made
        (``"generator"``, as the first tile). The generator's own agent tokens are not
        placed on the lanes the tile ends with (seams closed, lanes completed): measured
        on the shipped model, half lay more than 3.5 m from every lane and their
        headings were off their lane's by a median 106 degrees, so every one left the
        world (``npc_lost``) within a second of appearing."""
        count = None if self.tile_agents == "vae" else len(tile["agents"])
        if count == 0 or len(tile["points"]) == 0:
            return {**tile, "agents": np.zeros((0, 7))}
        hist, _, _ = self.model.vae.sample(
            {k: tile[k] for k in ("points", "width", "speed_limit", "kind")},
            count,
            generator=self.generator if generator is None else generator,
        )
        self.stats["tile_agents_drawn"] += len(hist)
        return {**tile, "agents": np.asarray(hist, np.float64)[:, -1].reshape(-1, 7)}

    def _complete(self, tile: dict, neighbours) -> dict:
        """``tile`` without interior dead ends (:func:`._lanegraph.complete_lanes`) when
        the world completes lanes; counted in ``stats`` (``lanes_*``)."""
        from simsci.models.vectorworld._lanegraph import complete_lanes

        if not self.complete:
            return tile
        tile, counts = complete_lanes(tile, neighbours, max_lanes=self.Lt)
        for key, value in counts.items():
            self.stats[f"lanes_{key}"] += value
        return tile

    def _neighbours(self, b: int, cell, first=None) -> list:
        """The existing (kept or stored) 4-neighbours of ``cell`` as ``(cell, tile)``,
        ``first`` (when it is one) first, then in :data:`DIRECTIONS` order."""
        from simsci.models.vectorworld._tokens import DIRECTIONS

        cells = [first] if first is not None else []
        cells += [(cell[0] - dx, cell[1] - dy) for dx, dy in DIRECTIONS]
        out, seen = [], set()
        for c in cells:
            if c in self.store[b] and c not in seen:
                seen.add(c)
                out.append((c, self.store[b][c]["tile"]))
        return out

    # ------------------------------------------------------------------ agents
    def _add_agent(self, b, row, *, accel=0.0, kappa=0.0, check=True) -> bool:
        """Add one vehicle ``row`` = AGENT_FEATURES (world frame) to world ``b``."""
        free = torch.nonzero(~self.valid[b]).flatten()
        free = free[free > 0]
        free = free[torch.argsort(self._freed_at[b, free], stable=True)]
        if free.numel() == 0:
            self.stats["spawn_rejected"] += 1
            return False
        th = math.atan2(row[4], row[3])
        if check:
            box = np.array(
                [
                    row[0],
                    row[1],
                    max(float(row[2]), 0.0),
                    math.cos(th),
                    math.sin(th),
                    row[5],
                    row[6],
                ],
                np.float64,
            )
            cand = torch.as_tensor(box, dtype=self.dtype, device=self.device)
            if math.hypot(row[0] - float(self.x[b, 0]), row[1] - float(self.y[b, 0])) < (
                self.spawn_clearance
            ):
                self.stats["spawn_rejected"] += 1
                return False
            # nor where the ego would meet it within 3 s (the initial traffic's screen):
            # a tile's vehicles appear when the look-ahead reaches it, which on a bend or
            # at a restored cell is inside the ego's braking distance
            ego = _ego_row(
                float(self.x[b, 0]), float(self.y[b, 0]), float(self.theta[b, 0]),
                float(self.v[b, 0]),
            )  # fmt: skip
            if bool(_on_collision_course(box[None], ego)[0]):
                self.stats["spawn_unsafe"] += 1
                return False
            agents, valid = self.agents()
            others = agents[b, valid[b]]
            grown = cand.clone()
            grown[5:7] += 1.0  # 0.5 m clearance all round
            if others.numel() and bool(metrics.boxes_overlap(grown[None], others).any()):
                self.stats["spawn_rejected"] += 1
                return False
        j = int(free[0])
        self.x[b, j], self.y[b, j], self.theta[b, j] = row[0], row[1], th
        self.v[b, j] = max(float(row[2]), 0.0)
        self.accel[b, j], self.kappa[b, j] = accel, kappa
        self.length[b, j], self.width[b, j] = row[5], row[6]
        self.valid[b, j] = True
        self._stopped[b, j] = 0
        for name, fill in (("lane", -1), ("manoeuvre", 0), ("origin", -1)):
            self.memory[name][b, j] = fill
        # a random route key: which successor the NPC takes at each fork
        self.memory["route"][b, j] = int(torch.randint(2**20, (1,), generator=self.generator))
        self.uid[b, j] = self._next_uid
        self._next_uid += 1
        if check:
            self.stats["spawned"] += 1
        return True

    def agents(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(n, V, 7)`` AGENT_FEATURES of every slot (agent 0 the ego) and ``(n, V)`` valid."""
        a = torch.stack(
            [
                self.x,
                self.y,
                self.v,
                torch.cos(self.theta),
                torch.sin(self.theta),
                self.length,
                self.width,
            ],
            -1,
        )
        return a, self.valid.clone()

    def lane_set(self):
        return LaneSet(
            points=self.lane_points,
            width=self.lane_width,
            speed_limit=self.lane_speed,
            succ=self.lane_succ,
            valid=self.lane_valid,
        )

    def _packed_lanes(self):
        """:meth:`lane_set` with only the valid lanes, packed to the front of each world in
        slot order (ΔSim's features cost grows with the lane count, and most of the
        ``max_tiles * max_lanes`` slots are empty: a generated tile has a few lanes), and
        the renumberings ``(n, L)`` slot -> packed and ``(n, K)`` packed -> slot (-1 none).
        Lanes only move, so ΔSim sees the same lanes in the same order.

        Kept until a lane tensor changes (the map changes only when a tile is added or
        dropped, every ~75 m of a drive): the LaneSet then keeps its derived geometry
        (:meth:`~simsci.driving.LaneSet.geometry`, resampling and tangents) between steps.
        The key is each tensor (the same object) and its in-place version counter, so
        every torch write (indexed assignment, an in-place op), wherever it is made,
        invalidates it; a write that bypasses the counter (through ``.data`` or a NumPy
        view of the tensor) would not."""
        tensors = (self.lane_points, self.lane_width, self.lane_speed, self.lane_succ)
        tensors += (self.lane_valid,)
        if any(t.is_inference() for t in tensors):  # made under inference_mode: no counters
            return self._pack_lanes()
        versions = tuple(t._version for t in tensors)
        cached = self._packed_cache
        if (
            cached is not None
            and cached[0] == versions
            and all(a is b for a, b in zip(cached[1], tensors))
        ):
            return cached[2]
        packed = self._pack_lanes()
        self._packed_cache = (versions, tensors, packed)
        return packed

    def _pack_lanes(self):
        valid = self.lane_valid
        n, L = valid.shape
        K = max(1, int(valid.sum(1).max()))
        order = _slot_order(valid, K)
        keep = torch.gather(valid, 1, order)
        to_full = torch.where(keep, order, torch.full_like(order, -1))
        packed = torch.arange(K, device=valid.device).expand(n, K)
        to_compact = torch.full((n, L), -1, dtype=torch.long, device=valid.device)
        to_compact.scatter_(1, order, torch.where(keep, packed, torch.full_like(packed, -1)))

        def take(t):  # the packed lanes' rows of a per-lane tensor
            return _gather_slots(t, order)

        succ = _renumber(take(self.lane_succ), to_compact)
        lanes = LaneSet(
            points=take(self.lane_points),
            width=take(self.lane_width),
            speed_limit=take(self.lane_speed),
            succ=torch.where(keep[..., None], succ, torch.full_like(succ, -1)),
            valid=keep,
        )
        return lanes, to_compact, to_full

    def agent_state(self):
        return AgentState(
            x=self.x,
            y=self.y,
            theta=self.theta,
            v=self.v,
            accel=self.accel,
            kappa=self.kappa,
            length=self.length,
            width=self.width,
            valid=self.valid,
            **self.memory,
        )

    def _despawn(self) -> None:
        d = torch.hypot(self.x - self.x[:, :1], self.y - self.y[:, :1])
        gone = self.valid & (d > self.window)
        # on no kept tile: its cell was dropped or never generated
        cx = torch.floor(self.x / TILE_SIZE + 0.5).long()
        cy = torch.floor(self.y / TILE_SIZE + 0.5).long()
        sc, used = self.slot_cell[:, None], self.slot_used[:, None]  # (n, 1, S, 2), (n, 1, S)
        on = ((cx[..., None] == sc[..., 0]) & (cy[..., None] == sc[..., 1]) & used).any(-1)
        gone |= self.valid & ~on & self.slot_used.any(1, keepdim=True)
        gone[:, 0] = False
        self._leave(gone, "despawned")

    def _leave(self, gone: torch.Tensor, stat: str) -> None:
        """The vehicles of the ``(n, V)`` mask ``gone`` leave the world, counted in
        ``stats[stat]``; their slots remember the step they were freed."""
        if bool(gone.any()):
            self.stats[stat] += int(gone.sum())
            self.valid &= ~gone
            self._freed_at[gone] = self.steps

    def _clear_crashes(self) -> None:
        """NPCs whose box overlaps another vehicle's (as the last step left them, so the
        crash is in what was observed and recorded) leave the world (``npc_crashed``):
        there are no crash dynamics, and ΔSim cannot drive two overlapping boxes apart,
        so a crashed pair would otherwise stay locked on the lane for the rest of the
        episode. The ego stays (its episode ends on a collision unless told to go on)."""
        agents, valid = self.agents()
        crashed = metrics.collisions(agents, valid)
        crashed[:, 0] = False
        self._leave(crashed, "npc_crashed")

    # ------------------------------------------------------------------ step
    def step(self, ego_action: torch.Tensor) -> None:
        """Advance every world by ``DT``: ΔSim moves the NPCs, ``ego_action`` ``(n, 2)``
        [acceleration m/s^2, steering rad] the ego, then the map streams on."""
        a = torch.as_tensor(ego_action, device=self.device, dtype=self.dtype)
        if tuple(a.shape) != (self.n, 2):
            raise ValueError(f"ego_action must have shape ({self.n}, 2), got {tuple(a.shape)}")
        if not bool(torch.isfinite(a).all()):
            raise ValueError("ego_action contains NaN or inf")
        self._clear_crashes()
        npc = self.valid.clone()
        npc[:, 0] = False
        if bool(npc.any()):
            lanes, to_compact, to_full = self._packed_lanes()
            state = self.agent_state()
            for name in ("lane", "origin"):  # lane memories in the packed numbering
                setattr(state, name, _renumber(getattr(state, name), to_compact))
            with torch.no_grad():
                new, feats = self.model.npc.step(
                    lanes,
                    state,
                    npc,
                    generator=self.generator,
                    greedy=self.greedy,
                    shaping=self.shaping,
                    dt=DT,
                    accel_cap=self._yield_cap(npc) if self.npc_yield else None,
                    idm_floor_below=IDM_FLOOR_BELOW,
                )
            for name in ("x", "y", "theta", "v", "accel", "kappa"):
                setattr(self, name, getattr(new, name).clone())
            for name in self.memory:
                value = getattr(new, name)
                if name in ("lane", "origin"):
                    value = _renumber(value, to_full)
                self.memory[name] = value.clone()
            # NPCs off the generated lanes, or stopped at the end of theirs, leave
            lost = npc & (
                (feats.lane < 0)
                | (feats.offset.abs() > 3.5)
                | ((self.v < 0.1) & (feats.path_left[..., 0] < 5.0))
            )
            self._leave(lost, "npc_lost")
            # NPCs stopped for STALL_STEPS with road ahead leave too (npc_stalled)
            self._stopped = torch.where(npc & (self.v < 0.1), self._stopped + 1, 0)
            self._leave(npc & self.valid & (self._stopped >= STALL_STEPS), "npc_stalled")
        x0, y0 = self.x[:, 0].clone(), self.y[:, 0].clone()
        xn, yn, thn, vn, an, kn = bicycle_step(
            x0, y0, self.theta[:, 0], self.v[:, 0], a[:, 0], a[:, 1], self.length[:, 0]
        )
        self.x[:, 0], self.y[:, 0] = xn, yn
        self.theta[:, 0] = torch.atan2(torch.sin(thn), torch.cos(thn))
        self.v[:, 0], self.accel[:, 0], self.kappa[:, 0] = vn, an, kn
        self.steps += 1
        self._despawn()
        self._stream()
        self._associate_ego()
        disp = (xn - x0) * self._ego_tangent[:, 0] + (yn - y0) * self._ego_tangent[:, 1]
        self.progress = disp.to(torch.float64)
        self.driven += self.progress

    def _yield_cap(self, npc: torch.Tensor) -> torch.Tensor:
        """(n, V) upper bounds on the NPCs' accelerations that keep them off the ego
        (``npc_yield``): an NPC with the ego ahead in its path (the ego's centre within
        half the two widths + ``YIELD_MARGIN`` m of the NPC's heading line) brakes for
        it as the IDM brakes for a leader moving at the ego's speed along the NPC's
        heading, whatever lane either is on (generated lanes cross and overlap), and an
        NPC that would meet it from the side brakes too (:meth:`_conflict_cap`); +inf
        elsewhere."""
        c, s = torch.cos(self.theta), torch.sin(self.theta)
        dx, dy = self.x[:, :1] - self.x, self.y[:, :1] - self.y
        ahead = dx * c + dy * s
        side = -dx * s + dy * c
        band = 0.5 * (self.width + self.width[:, :1]) + YIELD_MARGIN
        gap = (ahead - 0.5 * (self.length + self.length[:, :1])).clamp(min=0.1)
        v = self.v
        v_lead = self.v[:, :1] * torch.cos(self.theta[:, :1] - self.theta)
        cap = IDM_YIELD[2] * (1 - (idm_desired_gap(v, v_lead, IDM_YIELD) / gap) ** 2)
        path = npc & (ahead > 0) & (side.abs() < band)
        cap = torch.where(path, cap, torch.full_like(cap, math.inf))
        return torch.minimum(cap, self._conflict_cap(npc))

    def _conflict_cap(self, npc: torch.Tensor) -> torch.Tensor:
        """(n, V) acceleration bounds of NPCs that would run into the ego from the side:
        both keeping speed and heading, their boxes meet within ``YIELD_HORIZON`` s
        (checked every 0.5 s) with the ego then ahead of the NPC, the two headings more
        than ``YIELD_ANGLE`` degrees apart (a crossing, or a cut-in the ego is passing;
        a leader on the same heading is the line rule's). Such an NPC brakes as the IDM
        brakes for a standstill where it would meet the ego, so the ego goes first;
        +inf elsewhere."""
        c, s = torch.cos(self.theta), torch.sin(self.theta)
        state = torch.stack([self.x, self.y, self.v, c, s, self.length, self.width], -1)
        inf = torch.full_like(self.v, math.inf)
        cand = npc & (c * c[:, :1] + s * s[:, :1] < math.cos(math.radians(YIELD_ANGLE)))
        b, j = torch.nonzero(cand, as_tuple=True)
        them, ego = state[b, j], state[b, 0]  # (k, 7) each
        # only pairs whose centres come within their half diagonals over the horizon
        # (closest approach of the straight-line motions) can meet: the rest skip SAT
        r = them[:, :2] - ego[:, :2]
        w = them[:, 2:3] * them[:, 3:5] - ego[:, 2:3] * ego[:, 3:5]
        t_min = (-(r * w).sum(-1) / (w * w).sum(-1).clamp(min=1e-12)).clamp(0.0, YIELD_HORIZON)
        gap = r + w * t_min[:, None]
        reach = torch.hypot(them[:, 5], them[:, 6]) + torch.hypot(ego[:, 5], ego[:, 6])
        near = torch.hypot(gap[:, 0], gap[:, 1]) <= 0.1 + 0.5 * reach
        if not bool(near.any()):
            return inf
        b, j, them, ego = b[near], j[near], them[near], ego[near]
        steps = int(round(YIELD_HORIZON / 0.5))
        taus = torch.arange(1, steps + 1, dtype=them.dtype, device=them.device) * 0.5
        them_t, ego_t = _moved(them, taus), _moved(ego, taus)  # (T, k, 7): every 0.5 s
        meet = metrics.boxes_overlap(them_t, ego_t)
        # the ego ahead of the NPC then
        meet &= ((ego_t[..., :2] - them_t[..., :2]) * them_t[..., 3:5]).sum(-1) > 0
        first = meet.to(torch.int8).argmax(0)  # the first meeting's step
        v = them[:, 2]
        s0, T, a, bb = IDM_YIELD
        s_star = s0 + v * T + v * v / (2 * math.sqrt(a * bb))
        dist = (v * taus[first]).clamp(min=0.1)  # how far the NPC goes to it
        cap = torch.where(meet.any(0), a * (1 - (s_star / dist) ** 2), math.inf)
        out = inf.clone()
        out[b, j] = cap
        return out

    # ------------------------------------------------------------------ the ego on lanes
    def _associate_ego(self, rows=None) -> None:
        """The ego's lane, its offset, heading error and off-road flag.

        Off-road: farther than half a width + ``OFFROAD_MARGIN`` from every lane agreeing
        with the ego's heading (the nearest such lane decides). The lane the ego *drives
        on* (what it observes) keeps to its last one: the last lane or one of its
        successors while the ego is within that margin of it, else the nearest agreeing
        lane; so at a crossing the ego stays on its road, as ``simsci/Driving-v0``'s ego
        stays on its lane, instead of taking whichever lane is nearest this step.

        Computed on the packed lanes (:meth:`_packed_lanes`, the same lanes in the same
        order, so the same nearest lane and ties; indices are mapped back to slots). The
        distances are the same elementwise kernels on a smaller tensor: float32 gives the
        same bits; float64 ``hypot`` may round 1 ulp differently in another tensor shape,
        which only a near-exact tie could show (as the batch size always could)."""
        rows = torch.arange(self.n, device=self.device) if rows is None else rows
        px, py, th = self.x[rows, 0], self.y[rows, 0], self.theta[rows, 0]
        lanes, to_compact, to_full = self._packed_lanes()
        to_full = to_full[rows]
        pts = lanes.points[rows]  # k, K, P, 2
        a, bpt = pts[:, :, :-1], pts[:, :, 1:]
        d = bpt - a
        seg2 = (d * d).sum(-1).clamp(min=1e-9)
        rx, ry = px[:, None, None] - a[..., 0], py[:, None, None] - a[..., 1]
        u = ((rx * d[..., 0] + ry * d[..., 1]) / seg2).clamp(0, 1)
        qx, qy = a[..., 0] + u * d[..., 0], a[..., 1] + u * d[..., 1]
        dist = torch.hypot(px[:, None, None] - qx, py[:, None, None] - qy)
        seg_len = seg2.sqrt()
        tx, ty = d[..., 0] / seg_len, d[..., 1] / seg_len
        agree = (tx * torch.cos(th)[:, None, None] + ty * torch.sin(th)[:, None, None]) > 0
        ok = lanes.valid[rows][..., None] & agree & (seg2 > 1e-6)
        dist = torch.where(ok, dist, torch.full_like(dist, math.inf))
        lane_dist, lane_seg = dist.min(-1)  # k, K: each lane's nearest segment
        best, lane = lane_dist.min(1)  # the nearest agreeing lane (decides off-road)
        r = torch.arange(len(rows), device=self.device)
        seg = lane_seg[r, lane]
        width = lanes.width[rows]
        near_width = width[r, lane]
        # keep to the last lane or its successors while on them (packed numbering; a
        # last lane no longer kept has no successors either)
        prev = to_compact[rows, self._ego_lane[rows]]
        succ = lanes.succ[rows, prev.clamp(min=0)]
        keep = torch.cat([prev[:, None], torch.where(prev[:, None] >= 0, succ, -1)], 1)  # k, 3
        keep_d = torch.gather(lane_dist, 1, keep.clamp(min=0))
        width_k = torch.gather(width, 1, keep.clamp(min=0))
        on = self._ego_known[rows, None] & (keep >= 0) & (keep_d <= 0.5 * width_k + OFFROAD_MARGIN)
        keep_d = torch.where(on, keep_d, torch.full_like(keep_d, math.inf))
        kd, kj = keep_d.min(1)
        stay = torch.isfinite(kd)
        kept = keep[r, kj].clamp(min=0)
        lane = torch.where(stay, kept, lane)
        seg = torch.where(stay, lane_seg[r, kept], seg)
        txb, tyb = tx[r, lane, seg], ty[r, lane, seg]
        rxb, ryb = rx[r, lane, seg], ry[r, lane, seg]
        # signed offset: + left of the lane direction
        offset = txb * ryb - tyb * rxb
        found = torch.isfinite(best)
        heading_lane = torch.atan2(tyb, txb)
        err = torch.atan2(torch.sin(th - heading_lane), torch.cos(th - heading_lane))
        slot = to_full[r, lane]
        self._ego_lane[rows] = torch.where(found, slot, torch.zeros_like(slot))
        self._ego_known[rows] = found
        self._ego_offset[rows] = torch.where(found, offset, torch.zeros_like(offset))
        self._ego_heading_err[rows] = torch.where(found, err, torch.zeros_like(err))
        tan = torch.stack(
            [torch.where(found, txb, torch.cos(th)), torch.where(found, tyb, torch.sin(th))], -1
        )
        self._ego_tangent[rows] = tan
        self._ego_offroad[rows] = ~found | (best > 0.5 * near_width + OFFROAD_MARGIN)

    def ego_offroad(self) -> torch.Tensor:
        return self._ego_offroad.clone()

    # ------------------------------------------------------------------ views
    def road_view(self, b: int):
        """World ``b``'s kept lanes as an object ``top_down`` can draw (points, width...)."""
        ids = torch.nonzero(self.lane_valid[b]).flatten()
        pts = self.lane_points[b, ids].double().cpu().numpy()
        return SimpleNamespace(
            points=pts,
            num_points=np.full(len(ids), LANE_POINTS),
            length=np.linalg.norm(np.diff(pts, axis=1), axis=-1).sum(-1),
            width=self.lane_width[b, ids].double().cpu().numpy(),
        )

    def __repr__(self) -> str:
        return (
            f"StreamingWorld(n={self.n}, max_tiles={self.S}, max_agents={self.V}, "
            f"steps={self.steps}, tiles={self.stats['tiles']})"
        )


def seam_gaps(world: StreamingWorld, b: int, tolerance: float = 0.5) -> np.ndarray:
    """Lane end point gaps [m] at the seams between the kept tiles of world ``b``, by the
    one definition (:func:`simsci.driving.metrics.drive_seam_gaps`: every lane end within
    ``tolerance`` of a shared edge, to the nearest complementary end of the other tile
    there; ``inf`` without one). float64."""
    recs = list(world.tiles[b].values())
    pts = [np.asarray(r["tile"]["points"], np.float64).reshape(-1, LANE_POINTS, 2) for r in recs]
    ids = np.array([r["tile_id"] for r in recs], np.int64)
    zero = np.zeros(len(recs), np.int64)
    return metrics.drive_seam_gaps(
        np.concatenate(pts) if pts else np.zeros((0, LANE_POINTS, 2)),
        np.repeat(ids, [len(p) for p in pts]),
        ids,
        np.array([r["cell"] for r in recs], np.int64).reshape(-1, 2),
        zero,
        zero,
        tile_size=TILE_SIZE,
        tolerance=tolerance,
    )
