"""The ``"cell": "ceiling"`` and ``"cell": "train"`` cells of a sweep: ResNet-50 through ``trainer.train`` per
source, beside the same model and Trainer on batches already on the device (the compute limit).

The training dataset is trained on once per source of the plan (``loader_cells.source_plan``), two epochs each,
with the source's mount held open here too so that its daemon's CPU and memory can be watched
(``cells.train_cell``); the ceiling (``cells.ceiling_cell``) is one row for both epochs.  Each training cell is
then put against the ceiling of its store.
"""

from __future__ import annotations

from typing import Any

from benchmarks.harness.bars import epoch_bars
from benchmarks.harness.cells import ceiling_cell, find_cell, ratio, route_options, train_cell
from benchmarks.harness.config import SweepConfig
from benchmarks.harness.loader_cells import source_plan
from benchmarks.harness.sweep_run import EPOCHS, Planned, StoreCells, SweepRun
from benchmarks.harness.tables import at, by_epoch, of_kind, pair, table
from mountctl.pytorch.data.sources import open_source

__all__ = ["train_cells", "train_cell_count", "add_train_ratios", "training_markdown", "training_panel"]

Cells = list[dict[str, Any]]


def train_cell_count(config: SweepConfig, planned: Planned) -> int:
    """The ceiling and each source's two epochs, where the store trains."""
    return 1 + len(source_plan(config)) * len(EPOCHS) if planned.train else 0


def train_cells(run: SweepRun, store: StoreCells) -> None:
    """The ceiling, then each source's training cells (on a machine missing the GPU asked for: a note of each)."""
    config, settings = run.config, run.settings
    if store.train is None:
        return
    if store.gpu_missing:
        for cell in ("ceiling", "train"):
            run.cells.append({"cell": cell, "status": "not run: --accelerator gpu but no CUDA device"})
        run.bar.update(1 + len(source_plan(config)) * len(EPOCHS))
        return
    uri, manifest = store.train.uri, store.train.manifest
    base = {"dataset": config.train_dataset.label, "num_images": manifest.num_images,
            "num_workers": config.train_workers, "batch_size": config.train_batch_size}
    run.cell({"cell": "ceiling", "source": "synthetic on device", **base},
             lambda: ceiling_cell(manifest, batch_size=config.train_batch_size, steps=config.train_steps,
                                  warmup_steps=config.train_warmup_steps, accelerator=config.accelerator,
                                  precision=config.train_precision))
    for label, kind, backend in source_plan(config):
        def measure(kind: str = kind, backend: str = backend) -> list[dict[str, Any]]:
            # Hold the (shared) mount here too, so that its daemon's CPU and memory can be watched.
            with open_source(kind, uri, settings, **route_options(uri, settings, backend, whole_files=True)) as source:
                return train_cell(uri, settings, kind=kind, backend=backend, batch_size=config.train_batch_size,
                                  num_workers=config.train_workers, warmup_steps=config.train_warmup_steps,
                                  accelerator=config.accelerator, precision=config.train_precision,
                                  program_pid=source.describe().get("mount_pid"), seed=config.seed,
                                  epochs=len(EPOCHS), decode=config.decode)

        run.epochs({"cell": "train", "source": label, "kind": kind, "backend": backend, **base}, measure)


def add_train_ratios(cells: Cells) -> None:
    """Each training cell x the ceiling of its store."""
    for row in cells:
        if row["cell"] == "train" and row["status"] == "ok":
            ceiling = find_cell(cells, "ceiling", store=row.get("store"))  # synthetic batches already on the device
            row["ratio_to_ceiling"] = ratio(row, ceiling, "epoch_samples_per_s")
            row["ratio_to_ceiling_after_warmup"] = ratio(row, ceiling, "samples_per_s")


def training_markdown(cells: Cells) -> str:
    """The ceiling (one row, for both epochs), then each route's training cells, epochs side by side."""
    training = [((c.get("store"), "synthetic on device", c.get("device"), c.get("precision"), "-"), {1: c, 2: c})
                for c in of_kind(cells, "ceiling")]
    training += by_epoch(of_kind(cells, "train"), ("store", "source", "device", "precision", "decode"))
    return "## Training: ResNet-50 (epochs 1 and 2 side by side; whole epoch first)\n\n" + table(
        ["store", "source", "device", "precision", "decode", "first batch e1 s", "first batch e2 s", "images/s e1",
         "images/s e2", "x ceiling e1", "x ceiling e2", "after warm-up images/s e1", "after warm-up images/s e2",
         "process CPU %", "program CPU %", "program peak RSS MB"],
        [[*key, *pair(e, "first_batch_s"), *pair(e, "epoch_samples_per_s"), *pair(e, "ratio_to_ceiling"),
          *pair(e, "samples_per_s"), at(e, 1, "loader_cpu_pct"), at(e, 1, "program_cpu_pct"),
          at(e, 1, "program_peak_rss_mb")] for key, e in training])


def training_panel(axis: Any, cells: Cells, store: str) -> None:
    """The chart's training row: the ceiling, then each route's training cells."""
    epoch_bars(axis, of_kind(cells, "ceiling") + of_kind(cells, "train"), lambda c: c.get("source", "ceiling"),
               "epoch_samples_per_s", "images/s over the whole epoch",
               f"{store}: ResNet-50 training, whole epoch (synthetic on device: the ceiling)")
