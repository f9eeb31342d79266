"""``ShardBatchNode``: a torchdata.nodes source of the plan's batches whose state is the global-order position.

For users who compose loaders with ``torchdata.nodes`` (``Loader``, ``Prefetcher``,
``PinMemory``, ``Mapper`` ...).  The node yields the same batches as
``ShardDataset`` (any source kind: mountpoint, s3io, fsspec), read and decoded
by ``num_workers`` DataLoader processes (0: in the calling thread).  Its state
is the dataset's layout-free ``position`` (epoch and spans of the global order
trained), not a worker cursor, so ``Loader.load_state_dict`` resumes exactly
once on the same layout and, through the plan, on other ranks and workers.

Each ``iter(loader)`` after the first starts the next epoch (its own shuffle),
as torchdata's ``SamplerWrapper`` does; a state saved at the end of an epoch
resumes at the start of the next one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader
from torchdata.nodes import BaseNode  # type: ignore[import-untyped]  # torchdata ships no py.typed

from mountctl.pytorch.data.datasets.dataset import BATCH_TIMEOUT_S, ShardDataset
from mountctl.pytorch.data.datasets.epoch_follower import EpochFollower, shut_down_workers
from mountctl.pytorch.data.datasets.worker_imports import import_worker_modules
from mountctl.pytorch.data.index.manifest import Manifest

__all__ = ["ShardBatchNode"]


class ShardBatchNode(BaseNode[dict[str, Any]]):
    """Batches of ``{"images", "labels", "index", "keys", "epoch"}`` for one rank, in the epoch's plan order.

    ``decode="gpu"`` yields ``"jpegs"`` instead of ``"images"``: decode them on the device with
    ``device_decode.transfer_encoded_batch`` (e.g. in a ``torchdata.nodes.Mapper``).
    """

    def __init__(self, manifest: Manifest, source: Any, *, batch_size: int, seed: int = 0, rank: int = 0,
                 world_size: int = 1, num_workers: int = 0, shuffle: bool = True, shuffle_buffer: int = 1000,
                 decode: str = "cpu", initial_epoch: int = 0, timeout: float = BATCH_TIMEOUT_S) -> None:
        super().__init__()
        self.dataset = ShardDataset(manifest, source, batch_size=batch_size, seed=seed, rank=rank,
                                    world_size=world_size, shuffle=shuffle, shuffle_buffer=shuffle_buffer,
                                    decode=decode)
        self.dataset.set_epoch(initial_epoch)
        self.num_workers = num_workers
        self.timeout = timeout
        self._batches: Iterator[dict[str, Any]] | None = None
        self._steps = 0  # batches yielded since the dataset's start (or resume) point
        self._started = False  # a batch of the current epoch was asked for: the next plain reset moves on
        self._exhausted = False
        self._complete: dict[str, Any] | None = None  # a restored state whose epoch had ended: it stays the state
        self._persistent: DataLoader[Any] | None = None  # the epochs' loader, its workers kept between them

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._batches = None  # a persistent loader's next iter() winds its workers back; others shut down
        self._steps = 0
        self._complete = None
        if initial_state is not None:
            self._exhausted = not self.dataset.resume_from(initial_state)
            self._complete = dict(initial_state) if self._exhausted else None
            self._started = True  # a later plain reset starts the epoch after the saved one
            return
        if self._started:
            self.dataset.set_epoch(self.dataset.epoch + 1)
        self.dataset.resume_at((), 0)
        self._started = self._exhausted = False

    def next(self) -> dict[str, Any]:
        if self._exhausted:
            raise StopIteration
        self._started = True
        if self._batches is None:
            self._batches = iter(self._loader())
        try:
            batch = next(self._batches)
        except StopIteration:
            self._exhausted, self._batches = True, None
            raise
        self._steps += 1
        return batch

    def _loader(self) -> DataLoader[Any]:
        """Workers that persist over the epochs; a resumed epoch (``consumed``) gets workers of its own."""
        if self.num_workers == 0:
            return DataLoader(self.dataset, batch_size=None)
        import_worker_modules()  # before the workers fork
        if self.dataset.consumed:
            return DataLoader(self.dataset, batch_size=None, num_workers=self.num_workers, prefetch_factor=2,
                              timeout=self.timeout)
        if self._persistent is None:
            self._persistent = DataLoader(EpochFollower(self.dataset), batch_size=None, num_workers=self.num_workers,
                                          prefetch_factor=2, timeout=self.timeout, persistent_workers=True)
        self._persistent.dataset.set_epoch(self.dataset.epoch)  # type: ignore[attr-defined]  # an EpochFollower
        return self._persistent

    def close(self) -> None:
        """Stop the persistent workers now (they also stop with this process); the next batch starts new ones."""
        self._batches = None
        shut_down_workers(self._persistent)
        self._persistent = None

    def get_state(self) -> dict[str, Any]:
        if self._complete is not None:
            return dict(self._complete)
        return self.dataset.position(self._steps, self.num_workers)
