"""Is this process alive? A process is named by pid and start time, so a recycled pid never counts."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["process_identity", "process_alive", "pid_running"]


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
