"""``mountctl cleanup`` leaves a managed mount alone while its supervisor lives, however slow its probe.

Real components throughout: the session's SeaweedFS, a real rclone mount run by a real mountctl supervisor
process, and the real ``mountctl cleanup`` command (its search for orphaned servers kept to this test's
directory, so that the runs of others on this machine are not touched).  The slow probe is made for real:
rclone stopped with SIGSTOP leaves every access to the mount waiting in the kernel, as a program that
serves 64 readers makes the probe wait its turn.
"""

from __future__ import annotations

import os
import signal

import psutil

import mountctl
from mountctl import paths
from mountctl.cli import main
from mountctl.health import mount_health
from mountctl.mounttable import find_mount
from mountctl.shared import Registry
from mountctl.spec import MountSpec

from conftest import require_fuse


def test_cleanup_leaves_a_slow_mount_to_its_live_supervisor_and_says_so(s3_env, s3, bucket, mount_root, tmp_path,
                                                                       monkeypatch, capsys):
    require_fuse()
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path / "home"))  # cleanup looks at this home's mounts alone
    from mountctl import orphans

    scoped = orphans.stop_orphans
    monkeypatch.setattr(orphans, "stop_orphans", lambda roots=None: scoped([str(tmp_path)]))
    s3.put_object(Bucket=bucket, Key="k.txt", Body=b"kept")
    directory = os.path.join(paths.managed_mounts_dir(), "live")
    handle = mountctl.shared.acquire(MountSpec(uri=f"s3://{bucket}/", mount_dir=directory, backend="rclone"),
                                     watchdog=False)  # the watchdog would remount; what is asserted is cleanup's part
    try:
        record = Registry().read(directory)
        assert record is not None and record.supervisor is not None
        supervisor, program = record.supervisor["pid"], handle.pid
        assert program is not None
        os.kill(program, signal.SIGSTOP)
        try:
            assert mount_health(directory, None, program, 2.0).state == "unresponsive"  # what the old cleanup cleared
            assert main(["cleanup"]) == 0
        finally:
            os.kill(program, signal.SIGCONT)
        out = capsys.readouterr().out
        assert find_mount(directory) is not None, f"cleanup cleared a mount whose supervisor is alive:\n{out}"
        assert psutil.Process(program).is_running() and psutil.Process(supervisor).is_running()
        [line] = [line for line in out.splitlines() if directory in line]
        assert line.startswith(f"left alone {directory} (s3://{bucket}/): unresponsive"), out
        assert f"supervisor (pid {supervisor}) is alive" in line and "mountctl unmount" in line, line
        assert mount_health(directory, None, program, 30.0).state == "healthy"  # it serves again, untouched
        print(f"\n[cleanup beside a stopped mount] {line}")
    finally:
        handle.release()
