"""``SampleLog``: one line per trained sample (``key epoch global_step rank``), an audit of exactly-once.

``global_step`` is the 0-based optimizer step that trained the sample.  Lines
are buffered and made durable (``flush``) before every checkpoint, so the
lines with ``global_step`` below a checkpoint's step are on disk before the
checkpoint is: after ``--resume``, those lines plus the resumed run's lines
are each epoch's samples exactly once.
"""

from __future__ import annotations

import os
from typing import Any, TextIO

import lightning

__all__ = ["SampleLog"]


class SampleLog(lightning.Callback):
    def __init__(self, path: str) -> None:
        self.path = path
        self._file: TextIO | None = None

    def setup(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule, stage: str) -> None:
        # One file per rank: FILE, or FILE.rank<N> when there is more than one rank.
        # Its directory was checked before training (trainer.check_writable_file); nothing is created here but the file.
        path = self.path if trainer.world_size == 1 else f"{self.path}.rank{trainer.global_rank}"
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115  # closed in teardown

    def on_train_batch_end(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        assert self._file is not None
        step, rank, epoch = trainer.global_step - 1, trainer.global_rank, int(batch["epoch"])
        self._file.write("".join(f"{key} {epoch} {step} {rank}\n" for key in batch["keys"]))

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    def teardown(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule, stage: str) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
