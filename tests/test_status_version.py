"""``mountctl status`` names the mount program's version as it was recorded at mount time, and never runs a program
to learn it (issue 40, 2.1).

It used to run ``/proc/<pid>/exe --version`` with the pid the registry names for each mount-s3 row: a record whose
supervisor died leaves a pid that the kernel may hand to any other process, and status (as root) then ran that
process's binary.  Real processes and the real registry and command line throughout; the stale record is written
by hand, since the one thing no test can produce on demand is the kernel handing a dead mount's pid to another
program.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

from mountctl import paths
from mountctl.mounts.backends import BACKENDS
from mountctl.mounts.spec import MountSpec
from mountctl.processes import process_identity
from mountctl.shared import acquire
from mountctl.shared.registry import MountRecord, Registry

from conftest import missing, require_fuse

MOUNTCTL = [sys.executable, "-m", "mountctl"]


def _status(env: dict[str, str]) -> tuple[list[dict], str]:
    rows = json.loads(subprocess.run(MOUNTCTL + ["status", "--json"], env=env, capture_output=True, text=True,
                                     timeout=60, check=True).stdout)["mounts"]
    text = subprocess.run(MOUNTCTL + ["status"], env=env, capture_output=True, text=True, timeout=60,
                          check=True).stdout
    return rows, text


def test_status_never_runs_the_binary_of_a_process_that_now_holds_a_stale_records_pid(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("MOUNTCTL_HOME", str(home))
    # A supervisor that has died (its process ended), as a SIGKILLed one leaves its record behind.
    gone = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    dead_supervisor = process_identity(gone.pid)
    gone.communicate(timeout=30)
    # The record's program pid now belongs to another program: a copy of a real binary, so that running it with
    # --version answers with its own words (GNU sleep says "sleep (GNU coreutils) ...").
    other = tmp_path / "someone-elses-program"
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", other)
    holder = subprocess.Popen([str(other), "120"])
    try:
        mount_dir = str(tmp_path / "m")
        Registry(paths.registry_dir()).write(MountRecord(
            uri="s3://bucket/", mount_dir=mount_dir, spec={"uri": "s3://bucket/", "mount_dir": mount_dir}, identity={},
            state="mounted", backend="mount-s3", since=time.time(), supervisor=dead_supervisor,
            program_pid=holder.pid))
        rows, text = _status(dict(os.environ))
        assert [row["program_version"] for row in rows] == ["unknown"], rows
        assert "coreutils" not in text and "backend=mount-s3 (unknown)" in text, text
        print(f"\n[stale record] {text.splitlines()[0]}")
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_the_version_is_the_one_recorded_when_the_program_was_started(s3_env, bucket, mount_root, tmp_path,
                                                                      monkeypatch):
    """A real mount-s3 mount: its record holds the version line of the binary it runs, and status shows that."""
    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not installed; `bash scripts/setup.sh` builds it")
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path / "home"))
    mount_dir = str(mount_root / "m")
    handle = acquire(MountSpec(uri=f"s3://{bucket}/", mount_dir=mount_dir, backend="mount-s3"), watchdog=False)
    try:
        record = Registry().read(mount_dir)
        assert record is not None and record.program_pid
        executable = os.readlink(f"/proc/{record.program_pid}/exe")
        expected = BACKENDS["mount-s3"].version(executable)
        assert record.program_version == expected and "unknown" not in expected
        rows, text = _status(dict(os.environ))
        assert [row["program_version"] for row in rows] == [expected]
        assert f"backend=mount-s3 ({expected})" in text
    finally:
        handle.release()


def test_a_record_without_a_version_reads_as_unknown():
    """A record written before the field existed (an older mountctl's supervisor) has no version: 'unknown'."""
    record = MountRecord.from_json({"uri": "s3://b/", "mount_dir": "/m", "spec": {}, "identity": {},
                                    "backend": "mount-s3"})
    assert record.program_version == ""
    from mountctl.observability.metrics import record_figures

    assert record_figures(record)["program_version"] == "unknown"
