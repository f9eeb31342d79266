"""A checkpoint that exists but is no whole checkpoint: `--resume` names it in one line, on every route.

Real SeaweedFS and a real rclone mount.  Every route's loader is driven as Lightning drives it (the
plugin's ``load_checkpoint``); the whole command line runs for two routes (each run costs a torch import).
"""

from __future__ import annotations

import os
import time

import pytest

from mountctl.pytorch.errors import CheckpointError
from mountctl.pytorch.training.checkpoint import CheckpointTarget

from conftest import require_fuse
from torch_support import make_tiny_dataset, run_cli

GARBAGE = bytes(range(100))
TINY = ["--arch", "resnet18", "--precision", "32", "--no-progress", "--accelerator", "cpu", "--batch-size", "4",
        "--num-workers", "0", "--source-kind", "s3io"]
ROUTES = ["path", "s3", "fsspec+s3", "mount+rclone"]


def corrupt_last_ckpt(route: str, s3, bucket: str, tmp_path) -> str:
    """Put 100 garbage bytes where ``route`` keeps last.ckpt; return the --checkpoint-dir."""
    if route == "path":
        location = str(tmp_path / "ckpt")
        os.makedirs(location)
        with open(os.path.join(location, "last.ckpt"), "wb") as f:
            f.write(GARBAGE)
        return location
    if route.startswith("mount"):
        require_fuse()
    s3.put_object(Bucket=bucket, Key="ckpt/last.ckpt", Body=GARBAGE)
    return f"{route}://{bucket}/ckpt/"


@pytest.mark.parametrize("route", ROUTES)
def test_loading_a_corrupt_last_ckpt_is_one_checkpoint_error_on_every_route(route, s3_env, s3, bucket, tmp_path,
                                                                            mount_root):
    target = CheckpointTarget.parse(corrupt_last_ckpt(route, s3, bucket, tmp_path))
    plugin = target.plugin(s3_env)
    started = time.monotonic()
    try:
        with pytest.raises(CheckpointError, match=r"last\.ckpt is unreadable .*Move it aside .*--resume") as info:
            plugin.load_checkpoint(target.resume_path(s3_env), weights_only=None)  # None: must still be safe
    finally:
        plugin.teardown()
    assert "weights_only" not in str(info.value) and "\n" not in str(info.value)
    assert time.monotonic() - started < 15, "a corrupt checkpoint must not be retried as if S3 were down"


@pytest.mark.parametrize("route", ["path", "s3"])
def test_resume_from_a_corrupt_last_ckpt_prints_one_line_and_no_unsafe_advice(route, s3_env, s3, bucket, tmp_path):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=16, shard_size="12KB")
    location = corrupt_last_ckpt(route, s3, bucket, tmp_path)
    done = run_cli(["train", uri, *TINY, "--checkpoint-dir", location, "--resume"], timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(lines) == 1 and "last.ckpt is unreadable" in lines[0] and "Move it aside" in lines[0], done.stderr
    assert "weights_only" not in done.stderr and "arbitrary code" not in done.stderr
    assert "Traceback" not in done.stderr


def test_dcp_to_s3_goes_to_the_settings_endpoint_not_only_the_environment(s3_env, s3, bucket, monkeypatch):
    """Settings that name the endpoint explicitly (no AWS_ENDPOINT_URL in the environment) reach DCP's client."""
    import torch

    from mountctl.pytorch.training import dcp

    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    where = f"s3://{bucket}/dcp-endpoint/"
    dcp.save({"w": torch.arange(6.0)}, where, s3_env)
    state = {"w": torch.zeros(6)}
    dcp.load(state, where, s3_env)
    assert torch.equal(state["w"], torch.arange(6.0))
    assert "dcp-endpoint/.metadata" in {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
