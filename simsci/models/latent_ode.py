"""A latent neural ODE for irregularly sampled time series (the baseline of the tour).

Model (Chen et al. 2018, "Neural Ordinary Differential Equations", §5; Rubanova et al.
2019, "Latent ODEs for Irregularly-Sampled Time Series"):

    q(z0 | x_obs) = N(mu, diag sigma^2)      encoder: a GRU run backwards in time
    dz/dt = f_theta(z)                        latent dynamics, solved by simsci.odeint
    x(t) ~ N(g_phi(z(t)), diag s^2)           decoder, a learned noise scale s per channel

and is trained on the evidence lower bound per observed value,

    loss = ( sum_obs -log N(x | g(z(t)), s^2) + kl_weight * KL(q(z0) || N(0, I)) ) / n_obs.

Choices, and why:

- The encoder is a GRU run from the last observation to the first whose inputs are the
  masked values, the mask and the time gap to the next observation (Rubanova et al. use an
  ODE-RNN; a GRU with explicit gaps is cheaper on CPU and works for short windows).
- Windows are shifted to start at t = 0 (``union_collate(relative=True)``), so every
  sample's z0 lives at the same time and one batched ODE solve on the batch's union time
  grid serves all samples; the outputs are gathered back with the collate's index.
- The model stores the data's mean and std (``data_mean``, ``data_std``) and works in
  normalised units inside, so a checkpoint is self-contained: inputs and predictions are
  in the data's own units.
- Training hides a random fraction of the observed time points from the encoder
  (``hide_fraction``) and scores all observed points, which is exactly the interpolation
  task the model is evaluated on.

Batch layout (the output of ``simsci.data.union_collate(batch, relative=True)``):
``x`` (B, L, D) with NaN or anything where unobserved, optional ``mask`` (B, L, D) bool,
``valid`` (B, L) bool, ``grid`` (U,), ``index`` (B, L).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from simsci.integrate import odeint

__all__ = [
    "LatentODE",
    "observed_mask",
    "hide_time_points",
    "last_observation_carried",
    "vector_data_kwargs",
]


def observed_mask(batch: dict) -> torch.Tensor:
    """(B, L, D) bool: True where a value was observed (valid step, mask True, finite)."""
    x = batch["x"]
    obs = batch["valid"][..., None].expand_as(x)
    if "mask" in batch:
        obs = obs & batch["mask"].bool()
    return obs & torch.isfinite(x)


def hide_time_points(
    observed: torch.Tensor, fraction: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Choose time points to hide from the encoder: (B, L) bool, True = hidden.

    Only interior observed time points can be hidden (the first and last observed point of
    each sample stay visible), so predicting them is interpolation, not extrapolation.
    """
    row_obs = observed.any(-1)  # (B, L)
    idx = torch.arange(row_obs.shape[1], device=row_obs.device)
    first = torch.where(row_obs, idx, row_obs.shape[1]).min(-1).values
    last = torch.where(row_obs, idx, -1).max(-1).values
    interior = row_obs & (idx > first[:, None]) & (idx < last[:, None])
    u = torch.rand(row_obs.shape, generator=generator, device="cpu").to(row_obs.device)
    return interior & (u < fraction)


def vector_data_kwargs(trajectories, window: int | None, who: str) -> dict:
    """Constructor sizes of a model of vector series from a file: ``obs_dim`` from the
    ``x`` field, ``data_mean``/``data_std`` from its /stats (train split), ``time_scale``
    from the duration of ``window`` steps of the first episode (LatentODE, SDEVI)."""
    if "x" not in trajectories.step_fields:
        raise ValueError(f"{trajectories.path}: {who} needs a step field 'x'")
    shape = tuple(trajectories.step_fields["x"].shape)
    if len(shape) != 1:
        raise ValueError(f"{trajectories.path}: {who} models vectors; x has per-step shape {shape}")
    kwargs = {"obs_dim": shape[0]}
    stats = trajectories.stats.get("x")
    if stats is not None:
        kwargs["data_mean"] = [float(v) for v in stats["mean"].ravel()]
        kwargs["data_std"] = [max(float(v), 1e-8) for v in stats["std"].ravel()]
    t = trajectories[0]["t"]
    span = len(t) if window is None else min(window, len(t))
    if span > 1:
        kwargs["time_scale"] = float(t[span - 1] - t[0])
    return kwargs


def last_observation_carried(x: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """Last-value baseline: each entry takes the last visible value of its channel.

    x, visible: (B, L, D). Entries before a channel's first visible value take that first
    value (carried backward). Channels never visible give NaN.
    """
    L = x.shape[1]
    idx = torch.arange(L, device=x.device)[None, :, None].expand_as(x)
    last = torch.where(visible, idx, -1).cummax(dim=1).values
    first = torch.where(visible, idx, L).flip(1).cummin(dim=1).values.flip(1)
    src = torch.where(last >= 0, last, first).clamp(max=L - 1)
    out = torch.gather(torch.where(visible, x, torch.zeros_like(x)), 1, src)
    return torch.where(visible.any(1, keepdim=True), out, torch.full_like(out, math.nan))


class _ODEFunc(nn.Module):
    """dz/dt = f(z): an MLP with tanh, autonomous (time enters through the state)."""

    def __init__(self, latent_dim: int, hidden_dim: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(latent_dim, hidden_dim),
            nn.Tanh(),
            nn.Linear(hidden_dim, hidden_dim),
            nn.Tanh(),
            nn.Linear(hidden_dim, latent_dim),
        )

    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class LatentODE(nn.Module):
    """Latent ODE with a backwards-GRU encoder; see the module docstring for the model.

    Args:
        obs_dim: D, channels per observation.
        latent_dim, hidden_dim: sizes of z and of the MLPs / GRU.
        method, step_size: the solver of the latent ODE (``simsci.integrate.ODE_METHODS``);
            fixed-step methods with ``step_size=None`` step on the union output grid.
        time_scale: model time = data time / time_scale (keeps f's outputs O(1)).
        hide_fraction: fraction of interior observed time points hidden from the encoder
            in training.
        kl_weight: weight of the KL term.
        data_mean, data_std: per-channel normalisation (length D), default 0 and 1.
    """

    #: step fields the model reads (``TrajectoryDataset(fields=...)``)
    data_fields = ("t", "x", "mask")

    def __init__(
        self,
        obs_dim: int,
        latent_dim: int = 16,
        hidden_dim: int = 64,
        method: str = "rk4",
        step_size: float | None = None,
        time_scale: float = 1.0,
        hide_fraction: float = 0.3,
        kl_weight: float = 1.0,
        data_mean: list[float] | None = None,
        data_std: list[float] | None = None,
    ):
        super().__init__()
        if obs_dim < 1 or latent_dim < 1 or hidden_dim < 1:
            raise ValueError(
                f"obs_dim, latent_dim and hidden_dim must be >= 1, got {obs_dim}, "
                f"{latent_dim}, {hidden_dim}"
            )
        if not 0.0 <= hide_fraction < 1.0:
            raise ValueError(f"hide_fraction must lie in [0, 1), got {hide_fraction}")
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        mean = [0.0] * obs_dim if data_mean is None else [float(v) for v in data_mean]
        std = [1.0] * obs_dim if data_std is None else [float(v) for v in data_std]
        if len(mean) != obs_dim or len(std) != obs_dim or min(std) <= 0:
            raise ValueError(
                f"data_mean and data_std need {obs_dim} entries (std > 0), got "
                f"{len(mean)} and {len(std)}"
            )
        self.init_args = {
            "obs_dim": obs_dim,
            "latent_dim": latent_dim,
            "hidden_dim": hidden_dim,
            "method": method,
            "step_size": step_size,
            "time_scale": time_scale,
            "hide_fraction": hide_fraction,
            "kl_weight": kl_weight,
            "data_mean": mean,
            "data_std": std,
        }
        self.obs_dim, self.latent_dim = obs_dim, latent_dim
        self.method, self.step_size = method, step_size
        self.time_scale, self.hide_fraction, self.kl_weight = time_scale, hide_fraction, kl_weight
        self.register_buffer("data_mean", torch.tensor(mean))
        self.register_buffer("data_std", torch.tensor(std))
        # encoder input per step: masked values, mask, gap to the next step
        self.encoder = nn.GRU(2 * obs_dim + 1, hidden_dim, batch_first=True)
        self.to_posterior = nn.Linear(hidden_dim, 2 * latent_dim)
        self.dynamics = _ODEFunc(latent_dim, hidden_dim)
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, obs_dim)
        )
        self.log_noise = nn.Parameter(torch.full((obs_dim,), math.log(0.1)))

    @classmethod
    def from_data(cls, trajectories, *, window: int | None = None, **overrides) -> LatentODE:
        """A model sized and normalised for a dataset (``simsci.data.open(...)``).

        obs_dim comes from the ``x`` field, data_mean/std from the file's /stats (train
        split), time_scale from the duration of ``window`` steps of the first episode.
        """
        kwargs = vector_data_kwargs(trajectories, window, "the latent ODE")
        kwargs.update(overrides)
        return cls(**kwargs)

    @staticmethod
    def collate(batch: list[dict]) -> dict:
        """Batches for this model: windows shifted to t = 0 on one union time grid.

        Times closer than 1e-5 of the batch's longest window are merged into one grid
        point: windows cut from a regular lattice at different absolute times land on the
        same relative times only up to rounding (float32 keeps ~7 digits), and a grid of
        near-duplicates would make the solver take needless tiny steps.
        """
        from simsci.data import union_collate

        span = max(float(item["t"][-1] - item["t"][0]) for item in batch if len(item["t"]))
        return union_collate(batch, relative=True, tol=1e-5 * max(span, 1e-12))

    # -- pieces -------------------------------------------------------------------------
    def encode(self, t: torch.Tensor, xn: torch.Tensor, visible: torch.Tensor):
        """Posterior over z0 from the visible values. t (B, L), xn (B, L, D) normalised,
        visible (B, L, D) bool -> (mu, logvar), each (B, latent_dim)."""
        B, L, _ = xn.shape
        row_visible = visible.any(-1)
        # Keep only the time points that carry a visible value, reversed in time: step j of
        # the encoder sees the j-th last visible point. Sorting by (visible, time) puts the
        # visible points first in descending time without a Python loop over samples.
        order_key = torch.where(row_visible, t, torch.full_like(t, -math.inf))
        order = torch.argsort(order_key, dim=1, descending=True)
        n_vis = row_visible.sum(1)
        tr = torch.gather(t, 1, order)
        xr = torch.gather(xn, 1, order[..., None].expand_as(xn))
        vr = torch.gather(visible, 1, order[..., None].expand_as(visible))
        gap = torch.zeros_like(xn[..., 0])
        gap[:, 1:] = (tr[:, :-1] - tr[:, 1:]) / self.time_scale  # in t's precision, then cast
        gap = torch.where(torch.arange(L, device=t.device) < n_vis[:, None], gap, 0.0)
        inp = torch.cat([torch.where(vr, xr, 0.0), vr.to(xn.dtype), gap[..., None]], -1)
        packed = nn.utils.rnn.pack_padded_sequence(
            inp, n_vis.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False
        )
        _, h = self.encoder(packed)
        mu, logvar = self.to_posterior(h[-1]).chunk(2, dim=-1)
        return mu, logvar.clamp(-10.0, 5.0)

    def decode(self, z0: torch.Tensor, grid: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Solve the latent ODE from z0 at grid[0] over the union grid (U,) and decode at
        each sample's own times: index (B, L) -> normalised predictions (B, L, D)."""
        z = odeint(
            self.dynamics,
            z0,
            (grid - grid[0]) / self.time_scale,
            method=self.method,
            **({"step_size": self.step_size} if self.step_size else {}),
        )  # (B, U, latent)
        z = torch.gather(z, 1, index[..., None].expand(-1, -1, z.shape[-1]))
        return self.decoder(z)

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.data_mean) / self.data_std

    def predict(self, batch: dict, visible: torch.Tensor | None = None) -> torch.Tensor:
        """Mean prediction at every step of the batch, in data units: (B, L, D).

        ``visible`` (B, L, D) says which values the encoder may see (default: all observed).
        """
        observed = observed_mask(batch)
        visible = observed if visible is None else visible & observed
        xn = torch.nan_to_num(self.normalise(batch["x"]))
        mu, _ = self.encode(batch["t"], xn, visible)
        return self.decode(mu, batch["grid"], batch["index"]) * self.data_std + self.data_mean

    # -- the training-loop contract (simsci.train) ----------------------------------------
    def training_step(self, batch: dict) -> dict:
        observed = observed_mask(batch)
        hidden = hide_time_points(observed, self.hide_fraction if self.training else 0.0)
        visible = observed & ~hidden[..., None]
        xn = torch.nan_to_num(self.normalise(batch["x"]))
        mu, logvar = self.encode(batch["t"], xn, visible)
        z0 = mu + torch.randn_like(mu) * (0.5 * logvar).exp() if self.training else mu
        pred = self.decode(z0, batch["grid"], batch["index"])
        log_s = self.log_noise.clamp(min=math.log(1e-3))
        nll = 0.5 * ((xn - pred) / log_s.exp()) ** 2 + log_s + 0.5 * math.log(2 * math.pi)
        n_obs = observed.sum().clamp(min=1)
        nll = torch.where(observed, nll, 0.0).sum()
        kl = 0.5 * (mu**2 + logvar.exp() - 1.0 - logvar).sum()
        mse = torch.where(observed, (xn - pred) ** 2, 0.0).sum() / n_obs
        return {"loss": (nll + self.kl_weight * kl) / n_obs, "mse": mse, "kl": kl / n_obs}

    def validation_step(self, batch: dict) -> dict:
        """Interpolation on a fixed set of hidden points, and the last-value baseline."""
        gen = torch.Generator().manual_seed(1234)
        scores = interpolation_scores(self, batch, self.hide_fraction or 0.3, generator=gen)
        loss = self.training_step(batch)["loss"]
        return {"loss": loss, **scores}


def interpolation_scores(
    model: LatentODE, batch: dict, fraction: float, generator: torch.Generator | None = None
) -> dict:
    """Hide ``fraction`` of the interior observed time points, predict them from the rest.

    Returns normalised mean squared errors on the hidden values of the model
    (``interp_mse``) and of carrying the last visible value forward (``locf_mse``), and
    the count of hidden values. Normalised means divided by the data's std per channel,
    so channels of different scale weigh alike.
    """
    observed = observed_mask(batch)
    hidden = hide_time_points(observed, fraction, generator=generator)[..., None] & observed
    visible = observed & ~hidden
    with torch.no_grad():
        pred = model.predict(batch, visible)
    locf = last_observation_carried(torch.nan_to_num(batch["x"]), visible)
    std = model.data_std
    n = hidden.sum().clamp(min=1)

    def mse(p):
        return torch.where(hidden, ((p - batch["x"]) / std) ** 2, 0.0).sum() / n

    return {"interp_mse": mse(pred), "locf_mse": mse(locf), "n_hidden": hidden.sum()}
