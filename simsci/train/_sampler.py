"""Deterministic data order: batches that depend on (seed, epoch, rank) only.

Epoch e visits ``perm_e = randperm(n, generator=Generator().manual_seed(mix(seed, e)))``,
never the global RNG, so the order survives anything the model does with randomness and
a resumed run can start at batch p of epoch e by slicing, without loading (and throwing
away) the batches before it.

Global batch b of an epoch is ``perm_e[b*G : (b+1)*G]`` with ``G = batch_size *
world_size``; rank r takes the r-th of ``world_size`` contiguous, near-equal chunks of it
(``numpy.array_split`` sizes). Concatenating the ranks' batches in rank order gives the
global batch, so a DDP run sees exactly the batches of a single-process run with
``batch_size * world_size``. A final global batch with fewer samples than ranks would
leave a rank empty; under DDP it is dropped (never in a single process).
"""

from __future__ import annotations

import hashlib

import torch


def mix_seed(*parts) -> int:
    """A 63-bit seed from any tuple of ints/strings (stable across processes and runs)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def _chunk(lo: int, size: int, parts: int, r: int) -> tuple[int, int]:
    """Bounds of chunk r when ``size`` items from ``lo`` are split into ``parts`` chunks."""
    base, extra = divmod(size, parts)
    start = lo + r * base + min(r, extra)
    return start, start + base + (1 if r < extra else 0)


class EpochBatchSampler:
    """Batches of dataset indices for one rank, shuffled per epoch from (seed, epoch).

    Use as a DataLoader ``batch_sampler``; call :meth:`set_epoch` before each epoch.
    """

    def __init__(
        self,
        n: int,
        batch_size: int,
        *,
        seed: int = 0,
        world_size: int = 1,
        rank: int = 0,
        shuffle: bool = True,
    ):
        self.n = int(n)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.world_size = int(world_size)
        self.rank = int(rank)
        self.shuffle = shuffle
        self.global_batch = self.batch_size * self.world_size
        full, rest = divmod(self.n, self.global_batch)
        # a leftover smaller than the number of ranks would give some rank no sample
        self.num_batches = full + (1 if rest >= self.world_size else 0)
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Iterate epoch ``epoch`` from its batch ``start`` (0 <= start <= num_batches)."""
        if not 0 <= start <= self.num_batches:
            raise ValueError(
                f"start batch must be in [0, {self.num_batches}] for this epoch, got {start}"
            )
        self.epoch = int(epoch)
        self.start = int(start)

    def order(self, epoch: int) -> torch.Tensor:
        """The epoch's permutation of ``range(n)`` (identity when not shuffling)."""
        if not self.shuffle:
            return torch.arange(self.n)
        gen = torch.Generator()
        gen.manual_seed(mix_seed(self.seed, "epoch", int(epoch)))
        return torch.randperm(self.n, generator=gen)

    def sizes(self, b: int) -> tuple[int, int]:
        """(samples of this rank, samples of all ranks) in batch ``b`` of any epoch."""
        lo = b * self.global_batch
        total = min(self.global_batch, self.n - lo)
        start, stop = _chunk(lo, total, self.world_size, self.rank)
        return stop - start, total

    def __iter__(self):
        perm = self.order(self.epoch)
        for b in range(self.start, self.num_batches):
            lo = b * self.global_batch
            total = min(self.global_batch, self.n - lo)
            start, stop = _chunk(lo, total, self.world_size, self.rank)
            yield perm[start:stop].tolist()

    def __len__(self) -> int:
        return self.num_batches - self.start


class ShardBatchSampler:
    """Validation order: no shuffling; rank r takes a contiguous shard, in batches.

    Shards are ``numpy.array_split`` of ``range(n)``; a rank may get none (n < ranks).
    """

    def __init__(self, n: int, batch_size: int, *, world_size: int = 1, rank: int = 0):
        self.lo, self.hi = _chunk(0, int(n), int(world_size), int(rank))
        self.batch_size = int(batch_size)

    def __iter__(self):
        for start in range(self.lo, self.hi, self.batch_size):
            yield list(range(start, min(start + self.batch_size, self.hi)))

    def __len__(self) -> int:
        return -(-(self.hi - self.lo) // self.batch_size)

    def batch_sizes(self) -> list[int]:
        return [len(b) for b in self]
