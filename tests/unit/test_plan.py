"""The epoch plan: every sample read exactly once over ranks x workers, same step count on every rank.

Pure arithmetic (``mountctl/pytorch/data/sampling/plan.py``), so these run in milliseconds over many shapes.
"""

from __future__ import annotations

import itertools

import pytest

from mountctl.pytorch.data.sampling.plan import batch_sizes, plan_epoch, shard_order
from mountctl.pytorch.errors import DatasetError

SHAPES = [
    [3] * 16,  # more shards than readers
    [50],  # one shard for every reader: sample-level split
    [7, 1, 12, 5],  # uneven shards
    [2, 2, 2],
]


def samples_of(counts, assignment):
    offsets = list(itertools.accumulate([0, *counts]))
    return [offsets[s.shard] + i for s in assignment.slices for i in range(s.start, s.stop)]


@pytest.mark.parametrize("counts", SHAPES)
@pytest.mark.parametrize("world_size,num_workers", [(1, 1), (1, 2), (2, 1), (2, 2), (3, 4)])
@pytest.mark.parametrize("batch_size", [1, 4, 8])
def test_every_sample_is_read_exactly_once_per_epoch(counts, world_size, num_workers, batch_size):
    total = sum(counts)
    try:
        plans = {(r, w): plan_epoch(counts, seed=3, epoch=1, batch_size=batch_size, world_size=world_size,
                                    rank=r, num_workers=num_workers, worker=w)
                 for r in range(world_size) for w in range(num_workers)}
    except DatasetError as exc:
        # Only batch size 1 with uneven rank shares cannot give every rank the same step count.
        assert batch_size == 1 and total % world_size, exc
        return
    seen = [i for plan in plans.values() for i in samples_of(counts, plan)]
    assert sorted(seen) == list(range(total))
    for plan in plans.values():
        assert plan.num_samples == sum(s.stop - s.start for s in plan.slices)
        assert all(1 <= size <= batch_size for size in plan.batch_sizes)
    steps = {sum(len(plans[r, w].batch_sizes) for w in range(num_workers)) for r in range(world_size)}
    assert len(steps) == 1, f"ranks would run different numbers of steps: {steps}"


def test_shard_order_changes_per_epoch_and_repeats_for_the_same_seed():
    orders = [shard_order(32, seed=0, epoch=e) for e in range(3)]
    assert len({tuple(o) for o in orders}) == 3
    assert shard_order(32, seed=0, epoch=1) == orders[1]
    assert shard_order(32, seed=1, epoch=1) != orders[1]
    assert sorted(orders[0]) == list(range(32))


def test_short_last_batches_keep_at_least_two_samples_when_possible():
    sizes = batch_sizes(64, 3, 32)
    assert sum(sizes) == 64 and sizes[0] == 32 and min(sizes) >= 2


def test_fewer_samples_than_ranks_is_a_clear_error():
    with pytest.raises(DatasetError, match="fewer than the 4 ranks"):
        plan_epoch([3], seed=0, epoch=0, batch_size=2, world_size=4)
