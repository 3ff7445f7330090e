r"""A latent SDE with path sampling (Li et al. 2020), the peer SDEVI is measured against.

Model (Li, Wong, Chen, Duvenaud 2020, "Scalable Gradients for Stochastic Differential
Equations", §7; the design of torchsde's ``latent_sde`` examples), normalised units, time
in units of ``time_scale``:

- prior: :math:`z_0 \sim \mathcal N(0, I)`, :math:`dz = h_\theta(z)\,dt + \sigma\,dW`;
- posterior: :math:`z_0 \sim q(z_0 \mid x) = \mathcal N(\mu, \mathrm{diag}\,s^2)`,
  :math:`dz = f_\phi(z, c(t))\,dt + \sigma\,dW` with the same diagonal diffusion
  :math:`\sigma` (learned, constant per latent dimension);
- decoder: :math:`x(t) \sim \mathcal N(g(z(t)), \mathrm{diag}\,r^2)`, observed entries.

Loss per observed value: :math:`-(\log p(x \mid z) - \mathrm{KL}(q(z_0) \| p(z_0)) -
\mathrm{KL}_{\text{path}}) / n_{\text{obs}}` (the KLs weighted by ``kl_weight``), with one
sampled posterior path per episode; the path KL is Girsanov's
:math:`\tfrac12\int \|(f - h)/\sigma\|^2 dt`, accumulated by ``torchsde.sdeint(...,
logqp=True)`` along the path.

Choices, and why:

- **Encoder**: a GRU run backwards over the visible time points (inputs: masked values,
  mask, gap to the next observation), as the latent ODE's. Its final state gives
  :math:`q(z_0)`; its output at each visible point gives the **context**.
- **A context per time, not one vector**: on :math:`[t_u, t_{u+1})` of the union grid the
  posterior drift reads :math:`c = W o_j`, the backward GRU's output at the first visible
  observation after :math:`t_u` (the summary of everything still to come), as in
  torchsde's example. One vector for the whole episode would have to steer the path
  towards every observation through :math:`z` alone; the per-time context tells the drift
  where the next observations lie.
- **Posterior drift = prior drift + correction**: :math:`f = h(z) + m(t)\,
  \mathrm{MLP}(z, c)` with :math:`m(t) = 1` while a visible observation lies ahead and 0
  after the last one. With nothing left to condition on the posterior *is* the prior
  there (no path KL), so extrapolation past the cut samples the learned prior dynamics
  from the filtered state, and the targets after the cut train :math:`h`, the dynamics
  that extrapolation uses. The path KL is the correction's energy; the prior drift's value
  is computed once per step for both drifts.
- **Solver**: ``method`` (torchsde's ``"euler"`` (Euler–Maruyama, the default),
  ``"milstein"`` or ``"srk"``) with a fixed step ``dt`` (data time units), by default
  ``dt_fraction`` of the median gap between consecutive time points *of the episodes*
  (not of the union grid, whose gaps shrink as the batch grows: the step, the cost and
  the discretised model would then depend on the batch size). One solve covers the batch
  on the union time grid (episodes shifted to t = 0); torchsde interpolates linearly to
  grid times between steps; outputs are gathered back to each episode's own times.
- **Predictions**: ``num_samples`` posterior paths per episode (z0 ~ q and Brownian
  paths from a fixed seed, so a batch always gives the same answer); the mean of the
  decoded paths and their variance plus :math:`r^2`.
- **Features** (classification/regression): the mean of :math:`q(z_0)`.
- Random numbers in training come from torch's generator (the Brownian path's entropy
  too), so ``simsci.train``'s seed makes runs reproducible.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from simsci.models._series import SeriesModel, observed_mask
from simsci.models.latent_ode import reversed_visible

__all__ = ["LatentSDE", "SDE_METHODS"]

#: torchsde methods for Itô SDEs with diagonal noise
SDE_METHODS = ("euler", "milstein", "srk")


def _mlp(inp: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inp, hidden),
        nn.Tanh(),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
        nn.Linear(hidden, out),
    )


class _SDE(nn.Module):
    """The posterior SDE as torchsde wants it: ``f`` (posterior drift), ``h`` (prior
    drift), ``g`` (diagonal diffusion). The context of a solve is set by :meth:`condition`."""

    noise_type = "diagonal"
    sde_type = "ito"

    def __init__(self, latent_dim: int, context_dim: int, hidden_dim: int):
        super().__init__()
        self.prior_drift = _mlp(latent_dim, hidden_dim, latent_dim)
        self.correction = _mlp(latent_dim + context_dim, hidden_dim, latent_dim)
        self.log_diffusion = nn.Parameter(torch.full((latent_dim,), math.log(0.3)))
        self._grid = self._ctx = self._ahead = None
        self._cache = None

    def condition(self, grid: torch.Tensor, ctx: torch.Tensor, ahead: torch.Tensor) -> None:
        """grid (U,) scaled times; ctx (B, U, C) the context on [grid[u], grid[u+1]);
        ahead (B, U) whether a visible observation lies after grid[u]."""
        self._grid, self._ctx, self._ahead = grid, ctx, ahead[..., None].to(ctx.dtype)
        self._cache = None

    def release(self) -> None:
        self._grid = self._ctx = self._ahead = self._cache = None

    def h(self, t, z):
        # torchsde's logqp wrapper calls f, g and h on the same tensor in one step: the
        # prior drift computed inside f is reused here
        if self._cache is not None and self._cache[0] is z:
            return self._cache[1]
        return self.prior_drift(z)

    def f(self, t, z):
        prior = self.prior_drift(z)
        self._cache = (z, prior)
        u = torch.searchsorted(self._grid, t.reshape(1).to(self._grid.dtype), right=True) - 1
        u = u.clamp(0, self._grid.shape[0] - 1)
        ctx = self._ctx.index_select(1, u)[:, 0]
        gate = self._ahead.index_select(1, u)[:, 0]
        return prior + gate * self.correction(torch.cat([z, ctx], -1))

    def g(self, t, z):
        return self.log_diffusion.clamp(min=math.log(1e-3)).exp().expand_as(z)


class LatentSDE(SeriesModel):
    """Latent SDE of Li et al. 2020 with torchsde path sampling (see the module docstring).

    Args:
        obs_dim: D, channels per observation.
        latent_dim, hidden_dim, context_dim: sizes of z, of the MLPs / GRU, of the context.
        method: torchsde method (:data:`SDE_METHODS`).
        dt: solver step in data time units; None: ``dt_fraction`` times the median gap
            between consecutive time points of the batch's episodes.
        num_samples: posterior paths per episode at prediction.
        kl_weight: weight of both KL terms.
        task, time_scale, hide_fraction, extrapolate_at, num_classes, label_dim,
            label_mean, label_std, label_weight, data_mean, data_std: the harness's
            (:class:`~simsci.models._series.SeriesModel`).
    """

    def __init__(
        self,
        obs_dim: int,
        latent_dim: int = 8,
        hidden_dim: int = 64,
        context_dim: int = 16,
        method: str = "euler",
        dt: float | None = None,
        dt_fraction: float = 0.25,
        num_samples: int = 16,
        kl_weight: float = 1.0,
        **series,
    ):
        super().__init__(obs_dim, **series)
        if min(latent_dim, hidden_dim, context_dim, num_samples) < 1:
            raise ValueError(
                "latent_dim, hidden_dim, context_dim and num_samples must be >= 1, got "
                f"{latent_dim}, {hidden_dim}, {context_dim}, {num_samples}"
            )
        if method not in SDE_METHODS:
            from simsci.errors import unknown_name

            raise unknown_name("method", method, SDE_METHODS)
        if dt is not None and not (math.isfinite(dt) and dt > 0):
            raise ValueError(f"dt must be finite and > 0 (data time units) or None, got {dt!r}")
        if not (math.isfinite(dt_fraction) and dt_fraction > 0):
            raise ValueError(f"dt_fraction must be finite and > 0, got {dt_fraction!r}")
        D = self.obs_dim
        self.latent_dim, self.method = int(latent_dim), method
        self.dt, self.dt_fraction = (None if dt is None else float(dt)), float(dt_fraction)
        self.num_samples, self.kl_weight = int(num_samples), float(kl_weight)
        self.init_args = {
            **self.series_args,
            "latent_dim": self.latent_dim,
            "hidden_dim": int(hidden_dim),
            "context_dim": int(context_dim),
            "method": method,
            "dt": self.dt,
            "dt_fraction": self.dt_fraction,
            "num_samples": self.num_samples,
            "kl_weight": self.kl_weight,
        }
        self.encoder = nn.GRU(2 * D + 1, hidden_dim, batch_first=True)
        self.to_posterior = nn.Linear(hidden_dim, 2 * latent_dim)
        self.to_context = nn.Linear(hidden_dim, context_dim)
        self.sde = _SDE(latent_dim, context_dim, hidden_dim)
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, D)
        )
        self.log_noise = nn.Parameter(torch.full((D,), math.log(0.1)))
        self.feature_dim = self.latent_dim
        self._build_head(self.feature_dim, hidden_dim)

    # ----------------------------------------------------------------- pieces
    def encode(self, batch: dict, xn: torch.Tensor, visible: torch.Tensor):
        """q(z0) and the context on the union grid: mu, logvar (B, d), ctx (B, U, C),
        ahead (B, U) bool (a visible observation lies after grid[u])."""
        t = batch["t"]
        _, xr, vr, gap, n_vis, order = reversed_visible(t, xn, visible, self.time_scale)
        inp = torch.cat([xr, vr.to(xn.dtype), gap[..., None]], -1)
        packed = nn.utils.rnn.pack_padded_sequence(
            inp, n_vis.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False
        )
        out, h = self.encoder(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=t.shape[1])
        mu, logvar = self.to_posterior(h[-1]).chunk(2, dim=-1)
        # out[:, j] summarises the visible points at times >= tr[j] (j < n_vis, latest
        # first); the context of [grid[u], grid[u+1]) is the output at the earliest
        # visible point after grid[u]: j = count - 1, count = #{j < n_vis: grid index of
        # point j > u} (grid indices, not times: the collate merges near-equal times)
        seen = torch.arange(t.shape[1], device=t.device) < n_vis[:, None]
        where = torch.where(seen, torch.gather(batch["index"], 1, order), -1)  # (B, L)
        u = torch.arange(batch["grid"].shape[0], device=t.device)
        count = (where[:, :, None] > u[None, None, :]).sum(1)  # (B, U)
        pick = (count - 1).clamp(min=0)
        ctx = torch.gather(out, 1, pick[..., None].expand(-1, -1, out.shape[-1]))
        return mu, logvar.clamp(-10.0, 5.0), self.to_context(ctx), count > 0

    def step(self, batch: dict) -> float:
        """The solver step in model time units."""
        if self.dt is not None:
            return self.dt / self.time_scale
        t, valid = batch["t"], batch["valid"]
        gaps = torch.diff(t, dim=1)[valid[:, 1:] & valid[:, :-1]]
        if gaps.numel() == 0:
            return 1.0
        return self.dt_fraction * float(gaps.median()) / self.time_scale

    def sample_paths(self, batch, mu, logvar, ctx, ahead, samples: int, seed: int | None):
        """Decoded posterior paths at each episode's times, normalised units:
        (samples, B, L, D), and the path KL per path (samples, B) and the z0 draw."""
        import torchsde

        B, d = mu.shape
        gen = None if seed is None else torch.Generator().manual_seed(seed)
        eps = torch.randn((samples, B, d), generator=gen, dtype=mu.dtype).to(mu.device)
        z0 = (mu + eps * (0.5 * logvar).exp()).reshape(samples * B, d)
        grid = ((batch["grid"] - batch["grid"][0]) / self.time_scale).to(mu.dtype)
        index = batch["index"]
        if grid.numel() < 2:  # every episode is one time point: no dynamics to solve
            zs = z0[:, None]
            path_kl = z0.new_zeros(samples * B)
        else:
            entropy = seed if seed is not None else int(torch.randint(0, 2**31 - 1, ()).item())
            dt = self.step(batch)
            bm = torchsde.BrownianInterval(
                t0=float(grid[0]),
                t1=float(grid[-1]),
                size=(samples * B, d + 1),  # logqp adds one state channel
                dtype=mu.dtype,
                device=mu.device,
                entropy=entropy,
                dt=dt,  # the fixed step: the interval tree is laid out for queries of it
                levy_area_approximation="space-time" if self.method == "srk" else "none",
            )
            self.sde.condition(grid, ctx.repeat(samples, 1, 1), ahead.repeat(samples, 1))
            try:
                zs, log_ratio = torchsde.sdeint(
                    self.sde, z0, grid, bm=bm, method=self.method, dt=dt, logqp=True
                )
            finally:
                self.sde.release()
            zs = zs.transpose(0, 1)  # (samples * B, U, d)
            path_kl = log_ratio.sum(0)
        idx = index.repeat(samples, 1)
        z = torch.gather(zs, 1, idx[..., None].expand(-1, -1, d))
        x = self.decoder(z).reshape(samples, B, index.shape[1], -1)
        return x, path_kl.reshape(samples, B)

    def _prepare(self, batch: dict, visible: torch.Tensor | None):
        observed = observed_mask(batch)
        self.check_batch(batch, observed)
        visible = observed if visible is None else visible & observed
        dtype = self.to_posterior.weight.dtype
        return visible, torch.nan_to_num(self.normalise(batch["x"].to(dtype)))

    def features(self, batch: dict, visible: torch.Tensor) -> torch.Tensor:
        """The mean of q(z0), (B, latent_dim)."""
        visible, xn = self._prepare(batch, visible)
        return self.encode(batch, xn, visible)[0]

    def predict_steps(
        self, batch: dict, visible: torch.Tensor | None = None, variance: bool = False
    ):
        """Mean (and variance) over ``num_samples`` posterior paths, data units (B, L, D)."""
        visible, xn = self._prepare(batch, visible)
        mu, logvar, ctx, ahead = self.encode(batch, xn, visible)
        x, _ = self.sample_paths(batch, mu, logvar, ctx, ahead, self.num_samples, seed=0)
        std, mean = self.data_std.to(x.dtype), self.data_mean.to(x.dtype)
        out = x.mean(0) * std + mean
        if not variance:
            return out
        noise = (2 * self.log_noise.clamp(min=math.log(1e-3))).exp()
        return out, (x.var(0, unbiased=False) + noise) * std**2

    # ----------------------------------------------------------------- the harness's contract
    def objective(self, batch: dict, visible: torch.Tensor, observed: torch.Tensor) -> dict:
        xn = torch.nan_to_num(self.normalise(batch["x"].to(self.to_posterior.weight.dtype)))
        mu, logvar, ctx, ahead = self.encode(batch, xn, visible)
        seed = None if self.training else 0  # a deterministic validation loss
        x, path_kl = self.sample_paths(batch, mu, logvar, ctx, ahead, 1, seed)
        pred = x[0]
        log_s = self.log_noise.clamp(min=math.log(1e-3))
        nll = 0.5 * ((xn - pred) / log_s.exp()) ** 2 + log_s + 0.5 * math.log(2 * math.pi)
        n_obs = observed.sum().clamp(min=1)
        nll = torch.where(observed, nll, 0.0).sum()
        kl0 = 0.5 * (mu**2 + logvar.exp() - 1.0 - logvar).sum()
        kl_path = path_kl.sum()
        mse = torch.where(observed, (xn - pred) ** 2, 0.0).sum() / n_obs
        out = {
            "loss": (nll + self.kl_weight * (kl0 + kl_path)) / n_obs,
            "mse": mse,
            "kl0": kl0 / n_obs,
            "kl_path": kl_path / n_obs,
        }
        if self.head is not None:
            out["features"] = mu  # the head's input: saves a second encoder pass
        return out
