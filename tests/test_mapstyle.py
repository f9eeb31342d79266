"""Map-style datasets end to end: the files layout and random access into indexed shards, every source kind.

Real SeaweedFS, real FUSE mounts (``backend="auto"``), tiny data: 40 images of 32 px.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from mountctl import ObjectChanged, resolve
from mountctl.pytorch.data.datasets.mapstyle import MapSampleDataset, collate, image_folder
from mountctl.pytorch.data.datasets.shards import read_shard
from mountctl.pytorch.data.index.manifest import MANIFEST_NAME, load_manifest
from mountctl.pytorch.data.sources import MountpointOptions, open_source
from mountctl.pytorch.errors import DatasetError

from conftest import require_fuse
from torch_support import make_tiny_dataset, run_cli

KINDS = ("mountpoint", "s3io", "fsspec")
IMAGES = 40


@pytest.fixture
def files_uri(s3_env, bucket):
    uri = f"s3://{bucket}/files/"
    make_tiny_dataset(uri, num_images=IMAGES, num_classes=4, layout="files")
    return uri


@pytest.fixture
def shards_uri(s3_env, bucket):
    uri = f"s3://{bucket}/shards/"
    make_tiny_dataset(uri, num_images=IMAGES, num_classes=4, shard_size="16KB")
    return uri


def _opened(kind, uri):
    if kind == "mountpoint":
        require_fuse()
    return open_source(kind, uri, resolve())


def _all_samples(kind, uri):
    manifest = load_manifest(resolve(), uri)
    with _opened(kind, uri) as source:
        dataset = MapSampleDataset.from_manifest(manifest, source, uri)
        return dataset.__getitems__(list(range(len(dataset))))


def test_files_layout_is_imagefolder_shaped_and_listed_in_the_manifest(s3, bucket, files_uri):
    manifest = load_manifest(resolve(), files_uri)
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="files/train/")["Contents"]}
    assert manifest.layout == "files" and len(manifest.files) == IMAGES
    assert keys == {"files/" + f.key for f in manifest.files}
    assert all(f.key == f"train/c{f.label:04d}/{i:08d}.jpg" for i, f in enumerate(manifest.files))


def test_every_kind_yields_identical_samples_from_the_files_layout(files_uri, mount_root):
    per_kind = {kind: _all_samples(kind, files_uri) for kind in KINDS}
    reference = per_kind["mountpoint"]
    assert [s[2] for s in reference] == list(range(IMAGES))
    for kind in ("s3io", "fsspec"):
        assert all(torch.equal(a[0], b[0]) and a[1:] == b[1:] for a, b in zip(reference, per_kind[kind], strict=True))


def test_random_access_into_shards_matches_the_sequential_read(shards_uri, mount_root):
    manifest = load_manifest(resolve(), shards_uri)
    assert len(manifest.shards) > 1 and manifest.indexed
    with _opened("fsspec", shards_uri) as source:
        sequential = [s for shard, (name, stream) in zip(manifest.shards, source.open_shards(
            [s.name for s in manifest.shards]), strict=True) for s in read_shard(
            name, stream, first_index=shard.first_index, start=0, stop=shard.samples, expected=shard.samples)]
    for kind in KINDS:
        samples = _all_samples(kind, shards_uri)
        assert [(s[1], s[2]) for s in samples] == [(r.label, r.index) for r in sequential], kind


@pytest.mark.parametrize("kind", KINDS)
def test_distributed_sampler_over_two_ranks_reads_every_sample_once(kind, files_uri, mount_root):
    manifest = load_manifest(resolve(), files_uri)
    seen = []
    with _opened(kind, files_uri) as source:
        dataset = MapSampleDataset.from_manifest(manifest, source, files_uri, readahead_threads=4)
        for rank in range(2):
            sampler = DistributedSampler(dataset, num_replicas=2, rank=rank, shuffle=True, seed=5)
            loader = DataLoader(dataset, batch_size=8, sampler=sampler, num_workers=2, collate_fn=collate,
                                timeout=120)
            seen += [i for batch in loader for i in batch["index"]]
    assert sorted(seen) == list(range(IMAGES))


def test_plain_torchvision_imagefolder_reads_the_files_layout_through_the_mount(files_uri, mount_root):
    from torchvision.datasets import ImageFolder

    manifest = load_manifest(resolve(), files_uri)
    with _opened("mountpoint", files_uri) as source:
        plain = ImageFolder(f"{source.root}/train")
        ours = image_folder(f"{source.root}/train", image_size=32)
        images = [plain[i][0] for i in range(len(plain))]
    assert len(plain) == IMAGES and plain.classes == ours.classes and plain.targets == ours.targets
    assert all(image.size == (32, 32) for image in images)
    labels = {f.key.split("/")[-1]: f.label for f in manifest.files}
    assert all(int(plain.classes[t][1:]) == labels[p.rsplit("/", 1)[1]] for p, t in plain.samples)


def test_index_command_rebuilds_the_index_of_an_old_manifest(s3, bucket, shards_uri):
    key = "shards/" + MANIFEST_NAME
    original = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    old = json.loads(json.dumps(original))
    for shard in old["shards"]:
        del shard["members"]
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(old).encode())
    with _opened("fsspec", shards_uri) as source, pytest.raises(DatasetError, match=r"resnet\.py index s3://"):
        MapSampleDataset.from_manifest(load_manifest(resolve(), shards_uri), source, shards_uri)
    done = run_cli(["index", shards_uri])
    assert done.returncode == 0, done.stderr[-2000:]
    rebuilt = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    assert rebuilt["shards"] == original["shards"]


def test_empty_class_folder_is_named(s3, bucket, files_uri, mount_root):
    s3.put_object(Bucket=bucket, Key="files/train/c0099/README.txt", Body=b"no images here")
    with _opened("mountpoint", files_uri) as source, pytest.raises(DatasetError, match=r"class folder .*c0099 "
                                                                                       "holds no images"):
        image_folder(f"{source.root}/train", image_size=32)


@pytest.mark.parametrize("kind", KINDS)
def test_an_object_that_is_not_a_jpeg_is_named(kind, s3, bucket, files_uri, mount_root):
    manifest = load_manifest(resolve(), files_uri)
    bad = manifest.files[7].key
    s3.put_object(Bucket=bucket, Key="files/" + bad, Body=b"<html>not an image</html>")
    # s3io and fsspec read at the index's ETag (If-Match, or a HEAD after the read): the replacement is named
    # first. The mount reads a whole object with no version check at its first open, and finds it is no JPEG.
    if kind == "mountpoint":
        expected = (DatasetError, f"object {files_uri}{bad} is not a JPEG")
    else:
        expected = (ObjectChanged, rf"{files_uri}{bad} was replaced: .*resnet\.py index")
    with _opened(kind, files_uri) as source:
        dataset = MapSampleDataset.from_manifest(manifest, source, files_uri)
        with pytest.raises(expected[0], match=expected[1]):
            dataset[7]


@pytest.mark.parametrize("kind", KINDS)
def test_a_listed_object_that_is_missing_is_named(kind, s3, bucket, files_uri, mount_root):
    manifest = load_manifest(resolve(), files_uri)
    gone = manifest.files[3].key
    s3.delete_object(Bucket=bucket, Key="files/" + gone)
    with _opened(kind, files_uri) as source:
        dataset = MapSampleDataset.from_manifest(manifest, source, files_uri)
        with pytest.raises(DatasetError, match=f"object {files_uri}{gone} named by the dataset.s index is missing"):
            dataset.__getitems__([2, 3, 4])


@pytest.mark.parametrize("kind", KINDS)
def test_an_index_that_does_not_match_its_shard_is_named(kind, s3, bucket, shards_uri, mount_root):
    manifest = load_manifest(resolve(), shards_uri)
    shard = manifest.shards[0]
    data = bytearray(s3.get_object(Bucket=bucket, Key="shards/" + shard.name)["Body"].read())
    jpg_at, jpg_size = shard.members[1][:2]
    data[jpg_at + jpg_size // 2] ^= 0xFF  # same size, other bytes
    s3.put_object(Bucket=bucket, Key="shards/" + shard.name, Body=bytes(data))
    # Every kind reads at the index's ETag (the mount checks it at open): the replacement is named first.
    expected = (ObjectChanged, rf"{shards_uri}{shard.name} was replaced: .*resnet\.py index")
    with _opened(kind, shards_uri) as source:
        dataset = MapSampleDataset.from_manifest(manifest, source, shards_uri)
        with pytest.raises(expected[0], match=expected[1]):
            dataset[1]


def test_an_index_past_the_end_of_a_cut_shard_is_named(s3, bucket, shards_uri, mount_root):
    manifest = load_manifest(resolve(), shards_uri)
    shard = manifest.shards[0]
    data = s3.get_object(Bucket=bucket, Key="shards/" + shard.name)["Body"].read()
    s3.put_object(Bucket=bucket, Key="shards/" + shard.name, Body=data[:shard.members[-1][0] + 10])
    with _opened("mountpoint", shards_uri) as source:
        dataset = MapSampleDataset.from_manifest(manifest, source, shards_uri)
        last = shard.samples - 1
        # The cut shard is a new version: the ETag the index records names it before a byte is read.
        with pytest.raises(ObjectChanged, match=f"{shards_uri}{shard.name} was replaced"):
            dataset[last]


def test_train_reads_the_files_layout_map_style_exactly_once_per_epoch(files_uri):
    import io

    from mountctl.pytorch.training.trainer import TrainConfig, train

    summary = train(TrainConfig(uri=files_uri, source_kind="s3io", batch_size=8, max_epochs=2, num_workers=2,
                                arch="resnet18", progress=False, warmup_batches=1, accelerator="cpu",
                                precision="32-true"), out=io.StringIO())
    for number, epoch in enumerate(summary["epochs"]):
        assert epoch["images"] == epoch["distinct_images"] == IMAGES and epoch["repeated_images"] == 0
        assert epoch["data_epochs"] == [number]


def test_make_files_layout_and_bench_one_kind_on_it_from_the_command_line(s3_env, bucket, mount_root):
    require_fuse()
    uri = f"s3://{bucket}/cli-files/"
    made = run_cli(["make", uri, "--num-images", "12", "--image-size", "32", "--num-classes", "3", "--jobs", "1",
                    "--layout", "files", "--no-progress"])
    assert made.returncode == 0, made.stderr[-2000:]
    assert json.loads(made.stdout.strip().splitlines()[-1])["files"] == 12
    benched = run_cli(["bench", uri, "--source-kind", "mountpoint", "--num-workers", "1", "--batch-size", "4",
                       "--warmup-batches", "1"])
    assert benched.returncode == 0, benched.stderr[-2000:]
    assert json.loads(benched.stdout.strip().splitlines()[-1])["epochs"][0]["images"] == 12


def test_two_ddp_ranks_train_every_file_once_through_one_mount(files_uri, mount_root):
    from torch_support import last_json_line

    require_fuse()
    done = run_cli(["train", files_uri, "--source-kind", "mountpoint", "--devices", "2", "--strategy", "ddp",
                    "--accelerator", "cpu", "--arch", "resnet18", "--num-workers", "1", "--batch-size", "8", "--precision", "32",
                    "--no-progress"])
    assert done.returncode == 0, done.stderr[-3000:]
    summary = last_json_line(done.stdout)
    epoch = summary["epochs"][0]
    assert summary["world_size"] == 2 and len({rank["mount_pid"] for rank in summary["ranks"]}) == 1
    assert epoch["images"] == epoch["distinct_images"] == IMAGES and epoch["repeated_images"] == 0


def _indexed(s3, bucket, layout: str, tmp_path) -> str:
    """An ImageNet-style class tree (36 images) or webdataset shards (4 x 9), indexed with `resnet.py index`."""
    from own_data_support import write_class_tree, write_shards

    from resnet import main

    if layout == "class-tree":
        write_class_tree(s3, bucket, "own/", per_class=12)
    else:
        write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=4, per_shard=9, classes=3)
    assert main(["index", f"s3://{bucket}/own/", "--no-progress", "--jobs", "2"]) == 0
    return f"s3://{bucket}/own/"


@pytest.mark.parametrize("layout", ["class-tree", "shards"])
def test_map_style_reads_survive_the_mount_program_killed_mid_epoch_with_every_sample_once(
        layout, backend, s3_env, s3, bucket, mount_root, tmp_path):
    """kill -9 of the mount program after the first batch: reads fail (ENOTCONN, ECONNABORTED) until the
    watchdog remounts, then go on through the new mount; every sample arrives exactly once."""
    import os
    import signal
    import time

    from mountctl.pytorch.data.index.manifest import load_dataset_description
    from mountctl.shared import Registry

    uri = _indexed(s3, bucket, layout, tmp_path)
    manifest = load_dataset_description(resolve(), uri).manifest
    directory = str(mount_root / "m")
    seen: list[int] = []
    options = MountpointOptions(backend=backend, mount_dir=directory)
    with open_source("mountpoint", uri, resolve(), mountpoint=options) as source:
        dataset = MapSampleDataset.from_manifest(manifest, source, uri, readahead_threads=2)
        loader = DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=collate, timeout=120)
        for number, batch in enumerate(loader):
            seen.extend(batch["index"])
            time.sleep(0.2)  # a training step: the workers cannot read everything ahead of the kill
            if number == 0:
                os.kill(source.mount_pid, signal.SIGKILL)
        assert Registry().read(directory).restarts >= 1, "the watchdog should have remounted the killed program"
        dataset.reader.close()
    assert sorted(seen) == list(range(manifest.num_images)) == list(range(36))

