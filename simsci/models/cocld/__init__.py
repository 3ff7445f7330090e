"""CoCLD: coupled continuous-time latent dynamics for irregular event sequences.

``CoCLD`` (``simsci train cocld``) is the model (:mod:`._model`); ``LatentDiffusion``
its diffusion-based latent interpolator (:mod:`._diffusion`). Both follow the event
harness of :mod:`simsci.models._events` (likelihood, prediction, thinning, scores).
"""

from simsci.models.cocld._diffusion import LatentDiffusion
from simsci.models.cocld._model import CoCLD

__all__ = ["CoCLD", "LatentDiffusion"]
