"""A latent neural ODE for irregularly sampled time series (the baseline of the tour).

Model (Chen et al. 2018, "Neural Ordinary Differential Equations", §5; Rubanova et al.
2019, "Latent ODEs for Irregularly-Sampled Time Series"):

    q(z0 | x_visible) = N(mu, diag sigma^2)   encoder: run backwards in time
    dz/dt = f_theta(z)                        latent dynamics, solved by simsci.odeint
    x(t) ~ N(g_phi(z(t)), diag s^2)           decoder, a learned noise scale s per channel

and is trained on the evidence lower bound per observed value,

    loss = ( sum_obs -log N(x | g(z(t)), s^2) + kl_weight * KL(q(z0) || N(0, I)) ) / n_obs.

It is a :class:`~simsci.models._series.SeriesModel`: the tasks (interpolation,
extrapolation, classification, regression), their masks and scores come from the harness.

Choices, and why:

- Two encoders (``encoder=``), both run from the last visible observation to the first:
  ``"gru"`` (the default, and what the tour trains): a GRU whose inputs are the masked
  values, the mask and the time gap to the next observation; cheap on CPU and enough for
  short windows. ``"odernn"``: the ODE-RNN of Rubanova et al.: between observations the
  hidden state evolves by a neural ODE dh/dt = f(h) over the gap, then a GRU cell update
  at each observation (inputs: masked values and mask; time enters only through the
  ODE), and a last evolution from the earliest visible time to t = 0, where z0 lives.
  Every sample has its own gaps, so the ODE is solved in the rescaled time s in [0, 1],
  dh/ds = dt_b f(h), which puts all samples of the batch on one common grid; a fixed-step
  RK4 with ``encoder_steps`` steps, written out by hand: the gaps are short (in units of
  ``time_scale``), an adaptive solver would make every sample pay for the stiffest one,
  and the encoder makes one solve per observation, where the validation and per-sample
  window machinery of ``simsci.odeint`` would cost more than the four stages themselves.
  The encoder's time runs backwards; integrating forward in s with +dt_b is the same
  family of flows (the sign is absorbed into the learned f).
- Windows are shifted to start at t = 0 (``union_collate(relative=True)``), so every
  sample's z0 lives at the same time and one batched ODE solve on the batch's union time
  grid serves all samples; the outputs are gathered back with the collate's index.
  Extrapolation uses the same decoder: it solves from z0 at t = 0 over the whole union
  grid; only the encoder is restricted to the visible points (before the cut).
- The model stores the data's mean and std (``data_mean``, ``data_std``) and works in
  normalised units inside, so a checkpoint is self-contained: inputs and predictions are
  in the data's own units.
- Predictions are decoded from the posterior mean of z0 (deterministic). The variance
  (``predict_steps(..., variance=True)``) is the observation noise s^2 plus the spread of
  ``num_samples`` decodes of z0 ~ q(z0) around that prediction (a fixed seed and the
  same standard-normal draws for every episode, so an episode always gets the same
  variance, whatever else is in its batch).
- ``features`` (the classification/regression summary) is the posterior mean of z0.

Batch layout (the output of ``simsci.data.union_collate(batch, relative=True)``):
``x`` (B, L, D) with NaN or anything where unobserved, optional ``mask`` (B, L, D) bool,
``valid`` (B, L) bool, ``grid`` (U,), ``index`` (B, L).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from simsci.integrate import odeint
from simsci.models._series import (
    SeriesModel,
    hide_time_points,
    last_observation_carried,
    observed_mask,
    series_data_kwargs,
)

__all__ = [
    "LatentODE",
    "ENCODERS",
    "observed_mask",
    "hide_time_points",
    "last_observation_carried",
    "interpolation_scores",
    "vector_data_kwargs",
]

#: encoders of :class:`LatentODE`
ENCODERS = ("gru", "odernn")


def vector_data_kwargs(trajectories, window: int | None, who: str) -> dict:
    """Constructor sizes of a model of vector series from a file: ``obs_dim`` from the
    ``x`` field, ``data_mean``/``data_std`` from its /stats (train split), ``time_scale``
    from the duration of ``window`` steps of the first episode (for models that take no
    ``task``; :func:`~simsci.models._series.series_data_kwargs` adds it)."""
    kwargs = series_data_kwargs(trajectories, window, who, "interpolation")
    del kwargs["task"]
    return kwargs


def reversed_visible(t: torch.Tensor, xn: torch.Tensor, visible: torch.Tensor, time_scale):
    """The time points that carry a visible value, latest first, for encoders that run
    backwards in time.

    t (B, L), xn (B, L, D) normalised, visible (B, L, D) bool. Returns ``tr`` (B, L) the
    times, ``xr`` (B, L, D) the values (0 where not visible), ``vr`` (B, L, D) the masks,
    ``gap`` (B, L) ``(tr[j-1] - tr[j]) / time_scale`` (0 at j = 0 and past ``n_vis``) in
    xn's dtype, ``n_vis`` (B,) the number of visible time points and ``order`` (B, L) the
    original step of each (``tr = t.gather(1, order)``). Sorting by
    (visible, time) puts the visible points first in descending time without a Python
    loop over samples.
    """
    L = xn.shape[1]
    row_visible = visible.any(-1)
    order_key = torch.where(row_visible, t, torch.full_like(t, -math.inf))
    order = torch.argsort(order_key, dim=1, descending=True)
    n_vis = row_visible.sum(1)
    tr = torch.gather(t, 1, order)
    xr = torch.gather(xn, 1, order[..., None].expand_as(xn))
    vr = torch.gather(visible, 1, order[..., None].expand_as(visible))
    gap = torch.zeros_like(xn[..., 0])
    gap[:, 1:] = (tr[:, :-1] - tr[:, 1:]) / time_scale  # in t's precision, then cast
    gap = torch.where(torch.arange(L, device=t.device) < n_vis[:, None], gap, 0.0)
    return tr, torch.where(vr, xr, 0.0), vr, gap, n_vis, order


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


class ODERNN(nn.Module):
    """ODE-RNN (Rubanova et al. 2019) over observations given latest first.

    Between observations h evolves by dh/dt = f(h) over the gap (fixed-step RK4 in the
    rescaled time s in [0, 1], dh/ds = gap_b f(h): ``steps`` steps whatever the gap), then
    a GRU cell reads the observation (masked values and mask).
    """

    def __init__(self, obs_dim: int, hidden_dim: int, steps: int = 4):
        super().__init__()
        self.cell = nn.GRUCell(2 * obs_dim, hidden_dim)
        self.field = nn.Sequential(
            nn.Linear(hidden_dim, hidden_dim),
            nn.Tanh(),
            nn.Linear(hidden_dim, hidden_dim),
            nn.Tanh(),
            nn.Linear(hidden_dim, hidden_dim),
        )
        self.hidden_dim, self.steps = hidden_dim, int(steps)

    def evolve(self, h: torch.Tensor, gap: torch.Tensor) -> torch.Tensor:
        """h (B, H) after time ``gap`` (B,) of dh/dt = f(h); gap 0 leaves h unchanged."""
        dt, s = gap[:, None], 1.0 / self.steps
        for _ in range(self.steps):
            k1 = dt * self.field(h)
            k2 = dt * self.field(h + 0.5 * s * k1)
            k3 = dt * self.field(h + 0.5 * s * k2)
            k4 = dt * self.field(h + s * k3)
            h = h + (s / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        return h

    def forward(self, xr, vr, gap, n_vis, t_last):
        """xr, vr (B, L, D), gap (B, L), n_vis (B,) as from :func:`reversed_visible`;
        t_last (B,): the earliest visible time (scaled), evolved over last to reach t = 0.
        Returns h at t = 0, (B, H)."""
        B = xr.shape[0]
        h = xr.new_zeros(B, self.hidden_dim)
        inp = torch.cat([xr, vr.to(xr.dtype)], -1)
        for j in range(int(n_vis.max())):
            active = (j < n_vis)[:, None]
            h_j = self.evolve(h, gap[:, j]) if j > 0 else h
            h = torch.where(active, self.cell(inp[:, j], h_j), h)
        if bool((t_last > 0).any()):
            h = self.evolve(h, t_last)
        return h


class LatentODE(SeriesModel):
    """Latent ODE with a backwards GRU or ODE-RNN encoder; see the module docstring.

    Args:
        obs_dim: D, channels per observation.
        latent_dim, hidden_dim: sizes of z and of the MLPs / GRU.
        method, step_size: the solver of the latent ODE (``simsci.integrate.ODE_METHODS``);
            fixed-step methods with ``step_size=None`` step on the union output grid.
        time_scale: model time = data time / time_scale (keeps f's outputs O(1)).
        hide_fraction: fraction of interior observed time points hidden from the encoder
            in interpolation training.
        kl_weight: weight of the KL term.
        data_mean, data_std: per-channel normalisation (length D), default 0 and 1.
        encoder: ``"gru"`` or ``"odernn"`` (see the module docstring).
        encoder_steps: RK4 steps per gap of the ODE-RNN encoder.
        num_samples: z0 samples behind the predictive variance.
        task, extrapolate_at, num_classes, label_dim, label_mean, label_std,
            label_weight: the harness's (:class:`~simsci.models._series.SeriesModel`).
    """

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
        *,
        encoder: str = "gru",
        encoder_steps: int = 4,
        num_samples: int = 8,
        **series,
    ):
        # time_scale, hide_fraction, data_mean, data_std keep their old positions
        super().__init__(
            obs_dim,
            time_scale=time_scale,
            hide_fraction=hide_fraction,
            data_mean=data_mean,
            data_std=data_std,
            **series,
        )
        if latent_dim < 1 or hidden_dim < 1:
            raise ValueError(
                f"obs_dim, latent_dim and hidden_dim must be >= 1, got {obs_dim}, "
                f"{latent_dim}, {hidden_dim}"
            )
        if encoder not in ENCODERS:
            from simsci.errors import unknown_name

            raise unknown_name("encoder", encoder, ENCODERS)
        if encoder_steps < 1 or num_samples < 1:
            raise ValueError(
                f"encoder_steps and num_samples must be >= 1, got {encoder_steps}, {num_samples}"
            )
        D = self.obs_dim
        self.latent_dim, self.encoder_type = int(latent_dim), encoder
        self.method, self.step_size = method, step_size
        self.kl_weight, self.num_samples = float(kl_weight), int(num_samples)
        self.init_args = {
            **self.series_args,
            "latent_dim": self.latent_dim,
            "hidden_dim": int(hidden_dim),
            "method": method,
            "step_size": step_size,
            "kl_weight": self.kl_weight,
            "encoder": encoder,
            "encoder_steps": int(encoder_steps),
            "num_samples": self.num_samples,
        }
        if encoder == "gru":
            # encoder input per step: masked values, mask, gap to the next step
            self.encoder = nn.GRU(2 * D + 1, hidden_dim, batch_first=True)
        else:
            self.encoder = ODERNN(D, hidden_dim, encoder_steps)
        self.to_posterior = nn.Linear(hidden_dim, 2 * latent_dim)
        self.dynamics = _ODEFunc(latent_dim, hidden_dim)
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, D)
        )
        self.log_noise = nn.Parameter(torch.full((D,), math.log(0.1)))
        self.feature_dim = self.latent_dim
        self._build_head(self.feature_dim, hidden_dim)

    # -- pieces -------------------------------------------------------------------------
    def encode(self, t: torch.Tensor, xn: torch.Tensor, visible: torch.Tensor):
        """Posterior over z0 from the visible values. t (B, L), xn (B, L, D) normalised,
        visible (B, L, D) bool -> (mu, logvar), each (B, latent_dim)."""
        tr, xr, vr, gap, n_vis, _ = reversed_visible(t, xn, visible, self.time_scale)
        if self.encoder_type == "odernn":
            last = torch.gather(tr, 1, (n_vis - 1).clamp(min=0)[:, None])[:, 0]
            h = self.encoder(xr, vr, gap, n_vis, (last / self.time_scale).to(xn.dtype))
        else:
            inp = torch.cat([xr, vr.to(xn.dtype), gap[..., None]], -1)
            packed = nn.utils.rnn.pack_padded_sequence(
                inp, n_vis.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False
            )
            h = self.encoder(packed)[1][-1]
        mu, logvar = self.to_posterior(h).chunk(2, dim=-1)
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

    def _prepare(self, batch: dict, visible: torch.Tensor | None):
        observed = observed_mask(batch)
        self.check_batch(batch, observed)
        visible = observed if visible is None else visible & observed
        x = batch["x"].to(self.to_posterior.weight.dtype)  # the parameters' precision
        return observed, visible, torch.nan_to_num(self.normalise(x))

    def features(self, batch: dict, visible: torch.Tensor) -> torch.Tensor:
        """The posterior mean of z0, (B, latent_dim)."""
        _, visible, xn = self._prepare(batch, visible)
        return self.encode(batch["t"], xn, visible)[0]

    def predict_steps(
        self, batch: dict, visible: torch.Tensor | None = None, variance: bool = False
    ):
        """Mean prediction at every step of the batch, in data units: (B, L, D); with
        ``variance`` also its variance (see the module docstring).

        ``visible`` (B, L, D) says which values the encoder may see (default: all observed).
        """
        _, visible, xn = self._prepare(batch, visible)
        mu, logvar = self.encode(batch["t"], xn, visible)
        std, mean = self.data_std.to(xn.dtype), self.data_mean.to(xn.dtype)
        if not variance:
            return self.decode(mu, batch["grid"], batch["index"]) * std + mean
        K, B = self.num_samples, mu.shape[0]
        gen = torch.Generator().manual_seed(0)
        # the same K draws for every row: an episode's variance does not depend on which
        # other episodes share its batch
        eps = torch.randn((K, 1, mu.shape[1]), generator=gen, dtype=mu.dtype).to(mu.device)
        eps = eps.expand(K, *mu.shape)
        z0 = torch.cat([mu, (mu + eps * (0.5 * logvar).exp()).reshape(K * B, -1)])
        index = batch["index"].repeat(K + 1, 1)
        out = self.decode(z0, batch["grid"], index).reshape(K + 1, B, *xn.shape[1:])
        spread = ((out[1:] - out[0]) ** 2).mean(0)
        var = spread + (2 * self.log_noise.clamp(min=math.log(1e-3))).exp()
        return out[0] * std + mean, var * std**2

    # -- the harness's contract ------------------------------------------------------------
    def objective(self, batch: dict, visible: torch.Tensor, observed: torch.Tensor) -> dict:
        xn = torch.nan_to_num(self.normalise(batch["x"].to(self.to_posterior.weight.dtype)))
        mu, logvar = self.encode(batch["t"], xn, visible)
        z0 = mu + torch.randn_like(mu) * (0.5 * logvar).exp() if self.training else mu
        pred = self.decode(z0, batch["grid"], batch["index"])
        log_s = self.log_noise.clamp(min=math.log(1e-3))
        nll = 0.5 * ((xn - pred) / log_s.exp()) ** 2 + log_s + 0.5 * math.log(2 * math.pi)
        n_obs = observed.sum().clamp(min=1)
        nll = torch.where(observed, nll, 0.0).sum()
        kl = 0.5 * (mu**2 + logvar.exp() - 1.0 - logvar).sum()
        mse = torch.where(observed, (xn - pred) ** 2, 0.0).sum() / n_obs
        out = {"loss": (nll + self.kl_weight * kl) / n_obs, "mse": mse, "kl": kl / n_obs}
        if self.head is not None:
            out["features"] = mu  # the head's input: saves a second encoder pass
        return out


def interpolation_scores(
    model, batch: dict, fraction: float, generator: torch.Generator | None = None
) -> dict:
    """Hide ``fraction`` of the interior observed time points, predict them from the rest.

    For any model with ``predict_steps(batch, visible)`` and ``data_std`` (the harness's
    :meth:`~simsci.models._series.SeriesModel.scores` does this and more for series
    models). Returns normalised mean squared errors on the hidden values of the model
    (``interp_mse``) and of carrying the last visible value forward (``locf_mse``), and
    the count of hidden values. Normalised means divided by the data's std per channel,
    so channels of different scale weigh alike.
    """
    observed = observed_mask(batch)
    hidden = hide_time_points(observed, fraction, generator=generator)[..., None] & observed
    visible = observed & ~hidden
    with torch.no_grad():
        pred = model.predict_steps(batch, visible)
    locf = last_observation_carried(torch.nan_to_num(batch["x"]), visible)
    std = model.data_std
    n = hidden.sum().clamp(min=1)

    def mse(p):
        return torch.where(hidden, ((p - batch["x"]) / std) ** 2, 0.0).sum() / n

    return {"interp_mse": mse(pred), "locf_mse": mse(locf), "n_hidden": hidden.sum()}
