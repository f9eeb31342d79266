"""``ShardDataModule``: the Lightning side of the data, built once the Trainer knows its rank."""

from __future__ import annotations

from typing import Any

import lightning

from mountctl.pytorch.data.dataset import EpochLoader, ShardDataset
from mountctl.pytorch.data.manifest import Manifest

__all__ = ["ShardDataModule", "BATCH_TIMEOUT_S"]

# A bound on waiting for any one batch from a worker.  A wedged mount is the watchdog's to
# replace (open_resilient then reads on); this only stops a run from hanging for ever.
BATCH_TIMEOUT_S = 600.0


class ShardDataModule(lightning.LightningDataModule):
    def __init__(self, manifest: Manifest, source: Any, *, batch_size: int, num_workers: int, seed: int,
                 shuffle_buffer: int = 1000, pin_memory: bool = False) -> None:
        super().__init__()
        self.manifest = manifest
        self.source = source
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.shuffle_buffer = shuffle_buffer
        self.pin_memory = pin_memory

    def train_dataloader(self) -> EpochLoader:
        trainer = self.trainer
        assert trainer is not None, "train_dataloader() is called by a Trainer"
        dataset = ShardDataset(self.manifest, self.source, batch_size=self.batch_size, seed=self.seed,
                               rank=trainer.global_rank, world_size=trainer.world_size,
                               shuffle_buffer=self.shuffle_buffer)
        extra: dict[str, Any] = {"prefetch_factor": 2, "timeout": BATCH_TIMEOUT_S} if self.num_workers > 0 else {}
        # Workers are not persistent: each epoch's workers must start from that epoch's plan.
        return EpochLoader(dataset, epoch_fn=lambda: trainer.current_epoch, num_workers=self.num_workers,
                           pin_memory=self.pin_memory, persistent_workers=False, **extra)


class MapDataModule(lightning.LightningDataModule):
    """Map-style data (files layout, or random access into indexed shards): one object read per sample.

    Batches come from ``ExactlyOnceBatchSampler`` (every sample once per epoch over all ranks, the same
    number of steps on each), so Lightning's own DistributedSampler stays off.
    """

    def __init__(self, manifest: Manifest, source: Any, uri: str, *, batch_size: int, num_workers: int, seed: int,
                 pin_memory: bool = False, readahead_threads: int = 16) -> None:
        super().__init__()
        self.manifest = manifest
        self.source = source
        self.uri = uri
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.pin_memory = pin_memory
        self.readahead_threads = readahead_threads

    def train_dataloader(self) -> Any:
        from torch.utils.data import DataLoader

        from mountctl.pytorch.data.mapsampler import ExactlyOnceBatchSampler
        from mountctl.pytorch.data.mapstyle import MapSampleDataset, collate

        trainer = self.trainer
        assert trainer is not None, "train_dataloader() is called by a Trainer"
        dataset = MapSampleDataset.from_manifest(self.manifest, self.source, self.uri,
                                                 readahead_threads=self.readahead_threads)
        sampler = ExactlyOnceBatchSampler(len(dataset), batch_size=self.batch_size, world_size=trainer.world_size,
                                          rank=trainer.global_rank, seed=self.seed,
                                          epoch_fn=lambda: trainer.current_epoch)
        extra: dict[str, Any] = {"prefetch_factor": 2, "timeout": BATCH_TIMEOUT_S} if self.num_workers > 0 else {}
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=self.num_workers,
                          pin_memory=self.pin_memory, persistent_workers=False, **extra)
