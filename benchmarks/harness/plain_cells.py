"""The ``"cell": "plain"`` cells of a sweep: a plain reader (no mountctl loader) through a mount as users make it.

Per dataset and mount program: the shards read whole with ``open``/``read`` in 1 MiB blocks, as ``cat`` reads
them, by ``readers`` threads each taking every ``readers``-th file, through a fresh ``MountSpec(uri, dir,
backend=program)`` (no cache: what a user gets who passes nothing), in two ways:

* ``listed``: ``os.listdir`` first, then the files in listing order (``cat dir/*``, a loop over a directory);
* ``by name``: the same names opened with no listing (a list of paths, ``shard-{000..047}.tar``).

Pass 1 is the first read on the fresh mount, against the dataset's ranged-GET limit of the same run; pass 2 reads
the same files again on the same mount ("bytes read again"), against local disk's second pass (its page cache).
Local disk is measured the same way, once per reader count.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from typing import Any

from benchmarks.harness.cells import find_cell, ratio
from benchmarks.harness.config import SweepConfig
from benchmarks.harness.limits import LOCAL
from benchmarks.harness.monitor import ResourceMonitor
from benchmarks.harness.sweep_run import DatasetCells, Planned, SweepRun
from benchmarks.harness.tables import at, by_epoch, of_kind, pair, peak, table
from mountctl import Mount, MountSpec, installed_backends

__all__ = ["plain_cells", "plain_cell_count", "add_plain_ratios", "plain_markdown", "MODES", "READERS"]

MODES = ("listed", "by name")
READERS = (1, 4)
BLOCK = 1 << 20


def _programs(config: SweepConfig) -> list[str]:
    return list(config.backends or installed_backends())


def plain_cell_count(config: SweepConfig, planned: Planned) -> int:
    """Per dataset: local disk and each program's two ways, at each reader count, two passes each (none with
    --no-bytes)."""
    if not config.bytes_cells:
        return 0
    return (1 + len(_programs(config)) * len(MODES)) * len(READERS) * 2


def _cat(paths: list[str]) -> int:
    got = 0
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while block := f.read(BLOCK):
                got += len(block)
    return got


def read_whole(root: str, names: list[str], readers: int, listed: bool) -> dict[str, Any]:
    """Every file of ``names`` under ``root`` read once by ``readers`` threads (listing ``root`` first when
    ``listed``): MB/s from the first open (the listing included) to the last byte."""
    started = time.perf_counter()
    if listed:
        wanted = set(names)
        names = [name for name in sorted(os.listdir(root)) if name in wanted]  # S3's order is the keys' bytes
    paths = [os.path.join(root, name) for name in names]
    totals: list[int] = []
    failures: list[BaseException] = []

    def share(mine: list[str]) -> None:
        try:
            totals.append(_cat(mine))
        except OSError as error:
            failures.append(error)

    threads = [threading.Thread(target=share, args=(paths[i::readers],)) for i in range(readers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    if failures:
        raise failures[0]
    return {"mb_per_s": round(sum(totals) / seconds / 1e6, 2), "seconds": round(seconds, 3), "bytes": sum(totals),
            "files": len(paths)}


def _passes(root: str, names: list[str], readers: int, listed: bool, expected: int,
            pid: int | None) -> list[dict[str, Any]]:
    """Passes 1 and 2 over the same files, each checked against the bytes the manifest says."""
    rows = []
    for epoch in (1, 2):
        with ResourceMonitor(pid) as monitor:
            row = read_whole(root, names, readers, listed)
        if row["bytes"] != expected:
            raise RuntimeError(f"the plain reader read {row['bytes']} bytes of {expected}")
        rows.append({"epoch": epoch, **row, **monitor.usage.to_dict()})
    return rows


def plain_cells(run: SweepRun, dataset: DatasetCells) -> None:
    """Local disk, then each program's two ways at each reader count, each on a fresh mount."""
    config = run.config
    names = [shard.name for shard in dataset.manifest.shards]
    expected = sum(shard.bytes for shard in dataset.manifest.shards)
    for readers in READERS:
        head = {"cell": "plain", "readers": readers, **dataset.base}

        def local(readers: int = readers) -> list[dict[str, Any]]:
            _cat([os.path.join(dataset.local.root, name) for name in names])  # in the page cache: the limit
            return _passes(dataset.local.root, names, readers, False, expected, None)

        run.epochs({**head, "source": LOCAL, "backend": "-", "mode": "by name"}, local)
        for program in _programs(config):
            for mode in MODES:
                def measure(program: str = program, mode: str = mode, readers: int = readers
                            ) -> list[dict[str, Any]]:
                    with tempfile.TemporaryDirectory(prefix="mountctl-plain-") as scratch:
                        spec = MountSpec(uri=dataset.uri, mount_dir=os.path.join(scratch, "m"), backend=program)
                        with Mount(spec, settings=run.settings) as mount:
                            return _passes(mount.path, names, readers, mode == "listed", expected, mount.pid)

                run.epochs({**head, "source": f"mountpoint/{program}", "backend": program, "mode": mode}, measure)


def add_plain_ratios(cells: list[dict[str, Any]]) -> None:
    """Pass 1 x the dataset's ranged-GET limit (same store); pass 2 x local disk's pass 2 (same readers)."""
    for row in cells:
        if row["cell"] != "plain" or row["status"] != "ok":
            continue
        where = {"dataset": row["dataset"], "store": row.get("store")}
        row["ratio_to_raw_get"] = ratio(row, find_cell(cells, "raw-get", **where), "mb_per_s")
        local = find_cell(cells, "plain", source=LOCAL, readers=row["readers"], epoch=row["epoch"], **where)
        row["ratio_to_local_disk"] = ratio(row, local, "mb_per_s")


def plain_markdown(cells: list[dict[str, Any]]) -> str:
    """Passes 1 and 2 side by side per route, way and reader count ("" where the run has no plain cell)."""
    grouped = by_epoch(of_kind(cells, "plain"), ("store", "dataset", "source", "mode", "readers"))
    rows = [[*key, at(e, 1, "mb_per_s"), at(e, 1, "ratio_to_raw_get"), at(e, 2, "mb_per_s"),
             at(e, 2, "ratio_to_local_disk"), peak(e), *pair(e, "page_cache_growth_mb")] for key, e in grouped]
    if not rows:
        return ""
    return ("## A plain reader: cat of every shard, listed first or by name, fresh default mount (no cache)\n\n"
            + table(["store", "dataset", "source", "files opened", "readers", "MB/s pass 1", "x ranged-GET limit",
                     "MB/s pass 2", "x local disk pass 2", "program peak RSS MB", "page cache MB pass 1",
                     "page cache MB pass 2"], rows))
