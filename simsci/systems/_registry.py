"""The system registry: a plain dict name -> class beside its entry function ``get``.

PDE, event and driving systems join later through the same ``register`` decorator.
"""

from __future__ import annotations

from simsci.errors import unknown_name
from simsci.systems._base import NOISE_TYPES, System

SYSTEMS: dict[str, type[System]] = {}


def register(cls: type[System]) -> type[System]:
    """Class decorator: add ``cls`` to :data:`SYSTEMS` under ``cls.name``.

    The name must be a non-empty string not taken by another class.
    """
    if not (isinstance(cls, type) and issubclass(cls, System)):
        raise TypeError(f"register() takes a System subclass, got {cls!r}")
    name = cls.name
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__} needs a non-empty class attribute `name` to register")
    taken = SYSTEMS.get(name)
    if taken is not None and taken is not cls:
        raise ValueError(
            f"system name {name!r} is already registered by {taken.__module__}."
            f"{taken.__qualname__}; choose another name for {cls.__qualname__}"
        )
    if cls.noise_type is not None and cls.noise_type not in NOISE_TYPES:
        raise ValueError(
            f"{cls.__name__}.noise_type must be None or one of {', '.join(NOISE_TYPES)}, "
            f"got {cls.noise_type!r}"
        )
    SYSTEMS[name] = cls
    return cls


def get(name: str, **kwargs) -> System:
    """Instantiate the registered system ``name``.

    ``kwargs`` are parameter overrides (``get("lorenz63", rho=35)``) and options
    (``get("lorenz96", dim=10)``). An unknown name lists the valid ones and suggests the
    closest.
    """
    if not isinstance(name, str):
        raise TypeError(f"system name must be a string, got {type(name).__name__} {name!r}")
    cls = SYSTEMS.get(name)
    if cls is None:
        raise unknown_name("system", name, SYSTEMS)
    return cls(**kwargs)


def available() -> list[str]:
    """The registered system names, sorted."""
    return sorted(SYSTEMS)
