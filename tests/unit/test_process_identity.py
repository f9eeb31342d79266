"""A process is named by pid and start time; a step of the wall clock must not make a live one read as gone, nor
leave a dead supervisor's mount program running.

psutil's ``create_time`` is the start in ticks after boot plus a boot time that the kernel derives from the wall
clock, so an NTP step moves it. A bench saw it: a 33 s step mid-run, after which its local S3 server read as gone,
was not stopped at the end, and the next run could not start another on the same data. Stepping the real clock
needs root and would disturb everything else on the machine, so these tests move ``create_time`` by a patch,
as the step moved it; the process and its ``/proc`` entry are real.
"""

from __future__ import annotations

import json
import subprocess

import psutil
import pytest

from mountctl.local_s3.server import LocalS3
from mountctl.processes import process_alive, process_identity, start_ticks

STEP_S = 33.0


@pytest.fixture
def child():
    process = subprocess.Popen(["sleep", "30"])
    try:
        yield process
    finally:
        process.kill()
        process.wait(timeout=5)


@pytest.fixture
def stepped_clock(monkeypatch):
    real = psutil.Process.create_time
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: real(self) + STEP_S)


def test_a_live_process_reads_alive_after_the_wall_clock_is_stepped(child, stepped_clock):
    identity = {"pid": child.pid, "create_time": psutil.Process(child.pid).create_time() - STEP_S,
                "start_ticks": start_ticks(child.pid)}
    assert process_alive(identity)


def test_another_process_on_the_same_pid_is_still_told_apart(child):
    identity = process_identity(child.pid)
    assert process_alive(identity)
    assert not process_alive({**identity, "start_ticks": identity["start_ticks"] - 100})


def test_an_identity_written_before_the_ticks_were_recorded_is_compared_by_start_time(child):
    identity = process_identity(child.pid)
    del identity["start_ticks"]
    assert process_alive(identity)
    assert not process_alive({**identity, "create_time": identity["create_time"] + 1})


def test_the_local_s3_server_reads_running_after_the_wall_clock_is_stepped(tmp_path, child, monkeypatch):
    server = LocalS3(str(tmp_path / "home"))
    recorded = {"pid": child.pid, "create_time": psutil.Process(child.pid).create_time(),
                "start_ticks": start_ticks(child.pid), "endpoint": "http://127.0.0.1:9", "ports": {},
                "started_at": 0.0}
    (tmp_path / "home").mkdir(parents=True, exist_ok=True)
    (tmp_path / "home" / "server.json").write_text(json.dumps(recorded))
    assert server._server() is not None
    real = psutil.Process.create_time
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: real(self) + STEP_S)
    assert server._server() is not None, "a clock step made the running server read as gone"


def _abandoned(tmp_path, program: dict, created_at: float):
    from mountctl.shared.registry import MountRecord, Registry

    registry = Registry(str(tmp_path))
    dead_supervisor = {"pid": 999_999_999, "create_time": 1.0}
    registry.write(MountRecord(uri="s3://b/", mount_dir="/m", spec={}, identity={}, supervisor=dead_supervisor,
                               program_pid=program["pid"], program=program, created_at=created_at))
    return registry


def test_a_dead_supervisors_program_is_killed_after_the_wall_clock_is_stepped_back(tmp_path, child, monkeypatch):
    from mountctl.shared.registry import clear_abandoned

    program = process_identity(child.pid)
    registry = _abandoned(tmp_path, program, created_at=program["create_time"] + 0.5)  # recorded just after
    real = psutil.Process.create_time
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: real(self) - STEP_S)  # stepped back
    with registry.locked("/m"):
        assert clear_abandoned("/m", registry.read("/m"), registry)
    assert child.wait(timeout=5) == -9, "the abandoned mount program was left running"
    assert registry.read("/m") is None


def test_a_process_that_took_a_dead_programs_pid_is_not_killed(tmp_path, child):
    from mountctl.shared.registry import clear_abandoned

    program = process_identity(child.pid)
    earlier = {**program, "start_ticks": program["start_ticks"] - 100}  # the recorded program started earlier
    registry = _abandoned(tmp_path, earlier, created_at=program["create_time"] - 10)
    with registry.locked("/m"):
        assert clear_abandoned("/m", registry.read("/m"), registry)
    assert child.poll() is None, "a process that only shares the pid was killed"
