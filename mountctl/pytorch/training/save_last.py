"""``SaveLastCheckpoint``: keep one resumable ``last.ckpt`` up to date during training.

A save never leaves a half-written ``last.ckpt``: on a path the checkpoint is
written beside it and renamed over it (a rename is atomic); on S3 the upload
(one PUT, or a multipart upload completed at the end) makes the object appear
whole or not at all, and an interrupted upload leaves the previous one.
"""

from __future__ import annotations

import os
from typing import Any

import lightning

from mountctl.pytorch.training.checkpoint import CheckpointTarget
from mountctl.pytorch.training.sample_log import SampleLog

__all__ = ["SaveLastCheckpoint"]


class SaveLastCheckpoint(lightning.Callback):
    """Write ``last.ckpt`` every ``every_n_steps`` steps, at every epoch end and when training stops."""

    def __init__(self, target: CheckpointTarget, *, every_n_steps: int = 0, sample_log: SampleLog | None = None
                 ) -> None:
        self.target = target
        self.every_n_steps = every_n_steps
        self.sample_log = sample_log
        self.saved_step = -1
        self.saves = 0
        self.started_at_step = 0  # the checkpoint's step when resumed, else 0

    def on_train_start(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule) -> None:
        self.started_at_step = self.saved_step = trainer.global_step

    def _save(self, trainer: lightning.Trainer) -> None:
        if trainer.global_step == self.saved_step:
            return
        if self.sample_log is not None:
            # Every rank's lines for the steps this checkpoint covers are on disk before it exists.
            self.sample_log.flush()
            trainer.strategy.barrier("sample-log")
        # Full state (optimizer, loops, data position) so that --resume continues; rank 0 writes, all ranks meet
        # at a barrier.
        if not self.target.is_path:
            trainer.save_checkpoint(self.target.last, weights_only=False)
        else:
            partial = self.target.partial
            trainer.save_checkpoint(partial, weights_only=False)
            if trainer.is_global_zero:
                with open(partial, "rb+") as written:
                    os.fsync(written.fileno())
                os.replace(partial, self.target.last)
            trainer.strategy.barrier("last.ckpt")
        self.saved_step = trainer.global_step
        self.saves += 1

    def on_train_batch_end(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        # The epoch's last step is saved by on_train_epoch_end, as a finished epoch.  The step that reaches
        # --max-steps is saved here: Lightning counts the epoch as finished by on_train_end.
        if trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            return
        every = self.every_n_steps and trainer.global_step % self.every_n_steps == 0
        if every or trainer.global_step == trainer.max_steps:
            self._save(trainer)

    def on_train_epoch_end(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule) -> None:
        self._save(trainer)

    def on_train_end(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule) -> None:
        self._save(trainer)
