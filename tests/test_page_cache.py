"""mountctl's mount-s3 keeps the kernel's page cache across opens, and only while the data cannot have changed.

Real mount-s3 (our build, whose FUSE adapter answers ``open`` with ``FOPEN_KEEP_CACHE``), real nginx logging every
request in front of the real SeaweedFS; the reads are this process's own ``open``/``read``/``close``.  No data cache
of the program's own (no ``cache_dir``): a read that sends no GET can only have come from the kernel's pages.

- a second read of the same files sends nothing to the store; with ``--no-keep-cache`` it sends a GET per file;
- a list mount (every object pinned to its ETag) keeps them too;
- an object replaced in S3 is read new once the metadata TTL has passed, and never old after it; an unchanged
  one is looked up again then (by its HEAD, or from the directory's new listing), and read from its pages still;
- a remount (a new FUSE connection: the old one's pages go with it) reads from the store again, also after kill -9.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from mountctl import ListedObject, Mount, MountSpec, write_object_list
from mountctl.mounts.backends import BACKENDS
from mountctl.s3 import client as s3_client

from conftest import missing, require_fuse
from request_log import PREFIX, LoggedStore, logged_store, read_every_file

FILES = 8
SIZE = 200 * 1024  # several of the kernel's read requests, one GET
TTL_S = 3  # the metadata TTL of the replacement test: short, and long enough to read twice within it


@pytest.fixture(scope="module")
def store(local_s3, tmp_path_factory):
    require_fuse()
    if not BACKENDS["mount-s3"].available() or not BACKENDS["mount-s3"].version().startswith("mount-s3 built from"):
        missing("mountctl's mount-s3 is not built (AWS's does not keep the page cache); `bash scripts/setup.sh`")
    with logged_store(local_s3, str(tmp_path_factory.mktemp("page-cache")), files=FILES, size=SIZE) as logged:
        yield logged


def _spec(store: LoggedStore, root, **options) -> MountSpec:
    return MountSpec(uri=store.uri, mount_dir=str(root / "m"), backend="mount-s3", mount_timeout_s=60, warm="off",
                     **options)


def _epoch(store: LoggedStore, path: str, gets: int = FILES, heads: int = 0) -> dict[str, int]:
    """Read every file once; the requests it sent, once the store has logged them, waiting (bounded) for ``gets``
    GETs and ``heads`` HEADs: nginx logs a request when it ends, so the last one may be logged a moment after the
    read that needed it returned, and one logged late would count in the next epoch."""
    mark = store.mark()
    assert read_every_file(path, store.names) == FILES * SIZE
    for method, count in (("GET", gets), ("HEAD", heads)):
        if count:
            store.settle(mark, method, count, timeout_s=10)
    return {method: count for method, count in store.since(mark).items() if count}


def _read_again(store: LoggedStore, path: str, tries: int = 3) -> dict[str, int]:
    """The requests of reading every file again at once, up to ``tries`` times until one sends nothing.

    This machine reclaims page cache it finds cold on its own (a DAMON ``pageout`` scheme in the VM's kernel), a
    region at a time, so now and then a file read a moment ago lost a few pages and reads them again: a GET of the
    rest of one file (seen: 1 in 8 files, from offset 44 KiB).  A read that kept nothing sends a GET for every
    file every time, so it still fails here.
    """
    sent: dict[str, int] = {}
    for _ in range(tries):
        sent = _epoch(store, path, gets=0)
        if not sent.get("GET"):
            break
    return sent


def test_a_second_read_of_the_same_files_sends_nothing(store, mount_root):
    with Mount(_spec(store, mount_root), settings=store.settings) as mount:
        first = _epoch(store, mount.path)
        second = _read_again(store, mount.path)
    assert first.get("GET") == FILES, first
    assert second == {}, f"the second read should come from the kernel's pages: {second}"


def test_a_readers_opens_and_closes_write_nothing_to_the_mounts_log(store, mount_root):
    """Python's open() asks isatty() of every file (an ioctl through FUSE), and each close() flushes: fuser's default
    answers would log a warning for each, a million lines an epoch on ImageNet. mount-s3 answers them itself."""
    with Mount(_spec(store, mount_root), settings=store.settings) as mount:
        _epoch(store, mount.path)
        _read_again(store, mount.path)
        assert mount.log_path is not None
        logs = os.path.dirname(mount.log_path)
        own = [name for name in sorted(os.listdir(logs)) if name.startswith("mountpoint-s3-")]
        assert own, f"no log file of mount-s3's own in {logs}: {os.listdir(logs)}"
        text = ""
        for name in own:
            with open(os.path.join(logs, name), errors="replace") as f:
                text += f.read()
    noted = [line for line in text.splitlines() if "Not Implemented" in line or "flush failed" in line]
    assert not noted, f"{len(noted)} lines, the first: {noted[0]}"


def test_without_the_kept_pages_every_open_reads_again(store, mount_root):
    spec = _spec(store, mount_root, extra_args={"mount-s3": ("--no-keep-cache",)})
    with Mount(spec, settings=store.settings) as mount:
        _epoch(store, mount.path)
        second = _epoch(store, mount.path)
    assert second.get("GET") == FILES, second


def test_a_list_mount_keeps_the_pages_of_its_pinned_objects(store, mount_root):
    listing = s3_client(store.settings).list_objects_v2(Bucket=store.bucket, Prefix=PREFIX)["Contents"]
    objects = write_object_list(ListedObject(o["Key"][len(PREFIX):], o["ETag"], o["Size"]) for o in listing)
    spec = _spec(store, mount_root, objects=objects)
    with Mount(spec, settings=store.settings):
        first = _epoch(store, spec.data_dir)  # a list's objects appear one level down
        second = _read_again(store, spec.data_dir)
    assert first == {"GET": FILES}, first
    assert second == {}, second


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_a_replaced_object_is_read_new_after_the_ttl_and_never_old_past_it(store, mount_root):
    name = store.names[0]
    s3 = s3_client(store.settings)
    old = _read_direct(s3, store, name)
    new = os.urandom(SIZE)
    with Mount(_spec(store, mount_root, metadata_ttl_s=TTL_S), settings=store.settings) as mount:
        path = os.path.join(mount.path, name)
        looked_up = time.monotonic()  # no lookup of the old version happens before this
        assert _read(path) == old
        assert _read(path) == old
        try:
            s3.put_object(Bucket=store.bucket, Key=PREFIX + name, Body=new)
            replaced = time.monotonic()
            # Within the TTL the kept pages may still answer (with the old version whole, never a mix) ...
            seen = []
            while time.monotonic() < replaced + TTL_S + 3:
                started = time.monotonic()
                seen.append((started - replaced, _read(path)))
                time.sleep(0.1)
        finally:
            s3.put_object(Bucket=store.bucket, Key=PREFIX + name, Body=old)
    assert all(data in (old, new) for _, data in seen), "a read returned bytes of neither version"
    # ... and no read that began after the TTL (counted from the last lookup of the old version, which came
    # before the replacement) returns it.  A small margin: the kernel starts its clock a moment after ours.
    late = [(at, data) for at, data in seen if at > TTL_S + 0.5]
    assert late and all(data == new for _, data in late), \
        f"old bytes {[round(at, 2) for at, data in late if data == old]} s after the replacement (TTL {TTL_S} s)"
    print(f"\n[page cache] old version read until {max((at for at, d in seen if d == old), default=0):.2f} s after "
          f"the replacement, new from {min(at for at, d in seen if d == new):.2f} s (TTL {TTL_S} s, first lookup "
          f"{replaced - looked_up:.2f} s before it)")


def test_past_the_ttl_an_unchanged_object_is_looked_up_again_and_read_from_its_pages(store, mount_root):
    with Mount(_spec(store, mount_root, metadata_ttl_s=TTL_S), settings=store.settings) as mount:
        _epoch(store, mount.path)
        time.sleep(TTL_S + 0.5)
        mark = store.mark()
        later = _epoch(store, mount.path, gets=0, heads=1)
        listed = store.directory_listings(mark)
    # Each file is looked up in the store again: by its own HEAD, or (after the first file's HEAD) from the new
    # listing of the directory mount-s3 sends then, as after `ls`.
    heads = later.get("HEAD", 0)
    assert heads >= FILES or (heads >= 1 and listed), f"every file should have been looked up again: {later}"
    # Fewer GETs than files, not none: this machine may reclaim a few cold pages on its own (see _read_again).
    assert later.get("GET", 0) < FILES, f"the lookup should not have dropped the unchanged files' pages: {later}"


def _read_direct(s3, store: LoggedStore, name: str) -> bytes:
    return s3.get_object(Bucket=store.bucket, Key=PREFIX + name)["Body"].read()


def test_a_remount_reads_from_the_store_again(store, mount_root):
    with Mount(_spec(store, mount_root), settings=store.settings) as mount:
        _epoch(store, mount.path)
    with Mount(_spec(store, mount_root), settings=store.settings) as mount:
        again = _epoch(store, mount.path)
    assert again.get("GET") == FILES, f"a new mount must not find the old one's pages: {again}"


def test_after_kill_9_the_remounted_program_reads_from_the_store_again(store, mount_root):
    with Mount(_spec(store, mount_root), settings=store.settings, watchdog=True, watchdog_interval_s=0.5) as mount:
        _epoch(store, mount.path)
        # (The watchdog's probe looks up a name that does not exist, a HEAD and a LIST each time: not counted.)
        assert _read_again(store, mount.path).get("GET", 0) == 0
        killed = mount.pid
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not (mount.pid != killed and mount.health().state == "healthy"):
            assert time.monotonic() < deadline, "no remount within 30 s of kill -9"
            time.sleep(0.1)
        again = _epoch(store, mount.path)
    assert again.get("GET") == FILES, f"the remounted program must not find the killed one's pages: {again}"
