"""Starting the local S3 server: a server that dies at once is a clear error, and starts are serialized."""

from __future__ import annotations

import fcntl
import os

import pytest

from mountctl.errors import LocalS3Error
from mountctl.local_s3 import LocalS3


def test_a_server_that_dies_at_once_is_a_clear_error_not_a_traceback(tmp_path):
    """A stand-in `weed` that exits at once: SeaweedFS cannot be made to die on demand."""
    fake = tmp_path / "weed"
    fake.write_text("#!/bin/sh\necho 'bind: address already in use' >&2\nexit 3\n")
    fake.chmod(0o755)
    server = LocalS3(str(tmp_path / "home"), weed=str(fake))
    with pytest.raises(LocalS3Error, match="exited") as raised:
        server.start(buckets=(), timeout_s=10)
    assert "already in use" in str(raised.value) or "status 3" in str(raised.value)


def test_a_second_start_waits_for_the_first(tmp_path):
    """While one start holds the lock, another waits (bounded) rather than starting a second server."""
    server = LocalS3(str(tmp_path / "home"), weed="/nonexistent/weed")
    fd = os.open(os.path.join(server.dir, "start.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(LocalS3Error, match="held its lock"):
            server.start(buckets=(), timeout_s=0.3)
    finally:
        os.close(fd)
