#!/usr/bin/env python3
"""Mount an S3 prefix for the length of a ``with`` block and feed a plain PyTorch DataLoader.

    python examples/mount_dataloader.py [s3://BUCKET/images/]

Without a URI it runs on the embedded local S3 (started if it is not running,
stopped again if it was started for this), with a small example dataset
written there on first use, as ``resnet.py bench`` and ``demo`` do.

The prefix holds one folder per class (``cat/0001.jpg``, ``dog/0002.jpg``...),
the layout torchvision's ImageFolder reads.  The endpoint and credentials come
from the environment (for the embedded local S3: eval "$(mountctl local-s3 env)").
"""

import json
import sys
import time

import torch
from torchvision import datasets, transforms

import mountctl
from mountctl.pytorch.fallback import example_uri


def main(uri: str) -> None:
    # One line to mount; other processes on this node asking for the same URI share the mount,
    # and the last one out unmounts it.
    with mountctl.mount(uri) as mounted:
        images = datasets.ImageFolder(mounted.path, transform=transforms.Compose(
            [transforms.Resize(32), transforms.CenterCrop(32), transforms.ToTensor()]))
        loader = torch.utils.data.DataLoader(images, batch_size=16, shuffle=True, num_workers=2)
        started = time.perf_counter()
        seen = 0
        for _images, labels in loader:  # a training step would go here
            seen += len(labels)
        elapsed = time.perf_counter() - started
        print(json.dumps({"images": seen, "classes": images.classes, "path": mounted.path,
                          "backend": mounted.backend, "images_per_s": round(seen / elapsed, 1)}))


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit(__doc__)
    # Without a URI: a small example on the embedded local S3, as `resnet.py bench` and `demo` do.
    with example_uri(sys.argv[1] if len(sys.argv) == 2 else None, "files") as chosen:
        main(chosen)
