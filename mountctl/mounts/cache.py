"""The node-local data cache of a mount: its size bound and its private per-mount directory.

A mount with ``cache_dir`` gets a directory of its own under it
(``mount-<hash of the mount directory>``, 0700), so two mounts never share a
program's cache.  The cache lives exactly as long as the mount: it is made
empty at start and removed at stop (and by the sweep after a SIGKILL), so it
can never serve bytes of an object that changed in S3 between two mounts.
Within one mount the program's own metadata TTL governs, as without a cache.

Every program's cache is capped by one rule, ``plan_cache``: at most half of what
the cache disk has free when the mount starts, and none at all below
``MIN_CACHE_MB``; a request that cannot be honoured is said in one warning line,
and what the program really runs with is what status reports.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from dataclasses import dataclass
from typing import Any

from .. import paths

__all__ = ["cache_bound_mb", "cache_options", "mount_cache_dir", "prepare_mount_cache", "remove_mount_cache",
           "free_mb", "MIN_CACHE_MB", "half_free_mb", "CachePlan", "plan_cache"]

log = logging.getLogger("mountctl")

MIB = 1 << 20
# Below this a cache is not worth its bookkeeping: the mount runs without one.
MIN_CACHE_MB = 64
# Room for the programs' own files (rclone's metadata, s3fs's .stat files) and a partly read shard.
_SLACK_MB = 256


def cache_bound_mb(dataset_bytes: int, free_bytes: int) -> int | None:
    """The cache size for a dataset of ``dataset_bytes`` on a disk with ``free_bytes`` free, or None for none.

    Enough for the whole dataset (plus slack) where the disk allows, never more than
    half of what is free.  The half-free limit is rounded down to a power of two MiB
    so that ranks computing it moments apart agree (it is part of the shared mount's request).
    """
    want = -(-max(0, dataset_bytes) * 11 // 10 // MIB) + _SLACK_MB
    half_free = half_free_mb(max(0, free_bytes) // MIB)
    limit = 1 << (half_free.bit_length() - 1) if half_free > 0 else 0
    size = min(want, limit)
    return size if size >= MIN_CACHE_MB else None


def cache_options(dataset_bytes: int, cache_dir: str | None = None, cache_size_mb: int | None = None
                  ) -> dict[str, Any]:
    """The ``cache_dir`` and ``cache_size_mb`` mount options for reading a dataset of ``dataset_bytes``.

    Default place: ``$MOUNTCTL_HOME/cache``; default size: ``cache_bound_mb``.  Empty (no
    cache) when the disk has too little free for one.
    """
    root = os.path.abspath(os.path.expanduser(cache_dir)) if cache_dir else paths.cache_root()
    free = free_mb(root)
    size = cache_size_mb or cache_bound_mb(dataset_bytes, free * MIB)
    if not size:
        log.warning("no data cache: %s has %d MiB free, and a cache needs at least %d MiB within half of it; "
                    "the mount reads every epoch from S3 (free space there, or pass a roomier --cache-dir)",
                    root, free, MIN_CACHE_MB)
        return {}
    return {"cache_dir": root, "cache_size_mb": size}


def half_free_mb(free: int) -> int:
    """The one "at most half the free disk" rule, in MiB."""
    return max(0, free) // 2


@dataclass(frozen=True)
class CachePlan:
    """What a mount program's cache really gets: its cap, the free space it must leave, and why it differs."""

    size_mb: int  # the cap handed to the program
    keep_free_mb: int  # the floor of free space (rclone --vfs-cache-min-free-space, s3fs ensure_diskfree)
    note: str = ""  # set when the request was not honoured as asked


def plan_cache(where: str, requested_mb: int | None, *, free: int | None = None) -> tuple[CachePlan | None, str]:
    """The cache a program gets on the disk holding ``where``: (plan or None for none, note when not as asked).

    The cap is ``requested_mb`` (default: half the free disk) but never more than half the
    free disk; the floor keeps the other half free for everyone else, so even a program that
    overshoots its cap (rclone keeps files it has open) stops at half the disk.
    """
    free = free_mb(where) if free is None else free
    half = half_free_mb(free)
    if half < MIN_CACHE_MB:
        return None, (f"no data cache: {where} has {free} MiB free, and a cache needs at least {MIN_CACHE_MB} MiB "
                      "within half of it; the mount reads from S3 every time")
    size = min(requested_mb, half) if requested_mb else half
    note = ""
    if requested_mb and requested_mb > half:
        note = (f"data cache capped at {size} MiB, half the {free} MiB free on {where}, instead of the "
                f"{requested_mb} MiB asked")
    return CachePlan(size_mb=size, keep_free_mb=free - half, note=note), note


def free_mb(path: str) -> int:
    """Free MiB on the filesystem holding ``path`` (its nearest existing ancestor)."""
    while not os.path.exists(path):
        path = os.path.dirname(path)
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize // MIB


def mount_cache_dir(cache_dir: str, mount_dir: str) -> str:
    """The directory of the mount at ``mount_dir`` under ``cache_dir``: one per mount, never shared."""
    digest = hashlib.sha256(os.path.abspath(mount_dir).encode()).hexdigest()[:12]
    return os.path.join(os.path.abspath(cache_dir), f"mount-{digest}")


def prepare_mount_cache(cache_dir: str, mount_dir: str) -> str:
    """Create the mount's cache directory empty and private (a leftover of a killed mount is dropped)."""
    path = mount_cache_dir(cache_dir, mount_dir)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(cache_dir, mode=0o700, exist_ok=True)
    os.makedirs(path, mode=0o700)
    os.chmod(path, 0o700)
    return path


def remove_mount_cache(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)
