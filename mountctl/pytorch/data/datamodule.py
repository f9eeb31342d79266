"""``ShardDataModule``: the Lightning side of the data, built once the Trainer knows its rank."""

from __future__ import annotations

from typing import Any

import lightning
import torch

from mountctl.pytorch.data.dataset import EpochLoader, ShardDataset
from mountctl.pytorch.data.device_decode import transfer_encoded_batch
from mountctl.pytorch.data.manifest import Manifest

__all__ = ["ShardDataModule", "BATCH_TIMEOUT_S"]

# A bound on waiting for any one batch from a worker.  A wedged mount is the watchdog's to
# replace (open_resilient then reads on); this only stops a run from hanging for ever.
BATCH_TIMEOUT_S = 600.0


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

    def train_dataloader(self) -> EpochLoader:
        trainer = self.trainer
        assert trainer is not None, "train_dataloader() is called by a Trainer"
        dataset = ShardDataset(self.manifest, self.source, batch_size=self.batch_size, seed=self.seed,
                               rank=trainer.global_rank, world_size=trainer.world_size,
                               shuffle_buffer=self.shuffle_buffer, decode=self.decode)
        extra: dict[str, Any] = {"prefetch_factor": 2, "timeout": BATCH_TIMEOUT_S} if self.num_workers > 0 else {}
        # Workers are not persistent: each epoch's workers must start from that epoch's plan.
        return EpochLoader(dataset, epoch_fn=lambda: trainer.current_epoch, num_workers=self.num_workers,
                           pin_memory=self.pin_memory, persistent_workers=False, **extra)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        if isinstance(batch, dict) and "jpegs" in batch:
            # nvJPEG reads the (pinned) bytes from the host: decoding is the transfer.
            return transfer_encoded_batch(batch, self.manifest.image_size, device)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)
