r"""Linear ODE: the simplest continuous-time baseline for irregular time series.

The state follows a learned linear ODE with a constant input, in normalised units
(``data_mean``/``data_std``) and model time :math:`\tau = t / \mathrm{time\_scale}`:

.. math:: \frac{dz}{d\tau} = A z + b,

advanced *exactly* over every gap with the matrix exponential of the augmented
(block-triangular) generator (Van Loan 1978, "Computing integrals involving the matrix
exponential", IEEE Trans. Automat. Control 23, 395-404):

.. math::
    \begin{pmatrix} z(\tau + \Delta) \\ 1 \end{pmatrix}
    = \exp\!\left(\Delta \begin{pmatrix} A & b \\ 0 & 0 \end{pmatrix}\right)
      \begin{pmatrix} z(\tau) \\ 1 \end{pmatrix}.

The model reads an episode forward, as a filter: the prediction at step i is the state
propagated from step i-1 (before anything of step i is seen); then every channel that
is visible at step i replaces its entry of the state (the observation is trusted
exactly), the others keep the propagated value. The first step predicts a learned
initial state :math:`z_0`. The predictive distribution is Gaussian with a learned
variance per channel, constant in time. Training minimises the Gaussian negative
log-likelihood of every observed value, per observed value (the harness's contract of
:class:`~simsci.models._series.SeriesModel`: the inputs carry only the visible values,
the likelihood scores all observed ones).

Choices, and why:

- **A = 0, b = 0 at initialisation**: the propagation is then the identity, so the
  untrained model *is* the harness's ``locf_mse`` baseline (the last visible value
  carried forward); whatever it learns is measured against that.
- **Forward only, for every task**: a hidden point is predicted from the past alone
  (no smoother). It keeps the model the plain linear ODE it is named after.
- **Features** (classification, regression): the final state estimate (D values); the
  dynamics (A, b) are shared by all episodes, so they carry no per-episode information.
- Sizes: ``D^2 + 3D`` parameters (plus the head for the per-episode tasks).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from simsci.models._series import SeriesModel

__all__ = ["LinearODE"]


class LinearODE(SeriesModel):
    """dz/dt = A z + b, propagated exactly and reset by the observations (module
    docstring).

    Args:
        obs_dim: D, channels per observation.
        hidden_dim: width of the per-episode head (classification, regression only).
        task, time_scale, hide_fraction, extrapolate_at, num_classes, label_dim,
            label_mean, label_std, label_weight, data_mean, data_std: the harness's
            (:class:`~simsci.models._series.SeriesModel`).
    """

    def __init__(self, obs_dim: int, hidden_dim: int = 32, **series):
        super().__init__(obs_dim, **series)
        if isinstance(hidden_dim, bool) or int(hidden_dim) != hidden_dim or hidden_dim < 1:
            raise ValueError(f"hidden_dim must be an integer >= 1, got {hidden_dim!r}")
        self.init_args = {**self.series_args, "hidden_dim": int(hidden_dim)}
        D = self.obs_dim
        self.A = nn.Parameter(torch.zeros(D, D))
        self.b = nn.Parameter(torch.zeros(D))
        self.z0 = nn.Parameter(torch.zeros(D))
        self.raw_var = nn.Parameter(torch.zeros(D))  # softplus(0) + 1e-4 ~ 0.69
        self.feature_dim = D
        self._build_head(self.feature_dim, int(hidden_dim))

    # ----------------------------------------------------------------- pieces
    def transitions(self, gaps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``exp(gap M)`` for every gap (any shape ``S``, model time): the linear part
        ``(*S, D, D)`` and the offset ``(*S, D)`` of the exact step over the gap."""
        D = self.obs_dim
        top = torch.cat([self.A, self.b[:, None]], 1)  # (D, D+1)
        M = torch.cat([top, top.new_zeros(1, D + 1)], 0)  # the generator, (D+1, D+1)
        phi = torch.linalg.matrix_exp(gaps[..., None, None].to(M.dtype) * M)
        return phi[..., :D, :D], phi[..., :D, D]

    def run(self, batch: dict, visible: torch.Tensor):
        """The filter over every step: predictions ``(B, L, D)`` (normalised units, each
        from the steps before it) and the final state ``(B, D)``."""
        dtype = self.A.dtype
        x, valid = batch["x"], batch["valid"]
        B, L, D = x.shape
        xn = torch.nan_to_num(self.normalise(x.to(dtype)))
        vis = visible & valid[..., None]
        gaps = torch.diff(batch["t"], dim=1) / self.time_scale  # in t's precision
        gaps = torch.where(valid[:, 1:], gaps, 0.0).clamp_min(0).to(dtype)
        lin, off = self.transitions(gaps)  # (B, L-1, D, D), (B, L-1, D)
        state = self.z0.expand(B, D)
        preds = []
        for i in range(L):
            if i > 0:
                state = (lin[:, i - 1] @ state[..., None])[..., 0] + off[:, i - 1]
            preds.append(state)
            state = torch.where(vis[:, i], xn[:, i], state)
        return torch.stack(preds, 1), state

    def variance(self) -> torch.Tensor:
        """The predictive variance per channel ``(D,)``, normalised units."""
        return nn.functional.softplus(self.raw_var) + 1e-4

    def features(self, batch: dict, visible: torch.Tensor) -> torch.Tensor:
        """The final state estimate, (B, D)."""
        return self.run(batch, self.visible_steps(batch, visible))[1]

    def predict_steps(
        self, batch: dict, visible: torch.Tensor | None = None, variance: bool = False
    ):
        """The predictive mean (and variance) at every step, data units (B, L, D)."""
        mean, _ = self.run(batch, self.visible_steps(batch, visible))
        std = self.data_std.to(mean.dtype)
        mean = mean * std + self.data_mean.to(mean.dtype)
        if not variance:
            return mean
        return mean, (self.variance().to(mean.dtype) * std**2).expand_as(mean)

    # ----------------------------------------------------------------- the harness's contract
    def objective(self, batch: dict, visible: torch.Tensor, observed: torch.Tensor) -> dict:
        mean, last = self.run(batch, visible)
        var = self.variance().to(mean.dtype)
        xn = torch.nan_to_num(self.normalise(batch["x"].to(mean.dtype)))
        n_obs = observed.sum().clamp(min=1)
        err2 = (xn - mean) ** 2
        nll = 0.5 * (err2 / var + var.log() + math.log(2 * math.pi))
        out = {
            "loss": torch.where(observed, nll, 0.0).sum() / n_obs,
            "mse": torch.where(observed, err2, 0.0).sum() / n_obs,
        }
        if self.head is not None:
            out["features"] = last
        return out
