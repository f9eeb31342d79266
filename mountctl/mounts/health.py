"""Health of a mount, classified without ever blocking the caller longer than a bound."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from ..processes import pid_running
from ..redaction import redact
from .backends import Backend
from .fusectl import serving_pid
from .mounttable import find_mount
from .probe import probe_path
from .progress import progress_evidence, progress_mark, received_since

__all__ = ["Health", "HealthState", "HEALTH_STATES", "SERVING_STATES", "mount_health", "AuthWatch"]

# "busy": the probe got no answer in time, but the program is working (its store sent it bytes, it read its data
# cache from disk, or it kept a CPU busy meanwhile): a queue, not a hang.  Nothing the probe itself causes counts
# (its FUSE request, the interrupt after it): progress.py.
# "unresponsive": no answer in time and no progress either: wedged (stopped, deadlocked, stuck in the kernel, or
# every handler waiting on a store that never answers while the read loop still runs).
# "unauthorized": the program runs and answers, but S3 refuses its credentials (rotated, revoked, expired).
# "not-permitted": the kernel or the program refused this user (FUSE lets only the mount's owner in unless it was
# mounted with allow_other, root included): says nothing about the mount, so it is never a reason to remount.
HealthState = Literal["healthy", "slow", "busy", "unresponsive", "dead", "unmounted", "unauthorized", "not-permitted"]
HEALTH_STATES: tuple[HealthState, ...] = get_args(HealthState)
# The states in which the mount serves (or, for another user, may be serving) its readers: not broken.
SERVING_STATES: tuple[HealthState, ...] = ("healthy", "slow", "busy", "not-permitted")
_REFUSED_ERRNOS = (errno.EACCES, errno.EPERM)


@dataclass(frozen=True)
class Health:
    state: HealthState
    latency_s: float | None = None
    error: str = ""
    pid: int | None = None
    checked_at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        """Not a reason to remount: the mount serves, is busy serving, or cannot be judged by this user."""
        return self.state in SERVING_STATES

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def mount_health(path: str, backend: Backend | None, child: subprocess.Popen[bytes] | int | None,
                 timeout_s: float) -> Health:
    """Classify the mount at ``path``; a wedged daemon costs at most ``timeout_s``.

    A probe that times out is judged by what the program did over the same window (``progress``): bytes from
    its store or its disk, or CPU time, make the mount "busy" (serving others ahead of the probe), else it is
    "unresponsive".
    """
    pid = child if isinstance(child, int) else (child.pid if child is not None else None)
    alive = child.poll() is None if isinstance(child, subprocess.Popen) else pid_running(pid)
    entry = find_mount(path)
    if entry is None:
        return Health("dead" if pid and not alive else "unmounted", pid=pid,
                      error="" if alive or not pid else "mount program exited")
    if backend is not None and not backend.owns(entry):
        return Health("unmounted", pid=pid, error=f"{path} now holds a {entry.fs_type} mount from {entry.source}")
    if pid is not None and not alive:
        return Health("dead", pid=pid, error="mount program exited; the mount is left behind (ENOTCONN)")
    if pid is None:
        # No record names the program (a shared=False mount, seen by `mountctl cleanup`): find the process that
        # serves the mount, so that a probe that times out is judged by what it does, not by the timeout alone.
        pid = serving_pid(entry)
    before = progress_mark(pid)
    probe = probe_path(path, timeout_s, list_dir=False)
    if probe.timed_out and not probe.reached and not progress_mark(pid).stopped:
        return Health("slow", probe.latency_s, f"the probe did not reach {path} within {timeout_s:g}s (this machine "
                      "is slow to start a process): no verdict on the mount this time", pid)
    if probe.timed_out:
        after = progress_mark(pid)
        working = progress_evidence(before, after)
        if working:
            return Health("busy", probe.latency_s, f"{probe.error}, but the mount program is working ({working}): "
                          "requests are queued behind other readers", pid)
        why = ("it is stopped (SIGSTOP or a tracer)" if after.stopped
               else "it received nothing from its store, read nothing from its disk and used little CPU meanwhile"
               if received_since(before, after) is not None
               else "its CPU time did not advance")
        return Health("unresponsive", probe.latency_s, f"{probe.error} and {why}", pid)
    if probe.errno in _REFUSED_ERRNOS:
        return Health("not-permitted", probe.latency_s, _not_permitted(path, probe.error), pid)
    if not probe.ok:
        state: HealthState = "dead" if probe.errno in (errno.ENOTCONN, errno.ECONNABORTED) else "unresponsive"
        return Health(state, probe.latency_s, probe.error, pid)
    return Health("slow" if probe.latency_s > timeout_s / 2 else "healthy", probe.latency_s, "", pid)


def _not_permitted(path: str, error: str) -> str:
    return (f"not permitted for this user (uid {os.geteuid()}): {error}; FUSE lets only the user who mounted {path} "
            "in (root included) unless it was mounted with allow_other: run this as that user, or mount with "
            "--allow-other (needs user_allow_other in /etc/fuse.conf for non-root owners)")


# How each program's log says that S3 refused its credentials: s3fs "HTTP response code 403", rclone
# "StatusCode: 403 ... InvalidAccessKeyId", mount-s3 "403 Forbidden"/"AccessDenied".
_AUTH_REFUSED = re.compile(r"AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|ExpiredToken|InvalidToken"
                           r"|response code 403|StatusCode: 403|\b403 Forbidden\b")


class AuthWatch:
    """Reads what a mount program appended to its logs since the last look, for S3 refusing its credentials.

    A refused key does not make a mount unhealthy to a probe (the kernel answers a stat
    from its cache); the program's reads fail instead, with EIO (rclone) or as an empty
    file (s3fs), and only its log says why.
    """

    # How long a refusal that one LIST did not confirm is asked about again at each probe. A revoked key takes a
    # moment to be refused everywhere (SeaweedFS: seconds), so the program's 403 can come before the LIST's: that
    # line was consumed and forgotten, and the mount waited for another 403 that a reader in backoff was slow to
    # cause (a key rotation through mount-s3 once waited out a loader's 120 s timeout).
    UNCONFIRMED_FOR_S = 60.0

    def __init__(self) -> None:
        self._offsets: dict[str, int] = {}
        self._held: tuple[str, float] | None = None

    def hold(self, line: str) -> None:
        """Keep ``line``, a refusal not confirmed yet, to be asked about again (``unconfirmed``)."""
        if self._held is None:
            self._held = (line, time.monotonic())

    def unconfirmed(self) -> str:
        """The refusal held by ``hold`` while it is younger than ``UNCONFIRMED_FOR_S``, else ''."""
        if self._held is not None and time.monotonic() - self._held[1] < self.UNCONFIRMED_FOR_S:
            return self._held[0]
        self._held = None
        return ""

    def confirmed(self) -> None:
        self._held = None

    def skip_to_end(self, paths: list[str]) -> None:
        """Ignore what is in the logs now (a fresh program's log starts clean)."""
        for path in paths:
            try:
                self._offsets[path] = os.path.getsize(path)
            except OSError:
                pass

    def refused(self, paths: list[str], *, max_bytes: int = 1 << 20) -> str:
        """The last new log line that reports a refusal (redacted), or ''."""
        found = ""
        for path in paths:
            try:
                with open(path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    start = self._offsets.get(path, 0)
                    if size < start:  # rotated or truncated: read it from the start
                        start = 0
                    f.seek(max(start, size - max_bytes))
                    text = f.read(size - f.tell()).decode(errors="replace")
                    self._offsets[path] = size
            except OSError:
                continue
            for line in text.splitlines():
                if _AUTH_REFUSED.search(line):
                    found = line.strip()
        return redact(found[-300:])
