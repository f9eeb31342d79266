"""A reader's next shards read into memory on threads: order, exactly once, bounded, failures at their turn.

Plain files in a temporary directory stand in for the mount (the reads are plain opens); the end-to-end tests
read through real mounts (tests/test_faults_training.py, tests/test_object_versions.py).
"""

from __future__ import annotations

import io
import os
import signal
import threading
import time
import tracemalloc
import types

import pytest

from mountctl.pytorch.data.read_ahead import next_shards as next_shards_module
from mountctl.pytorch.data.read_ahead.next_shards import (
    MAX_SHARDS_AHEAD,
    NODE_IN_MEMORY_BYTES,
    SHARD_IN_MEMORY_BYTES,
    InMemoryAhead,
    NextShards,
    bytes_for_samples,
    in_memory_ahead,
    read_in_memory,
)
from mountctl.pytorch.data.read_ahead.policy import choose_read_ahead

from open_files import open_fds_under

GIB = 1 << 30
MIB = 1 << 20


def _files(tmp_path, sizes: list[int]) -> tuple[list[str], dict[str, bytes]]:
    names, data = [], {}
    for i, size in enumerate(sizes):
        name = f"shard-{i:03d}.tar"
        data[name] = os.urandom(size)
        (tmp_path / name).write_bytes(data[name])
        names.append(name)
    return names, data


class _Counted(io.FileIO):
    """A file that counts the bytes read from it."""

    read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        data = super().read(size)
        self.read_bytes += len(data or b"")
        return data


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
    assert in_memory_ahead(1, 24 * GIB) == InMemoryAhead(MAX_SHARDS_AHEAD, SHARD_IN_MEMORY_BYTES)
    assert in_memory_ahead(8, 24 * GIB).shards == 3  # 1 GiB / 8 = 128 MiB: the shard decoded and three ahead
    assert in_memory_ahead(16, 24 * GIB).shards == 1
    assert in_memory_ahead(2, 2 * GIB).shards == 1  # 1/16 of 2 GiB, halved: 64 MiB, two shards held
    assert in_memory_ahead(1).shards >= 1  # this machine's own memory (its cgroup's limit where it has one)


@pytest.mark.parametrize("memory", [2 * GIB, 24 * GIB, 1 << 40])
@pytest.mark.parametrize("readers", [1, 2, 4, 8, 16, 31, 32, 33, 64, 128, 1000, 5000])
def test_the_readers_of_a_node_never_hold_more_than_its_share_however_many_they_are(readers, memory):
    """Past 32 readers a whole shard each broke the 1 GiB share (64 readers held 64 x 2 x 32 MiB): the share wins."""
    plan = in_memory_ahead(readers, memory)
    share = min(NODE_IN_MEMORY_BYTES, memory // 16)
    held = readers * (plan.shards + 1) * plan.shard_bytes  # each holds the shard it decodes and those ahead
    assert held <= share, (plan, held, share)
    assert plan.shards <= MAX_SHARDS_AHEAD and plan.shard_bytes <= SHARD_IN_MEMORY_BYTES
    assert (plan.shards == 0) == (plan.shard_bytes == 0)


def test_beyond_32_readers_each_reads_one_shard_ahead_held_in_part_and_none_when_too_many():
    assert in_memory_ahead(64, 24 * GIB) == InMemoryAhead(1, 8 * MIB)  # 16 MiB each: half of it ahead
    assert in_memory_ahead(5000, 24 * GIB) == InMemoryAhead(0, 0)  # under one 1 MiB read each


def test_a_shard_read_ahead_holds_at_most_its_limit_in_memory(tmp_path):
    (tmp_path / "large").write_bytes(os.urandom(6 * MIB))
    stream = open(tmp_path / "large", "rb")
    joined = read_in_memory(stream, limit=5 * MIB // 2)
    assert joined is not None and stream.tell() == 5 * MIB // 2  # read 2.5 MiB, not the next whole 1 MiB past it
    joined.close()


def test_what_was_read_ahead_is_let_go_once_delivered(tmp_path):
    """An empty view of the head kept all of it (33 MiB with the default limit) alive to the shard's end."""
    data = os.urandom(12 * MIB)
    (tmp_path / "large").write_bytes(data)
    tracemalloc.start()
    try:
        joined = read_in_memory(open(tmp_path / "large", "rb"), limit=8 * MIB)
        assert joined is not None
        assert len(joined.read(9 * MIB)) == 9 * MIB  # past the head, into the rest of the file
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 3 * MIB, held  # the read buffer, not the 8 MiB head
    assert joined.read() == data[9 * MIB:]
    joined.close()


def test_a_thread_that_fails_to_start_closes_the_shard_already_open(tmp_path, monkeypatch):
    """A fake thread class: no real component refuses a thread on demand (the process's thread limit would
    stop the test runner's threads too)."""
    names, _ = _files(tmp_path, [1000, 1000, 1000])
    streams: list[io.BufferedReader] = []

    class RefusedThread(threading.Thread):
        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(next_shards_module, "threading", types.SimpleNamespace(Thread=RefusedThread,
                                                                               Event=threading.Event))

    def open_one(i: int):
        streams.append(open(tmp_path / names[i], "rb"))
        return streams[-1]

    with pytest.raises(RuntimeError, match="can't start new thread"):
        next(iter(NextShards(names, open_one, ahead=2)))
    assert streams and all(stream.closed for stream in streams)


def test_an_interrupted_wait_for_a_shard_stops_its_thread_and_closes_what_it_read(tmp_path):
    """Ctrl-C while the reader waits for the shard being read ahead: that shard's thread stops too."""
    names, _ = _files(tmp_path, [1000, SHARD_IN_MEMORY_BYTES + (3 << 20)])  # large: it keeps its file open
    gate = threading.Event()
    streams: list[_Counted] = []

    def open_one(i: int):
        if i == 1:
            assert gate.wait(30)  # the read ahead is slow: the reader waits for it
        streams.append(_Counted(tmp_path / names[i]))
        return streams[-1]

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    shards = iter(NextShards(names, open_one, ahead=1))
    next(shards)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(KeyboardInterrupt):
            next(shards)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        gate.set()
    assert _wait_until(lambda: not _ahead_threads()), _ahead_threads()
    assert len(streams) == 2 and all(stream.closed for stream in streams), [s.closed for s in streams]
    assert streams[1].read_bytes == 0, "the shard waited for was read on after the reader had left"


def test_leaving_the_sources_shards_stops_the_threads_though_the_iteration_is_still_referenced(tmp_path,
                                                                                             monkeypatch):
    """``open_shards`` left its inner iteration to reference counting: while anything still referred to it (a
    traceback, a debugger; here the test) its threads read on and its files stayed open. S3's answer to each
    open's version check is stood in for (this layer has no S3 server): the ETag the index names."""
    from mountctl.pytorch.data.sources import mountpoint

    names, _ = _files(tmp_path, [5 * MIB] * 4)
    kept: list[object] = []

    class Kept(NextShards):
        def __iter__(self):
            iteration = super().__iter__()
            kept.append(iteration)
            return iteration

    monkeypatch.setattr(mountpoint, "NextShards", Kept)
    source = _mountpoint_source(tmp_path, monkeypatch, memory=64 * MIB)
    # one shard ahead, 2 MiB of it held: it stays open
    assert source.in_memory_plan() == InMemoryAhead(1, 2 * MIB)
    shards = source.open_shards(names, etags=["e"] * len(names))
    next(shards)
    assert _wait_until(lambda: len(open_fds_under(tmp_path)) == 2), open_fds_under(tmp_path)
    shards.close()
    assert kept and _wait_until(lambda: not _ahead_threads(), timeout=5), _ahead_threads()
    assert open_fds_under(tmp_path) == [], "files were left open"


def _mountpoint_source(tmp_path, monkeypatch, *, memory: int):
    """A mountpoint source over the files under ``tmp_path``, one reader on a node of ``memory`` bytes; S3's
    answer to each open's version check is stood in for (this layer has no S3 server)."""
    from mountctl import S3Settings
    from mountctl.pytorch.data.sources import mountpoint

    monkeypatch.setattr(mountpoint._StoreQuestions, "etag_now", lambda self, name: lambda: "e")
    settings = S3Settings(endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="k",
                          secret_access_key="s")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    return mountpoint.MountpointSource(root=str(tmp_path), backend="mount-s3", mount_pid=None,
                                       uri="s3://bucket/p/", settings=settings,
                                       read_ahead=choose_read_ahead(None, cache=False, readers=1, memory=memory))


def _position_of(path) -> int | None:
    """The file offset of this process's open descriptor of ``path`` (how far it was read), None if none is open."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                with open(f"/proc/self/fdinfo/{fd}") as info:
                    return int(info.readline().split()[1])
        except OSError:
            continue
    return None


def test_a_workers_partial_shard_is_read_ahead_only_as_far_as_its_piece(tmp_path, monkeypatch):
    """The worker reads the first samples of shard 1 (its piece ends at 1 MiB of 6): the rest of the shard is
    not read ahead, yet is there if the reader asks for it. S3's answer to each open's version check is stood in
    for (this layer has no S3 server)."""

    names, data = _files(tmp_path, [6 * MIB] * 3)
    source = _mountpoint_source(tmp_path, monkeypatch, memory=24 * GIB)
    shards = source.open_shards(names, etags=["e"] * 3, ends=[None, MIB, None])
    try:
        _, first = next(shards)
        assert _wait_until(lambda: not any(t.name.endswith(names[1]) for t in _ahead_threads()))
        position = _position_of(tmp_path / names[1])
        assert position is not None and position <= 2 * MIB, position  # 1 MiB, and at most a buffer more
        assert first.read() == data[names[0]]
        name, second = next(shards)
        assert name == names[1] and second.read() == data[names[1]]  # the rest streams from the file
    finally:
        shards.close()


def test_the_bytes_a_piece_reads_run_through_the_sample_after_it():
    members = [(512 + 1024 * i, 600, 512 + 1024 * i + 700, 2, None) for i in range(10)]  # one sample per KiB
    assert bytes_for_samples(10 << 10, 10, 4, members) == members[4][2] + 2 + (2 << 10)
    assert bytes_for_samples(10 << 10, 10, 10, members) is None  # to its last sample: all of it
    assert bytes_for_samples(10_000, 10, 4) == 5_000 + (2 << 10)  # no index: in proportion
    assert bytes_for_samples(10_000, 10, 9) == 10_000  # never past the shard's end
