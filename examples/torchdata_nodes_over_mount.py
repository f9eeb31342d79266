#!/usr/bin/env python3
"""A torchdata.nodes pipeline over a mounted S3 prefix that resumes mid-epoch, exactly once, after a kill.

    python examples/torchdata_nodes_over_mount.py s3://BUCKET/shard-data/ [--state FILE] [--num-workers N]

Works on the shards ``resnet.py make`` writes.  ``ShardBatchNode`` reads them
through a mountctl mount (the ``mountpoint`` kind; ``--source-kind s3io`` or
``fsspec`` read the same samples without one), ``Prefetcher`` and (on a CUDA
machine) ``PinMemory`` are torchdata's own nodes, and ``Loader`` gives the state.  After every batch
the loader's state and the samples seen so far go to ``--state`` (atomically),
so a run killed at any point and started again with the same ``--state``
trains every remaining sample once, with any ``--num-workers``.  Prints one
line per batch and a JSON summary.  The endpoint and credentials come from the
environment.
"""

import argparse
import json
import os

import torch
from torchdata.nodes import Loader, PinMemory, Prefetcher

from mountctl import resolve
from mountctl.pytorch.data.datasets.torchdata_nodes import ShardBatchNode
from mountctl.pytorch.data.index.manifest import load_manifest
from mountctl.pytorch.data.sources import open_source


def save(path: str, record: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)  # a kill leaves the old record or the new one, never half of one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("uri")
    parser.add_argument("--state", help="a JSON file: the loader's state and the samples seen; resumed if present")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--source-kind", default="mountpoint", choices=("mountpoint", "s3io", "fsspec"))
    args = parser.parse_args()
    settings = resolve()
    manifest = load_manifest(settings, args.uri)
    record = {"loader": None, "seen": [], "done": False}
    if args.state and os.path.exists(args.state):
        with open(args.state) as f:
            record = json.load(f)
    resumed_at = len(record["seen"])

    with open_source(args.source_kind, args.uri, settings) as source:
        node = ShardBatchNode(manifest, source, batch_size=args.batch_size, seed=0, num_workers=args.num_workers)
        pipeline = Prefetcher(node, prefetch_factor=2)  # reads ahead in a thread; its state stays exact
        loader = Loader(PinMemory(pipeline) if torch.cuda.is_available() else pipeline)
        if record["loader"] is not None:
            loader.load_state_dict(record["loader"])
        # One epoch: a state saved at its end would resume at the next epoch's start.
        for step, batch in enumerate(loader if not record["done"] else ()):
            record = {"loader": loader.state_dict(), "seen": record["seen"] + list(batch["index"]), "done": False}
            if args.state:
                save(args.state, record)
            print(json.dumps({"step": step, "epoch": batch["epoch"], "images": len(batch["index"])}), flush=True)
        if args.state:
            save(args.state, {**record, "done": True})
        print(json.dumps({"images": len(record["seen"]) - resumed_at, "resumed_at": resumed_at,
                          "seen": record["seen"], "dataset_images": manifest.num_images,
                          "kind": source.kind, "mount_pid": source.describe().get("mount_pid")}), flush=True)


if __name__ == "__main__":
    main()
