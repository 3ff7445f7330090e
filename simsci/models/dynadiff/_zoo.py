"""The model zoo: one expert per training environment, trained together with torch.func.

:class:`ExpertZoo` holds E experts' parameters stacked, ``{name: (E, *shape)}``, and
computes all E losses in one ``torch.func.vmap`` of ``functional_call``. Its loss is
the *sum* of the experts' losses, and Adam is elementwise, so one optimiser step over
the stacked tensors is exactly E independent Adam steps: vmapping changes the speed,
not the result (a test checks it against one-at-a-time training). It follows the
training contract of :mod:`simsci.train`, so building a zoo checkpoints, resumes and
runs under DDP like every other model.

:func:`build_zoo` makes a zoo from a multi-environment file:

1. a **pooled** model (one expert on the episodes of every environment) -- the
   "pooled" baseline, and
2. **the experts**, each initialised at the pooled weights and fine-tuned on its own
   environment. The common start is a design choice: experts trained from independent
   initialisations land in different, permutation-scrambled basins, and a weight-space
   generator cannot interpolate between them; fine-tuned from one point they form a
   smooth family in the environment parameters (what the generator learns).

The loss is the multi-step rollout error over ``window`` frames in normalised units
(one step, then the next from the prediction, ...), which trains stable rollouts.

The zoo file (``save_zoo`` / ``load_zoo``; ``torch.save`` with weights-only types,
written atomically) holds the spec, stacked weights, the pooled weights, each expert's
environment parameters and validation RMSE (full-horizon rollouts of its environment's
validation episodes, original units), the normalisation and the frame interval.

Expert quality is judged against **persistence**, the forecast that nothing moves:
for an episode ``x`` of T frames, ``persistence_rmse = sqrt(mean_t (x_t - x_0)^2)``,
the error of predicting every frame with the last one seen (the first, in a rollout
from it), over the same frames and units as ``val_rmse`` (so the ratio
``val_rmse / persistence_rmse`` < 1 means an expert has learnt some dynamics; frame 0,
exact for both, scales both errors alike and leaves the ratio unchanged). The file
records it per expert (``persistence_rmse``) with the build's wall time
(``seconds``); :meth:`Zoo.quality` sums them up (``simsci zoo build`` prints it). Files
written before these fields existed still load; their quality omits what is missing.
"""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path

import torch
from torch import nn
from torch.func import functional_call, vmap

from simsci._io import check_parent_dir
from simsci.errors import CheckpointError
from simsci.models.dynadiff._envdata import EnvData, load_environments
from simsci.models.dynadiff._experts import (
    ExpertNet,
    ExpertSpec,
    functional_template,
    rk4_frame,
)
from simsci.train import save_checkpoint

__all__ = [
    "ZOO_KIND",
    "ZOO_FORMAT_VERSION",
    "Zoo",
    "ExpertZoo",
    "WindowData",
    "build_zoo",
    "save_zoo",
    "load_zoo",
    "rk4_frame",
    "functional_rollout",
    "default_spec",
    "persistence_rmse",
]

ZOO_KIND = "simsci-dynadiff-zoo"
ZOO_FORMAT_VERSION = 1


def functional_rollout(net: ExpertNet, params: dict, z0: torch.Tensor, steps: int):
    """Roll the expert with weights ``params`` out: ``(B, *S)`` -> ``(B, steps + 1, *S)``."""

    def f(z):
        return functional_call(net, params, (z,))

    out, z = [z0], z0
    for _ in range(steps):
        z = rk4_frame(f, z, net.spec.substeps)
        out.append(z)
    return torch.stack(out, dim=1)


def rollout_mse(spec: ExpertSpec, params: dict, episodes_z: torch.Tensor) -> torch.Tensor:
    """Rollout MSE of S experts ``{name: (S, *shape)}`` on episodes ``(M, K, *state)``
    (normalised units) from their first frames, all experts in one ``vmap``: ``(S,)``,
    ``inf`` where a rollout overflowed."""
    net = functional_template(spec)

    def one(p):
        pred = functional_rollout(net, p, episodes_z[:, 0], episodes_z.shape[1] - 1)
        return ((pred - episodes_z) ** 2).mean()

    err = vmap(one)(params)
    return torch.where(torch.isfinite(err), err, torch.full_like(err, math.inf))


def persistence_rmse(episodes: list[torch.Tensor]) -> torch.Tensor:
    """Per environment e, the RMSE of persistence (every frame predicted by the first)
    over ``episodes[e]`` ``(n_e, T, *S)`` in their own units, ``(E,)`` float64: the
    baseline an expert's ``val_rmse`` must beat (see the module docstring)."""
    out = [((x.double() - x[:, :1].double()) ** 2).mean().sqrt() for x in episodes]
    return torch.stack(out)


def default_spec(kind: str, channels: int, system: str = "") -> ExpertSpec:
    """The expert architecture used unless one is given: a 3-layer MLP of width 32 for
    states, a 3-layer 3x3 conv net of width 12 for fields, and for Navier-Stokes (whose
    velocity is a non-local function of the vorticity, out of reach of a few 3x3
    convolutions) an FNO of width 12 with two Fourier layers of 4 x 4 modes."""
    if system == "navier_stokes_2d":
        return ExpertSpec("fno", channels, hidden=12, depth=4, modes=4, activation="gelu")
    if kind == "state":
        return ExpertSpec("mlp", channels, hidden=32, depth=3, activation="tanh")
    return ExpertSpec("conv", channels, hidden=12, depth=3, kernel=3, activation="gelu")


class ExpertZoo(nn.Module):
    """E experts with stacked parameters (training contract of :mod:`simsci.train`).

    Batches: ``(b, E, window + 1, *S)`` raw (unnormalised) windows, one per expert in
    each sample. ``training_step`` -> the summed rollout MSE (normalised units) and the
    mean per expert; ``validation_step`` on full episodes ``(b, E, T, *S)`` -> ``val_loss``
    the mean rollout MSE over experts.
    """

    def __init__(
        self,
        spec: dict,
        num_experts: int,
        mean: list,
        std: list,
        *,
        seed: int = 0,
        window: int = 4,
    ):
        super().__init__()
        self.spec = ExpertSpec.from_dict(spec)
        if int(num_experts) < 1:
            raise ValueError(f"num_experts must be >= 1, got {num_experts}")
        if int(window) < 1:
            raise ValueError(f"window must be >= 1 frame, got {window}")
        self.init_args = dict(
            spec=self.spec.to_dict(),
            num_experts=int(num_experts),
            mean=[float(v) for v in mean],
            std=[float(v) for v in std],
            seed=int(seed),
            window=int(window),
        )
        self.num_experts = int(num_experts)
        self.window = int(window)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32))
        gen = torch.Generator().manual_seed(int(seed))
        nets = []
        for _ in range(self.num_experts):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
                nets.append(ExpertNet(self.spec))
        self._names = self.spec.param_names()
        self.weights = nn.ParameterList(
            [
                nn.Parameter(torch.stack([dict(m.named_parameters())[n].detach() for m in nets]))
                for n in self._names
            ]
        )

    # -- weights --------------------------------------------------------------------------
    def stacked(self) -> dict[str, torch.Tensor]:
        """``{name: (E, *shape)}`` (the live parameters)."""
        return dict(zip(self._names, self.weights))

    def load_stacked(self, stacked: dict[str, torch.Tensor]) -> None:
        """Set every expert's weights from ``{name: (E, *shape)}`` or ``(1, *shape)``
        (broadcast: all experts start at one point)."""
        with torch.no_grad():
            for name, p in zip(self._names, self.weights):
                p.copy_(stacked[name].to(p).expand_as(p))

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean.to(x)) / self.std.to(x)

    # -- losses ---------------------------------------------------------------------------
    def _per_expert_mse(self, windows: torch.Tensor) -> torch.Tensor:
        """windows ``(b, E, L, *S)`` raw -> ``(E,)`` rollout MSE over L - 1 frames."""
        if windows.ndim < 3 or windows.shape[1] != self.num_experts:
            raise ValueError(
                f"expected windows (batch, {self.num_experts} experts, frames, *state), got "
                f"{tuple(windows.shape)}"
            )
        z = self.normalise(windows.to(self.weights[0].dtype)).transpose(0, 1)
        net = functional_template(self.spec)
        steps = z.shape[2] - 1

        def one(params, zw):
            pred = functional_rollout(net, params, zw[:, 0], steps)[:, 1:]
            return ((pred - zw[:, 1:]) ** 2).mean()

        return vmap(one)(self.stacked(), z)

    def training_step(self, batch):
        mse = self._per_expert_mse(batch)
        return {"loss": mse.sum(), "mse": mse.mean().detach()}

    def validation_step(self, batch):
        with torch.no_grad():
            mse = self._per_expert_mse(batch)
        return {"loss": mse.mean()}

    @torch.no_grad()
    def rollout_rmse(self, episodes: list[torch.Tensor]) -> torch.Tensor:
        """Per expert e, the full-horizon rollout RMSE (original units) over
        ``episodes[e]`` ``(n_e, T, *S)`` from their first frames. ``(E,)``."""
        net = functional_template(self.spec)
        out = []
        for e, x in enumerate(episodes):
            params = {n: w[e] for n, w in self.stacked().items()}
            x = x.to(self.weights[0])
            pred = functional_rollout(net, params, self.normalise(x[:, 0]), x.shape[1] - 1)
            pred = pred * self.std.to(x) + self.mean.to(x)
            err = ((pred - x) ** 2).mean()
            out.append(torch.sqrt(err) if torch.isfinite(err) else x.new_tensor(math.inf))
        return torch.stack(out)


class WindowData(torch.utils.data.Dataset):
    """Windows of ``window + 1`` frames, one per environment in each item.

    ``episodes``: per environment ``(n_e, T, *S)``. Item i ``(E, window + 1, *S)``: for
    each environment the window with flat index ``(i * stride_e) mod count_e`` of its
    ``n_e * (T - window)`` windows (a fixed, spread-out enumeration, so every window is
    used once per pass over the largest environment). ``pooled=True`` makes one
    environment of all of them (for the pooled model): items ``(1, window + 1, *S)``.
    ``full=True``: items are whole episodes (validation), ``(E, T, *S)``.
    """

    def __init__(self, episodes: list[torch.Tensor], window: int, *, pooled=False, full=False):
        if pooled:
            episodes = [torch.cat(list(episodes), dim=0)]
        self.episodes = [x.detach().cpu() for x in episodes]
        self.window = int(window)
        self.full = bool(full)
        T = self.episodes[0].shape[1]
        if not full and T < self.window + 1:
            raise ValueError(
                f"episodes of {T} frames are shorter than a training window of "
                f"{self.window + 1}; pass a smaller window"
            )
        per = [x.shape[0] if full else x.shape[0] * (T - self.window) for x in self.episodes]
        self.counts = per
        self.length = max(per)

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        out = []
        for x, count in zip(self.episodes, self.counts):
            j = (i * 7919) % count if count > 1 else 0
            if self.full:
                out.append(x[j])
                continue
            starts = x.shape[1] - self.window
            ep, s = divmod(j, starts)
            out.append(x[ep, s : s + self.window + 1])
        return torch.stack(out)


class Zoo:
    """A loaded zoo file (see the module docstring); ``weights``: ``{name: (E, *shape)}``."""

    def __init__(self, record: dict, path: str = ""):
        self.record = record
        self.path = path
        self.spec = ExpertSpec.from_dict(record["spec"])
        self.weights: dict[str, torch.Tensor] = record["weights"]
        self.pooled: dict[str, torch.Tensor] = record["pooled"]
        self.env_params: torch.Tensor = record["env_params"]
        self.param_names: list[str] = list(record["param_names"])
        self.val_rmse: torch.Tensor = record["val_rmse"]
        #: (E,) float64 or None (files from before it was recorded)
        self.persistence_rmse: torch.Tensor | None = record.get("persistence_rmse")
        self.mean = record["mean"]
        self.std = record["std"]
        self.dt = float(record["dt"])
        self.system = str(record["system"])
        self.kind = str(record["kind_of_data"])
        self.state_shape = tuple(int(s) for s in record["state_shape"])

    @property
    def num_experts(self) -> int:
        return int(self.env_params.shape[0])

    def varied(self) -> list[str]:
        spread = (self.env_params.max(0).values - self.env_params.min(0).values).tolist()
        return [n for n, s in zip(self.param_names, spread) if s > 0]

    def param_range(self) -> dict[str, tuple[float, float]]:
        lo, hi = self.env_params.min(0).values, self.env_params.max(0).values
        return {n: (float(lo[j]), float(hi[j])) for j, n in enumerate(self.param_names)}

    def expert(self, e: int) -> dict[str, torch.Tensor]:
        return {n: w[e] for n, w in self.weights.items()}

    def quality(self) -> dict:
        """The experts' validation error against persistence, and the build time:
        ``val_rmse_median`` / ``_max`` (original units), ``persistence_rmse_median``,
        ``ratio_median`` / ``ratio_max`` (per expert ``val_rmse / persistence_rmse``;
        < 1 beats persistence), ``build_seconds``. Absent figures (older files) are
        left out."""
        val = self.val_rmse.double()
        out = {"val_rmse_median": float(val.median()), "val_rmse_max": float(val.max())}
        if self.persistence_rmse is not None:
            ratio = val / self.persistence_rmse.clamp_min(1e-12)
            out["persistence_rmse_median"] = float(self.persistence_rmse.median())
            out["ratio_median"] = float(ratio.median())
            out["ratio_max"] = float(ratio.max())
        seconds = self.record.get("seconds") or {}
        if "total" in seconds:
            out["build_seconds"] = float(seconds["total"])
        return out


def save_zoo(path, record: dict) -> Path:
    """Write a zoo record atomically (``torch.save`` of weights-only types)."""
    check_parent_dir(path)
    payload = {"kind": ZOO_KIND, "format_version": ZOO_FORMAT_VERSION, **record}
    return save_checkpoint(path, payload)


_REQUIRED = {
    "spec": dict,
    "weights": dict,
    "pooled": dict,
    "env_params": torch.Tensor,
    "param_names": list,
    "val_rmse": torch.Tensor,
    "mean": torch.Tensor,
    "std": torch.Tensor,
    "dt": float,
    "system": str,
    "kind_of_data": str,
    "state_shape": list,
}


def load_zoo(path) -> Zoo:
    """Read and check a zoo file; a corrupt or foreign file raises :class:`CheckpointError`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no zoo file at {str(path)!r}; build one with `simsci zoo build`")
    try:
        rec = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(
            f"{str(path)!r} is not a readable zoo file ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:200] if str(exc) else ''}); it may be truncated or "
            "corrupt: rebuild it with `simsci zoo build`"
        ) from exc
    if not isinstance(rec, dict) or rec.get("kind") != ZOO_KIND:
        what = rec.get("kind") if isinstance(rec, dict) else type(rec).__name__
        raise CheckpointError(
            f"{str(path)!r} is not a DynaDiff zoo (kind {what!r}, expected {ZOO_KIND!r}); "
            "pass a file written by `simsci zoo build`"
        )
    version = rec.get("format_version")
    if not isinstance(version, int) or version > ZOO_FORMAT_VERSION:
        raise CheckpointError(
            f"{str(path)!r} has zoo format_version {version!r}; this simsci reads up to "
            f"{ZOO_FORMAT_VERSION}"
        )
    for key, typ in _REQUIRED.items():
        if not isinstance(rec.get(key), typ):
            raise CheckpointError(
                f"{str(path)!r}: zoo entry {key!r} is missing or not a {typ.__name__}; the "
                "file is corrupt: rebuild it with `simsci zoo build`"
            )
    try:
        spec = ExpertSpec.from_dict(rec["spec"])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{str(path)!r}: bad expert spec: {exc}") from exc
    E = int(rec["env_params"].shape[0])
    for name, shape in spec.param_shapes().items():
        for what, want in (("weights", (E, *shape)), ("pooled", (1, *shape))):
            t = rec[what].get(name)
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != want:
                got = None if not isinstance(t, torch.Tensor) else tuple(t.shape)
                raise CheckpointError(
                    f"{str(path)!r}: zoo {what}[{name!r}] has shape {got}, the spec "
                    f"{spec.to_dict()} needs {want}; the file is corrupt or was edited"
                )
            if not torch.isfinite(t).all():
                raise CheckpointError(f"{str(path)!r}: zoo {what}[{name!r}] is not finite")
    persistence = rec.get("persistence_rmse", rec["val_rmse"])  # optional: older files
    if (
        rec["val_rmse"].shape != (E,)
        or not isinstance(persistence, torch.Tensor)
        or persistence.shape != (E,)
        or len(rec["param_names"]) != rec["env_params"].shape[1]
    ):
        raise CheckpointError(f"{str(path)!r}: zoo records disagree on the number of experts")
    return Zoo(rec, str(path))


def _train(model, train_ds, val_ds, *, steps, batch_size, lr, out_dir, device, progress, seed):
    from simsci.train import TrainConfig, Trainer

    cfg = TrainConfig(
        epochs=10**6,
        max_steps=int(steps),
        batch_size=int(batch_size),
        lr=float(lr),
        schedule="cosine",
        val_every=max(1, int(steps) // 4),
        checkpoint_every=max(1, int(steps) // 4),
        log_every=max(1, int(steps) // 10),
        progress=progress,
        device=device,
        seed=int(seed),
    )
    trainer = Trainer(model, cfg, train_ds, val_ds, out_dir=out_dir, resume=True)
    trainer.fit()
    return model


def build_zoo(
    data,
    out,
    *,
    val=None,
    spec: ExpertSpec | dict | None = None,
    steps: int = 1500,
    pool_steps: int = 1500,
    window: int | None = None,
    batch_size: int | None = None,
    lr: float = 3e-3,
    seed: int = 0,
    device: str = "auto",
    vmapped: bool = True,
    run_dir=None,
    progress: bool = False,
) -> Path:
    """Train the pooled model and one expert per environment of ``data`` (a path, a
    directory written by :func:`._protocol.make_environments`, or :class:`EnvData`),
    write the zoo file ``out``; returns its path.

    Validation episodes: ``val`` (a path or EnvData with the same environments), else
    the directory's ``val.h5``, else the file's ``split == val`` episodes.

    ``spec``: the expert architecture (default :func:`default_spec`; a dict without
    ``kind`` overrides fields of the default, e.g. ``{"hidden": 64}``). ``window``
    (frames per training rollout) and ``batch_size`` (windows per expert and
    step) default to 4 and 16 for states, 2 and 4 for fields (a field window already
    holds H * W * C values).

    ``vmapped=False`` trains the experts one at a time (same losses, same result up to
    floating point; for the throughput benchmark). ``run_dir`` holds the training runs
    (checkpoints, metrics; default ``<out>.runs``): an interrupted build resumes there.

    Seeded once, first (``simsci.train.seed_everything(seed)``): the same seed and data
    give the same zoo, bit for bit (same device and thread count).
    """
    from simsci.train import seed_everything

    seed = seed_everything(seed)
    env, train, val_episodes = _zoo_environments(data, val)
    spec, window, batch_size = _zoo_spec(env, train, spec, window, batch_size)
    C = train.state_shape[-1]
    allx = torch.cat([x.reshape(-1, C) for x in train.episodes]).double()
    mean = allx.mean(0).tolist()
    std = allx.std(0).clamp_min(1e-8).tolist()
    run_dir = Path(run_dir) if run_dir is not None else Path(str(out) + ".runs")
    common = dict(batch_size=batch_size, lr=lr, device=device, progress=progress, seed=seed)

    def expert(n: int) -> ExpertZoo:  # n experts of the spec, stacked
        return ExpertZoo(spec.to_dict(), n, mean, std, seed=seed, window=window)

    t_start = t0 = time.perf_counter()
    pooled = expert(1)
    _train(
        pooled,
        WindowData(train.episodes, window, pooled=True),
        WindowData(val_episodes, window, pooled=True, full=True),
        steps=pool_steps,
        out_dir=run_dir / "pooled",
        **common,
    )
    t_pool = time.perf_counter() - t0
    start = {n: w.detach().cpu() for n, w in pooled.stacked().items()}
    t0 = time.perf_counter()
    weights = _train_experts(
        train, val_episodes, start, expert, spec=spec, window=window, steps=steps,
        run_dir=run_dir, vmapped=vmapped, common=common,
    )  # fmt: skip
    t_experts = time.perf_counter() - t0
    E = train.num_envs
    checker = expert(E)
    checker.load_stacked(weights)
    val_rmse = checker.rollout_rmse([x.float() for x in val_episodes]).cpu()
    t_total = time.perf_counter() - t_start
    record = {
        "spec": spec.to_dict(),
        "weights": weights,
        "pooled": start,
        "env_params": torch.as_tensor(train.params, dtype=torch.float64),
        "param_names": list(train.param_names),
        "val_rmse": val_rmse.float(),
        "persistence_rmse": persistence_rmse(val_episodes),
        "mean": torch.tensor(mean),
        "std": torch.tensor(std),
        "dt": float(env.dt),
        "system": str(env.system),
        "kind_of_data": str(env.kind),
        "state_shape": list(train.state_shape),
        "window": int(window),
        "train_file": str(env.path),
        "steps": int(steps),
        "pool_steps": int(pool_steps),
        "vmapped": bool(vmapped),
        "seconds": {"pooled": float(t_pool), "experts": float(t_experts), "total": t_total},
        "experts_per_minute": float(60.0 * E / max(t_experts, 1e-9)),
    }
    return save_zoo(out, record)


def _zoo_environments(data, val):
    """``build_zoo``'s data: the environments, their training part and each one's
    validation episodes (warning when an environment has none)."""
    if not isinstance(data, EnvData) and Path(data).is_dir():
        folder = Path(data)
        data = folder / "train.h5"
        if val is None and (folder / "val.h5").is_file():
            val = folder / "val.h5"
    env = data if isinstance(data, EnvData) else load_environments(data)
    train = env.subset("train")
    if train.num_envs != env.num_envs:
        raise ValueError(
            f"{env.path}: {env.num_envs - train.num_envs} environment(s) have no training "
            "episodes; every environment of a zoo needs some (`simsci dynadiff data` "
            "writes such files)"
        )
    if val is not None:
        venv = val if isinstance(val, EnvData) else load_environments(val)
        val_episodes = venv.reorder(
            train.params, f"the validation file must hold the environments of {env.path}"
        ).episodes
        missing = 0
    else:
        val_episodes = []
        for e, x in enumerate(env.episodes):
            keep = env.split[e] == "val"
            val_episodes.append(x[torch.as_tensor(keep)] if keep.any() else train.episodes[e])
        missing = sum(not (s == "val").any() for s in env.split)
    if missing:
        warnings.warn(
            f"{env.path}: {missing} of {env.num_envs} environments have no validation "
            "episodes; their validation error is measured on their training episodes",
            stacklevel=3,
        )
    return env, train, val_episodes


def _zoo_spec(env, train, spec, window, batch_size):
    """The expert architecture, rollout window and batch size of a zoo (``build_zoo``)."""
    if window is None:
        window = 4 if env.kind == "state" else 2
    if batch_size is None:
        batch_size = 16 if env.kind == "state" else 4
    C = train.state_shape[-1]
    default = default_spec(env.kind, C, env.system)
    if isinstance(spec, dict) and "kind" not in spec:  # overrides of the default, e.g. width
        spec = {**default.to_dict(), **spec}
    spec = default if spec is None else ExpertSpec.from_dict(spec)
    if spec.channels != C or (spec.kind == "mlp") != (env.kind == "state"):
        raise ValueError(
            f"expert spec {spec.to_dict()} does not fit {env.kind} data with states of "
            f"shape {train.state_shape}"
        )
    return spec, window, batch_size


def _train_experts(
    train, val_episodes, start, expert, *, spec, window, steps, run_dir, vmapped, common
) -> dict:
    """One expert per environment of ``train`` started at the pooled weights ``start``:
    all at once with ``torch.func.vmap`` (``vmapped``), else one after another (same
    losses; for the throughput benchmark). ``expert(n)`` makes ``n`` stacked experts.
    Returns the stacked weights."""
    if vmapped:
        zoo = expert(train.num_envs)
        zoo.load_stacked(start)
        _train(
            zoo,
            WindowData(train.episodes, window),
            WindowData(val_episodes, window, full=True),
            steps=steps,
            out_dir=run_dir / "experts",
            **common,
        )
        return {n: w.detach().cpu() for n, w in zoo.stacked().items()}
    parts = []
    for e in range(train.num_envs):
        one = expert(1)
        one.load_stacked(start)
        _train(
            one,
            WindowData([train.episodes[e]], window),
            WindowData([val_episodes[e]], window, full=True),
            steps=steps,
            out_dir=run_dir / f"expert-{e:04d}",
            **common,
        )
        parts.append({n: w.detach().cpu() for n, w in one.stacked().items()})
    return {n: torch.cat([p[n] for p in parts]) for n in spec.param_names()}
