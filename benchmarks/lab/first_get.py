#!/usr/bin/env python3
"""What mount-s3's GET flags cost a random read and a whole file, on the far store.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/lab/first_get.py [--files 12] [--reads 40]

Sequential whole-shard reads (tune_far.py) gain from a big first GET, but a map-style loader reads one
sample at a random offset of a shard and waits for the whole first part. This starts a private embedded
local S3 with the far profile, uploads FILES objects of 16 MiB, and through one fresh mount per variant
times READS opens of a random 110 KB slice (median and 90th percentile) and then each whole file (median).
Every file is looked up once first, so the figures hold no metadata request. The numbers behind mount-s3's
``--read-part-size`` default (docs/mount-s3.md "Tuned on the far store").
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import mountctl
from benchmarks.lab.scratch_server import far_scratch_server

MIB = 1 << 20
SAMPLE = 110_000  # about one of the bench's JPEGs
VARIANTS: dict[str, tuple[str, ...]] = {
    "parts 8M (AWS's default), first GET 1.125M": ("--part-size", str(8 * MIB)),
    "parts 5M (mountctl's default), first GET 1.125M": (),
    "parts 5M, first GET 2M": ("--initial-request-size", str(2 * MIB)),
    "parts 5M, first GET 16M": ("--initial-request-size", str(16 * MIB)),
}


def _timed_read(path: str, offset: int, size: int | None) -> float:
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as file:
        file.seek(offset)
        if size is None:
            while file.read(MIB):
                pass
        else:
            file.read(size)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--reads", type=int, default=40)
    args = parser.parse_args()
    rng = random.Random(0)
    picks = [(rng.randrange(args.files), rng.randrange(16 * MIB - SAMPLE)) for _ in range(args.reads)]
    with far_scratch_server("mountctl-first-get-", bucket="lab") as (scratch, server, client):
        body = os.urandom(16 * MIB)
        for index in range(args.files):
            client.put_object(Bucket="lab", Key=f"far/f{index:02d}", Body=body)
        print("| mount-s3 flags | random 110 KB read, median ms | p90 ms | whole 16 MiB file, median ms |")
        print("| --- | --- | --- | --- |")
        for label, flags in VARIANTS.items():
            with mountctl.mount("s3://lab/far/", os.path.join(scratch, "m"), backend="mount-s3", shared=False,
                                settings=server.settings(), extra_args={"mount-s3": flags}) as m:
                paths = [os.path.join(m.path, f"f{index:02d}") for index in range(args.files)]
                for path in paths:
                    os.stat(path)
                random_reads = sorted(_timed_read(paths[i], offset, SAMPLE) for i, offset in picks)
                whole = [_timed_read(path, 0, None) for path in paths]
                p90 = random_reads[int(0.9 * (len(random_reads) - 1))]
                print(f"| {label} | {statistics.median(random_reads) * 1e3:.0f} | {p90 * 1e3:.0f} | "
                      f"{statistics.median(whole) * 1e3:.0f} |", flush=True)


if __name__ == "__main__":
    main()
