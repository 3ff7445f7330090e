"""Gene regulatory networks (simsci.datasets._grn): the RNA-velocity field and its
Jacobian, the three networks' dynamics (bistable, oscillating, random), the snapshot
data sets, the AUROC scoring and its ceiling, bad input."""

import json
import math
from fractions import Fraction as Fr

import numpy as np
import pytest
import torch

import simsci.data
import simsci.datasets as datasets
from simsci.datasets import _grn as grn  # importing registers the grn_* data sets
from simsci.datasets._grn import (
    NETWORKS,
    GeneNetwork,
    get_network,
    network_from_config,
    random_network,
    score_network,
    true_motif_scores,
)
from simsci.errors import UnknownNameError


def _networks():
    return [get_network("toggle_switch"), get_network("repressilator"), random_network(12, 3)]


def _cells(path):
    ds = simsci.data.open(path)
    eps = [ds[i] for i in range(len(ds))]
    cat = {k: np.concatenate([e[k] for e in eps]) for k in ("t", "x", "x_clean", "v")}
    return ds, cat


# ------------------------------------------------------------------ the field
def test_velocity_at_a_hand_computed_point():
    net = get_network("toggle_switch")
    u = [Fr(1, 2), Fr(1, 4), Fr(1, 8), Fr(1, 10)]
    s = [Fr(5, 2), Fr(5), Fr(2), Fr(0)]
    act = lambda v, K, n: v**n / (K**n + v**n)  # noqa: E731
    rep = lambda v, K, n: K**n / (K**n + v**n)  # noqa: E731
    K = Fr(5, 2)
    f = [  # the mean of each gene's Hill terms
        (act(s[0], K, 4) + rep(s[1], K, 4)) / 2,  # A: self-activation, repressed by B
        (act(s[1], K, 4) + rep(s[0], K, 4)) / 2,  # B
        act(s[0], 2, 2),  # C <- A
        act(s[1], 2, 2),  # D <- B
    ]
    assert f[0] == (Fr(1, 2) + Fr(1, 17)) / 2 and f[1] == Fr(49, 68) and f[2] == Fr(25, 41)
    alpha, basal = [5, 5, 4, 4], [Fr(1, 5), Fr(1, 5), Fr(1, 10), Fr(1, 10)]
    du = [alpha[j] * f[j] + basal[j] - 4 * u[j] for j in range(4)]
    ds = [4 * u[j] - s[j] for j in range(4)]
    assert du[0] == Fr(-137, 340) and ds[3] == Fr(2, 5)
    x = torch.tensor([float(v) for v in u + s], dtype=torch.float64)
    expected = torch.tensor([float(v) for v in du + ds], dtype=torch.float64)
    torch.testing.assert_close(net.velocity(x), expected, rtol=1e-15, atol=1e-15)
    # batched, float32 in, float32 out
    v32 = net.velocity(x.float().expand(3, 2, 8))
    assert v32.shape == (3, 2, 8) and v32.dtype == torch.float32
    torch.testing.assert_close(v32[1, 1], expected.float())
    # the slow manifold: u at its quasi-steady value zeroes du/dt
    s_t = x[4:]
    x_qss = torch.cat([net.quasi_steady_unspliced(s_t), s_t])
    assert net.velocity(x_qss)[:4].abs().max() < 1e-15


def test_jacobian_matches_autograd():
    gen = torch.Generator().manual_seed(0)
    for net in _networks():
        x = 0.05 + torch.rand(2, 3, net.dim, generator=gen, dtype=torch.float64)
        x = x * net.upper_bounds()
        J = net.jacobian(x)
        assert J.shape == (2, 3, net.dim, net.dim)
        auto = torch.func.vmap(torch.func.vmap(torch.func.jacrev(net.velocity)))(x)
        torch.testing.assert_close(J, auto, rtol=1e-12, atol=1e-12)
        # true_motif_scores is the mean of the du/ds block, transposed to [src, dst]
        G = net.n_genes
        flat = x.reshape(-1, net.dim)
        torch.testing.assert_close(
            true_motif_scores(net, flat), net.jacobian(flat)[:, :G, G:].mean(0).T
        )


def test_adjacency_matches_edges_and_config_round_trips():
    net = get_network("toggle_switch")
    A = net.adjacency()
    expected = torch.tensor(
        [[1, -1, 1, 0], [-1, 1, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.int64
    )
    assert torch.equal(A, expected)
    assert net.state_names() == ["u_A", "u_B", "u_C", "u_D", "s_A", "s_B", "s_C", "s_D"]
    rep = get_network("repressilator").adjacency()
    assert torch.equal(rep, torch.tensor([[0, -1, 0], [0, 0, -1], [-1, 0, 0]]))
    for G in (10, 12, 20):
        net = random_network(G, seed=7)
        A = net.adjacency()
        assert A.shape == (G, G) and torch.all(A.diagonal() == 0)
        indeg = (A != 0).sum(0)
        assert indeg.min() >= 1 and indeg.max() <= 3
        n_act, n_rep = int((A > 0).sum()), int((A < 0).sum())
        assert n_act - n_rep in (0, 1) and n_act + n_rep == len(net.edges)
        for i, j, sign in net.edges:
            assert A[i, j] == sign
        # JSON round trip rebuilds the same field
        again = network_from_config(json.loads(json.dumps(net.config())))
        x = net.sample_initial(4, torch.Generator().manual_seed(1))
        assert torch.equal(again.velocity(x), net.velocity(x))
    assert random_network(12, 1).config() != random_network(12, 2).config()
    assert random_network(12, 1).config() == random_network(12, 1).config()


# --------------------------------------------------------------- dynamics
def test_toggle_switch_is_bistable():
    net = get_network("toggle_switch")
    x0 = torch.zeros(2, 8, dtype=torch.float64)
    x0[0, 4:6] = torch.tensor([2.5, 1.5])  # A ahead
    x0[1, 4:6] = torch.tensor([1.5, 2.5])  # B ahead
    end = net.simulate(x0, torch.tensor([0.0, 30.0], dtype=torch.float64))[:, -1]
    sA, sB = end[:, 4], end[:, 5]
    assert sA[0] > 4.5 and sB[0] < 0.5 and sB[1] > 4.5 and sA[1] < 0.5
    assert end[0, 6] > 3.0 and end[0, 7] < 0.5  # marker C follows A, D follows B
    torch.testing.assert_close(end[0, [1, 0, 3, 2, 5, 4, 7, 6]], end[1])  # mirror images
    assert net.velocity(end).abs().max() < 1e-5  # at rest
    assert torch.linalg.eigvals(net.jacobian(end)).real.max() < 0  # stable
    # the symmetric fixed point between them is a saddle
    mid = net.simulate(
        torch.tensor([[0.5, 0.5, 0, 0, 2.0, 2.0, 0, 0]], dtype=torch.float64),
        torch.tensor([0.0, 40.0], dtype=torch.float64),
    )[0, -1]
    assert net.velocity(mid).abs().max() < 1e-5
    assert torch.linalg.eigvals(net.jacobian(mid)).real.max() > 0.1


def test_repressilator_oscillates():
    net = get_network("repressilator")
    x0 = torch.tensor([[0.5, 0.1, 0.2, 3.0, 1.0, 0.5]], dtype=torch.float64)
    t = torch.linspace(0.0, 60.0, 241, dtype=torch.float64)
    sA = net.simulate(x0, t)[0, :, 3].numpy()
    late, later = sA[80:160], sA[160:]
    for part in (late, later):
        assert part.max() - part.min() > 5.0  # large, sustained swings
    assert abs((later.max() - later.min()) - (late.max() - late.min())) < 0.05  # a limit cycle
    # period from the upward crossings of the mid level (linear interpolation)
    level = (later.max() + later.min()) / 2
    a, tt = sA[80:] - level, t.numpy()[80:]
    k = np.flatnonzero((a[:-1] < 0) & (a[1:] >= 0))
    crossings = tt[k] - a[k] * (tt[k + 1] - tt[k]) / (a[k + 1] - a[k])
    period = np.diff(crossings)
    assert len(period) >= 3 and np.ptp(period) < 0.1 and 6.0 < period.mean() < 9.0
    # the symmetric fixed point s = 10 / (1 + s^3) + 0.05 is unstable (Hopf)
    lo, hi = 0.0, 10.05
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid < 10 / (1 + mid**3) + 0.05 else (lo, mid)
    fixed = torch.tensor([lo / 4] * 3 + [lo] * 3, dtype=torch.float64)
    assert net.velocity(fixed).abs().max() < 1e-12
    eig = torch.linalg.eigvals(net.jacobian(fixed))
    assert eig.real.max() > 0 and eig[eig.real.argmax()].imag.abs() > 0.5


# ---------------------------------------------------------------- scoring
def test_auroc_hand_computed_with_ties_and_empty_classes():
    A = np.array([[0, 1, -1], [0, 0, 1], [-1, 0, 0]])
    # off-diagonal pairs in row order: (0,1)+ (0,2)- (1,0)0 (1,2)+ (2,0)- (2,1)0
    S = np.array([[9.0, 2.0, -1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    r = score_network(S, A)
    # activation: positives {2, 1} vs negatives {-1, 0, 0, 0}: all 8 pairs won
    assert r["auroc_activation"] == 1.0
    # repression: -score positives {1, 0} vs {-2, 0, -1, 0}: 4 + (2 wins + 2 ties) -> 7/8
    assert r["auroc_repression"] == 7 / 8
    assert r["auroc_signed"] == (1 + 7 / 8) / 2
    # edge: |score| positives {2, 1, 1, 0} vs {0, 0}: 2 + 2 + 2 + (2 ties) -> 7/8
    assert r["auroc_edge"] == 7 / 8
    assert r["sign_accuracy"] == 3 / 4  # the zero score on (2, 0) is not a sign
    assert r["n_pairs"] == 6 and r["n_edges"] == 4
    # the diagonal is ignored, constant scores are a coin toss
    assert score_network(np.full((3, 3), 5.0), A)["auroc_activation"] == 0.5
    assert score_network(S + np.diag([-100.0, 100.0, 7.0]), A) == r
    # reversed scores: AUROC 1 - AUROC
    assert score_network(-S, A)["auroc_activation"] == 0.0
    # no repressions: that AUROC is NaN, the signed mean is the activation one
    A2 = np.array([[0, 1, 0], [0, 0, 0], [0, 1, 0]])
    S2 = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    r2 = score_network(S2, torch.as_tensor(A2))
    assert math.isnan(r2["auroc_repression"])
    # positives {3, 1} vs {1, 2, 0, 0}: 3 wins all 4; 1 ties 1, loses to 2, beats 0, 0
    assert r2["auroc_activation"] == 6.5 / 8 and r2["auroc_signed"] == 6.5 / 8
    # no edges at all: everything edge-based is undefined
    r3 = score_network(np.ones((2, 2)), np.zeros((2, 2), dtype=int))
    for key in ("auroc_activation", "auroc_repression", "auroc_signed", "auroc_edge"):
        assert math.isnan(r3[key])
    assert math.isnan(r3["sign_accuracy"]) and r3["n_edges"] == 0 and r3["n_pairs"] == 2
    # all pairs edges: auroc_edge undefined
    r4 = score_network(np.ones((2, 2)), np.array([[0, 1], [1, 0]]))
    assert math.isnan(r4["auroc_edge"]) and r4["sign_accuracy"] == 1.0


def test_true_motif_scores_reach_the_ceiling_on_every_network():
    gen = torch.Generator().manual_seed(2)
    for net in [*_networks(), random_network(20, 5)]:
        x0 = net.sample_initial(64, gen)
        x = net.simulate(x0, torch.tensor([0.0, 3.0], dtype=torch.float64))[:, -1]
        S = true_motif_scores(net, x)
        A = net.adjacency()
        r = score_network(S, A)
        assert r["auroc_repression"] == 1.0 and r["auroc_signed"] == 1.0
        assert r["auroc_edge"] == 1.0 and r["sign_accuracy"] == 1.0
        if net.name != "repressilator":  # the repressilator has no activation
            assert r["auroc_activation"] == 1.0
        else:
            assert math.isnan(r["auroc_activation"])
        off = ~torch.eye(net.n_genes, dtype=torch.bool)
        assert torch.all(S[(A == 0) & off] == 0)
        assert torch.all(torch.sign(S[(A != 0) & off]) == A[(A != 0) & off])


# --------------------------------------------------------------- datasets
def test_datasets_layout_velocity_and_meta(tmp_path):
    cases = [
        ("grn_toggle", "toggle_switch", {}),
        ("grn_repressilator", "repressilator", {}),
        ("grn_random", "random", {"genes": 10, "network_seed": 4}),
    ]
    for name, network, opts in cases:
        assert name in datasets.DATASETS
        path = datasets.make_dataset(name, 60, out=tmp_path / f"{name}.h5", seed=1, **opts)
        ds, c = _cells(path)
        assert ds.kind == "state" and ds.system == f"grn_{network}" and len(ds) == 60
        assert np.all(ds.lengths == 1)
        net = network_from_config(ds.meta["network"])
        if name == "grn_random":
            assert net.config() == random_network(10, 4).config()
            assert ds.meta["genes"] == 10 and ds.meta["network_seed"] == 4
        else:
            assert net.config() == get_network(network).config()
        for field in ("x", "x_clean", "v"):
            assert ds.names(field) == net.state_names()
            assert c[field].shape == (60, net.dim) and c[field].dtype == np.float64
        v = net.velocity(torch.as_tensor(c["x_clean"])).numpy()
        np.testing.assert_array_equal(c["v"], v)
        t_max = ds.meta["t_max"]
        assert np.all((c["t"] > 0) & (c["t"] <= t_max)) and c["t"].std() > t_max / 5
        assert np.all(c["x_clean"] >= 0) and np.all(c["x"] >= 0)
        # counts: x * counts_scale is an integer
        k = c["x"] * ds.meta["counts_scale"]
        np.testing.assert_allclose(k, np.round(k), atol=1e-9)
        assert np.bincount(ds.column("split"), minlength=3).tolist() == [48, 6, 6]
        assert ds.meta["counts_scale"] == 50.0 and ds.meta["split"] == [0.8, 0.1, 0.1]
    # cells reach both toggle attractors and some are still in transit
    ds, c = _cells(tmp_path / "grn_toggle.h5")
    sA, sB = c["x_clean"][:, 4], c["x_clean"][:, 5]
    assert np.sum(sA > 3 * sB + 2) > 5 and np.sum(sB > 3 * sA + 2) > 5
    speed = np.linalg.norm(c["v"], axis=1)
    assert np.sum(speed > 0.5) > 5 and np.sum(speed < 0.05) > 5


def test_noise_shrinks_with_counts_scale_and_seeds_repeat(tmp_path):
    files = {}
    for scale in (5.0, 500.0, math.inf):
        files[scale] = datasets.make_dataset(
            "grn_toggle", 300, out=tmp_path / f"c{scale}.h5", seed=3, counts_scale=scale
        )
    cells = {k: _cells(p)[1] for k, p in files.items()}
    # the clean cells do not depend on the noise level (independent streams)
    for k in (500.0, math.inf):
        np.testing.assert_array_equal(cells[k]["x_clean"], cells[5.0]["x_clean"])
    clean = cells[5.0]["x_clean"]
    rms = {k: np.sqrt(np.mean((c["x"] - clean) ** 2)) for k, c in cells.items()}
    assert rms[math.inf] == 0.0
    ratio = rms[5.0] / rms[500.0]
    assert 7.0 < ratio < 14.0  # Poisson: noise std ~ sqrt(x / scale), ratio sqrt(100)
    # Poisson noise: variance of x - x_clean ~ x_clean / scale
    resid = (cells[5.0]["x"] - clean) ** 2
    assert 0.75 < resid.sum() / (clean.sum() / 5.0) < 1.3
    assert _cells(files[math.inf])[0].meta["counts_scale"] == "inf"
    # same seed same data, another seed other cells
    again = datasets.make_dataset(
        "grn_toggle", 300, out=tmp_path / "again.h5", seed=3, counts_scale=5.0
    )
    other = datasets.make_dataset("grn_toggle", 150, out=tmp_path / "other.h5", seed=4)
    a, b = _cells(files[5.0])[1], _cells(again)[1]
    for key in ("t", "x", "x_clean", "v"):
        np.testing.assert_array_equal(a[key], b[key])
    ds_a, ds_b = simsci.data.open(files[5.0]), simsci.data.open(again)
    np.testing.assert_array_equal(ds_a.column("split"), ds_b.column("split"))
    assert not np.array_equal(a["x_clean"], _cells(other)[1]["x_clean"])


# -------------------------------------------------------------- bad input
def test_bad_input_is_rejected(tmp_path):
    with pytest.raises(UnknownNameError, match="unknown gene network 'toggle'.*toggle_switch"):
        get_network("toggle")
    assert set(NETWORKS) == {"toggle_switch", "repressilator", "random"}
    for genes in (9, 21, 12.5, True):
        with pytest.raises(ValueError, match=r"genes must be an integer in 10\.\.20"):
            random_network(genes)
        with pytest.raises(ValueError, match=r"genes must be an integer in 10\.\.20"):
            datasets.make_dataset("grn_random", 5, out=tmp_path / "r.h5", genes=genes)
    A = get_network("toggle_switch").adjacency()
    with pytest.raises(ValueError, match=r"scores must have the adjacency's shape \(4, 4\)"):
        score_network(np.zeros((3, 4)), A)
    S = np.zeros((4, 4))
    S[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"scores must be finite, but scores\[1, 2\] = nan"):
        score_network(S, A)
    with pytest.raises(ValueError, match="adjacency entries must be -1, 0 or \\+1"):
        score_network(np.zeros((2, 2)), np.array([[0, 2], [0, 0]]))
    with pytest.raises(ValueError, match="adjacency must be a square"):
        score_network(np.zeros((2, 3)), np.zeros((2, 3)))
    for scale in (-1.0, 0.0, math.nan):
        with pytest.raises(ValueError, match="counts_scale must be > 0"):
            datasets.make_dataset("grn_toggle", 5, out=tmp_path / "t.h5", counts_scale=scale)
    with pytest.raises(ValueError, match="t_max must be a finite number > 0"):
        datasets.make_dataset("grn_repressilator", 5, out=tmp_path / "t.h5", t_max=0.0)
    with pytest.raises(ValueError, match=r"u_spread must lie in \[0, 1\]"):
        datasets.make_dataset("grn_toggle", 5, out=tmp_path / "t.h5", u_spread=1.5)
    with pytest.raises(UnknownNameError, match="no option 'genes'"):
        datasets.make_dataset("grn_toggle", 5, out=tmp_path / "t.h5", genes=12)
    assert not (tmp_path / "t.h5").exists()
    # networks and states
    with pytest.raises(ValueError, match="sign must be \\+1 \\(activation\\) or -1"):
        GeneNetwork(["a", "b"], [("a", "b", 0)])
    with pytest.raises(ValueError, match="a second edge a -> b"):
        GeneNetwork(["a", "b"], [("a", "b", 1), (0, 1, -1)])
    with pytest.raises(UnknownNameError, match="unknown gene.*'c'"):
        GeneNetwork(["a", "b"], [("a", "c", 1)])
    with pytest.raises(ValueError, match=r"hill must be finite and >= 1.0, but hill\[0\] = 0.5"):
        GeneNetwork(["a", "b"], [("a", "b", 1)], hill=0.5)
    with pytest.raises(ValueError, match="alpha must be a number or 2 numbers"):
        GeneNetwork(["a", "b"], [("a", "b", 1)], alpha=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="last axis of 8 entries"):
        get_network("toggle_switch").velocity(torch.zeros(3, 6))
    with pytest.raises(ValueError, match="unknown keys"):
        network_from_config({**grn.toggle_switch().config(), "beta2": 1.0})
