"""GRU-Δt: the recurrent baseline for irregular time series.

A GRU reads every time point of an episode; its input at step i is the masked values
(normalised, 0 where not visible), the mask, and the time since the previous step
Δt_i = (t_i - t_{i-1}) / time_scale (0 at the first step). An output head maps the hidden
state at step i to a Gaussian over x_i: a mean and a variance per channel
(``softplus + 1e-4``). Training minimises the Gaussian negative log-likelihood of every
observed value (the harness's contract: the inputs carry only the visible values, the
likelihood scores all observed ones), per observed value.

Choices, and why:

- **Interpolation, classification, regression: bidirectional.** A hidden point is best
  predicted from both sides; its own input is masked, so the model cannot copy it. The
  input also carries the gap to the *next* step, which the backward direction needs
  (it reaches step i coming from step i+1).
- **Extrapolation: forward (causal) only.** The inputs after the cut are masked anyway,
  so a backward direction could not read any future value, but it would read the future
  time stamps and their count: the forecast at a time would change with how far the
  requested horizon reaches, and capacity would go into a direction that carries no
  observation. A causal GRU forecasts from the past alone, as a forecaster must; after
  the cut it runs on the gaps only. ``bidirectional=`` overrides the choice.
- **Features**: the final hidden state of each direction (the forward one at the
  episode's last step, the backward one at its first), concatenated.
- Every step of the episode is a step of the GRU (hidden targets included, with their
  mask 0): the gaps then are the sampling pattern itself, and the output at a target
  comes from a state that has just been advanced over exactly the gap to it.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from simsci.models._series import SeriesModel

__all__ = ["GRUDelta"]


class GRUDelta(SeriesModel):
    """GRU-Δt with a Gaussian output head (see the module docstring).

    Args:
        obs_dim: D, channels per observation.
        hidden_dim: GRU width (per direction); num_layers: stacked GRU layers.
        bidirectional: None chooses by task (causal for extrapolation, else both ways).
        task, time_scale, hide_fraction, extrapolate_at, num_classes, label_dim,
            label_mean, label_std, label_weight, data_mean, data_std: the harness's
            (:class:`~simsci.models._series.SeriesModel`).
    """

    def __init__(
        self,
        obs_dim: int,
        hidden_dim: int = 64,
        num_layers: int = 1,
        bidirectional: bool | None = None,
        **series,
    ):
        super().__init__(obs_dim, **series)
        if hidden_dim < 1 or num_layers < 1:
            raise ValueError(
                f"hidden_dim and num_layers must be >= 1, got {hidden_dim}, {num_layers}"
            )
        if bidirectional is not None and not isinstance(bidirectional, bool):
            raise TypeError(f"bidirectional must be True, False or None, got {bidirectional!r}")
        both = self.task != "extrapolation" if bidirectional is None else bidirectional
        self.bidirectional, self.hidden_dim = both, int(hidden_dim)
        self.init_args = {
            **self.series_args,
            "hidden_dim": self.hidden_dim,
            "num_layers": int(num_layers),
            "bidirectional": bidirectional,
        }
        D, dirs = self.obs_dim, 2 if both else 1
        self.gru = nn.GRU(
            2 * D + dirs, hidden_dim, num_layers=num_layers, batch_first=True, bidirectional=both
        )
        self.out = nn.Sequential(
            nn.Linear(dirs * hidden_dim, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, 2 * D)
        )
        self.feature_dim = dirs * self.hidden_dim
        self._build_head(self.feature_dim, hidden_dim)

    # ----------------------------------------------------------------- pieces
    def run(self, batch: dict, visible: torch.Tensor):
        """The GRU over every valid step: per-step outputs (B, L, dirs*H) and the final
        states (B, dirs*H)."""
        dtype = self.out[0].weight.dtype
        x, valid = batch["x"], batch["valid"]
        B, L, _ = x.shape
        xn = torch.nan_to_num(self.normalise(x.to(dtype)))
        vis = (visible & valid[..., None]).to(dtype)
        t = batch["t"]
        gaps = torch.diff(t, dim=1) / self.time_scale  # in t's precision, then cast
        gaps = torch.where(valid[:, 1:], gaps, 0.0).clamp_min(0).to(dtype)
        zero = gaps.new_zeros(B, 1)
        parts = [xn * vis, vis, torch.cat([zero, gaps], 1)[..., None]]
        if self.bidirectional:
            parts.append(torch.cat([gaps, zero], 1)[..., None])
        lengths = valid.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(
            torch.cat(parts, -1), lengths, batch_first=True, enforce_sorted=False
        )
        out, h_n = self.gru(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=L)
        dirs = 2 if self.bidirectional else 1
        final = h_n.reshape(-1, dirs, B, self.hidden_dim)[-1]  # the last layer's
        return out, final.transpose(0, 1).reshape(B, dirs * self.hidden_dim)

    def gaussian(self, batch: dict, visible: torch.Tensor, final: bool = False):
        """Mean and variance of every step in normalised units, each (B, L, D); with
        ``final`` also the final states (the head's input) from the same pass."""
        out, last = self.run(batch, visible)
        mean, raw = self.out(out).chunk(2, dim=-1)
        var = nn.functional.softplus(raw) + 1e-4
        return (mean, var, last) if final else (mean, var)

    def features(self, batch: dict, visible: torch.Tensor) -> torch.Tensor:
        """The final hidden state(s), (B, feature_dim)."""
        return self.run(batch, self.visible_steps(batch, visible))[1]

    def predict_steps(
        self, batch: dict, visible: torch.Tensor | None = None, variance: bool = False
    ):
        """The Gaussian head's mean (and variance) at every step, data units (B, L, D)."""
        mean, var = self.gaussian(batch, self.visible_steps(batch, visible))
        std = self.data_std.to(mean.dtype)
        mean = mean * std + self.data_mean.to(mean.dtype)
        return (mean, var * std**2) if variance else mean

    # ----------------------------------------------------------------- the harness's contract
    def objective(self, batch: dict, visible: torch.Tensor, observed: torch.Tensor) -> dict:
        mean, var, last = self.gaussian(batch, visible, final=True)
        xn = torch.nan_to_num(self.normalise(batch["x"].to(mean.dtype)))
        n_obs = observed.sum().clamp(min=1)
        err2 = (xn - mean) ** 2
        nll = 0.5 * (err2 / var + var.log() + math.log(2 * math.pi))
        out = {
            "loss": torch.where(observed, nll, 0.0).sum() / n_obs,
            "mse": torch.where(observed, err2, 0.0).sum() / n_obs,
        }
        if self.head is not None:
            out["features"] = last  # the head's input: no second GRU pass
        return out
