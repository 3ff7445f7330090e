"""Run every benchmark script of this folder with its default (full) sizes, one after
another, so each has the machine to itself. `make bench` runs this; pass --quick for a
smoke run (results then go to a scratch folder, not benchmarks/results/)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, scratch output")
    args = parser.parse_args()
    failed = []
    scratch = Path(tempfile.mkdtemp(prefix="simsci-bench-")) if args.quick else None
    for script in sorted(HERE.glob("bench_*.py")):
        cmd = [sys.executable, str(script)]
        if args.quick:
            cmd += ["--quick", "--out", str(scratch / f"{script.stem}.json")]
        print(f"== {script.name}", flush=True)
        if subprocess.call(cmd) != 0:
            failed.append(script.name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
