"""Mounts never nest: one inside another is refused, and a mount whose directory vanishes stops, not retries."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import pytest

from mountctl import Mount, MountDirError, MountSpec
from mountctl.processes import process_alive
from mountctl.shared.registry import Registry

from conftest import require_fuse

MOUNTCTL = [sys.executable, "-m", "mountctl"]


def _cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(MOUNTCTL + list(args), capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def _tmpfs(path) -> object:
    """A real file system that can be taken away under a mount (as an outer mount's unmount does)."""
    os.makedirs(path)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_mount_inside_a_managed_mount_and_one_over_it_are_refused_naming_both(s3_env, bucket, mount_root):
    require_fuse()
    outer = mount_root / "outer"
    done = _cli("mount", f"s3://{bucket}/", str(outer), "--backend", "rclone", "--read-write")
    assert done.returncode == 0, done.stderr
    try:
        inner = outer / "inner"
        done = _cli("mount", f"s3://{bucket}/", str(inner), "--backend", "rclone")
        assert done.returncode == 1
        assert str(inner) in done.stderr and f"inside {outer}" in done.stderr, done.stderr
        with pytest.raises(MountDirError, match=f"{mount_root} holds {outer}"):
            Mount(MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root), backend="rclone")).start()
        assert not os.path.exists(inner)  # nothing was created inside the outer mount
    finally:
        done = _cli("unmount", str(outer))
    assert done.returncode == 0, done.stderr


def test_a_watched_mount_whose_directory_vanished_gives_up_at_once_with_the_reason(s3_env, bucket, mount_root):
    require_fuse()
    with _tmpfs(mount_root / "parent") as parent:
        spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=str(parent / "m"), backend="rclone", probe_timeout_s=2.0)
        m = Mount(spec, watchdog=True, watchdog_interval_s=0.5).start()
        try:
            subprocess.run(["umount", "-l", str(parent)], check=True, timeout=10)  # the parent goes, the mount with it
            deadline = time.monotonic() + 20
            while not any(e["event"] == "gave-up" for e in m.events) and time.monotonic() < deadline:
                time.sleep(0.1)
            kinds = [e["event"] for e in m.events]
            assert "gave-up" in kinds, kinds
            assert m.restarts == 0 and "restart-failed" not in kinds, kinds
            assert "no longer reachable" in m.gone_reason and spec.mount_dir in m.gone_reason
        finally:
            m.stop()


def test_a_supervisor_whose_directory_vanished_exits_with_its_reason_logged(s3_env, bucket, mount_root):
    require_fuse()
    with _tmpfs(mount_root / "parent") as parent:
        directory = str(parent / "m")
        done = _cli("mount", f"s3://{bucket}/", directory, "--backend", "rclone")
        assert done.returncode == 0, done.stderr
        registry = Registry()
        supervisor = registry.read(directory).supervisor
        try:
            subprocess.run(["umount", "-l", str(parent)], check=True, timeout=10)
            deadline = time.monotonic() + 40
            while process_alive(supervisor) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not process_alive(supervisor), "the supervisor went on retrying a directory that is gone"
            with open(registry.supervisor_log(directory)) as f:
                assert "no longer reachable" in f.read()
            assert registry.read(directory) is None
        finally:
            if process_alive(supervisor):
                _cli("unmount", directory)
            with contextlib.suppress(OSError):
                os.unlink(registry.supervisor_log(directory))
