"""mountctl's own mount-s3, run by hand without --foreground (background mode), against the suite's SeaweedFS.

The command returns once a daemon of its own has mounted, and a mount never outlives a command that did not
report it: interrupted, killed or out of time while the daemon starts, it leaves no mount and no process.
mountctl itself always runs mount-s3 in the foreground (tests/test_mount_backends.py); these are the cases a
person at a terminal meets.  Real mount-s3, real FUSE, real SeaweedFS; the one stand-in is a TCP listener that
never answers, the only way to hold the daemon in its bucket check on demand (a wedged store looks the same).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from mountctl.mounts.backends import describe_mount_s3
from mountctl.mounts.mounttable import read_mount_table
from mountctl.programs import bundled_mount_s3
from mountctl.s3 import S3Settings

from conftest import missing, require_fuse

CRATE = Path(__file__).resolve().parent.parent / "mount-s3"
START_TIMEOUT_S = 60  # the command's own bound is 30 s, plus the stop of a daemon that will not mount
CONTENT = os.urandom(256 * 1024)


@pytest.fixture
def program() -> str:
    require_fuse()
    path = bundled_mount_s3()
    if path is None:
        missing("mountctl's mount-s3 is not built; `bash scripts/setup.sh` builds it")
    return path


def command(program: str, bucket: str, mount_dir: Path, settings: S3Settings, *extra: str) -> list[str]:
    """A background mount of ``bucket`` as a person would type it (no --foreground), off AWS."""
    argv = [program, bucket, str(mount_dir), "--region", settings.region, "--read-only",
            "--endpoint-url", settings.endpoint_url or "", "--force-path-style", "--upload-checksums", "off"]
    if not settings.has_credentials:
        argv.append("--no-sign-request")
    return argv + list(extra)


def mounts_at(path: Path) -> list[str]:
    return [e.mount_point for e in read_mount_table() if e.is_fuse and e.mount_point == str(path)]


def daemons_for(path: Path) -> list[psutil.Process]:
    """Live mount-s3 processes whose command line names ``path`` (the daemon's is the command's own)."""
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if (process.info["name"] == "mount-s3" and str(path) in (process.info["cmdline"] or [])
                    and process.status() != psutil.STATUS_ZOMBIE):
                found.append(process)
    return found


def wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout_s} s")
        time.sleep(0.1)


def unmount_and_wait(path: Path) -> None:
    """As a person ends a background mount: fusermount3 -u; the daemon then exits on its own."""
    subprocess.run(["fusermount3", "-u", str(path)], check=True, timeout=30)
    wait_until(lambda: not daemons_for(path), 20, "the daemon did not exit after its unmount")


@pytest.fixture
def silent_store() -> Iterator[tuple[socket.socket, str]]:
    """A TCP listener that never accepts: the kernel completes each connection and nothing ever answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield listener, f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def wait_for_a_connection(listener: socket.socket, timeout_s: float = 20) -> None:
    """Returns once someone connected (the daemon's bucket check has begun)."""
    readable, _, _ = select.select([listener], [], [], timeout_s)
    assert readable, f"mount-s3 did not connect to the store within {timeout_s} s"


def test_background_mount_returns_once_mounted_and_serves_reads(program, s3_env, s3, bucket, mount_root):
    s3.put_object(Bucket=bucket, Key="data/blob.bin", Body=CONTENT)
    mount_dir = mount_root / "m"
    mount_dir.mkdir()
    started = time.monotonic()
    # capture_output: the command's pipes end with the command, though its daemon lives on.
    done = subprocess.run(command(program, bucket, mount_dir, s3_env), capture_output=True, text=True,
                          env=s3_env.child_env(), timeout=START_TIMEOUT_S, stdin=subprocess.DEVNULL)
    print(f"\n[background mount] returned in {time.monotonic() - started:.2f} s: {done.stdout.strip()}")
    try:
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"bucket {bucket} is mounted at {mount_dir}\n"
        assert "error" not in done.stderr and "panicked" not in done.stderr, done.stderr  # libfuse may warn
        assert mounts_at(mount_dir) == [str(mount_dir)]
        assert (mount_dir / "data" / "blob.bin").read_bytes() == CONTENT
        [daemon] = daemons_for(mount_dir)
        assert os.getsid(daemon.pid) == daemon.pid, "the daemon runs in a session of its own"
    finally:
        unmount_and_wait(mount_dir)
    assert mounts_at(mount_dir) == []


def test_a_bucket_that_does_not_exist_fails_in_one_line_and_leaves_nothing(program, s3_env, mount_root):
    mount_dir = mount_root / "m"
    mount_dir.mkdir()
    done = subprocess.run(command(program, "no-such-bucket-here", mount_dir, s3_env), capture_output=True,
                          text=True, env=s3_env.child_env(), timeout=START_TIMEOUT_S, stdin=subprocess.DEVNULL)
    print(f"\n[bad bucket] exit {done.returncode}: {done.stderr.strip()}")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("mount-s3: error: cannot reach bucket no-such-bucket-here")
    assert done.stderr.count("\n") == 1, done.stderr
    assert mounts_at(mount_dir) == [] and daemons_for(mount_dir) == []


def test_a_refused_object_list_exits_2_naming_the_line_and_leaves_nothing(program, s3_env, bucket, mount_root,
                                                                         tmp_path):
    objects = tmp_path / "objects.tsv"
    objects.write_text('shard-0.tar\t"e0"\t10\nshard-1.tar\t"e1"\t10\nshard-0.tar\t"e0"\t10\n')
    mount_dir = mount_root / "m"
    mount_dir.mkdir()
    done = subprocess.run(command(program, bucket, mount_dir, s3_env, "--manifest", str(objects)),
                          capture_output=True, text=True, env=s3_env.child_env(), timeout=START_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    print(f"\n[duplicate key] exit {done.returncode}: {done.stderr.strip()}")
    assert done.returncode == 2
    assert done.stderr == (f'mount-s3: object list {objects}, line 3: key "shard-0.tar" is listed again (first on '
                           'line 1); list each object once\n')
    assert mounts_at(mount_dir) == [] and daemons_for(mount_dir) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_a_command_ended_while_its_daemon_starts_leaves_no_mount_and_no_daemon(program, s3_env, bucket, mount_root,
                                                                             silent_store, sig):
    listener, endpoint = silent_store
    mount_dir = mount_root / "m"
    mount_dir.mkdir()
    argv = command(program, bucket, mount_dir, s3_env)
    argv[argv.index("--endpoint-url") + 1] = endpoint
    parent = subprocess.Popen(argv, env=s3_env.child_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        wait_for_a_connection(listener)
        [daemon] = [p for p in daemons_for(mount_dir) if p.pid != parent.pid]
        assert daemon.ppid() == parent.pid and os.getsid(daemon.pid) == daemon.pid
        parent.send_signal(sig)  # a Ctrl-C at a terminal reaches the command's group only: not the daemon's session
        assert parent.wait(timeout=10) == -sig
        started = time.monotonic()
        wait_until(lambda: not daemons_for(mount_dir), 10, "the daemon did not end after its command")
        print(f"\n[{sig.name} while starting] the daemon ended {time.monotonic() - started:.2f} s after its command")
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.communicate(timeout=10)
    assert mounts_at(mount_dir) == []


def test_a_command_killed_after_its_daemon_mounted_but_before_it_reported_leaves_no_mount(program, s3_env, bucket,
                                                                                        mount_root):
    """The command is held where it prints its ready line (its stdout a full pipe nobody reads): the daemon has
    mounted and said so, and waits for the command's answer, which a killed command never gives."""
    mount_dir = mount_root / "m"
    mount_dir.mkdir()
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write_end, b"x" * 65536)
    os.set_blocking(write_end, True)  # the flag belongs to the pipe, which the command shares
    try:
        parent = subprocess.Popen(command(program, bucket, mount_dir, s3_env), env=s3_env.child_env(),
                                  stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: mounts_at(mount_dir), 20, "the daemon did not mount")
            time.sleep(0.5)  # the command has its word by now, and is stuck printing
            assert parent.poll() is None, "the command should be held by its full stdout"
            parent.kill()
            parent.wait(timeout=10)
            killed = time.monotonic()
            wait_until(lambda: not mounts_at(mount_dir) and not daemons_for(mount_dir), 8,
                       "the daemon kept its mount after its command was killed")
            print(f"\n[killed before reporting] unmounted {time.monotonic() - killed:.2f} s after the kill")
        finally:
            if parent.poll() is None:
                parent.kill()
                parent.wait(timeout=10)
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.slow
def test_a_command_that_cannot_report_within_10_s_gets_no_mount_and_says_why(program, s3_env, bucket, mount_root):
    """Held printing its ready line for longer than the daemon waits for its answer (10 s), the command exits 1
    once it can go on, with the daemon's line: the daemon has undone its mount meanwhile."""
    mount_dir = mount_root / "m"
    mount_dir.mkdir()
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    held = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            held += os.write(write_end, b"x" * 65536)
    os.set_blocking(write_end, True)
    try:
        parent = subprocess.Popen(command(program, bucket, mount_dir, s3_env), env=s3_env.child_env(),
                                  stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: mounts_at(mount_dir), 20, "the daemon did not mount")
            wait_until(lambda: not mounts_at(mount_dir), 20, "the daemon kept a mount nobody reported")
            assert parent.poll() is None, "the command should still be held by its full stdout"
            drained = 0
            while drained < held:  # let the command print and go on
                drained += len(os.read(read_end, 65536))
            _, errors = parent.communicate(timeout=30)
            print(f"\n[command held past 10 s] exit {parent.returncode}: {errors.strip()}")
            assert parent.returncode == 1
            assert errors.endswith("mount-s3: error: the mount was undone: the command that started this mount did "
                                   "not answer within 10 s (was its output blocked?)\n"), errors
            assert not daemons_for(mount_dir)
        finally:
            if parent.poll() is None:
                parent.kill()
                parent.communicate(timeout=10)
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.slow
def test_a_daemon_that_cannot_mount_within_30_s_is_stopped_and_leaves_nothing(program, s3_env, bucket, mount_root,
                                                                            silent_store):
    listener, endpoint = silent_store
    mount_dir = mount_root / "m"
    mount_dir.mkdir()
    argv = command(program, bucket, mount_dir, s3_env)
    argv[argv.index("--endpoint-url") + 1] = endpoint
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=s3_env.child_env(), timeout=START_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    took = time.monotonic() - started
    print(f"\n[silent store] exit {done.returncode} after {took:.1f} s: {done.stderr.strip()}")
    assert done.returncode == 1 and 30 <= took < START_TIMEOUT_S
    assert re.fullmatch(r"mount-s3: error: no mount within 30 s: the mount process was still checking bucket \S+ "
                        r"at http://127\.0\.0\.1:\d+ \(is the endpoint answering\?\); it has stopped and nothing is "
                        r"mounted; run with --foreground to see its log\n", done.stderr), done.stderr
    assert mounts_at(mount_dir) == [] and daemons_for(mount_dir) == []


def test_a_closed_stdout_does_not_stop_a_background_mount(program, s3_env, s3, bucket, mount_root):
    """The command's ready line once panicked on a closed pipe (the mount stood, the command exited 101)."""
    s3.put_object(Bucket=bucket, Key="blob.bin", Body=CONTENT)
    mount_dir = mount_root / "m"
    mount_dir.mkdir()
    read_end, write_end = os.pipe()
    os.close(read_end)  # whoever reads the command's output has gone
    try:
        done = subprocess.run(command(program, bucket, mount_dir, s3_env), stdout=write_end,
                              stderr=subprocess.PIPE, text=True, env=s3_env.child_env(), timeout=START_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    finally:
        os.close(write_end)
    try:
        assert done.returncode == 0, done.stderr
        assert "panicked" not in done.stderr
        assert (mount_dir / "blob.bin").read_bytes() == CONTENT
    finally:
        unmount_and_wait(mount_dir)


def test_a_closed_stdout_does_not_stop_a_foreground_mount(program, s3_env, s3, bucket, mount_root):
    s3.put_object(Bucket=bucket, Key="blob.bin", Body=CONTENT)
    mount_dir = mount_root / "m"
    mount_dir.mkdir()
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        mount = subprocess.Popen(command(program, bucket, mount_dir, s3_env, "--foreground"), stdout=write_end,
                                 stderr=subprocess.PIPE, text=True, env=s3_env.child_env(), stdin=subprocess.DEVNULL)
    finally:
        os.close(write_end)
    try:
        wait_until(lambda: mounts_at(mount_dir) or mount.poll() is not None, 30, "mount-s3 did not mount")
        assert mount.poll() is None, mount.communicate(timeout=10)[1]
        assert (mount_dir / "blob.bin").read_bytes() == CONTENT
        mount.terminate()  # SIGTERM: unmount, exit 0
        _, errors = mount.communicate(timeout=30)
        assert mount.returncode == 0 and "panicked" not in errors, errors
        assert mounts_at(mount_dir) == []
    finally:
        if mount.poll() is None:
            mount.kill()
            mount.communicate(timeout=10)


def test_a_huge_cache_size_is_refused_in_one_line(program, tmp_path):
    done = subprocess.run([program, "b", str(tmp_path), "--cache", str(tmp_path), "--max-cache-size",
                           "17592186044416"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("mount-s3: invalid value '17592186044416' for '--max-cache-size <MAX_CACHE_SIZE>': "
                                  "17592186044416 MiB is more than this machine can address")
    assert done.stderr.count("\n") == 1, done.stderr


def test_version_names_the_crates_version_cargo_lock_pins(program):
    locked = re.search(r'name = "mountpoint-s3-fs"\nversion = "([^"]+)"', (CRATE / "Cargo.lock").read_text())
    assert locked, "mount-s3/Cargo.lock names no mountpoint-s3-fs"
    line = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    assert line.startswith(f"mount-s3 built from mountpoint-s3-fs {locked.group(1)} (mountctl front end ")
    assert describe_mount_s3(line) == f"mount-s3 built from mountpoint-s3-fs {locked.group(1)}"
