"""Busy is not wedged: what a program receives from its store, reads from its disk or spends on the CPU tells a
working daemon from a wedged one.

Real processes stand for the mount program (a reader of a real TCP connection, a reader of a file on this
machine's disk, a busy loop, a sleeper, a SIGSTOPped child, one that answers a few requests on a pipe as a FUSE
program answers the probe's): what is measured is the kernel's accounting of them, the same for any program.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

from mountctl.mounts.health import SERVING_STATES, Health
from mountctl.mounts.progress import ProgressMark, made_progress, progress_evidence, progress_mark, received_since

# Each child says "ready" on stderr once its interpreter has started, and only then does what it stands for,
# so that no mark counts the start-up as progress.
_READY = "import os, time\nos.write(2, b'ready\\n')\n"
_SPIN = _READY + "n = 0\nwhile True:\n    n += 1\n"
# Reads a file on the local disk slowly, dropping it from the page cache before each read, as a mount program
# serves its data cache from a slow disk: most of its time waiting for the disk, little on the CPU.
_DISK = ("import os, sys, time\nfd = os.open(sys.argv[1], os.O_RDONLY)\n" + _READY.split("\n", 1)[1]
         + "while True:\n    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"
         "    os.pread(fd, 65536, 0)\n    time.sleep(0.05)\n")
# Answers a request on a pipe now and then, as a FUSE program's read loop answers the probe's lookup and the
# interrupt that follows it: I/O, a little CPU, nothing read from a disk or a store.
_ANSWER = _READY + ("r, w = os.pipe()\nwhile True:\n    os.write(w, b'q' * 80)\n    os.read(r, 4096)\n"
                    "    os.write(1, b'a' * 16)\n    time.sleep(0.1)\n")
_IDLE = _READY + "time.sleep(60)\n"
# Connects to the port in argv[1] (a store that sends) and reads whatever comes, as a mount program reads S3.
_RECEIVE = ("import socket, sys\nconnection = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
            + _READY + "while connection.recv(65536):\n    pass\n")


@contextlib.contextmanager
def _child(code: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL)
    try:
        assert child.stderr is not None and child.stderr.readline() == b"ready\n"  # EOF if it died first
        time.sleep(0.05)  # the few instructions between its "ready" and what it stands for
        yield child
    finally:
        child.kill()
        child.wait(timeout=10)
        if child.stderr is not None:
            child.stderr.close()


def _mark_over(pid: int, window_s: float = 0.5) -> tuple[ProgressMark, ProgressMark]:
    before = progress_mark(pid)
    time.sleep(window_s)
    return before, progress_mark(pid)


@contextlib.contextmanager
def _store(send: bool) -> Iterator[int]:
    """A TCP server on 127.0.0.1 that, once a client connects, sends it bytes without end (or nothing)."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        connection, _ = server.accept()
        with connection:
            while not stop.is_set():
                if send:
                    connection.sendall(b"s" * 4096)
                stop.wait(0.01)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


def test_a_program_receiving_from_its_store_is_making_progress():
    with _store(send=True) as port, _child(_RECEIVE, str(port)) as child:
        before, after = _mark_over(child.pid)
    assert before.received is not None and before.cpu_ticks is not None
    assert made_progress(before, after)


def test_answering_the_probes_own_requests_is_not_progress():
    """A FUSE program's read loop reads requests from /dev/fuse and writes replies, and the probe's own request
    and the interrupt after it are such reads: I/O other than the store's answers and the disk's must not count
    (``rchar``/``wchar`` are not read), nor the little CPU it costs."""
    with _child(_ANSWER) as child:
        before, after = _mark_over(child.pid)
    assert before.received == () and before.read_bytes is not None
    assert not made_progress(before, after), (before, after)


def test_a_program_reading_its_disk_is_making_progress(tmp_path):
    """A mount serving its data cache from a slow disk receives nothing from its store and spends little CPU:
    what it reads from the disk is its work (issue 40, 2.2). A real file on this machine's disk, read past the
    page cache."""
    cache = tmp_path / "block"
    cache.write_bytes(os.urandom(1 << 20))
    os.sync()  # dirty pages are not dropped: write them out first
    with _child(_DISK, str(cache)) as child:
        before, after = _mark_over(child.pid, 1.0)
    if after.read_bytes == before.read_bytes:
        import pytest

        pytest.skip(f"{tmp_path} is not on a block device (tmpfs?): reads there never reach a disk")
    assert received_since(before, after) == 0
    assert after.cpu_ticks - before.cpu_ticks < 10, "the stand-in should wait on the disk, not spin"
    assert made_progress(before, after)
    assert "disk" in progress_evidence(before, after)


def test_a_program_waiting_for_a_slow_disk_is_making_progress(tmp_path):
    """One read from a slow cache disk can outlast the whole window: nothing is read or received meanwhile and no
    CPU spent, yet the program is working.  The disk is made slow for the child alone by the kernel's block I/O
    throttle (a cgroup v1 blkio group reading 64 KiB/s from the disk holding ``tmp_path``)."""
    import uuid

    group = f"/sys/fs/cgroup/blkio/mountctl-unit-{uuid.uuid4().hex[:8]}"
    try:
        os.mkdir(group)
    except OSError as exc:
        import pytest

        pytest.skip(f"no blkio cgroup to make a slow disk with: {exc.strerror}")
    cache = tmp_path / "block"
    cache.write_bytes(os.urandom(4 << 20))
    os.sync()
    dev = os.stat(cache).st_dev
    # Waits for the test to place it in the group, then drops its file from the page cache and reads it whole.
    slow = ("import os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\n" + _READY.split("\n", 1)[1]
            + "sys.stdin.readline()\nos.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"
            "while os.read(fd, 4 << 20):\n    pass\n")
    try:
        with open(f"{group}/blkio.throttle.read_bps_device", "w") as f:
            f.write(f"{_disk_of(dev)} {64 << 10}\n")
        child = subprocess.Popen([sys.executable, "-c", slow, str(cache)], stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            assert child.stderr is not None and child.stderr.readline() == b"ready\n"
            with open(f"{group}/cgroup.procs", "w") as f:
                f.write(str(child.pid))
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            child.stdin.flush()
            time.sleep(1.0)  # its read is under way, and will be for a minute
            before, after = _mark_over(child.pid, 1.0)
        finally:
            child.kill()
            child.wait(timeout=30)
    finally:
        with open("/sys/fs/cgroup/blkio/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))  # the group must be empty to go; the child was already reaped
        for _ in range(50):
            try:
                os.rmdir(group)
                break
            except OSError:
                time.sleep(0.1)
    assert after.disk_waits == 1, after
    assert received_since(before, after) == 0
    assert made_progress(before, after)
    assert "waiting for its disk" in progress_evidence(before, after) or "from its disk" in progress_evidence(
        before, after)


def _disk_of(dev: int) -> str:
    """MAJOR:MINOR of the whole disk holding device ``dev`` (throttles are set on disks, not partitions)."""
    base = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    if os.path.exists(f"{base}/partition"):
        with open(os.path.join(os.path.realpath(f"{base}/.."), "dev")) as f:
            return f.read().strip()
    return f"{os.major(dev)}:{os.minor(dev)}"


def test_a_program_working_on_the_cpu_is_making_progress():
    """A mount serving its cache from the page cache to many readers is busy on the CPU, with nothing from its
    store and nothing from its disk."""
    with _child(_SPIN) as child:
        before, after = _mark_over(child.pid)
    assert received_since(before, after) == 0 and after.read_bytes == before.read_bytes
    assert made_progress(before, after)
    assert "CPU" in progress_evidence(before, after)


def test_a_connected_program_whose_store_sends_nothing_makes_no_progress():
    with _store(send=False) as port, _child(_RECEIVE, str(port)) as child:
        before, after = _mark_over(child.pid)
    assert before.received and not made_progress(before, after)


def test_a_stopped_program_makes_no_progress_and_says_it_is_stopped():
    with _child(_SPIN) as child:
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(0.1)
        before, after = _mark_over(child.pid)
        os.kill(child.pid, signal.SIGCONT)
    assert after.stopped
    assert not made_progress(before, after)


def test_an_idle_program_makes_no_progress():
    with _child(_IDLE) as child:
        before, after = _mark_over(child.pid)
    assert not after.stopped
    assert not made_progress(before, after)


def test_cpu_time_stands_in_where_the_sockets_cannot_be_read():
    """Another user's /proc/PID/fd is unreadable (EACCES); the marks here are built by hand for that case."""
    assert made_progress(ProgressMark(10, None), ProgressMark(12, None))
    assert not made_progress(ProgressMark(10, None), ProgressMark(10, None))
    assert not made_progress(ProgressMark(None, None), ProgressMark(None, None))


def test_a_gone_process_reads_as_no_counters():
    with _child(_READY) as child:
        child.wait(timeout=10)
    mark = progress_mark(child.pid)
    assert mark.received is None and mark.cpu_ticks is None and not mark.stopped
    assert progress_mark(None) == ProgressMark(None, None)


def test_busy_and_not_permitted_are_no_reason_to_remount_but_unresponsive_is():
    assert Health("busy").ok and Health("not-permitted").ok
    assert not Health("unresponsive").ok and not Health("dead").ok and not Health("unauthorized").ok
    assert set(SERVING_STATES) == {"healthy", "slow", "busy", "not-permitted"}
