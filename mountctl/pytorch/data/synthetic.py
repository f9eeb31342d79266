"""``resnet.py make``: a synthetic ImageNet-style dataset as WebDataset shards on S3.

Sample ``i`` is a function of (seed, i) alone: a seeded random colour field
with texture, JPEG-encoded, and a seeded label.  So a shard's bytes depend
only on the seed, image size, class count and the sample range it holds, and
that recipe is stored in the object's metadata: a re-run skips every shard
whose object already carries the same recipe, without rebuilding it.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import json
import math
import multiprocessing
import os
import re
import sys
import tarfile
from dataclasses import dataclass
from typing import Any

from mountctl import InvalidSpec, S3Settings, parse_s3_uri, resolve, s3
from mountctl.pytorch.data.manifest import MANIFEST_NAME, Manifest, ShardInfo, save_manifest
from mountctl.s3 import ensure_bucket

__all__ = ["MakeConfig", "MakeResult", "make_dataset", "parse_size", "sample_jpeg", "build_shard"]

GENERATOR_VERSION = 1
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "k": 10**3, "m": 10**6, "g": 10**9}


def parse_size(text: str | int) -> int:
    """``100MB`` (decimal), ``64MiB`` (binary) or a plain number of bytes."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(text)
    unit = (match.group(2) or "").lower() if match else None
    if match is None or unit not in _UNITS:
        raise InvalidSpec(f"shard size {text!r} is not a size: write it as e.g. 100MB, 64MiB or 500000")
    return int(float(match.group(1)) * _UNITS[unit])


@dataclass(frozen=True)
class MakeConfig:
    uri: str
    num_images: int
    image_size: int = 224
    num_classes: int = 1000
    shard_size: int = 100 * 10**6
    seed: int = 0
    jobs: int = 0  # 0: one per CPU core
    jpeg_quality: int = 90

    def __post_init__(self) -> None:
        location = parse_s3_uri(self.uri)
        object.__setattr__(self, "uri", str(location))
        if self.num_images < 1:
            raise InvalidSpec(f"--num-images must be at least 1, not {self.num_images}")
        if not 8 <= self.image_size <= 4096:
            raise InvalidSpec(f"--image-size must be between 8 and 4096 pixels, not {self.image_size}")
        if self.num_classes < 1:
            raise InvalidSpec(f"--num-classes must be at least 1, not {self.num_classes}")
        if self.shard_size < 1024:
            raise InvalidSpec(f"--shard-size must be at least 1KB, not {self.shard_size} bytes")
        if self.jobs < 0:
            raise InvalidSpec(f"--jobs cannot be negative ({self.jobs})")


@dataclass(frozen=True)
class MakeResult:
    manifest: Manifest
    uploaded: int
    skipped: int

    def summary(self, uri: str) -> dict[str, Any]:
        return {"uri": uri, "images": self.manifest.num_images, "shards": len(self.manifest.shards),
                "bytes": self.manifest.total_bytes, "uploaded": self.uploaded, "skipped": self.skipped,
                "manifest": uri + MANIFEST_NAME}


def sample_jpeg(seed: int, index: int, image_size: int, num_classes: int, quality: int = 90) -> tuple[bytes, int]:
    """The JPEG bytes and label of sample ``index``; the same on every machine and run."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng([seed, index])
    label = int(rng.integers(num_classes))
    # Low-frequency colour plus texture: decodes like a photo and compresses like one (~20-25 KB at 224 px).
    field = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).resize(
        (image_size, image_size), Image.Resampling.BICUBIC)
    pixels = np.asarray(field, dtype=np.int16) + rng.integers(-24, 25, (image_size, image_size, 3), dtype=np.int16)
    out = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=quality)
    return out.getvalue(), label


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644  # fixed metadata: identical bytes on every run
    tar.addfile(info, io.BytesIO(data))


def build_shard(config: MakeConfig, first: int, count: int) -> bytes:
    """A WebDataset tar of samples ``first`` .. ``first + count - 1``: ``KEY.jpg`` and ``KEY.cls`` each."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for index in range(first, first + count):
            image, label = sample_jpeg(config.seed, index, config.image_size, config.num_classes,
                                       config.jpeg_quality)
            _add(tar, f"{index:08d}.jpg", image)
            _add(tar, f"{index:08d}.cls", str(label).encode())
    return out.getvalue()


def images_per_shard(config: MakeConfig) -> int:
    """How many samples fill ``shard_size``, from the exact tar size of the first few samples."""
    probe = min(config.num_images, 32)
    per_sample = 0
    for index in range(probe):
        image, label = sample_jpeg(config.seed, index, config.image_size, config.num_classes, config.jpeg_quality)
        per_sample += 2 * 512 + 512 * math.ceil(len(image) / 512) + 512 * math.ceil(len(str(label)) / 512)
    # The archive ends with two zero blocks; tarfile then pads it to a 10 KiB record, which only
    # matters for tiny shards.
    return max(1, int((config.shard_size - 2 * 512) // (per_sample / probe)))


def shard_recipe(config: MakeConfig, first: int, count: int) -> str:
    """What a shard's bytes depend on; equal recipes mean equal bytes."""
    recipe = {"version": GENERATOR_VERSION, "seed": config.seed, "image_size": config.image_size,
              "num_classes": config.num_classes, "quality": config.jpeg_quality, "first": first, "count": count}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def _client(settings: S3Settings) -> Any:
    # Uploads take longer than metadata calls: a longer read bound, more retries.  Cached per
    # process and per settings by mountctl.s3, so a later call with other settings gets its own.
    return s3.client(settings, connect_timeout=5, read_timeout=120, retries=5)


def _make_shard(config: MakeConfig, settings: S3Settings, name: str, first: int, count: int
                ) -> tuple[ShardInfo, bool]:
    """Build and upload one shard unless an identical one is there; (info, uploaded?)."""
    from botocore.exceptions import ClientError

    location = parse_s3_uri(config.uri)
    key = location.prefix + name
    client = _client(settings)
    recipe = shard_recipe(config, first, count)
    try:
        head = client.head_object(Bucket=location.bucket, Key=key)
        meta = head.get("Metadata", {})
        if meta.get("mountctl-recipe") == recipe and str(head["ContentLength"]) == meta.get("mountctl-bytes"):
            return ShardInfo(name, count, first, int(head["ContentLength"]), meta["mountctl-sha256"]), False
    except ClientError as exc:
        if not s3.is_not_found(exc):
            raise
    data = build_shard(config, first, count)
    digest = hashlib.sha256(data).hexdigest()
    metadata = {"mountctl-recipe": recipe, "mountctl-sha256": digest, "mountctl-bytes": str(len(data))}
    client.upload_fileobj(io.BytesIO(data), location.bucket, key,
                          ExtraArgs={"Metadata": metadata, "ContentType": "application/x-tar"})
    return ShardInfo(name, count, first, len(data), digest), True


def make_dataset(config: MakeConfig, *, settings: S3Settings | None = None, progress: bool = True) -> MakeResult:
    """Write (or complete) the dataset and its manifest; shards are built and uploaded in parallel."""
    from tqdm import tqdm

    settings = settings or resolve()
    location = parse_s3_uri(config.uri)
    ensure_bucket(settings, location.bucket, create=True)
    per_shard = images_per_shard(config)
    tasks = [(f"shard-{i:06d}.tar", first, min(per_shard, config.num_images - first))
             for i, first in enumerate(range(0, config.num_images, per_shard))]
    jobs = min(config.jobs or os.cpu_count() or 1, len(tasks))
    results: dict[str, tuple[ShardInfo, bool]] = {}
    bar = tqdm(total=len(tasks), unit="shard", desc=f"make {config.uri}", disable=not progress, file=sys.stderr)
    with bar:
        if jobs == 1:
            for name, first, count in tasks:
                results[name] = _make_shard(config, settings, name, first, count)
                bar.update()
        else:
            # spawn: each worker starts clean and makes its own S3 client.
            with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = {pool.submit(_make_shard, config, settings, *task): task[0] for task in tasks}
                for future in concurrent.futures.as_completed(futures):
                    results[futures[future]] = future.result()
                    bar.update()
                    bar.set_postfix_str(f"{sum(r[0].bytes for r in results.values()) / 1e6:.0f} MB")
    shards = tuple(results[name][0] for name, _, _ in tasks)
    manifest = Manifest(num_images=config.num_images, image_size=config.image_size,
                        num_classes=config.num_classes, seed=config.seed, shards=shards)
    save_manifest(_client(settings), config.uri, manifest)
    uploaded = sum(1 for _, fresh in results.values() if fresh)
    return MakeResult(manifest, uploaded=uploaded, skipped=len(tasks) - uploaded)
