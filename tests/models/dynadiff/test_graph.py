"""Expert weights as neuron graphs: exact round trips, the fast batched path, and the
edge-gated attention encoder (shapes, gradients, hidden-permutation invariance, learning)."""

import pytest
import torch
from torch_geometric.data import Batch

from simsci.models.dynadiff._graph import (
    WeightGraphEncoder,
    batch_to_stacked_weights,
    graph_to_weights,
    graphs_to_weights,
    stacked_weights_to_batch,
    weights_to_graph,
)


def mlp(sizes, dtype=torch.float32, device="cpu", lead=()):
    return [
        (
            torch.randn(*lead, o, i, dtype=dtype, device=device),
            torch.randn(*lead, o, dtype=dtype, device=device),
        )
        for i, o in zip(sizes[:-1], sizes[1:])
    ]


def conv(channels, kernel=(3, 2), dtype=torch.float32, device="cpu", lead=()):
    return [
        (
            torch.randn(*lead, o, i, *kernel, dtype=dtype, device=device),
            torch.randn(*lead, o, dtype=dtype, device=device),
        )
        for i, o in zip(channels[:-1], channels[1:])
    ]


def mlp_forward(layers, x):
    for n, (w, b) in enumerate(layers):
        x = x @ w.T + b
        if n < len(layers) - 1:
            x = torch.tanh(x)
    return x


def assert_layers_equal(a, b):
    assert len(a) == len(b)
    for (wa, ba), (wb, bb) in zip(a, b):
        assert wa.dtype == wb.dtype and wa.device == wb.device
        assert torch.equal(wa, wb) and torch.equal(ba, bb)


# ---------------------------------------------------------------------------------------
# graph layout and round trips


def test_layout():
    layers = mlp([3, 4, 2])
    g = weights_to_graph(layers)
    assert g.num_nodes == 3 + 4 + 2 and g.edge_index.shape == (2, 12 + 8)
    assert g.layer.tolist() == [0] * 3 + [1] * 4 + [2] * 2
    assert g.position.tolist() == [0, 1, 2, 0, 1, 2, 3, 0, 1]
    assert g.kernel_size.tolist() == [[0, 0]]
    assert torch.equal(g.x[:, 1], torch.tensor([1.0] * 3 + [0.0] * 6))
    assert torch.equal(g.x[3:7, 0], layers[0][1]) and torch.equal(g.x[:3, 0], torch.zeros(3))
    # every edge j -> i carries weight[i, j] of the layer between its endpoints
    for e in range(g.edge_index.shape[1]):
        s, t = g.edge_index[:, e]
        n = int(g.layer[s])
        assert int(g.layer[t]) == n + 1
        w = layers[n][0][g.position[t], g.position[s]]
        assert g.edge_attr[e, 0] == w


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_round_trip_linear_exact(dtype, device):
    layers = mlp([3, 5, 4, 2], dtype=dtype, device=device)
    g = weights_to_graph(layers)
    assert g.x.dtype == dtype and g.edge_attr.dtype == dtype and g.x.device.type == device.type
    assert_layers_equal(graph_to_weights(g), layers)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_round_trip_conv_exact(dtype, device):
    layers = conv([2, 3, 4, 1], kernel=(3, 2), dtype=dtype, device=device)
    g = weights_to_graph(layers)
    assert g.edge_attr.shape == (6 + 12 + 4, 6)
    assert g.kernel_size.tolist() == [[3, 2]]
    assert_layers_equal(graph_to_weights(g), layers)


def test_round_trip_ignores_edge_order():
    layers = conv([2, 3, 2], kernel=(1, 1))  # a 1x1 conv stays 4-D, unlike a linear layer
    g = weights_to_graph(layers)
    perm = torch.randperm(g.edge_index.shape[1])
    g.edge_index, g.edge_attr = g.edge_index[:, perm], g.edge_attr[perm]
    assert_layers_equal(graph_to_weights(g), layers)


def test_round_trip_batched():
    # mixed architectures (one edge length per batch: PyG concatenates edge_attr)
    experts = [mlp([3, 4, 2]), mlp([2, 6, 5, 1]), mlp([1, 1])]
    batch = Batch.from_data_list([weights_to_graph(e) for e in experts])
    for got, want in zip(graphs_to_weights(batch), experts):
        assert_layers_equal(got, want)
    convs = [conv([1, 2, 2], kernel=(2, 2)), conv([3, 1], kernel=(2, 2))]
    for got, want in zip(
        graphs_to_weights(Batch.from_data_list([weights_to_graph(c) for c in convs])), convs
    ):
        assert_layers_equal(got, want)
    with pytest.raises(ValueError, match="differ in architecture"):
        batch_to_stacked_weights(batch)
    with pytest.raises(ValueError, match="takes one graph"):
        graph_to_weights(batch)
    same = [mlp([3, 4, 2]) for _ in range(3)]
    stacked = batch_to_stacked_weights(Batch.from_data_list([weights_to_graph(e) for e in same]))
    for n, (w, b) in enumerate(stacked):
        assert torch.equal(w, torch.stack([e[n][0] for e in same]))
        assert torch.equal(b, torch.stack([e[n][1] for e in same]))


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_fast_path_equals_per_expert_graphs(kind, device):
    E = 5
    stacked = (
        mlp([3, 4, 2], device=device, lead=(E,))
        if kind == "linear"
        else conv([2, 3, 1], device=device, lead=(E,))
    )
    fast = stacked_weights_to_batch(stacked)
    experts = [[(w[e], b[e]) for w, b in stacked] for e in range(E)]
    slow = Batch.from_data_list([weights_to_graph(x) for x in experts])
    assert type(fast) is type(slow) and fast.num_graphs == slow.num_graphs == E
    assert set(fast.keys()) == set(slow.keys())
    for key in slow.keys():
        assert fast[key].dtype == slow[key].dtype, key
        assert torch.equal(fast[key], slow[key]), key
    for key in slow._slice_dict:
        assert torch.equal(fast._slice_dict[key], slow._slice_dict[key]), key
        assert torch.equal(fast._inc_dict[key], slow._inc_dict[key]), key
    for e, g in enumerate(fast.to_data_list()):
        assert_layers_equal(graph_to_weights(g), experts[e])
    assert_layers_equal(batch_to_stacked_weights(fast), stacked)


# ---------------------------------------------------------------------------------------
# encoder


def small_encoder(edge_dim=1, **kw):
    args = dict(hidden=16, heads=2, num_layers=2, latent_dim=8)
    args.update(kw)
    return WeightGraphEncoder(edge_dim, **args)


def test_encoder_shape_and_args(device):
    enc = small_encoder().to(device)
    assert enc.init_args == dict(
        edge_dim=1, hidden=16, heads=2, num_layers=2, latent_dim=8, max_layers=8, max_positions=256
    )
    assert WeightGraphEncoder(**enc.init_args).init_args == enc.init_args
    assert enc(weights_to_graph(mlp([3, 4, 2], device=device))).shape == (1, 8)
    batch = stacked_weights_to_batch(mlp([3, 4, 4, 2], device=device, lead=(3,)))
    z = enc(batch)
    assert z.shape == (3, 8) and z.device.type == device.type and torch.isfinite(z).all()
    # float64 experts go through a float32 encoder (features cast to its dtype)
    z64 = enc(weights_to_graph(mlp([3, 4, 2], dtype=torch.float64, device=device)))
    assert z64.dtype == torch.float32
    # conv experts: edge_dim = kh * kw
    enc_c = small_encoder(edge_dim=6).to(device)
    assert enc_c(stacked_weights_to_batch(conv([2, 3, 1], device=device, lead=(2,)))).shape == (
        2,
        8,
    )


def test_gradients_reach_all_encoder_parameters():
    enc = small_encoder()
    batch = stacked_weights_to_batch(mlp([3, 4, 4, 2], lead=(4,)))
    enc(batch).pow(2).sum().backward()
    for name, p in enc.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_hidden_permutation_invariance():
    layers = mlp([3, 5, 4, 2])
    p1, p2 = torch.randperm(5), torch.randperm(4)
    (w0, b0), (w1, b1), (w2, b2) = layers
    permuted = [(w0[p1], b0[p1]), (w1[p2][:, p1], b1[p2]), (w2[:, p2], b2)]
    x = torch.randn(7, 3)
    assert torch.allclose(mlp_forward(layers, x), mlp_forward(permuted, x), atol=1e-6)
    enc = small_encoder()
    z, zp = enc(weights_to_graph(layers)), enc(weights_to_graph(permuted))
    assert torch.allclose(z, zp, atol=1e-5)
    # the input and output neurons keep their identity: permuting inputs changes the latent
    p_in = torch.tensor([1, 2, 0])
    z_in = enc(weights_to_graph([(w0[:, p_in], b0), (w1, b1), (w2, b2)]))
    assert (z - z_in).abs().max() > 1e-3


def test_encoder_distinguishes_weight_sets():
    enc = small_encoder()
    a, b = mlp([3, 4, 2]), mlp([3, 4, 2])
    za, zb = enc(weights_to_graph(a)), enc(weights_to_graph(b))
    assert (za - zb).abs().max() > 1e-2
    # a small change of one weight moves the latent too
    c = [(w.clone(), bb.clone()) for w, bb in a]
    c[1][0][0, 0] += 0.5
    assert (za - enc(weights_to_graph(c))).abs().max() > 1e-4


def test_encoder_learns_a_weight_property():
    """encoder + linear head regress the mean of layer-0 biases of random MLPs, and the fit
    carries over to experts it did not see"""
    torch.manual_seed(1)
    train, held_out = mlp([2, 4, 4, 1], lead=(48,)), mlp([2, 4, 4, 1], lead=(64,))
    y, y_held_out = (s[0][1].mean(dim=1, keepdim=True) for s in (train, held_out))
    batch, batch_held_out = stacked_weights_to_batch(train), stacked_weights_to_batch(held_out)
    enc = WeightGraphEncoder(1, hidden=16, heads=2, num_layers=1, latent_dim=8)
    head = torch.nn.Linear(8, 1)
    opt = torch.optim.Adam([*enc.parameters(), *head.parameters()], lr=3e-3)
    losses = []
    for _ in range(200):
        loss = (head(enc(batch)) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first / 5, (first, last)
    with torch.no_grad():
        mse = (head(enc(batch_held_out)) - y_held_out).pow(2).mean()
    assert mse < 0.2 * y_held_out.var(), (mse, y_held_out.var())


# ---------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(
    "layers, error, match",
    [
        (
            [(torch.randn(4, 3), torch.randn(4)), (torch.randn(2, 5), torch.randn(2))],
            ValueError,
            "consecutive layers must chain",
        ),
        ([(torch.randn(4, 3, 2), torch.randn(4))], ValueError, "got a 3-dim tensor"),
        ([(torch.randn(4, 3), torch.randn(5))], ValueError, "bias must be"),
        (
            [(torch.randn(4, 3, 3, 3), torch.randn(4)), (torch.randn(2, 4, 2, 2), torch.randn(2))],
            ValueError,
            "one size",
        ),
        (
            [(torch.randn(4, 3, 3, 3), torch.randn(4)), (torch.randn(2, 4), torch.randn(2))],
            ValueError,
            "must be linear or all conv",
        ),
        ([(torch.randn(4, 3), torch.randn(4, dtype=torch.float64))], TypeError, "one dtype"),
        ([(torch.randn(0, 3), torch.randn(0))], ValueError, "empty dim"),
        ([], ValueError, "empty"),
        (torch.randn(3, 3), TypeError, "list of \\(weight, bias\\) pairs"),
        ([torch.randn(3, 3)], TypeError, "pair"),
    ],
)
def test_bad_layers_rejected(layers, error, match):
    with pytest.raises(error, match=match):
        weights_to_graph(layers)


def test_bad_stacked_layers_rejected():
    with pytest.raises(ValueError, match="same leading expert dim"):
        stacked_weights_to_batch(
            [(torch.randn(3, 4, 2), torch.randn(3, 4)), (torch.randn(2, 1, 4), torch.randn(2, 1))]
        )
    with pytest.raises(ValueError, match="got a 2-dim tensor"):
        stacked_weights_to_batch([(torch.randn(4, 2), torch.randn(4))])


def test_encoder_rejects_what_it_cannot_embed():
    with pytest.raises(ValueError, match="max_layers=2"):
        small_encoder(max_layers=2)(weights_to_graph(mlp([2, 3, 3, 1])))
    with pytest.raises(ValueError, match="max_positions=4"):
        small_encoder(max_positions=4)(weights_to_graph(mlp([5, 3, 1])))
    # hidden layers may be wider than max_positions: they have no position embedding
    assert small_encoder(max_positions=4)(weights_to_graph(mlp([2, 9, 1]))).shape == (1, 8)
    with pytest.raises(ValueError, match="edge_dim=1"):
        small_encoder()(weights_to_graph(conv([1, 2], kernel=(2, 2))))
    with pytest.raises(ValueError, match="multiple of heads"):
        WeightGraphEncoder(1, hidden=10, heads=4)
    with pytest.raises(ValueError, match="positive int"):
        WeightGraphEncoder(0)
