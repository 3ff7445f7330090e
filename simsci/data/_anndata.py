"""Importer of RNA-velocity data in AnnData files (scVelo's layout) into the trajectory
format, in the layout of simsci's gene-network snapshots, so that GFG trains on it.

``import_anndata("pancreas.h5ad", "cells.h5")`` reads an AnnData ``.h5ad`` file (or an
AnnData object) with the optional package anndata (``pip install "simsci[anndata]"``)
and writes one kind="state" file laid out like ``make_dataset("grn_toggle", ...)``
(simsci.datasets, module ``_grn``): ``simsci train gfg --data cells.h5`` and
``simsci evaluate CKPT --data cells.h5 --task motifs`` run on it.

What is read (scVelo's names, each can be renamed):

- the layers ``unspliced`` and ``spliced`` (cells x genes; numpy or scipy.sparse): the
  state. ``unspliced="Mu", spliced="Ms"`` imports scVelo's first-order moments instead;
- optionally the velocity layers ``velocity`` (ds/dt) and ``velocity_u`` (du/dt): scVelo
  names them ``vkey`` and ``vkey + "_u"`` and writes the second only in its dynamical
  mode (``scv.tl.recover_dynamics(adata); scv.tl.velocity(adata, mode="dynamical")``);
- optionally a cell-time column of ``obs``: ``time_key="auto"`` takes the first of
  ``TIME_KEYS`` present (``true_t`` of scVelo's simulator, scVelo's ``latent_time``,
  ``velocity_pseudotime``, ``dpt_pseudotime``);
- the cell and gene names (``obs_names``, ``var_names``).

Only the ``obs``, ``var`` and the named layers of a ``.h5ad`` file are read (not ``X``
nor other layers); a file that predates anndata's element encoding is read whole.

What is written (the gene-network snapshot layout, docs/format.md): one episode of one
step per cell; ``/steps/x`` float64 (1, 2G) ``= [u_1..u_G, s_1..s_G]`` (unspliced then
spliced, names ``u_<gene>``, ``s_<gene>``); ``/steps/v`` likewise ``[du/dt, ds/dt]``
when velocities are imported; ``/steps/t`` the cell's time (0.0 without a time column);
``/episodes/split`` (exact seeded counts, as the data set builders draw them),
``/episodes/source_index`` (the cell's row in the source) and, with
``normalise="size_factor"``, ``/episodes/size_factor``. ``meta["network"]`` holds a
reference network when one is given (``network=``), in the form
``GeneNetwork.config()`` writes: ``evaluate --task motifs`` scores against it.

Choices, and why:

- **Normalisation: none by default** (``normalise="none"``: the layers as stored).
  scVelo's preprocessing (``scv.pp.filter_and_normalize``) normalises the spliced and
  unspliced layers in place, so most files that carry velocities are normalised already
  (a second normalisation would rescale them twice), and their velocities are in the
  units of the layers they were computed from: x and v must stay in those units.
  ``normalise="size_factor"`` is for raw count files (velocyto's output): each cell's u,
  s (and v) are divided by ONE factor, the cell's total spliced + unspliced counts over
  every gene of the file divided by the median total over cells. One factor for both
  layers keeps each cell's u/s ratios, which carry the velocity signal; scVelo's own
  ``normalize_per_cell`` scales the two layers separately and changes them. A warning is
  raised when the layers look normalised already (not whole numbers, or scVelo's
  ``initial_size`` columns in ``obs``). No log transform: the kinetics are linear in
  the levels, and GFG normalises its inputs itself.
- **Counts** must be finite and >= 0: NaN, inf or a negative value in a selected gene
  is an error naming the layer, the cell and the gene (``import-nonfinite``,
  ``import-negative``), never silently zeroed.
- **Genes.** ``genes=[...]`` picks genes by name, in that order; ``top_genes=N`` keeps the
  N with the largest variance of the spliced layer (after normalisation), in file
  order; else every gene. GFG's state is 2G wide and its motif read-out forms G x G
  Jacobians per cell: tens of genes, not thousands. Gene names must be distinct.
- **Velocities** (``velocity="auto"``): both layers present -> imported; neither -> none
  (a file of states only; GFG needs ``v`` on one-step snapshots, so it is then for
  other uses); only one -> an error (GFG needs du/dt and ds/dt). ``"layers"`` requires
  both, ``"none"`` ignores them. scVelo writes NaN for every cell of a gene it did not
  fit: such genes are left out (listed in ``meta["import"]``) unless named in
  ``genes`` (then an error); NaN for some cells only, or inf, is an error.
- **Reference network** (``network=``): a JSON file or dict in ``GeneNetwork.config()``
  form (``genes``, ``edges`` [[source, target, sign]...], optional rates), a JSON list
  of edges, or a CSV/TSV edge list with a header naming the columns ``source`` (or
  ``regulator``, ``tf``), ``target`` and ``sign`` (or ``mor``, ``weight``: the sign of
  the number; ``+``/``-`` also read). Edges between imported genes are kept (a second,
  equal edge is merged; opposite signs are an error), the others dropped and counted.
  The rates (alpha, basal, beta, gamma per gene, K, hill per edge) are kept only when
  the config gives them for every imported gene; ``meta["network_rates"]`` says
  ``"given"`` or ``"unknown"`` (the scores need only the signs; the ``truth_*`` ceiling
  of ``evaluate --task motifs`` uses the rates, so it means nothing when unknown).
- **Splits**: ``round(f * n)`` train and validation cells, the rest test, assigned by a
  permutation drawn from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import csv
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse

from simsci._checks import check_split
from simsci._version import __version__
from simsci.data._check import open_h5
from simsci.data._schema import problem
from simsci.data._writer import TrajectoryWriter
from simsci.errors import MissingExtraError, unknown_name

#: obs columns taken as the cell's time by ``time_key="auto"``, in this order
TIME_KEYS = ("true_t", "latent_time", "velocity_pseudotime", "dpt_pseudotime")
NORMALISATIONS = ("none", "size_factor")
VELOCITY_MODES = ("auto", "layers", "none")

_MISSING = 'the AnnData importer needs the optional package anndata: pip install "simsci[anndata]"'
_IN_MEMORY = "<AnnData object>"
_SOURCE_ALIASES = ("source", "regulator", "tf")
_SIGN_ALIASES = ("sign", "mor", "weight")
_PER_GENE = ("alpha", "basal", "beta", "gamma")
_PER_EDGE = ("K", "hill")


def _anndata():
    try:
        import anndata
    except ImportError as exc:
        raise MissingExtraError(f"{_MISSING} ({exc})") from exc
    return anndata


# ------------------------------------------------------------------ arguments
@dataclass
class _Options:
    genes: list[str] | None
    top_genes: int | None
    normalise: str
    velocity: str
    vkey: str
    spliced: str
    unspliced: str
    time_key: str | None
    split: tuple[float, float, float]
    seed: int


def _name(value, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{what} must be a non-empty string, got {value!r}")
    return value


def _check_args(
    genes, top_genes, normalise, velocity, vkey, spliced, unspliced, time_key, split, seed
) -> _Options:
    if genes is not None:
        if isinstance(genes, (str, bytes)) or not hasattr(genes, "__iter__"):
            raise TypeError(f"genes must be a list of gene names, got {genes!r}")
        genes = [_name(g, "each of genes") for g in genes]
        if not genes:
            raise ValueError("genes must name at least one gene (or be None for all)")
        twice = sorted({g for g in genes if genes.count(g) > 1})
        if twice:
            raise ValueError(f"genes lists {twice} more than once")
    if top_genes is not None:
        if isinstance(top_genes, bool) or not isinstance(top_genes, (int, np.integer)):
            raise TypeError(f"top_genes must be a positive integer or None, got {top_genes!r}")
        if top_genes < 1:
            raise ValueError(f"top_genes must be >= 1 (genes kept), got {top_genes}")
        if genes is not None:
            raise ValueError("give genes (by name) or top_genes (by variance), not both")
    if normalise not in NORMALISATIONS:
        raise unknown_name("normalisation", normalise, NORMALISATIONS)
    if velocity not in VELOCITY_MODES:
        raise unknown_name("velocity mode", velocity, VELOCITY_MODES)
    if time_key is not None:
        _name(time_key, "time_key")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    spliced, unspliced = _name(spliced, "spliced"), _name(unspliced, "unspliced")
    if spliced == unspliced:
        raise ValueError(f"spliced and unspliced name the same layer {spliced!r}")
    return _Options(
        genes=genes,
        top_genes=None if top_genes is None else int(top_genes),
        normalise=normalise,
        velocity=velocity,
        vkey=_name(vkey, "vkey"),
        spliced=spliced,
        unspliced=unspliced,
        time_key=time_key,
        split=check_split(split),
        seed=int(seed),
    )


# ------------------------------------------------------------------ reading
@dataclass
class _Source:
    """What the importer needs of an AnnData: names, obs and the wanted layers."""

    label: str  # the file (or _IN_MEMORY) for messages
    path: Path | None
    obs: object  # a pandas DataFrame
    obs_names: list[str]
    var_names: list[str]
    layers: dict[str, object]  # the wanted layers that exist: name -> (n_obs, n_vars)
    available: list[str]  # every layer the source holds
    velocity: tuple[str, str] | None = None  # (du/dt layer, ds/dt layer)
    notes: dict = field(default_factory=dict)


def _velocity_layers(opts: _Options, available: list[str], label: str):
    """The (du/dt, ds/dt) layer names to read, or None; an error when only one exists."""
    if opts.velocity == "none":
        return None
    names = (f"{opts.vkey}_u", opts.vkey)
    present = [n for n in names if n in available]
    if len(present) == 2:
        return names
    if opts.velocity == "auto" and not present:
        return None
    missing = [n for n in names if n not in available]
    raise problem(
        label,
        "import-layout",
        f"has no velocity layer {' or '.join(repr(m) for m in missing)} (layers: "
        f"{', '.join(available) or 'none'}); GFG needs both du/dt ({names[0]!r}) and ds/dt "
        f"({names[1]!r}). scVelo writes both in its dynamical mode "
        "(scv.tl.recover_dynamics(adata); scv.tl.velocity(adata, mode='dynamical')); "
        "vkey= names other layers; velocity='none' imports the states alone",
    )


def _wanted(opts: _Options, available: list[str], label: str):
    missing = [n for n in (opts.unspliced, opts.spliced) if n not in available]
    if missing:
        raise problem(
            label,
            "import-layout",
            f"has no layer {' or '.join(repr(m) for m in missing)}; its layers: "
            f"{', '.join(available) or 'none'}. The state needs unspliced and spliced "
            "counts (velocyto/scVelo name them 'unspliced' and 'spliced'; unspliced= and "
            "spliced= name others, e.g. scVelo's moments 'Mu' and 'Ms')",
        )
    velocity = _velocity_layers(opts, available, label)
    return [opts.unspliced, opts.spliced, *(velocity or ())], velocity


def _from_object(adata, opts: _Options) -> _Source:
    available = sorted(adata.layers.keys())
    wanted, velocity = _wanted(opts, available, _IN_MEMORY)
    return _Source(
        label=_IN_MEMORY,
        path=None,
        obs=adata.obs,
        obs_names=[str(c) for c in adata.obs_names],
        var_names=[str(g) for g in adata.var_names],
        layers={name: adata.layers[name] for name in wanted},
        available=available,
        velocity=velocity,
    )


def _from_file(path: Path, opts: _Options, anndata) -> _Source:
    f, err = open_h5(path)
    if err is not None:
        raise err
    with f:
        if not {"obs", "var"} <= set(f.keys()):
            found = ", ".join(sorted(f.keys())) or "nothing"
            raise problem(
                path,
                "import-layout",
                f"is not an AnnData .h5ad file (no 'obs' and 'var' groups; found: {found})",
            )
        available = sorted(f["layers"].keys()) if "layers" in f else []
        wanted, velocity = _wanted(opts, available, str(path))
        if "encoding-type" not in f.attrs:  # anndata < 0.7 wrote no element encodings
            legacy = True
        else:
            legacy = False
            read_elem = _read_elem(anndata)
            obs, var = read_elem(f["obs"]), read_elem(f["var"])
            layers = {name: read_elem(f["layers"][name]) for name in wanted}
    if legacy:
        adata = anndata.read_h5ad(path)
        obs, var = adata.obs, adata.var
        layers = {name: adata.layers[name] for name in wanted}
    return _Source(
        label=str(path),
        path=path,
        obs=obs,
        obs_names=[str(c) for c in obs.index],
        var_names=[str(g) for g in var.index],
        layers=layers,
        available=available,
        velocity=velocity,
    )


def _read_elem(anndata):
    try:
        from anndata.io import read_elem  # anndata >= 0.11
    except ImportError:  # anndata 0.10
        from anndata.experimental import read_elem
    return read_elem


def _read_source(src, opts: _Options) -> _Source:
    anndata = _anndata()
    if isinstance(src, anndata.AnnData):
        source = _from_object(src, opts)
    elif isinstance(src, (str, os.PathLike)):
        source = _from_file(Path(src), opts, anndata)
    else:
        raise TypeError(f"src must be a .h5ad path or an AnnData object, got {type(src).__name__}")
    # column slices of a sparse layer: CSC once (anndata stores CSR or CSC)
    source.layers = {
        k: m.tocsc() if scipy.sparse.issparse(m) else m for k, m in source.layers.items()
    }
    n, G = len(source.obs_names), len(source.var_names)
    if n == 0 or G == 0:
        raise problem(
            source.label, "import-empty", f"holds {n} cells x {G} genes; nothing to import"
        )
    for name, layer in source.layers.items():
        if tuple(layer.shape) != (n, G):
            raise problem(
                source.label,
                "import-shape",
                f"layer {name!r} has shape {tuple(layer.shape)}, expected (cells, genes) = "
                f"({n}, {G})",
            )
    return source


# ------------------------------------------------------------------ values
#: matrix entries densified at a time when checking or reading many columns
BLOCK_ENTRIES = 2**24


def _columns(m, idx: np.ndarray) -> np.ndarray:
    """Dense float64 (n, len(idx)) of the columns ``idx`` of a dense or sparse matrix."""
    if scipy.sparse.issparse(m):
        return np.asarray(m[:, idx].toarray(), dtype=np.float64)
    return np.asarray(np.asarray(m)[:, idx], dtype=np.float64)


def _blocks(m, idx: np.ndarray):
    """(offset, dense float64 columns idx[offset:offset + k]) in blocks of about
    BLOCK_ENTRIES entries, so that checking thousands of genes never densifies them all."""
    k = max(1, BLOCK_ENTRIES // max(1, m.shape[0]))
    for start in range(0, len(idx), k):
        yield start, _columns(m, idx[start : start + k])


def _whole(m, rows: int | None = None) -> bool:
    """Whether the (first ``rows``) stored values are whole numbers."""
    if rows is not None:
        m = m[:rows]
    data = m.data if scipy.sparse.issparse(m) else np.asarray(m)
    data = np.asarray(data, dtype=np.float64)
    return bool(np.all(np.mod(data[np.isfinite(data)], 1.0) == 0.0))


def _check_counts(source: _Source, layer: str, idx: np.ndarray) -> None:
    """Counts of the genes ``idx`` are finite and >= 0: else an error naming the layer,
    the cell and the gene."""
    m = source.layers[layer]
    if scipy.sparse.issparse(m):  # the stored values alone, unless one is bad
        data = m[:, idx].data
        if np.isfinite(data).all() and (data >= 0).all():
            return
    for start, values in _blocks(m, idx):
        for bad, rule, what in (
            (~np.isfinite(values), "import-nonfinite", "is not finite"),
            (values < 0, "import-negative", "is negative"),
        ):
            if bad.any():
                i, j = (int(a) for a in np.argwhere(bad)[0])
                gene = source.var_names[idx[start + j]]
                raise problem(
                    source.label,
                    rule,
                    f"layer {layer!r}: cell {source.obs_names[i]!r} (row {i}), gene {gene!r} "
                    f"{what} ({float(values[i, j])!r}); counts must be finite and >= 0: filter "
                    "or repair those cells or genes (or leave the gene out with genes= / "
                    "top_genes=)",
                    field=layer,
                )


def _size_factors(source: _Source, opts: _Options) -> np.ndarray:
    """Per cell: total unspliced + spliced over every gene / the median total."""
    total = np.zeros(len(source.obs_names))
    for name in (opts.unspliced, opts.spliced):
        m = source.layers[name]
        total += np.asarray(m.sum(axis=1), dtype=np.float64).ravel()
    bad = ~np.isfinite(total) | (total <= 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise problem(
            source.label,
            "import-nonfinite" if not np.isfinite(total[i]) else "import-empty",
            f"cell {source.obs_names[i]!r} (row {i}) has total unspliced + spliced counts "
            f"{float(total[i])!r} over all genes ({int(bad.sum())} such cells); size-factor "
            "normalisation needs a finite total > 0: filter those cells first",
        )
    whole = all(_whole(source.layers[n], rows=2000) for n in (opts.unspliced, opts.spliced))
    if not whole or any(c in source.obs.columns for c in ("initial_size", "initial_size_spliced")):
        warnings.warn(
            f"{source.label}: normalise='size_factor' on layers that look normalised already "
            "(not whole numbers, or scVelo's 'initial_size' columns in obs); "
            "normalise='none' keeps them as they are",
            stacklevel=3,
        )
    return total / np.median(total)


def _unfitted(source: _Source, idx: np.ndarray) -> np.ndarray:
    """Bool per gene of ``idx``: its velocity is NaN in every cell (scVelo did not fit it)."""
    out = np.zeros(len(idx), dtype=bool)
    for name in source.velocity or ():
        for start, values in _blocks(source.layers[name], idx):
            out[start : start + values.shape[1]] |= np.isnan(values).all(axis=0)
    return out


def _check_velocity(source: _Source, name: str, values: np.ndarray, genes: list[str]) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        i, j = (int(a) for a in np.argwhere(bad)[0])
        raise problem(
            source.label,
            "import-nonfinite",
            f"velocity layer {name!r}: cell {source.obs_names[i]!r} (row {i}), gene "
            f"{genes[j]!r} is {float(values[i, j])!r} ({int(bad.sum())} such values in the "
            "imported genes); velocities must be finite in every cell of an imported gene",
            field=name,
        )


def _spliced_variance(m, idx: np.ndarray, factors: np.ndarray | None) -> np.ndarray:
    """Variance over cells of each column ``idx`` of the spliced layer (normalised)."""
    if scipy.sparse.issparse(m):
        sub = m[:, idx]
        if factors is not None:
            sub = scipy.sparse.diags(1.0 / factors) @ sub
        mean = np.asarray(sub.mean(axis=0), dtype=np.float64).ravel()
        sq = np.asarray(sub.multiply(sub).mean(axis=0), dtype=np.float64).ravel()
        return np.maximum(sq - mean**2, 0.0)
    out = np.empty(len(idx))
    for start, values in _blocks(m, idx):
        if factors is not None:
            values = values / factors[:, None]
        out[start : start + values.shape[1]] = values.var(axis=0)
    return out


# ------------------------------------------------------------------ genes
@dataclass
class _Genes:
    idx: np.ndarray  # columns of the source, in the order written
    names: list[str]
    how: str  # "all", "listed", "top N by spliced variance"
    without_velocity: list[str]  # left out: velocity NaN in every cell


def _select_genes(source: _Source, opts: _Options, factors: np.ndarray | None) -> _Genes:
    names = source.var_names
    if len(set(names)) != len(names):
        twice = sorted({g for g in names if names.count(g) > 1})[:5]
        raise problem(
            source.label,
            "import-layout",
            f"gene names repeat ({twice}...); make them distinct first "
            "(adata.var_names_make_unique())",
        )
    index = {g: k for k, g in enumerate(names)}
    if opts.genes is not None:
        for g in opts.genes:
            if g not in index:
                raise unknown_name("gene (genes=)", g, names)
        idx = np.array([index[g] for g in opts.genes], dtype=np.int64)
    else:
        idx = np.arange(len(names))
    dropped: list[str] = []
    if source.velocity is not None:
        unfitted = _unfitted(source, idx)
        if unfitted.any() and opts.genes is not None:
            listed = [names[k] for k in idx[unfitted]]
            raise problem(
                source.label,
                "import-nonfinite",
                f"genes {listed[:10]} have no velocity (NaN in every cell of "
                f"{' / '.join(repr(n) for n in source.velocity)}: scVelo did not fit them); "
                "leave them out of genes= (or import with velocity='none')",
            )
        dropped = [names[k] for k in idx[unfitted]]
        idx = idx[~unfitted]
        if len(idx) == 0:
            raise problem(
                source.label,
                "import-empty",
                "no gene has a velocity (every velocity is NaN); import with velocity='none' "
                "or recompute the velocities",
            )
    for layer in (opts.unspliced, opts.spliced):
        _check_counts(source, layer, idx)
    how = "listed" if opts.genes is not None else "all"
    if opts.top_genes is not None and opts.top_genes < len(idx):
        var = _spliced_variance(source.layers[opts.spliced], idx, factors)
        top = np.sort(np.argsort(-var, kind="stable")[: opts.top_genes])  # file order
        idx = idx[top]
        how = f"top {opts.top_genes} by spliced variance"
    elif opts.top_genes is not None:
        how = f"all {len(idx)} (top_genes={opts.top_genes} asked for at least as many)"
    return _Genes(idx=idx, names=[names[k] for k in idx], how=how, without_velocity=dropped)


# ------------------------------------------------------------------ time
def _cell_times(source: _Source, time_key: str | None) -> tuple[np.ndarray, str | None]:
    n = len(source.obs_names)
    obs = source.obs
    if time_key == "auto":
        time_key = next((k for k in TIME_KEYS if k in obs.columns), None)
    if time_key is None:
        return np.zeros(n), None
    if time_key not in obs.columns:
        raise unknown_name("obs column (time_key)", time_key, [str(c) for c in obs.columns])
    column = obs[time_key]
    if getattr(column.dtype, "kind", "O") not in "iuf":  # numpy or pandas' nullable numbers
        raise problem(
            source.label,
            "import-time",
            f"obs column {time_key!r} holds {column.dtype} values, not numbers; the cell time "
            "must be numeric (time_key=None writes t = 0)",
            field=f"obs/{time_key}",
        )
    values = np.asarray(column.to_numpy(dtype=np.float64, na_value=np.nan))
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.argmax(bad))
        raise problem(
            source.label,
            "import-time",
            f"obs column {time_key!r}: cell {source.obs_names[i]!r} (row {i}) has time "
            f"{float(values[i])!r} ({int(bad.sum())} such cells); times must be finite "
            "(time_key=None writes t = 0)",
            field=f"obs/{time_key}",
        )
    return values, time_key


# ------------------------------------------------------------------ network
def _sign(value, where: str) -> int:
    if isinstance(value, str):
        text = value.strip()
        if text in ("+", "-"):
            return 1 if text == "+" else -1
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{where}: sign {value!r} is not a number or '+'/'-'") from None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise ValueError(f"{where}: sign {value!r} is not a number or '+'/'-'")
    if not np.isfinite(value) or value == 0:
        raise ValueError(
            f"{where}: sign must be a non-zero number (its sign is used) or '+'/'-', got {value!r}"
        )
    return 1 if value > 0 else -1


def _edge_table(path: Path) -> list[list]:
    """Edges of a CSV/TSV file with a header naming source, target and sign columns."""
    with open(path, newline="", encoding="utf-8") as fh:
        first = fh.readline()
        fh.seek(0)
        delimiter = "\t" if "\t" in first else ","
        reader = csv.DictReader(fh, delimiter=delimiter)
        header = {h.strip().lower(): h for h in reader.fieldnames or []}

        def column(aliases, what):
            for a in aliases:
                if a in header:
                    return header[a]
            raise ValueError(
                f"{path}: the edge list needs a {what} column (one of {', '.join(aliases)}); "
                f"its header: {reader.fieldnames}"
            )

        src = column(_SOURCE_ALIASES, "source")
        dst = column(("target",), "target")
        sign = column(_SIGN_ALIASES, "sign")
        return [[row[src], row[dst], row[sign]] for row in reader]


def _load_network(network) -> tuple[dict, str]:
    """The reference network as a config dict (at least "edges"), and its origin."""
    if isinstance(network, (str, os.PathLike)):
        path = Path(network)
        if not path.is_file():
            raise FileNotFoundError(f"network: no such file {str(path)!r}")
        if path.suffix.lower() == ".json":
            with open(path, encoding="utf-8") as fh:
                try:
                    loaded = json.load(fh)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"network: {path} is not valid JSON ({exc})") from None
            config = loaded if isinstance(loaded, Mapping) else {"edges": loaded}
        else:
            config = {"edges": _edge_table(path)}
        config = {"name": path.stem, **config}
        return dict(config), str(path)
    if isinstance(network, Mapping):
        return dict(network), "given"
    if isinstance(network, Sequence) and not isinstance(network, str):
        return {"edges": list(network)}, "given"
    raise TypeError(
        "network must be a path (.json, .csv, .tsv), a GeneNetwork.config()-like dict or a "
        f"list of (source, target, sign) edges, got {type(network).__name__}"
    )


def _gene_ref(ref, names, e: int) -> str:
    """A gene of an edge: its name, or an index into the config's ``genes``."""
    if isinstance(ref, (int, np.integer)) and not isinstance(ref, bool):
        if names is None or not 0 <= ref < len(names):
            size = "no 'genes' list" if names is None else f"{len(names)} genes"
            raise ValueError(
                f"network: edge {e} refers to gene index {ref}, but the config has {size}"
            )
        return str(names[ref])
    return str(ref).strip()


def _network_edges(config: dict, genes: list[str]) -> tuple[list, list[int], int]:
    """Edges between imported genes (names), their positions in the config, and how many
    edges were dropped."""
    edges = config.get("edges")
    if isinstance(edges, (str, bytes)) or not isinstance(edges, Sequence):
        raise ValueError(
            f"network: 'edges' must be a list of [source, target, sign], got {edges!r}"
        )
    names = config.get("genes")
    index = set(genes)
    kept, positions, seen = [], [], {}
    for e, edge in enumerate(edges):
        if isinstance(edge, (str, bytes)) or not isinstance(edge, Sequence) or len(edge) != 3:
            raise ValueError(f"network: edge {e} must be [source, target, sign], got {edge!r}")
        src, dst = (_gene_ref(ref, names, e) for ref in edge[:2])
        sign = _sign(edge[2], f"network edge {e} ({src} -> {dst})")
        if src not in index or dst not in index:
            continue
        if (src, dst) in seen:
            if seen[(src, dst)] != sign:
                raise ValueError(
                    f"network: the edge {src} -> {dst} is given with both signs; keep one"
                )
            continue  # a repeat of the same edge
        seen[(src, dst)] = sign
        kept.append([src, dst, sign])
        positions.append(e)
    return kept, positions, len(edges) - len(kept)


def _network_rates(config: dict, genes: list[str], positions: list[int]) -> dict | None:
    """The rates for the imported genes and kept edges, or None when not all are given."""
    present = [k for k in (*_PER_GENE, *_PER_EDGE) if k in config]
    if not present:
        return None
    names = config.get("genes")
    if names is None or not set(genes) <= set(names) or len(present) < len(_PER_GENE + _PER_EDGE):
        return None
    where = {g: k for k, g in enumerate(names)}
    n_edges = len(config["edges"])
    rates = {}
    for key, size, pick in (
        *((k, len(names), [where[g] for g in genes]) for k in _PER_GENE),
        *((k, n_edges, positions) for k in _PER_EDGE),
    ):
        value = np.asarray(config[key], dtype=np.float64)
        if value.ndim == 0:
            rates[key] = float(value)
        elif value.shape == (size,):
            rates[key] = [float(v) for v in value[pick]]
        else:
            raise ValueError(
                f"network: {key!r} must be a number or {size} numbers, got shape {value.shape}"
            )
    return rates


def _reference_network(network, genes: list[str]) -> tuple[dict, dict]:
    """meta["network"] (GeneNetwork.config() form) and meta["network_source"]."""
    config, origin = _load_network(network)
    edges, positions, dropped = _network_edges(config, genes)
    if not edges:
        raise ValueError(
            f"network ({origin}): none of its {len(config['edges'])} edges joins two imported "
            f"genes ({', '.join(genes[:10])}{', ...' if len(genes) > 10 else ''}); "
            "import the genes it regulates (genes=) or check the names"
        )
    rates = _network_rates(config, genes, positions)
    out = {"name": str(config.get("name", "reference")), "genes": list(genes), "edges": edges}
    out.update(rates or {})
    source = {
        "origin": origin,
        "edges_given": len(config["edges"]),
        "edges_kept": len(edges),
        "edges_dropped": dropped,
    }
    return out, source


# ------------------------------------------------------------------ writing
# split_ids' rule (exact counts, a seeded permutation) with numpy's generator: the
# data layer does not import torch
def _split_ids(n: int, fractions, seed: int) -> np.ndarray:
    n_train = round(fractions[0] * n)
    n_val = min(round(fractions[1] * n), n - n_train)
    labels = np.full(n, 2, dtype=np.uint8)
    labels[:n_train] = 0
    labels[n_train : n_train + n_val] = 1
    return labels[np.random.default_rng(seed).permutation(n)]


def _out_meta(
    source, opts, genes: _Genes, time_key, split, network, network_source, integer_counts: bool
) -> dict:
    """The file meta: the source, what the import chose, the split, the network."""
    velocity = list(source.velocity) if source.velocity else None
    meta = {
        "generator": "simsci.data.import_anndata",
        "simsci_version": __version__,
        "source": {
            "format": "anndata",
            "file": source.label,
            "cells": len(source.obs_names),
            "genes": len(source.var_names),
            "layers": source.available,
            "integer_counts": integer_counts,
        },
        "import": {
            "unspliced": opts.unspliced,
            "spliced": opts.spliced,
            "velocity": velocity,
            "genes": genes.how,
            "genes_without_velocity": genes.without_velocity,
            "normalise": opts.normalise,
            "time_key": time_key,
        },
        "genes": genes.names,
        "time_unit": f"obs column {time_key!r}" if time_key else "none (t = 0)",
        "seed": opts.seed,
        "split": {k: int((split == c).sum()) for c, k in enumerate(("train", "val", "test"))},
        "split_fractions": list(opts.split),
        "state": "x = [u_1..u_G, s_1..s_G] (unspliced, spliced)",
        "fields": {
            "x": f"layers {opts.unspliced!r} then {opts.spliced!r}"
            + (" / size_factor" if opts.normalise == "size_factor" else ""),
            "t": f"obs column {time_key!r}" if time_key else "0 (no cell time)",
        },
    }
    if velocity:
        meta["fields"]["v"] = f"layers {velocity[0]!r} (du/dt) then {velocity[1]!r} (ds/dt)"
    if network is not None:
        meta["network"] = network
        meta["network_source"] = network_source
        meta["network_rates"] = "given" if "alpha" in network else "unknown"
    return meta


def import_anndata(
    src,
    dst: str | os.PathLike,
    *,
    genes: Sequence[str] | None = None,
    top_genes: int | None = None,
    normalise: str = "none",
    velocity: str = "auto",
    vkey: str = "velocity",
    spliced: str = "spliced",
    unspliced: str = "unspliced",
    time_key: str | None = "auto",
    network=None,
    split: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    compression: str | None = None,
    overwrite: bool = True,
) -> Path:
    """Write the cells of an AnnData ``.h5ad`` file (or object) ``src`` as gene-network
    snapshots in the trajectory file ``dst``; returns ``dst``.

    ``genes`` names the genes (in that order) or ``top_genes`` keeps the N most variable
    (spliced); ``normalise`` "none" (the layers as stored) or "size_factor"; ``velocity``
    "auto", "layers" or "none" (the layers ``vkey + "_u"`` and ``vkey``); ``spliced`` /
    ``unspliced`` the state's layers; ``time_key`` an obs column, "auto" (``TIME_KEYS``)
    or None (t = 0); ``network`` a reference network to score motifs against (path or
    dict, see the module docstring); ``split`` (train, val, test) fractions and ``seed``;
    ``compression`` None, "gzip" or "lzf"; ``overwrite`` replace an existing ``dst``.
    Raises MissingExtraError (an ImportError) when anndata is not installed.
    """
    opts = _check_args(
        genes, top_genes, normalise, velocity, vkey, spliced, unspliced, time_key, split, seed
    )
    if compression not in (None, "gzip", "lzf"):
        raise ValueError(f"compression must be None, 'gzip' or 'lzf', got {compression!r}")
    source = _read_source(src, opts)
    factors = _size_factors(source, opts) if opts.normalise == "size_factor" else None
    chosen = _select_genes(source, opts, factors)
    t, used_key = _cell_times(source, opts.time_key)
    net, net_source = (None, None)
    if network is not None:
        net, net_source = _reference_network(network, chosen.names)

    x = np.concatenate(
        [_columns(source.layers[name], chosen.idx) for name in (opts.unspliced, opts.spliced)],
        axis=1,
    )
    v = None
    if source.velocity is not None:
        parts = {name: _columns(source.layers[name], chosen.idx) for name in source.velocity}
        for name, values in parts.items():
            _check_velocity(source, name, values, chosen.names)
        v = np.concatenate([parts[name] for name in source.velocity], axis=1)
    integer_counts = _whole(x)  # of the imported genes, before any normalisation
    if factors is not None:
        x /= factors[:, None]
        if v is not None:
            v /= factors[:, None]

    n = len(source.obs_names)
    ids = _split_ids(n, opts.split, opts.seed)
    meta = _out_meta(source, opts, chosen, used_key, ids, net, net_source, integer_counts)
    state_names = [f"u_{g}" for g in chosen.names] + [f"s_{g}" for g in chosen.names]
    fields = ("source_index",) + (("size_factor",) if factors is not None else ())
    stem = Path(source.label).stem if source.path is not None else ""
    with TrajectoryWriter(
        dst,
        kind="state",
        system=f"anndata:{stem}" if stem else "anndata",
        meta=meta,
        names={"x": state_names, **({"v": state_names} if v is not None else {})},
        episode_fields=fields,
        compression=compression,
        overwrite=overwrite,
    ) as writer:
        for i in range(n):
            episode = {
                "t": t[i : i + 1],
                "x": x[i : i + 1],
                "split": int(ids[i]),
                "source_index": np.int64(i),
            }
            if v is not None:
                episode["v"] = v[i : i + 1]
            if factors is not None:
                episode["size_factor"] = np.float64(factors[i])
            writer.append(episode)
    return writer.path
