"""simsci.models: the capabilities' models (SDEVI, CoCLD, GFG, DynaDiff, VectorWorld) and
the baselines they are compared with.

Every model follows the training-loop contract of :mod:`simsci.train`
(``training_step``, ``validation_step``, ``init_args``), so ``simsci train NAME`` and
``simsci.train.Trainer`` train any of them and a checkpoint rebuilds it.

``MODELS`` maps a registry name to its class; ``get(name, **kwargs)`` builds one.
"""

from __future__ import annotations

from simsci.errors import unknown_name
from simsci.models._events import EventModel, evaluate_events
from simsci.models.cocld import CoCLD
from simsci.models.controlled_ode import ControlledODE
from simsci.models.dynadiff import DynaDiff
from simsci.models.gfg import GFG
from simsci.models.gru_dt import GRUDelta
from simsci.models.latent_ode import LatentODE
from simsci.models.latent_sde import LatentSDE
from simsci.models.neural_tpp import RMTPP, NeuralHawkes, TransformerHawkes
from simsci.models.point_process import PoissonTPP, TrueProcessTPP
from simsci.models.sdevi import SDEVI
from simsci.operators._model import OperatorModel

MODELS: dict[str, type] = {
    "latent_ode": LatentODE,
    "controlled_ode": ControlledODE,
    "operator": OperatorModel,  # neural operators and ∂-NO (simsci.operators)
    "sdevi": SDEVI,  # SDE-induced variational inference
    "gru_dt": GRUDelta,  # SDEVI's baselines on irregular series (issue 6)
    "latent_sde": LatentSDE,
    "cocld": CoCLD,  # coupled continuous-time latent dynamics of event sequences
    "poisson_tpp": PoissonTPP,  # CoCLD's baselines (simsci.models.point_process, neural_tpp)
    "rmtpp": RMTPP,
    "nhp": NeuralHawkes,
    "thp": TransformerHawkes,
    "gfg": GFG,  # Geometric Flow Grounding and its baselines (variant=)
}

__all__ = [
    "MODELS",
    "get",
    "CoCLD",
    "GFG",
    "DynaDiff",
    "EventModel",
    "evaluate_events",
    "PoissonTPP",
    "TrueProcessTPP",
    "RMTPP",
    "NeuralHawkes",
    "TransformerHawkes",
    "LatentODE",
    "LatentSDE",
    "GRUDelta",
    "ControlledODE",
    "OperatorModel",
    "SDEVI",
]


def get(name: str, **kwargs):
    """Build the model registered as ``name`` with constructor arguments ``kwargs``."""
    if name not in MODELS:
        raise unknown_name("model", name, MODELS)
    return MODELS[name](**kwargs)
