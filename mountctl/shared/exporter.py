"""The node exporter: this node's shared mounts as Prometheus metrics, plus ``/healthz`` and ``/readyz``.

``/metrics`` is built at scrape time from the registry by ``MountCollector``, from
the same figures ``mountctl status --json`` prints (``metrics.mount_figures``).
Every probe in a scrape is bounded, so a wedged mount makes a scrape slower by
at most the probe bound, never hangs it.  ``/healthz`` says the exporter runs;
``/readyz`` is 200 only while every mount is up, else 503 naming which is not and why.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from ..errors import MountctlError
from .registry import SHARED_STATES
from .status import status

__all__ = ["MountCollector", "collect_rows", "readiness", "Exporter", "parse_listen", "LABELS", "STATES"]

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
    """A Prometheus collector that reads the registry (through ``status``) at every scrape."""

    def __init__(self, timeout_s: float = 2.0, rows: Callable[[], list[dict[str, Any]]] | None = None) -> None:
        self._rows = rows or (lambda: status(timeout_s))

    def describe(self) -> list[Metric]:
        return []  # names vary with what the mount programs report: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        yield from collect_rows(self._rows())


def readiness(rows: Iterable[dict[str, Any]]) -> tuple[bool, str]:
    """(ready, body): ready only when every mount is up; the body names each mount that is not, and why."""
    problems = []
    count = 0
    for row in rows:
        count += 1
        if not row["up"]:
            health = row["health"]
            why = health.get("error") or row.get("last_error") or ""
            problems.append(f"{row['dir']} ({row['uri']}, {row['backend']}): state {row['state']}, "
                            f"health {health.get('state')}" + (f": {why}" if why else ""))
    if problems:
        return False, "not ready:\n" + "\n".join(problems) + "\n"
    return True, f"ready: {count} mount(s) up\n"


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``:PORT`` (127.0.0.1) as an address to bind."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise MountctlError(f"--listen {text!r} is not HOST:PORT; e.g. 127.0.0.1:9464")
    return (host.strip("[]") or "127.0.0.1"), int(port)


class Exporter:
    """The HTTP server; ``start()`` serves on a daemon thread, ``stop()`` closes the socket."""

    def __init__(self, host: str = "127.0.0.1", port: int = 9464, *, timeout_s: float = 2.0) -> None:
        self.timeout_s = timeout_s
        self.registry = CollectorRegistry()
        self.registry.register(MountCollector(timeout_s))
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server spelling)
                path = self.path.split("?", 1)[0]
                try:
                    if path == "/metrics":
                        self._send(200, generate_latest(exporter.registry), CONTENT_TYPE_LATEST)
                    elif path == "/healthz":
                        self._send(200, b"ok\n")
                    elif path == "/readyz":
                        ready, body = readiness(status(exporter.timeout_s))
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

    def __enter__(self) -> Exporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
