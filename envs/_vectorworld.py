"""``simsci/VectorWorld-v1``: drive an ego car through a world a trained model generates.

Description
    The map and the traffic come from a trained VectorWorld
    (:mod:`simsci.models.vectorworld`): the tile generator outpaints 64 m lane-graph tiles
    ahead of the ego as it drives (one network call per tile), the motion-aware gated VAE
    places every tile's vehicles on its lanes (the first tile's with a motion history),
    ΔSim drives the NPCs with
    kinematically feasible actions (:class:`~simsci.models.vectorworld.StreamingWorld`).
    The ego is the kinematic bicycle of ``simsci/Driving-v0``, and the action and
    observation spaces are those of ``simsci/Driving-v0``, so a policy trained in one
    can be evaluated in the other. ``checkpoint``: None (the default) is the world
    shipped with simsci (:func:`~simsci.models.vectorworld.pretrained`); a directory
    written by ``simsci train vectorworld`` (or :meth:`VectorWorld.save`) or a loaded
    ``VectorWorld``; ``"small"``: a tiny model trained on the fly on a few simulated
    drives and cached (:func:`~simsci.models.vectorworld.small_default`: for tests).

Action space
    As ``simsci/Driving-v0``: ``Box([-8, -0.5], [4, 0.5])``, acceleration [m/s^2] and
    front-wheel steering angle [rad] (``action_scale="physical"``, the default), or
    ``Box(-1, 1, (2,))`` mapped affinely onto it (``action_scale="normalized"``). Out-of-box
    actions are clipped (``action_bounds="clip"``) or rejected (``"error"``); NaN/inf is
    always an error.

Observation space
    The ``Dict`` of ``simsci/Driving-v0`` (``observation="dict"``, the default): ``ego``
    (8,) [speed, acceleration, steering, lateral offset, heading error, lane width, speed
    limit, route fraction], ``agents`` (num_agents, 7) + ``agents_mask``, ``lanes``
    (num_lanes, 20, 2) + ``lanes_mask``, in the ego frame; or its flat float32 vector
    (``observation="flat"``, the same layout as ``simsci/Driving-v0``'s). The lane is the
    nearest generated lane whose direction agrees with the ego's heading; the route
    fraction is the distance driven over ``route_length``.

Reward
    As ``simsci/Driving-v0``: ``0.1 * progress`` (metres along the lane this step) ``-
    0.02 * (jerk / 10)^2``; ``-20`` on a collision or leaving the road (the episode ends).

Termination and truncation
    Terminated on a collision with an NPC or off-road (centre more than 0.5 m beyond the
    edge of every lane of its direction). Truncated after ``max_distance`` m (default
    ``route_length - 200``) or ``max_episode_steps`` steps (default 1200, 120 s). The
    step that ends an episode says why in ``info["end_reason"]``, and tells apart the
    two ways of going off-road in a generated world (both terminate, with the same
    reward): "offroad", the ego left a lane that goes on its way (beside the lane, or
    off the outside of a bend it did not follow), and "left_generated_lanes", the ego
    drove past the end of the generated lanes: past the last point of its lane's run in
    its direction (the lane ends without a successor, or turns back) while within the
    lane's half width + 0.5 m of its line, so it would be on the lane had the lane gone
    on; before the start of a lane in the same way; or with no generated lane of its
    direction at all (the generator made nothing to drive on there).

Info
    As ``simsci/Driving-v0``: ``route_s`` (= ``distance``), ``distance`` [m], ``speed``
    [m/s], ``t`` [s]; after a step ``collision``, ``offroad``; on the step that ends the
    episode ``end_reason``: "collision", "offroad", "left_generated_lanes", "distance"
    (``max_distance``) or "time_limit" (``max_episode_steps``), from
    :data:`simsci.envs.END_REASONS` (vector environment: an array of str, "" where still
    running, with the mask ``_end_reason``).

Version history
    v0: initial version. Later, without a change to dynamics or reward: ``info`` gains
    ``end_reason`` (an episode ended by leaving the generated lanes said only
    ``offroad`` before).
    v1: the generated map changed: a cell is generated once per episode (a dropped tile
    the ego comes back to is restored, not drawn again), and a new tile pins the seams
    of every existing neighbour, not only the one it is reached from. Later in v1 (the
    same issue, before a release): every seam is closed (seam slots are lanes; lane
    ends on a shared edge snapped, trimmed or continued), NPC curvature is rate-limited
    so the slip keeps their positions feasible, and an episode's opening tiles depend
    on its seed alone (made ahead in a pool: see Reset cost).
    Later in v1 (2026-12-04): lane-graph completion (``complete=True``, the default;
    ``complete=False`` for the raw lanes): lanes that stopped inside a tile are joined
    or extended to its edge, kinks smoothed, speed limits capped by curvature; and the
    ego's observed lane keeps to its lane and its successors at crossings (off-road is
    judged as before).
    Later in v1 (2026-12-04, fifth session), an option with the default unchanged:
    ``tile_agents="vae"`` draws every tile's vehicles by the VAE on its final lanes, as
    many as its count head draws (about the data's density); ``"generator"`` (default)
    kept the tile generator's agent tokens (until the eleventh session, below).
    Later in v1 (2026-12-05, sixth session): NPCs yield to the ego (``npc_yield=True``,
    the default; False for ΔSim's accelerations alone): an NPC with the ego ahead in its
    path brakes for it (IDM) whatever lane either is on.
    Later in v1 (2026-12-05, tenth session): an NPC that would meet the ego from the side
    (both keeping speed and heading, within 3 s, the ego then ahead of it: a crossing or
    a cut-in the ego is passing) brakes for a standstill there too, so the ego goes first.
    Later in v1 (2026-12-05, eleventh session): with ``tile_agents="generator"`` every
    streamed tile's vehicles are placed by the VAE on its final lanes, as many as the
    generator drew (its own tokens lay off those lanes and left the world at once); no
    vehicle spawns where the ego would meet it within 3 s; a stopped NPC with room ahead
    moves off as the IDM would.

Reset cost
    A reset's opening tiles (the first tile, 16 flow steps and up to 8 draws, and the
    one east of it) are the expensive part. An unseeded reset knows the next resets'
    seeds (the reset generator's next draws), so on a miss it makes the openings of
    this and the next ``OPENING_POOL - 1`` resets in one batched generator call; the
    others take theirs from the pool. A seeded reset makes its own. The same seed gives
    the same episode either way. ``first_steps`` (default 16) sets the first tile's
    flow steps; ``first_steps=1`` uses the one-step sampler there too: with the shipped
    world a lane-keeping evaluation ran 2.4x faster, but the first tile has a lane
    through the ego's start less often (mean distance 28 m against 44 m).
    ``opening_bank=K`` (default None) opens every episode with one of K fixed openings
    (the drawn opening seed mod K), each made once and kept: after the first K a reset
    makes no tile, which is what RL training with many short episodes needs (an opening
    costs ~0.7 s of one CPU thread, ~50 DiT calls). An opening holds its first two
    tiles, their initial vehicles and, once it has opened an episode, the tiles of the
    ego's first look-ahead (made from the opening's key). The rest of an episode (the
    tiles it drives into, agents, NPC actions) still comes from its own seed, and the
    same seed still gives the same episode; only the opening repeats across episodes.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from simsci._device import resolve_device
from simsci.driving import OFFROAD_MARGIN
from simsci.envs._core import _check_render_mode, check_vector_options
from simsci.envs._driving import (
    FAILURE_REWARD,
    JERK_PENALTY,
    PROGRESS_REWARD,
    DrivingEnv,
    DrivingVectorEnv,
    check_driving_options,
    ego_collisions,
    end_codes,
    observe_agents,
    observe_lanes,
)

__all__ = ["VectorWorldEnv", "VectorWorldVectorEnv", "ENV_ID"]

ENV_ID = "simsci/VectorWorld-v1"
#: openings (first tile and the one east of it) made ahead in one batched call
OPENING_POOL = 16


class _Stream:
    """The batched streaming world behind both front ends (the interface of
    ``simsci/Driving-v0``'s world: reset, step, observe, info, frame)."""

    def __init__(
        self,
        n: int,
        *,
        checkpoint,
        route_length: float,
        max_distance: float | None,
        max_episode_steps: int,
        num_agents: int,
        num_lanes: int,
        max_vehicles: int,
        max_tiles: int,
        shaping: bool,
        tile_steps: int,
        device,
        tile_mode: str = "flow",
        first_steps: int = 16,
        opening_bank: int | None = None,
        complete: bool = True,
        tile_agents: str = "generator",
        npc_yield: bool = True,
    ):
        from simsci.models.vectorworld import StreamingWorld, resolve_world

        for name, value, lo in (
            ("max_episode_steps", max_episode_steps, 1),
            ("num_agents", num_agents, 1),
            ("num_lanes", num_lanes, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
                raise ValueError(f"{name} must be an int >= {lo}, got {value!r}")
        if not (isinstance(route_length, (int, float)) and 500 <= route_length < 1e7):
            raise ValueError(
                f"route_length must be a number of metres >= 500, got {route_length!r}"
            )
        if max_distance is None:
            max_distance = float(route_length) - 200.0
        if not max_distance > 0:
            raise ValueError(f"max_distance must be > 0 m, got {max_distance}")
        model = resolve_world(checkpoint)  # None: the shipped default; "small": tests'
        if isinstance(device, str) and device == "auto":
            device = resolve_device(device)
        self.sim = StreamingWorld(
            model,
            int(n),
            max_tiles=max_tiles,
            max_agents=max_vehicles,
            shaping=shaping,
            tile_steps=tile_steps,
            # one step: MeanFlow's average velocity; more: the flow-matching sampler
            tile_mode="meanflow" if int(tile_steps) == 1 else tile_mode,
            first_steps=first_steps,
            device=device,
            opening_bank=opening_bank,
            complete=complete,
            tile_agents=tile_agents,
            npc_yield=npc_yield,
        )
        self.device = self.sim.device
        self.n = int(n)
        self.route_length = float(route_length)
        self.max_distance = float(max_distance)
        self.max_steps = int(max_episode_steps)
        self.num_agents, self.num_lanes = int(num_agents), int(num_lanes)
        dev = self.device
        self.steps = torch.zeros(self.n, dtype=torch.long, device=dev)
        self.last_accel = torch.zeros(self.n, device=dev)
        self.steer = torch.zeros(self.n, device=dev)
        self.end_code = torch.zeros(self.n, dtype=torch.long, device=dev)
        # opening seed -> opening tiles, made ahead (reset); a bank's: the world's own
        self.pool: dict = self.sim.bank if self.sim.opening_bank is not None else {}
        self._after = None  # the reset generator's state after the last reset's draw
        self.config = {
            "checkpoint": str(checkpoint) if isinstance(checkpoint, (str, os.PathLike)) else None,
            "route_length": self.route_length,
            "max_distance": self.max_distance,
            "max_episode_steps": self.max_steps,
            "num_agents": self.num_agents,
            "num_lanes": self.num_lanes,
            "max_vehicles": int(max_vehicles),
            "max_tiles": int(max_tiles),
            "shaping": bool(shaping),
            "tile_steps": int(tile_steps),
            "first_steps": int(first_steps),
            "opening_bank": self.sim.opening_bank,
            "complete": self.sim.complete,
            "tile_agents": self.sim.tile_agents,
            "npc_yield": self.sim.npc_yield,
        }

    def reset(self, generator: torch.Generator, index: torch.Tensor | None = None):
        k = self.n if index is None else int(index.numel())
        if k == 0:
            return
        # an unseeded reset finds the generator as the last one left it: its next draws,
        # hence the next episodes' opening seeds, are known, and the pool is made ahead
        ahead = self._after is not None and torch.equal(generator.get_state(), self._after)
        seed = int(torch.randint(2**62, (1,), generator=generator))
        self._after = generator.get_state()
        self.sim.generator.manual_seed(seed)
        if ahead:
            self._fill_pool(self.sim.opening_seeds(seed, k))
        self.sim.reset(None if index is None else index.tolist(), pool=self.pool)
        idx = slice(None) if index is None else index
        self.steps[idx] = 0
        self.last_accel[idx] = 0.0
        self.steer[idx] = 0.0
        self.end_code[idx] = 0

    def _fill_pool(self, needed: list) -> None:
        """When an opening of this reset is not in the pool: make it and those of the next
        ``OPENING_POOL - 1`` resets (one world each) in one batched call, forgetting
        openings no reset will ask for (the generator was seeded anew; an opening bank's
        are all kept). ``needed``: the keys of this reset's openings (``opening_seeds``)."""
        if all(s in self.pool for s in needed):
            return
        peek = torch.Generator(device="cpu")
        peek.set_state(self._after)
        upcoming = list(needed)
        for _ in range(OPENING_POOL - 1):
            nxt = int(torch.randint(2**62, (1,), generator=peek))
            upcoming += self.sim.opening_seeds(nxt, 1)
        if self.sim.opening_bank is None:
            self.pool = {s: t for s, t in self.pool.items() if s in set(upcoming)}
        todo = list(dict.fromkeys(s for s in upcoming if s not in self.pool))
        self.pool.update(zip(todo, self.sim.opening(todo)))

    def step(self, action: torch.Tensor):
        sim = self.sim
        sim.step(action)
        self.steps += 1
        accel = sim.accel[:, 0].float()
        jerk = (accel - self.last_accel) / 0.1
        self.last_accel = accel.clone()
        self.steer = action[:, 1].clone().float()
        collided = self.collisions()
        offroad = sim.ego_offroad()
        terminated = collided | offroad
        driven = sim.driven
        reached, timed_out = driven >= self.max_distance, self.steps >= self.max_steps
        truncated = (reached | timed_out) & ~terminated
        self.end_code = end_codes(
            collided, offroad, reached, timed_out, left_lanes=self.left_generated_lanes(offroad)
        )
        reward = PROGRESS_REWARD * sim.progress.float() - JERK_PENALTY * (jerk / 10.0).pow(2)
        reward = torch.where(terminated, torch.full_like(reward, FAILURE_REWARD), reward)
        return reward, terminated, truncated, collided, offroad

    def collisions(self) -> torch.Tensor:
        return ego_collisions(*self.sim.agents())

    def left_generated_lanes(self, offroad: torch.Tensor) -> torch.Tensor:
        """``(n,)`` bool: of the off-road egos, those off because they drove past the end
        of the generated lanes (see the module docstring), not beside a lane that goes
        on. Evaluated only for the off-road worlds (rare: the step an episode ends)."""
        out = torch.zeros_like(offroad)
        for b in torch.nonzero(offroad).flatten().tolist():
            out[b] = _past_the_lanes(self.sim, b)
        return out

    def observe(self) -> dict[str, torch.Tensor]:
        sim = self.sim
        lane = sim._ego_lane
        r = torch.arange(self.n, device=self.device)
        ego = torch.stack(
            [
                sim.v[:, 0],
                sim.accel[:, 0],
                self.steer.to(sim.dtype),
                sim._ego_offset,
                sim._ego_heading_err,
                sim.lane_width[r, lane],
                sim.lane_speed[r, lane],
                (sim.driven / self.route_length).clamp(0, 1).to(sim.dtype),
            ],
            -1,
        )
        agents, agents_mask = observe_agents(
            torch.stack([sim.x, sim.y, sim.theta, sim.v, sim.length, sim.width], -1),
            sim.valid,
            self.num_agents,
        )
        # the num_lanes lanes nearest the ego (by 5 of their 20 points)
        ex, ey, eth = sim.x[:, 0], sim.y[:, 0], sim.theta[:, 0]
        samples = sim.lane_points[:, :, ::5]
        d = (samples[..., 0] - ex[:, None, None]) ** 2 + (samples[..., 1] - ey[:, None, None]) ** 2
        d = torch.where(sim.lane_valid, d.amin(-1), torch.full_like(d[..., 0], float("inf")))
        kl = min(self.num_lanes, sim.L)
        dk, ids = d.topk(kl, dim=1, largest=False)
        pts = torch.gather(
            sim.lane_points, 1, ids[..., None, None].expand(-1, -1, *sim.lane_points.shape[2:])
        )
        lanes, lanes_mask = observe_lanes(pts, torch.isfinite(dk), ex, ey, eth, self.num_lanes)
        return {
            "ego": ego.float(),
            "agents": agents,
            "agents_mask": agents_mask,
            "lanes": lanes,
            "lanes_mask": lanes_mask,
        }

    def info(self, collided=None, offroad=None) -> dict[str, torch.Tensor]:
        sim = self.sim
        out = {
            "route_s": sim.driven.clone(),
            "distance": sim.driven.clone(),
            "speed": sim.v[:, 0].to(torch.float64),
            "t": self.steps.to(torch.float64) * 0.1,
        }
        if collided is not None:
            out["collision"] = collided
            out["offroad"] = offroad
        return out

    def success_distance(self, i: int) -> float:
        return self.max_distance

    def frame(self, i: int) -> np.ndarray:
        from simsci.envs._driving_render import top_down

        agents, valid = self.sim.agents()
        return top_down(self.sim.road_view(i), agents[i].cpu().numpy(), valid[i].cpu().numpy())


def _past_the_lanes(sim, b: int) -> bool:
    """True when world ``b``'s ego is outside the generated lanes' extent: no lane of its
    direction at all, or nearest to the end of its lane's run in its direction (the next
    segment turns back, or there is none and no successor; the start of a run likewise)
    and within the lane's half width + ``OFFROAD_MARGIN`` of its line, so it would be on
    the lane had the lane gone on. The geometry is the world's own ego-lane association
    (the nearest segment of a lane agreeing with the ego's heading), in float64."""
    p = torch.stack([sim.x[b, 0], sim.y[b, 0]]).double()
    th = float(sim.theta[b, 0])
    pts = sim.lane_points[b].double()  # L, P, 2
    a, d = pts[:, :-1], pts[:, 1:] - pts[:, :-1]
    seg2 = (d * d).sum(-1)
    tangent = d / seg2.clamp(min=1e-12).sqrt()[..., None]
    agree = tangent[..., 0] * np.cos(th) + tangent[..., 1] * np.sin(th) > 0
    usable = sim.lane_valid[b][:, None] & agree & (seg2 > 1e-6)
    if not bool(usable.any()):
        return True  # nothing generated to drive on in its direction
    r = p - a
    u = (r * d).sum(-1) / seg2.clamp(min=1e-12)
    near = a + u.clamp(0, 1)[..., None] * d
    dist = torch.where(usable, (p - near).norm(dim=-1), torch.full_like(u, float("inf")))
    lane, seg = divmod(int(dist.flatten().argmin()), dist.shape[1])
    t = tangent[lane, seg]
    lateral = abs(float(t[0] * r[lane, seg, 1] - t[1] * r[lane, seg, 0]))
    if lateral > 0.5 * float(sim.lane_width[b, lane]) + OFFROAD_MARGIN:
        return False  # beside the lane (or off the outside of its bend)
    valid, succ = sim.lane_valid[b], sim.lane_succ[b]  # succ: (L, 2), -1 for none
    real = torch.nonzero(seg2[lane] > 1e-6).flatten().tolist()  # the lane's real segments
    k = real.index(seg)
    if float(u[lane, seg]) > 1.0:  # beyond the segment's end: does the lane go on its way?
        if k + 1 < len(real):
            return not bool(agree[lane, real[k + 1]])  # turns back: it ends for the ego
        nxt = succ[lane][succ[lane] >= 0]
        return not bool(valid[nxt].any())
    if float(u[lane, seg]) < 0.0:  # before the segment's start: does the lane come its way?
        if k > 0:
            return not bool(agree[lane, real[k - 1]])
        return not bool((succ[valid] == lane).any())
    return False


class VectorWorldVectorEnv(DrivingVectorEnv):
    """``num_envs`` egos in ``simsci/VectorWorld-v1``, stepped as one batch (see the module
    docstring): reset/step/render and autoreset are those of ``simsci/Driving-v0``'s
    vector environment, over the generated world."""

    metadata: dict[str, Any] = dict(DrivingVectorEnv.metadata)

    def __init__(
        self,
        num_envs: int = 1,
        *,
        checkpoint=None,
        route_length: float = 5000.0,
        max_distance: float | None = None,
        max_episode_steps: int = 1200,
        num_agents: int = 16,
        num_lanes: int = 8,
        max_vehicles: int = 32,
        max_tiles: int = 6,
        shaping: bool = True,
        tile_steps: int = 1,
        first_steps: int = 16,
        opening_bank: int | None = None,
        complete: bool = True,
        tile_agents: str = "generator",
        npc_yield: bool = True,
        device=None,
        action_bounds: str = "clip",
        action_scale: str = "physical",
        observation: str = "dict",
        array_backend: str = "numpy",
        autoreset_mode="NextStep",
        render_mode=None,
    ):
        mode = check_vector_options(num_envs, array_backend, autoreset_mode)
        check_driving_options(action_bounds, action_scale, observation)
        self.render_mode = _check_render_mode(render_mode)
        self.world = _Stream(
            int(num_envs),
            checkpoint=checkpoint,
            route_length=route_length,
            max_distance=max_distance,
            max_episode_steps=max_episode_steps,
            num_agents=num_agents,
            num_lanes=num_lanes,
            max_vehicles=max_vehicles,
            max_tiles=max_tiles,
            shaping=shaping,
            tile_steps=tile_steps,
            first_steps=first_steps,
            opening_bank=opening_bank,
            complete=complete,
            tile_agents=tile_agents,
            npc_yield=npc_yield,
            device=device,
        )
        self._finish_init(
            ENV_ID,
            num_envs,
            num_agents,
            num_lanes,
            action_bounds,
            action_scale,
            observation,
            array_backend,
            mode,
        )


class VectorWorldEnv(DrivingEnv):
    """One ego in ``simsci/VectorWorld-v1`` (numpy in/out): a vector environment of one.
    ``info``: route_s (= distance), distance, speed, t, collision, offroad, and
    ``end_reason`` on the step that ends the episode (see the module docstring)."""

    @staticmethod
    def _vector_class():
        return VectorWorldVectorEnv
