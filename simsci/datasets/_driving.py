"""The ``driving`` data set: :func:`simsci.driving.make_scenes` under the dataset registry.

The builder itself belongs to the driving world (it simulates drives and cuts them into
tiles, see :mod:`simsci.driving._scenes`); registering it here lets
``make_dataset("driving", ...)`` and ``simsci generate driving`` reach it like every
other data set, without the driving world importing the layer above it.
"""

from simsci.datasets._registry import register_dataset
from simsci.driving import make_scenes

register_dataset(
    "driving",
    "drives through procedural roads with IDM/MOBIL traffic, cut into ego-centric 64 m "
    "vector tiles (kind scene: lane graphs, agents with history)",
)(make_scenes)
