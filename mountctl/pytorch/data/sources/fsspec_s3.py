"""The ``fsspec`` kind: s3fs opens each shard as a buffered remote file."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing.util
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from mountctl import S3Settings, VersionPin, parse_s3_uri
from mountctl.pytorch.data.sources.pins import shard_pins
from mountctl.pytorch.data.sources.reader_state import PerProcessState
from mountctl.pytorch.data.sources.refreshing import Credentials, RefreshingStream, buffered
from mountctl.pytorch.errors import reindex_hint
from mountctl.s3 import is_precondition_failed

__all__ = ["FsspecSource", "fsspec_source", "FsspecReader", "close_filesystem", "pin_file"]

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
    running = _running_loop()
    if running is not None and running is filesystem.loop:
        # Called on fsspec's own loop thread (a finalizer run by a garbage collection there): waiting
        # for the loop from inside it would never end, so the close is scheduled on it instead.
        task = running.create_task(creator.__aexit__(None, None, None))
        task.add_done_callback(_retrieve)
        return
    with contextlib.suppress(FSTimeoutError):  # a close that does not finish in time is abandoned, not waited on
        sync(filesystem.loop, creator.__aexit__, None, None, None, timeout=_CLOSE_TIMEOUT_S)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Take a scheduled close's outcome, so that a failed close is not printed as never retrieved."""
    if not task.cancelled():
        task.exception()


@dataclass
class FsspecReader(PerProcessState):
    """Map-style reads through s3fs: one ``cat_file`` (a GET, ranged for ``offset``) per sample.

    The ``S3FileSystem`` is made in the process that reads (after a DataLoader's fork) and closed
    when that process ends (or at ``close``).
    """

    paths: tuple[str, ...]  # bucket/prefix/name
    settings: S3Settings
    etags: tuple[str | None, ...] | None = None  # the index's, by object: sent as If-Match on every GET
    dataset_uri: str = ""  # s3://bucket/prefix/: what the refusal says to re-index

    def __post_init__(self) -> None:
        self._credentials = Credentials(self.settings, "fsspec")
        self._pid = 0

    def read(self, j: int, offset: int | None = None, length: int | None = None) -> bytes:
        if self._pid != os.getpid():
            self._credentials, self._pid = Credentials(self.settings, "fsspec"), os.getpid()
            # A DataLoader worker ends through multiprocessing, which runs these finalizers (not atexit).
            multiprocessing.util.Finalize(self, self._credentials.close, exitpriority=10)

        etag = self.etags[j] if self.etags is not None else None

        def once() -> bytes:
            filesystem = self._credentials.client("fs", _filesystem, close_filesystem)
            if etag is not None:
                return _get_if_match(filesystem, self.paths[j], etag, offset, length, self.dataset_uri)
            if offset is None or length is None:
                return bytes(filesystem.cat_file(self.paths[j]))
            return bytes(filesystem.cat_file(self.paths[j], start=offset, end=offset + length))

        return self._credentials.call(self.paths[j], once)

    def close(self) -> None:
        if self._pid == os.getpid():
            self._credentials.close()


def _get_if_match(filesystem: Any, path: str, etag: str, offset: int | None, length: int | None,
                  dataset_uri: str) -> bytes:
    """One GET (ranged for ``offset``) of the version the index names: ``cat_file`` takes no If-Match, so the
    request goes through s3fs's own ``_call_s3`` (its retries and error translation) with one added."""
    from s3fs.core import sync  # fsspec's, as s3fs uses it

    if length == 0:
        return b""
    bucket, _, key = path.partition("/")
    ranged = {} if offset is None or length is None else {"Range": f"bytes={offset}-{offset + max(0, length - 1)}"}
    pin = VersionPin("s3://" + path, etag, remedy=reindex_hint(dataset_uri))

    async def get() -> bytes:
        response = await filesystem._call_s3("get_object", Bucket=bucket, Key=key, IfMatch=pin.if_match, **ranged)
        try:
            return bytes(await response["Body"].read())
        finally:
            response["Body"].close()

    try:
        return bytes(sync(filesystem.loop, get))
    except Exception as exc:
        if is_precondition_failed(exc):
            raise pin.changed() from None
        raise


def pin_file(f: Any, pin: VersionPin) -> None:
    """Hold an open ``S3File`` to ``pin``'s version: check the ETag s3fs read at open, then send it as If-Match.

    s3fs pins the ETag it saw at this open by itself; after a reopen that would be the new version's,
    so the pinned one replaces it.  A handle opened with a known size carries no ETag: nothing to check
    then, and the If-Match alone guards the reads.
    """
    pin.check((f.details or {}).get("ETag") or None)
    if pin.if_match is not None:
        f.read_kw = {**f.read_kw, "IfMatch": pin.if_match}


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

    def open_shards(self, names: Sequence[str], etags: Sequence[str | None] | None = None
                    ) -> Iterator[tuple[str, BinaryIO]]:
        """Each shard at one version: ``etags`` (the index's, by name), else the one s3fs sees at the first open.

        s3fs reads the object's ETag when it opens it: a different one fails the open, and every ranged
        GET of the handle carries ``If-Match`` with the pinned one, so a reopen after a credential refresh
        cannot join another version's bytes (S3 answers 412, read as ObjectChanged).
        """
        # The file system is made here, in the worker (one made before fork breaks its event loop), and
        # made again with credentials resolved again when S3 refuses them.
        credentials = Credentials(self.settings, self.kind)
        pins = shard_pins("s3://" + self.path, names, etags)
        try:
            for name, pin in zip(names, pins, strict=True):
                def open_at(offset: int, path: str = self.path + name, pin: VersionPin = pin) -> BinaryIO:
                    f = credentials.client("fs", _filesystem, close_filesystem).open(
                        path, "rb", block_size=self.block_size, cache_type="readahead")
                    try:
                        pin_file(f, pin)
                        if offset:
                            f.seek(offset)
                    except BaseException:
                        f.close()
                        raise
                    return f

                with buffered(RefreshingStream("s3://" + self.path + name, credentials, open_at, pin)) as stream:
                    yield name, stream
        finally:
            credentials.close()

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "uri": "s3://" + self.path, "endpoint": self.settings.endpoint_url}

    def map_reader(self, names: Sequence[str], *, ranged: bool = False,
                   etags: Sequence[str | None] | None = None) -> FsspecReader:
        return FsspecReader(tuple(self.path + name for name in names), self.settings,
                            None if etags is None else tuple(etags), "s3://" + self.path)


@contextlib.contextmanager
def fsspec_source(uri: str, settings: S3Settings, **_: Any) -> Iterator[FsspecSource]:
    yield FsspecSource(path=parse_s3_uri(uri).path, settings=settings)
