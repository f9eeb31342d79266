"""A dataset's index as the exact list of objects a mount serves: opens cost no LIST and no HEAD.

mountctl's mount-s3 can serve a fixed list of objects (``mountctl.object_list``): each lookup is answered
from the list and each read is pinned to the listed ETag, so a per-file loader's open waits for no metadata
round trip, and an object replaced since indexing is refused rather than read. The index already holds each
object's key and size, and (for data that ``index`` read) its ETag; a dataset ``make`` wrote records SHA-256
sums instead, so their ETags come from one listing of the prefix at the start, never during the epoch.
"""

from __future__ import annotations

from typing import Any

from mountctl import InvalidSpec, ListedObject, S3Settings, parse_s3_uri, write_object_list
from mountctl.s3 import short_client

__all__ = ["object_list_for", "index_objects", "object_list_under"]


def _etags_in(settings: S3Settings, uri: str) -> dict[str, tuple[str, int]]:
    """ETag and size of every object under the dataset's prefix (keys relative to it): one paged LIST."""
    location = parse_s3_uri(uri)
    found: dict[str, tuple[str, int]] = {}
    paginator = short_client(settings).get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=location.bucket, Prefix=location.prefix):
        for item in page.get("Contents", []):
            found[item["Key"][len(location.prefix):]] = (str(item.get("ETag") or ""), int(item["Size"]))
    return found


def object_list_for(manifest: Any, settings: S3Settings, uri: str) -> str:
    """The object list (its path) of every shard or file the index names, each with its ETag."""
    wanted = [(f.key, f.etag, f.bytes) for f in manifest.files] or [(s.name, s.etag, s.bytes) for s in manifest.shards]
    listed = _etags_in(settings, uri) if any(etag is None for _, etag, _ in wanted) else {}
    objects = []
    for key, etag, size in wanted:
        if etag is None:
            etag, size_now = listed.get(key, ("", -1))
            if size_now != size:
                raise InvalidSpec(f"{uri}{key} is {'missing' if size_now < 0 else f'{size_now} bytes'}, but the "
                                  f"dataset's index says {size} bytes: index it again, or mount without --from-index")
        objects.append(ListedObject(key, etag, size))
    return write_object_list(objects)


def object_list_under(settings: S3Settings, uri: str) -> str:
    """The object list (its path) of every object under ``uri`` as one LIST sees it now, directory markers left
    out: for data with no index of ours (DLIO's files), listed once before the run rather than during it."""
    objects = [ListedObject(key, etag, size) for key, (etag, size) in sorted(_etags_in(settings, uri).items())
               if not key.endswith("/")]
    if not objects:
        raise InvalidSpec(f"{uri} holds no objects: nothing to mount from a list")
    return write_object_list(objects)


def index_objects(config: Any, manifest: Any, settings: S3Settings, uri: str) -> str | None:
    """The object list to mount for a run's ``config`` (``from_index`` with the mountpoint kind), or None."""
    if not (getattr(config, "from_index", False) and config.source_kind == "mountpoint"):
        return None
    return object_list_for(manifest, settings, uri)
