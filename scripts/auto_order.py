#!/usr/bin/env python3
"""The evidence behind ``auto``'s order: each installed mount program on the same objects, no cache.

    flock /tmp/mountctl-bench.lock python scripts/auto_order.py [s3://bucket/prefix/] [--objects 4]

Without a URI it runs on the embedded local S3.  It uploads (once) N objects of
64 MiB and one of 256 MiB, then per program mounts the prefix privately with
mountctl's defaults and no data cache, and prints one JSON line each:
sequential MB/s (1 MiB reads of every 64 MiB object), the daemon's CPU seconds
per GB read, and MB/s of random 64 KiB preads over the 256 MiB object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time

import mountctl
from mountctl import s3, uri_or_embedded

MIB = 1 << 20


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("uri", nargs="?")
    parser.add_argument("--objects", type=int, default=4, help="64 MiB objects read sequentially (default 4)")
    parser.add_argument("--random-reads", type=int, default=400, help="64 KiB preads (default 400)")
    args = parser.parse_args()
    with uri_or_embedded(args.uri, "s3://mountctl/auto-order/") as uri:
        names = _upload(uri, args.objects)
        for backend in mountctl.installed_backends():
            print(json.dumps(measure(uri, backend, names, args.random_reads)), flush=True)


if __name__ == "__main__":
    main()
