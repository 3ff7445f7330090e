"""Traffic sanity of the driving world's IDM/MOBIL traffic across densities: collisions,
kinematic feasibility, lane changes and the fundamental diagram against the analytic
IDM equilibrium.

Claim checked: ``simsci.driving.Traffic`` (autopilot ego) produces collision-free
(rate ~ 0), kinematically feasible (0 infeasible steps) traffic at every density, whose
mean speed follows the IDM's homogeneous equilibrium.

Setup, per case and density ``d`` (requested vehicles/km/lane; ``Traffic`` accepts up to
0.8 x the jam density ``1000 / (s0 + 5.2 m)`` = 111 at the default s0): ``Traffic(roads,
B, params=default_params(B, density=d), ego="autopilot")`` with slots enough that they
never bind, on 8 networks of 5 km (scene ``b`` on network ``b % 8``, the ego starting
200 m along the route), ``--warmup`` untimed steps, then ``--steps`` recorded steps.

- **Cases.** ``network``: ``make_road(seed, length=5000)`` with its defaults (curves,
  ramps, lane drops, intersections, roundabouts, oncoming lanes, three speed classes).
  ``highway``: ``make_road(..., oncoming=False, lanes=(3, 3))`` with curves but no
  ramps, lane drops, junctions or roundabouts: the setting the homogeneous equilibrium
  describes.
- **Collisions**: ``metrics.collisions`` per step on ego-relative coordinates (the ego's
  position subtracted per scene before the call, in float64, so float32 rounding of
  world coordinates 5 km out cannot make or hide an overlap), the valid vehicles
  compacted to the front. Reported: ``metrics.collision_rate(per="step")``, the
  fraction of vehicles (by uid) ever in collision, and collision events (distinct
  overlapping uid pairs, ``metrics.boxes_overlap``) per 1000 vehicle-km.
- **Feasibility**: ``metrics.infeasible_steps`` on the per-slot trajectories, a step
  counted only when the same vehicle (``Traffic.state.uid``) holds the slot in both
  frames: a slot is reused by a new vehicle after one leaves. The steps that the uid
  rule removes are reported too.
- **Lane changes**: per vehicle-km, a change being a ``from_lane`` transition from -1 to
  a lane of the same uid (the ego never changes lanes and is left out).
- **Fundamental diagram**: every 10 steps, in a disc of radius ``window`` (150 m) around
  each ego: measured density = vehicles in the disc / lane length in the disc (every
  lane segment whose midpoint lies inside; both directions), pooled over scenes; the
  space-mean speed of those vehicles; flow = density x speed (veh/h/lane). The peer in
  the same run: the analytic IDM homogeneous equilibrium ``v_e(rho)``, the root of
  ``s_e(v) = 1000 / rho - l`` with ``s_e(v) = (s0 + v T) / sqrt(1 - (v / v0)^4)``
  (bisection), at the same T, s0, the mean vehicle length ``l`` and the free-flow speed
  ``v0`` = the mean desired speed of the measured vehicles (lane speed limit x
  per-vehicle factor x speed_factor). Reported: measured / equilibrium speed.
- **Time per step**: median of the ``Traffic.step`` calls (recording excluded).

Usage: ``python benchmarks/bench_driving_traffic.py [--quick] [--out PATH]``. Writes
``benchmarks/results/driving_traffic_cpu.json`` and, if matplotlib is installed,
``driving_fundamental_diagram.png`` beside it (``--out``: a JSON path or a folder).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import numpy as np
import torch

from simsci import driving
from simsci.bench import code_version, out_path, write_result
from simsci.driving import metrics

RESULTS = Path(__file__).resolve().parent / "results"
DENSITIES = (5, 10, 20, 30, 45, 60, 80)
QUICK_DENSITIES = (5, 20)
CASES = {
    "network": {},
    "highway": dict(
        oncoming=False,
        lanes=(3, 3),
        p_merge=0.0,
        p_split=0.0,
        p_lane_change=0.0,
        p_intersection=0.0,
        p_roundabout=0.0,
    ),
}
DT = 0.1
SAMPLE_EVERY = 10
CHUNK = 100
START = 200.0  # m along the route: the window around the ego lies on the road


# ----------------------------------------------------------------------------- the peer
def idm_equilibrium_speed(rho: float, v0: float, T: float, s0: float, length: float) -> float:
    """Speed [m/s] of homogeneous IDM traffic at density ``rho`` [veh/km/lane]: the root
    of ``s_e(v) = 1000 / rho - length``, ``s_e(v) = (s0 + v T) / sqrt(1 - (v / v0)^4)``
    (increasing from s0 at v = 0 to infinity at v0), by bisection."""
    gap = 1000.0 / rho - length
    if gap <= s0:
        return 0.0
    lo, hi = 0.0, v0
    for _ in range(200):
        v = 0.5 * (lo + hi)
        s_e = (s0 + v * T) / math.sqrt(max(1.0 - (v / v0) ** 4, 1e-300))
        lo, hi = (v, hi) if s_e < gap else (lo, v)
    return 0.5 * (lo + hi)


# ----------------------------------------------------------------------------- helpers
class LaneDisc:
    """Lane length within a disc around each ego: segment midpoints and lengths of every
    network of the pool, in float64."""

    def __init__(self, pool):
        pts = pool.points.double()
        seg_ok = torch.arange(pts.shape[2] - 1)[None, None, :] < (pool.num_points - 1)[..., None]
        self.mid = 0.5 * (pts[:, :, 1:] + pts[:, :, :-1])  # N, L, P-1, 2
        self.seg = (pts[:, :, 1:] - pts[:, :, :-1]).norm(dim=-1) * seg_ok

    def lane_km(self, net, ex, ey, radius):
        m = self.mid[net]
        d2 = (m[..., 0] - ex[:, None, None]) ** 2 + (m[..., 1] - ey[:, None, None]) ** 2
        return (self.seg[net] * (d2 < radius * radius)).sum((1, 2)) / 1000.0


def compact(agents, valid):
    """Valid agents first along the slot axis, cut to the largest count: ``(..., K, 7)``,
    ``(..., K)`` and the slot each came from."""
    order = torch.argsort((~valid).to(torch.int8), dim=-1, stable=True)
    k = max(int(valid.sum(-1).max()), 1)
    order = order[..., :k]
    x = torch.gather(agents, -2, order.unsqueeze(-1).expand(*order.shape, agents.shape[-1]))
    return x, torch.gather(valid, -1, order), order


class Recorder:
    """Frames of one chunk of steps and the running totals of one density."""

    def __init__(self, traffic, disc, radius, first_step=0):
        self.tr, self.disc, self.radius = traffic, disc, radius
        st = traffic.state
        # a fixed origin per scene (float64) for the feasibility trajectories
        self.origin = torch.stack([st.x[:, 0], st.y[:, 0]], -1).double()
        self.frames = []
        self.samples = []
        self.tot = dict(
            agent_steps=0, collision_agent_steps=0, feasible_checked=0, infeasible=0,
            removed_by_uid=0, removed_would_flag=0, lane_changes=0, vehicle_km=0.0,
            other_vehicle_km=0.0, saturated_steps=0, max_abs_accel=0.0,
        )  # fmt: skip
        self.uids_seen: set = set()
        self.uids_collided: set = set()
        self.pairs: set = set()
        self.examples: list = []
        self.step_index = 0
        self.first_step = first_step  # Traffic.step calls made before the first frame
        self._overlap = False  # the first frame of the chunk was counted in the last one

    def frame(self):
        tr, st = self.tr, self.tr.state
        agents, valid = tr.agents()
        agents = agents.double()
        f = {
            "agents": agents,
            "valid": valid,
            "uid": st.uid.clone(),
            "from_lane": st.from_lane.clone(),
            "lane": st.lane.clone(),
            "ego": agents[:, 0, :2].clone(),
            "t": self.first_step + self.step_index,  # Traffic.step calls so far
        }
        self.tot["saturated_steps"] += int((valid.sum(1) >= tr.V).sum())
        self.frames.append(f)
        if self.step_index % SAMPLE_EVERY == 0:
            self.sample(agents, valid)
        self.step_index += 1
        if len(self.frames) > CHUNK:
            self.flush(keep_last=True)

    def sample(self, agents, valid):
        tr, st = self.tr, self.tr.state
        ex, ey = agents[:, 0, 0], agents[:, 0, 1]
        d2 = (agents[..., 0] - ex[:, None]) ** 2 + (agents[..., 1] - ey[:, None]) ** 2
        inside = valid & (d2 < self.radius**2)
        lane_km = self.disc.lane_km(tr.net, ex, ey, self.radius)
        pool = tr.pool
        net2 = tr.net[:, None].expand_as(st.lane)
        limit = pool.speed_limit[net2, st.lane.clamp(min=0)].double()
        factor = tr.params[:, driving.PARAM_NAMES.index("speed_factor")].double()[:, None]
        v0 = limit * st.v_factor.double() * factor
        n = inside.sum()
        self.samples.append(
            {
                "vehicles": int(n),
                "lane_km": float(lane_km.sum()),
                "speed_sum": float((agents[..., 2] * inside).sum()),
                "v0_sum": float((v0 * inside).sum()),
                "length_sum": float((agents[..., 5] * inside).sum()),
            }
        )

    def flush(self, keep_last=False):
        fr = self.frames
        if len(fr) < 2:
            return
        x = torch.stack([f["agents"] for f in fr], 1)  # B, T, V, 7
        m = torch.stack([f["valid"] for f in fr], 1)
        uid = torch.stack([f["uid"] for f in fr], 1)
        fl = torch.stack([f["from_lane"] for f in fr], 1)
        ego = torch.stack([f["ego"] for f in fr], 1)  # B, T, 2
        # frames already counted as the last of the previous chunk are skipped for the
        # per-frame totals (collisions, km)
        first = 1 if self._overlap else 0
        self._collisions(x[:, first:], m[:, first:], uid[:, first:], ego[:, first:], fr[first:])
        speed = x[..., 2] * m
        self.tot["vehicle_km"] += float(speed[:, first:].sum()) * DT / 1000.0
        self.tot["other_vehicle_km"] += float(speed[:, first:, 1:].sum()) * DT / 1000.0
        # vehicles are (scene, uid): uids are unique across scenes except the egos' 0
        scene = torch.arange(uid.shape[0])[:, None, None].expand_as(uid)
        key = (scene * 2**40 + uid)[:, first:][m[:, first:]]
        self.uids_seen.update(torch.unique(key).tolist())
        # --- consecutive frames: feasibility and lane changes (same uid only)
        same = m[:, :-1] & m[:, 1:] & (uid[:, :-1] == uid[:, 1:])  # B, T-1, V
        both = m[:, :-1] & m[:, 1:]
        traj = x.clone()
        traj[..., :2] -= self.origin[:, None, None, :]
        traj = traj.permute(0, 2, 1, 3)  # B, V, T, 7
        bad = metrics.infeasible_steps(traj, m.permute(0, 2, 1)).permute(0, 2, 1)  # B,T-1,V
        self.tot["feasible_checked"] += int(same.sum())
        self.tot["infeasible"] += int((bad & same).sum())
        self.tot["removed_by_uid"] += int((both & ~same).sum())
        self.tot["removed_would_flag"] += int((bad & both & ~same).sum())
        acc = ((x[:, 1:, :, 2] - x[:, :-1, :, 2]) / DT).abs()
        acc = torch.where(same, acc, torch.zeros_like(acc))
        self.tot["max_abs_accel"] = max(self.tot["max_abs_accel"], float(acc.max()))
        change = (fl[:, :-1] < 0) & (fl[:, 1:] >= 0) & same
        self.tot["lane_changes"] += int(change[..., 1:].sum())
        if bool((bad & same).any()) and len(self.examples) < 8:
            b, t, v = torch.nonzero(bad & same)[0].tolist()
            speeds = [float(x[b, t, v, 2]), float(x[b, t + 1, v, 2])]
            self.examples.append(
                {"kind": "infeasible", "scene": b, "after_steps": fr[t]["t"], "slot": v,
                 "uid": int(uid[b, t, v]), "speed": speeds}
            )  # fmt: skip
        self.frames = fr[-1:] if keep_last else []
        self._overlap = keep_last

    def _collisions(self, x, m, uid, ego, fr):
        if x.shape[1] == 0:
            return
        rel = x.clone()
        rel[..., :2] -= ego[:, :, None, :]  # ego-relative, per scene and step
        xc, mc, slot = compact(rel, m)
        col = metrics.collisions(xc, mc)  # B, T, K
        self.tot["agent_steps"] += int(mc.sum())
        self.tot["collision_agent_steps"] += int(col.sum())
        if not bool(col.any()):
            return
        for b, t in {(b, t) for b, t, _ in torch.nonzero(col).tolist()}:
            xs, ms = xc[b, t], mc[b, t]
            hit = metrics.boxes_overlap(xs[:, None], xs[None, :]) & ms[:, None] & ms[None, :]
            hit &= ~torch.eye(len(ms), dtype=torch.bool)
            for i, j in torch.nonzero(torch.triu(hit, 1)).tolist():
                si, sj = int(slot[b, t, i]), int(slot[b, t, j])
                ui, uj = int(uid[b, t, si]), int(uid[b, t, sj])
                self.uids_collided.update((b * 2**40 + ui, b * 2**40 + uj))
                key = (b, min(ui, uj), max(ui, uj))
                if key not in self.pairs and len(self.examples) < 8:
                    f = fr[t]
                    self.examples.append(
                        {"kind": "collision", "scene": b, "after_steps": f["t"], "slots": [si, sj],
                         "uids": [ui, uj],
                         "lanes": [int(f["lane"][b, si]), int(f["lane"][b, sj])],
                         "from_lanes": [int(f["from_lane"][b, si]), int(f["from_lane"][b, sj])],
                         "agents": [x[b, t, si].tolist(), x[b, t, sj].tolist()]}
                    )  # fmt: skip
                self.pairs.add(key)


def run_density(case, roads_pool, disc, d, B, warmup, steps, seed):
    tr_kwargs = dict(params=driving.default_params(B, density=d), ego="autopilot")
    # slots never bind: the disc holds ~1.2 lane-km, vehicles live to window + 20 m
    V = int(min(256, max(32, math.ceil(2.0 * d) + 24)))
    tr = driving.Traffic(roads_pool, B, max_vehicles=V, seed=seed, **tr_kwargs)
    t0 = time.perf_counter()
    nets = torch.arange(B) % roads_pool.N
    tr.reset(nets=nets, start=torch.full((B,), START, dtype=torch.float64))
    reset_s = time.perf_counter() - t0
    for _ in range(warmup):
        tr.step()
    rec = Recorder(tr, disc, tr.window, first_step=warmup)
    rec.frame()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        tr.step()
        times.append(time.perf_counter() - t)
        rec.frame()
    rec.flush()
    tot, smp = rec.tot, rec.samples
    n = sum(s["vehicles"] for s in smp)
    lane_km = sum(s["lane_km"] for s in smp)
    rho = n / lane_km
    v_mean = sum(s["speed_sum"] for s in smp) / n
    v0 = sum(s["v0_sum"] for s in smp) / n
    length = sum(s["length_sum"] for s in smp) / n
    T = float(tr.params[0, driving.PARAM_NAMES.index("time_headway")])
    s0 = float(tr.params[0, driving.PARAM_NAMES.index("min_gap")])
    v_eq = idm_equilibrium_speed(rho, v0, T, s0, length)
    per_sample = [
        (s["vehicles"] / s["lane_km"], s["speed_sum"] / max(s["vehicles"], 1)) for s in smp
    ]
    step_s = float(np.median(times))
    row = {
        "case": case,
        "density_requested": d,
        "scenes": B,
        "max_vehicles": V,
        "warmup_steps": warmup,
        "steps": steps,
        "reset_s": reset_s,
        "step_s_median": step_s,
        "ms_per_step": 1e3 * step_s,
        "us_per_scene_step": 1e6 * step_s / B,
        "density_measured": rho,
        "density_ratio_measured_requested": rho / d,
        "vehicles_in_disc_mean": n / len(smp),
        "lane_km_in_disc_mean": lane_km / len(smp) / B,
        "speed_mean": v_mean,
        "flow_veh_h_lane": rho * v_mean * 3.6,
        "free_flow_speed_v0": v0,
        "vehicle_length_mean": length,
        "equilibrium_speed": v_eq,
        "equilibrium_flow_veh_h_lane": rho * v_eq * 3.6,
        "speed_ratio_measured_equilibrium": v_mean / v_eq if v_eq > 0 else float("nan"),
        "vehicles_seen": len(rec.uids_seen),
        "vehicle_km": tot["vehicle_km"],
        "collision_rate_per_step": tot["collision_agent_steps"] / max(tot["agent_steps"], 1),
        "collision_agent_steps": tot["collision_agent_steps"],
        "vehicles_in_collision": len(rec.uids_collided),
        "collision_vehicle_rate": len(rec.uids_collided) / max(len(rec.uids_seen), 1),
        "collision_events": len(rec.pairs),
        "collisions_per_1000_vehicle_km": 1000.0 * len(rec.pairs) / max(tot["vehicle_km"], 1e-9),
        "feasibility_steps_checked": tot["feasible_checked"],
        "infeasible_steps": tot["infeasible"],
        "slot_reuse_steps_removed": tot["removed_by_uid"],
        "slot_reuse_steps_that_would_be_flagged": tot["removed_would_flag"],
        "max_abs_accel_same_uid": tot["max_abs_accel"],
        "lane_changes": tot["lane_changes"],
        "lane_changes_per_vehicle_km": tot["lane_changes"] / max(tot["other_vehicle_km"], 1e-9),
        "slot_saturated_scene_steps": tot["saturated_steps"],
        "samples_density_speed": per_sample,
        "examples": rec.examples,
    }
    return row


def plot(path, rows, equilibrium_curves):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = {"network": "tab:blue", "highway": "tab:orange"}
    for case in dict.fromkeys(r["case"] for r in rows):
        rs = [r for r in rows if r["case"] == case]
        rho = [r["density_measured"] for r in rs]
        c = colors.get(case, "k")
        axes[0].plot(rho, [r["speed_mean"] for r in rs], "o", color=c, label=f"{case}: measured")
        axes[0].plot(rho, [r["equilibrium_speed"] for r in rs], "x", color=c, ms=8,
                     label=f"{case}: IDM equilibrium at measured density, v0")  # fmt: skip
        axes[1].plot(
            rho, [r["flow_veh_h_lane"] for r in rs], "o", color=c, label=f"{case}: measured"
        )
        axes[1].plot(rho, [r["equilibrium_flow_veh_h_lane"] for r in rs], "x", color=c, ms=8)
        grid, v_e = equilibrium_curves[case]
        axes[0].plot(grid, v_e, "-", color=c, lw=0.8, alpha=0.6,
                     label=f"{case}: equilibrium curve (mean v0)")  # fmt: skip
        axes[1].plot(grid, np.array(grid) * np.array(v_e) * 3.6, "-", color=c, lw=0.8, alpha=0.6)
        for r in rs:
            at = (r["density_measured"], r["speed_mean"])
            axes[0].annotate(f"{r['density_requested']:g}", at, fontsize=7, xytext=(3, 3),
                             textcoords="offset points")  # fmt: skip
    axes[0].set(xlabel="measured density [veh/km/lane]", ylabel="mean speed [m/s]",
                title="speed (labels: requested density)")  # fmt: skip
    axes[1].set(xlabel="measured density [veh/km/lane]", ylabel="flow [veh/h/lane]", title="flow")
    axes[0].legend(fontsize=7)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 densities, few steps")
    parser.add_argument("--scenes", type=int, default=None, help="scenes per density (32)")
    parser.add_argument("--steps", type=int, default=None, help="recorded steps (800)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (100)")
    parser.add_argument("--networks", type=int, default=None, help="road networks (8)")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated")
    parser.add_argument("--densities", default=None, help="comma-separated veh/km/lane")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="JSON path or folder")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    quick = args.quick
    B = args.scenes or (4 if quick else 32)
    steps = args.steps or (40 if quick else 800)
    warmup = args.warmup if args.warmup is not None else (10 if quick else 100)
    n_roads = args.networks or (2 if quick else 8)
    if args.densities:
        densities = tuple(float(x) for x in args.densities.split(","))
    else:
        densities = QUICK_DENSITIES if quick else DENSITIES
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            raise ValueError(f"--cases takes {sorted(CASES)}, got {c!r}")
    jam = 1000.0 / (driving.DEFAULT_PARAMS[2] + 5.2)
    result = {
        "benchmark": "driving_traffic",
        "claim": "collision rate ~ 0, no infeasible steps, mean speed vs the IDM equilibrium",
        "quick": quick,
        "load_average_before": os.getloadavg(),
        "code": code_version("simsci/driving", "envs"),
        "setup": {
            "scenes": B,
            "steps": steps,
            "warmup_steps": warmup,
            "networks": n_roads,
            "route_length_m": 5000.0,
            "ego": "autopilot",
            "ego_start_m": START,
            "params": dict(zip(driving.PARAM_NAMES, driving.DEFAULT_PARAMS)),
            "max_density_allowed": 0.8 * jam,
            "sample_every_steps": SAMPLE_EVERY,
            "cases": {c: CASES[c] for c in cases},
        },  # fmt: skip
        "rows": [],
    }
    curves = {}
    for case in cases:
        t0 = time.perf_counter()
        roads = [driving.make_road(seed=i, length=5000.0, **CASES[case]) for i in range(n_roads)]
        pool = driving.RoadPool(roads)
        disc = LaneDisc(pool)
        print(f"{case}: {n_roads} networks built in {time.perf_counter() - t0:.1f} s", flush=True)
        for i, d in enumerate(densities):
            row = run_density(case, pool, disc, d, B, warmup, steps, seed=1000 + i)
            result["rows"].append(row)
            print(
                f"{case:8s} d={d:5.1f} measured {row['density_measured']:5.1f} veh/km/lane  "
                f"speed {row['speed_mean']:5.2f} m/s (equilibrium {row['equilibrium_speed']:5.2f},"
                f" ratio {row['speed_ratio_measured_equilibrium']:.3f}, v0 "
                f"{row['free_flow_speed_v0']:.2f})  flow {row['flow_veh_h_lane']:6.0f} veh/h/lane  "
                f"collisions {row['collision_events']} ({row['collisions_per_1000_vehicle_km']:.2f}"
                f"/1000 veh-km, step rate {row['collision_rate_per_step']:.1e})  infeasible "
                f"{row['infeasible_steps']}/{row['feasibility_steps_checked']} (slot reuse removed "
                f"{row['slot_reuse_steps_removed']}, would flag "
                f"{row['slot_reuse_steps_that_would_be_flagged']})  lane changes/veh-km "
                f"{row['lane_changes_per_vehicle_km']:.3f}  {row['ms_per_step']:.1f} ms/step",
                flush=True,
            )
        rs = [r for r in result["rows"] if r["case"] == case]
        v0 = float(np.mean([r["free_flow_speed_v0"] for r in rs]))
        length = float(np.mean([r["vehicle_length_mean"] for r in rs]))
        p = result["setup"]["params"]
        grid = list(np.linspace(1.0, 0.8 * jam, 120))
        v_e = [idm_equilibrium_speed(g, v0, p["time_headway"], p["min_gap"], length) for g in grid]
        curves[case] = (grid, v_e)
        result.setdefault("equilibrium_curves", {})[case] = {
            "v0": v0, "length": length, "density": grid, "speed": v_e,
        }  # fmt: skip
    out = out_path(args.out, "driving_traffic_cpu.json", RESULTS)
    out.parent.mkdir(parents=True, exist_ok=True)
    png = plot(out.with_name("driving_fundamental_diagram.png"), result["rows"], curves)
    result["plot"] = png.name if png else "skipped (matplotlib not installed)"
    print(f"wrote {write_result(out, result)}" + (f" and {png}" if png else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
