"""The streaming world, simsci/VectorWorld-v1 and rollouts, on a hand-made generator.

The world's mechanics (streaming, dropping, spawning, the ego on the lanes, seams, the
environment's spaces and errors) are tested with a tile generator that makes an exactly
known straight two-lane road and a VAE that puts agents on it, so every figure can be
checked by hand; ΔSim is the real (untrained, small) policy, so NPC actions are shaped
and must be feasible. The trained parts are tested in their own files; the small
on-the-fly model end to end is a slow test.
"""

import math

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import simsci.data as sd
from simsci.driving import metrics
from simsci.envs import vectorworld_rollout
from simsci.envs._vectorworld import OPENING_POOL
from simsci.models.vectorworld import (
    DeltaSim,
    DriveRecorder,
    StreamingWorld,
    TokenLayout,
    seam_gaps,
    write_rollout,
)
from simsci.models.vectorworld._tokens import DIRECTIONS
from simsci.models.vectorworld._world import BANK_SEED, _walk

Y_LANES = (-1.75, 1.75)  # two lanes along +x, both driving east


def _straight_tile(agents: bool = True) -> dict:
    x = np.linspace(-32.0, 32.0, 20)
    pts = np.stack([np.stack([x, np.full(20, y)], -1) for y in Y_LANES])
    ag = np.array([[20.0, -1.75, 12.0, 1.0, 0.0, 4.5, 1.9]]) if agents else np.zeros((0, 7))
    return {
        "points": pts,
        "width": np.full(2, 3.5),
        "speed_limit": np.full(2, 20.0),
        "kind": np.zeros(2, np.int64),
        "agents": ag,
    }


class StraightTiles(torch.nn.Module):
    """A 'generator' of the same straight road tile for every cell (row j = 0);
    ``empty``: lane-less tiles only; ``ending``: the straight tile on a reset (the first
    call), lane-less tiles after it, so the road ends 32 m east of the origin;
    ``jitter``: every call's lanes shifted north by ``shift`` (1 mm) per call, so a cell
    generated twice differs. ``neighbours`` records the keyword of each call."""

    def __init__(self, empty=False, ending=False, jitter=False, shift=1e-3):
        super().__init__()
        self.layout = TokenLayout(max_lanes=8, max_agents=4)
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.empty, self.ending, self.jitter, self.shift = empty, ending, jitter, shift
        self.calls, self.neighbours = [], []

    def generate(
        self,
        contexts,
        directions,
        *,
        steps=1,
        mode="meanflow",
        generator=None,
        max_tries=3,
        neighbours=None,
    ):
        self.calls.append(list(directions))
        self.neighbours.append(neighbours)
        n = len(contexts)
        if self.empty or (self.ending and len(self.calls) > 1):
            tile = {k: v[:0] for k, v in _straight_tile().items()}
            return [dict(tile) for _ in range(n)], {"tiles": n, "resampled": 2 * n, "empty": n}
        tiles = [_straight_tile() for _ in range(n)]
        for t in tiles:
            t["points"][..., 1] += self.shift * len(self.calls) * self.jitter
        return tiles, {"tiles": n, "resampled": 0, "empty": 0}


class SeededTiles(StraightTiles):
    """Straight tiles shifted north by a draw of the tile's noise generator (one per tile
    when ``generator`` is a list, as :meth:`StreamingWorld.opening` passes): a tile that
    depends on its generator alone, as the real generator's."""

    def generate(self, contexts, directions, *, generator=None, **kw):
        tiles, stats = super().generate(contexts, directions, generator=generator, **kw)
        gens = generator if isinstance(generator, (list, tuple)) else [generator] * len(tiles)
        for t, g in zip(tiles, gens):
            t["points"][..., 1] += float(torch.rand((), generator=g))
        return tiles, stats


class OnLaneVAE(torch.nn.Module):
    """Agents on the south lane, heading along it, with a constant-speed history: at x =
    -25, -15, ... behind the ego when one is given (a first tile), else from x = 20 on,
    where the straight tiles' generator puts its one; its "count head" (``n_agents=None``)
    draws one."""

    def sample(self, lanes, n_agents, *, ego=None, generator=None):
        n = 1 if n_agents is None else n_agents
        hist = np.zeros((n, 11, 7))
        for i in range(n):
            x_now = -25.0 + 10.0 * i + (0.0 if ego is not None else 45.0)
            hist[i, :, 0] = x_now - 1.0 * np.arange(10, -1, -1)  # 10 m/s
            hist[i, :, 1] = -1.75
            hist[i, :, 2], hist[i, :, 3], hist[i, :, 5], hist[i, :, 6] = 10.0, 1.0, 4.5, 1.9
        return hist, np.ones((n, 11), bool), {"rejected": 0}


class FakeWorldModel:
    def __init__(self, empty=False, device="cpu", ending=False, jitter=False, shift=1e-3):
        self.tiles, self.vae = StraightTiles(empty, ending, jitter, shift), OnLaneVAE()
        self.npc = DeltaSim(hidden=16, depth=1).eval()
        self.device = torch.device(device)
        self.to(self.device)

    def to(self, device):
        self.npc.to(device)
        self.device = torch.device(device)
        return self


def _drive(world, steps, accel=0.0):
    for _ in range(steps):
        world.step(torch.tensor([[accel, 0.0]] * world.n))


def test_streams_tiles_ahead_and_drops_behind():
    world = StreamingWorld(FakeWorldModel(), 2, max_tiles=3, seed=0)
    world.reset()
    assert {r["cell"] for r in world.tiles[0].values()} == {(0, 0), (1, 0)}
    assert world.model.tiles.calls[0] == [None, None]  # first tiles: no context
    assert world.model.tiles.calls[1] == [0, 0]  # then +x from (0, 0)
    start = world.x[:, 0].clone()
    _drive(world, 100)  # 16 m/s (0.8 x the limit) for 10 s
    travelled = (world.x[:, 0] - start).double()
    assert torch.allclose(world.driven, travelled, atol=1e-3)
    assert torch.allclose(travelled, torch.full((2,), 160.0, dtype=torch.float64), atol=0.5)
    for b in range(2):
        cells = {r["cell"] for r in world.tiles[b].values()}
        ego_cell = (math.floor(float(world.x[b, 0]) / 64 + 0.5), 0)
        assert len(cells) <= 3 and ego_cell in cells and (ego_cell[0] + 1, 0) in cells
        assert (0, 0) not in cells  # dropped behind
    assert world.stats["dropped_tiles"] >= 2 and not bool(world.ego_offroad().any())
    assert abs(float(world._ego_offset[0])) < 1e-4 and abs(float(world._ego_heading_err[0])) < 1e-5


def test_the_look_ahead_follows_the_egos_lane_not_its_heading():
    """An ego on the straight road turned 40 degrees north: its look-ahead stays on the
    road's cells; an ego without a lane (none associated) looks along its heading and
    the cell north-east of it is made."""
    world = StreamingWorld(FakeWorldModel(), 2, max_tiles=6, seed=0)
    world.reset()
    assert bool(world._ego_known.all())
    assert _cells(world, 0) == _cells(world, 1) == {(0, 0), (1, 0)}
    th = math.radians(40.0)
    world.theta[:, 0] = th
    world._ego_known[1] = False
    world._stream()
    x, y, ahead = float(world.x[1, 0]), float(world.y[1, 0]), world.lookahead
    ray = set(_walk(x, y, x + ahead * math.cos(th), y + ahead * math.sin(th)))
    assert (1, 1) in ray and ray <= _cells(world, 1)
    assert _cells(world, 0) == {(0, 0), (1, 0)}


def _cells(world, b=0):
    return {r["cell"] for r in world.tiles[b].values()}


def _lanes_at(world, cell, b=0):
    """World ``b``'s kept lane points of ``cell`` (a copy) and its tile id."""
    slot = world._slot_of(b, cell)
    lo = slot * world.Lt
    ids = torch.nonzero(world.lane_valid[b, lo : lo + world.Lt]).flatten() + lo
    return world.lane_points[b, ids].clone(), world.tiles[b][slot]["tile_id"]


def test_a_dropped_cell_comes_back_bit_identical():
    """Out east with 3 tiles kept (the origin's tile is dropped), turn round, back west:
    the origin's cell is restored from the episode's store, not generated again (the
    generator shifts every new tile, so a second draw would differ)."""
    model = FakeWorldModel(jitter=True)
    world = StreamingWorld(model, 1, max_tiles=3, seed=0)
    world.reset()
    rec = DriveRecorder(world)
    rec.snap()
    first, first_id = _lanes_at(world, (0, 0))
    for _ in range(100):  # 160 m east
        world.step(torch.zeros(1, 2))
        rec.snap(np.zeros(2))
    assert (0, 0) not in _cells(world) and world.stats["dropped_tiles"] >= 2
    world.theta[0, 0] = math.pi  # turn round
    for _ in range(110):  # back past the origin
        world.step(torch.zeros(1, 2))
        rec.snap(np.zeros(2))
    assert (0, 0) in _cells(world) and world.stats["restored_tiles"] >= 2
    again, again_id = _lanes_at(world, (0, 0))
    assert again_id == first_id == 0 and torch.equal(again, first)
    # the recording: one version of the origin's tile, live twice, the ego always covered
    stats = {}
    out = rec.finish(stats)
    assert len(out["versions"]) == world.stats["tiles"] and stats["tile_coverage"] == 1.0
    live = out["live"][out["live"][:, 0] == 0]
    assert len(live) == 2 and live[0, 1] == 0 and live[1, 2] == 210
    # every cell was generated once: one store entry per generated tile, ids in order
    assert world.stats["tiles"] == len(world.store[0])
    assert sorted(r["tile_id"] for r in world.store[0].values()) == list(range(len(world.store[0])))
    world.reset()  # a new episode forgets the store
    assert set(world.store[0]) <= _cells(world) and world.stats["tiles"] > len(world.store[0])


def test_a_new_cell_is_conditioned_on_every_existing_neighbour():
    """East along y = 0, then north into (1, 1), then west into (0, 1): that cell touches
    (1, 1), the cell it is reached from (the context), and (0, 0) below it, whose seam
    the generator is asked to pin too."""
    model = FakeWorldModel()
    world = StreamingWorld(model, 1, max_tiles=8, seed=0, lookahead=40.0, window=100.0)
    world.reset()
    assert _cells(world) == {(0, 0), (1, 0)} and not any(model.tiles.neighbours)
    world.x[0, 0], world.y[0, 0], world.theta[0, 0] = 70.0, 20.0, math.pi / 2
    _drive(world, 1)
    assert (1, 1) in _cells(world) and world.stats["pinned_neighbours"] == 0
    world.x[0, 0], world.y[0, 0], world.theta[0, 0] = 40.0, 70.0, math.pi
    _drive(world, 1)
    assert (0, 1) in _cells(world) and world.stats["pinned_neighbours"] == 1
    assert model.tiles.calls[-1] == [DIRECTIONS.index((-1, 0))]  # from (1, 1), westwards
    (pairs,) = model.tiles.neighbours[-1]
    ((tile, direction),) = pairs
    assert direction == DIRECTIONS.index((0, 1)) and tile is world.store[0][(0, 0)]["tile"]


def test_every_seam_of_a_multi_neighbour_cell_closes():
    """Tiles drawn 1 m apart (every generator call shifts its lanes 1 m north) still meet
    exactly: a new tile's lane ends on a shared edge are snapped onto its neighbours'
    ends, the context's (east of the origin, north of it) and another's too (the cell
    (0, 1), reached from (1, 1), touching (0, 0) below)."""
    model = FakeWorldModel(jitter=True, shift=1.0)
    world = StreamingWorld(model, 1, max_tiles=8, seed=0, lookahead=40.0, window=100.0)
    world.reset()
    world.x[0, 0], world.y[0, 0], world.theta[0, 0] = 70.0, 20.0, math.pi / 2
    _drive(world, 1)
    world.x[0, 0], world.y[0, 0], world.theta[0, 0] = 40.0, 70.0, math.pi
    _drive(world, 1)
    assert {(0, 0), (1, 0), (1, 1), (0, 1)} <= _cells(world)
    assert world.stats["pinned_neighbours"] == 1 and world.stats["seam_snapped"] >= 4
    gaps = seam_gaps(world, 0)
    assert len(gaps) >= 8 and float(np.max(gaps)) <= 1e-9
    # the snapped lanes join their neighbours' as successors
    (slot,) = [s for s, r in world.tiles[0].items() if r["cell"] == (0, 1)]
    lanes = torch.arange(slot * world.Lt, (slot + 1) * world.Lt)
    lanes = lanes[world.lane_valid[0, lanes]]
    assert bool((world.lane_succ[0, lanes, 0] >= 0).all())  # eastbound into (1, 1)


def test_seams_join_and_successors_cross_tiles():
    world = StreamingWorld(FakeWorldModel(), 1, seed=0)
    world.reset()
    _drive(world, 40)
    gaps = seam_gaps(world, 0)
    assert len(gaps) >= 4 and float(np.max(gaps)) < 1e-9
    # every lane ending on a shared edge has its successor in the next tile
    valid = world.lane_valid[0]
    succ = world.lane_succ[0, :, 0]
    ends = world.lane_points[0, :, -1, 0]
    has_next = valid & (ends < ends[valid].max() - 1)
    assert bool((succ[has_next] >= 0).all())
    assert torch.allclose(
        world.lane_points[0, succ[has_next], 0], world.lane_points[0, has_next, -1]
    )


def test_agents_spawn_with_clearance_and_npcs_stay_feasible():
    world = StreamingWorld(FakeWorldModel(), 1, seed=0, spawn_clearance=10.0)
    world.reset()
    init = world.stats["init_agents"]
    assert init == 1  # the first tile's one agent, from the VAE, with history
    trace, valid = [], []
    for _ in range(60):
        world.step(torch.tensor([[0.0, 0.0]]))
        a, v = world.agents()
        trace.append(a[0].double())
        valid.append(v[0])
    assert world.stats["spawned"] >= 1  # the agents of the outpainted tiles
    a, v = torch.stack(trace), torch.stack(valid)
    same = v[1:] & v[:-1]
    traj = a.permute(1, 0, 2)[1:]  # NPCs only
    bad = metrics.infeasible_steps(traj, torch.ones_like(traj[..., 0], dtype=torch.bool))
    assert int((bad & same.T[1:]).sum()) == 0  # shaped ΔSim: never infeasible


def test_spawn_rejected_near_the_ego_and_on_overlap():
    world = StreamingWorld(FakeWorldModel(), 1, seed=0)
    world.reset()
    ex, ey = float(world.x[0, 0]), float(world.y[0, 0])
    before = world.stats["spawn_rejected"]
    assert not world._add_agent(0, np.array([ex + 3.0, ey, 10.0, 1.0, 0.0, 4.5, 1.9]))
    a, v = world.agents()
    other = a[0, 1].double().numpy()
    assert not world._add_agent(0, other + np.array([1.0, 0, 0, 0, 0, 0, 0]))
    assert world.stats["spawn_rejected"] == before + 2


def test_no_vehicle_appears_where_the_ego_would_meet_it():
    # a tile's vehicles appear when the look-ahead reaches it; none may appear inside the
    # ego's braking distance on its course (the initial traffic's 3 s screen)
    world = StreamingWorld(FakeWorldModel(), 1, seed=0)
    world.reset()
    world.valid[0, 1:] = False
    world.v[0, 0] = 15.0
    ex, ey, th = float(world.x[0, 0]), float(world.y[0, 0]), float(world.theta[0, 0])
    c, s = math.cos(th), math.sin(th)

    def row(ahead, speed):
        return np.array([ex + ahead * c, ey + ahead * s, speed, c, s, 4.5, 1.9])

    assert not world._add_agent(0, row(30.0, 0.0))  # stopped 30 m ahead: met in 2 s
    assert world.stats["spawn_unsafe"] == 1
    assert world._add_agent(0, row(30.0, 15.0))  # going as fast: never met
    assert world._add_agent(0, row(-40.0, 0.0))  # behind the ego
    assert world._add_agent(0, row(80.0, 0.0))  # 80 m ahead: 5 s away
    assert world.stats["spawn_unsafe"] == 1


def _ego_among(ego_speed, rows):
    """A world whose ego heads east at ``ego_speed`` among NPCs ``rows`` = (dx, dy,
    heading, speed) relative to it (slots 1, 2, ...); returns ``(world, npc mask)``."""
    world = StreamingWorld(FakeWorldModel(), 1, seed=0)
    world.reset()
    world.valid[0, 1:] = False
    ex, ey = float(world.x[0, 0]), float(world.y[0, 0])
    world.theta[0, 0], world.v[0, 0] = 0.0, ego_speed
    for j, (dx, dy, th, v) in enumerate(rows, start=1):
        world.x[0, j], world.y[0, j], world.theta[0, j], world.v[0, j] = ex + dx, ey + dy, th, v
        world.length[0, j], world.width[0, j], world.valid[0, j] = 4.5, 1.9, True
    npc = world.valid.clone()
    npc[:, 0] = False
    return world, npc


def test_npcs_yield_to_the_ego_in_their_path_whatever_their_lane():
    # the ego stands; NPCs: behind it closing; beside it; ahead of it; oncoming
    rows = [(-12.0, 0.5, 0.0, 10.0), (-12.0, 4.0, 0.0, 10.0), (20.0, 0.0, 0.0, 10.0)]
    world, npc = _ego_among(0.0, rows + [(30.0, -0.5, math.pi, 10.0)])
    cap = world._yield_cap(npc)[0]
    assert math.isinf(float(cap[0])) and math.isinf(float(cap[2])) and math.isinf(float(cap[3]))
    assert float(cap[1]) < -4.0 and float(cap[4]) < 0.0  # hard braking, braking
    # the cap reaches the NPCs' accelerations, within the feasible box
    world.step(torch.zeros(1, 2))
    assert float(world.accel[0, 1]) < 0.0 and float(world.accel[0, 4]) < 0.0
    off = StreamingWorld(FakeWorldModel(), 1, seed=0, npc_yield=False)
    assert not off.npc_yield and world.npc_yield
    with pytest.raises(ValueError, match="npc_yield"):
        StreamingWorld(FakeWorldModel(), 1, npc_yield="yes")


def test_npcs_yield_to_the_ego_they_would_meet_from_the_side():
    """Both keeping speed and heading: an NPC crossing towards the ego's path that would
    meet it 12 m ahead of itself brakes hard, and so does a slow one cutting in that the
    ego is passing; one turning away from the ego's path, and one on a parallel heading
    beside it, are left to ΔSim."""
    rows = [  # dx, dy, heading, speed: crossing from the south; cutting in; away; beside
        (15.0, -14.0, math.pi / 2, 8.0),
        (10.0, -3.0, math.radians(10.0), 5.0),
        (10.0, -3.0, math.radians(-30.0), 5.0),
        (-5.0, 3.5, 0.0, 12.0),
    ]
    world, npc = _ego_among(10.0, rows)  # the ego drives east at 10 m/s
    cap = world._conflict_cap(npc)[0]
    assert float(cap[1]) < -4.0  # meets the ego 12 m ahead of it: hard braking
    assert float(cap[2]) < 0.0  # the ego overtakes it as it comes over: it lets it pass
    assert math.isinf(float(cap[3])) and math.isinf(float(cap[4]))
    assert float(world._yield_cap(npc)[0, 1]) <= float(cap[1])  # part of npc_yield


def test_a_lane_goes_on_into_a_kinked_lane_starting_exactly_at_its_end():
    world = StreamingWorld(FakeWorldModel(), 1, seed=0)
    world.reset()

    def ray(x0, y0, deg, length=30.0):
        u = torch.linspace(0.0, length, 20, dtype=torch.float64)[:, None]
        d = torch.tensor([math.cos(math.radians(deg)), math.sin(math.radians(deg))])
        return (torch.tensor([x0, y0]) + u * d).to(world.lane_points)

    world.lane_valid[0] = False
    lanes = [ray(-30.0, 0.0, 0.0), ray(0.0, 0.0, 50.0), ray(0.0, 0.0, -70.0)]
    lanes += [ray(-30.0, 9.0, 0.0), ray(0.0, 9.0, 50.0), ray(0.0, 9.0, 10.0)]
    for j, pts in enumerate(lanes):
        world.lane_points[0, j], world.lane_valid[0, j] = pts, True
    world._connect(0)
    succ = world.lane_succ[0]
    assert succ[0].tolist() == [1, -1]  # 50 degrees, exactly at its end: goes on there
    assert succ[3].tolist() == [5, -1]  # a successor by the usual rule: the kink is not added
    # 70 degrees is no continuation; neither is a lane starting 0.1 m away at 50 degrees
    world.lane_points[0, 1] = ray(0.0, 0.1, 50.0)
    world._connect(0)
    assert world.lane_succ[0, 0].tolist() == [-1, -1]


def test_npcs_leave_beyond_the_window():
    world = StreamingWorld(FakeWorldModel(), 1, seed=0, window=80.0, lookahead=40.0)
    world.reset()
    world._add_agent(0, np.array([-60.0, -1.75, 0.0, 1.0, 0.0, 4.5, 1.9]))
    n0 = int(world.valid.sum())
    _drive(world, 30, accel=1.0)
    assert int(world.valid.sum()) <= n0 and world.stats["despawned"] >= 1
    d = torch.hypot(world.x - world.x[:, :1], world.y - world.y[:, :1])
    assert bool((d[world.valid] <= 80.0 + 3.0).all())


def test_empty_tiles_counted_and_the_ego_is_off_road():
    world = StreamingWorld(FakeWorldModel(empty=True), 1, seed=0)
    world.reset()
    assert world.stats["empty_tiles"] >= 2 and world.stats["resampled"] >= 4
    assert bool(world.ego_offroad()[0])


def test_bad_actions_and_options_rejected():
    world = StreamingWorld(FakeWorldModel(), 2, seed=0)
    world.reset()
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        world.step(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="NaN"):
        world.step(torch.tensor([[0.0, float("nan")], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="max_tiles"):
        StreamingWorld(FakeWorldModel(), 1, max_tiles=2)
    with pytest.raises(ValueError, match="lookahead"):
        StreamingWorld(FakeWorldModel(), 1, lookahead=200.0, window=150.0)
    with pytest.raises(ValueError, match="first_steps must be an int >= 1"):
        StreamingWorld(FakeWorldModel(), 1, first_steps=0)


def test_first_steps_reaches_the_world_and_is_recorded():
    from simsci.envs import VectorWorldVectorEnv

    env = VectorWorldVectorEnv(1, checkpoint=FakeWorldModel(), first_steps=1)
    assert env.world.sim.first_steps == 1 and env.world.config["first_steps"] == 1
    assert VectorWorldVectorEnv(1, checkpoint=FakeWorldModel()).world.sim.first_steps == 16


def _env(**kw):
    from simsci.envs import VectorWorldEnv

    kw.setdefault("checkpoint", FakeWorldModel())
    return VectorWorldEnv(**kw)


def test_resets_take_openings_made_ahead_and_the_same_seed_gives_the_same_episode():
    """Unseeded resets take their opening tiles from a pool made ahead in one batched
    call and get exactly what a reset making its own gets (an opening depends on its
    seed alone); a seed gives the same episode whatever came before it."""
    model = FakeWorldModel()
    model.tiles = SeededTiles()

    def episode(env):
        sim = env._vec.world.sim
        return [sim.store[0][c]["tile"]["points"].copy() for c in ((0, 0), (1, 0))] + [
            float(sim.x[0, 0]),
            float(sim.y[0, 0]),
        ]

    pooled, direct = _env(checkpoint=model), _env(checkpoint=model)
    runs = {"pooled": [], "direct": []}
    for name, env in (("pooled", pooled), ("direct", direct)):
        env.reset(seed=7)
        for _ in range(4):
            if name == "direct":  # no pool: every reset makes its own opening
                env._vec.world.pool.clear()
                env._vec.world._after = None
            calls = len(model.tiles.calls)
            env.reset()
            runs[name].append((episode(env), len(model.tiles.calls) - calls))
    for (a, _), (b, calls_b) in zip(runs["pooled"], runs["direct"]):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
        assert calls_b == 2  # the first tile, the one east of it
    assert runs["pooled"][0][1] == 2 and all(c == 0 for _, c in runs["pooled"][1:])
    assert len(pooled._vec.world.pool) == OPENING_POOL - 4  # made at the first, 4 used
    # a seed's episode does not depend on what came before it
    pooled.reset(seed=3)
    first = episode(pooled)
    pooled.reset()
    pooled.reset(seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(first, episode(pooled)))
    fresh = _env(checkpoint=model)
    fresh.reset(seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(first, episode(fresh)))


def test_an_opening_bank_reuses_k_openings_and_keeps_episodes_seeded():
    """With ``opening_bank=2`` every episode opens with one of two openings, made once:
    after both are made a reset calls the tile generator for nothing; reusing an opening
    leaves it intact (the same seed gives the same episode after other episodes used it),
    and the rest of an episode still follows its own seed."""
    model = FakeWorldModel()
    model.tiles = SeededTiles()

    def episode(env, steps=6):
        sim = env._vec.world.sim
        for _ in range(steps):
            env.step(np.array([0.5, 0.02], np.float32))
        return [sim.store[0][c]["tile"]["points"].copy() for c in ((0, 0), (1, 0))] + [
            float(sim.x[0, 0]),
            float(sim.y[0, 0]),
            sim.x[0].clone(),
        ]

    env = _env(checkpoint=model, opening_bank=2)
    assert env._vec.world.sim.opening_bank == 2 and env._vec.world.config["opening_bank"] == 2
    env.reset(seed=5)
    first = episode(env)
    vae_calls = []
    draw = model.vae.sample
    model.vae.sample = lambda *a, **kw: vae_calls.append(1) or draw(*a, **kw)
    at_reset = 0
    for _ in range(8):
        calls, draws = len(model.tiles.calls), len(vae_calls)
        env.reset()
        made, drawn = len(model.tiles.calls) - calls, len(vae_calls) - draws
        at_reset += drawn
        episode(env)
    assert len(env._vec.world.pool) == 2  # both openings kept
    # a reset with both openings made generates no opening tile and draws no vehicle:
    # the initial traffic is part of the opening, the same each time it opens an episode
    assert made == 0 and drawn == 0 and at_reset <= 2  # the second opening's two tiles
    model.vae.sample = draw
    assert env._vec.world.sim.stats["init_agents"] == 9  # the tile's one, at each reset
    env.reset(seed=5)
    again = episode(env)
    assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(first, again))
    fresh = _env(checkpoint=model, opening_bank=2)
    fresh.reset(seed=5)
    assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(first, episode(fresh)))
    with pytest.raises(ValueError, match="opening_bank"):
        StreamingWorld(FakeWorldModel(), 1, opening_bank=0)


def test_a_bank_opening_keeps_the_tiles_of_its_first_look_ahead():
    """A look-ahead reaching a third cell: a bank's first reset with an opening makes
    that tile from the opening's key, not from the episode's seed, and keeps it with the
    opening; later resets with it make no tile and start exactly as the first did. The
    model's openings made ahead are not changed."""
    model = FakeWorldModel()
    model.tiles = SeededTiles()

    def start(world, b=0):
        store, valid = world.store[b], world.valid[b]
        cells = sorted(store)
        kept = sorted(r["cell"] for r in world.tiles[b].values())
        state = (valid, world.x[b][valid], world.memory["route"][b][valid])
        return cells, [store[c]["tile"]["points"] for c in cells], kept, state

    def same(a, b):
        return (
            a[0] == b[0]
            and all(np.array_equal(x, y) for x, y in zip(a[1], b[1]))
            and a[2] == b[2]
            and all(torch.equal(x, y) for x, y in zip(a[3], b[3]))
        )

    world = StreamingWorld(model, 1, opening_bank=1, lookahead=100.0)
    world.generator.manual_seed(1)
    world.reset()
    first = start(world)
    assert first[0] == [(0, 0), (1, 0), (2, 0)]  # the walk to x = 100 m ends in cell 2
    assert len(world.bank[BANK_SEED]) == 3
    calls = len(model.tiles.calls)
    world.generator.manual_seed(1)  # the same seed again, after the opening was kept
    world.reset()
    assert len(model.tiles.calls) == calls  # nothing generated
    assert same(start(world), first)  # tiles, kept cells, vehicles and their route keys
    other = StreamingWorld(model, 1, opening_bank=1, lookahead=100.0)
    other.generator.manual_seed(3)
    other.reset()  # a fresh world, another seed: the same three tiles
    assert all(np.array_equal(a, b) for a, b in zip(start(other)[1], first[1]))
    # two worlds with the one opening in one reset: its look-ahead is made once
    calls = len(model.tiles.calls)
    pair = StreamingWorld(model, 2, opening_bank=1, lookahead=100.0)
    pair.reset()
    assert len(model.tiles.calls) - calls == 3  # first, east, the look-ahead's one
    assert all(np.array_equal(a, b) for a, b in zip(start(pair, 1)[1], first[1]))
    # a look-ahead beyond the world's tiles (4 cells, 3 kept) is not kept with the
    # opening: each episode makes it anew from the key, as the first one did
    tight = StreamingWorld(model, 1, opening_bank=1, lookahead=170.0, window=300.0, max_tiles=3)
    runs = []
    for _ in range(2):
        tight.generator.manual_seed(5)
        tight.reset()
        runs.append(start(tight))
    assert same(runs[0], runs[1])
    assert len(tight.bank[BANK_SEED]) == 2 and len(runs[0][0]) == 4
    model.openings = {
        "settings": other.opening_settings(),
        "tiles": {BANK_SEED: other.opening([BANK_SEED])[0]},
    }  # made ahead: the opening's two tiles
    made = StreamingWorld(model, 1, opening_bank=1, lookahead=100.0)
    made.reset()
    assert len(model.openings["tiles"][BANK_SEED]) == 2 and len(made.bank[BANK_SEED]) == 3
    assert all(np.array_equal(a, b) for a, b in zip(start(made)[1], first[1]))


def test_an_opening_without_its_traffic_gets_it_drawn_at_reset():
    """A pool entry made without initial traffic (tiles only, e.g. by a caller's own
    code) still opens an episode: the first tile's vehicles are drawn then."""
    world = StreamingWorld(FakeWorldModel(), 1)
    world.generator.manual_seed(7)
    key = world.opening_seeds(7, 1)[0]
    world.generator.manual_seed(7)
    world.reset(pool={key: [((0, 0), _straight_tile()), ((1, 0), _straight_tile())]})
    assert world.stats["init_agents"] == 1 and world.init_history[0].shape == (1, 11, 7)
    made = world.opening([key])[0]
    assert made[0][1]["traffic"].shape == (1, 11, 7)  # an opening carries its own


def test_env_passes_check_env_with_driving_spaces():
    from simsci.envs import DrivingEnv

    env = _env()
    check_env(env, skip_render_check=True)
    ref = DrivingEnv(num_roads=1, route_length=1000.0)
    assert env.observation_space == ref.observation_space
    assert env.action_space == ref.action_space
    obs, info = env.reset(seed=3)
    assert abs(obs["ego"][3]) < 1e-4 and obs["lanes_mask"].sum() >= 2
    total = 0.0
    for _ in range(20):
        obs, r, term, trunc, info = env.step(np.zeros(2, np.float32))
        total += r
        assert not term
    assert info["distance"] == pytest.approx(20 * 1.6, abs=0.05)
    assert total == pytest.approx(0.1 * info["distance"], abs=0.05)
    frame = _env(render_mode="rgb_array")
    frame.reset(seed=0)
    assert frame.render().shape == (256, 256, 3)


def test_env_rejects_bad_actions():
    env = _env(action_bounds="error")
    env.reset(seed=0)
    with pytest.raises(ValueError):
        env.step(np.array([np.nan, 0.0], np.float32))
    with pytest.raises(ValueError):
        env.step(np.array([9.0, 0.0], np.float32))


def test_flat_observation_and_normalized_actions_as_in_driving():
    from simsci.envs import DrivingVectorEnv, VectorWorldVectorEnv
    from simsci.envs._driving import flat_observation

    sb3 = {"observation": "flat", "action_scale": "normalized"}
    env = VectorWorldVectorEnv(2, checkpoint=FakeWorldModel(), **sb3)
    ref = DrivingVectorEnv(2, num_roads=1, route_length=1000.0, **sb3)
    assert env.single_observation_space == ref.single_observation_space
    assert env.single_action_space == ref.single_action_space
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 464) and obs.dtype == np.float32
    np.testing.assert_array_equal(obs, flat_observation(env.world.observe()).numpy())
    obs, *_ = env.step(np.array([[1.0, 0.0], [-1.0, 0.0]], np.float32))
    ego = env.world.observe()["ego"]  # [speed, accel, ...]: the physical bounds applied
    np.testing.assert_allclose(ego[:, 1].numpy(), [4.0, -8.0], rtol=1e-4)


def test_vector_env_autoresets_and_evaluates():
    from simsci.envs import VectorWorldVectorEnv, evaluate_driving, lane_keeping_policy

    env = VectorWorldVectorEnv(3, checkpoint=FakeWorldModel(), max_episode_steps=5)
    obs, _ = env.reset(seed=0)
    assert obs["agents"].shape == (3, 16, 7)
    for _ in range(5):
        obs, r, term, trunc, info = env.step(np.zeros((3, 2), np.float32))
    assert trunc.all() and not term.any()
    assert list(info["end_reason"]) == ["time_limit"] * 3 and info["_end_reason"].all()
    obs, r, term, trunc, info = env.step(np.zeros((3, 2), np.float32))  # the autoreset
    assert list(info["end_reason"]) == [""] * 3 and not info["_end_reason"].any()
    res = evaluate_driving(
        lane_keeping_policy,
        episodes=2,
        num_envs=2,
        env_id="simsci/VectorWorld-v1",
        checkpoint=FakeWorldModel(),
        max_episode_steps=30,
    )
    assert res["episodes"] == 2 and res["safe"] == 1.0 and res["left_generated_lanes"] == 0.0
    ended = evaluate_driving(
        lane_keeping_policy,
        episodes=2,
        num_envs=2,
        env_id="simsci/VectorWorld-v1",
        checkpoint=FakeWorldModel(ending=True),
        complete=False,
    )
    assert ended["offroad"] == 1.0 and ended["left_generated_lanes"] == 1.0
    with pytest.raises(ValueError, match="env_id"):
        evaluate_driving(lane_keeping_policy, episodes=1, env_id="simsci/Nope-v0")


def test_registered_with_gymnasium():
    import simsci.envs  # noqa: F401

    assert "simsci/VectorWorld-v1" in gymnasium.registry


def test_rollout_records_the_whole_drive(tmp_path):
    res = vectorworld_rollout(FakeWorldModel(), km=0.2, seed=3, max_tiles=3)
    s = res["stats"]
    assert s["distance_m"] >= 200.0 and s["end_reason"] == "distance"
    assert s["tile_coverage"] == 1.0 and s["world_dropped_tiles"] >= 2
    assert s["npc_infeasible_steps"] == s["npc_path_infeasible_steps"] == 0
    assert s["ego_infeasible_steps"] == s["ego_path_infeasible_steps"] == 0
    assert s["npc_steps_checked"] > 0 and s["ego_steps_checked"] == s["steps"]
    assert s["seam_unmatched"] == 0 and s["seam_gap_p90_m"] == 0.0 and s["seam_endpoints"] >= 8
    path = write_rollout(res, tmp_path / "roll.h5")
    ds = sd.open(path)
    assert sd.check_file(path) == [] and ds.kind == "rollout" and ds.meta["dt"] == 0.1
    ep = ds[0]
    T1 = s["steps"] + 1
    assert ep["agents"].shape[0] == ep["agent_id"].shape[0] == ep["action"].shape[0] == T1
    np.testing.assert_allclose(np.diff(ep["t"]), 0.1)
    assert (ep["agent_id"][:, 0] == 0).all() and ep["agents_valid"][:, 0].all()
    assert ((ep["agent_id"] >= 0) == ep["agents_valid"]).all() and ep["seed"] == 3
    assert np.isnan(ep["action"][-1]).all() and np.isfinite(ep["action"][:-1]).all()
    length = np.hypot(*np.diff(ep["agents"][:, 0, :2], axis=0).T).sum()
    assert length == pytest.approx(s["distance_m"], rel=1e-3)  # every frame of the ego
    npc = ep["agents_valid"][:, 1:]
    assert npc.sum() == s["npc_steps"] and np.isnan(ep["agents"][:, 1:][~npc]).all()
    # every tile version once, with the frames it was live; the ego always on one of them
    tiles, lanes = ep["graphs"]["tiles"]["nodes"], ep["graphs"]["lanes"]["nodes"]
    assert len(np.unique(lanes["tile_id"])) == s["tile_versions"] == s["world_tiles"]
    assert tiles["first_step"].min() == 0 and tiles["last_step"].max() == T1 - 1
    x0 = ep["agents"][:, 0, 0]
    for t in (0, T1 // 2, T1 - 1):
        cell = [math.floor(x0[t] / 64 + 0.5), 0]
        live = (tiles["first_step"] <= t) & (tiles["last_step"] >= t)
        assert (tiles["cell"][live] == cell).all(1).any()
    np.testing.assert_allclose(lanes["points"][:, [0, -1], 1] % 3.5, 1.75)
    ds.close()
    with pytest.raises(ValueError, match="km"):
        vectorworld_rollout(FakeWorldModel(), km=-1)


def test_an_episode_ended_by_leaving_the_generated_lanes_says_so():
    """The generator's road ends 32 m east of the origin (lane-less tiles beyond, where
    the closed seams continue its lanes by 16 m stubs): the ego drives off their end at
    48 m. Terminated and rewarded as any off-road (dynamics and reward unchanged), but
    ``info["end_reason"]`` tells it apart from leaving a lane that goes on. (Raw lanes:
    the world's lane completion would carry the stubs on to the tile's far edge.)"""
    env = _env(checkpoint=FakeWorldModel(ending=True), complete=False)
    obs, info = env.reset(seed=0)
    assert "end_reason" not in info
    x0 = float(env._vec.world.sim.x[0, 0])
    for _ in range(60):
        obs, r, term, trunc, info = env.step(np.zeros(2, np.float32))
        if term or trunc:
            break
        assert "end_reason" not in info
    assert term and not trunc and info["offroad"] and not info["collision"] and r == -20.0
    assert info["end_reason"] == "left_generated_lanes"
    # off 0.5 * 3.5 + 0.5 m beyond the stub's end at x = 48
    assert 48.0 + 2.25 <= x0 + info["distance"] <= 48.0 + 2.25 + 1.7


def test_completed_lanes_carry_a_road_on_where_the_generator_stopped():
    """The same ending road with lane completion (the default): every stub a lane-less
    tile gets is extended to that tile's far edge, so the next tile continues it and the
    ego drives on."""
    res = vectorworld_rollout(FakeWorldModel(ending=True), km=0.3, seed=0)
    s = res["stats"]
    assert s["end_reason"] == "distance" and s["distance_m"] >= 300.0
    assert s["ego_offroad_steps"] == 0 and s["world_lanes_extended"] >= 4
    assert s["world_lanes_dead_ends"] == 0


def test_leaving_a_lane_that_goes_on_is_offroad():
    env = _env()
    env.reset(seed=0)
    for _ in range(100):
        obs, r, term, trunc, info = env.step(np.array([0.0, 0.1], np.float32))  # veer left
        if term or trunc:
            break
    assert term and info["offroad"] and r == -20.0
    assert info["end_reason"] == "offroad"


def test_the_end_reasons_of_the_vector_env_and_the_same_step_final_info():
    from simsci.envs import VectorWorldVectorEnv

    env = VectorWorldVectorEnv(
        2, checkpoint=FakeWorldModel(), max_distance=20.0, autoreset_mode="SameStep"
    )
    env.reset(seed=0)
    for _ in range(30):
        obs, r, term, trunc, info = env.step(np.zeros((2, 2), np.float32))
        if trunc.any():
            break
    assert trunc.all() and list(info["final_info"]["end_reason"]) == ["distance"] * 2
    assert info["final_info"]["_end_reason"].all() and not info["_end_reason"].any()


def test_a_rollout_that_stops_early_says_why():
    res = vectorworld_rollout(FakeWorldModel(ending=True), km=0.2, seed=0, complete=False)
    s = res["stats"]
    assert s["end_reason"] == "left_generated_lanes" and s["distance_m"] < 56.0
    assert s["ego_offroad_steps"] == s["ego_left_lanes_steps"] == 1
    go_on = vectorworld_rollout(
        FakeWorldModel(ending=True), km=0.1, stop_on_failure=False, complete=False
    )
    g = go_on["stats"]
    assert g["end_reason"] == "distance" and g["distance_m"] >= 100.0
    assert g["ego_left_lanes_steps"] == g["ego_offroad_steps"] > 20
    capped = vectorworld_rollout(FakeWorldModel(), km=0.2, max_steps=5, record=False)
    assert capped["stats"]["end_reason"] == "time_limit" and capped["stats"]["steps"] == 5
    with pytest.raises(TypeError, match="unknown world options"):
        vectorworld_rollout(FakeWorldModel(), km=0.1, max_tile=3)


def _fake_cli_rollout(monkeypatch):
    """``simsci rollout vectorworld`` over the road that ends (the CLI's model swapped)."""
    import simsci.envs

    real = simsci.envs.vectorworld_rollout
    monkeypatch.setattr(
        simsci.envs,
        "vectorworld_rollout",
        # the raw lanes: completion would carry the ending road on to the tile's edge
        lambda checkpoint, **kw: real(FakeWorldModel(ending=True), **{**kw, "complete": False}),
    )


def test_cli_rollout_prints_and_records_why_it_stopped(tmp_path, capsys, monkeypatch):
    import json

    from simsci.cli import main

    _fake_cli_rollout(monkeypatch)
    code = main(["rollout", "vectorworld", "--km", "0.2", "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert code == 0 and "DeprecationWarning" not in err
    assert "stopped early, left_generated_lanes: the ego drove past the end" in err
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert stats["end_reason"] == json.loads(out)["end_reason"] == "left_generated_lanes"
    # `simsci driving metrics` on the written drive: the recorder's figures, from the file
    assert main(["driving", "metrics", str(tmp_path / "o" / "rollout.h5")]) == 0
    (drive,) = json.loads(capsys.readouterr().out)["drives"]
    assert drive["steps"] == stats["steps"] and drive["tile_coverage"] == 1.0
    feas = drive["feasibility"]
    assert feas["ego"]["stated_steps"] == stats["ego_steps_checked"] == stats["steps"]
    assert feas["npc"]["path_steps"] == stats["npc_path_steps_checked"]
    assert feas["npc"]["agents"] == stats["npc_agents"] >= 1
    assert drive["seam_endpoints"] == stats["seam_endpoints"]


def test_cli_rollout_has_its_own_parser_and_the_old_order_still_works(
    tmp_path, capsys, monkeypatch
):
    import json

    from simsci.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["rollout", "vectorworld", "--help"])
    text = capsys.readouterr().out
    assert exit_.value.code == 0 and "--keep-going" in text and "end_reason" in text
    assert "(default: auto)" in text
    _fake_cli_rollout(monkeypatch)
    old = ["rollout", "--km", "0.1", "--keep-going", "vectorworld", "--out", str(tmp_path / "a")]
    assert main(old) == 0
    err = capsys.readouterr().err
    assert "DeprecationWarning: 'simsci rollout --km 0.1 vectorworld'" in err
    assert "use 'simsci rollout vectorworld --km 0.1'" in err and "--keep-going" in err
    stats = json.loads((tmp_path / "a" / "stats.json").read_text())
    assert stats["km_requested"] == 0.1 and stats["end_reason"] == "distance"
    both = ["rollout", "--km", "0.1", "vectorworld", "--km", "0.02", "--out", str(tmp_path / "b")]
    assert main(both) == 0  # the new spelling wins
    assert json.loads((tmp_path / "b" / "stats.json").read_text())["km_requested"] == 0.02


def test_world_and_env_follow_the_device(device):
    world = StreamingWorld(FakeWorldModel(device=device), 2, seed=0)
    world.reset()
    _drive(world, 30)
    a, v = world.agents()
    assert a.device.type == device.type and world.lane_points.device.type == device.type
    assert not bool(world.ego_offroad().any()) and int(v.sum()) >= 3
    from simsci.envs import VectorWorldVectorEnv

    env = VectorWorldVectorEnv(
        2, checkpoint=FakeWorldModel(device=device), device=device, array_backend="torch"
    )
    obs, _ = env.reset(seed=0)
    obs, r, term, trunc, info = env.step(torch.zeros(2, 2, device=device))
    assert obs["ego"].device.type == device.type and r.shape == (2,) and not bool(term.any())
    assert isinstance(info["end_reason"], np.ndarray)  # str: numpy on either backend


def test_the_ego_keeps_to_its_lane_where_another_crosses_it():
    """A lane crossing the ego's at 20 degrees, nearer to the ego than its own lane: the
    ego stays on its lane (its observed offset is to its own lane), as the driving
    world's ego does; a fresh association (after a reset) takes the nearest."""
    world = StreamingWorld(FakeWorldModel(), 1, seed=0)
    world.reset()
    own = int(world._ego_lane[0])
    x, y = float(world.x[0, 0]), float(world.y[0, 0])
    world.y[0, 0] = y + 0.4  # 0.4 m left of its lane's centre
    free = int(torch.nonzero(~world.lane_valid[0]).flatten()[0])
    s = np.linspace(-30.0, 30.0, 20)
    a = math.radians(20.0)
    crossing = np.stack([x + s * math.cos(a), y + 0.5 + s * math.sin(a)], -1)
    world.lane_points[0, free] = torch.as_tensor(crossing, dtype=world.dtype)
    world.lane_valid[0, free] = True
    world._associate_ego()
    assert int(world._ego_lane[0]) == own
    assert float(world._ego_offset[0]) == pytest.approx(0.4, abs=1e-4)
    world._ego_known[0] = False
    world._associate_ego()
    assert int(world._ego_lane[0]) == free


def test_crashed_npcs_leave_after_the_step_that_shows_the_crash():
    world = StreamingWorld(FakeWorldModel(), 1, seed=0)
    world.reset()
    x = float(world.x[0, 0]) + 30.0
    for dx in (0.0, 1.0):  # two boxes overlapping 30 m ahead of the ego
        row = np.array([x + dx, -1.75, 10.0, 1.0, 0.0, 4.5, 1.9])
        assert world._add_agent(0, row, check=False)
    agents, valid = world.agents()
    from simsci.driving import metrics

    assert int(metrics.collisions(agents, valid)[0].sum()) == 2  # the state observed
    before = int(world.valid[0].sum())
    world.step(torch.zeros(1, 2))
    assert world.stats["npc_crashed"] == 2 and int(world.valid[0].sum()) == before - 2
    agents, valid = world.agents()
    assert not bool(metrics.collisions(agents, valid).any())


def test_the_crash_screen_removes_exactly_the_overlapping_npcs():
    from simsci.driving import metrics

    rng = np.random.default_rng(0)
    removed = 0
    for trial in range(30):
        world = StreamingWorld(FakeWorldModel(), 1, seed=0)
        world.reset()
        x0 = float(world.x[0, 0]) + 40.0
        rows = []
        if trial % 3 < 2:  # alone: two long boxes end to end, overlapping by 0.1 m or not
            gap = (-0.1, 0.1)[trial % 3]
            th, length = rng.uniform(-math.pi, math.pi), rng.uniform(5, 6)
            c, s = math.cos(th), math.sin(th)
            rows += [[x0, 0.0, 5.0, c, s, length, 1.8]]
            rows += [[x0 + (length + gap) * c, (length + gap) * s, 5.0, c, s, length, 1.8]]
        for _ in range(4 * (trial % 3 == 2)):  # boxes side by side, crossing, or apart
            th = rng.uniform(-math.pi, math.pi)
            rows += [[x0 + rng.uniform(0, 12), rng.uniform(-4, 4), 5.0, math.cos(th)]]
            rows[-1] += [math.sin(th), rng.uniform(3, 6), rng.uniform(1.5, 2.5)]
        for row in rows:
            world._add_agent(0, np.array(row), check=False)
        agents, valid = world.agents()
        crashed = metrics.collisions(agents, valid)
        crashed[:, 0] = False
        expected = world.valid & ~crashed
        world._clear_crashes()
        assert torch.equal(world.valid, expected), trial
        removed += int(crashed.sum())
    assert removed > 0  # the trials do overlap


def test_an_npc_stopped_for_20_s_leaves():
    from simsci.models.vectorworld._world import STALL_STEPS

    world = StreamingWorld(FakeWorldModel(), 1, seed=0)
    world.reset()
    world.valid[0, 1:] = False
    row = np.array([float(world.x[0, 0]) + 40.0, -1.75, 0.0, 1.0, 0.0, 4.5, 1.9])
    assert world._add_agent(0, row, check=False)
    j = int(torch.nonzero(world.valid[0]).flatten()[-1])
    npc_step = world.model.npc.step

    def stopped(*args, **kw):  # ΔSim that keeps this NPC where it is
        new, feats = npc_step(*args, **kw)
        new.x[0, j], new.y[0, j], new.v[0, j] = world.x[0, j], world.y[0, j], 0.0
        feats.path_left[0, j] = 50.0  # with road ahead: not "at the end of its lane"
        return new, feats

    world.model.npc.step = stopped
    steps = 0
    while bool(world.valid[0, j]) and steps < STALL_STEPS + 5:
        world.step(torch.tensor([[-8.0, 0.0]]))  # the ego brakes to a stop behind it
        steps += 1
    assert world.stats["npc_stalled"] == 1 and steps == STALL_STEPS


def test_initial_agents_on_a_collision_course_with_the_ego_are_screened():
    from simsci.models.vectorworld._world import _on_collision_course

    ego = np.array([0.0, 0.0, 8.0, 1.0, 0.0, 4.6, 1.9])
    c, s = math.cos(math.radians(15)), math.sin(math.radians(15))
    agents = np.array(
        [
            [-20.0, 0.0, 16.0, 1.0, 0.0, 4.5, 1.9],  # behind, faster, same line: meets it
            [-10.0, -3.0, 12.0, c, s, 4.5, 1.9],  # converging from behind right
            [30.0, 0.0, 10.0, 1.0, 0.0, 4.5, 1.9],  # ahead, pulling away
            [0.0, 3.5, 8.0, 1.0, 0.0, 4.5, 1.9],  # beside, next lane, same speed
        ]
    )
    np.testing.assert_array_equal(_on_collision_course(agents, ego), [True, True, False, False])
    assert _on_collision_course(np.zeros((0, 7)), ego).shape == (0,)
    # a head-on pair closing at 28 m/s, 21 m apart (an opening that crashed in 0.7 s):
    # checked every 0.5 s the two boxes pass through each other unseen
    th = math.radians(160.0)
    ego = np.array([0.0, 0.0, 15.0, 1.0, 0.0, 4.6, 1.9])
    head_on = np.array([[21.0, -1.8, 13.0, math.cos(th), math.sin(th), 4.4, 1.9]])
    assert _on_collision_course(head_on, ego)[0]
    assert not _on_collision_course(head_on, ego, step=0.5)[0]


def test_tile_vehicles_come_from_the_vae_or_the_generator():
    assert StreamingWorld(FakeWorldModel(), 1).tile_agents == "generator"
    vae = StreamingWorld(FakeWorldModel(), 1, seed=0, tile_agents="vae")
    vae.reset()
    _drive(vae, 40, accel=1.0)
    # every tile closed so far (the opening's east tile and the streamed ones) was filled
    # by the VAE's count head, one vehicle a tile here
    assert vae.stats["tile_agents_drawn"] == vae.stats["tiles"] - 1 >= 2
    # "generator": the VAE places as many as the generator drew, on the final lanes; the
    # generator's own tokens (here two a tile, across the road) are not used
    model = FakeWorldModel()
    plain = model.tiles.generate

    def two_across(*a, **kw):
        tiles, st = plain(*a, **kw)
        for t in tiles:
            t["agents"] = np.array([[20.0, 6.0, 12.0, 0.0, 1.0, 4.5, 1.9]] * 2)
        return tiles, st

    model.tiles.generate = two_across
    gen = StreamingWorld(model, 1, seed=0)
    gen.reset()
    _drive(gen, 40, accel=1.0)
    assert gen.stats["tile_agents_drawn"] == 2 * (gen.stats["tiles"] - 1) >= 4
    assert gen.stats["spawned"] >= 2
    streamed = [r["tile"]["agents"] for c, r in gen.store[0].items() if c != (0, 0)]
    placed = np.concatenate(streamed)
    assert len(placed) == 2 * len(streamed)  # on the south lane, along it
    assert np.all(placed[:, 1] == -1.75) and np.all(placed[:, 3] == 1.0)
    with pytest.raises(ValueError, match="tile_agents must be one of"):
        StreamingWorld(FakeWorldModel(), 1, tile_agents="data")


def test_npcs_see_the_valid_lanes_packed_with_their_links():
    world = StreamingWorld(FakeWorldModel(), 2, seed=0)
    world.reset()
    _drive(world, 30, accel=1.0)
    lanes, to_compact, to_full = world._packed_lanes()
    valid = world.lane_valid
    K = int(valid.sum(1).max())
    assert lanes.points.shape[:2] == (2, K) and int(lanes.valid.sum()) == int(valid.sum())
    for b in range(2):
        ids = torch.nonzero(valid[b]).flatten()
        assert torch.equal(to_full[b, : len(ids)], ids)  # slot order kept
        assert torch.equal(to_compact[b, ids], torch.arange(len(ids)))
        assert bool((to_compact[b][~valid[b]] == -1).all())
        assert torch.equal(lanes.points[b, : len(ids)], world.lane_points[b, ids])
        # a packed successor is the same lane as the slot's successor
        full = world.lane_succ[b, ids]
        back = torch.where(
            lanes.succ[b, : len(ids)] >= 0, to_full[b][lanes.succ[b, : len(ids)]], -1
        )
        assert torch.equal(back, full)


def test_the_packed_lanes_are_kept_until_a_lane_tensor_changes():
    world = StreamingWorld(FakeWorldModel(), 2, seed=0)
    world.reset()
    _drive(world, 5, accel=1.0)
    first = world._packed_lanes()
    assert world._packed_lanes() is first  # nothing changed: the same LaneSet (and geometry)
    ids = torch.nonzero(world.lane_valid[1]).flatten()
    world.lane_width[1, ids[0]] = 4.25  # any in-place write, wherever it is made
    second = world._packed_lanes()
    assert second is not first and float(second[0].width[1, 0]) == 4.25
    tiles = world.stats["tiles"]
    _drive(world, 60, accel=1.0)  # new tiles change the lanes through _insert / _connect
    assert world.stats["tiles"] > tiles
    lanes = world._packed_lanes()[0]
    assert int(lanes.valid.sum()) == int(world.lane_valid.sum())
    for b in range(2):
        ids = torch.nonzero(world.lane_valid[b]).flatten()
        assert torch.equal(lanes.points[b, : len(ids)], world.lane_points[b, ids])
    with torch.inference_mode():  # inference tensors have no version counter: no cache
        made = StreamingWorld(FakeWorldModel(), 1, seed=0)
        made.reset()
        _drive(made, 5, accel=1.0)
    assert made._packed_lanes() is not made._packed_lanes()


def test_the_ego_association_on_packed_lanes_is_the_one_over_every_slot():
    class AllSlots(StreamingWorld):  # the association over every lane slot (before)
        def _associate_ego(self, rows=None):
            ident = torch.arange(self.L).expand(self.n, self.L)
            self._packed_lanes = lambda: (self.lane_set(), ident, ident)
            try:
                super()._associate_ego(rows)
            finally:
                del self._packed_lanes

    worlds = [cls(FakeWorldModel(), 3, max_tiles=3, seed=1) for cls in (StreamingWorld, AllSlots)]
    gen = torch.Generator().manual_seed(0)
    fields = ("_ego_lane", "_ego_known", "_ego_offset", "_ego_heading_err", "_ego_offroad")
    for w in worlds:
        w.reset()
    dropped = 0
    for t in range(120):
        action = torch.stack([torch.rand(3, generator=gen), 0.3 * torch.randn(3, generator=gen)], 1)
        for w in worlds:
            w.step(action)
            if t % 40 == 39:  # a reset of some worlds only (rows)
                w.reset(index=[1])
        for name in fields + ("_ego_tangent",):
            assert torch.equal(getattr(worlds[0], name), getattr(worlds[1], name)), (t, name)
        dropped = worlds[0].stats["dropped_tiles"]
    assert dropped > 0 and bool(worlds[0]._ego_known.any())
