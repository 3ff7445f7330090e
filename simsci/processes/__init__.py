"""Marked temporal point processes: exact sampling, intensities and log-likelihoods.

>>> from simsci import processes
>>> hawkes = processes.get_process("hawkes", mu=[0.5], alpha=[[0.6]], beta=2.0)
>>> seqs = hawkes.sample(100, t_end=50.0, seed=0)        # [{"t": ..., "mark": ...}, ...]
>>> ll = hawkes.log_likelihood(seqs[0]["t"], seqs[0]["mark"], t_start=0.0, t_end=50.0)

Event processes (kind "events") are not vector fields, so they have their own registry
beside :data:`simsci.systems.SYSTEMS`: ``PROCESSES``, ``get_process(name, **params)``,
``process_from_config(meta["process"])`` (the process that made a file) and
``register_process``. Each :class:`PointProcess` samples exactly and gives its exact
intensity and log-likelihood (:mod:`._base`), one sequence at a time or many at once
(``process.batch(times, marks, lengths, params)``, a :class:`SequenceBatch`):
:class:`PoissonProcess`, :class:`HawkesProcess`, :class:`SelfCorrectingProcess`
(closed-form compensators, :mod:`._exact`), :class:`PopulationCoupledProcess` and
:class:`MobilityProcess` (individuals coupled to a population rhythm, compensators by
quadrature, :mod:`._population`). ``write_event_file`` writes sequences as one kind="events" file.
The data sets made from them are in :mod:`simsci.datasets`.
"""

from simsci.processes._base import (
    PROCESSES,
    PointProcess,
    SequenceBatch,
    check_sequence,
    get_process,
    process_from_config,
    register_process,
    write_event_file,
)
from simsci.processes._exact import HawkesProcess, PoissonProcess, SelfCorrectingProcess
from simsci.processes._population import (
    DAY,
    NEIGHBOURHOODS,
    VENUE_TYPES,
    WEEK,
    MobilityProcess,
    PopulationCoupledProcess,
    city_map,
    quadrature_nodes,
    weekend_weight,
)

__all__ = [
    "PROCESSES",
    "PointProcess",
    "SequenceBatch",
    "register_process",
    "get_process",
    "process_from_config",
    "check_sequence",
    "write_event_file",
    "PoissonProcess",
    "HawkesProcess",
    "SelfCorrectingProcess",
    "PopulationCoupledProcess",
    "MobilityProcess",
    "city_map",
    "weekend_weight",
    "quadrature_nodes",
    "DAY",
    "VENUE_TYPES",
    "NEIGHBOURHOODS",
    "WEEK",
]
