"""GFG, Geometric Flow Grounding: dynamics on the tangent bundle of a learned manifold.

- :class:`GFG` (registry name ``gfg``): the grounded model and, through ``variant=``, its
  baselines in the same harness (a plain neural ODE, a latent neural ODE, the projection
  onto a known manifold); ``rollout`` integrates it with ``simsci.odeint``.
- The Neural Tangent Projection Layer (:class:`TangentProjection` and its functions):
  tangent velocities by a JVP, the projector P = J (J^T J)^-1 J^T, the residual
  ||(I - P) v|| / ||v||.
- Uses: :func:`forecast_metrics`, :func:`motif_scores`, :func:`detection_scores`,
  :func:`detect_metrics`, :func:`corrupt`; ``simsci evaluate CKPT --task
  forecast|motifs|detect`` (:func:`evaluate_file`).
"""

from simsci.models.gfg._data import VARIANTS, episode_arrays, finite_difference_velocity
from simsci.models.gfg._model import GFG
from simsci.models.gfg._tangent import (
    TangentProjection,
    decoder_jacobian,
    mlp_jvp,
    project,
    projection_residual,
    projector,
    tangent_velocity,
)
from simsci.models.gfg._uses import (
    TASKS,
    auroc,
    corrupt,
    detect_metrics,
    detection_scores,
    evaluate_file,
    forecast_metrics,
    motif_scores,
    reference_statistics,
    residual_scores,
)

__all__ = [
    "episode_arrays",
    "GFG",
    "VARIANTS",
    "TASKS",
    "TangentProjection",
    "tangent_velocity",
    "decoder_jacobian",
    "mlp_jvp",
    "project",
    "projector",
    "projection_residual",
    "finite_difference_velocity",
    "forecast_metrics",
    "motif_scores",
    "detection_scores",
    "detect_metrics",
    "reference_statistics",
    "residual_scores",
    "corrupt",
    "auroc",
    "evaluate_file",
]
