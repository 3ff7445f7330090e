"""∂-NO vs the same backbone without derivative features: Burgers, KdV, Darcy and
Navier-Stokes with FNO, Burgers with DeepONet, KdV with U-Net, Burgers and KdV with
neuraloperator's FNO (``neuralop.fno``); 3 seeds each.

Claim checked: derivative features lower the error of a neural operator on every
problem, and the learned orders beta sit below the PDE order m (the paper's finding).

Data (generated once into ``runs/dno_data/``, git-ignored; seed 0, 320 episodes, split
256/32/32):

- Burgers nu = 1e-3 (m = 2): solved at 2048 points (ETDRK4), stored at 512, t in [0, 1]
  every 0.1; operator: the step map u(t) -> u(t + 0.1) trained at 128 points
  (subsample 4), scored by autoregressive rollout over the 10 steps;
- KdV (m = 3): 512 points, t in [0, 1] every 0.1, trained at 128, same scoring;
- Darcy (m = 2): a -> u on the 129 x 129 vertex grid, trained at 33 x 33 (subsample 4);
  non-periodic features (even extension) and FNO padding;
- Navier-Stokes nu = 1e-3 (m = 2): vorticity on 64 x 64, t in [0, 10] every 1, trained at
  32 x 32 (subsample 2, a CPU-sized version of the FNO paper's 64 x 64 setting).

Equal parameter budget: the plain model's width is raised until it has at least as many
parameters as the ∂-NO model (which has more input channels); both counts are reported.
Scores: relative L2 (PDEBench's nRMSE) on the 32 test episodes, mean over output steps,
at the training resolution and 2x / 4x finer (the same weights); mean +- std over
seeds; the learned beta per feature; training time per step of both (the ∂-NO
overhead). Same optimiser for both (Adam, cosine schedule, beta at 10x the lr).

Usage: ``python benchmarks/bench_dno.py [--quick] [--steps N] [--seeds 0,1,2]``. Writes
``benchmarks/results/dno_cpu.json``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from simsci import data, systems, train
from simsci.bench import write_result
from simsci.operators import OperatorModel, evaluate_operator

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DATA = HERE.parent / "runs" / "dno_data"

PROBLEMS = {
    "burgers": {
        "order": 2,
        "make": lambda: systems.get("burgers", resolution=2048, nu=1e-3),
        "generate": {"t_end": 1.0, "dt": 0.1, "save_resolution": 512},
        "subsample": 4,
        "periodic": True,
    },
    "kdv": {
        "order": 3,
        "make": lambda: systems.get("kdv", resolution=512),
        "generate": {"t_end": 1.0, "dt": 0.1},
        "subsample": 4,
        "periodic": True,
    },
    "darcy": {
        "order": 2,
        "make": lambda: systems.get("darcy", resolution=129),
        "generate": {},
        "subsample": 4,
        "periodic": False,
    },
    "navier_stokes_2d": {
        "order": 2,
        "make": lambda: systems.get("navier_stokes_2d", resolution=64, nu=1e-3),
        "generate": {"t_end": 10.0, "dt": 1.0},
        "subsample": 2,
        "periodic": True,
    },
}

BACKBONES = {
    "fno": {
        1: {"width": 32, "modes": 16, "layers": 4},
        2: {"width": 20, "modes": 8, "layers": 4},
    },
    "deeponet": {1: {"width": 128, "depth": 3, "p": 64, "n_sensors": 64}},
    "unet": {1: {"width": 16, "levels": 3}, 2: {"width": 16, "levels": 2}},
    # neuraloperator's FNO as its users build it (n_modes=16 keeps |k| <= 8, half of
    # simsci's modes=16; issue 25 saw the ∂-NO rollout diverge with it)
    "neuralop.fno": {1: {"width": 32, "modes": 16, "layers": 4}},
}

RUNS = [
    ("burgers", "fno"),
    ("kdv", "fno"),
    ("darcy", "fno"),
    ("navier_stokes_2d", "fno"),
    ("burgers", "deeponet"),
    # U-Net needs grids divisible by 2**levels: Darcy's vertex grids (33, 65, 129) are odd
    ("kdv", "unet"),
    ("burgers", "neuralop.fno"),
    ("kdv", "neuralop.fno"),
]


def dataset(problem: str, n: int) -> Path:
    """The problem's field file (generated on first use)."""
    path = DATA / f"{problem}.h5"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        spec = PROBLEMS[problem]
        t0 = time.perf_counter()
        systems.generate(spec["make"](), n, out=path, seed=0, progress=False, **spec["generate"])
        print(f"  generated {path} in {time.perf_counter() - t0:.0f} s", flush=True)
    return path


def build(path, problem: str, backbone: str, features: str, width_scale: float = 1.0):
    spec = PROBLEMS[problem]
    traj = data.open(path)
    dim = len(traj.step_fields["x"].shape) - 1
    bkw = dict(BACKBONES[backbone][dim])
    bkw["width"] = int(round(bkw["width"] * width_scale))
    bkw["periodic"] = spec["periodic"]
    if backbone == "fno" and not spec["periodic"]:
        bkw["padding"] = 0.125
    fkw = {"periodic": spec["periodic"]}  # orders: OperatorModel's defaults from pde_order
    return OperatorModel.from_data(
        traj,
        backbone=backbone,
        backbone_kwargs=bkw,
        features=features,
        feature_kwargs=fkw if features == "dno" else None,
        subsample=spec["subsample"],
    )


def matched_plain(path, problem, backbone, target: int):
    """The plain model with the smallest width whose parameter count >= ``target``."""
    scale = 1.0
    model = build(path, problem, backbone, "none")
    while model.num_parameters() < target:
        scale *= 1.02
        model = build(path, problem, backbone, "none", scale)
    return model


def fit(model, path, steps: int, seed: int, batch_size: int, device: str = "cpu") -> float:
    traj = data.open(path)
    ds = data.TrajectoryDataset(traj, fields=("t", "x"), split="train")
    config = train.TrainConfig(
        max_steps=steps,
        epochs=100_000,
        batch_size=batch_size,
        lr=3e-3,
        schedule="cosine",
        grad_clip=1.0,
        progress=False,
        seed=seed,
        device=device,
    )
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        train.Trainer(model, config, ds, None, out_dir=tmp, collate_fn=model.collate).fit()
        return (time.perf_counter() - t0) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few steps, one seed (smoke)")
    parser.add_argument("--steps", type=int, default=None, help="training steps per run")
    parser.add_argument("--seeds", default=None, help="comma-separated (default 0,1,2)")
    parser.add_argument("--only", default=None, help="comma-separated problem:backbone runs")
    parser.add_argument("--episodes", type=int, default=320, help="generated per problem")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument(
        "--no-solver-comparison",
        dest="solver_comparison",
        action="store_false",
        help="skip the Burgers surrogate vs ETDRK4 comparison",
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    steps = args.steps or (20 if args.quick else 1500)
    seeds = [int(s) for s in (args.seeds or ("0" if args.quick else "0,1,2")).split(",")]
    runs = RUNS
    if args.only:
        wanted = set(args.only.split(","))
        runs = [r for r in RUNS if f"{r[0]}:{r[1]}" in wanted]
    result = {"steps": steps, "seeds": seeds, "runs": {}}
    for problem, backbone in runs:
        path = dataset(problem, 64 if args.quick else args.episodes)
        key = f"{problem}:{backbone}"
        print(f"== {key}", flush=True)
        rows = {"none": [], "dno": []}
        if torch.device(args.device).type != "cpu":
            # the first fit on a GPU pays the context's and cuFFT/cuBLAS's start-up (~3 s:
            # on an H200 it made ∂-NO's quick 20-step run look 13x slower than FNO's);
            # two untimed steps of each model first keep that out of s_per_step
            for features in ("dno", "none"):
                warm = build(path, problem, backbone, features)
                fit(
                    warm,
                    path,
                    2,
                    0,
                    batch_size=4 if warm.task == "rollout" else 16,
                    device=args.device,
                )
        for seed in seeds:
            for features in ("dno", "none"):
                torch.manual_seed(seed)
                dno = build(path, problem, backbone, "dno")
                model = (
                    dno
                    if features == "dno"
                    else matched_plain(path, problem, backbone, dno.num_parameters())
                )
                torch.manual_seed(seed)
                model = type(model)(**model.init_args)  # same seed for the initial weights
                # rollout tasks get ~10 windows per episode; map tasks one
                per_step = fit(
                    model,
                    path,
                    steps,
                    seed,
                    batch_size=4 if model.task == "rollout" else 16,
                    device=args.device,
                )
                scores = evaluate_operator(model, path, split="test", device=args.device)
                scores = scores["resolutions"]
                row = {
                    "seed": seed,
                    "parameters": model.num_parameters(),
                    "s_per_step": per_step,
                    "rel_l2": {k: v["rel_l2_mean"] for k, v in scores.items()},
                    "betas": model.betas(),
                }
                rows[features].append(row)
                if features == "dno" and seed == seeds[0]:
                    model_for_solver = model
                print(f"  seed {seed} {features:4s} {row['rel_l2']} {row['betas']}", flush=True)
        summary = {}
        for features, items in rows.items():
            labels = items[0]["rel_l2"].keys()
            summary[features] = {
                "parameters": items[0]["parameters"],
                "s_per_step": float(np.median([r["s_per_step"] for r in items])),
                "rel_l2": {
                    lab: {
                        "mean": float(np.mean([r["rel_l2"][lab] for r in items])),
                        "std": float(np.std([r["rel_l2"][lab] for r in items])),
                    }
                    for lab in labels
                },
            }
        betas = [b for r in rows["dno"] for b in r["betas"].values()]
        result["runs"][key] = {
            "pde_order": PROBLEMS[problem]["order"],
            "summary": summary,
            "learned_beta_mean": float(np.mean(betas)) if betas else None,
            "learned_beta_range": [float(min(betas)), float(max(betas))] if betas else None,
            "dno_overhead": summary["dno"]["s_per_step"] / summary["none"]["s_per_step"],
            "rows": rows,
        }
        # written after every problem: a long run keeps what it measured
        write_result(
            args.out or RESULTS / f"dno_{torch.device(args.device).type}.json",
            result,
            device=args.device,
        )
        if problem == "burgers" and backbone == "fno" and args.solver_comparison:
            result["vs_solver"] = solver_comparison(model_for_solver, args.quick, args.device)
    out = args.out or RESULTS / f"dno_{torch.device(args.device).type}.json"
    print(f"wrote {write_result(out, result, device=args.device)}")


def solver_comparison(model, quick: bool, device: str = "cpu") -> dict:
    """The trained Burgers ∂-NO in the PDE-solver benchmark against ETDRK4 (same initial
    fields, errors against a fine ETDRK4 reference, speed-up at matched accuracy)."""
    from simsci.bench import format_table, pde_benchmark

    res = (128, 256) if quick else (128, 256, 512)
    result = pde_benchmark(
        "burgers",
        methods=("etdrk4",),
        resolutions=res,
        dts={"etdrk4": (5e-4, 2.5e-4, 1.25e-4)},
        params={"nu": 1e-3},
        t_end=0.8,  # 4 output frames 0.2 apart: whole multiples of the operator's 0.1
        n=8,
        models=[model.eval()],
        pypde=False,
        repeat=1 if quick else 3,
        device=device,
    )
    print(format_table(result), flush=True)
    return result


if __name__ == "__main__":
    main()
