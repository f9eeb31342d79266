"""Stopping a child a test started: SIGTERM, a bounded wait, then SIGKILL, so that nothing outlives the test.

One helper for every test that runs a command of ours (the exporter, a mount program as another user) in
the background: each wait is bounded, and a child that ignores SIGTERM is killed rather than waited for.
"""

from __future__ import annotations

import subprocess

__all__ = ["stop_child"]


def stop_child(child: subprocess.Popen, grace_s: float = 10.0, kill_wait_s: float = 10.0) -> None:
    """End ``child``; it has been reaped when this returns (or raises ``TimeoutExpired`` if even SIGKILL waits:
    a process stuck in the kernel, which the test must report rather than hide)."""
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(timeout=kill_wait_s)
