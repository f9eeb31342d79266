"""The figures of one shared mount, computed once for ``mountctl status --json`` and the exporter alike.

Everything here is bounded: the health probe runs where a timeout can abandon it
(``mountctl.mounts.health``), the program's remote control is asked over a socket with
a timeout, and the cache is measured on the local disk, never through the mount.
What each program can say for itself differs: rclone answers ``vfs/stats`` and
serves its own Prometheus metrics on a private unix socket; s3fs-fuse has no
metrics, so its figures are what a probe and the cache directory show;
mount-s3 pushes OTLP only (not read here).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from ..mounts.backends import BACKENDS
from ..mounts.cache import mount_cache_dir
from ..mounts.health import SERVING_STATES, mount_health
from ..processes import pid_running, process_alive
from ..shared.registry import MountRecord

__all__ = ["mount_figures", "record_figures", "probe_figures", "combine", "program_memory", "directory_bytes",
           "UP_HEALTH"]

MIB = 1 << 20


# Health states in which a mounted mount counts as up: health.py's serving states (busy serving other readers, or
# not enterable by this user, is not broken).  "store-unreachable" is not one: no reason to remount, yet no new
# data can be read until the store answers.
UP_HEALTH = SERVING_STATES


def mount_figures(record: MountRecord, timeout_s: float) -> dict[str, Any]:
    """One mount's status row: state, health, restarts, memory, cache and what its program reports."""
    return combine(record_figures(record), probe_figures(record, timeout_s))


def record_figures(record: MountRecord) -> dict[str, Any]:
    """What the registry record alone says (no probe, no process started): cheap enough for every scrape.

    ``health`` is None for a mounted mount: only a probe can tell (``probe_figures``).
    """
    supervisor_alive = process_alive(record.supervisor)
    state = record.state if supervisor_alive else "abandoned"
    memory_mb = record.memory_mb or record.spec.get("memory_mb")  # in force; an older record: as asked
    health: dict[str, Any] | None = None if state == "mounted" else {
        "state": record.state if supervisor_alive else "dead", "latency_s": None,
        "error": "" if supervisor_alive else "supervisor is gone; run `mountctl cleanup`"}
    if health is None and record.program_pid and not pid_running(record.program_pid):
        # Seen at once from /proc, without waiting for the next probe.
        health = {"state": "dead", "latency_s": None, "error": "mount program exited", "pid": record.program_pid}
    return {
        "uri": record.uri, "dir": record.mount_dir, "backend": record.backend, "pid": record.program_pid,
        # Recorded when the program was started: never asked of the running process (its pid may be another's now).
        "program_version": record.program_version or "unknown",
        "supervisor_pid": (record.supervisor or {}).get("pid"),
        "state": state, "health": health, "since": record.since,
        "restarts": record.restarts, "last_error": record.last_error, "holders": len(record.holders),
        "pinned": record.pinned, "log": record.log_path, "endpoint": record.identity.get("s3", {}).get("endpoint"),
        "memory": {"rss_bytes": None, "peak_rss_bytes": None, "bound_bytes": memory_mb * MIB if memory_mb else None,
                   "note": record.memory_note},
        "cache": _cache_settings(record),
        "warm": _warm_state(record),
        "program": {},
    }


def probe_figures(record: MountRecord, timeout_s: float,
                  cache_bytes: Callable[[str], int] | None = None) -> dict[str, Any]:
    """What costs a process or a request: the bounded health probe, rclone's remote control, the cache's size.

    ``cache_bytes`` measures a cache directory (default: a walk of it); rclone's own
    count (``vfs/stats`` diskCache.bytesUsed) is taken instead whenever it answers.
    """
    supervisor_alive = process_alive(record.supervisor)
    figures: dict[str, Any] = {"health": None, "memory": program_memory(record.program_pid if supervisor_alive else None),
                               "program": {}, "cache_bytes": None}
    backend = BACKENDS.get(record.backend or "")
    if supervisor_alive and record.state == "mounted":
        figures["health"] = mount_health(record.mount_dir, backend, record.program_pid, timeout_s).to_dict()
    workdir = _workdir(record)
    if backend is not None and workdir and supervisor_alive:
        figures["program"] = backend.program_figures(workdir)
    cache = _cache_settings(record)
    if cache is not None:
        counted = ((figures["program"].get("vfs") or {}).get("diskCache") or {}).get("bytesUsed")
        figures["cache_bytes"] = counted if isinstance(counted, int) else (cache_bytes or directory_bytes)(cache["path"])
    return figures


def combine(row: dict[str, Any], probed: dict[str, Any] | None) -> dict[str, Any]:
    """A status row from the record's figures and the last probe's (None: not probed yet), with ``up``."""
    row = {**row, "memory": dict(row["memory"])}
    if probed is not None:
        row["memory"].update(probed["memory"])
        row["program"] = probed["program"]
        if row["cache"] is not None:
            row["cache"] = {**row["cache"], "bytes": probed["cache_bytes"]}
    if row["health"] is None:
        row["health"] = (probed or {}).get("health") or {"state": "unprobed", "latency_s": None,
                                                         "error": "not probed yet"}
    row["up"] = row["state"] == "mounted" and row["health"].get("state") in UP_HEALTH
    return row


def _warm_state(record: MountRecord) -> dict[str, str] | None:
    """The last word of the warm asked for at mount (``mountctl.mounts.warm``): warming, warmed, warm-incomplete or
    warm-skipped with its summary; None when none was asked for."""
    for event in reversed(record.events):
        if str(event.get("event", "")).startswith("warm"):
            return {"state": event["event"], "detail": event.get("detail", "")}
    return None


def _workdir(record: MountRecord) -> str | None:
    # The mount's private scratch directory holds its log at logs/mount.log (Mount.log_path).
    return os.path.dirname(os.path.dirname(record.log_path)) if record.log_path else None


def program_memory(pid: int | None) -> dict[str, int | None]:
    """The mount program's resident memory now and at its peak (the kernel's high-water mark, VmHWM)."""
    figures: dict[str, int | None] = {"rss_bytes": None, "peak_rss_bytes": None}
    if not pid:
        return figures
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "VmHWM"):
                    figures["rss_bytes" if name == "VmRSS" else "peak_rss_bytes"] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return figures


def _cache_settings(record: MountRecord) -> dict[str, Any] | None:
    """The cache the program runs with (None: none), with its path and cap in bytes; ``bytes`` comes from a probe."""
    if record.cache is None:
        return None
    path = record.cache.get("path") or mount_cache_dir(record.cache["cache_dir"], record.mount_dir)
    size_mb = record.cache.get("cache_size_mb")
    return {**record.cache, "path": path, "bytes": None, "capacity_bytes": size_mb * MIB if size_mb else None}


def directory_bytes(path: str) -> int:
    """Bytes allocated on disk under ``path`` (sparse cache files count what they hold, like ``du``)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total
