"""Bytes-path and random-read cells: what each route delivers from S3 before any decode.

* bytes: every shard walked once as a tar stream (each member's bytes read,
  nothing decoded) by ``readers`` DataLoader worker processes, each with a
  disjoint subset of the shards: what a loader gets when decoding is free.
  The readers wait for each other once started, and the clock runs from
  then to the last byte read, so forking and starting the readers (0.1-0.3 s
  each, which made most of a small cell's time) is not counted; ``startup_s``
  says what it was.
* random: 64 KiB reads at the same seeded random offsets in the shards, one
  reader, through each source's own map-style reader of shard ranges
  (``ShardSource.map_reader``, what ``MapSampleDataset`` reads with): ``pread``
  through a mount and of the local copy, a ranged GET carrying ``If-Match`` for
  s3io, s3fs ``cat_file`` with a byte range for fsspec; and for the raw GET
  limit, a plain ranged GET.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import random
import statistics
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from benchmarks.harness.cells import BATCH_TIMEOUT_S
from benchmarks.harness.limits import LOCAL, LocalDiskSource, RawGetSource
from benchmarks.harness.monitor import ResourceMonitor
from mountctl import S3Settings, parse_s3_uri, s3
from mountctl.pytorch.data.index.manifest import Manifest
from mountctl.pytorch.data.sources import MountpointOptions, open_source
from mountctl.pytorch.errors import DatasetError

__all__ = ["Route", "bytes_routes", "cache_note", "opened_route", "bytes_cell", "random_cell", "range_reader",
           "READ_SIZE", "NO_CACHE_OPTIONS"]

READ_SIZE = 64 << 10
BARRIER_TIMEOUT_S = 120.0  # every reader forked and started; a loaded machine takes seconds, never minutes
RAW_GET = "raw GET"
# What a "(no-cache)" cell changes from the default: the node-local cache, and nothing else. It also turned the
# in-memory read-ahead off, so its figures differed by two levers and the read-ahead's effect read as the cache's.
NO_CACHE_OPTIONS = {"cache": False}


class Route:
    """One way to the shard bytes: a label, the source kind behind it and, for the mountpoint kind, its options."""

    def __init__(self, source: str, kind: str, backend: str = "-", variant: str = "-",
                 mountpoint: MountpointOptions | None = None) -> None:
        self.source, self.kind, self.backend, self.variant = source, kind, backend, variant
        self.mountpoint = mountpoint

    def head(self) -> dict[str, Any]:
        return {"source": self.source, "kind": self.kind, "backend": self.backend, "variant": self.variant}


def _no_cache_options(variant: str) -> tuple[dict[str, Any], list[str]]:
    """The no-cache options the mountpoint kind accepts (all of them once it has a cache), and those it does not."""
    if variant != "no-cache":
        return {}, []
    accepted = {field.name for field in dataclasses.fields(MountpointOptions)}
    options = {k: v for k, v in NO_CACHE_OPTIONS.items() if k in accepted}
    return options, [k for k in NO_CACHE_OPTIONS if k not in accepted]


def bytes_routes(kinds: Sequence[str], backends: Sequence[str]) -> list[Route]:
    """Every route of the bytes and random cells: the two limits, each mount program twice, the libraries."""
    routes = [Route(LOCAL, LOCAL), Route(RAW_GET, RAW_GET)]
    for kind in kinds:
        if kind == "mountpoint":  # the one kind with programs: one route per program and variant
            routes += [Route(f"mountpoint/{b}", kind, b, variant,
                             MountpointOptions(backend=b, **_no_cache_options(variant)[0]))
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
        with open_source(route.kind, uri, settings, mountpoint=route.mountpoint, whole_files=whole_files) as source:
            yield source


def cache_note(route: Route) -> dict[str, Any]:
    """For a no-cache cell: which of the options its mountpoint opener did not know (then it ran with defaults)."""
    if route.variant != "no-cache":
        return {}
    missing = _no_cache_options(route.variant)[1]
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


def range_reader(source: Any, names: list[str]) -> tuple[Callable[[str, int], bytes], Callable[[], None]]:
    """(read(name, offset) -> ``READ_SIZE`` bytes there, close) for the route behind ``source``: the source's own
    reader of shard ranges (every source has one, the local copy too); the raw GET limit, which is no source,
    reads each range with one plain ranged GET."""
    if isinstance(source, RawGetSource):
        location = parse_s3_uri(source.uri)
        client = s3.client(source.settings, read_timeout=120)

        def get(name: str, offset: int) -> bytes:
            return bytes(client.get_object(Bucket=location.bucket, Key=location.prefix + name,
                                           Range=f"bytes={offset}-{offset + READ_SIZE - 1}")["Body"].read())
        return get, lambda: None
    reader = source.map_reader(names, ranged=True)
    index = {name: j for j, name in enumerate(names)}
    # The s3io reader holds only clients, made per process, and has no close; the others give back descriptors.
    return (lambda name, offset: bytes(reader.read(index[name], offset, READ_SIZE))), getattr(reader, "close",
                                                                                               lambda: None)


def random_cell(manifest: Manifest, source: Any, *, reads: int, seed: int, program_pid: int | None = None
                ) -> dict[str, Any]:
    """``reads`` 64 KiB reads at random offsets, one after another, through the route behind ``source``."""
    offsets = random_offsets(manifest, reads, seed)
    sizes = {s.name: s.bytes for s in manifest.shards}
    read, close = range_reader(source, [s.name for s in manifest.shards])
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
