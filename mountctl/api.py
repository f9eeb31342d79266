"""``mountctl.mount()``: one line to get a shared, supervised mount of an S3 prefix.

Every process on the node asking for the same spec at the same directory
shares one mount: the first starts a detached supervisor (``mountctl.daemon``),
the others join it as holders, and the last one to leave unmounts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from . import errors, paths
from .backends import get_backend
from .errors import AlreadyMounted, MountError, MountFailed, MountTimeout, RegistryError
from .fusectl import force_clear
from .mounttable import find_mount
from .registry import Registry, process_alive, process_identity
from .spec import MountSpec
from .supervisor import Health, mount_health
from .teardown import track, untrack

__all__ = ["mount", "SharedMount", "acquire", "release", "request_unmount", "clear_abandoned",
           "default_mount_dir"]


def default_mount_dir(uri: str, backend: str) -> str:
    """A stable directory per (uri, backend), so separate processes find the same mount."""
    digest = hashlib.sha256(f"{uri}|{backend}".encode()).hexdigest()[:10]
    bucket = uri[len("s3://"):].split("/", 1)[0]
    return os.path.join(paths.managed_mounts_dir(), f"{bucket}-{digest}")


class SharedMount:
    """A handle on a registry-managed mount; attributes read the live record."""

    def __init__(self, spec: MountSpec, registry: Registry, holder: dict[str, Any] | None) -> None:
        self.spec = spec
        self._registry = registry
        self._holder = holder

    @property
    def path(self) -> str:
        return self.spec.mount_dir

    def record(self) -> dict[str, Any]:
        return self._registry.read(self.path) or {}

    @property
    def pid(self) -> int | None:
        return self.record().get("daemon_pid")

    @property
    def backend(self) -> str:
        return self.record().get("backend") or self.spec.backend

    @property
    def log_path(self) -> str | None:
        return self.record().get("log_path")

    @property
    def restarts(self) -> int:
        return int(self.record().get("restarts", 0))

    def health(self, timeout_s: float | None = None) -> Health:
        record = self.record()
        backend = get_backend(record["backend"]) if record.get("backend") else None
        return mount_health(self.path, backend, record.get("daemon_pid"), timeout_s or self.spec.probe_timeout_s)

    def release(self, *, wait: bool = True) -> None:
        if self._holder is not None and self._holder["pid"] == os.getpid():
            holder, self._holder = self._holder, None
            untrack(self)
            release(self.spec.mount_dir, holder, registry=self._registry,
                    wait_s=self.spec.unmount_timeout_s + self.spec.busy_grace_s + 10 if wait else 0)

    stop = release

    def __enter__(self) -> "SharedMount":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"SharedMount({self.spec.uri!r} at {self.path!r}, backend={self.backend!r}, pid={self.pid})"


def _supervisor_alive(record: dict[str, Any]) -> bool:
    return process_alive(record.get("supervisor"))


def clear_abandoned(mount_dir: str, record: dict[str, Any] | None, registry: Registry) -> None:
    """Clean up after a supervisor that died: its daemon, its mount, its record.  Caller holds the lock."""
    if record is not None:
        daemon = record.get("daemon_pid")
        if daemon:
            import psutil

            with contextlib.suppress(psutil.Error):
                process = psutil.Process(daemon)
                if process.create_time() >= record.get("created_at", 0) - 1:
                    process.kill()
        registry.remove(mount_dir)
    if find_mount(mount_dir) is not None:
        force_clear(mount_dir)


def acquire(spec: MountSpec, *, pinned: bool = False, holder_pid: int | None = None, watchdog: bool = True,
            watchdog_interval_s: float = 2.0, registry: Registry | None = None) -> SharedMount:
    """Join the node's mount of ``spec`` (starting it if needed) and wait until it is ready."""
    registry = registry or Registry()
    holder = None if pinned and holder_pid is None else process_identity(holder_pid)
    with registry.locked(spec.mount_dir):
        record = registry.read(spec.mount_dir)
        if record is not None and not _supervisor_alive(record):
            clear_abandoned(spec.mount_dir, record, registry)
            record = None
        if record is not None and record.get("state") in ("stopping", "failed"):
            raise RegistryError(f"the mount at {spec.mount_dir} is {record['state']}; try again in a moment")
        if record is not None:
            if record["identity"] != spec.identity():
                raise AlreadyMounted(
                    f"{spec.mount_dir} is already managed for {record['uri']} (backend {record.get('backend')}) "
                    f"with different options than requested for {spec.uri}; use another directory, or "
                    f"`mountctl unmount {spec.mount_dir}` first"
                )
            if holder is not None:
                record.setdefault("holders", []).append(holder)
            record["pinned"] = record.get("pinned", False) or pinned
            registry.write(spec.mount_dir, record)
        else:
            record = {
                "uri": spec.uri, "mount_dir": spec.mount_dir, "spec": spec.to_dict(), "identity": spec.identity(),
                "backend": None if spec.backend == "auto" else spec.backend, "state": "starting",
                "created_at": time.time(), "since": None, "restarts": 0, "last_error": "",
                "holders": [holder] if holder else [], "pinned": pinned, "watchdog": watchdog,
                "watchdog_interval_s": watchdog_interval_s, "events": [],
            }
            registry.write(spec.mount_dir, record)
            supervisor = _spawn_supervisor(spec.mount_dir, registry)
            record["supervisor"] = process_identity(supervisor.pid)
            registry.write(spec.mount_dir, record)
    handle = SharedMount(spec, registry, holder)
    if holder is not None:
        track(handle)
    try:
        _wait_until_ready(spec, registry)
    except BaseException:
        handle.release(wait=False)
        raise
    return handle


def _spawn_supervisor(mount_dir: str, registry: Registry) -> subprocess.Popen[bytes]:
    log_path = os.path.join(paths.runtime_dir(), f"supervisor-{registry.key(mount_dir)}.log")
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "mountctl.daemon", mount_dir, log_path],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
            env={**os.environ, "MOUNTCTL_HOME": paths.home()},
        )


def _wait_until_ready(spec: MountSpec, registry: Registry) -> None:
    # The supervisor has its own mount timeout; allow for its start-up and preflight on top.
    deadline = time.monotonic() + spec.mount_timeout_s + 20
    while True:
        record = registry.read(spec.mount_dir)
        if record is None:
            raise MountFailed(f"the supervisor of {spec.mount_dir} ended before the mount was ready; "
                              f"see {paths.runtime_dir()}")
        state = record.get("state")
        if state == "mounted":
            return
        if state == "failed":
            error = record.get("error") or {}
            cls = getattr(errors, str(error.get("type")), MountError)
            if not (isinstance(cls, type) and issubclass(cls, MountError)):
                cls = MountError
            with registry.locked(spec.mount_dir):
                registry.remove(spec.mount_dir)
            raise cls(error.get("message", "mount failed"))
        if "supervisor" in record and not _supervisor_alive(record):
            with registry.locked(spec.mount_dir):
                clear_abandoned(spec.mount_dir, registry.read(spec.mount_dir), registry)
            raise MountFailed(f"the supervisor of {spec.mount_dir} died while mounting; see "
                              f"{os.path.join(paths.runtime_dir(), 'supervisor-' + registry.key(spec.mount_dir) + '.log')}")
        if time.monotonic() > deadline:
            request_unmount(spec.mount_dir, registry=registry, wait_s=spec.unmount_timeout_s + 5)
            raise MountTimeout(f"{spec.uri} was not mounted at {spec.mount_dir} within "
                               f"{spec.mount_timeout_s + 20:g}s; see `mountctl status`")
        time.sleep(0.05)


def release(mount_dir: str, holder: dict[str, Any], *, registry: Registry | None = None, wait_s: float = 0) -> None:
    """Drop one hold; when it was the last, wait up to ``wait_s`` for the unmount to finish."""
    registry = registry or Registry()
    with registry.locked(mount_dir):
        record = registry.read(mount_dir)
        if record is None:
            return
        holders = [h for h in record.get("holders", []) if h != holder]
        record["holders"] = holders
        registry.write(mount_dir, record)
        last = not record.get("pinned") and not any(process_alive(h) for h in holders)
    if last and wait_s > 0:
        _wait_until_gone(mount_dir, registry, wait_s)


def request_unmount(mount_dir: str, *, registry: Registry | None = None, wait_s: float = 30.0) -> bool:
    """Ask the supervisor to unmount regardless of holders; False when nothing was managed there."""
    registry = registry or Registry()
    with registry.locked(mount_dir):
        record = registry.read(mount_dir)
        if record is None:
            return False
        if not _supervisor_alive(record):
            clear_abandoned(mount_dir, record, registry)
            return True
        record.update(stop_requested=True, pinned=False)
        registry.write(mount_dir, record)
    _wait_until_gone(mount_dir, registry, wait_s)
    return True


def _wait_until_gone(mount_dir: str, registry: Registry, wait_s: float) -> None:
    """Wait until the supervisor has unmounted, removed its record and exited."""
    deadline = time.monotonic() + wait_s
    supervisor = (registry.read(mount_dir) or {}).get("supervisor")
    while time.monotonic() < deadline:
        record = registry.read(mount_dir)
        if record is not None and record.get("supervisor") != supervisor:
            return  # someone else has started a new mount here meanwhile
        if not process_alive(supervisor):
            if record is not None:
                with registry.locked(mount_dir):
                    clear_abandoned(mount_dir, registry.read(mount_dir), registry)
            return
        time.sleep(0.05)
    raise MountTimeout(f"the mount at {mount_dir} was not taken down within {wait_s:g}s; "
                       "see `mountctl status`, or run `mountctl cleanup`")


@contextlib.contextmanager
def mount(uri: str, mount_dir: str | None = None, *, backend: str = "auto", shared: bool = True,
          watchdog: bool = True, **options: Any) -> Iterator[Any]:
    """Mount ``uri`` for the duration of the block; ``m.path`` is the prefix as a directory.

    With ``shared=True`` (the default) processes asking for the same spec share one
    mount under a detached supervisor that remounts it if it dies; with
    ``shared=False`` the mount program is this process's own child (a ``Mount``).
    """
    directory = mount_dir or default_mount_dir(uri, backend)
    spec = MountSpec(uri=uri, mount_dir=directory, backend=backend, **options)
    if not shared:
        from .supervisor import Mount

        with Mount(spec, watchdog=watchdog) as own:
            yield own
        return
    handle = acquire(spec, watchdog=watchdog)
    try:
        yield handle
    finally:
        handle.release()
