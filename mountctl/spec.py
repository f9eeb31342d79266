"""``MountSpec``: everything needed to mount one S3 prefix, validated once at construction."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidSpec

__all__ = ["MountSpec", "S3Uri", "parse_s3_uri", "canonical_dir", "BACKEND_NAMES"]

BACKEND_NAMES = ("auto", "mount-s3", "rclone", "s3fs")

# S3's own bucket naming rules, relaxed for the dots some S3-compatible stores allow.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-_]{1,61}[a-z0-9]$")


def canonical_dir(path: str) -> str:
    """The path as the mount table will show it, without touching the path itself.

    Only the parent is resolved: a stat of the directory could hang on a wedged mount.
    """
    path = os.path.abspath(os.path.expanduser(path))
    parent, name = os.path.split(path)
    return os.path.join(os.path.realpath(parent), name) if name else path


@dataclass(frozen=True)
class S3Uri:
    bucket: str
    prefix: str  # "" or ends with "/"

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_s3_uri(uri: str) -> S3Uri:
    """Split ``s3://bucket[/prefix/]``; the prefix always comes back ending in ``/``."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise InvalidSpec(f"{uri!r} is not an S3 URI: write it as s3://bucket/ or s3://bucket/prefix/")
    rest = uri[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket):
        raise InvalidSpec(
            f"{bucket!r} in {uri!r} is not a valid bucket name: use 3-63 lowercase letters, "
            "digits, dots or hyphens, e.g. s3://my-bucket/data/"
        )
    if "//" in prefix or prefix.startswith("/") or any(part in (".", "..") for part in prefix.split("/")):
        raise InvalidSpec(f"prefix {prefix!r} in {uri!r} has an empty, '.' or '..' part: write it as a/b/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return S3Uri(bucket, prefix)


@dataclass(frozen=True)
class MountSpec:
    """One mount: which S3 prefix, where, through which program, with which options.

    Frozen and checked in ``__post_init__`` so that a bad request fails at the
    line that made it, not minutes later inside a FUSE daemon.
    """

    uri: str
    mount_dir: str
    backend: str = "auto"
    read_only: bool = True
    cache_dir: str | None = None
    cache_size_mb: int | None = None
    metadata_ttl_s: float = 60.0
    endpoint_url: str | None = None
    region: str | None = None
    uid: int | None = None
    gid: int | None = None
    allow_other: bool = False
    extra_args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    mount_timeout_s: float = 30.0
    unmount_timeout_s: float = 10.0
    probe_timeout_s: float = 2.0
    busy_grace_s: float = 2.0

    def __post_init__(self) -> None:
        parse_s3_uri(self.uri)
        if not isinstance(self.mount_dir, str) or not self.mount_dir:
            raise InvalidSpec("mount_dir is empty: give the directory to mount on, e.g. /mnt/data")
        object.__setattr__(self, "mount_dir", canonical_dir(self.mount_dir))
        if self.backend not in BACKEND_NAMES:
            raise InvalidSpec(
                f"unknown backend {self.backend!r}: choose one of {', '.join(BACKEND_NAMES)}"
            )
        for name in ("mount_timeout_s", "unmount_timeout_s", "probe_timeout_s"):
            if not getattr(self, name) > 0:
                raise InvalidSpec(f"{name} must be a positive number of seconds, not {getattr(self, name)!r}")
        if self.busy_grace_s < 0 or self.metadata_ttl_s < 0:
            raise InvalidSpec("busy_grace_s and metadata_ttl_s cannot be negative")
        if self.cache_size_mb is not None and self.cache_size_mb <= 0:
            raise InvalidSpec(f"cache_size_mb must be positive, not {self.cache_size_mb!r}")
        if self.cache_dir is not None:
            object.__setattr__(self, "cache_dir", os.path.abspath(os.path.expanduser(self.cache_dir)))
        for name in ("uid", "gid"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise InvalidSpec(f"{name} must be a non-negative integer, not {value!r}")
        extra: dict[str, tuple[str, ...]] = {}
        for backend, args in dict(self.extra_args).items():
            if backend not in BACKEND_NAMES[1:]:
                raise InvalidSpec(f"extra_args names unknown backend {backend!r}")
            if isinstance(args, str):
                raise InvalidSpec(f"extra_args[{backend!r}] must be a list of arguments, not one string")
            extra[backend] = tuple(str(arg) for arg in args)
        object.__setattr__(self, "extra_args", extra)
        if self.endpoint_url is not None and not re.match(r"^https?://[^/\s]+", self.endpoint_url):
            raise InvalidSpec(f"endpoint_url {self.endpoint_url!r} is not http(s)://host[:port]")

    @property
    def bucket(self) -> str:
        return parse_s3_uri(self.uri).bucket

    @property
    def prefix(self) -> str:
        return parse_s3_uri(self.uri).prefix

    def replace(self, **changes: Any) -> "MountSpec":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["extra_args"] = {k: list(v) for k, v in self.extra_args.items()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MountSpec":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def identity(self) -> str:
        """What two requests must agree on to share one mount (timeouts may differ)."""
        data = self.to_dict()
        for name in ("mount_timeout_s", "unmount_timeout_s", "probe_timeout_s", "busy_grace_s"):
            data.pop(name)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
