"""One ``VersionPin`` per shard a source kind opens: the ETag the index records, checked the kind's own way.

Every kind reads a shard at one version only.  The ETag comes from the dataset's index (``etags``,
in the order of the names); where the index has none, the ETag seen at the first open is pinned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mountctl import VersionPin
from mountctl.pytorch.errors import reindex_hint

__all__ = ["shard_pins"]


def shard_pins(dataset_uri: str, names: Sequence[str], etags: Sequence[str | None] | None,
               etag_now: Callable[[str], Callable[[], str | None]] | None = None) -> list[VersionPin]:
    """Pins for ``names`` under ``dataset_uri`` (``s3://bucket/prefix/``); ``etag_now(name)`` asks S3 for one."""
    if etags is not None and len(etags) != len(names):
        raise ValueError(f"{len(etags)} ETags given for {len(names)} shards")
    return [VersionPin(dataset_uri + name, etags[i] if etags is not None else None,
                       etag_now=etag_now(name) if etag_now is not None else None, remedy=reindex_hint(dataset_uri))
            for i, name in enumerate(names)]
