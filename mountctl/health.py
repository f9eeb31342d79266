"""Health of a mount, classified without ever blocking the caller longer than a bound."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from .backends import Backend
from .mounttable import find_mount
from .probe import probe_path
from .processes import pid_running
from .redaction import redact

__all__ = ["Health", "HealthState", "HEALTH_STATES", "mount_health", "AuthWatch"]

# "unauthorized": the program runs and answers, but S3 refuses its credentials (rotated, revoked, expired).
HealthState = Literal["healthy", "slow", "unresponsive", "dead", "unmounted", "unauthorized"]
HEALTH_STATES: tuple[HealthState, ...] = get_args(HealthState)


@dataclass(frozen=True)
class Health:
    state: HealthState
    latency_s: float | None = None
    error: str = ""
    pid: int | None = None
    checked_at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return self.state in ("healthy", "slow")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def mount_health(path: str, backend: Backend | None, child: subprocess.Popen[bytes] | int | None,
                 timeout_s: float) -> Health:
    """Classify the mount at ``path``; a wedged daemon costs at most ``timeout_s``."""
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
    probe = probe_path(path, timeout_s, list_dir=False)
    if probe.timed_out:
        return Health("unresponsive", probe.latency_s, probe.error, pid)
    if not probe.ok:
        state: HealthState = "dead" if probe.errno in (errno.ENOTCONN, errno.ECONNABORTED) else "unresponsive"
        return Health(state, probe.latency_s, probe.error, pid)
    return Health("slow" if probe.latency_s > timeout_s / 2 else "healthy", probe.latency_s, "", pid)


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

    def __init__(self) -> None:
        self._offsets: dict[str, int] = {}

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
