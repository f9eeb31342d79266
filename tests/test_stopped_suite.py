"""A test run stopped by SIGTERM ends the servers its fixtures started and removes its worker's folder.

A CI limit once ended the suite with SIGTERM and left three SeaweedFS servers of its workers running, with their
/tmp/mctl-gw* folders. Here a real pytest run, with one xdist worker as CI has, holds the real `local_s3` fixture
and is stopped by SIGTERM: to its process group, as `timeout` stops a command, or to the pytest process alone, as
`kill PID` does. weed runs in a session of its own, so only the run's own teardown can stop it, or, when the run
is killed outright, the parent-death signal it was started with. The stopped run still prints its `--durations`
list, as scripts/test.sh asks, so CI's log says where the time went.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from mountctl.local_s3.server import LocalS3, LocalS3Error

from conftest import missing

ROOT = Path(__file__).resolve().parents[1]

_HOLDER = textwrap.dedent('''
    import json, os, time

    def test_holds_the_server_until_stopped(local_s3):
        report = {"tmpdir": os.environ["TMPDIR"], "weed_pid": local_s3.status().pid}
        path = os.environ["MCTL_STOP_REPORT"]
        with open(path + ".part", "w") as f:
            json.dump(report, f)
        os.rename(path + ".part", path)
        time.sleep(120)  # the outer test stops the run long before this
''')


def _wait_for(path: Path, run: subprocess.Popen[str], timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if run.poll() is not None:
            raise AssertionError(f"the stopped-suite run ended before its test started: {run.communicate()[0]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the run's test did not start within {timeout_s:g}s")
        time.sleep(0.2)
    return json.loads(path.read_text())


def _still_running(pid: int, timeout_s: float) -> bool:
    """Whether `pid` (a weed) still runs after a bounded wait for it to end."""
    try:
        process = psutil.Process(pid)
        process.wait(timeout=timeout_s)
    except psutil.NoSuchProcess:
        return False
    except psutil.TimeoutExpired:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    return False


@contextlib.contextmanager
def _run_holding_local_s3(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], dict]]:
    """A pytest run of its own (one xdist worker) whose test holds `local_s3`: yields it once its test has started,
    with what the test reported (the worker's TMPDIR and weed's pid); whatever the run left is cleared after."""
    try:
        LocalS3(str(tmp_path / "probe")).weed()
    except LocalS3Error as exc:
        missing(str(exc))
    (tmp_path / "test_holder.py").write_text(_HOLDER)
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MOUNTCTL_"))}  # a run of its own
    env.update(MCTL_STOP_REPORT=str(report), TMPDIR="/tmp", PYTHONPATH=f"{ROOT / 'tests'}{os.pathsep}{ROOT}")
    run = subprocess.Popen(  # tests/conftest.py as a plugin: its fixtures, outside tests/
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest", "-n", "1", "--durations=5",
         "--rootdir", str(tmp_path), str(tmp_path / "test_holder.py")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    held: dict = {}
    try:
        held = _wait_for(report, run, timeout_s=120)
        assert Path(held["tmpdir"]).name.startswith("mctl-gw0-") and Path(held["tmpdir"]).is_dir()
        assert psutil.Process(held["weed_pid"]).name() == "weed"
        yield run, held
    finally:
        if run.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
        if held.get("weed_pid") and _still_running(held["weed_pid"], timeout_s=0):
            psutil.Process(held["weed_pid"]).kill()
        if held.get("tmpdir", "").startswith("/tmp/mctl-gw0-"):
            shutil.rmtree(held["tmpdir"], ignore_errors=True)


@pytest.mark.parametrize("to_whom", ["process group", "pytest alone"])
def test_a_run_stopped_by_sigterm_stops_its_local_s3_and_removes_its_worker_folder(tmp_path: Path,
                                                                                   to_whom: str) -> None:
    with _run_holding_local_s3(tmp_path) as (run, held):
        if to_whom == "process group":
            os.killpg(run.pid, signal.SIGTERM)
        else:
            os.kill(run.pid, signal.SIGTERM)
        output, _ = run.communicate(timeout=90)
        assert not _still_running(held["weed_pid"], timeout_s=30), f"weed outlived the stopped run:\n{output}"
        assert not Path(held["tmpdir"]).exists(), f"the worker's folder outlived the stopped run:\n{output}"
        assert "stopped by signal 15" in output, output
        assert "slowest 5 durations" in output, "a stopped run's log must still say where its time went:\n" + output


def test_a_run_killed_outright_still_stops_its_local_s3(tmp_path: Path) -> None:
    """SIGKILL runs no handler: the kernel's parent-death signal stops weed. The worker's folder stays (a killed
    process removes nothing), and this test clears it."""
    with _run_holding_local_s3(tmp_path) as (run, held):
        os.killpg(run.pid, signal.SIGKILL)  # as `timeout -k` does once its grace is over
        run.wait(timeout=30)
        assert not _still_running(held["weed_pid"], timeout_s=45), "weed outlived its SIGKILLed run"
