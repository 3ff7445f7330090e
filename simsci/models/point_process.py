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
        B, L = batch["t"].shape
        rows = torch.arange(B, dtype=torch.float64)[:, None].expand(B, L)
        cols = torch.arange(L, dtype=torch.float64)[None].expand(B, L)
        return torch.stack([rows, cols], -1)

    def _params(self, b):
        if self._batch is not None and "params" in self._batch:
            return self._batch["params"][b].cpu().numpy()
        return None

    def intensity(self, H, t_last, tau):
        batch = self._batch
        out = np.zeros((*tau.shape, self.num_marks))
        t = batch["t"].cpu().numpy()
        m = batch["mark"].cpu().numpy()
        Hn = H.cpu().numpy()
        tl = t_last.cpu().numpy()
        tq = tau.double().cpu().numpy() * self.time_scale
        for i in range(H.shape[0]):
            for j in range(H.shape[1]):
                b, e = int(Hn[i, j, 0]), int(Hn[i, j, 1])
                # padded positions repeat the last event: the history ends at the last one
                e = min(e, int(batch["length"][b]) - 1)
                q = tl[i, j] + tq[i, j]
                # nudge queries at the last event just past it: the history includes it
                q = np.maximum(q, np.nextafter(tl[i, j], np.inf))
                out[i, j] = self.process.intensity(
                    q, t[b, : e + 1], m[b, : e + 1], params=self._params(b)
                )
        return torch.as_tensor(out * self.time_scale, dtype=torch.float32, device=tau.device)

    def extend_state(self, H_last, t_last, tau, mark, group):
        return None

    def log_likelihood_terms(self, batch):
        terms = super().log_likelihood_terms(batch)
        # the exact log-likelihood per sequence replaces the quadrature's
        t, m = batch["t"].cpu().numpy(), batch["mark"].cpu().numpy()
        exact = torch.zeros_like(terms["event"])
        comp = torch.zeros_like(terms["compensator"])
        for b in range(t.shape[0]):
            n = int(batch["length"][b])
            if n < 2:
                continue
            end = float(batch["t_end"][b]) if "t_end" in batch else t[b, n - 1]
            ll = self.process.log_likelihood(
                t[b, :n], m[b, :n], t_start=t[b, 0], t_end=end, params=self._params(b)
            )
            # the sequence's total goes on its last scored event, in data units
            exact[b, n - 1] = ll
        terms["event"] = exact
        terms["compensator"] = comp
        return terms
