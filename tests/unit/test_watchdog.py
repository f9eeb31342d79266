"""The watchdog never dies silently: every failure of a check or a recovery is reported, and it gives up loudly.

The watched object here is a stand-in: no real mount program can be made, on demand, to hang in
``wait()`` past its bound or to make spawning fail with OSError.
"""

from __future__ import annotations

import subprocess
import threading
import time

from mountctl.mounts.health import Health
from mountctl.mounts.watchdog import Watchdog


class Stand:
    """Unhealthy until recovered; ``recover`` raises the queued failures first."""

    def __init__(self, failures: list[BaseException], health_failure: BaseException | None = None) -> None:
        self.restarts = 0
        self.failures = list(failures)
        self.health_failure = health_failure
        self.healthy = False
        self.events: list[tuple[str, str]] = []
        self.done = threading.Event()

    def health(self, timeout_s: float | None = None) -> Health:
        if self.health_failure is not None:
            failure, self.health_failure = self.health_failure, None
            raise failure
        return Health("healthy" if self.healthy else "dead", error="" if self.healthy else "gone")

    def recover(self) -> None:
        self.restarts += 1
        if self.failures:
            raise self.failures.pop(0)
        self.healthy = True
        self.done.set()

    def report(self, kind: str, detail: str) -> None:
        self.events.append((kind, detail))
        if kind == "gave-up":
            self.done.set()


def _run(stand: Stand, **options) -> list[str]:
    options.setdefault("first_backoff_s", 0.01)  # the doubling is what is tested, not its 0.5 s start
    dog = Watchdog(stand, interval_s=0.01, **options)
    dog.start()
    assert stand.done.wait(timeout=20), f"watchdog neither recovered nor gave up: {stand.events}"
    time.sleep(0.05)
    dog.stop(timeout_s=5)
    return [kind for kind, _ in stand.events]


def test_a_timeout_waiting_for_a_stuck_program_is_a_failed_try_not_a_dead_thread():
    stand = Stand([subprocess.TimeoutExpired(["rclone"], 5)])
    kinds = _run(stand)
    assert kinds[:2] == ["dead", "restart-failed"] and stand.healthy


def test_an_oserror_from_spawning_is_a_failed_try():
    stand = Stand([OSError(12, "Cannot allocate memory")])
    _run(stand)
    assert ("restart-failed" in [k for k, _ in stand.events]) and stand.healthy
    assert any("Cannot allocate memory" in detail for _, detail in stand.events)


def test_an_oserror_from_the_health_check_leads_to_recovery():
    stand = Stand([], health_failure=OSError(24, "Too many open files"))
    kinds = _run(stand)
    assert kinds[0] == "unresponsive" and stand.healthy


def test_gives_up_after_max_restarts_and_says_so():
    stand = Stand([subprocess.TimeoutExpired(["s3fs"], 5)] * 10)
    kinds = _run(stand, max_restarts=3)
    assert kinds[-1] == "gave-up" and not stand.healthy
    assert kinds.count("restart-failed") == 3


def test_an_unexpected_error_ends_the_thread_with_a_gave_up_event():
    class Broken(Stand):
        def report(self, kind: str, detail: str) -> None:
            if kind == "dead":
                raise RuntimeError("listener exploded")
            super().report(kind, detail)

    stand = Broken([])
    kinds = _run(stand)
    assert kinds == ["gave-up"] and "listener exploded" in stand.events[0][1]


def test_blips_spread_beyond_the_window_never_exhaust_the_budget():
    """The budget is per window: a long job with a blip now and then is recovered every time."""

    class Blips(Stand):
        def __init__(self) -> None:
            super().__init__([])
            self.blips = 4
            self.recovered_at = 0.0

        def health(self, timeout_s: float | None = None) -> Health:
            if self.healthy and self.blips and time.monotonic() - self.recovered_at > 0.15:
                self.blips -= 1
                self.healthy = False
            return super().health(timeout_s)

        def recover(self) -> None:
            self.restarts += 1
            self.healthy = True
            self.recovered_at = time.monotonic()
            if self.restarts == 5:
                self.done.set()

    stand = Blips()
    kinds = _run(stand, max_restarts=1, restart_window_s=0.1)
    assert stand.restarts == 5 and "gave-up" not in kinds, kinds


def test_tries_crowded_into_the_window_still_give_up():
    stand = Stand([subprocess.TimeoutExpired(["s3fs"], 5)] * 10)
    kinds = _run(stand, max_restarts=2, restart_window_s=600)
    assert kinds[-1] == "gave-up" and "within 600s" in stand.events[-1][1]


def test_a_vanished_mount_directory_is_not_retried():
    from mountctl.errors import MountDirGone

    stand = Stand([MountDirGone("the mount directory /x is no longer reachable"), OSError("never reached")])
    kinds = _run(stand)
    assert kinds == ["dead", "gave-up"] and "no longer reachable" in stand.events[-1][1]
    assert stand.restarts == 1


def test_a_busy_mount_is_said_once_and_never_remounted():
    """Busy (probe late, program working) and then wedged: only the wedged check leads to a recovery."""

    class BusyThenWedged(Stand):
        def __init__(self) -> None:
            super().__init__([])
            self.checks = 0

        def health(self, timeout_s: float | None = None) -> Health:
            self.checks += 1
            if self.checks <= 5:
                return Health("busy", error="queued behind other readers")
            return super().health(timeout_s) if self.healthy else Health("unresponsive", error="no progress")

    stand = BusyThenWedged()
    kinds = _run(stand)
    assert kinds == ["busy", "unresponsive"] and stand.restarts == 1


def test_a_user_who_may_not_enter_the_mount_never_remounts_it():
    class Refused(Stand):
        def health(self, timeout_s: float | None = None) -> Health:
            if len(self.events) == 1:
                self.done.set()
            return Health("not-permitted", error="EACCES")

    stand = Refused([])
    kinds = _run(stand)
    assert kinds == ["not-permitted"] and stand.restarts == 0
