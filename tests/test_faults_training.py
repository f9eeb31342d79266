"""A training data path through a mount whose daemon is killed mid-epoch still delivers every sample once."""

from __future__ import annotations

import os
import signal
import time

import pytest

from mountctl import resolve
from mountctl.mounts.backends import BACKENDS
from mountctl.pytorch.data.datasets.dataset import EpochLoader, ShardDataset
from mountctl.pytorch.data.index.manifest import load_manifest
from mountctl.pytorch.data.sources import MountpointOptions, open_source
from mountctl.shared import Registry

from conftest import missing, require_fuse
from torch_support import make_tiny_dataset, read_epoch_through_a_fault

IMAGES = 96


# None is the default: each reader's next shards read into memory on threads (next_shards.py); False: none;
# True: the plan's read-ahead into the cache as well.
@pytest.mark.parametrize("program,read_ahead", [("rclone", False), ("rclone", True), ("mount-s3", False),
                                                ("mount-s3", None), ("mount-s3", True)],
                         ids=["rclone-plain", "rclone-read-ahead", "mount-s3-plain", "mount-s3-default",
                              "mount-s3-read-ahead"])
def test_epoch_survives_daemon_kill_with_every_sample_exactly_once(program, read_ahead, s3_env, bucket, mount_root):
    require_fuse()
    if not BACKENDS[program].available():
        missing(f"{program} is not installed")
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=IMAGES, image_size=32, shard_size="8KB")
    settings = resolve()
    manifest = load_manifest(settings, uri)
    directory = str(mount_root / "m")
    options = MountpointOptions(backend=program, mount_dir=directory, read_ahead=read_ahead)
    with open_source("mountpoint", uri, settings, mountpoint=options) as source:
        dataset = ShardDataset(manifest, source, batch_size=4, seed=0)
        loader = EpochLoader(dataset, epoch_fn=lambda: 0, num_workers=2, timeout=120)
        started = time.monotonic()
        seen, killed = read_epoch_through_a_fault(loader, lambda: os.kill(source.mount_pid, signal.SIGKILL),
                                                  step_s=0.2)
        record = Registry().read(directory)
        print(f"\n[kill -9 mid-epoch, {program}] samples expected {IMAGES} delivered {len(seen)} distinct {len(set(seen))}; "
              f"epoch took {time.monotonic() - started:.2f}s ({time.monotonic() - killed:.2f}s after the kill); "
              f"remounts {record.restarts}")
        assert record.restarts >= 1, "the watchdog should have remounted the killed daemon"
    assert len(seen) == IMAGES
    assert sorted(seen) == sorted(range(manifest.shards[0].first_index, manifest.shards[0].first_index + IMAGES))
