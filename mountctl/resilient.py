"""``open_resilient``: read a file through a mount that may be remounted under the reader.

While the watchdog replaces a dead mount, reads of files opened through it fail
with ENOTCONN, ECONNABORTED, EIO or ESTALE.  This reader reopens the same
path once the mount answers again and seeks back to the byte it had reached,
so the caller sees one uninterrupted stream: no byte lost, none repeated.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import time

__all__ = ["open_resilient", "ResilientReader", "RETRYABLE_ERRNOS"]

log = logging.getLogger("mountctl")

RETRYABLE_ERRNOS = frozenset({errno.ENOTCONN, errno.ECONNABORTED, errno.EIO, errno.ESTALE, errno.ENOENT,
                              errno.ETIMEDOUT, errno.EAGAIN})


class ResilientReader(io.RawIOBase):
    """A raw, seekable, read-only file that survives its mount being replaced."""

    def __init__(self, path: str, *, retry_for_s: float = 120.0) -> None:
        super().__init__()
        self.name = path
        self._retry_for_s = retry_for_s
        self._offset = 0
        self._file: io.FileIO | None = io.FileIO(path, "r")  # a missing file fails at once, as open() does
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

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        def read(f: io.FileIO) -> int:
            f.seek(self._offset)
            return f.readinto(buffer) or 0

        count = self._with_retry(read)
        self._offset += count
        return count

    def _with_retry(self, operation):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + self._retry_for_s
        delay = 0.05
        while True:
            try:
                if self._file is None:
                    self._file = io.FileIO(self.name, "r")
                    self.reopens += 1
                    log.info("reopened %s at offset %d after the mount recovered", self.name, self._offset)
                return operation(self._file)
            except OSError as exc:
                if exc.errno not in RETRYABLE_ERRNOS or time.monotonic() > deadline:
                    raise
                self._drop()
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

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
                   retry_for_s: float = 120.0) -> io.BufferedReader:
    """Open ``path`` for reading like ``open(path, "rb")``, retrying through a remount."""
    if mode not in ("r", "rb"):
        raise ValueError(f"open_resilient reads binary files only (mode 'rb'), not {mode!r}")
    return io.BufferedReader(ResilientReader(os.fspath(path), retry_for_s=retry_for_s), buffer_size=buffering)
