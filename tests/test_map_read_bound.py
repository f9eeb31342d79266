"""A map-style read that hangs neither holds up the reads after it nor the interpreter's exit (issue 40, 2.10).

Every map-style read is bounded (``FETCH_TIMEOUT_S``, 300 s; 2 s here): it ran on a one-thread pool (or the
read-ahead pool) that the caller left behind when the bound ran out, so the next read queued behind the hung one
and timed out too, and at exit the interpreter joined the pool's thread, which never returned.  The hang is real:
a real rclone mount whose program is stopped with SIGSTOP (every access to it then blocks in the kernel).  The
reader is a real ``FileReader`` over a local directory in which one sample is a symbolic link into that mount and
the other a real JPEG on the local disk, so the second read needs nothing from the stopped mount.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mountctl import Mount, MountSpec

from conftest import require_fuse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOUND_S = 2.0

READER = textwrap.dedent("""
    import sys, time
    from mountctl.pytorch.data.datasets import mapstyle
    from mountctl.pytorch.data.datasets.mapstyle import MapSampleDataset, SampleRef
    from mountctl.pytorch.data.sources.mountpoint import FileReader

    root, threads, bound = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    mapstyle.FETCH_TIMEOUT_S = bound
    names = ["hung.jpg", "local.jpg"]
    dataset = MapSampleDataset(FileReader(root, tuple(names)), names, [SampleRef(0, 0, 0), SampleRef(1, 1, 1)],
                               image_size=32, readahead_threads=threads)
    fetch = dataset.__getitem__ if threads == 0 else lambda i: dataset.__getitems__([i, 1])[0]
    started = time.monotonic()
    try:
        fetch(0)
        print("first: read", flush=True)
    except Exception as exc:
        print(f"first: {type(exc).__name__} after {time.monotonic() - started:.1f}s: {exc}", flush=True)
    started = time.monotonic()
    try:
        image, label, index = fetch(1)
        print(f"second: {tuple(image.shape)} label {label} after {time.monotonic() - started:.1f}s", flush=True)
    except Exception as exc:
        print(f"second: {type(exc).__name__} after {time.monotonic() - started:.1f}s: {exc}", flush=True)
    print("exiting", flush=True)
""")


def _jpeg() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (40, 40), (200, 30, 30)).save(out, format="JPEG")
    return out.getvalue()


@pytest.mark.parametrize("threads", [0, 1], ids=["one-at-a-time", "read-ahead"])
def test_a_hung_read_holds_up_neither_the_next_read_nor_the_exit(threads, s3_env, s3, bucket, mount_root, tmp_path):
    require_fuse()
    s3.put_object(Bucket=bucket, Key="hung.jpg", Body=_jpeg())
    spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=str(mount_root / "m"), backend="rclone")
    local = tmp_path / "samples"
    local.mkdir()
    (local / "local.jpg").write_bytes(_jpeg())
    (local / "hung.jpg").symlink_to(os.path.join(spec.mount_dir, "hung.jpg"))
    env = {**os.environ, "PYTHONPATH": ROOT}
    with Mount(spec) as mounted:
        assert mounted.pid is not None
        os.kill(mounted.pid, signal.SIGSTOP)
        try:
            child = subprocess.Popen([sys.executable, "-c", READER, str(local), str(threads), str(BOUND_S)], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     stdin=subprocess.DEVNULL)
            started = time.monotonic()
            try:
                out, err = child.communicate(timeout=120)
                took = time.monotonic() - started
            except subprocess.TimeoutExpired:
                child.kill()  # a thread blocked in the stopped mount: its FUSE request is killable
                out, err = child.communicate(timeout=30)
                took = None
        finally:
            os.kill(mounted.pid, signal.SIGCONT)
    print(f"\n[hung map read, readahead_threads={threads}] exited after {took}s:\n{out}")
    lines = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    assert lines.get("first", "").startswith(f"DatasetError after {BOUND_S:.0f}"), (out, err[-2000:])
    assert "gave no bytes in 2 s" in lines["first"], out
    second = lines.get("second", "")
    assert second.startswith("(3, 32, 32) label 1 after 0."), f"the next read waited behind the hung one: {out}"
    assert "exiting" in out and took is not None and took < 60, f"the interpreter did not exit: {out}\n{err[-2000:]}"
