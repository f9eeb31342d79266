"""Finding a dataset's description: the data URI (a prefix or a brace pattern) parsed once, and the index's place.

``train s3://b/p/`` reads ``p/manifest.json`` (what ``make`` wrote) or
``p/index.wids.json`` (what ``index`` wrote beside the data);
``--index PATH|s3://...`` names one kept elsewhere (a read-only prefix).
``train s3://b/p/train-{000000..000003}.tar`` selects shards by webdataset's
brace pattern from the description of ``s3://b/p/``.  With no description the
error names the index command, never ``make``: ``make`` writes into the prefix,
and a user's prefix holds their data.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

from mountctl import BucketNotFound, InvalidSpec, S3Settings, parse_s3_uri
from mountctl.pytorch.data.manifest import (
    INDEX_NAME,
    MANIFEST_NAME,
    Manifest,
    check_shards_present,
    from_json_text,
    index_hint,
    list_objects,
)
from mountctl.pytorch.errors import DatasetError, NoShards
from mountctl.s3 import S3Uri, check_bucket_access, is_not_found, short_client

__all__ = ["DataTarget", "IndexLocation", "LoadedDataset", "parse_data_uri", "load_dataset_description"]


@dataclass(frozen=True)
class DataTarget:
    """A data URI as the user wrote it: the prefix, and the shards a brace pattern picked (None: all)."""

    prefix: S3Uri
    names: tuple[str, ...] | None = None

    @property
    def uri(self) -> str:
        return str(self.prefix)


def parse_data_uri(uri: str) -> DataTarget:
    """``s3://b/p/`` or ``s3://b/p/name-{000..009}.tar`` (webdataset's brace syntax, in the last part only)."""
    head, _, last = uri.rpartition("/")
    if "{" in head:
        raise InvalidSpec(f"{uri!r}: a brace pattern may only pick shard names, in the last part of the URI, e.g. "
                          "s3://bucket/data/train-{000000..000009}.tar")
    if "{" not in last:
        return DataTarget(parse_s3_uri(uri))
    from braceexpand import braceexpand

    names = tuple(braceexpand(last))
    if not names or any("/" in n or not n.endswith(".tar") for n in names):
        raise InvalidSpec(f"{uri!r}: a brace pattern must name .tar shards in one prefix, e.g. "
                          "s3://bucket/data/train-{000000..000009}.tar")
    return DataTarget(parse_s3_uri(head + "/"), names)


@dataclass(frozen=True)
class IndexLocation:
    """Where an index file lives: an S3 object or a local file."""

    s3: S3Uri | None
    key_or_path: str

    @classmethod
    def parse(cls, where: str) -> "IndexLocation":
        """``s3://b/p/`` or a local directory: ``index.wids.json`` in it; else the file named."""
        if where.startswith("s3://"):
            if where.endswith("/") or "/" not in where[len("s3://"):]:
                location = parse_s3_uri(where)
                return cls(location, location.prefix + INDEX_NAME)
            head, _, name = where.rpartition("/")
            location = parse_s3_uri(head + "/")
            return cls(location, location.prefix + name)
        path = os.path.abspath(os.path.expanduser(where))
        return cls(None, os.path.join(path, INDEX_NAME) if where.endswith("/") or os.path.isdir(path) else path)

    @classmethod
    def beside(cls, prefix: S3Uri) -> "IndexLocation":
        return cls(prefix, prefix.prefix + INDEX_NAME)

    def __str__(self) -> str:
        return f"s3://{self.s3.bucket}/{self.key_or_path}" if self.s3 is not None else self.key_or_path

    def read(self, settings: S3Settings) -> bytes | None:
        """The file's bytes, or None when there is no such file."""
        from botocore.exceptions import ClientError

        if self.s3 is None:
            try:
                with open(self.key_or_path, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                return None
        try:
            return bytes(short_client(settings).get_object(Bucket=self.s3.bucket, Key=self.key_or_path)["Body"].read())
        except ClientError as exc:
            if is_not_found(exc):
                return None
            raise

    def write(self, settings: S3Settings, body: bytes) -> None:
        """Whole or not at all: a local file is renamed into place; an S3 PUT is atomic already."""
        if self.s3 is not None:
            short_client(settings).put_object(Bucket=self.s3.bucket, Key=self.key_or_path, Body=body,
                                              ContentType="application/json")
            return
        directory = os.path.dirname(self.key_or_path)
        os.makedirs(directory, exist_ok=True)
        fd, partial = tempfile.mkstemp(prefix=".index-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)
            os.replace(partial, self.key_or_path)
        except BaseException:
            os.unlink(partial)
            raise


@dataclass(frozen=True)
class LoadedDataset:
    """The description and the prefix its shard names are relative to (what every source kind opens)."""

    uri: str
    manifest: Manifest
    selection: bool  # a brace pattern picked some shards: other shards under the prefix are not an error

    def check_present(self, settings: S3Settings) -> None:
        """One LIST: the shards are all there, unchanged since they were indexed (see ``check_shards_present``)."""
        check_shards_present(settings, self.uri, self.manifest, exhaustive=not self.selection)


def _nothing_found(settings: S3Settings, target: DataTarget) -> NoShards:
    listed = list_objects(short_client(settings), target.prefix.bucket, target.prefix.prefix)
    tars = [n for n in listed if n.endswith(".tar")]
    uri = target.uri
    if tars:
        return NoShards(f"{uri} holds {len(tars)} .tar shards but no index ({MANIFEST_NAME} or {INDEX_NAME}), "
                        f"so training cannot account for its samples; {index_hint(uri)}, then train again "
                        "(with --index PATH where the index went elsewhere)")
    return NoShards(f"no dataset index at {uri} (no {MANIFEST_NAME} or {INDEX_NAME}, no .tar shards directly "
                    f"under it); for your own shards or class folders, {index_hint(uri)}; or pass --index PATH")


def load_dataset_description(settings: S3Settings, uri: str, index: str | None = None) -> LoadedDataset:
    """The description of ``uri``'s data: from ``index`` if given, else found beside the data."""
    target = parse_data_uri(uri)
    try:
        # Classifies an unreachable endpoint or refused credentials before anything else.
        check_bucket_access(settings, target.prefix.bucket, target.prefix.prefix)
    except BucketNotFound:
        raise NoShards(f"no dataset at {uri}: bucket {target.prefix.bucket!r} does not exist at "
                       f"{settings.endpoint_url or 'AWS S3'}") from None
    candidates = ([IndexLocation.parse(index)] if index else
                  [IndexLocation(target.prefix, target.prefix.prefix + MANIFEST_NAME), IndexLocation.beside(target.prefix)])
    for location in candidates:
        body = location.read(settings)
        if body is not None:
            break
    else:
        if index:
            raise NoShards(f"no index at {index}; {index_hint(target.uri)}")
        raise _nothing_found(settings, target)
    manifest, base = from_json_text(body, str(location))
    if base and base != target.uri:
        raise DatasetError(f"the index {location} describes shards under {base}, not {target.uri}: train on "
                           f"{base}, or index {target.uri}")
    if target.names is not None:
        manifest = manifest.selected(target.names)
    return LoadedDataset(target.uri, manifest, target.names is not None)
