"""mount-s3's read ahead across files (mount-s3/src/ahead/), through a real mount of the real SeaweedFS.

Real mountctl mount-s3 (our build: where /work/h7/bin or .venv/libexec holds it), real nginx logging every request
in front of the server (tests/request_log.py). A reader that reads a listed directory's files in order gets the
next files fetched ahead, and each object is still fetched once (so does one that opens them by name, with one
listing of the directory by mount-s3 for its order); a replaced object is never served from memory;
kill -9 of mount-s3 mid-read loses nothing but the memory.
"""

from __future__ import annotations

import errno
import os
import signal
import time

import pytest

import mountctl
from mountctl import ListedObject, write_object_list
from mountctl.mounts.backends import BACKENDS
from mountctl.s3 import client as s3_client

from conftest import missing, require_fuse
from request_log import PREFIX, logged_store

FILES = 12
SIZE = 64 * 1024


@pytest.fixture(scope="module")
def store(local_s3, tmp_path_factory):
    with logged_store(local_s3, str(tmp_path_factory.mktemp("ahead")), files=FILES, size=SIZE) as logged:
        yield logged


@pytest.fixture
def contents(store):
    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not built; `bash scripts/setup.sh` builds it")
    s3 = s3_client(store.settings)
    return {name: s3.get_object(Bucket=store.bucket, Key=PREFIX + name)["Body"].read() for name in store.names}


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _read_through_a_remount(path: str, timeout_s: float = 60.0) -> bytes:
    """Read a file whole, retrying (bounded) while the mount is down between a kill and the remount."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return _read(path)
        except OSError as error:
            if error.errno not in (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO, errno.ENOENT) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_reading_a_listed_directory_in_order_fetches_ahead_and_each_object_once(store, contents, mount_root):
    with mountctl.mount(store.uri, str(mount_root / "m"), backend="mount-s3", shared=False, warm="off",
                        settings=store.settings) as mounted:
        names = sorted(os.listdir(mounted.path))
        assert names == store.names
        before = store.mark()
        assert _read(os.path.join(mounted.path, names[0])) == contents[names[0]]
        store.settle(before, "GET", 2)
        after_first = store.since(before)["GET"]
        assert after_first > 1, "reading the first file fetched nothing ahead"
        for name in names[1:]:
            assert _read(os.path.join(mounted.path, name)) == contents[name], name
        store.settle(before, "GET", FILES)
        sent = store.since(before)
    print(f"\n[read ahead] {after_first} GETs once the first file was read; {dict(sent)} for {FILES} files")
    assert sent["GET"] == FILES, sent  # no object fetched twice


def test_a_reader_that_opens_files_by_name_without_listing_gets_them_read_ahead_too(store, contents, mount_root):
    # A list of paths, an index, `shard-{000..099}.tar`: no readdir, a lookup per file. mount-s3 lists the
    # directory once at the first file it finds, so the reads in that order are read ahead all the same, and the
    # later lookups are answered from that listing.
    with mountctl.mount(store.uri, str(mount_root / "m"), backend="mount-s3", shared=False, warm="off",
                        settings=store.settings) as mounted:
        before = store.mark()
        for name in store.names[:2]:  # the first read may come before the listing is in; the second follows it
            assert _read(os.path.join(mounted.path, name)) == contents[name], name
        store.settle(before, "GET", 3)
        after_two = store.since(before)
        assert after_two["GET"] > 2, f"reading two files by name fetched nothing ahead: {dict(after_two)}"
        for name in store.names[2:]:
            assert _read(os.path.join(mounted.path, name)) == contents[name], name
        store.settle(before, "GET", FILES)
        sent = store.since(before)
        directory = store.directory_listings(before)
    print(f"\n[read ahead by name] {dict(after_two)} after two files; {dict(sent)} for {FILES} files; "
          f"{len(directory)} listing of the directory")
    assert sent["GET"] == FILES, sent  # no object fetched twice
    assert len(directory) == 1, directory  # listed once, for its order and for the lookups
    # Only the lookups that came before the listing was in went to the store: the first file's, perhaps the
    # second's; the rest were answered from the listing, as after `ls`.
    assert sent["HEAD"] <= 2, sent


def test_an_object_replaced_after_it_was_fetched_ahead_is_read_new(store, contents, mount_root):
    name = store.names[2]
    new = os.urandom(SIZE)
    s3 = s3_client(store.settings)
    # Metadata as fresh as the kernel allows: the open looks the object up again and sees the new ETag.
    with mountctl.mount(store.uri, str(mount_root / "m"), backend="mount-s3", shared=False, settings=store.settings,
                        metadata_ttl_s=0, warm="off") as mounted:
        os.listdir(mounted.path)
        before = store.mark()
        _read(os.path.join(mounted.path, store.names[0]))
        store.settle(before, "GET", 3)  # objects 1 and 2 fetched ahead
        s3.put_object(Bucket=store.bucket, Key=PREFIX + name, Body=new)
        try:
            assert _read(os.path.join(mounted.path, store.names[1])) == contents[store.names[1]]
            got = _read(os.path.join(mounted.path, name))
        finally:
            s3.put_object(Bucket=store.bucket, Key=PREFIX + name, Body=contents[name])
    assert got != contents[name], "the replaced object was served from memory"
    assert got == new


def test_on_a_list_mount_an_object_replaced_before_it_is_read_ahead_is_refused_and_the_rest_read(
        store, contents, mount_root):
    """The ahead GET carries the listed ETag: for a replaced object it fails, and the reader's own GET is refused
    with ESTALE as without read-ahead; the objects around it are read from memory, right."""
    s3 = s3_client(store.settings)
    listing = s3.list_objects_v2(Bucket=store.bucket, Prefix=PREFIX)["Contents"]
    objects = write_object_list(ListedObject(o["Key"][len(PREFIX):], o["ETag"], o["Size"]) for o in listing)
    replaced = store.names[3]
    with mountctl.mount(store.uri, str(mount_root / "m"), objects=objects, shared=False, warm="off",
                        settings=store.settings) as mounted:
        s3.put_object(Bucket=store.bucket, Key=PREFIX + replaced, Body=os.urandom(SIZE))
        try:
            before = store.mark()
            for name in store.names:
                path = os.path.join(mounted.path, name)
                if name == replaced:
                    with pytest.raises(OSError) as refused:
                        _read(path)
                    assert refused.value.errno == errno.ESTALE
                else:
                    assert _read(path) == contents[name], name
            store.settle(before, "GET", FILES + 1)
            gets = store.gets_by_name(before)
        finally:
            s3.put_object(Bucket=store.bucket, Key=PREFIX + replaced, Body=contents[replaced])
    # Every other object fetched once, and every GET of the replaced one refused (412): its ahead GET and the
    # reader's (how many times the kernel asks again for a read that failed is the kernel's, not ours).
    others = {name: statuses for name, statuses in gets.items() if name != replaced}
    assert sorted(others) == [name for name in store.names if name != replaced], gets
    assert all(len(statuses) == 1 and statuses[0] in (200, 206) for statuses in others.values()), gets
    assert gets[replaced] and set(gets[replaced]) == {412}, gets[replaced]


def test_kill_9_of_mount_s3_mid_read_recovers_with_every_file_read_once_right(store, contents, mount_root):
    got: dict[str, bytes] = {}
    with mountctl.mount(store.uri, str(mount_root / "m"), backend="mount-s3", shared=False, warm="off",
                        settings=store.settings) as mounted:
        names = sorted(os.listdir(mounted.path))
        first_pid = mounted.pid
        assert first_pid is not None
        for index, name in enumerate(names):
            if index == 4:  # files 5.. were being fetched ahead: that memory dies with the program
                os.kill(first_pid, signal.SIGKILL)
            got[name] = _read_through_a_remount(os.path.join(mounted.path, name))
        assert mounted.pid not in (None, first_pid), "the mount was not remounted"
    assert list(got) == store.names
    for name in store.names:
        assert got[name] == contents[name], name
