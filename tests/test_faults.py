"""Fault injection against real mounts: each scenario bounded in time, each asserting what users see.

The recovery figures these tests measure are printed (run with -s to see them).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

import mountctl
from mountctl import Mount, MountSpec, open_resilient
from mountctl.local_s3.server import LocalS3
from mountctl.mounts.mounttable import find_mount
from mountctl.s3 import client as s3_client
from mountctl.shared.client import stop_bound_s

from conftest import make_bucket, mount_programs, require_fuse

FILE_SIZE = 64 * 1024 * 1024
RESTART_SIZE = 100 * 1024 * 1024


@pytest.fixture(scope="module")
def big_object(local_s3):
    s3 = s3_client(local_s3.settings())
    bucket = make_bucket(s3, "faults")
    body = os.urandom(FILE_SIZE)
    s3.put_object(Bucket=bucket, Key="big.bin", Body=body)
    s3.put_object(Bucket=bucket, Key="k.txt", Body=b"shared")
    return bucket, hashlib.sha256(body).hexdigest()


def _wait_for(predicate, timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{what} did not happen within {timeout_s}s")
        time.sleep(0.05)
    return time.monotonic() - started


def _read_rest(f, digest) -> int:
    count = 0
    for block in iter(lambda: f.read(1 << 20), b""):
        digest.update(block)
        count += len(block)
    return count


def test_daemon_killed_during_read_is_remounted_and_reader_gets_every_byte(backend, s3_env, big_object, mount_root):
    bucket, expected = big_object
    spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend=backend)
    with Mount(spec, watchdog=True, watchdog_interval_s=0.5) as m:
        digest = hashlib.sha256()
        with open_resilient(os.path.join(m.path, "big.bin")) as f:
            head = f.read(8 << 20)
            digest.update(head)
            first_pid = m.pid
            os.kill(first_pid, signal.SIGKILL)
            killed = time.monotonic()
            delivered = len(head) + _read_rest(f, digest)
        recovered = _wait_for(lambda: m.health().state == "healthy" and m.pid != first_pid, 30, "remount")
        assert m.restarts >= 1
        assert delivered == FILE_SIZE
        assert digest.hexdigest() == expected
        remounted = [e for e in m.events if e["event"] == "remounted"]
        assert remounted, m.events
        print(f"\n[kill -9 {backend}] bytes expected {FILE_SIZE} delivered {delivered}; "
              f"service back {time.monotonic() - killed - recovered:.2f}s after the kill ({remounted[0]['detail']})")


def test_stopped_daemon_is_reported_unresponsive_within_bound_then_recovered(backend, s3_env, big_object, mount_root):
    bucket, _ = big_object
    spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend=backend, probe_timeout_s=2.0)
    with Mount(spec) as m:
        os.kill(m.pid, signal.SIGSTOP)
        started = time.monotonic()
        health = m.health()
        elapsed = time.monotonic() - started
        assert health.state == "unresponsive", health
        assert elapsed < 3.0
        started = time.monotonic()
        m.recover()
        with open(os.path.join(m.path, "k.txt"), "rb") as f:
            assert f.read() == b"shared"
        assert m.health().state == "healthy"
        print(f"\n[SIGSTOP {backend}] health answered in {elapsed:.2f}s; recovered in {time.monotonic() - started:.2f}s")


def test_watchdog_recovers_a_stopped_daemon_by_itself(s3_env, big_object, mount_root):
    require_fuse()
    bucket, _ = big_object
    spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend="rclone", probe_timeout_s=1.0)
    with Mount(spec, watchdog=True, watchdog_interval_s=0.5) as m:
        stopped = m.pid
        os.kill(stopped, signal.SIGSTOP)
        took = _wait_for(lambda: any(e["event"] == "remounted" for e in m.events), 30, "watchdog recovery")
        assert m.pid != stopped and m.health().state == "healthy"
        assert not psutil.pid_exists(stopped) or psutil.Process(stopped).status() == psutil.STATUS_ZOMBIE
        assert [e["event"] for e in m.events][-2:] == ["unresponsive", "remounted"]
        print(f"\n[SIGSTOP + watchdog] healthy again {took:.2f}s after the stop")


def test_status_answers_within_bound_when_daemon_is_stopped(s3_env, big_object, mount_root):
    require_fuse()
    bucket, _ = big_object
    spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend="rclone")
    handle = mountctl.shared.acquire(spec, watchdog=False)
    try:
        os.kill(handle.pid, signal.SIGSTOP)
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "mountctl", "status", "--json"], capture_output=True, text=True,
                              timeout=20)
        elapsed = time.monotonic() - started
        mounts = json.loads(done.stdout)["mounts"]
        assert [m["health"]["state"] for m in mounts] == ["unresponsive"]
        assert elapsed < 5.0, f"status took {elapsed:.1f}s"
    finally:
        os.kill(handle.pid, signal.SIGCONT)
        handle.release()


READER = textwrap.dedent("""
    import hashlib, sys, mountctl
    digest, count = hashlib.sha256(), 0
    with mountctl.open_resilient(sys.argv[1]) as f:
        head = f.read(4 << 20)
        digest.update(head)
        count += len(head)
        print("started", flush=True)
        sys.stdin.readline()
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
            count += len(block)
    print(count, digest.hexdigest(), flush=True)
""")


def test_reads_resume_after_s3_server_restart(backend, tmp_path, mount_root, monkeypatch):
    # The reader is a separate process, as a training job is: a process holding files open on a
    # FUSE mount cannot fork/exec while the daemon is stuck (each close-on-exec sends FLUSH).
    server = LocalS3(str(tmp_path / "own-s3"))
    server.start(buckets=("restart",))
    reader = None
    try:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        body = os.urandom(RESTART_SIZE)  # past rclone's first 64 MiB read chunk: the rest needs the server
        s3_client(server.settings()).put_object(Bucket="restart", Key="big.bin", Body=body)
        spec = MountSpec(uri="s3://restart/", mount_dir=str(mount_root / "m"), backend=backend)
        with Mount(spec, watchdog=True, watchdog_interval_s=1.0) as m:
            reader = subprocess.Popen([sys.executable, "-c", READER, os.path.join(m.path, "big.bin")],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert reader.stdout.readline().strip() == "started"
            endpoint = server.status().endpoint_url
            server.stop()
            reader.stdin.write("go\n")
            reader.stdin.flush()
            time.sleep(1.0)
            assert server.start(buckets=("restart",)).endpoint_url == endpoint
            started = time.monotonic()
            out, _ = reader.communicate(timeout=150)
            count, digest = out.split()
            assert int(count) == RESTART_SIZE
            assert digest == hashlib.sha256(body).hexdigest()
            print(f"\n[S3 restart {backend}] bytes expected {RESTART_SIZE} delivered {count}; "
                  f"reader done {time.monotonic() - started:.2f}s after the server was back; remounts {m.restarts}")
    finally:
        if reader is not None and reader.poll() is None:
            reader.kill()
        server.stop()


OWNER = textwrap.dedent("""
    import sys, time, mountctl
    uri, directory, shared = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    with mountctl.mount(uri, directory, backend="rclone", shared=shared) as m:
        print("ready", m.pid, flush=True)
        time.sleep(600)
""")


def _default_hangup() -> None:
    """The owner starts as from a terminal, with SIGHUP at its default: an ignored SIGHUP (a suite run under
    nohup, or one a library in this worker set) is inherited across exec, and mountctl rightly leaves it ignored,
    so the SIGHUP case waited out its timeout in two full CI runs of this session."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _start_owner(uri: str, directory: str, shared: bool) -> tuple[subprocess.Popen, int]:
    owner = subprocess.Popen([sys.executable, "-c", OWNER, uri, directory, "1" if shared else "0"],
                             stdout=subprocess.PIPE, text=True, preexec_fn=_default_hangup)
    line = owner.stdout.readline()
    assert line.startswith("ready"), f"owner did not mount: {line!r}"
    return owner, int(line.split()[1])


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "own"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["TERM", "INT", "HUP"])
def test_owner_signal_unmounts_and_stops_children(signum, shared, s3_env, big_object, mount_root):
    require_fuse()
    directory = str(mount_root / "m")
    owner, daemon = _start_owner(f"s3://{big_object[0]}/", directory, shared)
    try:
        owner.send_signal(signum)  # SIGINT's KeyboardInterrupt traceback on stderr is expected
        # The owner's release waits for the teardown as long as the product allows it (stop_bound_s: the unmount,
        # a busy mount's grace, the program's exit); 15 s, less than that, ran out once in CI on a loaded machine.
        owner.wait(timeout=stop_bound_s(MountSpec(uri=f"s3://{big_object[0]}/", mount_dir=directory)) + 5)
    finally:
        if owner.poll() is None:  # it did not stop: never leave it holding its mount for the tests after this one
            owner.kill()
            owner.wait(timeout=10)
    took = _wait_for(lambda: find_mount(directory) is None and _gone(daemon), 10, "teardown after the signal")
    assert [p for p in mount_programs() if directory in " ".join(p.cmdline())] == []
    print(f"\n[{signal.Signals(signum).name} owner, shared={shared}] nothing left {took:.2f}s after the owner exited")


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "own"])
def test_owner_sigkill_leaves_nothing_after_next_start(shared, s3_env, big_object, mount_root):
    require_fuse()
    directory = str(mount_root / "m")
    owner, daemon = _start_owner(f"s3://{big_object[0]}/", directory, shared)
    owner.kill()
    owner.wait(timeout=5)
    # The kernel's parent-death signal (own) or the supervisor's holder check (shared) stops the daemon.
    took = _wait_for(lambda: _gone(daemon), 10, "daemon exit after the owner's SIGKILL")
    spec = MountSpec(uri=f"s3://{big_object[0]}/", mount_dir=directory, backend="rclone")
    with Mount(spec) as again:  # the next start clears whatever is left
        with open(os.path.join(again.path, "k.txt"), "rb") as f:
            assert f.read() == b"shared"
    run_dir = os.path.join(os.environ["MOUNTCTL_HOME"], "run")
    leftovers = [n for n in os.listdir(run_dir) if n.startswith("mount-")]
    assert leftovers == []
    print(f"\n[SIGKILL owner, shared={shared}] daemon gone {took:.2f}s after the kill")


RACER = textwrap.dedent("""
    import os, sys, time, mountctl
    uri, directory, hold = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with mountctl.mount(uri, directory, backend="rclone") as m:
        with open(os.path.join(m.path, "k.txt")) as f:
            print("ready", m.pid, f.read(), flush=True)
        time.sleep(hold)
""")


def test_eight_processes_share_one_daemon_and_the_last_unmounts(s3_env, big_object, mount_root):
    require_fuse()
    directory = str(mount_root / "m")
    racers = [subprocess.Popen([sys.executable, "-c", RACER, f"s3://{big_object[0]}/", directory, str(1 + i * 0.3)],
                               stdout=subprocess.PIPE, text=True) for i in range(8)]
    lines = [r.stdout.readline().split() for r in racers]
    assert all(line[0] == "ready" and line[2] == "shared" for line in lines), lines
    assert len({line[1] for line in lines}) == 1, f"more than one daemon: {lines}"
    daemons = [p for p in mount_programs() if p.info["name"] == "rclone" and directory in " ".join(p.cmdline())]
    assert len(daemons) == 1
    for racer in racers[:-1]:
        racer.wait(timeout=30)
    assert find_mount(directory) is not None, "unmounted while a user was still holding it"
    racers[-1].wait(timeout=30)
    took = _wait_for(lambda: find_mount(directory) is None and _gone(int(lines[0][1])), 15, "last user's unmount")
    print(f"\n[8 racers] one daemon; unmounted {took:.2f}s after the last user left")


def test_busy_mount_is_detached_lazily_after_the_grace_period(s3_env, big_object, mount_root, caplog):
    require_fuse()
    spec = MountSpec(uri=f"s3://{big_object[0]}/", mount_dir=str(mount_root / "m"), backend="rclone", busy_grace_s=1.0)
    m = Mount(spec).start()
    busy = open(os.path.join(m.path, "k.txt"), "rb")
    try:
        started = time.monotonic()
        with caplog.at_level("WARNING", logger="mountctl"):
            m.stop()
        elapsed = time.monotonic() - started
    finally:
        with contextlib.suppress(OSError):  # its mount is gone: close may report ENOTCONN
            busy.close()
    assert find_mount(spec.mount_dir) is None
    assert 1.0 <= elapsed < 15
    assert "still busy" in caplog.text


def test_no_secret_in_command_lines_logs_status_or_files(backend, s3_env, big_object, mount_root):
    secret = s3_env.secret_access_key
    directory = str(mount_root / "m")
    spec = MountSpec(uri=f"s3://{big_object[0]}/", mount_dir=directory, backend=backend)
    handle = mountctl.shared.acquire(spec)
    try:
        record = handle.record()
        for pid in (handle.pid, record.supervisor["pid"]):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                assert secret.encode() not in f.read()
        workdir = os.path.dirname(os.path.dirname(handle.log_path))
        assert os.stat(workdir).st_mode & 0o777 == 0o700
        for root, _, files in os.walk(workdir):
            for name in files:
                path = os.path.join(root, name)
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue  # rclone's remote-control socket: nothing to read, nothing stored
                with open(path, "rb") as f:
                    content = f.read()
                if name == "s3fs.passwd":
                    assert os.stat(path).st_mode & 0o777 == 0o600
                else:
                    assert secret.encode() not in content, f"secret found in {path}"
        status = subprocess.run([sys.executable, "-m", "mountctl", "status", "--json"], capture_output=True, text=True,
                                timeout=30)
        assert secret not in status.stdout + status.stderr
        with open(handle._registry.record_path(directory)) as f:
            assert secret not in f.read()
    finally:
        handle.release()
    assert not os.path.exists(workdir), "the password file and logs must go with the mount"


def test_no_shell_true_anywhere():
    root = os.path.join(os.path.dirname(__file__), "..", "mountctl")
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name)) as f:
                    assert "shell=True" not in f.read(), name


CRASHER = textwrap.dedent("""
    import os, signal, sys, mountctl
    m = mountctl.Mount(mountctl.MountSpec(uri=sys.argv[1], mount_dir=sys.argv[2], backend="rclone")).start()
    os.kill(m.pid, signal.SIGKILL)   # the daemon dies ...
    m._child.wait()
    os._exit(0)                      # ... and so does its owner, without any cleanup
""")


def _leave_a_dead_mount(uri: str, directory: str) -> None:
    subprocess.run([sys.executable, "-c", CRASHER, uri, directory], check=True, timeout=60)
    entry = find_mount(directory)
    assert entry is not None, "the crash should have left the mount table entry behind"
    with pytest.raises(OSError) as info:
        os.listdir(directory)
    assert info.value.errno == 107  # ENOTCONN


def test_stale_mount_at_target_is_cleared_before_mounting(s3_env, big_object, mount_root):
    require_fuse()
    directory = str(mount_root / "m")
    _leave_a_dead_mount(f"s3://{big_object[0]}/", directory)
    with Mount(MountSpec(uri=f"s3://{big_object[0]}/", mount_dir=directory, backend="s3fs")) as m:
        assert sorted(os.listdir(m.path)) == ["big.bin", "k.txt"]
    assert find_mount(directory) is None


def test_cleanup_command_clears_stale_mounts_and_scratch_dirs(s3_env, big_object, mount_root):
    require_fuse()
    directory = str(mount_root / "m")
    _leave_a_dead_mount(f"s3://{big_object[0]}/", directory)
    done = subprocess.run([sys.executable, "-m", "mountctl", "cleanup", "--json"], capture_output=True, text=True,
                          timeout=60, check=True)
    cleared = json.loads(done.stdout)["cleared"]
    assert f"stale mount {directory}" in cleared
    assert any(line.startswith("scratch dir") for line in cleared)
    assert find_mount(directory) is None


def test_own_mount_over_a_managed_directory_is_refused_naming_the_owner(s3_env, big_object, mount_root):
    require_fuse()
    spec = MountSpec(uri=f"s3://{big_object[0]}/", mount_dir=str(mount_root / "m"), backend="rclone")
    with mountctl.shared.acquire(spec):
        with pytest.raises(mountctl.AlreadyMounted, match="managed by mountctl for s3://faults/"):
            Mount(spec).start()


def test_supervisor_sigkill_is_reported_and_the_next_mount_takes_over(s3_env, big_object, mount_root):
    require_fuse()
    directory = str(mount_root / "m")
    spec = MountSpec(uri=f"s3://{big_object[0]}/", mount_dir=directory, backend="rclone")
    first = mountctl.shared.acquire(spec, pinned=True)  # as `mountctl mount` does: no holder process
    supervisor, daemon = first.record().supervisor["pid"], first.pid
    os.kill(supervisor, signal.SIGKILL)
    took = _wait_for(lambda: _gone(daemon), 10, "the mount program's exit after its supervisor's SIGKILL")
    status = json.loads(subprocess.run([sys.executable, "-m", "mountctl", "status", "--json"], capture_output=True,
                                       text=True, timeout=30, check=True).stdout)["mounts"]
    assert [(m["dir"], m["state"]) for m in status] == [(directory, "abandoned")]
    with mountctl.mount(spec.uri, directory, backend="rclone") as again:
        with open(os.path.join(again.path, "k.txt"), "rb") as f:
            assert f.read() == b"shared"
    assert find_mount(directory) is None
    print(f"\n[SIGKILL supervisor] mount program gone {took:.2f}s after; next mount took over")
