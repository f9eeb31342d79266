"""What one open costs a loader that opens one file per sample: S3 requests per open, counted at the store.

Each program mounts a prefix of small objects with its cache on, behind a far store that logs every
request.  The directory is listed once (as ``ImageFolder`` does), then every file is opened, read and
closed, twice.  Epoch 1 may cost one GET per file; epoch 2 comes from the cache and should cost nothing.

s3fs-fuse 1.90 is the exception this file states rather than hides: it drops a file's stat entry at every
open, so each open sends one HEAD whatever its options say (docs/standard-loaders.md).  The assertions
hold it to at most that one HEAD (it sent two per cached open before the kernel kept attributes for the TTL).
"""

from __future__ import annotations

import os

import pytest

from mountctl import Mount, MountSpec

from request_log import LoggedStore, logged_store, read_every_file

FILES = 12
SIZE = 96 * 1024  # one GET each: smaller than every program's first read request
# HEADs per open that a program cannot avoid; everything else must be zero (see the module docstring).
HEADS_PER_OPEN = {"rclone": 0, "s3fs": 1, "mount-s3": 0}


@pytest.fixture(scope="module")
def store(local_s3, tmp_path_factory):
    with logged_store(local_s3, str(tmp_path_factory.mktemp("open-cost")), files=FILES, size=SIZE) as logged:
        yield logged


def _mounted(store: LoggedStore, backend: str, root, cache) -> Mount:
    spec = MountSpec(uri=store.uri, mount_dir=str(root / "m"), backend=backend, cache_dir=str(cache),
                     cache_size_mb=256, mount_timeout_s=60, warm="off")  # the program's own cost, no warm of ours
    return Mount(spec, settings=store.settings)


def _listed(store: LoggedStore, path: str) -> None:
    assert sorted(os.listdir(path)) == store.names


def test_epoch_1_costs_one_get_per_file(store, backend, mount_root, tmp_path):
    with _mounted(store, backend, mount_root, tmp_path / "cache") as mount:
        _listed(store, mount.path)
        mark = store.mark()
        assert read_every_file(mount.path, store.names) == FILES * SIZE
        store.settle(mark, "GET", FILES)
    sent = store.since(mark)  # after the unmount: every request has ended and been logged
    assert sent["GET"] == FILES, sent
    assert sent["HEAD"] <= HEADS_PER_OPEN[backend] * FILES, sent
    assert set(sent) <= {"GET", "HEAD"}, sent


def test_epoch_2_from_the_cache_sends_no_get(store, backend, mount_root, tmp_path):
    with _mounted(store, backend, mount_root, tmp_path / "cache") as mount:
        _listed(store, mount.path)
        before = store.mark()
        read_every_file(mount.path, store.names)
        store.settle(before, "GET", FILES)
        mark = store.mark()
        assert read_every_file(mount.path, store.names) == FILES * SIZE
        sent = store.since(mark)
    # At most the HEAD per open a program cannot avoid, and nothing else.  Not exactly one each: s3fs
    # sometimes serves an open from a stat entry still fresh (11 of 12 in one CI run).
    assert sent["HEAD"] <= HEADS_PER_OPEN[backend] * FILES, sent
    assert {method for method, count in sent.items() if count} <= {"HEAD"}, sent

