"""The node-wide registry of shared mounts: one typed, frozen record per mount directory.

Records live in ``$MOUNTCTL_HOME/mounts`` and change only under an exclusive
``flock`` of the directory's lock file, so processes racing for the same mount
(DDP ranks, jobs) see one consistent story.  A record names its supervisor
process, the mount program's pid, the state, and the holders: processes using
the mount, each identified by pid and start time so that a recycled pid never
counts as alive.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from .. import paths
from ..errors import RegistryError
from ..mounts.watchdog import WATCHDOG_INTERVAL_S

__all__ = ["Registry", "MountRecord", "SharedState", "SHARED_STATES"]

SharedState = Literal["starting", "mounted", "recovering", "stopping", "failed"]
SHARED_STATES: tuple[SharedState, ...] = get_args(SharedState)
MAX_EVENTS = 20


@dataclass(frozen=True)
class MountRecord:
    """What the registry knows of one shared mount.  ``identity`` holds no secret."""

    uri: str
    mount_dir: str
    spec: dict[str, Any]
    identity: dict[str, Any]
    state: SharedState = "starting"
    backend: str | None = None
    created_at: float = field(default_factory=time.time)
    since: float | None = None
    restarts: int = 0
    last_error: str = ""
    holders: tuple[dict[str, Any], ...] = ()
    pinned: bool = False
    watchdog: bool = True
    watchdog_interval_s: float = WATCHDOG_INTERVAL_S
    events: tuple[dict[str, Any], ...] = ()
    supervisor: dict[str, Any] | None = None
    program_pid: int | None = None
    log_path: str | None = None
    error: dict[str, str] | None = None
    stop_requested: bool = False
    cache: dict[str, Any] | None = None  # the data cache the program runs with (None: none), not what was asked
    cache_note: str = ""  # why that differs from the request
    memory_mb: int | None = None  # the memory bound the program runs with (None: none, or an older record)
    memory_note: str = ""  # why that differs from the request
    program_version: str = ""  # the program's version line, recorded when it was started ("": an older record)

    def __post_init__(self) -> None:
        if self.state not in SHARED_STATES:
            raise RegistryError(f"registry record for {self.mount_dir} has unknown state {self.state!r}")

    def replace(self, **changes: Any) -> MountRecord:
        return dataclasses.replace(self, **changes)

    def with_event(self, event: dict[str, Any], **changes: Any) -> MountRecord:
        return self.replace(events=(*self.events, event)[-MAX_EVENTS:], **changes)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["holders"] = list(self.holders)
        data["events"] = list(self.events)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MountRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["holders"] = tuple(values.get("holders", ()))
        values["events"] = tuple(values.get("events", ()))
        return cls(**values)


class Registry:
    def __init__(self, directory: str | None = None) -> None:
        self.dir = directory or paths.registry_dir()

    def key(self, mount_dir: str) -> str:
        return hashlib.sha256(mount_dir.encode()).hexdigest()[:20]

    def record_path(self, mount_dir: str) -> str:
        return os.path.join(self.dir, self.key(mount_dir) + ".json")

    def supervisor_log(self, mount_dir: str) -> str:
        return os.path.join(paths.runtime_dir(), f"supervisor-{self.key(mount_dir)}.log")

    @contextlib.contextmanager
    def locked(self, mount_dir: str, timeout_s: float = 30.0) -> Iterator[None]:
        """Hold the directory's lock; bounded so a wedged peer cannot hang us."""
        fd = os.open(os.path.join(self.dir, self.key(mount_dir) + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if not paths.lock_within(fd, timeout_s):
                raise RegistryError(
                    f"the registry lock for {mount_dir} stayed busy for {timeout_s:g}s; "
                    "another mountctl process is stuck: see `mountctl status`",
                    mount_dir=mount_dir, timeout_s=timeout_s)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def read(self, mount_dir: str) -> MountRecord | None:
        try:
            with open(self.record_path(mount_dir)) as f:
                return MountRecord.from_json(json.load(f))
        except (OSError, ValueError, TypeError, RegistryError):
            return None

    def write(self, record: MountRecord) -> None:
        paths.write_private_json(self.record_path(record.mount_dir), record.to_json())

    def modify(self, mount_dir: str, change: Callable[[MountRecord], MountRecord]) -> MountRecord | None:
        """Read, change and write one record under its lock, so concurrent changes never lose each other."""
        with self.locked(mount_dir):
            record = self.read(mount_dir)
            if record is None:
                return None
            record = change(record)
            self.write(record)
            return record

    def update(self, mount_dir: str, **changes: Any) -> MountRecord | None:
        return self.modify(mount_dir, lambda record: record.replace(**changes))

    def remove(self, mount_dir: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.record_path(mount_dir))

    def records(self) -> list[MountRecord]:
        found = []
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".json"):
                try:
                    with open(os.path.join(self.dir, name)) as f:
                        found.append(MountRecord.from_json(json.load(f)))
                except (OSError, ValueError, TypeError, RegistryError):
                    continue
        return found
