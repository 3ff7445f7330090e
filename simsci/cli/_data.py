"""``simsci data info|check|import|export|export-minari|import-minari``: look at,
validate and convert trajectory files (``import aeon NAME`` reads aeon's bundled
classification sets, ``import easytpp SRC`` EasyTPP's event sequences, ``import anndata
SRC.h5ad`` RNA-velocity data in scVelo's AnnData layout; ``export easytpp FILE DIR``
writes an events file as EasyTPP's train/dev/test files)."""

from __future__ import annotations

import sys

from simsci.cli._common import (
    add_action,
    add_episodes,
    add_group,
    add_no_progress,
    add_seed,
)

_COMPRESSION_HELP = "HDF5 compression of the written file (default: none)"
_SHARD_PATH_HELP = "a .h5 file or a directory of part-*.h5 shards"


def add_to(sub) -> None:
    dsub = add_group(
        sub,
        "data",
        help="inspect or validate trajectory files",
        description="Inspect (info) or validate (check) a trajectory file or a directory "
        "of shards against the format contract; convert files to and from it (import, "
        "export, export-minari, import-minari).",
    )
    add_info(dsub)
    add_check(dsub)
    add_import(dsub)
    add_export(dsub)
    add_export_minari(dsub)
    add_import_minari(dsub)


def add_info(dsub) -> None:
    info = add_action(
        dsub,
        "info",
        help="print a readable summary of a dataset",
        description="Print kind, system, episode count and lengths, fields with shapes, "
        "dtypes and names, parameter ranges, static arrays, graphs and file size. For a "
        "directory of shards: totals over every shard, episodes and steps per shard, the "
        "meta all shards share and each meta key that differs (with its value per shard).",
        run=run_info,
    )
    info.add_argument("path", help=_SHARD_PATH_HELP)


def add_check(dsub) -> None:
    check = add_action(
        dsub,
        "check",
        help="check every rule of the format; exit 1 if any is broken",
        description="Check every rule of the trajectory format contract and print each "
        "problem with the file, field, episode and rule it concerns: structure, times, "
        "marks, graphs, and every floating value (no ±inf; NaN in x only where mask is "
        "False). Exit status 0 when the file is valid, 1 when it is not.",
        run=run_check,
    )
    check.add_argument("path", help=_SHARD_PATH_HELP)


IMPORT_DESCRIPTION = (
    "Convert a PDEBench file ('tensor' with x/t coordinates, compressible NS "
    "'density'/'pressure'/'Vx'..., Darcy 'tensor' + 'nu', 2D incompressible NS "
    "'velocity'/'particles'/'force'/'t', 2D per-seed groups with 'data') or a The Well "
    "file (t0_fields, t1_fields, dimensions, boundary conditions) into a kind='field' "
    "trajectory file, "
    "streaming episode by episode; or a time-series classification set shipped inside "
    "the optional package aeon (BasicMotions, JapaneseVowels, ...; read offline from "
    "aeon's bundled files) into a kind='state' file of irregular, per-channel-masked "
    "sequences with class labels (--keep thins each channel); or EasyTPP's event "
    "sequences (a directory with train/dev/test .pkl or .json files, or one such file; "
    "pickles are read with a restricted unpickler) into a kind='events' file; or "
    "RNA-velocity data, an AnnData .h5ad file with scVelo's 'unspliced' and 'spliced' "
    "layers (optional 'velocity_u'/'velocity' layers and a cell-time obs column; needs "
    "the optional package anndata), into one single-step episode per cell with x = [u, s] "
    "and v = [du/dt, ds/dt], the layout of the grn_* data sets that 'simsci train gfg' "
    "and 'simsci evaluate --task motifs' read (--network attaches the reference network "
    "the motifs are scored against).\n\n"
    "examples:\n"
    "  simsci data import pdebench 1D_Burgers_Sols_Nu0.001.hdf5 data/burgers.h5 -n 100\n"
    "  simsci data import aeon BasicMotions data/basic_motions.h5 --keep 0.5\n"
    "  simsci data import aeon JapaneseVowels data/vowels.h5 --keep 0.7 --seed 1\n"
    "  simsci data import easytpp data/taxi data/taxi_events.h5 --ties drop\n"
    "  simsci data import anndata pancreas.h5ad data/pancreas.h5 --top-genes 20 "
    "--unspliced-layer Mu --spliced-layer Ms --network collectri.csv"
)


def add_import(dsub) -> None:
    imp = add_action(
        dsub,
        "import",
        help="convert a PDEBench or The Well HDF5 file, an aeon classification set, "
        "EasyTPP event sequences or an AnnData file of RNA velocity to the trajectory format",
        description=IMPORT_DESCRIPTION,
        run=run_import,
    )
    imp.add_argument(
        "layout",
        choices=["pdebench", "thewell", "aeon", "easytpp", "anndata"],
        help="the source layout",
    )
    imp.add_argument(
        "src",
        help="the source HDF5 file; for aeon, the dataset name (e.g. BasicMotions); for "
        "easytpp, a directory of train/dev/test files or one file; for anndata, a .h5ad file",
    )
    imp.add_argument("dst", help="the trajectory file to write")
    add_episodes(
        imp,
        default=None,
        help="pdebench/thewell: import only the first N episodes (default: all)",
        deprecated=("--limit",),
    )
    imp.add_argument("--compression", choices=["gzip", "lzf"], default=None, help=_COMPRESSION_HELP)
    add_no_progress(imp)
    add_seed(imp, help="aeon: the validation split and the thinning (--keep); anndata: the split")
    _add_aeon_options(imp.add_argument_group("aeon only"))
    _add_easytpp_options(imp.add_argument_group("easytpp only"))
    _add_anndata_options(imp.add_argument_group("anndata only"))


def _add_aeon_options(aeon) -> None:
    aeon.add_argument(
        "--keep",
        type=float,
        default=None,
        help="fraction of each channel's points kept, in (0, 1]; None keeps them all",
    )
    aeon.add_argument(
        "--val-fraction",
        type=float,
        default=None,
        help="share of aeon's train cases held out for validation; None is 0.1",
    )
    aeon.add_argument(
        "--sampling-rate",
        type=float,
        default=None,
        help="samples per second; None: the known rate, else t = sample index",
    )
    aeon.add_argument(
        "--extract-path",
        default=None,
        help="a folder with NAME/NAME_TRAIN.ts and NAME_TEST.ts instead of aeon's bundled sets",
    )


def _add_easytpp_options(tpp) -> None:
    tpp.add_argument(
        "--ties",
        choices=["error", "jitter", "drop"],
        default=None,
        help="equal consecutive event times: refuse them (None is 'error'), separate them by "
        "a tiny step, or drop the later ones",
    )
    tpp.add_argument(
        "--max-events",
        type=int,
        default=None,
        help="refuse sequences longer than N events (with --truncate: keep their first N)",
    )
    tpp.add_argument("--truncate", action="store_true", help="keep the first --max-events events")
    tpp.add_argument(
        "--skip-empty", action="store_true", help="leave empty sequences out (else an error)"
    )
    tpp.add_argument(
        "--no-check-gaps",
        action="store_true",
        help="do not require time_since_last_event to match the differences of the times",
    )


def _add_anndata_options(ann) -> None:
    genes = ann.add_mutually_exclusive_group()
    genes.add_argument(
        "--genes", default=None, metavar="G1,G2,...", help="the genes to import, in this order"
    )
    genes.add_argument(
        "--top-genes",
        type=int,
        default=None,
        metavar="N",
        help="import the N genes of largest spliced variance (default: every gene)",
    )
    ann.add_argument(
        "--normalise",
        choices=["none", "size_factor"],
        default=None,
        help="none (default): the layers as stored (scVelo's preprocessing normalises them "
        "already); size_factor: divide each cell's u, s and v by its total counts / the median",
    )
    ann.add_argument(
        "--velocity",
        choices=["auto", "layers", "none"],
        default=None,
        help="import the velocity layers VKEY_u (du/dt) and VKEY (ds/dt): auto (default) "
        "when both exist, layers requires them, none ignores them",
    )
    ann.add_argument("--vkey", default=None, help="the velocity layer's name (scVelo's vkey)")
    ann.add_argument(
        "--spliced-layer", default=None, help="the spliced layer (default spliced; Ms: moments)"
    )
    ann.add_argument(
        "--unspliced-layer",
        default=None,
        help="the unspliced layer (default unspliced; Mu: moments)",
    )
    ann.add_argument(
        "--time-key",
        default=None,
        help="the obs column of the cell time; auto (default): true_t, latent_time, "
        "velocity_pseudotime or dpt_pseudotime when present; none: t = 0",
    )
    ann.add_argument(
        "--network",
        default=None,
        metavar="FILE",
        help="a reference network to score motifs against: .json (GeneNetwork.config() or "
        "[[source, target, sign], ...]) or a .csv/.tsv edge list (source, target, sign)",
    )
    ann.add_argument(
        "--split-fractions",
        dest="split_fractions",
        default=None,
        metavar="TRAIN,VAL,TEST",
        help="fractions of the cells in each split (default: 0.8,0.1,0.1)",
    )


def add_export(dsub) -> None:
    exp = add_action(
        dsub,
        "export",
        help="write an events file in EasyTPP's data layout (train/dev/test files)",
        description="Write a kind='events' trajectory file as EasyTPP data: DST receives "
        "train, dev and test files (one per /episodes/split; .pkl by default, or .json for "
        "EasyTPP's HuggingFace loader). Times and marks are written as stored; "
        "locations, groups, parameters and windows have no place in EasyTPP's layout "
        "and are named as dropped. 'simsci data import easytpp DST' reads them back.",
        epilog="example:\n  simsci data export easytpp runs/events.h5 runs/events_easytpp",
        run=run_export,
    )
    exp.add_argument("layout", choices=["easytpp"], help="the target layout")
    exp.add_argument("src", help="the events trajectory file")
    exp.add_argument("dst", help="the directory to write the split files into")
    exp.add_argument(
        "--format", choices=["pkl", "json"], default="pkl", help="file format (default: pkl)"
    )


def run_export(args) -> int:
    from simsci import data

    summary = data.export_easytpp(args.src, args.dst, format=args.format)
    for split, path in summary["files"].items():
        print(
            f"wrote {path}: {summary['sequences'][split]} sequences, "
            f"{summary['events'][split]} events"
        )
    if summary["dropped"]:
        print(f"not in EasyTPP's layout, not written: {', '.join(summary['dropped'])}")
    return 0


def add_export_minari(dsub) -> None:
    exp = add_action(
        dsub,
        "export-minari",
        help="write a rollout file as a Minari dataset (offline RL)",
        description="Write a rollout file (kind='rollout', recorded with RecordEpisodes) as "
        "a local Minari dataset under $MINARI_DATASETS_PATH (default ~/.minari/datasets). "
        'Needs the optional package minari: pip install "simsci[minari]".',
        run=run_export_minari,
    )
    exp.add_argument("file", help="the rollout file (or a directory of part-*.h5 shards)")
    exp.add_argument("dataset_id", help="the Minari id, '(namespace/)name-v<version>'")
    exp.add_argument(
        "--env",
        default=None,
        help="a gymnasium id to attach (default: the file's env_id when registered)",
    )
    exp.add_argument("--overwrite", action="store_true", help="replace an existing dataset")
    exp.add_argument("--description", default=None, help="the dataset description")
    exp.add_argument("--author", default=None, help="the dataset author")
    exp.add_argument("--author-email", default=None, help="the author's contact")
    exp.add_argument("--algorithm-name", default=None, help="the policy that collected the data")
    exp.add_argument("--code-permalink", default=None, help="a link to the code that made it")


def add_import_minari(dsub) -> None:
    imn = add_action(
        dsub,
        "import-minari",
        help="write a local Minari dataset as a rollout file",
        description="Write a local Minari dataset (Box observations, or Dict observations "
        "of Box, Discrete and Dict entries, stored as one step field x.<key> per entry; Box "
        "or Discrete actions) as a trajectory file of kind 'rollout'. Needs the optional package "
        'minari: pip install "simsci[minari]".',
        run=run_import_minari,
    )
    imn.add_argument("dataset_id", help="the Minari id, '(namespace/)name-v<version>'")
    imn.add_argument("out", help="the trajectory file to write")
    imn.add_argument("--compression", choices=["gzip", "lzf"], default=None, help=_COMPRESSION_HELP)


def run_info(args) -> int:
    from simsci import data

    print(data.info(args.path))
    return 0


def run_check(args) -> int:
    from simsci import data

    problems = data.check_file(args.path)
    if not problems:
        print(f"{args.path}: OK (every rule of the format holds)")
        return 0
    for problem in problems:
        print(problem, file=sys.stderr)  # each names its file, field, episode and rule
    print(f"{args.path}: {len(problems)} problem(s)", file=sys.stderr)
    return 1


_AEON_OPTIONS = ("keep", "val_fraction", "sampling_rate", "extract_path")
_ANNDATA_FLAGS = {
    "genes": "--genes",
    "top_genes": "--top-genes",
    "normalise": "--normalise",
    "velocity": "--velocity",
    "vkey": "--vkey",
    "spliced_layer": "--spliced-layer",
    "unspliced_layer": "--unspliced-layer",
    "time_key": "--time-key",
    "network": "--network",
    "split_fractions": "--split-fractions",
}
_EASYTPP_FLAGS = {
    "ties": "--ties",
    "max_events": "--max-events",
    "truncate": "--truncate",
    "skip_empty": "--skip-empty",
    "no_check_gaps": "--no-check-gaps",
}


def run_import(args) -> int:
    from simsci import data

    ann_given = [flag for k, flag in _ANNDATA_FLAGS.items() if getattr(args, k, None) is not None]
    if ann_given and args.layout != "anndata":
        verb = "applies" if len(ann_given) == 1 else "apply"
        raise ValueError(
            f"{', '.join(ann_given)} {verb} to 'data import anndata' only, not to {args.layout}"
        )
    aeon_opts = {k: getattr(args, k) for k in _AEON_OPTIONS if getattr(args, k) is not None}
    if args.seed != 0 and args.layout not in ("aeon", "anndata"):  # 0 is the default
        raise ValueError(
            f"--seed applies to 'data import aeon' and 'data import anndata' only, not to "
            f"{args.layout}"
        )
    if args.seed != 0 and args.layout == "aeon":
        aeon_opts["seed"] = args.seed
    tpp_given = [
        flag for k, flag in _EASYTPP_FLAGS.items() if getattr(args, k, None) not in (None, False)
    ]
    if tpp_given and args.layout != "easytpp":
        verb = "applies" if len(tpp_given) == 1 else "apply"
        raise ValueError(
            f"{', '.join(tpp_given)} {verb} to 'data import easytpp' only, not to {args.layout}"
        )
    if args.layout == "aeon":
        if args.episodes is not None:
            raise ValueError("-n/--episodes applies to pdebench/thewell; aeon imports every case")
        try:
            path = data.import_aeon(args.src, args.dst, compression=args.compression, **aeon_opts)
        except ImportError as exc:
            return _minari_missing(args, exc)
        print(f"wrote {path}")
        return 0
    if aeon_opts:
        given = ", ".join(f"--{k.replace('_', '-')}" for k in aeon_opts)
        verb = "applies" if len(aeon_opts) == 1 else "apply"
        raise ValueError(f"{given} {verb} to 'data import aeon' only, not to {args.layout}")
    if args.layout == "anndata":
        return _run_import_anndata(args, data)
    if args.layout == "easytpp":
        if args.episodes is not None:
            raise ValueError(
                "-n/--episodes applies to pdebench/thewell; for easytpp use --max-events to cap "
                "sequence lengths"
            )
        path = data.import_easytpp(
            args.src,
            args.dst,
            ties=args.ties or "error",
            skip_empty=args.skip_empty,
            max_events=args.max_events,
            truncate=args.truncate,
            check_gaps=not args.no_check_gaps,
            compression=args.compression,
        )
        print(f"wrote {path}")
        return 0
    convert = data.import_pdebench if args.layout == "pdebench" else data.import_thewell
    path = convert(
        args.src,
        args.dst,
        limit=args.episodes,
        compression=args.compression,
        progress=not args.no_progress,
    )
    print(f"wrote {path}")
    return 0


def _anndata_options(args) -> dict:
    """The keywords of import_anndata that the command line gave."""
    opts = {}
    if args.genes is not None:
        opts["genes"] = [g.strip() for g in args.genes.split(",") if g.strip()]
    if args.split_fractions is not None:
        try:
            opts["split"] = tuple(float(v) for v in args.split_fractions.split(","))
        except ValueError:
            raise ValueError(
                "--split-fractions must be three comma-separated fractions train,val,test "
                f"(e.g. 0.8,0.1,0.1), got {args.split_fractions!r}"
            ) from None
    if args.time_key is not None:
        opts["time_key"] = None if args.time_key == "none" else args.time_key
    renamed = {"spliced_layer": "spliced", "unspliced_layer": "unspliced"}
    for key in ("top_genes", "normalise", "velocity", "vkey", "network", *renamed):
        value = getattr(args, key)
        if value is not None:
            opts[renamed.get(key, key)] = value
    return opts


def _run_import_anndata(args, data) -> int:
    if args.episodes is not None:
        raise ValueError("-n/--episodes applies to pdebench/thewell; anndata imports every cell")
    try:
        path = data.import_anndata(
            args.src,
            args.dst,
            seed=args.seed,
            compression=args.compression,
            **_anndata_options(args),
        )
    except ImportError as exc:
        return _minari_missing(args, exc)
    meta = data.open(path).meta
    velocity = "with velocities" if "v" in meta["fields"] else "no velocities"
    network = meta.get("network_source")
    net = f", network: {network['edges_kept']} edges" if network else ""
    print(
        f"wrote {path} ({meta['source']['cells']} cells, {len(meta['genes'])} genes, "
        f"{velocity}{net})"
    )
    return 0


def _minari_missing(args, exc: ImportError) -> int:
    """A missing optional package (minari, aeon): one clear line, exit status 2."""
    # main() reports ValueError/OSError/...; a missing optional package gets the same line
    if args.traceback:
        raise exc
    print(f"simsci: error: {exc}", file=sys.stderr)
    return 2


def run_export_minari(args) -> int:
    from simsci.envs import to_minari

    try:
        dataset = to_minari(
            args.file,
            args.dataset_id,
            env=args.env,
            overwrite=args.overwrite,
            description=args.description,
            author=args.author,
            author_email=args.author_email,
            algorithm_name=args.algorithm_name,
            code_permalink=args.code_permalink,
        )
    except ImportError as exc:
        return _minari_missing(args, exc)
    print(
        f"wrote Minari dataset {args.dataset_id} ({dataset.total_episodes} episodes, "
        f"{dataset.total_steps} steps) to {dataset.spec.data_path}"
    )
    return 0


def run_import_minari(args) -> int:
    from simsci.envs import from_minari

    try:
        path = from_minari(args.dataset_id, args.out, compression=args.compression)
    except ImportError as exc:
        return _minari_missing(args, exc)
    print(f"wrote {path}")
    return 0
