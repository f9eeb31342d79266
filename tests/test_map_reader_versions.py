"""Map-style readers read an object only at the version the index names (#36.11).

An index built with ``--read headers`` has no CRC to catch a replaced shard, so each map reader must refuse the new
version itself, in the same one line as the shard readers and the mount (``... was replaced: ...``).  Real objects on
the real local S3, read through the real s3torchconnector and s3fs, replaced between two reads.
"""

from __future__ import annotations

import os

import pytest

from mountctl import ObjectChanged
from mountctl.pytorch.data.sources.fsspec_s3 import FsspecSource
from mountctl.pytorch.data.sources.s3io import S3IOSource

SOURCES = {"s3io": lambda uri, settings: S3IOSource(uri, settings),
           "fsspec": lambda uri, settings: FsspecSource(uri[len("s3://"):], settings)}


@pytest.mark.parametrize("ranged", [True, False], ids=["shard-range", "whole-object"])
@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_a_map_reader_refuses_an_object_replaced_mid_run_in_one_line(kind, ranged, s3_env, s3, bucket):
    old, new = os.urandom(4096), os.urandom(4096)  # same size: only the version tells them apart
    s3.put_object(Bucket=bucket, Key="own/train-000000.tar", Body=old)
    etag = s3.head_object(Bucket=bucket, Key="own/train-000000.tar")["ETag"].strip('"')
    reader = SOURCES[kind](f"s3://{bucket}/own/", s3_env).map_reader(["train-000000.tar"], ranged=ranged,
                                                                      etags=[etag])
    try:
        span = (512, 100) if ranged else (None, None)
        assert reader.read(0, *span) == (old[512:612] if ranged else old)
        s3.put_object(Bucket=bucket, Key="own/train-000000.tar", Body=new)
        with pytest.raises(ObjectChanged) as refused:
            reader.read(0, *span)
    finally:
        getattr(reader, "close", lambda: None)()
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert f"s3://{bucket}/own/train-000000.tar was replaced: this run reads ETag {etag}" in message
    assert f"resnet.py index s3://{bucket}/own/" in message
