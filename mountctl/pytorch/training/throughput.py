"""``ThroughputMonitor``: images/s per epoch and overall, plus exactly-once accounting.

Per epoch, whole epoch first: the time to the first batch (from the epoch's
start to its first batch in hand) and images/s over the whole epoch, which is
what a user waits for.  Then the rate after warm-up, which leaves the first
``warmup_batches`` batches (worker start-up, first connections, allocator
warm-up) out; the overall rate is every image over the whole of ``fit``.  Under DDP the rate is all ranks'
images over the slowest rank's time, and the sample counts are summed over
ranks, so ``distinct_images == images == dataset size`` proves each sample
was seen exactly once.
"""

from __future__ import annotations

import time
from typing import Any

import lightning
import torch

from mountctl.pytorch.training.rates import rate_after_warmup

__all__ = ["ThroughputMonitor"]


class ThroughputMonitor(lightning.Callback):
    def __init__(self, num_samples: int, *, warmup_batches: int = 5) -> None:
        self.num_samples = num_samples
        self.warmup_batches = warmup_batches
        self.epochs: list[dict[str, Any]] = []
        self.overall: dict[str, Any] = {}
        self._marks: list[float] = []
        self._sizes: list[int] = []
        self._indices: list[int] = []
        self._data_epochs: set[int] = set()
        self._first_batch: float | None = None  # when the epoch's first batch was in hand
        self._started = 0.0

    @staticmethod
    def _now(pl_module: lightning.LightningModule) -> float:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)  # kernels are asynchronous: wait before reading the clock
        return time.perf_counter()

    def on_train_start(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule) -> None:
        self._started = self._now(pl_module)
        self.on_train_epoch_start(trainer, pl_module)  # an epoch resumed mid-way gets no on_train_epoch_start

    def on_train_epoch_start(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule) -> None:
        self._marks = [self._now(pl_module)]
        self._sizes = []
        self._indices = []
        self._data_epochs = set()
        self._first_batch = None

    def on_train_batch_start(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self._first_batch is None:
            self._first_batch = time.perf_counter()

    def on_train_batch_end(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        self._marks.append(time.perf_counter())
        self._sizes.append(len(batch["index"]))
        self._indices.extend(batch["index"])
        self._data_epochs.add(int(batch["epoch"]))
        rate = rate_after_warmup(self._marks, self._sizes, self.warmup_batches).images_per_s
        if rate is not None:
            pl_module.log("img/s", rate * trainer.world_size, prog_bar=True)  # also to --log-dir's metrics.csv

    def on_train_epoch_end(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule) -> None:
        self._marks[-1] = self._now(pl_module)
        rate = rate_after_warmup(self._marks, self._sizes, self.warmup_batches)
        first = (self._first_batch or self._marks[-1]) - self._marks[0]
        local = torch.tensor([rate.images, rate.seconds, sum(self._sizes), self._marks[-1] - self._marks[0], first],
                             dtype=torch.float64, device=pl_module.device)
        per_rank = trainer.strategy.all_gather(local).reshape(-1, 5)
        counts = torch.bincount(torch.tensor(self._indices, dtype=torch.long), minlength=self.num_samples)
        counts = trainer.strategy.reduce(counts.to(pl_module.device), reduce_op="sum")
        seconds, whole = float(per_rank[:, 1].max()), float(per_rank[:, 3].max())
        images = int(per_rank[:, 2].sum())
        self.epochs.append({
            "epoch": trainer.current_epoch,
            "batches": len(self._sizes),
            "warmup_batches": rate.warmup_batches,
            "images": images,
            # Whole epoch first: the slowest rank's first batch and epoch, all ranks' images.
            "first_batch_s": round(float(per_rank[:, 4].max()), 3),
            "seconds": round(whole, 3),
            "epoch_images_per_s": round(images / whole, 2) if whole > 0 else None,
            "images_per_s": round(float(per_rank[:, 0].sum()) / seconds, 2) if seconds > 0 else None,  # after warm-up
            "distinct_images": int((counts > 0).sum()),
            "repeated_images": int((counts > 1).sum()),
            "data_epochs": sorted(self._data_epochs),  # the plan(s) the batches came from; [epoch] when right
        })

    def on_train_end(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule) -> None:
        seconds = self._now(pl_module) - self._started
        images = sum(epoch["images"] for epoch in self.epochs)
        self.overall = {"images": images, "seconds": round(seconds, 3),
                        "images_per_s": round(images / seconds, 2) if seconds > 0 else None}
