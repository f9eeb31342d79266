"""Stopping the local S3 server is bounded even when its process will not die."""

from __future__ import annotations

import subprocess

import psutil
import pytest

from mountctl import LocalS3, LocalS3Error


def test_a_server_that_survives_sigkill_is_reported_not_raised_as_psutil_error(tmp_path, monkeypatch):
    """A stand-in for the kernel: no real process can be made to survive SIGKILL on demand
    (one stuck in uninterruptible sleep would), so ``wait`` is made to time out."""
    server = LocalS3(str(tmp_path))
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        monkeypatch.setattr(psutil.Process, "wait", lambda self, timeout=None: (_ for _ in ()).throw(
            psutil.TimeoutExpired(timeout, self.pid)))
        with pytest.raises(LocalS3Error, match="did not exit within 10s of SIGKILL") as info:
            server._terminate(child.pid, grace_s=0.1)
        assert info.value.timeout_s == 10
    finally:
        child.kill()
        child.wait(timeout=5)


def test_server_ports_avoid_the_kernels_ephemeral_range():
    from mountctl.local_s3.server import port_candidates

    for low, high in [(32768, 60999), (49152, 65535), (1024, 65535)]:
        candidates = port_candidates((low, high))
        if low - 10000 > 10000 or high + 1 <= 55535:
            for port in (candidates[0], candidates[-1]):
                assert not low <= port <= high and not low <= port + 10000 <= high, (low, high, port)
        assert candidates[-1] + 10000 <= 65535
