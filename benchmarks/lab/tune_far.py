#!/usr/bin/env python3
"""Mount-program flags on the far store: the bytes path through each variant, beside s3torchconnector and raw GETs.

    flock -w 1500 /tmp/mountctl-heavy.lock python benchmarks/lab/tune_far.py [--repeats 3] [--latency-ms 20 --rate-mb-s 50]

It starts a private embedded local S3 with the far profile (``mountctl local-s3
start --profile far``: a real nginx adding latency per request and a cap per
connection), uploads 8 tar shards of 64 MiB once, then per repeat and per
variant runs the bench's bytes cell (``bytes_path.bytes_cell``: every shard walked
as a tar stream by 1 and by 4 reader processes).  Each mount cell gets a fresh
private mount (no data cache) with the variant's flags on top of mountctl's
defaults (a later flag wins), so no cell reads another's page cache.  In the same
run: s3torchconnector (the s3io source) and 8-way ranged GETs of 8 MiB (the
limit).  Prints one JSON line per cell, then the medians as a Markdown table
with each mount program's peak RSS.  The numbers behind the MountS3, Rclone and
S3fsFuse defaults in backends.py (docs/mount-s3.md "Tuned on the far store").
``--shards 24 --shard-mib 16`` reads shards of the bench's size.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import statistics
import tarfile
import tempfile
import time
from typing import Any

import mountctl
from benchmarks.harness.bytes_path import bytes_cell
from benchmarks.harness.limits import LocalDiskSource, raw_get
from mountctl import s3
from mountctl.local_s3.far_proxy import FarProfile
from mountctl.local_s3.server import LocalS3
from mountctl.pytorch.data.index.manifest import Manifest, ShardInfo
from mountctl.pytorch.data.sources import open_source

MIB = 1 << 20
SHARDS, SHARD_MIB, MEMBER_MIB = 8, 64, 1  # the defaults of --shards and --shard-mib
BUCKET = "tune"
URI = f"s3://{BUCKET}/far/"

# label -> (program, flags added after mountctl's defaults).  None as program: a library route.
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "rclone mountctl default": ("rclone", ()),
    "rclone streams 8 x 8M": ("rclone", ("--vfs-read-chunk-streams", "8", "--vfs-read-chunk-size", "8M")),
    "rclone streams 16 x 4M": ("rclone", ("--vfs-read-chunk-streams", "16", "--vfs-read-chunk-size", "4M")),
    "rclone streams 32 x 4M": ("rclone", ("--vfs-read-chunk-streams", "32", "--vfs-read-chunk-size", "4M")),
    "rclone streams 16 x 4M, buffer 128M": ("rclone", ("--vfs-read-chunk-streams", "16", "--vfs-read-chunk-size",
                                                       "4M", "--buffer-size", "128M")),
    "mount-s3 mountctl default": ("mount-s3", ()),
    "mount-s3 parts 8M (AWS's default)": ("mount-s3", ("--part-size", str(8 * MIB))),
    # Ours, not AWS's flags (mount-s3/src/cli.rs): the prefetcher's first GET and how fast its window grows.
    "mount-s3 parts 5M, no first GET": ("mount-s3", ("--initial-request-size", "0")),
    "mount-s3 parts 5M, first GET 16M": ("mount-s3", ("--initial-request-size", str(16 * MIB))),
    "mount-s3 parts 5M, first GET 16M, x8": ("mount-s3", ("--initial-request-size", str(16 * MIB),
                                                          "--prefetch-window-multiplier", "8")),
    "s3fs mountctl default": ("s3fs", ()),
    "s3fs parallel_count=10": ("s3fs", ("-o", "parallel_count=10")),
    "s3fs parallel_count=20": ("s3fs", ("-o", "parallel_count=20")),
    "s3fs parallel_count=10,multipart_size=20": ("s3fs", ("-o", "parallel_count=10,multipart_size=20")),
    "s3fs parallel_count=20,multipart_size=5": ("s3fs", ("-o", "parallel_count=20,multipart_size=5")),
}
LIBRARIES = ("s3io (s3torchconnector)", "raw 8-way ranged GETs of 8 MiB")


def _shard(index: int, shard_mib: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for member in range(shard_mib // MEMBER_MIB):
            data = os.urandom(MEMBER_MIB * MIB)
            info = tarfile.TarInfo(f"{index:02d}-{member:03d}.bin")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def upload_shards(server: LocalS3, count: int = SHARDS, shard_mib: int = SHARD_MIB) -> Manifest:
    """COUNT tar shards of SHARD_MIB one-MiB members, uploaded straight to the server (not through the proxy)."""
    client = s3.client(server.settings(direct=True), read_timeout=120)
    shards = []
    for index in range(count):
        body = _shard(index, shard_mib)
        name = f"shard-{index:02d}.tar"
        client.put_object(Bucket=BUCKET, Key=f"far/{name}", Body=body)
        samples = shard_mib // MEMBER_MIB
        shards.append(ShardInfo(name=name, samples=samples, first_index=index * samples, bytes=len(body),
                                sha256=hashlib.sha256(body).hexdigest()))
    return Manifest(num_images=sum(s.samples for s in shards), image_size=0, num_classes=1, seed=0,
                    shards=tuple(shards))


def cell(label: str, manifest: Manifest, settings: Any, readers: int, scratch: str) -> dict[str, Any]:
    if label == LIBRARIES[1]:
        got = raw_get(settings, URI, manifest, threads=8, part_size=8 * MIB)
        return {"mb_per_s": round(got["bytes"] / got["seconds"] / 1e6, 2), "program_peak_rss_mb": None}
    if label == LIBRARIES[0]:
        with open_source("s3io", URI, settings) as source:
            return bytes_cell(manifest, source, readers=readers)
    backend, flags = VARIANTS[label]
    with mountctl.mount(URI, os.path.join(scratch, "m"), backend=backend, shared=False, settings=settings,
                        extra_args={backend: flags}) as m:
        return bytes_cell(manifest, LocalDiskSource(m.path), readers=readers, program_pid=m.pid)


def table(rows: list[dict[str, Any]], labels: list[str], readers: list[int]) -> str:
    """Medians per route and reader count; the raw-GET limit has no readers and fills every column."""
    columns = [f"{n} reader{'s' if n > 1 else ''} MB/s" for n in readers]
    lines = ["| route | " + " | ".join(columns) + " | peak RSS MB | program CPU % |",
             "|" + " --- |" * (len(readers) + 3)]
    for label in labels:
        mine = [r for r in rows if r["route"] == label]
        cells = []
        for n in readers:
            values = [r["mb_per_s"] for r in mine if r["readers"] == n or label == LIBRARIES[1]]
            cells.append(f"{statistics.median(values):.0f}" if values else "-")
        rss = [r["program_peak_rss_mb"] for r in mine if r.get("program_peak_rss_mb") is not None]
        cpu = [r["program_cpu_pct"] for r in mine if r.get("program_cpu_pct") is not None]
        cells.append(f"{max(rss):.0f}" if rss else "-")
        cells.append(f"{statistics.median(cpu):.0f}" if cpu else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--readers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--latency-ms", type=float, default=FarProfile().latency_ms)
    parser.add_argument("--rate-mb-s", type=float, default=FarProfile().rate_mb_s)
    parser.add_argument("--shards", type=int, default=SHARDS, help="how many tar shards (default: %(default)s)")
    parser.add_argument("--shard-mib", type=int, default=SHARD_MIB,
                        help="each shard's size in MiB (default: %(default)s; the bench's own shards are 16 MB)")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), help="mount variants to run (default: all)")
    args = parser.parse_args()
    labels = [*args.variants, *LIBRARIES]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mountctl-tune-far-") as scratch:
        os.environ["MOUNTCTL_HOME"] = os.path.join(scratch, "home")  # private mounts, records and server
        server = LocalS3(os.path.join(scratch, "home", "local-s3"))
        server.start(buckets=(BUCKET,))
        try:
            status = server.start_far(FarProfile(latency_ms=args.latency_ms, rate_mb_s=args.rate_mb_s))
            settings = server.settings()
            manifest = upload_shards(server, args.shards, args.shard_mib)
            print(json.dumps({"shards": args.shards, "shard_mib": args.shard_mib, "store": status.to_dict()["far"], "endpoint": status.endpoint_url,
                              "rclone": mountctl.backend_versions().get("rclone"),
                              "s3fs": mountctl.backend_versions().get("s3fs"),
                              "load_avg": os.getloadavg(), "started": time.strftime("%H:%M:%S")}), flush=True)
            for repeat in range(args.repeats):  # round-robin, so drifting load hits every route alike
                for label in labels:
                    for readers in ([1] if label == LIBRARIES[1] else args.readers):
                        result = cell(label, manifest, settings, readers, scratch)
                        rows.append({"route": label, "repeat": repeat, "readers": readers,
                                     "load_avg": round(os.getloadavg()[0], 2), **result})
                        print(json.dumps(rows[-1]), flush=True)
        finally:
            server.stop()
    print(f"\nload average at the end: {os.getloadavg()}; medians of {args.repeats}:\n")
    print(table(rows, labels, args.readers))


if __name__ == "__main__":
    main()
