#!/usr/bin/env python3
"""Try mount-program flags on one bench dataset: raw read MB/s through the mount and loader samples/s.

    eval "$(mountctl local-s3 env)"
    python scripts/tune_mounts.py s3://mountctl/bench/img224-16MB-n8000/ --workers 2

Each variant mounts the prefix privately (not shared) with extra flags on top of
mountctl's defaults (for rclone a later flag wins), reads every shard with
``--readers`` threads in 1 MiB reads (no decode), then runs the bench's loader
cell; the local-disk loader runs first and last as the limit.  The numbers
behind the tuning notes in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import tempfile
import time

import mountctl
from mountctl import resolve
from mountctl.pytorch.benchmark.cells import loader_cell
from mountctl.pytorch.benchmark.limits import copy_shards
from mountctl.pytorch.benchmark.monitor import ResourceMonitor
from mountctl.pytorch.data.manifest import load_manifest
from mountctl.pytorch.data.sources import MountpointSource

VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "rclone default": ("rclone", ()),
    "rclone buffer 64M, chunk 16M": ("rclone", ("--buffer-size", "64M", "--vfs-read-chunk-size", "16M")),
    "rclone buffer 16M": ("rclone", ("--buffer-size", "16M")),
    "rclone max-read-ahead 128k": ("rclone", ("--max-read-ahead", "128k")),
    "rclone max-read-ahead 8M": ("rclone", ("--max-read-ahead", "8M")),
    "s3fs default": ("s3fs", ()),
    "s3fs parallel_count=10,multipart_size=16": ("s3fs", ("-o", "parallel_count=10,multipart_size=16")),
    "s3fs max_stat_cache_size=100000": ("s3fs", ("-o", "max_stat_cache_size=100000")),
}


def read_all(root: str, names: list[str], readers: int) -> float:
    def read(name: str) -> int:
        got = 0
        with open(os.path.join(root, name), "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                got += len(chunk)
        return got

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(readers) as pool:
        total = sum(pool.map(read, names))
    return total / (time.perf_counter() - started) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("uri")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    args = parser.parse_args()
    settings = resolve()
    manifest = load_manifest(settings, args.uri)
    names = [s.name for s in manifest.shards]
    rows = []
    with tempfile.TemporaryDirectory(prefix="mountctl-tune-") as scratch:
        local = copy_shards(settings, args.uri, manifest, os.path.join(scratch, "local"))

        def local_row(label: str) -> None:
            cell = loader_cell(manifest, local, num_workers=args.workers, batch_size=args.batch_size,
                               warmup_batches=3)
            rows.append({"variant": label, "loader_samples_per_s": cell["samples_per_s"],
                         "loader_cpu_pct": cell["loader_cpu_pct"]})
            print(json.dumps(rows[-1]), flush=True)

        local_row("local disk (before)")
        for label in args.variants:
            backend, extra = VARIANTS[label]
            directory = os.path.join(scratch, "m")
            with mountctl.mount(args.uri, directory, backend=backend, shared=False, extra_args={backend: extra}) as m:
                with ResourceMonitor(m.pid) as monitor:
                    read_mb_s = read_all(m.path, names, args.readers)
                source = MountpointSource(root=m.path, backend=backend, mount_pid=m.pid)
                cell = loader_cell(manifest, source, num_workers=args.workers, batch_size=args.batch_size,
                                   warmup_batches=3, program_pid=m.pid)
            rows.append({"variant": label, "read_mb_per_s": round(read_mb_s, 1),
                         "read_daemon_cpu_pct": monitor.usage.program_cpu_pct,
                         "read_daemon_peak_rss_mb": monitor.usage.program_peak_rss_mb,
                         "loader_samples_per_s": cell["samples_per_s"], "loader_daemon_cpu_pct": cell["program_cpu_pct"],
                         "loader_cpu_pct": cell["loader_cpu_pct"]})
            print(json.dumps(rows[-1]), flush=True)
        local_row("local disk (after)")


if __name__ == "__main__":
    main()
