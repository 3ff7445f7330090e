"""The backbone registry: :data:`BACKBONES` (name -> class) beside its entry ``get``.

simsci's own ``fno``, ``deeponet``, ``unet``, and neuraloperator's ``neuralop.fno``,
``neuralop.tfno``, ``neuralop.uno`` (``_neuralop``: the extra ``simsci[neuralop]``,
imported only when one is built).

Every backbone follows the contract of ``.notes/issue5.md``: channels-first
``(B, in_channels, *grid) -> (B, out_channels, *grid)``, attributes ``in_channels``,
``out_channels``, ``dim``, ``init_args`` (JSON-able; ``type(m)(**m.init_args)`` rebuilds
it) and ``num_parameters()``. The shared input checks live in ``_common`` (imported by the
backbone modules, hence not defined here) and are re-exported below.
"""

from __future__ import annotations

from torch import nn

from simsci.errors import unknown_name
from simsci.operators._common import (
    Backbone,
    check_finite,
    check_input,
    count_parameters,
    grid_coordinates,
)
from simsci.operators._deeponet import DeepONet
from simsci.operators._fno import FNO, SpectralConv
from simsci.operators._neuralop import NeuralopFNO, NeuralopTFNO, NeuralopUNO
from simsci.operators._unet import UNet

__all__ = [
    "BACKBONES",
    "Backbone",
    "DeepONet",
    "FNO",
    "SpectralConv",
    "UNet",
    "check_finite",
    "check_input",
    "count_parameters",
    "get",
    "grid_coordinates",
]

BACKBONES: dict[str, type[nn.Module]] = {
    "fno": FNO,
    "deeponet": DeepONet,
    "unet": UNet,
    "neuralop.fno": NeuralopFNO,
    "neuralop.tfno": NeuralopTFNO,
    "neuralop.uno": NeuralopUNO,
}


def get(name: str, **kwargs) -> nn.Module:
    """Build the backbone ``name`` (a key of :data:`BACKBONES`) with ``kwargs``.

    >>> get("fno", in_channels=1, out_channels=1, modes=8).num_parameters()
    74209

    An unknown name lists the valid ones and suggests the closest; an unknown keyword is
    the constructor's TypeError (a ValueError listing the valid ones for ``neuralop.*``).
    A ``neuralop.*`` name without neuraloperator installed is an ImportError saying how
    to install it.
    """
    if not isinstance(name, str):
        raise TypeError(f"backbone name must be a string, got {type(name).__name__} {name!r}")
    cls = BACKBONES.get(name)
    if cls is None:
        raise unknown_name("backbone", name, BACKBONES)
    return cls(**kwargs)
