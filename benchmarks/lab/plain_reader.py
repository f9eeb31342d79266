#!/usr/bin/env python3
"""A plain reader (no mountctl loader) through each mount program with no cache, against the ranged-GET limit.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/lab/plain_reader.py --rounds 2

Starts its own SeaweedFS behind the far-store proxy (20 ms per request, 50 MB/s per connection) and writes two
datasets: 48 objects of 4 MB (the bench's shard size) and 8 of 64 MiB. In each round, for each dataset, the
limit is measured first, as the bench measures it (every byte once by 8 threads of 8 MB ranged GETs,
``limits.ranged_get``), then each program is mounted fresh, with no cache, and read whole by 1 and 4 reader
threads, each taking every 4th file, in two ways:

* ``listed``: ``os.listdir`` first, then the files in listing order (``cat dir/*``, a loop over a directory, DLIO);
* ``by name``: the same names opened with no listing (a list of paths, ``shard-{000..047}.tar``).

Prints MB/s and the ratio to that round's limit, medians of the rounds (each ratio to its own round's limit).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics

from scratch_server import far_scratch_server

import mountctl
from benchmarks.harness.limits import ranged_get
from benchmarks.harness.plain_cells import read_whole

MB, MIB = 10**6, 2**20
DATASETS = {"4 MB x 48": (48, 4 * MB), "64 MiB x 8": (8, 64 * MIB)}
MODES = ("listed", "by name")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backend", action="append", default=[], help="mount programs (default: every installed one)")
    args = parser.parse_args()
    backends = args.backend or list(mountctl.installed_backends())
    figures: dict[tuple[str, ...], list[tuple[float, float]]] = collections.defaultdict(list)
    with far_scratch_server("mountctl-plain-reader-", bucket="lab") as (scratch, server, client):
        for dataset, (count, size) in DATASETS.items():
            body = os.urandom(size)
            for index in range(count):
                client.put_object(Bucket="lab", Key=f"{_folder(dataset)}/f{index:03d}.bin", Body=body)
        for _ in range(args.rounds):
            for dataset, (count, size) in DATASETS.items():
                folder = _folder(dataset)
                sizes = {f"{folder}/f{index:03d}.bin": size for index in range(count)}
                got = ranged_get(server.settings(), "lab", sizes, threads=8, part_size=8 * MB)
                limit = got["bytes"] / got["seconds"] / MB
                figures[(dataset, "ranged-GET limit", "-", "-")].append((limit, 1.0))
                names = [key.split("/", 1)[1] for key in sizes]
                for backend in backends:
                    for mode in MODES:
                        for readers in (1, 4):
                            with mountctl.mount(f"s3://lab/{folder}/", os.path.join(scratch, "m"), backend=backend,
                                                shared=False, settings=server.settings()) as mounted:
                                rate = read_whole(mounted.path, names, readers, mode == "listed")["mb_per_s"]
                            figures[(dataset, backend, mode, str(readers))].append((rate, rate / limit))
    print(f"medians of {args.rounds} rounds; far store; no cache; ratio to each round's own limit")
    print("| objects | route | files opened | readers | MB/s | x limit |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (dataset, route, mode, readers), values in figures.items():
        print(f"| {dataset} | {route} | {mode} | {readers} | {statistics.median(v[0] for v in values):.1f} | "
              f"{statistics.median(v[1] for v in values):.3f} |")
    print("load average:", open("/proc/loadavg").read().strip())


def _folder(dataset: str) -> str:
    return "small" if dataset.startswith("4 MB") else "big"


if __name__ == "__main__":
    main()
