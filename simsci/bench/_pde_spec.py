"""Step one of the PDE benchmark: check the arguments once and build a
:class:`PDEBenchSpec` (what runs, on which grids, with which steps, against which
reference grid). Nothing is simulated here."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from simsci.bench._pde_problem import PDEPeer, as_resolution, res_label
from simsci.bench._pde_setups import (
    PDEBenchSetup,
    _check_problem,
    default_setup,
    has_step_limit,
)
from simsci.errors import unknown_name

__all__ = ["PDEBenchSpec", "build_spec"]

#: where the py-pde comparison lives (the library calls no peer; ``pypde=True`` says so)
PYPDE_SCRIPT = "benchmarks/bench_pde_pypde.py"


@dataclasses.dataclass
class PDEBenchSpec:
    """A checked benchmark request (see :func:`simsci.bench.pde_benchmark`).

    ``dt_map``: method -> requested steps (floats, ``"F*stable"`` fractions of the
    stability limit, or ``(None,)`` for a steady problem). ``models``: ``(name, module)``.
    ``peers``: ``(peer, status, grids)``, grids empty when the peer is not included.
    ``ref_method``/``ref_resolution``: the reference solve; ``coarsest``: the coarsest
    grid of the run (the initial fields' band limit).
    """

    problem: str
    setup: PDEBenchSetup
    device: torch.device
    dtype: torch.dtype
    n: int
    repeat: int
    levels: int
    batches: tuple[int, ...]
    seed: int
    quick: bool
    steady: bool
    ndim: int
    periodic: bool
    methods: list[str]
    resolutions: list[tuple[int, ...]]
    dt_map: dict[str, tuple]
    t_end: float
    params: dict
    times: np.ndarray
    models: list[tuple[str, torch.nn.Module]]
    peers: list[tuple[PDEPeer, dict, list[tuple[int, ...]]]]
    ref_method: str
    ref_resolution: tuple[int, ...]
    coarsest: tuple[int, ...]


def build_spec(
    problem, *, methods, resolutions, dts, n, t_end, params, device, dtype, models, peers,
    pypde, seed, repeat, quick, levels, batches,
) -> PDEBenchSpec:  # fmt: skip
    """Validate :func:`simsci.bench.pde_benchmark`'s arguments (same names) in order;
    every error is raised here, before any simulation."""
    from simsci import systems
    from simsci._device import resolve_device

    problem = _check_problem(problem)
    setup = default_setup(problem, quick=quick)
    cls = systems.SYSTEMS[problem]
    device = resolve_device(device)
    _check_sizes(dtype, n, repeat, levels)
    batches = _check_batches(batches, n)
    steady = bool(getattr(cls, "steady", False))
    ndim = int(cls.spatial_dims)
    methods = _pick_methods(problem, cls, setup, methods)
    res_list = setup.resolutions if resolutions is None else resolutions
    res_list = [as_resolution(r, ndim) for r in res_list]
    if not res_list:
        raise ValueError("resolutions must not be empty")
    res_list = sorted(dict.fromkeys(res_list))
    dt_map = _step_map(problem, cls, setup, methods, dts, steady)
    t_end = setup.t_end if t_end is None else float(t_end)
    if steady:
        t_end = 0.0
    elif not (math.isfinite(t_end) and t_end > 0):
        raise ValueError(f"t_end must be finite and > 0 for a time-dependent PDE, got {t_end!r}")
    params = {**setup.params, **dict(params or {})}
    unknown_params = [k for k in params if k not in cls.param_names]
    if unknown_params:
        raise ValueError(
            f"{problem} has parameters {list(cls.param_names)}; got unknown {unknown_params}"
        )
    times = np.array([0.0]) if steady else np.linspace(0.0, t_end, setup.frames + 1)
    loaded = _load_models(models, problem, device)
    peer_list = _check_peers(peers, pypde, problem, res_list, ndim)
    model_res = [as_resolution(r, ndim) for _, m in loaded if (r := _model_resolution(m))]
    peer_res = [g for _, _, grids in peer_list for g in grids]
    ref_res, coarsest = _reference_grid(
        problem, bool(cls.periodic), setup.reference_factor, res_list + model_res, peer_res
    )
    return PDEBenchSpec(
        problem=problem, setup=setup, device=device, dtype=dtype, n=n, repeat=repeat,
        levels=levels, batches=batches, seed=seed, quick=quick, steady=steady, ndim=ndim,
        periodic=bool(cls.periodic), methods=methods, resolutions=res_list, dt_map=dt_map,
        t_end=t_end, params=params, times=times, models=loaded, peers=peer_list,
        ref_method=cls.default_method if steady else _reference_method(cls),
        ref_resolution=ref_res, coarsest=coarsest,
    )  # fmt: skip


# ---------------------------------------------------------------------- the checks
def _check_sizes(dtype, n, repeat, levels) -> None:
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer (trajectories), got {n!r}")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat must be a positive integer, got {repeat!r}")
    if isinstance(levels, bool) or not isinstance(levels, int) or levels < 1:
        raise ValueError(f"levels must be a positive integer, got {levels!r}")


def _check_batches(batches, n: int) -> tuple[int, ...]:
    if batches is None:
        batches = (n,)
    if isinstance(batches, int):
        batches = (batches,)
    batches = tuple(dict.fromkeys(batches))
    for b in batches:
        if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= n:
            raise ValueError(f"batches must be integers in [1, n={n}], got {b!r}")
    return batches


def _pick_methods(problem: str, cls, setup: PDEBenchSetup, methods) -> list[str]:
    valid = list(cls.methods)
    if methods is None:
        # every method the system offers: a stepper registered after the setup table was
        # written runs too, at generic steps (_step_map)
        return valid
    if isinstance(methods, str):
        methods = [methods]
    methods = list(dict.fromkeys(methods))
    for m in methods:
        if m not in valid:
            raise unknown_name(f"method for {problem!r}", m, valid)
    return methods


def _check_float_seq(values, what: str) -> tuple[float, ...]:
    if isinstance(values, (int, float)):
        values = (values,)
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
            raise TypeError(f"{what} must be numbers, got {v!r}")
        if not (math.isfinite(float(v)) and v > 0):
            raise ValueError(f"{what} must be finite and > 0, got {v!r}")
        out.append(float(v))
    return tuple(out)


def _step_map(problem: str, cls, setup: PDEBenchSetup, methods, dts, steady: bool) -> dict:
    """Method -> requested steps: floats, or ``"F*stable"`` (a fraction of the limit)."""

    def default_steps(m):
        fractions = setup.stable_fractions.get(m)
        if fractions is None and has_step_limit(m) and not setup.dts.get(m):
            fractions = (0.9,)  # a stepper with a step limit the table does not know
        if fractions:
            return tuple(f"{f:g}*stable" for f in fractions)
        steps = setup.dts.get(m)
        if not steps:
            steps = tuple(float(cls.method_dt.get(m, cls.default_dt)) * f for f in (4, 2, 1))
        return tuple(steps)

    if steady:
        if dts is not None:
            raise ValueError(
                f"{problem} is steady (solved once, no time stepping): it is benchmarked over "
                "resolutions only; drop dts"
            )
        return {m: (None,) for m in methods}
    if dts is None:
        return {m: default_steps(m) for m in methods}
    if isinstance(dts, Mapping):
        unknown = [m for m in dts if m not in methods]
        if unknown:
            raise ValueError(
                f"dts names methods {unknown} that are not run (methods: {methods}); give "
                "step sizes for the methods being benchmarked"
            )
        dt_map = {
            m: _check_float_seq(dts[m], "dts") if m in dts else default_steps(m) for m in methods
        }
        missing = [m for m in methods if not dt_map[m]]
        if missing:
            raise ValueError(f"no step sizes for method(s) {missing}; add them to dts")
        return dt_map
    steps = _check_float_seq(dts, "dts")
    if not steps:
        raise ValueError("dts must not be empty")
    return {m: steps for m in methods}


def _reference_method(cls) -> str:
    """The most accurate registered stepper the system offers: highest order, spectral
    before finite differences, registry order on ties (``etdrk4`` for every PDE here)."""
    from simsci.systems import PDE_STEPPERS

    offered = [m for m in cls.methods if m in PDE_STEPPERS]
    if not offered:
        return list(cls.methods)[0]
    return max(offered, key=lambda m: (PDE_STEPPERS[m].order, PDE_STEPPERS[m].spectral))


def _check_peers(peers, pypde, problem: str, tested, ndim: int) -> list:
    if pypde not in ("auto", True, False, None):
        raise ValueError(f"pypde must be 'auto', True or False, got {pypde!r}")
    if pypde is True:
        raise ValueError(
            f"pde_benchmark runs no peer itself (peers are called only from benchmarks/): the "
            f"py-pde comparison lives in {PYPDE_SCRIPT} (python {PYPDE_SCRIPT} --problems "
            f"{problem}), which passes its peer as peers=[...]"
        )
    if isinstance(peers, PDEPeer):
        peers = [peers]
    out = []
    for peer in peers or ():
        for attr in ("status", "grids", "runs"):
            if not callable(getattr(peer, attr, None)):
                raise TypeError(
                    f"peer {peer!r} has no {attr}() method; a peer follows "
                    "simsci.bench.PDEPeer (family, status, grids, runs)"
                )
        status = dict(peer.status(problem))
        grids = []
        if status.get("included"):
            grids = sorted({as_resolution(r, ndim) for r in peer.grids(problem, list(tested))})
        out.append((peer, status, grids))
    return out


def _reference_grid(problem, periodic, factor, own, peer_res) -> tuple[tuple, tuple]:
    """The reference resolution (``factor`` x the finest own grid, at least every
    peer's finest; vertex grids: a common refinement of all) and the coarsest grid."""
    ndim = len(own[0])
    all_res = own + peer_res
    finest = tuple(max(r[a] for r in own) for a in range(ndim))
    finest_all = tuple(max(r[a] for r in all_res) for a in range(ndim))
    coarsest = tuple(min(r[a] for r in all_res) for a in range(ndim))
    if periodic:
        return tuple(max(factor * f, g) for f, g in zip(finest, finest_all)), coarsest
    ref_res = []
    for a in range(ndim):
        lcm = 1
        for r in all_res:
            lcm = math.lcm(lcm, r[a] - 1)
        m = lcm * math.ceil(factor * (finest[a] - 1) / lcm)
        if m > 16 * factor * (finest[a] - 1):
            raise ValueError(
                f"{problem}: the vertex-grid resolutions {[res_label(r) for r in all_res]} "
                "do not nest in a common reference grid of reasonable size; use sizes "
                "2^k + 1 (17, 33, 65, ...)"
            )
        ref_res.append(m + 1)
    return tuple(ref_res), coarsest


# --------------------------------------------------------------------------- models
def _model_resolution(model):
    res = getattr(model, "resolution", None)
    return res if res not in (None, 0) else None


def _load_models(models, problem: str, device) -> list[tuple[str, torch.nn.Module]]:
    if isinstance(models, (str, Path, torch.nn.Module)):
        models = [models]
    out, names = [], set()
    for item in models:
        if isinstance(item, torch.nn.Module):
            model, name = item, type(item).__name__
        elif isinstance(item, (str, Path)):
            from simsci.train import load_model

            model = load_model(item, map_location=device)
            path = Path(item)
            name = path.stem
            if name in ("best", "last"):
                # Trainer's OUT/checkpoints/best.pt: name it by the run folder
                folder = path.parent.parent if path.parent.name == "checkpoints" else path.parent
                name = f"{folder.name}/{name}" if folder.name else name
        else:
            raise TypeError(
                f"models entries must be checkpoint paths or nn.Modules, got {type(item).__name__}"
            )
        _check_model(model, name, problem)
        base, k = name, 2
        while name in names:
            name, k = f"{base}#{k}", k + 1
        names.add(name)
        out.append((name, model.to(device).eval()))
    return out


def _check_model(model, name: str, problem: str) -> None:
    if not callable(getattr(model, "rollout", None)):
        raise TypeError(
            f"model {name!r} ({type(model).__name__}) has no rollout(u0, t, params=None) "
            "method; the benchmark protocol needs one returning (B, T, *grid, C)"
        )
    trained_on = getattr(model, "system", None) or (
        getattr(model, "checkpoint_extra", None) or {}
    ).get("system")
    if trained_on is not None and trained_on != problem:
        raise ValueError(
            f"model {name!r} was trained on {trained_on!r}, not on the benchmark problem "
            f"{problem!r}; benchmark it on --problem {trained_on}"
        )
