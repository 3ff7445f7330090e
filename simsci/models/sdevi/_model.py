r"""``SDEVI``: linear-SDE-induced variational inference for irregular time series.

Generative model (normalised data units, time in units of ``time_scale``):

- prior: a learnable stable linear SDE :math:`dz = (A_p z + b_p)\,dt + L_p\,dW` with
  :math:`A_p = -\mathrm{diag}(\mathrm{softplus}(a)) + (W - W^\top)/2` (dissipative plus a
  rotation, so oscillations are representable and the prior never explodes),
  :math:`z(t_1) \sim \mathcal N(0, \mathrm{diag}(\mathrm{softplus}(p_0)))`;
- decoder: :math:`y_i = H z(t_i) + h_0 + \varepsilon`, :math:`\varepsilon \sim
  \mathcal N(0, \mathrm{diag}\,R)`, observed entries only (per-channel masks).

Posterior: induced by a linear *time-varying* SDE, piecewise constant between
consecutive time points: a bidirectional GRU reads every time point of an episode
(values and masks of the visible entries, the gaps to both neighbours) and emits, for
each interval :math:`[t_i, t_{i+1}]`, :math:`A_i = 3\tanh(\cdot/3)`, :math:`b_i` and a
lower-triangular :math:`L_i` (positive diagonal), and :math:`q(z(t_1))`. Its marginals and
transitions are exact Gaussians (:func:`lti_transition`, :func:`propagate`), the ELBO is
:func:`linear_gaussian_elbo`: no path sampling, no Monte-Carlo noise in the gradient.
Hidden time points (interpolation training, ``hide_fraction``) stay in the chain with
their values masked out, so the posterior at a hidden time is the model's prediction
there, with its variance :math:`HP_iH^\top + R` as the uncertainty.

In progress (issue 6): the non-linear-SDE and complex-valued variants, extrapolation
and classification/regression heads, baselines and benchmarks come next.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from simsci.models.latent_ode import (
    LatentODE,
    hide_time_points,
    interpolation_scores,
    observed_mask,
    vector_data_kwargs,
)
from simsci.models.sdevi._elbo import linear_gaussian_elbo

__all__ = ["SDEVI"]


def _tril(raw: torch.Tensor, d: int) -> torch.Tensor:
    """(..., d*d) -> lower-triangular (..., d, d) with a softplus-positive diagonal."""
    M = raw.reshape(*raw.shape[:-1], d, d)
    diag = nn.functional.softplus(M.diagonal(dim1=-2, dim2=-1)) + 1e-3
    return torch.tril(M, -1) + torch.diag_embed(diag)


class SDEVI(nn.Module):
    """Linear SDEVI (see the module docstring).

    Args:
        obs_dim: channels D. latent_dim: d. hidden_dim: GRU width.
        data_mean, data_std: per-channel normalisation (from the file's /stats).
        time_scale: time unit of the latent dynamics (the typical episode duration).
        hide_fraction: interior time points hidden from the encoder in training.
    """

    data_fields = ("t", "x", "mask")

    def __init__(
        self,
        obs_dim: int,
        latent_dim: int = 8,
        hidden_dim: int = 64,
        data_mean=None,
        data_std=None,
        time_scale: float = 1.0,
        hide_fraction: float = 0.3,
    ):
        super().__init__()
        if obs_dim < 1 or latent_dim < 1 or hidden_dim < 1:
            raise ValueError("obs_dim, latent_dim and hidden_dim must be positive")
        if not (time_scale > 0 and math.isfinite(time_scale)):
            raise ValueError(f"time_scale must be finite and > 0, got {time_scale!r}")
        D, d = int(obs_dim), int(latent_dim)
        self.obs_dim, self.latent_dim, self.time_scale = D, d, float(time_scale)
        self.hide_fraction = float(hide_fraction)
        mean = [0.0] * D if data_mean is None else [float(v) for v in data_mean]
        std = [1.0] * D if data_std is None else [max(float(v), 1e-8) for v in data_std]
        self.register_buffer("data_mean", torch.tensor(mean), persistent=False)
        self.register_buffer("data_std", torch.tensor(std), persistent=False)
        self.encoder = nn.GRU(2 * D + 2, hidden_dim, batch_first=True, bidirectional=True)
        self.to_interval = nn.Linear(4 * hidden_dim, d * d + d + d * d)
        self.to_initial = nn.Linear(2 * hidden_dim, d + d * d)
        self.prior_a = nn.Parameter(torch.zeros(d))
        self.prior_w = nn.Parameter(0.1 * torch.randn(d, d))
        self.prior_b = nn.Parameter(torch.zeros(d))
        self.prior_l = nn.Parameter(torch.zeros(d))
        self.prior_p0 = nn.Parameter(torch.zeros(d))
        self.H = nn.Linear(d, D)
        self.log_r = nn.Parameter(torch.full((D,), math.log(0.05)))
        self.init_args = {
            "obs_dim": D,
            "latent_dim": d,
            "hidden_dim": int(hidden_dim),
            "data_mean": mean,
            "data_std": std,
            "time_scale": self.time_scale,
            "hide_fraction": self.hide_fraction,
        }

    @classmethod
    def from_data(cls, trajectories, *, window: int | None = None, **overrides) -> SDEVI:
        return cls(**{**vector_data_kwargs(trajectories, window, "SDEVI"), **overrides})

    # the latent ODE's batches: padded episodes on one union grid, shifted to t = 0
    collate = staticmethod(LatentODE.collate)

    # ----------------------------------------------------------------- pieces
    def prior(self, dtype, device) -> dict:
        d = self.latent_dim
        W = self.prior_w.to(device, dtype)
        A = -torch.diag(nn.functional.softplus(self.prior_a) + 1e-2).to(device, dtype)
        return {
            "A": A + 0.5 * (W - W.T),
            "b": self.prior_b.to(device, dtype),
            "L": torch.diag(nn.functional.softplus(self.prior_l) + 1e-3).to(device, dtype),
            "m0": torch.zeros(d, dtype=dtype, device=device),
            "P0": torch.diag(nn.functional.softplus(self.prior_p0) + 1e-3).to(device, dtype),
        }

    def posterior(self, s: torch.Tensor, xn: torch.Tensor, visible: torch.Tensor, valid):
        """Posterior parameters from the visible entries. s (B, n) scaled times."""
        B, n, D = xn.shape
        d = self.latent_dim
        gaps = torch.diff(s, dim=1).clamp_min(0)
        prev = torch.cat([torch.zeros_like(s[:, :1]), gaps], 1)
        nxt = torch.cat([gaps, torch.zeros_like(s[:, :1])], 1)
        vis = visible.to(xn.dtype)
        inp = torch.cat([xn * vis, vis, prev[..., None], nxt[..., None]], -1)
        lengths = valid.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(
            inp, lengths, batch_first=True, enforce_sorted=False
        )
        out, _ = self.encoder(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=n)
        raw = self.to_interval(torch.cat([h[:, :-1], h[:, 1:]], -1))
        A = 3.0 * torch.tanh(raw[..., : d * d].reshape(B, n - 1, d, d) / 3.0)
        b = raw[..., d * d : d * d + d]
        L = _tril(raw[..., d * d + d :], d)
        init = self.to_initial(h[:, 0])
        l1 = _tril(init[..., d:], d)
        return {"m1": init[..., :d], "P1": l1 @ l1.transpose(-1, -2), "A": A, "b": b, "L": L}

    def _elbo(self, batch: dict, visible: torch.Tensor):
        dtype = self.H.weight.dtype  # compute in the parameters' precision
        x = batch["x"].to(dtype)
        xn = torch.nan_to_num((x - self.data_mean.to(dtype)) / self.data_std.to(dtype))
        s = ((batch["t"] - batch["t"][:, :1]) / self.time_scale).to(dtype)
        valid = batch["valid"]
        if bool((valid.sum(1) == 0).any()):
            raise ValueError("an episode has no time point; drop empty episodes")
        post = self.posterior(s, xn, visible, valid)
        prior = self.prior(xn.dtype, xn.device)
        H, h0 = self.H.weight, self.H.bias
        R = self.log_r.exp().clamp_min(1e-4)
        elbo, parts = linear_gaussian_elbo(xn - h0, visible, s, post, prior, H, R, valid=valid)
        return elbo, parts, xn, post

    def predict(self, batch: dict, visible: torch.Tensor | None = None, variance: bool = False):
        """Posterior mean (and variance) at every step, data units: (B, L, D)."""
        observed = observed_mask(batch)
        visible = observed if visible is None else visible & observed
        _, parts, _, _ = self._elbo(batch, visible)
        mean = parts["means"] @ self.H.weight.T + self.H.bias
        out = mean * self.data_std + self.data_mean
        if not variance:
            return out
        H = self.H.weight
        var = ((H @ parts["covs"]) * H).sum(-1) + self.log_r.exp()
        return out, var * self.data_std**2

    # ----------------------------------------------------------------- training contract
    def training_step(self, batch: dict) -> dict:
        observed = observed_mask(batch)
        if bool((observed.sum((1, 2)) == 0).any()):
            raise ValueError("an episode has no observed value (all masked); drop it first")
        hidden = hide_time_points(observed, self.hide_fraction if self.training else 0.0)
        visible = observed & ~hidden[..., None]
        elbo, parts, _, _ = self._elbo(batch, visible)
        n_obs = visible.sum().clamp(min=1)
        return {
            "loss": -elbo.sum() / n_obs,
            "kl": parts["kl"].sum() / n_obs,
            "expected_loglik": parts["expected_loglik"].sum() / n_obs,
        }

    def validation_step(self, batch: dict) -> dict:
        gen = torch.Generator().manual_seed(1234)
        scores = interpolation_scores(self, batch, self.hide_fraction or 0.3, generator=gen)
        return {"loss": self.training_step(batch)["loss"], **scores}
