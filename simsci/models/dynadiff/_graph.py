"""Experts as graphs: a small feed-forward network's weights as a PyG graph of its neurons,
the exact inverse, and a gated graph-attention encoder of that graph.

An *expert* is an ordered list of layers ``[(weight, bias), ...]``; ``weight`` is
``(out, in)`` for a linear layer or ``(out, in, kh, kw)`` for a 2-D conv layer (channels are
the neurons, one kernel size for the whole network), ``bias`` is ``(out,)``, and layer l's
outputs are layer l+1's inputs.

The graph layout (:func:`weights_to_graph`):

- **Nodes are neurons**, in order: the ``in_0`` inputs of layer 0, then the outputs of each
  layer, N = in_0 + sum_l out_l. ``x`` (N, 2) = [bias, is_input]: the neuron's bias (0 for
  an input neuron, which has none) and an indicator that tells an input from an output
  neuron with a zero bias.
- **Edges are weights**: for every layer l, one edge from input neuron j to output neuron i
  (``edge_index[0]`` the source, ``edge_index[1]`` the target, PyG's convention), carrying
  ``edge_attr`` = weight[i, j] (1 number for linear, the kh*kw kernel flattened row-major
  for conv). Edges are listed layer by layer, i-major (the row-major order of ``weight``),
  so ``edge_attr`` of a layer *is* ``weight.reshape(out * in, -1)``.
- Node attributes ``layer`` (long; 0 = inputs, l+1 = outputs of layer l) and ``position``
  (long; the index within that layer), and the graph attribute ``kernel_size`` (1, 2) long,
  (kh, kw) for conv and (0, 0) for linear (a 1x1 conv and a linear layer are told apart).

Why this layout: a network's function is unchanged when the hidden neurons of a layer are
permuted together with the rows of its weight and bias and the columns of the next weight;
on the graph this is only a relabelling of nodes, so a graph network whose node embeddings
do not depend on the hidden neurons' indices is invariant to it by construction, which a
flat vector of the weights is not. ``layer``, ``position`` and ``kernel_size`` are all the
inverse needs: layer sizes are counts of nodes per ``layer``, and the weights are scattered
back by (layer, position) of each edge's endpoints, so the round trip is a copy (bit-exact in
any dtype) and does not depend on the order of the edges. The names avoid the substring
``index``, so PyG's batching offsets only ``edge_index``: ``layer`` and ``position`` stay
local to each graph of a :class:`~torch_geometric.data.Batch`.

Batches: :func:`stacked_weights_to_batch` builds the Batch of E experts of one architecture
from stacked layers ``(E, out, in[, kh, kw])`` with one index template per layer (no loop
over experts or edges); it fills the slice records that ``Batch.from_data_list`` fills, so
``to_data_list`` works and the result equals ``Batch.from_data_list`` of the per-expert
graphs. :func:`batch_to_stacked_weights` is its inverse, :func:`graphs_to_weights` unbatches
graphs of any architectures.

The encoder (:class:`WeightGraphEncoder`) is multi-head attention along the edges in both
directions (a direction embedding tells forward from backward), in which the weights gate
the attention:

    a_ij = softmax_j( q_i . k_j / sqrt(d) + w_h . f_ij )      (over the messages into i),
    m_i  = W_o sum_j a_ij (v_j * sigmoid(W_g f_ij)),           f_ij = e_ij + dir_emb,
    h_i <- LN(h_i + m_i),  h_i <- LN(h_i + FFN(h_i)),
    e_ij <- LN(e_ij + MLP([h_src, h_dst, e_ij]))                (before each attention),

then mean and max pooling over each graph's nodes and an MLP to the latent (B, latent_dim).
Node embeddings are ``Linear(x) + layer_emb[layer]`` plus a position embedding only for input
neurons and final-output neurons, whose positions have a fixed meaning (which input, which
output); hidden neurons get none, so the encoder is invariant to permuting them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.nn import global_max_pool, global_mean_pool
from torch_geometric.utils import scatter, softmax

__all__ = [
    "weights_to_graph",
    "graph_to_weights",
    "graphs_to_weights",
    "stacked_weights_to_batch",
    "batch_to_stacked_weights",
    "WeightGraphEncoder",
]

#: number of node features: [bias, is_input]
NODE_DIM = 2

Layers = list[tuple[Tensor, Tensor]]


# ---------------------------------------------------------------------------------------
# validation


def _check_layers(layers, stacked: bool):
    """Validate a list of (weight, bias) pairs, each with a leading expert dim if
    ``stacked``. Returns (sizes [in_0, out_0, ..., out_{L-1}], kernel (kh, kw) or None, E)."""
    lead = 1 if stacked else 0
    shape_doc = (
        "(E, out, in) or (E, out, in, kh, kw)" if stacked else "(out, in) or (out, in, kh, kw)"
    )
    bias_doc = "(E, out)" if stacked else "(out,)"
    if isinstance(layers, (Tensor, str, bytes)) or not isinstance(layers, Sequence):
        raise TypeError(
            f"layers must be a list of (weight, bias) pairs, got {type(layers).__name__}: "
            "pass e.g. [(W0, b0), (W1, b1)]"
        )
    if len(layers) == 0:
        raise ValueError("layers is empty: an expert needs at least one (weight, bias) layer")
    sizes: list[int] = []
    kernel = None
    ndim0 = None
    E = None
    ref = None
    for n, pair in enumerate(layers):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(
                f"layer {n} must be a (weight, bias) pair, got {type(pair).__name__}"
                + (f" of length {len(pair)}" if isinstance(pair, (tuple, list)) else "")
            )
        w, b = pair
        if not isinstance(w, Tensor) or not isinstance(b, Tensor):
            raise TypeError(
                f"layer {n}: weight and bias must be torch tensors, got "
                f"{type(w).__name__} and {type(b).__name__}"
            )
        if not w.is_floating_point():
            raise TypeError(f"layer {n}: weights must be floating point, got {w.dtype}")
        if w.dim() - lead not in (2, 4):
            raise ValueError(
                f"layer {n}: weight must be {shape_doc} (linear or 2-D conv), got a "
                f"{w.dim()}-dim tensor of shape {tuple(w.shape)}"
            )
        if ref is None:
            ref = w
        if w.dtype != ref.dtype or b.dtype != ref.dtype or w.device != ref.device:
            raise TypeError(
                f"layer {n}: every weight and bias must share one dtype and device, got "
                f"weight {w.dtype} on {w.device} and bias {b.dtype} on {b.device} where "
                f"layer 0 has {ref.dtype} on {ref.device}: convert them with .to()"
            )
        if ndim0 is None:
            ndim0 = w.dim()
        if w.dim() != ndim0:
            raise ValueError(
                f"layer {n}: all layers must be linear or all conv (one kernel size), got a "
                f"{ndim0}-dim weight in layer 0 and a {w.dim()}-dim one here"
            )
        if stacked:
            if E is None:
                E = w.shape[0]
            if w.shape[0] != E or b.dim() < 1 or b.shape[0] != E:
                raise ValueError(
                    f"layer {n}: every weight and bias needs the same leading expert dim E, "
                    f"got weight {tuple(w.shape)} and bias {tuple(b.shape)} with E={E} from "
                    "layer 0"
                )
        out, inp = w.shape[lead], w.shape[lead + 1]
        if out == 0 or inp == 0:
            raise ValueError(
                f"layer {n}: weight shape {tuple(w.shape)} has an empty dim: every layer "
                "needs at least one input and one output neuron"
            )
        if w.dim() - lead == 4:
            k = (int(w.shape[lead + 2]), int(w.shape[lead + 3]))
            if kernel is None:
                kernel = k
            if k != kernel:
                raise ValueError(
                    f"layer {n}: all conv kernels must have one size (the edge features have "
                    f"one length), got kernel {kernel} in layer 0 and {k} here"
                )
        if tuple(b.shape) != tuple(w.shape[: lead + 1]):
            want = f"({E}, {out})" if stacked else f"({out},)"
            raise ValueError(
                f"layer {n}: bias must be {bias_doc} with out = weight's dim {lead}, i.e. "
                f"{want}, got {tuple(b.shape)}"
            )
        if n == 0:
            sizes.append(int(inp))
        elif inp != sizes[-1]:
            raise ValueError(
                f"layer {n}: consecutive layers must chain, in_{n} == out_{n - 1}: weight "
                f"{tuple(w.shape)} takes {inp} inputs but layer {n - 1} has {sizes[-1]} "
                "outputs"
            )
        sizes.append(int(out))
    return sizes, kernel, (1 if E is None else int(E))


# ---------------------------------------------------------------------------------------
# weights -> graph


def _template(sizes: list[int], device) -> tuple[Tensor, Tensor, Tensor]:
    """One expert's (edge_index (2, M), layer (N,), position (N,)) for layer sizes
    [in_0, out_0, ..., out_{L-1}]; edges layer by layer, i-major."""
    counts = torch.tensor(sizes, device=device)
    offsets = torch.cumsum(counts, 0) - counts  # first node of each layer
    layer = torch.repeat_interleave(torch.arange(len(sizes), device=device), counts)
    position = torch.arange(int(counts.sum()), device=device) - offsets[layer]
    edges = []
    for n in range(len(sizes) - 1):
        inp, out = sizes[n], sizes[n + 1]
        i = torch.arange(out, device=device).repeat_interleave(inp)
        j = torch.arange(inp, device=device).repeat(out)
        edges.append(torch.stack([offsets[n] + j, offsets[n + 1] + i]))
    return torch.cat(edges, dim=1), layer, position


def _assemble(layers, sizes, kernel, E: int) -> dict[str, Tensor]:
    """Graph tensors of E stacked experts, concatenated graph-major."""
    w0 = layers[0][0]
    device, dtype = w0.device, w0.dtype
    edge_index, layer, position = _template(sizes, device)
    N, M = layer.shape[0], edge_index.shape[1]
    k = 1 if kernel is None else kernel[0] * kernel[1]
    bias = torch.cat(
        [torch.zeros(E, sizes[0], dtype=dtype, device=device)] + [b for _, b in layers], 1
    )
    is_input = (layer == 0).to(dtype).expand(E, N)
    x = torch.stack([bias, is_input], dim=-1).reshape(E * N, NODE_DIM)
    edge_attr = torch.cat([w.reshape(E, w.shape[1] * w.shape[2], k) for w, _ in layers], 1)
    shift = (torch.arange(E, device=device) * N).view(1, E, 1)
    ks = (0, 0) if kernel is None else kernel
    return dict(
        x=x,
        edge_index=(edge_index.view(2, 1, M) + shift).reshape(2, E * M),
        edge_attr=edge_attr.reshape(E * M, k),
        layer=layer.repeat(E),
        position=position.repeat(E),
        kernel_size=torch.tensor([ks], device=device).expand(E, 2).clone(),
    )


def weights_to_graph(layers: Sequence[tuple[Tensor, Tensor]]) -> Data:
    """One expert ``[(weight, bias), ...]`` -> its neuron graph (module docstring).

    Returns a :class:`~torch_geometric.data.Data` with ``x`` (N, 2), ``edge_index`` (2, M),
    ``edge_attr`` (M, kh*kw or 1), ``layer`` (N,), ``position`` (N,), ``kernel_size``
    (1, 2); N = in_0 + sum_l out_l neurons, M = sum_l out_l in_l weights. Float tensors have
    the weights' dtype and device; autograd flows through.
    """
    sizes, kernel, _ = _check_layers(layers, stacked=False)
    stacked = [(w.unsqueeze(0), b.unsqueeze(0)) for w, b in layers]
    return Data(**_assemble(stacked, sizes, kernel, 1))


def stacked_weights_to_batch(stacked_layers: Sequence[tuple[Tensor, Tensor]]) -> Batch:
    """E experts of one architecture, layers ``(E, out, in[, kh, kw])`` and biases
    ``(E, out)``, -> one :class:`~torch_geometric.data.Batch` of E graphs, equal to
    ``Batch.from_data_list([weights_to_graph(expert_e) for e])`` (``to_data_list`` works)
    but built with one vectorised index template per layer."""
    sizes, kernel, E = _check_layers(stacked_layers, stacked=True)
    if E == 0:
        raise ValueError("stacked layers hold E=0 experts: a batch needs at least one graph")
    t = _assemble(stacked_layers, sizes, kernel, E)
    device = t["x"].device
    N = t["layer"].shape[0] // E
    M = t["edge_index"].shape[1] // E
    batch = Batch(_base_cls=Data, **t)
    batch.batch = torch.arange(E, device=device).repeat_interleave(N)
    batch.ptr = torch.arange(E + 1, device=device) * N
    # the records Batch.from_data_list keeps so that to_data_list / get_example work
    # (slices along each attribute's cat dim, increments of edge_index): on the CPU, as
    # from_data_list makes them
    node_slices = torch.arange(E + 1) * N
    edge_slices = torch.arange(E + 1) * M
    zeros = torch.zeros(E, dtype=torch.long)
    batch._num_graphs = E
    batch._slice_dict = {
        "x": node_slices,
        "edge_index": edge_slices,
        "edge_attr": edge_slices.clone(),
        "layer": node_slices.clone(),
        "position": node_slices.clone(),
        "kernel_size": torch.arange(E + 1),
    }
    batch._inc_dict = {
        "x": zeros,
        "edge_index": torch.arange(E) * N,
        "edge_attr": zeros.clone(),
        "layer": zeros.clone(),
        "position": zeros.clone(),
        "kernel_size": zeros.clone(),
    }
    return batch


# ---------------------------------------------------------------------------------------
# graph -> weights


_KEYS = ("x", "edge_index", "edge_attr", "layer", "position", "kernel_size")


def _get(data, key):
    value = data[key] if key in data else None
    if not isinstance(value, Tensor):
        raise ValueError(
            f"the graph has no tensor {key!r}: graph_to_weights needs the attributes "
            f"{', '.join(_KEYS)} that weights_to_graph / stacked_weights_to_batch write"
        )
    return value


def batch_to_stacked_weights(data: Data | Batch) -> Layers:
    """Inverse of :func:`stacked_weights_to_batch`: a Batch of G graphs of one architecture
    (or one Data, G = 1) -> layers ``[(W (G, out, in[, kh, kw]), b (G, out)), ...]``.

    Weights are scattered back by (layer, position) of each edge's endpoints, so the edge
    order does not matter; the values are copied (bit-exact)."""
    if not isinstance(data, Data):
        raise TypeError(f"expected a torch_geometric Data or Batch, got {type(data).__name__}")
    x, edge_index, edge_attr = _get(data, "x"), _get(data, "edge_index"), _get(data, "edge_attr")
    layer, position, kernel_size = (
        _get(data, "layer"),
        _get(data, "position"),
        _get(data, "kernel_size"),
    )
    device = x.device
    N = layer.shape[0]
    if isinstance(data, Batch):
        G, graph = data.num_graphs, data.batch
    else:
        G, graph = 1, torch.zeros(N, dtype=torch.long, device=device)
    if N == 0 or G == 0:
        raise ValueError("the graph has no nodes: nothing to convert")
    n_layers = int(layer.max()) + 1  # node layers 0..L
    counts = torch.bincount(graph * n_layers + layer, minlength=G * n_layers).view(G, n_layers)
    if not bool((counts == counts[:1]).all()) or not bool((kernel_size == kernel_size[:1]).all()):
        raise ValueError(
            "the graphs of this batch differ in architecture (neurons per layer or kernel "
            "size): stacked weights need one architecture; use graphs_to_weights for mixed "
            "batches"
        )
    sizes = counts[0].tolist()
    if min(sizes) == 0:
        raise ValueError(
            f"neurons per layer {sizes}: some layer has no neurons, so this is not a graph "
            "made by weights_to_graph"
        )
    if bool((position < 0).any()) or bool((position >= counts[0][layer]).any()):
        raise ValueError("node positions must lie in [0, neurons of their layer)")
    kh, kw = (int(v) for v in kernel_size[0].tolist())
    conv = kh > 0
    k = kh * kw if conv else 1
    if edge_attr.dim() != 2 or edge_attr.shape[1] != k:
        raise ValueError(
            f"edge_attr must be (M, {k}) for kernel_size {(kh, kw)}, got {tuple(edge_attr.shape)}"
        )
    src, dst = edge_index[0], edge_index[1]
    edge_layer = layer[dst] - 1
    if bool((layer[src] != edge_layer).any()):
        raise ValueError("every edge must go from a neuron of layer l to one of layer l+1")
    edge_graph, i_of, j_of = graph[dst], position[dst], position[src]
    out_layers: Layers = []
    for n in range(n_layers - 1):
        inp, out = sizes[n], sizes[n + 1]
        mask = edge_layer == n
        flat = (edge_graph[mask] * out + i_of[mask]) * inp + j_of[mask]
        if flat.numel() != G * out * inp or not bool(
            (torch.bincount(flat, minlength=G * out * inp) == 1).all()
        ):
            raise ValueError(
                f"layer {n}: expected one edge per weight ({G} x {out} x {inp}), got "
                f"{flat.numel()} edges with repeats or gaps"
            )
        w = torch.empty(G * out * inp, k, dtype=edge_attr.dtype, device=device)
        w[flat] = edge_attr[mask]
        w = w.view(G, out, inp, kh, kw) if conv else w.view(G, out, inp)
        nodes = layer == n + 1
        b = torch.empty(G * out, dtype=x.dtype, device=device)
        b[graph[nodes] * out + position[nodes]] = x[nodes, 0]
        out_layers.append((w, b.view(G, out)))
    return out_layers


def graph_to_weights(data: Data) -> Layers:
    """Exact inverse of :func:`weights_to_graph`: one graph -> ``[(weight, bias), ...]``
    with weight (out, in) or (out, in, kh, kw) and bias (out,)."""
    if isinstance(data, Batch) and data.num_graphs != 1:
        raise ValueError(
            f"graph_to_weights takes one graph, got a Batch of {data.num_graphs}: use "
            "graphs_to_weights (a list of experts) or batch_to_stacked_weights (stacked)"
        )
    return [(w[0], b[0]) for w, b in batch_to_stacked_weights(data)]


def graphs_to_weights(batch: Data | Batch) -> list[Layers]:
    """A Batch of graphs of any architectures (or one Data) -> one list of layers per
    graph, ``[[(weight, bias), ...], ...]``."""
    if isinstance(batch, Batch):
        return [graph_to_weights(d) for d in batch.to_data_list()]
    return [graph_to_weights(batch)]


# ---------------------------------------------------------------------------------------
# encoder


class _GatedAttentionBlock(nn.Module):
    """One round: edge update from endpoints, then edge-gated multi-head attention along
    both edge directions, each with residual + LayerNorm (module docstring)."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads, self.d = heads, hidden // heads
        self.edge_mlp = nn.Sequential(
            nn.Linear(3 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden)
        )
        self.edge_norm = nn.LayerNorm(hidden)
        self.direction = nn.Embedding(2, hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.edge_bias = nn.Linear(hidden, heads)
        self.edge_gate = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(
            nn.Linear(hidden, 2 * hidden), nn.SiLU(), nn.Linear(2 * hidden, hidden)
        )
        self.norm2 = nn.LayerNorm(hidden)

    def forward(self, h: Tensor, e: Tensor, src: Tensor, dst: Tensor) -> tuple[Tensor, Tensor]:
        N, M = h.shape[0], e.shape[0]
        e = self.edge_norm(e + self.edge_mlp(torch.cat([h[src], h[dst], e], dim=-1)))
        # messages j -> i along both directions: forward (src -> dst), backward (dst -> src)
        send, recv = torch.cat([src, dst]), torch.cat([dst, src])
        direction = torch.arange(2, device=h.device).repeat_interleave(M)
        f = e.repeat(2, 1) + self.direction(direction)
        q, k, v = self.qkv(h).view(N, 3, self.heads, self.d).unbind(1)
        logits = (q[recv] * k[send]).sum(-1) / math.sqrt(self.d) + self.edge_bias(f)
        alpha = softmax(logits, recv, num_nodes=N)  # (2M, heads)
        gate = torch.sigmoid(self.edge_gate(f)).view(2 * M, self.heads, self.d)
        msg = alpha.unsqueeze(-1) * v[send] * gate
        agg = scatter(msg, recv, dim=0, dim_size=N, reduce="sum").reshape(N, -1)
        h = self.norm1(h + self.out(agg))
        h = self.norm2(h + self.ffn(h))
        return h, e


class WeightGraphEncoder(nn.Module):
    """Edge-gated graph attention over expert graphs -> latents (B, latent_dim).

    ``forward(data)`` takes a graph of :func:`weights_to_graph` or a Batch of them
    (:func:`stacked_weights_to_batch`, ``Batch.from_data_list``); float features are cast to
    the encoder's dtype. Invariant to permutations of hidden neurons (module docstring).

    Args:
        edge_dim: length of ``edge_attr``: 1 for linear experts, kh*kw for conv ones.
        hidden: width of node and edge states (a multiple of ``heads``).
        heads: attention heads.
        num_layers: attention rounds.
        latent_dim: output width.
        max_layers: most expert layers a graph may have (node ``layer`` <= max_layers).
        max_positions: most input neurons and most final-output neurons (the ones with a
            position embedding); hidden layers may be wider.
    """

    def __init__(
        self,
        edge_dim: int,
        hidden: int = 64,
        heads: int = 4,
        num_layers: int = 2,
        latent_dim: int = 32,
        max_layers: int = 8,
        max_positions: int = 256,
    ):
        super().__init__()
        args = dict(
            edge_dim=edge_dim,
            hidden=hidden,
            heads=heads,
            num_layers=num_layers,
            latent_dim=latent_dim,
            max_layers=max_layers,
            max_positions=max_positions,
        )
        for name, value in args.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if hidden % heads:
            raise ValueError(
                f"hidden must be a multiple of heads (one width per head), got hidden={hidden}"
                f", heads={heads}: e.g. hidden={heads * max(1, round(hidden / heads))}"
            )
        self.init_args = args
        self.edge_dim, self.max_layers, self.max_positions = edge_dim, max_layers, max_positions
        self.node_in = nn.Linear(NODE_DIM, hidden)
        self.layer_emb = nn.Embedding(max_layers + 1, hidden)
        self.input_pos = nn.Embedding(max_positions, hidden)
        self.output_pos = nn.Embedding(max_positions, hidden)
        self.edge_in = nn.Linear(edge_dim, hidden)
        self.blocks = nn.ModuleList(_GatedAttentionBlock(hidden, heads) for _ in range(num_layers))
        self.readout = nn.Sequential(
            nn.Linear(2 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, latent_dim)
        )

    def forward(self, data: Data | Batch) -> Tensor:
        """Graph(s) -> latents (B, latent_dim), B = number of graphs (1 for a Data)."""
        if not isinstance(data, Data):
            raise TypeError(
                f"WeightGraphEncoder takes a torch_geometric Data or Batch from "
                f"weights_to_graph, got {type(data).__name__}"
            )
        x, edge_attr = _get(data, "x"), _get(data, "edge_attr")
        edge_index, layer, position = (
            _get(data, "edge_index"),
            _get(data, "layer"),
            _get(data, "position"),
        )
        p = self.node_in.weight
        if x.device != p.device:
            raise ValueError(
                f"the graph is on {x.device} but the encoder on {p.device}: move one with .to()"
            )
        if edge_attr.dim() != 2 or edge_attr.shape[1] != self.edge_dim:
            raise ValueError(
                f"edge_attr must be (M, edge_dim={self.edge_dim}), got {tuple(edge_attr.shape)}:"
                " edge_dim is 1 for linear experts and kh*kw for conv ones"
            )
        if x.dim() != 2 or x.shape[1] != NODE_DIM:
            raise ValueError(f"x must be (N, {NODE_DIM}) [bias, is_input], got {tuple(x.shape)}")
        N = x.shape[0]
        if isinstance(data, Batch):
            B, graph = data.num_graphs, data.batch
        else:
            B, graph = 1, torch.zeros(N, dtype=torch.long, device=x.device)
        n_layers = int(layer.max())
        if n_layers > self.max_layers:
            raise ValueError(
                f"a graph has {n_layers} layers but this encoder embeds at most max_layers="
                f"{self.max_layers}: build it with max_layers >= {n_layers}"
            )
        is_in = layer == 0
        is_out = layer == scatter(layer, graph, dim=0, dim_size=B, reduce="max")[graph]
        fixed = is_in | is_out
        if bool(fixed.any()) and int(position[fixed].max()) >= self.max_positions:
            big = int(position[fixed].max()) + 1
            raise ValueError(
                f"a graph has {big} input or output neurons but this encoder embeds at most "
                f"max_positions={self.max_positions}: build it with max_positions >= {big}"
            )
        pos = position.clamp(0, self.max_positions - 1)  # hidden positions are not embedded
        h = (
            self.node_in(x.to(p.dtype))
            + self.layer_emb(layer)
            + self.input_pos(pos) * is_in.unsqueeze(-1).to(p.dtype)
            + self.output_pos(pos) * is_out.unsqueeze(-1).to(p.dtype)
        )
        e = self.edge_in(edge_attr.to(p.dtype))
        src, dst = edge_index[0], edge_index[1]
        for block in self.blocks:
            h, e = block(h, e, src, dst)
        pooled = torch.cat(
            [global_mean_pool(h, graph, size=B), global_max_pool(h, graph, size=B)], dim=-1
        )
        return self.readout(pooled)
