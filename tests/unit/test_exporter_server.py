"""The exporter's HTTP server: complete requests wait for a worker in a bounded queue, refused with 503 beyond it.

Slow senders against the real ``mountctl exporter`` are tests/test_exporter_load.py.
"""

from __future__ import annotations

import socket
import threading
import time

from mountctl.observability.exporter import _BoundedHTTPServer, _PreReadHandler


def _ask(port: int) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    connection.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    return connection


def _answer(connection: socket.socket) -> bytes:
    data = b""
    while chunk := connection.recv(4096):
        data += chunk
    return data


def test_a_request_beyond_the_waiting_queue_is_answered_503_at_once():
    """A real scrape serves the last probe round in milliseconds and cannot be made to last on demand, so a
    handler of the test's own holds the one worker until the test lets it go."""
    entered, release = threading.Event(), threading.Event()

    class Held(_PreReadHandler):
        def do_GET(self) -> None:  # noqa: N802
            entered.set()
            release.wait(10)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = _BoundedHTTPServer(("127.0.0.1", 0), Held, family=socket.AF_INET, workers=1, backlog=8,
                                deadline_s=10, waiting=1)
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    serving.start()
    port = server.server_address[1]
    try:
        served = _ask(port)
        assert entered.wait(5), "the first request never reached the worker"
        queued = _ask(port)
        deadline = time.monotonic() + 5
        while server._ready.qsize() < 1:
            assert time.monotonic() < deadline, "the second request never reached the queue"
            time.sleep(0.01)
        refused = _answer(_ask(port))
        assert refused.startswith(b"HTTP/1.0 503 ") and b"requests wait for a worker" in refused, refused
        release.set()
        assert _answer(served).startswith(b"HTTP/1.0 200 ")
        assert _answer(queued).startswith(b"HTTP/1.0 200 ")
    finally:
        release.set()
        server.shutdown()
        server.server_close()
