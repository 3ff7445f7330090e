"""The neural-operator backbones: FNO (with its spectral convolution), DeepONet, UNet."""

from __future__ import annotations

import json
import math

import pytest
import torch

from simsci.errors import UnknownNameError
from simsci.operators._backbones import BACKBONES, DeepONet, UNet, get
from simsci.operators._deeponet import resample_linear
from simsci.operators._fno import FNO, SpectralConv

SMALL = {
    "fno": {"width": 8, "modes": 4, "layers": 2, "projection_width": 16},
    "deeponet": {"n_sensors": 8, "width": 16, "depth": 2, "p": 8},
    "unet": {"width": 8, "levels": 2},
}
# simsci's own backbones (real weights, float64); the neuralop.* ones: test_neuralop.py
NATIVE = sorted(n for n in BACKBONES if not n.startswith("neuralop."))


def _small(name, dim=1, in_channels=2, out_channels=3, **kw):
    return get(
        name, in_channels=in_channels, out_channels=out_channels, dim=dim, **SMALL[name], **kw
    )


def _fourier_series(n_samples, channels, grid, kmax, *, dtype, device, seed=0):
    """Random real trigonometric polynomials with wavenumbers |k| <= kmax per axis, sampled
    at ``j/N`` on ``grid`` (1-D or 2-D)."""
    g = torch.Generator().manual_seed(seed)
    ks = torch.arange(-kmax, kmax + 1, dtype=torch.float64)
    coords = [torch.arange(n, dtype=torch.float64) / n for n in grid]
    out = torch.zeros(n_samples, channels, *grid, dtype=torch.float64)
    kgrid = torch.meshgrid(*([ks] * len(grid)), indexing="ij")
    for kvec in zip(*(k.flatten() for k in kgrid)):
        amp = torch.randn(n_samples, channels, 2, generator=g, dtype=torch.float64)
        amp = amp / (1.0 + sum(float(k) ** 2 for k in kvec))
        phase = sum(
            2 * math.pi * float(k) * c.reshape((-1,) + (1,) * (len(grid) - 1 - a))
            for a, (k, c) in enumerate(zip(kvec, coords))
        )
        shape = (n_samples, channels) + (1,) * len(grid)
        out += amp[:, :, 0].reshape(shape) * torch.cos(phase) + amp[:, :, 1].reshape(
            shape
        ) * torch.sin(phase)
    return out.to(dtype=dtype, device=device)


def _rel(pred, target):
    return ((pred - target).flatten(1).norm(dim=1) / target.flatten(1).norm(dim=1)).mean()


# ---------------------------------------------------------------- shapes and contract
@pytest.mark.parametrize("name", NATIVE)
@pytest.mark.parametrize("dim", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shapes_dtype_device(name, dim, dtype, device):
    model = _small(name, dim).to(device=device, dtype=dtype)
    grid = (16,) if dim == 1 else (8, 12)
    x = torch.randn(3, 2, *grid, dtype=dtype, device=device)
    y = model(x)
    assert y.shape == (3, 3, *grid)
    assert y.dtype == dtype and y.device.type == device.type
    assert torch.isfinite(y).all()
    assert (model.in_channels, model.out_channels, model.dim) == (2, 3, dim)


@pytest.mark.parametrize("name", NATIVE)
@pytest.mark.parametrize("dim", [1, 2])
def test_init_args_rebuild_the_same_model(name, dim, device):
    model = _small(name, dim).to(device)
    args = json.loads(json.dumps(model.init_args))  # JSON-able, and survives the round trip
    clone = type(model)(**args).to(device)
    clone.load_state_dict(model.state_dict())
    assert clone.num_parameters() == model.num_parameters()
    x = torch.randn(2, 2, *((16,) if dim == 1 else (8, 8)), device=device)
    torch.testing.assert_close(clone(x), model(x), rtol=0, atol=0)


def test_fno_tuple_modes_survive_json(device):
    model = FNO(1, 1, dim=2, width=4, modes=(3, 2), layers=1, projection_width=4).to(device)
    args = json.loads(json.dumps(model.init_args))
    assert args["modes"] == [3, 2]
    assert FNO(**args).spectral[0].weight.shape == model.spectral[0].weight.shape


@pytest.mark.parametrize("name", NATIVE)
def test_weights_are_real(name):
    model = _small(name, 2)
    for pname, p in model.named_parameters():
        assert p.is_floating_point() and not p.is_complex(), pname
    assert all(not t.is_complex() for t in model.state_dict().values())


def test_parameter_counts_match_a_hand_count():
    # FNO 1-D: lifting (1 field + 1 coordinate) -> 4: 2*4 + 4 = 12; per Fourier layer
    # spectral 4*4*3 modes*2 (re, im) = 96 plus pointwise 4*4 + 4 = 20; projection
    # 4*8 + 8 + 8*1 + 1 = 49.  12 + 2*(96 + 20) + 49 = 293
    fno1 = FNO(1, 1, dim=1, width=4, modes=3, layers=2, projection_width=8)
    assert fno1.num_parameters() == 293
    # FNO 2-D, modes (3, 2): rows k0 = -2..2 (5), columns k1 = 0, 1 (2): 4*4*5*2*2 = 320;
    # lifting (1 + 2 coordinates)*4 + 4 = 16; pointwise 20; projection 49 -> 405
    fno2 = FNO(1, 1, dim=2, width=4, modes=(3, 2), layers=1, projection_width=8)
    assert fno2.num_parameters() == 405
    # DeepONet: branch 5->3->3->2*4: 18 + 12 + 32 = 62; periodic trunk (cos, sin)
    # 2->3->3->8: 9 + 12 + 32 = 53; bias 2 -> 117
    don = DeepONet(1, 2, dim=1, n_sensors=5, width=3, depth=2, p=4)
    assert don.num_parameters() == 117
    # UNet 1-D, width 8, one level: inc block 1->8 (conv 1*8*3+8=32, GN 16, conv
    # 8*8*3+8=200, GN 16, shortcut 1*8+8=16) = 280; down block 8->16 (8*16*3+16=400, 32,
    # 16*16*3+16=784, 32, shortcut 8*16+16=144) = 1392; up convT 16*8*2+8 = 264; decoder
    # block 16->8 (16*8*3+8=392, 16, 200, 16, shortcut 16*8+8=136) = 760; head 8+1 = 9
    unet = UNet(1, 1, dim=1, width=8, levels=1)
    assert unet.num_parameters() == 280 + 1392 + 264 + 760 + 9
    assert fno1.num_parameters() == sum(p.numel() for p in fno1.parameters())


def test_default_fno_parameter_counts():
    # width 32, modes 16, 4 layers, projection 128, one field channel in and out:
    # lifting (1 + dim)*32 + 32; per layer spectral 32*32*modes*2 + pointwise 32*32 + 32;
    # projection 32*128 + 128 + 128 + 1 = 4353. 2-D modes: 31 rows * 16 columns.
    def count(dim, n_modes):
        return (1 + dim) * 32 + 32 + 4 * (32 * 32 * n_modes * 2 + 32 * 32 + 32) + 4353

    assert FNO(1, 1).num_parameters() == count(1, 16) == 139745
    assert FNO(1, 1, dim=2).num_parameters() == count(2, 31 * 16) == 4071937


@pytest.mark.parametrize("name", NATIVE)
@pytest.mark.parametrize("dim", [1, 2])
def test_gradients_reach_every_parameter(name, dim, device):
    model = _small(name, dim).to(device=device, dtype=torch.float64)
    x = torch.randn(2, 2, *((16,) if dim == 1 else (8, 8)), dtype=torch.float64, device=device)
    model(x).square().mean().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname


# ---------------------------------------------------------------- spectral convolution
def _set_mode(layer, index, value):
    with torch.no_grad():
        layer.weight.zero_()
        layer.weight[(0, 0, *index)] = torch.tensor(value, dtype=layer.weight.dtype)


def test_spectral_conv_1d_single_mode_is_exact(device):
    n = 16
    layer = SpectralConv(1, 1, modes=4).to(device=device, dtype=torch.float64)
    x = torch.arange(n, dtype=torch.float64, device=device) / n
    a, b = 0.7, -1.3
    for k in range(4):
        _set_mode(layer, (k,), (a, b))
        theta = 2 * math.pi * k * x
        out = layer(torch.cos(theta)[None, None])[0, 0]
        # Re((a + ib) e^{i theta}) = a cos - b sin; at k = 0 the imaginary part is dropped
        expect = a * torch.cos(theta) - (b * torch.sin(theta) if k else 0.0)
        torch.testing.assert_close(out, expect, rtol=0, atol=1e-12)
    # modes >= 4 are truncated, whatever the weights
    layer.weight.data.normal_()
    for k in (4, 5, 7):
        out = layer(torch.sin(2 * math.pi * k * x)[None, None])
        torch.testing.assert_close(out, torch.zeros_like(out), rtol=0, atol=1e-12)


def test_spectral_conv_2d_single_mode_is_exact(device):
    h, w = 10, 12
    m0, m1 = 3, 3
    layer = SpectralConv(1, 1, modes=(m0, m1)).to(device=device, dtype=torch.float64)
    y0 = (torch.arange(h, dtype=torch.float64, device=device) / h)[:, None]
    y1 = (torch.arange(w, dtype=torch.float64, device=device) / w)[None, :]

    def wave(k0, k1):
        return 2 * math.pi * (k0 * y0 + k1 * y1)

    def row(k0):  # weight rows: k0 = 0..m0-1, then -(m0-1)..-1
        return k0 if k0 >= 0 else 2 * m0 - 1 + k0

    a, b = 0.4, 0.9
    for k0, k1 in [(0, 1), (2, 1), (-2, 2), (-1, 1), (1, 2)]:
        _set_mode(layer, (row(k0), k1), (a, b))
        theta = wave(k0, k1)
        out = layer(torch.cos(theta)[None, None])[0, 0]
        torch.testing.assert_close(
            out, a * torch.cos(theta) - b * torch.sin(theta), atol=1e-12, rtol=0
        )
    # the k1 = 0 column holds both k0 and -k0: output 1/2 Re(w+ e^{i th} + w- e^{-i th})
    (a1, b1), (a2, b2) = (0.4, 0.9), (-0.3, 0.5)
    with torch.no_grad():
        layer.weight.zero_()
        layer.weight[0, 0, row(2), 0] = torch.tensor([a1, b1], dtype=torch.float64)
        layer.weight[0, 0, row(-2), 0] = torch.tensor([a2, b2], dtype=torch.float64)
    theta = wave(2, 0)
    out = layer(torch.cos(theta)[None, None])[0, 0]
    expect = 0.5 * ((a1 + a2) * torch.cos(theta) - (b1 - b2) * torch.sin(theta))
    torch.testing.assert_close(out, expect, atol=1e-12, rtol=0)
    # |k0| >= m0 or k1 >= m1 is truncated
    layer.weight.data.normal_()
    for k0, k1 in [(3, 0), (-3, 1), (0, 3), (4, 5)]:
        out = layer(torch.cos(wave(k0, k1))[None, None])
        torch.testing.assert_close(out, torch.zeros_like(out), atol=1e-12, rtol=0)


@pytest.mark.parametrize("dim", [1, 2])
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-5), (torch.float64, 1e-12)])
def test_spectral_conv_is_resolution_consistent(dim, dtype, atol, device):
    # a band-limited input (|k| <= 5 < N/2) sampled on N and 2N points gives the same
    # output samples: the same weights act on the same function at every resolution
    modes = 4 if dim == 1 else (4, 3)
    layer = SpectralConv(2, 3, modes).to(device=device, dtype=dtype)
    coarse = (12,) if dim == 1 else (12, 14)
    fine = tuple(2 * n for n in coarse)
    kw = {"kmax": 5, "dtype": dtype, "device": device, "seed": 4}
    y_coarse = layer(_fourier_series(2, 2, coarse, **kw))
    y_fine = layer(_fourier_series(2, 2, fine, **kw))
    sub = y_fine[(..., *(slice(None, None, 2) for _ in coarse))]
    torch.testing.assert_close(sub, y_coarse, atol=atol, rtol=0)
    assert y_coarse.abs().max() > 0.1  # not trivially zero


@pytest.mark.parametrize("modes", [2, (2, 3)])
def test_spectral_conv_gradcheck(modes):
    dim = 1 if isinstance(modes, int) else 2
    layer = SpectralConv(2, 2, modes).double()
    grid = (5,) if dim == 1 else (5, 6)  # odd and even sizes
    x = torch.randn(2, 2, *grid, dtype=torch.float64, requires_grad=True)

    def f(inp, weight):
        return torch.func.functional_call(layer, {"weight": weight}, (inp,))

    w = layer.weight.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(f, (x, w))


def test_fno_resolution_consistency(device):
    torch.manual_seed(1)
    kw = {"kmax": 5, "dtype": torch.float64, "device": device, "seed": 2}

    def gap(model, n):
        y = model(_fourier_series(3, 2, (n,), **kw))
        y2 = model(_fourier_series(3, 2, (2 * n,), **kw))[..., ::2]
        return ((y - y2).norm() / y.norm()).item()

    # without coordinates only the aliasing of the activations' harmonics differs
    plain = FNO(2, 1, modes=8, width=16, positional=False).to(device).double()
    assert gap(plain, 64) < 1e-6
    # the coordinate channel is a sawtooth (not band-limited): a small error that shrinks
    # as the grid is refined
    pos = FNO(2, 1, modes=8, width=16).to(device).double()
    e32, e64 = gap(pos, 32), gap(pos, 64)
    assert e64 < 0.05 and e64 < 0.5 * e32


def test_fno_is_shift_equivariant_without_coordinates_or_padding(device):
    model = FNO(1, 1, dim=2, modes=4, width=8, layers=2, positional=False).to(device).double()
    x = torch.randn(2, 1, 12, 10, dtype=torch.float64, device=device)
    shift = (3, -4)
    torch.testing.assert_close(
        model(torch.roll(x, shift, dims=(2, 3))), torch.roll(model(x), shift, dims=(2, 3))
    )
    # padding (non-periodic problems) breaks the periodic symmetry on purpose
    padded = FNO(**{**model.init_args, "padding": 4}).to(device).double()
    padded.load_state_dict(model.state_dict())
    diff = padded(torch.roll(x, shift, dims=(2, 3))) - torch.roll(padded(x), shift, dims=(2, 3))
    assert diff.abs().max() > 1e-3


def test_fno_padding_amounts():
    assert FNO(1, 1, padding=0.25)._pad_amounts((64,)) == (16,)
    assert FNO(1, 1, dim=2, padding=0.1)._pad_amounts((40, 85)) == (4, 8)
    assert FNO(1, 1, dim=2, padding=9)._pad_amounts((40, 85)) == (9, 9)


def test_unet_is_shift_equivariant_on_periodic_grids(device):
    model = UNet(1, 1, dim=1, width=8, levels=2).to(device).double()
    x = torch.randn(2, 1, 32, dtype=torch.float64, device=device)
    # shifts by multiples of 2**levels keep the pooling cells aligned
    torch.testing.assert_close(model(torch.roll(x, 8, -1)), torch.roll(model(x), 8, -1))


# ---------------------------------------------------------------- DeepONet sensors
def test_resample_linear_exact_cases(device):
    dt = torch.float64
    # vertex grid: a linear function is reproduced exactly at any resolution
    n, s = 13, 7
    line = (3 * torch.arange(n, dtype=dt, device=device) / (n - 1) - 1)[None, None]
    expect = (3 * torch.arange(s, dtype=dt, device=device) / (s - 1) - 1)[None, None]
    torch.testing.assert_close(resample_linear(line, (s,), periodic=False), expect)
    # periodic: sensors at i/S read the samples j/N exactly when S divides N ...
    x = torch.randn(2, 3, 12, 8, dtype=dt, device=device)
    torch.testing.assert_close(resample_linear(x, (4, 8), periodic=True), x[:, :, ::3, :])
    # ... and interpolate with wrap-around: sensor 1 of 2 on 3 points sits at index 1.5
    v = torch.tensor([[[0.0, 2.0, 6.0]]], dtype=dt, device=device)
    torch.testing.assert_close(
        resample_linear(v, (2,), periodic=True),
        torch.tensor([[[0.0, 4.0]]], dtype=dt, device=device),
    )
    # upsampling past the last sample wraps to the first: 4 sensors on 2 points
    v = torch.tensor([[[1.0, 3.0]]], dtype=dt, device=device)
    torch.testing.assert_close(
        resample_linear(v, (4,), periodic=True),
        torch.tensor([[[1.0, 2.0, 3.0, 2.0]]], dtype=dt, device=device),
    )


@pytest.mark.parametrize("periodic,coarse", [(True, 16), (False, 17)])
def test_deeponet_reads_the_same_sensors_at_every_resolution(periodic, coarse, device):
    model = (
        DeepONet(
            1, 1, n_sensors=9 if not periodic else 8, width=16, depth=2, p=8, periodic=periodic
        )
        .to(device)
        .double()
    )
    fine = 2 * coarse if periodic else 2 * coarse - 1

    # a function of the physical coordinate, sampled on both grids
    def sample(n):
        xs = torch.arange(n, dtype=torch.float64, device=device) / (n if periodic else n - 1)
        return torch.sin(2 * math.pi * xs)[None, None] + 0.3 * torch.cos(6 * math.pi * xs)

    torch.testing.assert_close(model(sample(fine))[..., ::2], model(sample(coarse)))


# ---------------------------------------------------------------- learning
def _heat_data(n_samples, n=64, kmax=8, nu_t=0.002, *, device, seed):
    """Periodic 1-D heat equation u_t = nu u_xx: u0 -> u(T), exactly in Fourier space."""
    g = torch.Generator().manual_seed(seed)
    k = torch.arange(1, kmax + 1, dtype=torch.float64)
    a = torch.randn(n_samples, kmax, generator=g, dtype=torch.float64) / k
    b = torch.randn(n_samples, kmax, generator=g, dtype=torch.float64) / k
    phase = 2 * math.pi * k[:, None] * (torch.arange(n, dtype=torch.float64) / n)
    decay = torch.exp(-4 * math.pi**2 * k**2 * nu_t)
    u0 = a @ torch.cos(phase) + b @ torch.sin(phase)
    ut = (a * decay) @ torch.cos(phase) + (b * decay) @ torch.sin(phase)
    return u0[:, None].float().to(device), ut[:, None].float().to(device)


def _fit(model, x, y, steps, lr):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        _rel(model(x), y).backward()
        opt.step()
    return model


@pytest.mark.parametrize(
    "name,kwargs,n_train,steps,lr,tol",
    [
        (
            "fno",
            {"width": 16, "modes": 12, "layers": 2, "projection_width": 32},
            64,
            300,
            1e-2,
            0.05,
        ),
        # DeepONet has no translation structure: more samples and steps (all cheap)
        ("deeponet", {"n_sensors": 32, "width": 64, "depth": 2, "p": 32}, 256, 600, 3e-3, 0.1),
        ("unet", {"width": 8, "levels": 2}, 64, 150, 1e-2, 0.1),  # 0.024 at 150 steps
    ],
)
def test_backbone_learns_the_heat_solution_map(name, kwargs, n_train, steps, lr, tol, device):
    x_train, y_train = _heat_data(n_train, device=device, seed=1)
    x_test, y_test = _heat_data(64, device=device, seed=2)
    identity = _rel(x_test, y_test).item()
    assert identity > 0.4  # the map is far from the identity
    model = _fit(
        get(name, in_channels=1, out_channels=1, **kwargs).to(device),
        x_train,
        y_train,
        steps=steps,
        lr=lr,
    )
    with torch.no_grad():
        err = _rel(model(x_test), y_test).item()
    assert err < tol and err < 0.2 * identity, (name, err, identity)
    if name == "fno":  # zero-shot on a 2x finer grid: the same weights, the same error
        x_fine, y_fine = _heat_data(64, n=128, device=device, seed=2)
        with torch.no_grad():
            err_fine = _rel(model(x_fine), y_fine).item()
        assert err_fine < tol, err_fine
        # (a U-Net's 3-point stencils are in grid units: it does not transfer; see _unet)


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("name", NATIVE)
def test_wrong_channels_and_layout_are_rejected(name, device):
    model = _small(name, 1).to(device)
    with pytest.raises(ValueError, match="expects 2 input channels, got 3"):
        model(torch.randn(2, 3, 16, device=device))
    with pytest.raises(ValueError, match=r"channels-first input \(B, C, N\)"):
        model(torch.randn(2, 16, device=device))
    with pytest.raises(TypeError, match="floating-point"):
        model(torch.ones(2, 2, 16, dtype=torch.int64, device=device))
    with pytest.raises(TypeError, match="float32 weights but the input is torch.float64"):
        model(torch.randn(2, 2, 16, dtype=torch.float64, device=device))


@pytest.mark.parametrize("name", NATIVE)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_input_names_the_sample(name, bad, device):
    model = _small(name, 2).to(device)
    x = torch.randn(5, 2, 8, 8, device=device)
    x[3, 1, 2, 5] = bad
    x[4, 0, 0, 0] = bad
    with pytest.raises(ValueError, match=r"sample 3 holds NaN/inf \(bad samples: 3, 4\)"):
        model(x)


def test_fno_grid_coarser_than_modes(device):
    model = FNO(1, 1, dim=2, modes=(8, 4), width=4, layers=1).to(device)
    model(torch.randn(1, 1, 16, 8, device=device))  # exactly 2*modes points: fine
    with pytest.raises(
        ValueError,
        match=r"grid of 15 points \(axis 0\) is coarser than the "
        r"2\*modes=16 Fourier modes need",
    ):
        model(torch.randn(1, 1, 15, 8, device=device))
    with pytest.raises(ValueError, match=r"grid of 6 points \(axis 1\).*2\*modes=8"):
        model(torch.randn(1, 1, 16, 6, device=device))


def test_unet_indivisible_grid(device):
    model = UNet(1, 1, dim=2, width=4, levels=2).to(device)
    with pytest.raises(
        ValueError,
        match=r"grid of 30 points \(axis 1\) is not divisible by "
        r"2\*\*levels=4",
    ):
        model(torch.randn(1, 1, 16, 30, device=device))


def test_unknown_backbone_suggests_the_closest():
    with pytest.raises(UnknownNameError, match=r"unknown backbone 'fn0'; did you mean 'fno'\?"):
        get("fn0", in_channels=1, out_channels=1)
    with pytest.raises(
        ValueError, match="deeponet, fno, neuralop.fno, neuralop.tfno, neuralop.uno, unet"
    ):
        get("transformer", in_channels=1, out_channels=1)
    with pytest.raises(TypeError, match="string"):
        get(FNO, in_channels=1, out_channels=1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        get("fno", in_channels=1, out_channels=1, wdith=8)


@pytest.mark.parametrize(
    "cls,kwargs,error,match",
    [
        (FNO, {"dim": 3}, ValueError, "dim must be 1 or 2"),
        (FNO, {"dim": 2, "modes": [4]}, ValueError, "one entry per grid axis"),
        (FNO, {"modes": 0}, ValueError, "modes must be an int >= 1"),
        (FNO, {"width": 8.0}, TypeError, "width must be an int"),
        (FNO, {"padding": -1}, ValueError, "padding"),
        (FNO, {"padding": 1.5}, ValueError, r"fraction of each axis in \[0, 1\)"),
        (FNO, {"activation": "gelu2"}, ValueError, "did you mean 'gelu'"),
        (
            DeepONet,
            {"n_sensors": 1, "periodic": False},
            ValueError,
            "n_sensors must be an int >= 2",
        ),
        (UNet, {"levels": -1}, ValueError, "levels must be an int >= 0"),
        (UNet, {"periodic": 1}, TypeError, "periodic must be a bool"),
    ],
)
def test_bad_constructor_arguments(cls, kwargs, error, match):
    with pytest.raises(error, match=match):
        cls(1, 1, **kwargs)
