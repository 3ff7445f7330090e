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
reads the CLI's ``--params`` text. ``PDESystem`` is the base of the periodic PDE solvers
(kind "field"); ``gaussian_random_field`` and ``sum_of_sines`` draw their initial fields.

The other simulators sit beside this package: point processes in
:mod:`simsci.processes`, the driving world in :mod:`simsci.driving`; data sets that are
more than one system's trajectories (rendered frames, climate, lifted flows, gene
networks, event sets, driving scenes) in :mod:`simsci.datasets`.
"""

# importing the modules registers their systems
from simsci.systems import (  # noqa: F401
    _darcy,
    _ode,
    _pde1d,
    _pde2d,
    _sde,
)
from simsci.systems._base import Interval, System
from simsci.systems._generate import generate, parse_param_spec
from simsci.systems._grf import gaussian_random_field, sum_of_sines
from simsci.systems._pde import PDESystem, PeriodicGrid
from simsci.systems._registry import SYSTEMS, available, get, register
from simsci.systems._steppers import PDE_STEPPERS, PDEStepper, get_stepper, register_stepper

__all__ = [
    "System",
    "PDESystem",
    "PeriodicGrid",
    "PDE_STEPPERS",
    "PDEStepper",
    "get_stepper",
    "register_stepper",
    "Interval",
    "SYSTEMS",
    "register",
    "get",
    "available",
    "generate",
    "parse_param_spec",
    "gaussian_random_field",
    "sum_of_sines",
]
