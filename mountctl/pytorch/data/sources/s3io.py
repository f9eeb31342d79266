"""The ``s3io`` kind: the Amazon S3 Connector for PyTorch (s3torchconnector) streams each shard."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from mountctl import S3Settings, parse_s3_uri
from mountctl.pytorch.data.sources.reader_state import PerProcessState

__all__ = ["S3IOSource", "s3io_source", "S3MapReader"]


@dataclass
class S3MapReader(PerProcessState):
    """Map-style reads through s3torchconnector's ``S3MapDataset`` (one per process, made on first use).

    Whole objects through its sequential reader; ranges (``ranged``) through its range-based reader
    with no buffer, so each read is one ranged GET of exactly the sample's bytes.
    """

    uris: tuple[str, ...]
    settings: S3Settings
    ranged: bool = False

    def __post_init__(self) -> None:
        self._dataset: Any = None
        self._pid = 0

    def _objects(self) -> Any:
        if self._dataset is None or self._pid != os.getpid():
            from s3torchconnector import S3MapDataset, S3ReaderConstructor

            constructor = S3ReaderConstructor.range_based(buffer_size=0) if self.ranged \
                else S3ReaderConstructor.sequential()
            dataset = S3MapDataset.from_objects(list(self.uris), reader_constructor=constructor,
                                                **self.settings.s3torch_options())
            len(dataset)  # resolves the object list once, before threads share it
            self._dataset, self._pid = dataset, os.getpid()
        return self._dataset

    def read(self, j: int, offset: int | None = None, length: int | None = None) -> bytes:
        reader = self._objects()[j]
        try:
            if offset is None or length is None:
                return bytes(reader.read())
            reader.seek(offset)
            return bytes(reader.read(length))
        finally:
            reader.close()


@dataclass(frozen=True)
class S3IOSource:
    uri: str  # s3://bucket/prefix/
    settings: S3Settings
    kind: str = "s3io"

    def open_shards(self, names: Sequence[str]) -> Iterator[tuple[str, BinaryIO]]:
        from s3torchconnector import S3IterableDataset

        # Sharding is ours (plan.py): this reader asks for exactly its shards, so the
        # connector's own enable_sharding stays off.  One client per call, made in the worker,
        # with the run's settings (credentials included) rather than the connector's own chain.
        objects = S3IterableDataset.from_objects([self.uri + name for name in names], enable_sharding=False,
                                                 **self.settings.s3torch_options())
        for name, reader in zip(names, objects, strict=True):
            try:
                yield name, reader
            finally:
                reader.close()

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "uri": self.uri, "endpoint": self.settings.endpoint_url}

    def map_reader(self, names: Sequence[str], *, ranged: bool = False) -> S3MapReader:
        return S3MapReader(tuple(self.uri + name for name in names), self.settings, ranged)


@contextlib.contextmanager
def s3io_source(uri: str, settings: S3Settings, **_: Any) -> Iterator[S3IOSource]:
    yield S3IOSource(uri=str(parse_s3_uri(uri)), settings=settings)
