"""A real Prometheus scrapes ``mountctl exporter``: a shared mount is up, a kill -9 counts a restart,
and ``/readyz`` turns 503 while the mount is down and back to 200 once the watchdog has remounted it.

Real parts only: the local S3 server, an rclone shared mount under its supervisor, the exporter as the
``mountctl exporter`` command, and Debian's ``/usr/bin/prometheus`` with its own config and data in a temp dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

import mountctl

from conftest import missing, require_fuse

PROMETHEUS = "/usr/bin/prometheus"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, timeout_s: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _wait(what: str, check, timeout_s: float, every_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            last = check()
            if last:
                return last
        time.sleep(every_s)
    raise AssertionError(f"{what} did not happen within {timeout_s:g}s (last: {last!r})")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@pytest.fixture
def exporter(tmp_path):
    """``mountctl exporter`` on a free port; yields its base URL."""
    port = _free_port()
    log = open(tmp_path / "exporter.log", "wb")
    process = subprocess.Popen([sys.executable, "-m", "mountctl", "exporter", "--listen", f"127.0.0.1:{port}",
                                "--timeout", "1"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait("the exporter answering /healthz", lambda: _get(base + "/healthz", 1)[0] == 200, 20)
        yield base
    finally:
        _stop(process)
        log.close()


@pytest.fixture
def prometheus(tmp_path, exporter):
    """A real Prometheus scraping the exporter every second; yields a query function."""
    if not os.access(PROMETHEUS, os.X_OK):
        missing(f"{PROMETHEUS} is not installed (apt-get install prometheus)")
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: mountctl\n"
        f"    static_configs:\n      - targets: ['{exporter.removeprefix('http://')}']\n")
    data = tmp_path / "prometheus-data"
    log = open(tmp_path / "prometheus.log", "wb")
    process = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={data}",
                                f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True)
    base = f"http://127.0.0.1:{port}"

    def query(expr: str) -> list[dict]:
        status, body = _get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
        assert status == 200, body
        return json.loads(body)["data"]["result"]

    try:
        _wait("Prometheus becoming ready", lambda: _get(base + "/-/ready", 1)[0] == 200, 30)
        yield query
    finally:
        _stop(process)
        log.close()
        shutil.rmtree(data, ignore_errors=True)


def _value(results: list[dict]) -> float | None:
    return float(results[0]["value"][1]) if results else None


def test_prometheus_sees_a_mount_up_then_its_restart_after_kill_9_and_readyz_follows(
        s3, bucket, mount_root, exporter, prometheus):
    require_fuse()
    s3.put_object(Bucket=bucket, Key="hello.txt", Body=b"hello")
    with mountctl.mount(f"s3://{bucket}/", str(mount_root / "m"), backend="rclone") as mounted:
        with open(os.path.join(mounted.path, "hello.txt"), "rb") as f:
            assert f.read() == b"hello"
        selector = f'{{dir="{mounted.path}",backend="rclone"}}'
        _wait("mountctl_mount_up == 1 in Prometheus",
              lambda: _value(prometheus(f"mountctl_mount_up{selector}")) == 1.0, 20)
        assert _value(prometheus(f"mountctl_mount_restarts_total{selector}")) == 0.0
        # rclone's own figures reach Prometheus through its private remote control, labelled by mount.
        assert _value(prometheus(f"rclone_bytes_transferred_total{selector}")) is not None
        assert _value(prometheus(f"mountctl_rclone_vfs_in_use{selector}")) is not None
        assert _value(prometheus(f"mountctl_program_rss_bytes{selector}")) > 1 << 20
        assert _get(exporter + "/readyz")[0] == 200

        # `mountctl status --json` reports the same figures.
        done = subprocess.run([sys.executable, "-m", "mountctl", "status", "--json"], capture_output=True,
                              text=True, timeout=30)
        rows = [row for row in json.loads(done.stdout)["mounts"] if row["dir"] == mounted.path]
        assert rows and rows[0]["up"] and rows[0]["memory"]["rss_bytes"] > 1 << 20
        assert "vfs" in rows[0]["program"] and rows[0]["program"]["metrics"]

        os.kill(mounted.pid, signal.SIGKILL)
        status, body = _wait("/readyz answering 503", lambda: (lambda r: r if r[0] == 503 else None)(
            _get(exporter + "/readyz")), 10, every_s=0.05)
        assert mounted.path in body, body

        _wait("mountctl_mount_restarts_total rising in Prometheus",
              lambda: (_value(prometheus(f"mountctl_mount_restarts_total{selector}")) or 0) >= 1, 30)
        _wait("/readyz answering 200 again", lambda: _get(exporter + "/readyz")[0] == 200, 20)
        _wait("mountctl_mount_up back to 1", lambda: _value(prometheus(f"mountctl_mount_up{selector}")) == 1.0, 10)
        with open(os.path.join(mounted.path, "hello.txt"), "rb") as f:
            assert f.read() == b"hello"
