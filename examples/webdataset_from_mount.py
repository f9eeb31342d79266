#!/usr/bin/env python3
"""Read WebDataset tar shards from a mounted S3 prefix, as if they were local files.

    python examples/webdataset_from_mount.py [s3://BUCKET/shard-data/]

Without a URI it runs on the embedded local S3 (started if it is not running,
stopped again if it was started for this), with a small example dataset
written there on first use, as ``resnet.py bench`` and ``demo`` do.

Works on the shards ``resnet.py make`` writes (``KEY.jpg`` + ``KEY.cls``).
The endpoint and credentials come from the environment.
"""

import glob
import json
import os
import sys

import torch
import webdataset as wds

import mountctl
from mountctl.pytorch.fallback import example_uri


def main(uri: str) -> None:
    with mountctl.mount(uri) as mounted:
        shards = sorted(glob.glob(os.path.join(mounted.path, "*.tar")))
        if not shards:
            sys.exit(f"no .tar shards under {uri}; write some with `python resnet.py make {uri} --num-images 512`")
        # Plain file paths: webdataset opens them like any local shard. split_by_worker gives each
        # DataLoader worker its own shards.
        dataset = (wds.WebDataset(shards, shardshuffle=False, workersplitter=wds.split_by_worker)
                   .decode("torchrgb").to_tuple("jpg", "cls").batched(16))
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=min(2, len(shards)))
        images = 0
        labels = set()
        for batch, classes in loader:
            images += len(batch)
            labels.update(int(c) for c in classes)
        print(json.dumps({"shards": len(shards), "images": images, "distinct_labels": len(labels),
                          "backend": mounted.backend}))


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit(__doc__)
    # Without a URI: a small example on the embedded local S3, as `resnet.py bench` and `demo` do.
    with example_uri(sys.argv[1] if len(sys.argv) == 2 else None, "shards") as chosen:
        main(chosen)
