"""The two limits every cell is compared with, measured in the same run on the same shards.

* local disk: the shards copied to a local directory and read through the very
  same parse + decode path (``LocalDiskSource`` is just another ``ShardSource``);
  what the loader could do if S3 were free.
* raw GET: the shard bytes fetched with parallel ranged GETs (boto3, threads),
  no parsing or decode; what the S3 endpoint and network can deliver.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from mountctl import S3Settings, parse_s3_uri, s3
from mountctl.pytorch.data.index.manifest import Manifest
from mountctl.pytorch.errors import DatasetError

__all__ = ["LOCAL", "LocalDiskSource", "RawGetSource", "copy_shards", "raw_get", "ranged_get"]

LOCAL = "local-disk"  # the route every table measures the others against, in every cell kind


@dataclass(frozen=True)
class LocalDiskSource:
    root: str
    kind: str = LOCAL

    def open_shards(self, names: Sequence[str], etags: Sequence[str | None] | None = None
                    ) -> Iterator[tuple[str, BinaryIO]]:
        # ``etags`` are not checked: the copy is local and was taken once, at one version.
        for name in names:
            with open(os.path.join(self.root, name), "rb") as stream:
                yield name, stream

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.root}

    def map_reader(self, names: Sequence[str], *, ranged: bool = False,
                   etags: Sequence[str | None] | None = None) -> Any:
        from mountctl.pytorch.data.sources.mountpoint import FileReader

        # ``etags`` are not checked: the copy is local and was taken once, at one version.
        return FileReader(self.root, tuple(names))


@dataclass(frozen=True)
class RawGetSource:
    """Each shard as one plain GET's streaming body: the bytes-path cells' raw route, read like the others."""

    uri: str
    settings: S3Settings
    kind: str = "raw GET"

    def open_shards(self, names: Sequence[str], etags: Sequence[str | None] | None = None
                    ) -> Iterator[tuple[str, BinaryIO]]:
        # ``etags`` are not checked: each shard is one GET, never reopened at an offset.
        location = parse_s3_uri(self.uri)
        client = s3.client(self.settings, read_timeout=120)  # made in the reader: clients do not survive fork
        for name in names:
            body = client.get_object(Bucket=location.bucket, Key=location.prefix + name)["Body"]
            try:
                yield name, body
            finally:
                body.close()

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "uri": self.uri}


def copy_shards(settings: S3Settings, uri: str, manifest: Manifest, directory: str) -> LocalDiskSource:
    """Download every shard of ``uri`` into ``directory`` (kept across cells of one run)."""
    location = parse_s3_uri(uri)
    client = s3.client(settings, read_timeout=120)
    os.makedirs(directory, exist_ok=True)
    for shard in manifest.shards:
        path = os.path.join(directory, shard.name)
        if not (os.path.exists(path) and os.path.getsize(path) == shard.bytes):
            client.download_file(location.bucket, location.prefix + shard.name, path)
    return LocalDiskSource(directory)


def raw_get(settings: S3Settings, uri: str, manifest: Manifest, *, threads: int, part_size: int
            ) -> dict[str, Any]:
    """Every shard byte once, by ``threads`` parallel ranged GETs of ``part_size``; bytes only."""
    location = parse_s3_uri(uri)
    got = ranged_get(settings, location.bucket, {location.prefix + s.name: s.bytes for s in manifest.shards},
                     threads=threads, part_size=part_size)
    if got["bytes"] != manifest.total_bytes:
        raise DatasetError(f"raw GET read {got['bytes']} bytes of {uri}, the manifest says {manifest.total_bytes}")
    return got


def ranged_get(settings: S3Settings, bucket: str, sizes: dict[str, int], *, threads: int, part_size: int
               ) -> dict[str, Any]:
    """Every byte of the objects ``sizes`` (key: bytes) once, by ``threads`` parallel ranged GETs of ``part_size``."""
    client = s3.client(settings, read_timeout=120)  # boto3 clients are thread-safe
    parts = [(key, start, min(start + part_size, size) - 1)
             for key, size in sizes.items() for start in range(0, size, part_size)]

    def fetch(part: tuple[str, int, int]) -> int:
        key, first, last = part
        body = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={first}-{last}")["Body"]
        got = 0
        while chunk := body.read(1 << 20):
            got += len(chunk)
        return got

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(fetch, parts))
    return {"bytes": total, "seconds": time.perf_counter() - started, "requests": len(parts)}
