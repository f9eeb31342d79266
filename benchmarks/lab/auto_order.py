#!/usr/bin/env python3
"""The evidence behind ``auto``'s order: each installed mount program on the same objects, no cache.

    flock /tmp/mountctl-bench.lock python benchmarks/lab/auto_order.py [s3://bucket/prefix/] [--objects 4]
    PYTHONPATH=$PWD python benchmarks/lab/auto_order.py --epochs

Without a URI it runs on the embedded local S3.  It uploads (once) N objects of
64 MiB and one of 256 MiB, then per program mounts the prefix privately with
mountctl's defaults and no data cache, and prints one JSON line each:
sequential MB/s (1 MiB reads of every 64 MiB object), the daemon's CPU seconds
per GB read, and MB/s of random 64 KiB preads over the 256 MiB object.

``--epochs`` (issue #25 item 6) asks what a training job sees instead: s3fs and rclone side by side in one
run on the far store, with mountctl's defaults (the node cache on), whole epochs 1 and 2 (time to the first
batch, then samples/s over the whole epoch) for the shard loader (``resnet.py bench --quick``'s loader cells
of the mountpoint kind, local disk beside them) and for a loader that opens one file per sample
(``benchmarks/lab/standard_loaders.py``: torchvision's ImageFolder over each mount, S3MapDataset and local disk
beside them).  Each runs in a child with a private MOUNTCTL_HOME and its own embedded S3; about 6 minutes.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import mountctl
from mountctl import s3, uri_or_embedded

MIB = 1 << 20
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAMS = ("s3fs", "rclone")  # the two installed here; mount-s3 is not installable on these machines


def _daemon_cpu_s(pid: int | None) -> float:
    """utime + stime of the mount program (its threads included), in seconds."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _upload(uri: str, objects: int) -> list[str]:
    settings = mountctl.resolve()
    where = mountctl.parse_s3_uri(uri)
    client = s3.client(settings)
    names = [f"seq-{i}.bin" for i in range(objects)] + ["random.bin"]
    for name in names:
        size = 256 * MIB if name == "random.bin" else 64 * MIB
        if s3.object_size(client, where.bucket, where.prefix + name) != size:
            client.put_object(Bucket=where.bucket, Key=where.prefix + name, Body=os.urandom(size))
    return names


def measure(uri: str, backend: str, names: list[str], random_reads: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="auto-order-") as tmp, \
            mountctl.mount(uri, os.path.join(tmp, "m"), backend=backend, shared=False) as m:
        cpu0, t0, read = _daemon_cpu_s(m.pid), time.perf_counter(), 0
        for name in names[:-1]:
            with open(os.path.join(m.path, name), "rb", buffering=0) as f:
                while chunk := f.read(MIB):
                    read += len(chunk)
        seconds, cpu = time.perf_counter() - t0, _daemon_cpu_s(m.pid) - cpu0
        rng = random.Random(0)
        fd = os.open(os.path.join(m.path, names[-1]), os.O_RDONLY)
        try:
            t1 = time.perf_counter()
            for _ in range(random_reads):
                assert len(os.pread(fd, 64 << 10, rng.randrange(0, 256 * MIB - (64 << 10)))) == 64 << 10
            random_s = time.perf_counter() - t1
        finally:
            os.close(fd)
    return {"backend": backend, "seq_mb_per_s": round(read / MIB / seconds, 1),
            "daemon_cpu_s_per_gb": round(cpu / (read / 1e9), 2),
            "random_64k_mb_per_s": round(random_reads * 64 / 1024 / random_s, 1), "random_reads": random_reads,
            "load_avg": os.getloadavg()[0]}


def _child(argv: list[str], home: str, timeout_s: float = 900.0) -> str:
    """One measuring command in a child with its own MOUNTCTL_HOME; its stdout (stderr passes through)."""
    env = {**os.environ, "MOUNTCTL_HOME": home, "PYTHONPATH": REPO, "OMP_WAIT_POLICY": "PASSIVE"}
    for name in [n for n in env if n.startswith("AWS_")]:
        del env[name]  # each child runs its own embedded S3
    done = subprocess.run([sys.executable, *argv], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True,
                          timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited with {done.returncode}")
    return done.stdout


def whole_epochs() -> None:
    """s3fs vs rclone with mountctl's defaults, far store, whole epochs: the shard loader, then ImageFolder."""
    print(json.dumps({"loadavg_before": open("/proc/loadavg").read().split()[:3]}), flush=True)
    with tempfile.TemporaryDirectory(prefix="auto-order-epochs-") as home:
        out = os.path.join(home, "bench-results")
        _child(["resnet.py", "bench", "--quick", "--store", "far", "--kinds", "mountpoint", "--backends",
                ",".join(PROGRAMS), "--no-train", "--no-bytes", "--peers", "", "--out", out, "--no-progress"],
               os.path.join(home, "bench"))
        with open(glob.glob(os.path.join(out, "*.json"))[0]) as f:
            cells = json.load(f)["cells"]
        for cell in cells:
            if cell.get("cell") == "loader":
                print(json.dumps({"loader": "shards (resnet.py bench --quick loader cell)", "route": cell["source"],
                                  "epoch": cell["epoch"], **{k: cell.get(k) for k in (
                                      "status", "first_batch_s", "epoch_samples_per_s", "samples_per_s")}}),
                      flush=True)
    with tempfile.TemporaryDirectory(prefix="auto-order-files-") as home:
        argv = ["benchmarks/lab/standard_loaders.py", *[flag for p in PROGRAMS for flag in ("--backend", p)]]
        print(_child(argv, home), end="", flush=True)
    print(json.dumps({"loadavg_after": open("/proc/loadavg").read().split()[:3]}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("uri", nargs="?")
    parser.add_argument("--epochs", action="store_true",
                        help="whole epochs of a shard loader and of ImageFolder through s3fs and rclone (far store)")
    parser.add_argument("--objects", type=int, default=4, help="64 MiB objects read sequentially (default 4)")
    parser.add_argument("--random-reads", type=int, default=400, help="64 KiB preads (default 400)")
    args = parser.parse_args()
    if args.epochs:
        whole_epochs()
        return
    with uri_or_embedded(args.uri, "s3://mountctl/auto-order/") as uri:
        names = _upload(uri, args.objects)
        for backend in mountctl.installed_backends():
            print(json.dumps(measure(uri, backend, names, args.random_reads)), flush=True)


if __name__ == "__main__":
    main()
