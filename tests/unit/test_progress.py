"""Busy is not wedged: a program's counters tell a working daemon from a stopped one.

Real processes stand for the mount program (a busy loop, a sleeper, a SIGSTOPped child): what
is measured is the kernel's accounting of them, which is the same for any program.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

from mountctl.health import SERVING_STATES, Health
from mountctl.progress import ProgressMark, made_progress, progress_mark

# Each child says "ready" on stderr once its interpreter has started, and only then does what it stands for,
# so that no mark counts the start-up as progress.
_READY = "import os, time\nos.write(2, b'ready\\n')\n"
_SPIN = _READY + "while True:\n    os.write(1, b'x' * 4096)\n"
_IDLE = _READY + "time.sleep(60)\n"


@contextlib.contextmanager
def _child(code: str) -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
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


def test_a_program_that_does_io_is_making_progress():
    with _child(_SPIN) as child:
        before, after = _mark_over(child.pid)
    assert before.io_bytes is not None and before.cpu_ticks is not None
    assert made_progress(before, after)


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


def test_cpu_time_stands_in_where_the_io_counters_cannot_be_read():
    """Another user's /proc/PID/io is unreadable (EACCES); the marks here are built by hand for that case."""
    assert made_progress(ProgressMark(10, None), ProgressMark(12, None))
    assert not made_progress(ProgressMark(10, None), ProgressMark(10, None))
    assert not made_progress(ProgressMark(None, None), ProgressMark(None, None))


def test_a_gone_process_reads_as_no_counters():
    with _child(_READY) as child:
        child.wait(timeout=10)
    mark = progress_mark(child.pid)
    assert mark.io_bytes is None and mark.cpu_ticks is None and not mark.stopped
    assert progress_mark(None) == ProgressMark(None, None)


def test_busy_and_not_permitted_are_no_reason_to_remount_but_unresponsive_is():
    assert Health("busy").ok and Health("not-permitted").ok
    assert not Health("unresponsive").ok and not Health("dead").ok and not Health("unauthorized").ok
    assert set(SERVING_STATES) == {"healthy", "slow", "busy", "not-permitted"}
