"""The ``"cell": "map"`` cells of a sweep: map-style reading, one object (or one shard range) per sample.

Two layouts, every route, at each worker count, with and without read-ahead:

* ``files``: the files layout (one JPEG object per sample, ``make --layout
  files``), next to the same files copied to local disk and read the same way
  with no read-ahead (what torchvision's ``ImageFolder`` does): ``x local disk``.
* ``shards-random``: random access into the sweep's first shard dataset through
  its tar index, next to that route's sequential shard read (the ``loader``
  cell of the same dataset and worker count): ``x sequential``.

Every cell decodes exactly as the shard loader does (``MapSampleDataset``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.harness.cells import route_options
from benchmarks.harness.config import SweepConfig
from benchmarks.harness.limits import LOCAL, LocalDiskSource
from benchmarks.harness.loader_cells import source_plan
from benchmarks.harness.monitor import ResourceMonitor
from benchmarks.harness.sweep_run import CELL_ERRORS, Planned, StoreCells, SweepRun
from mountctl import S3Settings, parse_s3_uri, s3
from mountctl.pytorch.data.datasets.dataset import BATCH_TIMEOUT_S
from mountctl.pytorch.data.index.manifest import Manifest, load_manifest
from mountctl.pytorch.training.rates import epoch_figures

__all__ = ["map_cells", "map_cell_count", "add_map_ratios", "map_markdown", "READAHEAD_THREADS"]

READAHEAD_THREADS = 16
# Class folders of the files dataset: ImageFolder data has many images per class folder (ImageNet ~1,300),
# so a mount lists each folder once for many files; 1,000 classes over 2,000 images would not.
FILES_CLASSES = 10


def _images(config: Any) -> int:
    """Samples per map cell: the first dataset's size, capped so --quick stays short."""
    return min(config.dataset_sizes[0], 400 if config.quick else 2000)


def _files_label(config: Any) -> str:
    return f"files-img{config.image_size}-n{_images(config)}-c{FILES_CLASSES}"


def map_cell_count(config: SweepConfig, planned: Planned) -> int:
    """Layouts x read-ahead x sources (and local disk) x worker counts, where the store has a dataset to read."""
    if not (planned.datasets and config.map_cells):
        return 0
    return 2 * 2 * (1 + len(source_plan(config))) * len(config.num_workers)


def _files_dataset(config: Any, settings: S3Settings) -> tuple[str, Manifest]:
    from mountctl.pytorch.data.synthetic import MakeConfig, make_dataset

    uri = f"{config.uri}{_files_label(config)}/"
    make_dataset(MakeConfig(uri=uri, num_images=_images(config), image_size=config.image_size,
                            num_classes=FILES_CLASSES,
                            seed=config.seed, layout="files"), settings=settings, progress=config.progress)
    return uri, load_manifest(settings, uri)


def _copy_files(settings: S3Settings, uri: str, manifest: Manifest, directory: str) -> str:
    """The objects of a files-layout dataset under ``directory`` (same relative keys), 16 GETs at a time."""
    location = parse_s3_uri(uri)
    client = s3.client(settings, read_timeout=120)

    def fetch(key: str) -> None:
        path = os.path.join(directory, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        client.download_file(location.bucket, location.prefix + key, path)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(fetch, [f.key for f in manifest.files]))
    return directory


@contextlib.contextmanager
def _source(kind: str, uri: str, settings: S3Settings, backend: str, local: Any) -> Iterator[Any]:
    from mountctl.pytorch.data.sources import open_source

    if kind == LOCAL:
        yield local
        return
    with open_source(kind, uri, settings, **route_options(uri, settings, backend)) as source:
        yield source


def map_loader_cell(manifest: Manifest, source: Any, uri: str, *, num_workers: int, batch_size: int,
                    warmup_batches: int, images: int, readahead_threads: int, seed: int = 0,
                    program_pid: int | None = None) -> dict[str, Any]:
    """``images`` samples in a shuffled order, map-style, as fast as the DataLoader delivers them."""
    from torch.utils.data import DataLoader

    from mountctl.pytorch.data.datasets.mapstyle import MapSampleDataset, collate
    from mountctl.pytorch.data.sampling.mapsampler import epoch_permutation
    from mountctl.pytorch.errors import DatasetError

    dataset = MapSampleDataset.from_manifest(manifest, source, uri, readahead_threads=readahead_threads)
    order = epoch_permutation(len(dataset), seed=seed, epoch=0)[:images]
    extra: dict[str, Any] = {"timeout": BATCH_TIMEOUT_S, "prefetch_factor": 2} if num_workers else {}
    loader = DataLoader(dataset, batch_size=batch_size, sampler=order, collate_fn=collate,
                        num_workers=num_workers, **extra)
    with ResourceMonitor(program_pid) as monitor:
        marks, sizes = [time.perf_counter()], []
        for batch in loader:
            marks.append(time.perf_counter())
            sizes.append(len(batch["index"]))
    if sum(sizes) != len(order):
        raise DatasetError(f"the map-style loader delivered {sum(sizes)} samples of {len(order)}")
    per_sample_mb = manifest.total_bytes / manifest.num_images / 1e6
    return {**epoch_figures(marks, sizes, warmup_batches, mb_per_sample=per_sample_mb), **monitor.usage.to_dict()}


def map_cells(run: SweepRun, store: StoreCells) -> None:
    """Both layouts through every source (and local disk), at each worker count, read-ahead off and on: the files
    dataset (made here), and random access into the store's first shard dataset."""
    config, settings, scratch, shards = run.config, run.settings, store.scratch, store.datasets[0]
    # Made and copied through the endpoint itself (run.origin); read through the store being measured.
    files_uri, files_manifest = _files_dataset(config, run.origin)
    local_files = LocalDiskSource(_copy_files(run.origin, files_uri, files_manifest, f"{scratch}/map-files"))
    images = _images(config)
    plans = [("files", files_uri, files_manifest, local_files, _files_label(config)),
             ("shards-random", shards.uri, shards.manifest, shards.local, shards.label)]
    for layout, uri, manifest, local, dataset in plans:
        with contextlib.ExitStack() as stack:
            opened = []
            for label, kind, backend in [(LOCAL, LOCAL, "-"), *source_plan(config)]:
                head = {"cell": "map", "layout": layout, "dataset": dataset, "source": label, "kind": kind,
                        "backend": backend, "images": images}
                try:
                    source = stack.enter_context(_source(kind, uri, settings, backend, local))
                except CELL_ERRORS as exc:
                    for workers in config.num_workers:
                        for threads in (0, READAHEAD_THREADS):
                            run.cells.append({**head, "num_workers": workers, "readahead_threads": threads,
                                              "status": f"failed: {exc}"})
                            run.bar.update()
                    continue
                opened.append((head, source, source.describe().get("mount_pid")))
            for workers in config.num_workers:
                for threads in (0, READAHEAD_THREADS):
                    for head, source, daemon in opened:
                        measure = functools.partial(
                            map_loader_cell, manifest, source, uri, num_workers=workers, batch_size=config.batch_size,
                            warmup_batches=config.warmup_batches, images=images, readahead_threads=threads,
                            seed=config.seed, program_pid=daemon)
                        run.cell({**head, "num_workers": workers, "readahead_threads": threads}, measure)


def add_map_ratios(cells: list[dict[str, Any]]) -> None:
    """files: x the local-disk read with no read-ahead (ImageFolder's way); shards-random: x sequential.

    Both within the same store.
    """
    def find(**match: Any) -> dict[str, Any] | None:
        return next((c for c in cells if c["status"] == "ok" and all(c.get(k) == v for k, v in match.items())),
                    None)

    for row in cells:
        if row["cell"] != "map" or row["status"] != "ok":
            continue
        local = find(cell="map", layout=row["layout"], source=LOCAL, num_workers=row["num_workers"],
                     readahead_threads=0, store=row.get("store"))
        whole = "epoch_samples_per_s"  # whole epoch first
        row["ratio_to_local_disk"] = round(row[whole] / local[whole], 3) if local and local.get(whole) else None
        if row["layout"] == "shards-random":
            sequential = find(cell="loader", source=row["source"], dataset=row["dataset"],
                              num_workers=row["num_workers"], store=row.get("store"))
            row["ratio_to_sequential"] = (round(row["samples_per_s"] / sequential["samples_per_s"], 3)
                                          if sequential else None)


def map_markdown(cells: list[dict[str, Any]], table: Callable[[list[str], list[list[Any]]], str]) -> str:
    rows = [[c.get("store"), c["layout"], c["num_workers"], c["source"], c["readahead_threads"],
             c.get("first_batch_s"), c.get("epoch_samples_per_s"), c.get("samples_per_s"), c.get("mb_per_s"),
             c.get("ratio_to_local_disk"), c.get("ratio_to_sequential"),
             c.get("loader_cpu_pct"), c.get("program_cpu_pct"), c.get("program_peak_rss_mb")] if c["status"] == "ok"
            else [c.get("store"), c["layout"], c["num_workers"], c["source"], c["readahead_threads"], c["status"]]
            + [""] * 8 for c in cells if c["cell"] == "map"]
    if not rows:
        return ""
    return ("## Map-style: one object (files) or one shard range (shards-random) per sample\n\n" + table(
        ["store", "layout", "workers", "source", "read-ahead threads", "first batch s", "samples/s whole epoch",
         "samples/s after warm-up", "MB/s after warm-up", "x local disk (whole epoch)", "x sequential",
         "loader CPU %", "program CPU %", "program peak RSS MB"], rows))
