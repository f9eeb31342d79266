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

An S3 outage looks the same from here (s3fs answers ENOENT or EIO while the store
is down; rclone blocks the read), so "deleted" is said only when ``still_exists``
gets an answer from the store saying the object is gone: an exception from it
(the store unreachable) keeps the retry going.  An outage shorter than the bound
(``outage_bound_s``: 120 s, or ``MOUNTCTL_OUTAGE_BOUND_S``) never fails a read.
While a read is stalled for more than ``STALL_NOTICE_S`` one warning line says the
store is not answering and the mount is retrying, and one line says when reads
resumed (one pair per process and outage, however many files are open; a shorter stall in the
``SAME_OUTAGE_S`` after reads resumed is the outage's tail, as the program's retries back off).

A remount, an outage or a resume can put another version of the object behind the same
path.  Given a ``VersionPin`` (``pin``), every reopen asks S3 for the object's ETag (one
HEAD) before a byte of the new handle is joined to those already read, and a different
ETag fails the read with ``ObjectChanged``, naming the object; the first open asks too,
to check the index's ETag or to pin the one it finds.  A store that does not answer that
HEAD at a reopen is waited for like any outage; at the first open it is not (the read
goes on, checked at its reopens against the index's ETag when there is one).
"""

from __future__ import annotations

import errno
import io
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..abandonable import AbandonableCaller
from ..backoff import OUTAGE_BOUND_ENV, outage_bound_s
from ..errors import ObjectChanged
from .mounttable import covering_mount, find_mount
from .object_version import VersionPin

__all__ = ["open_resilient", "ResilientReader", "RETRYABLE_ERRNOS", "outage_bound_s", "OUTAGE_BOUND_ENV",
           "STALL_NOTICE_S"]

log = logging.getLogger("mountctl")

# Retried until retry_for_s runs out; ENOENT too, but only while the file's FUSE mount is gone.
RETRYABLE_ERRNOS = frozenset({errno.ENOTCONN, errno.ECONNABORTED, errno.EIO, errno.ESTALE})

T = TypeVar("T")
# How long a reader waits for a mount that ended a file early to be replaced before reading through it again.
_DISTRUST_S = 10.0

STALL_NOTICE_S = 5.0  # a read stalled this long is reported (once per outage and process)
# After reads resumed, a stall that begins within this long is the same outage's tail: the mount program's
# requests that failed during it come back through their retry backoff (mount-s3's longest is 20 s), so the
# next read may wait again. Such a stall is reported only past STALL_NOTICE_S plus this.
SAME_OUTAGE_S = 30.0


class _StoreNotAnswering(TimeoutError):
    """A read that outlasted the outage bound inside the mount program: failed, not retried."""


def _gone(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "the S3 object behind this file was deleted while it was being read "
                                           "(the store answered that it no longer has it); rebuild the dataset's "
                                           "manifest or restore the object", path)


def _vanished(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "this file disappeared from its mount while it was being read; if its "
                                           "S3 object was deleted, rebuild the dataset's manifest or restore it "
                                           "(pass still_exists to open_resilient to tell an S3 outage from a "
                                           "deletion)", path)


class _StallWatch:
    """Notices reads that have not returned for ``notice_s``: one line when they stall, one when they resume.

    A stall that begins less than ``same_outage_s`` after reads resumed is the outage's tail (the program's retries
    catching up), reported only once it has lasted ``notice_s + same_outage_s``: one outage, one pair of lines.

    A daemon thread looks at the operations in flight twice a second, so a read blocked in
    the kernel (rclone waits for the store inside the read) is reported while it blocks.
    """

    def __init__(self, notice_s: float = STALL_NOTICE_S, same_outage_s: float = SAME_OUTAGE_S) -> None:
        self.notice_s, self.same_outage_s = notice_s, same_outage_s
        self._pid = -1
        self._reset()

    def _reset(self) -> None:  # also after fork: the parent's thread and lock are not ours
        self._lock = threading.Lock()
        self._ops: dict[int, tuple[float, str]] = {}
        self._next = 0
        self._stalled_since: float | None = None
        self._resumed_at: float | None = None  # when the last reported stall ended
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def begin(self, name: str) -> int:
        if self._pid != os.getpid():
            self._reset()
        with self._lock:
            self._next += 1
            self._ops[self._next] = (time.monotonic(), name)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mountctl-stall-watch", daemon=True)
                self._thread.start()
            return self._next

    def end(self, token: int, ok: bool) -> None:
        with self._lock:
            started, name = self._ops.pop(token, (time.monotonic(), ""))
            since = self._stalled_since
            if since is None or started > since:
                return  # not the read that stalled (a cached read can succeed while the store is down)
            self._stalled_since = None
            if ok:
                self._resumed_at = time.monotonic()
        if ok:
            log.warning("S3 store answering again: reads through the mount resumed after %.1fs (%s)",
                        time.monotonic() - since, name)

    def _run(self) -> None:
        while True:
            time.sleep(min(0.5, self.notice_s / 4))
            with self._lock:
                if self._stalled_since is not None or not self._ops:
                    continue
                started, name = min(self._ops.values())
                tail = self._resumed_at is not None and started - self._resumed_at < self.same_outage_s
                if time.monotonic() - started < self.notice_s + (self.same_outage_s if tail else 0.0):
                    continue
                self._stalled_since = started
            log.warning("S3 store unreachable or not answering: a read of %s has waited %.0fs; the mount is "
                        "retrying, and reads go on waiting up to %gs (%s) before they fail", name,
                        time.monotonic() - started, outage_bound_s(), OUTAGE_BOUND_ENV)


_stalls = _StallWatch()


class ResilientReader(io.RawIOBase):
    """A raw, seekable, read-only file that survives its mount being replaced."""

    def __init__(self, path: str, *, retry_for_s: float | None = None,
                 still_exists: Callable[[], bool] | None = None, expected_size: int | None = None,
                 size_in_s3: Callable[[], int | None] | None = None, pin: VersionPin | None = None) -> None:
        super().__init__()
        self.name = path
        self._pin = pin
        self._opened = False  # whether a handle was ever opened: every later open is a reopen at an offset
        self._retry_for_s = outage_bound_s() if retry_for_s is None else retry_for_s
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
        self._distrusted_since = 0.0
        self._file: io.FileIO | None = None
        self._caller = AbandonableCaller()
        self.reopens = 0
        try:
            self._file = self._open_checked()
        except OSError as exc:
            if exc.errno == errno.ENOENT and not self._store_may_still_have_it():
                raise  # a missing file fails at once, as open() does
            if exc.errno != errno.ENOENT and exc.errno not in RETRYABLE_ERRNOS:
                raise
            # Opened while the mount is being replaced or the store is down: the first read opens it, retrying.

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
        view = memoryview(buffer).cast("B")

        def read(f: io.FileIO) -> int:
            data = self._bounded_read(f, self._offset, len(view))
            count = len(data)
            view[:count] = data
            if count == 0 and len(view) > 0 and self._ended_early(f):
                if self._distrusted_mount is None:
                    self._distrusted_since = time.monotonic()
                self._distrusted_mount = self._mount_id
                raise OSError(errno.EIO, f"the mount ended the file at byte {self._offset} of "
                                         f"{self._expected_size or 'more'} (its program may have lost access to "
                                         "S3: see its log)", self.name)
            return count

        count = self._with_retry(read)
        self._offset += count
        return count

    def _bounded_read(self, f: io.FileIO, offset: int, size: int) -> bytes:
        """``pread`` through the mount, abandoned when it has not returned within the outage bound.

        A store that accepts connections and never answers holds a read inside the mount program
        for that program's own timeouts (minutes, rclone); the bound is ours, not theirs.
        """
        try:
            # The call holds ``f``: an abandoned read keeps its handle alive in its own thread.  Closing it
            # here (or letting it be collected) would send FLUSH to the stuck mount and block this thread too.
            return self._caller.call(lambda: os.pread(f.fileno(), size, offset), self._retry_for_s)
        except TimeoutError:
            self._file = None
            raise _StoreNotAnswering(errno.ETIMEDOUT, f"the S3 store has not answered a read through the mount "
                                     f"for {self._retry_for_s:g}s (it accepts connections but does not reply); "
                                     f"check the store, or raise {OUTAGE_BOUND_ENV}", self.name) from None

    def _store_may_still_have_it(self) -> bool:
        """False only when the store answered that the object is gone; unreachable means it may be there."""
        if self._fuse_root is not None and find_mount(self._fuse_root) is None:
            return True  # the FUSE mount is being replaced: its directory is briefly empty
        if self._still_exists is None:
            return False  # nobody to ask: the file system's answer stands
        try:
            return bool(self._still_exists())
        except Exception:  # the store is unreachable (or not sure): an outage, not a deletion
            return True

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
            # s3fs answers ENOENT while the store is down: only the store itself may say "deleted".
            if self._store_may_still_have_it():
                return True
            raise (_gone(self.name) if self._still_exists is not None else _vanished(self.name)) from None
        if exc.errno not in RETRYABLE_ERRNOS:
            return False
        if self._still_exists is not None and not self._store_may_still_have_it():
            raise _gone(self.name) from None
        return True

    def _with_retry(self, operation: Callable[[io.FileIO], T]) -> T:
        token = _stalls.begin(self.name)
        ok = False
        try:
            result = self._retry(operation)
            ok = True
            return result
        finally:
            _stalls.end(token, ok)

    def _retry(self, operation: Callable[[io.FileIO], T]) -> T:
        started = time.monotonic()
        deadline = started + self._retry_for_s
        delay = 0.05
        while True:
            try:
                if self._file is None:
                    self._wait_for_new_mount()
                    self._file = self._open_checked()
                    self.reopens += 1
                    log.info("reopened %s at offset %d after the mount recovered", self.name, self._offset)
                return operation(self._file)
            except _StoreNotAnswering:
                raise  # the whole bound went by inside one read: nothing left to retry with
            except OSError as exc:
                if not self._retryable(exc):
                    raise
                if time.monotonic() > deadline:
                    raise OSError(exc.errno, f"reads through the mount kept failing for "
                                  f"{time.monotonic() - started:.0f}s ({exc.strerror}); the S3 store or the mount "
                                  f"did not come back within the bound: check the store, or raise "
                                  f"{OUTAGE_BOUND_ENV} (now {self._retry_for_s:g}s)", self.name) from exc
                self._drop()
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _open_checked(self) -> io.FileIO:
        """Open the path; with a pin, refuse a handle to another version of the object than the one read so far.

        The HEAD comes after the open: an object replaced between the two is then seen as changed,
        never the other way round.
        """
        file = io.FileIO(self.name, "r")
        try:
            self._check_version(reopened=self._opened)
        except BaseException:
            file.close()
            raise
        self._opened = True
        return file

    def _check_version(self, *, reopened: bool) -> None:
        pin = self._pin
        if pin is None or not pin.can_ask:
            return
        if reopened and pin.etag is None:
            log.warning("reopening %s: the version read before is not known (S3 did not answer at the first "
                        "open), so a change of the object cannot be told from here", self.name)
        try:
            present = pin.verify()
        except ObjectChanged:
            raise
        except Exception as exc:  # the store does not answer: at a reopen, wait for it like for any outage
            if not reopened:
                log.debug("could not read the ETag of %s at its first open (%s); checking at reopens", pin.uri, exc)
                return
            raise OSError(errno.EIO, f"cannot ask S3 which version of the object this is ({type(exc).__name__}); "
                                     "waiting for the store before joining bytes", self.name) from exc
        if not present:
            raise _gone(self.name)

    def _wait_for_new_mount(self) -> None:
        """Refuse (retryably) to reopen through the mount that answered a false end of file."""
        if self._distrusted_mount is None or self._fuse_root is None:
            return
        entry = find_mount(self._fuse_root)
        # Bounded: a mount that is not replaced within _DISTRUST_S is read through again (its early end may
        # have been a passing one; the retry bound still ends a read that keeps failing).
        if (entry is None or entry.mount_id == self._distrusted_mount) \
                and time.monotonic() - self._distrusted_since < _DISTRUST_S:
            raise OSError(errno.EIO, "waiting for the mount to be replaced after it ended a file early", self.name)
        self._distrusted_mount = None
        if entry is not None:
            self._mount_id = entry.mount_id

    def _drop(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass  # closing a file of a dead mount can fail too; the handle is gone either way
            self._file = None

    def close(self) -> None:
        self._drop()
        self._caller.close()
        super().close()


def open_resilient(path: str | os.PathLike[str], mode: str = "rb", *, buffering: int = 1 << 20,
                   retry_for_s: float | None = None, still_exists: Callable[[], bool] | None = None,
                   expected_size: int | None = None,
                   size_in_s3: Callable[[], int | None] | None = None,
                   pin: VersionPin | None = None) -> io.BufferedReader:
    """Open ``path`` for reading like ``open(path, "rb")``, retrying through a remount or an S3 outage.

    ``retry_for_s`` bounds the wait (default ``outage_bound_s()``).  ``still_exists``
    (optional) asks S3 whether the object is still there: it returns False only when the
    store answers "no such object" and raises when the store does not answer.  With it a
    file deleted mid-read fails at once, and ENOENT from a mount whose store is down
    (s3fs) is waited out; without it ENOENT from a mounted file system fails at once.
    ``expected_size`` (the size S3 listed) makes an earlier end of file a failed read, retried;
    ``size_in_s3`` (the object's size now, None when the store answers that it is gone, raising
    when it does not answer) tells a really shorter object from that, and serves as ``still_exists`` too.
    ``pin`` (a ``VersionPin`` that can ask S3) makes every reopen refuse another version of the object
    with ``ObjectChanged`` instead of joining its bytes to those already read.
    """
    if mode not in ("r", "rb"):
        raise ValueError(f"open_resilient reads binary files only (mode 'rb'), not {mode!r}")
    raw = ResilientReader(os.fspath(path), retry_for_s=retry_for_s, still_exists=still_exists,
                          expected_size=expected_size, size_in_s3=size_in_s3, pin=pin)
    return io.BufferedReader(raw, buffer_size=buffering)
