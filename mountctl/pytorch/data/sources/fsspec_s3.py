"""The ``fsspec`` kind: s3fs opens each shard as a buffered remote file."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from mountctl import S3Settings, parse_s3_uri

__all__ = ["FsspecSource", "fsspec_source"]


@dataclass(frozen=True)
class FsspecSource:
    path: str  # bucket/prefix/ as s3fs names it
    settings: S3Settings
    block_size: int = 8 << 20  # a shard is read front to back: large read-ahead blocks
    kind: str = "fsspec"

    def open_shards(self, names: Sequence[str]) -> Iterator[tuple[str, BinaryIO]]:
        import s3fs

        # Made here, in the worker: an S3FileSystem created before fork breaks its event loop.
        filesystem = s3fs.S3FileSystem(**self.settings.s3fs_options())
        for name in names:
            with filesystem.open(self.path + name, "rb", block_size=self.block_size, cache_type="readahead") as f:
                yield name, f

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "uri": "s3://" + self.path, "endpoint": self.settings.endpoint_url}


@contextlib.contextmanager
def fsspec_source(uri: str, settings: S3Settings, **_: Any) -> Iterator[FsspecSource]:
    yield FsspecSource(path=parse_s3_uri(uri).path, settings=settings)
