"""GFG: the Neural Tangent Projection Layer (exact linear algebra, JVPs against autograd,
rank deficiency), finite differences (order 2), the model's harness (learning, rollouts,
bad input)."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from simsci.models import MODELS
from simsci.models.gfg import (
    GFG,
    TangentProjection,
    auroc,
    corrupt,
    decoder_jacobian,
    finite_difference_velocity,
    mlp_jvp,
    motif_scores,
    project,
    projection_residual,
    projector,
    tangent_velocity,
)


def _decoder(d=2, D=6, dtype=torch.float64):
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(d, 16), nn.SiLU(), nn.Linear(16, D)).to(dtype)


def test_tangent_velocity_and_jacobian_match_autograd():
    dec = _decoder()
    z, w = torch.randn(5, 2, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64)
    J = torch.stack([torch.autograd.functional.jacobian(dec, z[b]) for b in range(5)])
    assert torch.allclose(decoder_jacobian(dec, z), J, atol=1e-12)
    assert torch.allclose(tangent_velocity(dec, z, w), (J @ w[..., None])[..., 0], atol=1e-12)


def test_hand_written_jvp_matches_functorch_in_value_gradient_and_second_order():
    # the SiLU MLP path of mlp_jvp is hand-written: it must equal torch.func.jvp, be
    # differentiable (training) and differentiable again in forward mode (motif read-out)
    dec = nn.Sequential(
        nn.Linear(2, 16), nn.SiLU(), nn.Linear(16, 16), nn.SiLU(), nn.Linear(16, 6)
    ).to(torch.float64)
    z = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 2, dtype=torch.float64)
    out, tangent = mlp_jvp(dec, z, w)
    ref_out, ref_tangent = torch.func.jvp(dec, (z,), (w,))
    assert torch.allclose(out, ref_out, atol=1e-13)
    assert torch.allclose(tangent, ref_tangent, atol=1e-13)
    g = torch.autograd.grad(tangent.square().sum(), z)[0]
    g_ref = torch.autograd.grad(ref_tangent.square().sum(), z)[0]
    assert torch.allclose(g, g_ref, atol=1e-12)
    dz = torch.randn_like(z)
    second = torch.func.jvp(lambda zz: mlp_jvp(dec, zz, w)[1], (z.detach(),), (dz,))[1]
    second_ref = torch.func.jvp(
        lambda zz: torch.func.jvp(dec, (zz,), (w,))[1], (z.detach(),), (dz,)
    )[1]
    assert torch.allclose(second, second_ref, atol=1e-12)
    # any other decoder goes through torch.func.jvp and gives the same contract
    tanh = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 6)).to(torch.float64)
    assert torch.allclose(mlp_jvp(tanh, z, w)[1], torch.func.jvp(tanh, (z,), (w,))[1], atol=1e-13)


def test_projector_is_the_orthogonal_projector_onto_the_columns():
    J = torch.randn(4, 7, 3, dtype=torch.float64)
    P = projector(J)
    assert torch.allclose(P @ P, P, atol=1e-9)
    assert torch.allclose(P, P.transpose(1, 2), atol=1e-12)
    assert torch.allclose(P @ J, J, atol=1e-9)
    v = torch.randn(4, 7, dtype=torch.float64)
    exact = (J @ torch.linalg.lstsq(J, v[..., None]).solution)[..., 0]
    assert torch.allclose(project(J, v), exact, atol=1e-9)
    # tangent vectors have residual 0, normal vectors residual 1, v = 0 gives 0
    tangent = (J @ torch.randn(4, 3, 1, dtype=torch.float64))[..., 0]
    normal = v - project(J, v)
    assert projection_residual(J, tangent).max() < 1e-8
    assert torch.allclose(projection_residual(J, normal), torch.ones(4, dtype=J.dtype))
    assert projection_residual(J, torch.zeros_like(v)).abs().max() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rank_deficient_jacobian_stays_finite_with_finite_gradients(dtype):
    a = torch.randn(3, 6, 1, dtype=dtype)
    J = torch.cat([a, 2 * a], -1).requires_grad_(True)  # rank 1 of 2
    v = torch.randn(3, 6, dtype=dtype)
    pv = project(J, v)
    P = projector(J)
    r = projection_residual(J, v)
    for out in (pv, P, r):
        assert torch.isfinite(out).all()
    # it is (to the shift) the projector onto the one direction J still spans
    unit = a[..., 0] / a[..., 0].norm(dim=-1, keepdim=True)
    expect = (unit * v).sum(-1, keepdim=True) * unit
    assert torch.allclose(pv, expect, atol=1e-3 if dtype == torch.float32 else 1e-8)
    r.sum().backward()
    assert torch.isfinite(J.grad).all()
    zero = torch.zeros(2, 6, 2, dtype=dtype)  # a collapsed decoder: P = 0, no NaN
    assert projection_residual(zero, v[:2]).allclose(torch.ones(2, dtype=dtype))
    assert torch.isfinite(projector(zero)).all() and projector(zero).abs().max() == 0


def test_layer_rejects_bad_dimensions_and_shapes():
    with pytest.raises(ValueError, match="smaller than the ambient"):
        TangentProjection(_decoder(3, 3), 3, 3)
    layer = TangentProjection(_decoder(), 2, 6)
    with pytest.raises(ValueError, match=r"\(B, 2\)"):
        layer(torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="must be \\(B, D\\)"):
        project(torch.randn(4, 6, 2), torch.randn(4, 5))
    with pytest.raises(ValueError, match="latent dimension must be at least 1 and smaller"):
        GFG(4, latent_dim=4)


def test_finite_difference_velocity_is_second_order_on_irregular_grids():
    errors, hs = [], []
    gen = torch.Generator().manual_seed(0)
    for n in (20, 40, 80, 160):
        t = torch.sort(torch.rand(n, generator=gen, dtype=torch.float64)).values * 2.0
        t = torch.linspace(0, 2, n, dtype=torch.float64) + 0.3 * (t - t.mean()) / n  # jittered
        x = torch.stack([torch.sin(3 * t), torch.exp(-t)], -1)
        v = torch.stack([3 * torch.cos(3 * t), -torch.exp(-t)], -1)
        errors.append(float((finite_difference_velocity(t, x) - v).abs().max()))
        hs.append(2.0 / n)
    slope = math.log(errors[0] / errors[-1]) / math.log(hs[0] / hs[-1])
    assert 1.8 < slope < 2.3, slope
    with pytest.raises(ValueError, match="at least 2 steps"):
        finite_difference_velocity(torch.zeros(1), torch.zeros(1, 2))


def _circle_items(D=6, n=4, L=30, seed=0):
    gen = torch.Generator().manual_seed(seed)
    A = torch.linalg.qr(torch.randn(D, 2, generator=gen, dtype=torch.float64))[0]
    B = 0.3 * torch.randn(D, 2, generator=gen, dtype=torch.float64)
    t = torch.linspace(0, 2 * math.pi, L, dtype=torch.float64)
    items = []
    for k in range(n):
        th = t + 2 * math.pi * k / n
        u = torch.stack([th.cos(), th.sin()], -1)
        x = u @ A.T + torch.tanh(2 * u) @ B.T  # a curved closed curve in R^D
        items.append({"t": t, "x": x.float(), "episode": k})
    return items


@pytest.mark.parametrize("variant", ["tangent", "latent", "ambient"])
def test_small_model_learns_the_velocities_and_rolls_out(variant, device):
    items = _circle_items()
    x = torch.cat([i["x"] for i in items])
    mean = x.mean(0)
    scale = float(((x - mean) ** 2).sum(-1).mean().sqrt())
    model = GFG(
        6,
        latent_dim=2,
        hidden_dim=32,
        variant=variant,
        x_mean=mean.tolist(),
        x_scale=scale,
        time_scale=1.0,
    ).to(device)
    batch = {k: v.to(device) for k, v in model.collate(items).items()}
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = float(model.validation_step(batch)["vel_rel"])
    for _ in range(150):
        opt.zero_grad()
        model.training_step(batch)["loss"].backward()
        opt.step()
    last = float(model.validation_step(batch)["vel_rel"])
    assert last < 0.1 * first, (first, last)
    x0 = items[0]["x"][:2].to(device)
    path = model.rollout(x0, items[0]["t"][:10].to(device))
    assert path.shape == (2, 10, 6) and path.device.type == device.type
    assert torch.isfinite(path).all()
    if variant == "tangent":  # velocities lie in the decoder's tangent space exactly
        xs = x[:8].to(device)
        J = model.tangent_jacobian(xs)
        vn = model.velocity(xs) * model._vel_factor()
        assert projection_residual(J.double(), vn.double()).max() < 1e-4
        # re-projected every step, the rollout's states lie on the decoder's image: a fine
        # grid of chart points decodes to within the grid's resolution of each of them
        with torch.no_grad():
            z = model.encode(model.normalise(path.reshape(-1, 6)))
            lo, hi = z.min(0).values - 0.1, z.max(0).values + 0.1
            g = [torch.linspace(float(lo[i]), float(hi[i]), 300, device=device) for i in (0, 1)]
            grid = torch.stack(torch.meshgrid(*g, indexing="ij"), -1).reshape(-1, 2)
            image = model.denormalise(model.decode(grid))
            gap = torch.cdist(path[:, 1:].reshape(-1, 6), image).min(1).values.max()
            step = float(torch.cdist(image[:1], image[1:2]))  # one grid cell's image
        assert gap < 2 * step + 1e-6 * scale, (gap, step)


def test_chart_warmup_ramps_the_velocity_terms_and_resumes():
    torch.manual_seed(0)
    model = GFG(6, latent_dim=2, hidden_dim=8, chart_warmup=4)
    batch = {"x": torch.randn(16, 6), "v": torch.randn(16, 6)}
    first = model.training_step(batch)
    assert torch.equal(first["loss"], first["recon"])  # step 0: reconstruction alone
    for _ in range(3):
        model.training_step(batch)
    assert int(model.train_steps) == 4 and model._ramp(train=True) == 1.0
    # the count is a buffer: a checkpoint carries it, and one from before it loads at 0
    state = model.state_dict()
    again = GFG(**model.init_args)
    again.load_state_dict(state)
    assert int(again.train_steps) == 4
    del state["train_steps"]
    again.load_state_dict(state)
    assert int(again.train_steps) == 0
    with pytest.raises(ValueError, match="chart_warmup"):
        GFG(6, chart_warmup=-1)


def test_model_rejects_bad_input():
    model = GFG(6, latent_dim=2, hidden_dim=8)
    t = torch.linspace(0, 1, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="velocities v must have the shape"):
        model.collate([{"t": t, "x": torch.zeros(5, 6), "v": torch.zeros(5, 5)}])
    bad = torch.zeros(5, 6)
    bad[2, 1] = math.nan
    with pytest.raises(ValueError, match="NaN"):
        model.collate([{"t": t, "x": bad}])
    with pytest.raises(ValueError, match="NaN or inf states"):
        model.velocity(bad)
    with pytest.raises(ValueError, match=r"\(B, 6\)"):
        model.rollout(torch.zeros(2, 5), t)
    with pytest.raises(ValueError, match="variant"):
        GFG(6, variant="tangnet")
    with pytest.raises(ValueError, match="known_manifold"):
        GFG(6, variant="known")
    assert MODELS["gfg"] is GFG


def test_graded_corruptions_leave_the_states_by_their_size_and_keep_the_motion():
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 1.0, 11)
    episodes = [
        {"t": t, "x": np.stack([np.cos(t + p), np.sin(t + p), 0 * t], -1) + rng.normal(size=3)}
        for p in range(4)
    ]
    states = np.concatenate([e["x"] for e in episodes])
    spread = np.sqrt(((states - states.mean(0)) ** 2).sum(-1).mean())
    moved = corrupt(episodes, "offset", size=0.1, seed=1)
    for e, m in zip(episodes, moved, strict=True):
        shift = m["x"] - e["x"]
        assert np.allclose(shift, shift[0])  # one constant shift: the velocities are kept
        assert np.isclose(np.linalg.norm(shift[0]), 0.1 * spread)
    noisy = np.concatenate(
        [
            m["x"] - e["x"]
            for e, m in zip(episodes, corrupt(episodes, "noise", size=0.1, seed=1), strict=True)
        ]
    )
    assert 0.07 * spread < np.sqrt((noisy**2).sum(-1).mean()) < 0.13 * spread
    assert np.array_equal(
        corrupt(episodes, "noise", seed=3)[0]["x"], corrupt(episodes, "noise", seed=3)[0]["x"]
    )
    with pytest.raises(ValueError, match="size"):
        corrupt(episodes, "offset", size=-1.0)
    with pytest.raises(ValueError, match="corruption"):
        corrupt(episodes, "ofset")


def test_motif_read_out_of_restarts_is_the_mean_of_normalised_read_outs():
    torch.manual_seed(0)
    models = [GFG(6, latent_dim=3, hidden_dim=8) for _ in range(2)]
    x = torch.randn(20, 6)

    def normalised(m):
        s = motif_scores(m, x)
        return s / s[~torch.eye(3, dtype=torch.bool)].square().mean().sqrt()

    both = motif_scores(models, x)
    assert both.shape == (3, 3)
    assert torch.allclose(both, (normalised(models[0]) + normalised(models[1])) / 2, atol=1e-6)
    # one restart alone: its read-out, scale removed (the ranking a score uses is kept)
    assert torch.allclose(motif_scores(models[:1], x), normalised(models[0]), atol=1e-6)
    with pytest.raises(ValueError, match="empty"):
        motif_scores([], x)


def test_auroc_counts_ties_half():
    assert auroc([2, 3], [1, 0]) == 1.0
    assert auroc([1], [1]) == 0.5
    assert auroc([0, 2], [1]) == 0.5
    assert math.isnan(auroc([], [1]))
