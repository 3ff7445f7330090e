"""Ground-truth simulators that make data: ODE and SDE systems, one registry.

>>> import simsci.systems as systems
>>> lorenz = systems.get("lorenz63")                      # doctest: +SKIP
>>> x0 = lorenz.sample_initial(16)                        # (16, 3), on the attractor
>>> xs = lorenz.simulate(x0, torch.linspace(0, 5, 501))   # (16, 501, 3)
>>> systems.generate("lorenz63", 1000, out="lorenz.h5")   # a trajectory file

``SYSTEMS`` maps names to classes; ``get(name, **kwargs)`` instantiates one with
parameter overrides and options (``get("lorenz96", dim=10, F=10)``); ``register`` adds a
class. ``generate`` writes data sets in the trajectory format; ``parse_param_spec``
reads the CLI's ``--params`` text.
"""

from simsci.systems import _ode, _sde  # noqa: F401  (register the built-in systems)
from simsci.systems._base import Interval, System
from simsci.systems._generate import generate, parse_param_spec
from simsci.systems._registry import SYSTEMS, available, get, register

__all__ = [
    "System",
    "Interval",
    "SYSTEMS",
    "register",
    "get",
    "available",
    "generate",
    "parse_param_spec",
]
