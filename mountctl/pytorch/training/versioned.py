"""Checkpoints kept as whole versions, for a directory that can neither rename nor overwrite (a mount-s3 mount).

mount-s3 writes new files only, sequentially, and has no rename: the usual
"write beside, rename over" cannot be done, and removing ``last.ckpt`` before
writing the new one loses the only checkpoint if the process dies during the
save.  Instead each save writes a new name, ``last.ckpt.v<N>-<BYTES>``, and
removes the older versions only once the new one is closed (uploaded).  The
name carries the size the file must have, so a version cut short by a kill
(mount-s3 uploads what it got when the file is closed) is seen as not whole
and skipped: a load takes the newest *whole* version, and a plain
``last.ckpt`` from an earlier route counts as the oldest.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping

__all__ = ["versioned_name", "whole_versions", "newest_whole", "save_versioned"]

_CHUNK = 8 << 20  # bytes per write(): sequential, large enough for every mount program


def versioned_name(name: str, number: int, size: int) -> str:
    return f"{name}.v{number}-{size}"


def whole_versions(sizes: Mapping[str, int], name: str) -> list[tuple[int, str]]:
    """``(number, file name)`` of every whole version of ``name`` among ``sizes`` (file name to size), newest
    first; a plain ``name`` is number 0.  Works on a directory listing and on an S3 listing alike."""
    pattern = re.compile(re.escape(name) + r"\.v(\d+)-(\d+)")
    found = [(0, name)] if name in sizes else []
    for entry, size in sizes.items():
        match = pattern.fullmatch(entry)
        if match and int(match.group(2)) == size:
            found.append((int(match.group(1)), entry))
    return sorted(found, reverse=True)


def _listing(directory: str, name: str) -> dict[str, int]:
    sizes = {}
    for entry in os.scandir(directory):
        if entry.name == name or entry.name.startswith(name + ".v"):
            with contextlib.suppress(FileNotFoundError):
                sizes[entry.name] = entry.stat().st_size
    return sizes


def newest_whole(directory: str, name: str) -> str | None:
    """The path of the newest whole version of ``name`` in ``directory``, or None when there is none."""
    versions = whole_versions(_listing(directory, name), name)
    return os.path.join(directory, versions[0][1]) if versions else None


def save_versioned(directory: str, name: str, data: bytes | memoryview) -> str:
    """Write ``data`` as the next version of ``name``; once it is whole, remove every older one.

    Only new files are created and written front to back (what mount-s3 allows).  A write that
    fails removes its own partial file and raises; the earlier versions are untouched then.
    """
    view = memoryview(data)
    existing = _listing(directory, name)
    pattern = re.compile(re.escape(name) + r"\.v(\d+)-\d+")
    number = 1 + max((int(m.group(1)) for m in map(pattern.fullmatch, existing) if m), default=0)
    path = os.path.join(directory, versioned_name(name, number, len(view)))
    try:
        with open(path, "xb") as f:  # a new name, never an overwrite; the program uploads on close
            for start in range(0, len(view), _CHUNK):
                f.write(view[start:start + _CHUNK])
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    for old in existing:  # every earlier version, whole or cut short, and a plain `name`
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, old))
    return path
