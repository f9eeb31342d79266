"""The tar index of a shard: where each sample's ``.jpg`` and ``.cls`` members lie, for random access.

``index_tar`` reads a shard once, front to back (a stream is enough: no
seeking), and returns one ``Member`` per sample in tar order.  ``make`` stores
it in the manifest; ``resnet.py index URI`` (``index_dataset``) adds it to a
manifest written before the index existed, reading each shard with one GET
and leaving the shards themselves untouched.
"""

from __future__ import annotations

import hashlib
import tarfile
import zlib
from dataclasses import replace
from typing import Any, BinaryIO

from mountctl import S3Settings, parse_s3_uri, s3
from mountctl.pytorch.data.index.location import IndexLocation
from mountctl.pytorch.data.index.manifest import (
    IMAGE_KEYS,
    MANIFEST_NAME,
    Member,
    from_json_text,
    save_manifest,
    written_by_mountctl,
)
from mountctl.pytorch.data.index.tarsamples import SampleGroups, image_key
from mountctl.pytorch.errors import DatasetError, TruncatedShard, remake_hint

__all__ = ["index_tar", "index_dataset", "IndexResult"]

IndexResult = dict[str, Any]


class _Hashing:
    """A read-only stream that hashes and counts what passes through it."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.sha256 = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.sha256.update(data)
        self.size += len(data)
        return data


def index_tar(name: str, stream: BinaryIO, expected: int | None = None) -> list[Member]:
    """One ``(jpg offset, jpg size, cls offset, cls size, jpg CRC-32)`` per sample of shard ``name``.

    A tar cut at a member boundary reads as a shorter one: ``expected`` (the manifest's count) catches that.
    """
    found: list[tuple[str, dict[str, tuple[int, int, int]]]] = []  # per sample: member key -> (offset, size, crc)
    groups = SampleGroups(name)  # the rule the training read groups members by
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for info in tar:
                placed = groups.place(info.name) if info.isreg() else None
                if placed is None:
                    continue
                key, member, starts = placed
                if starts:
                    found.append((key, {}))
                if member in IMAGE_KEYS or member == "cls":
                    data = tar.extractfile(info).read()  # type: ignore[union-attr]
                    if len(data) != info.size:
                        raise EOFError(f"{info.name} is cut off")
                    found[-1][1][member] = (info.offset_data, info.size, zlib.crc32(data))
    except (tarfile.TarError, EOFError) as exc:
        raise TruncatedShard(f"shard {name} is truncated or corrupt after {len(found)} samples "
                             f"({exc.args[0] if exc.args else type(exc).__name__}); {remake_hint()}",
                             shard=name) from None
    members: list[Member] = []
    for key, parts in found:
        image = image_key(parts)
        if image is None or "cls" not in parts:
            raise TruncatedShard(f"shard {name}: sample {key!r} has {sorted(parts)}, not an image and a .cls "
                                 f"label; {remake_hint()}", shard=name)
        (image_at, image_size, crc), (cls_at, cls_size, _) = parts[image], parts["cls"]
        members.append((image_at, image_size, cls_at, cls_size, crc))
    if expected is not None and len(members) != expected:
        raise TruncatedShard(f"shard {name} holds {len(members)} samples but the manifest says {expected}: it was "
                             f"truncated or overwritten; {remake_hint()}",
                             shard=name)
    return members


def index_dataset(settings: S3Settings, uri: str) -> IndexResult:
    """Read every shard of ``uri`` once and write its tar index into ``manifest.json``.

    Each shard must still match the manifest (size and SHA-256); the shards are not rewritten.
    """
    location = parse_s3_uri(uri)
    body = IndexLocation(location, location.prefix + MANIFEST_NAME).read(settings)
    if body is None or not written_by_mountctl(body):  # a manifest.json of the user's own is never rewritten
        raise DatasetError(f"{uri}{MANIFEST_NAME} is {'missing' if body is None else 'not one make wrote'}: only "
                           f"make's manifest gains a tar index here; index the data with `python resnet.py index "
                           f"{uri}` instead")
    manifest, _ = from_json_text(body, uri + MANIFEST_NAME)
    if manifest.layout != "shards":
        raise DatasetError(f"{uri} holds one object per sample (files layout): it needs no tar index")
    client = s3.client(settings, read_timeout=120)
    shards = []
    for shard in manifest.shards:
        body = client.get_object(Bucket=location.bucket, Key=location.prefix + shard.name)["Body"]
        hashing = _Hashing(body)
        members = index_tar(shard.name, hashing, shard.samples)  # type: ignore[arg-type]
        while hashing.read(1 << 20):  # the tar's end blocks and padding: part of the checksum
            pass
        if hashing.size != shard.bytes or hashing.sha256.hexdigest() != shard.sha256:
            raise DatasetError(f"shard {shard.name} at {uri} is {hashing.size} bytes with SHA-256 "
                               f"{hashing.sha256.hexdigest()[:12]}..., but {MANIFEST_NAME} says {shard.bytes} bytes, "
                               f"{shard.sha256[:12]}...: it was rewritten; {remake_hint(uri)}")
        shards.append(replace(shard, members=tuple(members)))
    save_manifest(client, uri, replace(manifest, shards=tuple(shards)))
    return {"uri": uri, "shards": len(shards), "samples": manifest.num_images, "manifest": uri + MANIFEST_NAME}
