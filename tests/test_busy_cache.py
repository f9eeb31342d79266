"""A mount serving its data cache from a slow disk is busy, not wedged: the watchdog leaves it alone (issue 40, 2.2).

Progress used to be only the bytes a program received from its store.  A mount reading its disk cache receives
none, so when a probe timed out under load the watchdog judged it wedged and killed it mid-epoch (and mount-s3
empties its cache at every mount).  Everything here is real: the session's SeaweedFS behind a real nginx proxy
(the store), mountctl's mount-s3 with its data cache, readers in this process, and a slow cache disk made with the
kernel's own block I/O throttle: the mount program alone is put in a blkio cgroup that lets it read the disk
holding its cache at 1 MiB/s, and the cache's pages are dropped from the page cache, so each of its reads waits
on the disk.  The store is then stopped (SIGSTOP of the proxy: connections stay open, nothing answers), so the
probe's lookup of a name that cannot exist gets no answer and nothing comes over TCP: the program's only work is
reading its cache for the readers, which still get their bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator

from mountctl import Mount, MountSpec
from mountctl.local_s3.far_proxy import FarProfile, FarProxy, find_nginx
from mountctl.mounts.backends import BACKENDS
from mountctl.mounts.health import mount_health
from mountctl.s3 import client as s3_client

from conftest import make_bucket, missing, remove_bucket, require_fuse

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


# A reader process (as a DataLoader worker is one): reads its files through the mount again and again, and says
# how many bytes it got each time a read returns.  Readers live in processes of their own, never in this one: a
# process that forks (the health probe) while it holds FUSE files open has its child flush each of them on exec,
# which waits behind the very reads the test makes slow.
READER = textwrap.dedent("""
    import os, sys
    root, names = sys.argv[1], sys.argv[2:]
    while True:
        for name in names:
            try:
                with open(os.path.join(root, name), "rb") as f:
                    while block := f.read(1 << 20):
                        print(len(block), flush=True)
            except OSError as exc:
                print(f"error {name}: {exc}", flush=True)
                sys.exit(1)
""")


def _collect(reader: subprocess.Popen[str], done: list[int], errors: list[str]) -> None:
    assert reader.stdout is not None
    for line in reader.stdout:
        if line.startswith("error"):
            errors.append(line.strip())
        else:
            done.append(int(line))


def test_a_mount_reading_its_cache_from_a_slow_disk_is_busy_and_not_remounted(local_s3, tmp_path, mount_root):
    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not installed; `bash scripts/setup.sh` builds it")
    if find_nginx() is None:
        missing("nginx is not installed (apt-get install nginx-light libnginx-mod-http-lua)")
    direct = local_s3.settings(direct=True)
    s3 = s3_client(direct)
    bucket = make_bucket(s3, f"busy-{uuid.uuid4().hex[:8]}")
    names = [f"part-{i}.bin" for i in range(FILES)]
    for name in names:
        s3.put_object(Bucket=bucket, Key=name, Body=os.urandom(SIZE))
    proxy = FarProxy(direct.endpoint_url or "", str(tmp_path / "proxy"), FarProfile(latency_ms=1, rate_mb_s=0))
    endpoint = proxy.start()
    store = (proxy.state() or {})["process"]["pid"]  # nginx's process group
    settings = dataclasses.replace(direct, endpoint_url=endpoint)
    cache = tmp_path / "cache"
    spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend="mount-s3",
                     cache_dir=str(cache), metadata_ttl_s=600, warm="off")  # the readers below are its only reads
    done: list[int] = []
    errors: list[str] = []
    readers: list[subprocess.Popen[str]] = []
    collectors: list[threading.Thread] = []
    stopped = False
    mount = Mount(spec, settings=settings, watchdog=True, watchdog_interval_s=1.0)
    try:
        mount.start()
        for name in names:  # epoch 1: from the store, into the cache
            with open(os.path.join(mount.path, name), "rb") as f:
                assert len(f.read()) == SIZE
        deadline = time.monotonic() + 30  # mount-s3 writes its cache blocks a moment after serving them
        while sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(cache) for n in ns) < FILES * SIZE \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert mount.pid is not None
        pid = mount.pid
        with _slow_disk_for(pid, str(cache)):
            assert _drop_from_page_cache(str(cache)) >= FILES * SIZE
            for i in range(READERS):
                readers.append(subprocess.Popen([sys.executable, "-c", READER, mount.path,
                                                 *names[i % FILES:], *names[:i % FILES]],
                                                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True))
                collectors.append(threading.Thread(target=_collect, args=(readers[-1], done, errors), daemon=True))
                collectors[-1].start()
            deadline = time.monotonic() + 60
            while not done and not errors and time.monotonic() < deadline:  # every reader started, reading
                time.sleep(0.1)
            os.killpg(store, signal.SIGSTOP)  # the store: nothing answers from now on
            stopped, served_before = True, sum(done)
            time.sleep(1)
            health = mount_health(mount.path, BACKENDS["mount-s3"], pid, 2.0)
            watched_until = time.monotonic() + 6  # the watchdog checks every second meanwhile, for 6 s at least
            deadline = time.monotonic() + SERVED_WITHIN_S
            while (time.monotonic() < watched_until or sum(done) == served_before) and not errors \
                    and time.monotonic() < deadline:
                time.sleep(0.2)
            served = sum(done) - served_before
            events = [(e["event"], e["detail"]) for e in mount.events]
            print(f"\n[slow cache disk, store stopped] {health.state}: {health.error}; readers got {served} bytes "
                  f"from the cache with the store stopped; "
                  f"events: {[kind for kind, _ in events]}")
            assert not errors, (errors[:2], events)
            assert served > 0, f"the readers got nothing from the cache in the {SERVED_WITHIN_S} s after the store stopped"
            assert health.state == "busy", health
            assert "its disk" in health.error, health.error
            assert mount.restarts == 0 and mount.pid == pid, events
            assert not [kind for kind, _ in events if kind in ("unresponsive", "remounted", "restart-failed")], events
    finally:
        if stopped:
            os.killpg(store, signal.SIGCONT)
        for reader in readers:
            reader.kill()
        for reader in readers:
            reader.wait(timeout=60)
        for collector in collectors:
            collector.join(timeout=10)
        mount.stop()
        proxy.stop()
        remove_bucket(s3, bucket)
