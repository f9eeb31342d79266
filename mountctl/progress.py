"""Is a mount program making progress?  What tells a busy mount from a wedged one.

A probe that gets no answer within its bound proves only that the program did not
answer *this* request in time: under 64 readers s3fs serves its queue in order and the
probe waits its turn.  The kernel's own counters say whether the program is still
working: a FUSE daemon reads every request from ``/dev/fuse`` and writes every reply
back, so its ``rchar``/``wchar`` in ``/proc/PID/io`` advance while it serves anyone, and
so does its CPU time.  A stopped (SIGSTOP) or deadlocked program advances neither.

``/proc/PID/io`` is readable only by the program's owner (and root); anyone else falls
back to the CPU time in ``/proc/PID/stat``, which every user may read.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ProgressMark", "progress_mark", "made_progress"]


@dataclass(frozen=True)
class ProgressMark:
    """One reading of a program's counters; None where a counter could not be read."""

    cpu_ticks: int | None  # user + system time of every thread, in clock ticks
    io_bytes: int | None  # rchar + wchar: bytes through read/write calls, /dev/fuse included
    stopped: bool = False  # stopped by a signal or a tracer (state T or t)


def progress_mark(pid: int | None) -> ProgressMark:
    """Read ``pid``'s counters now; never blocks (procfs answers from the kernel, not the mount)."""
    if not pid:
        return ProgressMark(None, None)
    cpu, stopped = _cpu_and_state(pid)
    return ProgressMark(cpu, _io_bytes(pid), stopped)


def made_progress(before: ProgressMark, after: ProgressMark) -> bool:
    """The program did work between two marks (and is not stopped now)."""
    if after.stopped:
        return False
    if before.io_bytes is not None and after.io_bytes is not None:
        return after.io_bytes > before.io_bytes
    if before.cpu_ticks is not None and after.cpu_ticks is not None:
        return after.cpu_ticks > before.cpu_ticks
    return False


def _cpu_and_state(pid: int) -> tuple[int | None, bool]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None, False
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = text[text.rfind(")") + 2:].split()
    try:
        return int(fields[11]) + int(fields[12]), fields[0] in ("T", "t")
    except (IndexError, ValueError):
        return None, False


def _io_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/io") as f:
            counters = dict(line.split(":", 1) for line in f if ":" in line)
        return int(counters["rchar"]) + int(counters["wchar"])
    except (OSError, KeyError, ValueError):
        return None
