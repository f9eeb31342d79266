"""One resolved S3Settings reaches every route: make, the three source kinds, checkpoints and each mount program.

Given explicitly (not through the environment), the settings must still reach s3torchconnector and the
mount program; given as AWS_PROFILE with a shared credentials file and no key variables, every route works.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from mountctl.pytorch.data.sources import MountpointOptions
from mountctl.pytorch.data.synthetic import MakeConfig, make_dataset, parse_size
from mountctl.pytorch.training.trainer import TrainConfig, train

from conftest import make_bucket, require_fuse
from torch_support import REPO, RESNET_PY, last_json_line

KINDS = ("mountpoint", "s3io", "fsspec")


@pytest.fixture
def no_aws_environment(monkeypatch, tmp_path):
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))


def test_explicit_settings_reach_every_route(local_s3, s3, no_aws_environment, mount_root):
    require_fuse()
    settings = local_s3.settings()
    bucket = make_bucket(s3, "explicit-routes")
    uri = f"s3://{bucket}/data/"
    make_dataset(MakeConfig(uri=uri, num_images=16, image_size=32, num_classes=4, shard_size=parse_size("100MB"),
                            jobs=1), settings=settings, progress=False)
    for kind in KINDS:
        summary = train(TrainConfig(uri=uri, source_kind=kind, batch_size=8, max_steps=1, num_workers=1,
                                    precision="32-true", arch="resnet18", progress=False,
                                    mountpoint=MountpointOptions(backend="rclone"),
                                    checkpoint_dir=f"s3://{bucket}/ckpt-{kind}/"),
                        settings=settings, out=io.StringIO())
        assert summary["global_step"] == 1 and summary["checkpoint"], kind
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert {f"ckpt-{kind}/last.ckpt" for kind in KINDS} <= keys


@pytest.fixture
def profile_only_environment(local_s3, monkeypatch, tmp_path):
    """AWS_PROFILE and the shared files only: no key variables anywhere."""
    settings = local_s3.settings()
    credentials, config = tmp_path / "credentials", tmp_path / "config"
    credentials.write_text(f"[train]\naws_access_key_id = {settings.access_key_id}\n"
                           f"aws_secret_access_key = {settings.secret_access_key}\n")
    config.write_text("[profile train]\nregion = us-east-1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_PROFILE="train", AWS_SHARED_CREDENTIALS_FILE=str(credentials), AWS_CONFIG_FILE=str(config),
               AWS_ENDPOINT_URL=settings.endpoint_url or "")
    return env


def _run(env, *argv: str, timeout: float = 240) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert done.returncode == 0, f"{argv}: {done.stderr[-2000:]}"
    return done


def test_aws_profile_alone_works_on_every_route(profile_only_environment, s3, mount_root):
    require_fuse()
    env = profile_only_environment
    bucket = make_bucket(s3, "profile-routes")
    uri = f"s3://{bucket}/data/"
    _run(env, RESNET_PY, "make", uri, "--num-images", "16", "--image-size", "32", "--num-classes", "4",
         "--no-progress")
    for kind in KINDS:
        done = _run(env, RESNET_PY, "train", uri, "--source-kind", kind, "--batch-size", "8", "--max-steps", "1",
                    "--num-workers", "1", "--precision", "32", "--no-progress", "--backend", "rclone", "--arch", "resnet18",
                    "--checkpoint-dir", f"s3://{bucket}/ckpt-{kind}/")
        assert last_json_line(done.stdout)["global_step"] == 1, kind
    for backend in ("rclone", "s3fs"):
        directory = str(mount_root / backend)
        _run(env, "-m", "mountctl", "mount", uri, directory, "--backend", backend)
        try:
            assert "manifest.json" in os.listdir(directory)
        finally:
            _run(env, "-m", "mountctl", "unmount", directory)
