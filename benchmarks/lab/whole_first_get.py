#!/usr/bin/env python3
"""What mount-s3's whole first GET (``--whole-first-get``) gains a file read from its start, by object size.

    PATH=DIR_OF_YOUR_MOUNT_S3:$PATH PYTHONPATH=$PWD .venv/bin/python benchmarks/lab/whole_first_get.py [--rounds 3]

Starts a private embedded local S3 with the far profile (20 ms per request, 50 MB/s per connection), uploads
objects of each size, and through one fresh mount per variant and round times, per size: a whole file read
front to back from offset 0 (median over the files), and a 64 KiB read from offset 0 of a file not read before
(what a reader that only wants a header waits for), after 64 KiB reads at random offsets of a 64 MiB object,
which must cost the same with the flag on as off. Every file is looked up once before it is timed, and no
directory is listed, so the read-ahead across files (on, as by default) starts nothing. The numbers behind
``--whole-first-get``'s default (docs/mount-s3.md "The first GET sized by what is known").
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import statistics

import mountctl
from benchmarks.lab.first_get import _timed_read  # the same timed read as first_get.py
from benchmarks.lab.scratch_server import far_scratch_server

MIB = 1 << 20
SIZES_MIB = (2, 4, 8, 16, 32)
WHOLE_FILES = 3  # per size, read whole
HEADER_FILES = 2  # per size, 64 KiB from offset 0
SAMPLE = 64 * 1024
BIG_MIB = 64
VARIANTS: dict[str, tuple[str, ...]] = {
    "off (the crates' 1.125 MiB first GET)": ("--whole-first-get", "0"),
    "up to 16 MiB (the default)": ("--whole-first-get", "16"),
    "up to 64 MiB": ("--whole-first-get", "64"),
}


def _measure(root: str, rng: random.Random) -> dict[str, float]:
    """One round through one mount: ms for each figure. The random reads come first, before any whole first
    GET of a file read only in part can still be downloading beside them."""
    out: dict[str, float] = {}
    big = os.path.join(root, "big")
    os.stat(big)
    offsets = [rng.randrange(MIB, BIG_MIB * MIB - SAMPLE) for _ in range(8)]
    out["64 KiB at a random offset of 64 MiB"] = statistics.median(_timed_read(big, o, SAMPLE) for o in offsets) * 1e3
    for mib in SIZES_MIB:
        whole = [os.path.join(root, f"s{mib:02d}/w{index}") for index in range(WHOLE_FILES)]
        header = [os.path.join(root, f"s{mib:02d}/h{index}") for index in range(HEADER_FILES)]
        for path in whole + header:
            os.stat(path)
        out[f"{mib} MiB whole"] = statistics.median(_timed_read(path, 0, None) for path in whole) * 1e3
        out[f"{mib} MiB first 64 KiB"] = statistics.median(_timed_read(path, 0, SAMPLE) for path in header) * 1e3
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(0)
    figures: dict[str, dict[str, list[float]]] = {label: collections.defaultdict(list) for label in VARIANTS}
    with far_scratch_server("mountctl-whole-first-get-", bucket="lab") as (scratch, server, client):
        for mib in SIZES_MIB:
            body = os.urandom(mib * MIB)
            names = [f"w{i}" for i in range(WHOLE_FILES)] + [f"h{i}" for i in range(HEADER_FILES)]
            for name in names:
                client.put_object(Bucket="lab", Key=f"far/s{mib:02d}/{name}", Body=body)
        client.put_object(Bucket="lab", Key="far/big", Body=os.urandom(BIG_MIB * MIB))
        for _ in range(args.rounds):
            for label, flags in VARIANTS.items():  # every variant in each round
                with mountctl.mount("s3://lab/far/", os.path.join(scratch, "m"), backend="mount-s3", shared=False,
                                    settings=server.settings(),
                                    extra_args={"mount-s3": flags}) as m:
                    for name, ms in _measure(m.path, rng).items():
                        figures[label][name].append(ms)
    names = list(next(iter(figures.values())))
    print(f"medians of {args.rounds} rounds, ms")
    print("| read | " + " | ".join(VARIANTS) + " |")
    print("| --- |" + " --- |" * len(VARIANTS))
    for name in names:
        cells = " | ".join(f"{statistics.median(figures[label][name]):.0f}" for label in VARIANTS)
        print(f"| {name} | {cells} |")


if __name__ == "__main__":
    main()
