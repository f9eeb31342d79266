"""processes.kill_group: the child and every process of its group end, and the child is reaped."""

from __future__ import annotations

import subprocess
import time

import psutil

from mountctl.processes import kill_group


def test_the_child_and_its_group_are_killed_and_reaped():
    """A real shell leading its own group, with a grandchild (as a mount program's helpers run beside it)."""
    child = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    assert child.stdout is not None
    grandchild = int(child.stdout.readline())
    assert kill_group(child, 10.0)
    assert child.returncode == -9
    deadline = time.monotonic() + 10
    while _running(grandchild):
        assert time.monotonic() < deadline, "the grandchild outlived its group's SIGKILL"
        time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_child_that_already_ended_is_reported_gone():
    child = subprocess.Popen(["true"], start_new_session=True)
    child.wait(timeout=10)
    assert kill_group(child, 1.0)
