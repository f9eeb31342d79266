"""An S3 outage shorter than the bound never fails a read through a mount, and is reported, not called a deletion.

The store really goes away: the test stops its own SeaweedFS and starts it again on the same
ports, with each mount program, twice (once before the reader resumes, once while it streams),
because what the program answers during the outage (ENOENT, EIO, a blocked read) depends on timing.
Each round reads an object of its own: mount-s3 (by default) keeps the kernel's pages of a file across
opens, so a file read in round 1 would be served from memory in round 2 and never meet the outage.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import time

import pytest

from mountctl import Mount, MountSpec
from mountctl.local_s3.server import LocalS3
from mountctl.s3 import client as s3_client

SIZE = 100 * 1024 * 1024  # past rclone's first 64 MiB read chunk: the rest needs the store
OUTAGE_S = 8.0  # longer than the 5 s stall notice, far below the 120 s bound
KEYS = ("big-1.bin", "big-2.bin")  # one per round, with the same bytes

READER = textwrap.dedent("""
    import hashlib, logging, sys, time
    from mountctl import open_resilient, s3
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    path, bucket, key = sys.argv[1:4]
    settings = s3.resolve()

    def still_exists():  # as the training source wires it
        return s3.object_exists(s3.short_client(settings), bucket, key)

    digest, count = hashlib.sha256(), 0
    with open_resilient(path, still_exists=still_exists) as f:
        head = f.read(4 << 20)
        digest.update(head)
        count += len(head)
        print("started", flush=True)
        pace = float(sys.stdin.readline())  # seconds per MiB: slow enough that the store goes mid-stream
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
            count += len(block)
            time.sleep(pace)
    print(count, digest.hexdigest(), flush=True)
""")


@pytest.fixture(scope="module")
def own_server(tmp_path_factory):
    server = LocalS3(str(tmp_path_factory.mktemp("outage-s3")))
    server.start(buckets=("outage",))
    body = os.urandom(SIZE)
    for key in KEYS:
        s3_client(server.settings()).put_object(Bucket="outage", Key=key, Body=body)
    try:
        yield server, hashlib.sha256(body).hexdigest()
    finally:
        server.stop()


@pytest.mark.parametrize("backend", ["mount-s3", "rclone", "s3fs"], indirect=True)
def test_an_s3_outage_shorter_than_the_bound_is_waited_out_and_reported(backend, own_server, mount_root,
                                                                        monkeypatch):
    server, expected = own_server
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    # The far-store defaults read far ahead (rclone: 16 chunk streams and a 128M buffer; s3fs: 20 parts of
    # 5 MB at once) and could hold the whole file before the store goes: with little read-ahead, the rest of
    # the file really needs the store (s3fs takes the last -o value given).
    small_read_ahead = {"rclone": ["--vfs-read-chunk-streams", "0", "--buffer-size", "8M"],
                        "s3fs": ["-o", "parallel_count=2"]}
    # No warm: it would read the object into memory before the outage, and the reader would never meet it.
    spec = MountSpec(uri="s3://outage/", mount_dir=str(mount_root / "m"), backend=backend,
                     extra_args=small_read_ahead, warm="off")
    with Mount(spec, watchdog=True, watchdog_interval_s=1.0) as m:
        # Round 1: the store goes before the reader resumes; round 2: while it streams.
        for round_, (stop_after_go, key) in enumerate(zip((False, True), KEYS, strict=True), 1):
            events_before, restarts_before = len(m.events), m.restarts
            # The reader is a process of its own, as a training job is: a process holding files open on
            # a stuck FUSE mount cannot fork/exec (each close-on-exec sends FLUSH), and the test must start weed.
            reader = subprocess.Popen(
                [sys.executable, "-c", READER, os.path.join(m.path, key), "outage", key],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                assert reader.stdout.readline().strip() == "started", reader.stderr.read()
                endpoint = server.status().endpoint_url
                if stop_after_go:
                    reader.stdin.write("0.05\n")  # ~5 s for the file: the store stops while it reads
                    reader.stdin.flush()
                    time.sleep(0.5)
                server.stop(grace_s=5)
                down = time.monotonic()
                if not stop_after_go:
                    reader.stdin.write("0\n")
                    reader.stdin.flush()
                time.sleep(OUTAGE_S)
                assert server.start(buckets=("outage",)).endpoint_url == endpoint
                outage = time.monotonic() - down
                back = time.monotonic()
                out, err = reader.communicate(timeout=100)
            finally:
                if reader.poll() is None:
                    reader.kill()
                    reader.wait(timeout=5)
            assert reader.returncode == 0, f"round {round_}: the reader failed:\n{err}"
            count, digest = out.split()
            assert int(count) == SIZE and digest == expected, f"round {round_}: wrong bytes"
            assert "deleted" not in err, err
            lines = [line for line in err.splitlines() if line.strip()]
            stalled = [line for line in lines if "unreachable" in line and "retrying" in line]
            resumed = [line for line in lines if "answering again" in line]
            deadline = time.monotonic() + 15  # the watchdog checks every second: its next check sees the store back
            while ("store-unreachable" in (seen := [e["event"] for e in m.events[events_before:]])
                   and "store-answering" not in seen and time.monotonic() < deadline):
                time.sleep(0.2)
            events = [e["event"] for e in m.events[events_before:]]
            if "store-unreachable" in events and not stalled:
                # The watchdog saw the store itself silent (health.py's store-unreachable) and did not remount, so
                # the reader's read waited in the kernel and never failed: no line of the reader's, and the
                # watchdog's own pair of events says it instead.
                assert "store-answering" in events and m.restarts == restarts_before, (round_, events, err)
                said = "the watchdog: store-unreachable, then store-answering, no remount"
            else:
                assert len(stalled) == 1 and len(resumed) == 1, \
                    f"round {round_}: expected one line each (events {events}, remounts {m.restarts}):\n{err}"
                said = resumed[0]
            print(f"\n[S3 outage {backend} round {round_}] {outage:.1f}s down; reader done "
                  f"{time.monotonic() - back:.1f}s after the store was back; remounts {m.restarts}; {said}; "
                  f"events {events}")
