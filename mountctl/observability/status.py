"""``status()``: every shared mount of this node with a fresh, bounded health check and its figures."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..shared.registry import Registry
from .metrics import mount_figures

__all__ = ["status"]


def status(timeout_s: float = 2.0, *, registry: Registry | None = None) -> list[dict[str, Any]]:
    """One dict per managed mount; mounts are probed in parallel, each within ``timeout_s``."""
    records = (registry or Registry()).records()
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(records)))) as pool:
        return list(pool.map(lambda record: mount_figures(record, timeout_s), records))
