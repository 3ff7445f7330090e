"""simsci/Driving-v0: gymnasium conformance, batched vector env, rewards, failures, bad input."""

import warnings

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

import simsci.envs  # noqa: F401
from simsci.envs import DrivingEnv, DrivingVectorEnv

KW = {"num_roads": 2, "route_length": 1500.0}
ID = "simsci/Driving-v0"


def _flat(obs):
    return np.concatenate([np.ravel(obs[k]) for k in sorted(obs)])


def test_check_env_and_render():
    env = gymnasium.make(ID, render_mode="rgb_array", **KW)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # unbounded boxes, physical units
        check_env(env.unwrapped, skip_render_check=True)
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (256, 256, 3) and frame.dtype == np.uint8
    # the ego is drawn green at the centre
    assert tuple(frame[128, 128]) == (40, 200, 80)


def test_same_seed_same_rollout_and_spaces():
    def rollout(seed):
        env = gymnasium.make(ID, **KW)
        rng = np.random.default_rng(0)
        obs, _ = env.reset(seed=seed)
        out = [_flat(obs)]
        for _ in range(15):
            assert env.observation_space.contains(obs)
            obs, r, *_ = env.step(rng.uniform([-1, -0.05], [1, 0.05]).astype(np.float32))
            out += [_flat(obs), [r]]
        return np.concatenate(out)

    a, b, c = rollout(3), rollout(3), rollout(4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_vector_env_of_one_equals_the_single_env():
    single = gymnasium.make(ID, **KW)
    vec = gymnasium.make_vec(ID, num_envs=1, vectorization_mode="vector_entry_point", **KW)
    o1, _ = single.reset(seed=5)
    o2, _ = vec.reset(seed=5)
    np.testing.assert_array_equal(_flat(o1), _flat({k: v[0] for k, v in o2.items()}))
    for _ in range(5):
        a = np.array([0.3, 0.01], np.float32)
        s, v = single.step(a), vec.step(a[None])
        np.testing.assert_array_equal(_flat(s[0]), _flat({k: x[0] for k, x in v[0].items()}))
        assert s[1] == v[1][0]


def test_batched_vector_env_autoresets_and_torch_backend():
    env = DrivingVectorEnv(8, array_backend="torch", max_episode_steps=5, **KW)
    obs, info = env.reset(seed=0)
    assert obs["agents"].shape == (8, 16, 7) and obs["lanes"].shape == (8, 8, 20, 2)
    assert isinstance(obs["ego"], torch.Tensor)
    a = torch.zeros(8, 2)
    for _ in range(5):
        _, reward, term, trunc, info = env.step(a)
    assert bool(trunc.all()) and not bool(term.any())
    _, reward, term, trunc, info = env.step(a)  # NextStep: this step resets
    assert bool((reward == 0).all()) and not bool(trunc.any())
    assert bool((info["t"] == 0).all())


def test_progress_reward_and_distance():
    env = DrivingEnv(**KW)
    env.reset(seed=1)
    total, dist = 0.0, 0.0
    for _ in range(20):
        _, r, term, trunc, info = env.step(np.array([0.0, 0.0], np.float32))
        assert not term
        total += r
    dist = info["distance"]
    assert dist > 20.0  # the ego moves at ~20 m/s
    assert total == pytest.approx(0.1 * dist, rel=0.05)  # progress reward, little jerk


def test_leaving_the_road_terminates_with_the_failure_reward():
    env = DrivingEnv(**KW)
    env.reset(seed=2)
    for _ in range(100):
        _, r, term, trunc, info = env.step(np.array([0.0, 0.5], np.float32))
        if term:
            break
    assert term and info["offroad"] and r == -20.0
    with pytest.raises(gymnasium.error.ResetNeeded, match="reset"):
        env.step(np.zeros(2, np.float32))


def test_collision_terminates():
    env = DrivingEnv(traffic={"density": 0.0}, **KW)
    env.reset(seed=0)
    tr = env._vec.world.traffic
    lane = int(tr.state.lane[0, 0])
    s = float(tr.state.s[0, 0])
    road = tr.pool.roads[int(tr.net[0])]
    # a stopped car 30 m ahead on the ego's lane (or its successor)
    if s + 30 < road.length[lane]:
        slot = tr.place(0, [lane], [s + 30], [0.0])
    else:
        nxt = int(tr.state.nxt[0, 0, 0])
        slot = tr.place(0, [nxt], [s + 30 - road.length[lane]], [0.0])
    tr.state.v_factor[0, slot] = 0.0
    for _ in range(60):
        _, r, term, trunc, info = env.step(np.array([2.0, 0.0], np.float32))
        if term:
            break
    assert term and info["collision"] and not info["offroad"] and r == -20.0


def test_bad_input():
    env = DrivingEnv(**KW)
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step(np.zeros(2, np.float32))
    env.reset(seed=0)
    with pytest.raises(ValueError, match="NaN"):
        env.step(np.array([np.nan, 0.0], np.float32))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(3, np.float32))
    strict = DrivingEnv(action_bounds="error", **KW)
    strict.reset(seed=0)
    with pytest.raises(ValueError, match="outside the action space"):
        strict.step(np.array([9.0, 0.0], np.float32))
    with pytest.raises(ValueError, match="does not fit on a route"):
        DrivingEnv(max_distance=5000.0, **KW)
    with pytest.raises(ValueError, match="cannot fit on the road"):
        DrivingEnv(traffic={"density": 900.0}, **KW)
    with pytest.raises(Exception, match="unknown traffic parameter"):
        DrivingEnv(traffic={"dens": 1.0}, **KW)
    with pytest.raises(ValueError, match="num_envs"):
        DrivingVectorEnv(0, **KW)


def test_ego_collisions_shortcut_agrees_with_the_box_test():
    """ego_collisions skips the separating-axis test when no vehicle is close enough to
    touch the ego: the same answers as running it on every vehicle."""
    import math

    from simsci.driving.metrics import _sat
    from simsci.envs._driving import ego_collisions

    g = torch.Generator().manual_seed(0)
    for n in (1, 1, 1, 64):
        for _ in range(30):
            V = 32
            x = torch.rand(n, V, generator=g) * 30 - 15 + 1000.0 * torch.rand(n, 1, generator=g)
            y = torch.rand(n, V, generator=g) * 30 - 15 - 500.0
            th = torch.rand(n, V, generator=g) * 2 * math.pi
            length = 1 + 12 * torch.rand(n, V, generator=g)
            width = 0.5 + 3 * torch.rand(n, V, generator=g)
            speed = 30 * torch.rand(n, V, generator=g)
            agents = torch.stack([x, y, speed, th.cos(), th.sin(), length, width], -1)
            valid = torch.rand(n, V, generator=g) < 0.8
            rel = agents.clone()
            rel[..., :2] = rel[..., :2] - agents[:, :1, :2]
            want = (_sat(rel[:, :1], rel[:, 1:]) & valid[:, 1:]).any(1)
            assert torch.equal(ego_collisions(agents, valid), want)


def _driver_obs(*agents, speed=15.0, steer=0.0):
    """One Dict observation: the ego at ``speed`` on its lane's centre, steering ``steer``,
    and ``agents`` = (x, y, speed, relative heading in degrees) in its frame."""
    ego = np.array([speed, 0.0, steer, 0.0, 0.0, 3.5, 20.0, 0.0], np.float32)
    rows = np.zeros((8, 7), np.float32)
    mask = np.zeros(8, np.float32)
    for k, (x, y, v, deg) in enumerate(agents):
        th = np.radians(deg)
        rows[k] = (x, y, v, np.cos(th), np.sin(th), 4.6, 1.9)
        mask[k] = 1.0
    return {"ego": ego, "agents": rows, "agents_mask": mask}


def test_lane_keeping_driver_brakes_for_what_reaches_into_its_path():
    from simsci.envs import lane_keeping_policy

    free = lane_keeping_policy(_driver_obs())[0]
    assert free > 0  # below the limit, nothing ahead: it speeds up
    # a stopped car 20 m ahead nosing in from the right at 40 degrees: its centre is
    # 2.6 m off the lane (outside the lane band) but its front corner is in the path
    nosing = lane_keeping_policy(_driver_obs((20.0, -2.6, 0.0, 40.0)))[0]
    assert nosing < -1.0
    # the same car parallel to the lane, its side 1.6 m from the ego's path: ignored
    beside = lane_keeping_policy(_driver_obs((20.0, -2.6, 0.0, 0.0)))[0]
    assert beside == pytest.approx(free)
    # a car crossing 35 m ahead: the ego brakes as for a standstill (its speed along the
    # ego's heading is 0), not as for a leader doing 10 m/s
    crossing = lane_keeping_policy(_driver_obs((35.0, 0.0, 10.0, 90.0)))[0]
    leader = lane_keeping_policy(_driver_obs((35.0, 0.0, 10.0, 0.0)))[0]
    assert crossing < leader < 0
    # at 5 m/s, an oncoming car 30 m ahead in the path makes it brake, a stopped one there
    # only slows its acceleration
    oncoming = lane_keeping_policy(_driver_obs((30.0, 0.5, 10.0, 180.0), speed=5.0))[0]
    stopped = lane_keeping_policy(_driver_obs((30.0, 0.5, 0.0, 0.0), speed=5.0))[0]
    assert oncoming < 0 < stopped


def test_lane_keeping_driver_ignores_the_other_lane_of_a_bending_road():
    from simsci.envs import lane_keeping_policy

    free = lane_keeping_policy(_driver_obs())[0]
    # 70 m ahead the road bends left and its oncoming lane crosses the ego's heading
    # line: the car there is beyond the checked path and goes the other way
    assert lane_keeping_policy(_driver_obs((70.0, 1.0, 15.0, 175.0)))[0] == pytest.approx(free)
    # a car going the ego's way there is its leader (the lane band reaches 100 m), and so
    # is a standing one, whichever way it faces
    assert lane_keeping_policy(_driver_obs((70.0, 1.0, 5.0, -5.0)))[0] < free
    assert lane_keeping_policy(_driver_obs((70.0, 1.0, 0.0, 175.0)))[0] < free
    # steering left (a bend of ~34 m radius): a standing car where the kinematic bicycle
    # takes the ego in 3 s is in its path; one where the parabola y = kappa x^2 / 2 (the
    # circle's small-angle form) puts that point, 4 m off the path, is not
    from simsci.driving import bicycle_step

    steer = 0.08
    t64 = lambda v: torch.tensor([v], dtype=torch.float64)  # noqa: E731
    x, y, th, v = t64(0.0), t64(0.0), t64(0.0), t64(10.0)
    for _ in range(30):
        x, y, th, v, _, _ = bicycle_step(x, y, th, v, t64(0.0), t64(steer), t64(4.6))
    on_path = (float(x[0]), float(y[0]), 0.0, float(np.degrees(th[0])))
    kappa = np.sin(np.arctan(0.5 * np.tan(steer))) / (0.3 * 4.6)
    parabola = (float(x[0]), 0.5 * kappa * float(x[0]) ** 2, 0.0, float(np.degrees(th[0])))
    assert on_path[1] - parabola[1] > 3.5
    assert lane_keeping_policy(_driver_obs(on_path, speed=10.0, steer=steer))[0] < -1.0
    free = lane_keeping_policy(_driver_obs(speed=10.0, steer=steer))[0]
    assert lane_keeping_policy(_driver_obs(parabola, speed=10.0, steer=steer))[0] == free
    straight = lane_keeping_policy(_driver_obs((30.0, -3.0, 0.0, 0.0), steer=steer))[0]
    assert straight > 0


def test_lane_keeping_driver_yields_to_crossing_traffic_it_would_meet():
    from simsci.envs import lane_keeping_policy

    free = lane_keeping_policy(_driver_obs(speed=10.0))[0]
    # a car 30 m to the right of the ego's lane 30 m ahead, crossing at 10 m/s: both
    # keeping speed, they reach the crossing in 3 s, so the ego brakes now
    meets = _driver_obs((30.0, -30.0, 10.0, 90.0), speed=10.0)
    assert lane_keeping_policy(meets)[0] < -1.0
    # braked for where they would meet: the box's near side, 30 m less its half width
    # less the ego's 2.3 m to its bumper
    assert _conflict(meets)[0] == pytest.approx(30.0 - 0.95 - 2.3)
    assert np.isinf(_conflict(meets)[1:]).all()
    # the same car driving away, or one that clears the crossing 60 m ahead long before
    # the ego gets there: nothing to yield to
    away = lane_keeping_policy(_driver_obs((30.0, -30.0, 10.0, -90.0), speed=10.0))[0]
    clears = lane_keeping_policy(_driver_obs((60.0, -3.0, 10.0, 90.0), speed=10.0))[0]
    assert away == pytest.approx(free) and clears == pytest.approx(free)
    # a fast crossing car is not stepped over between the 0.25 s samples: at 34 m/s it
    # crosses the 2.5 m path band in less than one step
    for v_car in (20.0, 26.0, 30.0, 34.0):
        fast = _driver_obs((10.0 * 2.125, -v_car * 2.125, v_car, 90.0), speed=10.0)
        assert np.isfinite(_conflict(fast)[0]), v_car
    # a stopped ego 3 m before a crossing car's path, the car 2 s away: speeding up it
    # would be there then, so it only creeps up to the IDM's 2 m short of where they
    # would meet; once the car has passed it moves off at full acceleration
    coming = _driver_obs((6.25, -24.0, 12.0, 90.0), speed=0.0)
    assert _conflict(coming)[0] == pytest.approx(3.0)
    passed = lane_keeping_policy(_driver_obs((6.25, 6.0, 12.0, 90.0), speed=0.0))[0]
    assert passed == pytest.approx(1.5)
    assert lane_keeping_policy(coming)[0] == pytest.approx(1.5 * (1 - (2.0 / 3.0) ** 2))


def _conflict(obs):
    """The conflict rule's gaps ``(m,)`` for one :func:`_driver_obs` observation (every
    observed car a candidate)."""
    from simsci.envs._driving import _arc_frame, _conflict_gap

    ego = obs["ego"].astype(np.float64)
    agents = obs["agents"][None].astype(np.float64)
    return _conflict_gap(
        agents, obs["agents_mask"][None] > 0.5, ego[None, 0], ego[None, 6],
        _arc_frame(agents, ego[None, 2]),
    )[0]  # fmt: skip


def test_lane_keeping_driver_does_not_yield_to_cars_behind_or_oncoming_on_a_bend():
    from simsci.envs import lane_keeping_policy
    from simsci.envs._driving import _EGO_LR

    # a faster car coming up behind in the ego's lane: its business, not the ego's
    for v, x in ((0.0, -12.0), (10.0, -12.0), (20.0, -30.0)):
        free = lane_keeping_policy(_driver_obs(speed=v))[0]
        assert lane_keeping_policy(_driver_obs((x, 0.0, v + 8.0, 0.0), speed=v))[0] == free
    # an oncoming car on the inner lane of a left bend (radius 100 m) the ego steers
    # along: carried straight on it would cut across the ego's arc, but it keeps its lane
    # (the ego's centre goes round the circle of radius 100 m about (-l_r, R cos(beta)),
    # beta its slip, heading beta to the circle's tangent; the car 3.5 m inside it)
    radius = 100.0
    beta = np.arcsin(_EGO_LR / radius)
    steer = np.arctan(2.0 * np.tan(beta))
    centre = np.array([-_EGO_LR, radius * np.cos(beta)])
    free = lane_keeping_policy(_driver_obs(speed=15.0, steer=steer))[0]
    for s in range(10, 95, 5):
        phi = s / radius - beta  # from the ego's own angle about the centre
        x, y = centre + (radius - 3.5) * np.array([np.sin(phi + beta), -np.cos(phi + beta)])
        car = (x, y, 13.0, np.degrees(phi + beta) + 180.0)
        assert lane_keeping_policy(_driver_obs(car, speed=15.0, steer=steer))[0] == free


def _bend_lanes(radius=60.0):
    """Two 20-point lanes (ego frame) continuing each other along a left bend of
    ``radius`` from the ego, 40 m each, in the Dict layout."""
    phi = np.linspace(0.0, 40.0 / radius, 20)
    first = np.stack([radius * np.sin(phi), radius * (1 - np.cos(phi))], -1)
    phi2 = phi + 40.0 / radius
    second = np.stack([radius * np.sin(phi2), radius * (1 - np.cos(phi2))], -1)
    lanes = np.zeros((4, 20, 2), np.float32)
    lanes[0], lanes[1] = second, first  # any order: the ego's is found, then its successor
    return lanes, np.array([1, 1, 0, 0], np.float32)


def test_lane_keeping_driver_sees_a_slow_car_ahead_on_its_bending_lane():
    from simsci.envs import lane_keeping_policy
    from simsci.envs._driving import _lane_path, _lane_path_gap

    radius, s = 60.0, 60.0  # the car 60 m along the bend: on the second lane
    phi = s / radius
    car = (radius * np.sin(phi), radius * (1 - np.cos(phi)), 2.0, np.degrees(phi))
    assert car[1] > 20.0  # far off the ego's heading line and steering arc (steer 0)
    obs = _driver_obs(car, speed=20.0)
    free = lane_keeping_policy(_driver_obs(speed=20.0))[0]
    # without the lanes the car is not seen as in the ego's way
    assert lane_keeping_policy(obs)[0] == pytest.approx(free)
    obs["lanes"], obs["lanes_mask"] = _bend_lanes(radius)
    assert lane_keeping_policy(obs)[0] < -1.0
    # braked for at its distance along the lane: 60 m less its half length, less the
    # ego's 2.3 m to its bumper (the polyline's chords a few cm short of the arc)
    gap, lane_cos = _lane_path_gap(obs["agents"][None].astype(np.float64), _lane_path(
        obs["lanes"][None].astype(np.float64), obs["lanes_mask"][None], np.zeros(1)))  # fmt: skip
    assert gap[0, 0] == pytest.approx(60.0 - 2.3 - 2.3, abs=0.1)
    assert lane_cos[0, 0] == pytest.approx(1.0, abs=1e-3)
    # the same car on the lane beside (3.5 m to the right along the bend): not a leader
    beside = (
        (radius + 3.5) * np.sin(phi), radius - (radius + 3.5) * np.cos(phi), 2.0, np.degrees(phi)
    )  # fmt: skip
    obs = _driver_obs(beside, speed=20.0)
    obs["lanes"], obs["lanes_mask"] = _bend_lanes(radius)
    assert lane_keeping_policy(obs)[0] == pytest.approx(free)


def test_lane_keeping_drivers_lane_goes_straight_on_at_a_fork_and_past_repeated_points():
    from simsci.envs._driving import _lane_path

    def line(x0, x1, y=0.0):
        return np.stack([np.linspace(x0, x1, 20), np.full(20, y)], -1)

    phi = np.linspace(0.0, 30.0 / 25.0, 20)
    right = np.stack([40.0 + 25.0 * np.sin(phi), -25.0 + 25.0 * np.cos(phi)], -1)
    own = line(0.0, 40.0)
    own[-3:-1] = own[-1]  # its end point repeated: the successor still follows
    lanes = np.zeros((1, 4, 20, 2))
    lanes[0, 0], lanes[0, 1], lanes[0, 2] = own, right, line(40.0, 80.0)
    lanes[0, 3] = line(0.0, 80.0, y=-3.5)  # the lane beside it
    path = _lane_path(lanes, np.ones((1, 4)), np.zeros(1))[0]
    assert path[-1] == pytest.approx([80.0, 0.0])  # straight on, not the right branch
    # the ego 3 m right of its lane's centre (offset -3: the centre 3 m to its left) is
    # nearer the lane beside it, but keeps to its own
    path = _lane_path(lanes - [0.0, -3.0], np.ones((1, 4)), np.full(1, -3.0))[0]
    assert path[0][1] == pytest.approx(3.0)
