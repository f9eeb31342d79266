"""Which samples each rank reads in an epoch, for map-style datasets: exactly once, equal steps.

``DistributedSampler`` pads a rank's share by repeating samples when the
dataset does not divide evenly, and its batches can differ in number between
ranks (DDP then hangs).  ``ExactlyOnceBatchSampler`` shuffles all indices per
epoch from the seed, gives each rank a contiguous, balanced range and cuts it
into the same number of batches on every rank (``plan.batch_sizes``): nothing
repeated, nothing dropped.  Each index is yielded as ``(epoch, index)`` so the
batch says which epoch's shuffle made it.

Mid-epoch resume is the shard plan's (``plan.py``): ``resume_at`` skips the
positions of the epoch's permutation a checkpoint's steps trained, and the rest
is split again over however many ranks the resumed job has.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from mountctl.pytorch.data.sampling.epoch_position import EpochPosition
from mountctl.pytorch.data.sampling.plan import rank_batches, steps_per_epoch

__all__ = ["ExactlyOnceBatchSampler", "epoch_permutation"]


def epoch_permutation(num_samples: int, *, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    order = list(range(num_samples))
    if shuffle:
        random.Random(f"map:{seed}:{epoch}").shuffle(order)  # a string seed: the same in every process
    return order


class ExactlyOnceBatchSampler(EpochPosition):
    """Batches of ``(epoch, index)`` for one rank; ``set_epoch`` (or ``epoch_fn``) picks the shuffle."""

    def __init__(self, num_samples: int, *, batch_size: int, world_size: int = 1, rank: int = 0, seed: int = 0,
                 shuffle: bool = True, epoch_fn: Callable[[], int] | None = None) -> None:
        steps_per_epoch(num_samples, world_size, batch_size)  # fails here, before any worker
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.world_size = world_size
        self.rank = rank
        self.seed = seed
        self.shuffle = shuffle
        self.epoch_fn = epoch_fn

    def __len__(self) -> int:
        """Steps of this epoch, those before a resume included (what Lightning counts); the same on every rank."""
        return self.steps_this_epoch(self.num_samples, self.world_size, self.batch_size)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        epoch = int(self.epoch_fn()) if self.epoch_fn is not None else self.epoch
        order = epoch_permutation(self.num_samples, seed=self.seed, epoch=epoch, shuffle=self.shuffle)
        for spans in rank_batches(self.num_samples, self.consumed, world_size=self.world_size, rank=self.rank,
                                  batch_size=self.batch_size):
            yield [(epoch, order[position]) for lo, hi in spans for position in range(lo, hi)]
