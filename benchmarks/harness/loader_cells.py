"""The ``"cell": "first-sample"`` and ``"cell": "loader"`` cells of a sweep: each source opened once, read through
``ShardDataset`` (the training data path, no model) at every worker count, epochs 1 and 2.

Per dataset, every source of the plan (``source_plan``) and the local-disk copy is opened once (a mount's
start-up is its own cost, ``open_s``) and its first decoded sample timed (``cells.first_sample_cell``); then the
sources take turns at each worker count (``cells.loader_cell``).  Afterwards each loader cell is put against
local disk and the raw GET limit of the same dataset, worker count, epoch and store.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator
from typing import Any

from benchmarks.harness.bars import epoch_bars
from benchmarks.harness.cells import (
    INDEX_ROUTE,
    LOCAL,
    READ_AHEAD_ROUTE,
    find_cell,
    first_sample_cell,
    loader_cell,
    ratio,
    route_options,
)
from benchmarks.harness.config import SweepConfig
from benchmarks.harness.limits import LocalDiskSource
from benchmarks.harness.monitor import ResourceMonitor
from benchmarks.harness.sweep_run import CELL_ERRORS, EPOCHS, DatasetCells, Planned, SweepRun
from benchmarks.harness.tables import at, by_epoch, of_kind, pair, table
from mountctl import S3Settings, installed_backends
from mountctl.pytorch.data.sources import open_source

__all__ = ["source_plan", "source_cells", "source_cell_count", "add_loader_ratios", "loader_markdown",
           "first_sample_markdown", "loader_panel"]

Cells = list[dict[str, Any]]


def source_plan(config: SweepConfig) -> list[tuple[str, str, str]]:
    """(label, kind, backend) of every S3 source: mountpoint once per installed mount program, and mount-s3
    twice more: mounted from the index (``mount-s3+index``) and with the plan's read-ahead across shards
    (``mount-s3-read-ahead``), so that each lever is measured beside the default in the same run."""
    backends = config.backends or installed_backends()
    plan = []
    for kind in config.loader_kinds:
        if kind == "mountpoint":
            plan += [(f"mountpoint/{b}", kind, b) for b in backends]
            if "mount-s3" in backends:
                plan += [(f"mountpoint/mount-s3{variant}", kind, f"mount-s3{variant}")
                         for variant in (INDEX_ROUTE, READ_AHEAD_ROUTE)]
        else:
            plan.append((kind, kind, "auto"))
    return plan


def source_cell_count(config: SweepConfig, planned: Planned) -> int:
    """Per dataset: each source's first sample and its loader epochs (none with ``--bytes-only``)."""
    if not config.loader_cells:
        return 0
    return (len(source_plan(config)) + 1) * (1 + len(config.num_workers) * len(EPOCHS))


@contextlib.contextmanager
def _opened(kind: str, uri: str, settings: S3Settings, backend: str, local: LocalDiskSource
            ) -> Iterator[tuple[Any, float]]:
    """(source, seconds it took to open): for a mount, its start-up time."""
    if kind == LOCAL:
        yield local, 0.0
        return
    started = time.perf_counter()
    with open_source(kind, uri, settings, **route_options(uri, settings, backend, whole_files=True)) as source:
        yield source, time.perf_counter() - started


def source_cells(run: SweepRun, dataset: DatasetCells) -> None:
    """Every source opened and its first sample timed, then every loader cell, sources taking turns."""
    config, settings, manifest = run.config, run.settings, dataset.manifest
    opened: list[tuple[dict[str, Any], Any, int | None]] = []
    with contextlib.ExitStack() as stack:
        for label, kind, backend in [(LOCAL, LOCAL, "-"), *source_plan(config)]:
            head = {"source": label, "kind": kind, "backend": backend, **dataset.base}
            try:
                source, open_s = stack.enter_context(_opened(kind, dataset.uri, settings, backend, dataset.local))
            except CELL_ERRORS as exc:  # the source did not open (e.g. the mount failed): its cells say so
                _source_failed(run, head, f"failed: {exc}")
                continue
            daemon = source.describe().get("mount_pid")
            shared = next((h["source"] for h, _, pid in opened if daemon is not None and pid == daemon), None)
            if shared is not None:  # each route is measured cold: one that joined another's mount would not be
                _source_failed(run, head, f"failed: it shares {shared}'s mount (pid {daemon}), whose cache that "
                                          f"route fills: give it a request of its own (cells.route_options)")
                continue

            def first_sample(s: Any = source, t: float = open_s, pid: int | None = daemon) -> dict[str, Any]:
                with ResourceMonitor(pid) as monitor:
                    first = first_sample_cell(manifest, s)
                return {"open_s": round(t, 3), **first, **monitor.usage.to_dict()}

            first = run.cell({"cell": "first-sample", **head}, first_sample)
            if first["status"] == "ok" and kind == "mountpoint":
                first["mount_startup_s"] = first["open_s"]
            opened.append((head, source, daemon))
        # Sources take turns at each worker count, so a change in the machine's load while the
        # sweep runs spreads over all of them instead of landing on one.
        # Epoch 2 right after epoch 1 on the same source: what a node-local cache gives back.
        for workers in config.num_workers:
            for head, source, daemon in opened:
                for epoch in EPOCHS:
                    run.cell({"cell": "loader", "num_workers": workers, "epoch": epoch, **head},
                             functools.partial(loader_cell, manifest, source, num_workers=workers,
                                               batch_size=config.batch_size, warmup_batches=config.warmup_batches,
                                               shuffle_buffer=config.shuffle_buffer, program_pid=daemon,
                                               seed=config.seed, epoch=epoch - 1))


def _source_failed(run: SweepRun, head: dict[str, Any], status: str) -> None:
    """A source that cannot be measured: its first-sample cell and every loader cell say why."""
    run.cells.append({"cell": "first-sample", **head, "status": status})
    run.cells += [{"cell": "loader", "num_workers": w, "epoch": e, **head, "status": status}
                  for w in run.config.num_workers for e in EPOCHS]
    run.bar.update(1 + len(run.config.num_workers) * len(EPOCHS))


def add_loader_ratios(cells: Cells) -> None:
    """Each loader cell x local disk (same dataset, worker count, epoch, store) and x the raw GET limit."""
    for row in cells:
        if row["cell"] != "loader" or row["status"] != "ok":
            continue
        store = row.get("store")
        local = find_cell(cells, "loader", source=LOCAL, dataset=row["dataset"], num_workers=row["num_workers"],
                          epoch=row["epoch"], store=store)
        get = find_cell(cells, "raw-get", dataset=row["dataset"], store=store)
        # Whole epoch first: the ratios that lead; after warm-up beside them.
        row["ratio_to_local_disk"] = ratio(row, local, "epoch_samples_per_s")
        row["ratio_to_local_disk_after_warmup"] = ratio(row, local, "samples_per_s")
        row["ratio_to_raw_get"] = round(row["epoch_mb_per_s"] / get["mb_per_s"], 3) if get else None


def loader_markdown(cells: Cells) -> str:
    """The loader cells, epochs 1 and 2 side by side per store, dataset, worker count and source."""
    return ("## Loader: read + decode, no model (epochs 1 and 2 side by side; whole epoch first)\n\n" + table(
        ["store", "dataset", "workers", "source", "first batch e1 s", "first batch e2 s", "samples/s e1",
         "samples/s e2", "MB/s e1", "MB/s e2", "x local disk e1", "x local disk e2", "x raw GET e1", "x raw GET e2",
         "after warm-up samples/s e1", "after warm-up samples/s e2", "loader CPU % e1", "program CPU % e1",
         "program CPU % e2", "loader peak RSS MB", "program peak RSS MB", "page cache MB e1", "page cache MB e2"],
        [[*key, *pair(e, "first_batch_s"), *pair(e, "epoch_samples_per_s"), *pair(e, "epoch_mb_per_s"),
          *pair(e, "ratio_to_local_disk"), *pair(e, "ratio_to_raw_get"), *pair(e, "samples_per_s"),
          at(e, 1, "loader_cpu_pct"), *pair(e, "program_cpu_pct"), at(e, 1, "loader_peak_rss_mb"),
          at(e, 1, "program_peak_rss_mb"), *pair(e, "page_cache_growth_mb")]
         for key, e in by_epoch(of_kind(cells, "loader"), ("store", "dataset", "num_workers", "source"))]))


def first_sample_markdown(cells: Cells) -> str:
    """Each source's open (a mount's start-up) and first sample."""
    return "## Opening a source and the first sample\n\n" + table(
        ["store", "dataset", "source", "open / mount start-up s", "first sample s", "program peak RSS MB"],
        [[c.get("store"), c["dataset"], c["source"], c.get("open_s"), c.get("first_sample_s"),
          c.get("program_peak_rss_mb")] if c["status"] == "ok"
         else [c.get("store"), c["dataset"], c["source"], c["status"], "", ""] for c in of_kind(cells, "first-sample")])


def loader_panel(axis: Any, cells: Cells, store: str) -> None:
    """The chart's loader row: one store's measured loader cells, both epochs per source and worker count."""
    epoch_bars(axis, of_kind(cells, "loader"), lambda c: f"{c['source']}\nw={c['num_workers']}",
               "epoch_samples_per_s", "samples/s over the whole epoch",
               f"{store}: loader per source, whole epoch (local-disk is the limit)")
