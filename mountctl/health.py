"""Health of a mount, classified without ever blocking the caller longer than a bound."""

from __future__ import annotations

import errno
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from .backends import Backend
from .mounttable import find_mount
from .probe import probe_path
from .processes import pid_running

__all__ = ["Health", "HealthState", "HEALTH_STATES", "mount_health"]

HealthState = Literal["healthy", "slow", "unresponsive", "dead", "unmounted"]
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
