"""DynaDiff zoo building: throughput (issue 9) and quality (issue 24).

**Throughput** (``--part throughput``): experts trained per minute with all experts in
one ``torch.func.vmap`` (``build_zoo``) against one expert at a time (the same losses,
optimiser and steps; ``vmapped=False``), same run, same data. Per system (the full
protocol's training environments, ``make_environments``; data under
runs/dynadiff_zoo_bench, git-ignored): ``--steps`` fine-tuning steps per expert from a
shared pooled start (``--steps`` pooled steps, not timed), ``--repeats`` timed builds of
each kind; reported (``summary``): experts per minute (median), the ratio, and the
largest weight difference between the two zoos (they must agree: vmapping changes
speed, not results).

**Quality** (``--part quality``): per system one zoo as ``simsci zoo build`` makes it
(``--quality-steps`` expert and pooled steps, default 1500 like the command; vmapped);
reported (``quality``): experts, the seconds of ``make_environments`` and of the build,
the experts' validation RMSE (median, max; full-horizon rollouts, original units), the
persistence RMSE (every frame predicted by the first) and the ratio expert /
persistence per expert (median, max; below 1 beats persistence).

Usage: ``python benchmarks/bench_dynadiff_zoo.py [--part all|throughput|quality]
[--systems a,b] [--steps 200] [--repeats 3] [--quality-steps 1500] [--device cpu]
[--quick] [--out PATH]``; writes benchmarks/results/dynadiff_zoo_<device>.json. A part
not run keeps its section from the file already there, so the two parts can be rerun
separately. One torch thread throughout (``torch.set_num_threads(1)``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
import warnings
from pathlib import Path

from _runner import RESULTS, ROOT, quick, write

WORK = ROOT / "runs" / "dynadiff_zoo_bench"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("all", "throughput", "quality"), default="all")
    parser.add_argument("--systems", default="lotka_volterra,glycolytic_oscillator,gray_scott")
    parser.add_argument("--quality-systems", default=",".join(ALL_SYSTEMS))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quality-steps", type=int, default=1500)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--quick", action="store_true", help="LV only, quick protocol, 10 steps, 1 repeat"
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    quick(args, systems="lotka_volterra", quality_systems="lotka_volterra", steps=10,
          repeats=1, quality_steps=10)  # fmt: skip
    out = Path(args.out or RESULTS / f"dynadiff_zoo_{args.device}.json")
    # a part not run keeps its section of the file already there
    result = json.loads(out.read_text()) if not args.quick and out.is_file() else {}
    result.pop("environment", None)
    result.update(
        benchmark="dynadiff_zoo",
        peer="the same expert training one expert at a time (build_zoo(vmapped=False)); "
        "for quality, persistence (every frame predicted by the first)",
        device=args.device,
    )
    if args.part in ("all", "throughput"):
        systems = args.systems.split(",")
        result["config"] = {"steps": args.steps, "repeats": args.repeats, "systems": systems}
        result["summary"] = {s: throughput(s, args) for s in systems}
    if args.part in ("all", "quality"):
        systems = args.quality_systems.split(",")
        rows = {s: quality(s, args) for s in systems}
        result["quality_config"] = {"steps": args.quality_steps, "systems": systems,
                                    "quick": bool(args.quick)}  # fmt: skip
        result["quality"] = rows
    result.setdefault("summary", {})
    write(out, result, echo=True)
    if "quality" in result:
        print(json.dumps(result["quality"], indent=1))
    return 0


ALL_SYSTEMS = (
    "lotka_volterra", "glycolytic_oscillator", "damped_pendulum", "gray_scott",
    "navier_stokes_2d",
)  # fmt: skip


def _data(system: str, args):
    from simsci.models import dynadiff as dd

    data = WORK / system / ("data-quick" if args.quick else "data")
    shutil.rmtree(data, ignore_errors=True)
    t0 = time.perf_counter()
    dd.make_environments(system, data, seed=0, quick=args.quick, device="cpu")
    return data, time.perf_counter() - t0


def throughput(system: str, args) -> dict:
    """Experts per minute, vmapped against one at a time (see the module docstring)."""
    from simsci.models import dynadiff as dd

    data, _ = _data(system, args)
    steps = args.steps
    per = {True: [], False: []}
    zoos = {}
    for rep in range(args.repeats):
        for vmapped in (True, False):
            tag = f"{'vmap' if vmapped else 'loop'}{rep}"
            runs = WORK / system / tag
            shutil.rmtree(runs, ignore_errors=True)
            path = dd.build_zoo(
                data, WORK / system / f"{tag}.pt", steps=steps, pool_steps=steps,
                device=args.device, vmapped=vmapped, run_dir=runs,
            )  # fmt: skip
            zoo = dd.load_zoo(path)
            per[vmapped].append(zoo.record["experts_per_minute"])
            zoos[vmapped] = zoo
            print(f"{system} {tag}: {zoo.record['experts_per_minute']:.1f} experts/min", flush=True)
    diff = max(
        float((zoos[True].weights[k] - zoos[False].weights[k]).abs().max())
        for k in zoos[True].weights
    )
    vm, loop = statistics.median(per[True]), statistics.median(per[False])
    return {
        "experts": zoos[True].num_experts,
        "params_per_expert": zoos[True].spec.num_params,
        "steps": steps,
        "vmapped_experts_per_minute": vm,
        "one_at_a_time_experts_per_minute": loop,
        "speedup": vm / loop,
        "max_weight_difference": diff,
        "runs": {"vmapped": per[True], "one_at_a_time": per[False]},
    }


def quality(system: str, args) -> dict:
    """One zoo as ``simsci zoo build`` makes it: cost, validation and persistence RMSE."""
    from simsci.models import dynadiff as dd

    data, data_seconds = _data(system, args)
    runs = WORK / system / "quality"
    shutil.rmtree(runs, ignore_errors=True)
    steps = args.quality_steps
    path = dd.build_zoo(
        data, WORK / system / "quality.pt", steps=steps, pool_steps=steps,
        device=args.device, run_dir=runs,
    )  # fmt: skip
    zoo = dd.load_zoo(path)
    row = {
        "experts": zoo.num_experts,
        "params_per_expert": zoo.spec.num_params,
        "steps": steps,
        "data_seconds": data_seconds,
        "seconds": zoo.record["seconds"],
        **zoo.quality(),
        "persistence_rmse_max": float(zoo.persistence_rmse.max()),
        "val_rmse": zoo.val_rmse.tolist(),
        "persistence_rmse": zoo.persistence_rmse.tolist(),
    }
    brief = {k: v for k, v in row.items() if k not in ("val_rmse", "persistence_rmse")}
    print(f"{system}: {json.dumps(brief)}", flush=True)
    return row


if __name__ == "__main__":
    raise SystemExit(main())
