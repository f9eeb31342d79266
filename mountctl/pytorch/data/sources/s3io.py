"""The ``s3io`` kind: the Amazon S3 Connector for PyTorch (s3torchconnector) streams each shard."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from mountctl import S3Settings, VersionPin, parse_s3_uri, s3
from mountctl.pytorch.data.sources.pins import shard_pins
from mountctl.pytorch.data.sources.reader_state import PerProcessState
from mountctl.pytorch.data.sources.refreshing import Credentials, RefreshingStream, buffered
from mountctl.pytorch.errors import reindex_hint

__all__ = ["S3IOSource", "s3io_source", "S3MapReader"]


@dataclass
class S3MapReader(PerProcessState):
    """Map-style reads through s3torchconnector's client (one per process, made on first use).

    Whole objects through the connector's sequential reader.  Each is checked once per process, at its first read
    there: one HEAD after its bytes, compared with the index's ETag (``etags``); its ETag and size are then handed
    to the connector with every later read, so a whole object costs one GET.  An object replaced after a
    process's first read of it is read whole at its new version by that process (a new worker, epoch or run
    checks again): one version, never two.

    Ranges (``ranged``: samples inside a shard) are pinned on every read, because a range of a replaced shard at
    the old offsets is garbage: each is one ranged GET carrying ``If-Match`` with the ETag the index names (else
    the one the process's first read of the shard met), and S3's 412 becomes ``ObjectChanged``.  The connector's
    range reader (``MountpointS3Client.get_object(bucket, key, start, end)`` in s3torchconnector 1.5) takes no
    ``If-Match``, so ranges go through boto3's ``get_object(IfMatch=..., Range=...)``: one GET, no HEAD.
    """

    uris: tuple[str, ...]
    settings: S3Settings
    ranged: bool = False  # the reads say it too: a range is asked for with an offset and a length
    etags: tuple[str | None, ...] | None = None  # the index's, by object: a read of another version is refused
    dataset_uri: str = ""  # s3://bucket/prefix/: what the refusal says to re-index

    def __post_init__(self) -> None:
        self._credentials = Credentials(self.settings, "s3io")
        self._pid = 0
        self._known: dict[int, Any] = {}  # object -> its ETag and size as this process checked them (the connector's)
        self._pins: dict[int, VersionPin] = {}  # object -> the version this process's ranges are read at

    def _mine(self) -> None:
        """After fork the parent's clients and checks are not this process's."""
        if self._pid != os.getpid():
            self._credentials, self._pid, self._known, self._pins = (Credentials(self.settings, "s3io"),
                                                                     os.getpid(), {}, {})

    def read(self, j: int, offset: int | None = None, length: int | None = None) -> bytes:
        self._mine()
        if offset is not None and length is not None:
            return self._credentials.call(self.uris[j], lambda: self._range(j, offset, length))
        known = self._known.get(j)
        data = self._credentials.call(self.uris[j], lambda: self._get(j, known))
        if known is None:
            # A whole object's first read: the HEAD comes after its bytes, so a version replaced before or during
            # the read is seen.
            pinned = self.etags is not None and self.etags[j] is not None
            self._known[j] = self._head(j) if pinned else _object_info(None, len(data))
        return data

    def _range(self, j: int, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        pin = self._pins.get(j)
        if pin is None:  # setdefault: threads that race here share one pin
            pin = self._pins.setdefault(j, VersionPin(self.uris[j], self.etags[j] if self.etags else None,
                                                      remedy=reindex_hint(self.dataset_uri)))
        bucket, _, key = self.uris[j][len("s3://"):].partition("/")
        try:
            data, etag = s3.read_range(self._credentials.client("range", s3.client), bucket, key, offset, length,
                                    if_match=pin.if_match)
        except Exception as exc:
            if s3.is_precondition_failed(exc):
                raise pin.changed() from None
            raise
        pin.check(etag)  # pins the first read's version; refuses another from a store that ignores If-Match
        return data

    def _get(self, j: int, known: Any) -> bytes:
        bucket, _, key = self.uris[j][len("s3://"):].partition("/")
        client = self._credentials.client("map", _connector_client)
        reader = client.get_object(bucket, key, object_info=known, reader_constructor=_sequential_reader())
        try:
            return bytes(reader.read())
        finally:
            reader.close()

    def _head(self, j: int) -> Any:
        """One HEAD: the object's ETag, checked against the index's, and its size, for the connector's readers."""
        bucket, _, key = self.uris[j][len("s3://"):].partition("/")
        facts: list[tuple[str, int]] = []

        def etag_now() -> str | None:
            head = s3.object_head_now(self._credentials.client("head", s3.short_client), bucket, key)
            facts[:] = [head] if head else []
            return head[0] if head else None

        pin = VersionPin(self.uris[j], self.etags[j] if self.etags else None, remedy=reindex_hint(self.dataset_uri),
                         etag_now=etag_now)
        if not self._credentials.call(self.uris[j], pin.verify):
            raise FileNotFoundError(f"{pin.uri} was deleted while it was being read; {pin.remedy}")
        etag, size = facts[0]
        return _object_info(etag, size)


def _connector_client(settings: S3Settings) -> Any:
    """s3torchconnector's client (what ``S3MapDataset`` reads through), which takes an object's facts with a read."""
    from s3torchconnector._s3client import S3Client

    options = settings.s3torch_options()
    return S3Client(options["region"], endpoint=options["endpoint"], s3client_config=options["s3client_config"])


def _sequential_reader() -> Any:
    from s3torchconnector import S3ReaderConstructor

    return S3ReaderConstructor.sequential()


@dataclass(frozen=True)
class _ObjectInfo:
    """What the connector's readers ask a HEAD for (its ``HeadObjectResult``'s fields; they read ``size``), known
    without asking."""

    etag: str
    size: int
    last_modified: int = 0
    storage_class: str | None = None
    restore_status: Any = None


def _object_info(etag: str | None, size: int) -> _ObjectInfo:
    return _ObjectInfo(f'"{etag}"' if etag else "", size)


def _map_dataset(uris: Sequence[str], settings: S3Settings) -> Any:
    from s3torchconnector import S3MapDataset

    dataset = S3MapDataset.from_objects(list(uris), reader_constructor=_sequential_reader(),
                                        **settings.s3torch_options())
    len(dataset)  # resolves the object list once, before threads share it
    return dataset


@dataclass(frozen=True)
class S3IOSource:
    uri: str  # s3://bucket/prefix/
    settings: S3Settings
    kind: str = "s3io"

    def open_shards(self, names: Sequence[str], etags: Sequence[str | None] | None = None
                    ) -> Iterator[tuple[str, BinaryIO]]:
        """Each shard at one version: ``etags`` (the index's, by name), else the one S3 reports at the first open.

        The connector's GET takes no If-Match, so every open (the first, and a reopen after a credential
        refresh) asks S3 for the ETag with one HEAD once the GET has started, and refuses another version.
        """
        # Sharding is ours (plan.py): this reader asks for exactly its shards.  One client per call,
        # made in the worker, with the run's settings (credentials included) rather than the
        # connector's own chain; rebuilt with credentials resolved again when S3 refuses them.
        location = parse_s3_uri(self.uri)
        uris = [self.uri + name for name in names]
        credentials = Credentials(self.settings, self.kind)

        def etag_now(name: str) -> Any:
            return lambda: s3.object_etag_now(credentials.client("head", s3.short_client), location.bucket,
                                              location.prefix + name)

        pins = shard_pins(self.uri, names, etags, etag_now)
        for index, name in enumerate(names):
            def open_at(offset: int, index: int = index, pin: VersionPin = pins[index]) -> BinaryIO:
                reader = credentials.client("objects", lambda settings: _map_dataset(uris, settings))[index]
                try:
                    reader.prefetch()  # the GET starts before the HEAD: an object replaced in between reads as changed
                    if not pin.verify():
                        raise FileNotFoundError(f"{pin.uri} was deleted while it was being read; {pin.remedy}")
                    if offset:
                        reader.seek(offset)
                except BaseException:
                    reader.close()
                    raise
                return reader

            with buffered(RefreshingStream(uris[index], credentials, open_at, pins[index])) as stream:
                yield name, stream

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "uri": self.uri, "endpoint": self.settings.endpoint_url}

    def map_reader(self, names: Sequence[str], *, ranged: bool = False,
                   etags: Sequence[str | None] | None = None) -> S3MapReader:
        return S3MapReader(tuple(self.uri + name for name in names), self.settings, ranged,
                           None if etags is None else tuple(etags), self.uri)


@contextlib.contextmanager
def s3io_source(uri: str, settings: S3Settings, **_: Any) -> Iterator[S3IOSource]:
    yield S3IOSource(uri=str(parse_s3_uri(uri)), settings=settings)
