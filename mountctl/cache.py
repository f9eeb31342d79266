"""The node-local data cache of a mount: its size bound and its private per-mount directory.

A mount with ``cache_dir`` gets a directory of its own under it
(``mount-<hash of the mount directory>``, 0700), so two mounts never share a
program's cache.  The cache lives exactly as long as the mount: it is made
empty at start and removed at stop (and by the sweep after a SIGKILL), so it
can never serve bytes of an object that changed in S3 between two mounts.
Within one mount the program's own metadata TTL governs, as without a cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from typing import Any

from . import paths

__all__ = ["cache_bound_mb", "cache_options", "mount_cache_dir", "prepare_mount_cache", "remove_mount_cache",
           "free_mb", "MIN_CACHE_MB"]

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
    half_free = max(0, free_bytes) // 2 // MIB
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
    size = cache_size_mb or cache_bound_mb(dataset_bytes, free_mb(root) * MIB)
    return {"cache_dir": root, "cache_size_mb": size} if size else {}


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
