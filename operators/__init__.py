"""simsci.operators: neural operators and the ∂-NO derivative features.

- Backbones on channels-first grids ``(B, C, *grid)``: :class:`FNO` (1-D, 2-D),
  :class:`DeepONet`, :class:`UNet`, and neuraloperator's FNO, TFNO and UNO as
  ``neuralop.fno``, ``neuralop.tfno``, ``neuralop.uno`` (the extra
  ``simsci[neuralop]``, imported only when one is built); ``get(name, **kwargs)`` builds
  one from :data:`BACKBONES`. :func:`count_parameters` counts real parameters (a complex
  weight twice), as every ``num_parameters()`` here does.
- ∂-NO (derivative-augmented neural operators): :class:`DerivativeFeatures` computes
  fractional derivatives of the input with learnable orders β per feature channel
  (Riesz :math:`|k|^\\beta` and directional :math:`(ik)^\\beta` in Fourier space; an even
  extension for non-periodic grids); :class:`DerivativeAugmented` prepends them to any
  backbone's input.
- :class:`OperatorModel` trains either on any field file of the trajectory format
  (``simsci train operator --backbone fno --features dno --data burgers.h5``; any
  backbone name, e.g. ``--backbone neuralop.fno``) and
  :func:`evaluate_operator` scores it per time step and channel at the training
  resolution and finer ones. Its checkpoints enter the PDE-solver benchmark
  (``simsci bench pde --model``) and, trained on environment rollouts, the
  ``simsci/Surrogate-v0`` environment.
"""

from __future__ import annotations

from simsci.operators._backbones import BACKBONES, FNO, DeepONet, UNet, count_parameters, get
from simsci.operators._dno import DerivativeAugmented, DerivativeFeatures
from simsci.operators._model import OperatorModel, evaluate_operator, relative_l2

__all__ = [
    "BACKBONES",
    "get",
    "count_parameters",
    "FNO",
    "DeepONet",
    "UNet",
    "DerivativeFeatures",
    "DerivativeAugmented",
    "OperatorModel",
    "evaluate_operator",
    "relative_l2",
]
