"""``Mount``: one mount program run as a supervised child, from start to stop.

Start: check the directory, ask S3 whether the bucket is reachable, start the
program in the foreground in its own process group, and declare it ready only
when the mount table shows its entry at the right path and a bounded probe
through the mount succeeds.  Stop: unmount (lazily after a grace period if
busy), stop the child, remove what was created.  Health, the watchdog and the
scratch directory each live in a module of their own.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..backoff import OUTAGE_BOUND_ENV, outage_bound_s
from ..errors import (
    AlreadyMounted,
    CredentialsError,
    MountctlError,
    MountDirError,
    MountDirGone,
    MountFailed,
    MountTimeout,
    StaleMount,
)
from ..logs import tail
from ..processes import kill_group
from ..redaction import redact
from ..s3 import S3Settings, check_bucket_access, refresh_credentials, resolve
from ..s3.objects import store_throttling
from ..teardown import spawn_with_parent_death_signal, track, untrack
from . import scratch
from .backends import BACKENDS, Backend, choose_backend
from .backends.mount_s3 import sweep_object_list_stores
from .cache import CachePlan, plan_cache, prepare_mount_cache, remove_mount_cache
from .fusectl import force_clear, unmount
from .health import AuthWatch, Health, mount_health
from .mounttable import MountEntry, find_mount, read_mount_table
from .object_list import sweep_unused_lists
from .probe import probe_path
from .spec import MountSpec
from .warm import WARM_AUTO, Warmer, WarmReport, cache_budget_bytes, page_cache_budget_bytes, read_listing, warm_for
from .watchdog import MAX_RESTARTS, WATCHDOG_INTERVAL_S, Watchdog

__all__ = ["Mount", "DirectoryGuard", "check_mount_dir", "set_default_guard"]

log = logging.getLogger("mountctl")
# How the mount programs' logs show a throttling store: s3fs "failed a request(503: ...", rclone "SlowDown".
THROTTLED_LOG = re.compile(r"SlowDown|\(503[:)]|\b503 Service Unavailable|HTTP response code 503")


class DirectoryGuard(Protocol):
    """Who else may own a mount directory (the node-shared layer answers for its supervisors)."""

    def refuse_if_owned(self, spec: MountSpec) -> None: ...

    def describe_owner(self, path: str) -> str: ...


_default_guard: DirectoryGuard | None = None


def set_default_guard(guard: DirectoryGuard | None) -> None:
    """Installed by ``mountctl.shared`` so an in-process Mount never takes a directory a supervisor manages."""
    global _default_guard
    _default_guard = guard


def _is_s3_mount(entry: MountEntry) -> bool:
    return any(backend.owns(entry) for backend in BACKENDS.values())


def refuse_nesting(path: str) -> None:
    """Refuse a mount inside another S3 mount, or over a directory that holds one.

    Nested FUSE mounts outlive their parent badly: unmounting the outer one detaches the
    inner one too, whose program then dies and whose watchdog would retry a directory that
    no longer exists.  Read from the mount table, so mounts of any owner count.
    """
    target = os.path.abspath(path)
    for entry in read_mount_table():
        root = entry.mount_point
        if root == target or not _is_s3_mount(entry):
            continue
        if target.startswith(root.rstrip("/") + "/"):
            raise MountDirError(
                f"mount directory {target} is inside {root}, an S3 mount ({entry.fs_type} from {entry.source}); "
                f"a mount inside another dies when the outer one is unmounted: choose a directory outside {root}",
                mount_dir=target)
        if root.startswith(target.rstrip("/") + "/"):
            raise MountDirError(
                f"mount directory {target} holds {root}, an S3 mount ({entry.fs_type} from {entry.source}); "
                f"mounting over it would hide it: unmount {root} first (`mountctl unmount {root}`) or choose "
                "another directory", mount_dir=target)


def check_mount_dir(spec: MountSpec, guard: DirectoryGuard | None = None) -> bool:
    """Make the mount directory usable; return True when mountctl created it.

    A dead mount left by a crashed daemon is cleared; a live one is refused, and so is a
    directory inside another S3 mount or holding one (``refuse_nesting``).
    """
    path = spec.mount_dir
    if guard is not None:
        guard.refuse_if_owned(spec)
    refuse_nesting(path)
    entry = find_mount(path)
    if entry is not None:
        probe = probe_path(path, spec.probe_timeout_s, list_dir=False)
        if probe.ok:
            owner = guard.describe_owner(path) if guard is not None else ""
            raise AlreadyMounted(
                f"{path} is already mounted ({entry.fs_type} from {entry.source}{owner}); "
                f"unmount it first (`mountctl unmount {path}`) or choose another directory", mount_dir=path)
        log.warning("clearing stale mount at %s (%s): %s", path, entry.fs_type, probe.error)
        result = force_clear(path)
        if not result.ok:
            raise StaleMount(
                f"a dead mount at {path} ({probe.error}) could not be cleared: {result.message}; "
                f"run `fusermount3 -uz {path}` or `umount -l {path}` as its owner", mount_dir=path)
    if os.path.lexists(path):
        if not os.path.isdir(path):
            raise MountDirError(f"mount directory {path} exists and is not a directory; remove it or choose another",
                                mount_dir=path)
        try:
            if any(os.scandir(path)):
                raise MountDirError(f"mount directory {path} is not empty; mounting would hide its files: "
                                    "choose an empty or new directory", mount_dir=path)
        except PermissionError:
            raise MountDirError(f"mount directory {path} is not readable by this user", mount_dir=path) from None
        return False
    try:
        os.makedirs(path, mode=0o755)
    except OSError as exc:
        raise MountDirError(f"cannot create mount directory {path}: {exc.strerror}", mount_dir=path) from None
    return True


_UNSET: Any = object()
# The mount directory itself, looked up after its mount was cleared: these say the parent went with it.
_GONE_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ENOTCONN, errno.ESTALE})
# How often the keys of a mount whose program may not log a refused read are checked with one LIST: well inside
# the outage bound (120 s) that a reader waits on a hung read, for one request per mount every half minute.
KEYS_CHECK_S = 30.0


class Mount:
    """One supervised FUSE mount of ``spec``; use as a context manager or call start/stop."""

    def __init__(
        self,
        spec: MountSpec,
        *,
        settings: S3Settings | None = None,
        watchdog: bool = False,
        watchdog_interval_s: float = WATCHDOG_INTERVAL_S,
        max_restarts: int = MAX_RESTARTS,
        preflight: bool = True,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        guard: DirectoryGuard | None = _UNSET,
    ) -> None:
        self.spec = spec
        self._settings = settings
        self._backend: Backend | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._workdir: str | None = None
        self._cache: str | None = None  # this mount's own data cache directory, removed at stop
        self._cache_plan: CachePlan | None = None  # the cache the program really runs with
        self.cache_note = ""  # why that differs from what the spec asked ("" when it does not)
        self.program_version = ""  # the version line of the binary last started, asked before it ran
        self.memory_mb: int | None = spec.memory_mb  # the bound the program runs with (a program's least, say)
        self.memory_note = ""  # why that differs from what the spec asked ("" when it does not)
        self._created_dir = False
        self._objects_fd: int | None = None  # the object list, held open while the mount runs: in use, not swept
        self._preflight = preflight
        self._watchdog_enabled = watchdog
        self._watchdog_interval_s = watchdog_interval_s
        self._max_restarts = max_restarts
        self._watchdog: Watchdog | None = None
        self._warm: str | None = None  # the warm this mount does (warm_for), set at start
        self._keeps_pages = False  # the kernel keeps its files' pages across opens (Backend.keeps_pages), set at start
        self._warmer: Warmer | None = None
        self.warm_report: WarmReport | None = None  # set when a warm asked for by spec.warm ended
        self._stopping = threading.Event()
        self._lock = threading.RLock()
        self._on_event = on_event
        self._guard = _default_guard if guard is _UNSET else guard
        self._auth_watch = AuthWatch()
        self._auth_refused = ""  # why the next recovery resolves credentials again
        self._keys_checked_at = 0.0  # monotonic; 0: not yet (for programs that may not log a refused read)
        self.restarts = 0
        self.gone_reason = ""  # set when the mount directory vanished: the watchdog stops instead of retrying
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
        return os.path.join(scratch.log_dir(self._workdir), "mount.log") if self._workdir else None

    @property
    def last_error(self) -> str:
        return self._watchdog.last_error if self._watchdog is not None else ""

    @property
    def cache(self) -> dict[str, Any] | None:
        """The data cache the program runs with (None: none), which may differ from what the spec asked."""
        plan = self._cache_plan
        if plan is None:
            return None
        return {"cache_dir": self.spec.cache_dir, "cache_size_mb": plan.size_mb, "keep_free_mb": plan.keep_free_mb,
                "path": self._cache}

    @property
    def settings(self) -> S3Settings:
        if self._settings is None:
            self._settings = resolve(endpoint_url=self.spec.endpoint_url, region=self.spec.region)
        return self._settings

    def __enter__(self) -> Mount:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Mount({self.spec.uri!r} at {self.path!r}, backend={self.backend!r}, pid={self.pid})"

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> Mount:
        with self._lock:
            if self._child is not None:
                return self
            self._stopping.clear()
            self.started_at = None
            self._backend = choose_backend(self.spec.backend)
            self.memory_mb, self.memory_note = self._backend.memory_bound(self.spec)
            if self.memory_note:
                log.warning("%s: %s", self.path, self.memory_note)
            self._keeps_pages = self._backend.keeps_pages(self.spec)
            self._warm = warm_for(self.spec.warm, self._backend.name, bool(self.spec.cache_dir), self._keeps_pages)
            warm_list = read_listing(self._warm) if self._warm else None  # a bad list fails here, early
            self._hold_object_list()
            scratch.sweep_abandoned_workdirs()
            for swept in sweep_unused_lists() + sweep_object_list_stores():  # what mounts killed with SIGKILL left
                log.info("swept %s", swept)
            log.info("mounting %s at %s with %s", self.spec.uri, self.path, self._backend.name)
            self._created_dir = check_mount_dir(self.spec, self._guard)
            try:
                if self._preflight:
                    check_bucket_access(self.settings, self.spec.bucket, self.spec.prefix,
                                        timeout_s=min(10.0, self.spec.mount_timeout_s))
                if self.spec.cache_dir:
                    self._cache = prepare_mount_cache(self.spec.cache_dir, self.path)
                self._workdir = scratch.make_workdir(self.path, cache_dir=self._cache)
                self._plan_cache()
                self._spawn_and_wait()
            except BaseException:
                self._cleanup_files()
                raise
            self.started_at = time.time()
            track(self)
            self.report("mounted", f"{self._backend.name} pid {self.pid}")
            if self._watchdog_enabled:
                self._watchdog = Watchdog(self, interval_s=self._watchdog_interval_s, max_restarts=self._max_restarts,
                                          name=f"mountctl-watchdog:{self.path}")
                self._watchdog.start()
            if self._warm:
                self._start_warm(warm_list)
            return self

    def _start_warm(self, names: list[str] | None) -> None:
        """Read the listed files into the program's cache in the background (``mountctl.mounts.warm``)."""
        automatic = self._warm == WARM_AUTO
        budget = cache_budget_bytes(self._cache_plan.size_mb if self._cache_plan else None)
        into = "the cache"
        if budget is None and self._keeps_pages:
            # No data cache, but the kernel keeps the pages the warm reads for the loader's opens.
            budget, into = page_cache_budget_bytes(), "the page cache"
        if budget is None:
            if not automatic:
                self.report("warm-skipped", "the mount has no data cache to warm: give it cache_dir (--cache-dir)")
            return

        def done(report: WarmReport) -> None:
            self.warm_report = report
            outcome = "warmed" if report.complete else "warm-skipped" if report.outgrown_bytes else "warm-incomplete"
            self.report(outcome, report.summary())

        what = "every file" if names is None else f"{len(names)} files"
        if automatic:
            what += " if all of them fit (automatic for mount-s3; warm='off' or --no-warm stops it)"
        self.report("warming", f"{what} into {into} ({budget / 1e6:.0f} MB at most)")
        # Paths are relative to the prefix: under the mount point, or for a list of objects the directory it serves
        self._warmer = Warmer(self.spec.data_dir, names, budget_bytes=budget, only_if_fits=automatic
                              ).in_background(done)

    def stop(self) -> None:
        """Unmount and stop the child; safe to call twice and after a failed start."""
        if os.getpid() != self._owner_pid:
            return  # a forked copy of this object (DataLoader worker) does not own the mount
        self._stopping.set()
        if self._warmer is not None:  # its reads would hold the mount busy
            self._warmer.cancel()
        if self._watchdog is not None:
            self._watchdog.stop(timeout_s=self.spec.mount_timeout_s + 5)
        with self._lock:
            if self._child is None and self._workdir is None:
                return
            failures: list[BaseException] = []
            for step in (self._unmount_politely, self._stop_child):
                try:
                    step()
                except Exception as exc:  # the other steps must still run: nothing may outlive us
                    log.warning("stopping %s: %s failed: %r", self.path, step.__name__, exc)
                    failures.append(exc)
            if find_mount(self.path) is not None:
                cleared = force_clear(self.path)
                if not cleared.ok:
                    failures.append(StaleMount(
                        f"{self.path} is still mounted after stopping its program and a forced clear failed: "
                        f"{cleared.message}; run `fusermount3 -uz {self.path}` or `umount -l {self.path}` as its "
                        "owner", mount_dir=self.path))
            self.report("unmounted" if not failures else "unmount-failed", redact(str(failures[0])) if failures else "")
            self._cleanup_files()
            untrack(self)
            if failures:
                raise failures[0]

    def health(self, timeout_s: float | None = None) -> Health:
        """Bounded: answers within ``timeout_s`` (default: spec.probe_timeout_s) even if the mount hangs."""
        bound = self.spec.probe_timeout_s if timeout_s is None else timeout_s
        health = mount_health(self.path, self._backend, self._child, bound)
        # Not only when healthy: s3fs answers the probe's lookup with EPERM once S3 refuses its key (a 403
        # on HEAD), which reads as "not-permitted"; a remount without new credentials would fail the same way.
        if health.state in ("healthy", "slow", "busy", "unresponsive", "not-permitted") and self._workdir is not None:
            refused = self._auth_watch.refused(scratch.log_files(self._workdir)) or self._auth_watch.unconfirmed()
            if refused and not self._credentials_refused():
                self._auth_watch.hold(refused)  # asked again at the next probe: the LIST may not see it yet
                return health
            if refused:
                self._auth_watch.confirmed()
            elif self._keys_check_due() and self._credentials_refused():
                assert self._backend is not None
                refused = (f"one LIST with its keys was refused ({self._backend.program} may not log a refused "
                           "read: its reads can hang instead)")
            if refused:
                self._auth_refused = refused
                return Health("unauthorized", health.latency_s, f"S3 refused the mount's credentials: {refused}",
                              health.pid)
        return health

    def _keys_check_due(self) -> bool:
        """For a program that may not log a refused read: True every ``KEYS_CHECK_S`` (the LIST is then sent)."""
        if self._backend is None or self._backend.logs_refused_reads:
            return False
        now = time.monotonic()
        if now - self._keys_checked_at < KEYS_CHECK_S:
            return False
        self._keys_checked_at = now
        return True

    def _credentials_refused(self) -> bool:
        """A 403 in the log is confirmed by one LIST with the mount's settings (not a single object's policy)."""
        try:
            check_bucket_access(self.settings, self.spec.bucket, self.spec.prefix,
                                timeout_s=min(10.0, self.spec.probe_timeout_s * 2))
        except CredentialsError:
            return True
        except Exception:  # the store is unreachable: that is not the credentials' fault
            return False
        return False

    def recover(self) -> None:
        """Clear a dead or wedged mount and mount the same spec at the same path again."""
        with self._lock:
            if self._stopping.is_set():
                return
            started = time.monotonic()
            self._kill_child()
            if find_mount(self.path) is not None:
                result = force_clear(self.path)
                if not result.ok:
                    raise StaleMount(f"could not clear {self.path}: {result.message}", mount_dir=self.path)
            self._refuse_if_directory_gone()
            self.restarts += 1
            if self._auth_refused:
                self._refresh_credentials()
                if self._cache is not None and self.spec.cache_dir:
                    # What the refused program cached may hold the holes of its failed reads (s3fs keeps them).
                    self._cache = prepare_mount_cache(self.spec.cache_dir, self.path)
            self._spawn_and_wait()
            self.report("remounted", f"after {time.monotonic() - started:.2f}s, pid {self.pid}")

    def _refuse_if_directory_gone(self) -> None:
        """A directory that vanished (say, its parent was unmounted) is not remounted: retrying would never end."""
        probe = probe_path(self.path, self.spec.probe_timeout_s, list_dir=False)
        if probe.errno not in _GONE_ERRNOS:  # answered, or slow: a slow parent is not proof that it is gone
            return
        self.gone_reason = (f"the mount directory {self.path} is no longer reachable ({probe.error}); its parent "
                            "was probably unmounted or removed: not remounting. Mount it again where it can live")
        raise MountDirGone(self.gone_reason, mount_dir=self.path)

    def _refresh_credentials(self) -> None:
        """Resolve the credentials again (a rotated credentials file, a renewed role) before remounting."""
        old = self.settings
        new = refresh_credentials(old)  # raises CredentialsError: the watchdog retries with backoff
        self._settings = new
        changed = new.access_key_id != old.access_key_id or new.secret_access_key != old.secret_access_key \
            or new.session_token != old.session_token
        source = f"profile {old.profile or 'default'}" if old.credentials_from_chain else "fixed keys"
        log.warning("%s: S3 refused the mount's credentials (%s); resolved them again from %s (%s) and "
                    "remounting", self.path, self._auth_refused, source,
                    "new keys" if changed else "unchanged: fix them, or the mount keeps failing")
        self._auth_refused = ""

    def report(self, kind: str, detail: str) -> None:
        """Record an event and hand it to the listener (the shared supervisor publishes it)."""
        event = {"time": time.time(), "event": kind, "detail": redact(detail), "restarts": self.restarts,
                 "pid": self.pid}
        with self._lock:
            self.events.append(event)
        log.info("%s %s: %s", self.path, kind, event["detail"])
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:  # a broken listener must not take the mount down
                log.exception("event listener failed")

    # -- internals ----------------------------------------------------------------------

    def _plan_cache(self) -> None:
        """Decide the cache the program gets, and say so in one line when it is not what was asked."""
        self._cache_plan = None
        if not (self.spec.cache_dir or self.spec.cache_size_mb):
            return
        assert self._workdir is not None
        plan, note = plan_cache(self.spec.cache_dir or self._workdir, self.spec.cache_size_mb)
        self.cache_note = note
        if note:
            log.warning("%s: %s", self.path, note)
        if plan is None:
            remove_mount_cache(self._cache)
            self._cache = None
        self._cache_plan = plan

    def _spawn_and_wait(self) -> None:
        assert self._backend is not None and self._workdir is not None
        backend, spec = self._backend, self.spec
        plan = self._cache_plan
        # The program gets this mount's own directory (not the shared parent) and the planned cap, or no cache.
        spec = spec.replace(cache_dir=self._cache if plan else None, cache_size_mb=plan.size_mb if plan else None)
        argv = backend.command(spec, self.settings, self._workdir)
        env = backend.environment(spec, self.settings, self._workdir)
        # Which build runs matters (AWS's mount-s3 or ours): asked of the binary now, before it runs, and kept.
        self.program_version = backend.version(argv[0])
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

    def _failure_attrs(self) -> dict[str, Any]:
        return {"program": self._backend.program if self._backend else None, "log_path": self.log_path,
                "mount_dir": self.path}

    def _wait_until_mounted(self) -> None:
        assert self._backend is not None and self._child is not None
        deadline = time.monotonic() + self.spec.mount_timeout_s
        throttled_wait = False
        last = "the mount never appeared in /proc/self/mountinfo"
        while True:
            if self._stopping.is_set() and self.started_at is not None:
                raise MountFailed(f"stop() was called while remounting {self.path}", **self._failure_attrs())
            code = self._child.poll()
            if code is not None:
                raise MountFailed(
                    f"{self._backend.program} exited with status {code} before {self.path} was ready: "
                    f"{self._log_tail() or 'it printed nothing'} (full log: {self.log_path})", **self._failure_attrs())
            entry = find_mount(self.path)
            if entry is not None and self._backend.owns(entry):
                remaining = deadline - time.monotonic()
                # No listing: the lookup of a name that cannot exist already asks the store through the
                # program.  A listing of the root is a LIST of the whole prefix, and s3fs then HEADs every
                # object in it (300 shards: one more LIST and ~300 HEADs before the mount was ready).
                probe = probe_path(self.path, max(0.1, min(remaining, self.spec.probe_timeout_s * 2)),
                                   list_dir=False)
                if probe.ok:
                    return
                last = f"mounted, but reading it failed: {probe.error}"
            if time.monotonic() >= deadline and not throttled_wait and self._store_throttling():
                # A throttling store is busy, not broken: wait for it up to the outage bound.
                throttled_wait = True
                deadline += max(0.0, outage_bound_s() - self.spec.mount_timeout_s)
                log.warning("%s: the store is throttling %s (503 SlowDown in %s's log); waiting up to %.0f s "
                            "(the outage bound, $%s) for the mount", self.path, self._backend.program,
                            self._backend.program, max(outage_bound_s(), self.spec.mount_timeout_s), OUTAGE_BOUND_ENV)
            if time.monotonic() >= deadline:
                raise MountTimeout(
                    f"{self._backend.name} did not mount {self.spec.uri} at {self.path} within "
                    f"{self.spec.mount_timeout_s:g}s ({last}); its log says: {self._log_tail() or 'nothing'}; "
                    "raise mount_timeout_s if the store is slow", timeout_s=self.spec.mount_timeout_s,
                    **self._failure_attrs())
            time.sleep(0.05)

    def _store_throttling(self) -> bool:
        """Whether the store answers 503 SlowDown: in the program's recent log, or asked directly."""
        if self._workdir and THROTTLED_LOG.search(tail(scratch.log_files(self._workdir), 40)):
            return True
        try:
            return store_throttling(self.settings, self.spec.bucket, self.spec.prefix)
        except MountctlError:
            return False

    def _log_tail(self, lines: int = 6) -> str:
        return tail(scratch.log_files(self._workdir), lines) if self._workdir else ""

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
        """SIGTERM the program's group; SIGKILL it if it ignores that. Never waits without a bound."""
        child = self._child
        if child is None or child.poll() is not None:
            self._child = None
            return
        try:
            os.killpg(child.pid, signal.SIGCONT)  # a stopped daemon cannot handle SIGTERM
            os.killpg(child.pid, signal.SIGTERM)
        except ProcessLookupError:
            self._child = None
            return
        try:
            child.wait(timeout=self.spec.unmount_timeout_s)
            self._child = None
        except subprocess.TimeoutExpired:
            log.warning("%s (pid %d) ignored SIGTERM for %gs: killing it", self.backend, child.pid,
                        self.spec.unmount_timeout_s)
            self._kill_child()

    def _kill_child(self) -> None:
        child, self._child = self._child, None
        if child is None or kill_group(child, 5.0):
            return
        # Stuck in the kernel (a FUSE request to itself, say): aborting the connection frees it.
        log.warning("%s (pid %d) did not exit within 5s of SIGKILL; aborting its FUSE connection",
                    self.backend, child.pid)
        if find_mount(self.path) is not None:
            force_clear(self.path)

    def _hold_object_list(self) -> None:
        """Keep the object list open while the mount runs, so that no sweep takes it (a remount reads it again)."""
        if self.spec.objects and self._objects_fd is None:
            try:
                self._objects_fd = os.open(self.spec.objects, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                pass  # a missing list is named by the backend's own check, with what to do

    def _cleanup_files(self) -> None:
        fd, self._objects_fd = self._objects_fd, None
        if fd is not None:
            os.close(fd)
        workdir, self._workdir = self._workdir, None
        if workdir:
            scratch.remove_workdir(workdir)
        cache, self._cache = self._cache, None
        remove_mount_cache(cache)
        if self._created_dir and find_mount(self.path) is None:
            try:
                os.rmdir(self.path)
            except OSError:
                pass
            self._created_dir = False
