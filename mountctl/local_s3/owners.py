"""Who holds the embedded S3 server: an owner count, read and changed only under the server's start lock.

A run without a URI (``resnet.py bench``, ``demo``, the examples) uses the shared server
of ``$MOUNTCTL_HOME`` and must stop it afterwards only if nobody else still uses it.
Deciding "I started it, so I stop it" before taking the lock let two runs each believe
they owned it, and the first to finish stopped it under the other.  So each run joins
the count under the lock and leaves it under the lock; the last one out stops the server,
unless a person started it (``mountctl local-s3 start``: "pinned", stopped only by
``mountctl local-s3 stop``).  Owners are named by pid and start time, so one that was
SIGKILLed is simply not counted, and ``mountctl cleanup`` stops a server nobody holds.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from ..paths import write_private_json
from ..processes import process_alive, process_identity

__all__ = ["Owners", "read_owners", "join", "leave", "pin"]

_FILE = "owners.json"


@dataclass(frozen=True)
class Owners:
    """What ``owners.json`` holds: whether a person pinned the server, and the processes that hold it."""

    pinned: bool = False
    owners: tuple[dict[str, Any], ...] = ()

    @property
    def live(self) -> list[dict[str, Any]]:
        return [owner for owner in self.owners if process_alive(owner)]


def read_owners(server_dir: str) -> Owners:
    try:
        with open(os.path.join(server_dir, _FILE)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return Owners()
    if not isinstance(data, dict):
        return Owners()
    return Owners(bool(data.get("pinned")), tuple(o for o in data.get("owners", []) if isinstance(o, dict)))


def _write(server_dir: str, pinned: bool, owners: list[dict[str, Any]]) -> None:
    write_private_json(os.path.join(server_dir, _FILE), {"pinned": pinned, "owners": owners})


def join(server_dir: str, *, fresh: bool) -> None:
    """Count this process as an owner (the caller holds the start lock); ``fresh``: it has just started the server."""
    current = Owners() if fresh else read_owners(server_dir)
    _write(server_dir, current.pinned, [*current.live, process_identity()])


def leave(server_dir: str) -> bool:
    """Drop this process (and owners that are gone) from the count; True when the server should stop now."""
    current = read_owners(server_dir)
    me = process_identity()
    others = [owner for owner in current.live if owner != me]
    _write(server_dir, current.pinned, others)
    return not others and not current.pinned


def pin(server_dir: str, pinned: bool = True) -> None:
    """A person started (or stopped) the server: it runs until ``mountctl local-s3 stop``, whoever else leaves."""
    current = read_owners(server_dir) if pinned else Owners()
    _write(server_dir, pinned, current.live if pinned else [])
