r"""The two reference event models of the harness: a Poisson process and the truth.

- :class:`PoissonTPP` (``simsci train poisson_tpp``): one constant rate per mark,
  :math:`\lambda_k = e^{\theta_k}`, history-free; the floor every model must beat.
  Its maximum-likelihood rates are closed form (events of mark k / observed time) and
  ``from_data`` starts from them, so training only polishes.
- :class:`TrueProcessTPP`: the process that generated a file, rebuilt from its
  ``meta["process"]`` (:func:`simsci.processes.process_from_config`), with its exact
  intensity (and the per-sequence random effects in ``/episodes/params`` where the
  process has them: an oracle, so an upper bound). Nothing to train; it is the
  ceiling of the benchmarks. Its log-likelihood is the process's own exact one
  (closed-form compensators where they exist), not the harness's quadrature.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from simsci.models._events import EventModel, event_file_kwargs, event_items


class PoissonTPP(EventModel):
    """Homogeneous Poisson process per mark: λ_k = exp(log_rate_k) (model units)."""

    def __init__(self, num_marks: int, *, log_rate=None, **event_args):
        super().__init__(num_marks, **event_args)
        init = (
            torch.zeros(num_marks)
            if log_rate is None
            else torch.tensor(log_rate, dtype=torch.float32)
        )
        if init.shape != (num_marks,):
            raise ValueError(f"log_rate needs {num_marks} entries, got {tuple(init.shape)}")
        self.log_rate = nn.Parameter(init.float())
        self.init_args = {
            **self.event_args,
            "log_rate": None if log_rate is None else list(map(float, log_rate)),
        }

    @classmethod
    def from_data(cls, trajectories, *, window=None, task=None, **overrides):
        kwargs = event_file_kwargs(trajectories)
        if "log_rate" not in overrides:
            # the MLE: counts of mark k over the scored events / the observed time
            counts = np.zeros(kwargs["num_marks"])
            span = 0.0
            for item in event_items(
                trajectories, "train" if "split" in trajectories.episode_fields else None
            ):
                counts += np.bincount(item["mark"][1:], minlength=kwargs["num_marks"])
                span += float(item["t"][-1] - item["t"][0])
            rate = (counts + 0.5) / max(span / kwargs["time_scale"], 1e-12)
            overrides["log_rate"] = [float(v) for v in np.log(rate)]
        return super().from_data.__func__(cls, trajectories, window=window, task=task, **overrides)

    def history(self, batch):
        return torch.zeros(*batch["t"].shape, 1, device=self.log_rate.device)

    def intensity(self, H, t_last, tau):
        return self.log_rate.exp().expand(*tau.shape, self.num_marks)


class TrueProcessTPP(EventModel):
    """The generating process of a file (see the module docstring)."""

    trainable = False

    def __init__(self, num_marks: int, *, process: dict, **event_args):
        super().__init__(num_marks, **event_args)
        from simsci.processes import process_from_config

        self.process = process_from_config(process)
        if self.process.num_marks != self.num_marks:
            raise ValueError(
                f"the process has {self.process.num_marks} marks, the data {self.num_marks}"
            )
        self.init_args = {**self.event_args, "process": process}
        self._batch = None
        self._events = None

    @classmethod
    def from_data(cls, trajectories, *, window=None, task=None, **overrides):
        process = trajectories.meta.get("process")
        if process is None:
            raise ValueError(
                f"{trajectories.path}: the file does not record its generating process "
                "(meta['process']); the true process is known only for simulated data"
            )
        return super().from_data.__func__(
            cls, trajectories, window=window, task=task, process=process, **overrides
        )

    def history(self, batch):
        # the "state" after event j is the batch row and j: the process reads the history
        self._batch = batch
        self._events = None  # the process's view of the batch, built on first use
        B, L = batch["t"].shape
        rows = torch.arange(B, dtype=torch.float64)[:, None].expand(B, L)
        cols = torch.arange(L, dtype=torch.float64)[None].expand(B, L)
        return torch.stack([rows, cols], -1)

    def _sequences(self):
        """The batch's sequences as one :class:`~simsci.processes.SequenceBatch`: the
        process's per-sequence state is built once per batch, and every intensity query
        of the harness (likelihood, prediction grid, thinning) is one numpy pass."""
        if self._events is None:
            batch = self._batch
            if batch is None:
                raise RuntimeError(
                    "TrueProcessTPP.intensity reads the sequences of the last history(batch) "
                    "call: call history(batch) first"
                )
            params = batch["params"].cpu().numpy() if "params" in batch else None
            self._events = self.process.batch(
                batch["t"].cpu().numpy(),
                batch["mark"].cpu().numpy(),
                batch["length"].cpu().numpy(),
                params,
            )
        return self._events

    def intensity(self, H, t_last, tau):
        seqs = self._sequences()
        Hn = H.detach().cpu().numpy()
        rows = Hn[..., 0].astype(np.int64)
        # padded positions repeat the last event: the history ends at the last one
        ends = np.minimum(Hn[..., 1].astype(np.int64), seqs.lengths[rows] - 1)
        tl = t_last.detach().cpu().numpy().astype(np.float64)[..., None]
        q = tl + tau.detach().double().cpu().numpy() * self.time_scale
        # nudge queries at the last event just past it: the history includes it
        q = np.maximum(q, np.nextafter(tl, np.inf))
        G = q.shape[-1]
        lam = seqs.intensity(q.ravel(), np.repeat(rows.ravel(), G), np.repeat(ends.ravel() + 1, G))
        out = lam.reshape(*q.shape, self.num_marks) * self.time_scale
        return torch.as_tensor(out, dtype=torch.float32, device=tau.device)

    def extend_state(self, H_last, t_last, tau, mark, group):
        """(row, j + 1) after one more event at ``t_last + tau`` (model units): the event
        is written into the batch's sequences after event j (:meth:`SequenceBatch.append`,
        overwriting an earlier candidate of a row that was not accepted), so thinning
        grows the sequences in place instead of rebuilding the batch per event."""
        seqs = self._sequences()
        H = H_last.detach().cpu().numpy().copy()
        rows = H[:, 0].astype(np.int64)
        ends = np.minimum(H[:, 1].astype(np.int64), seqs.lengths[rows] - 1)
        # the time exactly as the harness computes it (t_abs)
        t_new = (t_last + tau.double() * self.time_scale).detach().cpu().numpy()
        ok = t_new > seqs.times[rows, ends]  # a zero gap in float64 adds no event
        seqs.append(rows[ok], t_new[ok], mark.detach().cpu().numpy()[ok], at=ends[ok] + 1)
        H[ok, 1] = ends[ok] + 1
        return torch.as_tensor(H, dtype=H_last.dtype, device=H_last.device)

    def log_likelihood_terms(self, batch):
        """The exact log-likelihood per sequence (the process's own: closed-form
        compensators where they exist) replaces the harness's quadrature: each
        sequence's total sits on its last scored event, in data units (float32, as the
        harness's terms), the compensator terms are zero."""
        H = self.history(batch)
        scored = batch["valid"].clone()
        scored[:, 0] = False
        t = batch["t"].cpu().numpy()
        n = batch["length"].cpu().numpy().astype(np.int64)
        rows = np.arange(len(n))
        end = batch["t_end"].cpu().numpy() if "t_end" in batch else t[rows, n - 1]
        ll = self._sequences().log_likelihood(t_start=t[:, 0], t_end=end)
        exact = np.zeros(t.shape)
        some = n >= 2  # sequences of one event score nothing
        exact[rows[some], n[some] - 1] = ll[some]
        event = torch.as_tensor(exact, dtype=torch.float32, device=batch["t"].device)
        return {
            "event": event,
            "compensator": torch.zeros_like(event),
            "scored": scored,
            "H": H,
        }
