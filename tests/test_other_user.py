"""Status as another user: a mount that FUSE keeps from this user is "not-permitted", never "unresponsive".

FUSE refuses every uid but the mount's owner (root included) unless it was mounted with
allow_other.  Here a throwaway user mounts the real local S3 with the real s3fs, and root
(this test) asks for its health and for the node's status, as `mountctl status` and the
exporter run by root's systemd unit would.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid

import pytest
from child_processes import stop_child

from mountctl.mounts.backends import BACKENDS
from mountctl.mounts.health import mount_health
from mountctl.mounts.mounttable import find_mount
from mountctl.observability import status
from mountctl.observability.exporter import readiness
from mountctl.processes import process_identity
from mountctl.shared.registry import MountRecord, Registry

from conftest import make_bucket, missing, require_fuse


@contextlib.contextmanager
def _throwaway_user():
    name = f"mctl{uuid.uuid4().hex[:8]}"
    done = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        missing(f"cannot create a throwaway user: {done.stderr.strip()}")
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=30)


@pytest.fixture
def mounted_by_another_user(s3_env, s3):
    require_fuse()
    if os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("useradd") is None:
        missing("this test runs as root with setpriv and useradd (util-linux, passwd)")
    if not BACKENDS["s3fs"].available():
        missing("s3fs is not installed")
    bucket = make_bucket(s3, f"other-{uuid.uuid4().hex[:8]}")
    s3.put_object(Bucket=bucket, Key="k.txt", Body=b"theirs")
    top = tempfile.mkdtemp(prefix="mountctl-other-user-")
    os.chmod(top, 0o755)
    with _throwaway_user() as user:
        mount_dir, secret = os.path.join(top, "m"), os.path.join(top, "passwd")
        os.mkdir(mount_dir)
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(f"{s3_env.access_key_id}:{s3_env.secret_access_key}\n")
        for path in (mount_dir, secret):
            os.chown(path, user.pw_uid, user.pw_gid)
        child = subprocess.Popen(
            # /dev/fuse is root's alone in this container and setuid fusermount3 cannot open it either: the user
            # keeps the rights to open it and to mount, so libfuse mounts directly.  The mount is owned by the
            # user's uid (user_id=), which is all that FUSE's check of other users looks at.
            ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
             "--inh-caps=+dac_override,+sys_admin", "--ambient-caps=+dac_override,+sys_admin",
             shutil.which("s3fs") or "s3fs", bucket, mount_dir, "-f", "-o",
             f"url={s3_env.endpoint_url},use_path_request_style,passwd_file={secret}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"})
        try:
            deadline = time.monotonic() + 30
            while find_mount(mount_dir) is None:
                assert child.poll() is None and time.monotonic() < deadline, "the other user's s3fs did not mount"
                time.sleep(0.1)
            yield mount_dir, child.pid, user.pw_uid
        finally:
            stop_child(child, grace_s=15, kill_wait_s=10)
            if find_mount(mount_dir) is not None:
                subprocess.run(["umount", "-l", mount_dir], capture_output=True, timeout=15)
            shutil.rmtree(top, ignore_errors=True)
            s3.delete_object(Bucket=bucket, Key="k.txt")
            s3.delete_bucket(Bucket=bucket)


def test_root_probing_another_users_mount_is_not_permitted_not_unresponsive(mounted_by_another_user):
    mount_dir, pid, owner = mounted_by_another_user
    health = mount_health(mount_dir, BACKENDS["s3fs"], pid, 5.0)
    assert health.state == "not-permitted", health
    assert health.ok  # no reason to remount
    assert "allow_other" in health.error and "PermissionError" in health.error


def test_status_and_readiness_do_not_call_another_users_mount_broken(mounted_by_another_user):
    mount_dir, pid, _ = mounted_by_another_user
    registry = Registry()
    registry.write(MountRecord(uri="s3://theirs/", mount_dir=mount_dir, spec={}, identity={}, state="mounted",
                               backend="s3fs", supervisor=process_identity(), program_pid=pid))
    try:
        rows = status(5.0)
    finally:
        registry.remove(mount_dir)
    [row] = [row for row in rows if row["dir"] == mount_dir]
    assert row["health"]["state"] == "not-permitted"
    assert row["up"]
    ready, body = readiness([row])
    assert ready, body
