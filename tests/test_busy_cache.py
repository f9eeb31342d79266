"""A mount serving its data cache from a slow disk is busy, not wedged: the watchdog leaves it alone (issue 40, 2.2).

Progress used to be only the bytes a program received from its store.  A mount reading its disk cache receives
none, so when a probe timed out under load the watchdog judged it wedged and killed it mid-epoch (and mount-s3
empties its cache at every mount).  Everything here is real: the session's SeaweedFS behind a real nginx proxy
(the store), mountctl's mount-s3 with its data cache and its default keep-cache, readers in processes of their
own, and a slow cache disk made with the kernel's own block I/O throttle: the mount program alone is put in a
blkio cgroup that lets it read the disk holding its cache at 1 MiB/s, and the cache's pages are dropped from the
page cache, so each of its reads waits on the disk.  The files' pages, which the kernel keeps across opens, are
dropped through the mount too, so that the readers' next reads reach the program and its cache.  The store is
then stopped (SIGSTOP of the proxy: connections stay open, nothing answers), so the probe's lookup of a name that
cannot exist gets no answer and nothing comes over TCP: the program's only work is reading its cache for the
readers, which still get their bytes.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator

from mountctl import Mount, MountSpec
from mountctl.mounts.backends import BACKENDS
from mountctl.mounts.health import mount_health

from conftest import missing
from far_store_readers import Readers, far_store, require_far_store_mount_s3, tear_down

FILES = 8
SIZE = 4 << 20
# mount-s3 reads a whole 1 MiB cache block before it answers; 16 threads share the throttle, so a block takes about
# 16 s at 1 MiB/s (at 256 KiB/s a minute, which left CI's readers with nothing in the 6 s it once waited).
THROTTLE_BYTES_S = 1 << 20
SERVED_WITHIN_S = 90
READERS = 24  # more than mount-s3's 16 FUSE threads: the probe waits behind readers, as under load
_BLKIO = "/sys/fs/cgroup/blkio"


def _device_of(path: str) -> str:
    """MAJOR:MINOR of the block device holding ``path`` (the whole disk: throttles are set on disks)."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    partition = f"/sys/dev/block/{major}:{minor}/partition"
    if os.path.exists(partition):  # a partition: its disk is the parent directory in sysfs
        parent = os.path.realpath(f"/sys/dev/block/{major}:{minor}/..")
        with open(os.path.join(parent, "dev")) as f:
            return f.read().strip()
    return f"{major}:{minor}"


@contextlib.contextmanager
def _slow_disk_for(pid: int, path: str) -> Iterator[None]:
    """Throttle ``pid``'s reads of the disk holding ``path`` (cgroup v1 blkio), for as long as the block runs."""
    group = os.path.join(_BLKIO, f"mountctl-test-{uuid.uuid4().hex[:8]}")
    try:
        os.mkdir(group)
    except OSError as exc:
        missing(f"no blkio cgroup to throttle a disk ({_BLKIO}: {exc.strerror}); the slow cache disk needs one")
    try:
        with open(os.path.join(group, "blkio.throttle.read_bps_device"), "w") as f:
            f.write(f"{_device_of(path)} {THROTTLE_BYTES_S}\n")
        with open(os.path.join(group, "cgroup.procs"), "w") as f:
            f.write(str(pid))  # every thread of the program
        yield
    finally:
        with contextlib.suppress(OSError):
            with open(os.path.join(_BLKIO, "cgroup.procs"), "w") as f:
                f.write(str(pid))
        for _ in range(50):  # a group empties a moment after its last task left
            with contextlib.suppress(OSError):
                os.rmdir(group)
                break
            time.sleep(0.1)


def _drop_from_page_cache(root: str) -> int:
    """Write out and drop every file under ``root`` from the page cache, so the next read goes to the disk."""
    os.sync()
    dropped = 0
    for folder, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                dropped += os.fstat(fd).st_size
            finally:
                os.close(fd)
    return dropped


def test_a_mount_reading_its_cache_from_a_slow_disk_is_busy_and_not_remounted(local_s3, tmp_path, mount_root):
    require_far_store_mount_s3()
    with far_store(local_s3, str(tmp_path), "busy", FILES, SIZE) as (store, bucket):
        cache = tmp_path / "cache"
        spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend="mount-s3",
                         cache_dir=str(cache), metadata_ttl_s=600, warm="off")
        mount = Mount(spec, settings=store.settings, watchdog=True, watchdog_interval_s=1.0)
        readers: Readers | None = None
        try:
            mount.start()
            for name in store.names:  # epoch 1: from the store, into the cache
                with open(os.path.join(mount.path, name), "rb") as f:
                    assert len(f.read()) == SIZE
            deadline = time.monotonic() + 30  # mount-s3 writes its cache blocks a moment after serving them
            while sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(cache) for n in ns) \
                    < FILES * SIZE and time.monotonic() < deadline:
                time.sleep(0.2)
            assert mount.pid is not None
            pid = mount.pid
            with _slow_disk_for(pid, str(cache)):
                assert _drop_from_page_cache(str(cache)) >= FILES * SIZE
                # The kernel keeps the files' pages across opens (mount-s3's default): without this the readers
                # would be served from memory with the program idle, and never reach its disk cache.
                assert _drop_from_page_cache(mount.path) >= FILES * SIZE
                readers = Readers(mount.path, store.names, READERS)
                deadline = time.monotonic() + 60
                while not readers.done and not readers.errors and time.monotonic() < deadline:  # every one reads
                    time.sleep(0.1)
                store.stop()  # nothing answers from now on
                served_before = readers.served
                time.sleep(1)
                health = mount_health(mount.path, BACKENDS["mount-s3"], pid, 2.0)
                watched_until = time.monotonic() + 6  # the watchdog checks every second meanwhile, for 6 s at least
                deadline = time.monotonic() + SERVED_WITHIN_S
                while (time.monotonic() < watched_until or readers.served == served_before) and not readers.errors \
                        and time.monotonic() < deadline:
                    time.sleep(0.2)
                served = readers.served - served_before
                events = [(e["event"], e["detail"]) for e in mount.events]
                print(f"\n[slow cache disk, store stopped] {health.state}: {health.error}; readers got {served} bytes "
                      f"from the cache with the store stopped; "
                      f"events: {[kind for kind, _ in events]}")
                assert not readers.errors, (readers.errors[:2], events)
                assert served > 0, (f"the readers got nothing from the cache in the {SERVED_WITHIN_S} s after the "
                                    "store stopped")
                assert health.state == "busy", health
                assert "its disk" in health.error, health.error
                assert mount.restarts == 0 and mount.pid == pid, events
                assert not [kind for kind, _ in events if kind in ("unresponsive", "remounted", "restart-failed")], \
                    events
        finally:
            tear_down(store, readers, mount)
