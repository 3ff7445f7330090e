r"""∂-NO's approximation-rate claim: error against network width W, plain FNO vs ∂-NO.

The paper's claim: derivative features improve the rate in width from
:math:`O(W^{-(s-m)/d})` to :math:`O(W^{-s/d})` (``s`` input regularity, ``m`` PDE order,
``d = 1`` here), so the gain should be largest for narrow networks and rough inputs, and
the fitted exponent steeper with features. This sweep measures it on one-shot 1-D maps.

Problems (1-D, 128 training points, 1000 train / 200 test samples, data seed 0; inputs
are Gaussian random fields :math:`\mathcal N(0, (-\Delta + \tau^2)^{-\alpha})` scaled to
the stated std, which lie in :math:`H^s` for :math:`s < \alpha - 1/2`):

- ``heat`` (m = 2): :math:`u_0 \mapsto u(T)`, :math:`u_t = \nu u_{xx}` on [0, 1),
  :math:`\nu = 0.01`, :math:`T = 0.01` (mode n decays by :math:`e^{-\nu(2\pi n)^2 T}`:
  0.90 at n = 5, 0.36 at n = 16), exact in Fourier space; ``alpha`` 2 (default) and,
  for the regularity sweep, 1.25 and 3 (``heat-rough``, ``heat-smooth``);
- ``burgers`` (m = 2): :math:`u_0 \mapsto u(0.1)`, :math:`\nu = 0.01` on [0, 1), the
  FNO paper's GRF (alpha 2, tau 5, sigma 25), ETDRK4 at 1024 points, kept at 128;
- ``kdv`` (m = 3): :math:`u_0 \mapsto u(0.5)`, :math:`u_t + 6uu_x + u_{xxx} = 0` on
  [0, 50), simsci's KdV GRF (alpha 3, tau 1, std 0.5), ETDRK4 at 512, kept at 128;
- ``darcy`` (m = 2): :math:`a \mapsto u`, :math:`-(a u')' = 1` on [0, 1] with
  :math:`u(0) = u(1) = 0` and :math:`a = e^{g}`, ``g`` a GRF (alpha 1.5, tau 5, std
  0.5), solved exactly by quadrature (:math:`u' = (c - x)/a`, ``c`` from
  :math:`u(1) = 0`) on 1024 cells, both kept at 128 cell centres; non-periodic
  (features use the cell-centred even extension, FNO pads by 1/8).

Models: simsci's FNO, 4 Fourier layers, 16 modes, widths ``W`` in 8, 16, 32, 64, 128
with the projection at 2W (neuraloperator's default ratio) so that W is the whole
network's width; ∂-NO: the same FNO fed the input plus OperatorModel's default
features (Riesz and directional, two learnable orders each, standardised by the
training inputs' spectrum, band of 32 modes) but with the orders free in ``[0, m + 1]``
(started at m/2 and 3m/4) so that "learned beta below m" is a finding, not a bound.
Training: Adam, lr 2e-3 (orders at 10x), cosine to 0, gradient clip 1, batch 32,
``--steps`` (default 1500), relative L2 loss; score: mean relative L2 on the test set.
Exponents: least-squares slope of log error against log W per seed (mean +- std).

Usage: ``python benchmarks/bench_dno_width.py [--quick] [--steps N] [--seeds 3]
[--problems heat,burgers] [--jobs 2]``. Each finished run is appended to
``runs/dno_width/log.jsonl`` (a rerun skips runs already there: interrupt and resume);
the summary goes to ``benchmarks/results/dno_width_cpu.json`` and the plot to
``benchmarks/results/dno_width.png``.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch
from _runner import RESULTS, ROOT, map_jobs, mean_std, read_log, write

WIDTHS = (8, 16, 32, 64, 128)
OUT = ROOT / "runs" / "dno_width"
N_TRAIN, N_TEST, GRID = 1000, 200, 128
PROBLEMS = {
    # name: (pde order m, periodic, generator keywords)
    "heat": (2, True, {"alpha": 2.0}),
    "heat-rough": (2, True, {"alpha": 1.25}),
    "heat-smooth": (2, True, {"alpha": 3.0}),
    "burgers": (2, True, {}),
    "kdv": (3, True, {}),
    "darcy": (2, False, {}),
}


# ------------------------------------------------------------------ data
def _grf(n, N, L, alpha, tau, std, seed):
    from simsci.systems._grf import gaussian_random_field

    g = torch.Generator().manual_seed(seed)
    return gaussian_random_field(n, (N,), (L,), alpha=alpha, tau=tau, std=std, generator=g)


def make_data(problem: str, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(inputs, outputs)``, each ``(n, 128)`` float64."""
    from simsci import systems

    _, _, kw = PROBLEMS[problem]
    if problem.startswith("heat"):
        u0 = _grf(n, GRID, 1.0, kw["alpha"], 5.0, 1.0, seed)
        k = 2 * math.pi * torch.fft.rfftfreq(GRID, d=1.0 / GRID, dtype=torch.float64)
        uT = torch.fft.irfft(torch.fft.rfft(u0) * torch.exp(-0.01 * k**2 * 0.01), n=GRID)
        return u0.numpy(), uT.numpy()
    if problem in ("burgers", "kdv"):
        fine, t_end = (1024, 0.1) if problem == "burgers" else (512, 0.5)
        sys = systems.get(problem, resolution=fine)
        u0 = sys.sample_initial(n, generator=torch.Generator().manual_seed(seed))
        u = sys.simulate(u0, torch.tensor([0.0, t_end], dtype=torch.float64))
        keep = fine // GRID
        return u[:, 0, ::keep, 0].numpy(), u[:, -1, ::keep, 0].numpy()
    if problem == "darcy":
        fine = 1024
        a = torch.exp(_grf(n, fine, 1.0, 1.5, 5.0, 0.5, seed)).numpy()  # cell centres
        x = (np.arange(fine) + 0.5) / fine
        h = 1.0 / fine
        # u' = (c - x)/a, u(0) = 0, u(1) = 0 => c = (int x/a) / (int 1/a) (midpoint rule)
        c = (x / a).sum(1, keepdims=True) / (1 / a).sum(1, keepdims=True)
        du = (c - x) / a
        # u at cell centres: the integral from 0 to x_j, half a cell at the end
        u = h * (np.cumsum(du, axis=1) - 0.5 * du)
        keep = fine // GRID
        # the input and output at the 128 coarse cell centres (means of `keep` fine cells)
        return (
            a.reshape(n, GRID, keep).mean(-1),
            u.reshape(n, GRID, keep).mean(-1),
        )
    raise ValueError(f"unknown problem {problem!r}; choose from {sorted(PROBLEMS)}")


def dataset(problem: str) -> dict[str, torch.Tensor]:
    """Train and test pairs, cached in runs/dno_width/<problem>.npz."""
    path = OUT / f"{problem}.npz"
    if not path.exists():
        OUT.mkdir(parents=True, exist_ok=True)
        x, y = make_data(problem, N_TRAIN + N_TEST)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, x=x, y=y)
        tmp.rename(path)
    d = np.load(path)
    x = torch.as_tensor(d["x"], dtype=torch.float32)
    y = torch.as_tensor(d["y"], dtype=torch.float32)
    return {"x": x[:N_TRAIN], "y": y[:N_TRAIN], "x_test": x[N_TRAIN:], "y_test": y[N_TRAIN:]}


# ------------------------------------------------------------------ one run
def build(problem: str, width: int, features: str, train_x: torch.Tensor, backbone="fno"):
    from simsci.operators import OperatorModel

    m, periodic, _ = PROBLEMS[problem]
    fkw = None
    if features == "dno":
        fkw = {
            "n_orders": 2,
            "beta_init": [m / 2, 3 * m / 4],
            "beta_range": [0.0, m + 1.0],
            "normalize": "spectrum",
            "periodic": periodic,
        }
        if not periodic:
            fkw["extension"] = "even-half"  # cell-centred data
    if backbone == "unet":  # a local backbone: width channels at the finest of 4 levels
        bkw = {"width": width, "levels": 3, "periodic": periodic}
    else:
        bkw = {"width": width, "modes": 16, "layers": 4, "projection_width": 2 * width}
        if not periodic:
            bkw.update(periodic=False, padding=0.125)
    return OperatorModel(
        task="map",
        channels=["input", "output"],
        dim=1,
        grid=[GRID],
        inputs=[0],
        targets=[1],
        backbone=backbone,
        backbone_kwargs=bkw,
        features=features,
        feature_kwargs=fkw,
        mean=[float(train_x.mean()), 0.0],
        std=[float(train_x.std()), 1.0],
    )


def run_one(job: tuple) -> dict:
    """Train one model; ``job = (problem, width, features, seed, steps[, backbone])``."""
    from simsci.operators import relative_l2

    problem, width, features, seed, steps, *rest = job
    backbone = rest[0] if rest else "fno"
    d = dataset(problem)
    torch.manual_seed(seed)
    model = build(problem, width, features, d["x"], backbone)
    lr = 2e-3
    groups = [
        {"params": g["params"], "lr": lr * g["lr_scale"]}
        for g in model.parameter_groups()
        if g["params"]
    ]
    opt = torch.optim.Adam(groups)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    gen = torch.Generator().manual_seed(seed)
    xy = torch.stack([d["x"], d["y"]], -1)  # (n, 128, 2): channels last, as map() reads
    model.calibrate_features([{"x": xy}])  # ∂-NO: the training inputs' spectrum
    t0 = time.perf_counter()
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, N_TRAIN, (32,), generator=gen)
        batch = xy[idx]
        loss = relative_l2(model.map(batch), batch[..., 1:]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    seconds = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        test = torch.stack([d["x_test"], d["y_test"]], -1)
        err = relative_l2(model.map(test), test[..., 1:])
        train_err = relative_l2(model.map(xy[:N_TEST]), xy[:N_TEST, :, 1:])
    return {
        "problem": problem,
        "backbone": backbone,
        "width": width,
        "features": features,
        "seed": seed,
        "steps": steps,
        "parameters": model.num_parameters(),
        "rel_l2": float(err.mean()),
        "train_rel_l2": float(train_err.mean()),
        "final_loss": float(loss.detach()),
        "seconds": seconds,
        "betas": model.betas(),
    }


# ------------------------------------------------------------------ summary
def slope(widths, errors) -> float:
    """The exponent p of error ~ W^-p (least squares in log-log)."""
    return -float(np.polyfit(np.log(widths), np.log(errors), 1)[0])


def summarise(runs: list[dict]) -> dict:
    out = {}
    for problem in PROBLEMS:
        rows = [r for r in runs if r["problem"] == problem]
        if not rows:
            continue
        m = PROBLEMS[problem][0]
        entry = {"pde_order": m, "by_width": {}, "exponent": {}}
        for feat in ("none", "dno"):
            seeds = sorted({r["seed"] for r in rows if r["features"] == feat})
            per_seed = []
            for s in seeds:
                pts = sorted(
                    (r["width"], r["rel_l2"])
                    for r in rows
                    if (r["features"], r["seed"]) == (feat, s)
                )
                if len(pts) >= 3:
                    per_seed.append(slope(*zip(*pts)))
            if per_seed:
                entry["exponent"][feat] = mean_std(per_seed) | {"per_seed": per_seed}
        for w in WIDTHS:
            cell = {}
            for feat in ("none", "dno"):
                errs = [r["rel_l2"] for r in rows if (r["width"], r["features"]) == (w, feat)]
                if errs:
                    cell[feat] = mean_std(errs) | {"n": len(errs)}
            if len(cell) == 2:
                # the gain: plain error / ∂-NO error (> 1: ∂-NO better), and whether the
                # means differ by more than the seeds' spread (sum of the two stds)
                cell["plain_over_dno"] = cell["none"]["mean"] / cell["dno"]["mean"]
                cell["beyond_spread"] = abs(cell["none"]["mean"] - cell["dno"]["mean"]) > (
                    cell["none"]["std"] + cell["dno"]["std"]
                )
            if cell:
                entry["by_width"][str(w)] = cell
        betas = [
            (r["width"], v) for r in rows if r["features"] == "dno" for v in r["betas"].values()
        ]
        if betas:
            vals = [v for _, v in betas]
            entry["learned_beta"] = {
                "mean": float(np.mean(vals)),
                "median": float(np.median(vals)),
                "range": [float(min(vals)), float(max(vals))],
                "below_m": float(np.mean(np.array(vals) < m)),
                "mean_by_width": {
                    str(w): float(np.mean([v for ww, v in betas if ww == w]))
                    for w in WIDTHS
                    if any(ww == w for ww, _ in betas)
                },
            }
        out[problem] = entry
    return out


def plot(summary: dict, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    probs = list(summary)
    fig, axes = plt.subplots(1, len(probs), figsize=(3.2 * len(probs), 3.0), squeeze=False)
    for ax, p in zip(axes[0], probs):
        for feat, style in (("none", "o-"), ("dno", "s--")):
            ws = [int(w) for w, c in summary[p]["by_width"].items() if feat in c]
            mu = [summary[p]["by_width"][str(w)][feat]["mean"] for w in ws]
            sd = [summary[p]["by_width"][str(w)][feat]["std"] for w in ws]
            e = summary[p]["exponent"].get(feat, {})
            label = ("plain FNO" if feat == "none" else "∂-NO") + (
                f" (p={e['mean']:.2f}±{e['std']:.2f})" if e else ""
            )
            ax.errorbar(ws, mu, yerr=sd, fmt=style, capsize=2, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{p} (m={summary[p]['pde_order']})")
        ax.set_xlabel("width W")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("test relative L2")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default="heat,burgers,kdv,darcy,heat-rough,heat-smooth")
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--backbone",
        choices=("fno", "unet"),
        default="fno",
        help="unet: a local backbone, where derivatives are not one weight per mode "
        "(its own log, results/dno_width_unet_cpu.json and dno_width_unet.png)",
    )
    parser.add_argument("--quick", action="store_true", help="2 widths, 1 seed, 30 steps")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    tag = "" if args.backbone == "fno" else f"_{args.backbone}"
    args.out = args.out or str(RESULTS / f"dno_width{tag}_cpu.json")
    problems = args.problems.split(",")
    for p in problems:
        if p not in PROBLEMS:
            parser.error(f"unknown problem {p!r}; choose from {sorted(PROBLEMS)}")
    widths = [int(w) for w in args.widths.split(",")]
    seeds, steps = args.seeds, args.steps
    log = OUT / f"log{tag}.jsonl"
    if args.quick:
        widths, seeds, steps, log = widths[:2], 1, 30, OUT / f"quick{tag}.jsonl"
    for p in problems:
        dataset(p)  # generate once, before the workers start

    def key(r):
        job = (r["problem"], r["width"], r["features"], r["seed"], r["steps"])
        return job + ((r["backbone"],) if r.get("backbone", "fno") != "fno" else ())

    done = {key(r): r for r in read_log(log)} if log.exists() else {}
    # problem by problem (a partial run has whole problems), widest first within one (the
    # long runs start early and the short ones fill the gaps)
    extra = () if args.backbone == "fno" else (args.backbone,)
    jobs = [
        (p, w, f, s, steps, *extra)
        for p in problems
        for w in sorted(widths, reverse=True)
        for s in range(seeds)
        for f in ("none", "dno")
    ]
    todo = [j for j in jobs if j not in done]
    print(f"{len(jobs)} runs, {len(jobs) - len(todo)} already in {log}", flush=True)
    map_jobs(run_one, todo, workers=args.jobs, log=log, record_as=("problem", "width"))
    runs = [r for r in read_log(log, key) if "error" not in r and key(r) in set(jobs)]
    summary = summarise(runs)
    result = {"steps": steps, "widths": widths, "seeds": seeds, "summary": summary, "runs": runs}
    if not args.quick:
        png = plot(summary, RESULTS / f"dno_width{tag}.png")
        result["plot"] = None if png is None else str(png.relative_to(ROOT))
    write(args.out if not args.quick else OUT / f"quick{tag}.json", result)
    for p, e in summary.items():
        print(p, {f: round(v["mean"], 3) for f, v in e["exponent"].items()}, flush=True)


if __name__ == "__main__":
    main()
