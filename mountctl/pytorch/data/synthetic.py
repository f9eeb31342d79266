"""``resnet.py make``: a synthetic ImageNet-style dataset as WebDataset shards on S3.

Sample ``i`` is a function of (seed, i) alone: a seeded random colour field
with texture, JPEG-encoded, and a seeded label.  So a shard's bytes depend
only on the seed, image size, class count and the sample range it holds, and
that recipe is stored in the object's metadata: a re-run skips every shard
whose object already carries the same recipe, without rebuilding it.  Each
shard's tar index goes into the manifest (for random access by sample).

``--layout files`` writes one JPEG object per sample instead, in ImageFolder
layout (``PREFIX/train/<class>/<key>.jpg``), and a manifest listing them all.
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
from dataclasses import dataclass, replace
from typing import Any

from mountctl import InvalidSpec, S3Settings, parse_s3_uri, resolve, s3
from mountctl.pytorch.data.index.manifest import (
    FILES_FORMAT,
    MANIFEST_NAME,
    FileInfo,
    Manifest,
    ShardInfo,
    save_manifest,
)
from mountctl.s3 import ensure_bucket

__all__ = ["MakeConfig", "MakeResult", "make_dataset", "parse_size", "sample_jpeg", "build_shard", "LAYOUTS",
           "class_folder", "file_key"]

LAYOUTS = ("shards", "files")
_FILES_PER_TASK = 64  # files layout: JPEGs made and uploaded per task

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
    layout: str = "shards"

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
        if self.layout not in LAYOUTS:
            raise InvalidSpec(f"--layout must be one of {', '.join(LAYOUTS)}, not {self.layout!r}")


@dataclass(frozen=True)
class MakeResult:
    manifest: Manifest
    uploaded: int
    skipped: int

    def summary(self, uri: str) -> dict[str, Any]:
        return {"uri": uri, "layout": self.manifest.layout, "images": self.manifest.num_images,
                "shards": len(self.manifest.shards), "files": len(self.manifest.files),
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


def _indexed(name: str, count: int, first: int, data: bytes, digest: str, etag: str | None) -> ShardInfo:
    from mountctl.pytorch.data.index.tarindex import index_tar

    return ShardInfo(name, count, first, len(data), digest, members=tuple(index_tar(name, io.BytesIO(data), count)),
                     etag=etag)


def _make_shard(config: MakeConfig, settings: S3Settings, name: str, first: int, count: int,
                previous: ShardInfo | None = None) -> tuple[ShardInfo, bool]:
    """Build and upload one shard unless an identical one is there; (info with its tar index, uploaded?)."""
    from botocore.exceptions import ClientError

    location = parse_s3_uri(config.uri)
    key = location.prefix + name
    client = _client(settings)
    recipe = shard_recipe(config, first, count)
    try:
        head = client.head_object(Bucket=location.bucket, Key=key)
        meta = head.get("Metadata", {})
        if meta.get("mountctl-recipe") == recipe and str(head["ContentLength"]) == meta.get("mountctl-bytes"):
            info = ShardInfo(name, count, first, int(head["ContentLength"]), meta["mountctl-sha256"],
                             etag=s3.plain_etag(head["ETag"]))
            if previous is not None and previous.members is not None and previous.sha256 == info.sha256:
                return replace(info, members=previous.members), False
            # Same recipe, same bytes: rebuild locally (no upload) just to index it.
            return _indexed(name, count, first, build_shard(config, first, count), info.sha256, info.etag), False
    except ClientError as exc:
        if not s3.is_not_found(exc):
            raise
    data = build_shard(config, first, count)
    digest = hashlib.sha256(data).hexdigest()
    metadata = {"mountctl-recipe": recipe, "mountctl-sha256": digest, "mountctl-bytes": str(len(data))}
    # One PUT (not upload_fileobj, which answers nothing): its response carries the ETag readers pin.
    sent = client.put_object(Bucket=location.bucket, Key=key, Body=data, Metadata=metadata,
                             ContentType="application/x-tar")
    return _indexed(name, count, first, data, digest, s3.plain_etag(sent["ETag"])), True


def make_dataset(config: MakeConfig, *, settings: S3Settings | None = None, progress: bool = True) -> MakeResult:
    """Write (or complete) the dataset and its manifest; shards are built and uploaded in parallel."""
    from tqdm import tqdm

    settings = settings or resolve()
    location = parse_s3_uri(config.uri)
    ensure_bucket(settings, location.bucket, create=True)
    previous = _previous_manifest(settings, config)
    if config.layout == "files":
        return _make_files(config, settings, previous, progress)
    known = {s.name: s for s in previous.shards} if previous is not None else {}
    per_shard = images_per_shard(config)
    tasks = [(f"shard-{i:06d}.tar", first, min(per_shard, config.num_images - first))
             for i, first in enumerate(range(0, config.num_images, per_shard))]
    jobs = min(config.jobs or os.cpu_count() or 1, len(tasks))
    results: dict[str, tuple[ShardInfo, bool]] = {}
    bar = tqdm(total=len(tasks), unit="shard", desc=f"make {config.uri}", disable=not progress, file=sys.stderr)
    with bar:
        if jobs == 1:
            for name, first, count in tasks:
                results[name] = _make_shard(config, settings, name, first, count, known.get(name))
                bar.update()
        else:
            # spawn: each worker starts clean and makes its own S3 client.
            with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = {pool.submit(_make_shard, config, settings, *task, known.get(task[0])): task[0]
                           for task in tasks}
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


def _previous_manifest(settings: S3Settings, config: MakeConfig) -> Manifest | None:
    """The manifest already at the prefix if it was made with the same recipe (its index is reused)."""
    location = parse_s3_uri(config.uri)
    try:
        body = _client(settings).get_object(Bucket=location.bucket, Key=location.prefix + MANIFEST_NAME)["Body"]
        old = Manifest.from_dict(json.loads(body.read()))
    except Exception:  # none, or unreadable: make everything as if new
        return None
    same = (old.seed, old.image_size, old.num_classes, old.layout) == (
        config.seed, config.image_size, config.num_classes, config.layout)
    return old if same else None


def class_folder(label: int, num_classes: int) -> str:
    """The class folder name: zero-padded, so ImageFolder's sorted class order is the label order."""
    return f"c{label:0{max(4, len(str(num_classes - 1)))}d}"


def file_key(index: int, label: int, num_classes: int) -> str:
    return f"train/{class_folder(label, num_classes)}/{index:08d}.jpg"


def _make_files_chunk(config: MakeConfig, settings: S3Settings, first: int, count: int,
                      known: dict[int, FileInfo]) -> tuple[list[FileInfo], int]:
    """Make and upload JPEGs ``first`` .. ``first + count - 1``, except those already there; (infos, uploaded)."""
    location = parse_s3_uri(config.uri)
    client = _client(settings)
    infos, uploaded = [], 0
    for index in range(first, first + count):
        if index in known:
            infos.append(known[index])
            continue
        image, label = sample_jpeg(config.seed, index, config.image_size, config.num_classes, config.jpeg_quality)
        key = file_key(index, label, config.num_classes)
        sent = client.put_object(Bucket=location.bucket, Key=location.prefix + key, Body=image,
                                 ContentType="image/jpeg")
        infos.append(FileInfo(key, label, len(image), etag=s3.plain_etag(sent["ETag"])))
        uploaded += 1
    return infos, uploaded


def _make_files(config: MakeConfig, settings: S3Settings, previous: Manifest | None, progress: bool
                ) -> MakeResult:
    """The files layout: one object per sample; objects a same-recipe manifest lists and S3 has are kept."""
    from tqdm import tqdm

    location = parse_s3_uri(config.uri)
    known: dict[int, FileInfo] = {}
    if previous is not None and previous.layout == "files":
        listed = s3.list_objects(_client(settings), location.bucket, location.prefix + "train/")
        sizes = {"train/" + name: stored.size for name, stored in listed.items()}
        known = {i: f for i, f in enumerate(previous.files) if sizes.get(f.key) == f.bytes}
    tasks = [(first, min(_FILES_PER_TASK, config.num_images - first))
             for first in range(0, config.num_images, _FILES_PER_TASK)]
    jobs = min(config.jobs or os.cpu_count() or 1, len(tasks))
    results: dict[int, tuple[list[FileInfo], int]] = {}
    bar = tqdm(total=config.num_images, unit="img", desc=f"make {config.uri}", disable=not progress, file=sys.stderr)
    def chunk_known(first: int, count: int) -> dict[int, FileInfo]:
        return {i: known[i] for i in range(first, first + count) if i in known}

    with bar:
        if jobs == 1:
            for first, count in tasks:
                results[first] = _make_files_chunk(config, settings, first, count, chunk_known(first, count))
                bar.update(count)
        else:
            with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = {pool.submit(_make_files_chunk, config, settings, first, count, chunk_known(first, count)):
                           first for first, count in tasks}
                for future in concurrent.futures.as_completed(futures):
                    results[futures[future]] = future.result()
                    bar.update(len(results[futures[future]][0]))
    files = tuple(info for first, _ in tasks for info in results[first][0])
    manifest = Manifest(num_images=config.num_images, image_size=config.image_size, num_classes=config.num_classes,
                        seed=config.seed, shards=(), format=FILES_FORMAT, files=files)
    save_manifest(_client(settings), config.uri, manifest)
    uploaded = sum(n for _, n in results.values())
    return MakeResult(manifest, uploaded=uploaded, skipped=config.num_images - uploaded)
