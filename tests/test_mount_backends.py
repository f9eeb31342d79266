"""One body per behaviour, run against every installed mount program (real S3, real FUSE)."""

from __future__ import annotations

import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import mountctl
from mountctl import Mount, MountSpec
from mountctl.mounts.mounttable import find_mount
from mountctl.s3 import client as s3_client

from conftest import make_bucket, require_fuse

BIG_SIZE = 100 * 1024 * 1024
SMALL_COUNT = 1000


@pytest.fixture(scope="module")
def dataset(local_s3):
    """A bucket with one 100 MB object and 1,000 small ones, shared by the backends."""
    s3 = s3_client(local_s3.settings())
    bucket = make_bucket(s3, "dataset-backends")
    big = os.urandom(BIG_SIZE)
    s3.put_object(Bucket=bucket, Key="data/big.bin", Body=big)
    small = {f"data/small/{i:04d}.bin": os.urandom(64 + i) for i in range(SMALL_COUNT)}
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: s3.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), small.items()))
    return {"bucket": bucket, "big_sha": hashlib.sha256(big).hexdigest(), "small_keys": sorted(small)}


def _sha256_of_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def test_mount_serves_the_same_bytes_as_direct_gets(backend, dataset, s3, mount_root):
    spec = MountSpec(uri=f"s3://{dataset['bucket']}/data/", mount_dir=str(mount_root / "m"), backend=backend)
    with Mount(spec) as m:
        assert m.backend == backend
        assert sorted(os.listdir(m.path)) == ["big.bin", "small"]
        names = sorted(os.listdir(os.path.join(m.path, "small")))
        assert len(names) == SMALL_COUNT

        assert os.path.getsize(os.path.join(m.path, "big.bin")) == BIG_SIZE
        direct = hashlib.sha256(s3.get_object(Bucket=dataset["bucket"], Key="data/big.bin")["Body"].read())
        assert _sha256_of_file(os.path.join(m.path, "big.bin")) == direct.hexdigest() == dataset["big_sha"]

        def same(key: str) -> bool:
            with open(os.path.join(m.path, key[len("data/"):]), "rb") as f:
                through_mount = f.read()
            return through_mount == s3.get_object(Bucket=dataset["bucket"], Key=key)["Body"].read()

        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(same, dataset["small_keys"]))
        assert m.health().state == "healthy"
    assert find_mount(spec.mount_dir) is None
    assert not os.path.exists(spec.mount_dir), "the mount dir mountctl created must be removed"


def test_mount_is_read_only_by_default(backend, bucket, s3, mount_root):
    s3.put_object(Bucket=bucket, Key="a.txt", Body=b"a")
    with Mount(MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend=backend)) as m:
        with pytest.raises(OSError):
            with open(os.path.join(m.path, "new.txt"), "wb") as f:
                f.write(b"x")
    assert "new.txt" not in [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def test_shared_mount_context_manager_reads_prefix_and_cleans_up(backend, bucket, s3, mount_root):
    s3.put_object(Bucket=bucket, Key="train/x/1.txt", Body=b"one")
    s3.put_object(Bucket=bucket, Key="other.txt", Body=b"no")
    with mountctl.mount(f"s3://{bucket}/train/", str(mount_root / "m"), backend=backend) as m:
        assert os.listdir(m.path) == ["x"]
        with open(os.path.join(m.path, "x", "1.txt"), "rb") as f:
            assert f.read() == b"one"
        assert m.backend == backend and m.pid is not None
        assert m.health().ok
    assert find_mount(str(mount_root / "m")) is None


def test_mount_path_with_spaces_is_found_in_mount_table(bucket, s3, mount_root):
    require_fuse()
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    with Mount(MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "with space\tand tab"), backend="rclone")) as m:
        entry = find_mount(m.path)
        assert entry is not None and entry.fs_type == "fuse.rclone"


def test_mount_start_takes_seconds_not_minutes(backend, bucket, mount_root):
    started = time.monotonic()
    with Mount(MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend=backend)):
        elapsed = time.monotonic() - started
    assert elapsed < 15


def test_a_stopped_mount_can_be_started_again(bucket, s3, mount_root):
    require_fuse()
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    m = Mount(MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend="rclone"), watchdog=True)
    for _ in range(2):
        with m:
            with open(os.path.join(m.path, "k"), "rb") as f:
                assert f.read() == b"v"
        assert find_mount(m.path) is None


def test_shared_auto_mount_reports_the_program_it_chose(bucket, s3, mount_root):
    require_fuse()
    with mountctl.mount(f"s3://{bucket}/", str(mount_root / "m"), backend="auto") as m:
        assert m.backend in ("mount-s3", "rclone", "s3fs")
        assert m.log_path and os.path.exists(m.log_path)
