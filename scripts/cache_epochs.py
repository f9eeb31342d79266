#!/usr/bin/env python3
"""What the training mount's cache and read-ahead give: bytes only (tar walk, no decode), epochs 1 and 2.

    eval "$(mountctl local-s3 env)"
    flock /tmp/mountctl-bench.lock python scripts/cache_epochs.py s3://mountctl/ra4k/ --backend s3fs

Two reader threads follow the exactly-once plan.  Each variant gets a fresh
mount (so a cold cache) and reads epochs 1 and 2; variants alternate per
round; medians in MB/s.  The numbers behind BENCHMARKS.md's "Training mounts".
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from mountctl import resolve
from mountctl.pytorch.data.dataset import ShardDataset
from mountctl.pytorch.data.manifest import load_manifest
from mountctl.pytorch.data.sources import open_source

VARIANTS = {"no-cache": {"cache": False}, "cache": {"cache": True}, "cache+read-ahead": {"read_ahead": True}}


def _read(dataset: ShardDataset, worker: int) -> None:
    for _ in dataset.raw_samples(dataset.assignment(worker, 2)):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("uri")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    settings = resolve()
    manifest = load_manifest(settings, args.uri)
    rates: dict[str, list[float]] = {f"{v} epoch {e}": [] for v in VARIANTS for e in (1, 2)}
    for round_ in range(args.rounds):
        names = list(VARIANTS) if round_ % 2 == 0 else list(reversed(VARIANTS))
        for variant in names:
            with open_source("mountpoint", args.uri, settings, backend=args.backend, **VARIANTS[variant]) as source:
                for epoch in (1, 2):
                    dataset = ShardDataset(manifest, source, batch_size=64)
                    dataset.set_epoch(epoch)
                    readers = [threading.Thread(target=_read, args=(dataset, worker)) for worker in range(2)]
                    started = time.perf_counter()
                    for reader in readers:
                        reader.start()
                    for reader in readers:
                        reader.join()
                    seconds = time.perf_counter() - started
                    rates[f"{variant} epoch {epoch}"].append(round(manifest.total_bytes / 1e6 / seconds, 1))
    print(args.backend, rates)
    print(args.backend, "medians MB/s", {k: statistics.median(v) for k, v in rates.items()})


if __name__ == "__main__":
    main()
