"""A mount of exactly the objects an index lists (mountctl's mount-s3, ``--manifest``): counted at the store.

Real mount-s3, real nginx logging every request in front of the real SeaweedFS.  The program itself sends no
LIST and no HEAD at all: listing the directory and opening every file cost one GET per file, each carrying
the indexed ETag, so an object replaced after indexing is refused (ESTALE) rather than read.  The one LIST is
mountctl's own check of the credentials and the bucket before the program starts, as for every mount.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import subprocess
import sys

import pytest
from own_data_support import write_class_tree
from test_resume import TINY

import mountctl
from mountctl import ListedObject, write_object_list
from mountctl.mounts.backends import BACKENDS
from mountctl.s3 import client as s3_client
from resnet import main

from conftest import missing, require_fuse
from request_log import PREFIX, logged_store, read_every_file
from torch_support import last_json_line

FILES = 12
SIZE = 64 * 1024


@pytest.fixture(scope="module")
def store(local_s3, tmp_path_factory):
    with logged_store(local_s3, str(tmp_path_factory.mktemp("index-mount")), files=FILES, size=SIZE) as logged:
        yield logged


@pytest.fixture
def objects(store):
    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not built; `bash scripts/setup.sh` builds it")
    listing = s3_client(store.settings).list_objects_v2(Bucket=store.bucket, Prefix=PREFIX)["Contents"]
    return write_object_list(ListedObject(o["Key"][len(PREFIX):], o["ETag"], o["Size"]) for o in listing)


def test_mounting_listing_and_opening_every_file_sends_no_list_or_head(store, objects, mount_root):
    before = store.mark()
    with mountctl.mount(store.uri, str(mount_root / "m"), objects=objects, shared=False,
                        settings=store.settings) as mounted:
        assert mounted.path == os.path.join(str(mount_root / "m"), PREFIX.rstrip("/"))
        assert sorted(os.listdir(mounted.path)) == store.names
        assert read_every_file(mounted.path, store.names) == FILES * SIZE
        store.settle(before, "GET", FILES)
    sent = store.since(before)  # the mount, its readiness check, the listing and every open and read
    print(f"\n[index mount] requests at the store: {dict(sent)} for {FILES} files")
    assert sent == {"LIST": 1, "GET": FILES}, sent  # the LIST: mountctl's access check, once, before mounting


def test_an_object_replaced_after_indexing_is_refused_not_read(store, objects, mount_root):
    name = store.names[0]
    with mountctl.mount(store.uri, str(mount_root / "m"), objects=objects, shared=False,
                        settings=store.settings) as mounted:
        s3_client(store.settings).put_object(Bucket=store.bucket, Key=PREFIX + name, Body=os.urandom(SIZE))
        try:
            with pytest.raises(OSError) as refused, open(os.path.join(mounted.path, name), "rb") as f:
                f.read()
            assert refused.value.errno == errno.ESTALE
            with open(os.path.join(mounted.path, store.names[1]), "rb") as f:  # the others still read
                assert len(f.read()) == SIZE
        finally:
            s3_client(store.settings).delete_object(Bucket=store.bucket, Key=PREFIX + name)
            s3_client(store.settings).put_object(Bucket=store.bucket, Key=PREFIX + name, Body=os.urandom(SIZE))


def test_a_class_tree_trains_from_its_index_with_no_list_or_head_during_the_epoch(local_s3, s3_env, tmp_path, mount_root,
                                                                                 monkeypatch):
    """ImageFolder's layout, indexed, then trained with --from-index: the epoch's opens cost one GET each."""
    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not built; `bash scripts/setup.sh` builds it")
    with logged_store(local_s3, str(tmp_path / "store"), files=0, size=1) as store:
        keys = write_class_tree(s3_client(local_s3.settings(direct=True)), store.bucket, PREFIX, per_class=4)
        for name, value in {"AWS_ENDPOINT_URL": store.settings.endpoint_url,
                            "AWS_ENDPOINT_URL_S3": store.settings.endpoint_url}.items():
            monkeypatch.setenv(name, value or "")
        assert main(["index", store.uri, "--no-progress"]) == 0
        before = store.mark()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = main(["train", store.uri, *TINY, "--max-epochs", "1", "--source-kind", "mountpoint",
                           "--backend", "mount-s3", "--from-index", "--mount-dir", str(mount_root / "m"),
                           "--num-workers", "2"])
        assert status == 0
        sent = store.since(before)
    print(f"\n[index mount, class tree] requests at the store while training: {dict(sent)} for {len(keys)} images")
    assert last_json_line(out.getvalue())["global_step"] > 0
    # Both LISTs come before the epoch: the trainer's one listing that finds the index, and mountctl's access
    # check before the program starts. Every open of the epoch is answered from the list.
    assert sent["HEAD"] == 0 and sent["LIST"] <= 2, sent
    assert sent["GET"] >= len(keys), sent


def test_mountctl_mount_objects_serves_the_list_under_its_directory(store, objects, s3_env, mount_root):
    directory = str(mount_root / "cli")
    env = {**os.environ, "AWS_ENDPOINT_URL": store.settings.endpoint_url or ""}
    done = subprocess.run([sys.executable, "-m", "mountctl", "mount", store.uri, directory, "--objects", objects],
                          capture_output=True, text=True, timeout=90, env=env)
    assert done.returncode == 0, done.stderr
    try:
        listed = os.path.join(directory, PREFIX.rstrip("/"))
        assert f"its listed objects are in {listed}" in done.stdout
        assert sorted(os.listdir(listed)) == store.names
    finally:
        subprocess.run([sys.executable, "-m", "mountctl", "unmount", directory], capture_output=True, timeout=60,
                       env=env, check=True)


def test_dlio_reads_an_index_mounted_dataset_with_no_list_or_head_during_its_run(local_s3, tmp_path, mount_root):
    """DLIO's own unet3d (tiny scale) over the bench's ``mount/mount-s3+index`` route: the files listed once
    before the mount, then DLIO's listing, the automatic warm and every open answered from the list."""
    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not built; `bash scripts/setup.sh` builds it")
    from benchmarks.harness.dlio import dlio_venv, read_summary, run_dlio
    from benchmarks.harness.mlperf import SCALES, _route_dir, dlio_overrides, generate_dataset, upload_dataset
    from mountctl.errors import InvalidSpec

    try:
        venv = dlio_venv()
    except InvalidSpec as exc:
        missing(str(exc))
    workload = next(w for w in SCALES["tiny"] if w.name == "unet3d")
    local, out = str(tmp_path / "generated"), str(tmp_path / "dlio-out")
    generate_dataset(venv, workload, local, 300)
    with logged_store(local_s3, str(tmp_path / "store"), files=0, size=1) as store:
        upload_dataset(store.settings, local, store.uri)
        before = store.mark()
        with _route_dir("mount/mount-s3+index", local, store.uri, store.settings, workload) as data:
            run_dlio(venv, 1, dlio_overrides(workload, data, out), out, 300)
        sent = store.since(before)  # the mount's own warm (automatic: the dataset fits its cache) included
    summary = read_summary(os.path.join(out, "summary.json"))
    print(f"\n[index mount, DLIO unet3d] requests at the store during the run: {dict(sent)} "
          f"for {workload.files} files; AU {summary['au_pct']} %")
    assert summary["au_pct"] > 0 and summary["samples_per_s"] > 0, summary
    # Both LISTs come before the program starts: the route's listing that makes the object list, and mountctl's
    # access check. Every open, DLIO's or the warm's, is answered from the list.
    assert sent["HEAD"] == 0 and sent["LIST"] <= 2, sent
    assert sent["GET"] >= workload.files, sent
