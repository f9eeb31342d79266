"""``status()``: every shared mount of this node with a fresh, bounded health check."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..backends import get_backend
from ..health import mount_health
from ..processes import process_alive
from .registry import MountRecord, Registry

__all__ = ["status"]


def _row(record: MountRecord, timeout_s: float) -> dict[str, Any]:
    supervisor_alive = process_alive(record.supervisor)
    backend = get_backend(record.backend) if record.backend else None
    if supervisor_alive and record.state == "mounted":
        health = mount_health(record.mount_dir, backend, record.program_pid, timeout_s).to_dict()
    else:
        health = {"state": record.state if supervisor_alive else "dead",
                  "error": "" if supervisor_alive else "supervisor is gone; run `mountctl cleanup`"}
    return {
        "uri": record.uri, "dir": record.mount_dir, "backend": record.backend, "pid": record.program_pid,
        "supervisor_pid": (record.supervisor or {}).get("pid"),
        "state": record.state if supervisor_alive else "abandoned", "health": health, "since": record.since,
        "restarts": record.restarts, "last_error": record.last_error, "holders": len(record.holders),
        "pinned": record.pinned, "log": record.log_path, "endpoint": record.identity.get("s3", {}).get("endpoint"),
        "cache": record.cache,
    }


def status(timeout_s: float = 2.0, *, registry: Registry | None = None) -> list[dict[str, Any]]:
    """One dict per managed mount; mounts are probed in parallel, each within ``timeout_s``."""
    records = (registry or Registry()).records()
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(records)))) as pool:
        return list(pool.map(lambda record: _row(record, timeout_s), records))
