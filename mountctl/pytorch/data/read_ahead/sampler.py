"""``ReadAheadSampler``: a standard sampler's order, with the next samples' files read through the mount first.

A standard map-style loader (torchvision ``ImageFolder``, ``DataLoader(shuffle=True)``) opens one file per
sample, with only as many files in flight as it has workers, so every open pays the store's round trips in
turn.  But its sampler runs in the main process and knows the order.  This wrapper draws from the wrapped
sampler up to ``ahead`` samples before it yields them, and a few daemon threads read those samples' files
through the mount, in that order, front to back into one reused buffer each: the bytes are dropped, what is
kept is the mount's cache (the page cache where the mount keeps it, else rclone's, s3fs's or mount-s3's data
cache), which the worker's open then hits.

Why reads and not ``posix_fadvise(WILLNEED)`` (measured: ``benchmarks/lab/fadvise_warm.py``): through
mount-s3, WILLNEED warmed small files but not 2 MB ones (it asks for one read-ahead window), where a read
warmed both; and it is asynchronous, saying nothing about when or whether the pages came, so neither the byte
bound nor the report could be kept.

The guarantees:

* The indices yielded are exactly the wrapped sampler's, each once, in its order: the look-ahead only
  buffers them.
* The sampler never waits on a read: it hands positions over under a lock that no read holds.
* Bounded: at most ``ahead`` samples drawn ahead, at most ``ahead_bytes`` read ahead of the sampler's
  cursor (both sized from the node's available memory by default: ``default_bounds``), one buffer per
  thread.  A read past ``READ_TIMEOUT_S`` (a hung mount) is walked away from: its daemon thread stays blocked
  in the kernel, holding nothing of ours, and another takes its place; after ``threads`` such reads the
  epoch's read-ahead stops, as the mount is not answering.
* A read that fails is counted and dropped: the worker's own read decides and reports.
* Never reads what is in memory already: before a read, ``mincore`` over the sample's pages says whether the
  kernel holds them all (the second epoch through a mount that keeps the page cache, or local disk); then it
  reads nothing (``ReadAheadReport.cached``).  Once ``BACK_OFF_AFTER`` samples in a row were in memory it looks at
  one drawn sample in ``PROBE_EVERY`` only and passes the rest, since even the look costs an open through the
  mount, on the cores the loader's workers decode on; the first sample not in memory (pages reclaimed, a new
  mount) brings every read back.  The state carries over to the next epoch.  ``back_off=False`` reads every
  drawn sample that is not in memory.  Where the pages cannot be asked about (no ``mmap`` on that file), the
  sample is read.
* Nothing outlives the iteration: when the epoch ends, or the loader stops early and drops its iterator,
  the threads stop after their current read; they are daemon threads, and the process's exit never waits
  for them.  Each file is closed by the read that opened it.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import heapq
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from dataclasses import dataclass, field
from typing import Any

from mountctl import available_memory_bytes
from mountctl.pytorch.errors import DatasetError

__all__ = ["ReadAheadSampler", "ReadAheadReport", "SampleFile", "sample_files", "default_bounds",
           "READ_TIMEOUT_S", "THREADS", "BACK_OFF_AFTER", "PROBE_EVERY", "resident"]

log = logging.getLogger("mountctl")

READ_TIMEOUT_S = 30.0  # past this a read is taken for hung and walked away from
THREADS = 32  # small files on a far store: ~3 round trips each, so the reads in flight set the rate
BUFFER_BYTES = 256 << 10  # each thread's one buffer
_LOOKS_PER_CHECK = 64  # yields between two looks for hung reads
BACK_OFF_AFTER = 32  # samples in a row found in memory before the read-ahead backs off
PROBE_EVERY = 16  # backed off: one drawn sample in this many is still looked at, to notice when that changes
_RESIDENT_BYTES = 64 << 20  # at most this much of a sample is asked about (one mapping, one mincore call)


@dataclass(frozen=True)
class SampleFile:
    """What sample ``i`` reads: ``path``, whole (``length`` None) or ``length`` bytes from ``offset``."""

    path: str
    offset: int = 0
    length: int | None = None


def sample_files(dataset: Any) -> Callable[[int], SampleFile]:
    """Each index's file, for the datasets that know it: torchvision's ``ImageFolder`` and ``DatasetFolder``
    (``samples[i][0]``) and mountctl's ``MapSampleDataset`` read through a mount or a directory."""
    reader = getattr(dataset, "reader", None)
    refs = getattr(dataset, "refs", None)
    if refs is not None and reader is not None:  # MapSampleDataset: names relative to its reader's root
        root = getattr(reader, "root", None)
        if root is None:
            raise DatasetError(f"ReadAheadSampler reads samples' files through a mount, but this dataset reads "
                               f"through {type(reader).__name__}, which has no files: use it with a dataset "
                               f"read through a mount (source kind mountpoint) or pass files=")
        names = dataset.names
        return lambda i: _ranged(os.path.join(root, names[refs[i].container]), refs[i])
    samples = getattr(dataset, "samples", None)
    if samples is not None and len(samples) and isinstance(samples[0], (tuple, list)) \
            and isinstance(samples[0][0], (str, os.PathLike)):
        return lambda i: SampleFile(os.fspath(samples[i][0]))
    raise DatasetError(f"ReadAheadSampler needs each index's file, and {type(dataset).__name__} does not say it "
                       f"(ImageFolder and DatasetFolder do, in samples[i][0]): pass files=lambda i: path_of_i")


def _ranged(path: str, ref: Any) -> SampleFile:
    return SampleFile(path, ref.offset or 0, ref.length)


def default_bounds(available_bytes: int | None = None) -> tuple[int, int]:
    """(samples, bytes) read ahead by default: a sixteenth of the node's available memory (64 MiB to 2 GiB),
    so that what was read is still cached when the worker opens it, and one sample per 64 KiB of that (256 to
    8,192), the count that bounds the look-ahead before any file's size is known."""
    available = available_memory_bytes() if available_bytes is None else available_bytes
    budget = min(max(available // 16, 64 << 20), 2 << 30)
    return min(max(budget // (64 << 10), 256), 8192), budget


@dataclass
class ReadAheadReport:
    """What one epoch's read-ahead did (``ReadAheadSampler.last``): counts, never the bytes themselves."""

    files: int = 0
    bytes: int = 0
    failed: int = 0
    skipped: int = 0  # drawn, but passed by the loader long before a thread got to it
    hung: int = 0  # reads walked away from after READ_TIMEOUT_S
    cached: int = 0  # drawn and not read: found in memory, or passed over while backed off
    first_error: str = ""
    seconds: float = 0.0
    _started: float = field(default_factory=time.monotonic, repr=False)

    def summary(self) -> str:
        text = f"read ahead {self.files} files, {self.bytes / 1e6:.1f} MB"
        for count, word in ((self.failed, "failed"), (self.skipped, "skipped"), (self.hung, "hung"),
                            (self.cached, "in memory already")):
            if count:
                text += f", {count} {word}"
        return text + (f" (first failure: {self.first_error})" if self.first_error else "")


class _Reads:
    """The daemon threads of one epoch and what they share; every wait of theirs is on ``_cond``, which no read
    holds, so the sampler's calls (``add``, ``advance``) return at once."""

    def __init__(self, file_of: Callable[[int], SampleFile], *, threads: int, ahead: int, ahead_bytes: int,
                 timeout_s: float, report: ReadAheadReport, back_off: bool = True,
                 backed_off: bool = False) -> None:
        self._file_of = file_of
        self._ahead, self._ahead_bytes, self._timeout_s = ahead, ahead_bytes, timeout_s
        self._back_off = back_off
        self.backed_off = backed_off and back_off
        self._in_memory_in_a_row = BACK_OFF_AFTER if self.backed_off else 0
        self._since_probe = 0
        self._threads = max(1, threads)
        self.report = report
        self._cond = threading.Condition()
        self._tasks: collections.deque[tuple[int, int]] = collections.deque()  # (position, index) to read
        self._read_ahead: list[tuple[int, int]] = []  # a heap of (position, bytes) read and not yet yielded
        self._read_ahead_bytes = 0
        self._cursor = 0  # positions yielded so far
        self._stopped = False
        self._busy: dict[int, float] = {}  # thread number -> when its read began
        self._walked_away: set[int] = set()
        self._next_number = 0
        self._advances = 0
        for _ in range(self._threads):
            self._spawn()

    def _spawn(self) -> None:
        number, self._next_number = self._next_number, self._next_number + 1
        threading.Thread(target=self._run, args=(number,), name=f"mountctl-read-ahead-{number}", daemon=True).start()

    def add(self, position: int, index: int) -> None:
        with self._cond:
            self._tasks.append((position, index))
            self._cond.notify()

    def advance(self, cursor: int) -> None:
        """The sampler has yielded ``cursor`` samples: bytes read for them no longer count against the bound."""
        with self._cond:
            self._cursor = cursor
            was_full = self._read_ahead_bytes >= self._ahead_bytes
            while self._read_ahead and self._read_ahead[0][0] < cursor:
                self._read_ahead_bytes -= heapq.heappop(self._read_ahead)[1]
            if was_full and self._read_ahead_bytes < self._ahead_bytes:
                self._cond.notify_all()  # only then: a wake-up of every thread per sample would cost the cores
            self._advances += 1
            if self._advances % _LOOKS_PER_CHECK == 0:
                self._replace_hung()

    def _replace_hung(self) -> None:
        """Walk away from reads past the timeout (call under ``_cond``); after ``threads`` of them, stop."""
        now = time.monotonic()
        for number, began in list(self._busy.items()):
            if now - began > self._timeout_s and number not in self._walked_away:
                self._walked_away.add(number)
                self.report.hung += 1
                if self.report.hung >= self._threads:
                    log.warning("read-ahead: %d reads gave nothing in %g s: the mount is not answering; this "
                                "epoch reads no further ahead (the loader's own reads go on)",
                                self.report.hung, self._timeout_s)
                    self._stopped = True
                    self._cond.notify_all()
                    return
                self._spawn()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._tasks.clear()
            self._cond.notify_all()
            self.report.seconds = round(time.monotonic() - self.report._started, 3)

    def _next_task(self, number: int) -> tuple[int, int] | None:
        with self._cond:
            while True:
                if self._stopped or number in self._walked_away:
                    return None
                while self._tasks and self._tasks[0][0] < self._cursor - self._ahead:
                    self._tasks.popleft()  # long yielded: its worker has read it by now
                    self.report.skipped += 1
                if self._tasks and self._read_ahead_bytes < self._ahead_bytes:
                    task = self._tasks.popleft()
                    if self.backed_off:
                        self._since_probe += 1
                        if self._since_probe < PROBE_EVERY:
                            self.report.cached += 1
                            continue
                        self._since_probe = 0
                    self._busy[number] = time.monotonic()
                    return task
                self._cond.wait(1.0)  # bounded: a stop is also noticed without a notify

    def _run(self, number: int) -> None:
        buffer = bytearray(BUFFER_BYTES)
        while True:
            task = self._next_task(number)
            if task is None:
                return
            position, index = task
            try:
                size, in_memory, error = *read_unless_resident(self._file_of(index), buffer), ""
            except Exception as exc:  # noqa: BLE001  any failure is the worker's to meet and report, not ours
                size, in_memory, error = 0, False, f"{type(exc).__name__}: {exc}"
            with self._cond:
                self._busy.pop(number, None)
                if error:
                    self.report.failed += 1
                    self.report.first_error = self.report.first_error or error
                    continue
                self._judge(in_memory)
                if in_memory:
                    self.report.cached += 1
                    continue
                self.report.files += 1
                self.report.bytes += size
                if position >= self._cursor:
                    heapq.heappush(self._read_ahead, (position, size))
                    self._read_ahead_bytes += size


    def _judge(self, in_memory: bool) -> None:
        """Back off after ``BACK_OFF_AFTER`` samples in a row in memory; one that is not ends it (under ``_cond``)."""
        if in_memory and self._back_off:
            self._in_memory_in_a_row += 1
            if self._in_memory_in_a_row >= BACK_OFF_AFTER and not self.backed_off:
                self.backed_off, self._since_probe = True, 0
                log.debug("read-ahead: %d samples in a row were in memory: looking at one in %d until one is not",
                          self._in_memory_in_a_row, PROBE_EVERY)
        else:
            self._in_memory_in_a_row = 0
            self.backed_off = False


def read_unless_resident(sample: SampleFile, buffer: bytearray) -> tuple[int, bool]:
    """(bytes read, whether ``sample`` was in memory already): nothing is read when the kernel holds all its pages."""
    fd = os.open(sample.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        length = sample.length if sample.length is not None else os.fstat(fd).st_size - sample.offset
        if resident(fd, sample.offset, length):
            return 0, True
        return _read_fd(fd, sample, buffer), False
    finally:
        os.close(fd)


def read_through(sample: SampleFile, buffer: bytearray) -> int:
    """Read ``sample`` into ``buffer`` over and over (the bytes are not kept); return how many came."""
    fd = os.open(sample.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return _read_fd(fd, sample, buffer)
    finally:
        os.close(fd)


def _read_fd(fd: int, sample: SampleFile, buffer: bytearray) -> int:
    view, done, at = memoryview(buffer), 0, sample.offset
    while sample.length is None or done < sample.length:
        want = len(view) if sample.length is None else min(len(view), sample.length - done)
        got = os.preadv(fd, [view[:want]], at)
        if got == 0:
            break
        done, at = done + got, at + got
    return done


class _Libc:
    """mmap, munmap and mincore through ctypes, loaded once; ``None`` where the C library lacks them."""

    loaded: Any = None
    tried = False

    @classmethod
    def get(cls) -> Any:
        if not cls.tried:
            cls.tried = True
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
                libc.mmap.restype = ctypes.c_void_p
                libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_long]
                libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
                libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
                cls.loaded = libc
            except (OSError, AttributeError):
                cls.loaded = None
        return cls.loaded


_MAP_FAILED = ctypes.c_void_p(-1).value


def resident(fd: int, offset: int, length: int) -> bool:
    """Whether the kernel holds every page of ``length`` bytes at ``offset`` of ``fd`` (at most the first 64 MiB
    are asked about).  Maps the range without touching it and asks ``mincore``, so nothing is read or brought in.
    False where it cannot be told (no ``mmap`` for this file, as on a mount that opens files for direct I/O)."""
    libc = _Libc.get()
    if libc is None or length <= 0:
        return False
    start = offset - offset % mmap.PAGESIZE
    span = min(length, _RESIDENT_BYTES) + (offset - start)
    address = libc.mmap(None, span, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
    if address is None or address == _MAP_FAILED:
        return False
    try:
        pages = (span + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vector = ctypes.create_string_buffer(pages)
        if libc.mincore(address, span, vector) != 0:
            return False
        return all(byte & 1 for byte in vector.raw[:pages])
    finally:
        libc.munmap(address, span)


def _indices(item: Any) -> list[int]:
    """The dataset indices in one item of a sampler: an int, ``(epoch, index)``, or a batch of either."""
    if isinstance(item, (list, tuple)):
        if len(item) == 2 and all(isinstance(x, int) for x in item) and isinstance(item, tuple):
            return [int(item[1])]  # ExactlyOnceBatchSampler's (epoch, index)
        return [i for part in item for i in _indices(part)]
    return [int(item)]


class ReadAheadSampler:
    """``DataLoader(ds, sampler=ReadAheadSampler(ds, RandomSampler(ds)), ...)``: the wrapped sampler's indices,
    in its order, with the next ones' files read ahead through the mount on daemon threads.

    ``files`` says index ``i``'s file for a dataset that ``sample_files`` does not know. ``ahead`` and
    ``ahead_bytes`` bound the read-ahead (default: ``default_bounds``), ``threads`` the reads in flight.
    A sample whose pages are all in memory is not read; after ``BACK_OFF_AFTER`` such samples in a row only one
    drawn sample in ``PROBE_EVERY`` is looked at, until one is not in memory (``back_off=False``: every one is).
    Also wraps a batch sampler (pass it as ``batch_sampler=``): each batch's indices are read ahead.
    """

    def __init__(self, dataset: Any, sampler: Iterable[Any], *, files: Callable[[int], SampleFile | str] | None = None,
                 ahead: int | None = None, ahead_bytes: int | None = None, threads: int = THREADS,
                 timeout_s: float = READ_TIMEOUT_S, back_off: bool = True) -> None:
        default_ahead, default_bytes = default_bounds()
        self.ahead = default_ahead if ahead is None else ahead
        self.ahead_bytes = default_bytes if ahead_bytes is None else ahead_bytes
        if self.ahead < 1 or self.ahead_bytes < 1 or threads < 1 or timeout_s <= 0:
            raise DatasetError(f"ReadAheadSampler needs ahead, ahead_bytes, threads >= 1 and a timeout > 0, not "
                               f"ahead={self.ahead}, ahead_bytes={self.ahead_bytes}, threads={threads}, "
                               f"timeout_s={timeout_s}")
        self.sampler = sampler
        self.threads = threads
        self.timeout_s = timeout_s
        self.back_off = back_off
        self._backed_off = False  # how the latest epoch ended: the next one starts so
        if files is None:
            self._file_of = sample_files(dataset)
        else:
            given = files
            self._file_of = lambda i: _as_sample_file(given(i))
        self.last: ReadAheadReport | None = None  # the latest epoch's (it fills while the epoch runs)

    def __len__(self) -> int:
        if not isinstance(self.sampler, Sized):
            raise TypeError(f"the wrapped sampler {type(self.sampler).__name__} has no length")
        return len(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        """Passed on (``DistributedSampler``, ``ExactlyOnceBatchSampler``): the wrapped sampler's shuffle."""
        set_epoch = getattr(self.sampler, "set_epoch", None)
        if set_epoch is not None:
            set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        report = ReadAheadReport()
        self.last = report
        return self._epoch(report)

    def _epoch(self, report: ReadAheadReport) -> Iterator[Any]:
        source = iter(self.sampler)
        window: collections.deque[Any] = collections.deque()
        reads = _Reads(self._file_of, threads=self.threads, ahead=self.ahead, ahead_bytes=self.ahead_bytes,
                       timeout_s=self.timeout_s, report=report, back_off=self.back_off, backed_off=self._backed_off)
        drawn = yielded = 0  # samples (indices), not items: a batch counts its size
        exhausted = False
        try:
            while True:
                while not exhausted and drawn - yielded < self.ahead:
                    item = next(source, _END)
                    if item is _END:
                        exhausted = True
                        break
                    window.append(item)
                    for index in _indices(item):
                        reads.add(drawn, index)
                        drawn += 1
                if not window:
                    return
                item = window.popleft()
                yielded += len(_indices(item))
                reads.advance(yielded)
                yield item
        finally:  # the epoch ended, or the loader dropped its iterator: the threads stop after their read
            reads.stop()
            self._backed_off = reads.backed_off
            if report.failed or report.hung:
                log.info("read-ahead: %s", report.summary())


_END = object()


def _as_sample_file(given: SampleFile | str | os.PathLike[str]) -> SampleFile:
    return given if isinstance(given, SampleFile) else SampleFile(os.fspath(given))
