"""The DynaDiff prompter: feature shapes, episode averaging, rates read off the data,
environments told apart, a prompter that learns, and bad contexts rejected."""

import math

import pytest
import torch

import simsci
from simsci.models.dynadiff._prompter import (
    MIN_CONTEXT_STEPS,
    Prompter,
    context_features,
    feature_dim,
    feature_names,
)


def _oscillator(omega, n_episodes, K, dt, *, dtype=torch.float64, generator=None):
    """Harmonic oscillator contexts ``(B, M, K, 2)``: x = A cos(ωt + φ), v = -Aω sin(ωt + φ)."""
    B = omega.shape[0]
    amp = 0.5 + torch.rand(B, n_episodes, 1, generator=generator, dtype=dtype)
    phase = 2 * math.pi * torch.rand(B, n_episodes, 1, generator=generator, dtype=dtype)
    t = torch.arange(K, dtype=dtype) * dt
    w = omega.to(dtype)[:, None, None]
    arg = w * t + phase
    return torch.stack([amp * torch.cos(arg), -amp * w * torch.sin(arg)], dim=-1)


def _heat(kappa, n=16, K=10, dt=0.01, dtype=torch.float64):
    """An exact solution ``(K, n, n, 1)`` of the grid heat equation du/dt = κ Δ_h u / dx²
    (Δ_h the periodic 5-point Laplacian, dx = 1/n): two Fourier modes, each decaying at
    its discrete eigenvalue 4 sin²(πm/n) / dx². Two modes, so u and Δ_h u are not collinear.
    """
    g = torch.arange(n, dtype=dtype) / n
    t = torch.arange(K, dtype=dtype)[:, None, None] * dt
    rate = [kappa * 4 * math.sin(math.pi * m / n) ** 2 * n**2 for m in (1, 2)]
    u = torch.sin(2 * math.pi * g)[:, None] * torch.exp(-rate[0] * t)
    u = u + 0.5 * torch.cos(4 * math.pi * g)[None, :] * torch.exp(-rate[1] * t)
    return u[..., None]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_state_feature_shapes_and_dtype(dtype):
    ctx = torch.randn(2, 3, 12, 3, dtype=dtype)
    f = context_features(ctx, 0.1, (3,))
    F = feature_dim((3,))
    assert f.shape == (2, F) and f.dtype == dtype and torch.isfinite(f).all()
    assert len(feature_names((3,))) == F == 4 * 3 + 2 * 3 + 10 * 3 + 2 + 3 * 8
    assert context_features(ctx[:, 0], 0.1, (3,)).shape == (2, F)  # (B, K, D): M = 1
    assert context_features(ctx, 0.1, (3,), n_freq=4).shape == (2, feature_dim((3,), n_freq=4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_field_feature_shapes_and_dtype(dtype):
    S = (8, 8, 2)
    ctx = torch.randn(2, 2, 7, *S, dtype=dtype)
    f = context_features(ctx, 0.5, S)
    # stats 4C, derivatives 2C, rates C * (1 + C + C(C+1)/2 + 1), energy 2, spectra 3 C n_freq
    assert f.shape == (2, feature_dim(S)) and feature_dim(S) == 8 + 4 + 2 * 7 + 2 + 48
    assert f.dtype == dtype and torch.isfinite(f).all()
    assert feature_names(S)[8 + 4 + 6] == "rate[du0/dt : lap(u0)]"


def test_float32_matches_float64():
    ctx = _oscillator(torch.tensor([1.0, 2.5]), 2, 30, 0.1)
    f64 = context_features(ctx, 0.1, (2,))
    f32 = context_features(ctx.float(), 0.1, (2,))
    assert torch.allclose(f32.double(), f64, rtol=1e-3, atol=1e-4)


def _rate_columns(names):
    col = {name: i for i, name in enumerate(names)}
    # dx/dt = α x - β x y,  dy/dt = δ x y - γ y: (column, sign) of α, β, γ, δ
    return [
        (col["rate[dx0/dt : x0]"], 1.0),
        (col["rate[dx0/dt : x0*x1]"], -1.0),
        (col["rate[dx1/dt : x1]"], -1.0),
        (col["rate[dx1/dt : x0*x1]"], 1.0),
    ]


def _lv_rates(f):
    return torch.stack([sign * f[:, c] for c, sign in _rate_columns(feature_names((2,)))], -1)


def _lotka_volterra(p, x0, K, dt):
    """Clean Lotka-Volterra episodes ``(E, K, 2)``, one per row of ``p`` and ``x0``."""
    system = simsci.systems.get("lotka_volterra")
    t = torch.arange(K, dtype=torch.float64) * dt
    return system.simulate(x0, t, p, rtol=1e-10, atol=1e-10)


def test_m_copies_of_one_episode_give_that_episode():
    ep = torch.randn(2, 1, 15, 2, dtype=torch.float64)
    one = context_features(ep[:, 0], 0.1, (2,))
    copies = context_features(ep.expand(2, 3, 15, 2), 0.1, (2,))
    torch.testing.assert_close(copies, one, rtol=1e-10, atol=1e-10)
    field = torch.rand(1, 1, 8, 6, 6, 2, dtype=torch.float64)
    S = (6, 6, 2)
    torch.testing.assert_close(
        context_features(field.expand(1, 2, 8, *S), 0.5, S), context_features(field[:, 0], 0.5, S)
    )


def test_non_rate_features_are_episode_averages():
    two = torch.randn(2, 2, 15, 2, dtype=torch.float64)
    each = [context_features(two[:, m], 0.1, (2,)) for m in range(2)]
    joint = context_features(two, 0.1, (2,))
    other = torch.tensor(["rate[" not in name for name in feature_names((2,))])
    torch.testing.assert_close(joint[:, other], ((each[0] + each[1]) / 2)[:, other])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_lotka_volterra_rates_recovered_jointly(dtype):
    # two environments, three short episodes each (3.8 time units, 20 frames): one arc
    # alone does not pin a 6-term quadratic library, three arcs do
    p = torch.tensor([[1.3, 0.9, 1.8, 0.8], [0.5, 0.7, 0.5, 0.8]], dtype=torch.float64)
    x0 = torch.tensor([[1.0, 2.0], [3.0, 1.0], [2.0, 2.5]], dtype=torch.float64)
    dt, K = 0.2, 20
    ctx = torch.stack([_lotka_volterra(row.expand(3, 4), x0, K, dt) for row in p])
    f = context_features(ctx.to(dtype), dt, (2,))
    rates = _lv_rates(f).double()
    tol = 2e-3 if dtype == torch.float64 else 2e-2
    assert (rates / p - 1).abs().max() < tol
    col = {name: i for i, name in enumerate(feature_names((2,)))}
    others = [col[f"rate[dx0/dt : {t}]"] for t in ("1", "x1", "x0*x0", "x1*x1")]
    assert f[:, others].abs().max() < tol


def test_lotka_volterra_rates_at_the_protocol_time_step():
    # the protocol's grid (dt = 0.5, 10 frames) is coarse: prey falls by up to 6x a
    # frame. Four episodes jointly still give every rate to 2%.
    p = torch.tensor([[0.5, 0.8, 0.5, 0.6]], dtype=torch.float64).expand(4, 4)
    x0 = torch.tensor([[1.0, 2.0], [3.0, 1.0], [2.0, 2.5], [0.8, 0.6]], dtype=torch.float64)
    ctx = _lotka_volterra(p, x0, 10, 0.5)[None]
    rates = _lv_rates(context_features(ctx, 0.5, (2,)))
    assert (rates / p[:1] - 1).abs().max() < 0.02


def test_joint_fit_beats_single_episodes_on_noisy_data():
    gen = torch.Generator().manual_seed(0)
    M = 4
    p = torch.tensor([[0.5, 0.8, 0.5, 0.6]], dtype=torch.float64).expand(M, 4)
    x0 = 0.5 + 3.0 * torch.rand(M, 2, generator=gen, dtype=torch.float64)
    clean = _lotka_volterra(p, x0, 20, 0.25)
    errors_joint, errors_single = [], []
    for _ in range(5):
        noisy = clean * (1 + 0.01 * torch.randn(clean.shape, generator=gen, dtype=torch.float64))
        joint = _lv_rates(context_features(noisy[None], 0.25, (2,)))
        single = _lv_rates(context_features(noisy, 0.25, (2,)))  # M environments of 1
        errors_joint.append((joint / p[:1] - 1).abs().max())
        errors_single.append((single / p - 1).abs().amax(-1).median())
    # measured: joint 5-20% on the worst rate, single episodes 700-1500%
    assert max(errors_joint) <= min(errors_single)
    assert torch.stack(errors_joint).median() < 0.1


def test_heat_fields_give_their_laplacian_coefficient():
    kappas = (0.01, 0.03)
    ctx = torch.stack([_heat(k) for k in kappas])  # (2, K, 16, 16, 1)
    S = (16, 16, 1)
    f = context_features(ctx, 0.01, S)
    lap = f[:, feature_names(S).index("rate[du0/dt : lap(u0)]")]
    target = torch.tensor([k * 16**2 for k in kappas], dtype=torch.float64)  # κ / dx²
    assert ((lap / target - 1).abs() < 0.05).all()
    assert lap[1] > 2 * lap[0]


def test_prompter_learns_to_regress_a_parameter():
    gen = torch.Generator().manual_seed(1)
    omega = 1.0 + 2.0 * torch.rand(64, generator=gen, dtype=torch.float64)
    ctx = _oscillator(omega, 2, 20, 0.1, generator=gen).float()
    target = (omega.float() - 2.0)[:, None]
    prompter = Prompter(state_shape=(2,), dt=0.1, out_dim=8, hidden=32)
    prompter.fit_normalization(prompter.raw_features(ctx))
    head = torch.nn.Linear(8, 1)
    opt = torch.optim.Adam([*prompter.parameters(), *head.parameters()], lr=1e-2)
    losses = []
    for _ in range(120):
        loss = (head(prompter(ctx)) - target).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.05 * losses[0] and losses[-1] < 0.02
    # and it generalises to new environments (target variance ~ 1/3)
    omega_new = 1.0 + 2.0 * torch.rand(64, generator=gen, dtype=torch.float64)
    ctx_new = _oscillator(omega_new, 2, 20, 0.1, generator=gen).float()
    with torch.no_grad():
        held_out = (head(prompter(ctx_new)) - (omega_new.float() - 2.0)[:, None]).pow(2).mean()
    assert held_out < 0.15


def test_gradient_reaches_the_mlp_and_normalisation():
    ctx = _oscillator(torch.tensor([1.0, 2.0, 3.0]), 1, 12, 0.1).float()
    prompter = Prompter(state_shape=(2,), dt=0.1, out_dim=4, hidden=16)
    raw = prompter.raw_features(ctx)
    prompter.fit_normalization(raw)
    feats = prompter.features(ctx)
    assert feats.shape == (3, feature_dim((2,))) and feats.abs().max() <= 10
    torch.testing.assert_close(prompter.feature_mean, raw.mean(0))
    std = raw.std(0, correction=0)
    varying = std > 1e-3 * raw.mean(0).abs() + 1e-6  # not floored
    torch.testing.assert_close(prompter.feature_std[varying], std[varying])
    expected = (raw - prompter.feature_mean) / prompter.feature_std
    torch.testing.assert_close(feats, expected)
    out = prompter(ctx)
    assert out.shape == (3, 4) and out.dtype == torch.float32
    out.square().sum().backward()
    for name, param in prompter.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
    assert prompter.net[0].weight.grad.abs().sum() > 0
    assert {"feature_mean", "feature_std"} <= set(prompter.state_dict())


def test_prompter_rebuilds_from_init_args_and_runs_in_float64():
    ctx = torch.randn(2, 9, 4, 4, 1, dtype=torch.float64)
    prompter = Prompter(state_shape=(4, 4, 1), dt=0.2, out_dim=5, hidden=8, n_freq=3)
    prompter.fit_normalization(prompter.raw_features(torch.randn(6, 9, 4, 4, 1)))
    copy = Prompter(**prompter.init_args)
    copy.load_state_dict(prompter.state_dict())
    torch.testing.assert_close(copy(ctx), prompter(ctx))
    assert prompter.double()(ctx).dtype == torch.float64
    assert prompter(ctx, dt=0.2).shape == (2, 5)


def test_too_short_context_rejected():
    K = MIN_CONTEXT_STEPS - 1
    with pytest.raises(
        ValueError,
        match=f"context trajectory too short for the prompter: it needs at least "
        f"{MIN_CONTEXT_STEPS} time points per episode, got {K}; pass a longer context",
    ):
        context_features(torch.randn(2, K, 2), 0.1, (2,))


def test_non_finite_context_rejected():
    ctx = torch.randn(2, 3, 10, 2)
    ctx[0, 1, 4, 0] = float("nan")
    ctx[1, 2, 0, 1] = float("inf")
    with pytest.raises(ValueError, match="context has 2 non-finite values"):
        Prompter(state_shape=(2,), dt=0.1)(ctx)


def test_wrong_state_shape_and_dt_rejected():
    prompter = Prompter(state_shape=(2,), dt=0.1)
    with pytest.raises(ValueError, match=r"shape \(B, M, K, 2\) or \(B, K, 2\) for state shape"):
        prompter(torch.randn(2, 10, 3))
    with pytest.raises(ValueError, match=r"for state shape \(8, 8, 1\); got \(2, 10, 2\)"):
        context_features(torch.randn(2, 10, 2), 0.1, (8, 8, 1))
    with pytest.raises(ValueError, match=r"state_shape must be \(D,\) .* got \(2, 2\)"):
        Prompter(state_shape=(2, 2), dt=0.1)
    with pytest.raises(ValueError, match="differs from the prompter's dt=0.1"):
        prompter(torch.randn(2, 10, 2), dt=0.05)
    with pytest.raises(ValueError, match=r"raw features of shape \(N >= 1, 42\)"):
        prompter.fit_normalization(torch.randn(5, 7))


def test_on_device(device):
    ctx = torch.randn(2, 2, 8, 8, 8, 2, device=device)
    prompter = Prompter(state_shape=(8, 8, 2), dt=0.1, out_dim=4, hidden=8).to(device)
    prompter.fit_normalization(prompter.raw_features(ctx))
    out = prompter(ctx)
    assert out.device.type == device.type and torch.isfinite(out).all()
