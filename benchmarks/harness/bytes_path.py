"""Bytes-path and random-read cells: what each route delivers from S3 before any decode.

* bytes: every shard walked once as a tar stream (each member's bytes read,
  nothing decoded) by ``readers`` DataLoader worker processes, each with a
  disjoint subset of the shards: what a loader gets when decoding is free.
  The readers wait for each other once started, and the clock runs from
  then to the last byte read, so forking and starting the readers (0.1-0.3 s
  each, which made most of a small cell's time) is not counted; ``startup_s``
  says what it was.
* random: 64 KiB reads at the same seeded random offsets in the shards, one
  reader: ``os.pread`` through a mount, the connector's range-based reader
  (``S3ReaderConstructor.range_based(buffer_size=0)``), s3fs ``cat_file``
  with a byte range, a ranged GET, and the local copy.
"""

from __future__ import annotations

import contextlib
import inspect
import multiprocessing
import os
import random
import statistics
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from benchmarks.harness.cells import BATCH_TIMEOUT_S
from benchmarks.harness.limits import LocalDiskSource, RawGetSource
from benchmarks.harness.monitor import ResourceMonitor
from mountctl import S3Settings, parse_s3_uri, s3
from mountctl.pytorch.data.manifest import Manifest
from mountctl.pytorch.data.sources import SOURCE_KINDS, open_source
from mountctl.pytorch.errors import DatasetError

__all__ = ["Route", "bytes_routes", "cache_note", "opened_route", "bytes_cell", "random_cell", "READ_SIZE",
           "NO_CACHE_OPTIONS"]

READ_SIZE = 64 << 10
BARRIER_TIMEOUT_S = 120.0  # every reader forked and started; a loaded machine takes seconds, never minutes
LOCAL, RAW_GET = "local-disk", "raw GET"
# The mountpoint source's options that turn its node-local cache and plan-driven read-ahead off.
NO_CACHE_OPTIONS = {"cache": False, "read_ahead": False}


class Route:
    """One way to the shard bytes: a label, the source kind behind it and the options it is opened with."""

    def __init__(self, source: str, kind: str, backend: str = "-", variant: str = "-",
                 options: dict[str, Any] | None = None) -> None:
        self.source, self.kind, self.backend, self.variant = source, kind, backend, variant
        self.options = options or {}

    def head(self) -> dict[str, Any]:
        return {"source": self.source, "kind": self.kind, "backend": self.backend, "variant": self.variant}


def _mount_options(variant: str) -> tuple[dict[str, Any], list[str]]:
    """The no-cache options the mountpoint opener accepts (all of them once it has a cache and read-ahead)."""
    if variant != "no-cache":
        return {}, []
    accepted = inspect.signature(SOURCE_KINDS["mountpoint"]).parameters
    options = {k: v for k, v in NO_CACHE_OPTIONS.items() if k in accepted}
    return options, [k for k in NO_CACHE_OPTIONS if k not in accepted]


def bytes_routes(kinds: Sequence[str], backends: Sequence[str]) -> list[Route]:
    """Every route of the bytes and random cells: the two limits, each mount program twice, the libraries."""
    routes = [Route(LOCAL, LOCAL), Route(RAW_GET, RAW_GET)]
    for kind in kinds:
        if kind == "mountpoint":
            routes += [Route(f"mountpoint/{b}", kind, b, variant, _mount_options(variant)[0])
                       for b in backends for variant in ("default", "no-cache")]
        else:
            routes.append(Route(kind, kind))
    return routes


@contextlib.contextmanager
def opened_route(route: Route, uri: str, settings: S3Settings, local: LocalDiskSource, *,
                 whole_files: bool = False) -> Iterator[Any]:
    """The route's source for one measurement (a mount is started for it and stopped after); ``whole_files`` for
    cells that read every shard front to back (not the random cell)."""
    if route.kind == LOCAL:
        yield local
    elif route.kind == RAW_GET:
        yield RawGetSource(uri=uri, settings=settings)
    else:
        with open_source(route.kind, uri, settings, backend=route.backend, whole_files=whole_files,
                         **route.options) as source:
            yield source


def cache_note(route: Route) -> dict[str, Any]:
    """For a no-cache cell: which of the options its mountpoint opener did not know (then it ran with defaults)."""
    if route.variant != "no-cache":
        return {}
    missing = _mount_options(route.variant)[1]
    return {"options_not_supported": missing} if missing else {}


class _TarWalk(IterableDataset):
    """Yields (shard bytes, member bytes, first open, last byte) per shard of this reader's share."""

    def __init__(self, source: Any, shards: list[tuple[str, int]], barrier: Any = None) -> None:
        super().__init__()
        self.source, self.shards, self.barrier = source, shards, barrier

    def __iter__(self) -> Iterator[tuple[int, int, float, float]]:
        info = get_worker_info()
        worker, readers = (info.id, info.num_workers) if info is not None else (0, 1)
        mine = self.shards[worker::readers]
        sizes = dict(mine)
        if self.barrier is not None:
            # Every reader up before any reads: process start-up (a fork and its imports, 0.1-0.3 s each,
            # one after another) is not the route's cost, and with small cells it was most of the clock.
            self.barrier.wait(timeout=BARRIER_TIMEOUT_S)
        started = time.perf_counter()  # CLOCK_MONOTONIC: comparable between processes on Linux
        for name, stream in self.source.open_shards([name for name, _ in mine]):
            members = 0
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                for member in tar:
                    data = tar.extractfile(member)
                    if data is not None:
                        members += len(data.read())
            yield sizes[name], members, started, time.perf_counter()


def bytes_cell(manifest: Manifest, source: Any, *, readers: int, program_pid: int | None = None
               ) -> dict[str, Any]:
    """One pass over every shard by ``readers`` processes, tar walk only."""
    import warnings

    # More readers than cores is a point of the sweep, not a mistake.
    warnings.filterwarnings("ignore", message=r".*suggested max number of worker.*")
    context = multiprocessing.get_context("fork")
    walk = _TarWalk(source, [(s.name, s.bytes) for s in manifest.shards], context.Barrier(readers))
    loader: DataLoader[Any] = DataLoader(walk, batch_size=None, num_workers=readers, timeout=BATCH_TIMEOUT_S,
                                         multiprocessing_context=context)
    with ResourceMonitor(program_pid) as monitor:
        asked = time.perf_counter()
        got = list(loader)
    total = sum(int(g[0]) for g in got)
    if total != manifest.total_bytes or len(got) != len(manifest.shards):
        raise DatasetError(f"the tar walk read {total} bytes in {len(got)} shards; the manifest says "
                           f"{manifest.total_bytes} in {len(manifest.shards)}")
    first = min(float(g[2]) for g in got)
    seconds = max(float(g[3]) for g in got) - first
    return {"mb_per_s": round(total / seconds / 1e6, 2), "seconds": round(seconds, 3), "readers": readers,
            "startup_s": round(first - asked, 3),  # readers forked and ready: outside the clock
            "member_bytes": sum(int(g[1]) for g in got), **monitor.usage.to_dict()}


def random_offsets(manifest: Manifest, reads: int, seed: int) -> list[tuple[str, int]]:
    """(shard, offset) of each read: shards weighted by size, offsets uniform; the same for every route."""
    rng = random.Random(f"random-reads:{seed}")
    shards = [s for s in manifest.shards if s.bytes >= READ_SIZE] or list(manifest.shards)
    chosen = rng.choices(shards, weights=[s.bytes for s in shards], k=reads)
    return [(s.name, rng.randrange(max(1, s.bytes - READ_SIZE + 1))) for s in chosen]


def _range_reader(source: Any, uri: str, settings: S3Settings) -> tuple[Callable[[str, int], bytes], Callable[[], None]]:
    """(read(name, offset) -> bytes, close) for the route behind ``source``."""
    location = parse_s3_uri(uri)
    kind = source.kind
    if kind in ("mountpoint", LOCAL):
        root = source.describe()["path"]
        files: dict[str, int] = {}

        def pread(name: str, offset: int) -> bytes:
            if name not in files:
                files[name] = os.open(os.path.join(root, name), os.O_RDONLY)
            return os.pread(files[name], READ_SIZE, offset)

        def close_files() -> None:
            for fd in files.values():
                os.close(fd)
        return pread, close_files
    if kind == "s3io":
        from s3torchconnector import S3IterableDataset, S3ReaderConstructor

        readers: dict[str, Any] = {}

        def ranged(name: str, offset: int) -> bytes:
            if name not in readers:  # buffer_size=0: each read is one ranged GET of exactly its bytes
                dataset = S3IterableDataset.from_objects(
                    [uri + name], enable_sharding=False, reader_constructor=S3ReaderConstructor.range_based(0),
                    **settings.s3torch_options())
                readers[name] = next(iter(dataset))
            reader = readers[name]
            reader.seek(offset)
            return bytes(reader.read(READ_SIZE))
        def close_readers() -> None:
            for reader in readers.values():
                reader.close()
        return ranged, close_readers
    if kind == "fsspec":
        import s3fs

        filesystem = s3fs.S3FileSystem(**settings.s3fs_options())

        def cat(name: str, offset: int) -> bytes:
            return bytes(filesystem.cat_file(location.path + name, start=offset, end=offset + READ_SIZE))
        return cat, lambda: None
    client = s3.client(settings, read_timeout=120)

    def get(name: str, offset: int) -> bytes:
        return bytes(client.get_object(Bucket=location.bucket, Key=location.prefix + name,
                                       Range=f"bytes={offset}-{offset + READ_SIZE - 1}")["Body"].read())
    return get, lambda: None


def random_cell(manifest: Manifest, source: Any, uri: str, settings: S3Settings, *, reads: int, seed: int,
                program_pid: int | None = None) -> dict[str, Any]:
    """``reads`` 64 KiB reads at random offsets, one after another, through the route behind ``source``."""
    offsets = random_offsets(manifest, reads, seed)
    sizes = {s.name: s.bytes for s in manifest.shards}
    read, close = _range_reader(source, uri, settings)
    latencies, total = [], 0
    try:
        with ResourceMonitor(program_pid) as monitor:
            started = time.perf_counter()
            for name, offset in offsets:
                before = time.perf_counter()
                data = read(name, offset)
                latencies.append(time.perf_counter() - before)
                if len(data) != min(READ_SIZE, sizes[name] - offset):
                    raise DatasetError(f"a {READ_SIZE}-byte read at {offset} of {name} returned {len(data)} bytes")
                total += len(data)
            seconds = time.perf_counter() - started
    finally:
        close()
    return {"mb_per_s": round(total / seconds / 1e6, 2), "reads_per_s": round(reads / seconds, 1),
            "p50_ms": round(1000 * statistics.median(latencies), 4), "reads": reads, "read_size": READ_SIZE,
            "readers": 1, **monitor.usage.to_dict()}
