"""The ``driving`` data set: :func:`simsci.driving.make_scenes` under the dataset registry.

The builder itself belongs to the driving world (it simulates drives and cuts them into
tiles, see :mod:`simsci.driving._scenes`); registering it here lets
``make_dataset("driving", ...)`` and ``simsci generate driving`` reach it like every
other data set, without the driving world importing the layer above it.
"""

import functools
import inspect
from pathlib import Path

from simsci.datasets._registry import BuildOptions, register_dataset
from simsci.driving import make_scenes


@register_dataset(
    "driving",
    "drives through procedural roads with IDM/MOBIL traffic, cut into ego-centric 64 m "
    "vector tiles (kind scene: lane graphs, agents with history)",
    split=inspect.signature(make_scenes).parameters["split"].default,
)
# make_scenes takes the shared options as keywords; wraps lets DatasetInfo.options read
# its own options from its signature (inspect.signature follows __wrapped__)
@functools.wraps(make_scenes)
def driving(n: int, common: BuildOptions, **options) -> Path:
    return make_scenes(
        n,
        out=common.out,
        seed=common.seed,
        progress=common.progress,
        split=common.split,
        **options,
    )
