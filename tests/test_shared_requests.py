"""Shared mounts are shared only by requests that see the same data, and failures reach every waiter.

Bugs of issue #8 that need a real S3 server and real mounts: two endpoints with the same bucket name,
several waiters on a failing mount, a stop() whose wait times out, and an explicit zero probe bound.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

import mountctl
from mountctl import AlreadyMounted, LocalS3, Mount, MountSpec
from mountctl.s3 import client as s3_client

from conftest import make_bucket, mount_programs, require_fuse


@pytest.fixture(scope="module")
def second_s3(tmp_path_factory):
    """Another S3 endpoint, with its own credentials, holding a bucket of the same name."""
    server = LocalS3(str(tmp_path_factory.mktemp("second-s3")))
    server.start(buckets=("same-name",))
    yield server
    server.stop()


def _put(settings, bucket: str, body: bytes) -> None:
    s3_client(settings).put_object(Bucket=bucket, Key="who.txt", Body=body)


def test_two_endpoints_with_one_bucket_name_never_share_a_mount(local_s3, second_s3, mount_root):
    require_fuse()
    first, second = local_s3.settings(), second_s3.settings()
    make_bucket(s3_client(first), "same-name") if "same-name" not in {
        b["Name"] for b in s3_client(first).list_buckets()["Buckets"]} else None
    _put(first, "same-name", b"first server")
    _put(second, "same-name", b"second server")
    with mountctl.mount("s3://same-name/", backend="rclone", settings=first) as a, \
            mountctl.mount("s3://same-name/", backend="rclone", settings=second) as b:
        assert a.path != b.path
        with open(os.path.join(a.path, "who.txt"), "rb") as f:
            assert f.read() == b"first server"
        with open(os.path.join(b.path, "who.txt"), "rb") as f:
            assert f.read() == b"second server"


def test_another_endpoint_at_the_same_explicit_dir_is_refused_naming_it(local_s3, second_s3, mount_root):
    require_fuse()
    directory = str(mount_root / "m")
    with mountctl.mount("s3://same-name/", directory, backend="rclone", settings=local_s3.settings()):
        with pytest.raises(AlreadyMounted, match="endpoint") as info:
            with mountctl.mount("s3://same-name/", directory, backend="rclone", settings=second_s3.settings()):
                pass
        message = str(info.value)
        assert "the credentials" in message
        assert second_s3.settings().secret_access_key not in message
        assert local_s3.settings().secret_access_key not in message
    record_files = os.listdir(os.path.join(os.environ["MOUNTCTL_HOME"], "mounts"))
    for name in record_files:
        if name.endswith(".json"):
            with open(os.path.join(os.environ["MOUNTCTL_HOME"], "mounts", name)) as f:
                assert local_s3.settings().secret_access_key not in f.read()


WAITER = textwrap.dedent("""
    import sys, mountctl
    try:
        with mountctl.mount(sys.argv[1], sys.argv[2], backend="rclone"):
            print("mounted")
    except mountctl.MountctlError as exc:
        print(type(exc).__name__)
""")


def test_every_waiter_of_a_failing_shared_mount_gets_the_real_error(s3_env, mount_root):
    require_fuse()
    directory = str(mount_root / "m")
    waiters = [subprocess.Popen([sys.executable, "-c", WAITER, "s3://no-such-bucket-8/", directory],
                                stdout=subprocess.PIPE, text=True) for _ in range(3)]
    answers = [w.communicate(timeout=90)[0].strip() for w in waiters]
    assert answers == ["BucketNotFound"] * 3
    deadline = time.monotonic() + 5  # the supervisor leaves once its waiters have read the error
    while [p for p in mount_programs() if directory in " ".join(p.cmdline())]:
        assert time.monotonic() < deadline, "the failed mount's supervisor outlived its waiters"
        time.sleep(0.05)


def test_stop_cleans_up_even_when_waiting_for_the_program_times_out(s3_env, bucket, mount_root):
    """Injected failure: no real program can be made to outlast its wait on demand."""
    require_fuse()
    spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend="rclone", unmount_timeout_s=1)
    m = Mount(spec).start()
    workdir, child = m._workdir, m._child
    assert child is not None

    def wait_times_out(timeout=None):
        raise subprocess.TimeoutExpired(child.args, timeout)

    child.wait = wait_times_out  # type: ignore[method-assign]
    m.stop()
    from mountctl.mounts.mounttable import find_mount

    assert find_mount(spec.mount_dir) is None and not os.path.exists(workdir)
    deadline = time.monotonic() + 5  # it was really killed, whatever wait() said
    while psutil.pid_exists(child.pid) and psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the mount program outlived stop()"
        time.sleep(0.05)


def test_an_explicit_zero_probe_bound_is_honoured(s3_env, bucket, mount_root):
    require_fuse()
    spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend="rclone")
    with Mount(spec) as m:
        assert m.health().ok
        # A zero bound is used, not replaced by the default: the probe cannot even reach the mount, which gives
        # no verdict on it (a wedge needs a probe that reached the program and saw no progress: docs/scale.md).
        health = m.health(timeout_s=0)
        assert health.state == "slow" and "within 0s" in health.error, health


HOLD_OPEN = "import sys, time; f = open(sys.argv[1], 'rb'); print('open', flush=True); time.sleep(120)"


def test_a_request_while_the_last_mount_is_stopping_waits_and_mounts_anew(s3, bucket, mount_root):
    """Back-to-back jobs on one node: the second asks while the first's mount is still being taken down."""
    require_fuse()
    s3.put_object(Bucket=bucket, Key="a.txt", Body=b"first")
    directory = str(mount_root / "m")
    spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=directory, backend="rclone", busy_grace_s=4)
    first = mountctl.shared.acquire(spec)
    registry = mountctl.shared.Registry()
    old_supervisor = registry.read(directory).supervisor
    # An open file keeps the mount busy, so its unmount retries for busy_grace_s: the record stays `stopping`.
    reader = subprocess.Popen([sys.executable, "-c", HOLD_OPEN, os.path.join(directory, "a.txt")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "open"
        first.release(wait=False)
        deadline = time.monotonic() + 10
        while (record := registry.read(directory)) is None or record.state != "stopping":
            assert record is not None and time.monotonic() < deadline, f"never saw the mount stopping: {record}"
            time.sleep(0.01)
        with mountctl.shared.acquire(spec) as second:
            assert registry.read(directory).supervisor != old_supervisor
            with open(os.path.join(second.path, "a.txt"), "rb") as f:
                assert f.read() == b"first"
    finally:
        reader.kill()
        reader.wait(timeout=10)
