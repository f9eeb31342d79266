"""The ``fsspec`` kind: s3fs opens each shard as a buffered remote file."""

from __future__ import annotations

import contextlib
import multiprocessing.util
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from mountctl import S3Settings, parse_s3_uri
from mountctl.pytorch.data.sources.reader_state import PerProcessState

__all__ = ["FsspecSource", "fsspec_source", "FsspecReader", "close_filesystem"]

_CLOSE_TIMEOUT_S = 5.0


def close_filesystem(filesystem: Any) -> None:
    """Close an ``S3FileSystem``'s client on fsspec's loop now, while that loop still runs.

    Left to s3fs's own finalizer, the close runs when a DataLoader worker exits, after fsspec's
    loop thread is gone, and aiobotocore prints "Task exception was never retrieved ... attached to
    a different loop".
    """
    creator = getattr(filesystem, "_s3creator", None)
    if creator is None:
        return
    from s3fs.core import FSTimeoutError, sync  # fsspec's, as s3fs uses them

    filesystem._s3 = filesystem._s3creator = None
    with contextlib.suppress(FSTimeoutError):  # a close that does not finish in time is abandoned, not waited on
        sync(filesystem.loop, creator.__aexit__, None, None, None, timeout=_CLOSE_TIMEOUT_S)


@dataclass
class FsspecReader(PerProcessState):
    """Map-style reads through s3fs: one ``cat_file`` (a GET, ranged for ``offset``) per sample.

    The ``S3FileSystem`` is made in the process that reads (after a DataLoader's fork) and closed
    when that process ends (or at ``close``).
    """

    paths: tuple[str, ...]  # bucket/prefix/name
    settings: S3Settings

    def __post_init__(self) -> None:
        self._filesystem: Any = None
        self._pid = 0

    def read(self, j: int, offset: int | None = None, length: int | None = None) -> bytes:
        if self._filesystem is None or self._pid != os.getpid():
            import s3fs

            # skip_instance_cache: an instance cached before fork would carry the parent's event loop.
            self._filesystem = s3fs.S3FileSystem(skip_instance_cache=True, **self.settings.s3fs_options())
            self._pid = os.getpid()
            # A DataLoader worker ends through multiprocessing, which runs these finalizers (not atexit).
            multiprocessing.util.Finalize(self, close_filesystem, args=(self._filesystem,), exitpriority=10)
        if offset is None or length is None:
            return bytes(self._filesystem.cat_file(self.paths[j]))
        return bytes(self._filesystem.cat_file(self.paths[j], start=offset, end=offset + length))

    def close(self) -> None:
        if self._filesystem is not None and self._pid == os.getpid():
            close_filesystem(self._filesystem)
        self._filesystem = None


@dataclass(frozen=True)
class FsspecSource:
    path: str  # bucket/prefix/ as s3fs names it
    settings: S3Settings
    block_size: int = 8 << 20  # a shard is read front to back: large read-ahead blocks
    kind: str = "fsspec"

    def open_shards(self, names: Sequence[str]) -> Iterator[tuple[str, BinaryIO]]:
        import s3fs

        # Made here, in the worker: an S3FileSystem created before fork breaks its event loop.
        filesystem = s3fs.S3FileSystem(skip_instance_cache=True, **self.settings.s3fs_options())
        try:
            for name in names:
                with filesystem.open(self.path + name, "rb", block_size=self.block_size,
                                     cache_type="readahead") as f:
                    yield name, f
        finally:
            close_filesystem(filesystem)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "uri": "s3://" + self.path, "endpoint": self.settings.endpoint_url}

    def map_reader(self, names: Sequence[str], *, ranged: bool = False) -> FsspecReader:
        return FsspecReader(tuple(self.path + name for name in names), self.settings)


@contextlib.contextmanager
def fsspec_source(uri: str, settings: S3Settings, **_: Any) -> Iterator[FsspecSource]:
    yield FsspecSource(path=parse_s3_uri(uri).path, settings=settings)
