r"""The baselines DynaDiff is compared with, in the same harness (same experts, data,
contexts and metrics). Each returns flat expert weights ``(P,)`` for a new environment
from its context ``(M, K, *S)`` (raw units):

- ``pooled``: the zoo's pooled model (one model of every training environment);
- ``nearest``: the zoo expert with the smallest rollout error on the context (the
  environment parameters of a new environment are unknown; the context is what there
  is);
- ``average``: the mean of the zoo's weights (meaningful because the experts share the
  pooled start, see :mod:`._zoo`);
- ``finetune``: the pooled model fine-tuned on the context for K Adam steps;
- ``coda``: CoDA-style low-rank context adaptation (Kirchmeyer et al. 2022):
  :math:`\theta_e = \theta_0 + W \xi_e` with a shared :math:`\theta_0`, a shared basis
  :math:`W \in R^{P \times r}` and one context vector :math:`\xi_e \in R^r` per
  environment, trained jointly on the zoo's environments (:class:`CoDA`, a model of the
  training contract, started at the pooled weights); a new environment fits only a new
  :math:`\xi` (r numbers) on its context.

Context losses are rollout MSEs over every window of ``window + 1`` frames of the
context episodes, in the zoo's normalised units.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import vmap

from simsci.models.dynadiff._experts import (
    ExpertNet,
    ExpertSpec,
    flatten_params,
    functional_template,
    unflatten_params,
)
from simsci.models.dynadiff._zoo import functional_rollout, rollout_mse

__all__ = [
    "BASELINES",
    "CoDA",
    "context_windows",
    "context_loss",
    "pooled",
    "nearest",
    "average",
    "finetune",
]

BASELINES = ("pooled", "nearest", "average", "finetune", "coda")


def context_windows(context: torch.Tensor, window: int) -> torch.Tensor:
    """``(M, K, *S)`` -> every window of ``min(window, K - 1) + 1`` frames,
    ``(M * (K - w), w + 1, *S)``."""
    M, K = context.shape[:2]
    w = max(1, min(int(window), K - 1))
    wins = [context[:, s : s + w + 1] for s in range(K - w)]
    return torch.stack(wins, dim=1).reshape(M * (K - w), w + 1, *context.shape[2:])


def context_loss(net: ExpertNet, params: dict, windows_z: torch.Tensor) -> torch.Tensor:
    pred = functional_rollout(net, params, windows_z[:, 0], windows_z.shape[1] - 1)
    return ((pred[:, 1:] - windows_z[:, 1:]) ** 2).mean()


def _norm(zoo, x):
    return (x - zoo.mean.to(x)) / zoo.std.to(x)


def pooled(zoo, context=None) -> torch.Tensor:
    return flatten_params(zoo.pooled, zoo.spec)[0].float()


def average(zoo, context=None) -> torch.Tensor:
    return flatten_params(zoo.weights, zoo.spec).float().mean(0)


@torch.no_grad()
def nearest(zoo, context: torch.Tensor) -> torch.Tensor:
    flat = flatten_params(zoo.weights, zoo.spec).float()
    errs = rollout_mse(zoo.spec, unflatten_params(flat, zoo.spec), _norm(zoo, context.float()))
    return flat[int(torch.argmin(errs))]


def finetune(
    zoo, context: torch.Tensor, *, steps: int = 100, lr: float = 1e-3, window: int = 4,
    start: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """The pooled model (or ``start``) after ``steps`` Adam steps on the context."""
    net = functional_template(zoo.spec)
    wins = context_windows(_norm(zoo, context.float()), window)
    flat = (pooled(zoo) if start is None else start).detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([flat], lr=lr)
    for _ in range(int(steps)):
        opt.zero_grad()
        loss = context_loss(net, unflatten_params(flat, zoo.spec), wins)
        if not torch.isfinite(loss):
            break
        loss.backward()
        opt.step()
    return flat.detach()


class CoDA(nn.Module):
    r"""Low-rank context adaptation :math:`\theta_e = \theta_0 + W \xi_e` (module docstring).

    Batches like :class:`._zoo.ExpertZoo`: raw windows ``(b, E, window + 1, *S)``.
    Loss: the summed rollout MSE of the E environments + ``xi_penalty * ||xi||^2`` (keeps
    the context vectors O(1) so a new environment's search starts in the right range).
    """

    def __init__(
        self,
        spec: dict,
        num_envs: int,
        mean: list,
        std: list,
        *,
        rank: int = 2,
        xi_penalty: float = 1e-3,
        seed: int = 0,
    ):
        super().__init__()
        self.spec = ExpertSpec.from_dict(spec)
        self.init_args = dict(
            spec=self.spec.to_dict(), num_envs=int(num_envs), mean=[float(v) for v in mean],
            std=[float(v) for v in std], rank=int(rank), xi_penalty=float(xi_penalty),
            seed=int(seed),
        )  # fmt: skip
        g = torch.Generator().manual_seed(int(seed))
        P = self.spec.num_params
        self.theta0 = nn.Parameter(torch.zeros(P))
        self.basis = nn.Parameter(torch.randn(P, int(rank), generator=g) * 1e-3)
        self.xi = nn.Parameter(torch.randn(int(num_envs), int(rank), generator=g) * 0.1)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32))

    def weights(self, xi: torch.Tensor) -> torch.Tensor:
        """``(..., r)`` -> flat weights ``(..., P)``."""
        return self.theta0 + xi @ self.basis.T

    def training_step(self, batch):
        z = ((batch.float() - self.mean) / self.std).transpose(0, 1)  # (E, b, L, *S)
        params = unflatten_params(self.weights(self.xi), self.spec)
        net = functional_template(self.spec)
        mse = vmap(lambda p, w: context_loss(net, p, w))(params, z)
        pen = self.init_args["xi_penalty"] * (self.xi**2).sum()
        return {"loss": mse.sum() + pen, "mse": mse.mean().detach()}

    def validation_step(self, batch):
        with torch.no_grad():
            return {"loss": self.training_step(batch)["loss"]}

    def adapt(self, context: torch.Tensor, *, steps: int = 100, lr: float = 1e-2, window: int = 4):
        """Fit a new context vector on ``context`` ``(M, K, *S)``: flat weights ``(P,)``."""
        wins = context_windows((context.float().to(self.mean) - self.mean) / self.std, window)
        xi = torch.zeros(self.basis.shape[1], device=self.theta0.device, requires_grad=True)
        opt = torch.optim.Adam([xi], lr=lr)
        theta0, basis = self.theta0.detach(), self.basis.detach()
        net = functional_template(self.spec)
        for _ in range(int(steps)):
            opt.zero_grad()
            loss = context_loss(net, unflatten_params(theta0 + basis @ xi, self.spec), wins)
            if not torch.isfinite(loss):
                break
            loss.backward()
            opt.step()
        return (theta0 + basis @ xi.detach()).detach()


def train_coda(zoo, data, out_dir, *, steps=1500, rank=2, batch_size=None, lr=3e-3,
               window=None, device="auto", seed=0, progress=False) -> CoDA:  # fmt: skip
    """Train :class:`CoDA` on the zoo's training environments (``data``: EnvData of the
    zoo's environments in the zoo's order), started at the pooled weights."""
    from simsci.models.dynadiff._zoo import WindowData, _train

    train = data.subset("train")
    window = int(zoo.record.get("window", 4)) if window is None else int(window)
    if batch_size is None:
        batch_size = 16 if zoo.spec.kind == "mlp" else 4
    model = CoDA(zoo.spec.to_dict(), zoo.num_experts, zoo.mean.tolist(), zoo.std.tolist(),
                 rank=rank, seed=seed)  # fmt: skip
    with torch.no_grad():
        model.theta0.copy_(pooled(zoo))
    _train(
        model, WindowData(train.episodes, window), None, steps=steps, batch_size=batch_size,
        lr=lr, out_dir=out_dir, device=device, progress=progress, seed=seed,
    )  # fmt: skip
    return model.eval()
