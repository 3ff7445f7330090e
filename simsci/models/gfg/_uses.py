"""What a trained GFG model (or a baseline of its harness) is used for: long-horizon
forecasts, regulatory motifs read from its vector field, zero-shot detection of
trajectories that disagree with it. ``simsci evaluate CKPT --data F --task T`` runs
:func:`evaluate_file`.

**forecast** (:func:`forecast_metrics`): each episode is rolled out from its first state
over its own times (``rollout_rel_error``: RMS state error over ``x_scale``). When the
file carries its true manifold (the lifted systems' meta "manifold"), also out to
``horizon`` times the episode's duration, against the true flow simulated from the same
start: ``long_rel_error`` and the distance of the rollout to the true manifold over
``x_scale`` (``drift_mean``, ``drift_final``).

**motifs** (:func:`motif_scores`): the signed effect of gene i on gene j, scores[i, j],
read from the Jacobian of the learned field at the cells' states x = [u, s]:

- ``readout="ambient"`` (any model): d(du_j/dt)/d(s_i), the transcription block of the
  ambient Jacobian, which in the true kinetics is alpha_j df_j/ds_i, the regulation itself.
- ``readout="manifold"`` (models with a learned chart, the default for them): the
  derivative of ds_j/dt with respect to s_i *along the learned manifold*. Off-manifold
  derivatives of a chart model are set by its encoder, not by the data; along the
  manifold they are learned. Unspliced RNA relaxes fast, so the cells lie near the slow
  manifold u = (alpha f(s) + basal) / beta, where ds_j/dt = alpha_j f_j(s) + basal_j -
  gamma_j s_j and d(ds_j/dt)/ds_i = alpha_j df_j/ds_i for i != j: the same regulation.
  With h(z) = F(Dec(z)) and Dec_s the spliced rows of the decoder, the manifold
  Jacobian is M = (dh_s/dz) (dDec_s/dz)^+, and scores[i, j] = the median over cells of
  M[j, i] (the median: at cells that do not spread, such as the noise cloud around an
  attractor, the chart's dDec_s/dz is ill-conditioned and M arbitrary; measured on the
  noisy toggle switch, signed AUROC 0.70 with the mean, 1.0 with the median).

**detect** (:func:`detect_metrics`): trajectories are scored zero-shot (no corrupted
example is ever used) by how much their motion disagrees with the model. With
finite-difference velocities v_j along a trajectory and the model's field F:

- ``tangent``: sqrt(sum_j ||(I - P_j) v_j||^2 / sum_j ||v_j||^2), the velocity-weighted
  projection residual: the share of the motion that leaves the learned tangent bundle;
- ``flow``: sqrt(sum_j ||v_j - F(x_j)||^2 / sum_j ||v_j||^2), the disagreement with the
  learned flow (time reversal and wrong physics stay on the manifold and are caught here);
- ``manifold``: mean_j ||x_j - Dec(E(x_j))|| / x_scale, the states' distance to it;
- ``gfg``: the sum of those the model has, each divided by its median over the model's
  *training* episodes (real data), so no corrupted example calibrates it; ``gfg_max``:
  the largest of their robust z-scores on the same reference (:func:`residual_scores`).

The corruptions of the test episodes (:func:`corrupt`): ``reversed`` (states in reverse
order, same times), ``spliced`` (the first half of one episode, the second half of
another), ``generated`` (rollouts of a poorly trained plain neural ODE, ``poor_steps``
Adam steps, from the same starts, or of any ``generator_model``), when the file carries
its true flow ``wrong_physics`` (the same starts and manifold, every flow parameter
times ``physics_factor``), and two graded ones that leave the manifold while keeping the
motion: ``offset`` (the whole episode moved by ``size`` times the episodes' RMS spread
along one random direction; its velocities are unchanged) and ``noise`` (independent
Gaussian noise of RMS norm ``size`` times the spread at every state). In R^D a random
direction is almost all normal to a d-dimensional manifold (a share d/D tangent), so
both leave it; neither needs the true manifold. Reported: the AUROC of real vs each
corruption for each score (1: perfectly separated). :func:`residual_scores` gives the
per-episode scores themselves, for graded studies (``benchmarks/bench_gfg_detect.py``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor
from torch.func import jvp

from simsci.datasets import (
    lifted_from_config,
    network_from_config,
    rank_auroc,
    score_network,
    true_motif_scores,
)
from simsci.errors import unknown_name
from simsci.models.gfg._data import CHART_VARIANTS, episode_arrays, finite_difference_velocity
from simsci.models.gfg._tangent import decoder_jacobian, project, tangent_velocity

if TYPE_CHECKING:  # annotations only: the model module imports this one
    from simsci.models.gfg._model import GFG

__all__ = [
    "TASKS",
    "evaluate_file",
    "forecast_metrics",
    "motif_scores",
    "detection_scores",
    "detect_metrics",
    "residual_scores",
    "reference_statistics",
    "corrupt",
    "auroc",
]

TASKS = ("forecast", "motifs", "detect")
READOUTS = ("ambient", "manifold")
CORRUPTIONS = ("reversed", "spliced", "generated", "wrong_physics", "offset", "noise")


def auroc(positive, negative) -> float:
    """P(score of a positive > score of a negative), ties counted half (Mann-Whitney);
    NaN when a class is empty. The rank statistic of :func:`simsci.datasets.rank_auroc`."""
    pos = np.asarray(positive, dtype=np.float64).ravel()
    neg = np.asarray(negative, dtype=np.float64).ravel()
    labels = np.concatenate([np.ones(pos.size, bool), np.zeros(neg.size, bool)])
    return rank_auroc(np.concatenate([pos, neg]), labels)


def _tensor(a, device, dtype=torch.float32) -> Tensor:
    return torch.as_tensor(np.asarray(a), dtype=dtype, device=device)


def _by_length(episodes: list[dict]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for k, e in enumerate(episodes):
        groups.setdefault(len(e["t"]), []).append(k)
    return groups


# ------------------------------------------------------------------ forecast
@torch.no_grad()
def forecast_metrics(model: GFG, episodes: list[dict], flow=None, horizon: float = 10.0) -> dict:
    """Rollout errors (and with ``flow``, the true lifted flow, long-horizon errors and
    manifold drift) of ``model`` on ``episodes`` (dicts with numpy t (L,), x (L, D))."""
    device = model.x_mean.device
    scale = float(model.x_scale)
    short, long_err, drift_mean, drift_final = [], [], [], []
    for length, ids in _by_length(episodes).items():
        if length < 2:
            continue
        t = _tensor(np.stack([episodes[k]["t"] for k in ids]), device, torch.float64)
        x = _tensor(np.stack([episodes[k]["x"] for k in ids]), device)
        pred = model.rollout(x[:, 0], t)
        short += (((pred - x) ** 2).sum(-1).mean(-1).sqrt() / scale).tolist()
        if flow is None:
            continue
        n_long = int(round(horizon * (length - 1))) + 1
        frac = torch.linspace(0.0, 1.0, n_long, dtype=torch.float64, device=device)
        t_long = t[:, :1] + horizon * (t[:, -1:] - t[:, :1]) * frac
        u0 = flow.nearest(x[:, 0].double())
        truth = flow.embed(flow.simulate(u0, t_long[0] - t_long[0, 0]))  # same span for all
        if not torch.allclose(t_long - t_long[:, :1], t_long[:1] - t_long[:1, :1]):
            truth = torch.stack(
                [
                    flow.embed(flow.simulate(u0[b : b + 1], t_long[b] - t_long[b, 0]))[0]
                    for b in range(len(ids))
                ]
            )
        roll = model.rollout(x[:, 0], t_long).double()
        err = ((roll - truth) ** 2).sum(-1).mean(-1).sqrt() / scale
        long_err += torch.where(torch.isfinite(err), err, math.inf).tolist()
        # a rollout that overflowed (a diverged model) is infinitely far from the manifold
        finite = torch.isfinite(roll).all(-1)
        dist = torch.full(roll.shape[:2], math.inf, dtype=roll.dtype, device=roll.device)
        if bool(finite.any()):
            dist[finite] = flow.distance(roll[finite]) / scale
        drift_mean += dist.mean(-1).tolist()
        drift_final += dist[:, -1].tolist()
    if not short:
        raise ValueError("forecast needs episodes of at least 2 steps")
    out = {"rollout_rel_error": float(np.mean(short)), "episodes": len(short)}
    if flow is not None:
        out.update(
            long_rel_error=float(np.mean(long_err)),
            drift_mean=float(np.mean(drift_mean)),
            drift_final=float(np.mean(drift_final)),
            horizon=float(horizon),
        )
    return out


# ------------------------------------------------------------------ motifs
def _directional(f, x: Tensor, directions: Tensor) -> Tensor:
    """d f(x) along each direction: x (N, n), directions (k, n) -> (N, k, m)."""
    N, k = x.shape[0], directions.shape[0]
    xs = x.repeat_interleave(k, dim=0)
    ds = directions.to(x).repeat(N, 1)
    return jvp(f, (xs,), (ds,))[1].reshape(N, k, -1)


def motif_scores(
    model: GFG | list[GFG], x: Tensor, readout: str | None = None, chunk: int = 256
) -> Tensor:
    """scores[i, j], the signed effect of gene i on gene j (G, G), from cells' states x
    (N, 2G) = [u, s] (module docstring: the two read-outs). Default read-out: "manifold"
    for models with a learned chart, else "ambient".

    ``model`` may be a list of models trained from different initialisations (restarts):
    the result is the mean of their read-outs, each divided by the RMS of its
    off-diagonal entries first so that no restart outweighs the others by its scale.
    Why: a chart is learned from an initialisation, and one that fits poorly reads every
    interaction wrong (toggle switch, one seed of five: signed AUROC 0.2 alone, 1.0 as one
    of three restarts)."""
    if isinstance(model, (list, tuple)):
        if not model:
            raise ValueError("motif_scores: the list of models is empty")
        mats = []
        for m in model:
            scores = motif_scores(m, x, readout, chunk)
            off = scores[~torch.eye(len(scores), dtype=torch.bool, device=scores.device)]
            mats.append(scores / off.square().mean().sqrt().clamp(min=1e-30))
        return torch.stack(mats).mean(0)
    readout = readout or ("manifold" if model.variant in CHART_VARIANTS else "ambient")
    if readout not in READOUTS:
        raise unknown_name("read-out", readout, READOUTS)
    x = model.check_states(x)
    D = x.shape[1]
    if D % 2:
        raise ValueError(f"motifs need states [u, s] of even dimension 2G, got {D}")
    G = D // 2
    if readout == "manifold" and model.variant not in CHART_VARIANTS:
        raise ValueError(
            f"the manifold read-out needs a learned chart; variant {model.variant!r} has "
            "none: use readout='ambient'"
        )
    per_cell = []  # (n, G, G) blocks, [i, j] the effect of gene i on gene j
    for start in range(0, len(x), chunk):
        xb = x[start : start + chunk]
        if readout == "ambient":
            eye = torch.eye(D, device=x.device)[G:]  # the s_i directions
            dF = _directional(model.velocity, xb.to(model._dtype()), eye)  # (N, G, D)
            per_cell.append(dF[:, :, :G].double().detach())  # [i, j] = d(du_j/dt)/d(s_i)
            continue
        z = model.encode(model.normalise(xb)).detach()
        eye = torch.eye(model.latent_dim, device=x.device, dtype=z.dtype)

        def spliced_velocity(zz):
            return tangent_velocity(model.decoder, zz, model.latent_field(zz))[:, G:]

        A = _directional(spliced_velocity, z, eye).transpose(1, 2)  # (N, G, d) = dh_s/dz
        B = decoder_jacobian(model.decoder, z)[:, G:, :]  # (N, G, d)
        M = A.double() @ torch.linalg.pinv(B.double())  # (N, G, G), M[j, i] = dsdot_j/ds_i
        per_cell.append(M.transpose(1, 2).detach())
    # the median over cells: where the cells do not spread (the noise cloud at an
    # attractor) a chart's s-Jacobian is ill-conditioned and its M is arbitrary and large;
    # a mean follows those cells, the median the many that carry the signal
    return torch.cat(per_cell).median(0).values


# ------------------------------------------------------------------ detection
def detection_scores(model: GFG, t: Tensor, x: Tensor) -> dict[str, Tensor]:
    """Per-trajectory residuals (module docstring) of trajectories t (B, L), x (B, L, D):
    {"flow", "tangent" (chart and known variants), "manifold" (same)} each (B,)."""
    B, L, D = x.shape
    v = torch.stack([finite_difference_velocity(t[b], x[b]) for b in range(B)])
    flat_x = x.reshape(B * L, D).to(model._dtype())
    flat_v = v.reshape(B * L, D).to(model._dtype())
    energy = (flat_v**2).sum(-1).reshape(B, L).sum(-1).clamp(min=1e-30)
    with torch.no_grad():
        F = model.velocity(flat_x)
    out = {"flow": (((flat_v - F) ** 2).sum(-1).reshape(B, L).sum(-1) / energy).sqrt()}
    if model.variant == "ambient":
        return out
    with torch.no_grad():
        if model.variant in CHART_VARIANTS:
            xn = model.normalise(flat_x)
            J = decoder_jacobian(model.decoder, model.encode(xn))
            tangent = project(J, flat_v)
        else:
            P = model.flow.tangent_projector(flat_x.double()).to(flat_v.dtype)
            tangent = (P @ flat_v[..., None])[..., 0]
        normal = ((flat_v - tangent) ** 2).sum(-1).reshape(B, L).sum(-1)
        off = (model.project_states(flat_x) - flat_x).norm(dim=-1).reshape(B, L)
    out["tangent"] = (normal / energy).sqrt()
    out["manifold"] = off.mean(-1) / model.x_scale
    return out


def _poor_model(model: GFG, train_episodes: list[dict], steps: int, seed: int) -> GFG:
    """A plain neural ODE trained for only ``steps`` Adam steps (a bad world model)."""
    torch.manual_seed(seed)
    poor = type(model)(**{**model.init_args, "variant": "ambient", "known_manifold": None})
    poor = poor.to(model.x_mean.device)
    items = [
        {k: torch.as_tensor(e[k]).float() for k in ("x", "v") if k in e}
        | {"t": torch.as_tensor(e["t"])}
        for e in train_episodes
        if len(e["t"]) >= 2 or "v" in e
    ]
    batch = poor.collate(items)
    batch = {k: v.to(model.x_mean.device) for k, v in batch.items()}
    opt = torch.optim.Adam(poor.parameters(), lr=1e-3)
    for _ in range(steps):
        opt.zero_grad()
        poor.training_step(batch)["loss"].backward()
        opt.step()
    return poor.eval()


def corrupt(
    episodes: list[dict],
    kind: str,
    *,
    flow=None,
    physics_factor: float = 1.5,
    generator_model: GFG | None = None,
    size: float = 0.05,
    seed: int = 0,
) -> list[dict]:
    """Corrupted copies of ``episodes`` (dicts with numpy t, x): ``kind`` one of
    ``CORRUPTIONS`` (module docstring). ``wrong_physics`` needs ``flow``, ``generated``
    needs ``generator_model``; ``offset`` and ``noise`` are ``size`` times the episodes'
    RMS spread (their random directions drawn from ``seed``)."""
    if kind not in CORRUPTIONS:
        raise unknown_name("corruption", kind, CORRUPTIONS)
    out = []
    if kind in ("offset", "noise"):
        if not (math.isfinite(size) and size >= 0):
            raise ValueError(f"corruption size must be a finite number >= 0, got {size!r}")
        states = np.concatenate([e["x"] for e in episodes]).astype(np.float64)
        spread = float(np.sqrt(((states - states.mean(0)) ** 2).sum(-1).mean()))
        rng = np.random.default_rng(seed)
        for e in episodes:
            if kind == "offset":  # one unit direction per episode
                shift = rng.standard_normal(e["x"].shape[1])
                shift = shift / np.linalg.norm(shift)
            else:  # a fresh vector of unit expected norm at every state
                shift = rng.standard_normal(e["x"].shape) / math.sqrt(e["x"].shape[1])
            x = e["x"] + size * spread * shift
            out.append({"t": e["t"], "x": x.astype(e["x"].dtype)})
        return out
    if kind == "reversed":
        return [{"t": e["t"], "x": e["x"][::-1].copy()} for e in episodes]
    if kind == "spliced":
        if len(episodes) < 2:
            raise ValueError("splicing needs at least 2 episodes")
        for k, e in enumerate(episodes):
            o = episodes[(k + 1) % len(episodes)]
            h = min(len(e["t"]), len(o["t"])) // 2
            tail_t = e["t"][h - 1] + (o["t"][h:] - o["t"][h - 1])
            out.append(
                {
                    "t": np.concatenate([e["t"][:h], tail_t]),
                    "x": np.concatenate([e["x"][:h], o["x"][h:]]),
                }
            )
        return out
    if kind == "wrong_physics":
        if flow is None:
            raise ValueError("wrong_physics needs the true flow (a file with meta 'manifold')")
        wrong = flow.with_params(**{k: v * physics_factor for k, v in flow.params.items()})
        for e in episodes:
            t = torch.as_tensor(e["t"], dtype=torch.float64)
            u0 = flow.nearest(torch.as_tensor(e["x"][:1], dtype=torch.float64))
            x = wrong.embed(wrong.simulate(u0, t - t[0]))[0]
            out.append({"t": e["t"], "x": x.numpy().astype(e["x"].dtype)})
        return out
    if generator_model is None:
        raise ValueError("generated needs generator_model")
    device = generator_model.x_mean.device
    with torch.no_grad():
        for e in episodes:
            t = torch.as_tensor(e["t"], dtype=torch.float64, device=device)
            x0 = torch.as_tensor(e["x"][:1], dtype=torch.float32, device=device)
            x = generator_model.rollout(x0, t)[0].cpu().numpy()
            out.append({"t": e["t"], "x": x.astype(np.float32)})
    return out


def _score_episodes(model: GFG, episodes: list[dict]) -> dict[str, np.ndarray]:
    device = model.x_mean.device
    scores: dict[str, list] = {}
    order: list[int] = []
    for _, ids in _by_length(episodes).items():
        t = _tensor(np.stack([episodes[k]["t"] for k in ids]), device, torch.float64)
        x = _tensor(np.stack([episodes[k]["x"] for k in ids]), device)
        for name, s in detection_scores(model, t, x).items():
            scores.setdefault(name, []).extend(s.double().cpu().tolist())
        order += ids
    back = np.argsort(order)
    return {k: np.asarray(v)[back] for k, v in scores.items()}


def residual_scores(
    model: GFG, episodes: list[dict], reference: dict[str, dict[str, float]]
) -> dict[str, np.ndarray]:
    """Per-episode residuals of ``episodes`` (each (n,), module docstring) and two
    combinations of them, from ``reference`` (:func:`reference_statistics` of real
    training episodes):

    - ``gfg``: sum_k r_k / median_k, each residual over its median on real data;
    - ``gfg_max``: max_k (r_k - median_k) / (1.4826 MAD_k), the largest robust z-score:
      a corruption that moves one residual alone (an offset off the manifold moves only
      the manifold distance) is not diluted by the parts it leaves at their real level.
    """
    scores = _score_episodes(model, episodes)
    total = sum(scores[k] / reference[k]["median"] for k in scores)
    z = [(scores[k] - reference[k]["median"]) / reference[k]["mad"] for k in scores]
    return {**scores, "gfg": total, "gfg_max": np.max(np.stack(z), axis=0)}


def reference_statistics(model: GFG, train_episodes: list[dict]) -> dict[str, dict[str, float]]:
    """Each residual's median and scaled median absolute deviation (1.4826 MAD, the std
    of a normal sample) over real (training) episodes of 3 or more steps: the scales that
    make the residuals comparable without any corrupted example."""
    reference = _score_episodes(model, [e for e in train_episodes if len(e["t"]) >= 3])
    out = {}
    for k, v in reference.items():
        median = max(float(np.median(v)), 1e-12)
        mad = 1.4826 * float(np.median(np.abs(v - np.median(v))))
        out[k] = {"median": median, "mad": max(mad, 1e-6 * median)}
    return out


def detect_metrics(
    model: GFG,
    test_episodes: list[dict],
    train_episodes: list[dict],
    *,
    flow=None,
    poor_steps: int = 30,
    physics_factor: float = 1.5,
    seed: int = 0,
) -> dict:
    """AUROC of real ``test_episodes`` vs each corruption of them, per score (the graded
    ``offset`` and ``noise`` at their default size)."""
    usable = [e for e in test_episodes if len(e["t"]) >= 3]
    if len(usable) < 2:
        raise ValueError("detection needs at least 2 test episodes of 3 or more steps")
    reference = reference_statistics(model, train_episodes)
    real = residual_scores(model, usable, reference)
    kinds = ["reversed", "spliced", "generated", "offset", "noise"]
    kinds += ["wrong_physics"] if flow is not None else []
    poor = _poor_model(model, train_episodes, poor_steps, seed)
    out: dict = {"n_real": len(usable)}
    for kind in kinds:
        fake = residual_scores(
            model,
            corrupt(
                usable,
                kind,
                flow=flow,
                physics_factor=physics_factor,
                generator_model=poor,
                seed=seed,
            ),
            reference,
        )
        for name in real:
            key = f"auroc_{kind}" if name == "gfg" else f"auroc_{kind}_{name.removeprefix('gfg_')}"
            out[key] = auroc(fake[name], real[name])
    return out


# ------------------------------------------------------------------ the CLI's entry
def evaluate_file(
    model: GFG, path, *, split="test", device=None, task: str = "forecast", **options
):
    """Open ``path`` and run ``task`` (``TASKS``) on its ``split`` episodes."""
    from simsci import data

    if task not in TASKS:
        raise unknown_name("gfg task", task, TASKS)
    traj = data.open(path)
    device = torch.device(device or "cpu")
    model = model.to(device).eval()
    episodes = episode_arrays(traj, split)
    if not episodes:
        raise ValueError(f"{path}: no episodes in split {split!r}")
    flow = None
    if "manifold" in traj.meta:
        flow = lifted_from_config(traj.meta["manifold"])
    if task == "forecast":
        return forecast_metrics(model, episodes, flow=flow, **options)
    if task == "detect":
        train = episode_arrays(traj, "train")
        return detect_metrics(model, episodes, train, flow=flow, **options)
    network_cfg = traj.meta.get("network")
    if network_cfg is None:
        raise ValueError(
            f"{path}: motifs need the true network in the file's meta ('network', written "
            "by the grn_* datasets) to score against"
        )
    network = network_from_config(network_cfg)
    x = torch.as_tensor(np.concatenate([e["x"] for e in episodes]), device=device)
    scores = motif_scores(model, x.to(model._dtype()))
    out = {k: float(v) for k, v in score_network(scores.cpu().numpy(), network.adjacency()).items()}
    if model.variant in CHART_VARIANTS:
        amb = score_network(motif_scores(model, x, "ambient").cpu().numpy(), network.adjacency())
        out.update({f"ambient_{k}": float(v) for k, v in amb.items() if k.startswith("auroc")})
    # the true field's read-out is a ceiling only where the file knows the kinetics: an
    # imported network given as edges alone (meta network_rates "unknown") has none
    if traj.meta.get("network_rates", "given") != "unknown":
        truth = score_network(true_motif_scores(network, x.double().cpu()), network.adjacency())
        out.update({f"truth_{k}": float(v) for k, v in truth.items() if k.startswith("auroc")})
    return out
