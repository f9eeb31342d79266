"""Plan-driven read-ahead on plain files: its bound, and one fetch per shard per node.

The warmer only opens and reads paths; files in a temporary directory stand in for
the mount's directory, and warmers in threads stand in for ranks sharing a node
(they coordinate only through the record directory, as processes do).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import tracemalloc
import types

import pytest
from torch.utils import data as torch_data

from mountctl.pytorch.data.read_ahead.cache_warmer import BLOCK, ShardCacheWarmer
from mountctl.pytorch.data.sources import MountpointOptions

MIB = 1 << 20


def _shards(tmp_path, count: int, size: int) -> list[str]:
    root = tmp_path / "mnt"
    root.mkdir()
    names = [f"shard-{i:03d}.tar" for i in range(count)]
    for name in names:
        (root / name).write_bytes(os.urandom(size))
    (tmp_path / "record").mkdir()
    return names


def _read_like_a_reader(warmer: ShardCacheWarmer, count: int, pause_s: float = 0.05) -> None:
    for index in range(count):
        warmer.at(index)
        time.sleep(pause_s)  # parsing and decoding the shard
    warmer.stop()


def test_warmer_stays_within_its_shards_ahead(tmp_path):
    names = _shards(tmp_path, 8, MIB)
    warmer = ShardCacheWarmer(str(tmp_path / "mnt"), names, str(tmp_path / "record"), shards_ahead=2).start()
    _read_like_a_reader(warmer, len(names))
    assert 1 <= warmer.most_ahead <= 2
    assert warmer.warmed == names[1:]  # every shard after the first, the one the reader opened cold


def test_warmer_memory_is_one_block_whatever_the_shard_size(tmp_path):
    names = _shards(tmp_path, 3, 16 * MIB)
    tracemalloc.start()
    try:
        warmer = ShardCacheWarmer(str(tmp_path / "mnt"), names, str(tmp_path / "record"), shards_ahead=2).start()
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
    warmers = [ShardCacheWarmer(str(tmp_path / "mnt"), plan, str(tmp_path / "record"), shards_ahead=3).start()
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

    from mountctl.pytorch.data.read_ahead.cache_warmer import WARM_SLOTS

    names = _shards(tmp_path, 4, MIB)
    record = tmp_path / "record"
    held = [os.open(record / f".slot-{i}", os.O_RDWR | os.O_CREAT, 0o600) for i in range(WARM_SLOTS)]
    for fd in held:
        fcntl.flock(fd, fcntl.LOCK_EX)  # other readers on the node, each warming a shard
    warmer = ShardCacheWarmer(str(tmp_path / "mnt"), names, str(record), shards_ahead=2).start()
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
    from mountctl.pytorch.data.read_ahead.cache_warmer import MAX_WARM_SLOTS, WARM_SLOTS, warm_slots

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


_URI = "s3://bench/data/"


def _settings():
    from mountctl import S3Settings

    return S3Settings(endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="k", secret_access_key="s")


@contextlib.contextmanager
def _recorded(monkeypatch, tmp_path, **options):
    """``mountpoint_source`` with ``mountctl.mount`` replaced by a recorder: (what it asked for, with the directory
    ``mountctl.mount`` picks from exactly that, the source over the plain directory ``mnt``). A stand-in for the
    mount because the question is what the source asks for; tests/test_training_cache.py mounts for real."""
    import mountctl
    from mountctl.pytorch.data.sources.mountpoint import mountpoint_source
    from mountctl.shared.client import default_mount_dir

    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path / "home"))
    (tmp_path / "mnt").mkdir(exist_ok=True)
    asked: dict = {}

    @contextlib.contextmanager
    def record(uri, mount_dir=None, *, backend="auto", settings=None, **requested):
        asked.update(requested, backend=backend,
                     mount_dir=mount_dir or default_mount_dir(uri, backend, settings, **requested))
        yield types.SimpleNamespace(path=str(tmp_path / "mnt"), backend=backend, pid=None,
                                    cache={k: requested.get(k) for k in ("cache_dir", "cache_size_mb")})

    monkeypatch.setattr(mountctl, "mount", record)
    with mountpoint_source(_URI, _settings(), **{"dataset_bytes": 1 << 20, **options}) as source:
        yield asked, source


def _route_mount_dir(monkeypatch, tmp_path, backend: str) -> str:
    from benchmarks.harness.cells import route_options

    with _recorded(monkeypatch, tmp_path, **route_options(_URI, _settings(), backend, whole_files=True)) as (asked, _):
        return asked["mount_dir"]


def test_the_read_ahead_route_mounts_apart_from_the_default_so_its_first_epoch_starts_cold(tmp_path, monkeypatch):
    """The read-ahead is no part of what a mount serves: with the same options the side route joined the default's
    shared mount and read, in its epoch 1, the cache the default's two epochs had filled (about 40 % ahead)."""
    assert _route_mount_dir(monkeypatch, tmp_path, "mount-s3-read-ahead") != _route_mount_dir(monkeypatch, tmp_path,
                                                                                              "mount-s3")


def test_the_benchs_default_route_shares_the_mount_a_plain_training_run_asks_for(tmp_path, monkeypatch):
    """The default route measures what a user gets: it adds nothing to the request a run with default flags makes."""
    default = MountpointOptions(backend="mount-s3")
    with _recorded(monkeypatch, tmp_path, mountpoint=default, whole_files=True) as (asked, _):
        plain = asked["mount_dir"]
    assert _route_mount_dir(monkeypatch, tmp_path, "mount-s3") == plain


def test_with_the_read_ahead_into_the_cache_no_shard_is_read_ahead_twice(tmp_path, monkeypatch):
    """Both layers read the reader's next shards: the in-memory threads read shards 1 and 2 at the first shard,
    and the warmer claimed them a moment later and read them again, each shard fetched twice by a cold mount.
    The opens are counted on the real read path (a spy that calls through); S3's answer to each open's version
    check is stood in for (this layer has no S3 server): the ETag the index names."""
    import mountctl
    from mountctl.pytorch.data.sources import mountpoint

    names = [f"shard-{i:03d}.tar" for i in range(6)]
    (tmp_path / "mnt").mkdir()
    for name in names:
        (tmp_path / "mnt" / name).write_bytes(os.urandom(64 << 10))
    opened_ahead: list[str] = []
    real = mountctl.open_resilient

    def counted(path, *args, **kwargs):
        if threading.current_thread() is not threading.main_thread():  # a read-ahead, not the reader's turn
            opened_ahead.append(os.path.basename(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(mountctl, "open_resilient", counted)
    monkeypatch.setattr(mountpoint, "open_resilient", counted)
    monkeypatch.setattr(mountpoint._StoreQuestions, "etag_now", lambda self, name: lambda: "e")
    into_cache = MountpointOptions(backend="mount-s3", read_ahead=True)
    with _recorded(monkeypatch, tmp_path, mountpoint=into_cache) as (_, source):
        assert source.describe()["read_ahead"] is True
        for _name, stream in source.open_shards(names, etags=["e"] * len(names)):
            stream.read()
            time.sleep(0.05)  # decoding: the read-ahead runs meanwhile
    assert opened_ahead, "nothing was read ahead"
    assert len(opened_ahead) == len(set(opened_ahead)), sorted(opened_ahead)


class _PlanInWorker(torch_data.IterableDataset):
    def __init__(self, source) -> None:
        super().__init__()
        self.source = source

    def __iter__(self):
        described = self.source.describe()
        yield described["in_memory_ahead"], described["in_memory_bytes"]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_readers_not_given_are_counted_in_each_dataloader_worker(tmp_path, monkeypatch):
    """``readers=None`` (a user's own loop) read 4 shards ahead in every worker, whatever their number."""
    from mountctl.pytorch.data.read_ahead.next_shards import NODE_IN_MEMORY_BYTES

    no_cache = MountpointOptions(backend="mount-s3", cache=False)
    with _recorded(monkeypatch, tmp_path, mountpoint=no_cache) as (_, source):
        alone = source.describe()["in_memory_ahead"]
        workers = 8
        loader = torch_data.DataLoader(_PlanInWorker(source), batch_size=None, num_workers=workers,
                                       multiprocessing_context="fork", timeout=60)
        plans = [tuple(plan) for plan in loader]
    assert len(plans) == workers and len(set(plans)) == 1, plans
    ahead, shard_bytes = plans[0]
    assert workers * (ahead + 1) * shard_bytes <= NODE_IN_MEMORY_BYTES
    assert 1 <= ahead < alone  # eight readers share what one had alone


def test_slurm_tasks_on_the_node_size_the_read_ahead_and_the_mounts_memory_bound(tmp_path, monkeypatch):
    """Only LOCAL_WORLD_SIZE was read: 8 SLURM tasks of 2 workers each read ahead as if they were alone."""
    from mountctl.pytorch.data.read_ahead.next_shards import in_memory_ahead
    from mountctl.pytorch.data.sources.mountpoint import memory_bound_mb

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "8")
    with _recorded(monkeypatch, tmp_path, mountpoint=MountpointOptions(backend="mount-s3"),
                   readers=2) as (asked, source):
        ahead = source.describe()["in_memory_ahead"]
    assert ahead == in_memory_ahead(16).shards
    assert asked["memory_mb"] == memory_bound_mb(16, ahead)


def test_read_ahead_into_a_cache_the_disk_has_no_room_for_reads_ahead_into_memory(tmp_path, monkeypatch):
    """``--read-ahead`` asks for the warmer into the cache; on a disk with no room for a cache the mount gets none,
    and the warmer, with nothing to warm, never ran, while the in-memory read-ahead stayed off for it: nothing
    read ahead, and the memory bound counted shards that no one held. A full disk cannot be made on demand here,
    so the cache's reading of the free space stands in for one."""
    from mountctl.mounts import cache
    from mountctl.pytorch.data.sources.mountpoint import memory_bound_mb

    monkeypatch.setattr(cache, "free_mb", lambda root: 0)
    into_cache = MountpointOptions(backend="mount-s3", read_ahead=True)
    with _recorded(monkeypatch, tmp_path, mountpoint=into_cache, readers=2) as (asked, source):
        described = source.describe()
        readers_on_node = source.read_ahead.readers_on_node
    assert "cache_dir" not in asked and described["read_ahead"] is False
    assert described["in_memory_ahead"] >= 1
    assert asked["memory_mb"] == memory_bound_mb(readers_on_node, described["in_memory_ahead"])
