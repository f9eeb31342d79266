"""Is this process alive? A process is named by pid and start time, so a recycled pid never counts.

Also how a child that leads its own process group is killed, so the group goes with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

__all__ = ["process_identity", "process_alive", "pid_running", "kill_group"]


def process_identity(pid: int | None = None) -> dict[str, Any]:
    import psutil

    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "create_time": psutil.Process(pid).create_time()}


def process_alive(identity: dict[str, Any] | None) -> bool:
    """The process of ``identity`` (pid and start time) still runs and is not a zombie."""
    if not identity or not identity.get("pid"):
        return False
    import psutil

    try:
        process = psutil.Process(identity["pid"])
        return process.create_time() == identity.get("create_time") and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def pid_running(pid: int | None) -> bool:
    """A bare pid runs and is not a zombie (for children whose start time nobody recorded)."""
    if not pid:
        return False
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_group(child: subprocess.Popen[bytes], wait_s: float) -> bool:
    """SIGKILL the process group ``child`` leads and reap it; True once it has exited.

    False when it is still there ``wait_s`` later: it is stuck in the kernel (a FUSE request to a
    wedged mount, say), which no signal interrupts; the kernel reaps it once that wait ends, and the
    caller decides whether to abort the FUSE connection that holds it.
    """
    if child.poll() is not None:
        return True
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:  # the group is gone: reap the leader if it was ours
        child.poll()
        return True
    try:
        child.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        return False
    return True
