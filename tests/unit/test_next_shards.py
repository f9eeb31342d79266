"""A reader's next shards read into memory on threads: order, exactly once, bounded, failures at their turn.

Plain files in a temporary directory stand in for the mount (the reads are plain opens); the end-to-end tests
read through real mounts (tests/test_faults_training.py, tests/test_object_versions.py).
"""

from __future__ import annotations

import io
import os
import threading
import time

import pytest

from mountctl.pytorch.data.sources.next_shards import (
    MAX_SHARDS_AHEAD,
    SHARD_IN_MEMORY_BYTES,
    NextShards,
    read_in_memory,
    shards_in_memory,
)

GIB = 1 << 30


def _files(tmp_path, sizes: list[int]) -> tuple[list[str], dict[str, bytes]]:
    names, data = [], {}
    for i, size in enumerate(sizes):
        name = f"shard-{i:03d}.tar"
        data[name] = os.urandom(size)
        (tmp_path / name).write_bytes(data[name])
        names.append(name)
    return names, data


def _ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("mountctl-ahead-")]


def _wait_until(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


@pytest.mark.parametrize("ahead", [0, 1, 3])
def test_every_shard_is_delivered_once_in_order_with_its_own_bytes(tmp_path, ahead):
    names, data = _files(tmp_path, [5000, 0, 3 << 20, 70_000, 1])
    opened: list[int] = []

    def open_one(i: int):
        opened.append(i)
        return open(tmp_path / names[i], "rb")

    got = [(name, stream.read()) for name, stream in NextShards(names, open_one, ahead=ahead)]
    assert got == [(name, data[name]) for name in names]
    assert sorted(opened) == list(range(len(names)))  # each opened once


def test_a_reader_at_its_first_shard_has_exactly_the_next_ahead_being_read(tmp_path):
    names, _ = _files(tmp_path, [100] * 6)
    opened: list[int] = []
    lock = threading.Lock()

    def open_one(i: int):
        with lock:
            opened.append(i)
        return open(tmp_path / names[i], "rb")

    shards = iter(NextShards(names, open_one, ahead=2))
    next(shards)
    assert _wait_until(lambda: sorted(opened) == [0, 1, 2]), opened
    time.sleep(0.2)
    assert sorted(opened) == [0, 1, 2], "read further ahead than asked"
    next(shards)  # shard 1 taken: shard 3 starts
    assert _wait_until(lambda: sorted(opened) == [0, 1, 2, 3]), opened
    shards.close()  # type: ignore[attr-defined]


def test_a_failed_shard_read_ahead_fails_at_its_turn_after_every_shard_before_it(tmp_path):
    names, data = _files(tmp_path, [1000, 1000, 1000, 1000])
    (tmp_path / names[2]).unlink()
    delivered = []
    with pytest.raises(FileNotFoundError):
        for name, stream in NextShards(names, lambda i: open(tmp_path / names[i], "rb"), ahead=3):
            delivered.append((name, stream.read()))
    assert delivered == [(names[0], data[names[0]]), (names[1], data[names[1]])]


def test_leaving_early_stops_every_thread_and_closes_what_it_held(tmp_path):
    names, _ = _files(tmp_path, [SHARD_IN_MEMORY_BYTES + (3 << 20)] * 4)  # large: each keeps its file open
    streams: list[io.BufferedReader] = []

    def open_one(i: int):
        stream = open(tmp_path / names[i], "rb")
        streams.append(stream)
        return stream

    shards = iter(NextShards(names, open_one, ahead=3))
    next(shards)
    assert _wait_until(lambda: len(streams) == 4)
    shards.close()  # type: ignore[attr-defined]
    assert _wait_until(lambda: not _ahead_threads()), _ahead_threads()
    assert _wait_until(lambda: all(s.closed for s in streams)), [s.closed for s in streams]


def test_a_small_shard_is_read_whole_and_closed_a_large_one_streams_its_rest(tmp_path):
    small = os.urandom(10_000)
    (tmp_path / "small").write_bytes(small)
    stream = open(tmp_path / "small", "rb")
    held = read_in_memory(stream, limit=1 << 20)
    assert isinstance(held, io.BytesIO) and held.read() == small and stream.closed

    large = os.urandom(5 << 20)
    (tmp_path / "large").write_bytes(large)
    stream = open(tmp_path / "large", "rb")
    joined = read_in_memory(stream, limit=2 << 20)
    assert joined is not None and not stream.closed
    assert joined.read(3) == large[:3] and joined.read() == large[3:]
    joined.close()
    assert stream.closed

    stop = threading.Event()
    stop.set()
    stream = open(tmp_path / "large", "rb")
    assert read_in_memory(stream, stop=stop) is None and stream.closed


def test_how_far_ahead_follows_the_readers_and_the_memory_of_the_node():
    assert shards_in_memory(1, 24 * GIB) == MAX_SHARDS_AHEAD
    assert shards_in_memory(8, 24 * GIB) == 4  # 1 GiB / 8 = 128 MiB: four 32 MiB shards
    assert shards_in_memory(16, 24 * GIB) == 2
    assert shards_in_memory(64, 24 * GIB) == 1  # never none: the next shard at least
    assert shards_in_memory(2, 2 * GIB) == 2  # 1/16 of 2 GiB, halved
    assert shards_in_memory(1) >= 1  # this machine's own memory
