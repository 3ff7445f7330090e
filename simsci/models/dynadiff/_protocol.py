r"""Multi-environment data for DynaDiff: the CoDA/LEADS protocols of five systems.

An *environment* is one setting of a system's parameters. A :class:`Protocol` says which
parameters vary, the training grid (one expert predictor per grid point), the held-out
test environments inside the grid's range (interpolation, "in-domain") and outside it
(extrapolation, "out-of-domain"), the time window, the episodes per environment and the
context length a prompter sees. :func:`make_environments` simulates a protocol into
trajectory files with :func:`simsci.systems.generate`; :func:`env_ids` maps the rows of a
file's ``/episodes/params`` back to environment indices.

Sources: Kirchmeyer et al. (2022), "Generalizing to New Physical Systems via
Context-Informed Dynamics Model" (CoDA), ICML; Yin et al. (2021), "LEADS: Learning
Dynamical Systems that Generalize Across Environments", NeurIPS.

The protocols (``PROTOCOLS``; frames = ``t_end / dt + 1``; ctx = ``context_steps``;
episodes per environment train / val / test):

- ``lotka_volterra``: beta, delta in linspace(0.5, 1, 9) (81 environments), alpha =
  gamma = 0.5; 6 in-domain, 6 out-of-domain; T = 10, dt = 0.5 (21 frames), ctx 10;
  8 / 2 / 8.
- ``glycolytic_oscillator``: k1 in linspace(80, 100, 8), K1 in linspace(0.5, 1, 8) (64);
  4 + 4 held out; T = 1, dt = 0.05 (21 frames), ctx 10; 8 / 2 / 8.
- ``damped_pendulum``: g in linspace(4, 16, 8), damping in linspace(0.1, 0.5, 8) (64),
  L = 1; 4 + 4 held out; T = 10, dt = 0.1 (101 frames), ctx 40; 8 / 2 / 8.
- ``gray_scott`` (32 x 32, box 0.5): F in (0.03, 0.04, 0.05), k in (0.052, 0.055,
  0.058) (9); 3 + 3 held out; T = 300, dt = 20 (16 frames), ctx 8; 4 / 1 / 2.
- ``navier_stokes_2d`` (32 x 32, unforced): nu in linspace(8e-4, 1.2e-3, 7) (7); 3 + 3
  held out; T = 10, dt = 1 (11 frames), ctx 7; 16 / 2 / 2.

Design choices the task left open, and why:

- **Dense grids.** A weight-space generator interpolates between experts, so the zoo
  must cover the range: the ODE grids have 64-81 points (issue 24; 5 x 5 and 4 x 4
  before). Lotka-Volterra has 9 points per axis, so its quick grid (end points and the
  middle, 0.75) is the one the tests and the tour always used; the glycolytic
  oscillator and the pendulum have 8, which keeps every in-domain coordinate off the
  grid lines (at least 3% of a spacing from the nearest; with 9, k1 = 82.5 would lie on
  one). The field grids stay small because each field expert costs minutes to train on
  one CPU thread (see the table of zoo build times below).
- **Lotka-Volterra** follows CoDA: alpha = gamma = 0.5 fixed, (beta, delta) on a 9 x 9
  grid over [0.5, 1]^2 (CoDA's is 5 x 5); in-domain points drawn uniformly in
  (0.5, 1)^2 (numpy ``default_rng(2022)``, rounded to 3 decimals, redrawn when within
  5% of a grid spacing of a grid line); out-of-domain points have beta and/or delta in
  [0.3, 0.45] or [1.05, 1.2]. CoDA draws initial states uniformly in [1, 3]^2; simsci's
  system draws them in [0.5, 4.5]^2 and :func:`~simsci.systems.generate` takes no
  initial states, so the protocol keeps simsci's distribution (the wider box means some
  orbits come close to the axes: populations down to ~1e-4 over T = 10).
- **Glycolytic oscillator** follows CoDA's (k1, K1) ranges on an 8 x 8 grid; the twelve
  other parameters keep the system's values (Daniels & Nemenman). T = 1 at dt = 0.05
  (the system's own default window is 5 at 0.01): on [0, 1] every species moves by
  10-190% of its mean, so one window is far from trivial. Held-out points are
  stratified (one uniform draw per quadrant of the range) so four points cover it.
- **Damped pendulum**, LEADS style: L = 1 fixed, so g is the squared natural frequency
  omega_0^2 in [4, 16] (periods 1.6-3.1 s, up to ~3.7 s at the largest amplitude
  pi/2), damping in [0.1, 0.5]. dt = 0.1 and a 40-step context (3.9 s) so one context
  window holds a full swing of the slowest environment; T = 10 (101 frames).
  Out-of-domain g in [2, 3.5] or [17, 20], damping in [0.02, 0.08] or [0.55, 0.7].
- **Gray-Scott** at 32 x 32 with Pearson's diffusivities needs a small box: at L = 0.5
  (dx = 0.016) a 32-point solve stays within 8% of a 128-point solve over the window
  from a smooth state, while at L = 1 (dx = 0.031) it drifts by up to 38%. Frames every 20
  time units from the seeded squares (no burn-in) to T = 300: 16 frames, a relative
  change of 1-24% per frame (median 5-14%), and environments differ by 20-57% (relative
  L2 at T = 300, same initial state), so F and k both matter. The 3 x 3 grid lies inside
  simsci's ``param_ranges``, in the k range where patterns keep moving (k >= 0.06 freezes
  into spots, k = 0.065 at F = 0.03 dies out). Solver: the system's ETDRK4, step 1.
  The sharp initial squares leave small spectral undershoots (values down to about
  -0.02) on the 32-point grid.
- **Navier-Stokes** follows CoDA's viscosities, window and initial fields: nu in
  linspace(8e-4, 1.2e-3, 7), T = 10, frames every 1 (11 frames), FNO's initial fields,
  solved at 32 x 32 (a 32-point solve of a 32-mode initial field matches a 128-point
  solve to 1e-3). In-domain nu 8.5e-4, 1.05e-3, 1.15e-3 (a quarter spacing from the
  grid); out-of-domain 6e-4, 7e-4, 1.4e-3. **Unforced** (forcing = 0), unlike CoDA's
  ``0.1 (sin 2 pi (x + y) + cos 2 pi (x + y))``: a fixed forcing field is not
  translation-invariant, and the experts (convolutions and Fourier layers on the torus,
  no position input) are, so they cannot represent it; with it, the forcing dominates
  the change between frames (it adds about 0.1 of vorticity per frame, the whole
  frame-to-frame change) and experts trained on it rolled out worse than persistence
  (ratio 1.37 median). Unforced, the vorticity decays (pointwise std 0.18 -> 0.10 over
  the window) and the experts beat persistence by far (ratio ~0.06). 16 training and 2
  validation episodes per environment (CoDA's 4 / 1 let an expert memorise its 44
  frames: training MSE 1e-4, validation 1.8 in normalised units). A position-aware
  expert (FNO's grid channels) would allow the forcing back.
- **Validation episodes.** ``generate``'s split is one seeded permutation over the whole
  file (exact counts, not per environment), so it cannot promise every environment a
  validation episode. Validation episodes therefore go to their own file, ``val.h5``,
  made by ``generate`` with the same training grid, ``n_val_per_env`` episodes per
  environment and an independent seed. Splits: train.h5 all 0 (train), val.h5 all 1,
  in_domain.h5 and out_of_domain.h5 all 2 (test).
- **Episode order.** In every file the episodes of one environment are contiguous and
  the environments come in :meth:`Protocol.environments` order (``itertools.product``
  over ``varied`` for the grid, list order for the held-out points), which is
  ``generate``'s grid order; :func:`env_ids` recovers the index from the parameters, so
  readers never rely on the order.
- **Seeds.** The four files get independent seeds spawned from ``SeedSequence(seed)``,
  so initial states never repeat between train, val and test.
- **Meta.** ``generate`` takes no extra meta, so the files do not name the protocol;
  ``meta["system"]`` (with the fixed parameters), ``meta["grid"]`` (train/val) and
  ``/episodes/params`` describe the environments completely.
- **quick** (:meth:`Protocol.quick`): each varied axis keeps its end points and, when it
  has more than three values, its middle one (9 x 9 and 8 x 8 -> 3 x 3, 3 x 3 -> 2 x 2,
  7 -> 3); the range, so every held-out point's role, is unchanged; two
  held-out points of each kind, 2 / 2 / 2 episodes per environment, same time window.

Measured wall time of ``make_environments(name, out, device="cpu")`` at full size on
this machine's CPU, one thread (``OMP_NUM_THREADS=1``, float64, a 2-core machine shared
with other jobs; one run each, ``benchmarks/bench_dynadiff_zoo.py --part quality``), and
of the zoo built on it with ``build_zoo``'s defaults (1500 pooled and 1500 expert steps,
the same bench; expert / persistence: the median and the largest ratio of validation
rollout RMSE to persistence RMSE, see :mod:`._zoo`):

=====================  ==========  ========  =====  ==========  ================
system                 episodes    data (s)  zoo    zoo (s)     expert / persist.
=====================  ==========  ========  =====  ==========  ================
lotka_volterra         810 + 96    0.31      81     56          0.066, 0.35
glycolytic_oscillator  640 + 64    1.5       64     47          0.17, 1.30
damped_pendulum        640 + 64    0.82      64     52          0.012, 0.23
gray_scott             45 + 12     1.5       9      448         0.058, 0.071
navier_stokes_2d       126 + 12    48        7      458         0.045, 0.060
=====================  ==========  ========  =====  ==========  ================

(episodes: train + val, then in-domain + out-of-domain.)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from simsci.errors import unknown_name
from simsci.models.dynadiff._prompter import MIN_CONTEXT_STEPS

__all__ = [
    "PROTOCOLS",
    "SPLITS",
    "Protocol",
    "env_ids",
    "get_protocol",
    "make_environments",
]

#: the environment sets of a protocol, as taken by :meth:`Protocol.environments`
#: ("val" is an alias of "train": validation episodes come from the training grid)
SPLITS = ("train", "in_domain", "out_of_domain")
_WHICH = (*SPLITS, "val")

#: files written by :func:`make_environments`, with the split label of their episodes
_FILES = {
    "train": (1.0, 0.0, 0.0),
    "val": (0.0, 1.0, 0.0),
    "in_domain": (0.0, 0.0, 1.0),
    "out_of_domain": (0.0, 0.0, 1.0),
}

#: relative tolerance (of the parameter's magnitude) for matching a row to an environment
_MATCH_RTOL = 1e-6


def _system_class(name: str):
    from simsci.systems import SYSTEMS

    cls = SYSTEMS.get(name)
    if cls is None:
        raise unknown_name("system", name, SYSTEMS)
    return cls


def _positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"Protocol: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _real(where: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"Protocol: {where} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"Protocol: {where} must be finite, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Protocol:
    """A multi-environment protocol: which parameters vary, where, and how much data.

    ``system``: a registry name; ``system_options``: options for
    :func:`simsci.systems.get` (``resolution``, ``domain``, ...); ``fixed``: parameter
    values pinned by the protocol (the others keep the system's defaults).
    ``varied``: the parameter names that define an environment; ``train_grid``: name ->
    strictly increasing values (the training environments are their cartesian product);
    ``in_domain``: held-out points strictly inside the grid's range and off the grid;
    ``out_of_domain``: held-out points with at least one parameter outside the range.

    Episodes are recorded on ``t = 0, dt, ..., t_end`` (``frames = t_end / dt + 1``);
    ``n_train_per_env`` / ``n_val_per_env`` (>= 2: a context and a query, as the
    validation sweep scores them) episodes per training environment,
    ``n_test_per_env`` (>= 2) per held-out environment;
    ``context_steps`` (MIN_CONTEXT_STEPS <= ctx < frames) time points the prompter sees. ``method``,
    ``step_size``, ``save_resolution``, ``burn_in``: passed to ``generate`` (None: the
    system's defaults). Validated on construction; treat instances as read-only.
    """

    system: str
    varied: tuple[str, ...]
    train_grid: dict[str, list[float]]
    in_domain: list[dict[str, float]]
    out_of_domain: list[dict[str, float]]
    t_end: float
    dt: float
    n_train_per_env: int
    n_val_per_env: int
    n_test_per_env: int
    context_steps: int
    fixed: dict[str, float] = dataclasses.field(default_factory=dict)
    system_options: dict = dataclasses.field(default_factory=dict)
    method: str | None = None
    step_size: float | None = None
    save_resolution: int | None = None
    burn_in: float = 0.0

    # ------------------------------------------------------------ validation
    def __post_init__(self):
        if not isinstance(self.system, str):
            raise TypeError(f"Protocol: system must be a registry name, got {self.system!r}")
        cls = _system_class(self.system)
        names = tuple(cls.param_names)
        varied = self._check_varied(names)
        self._check_fixed(names, varied)
        grid = self._check_grid(varied)
        self._check_held_out(varied, grid)
        self._check_window(cls)
        # the system accepts the options and every environment's parameters
        system = self.make_system()
        for which in SPLITS:
            system.params_tensor(self.param_rows(which))

    def _set(self, key: str, value) -> None:
        object.__setattr__(self, key, value)  # a frozen dataclass, normalised once

    def _check_varied(self, names: tuple[str, ...]) -> tuple[str, ...]:
        varied = (self.varied,) if isinstance(self.varied, str) else tuple(self.varied)
        if not varied:
            raise ValueError(f"Protocol({self.system!r}): varied names no parameter")
        for key in varied:
            if key not in names:
                raise ValueError(
                    f"Protocol({self.system!r}): varied parameter {key!r} is not a parameter "
                    f"of the system; its parameters are {', '.join(names)}"
                )
        if len(set(varied)) != len(varied):
            raise ValueError(f"Protocol({self.system!r}): varied repeats a name: {varied}")
        self._set("varied", varied)
        return varied

    def _check_fixed(self, names: tuple[str, ...], varied: tuple[str, ...]) -> None:
        if not isinstance(self.fixed, Mapping):
            raise TypeError(f"Protocol: fixed must be a dict name -> value, got {self.fixed!r}")
        fixed = {}
        for key, value in self.fixed.items():
            if key not in names:
                raise ValueError(
                    f"Protocol({self.system!r}): fixed parameter {key!r} is not a parameter "
                    f"of the system; its parameters are {', '.join(names)}"
                )
            if key in varied:
                raise ValueError(
                    f"Protocol({self.system!r}): {key!r} is both varied and fixed; drop it "
                    "from one of them"
                )
            fixed[key] = _real(f"fixed[{key!r}]", value)
        self._set("fixed", fixed)
        if not isinstance(self.system_options, Mapping):
            raise TypeError(f"Protocol: system_options must be a dict, got {self.system_options!r}")
        self._set("system_options", dict(self.system_options))

    def _check_grid(self, varied: tuple[str, ...]) -> dict[str, list[float]]:
        if not isinstance(self.train_grid, Mapping) or set(self.train_grid) != set(varied):
            got = list(self.train_grid) if isinstance(self.train_grid, Mapping) else None
            raise ValueError(
                f"Protocol({self.system!r}): train_grid must have one entry per varied "
                f"parameter {list(varied)}, got keys {got}"
            )
        grid = {}
        for key in varied:
            values = self.train_grid[key]
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
                values = np.asarray(values).ravel().tolist()
            values = [_real(f"train_grid[{key!r}]", v) for v in values]
            if len(values) < 2 or any(b <= a for a, b in zip(values, values[1:])):
                raise ValueError(
                    f"Protocol({self.system!r}): train_grid[{key!r}] needs at least two "
                    f"strictly increasing values (the range is their span), got {values}"
                )
            grid[key] = values
        self._set("train_grid", grid)
        return grid

    def _check_held_out(self, varied: tuple[str, ...], grid: dict[str, list[float]]) -> None:
        for which in ("in_domain", "out_of_domain"):
            points = getattr(self, which)
            if isinstance(points, Mapping) or not isinstance(points, Sequence):
                raise TypeError(
                    f"Protocol({self.system!r}): {which} must be a list of dicts "
                    f"{{name: value}} over {list(varied)}, got {type(points).__name__}"
                )
            if not points:
                raise ValueError(f"Protocol({self.system!r}): {which} lists no environment")
            clean = []
            for i, point in enumerate(points):
                if not isinstance(point, Mapping) or set(point) != set(varied):
                    raise ValueError(
                        f"Protocol({self.system!r}): {which}[{i}] must be a dict over the "
                        f"varied parameters {list(varied)}, got {point!r}"
                    )
                clean.append({k: _real(f"{which}[{i}][{k!r}]", point[k]) for k in varied})
            self._set(which, clean)
        ranges = self.param_range()
        nodes = np.array(list(itertools.product(*grid.values())))  # (G, V)
        spans = np.array([hi - lo for lo, hi in ranges.values()])
        for i, point in enumerate(self.in_domain):
            outside = [k for k, (lo, hi) in ranges.items() if not lo < point[k] < hi]
            if outside:
                raise ValueError(
                    f"Protocol({self.system!r}): in_domain[{i}] = {point} must lie strictly "
                    f"inside the training range {ranges} (interpolation); {outside} do not. "
                    "Move it to out_of_domain or inside the range"
                )
            row = np.array([point[k] for k in varied])
            if np.any(np.all(np.abs(nodes - row) <= 1e-9 * spans, axis=1)):
                raise ValueError(
                    f"Protocol({self.system!r}): in_domain[{i}] = {point} is a training grid "
                    "point; a held-out environment must be off the grid"
                )
        for i, point in enumerate(self.out_of_domain):
            if not self.is_extrapolation(point):
                raise ValueError(
                    f"Protocol({self.system!r}): out_of_domain[{i}] = {point} lies inside the "
                    f"training range {ranges}; an out-of-domain point needs at least one "
                    "varied parameter outside it"
                )

    def _check_window(self, cls) -> None:
        t_end = _real("t_end", self.t_end)
        dt = _real("dt", self.dt)
        steps = t_end / dt if dt > 0 else -1.0
        if t_end <= 0 or dt <= 0 or abs(steps - round(steps)) > 1e-6 * max(1.0, steps):
            raise ValueError(
                f"Protocol({self.system!r}): t_end and dt must be positive with t_end a "
                f"multiple of dt; got t_end={self.t_end}, dt={self.dt}"
            )
        self._set("t_end", t_end)
        self._set("dt", dt)
        self._set("n_train_per_env", _positive_int("n_train_per_env", self.n_train_per_env))
        # validation and test environments are scored alike: one episode is the context,
        # the others are predicted, so both need two (tune_methods sweeps on val.h5)
        for key in ("n_val_per_env", "n_test_per_env"):
            self._set(key, _positive_int(key, getattr(self, key), 2))
        ctx = _positive_int("context_steps", self.context_steps, MIN_CONTEXT_STEPS)
        if ctx >= self.frames:
            raise ValueError(
                f"Protocol({self.system!r}): context_steps={ctx} must be shorter than an "
                f"episode ({self.frames} frames: t_end/dt + 1); lower it or lengthen t_end"
            )
        self._set("context_steps", ctx)
        if self.method is not None and not isinstance(self.method, str):
            raise TypeError(f"Protocol: method must be a name or None, got {self.method!r}")
        if self.step_size is not None:
            self._set("step_size", _real("step_size", self.step_size))
            if self.step_size <= 0:
                raise ValueError(f"Protocol: step_size must be > 0, got {self.step_size}")
        if self.save_resolution is not None and cls.kind != "field":
            raise ValueError(
                f"Protocol({self.system!r}): save_resolution applies to PDE systems (kind "
                f"'field'); {self.system!r} is of kind {cls.kind!r}. Drop save_resolution"
            )
        burn_in = _real("burn_in", self.burn_in)
        if burn_in < 0:
            raise ValueError(f"Protocol: burn_in must be >= 0, got {self.burn_in}")
        self._set("burn_in", burn_in)

    # ----------------------------------------------------------- description
    @property
    def param_names(self) -> tuple[str, ...]:
        """All parameter names of the system, in the column order of ``/episodes/params``."""
        return tuple(_system_class(self.system).param_names)

    @property
    def frames(self) -> int:
        """Time points per episode, ``t_end / dt + 1``."""
        return round(self.t_end / self.dt) + 1

    def make_system(self):
        """The :class:`simsci.systems.System` with ``system_options`` and ``fixed`` applied."""
        from simsci.systems import get

        return get(self.system, **self.system_options, **self.fixed)

    def environments(self, which: str = "train") -> list[dict[str, float]]:
        """Full parameter dicts (every system parameter) of one environment set.

        ``which``: "train" (the grid, ``itertools.product`` over ``varied``), "in_domain"
        or "out_of_domain" (list order); "val" is the training grid.
        """
        if which not in _WHICH:
            raise unknown_name("environment set", which, _WHICH)
        base = dict(_system_class(self.system).default_params)
        base.update(self.fixed)
        if which in ("train", "val"):
            points = [
                dict(zip(self.varied, combo))
                for combo in itertools.product(*(self.train_grid[k] for k in self.varied))
            ]
        else:
            points = getattr(self, which)
        return [{k: float({**base, **p}[k]) for k in self.param_names} for p in points]

    def param_rows(self, which: str = "train") -> np.ndarray:
        """``(G, P)`` float64 rows of :meth:`environments`, columns in ``param_names`` order."""
        envs = self.environments(which)
        return np.array([[e[k] for k in self.param_names] for e in envs], dtype=np.float64)

    def param_range(self) -> dict[str, tuple[float, float]]:
        """``{name: (lo, hi)}`` of the training grid, for each varied parameter."""
        return {k: (v[0], v[-1]) for k, v in self.train_grid.items()}

    def is_extrapolation(self, params) -> bool:
        """Whether any varied parameter lies outside the training range (closed interval).

        ``params``: a dict holding every varied name (other system parameters allowed and
        ignored), or a full row of ``len(param_names)`` values (a ``/episodes/params`` row).
        """
        names = self.param_names
        if isinstance(params, Mapping):
            unknown = [k for k in params if k not in names]
            if unknown:
                raise ValueError(
                    f"is_extrapolation: {unknown[0]!r} is not a parameter of "
                    f"{self.system!r}; its parameters are {', '.join(names)}"
                )
            missing = [k for k in self.varied if k not in params]
            if missing:
                raise ValueError(
                    f"is_extrapolation: params must give every varied parameter "
                    f"{list(self.varied)}; missing {missing}"
                )
            values = {k: float(params[k]) for k in self.varied}
        else:
            if isinstance(params, torch.Tensor):
                params = params.detach().cpu().numpy()
            row = np.asarray(params, dtype=np.float64)
            if row.shape != (len(names),):
                raise ValueError(
                    f"is_extrapolation: give a dict over {list(self.varied)} or a full row of "
                    f"{len(names)} values ({', '.join(names)}), got shape {row.shape}"
                )
            values = {k: float(row[names.index(k)]) for k in self.varied}
        return any(not lo <= values[k] <= hi for k, (lo, hi) in self.param_range().items())

    def quick(self) -> Protocol:
        """A small version for tests and the tour (see the module docstring): per axis the
        end points, plus the middle value when there are more than three; two held-out
        points of each kind; 2 / 2 / 2 episodes per environment (two validation
        episodes, so :func:`._pipeline.tune_methods` can run on them); the same time
        window."""

        def shrink(values):
            if len(values) > 3:
                return [values[0], values[len(values) // 2], values[-1]]
            return [values[0], values[-1]]

        return dataclasses.replace(
            self,
            train_grid={k: shrink(v) for k, v in self.train_grid.items()},
            in_domain=self.in_domain[:2],
            out_of_domain=self.out_of_domain[:2],
            n_train_per_env=min(self.n_train_per_env, 2),
            n_val_per_env=2,
            n_test_per_env=2,
        )

    def to_dict(self) -> dict:
        """A JSON-able dict; ``Protocol(**d)`` rebuilds the protocol."""
        d = dataclasses.asdict(self)
        d["varied"] = list(self.varied)
        return d


# ------------------------------------------------------------------ protocols
def _linspace(lo: float, hi: float, n: int) -> list[float]:
    return [float(v) for v in np.linspace(lo, hi, n)]


def _points(varied: Sequence[str], rows: Sequence[Sequence[float]]) -> list[dict[str, float]]:
    return [dict(zip(varied, map(float, row))) for row in rows]


PROTOCOLS: dict[str, Protocol] = {
    p.system: p
    for p in (
        Protocol(
            system="lotka_volterra",
            varied=("beta", "delta"),
            fixed={"alpha": 0.5, "gamma": 0.5},
            train_grid={"beta": _linspace(0.5, 1.0, 9), "delta": _linspace(0.5, 1.0, 9)},
            in_domain=_points(
                ("beta", "delta"),
                [
                    (0.806, 0.53),
                    (0.555, 0.522),
                    (0.661, 0.946),
                    (0.973, 0.861),
                    (0.972, 0.825),
                    (0.661, 0.542),
                ],
            ),
            out_of_domain=_points(
                ("beta", "delta"),
                [(0.35, 0.75), (1.1, 0.6), (0.8, 0.4), (0.7, 1.15), (0.4, 0.4), (1.15, 1.1)],
            ),
            t_end=10.0,
            dt=0.5,
            n_train_per_env=8,
            n_val_per_env=2,
            n_test_per_env=8,
            context_steps=10,
        ),
        Protocol(
            system="glycolytic_oscillator",
            varied=("k1", "K1"),
            train_grid={"k1": _linspace(80.0, 100.0, 8), "K1": _linspace(0.5, 1.0, 8)},
            in_domain=_points(
                ("k1", "K1"), [(82.5, 0.523), (86.1, 0.765), (96.6, 0.689), (91.1, 0.761)]
            ),
            out_of_domain=_points(
                ("k1", "K1"), [(72.0, 0.75), (108.0, 0.6), (90.0, 0.4), (75.0, 1.1)]
            ),
            t_end=1.0,
            dt=0.05,
            n_train_per_env=8,
            n_val_per_env=2,
            n_test_per_env=8,
            context_steps=10,
        ),
        Protocol(
            system="damped_pendulum",
            varied=("g", "damping"),
            fixed={"L": 1.0},
            train_grid={"g": _linspace(4.0, 16.0, 8), "damping": _linspace(0.1, 0.5, 8)},
            in_domain=_points(
                ("g", "damping"),
                [(6.49, 0.298), (9.82, 0.351), (13.35, 0.148), (15.68, 0.445)],
            ),
            out_of_domain=_points(
                ("g", "damping"), [(3.0, 0.3), (18.0, 0.2), (10.0, 0.05), (2.5, 0.6)]
            ),
            t_end=10.0,
            dt=0.1,
            n_train_per_env=8,
            n_val_per_env=2,
            n_test_per_env=8,
            context_steps=40,
        ),
        Protocol(
            system="gray_scott",
            system_options={"resolution": 32, "domain": 0.5},
            varied=("F", "k"),
            fixed={"Du": 2e-5, "Dv": 1e-5},
            train_grid={"F": [0.03, 0.04, 0.05], "k": [0.052, 0.055, 0.058]},
            in_domain=_points(("F", "k"), [(0.0321, 0.05365), (0.0416, 0.05629), (0.042, 0.05264)]),
            out_of_domain=_points(("F", "k"), [(0.025, 0.055), (0.045, 0.061), (0.055, 0.049)]),
            t_end=300.0,
            dt=20.0,
            n_train_per_env=4,
            n_val_per_env=2,
            n_test_per_env=2,
            context_steps=8,
        ),
        Protocol(
            system="navier_stokes_2d",
            system_options={"resolution": 32},
            varied=("nu",),
            fixed={"forcing": 0.0},
            train_grid={"nu": _linspace(8e-4, 1.2e-3, 7)},
            in_domain=_points(("nu",), [(8.5e-4,), (1.05e-3,), (1.15e-3,)]),
            out_of_domain=_points(("nu",), [(6e-4,), (7e-4,), (1.4e-3,)]),
            t_end=10.0,
            dt=1.0,
            n_train_per_env=16,
            n_val_per_env=2,
            n_test_per_env=2,
            context_steps=7,
        ),
    )
}


def get_protocol(name: str) -> Protocol:
    """The protocol of system ``name`` (a key of :data:`PROTOCOLS`); a :class:`Protocol`
    is returned as it is. An unknown name lists the valid ones."""
    if isinstance(name, Protocol):
        return name
    if not isinstance(name, str):
        raise TypeError(f"protocol name must be a string, got {type(name).__name__} {name!r}")
    protocol = PROTOCOLS.get(name)
    if protocol is None:
        raise unknown_name("DynaDiff protocol (system)", name, PROTOCOLS)
    return protocol


# ---------------------------------------------------------------------- data
def _file_seeds(seed) -> dict[str, int]:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    children = np.random.SeedSequence(int(seed)).spawn(len(_FILES))
    return {k: int(c.generate_state(1, dtype=np.uint32)[0]) for k, c in zip(_FILES, children)}


def make_environments(
    system_or_protocol: str | Protocol,
    out_dir: str | os.PathLike,
    *,
    seed: int = 0,
    quick: bool = False,
    device=None,
    progress: bool = False,
) -> dict[str, Path]:
    """Simulate a protocol into ``out_dir``: train.h5, val.h5, in_domain.h5, out_of_domain.h5.

    ``system_or_protocol``: a key of :data:`PROTOCOLS` or a :class:`Protocol`.
    ``quick``: :meth:`Protocol.quick` sizes (a few seconds). ``device``: where
    :func:`simsci.systems.generate` solves (None: CUDA when available). Each file holds
    ``n_per_env * G`` episodes, one environment's episodes contiguous, environments in
    :meth:`Protocol.environments` order, ``/episodes/params`` filled; splits 0 / 1 / 2 / 2
    (see the module docstring). Returns ``{"train", "val", "in_domain", "out_of_domain"}``
    -> path.
    """
    from simsci.systems import generate

    protocol = get_protocol(system_or_protocol)
    if not isinstance(quick, bool):
        raise TypeError(f"quick must be a bool, got {quick!r}")
    if quick:
        protocol = protocol.quick()
    seeds = _file_seeds(seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    system = protocol.make_system()
    sizes = {
        "train": protocol.n_train_per_env,
        "val": protocol.n_val_per_env,
        "in_domain": protocol.n_test_per_env,
        "out_of_domain": protocol.n_test_per_env,
    }
    solver = {"method": protocol.method, "step_size": protocol.step_size}
    if protocol.save_resolution is not None:
        solver["save_resolution"] = protocol.save_resolution
    paths = {}
    for key, split in _FILES.items():
        n = sizes[key]
        if key in ("train", "val"):
            # a grid: generate writes n episodes per point, points in product order
            params = {k: protocol.train_grid[k] for k in protocol.varied}
            count = n
        else:
            params = np.repeat(protocol.param_rows(key), n, axis=0)
            count = params.shape[0]
        paths[key] = Path(
            generate(
                system,
                count,
                t_end=protocol.t_end,
                dt=protocol.dt,
                out=out_dir / f"{key}.h5",
                params=params,
                seed=seeds[key],
                device=device,
                split=split,
                burn_in=protocol.burn_in,
                progress=progress,
                **solver,
            )
        )
    return paths


def env_ids(params_array, protocol: str | Protocol, *, which: str = "train") -> torch.Tensor:
    """``(N,)`` long: the index in ``protocol.environments(which)`` of each episode.

    ``params_array``: ``(N, P)`` rows of ``/episodes/params`` (numpy or torch; all ``P``
    system parameters in ``param_names`` order). A row matches an environment when every
    parameter agrees to a relative 1e-6; a row that matches none raises ``ValueError``
    naming it. A tensor input gives the result on its device. A ``quick=True`` file
    matches both ``protocol.quick()`` and the full protocol (its grid and held-out points
    are subsets of the full ones; the indices then refer to the full lists).
    """
    protocol = get_protocol(protocol)
    device = params_array.device if isinstance(params_array, torch.Tensor) else None
    if isinstance(params_array, torch.Tensor):
        params_array = params_array.detach().cpu().numpy()
    rows = np.asarray(params_array, dtype=np.float64)
    names = protocol.param_names
    if rows.ndim != 2 or rows.shape[1] != len(names):
        raise ValueError(
            f"env_ids: params_array must have shape (N, {len(names)}) (the columns "
            f"{', '.join(names)} of /episodes/params), got {rows.shape}"
        )
    envs = protocol.param_rows(which)  # (G, P)
    tol = _MATCH_RTOL * np.maximum(np.abs(envs), np.finfo(np.float64).tiny)
    match = np.all(np.abs(rows[:, None, :] - envs[None, :, :]) <= tol[None], axis=-1)  # (N, G)
    found = match.any(axis=1)
    if not found.all():
        i = int(np.flatnonzero(~found)[0])
        shown = dict(zip(names, rows[i].tolist()))
        raise ValueError(
            f"env_ids: episode {i} (params {shown}) matches no {which!r} environment of the "
            f"{protocol.system!r} protocol ({envs.shape[0]} environments); was the file made "
            "by another protocol, or for another environment set (which=)?"
        )
    return torch.as_tensor(match.argmax(axis=1), dtype=torch.long, device=device)
