"""The ``s3io`` kind: the Amazon S3 Connector for PyTorch (s3torchconnector) streams each shard."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from mountctl import S3Settings, parse_s3_uri

__all__ = ["S3IOSource", "s3io_source"]


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


@contextlib.contextmanager
def s3io_source(uri: str, settings: S3Settings, **_: Any) -> Iterator[S3IOSource]:
    yield S3IOSource(uri=str(parse_s3_uri(uri)), settings=settings)
