"""Busy is not wedged: what a program receives from its store tells a working daemon from a wedged one.

Real processes stand for the mount program (a reader of a real TCP connection, a busy loop, a sleeper, a
SIGSTOPped child): what is measured is the kernel's accounting of them, which is the same for any program.
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
from mountctl.mounts.progress import ProgressMark, made_progress, progress_mark

# Each child says "ready" on stderr once its interpreter has started, and only then does what it stands for,
# so that no mark counts the start-up as progress.
_READY = "import os, time\nos.write(2, b'ready\\n')\n"
_SPIN = _READY + "while True:\n    os.write(1, b'x' * 4096)\n"
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


def test_io_that_does_not_come_from_the_store_is_not_progress():
    """A FUSE program's read loop reads requests from /dev/fuse and writes replies, and the probe's own request
    and the interrupt after it are such reads: I/O other than the store's answers must not count."""
    with _child(_SPIN) as child:
        before, after = _mark_over(child.pid)
    assert before.received == () and not made_progress(before, after)


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
