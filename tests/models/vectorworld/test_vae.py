"""Motion-aware gated VAE for initial agents (simsci.models.vectorworld._vae)."""

import json

import numpy as np
import pytest
import torch

from simsci.driving.metrics import (
    boxes_overlap,
    collisions,
    infeasible_steps,
    offroad_distance,
)
from simsci.models.vectorworld._vae import (
    DT,
    EDGE_KINDS,
    LANE_FEATURES,
    MAX_ACCEL,
    MAX_CURVATURE,
    MotionGatedVAE,
    TileAgents,
    check_lanes,
    collate_tiles,
    history_controls,
    integrate_history,
    lane_edges,
    place_on_lanes,
    project_to_lanes,
    scene_init_metrics,
    train_vae,
)
from simsci.train import load_model, save_model

TINY = {"hidden": 16, "latent": 4, "gnn_layers": 1, "s_bins": 4, "v_bins": 8, "v_max": 32.0}


def straight_lanes(ys=(-3.5, 0.0, 3.5), x0=-32.0, x1=32.0, reverse=()):
    """Parallel lanes along x (20 points each); lanes whose index is in reverse run -x."""
    xs = np.linspace(x0, x1, 20)
    pts = np.stack([np.stack([xs, np.full(20, y)], -1) for y in ys])
    for i in reverse:
        pts[i] = pts[i, ::-1]
    n = len(ys)
    return {
        "points": pts,
        "width": np.full(n, 3.5),
        "speed_limit": np.full(n, 20.0),
        "kind": np.zeros(n, np.int64),
    }


def synthetic_episode(rng, n_tiles=3, n_agents=4):
    """A read_scene-like episode: straight lanes, agents driving along them (bicycle
    histories from integrate_history), agent 0 the ego; the last tile has no other agent."""
    lanes = straight_lanes(reverse=(0,))
    A = n_agents + 1
    agents = np.full((n_tiles, A, 11, 7), np.nan, np.float32)
    valid = np.zeros((n_tiles, A), bool)
    hvalid = np.zeros((n_tiles, A, 11), bool)
    for k in range(n_tiles):
        count = A if k < n_tiles - 1 else 1
        xs = np.linspace(-25, 25, count) + rng.uniform(-2, 2)
        lane_of = rng.integers(0, 3, count)
        lane_of[0] = 1
        cur = []
        for j in range(count):
            y = (-3.5, 0.0, 3.5)[lane_of[j]] + rng.normal(0, 0.2)
            th = np.pi if lane_of[j] == 0 else 0.0
            v = rng.uniform(5, 20)
            cur.append([xs[j], y, v, np.cos(th), np.sin(th), rng.uniform(4.2, 5.2), 1.9])
        cur = torch.tensor(cur, dtype=torch.float64)
        ctrl = torch.zeros(count, 10, 2, dtype=torch.float64)
        ctrl[..., 0] = torch.from_numpy(rng.normal(0, 0.5, (count, 1)))
        hist, _ = integrate_history(cur, ctrl)
        agents[k, :count] = hist.numpy()
        valid[k, :count] = True
        hvalid[k, :count] = True
        if k == 0:
            hvalid[k, :count, :-1] = False  # an episode's first tile: only the current frame
            agents[k, :count, :-1] = np.nan
    return {
        "agents": agents,
        "agents_valid": valid,
        "agents_history_valid": hvalid,
        "lanes": [dict(lanes) for _ in range(n_tiles)],
    }


@pytest.fixture(scope="module")
def episodes():
    rng = np.random.default_rng(0)
    return [synthetic_episode(rng) for _ in range(4)]


@pytest.fixture(scope="module")
def dataset(episodes):
    return TileAgents(episodes)


def tiny_model(seed=0, **kw):
    torch.manual_seed(seed)
    return MotionGatedVAE(**{**TINY, **kw})


# ------------------------------------------------------------------ kinematics
def test_backward_integration_is_exact_and_feasible():
    g = torch.Generator().manual_seed(1)
    n = 64
    cur = torch.zeros(n, 7, dtype=torch.float64)
    cur[:, :2] = torch.randn(n, 2, generator=g, dtype=torch.float64) * 10
    th = torch.rand(n, generator=g, dtype=torch.float64) * 6.28
    cur[:, 2] = torch.rand(n, generator=g, dtype=torch.float64) * 30
    cur[:3, 2] = torch.tensor([0.0, 0.05, 0.3])  # near-stopped: speeds clamp at 0
    cur[:, 3], cur[:, 4] = torch.cos(th), torch.sin(th)
    cur[:, 5], cur[:, 6] = 4.7, 1.9
    ctrl = torch.stack(
        [
            (torch.rand(n, 10, generator=g, dtype=torch.float64) * 2 - 1) * MAX_ACCEL,
            (torch.rand(n, 10, generator=g, dtype=torch.float64) * 2 - 1) * MAX_CURVATURE,
        ],
        -1,
    )
    hist, eff = integrate_history(cur, ctrl)
    assert hist.shape == (n, 11, 7) and eff.shape == (n, 10, 2)
    assert torch.equal(hist[:, -1], cur)  # the current state itself, bit for bit
    assert (hist[..., 2] >= 0).all() and (eff[..., 0].abs() <= MAX_ACCEL + 1e-9).all()
    # forward re-integration of the bicycle from the oldest frame reproduces every frame
    x, y, v = hist[:, 0, 0], hist[:, 0, 1], hist[:, 0, 2]
    theta = torch.atan2(hist[:, 0, 4], hist[:, 0, 3])
    for j in range(10):
        a, k = eff[:, j, 0], eff[:, j, 1]
        v = v + a * DT
        theta = theta + v * k * DT
        beta = torch.asin(k * 0.3 * cur[:, 5])
        x = x + v * DT * torch.cos(theta + beta)
        y = y + v * DT * torch.sin(theta + beta)
        ref = hist[:, j + 1]
        torch.testing.assert_close(torch.stack([x, y, v]), ref[:, :3].T, atol=1e-10, rtol=0)
        torch.testing.assert_close(torch.cos(theta), ref[:, 3], atol=1e-10, rtol=0)
        torch.testing.assert_close(torch.sin(theta), ref[:, 4], atol=1e-10, rtol=0)
    # the controls read back from the history are the effective ones; no infeasible step
    back, sv = history_controls(hist.numpy())
    moving = hist[:, 1:, 2].numpy() * DT >= 1e-3
    np.testing.assert_allclose(back[..., 0], eff[..., 0].numpy(), atol=1e-9)
    np.testing.assert_allclose(back[..., 1][moving], eff[..., 1].numpy()[moving], atol=1e-8)
    assert sv.all() and not infeasible_steps(hist.numpy()).any()
    # |p_T - p_{T-1}| = v_T dt: the current speed agrees with the last step
    step = torch.linalg.vector_norm(hist[:, -1, :2] - hist[:, -2, :2], dim=-1)
    torch.testing.assert_close(step, cur[:, 2] * DT, atol=1e-12, rtol=0)


def test_lane_coordinates_round_trip():
    t = np.linspace(0, 1.2, 20)
    arc = np.stack([30 * np.sin(t) - 15, 30 * (1 - np.cos(t)) - 10], -1)
    lanes = {"points": arc[None], "width": np.array([3.5])}
    g = torch.Generator().manual_seed(0)
    # the arc is sampled evenly (19 equal chords): s in the middle half of a chord keeps
    # the foot point inside that segment, where the two maps are exact inverses
    k = torch.randint(0, 19, (50,), generator=g).double()
    s = (k + 0.25 + 0.5 * torch.rand(50, generator=g, dtype=torch.float64)) / 19
    d = (torch.rand(50, generator=g, dtype=torch.float64) - 0.5) * 3
    psi = (torch.rand(50, generator=g, dtype=torch.float64) - 0.5) * 0.4
    pts = torch.from_numpy(arc)[None].expand(50, -1, -1)
    xy, heading = place_on_lanes(pts, s, d, psi)
    pr = project_to_lanes(xy.numpy(), heading.numpy(), lanes["points"], lanes["width"])
    np.testing.assert_allclose(pr["s"], s.numpy(), atol=1e-9)
    np.testing.assert_allclose(pr["d"], d.numpy(), atol=1e-9)
    np.testing.assert_allclose(pr["psi"], psi.numpy(), atol=1e-9)
    np.testing.assert_allclose(pr["dist"], d.abs().numpy(), atol=1e-9)
    # an oncoming lane is not chosen even when it is as close
    two = straight_lanes(ys=(-1.0, 1.0), reverse=(1,))
    pr = project_to_lanes([[0.0, 0.0], [0.0, 0.0]], [0.0, np.pi], two["points"], two["width"])
    assert pr["lane"].tolist() == [0, 1]


def test_lane_edges_follow_geometry():
    xs = np.linspace(-30, 0, 20)
    a = np.stack([xs, np.zeros(20)], -1)
    b = np.stack([xs + 30.3, np.zeros(20)], -1)  # starts 0.3 m after a ends: successor
    c = np.stack([xs, np.full(20, 3.5)], -1)  # beside a: neighbour
    far = np.stack([xs, np.full(20, 30.0)], -1)  # nothing within 10 m of a or c
    ei, et, ea = lane_edges(np.stack([a, b, c, far]))
    edges = {(int(s), int(d), EDGE_KINDS[t]) for s, d, t in zip(ei[0], ei[1], et)}
    assert (1, 0, "successor") in edges and (0, 1, "predecessor") in edges
    assert (2, 0, "neighbour") in edges and (0, 2, "neighbour") in edges
    assert not any(3 in (s, d) for s, d, _ in edges)
    assert (0, 1, "neighbour") not in edges and ea.shape == (len(et), 9)
    assert np.all(np.diff(et) >= 0)  # sorted by type


# ------------------------------------------------------------------ data
def test_dataset_and_collate(dataset, episodes):
    assert len(dataset) == 4 * 2 and dataset.skipped == 4  # last tile of each: ego only
    batch = collate_tiles([dataset[i] for i in range(3)])
    n_lanes, n_agents = 3 * 3, 3 * 4
    assert batch["lane_x"].shape == (n_lanes, LANE_FEATURES)
    assert batch["lane_points"].shape == (n_lanes, 20, 2)
    assert batch["cur"].shape == (n_agents, 7) and batch["hist"].shape == (n_agents, 80)
    assert batch["ctrl"].shape == (n_agents, 10, 2) and batch["ctrl_valid"].shape == (n_agents, 10)
    assert batch["count"].tolist() == [4.0, 4.0, 4.0]
    assert int(batch["edge_index"].max()) < n_lanes
    # first tile of an episode: only the current frame valid, no control step
    assert batch["n_valid"][:4].tolist() == [1.0] * 4 and not batch["ctrl_valid"][:4].any()
    assert not batch["hist"][:4].any() and batch["hist"][4:].any()  # no past frame: zeros
    assert batch["n_valid"][4:8].tolist() == [11.0] * 4
    # agents of lane 0 (oncoming) are assigned to it; offsets stay inside the lane
    assert (batch["d"].abs() <= 1).all()
    ep = episodes[0]
    heading = np.arctan2(ep["agents"][1, 1:5, -1, 4], ep["agents"][1, 1:5, -1, 3])
    want = np.where(np.abs(heading) > 1, 0, None)
    got = dataset[1]["lane"]
    assert all(w is None or g == w for g, w in zip(got, want))


# ------------------------------------------------------------------ model
def test_gate_in_unit_interval_and_gradients_reach_encoder(dataset):
    model = tiny_model()
    batch = collate_tiles([dataset[i] for i in range(len(dataset))])
    terms = model(batch)
    assert ((terms["gate"] > 0) & (terms["gate"] < 1)).all()
    # a history without past frames adds nothing: moving the gate changes the posterior
    # (KL) of the agents with a history only
    short = batch["n_valid"] == 1
    with torch.no_grad():
        torch.manual_seed(0)
        kl0 = model(batch)["kl"]
        model.enc_gate[-1].bias += 3.0
        torch.manual_seed(0)
        kl1 = model(batch)["kl"]
        model.enc_gate[-1].bias -= 3.0
    assert short.any() and (~short).any()
    torch.testing.assert_close(kl0[short], kl1[short], rtol=0, atol=1e-6)
    assert (kl0[~short] - kl1[~short]).abs().min() > 1e-6
    out = model.training_step(batch)
    assert out["loss"].ndim == 0 and torch.isfinite(out["loss"])
    out["loss"].backward()
    for name in ("enc_hist", "enc_gate", "enc_state", "enc_att", "lane_in", "convs"):
        grads = [p.grad for p in getattr(model, name).parameters()]
        assert all(g is not None for g in grads), name
        assert sum(float(g.abs().sum()) for g in grads) > 0, name


def test_tiny_model_learns(dataset):
    model = tiny_model(1)
    batch = collate_tiles([dataset[i] for i in range(len(dataset))])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        out = model.training_step(batch)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
        losses.append(float(out["loss"].detach()))
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])


def test_sample_places_feasible_agents_on_lanes():
    model = tiny_model()
    lanes = straight_lanes()
    ego = np.array([0.0, 0.0, 10.0, 1.0, 0.0, 4.6, 1.9])
    g = torch.Generator().manual_seed(0)
    agents, valid, stats = model.sample(lanes, 5, ego=ego, generator=g)
    assert agents.dtype == np.float64 and agents.shape == (stats["placed"], 11, 7)
    assert valid.shape == agents.shape[:2] and valid.all()
    assert stats["requested"] == 5 and stats["placed"] + stats["shortfall"] == 5
    assert stats["placed"] >= 1
    cur = agents[:, -1]
    assert (np.abs(cur[:, :2]) <= 32).all()
    assert (offroad_distance(cur, None, lanes["points"], lanes["width"]) <= 0).all()
    assert not infeasible_steps(agents).any()
    scene = np.concatenate([ego[None], cur])
    assert not collisions(scene[None]).any()
    # the history is the backward integration of the decoded controls from the state
    ctrl, _ = history_controls(agents)
    redo, _ = integrate_history(torch.from_numpy(cur), torch.from_numpy(ctrl))
    np.testing.assert_allclose(redo.numpy(), agents, atol=1e-8)
    # the same generator seed gives the same agents; the count head gives a count
    a2, _, _ = model.sample(lanes, 5, ego=ego, generator=torch.Generator().manual_seed(0))
    np.testing.assert_array_equal(a2, agents)
    _, _, st = model.sample(lanes, None, generator=g)
    assert st["requested"] >= 0 and model.expected_count(lanes) > 0
    empty, v0, st0 = model.sample(lanes, 0)
    assert empty.shape == (0, 11, 7) and v0.shape == (0, 11) and st0["drawn"] == 0


def test_overlap_rejection_is_counted():
    model = tiny_model()
    short = {  # one 12 m lane: room for about two cars
        "points": np.stack([np.linspace(-6, 6, 20), np.zeros(20)], -1)[None],
        "width": np.array([3.5]),
        "speed_limit": np.array([10.0]),
        "kind": np.array([0]),
    }
    g = torch.Generator().manual_seed(3)
    agents, _, st = model.sample(short, 6, generator=g, max_tries=5, min_gap=0.0, headway=0.0)
    assert st["drawn"] == 30 and st["shortfall"] > 0 and st["placed"] == len(agents)
    assert st["rejected_overlap"] + st["rejected_history"] > 0
    assert st["rejected"] == sum(
        st[f"rejected_{r}"] for r in ("outside", "offroad", "ego", "overlap", "gap", "history")
    )
    ov = boxes_overlap(agents[:, None], agents[None]).any(-1)
    np.fill_diagonal(ov, False)
    assert not ov.any()
    # an ego box covering the lane: every candidate is rejected for it
    big_ego = np.array([0.0, 0.0, 0.0, 1.0, 0.0, 30.0, 10.0])
    agents, _, st = model.sample(short, 2, ego=big_ego, generator=g, max_tries=3)
    assert len(agents) == 0 and st["rejected_ego"] == st["drawn"] == 6 and st["shortfall"] == 2
    # without rejection the raw decoder returns n agents, overlapping or not
    raw, _, st = model.sample(short, 6, generator=g, reject=False)
    assert raw.shape == (6, 11, 7) and st["rejected"] == 0


def test_bad_input_rejected():
    model = tiny_model()
    lanes = straight_lanes()
    with pytest.raises(ValueError, match="at least one lane"):
        model.sample(
            {
                **lanes,
                "points": np.zeros((0, 20, 2)),
                "width": np.zeros(0),
                "speed_limit": np.zeros(0),
                "kind": np.zeros(0, int),
            },
            2,
        )
    with pytest.raises(ValueError, match=r"points'\] must have shape \(n, 20, 2\)"):
        model.sample({**lanes, "points": np.zeros((3, 10, 2))}, 2)
    bad = {**lanes, "points": lanes["points"].copy()}
    bad["points"][0, 3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        model.sample(bad, 2)
    with pytest.raises(ValueError, match="n_agents must be an integer >= 0"):
        model.sample(lanes, -1)
    with pytest.raises(ValueError, match=r"kind'\] must be in \[0, 4\)"):
        model.sample({**lanes, "kind": np.array([0, 1, 7])}, 1)
    with pytest.raises(ValueError, match="lacks"):
        model.sample({"points": lanes["points"]}, 1)
    with pytest.raises(ValueError, match=r"ego must have shape \(7,\)"):
        model.sample(lanes, 1, ego=np.zeros(5))
    with pytest.raises(ValueError, match="widths must be > 0"):
        check_lanes({**lanes, "width": np.zeros(3)})
    with pytest.raises(ValueError, match="hidden must be an integer >= 1"):
        MotionGatedVAE(hidden=0)


def test_save_load_round_trip(tmp_path, dataset):
    model = tiny_model(2)
    json.dumps(model.init_args)
    path = save_model(model, tmp_path / "vae.pt")
    loaded = load_model(path)
    assert isinstance(loaded, MotionGatedVAE) and loaded.init_args == model.init_args
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values()):
        assert torch.equal(a, b)
    lanes = straight_lanes()
    out_a = model.sample(lanes, 3, generator=torch.Generator().manual_seed(5))
    out_b = loaded.sample(lanes, 3, generator=torch.Generator().manual_seed(5))
    np.testing.assert_array_equal(out_a[0], out_b[0])


def test_scene_init_metrics_and_train_vae(tmp_path, episodes):
    model = tiny_model()
    res = scene_init_metrics(model, episodes, seed=0, max_tiles=4)
    assert res["tiles"] == 4 and res["generated"]["agents"] > 0
    assert res["generated"]["collision_rate"] == 0.0
    assert res["generated"]["infeasible_step_rate"] == 0.0
    assert res["ground_truth"]["collision_rate"] == 0.0
    assert res["generated"]["speed_mismatch_max"] < 1e-6
    for key in ("speed", "lateral", "nearest"):
        assert np.isfinite(res["distances"][key]["frechet"])
    assert res["ms_per_tile"]["median"] > 0

    from simsci.driving import make_scenes

    path = tmp_path / "scenes.h5"
    make_scenes(2, out=path, drive_length=150.0, route_length=600.0, episodes_per_road=2)
    summary = train_vae(
        path, tmp_path / "run", steps=4, batch_size=4, val_every=2, model_args=TINY, device="cpu"
    )
    assert summary["steps"] == 4 and summary["val_episodes"] == [1, 2]
    loaded = load_model(summary["best"])
    assert isinstance(loaded, MotionGatedVAE)
