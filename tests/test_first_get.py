"""mount-s3's first GET sized by what is known (mount-s3/src/ahead/first_get.rs), through a real mount.

Real mountctl mount-s3 (our build), real nginx logging every request and the bytes it sent in front of the
session's real SeaweedFS (tests/request_log.py). A file read whole from offset 0 costs one GET of the whole
object; a 64 KiB read deep in a large object still costs one small GET. No directory is listed, so the
read-ahead across files starts nothing.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

import mountctl
from mountctl.mounts.backends import BACKENDS
from mountctl.s3 import client as s3_client

from conftest import missing, require_fuse
from request_log import PREFIX, LoggedStore, logged_store

MIB = 1 << 20
SIZE = 4 * MIB  # a medium object: under the 5 MiB read part, so one GET is one request
BIG = "big.bin"
BIG_SIZE = 64 * MIB


@pytest.fixture(scope="module")
def store(local_s3, tmp_path_factory):
    with logged_store(local_s3, str(tmp_path_factory.mktemp("first-get")), files=2, size=SIZE) as logged:
        s3_client(local_s3.settings(direct=True)).put_object(Bucket=logged.bucket, Key=PREFIX + BIG,
                                                              Body=os.urandom(BIG_SIZE))
        yield logged


@pytest.fixture
def ours(store):
    require_fuse()
    backend = BACKENDS["mount-s3"]
    if not backend.available():
        missing("mount-s3 is not built; `bash scripts/setup.sh` builds it")
    if not backend.version().startswith("mount-s3 built from "):
        pytest.skip("AWS's mount-s3 runs here: --whole-first-get is a flag of mountctl's build")


def _gets(store: LoggedStore, mark: int, name: str) -> list[int]:
    """The bytes sent for each GET of ``name`` since ``mark`` (the log: method, URI, status, bytes, connection)."""
    store.mark()  # waits until nginx has written the last line
    with open(store.proxy.requests_path) as log:
        lines = log.read().splitlines()[mark:]
    sent = []
    for line in lines:
        method, uri, _status, body_bytes = line.split(" ")[:4]
        if method == "GET" and uri.split("?", 1)[0].endswith(f"/{store.bucket}/{PREFIX}{name}"):
            sent.append(int(body_bytes))
    return sent


def _read(path: str, offset: int = 0, size: int = -1) -> bytes:
    with open(path, "rb", buffering=0) as file:
        file.seek(offset)
        if size >= 0:
            return file.read(size)
        chunks = []
        while chunk := file.read(MIB):
            chunks.append(chunk)
        return b"".join(chunks)


def _mount(store: LoggedStore, mount_root: Path, *flags: str) -> contextlib.AbstractContextManager[mountctl.MountHandle]:
    return mountctl.mount(store.uri, str(mount_root / "m"), backend="mount-s3", shared=False, settings=store.settings,
                          extra_args={"mount-s3": flags}, warm="off")


def test_a_file_read_whole_from_offset_0_costs_one_get_of_the_whole_object(store, ours, mount_root):
    name = store.names[0]
    expected = s3_client(store.settings).get_object(Bucket=store.bucket, Key=PREFIX + name)["Body"].read()
    with _mount(store, mount_root) as mounted:
        path = os.path.join(mounted.path, name)
        os.stat(path)  # the lookup's own requests are not counted
        before = store.mark()
        assert _read(path) == expected
        store.settle(before, "GET", 1)
        sent = _gets(store, before, name)
    print(f"\n[first GET] whole {SIZE // MIB} MiB read from offset 0: GETs of {sent} bytes")
    assert sent == [SIZE]


def test_with_the_flag_off_the_same_read_costs_the_prefetchers_requests(store, ours, mount_root):
    """The case above with `--whole-first-get 0`: the crates' 1.125 MiB first GET, then another for the rest."""
    name = store.names[1]
    with _mount(store, mount_root, "--whole-first-get", "0") as mounted:
        path = os.path.join(mounted.path, name)
        os.stat(path)
        before = store.mark()
        assert len(_read(path)) == SIZE
        store.settle(before, "GET", 2)
        sent = _gets(store, before, name)
    print(f"\n[first GET off] whole {SIZE // MIB} MiB read from offset 0: GETs of {sent} bytes")
    assert len(sent) >= 2 and sent[0] < 2 * MIB, sent
    assert sum(sent) == SIZE


def test_a_64_kib_read_deep_in_a_large_object_costs_one_small_get(store, ours, mount_root):
    offset = 40 * MIB + 12345
    expected = s3_client(store.settings).get_object(Bucket=store.bucket, Key=PREFIX + BIG,
                                                    Range=f"bytes={offset}-{offset + 64 * 1024 - 1}")["Body"].read()
    with _mount(store, mount_root) as mounted:
        path = os.path.join(mounted.path, BIG)
        os.stat(path)
        before = store.mark()
        assert _read(path, offset, 64 * 1024) == expected
        store.settle(before, "GET", 1)
        sent = _gets(store, before, BIG)
    print(f"\n[first GET] 64 KiB at {offset} of a {BIG_SIZE // MIB} MiB object: GETs of {sent} bytes")
    # The prefetcher's own first GET (1.125 MiB from the 1 MiB block the read falls in), never the object.
    assert len(sent) == 1 and sent[0] <= 2 * MIB, sent
