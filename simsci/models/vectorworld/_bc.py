r"""Behaviour cloning for ΔSim: labelled samples from the ground-truth traffic
(:func:`collect_bc`, :class:`BCDataset`) and the training run (:func:`train_delta_sim`,
:func:`bc_report`).

Behaviour-cloning labels (:func:`collect_bc`)
---------------------------------------------
From :class:`~simsci.driving.Traffic` with an autopilot ego, on
:func:`~simsci.driving.lanes_from_road` of its roads (cropped around each ego), one
sample per non-ego vehicle present before and after a step: features of the state
before, targets ``a = state.accel``, ``κ = state.kappa`` after the step (the realised
controls, which :func:`~simsci.driving.step_agents` reproduces exactly). Manoeuvre:
**change left/right** while the vehicle is changing lanes after the step
(``from_lane >= 0``) and our association is not yet its target lane (so the label flips
to keep where the association flips: the two agree with the corridors the features
describe); the direction is the side of the target lane (the sign of the offset from it:
negative, left). **Yield/stop** otherwise when the vehicle brakes harder than 1 m/s^2 or
is below 1 m/s after the step; **keep** the rest. Samples the shaping rules out (a
change label where we see no neighbour, or one that breaks commitment) are dropped and
counted. The successor choice (route key) follows the vehicle's next lane in the ground
truth.

Closed-loop refinement is limited to the data: plain behaviour cloning drifts off the
lane in closed loop (the logs never leave the centreline), so :func:`collect_bc` injects
noise into the ground truth (DART) and records its corrections. No policy-gradient or
differentiable-simulation fine-tuning is done here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from simsci.driving import (
    MANOEUVRES,
    AgentState,
    LaneSet,
    Traffic,
    crop_lanes,
    feasible_box,
    lanes_from_road,
    make_road,
    sample_params,
)
from simsci.models.vectorworld._checks import _int_arg, _road_list, _tensor
from simsci.models.vectorworld._features import (
    FEATURE_DIM,
    KEEP,
    LEFT,
    RIGHT,
    SHAPE_DIM,
    YIELD,
    _shape_info,
    features,
)
from simsci.models.vectorworld._npc import DeltaSim, _manoeuvre_penalty, _next_origin

__all__ = ["BCDataset", "bc_report", "collate_bc", "collect_bc", "train_delta_sim"]


# ----------------------------------------------------------------------------- data
_BC_FIELDS = {
    "x": (FEATURE_DIM,),
    "kin": (4,),
    "shape": (SHAPE_DIM,),
    "manoeuvre": (),
    "accel": (),
    "kappa": (),
}


class BCDataset(torch.utils.data.Dataset):
    """Behaviour-cloning samples: ``x`` (N, FEATURE_DIM), ``kin`` (N, 4) = (v, a_prev,
    κ_prev, length), ``shape`` (N, SHAPE_DIM) (what the manoeuvre shaping reads:
    ``_shape_info``), ``manoeuvre`` (N,) long, targets ``accel``, ``kappa`` (N,). ``info``: a
    JSON-able record of how it was made. Indexing with a list of indices returns a
    batch dict (``__getitems__``: the DataLoader fetches batches in one slice)."""

    def __init__(self, data: dict, info: dict | None = None):
        if not isinstance(data, dict):
            raise TypeError(f"data must be a dict of tensors, got {type(data).__name__}")
        missing = sorted(set(_BC_FIELDS) - set(data))
        if missing:
            raise ValueError(f"BC data lacks fields {missing}; it needs {sorted(_BC_FIELDS)}")
        n = None
        self.data = {}
        for k, tail in _BC_FIELDS.items():
            t = _tensor(data[k], f"data[{k!r}]")
            if n is None:
                n = t.shape[0] if t.ndim else 0
            if tuple(t.shape) != (n, *tail):
                raise ValueError(
                    f"data[{k!r}] must have shape {(n, *tail)} (N samples), got {tuple(t.shape)}"
                )
            self.data[k] = t.long() if k == "manoeuvre" else t.float()
        m = self.data["manoeuvre"]
        if m.numel() and (int(m.min()) < 0 or int(m.max()) >= len(MANOEUVRES)):
            raise ValueError(
                f"manoeuvre labels must index MANOEUVRES {MANOEUVRES}, got values in "
                f"[{int(m.min())}, {int(m.max())}]"
            )
        for k in ("x", "kin", "accel", "kappa"):
            if not bool(torch.isfinite(self.data[k]).all()):
                raise ValueError(f"data[{k!r}] has NaN or inf; drop those samples")
        self.info = dict(info or {})

    def __len__(self) -> int:
        return int(self.data["x"].shape[0])

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.data.items()}

    def __getitems__(self, idx):
        idx = torch.as_tensor(idx, dtype=torch.long)
        return {k: v[idx] for k, v in self.data.items()}

    def save(self, path) -> None:
        """Write to ``path`` (torch.save; loads with weights_only=True)."""
        torch.save({"data": self.data, "info": self.info}, str(path))

    @classmethod
    def load(cls, path) -> BCDataset:
        d = torch.load(str(path), weights_only=True)
        return cls(d["data"], d.get("info"))

    def class_counts(self) -> dict:
        c = torch.bincount(self.data["manoeuvre"], minlength=len(MANOEUVRES))
        return {m: int(c[i]) for i, m in enumerate(MANOEUVRES)}


def collate_bc(batch):
    """Collate for :class:`BCDataset`: a batch dict passes through, a list of samples is
    stacked."""
    if isinstance(batch, dict):
        return batch
    return {k: torch.stack([b[k] for b in batch]) for k in batch[0]}


def _cat_lanes(sets: Sequence[LaneSet]) -> LaneSet:
    """Scenes of several LaneSets in one (lanes padded with invalid ones)."""
    L = max(s.num_lanes for s in sets)
    S = max(s.succ.shape[2] for s in sets)

    def pad(t, fill, dims):
        pads = []
        for d in reversed(range(2, t.ndim)):
            pads += [0, dims.get(d, t.shape[d]) - t.shape[d]]
        pads += [0, L - t.shape[1]]
        return F.pad(t, pads, value=fill)

    return LaneSet(
        torch.cat([pad(s.points, 0.0, {}) for s in sets]),
        torch.cat([pad(s.width, 1.0, {}) for s in sets]),
        torch.cat([pad(s.speed_limit, 1.0, {}) for s in sets]),
        torch.cat([pad(s.succ, -1, {2: S}) for s in sets]),
        torch.cat([pad(s.valid, False, {}) for s in sets]),
    )


def _scenes(lanes: LaneSet, idx: torch.Tensor) -> LaneSet:
    return LaneSet(
        lanes.points[idx], lanes.width[idx], lanes.speed_limit[idx], lanes.succ[idx],
        lanes.valid[idx],
    )  # fmt: skip


class _LaneCache:
    """Per-scene lanes cropped around each ego, refreshed every ``every`` steps, with
    the association memory remapped between crops."""

    def __init__(self, roads, net, radius, every, dtype, device):
        full = _cat_lanes([lanes_from_road(r, device, dtype, max_succ=4) for r in roads])
        self.full = full
        self.net = net
        self.radius, self.every = float(radius), int(every)
        self.lanes, self.source, self.t = None, None, 0

    def get(self, ego_xy, memory: list[torch.Tensor]):
        if self.lanes is None or self.t % self.every == 0:
            new, source = crop_lanes(_scenes(self.full, self.net), ego_xy, self.radius)
            if self.source is not None:
                B, n = source.shape
                Lf = self.full.num_lanes
                inv = torch.full((B, Lf + 1), -1, dtype=torch.long, device=source.device)
                to = torch.where(source >= 0, source, Lf)
                inv.scatter_(1, to, torch.arange(n, device=source.device).expand(B, n))
                for m in memory:  # old local ids -> lane ids -> new local ids
                    g = torch.gather(self.source, 1, m.clamp(min=0))
                    nm = torch.gather(inv, 1, torch.where(g >= 0, g, Lf))
                    m.copy_(torch.where((m >= 0) & (g >= 0), nm, -1))
            self.lanes, self.source = new, source
        self.t += 1
        return self.lanes, self.source


def collect_bc(
    roads,
    *,
    n_scenes: int = 16,
    steps: int = 500,
    seed: int = 0,
    warmup: int = 20,
    every: int = 1,
    params=None,
    max_vehicles: int = 32,
    window: float = 150.0,
    crop_radius: float = 300.0,
    recrop_every: int = 20,
    noise: float = 1.0,
    kick_prob: float = 0.05,
    device=None,
    dtype=torch.float32,
    progress: bool = False,
) -> BCDataset:
    """Behaviour-cloning samples from ground-truth :class:`~simsci.driving.Traffic`
    (autopilot ego) on ``roads`` (a RoadNetwork or a list; each scene drives one, drawn
    at random): ``steps`` steps of ``n_scenes`` scenes, a sample of every non-ego vehicle
    present before and after a step, every ``every`` steps, skipping the first ``warmup``
    steps of every scene (spawn transients). Traffic parameters: ``params`` or
    :func:`~simsci.driving.sample_params` drawn with ``seed`` (again for a scene
    reset when its ego nears the route's end). Labels: module docstring.

    **Noise injection** (DART, Laskey et al. 2017): before a step, each non-ego vehicle
    is kicked with probability ``kick_prob`` -- moved sideways by N(0, (0.6 noise)^2) m,
    turned by N(0, (0.03 noise)^2) rad, its speed changed by N(0, noise^2) m/s -- so the
    data show the ground truth's corrections from off-centre states, which the policy
    reaches in closed loop and plain logs never show. ``noise=0``: plain logs."""
    roads = _road_list(roads)
    n_scenes = _int_arg("n_scenes", n_scenes, 1)
    steps = _int_arg("steps", steps, 1)
    warmup = _int_arg("warmup", warmup, 0)
    every = _int_arg("every", every, 1)
    gen = torch.Generator().manual_seed(int(seed))
    if params is None:
        params = sample_params(n_scenes, gen)
    tr = Traffic(
        roads, n_scenes, params=params, max_vehicles=max_vehicles, window=window,
        seed=int(seed), device=device, dtype=dtype,
    )  # fmt: skip
    tr.reset()
    cache = _LaneCache(roads, tr.net, crop_radius, recrop_every, dtype, tr.device)
    run = _Collector(tr, cache, gen, (n_scenes, int(max_vehicles)), dtype)
    t0 = time.time()
    for t in range(steps):
        run.reset_finished()
        if noise > 0:
            run.kick(noise, kick_prob)
        run.step(warmup, record=t % every == 0)
        if progress and (t + 1) % 200 == 0:
            print(f"collect_bc: step {t + 1}/{steps}, {run.counts['samples']} samples, "
                  f"{time.time() - t0:.0f} s", flush=True)  # fmt: skip
    if not run.buf["x"]:
        raise ValueError(
            f"collect_bc found no samples in {steps} steps (warmup {warmup}); run more steps"
        )
    info = dict(
        run.counts, n_scenes=n_scenes, steps=steps, seed=int(seed), warmup=warmup, every=every,
        noise=float(noise), kick_prob=float(kick_prob),
        roads=[
            dict(seed=int(r.seed), lanes=int(r.num_lanes), length=r.config.get("length"))
            for r in roads
        ],
        seconds=round(time.time() - t0, 1),
    )  # fmt: skip
    return run.dataset(info)


class _Collector:
    """One :func:`collect_bc` run: the traffic, its lanes cropped around each ego, the
    policy memory of every vehicle slot (lane, change origin, manoeuvre, the vehicle's
    uid, the scene's age), the samples and the counts."""

    def __init__(self, tr, cache: _LaneCache, gen, shape, dtype):
        B, V = shape
        dev = tr.device
        self.tr, self.cache, self.gen, self.dev, self.dtype = tr, cache, gen, dev, dtype
        self.lane = torch.full((B, V), -1, dtype=torch.long, device=dev)
        self.origin = torch.full((B, V), -1, dtype=torch.long, device=dev)
        self.man = torch.zeros((B, V), dtype=torch.long, device=dev)
        self.uid = tr.state.uid.clone()
        self.age = torch.zeros(B, dtype=torch.long, device=dev)
        self.buf = {k: [] for k in _BC_FIELDS}
        self.counts = dict(
            samples=0, dropped_inconsistent=0, projected_accel=0, projected_kappa=0, resets=0,
            kicked=0,
        )  # fmt: skip

    def reset_finished(self) -> None:
        """Reset the scenes whose ego nears the route's end (new parameters drawn)."""
        tr = self.tr
        near_end = tr.ego_route_s > tr.route_length - 250.0
        if bool(near_end.any()):
            idx = torch.nonzero(near_end).flatten()
            tr.reset(idx, params=sample_params(int(idx.numel()), self.gen))
            self.age[idx] = 0
            self.counts["resets"] += int(idx.numel())
            self.cache.net = tr.net
            self.cache.t = 0  # recrop now
            self.lane[idx] = -1
            self.origin[idx] = -1

    def kick(self, noise: float, kick_prob: float) -> None:
        """DART noise injection into the ground truth (see :func:`collect_bc`)."""
        st, dev, dtype, gen = self.tr.state, self.dev, self.dtype, self.gen
        kick = st.valid & (torch.rand(st.x.shape, generator=gen).to(dev) < kick_prob)
        kick[:, 0] = False
        z = torch.randn((3, *st.x.shape), generator=gen).to(dev, dtype) * noise
        z = torch.where(kick, z, torch.zeros((), dtype=dtype, device=dev))
        lat = 0.6 * z[0]
        st.x = st.x - torch.sin(st.theta) * lat
        st.y = st.y + torch.cos(st.theta) * lat
        st.theta = st.theta + 0.03 * z[1]
        st.v = (st.v + z[2]).clamp(min=0)
        self.counts["kicked"] += int(kick.sum())

    def step(self, warmup: int, record: bool) -> None:
        """Features of the state, one ground-truth step, the labels; keep (``record``)
        the samples of vehicles present before and after whose label the shaping allows,
        then carry the memory forward."""
        tr, dtype = self.tr, self.dtype
        st = tr.state
        fresh = ~(st.valid & (st.uid == self.uid))
        self.lane[fresh] = -1
        self.origin[fresh] = -1
        self.man[fresh] = KEEP
        ego_xy = torch.stack([st.x[:, 0], st.y[:, 0]], -1)
        lanes, source = self.cache.get(ego_xy, [self.lane, self.origin])
        agents = AgentState.from_traffic(tr, dtype)
        agents = agents.replace(
            lane=self.lane.clone(), manoeuvre=self.man, origin=self.origin.clone()
        )
        feats = features(lanes, agents)
        uid0, valid0 = st.uid.clone(), st.valid.clone()
        lane0, from0 = st.lane.clone(), st.from_lane.clone()
        tr.step()
        s1 = tr.state
        same = valid0 & s1.valid & (s1.uid == uid0)
        same[:, 0] = False
        same &= (self.age >= warmup)[:, None]
        label = _labels(feats, source, s1, lane0, from0)
        shape = _shape_info(feats)
        pen = _manoeuvre_penalty(feats.kin, shape, 20.0)
        ok = torch.gather(pen, -1, label[..., None]).squeeze(-1) - pen.amin(-1) < 1.0
        take = same & ok
        self.counts["dropped_inconsistent"] += int((same & ~ok).sum())
        if record and bool(take.any()):
            self._record(feats, shape, label, s1, take)
        self.origin = _next_origin(label, self.man, feats)
        self.man = torch.where(s1.valid, label, KEEP)
        self.lane = feats.lane.clone()
        self.uid = s1.uid.clone()
        self.age += 1

    def _record(self, feats, shape, label, s1, take) -> None:
        """Append the ``take`` samples; count targets outside the feasible box."""
        counts, buf = self.counts, self.buf
        lo_a, hi_a, lo_k, hi_k = feasible_box(feats.kin)
        a1, k1 = s1.accel.to(self.dtype), s1.kappa.to(self.dtype)
        counts["projected_accel"] += int((take & ((a1 < lo_a - 1e-5) | (a1 > hi_a + 1e-5))).sum())
        counts["projected_kappa"] += int((take & ((k1 < lo_k - 1e-7) | (k1 > hi_k + 1e-7))).sum())
        buf["x"].append(feats.x[take].cpu())
        buf["kin"].append(feats.kin[take].cpu())
        buf["shape"].append(shape[take].cpu())
        buf["manoeuvre"].append(label[take].cpu())
        buf["accel"].append(a1[take].cpu())
        buf["kappa"].append(k1[take].cpu())
        counts["samples"] += int(take.sum())

    def dataset(self, info: dict) -> BCDataset:
        """The samples as a :class:`BCDataset` with ``info`` (plus the class counts)."""
        data = {k: torch.cat(v) for k, v in self.buf.items()}
        ds = BCDataset(data, info)
        info["classes"] = ds.class_counts()
        ds.info = info
        return ds


def _labels(feats, source, s1, lane0, from0) -> torch.Tensor:
    """Manoeuvre labels (B, V) from the ground truth after a step (module docstring):
    a change while the vehicle changes and our association has not crossed yet, else
    yield when it brakes or crawls, else keep."""
    my = torch.where(feats.lane >= 0, torch.gather(source, 1, feats.lane.clamp(min=0)), -1)
    changing = s1.from_lane >= 0
    crossed = (my == s1.lane) | ((from0 >= 0) & (my == lane0))
    direction = torch.where(s1.offset < 0, LEFT, RIGHT)
    brake = (s1.accel < -1.0) | (s1.v < 1.0)
    return torch.where(changing & ~crossed & (my >= 0), direction, torch.where(brake, YIELD, KEEP))


# ----------------------------------------------------------------------------- training
def _roads_for(seeds, length_range, seed: int):
    rng = np.random.default_rng(int(seed))
    lo, hi = (
        (float(length_range), float(length_range))
        if np.isscalar(length_range)
        else map(float, length_range)
    )
    return [make_road(seed=int(s), length=float(rng.uniform(lo, hi))) for s in seeds]


@torch.no_grad()
def bc_report(model: DeltaSim, dataset: BCDataset, batch_size: int = 4096) -> dict:
    """Greedy manoeuvre accuracy, per-class recall and the confusion matrix (rows: label,
    columns: prediction), and control errors under the true manoeuvre (MAE, RMSE)."""
    was = model.training
    model.eval()
    conf = torch.zeros(len(MANOEUVRES), len(MANOEUVRES), dtype=torch.long)
    ea, ek, n = [], [], len(dataset)
    for i in range(0, n, batch_size):
        b = dataset.__getitems__(list(range(i, min(n, i + batch_size))))
        out = model(b["x"])
        lm = model.shaped(out, b["kin"], b["shape"])[0]
        pred = lm.argmax(-1)
        conf += torch.bincount(b["manoeuvre"] * 4 + pred, minlength=16).reshape(4, 4)
        a, k, _ = model.decode(out, b["kin"], b["shape"], manoeuvre=b["manoeuvre"], greedy=True)
        ea.append(a - b["accel"])
        ek.append(k - b["kappa"])
    model.train(was)
    ea, ek = torch.cat(ea), torch.cat(ek)
    recall = {m: float(conf[i, i] / conf[i].sum().clamp(min=1)) for i, m in enumerate(MANOEUVRES)}
    return {
        "samples": n,
        "manoeuvre_acc": float(conf.diag().sum() / conf.sum().clamp(min=1)),
        "recall": recall,
        "confusion": conf.tolist(),
        "accel_mae": float(ea.abs().mean()),
        "accel_rmse": float(ea.pow(2).mean().sqrt()),
        "kappa_mae": float(ek.abs().mean()),
        "kappa_rmse": float(ek.pow(2).mean().sqrt()),
    }


#: behaviour-cloning collection of :func:`train_delta_sim` without a step budget:
#: collection steps (train, validation) and scenes
BC_COLLECTION = (3000, 600, 16)
#: the least collection of a budgeted run (train steps, validation steps, scenes): past
#: the warm-up of 20 steps, enough samples for a few batches
BC_MIN_COLLECTION = (40, 30, 4)


def collection_budget(max_steps, steps=None, val_steps=None, n_scenes=None):
    """The behaviour-cloning collection ``(steps, val_steps, n_scenes)`` of
    :func:`train_delta_sim`; the arguments given are kept. Without ``max_steps``:
    ``BC_COLLECTION``. With it, the collection follows the training budget: two
    collection steps per optimisation step (the default run's 3000 per 1500), a fifth of
    that for validation, ``max_steps // 10`` scenes, each between ``BC_MIN_COLLECTION``
    and ``BC_COLLECTION`` -- a run of a few steps collects seconds of traffic."""
    full_train, full_val, full_scenes = BC_COLLECTION
    low_train, low_val, low_scenes = BC_MIN_COLLECTION
    if max_steps is None:
        auto = BC_COLLECTION
    else:
        train = min(full_train, max(low_train, 2 * int(max_steps)))
        val = min(full_val, max(low_val, train // 5))
        scenes = min(full_scenes, max(low_scenes, int(max_steps) // 10))
        auto = (train, val, scenes)
    given = (steps, val_steps, n_scenes)
    return tuple(a if g is None else int(g) for a, g in zip(auto, given))


def train_delta_sim(
    out_dir,
    *,
    road_seeds: Sequence[int] = (0, 1, 2, 3, 4, 5),
    val_road_seeds: Sequence[int] = (1000, 1001),
    road_length=(2000.0, 5000.0),
    n_scenes: int | None = None,
    steps: int | None = None,
    val_steps: int | None = None,
    every: int = 2,
    seed: int = 0,
    hidden: int = 256,
    depth: int = 3,
    beta: float = 20.0,
    epochs: int | None = None,
    batch_size: int = 512,
    lr: float = 2e-3,
    max_steps: int | None = None,
    resume=True,
    progress: bool = True,
    log_every: int = 200,
) -> dict:
    """Collect behaviour-cloning data on seeded roads (train and validation roads
    differ; route lengths drawn from ``road_length``; random traffic parameters) -- or
    reuse ``out_dir/data/*.pt`` -- and train a :class:`DeltaSim` with
    :class:`simsci.train.Trainer` (cosine lr, gradient clipping 1, checkpoints under
    ``out_dir/checkpoints``, resumable). Returns the trainer summary, the paths and the
    :func:`bc_report` of the best checkpoint on the validation data.

    The budgets: ``steps`` / ``val_steps`` are the collection steps of the training /
    validation traffic and ``n_scenes`` its scenes (:func:`collect_bc`), ``max_steps``
    the optimisation steps. Unless given, the collection follows the training budget
    (:func:`collection_budget`): 3000 / 600 steps of 16 scenes without ``max_steps``,
    a few dozen steps of 4 scenes for a run of a few steps (seconds, not minutes).
    ``epochs`` (default None): 8 without ``max_steps``, unbounded with it (the step
    budget is honoured); a run shorter than an epoch evaluates once, at its end. The
    Trainer writes best.pt however short the run."""
    from simsci.train import TrainConfig, Trainer, load_model

    steps, val_steps, n_scenes = collection_budget(max_steps, steps, val_steps, n_scenes)
    if epochs is None and max_steps is None:
        epochs = 8
    out = Path(out_dir)
    (out / "data").mkdir(parents=True, exist_ok=True)
    sets = {}
    for split, seeds, n_steps, s in (
        ("train", road_seeds, steps, seed),
        ("val", val_road_seeds, val_steps, seed + 1),
    ):
        path = out / "data" / f"{split}.pt"
        if path.exists():
            sets[split] = BCDataset.load(path)
            continue
        roads = _roads_for(seeds, road_length, s)
        ds = collect_bc(
            roads, n_scenes=n_scenes, steps=n_steps, seed=s, every=every, progress=progress
        )
        ds.save(path)
        sets[split] = ds
    model = DeltaSim(hidden=hidden, depth=depth, shaping=True, beta=beta)
    model.set_normalisation(sets["train"].data["x"])
    per_epoch = math.ceil(len(sets["train"]) / batch_size)
    short = max_steps is not None and max_steps < per_epoch  # ends before an epoch does
    cfg = TrainConfig(
        epochs=epochs, max_steps=max_steps, batch_size=batch_size, lr=lr, schedule="cosine",
        grad_clip=1.0, device="cpu", progress=progress, seed=seed, monitor="val_loss",
        log_every=min(log_every, max_steps or log_every),
        val_every=max_steps if short else None,
    )  # fmt: skip
    extra = {"train_data": sets["train"].info, "val_data": sets["val"].info}
    trainer = Trainer(
        model, cfg, sets["train"], sets["val"], out_dir=out, collate_fn=collate_bc,
        resume=resume, extra=extra,
    )  # fmt: skip
    summary = trainer.fit()
    best = out / "checkpoints" / "best.pt"
    report = bc_report(load_model(best), sets["val"])
    return {
        "summary": summary, "best": str(best), "last": str(out / "checkpoints" / "last.pt"),
        "val_report": report, "data": {k: v.info for k, v in sets.items()},
    }  # fmt: skip
