"""Who reads which samples in an epoch: exactly once over ranks x DataLoader workers.

Pure arithmetic, computed identically in every rank and worker from the
manifest's per-shard counts, the seed and the epoch; nothing is exchanged.

1. The shards are shuffled per epoch (deterministically from seed and epoch)
   and laid end to end as one global sequence of samples.
2. Each rank takes a contiguous, balanced range of it (sizes differ by at most
   one), so a rank reads whole shards except at most two partial ones.
3. Every rank runs the same number of steps: DDP hangs when one rank stops
   early.  A rank cuts its range into that many batches, full batches first.
4. A rank's batches are split contiguously over its DataLoader workers.

A shard that spans two readers is read by both, each keeping (and decoding)
only its own samples; that is how fewer shards than ranks x workers still
works, at the cost of reading such a shard's bytes more than once.
Nothing is padded or dropped.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from mountctl.pytorch.errors import DatasetError

__all__ = ["ShardSlice", "Assignment", "shard_order", "steps_per_epoch", "batch_sizes", "plan_epoch"]


@dataclass(frozen=True)
class ShardSlice:
    """Samples ``start`` to ``stop`` (tar order) of shard number ``shard`` in the manifest."""

    shard: int
    start: int
    stop: int


@dataclass(frozen=True)
class Assignment:
    """What one reader (a rank's DataLoader worker) reads and how it batches it."""

    slices: tuple[ShardSlice, ...]
    batch_sizes: tuple[int, ...]

    @property
    def num_samples(self) -> int:
        return sum(self.batch_sizes)


def shard_order(num_shards: int, *, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    order = list(range(num_shards))
    if shuffle:
        # A string seed is hashed with SHA-512: the same in every process, whatever PYTHONHASHSEED is.
        random.Random(f"shards:{seed}:{epoch}").shuffle(order)
    return order


def _rank_range(total: int, world_size: int, rank: int) -> tuple[int, int]:
    return rank * total // world_size, (rank + 1) * total // world_size


def steps_per_epoch(total: int, world_size: int, batch_size: int) -> int:
    """Steps every rank runs: enough for the largest rank's share at ``batch_size``."""
    if total < world_size:
        raise DatasetError(f"the dataset has {total} samples, fewer than the {world_size} ranks training on it; "
                           "make a larger dataset or use fewer devices")
    steps = math.ceil(math.ceil(total / world_size) / batch_size)
    smallest = total // world_size
    if steps > smallest:
        raise DatasetError(f"{total} samples cannot give each of {world_size} ranks the same number of batches "
                           f"of at most {batch_size}; use a batch size above 1")
    return steps


def batch_sizes(num_samples: int, steps: int, batch_size: int) -> tuple[int, ...]:
    """Cut ``num_samples`` into exactly ``steps`` batches of at most ``batch_size``, full ones first.

    The shortfall comes off the last batches, leaving each at least two
    samples where possible: BatchNorm cannot train on a single sample once the
    feature map is 1x1 (ResNet-50 on images under 64 px).
    """
    if not steps <= num_samples <= steps * batch_size:
        raise DatasetError(f"cannot cut {num_samples} samples into {steps} batches of at most {batch_size}")
    floor = 2 if num_samples >= 2 * steps else 1
    sizes = [batch_size] * steps
    excess = steps * batch_size - num_samples
    for i in range(steps - 1, -1, -1):
        if excess == 0:
            break
        take = min(excess, sizes[i] - floor)
        sizes[i] -= take
        excess -= take
    return tuple(sizes)


def _slices(counts: Sequence[int], order: Sequence[int], start: int, stop: int) -> tuple[ShardSlice, ...]:
    """The pieces of shards that cover global positions [start, stop) of the shuffled sequence."""
    slices = []
    offset = 0
    for shard in order:
        lo, hi = max(start, offset), min(stop, offset + counts[shard])
        if lo < hi:
            slices.append(ShardSlice(shard, lo - offset, hi - offset))
        offset += counts[shard]
        if offset >= stop:
            break
    return tuple(slices)


def plan_epoch(counts: Sequence[int], *, seed: int, epoch: int, batch_size: int, world_size: int = 1,
               rank: int = 0, num_workers: int = 1, worker: int = 0, shuffle: bool = True) -> Assignment:
    """The assignment of reader (``rank``, ``worker``) for ``epoch``."""
    if batch_size < 1 or world_size < 1 or num_workers < 1:
        raise DatasetError("batch_size, world_size and num_workers must be at least 1")
    if not (0 <= rank < world_size and 0 <= worker < num_workers):
        raise DatasetError(f"reader (rank {rank}, worker {worker}) is outside {world_size} x {num_workers}")
    total = sum(counts)
    steps = steps_per_epoch(total, world_size, batch_size)
    rank_start, rank_stop = _rank_range(total, world_size, rank)
    sizes = batch_sizes(rank_stop - rank_start, steps, batch_size)
    first, last = worker * steps // num_workers, (worker + 1) * steps // num_workers
    start = rank_start + sum(sizes[:first])
    stop = start + sum(sizes[first:last])
    order = shard_order(len(counts), seed=seed, epoch=epoch, shuffle=shuffle)
    return Assignment(_slices(counts, order, start, stop), sizes[first:last])
