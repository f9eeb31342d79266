#!/usr/bin/env python3
"""Train on WebDataset shards that another tool wrote: index them once, then train, every sample exactly once.

    python examples/own_shards.py [s3://BUCKET/PREFIX/]

The prefix holds your ``.tar`` shards (members ``KEY.jpg`` and ``KEY.cls``, as
``webdataset.ShardWriter`` writes them); nothing but the index
(``index.wids.json``) is ever written there.  Given an empty prefix, or no URI
at all (then the embedded local S3 is used, started if it is not running), the
example first writes 4 small shards there with webdataset's own
``ShardWriter``, as a user's pipeline would.  The endpoint and credentials come
from the environment (for the embedded local S3: eval "$(mountctl local-s3 env)").
"""

import io
import json
import os
import tempfile

import mountctl
from mountctl.pytorch.data.index.indexer import IndexConfig, index_data
from mountctl.pytorch.fallback import run_with_uri, write_unless_present
from mountctl.pytorch.training.trainer import TrainConfig, train


def write_shards_with_shardwriter(uri: str) -> None:
    """What a user's own pipeline does: ``ShardWriter`` locally, then an upload."""
    import webdataset
    from PIL import Image

    location = mountctl.parse_s3_uri(uri)
    client = mountctl.s3.client(mountctl.resolve())
    with tempfile.TemporaryDirectory() as directory:
        with webdataset.ShardWriter(os.path.join(directory, "train-%06d.tar"), maxcount=16, verbose=0) as writer:
            for n in range(64):
                image = io.BytesIO()
                Image.new("RGB", (48 + n % 9, 40), (n * 4 % 256, 90, 160)).save(image, format="JPEG")
                writer.write({"__key__": f"img{n:07d}", "jpg": image.getvalue(), "cls": n % 4})
        for name in sorted(os.listdir(directory)):
            client.upload_file(os.path.join(directory, name), location.bucket, location.prefix + name)


def main(uri: str) -> None:
    write_unless_present(uri, lambda key: key.endswith(".tar"), write_shards_with_shardwriter)
    indexed = index_data(IndexConfig(uri=uri), mountctl.resolve(), progress=None)
    summary = train(TrainConfig(uri=uri, source_kind="s3io", arch="resnet18", batch_size=16, max_epochs=1,
                                num_workers=2, accelerator="cpu", precision="32-true", progress=False),
                    out=io.StringIO())  # the example prints its own line
    print(json.dumps({"index": indexed["index"], "shards": indexed["shards"], "samples": indexed["samples"],
                      "classes": indexed["classes"], "trained_images": summary["images"],
                      "global_step": summary["global_step"]}))


if __name__ == "__main__":
    run_with_uri(main, "examples/own-shards/", __doc__)
