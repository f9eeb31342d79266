"""Checkpoint routes: every route round-trips a state tensor for tensor; bad destinations and faults fail cleanly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

from benchmarks.harness.checkpoint_cells import states_equal
from mountctl import LocalS3, mount
from mountctl.pytorch.errors import CheckpointError
from mountctl.pytorch.training import dcp
from mountctl.pytorch.training.checkpoint import LAST, CheckpointTarget
from mountctl.pytorch.training.checkpoint_routes import FsspecCheckpointIO
from mountctl.pytorch.training.versioned import whole_versions
from mountctl.s3 import client as s3_client

from torch_support import REPO


def small_state(seed: int = 0) -> dict:
    """A small model and its optimizer after one step (momentum buffers), plus loop counters."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 16)).sum().backward()
    optimizer.step()
    return {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], "global_step": 7,
            "extra": torch.arange(1000, dtype=torch.int64)}


def round_trip(location: str, settings) -> tuple[dict, dict, CheckpointTarget]:
    target = CheckpointTarget.parse(location)
    target.prepare(settings)
    plugin = target.plugin(settings)
    state = small_state()
    try:
        plugin.save_checkpoint(state, target.last)
        assert target.has_last(settings)
        loaded = plugin.load_checkpoint(target.last, weights_only=True)
    finally:
        plugin.teardown()
    return state, loaded, target


def test_s3io_route_round_trips_every_tensor(s3_env, bucket):
    state, loaded, target = round_trip(f"s3://{bucket}/ckpt/", s3_env)
    assert states_equal(state, loaded)


def test_fsspec_route_round_trips_every_tensor(s3_env, s3, bucket):
    state, loaded, target = round_trip(f"fsspec+s3://{bucket}/ckpt/", s3_env)
    assert target.last == f"fsspec+s3://{bucket}/ckpt/{LAST}"
    assert states_equal(state, loaded)
    assert s3.head_object(Bucket=bucket, Key=f"ckpt/{LAST}")["ContentLength"] > 10_000


def test_mount_route_round_trips_every_tensor(s3_env, s3, bucket, backend, mount_root):
    state, loaded, target = round_trip(f"mount+{backend}://{bucket}/ckpt/", s3_env)
    assert states_equal(state, loaded)
    listing = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="ckpt/").get("Contents", [])}
    # mount-s3 can neither rename nor overwrite: each save is a new whole version (training/versioned.py).
    key = whole_versions(listing, f"ckpt/{LAST}")[0][1] if backend == "mount-s3" else f"ckpt/{LAST}"
    assert listing[key] > 10_000


def test_mount_route_overwrites_the_previous_checkpoint(s3_env, bucket, backend, mount_root):
    target = CheckpointTarget.parse(f"mount+{backend}://{bucket}/ckpt/")
    plugin = target.plugin(s3_env)
    try:
        plugin.save_checkpoint(small_state(seed=1), target.last)
        plugin.save_checkpoint(small_state(seed=2), target.last)
        assert states_equal(small_state(seed=2), plugin.load_checkpoint(target.last, weights_only=True))
    finally:
        plugin.teardown()


def test_path_route_round_trips_every_tensor(s3_env, tmp_path):
    target = CheckpointTarget.parse(str(tmp_path / "ckpt"))
    target.prepare(s3_env)
    from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

    state = small_state()
    TorchCheckpointIO().save_checkpoint(state, target.last)
    assert states_equal(state, TorchCheckpointIO().load_checkpoint(target.last, weights_only=True))


def test_unknown_mount_program_in_the_location_is_refused():
    with pytest.raises(CheckpointError, match="mount\\+PROGRAM"):
        CheckpointTarget.parse("mount+ftp://bucket/ckpt/")


def test_dcp_on_two_ranks_to_a_read_write_mount_round_trips(s3_env, s3, bucket, backend, mount_root):
    with mount(f"s3://{bucket}/", str(mount_root / "m"), backend=backend, read_only=False, shared=False) as m:
        # The bench's DCP child: 2 gloo ranks save 8 MB with FileSystemWriter, load it back and compare.
        done = subprocess.run([sys.executable, "-m", "benchmarks.harness.checkpoint_cells",
                               os.path.join(m.path, "dcp"), "8"],
                              capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["verified"] is True
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="dcp/")["Contents"]}
    assert "dcp/.metadata" in keys


def test_dcp_load_of_a_missing_checkpoint_names_it(s3_env, bucket):
    with pytest.raises(CheckpointError, match="finished"):
        dcp.load({"w": torch.zeros(2)}, f"s3://{bucket}/nothing-here/", s3_env)


# Bad destinations and faults: a clear error, and nothing a later --resume would pick up.

def test_path_route_without_write_permission_is_refused_before_training(s3_env, tmp_path):
    # Root writes anywhere: the check runs with an unprivileged effective user, as a training job would.
    parent = tmp_path / "locked"
    parent.mkdir(mode=0o755)
    target = CheckpointTarget.parse(str(parent / "ckpt"))
    os.seteuid(65534)
    try:
        with pytest.raises(CheckpointError, match="--checkpoint-dir"):
            target.prepare(s3_env)
    finally:
        os.seteuid(0)
    assert not (parent / "ckpt").exists()


def test_path_on_a_read_only_mount_is_refused_before_training(s3_env, bucket, backend, mount_root):
    with mount(f"s3://{bucket}/", str(mount_root / "m"), backend=backend, shared=False) as m:  # read-only default
        target = CheckpointTarget.parse(os.path.join(m.path, "ckpt"))
        with pytest.raises(CheckpointError, match="--checkpoint-dir"):
            target.prepare(s3_env)
        assert not os.path.exists(target.location)


@pytest.mark.parametrize("scheme", ["s3", "fsspec+s3", "mount+rclone"])
def test_resume_from_a_missing_bucket_says_there_is_no_checkpoint(s3_env, s3, scheme):
    # (SeaweedFS creates a bucket on the first PUT, and prepare() creates one on a custom endpoint, so a save
    # cannot meet a missing bucket here; on AWS prepare() refuses it before training.)
    missing = f"no-such-bucket-{os.getpid()}"
    target = CheckpointTarget.parse(f"{scheme}://{missing}/ckpt/")
    with pytest.raises(CheckpointError, match="found no checkpoint"):
        target.resume_path(s3_env)
    assert missing not in {b["Name"] for b in s3.list_buckets()["Buckets"]}


@pytest.mark.parametrize("route", ["fsspec", "s3io"])
def test_save_survives_an_s3_server_restart(route, tmp_path, monkeypatch):
    server = LocalS3(str(tmp_path / "own-s3"))
    server.start(buckets=("restart",))
    try:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        settings = server.settings()
        state = {"big": torch.randn(512 << 20 >> 2)}  # 512 MB: the upload is under way when the server stops
        plugin = FsspecCheckpointIO(settings, retry_for_s=90) if route == "fsspec" else (
            CheckpointTarget.parse("s3://restart/ckpt/").plugin(settings))
        outcome: dict = {}

        def save() -> None:
            try:
                plugin.save_checkpoint(state, "s3://restart/ckpt/last.ckpt")
                outcome["saved"] = True
            except CheckpointError as exc:
                outcome["error"] = exc

        saver = threading.Thread(target=save, daemon=True)
        saver.start()
        time.sleep(1.0)
        server.stop()
        assert saver.is_alive(), "the save finished before the server stopped: nothing was tested"
        time.sleep(1.0)
        server.start(buckets=("restart",))
        saver.join(timeout=150)
        assert not saver.is_alive(), "the save neither finished nor failed"
        keys = [o["Key"] for o in s3_client(settings).list_objects_v2(Bucket="restart").get("Contents", [])]
        if outcome.get("saved"):
            assert states_equal(state, plugin.load_checkpoint("s3://restart/ckpt/last.ckpt", weights_only=True))
        else:
            assert "ckpt/last.ckpt" not in keys, f"a failed save left {keys}"
            assert "run again" in str(outcome["error"])
        print(f"\n[S3 restart during a {route} save] outcome {outcome}; objects {keys}")
    finally:
        server.stop()
