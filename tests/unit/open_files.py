"""What this process holds open: the descriptors of ``/proc/self/fd`` that point under a directory.

One helper for the unit tests that check a reader gives back every file it opened (``FileReader``, the next
shards read into memory).
"""

from __future__ import annotations

import os

__all__ = ["open_fds_under"]


def open_fds_under(root: str | os.PathLike[str]) -> list[str]:
    """The paths under ``root`` that this process has open, one per descriptor (a file open twice: twice)."""
    prefix = str(root)
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since the listing (the listing's own descriptor, or another thread's)
            continue
        if target.startswith(prefix):
            found.append(target)
    return found
