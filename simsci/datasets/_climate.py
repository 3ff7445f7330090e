r"""``climate``: station-years of five correlated daily weather channels, with gaps.

A synthetic stand-in for irregular, partly missing climate records (the USHCN daily
set used by GRU-ODE-Bayes, De Brouwer et al. 2019, and the CRU paper, Schirmer et al.
2022): several stations, one episode per station-year, five channels with an annual
cycle whose amplitude and phase depend on the station's latitude, a multivariate
Ornstein-Uhlenbeck "weather" anomaly correlated across channels, reports on an
irregular subset of days and values missing per channel. The regression target is the
station's latitude. The model, all choices simsci's own:

**Stations.** Station s has latitude :math:`\varphi` with :math:`\sin\varphi` uniform on
[sin(-55 deg), sin(70 deg)] (uniform by area of the globe between those latitudes),
continentality :math:`\kappa \sim U(0, 1)` (0 maritime, 1 continental) and elevation
:math:`h \sim U(0, 1.5)` km. Episode i is year ``i % years`` of station ``i // years``
(``years`` consecutive years per station, default 2; the last station may have fewer).

**Annual cycle.** With day of year d (t in days, 0 = 1 January) and the seasonal signal
:math:`s(d) = \cos(2\pi (d - d^*) / 365.25)`, whose peak :math:`d^* = 200 + 25(1 -
\kappa)` (mid-July, later at sea) moves by half a year in the southern hemisphere, and
:math:`\ell = |\sin\varphi|`, :math:`G(m, w) = \exp(-((|\varphi| - m)/w)^2)`
(|phi| in degrees), channel c is a climatology plus a scaled anomaly :math:`a_c`:

- temperature (degC): :math:`-12 + 40\cos^2\varphi - 6.5h
  + (1 + 22\ell)(0.4 + 0.6\kappa)\,s + (1 + 3.5\ell)\,a_T`;
- pressure (hPa, at sea level; winter highs inland): :math:`1013 + 7G(32, 12)
  - 10G(62, 10) - (1 + 6\kappa\ell)\,s + (2 + 9\ell)\,a_P`;
- humidity (relative, %): :math:`\mathrm{clip}(80 - 30\kappa G(25, 10) - 8\kappa
  - (3 + 7\kappa)\,s + 7a_H,\ 3, 100)`;
- wind (speed, m/s): :math:`\mathrm{softplus}(2.5 + 3.5G(50, 15)(1.2 - 0.7\kappa)
  - 0.8\ell\,s + (1 + \ell)\,a_W)`;
- precipitation (mm/day; 0 on dry days): :math:`5\max(z, 0)^2` with
  :math:`z = 0.4G(0, 12) - (0.5 + 0.5\kappa)G(25, 10) + 0.4\kappa s + a_R`,

so amplitudes grow with latitude (the temperature cycle from ~1 degC at the equator to
~20 degC at 60 deg inland) and the phase flips between hemispheres.

**Weather anomaly.** :math:`a = G_c u` with :math:`G_c` the Cholesky factor of the
stationary correlation ``CORRELATION`` (warm days are low-pressure and dry, rain comes
with humidity, low pressure and wind) and u five independent unit OU processes with
time scales ``TIMESCALES`` (5, 3, 2, 1.5, 1 days): a multivariate OU process,
:math:`da = -G_c\Theta G_c^{-1} a\,dt + G_c\sqrt{2\Theta}\,dW`, stationary with
correlation ``CORRELATION`` and channel-dependent memory. It is sampled exactly on the
daily grid (:math:`u_{k+1} = \rho u_k + \sqrt{1-\rho^2}\,\varepsilon`,
:math:`\rho = e^{-1/\tau}`), continuously across a station's years, from its stationary
law.

**Gaps.** A station reports on ``keep`` (default 0.7) of the days of each year,
``max(2, round(keep * days))`` of them, uniformly without replacement (irregular
times). On a reported day each channel is missing independently with probability
``missing`` (default 0.1), and each channel has sensor outages: a Poisson number
(mean ``outages`` per channel-year, default 1) of runs of 5-30 days (uniform) during
which it is missing. Missing values are NaN in ``x`` with ``mask`` False; days with no
channel observed are dropped.

**File.** kind "state", system "climate": ``x`` float32 (S, 5) with ``mask`` (S, 5),
names and units as in the table; ``t`` float64, day of year; ``/episodes/label``
float32 (N, 1), the latitude in degrees north (names ``["latitude"]``);
``/episodes/params`` (N, 2): continentality and elevation_km (the latitude is left
out: it is the target); ``/episodes/station`` and ``/episodes/year`` int64. Splits are
by *station* (exact counts of stations by ``split``, a seeded permutation): every year of
a station is in the same split, so validation and test stations are unseen.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from simsci import data as sdata
from simsci._seeding import (
    check_fraction,
    check_positive,
    check_split,
    kept_indices,
    progress_bar,
    split_ids,
    streams,
)
from simsci.datasets._registry import BuildOptions, check_compression, register_dataset

CHANNELS = ("temperature", "pressure", "humidity", "wind", "precipitation")
UNITS = ("degC", "hPa", "%", "m/s", "mm/day")
#: stationary correlation of the standardised anomalies, channels in CHANNELS order
CORRELATION = np.array(
    [
        [1.0, -0.3, -0.3, 0.0, -0.1],
        [-0.3, 1.0, -0.4, -0.5, -0.6],
        [-0.3, -0.4, 1.0, 0.1, 0.6],
        [0.0, -0.5, 0.1, 1.0, 0.3],
        [-0.1, -0.6, 0.6, 0.3, 1.0],
    ]
)
#: time scales (days) of the independent OU factors behind the anomaly
TIMESCALES = (5.0, 3.0, 2.0, 1.5, 1.0)
LATITUDE_RANGE = (-55.0, 70.0)
YEAR = 365.25

_STREAMS = ("stations", "weather", "keep", "missing", "outages", "split")


def _bump(abs_lat: np.ndarray, centre: float, width: float) -> np.ndarray:
    return np.exp(-(((abs_lat - centre) / width) ** 2))


def climatology(latitude, continentality, elevation, day) -> dict[str, np.ndarray]:
    """Per-channel climatological terms at (broadcast) station values and days of year:
    ``{"mean": (..., 5), "season": (..., 5) (the cycle's contribution), "scale": (..., 5)
    (anomaly std in the channel's units before the output transform)}``; see the module
    docstring's table. Precipitation and wind are before their transforms."""
    lat = np.asarray(latitude, dtype=np.float64)
    kap = np.asarray(continentality, dtype=np.float64)
    h = np.asarray(elevation, dtype=np.float64)
    d = np.asarray(day, dtype=np.float64)
    ell = np.abs(np.sin(np.deg2rad(lat)))
    a = np.abs(lat)
    peak = 200.0 + 25.0 * (1.0 - kap) + np.where(lat < 0, YEAR / 2, 0.0)
    s = np.cos(2.0 * math.pi * (d - peak) / YEAR)
    cos2 = np.cos(np.deg2rad(lat)) ** 2
    mean = [
        -12.0 + 40.0 * cos2 - 6.5 * h,
        1013.0 + 7.0 * _bump(a, 32, 12) - 10.0 * _bump(a, 62, 10),
        80.0 - 30.0 * kap * _bump(a, 25, 10) - 8.0 * kap,
        2.5 + 3.5 * _bump(a, 50, 15) * (1.2 - 0.7 * kap),
        0.4 * _bump(a, 0, 12) - (0.5 + 0.5 * kap) * _bump(a, 25, 10),
    ]
    season = [
        (1.0 + 22.0 * ell) * (0.4 + 0.6 * kap) * s,
        -(1.0 + 6.0 * kap * ell) * s,
        -(3.0 + 7.0 * kap) * s,
        -0.8 * ell * s,
        0.4 * kap * s,
    ]
    one = np.ones_like(ell)
    scale = [1.0 + 3.5 * ell, 2.0 + 9.0 * ell, 7.0 * one, 1.0 + ell, one]
    shape = np.broadcast_shapes(*(np.shape(v) for v in (*mean, *season, *scale)))
    stack = lambda vs: np.stack([np.broadcast_to(v, shape) for v in vs], axis=-1)  # noqa: E731
    return {"mean": stack(mean), "season": stack(season), "scale": stack(scale)}


def observe(latent: np.ndarray) -> np.ndarray:
    """Channel values from latent ``mean + season + scale * anomaly`` (..., 5): clip the
    humidity, softplus the wind, square the positive part of the precipitation."""
    out = latent.copy()
    out[..., 2] = np.clip(latent[..., 2], 3.0, 100.0)
    out[..., 3] = np.logaddexp(0.0, latent[..., 3])
    out[..., 4] = 5.0 * np.maximum(latent[..., 4], 0.0) ** 2
    return out


def _anomalies(stations: int, length: int, generator) -> np.ndarray:
    """(stations, length, 5) standardised anomalies: exact daily steps of the OU factors
    from their stationary law, mixed by the Cholesky factor of CORRELATION."""
    rho = torch.exp(-1.0 / torch.tensor(TIMESCALES, dtype=torch.float64))
    eps = torch.randn(stations, length, 5, generator=generator, dtype=torch.float64)
    u = torch.empty_like(eps)
    u[:, 0] = eps[:, 0]
    kick = torch.sqrt(1.0 - rho * rho)
    for k in range(1, length):
        u[:, k] = rho * u[:, k - 1] + kick * eps[:, k]
    chol = torch.linalg.cholesky(torch.as_tensor(CORRELATION))
    return (u @ chol.T).numpy()


@register_dataset(
    "climate",
    "station-years of 5 correlated daily weather channels (annual cycle by latitude, "
    "OU anomaly), irregular days, per-channel gaps; label latitude",
)
def climate(
    n: int,
    common: BuildOptions,
    *,
    keep: float = 0.7,
    missing: float = 0.1,
    outages: float = 1.0,
    years: int = 2,
    days: int = 365,
    compression: str | None = None,
) -> Path:
    """Write ``n`` station-years to ``common.out`` (module docstring: the model, the gaps and the
    file layout); returns the path. Call through
    ``simsci.datasets.make_dataset("climate", n, out=...)``."""
    keep = check_fraction("keep", keep, what="fraction of the days a station reports")
    missing = check_positive("missing", missing, minimum=0.0)
    if missing >= 1.0:
        raise ValueError(
            f"missing must lie in [0, 1) (probability that a reported value is missing), "
            f"got {missing}"
        )
    outages = check_positive("outages", outages, minimum=0.0)
    years = check_positive("years", years, integer=True)
    days = check_positive("days", days, integer=True, minimum=2)
    fractions = check_split(common.split)
    compression = check_compression(compression)

    gens = streams(common.seed, _STREAMS)
    stations = -(-n // years)
    lo, hi = (math.sin(math.radians(v)) for v in LATITUDE_RANGE)
    draws = torch.rand(stations, 3, generator=gens["stations"], dtype=torch.float64).numpy()
    latitude = np.degrees(np.arcsin(lo + (hi - lo) * draws[:, 0]))
    continentality = draws[:, 1]
    elevation = 1.5 * draws[:, 2]
    anomaly = _anomalies(stations, years * days, gens["weather"])  # (stations, Y*D, 5)
    kept = kept_indices(n, days, keep, gens["keep"])
    station_split = split_ids(stations, fractions, gens["split"])
    gen_miss, gen_out = gens["missing"], gens["outages"]
    day = np.arange(days, dtype=np.float64)

    meta = {
        **common.meta("climate", n),
        "stations": stations,
        "years": years,
        "days": days,
        "keep": keep,
        "kept_days_per_episode": int(kept.shape[1]),
        "missing": missing,
        "outages_per_channel_year": outages,
        "outage_days": [5, 30],
        "latitude_range": list(LATITUDE_RANGE),
        "correlation": CORRELATION.tolist(),
        "timescales_days": list(TIMESCALES),
        "time_unit": "day of year (0 = 1 January)",
        "label": "station latitude, degrees north",
        "split": list(fractions),
        "split_by": "station",
    }
    bar = progress_bar(n, "climate", common.progress)
    try:
        with sdata.TrajectoryWriter(
            common.out,
            kind="state",
            system="climate",
            meta=meta,
            names={
                "x": list(CHANNELS),
                "label": ["latitude"],
                "params": ["continentality", "elevation_km"],
            },
            units={"x": list(UNITS), "label": "degrees_north", "params": ["1", "km"]},
            episode_fields=("station", "year"),
            compression=compression,
        ) as writer:
            for i in range(n):
                s, y = divmod(i, years)
                terms = climatology(latitude[s], continentality[s], elevation[s], day)
                a = anomaly[s, y * days : (y + 1) * days]
                values = observe(terms["mean"] + terms["season"] + terms["scale"] * a)
                idx = kept[i]
                mask = _mask(days, outages, missing, gen_miss, gen_out)[idx]
                rows = mask.any(axis=1)
                x = np.where(mask, values[idx], np.nan)[rows].astype(np.float32)
                writer.append(
                    {
                        "t": day[idx][rows],
                        "x": x,
                        "mask": mask[rows],
                        "label": np.array([latitude[s]], dtype=np.float32),
                        "params": np.array([continentality[s], elevation[s]]),
                        "station": np.int64(s),
                        "year": np.int64(y),
                        "split": int(station_split[s]),
                    }
                )
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return writer.path


def _mask(days: int, outages: float, missing: float, gen_miss, gen_out) -> np.ndarray:
    """(days, 5) True where a channel would be observed on a reported day."""
    C = len(CHANNELS)
    mask = torch.rand(days, C, generator=gen_miss, dtype=torch.float64).numpy() >= missing
    rate = torch.full((C,), float(outages), dtype=torch.float64)
    counts = torch.poisson(rate, generator=gen_out).long().tolist()
    for c, k in enumerate(counts):
        if k == 0:
            continue
        starts = torch.randint(0, days, (k,), generator=gen_out).tolist()
        spans = torch.randint(5, 31, (k,), generator=gen_out).tolist()
        for a, b in zip(starts, spans):
            mask[a : a + b, c] = False
    return mask
