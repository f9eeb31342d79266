"""Where a dataset and its index are: the data URI (a prefix or a brace pattern) parsed once, at the edge.

``s3://b/p/`` is a prefix; ``s3://b/p/train-{000000..000003}.tar`` picks
shards by webdataset's brace pattern from the dataset at ``s3://b/p/``.  An
index lives beside the data (``index.wids.json``) or wherever ``--index-out``
put it: a local file or another S3 object (``IndexLocation``).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

from mountctl import InvalidSpec, S3Settings, parse_s3_uri
from mountctl.s3 import S3Uri, is_not_found, short_client

__all__ = ["DataTarget", "IndexLocation", "parse_data_uri", "INDEX_NAME"]

INDEX_NAME = "index.wids.json"  # what `resnet.py index` writes beside a user's data


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
