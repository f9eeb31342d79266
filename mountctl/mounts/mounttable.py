"""The kernel's mount table, read from ``/proc/self/mountinfo``.

``os.path.ismount`` and ``os.path.exists`` return False on a FUSE mount whose
daemon died (every stat fails with ENOTCONN), so mountctl never uses them to
ask "is something mounted here"; it reads the table, which does not touch the
mount and so can never hang.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

__all__ = ["MountEntry", "read_mount_table", "find_mount", "covering_mount"]

MOUNTINFO = "/proc/self/mountinfo"
_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


@dataclass(frozen=True)
class MountEntry:
    mount_id: int
    device: str  # "major:minor"; for FUSE the minor is the connection number
    mount_point: str
    fs_type: str
    source: str
    options: str

    @property
    def is_fuse(self) -> bool:
        return self.fs_type == "fuse" or self.fs_type.startswith("fuse.")

    @property
    def fuse_connection(self) -> int:
        return int(self.device.split(":")[1])


def read_mount_table(path: str = MOUNTINFO) -> list[MountEntry]:
    entries = []
    with open(path, encoding="utf-8", errors="surrogateescape") as table:
        for line in table:
            fields = line.split()
            separator = fields.index("-")
            entries.append(
                MountEntry(
                    mount_id=int(fields[0]),
                    device=fields[2],
                    mount_point=_unescape(fields[4]),
                    options=fields[5],
                    fs_type=fields[separator + 1],
                    source=_unescape(fields[separator + 2]),
                )
            )
    return entries


def find_mount(mount_point: str) -> MountEntry | None:
    """The topmost entry mounted exactly at ``mount_point`` (later entries stack on earlier)."""
    target = os.path.abspath(mount_point)
    found = None
    for entry in read_mount_table():
        if entry.mount_point == target:
            found = entry
    return found


def covering_mount(path: str) -> MountEntry | None:
    """The entry whose mount point is the longest prefix of ``path`` (the file system serving it)."""
    target = os.path.abspath(path)
    best = None
    for entry in read_mount_table():
        root = entry.mount_point.rstrip("/") or "/"
        if (target == root or target.startswith(root + "/") or root == "/") and (
                best is None or len(entry.mount_point) >= len(best.mount_point)):
            best = entry
    return best
