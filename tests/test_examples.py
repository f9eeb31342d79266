"""Every script in examples/ runs as a user would run it, against the local S3, and does what it says."""

from __future__ import annotations

import json

import pytest

from mountctl import paths
from mountctl.pytorch.data.synthetic import sample_jpeg

from conftest import fuse_mounts_under, mount_programs, require_fuse
from torch_support import make_tiny_dataset, run_example

CLASSES = ("cat", "dog", "emu")


@pytest.fixture
def image_folder(s3, bucket):
    """An ImageFolder-style prefix: one folder per class, 8 JPEGs in each."""
    for i in range(24):
        image, _ = sample_jpeg(7, i, 40, 3)
        s3.put_object(Bucket=bucket, Key=f"images/{CLASSES[i % 3]}/{i:04d}.jpg", Body=image)
    return f"s3://{bucket}/images/"


@pytest.fixture
def nothing_left_behind(mount_root):
    """The examples mount under the default managed directory; check that nothing stays there."""
    require_fuse()
    before = {p.pid for p in mount_programs()}
    yield
    assert not fuse_mounts_under(paths.managed_mounts_dir())
    assert not [p for p in mount_programs() if p.pid not in before]


def output(done) -> dict:
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_mount_dataloader_reads_every_file_through_a_plain_dataloader(s3_env, image_folder, nothing_left_behind):
    result = output(run_example("mount_dataloader.py", image_folder))
    assert result["images"] == 24 and result["classes"] == list(CLASSES)


def test_webdataset_from_mount_reads_every_sample_of_every_shard(s3_env, bucket, nothing_left_behind):
    made = make_tiny_dataset(f"s3://{bucket}/shards/", num_images=30, shard_size="16KB", num_classes=5)
    result = output(run_example("webdataset_from_mount.py", f"s3://{bucket}/shards/"))
    assert result["shards"] == len(made.manifest.shards) and result["images"] == 30
    assert 1 < result["distinct_labels"] <= 5


def test_ddp_ranks_share_one_mount(s3_env, image_folder, nothing_left_behind):
    result = output(run_example("ddp_shared_mount.py", image_folder))
    ranks = result["ranks"]
    assert result["world_size"] == 2 and len(ranks) == 2
    assert len({r["mount_pid"] for r in ranks}) == 1 and ranks[0]["mount_pid"] is not None
    assert sum(r["images"] for r in ranks) == result["dataset_images"] == 24


def test_checkpoint_s3_saves_and_loads_back_the_same_tensors(s3_env, s3, bucket):
    result = output(run_example("checkpoint_s3.py", f"s3://{bucket}/checkpoints/"))
    assert result["identical"] is True and result["tensors"] > 0
    head = s3.head_object(Bucket=bucket, Key="checkpoints/resnet18.pt")
    assert head["ContentLength"] > 1_000_000


def test_imagefolder_over_mount_reads_every_image_with_and_without_read_ahead(s3_env, image_folder,
                                                                               nothing_left_behind):
    result = output(run_example("imagefolder_over_mount.py", image_folder))
    assert result["images"] == 24 and result["classes"] == list(CLASSES)
    assert set(result["images_per_s"]) == {"readahead_0", "readahead_16"}


def test_dcp_s3_saves_on_two_ranks_and_resumes_training_exactly(s3_env, s3, bucket):
    result = output(run_example("dcp_s3.py", f"s3://{bucket}/dcp/"))
    assert result["world_size"] == 2 and result["identical"] is True
    assert result["resumed_equals_uninterrupted"] is True and all(r["step"] == 3 for r in result["ranks"])
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="dcp/")["Contents"]}
    assert {"dcp/.metadata", "dcp/__0_0.distcp", "dcp/__1_0.distcp"} <= keys


def test_torchdata_nodes_over_mount_reads_every_sample_once(s3_env, bucket, tmp_path, nothing_left_behind):
    make_tiny_dataset(f"s3://{bucket}/shards/", num_images=30, shard_size="16KB", num_classes=5)
    result = output(run_example("torchdata_nodes_over_mount.py", f"s3://{bucket}/shards/", "--state",
                                str(tmp_path / "state.json")))
    assert result["images"] == result["dataset_images"] == 30 and result["resumed_at"] == 0
    assert sorted(result["seen"]) == list(range(30)) and result["mount_pid"] is not None
    again = output(run_example("torchdata_nodes_over_mount.py", f"s3://{bucket}/shards/", "--state",
                               str(tmp_path / "state.json")))
    assert again["images"] == 0 and again["resumed_at"] == 30  # a finished epoch is not trained again
