"""``SaveLastCheckpoint``: keep one resumable ``last.ckpt`` up to date during training."""

from __future__ import annotations

import lightning

from mountctl.pytorch.training.checkpoint import CheckpointTarget

__all__ = ["SaveLastCheckpoint"]


class SaveLastCheckpoint(lightning.Callback):
    """Write ``last.ckpt`` at every epoch end and when training stops, through the Trainer's CheckpointIO."""

    def __init__(self, target: CheckpointTarget) -> None:
        self.target = target
        self.saved_step = -1
        self.saves = 0

    def _save(self, trainer: lightning.Trainer) -> None:
        if trainer.global_step != self.saved_step:
            # Full state (optimizer, loops) so that --resume continues; rank 0 writes, all ranks meet at a barrier.
            trainer.save_checkpoint(self.target.last, weights_only=False)
            self.saved_step = trainer.global_step
            self.saves += 1

    def on_train_epoch_end(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule) -> None:
        self._save(trainer)

    def on_train_end(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule) -> None:
        self._save(trainer)
