"""The raw GET limit, bytes-path and random-read cells of a sweep: how each dataset's are measured, their ratios
and their tables.

Per dataset: the raw GET limit first (``limits.raw_get``), then, with bytes cells on, every route of
``bytes_path.bytes_routes`` opened afresh for each measurement: the tar walk at each reader count (epochs 1 and 2,
``bytes_path.bytes_cell``) and the random reads (``bytes_path.random_cell``).  Afterwards each bytes cell is put
against the raw GET limit and each random-read cell against the s3io kind's range reads, same dataset and store.
"""

from __future__ import annotations

from typing import Any

from benchmarks.harness.bars import epoch_bars
from benchmarks.harness.bytes_path import Route, bytes_cell, bytes_routes, cache_note, opened_route, random_cell
from benchmarks.harness.cells import find_cell
from benchmarks.harness.config import SweepConfig
from benchmarks.harness.limits import raw_get
from benchmarks.harness.sweep_run import EPOCHS, DatasetCells, Planned, SweepRun
from benchmarks.harness.tables import by_epoch, of_kind, pair, peak, table
from mountctl import installed_backends
from mountctl.pytorch.data.synthetic import parse_size

__all__ = ["raw_get_cells", "raw_get_cell_count", "byte_cells", "byte_cell_count", "add_bytes_ratios",
           "add_random_ratios", "limits_markdown", "bytes_markdown", "random_markdown", "bytes_panel"]


def raw_get_cell_count(config: SweepConfig, planned: Planned) -> int:
    return 1  # per dataset: every cell of it is compared with this limit


def raw_get_cells(run: SweepRun, dataset: DatasetCells) -> None:
    """The dataset's raw GET limit: every shard byte once by parallel ranged GETs, in the store measured."""
    config, manifest = run.config, dataset.manifest

    def get() -> dict[str, Any]:
        got = raw_get(run.settings, dataset.uri, manifest, threads=config.get_threads,
                      part_size=parse_size(config.get_part_size))
        mb_per_s = got["bytes"] / got["seconds"] / 1e6
        return {"mb_per_s": round(mb_per_s, 2), "seconds": round(got["seconds"], 3), "requests": got["requests"],
                "samples_per_s": round(manifest.num_images / got["seconds"], 2), "threads": config.get_threads}

    run.cell({"cell": "raw-get", "source": "boto3 GET", **dataset.base}, get)


def _routes(config: SweepConfig) -> list[Route]:
    return bytes_routes(config.loader_kinds, config.backends or installed_backends())


def byte_cell_count(config: SweepConfig, planned: Planned) -> int:
    """Per dataset: each route's bytes epochs at every reader count and its random-read cell (none with --no-bytes)."""
    return len(_routes(config)) * (len(config.bytes_readers) * len(EPOCHS) + 1) if config.bytes_cells else 0


def byte_cells(run: SweepRun, dataset: DatasetCells) -> None:
    """Bytes path (epochs 1 and 2 per reader count) and random reads, each route opened afresh.

    A fresh mount per reader count and per random-read cell, so epoch 1 starts without
    what an earlier cell left in the mount program's memory.
    """
    config, settings, manifest, uri, local = run.config, run.settings, dataset.manifest, dataset.uri, dataset.local
    routes = _routes(config)
    for readers in config.bytes_readers:
        for route in routes:
            def measure(route: Route = route, readers: int = readers) -> list[dict[str, Any]]:
                with opened_route(route, uri, settings, local, whole_files=True) as source:
                    daemon = source.describe().get("mount_pid")
                    return [{"epoch": epoch, **bytes_cell(manifest, source, readers=readers, program_pid=daemon)}
                            for epoch in EPOCHS]

            run.epochs({"cell": "bytes", "readers": readers, **route.head(), **cache_note(route), **dataset.base},
                       measure)
    for route in routes:
        def measure_random(route: Route = route) -> dict[str, Any]:
            with opened_route(route, uri, settings, local) as source:
                return random_cell(manifest, source, reads=config.random_reads, seed=config.seed,
                                   program_pid=source.describe().get("mount_pid"))

        run.cell({"cell": "random", **route.head(), **cache_note(route), **dataset.base}, measure_random)


def add_bytes_ratios(cells: list[dict[str, Any]]) -> None:
    """Each bytes cell x the raw GET limit of the same dataset and store."""
    for row in cells:
        if row["cell"] == "bytes" and row["status"] == "ok":
            get = find_cell(cells, "raw-get", dataset=row["dataset"], store=row.get("store"))
            row["ratio_to_raw_get"] = round(row["mb_per_s"] / get["mb_per_s"], 3) if get else None


def add_random_ratios(cells: list[dict[str, Any]]) -> None:
    """Each random-read cell x the s3io kind's range reads (its map-style reader) on the same dataset and store."""
    for row in cells:
        if row["cell"] == "random" and row["status"] == "ok":
            ranged = find_cell(cells, "random", kind="s3io", dataset=row["dataset"], store=row.get("store"))
            row["ratio_to_s3io_range"] = round(row["mb_per_s"] / ranged["mb_per_s"], 3) if ranged else None


def limits_markdown(cells: list[dict[str, Any]]) -> str:
    """The raw GET limit per store and dataset."""
    return "## Limits (same run)\n\n" + table(
        ["store", "dataset", "shards", "raw GET MB/s", "raw GET samples/s", "GET threads"],
        [[c.get("store"), c["dataset"], c.get("shards"), c.get("mb_per_s"), c.get("samples_per_s"), c.get("threads")]
         if c["status"] == "ok" else [c.get("store"), c["dataset"], c.get("shards"), c["status"], "", ""]
         for c in of_kind(cells, "raw-get")])


def bytes_markdown(cells: list[dict[str, Any]]) -> str:
    """The bytes-path cells, epochs 1 and 2 side by side per route and reader count."""
    return "## Bytes path: tar walk, no decode (epochs 1 and 2 side by side)\n\n" + table(
        ["store", "dataset", "source", "variant", "readers", "MB/s e1", "MB/s e2", "x raw GET e1", "x raw GET e2",
         "reader CPU % e1", "reader CPU % e2", "program CPU % e1", "program CPU % e2", "program peak RSS MB",
         "page cache MB e1", "page cache MB e2"],
        [[*key, *pair(e, "mb_per_s"), *pair(e, "ratio_to_raw_get"), *pair(e, "loader_cpu_pct"),
          *pair(e, "program_cpu_pct"), peak(e), *pair(e, "page_cache_growth_mb")]
         for key, e in by_epoch(of_kind(cells, "bytes"), ("store", "dataset", "source", "variant", "readers"))])


def random_markdown(cells: list[dict[str, Any]]) -> str:
    """The random-read cells, one row per route."""
    return "## Random reads: 64 KiB at random offsets, one reader\n\n" + table(
        ["store", "dataset", "source", "variant", "MB/s", "reads/s", "p50 ms", "x s3io range", "reader CPU %",
         "program CPU %", "program peak RSS MB"],
        [[c.get("store"), c["dataset"], c["source"], c.get("variant"), c.get("mb_per_s"), c.get("reads_per_s"),
          c.get("p50_ms"), c.get("ratio_to_s3io_range"), c.get("loader_cpu_pct"), c.get("program_cpu_pct"),
          c.get("program_peak_rss_mb")] if c["status"] == "ok"
         else [c.get("store"), c["dataset"], c["source"], c.get("variant"), c["status"], "", "", "", "", "", ""]
         for c in of_kind(cells, "random")])


def bytes_panel(axis: Any, cells: list[dict[str, Any]], store: str) -> None:
    """The chart's bytes row: MB/s per route and reader count, the ranged-GET limit dashed across it."""
    epoch_bars(axis, of_kind(cells, "bytes"), lambda c: f"{c['source']}\n{c['variant']} r={c['readers']}",
               "mb_per_s", "MB/s", f"{store}: bytes path, no decode; dashed: ranged-GET limit")
    for limit in of_kind(cells, "raw-get"):
        axis.axhline(limit["mb_per_s"], color="grey", linestyle="--", linewidth=1)
