"""rclone's remote control, asked over the unix socket in its mount's private workdir: its own figures, bounded.

rclone answers ``vfs/stats`` and serves its own Prometheus metrics there (``Rclone.command`` turns it on);
every step of a request has a timeout, so a wedged rclone costs a scrape one second, never a hang.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

__all__ = ["rclone_figures", "RC_TIMEOUT_S"]

# How long the exporter waits for a mount program's remote control to answer one request.
RC_TIMEOUT_S = 1.0


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix socket, every step bounded by ``timeout``."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _ask(path: str, method: str, url: str, timeout_s: float) -> str:
    connection = _UnixConnection(path, timeout_s)
    try:
        connection.request(method, url, body=b"{}" if method == "POST" else None,
                           headers={"Content-Type": "application/json"} if method == "POST" else {})
        response = connection.getresponse()
        body = response.read().decode("utf-8", "replace")
        if response.status != 200:
            raise OSError(f"{url} answered HTTP {response.status}")
        return body
    finally:
        connection.close()


def rclone_figures(socket_path: str, timeout_s: float = RC_TIMEOUT_S) -> dict[str, Any]:
    """rclone's ``vfs/stats`` and its own Prometheus samples (``rclone_*``), asked through its remote control.

    A program that does not answer within ``timeout_s`` yields ``{"error": ...}``, never a hang.
    """
    from prometheus_client.parser import text_string_to_metric_families

    try:
        stats = json.loads(_ask(socket_path, "POST", "/vfs/stats", timeout_s))
        text = _ask(socket_path, "GET", "/metrics", timeout_s)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return {"error": f"rclone's remote control at {socket_path} did not answer: {exc}"}
    samples = []
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("rclone_"):
            continue  # its go_* and process_* figures would clash with every other exporter's
        for sample in family.samples:
            samples.append({"name": sample.name, "family": family.name, "type": family.type,
                            "help": family.documentation, "labels": dict(sample.labels), "value": sample.value})
    return {"vfs": stats, "metrics": samples}
