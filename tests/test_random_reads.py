"""The bench's random-read cell reads, through every route, exactly the 64 KiB at each offset it asks for.

The cell reads each source through the source's own map-style reader of shard ranges (``map_reader``), and the
raw GET limit with a plain ranged GET (``bytes_path``).  Real SeaweedFS, real s3torchconnector and s3fs, and a
real mount of each mount program installed: every read is compared with the bytes that were uploaded, at the
start of a shard, in its middle, at its last full range, and of a shard smaller than one read.
"""

from __future__ import annotations

import random

import pytest

from benchmarks.harness.bytes_path import READ_SIZE, Route, bytes_routes, opened_route, range_reader
from benchmarks.harness.limits import LocalDiskSource

SHARDS = {"a.tar": 3 * READ_SIZE + 1234, "b.tar": READ_SIZE // 2}  # b is smaller than one read


def _offsets(size: int) -> list[int]:
    return [0] if size <= READ_SIZE else [0, 1, size // 2, size - READ_SIZE]


@pytest.fixture
def shards(s3, bucket, tmp_path) -> tuple[str, dict[str, bytes], LocalDiskSource]:
    """The shards under a prefix, and the same bytes in a local folder (the local-disk route's copy)."""
    rng = random.Random(7)
    data = {name: rng.randbytes(size) for name, size in SHARDS.items()}
    for name, body in data.items():
        s3.put_object(Bucket=bucket, Key=f"ds/{name}", Body=body)
        (tmp_path / name).write_bytes(body)
    return f"s3://{bucket}/ds/", data, LocalDiskSource(str(tmp_path))


def _check(route: Route, uri: str, data: dict[str, bytes], local: LocalDiskSource, settings) -> None:
    names = list(data)
    with opened_route(route, uri, settings, local) as source:
        read, close = range_reader(source, names)
        try:
            for name, body in data.items():
                for offset in _offsets(len(body)):
                    assert read(name, offset) == body[offset:offset + READ_SIZE], (route.source, name, offset)
        finally:
            close()


@pytest.mark.parametrize("source", ["local-disk", "raw GET", "s3io", "fsspec"])
def test_each_library_route_reads_the_bytes_at_each_offset(s3_env, shards, source):
    uri, data, local = shards
    [route] = [r for r in bytes_routes(["s3io", "fsspec"], []) if r.source == source]
    _check(route, uri, data, local, s3_env)


def test_each_mount_route_reads_the_bytes_at_each_offset_with_and_without_its_cache(s3_env, shards, backend,
                                                                                     mount_root):
    uri, data, local = shards
    routes = [r for r in bytes_routes(["mountpoint"], [backend]) if r.kind == "mountpoint"]
    assert {r.variant for r in routes} == {"default", "no-cache"}
    for route in routes:
        _check(route, uri, data, local, s3_env)
