"""Users' own data for the tests: shards written by webdataset's real ``ShardWriter`` and ImageNet-style class
trees, uploaded with boto3, with no manifest: what a user brings."""

from __future__ import annotations

import io
import os
import random

EXTENSIONS = {"jpg": "JPEG", "png": "PNG", "webp": "WEBP"}


def image_bytes(seed: int, fmt: str = "jpg", size: tuple[int, int] = (40, 30)) -> bytes:
    """A small real image of any size and format (not square: training resizes and crops it)."""
    from PIL import Image

    rng = random.Random(seed)
    image = Image.new("RGB", size, (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    out = io.BytesIO()
    image.save(out, format=EXTENSIONS[fmt])
    return out.getvalue()


def write_shards(s3, bucket: str, prefix: str, directory: str, *, shards: int = 4, per_shard: int = 6,
                 classes: int = 5, label: str = "cls", image: str = "jpg") -> list[str]:
    """``train-000000.tar`` ... written by ``webdataset.ShardWriter`` and uploaded; returns the sample keys.

    ``label``: ``cls`` (the field's usual key), ``json`` (``{"label": N}``) or ``txt``.
    """
    import json

    import webdataset

    os.makedirs(directory, exist_ok=True)
    keys = []
    pattern = os.path.join(directory, "train-%06d.tar")
    with webdataset.ShardWriter(pattern, maxcount=per_shard, verbose=0) as writer:
        for n in range(shards * per_shard):
            key = f"img{n:07d}"
            sample = {"__key__": key, image: image_bytes(n, image, (40 + n % 7, 30 + n % 5))}
            value = n % classes
            sample.update({"cls": value} if label == "cls" else
                          {"json": json.dumps({"label": value, "caption": f"sample {n}"}).encode()} if label == "json"
                          else {"txt": str(value)})
            writer.write(sample)
            keys.append(key)
    for name in sorted(os.listdir(directory)):
        if name.endswith(".tar"):
            s3.upload_file(os.path.join(directory, name), bucket, prefix + name)
    return keys


def write_class_tree(s3, bucket: str, prefix: str, *, classes: tuple[str, ...] = ("n02", "n01", "n10"),
                     per_class: int = 5) -> list[str]:
    """``prefix/<class>/<file>.JPEG`` (ImageNet's layout, one PNG among them); returns the keys written."""
    keys = []
    for c, name in enumerate(classes):
        for n in range(per_class):
            fmt = "png" if (c, n) == (0, 0) else "jpg"
            key = f"{prefix}{name}/{name}_{n:04d}.{'png' if fmt == 'png' else 'JPEG'}"
            s3.put_object(Bucket=bucket, Key=key, Body=image_bytes(c * 100 + n, fmt, (50, 36 + n)))
            keys.append(key)
    return keys


def listing(s3, bucket: str, prefix: str) -> dict[str, str]:
    """Key -> ETag of everything under ``prefix``: compared before and after, it shows nothing was written."""
    found = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            found[item["Key"]] = item["ETag"]
    return found
