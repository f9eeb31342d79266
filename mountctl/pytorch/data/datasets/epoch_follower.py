"""``EpochFollower``: a ``ShardDataset`` whose DataLoader workers persist across epochs and still follow the plan.

A persistent worker keeps the copy of the dataset it forked with, so a plain
``set_epoch`` in the parent never reaches it, and every epoch would repeat the
first one's shuffle.  The epoch travels instead through one shared-memory
integer that each worker reads when its next epoch's iterator starts.  Only
the epoch can change this way: a position to resume from (``consumed``) is
fixed when the workers start, so a resumed epoch gets workers of its own
(``ShardDataModule`` and ``ShardBatchNode`` do that), and the epochs after it
share persistent ones again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from mountctl.pytorch.data.datasets.dataset import ShardDataset

__all__ = ["EpochFollower", "shut_down_workers"]


class EpochFollower(IterableDataset):
    def __init__(self, dataset: ShardDataset) -> None:
        super().__init__()
        if dataset.consumed:
            raise ValueError("a resumed epoch's dataset cannot share persistent workers: give it workers of its own")
        self.dataset = dataset
        self._epoch = torch.tensor([dataset.epoch], dtype=torch.int64).share_memory_()

    @property
    def epoch(self) -> int:
        return self.dataset.epoch

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)
        self._epoch[0] = epoch  # seen by every worker, forked or spawned, at its next iterator

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self.dataset.set_epoch(int(self._epoch[0]))  # in a worker: its own copy of the dataset
        return iter(self.dataset)

    def __len__(self) -> int:
        return len(self.dataset)


def shut_down_workers(loader: DataLoader[Any] | None) -> None:
    """Stop a loader's persistent workers now, not when it is collected: before its source (a mount) goes."""
    iterator = getattr(loader, "_iterator", None)
    shutdown = getattr(iterator, "_shutdown_workers", None)  # torch's own; absent for num_workers=0
    if shutdown is not None:
        shutdown()
    if loader is not None:
        loader._iterator = None  # the next iter() starts new workers
