"""``ReadAheadSampler`` end to end: torchvision ImageFolder over a real mount-s3 mount of a class tree in the local S3.

The tree is what the bench's standard-loader cell reads (``standard_cells.write_tree``), small: 4 class folders
of 12 JPEGs of 32 px.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from torch.utils.data import DataLoader, RandomSampler

from benchmarks.harness.standard_cells import write_tree
from mountctl import open_resilient, parse_s3_uri, resolve
from mountctl.mounts.backends import BACKENDS
from mountctl.pytorch import ReadAheadSampler
from mountctl.pytorch.data.sources import MountpointOptions, open_source
from mountctl.s3 import list_objects
from mountctl.shared import Registry

from conftest import missing, require_fuse

CLASSES, PER_CLASS = 4, 12


def _read_plain(path: str) -> tuple[str, int]:
    """ImageFolder's loader as users write it (a plain open): the file's class/name and its size."""
    with open(path, "rb") as f:
        return os.path.join(*path.split(os.sep)[-2:]), len(f.read())


def _read_resilient(path: str) -> tuple[str, int]:
    """The same through mountctl's resilient read, which rides out a remount (``open_resilient``)."""
    with open_resilient(path) as f:
        return os.path.join(*path.split(os.sep)[-2:]), len(f.read())


def _as_list(items):
    return [sample for sample, _label in items]


@pytest.fixture
def tree(s3_env, s3, bucket):
    """s3://bucket/tree/train/<class>/<n>.JPEG, and each image's size by class/name as S3 lists it."""
    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not installed")
    uri = f"s3://{bucket}/tree/"
    write_tree(resolve(), uri, None, classes=CLASSES, per_class=PER_CLASS, px=32)
    location = parse_s3_uri(uri)
    listed = list_objects(s3, location.bucket, location.prefix + "train/")
    return uri, {key: item.size for key, item in listed.items()}


def _loader(folder, sampler, prefetch_factor: int = 2) -> DataLoader:
    return DataLoader(folder, batch_size=8, sampler=sampler, num_workers=2, collate_fn=_as_list, timeout=120,
                      prefetch_factor=prefetch_factor)


def test_imagefolder_with_the_sampler_reads_every_sample_once_per_epoch_through_mount_s3(tree, mount_root):
    from torchvision.datasets import ImageFolder

    uri, sizes = tree
    with open_source("mountpoint", uri, resolve(),
                     mountpoint=MountpointOptions(backend="mount-s3", mount_dir=str(mount_root / "m"))) as source:
        folder = ImageFolder(os.path.join(source.root, "train"), loader=_read_plain)
        sampler = ReadAheadSampler(folder, RandomSampler(folder))
        loader = _loader(folder, sampler)
        reports = []
        for _ in range(2):
            seen = [sample for batch in loader for sample in batch]
            assert sorted(name for name, _ in seen) == sorted(sizes)  # every sample once, none twice
            assert all(size == sizes[name] for name, size in seen)
            assert sampler.last is not None and sampler.last.failed == 0 and sampler.last.hung == 0
            reports.append(sampler.last)
    first, second = reports
    print(f"\n[sampler through mount-s3] epoch 1: {first.summary()}; epoch 2: {second.summary()}")
    assert first.files > 0  # the read-ahead read through the mount
    # Epoch 2: mount-s3 kept the pages, so the samples were in memory and not read again (the VM may reclaim a
    # few pages by itself, and those are read).
    assert second.cached > second.files, second


def test_the_read_ahead_survives_kill_9_of_mount_s3_with_every_sample_exactly_once(tree, mount_root):
    """kill -9 of mount-s3 after the first batch: until the watchdog remounts, every read through the mount fails
    (ENOTCONN). The read-ahead's reads then fail and are dropped, never the epoch; the workers' reads go through
    mountctl's resilient path (``open_resilient``), which waits for the new mount and reads again."""
    from torchvision.datasets import ImageFolder

    uri, sizes = tree
    directory = str(mount_root / "m")
    seen = []
    options = MountpointOptions(backend="mount-s3", mount_dir=directory)
    with open_source("mountpoint", uri, resolve(), mountpoint=options) as source:
        folder = ImageFolder(os.path.join(source.root, "train"), loader=_read_resilient)
        # Little dispatched or read ahead at the kill, so that most of the epoch's reads meet the remount.
        sampler = ReadAheadSampler(folder, RandomSampler(folder), ahead=4, threads=2)
        for number, batch in enumerate(_loader(folder, sampler, prefetch_factor=1)):
            seen.extend(batch)
            time.sleep(0.2)  # a training step: neither the workers nor the read-ahead read everything before the kill
            if number == 0:
                os.kill(source.mount_pid, signal.SIGKILL)
        assert Registry().read(directory).restarts >= 1, "the watchdog should have remounted the killed mount-s3"
        print(f"\n[kill -9 of mount-s3 mid-epoch] {len(seen)} samples delivered; {sampler.last.summary()}")
    assert sorted(name for name, _ in seen) == sorted(sizes)
    assert all(size == sizes[name] for name, size in seen)


def test_the_bench_standard_cell_reads_each_route_both_epochs_with_and_without_the_sampler(s3_env, bucket,
                                                                                            mount_root):
    """The bench's cell itself (``standard_cells``) on a small tree: local disk and a default mount-s3 mount."""
    from tqdm import tqdm

    from benchmarks.harness import preset
    from benchmarks.harness.standard_cells import SAMPLERS, add_standard_ratios, standard_cells
    from benchmarks.harness.sweep_run import SweepRun

    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not installed")
    config = preset("quick", uri=f"s3://{bucket}/bench/", backends=("mount-s3",), standard_images=40)
    with tqdm(disable=True) as bar:
        run = SweepRun(config, resolve(), bar)
        standard_cells(run, str(mount_root))  # its mounts and its local copy: nothing may stay behind
    add_standard_ratios(run.cells)
    assert [c["status"] for c in run.cells] == ["ok"] * 8, [c["status"] for c in run.cells]
    assert {(c["source"], c["sampler"], c["epoch"]) for c in run.cells} == {
        (source, sampler, epoch) for source in ("local-disk", "mountpoint/mount-s3") for sampler in SAMPLERS
        for epoch in (1, 2)}
    assert all(c["samples"] == 40 and c["epoch_samples_per_s"] > 0 and c["ratio_to_local_disk"] for c in run.cells)
    assert all(c["from_mount_s"] >= c["epoch_s"] for c in run.cells if c["epoch"] == 1)
    assert all(c.get("program_peak_rss_mb") for c in run.cells if c["source"] != "local-disk")
