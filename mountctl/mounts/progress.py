"""Is a mount program making progress?  What tells a busy mount from a wedged one.

A probe that gets no answer within its bound proves only that the program did not
answer *this* request in time: under 64 readers s3fs serves its queue in order and the
probe waits its turn.  Whether it is still working is read from the kernel, and only
from signs the probe cannot cause: the bytes the program has received from its store
over TCP (``socket_bytes``).  Its ``rchar``/``wchar`` in ``/proc/PID/io`` do not qualify:
the probe's own FUSE request, and the interrupt the kernel sends when the timed-out probe
is killed, are read from ``/dev/fuse``, and the request the probe makes it send to a store
that never answers is written, so a program whose read loop runs while every handler is
stuck (rclone reads requests on one goroutine and serves each on another) would read as
busy for ever.  A stopped (SIGSTOP) program, or one whose store never answers, receives
nothing.

A process's sockets can be matched only by its owner (and root); anyone else falls back
to the CPU time in ``/proc/PID/stat``, which every user may read (weaker: a runtime's own
timers spend a little CPU even when no request completes).
"""

from __future__ import annotations

from dataclasses import dataclass

from .socket_bytes import tcp_bytes_received

__all__ = ["ProgressMark", "progress_mark", "made_progress"]


@dataclass(frozen=True)
class ProgressMark:
    """One reading of a program's counters; None where a counter could not be read."""

    cpu_ticks: int | None  # user + system time of every thread, in clock ticks
    received: tuple[tuple[int, int], ...] | None  # (socket inode, bytes received) of each of its TCP sockets
    stopped: bool = False  # stopped by a signal or a tracer (state T or t)


def progress_mark(pid: int | None) -> ProgressMark:
    """Read ``pid``'s counters now; never blocks (procfs and netlink answer from the kernel, not the mount)."""
    if not pid:
        return ProgressMark(None, None)
    cpu, stopped = _cpu_and_state(pid)
    received = tcp_bytes_received(pid)
    return ProgressMark(cpu, None if received is None else tuple(sorted(received.items())), stopped)


def received_since(before: ProgressMark, after: ProgressMark) -> int | None:
    """Bytes the program received from its store between two marks (None: not known to this user).

    Sockets are matched by inode: one opened meanwhile counts from zero, one closed meanwhile is not counted.
    """
    if before.received is None or after.received is None:
        return None
    earlier = dict(before.received)
    return sum(max(0, count - earlier.get(inode, 0)) for inode, count in after.received)


def made_progress(before: ProgressMark, after: ProgressMark) -> bool:
    """The program did work between two marks (and is not stopped now)."""
    if after.stopped:
        return False
    received = received_since(before, after)
    if received is not None:
        return received > 0
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
