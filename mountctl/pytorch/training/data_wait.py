"""``DataWaitMonitor``: the share of each training step spent waiting for the next batch.

A step runs from one ``on_train_batch_end`` to the next: first the loop waits for the
DataLoader to hand over a batch (until ``on_train_batch_start``), then the model trains
on it.  ``data_wait_fraction`` is the waits' sum over the steps' sum, per epoch: near 0
the loader keeps up and the model is the limit; near 1 the model starves.  (On a GPU
the clock is the host's: a step that only queues kernels looks short, and the host
waits in a later step instead, so the fraction there is a lower bound.)  The first
``warmup_batches`` steps of an epoch are left out, as they are of images/s: they hold
the DataLoader workers' start-up, which would dominate a short epoch.

Above ``threshold`` (0.2 by default: a fifth of the time idle) rank 0 prints one line
naming the source kind and what to try.  With ``metrics_port`` rank 0 also serves the
figures to Prometheus.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

import lightning
import torch

from mountctl.pytorch.training.wait_share import DEFAULT_THRESHOLD, advice, data_wait_fraction

__all__ = ["DataWaitMonitor", "data_wait_fraction", "DEFAULT_THRESHOLD", "advice"]


class DataWaitMonitor(lightning.Callback):
    def __init__(self, source_kind: str, *, threshold: float = DEFAULT_THRESHOLD, warmup_batches: int = 0,
                 metrics_port: int | None = None, out: TextIO | None = None) -> None:
        self.source_kind = source_kind
        self.warmup_batches = warmup_batches
        self.threshold = threshold
        self.metrics_port = metrics_port
        self.epochs: list[dict[str, Any]] = []
        self._out = out
        self._waits: list[float] = []
        self._steps: list[float] = []
        self._last_end = 0.0
        self._batch_start = 0.0
        self._gauges: dict[str, Any] = {}
        self._seen = 0
        self._server: Any = None

    # -- timing -------------------------------------------------------------------------

    def on_train_start(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule) -> None:
        if self.metrics_port is not None and trainer.is_global_zero:
            self._serve_metrics(self.metrics_port)
        self.on_train_epoch_start(trainer, pl_module)  # an epoch resumed mid-way gets no on_train_epoch_start

    def on_train_epoch_start(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule) -> None:
        self._waits, self._steps = [], []
        self._seen = 0
        self._last_end = time.perf_counter()

    def on_train_batch_start(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._batch_start = time.perf_counter()

    def on_train_batch_end(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        now = time.perf_counter()
        wait, step = max(0.0, self._batch_start - self._last_end), max(0.0, now - self._last_end)
        self._last_end = now
        self._seen += 1
        if self._seen <= self.warmup_batches and trainer.num_training_batches > self.warmup_batches:
            return  # worker start-up: left out unless the epoch has nothing else
        self._waits.append(wait)
        self._steps.append(step)
        if "wait_s" in self._gauges:
            self._gauges["wait_s"].inc(self._waits[-1])
            self._gauges["step_s"].inc(self._steps[-1])

    def on_train_epoch_end(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule) -> None:
        local = torch.tensor([sum(self._waits), sum(self._steps)], dtype=torch.float64, device=pl_module.device)
        # The slowest-waiting rank is the one to fix: report the largest fraction over ranks.
        per_rank = trainer.strategy.all_gather(local).reshape(-1, 2).tolist()
        fractions = [data_wait_fraction([wait], [step]) for wait, step in per_rank]
        known = [f for f in fractions if f is not None]
        fraction = round(max(known), 4) if known else None
        self.epochs.append({"epoch": trainer.current_epoch, "data_wait_fraction": fraction,
                            "wait_s": round(sum(self._waits), 3), "step_s": round(sum(self._steps), 3),
                            "steps": len(self._steps)})
        if fraction is None:
            return
        pl_module.log("data_wait_fraction", fraction, on_step=False, on_epoch=True, rank_zero_only=True)
        if "fraction" in self._gauges:
            self._gauges["fraction"].set(fraction)
        if fraction > self.threshold and trainer.is_global_zero:
            print(advice(self.source_kind, fraction, self.threshold), file=self._out or sys.stderr, flush=True)

    # -- reporting ----------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """For the run's JSON summary: the last epoch's fraction (the steady state), and every epoch's."""
        last = next((e["data_wait_fraction"] for e in reversed(self.epochs) if e["data_wait_fraction"] is not None),
                    None)
        return {"data_wait_fraction": last, "data_wait_threshold": self.threshold, "data_wait": self.epochs}

    def _serve_metrics(self, port: int) -> None:
        """rank 0's /metrics: the training process's own registry (the DataLoader workers never touch it)."""
        from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

        registry = CollectorRegistry()
        self._gauges = {
            "fraction": Gauge("mountctl_training_data_wait_fraction",
                              "share of the last epoch's step time spent waiting for the next batch",
                              ["source_kind"], registry=registry).labels(self.source_kind),
            "wait_s": Counter("mountctl_training_data_wait_seconds",
                              "time spent waiting for the next batch", ["source_kind"],
                              registry=registry).labels(self.source_kind),
            "step_s": Counter("mountctl_training_step_seconds", "time of whole training steps, waits included",
                              ["source_kind"], registry=registry).labels(self.source_kind),
        }
        self._server, _ = start_http_server(port, addr="127.0.0.1", registry=registry)

    def teardown(self, trainer: lightning.Trainer, pl_module: lightning.LightningModule, stage: str) -> None:
        server, self._server = self._server, None
        if server is not None:  # the port is free again when training ends, even on an error
            server.shutdown()
            server.server_close()
