"""Population data sets: ``population_events`` (individuals coupled to a population
rhythm) and ``mobility`` (check-ins on a city map).

Each builder samples its :mod:`simsci.processes` model, redraws sequences with fewer
than ``min_events`` events and cuts those longer than ``max_events`` (the window then
ends at the last kept event), and writes one kind="events" file with the process config
in its meta. The processes themselves are described in
:mod:`simsci.processes._population`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simsci import data as sdata
from simsci._seeding import check_positive, check_split, progress_bar, split_ids, streams
from simsci.datasets._registry import BuildOptions, register_dataset
from simsci.processes import (
    DAY,
    NEIGHBOURHOODS,
    VENUE_TYPES,
    WEEK,
    MobilityProcess,
    PopulationCoupledProcess,
    write_event_file,
)


def _count(name: str, value, minimum: int = 1) -> int:
    return int(check_positive(name, value, integer=True, minimum=minimum))


def _truncate_and_redraw(draw, n, min_events, max_events, rng):
    """``draw(count, rng) -> sequences``; redraw those with fewer than ``min_events``
    events (in rounds), cut those longer than ``max_events``; returns (seqs, redrawn,
    truncated)."""
    seqs = draw(n, rng)
    redrawn = 0
    for _ in range(1000):
        short = [i for i, s in enumerate(seqs) if len(s["t"]) < min_events]
        if not short:
            break
        redrawn += len(short)
        for i, s in zip(short, draw(len(short), rng)):
            seqs[i] = s
    else:
        raise ValueError(
            f"could not draw sequences with at least min_events={min_events} events after "
            "1000 rounds; lower min_events or lengthen the window"
        )
    truncated = 0
    if max_events is not None:
        for s in seqs:
            if len(s["t"]) > max_events:
                truncated += 1
                L = len(s["t"])
                for key, v in list(s.items()):
                    if (
                        isinstance(v, np.ndarray)
                        and v.ndim >= 1
                        and len(v) == L
                        and key != "window"
                    ):
                        s[key] = v[:max_events]
                s["window"] = np.array([s["window"][0], s["t"][-1]])
    return seqs, redrawn, truncated


def _event_limits(min_events, max_events) -> tuple[int, int | None]:
    min_events = _count("min_events", min_events, minimum=0)
    if max_events is not None:
        max_events = _count("max_events", max_events, minimum=max(1, min_events))
    return min_events, max_events


@register_dataset(
    "population_events",
    "individuals' event sequences (K marks) from latent linear ODEs with self-jumps, "
    "pushed by a group-level daily/weekly cycle and regime shift; hours",
)
def population_events(
    n: int,
    common: BuildOptions,
    *,
    groups: int = 2,
    marks: int = 3,
    span_days: float = 28.0,
    window_hours: float = 72.0,
    max_events: int | None = None,
    min_events: int = 2,
) -> Path:
    """Write ``n`` sequences of :class:`PopulationCoupledProcess` (module docstring: the
    model, the windows, ``min_events`` / ``max_events``, the file); returns the path.
    Call through ``simsci.datasets.make_dataset("population_events", n, out=...)``."""
    groups = _count("groups", groups)
    marks = _count("marks", marks)
    span_days = float(check_positive("span_days", span_days))
    window_hours = float(check_positive("window_hours", window_hours))
    span = span_days * DAY
    if window_hours > span:
        raise ValueError(
            f"window_hours ({window_hours}) must fit in the calendar span ({span} hours)"
        )
    fractions = check_split(common.split)
    min_events, max_events = _event_limits(min_events, max_events)
    f = np.arange(groups) / (groups - 1) if groups > 1 else np.full(groups, 0.5)
    process = PopulationCoupledProcess(marks, groups, regime_time=span * (0.35 + 0.3 * f))
    root = np.random.SeedSequence(common.seed)
    rng = np.random.default_rng(root.spawn(1)[0])

    def draw(count, rng):
        start = rng.uniform(0.0, span - window_hours, size=count)
        return process.sample(
            count, t_start=start, t_end=start + window_hours, seed=rng.integers(2**63)
        )

    bar = progress_bar(n, "population_events", common.progress)
    seqs, redrawn, truncated = _truncate_and_redraw(draw, n, min_events, max_events, rng)
    if bar is not None:
        bar.update(n)
        bar.close()
    meta = {
        **common.meta("population_events", n),
        "time_unit": "hour",
        "day_length": DAY,
        "week_length": WEEK,
        "epoch": "t = 0 is Monday 00:00",
        "groups": groups,
        "marks": marks,
        "span_days": span_days,
        "window_hours": window_hours,
        "min_events": min_events,
        "max_events": max_events,
        "redrawn": redrawn,
        "truncated": truncated,
        "params": "(group, m_0..m_{d-1}): the individual's random effect (an oracle input)",
        "split": list(fractions),
    }
    d = process.latent_dim
    return write_event_file(
        common.out,
        seqs,
        system="population_events",
        num_marks=marks,
        split_fractions=fractions,
        seed=common.seed,
        process=process,
        meta=meta,
        names={"params": ["group", *(f"m{j}" for j in range(d))], "window": ["start", "end"]},
        units={"window": "hour"},
    )


@register_dataset(
    "mobility",
    "agents' check-ins on a city map (venue type as mark, location, gravity model), "
    "daily/weekly population flows; hours",
)
def mobility(
    n: int,
    common: BuildOptions,
    *,
    locations: int = 36,
    days: float = 7.0,
    start_hour: float = 4.0,
    map_seed: int = 0,
    distance_scale: float = 2.0,
    max_events: int | None = None,
    min_events: int = 2,
) -> Path:
    """Write ``n`` agents of :class:`MobilityProcess` over ``days`` days each, starting
    at ``start_hour`` (at home) of a uniform day of the week (module docstring); returns
    the path. Call through ``simsci.datasets.make_dataset("mobility", n, out=...)``."""
    days = float(check_positive("days", days))
    start_hour = float(check_positive("start_hour", start_hour, minimum=0.0))
    if start_hour >= DAY:
        raise ValueError(f"start_hour must lie in [0, 24), got {start_hour}")
    fractions = check_split(common.split)
    min_events, max_events = _event_limits(min_events, max_events)
    process = MobilityProcess(locations, map_seed=map_seed, distance_scale=distance_scale)
    root = np.random.SeedSequence(common.seed)
    rng = np.random.default_rng(root.spawn(1)[0])

    def draw(count, rng):
        start = DAY * rng.integers(7, size=count) + start_hour
        return process.sample(
            count, t_start=start, t_end=start + days * DAY, seed=rng.integers(2**63)
        )

    bar = progress_bar(n, "mobility", common.progress)
    seqs, redrawn, truncated = _truncate_and_redraw(draw, n, min_events, max_events, rng)
    meta = {
        **common.meta("mobility", n),
        "process": process.config(),
        "time_unit": "hour",
        "day_length": DAY,
        "week_length": WEEK,
        "epoch": "t = 0 is Monday 00:00",
        "venue_types": list(VENUE_TYPES),
        "neighbourhoods": [name for name, _, _ in NEIGHBOURHOODS],
        "locations": process.num_locations,
        "days": days,
        "start_hour": start_hour,
        "min_events": min_events,
        "max_events": max_events,
        "redrawn": redrawn,
        "truncated": truncated,
        "split": list(fractions),
    }
    # write_event_file's split rule (a seeded permutation), but loc_id is a step field
    split = split_ids(len(seqs), fractions, streams(common.seed, ["split"])["split"])
    try:
        with sdata.TrajectoryWriter(
            common.out,
            kind="events",
            system="mobility",
            meta=meta,
            num_marks=process.num_marks,
            static={
                "locations": process.coords,
                "venue_type": process.venue_type,
                "popularity": process.popularity,
                "neighbourhood": process.neighbourhood,
            },
            names={
                "loc": ["x", "y"],
                "params": ["home", "work", "activity"],
                "window": ["start", "end"],
                "static/locations": ["x", "y"],
            },
            units={"loc": "km", "window": "hour", "static/locations": "km"},
            episode_fields=("group", "window"),
            overwrite=True,
        ) as w:
            for i, s in enumerate(seqs):
                w.append({**s, "split": int(split[i])})
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return w.path
