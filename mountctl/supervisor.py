"""``Mount``: runs one mount program as a supervised child and owns its whole life.

Start: check the directory, ask S3 whether the bucket is reachable, start the
program in the foreground in its own process group, and declare it ready only
when the mount table shows its entry at the right path and a bounded probe
through the mount succeeds.  Stop: unmount (lazily after a grace period if
busy), stop the child, remove what was created.  An optional watchdog thread
remounts the same spec when the mount dies or stops answering.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from . import paths
from .backends import Backend, choose_backend
from .doctor import sweep_abandoned_workdirs
from .errors import AlreadyMounted, MountDirError, MountError, MountFailed, MountTimeout, StaleMount
from .fusectl import force_clear, unmount
from .mounttable import find_mount
from .preflight import check_bucket_access
from .probe import probe_path
from .registry import process_identity
from .s3env import S3Settings, redact, resolve
from .spec import MountSpec
from .teardown import spawn_with_parent_death_signal, track, untrack

__all__ = ["Mount", "Health", "HEALTH_STATES", "check_mount_dir"]

log = logging.getLogger("mountctl")

HEALTH_STATES = ("healthy", "slow", "unresponsive", "dead", "unmounted")


@dataclass(frozen=True)
class Health:
    state: str
    latency_s: float | None = None
    error: str = ""
    pid: int | None = None
    checked_at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return self.state in ("healthy", "slow")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _owner_of(path: str) -> str:
    from .registry import Registry

    record = Registry().read(path)
    if record and record.get("state") == "mounted":
        return f", managed by mountctl for {record['uri']}, mount program pid {record.get('daemon_pid')}"
    return ""


def _refuse_managed(spec: MountSpec) -> None:
    """A directory a mountctl supervisor manages is refused; one it is taking down is waited for."""
    from .registry import Registry, process_alive

    registry = Registry()
    deadline = time.monotonic() + spec.unmount_timeout_s + spec.busy_grace_s + 5
    while True:
        record = registry.read(spec.mount_dir)
        if record is None or not process_alive(record.get("supervisor")):
            return
        if record.get("state") != "stopping":
            raise AlreadyMounted(
                f"{spec.mount_dir} is managed by mountctl for {record['uri']} (supervisor pid "
                f"{record['supervisor']['pid']}, state {record.get('state')}); share it with mountctl.mount() "
                f"and the same spec, or run `mountctl unmount {spec.mount_dir}` first"
            )
        if time.monotonic() > deadline:
            raise MountTimeout(f"the mount at {spec.mount_dir} is still being taken down; try again later")
        time.sleep(0.05)


def check_mount_dir(spec: MountSpec, *, managed: bool = False) -> bool:
    """Make the mount directory usable; return True when mountctl created it.

    A dead mount left by a crashed daemon is cleared; a live one is refused.
    ``managed``: the caller is the directory's own supervisor, so its registry record is not a rival.
    """
    path = spec.mount_dir
    if not managed:
        _refuse_managed(spec)
    entry = find_mount(path)
    if entry is not None:
        probe = probe_path(path, spec.probe_timeout_s, list_dir=False)
        if probe.ok:
            raise AlreadyMounted(
                f"{path} is already mounted ({entry.fs_type} from {entry.source}{_owner_of(path)}); "
                f"unmount it first (`mountctl unmount {path}`) or choose another directory"
            )
        log.warning("clearing stale mount at %s (%s): %s", path, entry.fs_type, probe.error)
        result = force_clear(path)
        if not result.ok:
            raise StaleMount(
                f"a dead mount at {path} ({probe.error}) could not be cleared: {result.message}; "
                f"run `fusermount3 -uz {path}` or `umount -l {path}` as its owner"
            )
    if os.path.lexists(path):
        if not os.path.isdir(path):
            raise MountDirError(f"mount directory {path} exists and is not a directory; remove it or choose another")
        try:
            if any(os.scandir(path)):
                raise MountDirError(
                    f"mount directory {path} is not empty; mounting would hide its files: "
                    "choose an empty or new directory"
                )
        except PermissionError:
            raise MountDirError(f"mount directory {path} is not readable by this user") from None
        return False
    try:
        os.makedirs(path, mode=0o755)
    except OSError as exc:
        raise MountDirError(f"cannot create mount directory {path}: {exc.strerror}") from None
    return True


class Mount:
    """One supervised FUSE mount of ``spec``; use as a context manager or call start/stop."""

    def __init__(
        self,
        spec: MountSpec,
        *,
        settings: S3Settings | None = None,
        watchdog: bool = False,
        watchdog_interval_s: float = 5.0,
        max_restarts: int = 10,
        preflight: bool = True,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        managed: bool = False,
    ) -> None:
        self.spec = spec
        self._settings = settings
        self._backend: Backend | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._workdir: str | None = None
        self._created_dir = False
        self._preflight = preflight
        self._watchdog_enabled = watchdog
        self._watchdog_interval_s = watchdog_interval_s
        self._max_restarts = max_restarts
        self._watchdog: threading.Thread | None = None
        self._stopping = threading.Event()
        self._lock = threading.RLock()
        self._on_event = on_event
        self._managed = managed
        self.restarts = 0
        self.last_error = ""
        self.events: list[dict[str, Any]] = []
        self.started_at: float | None = None
        self._owner_pid = os.getpid()

    # -- public attributes ------------------------------------------------------------

    @property
    def path(self) -> str:
        return self.spec.mount_dir

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

    @property
    def backend(self) -> str:
        return self._backend.name if self._backend else self.spec.backend

    @property
    def log_path(self) -> str | None:
        return os.path.join(self._workdir, "logs", "mount.log") if self._workdir else None

    @property
    def settings(self) -> S3Settings:
        if self._settings is None:
            self._settings = resolve(endpoint_url=self.spec.endpoint_url, region=self.spec.region)
        return self._settings

    def __enter__(self) -> "Mount":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Mount({self.spec.uri!r} at {self.path!r}, backend={self.backend!r}, pid={self.pid})"

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> "Mount":
        with self._lock:
            if self._child is not None:
                return self
            self._stopping.clear()
            self.started_at = None
            self._backend = choose_backend(self.spec.backend)
            sweep_abandoned_workdirs()
            log.info("mounting %s at %s with %s", self.spec.uri, self.path, self._backend.name)
            self._created_dir = check_mount_dir(self.spec, managed=self._managed)
            try:
                if self._preflight:
                    check_bucket_access(self.settings, self.spec.bucket, self.spec.prefix,
                                        timeout_s=min(10.0, self.spec.mount_timeout_s))
                self._workdir = tempfile.mkdtemp(prefix="mount-", dir=paths.runtime_dir())
                os.makedirs(os.path.join(self._workdir, "logs"), mode=0o700)
                # Lets the next start (or `mountctl cleanup`) tidy up if this process is SIGKILLed.
                with open(os.path.join(self._workdir, "owner.json"), "w") as owner:
                    json.dump({**process_identity(), "mount_dir": self.path}, owner)
                self._spawn_and_wait()
            except BaseException:
                self._cleanup_files()
                raise
            self.started_at = time.time()
            track(self)
            self._event("mounted", f"{self._backend.name} pid {self.pid}")
            if self._watchdog_enabled:
                self._watchdog = threading.Thread(target=self._watch, name=f"mountctl-watchdog:{self.path}",
                                                  daemon=True)
                self._watchdog.start()
            return self

    def stop(self) -> None:
        """Unmount and stop the child; safe to call twice and after a failed start."""
        if os.getpid() != self._owner_pid:
            return  # a forked copy of this object (DataLoader worker) does not own the mount
        self._stopping.set()
        watchdog = self._watchdog
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.join(timeout=self.spec.mount_timeout_s + 5)
        with self._lock:
            if self._child is None and self._workdir is None:
                return
            self._unmount_politely()
            self._stop_child()
            if find_mount(self.path) is not None:
                force_clear(self.path)
            self._event("unmounted", "")
            self._cleanup_files()
            untrack(self)

    def health(self, timeout_s: float | None = None) -> Health:
        """Bounded: answers within ``timeout_s`` (default: spec.probe_timeout_s) even if the mount hangs."""
        return mount_health(self.path, self._backend, self._child, timeout_s or self.spec.probe_timeout_s)

    # -- internals ----------------------------------------------------------------------

    def _spawn_and_wait(self) -> None:
        assert self._backend is not None and self._workdir is not None
        backend, spec = self._backend, self.spec
        argv = backend.command(spec, self.settings, self._workdir)
        env = backend.environment(spec, self.settings, self._workdir)
        log_path = self.log_path
        assert log_path is not None
        with open(log_path, "ab") as log_file:
            log_file.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting {redact(' '.join(argv))}\n".encode())
            log_file.flush()
            # The kernel stops the program when this process dies, even by SIGKILL.
            self._child = spawn_with_parent_death_signal(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True,
            )
        try:
            self._wait_until_mounted()
        except BaseException:
            self._stop_child()
            force_clear(self.path)
            raise

    def _wait_until_mounted(self) -> None:
        assert self._backend is not None and self._child is not None
        deadline = time.monotonic() + self.spec.mount_timeout_s
        last = "the mount never appeared in /proc/self/mountinfo"
        while True:
            if self._stopping.is_set() and self.started_at is not None:
                raise MountFailed(f"stop() was called while remounting {self.path}")
            code = self._child.poll()
            if code is not None:
                raise MountFailed(
                    f"{self._backend.program} exited with status {code} before {self.path} was ready: "
                    f"{self._log_tail() or 'it printed nothing'} (full log: {self.log_path})"
                )
            entry = find_mount(self.path)
            if entry is not None and self._backend.owns(entry):
                remaining = deadline - time.monotonic()
                probe = probe_path(self.path, max(0.1, min(remaining, self.spec.probe_timeout_s * 2)))
                if probe.ok:
                    return
                last = f"mounted, but reading it failed: {probe.error}"
            if time.monotonic() >= deadline:
                raise MountTimeout(
                    f"{self._backend.name} did not mount {self.spec.uri} at {self.path} within "
                    f"{self.spec.mount_timeout_s:g}s ({last}); its log says: {self._log_tail() or 'nothing'}; "
                    "raise mount_timeout_s if the store is slow"
                )
            time.sleep(0.05)

    def _log_tail(self, lines: int = 6) -> str:
        texts = []
        if self._workdir:
            for root, _, files in os.walk(os.path.join(self._workdir, "logs")):
                for name in sorted(files):
                    try:
                        with open(os.path.join(root, name), "rb") as f:
                            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
                            texts += f.read().decode(errors="replace").splitlines()
                    except OSError:
                        continue
        texts = [t.strip() for t in texts if t.strip() and not t.startswith("--- ")]
        return redact(" | ".join(texts[-lines:]))

    def _unmount_politely(self) -> None:
        if find_mount(self.path) is None:
            return
        deadline = time.monotonic() + self.spec.busy_grace_s
        while True:
            result = unmount(self.path, timeout_s=self.spec.unmount_timeout_s)
            if result.ok:
                return
            if not result.busy or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        log.warning("%s is still busy after %gs (%s): detaching it lazily", self.path,
                    self.spec.busy_grace_s, result.message)
        force_clear(self.path)

    def _stop_child(self) -> None:
        child, self._child = self._child, None
        if child is None or child.poll() is not None:
            return
        try:
            os.killpg(child.pid, signal.SIGCONT)  # a stopped daemon cannot handle SIGTERM
            os.killpg(child.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            child.wait(timeout=self.spec.unmount_timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("%s (pid %d) ignored SIGTERM for %gs: killing it", self.backend, child.pid,
                        self.spec.unmount_timeout_s)
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.wait(timeout=5)

    def _cleanup_files(self) -> None:
        workdir, self._workdir = self._workdir, None
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        if self._created_dir and find_mount(self.path) is None:
            try:
                os.rmdir(self.path)
            except OSError:
                pass
            self._created_dir = False

    # -- watchdog -----------------------------------------------------------------------

    def _event(self, kind: str, detail: str) -> None:
        event = {"time": time.time(), "event": kind, "detail": redact(detail), "restarts": self.restarts,
                 "pid": self.pid}
        self.events.append(event)
        log.info("%s %s: %s", self.path, kind, event["detail"])
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:  # a broken listener must not take the mount down
                log.exception("event listener failed")

    def _watch(self) -> None:
        backoff = 0.5
        while not self._stopping.wait(self._watchdog_interval_s):
            health = self.health()
            if health.ok:
                backoff = 0.5
                continue
            self.last_error = f"{health.state}: {health.error}"
            self._event(health.state, health.error)
            while not self._stopping.is_set():
                if self.restarts >= self._max_restarts:
                    self._event("gave-up", f"{self.restarts} restarts; last error: {self.last_error}")
                    return
                try:
                    self.recover()
                    backoff = 0.5
                    break
                except MountError as exc:
                    self.last_error = str(exc)
                    self._event("restart-failed", f"{exc}; next try in {backoff:g}s")
                    if self._stopping.wait(backoff):
                        return
                    backoff = min(backoff * 2, 30.0)

    def recover(self) -> None:
        """Clear a dead or wedged mount and mount the same spec at the same path again."""
        with self._lock:
            if self._stopping.is_set():
                return
            started = time.monotonic()
            child, self._child = self._child, None
            if child is not None and child.poll() is None:
                try:
                    os.killpg(child.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                child.wait(timeout=5)
            if find_mount(self.path) is not None:
                result = force_clear(self.path)
                if not result.ok:
                    raise StaleMount(f"could not clear {self.path}: {result.message}")
            self.restarts += 1
            self._spawn_and_wait()
            self._event("remounted", f"after {time.monotonic() - started:.2f}s, pid {self.pid}")


def mount_health(path: str, backend: Backend | None, child: "subprocess.Popen[bytes] | int | None",
                 timeout_s: float) -> Health:
    """Classify a mount without ever blocking on it for longer than ``timeout_s``."""
    pid = child if isinstance(child, int) else (child.pid if child is not None else None)
    alive = _pid_alive(child)
    entry = find_mount(path)
    if entry is None:
        return Health("dead" if pid and not alive else "unmounted", pid=pid,
                      error="" if alive or not pid else "mount program exited")
    if backend is not None and not backend.owns(entry):
        return Health("unmounted", pid=pid, error=f"{path} now holds a {entry.fs_type} mount from {entry.source}")
    if pid is not None and not alive:
        return Health("dead", pid=pid, error="mount program exited; the mount is left behind (ENOTCONN)")
    probe = probe_path(path, timeout_s, list_dir=False)
    if probe.timed_out:
        return Health("unresponsive", probe.latency_s, probe.error, pid)
    if not probe.ok:
        state = "dead" if probe.errno in (errno.ENOTCONN, errno.ECONNABORTED) else "unresponsive"
        return Health(state, probe.latency_s, probe.error, pid)
    state = "slow" if probe.latency_s > timeout_s / 2 else "healthy"
    return Health(state, probe.latency_s, "", pid)


def _pid_alive(child: "subprocess.Popen[bytes] | int | None") -> bool:
    if child is None:
        return False
    if isinstance(child, subprocess.Popen):
        return child.poll() is None
    try:
        import psutil

        return psutil.Process(child).status() != psutil.STATUS_ZOMBIE
    except Exception:  # psutil.NoSuchProcess and friends
        return False
