r"""VectorWorld's generative core: an edge-gated relational DiT trained by MeanFlow.

Data-agnostic: a sample is a *set* of ``N`` tokens ``x`` ``(B, N, D)`` (lane polylines,
agents, ... whatever the integrator encodes), an integer relation matrix ``rel``
``(B, N, N)`` with values in ``[0, R)`` (pred/succ/left/right/none between lanes,
agent-on-lane, context-tile vs new-tile, ...), a padding mask ``mask`` ``(B, N)`` (True =
a real token) and optionally a condition ``cond``, global ``(B, C)`` or per token
``(B, N, C)``. The network predicts an **average velocity** ``u(z, r, t)`` with the shape of
``x``; one network call turns noise into a sample (:func:`sample_one_step`).

The network (:class:`EdgeGatedRelationalDiT`)
---------------------------------------------
Tokens are embedded linearly (``[z, m]``: the noisy features and, with ``pin_input``, the
0/1 mask of pinned entries, so the network can tell known context from noise), then
``depth`` DiT blocks with adaLN-Zero, a final adaLN layer and a zero-initialised linear
head. There is no positional encoding: the only structure is ``rel``, so the network is
permutation equivariant (permute tokens and ``rel`` consistently, the outputs permute).

**Relational, edge-gated attention.** Per head ``h`` (head width ``d``), relation
``rho_ij = rel[b, i, j]``:

.. math::

    s_{ij} = q_i \cdot k_j / \sqrt d, \qquad
    p_{ij} = \mathrm{softmax}_{j \in \text{real}}\big(s_{ij} + b_{h,\rho_{ij}}\big),

    g_{ij} = \sigma\Big(\sum_c w_{h,\rho_{ij},c}\, q_{ic} k_{jc} / \sqrt d
                         + c_{h,\rho_{ij}}\Big), \qquad
    a_{ij} = p_{ij}\, g_{ij}, \qquad o_i = \sum_j a_{ij} v_j .

So ``f(q_i, k_j) = q_i \odot k_j / \sqrt d`` and ``w[h, rho] . f`` is a *relation-specific
diagonal bilinear form* ``q_i^T diag(w_{h,rho}) k_j``: the gate reads the content of both
endpoints through a metric that each relation type learns for itself (a "left neighbour"
can be trusted for different feature channels than a "successor"), at the cost of one
extra ``(N, N)`` matmul per relation type (the relation types are few). ``w`` starts at 0
and ``c`` at 0, so every gate starts at 1/2 and the gate is content-blind until trained.

**Not renormalised.** Renormalising, ``a_ij = p_ij g_ij / sum_j p_ij g_ij``, equals a
softmax over the logits ``s_ij + b + log g_ij``: it is only another parametrisation of the
logit and keeps ``sum_j a_ij = 1``, so a token must still take a full unit of message
from somewhere. Left unnormalised, the attention mass ``sum_j a_ij`` in ``(0, 1)`` is a
learned, relation-aware "how much to listen": a new-tile lane can ignore an unrelated
context tile, a token with no relevant neighbour can receive (nearly) nothing. Padding
keys get logit ``finfo.min`` so ``p_ij`` is exactly 0 for them; padded tokens' inputs
are replaced by zeros and their outputs are 0, so padding values never reach real tokens.

Attention is written as explicit matmuls and a softmax (no
``F.scaled_dot_product_attention``/flash kernels, which have no forward-mode AD), so
``torch.func.jvp`` runs through the whole network.

**Time conditioning.** MeanFlow's network sees both times; we embed ``t`` and the
interval length ``t - r`` (the pair the MeanFlow paper found best) with sinusoidal
features ``[cos(s t f_k), sin(s t f_k)]``, ``f_k = 10^{-4 k / K}``, ``s = time_scale``,
concatenate the two and map them by one 2-layer MLP (the same as summing two MLP
embeddings whose first layers are the two blocks of that layer). ``s = 1`` by default,
not DiT's 1000: the JVP target contains ``(t - r) d_t u``, and features oscillating at
``s`` radians per unit time let ``|d_t u|`` grow like ``s |u|``; on the 2-D test problem
``s = 1000`` made the interval targets' error 10-100x larger and one-step samples worse
than ``s = 1``-10 (``d_t u`` must be smooth for the target to be a good regression
target; the MLP still resolves ``t`` from smooth features). The condition (if
``cond_dim > 0``) adds an MLP embedding of ``cond`` (broadcast over tokens when global,
per token otherwise). The sum ``c`` (``(B, 1 or N, width)``) drives
adaLN-Zero: per block ``(shift, scale, gate) x 2 = Linear(SiLU(c))``, initialised to 0,
``h += gate_1 * Attn(LN(h) (1 + scale_1) + shift_1)``, the same for the MLP; at
initialisation every block is the identity and the output is 0 (DiT). ``t - r`` is
computed *inside* the network, so a JVP with tangents ``(dz, dr, dt) = (v, 0, 1)`` is the
total derivative along the trajectory.

MeanFlow (:func:`meanflow_loss`; Geng et al. 2025)
-------------------------------------------------
``z_t = (1 - t) x + t eps`` (``t = 0`` data, ``t = 1`` noise), conditional velocity
``v = eps - x``, average velocity ``u(z_t, r, t) = 1/(t - r) \int_r^t v(z_s, s) ds``.
Differentiating ``(t - r) u = \int_r^t v`` in ``t`` gives the MeanFlow identity

.. math::

    u(z_t, r, t) = v(z_t, t) - (t - r)\, \tfrac{d}{dt} u(z_t, r, t), \qquad
    \tfrac{d}{dt} u = v \cdot \partial_z u + \partial_t u ,

so the regression target is ``u_tgt = v - (t - r) sg(du/dt)``, with ``du/dt`` from ONE
``torch.func.jvp`` of the network in ``(z, r, t)`` with tangents ``(v, 0, 1)`` (it returns
``u`` too, so the JVP costs one augmented forward pass). Per sample the squared error is
the masked mean over its loss entries (real tokens, unpinned features)
``d = mean ||u - sg(u_tgt)||^2``, and the loss is ``mean_b sg(w_b) d_b`` with the paper's
adaptive weight ``w = 1 / (d + c)^p`` (``p = weight_power = 1``, ``c = weight_eps =
1e-3``, the paper's values). With ``p = 1`` the gradient is ``grad d / (d + c) =
grad log(d + c)``: a robust, scale-free loss that stops a few samples with huge JVP targets
from dominating, but whose minimiser is no longer the conditional mean (so the
instantaneous velocity is slightly biased; ``p = 0`` is plain L2). Deviation from the
paper: ``d`` is a *mean* over a sample's entries, not a sum, so ``c`` means the same for
scenes of any size.

**Sampling (r, t)** (:func:`sample_times`): a fixed share ``flow_ratio`` of the batch has
``r = t`` (the target is then ``v``: plain flow matching, which trains the instantaneous
velocity ``u(z, t, t)`` the multi-step sampler uses and which the MeanFlow targets lean
on); a share ``jump_ratio`` is ``(r, t) = (0, 1)``; the rest draws two logit-normal times
``sigmoid(N(logit_mean, logit_std^2))`` (paper: -0.4, 1) and sets ``t = max``,
``r = min``. Counts are fixed per batch (rounded; at least one jump when
``jump_ratio > 0``), their order shuffled. Defaults ``flow_ratio = 0.5`` (between the
paper's 75 % (ImageNet) and 25 % (CIFAR-10) of ``r = t``), ``jump_ratio = 0.1``.

**Large-step supervision.** One-step sampling evaluates the network at exactly one point
of the (r, t) square, ``(0, 1)``, but two logit-normal draws almost never land near both
corners at once, so without help the query point that matters most is extrapolated.
Always spending a share of the batch on ``(0, 1)`` trains it directly with the JVP target
``u_tgt = v - du/dt`` (the MeanFlow identity for the whole interval), which ties the jump
to the instantaneous velocity the flow-matching share learns.

**Pinned entries (outpainting).** ``pinned`` (bool, shape of ``x``) marks known features
(seam endpoints, whole context tokens). They are never noised:
``z_t = m x + (1 - m)((1 - t) x + t eps)``, so their tangent is 0 (``dz/dt = (1 - m) v``),
and they are left out of the loss. The samplers reset them to ``known`` before every
network call and in the result, so they come back exactly.

Samplers: :func:`sample_one_step` ``x = eps - u(eps, 0, 1)`` (one call, no ODE solver);
:func:`sample_multistep` Euler on ``u(z, t, t)`` from ``t = 1`` to 0 (``mode="flow"``), or
``K`` MeanFlow jumps ``z <- z - (t_k - t_{k+1}) u(z, t_{k+1}, t_k)`` (``mode="meanflow"``).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

__all__ = [
    "RelationalDiTConfig",
    "EdgeGatedRelationalDiT",
    "EdgeGatedAttention",
    "timestep_embedding",
    "sample_times",
    "meanflow_loss",
    "sample_one_step",
    "sample_multistep",
]

_INT_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


# ------------------------------------------------------------------ config
@dataclasses.dataclass(frozen=True)
class RelationalDiTConfig:
    """Constructor arguments of :class:`EdgeGatedRelationalDiT` (saved in checkpoints).

    token_dim D (features per token), cond_dim C (0: no condition), width, depth (blocks),
    heads (width % heads == 0), num_relations R, mlp_ratio (MLP hidden = width * ratio),
    freq_dim (sinusoidal features per time, even), time_scale (t is multiplied by it
    before the sinusoids), pin_input (feed the pinned-entry mask to the network).
    """

    token_dim: int
    cond_dim: int = 0
    width: int = 128
    depth: int = 4
    heads: int = 4
    num_relations: int = 5
    mlp_ratio: float = 4.0
    freq_dim: int = 64
    time_scale: float = 1.0
    pin_input: bool = True

    def __post_init__(self):
        for name, low in (
            ("token_dim", 1),
            ("cond_dim", 0),
            ("width", 1),
            ("depth", 1),
            ("heads", 1),
            ("num_relations", 1),
            ("freq_dim", 2),
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(
                    f"RelationalDiTConfig.{name} must be an integer >= {low}, got {value!r}"
                )
        w = self.width
        if w % self.heads:
            raise ValueError(
                f"width must be a multiple of heads, got width={self.width}, "
                f"heads={self.heads}; pick e.g. width={self.heads * max(1, w // self.heads)}"
            )
        if self.freq_dim % 2:
            raise ValueError(f"freq_dim must be even (cos and sin), got {self.freq_dim}")
        for name in ("mlp_ratio", "time_scale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(
                    f"RelationalDiTConfig.{name} must be a positive number, got {value!r}"
                )
        if not isinstance(self.pin_input, bool):
            raise ValueError(f"pin_input must be a bool, got {self.pin_input!r}")

    @classmethod
    def from_dict(cls, d) -> RelationalDiTConfig:
        """From a dict (or a config, returned as is); unknown keys are an error."""
        if isinstance(d, cls):
            return d
        if not isinstance(d, dict):
            raise TypeError(f"a RelationalDiTConfig is built from a dict, got {type(d).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise ValueError(f"unknown RelationalDiTConfig keys {unknown}; valid: {sorted(fields)}")
        return cls(**d)

    def to_dict(self) -> dict:
        """A JSON-able dict; ``RelationalDiTConfig(**d)`` rebuilds it."""
        return dataclasses.asdict(self)


# ------------------------------------------------------------------ building blocks
def timestep_embedding(
    t: torch.Tensor, dim: int, scale: float = 1000.0, max_period: float = 1e4
) -> torch.Tensor:
    """Sinusoidal features of times ``t`` ``(B,)`` -> ``(B, dim)``:
    ``[cos(scale t f_k), sin(scale t f_k)]``, ``f_k = max_period^{-k / (dim/2)}``."""
    half = dim // 2
    k = torch.arange(half, device=t.device, dtype=t.dtype)
    freqs = torch.exp(-math.log(max_period) * k / half)
    ang = (scale * t)[..., None] * freqs
    return torch.cat([torch.cos(ang), torch.sin(ang)], dim=-1)


def _mlp(d_in: int, width: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, width), nn.SiLU(), nn.Linear(width, width))


def _modulate(h: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return h * (1 + scale) + shift


class EdgeGatedAttention(nn.Module):
    """Multi-head relational attention with edge gates (module docstring).

    ``forward(h (B, N, W), rel (B, N, N) long, key_mask (B, N) bool)`` ->
    ``(out (B, N, W), gates (B, H, N, N))``.
    """

    def __init__(self, width: int, heads: int, num_relations: int):
        super().__init__()
        self.heads, self.head_dim, self.num_relations = heads, width // heads, num_relations
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.rel_bias = nn.Parameter(torch.zeros(heads, num_relations))  # b[h, rho]
        self.gate_weight = nn.Parameter(torch.zeros(heads, num_relations, self.head_dim))
        self.gate_bias = nn.Parameter(torch.zeros(heads, num_relations))  # c[h, rho]

    def forward(self, h, rel, key_mask):
        B, N, W = h.shape
        H, d = self.heads, self.head_dim
        q, k, v = self.qkv(h).view(B, N, 3, H, d).permute(2, 0, 3, 1, 4)  # (B, H, N, d)
        q = q * d**-0.5
        kt = k.transpose(-1, -2)
        logits = q @ kt + self.rel_bias[:, rel].transpose(0, 1)
        logits = logits.masked_fill(~key_mask[:, None, None, :], torch.finfo(h.dtype).min)
        p = torch.softmax(logits, dim=-1)
        gates = torch.sigmoid(self._gate_logits(q, kt, rel))
        out = ((p * gates) @ v).transpose(1, 2).reshape(B, N, W)
        return self.proj(out), gates

    def _gate_logits(self, q, kt, rel):
        """``q_i^T diag(w[h, rel_ij]) k_j / sqrt(d) + c[h, rel_ij]`` (B, H, N, N).

        Without gradients (sampling: every tile the world generates) the products of
        all R relation types come from one batched matmul and each pair's own type is
        gathered; with gradients, one matmul per type selected where ``rel == rho``. The
        values are the same bit for bit; the loop, 3x slower (30% of a tile's generation
        was its ``torch.where``), stays for training because the batched form's backward
        sums over the types in another order: it changed the shipped world's training at
        rounding level from step ~75, and ``make pretrained-vectorworld`` must remake
        the shipped files bit for bit."""
        B, H, N, _ = q.shape
        gl = self.gate_bias[:, rel].transpose(0, 1)
        R = self.num_relations
        if torch.is_grad_enabled():
            for rho in range(R):
                s_rho = (q * self.gate_weight[None, :, rho, None, :]) @ kt
                gl = gl + s_rho if R == 1 else torch.where((rel == rho)[:, None], gl + s_rho, gl)
            return gl
        s_all = (q[:, :, None] * self.gate_weight[None, :, :, None, :]) @ kt[:, :, None]
        if R == 1:
            return gl + s_all[:, :, 0]
        return gl + s_all.gather(2, rel[:, None, None].expand(B, H, 1, N, N))[:, :, 0]


class _Block(nn.Module):
    """DiT block with adaLN-Zero around edge-gated attention and an MLP."""

    def __init__(self, width, heads, num_relations, mlp_ratio):
        super().__init__()
        self.norm1 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.attn = EdgeGatedAttention(width, heads, num_relations)
        self.norm2 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        hidden = max(1, int(round(width * mlp_ratio)))
        self.mlp = nn.Sequential(
            nn.Linear(width, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, width)
        )
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(width, 6 * width))
        nn.init.zeros_(self.ada[1].weight)
        nn.init.zeros_(self.ada[1].bias)

    def forward(self, h, c, rel, key_mask):
        sh1, sc1, g1, sh2, sc2, g2 = self.ada(c).chunk(6, dim=-1)
        a, gates = self.attn(_modulate(self.norm1(h), sh1, sc1), rel, key_mask)
        h = h + g1 * a
        h = h + g2 * self.mlp(_modulate(self.norm2(h), sh2, sc2))
        return h, gates


# ------------------------------------------------------------------ validation
def _fail_tensor(name, value, what):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor ({what}), got {type(value).__name__}")


def _check_inputs(x, rel, mask, cond=None, pinned=None, *, config=None, name="x"):
    """Validate a batch once, at the boundary; returns ``rel`` as long."""
    _fail_tensor(name, x, "(B, N, token_dim) floats")
    if x.ndim != 3 or not x.is_floating_point():
        raise ValueError(
            f"{name} must be a floating tensor of shape (B, N, token_dim), got "
            f"{x.dtype} of shape {tuple(x.shape)}; add a batch axis for a single scene"
        )
    B, N, D = x.shape
    if config is not None and D != config.token_dim:
        raise ValueError(
            f"{name} has {D} features per token but the model was built with "
            f"token_dim={config.token_dim}; encode tokens to {config.token_dim} features"
        )
    _fail_tensor("mask", mask, "(B, N) bool, True = real token")
    if mask.dtype != torch.bool or tuple(mask.shape) != (B, N):
        raise ValueError(
            f"mask must be a bool tensor of shape (B, N) = {(B, N)} (True = real token), got "
            f"{mask.dtype} of shape {tuple(mask.shape)}"
        )
    _fail_tensor("rel", rel, "(B, N, N) integer relation types")
    if tuple(rel.shape) != (B, N, N):
        raise ValueError(
            f"rel must have shape (B, N, N) = {(B, N, N)} (one relation type per ordered "
            f"token pair), got {tuple(rel.shape)}"
        )
    if rel.dtype not in _INT_DTYPES:
        raise ValueError(
            f"rel must hold integer relation types, got dtype {rel.dtype}; use rel.long()"
        )
    if rel.numel() and config is not None:
        lo, hi = int(rel.min()), int(rel.max())
        if lo < 0 or hi >= config.num_relations:
            raise ValueError(
                f"rel values must lie in [0, num_relations) = [0, {config.num_relations}), "
                f"got values in [{lo}, {hi}]; map every relation (including 'none' and "
                "padding pairs) to a type below num_relations, or build the model with more"
            )
    if not bool(torch.isfinite(x[mask]).all()):
        raise ValueError(
            f"{name} has NaN or inf in a real token (mask=True); clean the features or "
            "mark the token as padding (padded tokens may hold anything)"
        )
    if pinned is not None:
        _fail_tensor("pinned", pinned, "bool, shape of x")
        if pinned.dtype != torch.bool or pinned.shape != x.shape:
            raise ValueError(
                f"pinned must be a bool tensor of the shape of {name} {tuple(x.shape)} "
                f"(True = a known entry), got {pinned.dtype} of shape {tuple(pinned.shape)}"
            )
    cond_dim = config.cond_dim if config is not None else None
    if cond is None:
        if cond_dim:
            raise ValueError(
                f"the model was built with cond_dim={cond_dim}; pass cond of shape "
                f"(B, {cond_dim}) or (B, N, {cond_dim})"
            )
    else:
        _fail_tensor("cond", cond, "(B, C) or (B, N, C)")
        if cond_dim == 0:
            raise ValueError(
                "cond was given but the model was built with cond_dim=0; drop cond or "
                "build the model with cond_dim > 0"
            )
        C = cond.shape[-1] if cond.ndim else -1
        ok_shape = (cond.ndim == 2 and cond.shape[0] == B) or (
            cond.ndim == 3 and tuple(cond.shape[:2]) == (B, N)
        )
        if not ok_shape or (cond_dim is not None and C != cond_dim):
            raise ValueError(
                f"cond must have shape (B, C) = ({B}, {cond_dim or 'C'}) (global) or "
                f"(B, N, C) = ({B}, {N}, {cond_dim or 'C'}) (per token), got "
                f"{tuple(cond.shape)}"
            )
        if not cond.is_floating_point():
            raise ValueError(f"cond must be floating, got {cond.dtype}")
        real = cond[mask] if cond.ndim == 3 else cond
        if not bool(torch.isfinite(real).all()):
            raise ValueError("cond has NaN or inf (in a real token); clean the condition")
    return rel.long()


def _as_times(value, B, like, name):
    """A time as a ``(B,)`` tensor in ``like``'s dtype and device."""
    if isinstance(value, bool) or not isinstance(value, (int, float, torch.Tensor)):
        raise TypeError(f"{name} must be a float or a tensor of shape (B,), got {value!r}")
    if not isinstance(value, torch.Tensor):
        return torch.full((B,), float(value), dtype=like.dtype, device=like.device)
    if value.ndim == 0:
        value = value.expand(B)
    if tuple(value.shape) != (B,):
        raise ValueError(
            f"{name} must be a scalar or have shape (B,) = ({B},), got {tuple(value.shape)}"
        )
    return value.to(dtype=like.dtype, device=like.device)


def _check_times(r, t):
    if not bool(torch.isfinite(r).all() & torch.isfinite(t).all()):
        raise ValueError("r and t must be finite")
    if not bool(((r >= 0) & (r <= t) & (t <= 1)).all()):
        raise ValueError(
            f"times must satisfy 0 <= r <= t <= 1 (t = 1 noise, t = 0 data), got r in "
            f"[{float(r.min()):.4g}, {float(r.max()):.4g}], t in [{float(t.min()):.4g}, "
            f"{float(t.max()):.4g}]"
        )


# ------------------------------------------------------------------ the network
class EdgeGatedRelationalDiT(nn.Module):
    """Edge-gated relational DiT predicting the MeanFlow average velocity (module docstring).

    ``model(z, r, t, rel, mask, cond=None, pinned=None) -> u`` with z ``(B, N, token_dim)``,
    r, t floats or ``(B,)`` with ``0 <= r <= t <= 1``, rel ``(B, N, N)`` integers in
    ``[0, num_relations)``, mask ``(B, N)`` bool (True = real token), cond ``(B, cond_dim)``
    or ``(B, N, cond_dim)``, pinned bool like z; u ``(B, N, token_dim)``, 0 at padding.
    Arguments: those of :class:`RelationalDiTConfig` (recorded in ``init_args``).
    """

    def __init__(
        self,
        token_dim: int,
        cond_dim: int = 0,
        width: int = 128,
        depth: int = 4,
        heads: int = 4,
        num_relations: int = 5,
        mlp_ratio: float = 4.0,
        freq_dim: int = 64,
        time_scale: float = 1.0,
        pin_input: bool = True,
    ):
        super().__init__()
        cfg = RelationalDiTConfig(
            token_dim=token_dim,
            cond_dim=cond_dim,
            width=width,
            depth=depth,
            heads=heads,
            num_relations=num_relations,
            mlp_ratio=float(mlp_ratio),
            freq_dim=freq_dim,
            time_scale=float(time_scale),
            pin_input=pin_input,
        )
        self.config = cfg
        self.init_args = cfg.to_dict()
        W = cfg.width
        self.embed = nn.Linear(cfg.token_dim * (2 if cfg.pin_input else 1), W)
        self.time_embed = _mlp(2 * cfg.freq_dim, W)  # [emb(t), emb(t - r)]
        self.cond_embed = _mlp(cfg.cond_dim, W) if cfg.cond_dim else None
        self.blocks = nn.ModuleList(
            _Block(W, cfg.heads, cfg.num_relations, cfg.mlp_ratio) for _ in range(cfg.depth)
        )
        self.final_norm = nn.LayerNorm(W, elementwise_affine=False, eps=1e-6)
        self.final_ada = nn.Sequential(nn.SiLU(), nn.Linear(W, 2 * W))
        self.head = nn.Linear(W, cfg.token_dim)
        for lin in (self.final_ada[1], self.head):
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)

    # -- config ---------------------------------------------------------------------
    def to_config(self) -> RelationalDiTConfig:
        return self.config

    @classmethod
    def from_config(cls, config) -> EdgeGatedRelationalDiT:
        """A fresh (untrained) model from a :class:`RelationalDiTConfig` or its dict."""
        return cls(**RelationalDiTConfig.from_dict(config).to_dict())

    # -- forward --------------------------------------------------------------------
    def _param_dtype(self):
        return self.embed.weight.dtype

    def validate(self, z, r, t, rel, mask, cond=None, pinned=None):
        """Check a batch (raises ValueError/TypeError); returns ``(r, t, rel)`` normalised."""
        rel = _check_inputs(z, rel, mask, cond, pinned, config=self.config, name="z")
        if z.dtype != self._param_dtype():
            raise TypeError(
                f"z is {z.dtype} but the model's parameters are {self._param_dtype()}; "
                f"convert one of them (e.g. model.to({z.dtype}))"
            )
        B = z.shape[0]
        r, t = _as_times(r, B, z, "r"), _as_times(t, B, z, "t")
        _check_times(r, t)
        return r, t, rel

    def forward(self, z, r, t, rel, mask, cond=None, pinned=None):
        """Average velocity ``u(z, r, t)`` ``(B, N, token_dim)`` (class docstring)."""
        r, t, rel = self.validate(z, r, t, rel, mask, cond, pinned)
        return self._run(z, r, t, rel, mask, cond, pinned)[0]

    def gates(self, z, r, t, rel, mask, cond=None, pinned=None) -> list[torch.Tensor]:
        """The edge gates ``g_ij`` of every block: ``depth`` tensors ``(B, heads, N, N)``."""
        r, t, rel = self.validate(z, r, t, rel, mask, cond, pinned)
        return self._run(z, r, t, rel, mask, cond, pinned)[1]

    def _run(self, z, r, t, rel, mask, cond, pinned):
        cfg = self.config
        m = mask[..., None]
        feats = z
        if cfg.pin_input:
            pin = pinned.to(z.dtype) if pinned is not None else torch.zeros_like(z)
            feats = torch.cat([z, pin], dim=-1)
        feats = torch.where(m, feats, torch.zeros((), dtype=z.dtype, device=z.device))
        h = self.embed(feats)
        emb = timestep_embedding(torch.stack([t, t - r], dim=-1), cfg.freq_dim, cfg.time_scale)
        c = self.time_embed(emb.flatten(1))[:, None, :]  # (B, 1, W)
        if self.cond_embed is not None:
            if cond.ndim == 2:
                c = c + self.cond_embed(cond)[:, None, :]
            else:
                cond = torch.where(m, cond, torch.zeros((), dtype=cond.dtype, device=z.device))
                c = c + self.cond_embed(cond)
        gates = []
        for block in self.blocks:
            h, g = block(h, c, rel, mask)
            gates.append(g)
        shift, scale = self.final_ada(c).chunk(2, dim=-1)
        out = self.head(_modulate(self.final_norm(h), shift, scale))
        return torch.where(m, out, torch.zeros((), dtype=out.dtype, device=out.device)), gates


# ------------------------------------------------------------------ MeanFlow training
def _check_ratio(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")


def _gen_device(generator, like):
    return generator.device if generator is not None else like.device


def sample_times(
    batch: int,
    *,
    flow_ratio: float = 0.5,
    jump_ratio: float = 0.1,
    logit_mean: float = -0.4,
    logit_std: float = 1.0,
    generator: torch.Generator | None = None,
    like: torch.Tensor | None = None,
):
    """MeanFlow's (r, t) pairs: ``(r (B,), t (B,), kind (B,) long)``.

    kind 0: ``r = t`` (flow matching, share ``flow_ratio``), 1: ``r < t`` from two
    logit-normal draws (the rest), 2: ``(r, t) = (0, 1)`` (the one-step jump, share
    ``jump_ratio``, at least one sample when > 0). Counts are rounded, order shuffled.
    Tensors follow ``like``'s dtype and device (default float32 on CPU).
    """
    _check_ratio("flow_ratio", flow_ratio)
    _check_ratio("jump_ratio", jump_ratio)
    if flow_ratio + jump_ratio > 1 + 1e-12:
        raise ValueError(f"flow_ratio + jump_ratio must be <= 1, got {flow_ratio} + {jump_ratio}")
    if isinstance(logit_std, bool) or not isinstance(logit_std, (int, float)) or logit_std < 0:
        raise ValueError(f"logit_std must be a number >= 0, got {logit_std!r}")
    if like is None:
        like = torch.zeros(())
    B = int(batch)
    n_jump = min(B, max(1, round(jump_ratio * B))) if jump_ratio > 0 else 0
    n_flow = min(B - n_jump, round(flow_ratio * B))
    kind = torch.cat(
        [
            torch.full((n_jump,), 2, dtype=torch.long),
            torch.zeros(n_flow, dtype=torch.long),
            torch.ones(B - n_jump - n_flow, dtype=torch.long),
        ]
    )
    dev = _gen_device(generator, like)
    kind = kind.to(dev)[torch.randperm(B, generator=generator, device=dev)]
    draws = torch.randn(2, B, generator=generator, device=dev, dtype=torch.float64)
    s = torch.sigmoid(logit_mean + logit_std * draws)
    t = torch.where(kind == 0, s[0], s.max(0).values)
    r = torch.where(kind == 0, s[0], s.min(0).values)
    t = torch.where(kind == 2, torch.ones_like(t), t)
    r = torch.where(kind == 2, torch.zeros_like(r), r)
    out = dict(dtype=like.dtype, device=like.device)
    return r.to(**out), t.to(**out), kind.to(like.device)


def meanflow_loss(
    model,
    x: torch.Tensor,
    rel: torch.Tensor,
    mask: torch.Tensor,
    cond: torch.Tensor | None = None,
    *,
    generator: torch.Generator | None = None,
    pinned: torch.Tensor | None = None,
    flow_ratio: float = 0.5,
    jump_ratio: float = 0.1,
    logit_mean: float = -0.4,
    logit_std: float = 1.0,
    weight_power: float = 1.0,
    weight_eps: float = 1e-3,
):
    """The MeanFlow loss of a batch of data ``x`` ``(B, N, D)`` (module docstring).

    ``model``: an :class:`EdgeGatedRelationalDiT` or any callable
    ``model(z, r, t, rel, mask, cond=None, pinned=None) -> u`` that torch.func.jvp can
    trace. ``pinned`` (bool like ``x``): entries known at sampling time; they keep
    their data values in ``z_t`` and are left out of the loss. Noise and times come from
    ``generator`` (its device) or the global RNG.

    Returns ``(loss, stats)``: ``loss`` a scalar to minimise, ``mean_b sg(w_b) d_b`` with
    ``d_b`` the masked mean of ``(u - sg(u_tgt))^2`` and ``w = (d + weight_eps)^-p``;
    ``stats`` detached scalars: ``mse`` (mean d), ``mse_flow``/``mse_interval``/
    ``mse_jump`` (per kind of (r, t), when present), ``weight`` (mean w).
    """
    config = getattr(model, "config", None)
    rel = _check_inputs(x, rel, mask, cond, pinned, config=config)
    if isinstance(model, EdgeGatedRelationalDiT) and x.dtype != model._param_dtype():
        raise TypeError(
            f"x is {x.dtype} but the model's parameters are {model._param_dtype()}; "
            f"convert one of them (e.g. model.to({x.dtype}))"
        )
    for name, value in (("weight_power", weight_power), ("weight_eps", weight_eps)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    if weight_power > 0 and weight_eps <= 0:
        raise ValueError("weight_eps must be > 0 when weight_power > 0 (it bounds the weight)")
    B = x.shape[0]
    r, t, kind = sample_times(
        B,
        flow_ratio=flow_ratio,
        jump_ratio=jump_ratio,
        logit_mean=logit_mean,
        logit_std=logit_std,
        generator=generator,
        like=x,
    )
    dev = _gen_device(generator, x)
    eps = torch.randn(x.shape, generator=generator, device=dev, dtype=x.dtype).to(x.device)
    x = torch.where(mask[..., None], x, torch.zeros((), dtype=x.dtype, device=x.device))
    tb = t[:, None, None]
    z = (1 - tb) * x + tb * eps
    v = eps - x
    dz = v
    free = mask[..., None].expand_as(x)
    if pinned is not None:
        z = torch.where(pinned, x, z)
        dz = torch.where(pinned, torch.zeros_like(v), v)
        free = free & ~pinned

    if isinstance(model, EdgeGatedRelationalDiT):  # checked above: skip the per-call checks

        def u_fn(z_, r_, t_):
            return model._run(z_, r_, t_, rel, mask, cond, pinned)[0]

    else:

        def u_fn(z_, r_, t_):
            return model(z_, r_, t_, rel, mask, cond=cond, pinned=pinned)

    u, dudt = torch.func.jvp(u_fn, (z, r, t), (dz, torch.zeros_like(r), torch.ones_like(t)))
    u_tgt = (v - (t - r)[:, None, None] * dudt).detach()
    w_entry = free.to(x.dtype)
    count = w_entry.sum(dim=(1, 2))
    d = ((u - u_tgt) ** 2 * w_entry).sum(dim=(1, 2)) / count.clamp(min=1)
    has = count > 0
    weight = (
        (d.detach() + weight_eps) ** (-weight_power) if weight_power > 0 else torch.ones_like(d)
    )
    if bool(has.any()):
        loss = (weight * d)[has].mean()
    else:  # every entry pinned or padded: nothing to learn, keep the graph
        loss = (u * 0).sum()
    stats = {"loss": loss.detach()}
    if bool(has.any()):
        stats["mse"] = d.detach()[has].mean()
        stats["weight"] = weight[has].mean()
        for k, name in ((0, "mse_flow"), (1, "mse_interval"), (2, "mse_jump")):
            sel = has & (kind == k)
            if bool(sel.any()):
                stats[name] = d.detach()[sel].mean()
    return loss, stats


# ------------------------------------------------------------------ samplers
def _check_pins(noise, pinned, known):
    if pinned is None:
        if known is not None:
            raise ValueError("known was given without pinned; pass pinned (bool like noise)")
        return None, None
    if known is None:
        raise ValueError("pinned was given without known; pass the known values (like noise)")
    _fail_tensor("noise", noise, "(B, N, token_dim) floats")
    _fail_tensor("pinned", pinned, "bool, shape of noise")
    _fail_tensor("known", known, "the known values, shape of noise")
    if pinned.dtype != torch.bool or pinned.shape != noise.shape:
        raise ValueError(
            f"pinned must be a bool tensor of the shape of noise {tuple(noise.shape)} "
            f"(True = a known entry), got {pinned.dtype} of shape {tuple(pinned.shape)}"
        )
    if known.shape != noise.shape:
        raise ValueError(
            f"known must have the shape of noise {tuple(noise.shape)}, got {tuple(known.shape)}"
        )
    if not bool(torch.isfinite(known[pinned]).all()):
        raise ValueError("known has NaN or inf at a pinned entry; give every pinned value")
    known = known.to(dtype=noise.dtype, device=noise.device)
    return pinned, known


def _pin(z, pinned, known):
    return z if pinned is None else torch.where(pinned, known, z)


def _zero_padding(x, mask):
    return torch.where(mask[..., None], x, torch.zeros((), dtype=x.dtype, device=x.device))


@torch.no_grad()
def sample_one_step(model, noise, rel, mask, cond=None, pinned=None, known=None):
    """One-step MeanFlow sample ``x = eps - u(eps, r=0, t=1)`` ``(B, N, D)``.

    noise ``(B, N, D)`` (eps ~ N(0, I)); pinned entries are set to ``known`` before the
    network call and in the result (exactly); padded tokens come back as 0.
    """
    pinned, known = _check_pins(noise, pinned, known)
    z = _pin(noise, pinned, known)
    B = noise.shape[0]
    zeros = torch.zeros(B, dtype=noise.dtype, device=noise.device)
    u = model(z, zeros, torch.ones_like(zeros), rel, mask, cond=cond, pinned=pinned)
    return _zero_padding(_pin(z - u, pinned, known), mask)


@torch.no_grad()
def sample_multistep(
    model, noise, rel, mask, cond=None, pinned=None, known=None, *, steps=16, mode="flow"
):
    """K-step sample from t = 1 (noise) to 0 on the uniform grid ``t_k = 1 - k / K``.

    ``mode="flow"``: Euler on the instantaneous velocity, ``z <- z - (t_k - t_{k+1})
    u(z, t_k, t_k)``; ``mode="meanflow"``: MeanFlow jumps ``z <- z - (t_k - t_{k+1})
    u(z, t_{k+1}, t_k)`` (``steps=1`` is :func:`sample_one_step`). Pinned entries are
    reset to ``known`` before every call and in the result; padded tokens come back 0.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    if mode not in ("flow", "meanflow"):
        raise ValueError(f"mode must be 'flow' or 'meanflow', got {mode!r}")
    pinned, known = _check_pins(noise, pinned, known)
    B = noise.shape[0]
    grid = torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64).tolist()
    z = _pin(noise, pinned, known)
    for k in range(steps):
        t_hi, t_lo = grid[k], grid[k + 1]
        t = torch.full((B,), t_hi, dtype=noise.dtype, device=noise.device)
        r = t if mode == "flow" else torch.full_like(t, t_lo)
        u = model(z, r, t, rel, mask, cond=cond, pinned=pinned)
        z = _pin(z - (t_hi - t_lo) * u, pinned, known)
    return _zero_padding(z, mask)
