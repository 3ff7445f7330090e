r"""Predictions of a series model at the times a user asks, from the observations given.

:meth:`SeriesModel.predict <simsci.models._series.SeriesModel.predict>` is the public
entry (``model.predict(context, times)``); ``simsci predict`` calls it for a whole file.
The model's batch prediction (``predict_steps``) reads the observed rows of an episode
and predicts every row: a query at a time of the context is answered from the context
alone (the model's reconstruction there, the observation included, as the Kalman
smoother's posterior at an observed row is); a query at any other time from the context
with that one time added as an unobserved row (NaN, mask False).

Choices, and why:

- **Absolute times in the data's units.** Queries may lie before, between or after the
  context's observations: the merged episode is shifted to start at 0 as the training
  batches are (``SeriesModel.collate``), so the model sees the same relative times.
- **Data units out, and the input's type back.** Means and variances are in the data's
  units (the models store the training data's mean and std); a NumPy context gives NumPy
  arrays, a tensor context tensors on its device, each in the context's float dtype.
- **One unobserved row per query, not all of them in one episode.** SDEVI's and
  GRU-Δt's encoders read every row, observed or not, so a query grid put into the
  episode changes the predictions at the other queries: a trained SDEVI on linear-SDE
  data moved by up to 2.1 data stds at two times when 101 more were asked. One row per
  query makes each prediction independent of what else is asked (a grid for a plot
  and a single time agree) and matches training, where hidden rows are a fraction of
  the episode's own times (held-out MSE 0.061 against 0.070 with all queries in one
  episode, same model). The cost is one model row per query instead of one in all:
  ``O(Q L)`` instead of ``O(Q + L)`` (the queries are batched, ``batch_size`` inputs a
  call). latent_sde's mean is over sampled paths whose draws follow the batch, so its
  predictions vary with the batch within their Monte Carlo error.
- **The variance is that of a new observation** at the time (latent uncertainty plus the
  observation noise), so a 95% interval ``mean ± 1.96 sqrt(var)`` should hold 95% of new
  observations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

__all__ = ["predict_at", "as_times"]


def as_times(values, who: str) -> np.ndarray:
    """A 1-D float64 array of finite times (any order, repeats allowed)."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    times = np.asarray(values, dtype=np.float64)
    if times.ndim == 0:
        times = times[None]
    if times.ndim != 1:
        raise ValueError(f"{who} must be a 1-D sequence of times, got shape {times.shape}")
    if not np.isfinite(times).all():
        raise ValueError(
            f"{who} holds a non-finite time (NaN or inf): {times[~np.isfinite(times)][:3]}"
        )
    return times


def _as_numpy(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _episode(model, context: Mapping, i: int) -> dict:
    """``t`` (L,) float64, ``x`` (L, D) float64 with NaN where not observed: one context
    episode, checked."""
    where = f"context episode {i}"
    for key in ("t", "x"):
        if key not in context:
            raise ValueError(
                f"{where} needs '{key}' (times (L,), values (L, D)); has {sorted(context)}"
            )
    t = as_times(context["t"], f"{where}: t")
    x = _as_numpy(context["x"]).astype(np.float64)
    if x.ndim == 1 and model.obs_dim == 1:
        x = x[:, None]
    if x.shape != (len(t), model.obs_dim):
        raise ValueError(
            f"{where}: x must have shape (len(t), {model.obs_dim}) = ({len(t)}, "
            f"{model.obs_dim}) for this model, got {x.shape}"
        )
    if "mask" in context and context["mask"] is not None:
        mask = _as_numpy(context["mask"]).astype(bool)
        if mask.shape != x.shape:
            raise ValueError(f"{where}: mask must have the shape of x {x.shape}, got {mask.shape}")
        x = np.where(mask, x, np.nan)
    if np.isinf(x).any():
        raise ValueError(f"{where}: x holds ±inf; mark missing values NaN (or mask them)")
    if np.any(np.diff(t) <= 0):
        raise ValueError(f"{where}: t must increase strictly (duplicate or decreasing times found)")
    if not np.isfinite(x).any():
        raise ValueError(f"{where} has no observed value: nothing to condition on")
    return {"t": t, "x": x}


def _queries_as_items(episode: dict, query: np.ndarray) -> tuple[list[dict], list[np.ndarray]]:
    """The model inputs that answer ``query`` for one context episode: the context itself
    (for the queries at its own times) and, for each other distinct time, the context
    with that one time added as an unobserved row. Returns the inputs and, per query, its
    ``(input, row)`` pair as a (Q, 2) array."""
    t = episode["t"]
    pos = np.searchsorted(t, query)
    at_context = (pos < len(t)) & (t[np.minimum(pos, len(t) - 1)] == query)
    items = [episode]
    where = np.zeros((len(query), 2), dtype=np.int64)
    where[at_context, 1] = pos[at_context]
    others, inverse = np.unique(query[~at_context], return_inverse=True)
    d = episode["x"].shape[1]
    for q in others:
        k = int(np.searchsorted(t, q))
        items.append(
            {
                "t": np.insert(t, k, q),
                "x": np.insert(episode["x"], k, np.full(d, np.nan), axis=0),
            }
        )
    off = np.flatnonzero(~at_context)
    where[off, 0] = 1 + inverse
    where[off, 1] = np.searchsorted(t, others)[inverse]
    return items, where


def predict_at(model, context, times=None, *, batch_size: int = 64):
    """See :meth:`SeriesModel.predict`."""
    single = isinstance(context, Mapping)
    contexts = [context] if single else list(context)
    if not contexts:
        raise ValueError("context holds no episode")
    for i, c in enumerate(contexts):
        if not isinstance(c, Mapping):
            raise TypeError(
                f"context must be one episode (a dict with 't' and 'x') or a list of them; "
                f"item {i} is a {type(c).__name__}"
            )
    episodes = [_episode(model, c, i) for i, c in enumerate(contexts)]
    queries = _query_lists(times, episodes, single)
    plans = [_queries_as_items(e, q) for e, q in zip(episodes, queries)]
    items = [item for plan_items, _ in plans for item in plan_items]
    means, variances = _predict_items(model, items, batch_size)
    results, first = [], 0
    for i, (plan_items, where) in enumerate(plans):
        pairs = [(first + int(a), int(b)) for a, b in where]
        empty = means[first][:0]  # (0, D): no time asked
        mean = torch.stack([means[r][c] for r, c in pairs]) if pairs else empty
        var = torch.stack([variances[r][c] for r, c in pairs]) if pairs else empty
        results.append(_output(contexts[i], queries[i], mean, var))
        first += len(plan_items)
    return results[0] if single else results


def _predict_items(model, items: list[dict], batch_size: int):
    """The model's mean and variance at every row of each input: two lists of (L_k, D)."""
    param = next(model.parameters())
    means, variances = [], []
    with torch.no_grad():
        for start in range(0, len(items), batch_size):
            chunk = items[start : start + batch_size]
            batch = model.collate(
                [
                    {"t": torch.from_numpy(it["t"]), "x": torch.from_numpy(it["x"]).to(param.dtype)}
                    for it in chunk
                ]
            )
            batch = {k: torch.as_tensor(v).to(param.device) for k, v in batch.items()}
            mean, var = model.predict_steps(batch, variance=True)
            for row, it in enumerate(chunk):
                means.append(mean[row, : len(it["t"])])
                variances.append(var[row, : len(it["t"])])
    return means, variances


def _query_lists(times, episodes: list, single: bool) -> list[np.ndarray]:
    if times is None:  # the context's own times: its reconstruction
        return [e["t"] for e in episodes]
    is_list_of_lists = (
        not single
        and isinstance(times, Sequence)
        and not isinstance(times, str)
        and len(times) > 0
        and all(np.ndim(q) == 1 for q in times)
    )
    if is_list_of_lists:
        if len(times) != len(episodes):
            raise ValueError(
                f"times holds {len(times)} lists for {len(episodes)} context episodes; give "
                "one list per episode, or one list for all"
            )
        return [as_times(q, f"times[{i}]") for i, q in enumerate(times)]
    query = as_times(times, "times")
    return [query] * len(episodes)


def _output(context: Mapping, query: np.ndarray, mean: torch.Tensor, var: torch.Tensor) -> dict:
    """``{"t", "mean", "var"}`` in the context's type: tensors on the device and in the
    float dtype of its ``x``, else NumPy arrays."""
    x = context["x"]
    if isinstance(x, torch.Tensor):
        dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        return {
            "t": torch.as_tensor(query, device=x.device),
            "mean": mean.to(x.device, dtype),
            "var": var.to(x.device, dtype),
        }
    x = np.asarray(x)
    dtype = x.dtype if x.dtype.kind == "f" else np.float64
    return {
        "t": query.copy(),
        "mean": mean.cpu().numpy().astype(dtype),
        "var": var.cpu().numpy().astype(dtype),
    }
