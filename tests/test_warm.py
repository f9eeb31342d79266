"""Warming a mount's cache ahead of the loader: real mounts, real reads, requests counted at the store.

After a warm, a loader's reads find every file in the program's cache (no GET); a warm is bounded in
time, can be cancelled, reports what it could not read, and leaves no process behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from mountctl import Mount, MountSpec
from mountctl.mounts.warm import Warmer, warm

from conftest import missing
from request_log import LoggedStore, logged_store, read_every_file

FILES = 16
SIZE = 64 * 1024


@pytest.fixture(scope="module")
def store(local_s3, tmp_path_factory):
    # 50 ms per request: a warm of 16 files one at a time takes about a second, enough to stop it midway.
    with logged_store(local_s3, str(tmp_path_factory.mktemp("warm")), files=FILES, size=SIZE,
                      latency_ms=50.0) as logged:
        yield logged


def _spec(store: LoggedStore, root, cache, backend: str = "rclone", **options) -> MountSpec:
    """The mount for a test; no warm unless the test asks (``warm=None``: mount-s3's automatic one)."""
    options.setdefault("warm", "off")
    return MountSpec(uri=store.uri, mount_dir=str(root / "m"), backend=backend, cache_dir=str(cache),
                     cache_size_mb=256, mount_timeout_s=60, **options)


def _warm_readers(root: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmd = process.info["cmdline"] or []
        if "mountctl.mounts.warm" in cmd and root in cmd:
            found.append(process)
    return found


def test_after_a_warm_reading_every_file_sends_no_get(store, backend, mount_root, tmp_path):
    with Mount(_spec(store, mount_root, tmp_path / "cache", backend), settings=store.settings) as mount:
        before = store.mark()
        report = warm(mount.path, store.names, timeout_s=120)
        assert report.complete and report.files == FILES and report.bytes == FILES * SIZE, report
        store.settle(before, "GET", FILES)
        mark = store.mark()
        assert read_every_file(mount.path, store.names) == FILES * SIZE
        sent = store.since(mark)
    assert sent["GET"] == 0, sent


def test_a_mount_asked_to_warm_everything_fills_its_cache_by_itself(store, mount_root, tmp_path):
    """No reader of ours: the requests the store sees are the warm's, one GET per file, and then a read costs none."""
    with Mount(_spec(store, mount_root, tmp_path / "cache", warm="all"), settings=store.settings) as mount:
        deadline = time.monotonic() + 120
        while mount.warm_report is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert mount.warm_report is not None and mount.warm_report.complete, mount.warm_report
        assert [e["event"] for e in mount.events if e["event"].startswith("warm")] == ["warming", "warmed"]
        mark = store.mark()
        read_every_file(mount.path, store.names)
        assert store.since(mark)["GET"] == 0


def _mount_s3_or_skip() -> None:
    from mountctl.mounts.backends import BACKENDS

    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not installed; `bash scripts/setup.sh` builds it")


def _warm_ended(mount: Mount) -> None:
    deadline = time.monotonic() + 120
    while mount.warm_report is None and time.monotonic() < deadline:
        time.sleep(0.1)


def test_a_mount_s3_mount_with_a_cache_warms_every_file_by_itself_when_the_tree_fits(store, mount_root, tmp_path):
    """Nobody asks for a warm: mount-s3 with a cache reads the whole tree once (one GET per file), and the loader's
    first epoch then costs no GET."""
    _mount_s3_or_skip()
    mark = store.mark()
    with Mount(_spec(store, mount_root, tmp_path / "cache", "mount-s3", warm=None), settings=store.settings) as mount:
        _warm_ended(mount)
        report = mount.warm_report
        assert report is not None and report.complete and report.files == FILES, report
        assert [e["event"] for e in mount.events if e["event"].startswith("warm")] == ["warming", "warmed"]
        assert "if all of them fit" in next(e["detail"] for e in mount.events if e["event"] == "warming")
        store.settle(mark, "GET", FILES)
        assert store.since(mark)["GET"] == FILES
        epoch = store.mark()
        assert read_every_file(mount.path, store.names) == FILES * SIZE
        assert store.since(epoch)["GET"] == 0


def test_a_mount_s3_mount_with_no_cache_warms_the_page_cache_by_itself_and_only_when_read_only(
        store, mount_root):
    """No data cache, nobody asks: mountctl's mount-s3 keeps the kernel's page cache across opens, so it warms the
    tree into it (one GET per file), and the loader's first epoch then costs no GET. A read-write mount (a
    checkpoint directory) and one told `--no-keep-cache` keep nothing a warm could leave there: no warm."""
    _mount_s3_or_skip()
    from mountctl.mounts.backends import BACKENDS

    if not BACKENDS["mount-s3"].version().startswith("mount-s3 built from"):
        missing("mountctl's mount-s3 is not built (AWS's does not keep the page cache); `bash scripts/setup.sh`")
    plain = dict(uri=store.uri, mount_dir=str(mount_root / "m"), backend="mount-s3", mount_timeout_s=60)
    mark = store.mark()
    with Mount(MountSpec(**plain), settings=store.settings) as mount:
        _warm_ended(mount)
        report = mount.warm_report
        assert report is not None and report.complete and report.files == FILES, report
        warming = next(e["detail"] for e in mount.events if e["event"] == "warming")
        assert "into the page cache" in warming and "if all of them fit" in warming, warming
        store.settle(mark, "GET", FILES)
        assert store.since(mark)["GET"] == FILES
        epoch = store.mark()
        assert read_every_file(mount.path, store.names) == FILES * SIZE
        # This machine may reclaim a few cold pages on its own (tests/test_page_cache.py, _read_again): then the
        # rest of one file is read again, never the whole warm.
        assert store.since(epoch)["GET"] <= 2, store.since(epoch)
    for options in ({"read_only": False}, {"extra_args": {"mount-s3": ("--no-keep-cache",)}}):
        with Mount(MountSpec(**plain, **options), settings=store.settings) as mount:
            time.sleep(1)
            assert not [e for e in mount.events if e["event"].startswith("warm")], (options, mount.events)


def test_an_automatic_warm_of_a_tree_larger_than_its_budget_reads_nothing(store, mount_root, tmp_path):
    """The automatic warm reads all or nothing: a tree past its budget is said, and not one GET is sent (a user
    who mounts a bucket far larger than the cache pays a bounded listing, not a cache's worth of downloads)."""
    _mount_s3_or_skip()
    with Mount(_spec(store, mount_root, tmp_path / "cache", "mount-s3"), settings=store.settings) as mount:
        mark = store.mark()
        report = Warmer(mount.path, budget_bytes=FILES * SIZE // 2, only_if_fits=True, timeout_s=120).start().wait()
        assert report.files == 0 and report.bytes == 0 and not report.complete, report
        assert FILES * SIZE // 2 < report.outgrown_bytes <= FILES * SIZE // 2 + SIZE, report
        assert "outgrow the cache" in report.summary() and "--warm" in report.summary()
        assert store.since(mark)["GET"] == 0


def test_warm_off_and_the_other_programs_get_no_automatic_warm(store, backend, mount_root, tmp_path):
    asked = "off" if backend == "mount-s3" else None
    with Mount(_spec(store, mount_root, tmp_path / "cache", backend, warm=asked), settings=store.settings) as mount:
        time.sleep(1)
        assert not [e for e in mount.events if e["event"].startswith("warm")], mount.events
        assert mount.warm_report is None


def test_a_missing_object_is_reported_and_the_rest_is_warmed(store, mount_root, tmp_path):
    with Mount(_spec(store, mount_root, tmp_path / "cache"), settings=store.settings) as mount:
        report = warm(mount.path, ["gone.jpg", *store.names[:4]], timeout_s=120)
    assert report.missing == ["gone.jpg"]
    assert report.files == 4 and not report.complete
    assert "1 missing" in report.summary()


def test_a_warm_stops_at_its_time_bound_and_leaves_no_reader(store, mount_root, tmp_path):
    with Mount(_spec(store, mount_root, tmp_path / "cache"), settings=store.settings) as mount:
        started = time.monotonic()
        report = warm(mount.path, store.names, workers=1, timeout_s=0.5)
        took = time.monotonic() - started
        assert report.timed_out and report.files < FILES, report
        assert took < 15, f"a warm bounded to 0.5 s returned after {took:.1f} s"
        assert _warm_readers(mount.path) == []


def test_a_cancelled_warm_ends_at_once_and_leaves_no_reader(store, mount_root, tmp_path):
    with Mount(_spec(store, mount_root, tmp_path / "cache"), settings=store.settings) as mount:
        warmer = Warmer(mount.path, store.names, workers=1, timeout_s=120).start()
        time.sleep(0.3)
        warmer.cancel()
        report = warmer.wait()
        assert report.cancelled and report.files < FILES, report
        assert _warm_readers(mount.path) == []


def test_unmounting_during_a_warm_stops_it(store, mount_root, tmp_path):
    mount = Mount(_spec(store, mount_root, tmp_path / "cache", warm="all"), settings=store.settings).start()
    path = mount.path
    time.sleep(0.3)
    mount.stop()  # must not wait for the warm, nor leave its reader holding the mount busy
    assert _warm_readers(path) == []


def test_cli_mount_warm_reads_the_listed_files_into_the_cache(store, local_s3, mount_root, tmp_path):
    """`mountctl mount --warm LIST`: the supervisor warms the listed files with no reader of ours."""
    listing = tmp_path / "files.txt"
    listing.write_text("\n".join(store.names[:5]) + "\n")
    env = {**os.environ, **local_s3.env(), "AWS_ENDPOINT_URL": store.settings.endpoint_url or ""}
    mount_dir = str(mount_root / "cli")
    command = [sys.executable, "-m", "mountctl", "mount", store.uri, mount_dir, "--backend", "rclone",
               "--cache-dir", str(tmp_path / "cache"), "--warm", str(listing)]
    mark = store.mark()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "warming its cache" in done.stdout
    try:
        store.settle(mark, "GET", 5, timeout_s=60)
        assert store.since(mark)["GET"] == 5
        deadline, warm = time.monotonic() + 60, None
        while time.monotonic() < deadline and (warm or {}).get("state") != "warmed":
            shown = subprocess.run([sys.executable, "-m", "mountctl", "status", "--json"], env=env,
                                   capture_output=True, text=True, timeout=60)
            warm = next(row["warm"] for row in json.loads(shown.stdout)["mounts"] if row["dir"] == mount_dir)
            time.sleep(0.2)
        assert warm == {"state": "warmed", "detail": warm["detail"]} and warm["detail"].startswith("5 files"), warm
    finally:
        subprocess.run([sys.executable, "-m", "mountctl", "unmount", mount_dir], env=env, capture_output=True,
                       timeout=120)



def test_a_warm_reader_dies_with_the_process_that_started_it(tmp_path):
    """A named pipe with no writer stands in for a read that never returns (a wedged mount): the reader
    blocks opening it, and must still go when its starter is SIGKILLed (no chance to cancel it)."""
    os.mkfifo(tmp_path / "stuck")
    starter = subprocess.Popen([sys.executable, "-c", (
        "import time\n"
        "from mountctl.mounts.warm import Warmer\n"
        f"warmer = Warmer({str(tmp_path)!r}, ['stuck'], timeout_s=300).start()\n"
        "print(warmer.pid, flush=True)\n"
        "time.sleep(300)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert starter.stdout is not None
        reader = psutil.Process(int(starter.stdout.readline()))
        time.sleep(1)
        assert reader.is_running() and reader.status() != psutil.STATUS_ZOMBIE, "the reader ended on its own"
    finally:
        starter.kill()
        starter.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if reader.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:  # stopped by the kernel and reaped
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the warm reader (pid {reader.pid}) still runs 30 s after its starter was killed")


def test_a_listed_path_outside_the_directory_is_refused_and_reported(tmp_path):
    (tmp_path / "inside").mkdir()
    (tmp_path / "inside" / "a.jpg").write_bytes(b"a" * 10)
    (tmp_path / "secret").write_bytes(b"s")
    report = warm(str(tmp_path / "inside"), ["a.jpg", "../secret"], timeout_s=60)
    assert report.files == 1 and report.bytes == 10
    assert report.failed == ["../secret: outside the mount"]


def test_a_list_mount_warms_the_listed_paths_under_the_directory_it_serves(store, mount_root, tmp_path):
    """A mount of a list of objects serves them under one directory (MountSpec.data_dir), and warm's paths are
    relative to the prefix: they were resolved against the mount point, so every one read as missing."""
    from mountctl import ListedObject, parse_s3_uri, write_object_list
    from mountctl.mounts.backends import BACKENDS
    from mountctl.s3 import client, list_objects


    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not installed; `bash scripts/setup.sh` builds it")
    location = parse_s3_uri(store.uri)
    listed = list_objects(client(store.settings), location.bucket, location.prefix)
    objects = write_object_list([ListedObject(key, stored.etag or "", stored.size) for key, stored in listed.items()])
    listing = tmp_path / "warm.txt"
    listing.write_text("\n".join(store.names) + "\n")
    spec = _spec(store, mount_root, tmp_path / "cache", backend="mount-s3", objects=objects, warm=str(listing))
    with Mount(spec, settings=store.settings) as mount:
        deadline = time.monotonic() + 120
        while mount.warm_report is None and time.monotonic() < deadline:
            time.sleep(0.1)
        report = mount.warm_report
        assert report is not None and report.complete and not report.missing, report
        assert report.files == FILES and report.bytes == FILES * SIZE, report
