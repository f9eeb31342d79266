"""``MountSpec``: everything needed to mount one S3 prefix, validated once at construction."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidSpec
from ..s3 import parse_s3_uri
from ..s3.settings import check_endpoint
from .backend_names import AUTO, BACKEND_NAMES, MOUNT_PROGRAMS, OBJECT_LIST_PROGRAM

__all__ = ["MountSpec", "canonical_dir", "BACKEND_NAMES", "MIN_MEMORY_MB"]

# Options that change how long mountctl waits, not what the mount serves.
_BOUNDS = ("mount_timeout_s", "unmount_timeout_s", "probe_timeout_s", "busy_grace_s")
# Options that change how the program uses the node's resources, not which bytes it serves: requests
# that differ only here share one mount, which keeps the bound of the request that started it.
_RESOURCES = ("memory_mb", "whole_files")
# Work done for the loader once mounted, not a property of the mount: a later request's own ``warm`` is ignored.
_AHEAD = ("warm",)
# The least memory bound worth asking for: below it no mount program can run at all.
MIN_MEMORY_MB = 64


def canonical_dir(path: str) -> str:
    """The path as the mount table will show it, without touching the path itself.

    Only the parent is resolved: a stat of the directory could hang on a wedged mount.
    """
    path = os.path.abspath(os.path.expanduser(path))
    parent, name = os.path.split(path)
    return os.path.join(os.path.realpath(parent), name) if name else path


@dataclass(frozen=True, kw_only=True)
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
    # How long a program may answer from what the store said about a file or folder (mount-s3's kernel entry and
    # attribute timeouts too): an hour, so that a loader's next epoch sends no lookup; the cost is that a replaced
    # object may be read old by a new open for that long (docs/mount-s3.md "The page cache and the metadata TTL").
    metadata_ttl_s: float = 3600.0
    endpoint_url: str | None = None
    region: str | None = None
    uid: int | None = None
    gid: int | None = None
    allow_other: bool = False
    extra_args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    memory_mb: int | None = None  # bound on the mount program's memory, turned into its own flags
    # Readers read each file whole, front to back (shards): mount-s3 (our build) then fetches a file's first 16 MiB
    # at once, as parallel parts. Leave False where files are read at random offsets (map-style over shards).
    whole_files: bool = False
    # Read files into the cache once mounted: "all", "auto" (the whole tree if it fits), "off", or a file listing
    # paths.  None: "auto" for a mount-s3 mount with a cache, else nothing (``mountctl.mounts.warm.warm_for``).
    warm: str | None = None
    # Serve exactly the objects of this list (object_list.write_object_list), read-only, each pinned to its ETag,
    # with no LIST or HEAD: mountctl's mount-s3 only. They appear under ``data_dir``.
    objects: str | None = None
    mount_timeout_s: float = 30.0
    unmount_timeout_s: float = 10.0
    probe_timeout_s: float = 2.0
    busy_grace_s: float = 2.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "uri", str(parse_s3_uri(self.uri)))  # s3://b/p and s3://b/p/ are one prefix
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
        if not isinstance(self.whole_files, bool):
            raise InvalidSpec(f"whole_files must be True or False, not {self.whole_files!r}")
        if self.memory_mb is not None and (isinstance(self.memory_mb, bool) or not isinstance(self.memory_mb, int)
                                           or self.memory_mb < MIN_MEMORY_MB):
            raise InvalidSpec(f"memory_mb must be a whole number of MiB, at least {MIN_MEMORY_MB}, "
                              f"not {self.memory_mb!r}")
        if self.cache_dir is not None:
            object.__setattr__(self, "cache_dir", os.path.abspath(os.path.expanduser(self.cache_dir)))
        for name in ("uid", "gid"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise InvalidSpec(f"{name} must be a non-negative integer, not {value!r}")
        extra: dict[str, tuple[str, ...]] = {}
        for backend, args in dict(self.extra_args).items():
            if backend not in MOUNT_PROGRAMS:
                raise InvalidSpec(f"extra_args names unknown backend {backend!r}")
            if isinstance(args, str):
                raise InvalidSpec(f"extra_args[{backend!r}] must be a list of arguments, not one string")
            extra[backend] = tuple(str(arg) for arg in args)
        object.__setattr__(self, "extra_args", extra)
        if self.endpoint_url is not None:
            object.__setattr__(self, "endpoint_url", check_endpoint(self.endpoint_url))
        if self.objects is not None:
            self._check_objects()
        if self.warm is not None:
            if not isinstance(self.warm, str) or not self.warm.strip():
                raise InvalidSpec(f"warm must be 'all', 'auto', 'off' or the path of a file listing paths, not "
                                  f"{self.warm!r}")
            if self.warm not in ("all", "auto", "off"):  # the supervisor reads it from another working directory
                object.__setattr__(self, "warm", os.path.abspath(os.path.expanduser(self.warm)))

    def _check_objects(self) -> None:
        if not isinstance(self.objects, str) or not self.objects:
            raise InvalidSpec(f"objects must be the path of an object list file, not {self.objects!r}")
        if self.backend not in (AUTO, OBJECT_LIST_PROGRAM):
            raise InvalidSpec(f"only {OBJECT_LIST_PROGRAM} mounts a list of objects, not {self.backend}: use backend "
                              f"'{OBJECT_LIST_PROGRAM}' (or '{AUTO}')")
        if not self.read_only:
            raise InvalidSpec("a mount of a list of objects is read-only: drop read_only=False (or --read-write)")
        object.__setattr__(self, "objects", os.path.abspath(self.objects))
        location = parse_s3_uri(self.uri)
        if objects_directory_name(location.bucket, location.prefix) in (".", ".."):
            raise InvalidSpec(f"a list of objects mounts under the last part of the prefix, and {self.uri}'s is "
                              "'.' or '..': give the prefix without it")
        object.__setattr__(self, "backend", OBJECT_LIST_PROGRAM)

    @property
    def data_dir(self) -> str:
        """Where the prefix's objects are: the mount point, or for an object list the one directory under it."""
        if self.objects is None:
            return self.mount_dir
        location = parse_s3_uri(self.uri)
        return os.path.join(self.mount_dir, objects_directory_name(location.bucket, location.prefix))

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

    def served(self) -> dict[str, Any]:
        """The options that decide what the mount serves and how (no time or memory bounds, no directory).

        The endpoint and region are left out: the resolved ``S3Settings`` stand for them.
        """
        data = self.to_dict()
        for name in (*_BOUNDS, *_RESOURCES, *_AHEAD, "mount_dir", "endpoint_url", "region"):
            data.pop(name)
        return data


def objects_directory_name(bucket: str, prefix: str) -> str:
    """The one directory under the mount point that holds the listed objects: the last part of the prefix, or
    the bucket (mountpoint-s3-fs puts a manifest's objects in a directory of their own)."""
    return prefix.rstrip("/").rsplit("/", 1)[-1] or bucket
