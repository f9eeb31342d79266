"""The dataset manifest: what ``make`` wrote, and what ``train`` checks before reading a byte.

``manifest.json`` sits next to the shards.  It lists every shard with its
sample count, size and SHA-256, which is what lets training split samples
exactly once over ranks and workers and name a truncated shard up front.
A shard entry may carry its tar index (``members``: where each sample's
``.jpg`` and ``.cls`` lie in the shard), which lets a map-style dataset read
any sample by index.  A files-layout manifest (``FILES_FORMAT``) lists one
JPEG object per sample instead of shards, so training never LISTs the prefix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from mountctl import BucketNotFound, InvalidSpec, S3Settings, parse_s3_uri
from mountctl.pytorch.errors import DatasetError, NoShards, TruncatedShard, remake_hint
from mountctl.s3 import check_bucket_access, is_not_found, list_object_sizes, short_client

__all__ = ["ShardInfo", "FileInfo", "Manifest", "MANIFEST_NAME", "FORMAT", "FILES_FORMAT", "load_manifest",
           "save_manifest", "check_shards_present", "Member"]

MANIFEST_NAME = "manifest.json"
FORMAT = "mountctl-webdataset/1"
FILES_FORMAT = "mountctl-files/1"  # one JPEG object per sample, ImageFolder layout
# One sample's place in its shard: (jpg data offset, jpg size, cls data offset, cls size, CRC-32 of the jpg).
Member = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class ShardInfo:
    name: str
    samples: int
    first_index: int  # global index of the shard's first sample, in manifest order
    bytes: int
    sha256: str
    members: tuple[Member, ...] | None = None  # the tar index; None in manifests written before it existed
    etag: str | None = None  # the object's ETag as S3 returned it, quotes stripped; None in older manifests

    def __post_init__(self) -> None:
        if self.members is not None and len(self.members) != self.samples:
            raise InvalidSpec(f"shard {self.name}: the index lists {len(self.members)} samples, not {self.samples}")
        if not self.name.endswith(".tar") or "/" in self.name:
            raise InvalidSpec(f"shard name {self.name!r} must be a plain name ending in .tar")
        if self.samples <= 0 or self.bytes <= 0 or self.first_index < 0:
            raise InvalidSpec(f"shard {self.name}: samples and bytes must be positive")


@dataclass(frozen=True)
class FileInfo:
    """One sample stored as its own object: ``key`` relative to the dataset URI."""

    key: str
    label: int
    bytes: int
    etag: str | None = None  # as in ShardInfo


@dataclass(frozen=True)
class Manifest:
    num_images: int
    image_size: int
    num_classes: int
    seed: int
    shards: tuple[ShardInfo, ...]
    format: str = FORMAT
    files: tuple[FileInfo, ...] = ()

    def __post_init__(self) -> None:
        if self.format == FILES_FORMAT:
            if len(self.files) != self.num_images or self.shards:
                raise InvalidSpec(f"a files-layout manifest must list {self.num_images} objects and no shards")
            return
        if self.format != FORMAT:
            raise InvalidSpec(f"manifest format {self.format!r} is not {FORMAT!r}; {remake_hint()}")
        if not self.shards:
            raise InvalidSpec("a manifest must list at least one shard")
        expected = 0
        for shard in self.shards:
            if shard.first_index != expected:
                raise InvalidSpec(f"shard {shard.name} starts at sample {shard.first_index}, expected {expected}")
            expected += shard.samples
        if expected != self.num_images:
            raise InvalidSpec(f"the shards hold {expected} samples but the manifest says {self.num_images}")

    @property
    def layout(self) -> str:
        """``files`` (one object per sample) or ``shards``."""
        return "files" if self.format == FILES_FORMAT else "shards"

    @property
    def indexed(self) -> bool:
        return all(s.members is not None for s in self.shards)

    @property
    def total_bytes(self) -> int:
        return sum(s.bytes for s in self.shards) + sum(f.bytes for f in self.files)

    def to_json(self) -> str:
        data = asdict(self)
        data["total_bytes"] = self.total_bytes
        return json.dumps(data, indent=1)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Manifest":
        shards = tuple(ShardInfo(**{k: s[k] for k in ("name", "samples", "first_index", "bytes", "sha256")},
                                 members=None if s.get("members") is None
                                 else tuple(tuple(int(v) for v in m) for m in s["members"]),  # type: ignore[misc]
                                 etag=s.get("etag"))
                       for s in data["shards"])
        files = tuple(FileInfo(str(f["key"]), int(f["label"]), int(f["bytes"]), etag=f.get("etag"))
                      for f in data.get("files", ()))
        return cls(num_images=int(data["num_images"]), image_size=int(data["image_size"]),
                   num_classes=int(data["num_classes"]), seed=int(data["seed"]), shards=shards,
                   format=str(data.get("format", "")), files=files)


def _make_hint(uri: str) -> str:
    return f"create one with `python resnet.py make {uri} --num-images N`"


def load_manifest(settings: S3Settings, uri: str) -> Manifest:
    """Read and validate ``URI/manifest.json``; errors say whether shards exist without one."""
    from botocore.exceptions import ClientError

    location = parse_s3_uri(uri)
    try:
        # Classifies an unreachable endpoint or refused credentials before anything else.
        check_bucket_access(settings, location.bucket, location.prefix)
    except BucketNotFound:
        raise NoShards(f"no dataset at {uri}: bucket {location.bucket!r} does not exist at "
                       f"{settings.endpoint_url or 'AWS S3'}; {_make_hint(uri)}") from None
    client = short_client(settings)
    try:
        body = client.get_object(Bucket=location.bucket, Key=location.prefix + MANIFEST_NAME)["Body"].read()
    except ClientError as exc:
        if not is_not_found(exc):
            raise
        tars = [n for n in list_object_sizes(client, location.bucket, location.prefix) if n.endswith(".tar")]
        if tars:
            raise NoShards(f"{uri} holds {len(tars)} .tar shards but no {MANIFEST_NAME}, so training cannot "
                           f"account for its samples; {_make_hint(uri)} (same arguments skip existing shards)"
                           ) from None
        raise NoShards(f"no dataset at {uri}: no {MANIFEST_NAME} and no .tar shards under it; "
                       f"{_make_hint(uri)}") from None
    try:
        return Manifest.from_dict(json.loads(body))
    except (ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"{uri}{MANIFEST_NAME} is not a valid manifest ({exc}); {remake_hint(uri)}") from None


def save_manifest(client: Any, uri: str, manifest: Manifest) -> None:
    location = parse_s3_uri(uri)
    client.put_object(Bucket=location.bucket, Key=location.prefix + MANIFEST_NAME,
                      Body=manifest.to_json().encode(), ContentType="application/json")


def check_shards_present(settings: S3Settings, uri: str, manifest: Manifest) -> None:
    """One LIST of the prefix: every shard must be there, at the size the manifest records.

    A files-layout manifest is not checked here: its prefix may hold millions of objects, and a
    missing one is named when it is read.
    """
    if manifest.layout == "files":
        return
    location = parse_s3_uri(uri)
    sizes = list_object_sizes(short_client(settings), location.bucket, location.prefix)
    for shard in manifest.shards:
        size = sizes.get(shard.name)
        if size is None:
            raise DatasetError(f"shard {shard.name} listed in {uri}{MANIFEST_NAME} is missing from {uri}; "
                               f"{remake_hint(uri)}")
        if size != shard.bytes:
            raise TruncatedShard(f"shard {shard.name} at {uri} is {size} bytes but the manifest says "
                                 f"{shard.bytes}: it was truncated or overwritten; {remake_hint(uri)}", shard=shard.name)
