"""The mountpoint kind's default cache and plan-driven read-ahead, per mount program (real S3, real FUSE)."""

from __future__ import annotations

import os

from mountctl.mounts.backends import BACKENDS
from mountctl.pytorch.data.datasets.dataset import ShardDataset
from mountctl.pytorch.data.index.manifest import load_manifest
from mountctl.pytorch.data.sources import MountpointOptions, open_source

from conftest import missing
from torch_support import make_tiny_dataset


def test_read_ahead_on_the_cached_mount_claims_every_shard_once(backend, s3_env, bucket, mount_root):
    uri = f"s3://{bucket}/data/"
    made = make_tiny_dataset(uri, num_images=40, shard_size="8KB")
    manifest = load_manifest(s3_env, uri)
    assert len(made.manifest.shards) >= 4
    options = MountpointOptions(backend=backend, mount_dir=str(mount_root / "m"), read_ahead=True)
    with open_source("mountpoint", uri, s3_env, mountpoint=options) as source:
        described = source.describe()
        seen = [index for batch in ShardDataset(manifest, source, batch_size=8, shuffle=False)
                for index in batch["index"]]
        record = source.read_ahead_dir
        claimed = sorted(n for n in os.listdir(record) if not n.startswith(".slot-"))
    assert described["cache_size_mb"] and described["read_ahead"] is True
    assert sorted(seen) == list(range(40))
    assert claimed == sorted(shard.name for shard in manifest.shards)  # each shard claimed once on the node
    assert not os.path.exists(record)  # the record and the cache went with the mount


def test_mountpoint_source_caches_by_default_and_reads_shards_ahead_only_when_asked(s3_env, bucket, mount_root):
    """The plan's read-ahead across shards is off by default with every program (with a shard's first GET
    covering 16 MiB it ties, for a second pass through FUSE, docs/training.md); --read-ahead turns it on."""
    for name in ("mount-s3", "rclone"):
        if not BACKENDS[name].available():
            missing(f"{name} is not installed; `bash scripts/setup.sh` installs or builds it")
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=16, shard_size="8KB")
    for backend, asked, expected in (("rclone", None, False), ("mount-s3", None, False), ("mount-s3", True, True)):
        with open_source("mountpoint", uri, s3_env, mountpoint=MountpointOptions(
                backend=backend, mount_dir=str(mount_root / "m"), read_ahead=asked)) as source:
            described = source.describe()
        assert described["cache_dir"] and described["cache_size_mb"] and described["read_ahead"] is expected, backend


def test_no_cache_mounts_without_cache_or_read_ahead(s3_env, bucket, mount_root):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=16, shard_size="8KB")
    with open_source("mountpoint", uri, s3_env, mountpoint=MountpointOptions(
            backend="rclone", mount_dir=str(mount_root / "m"), cache=False, read_ahead=True)) as source:
        described = source.describe()
    assert described["cache_dir"] is None and described["read_ahead"] is False


def _cached_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(root) for n in names)


def test_a_per_file_dataset_mounted_from_its_index_is_warmed_whole_and_nothing_else_is(s3_env, bucket, mount_root):
    """A per-file dataset has no shards for the plan to read ahead: mounted from its index, mount-s3 warms all of it
    into its cache (it fits) with no reader of ours. A plain mount is not warmed (its walk would list every folder,
    which the index spares the trainer), nor are shards: their caches stay empty until the loader reads."""
    import time

    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not installed; `bash scripts/setup.sh` builds it")
    uri = f"s3://{bucket}/data/"
    made = make_tiny_dataset(uri, num_images=16, shard_size="8KB")
    manifest = load_manifest(s3_env, uri)
    total = sum(shard.bytes for shard in made.manifest.shards)
    for per_file, from_index in ((True, True), (True, False), (False, True)):
        with open_source("mountpoint", uri, s3_env, mountpoint=MountpointOptions(
                backend="mount-s3", mount_dir=str(mount_root / "m"), from_index=from_index),
                per_file=per_file, manifest=manifest) as source:
            assert source.cache_dir
            warmed = per_file and from_index
            deadline = time.monotonic() + (60 if warmed else 3)
            while _cached_bytes(source.cache_dir) < total and time.monotonic() < deadline:
                time.sleep(0.2)
            cached = _cached_bytes(source.cache_dir)
        assert (cached >= total) if warmed else (cached == 0), (per_file, from_index, cached, total)
