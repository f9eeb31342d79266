"""``ShardDataModule``: the Lightning side of the data, built once the Trainer knows its rank.

It also carries the data position through checkpoints (``state_dict``): the
epoch and the global positions its steps trained, whatever the layout, so a
resumed job (any ranks, any workers) trains the rest of the epoch exactly once.
"""

from __future__ import annotations

from typing import Any

import lightning
import torch

from mountctl.pytorch.data.dataset import BATCH_TIMEOUT_S, EpochLoader, ShardDataset, check_same_order
from mountctl.pytorch.data.device_decode import transfer_encoded_batch
from mountctl.pytorch.data.manifest import Manifest
from mountctl.pytorch.errors import CheckpointError

__all__ = ["ShardDataModule", "BATCH_TIMEOUT_S"]



class ShardDataModule(lightning.LightningDataModule):
    def __init__(self, manifest: Manifest, source: Any, *, batch_size: int, num_workers: int, seed: int,
                 shuffle_buffer: int = 1000, pin_memory: bool = False, decode: str = "cpu") -> None:
        super().__init__()
        self.manifest = manifest
        self.source = source
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.shuffle_buffer = shuffle_buffer
        self.pin_memory = pin_memory
        self.decode = decode  # "gpu": batches arrive as JPEG bytes and are decoded on the device
        self._resume: dict[str, Any] | None = None  # a checkpoint's position, until its epoch starts
        self._dataset: ShardDataset | None = None
        self._start_step = 0  # the global step at which the current dataset's first batch was taken

    def train_dataloader(self) -> EpochLoader:
        trainer = self.trainer
        assert trainer is not None, "train_dataloader() is called by a Trainer"
        dataset = ShardDataset(self.manifest, self.source, batch_size=self.batch_size, seed=self.seed,
                               rank=trainer.global_rank, world_size=trainer.world_size,
                               shuffle_buffer=self.shuffle_buffer, decode=self.decode)
        if self._resume is not None:
            dataset.resume_from(self._resume)  # the epoch is set again from the trainer's when it starts
        self._dataset = dataset
        extra: dict[str, Any] = {"prefetch_factor": 2, "timeout": BATCH_TIMEOUT_S} if self.num_workers > 0 else {}
        # Workers are not persistent: each epoch's workers must start from that epoch's plan.
        return EpochLoader(dataset, epoch_fn=self._begin_epoch, num_workers=self.num_workers,
                           pin_memory=self.pin_memory, persistent_workers=False, **extra)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        if isinstance(batch, dict) and "jpegs" in batch:
            # nvJPEG reads the (pinned) bytes from the host: decoding is the transfer.
            return transfer_encoded_batch(batch, self.manifest.image_size, device)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def _begin_epoch(self) -> int:
        trainer, dataset = self.trainer, self._dataset
        assert trainer is not None and dataset is not None
        epoch = trainer.current_epoch
        if dataset.consumed and self._resume is not None and self._resume["epoch"] != epoch:
            raise CheckpointError(f"the checkpoint stopped in epoch {self._resume['epoch']} but training resumed "
                                  f"at epoch {epoch}; resume from an unmodified last.ckpt")
        self._resume = None
        self._start_step = trainer.global_step
        return epoch

    def state_dict(self) -> dict[str, Any]:
        """The data position: epoch, positions trained (spans of the global order), steps that trained them."""
        trainer, dataset = self.trainer, self._dataset
        if dataset is None or trainer is None:
            return dict(self._resume or {})
        return dataset.position(trainer.global_step - self._start_step, self.num_workers)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # The global order depends on the seed and window; ranks, workers and batch size may change.
        check_same_order(state_dict, self.seed, self.shuffle_buffer)
        self._resume = dict(state_dict) if state_dict else None


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
