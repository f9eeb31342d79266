"""The detached supervisor of one shared mount: ``python -m mountctl.shared.supervisor MOUNT_DIR LOG``.

It owns the mount program (as a ``Mount`` with its watchdog on), publishes
every event in the registry record, and ends the mount when nobody holds it
any more: holders that released it, or whose processes died (pid liveness, so
a SIGKILLed DDP rank is reclaimed too), or an explicit ``mountctl unmount``.
SIGTERM, SIGINT and SIGHUP unmount and exit.  When mounting fails it leaves
the error in the record until every waiter has read it, then removes it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from ..errors import MountctlError
from ..mounts.mount import Mount
from ..mounts.spec import MountSpec
from ..processes import process_alive, process_identity
from ..redaction import redact
from .registry import MountRecord, Registry

log = logging.getLogger("mountctl")

POLL_S = 0.25
FAILED_RECORD_KEPT_S = 10.0
FAILED_RECORD_MIN_S = 2.0


def _program_identity(record: MountRecord, pid: int | None) -> dict[str, Any] | None:
    """The identity of the program ``pid``: the record's where it names that pid, else read now (None where
    there is no program or it is gone already)."""
    if pid is None:
        return None
    if record.program is not None and record.program.get("pid") == pid:
        return record.program
    import psutil

    try:
        return process_identity(pid)
    except psutil.Error:
        return None


def _published(mount: Mount, event: dict[str, Any]) -> Any:
    """The record change that goes with one event: backend and log always travel with the state."""

    def change(record: MountRecord) -> MountRecord:
        changes: dict[str, Any] = {"restarts": mount.restarts, "program_pid": mount.pid,
                                   "program": _program_identity(record, mount.pid), "backend": mount.backend,
                                   "log_path": mount.log_path, "cache": mount.cache,
                                   "cache_note": mount.cache_note, "program_version": mount.program_version,
                                   "memory_mb": mount.memory_mb, "memory_note": mount.memory_note}
        kind = event["event"]
        if kind in ("dead", "unresponsive", "unauthorized", "restart-failed"):
            changes.update(state="recovering", last_error=event["detail"])
        elif kind == "gave-up":
            changes.update(state="failed", last_error=event["detail"],
                           error={"type": "MountFailed", "message": f"the watchdog gave up: {event['detail']}"})
        elif kind in ("remounted", "mounted"):
            changes.update(state="mounted", since=event["time"])
        if record.state == "stopping":  # a late watchdog event must not reopen a mount being taken down to joiners
            changes.pop("state", None)
        return record.with_event(event, **changes)

    return change


def serve(mount_dir: str, registry: Registry | None = None) -> int:
    registry = registry or Registry()
    record = registry.read(mount_dir)
    if record is None:
        return 2
    spec = MountSpec.from_dict(record.spec)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())
    mount: Mount

    def publish(event: dict[str, Any]) -> None:
        # Read, change and write under the record's lock: concurrent events must not lose each other.
        registry.modify(mount_dir, _published(mount, event))

    mount = Mount(spec, watchdog=record.watchdog, watchdog_interval_s=record.watchdog_interval_s, on_event=publish,
                  guard=None)
    try:
        mount.start()
    except Exception as exc:  # report every failure to the waiting clients with its own class
        kind = type(exc).__name__ if isinstance(exc, MountctlError) else "MountFailed"
        message = str(exc) if isinstance(exc, MountctlError) else f"the supervisor failed: {exc!r}"
        registry.update(mount_dir, state="failed", error={"type": kind, "message": redact(message)})
        _remove_when_waiters_left(registry, mount_dir, stop)
        return 1
    try:
        while not stop.wait(POLL_S):
            if mount.gone_reason:  # its directory vanished: end with the reason recorded, never retry
                log.error("%s", mount.gone_reason)
                registry.update(mount_dir, state="failed", last_error=mount.gone_reason,
                                error={"type": "MountDirGone", "message": redact(mount.gone_reason)})
                mount.stop()
                _remove_when_waiters_left(registry, mount_dir, stop)
                return 1
            if _stopping_as_nobody_holds(registry, mount_dir):
                break
    finally:
        shut_down(registry, mount_dir, mount)
    return 0


def shut_down(registry: Registry, mount_dir: str, mount: Any) -> None:
    """Mark the record stopping, stop the mount, remove the record: each step runs even when one before failed."""
    try:
        registry.update(mount_dir, state="stopping")
    except Exception as exc:  # a busy lock must not leave the mount program running
        log.warning("could not mark %s as stopping: %r", mount_dir, exc)
    try:
        mount.stop()
    finally:
        _remove_own_record(registry, mount_dir)


def _remove_own_record(registry: Registry, mount_dir: str) -> None:
    with registry.locked(mount_dir):
        current = registry.read(mount_dir)
        if current is not None and (current.supervisor or {}).get("pid") == os.getpid():
            registry.remove(mount_dir)


def _remove_when_waiters_left(registry: Registry, mount_dir: str, stop: threading.Event) -> None:
    """Keep the failure readable until the waiting holders have seen it (bounded), then remove it."""
    started = time.monotonic()
    while time.monotonic() - started < FAILED_RECORD_KEPT_S and not stop.is_set():
        record = registry.read(mount_dir)
        # A pinned request (`mountctl mount`) has no holder to wait for: give it a moment to read.
        waited_enough = not record.pinned or time.monotonic() - started > FAILED_RECORD_MIN_S if record else True
        if record is None or (waited_enough and not any(process_alive(h) for h in record.holders)):
            break
        time.sleep(0.05)
    _remove_own_record(registry, mount_dir)


def _stopping_as_nobody_holds(registry: Registry, mount_dir: str) -> bool:
    """True when the mount is to end; then the record is already marked `stopping`, in the same hold of the lock
    as the look at its holders: a job joining after that look sees `stopping` and waits for a new mount, instead
    of joining this one and having it taken down under it."""
    with registry.locked(mount_dir):
        record = registry.read(mount_dir)
        if record is None:
            return True
        holders = tuple(h for h in record.holders if process_alive(h))
        if len(holders) != len(record.holders):
            log.info("reclaimed %d holder(s) of %s whose process ended", len(record.holders) - len(holders), mount_dir)
        ending = record.stop_requested or (not holders and not record.pinned)
        if ending or len(holders) != len(record.holders):
            registry.write(record.replace(holders=holders, state="stopping" if ending else record.state))
        return ending


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    code = serve(args[0])
    if code == 0 and len(args) > 1:
        # A clean run leaves no log behind; a failed one keeps it for `mountctl status`/the error message.
        with contextlib.suppress(OSError):
            os.unlink(args[1])
    return code


if __name__ == "__main__":
    sys.exit(main())
