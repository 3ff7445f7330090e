"""``generate``: simulate a system into a trajectory file (docs/format.md).

Design choices the task left open, and why:

- **One batched solve.** All episodes of a call are solved together on ``device``, on
  the shared grid ``t = 0, dt, ..., t_end``; ``batch_size`` only splits the batch to
  bound device memory. When ``batch_size`` is None the whole set is one batch unless
  its output (``n * L * prod(state_shape)`` values) passes 2**27 values (1 GiB in
  float64), in which case batches of that size are used.
- **Time origin.** With ``burn_in > 0`` each episode is integrated from 0 to ``burn_in``
  first and recorded from there; the stored ``t`` starts at 0 (time since the end of
  the burn-in). The systems here are autonomous, so nothing depends on absolute time.
- **Parameter grids.** ``params={"rho": [20, 28, 35]}`` (or ``"rho=20,28,35"``) is a
  full cartesian grid over the listed parameters (other parameters keep the system's
  values), with ``n`` episodes *per grid point*: the file holds ``n * G`` episodes, grid
  points in ``itertools.product`` order, episodes of one point contiguous. Every
  environment then gets the same number of episodes.
- **Random streams.** ``seed`` seeds a :class:`numpy.random.SeedSequence` from which
  independent streams are spawned for initial states, sampled parameters, splits,
  subsampling masks, observation noise and the SDE Brownian motions. Changing ``keep``
  therefore does not change the initial states, and initial states, parameters, splits,
  masks and noise do not depend on ``batch_size``; SDE paths (one seed per batch) and
  adaptive ODE steps (chosen for the whole batch) do. Same arguments, same device ->
  identical arrays.
- **Observation noise** is added after the simulation and before subsampling: Gaussian
  with standard deviation ``obs_noise * std_c`` on channel c, where ``std_c`` is the
  population standard deviation of channel c over all clean simulated values of the
  call (all episodes, all times; all ranks when a process group is initialised, this
  rank's episodes otherwise). The stds used are recorded in ``meta["obs_noise_std"]``.
- **Irregular subsampling.** ``keep`` < 1 keeps ``k = max(2, round(keep * L))`` time
  points per episode, chosen uniformly without replacement, sorted. With
  ``per_channel=True`` each channel independently keeps ``k`` points; the union of the
  chosen times is stored with ``mask`` (True where observed) and NaN in ``x`` elsewhere
  (rows with no observed channel are dropped by construction). ``per_channel=True``
  always writes ``mask``, even when ``keep == 1``.
- **Splits.** Exactly ``round(f_train * N)`` train and ``round(f_val * N)`` validation
  episodes (the rest test), assigned by a seeded permutation.
- **Memory.** The simulated trajectories are gathered in host memory (``n * L * D``
  values) before they are written, because the noise scale needs the whole data set.
- **Fields (PDE systems, kind="field").** ``dt`` is the *recording* interval (default
  the system's ``default_save_dt``) and ``step_size`` the solver's internal step
  (default the system's per-method step); each recording interval takes an integer
  number of internal steps (see :meth:`simsci.systems.PDESystem.simulate`), so saving
  every k-th internal step is ``dt = k * step_size``. Episodes store ``x`` as
  ``(T, *grid, C)`` with the initial field as the first frame, the grid coordinates in
  ``/static`` and the PDE parameters in ``/episodes/params``. ``save_resolution``
  solves on the system's grid and stores every s-th point per axis (exact on periodic
  grids, x_j = j L / N; the fine resolution must be a multiple of it). The time-point
  subsampling (``keep < 1``, ``per_channel``) and ``rtol``/``atol`` are ODE features
  and refused for fields. ``batch_size`` defaults so that one batch's fine-grid output
  stays under ``MAX_BATCH_VALUES`` values.
- **A system's own method** (a name in ``system.own_methods``, such as ``"exact"`` of
  ``linear_sde``) simulates the recorded grid directly: it takes no ``step_size`` and
  ``meta["solver_options"]`` is empty. SDE paths are then seeded per batch as above.
- **Distributed runs** (a ``torch.distributed`` process group is initialised, or the
  environment has ``WORLD_SIZE > 1`` and ``RANK``): ``out`` is a directory, rank r
  generates episodes ``[r N / W, (r + 1) N / W)`` of the N requested, with streams
  seeded from ``(seed, r)``, and writes ``out/part-0000r.h5``. In a single process the
  streams are seeded from ``seed`` alone.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from simsci._device import resolve_device
from simsci._seeding import check_split, split_ids
from simsci._seeding import generator as _generator
from simsci._version import __version__
from simsci.errors import SolverError, UnknownNameError, unknown_name
from simsci.integrate import SDE_METHODS, get_ode_method, get_sde_method
from simsci.systems._base import System
from simsci.systems._pde import PDESystem
from simsci.systems._registry import get

#: largest number of output values (B * L * prod(S)) solved in one batch by default.
MAX_BATCH_VALUES = 2**27

_STREAMS = ("initial", "params", "split", "keep", "noise", "sde")


def parse_param_spec(text: str) -> str | dict[str, list[float]]:
    """Parse the CLI's ``--params``: ``"default"``, ``"sample"`` or a grid.

    A grid is ``name=v1,v2,...`` assignments separated by ``;``, e.g.
    ``"rho=20,28,35"`` or ``"rho=20,28; sigma=10,12"`` -> ``{"rho": [20.0, 28.0, 35.0],
    "sigma": [10.0, 12.0]}``. Names are checked against the system by ``generate``.
    """
    if not isinstance(text, str):
        raise TypeError(f"--params must be a string, got {type(text).__name__}")
    stripped = text.strip()
    if stripped.lower() in ("default", "sample"):
        return stripped.lower()
    if not stripped:
        raise ValueError("--params is empty; use 'default', 'sample' or a grid like 'rho=20,28,35'")
    grid: dict[str, list[float]] = {}
    for piece in stripped.split(";"):
        piece = piece.strip()
        if not piece:
            continue
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.+)", piece)
        if match is None:
            raise ValueError(
                f"--params: cannot read {piece!r}; use 'default', 'sample' or assignments "
                "like 'rho=20,28,35' separated by ';' (e.g. 'rho=20,28;sigma=10')"
            )
        name, values = match.group(1), match.group(2)
        if name in grid:
            raise ValueError(f"--params: parameter {name!r} is given twice in {text!r}")
        parsed = []
        for item in values.split(","):
            item = item.strip()
            try:
                value = float(item)
            except ValueError:
                raise ValueError(
                    f"--params: {item!r} (for {name!r}) is not a number; write values as "
                    "comma-separated numbers, e.g. 'rho=20,28,35'"
                ) from None
            if not math.isfinite(value):
                raise ValueError(f"--params: {name}={item} is not finite")
            parsed.append(value)
        grid[name] = parsed
    return grid


def _is_fixed_step(method: str) -> bool:
    """Whether an ODE method steps with ``step_size``; an unknown name raises the
    registry's error (valid names, closest match) before any work is done."""
    return not get_ode_method(method).adaptive


def _positive(name: str, value, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    value = float(value)
    ok = value >= 0 if allow_zero else value > 0
    if not (math.isfinite(value) and ok):
        raise ValueError(
            f"{name} must be a finite number {'>= 0' if allow_zero else '> 0'}, got {value!r}"
        )
    return value


def _dist_info() -> tuple[int, int, bool]:
    """(rank, world_size, process group initialised)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), True
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world > 1 and "RANK" in os.environ:
        return int(os.environ["RANK"]), world, False
    return 0, 1, False


def _grid_rows(system: System, grid: Mapping, n: int) -> tuple[np.ndarray, list[dict]]:
    """Rows for a cartesian grid (n per point) and the list of grid points."""
    for key in grid:
        if key not in system.param_names:
            raise system._unknown_parameter(key)
    keys = list(grid)
    values = []
    for key in keys:
        v = grid[key]
        seq = [v] if np.ndim(v) == 0 else list(np.asarray(v, dtype=np.float64).ravel())
        if not seq:
            raise ValueError(f"params grid: no values given for {key!r}")
        values.append([float(x) for x in seq])
    points = [dict(zip(keys, combo)) for combo in itertools.product(*values)]
    base = system.params_tensor({k: [pt[k] for pt in points] for k in keys}).numpy()
    return np.repeat(base, n, axis=0), points


def _channel_std(x: np.ndarray, distributed: bool) -> np.ndarray:
    """Population std per last-axis channel over all other axes (all ranks if distributed)."""
    flat = x.reshape(-1, x.shape[-1]).astype(np.float64)
    stats = np.stack(
        [np.full(flat.shape[1], flat.shape[0], dtype=np.float64), flat.sum(0), (flat * flat).sum(0)]
    )
    if distributed:
        import torch.distributed as dist

        dev = torch.device("cpu")
        if dist.get_backend() == "nccl":
            dev = torch.device("cuda", torch.cuda.current_device())
        tensor = torch.as_tensor(stats, device=dev)
        dist.all_reduce(tensor)
        stats = tensor.cpu().numpy()
    count, total, total_sq = stats
    mean = total / count
    return np.sqrt(np.maximum(total_sq / count - mean * mean, 0.0))


def _to_jsonable(value):
    if isinstance(value, dict):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value


def generate(
    system: str | System,
    n: int,
    *,
    t_end: float | None = None,
    dt: float | None = None,
    out: str | os.PathLike,
    keep: float = 1.0,
    per_channel: bool = False,
    obs_noise: float = 0.0,
    params="default",
    seed: int = 0,
    device=None,
    method: str | None = None,
    dtype: torch.dtype = torch.float64,
    split: Sequence[float] = (0.8, 0.1, 0.1),
    burn_in: float = 0.0,
    batch_size: int | None = None,
    progress: bool = True,
    compression: str | None = None,
    step_size: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    save_resolution=None,
) -> Path:
    """Simulate ``n`` trajectories of ``system`` and write them as one trajectory file.

    ``system``: a registry name or a :class:`System` instance. Episodes are recorded on
    ``t = 0, dt, ..., t_end`` (defaults: the system's ``default_dt`` and
    ``default_t_end``; ``t_end`` must be a multiple of ``dt``).

    ``params``: ``"default"`` (the system's values), ``"sample"`` (uniform over
    ``param_ranges``, seeded), an ``(n, P)`` array, a dict name -> list of values (a full
    grid, ``n`` episodes per grid point) or a grid string (``"rho=20,28,35"``, see
    :func:`parse_param_spec`).

    ``keep`` in (0, 1]: fraction of time points kept per episode (``per_channel``: per
    channel, with a ``mask``). ``obs_noise``: additive Gaussian noise, ``obs_noise`` times
    each channel's std over the data. ``split``: train/val/test fractions per episode.
    ``burn_in``: time integrated and discarded before recording.

    Solver: ``method`` (default the system's ``default_method``); fixed-step ODE methods
    and SDE methods step with ``step_size`` (default ``dt``); adaptive ODE methods take
    ``rtol``/``atol`` (the integrator's defaults when None). ``device`` None/"auto" is
    CUDA when available. ``batch_size`` bounds the episodes per solve (see the module
    docstring). Returns the written path (this rank's shard in a distributed run).

    PDE systems (kind "field"): ``dt`` is the recording interval (default
    ``default_save_dt``), ``step_size`` the internal step, ``save_resolution`` (int or one
    per axis) stores a strided coarse copy of the fine solve; see the module docstring.

    Raises :class:`simsci.errors.SolverError` naming the failing episodes when the solver
    fails or a trajectory leaves the floating-point range.
    """
    spec = _check(
        system,
        n,
        t_end=t_end,
        dt=dt,
        out=out,
        keep=keep,
        per_channel=per_channel,
        obs_noise=obs_noise,
        params=params,
        seed=seed,
        device=device,
        method=method,
        dtype=dtype,
        split=split,
        burn_in=burn_in,
        batch_size=batch_size,
        progress=progress,
        compression=compression,
        step_size=step_size,
        rtol=rtol,
        atol=atol,
        save_resolution=save_resolution,
    )
    return _run(spec)


# ------------------------------------------------------------------ the spec
@dataclasses.dataclass(frozen=True)
class GenerateSpec:
    """``generate``'s arguments, checked and normalised (their meaning: its docstring).

    ``steps``: recorded intervals (0 for a steady problem, whose one frame is at t = 0);
    ``params``: ``"default"``, ``"sample"``, a grid dict or an array (a grid string is
    parsed); ``method``: resolved, with ``own_method`` (the system simulates itself)
    and ``fixed_step`` (an ODE method that steps with ``step_size``); ``strides``: per
    grid axis from the solve to the stored resolution (fields only, else None).
    """

    system: System
    n: int
    out: str | os.PathLike
    t_end: float
    dt: float
    steps: int
    burn_in: float
    keep: float
    per_channel: bool
    obs_noise: float
    params: object
    seed: int
    device: torch.device
    method: str
    own_method: bool
    fixed_step: bool
    dtype: torch.dtype
    split: tuple[float, float, float]
    batch_size: int | None
    progress: bool
    compression: str | None
    step_size: float | None
    rtol: float | None
    atol: float | None
    strides: tuple[int, ...] | None

    @property
    def is_field(self) -> bool:
        return isinstance(self.system, PDESystem)

    @property
    def length(self) -> int:
        """Recorded time points per episode."""
        return self.steps + 1

    @property
    def np_dtype(self) -> type:
        return np.float64 if self.dtype == torch.float64 else np.float32

    @property
    def t_rec(self) -> np.ndarray:
        """The recorded times ``0, dt, ..., t_end``."""
        return self.dt * np.arange(self.length, dtype=np.float64)

    @property
    def t_solve(self) -> np.ndarray:
        """The solver's times: the recorded ones, after ``burn_in`` when it is > 0."""
        t_rec = self.t_rec
        return np.concatenate([[0.0], self.burn_in + t_rec]) if self.burn_in > 0 else t_rec

    @property
    def stored_shape(self) -> tuple[int, ...]:
        """A stored state's shape: the system's, strided down to ``save_resolution``."""
        shape = self.system.state_shape
        if self.strides is None:
            return shape
        return tuple(-(-m // s) for m, s in zip(shape[:-1], self.strides)) + (shape[-1],)


def _check(
    system,
    n,
    *,
    t_end,
    dt,
    out,
    keep,
    per_channel,
    obs_noise,
    params,
    seed,
    device,
    method,
    dtype,
    split,
    burn_in,
    batch_size,
    progress,
    compression,
    step_size,
    rtol,
    atol,
    save_resolution,
) -> GenerateSpec:
    """Check and normalise ``generate``'s arguments, in the order its errors name them."""
    if isinstance(system, str):
        system = get(system)
    elif not isinstance(system, System):
        raise TypeError(f"system must be a registry name or a System, got {type(system).__name__}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer (episodes), got {n!r}")
    t_end, dt, steps = _check_grid(system, t_end, dt)
    burn_in = _positive("burn_in", burn_in, allow_zero=True)
    keep = _positive("keep", keep)
    if keep > 1.0:
        raise ValueError(f"keep must lie in (0, 1] (fraction of time points kept), got {keep}")
    obs_noise = _positive("obs_noise", obs_noise, allow_zero=True)
    if not isinstance(per_channel, bool):
        raise TypeError(f"per_channel must be a bool, got {per_channel!r}")
    strides = _check_field_options(system, keep, per_channel, rtol, atol, save_resolution)
    if per_channel and len(system.state_shape) != 1:
        raise ValueError(
            f"per_channel=True needs a vector state; {system.name!r} has state shape "
            f"{system.state_shape}"
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    fractions = check_split(split)
    if batch_size is not None and (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, (int, np.integer))
        or batch_size < 1
    ):
        raise ValueError(f"batch_size must be a positive integer or None, got {batch_size!r}")
    if step_size is not None:
        step_size = _positive("step_size", step_size)
    device = resolve_device(device)
    method, own_method, fixed_step = _check_method(system, method, step_size)
    if isinstance(params, str) and params not in ("default", "sample"):
        params = parse_param_spec(params)
    return GenerateSpec(
        system=system,
        n=int(n),
        out=out,
        t_end=t_end,
        dt=dt,
        steps=steps,
        burn_in=burn_in,
        keep=keep,
        per_channel=per_channel,
        obs_noise=obs_noise,
        params=params,
        seed=int(seed),
        device=device,
        method=method,
        own_method=own_method,
        fixed_step=fixed_step,
        dtype=dtype,
        split=fractions,
        batch_size=None if batch_size is None else int(batch_size),
        progress=progress,
        compression=compression,
        step_size=step_size,
        rtol=rtol,
        atol=atol,
        strides=strides,
    )


def _check_grid(system: System, t_end, dt) -> tuple[float, float, int]:
    """(t_end, dt, steps) of the recorded grid; a steady problem has one frame at t = 0."""
    if getattr(system, "steady", False):
        # a steady problem (Darcy): one frame per episode at t = 0, no time grid
        if t_end is not None or dt is not None:
            raise ValueError(
                f"{system.name!r} is a steady problem: each episode is one frame at t = 0; "
                f"drop t_end/dt (got t_end={t_end}, dt={dt})"
            )
        return 0.0, 1.0, 0
    t_end = _positive("t_end", system.default_t_end if t_end is None else t_end)
    if dt is None:
        dt = system.default_save_dt if isinstance(system, PDESystem) else system.default_dt
    dt = _positive("dt", dt)
    steps_f = t_end / dt
    steps = round(steps_f)
    if steps < 1 or abs(steps - steps_f) > 1e-6 * max(1.0, steps_f):
        raise ValueError(
            f"t_end must be a positive multiple of dt: t_end={t_end}, dt={dt} gives "
            f"{steps_f:g} steps; choose t_end = k * dt"
        )
    return t_end, dt, steps


def _check_field_options(
    system: System, keep, per_channel, rtol, atol, save_resolution
) -> tuple[int, ...] | None:
    """The strides to ``save_resolution`` for a PDE system (None for an ODE/SDE system),
    refusing the ODE-only options for a field and ``save_resolution`` for the others."""
    if not isinstance(system, PDESystem):
        if save_resolution is not None:
            raise ValueError(
                f"save_resolution applies to PDE systems (kind 'field'); {system.name!r} is "
                "an ODE/SDE system"
            )
        return None
    for name, bad, why in (
        ("keep", keep < 1.0, f"keep={keep}"),
        ("per_channel", per_channel, "per_channel=True"),
        ("rtol", rtol is not None, f"rtol={rtol}"),
        ("atol", atol is not None, f"atol={atol}"),
    ):
        if bad:
            raise ValueError(
                f"{why} is an ODE option: {system.name!r} is a PDE (kind 'field') whose "
                f"frames are stored on a regular time grid with a fixed-step solver. Drop "
                f"{name}; thin the time grid with dt (a multiple of step_size) and the "
                "space grid with save_resolution"
            )
    return _field_strides(system, save_resolution)


def _check_method(system: System, method, step_size) -> tuple[str, bool, bool]:
    """(method, the system's own method, a fixed-step ODE method); an unknown name fails
    here, before any work is done."""
    method = method or system.default_method
    if method in system.own_methods:
        # the system simulates itself (e.g. linear_sde's exact transitions): no solver step
        if step_size is not None:
            raise ValueError(
                f"step_size applies to the integrators; method {method!r} of {system.name!r} "
                "is the system's own (exact transitions between the recorded times) and takes "
                f"no step. Drop step_size, or choose an integrator method (got step_size="
                f"{step_size})"
            )
        return method, True, False
    if isinstance(system, PDESystem):
        return system._check_method(method), False, False
    if system.is_sde:
        try:
            get_sde_method(method)
        except UnknownNameError:
            if not system.own_methods:
                raise
            valid = [*SDE_METHODS, *system.own_methods]
            raise unknown_name(f"SDE method (for {system.name!r})", method, valid) from None
        return method, False, False
    return method, False, _is_fixed_step(method)


# ------------------------------------------------------------------- the run
@dataclasses.dataclass(frozen=True)
class _Episodes:
    """This rank's share ``[start, stop)`` of the ``total`` episodes and their parameter
    rows; ``params_mode`` and ``grid_points`` as recorded in the meta."""

    rows: np.ndarray
    total: int
    start: int
    stop: int
    params_mode: str
    grid_points: list[dict] | None

    @property
    def count(self) -> int:
        return self.stop - self.start


@dataclasses.dataclass(frozen=True)
class _Observations:
    """What the observation step drew: the noise scale per channel (None without noise),
    the kept points per episode ``k``, per-channel ``masks`` or the ``kept`` indices (or
    neither: every point kept), and the split labels."""

    noise_std: np.ndarray | None
    k: int
    masks: np.ndarray | None
    kept: np.ndarray | None
    splits: np.ndarray


def _run(spec: GenerateSpec) -> Path:
    """Simulate this rank's episodes of ``spec`` in batches, observe them, write them."""
    rank, world, distributed = _dist_info()
    root = np.random.SeedSequence([spec.seed, rank] if world > 1 else spec.seed)
    streams = dict(zip(_STREAMS, root.spawn(len(_STREAMS))))
    episodes = _episodes(spec, rank, world, streams["params"])
    batch_size = _batch_size(spec, episodes.count)
    options = _solver_options(spec)
    data = _simulate(spec, episodes, batch_size, options, streams, spec.progress and rank == 0)
    observed = _observe(spec, data, streams, distributed)
    meta = _meta(spec, episodes, observed, batch_size, options, rank, world)
    if world > 1:
        from simsci import data as sdata

        path = sdata.rank_shard_path(spec.out) if distributed else _env_shard_path(spec.out, rank)
    else:
        path = Path(spec.out)
    return _write(path, spec, episodes, data, observed, meta)


def _episodes(spec: GenerateSpec, rank: int, world: int, params_stream) -> _Episodes:
    """This rank's episodes and parameter rows (sampled from ``params_stream``)."""
    system, n, params = spec.system, spec.n, spec.params
    grid_points = None
    if isinstance(params, str):
        total = n
        params_mode = params
    elif isinstance(params, Mapping):
        all_rows, grid_points = _grid_rows(system, params, n)
        total = all_rows.shape[0]
        params_mode = "grid"
    else:
        all_rows = system.params_tensor(params).numpy()
        if all_rows.shape[0] != n:
            raise ValueError(
                f"params array has {all_rows.shape[0]} rows but n={n}; give one row per episode"
            )
        total = n
        params_mode = "array"
    start, stop = rank * total // world, (rank + 1) * total // world
    count = stop - start
    if count < 1:
        raise ValueError(
            f"rank {rank} of {world} gets no episodes (N={total}); ask for at least "
            f"{world} episodes"
        )
    if params_mode == "default":
        rows = system.params_tensor(count).numpy()
    elif params_mode == "sample":
        rows = system.sample_params(count, generator=_generator(params_stream)).numpy()
    else:
        rows = all_rows[start:stop]
    return _Episodes(rows, total, start, stop, params_mode, grid_points)


def _batch_size(spec: GenerateSpec, count: int) -> int:
    """Episodes per solve: ``spec.batch_size``, else as many as keep one batch's output
    (on the solve grid) under ``MAX_BATCH_VALUES`` values."""
    if spec.batch_size is not None:
        return spec.batch_size
    values_per_episode = spec.length * math.prod(spec.system.state_shape)
    return max(1, min(count, MAX_BATCH_VALUES // values_per_episode))


def _solver_options(spec: GenerateSpec) -> dict:
    """The keywords passed to ``system.simulate`` besides the method (and SDE seed)."""
    options: dict = {}
    # a system's own method (linear_sde's "exact") takes no solver step
    if spec.is_field:
        if spec.step_size is not None:
            options["dt"] = spec.step_size
    elif spec.system.is_sde and not spec.own_method:
        options["dt"] = spec.step_size or spec.dt
    elif spec.fixed_step and not spec.own_method:
        options["step_size"] = spec.step_size or spec.dt
    if spec.rtol is not None:
        options["rtol"] = float(spec.rtol)
    if spec.atol is not None:
        options["atol"] = float(spec.atol)
    return options


def _simulate(
    spec: GenerateSpec, episodes: _Episodes, batch_size: int, options: dict, streams, show: bool
) -> np.ndarray:
    """``(count, L, *stored_shape)``: this rank's episodes, solved ``batch_size`` at a time
    on ``spec.device`` from initial states drawn on the CPU (``show``: a progress bar)."""
    system, count = spec.system, episodes.count
    x0_all = system._sample_initial(count, _generator(streams["initial"]), torch.device("cpu"))
    n_batches = math.ceil(count / batch_size)
    sde_seeds = streams["sde"].generate_state(n_batches, dtype=np.uint32)
    data = np.empty((count, spec.length, *spec.stored_shape), dtype=spec.np_dtype)
    bar = None
    if show:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_batches, desc=f"generate {system.name}", unit="batch")
    try:
        for b in range(n_batches):
            b0, b1 = b * batch_size, min(count, (b + 1) * batch_size)
            xs = _solve_batch(spec, episodes, b0, b1, x0_all[b0:b1], options, int(sde_seeds[b]))
            data[b0:b1] = xs.detach().cpu().numpy()
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return data


def _solve_batch(
    spec: GenerateSpec, episodes: _Episodes, b0: int, b1: int, x0, options: dict, sde_seed: int
) -> torch.Tensor:
    """The recorded (and strided) states of this rank's episodes ``b0:b1``; a solver
    failure or a non-finite trajectory raises ``SolverError`` naming the episodes."""
    system, method, rows = spec.system, spec.method, episodes.rows[b0:b1]
    p = torch.as_tensor(rows, device=spec.device, dtype=spec.dtype)
    x0 = x0.to(device=spec.device, dtype=spec.dtype)
    t = torch.as_tensor(spec.t_solve, device=spec.device, dtype=spec.dtype)
    with torch.no_grad():
        if system.burn_in > 0:
            x0 = system._burn_in(x0, p)
        try:
            if system.is_sde:
                xs = system.simulate(x0, t, p, method=method, seed=sde_seed, **options)
            else:
                xs = system.simulate(x0, t, p, method=method, **options)
        except SolverError as exc:
            local = exc.samples or list(range(b1 - b0))
            raise _episode_error(
                system, exc, episodes.start + b0, local, rows, exc.time, method
            ) from exc
    if spec.burn_in > 0:
        xs = xs[:, 1:]
    finite = torch.isfinite(xs.reshape(xs.shape[0], -1)).all(dim=1)
    if not bool(finite.all()):
        bad = torch.nonzero(~finite).flatten().tolist()
        raise _episode_error(system, None, episodes.start + b0, bad, rows, None, method)
    if spec.strides is not None:
        xs = xs[(slice(None), slice(None), *(slice(None, None, s) for s in spec.strides))]
    return xs


def _observe(spec: GenerateSpec, data: np.ndarray, streams, distributed: bool) -> _Observations:
    """Add the observation noise to ``data`` (in place), draw the kept points or
    per-channel masks and the split labels."""
    count, length = data.shape[:2]
    noise_std = None
    if spec.obs_noise > 0:
        noise_std = _channel_std(data, distributed)
        gen_noise = _generator(streams["noise"])
        noise = torch.randn(data.shape, generator=gen_noise, dtype=torch.float64).numpy()
        data += (noise * (spec.obs_noise * noise_std)).astype(spec.np_dtype)
    k = min(length, max(2, round(spec.keep * length)))
    gen_keep = _generator(streams["keep"])
    masks = None
    kept = None
    if spec.per_channel:
        shape = (count, length, data.shape[-1])
        scores = torch.rand(shape, generator=gen_keep, dtype=torch.float64)
        kth = scores.kthvalue(k, dim=1, keepdim=True).values
        masks = (scores <= kth).numpy()
    elif k < length:
        scores = torch.rand((count, length), generator=gen_keep, dtype=torch.float64)
        kept = np.sort(scores.argsort(dim=1)[:, :k].numpy(), axis=1)
    splits = split_ids(count, spec.split, _generator(streams["split"]))
    return _Observations(noise_std, k, masks, kept, splits)


def _meta(
    spec: GenerateSpec,
    episodes: _Episodes,
    observed: _Observations,
    batch_size: int,
    options: dict,
    rank: int,
    world: int,
) -> dict:
    """The file's ``meta``: the arguments, the solver, the noise scale and this rank's share."""
    system, noise_std = spec.system, observed.noise_std
    meta = {
        "generator": "simsci.systems.generate",
        "simsci_version": __version__,
        "system": system.config(),
        "n": spec.n,
        "episodes": episodes.total,
        "params_mode": episodes.params_mode,
        "grid": episodes.grid_points,
        "t_end": spec.t_end,
        "dt": spec.dt,
        "steps": spec.steps,
        "burn_in": spec.burn_in,
        "keep": spec.keep,
        "kept_per_episode": observed.k,
        "per_channel": spec.per_channel,
        "obs_noise": spec.obs_noise,
        "obs_noise_std": None if noise_std is None else noise_std.tolist(),
        "seed": spec.seed,
        "method": spec.method,
        "solver_options": options,
        "split": list(spec.split),
        "dtype": str(spec.dtype).replace("torch.", ""),
        "device": str(spec.device),
        "batch_size": batch_size,
        "rank": rank,
        "world_size": world,
        "episode_range": [episodes.start, episodes.stop],
    }
    if spec.is_field:
        meta["resolution"] = list(system.resolution)
        meta["save_resolution"] = list(spec.stored_shape[:-1])
        meta["domain"] = list(system.domain)
        meta["step_size"] = spec.step_size
    return meta


def _write(
    path: Path,
    spec: GenerateSpec,
    episodes: _Episodes,
    data: np.ndarray,
    observed: _Observations,
    meta: dict,
) -> Path:
    """Write the observed episodes to ``path`` (unobserved values NaN under a mask)."""
    from simsci import data as sdata

    system, t_rec, np_dtype = spec.system, spec.t_rec, spec.np_dtype
    static = system.static() or None
    if spec.is_field:
        coords = system.coords().items()
        static = {k: v[:: spec.strides[i]] for i, (k, v) in enumerate(coords)}
    names = {"x": list(system.state_names), "params": list(system.param_names)}
    with sdata.TrajectoryWriter(
        path,
        kind=system.kind,
        system=system.name,
        meta=_to_jsonable(meta),
        names=names,
        static=static,
        compression=spec.compression,
    ) as writer:
        for i in range(episodes.count):
            x = data[i]
            t = t_rec
            episode = {"params": episodes.rows[i], "split": int(observed.splits[i])}
            if observed.masks is not None:
                m = observed.masks[i]
                rows_kept = m.any(axis=-1)
                x = np.where(m, x, np.nan)[rows_kept].astype(np_dtype, copy=False)
                episode["mask"] = m[rows_kept]
                t = t_rec[rows_kept]
            elif observed.kept is not None:
                x = x[observed.kept[i]]
                t = t_rec[observed.kept[i]]
            episode["t"] = t
            episode["x"] = x
            writer.append(episode)
    return writer.path


def _field_strides(system: PDESystem, save_resolution) -> tuple[int, ...]:
    """Stride per axis from the solve resolution down to ``save_resolution``."""
    fine = system.resolution
    if save_resolution is None:
        return (1,) * len(fine)
    try:
        coarse = system._check_resolution(save_resolution)
    except ValueError as exc:
        raise ValueError(f"save_resolution: {exc}") from None
    if not system.periodic:
        # node grids include both boundaries: every s-th node keeps them when
        # (fine - 1) is a multiple of (coarse - 1)
        bad = [a for a, (f, c) in enumerate(zip(fine, coarse)) if c > f or (f - 1) % (c - 1)]
        if bad:
            raise ValueError(
                f"save_resolution {coarse} must satisfy (fine - 1) % (coarse - 1) == 0 on "
                f"every axis of the node grid {fine} (boundary nodes are kept); e.g. "
                f"{tuple((f - 1) // 2 + 1 for f in fine)}"
            )
        return tuple((f - 1) // (c - 1) for f, c in zip(fine, coarse))
    bad = [a for a, (f, c) in enumerate(zip(fine, coarse)) if c > f or f % c]
    if bad:
        raise ValueError(
            f"save_resolution {coarse} must divide the solve resolution {fine} on every axis "
            "(stored points are every s-th grid point, exact on periodic grids); choose a "
            f"divisor, e.g. {tuple(f // 2 for f in fine)}, or solve at a multiple via "
            f"get({system.name!r}, resolution=...)"
        )
    return tuple(f // c for f, c in zip(fine, coarse))


def _env_shard_path(out, rank: int) -> Path:
    """``out/part-0000r.h5`` when ranks come from the environment (no process group)."""
    from simsci import data as sdata

    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    return sdata.shard_path(directory, rank)


def _episode_error(system, exc, offset, local, rows, time, method) -> SolverError:
    episodes = [offset + int(i) for i in local]
    shown = ", ".join(map(str, episodes[:10])) + (" ..." if len(episodes) > 10 else "")
    first = dict(zip(system.param_names, (float(v) for v in rows[int(local[0])])))
    when = f" at t={time:g}" if isinstance(time, (int, float)) else ""
    if exc is not None:
        what = f"the solver failed{when} (its sample i is episode {offset} + i of this call): {exc}"
    else:
        what = "the trajectories left the floating-point range (inf/NaN)"
    return SolverError(
        f"generate({system.name!r}): {len(episodes)} episode(s) failed: {shown}; parameters "
        f"of episode {episodes[0]}: {first}. Use a smaller dt/step_size, another method than "
        f"{method!r}, or narrower parameter ranges. Details: {what}",
        samples=episodes,
        time=time,
    )
