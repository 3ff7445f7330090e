"""Dataset builders: simulated data sets that are more than one system's trajectories.

``make_dataset(name, n, out=..., seed=...)`` writes a trajectory file (kind "state") by
the builder registered as ``name`` in :data:`DATASETS`: ``"pendulum_images"`` (frames of
a damped pendulum, irregular and noisy; :mod:`simsci.datasets._pendulum_images`) and
``"climate"`` (station-years of five correlated daily weather channels with gaps;
:mod:`simsci.datasets._climate`). ``simsci generate NAME`` reaches the same builders, and
``simsci generate --list`` lists them after the systems.

Design choices, and why:

- **A registry beside the systems'.** A data set such as rendered pendulum frames is
  made *from* a system (``damped_pendulum``, its integrator) but is not one: it has no
  drift, its ``x`` is not the state. A second plain dict keeps ``systems.get`` and
  ``generate`` unchanged, and the CLI looks a name up in both (an unknown name lists
  both and suggests the closest).
- **Explicit options.** A builder is ``build(n, common, **own)``: ``common`` a
  :class:`BuildOptions` (what every builder takes: ``out``, ``seed``, ``progress``,
  ``split``), its own options keyword-only with documented defaults. ``make_dataset``
  checks the given options against ``DatasetInfo.options()`` (the builder's own options
  and ``split``), so a misspelt or inapplicable option (``--method`` for ``climate``)
  is an error listing the valid ones, never silently ignored.
- **One builder per family.** Near-identical data sets (the lifted flows, the gene
  networks, the point processes) are one builder, registered under each name with
  that name's ``defaults``: they override the builder's own defaults (``t_end``) or
  add the options it takes through ``**options`` (a flow's parameters).
- **Shared conventions with** :func:`simsci.systems.generate`: ``keep`` in (0, 1] is the
  fraction of a regular grid's time points kept per episode (``max(2, round(keep L))``
  of them, uniformly without replacement, sorted); splits are exact counts assigned by
  a seeded permutation; independent random streams are spawned from one
  :class:`numpy.random.SeedSequence` (changing ``keep`` does not change the simulated
  trajectories); same arguments, identical file. Builders run on the CPU (the data
  sets are small); writes are atomic (:class:`simsci.data.TrajectoryWriter`).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from simsci._seeding import check_count, check_seed
from simsci._version import __version__
from simsci.errors import UnknownNameError, unknown_name
from simsci.systems import SYSTEMS

#: the train/val/test fractions of a builder that registers no other default
DEFAULT_SPLIT = (0.8, 0.1, 0.1)


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    """The options every builder takes: the output file ``out``, the ``seed`` of its
    random streams, whether to show a ``progress`` bar, the train/val/test ``split``.

    ``make_dataset`` checks ``n`` and ``seed`` and fills in the builder's registered
    default split; the builder checks ``split`` where it draws the split labels.
    """

    out: str | os.PathLike
    seed: int = 0
    progress: bool = False
    split: Sequence[float] = DEFAULT_SPLIT

    def meta(self, dataset: str, n: int) -> dict:
        """The head every builder's ``meta`` starts with."""
        return {
            "generator": "simsci.datasets.make_dataset",
            "dataset": dataset,
            "simsci_version": __version__,
            "n": n,
            "seed": self.seed,
        }


#: BuildOptions' fields: not a builder's own options (a keyword builder, such as
#: simsci.driving.make_scenes behind _driving.py's adapter, lists them in its signature)
_COMMON = tuple(f.name for f in dataclasses.fields(BuildOptions))


def check_compression(compression) -> str | None:
    """``compression`` for :class:`simsci.data.TrajectoryWriter`: None, "gzip" or "lzf"."""
    if compression not in (None, "gzip", "lzf"):
        raise ValueError(f"compression must be None, 'gzip' or 'lzf', got {compression!r}")
    return compression


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """A registered builder: ``build(n, common: BuildOptions, **options) -> Path``, with
    ``defaults`` (options of this name that override or add to the builder's own) and
    the default ``split``."""

    name: str
    build: Callable[..., Path]
    summary: str
    split: tuple[float, float, float] = DEFAULT_SPLIT
    defaults: Mapping[str, object] = dataclasses.field(default_factory=dict)

    def options(self) -> dict[str, object]:
        """The options and their defaults beyond n and the :class:`BuildOptions` (but
        ``split``): the builder's keyword-only ones, this name's ``defaults``, ``split``."""
        sig = inspect.signature(self.build)
        own = {
            k: p.default
            for k, p in sig.parameters.items()
            if p.kind is p.KEYWORD_ONLY and k not in _COMMON
        }
        return {**own, **self.defaults, "split": self.split}


#: dataset name -> builder
DATASETS: dict[str, DatasetInfo] = {}


def register_dataset(
    name: str,
    summary: str,
    *,
    split: tuple[float, float, float] = DEFAULT_SPLIT,
    defaults: Mapping[str, object] | None = None,
):
    """Decorator: register ``build(n, common: BuildOptions, **options)`` under ``name`` (a
    name not taken by a system), with its default ``split`` and, for a builder shared
    by several names, this name's ``defaults`` (passed to ``build`` unless given)."""

    def deco(build: Callable[..., Path]) -> Callable[..., Path]:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a dataset needs a non-empty name, got {name!r}")
        if name in DATASETS or name in SYSTEMS:
            raise ValueError(
                f"dataset name {name!r} is already taken by a "
                f"{'dataset' if name in DATASETS else 'system'}; choose another"
            )
        DATASETS[name] = DatasetInfo(name, build, summary, tuple(split), dict(defaults or {}))
        return build

    return deco


def available_datasets() -> list[str]:
    """The registered dataset names, sorted."""
    return sorted(DATASETS)


def make_dataset(
    name: str,
    n: int,
    *,
    out: str | os.PathLike,
    seed: int = 0,
    progress: bool = False,
    **options,
) -> Path:
    """Build the data set ``name`` with ``n`` episodes into the trajectory file ``out``.

    ``options`` are the builder's own (``keep``, ``split``, ``size``, ``years``...; see
    ``DATASETS[name].options()`` and each builder's docstring). Returns the written
    path. An unknown name lists the valid ones (and says so when it is a system, made by
    :func:`simsci.systems.generate`); an unknown option lists the builder's options.

    >>> make_dataset("pendulum_images", 500, out="pend_img.h5", seed=0)  # doctest: +SKIP
    >>> make_dataset("climate", 200, out="climate.h5", keep=0.7)  # doctest: +SKIP
    """
    if not isinstance(name, str):
        raise TypeError(f"dataset name must be a string, got {type(name).__name__} {name!r}")
    info = DATASETS.get(name)
    if info is None:
        if name in SYSTEMS:
            raise UnknownNameError(
                f"{name!r} is a system, not a dataset: simulate it with "
                f"simsci.systems.generate({name!r}, n, out=...). Datasets: "
                f"{', '.join(available_datasets())}."
            )
        raise unknown_name("dataset", name, DATASETS)
    valid = info.options()
    for key in options:
        if key not in valid:
            raise UnknownNameError(
                f"dataset {name!r} has no option {key!r} (CLI --{key.replace('_', '-')}); "
                f"its options: {', '.join(f'{k}={v!r}' for k, v in valid.items())}"
            )
    n = check_count(n)
    split = options.pop("split", info.split)
    common = BuildOptions(out=out, seed=check_seed(seed), progress=bool(progress), split=split)
    return info.build(n, common, **{**info.defaults, **options})
