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
5. Within a shard the samples are permuted too (per epoch, in windows of
   ``window`` samples so a reader holds at most a window), so the global order
   of an epoch depends only on the seed, the epoch and the dataset.

Mid-epoch resume (``--resume``) is layout-free: a checkpoint records the
*set* of global positions its steps trained (``consumed_after``, a few spans),
not a rank or worker cursor.  The rest of the epoch is the remaining spans
laid end to end and planned again as above for whatever ranks and workers the
resumed job has, so a job checkpointed on 2 ranks x 2 workers resumes on
1 rank x 3 workers with every sample still trained exactly once.

A shard that spans two readers is read by both, each keeping (and decoding)
only its own samples; that is how fewer shards than ranks x workers still
works, at the cost of reading such a shard's bytes more than once.
Nothing is padded or dropped.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from mountctl.pytorch.errors import DatasetError

__all__ = ["ShardSlice", "Assignment", "Span", "shard_order", "sample_order", "steps_per_epoch", "batch_sizes",
           "plan_epoch", "remaining_spans", "loader_order", "consumed_after", "rank_batches"]

Span = tuple[int, int]  # global positions [start, stop) of an epoch's order


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


def sample_order(num_samples: int, *, seed: int, epoch: int, shard: int, window: int,
                 shuffle: bool = True) -> list[int]:
    """Tar positions of one shard in the epoch's order: a seeded permutation within each window."""
    order = list(range(num_samples))
    if shuffle and window > 1:
        rng = random.Random(f"samples:{seed}:{epoch}:{shard}")
        for lo in range(0, num_samples, window):
            part = order[lo:lo + window]
            rng.shuffle(part)
            order[lo:lo + window] = part
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


def remaining_spans(total: int, consumed: Sequence[Span] = ()) -> list[Span]:
    """The positions of [0, total) not in ``consumed``, as sorted spans."""
    spans, cursor = [], 0
    for lo, hi in sorted(consumed):
        if lo > cursor:
            spans.append((cursor, lo))
        cursor = max(cursor, hi)
    if cursor < total:
        spans.append((cursor, total))
    return spans


def _merged(spans: Sequence[Span]) -> tuple[Span, ...]:
    out: list[Span] = []
    for lo, hi in sorted(s for s in spans if s[0] < s[1]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _locate(spans: Sequence[Span], start: int, stop: int) -> list[Span]:
    """Positions [start, stop) of ``spans`` laid end to end, as global spans."""
    out, offset = [], 0
    for lo, hi in spans:
        a, b = max(start, offset), min(stop, offset + hi - lo)
        if a < b:
            out.append((lo + a - offset, lo + b - offset))
        offset += hi - lo
        if offset >= stop:
            break
    return out


def _worker_batches(steps: int, num_workers: int, worker: int) -> range:
    return range(worker * steps // num_workers, (worker + 1) * steps // num_workers)


def loader_order(steps: int, num_workers: int) -> list[int]:
    """The batch numbers (plan order) in the order a DataLoader yields them.

    A DataLoader takes one batch from each worker in turn and skips workers that
    have finished; each worker holds a contiguous run of the rank's batches.
    """
    runs = [list(_worker_batches(steps, max(1, num_workers), w)) for w in range(max(1, num_workers))]
    order: list[int] = []
    for turn in range(max(len(run) for run in runs)):
        order.extend(run[turn] for run in runs if turn < len(run))
    return order


def _segment(total: int, consumed: Sequence[Span], world_size: int, rank: int, batch_size: int
             ) -> tuple[list[Span], int, int, tuple[int, ...]]:
    remaining = remaining_spans(total, consumed)
    left = sum(hi - lo for lo, hi in remaining)
    steps = steps_per_epoch(left, world_size, batch_size)
    rank_start, rank_stop = _rank_range(left, world_size, rank)
    return remaining, steps, rank_start, batch_sizes(rank_stop - rank_start, steps, batch_size)


def rank_batches(total: int, consumed: Sequence[Span], *, world_size: int, rank: int, batch_size: int
                 ) -> list[list[Span]]:
    """A rank's batches of the plan that skips ``consumed``, each as global spans, in step order.

    The map-style batch sampler's side of the same plan: its batches come out in this order whatever the
    number of workers (a DataLoader yields a batch sampler's batches in order), so ``consumed_after``
    with ``num_workers=1`` is the position after any number of its steps.
    """
    remaining, _, rank_start, sizes = _segment(total, consumed, world_size, rank, batch_size)
    offsets = [rank_start, *(rank_start + s for s in itertools.accumulate(sizes))]
    return [_locate(remaining, offsets[b], offsets[b + 1]) for b in range(len(sizes))]


def consumed_after(total: int, consumed: Sequence[Span], *, world_size: int, batch_size: int, num_workers: int,
                   steps: int) -> tuple[Span, ...]:
    """The positions trained once every rank has run ``steps`` steps of the plan that skips ``consumed``."""
    spans = list(consumed)
    for rank in range(world_size):
        remaining, planned, rank_start, sizes = _segment(total, consumed, world_size, rank, batch_size)
        offsets = [rank_start, *(rank_start + s for s in itertools.accumulate(sizes))]
        for batch in loader_order(planned, num_workers)[:steps]:
            spans.extend(_locate(remaining, offsets[batch], offsets[batch + 1]))
    return _merged(spans)


def plan_epoch(counts: Sequence[int], *, seed: int, epoch: int, batch_size: int, world_size: int = 1,
               rank: int = 0, num_workers: int = 1, worker: int = 0, shuffle: bool = True,
               consumed: Sequence[Span] = ()) -> Assignment:
    """The assignment of reader (``rank``, ``worker``) for ``epoch``, skipping the positions ``consumed``."""
    if batch_size < 1 or world_size < 1 or num_workers < 1:
        raise DatasetError("batch_size, world_size and num_workers must be at least 1")
    if not (0 <= rank < world_size and 0 <= worker < num_workers):
        raise DatasetError(f"reader (rank {rank}, worker {worker}) is outside {world_size} x {num_workers}")
    remaining, steps, rank_start, sizes = _segment(sum(counts), consumed, world_size, rank, batch_size)
    batches = _worker_batches(steps, num_workers, worker)
    start = rank_start + sum(sizes[:batches.start])
    stop = start + sum(sizes[batches.start:batches.stop])
    order = shard_order(len(counts), seed=seed, epoch=epoch, shuffle=shuffle)
    slices = [piece for lo, hi in _locate(remaining, start, stop) for piece in _slices(counts, order, lo, hi)]
    return Assignment(tuple(slices), sizes[batches.start:batches.stop])
