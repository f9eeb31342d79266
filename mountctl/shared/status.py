"""``status()``: every shared mount of this node with a fresh, bounded health check and its figures."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..health import SERVING_STATES
from .metrics import mount_figures
from .registry import MountRecord, Registry

__all__ = ["status"]


def status(timeout_s: float = 2.0, *, registry: Registry | None = None) -> list[dict[str, Any]]:
    """One dict per managed mount; mounts are probed in parallel, each within ``timeout_s``."""
    records = (registry or Registry()).records()
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(records)))) as pool:
        return list(pool.map(lambda record: _row(record, timeout_s), records))


def _row(record: MountRecord, timeout_s: float) -> dict[str, Any]:
    row = mount_figures(record, timeout_s)
    # "up" follows the health module's one list of serving states: a mount that is busy serving 64 readers, or
    # that this user may not enter (root without allow_other), is not broken, and /readyz must not say it is.
    row["up"] = row["state"] == "mounted" and row["health"].get("state") in SERVING_STATES
    return row
