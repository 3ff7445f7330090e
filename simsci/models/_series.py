r"""The tasks on irregular time series that SDEVI and its baselines share.

One harness so every model of vector series (:class:`~simsci.models.SDEVI` in its three
variants, :class:`~simsci.models.LatentODE`, the GRU-Δt and latent-SDE baselines) is
trained and scored the same way:

- ``interpolation``: a random ``hide_fraction`` of the interior observed time points is
  hidden from the encoder; the model predicts them from the rest.
- ``extrapolation``: the encoder sees the observations up to a cut at
  ``t_first + extrapolate_at * (t_last - t_first)`` of each episode's observed span
  (half by default) and predicts the observed values after it.
- ``classification`` / ``regression``: one class id / real vector per episode (the
  file's ``/episodes/label``), predicted by a head on the model's episode summary
  (:meth:`SeriesModel.features`) from every observed value.

Choices, and why:

- **The encoder never sees a target; the likelihood scores every observed value.** For
  the variational models this is still a lower bound on :math:`\log p(y_{\text{all}})`
  (any :math:`q` is allowed, here one amortised on a subset), and it trains exactly the
  prediction that is evaluated.
- **Scores in normalised units**: squared errors divided by each channel's std, so
  channels of different scale weigh alike; the trivial baselines come with every score:
  ``locf_mse`` (the last visible value carried forward, the first one carried back) and
  ``mean_mse`` (each episode's mean of its visible values per channel) and
  ``linear_mse`` (linear interpolation in time between a channel's nearest visible
  values, flat beyond them: on dense smooth data a strong baseline, e.g. it beat every
  model of issue 26's first pass on the climate set).
- **Predictive uncertainty**: models that give a variance report the Gaussian negative
  log-likelihood of the targets (``nll``, per value, normalised units) and the fraction
  inside the central 95% interval (``coverage95``).
- **Regression targets are standardised** with the training split's label mean and std
  (stored in the model), so the head's loss is O(1); ``label_mse`` is reported in the
  label's units and ``label_nmse`` standardised.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

__all__ = [
    "TASKS",
    "SeriesModel",
    "observed_mask",
    "hide_time_points",
    "task_masks",
    "last_observation_carried",
    "episode_mean_carried",
    "series_data_kwargs",
]

#: the tasks of :class:`SeriesModel`
TASKS = ("interpolation", "extrapolation", "classification", "regression")


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


def task_masks(
    batch: dict,
    task: str,
    *,
    hide_fraction: float = 0.3,
    extrapolate_at: float = 0.5,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(observed, visible, target)``, each (B, L, D) bool, for ``task``.

    ``visible``: what the encoder may see; ``target``: the values a prediction is scored
    on (empty for the per-episode tasks). Interpolation hides ``hide_fraction`` of the
    interior observed time points (a ``generator`` fixes the choice); extrapolation cuts
    each episode at ``extrapolate_at`` of its observed time span.
    """
    observed = observed_mask(batch)
    if task == "interpolation":
        hidden = hide_time_points(observed, hide_fraction, generator)[..., None] & observed
        return observed, observed & ~hidden, hidden
    if task == "extrapolation":
        t = batch["t"]
        row_obs = observed.any(-1)
        first = torch.where(row_obs, t, torch.full_like(t, math.inf)).amin(1)
        last = torch.where(row_obs, t, torch.full_like(t, -math.inf)).amax(1)
        cut = first + extrapolate_at * (last - first)
        seen = (t <= cut[:, None])[..., None]
        return observed, observed & seen, observed & ~seen
    return observed, observed, torch.zeros_like(observed)


def _visible_neighbours(visible: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each entry of ``visible`` (B, L, D), the index of its channel's last visible
    entry at or before it (-1 if none) and first at or after it (L if none)."""
    L = visible.shape[1]
    idx = torch.arange(L, device=visible.device)[None, :, None].expand_as(visible)
    prev = torch.where(visible, idx, -1).cummax(dim=1).values
    nxt = torch.where(visible, idx, L).flip(1).cummin(dim=1).values.flip(1)
    return prev, nxt


def last_observation_carried(x: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """Last-value baseline: each entry takes the last visible value of its channel.

    x, visible: (B, L, D). Entries before a channel's first visible value take that first
    value (carried backward). Channels never visible give NaN.
    """
    L = x.shape[1]
    last, first = _visible_neighbours(visible)
    src = torch.where(last >= 0, last, first).clamp(max=L - 1)
    out = torch.gather(torch.where(visible, x, torch.zeros_like(x)), 1, src)
    return torch.where(visible.any(1, keepdim=True), out, torch.full_like(out, math.nan))


def linear_interpolation(x: torch.Tensor, visible: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Linear-interpolation baseline: each entry interpolates linearly in time between
    the nearest visible values of its channel before and after it; before the first
    (after the last) visible value it takes that value. x, visible: (B, L, D); t: (B, L)
    increasing per row. Channels never visible give NaN."""
    L = x.shape[1]
    prev, nxt = _visible_neighbours(visible)
    # a missing neighbour is replaced by the other one: flat beyond the ends
    lo = torch.where(prev >= 0, prev, nxt).clamp(max=L - 1)
    hi = torch.where(nxt < L, nxt, prev).clamp(min=0)
    xv = torch.where(visible, x, torch.zeros_like(x))
    x_lo, x_hi = torch.gather(xv, 1, lo), torch.gather(xv, 1, hi)
    tt = t.to(x.dtype)[..., None].expand_as(x)
    t_lo, t_hi = torch.gather(tt, 1, lo), torch.gather(tt, 1, hi)
    gap = t_hi - t_lo
    w = torch.where(gap > 0, (tt - t_lo) / torch.where(gap > 0, gap, 1.0), 0.0)
    out = x_lo + w * (x_hi - x_lo)
    return torch.where(visible.any(1, keepdim=True), out, torch.full_like(out, math.nan))


def episode_mean_carried(x: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """Mean baseline: each entry takes its episode's mean of the visible values of its
    channel, (B, L, D); NaN for channels never visible."""
    vis = visible.to(x.dtype)
    total = torch.where(visible, x, torch.zeros_like(x)).sum(1, keepdim=True)
    count = vis.sum(1, keepdim=True)
    mean = total / count.clamp(min=1)
    mean = torch.where(count > 0, mean, torch.full_like(mean, math.nan))
    return mean.expand_as(x)


def series_data_kwargs(trajectories, window: int | None, who: str, task: str) -> dict:
    """Constructor sizes of a series model from a file: ``obs_dim``, ``data_mean`` and
    ``data_std`` (the file's /stats, train split), ``time_scale`` (the duration of
    ``window`` steps of the first episode), and for the per-episode tasks the label's
    ``num_classes`` or ``label_dim``/``label_mean``/``label_std`` (train split)."""
    if task not in TASKS:
        from simsci.errors import unknown_name

        raise unknown_name("task", task, TASKS)
    if "x" not in trajectories.step_fields:
        raise ValueError(f"{trajectories.path}: {who} needs a step field 'x'")
    shape = tuple(trajectories.step_fields["x"].shape)
    if len(shape) != 1:
        raise ValueError(
            f"{trajectories.path}: {who} models vectors; x has per-step shape {shape} "
            "(flatten images into vectors when writing the file)"
        )
    kwargs: dict = {"obs_dim": shape[0], "task": task}
    stats = trajectories.stats.get("x")
    if stats is not None:
        kwargs["data_mean"] = [float(v) for v in np.nan_to_num(stats["mean"]).ravel()]
        kwargs["data_std"] = [
            float(v) if np.isfinite(v) and v > 1e-8 else 1.0 for v in stats["std"].ravel()
        ]
    t = trajectories[0]["t"]
    span = len(t) if window is None else min(window, len(t))
    if span > 1:
        kwargs["time_scale"] = float(t[span - 1] - t[0])
    if task in ("classification", "regression"):
        if "label" not in trajectories.episode_fields:
            raise ValueError(
                f"{trajectories.path}: task {task!r} needs an episode field 'label' (one "
                "class id or target per episode); this file has none"
            )
        label = np.asarray(trajectories.column("label"))
        if "split" in trajectories.episode_fields:
            train = trajectories.column("split") == 0
            label = label[train] if train.any() else label
        if task == "classification":
            if label.dtype.kind not in "iub" or label.ndim != 1:
                raise ValueError(
                    f"{trajectories.path}: classification needs integer class ids of shape "
                    f"(N,), got {label.dtype} of shape {label.shape}"
                )
            kwargs["num_classes"] = int(np.asarray(trajectories.column("label")).max()) + 1
        else:
            label = label.astype(np.float64).reshape(len(label), -1)
            kwargs["label_dim"] = int(label.shape[1])
            kwargs["label_mean"] = [float(v) for v in label.mean(0)]
            kwargs["label_std"] = [float(v) if v > 1e-8 else 1.0 for v in label.std(0)]
    return kwargs


class SeriesModel(nn.Module):
    """Base of the models of irregular vector series: tasks, heads, scores, batches.

    A subclass calls ``super().__init__(...)`` with the shared arguments, then builds its
    networks, and implements

    - ``objective(batch, visible, observed) -> dict``: ``"loss"`` (a scalar per observed
      value, e.g. the negative ELBO) and any parts to log; the encoder sees ``visible``,
      the likelihood scores ``observed``;
    - ``predict_steps(batch, visible=None, variance=False)``: the mean (and variance) at every
      step in data units, (B, L, D);
    - ``features(batch, visible) -> (B, F)`` for the per-episode heads (built by
      ``_build_head(F, hidden)``); ``objective`` may return it as ``"features"`` when it
      has computed it anyway, which saves a second encoder pass.

    Shared arguments: ``obs_dim`` D; ``task`` (one of :data:`TASKS`); ``time_scale``
    (model time = data time / time_scale); ``hide_fraction`` (interpolation);
    ``extrapolate_at`` (extrapolation); ``num_classes`` (classification); ``label_dim``,
    ``label_mean``, ``label_std`` (regression); ``label_weight`` (weight of the head's
    loss, per episode, against the per-value likelihood); ``data_mean``, ``data_std``.
    """

    #: fields a batch of this model reads (``TrajectoryDataset(fields=...)``); the ones a
    #: file lacks are left out by ``simsci train``
    data_fields = ("t", "x", "mask", "label")

    def __init__(
        self,
        obs_dim: int,
        *,
        task: str = "interpolation",
        time_scale: float = 1.0,
        hide_fraction: float = 0.3,
        extrapolate_at: float = 0.5,
        num_classes: int | None = None,
        label_dim: int | None = None,
        label_mean=None,
        label_std=None,
        label_weight: float = 1.0,
        data_mean=None,
        data_std=None,
    ):
        super().__init__()
        if task not in TASKS:
            from simsci.errors import unknown_name

            raise unknown_name("task", task, TASKS)
        if isinstance(obs_dim, bool) or int(obs_dim) != obs_dim or obs_dim < 1:
            raise ValueError(f"obs_dim must be an integer >= 1, got {obs_dim!r}")
        obs_dim = int(obs_dim)
        if not (math.isfinite(time_scale) and time_scale > 0):
            raise ValueError(f"time_scale must be finite and > 0, got {time_scale!r}")
        if not 0.0 <= hide_fraction < 1.0:
            raise ValueError(f"hide_fraction must lie in [0, 1), got {hide_fraction}")
        if not 0.0 < extrapolate_at < 1.0:
            raise ValueError(f"extrapolate_at must lie in (0, 1), got {extrapolate_at}")
        mean = [0.0] * obs_dim if data_mean is None else [float(v) for v in data_mean]
        std = [1.0] * obs_dim if data_std is None else [float(v) for v in data_std]
        if len(mean) != obs_dim or len(std) != obs_dim or min(std) <= 0:
            raise ValueError(
                f"data_mean and data_std need {obs_dim} entries (std > 0), got "
                f"{len(mean)} and {len(std)}"
            )
        if task == "classification" and (num_classes is None or num_classes < 2):
            raise ValueError(f"task 'classification' needs num_classes >= 2, got {num_classes}")
        if task == "regression":
            if label_dim is None or label_dim < 1:
                raise ValueError(f"task 'regression' needs label_dim >= 1, got {label_dim}")
            label_mean = [0.0] * label_dim if label_mean is None else list(label_mean)
            label_std = [1.0] * label_dim if label_std is None else list(label_std)
            if len(label_mean) != label_dim or len(label_std) != label_dim:
                raise ValueError(f"label_mean and label_std need {label_dim} entries")
        self.obs_dim, self.task = obs_dim, task
        self.time_scale, self.hide_fraction = float(time_scale), float(hide_fraction)
        self.extrapolate_at, self.label_weight = float(extrapolate_at), float(label_weight)
        self.num_classes, self.label_dim = num_classes, label_dim
        self.register_buffer("data_mean", torch.tensor(mean))
        self.register_buffer("data_std", torch.tensor(std))
        # not in the state dict: init_args rebuild them, and checkpoints of models from
        # before the harness (LatentODE) load without them
        self.register_buffer("label_mean", torch.tensor(label_mean or []), persistent=False)
        self.register_buffer("label_std", torch.tensor(label_std or []), persistent=False)
        self.series_args = {
            "obs_dim": obs_dim,
            "task": task,
            "time_scale": self.time_scale,
            "hide_fraction": self.hide_fraction,
            "extrapolate_at": self.extrapolate_at,
            "num_classes": num_classes,
            "label_dim": label_dim,
            "label_mean": label_mean,
            "label_std": label_std,
            "label_weight": self.label_weight,
            "data_mean": mean,
            "data_std": std,
        }

    def _build_head(self, feature_dim: int, hidden_dim: int) -> None:
        """The per-episode head (classification logits or standardised regression)."""
        out = {"classification": self.num_classes, "regression": self.label_dim}.get(self.task)
        self.head = None
        if out is not None:
            self.head = nn.Sequential(
                nn.Linear(feature_dim, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, out)
            )

    @classmethod
    def from_data(cls, trajectories, *, window: int | None = None, task=None, **overrides):
        """A model sized and normalised for a dataset (``simsci.data.open(...)``)."""
        kwargs = series_data_kwargs(trajectories, window, cls.__name__, task or "interpolation")
        return cls(**{**kwargs, **overrides})

    @staticmethod
    def collate(batch: list[dict]) -> dict:
        """Batches: windows shifted to t = 0, padded, on one union time grid.

        Times closer than 1e-5 of the batch's longest window are merged into one grid
        point: windows cut from a regular lattice at different absolute times land on the
        same relative times only up to rounding, and a grid of near-duplicates would make
        an ODE solver take needless tiny steps.
        """
        from simsci.data import union_collate

        span = max(float(item["t"][-1] - item["t"][0]) for item in batch if len(item["t"]))
        return union_collate(batch, relative=True, tol=1e-5 * max(span, 1e-12))

    # ----------------------------------------------------------------- helpers
    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        """Data units -> model units (NaN where x is NaN)."""
        return (x - self.data_mean.to(x.dtype)) / self.data_std.to(x.dtype)

    def visible_steps(self, batch: dict, visible: torch.Tensor | None) -> torch.Tensor:
        """The entries the model may read: observed (and checked by :meth:`check_batch`)
        and, when ``visible`` is given, also in it; (B, L, D) bool."""
        observed = observed_mask(batch)
        self.check_batch(batch, observed)
        return observed if visible is None else visible & observed

    def check_batch(self, batch: dict, observed: torch.Tensor) -> None:
        """The rules every batch must meet: the model's channel count, at least one
        observed value per episode, strictly increasing times."""
        x = batch["x"]
        if x.ndim != 3 or x.shape[-1] != self.obs_dim:
            raise ValueError(
                f"x must be (batch, steps, {self.obs_dim}) for this model (obs_dim="
                f"{self.obs_dim}), got shape {tuple(x.shape)}; the data has a different "
                "channel count than the model was built for"
            )
        if bool((observed.sum((1, 2)) == 0).any()):
            bad = torch.nonzero(observed.sum((1, 2)) == 0).flatten()[:5].tolist()
            raise ValueError(
                f"episodes {bad} of the batch have no observed value (all masked or NaN); "
                "drop them first"
            )
        valid = batch["valid"]
        both = valid[:, 1:] & valid[:, :-1]
        if bool((torch.diff(batch["t"], dim=1)[both] <= 0).any()):
            raise ValueError(
                "time stamps must increase strictly within an episode (duplicate or "
                "decreasing times found); merge duplicate observations first"
            )

    def masks(self, batch: dict, generator=None, *, hide: bool = True, fraction=None):
        """``(observed, visible, target)`` for the model's task (see :func:`task_masks`);
        interpolation hides ``fraction`` (default ``hide_fraction``) of the interior
        points, nothing with ``hide=False``."""
        fraction = self.hide_fraction if fraction is None else fraction
        return task_masks(
            batch,
            self.task,
            hide_fraction=fraction if hide else 0.0,
            extrapolate_at=self.extrapolate_at,
            generator=generator,
        )

    def predict(self, context, times=None, *, batch_size: int = 64, **deprecated):
        """Predictions at ``times`` from the observations in ``context``, data units.

        ``context``: one episode, a mapping with ``t`` (L,) strictly increasing, ``x``
        (L, D) (NaN = not observed) and optionally ``mask`` (L, D) (e.g. an item of
        ``simsci.data.open(path)``), or a list of them. ``times``: None (the context's
        own times), a 1-D sequence (absolute, in the data's time units, the same for
        every episode; before, between or after the observations), or one sequence per
        episode. Returns ``{"t": (Q,), "mean": (Q, D), "var": (Q, D)}`` per episode (a
        list for a list): the predictive mean and variance of a new observation, NumPy
        for NumPy input, tensors on the input's device for tensor input (see
        :mod:`simsci.models._predict`).

        The batch-level prediction every step of a collated batch is
        :meth:`predict_steps`; ``predict(batch, visible, variance=...)`` still calls it,
        with a DeprecationWarning.
        """
        if isinstance(context, Mapping) and "valid" in context:  # a collated batch
            return self._predict_batch_deprecated(context, times, **deprecated)
        if deprecated:
            raise TypeError(f"predict() got unexpected arguments {sorted(deprecated)}")
        from simsci.models._predict import predict_at

        return predict_at(self, context, times, batch_size=batch_size)

    def predict_steps(self, batch: dict, visible=None, variance: bool = False):
        """The mean (and variance) at every step of a collated batch, data units
        (B, L, D): each series model implements it."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement predict_steps(batch, visible, variance) "
            "(the batch-level prediction; it was called predict before predict(context, "
            "times) took that name)"
        )

    def _predict_batch_deprecated(self, batch, visible=None, variance=False):
        import warnings

        warnings.warn(
            "predict(batch, visible, variance) on a collated batch is now "
            "predict_steps(batch, visible, variance); predict(context, times) predicts at "
            "given times from an episode's observations",
            DeprecationWarning,
            stacklevel=3,
        )
        return self.predict_steps(batch, visible, variance)

    def predict_label(self, batch: dict, visible: torch.Tensor | None = None) -> torch.Tensor:
        """Classification logits (B, C) or regression targets in label units (B, K)."""
        if self.head is None:
            raise ValueError(
                f"predict_label needs a model trained for classification or regression; "
                f"this one has task={self.task!r}"
            )
        observed = observed_mask(batch)
        visible = observed if visible is None else visible & observed
        out = self.head(self.features(batch, visible))
        if self.task == "regression":
            return out * self.label_std.to(out.dtype) + self.label_mean.to(out.dtype)
        return out

    def _label_loss(self, batch: dict, visible: torch.Tensor, features=None) -> dict:
        if "label" not in batch:
            raise ValueError(
                f"task {self.task!r} needs the episode field 'label' in the batch "
                "(TrajectoryDataset(fields=(..., 'label')))"
            )
        if features is None:
            features = self.features(batch, visible)
        out = self.head(features)
        label = batch["label"]
        if self.task == "classification":
            target = label.long().reshape(-1)
            if bool(((target < 0) | (target >= self.num_classes)).any()):
                raise ValueError(
                    f"class ids must lie in 0..{self.num_classes - 1}, got "
                    f"{target.min().item()}..{target.max().item()}"
                )
            return {"label_loss": nn.functional.cross_entropy(out, target)}
        target = label.to(out.dtype).reshape(out.shape)
        z = (target - self.label_mean.to(out.dtype)) / self.label_std.to(out.dtype)
        return {"label_loss": ((out - z) ** 2).mean()}

    # ----------------------------------------------------------------- training contract
    #: whether training hides values from the encoder (the interpolation task's
    #: ``hide_fraction``); a model whose objective already trains prediction says False
    hides_in_training = True

    def training_step(self, batch: dict) -> dict:
        hide = self.training and self.hides_in_training
        observed, visible, _ = self.masks(batch, hide=hide)
        return self._loss(batch, observed, visible)

    def _loss(self, batch: dict, observed: torch.Tensor, visible: torch.Tensor) -> dict:
        self.check_batch(batch, observed)
        out = self.objective(batch, visible, observed)
        features = out.pop("features", None)  # an objective may hand its summary over
        if self.head is not None:
            out.update(self._label_loss(batch, visible, features))
            out["loss"] = out["loss"] + self.label_weight * out["label_loss"]
        return out

    def validation_step(self, batch: dict) -> dict:
        """The task's scores on fixed hidden points (see :meth:`scores`) and the loss
        with the same points hidden (so ``val_loss`` measures the task too)."""
        gen = torch.Generator().manual_seed(1234)
        observed, visible, _ = self.masks(batch, gen, fraction=self._score_fraction())
        return {"loss": self._loss(batch, observed, visible)["loss"], **self.scores(batch)}

    def _score_fraction(self) -> float:
        # a model trained with nothing hidden is still scored on hidden points
        return self.hide_fraction or 0.3

    def scores(self, batch: dict, seed: int = 1234) -> dict:
        """Metrics of the model's task on ``batch`` (the same hidden points for a seed)."""
        gen = torch.Generator().manual_seed(seed)
        observed, visible, target = self.masks(batch, gen, fraction=self._score_fraction())
        self.check_batch(batch, observed)
        with torch.no_grad():
            if self.head is not None:
                pred = self.predict_label(batch, visible)
                label = batch["label"]
                if self.task == "classification":
                    target_ids = label.long().reshape(-1)
                    return {
                        "accuracy": (pred.argmax(-1) == target_ids).double().mean(),
                        "cross_entropy": nn.functional.cross_entropy(pred, target_ids),
                    }
                err = (pred - label.to(pred.dtype).reshape(pred.shape)) ** 2
                return {
                    "label_mse": err.mean(),
                    "label_nmse": (err / self.label_std.to(err.dtype) ** 2).mean(),
                }
            mean, var = self.predict_steps(batch, visible, variance=True)
        x = batch["x"]
        std = self.data_std.to(x.dtype)
        n = target.sum().clamp(min=1)
        prefix = "interp" if self.task == "interpolation" else "extrap"

        def mse(p):
            return torch.where(target, ((p - x) / std) ** 2, 0.0).sum() / n

        xz = torch.nan_to_num(x)
        scores = {
            f"{prefix}_mse": mse(mean),
            "locf_mse": mse(last_observation_carried(xz, visible)),
            "mean_mse": mse(episode_mean_carried(xz, visible)),
            "linear_mse": mse(linear_interpolation(xz, visible, batch["t"])),
            "n_target": target.sum(),
        }
        if var is not None:
            v = (var / std**2).clamp_min(1e-12)
            z2 = ((mean - x) / std) ** 2 / v
            nll = 0.5 * (z2 + v.log() + math.log(2 * math.pi))
            scores["nll"] = torch.where(target, nll, 0.0).sum() / n
            scores["coverage95"] = torch.where(target, (z2 < 1.959964**2).double(), 0.0).sum() / n
        return scores
