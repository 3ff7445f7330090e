"""``simsci/Driving-v0``: drive an ego car along a procedural route through IDM/MOBIL traffic.

Description
    The ego is a kinematic bicycle (:func:`simsci.driving.bicycle_step`) on a
    procedurally generated road network (multi-lane roads, curves, merges, splits,
    signal-free intersections, roundabouts) with batched IDM/MOBIL traffic around it.
    It should follow its route as far as it can without colliding or leaving its
    carriageway. Every episode draws one network from a pool of ``num_roads`` networks
    (seeded by ``road_seed``) and, with ``random_params``, its traffic parameters.
    ``gymnasium.make_vec("simsci/Driving-v0", num_envs=N,
    vectorization_mode="vector_entry_point")`` steps N egos as one tensor operation.

Action space
    ``action_scale="physical"`` (the default): ``Box([-8, -0.5], [4, 0.5])``,
    acceleration [m/s^2] and front-wheel steering angle [rad]. Every action in the box
    is kinematically feasible (|a| <= 10.4 m/s^2, path curvature <= 0.2 1/m).
    ``action_scale="normalized"``: ``Box(-1, 1, (2,))``, mapped affinely onto that box
    (-1 -> the lower bound, +1 -> the upper, 0 -> (-2 m/s^2, 0 rad): the centre of the
    box, not zero acceleration) before the step, as Stable Baselines3 and most PPO/SAC
    code expect (:func:`physical_actions` / :func:`normalized_actions` convert). Out-of-box
    actions are clipped (``action_bounds="clip"``) or rejected (``"error"``) in the
    scale the environment takes; NaN/inf is always an error. The ego's ``accel`` and
    ``steer`` observations, the reward and ``info`` are physical under either scale.

    Physical is the default because it is what v0 has always taken: checkpoints trained
    on it (``simsci driving ppo``), :func:`lane_keeping_policy`, :func:`evaluate_driving
    <simsci.envs.evaluate_driving>` and recorded rollouts all speak physical units, and a
    rollout file (:class:`~simsci.envs.RecordEpisodes`, :func:`~simsci.envs.to_minari`)
    stores the actions as the environment took them, stating the scale in its meta (its
    ``action_space`` bounds, and ``env_kwargs["action_scale"]`` when it was given): a file
    without the key is physical, whether written before the option existed or after.

Observation space
    ``observation="dict"`` (the default): a ``Dict`` of fixed-size padded arrays in the
    ego frame (x forward, y left), float32:

    - ``ego`` (8,): speed, acceleration, steering angle, lateral offset from the lane
      centre, heading error to the lane, lane width, speed limit, fraction of the route
      driven;
    - ``agents`` (num_agents, 7): the nearest other vehicles [x, y, speed, cos, sin,
      length, width] (relative heading), ``agents_mask`` (num_agents,) 1 where real;
    - ``lanes`` (num_lanes, 20, 2): the nearest lane centrelines, 20 points each,
      ``lanes_mask`` (num_lanes,).

    ``observation="flat"``: one float32 ``Box`` of ``D = 8 num_agents + 8 + 41
    num_lanes`` entries (464 by default), the Dict's entries each flattened (C order) and
    concatenated in the order of :data:`FLAT_ORDER`: ``agents`` (7 num_agents),
    ``agents_mask`` (num_agents), ``ego`` (8), ``lanes`` (40 num_lanes), ``lanes_mask``
    (num_lanes). That is gymnasium's order for the Dict (sorted keys), so the vector is
    ``gymnasium.spaces.flatten`` of the Dict observation, as
    ``gymnasium.wrappers.FlattenObservation`` gives it; the bounds are the entries'. RL
    libraries take it without warnings (Stable Baselines3 reads the Dict's ``lanes``
    (num_lanes, 20, 2) as an image), and :class:`~simsci.envs.RecordEpisodes` records it.
    ``env.single_dict_observation_space`` (vector) / ``env.dict_observation_space``
    (single) is the Dict either way (``gymnasium.spaces.unflatten`` turns one flat
    observation back into it). With the Dict, ``env.obs_names`` names the last axis of
    ``ego``, ``agents`` and ``lanes`` (:data:`OBS_NAMES`); :class:`~simsci.envs.RecordEpisodes`
    records the Dict as one step field per entry (``x.ego``, ``x.agents``, ...) with
    these names, and :func:`~simsci.envs.rollout_observations` reads it back.

Reward
    ``0.1 * progress`` (metres along the route this step) ``- 0.02 * (jerk / 10)^2``;
    ``-20`` on a collision or leaving the road (and the episode ends).

Termination and truncation
    Terminated on a collision (the ego's box overlaps another vehicle's) or off-road
    (the ego's centre more than 0.5 m beyond its lane's edge: oncoming lanes count as
    off the carriageway). Truncated after ``max_distance`` m along the route (default:
    the route length less 200 m) or ``max_episode_steps`` steps (default 1200, 120 s).
    The step that ends an episode says why in ``info["end_reason"]`` (see Info).

Info
    ``route_s``, ``distance`` [m], ``speed`` [m/s], ``t`` [s]; after a step also
    ``collision`` and ``offroad`` (bool), and, on the step that ends the episode,
    ``end_reason``: "collision", "offroad" (terminated; a collision wins when both),
    "distance" (truncated: drove ``max_distance``) or "time_limit" (truncated:
    ``max_episode_steps``); :data:`END_REASONS` lists them. The vector environment
    gives ``end_reason`` as a numpy array of str for either ``array_backend`` ("" for a
    sub-environment still running) with the mask ``_end_reason`` (True where the episode
    ended this step); the single environment has the key only on the step that ends it.

Version history
    v0: initial version. Later, without a change to dynamics or reward: ``info`` gains
    ``end_reason``; the keywords ``action_scale`` and ``observation`` (their defaults
    are the v0 spaces); ``obs_names`` (names of the Dict entries' last axes).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from simsci.envs._core import (
    _check_render_mode,
    _seed_from,
    check_actions,
    check_vector_options,
    own_spec,
    reset_index,
)

__all__ = [
    "DrivingEnv",
    "DrivingVectorEnv",
    "ENV_ID",
    "END_REASONS",
    "ACTION_SCALES",
    "OBSERVATIONS",
    "FLAT_ORDER",
    "lane_keeping_policy",
    "physical_actions",
    "normalized_actions",
]

ENV_ID = "simsci/Driving-v0"
ACTION_LOW = np.array([-8.0, -0.5], dtype=np.float32)
ACTION_HIGH = np.array([4.0, 0.5], dtype=np.float32)
# the affine map between the normalised box [-1, 1]^2 and [ACTION_LOW, ACTION_HIGH]:
# physical = centre + half_width * normalised (float32; exact at -1, 0 and +1)
_ACTION_CENTRE = (ACTION_HIGH + ACTION_LOW) / 2
_ACTION_HALF_WIDTH = (ACTION_HIGH - ACTION_LOW) / 2
_NORMALIZED_LOW = np.full(2, -1.0, dtype=np.float32)
_NORMALIZED_HIGH = np.full(2, 1.0, dtype=np.float32)
#: ``action_scale``: the units of the actions the driving environments take
ACTION_SCALES = ("physical", "normalized")
#: ``observation``: the Dict of padded arrays, or one flat float32 vector of its entries
OBSERVATIONS = ("dict", "flat")
#: the order of the Dict entries in the flat observation: gymnasium's own for the Dict
#: (sorted keys), so the flat vector equals ``gymnasium.spaces.flatten`` of the Dict one
FLAT_ORDER = ("agents", "agents_mask", "ego", "lanes", "lanes_mask")
EGO_FEATURES = (
    "speed",
    "accel",
    "steer",
    "lateral_offset",
    "heading_error",
    "lane_width",
    "speed_limit",
    "route_fraction",
)
#: the features of an observed agent (the ``agents`` entry's last axis)
AGENT_OBS_FEATURES = ("x", "y", "speed", "cos", "sin", "length", "width")
LANE_POINTS = 20
#: names of the last axis of the Dict entries (``env.obs_names`` with observation="dict";
#: a recorded rollout keeps them as the names of its step fields x.ego, x.agents, x.lanes)
OBS_NAMES = {"ego": EGO_FEATURES, "agents": AGENT_OBS_FEATURES, "lanes": ("x", "y")}
PROGRESS_REWARD = 0.1
JERK_PENALTY = 0.02
FAILURE_REWARD = -20.0
VIEW = 100.0  # m: agents farther than this are not observed
LANE_REFRESH = 5  # steps between choices of the nearest lanes
#: ``info["end_reason"]`` of both driving worlds: why an episode ended, indexed by the
#: world's ``end_code`` (0: still running). Terminations first, then truncations.
END_REASONS = ("", "collision", "offroad", "left_generated_lanes", "distance", "time_limit")


def end_codes(collided, offroad, reached, timed_out, left_lanes=None) -> torch.Tensor:
    """Why each episode ended, as an index into :data:`END_REASONS` (0: it did not): a
    collision wins over an off-road, a termination over a truncation, the distance over
    the time limit. ``left_lanes``: off-road because the ego left the generated lanes
    (``simsci/VectorWorld-v1`` only)."""
    code = torch.zeros_like(collided, dtype=torch.long)
    code = torch.where(timed_out, END_REASONS.index("time_limit"), code)
    code = torch.where(reached, END_REASONS.index("distance"), code)
    code = torch.where(offroad, END_REASONS.index("offroad"), code)
    if left_lanes is not None:
        code = torch.where(offroad & left_lanes, END_REASONS.index("left_generated_lanes"), code)
    return torch.where(collided, END_REASONS.index("collision"), code)


@functools.lru_cache(maxsize=8)
def _roads(road_seed: int, num_roads: int, route_length: float, options_json: str):
    from simsci.driving import make_road

    options = json.loads(options_json)
    return tuple(
        make_road(seed=road_seed * 1000 + i, length=route_length, **options)
        for i in range(num_roads)
    )


def _dict_space(num_agents: int, num_lanes: int) -> gymnasium.spaces.Dict:
    f32 = np.float32
    inf = np.inf
    return gymnasium.spaces.Dict(
        {
            "ego": gymnasium.spaces.Box(-inf, inf, (len(EGO_FEATURES),), f32),
            "agents": gymnasium.spaces.Box(-inf, inf, (num_agents, 7), f32),
            "agents_mask": gymnasium.spaces.Box(0.0, 1.0, (num_agents,), f32),
            "lanes": gymnasium.spaces.Box(-inf, inf, (num_lanes, LANE_POINTS, 2), f32),
            "lanes_mask": gymnasium.spaces.Box(0.0, 1.0, (num_lanes,), f32),
        }
    )


def flat_observation(obs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The Dict observation ``obs`` (entries ``(n, ...)``) as ``(n, D)``: its entries
    flattened and concatenated in :data:`FLAT_ORDER`."""
    n = obs["ego"].shape[0]
    return torch.cat([obs[k].reshape(n, -1) for k in FLAT_ORDER], dim=1)


def physical_actions(actions):
    """Normalised actions ``(..., 2)`` in [-1, 1] -> physical (acceleration [m/s^2],
    steering [rad]): ``-1`` -> ``[-8, -0.5]``, ``+1`` -> ``[4, 0.5]``, affine between
    (what ``action_scale="normalized"`` applies). numpy or torch in, the same out (float32
    for numpy; a tensor keeps its dtype and device). No clipping."""
    if isinstance(actions, torch.Tensor):
        centre = torch.as_tensor(_ACTION_CENTRE, dtype=actions.dtype, device=actions.device)
        half = torch.as_tensor(_ACTION_HALF_WIDTH, dtype=actions.dtype, device=actions.device)
        return centre + half * actions
    return _ACTION_CENTRE + _ACTION_HALF_WIDTH * np.asarray(actions, dtype=np.float32)


def normalized_actions(actions):
    """Physical actions ``(..., 2)`` (acceleration [m/s^2], steering [rad]) -> the
    normalised scale of ``action_scale="normalized"``: the inverse of
    :func:`physical_actions` (e.g. to drive :func:`lane_keeping_policy` in such an
    environment). numpy or torch in, the same out. No clipping."""
    if isinstance(actions, torch.Tensor):
        centre = torch.as_tensor(_ACTION_CENTRE, dtype=actions.dtype, device=actions.device)
        half = torch.as_tensor(_ACTION_HALF_WIDTH, dtype=actions.dtype, device=actions.device)
        return (actions - centre) / half
    return (np.asarray(actions, dtype=np.float32) - _ACTION_CENTRE) / _ACTION_HALF_WIDTH


def check_driving_options(action_bounds, action_scale, observation) -> None:
    """Validate the front-end keywords of both driving worlds (before the world is
    built): ``action_bounds``, ``action_scale`` and ``observation``."""
    from simsci.errors import unknown_name

    if action_bounds not in ("clip", "error"):
        raise ValueError(f"action_bounds must be 'clip' or 'error', got {action_bounds!r}")
    for what, value, valid in (
        ("action_scale", action_scale, ACTION_SCALES),
        ("observation", observation, OBSERVATIONS),
    ):
        if not isinstance(value, str):
            raise TypeError(f"{what} must be one of {', '.join(map(repr, valid))}, got {value!r}")
        if value not in valid:
            raise unknown_name(what, value, valid)


def _to_ego_frame(x, y, ex, ey, eth, cs=None):
    """World points ``x, y`` ``(n, ...)`` in the frame of egos at ``(ex, ey)`` heading ``eth``
    ``(n,)`` (x forward, y left); ``cs``: ``(cos(eth), sin(eth))`` when the caller has them."""
    shape = (-1,) + (1,) * (x.dim() - 1)
    dx, dy = x - ex.reshape(shape), y - ey.reshape(shape)
    c, s = (torch.cos(eth), torch.sin(eth)) if cs is None else cs
    c, s = c.reshape(shape), s.reshape(shape)
    return c * dx + s * dy, -s * dx + c * dy


def _ego_near(xy: torch.Tensor, half: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``(n, V - 1)``: the valid vehicles close enough to the ego (slot 0) that their boxes
    might overlap; ``xy`` ``(n, V, 2)`` centres, ``half`` ``(n, V, 2)`` half length and width.

    Boxes overlap only if the centre offset projects to less than the summed radii on both
    of the ego's axes, r1 <= hl_a + hl_b + hw_b and r2 <= hw_a + hl_b + hw_b, so then
    |d|^2 = p1^2 + p2^2 < r1^2 + r2^2; 10% and 1 m^2 more cover rounding."""
    reach = half[:, 1:].sum(-1, keepdim=True) + half[:, :1]  # (n, V - 1, 2): r1, r2 bounds
    d2 = (xy[:, 1:] - xy[:, :1]).pow(2).sum(-1)
    return valid[:, 1:] & (d2 < 1.1 * reach.pow(2).sum(-1) + 1.0)


def ego_collisions(agents: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``(n,)`` the ego's box (slot 0 of ``agents`` ``(n, V, 7)``) overlaps another valid
    vehicle's; tested in ego-relative coordinates (exact in float32 far from the origin)."""
    # with no valid vehicle close enough to touch the ego, the separating-axis test
    # cannot find an overlap: skip it
    if not bool(_ego_near(agents[..., :2], agents[..., 5:7] / 2, valid).any()):
        return torch.zeros(valid.shape[0], dtype=torch.bool, device=valid.device)
    return _ego_overlaps(agents, valid)


def _ego_overlaps(agents: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """:func:`ego_collisions` without its closeness pre-check (the separating-axis test)."""
    from simsci.driving.metrics import _sat

    rel = agents.clone()
    rel[..., :2] = rel[..., :2] - agents[:, :1, :2]
    return (_sat(rel[:, :1], rel[:, 1:]) & valid[:, 1:]).any(1)


def observe_agents(state: torch.Tensor, valid: torch.Tensor, num_agents: int, *, cs=None):
    """The ``agents`` / ``agents_mask`` observation: ``state`` ``(n, V, 6)`` [x, y, theta,
    speed, length, width] with slot 0 the ego, ``valid`` ``(n, V)``. Returns the
    ``num_agents`` nearest other vehicles within ``VIEW`` m as ``(n, num_agents, 7)`` [x, y,
    speed, cos, sin, length, width] in the ego frame (relative heading) and the mask.
    ``state`` may also be the sequence of its six ``(n, V)`` fields; ``cs``: the cosine and
    sine of the egos' headings when the caller has them."""
    n, V = valid.shape
    x, y, th, v, length, width = state.unbind(-1) if torch.is_tensor(state) else state
    ex, ey, eth = x[:, 0], y[:, 0], th[:, 0]
    d2 = (x - ex[:, None]) ** 2 + (y - ey[:, None]) ** 2
    d2 = torch.where(valid, d2, math.inf)
    d2[:, 0] = math.inf
    k = min(num_agents, V - 1)
    dist2, who = d2.topk(k, dim=1, largest=False)
    seen = dist2 < VIEW**2
    g = lambda t: torch.gather(t, 1, who)  # noqa: E731
    ax, ay = _to_ego_frame(g(x), g(y), ex, ey, eth, cs)
    rel_th = g(th) - eth[:, None]
    feats = torch.stack(
        [ax, ay, g(v), torch.cos(rel_th), torch.sin(rel_th), g(length), g(width)], -1
    )
    agents = torch.zeros(n, num_agents, 7, device=x.device)
    agents[:, :k] = torch.where(seen.unsqueeze(-1), feats, 0.0).float()
    mask = torch.zeros(n, num_agents, device=x.device)
    mask[:, :k] = seen.float()
    return agents, mask


def observe_lanes(pts, have, ex, ey, eth, num_lanes: int, *, cs=None):
    """The ``lanes`` / ``lanes_mask`` observation from the chosen lanes ``pts`` ``(n, k,
    20, 2)`` (world frame) and ``have`` ``(n, k)``: their points in the ego frame, padded
    to ``num_lanes`` (``cs``: as for :func:`observe_agents`)."""
    n, kl = have.shape
    lx, ly = _to_ego_frame(pts[..., 0], pts[..., 1], ex, ey, eth, cs)
    lanes = torch.zeros(n, num_lanes, LANE_POINTS, 2, device=pts.device)
    lanes[:, :kl] = torch.where(have[..., None, None], torch.stack([lx, ly], -1), 0.0).float()
    mask = torch.zeros(n, num_lanes, device=pts.device)
    mask[:, :kl] = have.float()
    return lanes, mask


# The world runs hundreds of small tensor operations a step and none of them needs
# gradients: without autograd's bookkeeping a batch of one steps faster (the same kernels,
# so the same numbers). torch's private guard below the ADInplaceOrView key saves ~15%
# more; it was measured and left out, being no public API.


class _World:
    """The batched simulation behind both front ends: traffic, rewards, observations."""

    def __init__(
        self,
        n: int,
        *,
        road_seed: int,
        num_roads: int,
        route_length: float,
        road_options: dict | None,
        traffic: dict | None,
        random_params: bool,
        max_vehicles: int,
        max_distance: float | None,
        max_episode_steps: int,
        num_agents: int,
        num_lanes: int,
        device,
    ):
        from simsci import driving as T

        self.T = T
        for name, value, lo in (
            ("num_roads", num_roads, 1),
            ("max_episode_steps", max_episode_steps, 1),
            ("num_agents", num_agents, 1),
            ("num_lanes", num_lanes, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
                raise ValueError(f"{name} must be an int >= {lo}, got {value!r}")
        if not (isinstance(route_length, (int, float)) and math.isfinite(route_length)):
            raise ValueError(
                f"route_length must be a finite number of metres, got {route_length!r}"
            )
        if route_length < 500:
            raise ValueError(f"route_length must be >= 500 m, got {route_length}")
        if max_distance is None:
            max_distance = route_length - 200.0
        if not (0 < max_distance <= route_length - 100.0):
            raise ValueError(
                f"max_distance {max_distance} m does not fit on a route of {route_length} m: "
                "it must be > 0 and at most the route length less 100 m; ask for a longer "
                "route (route_length=...) or a shorter drive"
            )
        options_json = json.dumps(road_options or {}, sort_keys=True)
        roads = _roads(int(road_seed), int(num_roads), float(route_length), options_json)
        self.pool = T.RoadPool(roads, device=device)
        self.device = self.pool.device
        self.n = int(n)
        self.fixed = dict(traffic or {})
        self.random_params = bool(random_params)
        params = T.default_params(self.n, **self.fixed)  # checks the names
        self.traffic = T.Traffic(
            self.pool, self.n, params=params, max_vehicles=max_vehicles, ego="external"
        )
        self.max_distance = float(max_distance)
        self.max_steps = int(max_episode_steps)
        self.num_agents, self.num_lanes = int(num_agents), int(num_lanes)
        self.steps = torch.zeros(self.n, dtype=torch.long, device=self.device)
        self.start_s = torch.zeros(self.n, device=self.device)
        self.last_s = torch.zeros(self.n, device=self.device)
        self.last_accel = torch.zeros(self.n, device=self.device)
        self.steer = torch.zeros(self.n, device=self.device)
        self.end_code = torch.zeros(self.n, dtype=torch.long, device=self.device)
        self._lane_pts = self._lane_have = None
        self._lane_age = torch.full((self.n,), LANE_REFRESH, dtype=torch.long, device=self.device)
        self.config = {
            "road_seed": int(road_seed),
            "num_roads": int(num_roads),
            "route_length": float(route_length),
            "road_options": dict(road_options or {}),
            "traffic": self.fixed,
            "random_params": self.random_params,
            "max_vehicles": int(max_vehicles),
            "max_distance": self.max_distance,
            "max_episode_steps": self.max_steps,
            "num_agents": self.num_agents,
            "num_lanes": self.num_lanes,
        }
        # a few points per lane to rank lanes by distance to the ego
        k = torch.linspace(0, 1, 5, device=self.device)
        s = self.pool.length.unsqueeze(-1) * k
        nets = torch.arange(self.pool.N, device=self.device)[:, None, None].expand_as(s)
        lanes = torch.arange(self.pool.L, device=self.device)[None, :, None].expand_as(s)
        self.lane_samples, _ = self.pool.point_at(nets, lanes, s)  # N,L,5,2
        real = torch.zeros(self.pool.N, self.pool.L, dtype=torch.bool, device=self.device)
        for i, r in enumerate(self.pool.roads):
            real[i, : len(r.length)] = True
        self.lane_real = real

    @torch.no_grad()
    def reset(self, generator: torch.Generator, index: torch.Tensor | None = None):
        T = self.T
        k = self.n if index is None else int(index.numel())
        if k == 0:
            return
        if self.random_params:
            params = T.sample_params(k, generator, **self.fixed)
        else:
            params = T.default_params(k, **self.fixed)
        nets = torch.randint(self.pool.N, (k,), generator=generator)
        self.traffic.generator.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))
        self.traffic.reset(index, nets=nets, params=params)
        idx = slice(None) if index is None else index
        self.steps[idx] = 0
        self.start_s[idx] = self.traffic.ego_route_s[idx]
        self.last_s[idx] = self.traffic.ego_route_s[idx]
        self.last_accel[idx] = 0.0
        self.steer[idx] = 0.0
        self.end_code[idx] = 0
        self._lane_age[idx] = LANE_REFRESH
        # the distance that truncates each episode (fixed for the episode)
        self._limit = torch.minimum(
            torch.full_like(self.start_s, self.max_distance),
            self.traffic.route_length - self.start_s - 100.0,
        )

    @torch.no_grad()
    def step(self, action: torch.Tensor):
        tr = self.traffic
        tr.step(action)
        self.steps += 1
        self._lane_age += 1
        s = tr.ego_route_s
        progress = s - self.last_s
        self.last_s = s.clone()
        accel = tr.state.accel[:, 0]
        jerk = (accel - self.last_accel) / self.T.DT
        self.last_accel = accel.clone()
        self.steer = action[:, 1].clone()
        collided = self.collisions()
        offroad = tr.ego_offroad()
        terminated = collided | offroad
        driven = s - self.start_s
        reached, timed_out = driven >= self._limit, self.steps >= self.max_steps
        truncated = (reached | timed_out) & ~terminated
        self.end_code = end_codes(collided, offroad, reached, timed_out)
        reward = PROGRESS_REWARD * progress - JERK_PENALTY * (jerk / 10.0).pow(2)
        reward = torch.where(terminated, FAILURE_REWARD, reward)
        return reward, terminated, truncated, collided, offroad

    def collisions(self) -> torch.Tensor:
        st = self.traffic.state
        # most steps nobody is near the ego: skip building the agents' boxes
        xy = torch.stack([st.x, st.y], -1)
        if not bool(_ego_near(xy, torch.stack([st.length, st.width], -1) / 2, st.valid).any()):
            return torch.zeros(self.n, dtype=torch.bool, device=self.device)
        return _ego_overlaps(*self.traffic.agents())  # checked close just above

    @torch.no_grad()
    def observe(self) -> dict[str, torch.Tensor]:
        tr, pool = self.traffic, self.pool
        st = tr.state
        net = tr.net
        lane = st.lane[:, 0]
        ex, ey, eth = st.x[:, 0], st.y[:, 0], st.theta[:, 0]
        # ego features
        tangent = pool.tangent_at(net, lane, st.s[:, 0])
        lane_heading = torch.atan2(tangent[:, 1], tangent[:, 0])
        err = torch.atan2(torch.sin(eth - lane_heading), torch.cos(eth - lane_heading))
        frac = (tr.ego_route_s / tr.route_length).clamp(0, 1)
        ego = torch.stack(
            [
                st.v[:, 0],
                st.accel[:, 0],
                self.steer,
                st.offset[:, 0],
                err,
                pool.width[net, lane],
                pool.speed_limit[net, lane],
                frac,
            ],
            -1,
        )
        # the heading's cosine and sine, shared by both ego frames (the same operation on
        # the same (n,) view as each would do)
        cs = (torch.cos(eth), torch.sin(eth))
        agents, agents_mask = observe_agents(
            (st.x, st.y, st.theta, st.v, st.length, st.width), st.valid, self.num_agents, cs=cs
        )
        # nearest lanes, chosen again every LANE_REFRESH steps (the ego moves ~12 m in
        # that time; the choice costs more than the rest of the observation)
        stale = torch.nonzero(self._lane_age >= LANE_REFRESH).flatten()
        if stale.numel():
            self._select_lanes(stale)
        lanes, lanes_mask = observe_lanes(
            self._lane_pts, self._lane_have, ex, ey, eth, self.num_lanes, cs=cs
        )
        return {
            "ego": ego.float(),
            "agents": agents.float(),
            "agents_mask": agents_mask,
            "lanes": lanes.float(),
            "lanes_mask": lanes_mask,
        }

    def _select_lanes(self, rows: torch.Tensor) -> None:
        """The ``num_lanes`` lanes nearest the ego of scenes ``rows`` (a window of route
        positions, then the distance to 5 points of each lane) and their 20 points."""
        tr, pool = self.traffic, self.pool
        net = tr.net[rows]
        ex, ey = tr.state.x[rows, 0], tr.state.y[rows, 0]
        key = tr.ego_route_s[rows, None]
        near = (pool.lane_key_hi[net] >= key - 60.0) & (pool.lane_key_lo[net] <= key + 100.0)
        near &= self.lane_real[net]
        samples = self.lane_samples[net]  # k,L,5,2
        dl = (samples[..., 0] - ex[:, None, None]) ** 2 + (samples[..., 1] - ey[:, None, None]) ** 2
        dl = torch.where(near, dl.amin(-1), torch.full_like(near, math.inf, dtype=dl.dtype))
        kl = min(self.num_lanes, pool.L)
        dlk, lanes_idx = dl.topk(kl, dim=1, largest=False)
        u = torch.linspace(0, 1, LANE_POINTS, device=self.device)
        s_pts = pool.length[net[:, None], lanes_idx].unsqueeze(-1) * u
        pts = pool.position_at(
            net[:, None, None].expand_as(s_pts), lanes_idx.unsqueeze(-1).expand_as(s_pts), s_pts
        )
        if self._lane_pts is None:
            self._lane_pts = torch.zeros(self.n, kl, LANE_POINTS, 2, device=self.device)
            self._lane_have = torch.zeros(self.n, kl, dtype=torch.bool, device=self.device)
        self._lane_pts[rows] = pts.to(self._lane_pts.dtype)
        self._lane_have[rows] = torch.isfinite(dlk)
        self._lane_age[rows] = 0

    @torch.no_grad()
    def info(self, collided=None, offroad=None) -> dict[str, torch.Tensor]:
        tr = self.traffic
        out = {
            "route_s": tr.ego_route_s.to(torch.float64),
            "distance": (tr.ego_route_s - self.start_s).to(torch.float64),
            "speed": tr.state.v[:, 0].to(torch.float64),
            "t": self.steps.to(torch.float64) * self.T.DT,
        }
        if collided is not None:
            out["collision"] = collided
            out["offroad"] = offroad
        return out

    def success_distance(self, i: int) -> float:
        """The distance [m] episode ``i`` must drive to count as a success."""
        return min(self.max_distance, float(self.traffic.route_length[i]) - 300.0)

    def frame(self, i: int) -> np.ndarray:
        from simsci.envs._driving_render import top_down

        tr = self.traffic
        agents, valid = tr.agents()
        net = int(tr.net[i])
        road = self.pool.roads[net]
        return top_down(road, agents[i].cpu().numpy(), valid[i].cpu().numpy())


def _host(x: torch.Tensor) -> np.ndarray:
    """``x`` as a numpy array: a view of a CPU tensor (what ``x.cpu().numpy()`` gives, without
    a torch operation), else a copy to the host."""
    return x.numpy() if x.device.type == "cpu" else x.cpu().numpy()


def _batch_obs(obs: dict, fn) -> dict:
    return {k: fn(v) for k, v in obs.items()}


class DrivingVectorEnv(gymnasium.vector.VectorEnv):
    """``num_envs`` egos in ``simsci/Driving-v0``, stepped as one batch (see the module
    docstring). ``array_backend``: "numpy" or "torch" (tensors on ``device``);
    ``autoreset_mode``: gymnasium's "NextStep" (default) or "SameStep"; ``action_scale``:
    "physical" (default) or "normalized" actions; ``observation``: "dict" (default, entries
    ``(num_envs, ...)``) or "flat" (``(num_envs, D)``).
    """

    metadata: dict[str, Any] = {
        "render_modes": ["rgb_array"],
        "render_fps": 10,
        "autoreset_mode": AutoresetMode.NEXT_STEP,
    }

    def __init__(
        self,
        num_envs: int = 1,
        *,
        road_seed: int = 0,
        num_roads: int = 4,
        route_length: float = 5000.0,
        road_options: dict | None = None,
        traffic: dict | None = None,
        random_params: bool = False,
        max_vehicles: int = 32,
        max_distance: float | None = None,
        max_episode_steps: int = 1200,
        num_agents: int = 16,
        num_lanes: int = 8,
        device=None,
        action_bounds: str = "clip",
        action_scale: str = "physical",
        observation: str = "dict",
        array_backend: str = "numpy",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        render_mode=None,
    ):
        mode = check_vector_options(num_envs, array_backend, autoreset_mode)
        check_driving_options(action_bounds, action_scale, observation)
        self.render_mode = _check_render_mode(render_mode)
        self.world = _World(
            int(num_envs),
            road_seed=road_seed,
            num_roads=num_roads,
            route_length=route_length,
            road_options=road_options,
            traffic=traffic,
            random_params=random_params,
            max_vehicles=max_vehicles,
            max_distance=max_distance,
            max_episode_steps=max_episode_steps,
            num_agents=num_agents,
            num_lanes=num_lanes,
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

    def _finish_init(
        self,
        env_id,
        num_envs,
        num_agents,
        num_lanes,
        action_bounds,
        action_scale,
        observation,
        array_backend,
        mode,
    ) -> None:
        """Spaces, autoreset state and spec around ``self.world`` (shared with
        ``simsci/VectorWorld-v1``, whose world differs but whose spaces do not); the
        keywords were checked by :func:`check_driving_options`."""
        self.num_envs = int(num_envs)
        self.action_bounds = action_bounds
        self.action_scale = action_scale
        self.observation = observation
        self.array_backend = array_backend
        self.autoreset_mode = mode
        self.metadata = {**type(self).metadata, "autoreset_mode": mode}
        self.single_dict_observation_space = _dict_space(num_agents, num_lanes)
        # names of the entries' last axes; the flat vector has none
        self.obs_names = dict(OBS_NAMES) if observation == "dict" else None
        if observation == "flat":
            # gymnasium's flattening of the Dict: the bounds in the order of FLAT_ORDER
            self.single_observation_space = gymnasium.spaces.flatten_space(
                self.single_dict_observation_space
            )
        else:
            self.single_observation_space = self.single_dict_observation_space
        if action_scale == "normalized":
            self._action_low, self._action_high = _NORMALIZED_LOW, _NORMALIZED_HIGH
        else:
            self._action_low, self._action_high = ACTION_LOW, ACTION_HIGH
        self.single_action_space = gymnasium.spaces.Box(
            self._action_low, self._action_high, dtype=np.float32
        )
        self.observation_space = gymnasium.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )
        self.action_space = gymnasium.vector.utils.batch_space(
            self.single_action_space, self.num_envs
        )
        self._generator = torch.Generator(device="cpu")
        self._autoreset = torch.zeros(self.num_envs, dtype=torch.bool, device=self.world.device)
        self._was_reset = False
        own_spec(
            self,
            env_id,
            {
                **self.world.config,
                "action_bounds": action_bounds,
                "action_scale": action_scale,
                "observation": observation,
                "array_backend": array_backend,
                "autoreset_mode": mode.value,
            },
        )

    def _observe(self):
        """The world's observation in this environment's layout: the Dict of ``(n,
        ...)`` tensors, or ``(n, D)`` (see :data:`FLAT_ORDER`)."""
        obs = self.world.observe()
        return flat_observation(obs) if self.observation == "flat" else obs

    def _physical(self, actions, batch: int | None) -> torch.Tensor:
        """``(n, 2)`` physical actions on the world's device from the user's actions
        (``(2,)`` with ``batch`` None, else ``(batch, 2)``), checked and clipped in the
        scale this environment takes."""
        a = check_actions(
            actions,
            batch=batch,
            low=self._action_low,
            high=self._action_high,
            mode=self.action_bounds,
            device=self.world.device,
            dtype=torch.float32,
        )
        return physical_actions(a) if self.action_scale == "normalized" else a

    def _out(self, x):
        if isinstance(x, dict):
            return {k: self._out(v) for k, v in x.items()}
        return x if self.array_backend == "torch" else x.cpu().numpy()

    def _infos(self, extra=None) -> dict:
        info = self.world.info(*(extra or ()))
        ones = np.ones(self.num_envs, dtype=bool)
        out = {}
        for k, v in info.items():
            out[k] = self._out(v)
            out["_" + k] = ones
        if extra is not None:  # after a step: why the episodes that ended, ended
            code = self.world.end_code.cpu().numpy()
            out["end_reason"] = np.asarray(END_REASONS)[code]
            out["_end_reason"] = code > 0
        return out

    def reset(self, *, seed=None, options=None):
        index = reset_index(options, self.num_envs, self._autoreset.device, self._was_reset)
        if seed is not None:
            self._generator.manual_seed(_seed_from(seed))
        elif not self._was_reset:
            self._generator.manual_seed(int(np.random.SeedSequence().generate_state(1)[0]))
        self.world.reset(self._generator, index)
        self._autoreset[slice(None) if index is None else index] = False
        self._was_reset = True
        return self._out(self._observe()), self._infos()

    def step(self, actions):
        if not self._was_reset:
            raise gymnasium.error.ResetNeeded("call reset() before step() on a vector environment")
        w = self.world
        a = self._physical(actions, self.num_envs)
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            resetting = self._autoreset
            reward, term, trunc, coll, off = w.step(a)
            index = torch.nonzero(resetting).flatten()
            if index.numel():
                w.reset(self._generator, index)
                reward = torch.where(resetting, 0.0, reward)
                term, trunc = term & ~resetting, trunc & ~resetting
                coll, off = coll & ~resetting, off & ~resetting
            self._autoreset = term | trunc
            infos = self._infos((coll, off))
            obs = self._observe()
        else:
            reward, term, trunc, coll, off = w.step(a)
            done = term | trunc
            index = torch.nonzero(done).flatten()
            extra = {}
            if index.numel():
                done_np = done.cpu().numpy()
                final_obs = self._out(self._observe())
                final_info = self._infos((coll, off))
                w.reset(self._generator, index)
                extra = {
                    "final_obs": final_obs,
                    "_final_obs": done_np,
                    "final_info": final_info,
                    "_final_info": done_np,
                }
            infos = {**self._infos((coll, off)), **extra}
            obs = self._observe()
        dtype = torch.float32 if self.array_backend == "torch" else torch.float64
        return self._out(obs), self._out(reward.to(dtype)), self._out(term), self._out(trunc), infos

    def render(self):
        """A tuple of ``(H, W, 3)`` uint8 top-down frames, one per ego."""
        if self.render_mode is None:
            return None
        if not self._was_reset:
            raise gymnasium.error.ResetNeeded("call reset() before render()")
        return tuple(self.world.frame(i) for i in range(self.num_envs))


class DrivingEnv(gymnasium.Env):
    """One ego in ``simsci/Driving-v0`` (numpy in/out): a vector environment of one, so
    the two cannot disagree. ``action_scale``: "physical" (default) or "normalized"
    actions; ``observation``: "dict" (default) or "flat" (one ``(D,)`` vector). ``info``:
    route_s, distance, speed, t, collision, offroad, and ``end_reason`` on the step that
    ends the episode (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, *, render_mode=None, **kwargs):
        for bad in ("num_envs", "array_backend", "autoreset_mode"):
            if bad in kwargs:
                raise TypeError(f"DrivingEnv takes no {bad!r} (use gymnasium.make_vec)")
        self.render_mode = _check_render_mode(render_mode)
        self._vec = self._vector_class()(1, render_mode=render_mode, **kwargs)
        self.observation_space = self._vec.single_observation_space
        self.dict_observation_space = self._vec.single_dict_observation_space
        self.obs_names = self._vec.obs_names
        self.action_space = self._vec.single_action_space
        self.action_scale = self._vec.action_scale
        self.observation = self._vec.observation
        self._needs_reset = True
        own_spec(
            self,
            self._vec.spec.id,
            {
                **self._vec.world.config,
                "action_bounds": self._vec.action_bounds,
                "action_scale": self.action_scale,
                "observation": self.observation,
            },
        )

    @staticmethod
    def _vector_class():
        return DrivingVectorEnv

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is None and self._needs_reset and not self._vec._was_reset:
            seed = int(self.np_random.integers(2**62))
        if seed is not None:
            self._vec._generator.manual_seed(_seed_from(seed))
        if options:
            raise ValueError(f"reset options are not supported, got {sorted(options)}")
        w = self._vec.world
        w.reset(self._vec._generator)
        self._vec._was_reset = True
        self._needs_reset = False
        return self._single(self._vec._observe()), self._single_info(w.info())

    @staticmethod
    def _single(obs):
        if isinstance(obs, dict):
            return {k: _host(v)[0] for k, v in obs.items()}
        return _host(obs)[0]

    @staticmethod
    def _single_info(info):
        return {
            k: (bool(_host(v)[0]) if v.dtype == torch.bool else float(_host(v)[0]))
            for k, v in info.items()
        }

    def step(self, action):
        if self._needs_reset:
            raise gymnasium.error.ResetNeeded(
                "the episode has ended (terminated or truncated) or the environment was "
                "never reset: call env.reset() before env.step()"
            )
        a = self._vec._physical(action, None)
        w = self._vec.world
        reward, term, trunc, coll, off = w.step(a)
        t, tr = bool(_host(term)[0]), bool(_host(trunc)[0])
        self._needs_reset = t or tr
        info = self._single_info(w.info(coll, off))
        code = int(_host(w.end_code)[0])
        if code:
            info["end_reason"] = END_REASONS[code]
        return self._single(self._vec._observe()), float(_host(reward)[0]), t, tr, info

    def render(self):
        """An ``(H, W, 3)`` uint8 top-down frame around the ego."""
        if self.render_mode is None:
            gymnasium.logger.warn(
                "render() called with render_mode=None; pass render_mode='rgb_array'"
            )
            return None
        if self._needs_reset and not self._vec._was_reset:
            raise gymnasium.error.ResetNeeded("call reset() before render()")
        return self._vec.world.frame(0)


#: the lane-keeping driver's path: half the ego's width plus a margin (m) either side of
#: the arc it steers along, as far ahead as a box is checked (m)
PATH_HALF_WIDTH = 0.5 * 1.9 + 0.3
PATH_AHEAD = 40.0


#: the ego's rear axle to its centre [m] (bicycle_step's l_r: 0.3 x its 4.6 m length)
_EGO_LR = 0.3 * 4.6


def _path_coords(x: np.ndarray, y: np.ndarray, steer: np.ndarray):
    """Points ``(x, y)`` (..., ego frame) in the coordinates of the path the ego's centre
    takes at steering ``steer`` ``(n,)`` held (the kinematic bicycle of
    :func:`simsci.driving.bicycle_step`): ``(s, d)``, the arc length along it and the
    signed distance from it (left +). That path is the circle of signed radius ``R =
    l_r / sin(beta)`` through the ego's centre, tangent to its velocity (heading +
    slip ``beta = atan(tan(steer) / 2)``), centred at ``(-l_r, R cos(beta))``; a straight
    line along ``beta`` when nearly straight."""
    shape = (-1,) + (1,) * (x.ndim - 1)
    beta = np.arctan(0.5 * np.tan(steer)).reshape(shape)
    sin_b, cos_b = np.sin(beta), np.cos(beta)
    # straight: rotate by beta
    s_line = x * cos_b + y * sin_b
    d_line = -x * sin_b + y * cos_b
    kappa = sin_b / _EGO_LR
    bent = np.abs(kappa) > 1e-4
    radius = np.where(bent, _EGO_LR / np.where(bent, sin_b, 1.0), np.inf)  # signed
    cy = np.where(bent, radius * cos_b, 0.0)
    ux, uy = x + _EGO_LR, y - cy  # from the centre of the circle
    dist = np.hypot(ux, uy)
    # the angle swept from the ego (at (_EGO_LR, -cy) from the centre) to the point
    phi = np.arctan2(_EGO_LR * uy + cy * ux, _EGO_LR * ux - cy * uy)
    r = np.where(bent, radius, 1.0)
    s_arc = r * phi
    d_arc = np.sign(r) * (np.abs(r) - dist)
    return np.where(bent, s_arc, s_line), np.where(bent, d_arc, d_line)


#: a box's corners in order around it, in its own frame (half lengths, half widths)
_BOX_CORNERS = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, -1.0], [-1.0, 1.0]])


def _box_points(agents: np.ndarray, unit: np.ndarray):
    """The points ``unit`` ``(P, 2)`` of each agent's box (``(..., 7)``; in half lengths
    and half widths of its own frame) in the agents' frame: ``(px, py)``, each
    ``(..., P)``."""
    x, y, c, s = (agents[..., k, None] for k in (0, 1, 3, 4))
    hl, hw = 0.5 * agents[..., 5, None], 0.5 * agents[..., 6, None]
    ux, uy = unit[:, 0], unit[:, 1]
    return x + ux * hl * c - uy * hw * s, y + ux * hl * s + uy * hw * c


def _path_span(agents: np.ndarray, steer: np.ndarray, ahead: float = PATH_AHEAD):
    """The bumper gaps ``(near, far)``, each ``(n, m)``, from the ego (its front, 2.3 m
    ahead of its centre) to the nearest and farthest parts of each agent's box inside
    the ego's path: the band of :data:`PATH_HALF_WIDTH` around the path its centre
    takes at steering ``steer`` ``(n,)`` held (:func:`_path_coords`), up to ``ahead``
    metres along it; ``inf`` (both) where the box misses it or lies wholly behind the
    ego's centre. Boxes are taken to path coordinates corner by corner, then clipped to
    the band: the nearest point is a corner inside it or where an edge crosses its
    border."""
    px, py = _box_points(agents, _BOX_CORNERS)
    cx, d = _path_coords(px, py, steer)
    h = PATH_HALF_WIDTH
    near = np.where(np.abs(d) <= h, cx, np.inf).min(-1)
    far = np.where(np.abs(d) <= h, cx, -np.inf).max(-1)
    x1, d1 = np.roll(cx, -1, -1), np.roll(d, -1, -1)
    for level in (h, -h):
        crosses = (d - level) * (d1 - level) < 0
        t = np.where(crosses, (level - d) / np.where(crosses, d1 - d, 1.0), 0.0)
        at = cx + t * (x1 - cx)
        near = np.minimum(near, np.where(crosses, at, np.inf).min(-1))
        far = np.maximum(far, np.where(crosses, at, -np.inf).max(-1))
    inside = (far > 0) & (near < ahead)
    return np.where(inside, near - 2.3, np.inf), np.where(inside, far - 2.3, np.inf)


def _path_gap(agents: np.ndarray, steer: np.ndarray) -> np.ndarray:
    """The bumper gap ``(n, m)`` to each agent's box in the ego's path (the ``near`` of
    :func:`_path_span`); ``inf`` where it is not in the path."""
    return _path_span(agents, steer)[0]


#: the lane-keeping driver's look at traffic crossing its way: each moving car not going
#: its way is carried at its speed and its heading to the ego's arc for up to
#: CONFLICT_HORIZON s (swept over steps of CONFLICT_STEP s); where its box is in the
#: ego's path while the ego would be there too (CONFLICT_MARGIN m either end of the ego),
#: it is braked for at that point
CONFLICT_HORIZON = 4.0
CONFLICT_STEP = 0.25
CONFLICT_MARGIN = 2.0
#: the driver's IDM: minimum gap [m], time headway [s], acceleration, comfortable
#: deceleration [m/s^2]
DRIVER_IDM = (2.0, 1.2, 1.5, 2.0)


def _ego_travel(v: np.ndarray, limit: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """``(2, n, k)`` how far the ego goes in ``taus`` ``(k,)`` s from speed ``v`` ``(n,)``:
    at that speed, and speeding up at the IDM's acceleration to ``max(v, limit)``."""
    a = DRIVER_IDM[2]
    top = np.maximum(v, limit)[:, None]
    v0 = v[:, None]
    t1 = (top - v0) / a  # when it reaches the top speed
    t = taus[None, :]
    ramp = np.where(t <= t1, v0 * t + 0.5 * a * t**2, v0 * t1 + 0.5 * a * t1**2 + top * (t - t1))
    return np.stack([np.broadcast_to(v0 * t, ramp.shape), ramp])


def _arc_frame(agents: np.ndarray, steer: np.ndarray):
    """Each agent ``(n, m, 7)`` on the arc the ego steers along (``steer`` ``(n,)``,
    :func:`_path_coords`): ``(s, d, phi)``, each ``(n, m)``: its centre's arc length and
    signed offset, and its heading to the arc's direction there (the arc turns by its
    curvature ``sin(beta) / l_r`` per metre from the slip ``beta``)."""
    s, d = _path_coords(agents[..., 0], agents[..., 1], steer)
    beta = np.arctan(0.5 * np.tan(steer))[:, None]
    phi = np.arctan2(agents[..., 4], agents[..., 3]) - (beta + np.sin(beta) / _EGO_LR * s)
    return s, d, phi


def _conflict_gap(agents, candidates, v, limit, frame) -> np.ndarray:
    """The bumper gap ``(n, m)`` to where each of the ``candidates`` ``(n, m)`` (moving
    cars not going the ego's way) would meet the ego's path while the ego is there;
    ``inf`` where no meeting is predicted. Both move in the coordinates of the ego's path
    (``frame``: the agents' :func:`_arc_frame` on the arc the ego steers along): the car keeps
    its speed and its heading *to the arc where it is*, so a car following a road that
    bends as the arc does keeps its distance from it (carried straight on, an oncoming
    car on a bend would cut across it); its box is swept over each
    :data:`CONFLICT_STEP` s, so a fast one is not stepped over. The ego goes along the
    arc at its speed ``v`` ``(n,)`` or speeding up towards ``limit`` (:func:`_ego_travel`:
    a stopped ego at a crossing is about to move off); up to :data:`CONFLICT_HORIZON` s.
    The gap is the nearest part of the car's box in the path band at a step where they
    meet."""
    taus = CONFLICT_STEP * np.arange(1, round(CONFLICT_HORIZON / CONFLICT_STEP) + 1)
    s0, d0, phi = frame
    c, s = np.abs(np.cos(phi)), np.abs(np.sin(phi))
    speed, length, width = agents[..., 2], agents[..., 5], agents[..., 6]
    sweep = speed * CONFLICT_STEP
    along = 0.5 * (length * c + width * s + sweep * c)  # the swept box's half extents
    side = 0.5 * (length * s + width * c + sweep * s)
    mid = (taus - 0.5 * CONFLICT_STEP)[None, :, None]  # each step's middle, (1, k, 1)
    at_s = s0[:, None] + speed[:, None] * mid * np.cos(phi)[:, None]  # (n, k, m)
    at_d = d0[:, None] + speed[:, None] * mid * np.sin(phi)[:, None]
    near = at_s - along[:, None] - 2.3  # from the ego's bumper
    far = at_s + along[:, None] - 2.3
    in_band = (np.abs(at_d) <= PATH_HALF_WIDTH + side[:, None]) & (far > -2.3) & (near < VIEW)
    front = _ego_travel(v, limit, taus).transpose(1, 0, 2)[..., None]  # (n, 2, k, 1)
    before = np.concatenate([np.zeros_like(front[:, :, :1]), front[:, :, :-1]], 2)
    meet = (front + CONFLICT_MARGIN >= near[:, None]) & (
        before - 4.6 - CONFLICT_MARGIN <= far[:, None]
    )
    meet &= (in_band & candidates[:, None])[:, None]
    return np.where(meet, near[:, None], np.inf).min((1, 2))


def _dedupe(points: np.ndarray) -> np.ndarray:
    """A polyline ``(P, 2)`` without repeated points (zero-length segments)."""
    keep = np.ones(len(points), bool)
    keep[1:] = np.linalg.norm(np.diff(points, axis=0), axis=-1) > 1e-6
    return points[keep]


def _lane_path(lanes: np.ndarray, lanes_mask: np.ndarray, offset=None, chain: int = 3) -> list:
    """The ego's lane ahead of it, in its frame, per observation: an ``(P, 2)`` polyline
    from the point of its lane nearest the ego on; an empty array where no lane
    qualifies. Its lane: of the observed lanes with a segment heading within 45 degrees
    of the ego's and passing within 3.5 m of it, the one whose centre lies where the
    ego's lateral ``offset`` ``(n,)`` (left +) puts it (the nearest without it). It is
    continued through up to ``chain`` observed lanes that start within 1 m of its end,
    heading within 45 degrees of it: at a fork the best-aligned one (the way straight
    on; the driver does not know which way the ego's lane goes)."""
    out = []
    cos45 = math.cos(math.radians(45.0))
    for i, (pts, have) in enumerate(zip(lanes, lanes_mask > 0.5)):
        pts = pts[have & np.isfinite(pts).all((-1, -2))].astype(np.float64)  # (k, P, 2)
        seg = np.diff(pts, axis=1)
        seg_len = np.linalg.norm(seg, axis=-1)
        real = seg_len > 1e-6  # repeated points make no segment
        t = np.clip(-(pts[:, :-1] * seg).sum(-1) / np.maximum(seg_len, 1e-6) ** 2, 0.0, 1.0)
        near = pts[:, :-1] + t[..., None] * seg
        dist = np.where(
            real & (seg[..., 0] > cos45 * seg_len), np.linalg.norm(near, axis=-1), np.inf
        )
        j = dist.argmin(-1) if len(pts) else np.zeros(0, int)  # each lane's nearest segment
        lanes_i = np.arange(len(pts))
        d_min, at = dist[lanes_i, j], near[lanes_i, j]
        # the ego is `offset` to the left of its lane's centre: that centre is at -offset
        score = d_min if offset is None else np.abs(at[:, 1] + float(offset[i]))
        score = np.where(d_min < 3.5, score, np.inf)
        if not np.isfinite(score).any():
            out.append(np.zeros((0, 2)))
            continue
        lane = int(score.argmin())
        path = _dedupe(np.concatenate([at[lane][None], pts[lane, j[lane] + 1 :]]))
        # each lane's start and first direction, for the successors
        first = seg[lanes_i, real.argmax(-1)]
        first = first / np.maximum(np.linalg.norm(first, axis=-1), 1e-6)[:, None]
        used = {lane}
        for _ in range(chain):
            if len(path) < 2:
                break
            tangent = (path[-1] - path[-2]) / np.linalg.norm(path[-1] - path[-2])
            turn = first @ tangent
            ok = (np.linalg.norm(pts[:, 0] - path[-1], axis=-1) < 1.0) & (turn > cos45)
            ok &= real.any(-1)
            ok[list(used)] = False
            if not ok.any():
                break
            nxt = int(np.where(ok, turn, -np.inf).argmax())  # straight on at a fork
            used.add(nxt)
            path = _dedupe(np.concatenate([path, pts[nxt, 1:]]))
        out.append(path)
    return out


#: a car's box as points in its own frame (half lengths, half widths): its corners,
#: three more along each side and its centre (the last)
_SIDE = np.array([0.0, 0.25, 0.5, 0.75])
_BOX_POINTS = np.concatenate(
    [
        np.stack([1 - 2 * _SIDE, np.ones(4)], -1),
        np.stack([-np.ones(4), 1 - 2 * _SIDE], -1),
        np.stack([-1 + 2 * _SIDE, -np.ones(4)], -1),
        np.stack([np.ones(4), -1 + 2 * _SIDE], -1),
        np.zeros((1, 2)),
    ]
)  # (17, 2)


def _lane_path_gap(agents: np.ndarray, paths: list):
    """Along the ego's lane (:func:`_lane_path`): the gap ``(n, m)`` from its front to
    the nearest of each agent's box points (:data:`_BOX_POINTS`) within
    :data:`PATH_HALF_WIDTH` of the lane's centreline ahead (``inf`` where none is), and
    the cosine ``(n, m)`` of the agent's heading to the lane's direction where its centre
    is (1 going the lane's way, -1 against it; NaN where there is no path)."""
    n, m = agents.shape[:2]
    gap, along_cos = np.full((n, m), np.inf), np.full((n, m), np.nan)
    for i, path in enumerate(paths):
        if len(path) < 2:
            continue
        a = agents[i]
        seg = np.diff(path, axis=0)  # (S, 2), no zero-length ones (_lane_path)
        seg_len = np.linalg.norm(seg, axis=-1)
        px, py = _box_points(a, _BOX_POINTS)  # (m, 17) each
        # x and y apart: numpy's sums over a last axis of length 2 are slow (same values)
        rx, ry = px[..., None] - path[:-1, 0], py[..., None] - path[:-1, 1]  # (m, 17, S)
        t = np.clip((rx * seg[:, 0] + ry * seg[:, 1]) / seg_len**2, 0.0, 1.0)
        ex, ey = rx - t * seg[:, 0], ry - t * seg[:, 1]
        dist = np.sqrt(ex * ex + ey * ey)
        j = dist.argmin(-1)  # the nearest segment of each point
        lateral = np.take_along_axis(dist, j[..., None], -1)[..., 0]
        along = np.concatenate([[0.0], np.cumsum(seg_len)])[j] + (
            np.take_along_axis(t, j[..., None], -1)[..., 0] * seg_len[j]
        )
        inside = (lateral <= PATH_HALF_WIDTH) & (along > 0)
        gap[i] = np.where(inside, along, np.inf).min(-1) - 2.3
        tangent = seg[j[:, -1]] / seg_len[j[:, -1], None]  # where its centre is
        along_cos[i] = a[:, 3] * tangent[:, 0] + a[:, 4] * tangent[:, 1]
    return gap, along_cos


def lane_keeping_policy(obs: dict, *, target_speed: float | None = None) -> np.ndarray:
    """A rule-based driver for ``simsci/Driving-v0`` observations (single ``(8,)`` or
    batched ``(n, 8)`` ego features): Stanley steering on the lane (``δ = -(ψ +
    atan(k e / (v + 1)))`` from the heading error ψ and lateral offset e) and IDM
    acceleration (:data:`DRIVER_IDM`) towards the speed limit, braking for the observed
    car in its way that asks for the strongest braking. In its way is

    - a car going its way (or standing) with its centre within 2 m of its heading line,
      or any car whose box reaches into its path (:data:`PATH_HALF_WIDTH` either side of
      the arc it steers along, :data:`PATH_AHEAD` m ahead: one nosing in, crossing or
      oncoming), at its speed along the ego's heading (about 0 crossing, below 0
      oncoming);
    - where the observation has ``lanes``: a car going its lane's way, standing or
      oncoming with its box within :data:`PATH_HALF_WIDTH` of its lane's centreline
      ahead, that lane continued straight on through its observed successors
      (:func:`_lane_path`), at its speed along the lane there: on a bend a car ahead in
      the lane is off the heading line and the steering arc;
    - a moving car ahead not going the ego's way (more than ~45 degrees to its lane
      there, or to its arc without lanes: crossing or oncoming) that would be in its
      path when the ego gets there, the car keeping its speed and its heading to the
      ego's arc, the ego its steering at its speed or speeding up
      (:func:`_conflict_gap`, up to :data:`CONFLICT_HORIZON` s): a standstill where
      they would meet, so the ego yields.

    The reference policy of the benchmarks and the baseline an RL agent should beat; it
    does not change lanes, so on a road with a lane that ends it may stop. It reads the
    Dict observation and gives physical actions (the defaults ``observation="dict"``,
    ``action_scale="physical"``); in a normalised environment pass its actions through
    :func:`normalized_actions`.
    """
    if not isinstance(obs, Mapping):
        raise TypeError(
            "lane_keeping_policy reads the Dict observation (observation='dict'), got "
            f"{type(obs).__name__}; unflatten a flat one first (one observation: "
            "gymnasium.spaces.unflatten(env.dict_observation_space, obs))"
        )
    ego = np.asarray(obs["ego"], dtype=np.float64)
    single = ego.ndim == 1
    ego = ego.reshape(-1, len(EGO_FEATURES))
    agents = np.asarray(obs["agents"], dtype=np.float64).reshape(ego.shape[0], -1, 7)
    mask = np.asarray(obs["agents_mask"], dtype=np.float64).reshape(ego.shape[0], -1) > 0.5
    v, offset, heading = ego[:, 0], ego[:, 3], ego[:, 4]
    limit = ego[:, 6] if target_speed is None else np.full_like(v, target_speed)
    steer = -(heading + np.arctan2(1.5 * offset, v + 1.0))
    speed, cos = agents[..., 2], agents[..., 3]
    standing = speed < 1.0
    # each rule gives gaps (n, m) and the speeds (n, m) of what it brakes for; the ego
    # brakes for the strongest IDM interaction of any of them (ego frame: x forward, y
    # left)
    rules = []
    # a car going its way, or standing, with its centre in the lane band (a moving
    # oncoming car there is on the other lane of a road that bends ahead); any car whose
    # box reaches into its path (nosing in from the side, crossing, oncoming), at its
    # speed along the ego's heading (about 0 crossing, below 0 oncoming)
    centre = mask & (agents[..., 0] > 0) & (np.abs(agents[..., 1]) < 2.0) & ((cos > 0) | standing)
    centre_gap = np.where(centre, agents[..., 0] - 0.5 * (agents[..., 5] + 4.6), np.inf)
    path_gap = np.where(mask, _path_gap(agents, ego[:, 2]), np.inf)
    rules.append((np.minimum(centre_gap, path_gap), speed * cos))
    # how each car heads against the ego's way where it is: against its lane's direction
    # there where the lanes are observed, else against its steering arc's (on a bend a
    # car going either way along the road is turned against the ego's heading)
    frame = _arc_frame(agents, ego[:, 2])
    way_cos = np.cos(frame[2])
    lane_rule = None
    if "lanes" in obs and "lanes_mask" in obs:
        lanes = np.asarray(obs["lanes"], np.float64).reshape(ego.shape[0], -1, LANE_POINTS, 2)
        have = np.asarray(obs["lanes_mask"], np.float64).reshape(ego.shape[0], -1)
        lane_gap, lane_cos = _lane_path_gap(agents, _lane_path(lanes, have, offset))
        way_cos = np.where(np.isnan(lane_cos), way_cos, lane_cos)
        # any car going its lane's way, standing or oncoming within the band of its
        # lane's centreline ahead (on a bend a car ahead in the lane is off the heading
        # line and the steering arc), at its speed along the lane there; one crossing
        # the lane at speed is the conflict rule's (it will have cleared)
        on_lane = mask & (standing | (np.abs(lane_cos) > 0.7))
        lane_rule = (np.where(on_lane, lane_gap, np.inf), speed * np.nan_to_num(lane_cos))
    # a car crossing the ego's way or oncoming that would be in its path when the ego
    # gets there (moving in the arc's coordinates, so one following the road round a bend
    # stays beside it): a standstill where they would meet, so the ego yields (a car
    # behind it or going its way is left to the other rules)
    reach = agents[..., 0] + 0.5 * (
        agents[..., 5] * np.abs(cos) + agents[..., 6] * np.abs(agents[..., 4])
    )
    crossing = mask & ~standing & (way_cos < 0.7) & (reach > 2.3)
    rules.append((_conflict_gap(agents, crossing, v, limit, frame), np.zeros_like(speed)))
    if lane_rule is not None:
        rules.append(lane_rule)
    s0, T, a, b = DRIVER_IDM
    interaction = np.zeros_like(v)
    for gap, v_lead in rules:
        s_star = s0 + np.maximum(
            0.0, v[:, None] * T + v[:, None] * (v[:, None] - v_lead) / (2 * np.sqrt(a * b))
        )
        push = np.where(np.isfinite(gap), (s_star / np.maximum(gap, 0.1)) ** 2, 0.0)
        interaction = np.maximum(interaction, push.max(1, initial=0.0))
    accel = a * (1 - (v / np.maximum(limit, 1.0)) ** 4 - interaction)
    action = np.stack([accel, steer], -1).clip(ACTION_LOW, ACTION_HIGH).astype(np.float32)
    return action[0] if single else action
