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
import tempfile
import textwrap
import time

import psutil

from mountctl import ListedObject, write_object_list
from mountctl.cli import main
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


HOUR = 3600.0


def test_a_list_whose_program_was_killed_survives_the_sweep_while_its_supervisor_remounts(s3_env, s3, bucket,
                                                                                          mount_root, tmp_path,
                                                                                          monkeypatch):
    """Between a killed mount-s3 and the watchdog's remount no program names the list, yet the remount reads it
    again: the supervisor holds it open while the mount lives, so a sweep then (cleanup, or another mount's start)
    leaves it. Real: `mountctl mount --objects`, its supervisor frozen with SIGSTOP in that window, mount-s3
    killed with SIGKILL, cleanup, then the supervisor let go. Once no mount uses it, the next mount sweeps it."""
    from mountctl.shared import Registry

    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not installed; `bash scripts/setup.sh` builds it")
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path / "home"))
    etag = s3.put_object(Bucket=bucket, Key="data/a.bin", Body=b"a" * 1000)["ETag"]
    listed = write_object_list([ListedObject("a.bin", etag, 1000)])
    mount_dir = str(mount_root / "m")
    env = dict(os.environ)
    cli = [sys.executable, "-m", "mountctl"]
    done = subprocess.run(cli + ["mount", f"s3://{bucket}/data/", mount_dir, "--objects", listed], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    try:
        old = time.time() - 2 * HOUR
        os.utime(listed, (old, old))  # written long ago: only its use keeps it
        record = Registry().read(mount_dir)
        assert record is not None and record.supervisor and record.program_pid
        supervisor, program = psutil.Process(record.supervisor["pid"]), psutil.Process(record.program_pid)
        supervisor.send_signal(signal.SIGSTOP)
        try:
            program.send_signal(signal.SIGKILL)
            deadline = time.monotonic() + 30  # a zombie until its frozen parent reaps it
            while time.monotonic() < deadline:
                try:
                    if program.status() == psutil.STATUS_ZOMBIE:
                        break
                except psutil.NoSuchProcess:
                    break
                time.sleep(0.05)
            report = cleanup()
            assert os.path.exists(listed), f"the list of a mount being remounted was swept: {report.cleared}"
        finally:
            supervisor.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            now = Registry().read(mount_dir)
            if now is not None and now.program_pid not in (None, program.pid) and now.state == "mounted":
                break
            time.sleep(0.2)
        with open(os.path.join(mount_dir, "data", "a.bin"), "rb") as f:
            assert f.read() == b"a" * 1000, "the remount does not serve the list"
    finally:
        subprocess.run(cli + ["unmount", mount_dir], env=env, capture_output=True, timeout=120)
    os.utime(listed, (old, old))
    etag = s3.put_object(Bucket=bucket, Key="data/b.bin", Body=b"b" * 10)["ETag"]
    other = write_object_list([ListedObject("b.bin", etag, 10)])
    from mountctl import Mount, MountSpec

    with Mount(MountSpec(uri=f"s3://{bucket}/data/", mount_dir=str(mount_root / "next"), objects=other)):
        assert not os.path.exists(listed), "the next mount's start did not sweep a list no mount uses"

def _stores(*roots: str) -> list[str]:
    """Every manifest store (mount-s3's SQLite copy of a list) under ``roots``."""
    return sorted(path for root in roots for path in glob.glob(os.path.join(root, "**", "mount-s3-manifest-*"),
                                                              recursive=True))


def test_stores_an_older_mountctl_left_in_the_temp_dir_are_swept_unless_in_use(s3_env, s3, bucket, mount_root,
                                                                                tmp_path, monkeypatch, capsys):
    """Before mountctl gave mount-s3 a temporary directory of its mount's own, the stores went to ``$TMPDIR``: two
    real mount-s3 list mounts run that way (their own command line, ``TMPDIR`` the temp dir), one killed with
    SIGKILL; ``mountctl cleanup`` removes its store and keeps the live one's (open in the program)."""
    from mountctl.mounts.backends import MountS3
    from mountctl.mounts.fusectl import force_clear
    from mountctl.mounts.spec import MountSpec
    from mountctl.teardown import spawn_with_parent_death_signal

    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not built; `bash scripts/setup.sh` builds it")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    from mountctl.local_s3 import orphans

    scoped = orphans.stop_orphans
    monkeypatch.setattr(orphans, "stop_orphans", lambda roots=None: scoped([str(tmp_path)]))
    s3.put_object(Bucket=bucket, Key="imgs/a.bin", Body=b"x" * 100)
    head = s3.head_object(Bucket=bucket, Key="imgs/a.bin")
    objects = write_object_list([ListedObject("a.bin", head["ETag"], 100)])
    programs = []
    try:
        for name in ("killed", "live"):
            spec = MountSpec(uri=f"s3://{bucket}/imgs/", mount_dir=str(mount_root / name), objects=objects)
            os.makedirs(spec.mount_dir)
            workdir = tmp_path / f"work-{name}"
            (workdir / "logs").mkdir(parents=True)
            backend = MountS3()
            env = {**backend.environment(spec, s3_env, str(workdir)), "TMPDIR": str(tmp)}  # as before the change
            programs.append(spawn_with_parent_death_signal(backend.command(spec, s3_env, str(workdir)), env=env,
                                                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                           stderr=subprocess.DEVNULL, start_new_session=True))
            deadline = time.monotonic() + 30
            while not os.path.exists(os.path.join(spec.data_dir, "a.bin")) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert os.path.exists(os.path.join(spec.data_dir, "a.bin")), f"mount-s3 did not mount {name}"
        stores = _stores(str(tmp))
        assert len(stores) == 2, stores
        programs[0].kill()
        programs[0].wait(timeout=30)
        force_clear(str(mount_root / "killed"))
        for store in stores:  # older than the grace that spares a store its program is still opening
            os.utime(store, (time.time() - HOUR, time.time() - HOUR))
        assert main(["cleanup"]) == 0
        out = capsys.readouterr().out
        print(f"\n[cleanup of the temp dir]\n{out}")
        left = _stores(str(tmp))
        assert len(left) == 1 and f"mount-s3 list store {sorted(set(stores) - set(left))[0]}" in out, (left, out)
        live_store = left[0]
        assert psutil.Process(programs[1].pid).open_files() and any(
            f.path.startswith(live_store) for f in psutil.Process(programs[1].pid).open_files()), live_store
    finally:
        for program in programs:
            if program.poll() is None:
                program.terminate()
                program.wait(timeout=30)
        for name in ("killed", "live"):
            force_clear(str(mount_root / name))
