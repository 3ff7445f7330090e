"""GFG, Geometric Flow Grounding: dynamics on the tangent bundle of a learned manifold, and
the baselines it is compared with, in one harness.

The grounded model (``variant="tangent"``). An autoencoder learns the data manifold; the
vector field is produced in its tangent space,

    z = E(x),   w = W(z) (a latent MLP, R^d -> R^d),   dx/dt = F(x) = J(z) w,
    J(z) = dDec/dz,  F computed by one JVP (simsci.models.gfg._tangent),

so the velocity is tangent to the learned manifold at Dec(E(x)) by construction. The
state is integrated in ambient space with ``simsci.odeint`` and optionally re-projected,
x <- Dec(z*), every ``reproject_every`` output steps, z* the chart point of the nearest
point of the learned manifold (E(x) refined by Gauss-Newton: ``refine_chart``).

The baselines (``variant=``), trained and rolled out by the same code:

- ``"ambient"``: a plain neural ODE, dx/dt = f(x) with an MLP f: R^D -> R^D.
- ``"latent"``: a latent neural ODE: encode once, evolve dz/dt = W(z), decode x = Dec(z).
  Trained like the SINDy autoencoder (Champion et al. 2019): reconstruction, the
  decoder-side velocity loss ||J(z) W(z) - v||^2 and the encoder-side one
  ||W(z) - dE/dx v||^2 (``latent_weight``), so its latent flow is the one the data's
  motion induces through the encoder.
- ``"known"``: the ceiling where the manifold is known (the lifted systems of
  :mod:`simsci.datasets._manifolds`): dx/dt = P_M(x) f(x) with the true tangent projector
  P_M at the nearest point of the true manifold, re-projection onto the true manifold.

Training (``training_step``): velocity matching on (x, v) pairs, the velocities either
given (the step field ``v``) or second-order finite differences along each episode
(:func:`finite_difference_velocity`), plus reconstruction for the variants with an
autoencoder:

    loss = ||Dec(E(x + eps)) - x||^2 + velocity_weight ||F(x) - v||^2 (+ latent term),

in normalised units (below). ``eps ~ N(0, denoise^2)``: a denoising autoencoder learns
Dec(E(x)) ~ the nearest point of the manifold for x near it (Alain & Bengio 2014), which
is what the re-projection of a rollout that left the manifold slightly needs; without it
E is only trained on the manifold itself.

The restoring term (``restore`` > 0, on by default for every variant but ``known``):
at perturbed states x + delta, delta ~ N(0, restore_noise^2) in normalised units, the
target velocity is v - restore * delta (restore a rate in model time units):

    loss += velocity_weight ||F(x + delta) - (v - restore delta)||^2.

Why: velocity matching fixes the field on the data only. A manifold of the data's
dimension is rarely one chart's (a circle needs a 2-D chart, so the learned manifold is
a sheet around it) and nothing says how the field behaves a little off the data, so
long rollouts drift off it however they are projected (measured on the lifted circle:
10x-horizon drift 0.35 of the data's scale without the term, 0.04 with it; the plain
neural ODE diverged without it). The term makes the data an attracting set of the
learned flow. For GFG only its tangential part can be represented (F is tangent to the
learned manifold): the rollout is pulled back to the data within the manifold.

The chart warm-up (``chart_warmup`` > 0, chart variants): over the first
``chart_warmup`` training steps the velocity and restoring terms ramp linearly from 0
to their weight; reconstruction counts from the first step. Why: early in training the
velocity term pulls the still-random chart towards whatever makes J(z) W(z) match, and
some initialisations never recover (measured on the noisy toggle switch, 2000 cells:
16 initialisations without it: training reconstruction 0.011-0.031, and the 7 above
0.02 read the motifs wrong, signed AUROC 0.2-0.73; the two of those run again with a
300-step warm-up reached 0.010 and 0.85-0.88, and with it no seed of five fails). It
lowers the failure rate, not to zero: of 15 warmed-up initialisations (5 seeds x 3),
3 still read the motifs wrong (0.18-0.70), and picking the best-reconstructing of
three avoided each (benchmarks/README.md, GFG second pass). It is off by default so
that the forecast and detection tables keep their measured configuration; the motif
benchmark uses it.

Choices, and why:

- **One scale for every channel.** States are normalised as (x - mean) / scale with a
  per-channel mean and ONE scalar scale (the RMS distance to the mean), velocities as
  v * time_scale / scale with time_scale making their RMS 1. A per-channel std would
  stretch the manifold anisotropically; one scale is a similarity, so orthogonal
  projectors, residuals and distances mean the same in data units.
- **Smooth activations** (SiLU) in every MLP: the tangent field differentiates the
  decoder, and the motif read-out differentiates it twice.
- The latent dimension defaults to the manifold's when the file says it (the lifted
  systems' base dimension, half the state of a gene network's [u, s]), else to the
  number of principal components that explain 99% of the variance (at most D - 1).
- Batches are lists of whole episodes (or windows) flattened into points by ``collate``:
  finite differences need an episode's neighbours, training needs only points.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.func import jvp

from simsci.datasets import lifted_from_config
from simsci.errors import unknown_name
from simsci.integrate import odeint
from simsci.models.gfg import _uses
from simsci.models.gfg._data import (
    CHART_VARIANTS,
    VARIANTS,
    data_statistics,
    finite_difference_velocity,
    latent_dim_hint,
)
from simsci.models.gfg._tangent import decoder_jacobian, refine_chart, tangent_velocity

__all__ = ["GFG", "VARIANTS", "finite_difference_velocity"]


def _mlp(n_in: int, n_out: int, hidden: int, depth: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = n_in
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.SiLU()]
        width = hidden
    layers.append(nn.Linear(width, n_out))
    return nn.Sequential(*layers)


class GFG(nn.Module):
    """Geometric Flow Grounding and its baselines; see the module docstring.

    Args:
        state_dim: D, the ambient dimension (the step field ``x`` is (S, D)).
        latent_dim: d < D, the learned manifold's chart dimension (variants with an
            autoencoder; ignored by ``ambient`` and ``known``).
        hidden_dim, depth: width and number of hidden layers of every MLP.
        variant: one of ``VARIANTS``.
        velocity_weight: weight of the velocity-matching term.
        latent_weight: weight of the encoder-side velocity term (``latent`` only).
        denoise: std of the denoising noise on the autoencoder's input (normalised units).
        restore, restore_noise: the restoring rate and the std of the perturbed states of
            the restoring term (module docstring; ``restore=0``: off; ``known`` has none,
            it re-projects onto the true manifold).
        x_mean: per-channel mean (length D); x_scale: the one scale of every channel;
            time_scale: model time = data time / time_scale (defaults 0, 1, 1).
        reproject_every: re-project a rollout onto the manifold every this many output
            steps (0: never). ``tangent`` and ``known`` only.
        project_steps: Gauss-Newton refinements of E(x) in a re-projection
            (:func:`~simsci.models.gfg._tangent.refine_chart`; 0: plain Dec(E(x))).
        method, rtol, atol, step_size: the rollout's solver (``simsci.odeint``); default
            fixed-step RK4, ``from_data`` sets ``step_size`` to half the data's median
            gap (model time units); ``step_size=None`` steps on the output grid. Fixed
            steps give every rollout a known cost: an adaptive solver on a barely
            trained field can take very many steps.
        known_manifold: the ``config()`` of a lifted flow (``variant="known"`` only).
        chart_warmup: training steps over which the velocity and restoring terms ramp up
            from 0 (chart variants; module docstring). The step count is a buffer, so a
            resumed run continues the ramp where it stopped.
    """

    data_fields = ("t", "x", "v")
    #: TrainConfig defaults of ``simsci train gfg``: files of a few short trajectories
    #: (one step per epoch) or of many one-step snapshots both get 2000 steps
    train_defaults = {
        "epochs": 1_000_000,
        "max_steps": 2000,
        "batch_size": 256,
        "lr": 3e-3,
        "schedule": "cosine",
        "val_every": 200,
        "checkpoint_every": 200,
    }

    def __init__(
        self,
        state_dim: int,
        latent_dim: int = 2,
        hidden_dim: int = 128,
        depth: int = 2,
        variant: str = "tangent",
        velocity_weight: float = 1.0,
        latent_weight: float = 1.0,
        denoise: float = 0.02,
        restore: float = 1.0,
        restore_noise: float = 0.05,
        x_mean: list[float] | None = None,
        x_scale: float = 1.0,
        time_scale: float = 1.0,
        reproject_every: int = 1,
        project_steps: int = 2,
        method: str = "rk4",
        rtol: float = 1e-5,
        atol: float = 1e-6,
        step_size: float | None = None,
        known_manifold: dict | None = None,
        chart_warmup: int = 0,
    ):
        super().__init__()
        if variant not in VARIANTS:
            raise unknown_name("variant", variant, VARIANTS)
        D, d = int(state_dim), int(latent_dim)
        if D < 2:
            raise ValueError(f"state_dim must be >= 2, got {state_dim}")
        if variant in CHART_VARIANTS and not 1 <= d < D:
            raise ValueError(
                f"the latent dimension must be at least 1 and smaller than the state "
                f"dimension (the manifold has lower dimension than the space it lies in), "
                f"got latent_dim={latent_dim} for state_dim={state_dim}; choose "
                f"latent_dim < {D}, or variant='ambient' for a model without a manifold"
            )
        if variant == "known" and known_manifold is None:
            raise ValueError(
                "variant='known' needs known_manifold, the config() of the true manifold "
                "(simsci.systems lifted flows write it into the file's meta as 'manifold')"
            )
        for name, value in (("x_scale", x_scale), ("time_scale", time_scale)):
            if not (math.isfinite(float(value)) and float(value) > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if (
            min(int(reproject_every), int(chart_warmup)) < 0
            or min(denoise, velocity_weight, latent_weight) < 0
        ):
            raise ValueError(
                "reproject_every, chart_warmup, denoise, velocity_weight and latent_weight "
                f"must be >= 0, got {reproject_every}, {chart_warmup}, {denoise}, "
                f"{velocity_weight}, {latent_weight}"
            )
        mean = torch.zeros(D) if x_mean is None else torch.as_tensor(x_mean, dtype=torch.float32)
        if mean.shape != (D,):
            raise ValueError(f"x_mean must have length {D}, got shape {tuple(mean.shape)}")
        self.state_dim, self.latent_dim, self.variant = D, d, variant
        self.velocity_weight, self.latent_weight = float(velocity_weight), float(latent_weight)
        self.denoise, self.reproject_every = float(denoise), int(reproject_every)
        self.project_steps = int(project_steps)
        self.restore, self.restore_noise = float(restore), float(restore_noise)
        if self.restore < 0 or self.restore_noise < 0:
            raise ValueError(
                f"restore and restore_noise must be >= 0, got {restore}, {restore_noise}"
            )
        self.method, self.rtol, self.atol, self.step_size = method, rtol, atol, step_size
        self.register_buffer("x_mean", mean)
        self.register_buffer("x_scale", torch.tensor(float(x_scale)))
        self.register_buffer("time_scale", torch.tensor(float(time_scale)))
        self.chart_warmup = int(chart_warmup)
        self.register_buffer("train_steps", torch.zeros((), dtype=torch.long))
        self.known_manifold = known_manifold
        self._flow = None
        self.init_args = {
            "state_dim": D,
            "latent_dim": d,
            "hidden_dim": int(hidden_dim),
            "depth": int(depth),
            "variant": variant,
            "velocity_weight": self.velocity_weight,
            "latent_weight": self.latent_weight,
            "denoise": self.denoise,
            "restore": self.restore,
            "restore_noise": self.restore_noise,
            "x_mean": [float(v) for v in mean],
            "x_scale": float(x_scale),
            "time_scale": float(time_scale),
            "reproject_every": self.reproject_every,
            "project_steps": self.project_steps,
            "method": method,
            "rtol": rtol,
            "atol": atol,
            "step_size": step_size,
            "known_manifold": known_manifold,
            "chart_warmup": self.chart_warmup,
        }
        if variant in CHART_VARIANTS:
            self.encoder = _mlp(D, d, hidden_dim, depth)
            self.decoder = _mlp(d, D, hidden_dim, depth)
            self.latent_field = _mlp(d, d, hidden_dim, depth)
        else:
            self.field = _mlp(D, D, hidden_dim, depth)

    # -- units ----------------------------------------------------------------------------
    def _dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def normalise(self, x: Tensor) -> Tensor:
        return (x.to(self._dtype()) - self.x_mean.to(self._dtype())) / self.x_scale

    def denormalise(self, xn: Tensor) -> Tensor:
        return xn * self.x_scale + self.x_mean.to(xn.dtype)

    def _vel_factor(self) -> Tensor:
        """normalised velocity = data velocity * factor."""
        return self.time_scale / self.x_scale

    def check_states(self, x: Tensor, who: str = "x") -> Tensor:
        if not isinstance(x, Tensor):
            raise TypeError(f"{who} must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 2 or x.shape[1] != self.state_dim:
            raise ValueError(
                f"{who} must be (B, {self.state_dim}) states, got shape {tuple(x.shape)}"
            )
        if not bool(torch.isfinite(x).all()):
            raise ValueError(
                f"{who} holds NaN or inf states ({int((~torch.isfinite(x)).any(-1).sum())} "
                "rows): drop or impute them before calling the model"
            )
        return x

    # -- the manifold -----------------------------------------------------------------------
    @property
    def flow(self):
        """The true lifted flow (``variant="known"``), rebuilt from ``known_manifold``."""
        if self._flow is None and self.known_manifold is not None:
            self._flow = lifted_from_config(self.known_manifold)
        return self._flow

    def encode(self, xn: Tensor) -> Tensor:
        return self.encoder(xn)

    def decode(self, z: Tensor) -> Tensor:
        return self.decoder(z)

    def project_states(self, x: Tensor) -> Tensor:
        """The nearest point of the (learned or known) manifold, in data units, (B, D):
        Dec(z*) with z* E(x) refined by Gauss-Newton, or the true manifold's nearest
        point; ``ambient``: x itself."""
        self.check_states(x)
        if self.variant in CHART_VARIANTS:
            return self.denormalise(self._reproject_n(self.normalise(x)))
        if self.variant == "known":
            return self.flow.project(x.to(torch.float64)).to(x.dtype)
        return x

    def tangent_jacobian(self, x: Tensor) -> Tensor:
        """The decoder Jacobian J at E(x), (B, D, d), in normalised units (chart variants)."""
        if self.variant not in CHART_VARIANTS:
            raise ValueError(f"variant {self.variant!r} has no learned chart (decoder)")
        return decoder_jacobian(self.decoder, self.encode(self.normalise(self.check_states(x))))

    # -- the vector field -------------------------------------------------------------------
    def _known_project(self, xn: Tensor, vn: Tensor) -> Tensor:
        x = self.denormalise(xn).detach().to(torch.float64)
        finite = torch.isfinite(x).all(-1)
        if not bool(finite.all()):  # an overflowed solver stage: NaN lets odeint say so
            out = torch.full_like(vn, math.nan)
            if bool(finite.any()):
                out[finite] = self._known_project(xn[finite], vn[finite])
            return out
        P = self.flow.tangent_projector(x).to(vn.dtype)  # (B, D, D); scale-invariant
        return (P @ vn[..., None])[..., 0]

    def field_n(self, xn: Tensor) -> Tensor:
        """The model's ambient vector field in normalised units: (B, D) -> (B, D)."""
        if self.variant in CHART_VARIANTS:
            z = self.encode(xn)
            return tangent_velocity(self.decoder, z, self.latent_field(z))
        f = self.field(xn)
        return self._known_project(xn, f) if self.variant == "known" else f

    def velocity(self, x: Tensor) -> Tensor:
        """dx/dt of the model at states x (B, D), in data units."""
        xn = self.normalise(self.check_states(x))
        return self.field_n(xn) / self._vel_factor()

    # -- training ---------------------------------------------------------------------------
    def collate(self, batch: list[dict]) -> dict:
        """Episodes (``t`` (L,), ``x`` (L, D), optional ``v``) -> points {"x", "v"} (N, D)."""
        xs, vs = [], []
        for item in batch:
            x = item["x"]
            if x.dim() != 2 or x.shape[1] != self.state_dim:
                raise ValueError(
                    f"episode {item.get('episode')}: x must be (L, {self.state_dim}), got "
                    f"{tuple(x.shape)}"
                )
            v = item.get("v")
            if v is None:
                v = finite_difference_velocity(item["t"], x)
            elif v.shape != x.shape:
                raise ValueError(
                    f"episode {item.get('episode')}: velocities v must have the shape of x "
                    f"{tuple(x.shape)}, got {tuple(v.shape)}"
                )
            xs.append(x)
            vs.append(v)
        x, v = torch.cat(xs), torch.cat(vs)
        bad = ~(torch.isfinite(x).all(-1) & torch.isfinite(v).all(-1))
        if bool(bad.any()):
            raise ValueError(
                f"{int(bad.sum())} of {len(x)} points hold NaN or inf states or velocities "
                "(episodes " + ", ".join(str(b.get("episode")) for b in batch) + "): GFG "
                "needs every state observed; drop those episodes or impute"
            )
        return {"x": x, "v": v}

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # checkpoints from before the warm-up have no step counter: start it at 0
        state_dict.setdefault(prefix + "train_steps", torch.zeros((), dtype=torch.long))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _ramp(self, train: bool) -> float:
        """The velocity terms' factor in the chart warm-up: min(1, step / chart_warmup)."""
        if not train or self.chart_warmup <= 0 or self.variant not in CHART_VARIANTS:
            return 1.0
        return min(1.0, int(self.train_steps) / self.chart_warmup)

    def losses(self, batch: dict, train: bool) -> dict:
        xn = self.normalise(batch["x"])
        weight = self.velocity_weight * self._ramp(train)
        vn = batch["v"].to(xn.dtype) * self._vel_factor()
        out: dict[str, Tensor] = {}
        if self.variant in CHART_VARIANTS:
            noisy = xn + self.denoise * torch.randn_like(xn) if train and self.denoise else xn
            recon = ((self.decode(self.encode(noisy)) - xn) ** 2).sum(-1).mean()
            z = self.encode(xn)
            w = self.latent_field(z)
            vel = ((tangent_velocity(self.decoder, z, w) - vn) ** 2).sum(-1).mean()
            loss = recon + weight * vel
            out["recon"] = recon
            if self.variant == "latent":
                z_dot = jvp(self.encoder, (xn,), (vn,))[1]  # dE/dx v
                lat = ((w - z_dot) ** 2).sum(-1).mean()
                loss = loss + self.latent_weight * self._ramp(train) * lat
                out["latent_vel"] = lat
        else:
            vel = ((self.field_n(xn) - vn) ** 2).sum(-1).mean()
            loss = self.velocity_weight * vel
        if train and self.restore > 0 and self.variant != "known":
            # the data's neighbourhood flows back to it: at x + delta the target is
            # v - restore * delta (normalised units; module docstring)
            delta = self.restore_noise * torch.randn_like(xn)
            target = vn - self.restore * delta
            restoring = ((self.field_n(xn + delta) - target) ** 2).sum(-1).mean()
            loss = loss + weight * restoring
            out["restoring"] = restoring
        # relative: the squared velocity error over the velocities' mean square
        out["vel_rel"] = vel / (vn**2).sum(-1).mean().clamp(min=1e-12)
        out["loss"] = loss
        return out

    def training_step(self, batch: dict) -> dict:
        out = self.losses(batch, train=True)
        self.train_steps += 1
        return out

    def validation_step(self, batch: dict) -> dict:
        return {k: v.detach() for k, v in self.losses(batch, train=False).items()}

    # -- rollouts ---------------------------------------------------------------------------
    def _solver(self) -> dict:
        kw: dict = {"method": self.method}
        if self.step_size is not None:
            kw["step_size"] = self.step_size
        if self.method in ("dopri5", "dopri8", "bosh3", "adaptive_heun", "fehlberg2"):
            kw.update(rtol=self.rtol, atol=self.atol)
        return kw

    def rollout(self, x0: Tensor, t: Tensor, reproject_every: int | None = None) -> Tensor:
        """Integrate the model from states x0 (B, D) over the times t, (T,) shared or
        (B, T) per sample (data units, t[..., 0] the time of x0). Returns (B, T, D).

        ``tangent``/``known``: every ``reproject_every`` output steps (default the
        model's) the state is re-projected onto the manifold and the solve restarts from
        it. ``latent``: z0 = E(x0) is evolved in latent space and decoded.
        """
        x0 = self.check_states(x0, "x0")
        t = torch.as_tensor(t, device=x0.device)
        if t.dim() not in (1, 2) or t.shape[-1] < 2 or (t.dim() == 2 and len(t) != len(x0)):
            raise ValueError(
                f"t must be (T,) or (B={len(x0)}, T) output times with T >= 2, got shape "
                f"{tuple(t.shape)}"
            )
        tn = ((t - t[..., :1]) / self.time_scale.to(t.dtype)).to(self._dtype())
        xn0 = self.normalise(x0)
        kw = self._solver()
        if self.variant == "latent":
            z = odeint(lambda s, z: self.latent_field(z), self.encode(xn0), tn, **kw)
            return self.denormalise(self.decode(z))
        k = self.reproject_every if reproject_every is None else int(reproject_every)
        if self.variant == "ambient" or k <= 0:
            k = tn.shape[-1]
        pieces, state, start, T = [xn0[:, None]], xn0, 0, tn.shape[-1]
        while start < T - 1:
            stop = min(start + k, T - 1)
            grid = tn[..., start : stop + 1]
            path = odeint(lambda s, y: self.field_n(y), state, grid, **kw)[:, 1:]
            state = path[:, -1]
            if self.variant != "ambient" and stop - start == k:
                state = self._reproject_n(state)
                path = torch.cat([path[:, :-1], state[:, None]], 1)
            pieces.append(path)
            start = stop
        return self.denormalise(torch.cat(pieces, 1))

    def _reproject_n(self, xn: Tensor) -> Tensor:
        if self.variant in CHART_VARIANTS:
            z = refine_chart(self.decoder, self.encode(xn), xn, self.project_steps)
            return self.decode(z)
        x = self.flow.project(self.denormalise(xn).to(torch.float64))
        return self.normalise(x.to(xn.dtype))

    # -- construction from a file -------------------------------------------------------------
    @classmethod
    def from_data(cls, traj, window: int | None = None, task: str | None = None, **overrides):
        """A model sized and normalised from a trajectory file: state_dim, x_mean, x_scale,
        time_scale (train split), the latent dimension (module docstring) and, for
        ``variant="known"``, the file's true manifold (meta "manifold")."""
        if task is not None:
            raise ValueError("gfg takes no --task at training (its tasks are evaluations)")
        stats = data_statistics(traj)
        variant = overrides.get("variant", "tangent")
        kwargs: dict = {
            "state_dim": stats["state_dim"],
            "x_mean": stats["x_mean"],
            "x_scale": stats["x_scale"],
            "time_scale": stats["time_scale"],
            "latent_dim": latent_dim_hint(traj, stats),
        }
        if stats["median_gap"] is not None:  # rk4 at half the data's typical gap
            kwargs["step_size"] = 0.5 * stats["median_gap"] / stats["time_scale"]
        if variant == "known":
            manifold = traj.meta.get("manifold")
            if manifold is None:
                raise ValueError(
                    f"{traj.path}: variant='known' needs the true manifold in the file's meta "
                    "('manifold', written by the lifted_* datasets); this file has none"
                )
            kwargs["known_manifold"] = manifold
        kwargs.update(overrides)
        return cls(**kwargs)

    # -- evaluation -------------------------------------------------------------------------------
    def evaluate_file(self, path, split: str | None = "test", device=None, task: str = "forecast"):
        """``simsci evaluate``: ``task`` forecast, motifs or detect (simsci.models.gfg._uses)."""
        return _uses.evaluate_file(self, path, split=split, device=device, task=task)
