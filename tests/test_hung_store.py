"""A store that accepts connections and never answers: a read through the mount fails within the outage bound.

The test's own SeaweedFS is stopped with SIGSTOP mid-read (its sockets stay open, nothing answers), so
rclone would wait for its own timeouts (minutes) with the reader blocked in the kernel.  The reader bounds
the read itself: it fails after MOUNTCTL_OUTAGE_BOUND_S with one line naming the store, and says it is
waiting while it waits.  The server is always continued afterwards (only then can the reader's process exit:
the kernel holds a process until the mount program answers a request it has already been handed).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mountctl import Mount, MountSpec
from mountctl.local_s3.server import LocalS3
from mountctl.s3 import client as s3_client

from conftest import require_fuse

SIZE = 48 * 1024 * 1024
BOUND_S = 12.0

READER = textwrap.dedent("""
    import logging, sys, time
    from mountctl import open_resilient
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    with open_resilient(sys.argv[1], buffering=1 << 20) as f:
        f.read(1 << 20)
        print("started", flush=True)
        sys.stdin.readline()
        started = time.monotonic()
        try:
            while f.read(1 << 20):
                pass
            print("finished", flush=True)
        except OSError as exc:
            print(f"failed after {time.monotonic() - started:.1f}s: {exc}", flush=True)
""")


@pytest.fixture
def own_server(tmp_path):
    server = LocalS3(str(tmp_path / "hung-s3"))
    server.start(buckets=("hung",))
    s3_client(server.settings()).put_object(Bucket="hung", Key="big.bin", Body=os.urandom(SIZE))
    try:
        yield server
    finally:
        pid = server.status().pid
        if pid:
            os.kill(pid, signal.SIGCONT)
        server.stop()


def test_a_read_from_a_store_that_never_answers_fails_within_the_bound(own_server, mount_root, monkeypatch):
    require_fuse()
    for name, value in own_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MOUNTCTL_OUTAGE_BOUND_S", str(BOUND_S))
    # Little read-ahead, so that the rest of the file really needs the store.
    spec = MountSpec(uri="s3://hung/", mount_dir=str(mount_root / "m"), backend="rclone",
                     extra_args={"rclone": ["--vfs-read-chunk-streams", "0", "--vfs-read-chunk-size", "1M",
                                            "--buffer-size", "0"]})
    pid = own_server.status().pid
    with Mount(spec, watchdog=False):
        reader = subprocess.Popen([sys.executable, "-c", READER, os.path.join(spec.mount_dir, "big.bin")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert reader.stdout.readline().strip() == "started", reader.stderr.read()
            os.kill(pid, signal.SIGSTOP)
            stopped = time.monotonic()
            reader.stdin.write("go\n")
            reader.stdin.flush()
            # The line comes within the bound; the process itself can exit only once the mount program
            # answers the abandoned read (the kernel waits for a FUSE request already handed to it).
            ready, _, _ = select.select([reader.stdout], [], [], BOUND_S + 45)
            out = reader.stdout.readline() if ready else ""
            waited = time.monotonic() - stopped
        finally:
            os.kill(pid, signal.SIGCONT)
            try:
                err = reader.communicate(timeout=120)[1]
            finally:
                if reader.poll() is None:
                    reader.kill()
                    reader.wait(timeout=30)
    assert out.startswith("failed after"), f"the read did not fail: {out}\n{err}"
    assert "has not answered a read through the mount" in out and "MOUNTCTL_OUTAGE_BOUND_S" in out, out
    assert waited < BOUND_S + 45, f"the reader took {waited:.0f}s to give up"
    assert "not answering" in err, f"no stall line while it waited:\n{err}"


def test_a_mount_whose_store_never_answers_reads_store_unreachable_not_busy(own_server, mount_root, monkeypatch):
    """Read loop alive, handlers stuck: rclone reads each FUSE request from /dev/fuse on its own goroutine and
    serves it on another, so with its store stopped it keeps reading requests (the probe's lookup, and the
    interrupt the kernel sends when the timed-out probe is killed) while no request completes.  Neither may
    count as progress, or such a mount reads "busy" for ever.  The store itself does not answer mountctl's own
    request either, so the verdict is "store-unreachable" (a remount would not help), not "unresponsive"."""
    require_fuse()
    for name, value in own_server.env().items():
        monkeypatch.setenv(name, value)
    # A short listing cache, so that the probe's lookup of a name that cannot exist needs the store.
    spec = MountSpec(uri="s3://hung/", mount_dir=str(mount_root / "m"), backend="rclone", metadata_ttl_s=1,
                     probe_timeout_s=2)
    pid = own_server.status().pid
    with Mount(spec, watchdog=False) as mounted:
        assert mounted.health().ok
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(1.5)  # past the listing cache
            verdicts = [mounted.health() for _ in range(3)]
        finally:
            os.kill(pid, signal.SIGCONT)
    assert [h.state for h in verdicts] == ["store-unreachable"] * 3, verdicts
