"""DynaDiff: generating dynamics predictors in weight space for new environments.

- Data: :data:`PROTOCOLS` (CoDA/LEADS multi-environment protocols of five systems) and
  :func:`make_environments` (``simsci dynadiff data``).
- The model zoo: :func:`build_zoo` trains a pooled model and one expert per environment
  at once with ``torch.func.vmap`` (:class:`ExpertZoo`); :func:`load_zoo`
  (``simsci zoo build``).
- Weight graphs: :func:`weights_to_graph` / :func:`graph_to_weights` (exact round trip)
  and :class:`WeightGraphEncoder` (edge-gated multi-head graph attention).
- :class:`Prompter`: physical and spectral features of a short context trajectory.
- :class:`DynaDiff` (registry name ``dynadiff``): latent diffusion over expert weights
  conditioned on the prompt, trained with a functional loss (:func:`train_generator`,
  ``simsci train dynadiff`` or ``simsci dynadiff train``; ``simsci.models.get("dynadiff",
  zoo=...)`` builds one untrained); :func:`adapt` generates a :class:`Predictor` for a new
  environment from a context file (``simsci dynadiff adapt``).
- Baselines in the same harness (:data:`BASELINES`, :class:`CoDA`) and
  :func:`compare_methods` (``dynadiff_guided``: generation with context guidance of the
  reverse diffusion); :func:`tune_methods` gives the gradient baselines their best
  learning rate on validation environments.
"""

from simsci.models.dynadiff._baselines import BASELINES, CoDA
from simsci.models.dynadiff._envdata import EnvData, load_environments
from simsci.models.dynadiff._experts import ExpertNet, ExpertSpec
from simsci.models.dynadiff._generator import DynaDiff
from simsci.models.dynadiff._graph import (
    WeightGraphEncoder,
    graph_to_weights,
    stacked_weights_to_batch,
    weights_to_graph,
)
from simsci.models.dynadiff._pipeline import (
    METHODS,
    adapt,
    compare_methods,
    read_context,
    train_baselines,
    train_generator,
    tune_methods,
)
from simsci.models.dynadiff._predictor import Predictor
from simsci.models.dynadiff._prompter import Prompter, context_features
from simsci.models.dynadiff._protocol import PROTOCOLS, Protocol, get_protocol, make_environments
from simsci.models.dynadiff._zoo import ExpertZoo, Zoo, build_zoo, load_zoo

__all__ = [
    "PROTOCOLS",
    "Protocol",
    "get_protocol",
    "make_environments",
    "EnvData",
    "load_environments",
    "ExpertSpec",
    "ExpertNet",
    "ExpertZoo",
    "Zoo",
    "build_zoo",
    "load_zoo",
    "weights_to_graph",
    "graph_to_weights",
    "stacked_weights_to_batch",
    "WeightGraphEncoder",
    "Prompter",
    "context_features",
    "DynaDiff",
    "train_generator",
    "adapt",
    "read_context",
    "Predictor",
    "BASELINES",
    "CoDA",
    "METHODS",
    "compare_methods",
    "tune_methods",
    "train_baselines",
]
