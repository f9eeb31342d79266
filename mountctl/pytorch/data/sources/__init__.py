"""Source kinds: how shard bytes get from S3 into a DataLoader worker.

``SOURCE_KINDS`` maps each kind to an opener: a context manager that sets
the kind up for the whole run (the mountpoint kind mounts the prefix) and
yields a picklable ``ShardSource``.  DataLoader workers call its
``open_shards(names, etags)``, which yields ``(shard_name, binary stream)`` pairs in
the order asked, each read at one version of its object (``etags``, the index's; else
the one seen at the first open): a reopen that finds another raises ``ObjectChanged``.  Nothing else in the package branches on the kind.

What a run asks of one kind alone is that kind's options dataclass, defined beside it and passed to
``open_source`` as one keyword named after the kind (``mountpoint=MountpointOptions(...)``); the other kinds
ignore it.  s3io and fsspec have no options of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, BinaryIO, Protocol

from mountctl import InvalidSpec
from mountctl.pytorch.data.sources.fsspec_s3 import FsspecSource, fsspec_source
from mountctl.pytorch.data.sources.mountpoint import MountpointOptions, MountpointSource, mountpoint_source
from mountctl.pytorch.data.sources.s3io import S3IOSource, s3io_source

__all__ = ["SOURCE_KINDS", "ShardSource", "check_source_choice", "open_source", "MountpointOptions", "MountpointSource",
           "S3IOSource", "FsspecSource"]


class ShardSource(Protocol):
    kind: str

    def open_shards(self, names: Sequence[str], etags: Sequence[str | None] | None = None
                    ) -> Iterator[tuple[str, BinaryIO]]: ...

    def describe(self) -> dict[str, Any]: ...

    def map_reader(self, names: Sequence[str], *, ranged: bool = False,
                   etags: Sequence[str | None] | None = None) -> Any:
        """A picklable reader of single objects (``ranged``: byte ranges of shards) for map-style datasets, each
        read at the version ``etags`` names; every kind has one (``mapstyle.py`` uses it)."""
        ...


# Each opener takes (uri, settings) and open_source's keywords, and yields a ShardSource for the run.
SOURCE_KINDS: dict[str, Callable[..., AbstractContextManager[Any]]] = {
    "mountpoint": mountpoint_source,
    "s3io": s3io_source,
    "fsspec": fsspec_source,
}


def _unknown_kind(kind: str) -> InvalidSpec:
    return InvalidSpec(f"unknown source kind {kind!r}: choose one of {', '.join(SOURCE_KINDS)}")


def check_source_choice(kind: str, mountpoint: MountpointOptions) -> None:
    """What every config that opens a source checks where it is built, not in a worker: a known kind, and no
    option that only the mountpoint kind honours asked of another (the options check themselves when made)."""
    if kind not in SOURCE_KINDS:
        raise _unknown_kind(kind)
    mountpoint.check_kind(kind)


def open_source(kind: str, uri: str, settings: Any, *, mountpoint: MountpointOptions | None = None,
                dataset_bytes: int | None = None, readers: int | None = None, manifest: Any = None,
                whole_files: bool = False, per_file: bool = False) -> AbstractContextManager[Any]:
    """The source of ``kind`` for ``uri``.  ``mountpoint``: that kind's options (None: its defaults).  The rest
    say what the run reads, for a kind that sizes itself by it (the mountpoint kind: its cache, memory bound and
    read-ahead): the dataset's size in bytes, each rank's DataLoader workers, its manifest, whether shards are
    read whole front to back (not map-style), whether it is one object per sample.  A kind ignores what it does
    not use."""
    try:
        opener = SOURCE_KINDS[kind]
    except KeyError:
        raise _unknown_kind(kind) from None
    return opener(uri, settings, mountpoint=mountpoint, dataset_bytes=dataset_bytes, readers=readers,
                  manifest=manifest, whole_files=whole_files, per_file=per_file)
