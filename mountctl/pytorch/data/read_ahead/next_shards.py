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
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from mountctl.pytorch.data.read_ahead.budget import memory_for_readers

__all__ = ["NextShards", "InMemoryAhead", "in_memory_ahead", "bytes_for_samples", "read_in_memory", "SHARD_IN_MEMORY_BYTES",
           "NODE_IN_MEMORY_BYTES", "MAX_SHARDS_AHEAD"]

# A shard is held in memory up to this size; past it the rest streams from the open file (Mountpoint's own
# prefetcher reads ahead inside a large file, so the round trips left to hide are those between small ones).
SHARD_IN_MEMORY_BYTES = 32 << 20
# What the readers of one node may hold in memory in all, and the most shards one reader reads ahead.
NODE_IN_MEMORY_BYTES = 1 << 30
MAX_SHARDS_AHEAD = 4
_CHUNK = 1 << 20
_TAKE_BOUND_S = 600.0  # as the loader's bound on one batch: each read on the thread is bounded on its own


@dataclass(frozen=True)
class InMemoryAhead:
    """How far one reader reads ahead: its next ``shards``, each held in memory up to ``shard_bytes``."""

    shards: int
    shard_bytes: int


def in_memory_ahead(readers_on_node: int, memory: int | None = None) -> InMemoryAhead:
    """What each of a node's ``readers_on_node`` readers may read ahead, so that all of them together hold at
    most the node's share: 1 GiB, at most 1/16 of ``memory`` (default: the cgroup's limit, else physical).

    A reader holds the shard it decodes besides those it reads ahead, so its part of the share is split among
    ``shards + 1`` shards of ``SHARD_IN_MEMORY_BYTES``, up to ``MAX_SHARDS_AHEAD`` ahead. Where that leaves not
    one whole shard ahead (from 32 readers on 1 GiB), the share wins over the shard size: one shard ahead, of
    which half the reader's part is held (the rest streams from the file, opened ahead, at its turn); and where
    that half is under one 1 MiB read, none.
    """
    if memory is None:
        memory = memory_for_readers()
    share = min(NODE_IN_MEMORY_BYTES, memory // 16) // max(1, readers_on_node)
    whole = share // SHARD_IN_MEMORY_BYTES - 1  # one part is the shard being decoded
    if whole >= 1:
        return InMemoryAhead(min(MAX_SHARDS_AHEAD, whole), SHARD_IN_MEMORY_BYTES)
    part = share // 2 // _CHUNK * _CHUNK
    return InMemoryAhead(1, part) if part else InMemoryAhead(0, 0)


_PAST_A_SAMPLE = 2 << 10  # the next member's header and a tar block or two: where a tar reader looks to end one


def bytes_for_samples(total_bytes: int, samples: int, stop: int,
                      members: Sequence[tuple[int, int, int, int, int | None]] | None = None) -> int | None:
    """How much of a shard a reader of its first ``stop`` samples reads: through the sample after them (a tar
    reader ends a sample when it meets the next one), from the index's member offsets where it has them, else
    in proportion to the shard's bytes. None: all of it. Only what is held in memory follows it; a reader that
    asks for more gets the rest from the file."""
    if stop >= samples or samples <= 0:
        return None
    if members is not None and len(members) == samples:
        image_at, image_size, label_at, label_size, _ = members[stop]
        end = max(image_at + image_size, label_at + label_size)
    else:
        end = -(-total_bytes * (stop + 1) // samples)
    return min(total_bytes, end + _PAST_A_SAMPLE)


class _Joined(io.RawIOBase):
    """The bytes read ahead, then the rest of the still open stream; each chunk read ahead is let go once
    delivered (one view of the whole head would keep all of it alive to the shard's end)."""

    def __init__(self, head: list[bytes], rest: BinaryIO) -> None:
        super().__init__()
        self._head = collections.deque(chunk for chunk in head if chunk)
        self._offset = 0  # into the first chunk
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._head:
            chunk = self._head[0]
            count = min(len(view), len(chunk) - self._offset)
            view[:count] = memoryview(chunk)[self._offset:self._offset + count]
            self._offset += count
            if self._offset == len(chunk):
                self._head.popleft()
                self._offset = 0
            return count
        return self._rest.readinto(view)  # type: ignore[attr-defined]

    def close(self) -> None:
        self._head.clear()
        self._rest.close()
        super().close()


def read_in_memory(stream: BinaryIO, limit: int = SHARD_IN_MEMORY_BYTES,
                   stop: threading.Event | None = None) -> BinaryIO | None:
    """``stream`` read whole into memory (and closed) when it ends within ``limit`` bytes; else its first
    ``limit`` bytes (never more), then the rest of it. None when ``stop`` is set first (the stream closed)."""
    chunks: list[bytes] = []
    held = 0
    try:
        while True:
            if stop is not None and stop.is_set():
                stream.close()
                return None
            if held >= limit:
                break
            chunk = stream.read(min(_CHUNK, limit - held))
            if not chunk:
                stream.close()
                whole = io.BytesIO()
                while chunks:  # one copy, each chunk let go as it is copied
                    whole.write(chunks.pop(0))
                whole.seek(0)
                return whole
            chunks.append(chunk)
            held += len(chunk)
    except BaseException:
        stream.close()
        raise
    return io.BufferedReader(_Joined(chunks, stream), buffer_size=_CHUNK)


class _Ahead:
    """One shard opened and read on a thread of its own; ``take`` hands it over or raises what the read raised."""

    def __init__(self, name: str, open_one: Callable[[], BinaryIO], limit: int) -> None:
        self.name = name
        self._open = open_one
        self._limit = limit
        self._stop = threading.Event()
        self._done = threading.Event()
        self._stream: BinaryIO | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"mountctl-ahead-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._stream = read_in_memory(self._open(), self._limit, stop=self._stop)
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
    """``names`` in order, each opened by ``open_one(index)``; up to ``ahead`` of them read ahead at once, each
    held in memory up to ``limits[index]`` bytes (what the reader needs of it: a worker's piece of a shard may
    end before the shard does; the rest, if asked for, streams from the file).

    The first shard streams as the reader asks for it; while the reader decodes shard ``i``, shards ``i + 1`` to
    ``i + ahead`` are read on threads. A failure of a shard read ahead is raised at its turn, after every sample
    before it was delivered. Leaving early (``close``, or closing the iteration) stops every thread at its next
    chunk and closes what they hold, without waiting for garbage collection.
    """

    def __init__(self, names: Sequence[str], open_one: Callable[[int], BinaryIO], ahead: int,
                 limits: Sequence[int] | None = None) -> None:
        self._names = names
        self._open_one = open_one
        self._ahead = max(0, ahead)
        self._limits = list(limits) if limits is not None else [SHARD_IN_MEMORY_BYTES] * len(names)
        if len(self._limits) != len(names):
            raise ValueError(f"{len(self._limits)} limits given for {len(names)} shards")
        self._pending: collections.deque[_Ahead] = collections.deque()
        self._next = 1  # the next shard to start reading ahead: the first is read by the reader itself
        self._running: Generator[tuple[str, BinaryIO], None, None] | None = None

    def _fill(self) -> None:
        while self._next < len(self._names) and len(self._pending) < self._ahead:
            index = self._next
            self._pending.append(_Ahead(self._names[index], lambda i=index: self._open_one(i),  # type: ignore[misc]
                                        self._limits[index]))
            self._next += 1

    def __iter__(self) -> Iterator[tuple[str, BinaryIO]]:
        self._running = self._deliver()
        return self._running

    def _deliver(self) -> Generator[tuple[str, BinaryIO], None, None]:
        try:
            for index, name in enumerate(self._names):
                if index == 0 or not self._ahead:
                    stream = self._open_one(index)
                else:
                    # taken while still pending: an interruption in the wait (KeyboardInterrupt) cancels it too
                    stream = self._pending[0].take()
                    self._pending.popleft()
                with stream:  # entered before the next threads start: one that fails to start closes it
                    self._fill()
                    yield name, stream
        finally:
            self._cancel_pending()

    def _cancel_pending(self) -> None:
        while self._pending:
            self._pending.popleft().cancel()

    def close(self) -> None:
        """Stop every thread and give back what they and the reader hold (idempotent)."""
        running, self._running = self._running, None
        if running is not None:
            running.close()
        self._cancel_pending()
