#!/usr/bin/env python3
"""Train on an ImageNet-style class tree (``PREFIX/<class>/<file>.JPEG``): index it once, then train map-style.

    python examples/own_class_tree.py [s3://BUCKET/PREFIX/]

It runs the two commands a user runs (``resnet.py index URI``, then ``resnet.py train URI``).

Indexing a class tree is one paginated LIST: each image's key, size and ETag,
labelled as torchvision's ``ImageFolder`` labels it (class folders sorted by
name).  Training then reads the images map-style (one object per sample,
fetched ahead in parallel), every image exactly once per epoch, and never LISTs
the prefix again.  Given an empty prefix, or no URI (then the embedded local S3
is used, started if it is not running), the example first uploads a small
tree of JPEGs and PNGs of mixed sizes there, as a user's data would be.  Only
``index.wids.json`` is ever written beside your data.
"""

import io
import json
import os
import subprocess
import sys

import mountctl
from mountctl.pytorch.fallback import run_with_uri, write_unless_present

RESNET_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "resnet.py")

CLASSES = ("n01440764", "n01443537", "n01484850")  # ImageNet's folder names are WordNet ids


def upload_class_tree(uri: str) -> None:
    from PIL import Image

    location = mountctl.parse_s3_uri(uri)
    client = mountctl.s3.client(mountctl.resolve())
    for c, name in enumerate(CLASSES):
        for n in range(16):
            image, kind = io.BytesIO(), "PNG" if n == 0 else "JPEG"
            Image.new("RGB", (64 + n, 48), (80 * c, 4 * n, 120)).save(image, format=kind)
            key = f"{location.prefix}{name}/{name}_{n:04d}.{'png' if kind == 'PNG' else 'JPEG'}"
            client.put_object(Bucket=location.bucket, Key=key, Body=image.getvalue())


def resnet_py(*argv: str) -> dict:
    """The command line a user would type; its last line is the JSON summary."""
    done = subprocess.run([sys.executable, RESNET_PY, *argv], capture_output=True, text=True, check=False,
                          timeout=900)
    if done.returncode != 0:
        sys.exit(done.stderr.strip().splitlines()[-1])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(uri: str) -> None:
    write_unless_present(uri, lambda key: True, upload_class_tree)  # anything there: the user's tree
    indexed = resnet_py("index", uri, "--no-progress")
    trained = resnet_py("train", uri, "--source-kind", "s3io", "--arch", "resnet18", "--batch-size", "16",
                        "--max-epochs", "1", "--num-workers", "2", "--accelerator", "cpu", "--precision", "32",
                        "--no-progress")
    print(json.dumps({"index": indexed["index"], "images": indexed["files"], "classes": indexed["classes"],
                      "trained_images": trained["images"], "global_step": trained["global_step"]}))


if __name__ == "__main__":
    run_with_uri(main, "examples/own-class-tree/", __doc__)
