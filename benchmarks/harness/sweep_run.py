"""What a sweep hands each cell kind's measurement: the run that records its cells, and what it measures.

``sweep.py`` loops over ``kinds.STEPS``; each step, in its kind's module, measures through a ``SweepRun`` (which
records every cell, a failure as a failed cell, and moves the progress bar) and is given the dataset
(``DatasetCells``) or the store's whole set of data (``StoreCells``) it runs over.  ``Planned`` is what a step's
count is taken from before anything runs, so that the progress bar knows its total.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.harness.config import SweepConfig
from benchmarks.harness.limits import LocalDiskSource
from mountctl import MountctlError, S3Settings
from mountctl.pytorch.data.index.manifest import Manifest

__all__ = ["SweepRun", "DatasetCells", "TrainCells", "StoreCells", "Planned", "CELL_ERRORS", "EPOCHS"]

CELL_ERRORS = (MountctlError, OSError, RuntimeError, ValueError)  # a failed cell is recorded; the run goes on
EPOCHS = (1, 2)  # every cell that reads the dataset reads it twice: epoch 2 is where a cache shows

Cell = dict[str, Any]


class SweepRun:
    """One store's turn of a sweep: its config and S3 settings, and the cells recorded so far (of every store)."""

    def __init__(self, config: SweepConfig, settings: S3Settings, bar: Any) -> None:
        self.config = config
        self.origin = settings  # the endpoint itself: datasets are made (and copied to disk) through it
        self.settings = settings  # the store being measured (a far-store proxy's endpoint for "far")
        self.store = "local"
        self.bar = bar
        self.cells: list[Cell] = []

    def cell(self, base: Cell, measure: Callable[[], Cell]) -> Cell:
        self.bar.set_postfix_str(f"{base['cell']} {base.get('source', '')} {base.get('dataset', '')} "
                                 f"w={base.get('num_workers', '-')}", refresh=True)
        try:
            row = {**base, "status": "ok", **measure()}
        except CELL_ERRORS as exc:
            row = {**base, "status": f"failed: {exc}"}
        self.cells.append(row)
        self.bar.update()
        return row

    def epochs(self, base: Cell, measure: Callable[[], list[Cell]]) -> None:
        """One measurement that yields a row per epoch (a failure fails both epochs' rows)."""
        self.bar.set_postfix_str(f"{base['cell']} {base.get('source', '')} {base.get('dataset', '')}", refresh=True)
        try:
            rows = [{**base, "status": "ok", **row} for row in measure()]
        except CELL_ERRORS as exc:
            rows = [{**base, "epoch": epoch, "status": f"failed: {exc}"} for epoch in EPOCHS]
        self.cells.extend(rows)
        self.bar.update(len(EPOCHS))


@dataclass(frozen=True)
class DatasetCells:
    """One shard dataset as every step that runs per dataset reads it, in one store."""

    label: str
    uri: str
    manifest: Manifest
    base: Cell  # the fields every cell of this dataset starts with (dataset, its size and shards)
    local: LocalDiskSource  # its shards copied to local disk: the local-disk limit
    peers: dict[str, Cell] = field(default_factory=dict)  # each peer's peer.json for its copy (peers.py)


@dataclass(frozen=True)
class TrainCells:
    """The training dataset, and each peer's copy of it (none in a --quick run)."""

    uri: str
    manifest: Manifest
    peers: dict[str, Cell] = field(default_factory=dict)


@dataclass(frozen=True)
class StoreCells:
    """What the steps that run once per store (after every dataset's) are given."""

    datasets: list[DatasetCells]
    train: TrainCells | None  # None where this store trains nothing
    gpu_missing: bool  # --accelerator gpu on a machine with none: the training cells say so, unmeasured
    scratch: str  # the run's scratch directory (local copies, mount points)


@dataclass(frozen=True)
class Planned:
    """What one store will measure, as a step counts its cells before the run: datasets, and whether it trains
    (``train``) and the peers train too (``peer_train``)."""

    datasets: int
    train: bool
    peer_train: bool
