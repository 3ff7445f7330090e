"""DynaDiff zoo building throughput (issue 9): experts trained per minute with all experts
in one ``torch.func.vmap`` (``build_zoo``) against one expert at a time (the same
losses, optimiser and steps; ``vmapped=False``), same run, same data.

Per system (the full protocol's training environments, ``make_environments``; data
under runs/dynadiff_zoo_bench, git-ignored): ``--steps`` fine-tuning steps per expert
from a shared pooled start (``--steps`` pooled steps, not timed), ``--repeats`` timed
builds of each kind; reported: experts per minute (median), the ratio, and the largest
weight difference between the two zoos (they must agree: vmapping changes speed, not
results).

Usage: ``python benchmarks/bench_dynadiff_zoo.py [--systems a,b] [--steps 200]
[--repeats 3] [--device cpu] [--quick] [--out PATH]``; writes
benchmarks/results/dynadiff_zoo_<device>.json.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import warnings

from _runner import RESULTS, ROOT, quick, write

WORK = ROOT / "runs" / "dynadiff_zoo_bench"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="lotka_volterra,glycolytic_oscillator,gray_scott")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="LV only, 10 steps, 1 repeat")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from simsci.models import dynadiff as dd

    quick(args, systems="lotka_volterra", steps=10, repeats=1)
    systems, steps, repeats = args.systems.split(","), args.steps, args.repeats
    rows = {}
    for system in systems:
        data = WORK / system / "data"
        dd.make_environments(system, data, seed=0, quick=args.quick, device="cpu")
        per = {True: [], False: []}
        zoos = {}
        for rep in range(repeats):
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
                print(
                    f"{system} {tag}: {zoo.record['experts_per_minute']:.1f} experts/min",
                    flush=True,
                )
        diff = max(
            float((zoos[True].weights[k] - zoos[False].weights[k]).abs().max())
            for k in zoos[True].weights
        )
        vm, loop = statistics.median(per[True]), statistics.median(per[False])
        rows[system] = {
            "experts": zoos[True].num_experts,
            "params_per_expert": zoos[True].spec.num_params,
            "steps": steps,
            "vmapped_experts_per_minute": vm,
            "one_at_a_time_experts_per_minute": loop,
            "speedup": vm / loop,
            "max_weight_difference": diff,
            "runs": {"vmapped": per[True], "one_at_a_time": per[False]},
        }
    result = {
        "benchmark": "dynadiff_zoo",
        "peer": "the same expert training one expert at a time (build_zoo(vmapped=False))",
        "device": args.device,
        "config": {"steps": steps, "repeats": repeats, "systems": systems},
        "summary": rows,
    }
    write(args.out or RESULTS / f"dynadiff_zoo_{args.device}.json", result, echo=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
