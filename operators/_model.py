r"""``OperatorModel``: a neural operator (plain or ∂-NO) trained on any field file.

Two tasks, chosen from the data:

``rollout`` (time-dependent fields: Burgers, KdV, Navier-Stokes, PDEControl rollouts)
    the one-step map of the file's time grid (every ``time_stride``-th frame),
    :math:`(u_{k-h+1}, \dots, u_k) \mapsto u_{k+1}` with ``in_frames = h`` history frames
    stacked as channels. The network predicts the normalised *increment*,
    :math:`z_{k+1} = z_k + \mathcal G_\theta(z_{k-h+1..k})` (a near-identity map is what
    a short step is; predicting it from scratch wastes capacity).

∂-NO defaults (``features="dno"``): Riesz and directional features with two learnable
orders each, started at :math:`m/2` and :math:`3m/4` inside :math:`[0, m]` (``m`` the
system's ``pde_order``; 2 when unknown), standardised by the RMS they have under the
training inputs' spectrum (``normalize="spectrum"``; :meth:`OperatorModel.from_data`
calibrates it on the episodes it takes the normalisation from, and a model built
otherwise calibrates on its first batch), band-limited to the lower half of the
training grid's band (``max_modes = n_train / 4``), with their per-feature scales
started at 0 (``scale_init=0``: the ∂-NO starts as its backbone on zero feature
channels and the scales, which get a gradient, grow where the features help). The zero
start is issue 25's fix. With the scales at 1 the ∂-NO FNO did not fit 2-D
Navier-Stokes (nu = 1e-3, 32 x 32, seed 0, 300 steps: test rollout error 4.46, 0.58 at
the first step; plain FNO 0.042, 0.078; the one-step error from t = 0 was 0.31 on the
training windows and 0.55 on the test ones), while the same network with the feature
scales frozen at 0 fitted it (0.079 / 0.086). The derivatives are exact on trig fields
and the batch-RMS standardisation failed alike: the cause is the feature content at
initialisation. The early frames (the t = 0 random field, 4e4 times the power of the
t = 5 frame at mode 8; t = 1, 150 times) give features of order 1-1.5 dominated by
modes 4-8, which the backbone, started on them at full size, did not learn to use
(orders fixed at 0.05/0.1: rollout 0.099). With ``scale_init=0``: 0.056 (300
steps); at 1500 steps 0.0307 against the plain FNO's 0.0311 (seed 0; seed 1, 600 steps:
0.0341 against 0.0350). On the 1-D rows (bench_dno, FNO, seed 0, 1500 steps, one run
each, same data): Burgers 0.0470 against plain 0.0547; KdV 0.1059, where started at 1
it gives 0.0939 and plain 0.0928: the zero start costs KdV 13% on that seed and turns a
failure to fit into a tie on Navier-Stokes. Why the rest, from short runs (600 steps,
one seed, rollout error over 10 steps at 128 points; plain FNO: Burgers nu=1e-3 0.085,
KdV 0.151; these runs used the batch's RMS, ``normalize="rms"``, the default before,
and scales started at 1):

- unstandardised features with gain :math:`|n|^\beta` up to :math:`10^4` wrecked
  training (KdV 0.31-0.40);
- standardised, full band: Burgers 0.078 but KdV diverged in rollout (1.39): the top
  of the band amplifies the rollout's own high-frequency errors;
- band n/8 (16 modes): stable but no gain (Burgers 0.094, KdV 0.156);
- band n/4 (32 modes): Burgers 0.089, KdV 0.131 -- the default, the robust choice.
On a smoother Burgers set (nu = 0.01, the tour's) unstandardised full-band features with
two orders at m/2, 3m/4 gave 0.028 against 0.032 for one order at 1 and 0.037 for one
at 0.5 (plain FNO 0.035); with the defaults above the same set gives 0.0356 (a tie): the
defaults trade that gain for stability on rough data. Longer horizons are
    autoregressive. Actions of rollout files (``action`` ``(A,)`` per step) enter as
    ``A`` constant input channels, so a PDEControl surrogate sees its actuation.
``map`` (steady problems, one frame per episode: Darcy)
    input channels to output channels of the same frame (``a -> u``).

Normalisation: per channel mean and std of the file's ``/stats/x`` (train split) when
present, else computed from up to 64 training episodes; inputs are normalised, the
output is decoded before the loss. Loss: the relative L2 error
:math:`\|\hat u - u\|_2 / \|u\|_2` per sample (over grid and channels), mean over the
batch, plus ``h1_weight`` times the relative :math:`H^1` seminorm error (spectral
gradient, periodic grids) when asked. ``rollout_steps = K > 1`` trains through K
autoregressive steps (the loss averages them).

Resolution: ``subsample`` (per axis) trains on every s-th grid point of the file; the
same weights evaluate at any finer subsample (FNO, DeepONet, ∂-NO features are
resolution-agnostic), which :func:`evaluate_operator` reports at s, s/2 and s/4.

Interfaces it follows: the training contract of :mod:`simsci.train`; the PDE-solver
benchmark's ``rollout(u0, t, params)`` (channels-last, ``t`` multiples of the model's
step); and, when trained on rollout files of a simsci environment, the surrogate
checkpoint interface of :mod:`simsci.envs` (``advance(state, action, dt)``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from simsci import data, systems
from simsci.data import recorded_env_kwargs
from simsci.operators._backbones import get as get_backbone
from simsci.operators._common import count_parameters, first_real
from simsci.operators._dno import DerivativeAugmented

__all__ = ["OperatorModel", "evaluate_operator", "relative_l2"]

TASKS = ("rollout", "map")
FEATURES = ("none", "dno")


def relative_l2(pred: torch.Tensor, target: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """``(B,)`` relative L2 errors over all but the batch axis."""
    diff = (pred - target).flatten(1).norm(dim=1)
    return diff / target.flatten(1).norm(dim=1).clamp_min(eps)


def _spectral_grad(u: torch.Tensor, dim: int) -> list[torch.Tensor]:
    """Periodic spectral derivatives of ``u`` (B, C, *grid) along each grid axis (unit box)."""
    out = []
    for axis in range(dim):
        ax = u.ndim - dim + axis
        n = u.shape[ax]
        k = torch.fft.fftfreq(n, d=1.0 / n, device=u.device).to(u.dtype) * 2 * math.pi
        if n % 2 == 0:
            k[n // 2] = 0
        shape = [1] * u.ndim
        shape[ax] = n
        uh = torch.fft.fft(u, dim=ax)
        out.append(torch.fft.ifft(uh * (1j * k.reshape(shape)), dim=ax).real)
    return out


def _pde_order(system: str) -> int | None:
    """The ``pde_order`` of a registered system (None for other names)."""
    if system not in systems.SYSTEMS:
        return None
    return getattr(systems.SYSTEMS[system], "pde_order", None)


def _check_finite(x: torch.Tensor, what: str) -> None:
    bad = ~torch.isfinite(x.flatten(1)).all(dim=1)
    if bool(bad.any()):
        rows = torch.nonzero(bad).flatten()[:5].tolist()
        raise ValueError(f"{what}: sample(s) {rows} hold NaN or inf; clean the data first")


def _check_layout(
    task, features, dim, channels, inputs, targets, in_frames, time_stride, rollout_steps, subsample
):
    """Validate the task and the data layout; returns (channels, inputs, targets,
    subsample per axis)."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if features not in FEATURES:
        raise ValueError(f"features must be one of {FEATURES}, got {features!r}")
    if dim not in (1, 2):
        raise ValueError(f"dim must be 1 or 2, got {dim!r}")
    channels = [str(c) for c in channels]
    C = len(channels)
    if task == "map":
        inputs = list(range(C - 1)) if inputs is None else [int(i) for i in inputs]
        targets = [C - 1] if targets is None else [int(i) for i in targets]
        for i in (*inputs, *targets):
            if not 0 <= i < C:
                raise ValueError(f"channel index {i} outside the {C} channels {channels}")
    for name, v in (("in_frames", in_frames), ("time_stride", time_stride)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if int(rollout_steps) != rollout_steps or rollout_steps < 1:
        raise ValueError(f"rollout_steps must be a positive int, got {rollout_steps!r}")
    sub = [int(subsample)] * dim if np.isscalar(subsample) else [int(s) for s in subsample]
    if len(sub) != dim or min(sub) < 1:
        raise ValueError(f"subsample must be a positive int or {dim} of them, got {subsample!r}")
    return channels, inputs, targets, sub


class OperatorModel(nn.Module):
    """A backbone (``fno``, ``deeponet``, ``unet``, ``neuralop.fno``, ...), optionally
    ∂-NO-augmented, as a trainable field-to-field model. Build with :meth:`from_data`;
    see the module docstring.

    Args:
        task: "rollout" or "map". channels: names of the state channels C (rollout) or
            of all the file's channels (map). inputs/targets (map): channel indices.
        dim: grid dimension (1 or 2). backbone, backbone_kwargs: a key of
            ``simsci.operators.BACKBONES`` and its keywords (width, modes, ...).
        features: "none" or "dno"; feature_kwargs: ``DerivativeFeatures`` keywords
            (beta_init, beta_range, kinds, periodic, ...); beta_lr_scale.
        in_frames, time_stride, rollout_steps, subsample, dt: see the module docstring
            (dt is the model's step in the file's time units).
        mean, std: per-channel normalisation of the file's channels.
        action_dim, action_mean, action_std: actions of rollout files (0: none).
        env_id, env_kwargs: the environment it learned (surrogate interface; "" if none).
        system: the registered PDE of the data (checked by the PDE benchmark).
        h1_weight: weight of the relative H1 seminorm term of the loss.
    """

    data_fields = ("t", "x", "state", "action")

    def __init__(
        self,
        *,
        task: str,
        channels: Sequence[str],
        dim: int,
        grid: Sequence[int],
        backbone: str = "fno",
        backbone_kwargs: Mapping | None = None,
        features: str = "none",
        feature_kwargs: Mapping | None = None,
        beta_lr_scale: float = 10.0,
        inputs: Sequence[int] | None = None,
        targets: Sequence[int] | None = None,
        in_frames: int = 1,
        time_stride: int = 1,
        rollout_steps: int = 1,
        subsample: int | Sequence[int] = 1,
        dt: float | None = None,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        action_dim: int = 0,
        action_mean: Sequence[float] | None = None,
        action_std: Sequence[float] | None = None,
        state_field: str = "x",
        env_id: str = "",
        env_kwargs: Mapping | None = None,
        system: str = "",
        h1_weight: float = 0.0,
    ):
        super().__init__()
        channels, inputs, targets, sub = _check_layout(
            task,
            features,
            dim,
            channels,
            inputs,
            targets,
            in_frames,
            time_stride,
            rollout_steps,
            subsample,
        )
        C = len(channels)
        self.task, self.channels, self.dim = task, channels, int(dim)
        self.grid = tuple(int(g) for g in grid)
        self.inputs, self.targets = inputs, targets
        self.in_frames, self.time_stride = int(in_frames), int(time_stride)
        self.rollout_steps, self.subsample = int(rollout_steps), tuple(sub)
        self.dt = None if dt is None else float(dt)
        self.action_dim = int(action_dim)
        self.state_field = state_field
        self.env_id, self.env_kwargs = str(env_id), dict(env_kwargs or {})
        self.system, self.h1_weight = str(system), float(h1_weight)
        self.features = features
        mean = [0.0] * C if mean is None else [float(m) for m in mean]
        std = [1.0] * C if std is None else [float(s) if s > 0 else 1.0 for s in std]
        amean = [0.0] * self.action_dim if action_mean is None else list(map(float, action_mean))
        astd = [1.0] * self.action_dim if action_std is None else list(map(float, action_std))
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32), persistent=False)
        self.register_buffer("a_mean", torch.tensor(amean, dtype=torch.float32), persistent=False)
        self.register_buffer("a_std", torch.tensor(astd, dtype=torch.float32), persistent=False)

        bkw = dict(backbone_kwargs or {})
        self.net = self._build_net(backbone, bkw, feature_kwargs, beta_lr_scale)
        self.init_args = {
            "task": task,
            "channels": channels,
            "dim": self.dim,
            "grid": list(self.grid),
            "backbone": backbone,
            "backbone_kwargs": bkw,
            "features": features,
            "feature_kwargs": dict(feature_kwargs or {}),
            "beta_lr_scale": float(beta_lr_scale),
            "inputs": inputs,
            "targets": targets,
            "in_frames": self.in_frames,
            "time_stride": self.time_stride,
            "rollout_steps": self.rollout_steps,
            "subsample": list(self.subsample),
            "dt": self.dt,
            "mean": mean,
            "std": std,
            "action_dim": self.action_dim,
            "action_mean": amean,
            "action_std": astd,
            "state_field": state_field,
            "env_id": self.env_id,
            "env_kwargs": self.env_kwargs,
            "system": self.system,
            "h1_weight": self.h1_weight,
        }

    def _build_net(self, backbone: str, bkw: dict, feature_kwargs, beta_lr_scale) -> nn.Module:
        """The backbone for this task's channels, ∂-NO-augmented when asked."""
        C = len(self.channels)
        if self.task == "rollout":
            n_in, n_out = C * self.in_frames + self.action_dim, C
        else:
            n_in, n_out = len(self.inputs), len(self.targets)
        net = get_backbone(backbone, in_channels=n_in, out_channels=n_out, dim=self.dim, **bkw)
        if self.features == "dno":
            # features band-limited to half the training grid's band (see the docstring)
            train_grid = [-(-g // si) for g, si in zip(self.grid, self.subsample)]
            band = [max(1, n // 4) for n in train_grid]
            fkw = {"periodic": True, "max_modes": band, **dict(feature_kwargs or {})}
            net = DerivativeAugmented(net, features=fkw, beta_lr_scale=beta_lr_scale)
        return net

    # ------------------------------------------------------------------ description
    @property
    def state_shape(self) -> tuple[int, ...]:
        """One state of the surrogate interface: the full-resolution grid, channels last."""
        return (*self.grid, len(self.channels))

    @property
    def resolution(self):
        """None: the operator runs at any resolution (one benchmark point per tested one)."""
        return None

    def num_parameters(self) -> int:
        """Real parameters of the network (complex ones count twice: :func:`count_parameters`)."""
        return count_parameters(self)

    def parameter_groups(self) -> list[dict]:
        """The ∂-NO orders in their own learning-rate group (see DerivativeAugmented)."""
        if hasattr(self.net, "parameter_groups"):
            return list(self.net.parameter_groups())
        return [{"params": list(self.parameters()), "lr_scale": 1.0, "name": "weights"}]

    def evaluate_file(self, source, **kwargs) -> dict:
        """:func:`evaluate_operator` on a trajectory file (used by ``simsci evaluate``)."""
        return evaluate_operator(self, source, **kwargs)

    def betas(self) -> dict[str, float]:
        """The learned derivative orders (empty for a plain operator)."""
        if self.features != "dno":
            return {}
        summary = getattr(self.net, "beta_summary", None) or self.net.features.beta_summary
        return {k: float(v) for k, v in summary().items()}

    # ------------------------------------------------------------------ data
    @classmethod
    def from_data(cls, trajectories, *, window=None, **overrides) -> OperatorModel:
        """Infer task, channels, grid, dt and normalisation from a field or rollout file."""
        traj = (
            trajectories if isinstance(trajectories, data.Trajectories) else data.open(trajectories)
        )
        field = "state" if "state" in traj.step_fields else "x"
        if traj.kind not in ("field", "rollout"):
            raise ValueError(
                f"an operator learns fields: the file has kind {traj.kind!r}; give a field "
                "file (simsci generate burgers ...) or a PDEControl rollout file"
            )
        shape = traj.step_fields[field].shape
        if len(shape) not in (2, 3):
            raise ValueError(
                f"field {field!r} has per-step shape {tuple(shape)}; expected (*grid, C) with "
                "a 1-D or 2-D grid"
            )
        grid, C = tuple(shape[:-1]), int(shape[-1])
        names = traj.names(field)
        channels = list(names) if names and len(names) == C else [f"c{i}" for i in range(C)]
        lengths = np.asarray(traj.lengths)
        task = overrides.pop("task", "map" if int(lengths.max()) == 1 else "rollout")
        train = np.arange(len(lengths))
        if "split" in traj.episode_fields:
            train = np.flatnonzero(np.asarray(traj.column("split")) == 0)
        pick = train[np.linspace(0, len(train) - 1, min(64, len(train))).astype(int)]
        has_stats = field == "x" and bool(getattr(traj, "stats", None)) and "x" in traj.stats
        has_actions = traj.kind == "rollout" and "action" in traj.step_fields
        # read once, and only when needed: the statistics the file lacks, the actions' and
        # the ∂-NO features' calibration
        need = not has_stats or has_actions or overrides.get("features") == "dno"
        picked = [traj[int(i)] for i in pick] if need else []
        if has_stats:
            mean = np.asarray(traj.stats["x"]["mean"], dtype=np.float64).reshape(-1)
            std = np.asarray(traj.stats["x"]["std"], dtype=np.float64).reshape(-1)
        else:
            frames = np.concatenate([np.asarray(item[field]) for item in picked])
            flat = frames.reshape(-1, C)
            mean, std = flat.mean(0), flat.std(0)
        action_dim, amean, astd = 0, None, None
        if has_actions:
            acts = np.concatenate([np.asarray(item["action"]) for item in picked])
            acts = acts.reshape(len(acts), -1)
            acts = acts[np.isfinite(acts).all(1)]
            action_dim, amean, astd = acts.shape[1], acts.mean(0).tolist(), acts.std(0).tolist()
        meta = traj.meta or {}
        dt = None
        if task == "rollout":
            t = np.asarray(traj[int(train[0])]["t"], dtype=np.float64)
            if len(t) > 1:
                dt = float(np.median(np.diff(t))) * overrides.get("time_stride", 1)
        env_kwargs = recorded_env_kwargs(meta)
        kwargs = {
            "task": task,
            "channels": channels,
            "dim": len(grid),
            "grid": list(grid),
            "dt": dt,
            "mean": mean.tolist(),
            "std": std.tolist(),
            "action_dim": action_dim,
            "action_mean": amean,
            "action_std": astd,
            "state_field": field,
            "env_id": str(meta.get("env_id") or ""),
            "env_kwargs": env_kwargs,
            "system": traj.system if traj.kind == "field" else "",
        }
        if overrides.get("features") == "dno":
            # two learnable orders per feature kind, started at m/2 and 3m/4 inside
            # [0, m] (m the PDE order when the system is registered, else 2): the paper's
            # optimal order lies below m, and two orders let the fit pick the trade-off
            m = float(_pde_order(traj.system) or 2)
            fkw = {
                "n_orders": 2,
                "beta_init": [m / 2, 3 * m / 4],
                "beta_range": [0.0, m],
                "normalize": "spectrum",
                "scale_init": 0.0,
            }
            overrides["feature_kwargs"] = {**fkw, **dict(overrides.get("feature_kwargs") or {})}
        kwargs.update(overrides)
        model = cls(**kwargs)
        # ∂-NO features standardised by the training inputs' spectrum (the same episodes
        # as the normalisation statistics)
        model.calibrate_features(picked)
        return model

    def _sub(self, x: torch.Tensor, factor: Sequence[int] | None = None) -> torch.Tensor:
        """Every s-th grid point of channels-last ``x`` (..., *grid, C)."""
        s = self.subsample if factor is None else factor
        index = [slice(None)] * x.ndim
        for axis in range(self.dim):
            index[x.ndim - 1 - self.dim + axis] = slice(None, None, s[axis])
        return x[tuple(index)]

    def collate(self, items: list[dict]) -> dict:
        """Episodes or windows -> every training window at the model's subsample.

        rollout: ``inputs`` (W, h, *grid, C), ``actions`` (W, K, A) or None, ``targets``
        (W, K, *grid, C); map: ``inputs`` (W, *grid, C_all) and ``targets`` the same.
        """
        field = self.state_field
        ins, acts, outs = [], [], []
        for item in items:
            x = torch.as_tensor(np.asarray(item[field]))
            x = self._sub(x)
            if self.task == "map":
                ins.append(x.reshape(-1, *x.shape[-self.dim - 1 :]))
                continue
            x = x[:: self.time_stride]
            a = None
            if self.action_dim:
                a = torch.as_tensor(np.asarray(item["action"])).reshape(len(item["action"]), -1)
                # the action held over a strided step is the first one's (zero-order hold)
                a = a[:: self.time_stride]
            h, K = self.in_frames, self.rollout_steps
            for s in range(0, x.shape[0] - h - K + 1):
                ins.append(x[s : s + h])
                outs.append(x[s + h : s + h + K])
                if a is not None:
                    acts.append(a[s + h - 1 : s + h - 1 + K])
        if not ins:
            need = self.in_frames + self.rollout_steps
            raise ValueError(
                f"no training window: episodes need at least {need} frames (in_frames + "
                f"rollout_steps) after time_stride {self.time_stride}"
            )
        if self.task == "map":
            x = torch.cat(ins)
            return {"inputs": x, "targets": x}
        return {
            "inputs": torch.stack(ins),
            "targets": torch.stack(outs),
            "actions": torch.stack(acts) if acts else None,
        }

    # ------------------------------------------------------------------ the map
    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)

    def _denorm(self, z: torch.Tensor) -> torch.Tensor:
        return z * self.std.to(z.dtype) + self.mean.to(z.dtype)

    def _first(self, x: torch.Tensor) -> torch.Tensor:
        """channels-last (B, *grid, C) -> channels-first (B, C, *grid)."""
        return x.movedim(-1, 1)

    def _last(self, x: torch.Tensor) -> torch.Tensor:
        return x.movedim(1, -1)

    def _net_input(self, history: torch.Tensor, action: torch.Tensor | None) -> torch.Tensor:
        """``history`` (B, h, *grid, C) physical -> the network's input (B, hC [+ A], *grid)."""
        z = self._norm(history)
        B = z.shape[0]
        zin = self._first(z.movedim(1, -2).reshape(B, *z.shape[2:-1], -1))  # (B, hC, *grid)
        if self.action_dim:
            if action is None:
                raise ValueError(f"this operator takes {self.action_dim} action channels")
            an = (action.to(z.dtype) - self.a_mean.to(z.dtype)) / self.a_std.to(z.dtype)
            an = an.reshape(B, self.action_dim, *([1] * self.dim)).expand(-1, -1, *z.shape[2:-1])
            zin = torch.cat([zin, an], dim=1)
        return zin

    def step(self, history: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        """One model step: ``history`` (B, h, *grid, C) physical units -> next frame."""
        dz = self._last(self.net(self._net_input(history, action)))
        return self._denorm(self._norm(history[:, -1]) + dz)

    @torch.no_grad()
    def calibrate_features(self, items: list[dict]) -> None:
        """Set the ∂-NO features' training spectrum (``normalize="spectrum"``) from
        training episodes ``items`` (dicts of the model's data fields, as ``collate``
        takes them): the network inputs of every window. No-op for other models."""
        feats = getattr(self.net, "features", None)
        if self.features != "dno" or getattr(feats, "normalize", None) != "spectrum":
            return
        batch = self.collate(items)
        p = first_real(self)
        x = batch["inputs"].to(p.device, p.dtype)
        if self.task == "map":
            zin = self._first(self._norm(x)[..., self.inputs])
        else:
            acts = batch["actions"]
            a = None if acts is None else acts[:, 0].to(p.device, p.dtype)
            zin = self._net_input(x, a)
        feats.calibrate(zin)

    def map(self, x: torch.Tensor) -> torch.Tensor:
        """Steady task: (B, *grid, C_all) physical -> (B, *grid, len(targets))."""
        z = self._norm(x)
        out = self._last(self.net(self._first(z[..., self.inputs])))
        mean, std = self.mean[self.targets].to(out.dtype), self.std[self.targets].to(out.dtype)
        return out * std + mean

    def _loss(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = relative_l2(pred, target).mean()
        if self.h1_weight > 0:
            gp = _spectral_grad(self._first(pred), self.dim)
            gt = _spectral_grad(self._first(target), self.dim)
            h1 = relative_l2(torch.cat(gp, 1), torch.cat(gt, 1)).mean()
            loss = loss + self.h1_weight * h1
        return loss

    def _batch_loss(self, batch: dict) -> tuple[torch.Tensor, dict]:
        p = first_real(self)
        x = batch["inputs"].to(p.device, p.dtype)
        _check_finite(x, "operator input batch")
        if self.task == "map":
            target = x[..., self.targets]
            pred = self.map(x)
            return self._loss(pred, target), {}
        targets = batch["targets"].to(p.device, p.dtype)
        _check_finite(targets, "operator target batch")
        actions = batch.get("actions")
        actions = None if actions is None else actions.to(p.device, p.dtype)
        history, losses = x, []
        for k in range(self.rollout_steps):
            nxt = self.step(history, None if actions is None else actions[:, k])
            losses.append(self._loss(nxt, targets[:, k]))
            history = torch.cat([history[:, 1:], nxt[:, None]], dim=1)
        return torch.stack(losses).mean(), {}

    def training_step(self, batch: dict) -> dict:
        loss, extra = self._batch_loss(batch)
        out = {"loss": loss, **extra}
        out.update({f"beta_{k}": v for k, v in list(self.betas().items())[:8]})
        return out

    def validation_step(self, batch: dict) -> dict:
        loss, _ = self._batch_loss(batch)
        return {"loss": loss}

    # ------------------------------------------------------------------ interfaces
    def rollout(self, u0: torch.Tensor, t, params=None, actions=None) -> torch.Tensor:
        """PDE-benchmark protocol: ``u0`` (B, *grid, C) -> (B, T, *grid, C) at times ``t``.

        ``t[i] - t[0]`` must be whole multiples of the model's step ``dt`` (autoregressive
        steps); needs ``in_frames == 1``. ``params`` are ignored (the model learned one
        parameter setting, or infers it from the state).
        """
        if self.task != "rollout":
            raise ValueError("rollout() needs a time-dependent operator (task 'rollout')")
        if self.in_frames != 1:
            raise ValueError(
                f"this operator needs {self.in_frames} input frames; rollout from one state "
                "needs in_frames=1"
            )
        if self.dt is None:
            raise ValueError("the operator has no time step (dt); it cannot roll out in time")
        times = np.asarray(torch.as_tensor(t).detach().cpu(), dtype=np.float64).reshape(-1)
        steps = (times - times[0]) / self.dt
        whole = np.round(steps)
        if np.any(np.abs(steps - whole) > 1e-6 * np.maximum(1.0, whole)) or np.any(
            np.diff(whole) < 0
        ):
            raise ValueError(
                f"output times must be t[0] + whole multiples of the operator's step "
                f"{self.dt:g}, got {times.tolist()[:6]}"
            )
        _check_finite(u0, "rollout u0")
        frames, u, done = [u0], u0, 0
        for target in whole[1:].astype(int):
            while done < target:
                u = self.step(u[:, None], None)
                done += 1
            frames.append(u)
        return torch.stack(frames, dim=1)

    def advance(self, state: torch.Tensor, action: torch.Tensor | None, dt: float) -> torch.Tensor:
        """Surrogate-environment protocol: ``state`` (B, *grid, C) one control interval on."""
        if self.dt is None or abs(dt / self.dt - round(dt / self.dt)) > 1e-6:
            raise ValueError(
                f"the environment's interval {dt:g} is not a whole number of the operator's "
                f"step {self.dt}"
            )
        u = state
        for _ in range(max(1, round(dt / self.dt))):
            u = self.step(u[:, None], action if self.action_dim else None)
        return u

    def export_spec(self, example_shape: Sequence[int] | None = None) -> dict:
        """What :func:`simsci.train.export_model` exports: :meth:`step` (rollout task) or
        :meth:`map` (map task), normalisation included, on an example input of
        ``example_shape`` (the first input's shape; default a batch of 2 at the
        training resolution)."""
        C = len(self.channels)
        train_grid = [-(-g // s) for g, s in zip(self.grid, self.subsample)]
        if self.task == "rollout":
            lead, last, name = (2, self.in_frames), C, "history"
        else:
            lead, last, name = (2,), len(self.channels), "x"
        shape = [*lead, *train_grid, last] if example_shape is None else list(example_shape)
        want = len(lead) + self.dim + 1
        if len(shape) != want or list(shape[1 : len(lead)]) != list(lead[1:]) or shape[-1] != last:
            layout = "(B, in_frames, *grid, C)" if self.task == "rollout" else "(B, *grid, C)"
            raise ValueError(
                f"example shape {tuple(shape)} does not fit this {self.task} operator: it takes "
                f"{layout} = (B, {', '.join(map(str, lead[1:] + ('*grid',)))}, {last}) with "
                f"{self.dim} grid axes, e.g. {tuple([*lead, *train_grid, last])}"
            )
        p = first_real(self)
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(*shape, generator=gen, dtype=torch.float64)
        x = (x * self.std.double() + self.mean.double()).to(p.device, p.dtype)
        grid_axes = "grid" if self.dim == 1 else "grid axes (2-D)"
        if self.task == "map":
            return {
                "kind": "operator",
                "module": _MapProgram(self),
                "inputs": (x,),
                "input_names": ["x"],
                "inputs_doc": {
                    "x": f"(B, *grid, {last}) the fields {self.channels} on the {grid_axes}, "
                    f"channels last, physical units; channels {self.inputs} are read"
                },
                "output_names": ["y"],
                "outputs_doc": {"y": f"(B, *grid, {len(self.targets)}) channels {self.targets}"},
                "function": "OperatorModel.map(x): the steady map of inputs to targets",
                "free_axes": {"x": list(range(1, 1 + self.dim))},
            }
        inputs, names = (x,), [name]
        docs = {
            name: f"(B, {self.in_frames}, *grid, {C}) the last {self.in_frames} frames of the "
            f"fields {self.channels} on the {grid_axes}, channels last, physical units"
        }
        if self.action_dim:
            a = torch.randn(shape[0], self.action_dim, generator=gen, dtype=torch.float64)
            a = (a * self.a_std.double() + self.a_mean.double()).to(p.device, p.dtype)
            inputs, names = (x, a), [name, "action"]
            docs["action"] = f"(B, {self.action_dim}) the action held over the step"
        step = "one model step" + (f" of dt = {self.dt:g}" if self.dt is not None else "")
        return {
            "kind": "operator",
            "module": _StepProgram(self),
            "inputs": inputs,
            "input_names": names,
            "inputs_doc": docs,
            "output_names": ["next"],
            "outputs_doc": {"next": f"(B, *grid, {C}) the next frame, physical units"},
            "function": f"OperatorModel.step({', '.join(names)}): {step} (roll out by feeding "
            "it back)",
            "free_axes": {name: list(range(2, 2 + self.dim))},  # any resolution
        }


class _StepProgram(nn.Module):
    """``OperatorModel.step`` as a module (the exported program's forward)."""

    def __init__(self, model: OperatorModel):
        super().__init__()
        self.model = model

    def forward(self, history: torch.Tensor, action: torch.Tensor | None = None) -> torch.Tensor:
        return self.model.step(history, action)


class _MapProgram(nn.Module):
    """``OperatorModel.map`` as a module (the exported program's forward)."""

    def __init__(self, model: OperatorModel):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.map(x)


@torch.no_grad()
def evaluate_operator(
    model: OperatorModel,
    source,
    *,
    split: str | None = "test",
    factors: Sequence[int] | None = None,
    batch_size: int = 16,
    max_episodes: int | None = None,
    device=None,
) -> dict:
    """Relative L2 (PDEBench's nRMSE) and RMSE per output time step and channel.

    Rollout task: from the first ``in_frames`` frames (excluded from the scores) the model
    rolls out autoregressively over the rest of each episode (at the model's time
    stride). Map task: one score per channel. ``factors``: subsample factors to
    evaluate at (default: the training subsample s, s/2 and s/4 where whole: the
    training resolution and 2x and 4x finer). Returns ``{"resolutions": {label:
    {"grid": [...], "rel_l2": [[step][channel]], "rmse": [...], "rel_l2_mean": float}}}``.
    """
    traj = source if isinstance(source, data.Trajectories) else data.open(source)
    field = model.state_field
    index = np.arange(len(traj.lengths))
    if split is not None and "split" in traj.episode_fields:
        code = {"train": 0, "val": 1, "test": 2}[split]
        index = index[np.asarray(traj.column("split")) == code]
    if max_episodes is not None:
        index = index[:max_episodes]
    if len(index) == 0:
        raise ValueError(f"no episodes to evaluate (split {split!r})")
    p = first_real(model)
    model = model.eval().to(device or p.device)
    p = first_real(model)
    s = model.subsample
    if factors is None:
        factors = sorted({max(1, si // f) for si in s[:1] for f in (1, 2, 4)}, reverse=True)
    out = {}
    for f in factors:
        fac = [max(1, int(f))] * model.dim
        sums, cnt, rmse = None, 0, None
        for start in range(0, len(index), batch_size):
            eps = [traj[int(i)] for i in index[start : start + batch_size]]
            x = torch.stack([torch.as_tensor(np.asarray(e[field])) for e in eps])
            x = model._sub(x, fac).to(p.device, p.dtype)
            if model.task == "map":
                x = x[:, 0]
                pred = model.map(x)[:, None]
                true = x[..., model.targets][:, None]
            else:
                x = x[:, :: model.time_stride]
                acts = None
                if model.action_dim:
                    acts = torch.stack(
                        [torch.as_tensor(np.asarray(e["action"])) for e in eps]
                    ).reshape(len(eps), -1, model.action_dim)[:, :: model.time_stride]
                    acts = acts.to(p.device, p.dtype)
                h = model.in_frames
                history, preds = x[:, :h], []
                for k in range(h, x.shape[1]):
                    a = None if acts is None else acts[:, k - 1]
                    nxt = model.step(history, a)
                    preds.append(nxt)
                    history = torch.cat([history[:, 1:], nxt[:, None]], dim=1)
                pred, true = torch.stack(preds, 1), x[:, h:]
            grid_axes = tuple(range(2, 2 + model.dim))
            err = (pred - true).pow(2).sum(grid_axes)  # (B, K, C)
            norm = true.pow(2).sum(grid_axes).clamp_min(1e-24)
            rel = (err / norm).sqrt()
            npts = math.prod(true.shape[2 : 2 + model.dim])
            r = (err / npts).sqrt()
            sums = rel.sum(0) if sums is None else sums + rel.sum(0)
            rmse = r.sum(0) if rmse is None else rmse + r.sum(0)
            cnt += rel.shape[0]
        rel_l2 = (sums / cnt).cpu().double()
        grid = [-(-g // fi) for g, fi in zip(model.grid, fac)]  # points kept by [::fi]
        label = "x".join(map(str, grid))
        out[label] = {
            "subsample": fac,
            "grid": grid,
            "training_resolution": list(fac) == list(model.subsample),
            "rel_l2": rel_l2.tolist(),
            "rmse": (rmse / cnt).cpu().double().tolist(),
            "rel_l2_mean": float(rel_l2.mean()),
            "rel_l2_final_step": float(rel_l2[-1].mean()),
        }
    return {"episodes": int(len(index)), "channels": model.channels, "resolutions": out}
