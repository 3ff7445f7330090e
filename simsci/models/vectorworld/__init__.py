"""VectorWorld: a streaming vector-graph world model for closed-loop driving rollouts.

Being built (issue 11) on the driving world of :mod:`simsci.systems.driving`. Here so
far: the generative core, :mod:`._dit` -- an edge-gated relational DiT over sets of
tokens with typed relations, trained with interval-conditioned MeanFlow (the JVP target
``u = v - (t - r) du/dt``, large-step supervision), one-step and multi-step samplers and
masked completion with pinned entries (outpainting); and the tile tokenisation,
:mod:`._tokens` -- driving tiles as lane and agent tokens with typed relations (pred,
succ, left, right, agent on lane, near, context, seam) and outpainting pairs (a tile and
its grid neighbour, the context and the seam endpoints pinned; ``TilePairs`` /
``collate_pairs``). Still to come: the motion-aware gated VAE, the ΔSim NPC policy,
streaming rollouts and ``simsci/VectorWorld-v0``.

>>> from simsci.models import vectorworld as vw
>>> net = vw.EdgeGatedRelationalDiT(token_dim=2, width=32, depth=1, num_relations=2)
>>> # loss, stats = vw.meanflow_loss(net, x, rel, mask)
>>> # x = vw.sample_one_step(net, noise, rel, mask)
"""

from simsci.models.vectorworld._dit import (
    EdgeGatedAttention,
    EdgeGatedRelationalDiT,
    RelationalDiTConfig,
    meanflow_loss,
    sample_multistep,
    sample_one_step,
    sample_times,
)
from simsci.models.vectorworld._tokens import (
    RELATIONS,
    TOKEN_DIM,
    TilePairs,
    TokenLayout,
    collate_pairs,
    outpaint_pair,
    tile_tokens,
    tokens_to_tile,
)

__all__ = [
    "EdgeGatedRelationalDiT",
    "EdgeGatedAttention",
    "RelationalDiTConfig",
    "meanflow_loss",
    "sample_one_step",
    "sample_multistep",
    "sample_times",
    "RELATIONS",
    "TOKEN_DIM",
    "TokenLayout",
    "TilePairs",
    "collate_pairs",
    "outpaint_pair",
    "tile_tokens",
    "tokens_to_tile",
]
