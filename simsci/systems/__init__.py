"""Ground-truth simulators that make data: ODE, SDE and PDE systems, one registry.

>>> import simsci.systems as systems
>>> lorenz = systems.get("lorenz63")                      # doctest: +SKIP
>>> x0 = lorenz.sample_initial(16)                        # (16, 3), on the attractor
>>> xs = lorenz.simulate(x0, torch.linspace(0, 5, 501))   # (16, 501, 3)
>>> systems.generate("lorenz63", 1000, out="lorenz.h5")   # a trajectory file
>>> burgers = systems.get("burgers", resolution=1024, nu=1e-2)   # doctest: +SKIP
>>> u = burgers.simulate(burgers.sample_initial(8), torch.linspace(0, 1, 11))  # doctest: +SKIP

``SYSTEMS`` maps names to classes; ``get(name, **kwargs)`` instantiates one with
parameter overrides and options (``get("lorenz96", dim=10, F=10)``); ``register`` adds a
class. ``generate`` writes data sets in the trajectory format; ``parse_param_spec``
reads the CLI's ``--params`` text. ``make_dataset(name, n, out=...)`` builds the data
sets that are more than one system's trajectories (``DATASETS``: ``pendulum_images``,
``climate``, the event sets ``poisson_events``, ``hawkes``, ``self_correcting``,
``population_events``, ``mobility``, and ``driving``, tiled driving scenes;
``available_datasets()`` lists them). :mod:`simsci.systems.driving` is the driving world:
procedural lane graphs, batched IDM/MOBIL traffic, vector tiles and their metrics.
``PDESystem`` is the base of the periodic PDE solvers (kind "field");
``gaussian_random_field`` and ``sum_of_sines`` draw their initial fields.

Event processes (kind "events") are marked point processes, not vector fields, so they
have their own registry beside ``SYSTEMS``: ``PROCESSES``, ``get_process(name,
**params)`` and ``process_from_config(meta["process"])`` (the process that made a
file). Each :class:`PointProcess` samples exactly and gives its exact intensity and
log-likelihood (:mod:`simsci.systems._point_process`).

>>> hawkes = systems.get_process("hawkes", mu=[0.5], alpha=[[0.6]], beta=2.0)  # doctest: +SKIP
>>> seqs = hawkes.sample(100, t_end=50.0, seed=0)        # [{"t": ..., "mark": ...}, ...]
>>> hawkes.log_likelihood(seqs[0]["t"], seqs[0]["mark"], t_start=0.0, t_end=50.0)  # doctest: +SKIP
"""

# importing the modules registers their systems and datasets
# the driving world (registers the "driving" data set)
from simsci.systems import (  # noqa: F401
    _climate,
    _darcy,
    _events,
    _grn,
    _manifolds,
    _ode,
    _pde1d,
    _pde2d,
    _pendulum_images,
    _population_events,
    _sde,
    driving,  # noqa: E402  (after the registry it uses)
)
from simsci.systems._base import Interval, System
from simsci.systems._datasets import DATASETS, available_datasets, make_dataset
from simsci.systems._events import HawkesProcess, PoissonProcess, SelfCorrectingProcess
from simsci.systems._generate import generate, parse_param_spec
from simsci.systems._grf import gaussian_random_field, sum_of_sines
from simsci.systems._grn import (
    NETWORKS,
    GeneNetwork,
    get_network,
    network_from_config,
    score_network,
    true_motif_scores,
)
from simsci.systems._manifolds import LIFTED_FLOWS, LiftedFlow, lifted_flow, lifted_from_config
from simsci.systems._pde import PDESystem, PeriodicGrid
from simsci.systems._point_process import (
    PROCESSES,
    PointProcess,
    get_process,
    process_from_config,
)
from simsci.systems._population_events import MobilityProcess, PopulationCoupledProcess
from simsci.systems._registry import SYSTEMS, available, get, register

__all__ = [
    "driving",
    "System",
    "PDESystem",
    "PeriodicGrid",
    "Interval",
    "SYSTEMS",
    "register",
    "get",
    "available",
    "generate",
    "parse_param_spec",
    "DATASETS",
    "make_dataset",
    "available_datasets",
    "gaussian_random_field",
    "sum_of_sines",
    "PointProcess",
    "PROCESSES",
    "get_process",
    "process_from_config",
    "PoissonProcess",
    "HawkesProcess",
    "SelfCorrectingProcess",
    "PopulationCoupledProcess",
    "MobilityProcess",
    "LiftedFlow",
    "LIFTED_FLOWS",
    "lifted_flow",
    "lifted_from_config",
    "GeneNetwork",
    "NETWORKS",
    "get_network",
    "network_from_config",
    "score_network",
    "true_motif_scores",
]
