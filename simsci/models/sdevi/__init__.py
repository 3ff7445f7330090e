"""simsci.models.sdevi: SDE-induced variational inference for irregular time series.

:class:`SDEVI` (``simsci train sdevi``) in three variants (``variant="linear"``,
``"nonlinear"``, ``"complex"``) for the tasks of :mod:`simsci.models._series`
(interpolation, extrapolation, classification, regression); and the Gauss–Markov
algebra of linear SDEs
(:func:`lti_transition`: exact transitions by one matrix exponential; :func:`propagate`;
:func:`gaussian_kl`; :func:`chain_kl`: the KL between two Gauss–Markov chains in closed
form), on which the posterior, the prior and the ELBO are built; and
:func:`kalman_log_likelihood`, the exact log evidence of linear-SDE data with irregular
times and per-channel masks (the bound SDEVI's ELBO is checked against); and
:func:`linear_gaussian_elbo`, the path-free ELBO for a linear-Gaussian decoder; and their
complex-domain counterparts (:func:`complex_diag_transition` ... :func:`complex_gaussian_elbo`);
and :func:`kalman_smoother`, the exact posterior marginals of such data (the optimum a
prediction is measured against).
"""

from __future__ import annotations

from simsci.integrate import lti_transition
from simsci.models.sdevi._complex import (
    complex_chain_kl,
    complex_diag_transition,
    complex_gaussian_elbo,
    complex_gaussian_kl,
    complex_propagate,
)
from simsci.models.sdevi._elbo import linear_gaussian_elbo
from simsci.models.sdevi._gauss_markov import (
    chain_kl,
    gaussian_kl,
    propagate,
    safe_cholesky,
)
from simsci.models.sdevi._kalman import kalman_log_likelihood, kalman_smoother
from simsci.models.sdevi._model import HEAD_INPUTS, SDEVI, VARIANTS

__all__ = [
    "SDEVI",
    "VARIANTS",
    "HEAD_INPUTS",
    "lti_transition",
    "propagate",
    "gaussian_kl",
    "chain_kl",
    "safe_cholesky",
    "kalman_log_likelihood",
    "kalman_smoother",
    "linear_gaussian_elbo",
    "complex_diag_transition",
    "complex_propagate",
    "complex_gaussian_kl",
    "complex_chain_kl",
    "complex_gaussian_elbo",
]
