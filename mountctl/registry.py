"""The node-wide registry of managed mounts: one JSON record per mount directory.

Records live in ``$MOUNTCTL_HOME/mounts`` and change only under an exclusive
``flock`` of the directory's lock file, so processes racing for the same mount
(DDP ranks, jobs) see one consistent story.  A record names its supervisor
process, the mount program's pid, the state, and the holders: processes using
the mount, each identified by pid and start time so that a recycled pid never
counts as alive.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from typing import Any

from . import paths

__all__ = ["Registry", "process_identity", "process_alive"]


def process_identity(pid: int | None = None) -> dict[str, Any]:
    import psutil

    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "create_time": psutil.Process(pid).create_time()}


def process_alive(identity: dict[str, Any] | None) -> bool:
    if not identity or not identity.get("pid"):
        return False
    import psutil

    try:
        process = psutil.Process(identity["pid"])
        return process.create_time() == identity.get("create_time") and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class Registry:
    def __init__(self, directory: str | None = None) -> None:
        self.dir = directory or paths.registry_dir()

    def key(self, mount_dir: str) -> str:
        return hashlib.sha256(mount_dir.encode()).hexdigest()[:20]

    def record_path(self, mount_dir: str) -> str:
        return os.path.join(self.dir, self.key(mount_dir) + ".json")

    @contextlib.contextmanager
    def locked(self, mount_dir: str, timeout_s: float = 30.0) -> Iterator[None]:
        """Hold the directory's lock; bounded so a wedged peer cannot hang us."""
        fd = os.open(os.path.join(self.dir, self.key(mount_dir) + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        from .errors import RegistryError

                        raise RegistryError(
                            f"the registry lock for {mount_dir} stayed busy for {timeout_s:g}s; "
                            "another mountctl process is stuck: see `mountctl status`"
                        ) from None
                    time.sleep(0.02)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def read(self, mount_dir: str) -> dict[str, Any] | None:
        try:
            with open(self.record_path(mount_dir)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def write(self, mount_dir: str, record: dict[str, Any]) -> None:
        path = self.record_path(mount_dir)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=1)
        os.replace(tmp, path)

    def update(self, mount_dir: str, **changes: Any) -> dict[str, Any] | None:
        with self.locked(mount_dir):
            record = self.read(mount_dir)
            if record is None:
                return None
            record.update(changes)
            self.write(mount_dir, record)
            return record

    def remove(self, mount_dir: str) -> None:
        for suffix in (".json",):
            try:
                os.unlink(os.path.join(self.dir, self.key(mount_dir) + suffix))
            except FileNotFoundError:
                pass

    def records(self) -> list[dict[str, Any]]:
        found = []
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".json"):
                try:
                    with open(os.path.join(self.dir, name)) as f:
                        found.append(json.load(f))
                except (OSError, ValueError):
                    continue
        return found
