"""What a peer cell leaves outside its own directory, found and removed once its child is gone.

MosaicML Streaming keeps a dataset's shared state in ``/dev/shm`` segments named ``NNNNNN_<what>`` and
records, in ``NNNNNN_locals``, the local directories that own the prefix ``NNNNNN``.  A child killed at
its timeout never runs Streaming's own cleanup, and Streaming's ``clean_stale_shared_memory`` removes
every prefix, live or not (another job's segments look the same).  So the parent removes exactly the
prefixes whose ``_locals`` names the cell's own cache directory, and only segments owned by this user.
"""

from __future__ import annotations

import os
import re

__all__ = ["SHM_DIR", "streaming_segments", "remove_streaming_segments"]

SHM_DIR = "/dev/shm"
_SEGMENT = re.compile(r"^(\d{6})_")


def _owns(locals_path: str, cache_dir: str) -> bool:
    try:
        with open(locals_path, "rb") as segment:
            data = segment.read(1 << 16)
    except OSError:
        return False
    # The record is an int32 length, then the local directories joined by NUL bytes, then the prefix.
    names = data[4:].split(b"\0")
    wanted = {os.fsencode(cache_dir), os.fsencode(os.path.realpath(cache_dir))}
    return any(name.rstrip(b"/") in wanted for name in names)


def streaming_segments(cache_dir: str, shm_dir: str = SHM_DIR) -> list[str]:
    """Paths of this user's Streaming segments that belong to the dataset cached in ``cache_dir``."""
    try:
        entries = os.listdir(shm_dir)
    except OSError:
        return []
    prefixes = {m.group(1) for name in entries if (m := _SEGMENT.match(name)) and name.endswith("_locals")
                and _owns(os.path.join(shm_dir, name), cache_dir)}
    found = []
    for name in entries:
        match = _SEGMENT.match(name)
        path = os.path.join(shm_dir, name)
        if match and match.group(1) in prefixes:
            try:
                if os.stat(path).st_uid == os.getuid():
                    found.append(path)
            except OSError:
                continue  # gone meanwhile
    return sorted(found)


def remove_streaming_segments(cache_dir: str, shm_dir: str = SHM_DIR) -> int:
    """Unlink the segments ``streaming_segments`` finds; returns how many were removed."""
    removed = 0
    for path in streaming_segments(cache_dir, shm_dir):
        try:
            os.unlink(path)
            removed += 1
        except FileNotFoundError:
            continue
    return removed
