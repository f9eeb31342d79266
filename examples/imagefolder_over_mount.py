#!/usr/bin/env python3
"""An ImageFolder over a mounted S3 prefix, with small objects fetched ahead in parallel.

    python examples/imagefolder_over_mount.py [s3://BUCKET/files/train/]

Without a URI it runs on the embedded local S3 (started if it is not running,
stopped again if it was started for this), with a small example dataset
written there on first use, as ``resnet.py bench`` and ``demo`` do.

The prefix holds one folder per class (``cat/0001.jpg``...), e.g. what
``python resnet.py make s3://BUCKET/files/ --num-images 800 --layout files``
writes under ``train/``.  ``image_folder`` finds the same classes and samples
as torchvision's ``ImageFolder``, but reads each batch's objects from a thread
pool (read-ahead), so the latency of one small object at a time through FUSE
overlaps.  The script reads an epoch without and with read-ahead.  The endpoint
and credentials come from the environment (for the embedded local S3:
eval "$(mountctl local-s3 env)").
"""

import json
import sys
import time

import torch

import mountctl
from mountctl.pytorch.data.datasets.mapstyle import collate, image_folder
from mountctl.pytorch.fallback import example_uri


def epoch(dataset, workers: int = 2) -> tuple[int, float]:
    loader = torch.utils.data.DataLoader(dataset, batch_size=16, shuffle=True, num_workers=workers,
                                         collate_fn=collate, timeout=120)
    started, seen = time.perf_counter(), 0
    for batch in loader:  # a training step would go here: batch["images"] (uint8 NCHW), batch["labels"]
        seen += len(batch["labels"])
    return seen, time.perf_counter() - started


def main(uri: str) -> None:
    with mountctl.mount(uri) as mounted:
        rates = {}
        for threads in (0, 16):
            dataset = image_folder(mounted.path, image_size=32, readahead_threads=threads)
            seen, seconds = epoch(dataset)
            rates[f"readahead_{threads}"] = round(seen / seconds, 1)
        print(json.dumps({"images": seen, "classes": dataset.classes, "path": mounted.path,
                          "backend": mounted.backend, "images_per_s": rates}))


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit(__doc__)
    # Without a URI: a small example on the embedded local S3, as `resnet.py bench` and `demo` do.
    with example_uri(sys.argv[1] if len(sys.argv) == 2 else None, "files") as chosen:
        main(chosen)
