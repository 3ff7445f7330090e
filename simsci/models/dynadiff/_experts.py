"""The experts of DynaDiff: small one-step dynamics predictors, run functionally.

An expert maps the state at one frame to the state one frame later,

    z_{k+1} = z_k + RK4_h( f_theta )(z_k),   z = (x - mu) / sigma,   h = 1 / substeps,

where ``f_theta`` is a small network in *normalised* state and *frame* time units (one
frame = one recording interval), integrated with ``substeps`` classical RK4 steps. The
normalisation (``mu``, ``sigma``: one number per channel, shared by every expert of a
zoo) and the frame time unit make every weight O(1) across systems, so one weight-space
generator sees comparable numbers for every expert.

Two architectures (:class:`ExpertSpec`):

- ``"mlp"`` for ODE states ``(D,)``: Linear(D, H) - act - ... - Linear(H, D), ``depth``
  layers;
- ``"conv"`` for periodic 2D fields ``(H, W, C)``: Conv2d(C, hidden, k) - act - ... -
  Conv2d(hidden, C, k), circular padding (the fields are periodic), channels last at
  the interface like the trajectory format;
- ``"fno"`` for periodic 2D fields whose dynamics are non-local (Navier-Stokes: the
  velocity is an integral of the vorticity, which a few 3x3 convolutions cannot see):
  a pointwise lift C -> hidden, ``depth - 2`` Fourier layers
  h <- act(W h + b + F^-1[R . F h]) keeping ``modes`` x ``modes`` Fourier modes (the
  lowest positive and negative wavenumbers along the first axis, the lowest along the
  second; R complex, stored as real and imaginary parts), and a pointwise projection
  hidden -> C (Li et al. 2021's FNO, small).

Design choices, and why:

- **A vector field integrated by RK4, not a direct next-frame map.** It is the usual
  neural-ODE surrogate of the CoDA/LEADS protocols and extrapolates better in the step
  size; the RK4 step keeps the predictor a plain feed-forward function of (weights,
  state), which ``torch.func.functional_call`` and ``vmap`` need.
- **Weights as a list of (weight, bias) layers** (:meth:`ExpertSpec.layer_shapes`):
  the same ordered layout serves the weight graphs (:mod:`._graph`), the flat vectors
  of the diffusion model and ``state_dict`` of :class:`ExpertNet` (``layers.{i}.weight``,
  ``layers.{i}.bias``), so converting between them is exact.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "ACTIVATIONS",
    "ExpertSpec",
    "ExpertNet",
    "flatten_params",
    "unflatten_params",
    "rk4_frame",
    "functional_template",
]

ACTIVATIONS = {"tanh": torch.tanh, "silu": F.silu, "softplus": F.softplus, "gelu": F.gelu}
KINDS = ("mlp", "conv", "fno")


@dataclass(frozen=True)
class ExpertSpec:
    """The architecture shared by every expert of a zoo.

    kind: ``"mlp"`` (states ``(D,)``, ``channels`` = D), ``"conv"`` or ``"fno"``
    (fields ``(H, W, C)``, ``channels`` = C); hidden: width; depth: number of layers
    (>= 2; >= 3 for fno: lift, Fourier layers, projection); kernel: odd conv kernel
    size; modes: Fourier modes kept per axis (fno); activation: a key of
    ``ACTIVATIONS``; substeps: RK4 steps per frame.
    """

    kind: str
    channels: int
    hidden: int = 64
    depth: int = 3
    kernel: int = 3
    activation: str = "tanh"
    substeps: int = 1
    modes: int = 6

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"expert kind must be one of {KINDS}, got {self.kind!r}")
        for name, low in (("channels", 1), ("hidden", 1), ("depth", 2), ("substeps", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"ExpertSpec.{name} must be an integer >= {low}, got {value!r}")
        if self.kind == "fno" and (self.depth < 3 or self.modes < 1):
            raise ValueError(
                f"an fno expert needs depth >= 3 (lift, Fourier layers, projection) and "
                f"modes >= 1, got depth={self.depth}, modes={self.modes}"
            )
        if self.kind == "conv" and (self.kernel < 1 or self.kernel % 2 == 0):
            raise ValueError(f"conv kernel must be odd and positive, got {self.kernel}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}"
            )

    @classmethod
    def from_dict(cls, d) -> ExpertSpec:
        if isinstance(d, ExpertSpec):
            return d
        if not isinstance(d, dict):
            raise TypeError(f"an expert spec is a dict or ExpertSpec, got {type(d).__name__}")
        unknown = sorted(set(d) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(
                f"unknown ExpertSpec keys {unknown}; valid: {sorted(cls.__dataclass_fields__)}"
            )
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)

    def widths(self) -> list[int]:
        """Neurons per layer, inputs first: [C, H, ..., H, C] (depth + 1 entries)."""
        return [self.channels] + [self.hidden] * (self.depth - 1) + [self.channels]

    def layer_shapes(self) -> list[tuple[tuple[int, ...], tuple[int]]]:
        """[(weight shape, bias shape)] per layer: (out, in) or (out, in, k, k); for fno
        the pointwise weights (out, in) (the Fourier weights: :meth:`param_shapes`)."""
        w = self.widths()
        k = (self.kernel, self.kernel) if self.kind == "conv" else ()
        return [((w[i + 1], w[i], *k), (w[i + 1],)) for i in range(self.depth)]

    def is_fourier(self, i: int) -> bool:
        """Whether layer i is a Fourier layer (fno, all but the first and the last)."""
        return self.kind == "fno" and 0 < i < self.depth - 1

    def param_names(self) -> list[str]:
        return list(self.param_shapes())

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = {}
        for i, (ws, bs) in enumerate(self.layer_shapes()):
            shapes[f"layers.{i}.weight"] = ws
            if self.is_fourier(i):
                # R for the positive and the negative first-axis wavenumbers, re and im
                shapes[f"layers.{i}.spectral"] = (ws[0], ws[1], 2, self.modes, self.modes, 2)
            shapes[f"layers.{i}.bias"] = bs
        return shapes

    def graph_layers(self, params: dict) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The layers as (weight, bias) pairs for the weight graph (:mod:`._graph`):
        mlp/conv weights as they are; for fno every edge carries [pointwise weight,
        Fourier weights] as a (out, in, 1, 1 + 8 modes^2) "kernel", zero beyond the
        first entry for the lift and the projection (one edge width for the graph)."""
        lead = params["layers.0.bias"].shape[:-1]
        out = []
        width = self.edge_dim()
        for i in range(self.depth):
            w, b = params[f"layers.{i}.weight"], params[f"layers.{i}.bias"]
            if self.kind == "fno":
                o, n = w.shape[-2:]
                parts = [w.reshape(*lead, o, n, 1)]
                if self.is_fourier(i):
                    parts.append(params[f"layers.{i}.spectral"].reshape(*lead, o, n, -1))
                feat = torch.cat(parts, dim=-1)
                feat = F.pad(feat, (0, width - feat.shape[-1]))
                w = feat.reshape(*lead, o, n, 1, width)
            out.append((w, b))
        return out

    def edge_dim(self) -> int:
        """Edge feature width of :meth:`graph_layers`' graphs."""
        if self.kind == "mlp":
            return 1
        if self.kind == "conv":
            return self.kernel**2
        return 1 + 8 * self.modes**2

    @property
    def num_params(self) -> int:
        return sum(math.prod(s) for s in self.param_shapes().values())

    def state_ndim(self) -> int:
        """Dimensions of one state: 1 for (D,), 3 for (H, W, C)."""
        return 1 if self.kind == "mlp" else 3

    def check_state(self, x: torch.Tensor, what: str = "state") -> None:
        nd = self.state_ndim()
        if x.ndim < nd + 1 or x.shape[-1] != self.channels:
            want = "(..., D)" if self.kind == "mlp" else "(..., H, W, C)"
            raise ValueError(
                f"{what} of shape {tuple(x.shape)} does not fit a {self.kind} expert with "
                f"{self.channels} channel(s): expected {want} with a batch dimension and "
                f"{self.channels} channels last"
            )


class ExpertNet(nn.Module):
    """The vector field f_theta of one expert (normalised units), see the module docstring.

    ``forward(z)``: z ``(B, D)`` or ``(B, H, W, C)`` -> dz/dtau of the same shape.
    """

    def __init__(self, spec: ExpertSpec):
        super().__init__()
        self.spec = ExpertSpec.from_dict(spec)
        layers = []
        for i, (ws, _) in enumerate(self.spec.layer_shapes()):
            if self.spec.is_fourier(i):
                layers.append(_FourierLayer(ws[1], ws[0], self.spec.modes))
            elif self.spec.kind in ("mlp", "fno"):
                layers.append(nn.Linear(ws[1], ws[0]))
            else:
                layers.append(nn.Conv2d(ws[1], ws[0], ws[2], padding=0))
        self.layers = nn.ModuleList(layers)
        self.act = ACTIVATIONS[self.spec.activation]
        # a small last layer: the field starts near zero (an expert starts as the identity
        # map), which keeps early RK4 rollouts finite
        with torch.no_grad():
            self.layers[-1].weight.mul_(0.1)
            self.layers[-1].bias.zero_()

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if self.spec.kind in ("mlp", "fno"):  # both act on the channels-last layout
            h = z
            for i, layer in enumerate(self.layers):
                h = layer(h)
                if i < len(self.layers) - 1:
                    h = self.act(h)
            return h
        lead = z.shape[:-3]
        h = z.reshape(-1, *z.shape[-3:]).permute(0, 3, 1, 2)
        p = self.spec.kernel // 2
        for i, layer in enumerate(self.layers):
            if p:
                h = F.pad(h, (p, p, p, p), mode="circular")
            h = layer(h)
            if i < len(self.layers) - 1:
                h = self.act(h)
        return h.permute(0, 2, 3, 1).reshape(*lead, *z.shape[-3:])

    def step(self, z: torch.Tensor) -> torch.Tensor:
        """One frame ahead: ``substeps`` RK4 steps of size 1 / substeps."""
        return rk4_frame(self, z, self.spec.substeps)

    def rollout(self, z0: torch.Tensor, steps: int) -> torch.Tensor:
        """``(B, *S)`` -> ``(B, steps + 1, *S)``, the initial state first."""
        out = [z0]
        z = z0
        for _ in range(steps):
            z = self.step(z)
            out.append(z)
        return torch.stack(out, dim=1)


class _FourierLayer(nn.Module):
    """h (..., X, Y, n) -> W h + b + F^-1[R . F h] (..., X, Y, o), ``modes`` x ``modes``
    modes kept at the lowest |k_x| (both signs) and the lowest k_y."""

    def __init__(self, n: int, o: int, modes: int):
        super().__init__()
        lin = nn.Linear(n, o)
        self.weight = nn.Parameter(lin.weight.detach().clone())
        self.bias = nn.Parameter(lin.bias.detach().clone())
        self.spectral = nn.Parameter(torch.randn(o, n, 2, modes, modes, 2) / (n * o))
        self.modes = int(modes)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        X, Y = h.shape[-3], h.shape[-2]
        m = self.modes
        if 2 * m > X or m > Y // 2 + 1:
            raise ValueError(f"{m} Fourier modes do not fit a {X} x {Y} grid")
        ft = torch.fft.rfft2(h, dim=(-3, -2))  # (..., X, Y//2+1, n)
        # (o, n, 2, m, m) complex; torch.complex, not view_as_complex, works under vmap
        R = torch.complex(self.spectral[..., 0], self.spectral[..., 1])
        top = torch.einsum("...xyn,onxy->...xyo", ft[..., :m, :m, :], R[:, :, 0])
        bot = torch.einsum("...xyn,onxy->...xyo", ft[..., X - m :, :m, :], R[:, :, 1])
        zeros = top.new_zeros(*top.shape[:-3], X - 2 * m, m, top.shape[-1])
        cols = torch.cat([top, zeros, bot], dim=-3)  # (..., X, m, o)
        full = F.pad(cols, (0, 0, 0, Y // 2 + 1 - m))
        spec = torch.fft.irfft2(full, s=(X, Y), dim=(-3, -2))
        return spec + h @ self.weight.T + self.bias


@functools.lru_cache(maxsize=32)
def functional_template(spec: ExpertSpec) -> ExpertNet:
    """A weightless :class:`ExpertNet` (parameters on the meta device) for
    ``torch.func.functional_call``: every call passes all the weights, so one module per
    architecture serves every expert, device and dtype."""
    with torch.device("meta"):
        return ExpertNet(spec)


def rk4_frame(f, z: torch.Tensor, substeps: int) -> torch.Tensor:
    """One frame of ``substeps`` classical RK4 steps of dz/dtau = f(z), tau in frames."""
    h = 1.0 / substeps
    for _ in range(substeps):
        k1 = f(z)
        k2 = f(z + 0.5 * h * k1)
        k3 = f(z + 0.5 * h * k2)
        k4 = f(z + h * k3)
        z = z + (h / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4)
    return z


def flatten_params(params: dict[str, torch.Tensor], spec: ExpertSpec) -> torch.Tensor:
    """``{name: (*lead, *shape)}`` -> ``(*lead, P)`` in :meth:`ExpertSpec.param_names` order."""
    shapes = spec.param_shapes()
    parts = []
    for name in spec.param_names():
        t = params[name]
        lead = t.shape[: t.ndim - len(shapes[name])]
        parts.append(t.reshape(*lead, -1))
    return torch.cat(parts, dim=-1)


def unflatten_params(flat: torch.Tensor, spec: ExpertSpec) -> dict[str, torch.Tensor]:
    """``(*lead, P)`` -> ``{name: (*lead, *shape)}``, the inverse of :func:`flatten_params`."""
    if flat.shape[-1] != spec.num_params:
        raise ValueError(
            f"a flat weight vector of this expert architecture has {spec.num_params} "
            f"entries, got {flat.shape[-1]}"
        )
    out, i = {}, 0
    lead = flat.shape[:-1]
    for name, shape in spec.param_shapes().items():
        n = math.prod(shape)
        out[name] = flat[..., i : i + n].reshape(*lead, *shape)
        i += n
    return out
