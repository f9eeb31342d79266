"""Mid-epoch resume on any layout: the positions a checkpoint's steps trained, and the plan for the rest.

Pure arithmetic (``plan.py``): the steps a layout runs are simulated from its plan and the DataLoader's
round-robin over workers, then the rest of the epoch is planned for another layout.
"""

from __future__ import annotations

import itertools

import pytest

from mountctl.pytorch.data.sampling.plan import (
    consumed_after,
    loader_order,
    plan_epoch,
    remaining_spans,
    sample_order,
    shard_order,
)
from mountctl.pytorch.errors import DatasetError

SHAPES = [[3] * 16, [50], [7, 1, 12, 5, 9]]
LAYOUTS = [(2, 2, 1, 3), (1, 3, 2, 2), (2, 1, 2, 3), (1, 1, 3, 1), (3, 2, 1, 0)]  # ranks, workers -> ranks, workers


def batches_of_rank(counts, rank, world_size, num_workers, consumed=(), batch_size=4):
    """Each step's global positions for one rank, in the order its DataLoader yields them."""
    order = shard_order(len(counts), seed=3, epoch=1)
    ordered = dict(zip(order, itertools.accumulate([0, *(counts[s] for s in order[:-1])]), strict=True))
    plan_batches = []
    for worker in range(max(1, num_workers)):
        plan = plan_epoch(counts, seed=3, epoch=1, batch_size=batch_size, world_size=world_size, rank=rank,
                          num_workers=max(1, num_workers), worker=worker, consumed=consumed)
        positions = [ordered[s.shard] + i for s in plan.slices for i in range(s.start, s.stop)]
        cuts = list(itertools.accumulate([0, *plan.batch_sizes]))
        plan_batches += [positions[a:b] for a, b in itertools.pairwise(cuts)]
    return [plan_batches[b] for b in loader_order(len(plan_batches), num_workers)]


@pytest.mark.parametrize("counts", SHAPES)
@pytest.mark.parametrize("before_ranks,before_workers,after_ranks,after_workers", LAYOUTS)
def test_resume_on_another_layout_trains_the_rest_of_the_epoch_exactly_once(
        counts, before_ranks, before_workers, after_ranks, after_workers):
    total = sum(counts)
    first = {r: batches_of_rank(counts, r, before_ranks, before_workers) for r in range(before_ranks)}
    steps = len(first[0])
    assert all(len(b) == steps for b in first.values())
    for done in range(1, steps):
        trained = sorted(p for r in first for batch in first[r][:done] for p in batch)
        consumed = consumed_after(total, (), world_size=before_ranks, batch_size=4, num_workers=before_workers,
                                  steps=done)
        assert sorted(p for lo, hi in consumed for p in range(lo, hi)) == trained
        if total - len(trained) < after_ranks:
            with pytest.raises(DatasetError, match="fewer than the"):
                batches_of_rank(counts, 0, after_ranks, after_workers, consumed)
            continue
        rest = {r: batches_of_rank(counts, r, after_ranks, after_workers, consumed) for r in range(after_ranks)}
        assert len({len(b) for b in rest.values()}) == 1, "ranks must run equal step counts"
        again = sorted(p for r in rest for batch in rest[r] for p in batch)
        assert sorted(trained + again) == list(range(total))


def test_a_second_resume_continues_from_the_first_resumes_position():
    counts, total = [7, 1, 12, 5, 9], 34
    consumed = consumed_after(total, (), world_size=2, batch_size=4, num_workers=2, steps=2)
    consumed = consumed_after(total, consumed, world_size=1, batch_size=4, num_workers=3, steps=3)
    assert sum(hi - lo for lo, hi in consumed) == 16 + 12
    rest = batches_of_rank(counts, 0, 2, 1, consumed) + batches_of_rank(counts, 1, 2, 1, consumed)
    left = sorted(p for batch in rest for p in batch)
    assert left == [p for lo, hi in remaining_spans(total, consumed) for p in range(lo, hi)]


def test_loader_order_takes_one_batch_from_each_worker_in_turn():
    assert loader_order(5, 2) == [0, 2, 1, 3, 4]
    assert loader_order(4, 0) == [0, 1, 2, 3]


def test_sample_order_is_a_seeded_permutation_within_windows():
    orders = [sample_order(20, seed=0, epoch=e, shard=3, window=8) for e in range(3)]
    assert len({tuple(o) for o in orders}) == 3
    assert all(sorted(o[:8]) == list(range(8)) and sorted(o[16:]) == list(range(16, 20)) for o in orders)
    assert sample_order(20, seed=0, epoch=1, shard=3, window=8) == orders[1]
    assert sample_order(20, seed=0, epoch=1, shard=3, window=8, shuffle=False) == list(range(20))


def test_resume_with_another_batch_size_trains_the_rest_exactly_once():
    counts, total = [7, 1, 12, 5, 9], 34
    consumed = consumed_after(total, (), world_size=2, batch_size=4, num_workers=2, steps=2)
    rest = [p for r in range(3) for batch in batches_of_rank(counts, r, 3, 2, consumed, batch_size=3) for p in batch]
    assert sorted(rest + [p for lo, hi in consumed for p in range(lo, hi)]) == list(range(total))


def _shards(counts, names=None):
    from mountctl.pytorch.data.index.manifest import Manifest, ShardInfo

    names = names or [f"train-{n:06d}.tar" for n in range(len(counts))]
    firsts = list(itertools.accumulate([0, *counts[:-1]]))
    return Manifest(num_images=sum(counts), image_size=32, num_classes=3, seed=0, origin="index",
                    shards=tuple(ShardInfo(name, c, f, 1000) for name, c, f in zip(names, counts, firsts, strict=True)))


@pytest.mark.parametrize("after", [
    _shards([12, 12, 12, 12, 12]),  # a re-index found a fifth shard
    _shards([12, 12], ["train-000001.tar", "train-000002.tar"]),  # another brace selection
    _shards([12, 12, 12, 11]),  # a shard re-written with one sample fewer
])
def test_a_position_saved_on_one_dataset_is_refused_on_another_naming_both(after):
    from mountctl.pytorch.data.datasets.dataset import check_same_order, position
    from mountctl.pytorch.errors import CheckpointError

    before = _shards([12, 12, 12, 12])
    saved = position(0, ((0, 16),), 4, 3, 8, before)
    check_same_order(saved, 3, 8, _shards([12, 12, 12, 12]))  # the same data, indexed again: resumes
    with pytest.raises(CheckpointError) as refused:
        check_same_order(saved, 3, 8, after)
    message = str(refused.value)
    assert "\n" not in message and "drop --resume" in message
    assert before.identity["summary"] in message and after.identity["summary"] in message
    assert "4 shards (train-000000.tar .. train-000003.tar), 48 samples" in message
