"""The node exporter: this node's shared mounts as Prometheus metrics, plus ``/healthz`` and ``/readyz``.

A scrape costs O(mounts) and starts no process: mounts are probed in the background
every ``interval_s`` (``snapshot.StatusSnapshot``) and each scrape joins the registry
records as they are now with the last probe, into the same figures ``mountctl status
--json`` prints (``metrics``).  The HTTP side is bounded too: connections wait in a
lobby (at most ``backlog``; beyond it one is closed at once) until their whole request
has arrived, read there without a thread each; one whose request is not complete within
the request timeout of its connect (idle, or sending a byte at a time) is closed without
ever holding a worker; complete requests queue (bounded, else 503) for a fixed pool of
workers, and every answer is written within what is left of that deadline.
``/healthz`` says the exporter runs; ``/readyz`` is 200 unless a mount is broken (one
starting or stopping is not), else 503 naming which is not and why.
"""

from __future__ import annotations

import contextlib
import io
import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, cast

from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from ..errors import MountctlError
from ..mounts.health import HEALTH_STATES, SERVING_STATES
from ..shared.registry import SHARED_STATES
from .snapshot import StatusSnapshot
from .status import status

__all__ = ["MountCollector", "collect_rows", "readiness", "Exporter", "parse_listen", "address_family", "LABELS",
           "STATES", "BROKEN_HEALTH"]

log = logging.getLogger("mountctl")

LABELS = ("uri", "dir", "backend")
# The record's states, and "abandoned" for a record whose supervisor died.
STATES: tuple[str, ...] = (*SHARED_STATES, "abandoned")


def _labels(row: dict[str, Any]) -> list[str]:
    return [row["uri"], row["dir"], row["backend"] or ""]


def collect_rows(rows: Iterable[dict[str, Any]]) -> Iterator[Metric]:
    """The metric families for these status rows (one row per mount)."""
    rows = list(rows)

    def gauge(name: str, documentation: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, documentation, labels=[*LABELS, *extra])

    up = gauge("mountctl_mount_up", "1 while the mount is mounted and its bounded probe answers")
    state = gauge("mountctl_mount_state", "1 for the mount's current state, 0 for the others", ("state",))
    restarts = CounterMetricFamily("mountctl_mount_restarts", "Remounts by the watchdog since the mount started",
                                   labels=list(LABELS))
    holders = gauge("mountctl_mount_holders", "Processes holding the mount")
    probe = gauge("mountctl_mount_health_probe_seconds", "Latency of the last bounded health probe")
    cache = gauge("mountctl_cache_bytes", "Bytes on disk in the mount's data cache")
    capacity = gauge("mountctl_cache_capacity_bytes", "Cap on the mount's data cache")
    rss = gauge("mountctl_program_rss_bytes", "Resident memory of the mount program now")
    peak = gauge("mountctl_program_peak_rss_bytes", "Peak resident memory of the mount program (VmHWM)")
    bound = gauge("mountctl_mount_memory_bound_bytes", "Memory bound the mount program was started with")
    vfs: dict[str, GaugeMetricFamily] = {}
    program: dict[str, Metric] = {}
    for row in rows:
        labels = _labels(row)
        up.add_metric(labels, 1.0 if row["up"] else 0.0)
        for name in STATES:
            state.add_metric([*labels, name], 1.0 if row["state"] == name else 0.0)
        restarts.add_metric(labels, float(row["restarts"]))
        holders.add_metric(labels, float(row["holders"]))
        latency = row["health"].get("latency_s")
        if latency is not None:
            probe.add_metric(labels, float(latency))
        in_use = row["cache"] or {}
        for family, value in ((cache, in_use.get("bytes")), (capacity, in_use.get("capacity_bytes")),
                              (rss, row["memory"]["rss_bytes"]), (peak, row["memory"]["peak_rss_bytes"]),
                              (bound, row["memory"]["bound_bytes"])):
            if value is not None:
                family.add_metric(labels, float(value))
        _add_rclone(row, labels, vfs, program)
    yield from (up, state, restarts, holders, probe, cache, capacity, rss, peak, bound)
    yield from vfs.values()
    yield from program.values()


def _add_rclone(row: dict[str, Any], labels: list[str], vfs: dict[str, GaugeMetricFamily],
                program: dict[str, Metric]) -> None:
    """rclone's vfs/stats numbers as ``mountctl_rclone_vfs_*`` and its own ``rclone_*`` samples, labelled."""
    figures = row.get("program") or {}
    stats = figures.get("vfs") or {}
    numbers = {"in_use": stats.get("inUse")}
    for group, prefix in (("diskCache", "disk_cache_"), ("metadataCache", "metadata_cache_")):
        for key, value in (stats.get(group) or {}).items():
            numbers[prefix + _snake(key)] = value
    for key, value in numbers.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        name = f"mountctl_rclone_vfs_{key}"
        if name not in vfs:
            vfs[name] = GaugeMetricFamily(name, f"rclone vfs/stats: {key}", labels=list(LABELS))
        vfs[name].add_metric(labels, float(value))
    for sample in figures.get("metrics") or ():
        family = program.get(sample["family"])
        if family is None:
            family = program[sample["family"]] = Metric(sample["family"], sample["help"], sample["type"])
        family.add_sample(sample["name"], {**dict(zip(LABELS, labels, strict=True)), **sample["labels"]}, sample["value"])


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


class MountCollector:
    """A Prometheus collector over status rows: ``rows`` (the exporter's snapshot), else a fresh ``status``."""

    def __init__(self, timeout_s: float = 2.0, rows: Callable[[], list[dict[str, Any]]] | None = None) -> None:
        self._rows = rows or (lambda: status(timeout_s))

    def describe(self) -> list[Metric]:
        return []  # names vary with what the mount programs report: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        yield from collect_rows(self._rows())


# Health states that make a mounted mount broken for /readyz.  Any other state (slow, busy, not permitted for
# this user, not probed yet) is a mount that serves its owner: no reason to take the node out of service.  A mount
# whose store does not answer ("store-unreachable") is broken here though not remounted: the node cannot read new
# data, and the line names the store.
BROKEN_HEALTH = tuple(state for state in HEALTH_STATES if state not in SERVING_STATES)


# Record states a job passes through on purpose, each within its own bound (the mount timeout, the unmount
# bound): a node with a mount in one of them is not broken.  A supervisor that died there reads "abandoned".
IN_TRANSITION = ("starting", "stopping")


def readiness(rows: Iterable[dict[str, Any]]) -> tuple[bool, str]:
    """(ready, body): ready unless a mount is broken; the body names each broken mount, and why.

    A mount still starting (a job is mounting) or stopping (a job has left) is not broken: it is counted by
    its state in the body.  One that fails to start turns ``failed``, which is broken.
    """
    problems = []
    up = 0
    moving: dict[str, int] = {}
    for row in rows:
        health = row["health"]
        if row["state"] in IN_TRANSITION:
            moving[row["state"]] = moving.get(row["state"], 0) + 1
        elif row["state"] != "mounted" or health.get("state") in BROKEN_HEALTH:
            why = health.get("error") or row.get("last_error") or ""
            problems.append(f"{row['dir']} ({row['uri']}, {row['backend']}): state {row['state']}, "
                            f"health {health.get('state')}" + (f": {why}" if why else ""))
        else:
            up += 1
    if problems:
        return False, "not ready:\n" + "\n".join(problems) + "\n"
    return True, f"ready: {up} mount(s) up" + "".join(f", {n} {state}" for state, n in moving.items()) + "\n"


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (127.0.0.1) as an address to bind."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise MountctlError(f"--listen {text!r} is not HOST:PORT; e.g. 127.0.0.1:9464")
    return (host.strip("[]") or "127.0.0.1"), int(port)


def address_family(host: str, port: int) -> socket.AddressFamily:
    """The family to listen with on ``host``, checked up front: an IPv6 address on an IPv4-only host is one line."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise MountctlError(f"--listen {host}:{port}: {host!r} is not an address of this host ({exc.strerror}); "
                            "e.g. 127.0.0.1:9464") from None
    family = infos[0][0]
    try:
        socket.socket(family, socket.SOCK_STREAM).close()
    except OSError as exc:
        raise MountctlError(f"--listen {host}:{port}: this host cannot listen on {family.name} addresses "
                            f"({exc.strerror}); use 127.0.0.1:{port}") from None
    return family


MAX_HEAD_BYTES = 64 * 1024  # a request line and headers; http.server's own line limit


@dataclass
class _Arrival:
    """A connection in the lobby: who, until when its whole request may take, and what it has sent so far."""

    client_address: Any
    deadline: float
    head: bytearray = field(default_factory=bytearray)


class _PreReadHandler(BaseHTTPRequestHandler):
    """Reads the request the lobby has already received, and writes the answer within what is left of the deadline."""

    server: _BoundedHTTPServer

    def setup(self) -> None:
        super().setup()
        head, deadline = self.server.arrival()
        self.rfile = io.BytesIO(head)
        self.connection.settimeout(max(1.0, deadline - time.monotonic()))


class _BoundedHTTPServer(HTTPServer):
    """Connections wait in a lobby until their whole request head has arrived; ``workers`` threads answer them.

    ``ThreadingHTTPServer`` starts a thread per connection with no cap and no timeout: a few
    hundred idle clients hold a few hundred threads.  Here a connection costs a slot in one
    selector while its request arrives, and at most ``backlog`` wait at once.  The lobby reads
    each request head itself, without blocking, so a client that sends a byte at a time holds
    no worker: it is closed when ``deadline_s`` after it connected its request is still not
    complete, however steadily it trickles.  A complete request waits for a worker in a queue
    of at most ``waiting``; beyond that it is answered 503 at once.
    """

    def __init__(self, address: tuple[str, int], handler: type[_PreReadHandler], *,
                 family: socket.AddressFamily, workers: int, backlog: int, deadline_s: float, waiting: int) -> None:
        self.address_family = family
        self.request_queue_size = backlog  # the kernel's accept queue (socketserver's default of 5 drops SYNs)
        super().__init__(address, handler)
        self._backlog, self._deadline_s = backlog, deadline_s
        self._lobby = selectors.DefaultSelector()
        self._lobby_lock = threading.Lock()
        self._ready: queue.Queue[tuple[socket.socket, _Arrival] | None] = queue.Queue(maxsize=waiting)
        self._current = threading.local()  # the arrival a worker serves, for its handler
        self._closing = threading.Event()
        self._arrived = threading.Event()
        self._threads = [threading.Thread(target=self._work, name=f"mountctl-exporter-{n}", daemon=True)
                         for n in range(workers)]
        self._threads.append(threading.Thread(target=self._watch_lobby, name="mountctl-exporter-lobby", daemon=True))
        for thread in self._threads:
            thread.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lobby_lock:
            if len(self._lobby.get_map()) >= self._backlog:
                log.warning("exporter: %d connections wait already; closed one from %s", self._backlog, client_address)
                self.shutdown_request(request)
                return
            request.setblocking(False)
            self._lobby.register(request, selectors.EVENT_READ,
                                 _Arrival(client_address, time.monotonic() + self._deadline_s))
        self._arrived.set()

    def _watch_lobby(self) -> None:
        while not self._closing.is_set():
            if not self._lobby.get_map():
                self._arrived.wait(0.5)  # nothing waits: sleep until a connection comes
                self._arrived.clear()
                continue
            events = self._lobby.select(timeout=0.05)
            with self._lobby_lock:
                for key, _ in events:
                    self._read_some(cast(socket.socket, key.fileobj), key.data)
                now = time.monotonic()
                for key in list(self._lobby.get_map().values()):
                    if now > key.data.deadline:  # its request did not arrive in time: closed, no worker spent on it
                        self._lobby.unregister(key.fileobj)
                        self._refuse(cast(socket.socket, key.fileobj), "408 Request Timeout",
                                     f"the request did not arrive within {self._deadline_s:g}s\n", answer=bool(key.data.head))

    def _read_some(self, request: socket.socket, arrival: _Arrival) -> None:
        """Take what the client has sent; hand the connection on once its request head is complete."""
        try:
            data = request.recv(16384)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went away
            self._lobby.unregister(request)
            self.shutdown_request(request)
            return
        arrival.head += data
        if b"\r\n\r\n" not in arrival.head and b"\n\n" not in arrival.head:
            if len(arrival.head) > MAX_HEAD_BYTES:
                self._lobby.unregister(request)
                self._refuse(request, "431 Request Header Fields Too Large",
                             f"the request head exceeds {MAX_HEAD_BYTES} bytes\n")
            return
        self._lobby.unregister(request)
        try:
            self._ready.put_nowait((request, arrival))
        except queue.Full:
            log.warning("exporter: %d requests wait for a worker already; refused one from %s",
                        self._ready.maxsize, arrival.client_address)
            self._refuse(request, "503 Service Unavailable",
                         f"busy: {self._ready.maxsize} requests wait for a worker already; retry\n")

    def _refuse(self, request: socket.socket, status: str, why: str, *, answer: bool = True) -> None:
        """Answer with one status line, without blocking (a client that reads nothing gets nothing), and close."""
        if answer:
            body = why.encode()
            with contextlib.suppress(OSError):
                request.send(f"HTTP/1.0 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                             f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        self.shutdown_request(request)

    def arrival(self) -> tuple[bytes, float]:
        """For the handler on a worker thread: the request head the lobby read, and the connection's deadline."""
        arrival: _Arrival = self._current.arrival
        return bytes(arrival.head), arrival.deadline

    def _work(self) -> None:
        while True:
            item = self._ready.get()
            if item is None:
                return
            request, arrival = item
            self._current.arrival = arrival
            try:
                self.finish_request(request, arrival.client_address)
            except Exception:  # a client that went away or timed out: its connection only
                log.debug("exporter: a connection from %s failed", arrival.client_address, exc_info=True)
            finally:
                self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        self._closing.set()
        with self._lobby_lock:
            for key in list(self._lobby.get_map().values()):
                self._lobby.unregister(key.fileobj)
                self.shutdown_request(cast(socket.socket, key.fileobj))
        self._arrived.set()
        with contextlib.suppress(queue.Empty):
            while True:  # requests no worker took: closed, so that the stop signals below fit in the queue
                item = self._ready.get_nowait()
                if item is not None:
                    self.shutdown_request(item[0])
        for thread in self._threads:
            if thread.name != "mountctl-exporter-lobby":
                with contextlib.suppress(queue.Full):
                    self._ready.put(None, timeout=1)
        for thread in self._threads:
            thread.join(timeout=5)
        self._lobby.close()


class Exporter:
    """The HTTP server; ``start()`` serves on a daemon thread and probes in the background, ``stop()`` ends both.

    ``timeout_s`` bounds each mount's probe, ``interval_s`` is the time between probe rounds,
    ``request_timeout_s`` bounds the whole request of a connection from its connect (an idle one,
    or one sending a byte at a time, is closed then), ``workers`` caps the requests served at once,
    ``backlog`` the connections whose request is still arriving and ``waiting`` the complete
    requests queued for a worker (beyond it, 503).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 9464, *, timeout_s: float = 2.0,
                 interval_s: float = 5.0, request_timeout_s: float = 10.0, workers: int = 16,
                 backlog: int = 128, waiting: int = 64) -> None:
        self.timeout_s = timeout_s
        self.snapshot = StatusSnapshot(timeout_s, interval_s)
        self.registry = CollectorRegistry()
        self.registry.register(MountCollector(timeout_s, rows=self.snapshot.rows))
        self._server = _BoundedHTTPServer((host, port), self._handler(),
                                          family=address_family(host, port), workers=workers, backlog=backlog,
                                          deadline_s=request_timeout_s, waiting=waiting)
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def _handler(self) -> type[_PreReadHandler]:
        exporter = self

        class Handler(_PreReadHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server spelling)
                path = self.path.split("?", 1)[0]
                try:
                    if path == "/metrics":
                        self._send(200, generate_latest(exporter.registry), CONTENT_TYPE_LATEST)
                    elif path == "/healthz":
                        self._send(200, b"ok\n")
                    elif path == "/readyz":
                        ready, body = readiness(exporter.snapshot.rows())
                        self._send(200 if ready else 503, body.encode())
                    else:
                        self._send(404, b"not found: try /metrics, /healthz or /readyz\n")
                except Exception as exc:  # a broken scrape is reported to the scraper, the server goes on
                    log.exception("exporter: %s failed", path)
                    self._send(500, f"{path} failed: {type(exc).__name__}: {exc}\n".encode())

            def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
                log.debug("exporter: " + format, *args)

        return Handler

    def start(self) -> Exporter:
        self.snapshot.start()
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="mountctl-exporter", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=timeout_s)
            self._thread = None
        self._server.server_close()
        self.snapshot.stop(timeout_s)

    def __enter__(self) -> Exporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
