"""Mount propagation, the Linux mechanism under Kubernetes' `Bidirectional` / `HostToContainer` volumes.

A node agent (a DaemonSet pod) mounts; training pods that started earlier see the mount through a hostPath
volume whose propagation is `HostToContainer`, which is a slave copy of the host's shared mount. Here a
process in its own mount namespace (`unshare --mount --propagation slave`), started before mountctl mounts,
stands in for the training pod, and a bind mount of the test's directory made rshared stands in for the
hostPath's shared parent. What this does not cover (the kubelet, the CSI or DaemonSet wiring) is named in
docs/kubernetes.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import time

import pytest

from mountctl import Mount, MountSpec
from mountctl.mounts.mounttable import MountEntry, read_mount_table

from conftest import missing, require_fuse

WAIT_S = 30.0
BODY = os.urandom(3 * 1024 * 1024 + 17)


def _wait_for(predicate, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s:.0f}s")
        time.sleep(0.1)


def _propagation(path: str) -> str:
    done = subprocess.run(["findmnt", "-n", "-o", "PROPAGATION", "-T", path], capture_output=True, text=True,
                          timeout=10, check=False)
    return done.stdout.strip()


@contextlib.contextmanager
def bound_onto_itself(path: str, propagation: str):
    """``path`` as a mount of its own (a bind mount onto itself) with ``propagation``, removed afterwards.

    Propagation follows the peer group of the mount that holds the mount point, so the test sets it on a
    mount it owns rather than relying on how this machine's / is set (private here, shared under systemd)."""
    bind = subprocess.run(["mount", "--bind", path, path], capture_output=True, text=True, timeout=10,
                          check=False)
    if bind.returncode != 0:
        missing(f"cannot bind-mount {path} (needs root / CAP_SYS_ADMIN): {bind.stderr.strip()}")
    try:
        subprocess.run(["mount", f"--make-r{propagation}", path], check=True, timeout=10)
        assert _propagation(path).startswith(propagation)
        yield path
    finally:
        done = subprocess.run(["umount", path], capture_output=True, timeout=30, check=False)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", path], timeout=30, check=False)


@pytest.fixture
def shared_dir(mount_root):
    """What a hostPath with Bidirectional propagation on the agent's side gives: a shared mount."""
    require_fuse()
    with bound_onto_itself(str(mount_root), "shared") as path:
        yield path


class Pod:
    """A process in its own mount namespace with slave propagation: what a HostToContainer volume gives a pod."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(["unshare", "--mount", "--propagation", "slave", "sleep", "600"],
                                        start_new_session=True)
        own = os.readlink("/proc/self/ns/mnt")
        _wait_for(lambda: self._namespace() not in ("", own), "the pod's own mount namespace")

    def _namespace(self) -> str:
        try:
            return os.readlink(f"/proc/{self.process.pid}/ns/mnt")
        except OSError:
            return ""

    def fuse_mounts_at(self, path: str) -> list[MountEntry]:
        """The pod's view of the mount table (its own /proc/PID/mountinfo)."""
        entries = read_mount_table(f"/proc/{self.process.pid}/mountinfo")
        return [e for e in entries if e.is_fuse and e.mount_point == path]

    def read(self, path: str) -> bytes:
        """Read a file from inside the pod's namespace, bounded: a broken FUSE mount would block forever."""
        done = subprocess.run(["nsenter", f"--target={self.process.pid}", "--mount", "cat", path],
                              capture_output=True, timeout=WAIT_S, check=False)
        assert done.returncode == 0, f"reading {path} in the pod failed: {done.stderr.decode(errors='replace')}"
        return done.stdout

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=WAIT_S)


@contextlib.contextmanager
def running_pod():
    started = Pod()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def pod(shared_dir):
    with running_pod() as started:
        yield started


@pytest.fixture
def data(s3, bucket):
    s3.put_object(Bucket=bucket, Key="train/blob.bin", Body=BODY)
    return bucket


def test_mount_made_after_the_pod_started_shows_up_inside_it_reads_right_and_goes_at_unmount(
        s3_env, data, shared_dir, pod):
    path = os.path.join(shared_dir, "m")
    assert not pod.fuse_mounts_at(path)
    with Mount(MountSpec(uri=f"s3://{data}/train/", mount_dir=path, backend="rclone")) as m:
        _wait_for(lambda: len(pod.fuse_mounts_at(path)) == 1, "the mount propagating into the pod")
        assert pod.fuse_mounts_at(path)[0].fs_type == "fuse.rclone"
        assert hashlib.sha256(pod.read(os.path.join(path, "blob.bin"))).digest() == hashlib.sha256(BODY).digest()
        assert m.pid
    _wait_for(lambda: not pod.fuse_mounts_at(path), "the unmount propagating into the pod")


def test_watchdog_remount_after_the_daemon_is_killed_shows_up_inside_the_pod(s3_env, data, shared_dir, pod):
    path = os.path.join(shared_dir, "m")
    spec = MountSpec(uri=f"s3://{data}/train/", mount_dir=path, backend="rclone")
    with Mount(spec, watchdog=True, watchdog_interval_s=0.5) as m:
        _wait_for(lambda: len(pod.fuse_mounts_at(path)) == 1, "the mount propagating into the pod")
        first_pid = m.pid
        assert first_pid
        os.kill(first_pid, signal.SIGKILL)
        _wait_for(lambda: m.pid not in (None, first_pid) and m.health().state == "healthy", "the watchdog's remount")
        # The killed daemon's entry answers ENOTCONN to every access, so one entry in the pod that reads the
        # right bytes is the new daemon's (FUSE connection numbers and mount ids are reused: no identity check).
        _wait_for(lambda: len(pod.fuse_mounts_at(path)) == 1, "the stale entry's removal reaching the pod")
        assert pod.read(os.path.join(path, "blob.bin")) == BODY
    _wait_for(lambda: not pod.fuse_mounts_at(path), "the unmount propagating into the pod")


def test_under_a_private_parent_the_pod_never_sees_the_mount(s3_env, data, mount_root):
    """The control: without a shared parent on the host (an agent mounting without `Bidirectional` on a node
    whose / is private) the same mount stays on the host: the tests above pass because of propagation."""
    require_fuse()
    with bound_onto_itself(str(mount_root), "private") as parent, running_pod() as pod:
        path = os.path.join(parent, "m")
        with Mount(MountSpec(uri=f"s3://{data}/train/", mount_dir=path, backend="rclone")) as m:
            assert m.health().state == "healthy"
            time.sleep(1)  # propagation is synchronous in the kernel; a second's grace for a loaded machine
            assert not pod.fuse_mounts_at(path)
