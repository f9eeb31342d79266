"""``open_resilient``: read a file through a mount that may be remounted under the reader.

While the watchdog replaces a dead mount, reads of files opened through it fail
with ENOTCONN, ECONNABORTED, EIO or ESTALE, and for a moment the path may not
exist (ENOENT) because the FUSE mount it was opened through is not there.  This reader retries exactly
those, reopens the same path once the mount answers again and seeks back to
the byte it had reached, so the caller sees one uninterrupted stream: no byte
lost, none repeated.  A mount whose program S3 no longer authorizes fails reads
too, with EIO (rclone) or, worse, an early end of file (s3fs answers 0 bytes of
a file it says is 3 MB): an end of file before the size the file has is retried
like EIO while the watchdog resolves credentials again and remounts.  Nothing else is retried (not EAGAIN, not ETIMEDOUT).  A
file that is really gone fails at once instead: ENOENT while its mount is in
place, or, when the caller says how to ask S3 (``still_exists``), an object
that S3 no longer has.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .mounttable import covering_mount, find_mount

__all__ = ["open_resilient", "ResilientReader", "RETRYABLE_ERRNOS"]

log = logging.getLogger("mountctl")

# Retried until retry_for_s runs out; ENOENT too, but only while the file's FUSE mount is gone.
RETRYABLE_ERRNOS = frozenset({errno.ENOTCONN, errno.ECONNABORTED, errno.EIO, errno.ESTALE})

T = TypeVar("T")


def _gone(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "the S3 object behind this file was deleted while it was being read; "
                                           "rebuild the dataset's manifest or restore the object", path)


class ResilientReader(io.RawIOBase):
    """A raw, seekable, read-only file that survives its mount being replaced."""

    def __init__(self, path: str, *, retry_for_s: float = 120.0,
                 still_exists: Callable[[], bool] | None = None, expected_size: int | None = None,
                 size_in_s3: Callable[[], int | None] | None = None) -> None:
        super().__init__()
        self.name = path
        self._retry_for_s = retry_for_s
        self._size_in_s3 = size_in_s3
        if still_exists is None and size_in_s3 is not None:
            still_exists = lambda: size_in_s3() is not None  # noqa: E731
        self._still_exists = still_exists
        self._expected_size = expected_size
        self._offset = 0
        # The FUSE mount this file is opened through, read before the open so a remount that starts
        # right after a failed open cannot hide it; ENOENT is retried only while it is gone.
        entry = covering_mount(path)
        self._fuse_root = entry.mount_point if entry is not None and entry.is_fuse else None
        self._mount_id = entry.mount_id if entry is not None and entry.is_fuse else None
        # Set when the mount answered a read with a false end of file: reopening through that same mount
        # could be served what its program cached of the failed read (s3fs: zeros), so wait for a new one.
        self._distrusted_mount: int | None = None
        self._file: io.FileIO | None = None
        try:
            self._file = io.FileIO(path, "r")
        except OSError as exc:
            if exc.errno not in RETRYABLE_ERRNOS:
                raise  # a missing file fails at once, as open() does
            # Opened while the mount is being replaced: the first read opens it, retrying like any read.
        self.reopens = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._offset

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            target = offset
        elif whence == io.SEEK_CUR:
            target = self._offset + offset
        else:
            target = self._with_retry(lambda f: os.fstat(f.fileno()).st_size) + offset
        if target < 0:
            raise OSError(errno.EINVAL, "negative seek position")
        self._offset = target
        return target

    def readinto(self, buffer: Any) -> int:
        def read(f: io.FileIO) -> int:
            f.seek(self._offset)
            count = f.readinto(buffer) or 0
            if count == 0 and len(memoryview(buffer)) > 0 and self._ended_early(f):
                self._distrusted_mount = self._mount_id
                raise OSError(errno.EIO, f"the mount ended the file at byte {self._offset} of "
                                         f"{self._expected_size or 'more'} (its program may have lost access to "
                                         "S3: see its log)", self.name)
            return count

        count = self._with_retry(read)
        self._offset += count
        return count

    def _ended_early(self, f: io.FileIO) -> bool:
        """An end of file before the size the file has (its own, or the size S3 listed): not a real end.

        s3fs answers a read it cannot authorize as an empty file, even of size 0; S3 then says
        whether the object really is this short now (overwritten), when the caller says how to ask it.
        A file that is empty from its first byte is checked with S3 too: one request, only then.
        """
        size = max(os.fstat(f.fileno()).st_size, self._expected_size or 0)
        if self._offset >= size and not (self._offset == 0 and self._size_in_s3 is not None):
            return False
        if self._size_in_s3 is not None:
            try:
                now = self._size_in_s3()
            except Exception:  # S3 refuses us too, or is unreachable: the read failed
                return True
            if now is None:
                raise _gone(self.name)
            return self._offset < now
        return True

    def _retryable(self, exc: OSError) -> bool:
        if exc.errno == errno.ENOENT:
            if self._fuse_root is not None and find_mount(self._fuse_root) is None:
                return True  # the FUSE mount is being replaced: its directory is briefly empty
            raise _gone(self.name) from None  # the file system answers, and says the file is not there
        if exc.errno not in RETRYABLE_ERRNOS:
            return False
        if self._still_exists is not None:
            try:
                exists = self._still_exists()
            except Exception:  # S3 itself is unreachable: keep waiting for it
                exists = True
            if not exists:
                raise _gone(self.name) from None
        return True

    def _with_retry(self, operation: Callable[[io.FileIO], T]) -> T:
        deadline = time.monotonic() + self._retry_for_s
        delay = 0.05
        while True:
            try:
                if self._file is None:
                    self._wait_for_new_mount()
                    self._file = io.FileIO(self.name, "r")
                    self.reopens += 1
                    log.info("reopened %s at offset %d after the mount recovered", self.name, self._offset)
                return operation(self._file)
            except OSError as exc:
                if not self._retryable(exc) or time.monotonic() > deadline:
                    raise
                self._drop()
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _wait_for_new_mount(self) -> None:
        """Refuse (retryably) to reopen through the mount that answered a false end of file."""
        if self._distrusted_mount is None or self._fuse_root is None:
            return
        entry = find_mount(self._fuse_root)
        if entry is None or entry.mount_id == self._distrusted_mount:
            raise OSError(errno.EIO, "waiting for the mount to be replaced after it ended a file early", self.name)
        self._distrusted_mount, self._mount_id = None, entry.mount_id

    def _drop(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass  # closing a file of a dead mount can fail too; the handle is gone either way
            self._file = None

    def close(self) -> None:
        self._drop()
        super().close()


def open_resilient(path: str | os.PathLike[str], mode: str = "rb", *, buffering: int = 1 << 20,
                   retry_for_s: float = 120.0, still_exists: Callable[[], bool] | None = None,
                   expected_size: int | None = None,
                   size_in_s3: Callable[[], int | None] | None = None) -> io.BufferedReader:
    """Open ``path`` for reading like ``open(path, "rb")``, retrying through a remount.

    ``still_exists`` (optional) asks S3 whether the object is still there; with it a
    file deleted mid-read fails at once rather than after ``retry_for_s``.
    ``expected_size`` (the size S3 listed) makes an earlier end of file a failed read, retried;
    ``size_in_s3`` (the object's size now, None when it is gone) tells a really shorter object
    from that, and serves as ``still_exists`` too.
    """
    if mode not in ("r", "rb"):
        raise ValueError(f"open_resilient reads binary files only (mode 'rb'), not {mode!r}")
    raw = ResilientReader(os.fspath(path), retry_for_s=retry_for_s, still_exists=still_exists,
                          expected_size=expected_size, size_in_s3=size_in_s3)
    return io.BufferedReader(raw, buffer_size=buffering)
