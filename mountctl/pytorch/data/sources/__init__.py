"""Source kinds: how shard bytes get from S3 into a DataLoader worker.

``SOURCE_KINDS`` maps each kind to an opener: a context manager that sets
the kind up for the whole run (the mountpoint kind mounts the prefix) and
yields a picklable ``ShardSource``.  DataLoader workers call its
``open_shards(names, etags)``, which yields ``(shard_name, binary stream)`` pairs in
the order asked, each read at one version of its object (``etags``, the index's; else
the one seen at the first open): a reopen that finds another raises ``ObjectChanged``.  Nothing else in the package branches on the kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, BinaryIO, Protocol

from mountctl.pytorch.data.sources.fsspec_s3 import FsspecSource, fsspec_source
from mountctl.pytorch.data.sources.mountpoint import MountpointSource, mountpoint_source
from mountctl.pytorch.data.sources.s3io import S3IOSource, s3io_source

__all__ = ["SOURCE_KINDS", "ShardSource", "check_source_choice", "open_source", "MountpointSource", "S3IOSource", "FsspecSource"]


class ShardSource(Protocol):
    kind: str

    def open_shards(self, names: Sequence[str], etags: Sequence[str | None] | None = None
                    ) -> Iterator[tuple[str, BinaryIO]]: ...

    def describe(self) -> dict[str, Any]: ...


# Each opener takes (uri, settings, **options) and yields a ShardSource for the run.
SOURCE_KINDS: dict[str, Callable[..., AbstractContextManager[Any]]] = {
    "mountpoint": mountpoint_source,
    "s3io": s3io_source,
    "fsspec": fsspec_source,
}


def check_source_choice(kind: str, backend: str) -> None:
    """Reject an unknown source kind or mount program where a config is built, not in a worker."""
    from mountctl import BACKEND_NAMES, InvalidSpec

    if kind not in SOURCE_KINDS:
        raise InvalidSpec(f"unknown source kind {kind!r}: choose one of {', '.join(SOURCE_KINDS)}")
    if backend not in BACKEND_NAMES:
        raise InvalidSpec(f"unknown mount backend {backend!r}: choose one of {', '.join(BACKEND_NAMES)}")


def open_source(kind: str, uri: str, settings: Any, **options: Any) -> AbstractContextManager[Any]:
    """The source of ``kind`` for ``uri``; options a kind does not use are ignored."""
    from mountctl import InvalidSpec

    try:
        opener = SOURCE_KINDS[kind]
    except KeyError:
        raise InvalidSpec(f"unknown source kind {kind!r}: choose one of {', '.join(SOURCE_KINDS)}") from None
    return opener(uri, settings, **options)
