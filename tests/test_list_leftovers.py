"""What a list mount leaves when its owner is killed with SIGKILL: nothing, once `mountctl cleanup` has run.

A mount of a list of objects makes two files of its own: the list under ``$MOUNTCTL_HOME/objects/`` (written once
per dataset, kept for remounts) and mount-s3's SQLite store of it, in a temporary directory that mount-s3 removes
when it exits but not when it is killed. Both outlived kill -9 and nothing ever removed them. Real components:
the session's SeaweedFS, our mount-s3, a real child process that owns the mount, and SIGKILL.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from mountctl import ListedObject, write_object_list
from mountctl.doctor import cleanup
from mountctl.mounts.backends import BACKENDS
from mountctl.mounts.mounttable import read_mount_table
from mountctl.mounts.object_list import sweep_unused_lists

from conftest import missing, require_fuse


def test_a_list_mount_killed_with_its_owner_leaves_no_list_and_no_store_after_cleanup(s3_env, s3, bucket,
                                                                                        mount_root):
    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not installed; `bash scripts/setup.sh` builds it")
    objects = []
    for i in range(3):
        etag = s3.put_object(Bucket=bucket, Key=f"data/{i}.bin", Body=os.urandom(1000))["ETag"]
        objects.append(ListedObject(f"{i}.bin", etag, 1000))
    listed = write_object_list(objects)
    mount_dir = str(mount_root / "m")
    code = textwrap.dedent(f"""
        import time
        from mountctl import Mount, MountSpec, resolve
        spec = MountSpec(uri="s3://{bucket}/data/", mount_dir={mount_dir!r}, objects={listed!r}, mount_timeout_s=60)
        with Mount(spec, settings=resolve()) as mount:
            print(mount.pid, flush=True)
            time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    program = None
    try:
        line = owner.stdout.readline()  # type: ignore[union-attr]
        assert line.strip().isdigit(), "the list mount did not come up"
        program = psutil.Process(int(line))
        stores = glob.glob(os.path.join(os.environ.get("TMPDIR", "/tmp"), "mount-s3-manifest-*"))
        assert not stores, f"mount-s3's store of the list went to the shared temporary directory: {stores}"
        assert listed not in sweep_unused_lists(min_age_s=0), "a list a running mount-s3 names was removed"
        for process in (owner, program):  # the whole run is killed, as a job scheduler's kill -9 would
            os.kill(process.pid, signal.SIGKILL)
        owner.wait(timeout=30)
        program.wait(timeout=30)
        old = time.time() - 2 * 3600
        os.utime(listed, (old, old))  # an hour old: the sweep leaves a list just written alone
        report = cleanup()
        assert f"unused object list {listed}" in report.cleared, report.cleared
        assert not os.path.exists(listed)
        assert any(entry.startswith("scratch dir ") for entry in report.cleared), report.cleared
        assert not [e for e in read_mount_table() if e.mount_point == mount_dir]
    finally:
        for process in (owner, program):
            if process is not None:
                try:
                    os.kill(process.pid, signal.SIGKILL)
                except (ProcessLookupError, psutil.Error):
                    pass
        subprocess.run(["fusermount3", "-uz", mount_dir], capture_output=True, timeout=15)
