"""The Lightning side of the data (``ShardDataModule``, ``MapDataModule``), built once the Trainer knows its rank.

Both carry the data position through checkpoints (``state_dict``): the epoch
and the global positions its steps trained, whatever the layout, so a resumed
job (any ranks, any workers, shards or map-style) trains the rest of the epoch
exactly once.
"""

from __future__ import annotations

from typing import Any

import lightning
import torch

from mountctl.pytorch.data.datasets.dataset import (
    BATCH_TIMEOUT_S,
    EpochLoader,
    ShardDataset,
    check_same_order,
    position,
)
from mountctl.pytorch.data.datasets.epoch_follower import EpochFollower, shut_down_workers
from mountctl.pytorch.data.decode.device_decode import transfer_encoded_batch
from mountctl.pytorch.data.index.manifest import Manifest
from mountctl.pytorch.data.sampling.plan import Span, consumed_after
from mountctl.pytorch.errors import CheckpointError
from mountctl.pytorch.notices import resume_is_exact

__all__ = ["ShardDataModule", "MapDataModule", "BATCH_TIMEOUT_S"]


class _PositionedDataModule(lightning.LightningDataModule):
    """The data position in checkpoints, for whichever object walks the plan (``_walker``).

    The walker (a ``ShardDataset``, or the map-style ``ExactlyOnceBatchSampler``) has ``epoch``,
    ``consumed`` and ``steps_before``; ``_order_workers`` is how many readers interleave its batches
    (the DataLoader's workers for shards; 1 for a batch sampler, whose batches come out in order).
    """

    def __init__(self, manifest: Manifest, *, batch_size: int, num_workers: int, seed: int,
                 window: int | None) -> None:
        super().__init__()
        self.manifest = manifest
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.window = window  # the shard path's shuffle window; None for map-style (one global permutation)
        self._resume: dict[str, Any] | None = None  # a checkpoint's position, until its epoch starts
        self._walker: Any = None
        self._start_step = 0  # the global step at which the current walker's first batch was taken
        self._order_workers = 1

    def _resume_walker(self, walker: Any) -> None:
        resume = self._resume
        if resume is not None and len(resume["consumed"]) and resume["samples"] < self.manifest.num_images:
            walker.resume_at(tuple((lo, hi) for lo, hi in resume["consumed"]), resume["steps"])
        self._walker = walker

    def _begin_epoch(self) -> int:
        trainer, walker = self.trainer, self._walker
        assert trainer is not None and walker is not None
        epoch = trainer.current_epoch
        if walker.consumed and self._resume is not None and self._resume["epoch"] != epoch:
            raise CheckpointError(f"the checkpoint stopped in epoch {self._resume['epoch']} but training resumed "
                                  f"at epoch {epoch}; resume from an unmodified last.ckpt")
        self._resume = None
        self._start_step = trainer.global_step
        return epoch

    def state_dict(self) -> dict[str, Any]:
        """The data position: epoch, positions trained (spans of the global order), steps that trained them."""
        trainer, walker = self.trainer, self._walker
        if walker is None or trainer is None:
            return dict(self._resume or {})
        steps = trainer.global_step - self._start_step
        consumed: tuple[Span, ...] = consumed_after(
            self.manifest.num_images, walker.consumed, world_size=trainer.world_size, batch_size=self.batch_size,
            num_workers=self._order_workers, steps=steps)
        return position(walker.epoch, consumed, walker.steps_before + steps, self.seed, self.window, self.manifest)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # The global order depends on the seed and window; ranks, workers and batch size may change.
        check_same_order(state_dict, self.seed, self.window, self.manifest)
        self._resume = dict(state_dict) if state_dict else None
        if self._resume is not None:
            resume_is_exact()  # Lightning's "not resumable" warning looks at the loader; the position is here


class ShardDataModule(_PositionedDataModule):
    def __init__(self, manifest: Manifest, source: Any, *, batch_size: int, num_workers: int, seed: int,
                 shuffle_buffer: int = 1000, pin_memory: bool = False, decode: str = "cpu") -> None:
        super().__init__(manifest, batch_size=batch_size, num_workers=num_workers, seed=seed, window=shuffle_buffer)
        self.source = source
        self.shuffle_buffer = shuffle_buffer
        self.pin_memory = pin_memory
        self.decode = decode  # "gpu": batches arrive as JPEG bytes and are decoded on the device
        self._order_workers = num_workers
        self._loader: EpochLoader | None = None  # the epochs' loader with persistent workers
        self._loader_walker: ShardDataset | None = None  # its dataset (in the parent)

    def train_dataloader(self) -> EpochLoader:
        """One loader whose workers persist over the epochs; a resumed epoch's loader has workers of its own.

        Forking workers every epoch cost a fixed start per epoch (docs/benchmarks-guide.md); the
        epoch reaches persistent workers through ``EpochFollower``, a resume position cannot.
        """
        trainer = self.trainer
        assert trainer is not None, "train_dataloader() is called by a Trainer"
        if self._loader is not None and self._resume is None:
            self._walker = self._loader_walker
            return self._loader
        dataset = ShardDataset(self.manifest, self.source, batch_size=self.batch_size, seed=self.seed,
                               rank=trainer.global_rank, world_size=trainer.world_size,
                               shuffle_buffer=self.shuffle_buffer, decode=self.decode)
        self._resume_walker(dataset)
        if self.num_workers == 0 or dataset.consumed:  # no workers to keep, or this epoch's alone
            extra: dict[str, Any] = {"prefetch_factor": 2, "timeout": BATCH_TIMEOUT_S} if self.num_workers else {}
            return EpochLoader(dataset, epoch_fn=self._begin_epoch, num_workers=self.num_workers,
                               pin_memory=self.pin_memory, **extra)
        self._loader = EpochLoader(EpochFollower(dataset), epoch_fn=self._begin_epoch, num_workers=self.num_workers,
                                   pin_memory=self.pin_memory, persistent_workers=True, prefetch_factor=2,
                                   timeout=BATCH_TIMEOUT_S)
        self._loader_walker = dataset
        return self._loader

    def teardown(self, stage: str) -> None:
        shut_down_workers(self._loader)  # before the source (a mount) is released
        self._loader = None

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        if isinstance(batch, dict) and "jpegs" in batch:
            # nvJPEG reads the (pinned) bytes from the host: decoding is the transfer.
            return transfer_encoded_batch(batch, self.manifest.image_size, device)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)


class MapDataModule(_PositionedDataModule):
    """Map-style data (files layout, or random access into indexed shards): one object read per sample.

    Batches come from ``ExactlyOnceBatchSampler`` (every sample once per epoch over all ranks, the same
    number of steps on each), so Lightning's own DistributedSampler stays off.  Each batch gets its
    samples' keys (``"keys"``, for ``--sample-log``) in this process, so the workers never carry them.
    """

    def __init__(self, manifest: Manifest, source: Any, uri: str, *, batch_size: int, num_workers: int, seed: int,
                 pin_memory: bool = False, readahead_threads: int = 16) -> None:
        super().__init__(manifest, batch_size=batch_size, num_workers=num_workers, seed=seed, window=None)
        self.source = source
        self.uri = uri
        self.pin_memory = pin_memory
        self.readahead_threads = readahead_threads
        self._keys: list[str] = []
        self._dataset: Any = None  # this epoch's; its reader's descriptors are given back when it is replaced

    def train_dataloader(self) -> EpochLoader:
        from mountctl.pytorch.data.datasets.mapstyle import MapSampleDataset, collate
        from mountctl.pytorch.data.sampling.mapsampler import ExactlyOnceBatchSampler

        trainer = self.trainer
        assert trainer is not None, "train_dataloader() is called by a Trainer"
        dataset = MapSampleDataset.from_manifest(self.manifest, self.source, self.uri,
                                                 readahead_threads=self.readahead_threads)
        self._close_dataset()
        self._dataset, self._keys = dataset, dataset.keys
        sampler = ExactlyOnceBatchSampler(len(dataset), batch_size=self.batch_size, world_size=trainer.world_size,
                                          rank=trainer.global_rank, seed=self.seed)
        self._resume_walker(sampler)
        extra: dict[str, Any] = {"prefetch_factor": 2, "timeout": BATCH_TIMEOUT_S} if self.num_workers > 0 else {}
        return EpochLoader(dataset, epoch_fn=self._begin_epoch, batch_sampler=sampler, collate_fn=collate,
                           num_workers=self.num_workers, pin_memory=self.pin_memory, persistent_workers=False,
                           **extra)

    def _close_dataset(self) -> None:
        close = getattr(getattr(self._dataset, "reader", None), "close", None)
        if close is not None:
            close()
        self._dataset = None

    def teardown(self, stage: str) -> None:
        self._close_dataset()  # before the source (a mount) is released

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if isinstance(batch, dict) and "keys" not in batch and self._keys:
            batch["keys"] = tuple(self._keys[i] for i in batch["index"])
        return batch
