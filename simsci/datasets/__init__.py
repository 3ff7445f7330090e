"""Data sets built over the simulators: more than one system's trajectories.

>>> from simsci import datasets
>>> datasets.make_dataset("pendulum_images", 500, out="pend_img.h5", seed=0)  # doctest: +SKIP
>>> datasets.available_datasets()                                             # doctest: +SKIP

``DATASETS`` maps names to builders (``make_dataset(name, n, out=..., seed=...,
**options)``; ``DATASETS[name].options()`` lists a builder's options and defaults;
``register_dataset`` adds one, ``build(n, common: BuildOptions, **options)``):
``pendulum_images`` (rendered frames of a damped pendulum), ``climate`` (station-years of
daily weather channels with gaps), the lifted flows (``lifted_*``: low-dimensional
dynamics embedded in a higher-dimensional space, :class:`LiftedFlow`), the gene networks
(``grn_*``: :class:`GeneNetwork`, motif scores), the event sets ``poisson_events``,
``hawkes``, ``self_correcting``, ``population_events``, ``mobility``
(:mod:`simsci.processes`), and ``driving`` (tiled driving scenes,
:func:`simsci.driving.make_scenes`). ``simsci generate NAME`` reaches the same builders.
A system's plain trajectories are :func:`simsci.systems.generate`'s.
"""

# importing the builders registers them
from simsci.datasets import (  # noqa: F401
    _climate,
    _driving,
    _events,
    _pendulum_images,
    _population_events,
)
from simsci.datasets._events import default_hawkes_params, default_self_correcting_params
from simsci.datasets._grn import (
    NETWORKS,
    GeneNetwork,
    get_network,
    network_from_config,
    rank_auroc,
    score_network,
    true_motif_scores,
)
from simsci.datasets._manifolds import (
    LIFTED_FLOWS,
    LiftedFlow,
    lifted_flow,
    lifted_from_config,
)
from simsci.datasets._registry import (
    DATASETS,
    BuildOptions,
    DatasetInfo,
    available_datasets,
    make_dataset,
    register_dataset,
)

__all__ = [
    "DATASETS",
    "DatasetInfo",
    "BuildOptions",
    "make_dataset",
    "available_datasets",
    "register_dataset",
    "LiftedFlow",
    "LIFTED_FLOWS",
    "lifted_flow",
    "lifted_from_config",
    "GeneNetwork",
    "NETWORKS",
    "get_network",
    "network_from_config",
    "score_network",
    "rank_auroc",
    "true_motif_scores",
    "default_hawkes_params",
    "default_self_correcting_params",
]
