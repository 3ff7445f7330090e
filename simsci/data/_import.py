"""Importers from the PDEBench and The Well HDF5 layouts to the simsci trajectory format.

``import_pdebench(src, dst)`` and ``import_thewell(src, dst)`` write one kind="field"
file: ``x`` (T, *grid, C) channels last with ``names``, ``t`` float64, the grid
coordinates in ``/static``, the PDE parameters in ``/episodes/params`` with ``names``,
the source episode index in ``/episodes/source_index`` and ``meta["source"]`` recording
the source file, its layout and where each channel came from.

PDEBench layouts (detected from the file's structure, in this order):

- **darcy**: ``tensor`` [N, 1, X, Y] (the solution u) and ``nu`` [N, X, Y] (the
  coefficient a), ``x-coordinate`` [X], ``y-coordinate`` [Y]. One step per episode at
  t = [0.0] with channels ("a", "u"), the simsci darcy convention.
- **tensor**: ``tensor`` [N, T, *grid] (one field, 1-3 spatial dims, channel "u") with
  ``x-coordinate`` (``y-``, ``z-``) and ``t-coordinate``.
- **multi-variable** (compressible Navier-Stokes): ``density``, ``pressure``, ``Vx``
  (``Vy``, ``Vz``) each [N, T, *grid] become the channels, in PDEBench's own order
  density, pressure, Vx, Vy, Vz; coordinates as above.
- **ns-incompressible** (PDEBench's 2-D incompressible Navier-Stokes, made with PhiFlow):
  ``velocity`` [N, T, *grid, D], ``particles`` [N, T, *grid, 1] (a passively advected
  density), ``force`` [N, *grid, D] (constant in time) and ``t`` [N, T] (or [T]). Channels
  velocity_x, velocity_y (, velocity_z), particles, force_x, force_y (, force_z); the
  force is repeated over the T frames and listed in ``meta["source"]["constant_channels"]``.
  The file holds no grid coordinates (PhiFlow's centred grid), so none are written; the
  simulation's settings stay in the root attribute ``config`` (YAML text) in meta.
- **per-seed**: root groups "0000", "0001", ... each with ``data`` [T, *grid, C] and a
  ``grid`` group holding ``x`` (``y``, ``z``) and ``t``. Every group is one episode (in
  sorted key order). Channels are named ("u", "v") for diffusion-reaction files (name
  containing "diff-react"), ("h",) for shallow-water files ("rdb"), else "u" or
  "u0", "u1", ...; ``channel_names=`` overrides.

Time coordinates: PDEBench's 1D generators save T frames at t_0, ..., t_{T-1} (the first
frame is the initial condition) but write ``t-coordinate`` with T+1 entries (one past the
last frame). A time coordinate of length T is used as is; one of length T+1 loses its
last entry (PDEBench's own loaders do the same); any other length is an error.

PDE parameters: every numeric scalar root attribute (PDEBench writes ``beta`` for
advection and Darcy, ``Nu`` for Burgers, ``Nu`` and ``rho`` for reaction-diffusion,
``eta``, ``zeta`` and ``M`` for compressible NS), then parameters found in the file name
(``..._Nu0.001...``, ``..._beta1.0...``, ``Eta1.e-8``...) when no attribute gives them,
then the explicit ``params={"nu": 1e-3}`` (which wins). ``Nu``, ``Rho``, ``Eta``,
``Zeta`` and ``Beta`` are stored lower-case (``nu``...); values are stored as the
source defines them (PDEBench's Burgers viscosity enters its equation as nu/pi).

The Well layout (https://polymathic-ai.org/the_well/data_format/): root attributes
``dataset_name``, ``n_spatial_dims``, ``n_trajectories``, ``grid_type`` and
``simulation_parameters`` (each a root attribute too); ``dimensions`` with
``spatial_dims`` naming the coordinate datasets and ``time``; ``boundary_conditions``;
``scalars``; ``t0_fields`` / ``t1_fields`` / ``t2_fields`` whose datasets carry
``sample_varying`` (leading trajectory axis), ``time_varying`` (time axis) and
``dim_varying`` (which spatial axes are stored). Fields are flattened to channels in
group order t0, t1, t2 and ``field_names`` order: a vector field ``velocity`` becomes
``velocity_x``, ``velocity_y``, a tensor field ``stress`` becomes ``stress_xx``,
``stress_xy``, ``stress_yx``, ``stress_yy`` (components in ``spatial_dims`` order, as
The Well's own loader names them).

Design choices (and why):

- **Constant fields are channels.** A field that does not vary in time (or along some
  axis) is broadcast to (T, *grid) and stored as channels, like the coefficient "a" of
  Darcy: a model reads one input array. ``meta["source"]["constant_channels"]`` lists
  them.
- **Parameters.** The Well: the numeric simulation parameters, then the time-invariant
  ``scalars`` not already among them (a per-trajectory scalar dataset of the same name
  replaces the root attribute's value; a constant one that equals it once rounded to
  its own dtype, as Well files store float32 copies, keeps the attribute's exact value).
  Time-varying scalars become the step field
  ``scalars`` (T, K) with names. Non-numeric parameters go to meta only.
- **Coordinates.** Sample-invariant coordinates go to ``/static/<dim>``; coordinates that
  vary per trajectory (The Well's ``sample_varying``) to the episode field ``grid_<dim>``.
- **Boundary conditions** (The Well) are stored as the JSON attribute
  ``boundary_conditions`` of ``/static`` and in ``meta["source"]``: per condition its
  attributes (bc_type, associated_dims, associated_fields...) and, when small, the mask
  indices and values.
- **Streaming.** Episodes are read in blocks of about ``READ_BYTES`` (h5py slicing of
  the episode axis; one group at a time for per-seed files) and appended to a
  TrajectoryWriter, which flushes every few MiB: memory holds a block, never the file.
  An episode larger than a block is read alone. Field dtypes are kept (float32 stays
  float32); ``t`` is float64.
- **Errors** name the source file, the dataset and the source episode: a layout that is
  not recognised (listing the supported layouts and what the file holds), shapes that
  do not match, non-finite or non-increasing times, non-finite field values
  (``on_nonfinite="skip"`` leaves such episodes out instead; ``source_index`` shows
  which). They are FormatErrors (ValueError) with ``rule`` ids import-layout,
  import-shape, import-time, import-nonfinite, import-empty.
- **Atomicity.** The output is written to a temporary sibling of ``dst`` and renamed when
  complete; an error or interruption leaves ``dst`` as it was.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from simsci._io import atomic_path, check_parent_dir
from simsci.data._check import open_h5
from simsci.data._schema import FORMAT, attr_str, problem
from simsci.data._writer import TrajectoryWriter

#: bytes of source data read per block of episodes.
READ_BYTES = 32 * 2**20

_CFD_VARIABLES = ("density", "pressure", "Vx", "Vy", "Vz")
_AXES = ("x", "y", "z")
_PARAM_ALIASES = {"Nu": "nu", "Rho": "rho", "Eta": "eta", "Zeta": "zeta", "Beta": "beta"}
_NAME_TOKEN = re.compile(r"^(Nu|nu|Rho|rho|Eta|eta|Zeta|zeta|Beta|beta|M)([-+0-9.eE]+)$")
_SMALL = 64  # boundary-condition masks/values up to this many entries go into the JSON

_PDEBENCH_LAYOUTS = (
    "darcy: 'tensor' [N, 1, X, Y] and 'nu' [N, X, Y] with 'x-coordinate', 'y-coordinate'; "
    "tensor: 'tensor' [N, T, *grid] with 'x-coordinate' (...) and 't-coordinate'; "
    "multi-variable: 'density', 'pressure', 'Vx' (,'Vy', 'Vz') [N, T, *grid] with "
    "coordinates; ns-incompressible: 'velocity' [N, T, *grid, D], 'particles' "
    "[N, T, *grid, 1], 'force' [N, *grid, D] and 't' [N, T]; "
    "per-seed: groups '0000', '0001', ... each with 'data' [T, *grid, C] "
    "and 'grid/x' (,'grid/y', 'grid/z'), 'grid/t'"
)


# ----------------------------------------------------------------------------- helpers
def _err(src: Path, rule: str, message: str, *, dataset=None, episode=None):
    return problem(src, rule, message, field=dataset, episode=episode)


def _open(src) -> tuple[Path, h5py.File]:
    src = Path(src)
    f, err = open_h5(src)
    if err is not None:
        raise err
    return src, f


def _py(value):
    """An h5py attribute value as JSON-able Python (None when it cannot be)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        if value.shape == ():
            return _py(value[()])
        if value.size > 1024:
            return None
        return [_py(v) for v in value.tolist()]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        v = float(value)
        return v if np.isfinite(v) else str(v)
    if isinstance(value, (list, tuple)):
        return [_py(v) for v in value]
    if isinstance(value, str):
        return value
    return None


def _attrs(obj) -> dict:
    out = {}
    for key in obj.attrs:
        try:
            value = _py(obj.attrs[key])
        except (OSError, TypeError, ValueError):  # unreadable attribute types
            continue
        if value is not None:
            out[key] = value
    return out


def _str_list(value) -> list[str]:
    if isinstance(value, (str, bytes)):
        return [attr_str(value)]
    return [attr_str(v) for v in np.asarray(value).ravel().tolist()]


def _flag(obj, key: str, default: bool) -> bool:
    if key not in obj.attrs:
        return default
    return bool(np.asarray(obj.attrs[key]).ravel()[0])


def _number(value) -> float | None:
    """A real scalar attribute as float, else None (strings, arrays, bools)."""
    arr = np.asarray(value)
    if arr.size != 1 or arr.dtype.kind not in "iuf":
        return None
    return float(arr.ravel()[0])


def _describe(f: h5py.File, limit: int = 12) -> str:
    """Top-level keys with shapes, for layout errors."""
    parts = []
    keys = list(f.keys())
    for key in keys[:limit]:
        obj = f[key]
        if isinstance(obj, h5py.Dataset):
            parts.append(f"{key!r} {obj.dtype} {tuple(obj.shape)}")
        else:
            inner = list(obj.keys())
            more = ", ..." if len(inner) > 5 else ""
            parts.append(f"{key!r} group [{', '.join(inner[:5])}{more}]")
    if len(keys) > limit:
        parts.append(f"... {len(keys) - limit} more")
    found = "; ".join(parts) if parts else "no datasets or groups"
    attrs = sorted(f.attrs.keys())
    if attrs:
        found += f" (root attributes: {', '.join(attrs[:12])})"
    return found


def _check_times(src: Path, t: np.ndarray, dataset: str, episode=None) -> np.ndarray:
    t = np.asarray(t, dtype=np.float64)
    bad = ~np.isfinite(t)
    if bad.any():
        j = int(np.argmax(bad))
        raise _err(
            src,
            "import-time",
            f"time t[{j}] = {t[j]} is not finite; times must be finite and strictly increasing",
            dataset=dataset,
            episode=episode,
        )
    step = np.diff(t) <= 0
    if step.any():
        j = int(np.argmax(step)) + 1
        raise _err(
            src,
            "import-time",
            f"times must be strictly increasing; t[{j - 1}] = {t[j - 1]!r} is followed by "
            f"t[{j}] = {t[j]!r}",
            dataset=dataset,
            episode=episode,
        )
    return t


def _time_axis(src: Path, t: np.ndarray, steps: int, dataset: str, episode=None):
    """A time coordinate of length T (as is) or T+1 (last entry dropped) for T frames."""
    t = np.asarray(t).ravel()
    if len(t) == steps + 1:
        t, note = (
            t[:steps],
            f"{dataset} has {steps + 1} entries for {steps} frames; used the first {steps}",
        )
    elif len(t) == steps:
        note = None
    else:
        raise _err(
            src,
            "import-shape",
            f"has {len(t)} entries but the data have {steps} time frames; a time coordinate "
            f"holds T or T+1 values for T frames",
            dataset=dataset,
            episode=episode,
        )
    return _check_times(src, t, dataset, episode), note


def _coordinate(src: Path, f, key: str, size: int, axis: int) -> np.ndarray:
    if key not in f or not isinstance(f[key], h5py.Dataset):
        raise _err(
            src,
            "import-layout",
            f"missing the coordinate dataset {key!r} for spatial axis {axis} ({size} points); "
            f"found: {_describe(f)}",
        )
    values = f[key][()]
    if values.ndim != 1 or len(values) != size:
        raise _err(
            src,
            "import-shape",
            f"has shape {values.shape}, expected ({size},) to match spatial axis {axis} "
            "of the data",
            dataset=key,
        )
    return values


def _check_channels(names: Sequence[str], width: int, where: str) -> list[str]:
    if isinstance(names, str):
        raise TypeError(f"{where} must be a list of names, got the string {names!r}")
    names = list(names)
    if len(names) != width or not all(isinstance(n, str) and n for n in names):
        raise ValueError(
            f"{where} must be {width} non-empty strings, one per channel; got {names!r}"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"{where} has duplicates: {names!r}")
    return names


def _select(channels: list[str], variables, groups: Mapping[str, list[str]] | None = None):
    """Indices of the channels picked by ``variables`` (channel names or group names)."""
    if variables is None:
        return list(range(len(channels)))
    if isinstance(variables, str):
        variables = [variables]
    picked: list[int] = []
    for name in variables:
        if name in channels:
            idx = [channels.index(name)]
        elif groups and name in groups:
            idx = [channels.index(c) for c in groups[name]]
        else:
            valid = ", ".join(channels + [g for g in (groups or {}) if g not in channels])
            raise ValueError(f"variables: no channel {name!r} in this file; valid: {valid}")
        for i in idx:
            if i in picked:
                raise ValueError(f"variables: channel {channels[i]!r} is selected twice")
            picked.append(i)
    if not picked:
        raise ValueError("variables: select at least one channel (or pass None for all)")
    return picked


@dataclass
class _Plan:
    """What one importer found: how to read blocks of episodes and what to write."""

    layout: str
    system: str
    n: int  # episodes in the source
    channels: list[str]  # every channel the file offers
    channel_sources: list[str]  # the source dataset of each channel
    read: Callable[[int, int, list[int]], list[dict]]  # (start, stop, channels) -> episodes
    episode_bytes: int  # bytes of source data per episode (sizes the read blocks)
    static: dict[str, np.ndarray] = field(default_factory=dict)
    param_names: list[str] = field(default_factory=list)
    names: dict[str, list[str]] = field(default_factory=dict)  # extra names (scalars)
    episode_fields: tuple[str, ...] = ()
    groups: dict[str, list[str]] = field(default_factory=dict)  # field name -> channels
    meta: dict = field(default_factory=dict)
    static_attrs: dict[str, str] = field(default_factory=dict)


def _check_common(src, dst, limit, compression, on_nonfinite):
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(
            f"limit must be a positive int (episodes to import) or None, got {limit!r}"
        )
    if on_nonfinite not in ("error", "skip"):
        raise ValueError(f"on_nonfinite must be 'error' or 'skip', got {on_nonfinite!r}")
    if compression not in (None, "gzip", "lzf"):
        raise ValueError(f"compression must be None, 'gzip' or 'lzf', got {compression!r}")
    dst = check_parent_dir(dst)
    if Path(src).exists() and dst.exists() and Path(src).resolve() == dst.resolve():
        raise ValueError(
            f"src and dst are the same file {str(dst)!r}; write the import to another path"
        )
    return dst


def _first_bad(src: Path, plan: _Plan, ep: dict, sel: list[int], index: int):
    x = ep["x"]
    pos = tuple(int(i) for i in np.argwhere(~np.isfinite(x))[0])
    channel = sel[pos[-1]]
    ti = pos[0]
    return _err(
        src,
        "import-nonfinite",
        f"value {x[pos]} at time index {ti} (t = {ep['t'][ti]:g}), grid index {pos[1:-1]} "
        f"of channel {plan.channels[channel]!r} is not finite; the importer refuses NaN/inf "
        "fields (pass on_nonfinite='skip' to leave such episodes out)",
        dataset=plan.channel_sources[channel],
        episode=index,
    )


def _run(
    src: Path,
    dst: Path,
    plan: _Plan,
    *,
    variables,
    limit,
    compression,
    progress,
    on_nonfinite,
    overwrite,
) -> Path:
    sel = _select(plan.channels, variables, plan.groups)
    n = plan.n if limit is None else min(limit, plan.n)
    if n == 0:
        raise _err(src, "import-empty", "holds no episodes to import")
    if not overwrite and dst.exists():
        raise FileExistsError(
            f"{str(dst)!r} exists and overwrite=False; remove it or choose another path"
        )
    channels = [plan.channels[i] for i in sel]
    per_episode = max(1, plan.episode_bytes * len(sel) // max(1, len(plan.channels)))
    block = max(1, READ_BYTES // per_episode)
    meta = {
        "source": {
            "format": plan.layout.split(":")[0],
            "layout": plan.layout,
            "file": str(src.resolve()),
            "file_bytes": src.stat().st_size,
            "episodes_in_source": plan.n,
            "channels": dict(zip(channels, (plan.channel_sources[i] for i in sel))),
            **plan.meta,
        },
        "import": {"limit": limit, "on_nonfinite": on_nonfinite},
    }
    if "constant_channels" in plan.meta:  # only those imported (variables=)
        const = plan.meta["constant_channels"]
        meta["source"]["constant_channels"] = [c for c in channels if c in const]
    names = {"x": channels, **plan.names}
    if plan.param_names:
        names["params"] = plan.param_names

    bar = None
    if progress:
        # tqdm.auto probes for a notebook (IPython) when imported: only with a bar
        from tqdm.auto import tqdm

        bar = tqdm(total=n, desc=f"import {src.name}", unit="episode")
    skipped: list[int] = []
    written = 0
    try:
        with atomic_path(dst) as tmp:
            with TrajectoryWriter(
                tmp,
                kind="field",
                system=plan.system,
                meta=meta,
                names=names,
                static=plan.static,
                episode_fields=("source_index", *plan.episode_fields),
                compression=compression,
                overwrite=True,
            ) as w:
                for start in range(0, n, block):
                    stop = min(n, start + block)
                    for k, ep in enumerate(plan.read(start, stop, sel)):
                        index = start + k
                        if not np.isfinite(ep["x"]).all():
                            if on_nonfinite == "error":
                                raise _first_bad(src, plan, ep, sel, index)
                            skipped.append(index)
                        else:
                            ep["source_index"] = np.int64(index)
                            w.append(ep)
                            written += 1
                        if bar is not None:
                            bar.update(1)
                if written == 0:
                    raise _err(
                        src,
                        "import-nonfinite",
                        f"every one of the {n} episodes read holds non-finite values; "
                        "nothing to import",
                    )
            # The file is complete but not yet under its final name: record what only the
            # import knows at its end (skipped episodes) and the /static attributes.
            with h5py.File(tmp, "r+") as out:
                if skipped:
                    full = json.loads(attr_str(out.attrs["meta"]))
                    full["import"]["skipped_episodes"] = len(skipped)
                    full["import"]["skipped_first"] = skipped[:_SMALL]
                    out.attrs["meta"] = json.dumps(full, sort_keys=True, allow_nan=False)
                if plan.static_attrs:
                    grp = out.require_group("static")
                    for key, value in plan.static_attrs.items():
                        grp.attrs[key] = value
    finally:
        if bar is not None:
            bar.close()
    return dst


def _params_vector(names: list[str], values: Mapping[str, float]) -> np.ndarray:
    return np.array([values[k] for k in names], np.float64)


def _explicit_params(params) -> dict[str, float]:
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise TypeError(
            f"params must be a dict name -> number (e.g. {{'nu': 0.001}}), got {params!r}"
        )
    out = {}
    for key, value in params.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"params: names must be non-empty strings, got {key!r}")
        v = _number(value) if not isinstance(value, bool) else None
        if v is None or not np.isfinite(v):
            raise ValueError(f"params[{key!r}] must be a finite real number, got {value!r}")
        out[key] = v
    return out


# ----------------------------------------------------------------------------- PDEBench
def _pdebench_params(src: Path, f: h5py.File, params) -> tuple[list[str], dict, dict]:
    """(names, values, where each came from): attributes, file name, then ``params``."""
    values: dict[str, float] = {}
    origin: dict[str, str] = {}
    for key in f.attrs:
        v = _number(f.attrs[key])
        if v is None or not np.isfinite(v) or np.asarray(f.attrs[key]).dtype.kind == "b":
            continue
        name = _PARAM_ALIASES.get(key, key)
        values[name] = v
        origin[name] = f"root attribute {key!r}"
    for token in re.split(r"[_]", src.stem):
        m = _NAME_TOKEN.match(token)
        if not m:
            continue
        try:
            v = float(m.group(2))
        except ValueError:
            continue
        name = _PARAM_ALIASES.get(m.group(1), m.group(1))
        if name not in values and np.isfinite(v):
            values[name] = v
            origin[name] = f"file name token {token!r}"
    for name, v in _explicit_params(params).items():
        values[name] = v
        origin[name] = "params= argument"
    return list(values), values, origin


def _per_seed_default_names(src: Path, width: int) -> list[str]:
    stem = src.name.lower()
    if "diff-react" in stem and width == 2:
        return ["u", "v"]
    if "rdb" in stem and width == 1:
        return ["h"]
    return ["u"] if width == 1 else [f"u{i}" for i in range(width)]


def _pdebench_hint(f: h5py.File) -> str:
    """What a file that is not PDEBench's looks like, for the layout error."""
    if f.attrs.get("format") is not None and attr_str(f.attrs["format"]) == FORMAT:
        return " It is already a simsci trajectory file; open it with simsci.data.open."
    if any(k in f for k in ("t0_fields", "t1_fields", "dimensions")):
        return " It looks like a file of The Well; use import_thewell."
    return ""


def _pdebench_plan(src: Path, f: h5py.File, params, channel_names) -> _Plan:
    keys = list(f.keys())
    datasets = {k: f[k] for k in keys if isinstance(f[k], h5py.Dataset)}
    hint = _pdebench_hint(f)
    names, values, origin = _pdebench_params(src, f, params)
    pvec = _params_vector(names, values)
    meta = {"root_attributes": _attrs(f), "params_from": origin}
    system = f"pdebench:{src.stem}"
    common = {"system": system, "param_names": names}

    tensor = datasets.get("tensor")
    if tensor is not None and "nu" in datasets and tensor.ndim == 4:
        return _darcy_plan(src, f, datasets, pvec, meta, common, channel_names)
    if "velocity" in datasets and "particles" in datasets:
        return _ns_incomp_plan(src, datasets, pvec, meta, common, channel_names)
    present = [v for v in _CFD_VARIABLES if v in datasets]
    if tensor is not None or present:
        return _arrays_plan(src, f, datasets, present, pvec, meta, common, channel_names)
    seeds = sorted(k for k in keys if isinstance(f[k], h5py.Group))
    if seeds and len(seeds) == len(keys) and all("data" in f[k] for k in seeds):
        return _per_seed_plan(src, f, seeds, names, pvec, meta, system, channel_names)
    raise _err(
        src,
        "import-layout",
        f"is not a PDEBench file of a supported layout. Supported layouts: "
        f"{_PDEBENCH_LAYOUTS}. Found: {_describe(f)}.{hint}",
    )


def _darcy_plan(src, f, datasets, pvec, meta, common, channel_names) -> _Plan:
    """'tensor' [N, 1, X, Y] (u) and 'nu' [N, X, Y] (a): one step at t = 0, ("a", "u")."""
    tensor, coef = datasets["tensor"], datasets["nu"]
    n, steps, nx, ny = tensor.shape
    if steps != 1 or coef.shape != (n, nx, ny):
        raise _err(
            src,
            "import-shape",
            f"Darcy layout needs 'tensor' [N, 1, X, Y] and 'nu' [N, X, Y]; got 'tensor' "
            f"{tensor.shape} and 'nu' {coef.shape}",
            dataset="tensor",
        )
    static = {
        "x": _coordinate(src, f, "x-coordinate", nx, 0),
        "y": _coordinate(src, f, "y-coordinate", ny, 1),
    }
    chans = _check_channels(channel_names or ["a", "u"], 2, "channel_names")

    def read_darcy(a, b, sel):
        parts = []
        for i in sel:
            parts.append(coef[a:b] if i == 0 else tensor[a:b, 0])
        x = np.stack(parts, axis=-1)[:, None]  # (B, 1, X, Y, C)
        return [_episode(x[j], np.zeros(1), pvec) for j in range(b - a)]

    return _Plan(
        layout="pdebench:darcy",
        n=n,
        channels=chans,
        channel_sources=["nu", "tensor"],
        read=read_darcy,
        episode_bytes=nx * ny * (coef.dtype.itemsize + tensor.dtype.itemsize),
        static=static,
        meta={**meta, "time": "one step per episode at t = 0 (a steady problem)"},
        **common,
    )


def _arrays_plan(src, f, datasets, present, pvec, meta, common, channel_names) -> _Plan:
    """'tensor' [N, T, *grid] (channel "u") or the CFD variables, each [N, T, *grid]."""
    tensor = datasets.get("tensor")
    sources = ["tensor"] if tensor is not None else present
    arrays = [datasets[s] for s in sources]
    shape = arrays[0].shape
    for s, arr in zip(sources, arrays):
        if arr.shape != shape:
            raise _err(
                src,
                "import-shape",
                f"has shape {arr.shape} but {sources[0]!r} has {shape}; every variable "
                "must be [N, T, *grid] with the same shape",
                dataset=s,
            )
    if not 3 <= len(shape) <= 5:
        raise _err(
            src,
            "import-shape",
            f"has shape {shape}; expected [N, T, X], [N, T, X, Y] or [N, T, X, Y, Z]",
            dataset=sources[0],
        )
    n, steps, *grid = shape
    static = {
        ax: _coordinate(src, f, f"{ax}-coordinate", size, k)
        for k, (ax, size) in enumerate(zip(_AXES, grid))
    }
    if "t-coordinate" not in datasets:
        raise _err(
            src,
            "import-layout",
            f"has no 't-coordinate' dataset for the {steps} time frames; found: {_describe(f)}",
        )
    t, note = _time_axis(src, datasets["t-coordinate"][()], steps, "t-coordinate")
    if note:
        meta["time"] = note
    default = ["u"] if tensor is not None else present
    chans = _check_channels(channel_names or default, len(sources), "channel_names")

    def read_arrays(a, b, sel):
        if len(sel) == 1:  # a view, no copy of the block
            x = arrays[sel[0]][a:b][..., None]
        else:
            x = np.stack([arrays[i][a:b] for i in sel], axis=-1)  # (B, T, *grid, C)
        return [_episode(x[j], t, pvec) for j in range(b - a)]

    return _Plan(
        layout="pdebench:tensor" if tensor is not None else "pdebench:multi-variable",
        n=n,
        channels=chans,
        channel_sources=sources,
        read=read_arrays,
        episode_bytes=int(np.prod(shape[1:])) * sum(a.dtype.itemsize for a in arrays),
        static=static,
        meta=meta,
        **common,
    )


def _ns_incomp_plan(src, datasets, pvec, meta, common, channel_names) -> _Plan:
    """'velocity' [N, T, *grid, D], 'particles' [N, T, *grid, 1], 'force' [N, *grid, D]
    (optional; repeated over time) and 't' [N, T] or [T]."""
    vel, part, force = datasets["velocity"], datasets["particles"], datasets.get("force")
    if vel.ndim < 4 or vel.shape[-1] != vel.ndim - 3:
        raise _err(
            src,
            "import-shape",
            f"has shape {vel.shape}; expected [N, T, *grid, D] with D the number of grid axes",
            dataset="velocity",
        )
    n, steps, *grid, dim = vel.shape
    expected = {"particles": (n, steps, *grid, 1), "force": (n, *grid, dim)}
    for name, arr in (("particles", part), ("force", force)):
        if arr is not None and arr.shape != expected[name]:
            raise _err(
                src,
                "import-shape",
                f"has shape {arr.shape}, expected {expected[name]} from 'velocity' {vel.shape}",
                dataset=name,
            )
    if "t" not in datasets or datasets["t"].shape not in ((n, steps), (steps,)):
        found = datasets["t"].shape if "t" in datasets else "no such dataset"
        raise _err(
            src,
            "import-layout",
            f"needs the frame times 't' [N, T] = {(n, steps)} (or [T]); found {found}",
            dataset="t",
        )
    times = datasets["t"][()]
    per_episode_t = times.ndim == 2
    axes = _AXES[:dim]
    # (dataset, component) per channel
    sources = [(vel, k) for k in range(dim)] + [(part, 0)]
    names = [f"velocity_{a}" for a in axes] + ["particles"]
    if force is not None:
        sources += [(force, k) for k in range(dim)]
        names += [f"force_{a}" for a in axes]
    chans = _check_channels(channel_names or names, len(names), "channel_names")
    constant = chans[dim + 1 :] if force is not None else []
    shared_t = None if per_episode_t else _time_axis(src, times, steps, "t")[0]

    def read_ns(a, b, sel):
        blocks = {}  # each dataset read once per block
        parts = []
        for i in sel:
            arr, k = sources[i]
            if arr.name not in blocks:
                blocks[arr.name] = arr[a:b]
            x = blocks[arr.name][..., k]
            parts.append(
                x if arr is not force else np.broadcast_to(x[:, None], (b - a, steps, *grid))
            )
        x = np.stack(parts, axis=-1)  # (B, T, *grid, C)
        eps = []
        for j in range(b - a):
            t = shared_t
            if t is None:
                t = _time_axis(src, times[a + j], steps, "t", episode=a + j)[0]
            eps.append(_episode(x[j], t, pvec))
        return eps

    itemsize = vel.dtype.itemsize
    return _Plan(
        layout="pdebench:ns-incompressible",
        n=n,
        channels=chans,
        channel_sources=[f"{arr.name.lstrip('/')}[..., {k}]" for arr, k in sources],
        read=read_ns,
        episode_bytes=int(np.prod(grid)) * itemsize * (steps * (dim + 1) + dim),
        meta={
            **meta,
            "constant_channels": constant,
            "grid": "the file holds no grid coordinates (PhiFlow's centred grid)",
        },
        **common,
    )


def _episode(x: np.ndarray, t: np.ndarray, pvec: np.ndarray) -> dict:
    ep = {"t": t, "x": x}
    if pvec.size:
        ep["params"] = pvec
    return ep


def _per_seed_plan(src, f, seeds, names, pvec, meta, system, channel_names) -> _Plan:
    first = f[seeds[0]]
    data = first["data"]
    if data.ndim < 3 or "grid" not in first or "t" not in first["grid"]:
        raise _err(
            src,
            "import-layout",
            f"per-seed layout needs '{seeds[0]}/data' [T, *grid, C] and '{seeds[0]}/grid/t'; "
            f"'{seeds[0]}/data' has shape {data.shape} and the group holds "
            f"{sorted(first.keys())}",
            dataset=f"{seeds[0]}/data",
        )
    row = data.shape[1:]  # (*grid, C)
    grid = row[:-1]
    if len(grid) > 3:
        raise _err(
            src,
            "import-shape",
            f"has shape {data.shape}; at most 3 spatial dims",
            dataset=f"{seeds[0]}/data",
        )
    coords = {}
    for k, (ax, size) in enumerate(zip(_AXES, grid)):
        coords[ax] = _coordinate(src, first["grid"], ax, size, k)
    chans = _check_channels(
        channel_names or _per_seed_default_names(src, row[-1]), row[-1], "channel_names"
    )
    if "config" in first.attrs:
        config = attr_str(first.attrs["config"])
        if len(config) <= 16384:
            meta["config_of_first_seed"] = config
    if len(first["grid"]["t"]) == data.shape[0] + 1:
        meta["time"] = "each seed's grid/t has T+1 entries for T frames; used the first T"

    def read_seeds(a, b, sel):
        out = []
        for i in range(a, b):
            key = seeds[i]
            grp = f[key]
            ds = grp["data"]
            where = f"{key}/data"
            if ds.ndim != len(row) + 1 or ds.shape[1:] != row:
                raise _err(
                    src,
                    "import-shape",
                    f"has shape {ds.shape} but '{seeds[0]}/data' has (T, *{row}); every seed "
                    "needs the same grid and channels",
                    dataset=where,
                    episode=i,
                )
            if "grid" not in grp or "t" not in grp["grid"]:
                raise _err(
                    src, "import-layout", "has no 'grid/t' time coordinate", dataset=key, episode=i
                )
            for ax, values in coords.items():
                if ax not in grp["grid"] or not np.array_equal(grp["grid"][ax][()], values):
                    raise _err(
                        src,
                        "import-shape",
                        f"coordinate differs from '{seeds[0]}/grid/{ax}'; every seed must share "
                        "the grid",
                        dataset=f"{key}/grid/{ax}",
                        episode=i,
                    )
            t, _ = _time_axis(src, grp["grid"]["t"][()], ds.shape[0], f"{key}/grid/t", i)
            x = ds[()]
            if sel != list(range(row[-1])):
                x = x[..., sel]
            out.append(_episode(x, t, pvec))
        return out

    return _Plan(
        layout="pdebench:per-seed",
        system=system,
        n=len(seeds),
        channels=chans,
        channel_sources=[f"<seed>/data[..., {c}]" for c in range(row[-1])],
        read=read_seeds,
        episode_bytes=int(np.prod(data.shape)) * data.dtype.itemsize,
        static=coords,
        param_names=names,
        meta={**meta, "episodes": "the root groups in sorted key order"},
    )


def import_pdebench(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    variables: Iterable[str] | None = None,
    params: Mapping[str, float] | None = None,
    channel_names: Sequence[str] | None = None,
    limit: int | None = None,
    compression: str | None = None,
    progress: bool = True,
    on_nonfinite: str = "error",
    overwrite: bool = True,
) -> Path:
    """Convert a PDEBench HDF5 file to a simsci kind="field" file; returns ``dst``.

    The layout (darcy, tensor, multi-variable, per-seed; see the module docstring) is
    detected from the file. ``variables`` selects and orders channels by name (e.g.
    ``["density", "Vx"]``; default all); ``params`` adds or overrides PDE parameters
    (``{"nu": 0.001}``); ``channel_names`` renames the channels (one name each, before
    ``variables`` applies); ``limit`` imports the first ``limit`` episodes;
    ``compression`` None, "gzip" or "lzf"; ``on_nonfinite`` "error" (default) or "skip"
    episodes holding NaN/inf; ``overwrite`` replace an existing ``dst``.
    Output: ``x`` (T, *grid, C), ``t`` (T,) float64, ``/static/x`` (``y``, ``z``),
    ``params`` (P,) with names, ``source_index`` (the episode's index in the source).
    """
    dst = _check_common(src, dst, limit, compression, on_nonfinite)
    src, f = _open(src)
    with f:
        plan = _pdebench_plan(src, f, params, channel_names)
        return _run(
            src,
            dst,
            plan,
            variables=variables,
            limit=limit,
            compression=compression,
            progress=progress,
            on_nonfinite=on_nonfinite,
            overwrite=overwrite,
        )


# ----------------------------------------------------------------------------- The Well
@dataclass
class _WellField:
    path: str
    ds: h5py.Dataset
    order: int
    sample_varying: bool
    time_varying: bool
    dim_varying: list[bool]
    channels: list[str]
    cache: np.ndarray | None = None

    def read(self, a: int, b: int, steps: int, grid: tuple) -> np.ndarray:
        """(b - a, T, *grid, k) as a broadcast view."""
        if self.sample_varying:
            arr = self.ds[a:b]
        else:
            if self.cache is None:
                self.cache = self.ds[()]
            arr = self.cache[None]
        if not self.time_varying:
            arr = arr[:, None]
        for k, used in enumerate(self.dim_varying):
            if not used:
                arr = np.expand_dims(arr, axis=2 + k)
        arr = arr.reshape(*arr.shape[: 2 + len(grid)], -1)
        return np.broadcast_to(arr, (b - a, steps, *grid, arr.shape[-1]))


def _well_layout_error(src: Path, f: h5py.File, what: str):
    hint = ""
    if f.attrs.get("format") is not None and attr_str(f.attrs["format"]) == FORMAT:
        hint = " It is already a simsci trajectory file; open it with simsci.data.open."
    elif "tensor" in f or any(v in f for v in _CFD_VARIABLES):
        hint = " It looks like a PDEBench file; use import_pdebench."
    return _err(
        src,
        "import-layout",
        f"is not a file of The Well's layout ({what}). The Well's files hold groups "
        "'dimensions' (attribute spatial_dims, datasets 'time' and one per spatial dim), "
        "'boundary_conditions', 'scalars' and 't0_fields'/'t1_fields'/'t2_fields', with root "
        f"attributes n_spatial_dims, n_trajectories. Found: {_describe(f)}.{hint}",
    )


@dataclass
class _WellAxes:
    """The Well's axes: spatial dim names, time steps, grid, trajectories and which
    coordinates vary per trajectory."""

    spatial: list[str]
    steps: int
    grid: tuple[int, ...]
    n: int
    time_sample_varying: bool
    coords_sample_varying: dict[str, bool]


@dataclass
class _WellParams:
    """Simulation parameters and scalars: constant or per-trajectory parameters, and the
    time-varying scalars (name, values, sample_varying)."""

    sim_values: dict
    names: list[str]
    const: dict[str, float]
    per_episode: dict[str, np.ndarray]
    var_scalars: list[tuple[str, np.ndarray, bool]]


def _well_dimensions(src: Path, f: h5py.File) -> list[str]:
    """Check the top-level layout; returns the spatial dim names."""
    if "dimensions" not in f or not any(f"t{i}_fields" in f for i in range(3)):
        raise _well_layout_error(
            src, f, "no 'dimensions' group or no 't0_fields'/'t1_fields'/'t2_fields'"
        )
    dims = f["dimensions"]
    if "spatial_dims" not in dims.attrs or "time" not in dims:
        raise _well_layout_error(
            src, f, "'dimensions' lacks the attribute spatial_dims or the dataset 'time'"
        )
    spatial = _str_list(dims.attrs["spatial_dims"])
    if "n_spatial_dims" in f.attrs and int(np.asarray(f.attrs["n_spatial_dims"]).ravel()[0]) != len(
        spatial
    ):
        raise _err(
            src,
            "import-shape",
            f"root attribute n_spatial_dims = {_py(f.attrs['n_spatial_dims'])} but "
            f"dimensions.spatial_dims lists {spatial}",
            dataset="dimensions",
        )
    for d in spatial:
        if d not in dims or not isinstance(dims[d], h5py.Dataset):
            raise _err(
                src,
                "import-layout",
                f"spatial dim {d!r} has no coordinate dataset",
                dataset=f"dimensions/{d}",
            )
    return spatial


def _field_names(grp) -> list[str]:
    """A group's ``field_names`` attribute, else its keys."""
    return _str_list(grp.attrs["field_names"]) if "field_names" in grp.attrs else list(grp.keys())


def _well_field_datasets(src: Path, f: h5py.File) -> list[tuple[h5py.Dataset, str, int]]:
    """(dataset, path, tensor order) of every field, in group order t0, t1, t2."""
    specs: list[tuple[h5py.Dataset, str, int]] = []
    for order in range(3):
        gname = f"t{order}_fields"
        if gname not in f:
            continue
        grp = f[gname]
        for name in _field_names(grp):
            if name not in grp:
                raise _err(
                    src,
                    "import-layout",
                    f"{gname}.field_names lists {name!r} but the group has no such dataset",
                    dataset=gname,
                )
            specs.append((grp[name], f"{gname}/{name}", order))
    if not specs:
        raise _well_layout_error(src, f, "the field groups hold no fields")
    return specs


def _well_axes(src: Path, f: h5py.File, spatial: list[str], specs) -> _WellAxes:
    """Time steps, grid and number of trajectories (n_trajectories, else the first
    per-trajectory field's length)."""
    dims = f["dimensions"]
    t_ds = dims["time"]
    coords_sv = {}
    grid = []
    for d in spatial:
        ds = dims[d]
        coords_sv[d] = _flag(ds, "sample_varying", ds.ndim == 2)
        grid.append(ds.shape[-1])
    n = None
    if "n_trajectories" in f.attrs:
        n = int(np.asarray(f.attrs["n_trajectories"]).ravel()[0])
    else:
        for ds, _, _ in specs:
            if _flag(ds, "sample_varying", True):
                n = ds.shape[0]
                break
    if n is None:
        raise _well_layout_error(src, f, "no n_trajectories attribute and no per-trajectory field")
    return _WellAxes(
        spatial=spatial,
        steps=t_ds.shape[-1],
        grid=tuple(grid),
        n=n,
        time_sample_varying=_flag(t_ds, "sample_varying", t_ds.ndim == 2),
        coords_sample_varying=coords_sv,
    )


def _well_field(src: Path, ds: h5py.Dataset, path: str, order: int, axes: _WellAxes):
    """One field checked against its attributes, with its channel names."""
    ndim, n, steps, grid = len(axes.spatial), axes.n, axes.steps, axes.grid
    sv = _flag(ds, "sample_varying", True)
    tv = _flag(ds, "time_varying", True)
    dv = (
        [bool(v) for v in np.asarray(ds.attrs["dim_varying"]).ravel()]
        if "dim_varying" in ds.attrs
        else [True] * ndim
    )
    if len(dv) != ndim:
        raise _err(
            src,
            "import-shape",
            f"dim_varying {dv} has {len(dv)} entries for {ndim} spatial dims",
            dataset=path,
        )
    want = (
        ((n,) if sv else ())
        + ((steps,) if tv else ())
        + tuple(g for g, used in zip(grid, dv) if used)
        + (ndim,) * order
    )
    if tuple(ds.shape) != want:
        raise _err(
            src,
            "import-shape",
            f"has shape {tuple(ds.shape)}, expected {want} from its attributes "
            f"(sample_varying={sv}, time_varying={tv}, dim_varying={dv}), "
            f"n_trajectories={n}, {steps} time steps, grid {grid} and a rank-{order} "
            f"field in {ndim} dims",
            dataset=path,
        )
    base = path.split("/", 1)[1]
    comps = ["".join(c) for c in itertools.product(axes.spatial, repeat=order)]
    names = [f"{base}_{c}" if c else base for c in comps]
    return _WellField(path, ds, order, sv, tv, dv, names)


def _well_fields(src: Path, specs, axes: _WellAxes) -> list[_WellField]:
    fields = [_well_field(src, ds, path, order, axes) for ds, path, order in specs]
    channels = [c for fl in fields for c in fl.channels]
    if len(set(channels)) != len(channels):
        dup = sorted({c for c in channels if channels.count(c) > 1})
        raise _err(src, "import-shape", f"field names give duplicate channels {dup}")
    return fields


def _well_coordinates(src: Path, f: h5py.File, axes: _WellAxes):
    """The time axis (checked when shared) and the coordinates: shared ones for
    ``/static``, per-trajectory ones for episode fields."""
    dims, n = f["dimensions"], axes.n
    times = dims["time"][()]
    if axes.time_sample_varying:
        if times.shape[0] != n:
            raise _err(
                src,
                "import-shape",
                f"has shape {times.shape}, expected ({n}, {axes.steps})",
                dataset="dimensions/time",
            )
    else:
        times = _check_times(src, times.ravel(), "dimensions/time")
    static: dict[str, np.ndarray] = {}
    per_episode: dict[str, np.ndarray] = {}
    for d in axes.spatial:
        values = dims[d][()]
        if axes.coords_sample_varying[d]:
            if values.shape[0] != n:
                raise _err(
                    src,
                    "import-shape",
                    f"has shape {values.shape}, expected ({n}, {values.shape[-1]})",
                    dataset=f"dimensions/{d}",
                )
            per_episode[d] = values
        else:
            static[d] = values.ravel()
    return times, static, per_episode


def _well_params(src: Path, f: h5py.File, axes: _WellAxes) -> _WellParams:
    """Numeric simulation parameters, then the time-invariant scalars not among them (a
    per-trajectory scalar replaces the attribute's value); time-varying scalars apart."""
    sim_names = (
        _str_list(f.attrs["simulation_parameters"]) if "simulation_parameters" in f.attrs else []
    )
    sim_values = {k: _py(f.attrs[k]) for k in sim_names if k in f.attrs}
    names = [k for k in sim_names if k in f.attrs and _number(f.attrs[k]) is not None]
    params = _WellParams(sim_values, names, {k: _number(f.attrs[k]) for k in names}, {}, [])
    if "scalars" not in f:
        return params
    sgrp = f["scalars"]
    for name in _field_names(sgrp):
        if name not in sgrp:
            raise _err(
                src,
                "import-layout",
                f"scalars.field_names lists {name!r} but there is no such dataset",
                dataset="scalars",
            )
        ds = sgrp[name]
        sv = _flag(ds, "sample_varying", False)
        tv = _flag(ds, "time_varying", False)
        lead = ((axes.n,) if sv else ()) + ((axes.steps,) if tv else ())
        stored = ds[()]
        values = stored
        if values.dtype.kind not in "biuf":
            continue
        if tuple(values.shape[: len(lead)]) != lead or int(np.prod(values.shape[len(lead) :])) != 1:
            raise _err(
                src,
                "import-shape",
                f"has shape {values.shape}, expected {lead} (+ a trailing 1) from "
                f"sample_varying={sv}, time_varying={tv}",
                dataset=f"scalars/{name}",
            )
        values = values.reshape(lead).astype(np.float64)
        if tv:
            params.var_scalars.append((name, values, sv))
            continue
        if name not in params.names:
            params.names.append(name)
        if sv:
            params.per_episode[name] = values
            params.const.pop(name, None)
        elif not _same_at_precision(params.const.get(name), stored):
            params.const[name] = float(values)
        # else: a constant scalar that repeats a root attribute at its own (often float32)
        # precision keeps the attribute's exact value (Prandtl 0.7, not 0.699999988)
    return params


def _same_at_precision(attr_value, stored: np.ndarray) -> bool:
    """Whether a root attribute's value equals a stored scalar once rounded to its dtype."""
    if attr_value is None or stored.dtype.kind != "f":
        return False
    return bool(np.asarray(attr_value).astype(stored.dtype) == stored.reshape(()))


def _well_boundaries(f: h5py.File) -> dict:
    """Per boundary condition its attributes and, when small, mask indices and values."""
    bcs = {}
    if "boundary_conditions" not in f:
        return bcs
    for name, grp in f["boundary_conditions"].items():
        desc = _attrs(grp)
        if isinstance(grp, h5py.Group):
            if "mask" in grp:
                mask = grp["mask"][()]
                desc["mask_shape"] = list(mask.shape)
                idx = np.argwhere(mask)
                if len(idx) <= _SMALL:
                    desc["mask_true"] = idx.tolist() if mask.ndim > 1 else idx.ravel().tolist()
            if "values" in grp:
                vals = grp["values"]
                desc["values_shape"] = list(vals.shape)
                if vals.size <= _SMALL:
                    desc["values"] = _py(vals[()].ravel())
        bcs[name] = desc
    return bcs


def _well_reader(src: Path, fields, axes: _WellAxes, times, per_episode, params: _WellParams):
    """``read(a, b, sel)``: episodes a..b-1 with the channels ``sel`` (in that order)."""
    steps, grid = axes.steps, axes.grid

    def read_well(a, b, sel):
        wanted = set(sel)
        parts = []
        offset = 0
        for fl in fields:
            idx = [j for j in range(len(fl.channels)) if offset + j in wanted]
            if idx:
                arr = fl.read(a, b, steps, grid)
                parts.append((offset, arr, idx))
            offset += len(fl.channels)
        # assemble in the order of sel
        lookup = {}
        for off, arr, idx in parts:
            for j in idx:
                lookup[off + j] = (arr, j)
        x = np.stack([lookup[c][0][..., lookup[c][1]] for c in sel], axis=-1)
        out = []
        for j in range(b - a):
            i = a + j
            if axes.time_sample_varying:
                t = _check_times(src, times[i], "dimensions/time", i)
            else:
                t = times
            ep = {"t": t, "x": x[j]}
            if params.names:
                ep["params"] = np.array(
                    [
                        params.per_episode[k][i] if k in params.per_episode else params.const[k]
                        for k in params.names
                    ],
                    np.float64,
                )
            if params.var_scalars:
                ep["scalars"] = np.stack(
                    [v[i] if sv else v for _, v, sv in params.var_scalars], axis=-1
                )
            for d, values in per_episode.items():
                ep[f"grid_{d}"] = values[i]
            out.append(ep)
        return out

    return read_well


def _well_plan(src: Path, f: h5py.File) -> _Plan:
    spatial = _well_dimensions(src, f)
    specs = _well_field_datasets(src, f)
    axes = _well_axes(src, f, spatial, specs)
    fields = _well_fields(src, specs, axes)
    times, static, per_episode = _well_coordinates(src, f, axes)
    params = _well_params(src, f, axes)
    bcs = _well_boundaries(f)

    channels = [c for fl in fields for c in fl.channels]
    constant = [c for fl in fields if not fl.time_varying for c in fl.channels]
    scalar_names = [name for name, _, _ in params.var_scalars]
    name = attr_str(f.attrs["dataset_name"]) if "dataset_name" in f.attrs else src.stem
    per_ep = sum(
        axes.steps * int(np.prod(axes.grid)) * len(fl.channels) * fl.ds.dtype.itemsize
        for fl in fields
    )
    meta = {
        "dataset_name": name,
        "grid_type": _py(f.attrs["grid_type"]) if "grid_type" in f.attrs else None,
        "spatial_dims": spatial,
        "simulation_parameters": params.sim_values,
        "constant_channels": constant,
        "boundary_conditions": bcs,
        "root_attributes": {k: v for k, v in _attrs(f).items() if k not in params.sim_values},
    }
    return _Plan(
        layout="thewell",
        system=f"thewell:{name}",
        n=axes.n,
        channels=channels,
        channel_sources=[fl.path for fl in fields for _ in fl.channels],
        read=_well_reader(src, fields, axes, times, per_episode, params),
        episode_bytes=max(1, per_ep),
        static=static,
        param_names=params.names,
        names={"scalars": scalar_names} if scalar_names else {},
        episode_fields=tuple(f"grid_{d}" for d in per_episode),
        groups={fl.path.split("/", 1)[1]: fl.channels for fl in fields},
        meta=meta,
        static_attrs={"boundary_conditions": json.dumps(bcs, sort_keys=True)}
        | ({"grid_type": str(meta["grid_type"])} if meta["grid_type"] is not None else {}),
    )


def import_thewell(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    variables: Iterable[str] | None = None,
    limit: int | None = None,
    compression: str | None = None,
    progress: bool = True,
    on_nonfinite: str = "error",
    overwrite: bool = True,
) -> Path:
    """Convert one HDF5 file of The Well to a simsci kind="field" file; returns ``dst``.

    Every field of t0/t1/t2_fields becomes channels (``density``, ``velocity_x``,
    ``stress_xy``...; see the module docstring); ``variables`` selects and orders them by
    channel or field name (``["density", "velocity"]``); ``limit`` imports the first
    ``limit`` trajectories; ``compression`` None, "gzip" or "lzf"; ``on_nonfinite``
    "error" (default) or "skip"; ``overwrite`` replace an existing ``dst``.
    Output: ``x`` (T, *grid, C), ``t`` (T,) float64, ``/static/<dim>`` coordinates,
    ``params`` (simulation parameters and constant scalars, with names), ``scalars``
    (T, K) for time-varying scalars, boundary conditions as JSON on ``/static``.
    """
    dst = _check_common(src, dst, limit, compression, on_nonfinite)
    src, f = _open(src)
    with f:
        plan = _well_plan(src, f)
        return _run(
            src,
            dst,
            plan,
            variables=variables,
            limit=limit,
            compression=compression,
            progress=progress,
            on_nonfinite=on_nonfinite,
            overwrite=overwrite,
        )
