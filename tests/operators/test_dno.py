"""∂-NO features and wrapper: exact fractional derivatives on Fourier modes, the masked
mean and Nyquist modes, gradients in beta, the even extension, the range of beta, a toy
recovery of a known order, and the wrapper's channel bookkeeping."""

import json
import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call

from simsci.errors import UnknownNameError
from simsci.operators._dno import DerivativeAugmented, DerivativeFeatures

TWO_PI = 2 * math.pi


class PointwiseMLP(nn.Module):
    """Stand-in simsci backbone (the backbone contract): a pointwise 1x1-conv MLP."""

    def __init__(self, in_channels: int, out_channels: int, dim: int = 1, width: int = 8):
        super().__init__()
        self.in_channels, self.out_channels, self.dim = in_channels, out_channels, dim
        self.init_args = {
            "in_channels": in_channels,
            "out_channels": out_channels,
            "dim": dim,
            "width": width,
        }
        conv = nn.Conv1d if dim == 1 else nn.Conv2d
        self.net = nn.Sequential(
            conv(in_channels, width, 1), nn.GELU(), conv(width, out_channels, 1)
        )

    def forward(self, x):
        if x.shape[1] != self.in_channels:
            raise ValueError(f"expects {self.in_channels} input channels, got {x.shape[1]}")
        return self.net(x)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def feats(device, dtype=torch.float64, **kwargs) -> DerivativeFeatures:
    """Built under ``dtype`` as the default dtype, so theta holds beta_init to that precision."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        return DerivativeFeatures(**kwargs).to(device)
    finally:
        torch.set_default_dtype(old)


def grid1d(n, length=1.0, device="cpu"):
    return torch.arange(n, dtype=torch.float64, device=device) * (length / n)


def beta_of(f: DerivativeFeatures, name: str) -> float:
    return float(f.betas()[name])


# ------------------------------------------------------------------ exact derivatives


@pytest.mark.parametrize("length", [1.0, 2.5])
@pytest.mark.parametrize("beta", [0.3, 1.0, 1.7])
def test_fractional_derivatives_of_fourier_modes_are_exact(device, length, beta):
    """With x in [0, L), u = 0.7 + sin(2 pi 3 x/L) + 0.5 cos(2 pi 5 x/L):
    riesz = 3^b sin(.) + 0.5 * 5^b cos(.)  (|k|^b / (2 pi/L)^b, mean removed),
    directional = 3^b sin(. + pi b/2) + 0.5 * 5^b cos(. + pi b/2)."""
    n = 48
    x = grid1d(n, length, device)
    a3, a5 = TWO_PI * 3 * x / length, TWO_PI * 5 * x / length
    u = 0.7 + torch.sin(a3) + 0.5 * torch.cos(a5)
    f = feats(device, in_channels=1, dim=1, beta_init=beta, domain=length)
    out = f(u[None, None])[0]
    b = beta_of(f, "riesz_c0_o0")
    riesz = 3**b * torch.sin(a3) + 0.5 * 5**b * torch.cos(a5)
    shift = math.pi * b / 2
    direc = 3**b * torch.sin(a3 + shift) + 0.5 * 5**b * torch.cos(a5 + shift)
    torch.testing.assert_close(out[0], riesz, atol=1e-11, rtol=0)
    torch.testing.assert_close(out[1], direc, atol=1e-11, rtol=0)


def test_integer_orders_are_the_classical_derivatives(device):
    """Random band-limited u (modes 1..N/2-1, no Nyquist, mean 1.3): directional order 1
    is u'/(2 pi), order 2 is u''/(2 pi)^2, order ~0 is u - mean(u); Riesz order 2 is
    -u''/(2 pi)^2."""
    n = 32
    g = torch.Generator().manual_seed(1)
    amp = torch.randn(2, n // 2 - 1, generator=g, dtype=torch.float64).to(device)
    x = grid1d(n, device=device)
    k = torch.arange(1, n // 2, dtype=torch.float64, device=device)
    ph = TWO_PI * k[:, None] * x[None]  # (modes, N)
    u = 1.3 + (amp[0, :, None] * torch.cos(ph) + amp[1, :, None] * torch.sin(ph)).sum(0)
    du = (
        TWO_PI * k[:, None] * (-amp[0, :, None] * torch.sin(ph) + amp[1, :, None] * torch.cos(ph))
    ).sum(0)
    d2u = -(
        (TWO_PI * k[:, None]) ** 2
        * (amp[0, :, None] * torch.cos(ph) + amp[1, :, None] * torch.sin(ph))
    ).sum(0)

    one = feats(device, in_channels=1, dim=1, kinds="directional", beta_init=1.0)
    assert beta_of(one, "directional_x0_c0_o0") == 1.0  # theta = 0 at the range's midpoint
    torch.testing.assert_close(one(u[None, None])[0, 0], du / TWO_PI, atol=1e-11, rtol=0)

    two = feats(device, in_channels=1, dim=1, beta_init=2.0, beta_range=(0.0, 4.0))
    out = two(u[None, None])[0]
    torch.testing.assert_close(out[0], -d2u / TWO_PI**2, atol=1e-10, rtol=0)
    torch.testing.assert_close(out[1], d2u / TWO_PI**2, atol=1e-10, rtol=0)

    zero = feats(device, in_channels=1, dim=1, beta_init=1e-12)
    out = zero(u[None, None])[0]
    torch.testing.assert_close(out[0], u - u.mean(), atol=1e-9, rtol=0)
    torch.testing.assert_close(out[1], u - u.mean(), atol=1e-9, rtol=0)


@pytest.mark.parametrize("kind", ["riesz", "directional"])
def test_semigroup_property(device, kind):
    """D^a (D^b u) = D^(a+b) u for white noise (mean and Nyquist included), a + b <= 2."""
    a, b = 0.4, 0.9
    u = torch.randn(3, 1, 32, dtype=torch.float64, device=device)

    fa = feats(device, in_channels=1, dim=1, kinds=kind, beta_init=a)
    fb = feats(device, in_channels=1, dim=1, kinds=kind, beta_init=b)
    fab = feats(device, in_channels=1, dim=1, kinds=kind, beta_init=a + b)
    assert abs(float(fa.beta.detach() + fb.beta.detach() - fab.beta.detach())) < 1e-14
    torch.testing.assert_close(fa(fb(u)), fab(u), atol=1e-11, rtol=0)
    assert fab(u).abs().max() > 0.5  # not a trivial identity


def test_two_dimensional_directional_per_axis_and_riesz(device):
    """On [0, 1) x [0, 2) (axis 0 = H, axis 1 = W, W odd), u = sin(2 pi 2 x) cos(2 pi 3 y/2):
    directional x0 = 2^b sin(. + pi b/2) cos(.), directional x1 = sin(.) 3^b cos(. + pi b/2);
    Riesz normalised by 2 pi / max L = pi: |nu| = |(2 * 2, 3)| = 5, so riesz = 5^b u."""
    h, w = 16, 15
    xs = grid1d(h, 1.0, device)[:, None]
    ys = grid1d(w, 2.0, device)[None, :]
    ax, ay = TWO_PI * 2 * xs, TWO_PI * 3 * ys / 2
    u = torch.sin(ax) * torch.cos(ay)
    f = feats(device, in_channels=1, dim=2, beta_init=0.6, domain=(1.0, 2.0))
    assert f.names == ["riesz_c0_o0", "directional_x0_c0_o0", "directional_x1_c0_o0"]
    out = f(u[None, None])[0]
    b = beta_of(f, "riesz_c0_o0")
    s = math.pi * b / 2
    torch.testing.assert_close(out[0], 5**b * u, atol=1e-11, rtol=0)
    torch.testing.assert_close(out[1], 2**b * torch.sin(ax + s) * torch.cos(ay), atol=1e-11, rtol=0)
    torch.testing.assert_close(out[2], 3**b * torch.sin(ax) * torch.cos(ay + s), atol=1e-11, rtol=0)


def test_features_are_resolution_agnostic(device):
    """A band-limited field gives the same features at N and 2N (no grid-size factor)."""
    g = torch.Generator().manual_seed(2)
    coef = torch.randn(2, 7, 2, generator=g, dtype=torch.float64).to(device)

    def field(n):
        x = grid1d(n, device=device)[:, None]
        y = grid1d(n, device=device)[None, :]
        out = torch.zeros(n, n, dtype=torch.float64, device=device)
        for k in range(1, 8):
            out = out + coef[0, k - 1, 0] * torch.cos(TWO_PI * (k * x + (k % 3) * y))
            out = out + coef[1, k - 1, 1] * torch.sin(TWO_PI * ((k % 4) * x - k * y))
        return out[None, None]

    f = feats(device, in_channels=1, dim=2, n_orders=2, beta_init=[0.4, 1.3])
    coarse, fine = f(field(20)), f(field(40))
    torch.testing.assert_close(fine[..., ::2, ::2], coarse, atol=1e-10, rtol=0)


# ------------------------------------------------------------------ masked modes, gradients


def test_nyquist_mode_gives_zero_directional_features(device):
    """u_j = (-1)^j (the Nyquist mode of an even grid): directional features vanish for
    every order, Riesz keeps it: (N/2)^b u."""
    n = 16
    u = (-1.0) ** torch.arange(n, dtype=torch.float64, device=device)
    f = feats(device, in_channels=1, dim=1, n_orders=3, beta_init=[0.5, 1.0, 1.5])
    out = f(u[None, None])[0]
    for o, b in enumerate(f.beta[:3].tolist()):
        torch.testing.assert_close(out[o], (n / 2) ** b * u, atol=1e-11, rtol=0)
    assert out[3:].abs().max() < 1e-12
    # 2-D: Nyquist along axis 0 only -> directional x0 vanishes, x1 does not
    y = grid1d(12, device=device)
    u2 = u[:, None] * torch.cos(TWO_PI * y)[None, :]
    f2 = feats(device, in_channels=1, dim=2, kinds="directional", beta_init=0.7)
    out2 = f2(u2[None, None])[0]
    assert out2[0].abs().max() < 1e-12
    b = float(f2.beta[1].detach())
    expected = u[:, None] * torch.cos(TWO_PI * y + math.pi * b / 2)[None, :]
    torch.testing.assert_close(out2[1], expected, atol=1e-11, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_beta_gradient_is_finite_with_a_mean_and_near_the_range_ends(device, dtype):
    u = 2.0 + torch.randn(4, 2, 24, 20, dtype=dtype, device=device)  # non-zero mean mode
    f = feats(device, dtype, in_channels=2, dim=2, n_orders=2, beta_init=[1e-4, 2 - 1e-4])
    (f(u) ** 2).mean().backward()
    assert torch.isfinite(f.theta.grad).all()
    assert torch.isfinite(f.scale.grad).all()
    assert f.theta.grad.abs().sum() > 0
    # what the safe base avoids: exp(beta log|k|) (the form (ik)^beta takes) at k = 0
    beta = torch.tensor(0.5, dtype=dtype, device=device, requires_grad=True)
    k = torch.fft.rfftfreq(8, d=1 / 8, dtype=dtype, device=device)
    torch.exp(beta * torch.log(k)).sum().backward()
    assert torch.isnan(beta.grad)


@pytest.mark.parametrize(
    ("dim", "grid", "periodic", "extension"),
    [
        (1, (8,), True, "even"),
        (2, (6, 5), True, "even"),
        (1, (7,), False, "even"),
        (2, (4, 5), False, "even-half"),
    ],
)
def test_gradcheck_in_input_beta_and_scale(device, dim, grid, periodic, extension):
    f = feats(
        device,
        in_channels=2,
        dim=dim,
        n_orders=2,
        beta_init=[0.3, 1.6],
        periodic=periodic,
        extension=extension,
    )
    x = (1.0 + torch.randn(2, 2, *grid, dtype=torch.float64, device=device)).requires_grad_()
    theta = f.theta.detach().clone().requires_grad_()
    scale = (1 + 0.1 * torch.randn_like(f.scale)).requires_grad_()

    def fn(x, theta, scale):
        return functional_call(f, {"theta": theta, "scale": scale}, (x,))

    assert torch.autograd.gradcheck(fn, (x, theta, scale))


def test_beta_stays_in_range_under_an_optimiser_that_pushes_it_out(device):
    f = feats(device, torch.float32, in_channels=1, dim=1, n_orders=2, beta_init=[0.5, 1.5])
    lo, hi = f.beta_range
    opt = torch.optim.SGD([f.theta], lr=50.0)
    for _ in range(200):
        opt.zero_grad()
        (-f.beta[0] + f.beta[1] - f.beta[2] + f.beta[3]).backward()  # o0 up, o1 down
        opt.step()
    beta = f.beta.detach()
    assert torch.isfinite(beta).all()
    assert (beta >= lo).all() and (beta <= hi).all()
    assert beta[0] > hi - 1e-2 and beta[1] < lo + 1e-2  # it went to the limits...
    assert (beta[0] - 0.5) * (beta[1] - 1.5) < 0  # ...in opposite directions


def test_learned_beta_recovers_a_known_riesz_order(device):
    """Target: the exact Riesz derivative of order 0.7 (unnormalised, so the scale must
    learn (2 pi)^0.7 too) of random 8-mode fields; beta starts at 1.5."""
    n, order = 64, 0.7
    g = torch.Generator().manual_seed(3)
    amp = torch.randn(16, 8, generator=g, dtype=torch.float64) / torch.arange(1, 9) ** 0.5
    phase = TWO_PI * torch.rand(16, 8, generator=g, dtype=torch.float64)
    k = torch.arange(1, 9, dtype=torch.float64)
    arg = TWO_PI * k[None, :, None] * grid1d(n)[None, None, :] + phase[..., None]
    u = (amp[..., None] * torch.sin(arg)).sum(1)[:, None]
    target = (amp[..., None] * (TWO_PI * k[None, :, None]) ** order * torch.sin(arg)).sum(1)
    u, target = u.float().to(device), target[:, None].float().to(device)
    f = feats(device, torch.float32, in_channels=1, dim=1, kinds="riesz", beta_init=1.5)
    opt = torch.optim.Adam(f.parameters(), lr=0.05)
    for _ in range(300):
        opt.zero_grad()
        loss = ((f(u) - target) ** 2).mean() / (target**2).mean()
        loss.backward()
        opt.step()
    assert abs(float(f.beta.detach()) - order) < 0.01
    assert abs(float(f.scale.detach()) / TWO_PI**order - 1) < 0.02
    assert float(loss.detach()) < 1e-3


# ------------------------------------------------------------------ non-periodic


@pytest.mark.parametrize("extension", ["even", "even-half"])
def test_even_extension_is_exact_for_neumann_modes(device, extension):
    """cos(pi x) on [0, 1] is even about both ends: its mirrored extension has period 2,
    so d/dx = -pi sin(pi x) (feature / (2 pi)) is exact on both grid conventions."""
    n = 33
    j = torch.arange(n, dtype=torch.float64, device=device)
    x = j / (n - 1) if extension == "even" else (j + 0.5) / n
    u = torch.cos(math.pi * x)
    f = feats(device, in_channels=1, dim=1, beta_init=1.0, periodic=False, extension=extension)
    out = f(u[None, None])[0]
    # riesz: |k| = pi, normalised by 2 pi -> (1/2)^1 cos(pi x)
    torch.testing.assert_close(out[0], 0.5 * u, atol=1e-12, rtol=0)
    torch.testing.assert_close(
        out[1], -math.pi * torch.sin(math.pi * x) / TWO_PI, atol=1e-12, rtol=0
    )


@pytest.mark.parametrize(("extension", "order"), [("even", 1.0), ("even-half", 2.0)])
@torch.no_grad()
def test_even_extension_converges_away_from_the_boundary(device, extension, order):
    """u = exp(x) (non-zero slope at both ends: the mirror has a kink). The first
    derivative on [0.25, 0.75] converges with a fitted order ~1 on the vertex grid
    ("even") and ~2 on the cell-centred one ("even-half"); the periodic wrap (a jump in u)
    does not converge at all."""
    errs, errs_periodic, ns = [], [], [33, 65, 129, 257]
    for n in ns:
        j = torch.arange(n, dtype=torch.float64, device=device)
        x = j / (n - 1) if extension == "even" else (j + 0.5) / n
        u = torch.exp(x)[None, None]
        inner = (x > 0.25) & (x < 0.75)
        kw = dict(in_channels=1, dim=1, kinds="directional", beta_init=1.0)
        mirrored = feats(device, periodic=False, extension=extension, **kw)(u)[0, 0] * TWO_PI
        wrapped = feats(device, **kw)(u)[0, 0] * TWO_PI
        errs.append(float((mirrored - u[0, 0])[inner].abs().max()))
        errs_periodic.append(float((wrapped - u[0, 0])[inner].abs().max()))
    slope = np.polyfit(np.log(ns), np.log(errs), 1)[0]
    assert -order - 0.2 < slope < -order + 0.2
    assert errs[-1] < 0.03
    assert min(errs_periodic) > 1.0


# ------------------------------------------------------------------ feature module API


def test_names_orders_and_beta_init_layout(device):
    f = feats(device, in_channels=2, dim=2, n_orders=2, beta_init=[0.5, 1.5])
    assert f.out_channels == 2 * 2 * (1 + 2) == len(f.names)
    betas = f.beta_summary()
    assert set(betas) == set(f.names)
    for name, value in betas.items():
        assert value == pytest.approx(0.5 if name.endswith("_o0") else 1.5, abs=1e-12)
    assert f.names[4] == "directional_x0_c0_o0" and f.names[-1] == "directional_x1_c1_o1"
    assert all(t.ndim == 0 and not t.requires_grad for t in f.betas().values())
    per_feature = list(np.linspace(0.1, 1.9, f.out_channels))
    g = feats(device, in_channels=2, dim=2, n_orders=2, beta_init=per_feature)
    np.testing.assert_allclose(list(g.beta_summary().values()), per_feature, atol=1e-12)
    json.dumps(g.init_args)
    assert DerivativeFeatures(**g.init_args).beta_summary() == pytest.approx(g.beta_summary())


def test_frozen_orders_and_scales_are_buffers(device):
    f = feats(device, in_channels=1, dim=1, learn_beta=False, learn_scale=False)
    assert list(f.parameters()) == []
    spectrum = {"spectrum_power", "spectrum_riesz_log", "spectrum_dir_log", "spectrum_dir_mask"}
    assert set(f.state_dict()) == {"theta", "scale", "running_rms", *spectrum}


def test_output_follows_device_and_dtype(device):
    f = DerivativeFeatures(1, 1).to(device)
    out = f(torch.randn(2, 1, 16, device=device))
    assert out.dtype == torch.float32 and out.device.type == device.type
    with pytest.raises(TypeError, match="float32 weights but the input is torch.float64"):
        f(torch.randn(2, 1, 16, dtype=torch.float64, device=device))


def test_bad_inputs_and_arguments_are_rejected(device):
    f = feats(device, in_channels=2, dim=1)
    x = torch.randn(4, 2, 16, dtype=torch.float64, device=device)
    x[2, 1, 3] = float("nan")
    with pytest.raises(ValueError, match="sample 2 holds NaN/inf"):
        f(x)
    with pytest.raises(ValueError, match="expects 2 input channels, got 3"):
        f(torch.randn(1, 3, 16, dtype=torch.float64, device=device))
    with pytest.raises(ValueError, match="channels-first"):
        f(torch.randn(1, 2, 4, 4, dtype=torch.float64, device=device))
    with pytest.raises(ValueError, match=">= 2 points"):
        f(torch.randn(1, 2, 1, dtype=torch.float64, device=device))
    with pytest.raises(ValueError, match="strictly inside beta_range"):
        DerivativeFeatures(1, 1, beta_init=2.0)
    with pytest.raises(ValueError, match="0 <= lo < hi"):
        DerivativeFeatures(1, 1, beta_range=(1.0, 0.5))
    with pytest.raises(UnknownNameError, match="did you mean 'riesz'"):
        DerivativeFeatures(1, 1, kinds=("reisz",))
    with pytest.raises(ValueError, match="dim must be 1 or 2"):
        DerivativeFeatures(1, 3)
    with pytest.raises(ValueError, match="domain lengths"):
        DerivativeFeatures(1, 2, domain=(1.0, -1.0))
    with pytest.raises(ValueError, match="n_orders=2 or out_channels=4"):
        DerivativeFeatures(1, 1, n_orders=2, beta_init=[0.5, 0.6, 0.7])


# ------------------------------------------------------------------ the wrapper


@pytest.mark.parametrize("dim", [1, 2])
def test_wrapping_a_simsci_backbone_rebuilds_it_for_c_plus_f_channels(device, dim):
    backbone = PointwiseMLP(2, 1, dim=dim)
    model = DerivativeAugmented(backbone).to(device)
    n_feat = 2 * (1 + dim)  # C * n_orders * (riesz + dim directional)
    assert model.features.out_channels == n_feat
    assert model.backbone is not backbone
    assert model.backbone.in_channels == 2 + n_feat
    assert model.in_channels == 2 and model.out_channels == 1 and model.dim == dim
    x = torch.randn(3, 2, *(12,) * dim, device=device)
    y = model(x)
    assert y.shape == (3, 1, *(12,) * dim)
    # forward is backbone(cat([x, features(x)]))
    torch.testing.assert_close(y, model.backbone(torch.cat([x, model.features(x)], 1)))
    assert model.num_parameters() == model.backbone.num_parameters() + 2 * n_feat
    # init_args: JSON-able, and rebuild the same architecture (weights via state_dict)
    args = json.loads(json.dumps(model.init_args))
    assert args["backbone"]["init_args"]["in_channels"] == 2
    assert args["backbone"]["import_path"].endswith(":PointwiseMLP")
    clone = DerivativeAugmented(**args).to(device)
    clone.load_state_dict(model.state_dict())
    torch.testing.assert_close(clone(x), y)


def test_simsci_backbone_built_for_the_augmented_input_is_kept(device):
    n_feat = DerivativeFeatures(1, 1, kinds="riesz", n_orders=2).out_channels
    backbone = PointwiseMLP(1 + n_feat, 1)
    model = DerivativeAugmented(
        backbone, in_channels=1, features={"kinds": ["riesz"], "n_orders": 2, "beta_init": [0.5, 1]}
    )
    assert model.backbone is backbone
    assert model.init_args["backbone"]["init_args"]["in_channels"] == 1
    with pytest.raises(ValueError, match="neither the data's C=2"):
        DerivativeAugmented(PointwiseMLP(5, 1), in_channels=2)


def test_wrapper_rejects_contradicting_feature_settings():
    with pytest.raises(ValueError, match="the data have C=2"):
        DerivativeAugmented(PointwiseMLP(2, 1), features=DerivativeFeatures(1, 1))
    with pytest.raises(ValueError, match="contradicts the backbone's dim=1"):
        DerivativeAugmented(PointwiseMLP(2, 1), features={"dim": 2})
    with pytest.raises(UnknownNameError, match="did you mean 'n_orders'"):
        DerivativeAugmented(PointwiseMLP(2, 1), features={"n_order": 2})
    with pytest.raises(ValueError, match="beta_lr_scale"):
        DerivativeAugmented(PointwiseMLP(2, 1), beta_lr_scale=0.0)


def test_parameter_groups_split_orders_from_weights():
    from simsci.train._optim import parameter_groups

    model = DerivativeAugmented(PointwiseMLP(1, 1), beta_lr_scale=7.0)
    groups = model.parameter_groups()
    assert [g["name"] for g in groups] == ["weights", "beta"]
    assert [g["lr_scale"] for g in groups] == [1.0, 7.0]
    assert len(groups[1]["params"]) == 1 and groups[1]["params"][0] is model.features.theta
    assert any(p is model.features.scale for p in groups[0]["params"])
    ids = [id(p) for g in groups for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())  # each exactly once
    assert [g["name"] for g in parameter_groups(model)] == [
        "weights",
        "beta",
    ]  # the trainer's check
    frozen = DerivativeAugmented(PointwiseMLP(1, 1), features={"learn_beta": False})
    assert frozen.parameter_groups()[1]["params"] == []


def test_wrapping_an_external_module(device):
    c = 1
    n_feat = DerivativeFeatures(c, 1).out_channels  # riesz + directional = 2
    conv = nn.Conv1d(c + n_feat, 4, 3, padding=1)
    model = DerivativeAugmented(conv, in_channels=c, features={"dim": 1}).to(device)
    assert model.backbone is conv
    assert model(torch.randn(2, c, 16, device=device)).shape == (2, 4, 16)
    args = json.loads(json.dumps(model.init_args))
    assert args["backbone"] == {"import_path": "torch.nn.modules.conv:Conv1d", "init_args": None}
    with pytest.raises(ValueError, match="cannot be rebuilt from init_args"):
        DerivativeAugmented(**args)
    with pytest.raises(ValueError, match="pass in_channels=C"):
        DerivativeAugmented(conv, features={"dim": 1})
    with pytest.raises(ValueError, match='pass features=\\{"dim"'):
        DerivativeAugmented(nn.Sequential(conv), in_channels=c)


def test_external_module_with_the_wrong_channel_count_is_a_clear_error(device):
    # declares in_channels itself: rejected at construction
    with pytest.raises(ValueError, match="expects 5 input channels.*C \\+ F = 1 \\+ 2 = 3"):
        DerivativeAugmented(nn.Conv1d(5, 4, 1), in_channels=1, features={"dim": 1})
    # only its first layer knows: rejected at the first forward, the RuntimeError chained
    seq = nn.Sequential(nn.Conv2d(2, 4, 1), nn.GELU(), nn.Conv2d(4, 1, 1))
    model = DerivativeAugmented(seq, in_channels=1, features={"dim": 2}).to(device)
    with pytest.raises(ValueError, match="expects 2 input channels.*C \\+ F = 1 \\+ 3 = 4") as info:
        model(torch.randn(2, 1, 8, 8, device=device))
    assert isinstance(info.value.__cause__, RuntimeError)


def test_wrapper_names_the_nan_sample(device):
    model = DerivativeAugmented(PointwiseMLP(1, 1)).to(device)
    x = torch.randn(5, 1, 16, device=device)
    x[3, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="sample 3 holds NaN/inf"):
        model(x)


def test_betas_of_the_wrapper():
    model = DerivativeAugmented(PointwiseMLP(1, 1), features={"beta_init": 0.8})
    assert model.beta_summary() == pytest.approx(
        {"riesz_c0_o0": 0.8, "directional_x0_c0_o0": 0.8}, abs=1e-6
    )
    assert set(model.betas()) == {"riesz_c0_o0", "directional_x0_c0_o0"}


def test_wrapping_the_real_fno(device):
    from simsci.operators._fno import FNO

    fno = FNO(2, 1, dim=2, width=8, modes=3, layers=1, projection_width=8)
    model = DerivativeAugmented(fno, features={"n_orders": 2, "beta_init": [0.5, 1.5]}).to(device)
    assert model.backbone.in_channels == 2 + 2 * 2 * 3
    x = torch.randn(2, 2, 8, 10, device=device)
    y = model(x)
    assert y.shape == (2, 1, 8, 10)
    clone = DerivativeAugmented(**json.loads(json.dumps(model.init_args))).to(device)
    clone.load_state_dict(model.state_dict())
    torch.testing.assert_close(clone(x), y)
    y.pow(2).mean().backward()
    assert torch.isfinite(model.features.theta.grad).all()


def test_rms_standardisation_train_and_eval():
    torch.manual_seed(0)
    feats = DerivativeFeatures(1, 1, beta_init=1.8, normalize="rms", momentum=1.0)
    x = torch.randn(4, 1, 64)
    out = feats(x)  # training mode: unit RMS per feature over batch and grid
    rms = out.pow(2).mean(dim=(0, 2)).sqrt()
    torch.testing.assert_close(rms, torch.ones_like(rms))
    feats.eval()  # momentum 1: the running estimate is this batch's RMS
    torch.testing.assert_close(feats(x), out.detach())
    out.sum().backward()
    assert torch.isfinite(feats.theta.grad).all()
    with pytest.raises(ValueError, match="normalize"):
        DerivativeFeatures(1, 1, normalize="batch")


def test_spectrum_standardisation_is_unit_rms_on_the_training_data_and_batch_free():
    """normalize="spectrum": each feature divided by its RMS expected under the training
    inputs' spectrum, a function of beta only: unit RMS on the calibration data for any
    beta, the same output for a sample in any batch and in train or eval mode."""
    torch.manual_seed(0)
    x = torch.randn(64, 2, 64, dtype=torch.float64).cumsum(-1)  # rough, red spectrum
    x = x - x.mean(-1, keepdim=True)
    with torch.device("cpu"):
        torch.set_default_dtype(torch.float64)
        try:
            f = DerivativeFeatures(
                2,
                1,
                n_orders=2,
                beta_init=[0.4, 1.7],
                beta_range=(0, 3),
                normalize="spectrum",
                max_modes=16,
            )
        finally:
            torch.set_default_dtype(torch.float32)
    assert not f.calibrated
    f.calibrate(x)
    assert f.calibrated and f.spectrum_power.shape == (2, 16)
    for beta in (0.1, 1.0, 2.5):
        with torch.no_grad():
            f.theta.fill_(math.log(beta / (3 - beta)))
        rms = f(x).pow(2).mean(dim=(0, 2)).sqrt()
        torch.testing.assert_close(rms, torch.ones_like(rms))
    out = f(x)
    torch.testing.assert_close(f(x[3:5]), out[3:5])  # no batch statistics
    f.eval()
    torch.testing.assert_close(f(x), out)
    f.train()
    f(x).pow(2).mean().backward()  # exactly 1 for any beta: the orders get no gradient
    assert torch.isfinite(f.theta.grad).all() and f.theta.grad.abs().max() < 1e-10
    (f(x) * x.repeat(1, 4, 1)).mean().backward()
    assert f.theta.grad.abs().max() > 1e-6


def test_spectrum_calibration_survives_the_state_dict_and_calibrates_on_first_use():
    torch.manual_seed(0)
    x = torch.randn(8, 1, 32, 32).cumsum(-1).cumsum(-2)
    f = DerivativeFeatures(1, 2, beta_init=1.2, normalize="spectrum", periodic=False)
    y = f(x)  # uncalibrated: the first input sets the spectrum
    assert f.calibrated
    g = DerivativeFeatures(**f.init_args)
    g.load_state_dict(f.state_dict())  # a spectrum of another length than the empty one
    torch.testing.assert_close(g(x), y)
    old = {k: v for k, v in f.state_dict().items() if not k.startswith("spectrum")}
    h = DerivativeFeatures(1, 2, beta_init=1.2, normalize="rms")
    h.load_state_dict(old)  # checkpoints from before the spectrum buffers still load
    assert not h.calibrated


def test_zero_initial_scale_starts_as_the_backbone_and_can_grow():
    """scale_init=0 (OperatorModel's ∂-NO default, issue 25): the features start switched
    off, so the wrapper computes exactly its backbone on zero feature channels (with the
    scales at 1 the ∂-NO FNO did not fit 2-D Navier-Stokes; zeroed features fitted), and
    the scales get a gradient, so the features can grow where they help."""
    from simsci.operators._fno import FNO

    torch.manual_seed(0)
    x = torch.randn(3, 1, 16, 16)
    f = DerivativeFeatures(1, 2, n_orders=2, beta_init=[1.0, 1.5], scale_init=0.0, max_modes=4)
    assert f.init_args["scale_init"] == 0.0
    assert torch.equal(DerivativeFeatures(**f.init_args).scale, torch.zeros(6))
    assert torch.equal(f(x), torch.zeros(3, 6, 16, 16))
    net = DerivativeAugmented(FNO(1, 1, dim=2, width=8, modes=4, layers=2), features=f)
    y = net(x)
    torch.testing.assert_close(y, net.backbone(torch.cat([x, torch.zeros(3, 6, 16, 16)], 1)))
    y.pow(2).mean().backward()
    assert (f.scale.grad.abs() > 0).all()
    with pytest.raises(ValueError, match="scale_init"):
        DerivativeFeatures(1, 1, scale_init=float("nan"))
