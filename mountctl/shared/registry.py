"""The node-wide registry of shared mounts: one typed, frozen record per mount directory.

Records live in ``$MOUNTCTL_HOME/mounts`` and change only under an exclusive
``flock`` of the directory's lock file, so processes racing for the same mount
(DDP ranks, jobs) see one consistent story.  A record names its supervisor
process, the mount program's pid, the state, and the holders: processes using
the mount, each identified by pid and start time so that a recycled pid never
counts as alive.

Whether a record's supervisor still runs, and clearing what a dead one left (its mount program, its mount, its
record), is decided here and only under the lock: `Registry.claim` is that one transaction.
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
from ..mounts.fusectl import force_clear
from ..mounts.mounttable import find_mount
from ..mounts.watchdog import WATCHDOG_INTERVAL_S
from ..processes import process_alive, same_process

__all__ = ["Registry", "MountRecord", "Claim", "SharedState", "SHARED_STATES", "clear_abandoned"]

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
    # The program's identity (pid, start time and start ticks: processes.process_identity), which a step of the
    # wall clock does not make unrecognizable; None in a record written before it was kept, or while unknown.
    program: dict[str, Any] | None = None
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

    def supervised(self) -> bool:
        """Its supervisor still runs (pid and start time: a recycled pid never counts)."""
        return process_alive(self.supervisor)

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


@dataclass(frozen=True)
class Claim:
    """What `Registry.claim` found under the lock."""

    record: MountRecord | None  # the record of a live supervisor; None: no mount is managed here now
    cleared: bool = False  # a dead supervisor's leftovers were just cleared


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

    @contextlib.contextmanager
    def claim(self, mount_dir: str) -> Iterator[Claim]:
        """The one transaction on a mount directory: lock, read, check the supervisor is alive, clear what a
        dead one abandoned.  The lock is held until the block ends, so what the caller writes there rests on
        that check: a check made before taking the lock could clear a mount that started meanwhile."""
        with self.locked(mount_dir):
            record = self.read(mount_dir)
            if record is not None and clear_abandoned(mount_dir, record, self):
                yield Claim(None, cleared=True)
            else:
                yield Claim(record)

    def clear_if_abandoned(self, mount_dir: str) -> bool:
        """For one who saw the supervisor die, outside the lock: the claim, also clearing a mount left here
        without a record.  False when a live supervisor has the directory again."""
        with self.locked(mount_dir):
            return clear_abandoned(mount_dir, self.read(mount_dir), self)

    def live(self, mount_dir: str) -> MountRecord | None:
        """The record while its supervisor lives, at a glance without the lock: for waiting and refusing, never
        for a change."""
        record = self.read(mount_dir)
        return record if record is not None and record.supervised() else None

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


def _is_the_program(process: Any, record: MountRecord) -> bool:
    """``process`` is the record's mount program, not a later process with its pid: by the program's identity
    where the record has it (a step of the wall clock does not change it), else by a start no earlier than the
    record's (an older record; the wall clock may have moved since)."""
    if record.program is not None and record.program.get("pid") == process.pid:
        return same_process(process, record.program)
    return bool(process.create_time() >= record.created_at - 1)


def clear_abandoned(mount_dir: str, record: MountRecord | None, registry: Registry) -> bool:
    """Clean up after a supervisor that died: its mount program, its mount, its record.  Caller holds the lock.

    The liveness check is made here, on the record read under the caller's lock.  Returns False (and clears
    nothing) when the record's supervisor is alive.
    """
    if record is not None and record.supervised():
        return False
    if record is not None:
        if record.program_pid:
            import psutil

            with contextlib.suppress(psutil.Error):
                process = psutil.Process(record.program_pid)
                if _is_the_program(process, record):
                    process.kill()
        registry.remove(mount_dir)
    if find_mount(mount_dir) is not None:
        force_clear(mount_dir)
    return True
