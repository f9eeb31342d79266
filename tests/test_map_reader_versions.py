"""Map-style readers read an object only at the version the index names (#36.11).

An index built with ``--read headers`` has no CRC to catch a replaced shard, so each map reader must refuse the new
version itself, in the same one line as the shard readers and the mount (``... was replaced: ...``).  Real objects on
the real local S3, read through the real s3torchconnector and s3fs, replaced between two reads.
"""

from __future__ import annotations

import os
import pickle

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
        if kind == "s3io" and not ranged:
            # s3io checks a whole object once per process, at its first read there (one HEAD; its ranges and
            # fsspec's GETs carry If-Match): the process to meet the new version is one that has not read it yet,
            # as a new DataLoader worker, epoch or run (a worker gets its reader pickled).
            reader = pickle.loads(pickle.dumps(reader))
        with pytest.raises(ObjectChanged) as refused:
            reader.read(0, *span)
    finally:
        getattr(reader, "close", lambda: None)()
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert f"s3://{bucket}/own/train-000000.tar was replaced: this run reads ETag {etag}" in message
    assert f"resnet.py index s3://{bucket}/own/" in message



@pytest.mark.parametrize("from_index", [True, False], ids=["index-etag", "first-read-etag"])
def test_s3io_ranges_of_one_process_refuse_a_shard_replaced_between_two_reads(from_index, s3_env, s3, bucket):
    """Issue 50, 1.2: a shard replaced under a running process (an index built with ``--read headers`` has no CRC)
    must not be read at its old offsets.  Every ranged read is pinned to the ETag (the index's, else the first
    read's) with If-Match: the read after the overwrite raises ObjectChanged naming the shard and gives no byte of
    the new version, and so does every read after it."""
    name = "train-000000.tar"
    old, new = os.urandom(8192), os.urandom(8192)  # same size: only the version tells them apart
    s3.put_object(Bucket=bucket, Key=f"pinned/{name}", Body=old)
    etag = s3.head_object(Bucket=bucket, Key=f"pinned/{name}")["ETag"].strip('"')
    reader = S3IOSource(f"s3://{bucket}/pinned/", s3_env).map_reader([name], ranged=True,
                                                                     etags=[etag] if from_index else None)
    assert reader.read(0, 512, 100) == old[512:612]
    s3.put_object(Bucket=bucket, Key=f"pinned/{name}", Body=new)
    for offset in (4096, 512):  # a range not read before, and the one that was
        with pytest.raises(ObjectChanged) as refused:
            reader.read(0, offset, 100)
        message = str(refused.value)
        assert len(message.splitlines()) == 1
        assert f"s3://{bucket}/pinned/{name} was replaced: this run reads ETag {etag}" in message
        assert ("the dataset's index names" if from_index else "was seen when it was first opened") in message
        assert f"resnet.py index s3://{bucket}/pinned/" in message
        assert refused.value.uri == f"s3://{bucket}/pinned/{name}" and refused.value.expected_etag == etag


READS_EACH = 3


@pytest.mark.parametrize("ranged", [True, False], ids=["shard-range", "whole-object"])
def test_s3io_checks_each_objects_version_once_per_process_not_once_per_read(ranged, local_s3, tmp_path):
    """A sample costs one GET (issue 40, 2.3; issue 50, 1.2): the version check used to be a HEAD after every GET
    (two requests per sample), and a range reader of the connector sends a HEAD of its own before each GET to learn
    the size.  A whole object is checked with one HEAD per object per process; a range carries If-Match on its GET
    and needs no HEAD.  Counted at a real logging proxy (nginx) in front of the session's SeaweedFS, as S3 would
    bill them; a copy of the reader made for a DataLoader worker (pickled) is another process: it checks once
    more."""
    heads = 0 if ranged else 1  # per object per process
    from mountctl.s3 import client as s3_client

    from request_log import logged_store

    with logged_store(local_s3, str(tmp_path), files=4, size=64 * 1024, latency_ms=1.0) as store:
        direct = s3_client(local_s3.settings(direct=True))
        etags = [direct.head_object(Bucket=store.bucket, Key=f"imgs/{name}")["ETag"] for name in store.names]
        reader = S3IOSource(store.uri, store.settings).map_reader(store.names, ranged=ranged, etags=etags)
        span = (100, 1000) if ranged else (None, None)
        mark = store.mark()
        for _ in range(READS_EACH):
            for j in range(len(store.names)):
                assert len(reader.read(j, *span)) == (1000 if ranged else 64 * 1024)
        reads = READS_EACH * len(store.names)
        store.settle(mark, "GET", reads)  # nginx logs a request once its answer is sent
        counted = store.since(mark)
        print(f"\n[s3io map reads, {'ranged' if ranged else 'whole'}] {reads} reads of {len(store.names)} objects: "
              f"{dict(counted)}")
        assert counted["GET"] == reads, counted
        assert counted["HEAD"] == heads * len(store.names), counted
        worker = pickle.loads(pickle.dumps(reader))  # what a DataLoader worker gets
        mark = store.mark()
        for j in range(len(store.names)):
            worker.read(j, *span)
            worker.read(j, *span)
        store.settle(mark, "GET", 2 * len(store.names))
        counted = store.since(mark)
        assert counted["GET"] == 2 * len(store.names) and counted["HEAD"] == heads * len(store.names), counted
