"""The edge-gated relational DiT and MeanFlow (simsci.models.vectorworld._dit)."""

import math

import pytest
import torch

from simsci.models.vectorworld._dit import (
    EdgeGatedRelationalDiT,
    RelationalDiTConfig,
    meanflow_loss,
    sample_multistep,
    sample_one_step,
    sample_times,
)
from simsci.train import load_model, save_model

R = 3


def _model(dtype=torch.float32, device="cpu", **kw):
    """A tiny model with every parameter randomised (adaLN-Zero would make it output 0)."""
    args = dict(token_dim=3, cond_dim=2, width=16, depth=2, heads=2, num_relations=R)
    args.update(kw)
    model = EdgeGatedRelationalDiT(**args, freq_dim=8, time_scale=10.0, mlp_ratio=2.0)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return model.to(device=device, dtype=dtype)


def _batch(B=2, N=5, D=3, dtype=torch.float32, device="cpu", seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, D, generator=g, dtype=dtype).to(device)
    rel = torch.randint(0, R, (B, N, N), generator=g).to(device)
    mask = torch.ones(B, N, dtype=torch.bool, device=device)
    mask[1, N - 2 :] = False  # the second scene has two padding tokens
    cond = torch.randn(B, 2, generator=g, dtype=dtype).to(device)
    return x, rel, mask, cond


def test_shapes_zero_init_and_conditions(device):
    x, rel, mask, cond = _batch(device=device)
    fresh = EdgeGatedRelationalDiT(3, cond_dim=2, width=16, depth=2, heads=2, num_relations=R)
    u = fresh.to(device)(x, 0.2, 0.7, rel, mask, cond)
    assert u.shape == x.shape and u.device.type == device.type
    assert torch.all(u == 0)  # adaLN-Zero: a fresh network is the zero velocity
    model = _model(device=device)
    u = model(x, torch.tensor([0.1, 0.3]), torch.tensor([0.5, 0.3]), rel, mask, cond)
    assert u.shape == x.shape and u.dtype == x.dtype
    assert torch.all(u[1, -2:] == 0) and u[0].abs().sum() > 0  # padded tokens output 0
    per_token = torch.randn(2, 5, 2, device=device)
    assert model(x, 0.0, 1.0, rel, mask, per_token).shape == x.shape
    gates = model.gates(x, 0.0, 1.0, rel, mask, cond)
    assert len(gates) == 2 and gates[0].shape == (2, 2, 5, 5)


def test_padding_never_reaches_real_tokens():
    model = _model()
    x, rel, mask, _ = _batch()
    cond = torch.randn(2, 5, 2)  # per token: padded tokens' condition must not leak either
    u = model(x, 0.3, 0.8, rel, mask, cond)
    x2, rel2, cond2 = x.clone(), rel.clone(), cond.clone()
    x2[1, -2:] = torch.tensor([float("nan"), 1e6, -3.0])
    rel2[1, -2:, :] = 0
    rel2[1, :, -2:] = 2
    cond2[1, -2:] = 50.0
    pinned = torch.zeros_like(x, dtype=torch.bool)
    pinned2 = pinned.clone()
    pinned2[1, -2:] = True
    u2 = model(x2, 0.3, 0.8, rel2, mask, cond2, pinned=pinned2)
    assert torch.equal(u, model(x, 0.3, 0.8, rel, mask, cond, pinned=pinned))
    assert torch.equal(u[mask], u2[mask])
    assert torch.all(u2[~mask] == 0)


def test_permutation_equivariance():
    model = _model()
    x, rel, mask, _ = _batch(N=6)  # scene 1 has padding, which moves with the permutation
    cond = torch.randn(2, 6, 2)
    perm = torch.randperm(6)
    u = model(x, 0.2, 0.9, rel, mask, cond)
    up = model(x[:, perm], 0.2, 0.9, rel[:, perm][:, :, perm], mask[:, perm], cond[:, perm])
    torch.testing.assert_close(up, u[:, perm], rtol=1e-5, atol=1e-6)


def test_relation_types_matter_and_gates_lie_in_the_unit_interval():
    model = _model()
    x, rel, mask, cond = _batch()
    u = model(x, 0.2, 0.6, rel, mask, cond)
    rel2 = rel.clone()
    rel2[0, 0, 1] = (rel[0, 0, 1] + 1) % R  # one edge of scene 0 changes type
    u2 = model(x, 0.2, 0.6, rel2, mask, cond)
    assert (u2[0, 0] - u[0, 0]).abs().max() > 1e-4
    assert torch.equal(u[1], u2[1])  # the other scene is untouched
    for g in model.gates(x, 0.2, 0.6, rel, mask, cond):
        assert torch.all((g > 0) & (g < 1))
        assert g.std() > 1e-3  # content- and relation-dependent, not a constant


@pytest.mark.parametrize("relations", [1, 5])
def test_edge_gate_logits_are_the_same_with_and_without_gradients(relations):
    """Sampling's batched gate logits (no gradients) equal training's per-type loop bit
    for bit, so a generated tile does not depend on whether autograd is on."""
    from simsci.models.vectorworld._dit import EdgeGatedAttention

    torch.manual_seed(0)
    att = EdgeGatedAttention(32, 4, relations)
    with torch.no_grad():
        for p in (att.gate_weight, att.gate_bias, att.rel_bias):
            p.normal_()
    h = torch.randn(3, 17, 32)
    rel = torch.randint(0, relations, (3, 17, 17))
    mask = torch.rand(3, 17) > 0.2
    trained = att(h, rel, mask)
    assert trained[0].requires_grad
    with torch.no_grad():
        sampled = att(h, rel, mask)
    for a, b in zip(trained, sampled):
        assert torch.equal(a.detach(), b)


def test_jvp_through_the_network_matches_central_differences():
    model = _model(dtype=torch.float64)
    x, rel, mask, cond = _batch(dtype=torch.float64)
    r = torch.tensor([0.1, 0.25], dtype=torch.float64)
    t = torch.tensor([0.6, 0.5], dtype=torch.float64)
    v = torch.randn_like(x)

    def f(z, r_, t_):
        return model(z, r_, t_, rel, mask, cond)

    _, dudt = torch.func.jvp(f, (x, r, t), (v, torch.zeros_like(r), torch.ones_like(t)))
    h = 1e-6
    fd = (f(x + h * v, r, t + h) - f(x - h * v, r, t - h)) / (2 * h)
    torch.testing.assert_close(dudt, fd, rtol=1e-6, atol=1e-8)
    assert dudt[mask].abs().max() > 1e-3


class _PointOracle:
    """The exact average velocity when the data is one point x0: u(z, r, t) = (z - x0)/t.

    (z_t - x0 = t (eps - x0) and the flow is z_s - x0 = (s / t)(z_t - x0).)
    """

    def __init__(self, x0, scale=1.0):
        self.x0, self.scale = x0, scale

    def __call__(self, z, r, t, rel, mask, cond=None, pinned=None):
        return self.scale * (z - self.x0) / t[:, None, None]


def test_meanflow_identity_gives_zero_loss_for_the_exact_average_velocity():
    B, N, D = 64, 3, 2
    x0 = torch.tensor([[0.7, -1.2], [0.1, 0.4], [-2.0, 0.5]], dtype=torch.float64)
    x = x0.expand(B, N, D).clone()
    rel = torch.zeros(B, N, N, dtype=torch.long)
    mask = torch.ones(B, N, dtype=torch.bool)
    g = torch.Generator().manual_seed(0)
    loss, stats = meanflow_loss(_PointOracle(x0), x, rel, mask, generator=g)
    assert float(stats["mse"]) < 1e-20 and float(loss) < 1e-15
    assert {"mse_flow", "mse_interval", "mse_jump"} <= set(stats)
    # pinned entries keep the data value in z_t and have tangent 0: still exact
    pinned = torch.rand(B, N, D, generator=g) < 0.4
    _, stats = meanflow_loss(_PointOracle(x0), x, rel, mask, generator=g, pinned=pinned)
    assert float(stats["mse"]) < 1e-20
    # a wrong field is not a fixed point of the target
    _, stats = meanflow_loss(_PointOracle(x0, 1.1), x, rel, mask, generator=g)
    assert float(stats["mse"]) > 1e-3


def test_loss_pins_entries_in_z_and_leaves_them_out():
    x, rel, mask, cond = _batch()
    pinned = torch.zeros_like(x, dtype=torch.bool)
    pinned[:, 0] = True
    pinned[0, 1, 2] = True
    seen = {}

    def spy(z, r, t, rel_, mask_, cond=None, pinned=None):
        if pinned is not None:
            seen["pinned_kept"] = bool((z[pinned] == x[pinned]).all())
        return torch.where(pin, 1e3, 0.0 * z)  # a huge error only on the pinned entries

    pin = pinned

    loss, stats = meanflow_loss(spy, x, rel, mask, cond, pinned=pinned)
    assert seen["pinned_kept"]
    full = meanflow_loss(spy, x, rel, mask, cond)[1]["mse"]
    assert float(stats["mse"]) < 50 < float(full)
    all_pinned = torch.ones_like(pinned)
    model = _model()
    loss, stats = meanflow_loss(model, x, rel, mask, cond, pinned=all_pinned)
    assert float(loss.detach()) == 0 and "mse" not in stats
    loss.backward()  # still a graph


def test_gradient_reaches_every_parameter():
    model = _model()
    x, rel, mask, cond = _batch(B=8)
    mask[:] = True
    loss, _ = meanflow_loss(model, x, rel, mask, cond, generator=torch.Generator().manual_seed(0))
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().max() > 0, f"no gradient reaches {name}"


def test_sample_times_shares_and_order():
    r, t, kind = sample_times(200, flow_ratio=0.5, jump_ratio=0.1, generator=torch.Generator())
    assert int((kind == 0).sum()) == 100 and int((kind == 2).sum()) == 20
    assert torch.equal(r[kind == 0], t[kind == 0])
    assert torch.all(r[kind == 1] < t[kind == 1])
    assert torch.all((r[kind == 2] == 0) & (t[kind == 2] == 1))
    assert torch.all((0 <= r) & (r <= t) & (t <= 1))
    assert int((sample_times(3, jump_ratio=0.01)[2] == 2).sum()) == 1  # always one jump
    with pytest.raises(ValueError, match="flow_ratio \\+ jump_ratio must be <= 1"):
        sample_times(4, flow_ratio=0.8, jump_ratio=0.5)


def _mixture(n, N, g):
    centres = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    return centres[torch.randint(0, 4, (n, N), generator=g)] + 0.15 * torch.randn(
        n, N, 2, generator=g
    )


def _mmd(a, b, s=0.5):
    """Squared MMD with a Gaussian kernel of width s between two point clouds."""
    a, b = a.reshape(-1, 2), b.reshape(-1, 2)

    def k(p, q):
        return torch.exp(-(torch.cdist(p, q) ** 2) / (2 * s * s)).mean()

    return float(k(a, a) + k(b, b) - 2 * k(a, b))


def test_a_tiny_model_learns_a_gaussian_mixture_in_one_step():
    """150 Adam steps of MeanFlow on 4 Gaussians (std 0.15 at (+-1, +-1)): the one-step
    sample's MMD^2 to held-out data drops below 0.4x the untrained model's (noise) and is
    no worse than the 16-step flow sampler's + 0.03 (seen: 0.145 -> ~0.03, multi ~0.03)."""
    N, B, steps = 1, 256, 150
    g = torch.Generator().manual_seed(1)
    model = EdgeGatedRelationalDiT(
        2, width=32, depth=1, heads=2, num_relations=1, mlp_ratio=2.0, freq_dim=16
    )
    rel = torch.zeros(B, N, N, dtype=torch.long)
    mask = torch.ones(B, N, dtype=torch.bool)
    test = _mixture(600, N, torch.Generator().manual_seed(5))
    M = test.shape[0]
    rel_m, mask_m = torch.zeros(M, N, N, dtype=torch.long), torch.ones(M, N, dtype=torch.bool)
    noise = torch.randn(M, N, 2, generator=torch.Generator().manual_seed(7))
    untrained = _mmd(sample_one_step(model, noise, rel_m, mask_m), test)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: 0.5 * (1 + math.cos(math.pi * i / steps))
    )
    for _ in range(steps):
        loss, _ = meanflow_loss(model, _mixture(B, N, g), rel, mask, generator=g)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    one = _mmd(sample_one_step(model, noise, rel_m, mask_m), test)
    multi = _mmd(sample_multistep(model, noise, rel_m, mask_m, steps=16), test)
    assert one < 0.4 * untrained, (one, untrained)
    assert one < multi + 0.03, (one, multi)


def test_samplers_keep_pinned_entries_exactly(device):
    model = _model(device=device)
    x, rel, mask, cond = _batch(device=device)
    noise = torch.randn_like(x)
    pinned = torch.zeros_like(x, dtype=torch.bool)
    pinned[:, 0] = True  # a whole context token
    pinned[0, 2, :2] = True  # two features of another (a seam endpoint)
    known = x + 5.0
    one = sample_one_step(model, noise, rel, mask, cond, pinned=pinned, known=known)
    assert torch.equal(one[pinned], known[pinned])
    free = ~pinned & mask[..., None]
    assert torch.all(one[~mask] == 0) and not torch.equal(one[free], noise[free])
    for mode in ("flow", "meanflow"):
        out = sample_multistep(model, noise, rel, mask, cond, pinned, known, steps=3, mode=mode)
        assert torch.equal(out[pinned], known[pinned])
    # one MeanFlow jump is the one-step sampler; known values steer the free entries
    jump = sample_multistep(model, noise, rel, mask, cond, pinned, known, steps=1, mode="meanflow")
    torch.testing.assert_close(jump, one)
    other = sample_one_step(model, noise, rel, mask, cond, pinned=pinned, known=known - 9.0)
    assert not torch.allclose(other[mask][:, 1:], one[mask][:, 1:])


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(rel=torch.zeros(2, 5, 4, dtype=torch.long)), "rel must have shape"),
        (dict(rel=torch.full((2, 5, 5), R)), "rel values must lie in \\[0, num_relations\\)"),
        (dict(rel=torch.zeros(2, 5, 5)), "rel must hold integer relation types"),
        (dict(mask=torch.ones(2, 4, dtype=torch.bool)), "mask must be a bool tensor"),
        (dict(mask=torch.ones(2, 5)), "mask must be a bool tensor"),
        (dict(x="nan"), "NaN or inf in a real token"),
        (dict(x=torch.randn(2, 5, 4)), "token_dim=3"),
        (dict(cond=None), "pass cond"),
        (dict(cond=torch.randn(2, 3)), "cond must have shape"),
        (dict(pinned=torch.ones(2, 5, 2, dtype=torch.bool)), "pinned must be a bool tensor"),
        (dict(t=1.5), "0 <= r <= t <= 1"),
        (dict(r=0.9, t=0.5), "0 <= r <= t <= 1"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(change, match):
    model = _model()
    x, rel, mask, cond = _batch()
    args = dict(x=x, r=0.2, t=0.7, rel=rel, mask=mask, cond=cond, pinned=None)
    args.update(change)
    if isinstance(args["x"], str):
        args["x"] = x.clone()
        args["x"][0, 1, 2] = float("nan")
    with pytest.raises(ValueError, match=match):
        model(
            args["x"], args["r"], args["t"], args["rel"], args["mask"], args["cond"],
            pinned=args["pinned"],
        )  # fmt: skip
    if "r" not in change and "t" not in change:  # the loss checks the batch the same way
        with pytest.raises(ValueError, match=match):
            meanflow_loss(
                model, args["x"], args["rel"], args["mask"], args["cond"], pinned=args["pinned"]
            )


def test_other_bad_input():
    model = _model()
    x, rel, mask, cond = _batch()
    with pytest.raises(TypeError, match="model.to\\(torch.float64\\)"):
        model(x.double(), 0.0, 1.0, rel, mask, cond)
    with pytest.raises(ValueError, match="without known"):
        sample_one_step(model, x, rel, mask, cond, pinned=torch.ones_like(x, dtype=torch.bool))
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        sample_multistep(model, x, rel, mask, cond, steps=0)
    with pytest.raises(ValueError, match="width must be a multiple of heads"):
        EdgeGatedRelationalDiT(3, width=10, heads=4)
    with pytest.raises(ValueError, match="unknown RelationalDiTConfig keys \\['depthh'\\]"):
        EdgeGatedRelationalDiT.from_config({"token_dim": 3, "depthh": 2})


def test_config_and_checkpoint_round_trip(tmp_path):
    model = _model()
    cfg = model.to_config()
    assert isinstance(cfg, RelationalDiTConfig) and cfg.token_dim == 3 and cfg.time_scale == 10.0
    assert RelationalDiTConfig(**cfg.to_dict()) == cfg
    rebuilt = EdgeGatedRelationalDiT.from_config(cfg.to_dict())
    assert rebuilt.to_config() == cfg and rebuilt.init_args == model.init_args
    assert sum(p.numel() for p in rebuilt.parameters()) == sum(
        p.numel() for p in model.parameters()
    )
    path = save_model(model, tmp_path / "dit.pt")
    loaded = load_model(path)
    assert isinstance(loaded, EdgeGatedRelationalDiT) and loaded.to_config() == cfg
    x, rel, mask, cond = _batch()
    assert torch.equal(loaded(x, 0.1, 0.9, rel, mask, cond), model(x, 0.1, 0.9, rel, mask, cond))
    assert math.isfinite(float(meanflow_loss(loaded, x, rel, mask, cond)[0].detach()))
