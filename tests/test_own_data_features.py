"""The bench, its peers, ranks and elastic resume on data that `make` did not write (issue #24, item 4).

Shards written by webdataset's real ``ShardWriter`` (labels in a JSON field, images of mixed sizes) are uploaded
with boto3, indexed with `resnet.py index`, then benched and trained through the real command line against the
real local S3: through a key that can only read the data, and through a request-logging nginx in front of it.
Tiny on purpose (tens of samples, 32 px, ResNet-18 on a CPU).
"""

from __future__ import annotations

import glob
import json
import os
import uuid

import pytest
from own_data_support import listing, write_shards
from test_resume import ddp, kill_resume_audit

from conftest import make_bucket, remove_bucket, require_fuse
from request_log import PREFIX, logged_store
from torch_support import run_cli


def full_lists(store, mark: int) -> int:
    """boto3's paginated LISTs of the whole prefix in the request log since ``mark``."""
    store.mark()  # waits until nginx has written its last line
    with open(store.proxy.requests_path, encoding="utf-8") as f:
        lines = f.read().splitlines()[mark:]
    return sum(1 for line in lines if "?list-type=2&" in line and "delimiter=" in line and "max-keys" not in line)


def index_to(uri: str, out: str, *extra: str) -> dict:
    done = run_cli(["index", uri, "--no-progress", "--jobs", "2", "--index-out", out, *extra])
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def read_only_key(local_s3, s3, monkeypatch):
    """A key that reads and lists every bucket and writes only to a bucket of its own (the peers' place):
    the data's bucket is read-only to the bench, as a user's often is.  Yields that writable bucket."""
    from mountctl.local_s3.identities import add_identity, revoke_identity

    writable = make_bucket(s3, f"peers-{uuid.uuid4().hex[:8]}")
    user, access, secret = f"ro-{uuid.uuid4().hex[:6]}", f"RO{uuid.uuid4().hex[:16].upper()}", uuid.uuid4().hex
    add_identity(local_s3, user, access, secret, actions=("Read", "List", f"Write:{writable}"))
    try:
        with monkeypatch.context() as patch:
            patch.setenv("AWS_ACCESS_KEY_ID", access)
            patch.setenv("AWS_SECRET_ACCESS_KEY", secret)
            yield writable
    finally:
        revoke_identity(local_s3, user, access)
        remove_bucket(s3, writable)


def test_bench_on_read_only_indexed_shards_runs_every_kind_and_a_peer_and_writes_nothing_there(
        s3_env, s3, bucket, read_only_key, tmp_path):
    require_fuse()
    keys = write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=2, per_shard=8, classes=3, label="json")
    uri, index = f"s3://{bucket}/own/", str(tmp_path / "own.wids.json")
    with pytest.MonkeyPatch.context() as admin:  # indexing needs no write either: the index goes to a local file
        admin.setenv("AWS_ACCESS_KEY_ID", s3_env.access_key_id)
        admin.setenv("AWS_SECRET_ACCESS_KEY", s3_env.secret_access_key)
        index_to(uri, index, "--label-field", "label")
    before = listing(s3, bucket, "")
    sweep = ["bench", uri, "--index", index, "--preset", "tiny", "--store", "local", "--backends", "rclone",
             "--no-bytes", "--no-progress", "--peers", "litdata", "--out", str(tmp_path / "out")]

    refused = run_cli(sweep, timeout=120)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr[-2000:]
    assert "--peer-data s3://your-writable-bucket/prefix/" in refused.stderr
    assert not glob.glob(str(tmp_path / "out" / "*.json"))

    peers = f"s3://{read_only_key}/copies/"
    done = run_cli([*sweep, "--peer-data", peers], timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    [report] = glob.glob(str(tmp_path / "out" / "*.json"))
    with open(report, encoding="utf-8") as f:
        cells = json.load(f)["cells"]
    loaders = [c for c in cells if c["cell"] == "loader"]
    assert {c["source"] for c in loaders} == {"local-disk", "mountpoint/rclone", "s3io", "fsspec", "litdata"}
    assert all(c["status"] == "ok" for c in loaders), [c["status"] for c in loaders if c["status"] != "ok"]
    assert len(loaders) == 5 * 2  # epochs 1 and 2 of each; a loader cell fails unless every sample arrived
    assert all(c["images"] == len(keys) for c in loaders if c["source"] != "litdata")
    assert {c["samples_checked"] for c in loaders if c["source"] == "litdata"} == {len(keys)}
    assert not [c for c in cells if c["cell"] in ("train", "map", "checkpoint-save")]  # they would write
    assert listing(s3, bucket, "") == before  # not one object added or changed in the data's bucket
    copy = json.loads(s3.get_object(Bucket=read_only_key, Key="copies/own.litdata/peer.json")["Body"].read())
    assert copy["num_images"] == len(keys)


def test_two_ranks_killed_then_resumed_on_one_rank_train_every_sample_once_without_a_sizing_list(
        local_s3, s3_env, s3, mount_root, tmp_path):
    """Behind a request-logging nginx: the cache of the shared mount is sized from the index, so the ranks
    LIST the prefix only for the start-up check that the shards are still the ones indexed."""
    require_fuse()
    with logged_store(local_s3, str(tmp_path / "store"), files=0, size=0) as store:
        write_shards(s3, store.bucket, PREFIX, str(tmp_path / "w"), shards=4, per_shard=14, classes=4)
        index_to(store.uri, str(tmp_path / "index.json"))
        env = {**os.environ, "AWS_ENDPOINT_URL": store.settings.endpoint_url or "",
               "AWS_ENDPOINT_URL_S3": store.settings.endpoint_url or ""}
        mark = store.mark()
        common = ["--index", str(tmp_path / "index.json"), "--source-kind", "mountpoint", "--backend", "rclone",
                  "--mount-dir", str(mount_root / "m")]
        counts, summary = kill_resume_audit(store.uri, tmp_path, before=[*common, *ddp(2), "--num-workers", "2"],
                                            after=[*common, *ddp(1), "--num-workers", "3"], num_images=56, env=env)
        lists = full_lists(store, mark)
    assert summary["world_size"] == 1
    # boto3's whole-prefix LIST (list_objects_v2 pages, by delimiter): the start-up check, once per rank process
    # (2 killed, 1 resumed).  Sizing the cache by a LIST would send the same request once more per rank; the
    # mount program's own listings (rclone: max-keys=1000) and the one-key access probes are not counted.
    assert lists == 3, f"{lists} whole-prefix LISTs from 3 rank processes"
