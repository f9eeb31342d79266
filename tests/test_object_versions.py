"""A changed object is never read as one with its old bytes: every route fails in one line instead.

The scenario of issue 24: read half of an object, interrupt the read, overwrite the object with other
bytes of the same size, read on.  Without a pin every route finishes with bytes of two versions.  With
it the reader raises ``ObjectChanged`` naming the object and the index command, and every byte it did
return is the old version's.  An unchanged object survives the same interruption and reads whole.

Real components throughout: the session's SeaweedFS, rclone and s3fs-fuse mounts killed with SIGKILL
(the supervisor remounts), s3fs-python and s3torchconnector reading from the server.
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time

import pytest

from mountctl import ObjectChanged, resolve
from mountctl.pytorch.data.sources import MountpointOptions, open_source

from conftest import missing, require_fuse

SIZE = 32 * 1024 * 1024  # past every mount program's first read-ahead with the defaults below
HALF = SIZE // 2
NAME = "shard-000000.tar"  # any key; the reader does not parse it here


def _put(s3, bucket: str, key: str, body: bytes) -> str:
    return s3.put_object(Bucket=bucket, Key=key, Body=body)["ETag"].strip('"')


def _read_rest(stream, into: bytearray) -> None:
    for block in iter(lambda: stream.read(1 << 20), b""):
        into.extend(block)


def _assert_one_line_naming(error: ObjectChanged, uri: str, old: str, new: str | None) -> None:
    text = str(error)
    assert "\n" not in text and uri in text and "resnet.py index" in text, text
    assert error.uri == uri and error.expected_etag == old
    if new is not None and error.etag is not None:
        assert error.etag == new


def _interrupt_and_read_on(shards, interrupt, got: bytearray, s3, bucket: str, uri: str, etag: str,
                           new: bytes | None) -> ObjectChanged | None:
    """Read half of the first shard into ``got``, ``interrupt(stream)``, overwrite the object with ``new`` unless
    it is None, read on.  An overwrite must be refused in one line naming the object and both versions (the
    error is returned); an unchanged object must read on to its end (None)."""
    refused = None
    _, stream = next(shards)
    try:
        got.extend(stream.read(HALF))
        interrupt(stream)
        if new is None:
            _read_rest(stream, got)
        else:
            new_etag = _put(s3, bucket, "data/" + NAME, new)
            with pytest.raises(ObjectChanged) as caught:
                _read_rest(stream, got)
            refused = caught.value
            _assert_one_line_naming(refused, uri + NAME, etag, new_etag)
    finally:
        shards.close()
    return refused


def _remounted(directory: str, first_pid: int, timeout_s: float = 60) -> None:
    """Wait (bounded) until the supervisor runs a new mount program: the read's reopen goes through it."""
    from mountctl.shared import Registry

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = Registry().read(directory)
        if record is not None and record.restarts >= 1:
            return
        time.sleep(0.1)
    raise AssertionError(f"the supervisor did not remount within {timeout_s}s after mount program {first_pid} died")


@pytest.mark.parametrize("backend", ["mount-s3", "rclone", "s3fs"], indirect=True)
@pytest.mark.parametrize("overwrite", [True, False], ids=["overwritten", "unchanged"])
def test_a_mount_killed_mid_read_refuses_an_overwritten_object_and_reads_an_unchanged_one_whole(
        backend, overwrite, s3_env, s3, bucket, mount_root):
    """kill -9 of the mount program mid-read, the object overwritten (same size) before the reader goes on."""
    require_fuse()
    old, new = os.urandom(SIZE), os.urandom(SIZE)
    etag = _put(s3, bucket, "data/" + NAME, old)
    uri = f"s3://{bucket}/data/"
    got = bytearray()
    directory = str(mount_root / "m")
    with open_source("mountpoint", uri, resolve(), mountpoint=MountpointOptions(backend=backend, mount_dir=directory),
                     dataset_bytes=SIZE) as source:
        first_pid = source.mount_pid
        refused = _interrupt_and_read_on(source.open_shards([NAME], etags=[etag]),
                                         lambda _: os.kill(first_pid, signal.SIGKILL),
                                         got, s3, bucket, uri, etag, new if overwrite else None)
        if refused is not None:
            _remounted(directory, first_pid)  # the error came from the reopen through the new mount
    if overwrite:
        assert len(got) < SIZE and bytes(got) == old[:len(got)], "bytes of the new version were returned"
        print(f"\n[object overwritten, {backend} killed] refused after {len(got)} old bytes: {refused}")
    else:
        assert hashlib.sha256(got).digest() == hashlib.sha256(old).digest(), "the unchanged object read wrong"


@pytest.mark.parametrize("kind", ["s3io", "fsspec"])
@pytest.mark.parametrize("overwrite", [True, False], ids=["overwritten", "unchanged"])
def test_a_stream_reopened_at_an_offset_refuses_an_overwritten_object(kind, overwrite, s3_env, s3, bucket):
    """The interruption is made by dropping the open stream, as a connection lost or a key refused drops it
    (tests/test_key_rotation.py revokes a key for real); what this test checks is what the reopen at the
    byte reached finds: the real library reading from the real server after a real overwrite."""
    old, new = os.urandom(SIZE), os.urandom(SIZE)
    etag = _put(s3, bucket, "data/" + NAME, old)
    uri = f"s3://{bucket}/data/"
    got = bytearray()
    with open_source(kind, uri, resolve()) as source:
        # No ETag known: the one seen at the first open is pinned.  The interruption: the next read reopens at HALF.
        _interrupt_and_read_on(source.open_shards([NAME]), lambda stream: stream.raw._drop(),
                               got, s3, bucket, uri, etag, new if overwrite else None)
    if overwrite:
        assert len(got) < SIZE and bytes(got) == old[:len(got)], "bytes of the new version were returned"
    else:
        assert bytes(got) == old


def test_fsspec_reading_on_after_an_overwrite_is_refused_by_if_match(s3_env, s3, bucket):
    """No reopen at all: s3fs's next ranged GET carries the pinned ETag as If-Match and S3 answers 412.

    (s3fs sends the ETag it saw at open by itself; what is ours is the pinned value across reopens and
    the one-line error instead of s3fs's FileExpired.)"""
    old, new = os.urandom(SIZE), os.urandom(SIZE)
    etag = _put(s3, bucket, "data/" + NAME, old)
    uri = f"s3://{bucket}/data/"
    got = bytearray()
    with open_source("fsspec", uri, resolve()) as source:
        shards = source.open_shards([NAME], etags=[etag])
        name, stream = next(shards)
        try:
            got.extend(stream.read(1 << 20))  # s3fs holds one 8 MiB block: the next GET goes to S3
            _put(s3, bucket, "data/" + NAME, new)
            with pytest.raises(ObjectChanged) as caught:
                _read_rest(stream, got)
        finally:
            shards.close()
    _assert_one_line_naming(caught.value, uri + NAME, etag, None)
    assert "If-Match" in str(caught.value)
    assert bytes(got) == old[:len(got)]


@pytest.mark.parametrize("kind", ["s3io", "fsspec", "mountpoint"])
def test_a_resumed_run_refuses_a_shard_replaced_since_it_was_indexed(kind, s3_env, s3, bucket, mount_root):
    """A resume opens its shards again: one replaced since the index (same size) fails at its open."""
    if kind == "mountpoint":
        require_fuse()
    old, new = os.urandom(1 << 20), os.urandom(1 << 20)
    etag = _put(s3, bucket, "data/" + NAME, old)
    new_etag = _put(s3, bucket, "data/" + NAME, new)
    uri = f"s3://{bucket}/data/"
    options = MountpointOptions(backend="rclone", mount_dir=str(mount_root / "m"))
    with open_source(kind, uri, resolve(), mountpoint=options, dataset_bytes=1 << 20) as source:
        shards = source.open_shards([NAME], etags=[etag])
        try:
            with pytest.raises(ObjectChanged) as caught:
                name, stream = next(shards)
                stream.read()
        finally:
            shards.close()
    _assert_one_line_naming(caught.value, uri + NAME, etag, new_etag)
    assert "index names" in str(caught.value)


def test_make_records_each_shards_etag_as_s3_reports_it(s3_env, s3, bucket):
    from mountctl.pytorch.data.index.manifest import load_manifest

    from torch_support import make_tiny_dataset

    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=24, shard_size="8KB")
    manifest = load_manifest(resolve(), uri)
    assert len(manifest.shards) > 1
    for shard in manifest.shards:
        head = s3.head_object(Bucket=bucket, Key="data/" + shard.name)
        assert shard.etag == head["ETag"].strip('"'), shard.name
    files = make_tiny_dataset(f"s3://{bucket}/files/", num_images=4, layout="files").manifest.files
    for info in files:
        assert info.etag == s3.head_object(Bucket=bucket, Key="files/" + info.key)["ETag"].strip('"')


def test_training_reads_each_shard_at_the_version_its_manifest_names(s3_env, s3, bucket):
    """The dataset hands the manifest's ETags to its source: a shard overwritten with other bytes of the
    same size (a start-time size check cannot see it) fails at its open, in one line, through the real
    ShardDataset."""
    from mountctl.pytorch.data.datasets.dataset import ShardDataset
    from mountctl.pytorch.data.index.manifest import load_manifest

    from torch_support import make_tiny_dataset

    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=24, shard_size="8KB")
    manifest = load_manifest(resolve(), uri)
    victim = manifest.shards[-1]
    body = s3.get_object(Bucket=bucket, Key="data/" + victim.name)["Body"].read()
    _put(s3, bucket, "data/" + victim.name, body[:-1] + bytes([body[-1] ^ 1]))  # same size, one bit apart
    seen = 0
    with open_source("fsspec", uri, resolve()) as source:
        dataset = ShardDataset(manifest, source, batch_size=4, seed=0, shuffle=False)
        with pytest.raises(ObjectChanged) as caught:
            for batch in dataset:
                seen += len(batch["index"])
    _assert_one_line_naming(caught.value, uri + victim.name, victim.etag, None)
    assert seen <= manifest.num_images - victim.samples, "samples of the replaced shard were trained"


def test_train_stops_in_one_line_naming_the_replaced_shard_and_its_fix(s3_env, s3, bucket):
    """The whole command line: the error reaches the user as one line, and no traceback follows it (the
    workers' temp dir is no longer removed under workers that outlive a failed run: tests/unit/test_worker_tmp.py)."""
    from torch_support import make_tiny_dataset, run_cli

    uri = f"s3://{bucket}/data/"
    made = make_tiny_dataset(uri, num_images=16, shard_size="8KB").manifest
    victim = made.shards[-1]
    body = s3.get_object(Bucket=bucket, Key="data/" + victim.name)["Body"].read()
    _put(s3, bucket, "data/" + victim.name, body[:-1] + bytes([body[-1] ^ 1]))  # same size, one bit apart
    done = run_cli(["train", uri, "--source-kind", "fsspec", "--arch", "resnet18", "--precision", "32",
                    "--accelerator", "cpu", "--batch-size", "4", "--num-workers", "1", "--max-epochs", "1",
                    "--no-progress"], timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("resnet.py train: error:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    # The start-time check (one LIST against the manifest's ETags) catches it before any read; for data that
    # `make` wrote its fix is `make`, for a user's index it is `index` (tests/test_own_data.py).
    assert f"{uri}{victim.name}" in lines[0] and "replaced" in lines[0], lines[0]
    assert f"resnet.py make {uri}" in lines[0] or f"resnet.py index {uri}" in lines[0], lines[0]


def _tiny_shards_for_mount_s3(s3, bucket: str, *, num_images: int):
    """(uri, manifest, shard names, each shard's bytes now) of a tiny dataset of 8 KB shards, for mount-s3."""
    from mountctl.mounts.backends import BACKENDS
    from mountctl.pytorch.data.index.manifest import load_manifest

    from torch_support import make_tiny_dataset

    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not installed; `bash scripts/setup.sh` builds it")
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=num_images, shard_size="8KB")
    manifest = load_manifest(resolve(), uri)
    names = [shard.name for shard in manifest.shards]
    old = {name: s3.get_object(Bucket=bucket, Key="data/" + name)["Body"].read() for name in names}
    return uri, manifest, names, old


def _wait_for(condition, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s:g} s"
        time.sleep(0.02)


def test_read_ahead_through_mount_s3_never_serves_a_shard_replaced_after_it_was_warmed(s3_env, s3, bucket,
                                                                                      mount_root):
    """``--read-ahead`` warms a reader's next shards into mount-s3's cache before the reader gets there (and reads
    nothing ahead into memory, so the warmed cache is what stands between the reader and S3). A shard overwritten
    after it was warmed whole (same size, one bit apart) is refused at its open, in one line, after every shard
    before it: the open asks S3 for the pinned version, so the cache's old bytes are never served as current."""
    from mountctl.pytorch.data.read_ahead.cache_warmer import warmed

    uri, manifest, names, old = _tiny_shards_for_mount_s3(s3, bucket, num_images=48)
    assert len(manifest.shards) >= 4
    victim = names[2]
    with open_source("mountpoint", uri, resolve(), mountpoint=MountpointOptions(
            backend="mount-s3", mount_dir=str(mount_root / "m"), read_ahead=True)) as source:
        assert source.describe()["read_ahead"] is True and source.describe()["in_memory_ahead"] == 0
        shards = source.open_shards(names, [shard.etag for shard in manifest.shards])
        _, first = next(shards)
        assert first.read() == old[names[0]]
        _wait_for(lambda: warmed(source.read_ahead_dir, victim), "the warm of the third shard into the cache")
        body = old[victim]
        new_etag = _put(s3, bucket, "data/" + victim, body[:-1] + bytes([body[-1] ^ 1]))
        read = [names[0]]
        with pytest.raises(ObjectChanged) as refused:
            for name, stream in shards:
                assert stream.read() == old[name], f"{name} was served with bytes the index does not name"
                read.append(name)
    _assert_one_line_naming(refused.value, uri + victim, manifest.shards[2].etag, new_etag)
    assert read == names[:2]


def test_the_default_read_ahead_into_memory_serves_the_indexed_version_or_refuses_never_the_new_bytes(
        s3_env, s3, bucket, mount_root):
    """By default each reader reads its next shards into memory on threads (next_shards.py). A shard overwritten
    after it was read ahead is delivered as the version the index names (the bytes read before the overwrite); a
    shard overwritten before its read began is refused in one line at its turn, after every shard before it."""
    uri, manifest, names, old = _tiny_shards_for_mount_s3(s3, bucket, num_images=96)
    with open_source("mountpoint", uri, resolve(),
                     mountpoint=MountpointOptions(backend="mount-s3", mount_dir=str(mount_root / "m"))) as source:
        ahead = source.describe()["in_memory_ahead"]
        assert ahead >= 1 and len(names) > ahead + 2, (ahead, len(names))
        near, far = names[1], names[ahead + 2]  # read ahead at the first shard; not yet started
        shards = source.open_shards(names, [shard.etag for shard in manifest.shards])
        _, first = next(shards)
        # the threads of the next shards started before the first was handed over: gone, they have read theirs
        _wait_for(lambda: not any(t.name == f"mountctl-ahead-{near}" for t in threading.enumerate()),
                  f"the read ahead of {near}")
        for victim in (near, far):
            body = old[victim]
            _put(s3, bucket, "data/" + victim, body[:-1] + bytes([body[-1] ^ 1]))
        assert first.read() == old[names[0]]
        read = [names[0]]
        with pytest.raises(ObjectChanged) as refused:
            for name, stream in shards:
                assert stream.read() == old[name], f"{name} was served with bytes the index does not name"
                read.append(name)
    assert near in read, "a shard read ahead before its overwrite is the indexed version: it should be served"
    assert read == names[:names.index(far)], "every shard before the refused one is delivered, none after"
    assert f"{uri}{far}" in str(refused.value).splitlines()[0]
