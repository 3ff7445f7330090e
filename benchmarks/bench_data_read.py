"""Reading trajectories: simsci's flat layout vs one HDF5 group per episode.

Claim: storing episodes flat (concatenated along axis 0, indexed by offsets) reads
faster through a torch DataLoader than the common naive layout with one HDF5 group per
episode holding its own t/x/mask datasets, for the same data and the same loader.

Data: N episodes (20,000; --quick 2,000) of 50-200 steps, t float64, x (L, 3) float64
with ~10% missing entries (NaN + mask). Both layouts are written to a temporary
directory, then every episode is read through ``DataLoader(num_workers=4,
batch_size=64, collate_fn=pad_collate, persistent_workers=True)`` producing identical
batches (t, x as float32, mask, lengths, valid). Figures are medians over --repeat
epochs after one warm-up epoch (so the files are in the OS page cache and the workers
are started: this measures the read path, not the disk). A single-process loader
(num_workers=0) is reported too.

Run: .venv/bin/python benchmarks/bench_data_read.py [--quick]
Writes benchmarks/results/data_read.json.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

import simsci.data as sd
from simsci.bench import time_call, write_result

RESULTS = Path(__file__).resolve().parent / "results" / "data_read.json"


def make_episodes(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    eps = []
    for i in range(n):
        length = int(rng.integers(50, 201))
        t = np.cumsum(rng.uniform(0.01, 0.1, size=length))
        x = rng.normal(size=(length, 3))
        mask = rng.random((length, 3)) > 0.1
        x[~mask] = np.nan
        eps.append({"t": t, "x": x, "mask": mask, "split": int(i % 5 == 4)})
    return eps


def write_naive(path: Path, episodes: list[dict]) -> None:
    """The common baseline: /episodes/<i>/{t,x,mask}, one group per episode."""
    with h5py.File(path, "w") as f:
        root = f.create_group("episodes")
        for i, ep in enumerate(episodes):
            g = root.create_group(f"{i:07d}")
            for k in ("t", "x", "mask"):
                g.create_dataset(k, data=ep[k])
        f.attrs["n"] = len(episodes)


class NaiveDataset(Dataset):
    """Lazy per-worker handle (like ours), one group lookup + three reads per episode."""

    def __init__(self, path: Path):
        self.path = path
        with h5py.File(path) as f:
            self.n = int(f.attrs["n"])
        self._f = None
        self._pid = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        if self._f is None or self._pid != os.getpid():
            self._f = h5py.File(self.path, "r")
            self._pid = os.getpid()
        g = self._f[f"episodes/{i:07d}"]
        return {
            "t": torch.from_numpy(g["t"][()]).to(torch.float32),
            "x": torch.from_numpy(g["x"][()]).to(torch.float32),
            "mask": torch.from_numpy(g["mask"][()]),
            "episode": i,
            "start": 0,
        }

    def __getstate__(self):
        return {**self.__dict__, "_f": None, "_pid": None}


def consume(loader) -> int:
    steps = 0
    for batch in loader:
        steps += int(batch["lengths"].sum())
    return steps


def measure(dataset, *, workers: int, batch_size: int, repeat: int) -> dict:
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        collate_fn=sd.pad_collate,
        persistent_workers=workers > 0,
    )
    timing = time_call(lambda: consume(loader), repeat=repeat, warmup=1)
    return timing.as_dict()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2,000 episodes, 2 repeats")
    ap.add_argument("--episodes", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    n = args.episodes or (2_000 if args.quick else 20_000)
    repeat = args.repeat or (2 if args.quick else 3)

    episodes = make_episodes(n)
    total_steps = sum(len(e["t"]) for e in episodes)
    payload = sum(e["t"].nbytes + e["x"].nbytes + e["mask"].nbytes for e in episodes)
    result = {
        "benchmark": "data_read",
        "claim": "flat offsets layout reads faster than one HDF5 group per episode",
        "peer": "naive h5py layout: /episodes/<i>/{t,x,mask}",
        "config": {
            "episodes": n,
            "total_steps": total_steps,
            "payload_bytes": payload,
            "workers": args.workers,
            "batch_size": args.batch_size,
            "repeat": repeat,
            "warmup": 1,
            "quick": args.quick,
            "note": "warm OS page cache; medians over epochs after a warm-up epoch",
        },
    }
    with tempfile.TemporaryDirectory(prefix="simsci-bench-") as tmp:
        ours_path, naive_path = Path(tmp) / "ours.h5", Path(tmp) / "naive.h5"
        t0 = time.perf_counter()
        sd.write(ours_path, episodes, kind="state", system="bench", stats=True)
        write_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        write_naive(naive_path, episodes)
        write_peer = time.perf_counter() - t0
        del episodes
        result["write"] = {
            "ours_s": write_ours,
            "naive_s": write_peer,
            "ours_bytes": ours_path.stat().st_size,
            "naive_bytes": naive_path.stat().st_size,
        }
        ours = sd.TrajectoryDataset(ours_path, fields=("t", "x", "mask"))
        naive = NaiveDataset(naive_path)
        for label, workers in (("loader", args.workers), ("single_process", 0)):
            rows = {}
            for name, ds in (("ours", ours), ("naive", naive)):
                timing = measure(ds, workers=workers, batch_size=args.batch_size, repeat=repeat)
                med = timing["median_s"]
                rows[name] = {
                    **timing,
                    "episodes_per_s": n / med,
                    "mb_per_s": payload / med / 1e6,
                }
            rows["ratio_ours_over_naive"] = (
                rows["ours"]["episodes_per_s"] / rows["naive"]["episodes_per_s"]
            )
            rows["workers"] = workers
            result[label] = rows
    out = write_result(args.out, result)
    print(f"{n} episodes, {total_steps} steps, {payload / 1e6:.1f} MB payload")
    print(
        f"write: ours {write_ours:.2f} s ({result['write']['ours_bytes'] / 1e6:.1f} MB), "
        f"naive {write_peer:.2f} s ({result['write']['naive_bytes'] / 1e6:.1f} MB)"
    )
    for label in ("loader", "single_process"):
        r = result[label]
        print(
            f"{label} (workers={r['workers']}): ours {r['ours']['episodes_per_s']:.0f} ep/s "
            f"{r['ours']['mb_per_s']:.1f} MB/s | naive {r['naive']['episodes_per_s']:.0f} ep/s "
            f"{r['naive']['mb_per_s']:.1f} MB/s | ratio {r['ratio_ours_over_naive']:.2f}x"
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
