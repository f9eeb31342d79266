"""Teardown plumbing: signal handlers land only from the main thread, spawning never waits unbounded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from mountctl import teardown
from mountctl.errors import MountTimeout


@pytest.fixture
def fresh_handlers(monkeypatch):
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    for s in saved:
        signal.signal(s, signal.SIG_DFL)
    monkeypatch.setattr(teardown, "_signals_installed", False)
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_a_first_call_from_another_thread_leaves_the_handlers_to_the_main_thread(fresh_handlers):
    worker = threading.Thread(target=teardown.install_signal_handlers)
    worker.start()
    worker.join()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    teardown.install_signal_handlers()
    assert signal.getsignal(signal.SIGTERM) is teardown._exit_on_signal
    assert signal.getsignal(signal.SIGHUP) is teardown._exit_on_signal


def test_a_handler_someone_else_set_is_kept(fresh_handlers):
    def mine(*_):
        return None

    signal.signal(signal.SIGTERM, mine)
    teardown.install_signal_handlers()
    assert signal.getsignal(signal.SIGTERM) is mine


def test_spawn_waits_with_a_bound_and_kills_a_child_nobody_waits_for():
    spawner = teardown._Spawner()
    started: list[subprocess.Popen[bytes]] = []

    def slow() -> subprocess.Popen[bytes]:
        time.sleep(0.6)
        child = subprocess.Popen(["sleep", "30"])
        started.append(child)
        return child

    began = time.monotonic()
    with pytest.raises(MountTimeout, match="longer than 0.2s"):
        spawner.run(slow, timeout_s=0.2)
    assert time.monotonic() - began < 0.5
    deadline = time.monotonic() + 5
    while not (started and started[0].poll() is not None) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started and started[0].poll() is not None, "the abandoned child was left running"


OWNER = textwrap.dedent("""
    import sys
    from mountctl.teardown import spawn_with_parent_death_signal
    child = spawn_with_parent_death_signal(["/bin/sleep", "60"])
    print(child.pid, flush=True)
    sys.stdin.read()
""")


def test_the_program_dies_with_its_spawner_even_by_sigkill():
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = int(owner.stdout.readline())
    deadline = time.monotonic() + 5
    while psutil.Process(pid).name() != "sleep":  # the wrapper execs the program itself: same pid
        assert time.monotonic() < deadline, "the wrapper never became the program"
        time.sleep(0.01)
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(timeout=10)
    deadline = time.monotonic() + 5
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the program outlived its SIGKILLed spawner"
        time.sleep(0.02)
