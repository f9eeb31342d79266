"""The mountpoint kind's default cache and plan-driven read-ahead, per mount program (real S3, real FUSE)."""

from __future__ import annotations

import os

from mountctl.mounts.backends import BACKENDS
from mountctl.pytorch.data.dataset import ShardDataset
from mountctl.pytorch.data.manifest import load_manifest
from mountctl.pytorch.data.sources import open_source

from conftest import missing
from torch_support import make_tiny_dataset


def test_read_ahead_on_the_cached_mount_claims_every_shard_once(backend, s3_env, bucket, mount_root):
    uri = f"s3://{bucket}/data/"
    made = make_tiny_dataset(uri, num_images=40, shard_size="8KB")
    manifest = load_manifest(s3_env, uri)
    assert len(made.manifest.shards) >= 4
    with open_source("mountpoint", uri, s3_env, backend=backend, mount_dir=str(mount_root / "m"),
                     read_ahead=True) as source:
        described = source.describe()
        seen = [index for batch in ShardDataset(manifest, source, batch_size=8, shuffle=False)
                for index in batch["index"]]
        record = source.read_ahead_dir
        claimed = sorted(n for n in os.listdir(record) if not n.startswith(".slot-"))
    assert described["cache_size_mb"] and described["read_ahead"] is True
    assert sorted(seen) == list(range(40))
    assert claimed == sorted(shard.name for shard in manifest.shards)  # each shard claimed once on the node
    assert not os.path.exists(record)  # the record and the cache went with the mount


def test_mountpoint_source_caches_by_default_and_reads_ahead_only_with_mount_s3(s3_env, bucket, mount_root):
    """Mountpoint never reads across files, so the plan's read-ahead is on for it; for rclone and s3fs, whose
    warm took the loader's CPU on two cores, it stays off unless asked."""
    for name in ("mount-s3", "rclone"):
        if not BACKENDS[name].available():
            missing(f"{name} is not installed; `bash scripts/setup.sh` installs or builds it")
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=16, shard_size="8KB")
    for backend, expected in (("rclone", False), ("mount-s3", True)):
        with open_source("mountpoint", uri, s3_env, backend=backend, mount_dir=str(mount_root / "m")) as source:
            described = source.describe()
        assert described["cache_dir"] and described["cache_size_mb"] and described["read_ahead"] is expected, backend


def test_no_cache_mounts_without_cache_or_read_ahead(s3_env, bucket, mount_root):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=16, shard_size="8KB")
    with open_source("mountpoint", uri, s3_env, backend="rclone", mount_dir=str(mount_root / "m"),
                     cache=False, read_ahead=True) as source:
        described = source.describe()
    assert described["cache_dir"] is None and described["read_ahead"] is False
