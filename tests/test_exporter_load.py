"""The exporter under load: 50 scrapes at once beside 20 idle connections, with a real rclone mount to probe.

Every scrape must answer within its timeout, no probe process may be started per request (the
exporter's children are watched with psutil while the scrapes run), and the idle connections are
closed by the exporter's request timeout rather than holding a thread each for ever.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import psutil
from child_processes import stop_child

import mountctl

from conftest import require_fuse

SCRAPES = 50
IDLE = 20
SCRAPE_TIMEOUT_S = 10.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, timeout_s: float) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _until(what: str, check, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s:g}s"
        time.sleep(0.2)


class _ChildWatch:
    """Every process the exporter starts while the watch runs (sampled every few ms)."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self.seen: set[int] = set()
        self.commands: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for child in self._process.children(recursive=True):
                    if child.pid not in self.seen:
                        self.seen.add(child.pid)
                        try:
                            self.commands[child.pid] = " ".join(child.cmdline())[:200]
                        except psutil.Error:
                            self.commands[child.pid] = "?"
            except psutil.Error:
                return
            time.sleep(0.003)

    def __enter__(self) -> _ChildWatch:
        self.seen.update(child.pid for child in self._process.children(recursive=True))
        self._before = set(self.seen)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    @property
    def started(self) -> set[int]:
        return self.seen - self._before


def test_fifty_scrapes_beside_twenty_idle_connections_answer_in_time_and_fork_nothing(s3, bucket, mount_root,
                                                                                      tmp_path):
    require_fuse()
    s3.put_object(Bucket=bucket, Key="hello.txt", Body=b"hello")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with mountctl.mount(f"s3://{bucket}/", str(mount_root / "m"), backend="rclone") as mounted, \
            open(tmp_path / "exporter.log", "wb") as log:
        exporter = subprocess.Popen([sys.executable, "-m", "mountctl", "exporter", "--listen", f"127.0.0.1:{port}",
                                     "--timeout", "2", "--interval", "120"],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        idle: list[socket.socket] = []
        try:
            selector = f'dir="{mounted.path}"'
            _until("the mount up in /metrics", lambda: any(
                line.startswith("mountctl_mount_up{") and selector in line and line.endswith(" 1.0")
                for line in _get(base + "/metrics", 5)[1].splitlines()), 60)
            with _ChildWatch(exporter.pid) as watch:
                idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(IDLE)]

                def scrape(number: int) -> tuple[str, int, float]:
                    path = "/metrics" if number % 2 else "/readyz"
                    started = time.monotonic()
                    code, _ = _get(base + path, SCRAPE_TIMEOUT_S)
                    return path, code, time.monotonic() - started

                with ThreadPoolExecutor(SCRAPES) as pool:
                    answers = list(pool.map(scrape, range(SCRAPES)))
            slowest = max(elapsed for _, _, elapsed in answers)
            print(f"\n[exporter load] {SCRAPES} scrapes beside {IDLE} idle connections: slowest "
                  f"{slowest * 1000:.0f} ms; processes started meanwhile: {len(watch.started)}")
            assert all(code == 200 for _, code, _ in answers), answers
            assert slowest < SCRAPE_TIMEOUT_S
            assert not watch.started, "the exporter started processes during the scrapes: " + \
                "; ".join(watch.commands.get(pid, "?") for pid in watch.started)
            # The idle connections are closed by the exporter's request timeout (10 s), not held for ever.
            for connection in idle:
                connection.settimeout(30)
            assert all(_closed(connection) for connection in idle)
        finally:
            for connection in idle:
                connection.close()
            stop_child(exporter, grace_s=10, kill_wait_s=5)


def _closed(connection: socket.socket) -> bool:
    """The peer closed it (EOF), within the socket's timeout."""
    try:
        while connection.recv(1024):
            pass
        return True
    except OSError:
        return False


SLOW_SENDERS = 20  # more than the exporter's 16 workers
REQUEST_DEADLINE_S = 10.0  # the exporter's default request timeout


def test_slow_senders_are_closed_at_the_request_deadline_and_never_keep_other_clients_waiting(tmp_path):
    """Each slow sender sends one byte of a request that never ends every half second: every read it makes the
    exporter wait for answers well within a per-read timeout, so only a deadline on the whole request ends it."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with open(tmp_path / "exporter.log", "wb") as log:
        exporter = subprocess.Popen([sys.executable, "-m", "mountctl", "exporter", "--listen", f"127.0.0.1:{port}",
                                     "--interval", "120"], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
    senders: list[socket.socket] = []
    closed_after: dict[int, float] = {}
    stop = threading.Event()
    try:
        _until("the exporter answering /healthz", lambda: _get(base + "/healthz", 1)[0] == 200, 30)
        senders = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(SLOW_SENDERS)]
        opened = time.monotonic()
        endless = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100_000

        def trickle() -> None:
            offset = 0
            while not stop.is_set():
                for number, sender in enumerate(senders):
                    if number not in closed_after and _peer_closed(sender, endless[offset:offset + 1]):
                        closed_after[number] = time.monotonic() - opened
                offset += 1
                stop.wait(0.5)

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        time.sleep(2.0)  # every sender has sent a few bytes: none is an idle connection any more
        started = time.monotonic()
        try:
            code = _get(base + "/healthz", 5)[0]
        except OSError as exc:  # timed out: every worker is held by a slow sender
            code = f"no answer within 5 s ({exc})"
        assert code == 200, f"/healthz beside {SLOW_SENDERS} slow senders: {code}"
        print(f"\n[exporter slow senders] /healthz beside {SLOW_SENDERS} slow senders answered in "
              f"{(time.monotonic() - started) * 1000:.0f} ms")
        _until("every slow sender closed by the exporter",
               lambda: len(closed_after) == SLOW_SENDERS, REQUEST_DEADLINE_S + 10)
        assert max(closed_after.values()) < REQUEST_DEADLINE_S + 5, closed_after
    finally:
        stop.set()
        for sender in senders:
            sender.close()
        stop_child(exporter, grace_s=10, kill_wait_s=5)


def _peer_closed(connection: socket.socket, byte: bytes) -> bool:
    """Send one more byte; True when the peer has closed the connection (EOF or a reset)."""
    try:
        connection.send(byte)
        connection.setblocking(False)
        try:
            return connection.recv(1024) == b""
        except BlockingIOError:
            return False
        finally:
            connection.setblocking(True)
    except OSError:
        return True
