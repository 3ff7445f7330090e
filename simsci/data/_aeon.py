"""Importer of aeon's time-series classification sets into the trajectory format.

``import_aeon("BasicMotions", "basic.h5", keep=0.5, seed=0)`` reads a classification
problem shipped inside the optional package aeon (``pip install "simsci[aeon]"``) from
its bundled ``.ts`` files -- offline, never downloading -- and writes one kind="state"
file of irregular, per-channel-masked sensor sequences with integer class labels.
``bundled_aeon_datasets()`` lists the sets aeon ships (aeon 1.6: ACSF1, ArrowHead,
BasicMotions, Covid3Month_disc, GunPoint, ItalyPowerDemand, JapaneseVowels, OSULeaf,
PickupGestureWiimoteZ, UnitTest); ``extract_path`` points at a folder holding
``<name>/<name>_TRAIN.ts`` and ``_TEST.ts`` for any other UCR/UEA problem (e.g. one that
``aeon.datasets.load_classification(name, extract_path=...)`` downloaded).

Layout and choices, and why:

- **Episodes.** One case = one episode: ``x`` float64 (T, C) (aeon's (C, T) transposed,
  channels last as the format wants; names ``channel_0``...), ``mask`` bool (T, C)
  (always written, so every file has the same schema), ``/episodes/label`` int64 (N,),
  the class index into ``meta["class_names"]`` (aeon's class values in the order of the
  file header), ``/episodes/source_index`` int64: the case's index in aeon's train or
  test partition. Unequal-length problems (JapaneseVowels: 7-29 frames;
  PickupGestureWiimoteZ) keep each case's own length: the format stores episodes flat.
- **Time.** ``t = sample index / sampling rate``, in seconds when the rate is known:
  ``sampling_rate`` when given, else the table ``SAMPLING_RATES`` (BasicMotions 10 Hz,
  "sampled once every tenth of a second" in its header; JapaneseVowels 156.25 frames/s,
  the 6.4 ms frame shift of the LPC analysis in the UCI description), else 1 (t is the
  sample index). ``meta["time_unit"]`` says which ("s" or "sample").
- **Splits.** aeon's train partition becomes our train and validation: a seeded
  ``val_fraction`` (default 10%, ``round(val_fraction * n_train)`` cases) of it is
  validation; aeon's test partition is our test split. Train cases come first in the
  file, then test cases, each in aeon's order.
- **Irregular sampling.** ``keep`` < 1 thins every channel independently, as
  ``simsci.systems.generate(..., per_channel=True)`` does: each channel keeps
  ``min(T, max(2, round(keep * T)))`` of its T points, uniformly without replacement;
  dropped values are NaN with ``mask`` False; rows where no channel is kept are dropped
  (so ``t`` stays the subset of times at which something was observed). Values missing
  in the source (NaN) are masked the same way. ``keep = 1`` keeps every point.
- **Random streams.** The validation choice and the thinning draw independent streams
  spawned from ``numpy.random.SeedSequence(seed)``: changing ``keep`` keeps the split.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simsci._version import __version__
from simsci.data._writer import TrajectoryWriter
from simsci.errors import MissingExtraError, unknown_name

#: samples per second of the bundled sets whose rate their documentation gives
SAMPLING_RATES = {"BasicMotions": 10.0, "JapaneseVowels": 1000.0 / 6.4}

_MISSING = (
    'the aeon importer needs the optional package aeon: pip install "simsci[aeon]" (with '
    "numpy >= 2.4 that downgrades numpy; simsci's Makefile installs aeon 1.6.0 with "
    "--no-deps beside numba 0.67.0 instead)"
)


def _aeon_data_dir() -> Path:
    try:
        import aeon.datasets as ad
    except ImportError as exc:
        raise MissingExtraError(f"{_MISSING} ({exc})") from exc
    return Path(ad.__file__).parent / "data"


def _is_classification(path: Path) -> bool:
    with open(path, encoding="utf-8") as f:
        for line in f:
            low = line.strip().lower()
            if low.startswith("@classlabel"):
                return low.split()[1:2] == ["true"]
            if low.startswith("@data"):
                return False
    return False


def bundled_aeon_datasets() -> list[str]:
    """The classification problems whose train and test ``.ts`` files ship inside aeon."""
    root = _aeon_data_dir()
    names = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        train = folder / f"{folder.name}_TRAIN.ts"
        if (
            train.is_file()
            and (folder / f"{folder.name}_TEST.ts").is_file()
            and _is_classification(train)
        ):
            names.append(folder.name)
    return names


def _load(path: Path):
    from aeon.datasets import load_from_ts_file

    X, y, meta = load_from_ts_file(str(path), return_meta_data=True)
    cases = [np.asarray(c, dtype=np.float64) for c in X]  # each (C, T)
    return cases, np.asarray(y).astype(str), meta


def _check_fraction(name: str, value, *, lo_open: bool, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    value = float(value)
    ok = (0.0 < value <= 1.0) if lo_open else (0.0 <= value < 1.0)
    if not (np.isfinite(value) and ok):
        interval = "(0, 1]" if lo_open else "[0, 1)"
        raise ValueError(f"{name} must lie in {interval} ({what}), got {value}")
    return value


def _check_args(name, keep, seed, val_fraction, sampling_rate, compression):
    """Validate the arguments of ``import_aeon``; returns (keep, val_fraction) as floats."""
    keep = _check_fraction("keep", keep, lo_open=True, what="fraction of points kept")
    val_fraction = _check_fraction(
        "val_fraction", val_fraction, lo_open=False, what="share of aeon's train cases"
    )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if sampling_rate is not None:
        if isinstance(sampling_rate, bool) or not isinstance(
            sampling_rate, (int, float, np.number)
        ):
            raise TypeError(f"sampling_rate must be a number (Hz) or None, got {sampling_rate!r}")
        if not (np.isfinite(sampling_rate) and sampling_rate > 0):
            raise ValueError(
                f"sampling_rate must be a finite number > 0 (samples per second), got "
                f"{sampling_rate!r}"
            )
    if compression not in (None, "gzip", "lzf"):
        raise ValueError(f"compression must be None, 'gzip' or 'lzf', got {compression!r}")
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be an aeon dataset name (str), got {name!r}")
    return keep, val_fraction


def _source_files(name: str, extract_path) -> dict[str, Path]:
    """The train and test ``.ts`` files of ``name``: aeon's bundled ones or under
    ``extract_path`` (checked to exist)."""
    if extract_path is None:
        root = _aeon_data_dir()
        bundled = bundled_aeon_datasets()
        if name not in bundled:
            err = unknown_name("bundled aeon classification set", name, bundled)
            raise type(err)(
                f"{err} Only the sets shipped inside aeon load offline; for another "
                "UCR/UEA problem pass extract_path= a folder holding "
                f"{name}/{name}_TRAIN.ts and {name}/{name}_TEST.ts."
            )
    else:
        _aeon_data_dir()  # aeon reads the .ts files: fail early when it is missing
        root = Path(extract_path)
    files = {part: root / name / f"{name}_{part.upper()}.ts" for part in ("train", "test")}
    for part, path in files.items():
        if not path.is_file():
            raise FileNotFoundError(
                f"aeon dataset {name!r}: no {part} file {str(path)!r}; extract_path must hold "
                f"{name}/{name}_TRAIN.ts and {name}/{name}_TEST.ts"
            )
    return files


@dataclass
class _Problem:
    """A classification problem as read from its train and test files."""

    train_x: list[np.ndarray]  # each case (C, T)
    train_y: np.ndarray
    test_x: list[np.ndarray]
    test_y: np.ndarray
    meta: dict  # the train file's header
    test_meta: dict
    classes: list[str]  # class values in the order of the header
    channels: int


def _read_problem(name: str, files: dict[str, Path]) -> _Problem:
    """Load both partitions and check that they form one classification problem."""
    train_x, train_y, meta = _load(files["train"])
    test_x, test_y, test_meta = _load(files["test"])
    if not meta.get("classlabel"):
        raise ValueError(
            f"aeon dataset {name!r} is not a classification problem (its header has no "
            "class labels); import_aeon imports classification sets only"
        )
    if meta.get("timestamps") or test_meta.get("timestamps"):
        raise ValueError(
            f"aeon dataset {name!r} stores its own time stamps (@timeStamps true), which "
            "import_aeon does not read; use a set with regular samples"
        )
    classes = [str(c) for c in meta.get("class_values") or sorted(set(train_y) | set(test_y))]
    for part, ys in (("train", train_y), ("test", test_y)):
        unknown = sorted(set(ys) - set(classes))
        if unknown:
            raise ValueError(
                f"aeon dataset {name!r}: {part} labels {unknown[:5]} are not among the "
                f"header's class values {classes}"
            )
    channels = {c.shape[0] for c in train_x + test_x}
    if len(channels) != 1:
        raise ValueError(
            f"aeon dataset {name!r}: cases have different channel counts {sorted(channels)}"
        )
    return _Problem(train_x, train_y, test_x, test_y, meta, test_meta, classes, channels.pop())


def _out_meta(
    name,
    files,
    extract_path,
    problem: _Problem,
    *,
    rate,
    time_unit,
    keep,
    seed,
    val_fraction,
    split: np.ndarray,
    n_val: int,
) -> dict:
    """The file meta: the source, the class names, the time axis and the split."""
    n_train, n_test = len(problem.train_x), len(problem.test_x)
    meta, test_meta = problem.meta, problem.test_meta
    return {
        "generator": "simsci.data.import_aeon",
        "simsci_version": __version__,
        "source": {
            "format": "aeon",
            "dataset": name,
            "files": {k: str(v) for k, v in files.items()},
            "bundled": extract_path is None,
            "train_cases": n_train,
            "test_cases": n_test,
            "equal_length": bool(meta.get("equallength")),
            "missing_in_source": bool(meta.get("missing") or test_meta.get("missing")),
        },
        "class_names": problem.classes,
        "sampling_rate": rate,
        "time_unit": time_unit,
        "keep": keep,
        "seed": int(seed),
        "val_fraction": val_fraction,
        "split": {"train": int((split == 0).sum()), "val": n_val, "test": n_test},
    }


def _episodes(problem: _Problem, split: np.ndarray, keep: float, rate: float, rng):
    """The episodes to write, train cases then test cases, each thinned by ``keep``."""
    index = {c: i for i, c in enumerate(problem.classes)}
    C = problem.channels
    cases = [(x, y, i) for i, (x, y) in enumerate(zip(problem.train_x, problem.train_y))]
    cases += [(x, y, i) for i, (x, y) in enumerate(zip(problem.test_x, problem.test_y))]
    for k, (case, label, source_index) in enumerate(cases):
        x = case.T  # (T, C)
        T = x.shape[0]
        mask = np.isfinite(x)
        if keep < 1.0:
            kept = min(T, max(2, round(keep * T)))
            scores = rng.random((T, C))
            kth = np.sort(scores, axis=0)[kept - 1]
            mask &= scores <= kth
        rows = mask.any(axis=1)
        yield {
            "t": np.arange(T, dtype=np.float64)[rows] / rate,
            "x": np.where(mask, x, np.nan)[rows],
            "mask": mask[rows],
            "label": np.int64(index[label]),
            "source_index": np.int64(source_index),
            "split": int(split[k]),
        }


def import_aeon(
    name: str,
    dst: str | os.PathLike,
    *,
    keep: float = 1.0,
    seed: int = 0,
    val_fraction: float = 0.1,
    sampling_rate: float | None = None,
    extract_path: str | os.PathLike | None = None,
    compression: str | None = None,
    overwrite: bool = True,
) -> Path:
    """Write the aeon classification problem ``name`` as a trajectory file ``dst``.

    ``keep`` in (0, 1]: fraction of each channel's points kept (irregular, masked);
    ``seed``: the validation split and the thinning; ``val_fraction`` in [0, 1): share
    of aeon's train cases held out for validation; ``sampling_rate`` (Hz) overrides the
    known rate (``SAMPLING_RATES``); ``extract_path``: a folder with
    ``<name>/<name>_{TRAIN,TEST}.ts`` instead of aeon's bundled files; ``compression``
    None, "gzip" or "lzf"; ``overwrite`` replace an existing ``dst``. Returns ``dst``.
    See the module docstring for the layout. Raises ImportError (with the install line)
    when aeon is not installed.
    """
    keep, val_fraction = _check_args(name, keep, seed, val_fraction, sampling_rate, compression)
    files = _source_files(name, extract_path)
    problem = _read_problem(name, files)

    rate = float(sampling_rate) if sampling_rate is not None else SAMPLING_RATES.get(name)
    time_unit = "s" if rate is not None else "sample"
    rate = 1.0 if rate is None else rate
    # independent streams: changing keep keeps the validation split
    val_seq, keep_seq = np.random.SeedSequence(int(seed)).spawn(2)
    n_train = len(problem.train_x)
    n_val = round(val_fraction * n_train)
    split = np.zeros(n_train + len(problem.test_x), dtype=np.uint8)
    split[np.random.default_rng(val_seq).permutation(n_train)[:n_val]] = 1
    split[n_train:] = 2
    out_meta = _out_meta(
        name,
        files,
        extract_path,
        problem,
        rate=rate,
        time_unit=time_unit,
        keep=keep,
        seed=seed,
        val_fraction=val_fraction,
        split=split,
        n_val=n_val,
    )
    with TrajectoryWriter(
        dst,
        kind="state",
        system=f"aeon:{name}",
        meta=out_meta,
        names={"x": [f"channel_{c}" for c in range(problem.channels)]},
        episode_fields=("source_index",),
        compression=compression,
        overwrite=overwrite,
    ) as writer:
        rng = np.random.default_rng(keep_seq)
        for episode in _episodes(problem, split, keep, rate, rng):
            writer.append(episode)
    return writer.path
