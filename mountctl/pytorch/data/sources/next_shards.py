"""A reader's next shards, read into memory on threads while it decodes the current one.

Mountpoint reads ahead inside one open file only; a DataLoader worker that reads its shards one after another
waits for each shard's first bytes, then decodes while nothing is read. The worker knows its next shards from the
exactly-once plan, so each of them is opened and read (whole, when small) on a thread of its own while the worker
decodes: the decoding hides the round trips. The bytes are read once, through the same resilient, version-pinned
open as the worker's own read, so a remount is ridden out and a replaced object is refused, at that shard's turn.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO

__all__ = ["NextShards", "read_in_memory", "shards_in_memory", "SHARD_IN_MEMORY_BYTES", "NODE_IN_MEMORY_BYTES",
           "MAX_SHARDS_AHEAD"]

# A shard is held in memory up to this size; past it the rest streams from the open file (Mountpoint's own
# prefetcher reads ahead inside a large file, so the round trips left to hide are those between small ones).
SHARD_IN_MEMORY_BYTES = 32 << 20
# What the readers of one node may hold ahead in all, and the most shards one reader reads ahead.
NODE_IN_MEMORY_BYTES = 1 << 30
MAX_SHARDS_AHEAD = 4
_CHUNK = 1 << 20
_TAKE_BOUND_S = 600.0  # as the loader's bound on one batch: each read on the thread is bounded on its own


def shards_in_memory(readers_on_node: int, total_memory: int | None = None) -> int:
    """Shards each reader reads ahead: what the node's share (at most 1 GiB, at most 1/16 of its memory) allows
    at ``SHARD_IN_MEMORY_BYTES`` each, from 1 (64 readers) to ``MAX_SHARDS_AHEAD`` (a few readers)."""
    if total_memory is None:
        total_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    budget = min(NODE_IN_MEMORY_BYTES, total_memory // 16) // max(1, readers_on_node)
    return max(1, min(MAX_SHARDS_AHEAD, budget // SHARD_IN_MEMORY_BYTES))


class _Joined(io.RawIOBase):
    """The bytes read ahead, then the rest of the still open stream."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        super().__init__()
        self._head = memoryview(head)
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._head:
            count = min(len(view), len(self._head))
            view[:count] = self._head[:count]
            self._head = self._head[count:]
            return count
        return self._rest.readinto(view)  # type: ignore[attr-defined]

    def close(self) -> None:
        self._rest.close()
        super().close()


def read_in_memory(stream: BinaryIO, limit: int = SHARD_IN_MEMORY_BYTES,
                   stop: threading.Event | None = None) -> BinaryIO | None:
    """``stream`` read whole into memory (and closed) when it ends within ``limit`` bytes; else what was read,
    then the rest of it. None when ``stop`` is set first (the stream closed)."""
    chunks: list[bytes] = []
    held = 0
    try:
        while held <= limit:
            if stop is not None and stop.is_set():
                stream.close()
                return None
            chunk = stream.read(_CHUNK)
            if not chunk:
                stream.close()
                return io.BytesIO(b"".join(chunks))
            chunks.append(chunk)
            held += len(chunk)
    except BaseException:
        stream.close()
        raise
    return io.BufferedReader(_Joined(b"".join(chunks), stream), buffer_size=_CHUNK)


class _Ahead:
    """One shard opened and read on a thread of its own; ``take`` hands it over or raises what the read raised."""

    def __init__(self, name: str, open_one: Callable[[], BinaryIO]) -> None:
        self.name = name
        self._open = open_one
        self._stop = threading.Event()
        self._done = threading.Event()
        self._stream: BinaryIO | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"mountctl-ahead-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._stream = read_in_memory(self._open(), stop=self._stop)
        except BaseException as exc:  # noqa: BLE001  raised at this shard's turn, in the reader
            self._error = exc
        finally:
            self._done.set()
        if self._stop.is_set():  # cancelled as it finished: nobody takes it (``cancel`` checks in the other order)
            self._close()

    def _close(self) -> None:
        if self._stream is not None:
            with contextlib.suppress(OSError):
                self._stream.close()

    def take(self) -> BinaryIO:
        if not self._done.wait(_TAKE_BOUND_S):
            self.cancel()
            raise TimeoutError(f"shard {self.name} was not read within {_TAKE_BOUND_S:.0f} s through the mount: "
                               f"see `mountctl status` and the mount program's log")
        if self._error is not None:
            raise self._error
        assert self._stream is not None
        return self._stream

    def cancel(self) -> None:
        """Stop reading (the thread ends at its next chunk) and give back what it holds."""
        self._stop.set()
        if self._done.is_set():
            self._close()


class NextShards:
    """``names`` in order, each opened by ``open_one(index)``; up to ``ahead`` of them read ahead at once.

    The first shard streams as the reader asks for it; while the reader decodes shard ``i``, shards ``i + 1`` to
    ``i + ahead`` are read on threads. A failure of a shard read ahead is raised at its turn, after every sample
    before it was delivered. Leaving early (``close``) stops every thread at its next chunk.
    """

    def __init__(self, names: Sequence[str], open_one: Callable[[int], BinaryIO], ahead: int) -> None:
        self._names = names
        self._open_one = open_one
        self._ahead = max(0, ahead)
        self._pending: collections.deque[_Ahead] = collections.deque()
        self._next = 1  # the next shard to start reading ahead: the first is read by the reader itself

    def _fill(self) -> None:
        while self._next < len(self._names) and len(self._pending) < self._ahead:
            index = self._next
            self._pending.append(_Ahead(self._names[index], lambda i=index: self._open_one(i)))  # type: ignore[misc]
            self._next += 1

    def __iter__(self) -> Iterator[tuple[str, BinaryIO]]:
        try:
            for index, name in enumerate(self._names):
                if index == 0 or not self._ahead:
                    stream = self._open_one(index)
                else:
                    stream = self._pending.popleft().take()
                self._fill()
                with stream:
                    yield name, stream
        finally:
            for pending in self._pending:
                pending.cancel()
            self._pending.clear()
