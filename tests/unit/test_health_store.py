"""A store that does not answer is not a wedged program: the servers a mount program is connected to are asked
directly, and only a silent one makes the mount "store-unreachable" (no remount) instead of "unresponsive".

Real sockets stand for the store: a listener that never accepts is a stopped server (the kernel completes the
handshake, nothing answers, as with nginx or SeaweedFS under SIGSTOP); a listener that reads the request and
replies is a live one; a port nobody listens on refuses.  A real child process holding a connection stands for
the mount program.  The watchdog's decisions are tested with a stand-in mount, as in test_watchdog.py: no real
program can be held, on demand, in each state for exactly as many checks as a test needs.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

from mountctl.mounts.health import SERVING_STATES, WAITING_STATES, Health
from mountctl.mounts.progress import ask_store, store_peers
from mountctl.mounts.watchdog import Watchdog
from mountctl.observability.exporter import BROKEN_HEALTH
from mountctl.observability.metrics import UP_HEALTH


@contextlib.contextmanager
def _silent_store() -> Iterator[tuple[str, int]]:
    """A listener that never accepts: connections complete in the kernel's backlog, no byte ever comes back."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        yield listener.getsockname()[:2]


@contextlib.contextmanager
def _answering_store() -> Iterator[tuple[str, int]]:
    """A listener that reads each request and answers 403, as S3 answers an unsigned request."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    conn.recv(4096)
                    conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[:2]
    finally:
        done.set()
        thread.join(timeout=5)
        listener.close()


def _closed_port() -> tuple[str, int]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        return listener.getsockname()[:2]  # closed on leaving: nothing listens there any more


# The mount program: connects to the store in argv[1], listens on a port of its own (as rclone's remote control
# does) with one connection accepted on it, says "ready", and waits.
_PROGRAM = """
import socket, sys, time
store = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
control = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(control.getsockname())
accepted, _ = control.accept()
print(control.getsockname()[1], flush=True)
time.sleep(60)
"""


def test_the_servers_a_program_is_connected_to_are_its_store_and_not_the_clients_it_accepted():
    with _silent_store() as store:
        program = subprocess.Popen([sys.executable, "-c", _PROGRAM, str(store[1])], stdout=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, text=True)
        try:
            assert program.stdout is not None
            control_port = int(program.stdout.readline())
            peers = store_peers(program.pid)
        finally:
            program.kill()
            program.wait(timeout=10)
    # Its own connection to its control port is a server it connected to, like the store; the connection it
    # accepted on that port (whose far end is a client's ephemeral port) is not: the program serves it.
    assert peers is not None and sorted(peers) == sorted([store, ("127.0.0.1", control_port)]), peers


def test_a_process_that_is_gone_has_no_peers_to_ask():
    program = subprocess.Popen([sys.executable, "-c", "pass"])
    program.wait(timeout=10)
    assert store_peers(program.pid) is None
    assert store_peers(None) is None


def test_a_stopped_store_does_not_answer_and_the_asking_is_bounded():
    with _silent_store() as store:
        started = time.monotonic()
        [answer] = ask_store([store], 0.5)
        took = time.monotonic() - started
    assert not answer.answered and "no reply within 0.5s" in answer.how, answer
    assert took < 2.0, took


def test_a_live_store_answers_an_unsigned_request():
    with _answering_store() as store:
        [answer] = ask_store([store], 2.0)
    assert answer.answered, answer


def test_a_port_nobody_listens_on_is_no_answer():
    [answer] = ask_store([_closed_port()], 1.0)
    assert not answer.answered and "refused" in answer.how, answer


def test_several_stores_are_asked_at_once_within_one_bound():
    with _silent_store() as first, _silent_store() as second, _answering_store() as third:
        started = time.monotonic()
        answers = ask_store([first, second, third], 0.6)
        took = time.monotonic() - started
    assert [a.answered for a in answers] == [False, False, True], answers
    assert took < 1.5, took


def test_a_store_that_does_not_answer_is_no_reason_to_remount_but_the_mount_is_not_up():
    health = Health("store-unreachable")
    assert health.ok and "store-unreachable" in WAITING_STATES
    assert "store-unreachable" not in SERVING_STATES and "store-unreachable" not in UP_HEALTH
    assert "store-unreachable" in BROKEN_HEALTH  # /readyz names it, with the store that does not answer


class _Mount:
    """Answers the watchdog's checks with the states queued; every recovery is counted."""

    def __init__(self, states: list[str]) -> None:
        self.states = list(states)
        self.restarts = 0
        self.events: list[tuple[str, str]] = []
        self.done = threading.Event()

    def health(self, timeout_s: float | None = None) -> Health:
        if len(self.states) == 1:
            self.done.set()
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return Health(state, error=f"{state} here")  # type: ignore[arg-type]

    def recover(self) -> None:  # a remount answers at once: the unresponsive checks still queued are over
        self.restarts += 1
        self.states = [state for state in self.states if state != "unresponsive"] or ["healthy"]

    def report(self, kind: str, detail: str) -> None:
        self.events.append((kind, detail))


def _watch(mount: _Mount, store_settle_s: float = 0.0) -> list[str]:
    dog = Watchdog(mount, interval_s=0.01, first_backoff_s=0.01, store_settle_s=store_settle_s)
    dog.start()
    assert mount.done.wait(timeout=20), mount.events
    time.sleep(0.05)
    dog.stop(timeout_s=5)
    return [kind for kind, _ in mount.events]


def test_the_watchdog_waits_for_a_store_that_does_not_answer_and_says_so_once_each_way(caplog):
    mount = _Mount(["store-unreachable"] * 5 + ["healthy"])
    with caplog.at_level("WARNING", logger="mountctl"):
        kinds = _watch(mount)
    assert kinds == ["store-unreachable", "store-answering"], kinds
    assert mount.restarts == 0
    assert [r.getMessage() for r in caplog.records] == ["store-unreachable here"]


def test_once_the_store_answers_a_mount_that_still_does_not_is_remounted_after_its_settle_time():
    mount = _Mount(["store-unreachable"] * 3 + ["unresponsive"] * 30 + ["healthy"])
    kinds = _watch(mount, store_settle_s=0.1)  # 30 checks 0.01 s apart: past the settle time
    assert kinds == ["store-unreachable", "store-answering", "unresponsive"], kinds
    assert mount.restarts == 1
    assert "given 0.1s to resume by itself" in mount.events[1][1], mount.events[1]


def test_a_mount_that_resumes_within_its_settle_time_after_the_store_answers_is_not_remounted():
    # What the outage test met: after the store came back, mount-s3 answered no probe for a few seconds (its
    # requests waiting out their retry backoff), was remounted, and the reader that had just resumed stalled again.
    mount = _Mount(["store-unreachable"] * 3 + ["unresponsive"] * 5 + ["busy", "healthy"])
    kinds = _watch(mount, store_settle_s=30.0)
    assert kinds == ["store-unreachable", "store-answering", "busy"], kinds
    assert mount.restarts == 0


def test_a_mount_busy_when_its_store_answers_again_starts_the_settle_time_too():
    # The outage test met this order as well: busy at the first check after the store came back (said as busy,
    # and the store's answer went unsaid), then unresponsive at the next, and a remount at once.
    mount = _Mount(["store-unreachable"] * 3 + ["busy", "unresponsive", "unresponsive", "healthy"])
    kinds = _watch(mount, store_settle_s=30.0)
    assert kinds == ["store-unreachable", "store-answering", "busy"], kinds
    assert mount.restarts == 0


def test_an_unresponsive_mount_with_no_outage_before_it_is_remounted_at_once():
    mount = _Mount(["healthy", "unresponsive", "healthy"])
    kinds = _watch(mount, store_settle_s=30.0)
    assert kinds == ["unresponsive"], kinds
    assert mount.restarts == 1
