"""neuraloperator's models as simsci backbones: ``neuralop.fno``, ``neuralop.tfno``,
``neuralop.uno`` (the optional extra ``simsci[neuralop]``, neuraloperator 2.0).

Each class wraps one model of ``neuralop.models`` (as ``self.model``) behind the backbone
contract of ``_common.Backbone``: ``(B, in_channels, *grid) -> (B, out_channels, *grid)``
on 1-D and 2-D grids (neuraloperator also runs 3-D; the simsci contract stops at 2),
``in_channels``, ``out_channels``, ``dim``, a JSON-able ``init_args`` that rebuilds the
module, ``num_parameters()`` (complex weights count twice) and the shared input checks.
neuraloperator is imported when such a backbone is built, never by ``import
simsci.operators``.

simsci's keywords and what they become:

- ``width`` -> ``hidden_channels``; ``layers`` -> ``n_layers``.
- ``modes`` (int or one per axis) -> ``n_modes``, *neuraloperator's* count: the modes
  kept per axis over both signs, so ``n_modes = m`` keeps wavenumbers ``|k| <= m // 2``
  (``m // 2 + 1`` on the last, rfft, axis), where simsci's FNO ``modes = m`` keeps
  ``|k| <= m - 1``. A grid coarser than the modes is not refused: neuraloperator keeps
  what the grid has.
- ``periodic=False`` -> ``domain_padding=0.125`` (zero padding of 1/8 of each axis after
  the lifting, as simsci's FNO ``padding``) unless ``domain_padding`` is given.
- ``activation`` (``gelu``, ``relu``, ``silu``, ``tanh``) -> ``non_linearity``.
- ``positional`` -> ``positional_embedding`` ``"grid"`` or None; neuraloperator's grid
  puts sample ``j`` at ``j / N`` on every axis (simsci's periodic convention) whatever
  ``periodic`` says.

Any other keyword of the neuraloperator class passes through (``factorization``,
``rank``, ``norm``, ``channel_mlp_skip``, ...) if its value is JSON-able, since
``init_args`` records it for checkpoints; module- or function-valued ones
(``conv_module``) are refused: build neuraloperator's model yourself for those (the
∂-NO wrapper ``DerivativeAugmented`` takes it as an external module).

Not wrapped: CODANO (variable codimension, no ``in_channels``), UQNO (wraps a trained
model), FNOGNO and GINO (point clouds), SFNO and LocalNO (spherical and local grids,
torch-harmonics).

neuraloperator computes its spectral layers in complex64 (``Module.double()`` leaves
complex weights as they are), so these backbones take float32 input only.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from simsci.errors import MissingExtraError, unknown_name
from simsci.operators._common import Backbone, check_dim, per_axis, positive_int

__all__ = ["INSTALL_HINT", "NeuralopFNO", "NeuralopTFNO", "NeuralopUNO", "import_neuralop"]

INSTALL_HINT = (
    'pip install "simsci[neuralop]", or without the wandb and config tools that only '
    "neuraloperator's training scripts use: pip install --no-deps neuraloperator==2.0.0 "
    "tensorly==0.10.0 tensorly-torch==0.5.0 opt_einsum==3.4.0"
)

# simsci keyword -> the neuraloperator keyword it sets (the latter is refused as such)
_RENAMED = {
    "width": "hidden_channels",
    "modes": "n_modes",
    "layers": "n_layers",
    "activation": "non_linearity",
    "positional": "positional_embedding",
}


def import_neuralop():
    """``neuralop.models``, or an ImportError that says how to install neuraloperator."""
    try:
        import neuralop.models
    except ImportError as exc:
        raise MissingExtraError(
            f"the neuralop.* backbones need neuraloperator, which does not import here "
            f"({type(exc).__name__}: {exc}); install it: {INSTALL_HINT}"
        ) from exc
    return neuralop.models


# simsci's activation names (those of _common.ACTIVATIONS) as the functions neuraloperator takes
_FUNCTIONS = {
    "gelu": nn.functional.gelu,
    "relu": nn.functional.relu,
    "silu": nn.functional.silu,
    "tanh": torch.tanh,
}


def _activation(name: str):
    if not isinstance(name, str):
        raise TypeError(f"activation must be a name (str), got {type(name).__name__} {name!r}")
    if name not in _FUNCTIONS:
        raise unknown_name("activation", name, _FUNCTIONS)
    return _FUNCTIONS[name]


def _keywords(cls: type) -> list[str]:
    """Named constructor keywords of ``cls``, following ``**kwargs`` into its bases
    (neuraloperator's TFNO takes ``*args, **kwargs`` and hands them to FNO)."""
    names: list[str] = []
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters.values()
        names += [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        names += [p.name for p in params if p.kind is p.KEYWORD_ONLY]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return [n for n in dict.fromkeys(names) if n != "self"]


class _NeuralopBackbone(Backbone):
    """The adapter shared by the ``neuralop.*`` backbones; a subclass names its
    neuraloperator class (``neuralop_class``) and translates the simsci keywords
    (``_translate``). Constructor: see :class:`NeuralopFNO`."""

    neuralop_class: str = ""
    default_layers: int = 4

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        dim: int = 1,
        width: int = 32,
        modes: int | Sequence[int] = 16,
        layers: int | None = None,
        periodic: bool = True,
        activation: str = "gelu",
        positional: bool = True,
        **neuralop_kwargs,
    ):
        super().__init__()
        self.in_channels = positive_int("in_channels", in_channels)
        self.out_channels = positive_int("out_channels", out_channels)
        self.dim = check_dim(dim)
        width = positive_int("width", width)
        self.modes = per_axis("modes", modes, self.dim)
        layers = positive_int("layers", self.default_layers if layers is None else layers)
        for flag, value in (("periodic", periodic), ("positional", positional)):
            if not isinstance(value, bool):
                raise TypeError(f"{flag} must be a bool, got {value!r}")
        non_linearity = _activation(activation)
        models = import_neuralop()
        cls = getattr(models, self.neuralop_class)
        self._check_passthrough(cls, neuralop_kwargs)
        self.init_args = {
            "in_channels": self.in_channels,
            "out_channels": self.out_channels,
            "dim": self.dim,
            "width": width,
            "modes": modes if isinstance(modes, int) else list(self.modes),
            "layers": layers,
            "periodic": periodic,
            "activation": activation,
            "positional": positional,
            **neuralop_kwargs,
        }
        kwargs = {
            "in_channels": self.in_channels,
            "out_channels": self.out_channels,
            "hidden_channels": width,
            "n_layers": layers,
            "non_linearity": non_linearity,
            "positional_embedding": "grid" if positional else None,
        }
        if not periodic:
            kwargs["domain_padding"] = 0.125
        kwargs.update(self._translate(width, layers, dict(neuralop_kwargs)))
        # UNO prints its skip settings on construction; keep the caller's stdout clean
        with contextlib.redirect_stdout(io.StringIO()):
            self.model = cls(**kwargs)

    def _translate(self, width: int, layers: int, extra: dict) -> dict:
        """The neuraloperator keywords that depend on the class (modes, ...) plus ``extra``."""
        return {"n_modes": self.modes, **extra}

    def _check_passthrough(self, cls: type, extra: dict) -> None:
        valid = _keywords(cls)
        own = {"in_channels", "out_channels", *_RENAMED.values()}
        for key, value in extra.items():
            simsci_name = next((k for k, v in _RENAMED.items() if v == key), None)
            if simsci_name is not None:
                raise TypeError(
                    f"{type(self).__name__}: pass {simsci_name}=..., simsci's name for "
                    f"neuraloperator's {key!r} (the keywords renamed: "
                    + ", ".join(f"{k} -> {v}" for k, v in _RENAMED.items())
                    + ")"
                )
            if key not in valid:
                names = [*_RENAMED, *(k for k in valid if k not in own), "periodic", "dim"]
                raise unknown_name(f"{type(self).__name__} keyword", key, names)
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                raise TypeError(
                    f"{type(self).__name__}: {key}={value!r} is not JSON-able, and init_args "
                    "must record every keyword to rebuild the model from a checkpoint; pass "
                    f"names and numbers, or build neuralop.models.{cls.__name__} yourself"
                ) from None

    def _check(self, x: Tensor) -> None:
        super()._check(x)
        if x.dtype != torch.float32:
            raise TypeError(
                f"{type(self).__name__} takes float32 input, got {x.dtype}: neuraloperator "
                "computes its spectral layers in complex64 (and .double() leaves complex "
                "weights as they are); cast the input and the module to float32"
            )

    def forward(self, x: Tensor) -> Tensor:
        """``(B, in_channels, *grid) -> (B, out_channels, *grid)``."""
        self._check(x)
        return self.model(x)

    def to(self, *args, **kwargs):
        """``nn.Module.to``, except that a real dtype leaves complex weights complex.

        ``Module.to(torch.float32)`` casts complex tensors to the real dtype too, dropping
        their imaginary parts (with only a warning); ``to(device, dtype)`` is a common
        idiom (``DerivativeAugmented`` moves a rebuilt backbone so), so here a real dtype
        applies to the real tensors only, as ``Module.float()`` does.
        """
        device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is None or dtype.is_complex:
            return super().to(*args, **kwargs)

        def convert(t: Tensor) -> Tensor:
            keep = dtype if t.is_floating_point() else None
            if memory_format is not None and t.dim() in (4, 5):
                return t.to(device, keep, non_blocking, memory_format=memory_format)
            return t.to(device, keep, non_blocking)

        return self._apply(convert)

    def state_dict(self, *args, **kwargs):
        # neuraloperator's models add a top-level "_metadata" entry (their constructor
        # keywords, functions included) to whatever state dict they are saved into: it is
        # no weight, breaks a strict load_state_dict of any module holding this one, and
        # need not survive torch.load(weights_only=True); init_args records the same.
        out = super().state_dict(*args, **kwargs)
        out.pop("_metadata", None)
        return out


class NeuralopFNO(_NeuralopBackbone):
    """neuraloperator's FNO ``(B, in_channels, *grid) -> (B, out_channels, *grid)``.

    Args:
        in_channels, out_channels: field channels in and out.
        dim: 1 or 2 grid axes.
        width: hidden channels. modes: neuraloperator's ``n_modes`` (int or per axis;
            ``m`` keeps ``|k| <= m // 2``, see the module docstring). layers: Fourier
            layers.
        periodic: False pads each axis by 1/8 (``domain_padding=0.125``).
        activation: ``gelu`` (default), ``relu``, ``silu`` or ``tanh``.
        positional: append neuraloperator's grid coordinates (``j / N``).
        **neuralop_kwargs: any other JSON-able keyword of ``neuralop.models.FNO``.

    >>> m = NeuralopFNO(1, 1, width=32, modes=16)  # doctest: +SKIP
    >>> m.num_parameters(), m(torch.randn(2, 1, 64)).shape  # doctest: +SKIP
    (86817, torch.Size([2, 1, 64]))
    """

    neuralop_class = "FNO"


class NeuralopTFNO(NeuralopFNO):
    """neuraloperator's TFNO: its FNO with Tucker-factorised spectral weights (``rank``
    0.1 by default: about a tenth of the weights). Arguments as :class:`NeuralopFNO`."""

    neuralop_class = "TFNO"


class NeuralopUNO(_NeuralopBackbone):
    """neuraloperator's U-shaped neural operator (UNO) on 1-D and 2-D grids.

    Arguments as :class:`NeuralopFNO`, with ``layers`` (default 5) Fourier layers on a
    U of grids: the output of layer ``i`` lies ``min(i, layers - 2 - i)`` halvings
    below the input grid (the last layer back on it), with ``width * 2**level``
    channels and ``modes // 2**level`` modes (at least 1), so UNO's default skips (layer
    ``i`` into layer ``layers - 1 - i``) join equal grids; ``layers=5`` is
    neuraloperator's own example (scalings 1, 1/2, 1, 2, 1). ``uno_out_channels``,
    ``uno_n_modes`` and ``uno_scalings`` override the U. ``channel_mlp_skip`` defaults
    to ``"linear"`` (UNO's own ``"soft-gating"`` fails where a skip joins and the
    channels change).
    """

    neuralop_class = "UNO"
    default_layers = 5

    def _translate(self, width: int, layers: int, extra: dict) -> dict:
        # level of each layer's output grid: down to the middle, back up, last on the input
        level = [min(i, layers - 2 - i) for i in range(layers - 1)] + [0]
        before = [0, *level[:-1]]
        coarse = [max(a, b) for a, b in zip(before, level)]  # the coarser grid of in / out
        kwargs = {
            "uno_out_channels": [width * 2**lv for lv in level],
            "uno_n_modes": [[max(1, m // 2**c) for m in self.modes] for c in coarse],
            "uno_scalings": [[2.0 ** (b - lv)] * self.dim for b, lv in zip(before, level)],
            "channel_mlp_skip": "linear",
        }
        if isinstance(extra.get("horizontal_skips_map"), dict):
            # JSON (a checkpoint's init_args) turns the int layer keys into strings
            extra["horizontal_skips_map"] = {
                int(k): int(v) for k, v in extra["horizontal_skips_map"].items()
            }
        kwargs.update(extra)
        return kwargs
