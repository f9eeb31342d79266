"""Every table a sweep run reports and every step that measures it: which cells, their ratios, where they go.

A cell kind's module owns its cells from the measurement on: the step that measures them (``Step``, run by
``sweep.py`` in ``STEPS``' order, with its count for the progress bar), the ratios to the limits of the same run
(``ratios``, filled in by ``sweep._finish``), its table (``markdown``, which ``report.sections`` writes in
``KINDS``' order), and, where the chart has a row for it, that row (``panel``, drawn by ``report.chart``).
``page`` is the BENCHMARKS.md section the table is shown under (``benchmarks_page._build``).  A new kind is its
module, an entry in ``KINDS`` and one in ``STEPS``; nothing else branches on the kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from benchmarks.harness.byte_cells import (
    add_bytes_ratios,
    add_random_ratios,
    byte_cell_count,
    byte_cells,
    bytes_markdown,
    bytes_panel,
    limits_markdown,
    random_markdown,
    raw_get_cell_count,
    raw_get_cells,
)
from benchmarks.harness.checkpoint_cells import (
    add_checkpoint_ratios,
    checkpoint_cell_count,
    checkpoint_markdown,
    checkpoint_panel,
    run_checkpoint_cells,
)
from benchmarks.harness.config import SweepConfig
from benchmarks.harness.loader_cells import (
    add_loader_ratios,
    first_sample_markdown,
    loader_markdown,
    loader_panel,
    source_cell_count,
    source_cells,
)
from benchmarks.harness.map_cells import add_map_ratios, map_cell_count, map_cells, map_markdown
from benchmarks.harness.peers import peer_cell_count, peer_cells, peer_markdown, peer_train_cell_count, peer_train_cells
from benchmarks.harness.plain_cells import add_plain_ratios, plain_cell_count, plain_cells, plain_markdown
from benchmarks.harness.side_by_side import side_by_side
from benchmarks.harness.standard_cells import (
    add_standard_ratios,
    standard_cell_count,
    standard_cells,
    standard_markdown,
)
from benchmarks.harness.sweep_run import Planned, StoreCells, SweepRun
from benchmarks.harness.tables import table
from benchmarks.harness.train_cells import (
    add_train_ratios,
    train_cell_count,
    train_cells,
    training_markdown,
    training_panel,
)

__all__ = ["Kind", "Panel", "Step", "KINDS", "STEPS", "LOADER_PAGE", "BYTES_PAGE", "CHECKPOINT_PAGE", "PEER_PAGE",
           "add_ratios"]

Cells = list[dict[str, Any]]

LOADER_PAGE = "Loader and training"
BYTES_PAGE = "Bytes against the limit"
CHECKPOINT_PAGE = "Checkpoints"
PEER_PAGE = "Peers: LitData and MosaicML Streaming"


def _always(ok: Cells) -> bool:
    return True


@dataclass(frozen=True)
class Panel:
    """One row of the chart: its height (relative to the other rows), what draws it on one axis from one store's
    measured cells, and whether the run has anything for it. ``widens``: the cell kinds whose bars set the
    figure's width; ``most_bars``: this row's labels are turned upright (else the top row's)."""

    height: float
    draw: Callable[[Any, Cells, str], None]
    shown: Callable[[Cells], bool] = _always
    widens: tuple[str, ...] = ()
    most_bars: bool = False


@dataclass(frozen=True)
class Kind:
    """One table of the report: its name in ``report.sections``, its builder (the run's cells and its stores in
    the order they ran; "" where the run has nothing for it), the BENCHMARKS.md section it goes under, and what
    fills in its cells' ratios (None: they have none, or another table's cells carry them)."""

    name: str
    markdown: Callable[[Cells, list[str]], str]
    page: str
    ratios: Callable[[Cells], None] | None = None
    panel: Panel | None = None


def _stores_markdown(cells: Cells, stores: list[str]) -> str:
    return "## Stores side by side (each ratio: to the limit in the same store and run)\n\n" + table(
        *side_by_side(cells, stores))


def _gpu_markdown(cells: Cells) -> str:
    notes = [c["status"] for c in cells if c["cell"] == "gpu"]
    return "GPU cells: " + "; ".join(notes) + "." if notes else ""


KINDS: tuple[Kind, ...] = (
    Kind("stores", _stores_markdown, LOADER_PAGE),
    Kind("limits", lambda cells, _: limits_markdown(cells), LOADER_PAGE),
    Kind("loader", lambda cells, _: loader_markdown(cells), LOADER_PAGE, add_loader_ratios,
         Panel(2, loader_panel, widens=("loader",))),
    Kind("first-sample", lambda cells, _: first_sample_markdown(cells), LOADER_PAGE),
    Kind("training", lambda cells, _: training_markdown(cells), LOADER_PAGE, add_train_ratios,
         Panel(1, training_panel)),
    Kind("bytes", lambda cells, _: bytes_markdown(cells), BYTES_PAGE, add_bytes_ratios,
         Panel(2, bytes_panel, lambda ok: any(c["cell"] == "bytes" for c in ok), widens=("bytes",), most_bars=True)),
    Kind("random", lambda cells, _: random_markdown(cells), BYTES_PAGE, add_random_ratios),
    Kind("plain", lambda cells, _: plain_markdown(cells), BYTES_PAGE, add_plain_ratios),
    Kind("map", lambda cells, _: map_markdown(cells, table), LOADER_PAGE, add_map_ratios),
    Kind("standard", lambda cells, _: standard_markdown(cells, table), LOADER_PAGE, add_standard_ratios),
    Kind("peers", lambda cells, _: peer_markdown(cells, table), PEER_PAGE),
    Kind("checkpoints", lambda cells, _: checkpoint_markdown(cells), CHECKPOINT_PAGE, add_checkpoint_ratios,
         Panel(1.5, checkpoint_panel, lambda ok: any(c["cell"] == "checkpoint" for c in ok))),
    Kind("gpu", lambda cells, _: _gpu_markdown(cells), LOADER_PAGE),
)


@dataclass(frozen=True)
class Step:
    """One measurement of a sweep in one store, in its kind's module: ``run`` measures and records its cells through
    the ``SweepRun``, once per dataset (``scope`` "dataset", handed its ``DatasetCells``) or once per store after
    every dataset's ("store", handed the ``StoreCells``); ``count`` is how many progress-bar rows that is (per
    dataset for a dataset step), and a step whose count is 0 in a store's config does not run there."""

    name: str
    scope: Literal["dataset", "store"]
    run: Callable[[SweepRun, Any], None]
    count: Callable[[SweepConfig, Planned], int]


def _standard_count(config: SweepConfig, planned: Planned) -> int:
    """The ImageFolder cells run where the store has a dataset and loader cells (not with --bytes-only)."""
    wanted = planned.datasets and config.standard_cells and config.loader_cells
    return standard_cell_count(config) if wanted else 0


def _standard_cells(run: SweepRun, store: StoreCells) -> None:
    standard_cells(run, store.scratch)


# The order the sweep measures in: per dataset its limit, sources, bytes, plain reader and peers; then the store's map-style,
# ImageFolder, training and checkpoint cells.
STEPS: tuple[Step, ...] = (
    Step("raw-get", "dataset", raw_get_cells, raw_get_cell_count),
    Step("sources", "dataset", source_cells, source_cell_count),
    Step("bytes", "dataset", byte_cells, byte_cell_count),
    Step("plain", "dataset", plain_cells, plain_cell_count),
    Step("peers", "dataset", peer_cells, peer_cell_count),
    Step("map", "store", map_cells, map_cell_count),
    Step("standard", "store", _standard_cells, _standard_count),
    Step("training", "store", train_cells, train_cell_count),
    Step("peer-training", "store", peer_train_cells, peer_train_cell_count),
    Step("checkpoints", "store", run_checkpoint_cells, checkpoint_cell_count),
)


def add_ratios(cells: Cells) -> None:
    """Every cell's ratios to the limits measured in the same run and store (each kind fills in its own)."""
    for kind in KINDS:
        if kind.ratios is not None:
            kind.ratios(cells)
