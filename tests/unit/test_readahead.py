"""Plan-driven read-ahead on plain files: its bound, and one fetch per shard per node.

The warmer only opens and reads paths; files in a temporary directory stand in for
the mount's directory, and warmers in threads stand in for ranks sharing a node
(they coordinate only through the record directory, as processes do).
"""

from __future__ import annotations

import os
import threading
import time
import tracemalloc

from mountctl.pytorch.data.readahead import BLOCK, Warmer

MIB = 1 << 20


def _shards(tmp_path, count: int, size: int) -> list[str]:
    root = tmp_path / "mnt"
    root.mkdir()
    names = [f"shard-{i:03d}.tar" for i in range(count)]
    for name in names:
        (root / name).write_bytes(os.urandom(size))
    (tmp_path / "record").mkdir()
    return names


def _read_like_a_reader(warmer: Warmer, count: int, pause_s: float = 0.05) -> None:
    for index in range(count):
        warmer.at(index)
        time.sleep(pause_s)  # parsing and decoding the shard
    warmer.stop()


def test_warmer_stays_within_its_shards_ahead(tmp_path):
    names = _shards(tmp_path, 8, MIB)
    warmer = Warmer(str(tmp_path / "mnt"), names, str(tmp_path / "record"), shards_ahead=2).start()
    _read_like_a_reader(warmer, len(names))
    assert 1 <= warmer.most_ahead <= 2
    assert warmer.warmed == names[1:]  # every shard after the first, the one the reader opened cold


def test_warmer_memory_is_one_block_whatever_the_shard_size(tmp_path):
    names = _shards(tmp_path, 3, 16 * MIB)
    tracemalloc.start()
    try:
        warmer = Warmer(str(tmp_path / "mnt"), names, str(tmp_path / "record"), shards_ahead=2).start()
        _read_like_a_reader(warmer, len(names), pause_s=0.3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert warmer.bytes_warmed == 2 * 16 * MIB
    assert peak < 2 * BLOCK + 2 * MIB, peak  # the block buffer and open_resilient's 1 MiB buffer, not shards


def test_two_ranks_never_fetch_a_shard_twice_on_a_node(tmp_path):
    names = _shards(tmp_path, 12, MIB)
    # Two readers whose plans overlap (a shard spanning both, and both lists crossing), as ranks' can.
    plans = [names[:7], names[6:] + names[:2]]
    warmers = [Warmer(str(tmp_path / "mnt"), plan, str(tmp_path / "record"), shards_ahead=3).start()
               for plan in plans]
    threads = [threading.Thread(target=_read_like_a_reader, args=(w, len(p), 0.02))
               for w, p in zip(warmers, plans, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    fetched = [name for warmer in warmers for name in warmer.warmed]
    assert len(fetched) == len(set(fetched)), fetched
    assert fetched  # the readers did warm ahead
    assert set(fetched) <= set(names) - {plans[0][0], plans[1][0]}  # never a shard a reader opened first


def test_no_warming_while_the_nodes_warm_slots_are_all_taken(tmp_path):
    import fcntl

    from mountctl.pytorch.data.readahead import WARM_SLOTS

    names = _shards(tmp_path, 4, MIB)
    record = tmp_path / "record"
    held = [os.open(record / f".slot-{i}", os.O_RDWR | os.O_CREAT, 0o600) for i in range(WARM_SLOTS)]
    for fd in held:
        fcntl.flock(fd, fcntl.LOCK_EX)  # other readers on the node, each warming a shard
    warmer = Warmer(str(tmp_path / "mnt"), names, str(record), shards_ahead=2).start()
    try:
        warmer.at(0)
        time.sleep(0.3)
        assert warmer.bytes_warmed == 0
        os.close(held.pop())  # one slot frees up
        deadline = time.monotonic() + 5
        while warmer.bytes_warmed < 2 * MIB and time.monotonic() < deadline:
            time.sleep(0.02)
        assert warmer.bytes_warmed == 2 * MIB  # the next two shards, through the one free slot
    finally:
        warmer.stop()
        for fd in held:
            os.close(fd)


def test_the_nodes_warm_slots_follow_its_readers_within_bounds():
    """Two slots per node starved a node of many readers; more than one per reader only queues at the store."""
    from mountctl.pytorch.data.readahead import MAX_WARM_SLOTS, WARM_SLOTS, warm_slots

    assert [warm_slots(n) for n in (1, 2, 4, 8)] == [WARM_SLOTS, 2, 4, 8]
    assert warm_slots(64) == MAX_WARM_SLOTS


def test_the_bench_measures_the_plan_read_ahead_on_a_route_of_its_own_beside_the_default():
    """Off by default for every program (measured, docs/training.md); the bench's ``-read-ahead`` route turns it on
    and mounts the same program, and every other route keeps the default."""
    from benchmarks.harness.cells import route_backend, route_read_ahead

    assert route_read_ahead("mount-s3-read-ahead") is True and route_backend("mount-s3-read-ahead") == ("mount-s3",
                                                                                                       False)
    assert route_read_ahead("mount-s3") is None and route_read_ahead("mount-s3+index") is None
    assert route_backend("mount-s3+index") == ("mount-s3", True)


def test_the_read_ahead_route_mounts_apart_from_the_default_so_its_first_epoch_starts_cold(tmp_path, monkeypatch):
    """The read-ahead is no part of what a mount serves: with the same options the side route joined the default's
    shared mount and read, in its epoch 1, the cache the default's two epochs had filled (about 40 % ahead)."""
    from benchmarks.harness.cells import route_options
    from mountctl import S3Settings
    from mountctl.shared.client import default_mount_dir

    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path))
    settings = S3Settings(endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="k",
                          secret_access_key="s")

    def mount_dir(backend: str) -> str:
        options = route_options("s3://bench/data/", settings, backend, whole_files=True)
        served = {k: v for k, v in options.items() if k in ("cache_dir", "whole_files")}
        return default_mount_dir("s3://bench/data/", options["backend"], settings, **served)

    assert mount_dir("mount-s3-read-ahead") != mount_dir("mount-s3")
    assert mount_dir("mount-s3") == mount_dir("mount-s3")
