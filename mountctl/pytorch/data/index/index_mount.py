"""A dataset's index as the exact list of objects a mount serves: opens cost no LIST and no HEAD.

mountctl's mount-s3 can serve a fixed list of objects (``mountctl.mounts.object_list``): each lookup is answered
from the list and each read is pinned to the listed ETag, so a per-file loader's open waits for no metadata
round trip, and an object replaced since indexing is refused rather than read. The index already holds each
object's key and size, and (for data that ``index`` read) its ETag; a dataset ``make`` wrote records SHA-256
sums instead, so their ETags come from one listing of the prefix at the start, never during the epoch.
"""

from __future__ import annotations

from typing import Any

from mountctl import InvalidSpec, ListedObject, S3Settings, parse_s3_uri, write_object_list
from mountctl.s3 import StoredObject, list_objects, short_client

__all__ = ["object_list_for", "object_list_under"]


def _etags_in(settings: S3Settings, uri: str) -> dict[str, StoredObject]:
    """ETag and size of every object under the dataset's prefix (keys relative to it): one paged LIST."""
    location = parse_s3_uri(uri)
    return list_objects(short_client(settings), location.bucket, location.prefix)


def object_list_for(manifest: Any, settings: S3Settings, uri: str) -> str:
    """The object list (its path) of every shard or file the index names, each with its ETag."""
    wanted = [(f.key, f.etag, f.bytes) for f in manifest.files] or [(s.name, s.etag, s.bytes) for s in manifest.shards]
    listed = _etags_in(settings, uri) if any(etag is None for _, etag, _ in wanted) else {}
    objects = []
    for key, etag, size in wanted:
        if etag is None:
            stored = listed.get(key)
            etag, size_now = (stored.etag or "", stored.size) if stored else ("", -1)
            if size_now != size:
                raise InvalidSpec(f"{uri}{key} is {'missing' if size_now < 0 else f'{size_now} bytes'}, but the "
                                  f"dataset's index says {size} bytes: index it again, or mount without --from-index")
        objects.append(ListedObject(key, etag, size))
    return write_object_list(objects)


def object_list_under(settings: S3Settings, uri: str) -> str:
    """The object list (its path) of every object under ``uri`` as one LIST sees it now, directory markers left
    out: for data with no index of ours (DLIO's files), listed once before the run rather than during it."""
    objects = [ListedObject(key, stored.etag or "", stored.size) for key, stored in sorted(_etags_in(settings, uri).items())
               if not key.endswith("/")]
    if not objects:
        raise InvalidSpec(f"{uri} holds no objects: nothing to mount from a list")
    return write_object_list(objects)
