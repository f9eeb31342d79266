"""Plan-driven read-ahead: warm a reader's next shards into the mount's cache while it parses this one.

A reader (a rank's DataLoader worker) knows from the exactly-once plan the
shards it will open, in order.  A ``ShardCacheWarmer`` reads the next ``shards_ahead``
of them through the mount, front to back in 1 MiB blocks, so the mount
program's disk cache holds them when the reader gets there.  Bounds: one
thread and one block buffer per reader, never more than ``shards_ahead``
shards warmed ahead of the reader, and at most ``slots`` shards being warmed
at once on the node (a warmer holds one of that many file locks in the record
directory while it reads): ``warm_slots`` sizes that by the node's readers, so
that the store sees at most twice the streams the readers alone would open.  Once per node: every shard is claimed in
a record directory next to the mount's cache (a file created with O_EXCL), by
a warmer before it warms it and by a reader before it opens it, so no shard
is fetched twice on the node however many ranks and workers read.  The record
lives and dies with the mount's cache; a claim's file says ``warmed`` once its
shard was read through whole (what an operator, or a test, can wait on).  A warm read that fails (the watchdog
remounting: ENOTCONN) is retried by ``open_resilient``; one that still fails
is dropped, since the reader reads the shard itself anyway.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from collections.abc import Iterator, Sequence

__all__ = ["ShardCacheWarmer", "claim", "warmed", "warm_slot", "warm_slots", "WARM_SLOTS", "MAX_WARM_SLOTS",
           "BLOCK"]

log = logging.getLogger("mountctl")

BLOCK = 1 << 20  # each warmer's one read buffer (FUSE hands out at most this much per request anyway)
WARM_SLOTS = 2  # the fewest shards warmed at once per node, over all ranks and workers
MAX_WARM_SLOTS = 16  # and the most: each one is a file's prefetch window in the mount program's memory


def warm_slots(readers_on_node: int) -> int:
    """Shards warmed at once on a node of ``readers_on_node`` readers (every rank's DataLoader workers): one per
    reader, so each reader's next shard streams beside the one it parses, within [WARM_SLOTS, MAX_WARM_SLOTS].

    Two per node starved a node of many readers (each warm waited for a slot while its reader caught up), and
    more than one per reader only moves the wait to the store."""
    return max(WARM_SLOTS, min(MAX_WARM_SLOTS, readers_on_node))


@contextlib.contextmanager
def warm_slot(record_dir: str, stop: threading.Event, slots: int = WARM_SLOTS) -> Iterator[bool]:
    """Hold one of the node's ``slots`` (True), waiting for a free one; False if stopped first."""
    fds = [os.open(os.path.join(record_dir, f".slot-{i}"), os.O_RDWR | os.O_CREAT, 0o600) for i in range(slots)]
    try:
        while not stop.is_set():
            for fd in fds:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                try:
                    yield True
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                return
            stop.wait(0.05)
        yield False
    finally:
        for fd in fds:
            os.close(fd)


def claim(record_dir: str, name: str) -> bool:
    """True for the first caller on the node to claim shard ``name``; False for every later one."""
    try:
        os.close(os.open(os.path.join(record_dir, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    except OSError:  # the record is gone (mount stopped) or its disk is full: do not warm
        return False
    return True


def _mark_warmed(record_dir: str, name: str) -> None:
    with contextlib.suppress(OSError), open(os.path.join(record_dir, name), "w", encoding="ascii") as f:
        f.write("warmed\n")


def warmed(record_dir: str, name: str) -> bool:
    """Whether shard ``name`` was warmed whole on this node (False while it is claimed and being read)."""
    try:
        with open(os.path.join(record_dir, name), encoding="ascii") as f:
            return f.read().strip() == "warmed"
    except OSError:
        return False


class ShardCacheWarmer:
    """Warms ``names[i+1 : i+1+shards_ahead]`` while the reader is at shard ``i`` (see ``at``)."""

    def __init__(self, root: str, names: Sequence[str], record_dir: str, *, shards_ahead: int = 2,
                 slots: int = WARM_SLOTS, retry_for_s: float = 60.0) -> None:
        self.root, self.names, self.record_dir = root, list(names), record_dir
        self.shards_ahead = shards_ahead
        self.slots = slots
        self.retry_for_s = retry_for_s
        self.warmed: list[str] = []  # shards this warmer fetched, in order
        self.most_ahead = 0  # the most shards it ever had warmed ahead of the reader
        self.bytes_warmed = 0
        self._position = -1
        self._next = 0
        self._changed = threading.Condition()
        self._stop = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mountctl-readahead", daemon=True)

    def start(self) -> "ShardCacheWarmer":
        self._thread.start()
        return self

    def at(self, index: int) -> None:
        """The reader is about to read shard ``index``: claim it, and let the warmer run ahead of it."""
        claim(self.record_dir, self.names[index])
        with self._changed:
            self._position = index
            self._changed.notify()

    def stop(self, timeout_s: float = 10.0) -> None:
        with self._changed:
            self._stop = True
            self._stopped.set()
            self._changed.notify()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _wanted(self) -> int | None:
        """The next shard to consider, once it is within the bound ahead of the reader (who has begun)."""
        if self._position < 0:
            return None
        self._next = max(self._next, self._position + 1)
        if self._next >= len(self.names) or self._next > self._position + self.shards_ahead:
            return None
        return self._next

    def _run(self) -> None:
        from mountctl import open_resilient

        buffer = bytearray(BLOCK)
        while True:
            with self._changed:
                index = self._wanted()
                while index is None and not self._stop:
                    if self._next >= len(self.names):
                        return
                    self._changed.wait()
                    index = self._wanted()
                if self._stop or index is None:
                    return
                self._next = index + 1
                self.most_ahead = max(self.most_ahead, index - self._position)
            name = self.names[index]
            if not claim(self.record_dir, name):
                continue
            try:
                with warm_slot(self.record_dir, self._stopped, self.slots) as held:
                    if not held:
                        return
                    self.warmed.append(name)
                    with open_resilient(os.path.join(self.root, name), retry_for_s=self.retry_for_s) as stream:
                        while not self._stop and (got := stream.readinto(buffer)):
                            self.bytes_warmed += got
                    if not self._stop:
                        _mark_warmed(self.record_dir, name)
            except (OSError, ValueError) as exc:  # the reader reads it anyway; warming is only a hint
                log.info("read-ahead of %s dropped: %s", name, exc)
