"""The one description of a dataset: what ``make`` wrote or ``index`` found, and what ``train`` checks first.

``Manifest`` lists every shard with its sample count, size (and ETag or
SHA-256), which is what lets training split samples exactly once over ranks
and workers and name a changed shard up front.  A shard entry may carry its
tar index (``members``: where each sample's image and label members lie in
the shard) and, for data that ``index`` read, each sample's label, which lets
a map-style dataset read any sample by index.  A files-layout manifest
(``FILES_FORMAT``) lists one image object per sample instead of shards, so
training never LISTs the prefix.

Two file formats, one type: ``make`` writes ``manifest.json`` (mountctl's own
JSON); ``index`` writes a wids shard index (``index.wids.json``, what
``wids.ShardListDataset`` reads), with mountctl's fields under ``"mountctl"``.
Both load through ``from_json_text``; finding and checking the file is
``description.py``'s job.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any

from mountctl import BucketNotFound, InvalidSpec, S3Settings, parse_s3_uri
from mountctl.pytorch.data.index.location import INDEX_NAME, DataTarget, IndexLocation, parse_data_uri
from mountctl.pytorch.errors import DatasetError, NoShards, TruncatedShard, remake_hint
from mountctl.s3 import check_bucket_access, list_objects, short_client

__all__ = ["ShardInfo", "FileInfo", "Manifest", "MANIFEST_NAME", "INDEX_NAME", "FORMAT", "FILES_FORMAT",
           "WIDS_KIND", "IMAGE_KEYS", "LABEL_KEYS", "load_manifest", "load_dataset_description", "LoadedDataset",
           "save_manifest", "check_shards_present", "Member", "from_json_text", "index_hint", "written_by_mountctl"]

MANIFEST_NAME = "manifest.json"
FORMAT = "mountctl-webdataset/1"
FILES_FORMAT = "mountctl-files/1"  # one image object per sample, ImageFolder layout
WIDS_KIND = "wids-shard-index-v1"
IMAGE_KEYS = ("jpg", "jpeg", "png", "webp")  # a sample's image member (or a class tree's file) by extension
LABEL_KEYS = ("cls", "txt", "json")  # a sample's label member
# One sample's place in its shard: (image data offset, image size, label data offset, label size, CRC-32 of the
# image); the CRC is None where the index was built from tar headers alone, without reading the image.
Member = tuple[int, int, int, int, int | None]


def index_hint(uri: str) -> str:
    """The fix for a user's data whose index is missing or stale: never ``make``, which would write into it."""
    return f"index it with `python resnet.py index {uri or 'URI'}` (add --index-out PATH if the prefix is read-only)"


def written_by_mountctl(body: bytes) -> bool:
    """A ``manifest.json`` that ``make`` wrote or an index that ``index`` wrote: a file mountctl may rewrite.

    Anything else under a name of ours (a user's own ``manifest.json``, a wids index from ``widsindex``) is the
    user's, and never overwritten.
    """
    try:
        data = json.loads(body)
    except ValueError:
        return False
    if not isinstance(data, dict):
        return False
    if data.get("__kind__") == WIDS_KIND:
        return isinstance(data.get("mountctl"), dict)
    return data.get("format") in (FORMAT, FILES_FORMAT)


def _fields_of(record: Any, leave: tuple[str, ...] = ()) -> dict[str, Any]:
    """A frozen dataclass's fields as a dict, shallow: its values are already JSON-ready."""
    return {f.name: getattr(record, f.name) for f in fields(record) if f.name not in leave}


@dataclass(frozen=True)
class ShardInfo:
    name: str
    samples: int
    first_index: int  # global index of the shard's first sample, in manifest order
    bytes: int
    sha256: str = ""  # what make recorded; "" for a user's shard (the ETag stands in)
    members: tuple[Member, ...] | None = None  # the tar index; None in manifests written before it existed
    etag: str | None = None  # the object's ETag as S3 returns it, quotes stripped
    labels: tuple[int, ...] | None = None  # each sample's label, read at index time (None: from its .cls)

    def __post_init__(self) -> None:
        if self.members is not None and len(self.members) != self.samples:
            raise InvalidSpec(f"shard {self.name}: the index lists {len(self.members)} samples, not {self.samples}")
        if self.labels is not None and len(self.labels) != self.samples:
            raise InvalidSpec(f"shard {self.name}: the index has {len(self.labels)} labels, not {self.samples}")
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
    etag: str | None = None  # the object's ETag as S3 returns it, quotes stripped


@dataclass(frozen=True)
class Manifest:
    num_images: int
    image_size: int
    num_classes: int
    seed: int
    shards: tuple[ShardInfo, ...]
    format: str = FORMAT
    files: tuple[FileInfo, ...] = ()
    origin: str = "make"  # "make" (synthetic, make can rewrite it) or "index" (a user's data: read-only to us)
    label: str = "cls"  # where labels came from: cls, json:FIELD, txt or dir (the class directory)
    classes: tuple[str, ...] = ()  # class names by label, where the data names them (a class tree)

    def __post_init__(self) -> None:
        if self.origin not in ("make", "index"):
            raise InvalidSpec(f"dataset origin {self.origin!r} is neither make nor index")
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

    @cached_property
    def identity(self) -> dict[str, str]:
        """What a saved position means only on this dataset: its objects in order with their sample counts.

        A digest to compare, and a summary to name it by.  Versions are left out: a shard re-indexed at the
        same count maps a position exactly; a shard added, dropped, moved or recounted does not.
        """
        digest = hashlib.sha256()
        for shard in self.shards:
            digest.update(f"{shard.name}\0{shard.samples}\n".encode())
        for file in self.files:
            digest.update(f"{file.key}\n".encode())
        names = [s.name for s in self.shards] or [f.key for f in self.files]
        what = "shards" if self.shards else "files"
        span = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]}"
        return {"digest": digest.hexdigest()[:16],
                "summary": f"{len(names)} {what} ({span}), {self.num_images} samples"}

    @property
    def indexed(self) -> bool:
        return all(s.members is not None for s in self.shards)

    @property
    def total_bytes(self) -> int:
        return sum(s.bytes for s in self.shards) + sum(f.bytes for f in self.files)

    def fix_hint(self, uri: str = "") -> str:
        """What to run when the data no longer matches this description: ``make`` only for data it wrote."""
        return remake_hint(uri) if self.origin == "make" else index_hint(uri)

    def selected(self, names: Sequence[str]) -> "Manifest":
        """The same dataset limited to shards ``names`` (a brace pattern's), in that order, renumbered."""
        by_name = {s.name: s for s in self.shards}
        shards, first = [], 0
        for name in names:
            shard = by_name.get(name)
            if shard is None:
                raise DatasetError(f"shard {name} matches the pattern but is not in the dataset's index; "
                                   f"{self.fix_hint()}")
            shards.append(replace(shard, first_index=first))
            first += shard.samples
        return replace(self, shards=tuple(shards), num_images=first)

    def to_wids(self, base: str = "") -> dict[str, Any]:
        """The wids shard index: ``shardlist`` for wids, the rest under ``"mountctl"``.

        ``base`` prefixes each shard's name: "" beside the data (wids resolves names against the
        index's own location), the data's ``s3://`` URI when the index lives elsewhere.
        """
        # Field by field, not dataclasses.asdict: that deep-copies every shard's member table (8.8 s for
        # 10,000 shards on a busy 2-core machine), and the values are JSON-ready as they are.
        own = _fields_of(self, leave=("shards", "files"))
        own["shards"] = [_fields_of(s, leave=("name", "samples", "bytes", "first_index")) for s in self.shards]
        own["files"] = [_fields_of(f) for f in self.files]
        return {"__kind__": WIDS_KIND, "wids_version": 1,
                "shardlist": [{"url": base + s.name, "nsamples": s.samples, "filesize": s.bytes} for s in self.shards],
                "mountctl": own}

    @classmethod
    def from_wids(cls, data: Mapping[str, Any]) -> tuple["Manifest", str]:
        """A wids shard index (mountctl's or another tool's) and the data's base: "" or an ``s3://`` prefix."""
        own = data.get("mountctl") or {}
        extra = own.get("shards") or [{} for _ in data["shardlist"]]
        bases = {str(e["url"]).rpartition("/")[0] for e in data["shardlist"]}
        if len(bases) > 1:
            raise InvalidSpec(f"the index's shards lie in {len(bases)} directories; mountctl reads one prefix")
        shards, first = [], 0
        for entry, more in zip(data["shardlist"], extra, strict=True):
            members = more.get("members")
            labels = more.get("labels")
            shards.append(ShardInfo(
                name=str(entry["url"]).rpartition("/")[2], samples=int(entry["nsamples"]), first_index=first,
                bytes=int(entry["filesize"]), sha256=str(more.get("sha256") or ""), etag=more.get("etag"),
                members=None if members is None else tuple(map(tuple, members)),
                labels=None if labels is None else tuple(labels)))
            first += shards[-1].samples
        files = tuple(FileInfo(str(f["key"]), int(f["label"]), int(f["bytes"]), f.get("etag"))
                      for f in own.get("files", ()))
        manifest = cls(num_images=int(own.get("num_images", first)), image_size=int(own.get("image_size", 224)),
                       num_classes=int(own.get("num_classes", 0)), seed=int(own.get("seed", 0)),
                       shards=tuple(shards), format=str(own.get("format", FORMAT)), files=files,
                       origin=str(own.get("origin", "index")), label=str(own.get("label", "cls")),
                       classes=tuple(own.get("classes", ())))
        base = bases.pop() if bases else ""
        return manifest, base + "/" if base else ""

    def to_json(self) -> str:
        data = _fields_of(self, leave=("shards", "files"))
        data["shards"] = [_fields_of(s) for s in self.shards]
        data["files"] = [_fields_of(f) for f in self.files]
        data["total_bytes"] = self.total_bytes
        return json.dumps(data, indent=1)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Manifest":
        shards = tuple(ShardInfo(**{k: s[k] for k in ("name", "samples", "first_index", "bytes", "sha256")},
                                 members=None if s.get("members") is None
                                 else tuple(tuple(int(v) for v in m) for m in s["members"]),  # type: ignore[misc]
                                 etag=s.get("etag"))
                       for s in data["shards"])
        files = tuple(FileInfo(str(f["key"]), int(f["label"]), int(f["bytes"]), f.get("etag"))
                      for f in data.get("files", ()))
        return cls(num_images=int(data["num_images"]), image_size=int(data["image_size"]),
                   num_classes=int(data["num_classes"]), seed=int(data["seed"]), shards=shards,
                   format=str(data.get("format", "")), files=files)


def from_json_text(text: str | bytes, where: str) -> tuple[Manifest, str]:
    """Either file format; ``where`` names the file in the error.  Returns the manifest and its data base."""
    try:
        data = json.loads(text)
        if data.get("__kind__") == WIDS_KIND:
            return Manifest.from_wids(data)
        return Manifest.from_dict(data), ""
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        fix = ("rebuild it" if written_by_mountctl(text if isinstance(text, bytes) else text.encode()) else
               "it is not one mountctl wrote: index the data with `python resnet.py index URI --index-out PATH` "
               "and train with --index PATH")
        raise DatasetError(f"{where} is not a valid manifest or wids index ({exc}); {fix}") from None


def load_manifest(settings: S3Settings, uri: str) -> Manifest:
    """The description of the dataset at ``uri`` (``manifest.json`` or an index beside the data)."""
    return load_dataset_description(settings, uri).manifest


def save_manifest(client: Any, uri: str, manifest: Manifest) -> None:
    location = parse_s3_uri(uri)
    client.put_object(Bucket=location.bucket, Key=location.prefix + MANIFEST_NAME,
                      Body=manifest.to_json().encode(), ContentType="application/json")


def check_shards_present(settings: S3Settings, uri: str, manifest: Manifest, *, exhaustive: bool = False) -> None:
    """One LIST of the prefix: every shard must be there, at the size and ETag the description records.

    ``exhaustive`` (a user's index of the whole prefix): a ``.tar`` the index does not name is refused too,
    since training would silently leave it out.  A files-layout manifest is not checked here: its prefix may
    hold millions of objects, and a missing one is named when it is read.
    """
    if manifest.layout == "files":
        return
    location = parse_s3_uri(uri)
    listed = list_objects(short_client(settings), location.bucket, location.prefix, recursive=False)
    fix = manifest.fix_hint(uri)
    for shard in manifest.shards:
        found = listed.get(shard.name)
        if found is None:
            raise DatasetError(f"shard {shard.name} named by the dataset's index is missing from {uri}; {fix}")
        size, etag = found.size, found.etag
        if size != shard.bytes or (shard.etag is not None and etag is not None and etag != shard.etag):
            change = f"{size} bytes" if size != shard.bytes else f"ETag {etag}"
            was = f"{shard.bytes} bytes" if size != shard.bytes else f"ETag {shard.etag}"
            raise TruncatedShard(f"shard {uri}{shard.name} changed since it was indexed ({change}, the index "
                                 f"says {was}): it was replaced or truncated; {fix}", shard=shard.name)
    if exhaustive and manifest.origin == "index":
        known = {s.name for s in manifest.shards}
        added = sorted(n for n in listed if n.endswith(".tar") and n not in known)
        if added:
            raise DatasetError(f"shard {uri}{added[0]} ({len(added)} in all) was added after the index was "
                               f"built, so training would leave it out; {fix}")


# -- finding the description ----------------------------------------------------------------------------------
# ``train s3://b/p/`` reads ``p/manifest.json`` (what ``make`` wrote) or ``p/index.wids.json`` (what ``index``
# wrote beside the data); ``--index PATH|s3://...`` names one kept elsewhere (a read-only prefix).  With no
# description the error names the index command, never ``make``: ``make`` writes into the prefix, and a user's
# prefix holds their data.


@dataclass(frozen=True)
class LoadedDataset:
    """The description and the prefix its shard names are relative to (what every source kind opens)."""

    uri: str
    manifest: Manifest
    selection: bool  # a brace pattern picked some shards: other shards under the prefix are not an error

    def check_present(self, settings: S3Settings) -> None:
        """One LIST: the shards are all there, unchanged since they were indexed (see ``check_shards_present``)."""
        check_shards_present(settings, self.uri, self.manifest, exhaustive=not self.selection)


def _nothing_found(settings: S3Settings, target: DataTarget, users_manifest: bool = False) -> NoShards:
    client = short_client(settings)
    listed = list_objects(client, target.prefix.bucket, target.prefix.prefix, recursive=False)
    anything = listed or client.list_objects_v2(Bucket=target.prefix.bucket, Prefix=target.prefix.prefix,
                                                MaxKeys=1).get("KeyCount", 0)
    tars = [n for n in listed if n.endswith(".tar")]
    uri = target.uri
    if users_manifest:  # never "rebuild it": the file is the user's, and index leaves it alone
        return NoShards(f"{uri} holds {len(tars)} .tar shards and a {MANIFEST_NAME} that mountctl did not write "
                        f"(it is left alone) but no {INDEX_NAME}; {index_hint(uri)}, then train again (with "
                        "--index PATH where the index went elsewhere)")
    if tars:
        return NoShards(f"{uri} holds {len(tars)} .tar shards but no index ({MANIFEST_NAME} or {INDEX_NAME}), "
                        f"so training cannot account for its samples; {index_hint(uri)}, then train again "
                        "(with --index PATH where the index went elsewhere)")
    if anything:
        return NoShards(f"no dataset index at {uri} (no {MANIFEST_NAME} or {INDEX_NAME}, no .tar shards directly "
                        f"under it); for your own class folders, {index_hint(uri)}; or pass --index PATH")
    # Nothing at all under the prefix: no user's data to protect, so a synthetic dataset is a fair suggestion.
    return NoShards(f"no dataset at {uri}: nothing under it; write a synthetic one with `python resnet.py make "
                    f"{uri} --num-images N`, or point at your own data and {index_hint(uri)}")


def load_dataset_description(settings: S3Settings, uri: str, index: str | None = None) -> LoadedDataset:
    """The description of ``uri``'s data: from ``index`` if given, else found beside the data."""
    target = parse_data_uri(uri)
    try:
        # Classifies an unreachable endpoint or refused credentials before anything else.
        check_bucket_access(settings, target.prefix.bucket, target.prefix.prefix)
    except BucketNotFound:
        raise NoShards(f"no dataset at {uri}: bucket {target.prefix.bucket!r} does not exist at "
                       f"{settings.endpoint_url or 'AWS S3'}") from None
    if index:
        location = IndexLocation.parse(index)
        body = location.read(settings)
        if body is None:
            raise NoShards(f"no index at {index}; {index_hint(target.uri)}")
    else:
        # make's manifest.json first; a manifest.json of the user's own is theirs, not a description of ours.
        location = IndexLocation(target.prefix, target.prefix.prefix + MANIFEST_NAME)
        body = location.read(settings)
        users_manifest = body is not None and not written_by_mountctl(body)
        if body is None or users_manifest:
            location = IndexLocation.beside(target.prefix)
            body = location.read(settings)
        if body is None:
            raise _nothing_found(settings, target, users_manifest)
    manifest, base = from_json_text(body, str(location))
    if manifest.num_classes <= 0:  # only a wids index another tool wrote says nothing of the labels
        how = (f"`python resnet.py index {target.uri}`" if index else
               f"`python resnet.py index {target.uri} --index-out PATH` (it leaves this file alone)")
        raise DatasetError(f"the index {location} does not say the data's number of classes: another tool "
                           f"(such as webdataset's widsindex) wrote it with shard sizes and counts only; index the "
                           f"data with {how} and train with --index PATH")
    if base and base != target.uri:
        raise DatasetError(f"the index {location} describes shards under {base}, not {target.uri}: train on "
                           f"{base}, or index {target.uri}")
    if target.names is not None:
        manifest = manifest.selected(target.names)
    return LoadedDataset(target.uri, manifest, target.names is not None)
