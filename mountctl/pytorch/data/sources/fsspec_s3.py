"""The ``fsspec`` kind: s3fs opens each shard as a buffered remote file."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from mountctl import S3Settings, parse_s3_uri
from mountctl.pytorch.data.sources.reader_state import PerProcessState
from mountctl.pytorch.data.sources.refreshing import Credentials, RefreshingStream, buffered

__all__ = ["FsspecSource", "fsspec_source", "FsspecReader"]


@dataclass
class FsspecReader(PerProcessState):
    """Map-style reads through s3fs: one ``cat_file`` (a GET, ranged for ``offset``) per sample.

    The ``S3FileSystem`` is made in the process that reads (after a DataLoader's fork).
    """

    paths: tuple[str, ...]  # bucket/prefix/name
    settings: S3Settings

    def __post_init__(self) -> None:
        self._credentials = Credentials(self.settings, "fsspec")
        self._pid = 0

    def read(self, j: int, offset: int | None = None, length: int | None = None) -> bytes:
        if self._pid != os.getpid():
            self._credentials, self._pid = Credentials(self.settings, "fsspec"), os.getpid()

        def once() -> bytes:
            filesystem = self._credentials.client("fs", _filesystem)
            if offset is None or length is None:
                return bytes(filesystem.cat_file(self.paths[j]))
            return bytes(filesystem.cat_file(self.paths[j], start=offset, end=offset + length))

        return self._credentials.call(self.paths[j], once)


def _filesystem(settings: S3Settings) -> Any:
    import s3fs

    # skip_instance_cache: an instance cached before fork would carry the parent's event loop, and one
    # cached for other credentials would keep sending the old keys.
    return s3fs.S3FileSystem(skip_instance_cache=True, **settings.s3fs_options())


@dataclass(frozen=True)
class FsspecSource:
    path: str  # bucket/prefix/ as s3fs names it
    settings: S3Settings
    block_size: int = 8 << 20  # a shard is read front to back: large read-ahead blocks
    kind: str = "fsspec"

    def open_shards(self, names: Sequence[str]) -> Iterator[tuple[str, BinaryIO]]:
        # The file system is made here, in the worker (one made before fork breaks its event loop), and
        # made again with credentials resolved again when S3 refuses them.
        credentials = Credentials(self.settings, self.kind)
        for name in names:
            def open_at(offset: int, path: str = self.path + name) -> BinaryIO:
                f = credentials.client("fs", _filesystem).open(path, "rb", block_size=self.block_size,
                                                               cache_type="readahead")
                if offset:
                    f.seek(offset)
                return f

            with buffered(RefreshingStream("s3://" + self.path + name, credentials, open_at)) as stream:
                yield name, stream

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "uri": "s3://" + self.path, "endpoint": self.settings.endpoint_url}

    def map_reader(self, names: Sequence[str], *, ranged: bool = False) -> FsspecReader:
        return FsspecReader(tuple(self.path + name for name in names), self.settings)


@contextlib.contextmanager
def fsspec_source(uri: str, settings: S3Settings, **_: Any) -> Iterator[FsspecSource]:
    yield FsspecSource(path=parse_s3_uri(uri).path, settings=settings)
