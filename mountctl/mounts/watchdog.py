"""``Watchdog``: watches one mount and remounts it, with backoff, when it dies or stops answering.

A mount whose store does not answer (``store-unreachable``) is not remounted: the new program would wait on the
same store, and the remount would break the readers the kernel still serves from kept pages.  The episode is
reported once when it begins (an event and a warning) and once when the store answers again. A program that
still does not answer then is given ``STORE_SETTLE_S`` to resume by itself before it is remounted: its own
requests sit in retry backoff after an outage (mount-s3's reach 20 s between tries), and a remount in that time
would break every reader a second time, after they had resumed.

Its restart budget is per time window (``MAX_RESTARTS`` tries in ``RESTART_WINDOW_S``),
not for the mount's whole life: a long job survives blips spread over days, and still
gives up on a mount that keeps failing.  A mount whose directory vanished is not retried.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Protocol

from ..errors import MountDirGone
from ..redaction import redact
from .health import Health

__all__ = ["Watchdog", "Watched", "WATCHDOG_INTERVAL_S", "MAX_RESTARTS", "RESTART_WINDOW_S", "STORE_SETTLE_S"]

WATCHDOG_INTERVAL_S = 2.0  # between health checks, for every mount (shared or in-process)
MAX_RESTARTS = 10  # recovery tries allowed ...
RESTART_WINDOW_S = 600.0  # ... within any 10 minutes
# After its store answers again, how long an unresponsive program may take to resume before it is remounted:
# past mount-s3's longest retry backoff (20 s), so that a program waiting out its own backoff is not called stuck.
STORE_SETTLE_S = 30.0

log = logging.getLogger("mountctl")
# States that are no reason to remount, yet worth one event when the mount enters them.
_SAID_ONCE = ("busy", "not-permitted", "store-unreachable")


class Watched(Protocol):
    """What a watchdog needs from the mount it watches."""

    restarts: int

    def health(self, timeout_s: float | None = None) -> Health: ...

    def recover(self) -> None: ...

    def report(self, kind: str, detail: str) -> None: ...


class Watchdog:
    """A daemon thread: every ``interval_s`` check health; on failure recover, backing off ``first_backoff_s``
    (0.5 s), doubling up to 30 s.

    It gives up after ``max_restarts`` recovery tries within ``restart_window_s``.

    Any exception from a check or a recovery (a timeout waiting for a process stuck in the
    kernel, an OSError from spawning) counts as a failed try and is reported, never lost:
    the thread ends only when stopped or after reporting ``gave-up``.
    """

    def __init__(self, watched: Watched, *, interval_s: float = WATCHDOG_INTERVAL_S, max_restarts: int = MAX_RESTARTS,
                 restart_window_s: float = RESTART_WINDOW_S, name: str = "mountctl-watchdog",
                 first_backoff_s: float = 0.5, store_settle_s: float = STORE_SETTLE_S) -> None:
        self.watched = watched
        self.store_settle_s = store_settle_s
        self.interval_s = interval_s
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self.first_backoff_s = first_backoff_s
        self._tries: deque[float] = deque()  # when each recovery try began, within the window
        self.last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout_s)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        try:
            self._watch()
        except BaseException as exc:  # never die silently: whoever reads the events must learn of it
            self.last_error = redact(f"{type(exc).__name__}: {exc}")
            self.watched.report("gave-up", f"watchdog failed: {self.last_error}")

    def _watch(self) -> None:
        last_state = ""
        settling_until = 0.0  # while the program may still be resuming by itself after its store came back
        while not self._stop.wait(self.interval_s):
            try:
                health = self.watched.health()
            except Exception as exc:  # e.g. the probe could not be spawned
                health = Health("unresponsive", error=f"health check failed: {type(exc).__name__}: {exc}")
            if last_state == "store-unreachable" and health.state != last_state:  # whatever the mount is now
                settling_until = time.monotonic() + self.store_settle_s
                waits = (f"; it is given {self.store_settle_s:g}s to resume by itself before a remount"
                         if health.state == "unresponsive" else "")
                self.watched.report("store-answering", f"the store answers again; the mount is {health.state}"
                                    + (f": {health.error}" if health.error else "") + waits)
            if health.state in _SAID_ONCE and health.state != last_state:
                # Not a fault: said once when it begins (not every interval), so the events show why nothing was done.
                self.watched.report(health.state, health.error)
                if health.state == "store-unreachable":  # readers of new data wait: worth a warning, once
                    log.warning("%s", redact(health.error))
            last_state = health.state
            if health.ok:
                continue
            if health.state == "unresponsive" and time.monotonic() < settling_until:
                continue  # its requests in retry backoff resume on their own; a remount now breaks readers again
            self.last_error = f"{health.state}: {health.error}"
            self.watched.report(health.state, health.error)
            if not self._recover():
                return

    def _recover(self) -> bool:
        """Try until the mount is back (True) or we stop or give up (False)."""
        backoff = self.first_backoff_s
        while not self._stop.is_set():
            now = time.monotonic()
            while self._tries and now - self._tries[0] > self.restart_window_s:
                self._tries.popleft()
            if len(self._tries) >= self.max_restarts:
                self.watched.report("gave-up", f"{len(self._tries)} recovery tries within "
                                    f"{self.restart_window_s:g}s ({self.watched.restarts} restarts in all); "
                                    f"last error: {self.last_error}")
                return False
            self._tries.append(now)
            try:
                self.watched.recover()
                return True
            except MountDirGone as exc:  # nothing left to remount: retrying would go on for ever
                self.last_error = redact(str(exc))
                self.watched.report("gave-up", self.last_error)
                return False
            except Exception as exc:
                self.last_error = redact(str(exc) or type(exc).__name__)
                self.watched.report("restart-failed", f"{self.last_error}; next try in {backoff:g}s")
                if self._stop.wait(backoff):
                    return False
                backoff = min(backoff * 2, 30.0)
        return False
