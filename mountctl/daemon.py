"""The detached supervisor of one shared mount: ``python -m mountctl.daemon MOUNT_DIR``.

It owns the mount program (as a ``Mount`` with its watchdog on), publishes
state changes in the registry record, and ends the mount when nobody holds it
any more: holders that released it, or whose processes died (pid liveness, so
a SIGKILLed DDP rank is reclaimed too), or an explicit ``mountctl unmount``.
SIGTERM, SIGINT and SIGHUP unmount and exit.
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

from .errors import MountError
from .registry import Registry, process_alive, process_identity
from .s3env import redact
from .spec import MountSpec
from .supervisor import Mount

log = logging.getLogger("mountctl")

POLL_S = 0.25


def serve(mount_dir: str, registry: Registry | None = None) -> int:
    registry = registry or Registry()
    record = registry.read(mount_dir)
    if record is None:
        return 2
    spec = MountSpec.from_dict(record["spec"])
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())

    def publish(event: dict[str, Any]) -> None:
        # Published with every event: "mounted" is what waiting clients act on, so it must
        # never be visible before the backend and log that go with it.
        changes: dict[str, Any] = {"restarts": mount.restarts, "daemon_pid": mount.pid, "backend": mount.backend,
                                   "log_path": mount.log_path}
        kind = event["event"]
        if kind in ("dead", "unresponsive", "restart-failed", "gave-up"):
            changes.update(state="recovering" if kind != "gave-up" else "failed", last_error=event["detail"])
        elif kind in ("remounted", "mounted"):
            changes.update(state="mounted", since=event["time"])
        events = (registry.read(mount_dir) or {}).get("events", [])[-19:] + [event]
        registry.update(mount_dir, events=events, **changes)

    mount = Mount(spec, watchdog=record.get("watchdog", True),
                  watchdog_interval_s=record.get("watchdog_interval_s", 2.0), on_event=publish, managed=True)
    try:
        mount.start()
    except MountError as exc:
        registry.update(mount_dir, state="failed", error={"type": type(exc).__name__, "message": redact(str(exc))})
        return 1
    except Exception as exc:  # report anything unexpected to the waiting client, then fail
        registry.update(mount_dir, state="failed", error={"type": "MountError", "message": redact(repr(exc))})
        return 1
    registry.update(mount_dir, state="mounted", backend=mount.backend, daemon_pid=mount.pid,
                    log_path=mount.log_path, since=time.time())
    try:
        while not stop.wait(POLL_S):
            if _nobody_holds(registry, mount_dir):
                break
    finally:
        registry.update(mount_dir, state="stopping")
        mount.stop()
        with registry.locked(mount_dir):
            current = registry.read(mount_dir)
            if current is not None and current.get("supervisor", {}).get("pid") == process_identity()["pid"]:
                registry.remove(mount_dir)
    return 0


def _nobody_holds(registry: Registry, mount_dir: str) -> bool:
    with registry.locked(mount_dir):
        record = registry.read(mount_dir)
        if record is None or record.get("stop_requested"):
            return True
        holders = [h for h in record.get("holders", []) if process_alive(h)]
        if len(holders) != len(record.get("holders", [])):
            log.info("reclaimed %d holder(s) of %s whose process ended",
                     len(record.get("holders", [])) - len(holders), mount_dir)
            record["holders"] = holders
            registry.write(mount_dir, record)
        return not holders and not record.get("pinned")


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
