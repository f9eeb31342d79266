"""Health of a mount, classified without ever blocking the caller longer than a bound."""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from ..processes import pid_running
from ..redaction import redact
from .backends import Backend
from .fusectl import serving_pid
from .mounttable import find_mount
from .probe import probe_path
from .progress import (
    Peer,
    StoreAnswer,
    ask_store,
    peer_text,
    progress_evidence,
    progress_mark,
    received_since,
    store_peers,
)

__all__ = ["Health", "HealthState", "HEALTH_STATES", "SERVING_STATES", "WAITING_STATES", "STORE_ASK_S",
           "mount_health", "AuthWatch"]

# "busy": the probe got no answer in time, but the program is working (its store sent it bytes, it read its data
# cache from disk, or it kept a CPU busy meanwhile): a queue, not a hang.  Nothing the probe itself causes counts
# (its FUSE request, the interrupt after it): progress.py.
# "unresponsive": no answer in time and no progress either: wedged (stopped, deadlocked, stuck in the kernel, or
# every handler waiting on a store that never answers while the read loop still runs).
# "unauthorized": the program runs and answers, but S3 refuses its credentials (rotated, revoked, expired).
# "not-permitted": the kernel or the program refused this user (FUSE lets only the mount's owner in unless it was
# mounted with allow_other, root included): says nothing about the mount, so it is never a reason to remount.
# "store-unreachable": no answer in time and no progress, but the program is waiting on its store, and the store
# does not answer a request of our own either: a remount would not help (the new program would wait on the same
# store) and would break every reader of the pages the kernel keeps (ENOTCONN).  Not serving new data, not wedged.
HealthState = Literal["healthy", "slow", "busy", "unresponsive", "dead", "unmounted", "unauthorized", "not-permitted",
                      "store-unreachable"]
HEALTH_STATES: tuple[HealthState, ...] = get_args(HealthState)
# The states in which the mount serves (or, for another user, may be serving) its readers: not broken.
SERVING_STATES: tuple[HealthState, ...] = ("healthy", "slow", "busy", "not-permitted")
# The states in which the mount cannot serve new data but a remount would not mend it: wait for what it waits on.
WAITING_STATES: tuple[HealthState, ...] = ("store-unreachable",)
_REFUSED_ERRNOS = (errno.EACCES, errno.EPERM)
# The bound on asking the program's store directly, at most: the probe's own bound when that is shorter.
STORE_ASK_S = 2.0


@dataclass(frozen=True)
class Health:
    state: HealthState
    latency_s: float | None = None
    error: str = ""
    pid: int | None = None
    checked_at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        """Not a reason to remount: the mount serves, is busy serving, cannot be judged by this user, or waits
        on a store that does not answer (``WAITING_STATES``)."""
        return self.state in SERVING_STATES or self.state in WAITING_STATES

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def mount_health(path: str, backend: Backend | None, child: subprocess.Popen[bytes] | int | None,
                 timeout_s: float) -> Health:
    """Classify the mount at ``path``; a wedged daemon costs at most ``timeout_s``.

    A probe that times out is judged by what the program did over the same window (``progress``): bytes from
    its store or its disk, or CPU time, make the mount "busy" (serving others ahead of the probe).  Else the
    servers the program is connected to are asked directly (``progress.ask_store``): silent, the mount is
    "store-unreachable" (and is not probed again until one answers); answering, or none to ask, "unresponsive".
    Asking costs at most ``STORE_ASK_S`` more.
    """
    pid = child if isinstance(child, int) else (child.pid if child is not None else None)
    alive = child.poll() is None if isinstance(child, subprocess.Popen) else pid_running(pid)
    entry = find_mount(path)
    if entry is None:
        if pid and not alive:
            _forget_store(path, pid)
        return Health("dead" if pid and not alive else "unmounted", pid=pid,
                      error="" if alive or not pid else "mount program exited")
    if backend is not None and not backend.owns(entry):
        return Health("unmounted", pid=pid, error=f"{path} now holds a {entry.fs_type} mount from {entry.source}")
    if pid is not None and not alive:
        _forget_store(path, pid)
        return Health("dead", pid=pid, error="mount program exited; the mount is left behind (ENOTCONN)")
    if pid is None:
        # No record names the program (a shared=False mount, seen by `mountctl cleanup`): find the process that
        # serves the mount, so that a probe that times out is judged by what it does, not by the timeout alone.
        pid = serving_pid(entry)
    store = _seen_store(path, pid)
    silent = _still_silent(path, pid, store, timeout_s) if pid else None
    if silent is not None:
        return silent
    before = progress_mark(pid)
    probe = probe_path(path, timeout_s, list_dir=False)
    if probe.timed_out and not probe.reached and not progress_mark(pid).stopped:
        return Health("slow", probe.latency_s, f"the probe did not reach {path} within {timeout_s:g}s (this machine "
                      "is slow to start a process): no verdict on the mount this time", pid)
    if probe.timed_out:
        after = progress_mark(pid)
        working = progress_evidence(before, after)
        if working:
            return Health("busy", probe.latency_s, f"{probe.error}, but the mount program is working ({working}): "
                          "requests are queued behind other readers", pid)
        why = ("it is stopped (SIGSTOP or a tracer)" if after.stopped
               else "it received nothing from its store, read nothing from its disk and used little CPU meanwhile"
               if received_since(before, after) is not None
               else "its CPU time did not advance")
        verdict = Health("unresponsive", probe.latency_s, f"{probe.error} and {why}", pid)
        return verdict if after.stopped else _judge_store(path, store, verdict, min(STORE_ASK_S, timeout_s))
    if probe.errno in _REFUSED_ERRNOS:
        return Health("not-permitted", probe.latency_s, _not_permitted(path, probe.error), pid)
    if not probe.ok:
        if probe.errno in (errno.ENOTCONN, errno.ECONNABORTED):
            return Health("dead", probe.latency_s, probe.error, pid)
        # It answers, with an error (EIO: mount-s3 and s3fs when their store is down): its store is asked too.
        return _judge_store(path, store, Health("unresponsive", probe.latency_s, probe.error, pid),
                            min(STORE_ASK_S, timeout_s))
    return Health("slow" if probe.latency_s > timeout_s / 2 else "healthy", probe.latency_s, "", pid)


# What is known of each mount program's store, by (mount path, program pid): the servers it was seen connected to
# at its checks (a store that went down is no longer connected to when the probe fails), and whether they were
# silent at the last check.  While they stay silent no probe is sent: each probe a program cannot answer holds one
# of its request handlers until its store gives up (mount-s3 has 16), and readers of kept pages need handlers to
# open their files.
@dataclass
class _Store:
    peers: list[Peer]
    silent: bool = False


_stores: dict[tuple[str, int], _Store] = {}
_stores_lock = threading.Lock()
_PEERS_KEPT = 8


def _seen_store(path: str, pid: int | None) -> _Store | None:
    """Remember the servers ``pid`` is connected to now, after those seen before; None without a program."""
    if not pid:
        return None
    now = store_peers(pid) or []
    with _stores_lock:
        store = _stores.setdefault((path, pid), _Store([]))
        store.peers = (now + [peer for peer in store.peers if peer not in now])[:_PEERS_KEPT]
        return store


def _forget_store(path: str, pid: int | None) -> None:
    with _stores_lock:
        _stores.pop((path, pid or 0), None)


def _judge_store(path: str, store: _Store | None, failed: Health, ask_s: float) -> Health:
    """A probe that got nothing (or an error) and saw no progress: a program that is stuck (``failed`` stands, a
    remount helps), or a store that does not answer us either (``store-unreachable``, a remount does not)?  With
    no server known to ask (another user's program, whose sockets cannot be read), ``failed`` stands."""
    if store is None or not store.peers or failed.pid is None:
        return failed
    answers = ask_store(store.peers, ask_s)
    answered = [a for a in answers if a.answered]
    if answered:
        return dataclasses.replace(failed, error=f"{failed.error}; its store answers a request of our own "
                                   f"({peer_text(answered[0].peer)}): the program itself is stuck")
    store.silent = True
    return _store_unreachable(path, failed.pid, failed.latency_s, answers, failed.error)


def _still_silent(path: str, pid: int, store: _Store | None, timeout_s: float) -> Health | None:
    """``store-unreachable`` again, without a probe, while the store silent at the last check still is; None
    (probe as usual) once any of it answers."""
    if store is None or not store.silent:
        return None
    answers = ask_store(store.peers, min(STORE_ASK_S, timeout_s))
    if any(a.answered for a in answers):
        store.silent = False
        return None
    return _store_unreachable(path, pid, None, answers, "no probe sent while its store does not answer")


def _store_unreachable(path: str, pid: int, latency_s: float | None, answers: list[StoreAnswer],
                       seen: str) -> Health:
    stores = ", ".join(f"{peer_text(a.peer)} ({a.how})" for a in answers)
    return Health("store-unreachable", latency_s,
                  f"{seen}; the mount program waits on its S3 store, which does not answer a request of our own "
                  f"either: {stores}. A remount would not help (a new program would wait on the same store, and "
                  f"readers of the pages the kernel keeps would lose their files): check that store (is it up, reachable from "
                  f"this node, overloaded?); reads of {path} resume when it answers", pid)


def _not_permitted(path: str, error: str) -> str:
    return (f"not permitted for this user (uid {os.geteuid()}): {error}; FUSE lets only the user who mounted {path} "
            "in (root included) unless it was mounted with allow_other: run this as that user, or mount with "
            "--allow-other (needs user_allow_other in /etc/fuse.conf for non-root owners)")


# How each program's log says that S3 refused its credentials: s3fs "HTTP response code 403", rclone
# "StatusCode: 403 ... InvalidAccessKeyId", mount-s3 "403 Forbidden"/"AccessDenied".
_AUTH_REFUSED = re.compile(r"AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|ExpiredToken|InvalidToken"
                           r"|response code 403|StatusCode: 403|\b403 Forbidden\b")


class AuthWatch:
    """Reads what a mount program appended to its logs since the last look, for S3 refusing its credentials.

    A refused key does not make a mount unhealthy to a probe (the kernel answers a stat
    from its cache); the program's reads fail instead, with EIO (rclone) or as an empty
    file (s3fs), and only its log says why.
    """

    # How long a refusal that one LIST did not confirm is asked about again at each probe. A revoked key takes a
    # moment to be refused everywhere (SeaweedFS: seconds), so the program's 403 can come before the LIST's: that
    # line was consumed and forgotten, and the mount waited for another 403 that a reader in backoff was slow to
    # cause (a key rotation through mount-s3 once waited out a loader's 120 s timeout).
    UNCONFIRMED_FOR_S = 60.0

    def __init__(self) -> None:
        self._offsets: dict[str, int] = {}
        self._held: tuple[str, float] | None = None

    def hold(self, line: str) -> None:
        """Keep ``line``, a refusal not confirmed yet, to be asked about again (``unconfirmed``)."""
        if self._held is None:
            self._held = (line, time.monotonic())

    def unconfirmed(self) -> str:
        """The refusal held by ``hold`` while it is younger than ``UNCONFIRMED_FOR_S``, else ''."""
        if self._held is not None and time.monotonic() - self._held[1] < self.UNCONFIRMED_FOR_S:
            return self._held[0]
        self._held = None
        return ""

    def confirmed(self) -> None:
        self._held = None

    def skip_to_end(self, paths: list[str]) -> None:
        """Ignore what is in the logs now (a fresh program's log starts clean)."""
        for path in paths:
            try:
                self._offsets[path] = os.path.getsize(path)
            except OSError:
                pass

    def refused(self, paths: list[str], *, max_bytes: int = 1 << 20) -> str:
        """The last new log line that reports a refusal (redacted), or ''."""
        found = ""
        for path in paths:
            try:
                with open(path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    start = self._offsets.get(path, 0)
                    if size < start:  # rotated or truncated: read it from the start
                        start = 0
                    f.seek(max(start, size - max_bytes))
                    text = f.read(size - f.tell()).decode(errors="replace")
                    self._offsets[path] = size
            except OSError:
                continue
            for line in text.splitlines():
                if _AUTH_REFUSED.search(line):
                    found = line.strip()
        return redact(found[-300:])
