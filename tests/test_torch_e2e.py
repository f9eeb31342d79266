"""`resnet.py make` and `train` end to end on the real local S3, through real mounts.

Tiny on purpose (32 px images, tens of samples, a handful of steps) so the
whole file runs in a couple of minutes on two CPU cores.  Training runs
in-process through the CLI's ``main`` unless a test needs separate processes
(DDP), and asserts on the JSON summary the CLI prints.
"""

from __future__ import annotations

import hashlib
import io
import json
import socket
import tarfile
import time

import pytest

from benchmarks.harness.loader import BenchConfig, bench_loader
from mountctl.errors import InvalidSpec
from mountctl.pytorch.data.datasets.dataset import ShardDataset
from mountctl.pytorch.data.datasets.shards import decode, read_shard
from mountctl.pytorch.data.index.manifest import MANIFEST_NAME, load_manifest
from mountctl.pytorch.data.sources import SOURCE_KINDS, MountpointOptions, open_source
from mountctl.pytorch.data.synthetic import sample_jpeg
from mountctl.pytorch.errors import TruncatedShard
from mountctl.pytorch.training.trainer import TrainConfig
from resnet import main

from conftest import fuse_mounts_under, mount_programs, require_fuse
from torch_support import last_json_line, make_tiny_dataset, run_cli

KINDS = list(SOURCE_KINDS)


def train(capsys, uri: str, *args: str) -> dict:
    """Run `resnet.py train URI ARGS` in this process and return its JSON summary (ResNet-18: its checkpoint is
    half of ResNet-50's 200 MB, and nothing here depends on the model)."""
    status = main(["train", uri, "--batch-size", "8", "--no-progress", "--precision", "32", "--arch", "resnet18",
                   *args])
    out, err = capsys.readouterr()
    assert status == 0, err[-3000:]
    return last_json_line(out)


def train_fails(capsys, uri: str, *args: str) -> str:
    status = main(["train", uri, "--batch-size", "8", "--no-progress", "--precision", "32", *args])
    _, err = capsys.readouterr()
    assert status == 1, err[-3000:]
    return err


def assert_exactly_once(summary: dict) -> None:
    for epoch in summary["epochs"]:
        assert epoch["images"] == epoch["distinct_images"] == summary["dataset_images"], epoch
        assert epoch["repeated_images"] == 0, epoch
        assert epoch["data_epochs"] == [epoch["epoch"]], "batches must come from their own epoch's plan"


# -- make ------------------------------------------------------------------------------------------


def test_make_writes_shards_near_the_target_size_and_a_manifest_with_checksums(s3_env, s3, bucket):
    uri = f"s3://{bucket}/data/"
    result = make_tiny_dataset(uri, num_images=40, shard_size="16KB")
    manifest = load_manifest(s3_env, uri)
    assert manifest == result.manifest
    assert manifest.num_images == 40 and len(manifest.shards) > 2
    for shard in manifest.shards:
        body = s3.get_object(Bucket=bucket, Key=f"data/{shard.name}")["Body"].read()
        assert len(body) == shard.bytes and hashlib.sha256(body).hexdigest() == shard.sha256
    assert all(s.bytes <= 16_000 + tarfile.RECORDSIZE for s in manifest.shards)
    assert sum(s.bytes for s in manifest.shards[:-1]) / (len(manifest.shards) - 1) > 16_000 * 0.6


def test_make_again_with_the_same_arguments_uploads_nothing(s3_env, s3, bucket):
    uri = f"s3://{bucket}/data/"
    first = make_tiny_dataset(uri, num_images=30, shard_size="16KB")
    stamps = {o["Key"]: o["LastModified"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    again = make_tiny_dataset(uri, num_images=30, shard_size="16KB")
    assert (again.uploaded, again.skipped) == (0, len(first.manifest.shards))
    assert again.manifest == first.manifest
    after = {o["Key"]: o["LastModified"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert {k: v for k, v in after.items() if k.endswith(".tar")} == \
        {k: v for k, v in stamps.items() if k.endswith(".tar")}


def test_make_creates_a_missing_bucket_on_a_custom_endpoint(s3_env, s3):
    name = f"t-made-{int(time.time() * 1000) % 10**9}"
    try:
        make_tiny_dataset(f"s3://{name}/d/", num_images=4)
        assert s3.head_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    finally:
        for obj in s3.list_objects_v2(Bucket=name).get("Contents", []):
            s3.delete_object(Bucket=name, Key=obj["Key"])
        s3.delete_bucket(Bucket=name)


# -- train -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_train_with_two_workers_sees_every_sample_once(kind, s3_env, bucket, mount_root, capsys):
    """One shard for two workers: the split falls inside the shard, at sample level."""
    if kind == "mountpoint":
        require_fuse()
    uri = f"s3://{bucket}/data/"
    made = make_tiny_dataset(uri, num_images=36)
    assert len(made.manifest.shards) == 1
    summary = train(capsys, uri, "--source-kind", kind, "--num-workers", "2", "--backend", "rclone",
                    "--mount-dir", str(mount_root / "m"))
    assert summary["source_kind"] == kind and summary["world_size"] == 1
    assert_exactly_once(summary)
    assert summary["global_step"] == summary["epochs"][0]["batches"] == 5  # 36 samples in batches of <= 8
    assert summary["images_per_s"] > 0 and summary["epochs"][0]["images_per_s"] > 0
    if kind == "mountpoint":
        assert summary["source"]["path"] == str(mount_root / "m")
        assert summary["source"]["backend"] == "rclone"


def test_three_source_kinds_yield_identical_samples(s3_env, bucket, mount_root):
    require_fuse()
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=20, shard_size="12KB", num_classes=7, seed=5)
    manifest = load_manifest(s3_env, uri)
    seen = {}
    for kind in KINDS:
        with open_source(kind, uri, s3_env,
                         mountpoint=MountpointOptions(backend="rclone", mount_dir=str(mount_root / "m"))) as source:
            dataset = ShardDataset(manifest, source, batch_size=4, shuffle=False)
            seen[kind] = {index: (hashlib.sha256(image.numpy().tobytes()).hexdigest(), int(label))
                          for batch in dataset
                          for index, image, label in zip(batch["index"], batch["images"], batch["labels"],
                                                         strict=True)}
    assert seen["mountpoint"] == seen["s3io"] == seen["fsspec"]
    assert sorted(seen["s3io"]) == list(range(20))
    for index, (_, label) in seen["s3io"].items():
        assert label == sample_jpeg(5, index, 32, 7)[1]


def test_two_ddp_ranks_share_one_mount_and_see_every_sample_once(s3_env, bucket, mount_root):
    require_fuse()
    uri = f"s3://{bucket}/data/"
    made = make_tiny_dataset(uri, num_images=42, shard_size="20KB")
    assert len(made.manifest.shards) > 2
    done = run_cli(["train", uri, "--source-kind", "mountpoint", "--backend", "rclone", "--mount-dir",
                    str(mount_root / "m"), "--devices", "2", "--strategy", "ddp", "--accelerator", "cpu", "--arch", "resnet18",
                    "--num-workers", "1", "--batch-size", "8", "--precision", "32", "--no-progress"])
    assert done.returncode == 0, done.stderr[-3000:]
    summary = last_json_line(done.stdout)
    assert summary["world_size"] == 2
    assert_exactly_once(summary)
    pids = {rank["pid"] for rank in summary["ranks"]}
    mount_pids = {rank["mount_pid"] for rank in summary["ranks"]}
    assert len(pids) == 2 and len(mount_pids) == 1 and None not in mount_pids


CHECKPOINT_ROUTES = {"s3": "s3://{bucket}/ckpt/run/", "fsspec": "fsspec+s3://{bucket}/ckpt/run/",
                     "mount": "mount+rclone://{bucket}/ckpt/run/", "path": "{tmp_path}/ckpt"}


@pytest.mark.parametrize("where", list(CHECKPOINT_ROUTES))
def test_checkpoint_then_resume_continues_with_the_next_epoch(where, s3_env, s3, bucket, tmp_path, capsys):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=24)
    if where == "mount":
        require_fuse()
    location = CHECKPOINT_ROUTES[where].format(bucket=bucket, tmp_path=tmp_path)
    first = train(capsys, uri, "--source-kind", "s3io", "--num-workers", "1", "--checkpoint-dir", location)
    steps = first["global_step"]
    assert first["checkpoint"] and first["checkpoint"].endswith("last.ckpt")
    if where != "path":
        assert s3.head_object(Bucket=bucket, Key="ckpt/run/last.ckpt")["ContentLength"] > 1_000_000
    else:
        assert (tmp_path / "ckpt" / "last.ckpt").stat().st_size > 1_000_000
    resumed = train(capsys, uri, "--source-kind", "s3io", "--num-workers", "1", "--checkpoint-dir", location,
                    "--resume", "--max-epochs", "2")
    assert resumed["resumed_from"] == first["checkpoint"]
    assert [e["epoch"] for e in resumed["epochs"]] == [1]
    assert resumed["global_step"] == 2 * steps
    assert_exactly_once(resumed)


def test_stop_at_max_steps_saves_and_resume_finishes_that_epoch_then_the_next(s3_env, bucket, tmp_path, capsys):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=24)  # 3 steps per epoch
    location = str(tmp_path / "ckpt")
    stopped = train(capsys, uri, "--source-kind", "fsspec", "--num-workers", "0", "--checkpoint-dir", location,
                    "--max-steps", "2")
    assert stopped["global_step"] == 2 and stopped["checkpoint"]
    assert stopped["epochs"][0]["images"] == 16  # two batches of the epoch, no more
    resumed = train(capsys, uri, "--source-kind", "fsspec", "--num-workers", "0", "--checkpoint-dir", location,
                    "--resume", "--max-epochs", "2")
    # The rest of epoch 0 (its third batch), then all of epoch 1.
    assert resumed["resumed_from_step"] == 2 and resumed["global_step"] == 2 + 1 + 3
    assert [(e["epoch"], e["images"]) for e in resumed["epochs"]] == [(0, 8), (1, 24)]
    assert_exactly_once({**resumed, "epochs": resumed["epochs"][1:]})


def test_resume_without_a_checkpoint_says_so(s3_env, bucket, tmp_path, capsys):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=8)
    err = train_fails(capsys, uri, "--source-kind", "s3io", "--checkpoint-dir", str(tmp_path / "none"), "--resume")
    assert "no checkpoint" in err and "drop --resume" in err


def test_bench_delivers_every_sample_once_per_epoch_without_a_model(s3_env, bucket):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=40, shard_size="16KB")
    summary = bench_loader(BenchConfig(uri=uri, source_kind="s3io", batch_size=8, num_workers=2, epochs=2,
                                       warmup_batches=1))
    assert [e["epoch"] for e in summary["epochs"]] == [0, 1]
    for epoch in summary["epochs"]:
        assert epoch["images"] == epoch["distinct_images"] == 40 and epoch["batches"] == 5
        assert epoch["images_per_s"] > 0


def test_demo_trains_and_benches_each_kind_and_prints_the_table(s3_env, bucket):
    done = run_cli(["demo", f"s3://{bucket}/demo/", "--num-images", "24", "--image-size", "32", "--batch-size",
                    "8", "--kinds", "s3io"])
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout[done.stdout.index("source kind |"):].splitlines()
    assert table[0].index("train first batch s") < table[0].index("train img/s epoch 1") and len(table) == 3
    assert table[0].index("loader first batch s") < table[0].index("loader img/s epoch 1") < table[0].index(
        "after warm-up")
    cells = [c.strip() for c in table[2].split("|")]
    assert cells[0] == "s3io" and cells[-1] == "yes"
    # Whole epochs first: train and loader, time to the first batch, then epoch 1 and epoch 2 apart.
    assert all(float(cells[i]) > 0 for i in (2, 3, 4, 5, 6, 7))
    assert "$ python" in done.stdout and "resnet.py train" in done.stdout
    assert "whole epochs through the far store (a proxy before this endpoint adding" in done.stdout


# -- bad input -------------------------------------------------------------------------------------


def nothing_left_running(mount_root, before):
    assert not fuse_mounts_under(str(mount_root))
    assert not [p for p in mount_programs() if p.pid not in before]


def test_prefix_without_shards_says_how_to_make_them(s3_env, bucket, mount_root, capsys):
    before = {p.pid for p in mount_programs()}
    err = train_fails(capsys, f"s3://{bucket}/empty/", "--mount-dir", str(mount_root / "m"))
    assert "no dataset at" in err and "resnet.py make" in err
    nothing_left_running(mount_root, before)


def test_shards_without_a_manifest_are_named_as_such(s3_env, s3, bucket, capsys):
    make_tiny_dataset(f"s3://{bucket}/data/", num_images=8)
    s3.delete_object(Bucket=bucket, Key=f"data/{MANIFEST_NAME}")
    err = train_fails(capsys, f"s3://{bucket}/data/", "--source-kind", "s3io")
    assert "1 .tar shards but no index (manifest.json" in err and "resnet.py index" in err and "make" not in err


def _truncate(s3, bucket, key):
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    s3.put_object(Bucket=bucket, Key=key, Body=body[: len(body) // 2])
    return body


def test_truncated_shard_is_named_before_training(s3_env, s3, bucket, mount_root, capsys):
    uri = f"s3://{bucket}/data/"
    made = make_tiny_dataset(uri, num_images=30, shard_size="16KB")
    victim = made.manifest.shards[1].name
    _truncate(s3, bucket, f"data/{victim}")
    before = {p.pid for p in mount_programs()}
    err = train_fails(capsys, uri, "--mount-dir", str(mount_root / "m"))
    assert victim in err and "truncated" in err
    nothing_left_running(mount_root, before)


def test_shard_truncated_behind_the_manifest_is_named_while_reading(s3_env, s3, bucket, capsys):
    """The manifest is rewritten to match the cut shard, so only the tar reader can notice."""
    uri = f"s3://{bucket}/data/"
    made = make_tiny_dataset(uri, num_images=30, shard_size="16KB")
    victim = made.manifest.shards[-1].name
    _truncate(s3, bucket, f"data/{victim}")
    manifest = json.loads(s3.get_object(Bucket=bucket, Key=f"data/{MANIFEST_NAME}")["Body"].read())
    size = s3.head_object(Bucket=bucket, Key=f"data/{victim}")["ContentLength"]
    for shard in manifest["shards"]:
        if shard["name"] == victim:
            shard["bytes"] = size
    s3.put_object(Bucket=bucket, Key=f"data/{MANIFEST_NAME}", Body=json.dumps(manifest).encode())
    err = train_fails(capsys, uri, "--source-kind", "fsspec", "--num-workers", "1")
    assert "TruncatedShard" in err or "truncated" in err
    assert victim in err


@pytest.mark.parametrize("cut", ["inside a member", "between a sample's members", "between samples"])
def test_reader_names_the_shard_whose_tar_stream_breaks_off(cut, s3_env, s3, bucket):
    made = make_tiny_dataset(f"s3://{bucket}/data/", num_images=6)
    shard = made.manifest.shards[0]
    body = s3.get_object(Bucket=bucket, Key=f"data/{shard.name}")["Body"].read()
    members = tarfile.open(fileobj=io.BytesIO(body)).getmembers()  # .jpg, .cls, .jpg, .cls, ...
    end = {"inside a member": members[4].offset_data + 100, "between a sample's members": members[5].offset,
           "between samples": members[6].offset}[cut]
    with pytest.raises(TruncatedShard, match=shard.name) as caught:
        for sample in read_shard(shard.name, io.BytesIO(body[:end]), first_index=0, start=0, stop=6, expected=6):
            decode(sample, 32)
    assert caught.value.shard == shard.name


def test_unknown_source_kind_is_refused_with_the_choices(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["train", "s3://bucket/data/", "--source-kind", "nfs"])
    assert exited.value.code == 1  # usage errors exit 1, as every other error (mountctl.ArgumentParser)
    assert "invalid choice: 'nfs'" in capsys.readouterr().err
    with pytest.raises(InvalidSpec, match="mountpoint, s3io, fsspec"):
        TrainConfig(uri="s3://bucket/data/", source_kind="nfs")


@pytest.mark.parametrize("command", ["make", "train"])
def test_unreachable_endpoint_fails_fast_and_says_where(command, s3_env, mount_root, monkeypatch, capsys):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    before = {p.pid for p in mount_programs()}
    started = time.monotonic()
    extra = ["--num-images", "4"] if command == "make" else ["--mount-dir", str(mount_root / "m"), "--batch-size", "8"]
    status = main([command, "s3://mountctl/data/", "--no-progress", *extra])
    err = capsys.readouterr().err
    assert status == 1
    assert f"127.0.0.1:{port}" in err and "AWS_ENDPOINT_URL" in err
    assert time.monotonic() - started < 30
    nothing_left_running(mount_root, before)
