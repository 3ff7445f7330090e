"""simsci.models: the capabilities' models (SDEVI, CoCLD, GFG, DynaDiff, VectorWorld) and
the baselines they are compared with.

Every trainable model is one entry of ``REGISTRY`` (a :class:`ModelEntry`: name, summary,
the kinds of data it reads, how to build, train and load it), so ``simsci train NAME``,
``get(NAME, ...)`` and ``entry(NAME)`` take the same names, DynaDiff and VectorWorld
included. The models of the training contract of :mod:`simsci.train`
(``training_step``, ``validation_step``, ``init_args``) train with one
``simsci.train.Trainer`` run on a trajectory file, and a checkpoint rebuilds them;
DynaDiff trains its generator in stages on a model zoo, VectorWorld its three parts on a
scene file.

``MODELS`` is the registry seen as ``name -> class``; ``register(entry)`` adds a model.
:class:`SeriesModel` is the base of the models of irregular vector series (SDEVI,
GRU-Δt, latent ODE, latent SDE, linear ODE): their tasks, scores and
``predict(context, times)``.
"""

from __future__ import annotations

from collections.abc import Mapping

from simsci.errors import unknown_name
from simsci.models._events import EventModel, evaluate_events, event_items
from simsci.models._registry import (
    ModelClasses,
    ModelEntry,
    dynadiff_entry,
    trajectory_dataset,
    trajectory_entry,
    vectorworld_entry,
)
from simsci.models._series import SeriesModel
from simsci.models.cocld import CoCLD
from simsci.models.controlled_ode import ControlledODE
from simsci.models.dynadiff import DynaDiff
from simsci.models.gfg import GFG
from simsci.models.gru_dt import GRUDelta
from simsci.models.latent_ode import LatentODE
from simsci.models.latent_sde import LatentSDE
from simsci.models.linear_ode import LinearODE
from simsci.models.neural_tpp import RMTPP, NeuralHawkes, TransformerHawkes
from simsci.models.point_process import PoissonTPP, TrueProcessTPP
from simsci.models.sdevi import SDEVI
from simsci.operators import OperatorModel

_SERIES = ("state",)  # irregular series: a step field 'x' (and 'mask', episode 'label')
_EVENTS = ("events",)

REGISTRY: dict[str, ModelEntry] = {
    e.name: e
    for e in (
        trajectory_entry("latent_ode", LatentODE, "latent ODE on irregular series", _SERIES),
        trajectory_entry(
            "controlled_ode",
            ControlledODE,
            "dx/dt = f(x, u) learned from environment rollouts (a surrogate environment)",
            ("rollout",),
        ),
        trajectory_entry(  # neural operators and ∂-NO (simsci.operators)
            "operator",
            OperatorModel,
            "neural operator on fields (--backbone fno, deeponet, unet, neuralop.fno, "
            "neuralop.tfno, neuralop.uno; --features dno: ∂-NO)",
            ("field", "rollout"),
        ),
        trajectory_entry(
            "sdevi",
            SDEVI,
            "SDEVI: SDE-induced variational inference on irregular series",
            _SERIES,
        ),
        trajectory_entry(
            "gru_dt", GRUDelta, "GRU-Δt on irregular series (SDEVI's baseline)", _SERIES
        ),
        trajectory_entry(
            "latent_sde", LatentSDE, "latent SDE on irregular series (SDEVI's baseline)", _SERIES
        ),
        trajectory_entry(
            "linear_ode",
            LinearODE,
            "linear ODE dx/dt = A x + b on irregular series (exact steps, reset by observations)",
            _SERIES,
        ),
        trajectory_entry(
            "cocld",
            CoCLD,
            "CoCLD: coupled continuous-time latent dynamics of event sequences",
            _EVENTS,
        ),
        trajectory_entry(
            "poisson_tpp", PoissonTPP, "Poisson process per mark (CoCLD's baseline)", _EVENTS
        ),
        trajectory_entry("rmtpp", RMTPP, "recurrent marked TPP (CoCLD's baseline)", _EVENTS),
        trajectory_entry("nhp", NeuralHawkes, "neural Hawkes process (CoCLD's baseline)", _EVENTS),
        trajectory_entry(
            "thp", TransformerHawkes, "transformer Hawkes process (CoCLD's baseline)", _EVENTS
        ),
        trajectory_entry(
            "gfg",
            GFG,
            "GFG: geometric flow grounding and its baselines (--param variant=...)",
            ("state",),
        ),
        dynadiff_entry(),
        vectorworld_entry(),  # by import path: simsci.models.vectorworld loads on use
    )
}

#: ``name -> class`` for every entry of ``REGISTRY`` (a read-only view of it)
MODELS: Mapping[str, type] = ModelClasses(REGISTRY)

__all__ = [
    "REGISTRY",
    "MODELS",
    "ModelEntry",
    "entry",
    "get",
    "register",
    "trajectory_entry",
    "trajectory_dataset",
    "CoCLD",
    "GFG",
    "DynaDiff",
    "EventModel",
    "evaluate_events",
    "event_items",
    "PoissonTPP",
    "TrueProcessTPP",
    "RMTPP",
    "NeuralHawkes",
    "TransformerHawkes",
    "LatentODE",
    "LatentSDE",
    "LinearODE",
    "GRUDelta",
    "ControlledODE",
    "OperatorModel",
    "SDEVI",
    "SeriesModel",
]


def entry(name: str) -> ModelEntry:
    """The registry entry ``name``; an unknown name lists the valid ones and suggests one."""
    if name not in REGISTRY:
        raise unknown_name("model", name, REGISTRY)
    return REGISTRY[name]


def get(name: str, **kwargs):
    """Build the model registered as ``name`` (``entry(name).build(**kwargs)``).

    - Models trained on one trajectory file (every name but the two below):
      ``get(name, **kwargs)`` is the constructor ``Class(**kwargs)``;
      ``get(name, data=PATH, **kwargs)`` sizes it from a file, ``Class.from_data(data,
      **kwargs)`` (``window``, ``task`` and constructor overrides), as ``simsci train``
      does.
    - ``dynadiff``: ``get("dynadiff", zoo=ZOO, **kwargs)`` is an untrained generator for
      a model zoo (a file of ``simsci zoo build`` or a loaded ``Zoo``),
      ``DynaDiff.from_zoo(zoo, **kwargs)``; without ``zoo``, the constructor.
    - ``vectorworld``: ``get("vectorworld", checkpoint=DIR, device=None)`` loads a trained
      world (a directory of ``simsci train vectorworld``); ``get("vectorworld",
      tiles=..., vae=..., npc=...)`` puts trained parts together; ``get("vectorworld")``
      is the world shipped with simsci (``pretrained``), ``get("vectorworld",
      checkpoint="small")`` the small model trained on the fly and cached
      (``small_default``: for tests).

    The trained models themselves load with ``entry(name).load(path)``.
    """
    return entry(name).build(**kwargs)


def register(model_entry: ModelEntry, *, replace: bool = False) -> ModelEntry:
    """Add a model to the registry (``simsci train`` and ``get`` then take its name);
    a name already registered is an error unless ``replace``."""
    if not isinstance(model_entry, ModelEntry):
        raise TypeError(
            f"register expects a ModelEntry (e.g. trajectory_entry(name, cls, summary, "
            f"reads)), got {type(model_entry).__name__}"
        )
    if model_entry.name in REGISTRY and not replace:
        raise ValueError(
            f"a model named {model_entry.name!r} is already registered; pass replace=True "
            "to replace it or choose another name"
        )
    REGISTRY[model_entry.name] = model_entry
    return model_entry
