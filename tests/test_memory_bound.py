"""A memory bound holds: the mount program's peak RSS stays under ``memory_mb`` while 4 readers stream.

Real rclone and s3fs-fuse mounts of the local S3 server; 4 threads each read a different 64 MiB object
through the mount while the program's RSS is sampled with psutil (and its kernel high-water mark read).
"""

from __future__ import annotations

import os
import threading
import time

import psutil
import pytest

import mountctl
from mountctl.mounts.backends import BACKENDS
from mountctl.observability.metrics import program_memory

from conftest import missing, require_fuse

MIB = 1 << 20
OBJECT_MB = 64
READERS = 4
# Each program's smallest bound that mountctl accepts: rclone's (below it its reads stalled), and s3fs's
# (it reads through temporary files), and mount-s3's (Mountpoint takes no --memory-target under 512 MiB).
BOUNDS_MB = {"mount-s3": 512, "rclone": 184, "s3fs": 64}
# rclone read with many parallel chunk streams (the tuning a far store wants) would hold
# READERS x 16 x 16 MiB = 1 GiB in flight unbounded: the bound must cap these flags too.
_RCLONE_WIDE = ("--vfs-read-chunk-streams", "16", "--vfs-read-chunk-size", "16M")


def _read_all(path: str, chunk: int = 1 << 20) -> int:
    total = 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            total += len(block)
    return total


def _stream_and_sample(root: str, names: list[str], pid: int) -> tuple[int, list[int]]:
    """Read every name through the mount on its own thread; return the largest RSS sampled and the sizes read."""
    process = psutil.Process(pid)
    peak, done = 0, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            try:
                peak = max(peak, process.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.02)

    sizes = [0] * len(names)

    def read(i: int) -> None:
        sizes[i] = _read_all(os.path.join(root, names[i]))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(len(names))]
    for thread in readers:
        thread.start()
    deadline = time.monotonic() + 90  # one bound for all: a stalled mount must fail the test, not hang it
    for thread in readers:
        thread.join(timeout=max(0.1, deadline - time.monotonic()))
    done.set()
    sampler.join(timeout=5)
    assert not any(thread.is_alive() for thread in readers), "a reader did not finish within 90 s: the mount stalled under its bound"
    return peak, sizes


@pytest.mark.parametrize("program", sorted(BOUNDS_MB))
def test_peak_rss_stays_under_the_bound_while_four_readers_stream(program, s3, bucket, mount_root):
    require_fuse()
    if not BACKENDS[program].available():
        missing(f"{program} is not installed")
    names = [f"big-{i}.bin" for i in range(READERS)]
    for name in names:
        s3.put_object(Bucket=bucket, Key=name, Body=os.urandom(OBJECT_MB * MIB))
    extra = {"rclone": _RCLONE_WIDE} if program == "rclone" else {}
    bound_mb = BOUNDS_MB[program]
    with mountctl.mount(f"s3://{bucket}/", str(mount_root / "m"), backend=program, memory_mb=bound_mb,
                        extra_args=extra) as mounted:
        assert mounted.pid is not None
        peak, sizes = _stream_and_sample(mounted.path, names, mounted.pid)
        high_water = program_memory(mounted.pid)["peak_rss_bytes"]
    assert sizes == [OBJECT_MB * MIB] * READERS
    assert high_water is not None
    print(f"{program}: bound {bound_mb} MiB, sampled peak RSS {peak / MIB:.0f} MiB, VmHWM {high_water / MIB:.0f} MiB")
    assert peak < bound_mb * MIB, f"{program} reached {peak / MIB:.0f} MiB RSS under a {bound_mb} MiB bound"
    assert high_water < bound_mb * MIB, f"{program}'s high-water mark was {high_water / MIB:.0f} MiB"


def test_a_bound_under_mount_s3s_least_runs_at_that_least_and_says_so_in_one_line(s3_env, bucket, mount_root,
                                                                                  tmp_path):
    """Mountpoint takes no ``--memory-target`` under 512 MiB, so a smaller bound runs at 512 (issue 40, 2.4): the
    user is told in one line at mount, as a capped cache is, and status shows the bound in force and why.

    Not refused: training derives its bound from the plan (128 MiB + 64 per reader: 256 with two workers) and
    ``auto`` picks mount-s3 first, so a refusal would stop every default run on a small node."""
    import json
    import subprocess
    import sys

    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not installed; `bash scripts/setup.sh` builds it")
    env = {**os.environ, "MOUNTCTL_HOME": str(tmp_path / "home")}
    mount_dir = str(mount_root / "small")
    cli = [sys.executable, "-m", "mountctl"]
    done = subprocess.run(cli + ["mount", f"s3://{bucket}/", mount_dir, "--backend", "mount-s3", "--memory-mb", "256"],
                          env=env, capture_output=True, text=True, timeout=120)
    try:
        assert done.returncode == 0, done.stderr
        notes = [line for line in done.stderr.splitlines() if "512" in line]
        assert len(notes) == 1, done.stderr
        assert "256 MiB" in notes[0] and "--memory-mb 512" in notes[0], notes
        [row] = json.loads(subprocess.run(cli + ["status", "--json"], env=env, capture_output=True, text=True,
                                          timeout=60, check=True).stdout)["mounts"]
        assert row["memory"]["bound_bytes"] == 512 * MIB
        assert row["memory"]["note"] and notes[0].endswith(row["memory"]["note"]), (row["memory"], notes)
        text = subprocess.run(cli + ["status"], env=env, capture_output=True, text=True, timeout=60, check=True).stdout
        assert f"    memory: {row['memory']['note']}" in text, text
        print(f"\n[mount-s3 --memory-mb 256] {notes[0]}")
    finally:
        subprocess.run(cli + ["unmount", mount_dir], env=env, capture_output=True, timeout=120)
