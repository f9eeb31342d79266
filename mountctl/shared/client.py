"""Joining and leaving node-shared mounts: acquire, release, unmount on request, clear the abandoned.

Every process on the node asking for the same request at the same directory
shares one mount: the first starts a detached supervisor
(``mountctl.shared.supervisor``), the others join it as holders, and the last
one to leave unmounts.  "The same request" covers the mount options and what
the environment resolved to: endpoint, region, addressing style and a keyed,
one-way fingerprint of the credentials.  Requests that differ get different
default directories, and are refused at one explicit directory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import time
from typing import Any

from .. import errors, paths
from ..backoff import outage_bound_s
from ..errors import AlreadyMounted, MountctlError, MountFailed, MountTimeout
from ..mounts.backends import get_backend
from ..mounts.health import Health, mount_health
from ..mounts.spec import MountSpec
from ..mounts.watchdog import WATCHDOG_INTERVAL_S
from ..processes import CHILD_CWD, process_alive, process_identity, python_child_env, python_module_argv
from ..s3 import S3Settings, parse_s3_uri, resolve
from ..teardown import track, untrack
from .registry import MountRecord, Registry

__all__ = ["SharedMount", "acquire", "refuse_nested_records", "release", "request_unmount", "default_mount_dir",
           "sharing_identity", "identity_differences", "RegistryGuard"]


log = logging.getLogger("mountctl")


def sharing_identity(spec: MountSpec, settings: S3Settings) -> dict[str, Any]:
    """Everything two requests must agree on to share one mount; no secret in it."""
    return {"options": spec.served(), "s3": settings.identity(paths.node_key())}


def identity_differences(have: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """Which parts differ, described without a secret."""
    found = []
    for group in ("s3", "options"):
        old, new = have.get(group, {}), want.get(group, {})
        for name in sorted(set(old) | set(new)):
            if old.get(name) == new.get(name):
                continue
            if name == "credentials":
                found.append("the credentials")
            else:
                found.append(f"{name} ({old.get(name)!r} there, {new.get(name)!r} requested)")
    return found


def default_mount_dir(uri: str, backend: str, settings: S3Settings, **options: Any) -> str:
    """A stable directory per request, so separate processes making the same request find the same mount."""
    probe = MountSpec(uri=uri, mount_dir="/", backend=backend, **options)
    identity = sharing_identity(probe, settings)
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    return os.path.join(paths.managed_mounts_dir(), f"{parse_s3_uri(uri).bucket}-{digest}")


class SharedMount:
    """A handle on a registry-managed mount; attributes read the live record."""

    def __init__(self, spec: MountSpec, registry: Registry, holder: dict[str, Any] | None) -> None:
        self.spec = spec
        self._registry = registry
        self._holder = holder

    @property
    def path(self) -> str:
        return self.spec.mount_dir

    def record(self) -> MountRecord | None:
        return self._registry.read(self.path)

    @property
    def pid(self) -> int | None:
        record = self.record()
        return record.program_pid if record else None

    @property
    def backend(self) -> str:
        record = self.record()
        return (record.backend if record else None) or self.spec.backend

    @property
    def log_path(self) -> str | None:
        record = self.record()
        return record.log_path if record else None

    @property
    def restarts(self) -> int:
        record = self.record()
        return record.restarts if record else 0

    @property
    def cache(self) -> dict[str, Any] | None:
        """The data cache the program runs with (None: none), as its supervisor recorded it."""
        record = self.record()
        return record.cache if record else None

    def health(self, timeout_s: float | None = None) -> Health:
        record = self.record()
        backend = get_backend(record.backend) if record and record.backend else None
        bound = self.spec.probe_timeout_s if timeout_s is None else timeout_s
        return mount_health(self.path, backend, record.program_pid if record else None, bound)

    def release(self, *, wait: bool = True) -> None:
        if self._holder is not None and self._holder["pid"] == os.getpid():
            holder, self._holder = self._holder, None
            untrack(self)
            release(self.spec.mount_dir, holder, registry=self._registry,
                    wait_s=stop_bound_s(self.spec) if wait else 0)

    def stop(self) -> None:
        self.release()

    def __enter__(self) -> SharedMount:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"SharedMount({self.spec.uri!r} at {self.path!r}, backend={self.backend!r}, pid={self.pid})"


def _recorded_error(record: MountRecord) -> MountctlError:
    """The supervisor's error, re-raised here with its own class (BucketNotFound, MountTimeout, ...)."""
    error = record.error or {}
    cls = getattr(errors, str(error.get("type")), MountFailed)
    if not (isinstance(cls, type) and issubclass(cls, MountctlError)):
        cls = MountFailed
    return cls(error.get("message", "mount failed"), mount_dir=record.mount_dir, log_path=record.log_path)


def acquire(spec: MountSpec, *, settings: S3Settings | None = None, pinned: bool = False,
            holder_pid: int | None = None, watchdog: bool = True, watchdog_interval_s: float = WATCHDOG_INTERVAL_S,
            registry: Registry | None = None) -> SharedMount:
    """Join the node's mount of ``spec`` (starting it if needed) and wait until it is ready.

    A mount being taken down (the last job on the node just left) is waited for, within the bound its
    stop has, and then mounted anew: back-to-back jobs must not fail on each other's teardown.
    """
    registry = registry or Registry()
    settings = settings or resolve(endpoint_url=spec.endpoint_url, region=spec.region)
    identity = sharing_identity(spec, settings)
    holder = None if pinned and holder_pid is None else process_identity(holder_pid)
    while True:
        with registry.claim(spec.mount_dir) as claim:
            stopping = _join_or_start(spec, claim.record, identity, holder, pinned, watchdog, watchdog_interval_s,
                                      registry, settings)
        if stopping is None:
            break
        _wait_until_gone(spec.mount_dir, registry, stop_bound_s(spec), supervisor=stopping)
    handle = SharedMount(spec, registry, holder)
    if holder is not None:
        track(handle)
    try:
        _wait_until_ready(spec, registry)
    except BaseException as exc:
        # Interrupted (Ctrl-C, SIGTERM), the caller goes on to stop what the mount reads from (the embedded S3, a
        # proxy): wait (bounded) until the supervisor has taken the mount down, so no mount outlives its store.
        handle.release(wait=not isinstance(exc, Exception))
        raise
    ready = registry.read(spec.mount_dir)
    for note in (ready.cache_note, ready.memory_note) if ready is not None else ():
        if note:  # the supervisor's log is not where the user looks
            log.warning("%s: %s", spec.mount_dir, note)
    return handle


def _join_or_start(spec: MountSpec, record: MountRecord | None, identity: dict[str, Any],
                   holder: dict[str, Any] | None, pinned: bool, watchdog: bool, watchdog_interval_s: float,
                   registry: Registry, settings: S3Settings) -> dict[str, Any] | None:
    """Within the registry's claim on the directory: join the live mount ``record`` or start one; a mount being
    stopped is not joined, and its supervisor is returned to be waited for (None when joined or started)."""
    if record is not None:
        differences = identity_differences(record.identity, identity)
        if differences:
            raise AlreadyMounted(
                f"{spec.mount_dir} is already managed for {record.uri} (backend {record.backend}) and "
                f"{', '.join(differences)} differ from this request for {spec.uri}; use another directory "
                f"(or none, to get one of its own), or `mountctl unmount {spec.mount_dir}` first",
                mount_dir=spec.mount_dir)
        if record.state == "failed":
            raise _recorded_error(record)
        if record.state == "stopping":
            return record.supervisor
        registry.write(record.replace(holders=(*record.holders, holder) if holder else record.holders,
                                      pinned=record.pinned or pinned))
        return None
    refuse_nested_records(spec.mount_dir, registry)
    record = MountRecord(uri=spec.uri, mount_dir=spec.mount_dir, spec=spec.to_dict(), identity=identity,
                         backend=None if spec.backend == "auto" else spec.backend,
                         holders=(holder,) if holder else (), pinned=pinned, watchdog=watchdog,
                         watchdog_interval_s=watchdog_interval_s)
    registry.write(record)
    supervisor = _spawn_supervisor(spec.mount_dir, registry, settings)
    registry.write(record.replace(supervisor=process_identity(supervisor.pid)))
    return None


def stop_bound_s(spec: MountSpec) -> float:
    """How long taking a mount down may take: its unmount, the grace a busy mount gets, the program's exit."""
    return spec.unmount_timeout_s + spec.busy_grace_s + 10


def refuse_nested_records(mount_dir: str, registry: Registry) -> None:
    """Refuse a directory inside a managed mount, or holding one, even one still starting (not yet mounted)."""
    target = os.path.abspath(mount_dir).rstrip("/")
    for record in registry.records():
        other = os.path.abspath(record.mount_dir).rstrip("/")
        if other == target or not record.supervised():
            continue
        if target.startswith(other + "/"):
            where = f"is inside {other}, managed by mountctl for {record.uri}"
        elif other.startswith(target + "/"):
            where = f"holds {other}, managed by mountctl for {record.uri}"
        else:
            continue
        raise errors.MountDirError(
            f"mount directory {target} {where}; a mount nested in another dies when the outer one is unmounted: "
            f"choose a directory outside it (or `mountctl unmount {other}` first)", mount_dir=target)


def _spawn_supervisor(mount_dir: str, registry: Registry, settings: S3Settings) -> subprocess.Popen[bytes]:
    log_path = registry.supervisor_log(mount_dir)
    # The supervisor resolves the same settings from this environment: explicit settings
    # given to us reach the mount program too, and never through a command line.
    env = python_child_env({**settings.child_env(), "MOUNTCTL_HOME": paths.home()})
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            python_module_argv("mountctl.shared.supervisor", os.path.abspath(mount_dir), os.path.abspath(log_path)),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, env=env, cwd=CHILD_CWD,
        )


def _wait_until_ready(spec: MountSpec, registry: Registry) -> None:
    # The supervisor has its own mount timeout (extended to the outage bound while the store throttles);
    # allow for its start-up and preflight on top.
    bound = max(spec.mount_timeout_s, outage_bound_s()) + 20
    deadline = time.monotonic() + bound
    while True:
        record = registry.read(spec.mount_dir)
        if record is None:
            raise MountFailed(f"the supervisor of {spec.mount_dir} ended before the mount was ready; "
                              f"see {registry.supervisor_log(spec.mount_dir)}", mount_dir=spec.mount_dir)
        if record.state == "mounted":
            return
        if record.state == "failed":
            # The record stays for the other waiters; the supervisor removes it once they have left.
            raise _recorded_error(record)
        if record.supervisor is not None and not record.supervised():
            registry.clear_if_abandoned(spec.mount_dir)
            raise MountFailed(f"the supervisor of {spec.mount_dir} died while mounting; see "
                              f"{registry.supervisor_log(spec.mount_dir)}", mount_dir=spec.mount_dir)
        if time.monotonic() > deadline:
            request_unmount(spec.mount_dir, registry=registry, wait_s=spec.unmount_timeout_s + 5)
            raise MountTimeout(f"{spec.uri} was not mounted at {spec.mount_dir} within {bound:g}s; "
                               "see `mountctl status`", mount_dir=spec.mount_dir, timeout_s=bound)
        time.sleep(0.05)


def release(mount_dir: str, holder: dict[str, Any], *, registry: Registry | None = None, wait_s: float = 0) -> None:
    """Drop one hold; when it was the last, wait up to ``wait_s`` for the unmount to finish."""
    registry = registry or Registry()
    record = registry.modify(mount_dir, lambda r: r.replace(holders=tuple(h for h in r.holders if h != holder)))
    if record is None:
        return
    last = not record.pinned and not any(process_alive(h) for h in record.holders)
    if last and wait_s > 0 and record.state != "failed":
        _wait_until_gone(mount_dir, registry, wait_s)


def request_unmount(mount_dir: str, *, registry: Registry | None = None, wait_s: float = 30.0) -> bool:
    """Ask the supervisor to unmount regardless of holders; False when nothing was managed there."""
    registry = registry or Registry()
    with registry.claim(mount_dir) as claim:
        if claim.record is None:
            return claim.cleared  # True: a dead supervisor's mount, now cleared
        registry.write(claim.record.replace(stop_requested=True, pinned=False))
    _wait_until_gone(mount_dir, registry, wait_s)
    return True


def _wait_until_gone(mount_dir: str, registry: Registry, wait_s: float, *,
                     supervisor: dict[str, Any] | None = None) -> None:
    """Wait until the supervisor (default: the record's) has unmounted, removed its record and exited."""
    deadline = time.monotonic() + wait_s
    if supervisor is None:
        first = registry.read(mount_dir)
        supervisor = first.supervisor if first else None
    while time.monotonic() < deadline:
        record = registry.read(mount_dir)
        if record is not None and record.supervisor != supervisor:
            return  # someone else has started a new mount here meanwhile
        if not process_alive(supervisor):
            if record is not None:
                registry.clear_if_abandoned(mount_dir)
            return
        time.sleep(0.05)
    raise MountTimeout(f"the mount at {mount_dir} was not taken down within {wait_s:g}s; "
                       "see `mountctl status`, or run `mountctl cleanup`", mount_dir=mount_dir, timeout_s=wait_s)


class RegistryGuard:
    """Keeps an in-process ``Mount`` off directories a shared supervisor manages."""

    def __init__(self, registry: Registry | None = None) -> None:
        self._registry = registry

    @property
    def registry(self) -> Registry:
        return self._registry or Registry()

    def refuse_if_owned(self, spec: MountSpec) -> None:
        """A directory a supervisor manages is refused; one it is taking down is waited for."""
        registry = self.registry
        deadline = time.monotonic() + stop_bound_s(spec)
        while True:
            record = registry.live(spec.mount_dir)
            if record is None:
                return
            if record.state != "stopping":
                pid = (record.supervisor or {}).get("pid")
                raise AlreadyMounted(
                    f"{spec.mount_dir} is managed by mountctl for {record.uri} (supervisor pid {pid}, state "
                    f"{record.state}); share it with mountctl.mount() and the same request, or run "
                    f"`mountctl unmount {spec.mount_dir}` first", mount_dir=spec.mount_dir)
            if time.monotonic() > deadline:
                raise MountTimeout(f"the mount at {spec.mount_dir} is still being taken down; try again later",
                                   mount_dir=spec.mount_dir)
            time.sleep(0.05)

    def describe_owner(self, path: str) -> str:
        record = self.registry.read(path)
        if record and record.state == "mounted":
            return f", managed by mountctl for {record.uri}, mount program pid {record.program_pid}"
        return ""
